/* The CPU fast path (docs/decisions/0018-cpu-fast-path.md) against the
 * reference: every kernel on every ISA level this CPU has, within the
 * decision's bound per dot product; x's int8 blocks; and the invariances
 * of the ops on the fast backend (byte-identical outputs whatever the
 * thread count, the batch or a token's place in it). A level the CPU
 * lacks is SKIP. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_fast.h"
#include "backend/kv_cache.h"
#include "core/check.h"
#include "numerics/kv_codec.h"
#include "core/rng.h"
#include "format/dequant.h"
#include "numerics/half.h"
#include "backend/cpu/cpu_decode_split.h"
#include "backend/cpu/cpu_panel.h"
#include "test.h"
#include "test_weight.h"

static rng_state rng;

static const char *const isa_names[] = {"scalar", "avx2", "avx512", "neon", "dotprod", "amx"};

/* The kernels of level isa, or NULL with the case marked SKIP. */
static const cpu_kernels *level_or_skip(cpu_isa isa)
{
    memra_err err;
    const cpu_kernels *k = cpu_kernels_for(isa, &err);
    if (!k) {
        char why[96];
        snprintf(why, sizeof why, "this CPU has no %s level (best: %s)", isa_names[isa],
                 isa_names[cpu_isa_best()]);
        test_skip(why);
    }
    return k;
}

static const dtype fast_types[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q8_0,  DT_Q4_0,
                                   DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_NVFP4, DT_MXFP8};

/* Random weights from this file's generator (tests/unit/test_weight.h). */
static void make_weight(bk_weight *w, dtype t, int64_t rows, int64_t cols)
{
    test_make_weight(w, t, rows, cols, &rng);
}

/* x of n values: normal, with a few outliers, and (n >= 64) one block of
 * zeros, so the int8 rounding meets its hard cases. */
static void make_x(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = rng_normal(&rng) * (rng_uniform(&rng) < 0.02 ? 40.0f : 1.0f);
    if (n >= 64)
        memset(x + 32, 0, 32 * sizeof *x);
}

typedef struct {
    int8_t *q, *p;
    float *d;
    int32_t *s, *lo;
} xq_buf;

static cpu_xrow make_xrow(const float *x, int64_t n, xq_buf *b)
{
    int64_t nb = n / 32 + 1;
    b->q = malloc((size_t)n + 32);
    b->d = malloc((size_t)nb * sizeof(float));
    b->s = malloc((size_t)nb * sizeof(int32_t));
    b->p = malloc((size_t)n + 32);
    b->lo = malloc((size_t)nb * sizeof(int32_t));
    cpu_xrow xr = {x, NULL, NULL, NULL, NULL, NULL};
    if (n % 32 == 0) {
        cpu_quantize_x(x, n, b->q, b->d, b->s);
        xr.q = b->q;
        xr.d = b->d;
        xr.s = b->s;
    }
    if (n % CPU_PANEL == 0) {
        cpu_panel_x(b->q, n, b->p, b->lo);
        xr.p = b->p;
        xr.lo = b->lo;
    }
    return xr;
}

static void free_xq(xq_buf *b)
{
    free(b->p);
    free(b->lo);
    free(b->q);
    free(b->d);
    free(b->s);
}

/* The decision's bound for one dot product of weight row `row` (the
 * reference's dequantized values wd) with x. */
static double fast_bound(dtype t, const uint8_t *row, const float *wd, const float *x,
                         const cpu_xrow *xr, int64_t n)
{
    const double u = ldexp(1.0, -24), k = (double)n / 4 + 16;
    double S = 0, Sq = 0, xround = 0;
    for (int64_t i = 0; i < n; i++) {
        double wm = fabs(wd[i]);
        if (t == DT_Q4_K || t == DT_Q5_K) {
            /* |d sc q| + |dmin m|: the two parts summed apart */
            int64_t sb = i / 256, j = (i % 256) / 32;
            const uint8_t *blk = row + sb * (t == DT_Q4_K ? 144 : 176);
            uint8_t sc, m;
            dequant_k4_scale_min((int)j, blk + 4, &sc, &m);
            double m1 = fabs((double)fp16_to_f32((uint16_t)(blk[2] | (blk[3] << 8))) * m);
            wm = fabs(wd[i] + m1) + m1;
        }
        S += wm * fabs(x[i]);
        if (cpu_type_reads_q8(t))
            Sq += wm * fabs((double)xr->d[i / 32] * xr->q[i]);
    }
    if (!cpu_type_reads_q8(t))
        return k * u * S;
    for (int64_t b = 0; b < n / 32; b++) {
        double amax = 0, wsum = 0;
        for (int j = 0; j < 32; j++) {
            amax = fmax(amax, fabs(x[b * 32 + j]));
            wsum += fabs(wd[b * 32 + j]);
        }
        xround += amax / 254 * wsum;
    }
    return 1.001 * xround + k * u * (S + Sq);
}

static const int64_t widths_plain[] = {8, 100, 1000, 4103};
static const int64_t widths_q32[] = {32, 96, 1024, 4096};
static const int64_t widths_q256[] = {256, 768, 3072};
static const int64_t widths_q64[] = {64, 192, 1024, 4096};

static void kernels_vs_reference(cpu_isa isa)
{
    const cpu_kernels *k = level_or_skip(isa);
    if (!k)
        return;
    int checked = 0, checked_rows = 0, checked_seq = 0;
    for (size_t ti = 0; ti < MEMRA_ARRAY_LEN(fast_types); ti++) {
        dtype t = fast_types[ti];
        int bs = dtype_get(t)->block_size;
        const int64_t *widths = bs == 256 ? widths_q256
                              : bs == 64  ? widths_q64
                              : bs == 32  ? widths_q32
                                          : widths_plain;
        size_t nw = bs == 256 ? MEMRA_ARRAY_LEN(widths_q256) : MEMRA_ARRAY_LEN(widths_q32);
        const cpu_kernel *kt = cpu_kernel_for_type(k, t);
        CHECK_MSG(kt && kt->one, "%s has no %s kernel", k->name, dtype_get(t)->name);
        if (!kt || !kt->one)
            continue;
        cpu_dot_fn fn = kt->one;
        for (size_t wi = 0; wi < nw; wi++) {
            int64_t n = widths[wi];
            const int rows = 6;
            bk_weight w;
            make_weight(&w, t, rows, n);
            float *x = malloc((size_t)n * sizeof *x), *wd = malloc((size_t)n * sizeof *wd);
            make_x(x, n);
            xq_buf xb;
            cpu_xrow xr = make_xrow(x, n, &xb);
            for (int r = 0; r < rows; r++) {
                const uint8_t *row = w.data + (size_t)r * w.row_bytes;
                CHECK(dequant_row(t, row, wd, n, NULL) == 0);
                float ref = cpu_dot(wd, x, n);
                float got = fn(row, &xr, n);
                double bound = fast_bound(t, row, wd, x, &xr, n);
                CHECK_MSG(fabs((double)got - ref) <= bound,
                          "%s %s n=%lld row %d: fast %.9g, reference %.9g, bound %.3g", k->name,
                          dtype_get(t)->name, (long long)n, r, got, ref, bound);
                float again = fn(row, &xr, n);
                CHECK(memcmp(&again, &got, sizeof got) == 0);
                checked++;
            }
            /* The seq kernel (rows one after another, from each row
             * start): each row the one-token bits. */
            if (kt->seq)
                for (int r0 = 0; r0 < rows; r0++) {
                    float seq[8];
                    kt->seq(w.data + (size_t)r0 * w.row_bytes, w.row_bytes, rows - r0, &xr, n,
                            seq);
                    for (int r = r0; r < rows; r++) {
                        float one = fn(w.data + (size_t)r * w.row_bytes, &xr, n);
                        CHECK_MSG(memcmp(&one, &seq[r - r0], sizeof one) == 0,
                                  "%s %s n=%lld rows %d..%d: row %d one %.9g, seq %.9g",
                                  k->name, dtype_get(t)->name, (long long)n, r0, rows - 1, r,
                                  one, seq[r - r0]);
                        checked_seq++;
                    }
                }
            /* The many-token kernel: each token the one-token bits. */
            if (kt->many) {
                enum { MAXT = 8 };
                CHECK(kt->nt >= 2 && kt->nt <= MAXT);
                float *xs[MAXT];
                xq_buf xbs[MAXT];
                cpu_xrow xrs[MAXT];
                for (int tk = 0; tk < kt->nt; tk++) {
                    xs[tk] = malloc((size_t)n * sizeof(float));
                    make_x(xs[tk], n);
                    xrs[tk] = make_xrow(xs[tk], n, &xbs[tk]);
                }
                for (int r = 0; r < rows; r++) {
                    const uint8_t *row = w.data + (size_t)r * w.row_bytes;
                    float many[MAXT];
                    kt->many(row, xrs, n, many);
                    for (int tk = 0; tk < kt->nt; tk++) {
                        float one = fn(row, &xrs[tk], n);
                        CHECK_MSG(memcmp(&one, &many[tk], sizeof one) == 0,
                                  "%s %s n=%lld row %d token %d: one %.9g, many %.9g", k->name,
                                  dtype_get(t)->name, (long long)n, r, tk, one, many[tk]);
                    }
                }
                /* The rows kernel (a block of nr rows from each row
                 * start): each (row, token) the one-token bits. */
                if (kt->rows) {
                    enum { MAXR = 4 };
                    CHECK(kt->nr >= 2 && kt->nr <= MAXR && kt->nr <= rows);
                    for (int r0 = 0; r0 + kt->nr <= rows; r0++) {
                        float blk[MAXR * MAXT];
                        kt->rows(w.data + (size_t)r0 * w.row_bytes, w.row_bytes, xrs, n, blk);
                        for (int i = 0; i < kt->nr; i++)
                            for (int tk = 0; tk < kt->nt; tk++) {
                                const uint8_t *row = w.data + (size_t)(r0 + i) * w.row_bytes;
                                float one = fn(row, &xrs[tk], n);
                                CHECK_MSG(memcmp(&one, &blk[i * kt->nt + tk], sizeof one) == 0,
                                          "%s %s n=%lld rows %d+%d token %d: one %.9g, rows %.9g",
                                          k->name, dtype_get(t)->name, (long long)n, r0, i, tk,
                                          one, blk[i * kt->nt + tk]);
                                checked_rows++;
                            }
                    }
                }
                for (int tk = 0; tk < kt->nt; tk++) {
                    free_xq(&xbs[tk]);
                    free(xs[tk]);
                }
            } else {
                CHECK(kt->nt == 1);
            }
            free_xq(&xb);
            free(x);
            free(wd);
            free((void *)w.data);
        }
    }
    CHECK(checked > 100);
    /* F32, F16 and BF16 have a rows kernel on the SIMD levels, the int8-x
     * formats a seq kernel on the x86 ones. */
    CHECK(k->isa == CPU_ISA_SCALAR || checked_rows > 100);
    CHECK(!(k->isa == CPU_ISA_AVX2 || k->isa == CPU_ISA_AVX512 || k->isa == CPU_ISA_AMX) ||
          checked_seq > 100);
}

