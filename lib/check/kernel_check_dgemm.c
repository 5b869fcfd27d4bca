/* The decode GEMM (kernels/decode_gemm.cuh) against the CPU backend's
 * projections of the same x rounded to bf16 (the GEMM's one rounding; the
 * rest differs from the CPU only in summation order; for quantized
 * weights, the CPU's decoded weights rounded to bf16, the kernel's second
 * rounding, dotted in double), launched directly
 * so it runs on any device, the emulation included (the backend takes it
 * only on bf16 tensor cores). Each case runs without column splits and
 * with them (an H200's 132 SMs), and checks batch invariance: single
 * tokens from the start, middle and end of the batch, a second launch (the
 * split counters reset) and, with splits, the same bytes for every batch
 * size, and x rounded by the launch's pre-pass (its bf16 copy) or by the
 * blocks giving the same bytes. The mma.sync / ldmatrix layouts the kernel
 * uses are checked on their own first. With --perf: the Qwen3-8B decode
 * shapes at 1, 8, 16, 32 and 64 tokens in BF16, Q4_K, Q6_K and Q8_0 with
 * the weights streamed past L2, with and without x's copy (BF16), against
 * the mat-vec on the same job. */
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
#include "kernels/decode_gemm.cuh"

#define BOUND_DG 1e-5    /* f32 sums of exact bf16 products, in another order */
#define BOUND_DG_GLU 2e-5 /* two of them and an activation */

typedef struct {
    const cu_matrix *w[CU_MV_MAX_W];
    int n_w, mode;
    int64_t cols;
    const float *bias[CU_MV_MAX_W]; /* device */
} dg_shape;

/* Run the job on x (device) for n tokens into out[] (device), with the
 * scratch it needs; 0 or -1. xcopy: 1 x rounded to bf16 by the launch's
 * pre-pass, 0 by the blocks, -1 as the backend chooses (cu_dg_x_bytes). */
static int dg_run(kc *k, const dg_shape *s, const float *x, int n, float *const *out, int sm_count,
                  int bps, int xcopy)
{
    cu_mv_job j;
    memset(&j, 0, sizeof j);
    for (int i = 0; i < s->n_w; i++) {
        j.w[i] = s->w[i];
        j.bias[i] = s->bias[i];
        j.out[i] = out[i];
    }
    j.n_w = s->n_w;
    j.mode = (cu_mv_mode)s->mode;
    j.x = x;
    j.n = n;
    j.sm_count = sm_count;
    if (!cu_dg_job_ok(&j))
        return -1;
    size_t np = cu_dg_partial_floats(&j, bps), nc = cu_dg_counters(&j, bps);
    const int copy = xcopy < 0 ? cu_dg_x_bytes(&j) > 0 : xcopy;
    void *part = NULL, *cnt = NULL, *xb = NULL;
    int ok = 1;
    if (np && (cudaMalloc(&part, np * sizeof(float)) != cudaSuccess ||
               cudaMalloc(&cnt, nc * sizeof(unsigned)) != cudaSuccess ||
               cudaMemsetAsync(cnt, 0, nc * sizeof(unsigned), k->stream) != cudaSuccess))
        ok = 0;
    if (ok && copy && cudaMalloc(&xb, (size_t)n * (size_t)s->cols * 2) != cudaSuccess)
        ok = 0;
    /* Twice: the second launch finds the counters the first left. */
    for (int r = 0; ok && r < 2; r++)
        ok = launch_decode_gemm(&j, bps, part, cnt, xb, k->stream) == cudaSuccess;
    ok = ok && cudaStreamSynchronize(k->stream) == cudaSuccess;
    cudaFree(part);
    cudaFree(cnt);
    cudaFree(xb);
    return ok ? 0 : -1;
}

static size_t out_floats(const dg_shape *s, int i, int n)
{
    return (size_t)n * (size_t)s->w[i]->rows;
}

