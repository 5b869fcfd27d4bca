#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/arena.h"
#include "core/err.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/log.h"
#include "core/mapfile.h"
#include "core/pool.h"
#include "core/rng.h"
#include "core/cli.h"
#include "core/cpus.h"
#include <math.h>
#include "core/strbuf.h"
#include "core/strmap.h"
#include "format/dtype.h"
#include "test.h"

static void test_err_wrap(void)
{
    memra_err e;
    CHECK(memra_fail(&e, "offset %d out of range", 7) == -1);
    memra_wrap(&e, "model.gguf");
    CHECK(strcmp(e.msg, "model.gguf: offset 7 out of range") == 0);
    CHECK(memra_fail(NULL, "ignored") == -1);
}

static void test_strbuf(void)
{
    strbuf sb;
    sb_init(&sb);
    CHECK(strcmp(sb_str(&sb), "") == 0);
    for (int i = 0; i < 1000; i++)
        sb_printf(&sb, "%d,", i);
    CHECK(sb.len == strlen(sb.data));
    CHECK(strncmp(sb.data, "0,1,2,", 6) == 0);
    sb_clear(&sb);
    sb_putc(&sb, 'x');
    sb_append(&sb, "yz", 2);
    char *s = sb_take(&sb);
    CHECK(strcmp(s, "xyz") == 0);
    CHECK(sb.data == NULL);
    free(s);
}

static void test_arena(void)
{
    arena a;
    arena_init(&a, 64);
    char *p[100];
    for (int i = 0; i < 100; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "string-%d", i);
        p[i] = arena_strdup(&a, buf);
        CHECK(((uintptr_t)p[i] & 15) == 0);
    }
    CHECK(strcmp(p[0], "string-0") == 0 && strcmp(p[99], "string-99") == 0);
    void *big = arena_alloc(&a, 1 << 20);
    CHECK(((unsigned char *)big)[(1 << 20) - 1] == 0);
    arena_free(&a);
}

typedef struct {
    int64_t sums[64];
} pool_ctx;

static void add_task(void *ctx, int i, int thread)
{
    (void)thread;
    pool_ctx *c = ctx;
    c->sums[i] = (int64_t)i * i;
}

typedef struct {
    atomic_int runs[97];
} count_ctx;

static void count_task(void *ctx, int i, int thread)
{
    (void)thread;
    atomic_fetch_add(&((count_ctx *)ctx)->runs[i], 1);
}

/* Jobs back to back (the workers still spinning), and after pauses long
 * enough that they sleep: every task of every job runs exactly once, and
 * the job is over when pool_run returns. */
static void test_pool_spin_and_sleep(void)
{
    for (int threads = 2; threads <= 4; threads++) {
        thread_pool *p = pool_create(threads);
        count_ctx c;
        for (int job = 0; job < 3000; job++) {
            int n = 1 + job % 97;
            for (int i = 0; i < n; i++)
                atomic_init(&c.runs[i], 0);
            pool_run(p, n, count_task, &c);
            int bad = 0;
            for (int i = 0; i < n; i++)
                bad += atomic_load(&c.runs[i]) != 1;
            CHECK_MSG(bad == 0, "%d threads, job %d: %d tasks ran other than once", threads, job,
                      bad);
            if (job % 500 == 499)
                usleep(20000); /* past the spin: the workers sleep */
        }
        pool_destroy(p);
    }
}

static void test_pool(void)
{
    for (int threads = 1; threads <= 4; threads++) {
        thread_pool *p = pool_create(threads);
        CHECK(pool_size(p) == threads);
        for (int round = 0; round < 50; round++) {
            pool_ctx c;
            memset(&c, 0, sizeof c);
            pool_run(p, 64, add_task, &c);
            int64_t total = 0;
            for (int i = 0; i < 64; i++)
                total += c.sums[i];
            CHECK(total == 85344); /* sum of i^2, i < 64 */
        }
        pool_destroy(p);
    }
}

