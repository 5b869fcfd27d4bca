/* Output helpers the three benches share. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "bench/membw.h"

#include "bench_cli.h"

json_t *bench_host_json(void)
{
    char cpu[128], host[128];
    membw_cpu_model(cpu, sizeof cpu);
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    return json_pack("{s:s,s:s,s:i}", "hostname", host, "cpu", cpu, "n_cpus",
                     membw_online_cpus());
}

void bench_print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    puts(s);
    free(s);
}

void bench_fmt_num(double v, char *out, size_t n)
{
    if (v >= 100)
        snprintf(out, n, "%.1f", v);
    else if (v >= 1)
        snprintf(out, n, "%.2f", v);
    else
        snprintf(out, n, "%.3g", v);
}