/* One weight as the kernel decodes the formats of small integer fields
 * (Q4_0, Q4_K, Q5_K, Q6_K; kernels/decode_gemm.cu, QStage): with a and b
 * the CPU's f32 scale and offset, one FMA (256 a) (0.5 + q / 256) +
 * (b - (128 + off) a), where only the subtraction rounds before it
 * (nothing when b is 0: then the FMA gives the CPU's a (q - off)), then
 * rounded to bf16. */
static float dg_field_fma(float a, int q, int off, float b)
{
    const float m = 0.5f + (float)q / 256.0f, c = b - (128.0f + (float)off) * a;
    return bf16_to_f32(f32_to_bf16(fmaf(256.0f * a, m, c)));
}

/* A row of one of those formats (GGUF blocks) decoded so; 0, or -1 for
 * another format. The scales and offsets are the CPU's
 * (lib/format/dequant.c, dequant_kquant.c), the same f32 expressions. */
static int dg_field_row(dtype t, const uint8_t *b, float *y, int64_t cols)
{
    if (t == DT_Q4_0) {
        for (int64_t i = 0; i < cols / 32; i++, b += 18, y += 32) {
            const float d = fp16_to_f32((uint16_t)(b[0] | b[1] << 8));
            for (int j = 0; j < 16; j++) {
                y[j] = dg_field_fma(d, b[2 + j] & 0xF, 8, 0.0f);
                y[j + 16] = dg_field_fma(d, b[2 + j] >> 4, 8, 0.0f);
            }
        }
        return 0;
    }
    if (t == DT_Q4_K || t == DT_Q5_K) {
        const int q5 = t == DT_Q5_K;
        for (int64_t i = 0; i < cols / 256; i++, b += q5 ? 176 : 144) {
            const float d = fp16_to_f32((uint16_t)(b[0] | b[1] << 8));
            const float dmin = fp16_to_f32((uint16_t)(b[2] | b[3] << 8));
            const uint8_t *qh = b + 16, *ql = b + (q5 ? 48 : 16);
            for (int j = 0; j < 4; j++, ql += 32) {
                for (int h = 0; h < 2; h++) {
                    uint8_t sc, m;
                    dequant_k4_scale_min(2 * j + h, b + 4, &sc, &m);
                    const float a = d * sc, mb = dmin * m;
                    for (int l = 0; l < 32; l++) {
                        int q = h ? ql[l] >> 4 : ql[l] & 0xF;
                        if (q5 && (qh[l] >> (2 * j + h) & 1))
                            q += 16;
                        *y++ = dg_field_fma(a, q, 0, -mb);
                    }
                }
            }
        }
        return 0;
    }
    if (t == DT_Q6_K) {
        for (int64_t i = 0; i < cols / 256; i++, b += 210) {
            const float d = fp16_to_f32((uint16_t)(b[208] | b[209] << 8));
            const uint8_t *ql = b, *qh = b + 128;
            const int8_t *sc = (const int8_t *)(b + 192);
            for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8)
                for (int l = 0; l < 32; l++)
                    for (int k = 0; k < 4; k++) {
                        const int lo = (k & 1 ? ql[l + 32] : ql[l]) >> (k & 2 ? 4 : 0) & 0xF;
                        const int q = lo | ((qh[l] >> (2 * k)) & 3) << 4;
                        y[l + 32 * k] = dg_field_fma(d * sc[l / 16 + 2 * k], q, 32, 0.0f);
                    }
        }
        return 0;
    }
    return -1;
}

/* The reference for weights of another format than BF16: each weight
 * decoded as the kernel does (dg_field_row), or for the other formats as
 * the CPU decodes it (lib/format/dequant.c) and rounded to bf16 (the
 * kernel's one rounding of the weights); dotted with the rounded x in
 * double. out[t][r] for t < n. */
static void dg_quant_reference(const bk_weight *w, const float *bias, const float *xr, int n,
                               float *out)
{
    float *row = xmalloc((size_t)w->cols * sizeof(float));
    for (int64_t r = 0; r < w->rows; r++) {
        memra_err err;
        const uint8_t *src = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        if (dg_field_row(w->type, src, row, w->cols) != 0) {
            MEMRA_ASSERT(dequant_row(w->type, src, row, w->cols, &err) == 0);
            for (int64_t c = 0; c < w->cols; c++)
                row[c] = bf16_to_f32(f32_to_bf16(row[c]));
        }
        for (int t = 0; t < n; t++) {
            double s = 0;
            for (int64_t c = 0; c < w->cols; c++)
                s += (double)row[c] * (double)xr[(size_t)t * (size_t)w->cols + (size_t)c];
            out[(size_t)t * (size_t)w->rows + (size_t)r] = (float)s + (bias ? bias[r] : 0.0f);
        }
    }
    free(row);
}

