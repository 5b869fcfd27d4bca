#include "bench/membw.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/json.h"
#include "core/mapfile.h"
#include "core/pool.h"

#define MEMBW_DEFAULT_BYTES (1ull << 30)
#define MEMBW_MIN_BYTES (64ull << 20)
#define MEMBW_DEFAULT_REPS 10

int membw_online_cpus(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

void membw_utc_now(char *out, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(out, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Copy s into out with the surrounding blanks trimmed. */
static void copy_trimmed(char *out, size_t n, const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    size_t len = strlen(s);
    while (len && (s[len - 1] == '\n' || s[len - 1] == ' ' || s[len - 1] == '\t'))
        len--;
    if (len >= n)
        len = n - 1;
    memcpy(out, s, len);
    out[len] = '\0';
}

void membw_cpu_model(char *out, size_t n)
{
    static const char *keys[] = {"model name", "Processor", "cpu model"};
    snprintf(out, n, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    int best = (int)MEMRA_ARRAY_LEN(keys);
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon)
            continue;
        for (int k = 0; k < best; k++) {
            size_t kl = strlen(keys[k]);
            if (strncmp(line, keys[k], kl) != 0)
                continue;
            const char *rest = line + kl;
            while (*rest == ' ' || *rest == '\t')
                rest++;
            if (rest != colon)
                continue;
            char val[256];
            copy_trimmed(val, sizeof val, colon + 1);
            if (val[0]) {
                snprintf(out, n, "%s", val);
                best = k;
            }
            break;
        }
        if (best == 0)
            break;
    }
    fclose(f);
}

/* ---- the probe ---- */

/* 16 bytes, so the loop reads with 16-byte vector loads on every target
 * (SSE2 on x86-64, NEON on arm64) without target flags. */
typedef uint64_t membw_v2 __attribute__((vector_size(16)));

typedef struct {
    uint8_t *buf;
    uint64_t slice; /* bytes per task, a multiple of 64 */
    uint64_t total;
    int n_tasks;
    uint64_t *sums; /* [n_tasks]: keeps the reads from being optimized away */
} probe_ctx;

static void slice_of(const probe_ctx *c, int task, uint64_t *off, uint64_t *len)
{
    *off = (uint64_t)task * c->slice;
    *len = task == c->n_tasks - 1 ? c->total - *off : c->slice;
}

static void fill_task(void *ctx, int task, int thread)
{
    (void)thread;
    probe_ctx *c = ctx;
    uint64_t off, len;
    slice_of(c, task, &off, &len);
    /* Not zero: untouched or zeroed pages could all map the shared zero page. */
    memset(c->buf + off, 0x5a + task, len);
}

/* Four independent accumulators so the adds never wait on each other and
 * the loads are the only limit. */
static void read_task(void *ctx, int task, int thread)
{
    (void)thread;
    probe_ctx *c = ctx;
    uint64_t off, len;
    slice_of(c, task, &off, &len);
    const membw_v2 *v = (const membw_v2 *)(const void *)(c->buf + off);
    uint64_t n = len / 64;
    membw_v2 a0 = {0, 0}, a1 = {0, 0}, a2 = {0, 0}, a3 = {0, 0};
    for (uint64_t i = 0; i < n; i++) {
        a0 += v[4 * i];
        a1 += v[4 * i + 1];
        a2 += v[4 * i + 2];
        a3 += v[4 * i + 3];
    }
    membw_v2 s = a0 ^ a1 ^ a2 ^ a3;
    c->sums[task] = s[0] ^ s[1];
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The sums are stored here, or the reads could be dropped as dead. */
static volatile uint64_t membw_sink;

static uint64_t available_bytes(void)
{
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

int membw_probe(int n_threads, uint64_t buffer_bytes, int reps, membw_result *out,
                memra_err *err)
{
    memset(out, 0, sizeof *out);
    if (n_threads <= 0)
        n_threads = membw_online_cpus();
    if (reps <= 0)
        reps = MEMBW_DEFAULT_REPS;
    if (buffer_bytes == 0) {
        buffer_bytes = MEMBW_DEFAULT_BYTES;
        uint64_t avail = available_bytes();
        if (avail && buffer_bytes > avail / 4)
            buffer_bytes = avail / 4 > MEMBW_MIN_BYTES ? avail / 4 : MEMBW_MIN_BYTES;
    }
    /* Whole cache lines per task, and at least one line each. */
    int n_tasks = n_threads;
    buffer_bytes &= ~(uint64_t)63;
    if (buffer_bytes < (uint64_t)n_tasks * 64)
        return memra_fail(err, "bandwidth probe: a buffer of %" PRIu64 " bytes is too small "
                          "for %d threads", buffer_bytes, n_threads);
    void *buf = NULL;
    if (posix_memalign(&buf, 64, buffer_bytes) != 0)
        return memra_fail(err, "bandwidth probe: cannot allocate %" PRIu64 " bytes",
                          buffer_bytes);
    probe_ctx c = {
        .buf = buf,
        .slice = (buffer_bytes / (uint64_t)n_tasks) & ~(uint64_t)63,
        .total = buffer_bytes,
        .n_tasks = n_tasks,
        .sums = xcalloc((size_t)n_tasks, sizeof(uint64_t)),
    };
    thread_pool *pool = pool_create(n_threads);
    /* Each slice is touched first by a pool thread, so its pages sit near
     * the threads that read them on a NUMA host (as far as the pool's
     * dynamic hand-out allows). */
    pool_run(pool, n_tasks, fill_task, &c);
    pool_run(pool, n_tasks, read_task, &c); /* untimed: faults, TLB, clocks up */
    double *gbs = xmalloc((size_t)reps * sizeof *gbs);
    uint64_t sink = 0;
    for (int r = 0; r < reps; r++) {
        double t0 = clock_now_s();
        pool_run(pool, n_tasks, read_task, &c);
        double dt = clock_now_s() - t0;
        gbs[r] = dt > 0 ? (double)buffer_bytes / dt / 1e9 : 0;
        for (int i = 0; i < n_tasks; i++)
            sink ^= c.sums[i];
    }
    pool_destroy(pool);
    membw_sink = sink;
    qsort(gbs, (size_t)reps, sizeof *gbs, cmp_double);
    out->gb_s = gbs[reps - 1];
    out->median_gb_s = reps % 2 ? gbs[reps / 2] : (gbs[reps / 2 - 1] + gbs[reps / 2]) / 2;
    out->n_threads = n_threads;
    out->buffer_bytes = buffer_bytes;
    out->reps = reps;
    out->n_cpus = membw_online_cpus();
    membw_cpu_model(out->cpu, sizeof out->cpu);
    if (gethostname(out->hostname, sizeof out->hostname) != 0)
        snprintf(out->hostname, sizeof out->hostname, "unknown");
    out->hostname[sizeof out->hostname - 1] = '\0';
    membw_utc_now(out->measured_at, sizeof out->measured_at);
    free(gbs);
    free(c.sums);
    free(buf);
    return 0;
}

/* ---- the cache ---- */

int membw_cache_path(char *out, size_t n, memra_err *err)
{
    char dir[800];
    const char *cache = getenv("MEMRA_CACHE"), *xdg = getenv("XDG_CACHE_HOME"),
               *home = getenv("HOME");
    if (cache && *cache)
        snprintf(dir, sizeof dir, "%s", cache);
    else if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/memra", xdg);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.cache/memra", home);
    else
        return memra_fail(err, "bandwidth cache: neither MEMRA_CACHE, XDG_CACHE_HOME nor HOME "
                          "is set");
    char host[128];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    /* A host name is one path component. */
    for (char *p = host; *p; p++)
        if (*p == '/')
            *p = '_';
    if ((size_t)snprintf(out, n, "%s/bandwidth-%s.json", dir, host) >= n)
        return memra_fail(err, "bandwidth cache: path under '%s' is too long", dir);
    return 0;
}

static int get_text(const json_t *j, const char *key, char *out, size_t n, const char *path,
                    memra_err *err)
{
    const char *s;
    if (json_get_str(j, key, 1, &s, path, err) != 0)
        return -1;
    if (strlen(s) >= n)
        return memra_fail(err, "%s: \"%s\" is too long", path, key);
    snprintf(out, n, "%s", s);
    return 0;
}

int membw_cache_read(const char *path, membw_result *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    json_t *j = json_load_path(path, 1u << 16, err);
    if (!j)
        return -1;
    int rc = -1;
    int64_t threads, reps, n_cpus, bytes;
    if (!json_is_object(j)) {
        memra_fail(err, "%s: not a JSON object", path);
        goto done;
    }
    if (json_get_num(j, "read_gb_s", 1, &out->gb_s, path, err) != 0 ||
        json_get_num(j, "median_gb_s", 1, &out->median_gb_s, path, err) != 0 ||
        json_get_int(j, "threads", 1, &threads, path, err) != 0 ||
        json_get_int(j, "reps", 1, &reps, path, err) != 0 ||
        json_get_int(j, "n_cpus", 1, &n_cpus, path, err) != 0 ||
        json_get_int(j, "buffer_bytes", 1, &bytes, path, err) != 0 ||
        get_text(j, "cpu", out->cpu, sizeof out->cpu, path, err) != 0 ||
        get_text(j, "hostname", out->hostname, sizeof out->hostname, path, err) != 0 ||
        get_text(j, "measured_at", out->measured_at, sizeof out->measured_at, path, err) != 0)
        goto done;
    if (!(out->gb_s > 0) || out->gb_s > 1e6) {
        memra_fail(err, "%s: read_gb_s %g is not a bandwidth", path, out->gb_s);
        goto done;
    }
    if (threads < 1 || threads > 1 << 20 || reps < 1 || reps > 1 << 20 || n_cpus < 1 ||
        n_cpus > 1 << 20 || bytes < 64) {
        memra_fail(err, "%s: threads, reps, n_cpus or buffer_bytes out of range", path);
        goto done;
    }
    out->n_threads = (int)threads;
    out->reps = (int)reps;
    out->n_cpus = (int)n_cpus;
    out->buffer_bytes = (uint64_t)bytes;
    rc = 0;
done:
    json_decref(j);
    return rc;
}

/* mkdir -p for the directory part of path. */
static int make_parent_dirs(const char *path, memra_err *err)
{
    char *dir = xstrdup(path);
    char *slash = strrchr(dir, '/');
    if (!slash) {
        free(dir);
        return 0;
    }
    *slash = '\0';
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            memra_fail(err, "%s: cannot create: %s", dir, strerror(errno));
            free(dir);
            return -1;
        }
        *p = '/';
    }
    if (*dir && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        memra_fail(err, "%s: cannot create: %s", dir, strerror(errno));
        free(dir);
        return -1;
    }
    free(dir);
    return 0;
}

int membw_cache_write(const char *path, const membw_result *r, memra_err *err)
{
    if (make_parent_dirs(path, err) != 0)
        return -1;
    json_t *j = json_object();
    json_object_set_new(j, "hostname", json_string(r->hostname));
    json_object_set_new(j, "cpu", json_string(r->cpu));
    json_object_set_new(j, "n_cpus", json_integer(r->n_cpus));
    json_object_set_new(j, "read_gb_s", json_real(r->gb_s));
    json_object_set_new(j, "median_gb_s", json_real(r->median_gb_s));
    json_object_set_new(j, "threads", json_integer(r->n_threads));
    json_object_set_new(j, "buffer_bytes", json_integer((json_int_t)r->buffer_bytes));
    json_object_set_new(j, "reps", json_integer(r->reps));
    json_object_set_new(j, "measured_at", json_string(r->measured_at));
    json_object_set_new(j, "method", json_string("host memory read: every online CPU sums its "
                                                 "slice of one buffer with 16-byte loads; best "
                                                 "of reps; GB = 1e9 bytes"));
    char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_INDENT(2));
    json_decref(j);
    size_t len = strlen(s);
    s = xrealloc(s, len + 2);
    s[len] = '\n';
    s[len + 1] = '\0';
    int rc = write_file_atomic(path, s, len + 1, err);
    free(s);
    return rc;
}

