/* Launchers for attention over the paged KV cache on the device.
 *
 * The device pool mirrors lib/engine/kv_cache.h: K (and V) of layer l,
 * physical block b, slot s is the kv_dim values at
 * ((l * n_blocks + b) * block_size + s) * kv_dim, in f32 or f16 as the
 * host cache's type says, addressed through the same block tables.
 *
 * Row metadata is one device int32 array: [n] positions, [n] offsets of
 * each row's block table, then the block tables (logical -> physical).
 *
 * Split-K flash-decode with a deterministic reduction: a row's keys are
 * cut into chunks of ATTN_CHUNK absolute positions (chunk c holds
 * positions [c * ATTN_CHUNK, (c + 1) * ATTN_CHUNK) of the row's visible
 * span), one block per (chunk, KV head, row) computes each chunk's max,
 * exp-sum and weighted V for all the query heads of that KV head, and a
 * second kernel merges the chunks in ascending order. The cut depends on
 * the row's own position and window only, so a row's output is the same
 * whatever else is in the batch. */
#ifndef MEMRA_KERNELS_ATTENTION_CUH
#define MEMRA_KERNELS_ATTENTION_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_CHUNK 64

typedef struct {
    void *k, *v;        /* device pools */
    int f16;            /* element type: 0 f32, 1 f16 */
    int n_blocks, block_size;
    int64_t kv_dim;
} cu_kv_pool;

typedef struct {
    int layer;
    int n_heads, n_kv_heads, head_dim;
    float scale, softcap;
    int64_t window;     /* 0: full causal */
} cu_attn;

/* Chunks a row at position pos has (its partials' slots). */
static inline int attn_row_chunks(int64_t pos, int64_t window)
{
    int64_t lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    return (int)(pos / ATTN_CHUNK - lo / ATTN_CHUNK + 1);
}

/* Store k, v [n][kv_dim] at each row's position. */
cudaError_t launch_kv_append(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                             const float *k, const float *v, cudaStream_t stream);

/* out [n][n_heads][head_dim] = softmax(q . K^T * scale, soft-capped, causal
 * and windowed) . V. part: device scratch of attn_partials_floats floats;
 * max_chunks: the largest attn_row_chunks of the rows. */
cudaError_t launch_attention(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                             const float *q, int max_chunks, float *part, float *out,
                             cudaStream_t stream);

static inline size_t attn_partials_floats(int n, int n_heads, int head_dim, int max_chunks)
{
    return (size_t)n * (size_t)n_heads * (size_t)max_chunks * (size_t)(head_dim + 2);
}

#ifdef __cplusplus
}
#endif

#endif