/* The kernels' inline NVFP4 scale is the dequantizer's, on every byte. */
static void test_ue4m3_scale(void)
{
    for (int b = 0; b < 256; b++) {
        float a = cpu_ue4m3_half((uint8_t)b), r = dequant_ue4m3_half((uint8_t)b);
        CHECK_MSG(memcmp(&a, &r, sizeof a) == 0, "byte 0x%02x: %.9g, dequantizer %.9g", b, a, r);
    }
}

static void test_kernels_scalar(void) { kernels_vs_reference(CPU_ISA_SCALAR); }
static void test_kernels_avx2(void) { kernels_vs_reference(CPU_ISA_AVX2); }
static void test_kernels_avx512(void) { kernels_vs_reference(CPU_ISA_AVX512); }
static void test_kernels_neon(void) { kernels_vs_reference(CPU_ISA_NEON); }
static void test_kernels_dotprod(void) { kernels_vs_reference(CPU_ISA_DOTPROD); }
static void test_kernels_amx(void) { kernels_vs_reference(CPU_ISA_AMX); }

/* The decision says the int8 kernels of avx2 and avx512 give the same
 * bits (the same exact integer sums, the same float steps), and so do
 * those of neon and dotprod. */
static void int8_kernels_agree(cpu_isa la, cpu_isa lb)
{
    const cpu_kernels *a = level_or_skip(la);
    const cpu_kernels *b = a ? level_or_skip(lb) : NULL;
    if (!a || !b)
        return;
    static const dtype q[] = {DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_NVFP4};
    static const int64_t widths[] = {768, 2048, 2336}; /* odd and even block counts */
    for (size_t ti = 0; ti < MEMRA_ARRAY_LEN(q); ti++)
        for (size_t wi = 0; wi < MEMRA_ARRAY_LEN(widths); wi++) {
            int64_t n = widths[wi];
            if (n % dtype_get(q[ti])->block_size)
                continue;
            bk_weight w;
            make_weight(&w, q[ti], 8, n);
            float x[2336];
            make_x(x, n);
            xq_buf xb;
            cpu_xrow xr = make_xrow(x, n, &xb);
            for (int r = 0; r < 8; r++) {
                const uint8_t *row = w.data + (size_t)r * w.row_bytes;
                float ga = cpu_kernel_for_type(a, q[ti])->one(row, &xr, n);
                float gb = cpu_kernel_for_type(b, q[ti])->one(row, &xr, n);
                CHECK_MSG(memcmp(&ga, &gb, sizeof ga) == 0, "%s n=%lld row %d: %s %.9g, %s %.9g",
                          dtype_get(q[ti])->name, (long long)n, r, a->name, ga, b->name, gb);
                if (cpu_kernel_for_type(a, q[ti])->many) { /* and in a group of tokens */
                    float ma[8], mb[8];
                    cpu_xrow xs[8];
                    for (int t = 0; t < 8; t++)
                        xs[t] = xr;
                    cpu_kernel_for_type(a, q[ti])->many(row, xs, n, ma);
                    cpu_kernel_for_type(b, q[ti])->many(row, xs, n, mb);
                    CHECK(cpu_kernel_for_type(a, q[ti])->nt == cpu_kernel_for_type(b, q[ti])->nt);
                    CHECK(memcmp(ma, mb, sizeof(float) * (size_t)cpu_kernel_for_type(a, q[ti])->nt) == 0);
                }
            }
            free_xq(&xb);
            free((void *)w.data);
        }
}

static void test_int8_kernels_agree_avx2_avx512(void) { int8_kernels_agree(CPU_ISA_AVX2, CPU_ISA_AVX512); }
static void test_int8_kernels_agree_neon_dotprod(void) { int8_kernels_agree(CPU_ISA_NEON, CPU_ISA_DOTPROD); }

/* The panel kernels (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K rows repacked by cpu_panel.h):
 * within the int8 formats' bound of the reference on the stored row, the
 * many-token kernel each token's one-token bits, the same bits on avx2
 * and avx512; x's panel order and half sums against a plain statement. */