/* One case: n_w matrices of rows[i] x cols (GLU: two of rows[0]) in
 * format t. */
static void dg_case(kc *k, dtype ft, int mode, int n_w, const int64_t *rows, int64_t cols, int n,
                    int with_bias)
{
    bk_weight w[CU_MV_MAX_W], b[CU_MV_MAX_W];
    int made = 0, made_b = 0;
    dg_shape s = {.n_w = n_w, .mode = mode, .cols = cols};
    for (; made < n_w; made++) {
        int64_t r = mode == CU_MV_STORE ? rows[made] : rows[0];
        if (kc_weight(k, &w[made], ft, r, cols, made ? "dg.w1" : "dg.w0") != 0)
            goto done;
        s.w[made] = &((const cuda_weight *)w[made].dev)->m;
    }
    for (; with_bias && made_b < n_w; made_b++) {
        if (kc_weight(k, &b[made_b], DT_F32, 1, w[made_b].rows, "dg.bias") != 0)
            goto done;
        s.bias[made_b] = ((const cuda_weight *)b[made_b].dev)->vec;
    }
    const size_t nx = (size_t)n * (size_t)cols;
    float *x = xmalloc(nx * sizeof(float)), *xr = xmalloc(nx * sizeof(float));
    kc_fill(k, x, nx, 1.0f);
    for (size_t i = 0; i < nx; i++)
        xr[i] = bf16_to_f32(f32_to_bf16(x[i]));
    /* The reference: the CPU's projections of the rounded x. */
    float *ref[CU_MV_MAX_W];
    int n_out = mode == CU_MV_STORE ? n_w : 1;
    for (int i = 0; i < n_w; i++) {
        ref[i] = xmalloc(out_floats(&s, i, n) * sizeof(float));
        if (ft == DT_BF16)
            k->cpu->ops->matmul(k->cpu, &w[i], with_bias ? &b[i] : NULL, xr, n, ref[i]);
        else
            dg_quant_reference(&w[i], with_bias ? (const float *)b[i].data : NULL, xr, n, ref[i]);
    }
    if (mode != CU_MV_STORE)
        for (size_t q = 0; q < out_floats(&s, 0, n); q++) {
            const float g = ref[0][q];
            const float act = mode == CU_MV_GLU_GELU
                                  ? 0.5f * g * (1.0f + tanhf(0.7978845608f * (g + 0.044715f * g * g * g)))
                                  : g / (1.0f + expf(-g));
            ref[0][q] = act * ref[1][q];
        }
    float *dx = kc_dev(k, x, nx);
    static const struct {
        int sm_count, bps;
        const char *name;
    } runs[] = {{1, 1, "1 split"}, {132, 2, "splits"}};
    for (size_t ri = 0; ri < MEMRA_ARRAY_LEN(runs); ri++) {
        float *dout[CU_MV_MAX_W] = {0}, *dsingle[CU_MV_MAX_W] = {0};
        for (int i = 0; i < n_out; i++) {
            dout[i] = k->gpu->ops->act_alloc(k->gpu, out_floats(&s, i, n));
            dsingle[i] = k->gpu->ops->act_alloc(k->gpu, out_floats(&s, i, 1));
        }
        int ok = dg_run(k, &s, dx, n, dout, runs[ri].sm_count, runs[ri].bps, -1) == 0;
        double err = 0;
        float *got[CU_MV_MAX_W] = {0};
        for (int i = 0; i < n_out; i++) {
            got[i] = kc_read(k, dout[i], out_floats(&s, i, n));
            double e = kc_rel_err(got[i], ref[i], out_floats(&s, i, n));
            err = e > err ? e : err;
        }
        /* Tokens alone give the batch's bytes. */
        int inv = 1;
        const int singles[3] = {0, n / 2, n - 1};
        for (int t = 0; ok && t < 3; t++) {
            ok = dg_run(k, &s, dx + (size_t)singles[t] * cols, 1, dsingle, runs[ri].sm_count,
                        runs[ri].bps, -1) == 0;
            for (int i = 0; ok && i < n_out; i++) {
                float *one = kc_read(k, dsingle[i], out_floats(&s, i, 1));
                inv &= memcmp(one, got[i] + out_floats(&s, i, singles[t]),
                              out_floats(&s, i, 1) * sizeof(float)) == 0;
                free(one);
            }
        }
        /* x rounded by the other path (the pre-pass's copy or the blocks):
         * the same bytes. (Where the launch takes both: BF16 at the token
         * counts of the mma.sync kernel; elsewhere one path per count.) */
        cu_mv_job jn;
        memset(&jn, 0, sizeof jn);
        jn.w[0] = s.w[0];
        jn.n = n;
        const int copied = cu_dg_x_bytes(&jn) > 0;
        float *dother[CU_MV_MAX_W] = {0};
        for (int i = 0; i < n_out; i++)
            dother[i] = k->gpu->ops->act_alloc(k->gpu, out_floats(&s, i, n));
        int same = ok;
        if (!cu_dg_x_either(&jn)) {
            for (int i = 0; i < n_out; i++)
                kc_dev_free(k, dother[i]);
            goto compared;
        }
        same = same && dg_run(k, &s, dx, n, dother, runs[ri].sm_count, runs[ri].bps, !copied) == 0;
        for (int i = 0; same && i < n_out; i++) {
            float *o2 = kc_read(k, dother[i], out_floats(&s, i, n));
            same = memcmp(o2, got[i], out_floats(&s, i, n) * sizeof(float)) == 0;
            free(o2);
        }
        for (int i = 0; i < n_out; i++)
            kc_dev_free(k, dother[i]);
    compared:
        inv &= same;
        char what[96];
        snprintf(what, sizeof what, "%s %s%s %" PRId64 "x%" PRId64 " n=%d %s%s", dtype_get(ft)->name,
                 mode == CU_MV_GLU_SILU ? "glu " : mode == CU_MV_GLU_GELU ? "gelu " : "",
                 n_w > 1 && mode == CU_MV_STORE ? "x3" : "", rows[0], cols, n, runs[ri].name,
                 with_bias ? " +bias" : "");
        kc_report(k, "dgemm", what, ok ? err : INFINITY,
                  mode == CU_MV_STORE ? BOUND_DG : BOUND_DG_GLU, inv, -1, 0);
        for (int i = 0; i < n_out; i++) {
            free(got[i]);
            kc_dev_free(k, dout[i]);
            kc_dev_free(k, dsingle[i]);
        }
    }
    kc_dev_free(k, dx);
    for (int i = 0; i < n_w; i++)
        free(ref[i]);
    free(x);
    free(xr);
done:
    for (int i = 0; i < made_b; i++)
        kc_weight_free(&b[i]);
    for (int i = 0; i < made; i++)
        kc_weight_free(&w[i]);
}

