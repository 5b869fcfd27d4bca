/* The gated DeltaNet mixer on the device (kernels/delta_net.cuh) over the
 * recurrent state pool kv_prepare made, and the gated attention's two
 * small ops (the sigmoid gate, the split of q_proj's [q | gate] rows).
 * The rows' state slots come with the step's row metadata, so a graphed
 * decode step reads them from its refreshed inputs like its positions. */
#include <inttypes.h>

#include "backend/cuda/cuda_internal.h"
#include "kernels/delta_chunk.cuh"
#include "kernels/delta_net.cuh"
#include "kernels/elementwise.cuh"

void cuda_op_mul_sigmoid(backend *b, float *x, const float *g, int n, int64_t x_cols,
                         int64_t g_cols)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (!cb->failed)
        CU_OK(cb, launch_mul_sigmoid(x, g, n, x_cols, g_cols, cb->stream));
}

void cuda_op_split_heads(backend *b, const float *x, int n, int n_heads, int a_dim, int b_dim,
                         float *a, float *bo)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (!cb->failed)
        CU_OK(cb, launch_split_heads(x, n, n_heads, a_dim, b_dim, a, bo, cb->stream));
}

void cuda_op_join_heads(backend *b, const float *a, const float *bo, int n, int n_heads,
                        int a_dim, int b_dim, float *x)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (!cb->failed)
        CU_OK(cb, launch_join_heads(a, bo, n, n_heads, a_dim, b_dim, x, cb->stream));
}

/* A prompt chunk of at least CUDA_DELTA_CHUNK_MIN_ROWS rows whose states
 * no checkpoint keeps, on a device that offers the shared memory the
 * kernels ask for (~153 kB for key heads of 128: sm_80 and sm_90, not
 * sm_86/89), runs the rule in the chunked form
 * (kernels/delta_chunk.cuh): its rounding depends on the step's rows,
 * which a prefill step allows; decode and verify steps keep the
 * row-after-row rule, whose rows are the same bytes in any step. */
static int delta_chunked(const cuda_backend *cb, const bk_delta *d, const bk_batch *rows)
{
    if (!cb->step.active || !cb->step.prefill || rows->n < CUDA_DELTA_CHUNK_MIN_ROWS ||
        delta_chunk_smem(d->k_dim) > cb->info.smem_optin)
        return 0;
    for (int i = 0; i < rows->n; i++)
        if (rows->seq[i] && kv_seq_save_slot(rows->seq[i], rows->pos[i]) >= 0)
            return 0;
    return 1;
}

/* The runs of consecutive rows of one state slot in the step (as the
 * kernel finds them). */
static int runs_of(const bk_batch *rows)
{
    int runs = 0, prev = -1;
    for (int i = 0; i < rows->n; i++) {
        int slot = rows->seq[i] ? rows->seq[i]->state_slot : -1;
        runs += slot >= 0 && (i == 0 || slot != prev);
        prev = slot;
    }
    return runs;
}

void cuda_op_delta_net(backend *b, const bk_delta *d, const bk_batch *rows, const float *qkv,
                       const float *z, const float *beta_in, const float *alpha, float *out)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (cb->failed || rows->n <= 0)
        return;
    if (!delta_net_supports(d->k_dim, d->v_dim) || d->conv_k < 2 || d->conv_k > 4) {
        cuda_failf(cb, "delta_net: no kernel for key heads of %d, value heads of %d and a conv "
                   "of %d taps (key heads of 16, 32, 64 or 128, value heads up to 1024, "
                   "2 to 4 taps)", d->k_dim, d->v_dim, d->conv_k);
        return;
    }
    if (!cb->state) {
        cuda_failf(cb, "delta_net: no recurrent state pool (the KV cache was made without "
                   "one)");
        return;
    }
    /* a pipeline stage keeps its layers' part of each slot */
    size_t s_lo = cb->has_win ? cb->win.state_lo : 0, stride = cuda_state_stride(cb, cb->kv);
    size_t s_floats = bk_delta_state_floats(d->n_k_heads, d->n_v_heads, d->k_dim, d->v_dim,
                                            d->conv_k);
    if (d->state_off < s_lo || d->state_off - s_lo + s_floats > stride) {
        cuda_failf(cb, "delta_net: the layer's state (floats %zu to %zu of a slot) is not in "
                   "this backend's part (%zu to %zu)", d->state_off, d->state_off + s_floats,
                   s_lo, s_lo + stride);
        return;
    }
    const float *conv_w = cuda_vec_of(cb, d->conv, "delta_net");
    const float *dt = cuda_vec_of(cb, d->dt_bias, "delta_net");
    const float *a = cuda_vec_of(cb, d->a, "delta_net");
    const float *norm = cuda_vec_of(cb, d->norm, "delta_net");
    const int32_t *slots = NULL, *saves = NULL;
    const int32_t *meta = cuda_rows_meta(cb, rows, &slots, &saves);
    size_t conv_dim = 2 * (size_t)d->n_k_heads * (size_t)d->k_dim +
                      (size_t)d->n_v_heads * (size_t)d->v_dim;
    float *conv_out =
        cuda_scratch(cb, SCR_DELTA, (size_t)rows->n * conv_dim * sizeof(float), "delta_net");
    float *chunk = NULL;
    if (delta_chunked(cb, d, rows))
        chunk = cuda_scratch(cb, SCR_DELTA_CHUNK,
                             delta_chunk_floats(rows->n, d->n_v_heads, d->k_dim, d->v_dim) *
                                 sizeof(float),
                             "delta_net");
    if (cb->failed || !meta)
        return;
    cu_delta p = {
        .n = rows->n,
        .pos = meta,
        .slot = slots,
        .save = saves,
        .state = cb->state,
        .state_floats = stride,
        .state_off = d->state_off - s_lo,
        .n_k = d->n_k_heads,
        .n_v = d->n_v_heads,
        .k_dim = d->k_dim,
        .v_dim = d->v_dim,
        .conv_k = d->conv_k,
        .tiled = d->tiled,
        .a_is_log = d->a_is_log,
        .conv_w = conv_w,
        .dt_bias = dt,
        .a = a,
        .norm = norm,
        .eps = d->eps,
        .qkv = qkv,
        .z = z,
        .beta = beta_in,
        .alpha = alpha,
        .conv_out = conv_out,
        .out = out,
        .chunk = chunk,
        .n_runs = chunk ? runs_of(rows) : 0,
    };
    CU_OK(cb, launch_delta_net(&p, cb->stream));
}

void cuda_op_state_copy(backend *b, const kv_cache *kv, int from, int to)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (cb->failed)
        return;
    if (!cb->state || from < 0 || to < 0 || from >= kv->n_state_slots ||
        to >= kv->n_state_slots) {
        cuda_failf(cb, "state_copy: slot %d -> %d of %d (pool %s)", from, to, kv->n_state_slots,
                   cb->state ? "made" : "not made");
        return;
    }
    size_t sf = cuda_state_stride(cb, kv);
    CU_OK(cb, cudaMemcpyAsync(cb->state + (size_t)to * sf, cb->state + (size_t)from * sf,
                              sf * sizeof(float), cudaMemcpyDeviceToDevice, cb->stream));
}
