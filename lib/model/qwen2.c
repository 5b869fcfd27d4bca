/* The qwen2 family (Qwen2, Qwen2.5): llama-shaped blocks with a bias on the
 * q, k and v projections (never on o), RoPE in the rotate-half (NeoX)
 * layout, so GGUF keeps HF's Q/K row order. The forward pass is the shared
 * decoder's (llama_forward); the biases are the attention sublayer's. */
#include "core/check.h"
#include "model/family.h"

/* ---- config ---- */

static const family_hf_type qwen2_hf_types[] = {
    /* Qwen2Config: 32 KV heads, no bos/eos ids */
    {.model_type = "qwen2", .architecture = "Qwen2ForCausalLM", .n_kv_heads = 32,
     .n_ctx = 32768, .rope_theta = 10000.0, .bos = -1, .eos = -1},
};

/* Sliding-window attention is switched off in every released Qwen2. */
static int qwen2_hf_read(const json_t *obj, const family_hf_type *t, const char *what,
                         model_config *c, memra_err *err)
{
    (void)t;
    if (config_hf_refuse_true(obj, "use_sliding_window", what, err) ||
        config_hf_layer_types(obj, what, c, err))
        return -1;
    return 0;
}

static void qwen2_hf_write(const model_config *c, const family_hf_type *t, json_t *o)
{
    (void)c, (void)t;
    json_object_set_new(o, "use_sliding_window", json_false());
}

static int qwen2_validate(const model_config *c, const char *what, memra_err *err)
{
    if (!c->attn_bias)
        return memra_fail(err, "%s: qwen2 always has q/k/v biases", what);
    return 0;
}

/* ---- tensors ---- */

static const family_tensor_name qwen2_tensor_names[] = {
    {"ffn_norm.weight", "post_attention_layernorm.weight", 0, 0},
    {"ffn_gate.weight", "mlp.gate_proj.weight", 0, 0},
    {"ffn_up.weight", "mlp.up_proj.weight", 0, 0},
    {"ffn_down.weight", "mlp.down_proj.weight", 0, 0},
};

static void qwen2_contract(const model_config *c, tensor_contract *k)
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
        }
        contract_add_1d(k, ROLE_FFN_NORM, l, "ffn_norm.weight", c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_GATE, l, "ffn_gate.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_UP, l, "ffn_up.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_DOWN, l, "ffn_down.weight", c->dim, c->ffn_dim, 0, 0);
    }
}

const model_family_desc family_qwen2 = {
    .id = FAMILY_QWEN2,
    .name = "qwen2",
    .gguf_arch = "qwen2",
    .hf_types = qwen2_hf_types,
    .n_hf_types = MEMRA_ARRAY_LEN(qwen2_hf_types),
    .hf_act_key = "hidden_act",
    .hf_act = "silu",
    .hf_read = qwen2_hf_read,
    .hf_write = qwen2_hf_write,
    .validate = qwen2_validate,
    .attn_bias_always = 1,
    .contract = qwen2_contract,
    .tensor_names = qwen2_tensor_names,
    .n_tensor_names = MEMRA_ARRAY_LEN(qwen2_tensor_names),
    .forward = llama_forward,
    .act = BK_ACT_SILU,
    .tensor_parallel = 1,
};
