/* The kernel check's speed paths: the mat-vec with 1, 2 and 4 rows per warp
 * (the same bytes each way: the reduction order does not depend on it),
 * the fused launches (QKV as one, gate + up + activation as one, residual
 * add + RMSNorm as one) against the separate ops, byte for byte, and the
 * prefill GEMM (bf16 operands) against the CPU within a bf16 bound, run
 * twice for the same bytes. With --perf, each mat-vec variant is timed on
 * decode-sized matrices of every format (GB/s of weights read), and the
 * GEMM on a 512-row prefill chunk (TFLOP/s). The GEMM's weight operand
 * (every format decoded to bf16) is checked bit for bit against the CPU's
 * decoder, on the emulation too (the GEMM itself needs cuBLASLt). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "check/kernel_check_internal.h"
#include "core/check.h"
#include "format/dequant.h"
#include "numerics/half.h"
#include "kernels/gemm_prep.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/norm.cuh"

/* bf16 rounds each operand to 8 significant bits: about 4e-3 per product,
 * far less over a sum of random signs; a wrong tile or index is O(1). */
#define BOUND_BF16 1e-2

static const char *tname(dtype t) { return dtype_get(t)->name; }

static const cu_matrix *mat(const bk_weight *w) { return &((const cuda_weight *)w->dev)->m; }

/* out = x . W^T through launch_matvec with r rows per warp. */
static int matvec_r(kc *k, const bk_weight *w, const float *x, int n, float *out, int r)
{
    cu_mv_job j;
    memset(&j, 0, sizeof j);
    j.w[0] = mat(w);
    j.out[0] = out;
    j.n_w = 1;
    j.mode = CU_MV_STORE;
    j.x = x;
    j.n = n;
    j.rows_per_warp = r;
    return launch_matvec(&j, k->stream) == cudaSuccess ? 0 : -1;
}

static void rows_case(kc *k, dtype t, int64_t rows, int64_t cols, int n)
{
    bk_weight w;
    char name[64];
    snprintf(name, sizeof name, "mv.%s", tname(t));
    if (kc_weight(k, &w, t, rows, cols, name) != 0)
        return;
    size_t nx = (size_t)n * (size_t)cols, no = (size_t)n * (size_t)rows;
    float *x = xmalloc(nx * sizeof(float));
    kc_fill(k, x, nx, 1.0f);
    float *dx = kc_dev(k, x, nx), *dout = k->gpu->ops->act_alloc(k->gpu, no);
    static const int rs[3] = {1, 2, 4};
    float *got[3] = {NULL, NULL, NULL};
    int ok = 1;
    double us[3] = {-1, -1, -1};
    for (int i = 0; i < 3; i++) {
        ok &= matvec_r(k, &w, dx, n, dout, rs[i]) == 0;
        got[i] = kc_read(k, dout, no);
        if (k->o->perf)
            KC_TIME(k, us[i], matvec_r(k, &w, dx, n, dout, rs[i]));
    }
    int same = ok && memcmp(got[0], got[1], no * 4) == 0 && memcmp(got[0], got[2], no * 4) == 0;
    char what[96];
    snprintf(what, sizeof what, "%-5s %" PRId64 "x%" PRId64 " n=%d rows/warp 1,2,4", tname(t),
             rows, cols, n);
    if (k->o->perf) {
        double bytes = (double)rows * (double)mat(&w)->stride;
        char detail[160];
        snprintf(detail, sizeof detail, "%.1f / %.1f / %.1f us = %.0f / %.0f / %.0f GB/s",
                 us[0], us[1], us[2], bytes / us[0] / 1e3, bytes / us[1] / 1e3,
                 bytes / us[2] / 1e3);
        kc_report_ok(k, "mv_rows", what, same, detail);
    } else {
        kc_report_ok(k, "mv_rows", what, same, same ? "identical" : "DIFFER");
    }
    for (int i = 0; i < 3; i++)
        free(got[i]);
    kc_dev_free(k, dx);
    kc_dev_free(k, dout);
    free(x);
    kc_weight_free(&w);
}