static void test_panel_kernels(void)
{
    const cpu_kernels *lv[2] = {level_or_skip(CPU_ISA_AVX2), NULL};
    if (!lv[0])
        return;
    lv[1] = cpu_isa_runs(CPU_ISA_AVX512) ? cpu_kernels_for(CPU_ISA_AVX512, NULL) : NULL;
    static const dtype q[] = {DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    static const int64_t widths[] = {512, 1536, 4096};
    int checked = 0, checked_seq = 0;
    for (size_t ti = 0; ti < MEMRA_ARRAY_LEN(q); ti++)
        for (size_t wi = 0; wi < MEMRA_ARRAY_LEN(widths); wi++) {
            int64_t n = widths[wi];
            const int rows = 5, nt = 4;
            CHECK(cpu_panel_fits(q[ti], n) && !cpu_panel_fits(q[ti], n + 256));
            bk_weight w;
            make_weight(&w, q[ti], rows, n);
            size_t prb = (size_t)(n / CPU_PANEL) * cpu_panel_bytes(q[ti]);
            uint8_t *packed = malloc(prb);
            float *x[4], *wd = malloc((size_t)n * sizeof *wd);
            xq_buf xb[4];
            cpu_xrow xr[4];
            for (int t = 0; t < nt; t++) {
                x[t] = malloc((size_t)n * sizeof(float));
                make_x(x[t], n);
                xr[t] = make_xrow(x[t], n, &xb[t]);
                for (int64_t i = 0; i < n; i++) /* the panel order, plainly */
                    CHECK(xr[t].p[(i / 512) * 512 + (i % 32 / 4) * 64 + (i % 512 / 32) * 4 + i % 4] ==
                          xr[t].q[i]);
                for (int64_t b = 0; b < n / 32; b++) {
                    int32_t lo = 0;
                    for (int j = 0; j < 16; j++)
                        lo += xr[t].q[32 * b + j];
                    CHECK(xr[t].lo[b] == lo);
                }
            }
            for (int r = 0; r < rows; r++) {
                const uint8_t *row = w.data + (size_t)r * w.row_bytes;
                cpu_panel_pack_row(q[ti], row, n, packed);
                CHECK(dequant_row(q[ti], row, wd, n, NULL) == 0);
                float got[2][4];
                for (int li = 0; li < 2; li++) {
                    if (!lv[li])
                        continue;
                    const cpu_kernel *k = cpu_panel_kernel_for_type(lv[li], q[ti]);
                    CHECK(k && k->many && k->nt == nt);
                    k->many(packed, xr, n, got[li]);
                    for (int t = 0; t < nt; t++) {
                        float one = k->one(packed, &xr[t], n);
                        CHECK_MSG(memcmp(&one, &got[li][t], sizeof one) == 0,
                                  "%s %s n=%lld: one %.9g, many %.9g", lv[li]->name,
                                  dtype_get(q[ti])->name, (long long)n, one, got[li][t]);
                        float ref = cpu_dot(wd, x[t], n);
                        double bound = fast_bound(q[ti], row, wd, x[t], &xr[t], n);
                        CHECK_MSG(fabs((double)one - ref) <= bound,
                                  "%s panel %s n=%lld row %d: %.9g, reference %.9g, bound %.3g",
                                  lv[li]->name, dtype_get(q[ti])->name, (long long)n, r, one,
                                  ref, bound);
                        checked++;
                    }
                }
                if (lv[1])
                    CHECK_MSG(memcmp(got[0], got[1], sizeof got[0]) == 0,
                              "panel %s n=%lld row %d: avx2 %.9g, avx512 %.9g",
                              dtype_get(q[ti])->name, (long long)n, r, got[0][0], got[1][0]);
            }
            /* The seq kernel of each x86 level over the packed rows one
             * after another: each row the one-token bits. */
            uint8_t *all = malloc(prb * rows);
            for (int r = 0; r < rows; r++)
                cpu_panel_pack_row(q[ti], w.data + (size_t)r * w.row_bytes, n, all + r * prb);
            static const cpu_isa seq_levels[] = {CPU_ISA_AVX2, CPU_ISA_AVX512, CPU_ISA_AMX};
            for (size_t li = 0; li < MEMRA_ARRAY_LEN(seq_levels); li++) {
                if (!cpu_isa_runs(seq_levels[li]))
                    continue;
                const cpu_kernels *lk = cpu_kernels_for(seq_levels[li], NULL);
                const cpu_kernel *k = cpu_panel_kernel_for_type(lk, q[ti]);
                CHECK(k && k->seq);
                if (!k || !k->seq)
                    continue;
                float seq[5];
                k->seq(all, prb, rows, &xr[1], n, seq);
                for (int r = 0; r < rows; r++) {
                    float one = k->one(all + r * prb, &xr[1], n);
                    CHECK_MSG(memcmp(&one, &seq[r], sizeof one) == 0,
                              "%s panel %s n=%lld row %d: one %.9g, seq %.9g", lk->name,
                              dtype_get(q[ti])->name, (long long)n, r, one, seq[r]);
                    checked_seq++;
                }
            }
            free(all);
            for (int t = 0; t < nt; t++) {
                free_xq(&xb[t]);
                free(x[t]);
            }
            free(wd);
            free(packed);
            free((void *)w.data);
        }
    CHECK(checked >= 300);
    CHECK(checked_seq >= 75);
}

/* The amx level's tile kernels: every (row, token) of a tile the one-token
 * panel kernel's bits, for 8 rows and fewer (the rest of the tile zeros),
 * full tiles and tiles of fewer tokens (the rest of the slots zeros), x
 * with outliers, a zero block and huge values. */
static void test_tile_kernels(void)
{
    const cpu_kernels *k = level_or_skip(CPU_ISA_AMX);
    if (!k)
        return;
    static const dtype q[] = {DT_Q8_0, DT_Q4_0, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    static const int64_t widths[] = {512, 1536, 4096};
    static const int nrs[] = {CPU_TILE_ROWS, 3}, nts[] = {CPU_TILE_TOKENS, 9};
    int checked = 0;
    for (size_t ti = 0; ti < MEMRA_ARRAY_LEN(q); ti++)
        for (size_t wi = 0; wi < MEMRA_ARRAY_LEN(widths); wi++)
            for (size_t ci = 0; ci < MEMRA_ARRAY_LEN(nrs); ci++) {
                int64_t n = widths[wi], nb = n / 32;
                int nr = nrs[ci], nt = nts[ci];
                const cpu_kernel *pk = cpu_panel_kernel_for_type(k, q[ti]);
                CHECK(pk && pk->tile);
                bk_weight w;
                make_weight(&w, q[ti], nr, n);
                size_t prb = (size_t)(n / CPU_PANEL) * cpu_panel_bytes(q[ti]);
                uint8_t *packed = malloc(prb * (size_t)nr);
                for (int r = 0; r < nr; r++)
                    cpu_panel_pack_row(q[ti], w.data + (size_t)r * w.row_bytes, n,
                                       packed + (size_t)r * prb);
                int8_t *tb = malloc((size_t)n * CPU_TILE_TOKENS);
                float *td = malloc((size_t)nb * CPU_TILE_TOKENS * sizeof *td);
                int32_t *ts = malloc((size_t)nb * CPU_TILE_TOKENS * sizeof *ts);
                int32_t *tlo = malloc((size_t)nb * CPU_TILE_TOKENS * sizeof *tlo);
                float *x = malloc((size_t)n * CPU_TILE_TOKENS * sizeof *x);
                xq_buf xb[CPU_TILE_TOKENS];
                cpu_xrow xr[CPU_TILE_TOKENS];
                for (int u = 0; u < CPU_TILE_TOKENS; u++) {
                    float *xu = x + (size_t)u * n;
                    make_x(xu, n);
                    if (u == 3)
                        xu[n - 1] = 3e30f;
                    xr[u] = make_xrow(xu, n, &xb[u]);
                    cpu_tile_x(u < nt ? xr[u].q : NULL, xr[u].d, xr[u].s, xr[u].lo, n, u, tb, td,
                               ts, tlo);
                }
                uint8_t *scratch = malloc(CPU_TILE_SCRATCH(n));
                float out[CPU_TILE_ROWS * CPU_TILE_TOKENS];
                cpu_xtile xt = {tb, td, ts, tlo};
                pk->tile(packed, prb, nr, &xt, 1, n, out, scratch);
                for (int r = 0; r < nr; r++)
                    for (int u = 0; u < nt; u++) {
                        float one = pk->one(packed + (size_t)r * prb, &xr[u], n);
                        CHECK_MSG(memcmp(&one, &out[u * CPU_TILE_ROWS + r], sizeof one) == 0,
                                  "tile %s n=%lld row %d of %d token %d of %d: %.9g, one-token %.9g",
                                  dtype_get(q[ti])->name, (long long)n, r, nr, u, nt,
                                  out[u * CPU_TILE_ROWS + r], one);
                        checked++;
                    }
                for (int u = 0; u < CPU_TILE_TOKENS; u++)
                    free_xq(&xb[u]);
                free(scratch);
                free(x);
                free(tb);
                free(td);
                free(ts);
                free(tlo);
                free(packed);
                free((void *)w.data);
            }
    CHECK(checked >= 1500);
}

/* x's int8 blocks: each value within half a step, the sums, a zero block,
 * a NaN block. */
static void test_quantize_x(void)
{
    enum { N = 256 };
    float x[N], d[N / 32];
    int8_t q[N];
    int32_t s[N / 32];
    make_x(x, N);
    x[100] = NAN;
    cpu_quantize_x(x, N, q, d, s);
    for (int b = 0; b < N / 32; b++) {
        if (b == 100 / 32) {
            CHECK(isnan(d[b]) && s[b] == 0);
            continue;
        }
        float amax = 0;
        int32_t sum = 0;
        for (int j = 0; j < 32; j++) {
            amax = fmaxf(amax, fabsf(x[b * 32 + j]));
            sum += q[b * 32 + j];
        }
        CHECK(d[b] == amax / 127.0f);
        CHECK(s[b] == sum);
        for (int j = 0; j < 32; j++) {
            double e = fabs((double)x[b * 32 + j] - (double)d[b] * q[b * 32 + j]);
            CHECK_MSG(e <= 0.5001 * d[b], "block %d elt %d: %g vs %d * %g", b, j, x[b * 32 + j],
                      q[b * 32 + j], d[b]);
            CHECK(q[b * 32 + j] >= -127 && q[b * 32 + j] <= 127);
        }
    }
    CHECK(d[1] == 0 && s[1] == 0); /* make_x's zero block */
}

/* Each level's quantize_x gives cpu_quantize_x's bytes: ties, zeros,
 * huge and tiny blocks, NaN and infinity. */
static void quantize_x_on(cpu_isa isa)
{
    const cpu_kernels *k = level_or_skip(isa);
    if (!k)
        return;
    enum { N = 32 * 40 };
    static float x[N];
    static int8_t q0[N], q1[N];
    float d0[N / 32], d1[N / 32];
    int32_t s0[N / 32], s1[N / 32];
    make_x(x, N);
    for (int j = 0; j < 32; j++) {
        x[64 + j] = (float)(j - 16) * 0.5f;         /* halves: round-to-even ties */
        x[96 + j] = (j % 2 ? 1e30f : -1e-30f) * (float)j;
        x[128 + j] = ldexpf((float)j - 15.5f, -140); /* subnormal */
        x[160 + j] = (float)(j - 16);
    }
    x[160] = 127.0f * 4.5f; /* ties after the scaling */
    x[200] = NAN;
    x[260] = -INFINITY;
    k->quantize_x(x, N, q1, d1, s1);
    cpu_quantize_x(x, N, q0, d0, s0);
    CHECK(memcmp(q0, q1, sizeof q0) == 0);
    CHECK(memcmp(d0, d1, sizeof d0) == 0);
    CHECK(memcmp(s0, s1, sizeof s0) == 0);
}

static void test_quantize_x_scalar(void) { quantize_x_on(CPU_ISA_SCALAR); }
static void test_quantize_x_avx2(void) { quantize_x_on(CPU_ISA_AVX2); }
static void test_quantize_x_avx512(void) { quantize_x_on(CPU_ISA_AVX512); }
static void test_quantize_x_neon(void) { quantize_x_on(CPU_ISA_NEON); }
static void test_quantize_x_dotprod(void) { quantize_x_on(CPU_ISA_DOTPROD); }
static void test_quantize_x_amx(void) { quantize_x_on(CPU_ISA_AMX); }

/* ---- the fast attention's kernels (decision 0035) ---- */

static const double U = 1.0 / 16777216.0; /* 2^-24 */

/* Row j of v in element type e (its stored bytes) and those values
 * widened back to f32 (what the kernels compute on; Q8_0 by the cache's
 * codec). */
static void *stored_row(const float *v, int64_t n, cpu_kv_elem e, float *widened)
{
    void *row = malloc((size_t)n * 4);
    if (e == CPU_KV_Q8_0) { /* n a multiple of 32 */
        for (int64_t b = 0; b < n / KV_Q8_0_BLOCK; b++)
            kvc_q8_0_block(v + b * KV_Q8_0_BLOCK, (uint8_t *)row + b * KV_Q8_0_BYTES);
        for (int64_t i = 0; i < n; i++)
            widened[i] = kvc_q8_0_get(row, i);
        return row;
    }
    for (int64_t i = 0; i < n; i++) {
        if (e == CPU_KV_F32) {
            ((float *)row)[i] = v[i];
            widened[i] = v[i];
        } else {
            uint16_t h = e == CPU_KV_BF16 ? kvc_f32_to_bf16(v[i]) : kvc_f32_to_f16(v[i]);
            ((uint16_t *)row)[i] = h;
            widened[i] = e == CPU_KV_BF16 ? kvc_bf16_to_f32(h) : kvc_f16_to_f32(h);
        }
    }
    return row;
}

/* exp: cpu_exp_neg and each level's attn_exp within 2^-22 relative of exp
 * where exp(x) >= 2^-126, 0 below CPU_EXP_MIN, NaN kept; the sum within
 * its summation bound. */
static void exp_on(cpu_isa isa)
{
    const cpu_kernels *k = level_or_skip(isa);
    if (!k)
        return;
    enum { N = 4099 }; /* lanes and a tail */
    static float s[N], x[N];
    for (int i = 0; i < N; i++)
        x[i] = -105.0f * (float)i / (float)(N - 1); /* 0 (the largest) down past the floor */
    x[17] = -INFINITY;
    x[18] = CPU_EXP_MIN;
    x[19] = -1e-30f;
    memcpy(s, x, sizeof s);
    float sum = k->attn_exp(s, N);
    double want_sum = 0;
    for (int i = 0; i < N; i++) {
        double want = exp((double)x[i]);
        want_sum += want;
        float one = cpu_exp_neg(x[i]);
        if (x[i] < CPU_EXP_MIN) {
            CHECK_MSG(s[i] == 0.0f && one == 0.0f, "%s exp(%g) = %g / %g, not 0", k->name, x[i],
                      s[i], one);
            continue;
        }
        double tol = want >= 0x1p-126 ? 0x1p-22 * want : 0x1p-149 + 0x1p-22 * want;
        CHECK_MSG(fabs(s[i] - want) <= tol && fabs(one - want) <= tol,
                  "%s exp(%.9g): %.9g / %.9g, want %.9g", k->name, x[i], s[i], one, want);
    }
    CHECK_MSG(fabs(sum - want_sum) <= (N / 4.0 + 16) * U * want_sum + 0x1p-22 * want_sum,
              "%s sum %.9g want %.9g", k->name, sum, want_sum);
    /* NaN stays NaN (a NaN score poisons its row, as in the reference) */
    float t[5] = {0.0f, -1.0f, NAN, -2.0f, -3.0f};
    k->attn_exp(t, 5);
    CHECK(isnan(t[2]));
    CHECK(isnan(cpu_exp_neg(NAN)));
}

/* glu_silu: within its bound of silu(x) g in double, NaN kept, and each
 * element the same bits whatever call and position it has. */
static void silu_on(cpu_isa isa)
{
    const cpu_kernels *k = level_or_skip(isa);
    if (!k)
        return;
    CHECK_MSG(k->glu_silu != NULL, "%s has no glu_silu", k->name);
    if (!k->glu_silu)
        return;
    enum { N = 4103 }; /* lanes and a tail */
    static float h[N], g[N], x[N], part[N];
    static const float special[] = {0.0f,    -0.0f,  1e-30f,   -1e-30f, 1e-40f,    -1e-40f,
                                    87.0f,   -87.0f, 87.5f,    -87.5f,  90.0f,     -90.0f,
                                    200.0f,  -200.0f, INFINITY, 3e38f,   -3e38f,    0.5f};
    uint32_t st = 7;
    for (int i = 0; i < N; i++) {
        st = st * 1664525u + 1013904223u;
        x[i] = -100.0f + 200.0f * (float)i / (float)(N - 1);
        g[i] = i % 5 == 0 ? 1.0f : (float)(st >> 8) / 8388608.0f - 1.0f;
    }
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(special); i++)
        x[3 * i + 1] = special[i];
    memcpy(h, x, sizeof h);
    k->glu_silu(h, g, N);
    for (int i = 0; i < N; i++) {
        double xd = x[i];
        double want = (xd >= 0 ? xd / (1.0 + exp(-xd)) : xd * exp(xd) / (1.0 + exp(xd))) * g[i];
        if (isinf(want)) {
            CHECK_MSG(h[i] == (float)want, "%s silu(%g) * %g = %g, want %g", k->name, x[i], g[i],
                      h[i], want);
            continue;
        }
        double tol = 0x1p-21 * fabs(want) + 0x1p-110;
        CHECK_MSG(fabs(h[i] - want) <= tol, "%s silu(%.9g) * %.9g = %.9g, want %.9g", k->name,
                  x[i], g[i], h[i], want);
    }
    /* the same bits called in pieces of odd lengths at odd offsets */
    memcpy(part, x, sizeof part);
    for (int i = 0, len = 1; i < N; i += len, len = len * 3 % 37 + 1)
        k->glu_silu(part + i, g + i, i + len <= N ? len : N - i);
    CHECK(memcmp(part, h, sizeof h) == 0);
    float t[3] = {1.0f, NAN, -1.0f}, u[3] = {1.0f, 1.0f, 1.0f};
    k->glu_silu(t, u, 3);
    CHECK(isnan(t[1]) && t[0] > 0.73f && t[0] < 0.74f);
}

static void test_silu_avx2(void) { silu_on(CPU_ISA_AVX2); }
static void test_silu_avx512(void) { silu_on(CPU_ISA_AVX512); }
static void test_silu_amx(void) { silu_on(CPU_ISA_AMX); }

static void test_exp_scalar(void) { exp_on(CPU_ISA_SCALAR); }
static void test_exp_avx2(void) { exp_on(CPU_ISA_AVX2); }
static void test_exp_avx512(void) { exp_on(CPU_ISA_AVX512); }
static void test_exp_neon(void) { exp_on(CPU_ISA_NEON); }
static void test_exp_dotprod(void) { exp_on(CPU_ISA_DOTPROD); }
static void test_exp_amx(void) { exp_on(CPU_ISA_AMX); }

/* attn_dot within (n/4 + 16) u |scale| sum |q||k| (+ the scale's rounding)
 * of the exact score, attn_axpy within (2 nv + 2) u (|o| + sum |p||v|) of
 * the exact sum, on f32, bf16, f16 and Q8_0 rows; and a key's score, an
 * element's sum, the same bits in a group of 7 as alone. */
static void attn_kernels_on(cpu_isa isa)
{
    const cpu_kernels *k = level_or_skip(isa);
    if (!k)
        return;
    static const int64_t ns[] = {1, 7, 8, 16, 64, 72, 100, 128, 256, 1031};
    enum { NK = 7 };
    const float scale = 0.0883883f;
    for (size_t ni = 0; ni < MEMRA_ARRAY_LEN(ns); ni++)
        for (int e = CPU_KV_F32; e <= CPU_KV_Q8_0; e++) {
            int64_t n = ns[ni];
            if (e == CPU_KV_Q8_0 && n % KV_Q8_0_BLOCK != 0)
                continue; /* the kernels take a head of whole blocks */
            float *q = malloc((size_t)n * 4), *o0 = malloc((size_t)n * 4),
                  *o1 = malloc((size_t)n * 4), *o2 = malloc((size_t)n * 4);
            float *w[NK], p[NK], dots[NK], one;
            void *rows[NK];
            make_x(q, n);
            make_x(o0, n);
            memcpy(o1, o0, (size_t)n * 4);
            memcpy(o2, o0, (size_t)n * 4);
            for (int j = 0; j < NK; j++) {
                float *v = malloc((size_t)n * 4);
                w[j] = malloc((size_t)n * 4);
                make_x(v, n);
                rows[j] = stored_row(v, n, (cpu_kv_elem)e, w[j]);
                free(v);
                p[j] = 0.37f / (float)(j + 1);
            }
            k->attn_dot(q, (const void *const *)rows, (cpu_kv_elem)e, NK, n, scale, dots);
            for (int j = 0; j < NK; j++) {
                double exact = 0, mag = 0;
                for (int64_t i = 0; i < n; i++) {
                    exact += (double)q[i] * w[j][i];
                    mag += fabs((double)q[i] * w[j][i]);
                }
                exact *= scale;
                double bound = (n / 4.0 + 16) * U * scale * mag + U * fabs(exact);
                CHECK_MSG(fabs(dots[j] - exact) <= bound, "%s attn_dot e=%d n=%lld key %d: %.9g want %.9g",
                          k->name, e, (long long)n, j, dots[j], exact);
                k->attn_dot(q, (const void *const *)&rows[j], (cpu_kv_elem)e, 1, n, scale, &one);
                CHECK_MSG(memcmp(&one, &dots[j], 4) == 0, "%s attn_dot key %d alone differs", k->name, j);
            }
            k->attn_axpy(o1, p, (const void *const *)rows, (cpu_kv_elem)e, NK, n);
            for (int j = 0; j < NK; j++)
                k->attn_axpy(o2, &p[j], (const void *const *)&rows[j], (cpu_kv_elem)e, 1, n);
            CHECK_MSG(memcmp(o1, o2, (size_t)n * 4) == 0, "%s attn_axpy: a group of %d is not one key after the other",
                      k->name, NK);
            for (int64_t i = 0; i < n; i++) {
                double exact = o0[i], mag = fabs(o0[i]);
                for (int j = 0; j < NK; j++) {
                    exact += (double)p[j] * w[j][i];
                    mag += fabs((double)p[j] * w[j][i]);
                }
                CHECK_MSG(fabs(o1[i] - exact) <= (2 * NK + 2) * U * mag, "%s attn_axpy e=%d n=%lld [%lld]: %.9g want %.9g",
                          k->name, e, (long long)n, (long long)i, o1[i], exact);
            }
            /* several queries at once: each query's scores and sums the
             * bits of its own calls, for every count of queries and keys */
            enum { NQ = 9 };
            if (k->attn_dotq) {
                float *qm[NQ], *om[NQ], *os[NQ], *pm[NQ], sm[NQ][NK], s1[NK];
                for (int t = 0; t < NQ; t++) {
                    qm[t] = malloc((size_t)n * 4);
                    om[t] = malloc((size_t)n * 4);
                    os[t] = malloc((size_t)n * 4);
                    pm[t] = malloc(NK * 4);
                    make_x(qm[t], n);
                    make_x(om[t], n);
                    for (int j = 0; j < NK; j++)
                        pm[t][j] = 0.29f / (float)(t + j + 1);
                }
                float *smp[NQ];
                for (int t = 0; t < NQ; t++)
                    smp[t] = sm[t];
                for (int nq = 1; nq <= NQ; nq++)
                    for (int nk = 1; nk <= NK; nk++) {
                        k->attn_dotq((const float *const *)qm, nq, (const void *const *)rows,
                                     (cpu_kv_elem)e, nk, n, scale, smp);
                        for (int t = 0; t < nq; t++) {
                            k->attn_dot(qm[t], (const void *const *)rows, (cpu_kv_elem)e, nk, n,
                                        scale, s1);
                            CHECK_MSG(memcmp(sm[t], s1, (size_t)nk * 4) == 0,
                                      "%s attn_dotq e=%d n=%lld: %d queries x %d keys, query %d "
                                      "differs from its own call", k->name, e, (long long)n, nq,
                                      nk, t);
                        }
                        for (int t = 0; t < nq; t++)
                            memcpy(os[t], om[t], (size_t)n * 4);
                        k->attn_axpyq(os, (const float *const *)pm, nq,
                                      (const void *const *)rows, (cpu_kv_elem)e, nk, n);
                        for (int t = 0; t < nq; t++) {
                            memcpy(o2, om[t], (size_t)n * 4);
                            k->attn_axpy(o2, pm[t], (const void *const *)rows, (cpu_kv_elem)e,
                                         nk, n);
                            CHECK_MSG(memcmp(os[t], o2, (size_t)n * 4) == 0,
                                      "%s attn_axpyq e=%d n=%lld: %d queries x %d keys, query %d "
                                      "differs from its own call", k->name, e, (long long)n, nq,
                                      nk, t);
                        }
                    }
                for (int t = 0; t < NQ; t++) {
                    free(qm[t]);
                    free(om[t]);
                    free(os[t]);
                    free(pm[t]);
                }
            }
            for (int j = 0; j < NK; j++) {
                free(rows[j]);
                free(w[j]);
            }
            free(q);
            free(o0);
            free(o1);
            free(o2);
        }
}

static void test_attn_kernels_scalar(void) { attn_kernels_on(CPU_ISA_SCALAR); }
static void test_attn_kernels_avx2(void) { attn_kernels_on(CPU_ISA_AVX2); }
static void test_attn_kernels_avx512(void) { attn_kernels_on(CPU_ISA_AVX512); }
static void test_attn_kernels_neon(void) { attn_kernels_on(CPU_ISA_NEON); }
static void test_attn_kernels_dotprod(void) { attn_kernels_on(CPU_ISA_DOTPROD); }
static void test_attn_kernels_amx(void) { attn_kernels_on(CPU_ISA_AMX); }

/* A decode step's split: every row in exactly one task, in order; sizes
 * in whole blocks of rows that never grow; the first a share of the rows
 * for each thread, the last ones at the floor; never more tasks than
 * bounds[] holds, however many threads and rows. */
static void test_decode_split(void)
{
    static const int64_t rows[] = {1, 3, 4, 5, 37, 768, 6144, 151936, 4000000};
    static const size_t row_bytes[] = {34, 544, 2176, 4352, 26112, 1 << 20};
    static const int threads[] = {1, 2, 3, 16, 64, 256};
    int64_t b[CPU_SPLIT_MAX_TASKS + 1];
    for (size_t ri = 0; ri < MEMRA_ARRAY_LEN(rows); ri++)
        for (size_t bi = 0; bi < MEMRA_ARRAY_LEN(row_bytes); bi++)
            for (size_t ti = 0; ti < MEMRA_ARRAY_LEN(threads); ti++) {
                int64_t r = rows[ri];
                int n = cpu_decode_split(r, row_bytes[bi], threads[ti], b);
                CHECK_MSG(n >= 1 && n <= CPU_SPLIT_MAX_TASKS, "rows %lld: %d tasks", (long long)r, n);
                if (n < 1 || n > CPU_SPLIT_MAX_TASKS)
                    continue;
                CHECK(b[0] == 0 && b[n] == r);
                for (int i = 0; i < n; i++) {
                    int64_t size = b[i + 1] - b[i];
                    CHECK_MSG(size > 0, "rows %lld task %d empty", (long long)r, i);
                    if (i + 1 < n)
                        CHECK_MSG(size % CPU_SPLIT_ROW_UNIT == 0, "rows %lld task %d: %lld rows",
                                  (long long)r, i, (long long)size);
                    if (i > 0)
                        CHECK_MSG(size <= b[i] - b[i - 1], "rows %lld task %d grows", (long long)r, i);
                }
                /* the floor: tasks before the last hold at least its bytes
                 * (64 KiB, less where that would leave threads without
                 * four tasks each) */
                double total = (double)r * (double)row_bytes[bi];
                double floor_bytes = total / (4.0 * threads[ti]);
                if (floor_bytes > CPU_SPLIT_MIN_BYTES)
                    floor_bytes = CPU_SPLIT_MIN_BYTES;
                if (n > 1)
                    CHECK((double)(b[n - 1] - b[n - 2]) * (double)row_bytes[bi] >= floor_bytes);
                /* enough rows: every thread gets two tasks or more */
                if (r >= 4 * threads[ti] * CPU_SPLIT_ROW_UNIT)
                    CHECK_MSG(n >= 2 * threads[ti], "rows %lld of %zu bytes, %d threads: %d tasks",
                              (long long)r, row_bytes[bi], threads[ti], n);
            }
    /* The Qwen3-8B shape's fused q, k and v (6,144 Q8_0 rows of 4,096) on
     * 2 threads: a quarter first, then a quarter of the rest; the last
     * full tasks at the 64 KiB floor (16 rows of 4,352 bytes). */
    int n = cpu_decode_split(6144, 4352, 2, b);
    CHECK(b[1] == 1536 && b[2] == 1536 + 1152);
    CHECK(b[n - 1] - b[n - 2] == 16);
    /* the same on one thread: halves; 8 rows on 2 threads: a block of 4 each */
    n = cpu_decode_split(6144, 4352, 1, b);
    CHECK(b[1] == 3072);
    CHECK(cpu_decode_split(8, 4352, 2, b) == 2 && b[1] == 4);
    /* a small matrix on 16 threads (Qwen3-0.6B's output projection,
     * Q4_K): tasks of 32 rows, then 16, not the 64 KiB floor's 60 */
    n = cpu_decode_split(1024, 1152, 16, b);
    CHECK(b[1] == 32 && b[n - 1] - b[n - 2] == 16 && n >= 32);
    CHECK(cpu_decode_split(0, 4352, 2, b) == 0);
}

/* ---- the ops on the fast backend ---- */

static backend *fast_backend(cpu_isa isa, int threads)
{
    setenv("MEMRA_CPU_ISA", isa_names[isa], 1);
    backend *b = backend_cpu_create(threads);
    unsetenv("MEMRA_CPU_ISA");
    CHECK(cpu_of(b)->fast && cpu_of(b)->fast->isa == isa);
    return b;
}

enum { INV_TOKENS = 17, INV_ROWS = 37, INV_COLS = 512 };

/* out[INV_TOKENS][rows] for x[INV_TOKENS][cols] by matmul on b, computed
 * as one batch, or as the batches of sizes `split` in order. */
static void run_matmul(backend *b, const bk_weight *w, const float *x, const int *split,
                       float *out)
{
    int t = 0;
    for (int i = 0; t < INV_TOKENS; i++) {
        int n = split ? split[i] : INV_TOKENS;
        b->ops->matmul(b, w, NULL, x + (size_t)t * w->cols, n, out + (size_t)t * w->rows);
        t += n;
    }
}

static void invariance_on(cpu_isa isa)
{
    memra_err err;
    if (!level_or_skip(isa))
        return;
    /* 8 threads: the 37 rows make fewer tasks than twice the threads, so
     * a prompt's tokens are split across tasks too */
    enum { NB = 4 };
    static const int nthreads[NB] = {1, 2, 3, 8};
    backend *bs[NB];
    for (int i = 0; i < NB; i++)
        bs[i] = fast_backend(isa, nthreads[i]);
    backend *ref = backend_cpu_ref_create(2);
    static const int split_a[] = {1, 1, 1, 2, 5, 7}, split_b[] = {17}, split_c[] = {8, 8, 1};
    const int *splits[] = {split_a, split_b, split_c};
    size_t no = (size_t)INV_TOKENS * INV_ROWS;
    float *x = malloc(sizeof(float) * INV_TOKENS * INV_COLS);
    float *o0 = malloc(no * sizeof(float)), *o1 = malloc(no * sizeof(float)),
          *oref = malloc(no * sizeof(float)), *wd = malloc(INV_COLS * sizeof(float));
    for (int t = 0; t < INV_TOKENS; t++)
        make_x(x + (size_t)t * INV_COLS, INV_COLS);
    for (size_t ti = 0; ti < MEMRA_ARRAY_LEN(fast_types); ti++) {
        dtype t = fast_types[ti];
        const char *tn = dtype_get(t)->name;
        bk_weight w;
        make_weight(&w, t, INV_ROWS, INV_COLS);
        CHECK(bs[0]->ops->weight_prepare(bs[0], &w, &err) == 0);
        run_matmul(bs[0], &w, x, NULL, o0);
        for (int bi = 0; bi < NB; bi++)
            for (size_t si = 0; si < MEMRA_ARRAY_LEN(splits); si++) {
                memset(o1, 0xff, no * sizeof(float));
                run_matmul(bs[bi], &w, x, splits[si], o1);
                CHECK_MSG(memcmp(o0, o1, no * sizeof(float)) == 0,
                          "%s %s: %d threads, split %zu differs from 1 thread, one batch",
                          isa_names[isa], tn, nthreads[bi], si);
            }
        /* Against the reference op, within the per-dot bound. */
        run_matmul(ref, &w, x, NULL, oref);
        for (int tok = 0; tok < INV_TOKENS; tok++) {
            const float *xt = x + (size_t)tok * INV_COLS;
            xq_buf xb;
            cpu_xrow xr = make_xrow(xt, INV_COLS, &xb);
            for (int r = 0; r < INV_ROWS; r++) {
                const uint8_t *row = w.data + (size_t)r * w.row_bytes;
                dequant_row(t, row, wd, INV_COLS, NULL);
                double bound = fast_bound(t, row, wd, xt, &xr, INV_COLS);
                size_t i = (size_t)tok * INV_ROWS + r;
                CHECK_MSG(fabs((double)o0[i] - oref[i]) <= bound, "%s token %d row %d: %g vs %g",
                          tn, tok, r, o0[i], oref[i]);
            }
            free_xq(&xb);
        }
        free((void *)w.data);
    }
    free(x);
    free(o0);
    free(o1);
    free(oref);
    free(wd);
    for (int i = 0; i < NB; i++)
        backend_destroy(bs[i]);
    backend_destroy(ref);
}

static void test_invariance_scalar(void) { invariance_on(CPU_ISA_SCALAR); }
static void test_invariance_avx2(void) { invariance_on(CPU_ISA_AVX2); }
static void test_invariance_avx512(void) { invariance_on(CPU_ISA_AVX512); }
static void test_invariance_neon(void) { invariance_on(CPU_ISA_NEON); }
static void test_invariance_dotprod(void) { invariance_on(CPU_ISA_DOTPROD); }
static void test_invariance_amx(void) { invariance_on(CPU_ISA_AMX); }

/* q, k, v of mixed types in one call (Q4_K_M: Q4_K q and k, Q6_K v) with
 * their biases, and the GLU FFN: byte-identical across thread counts and
 * batches (a token alone on three threads: tasks of a decode step that
 * span the items). */
static void fused_ops_invariance(int T, int prepare)
{
    enum { D = 512, F = 768, TMAX = 21 };
    backend *b1 = backend_cpu_create(1), *b3 = backend_cpu_create(3);
    bk_weight wq, wk, wv, g, u, dn, bq, bk, bv;
    make_weight(&bq, DT_F32, 1, 64);
    make_weight(&bk, DT_F32, 1, 32);
    make_weight(&bv, DT_F32, 1, 32);
    make_weight(&wq, DT_Q4_K, 64, D);
    make_weight(&wk, DT_Q4_K, 32, D);
    make_weight(&wv, DT_Q6_K, 32, D);
    make_weight(&g, DT_Q8_0, F, D);
    make_weight(&u, DT_BF16, F, D);
    make_weight(&dn, DT_Q6_K, D, F);
    const bk_weight *ws[] = {&wq, &wk, &wv, &g, &u, &dn};
    memra_err err;
    for (size_t i = 0; prepare && i < MEMRA_ARRAY_LEN(ws); i++)
        CHECK(b1->ops->weight_prepare(b1, (bk_weight *)ws[i], &err) == 0);
    float *x = malloc(sizeof(float) * T * D);
    for (int t = 0; t < T; t++)
        make_x(x + t * D, D);
    float q[2][TMAX * 64], k[2][TMAX * 32], v[2][TMAX * 32];
    float *hb = malloc(sizeof(float) * T * F), *hb2 = malloc(sizeof(float) * T * F);
    float *o[2] = {malloc(sizeof(float) * T * D), malloc(sizeof(float) * T * D)};
    b1->ops->attn_qkv(b1, &wq, &wk, &wv, &bq, &bk, &bv, x, T, q[0], k[0], v[0]);
    b1->ops->ffn_glu(b1, &g, &u, &dn, BK_ACT_SILU, x, T, hb, hb2, o[0]);
    /* token by token on three threads */
    for (int t = 0; t < T; t++) {
        b3->ops->attn_qkv(b3, &wq, &wk, &wv, &bq, &bk, &bv, x + t * D, 1, q[1] + t * 64,
                          k[1] + t * 32, v[1] + t * 32);
        b3->ops->ffn_glu(b3, &g, &u, &dn, BK_ACT_SILU, x + t * D, 1, hb, hb2, o[1] + t * D);
    }
    CHECK(memcmp(q[0], q[1], sizeof(float) * T * 64) == 0);
    CHECK(memcmp(k[0], k[1], sizeof(float) * T * 32) == 0);
    CHECK(memcmp(v[0], v[1], sizeof(float) * T * 32) == 0);
    CHECK(memcmp(o[0], o[1], sizeof(float) * T * D) == 0);
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(ws); i++)
        free((void *)ws[i]->data);
    free((void *)bq.data);
    free((void *)bk.data);
    free((void *)bv.data);
    free(x);
    free(hb);
    free(hb2);
    free(o[0]);
    free(o[1]);
    backend_destroy(b1);
    backend_destroy(b3);
}