int membw_cache_matches(const membw_result *r, const char **why)
{
    char cpu[128];
    membw_cpu_model(cpu, sizeof cpu);
    if (strcmp(cpu, r->cpu) != 0) {
        *why = "the CPU model changed";
        return 0;
    }
    if (r->n_cpus != membw_online_cpus()) {
        *why = "the number of online CPUs changed";
        return 0;
    }
    *why = NULL;
    return 1;
}

int membw_host_ceiling(int remeasure, uint64_t probe_bytes, membw_ceiling *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    memra_err cerr;
    int have_path = membw_cache_path(out->path, sizeof out->path, &cerr) == 0;
    if (!have_path)
        snprintf(out->note, sizeof out->note, "%s", cerr.msg);
    if (have_path && !remeasure && access(out->path, F_OK) == 0) {
        const char *why;
        if (membw_cache_read(out->path, &out->r, &cerr) != 0) {
            snprintf(out->note, sizeof out->note, "cache not used: %s", cerr.msg);
        } else if (!membw_cache_matches(&out->r, &why)) {
            snprintf(out->note, sizeof out->note, "cache %s not used: %s", out->path, why);
        } else {
            out->from_cache = 1;
            return 0;
        }
    }
    if (membw_probe(0, probe_bytes, 0, &out->r, err) != 0)
        return -1;
    if (have_path && membw_cache_write(out->path, &out->r, &cerr) != 0)
        snprintf(out->note, sizeof out->note, "cache not written: %s", cerr.msg);
    return 0;
}
