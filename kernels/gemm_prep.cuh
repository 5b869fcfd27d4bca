/* Launchers for the operands of the prefill GEMM (lib/backend/cuda/
 * cuda_gemm.c): activations rounded to bf16, weights of any device format
 * decoded (bit-identically to the CPU, kernels/weight_decode.cuh) and
 * rounded to bf16, and the bias added to the f32 product. Every value is
 * computed from its own inputs alone. */
#ifndef MEMRA_KERNELS_GEMM_PREP_CUH
#define MEMRA_KERNELS_GEMM_PREP_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/matmul.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* dst[i][j] = bf16(x[i][j]) (round to nearest even) for j < cols, 0 for
 * cols <= j < ld; n rows of x, cols floats apart. */
cudaError_t launch_to_bf16(const float *x, int n, int64_t cols, int64_t ld, uint16_t *dst,
                           cudaStream_t stream);
/* Whether launch_glu_to_bf16 takes these operands: cols and ld multiples
 * of 4, gate and up 16-byte aligned, dst 8-byte aligned. */
static inline int glu_to_bf16_fits(const float *gate, const float *up, int64_t cols, int64_t ld,
                                   const uint16_t *dst)
{
    return cols % 4 == 0 && ld % 4 == 0 && ((uintptr_t)gate & 15) == 0 &&
           ((uintptr_t)up & 15) == 0 && ((uintptr_t)dst & 7) == 0;
}
/* dst[i][j] = bf16(act(gate[i][j]) * up[i][j]) for j < cols, 0 for cols <=
 * j < ld (act 0: SiLU, 1: GELU tanh): the bytes launch_glu then
 * launch_to_bf16 give, in one pass; n rows, cols floats apart. Operands
 * glu_to_bf16_fits refuses: cudaErrorInvalidValue. */
cudaError_t launch_glu_to_bf16(const float *gate, const float *up, int n, int64_t cols,
                               int64_t ld, int act, uint16_t *dst, cudaStream_t stream);
/* dst[r][j] = bf16(W[r][j]) for W's rows, ld elements apart (ld >= cols, a
 * multiple of 8; the rest 0). Every format of kernels/weight_layout.h. The
 * quant formats are decoded a unit per thread into shared memory and
 * written out 16 contiguous bytes per lane, with registers bounded for
 * three blocks an SM; the float formats (whose units are 16 bytes or less
 * of bf16) straight from registers. */
cudaError_t launch_dequant_bf16(const cu_matrix *w, int64_t ld, uint16_t *dst,
                                cudaStream_t stream);
/* out[t][r] += bias[r], t < n. */
cudaError_t launch_add_bias(float *out, const float *bias, int n, int64_t rows,
                            cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