static void test_json_getters(void)
{
    memra_err e;
    json_t *j = json_parse_buf("{\"a\":4096.0,\"b\":\"x\",\"c\":1.5,\"d\":true}", 37, "t", &e);
    CHECK(j != NULL);
    int64_t a = 0;
    CHECK(json_get_int(j, "a", 1, &a, "t", &e) == 0 && a == 4096);
    CHECK(json_get_int(j, "c", 1, &a, "t", &e) == -1);
    CHECK(strstr(e.msg, "\"c\" must be an integer") != NULL);
    CHECK(json_get_int(j, "zz", 1, &a, "t", &e) == -1);
    CHECK(strstr(e.msg, "missing required key \"zz\"") != NULL);
    a = 7;
    CHECK(json_get_int(j, "zz", 0, &a, "t", &e) == 0 && a == 7);
    const char *s;
    CHECK(json_get_str(j, "b", 1, &s, "t", &e) == 0 && strcmp(s, "x") == 0);
    int d;
    CHECK(json_get_bool(j, "d", 1, &d, "t", &e) == 0 && d == 1);
    json_decref(j);
    CHECK(json_parse_buf("{\"a\":1,\"a\":2}", 13, "dup.json", &e) == NULL);
    CHECK(strncmp(e.msg, "dup.json: invalid JSON", 22) == 0);
}

static void test_files(void)
{
    memra_err e;
    char path[512];
    snprintf(path, sizeof path, "%s/core-file.bin", test_tmp_dir());
    CHECK(write_file_atomic(path, "hello", 5, &e) == 0);
    mapped_file mf;
    CHECK(map_file(path, &mf, &e) == 0);
    CHECK(mf.size == 5 && memcmp(mf.data, "hello", 5) == 0);
    unmap_file(&mf);
    char *buf;
    size_t len;
    CHECK(read_small_file(path, 4, &buf, &len, &e) == -1);
    CHECK(strstr(e.msg, "larger than") != NULL);
    CHECK(read_small_file(path, 5, &buf, &len, &e) == 0 && len == 5);
    free(buf);
    CHECK(map_file("/nonexistent/x.gguf", &mf, &e) == -1);
    CHECK(strstr(e.msg, "/nonexistent/x.gguf: cannot open") != NULL);
    CHECK(map_file("/", &mf, &e) == -1);
}

static void test_dtype_table(void)
{
    CHECK(dtype_get(DT_Q4_K)->type_size == 144 && dtype_get(DT_Q4_K)->block_size == 256);
    CHECK(dtype_get(4) == NULL && dtype_get(31) == NULL);
    CHECK(dtype_from_name("bf16") == DT_BF16);
    CHECK(dtype_from_st_name("F8_E4M3") == DT_F8_E4M3);
    CHECK(!dtype_in_ggml(DT_F8_E4M3) && dtype_in_ggml(DT_MXFP4));
    CHECK(dtype_row_bytes(DT_Q8_0, 64) == 68);
    CHECK(dtype_row_bytes(DT_Q8_0, 33) == -1);
    CHECK(dtype_row_bytes(DT_F32, INT64_MAX / 2) == -1);
}

static void test_log_levels(void)
{
    CHECK(log_parse_level("debug") == LOG_DEBUG);
    CHECK(log_parse_level("WARN") == LOG_WARN);
    CHECK(log_parse_level("2") == LOG_INFO);
    CHECK(log_parse_level("loud") == -1);
}

static void test_rng(void)
{
    rng_state a, b, c;
    rng_seed(&a, 42, 7);
    rng_seed(&b, 42, 7);
    rng_seed(&c, 42, 8);
    int same = 1, differ = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t x = rng_next_u64(&a), y = rng_next_u64(&b), z = rng_next_u64(&c);
        same &= x == y;
        differ |= x != z;
    }
    CHECK(same && differ);
    double sum = 0, sq = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        float v = rng_normal(&a);
        CHECK(isfinite(v));
        sum += v;
        sq += (double)v * v;
    }
    double mean = sum / n, var = sq / n - mean * mean;
    CHECK_MSG(fabs(mean) < 0.01 && fabs(var - 1.0) < 0.02, "mean %f var %f", mean, var);
    CHECK(rng_hash_str("a") != rng_hash_str("b"));
}

/* FNV-1a's published vectors: census checksums and random-weight streams
 * depend on these values, so they are pinned. */