static void check_rows(kc *k)
{
    static const struct {
        dtype t;
        int64_t cols;
    } fmts[] = {{DT_F32, 1000}, {DT_F16, 1004}, {DT_BF16, 1000}, {DT_Q8_0, 1024},
                {DT_Q4_0, 1024}, {DT_Q4_K, 1024}, {DT_Q5_K, 1024}, {DT_Q6_K, 1024}};
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(fmts); f++) {
        rows_case(k, fmts[f].t, 301, fmts[f].cols, 1);
        rows_case(k, fmts[f].t, 301, fmts[f].cols, 5);
    }
    if (!k->o->perf)
        return;
    /* The Qwen3-8B shapes one decode step reads: k/v, q/o, gate/up, down. */
    static const int64_t shapes[4][2] = {{1024, 4096}, {4096, 4096}, {12288, 4096}, {4096, 12288}};
    static const dtype timed[] = {DT_BF16, DT_Q8_0, DT_Q4_K, DT_Q6_K};
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(timed); f++)
        for (int s = 0; s < 4; s++)
            rows_case(k, timed[f], shapes[s][0], shapes[s][1], 1);
    /* The output head at a speculation round's 2 and 5 verify rows. */
    static const dtype heads[] = {DT_BF16, DT_Q8_0, DT_Q6_K};
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(heads); f++) {
        rows_case(k, heads[f], 151936, 4096, 2);
        rows_case(k, heads[f], 151936, 4096, 5);
    }
}

/* ---- fused against separate ---- */

static void check_qkv(kc *k, dtype t)
{
    const int64_t dim = 256, qd = 512, kvd = 128;
    const int n = 3;
    bk_weight wq, wk, wv, bq, none = {0};
    if (kc_weight(k, &wq, t, qd, dim, "wq") || kc_weight(k, &wk, t, kvd, dim, "wk") ||
        kc_weight(k, &wv, t, kvd, dim, "wv") || kc_weight(k, &bq, DT_F32, 1, qd, "bq"))
        return;
    size_t nx = (size_t)n * dim, no = (size_t)n * (qd + 2 * kvd);
    float *x = xmalloc(nx * sizeof(float));
    kc_fill(k, x, nx, 1.0f);
    float *dx = kc_dev(k, x, nx);
    float *fused = k->gpu->ops->act_alloc(k->gpu, no), *sep = k->gpu->ops->act_alloc(k->gpu, no);
    k->gpu->ops->attn_qkv(k->gpu, &wq, &wk, &wv, &bq, &none, &none, dx, n, fused,
                          fused + (size_t)n * qd, fused + (size_t)n * (qd + kvd));
    k->gpu->ops->matmul(k->gpu, &wq, &bq, dx, n, sep);
    k->gpu->ops->matmul(k->gpu, &wk, NULL, dx, n, sep + (size_t)n * qd);
    k->gpu->ops->matmul(k->gpu, &wv, NULL, dx, n, sep + (size_t)n * (qd + kvd));
    float *a = kc_read(k, fused, no), *b = kc_read(k, sep, no);
    int same = memcmp(a, b, no * 4) == 0;
    char what[96];
    snprintf(what, sizeof what, "%-5s q+k+v 512+128+128 x256 +bias q n=%d", tname(t), n);
    kc_report_ok(k, "fused", what, same, same ? "one launch = three" : "DIFFER");
    free(a);
    free(b);
    free(x);
    kc_dev_free(k, dx);
    kc_dev_free(k, fused);
    kc_dev_free(k, sep);
    bk_weight *ws[] = {&wq, &wk, &wv, &bq};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(ws); i++)
        kc_weight_free(ws[i]);
}

