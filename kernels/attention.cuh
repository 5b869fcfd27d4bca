/* Launchers for attention over the paged KV cache on the device.
 *
 * The device pool mirrors lib/backend/kv_cache.h: K (and V) of layer l,
 * physical block b, slot s is the row of kv_dim values at byte
 * ((l * n_blocks + b) * block_size + s) * row_bytes, in the host cache's
 * type (f32, f16, bf16 or q8_0), stored and loaded through the codecs the
 * CPU backend uses (lib/numerics/kv_codec.h, so both store the same bytes),
 * addressed through the same block tables.
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
 * whatever else is in the batch. That is the older kernel
 * (launch_attention), kept for the shapes the decode kernel does not take.
 *
 * The default (launch_attention_decode) cuts a row's visible span of L
 * keys into at most min(S, ceil(L / F)) splits of attn_split_keys(L, S, F)
 * keys (a multiple of ATTN_SPLIT_UNIT), S (cu_attn.splits, at most
 * ATTN_SPLITS_MAX) chosen by the caller from the device and the model,
 * F (cu_attn.split_min) a constant, never from the batch. One block per
 * (split, KV head, row) reads each key's K and V once, with 16-byte
 * loads (for f16 / bf16 caches copied by each lane a round or two ahead
 * into its own slots of shared memory), for all the query heads of the KV
 * head (GQA), and keeps an online softmax per head; a second kernel merges
 * each row's splits in ascending order. The split depends on the row's
 * span, S and F only. Variants measured slower on the H200 and deleted
 * (K/V staged through shared memory by the whole block between barriers,
 * the splits merged by the last block, the KV heads of a split in
 * neighbouring blocks) are in git history and docs/decisions/0008 and
 * 0012. */
#ifndef MEMRA_KERNELS_ATTENTION_CUH
#define MEMRA_KERNELS_ATTENTION_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ATTN_CHUNK 64
#define ATTN_SPLIT_UNIT 64
#define ATTN_SPLITS_MAX 128
/* The default floor F of keys a decode split has (cu_attn.split_min 0):
 * a row of L keys has at most ceil(L / F) splits, so short rows get a few
 * splits of about F keys rather than many tiny ones (docs/decisions/0008).
 * A multiple of ATTN_SPLIT_UNIT. */
#define ATTN_SPLIT_MIN 128

/* Element types, the values of lib/backend/kv_cache.h's kv_type. */
enum { CU_KV_F32 = 0, CU_KV_F16 = 1, CU_KV_BF16 = 2, CU_KV_Q8_0 = 3 };

typedef struct {
    void *k, *v;        /* device pools */
    int type;           /* CU_KV_* */
    int n_blocks, block_size;
    int64_t kv_dim;     /* the layer's K (or V) values a position: n_kv_heads * head_dim,
                         * the front of a row when layers differ in width */
    int64_t row_bytes;  /* bytes of one position's row (the widest layer's values) */
} cu_kv_pool;

typedef struct {
    int layer;
    int n_heads, n_kv_heads, head_dim;
    float scale, softcap;
    int64_t window;     /* 0: full causal */
    /* launch_attention_decode only (zero: the defaults) */
    int splits;         /* most splits a row's span is cut into, 1..ATTN_SPLITS_MAX (0: the max) */
    int split_min;      /* F: a row has at most ceil(span / F) splits (F rounded up to
                           ATTN_SPLIT_UNIT; 0: ATTN_SPLIT_MIN) */
    void *out_bf;       /* launch_attention_decode: NULL, or n x n_heads x head_dim bf16
                           that take the output rounded to nearest even as well */
} cu_attn;

/* Chunks a row at position pos has (its partials' slots). */
static inline int attn_row_chunks(int64_t pos, int64_t window)
{
    int64_t lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    return (int)(pos / ATTN_CHUNK - lo / ATTN_CHUNK + 1);
}

#ifdef __CUDACC__
#define ATTN_HD static __host__ __device__ __forceinline__
#else
#define ATTN_HD static inline
#endif

/* The split count S a caller asked for, as the kernels use it. */
ATTN_HD int attn_split_count(int splits)
{
    return splits >= 1 && splits <= ATTN_SPLITS_MAX ? splits : ATTN_SPLITS_MAX;
}

/* The floor F of keys a split has, as the kernels use it: split_min
 * rounded up to a multiple of ATTN_SPLIT_UNIT (0: ATTN_SPLIT_MIN). */
ATTN_HD int64_t attn_split_floor(int split_min)
{
    const int64_t f = split_min > 0 ? split_min : ATTN_SPLIT_MIN;
    return (int64_t)ATTN_SPLIT_UNIT * ((f + ATTN_SPLIT_UNIT - 1) / ATTN_SPLIT_UNIT);
}

/* Keys per split of a span of L >= 1 keys (launch_attention_decode): the
 * span cut into ns = ceil(L / F) splits (at most S), each the smallest
 * multiple of ATTN_SPLIT_UNIT that makes at most ns: a short row's splits
 * are about even (513 keys at F 256: 192, 192, 129), a long row's as many
 * as S allows. At F = ATTN_SPLIT_UNIT every split but the last has S's
 * share of the span, the split before the floor F was introduced. */
