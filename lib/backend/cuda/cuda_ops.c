/* The CUDA backend's dense ops: embedding, RMSNorm, the projections, the
 * gated FFN and the elementwise ops. Each checks its weights were made by
 * this backend, launches on the backend's stream and records a failed
 * launch; nothing waits for the device here. */
#include <inttypes.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "core/check.h"
#include "kernels/elementwise.cuh"
#include "kernels/gather_cols.cuh"
#include "kernels/embed.cuh"
#include "kernels/gemm_prep.cuh"
#include "kernels/norm.cuh"

void cuda_op_embed(backend *b, const bk_weight *table, const int32_t *tokens, int n, float scale,
                   float *out)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (cb->failed || n <= 0)
        return;
    const cuda_weight *cw = cuda_weight_of(cb, table, "embed");
    if (!cw)
        return;
    /* An id past the table would read outside it on the device. */
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= cw->m.rows) {
            cuda_failf(cb, "embed: token id %" PRId32 " at row %d is outside '%s' (%" PRId64
                       " rows)", tokens[i], i, cw->name, cw->m.rows);
            return;
        }
    /* In a graphed step the tokens are the step's graph input. */
    const int32_t *dev = cuda_graph_tokens(cb);
    if (!dev)
        dev = cuda_stage_upload(cb, STAGE_TOKENS, tokens, (size_t)n * sizeof *tokens);
    if (dev)
        CU_OK(cb, launch_embed(&cw->m, dev, n, scale, out, cb->stream));
}

/* RMSNorm; a residual add held back for exactly these rows (x += y over
 * n * cols floats) is done by the same launch. */
void cuda_op_rmsnorm(backend *b, const float *x, int n, const bk_weight *w, float w_offset,
                     float eps, float *out)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->failed || n <= 0) {
        cuda_flush_pending(cb);
        return;
    }
    const float *wv = cuda_vec_of(cb, w, "rmsnorm");
    if (!wv) {
        cuda_failf(cb, "rmsnorm: no weight");
        return;
    }
    cuda_pending_add p = cb->pending;
    const size_t nf = (size_t)n * (size_t)w->cols;
    const int add = p.x && p.x == x && p.n == nf;
    if (add)
        cb->pending.x = NULL;
    else
        cuda_flush_pending(cb);
    cuda_xshadow_drop(cb);
    /* A decode step's rows that the decode GEMM takes next: their bf16
     * copy made here (cuda_xshadow), not by a launch of its own. */
    void *xb = NULL;
    if (cuda_xshadow_wanted(cb, n))
        xb = cuda_scratch(cb, SCR_XSHADOW, nf * 2, "the RMSNorm's bf16 copy");
    if (cb->failed)
        return;
    const int rc = add ? CU_OK(cb, launch_add_rmsnorm(p.x, p.y, n, w->cols, wv, w_offset, eps,
                                                      out, xb, cb->stream))
                       : CU_OK(cb, launch_rmsnorm(x, n, w->cols, wv, w_offset, eps, out, xb,
                                                  cb->stream));
    if (rc == 0 && xb)
        cb->xshadow = (cuda_xshadow){out, nf, xb};
}

const void *cuda_xshadow_take(cuda_backend *cb, const float *x, int n, int64_t cols)
{
    const cuda_xshadow s = cb->xshadow;
    cuda_xshadow_drop(cb);
    return s.x && s.x == x && n > 0 && cols > 0 && s.n_floats == (size_t)n * (size_t)cols ? s.bf
                                                                                          : NULL;
}

/* The device weight and bias of one projection; the bias, when present,
 * must have one value per row. 0, or -1 after recording a failure. */
static int proj_of(cuda_backend *cb, const bk_weight *w, const bk_weight *bias, const char *op,
                   const cuda_weight **cw, const float **bv)
{
    *cw = cuda_weight_of(cb, w, op);
    if (!*cw)
        return -1;
    *bv = cuda_vec_of(cb, bias, op);
    if (cb->failed)
        return -1;
    if (*bv && bias->cols != w->rows)
        return cuda_failf(cb, "%s: bias '%s' has %" PRId64 " values for %" PRId64 " rows of '%s'",
                          op, bias->name, bias->cols, w->rows, w->name);
    return 0;
}

static void job_init(cuda_backend *cb, cu_mv_job *j, const float *x, int n)
{
    memset(j, 0, sizeof *j);
    j->mode = CU_MV_STORE;
    j->x = x;
    j->n = n;
    j->sm_count = cb->info.sm_count;
}

