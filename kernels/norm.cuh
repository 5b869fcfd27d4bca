/* Launchers for the norms: RMSNorm of whole rows, and the per-head
 * QK-norm + RoPE of an attention block. The sum of squares is a fixed-
 * shape block reduction (dev_common.cuh), so a row's result depends only
 * on the row. RoPE angles are formed on the device from each row's
 * position and the host's inverse frequencies, as the CPU forms them. */
#ifndef MEMRA_KERNELS_NORM_CUH
#define MEMRA_KERNELS_NORM_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out[i] = x[i] / rms(x[i]) * (w + w_offset) for n rows of d floats (x may
 * be out). xb: NULL, or n x d bf16 that take out rounded to nearest even
 * (the decode GEMM's copy of x: cu_mv_job.xbf). */
cudaError_t launch_rmsnorm(const float *x, int n, int64_t d, const float *w, float w_offset,
                           float eps, float *out, void *xb, cudaStream_t stream);

/* x[i] += y[i], then out[i] = x[i] / rms(x[i]) * (w + w_offset): the same
 * bytes as launch_add then launch_rmsnorm (out may be x; y may not); xb as
 * launch_rmsnorm's. */
cudaError_t launch_add_rmsnorm(float *x, const float *y, int n, int64_t d, const float *w,
                               float w_offset, float eps, float *out, void *xb,
                               cudaStream_t stream);

typedef struct {
    int n_heads, n_kv_heads, head_dim;
    const float *q_norm, *k_norm; /* [head_dim] f32 or NULL */
    float w_offset, eps;
    const float *inv_freq;        /* [n_freqs] device */
    int n_freqs;
    float attn_factor;
    int pairing;                  /* rope_pairing: 0 NEOX, 1 adjacent */
    int pos_ahead;                /* added to every position (bk_attn.q_ahead) */
} cu_qk_rope;

/* In place on q [n][n_heads][head_dim] and k [n][n_kv_heads][head_dim];
 * pos: n device positions. */
cudaError_t launch_qk_norm_rope(float *q, float *k, const int32_t *pos, int n, const cu_qk_rope *p,
                                cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
