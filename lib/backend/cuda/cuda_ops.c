/* The CUDA backend's dense ops: embedding, RMSNorm, the projections, the
 * gated FFN and the elementwise ops. Each checks its weights were made by
 * this backend, launches on the backend's stream and records a failed
 * launch; nothing waits for the device here. */
#include <inttypes.h>

#include "backend/cuda/cuda_internal.h"
#include "kernels/elementwise.cuh"
#include "kernels/embed.cuh"
#include "kernels/norm.cuh"

void cuda_op_embed(backend *b, const bk_weight *table, const int32_t *tokens, int n, float scale,
                   float *out)
{
    cuda_backend *cb = cuda_of(b);
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
    const int32_t *dev = cuda_stage_upload(cb, STAGE_TOKENS, tokens, (size_t)n * sizeof *tokens);
    if (dev)
        CU_OK(cb, launch_embed(&cw->m, dev, n, scale, out, cb->stream));
}

void cuda_op_rmsnorm(backend *b, const float *x, int n, const bk_weight *w, float w_offset,
                     float eps, float *out)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->failed || n <= 0)
        return;
    const float *wv = cuda_vec_of(cb, w, "rmsnorm");
    if (!wv) {
        cuda_failf(cb, "rmsnorm: no weight");
        return;
    }
    CU_OK(cb, launch_rmsnorm(x, n, w->cols, wv, w_offset, eps, out, cb->stream));
}

/* One projection; the bias, when present, must have one value per row. */
static void matmul_one(cuda_backend *cb, const bk_weight *w, const bk_weight *bias, const float *x,
                       int n, float *out, const char *op)
{
    const cuda_weight *cw = cuda_weight_of(cb, w, op);
    if (!cw)
        return;
    const float *bv = cuda_vec_of(cb, bias, op);
    if (cb->failed)
        return;
    if (bv && bias->cols != w->rows) {
        cuda_failf(cb, "%s: bias '%s' has %" PRId64 " values for %" PRId64 " rows of '%s'", op,
                   bias->name, bias->cols, w->rows, w->name);
        return;
    }
    CU_OK(cb, launch_matmul(&cw->m, bv, x, n, out, cb->stream));
}

void cuda_op_matmul(backend *b, const bk_weight *w, const bk_weight *bias, const float *x, int n,
                    float *out)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->failed || n <= 0)
        return;
    matmul_one(cb, w, bias, x, n, out, "matmul");
}

void cuda_op_attn_qkv(backend *b, const bk_weight *wq, const bk_weight *wk, const bk_weight *wv,
                      const bk_weight *bq, const bk_weight *bk, const bk_weight *bv,
                      const float *x, int n, float *q, float *k, float *v)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->failed || n <= 0)
        return;
    matmul_one(cb, wq, bq, x, n, q, "attn_qkv");
    if (!cb->failed)
        matmul_one(cb, wk, bk, x, n, k, "attn_qkv");
    if (!cb->failed)
        matmul_one(cb, wv, bv, x, n, v, "attn_qkv");
}

void cuda_op_ffn_glu(backend *b, const bk_weight *gate, const bk_weight *up,
                     const bk_weight *down, bk_act act, const float *x, int n, float *hb,
                     float *hb2, float *out)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->failed || n <= 0)
        return;
    matmul_one(cb, gate, NULL, x, n, hb, "ffn_glu");
    if (!cb->failed)
        matmul_one(cb, up, NULL, x, n, hb2, "ffn_glu");
    if (cb->failed ||
        CU_OK(cb, launch_glu(hb, hb2, (size_t)n * (size_t)gate->rows,
                             act == BK_ACT_GELU_TANH ? 1 : 0, cb->stream)))
        return;
    matmul_one(cb, down, NULL, hb, n, out, "ffn_glu");
}

void cuda_op_add(backend *b, float *x, const float *y, size_t n)
{
    cuda_backend *cb = cuda_of(b);
    if (!cb->failed)
        CU_OK(cb, launch_add(x, y, n, cb->stream));
}

void cuda_op_softcap(backend *b, float *x, size_t n, float cap)
{
    cuda_backend *cb = cuda_of(b);
    if (!cb->failed)
        CU_OK(cb, launch_softcap(x, n, cap, cb->stream));
}