/* Whether n rows of the current step projected by cw go through the
 * prefill GEMM: a prompt chunk of gemm_min_rows rows or more that the
 * decode GEMM does not take (cuda_chunk_on_dgemm). */
static int use_gemm(const cuda_backend *cb, const cuda_weight *cw, int n)
{
    return cb->tune.gemm && cb->step.active && cb->step.prefill && n >= cb->tune.gemm_min_rows &&
           !cuda_chunk_on_dgemm(cb, &cw->m, n);
}

/* out = x . W^T (+ bias) for one prepared weight: the GEMM for a prefill
 * chunk when it applies, else the mat-vec. */
static void project(cuda_backend *cb, const cuda_weight *cw, const float *bias, const float *x,
                    const void *xbf, int n, float *out)
{
    if (use_gemm(cb, cw, n) && cuda_gemm_matmul(cb, cw, bias, x, n, out))
        return;
    if (cb->failed)
        return;
    cu_mv_job j;
    job_init(cb, &j, x, n);
    j.xbf = xbf;
    j.w[0] = &cw->m;
    j.bias[0] = bias;
    j.out[0] = out;
    j.n_w = 1;
    cuda_mv_run(cb, &j);
}

void cuda_op_matmul(backend *b, const bk_weight *w, const bk_weight *bias, const float *x, int n,
                    float *out)
{
    cuda_backend *cb = cuda_of(b);
    const void *xbf = cuda_xshadow_take(cb, x, n, w->cols);
    cuda_flush_pending(cb);
    if (cb->failed || n <= 0)
        return;
    const cuda_weight *cw;
    const float *bv;
    if (proj_of(cb, w, bias, "matmul", &cw, &bv) == 0)
        project(cb, cw, bv, x, xbf, n, out);
}

/* Several projections of one x (at most four): one launch over the
 * matrices that share a format and width, as many as a launch takes,
 * then one over those left (one mat-vec reading q's 4096 rows with k's
 * and v's 1024 keeps every SM busy where k and v alone would not). Which
 * matrices share a launch changes no row's bytes (kernels/matmul.cuh). */
static void project_set(backend *b, int nw, const bk_weight *const *ws,
                        const bk_weight *const *bs, float *const *outs, const float *x, int n,
                        const char *op)
{
    cuda_backend *cb = cuda_of(b);
    const void *xbf = cuda_xshadow_take(cb, x, n, ws[0]->cols);
    cuda_flush_pending(cb);
    if (cb->failed || n <= 0)
        return;
    const cuda_weight *cw[4];
    const float *bias[4];
    MEMRA_ASSERT(nw >= 1 && nw <= 4);
    int any_gemm = 0, all_gemm = 1;
    for (int i = 0; i < nw; i++) {
        if (proj_of(cb, ws[i], bs ? bs[i] : NULL, op, &cw[i], &bias[i]) != 0)
            return;
        const int g = use_gemm(cb, cw[i], n);
        any_gemm |= g;
        all_gemm &= g && cuda_gemm_takes(cb, cw[i], n) && cw[i]->m.cols == cw[0]->m.cols;
    }
    if (any_gemm) {
        /* x rounded to bf16 once for the GEMMs when every one runs one */
        if (all_gemm) {
            const uint16_t *xb = cuda_gemm_input_of(cb, x, n, cw[0]->m.cols);
            for (int i = 0; i < nw && xb && !cb->failed; i++)
                cuda_gemm_matmul_bf16(cb, cw[i], bias[i], xb, n, outs[i]);
            return;
        }
        for (int i = 0; i < nw && !cb->failed; i++)
            project(cb, cw[i], bias[i], x, xbf, n, outs[i]);
        return;
    }
    int taken[4] = {0};
    for (int i = 0; i < nw && !cb->failed; i++) {
        if (taken[i])
            continue;
        /* matrix i and those after it that can share its launch */
        cu_mv_job j;
        job_init(cb, &j, x, n);
        j.xbf = xbf;
        for (int k = i; k < nw && j.n_w < CU_MV_MAX_W; k++) {
            if (taken[k])
                continue;
            j.w[j.n_w] = &cw[k]->m;
            j.bias[j.n_w] = bias[k];
            j.out[j.n_w] = outs[k];
            j.n_w++;
            if (cu_mv_job_ok(&j)) {
                taken[k] = 1;
            } else {
                j.n_w--;
                j.w[j.n_w] = NULL;
                j.bias[j.n_w] = NULL;
                j.out[j.n_w] = NULL;
            }
        }
        cuda_mv_run(cb, &j);
    }
}

