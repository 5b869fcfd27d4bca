/* memra-convert: HF <-> GGUF, dtype changes, random-weight checkpoints.
 * Argument parsing only; the pipeline is lib/model/convert.c. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/cli.h"
#include "core/log.h"
#include "model/checkpoint.h"
#include "model/convert.h"

static const char usage[] =
    "usage: memra-convert SRC DST [--outtype f32|f16|bf16|q8_0] [--shard-size BYTES] [-t N]\n"
    "       memra-convert --random CONFIG.json DST [--seed N] [--tokenizer DIR] [--outtype T]\n"
    "       memra-convert --vocab-only HF_DIR DST.gguf\n"
    "\n"
    "DST ending in .gguf is written as GGUF v3, anything else as an HF checkpoint dir.\n"
    "SRC is a GGUF file, an HF checkpoint dir, or hf:owner/repo[:file].\n"
    "\n"
    "  --outtype T        f32, f16 or bf16 for the matrices (default: keep; bf16 for --random),\n"
    "                     or q8_0 into a GGUF file (a random model too large for its bf16\n"
    "                     file, then memra-quantize --allow-requantize)\n"
    "  --random CONFIG    seeded random weights for the HF config.json CONFIG\n"
    "  --seed N           seed for --random (default 0)\n"
    "  --tokenizer DIR    tokenizer files to carry into a --random checkpoint\n"
    "  --vocab-only       write only the tokenizer of HF_DIR as a GGUF\n"
    "  --shard-size BYTES largest safetensors shard (default 5G, 0 = one file)\n"
    "  -t, --threads N    worker threads (default all cores; env MEMRA_THREADS)\n"
    "  -h, --help         this text\n"
    "\n"
    "Exit status: 0 ok, 1 failure, 2 bad usage.\n";

int main(int argc, char **argv)
{
    cli_set_program("memra-convert");
    memra_err err;
    convert_opts o = {.outtype = DT_INVALID, .n_threads = 0, .shard_bytes = 5000000000ull};
    const char *random_config = NULL;
    int vocab_only = 0, seed_given = 0;
    int64_t seed = 0, threads = cli_threads_default();
    static const struct option longs[] = {
        {"outtype", required_argument, NULL, 'o'},   {"random", required_argument, NULL, 'r'},
        {"seed", required_argument, NULL, 's'},      {"tokenizer", required_argument, NULL, 'k'},
        {"vocab-only", no_argument, NULL, 'v'},      {"shard-size", required_argument, NULL, 'S'},
        {"threads", required_argument, NULL, 't'},   {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":t:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'o':
            if (!strcasecmp(optarg, "f32"))
                o.outtype = DT_F32;
            else if (!strcasecmp(optarg, "f16"))
                o.outtype = DT_F16;
            else if (!strcasecmp(optarg, "bf16"))
                o.outtype = DT_BF16;
            else if (!strcasecmp(optarg, "q8_0"))
                o.outtype = DT_Q8_0;
            else
                cli_usage("--outtype: '%s' is not one of f32, f16, bf16, q8_0 (other quantized "
                          "types: memra-quantize)", optarg);
            break;
        case 'r': random_config = optarg; break;
        case 's':
            if (cli_parse_i64(optarg, 0, INT64_MAX, &seed, "--seed", &err) != 0)
                cli_usage("%s", err.msg);
            seed_given = 1;
            break;
        case 'k': o.tokenizer_dir = optarg; break;
        case 'v': vocab_only = 1; break;
        case 'S':
            if (cli_parse_bytes(optarg, &o.shard_bytes, "--shard-size", &err) != 0)
                cli_usage("%s", err.msg);
            break;
        case 't':
            if (cli_parse_i64(optarg, 1, 4096, &threads, "--threads", &err) != 0)
                cli_usage("%s", err.msg);
            break;
        case 'h': fputs(usage, stdout); return 0;
        case ':': cli_usage("%s needs a value", argv[optind - 1]);
        default: cli_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    o.n_threads = (int)threads;
    int n_pos = argc - optind;
    if (random_config && vocab_only)
        cli_usage("--random and --vocab-only do not go together");
    if (!random_config && (seed_given || o.tokenizer_dir))
        cli_usage("--seed and --tokenizer only apply to --random");
    if (random_config) {
        if (n_pos != 1)
            cli_usage("--random CONFIG.json takes exactly one DST");
        if (convert_random(random_config, (uint64_t)seed, argv[optind], &o, &err) != 0)
            cli_fail(&err);
        log_info("wrote %s", argv[optind]);
        return 0;
    }
    if (n_pos != 2)
        cli_usage(n_pos < 2 ? "SRC and DST are required" : "unexpected argument '%s'",
                  argv[optind + 2 < argc ? optind + 2 : optind]);
    const char *src = argv[optind], *dst = argv[optind + 1];
    if (vocab_only) {
        if (!convert_dst_is_gguf(dst))
            cli_usage("--vocab-only writes a GGUF: DST must end in .gguf");
        if (convert_vocab_only(src, dst, &err) != 0)
            cli_fail(&err);
        return 0;
    }
    checkpoint c;
    if (checkpoint_open(src, &c, &err) != 0)
        cli_fail(&err);
    int rc = convert_checkpoint(&c, dst, &o, &err);
    checkpoint_close(&c);
    if (rc != 0)
        cli_fail(&err);
    return 0;
}
