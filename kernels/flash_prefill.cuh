/* Launcher for flash attention over a prompt chunk on tensor cores.
 *
 * The rows [row0, row0 + n) of a step are one sequence's query rows (a
 * prefill chunk); their K/V are already in the paged pool
 * (launch_kv_append, kernels/attention.cuh), in bf16 or f16. One block
 * takes up to FP_ROWS consecutive rows and one query head, and walks the
 * keys its rows see in blocks of FP_KEYS absolute positions (block b holds
 * positions [b * FP_KEYS, (b + 1) * FP_KEYS)): S = Q K^T and O += P V are
 * tensor-core products (bf16 or f16 operands, the KV cache's type; f32
 * accumulation). A bf16 cache's heads 64 and 128 keep the scores, P and
 * the output rows in mma.sync fragments (kernels/mma.cuh), each row's max
 * and exp-sum reduced over the four lanes that hold it in a fixed order
 * (docs/decisions/0031-flash-prefill-in-registers.md); f16 caches and
 * head 256 run WMMA products with the online softmax (running max,
 * rescale, exp-sum) on the scores stored to shared memory, row by row.
 *
 * Numerics against the f32 reference: Q is rounded to the KV element type
 * when staged, and so is P = exp(s - m) before the P V product, m the
 * row's reference max (moved to the block's max, and the row's output
 * rescaled, only when that exceeds it by more than 8: P <= e^8); the
 * exp-sum that divides at the end is of the unrounded f32 P. Keys a row
 * does not see (causal, window, or another row's position) get P = 0 and
 * leave its max untouched, so a key block a row does not see changes
 * none of its bits: a row's result depends on its query, its own visible
 * keys and its position alone, not on the other rows of the launch.
 *
 * Segments (head 64 and 128): a row's keys are taken in segments of
 * cut->seg_keys absolute positions, each with its own online softmax
 * (running max, exp-sum, unnormalized output), and the segments are folded
 * in order, always by the same arithmetic (fp_fold below): in the block
 * that walks them, through the output rows, or, when the launch is split,
 * one block per (tile, segment) writing its partial and a second kernel
 * folding them. A row's result is thus the same bytes split or not, and
 * the launcher may split a launch whose tiles are too few to fill the card
 * (a short chunk over a long context: flash-decoding). A row whose keys
 * lie in one segment gets the bytes of one pass. Head 256 walks its keys
 * in one pass and is never split.
 *
 * Semantics are those of launch_attention: scores (q . k) * scale, then
 * tanh soft-capping when softcap > 0, keys [pos - window + 1, pos]
 * (window 0: [0, pos]) of the row's sequence, GQA (n_heads a multiple of
 * n_kv_heads, head h reads KV head h / (n_heads / n_kv_heads)). */
#ifndef MEMRA_KERNELS_FLASH_PREFILL_CUH
#define MEMRA_KERNELS_FLASH_PREFILL_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/attention.cuh"

#ifdef __cplusplus
extern "C" {
#endif

#define FP_ROWS 64 /* query rows per block */
#define FP_KEYS 64 /* keys per step, aligned to absolute positions */

/* Whether the flash kernel takes a KV element type (CU_KV_*) and head
 * dimension: bf16 or f16 rows, head_dim 64, 128 or 256. */
static inline int flash_prefill_supports(int type, int head_dim)
{
    return (type == CU_KV_BF16 || type == CU_KV_F16) &&
           (head_dim == 64 || head_dim == 128 || head_dim == 256);
}

/* How a launch cuts its rows' keys (see Segments above). */
typedef struct {
    int seg_keys;   /* keys a segment, a multiple of FP_KEYS: fixed for a device, */
                    /* as a row's bytes depend on it */
    int seg0, nseg; /* split: one block per tile and segment [seg0, seg0 + nseg) */
                    /* (the segments of the launch's keys); nseg 0: not split */
    float *ws;      /* split: flash_prefill_ws_floats(n, n_heads, head_dim, nseg) */
} cu_flash_cut;

/* The floats of a split launch's partials: per row, head and segment the
 * unnormalized output, its max and exp-sum. */
static inline size_t flash_prefill_ws_floats(int n, int n_heads, int head_dim, int nseg)
{
    return (size_t)n * (size_t)n_heads * (size_t)nseg * (size_t)(head_dim + 2);
}

/* Whether a launch of head_dim may be split (head 256 walks one pass). */
static inline int flash_prefill_splits(int head_dim)
{
    return head_dim <= 128;
}

/* out rows [row0, row0 + n) [n_heads][head_dim] = attention of q's rows
 * (q, out: [n_meta][n_heads][head_dim], f32) over the pool. meta is the
 * step's row metadata (attention.cuh) for n_meta rows; the n rows must be
 * one sequence's (they share one block table). Needs a device with bf16
 * tensor cores (sm_80 or later); cudaErrorInvalidValue for an unsupported
 * type or head_dim, or a cut that does not fit. */
cudaError_t launch_flash_prefill(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta,
                                 int n_meta, int row0, int n, const float *q,
                                 const cu_flash_cut *cut, float *out, cudaStream_t stream);

/* The same for a bf16 cache and head 128 with the other choice of
 * prefetching the next key block's K/V (FP_PREFETCH in flash_prefill.cu):
 * the kernel check times both (memra-parity --kernels --perf). */
cudaError_t launch_flash_prefill_other(const cu_kv_pool *kv, const cu_attn *a,
                                       const int32_t *meta, int n_meta, int row0, int n,
                                       const float *q, const cu_flash_cut *cut, float *out,
                                       cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
