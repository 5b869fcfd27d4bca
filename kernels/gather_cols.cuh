/* Launcher for the column gather: rows of a narrow activation spread over
 * a wider one by a map of source columns (a trimmed head's logits over
 * the whole vocabulary, the ids it does not hold at a fill value). */
#ifndef MEMRA_KERNELS_GATHER_COLS_CUH
#define MEMRA_KERNELS_GATHER_COLS_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* out [n][n_dst]: out[r][c] = src[r][map[c]] where map[c] >= 0, else
 * fill; src is [n][n_src], map [n_dst] in device memory. */
cudaError_t launch_gather_cols(const float *src, int n, int64_t n_src, const int32_t *map,
                               int64_t n_dst, float fill, float *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