void cuda_op_attn_qkv(backend *b, const bk_weight *wq, const bk_weight *wk, const bk_weight *wv,
                      const bk_weight *bq, const bk_weight *bk, const bk_weight *bv,
                      const float *x, int n, float *q, float *k, float *v)
{
    const bk_weight *ws[3] = {wq, wk, wv}, *bs[3] = {bq, bk, bv};
    float *outs[3] = {q, k, v};
    project_set(b, 3, ws, bs, outs, x, n, "attn_qkv");
}

/* A DeltaNet layer's four input projections. Rows on the mat-vec (the
 * decode steps of an engine of one sequence) run each matrix on a launch
 * of its own, which measured faster than one launch over the four
 * (Qwen3.5-9B shape, BF16, an H100, 2026-12-05: tg128 140.1 against 135.9
 * tok/s; decision 0027). A prompt chunk on the prefill GEMM (pp512 19,284
 * against 18,950 as one set) and the decode GEMM's steps take them as one
 * set, x rounded to bf16 once for the four. */
void cuda_op_delta_in_proj(backend *b, const bk_weight *w_qkv, const bk_weight *w_z,
                           const bk_weight *w_beta, const bk_weight *w_alpha, const float *x,
                           int n, float *qkv, float *z, float *beta_in, float *alpha)
{
    cuda_backend *cb = cuda_of(b);
    const bk_weight *ws[4] = {w_qkv, w_z, w_beta, w_alpha};
    float *outs[4] = {qkv, z, beta_in, alpha};
    const cuda_weight *cw;
    const float *bv;
    if (!cb->failed && n > 0 && proj_of(cb, w_qkv, NULL, "delta_in_proj", &cw, &bv) == 0 &&
        !use_gemm(cb, cw, n)) {
        cu_mv_job j;
        job_init(cb, &j, x, n);
        j.w[0] = &cw->m;
        j.out[0] = qkv;
        j.n_w = 1;
        if (!cuda_mv_uses_dgemm(cb, &j)) {
            for (int i = 0; i < 4 && !cb->failed; i++)
                cuda_op_matmul(b, ws[i], NULL, x, n, outs[i]);
            return;
        }
    }
    project_set(b, 4, ws, NULL, outs, x, n, "delta_in_proj");
}

/* gate and up in one launch, each warp taking row r of both and writing
 * act(gate) * up (the bytes the separate projections and launch_glu give),
 * when they share a format and shape; then down. */
/* A prompt chunk's FFN as three GEMMs when each has one: x rounded to
 * bf16 once for gate and up, and act(gate) * up rounded to bf16 as it is
 * made (launch_glu_to_bf16: the bytes launch_glu and the down GEMM's own
 * rounding give) for down. 1 when it ran (or failed, recorded); 0 when
 * the caller's path runs it. */
static int ffn_gemm_fused(cuda_backend *cb, const cuda_weight *cg, const cuda_weight *cu,
                          const cuda_weight *cd, bk_act act, const float *x, int n, float *hb,
                          float *hb2, float *out)
{
    const int64_t ffn = cg->m.rows, ld = (ffn + 7) & ~(int64_t)7;
    if (!cuda_gemm_takes(cb, cg, n) || !cuda_gemm_takes(cb, cu, n) ||
        /* the input scratch is cudaMalloc-aligned: only the f32 operands are in question */
        !cuda_gemm_takes(cb, cd, n) || !glu_to_bf16_fits(hb, hb2, ffn, ld, NULL))
        return 0;
    const uint16_t *xb = cuda_gemm_input_of(cb, x, n, cg->m.cols);
    if (!xb || cuda_gemm_matmul_bf16(cb, cg, NULL, xb, n, hb) != 0 ||
        cuda_gemm_matmul_bf16(cb, cu, NULL, xb, n, hb2) != 0)
        return 1;
    uint16_t *hbb = cuda_gemm_input(cb, n, ffn);
    if (!hbb || CU_OK(cb, launch_glu_to_bf16(hb, hb2, n, ffn, ld, act == BK_ACT_GELU_TANH ? 1 : 0,
                                             hbb, cb->stream)))
        return 1;
    cuda_gemm_matmul_bf16(cb, cd, NULL, hbb, n, out);
    return 1;
}

