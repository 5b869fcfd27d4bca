/* The kernel check's op families: each runs the CUDA op and the CPU
 * backend's op on the same random inputs, reports the error against the
 * op's bound, and for batched ops runs single rows and sub-batches on the
 * GPU again, which must give the same bytes as the full batch.
 *
 * Bounds are relative to the largest reference value. Lookups and adds are
 * exact (bound 0): the device decodes every weight format bit-identically
 * to the CPU. Dot products differ from the CPU only in summation order
 * (about 1e-7 relative); a wrong nibble, scale or index is 1e-3 or more. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "check/kernel_check_internal.h"
#include "core/check.h"
#include "backend/kv_cache.h"
#include "kernels/attention.cuh"

#define BOUND_DOT 1e-5
#define BOUND_CHAIN 2e-5 /* two products and an activation in a row */

static size_t dev_stride(const bk_weight *w)
{
    return ((const cuda_weight *)w->dev)->m.stride;
}

static const char *tname(dtype t) { return dtype_get(t)->name; }

/* ---- matmul ---- */

static void matmul_case(kc *k, dtype t, int64_t rows, int64_t cols, int n, int with_bias)
{
    char name[96], what[96];
    snprintf(name, sizeof name, "mm.%s.%" PRId64 "x%" PRId64, tname(t), rows, cols);
    bk_weight w, b;
    if (kc_weight(k, &w, t, rows, cols, name) != 0)
        return;
    if (with_bias && kc_weight(k, &b, DT_F32, 1, rows, "mm.bias") != 0) {
        kc_weight_free(&w);
        return;
    }
    const bk_weight *bias = with_bias ? &b : NULL;
    size_t nx = (size_t)n * (size_t)cols, no = (size_t)n * (size_t)rows;
    float *x = xmalloc(nx * sizeof(float)), *ref = xmalloc(no * sizeof(float));
    kc_fill(k, x, nx, 1.0f);
    k->cpu->ops->matmul(k->cpu, &w, bias, x, n, ref);
    float *dx = kc_dev(k, x, nx), *dout = k->gpu->ops->act_alloc(k->gpu, no);
    float *dpart = k->gpu->ops->act_alloc(k->gpu, no);
    k->gpu->ops->matmul(k->gpu, &w, bias, dx, n, dout);
    float *got = kc_read(k, dout, no);
    double err = kc_rel_err(got, ref, no);
    /* Rows alone, and a sub-batch from an odd offset, give the same bytes. */
    int inv = 1;
    const int singles[3] = {0, n / 2, n - 1};
    for (int s = 0; s < 3; s++) {
        int r = singles[s];
        k->gpu->ops->matmul(k->gpu, &w, bias, dx + (size_t)r * cols, 1, dpart);
        float *one = kc_read(k, dpart, (size_t)rows);
        inv &= memcmp(one, got + (size_t)r * rows, (size_t)rows * sizeof(float)) == 0;
        free(one);
    }
    if (n > 4) {
        k->gpu->ops->matmul(k->gpu, &w, bias, dx + 3 * (size_t)cols, n - 3, dpart);
        float *sub = kc_read(k, dpart, (size_t)(n - 3) * rows);
        inv &= memcmp(sub, got + 3 * (size_t)rows, (size_t)(n - 3) * rows * sizeof(float)) == 0;
        free(sub);
    }
    double us = -1;
    if (k->o->perf)
        KC_TIME(k, us, k->gpu->ops->matmul(k->gpu, &w, bias, dx, n, dout));
    double bytes = (double)rows * dev_stride(&w) + 4.0 * (double)(nx + no);
    snprintf(what, sizeof what, "%-5s %" PRId64 "x%" PRId64 " n=%d%s", tname(t), rows, cols, n,
             with_bias ? " +bias" : "");
    kc_report(k, "matmul", what, err, BOUND_DOT, inv, us, bytes);
    kc_dev_free(k, dx);
    kc_dev_free(k, dout);
    kc_dev_free(k, dpart);
    free(x);
    free(ref);
    free(got);
    kc_weight_free(&w);
    if (with_bias)
        kc_weight_free(&b);
}

/* Decode's mat-vec as the model streams it: n tokens (1, or a speculation
 * round's few verify rows), weights read from device memory rather than L2
 * (50 MB on an H200), so the timing rotates over copies of the weight,
 * 512 MB or more together. GLU: two matrices of the shape, paired (gate and
 * up) in one launch, as the FFN runs them. The first copy's result is
 * checked against the CPU's; with n > 1 each row alone must give the bytes
 * it gave among the others (a verify row is a decode row). */
#define MM_STREAM_BYTES (512.0 * 1024 * 1024)
#define MM_STREAM_MAX_COPIES 64