static void test_hash(void)
{
    CHECK(hash_fnv1a64("", 0) == 0xcbf29ce484222325ull);
    CHECK(hash_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
    CHECK(hash_fnv1a64_str("foobar") == 0x85944171f73967e8ull);
    CHECK(hash_fnv1a64("foobar", 6) == hash_fnv1a64_str("foobar"));
    CHECK(hash_fnv1a32_str("a") == 0xe40c292cu);
    CHECK(hash_fnv1a32_str("foobar") == 0xbf9cf968u);
    CHECK(rng_hash_str("blk.0.attn_q.weight") == hash_fnv1a64_str("blk.0.attn_q.weight"));
}

static void test_strmap(void)
{
    strmap m;
    strmap_init(&m, 2);
    static char keys[3000][16];
    for (int i = 0; i < 3000; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        CHECK(strmap_put(&m, keys[i], strlen(keys[i]), i) == i);
    }
    CHECK(m.n == 3000 && m.cap >= 6000);
    CHECK(strmap_put(&m, "k7", 2, 99) == 7); /* present: the first value stays */
    CHECK(strmap_get(&m, "k2999", 5) == 2999);
    CHECK(strmap_get(&m, "k29990", 6) == -1);
    CHECK(strmap_get(&m, "k1", 1) == -1); /* a prefix is another key */
    CHECK(strmap_put(&m, "", 0, 5000) == 5000 && strmap_get(&m, "", 0) == 5000);
    strmap_free(&m);
    CHECK(strmap_get(&m, "k7", 2) == -1);
}

static void test_cli_parse(void)
{
    memra_err e;
    int64_t v;
    CHECK(cli_parse_i64("42", 0, 100, &v, "--seed", &e) == 0 && v == 42);
    CHECK(cli_parse_i64("42x", 0, 100, &v, "--seed", &e) == -1);
    CHECK(strstr(e.msg, "--seed: '42x' is not an integer") != NULL);
    CHECK(cli_parse_i64("101", 0, 100, &v, "-n", &e) == -1);
    CHECK(strstr(e.msg, "out of range") != NULL);
    double d;
    CHECK(cli_parse_f64("4.5e3", 1, 1e6, &d, "--bandwidth", &e) == 0 && d == 4500);
    CHECK(cli_parse_f64("nan", 1, 1e6, &d, "--bandwidth", &e) == -1);
    uint64_t b;
    CHECK(cli_parse_bytes("5GB", &b, "--shard-size", &e) == 0 && b == 5000000000ull);
    CHECK(cli_parse_bytes("2MiB", &b, "--shard-size", &e) == 0 && b == 2097152ull);
    CHECK(cli_parse_bytes("3parsecs", &b, "--shard-size", &e) == -1);
    char h[16];
    cli_human_bytes(999, h, sizeof h);
    CHECK(strcmp(h, "999 B") == 0);
    cli_human_bytes(1500, h, sizeof h);
    CHECK(strcmp(h, "1.5 kB") == 0);
    cli_human_bytes(22245343232ull, h, sizeof h);
    CHECK(strcmp(h, "22.25 GB") == 0);
    cli_human_bytes(5000000ull, h, 4); /* truncated, terminated */
    CHECK(strcmp(h, "5.0") == 0);
}

/* Runs fn(arg) in a child with stderr into a pipe: its exit status, and
 * what it wrote there in line. */
static int run_child(void (*fn)(const char *), const char *arg, char *line, size_t n)
{
    int fd[2];
    if (pipe(fd) != 0)
        return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    size_t used = 0; /* stderr is unbuffered: the line comes in pieces */
    for (ssize_t got; used < n - 1 && (got = read(fd[0], line + used, n - 1 - used)) > 0;)
        used += (size_t)got;
    line[used] = '\0';
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void int_or_usage_child(const char *s) { cli_int_or_usage(s, 1, 9, "--reps"); }

static void threads_child(const char *s)
{
    setenv("MEMRA_THREADS", s, 1);
    cli_threads_default();
}

static void test_cli_or_usage(void)
{
    char line[256];
    cli_set_program("memra-test");
    CHECK(cli_int_or_usage("7", 1, 9, "--reps") == 7);
    CHECK(run_child(int_or_usage_child, "7", line, sizeof line) == 0 && !line[0]);
    CHECK(run_child(int_or_usage_child, "x7", line, sizeof line) == 2);
    CHECK_MSG(!strcmp(line, "memra-test: --reps: 'x7' is not an integer (try --help)\n"), "%s", line);
    CHECK(run_child(int_or_usage_child, "10", line, sizeof line) == 2);
    CHECK_MSG(!strcmp(line, "memra-test: --reps: 10 is out of range [1, 9] (try --help)\n"), "%s", line);
    CHECK(run_child(threads_child, "0", line, sizeof line) == 2);
    CHECK_MSG(strstr(line, "MEMRA_THREADS: 0 is out of range") && strchr(line, '\n') == line + strlen(line) - 1, "%s", line);
    CHECK(run_child(threads_child, "many", line, sizeof line) == 2);
    CHECK_MSG(strstr(line, "MEMRA_THREADS: 'many' is not an integer"), "%s", line);

    const char *saved = getenv("MEMRA_THREADS");
    char *keep = saved ? strdup(saved) : NULL;
    setenv("MEMRA_THREADS", "3", 1);
    CHECK(cli_threads_default() == 3);
    setenv("MEMRA_THREADS", "", 1); /* empty is unset */
    CHECK(cli_threads_default() == (int)sysconf(_SC_NPROCESSORS_ONLN));
    unsetenv("MEMRA_THREADS");
    CHECK(cli_threads_default() == (int)sysconf(_SC_NPROCESSORS_ONLN));
    if (keep)
        setenv("MEMRA_THREADS", keep, 1);
    free(keep);

    unsetenv("MEMRA_TEST_FLAG");
    CHECK(!cli_env_true("MEMRA_TEST_FLAG"));
    const char *yes[] = {"1", "true", "TRUE", "yes", "Yes"}, *no[] = {"0", "", "no", "on", "2"};
    for (size_t i = 0; i < 5; i++) {
        setenv("MEMRA_TEST_FLAG", yes[i], 1);
        CHECK_MSG(cli_env_true("MEMRA_TEST_FLAG"), "%s", yes[i]);
        setenv("MEMRA_TEST_FLAG", no[i], 1);
        CHECK_MSG(!cli_env_true("MEMRA_TEST_FLAG"), "%s", no[i]);
    }
    unsetenv("MEMRA_TEST_FLAG");
}

/* A sysfs tree of our own for the CPUs this process may run on: core ids
 * from core_of(i) (the i-th CPU of the mask), one package; a CPU with
 * core_of < 0 gets no topology files. */
static void fake_sysfs(const char *root, const int *cpus, int n, int (*core_of)(int))
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    for (int i = 0; i < n; i++) {
        char dir[512], path[600];
        snprintf(dir, sizeof dir, "%s/devices/system/cpu/cpu%d/topology", root, cpus[i]);
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        CHECK(system(cmd) == 0);
        if (core_of(i) < 0)
            continue;
        snprintf(path, sizeof path, "%s/physical_package_id", dir);
        FILE *f = fopen(path, "w");
        CHECK(f != NULL);
        fprintf(f, "0\n");
        fclose(f);
        snprintf(path, sizeof path, "%s/core_id", dir);
        f = fopen(path, "w");
        CHECK(f != NULL);
        fprintf(f, "%d\n", core_of(i));
        fclose(f);
    }
}
static int core_pairs(int i) { return i / 2; }
static int core_each(int i) { return 10 + i; }
static int core_first_unknown(int i) { return i == 0 ? -1 : 0; }

static void test_physical_cores(void)
{
    cpu_set_t mask;
    CHECK(sched_getaffinity(0, sizeof mask, &mask) == 0);
    int cpus[CPU_SETSIZE], n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &mask))
            cpus[n++] = c;
    CHECK(n >= 1);
    char root[256];
    snprintf(root, sizeof root, "/tmp/memra-test-sysfs.%d", (int)getpid());
    /* Two hardware threads a core: half the CPUs, rounded up. */
    fake_sysfs(root, cpus, n, core_pairs);
    CHECK_MSG(cpus_physical_cores(root) == (n + 1) / 2, "pairs: %d of %d CPUs", cpus_physical_cores(root), n);
    /* A core each: every CPU. */
    fake_sysfs(root, cpus, n, core_each);
    CHECK(cpus_physical_cores(root) == n);
    /* A CPU without topology: all the CPUs of the mask, not a guess. */
    fake_sysfs(root, cpus, n, core_first_unknown);
    CHECK(cpus_physical_cores(root) == n);
    /* No tree at all: the same. */
    char none[300];
    snprintf(none, sizeof none, "%s/nothing", root);
    CHECK(cpus_physical_cores(none) == n);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK(system(cmd) == 0);
    /* The real machine: between 1 and the CPUs of the mask. */
    int real = cpus_physical_cores("/sys");
    CHECK(real >= 1 && real <= n);
}

TEST_MAIN(TEST_CASE(test_rng), TEST_CASE(test_hash), TEST_CASE(test_strmap), TEST_CASE(test_cli_parse), TEST_CASE(test_cli_or_usage), TEST_CASE(test_err_wrap), TEST_CASE(test_strbuf), TEST_CASE(test_arena),
          TEST_CASE(test_pool), TEST_CASE(test_pool_spin_and_sleep), TEST_CASE(test_json_getters), TEST_CASE(test_files),
          TEST_CASE(test_dtype_table), TEST_CASE(test_log_levels), TEST_CASE(test_physical_cores))
