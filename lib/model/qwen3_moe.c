/* The qwen3_moe family (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3 attention
 * (QK-norm) and, in every layer, a routed mixture of SwiGLU experts: a
 * router [n_experts, dim] picks n_experts_used experts per token (softmax,
 * top-k, renormalized when norm_topk_prob). No shared expert. */
#include "model/contract.h"

void qwen3_moe_contract(const model_config *c, tensor_contract *k)
{
    contract_add_globals(k, c, 0);
    for (int l = 0; l < c->n_layers; l++) {
        qwen3_attention_contract(c, k, l);
        contract_add_2d(k, ROLE_MOE_ROUTER, l, "ffn_gate_inp.weight", c->n_experts, c->dim, 0, 0);
        contract_add_experts(k, ROLE_MOE_GATE_EXPS, l, "ffn_gate_exps.weight", c->n_experts,
                             c->moe_ffn_dim, c->dim);
        contract_add_experts(k, ROLE_MOE_UP_EXPS, l, "ffn_up_exps.weight", c->n_experts,
                             c->moe_ffn_dim, c->dim);
        contract_add_experts(k, ROLE_MOE_DOWN_EXPS, l, "ffn_down_exps.weight", c->n_experts,
                             c->dim, c->moe_ffn_dim);
    }
}