static void matmul_stream_case(kc *k, dtype t, int64_t rows, int64_t cols, int glu, int n)
{
    char what[96];
    bk_weight w[2];
    int nw = glu ? 2 : 1;
    for (int i = 0; i < nw; i++)
        if (kc_weight(k, &w[i], t, rows, cols, i ? "mm.stream.up" : "mm.stream") != 0) {
            if (i)
                kc_weight_free(&w[0]);
            return;
        }
    cuda_backend *cb = cuda_of(k->gpu);
    const cu_matrix *m[2] = {&((const cuda_weight *)w[0].dev)->m,
                             glu ? &((const cuda_weight *)w[1].dev)->m : NULL};
    const size_t mbytes = (size_t)rows * m[0]->stride;
    int copies = k->o->perf ? (int)ceil(MM_STREAM_BYTES / ((double)mbytes * nw)) : 1;
    copies = copies < 1 ? 1 : copies > MM_STREAM_MAX_COPIES ? MM_STREAM_MAX_COPIES : copies;
    /* copies of each matrix; copy 0 is the prepared weight itself */
    cu_matrix mc[MM_STREAM_MAX_COPIES][2];
    void *mem[MM_STREAM_MAX_COPIES][2] = {{0}};
    int ok = 1;
    for (int c = 0; c < copies; c++)
        for (int i = 0; i < nw; i++) {
            mc[c][i] = *m[i];
            if (c == 0)
                continue;
            if (cudaMalloc(&mem[c][i], mbytes) != cudaSuccess ||
                cudaMemcpyAsync(mem[c][i], m[i]->data, mbytes, cudaMemcpyDeviceToDevice,
                                k->stream) != cudaSuccess) {
                ok = 0;
                mem[c][i] = NULL;
                continue;
            }
            mc[c][i].data = mem[c][i];
        }
    const size_t nx = (size_t)n * (size_t)cols, no = (size_t)n * (size_t)rows;
    float *x = xmalloc(nx * sizeof(float)), *ref = xmalloc(no * sizeof(float));
    float *ref2 = xmalloc(no * sizeof(float));
    kc_fill(k, x, nx, 1.0f);
    k->cpu->ops->matmul(k->cpu, &w[0], NULL, x, n, ref);
    if (glu) {
        k->cpu->ops->matmul(k->cpu, &w[1], NULL, x, n, ref2);
        for (size_t r = 0; r < no; r++) {
            const float g = ref[r];
            ref[r] = g / (1.0f + expf(-g)) * ref2[r];
        }
    }
    float *dx = kc_dev(k, x, nx), *dout = k->gpu->ops->act_alloc(k->gpu, no);
    float *done = k->gpu->ops->act_alloc(k->gpu, (size_t)rows);
    cu_mv_job j;
    memset(&j, 0, sizeof j);
    j.n_w = nw;
    j.mode = glu ? CU_MV_GLU_SILU : CU_MV_STORE;
    j.x = dx;
    j.n = n;
    j.out[0] = dout;
    j.sm_count = cb->info.sm_count;
    double err = INFINITY, us = -1;
    int inv = n > 1 ? 1 : -1;
    if (ok) {
        for (int i = 0; i < nw; i++)
            j.w[i] = &mc[0][i];
        ok = launch_matvec(&j, k->stream) == cudaSuccess;
        float *got = kc_read(k, dout, no);
        /* The CPU's silu differs from the device's by an ulp or so. */
        err = kc_rel_err(got, ref, no);
        for (int r = 0; n > 1 && r < n; r++) {
            cu_mv_job one = j;
            one.x = dx + (size_t)r * (size_t)cols;
            one.n = 1;
            one.out[0] = done;
            ok &= launch_matvec(&one, k->stream) == cudaSuccess;
            float *alone = kc_read(k, done, (size_t)rows);
            inv &= memcmp(alone, got + (size_t)r * (size_t)rows,
                          (size_t)rows * sizeof(float)) == 0;
            free(alone);
        }
        free(got);
    }
    if (ok && k->o->perf) {
        const int reps = 4 * copies < 40 ? 40 : 4 * copies;
        cudaEventRecord(k->ev0, k->stream);
        for (int r = 0; r < reps; r++) {
            for (int i = 0; i < nw; i++)
                j.w[i] = &mc[r % copies][i];
            ok &= launch_matvec(&j, k->stream) == cudaSuccess;
        }
        cudaEventRecord(k->ev1, k->stream);
        float ms = 0;
        if (cudaEventSynchronize(k->ev1) == cudaSuccess &&
            cudaEventElapsedTime(&ms, k->ev0, k->ev1) == cudaSuccess)
            us = (double)ms * 1000.0 / reps;
    }
    snprintf(what, sizeof what, "%-5s %" PRId64 "x%" PRId64 " n=%d %s", tname(t), rows, cols, n,
             glu ? "glu x2 stream" : "stream");
    kc_report(k, "matmul", what, ok ? err : INFINITY, glu ? BOUND_CHAIN : BOUND_DOT, inv, us,
              (double)mbytes * nw);
    for (int c = 1; c < copies; c++)
        for (int i = 0; i < nw; i++)
            if (mem[c][i])
                cudaFree(mem[c][i]);
    kc_dev_free(k, dx);
    kc_dev_free(k, dout);
    kc_dev_free(k, done);
    free(x);
    free(ref);
    free(ref2);
    for (int i = 0; i < nw; i++)
        kc_weight_free(&w[i]);
}

/* The Qwen3-8B decode shapes, with --perf: QKV-sized, the FFN's gate+up
 * pair and down, and the output head (Q6_K, Q8_0, BF16), one token, then
 * the pair and down at 2, 4, 5 and 8 tokens (a speculation round's verify
 * rows in an engine of one sequence); without --perf, small ones (the GLU
 * launch checked against the CPU, one token and three; rows too wide to
 * stage). */
static void matmul_stream_cases(kc *k)
{
    if (!k->o->perf) {
        matmul_stream_case(k, DT_Q4_K, 96, 512, 1, 1);
        matmul_stream_case(k, DT_Q6_K, 80, 768, 0, 1);
        matmul_stream_case(k, DT_BF16, 72, 264, 1, 3);
        matmul_stream_case(k, DT_Q4_K, 72, 512, 1, 3);
        /* rows too wide to stage two tokens' x (Q4_K: one launch a token),
         * or three (Q8_0: blocks of two tokens) */
        matmul_stream_case(k, DT_Q4_K, 40, 12544, 1, 3);
        matmul_stream_case(k, DT_Q8_0, 40, 12288, 0, 3);
        return;
    }
    static const dtype ts[] = {DT_Q8_0, DT_Q4_K, DT_Q6_K, DT_BF16};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(ts); i++) {
        matmul_stream_case(k, ts[i], 4096, 4096, 0, 1);
        matmul_stream_case(k, ts[i], 6144, 4096, 0, 1);
        matmul_stream_case(k, ts[i], 12288, 4096, 1, 1);
        matmul_stream_case(k, ts[i], 4096, 12288, 0, 1);
    }
    matmul_stream_case(k, DT_Q6_K, 151936, 4096, 0, 1);
    matmul_stream_case(k, DT_Q8_0, 151936, 4096, 0, 1);
    matmul_stream_case(k, DT_BF16, 151936, 4096, 0, 1);
    /* The formats without a model shape of their own: the FFN pair. */
    static const dtype more[] = {DT_Q5_K, DT_NVFP4, DT_MXFP8};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(more); i++)
        matmul_stream_case(k, more[i], 12288, 4096, 1, 1);
    static const int few[] = {2, 4, 5, 8};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(ts); i++)
        for (size_t f = 0; f < MEMRA_ARRAY_LEN(few); f++) {
            matmul_stream_case(k, ts[i], 12288, 4096, 1, few[f]);
            matmul_stream_case(k, ts[i], 4096, 12288, 0, few[f]);
        }
}

