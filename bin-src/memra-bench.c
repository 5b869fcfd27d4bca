/* memra-bench: how fast the engine and the tokenizer run, against the
 * machine's ceiling. Argument parsing and output only (bin-src/memra-bench/:
 * the options, the model, tokenizer and server benches): the measurements
 * are lib/bench/bench.c, the bandwidth probe and its cache
 * lib/bench/membw.c, the load client lib/bench/loadgen.c. */
#include <stdlib.h>

#include "core/cli.h"

#include "memra-bench/bench_cli.h"

int main(int argc, char **argv)
{
    cli_set_program("memra-bench");
    bench_opts o = {0};
    bench_parse_args(argc, argv, &o);
    int rc = o.server ? bench_run_server(&o)
             : o.tokenizer ? bench_run_tokenizer(&o)
             : o.sampler   ? bench_run_sampler(&o)
                           : bench_run_model(&o);
    free(o.pp.v);
    free(o.tg.v);
    free(o.depths.v);
    free(o.batches.v);
    free(o.conc.v);
    return rc;
}
