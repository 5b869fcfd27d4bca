/* Launcher for the embedding lookup: out[i] = table[tokens[i]] * scale,
 * decoded from the table's device format with the same unit decoders as
 * the mat-vec kernels, so the values are bit-identical to the CPU's. */
#ifndef MEMRA_KERNELS_EMBED_CUH
#define MEMRA_KERNELS_EMBED_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/matmul.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* tokens: n device ids, each in [0, table->rows). out: [n][table->cols]. */
cudaError_t launch_embed(const cu_matrix *table, const int32_t *tokens, int n, float scale,
                         float *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
