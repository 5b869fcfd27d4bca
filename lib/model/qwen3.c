/* The qwen3 family (dense Qwen3): qwen2's blocks without the QKV bias
 * (unless attention_bias, which puts one on q, k, v and o) and with an
 * RMSNorm over each head of q and k before RoPE (NeoX layout). */
#include "model/contract.h"

/* Layer l's attention half and its pre-FFN norm; qwen3_moe shares it. */
void qwen3_attention_contract(const model_config *c, tensor_contract *k, int l)
{
    int64_t q_rows = c->n_heads * c->head_dim, kv_rows = c->n_kv_heads * c->head_dim;
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
}

void qwen3_contract(const model_config *c, tensor_contract *k)
{
    contract_add_globals(k, c, 0);
    for (int l = 0; l < c->n_layers; l++) {
        qwen3_attention_contract(c, k, l);
        contract_add_2d(k, ROLE_FFN_GATE, l, "ffn_gate.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_UP, l, "ffn_up.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_DOWN, l, "ffn_down.weight", c->dim, c->ffn_dim, 0, 0);
    }
}