static void test_fused_ops_invariance(void) { fused_ops_invariance(9, 0); }
/* The same with the matrices in panels and a prompt of 21 tokens: on the
 * amx level a whole tile of 16 on the tiles (Q4_K, Q6_K and Q8_0 items
 * beside a BF16 one in the same call) and 5 on the panel kernels. */
static void test_fused_ops_invariance_panels(void) { fused_ops_invariance(21, 1); }

/* K or V of head h at position t, widened from the cache's bytes. */
static float cached(const kv_cache *kc, const kv_seq *s, const uint8_t *base, int64_t t, int h,
                    int hd, int d)
{
    const uint8_t *row = base + kv_offset(kc, s, 0, t);
    int64_t e = (int64_t)h * hd + d;
    switch (kc->type) {
    case KV_F16: return kvc_f16_to_f32(kvc_ld16(row + 2 * e));
    case KV_BF16: return kvc_bf16_to_f32(kvc_ld16(row + 2 * e));
    case KV_Q8_0: return kvc_q8_0_get(row, e);
    default: break;
    }
    float f;
    memcpy(&f, row + 4 * e, 4);
    return f;
}

/* Attention on the fast backend (every level) against the reference,
 * within decision 0035's bound, computed here per output element from the
 * exact scores: with D the largest difference a score may have (either
 * side's dot product, the scale, the softcap), each weight may move by
 * 4.2 D + 2^-20 + (span/2 + 40) u relative (the exponentials, both sides'
 * sums and divisions), and the output by that, plus both sides' weighted
 * sums, times sum_t p_t |v_t|. Head_dim 72 (lanes and a tail), a window,
 * a softcap, every KV type; 2 and 24 threads (a task takes both query
 * heads of a KV head, or one) give the same bits, and so does a row
 * alone. */
