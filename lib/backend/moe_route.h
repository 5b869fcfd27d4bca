/* MoE routing on the host: one token's router logits to its experts. The
 * CPU backend routes with it, and the imatrix collector re-derives the
 * routing the forward used with it, so both follow the same float
 * arithmetic and tie rule. */
#ifndef MEMRA_BACKEND_MOE_ROUTE_H
#define MEMRA_BACKEND_MOE_ROUTE_H

/* Softmax of p[n_experts] in place, then the top n_used experts into ids,
 * highest probability first (the lower id wins a tie); with w, their
 * probabilities, renormalized to sum 1 when norm_topk. */
void moe_route_token(float *p, int n_experts, int n_used, int norm_topk, int *ids, float *w);

#endif