/* ---- perf: the Qwen3-8B decode shapes, weights streamed past L2 ---- */

#define DG_STREAM_BYTES (512.0 * 1024 * 1024)
#define DG_MAX_COPIES 32

/* One shape at each batch size of ns[]: the weights made once, copied
 * until the copies pass L2, each launch taking the next copy. */
static void dg_perf(kc *k, dtype t, int mode, int64_t rows, int64_t cols, const int *ns, int n_ns)
{
    cuda_backend *cb = cuda_of(k->gpu);
    const int nw = mode == CU_MV_STORE ? 1 : 2;
    bk_weight w[2];
    for (int i = 0; i < nw; i++)
        if (kc_weight(k, &w[i], t, rows, cols, i ? "dg.perf.up" : "dg.perf") != 0) {
            if (i)
                kc_weight_free(&w[0]);
            return;
        }
    const cu_matrix *m0[2] = {&((const cuda_weight *)w[0].dev)->m,
                              nw > 1 ? &((const cuda_weight *)w[1].dev)->m : NULL};
    const size_t mbytes = (size_t)rows * m0[0]->stride;
    int copies = (int)ceil(DG_STREAM_BYTES / ((double)mbytes * nw));
    copies = copies < 1 ? 1 : copies > DG_MAX_COPIES ? DG_MAX_COPIES : copies;
    cu_matrix mc[DG_MAX_COPIES][2];
    void *mem[DG_MAX_COPIES][2] = {{0}};
    int ok = 1;
    for (int c = 0; c < copies; c++)
        for (int i = 0; i < nw; i++) {
            mc[c][i] = *m0[i];
            if (c && (cudaMalloc(&mem[c][i], mbytes) != cudaSuccess ||
                      cudaMemcpyAsync(mem[c][i], m0[i]->data, mbytes, cudaMemcpyDeviceToDevice,
                                      k->stream) != cudaSuccess)) {
                mem[c][i] = NULL;
                ok = 0;
            }
            if (c && mem[c][i])
                mc[c][i].data = mem[c][i];
        }
    for (int ni = 0; ni < n_ns && ok; ni++) {
        const int n = ns[ni];
        float *x = xmalloc((size_t)n * cols * sizeof(float));
        kc_fill(k, x, (size_t)n * cols, 1.0f);
        float *dx = kc_dev(k, x, (size_t)n * cols);
        float *dout = k->gpu->ops->act_alloc(k->gpu, (size_t)n * rows);
        cu_mv_job j;
        memset(&j, 0, sizeof j);
        j.n_w = nw;
        j.mode = (cu_mv_mode)mode;
        j.x = dx;
        j.n = n;
        j.out[0] = dout;
        j.sm_count = cb->info.sm_count;
        j.w[0] = &mc[0][0];
        j.w[1] = nw > 1 ? &mc[0][1] : NULL;
        const int bps = cb->tune.dgemm_blocks_per_sm;
        size_t np = cu_dg_partial_floats(&j, bps), nc = cu_dg_counters(&j, bps);
        void *part = NULL, *cnt = NULL, *xb = NULL;
        if (np && (cudaMalloc(&part, np * sizeof(float)) != cudaSuccess ||
                   cudaMalloc(&cnt, nc * sizeof(unsigned)) != cudaSuccess ||
                   cudaMemset(cnt, 0, nc * sizeof(unsigned)) != cudaSuccess))
            ok = 0;
        if (ok && cudaMalloc(&xb, (size_t)n * (size_t)cols * 2) != cudaSuccess)
            ok = 0;
        /* The GEMM with x rounded by its blocks, with x's bf16 copy made
         * by its pre-pass (both timed: the launch does both), the mat-vec. */
        static const char *const names[3] = {"dgemm", "dgemm+xcopy", "mat-vec"};
        for (int which = 0; which < 3 && ok; which++) {
            const int reps = 4 * copies < 40 ? 40 : 4 * copies;
            float ms = 0;
            const int either = cu_dg_x_either(&j);
            if (!either && which == 1)
                continue; /* one way of rounding x per token count */
            void *xbw = which == 1 || (!either && cu_dg_x_bytes(&j)) ? xb : NULL;
            /* One launch unmeasured: the instance's first-use costs. */
            ok &= (which == 2 ? launch_matvec(&j, k->stream)
                              : launch_decode_gemm(&j, bps, part, cnt, xbw, k->stream)) == cudaSuccess;
            cudaEventRecord(k->ev0, k->stream);
            for (int r = 0; r < reps; r++) {
                for (int i = 0; i < nw; i++)
                    j.w[i] = &mc[r % copies][i];
                ok &= (which == 2 ? launch_matvec(&j, k->stream)
                                  : launch_decode_gemm(&j, bps, part, cnt, xbw, k->stream)) ==
                      cudaSuccess;
            }
            cudaEventRecord(k->ev1, k->stream);
            double us = -1;
            if (cudaEventSynchronize(k->ev1) == cudaSuccess &&
                cudaEventElapsedTime(&ms, k->ev0, k->ev1) == cudaSuccess)
                us = (double)ms * 1000.0 / reps;
            char what[96];
            snprintf(what, sizeof what, "%s %" PRId64 "x%" PRId64 "%s n=%d %s", dtype_get(t)->name,
                     rows, cols, nw > 1 ? " glu" : "", n, names[which]);
            kc_report(k, "dgemm", what, ok ? 0.0 : INFINITY, 0.0, -1, us, (double)mbytes * nw);
        }
        cudaFree(xb);
        cudaFree(part);
        cudaFree(cnt);
        kc_dev_free(k, dx);
        kc_dev_free(k, dout);
        free(x);
    }
    for (int c = 1; c < copies; c++)
        for (int i = 0; i < nw; i++)
            cudaFree(mem[c][i]);
    for (int i = 0; i < nw; i++)
        kc_weight_free(&w[i]);
}