static void test_attention_bound(void)
{
    enum { NH = 4, NKV = 2, HDM = 80, N = 19, BS = 4, G = NH / NKV };
    float *q = malloc(sizeof(float) * N * NH * HDM), *k = malloc(sizeof(float) * N * NKV * HDM),
          *v = malloc(sizeof(float) * N * NKV * HDM);
    float *o[3] = {malloc(sizeof(float) * N * NH * HDM), malloc(sizeof(float) * N * NH * HDM),
                   malloc(sizeof(float) * N * NH * HDM)};
    float alone[NH * HDM];
    make_x(q, N * NH * HDM);
    make_x(k, N * NKV * HDM);
    make_x(v, N * NKV * HDM);
    memra_err err = {{0}};
    static const kv_type kts[] = {KV_F32, KV_F16, KV_BF16, KV_Q8_0};
    static const char *const ktn[] = {"f32", "f16", "bf16", "q8_0"};
    static const struct {
        float softcap;
        int64_t window;
    } shapes[] = {{0, 0}, {0, 6}, {5.0f, 0}};
    double worst = 0;
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!cpu_isa_runs((cpu_isa)isa))
            continue;
        for (size_t kt = 0; kt < MEMRA_ARRAY_LEN(kts); kt++)
            for (size_t sh = 0; sh < MEMRA_ARRAY_LEN(shapes); sh++) {
                /* Q8_0 rows are whole blocks of 32: heads of two blocks, and
                 * (the window's shape) heads that straddle blocks */
                const int HD = kts[kt] != KV_Q8_0 ? 72 : sh == 1 ? 80 : 64;
                backend *bs[3] = {backend_cpu_ref_create(2), fast_backend((cpu_isa)isa, 2),
                                  fast_backend((cpu_isa)isa, 24)};
                bk_attn a = {0, NH, NKV, HD, 0.125f, shapes[sh].softcap, shapes[sh].window, 0, 0};
                int32_t pos[N];
                kv_seq *seqs[N];
                kv_cache kc[3];
                kv_seq sq[3];
                for (int bi = 0; bi < 3; bi++) {
                    CHECK(kv_cache_init(&kc[bi], kts[kt], 1, NKV * HD, BS, 8, &err) == 0);
                    kv_seq_init(&sq[bi], &kc[bi]);
                    CHECK(kv_seq_reserve(&sq[bi], N, &err) == 0);
                    for (int i = 0; i < N; i++) {
                        pos[i] = i;
                        seqs[i] = &sq[bi];
                    }
                    bk_batch rows = {N, pos, seqs};
                    bs[bi]->ops->attention(bs[bi], &a, &rows, q, k, v, o[bi]);
                }
                CHECK_MSG(memcmp(o[1], o[2], sizeof(float) * N * NH * HD) == 0,
                          "%s kv %s shape %zu: 2 and 24 threads differ", isa_names[isa], ktn[kt], sh);
                /* each row again, alone, over the cache the batch wrote (the
                 * batch ran its rows in tiles sharing each key's loads) */
                for (int32_t r = 0; r < N; r++) {
                    kv_seq *one = &sq[1];
                    bk_batch row1 = {1, &r, &one};
                    bs[1]->ops->attention(bs[1], &a, &row1, q + (size_t)r * NH * HD, NULL, NULL,
                                          alone);
                    CHECK_MSG(memcmp(alone, o[1] + (size_t)r * NH * HD, sizeof(float) * NH * HD) == 0,
                              "%s kv %s shape %zu: row %d alone differs from the row in a batch",
                              isa_names[isa], ktn[kt], sh, r);
                }
                for (int i = 0; i < N; i++)
                    for (int h = 0; h < NH; h++) {
                        const float *qh = q + ((size_t)i * NH + h) * HD;
                        int kvh = h / G;
                        int64_t lo = a.window > 0 && i - a.window + 1 > 0 ? i - a.window + 1 : 0;
                        int64_t span = i - lo + 1;
                        double sc[N], D = 0, mx = -INFINITY, l = 0;
                        for (int64_t t = lo; t <= i; t++) {
                            double dot = 0, mag = 0;
                            for (int d = 0; d < HD; d++) {
                                double kd = cached(&kc[0], &sq[0], kc[0].k, t, kvh, HD, d);
                                dot += qh[d] * kd;
                                mag += fabs(qh[d] * kd);
                            }
                            double x = dot * a.scale;
                            double dt = a.scale * (HD / 4.0 + 16) * U * mag + 2 * U * fabs(x);
                            if (a.softcap > 0) {
                                x = tanh(x / a.softcap) * a.softcap;
                                dt += 4 * U * a.softcap;
                            }
                            sc[t - lo] = x;
                            D = dt > D ? dt : D;
                            mx = x > mx ? x : mx;
                        }
                        for (int64_t t = 0; t < span; t++)
                            l += (sc[t] = exp(sc[t] - mx));
                        double rho = 4.2 * D + 0x1p-20 + (span / 2.0 + 40) * U;
                        for (int d = 0; d < HD; d++) {
                            double pv = 0;
                            for (int64_t t = lo; t <= i; t++)
                                pv += sc[t - lo] / l * fabs(cached(&kc[0], &sq[0], kc[0].v, t, kvh, HD, d));
                            double bound = (rho + (span / 2.0 + 40) * U) * pv + 1e-30;
                            size_t at = ((size_t)i * NH + h) * HD + d;
                            double diff = fabs((double)o[1][at] - o[0][at]), exact = 0;
                            /* either side against the exact attention of the
                             * cached values, which the bound covers too (a
                             * K/V widening both sides share would pass the
                             * comparison of the two) */
                            for (int64_t t = lo; t <= i; t++)
                                exact += sc[t - lo] / l * cached(&kc[0], &sq[0], kc[0].v, t, kvh, HD, d);
                            CHECK_MSG(fabs(o[0][at] - exact) <= bound && fabs(o[1][at] - exact) <= bound,
                                      "%s kv %s shape %zu row %d head %d [%d]: ref %.9g fast %.9g exact %.9g",
                                      isa_names[isa], ktn[kt], sh, i, h, d, o[0][at], o[1][at], exact);
                            CHECK_MSG(diff <= bound, "%s kv %s shape %zu row %d head %d [%d]: %.9g vs %.9g (bound %.3g)",
                                      isa_names[isa], ktn[kt], sh, i, h, d, o[1][at], o[0][at], bound);
                            if (bound > 1e-30 && diff / bound > worst)
                                worst = diff / bound;
                        }
                    }
                for (int bi = 0; bi < 3; bi++) {
                    kv_seq_free(&sq[bi]);
                    kv_cache_free(&kc[bi]);
                    backend_destroy(bs[bi]);
                }
            }
    }
    fprintf(stderr, "  attention: largest difference %.2f of its bound\n", worst);
    free(q);
    free(k);
    free(v);
    for (int i = 0; i < 3; i++)
        free(o[i]);
}