static void check_glu(kc *k, dtype t, bk_act act)
{
    const int64_t dim = 256, ffn = 768;
    const int n = 4;
    bk_weight g, u, d;
    if (kc_weight(k, &g, t, ffn, dim, "ffn_gate") || kc_weight(k, &u, t, ffn, dim, "ffn_up") ||
        kc_weight(k, &d, t, dim, ffn, "ffn_down"))
        return;
    size_t nx = (size_t)n * dim, nh = (size_t)n * ffn;
    float *x = xmalloc(nx * sizeof(float));
    kc_fill(k, x, nx, 1.0f);
    float *dx = kc_dev(k, x, nx);
    float *out = k->gpu->ops->act_alloc(k->gpu, nx), *out2 = k->gpu->ops->act_alloc(k->gpu, nx);
    float *hb = k->gpu->ops->act_alloc(k->gpu, nh), *hb2 = k->gpu->ops->act_alloc(k->gpu, nh);
    k->gpu->ops->ffn_glu(k->gpu, &g, &u, &d, act, dx, n, hb, hb2, out);
    /* Separately: gate, up, the activation kernel, down. */
    k->gpu->ops->matmul(k->gpu, &g, NULL, dx, n, hb);
    k->gpu->ops->matmul(k->gpu, &u, NULL, dx, n, hb2);
    launch_glu(hb, hb2, nh, act == BK_ACT_GELU_TANH ? 1 : 0, k->stream);
    k->gpu->ops->matmul(k->gpu, &d, NULL, hb, n, out2);
    float *a = kc_read(k, out, nx), *b = kc_read(k, out2, nx);
    int same = memcmp(a, b, nx * 4) == 0;
    char what[96];
    snprintf(what, sizeof what, "%-5s gate+up+%s 256->768 n=%d", tname(t),
             act == BK_ACT_SILU ? "silu" : "gelu", n);
    kc_report_ok(k, "fused", what, same, same ? "one launch = three" : "DIFFER");
    free(a);
    free(b);
    free(x);
    float *devs[] = {dx, out, out2, hb, hb2};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(devs); i++)
        kc_dev_free(k, devs[i]);
    kc_weight_free(&g);
    kc_weight_free(&u);
    kc_weight_free(&d);
}

static void check_add_norm(kc *k)
{
    const int n = 3;
    const int64_t dim = 1000;
    bk_weight w;
    if (kc_weight(k, &w, DT_F32, 1, dim, "norm.weight"))
        return;
    size_t nx = (size_t)n * dim;
    float *x = xmalloc(nx * 4), *y = xmalloc(nx * 4);
    kc_fill(k, x, nx, 3.0f);
    kc_fill(k, y, nx, 3.0f);
    float *x1 = kc_dev(k, x, nx), *x2 = kc_dev(k, x, nx), *dy = kc_dev(k, y, nx);
    float *o1 = k->gpu->ops->act_alloc(k->gpu, nx), *o2 = k->gpu->ops->act_alloc(k->gpu, nx);
    const float *wv = ((const cuda_weight *)w.dev)->vec;
    launch_add_rmsnorm(x1, dy, n, dim, wv, 1.0f, 1e-6f, o1, NULL, k->stream);
    launch_add(x2, dy, nx, k->stream);
    launch_rmsnorm(x2, n, dim, wv, 1.0f, 1e-6f, o2, NULL, k->stream);
    float *a = kc_read(k, o1, nx), *b = kc_read(k, o2, nx);
    float *s1 = kc_read(k, x1, nx), *s2 = kc_read(k, x2, nx);
    int same = memcmp(a, b, nx * 4) == 0 && memcmp(s1, s2, nx * 4) == 0;
    kc_report_ok(k, "fused", "add+rmsnorm 3x1000", same, same ? "one launch = two" : "DIFFER");
    free(a);
    free(b);
    free(s1);
    free(s2);
    free(x);
    free(y);
    float *devs[] = {x1, x2, dy, o1, o2};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(devs); i++)
        kc_dev_free(k, devs[i]);
    kc_weight_free(&w);
}

void kc_check_fused(kc *k)
{
    check_rows(k);
    static const dtype ts[] = {DT_BF16, DT_Q8_0, DT_Q4_K, DT_Q6_K};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(ts); i++) {
        check_qkv(k, ts[i]);
        check_glu(k, ts[i], i % 2 ? BK_ACT_GELU_TANH : BK_ACT_SILU);
    }
    check_add_norm(k);
}

/* ---- the prefill GEMM ---- */

/* A step of n prompt rows around the op, so the backend takes the GEMM. */
static void prefill_matmul(kc *k, const bk_weight *w, const bk_weight *bias, const float *x,
                           int n, float *out)
{
    bk_batch rows = {n, NULL, NULL};
    bk_step st = {.rows = &rows, .prefill = 1};
    k->gpu->ops->step_begin(k->gpu, &st);
    k->gpu->ops->matmul(k->gpu, w, bias, x, n, out);
    k->gpu->ops->step_end(k->gpu, &st);
}