/* The mma.sync / ldmatrix layouts (kernels/mma.cuh) on one tile of small
 * integers, whose sums are exact in any order: on the device this checks
 * the layouts the kernel and the emulation assume against the hardware,
 * under the emulation that the emulation implements them. */
static void dg_check_mma_layouts(kc *k)
{
    float a[256], b[256], c[256], ref[16 * 24];
    for (int i = 0; i < 256; i++) {
        a[i] = (float)((int)(rng_next_u64(&k->rng) % 17) - 8);
        b[i] = (float)((int)(rng_next_u64(&k->rng) % 17) - 8);
        c[i] = (float)((int)(rng_next_u64(&k->rng) % 2001) - 1000);
    }
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 24; n++) {
            const int col = n < 16 ? n : n - 8; /* columns 16-23: b's 8-15 again */
            float s = 0;
            for (int q = 0; q < 16; q++)
                s += a[r * 16 + q] * b[col * 16 + q];
            ref[r * 24 + n] = s + c[r * 16 + col];
        }
    float *da = kc_dev(k, a, 256), *db = kc_dev(k, b, 256), *dc = kc_dev(k, c, 256);
    float *dd = k->gpu->ops->act_alloc(k->gpu, 16 * 24);
    int ok = launch_dg_mma_selftest(da, db, dc, dd, k->stream) == cudaSuccess &&
             cudaStreamSynchronize(k->stream) == cudaSuccess;
    char detail[128] = "d = a b^T + c exact";
    if (ok) {
        float *got = kc_read(k, dd, 16 * 24);
        for (int i = 0; i < 16 * 24 && ok; i++)
            if (got[i] != ref[i]) {
                snprintf(detail, sizeof detail, "d[%d][%d] = %g, want %g", i / 24, i % 24,
                         (double)got[i], (double)ref[i]);
                ok = 0;
            }
        free(got);
    } else {
        snprintf(detail, sizeof detail, "the launch failed");
    }
    kc_report_ok(k, "dgemm", "mma.sync / ldmatrix fragment layouts", ok, detail);
    kc_dev_free(k, da);
    kc_dev_free(k, db);
    kc_dev_free(k, dc);
    kc_dev_free(k, dd);
}