/* The kinds: cpu is the fast path, cpu-ref the reference; a level the CPU
 * lacks in MEMRA_CPU_ISA falls back to the best one. */
static void test_kinds(void)
{
    backend_kind k;
    memra_err err;
    CHECK(backend_kind_parse("cpu-ref", &k, &err) == 0 && k == BK_CPU_REF);
    CHECK(backend_kind_parse("cpu", &k, &err) == 0 && k == BK_CPU);
    CHECK(!strcmp(backend_kind_name(BK_CPU_REF), "cpu-ref"));
    CHECK(backend_kind_parse("cpu-fast", &k, &err) != 0 && strstr(err.msg, "'cpu-fast'"));
    backend *f = backend_create(BK_CPU, 0, 1, &err), *r = backend_create(BK_CPU_REF, 0, 1, &err);
    CHECK(cpu_of(f)->fast != NULL && cpu_of(f)->fast->isa == cpu_isa_best());
    CHECK(cpu_of(r)->fast == NULL);
    backend_destroy(f);
    backend_destroy(r);
    setenv("MEMRA_CPU_ISA", "nonsense", 1);
    f = backend_cpu_create(1);
    unsetenv("MEMRA_CPU_ISA");
    CHECK(cpu_of(f)->fast->isa == cpu_isa_best());
    backend_destroy(f);
}