static void gemm_case(kc *k, dtype t, int64_t rows, int64_t cols, int n, int with_bias)
{
    bk_weight w, b;
    if (kc_weight(k, &w, t, rows, cols, "gemm.w") != 0)
        return;
    if (with_bias && kc_weight(k, &b, DT_F32, 1, rows, "gemm.bias") != 0) {
        kc_weight_free(&w);
        return;
    }
    const bk_weight *bias = with_bias ? &b : NULL;
    size_t nx = (size_t)n * (size_t)cols, no = (size_t)n * (size_t)rows;
    float *x = xmalloc(nx * sizeof(float)), *ref = NULL;
    kc_fill(k, x, nx, 1.0f);
    int small = rows * cols <= 4096 * 1024;
    if (small) { /* the CPU reference is slow for the timed shapes */
        ref = xmalloc(no * sizeof(float));
        k->cpu->ops->matmul(k->cpu, &w, bias, x, n, ref);
    }
    float *dx = kc_dev(k, x, nx), *dout = k->gpu->ops->act_alloc(k->gpu, no);
    prefill_matmul(k, &w, bias, dx, n, dout);
    float *got = kc_read(k, dout, no);
    prefill_matmul(k, &w, bias, dx, n, dout);
    float *again = kc_read(k, dout, no);
    int inv = memcmp(got, again, no * 4) == 0;
    double us = -1;
    if (k->o->perf)
        KC_TIME(k, us, prefill_matmul(k, &w, bias, dx, n, dout));
    char what[96];
    snprintf(what, sizeof what, "%-5s %" PRId64 "x%" PRId64 " n=%d%s", tname(t), rows, cols, n,
             with_bias ? " +bias" : "");
    if (small) {
        kc_report(k, "gemm", what, kc_rel_err(got, ref, no), BOUND_BF16, inv, us,
                  (double)rows * mat(&w)->stride + 4.0 * (double)(nx + no));
    } else {
        char detail[96];
        snprintf(detail, sizeof detail, "%.1f us = %.0f TFLOP/s", us,
                 2.0 * (double)rows * (double)cols * n / us / 1e6);
        kc_report_ok(k, "gemm", what, inv && us > 0, detail);
    }
    free(x);
    free(ref);
    free(got);
    free(again);
    kc_dev_free(k, dx);
    kc_dev_free(k, dout);
    kc_weight_free(&w);
    if (with_bias)
        kc_weight_free(&b);
}

void kc_check_gemm(kc *k)
{
    const char *why = cuda_gemm_unavailable(cuda_of(k->gpu));
    if (why) {
        /* Prefill then stays on the mat-vec: correct, checked above. */
        kc_report_ok(k, "gemm", "not available", 1, why);
        return;
    }
    static const dtype ts[] = {DT_BF16, DT_F16, DT_F32, DT_Q8_0, DT_Q4_0, DT_Q4_K,
                               DT_Q5_K, DT_Q6_K, DT_NVFP4, DT_MXFP8};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(ts); i++)
        gemm_case(k, ts[i], 1000, 1024, 64, i == 0);
    gemm_case(k, DT_BF16, 37, 96, 40, 1);
    if (k->o->perf) {
        gemm_case(k, DT_BF16, 4096, 4096, 512, 0);
        gemm_case(k, DT_BF16, 12288, 4096, 512, 0);
        gemm_case(k, DT_BF16, 4096, 12288, 512, 0);
        gemm_case(k, DT_Q4_K, 12288, 4096, 512, 0);
    }
}

/* ---- the GEMM's weight operand: every format to bf16 ---- */

/* Rows x cols of type t decoded on the device into rows ld apart, against
 * the CPU's dequant_row rounded to bf16 (round to nearest even): the same
 * bits, and zeros in the padding. */