void cuda_op_ffn_glu(backend *b, const bk_weight *gate, const bk_weight *up,
                     const bk_weight *down, bk_act act, const float *x, int n, float *hb,
                     float *hb2, float *out)
{
    cuda_backend *cb = cuda_of(b);
    const void *xbf = cuda_xshadow_take(cb, x, n, gate->cols);
    cuda_flush_pending(cb);
    if (cb->failed || n <= 0)
        return;
    const cuda_weight *cg, *cu, *cd;
    const float *none;
    if (proj_of(cb, gate, NULL, "ffn_glu", &cg, &none) || proj_of(cb, up, NULL, "ffn_glu", &cu, &none) ||
        proj_of(cb, down, NULL, "ffn_glu", &cd, &none))
        return;
    if (cg->m.rows != cu->m.rows || cg->m.cols != cu->m.cols || cd->m.cols != cg->m.rows) {
        cuda_failf(cb, "ffn_glu: shapes of '%s', '%s', '%s' do not chain", gate->name, up->name,
                   down->name);
        return;
    }
    cu_mv_job j;
    job_init(cb, &j, x, n);
    j.w[0] = &cg->m;
    j.w[1] = &cu->m;
    j.out[0] = hb;
    j.n_w = 2;
    j.mode = act == BK_ACT_GELU_TANH ? CU_MV_GLU_GELU : CU_MV_GLU_SILU;
    j.xbf = xbf;
    void *hbf = NULL; /* act(gate) * up rounded to bf16 by the GLU's GEMM, for down's */
    if (!use_gemm(cb, cg, n) && cu_mv_job_ok(&j)) {
        if (cuda_mv_uses_dgemm(cb, &j) && cuda_xshadow_wanted(cb, n)) {
            hbf = j.out_bf = cuda_scratch(cb, SCR_GLU_BF, (size_t)n * (size_t)cg->m.rows * 2,
                                          "the GLU's bf16 copy");
            if (cb->failed)
                return;
        }
        cuda_mv_run(cb, &j);
        if (cb->failed)
            return;
    } else if (use_gemm(cb, cg, n) && ffn_gemm_fused(cb, cg, cu, cd, act, x, n, hb, hb2, out)) {
        return;
    } else {
        project(cb, cg, NULL, x, xbf, n, hb);
        if (!cb->failed)
            project(cb, cu, NULL, x, xbf, n, hb2);
        if (cb->failed ||
            CU_OK(cb, launch_glu(hb, hb2, (size_t)n * (size_t)gate->rows,
                                 act == BK_ACT_GELU_TANH ? 1 : 0, cb->stream)))
            return;
    }
    project(cb, cd, NULL, hb, hbf, n, out);
}

void cuda_flush_pending(cuda_backend *cb)
{
    cuda_xshadow_drop(cb);
    cuda_pending_add p = cb->pending;
    cb->pending.x = NULL;
    if (p.x && !cb->failed)
        CU_OK(cb, launch_add(p.x, p.y, p.n, cb->stream));
}

/* Inside a step, the add waits for the op after it: an RMSNorm of the same
 * rows does it in its own launch (the layers' residual adds are all
 * followed by one), anything else launches it first. */
void cuda_op_add(backend *b, float *x, const float *y, size_t n)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (cb->failed || n == 0)
        return;
    if (cb->step.active) {
        cb->pending = (cuda_pending_add){x, y, n};
        return;
    }
    CU_OK(cb, launch_add(x, y, n, cb->stream));
}

void cuda_op_scale(backend *b, float *x, size_t n, float s)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (!cb->failed)
        CU_OK(cb, launch_scale(x, n, s, cb->stream));
}

void cuda_op_act_mul(backend *b, float *x, const float *y, int n, int64_t cols, int64_t y_stride,
                     bk_act act)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (!cb->failed)
        CU_OK(cb, launch_act_mul(x, y, n, cols, y_stride, act == BK_ACT_GELU_TANH ? 1 : 0,
                                 cb->stream));
}

void cuda_op_gather_cols(backend *b, const float *src, int n, int64_t n_src, const int32_t *map,
                         int64_t n_dst, float fill, float *out)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (!cb->failed)
        CU_OK(cb, launch_gather_cols(src, n, n_src, map, n_dst, fill, out, cb->stream));
}

void cuda_op_softcap(backend *b, float *x, size_t n, float cap)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (!cb->failed)
        CU_OK(cb, launch_softcap(x, n, cap, cb->stream));
}