void kc_check_matmul(kc *k)
{
    static const struct {
        dtype t;
        int64_t shapes[3][2];
    } fmts[] = {
        {DT_F32, {{37, 101}, {64, 256}, {300, 1000}}},
        {DT_F16, {{37, 101}, {3, 7}, {1000, 1000}}},
        {DT_BF16, {{37, 101}, {64, 256}, {1000, 1000}}},
        {DT_Q8_0, {{37, 96}, {65, 544}, {1000, 1024}}},
        {DT_Q4_0, {{37, 96}, {65, 544}, {1000, 1024}}},
        {DT_Q4_K, {{37, 256}, {65, 768}, {1000, 2048}}},
        {DT_Q5_K, {{37, 256}, {65, 768}, {1000, 2048}}},
        {DT_Q6_K, {{37, 256}, {65, 768}, {1000, 2048}}},
        {DT_NVFP4, {{37, 128}, {65, 576}, {1000, 1024}}},
        {DT_MXFP8, {{37, 96}, {65, 544}, {1000, 1024}}},
    };
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(fmts); f++) {
        for (int s = 0; s < 3; s++)
            matmul_case(k, fmts[f].t, fmts[f].shapes[s][0], fmts[f].shapes[s][1], 13, s == 0);
        matmul_case(k, fmts[f].t, fmts[f].shapes[1][0], fmts[f].shapes[1][1], 64, 0);
        /* the few-row instances: 3 rows in a block of 4 against each row
         * alone, 5 in a block of 8 against 2 of them in a block of 2 */
        matmul_case(k, fmts[f].t, fmts[f].shapes[1][0], fmts[f].shapes[1][1], 3, 0);
        matmul_case(k, fmts[f].t, fmts[f].shapes[1][0], fmts[f].shapes[1][1], 5, 0);
        if (k->o->perf) {
            matmul_case(k, fmts[f].t, 4096, 4096, 1, 0);
            matmul_case(k, fmts[f].t, 4096, 4096, 2, 0);
            matmul_case(k, fmts[f].t, 4096, 4096, 4, 0);
            matmul_case(k, fmts[f].t, 4096, 4096, 5, 0);
            matmul_case(k, fmts[f].t, 4096, 4096, 8, 0);
        }
    }
    /* Rows of many chunks, the last one partial (the single-token kernel
     * streams 32 units a lane at a time through a ring of stages). */
    static const dtype longs[] = {DT_Q8_0, DT_Q4_K, DT_Q6_K};
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(longs); f++)
        matmul_case(k, longs[f], 70, 8448, 9, 0);
    /* An output head: many rows, two tokens. */
    matmul_case(k, DT_F16, 32000, 256, 2, 0);
    matmul_stream_cases(k);
}

/* ---- embed ---- */

void kc_check_embed(kc *k)
{
    static const struct {
        dtype t;
        int64_t cols;
    } cases[] = {
        {DT_F32, 101}, {DT_F16, 101}, {DT_BF16, 256}, {DT_Q8_0, 96},
        {DT_Q4_0, 96}, {DT_Q4_K, 512}, {DT_Q5_K, 512}, {DT_Q6_K, 512},
        {DT_NVFP4, 192}, {DT_MXFP8, 96},
    };
    for (size_t c = 0; c < MEMRA_ARRAY_LEN(cases); c++) {
        for (int sc = 0; sc < 2; sc++) {
            const int64_t rows = 50;
            const int n = 7;
            float scale = sc ? 1.7f : 1.0f;
            bk_weight w;
            if (kc_weight(k, &w, cases[c].t, rows, cases[c].cols, "embed.table") != 0)
                continue;
            int32_t tok[7];
            for (int i = 0; i < n; i++)
                tok[i] = (int32_t)(rng_next_u64(&k->rng) % (uint64_t)rows);
            size_t no = (size_t)n * (size_t)cases[c].cols;
            float *ref = xmalloc(no * sizeof(float));
            k->cpu->ops->embed(k->cpu, &w, tok, n, scale, ref);
            float *dout = k->gpu->ops->act_alloc(k->gpu, no);
            k->gpu->ops->embed(k->gpu, &w, tok, n, scale, dout);
            float *got = kc_read(k, dout, no);
            double us = -1;
            if (k->o->perf)
                KC_TIME(k, us, k->gpu->ops->embed(k->gpu, &w, tok, n, scale, dout));
            char what[96];
            snprintf(what, sizeof what, "%-5s 50x%" PRId64 " n=%d scale %g", tname(cases[c].t),
                     cases[c].cols, n, scale);
            kc_report(k, "embed", what, kc_rel_err(got, ref, no), 0.0, -1, us,
                      (double)n * dev_stride(&w) + 4.0 * (double)no);
            kc_dev_free(k, dout);
            free(ref);
            free(got);
            kc_weight_free(&w);
        }
    }
}

/* ---- rmsnorm ---- */

