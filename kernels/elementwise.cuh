/* Launchers for the elementwise ops: the residual add, the logit
 * soft-cap, and the gated activation between an FFN's up and down
 * projections. Each value is computed from its own inputs alone. */
#ifndef MEMRA_KERNELS_ELEMENTWISE_CUH
#define MEMRA_KERNELS_ELEMENTWISE_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[i] += y[i], i < n. */
cudaError_t launch_add(float *x, const float *y, size_t n, cudaStream_t stream);
/* x[i] = cap * tanh(x[i] / cap). */
cudaError_t launch_softcap(float *x, size_t n, float cap, cudaStream_t stream);
/* gate[i] = act(gate[i]) * up[i]; act 0: SiLU, 1: GELU (tanh form). */
cudaError_t launch_glu(float *gate, const float *up, size_t n, int act, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
