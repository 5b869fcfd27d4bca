/* Launchers for routed experts: routing each token (softmax over the
 * router logits, top-k, optional renormalization, as the CPU reference
 * does it) and combining the chosen experts' outputs in ascending expert
 * id order. The expert FFNs themselves are grouped mat-vecs
 * (matmul.cuh), one row per (token, choice). */
#ifndef MEMRA_KERNELS_MOE_CUH
#define MEMRA_KERNELS_MOE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* probs [n][n_experts]: router logits in, probabilities out. ids, w
 * [n][n_used]: each token's chosen experts in ascending id order and their
 * (renormalized when norm_topk) weights, times expert_scale[id] when
 * expert_scale ([n_experts], device) is not NULL. */
cudaError_t launch_moe_route(float *probs, int n, int n_experts, int n_used, int norm_topk,
                             const float *expert_scale, int32_t *ids, float *w,
                             cudaStream_t stream);

/* out[t][d] = sum over j < n_used of y[t * n_used + j][d] * w[t][j], j ascending. */
cudaError_t launch_moe_combine(const float *y, const float *w, int n, int n_used, int64_t dim,
                               float *out, cudaStream_t stream);

/* The pairs (ids [pairs]: each pair's expert) sorted by expert for the
 * grouped mat-vec of several pairs at once: order [pairs] (sorted position
 * to pair), chunks [3 * max chunks] (expert, first position, count <=
 * tile) and *n_chunks, all on the device. At most pairs / tile +
 * min(pairs, n_experts) chunks. */
cudaError_t launch_moe_plan(const int32_t *ids, int pairs, int n_experts, int tile,
                            int32_t *order, int32_t *chunks, int32_t *n_chunks,
                            cudaStream_t stream);

/* xg[j] = x[order[j] / in_div] for j < pairs, rows of dim floats. */
cudaError_t launch_moe_gather(const float *x, const int32_t *order, int pairs, int in_div,
                              int64_t dim, float *xg, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