void kc_check_rmsnorm(kc *k)
{
    static const struct {
        int64_t d;
        dtype t;
        float off;
    } cases[] = {{5, DT_F32, 0}, {64, DT_F32, 1}, {1000, DT_BF16, 0}, {4096, DT_F32, 1}};
    for (size_t c = 0; c < MEMRA_ARRAY_LEN(cases); c++) {
        const int n = 6;
        int64_t d = cases[c].d;
        bk_weight w;
        if (kc_weight(k, &w, cases[c].t, 1, d, "norm.weight") != 0)
            continue;
        size_t nx = (size_t)n * (size_t)d;
        float *x = xmalloc(nx * sizeof(float)), *ref = xmalloc(nx * sizeof(float));
        kc_fill(k, x, nx, 3.0f);
        k->cpu->ops->rmsnorm(k->cpu, x, n, &w, cases[c].off, 1e-6f, ref);
        float *dx = kc_dev(k, x, nx), *dout = k->gpu->ops->act_alloc(k->gpu, nx);
        k->gpu->ops->rmsnorm(k->gpu, dx, n, &w, cases[c].off, 1e-6f, dout);
        float *got = kc_read(k, dout, nx);
        k->gpu->ops->rmsnorm(k->gpu, dx + 4 * (size_t)d, 1, &w, cases[c].off, 1e-6f, dout);
        float *one = kc_read(k, dout, (size_t)d);
        int inv = memcmp(one, got + 4 * (size_t)d, (size_t)d * sizeof(float)) == 0;
        double us = -1;
        if (k->o->perf)
            KC_TIME(k, us, k->gpu->ops->rmsnorm(k->gpu, dx, n, &w, cases[c].off, 1e-6f, dout));
        char what[96];
        snprintf(what, sizeof what, "%s d=%" PRId64 " n=%d offset %g", tname(cases[c].t), d, n,
                 cases[c].off);
        kc_report(k, "rmsnorm", what, kc_rel_err(got, ref, nx), 2e-6, inv, us, 8.0 * (double)nx);
        kc_dev_free(k, dx);
        kc_dev_free(k, dout);
        free(x);
        free(ref);
        free(got);
        free(one);
        kc_weight_free(&w);
    }
}

/* ---- attn_qkv ---- */

void kc_check_qkv(kc *k)
{
    const int64_t dim = 192, qd = 256, kvd = 64;
    const int n = 9;
    bk_weight wq, wk, wv, bq, bv, none = {0};
    if (kc_weight(k, &wq, DT_BF16, qd, dim, "wq") || kc_weight(k, &wk, DT_BF16, kvd, dim, "wk") ||
        kc_weight(k, &wv, DT_F16, kvd, dim, "wv") || kc_weight(k, &bq, DT_F32, 1, qd, "bq") ||
        kc_weight(k, &bv, DT_F32, 1, kvd, "bv"))
        return;
    size_t nx = (size_t)n * dim, no = (size_t)n * (qd + 2 * kvd);
    float *x = xmalloc(nx * sizeof(float)), *ref = xmalloc(no * sizeof(float));
    kc_fill(k, x, nx, 1.0f);
    float *rq = ref, *rk = ref + (size_t)n * qd, *rv = rk + (size_t)n * kvd;
    k->cpu->ops->attn_qkv(k->cpu, &wq, &wk, &wv, &bq, &none, &bv, x, n, rq, rk, rv);
    float *dx = kc_dev(k, x, nx), *dout = k->gpu->ops->act_alloc(k->gpu, no);
    float *dq = dout, *dk = dout + (size_t)n * qd, *dv = dk + (size_t)n * kvd;
    k->gpu->ops->attn_qkv(k->gpu, &wq, &wk, &wv, &bq, &none, &bv, dx, n, dq, dk, dv);
    float *got = kc_read(k, dout, no);
    float *d1 = k->gpu->ops->act_alloc(k->gpu, (size_t)(qd + 2 * kvd));
    k->gpu->ops->attn_qkv(k->gpu, &wq, &wk, &wv, &bq, &none, &bv, dx + 5 * dim, 1, d1, d1 + qd,
                          d1 + qd + kvd);
    float *one = kc_read(k, d1, (size_t)(qd + 2 * kvd));
    int inv = memcmp(one, got + 5 * qd, qd * 4) == 0 &&
              memcmp(one + qd, got + (size_t)n * qd + 5 * kvd, kvd * 4) == 0 &&
              memcmp(one + qd + kvd, got + (size_t)n * (qd + kvd) + 5 * kvd, kvd * 4) == 0;
    kc_report(k, "attn_qkv", "BF16/BF16/F16 256+64+64 x192 bias q,v n=9",
              kc_rel_err(got, ref, no), BOUND_DOT, inv, -1, 0);
    kc_dev_free(k, dx);
    kc_dev_free(k, dout);
    kc_dev_free(k, d1);
    free(x);
    free(ref);
    free(got);
    free(one);
    bk_weight *ws[] = {&wq, &wk, &wv, &bq, &bv};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(ws); i++)
        kc_weight_free(ws[i]);
}

/* ---- qk_norm_rope ---- */

