#include "core/cli.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/cpus.h"

static const char *program_name = "memra";

void cli_set_program(const char *name)
{
    const char *slash = strrchr(name, '/');
    program_name = slash ? slash + 1 : name;
}

const char *cli_program(void) { return program_name; }

void cli_fail(const memra_err *err)
{
    fprintf(stderr, "%s: %s\n", program_name, err->msg);
    exit(MEMRA_EXIT_FAIL);
}

void cli_failf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", program_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(MEMRA_EXIT_FAIL);
}

void cli_usage(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", program_name);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (try --help)\n");
    va_end(ap);
    exit(MEMRA_EXIT_USAGE);
}

int cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, const char *what,
                  memra_err *err)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno == ERANGE)
        return memra_fail(err, "%s: '%s' is not an integer", what, s);
    if (v < min || v > max)
        return memra_fail(err, "%s: %lld is out of range [%lld, %lld]", what, v, (long long)min,
                          (long long)max);
    *out = v;
    return 0;
}

int64_t cli_int_or_usage(const char *s, int64_t min, int64_t max, const char *what)
{
    memra_err err;
    int64_t v;
    if (cli_parse_i64(s, min, max, &v, what, &err) != 0)
        cli_usage("%s", err.msg);
    return v;
}

int cli_parse_int_list(const char *s, int64_t min, int64_t max, int *out, int max_n,
                       const char *what, memra_err *err)
{
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char item[32];
        if (len == 0 || len >= sizeof item)
            return memra_fail(err, "%s: '%s' is not a comma-separated list of integers", what, s);
        if (n == max_n)
            return memra_fail(err, "%s: '%s' has more than %d items", what, s, max_n);
        memcpy(item, p, len);
        item[len] = 0;
        int64_t v;
        if (cli_parse_i64(item, min, max, &v, what, err) != 0)
            return -1;
        out[n++] = (int)v;
        if (!comma)
            return n;
        p = comma + 1;
    }
}

int cli_env_true(const char *name)
{
    const char *v = getenv(name);
    return v && (!strcmp(v, "1") || !strcasecmp(v, "true") || !strcasecmp(v, "yes"));
}

int cli_threads_default(void)
{
    const char *env = getenv("MEMRA_THREADS");
    if (env && *env)
        return (int)cli_int_or_usage(env, 1, 4096, "MEMRA_THREADS");
    return cpus_physical_cores("/sys");
}

int cli_parse_f64(const char *s, double min, double max, double *out, const char *what,
                  memra_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno == ERANGE || !isfinite(v))
        return memra_fail(err, "%s: '%s' is not a number", what, s);
    if (v < min || v > max)
        return memra_fail(err, "%s: %g is out of range [%g, %g]", what, v, min, max);
    *out = v;
    return 0;
}

int cli_parse_bytes(const char *s, uint64_t *out, const char *what, memra_err *err)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE || !isfinite(v) || v < 0)
        return memra_fail(err, "%s: '%s' is not a byte size", what, s);
    static const struct {
        const char *suffix;
        double mult;
    } units[] = {{"", 1},           {"B", 1},           {"K", 1e3},          {"KB", 1e3},
                 {"M", 1e6},        {"MB", 1e6},        {"G", 1e9},          {"GB", 1e9},
                 {"T", 1e12},       {"TB", 1e12},       {"KiB", 1024.0},     {"MiB", 1048576.0},
                 {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (!strcasecmp(end, units[i].suffix)) {
            double bytes = v * units[i].mult;
            if (bytes > 1.8e19)
                return memra_fail(err, "%s: '%s' is too large", what, s);
            *out = (uint64_t)bytes;
            return 0;
        }
    }
    return memra_fail(err, "%s: '%s' has an unknown unit (use K, M, G, T or KiB, MiB, GiB)", what, s);
}

void cli_human_bytes(uint64_t b, char *out, size_t n)
{
    if (b >= 1000000000ull)
        snprintf(out, n, "%.2f GB", b / 1e9);
    else if (b >= 1000000ull)
        snprintf(out, n, "%.2f MB", b / 1e6);
    else if (b >= 1000ull)
        snprintf(out, n, "%.1f kB", b / 1e3);
    else
        snprintf(out, n, "%" PRIu64 " B", b);
}
