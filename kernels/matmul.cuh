/* Launchers for the matrix products: out[n][rows] = x[n][cols] . W^T (+ bias)
 * for a weight in any device format (kernels/weight_layout.h), and the
 * grouped form the routed experts use, where each row of x meets the
 * weight of its own expert.
 *
 * Batch invariance: one warp computes one output value from its weight row
 * and input row, lane l taking units l, l+32, ... in ascending order, then
 * a fixed butterfly. The same code runs whatever n, the tile of tokens a
 * block takes, or the row's place in the batch, so out[t][r] is
 * bit-identical for a batch of 1 and of 64. */
#ifndef MEMRA_KERNELS_MATMUL_CUH
#define MEMRA_KERNELS_MATMUL_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix in device memory. */
typedef struct {
    int fmt;          /* cw_format */
    const void *data; /* [rows][stride] bytes, 16-byte aligned */
    size_t stride;    /* bytes per row (cw_row_stride) */
    size_t scale_off; /* cw_scale_offset */
    int64_t rows, cols;
} cu_matrix;

/* out[t][r] = x[t] . W[r] (+ bias[r] when bias is not NULL), t < n. x rows are
 * cols floats apart. */
cudaError_t launch_matmul(const cu_matrix *w, const float *bias, const float *x, int n, float *out,
                          cudaStream_t stream);

/* Grouped: for p < n_pairs, out[p][r] = x[p / in_div] . E_e[r] with
 * e = ids[p], E_e the expert whose row data is experts[e] (a device array
 * of pointers; every expert shaped and formatted as *w, whose data is
 * ignored). */
cudaError_t launch_matmul_grouped(const cu_matrix *w, const void *const *experts,
                                  const int32_t *ids, int in_div, const float *x, int n_pairs,
                                  float *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