ATTN_HD int64_t attn_split_keys(int64_t span, int splits, int split_min)
{
    const int64_t f = attn_split_floor(split_min);
    int64_t ns = (span + f - 1) / f;
    const int s = attn_split_count(splits);
    ns = ns < 1 ? 1 : ns > s ? s : ns;
    const int64_t per = (int64_t)ATTN_SPLIT_UNIT * ns;
    return (int64_t)ATTN_SPLIT_UNIT * ((span + per - 1) / per);
}

/* Splits a row at position pos has under launch_attention_decode: at most
 * S and at most ceil(span / F), so never more than attn_row_chunks(pos,
 * 0), the count a graph's bucket is made from (cuda_graph.c). */
ATTN_HD int attn_row_splits(int64_t pos, int64_t window, int splits, int split_min)
{
    int64_t lo = window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
    int64_t span = pos - lo + 1, ck = attn_split_keys(span, splits, split_min);
    return (int)((span + ck - 1) / ck);
}

/* The most splits any row whose span is at most chunks * ATTN_CHUNK keys
 * has (a graph's bucket of chunks: its decode grid): min(S, ceil(chunks *
 * ATTN_CHUNK / F)), as attn_split_keys cuts. A function of the bucket, S
 * and F only, as a graph's grid must be. */
static inline int attn_bucket_splits(int chunks, int splits, int split_min)
{
    const int64_t f = attn_split_floor(split_min);
    const int64_t by_floor = ((int64_t)chunks * ATTN_CHUNK + f - 1) / f;
    const int s = attn_split_count(splits);
    return by_floor < 1 ? 1 : by_floor < s ? (int)by_floor : s;
}

/* Whether launch_attention_decode takes this shape: head_dim a multiple
 * of 8 up to 256, at most 8 query heads per KV head. */
static inline int attn_decode_fits(int n_heads, int n_kv_heads, int head_dim)
{
    return n_kv_heads > 0 && n_heads % n_kv_heads == 0 && n_heads / n_kv_heads <= 8 &&
           head_dim > 0 && head_dim % 8 == 0 && head_dim <= 256;
}

/* Whether launch_attention_decode runs the shape on the tensor cores
 * (kernels/attention.cu, attn_decode_mma_kernel): a bf16 cache, heads of
 * 128 in groups of 4 to 8 query heads a KV head, or of 256 in groups of 8
 * (one block an SM: at 4 KV heads of 256, 64 rows ran two waves, 1.6x the
 * CUDA cores' time; docs/decisions/0037). A function of the model's
 * shape and cache type only, so every launch of a layer, whatever its
 * rows, takes the same kernel. */
static inline int attn_decode_mma(int type, int n_heads, int n_kv_heads, int head_dim)
{
    return type == CU_KV_BF16 && attn_decode_fits(n_heads, n_kv_heads, head_dim) &&
           (head_dim == 128 ? n_heads / n_kv_heads >= 4
                            : head_dim == 256 && n_heads / n_kv_heads == 8);
}

/* The blocks of that kernel a multiprocessor holds (its shared memory:
 * about 134 kB a block for heads of 256, 70 kB for 128; its registers are
 * bounded to match). */
#define ATTN_DECODE_MMA_BLOCKS(head_dim) ((head_dim) > 128 ? 1 : 3)
static inline int attn_decode_mma_blocks(int head_dim)
{
    return ATTN_DECODE_MMA_BLOCKS(head_dim);
}

/* Store k, v [n][kv_dim] at each row's position (q8_0: kv_dim a multiple
 * of 32, else cudaErrorInvalidValue). */
cudaError_t launch_kv_append(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                             const float *k, const float *v, cudaStream_t stream);

/* out [n][n_heads][head_dim] = softmax(q . K^T * scale, soft-capped, causal
 * and windowed) . V. part: device scratch of attn_partials_floats floats;
 * max_chunks: the largest attn_row_chunks of the rows. */
cudaError_t launch_attention(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                             const float *q, int max_chunks, float *part, float *out,
                             cudaStream_t stream);

/* The same result by the split-K decode kernel above (attn_decode_fits
 * shapes; f32 / f16 / bf16 rows of a multiple of 16 bytes, or q8_0 rows
 * of an even size); a->splits, a->split_min as above; max_splits: at
 * least the largest attn_row_splits of the rows, at most ATTN_SPLITS_MAX
 * (blocks past a row's splits return at once); part:
 * attn_partials_floats(n, n_heads, head_dim, max_splits) floats;
 * counters: attn_decode_counters(n, n_kv_heads) zeroed unsigneds, left
 * zeroed, with which the decode kernel's blocks merge a row's splits
 * themselves when max_splits is small (else, or null, a combine kernel
 * does; the same bytes either way). */
cudaError_t launch_attention_decode(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta,
                                    int n, const float *q, int max_splits, float *part,
                                    unsigned *counters, float *out, cudaStream_t stream);

static inline size_t attn_decode_counters(int n, int n_kv_heads)
{
    return (size_t)n * (size_t)n_kv_heads;
}

static inline size_t attn_partials_floats(int n, int n_heads, int head_dim, int max_chunks)
{
    return (size_t)n * (size_t)n_heads * (size_t)max_chunks * (size_t)(head_dim + 2);
}

#ifdef __cplusplus
}
#endif

#endif
