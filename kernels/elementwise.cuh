/* Launchers for the elementwise ops: the residual add, the logit
 * soft-cap, a scale, the gated activation between an FFN's up and down
 * projections, the sigmoid gate of a gated attention output, and the
 * split of q_proj's per-head [q | gate] rows. Each value is computed from
 * its own inputs alone. */
#ifndef MEMRA_KERNELS_ELEMENTWISE_CUH
#define MEMRA_KERNELS_ELEMENTWISE_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* x[i] += y[i], i < n. */
cudaError_t launch_add(float *x, const float *y, size_t n, cudaStream_t stream);
/* x[i] = cap * tanh(x[i] / cap). */
cudaError_t launch_softcap(float *x, size_t n, float cap, cudaStream_t stream);
/* x[i] *= s. */
cudaError_t launch_scale(float *x, size_t n, float s, cudaStream_t stream);
/* x [n][cols] = act(x) * y, y's rows y_stride floats apart; act as launch_glu's. */
cudaError_t launch_act_mul(float *x, const float *y, int n, int64_t cols, int64_t y_stride,
                           int act, cudaStream_t stream);
/* gate[i] = act(gate[i]) * up[i]; act 0: SiLU, 1: GELU (tanh form). */
cudaError_t launch_glu(float *gate, const float *up, size_t n, int act, cudaStream_t stream);
/* x [n][x_cols] *= sigmoid(g), g [n][x_cols] or [n][1] (g_cols). */
cudaError_t launch_mul_sigmoid(float *x, const float *g, int n, int64_t x_cols, int64_t g_cols,
                               cudaStream_t stream);
/* Rows of n_heads heads of a_dim then b_dim values, split into a and b. */
cudaError_t launch_split_heads(const float *x, int n, int n_heads, int a_dim, int b_dim,
                               float *a, float *b, cudaStream_t stream);
/* The reverse: a and b joined into rows of n_heads heads of a_dim then b_dim. */
cudaError_t launch_join_heads(const float *a, const float *b, int n, int n_heads, int a_dim,
                              int b_dim, float *x, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