static void dequant_case(kc *k, dtype t, int64_t rows, int64_t cols, int64_t ld)
{
    bk_weight w;
    if (kc_weight(k, &w, t, rows, cols, "dequant.w") != 0)
        return;
    size_t n = (size_t)rows * (size_t)ld;
    uint16_t *ref = xmalloc(n * sizeof *ref), *got = xmalloc(n * sizeof *got);
    float *row = xmalloc((size_t)cols * sizeof *row);
    memra_err err;
    int ok = 1;
    for (int64_t r = 0; r < rows && ok; r++) {
        ok = dequant_row(t, w.data + (size_t)r * w.row_bytes, row, cols, &err) == 0;
        for (int64_t j = 0; j < ld; j++)
            ref[(size_t)r * (size_t)ld + (size_t)j] = j < cols ? f32_to_bf16(row[j]) : 0;
    }
    uint16_t *dev = NULL;
    cudaStream_t st = cuda_of(k->gpu)->stream;
    double us = -1;
    if (ok && cudaMalloc((void **)&dev, n * sizeof *dev) == cudaSuccess) {
        cudaMemsetAsync(dev, 0xFF, n * sizeof *dev, st); /* no stale zeros pass for padding */
        ok = launch_dequant_bf16(mat(&w), ld, dev, st) == cudaSuccess &&
             cudaMemcpyAsync(got, dev, n * sizeof *got, cudaMemcpyDeviceToHost, st) == cudaSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess;
        if (ok && k->o->perf)
            KC_TIME(k, us, launch_dequant_bf16(mat(&w), ld, dev, st));
        cudaFree(dev);
    } else {
        ok = 0;
    }
    size_t bad = 0, first = 0;
    for (size_t i = 0; ok && i < n; i++)
        if (got[i] != ref[i] && bad++ == 0)
            first = i;
    char what[96], detail[160];
    snprintf(what, sizeof what, "%-5s %" PRId64 "x%" PRId64 " ld %" PRId64, tname(t), rows, cols,
             ld);
    if (!ok)
        snprintf(detail, sizeof detail, "the launch or a copy failed");
    else if (bad)
        snprintf(detail, sizeof detail, "%zu of %zu differ, first [%zu][%zu]: 0x%04x, want 0x%04x",
                 bad, n, first / (size_t)ld, first % (size_t)ld, got[first], ref[first]);
    else if (us > 0)
        snprintf(detail, sizeof detail, "bit-exact, %.1f us = %.0f GB/s", us,
                 ((double)rows * (double)mat(&w)->stride + 2.0 * (double)n) / us / 1e3);
    else
        snprintf(detail, sizeof detail, "bit-exact");
    kc_report_ok(k, "dequant", what, ok && bad == 0, detail);
    free(ref);
    free(got);
    free(row);
    kc_weight_free(&w);
}

/* n rows of f32 activations to the GEMM's bf16 operand, ld apart: the
 * 4-wide path (cols a multiple of 4) and the scalar one, bit for bit. */
static void to_bf16_case(kc *k, int n, int64_t cols, int64_t ld)
{
    size_t nx = (size_t)n * (size_t)cols, nd = (size_t)n * (size_t)ld;
    float *x = xmalloc(nx * sizeof *x);
    kc_fill(k, x, nx, 3.0f);
    uint16_t *ref = xmalloc(nd * sizeof *ref), *got = xmalloc(nd * sizeof *got);
    for (int r = 0; r < n; r++)
        for (int64_t j = 0; j < ld; j++)
            ref[(size_t)r * (size_t)ld + (size_t)j] =
                j < cols ? f32_to_bf16(x[(size_t)r * (size_t)cols + (size_t)j]) : 0;
    float *dx = kc_dev(k, x, nx);
    uint16_t *dev = NULL;
    cudaStream_t st = cuda_of(k->gpu)->stream;
    int ok = cudaMalloc((void **)&dev, nd * sizeof *dev) == cudaSuccess;
    if (ok) {
        cudaMemsetAsync(dev, 0xFF, nd * sizeof *dev, st);
        ok = launch_to_bf16(dx, n, cols, ld, dev, st) == cudaSuccess &&
             cudaMemcpyAsync(got, dev, nd * sizeof *got, cudaMemcpyDeviceToHost, st) == cudaSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess;
        cudaFree(dev);
    }
    size_t bad = 0;
    for (size_t i = 0; ok && i < nd; i++)
        bad += got[i] != ref[i];
    char what[96], detail[96];
    snprintf(what, sizeof what, "x to bf16 %dx%" PRId64 " ld %" PRId64, n, cols, ld);
    snprintf(detail, sizeof detail, !ok ? "the launch or a copy failed"
                                    : bad ? "%zu values differ" : "bit-exact", bad);
    kc_report_ok(k, "dequant", what, ok && bad == 0, detail);
    kc_dev_free(k, dx);
    free(x);
    free(ref);
    free(got);
}

