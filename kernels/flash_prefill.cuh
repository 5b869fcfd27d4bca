/* Launcher for flash attention over a prompt chunk on tensor cores.
 *
 * The rows [row0, row0 + n) of a step are one sequence's query rows (a
 * prefill chunk); their K/V are already in the paged pool
 * (launch_kv_append, kernels/attention.cuh), in bf16 or f16. One block
 * takes up to FP_ROWS consecutive rows and one query head, and walks the
 * keys its rows see in blocks of FP_KEYS absolute positions (block b holds
 * positions [b * FP_KEYS, (b + 1) * FP_KEYS)): S = Q K^T and O += P V are
 * WMMA products (bf16 or f16 operands, the KV cache's type; f32
 * accumulation), the online softmax (running max, rescale, exp-sum) is
 * done on the scores stored to shared memory, row by row, so nothing
 * depends on how a fragment's elements sit in the lanes.
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

/* out rows [row0, row0 + n) [n_heads][head_dim] = attention of q's rows
 * (q, out: [n_meta][n_heads][head_dim], f32) over the pool. meta is the
 * step's row metadata (attention.cuh) for n_meta rows; the n rows must be
 * one sequence's (they share one block table). Needs a device with bf16
 * tensor cores (sm_80 or later); cudaErrorInvalidValue for an unsupported
 * type or head_dim. */
cudaError_t launch_flash_prefill(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta,
                                 int n_meta, int row0, int n, const float *q, float *out,
                                 cudaStream_t stream);

/* The same for a bf16 cache and head 128 with the other choice of
 * prefetching the next key block's K/V (FP_PREFETCH in flash_prefill.cu):
 * the kernel check times both (memra-parity --kernels --perf). */
cudaError_t launch_flash_prefill_other(const cu_kv_pool *kv, const cu_attn *a,
                                       const int32_t *meta, int n_meta, int row0, int n,
                                       const float *q, float *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