int main(void)
{
    rng_seed(&rng, 2718, 0);
    static const test_case cases[] = {
        TEST_CASE(test_kernels_scalar),
        TEST_CASE(test_kernels_avx2),
        TEST_CASE(test_kernels_avx512),
        TEST_CASE(test_kernels_neon),
        TEST_CASE(test_kernels_dotprod),
        TEST_CASE(test_kernels_amx),
        TEST_CASE(test_int8_kernels_agree_avx2_avx512),
        TEST_CASE(test_int8_kernels_agree_neon_dotprod),
        TEST_CASE(test_panel_kernels),
        TEST_CASE(test_tile_kernels),
        TEST_CASE(test_quantize_x),
        TEST_CASE(test_quantize_x_scalar),
        TEST_CASE(test_quantize_x_avx2),
        TEST_CASE(test_quantize_x_avx512),
        TEST_CASE(test_quantize_x_neon),
        TEST_CASE(test_quantize_x_dotprod),
        TEST_CASE(test_quantize_x_amx),
        TEST_CASE(test_exp_scalar),
        TEST_CASE(test_exp_avx2),
        TEST_CASE(test_exp_avx512),
        TEST_CASE(test_exp_neon),
        TEST_CASE(test_exp_dotprod),
        TEST_CASE(test_exp_amx),
        TEST_CASE(test_silu_avx2),
        TEST_CASE(test_silu_avx512),
        TEST_CASE(test_silu_amx),
        TEST_CASE(test_attn_kernels_scalar),
        TEST_CASE(test_attn_kernels_avx2),
        TEST_CASE(test_attn_kernels_avx512),
        TEST_CASE(test_attn_kernels_neon),
        TEST_CASE(test_attn_kernels_dotprod),
        TEST_CASE(test_attn_kernels_amx),
        TEST_CASE(test_decode_split),
        TEST_CASE(test_invariance_scalar),
        TEST_CASE(test_invariance_avx2),
        TEST_CASE(test_invariance_avx512),
        TEST_CASE(test_invariance_neon),
        TEST_CASE(test_invariance_dotprod),
        TEST_CASE(test_invariance_amx),
        TEST_CASE(test_fused_ops_invariance),
        TEST_CASE(test_fused_ops_invariance_panels),
        TEST_CASE(test_attention_bound),
        TEST_CASE(test_kinds),
        TEST_CASE(test_ue4m3_scale),
    };
    return test_run_all(cases, (int)MEMRA_ARRAY_LEN(cases));
}