/* act(gate) * up rounded to the GEMM's bf16 operand in one pass (the
 * prefill FFN's down input): the bytes of launch_glu then launch_to_bf16,
 * for both activations, padded rows included; and a refusal of operands
 * the 4-wide kernel cannot take. */
static void glu_to_bf16_case(kc *k, int n, int64_t cols, int64_t ld, int act)
{
    size_t nx = (size_t)n * (size_t)cols, nd = (size_t)n * (size_t)ld;
    float *g = xmalloc(2 * nx * sizeof *g); /* gate, then up */
    kc_fill(k, g, 2 * nx, 4.0f);
    uint16_t *ref = xmalloc(nd * sizeof *ref), *got = xmalloc(nd * sizeof *got);
    float *dg = kc_dev(k, g, 2 * nx), *du = dg + nx;
    float *dg2 = kc_dev(k, g, nx);
    uint16_t *dev = NULL, *dref = NULL;
    cudaStream_t st = cuda_of(k->gpu)->stream;
    int ok = cudaMalloc((void **)&dev, nd * sizeof *dev) == cudaSuccess &&
             cudaMalloc((void **)&dref, nd * sizeof *dref) == cudaSuccess;
    if (ok) {
        cudaMemsetAsync(dev, 0xFF, nd * sizeof *dev, st);
        ok = launch_glu(dg2, du, nx, act, st) == cudaSuccess &&
             launch_to_bf16(dg2, n, cols, ld, dref, st) == cudaSuccess &&
             launch_glu_to_bf16(dg, du, n, cols, ld, act, dev, st) == cudaSuccess &&
             cudaMemcpyAsync(got, dev, nd * sizeof *got, cudaMemcpyDeviceToHost, st) == cudaSuccess &&
             cudaMemcpyAsync(ref, dref, nd * sizeof *ref, cudaMemcpyDeviceToHost, st) == cudaSuccess &&
             cudaStreamSynchronize(st) == cudaSuccess;
        /* cols not a multiple of 4: refused, nothing launched */
        ok = ok && launch_glu_to_bf16(dg, du, n, cols - 1, ld, act, dev, st) == cudaErrorInvalidValue;
    }
    cudaFree(dev);
    cudaFree(dref);
    size_t bad = 0;
    for (size_t i = 0; ok && i < nd; i++)
        bad += got[i] != ref[i];
    char what[96], detail[96];
    snprintf(what, sizeof what, "glu %s to bf16 %dx%" PRId64 " ld %" PRId64,
             act ? "gelu" : "silu", n, cols, ld);
    snprintf(detail, sizeof detail, !ok ? "a launch or a copy failed, or a bad shape was taken"
                                    : bad ? "%zu values differ" : "bit-exact", bad);
    kc_report_ok(k, "dequant", what, ok && bad == 0, detail);
    kc_dev_free(k, dg);
    kc_dev_free(k, dg2);
    free(g);
    free(ref);
    free(got);
}

void kc_check_dequant(kc *k)
{
    static const dtype ts[] = {DT_F32, DT_F16, DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_K,
                               DT_Q5_K, DT_Q6_K, DT_NVFP4, DT_MXFP8};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(ts); i++) {
        dequant_case(k, ts[i], 37, 512, 512);
        dequant_case(k, ts[i], 5, 768, 776); /* padded rows */
    }
    to_bf16_case(k, 7, 512, 520);
    to_bf16_case(k, 5, 510, 512);
    glu_to_bf16_case(k, 6, 768, 768, 0);
    glu_to_bf16_case(k, 3, 516, 520, 1);
    if (k->o->perf) {
        dequant_case(k, DT_Q4_K, 12288, 4096, 4096);
        dequant_case(k, DT_Q6_K, 4096, 12288, 12288);
        dequant_case(k, DT_Q8_0, 12288, 4096, 4096);
    }
}