void kc_check_rope(kc *k)
{
    static const struct {
        int heads, kv_heads, hd;
        rope_pairing pairing;
        int norms;
        float attn_factor, off;
    } cases[] = {
        {8, 2, 64, ROPE_PAIR_NEOX, 1, 1.0f, 0.0f},
        {8, 2, 64, ROPE_PAIR_ADJACENT, 0, 1.0f, 0.0f},
        {8, 2, 64, ROPE_PAIR_NEOX, 1, 1.2f, 1.0f},
        {4, 4, 128, ROPE_PAIR_ADJACENT, 1, 1.0f, 0.0f},
    };
    for (size_t c = 0; c < MEMRA_ARRAY_LEN(cases); c++) {
        const int n = 5, hd = cases[c].hd, nh = cases[c].heads, nkv = cases[c].kv_heads;
        float inv_freq[64];
        for (int i = 0; i < hd / 2; i++)
            inv_freq[i] = (float)(1.0 / pow(10000.0, 2.0 * i / hd));
        bk_rope rope = {cases[c].pairing, hd / 2, inv_freq, cases[c].attn_factor};
        bk_attn a = {.layer = 0, .n_heads = nh, .n_kv_heads = nkv, .head_dim = hd};
        bk_weight qn = {0}, kn = {0};
        if (cases[c].norms && (kc_weight(k, &qn, DT_F32, 1, hd, "q_norm") ||
                               kc_weight(k, &kn, DT_BF16, 1, hd, "k_norm")))
            continue;
        int32_t pos[5];
        kv_seq *seqs[5] = {NULL, NULL, NULL, NULL, NULL};
        for (int i = 0; i < n; i++)
            pos[i] = (int32_t)(rng_next_u64(&k->rng) % 9000);
        bk_batch rows = {n, pos, seqs};
        size_t nq = (size_t)n * nh * hd, nk = (size_t)n * nkv * hd;
        float *q = xmalloc((nq + nk) * sizeof(float)), *kk = q + nq;
        kc_fill(k, q, nq + nk, 2.0f);
        float *dq = kc_dev(k, q, nq + nk), *dk = dq + nq;
        float *dq1 = kc_dev(k, q + 3 * (size_t)nh * hd, (size_t)nh * hd);
        float *dk1 = kc_dev(k, kk + 3 * (size_t)nkv * hd, (size_t)nkv * hd);
        k->cpu->ops->qk_norm_rope(k->cpu, q, kk, &rows, &a, &qn, &kn, cases[c].off, 1e-6f, &rope);
        k->gpu->ops->qk_norm_rope(k->gpu, dq, dk, &rows, &a, &qn, &kn, cases[c].off, 1e-6f, &rope);
        float *got = kc_read(k, dq, nq + nk);
        bk_batch one = {1, pos + 3, seqs};
        k->gpu->ops->qk_norm_rope(k->gpu, dq1, dk1, &one, &a, &qn, &kn, cases[c].off, 1e-6f,
                                  &rope);
        float *g1 = kc_read(k, dq1, (size_t)nh * hd), *g2 = kc_read(k, dk1, (size_t)nkv * hd);
        int inv = memcmp(g1, got + 3 * (size_t)nh * hd, (size_t)nh * hd * 4) == 0 &&
                  memcmp(g2, got + nq + 3 * (size_t)nkv * hd, (size_t)nkv * hd * 4) == 0;
        char what[96];
        snprintf(what, sizeof what, "%d/%dx%d %s%s attn %.1f pos<9000", nh, nkv, hd,
                 cases[c].pairing == ROPE_PAIR_NEOX ? "neox" : "adjacent",
                 cases[c].norms ? " +norms" : "", cases[c].attn_factor);
        kc_report(k, "qk_norm_rope", what, kc_rel_err(got, q, nq + nk), BOUND_DOT, inv, -1, 0);
        kc_dev_free(k, dq);
        kc_dev_free(k, dq1);
        kc_dev_free(k, dk1);
        free(q);
        free(got);
        free(g1);
        free(g2);
        if (cases[c].norms) {
            kc_weight_free(&qn);
            kc_weight_free(&kn);
        }
    }
    /* q alone, turned one position past its row's (bk_attn.q_ahead: an
     * assistant's query): the same bytes as q at the next position */
    {
        const int n = 3, hd = 32, nh = 4;
        float inv_freq[16];
        for (int i = 0; i < hd / 2; i++)
            inv_freq[i] = (float)(1.0 / pow(10000.0, 2.0 * i / hd));
        bk_rope rope = {ROPE_PAIR_NEOX, hd / 2, inv_freq, 1.0f};
        bk_attn a = {.layer = 0, .n_heads = nh, .n_kv_heads = 1, .head_dim = hd, .q_ahead = 1};
        bk_attn a0 = a;
        a0.q_ahead = 0;
        bk_weight qn = {0}, none = {0};
        if (kc_weight(k, &qn, DT_F32, 1, hd, "q_norm") == 0) {
            int32_t pos[3], pos1[3];
            kv_seq *seqs[3] = {NULL, NULL, NULL};
            for (int i = 0; i < n; i++) {
                pos[i] = (int32_t)(rng_next_u64(&k->rng) % 9000);
                pos1[i] = pos[i] + 1;
            }
            bk_batch rows = {n, pos, seqs}, rows1 = {n, pos1, seqs};
            size_t nq = (size_t)n * nh * hd;
            float *q = xmalloc(2 * nq * sizeof(float)), *q1 = q + nq;
            kc_fill(k, q, nq, 2.0f);
            memcpy(q1, q, nq * sizeof(float));
            float *dq = kc_dev(k, q, nq);
            k->cpu->ops->qk_norm_rope(k->cpu, q, NULL, &rows, &a, &qn, &none, 0.0f, 1e-6f, &rope);
            k->cpu->ops->qk_norm_rope(k->cpu, q1, NULL, &rows1, &a0, &qn, &none, 0.0f, 1e-6f,
                                      &rope);
            k->gpu->ops->qk_norm_rope(k->gpu, dq, NULL, &rows, &a, &qn, &none, 0.0f, 1e-6f, &rope);
            float *got = kc_read(k, dq, nq);
            int same = memcmp(q, q1, nq * sizeof(float)) == 0;
            kc_report(k, "qk_norm_rope", "4x32 q alone, q_ahead 1 (= the next position on the CPU)",
                      same ? kc_rel_err(got, q, nq) : INFINITY, BOUND_DOT, 1, -1, 0);
            kc_dev_free(k, dq);
            free(q);
            free(got);
            kc_weight_free(&qn);
        }
    }
}

/* ---- ffn_glu ---- */

