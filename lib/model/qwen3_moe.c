/* The qwen3_moe family (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3 attention
 * (QK-norm) and, in every layer, a routed mixture of SwiGLU experts: a
 * router [n_experts, dim] picks n_experts_used experts per token (softmax,
 * top-k, renormalized when norm_topk_prob). No shared expert. */
#include "model/contract.h"

void qwen3_moe_contract(const model_config *c, tensor_contract *k)
{
    int64_t q_rows = c->n_heads * c->head_dim, kv_rows = c->n_kv_heads * c->head_dim;
    contract_add_globals(k, c, 0);
    for (int l = 0; l < c->n_layers; l++) {
        contract_add_1d(k, ROLE_ATTN_NORM, l, "attn_norm.weight", c->dim, 0, 0);
        contract_add_2d(k, ROLE_ATTN_Q, l, "attn_q.weight", q_rows, c->dim, 0, 0);
        contract_add_2d(k, ROLE_ATTN_K, l, "attn_k.weight", kv_rows, c->dim, 0, 0);
        contract_add_2d(k, ROLE_ATTN_V, l, "attn_v.weight", kv_rows, c->dim, 0, 0);
        contract_add_2d(k, ROLE_ATTN_O, l, "attn_output.weight", c->dim, q_rows, 0, 0);
        if (c->attn_bias) {
            contract_add_1d(k, ROLE_ATTN_Q_BIAS, l, "attn_q.bias", q_rows, 0, 0);
            contract_add_1d(k, ROLE_ATTN_K_BIAS, l, "attn_k.bias", kv_rows, 0, 0);
            contract_add_1d(k, ROLE_ATTN_V_BIAS, l, "attn_v.bias", kv_rows, 0, 0);
            contract_add_1d(k, ROLE_ATTN_O_BIAS, l, "attn_output.bias", c->dim, 0, 0);
        }
        contract_add_1d(k, ROLE_ATTN_Q_NORM, l, "attn_q_norm.weight", c->head_dim, 0, 0);
        contract_add_1d(k, ROLE_ATTN_K_NORM, l, "attn_k_norm.weight", c->head_dim, 0, 0);
        contract_add_1d(k, ROLE_FFN_NORM, l, "ffn_norm.weight", c->dim, 0, 0);
        contract_add_2d(k, ROLE_MOE_ROUTER, l, "ffn_gate_inp.weight", c->n_experts, c->dim, 0, 0);
        contract_add_experts(k, ROLE_MOE_GATE_EXPS, l, "ffn_gate_exps.weight", c->n_experts,
                             c->moe_ffn_dim, c->dim);
        contract_add_experts(k, ROLE_MOE_UP_EXPS, l, "ffn_up_exps.weight", c->n_experts,
                             c->moe_ffn_dim, c->dim);
        contract_add_experts(k, ROLE_MOE_DOWN_EXPS, l, "ffn_down_exps.weight", c->n_experts,
                             c->dim, c->moe_ffn_dim);
    }
}