void kc_check_dgemm(kc *k)
{
    dg_check_mma_layouts(k);
    const int64_t one[1] = {200}, qkv[3] = {256, 64, 64}, pair[1] = {96}, pair2[1] = {64};
    dg_case(k, DT_BF16, CU_MV_STORE, 1, one, 192, 37, 1);
    dg_case(k, DT_BF16, CU_MV_STORE, 3, qkv, 640, 5, 1); /* 10 steps: the ring wraps */
    dg_case(k, DT_BF16, CU_MV_STORE, 1, one, 128, 12, 0); /* the 9-16 token instance */
    dg_case(k, DT_BF16, CU_MV_GLU_SILU, 2, pair, 128, 20, 0);
    dg_case(k, DT_BF16, CU_MV_GLU_GELU, 2, pair2, 64, 70, 0);
    /* The other formats, each through a different instance: decoded as the
     * CPU decodes them, rounded to bf16. */
    const int64_t q64[1] = {64}, q3[3] = {128, 64, 64};
    dg_case(k, DT_Q8_0, CU_MV_STORE, 3, q3, 320, 5, 1);    /* 5 steps: both slots, x3 */
    dg_case(k, DT_Q4_K, CU_MV_GLU_SILU, 2, pair, 512, 37, 0); /* x's copy, tokens split */
    dg_case(k, DT_Q6_K, CU_MV_STORE, 1, one, 256, 12, 0);
    dg_case(k, DT_Q5_K, CU_MV_STORE, 1, q64, 256, 20, 0);
    dg_case(k, DT_Q4_0, CU_MV_STORE, 1, q64, 128, 1, 0);
    dg_case(k, DT_NVFP4, CU_MV_STORE, 1, q64, 128, 3, 0);
    dg_case(k, DT_MXFP8, CU_MV_STORE, 1, q64, 128, 70, 0);  /* two token groups */
    /* From 17 tokens on an sm_90a build (and the emulation) the wgmma
     * kernel: each format through it, its 32- and 64-token sizes, its ring
     * wrapping (Q5_K's 64-token size has two stages). */
    dg_case(k, DT_Q8_0, CU_MV_STORE, 1, q64, 320, 40, 0);
    dg_case(k, DT_Q6_K, CU_MV_STORE, 1, one, 512, 24, 0);
    dg_case(k, DT_Q5_K, CU_MV_STORE, 1, q64, 512, 64, 0);
    dg_case(k, DT_Q4_0, CU_MV_STORE, 1, q64, 256, 33, 0);
    dg_case(k, DT_NVFP4, CU_MV_STORE, 1, q64, 256, 17, 0);
    /* The quant formats' bytes come by the tensor memory accelerator
     * there: three matrices (each segment its map), rows past the last
     * tile's; BF16's three segments by the lanes' copies. */
    const int64_t q3b[3] = {200, 64, 72};
    dg_case(k, DT_Q4_K, CU_MV_STORE, 3, q3b, 512, 40, 1);
    dg_case(k, DT_BF16, CU_MV_STORE, 3, q3b, 256, 40, 1);
    /* What the kernel does not take: F32 and F16 weights (the mat-vec keeps
     * them f32). */
    static const dtype refused[] = {DT_F32, DT_F16};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(refused); i++) {
        bk_weight q;
        if (kc_weight(k, &q, refused[i], 64, 128, "dg.refused") != 0)
            continue;
        cu_mv_job j;
        memset(&j, 0, sizeof j);
        float *dx = k->gpu->ops->act_alloc(k->gpu, 128);
        j.w[0] = &((const cuda_weight *)q.dev)->m;
        j.out[0] = dx;
        j.n_w = 1;
        j.x = dx;
        j.n = 1;
        char what[64];
        snprintf(what, sizeof what, "refuses %s weights", dtype_get(refused[i])->name);
        kc_report_ok(k, "dgemm", what, !cu_dg_job_ok(&j), "cu_dg_job_ok is 0");
        kc_dev_free(k, dx);
        kc_weight_free(&q);
    }
    if (!k->o->perf)
        return;
    static const int ns[] = {1, 8, 16, 32, 64};
    const int nn = (int)MEMRA_ARRAY_LEN(ns);
    /* Q4_K_M's formats: Q4_K gate+up, q+k+v, o; Q6_K down (and v, the
     * head); Q8_0; then the other formats the decode GEMM runs. */
    static const dtype fmts[] = {DT_BF16, DT_Q4_K, DT_Q6_K, DT_Q8_0,
                                 DT_Q5_K, DT_Q4_0, DT_NVFP4, DT_MXFP8};
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(fmts); f++) {
        dg_perf(k, fmts[f], CU_MV_GLU_SILU, 12288, 4096, ns, nn);
        dg_perf(k, fmts[f], CU_MV_STORE, 4096, 12288, ns, nn);
        dg_perf(k, fmts[f], CU_MV_STORE, 6144, 4096, ns, nn);
        dg_perf(k, fmts[f], CU_MV_STORE, 4096, 4096, ns, nn);
    }
}
