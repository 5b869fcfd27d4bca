/* The qwen3 family (dense Qwen3): qwen2's blocks without the QKV bias
 * (unless attention_bias, which puts one on q, k, v and o) and with an
 * RMSNorm over each head of q and k before RoPE (NeoX layout). The forward
 * pass is the shared decoder's (llama_forward); the QK-norm is the
 * attention sublayer's. */
#include "core/check.h"
#include "model/family.h"

/* ---- config ---- */

static const family_hf_type qwen3_hf_types[] = {
    /* Qwen3Config: 32 KV heads, head_dim 128, no bos/eos ids */
    {.model_type = "qwen3", .architecture = "Qwen3ForCausalLM", .n_kv_heads = 32,
     .head_dim = 128, .n_ctx = 32768, .rope_theta = 10000.0, .bos = -1, .eos = -1,
     .attention_bias_key = 1},
};

/* Sliding-window attention is switched off in every released Qwen3. */
static int qwen3_hf_read(const json_t *obj, const family_hf_type *t, const char *what,
                         model_config *c, memra_err *err)
{
    (void)t;
    if (config_hf_refuse_true(obj, "use_sliding_window", what, err) ||
        config_hf_layer_types(obj, what, c, err))
        return -1;
    return 0;
}

static void qwen3_hf_write(const model_config *c, const family_hf_type *t, json_t *o)
{
    (void)c, (void)t;
    json_object_set_new(o, "use_sliding_window", json_false());
}

/* ---- tensors ---- */

static const family_tensor_name qwen3_tensor_names[] = {
    {"attn_q_norm.weight", "self_attn.q_norm.weight", 0, 0},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", 0, 0},
    {"ffn_norm.weight", "post_attention_layernorm.weight", 0, 0},
    {"ffn_gate.weight", "mlp.gate_proj.weight", 0, 0},
    {"ffn_up.weight", "mlp.up_proj.weight", 0, 0},
    {"ffn_down.weight", "mlp.down_proj.weight", 0, 0},
};

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

static void qwen3_contract(const model_config *c, tensor_contract *k)
{
    contract_add_globals(k, c, 0);
    for (int l = 0; l < c->n_layers; l++) {
        qwen3_attention_contract(c, k, l);
        contract_add_2d(k, ROLE_FFN_GATE, l, "ffn_gate.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_UP, l, "ffn_up.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_DOWN, l, "ffn_down.weight", c->dim, c->ffn_dim, 0, 0);
    }
}

const model_family_desc family_qwen3 = {
    .id = FAMILY_QWEN3,
    .name = "qwen3",
    .gguf_arch = "qwen3",
    .hf_types = qwen3_hf_types,
    .n_hf_types = MEMRA_ARRAY_LEN(qwen3_hf_types),
    .hf_act_key = "hidden_act",
    .hf_act = "silu",
    .hf_read = qwen3_hf_read,
    .hf_write = qwen3_hf_write,
    .qk_norm = 1,
    .contract = qwen3_contract,
    .tensor_names = qwen3_tensor_names,
    .n_tensor_names = MEMRA_ARRAY_LEN(qwen3_tensor_names),
    .forward = llama_forward,
    .act = BK_ACT_SILU,
    .tensor_parallel = 1,
};