void kc_check_ffn(kc *k)
{
    static const struct {
        dtype t;
        bk_act act;
    } cases[] = {{DT_F32, BK_ACT_SILU}, {DT_BF16, BK_ACT_GELU_TANH}, {DT_Q4_K, BK_ACT_SILU},
                 {DT_Q8_0, BK_ACT_GELU_TANH}, {DT_Q6_K, BK_ACT_SILU}};
    const int64_t dim = 256, ffn = 512;
    const int n = 9;
    for (size_t c = 0; c < MEMRA_ARRAY_LEN(cases); c++) {
        bk_weight g, u, d;
        if (kc_weight(k, &g, cases[c].t, ffn, dim, "ffn_gate") ||
            kc_weight(k, &u, cases[c].t, ffn, dim, "ffn_up") ||
            kc_weight(k, &d, cases[c].t, dim, ffn, "ffn_down"))
            continue;
        size_t nx = (size_t)n * dim, nh = (size_t)n * ffn;
        float *x = xmalloc(nx * 4), *ref = xmalloc(nx * 4), *hb = xmalloc(nh * 4),
              *hb2 = xmalloc(nh * 4);
        kc_fill(k, x, nx, 1.0f);
        k->cpu->ops->ffn_glu(k->cpu, &g, &u, &d, cases[c].act, x, n, hb, hb2, ref);
        float *dx = kc_dev(k, x, nx), *dout = k->gpu->ops->act_alloc(k->gpu, nx);
        float *dhb = k->gpu->ops->act_alloc(k->gpu, nh), *dhb2 = k->gpu->ops->act_alloc(k->gpu, nh);
        k->gpu->ops->ffn_glu(k->gpu, &g, &u, &d, cases[c].act, dx, n, dhb, dhb2, dout);
        float *got = kc_read(k, dout, nx);
        k->gpu->ops->ffn_glu(k->gpu, &g, &u, &d, cases[c].act, dx + 4 * dim, 1, dhb, dhb2, dout);
        float *one = kc_read(k, dout, (size_t)dim);
        int inv = memcmp(one, got + 4 * dim, (size_t)dim * 4) == 0;
        double us = -1;
        if (k->o->perf)
            KC_TIME(k, us, k->gpu->ops->ffn_glu(k->gpu, &g, &u, &d, cases[c].act, dx, n, dhb, dhb2,
                                                 dout));
        char what[96];
        snprintf(what, sizeof what, "%-5s %s 256->512->256 n=%d", tname(cases[c].t),
                 cases[c].act == BK_ACT_SILU ? "silu" : "gelu", n);
        kc_report(k, "ffn_glu", what, kc_rel_err(got, ref, nx), BOUND_CHAIN, inv, us,
                  (double)(2 * ffn * dev_stride(&g) + dim * dev_stride(&d)));
        kc_dev_free(k, dx);
        kc_dev_free(k, dout);
        kc_dev_free(k, dhb);
        kc_dev_free(k, dhb2);
        free(x);
        free(ref);
        free(hb);
        free(hb2);
        free(got);
        free(one);
        kc_weight_free(&g);
        kc_weight_free(&u);
        kc_weight_free(&d);
    }
}

/* ---- ffn_moe ---- */

/* An f32 router whose rows repeat with period `ties`: experts e and
 * e + ties score alike, so every choice is a tie the lower id must win. */
static int moe_router(kc *k, bk_weight *w, int ne, int64_t dim, int ties)
{
    memset(w, 0, sizeof *w);
    w->name = "moe.router";
    w->type = DT_F32;
    w->rows = ne;
    w->cols = dim;
    w->row_bytes = (size_t)dim * 4;
    float *d = xmalloc((size_t)ne * (size_t)dim * 4);
    kc_fill(k, d, (size_t)ne * (size_t)dim, 1.0f);
    for (int e = ties; ties > 0 && e < ne; e++)
        memcpy(d + (size_t)e * (size_t)dim, d + (size_t)(e % ties) * (size_t)dim, w->row_bytes);
    w->data = (const uint8_t *)d;
    memra_err err;
    if (k->cpu->ops->weight_prepare(k->cpu, w, &err) != 0 ||
        k->gpu->ops->weight_prepare(k->gpu, w, &err) != 0) {
        kc_report_ok(k, "weight", w->name, 0, err.msg);
        kc_weight_free(w);
        return -1;
    }
    return 0;
}

static void check_moe_prefill(kc *k);

