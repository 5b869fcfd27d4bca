/* decode_stream: how fast the fast path's one-token Q8_0 panel kernel
 * streams weights from memory, by the order a thread reads its rows:
 * what bounds a decode step on the CPU, apart from the rest of the step.
 *
 *   decode_stream MIB THREADS [ROWS COLS PASSES]
 *
 * A buffer of MIB MiB of Q8_0 panel rows (random quants, scales 1.0) as
 * matrices of ROWS x COLS (default 1024 x 1024; COLS a multiple of 512),
 * each thread a contiguous share of every matrix, read by the CPU's best
 * level's kernel (MEMRA_CPU_ISA picks another) in three orders:
 *   one      the share's rows in order (what decode does)
 *   far4     the share as four runs (its quarters), a row of each in turn
 *   near4    the share in blocks of 64 rows, each as four runs of 16
 * Prints GB/s of weights, the best of PASSES (default 3). A buffer larger
 * than the CPU's last-level cache measures memory; a smaller one, the
 * cache. For docs/decisions/0018-cpu-fast-path.md ("Decode in several
 * streams"); not a test. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_fast.h"
#include "backend/cpu/cpu_panel.h"
#include "core/clock.h"

enum { ORDER_ONE, ORDER_FAR4, ORDER_NEAR4, ORDER_COUNT };
static const char *const order_names[ORDER_COUNT] = {"one", "far4", "near4"};

typedef struct {
    const uint8_t *buf;
    size_t n_mats, mat_bytes, row_bytes;
    int64_t rows, cols, r0, r1;
    const cpu_kernel *k;
    const cpu_xrow *x;
    int order;
    float sink;
} share;

/* Rows [b0, b1) of one matrix as `runs` runs of consecutive rows, a row
 * of each in turn. */
static float read_runs(const share *s, const uint8_t *m, int64_t b0, int64_t b1, int runs)
{
    float acc = 0;
    int64_t len = (b1 - b0 + runs - 1) / runs;
    for (int64_t i = 0; i < len; i++)
        for (int64_t g = b0 + i; g < b1; g += len)
            acc += s->k->one(m + (size_t)g * s->row_bytes, s->x, s->cols);
    return acc;
}

static void *run_share(void *arg)
{
    share *s = arg;
    float acc = 0;
    for (size_t i = 0; i < s->n_mats; i++) {
        const uint8_t *m = s->buf + i * s->mat_bytes;
        if (s->order == ORDER_ONE)
            acc += read_runs(s, m, s->r0, s->r1, 1);
        else if (s->order == ORDER_FAR4)
            acc += read_runs(s, m, s->r0, s->r1, 4);
        else
            for (int64_t b = s->r0; b < s->r1; b += 64)
                acc += read_runs(s, m, b, b + 64 < s->r1 ? b + 64 : s->r1, 4);
    }
    s->sink = acc;
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 6) {
        fprintf(stderr, "usage: decode_stream MIB THREADS [ROWS COLS PASSES]\n");
        return 2;
    }
    size_t mib = strtoull(argv[1], NULL, 10);
    int threads = atoi(argv[2]);
    int64_t rows = argc == 6 ? atoll(argv[3]) : 1024, cols = argc == 6 ? atoll(argv[4]) : 1024;
    int passes = argc == 6 ? atoi(argv[5]) : 3;
    if (mib == 0 || threads < 1 || threads > 256 || rows < threads || cols <= 0 ||
        cols % CPU_PANEL != 0 || passes < 1) {
        fprintf(stderr, "decode_stream: MIB > 0, 1 <= THREADS <= 256 and <= ROWS, COLS a "
                        "multiple of %d, PASSES >= 1\n", CPU_PANEL);
        return 2;
    }
    const cpu_kernels *ks = cpu_fast_kernels();
    const cpu_kernel *k = cpu_panel_kernel_for_type(ks, DT_Q8_0);
    if (!k || !k->one) {
        fprintf(stderr, "decode_stream: level %s has no Q8_0 panel kernel\n", ks->name);
        return 1;
    }
    size_t row_bytes = (size_t)(cols / CPU_PANEL) * cpu_panel_bytes(DT_Q8_0);
    size_t mat_bytes = row_bytes * (size_t)rows;
    size_t n_mats = (mib << 20) / mat_bytes;
    if (n_mats == 0) {
        fprintf(stderr, "decode_stream: %zu MiB holds no %lld x %lld matrix\n", mib,
                (long long)rows, (long long)cols);
        return 2;
    }
    uint8_t *buf = aligned_alloc(64, (n_mats * mat_bytes + 63) / 64 * 64);
    if (!buf) {
        fprintf(stderr, "decode_stream: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    uint32_t seed = 12345;
    for (size_t i = 0; i < n_mats * mat_bytes; i++) {
        seed = seed * 1664525u + 1013904223u;
        buf[i] = (uint8_t)(seed >> 24);
    }
    size_t pb = cpu_panel_bytes(DT_Q8_0);
    for (size_t p = 0; p + pb <= n_mats * mat_bytes; p += pb)
        for (int b = 0; b < CPU_PANEL_BLOCKS; b++) { /* f16 1.0 */
            buf[p + 2 * b] = 0x00;
            buf[p + 2 * b + 1] = 0x3C;
        }
    float *xf = malloc(sizeof(float) * (size_t)cols);
    int8_t *q = aligned_alloc(64, (size_t)cols), *qp = aligned_alloc(64, (size_t)cols);
    float *d = malloc(sizeof(float) * (size_t)(cols / CPU_QBLOCK));
    int32_t *sums = malloc(sizeof(int32_t) * (size_t)(cols / CPU_QBLOCK));
    int32_t *lo = malloc(sizeof(int32_t) * (size_t)(cols / CPU_QBLOCK));
    for (int64_t i = 0; i < cols; i++)
        xf[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    ks->quantize_x(xf, cols, q, d, sums);
    cpu_panel_x(q, cols, qp, lo);
    cpu_xrow x = {.f = xf, .q = q, .d = d, .s = sums, .p = qp, .lo = lo};
    printf("level %s, %d threads, %zu matrices of %lld x %lld Q8_0 panels (%.1f MiB)\n", ks->name,
           threads, n_mats, (long long)rows, (long long)cols,
           (double)(n_mats * mat_bytes) / (1 << 20));
    share *sh = calloc((size_t)threads, sizeof *sh);
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    for (int order = 0; order < ORDER_COUNT; order++) {
        double best = 1e30;
        for (int pass = 0; pass < passes; pass++) {
            for (int t = 0; t < threads; t++)
                sh[t] = (share){buf, n_mats, mat_bytes, row_bytes, rows, cols,
                                rows * t / threads, rows * (t + 1) / threads, k, &x, order, 0};
            double t0 = clock_now_s();
            for (int t = 0; t < threads; t++)
                pthread_create(&th[t], NULL, run_share, &sh[t]);
            for (int t = 0; t < threads; t++)
                pthread_join(th[t], NULL);
            double dt = clock_now_s() - t0;
            best = dt < best ? dt : best;
        }
        printf("%-6s %8.2f GB/s\n", order_names[order], (double)(n_mats * mat_bytes) / best / 1e9);
    }
    free(sh);
    free(th);
    free(xf);
    free(q);
    free(qp);
    free(d);
    free(sums);
    free(lo);
    free(buf);
    return 0;
}