void kc_check_moe(kc *k)
{
    /* The two large cases route as the 30B/35B-A3B shapes do (128 or 256
     * experts, top 8), the second with every score tied three ways; `own`:
     * routed on an input of its own, with per-expert scales (gemma4's 128
     * experts, top 8). */
    static const struct {
        int ne, nu, norm, ties;
        dtype t;
        int own;
        dtype up; /* the up matrices' type when not t (DT_INVALID: t) */
    } cases[] = {{8, 2, 1, 0, DT_F32, 0, DT_INVALID},    {6, 3, 0, 0, DT_BF16, 0, DT_INVALID},
                 {8, 2, 1, 0, DT_Q4_K, 0, DT_INVALID},   {128, 8, 1, 0, DT_Q4_K, 0, DT_INVALID},
                 {256, 8, 1, 3, DT_Q8_0, 0, DT_INVALID}, {128, 8, 1, 0, DT_BF16, 1, DT_INVALID},
                 {16, 4, 1, 0, DT_Q4_K, 0, DT_Q8_0}};
    const int64_t dim = 256, ffn = 256;
    const int n = 11;
    for (size_t c = 0; c < MEMRA_ARRAY_LEN(cases); c++) {
        int ne = cases[c].ne;
        bk_weight router, gate[256], up[256], down[256];
        int ok = moe_router(k, &router, ne, dim, cases[c].ties) == 0;
        for (int e = 0; ok && e < ne; e++)
            ok = kc_weight(k, &gate[e], cases[c].t, ffn, dim, "moe.gate") == 0 &&
                 kc_weight(k, &up[e], cases[c].up != DT_INVALID ? cases[c].up : cases[c].t, ffn,
                           dim, "moe.up") == 0 &&
                 kc_weight(k, &down[e], cases[c].t, dim, ffn, "moe.down") == 0;
        bk_weight escale = {0};
        if (ok && cases[c].own)
            ok = kc_weight(k, &escale, DT_F32, 1, ne, "moe.expert_scale") == 0;
        if (!ok)
            continue;
        bk_moe m = {&router, gate, up, down, ne, cases[c].nu, cases[c].norm, BK_ACT_SILU, NULL,
                    cases[c].own ? &escale : NULL};
        size_t nx = (size_t)n * dim;
        float *x = xmalloc(nx * 4), *ref = xmalloc(nx * 4), *rx = xmalloc(nx * 4);
        kc_fill(k, x, nx, 1.0f);
        kc_fill(k, rx, nx, 1.0f);
        float *drx = kc_dev(k, rx, nx);
        m.router_x = cases[c].own ? rx : NULL;
        k->cpu->ops->ffn_moe(k->cpu, &m, x, n, ref);
        float *dx = kc_dev(k, x, nx), *dout = k->gpu->ops->act_alloc(k->gpu, nx);
        m.router_x = cases[c].own ? drx : NULL;
        k->gpu->ops->ffn_moe(k->gpu, &m, dx, n, dout);
        float *got = kc_read(k, dout, nx);
        m.router_x = cases[c].own ? drx + 5 * dim : NULL;
        k->gpu->ops->ffn_moe(k->gpu, &m, dx + 5 * dim, 1, dout);
        float *one = kc_read(k, dout, (size_t)dim);
        int inv = memcmp(one, got + 5 * dim, (size_t)dim * 4) == 0;
        m.router_x = cases[c].own ? drx + 3 * dim : NULL;
        k->gpu->ops->ffn_moe(k->gpu, &m, dx + 3 * dim, 4, dout);
        float *sub = kc_read(k, dout, 4 * (size_t)dim);
        inv &= memcmp(sub, got + 3 * dim, 4 * (size_t)dim * 4) == 0;
        double us = -1;
        m.router_x = cases[c].own ? drx : NULL;
        if (k->o->perf)
            KC_TIME(k, us, k->gpu->ops->ffn_moe(k->gpu, &m, dx, n, dout));
        char label[80], what[96];
        snprintf(label, sizeof label, "%-5s %d experts top %d%s%s%s%s%s", tname(cases[c].t), ne,
                 cases[c].nu, cases[c].norm ? " renorm" : "", cases[c].ties ? " ties" : "",
                 cases[c].own ? " own router x, scales" : "",
                 cases[c].up != DT_INVALID ? ", up " : "",
                 cases[c].up != DT_INVALID ? tname(cases[c].up) : "");
        snprintf(what, sizeof what, "%s n=%d", label, n);
        kc_report(k, "ffn_moe", what, kc_rel_err(got, ref, nx), BOUND_CHAIN, inv, us, 0);
        if (k->o->perf) {
            /* one token alone, timed on its own: a decode step of an
             * engine of one sequence (the few-pair launches) */
            double us1 = -1;
            m.router_x = cases[c].own ? drx + 5 * dim : NULL;
            KC_TIME(k, us1, k->gpu->ops->ffn_moe(k->gpu, &m, dx + 5 * dim, 1, dout));
            snprintf(what, sizeof what, "%s n=1", label);
            kc_report(k, "ffn_moe", what, kc_rel_err(one, ref + 5 * dim, (size_t)dim), BOUND_CHAIN,
                      inv, us1, 0);
        }
        kc_dev_free(k, dx);
        kc_dev_free(k, dout);
        kc_dev_free(k, drx);
        free(x);
        free(rx);
        free(ref);
        if (cases[c].own)
            kc_weight_free(&escale);
        free(got);
        free(one);
        free(sub);
        kc_weight_free(&router);
        for (int e = 0; e < ne; e++) {
            kc_weight_free(&gate[e]);
            kc_weight_free(&up[e]);
            kc_weight_free(&down[e]);
        }
    }
    check_moe_prefill(k);
}

/* The experts on the tensor cores (cuda_moe.c, moe_gemm: x and the GLU's
 * output rounded to bf16), in a prompt chunk's step and in a decode step
 * of an engine that chose the decode GEMM, against the CPU's f32: the
 * same routing, then bf16's rounding; and the tokens' rows the same bytes
 * in a step of fewer tokens (a row depends on its own x alone), a decode
 * step's down to one token. */
#define BOUND_MOE_BF16 1e-2

static float *moe_in_step(kc *k, const bk_moe *m, const float *dx, int n, int64_t dim,
                          int prefill, float *dout)
{
    cuda_backend *cb = cuda_of(k->gpu);
    cuda_step saved = cb->step;
    /* on here whatever the device class says (the emulation) */
    int gemm = cb->tune.gemm, dgemm = cb->tune.dgemm;
    cb->step = (cuda_step){.active = 1, .prefill = prefill, .n = n};
    cb->tune.gemm = cb->tune.dgemm = 1;
    k->gpu->ops->ffn_moe(k->gpu, m, dx, n, dout);
    cb->step = saved;
    cb->tune.gemm = gemm;
    cb->tune.dgemm = dgemm;
    return kc_read(k, dout, (size_t)n * (size_t)dim);
}

static void check_moe_prefill(kc *k)
{
    static const struct {
        int ne, nu, own, prefill;
        dtype t;
    } cases[] = {{128, 8, 0, 1, DT_Q4_K}, {128, 8, 1, 1, DT_BF16}, {8, 2, 0, 1, DT_Q8_0},
                 {16, 4, 0, 1, DT_Q6_K},  {128, 8, 0, 0, DT_Q4_K}, {8, 2, 1, 0, DT_BF16},
                 {256, 8, 0, 0, DT_Q8_0}};
    const int64_t dim = 256, ffn = 256;
    for (size_t c = 0; c < MEMRA_ARRAY_LEN(cases); c++) {
        int ne = cases[c].ne;
        /* as many experts as the largest case (256: a stack of 128 overran) */
        bk_weight router, escale = {0}, gate[256], up[256], down[256];
        MEMRA_ASSERT(ne <= 256);
        int ok = moe_router(k, &router, ne, dim, 0) == 0;
        for (int e = 0; ok && e < ne; e++)
            ok = kc_weight(k, &gate[e], cases[c].t, ffn, dim, "moe.gate") == 0 &&
                 kc_weight(k, &up[e], cases[c].t, ffn, dim, "moe.up") == 0 &&
                 kc_weight(k, &down[e], cases[c].t, dim, ffn, "moe.down") == 0;
        if (ok && cases[c].own)
            ok = kc_weight(k, &escale, DT_F32, 1, ne, "moe.expert_scale") == 0;
        if (!ok)
            continue;
        /* prefill: both steps past the threshold; decode: 11 tokens and 1 */
        const int prefill = cases[c].prefill, n = prefill ? 64 : 11, part = prefill ? 40 : 1;
        bk_moe m = {&router, gate, up, down, ne, cases[c].nu, 1, BK_ACT_GELU_TANH, NULL,
                    cases[c].own ? &escale : NULL};
        size_t nx = (size_t)n * dim;
        float *x = xmalloc(nx * 4), *rx = xmalloc(nx * 4), *ref = xmalloc(nx * 4);
        kc_fill(k, x, nx, 1.0f);
        kc_fill(k, rx, nx, 1.0f);
        m.router_x = cases[c].own ? rx : NULL;
        k->cpu->ops->ffn_moe(k->cpu, &m, x, n, ref);
        float *dx = kc_dev(k, x, nx), *drx = kc_dev(k, rx, nx);
        float *dout = k->gpu->ops->act_alloc(k->gpu, nx);
        m.router_x = cases[c].own ? drx : NULL;
        float *got = moe_in_step(k, &m, dx, n, dim, prefill, dout);
        int inv = 1;
        for (int t0 = 0; t0 + part <= n && inv; t0 += prefill ? n : 5) {
            if (cases[c].own)
                m.router_x = drx + (size_t)t0 * dim;
            float *some = moe_in_step(k, &m, dx + (size_t)t0 * dim, part, dim, prefill, dout);
            inv = memcmp(some, got + (size_t)t0 * dim, (size_t)part * (size_t)dim * 4) == 0;
            free(some);
        }
        char what[112];
        snprintf(what, sizeof what, "%-5s %d experts top %d%s, %s step n=%d (tensor cores)",
                 tname(cases[c].t), ne, cases[c].nu, cases[c].own ? " own router x" : "",
                 prefill ? "prefill" : "decode", n);
        kc_report(k, "ffn_moe", what, kc_rel_err(got, ref, nx), BOUND_MOE_BF16, inv, -1, 0);
        free(got);
        free(x);
        free(rx);
        free(ref);
        kc_dev_free(k, dx);
        kc_dev_free(k, drx);
        kc_dev_free(k, dout);
        kc_weight_free(&router);
        if (cases[c].own)
            kc_weight_free(&escale);
        for (int e = 0; e < ne; e++) {
            kc_weight_free(&gate[e]);
            kc_weight_free(&up[e]);
            kc_weight_free(&down[e]);
        }
    }
}

/* ---- add, softcap ---- */

void kc_check_elementwise(kc *k)
{
    const size_t n = 100003;
    float *x = xmalloc(n * 4), *y = xmalloc(n * 4);
    kc_fill(k, x, n, 10.0f);
    kc_fill(k, y, n, 10.0f);
    float *dx = kc_dev(k, x, n), *dy = kc_dev(k, y, n);
    k->cpu->ops->add(k->cpu, x, y, n);
    k->gpu->ops->add(k->gpu, dx, dy, n);
    float *got = kc_read(k, dx, n);
    double us = -1;
    if (k->o->perf)
        KC_TIME(k, us, k->gpu->ops->add(k->gpu, dx, dy, n));
    kc_report(k, "add", "n=100003", kc_rel_err(got, x, n), 0.0, -1, us, 12.0 * (double)n);
    free(got);
    const float caps[2] = {30.0f, 0.5f};
    for (int c = 0; c < 2; c++) {
        kc_fill(k, x, n, 60.0f);
        backend_cuda_act_write(k->gpu, dx, x, n);
        k->cpu->ops->softcap(k->cpu, x, n, caps[c]);
        k->gpu->ops->softcap(k->gpu, dx, n, caps[c]);
        got = kc_read(k, dx, n);
        us = -1;
        if (k->o->perf)
            KC_TIME(k, us, k->gpu->ops->softcap(k->gpu, dx, n, caps[c]));
        char what[64];
        snprintf(what, sizeof what, "n=100003 cap %g", caps[c]);
        kc_report(k, "softcap", what, kc_rel_err(got, x, n), 1e-6, -1, us, 8.0 * (double)n);
        free(got);
    }
    /* scale: one rounded product a value, the same on both */
    kc_fill(k, x, n, 10.0f);
    backend_cuda_act_write(k->gpu, dx, x, n);
    k->cpu->ops->scale(k->cpu, x, n, 0.7071067811865476f);
    k->gpu->ops->scale(k->gpu, dx, n, 0.7071067811865476f);
    got = kc_read(k, dx, n);
    kc_report(k, "scale", "n=100003 by 2^-1/2", kc_rel_err(got, x, n), 0.0, -1, -1, 8.0 * (double)n);
    free(got);
    /* act_mul over a slice of a wider y (gemma4's per-layer inputs): 37
     * rows of 96, y's rows 5 x 96 apart, from the third slice */
    const int rows = 37;
    const int64_t cols = 96, ys = 5 * 96;
    for (int act = 0; act < 2; act++) {
        kc_fill(k, x, (size_t)rows * cols, 6.0f);
        kc_fill(k, y, (size_t)rows * ys, 3.0f);
        backend_cuda_act_write(k->gpu, dx, x, (size_t)rows * cols);
        backend_cuda_act_write(k->gpu, dy, y, (size_t)rows * ys);
        bk_act a = act ? BK_ACT_GELU_TANH : BK_ACT_SILU;
        k->cpu->ops->act_mul(k->cpu, x, y + 2 * cols, rows, cols, ys, a);
        k->gpu->ops->act_mul(k->gpu, dx, dy + 2 * cols, rows, cols, ys, a);
        got = kc_read(k, dx, (size_t)rows * cols);
        kc_report(k, "act_mul", act ? "gelu_tanh, 37 x 96 of a 480-wide y" : "silu, 37 x 96 of a 480-wide y",
                  kc_rel_err(got, x, (size_t)rows * cols), 1e-6, -1, -1, 0);
        free(got);
    }
    kc_dev_free(k, dx);
    kc_dev_free(k, dy);
    free(x);
    free(y);
}
