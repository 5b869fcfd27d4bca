/* The qwen3_moe family (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3 attention
 * (QK-norm) and, in every layer, a routed mixture of SwiGLU experts: a
 * router [n_experts, dim] picks n_experts_used experts per token (softmax,
 * top-k, renormalized when norm_topk_prob). No shared expert.
 *
 * GGUF merges each layer's experts into one [n_experts, rows, cols] tensor
 * per projection (ffn_{gate,up,down}_exps); HF names every expert's
 * matrices apart (mlp.experts.E.{gate,up,down}_proj). */
#include <inttypes.h>
#include <stdio.h>

#include "core/check.h"
#include "core/json.h"
#include "model/family.h"

/* ---- config ---- */

static const family_hf_type qwen3_moe_hf_types[] = {
    /* Qwen3MoeConfig: 4 KV heads, no bos/eos ids */
    {.model_type = "qwen3_moe", .architecture = "Qwen3MoeForCausalLM", .n_kv_heads = 4,
     .n_ctx = 32768, .rope_theta = 10000.0, .bos = -1, .eos = -1, .attention_bias_key = 1},
};

/* The expert sizes are required (they fix the tensor shapes); every layer
 * must be sparse, since the forward pass has no dense layers among them. */
static int qwen3_moe_hf_read(const json_t *obj, const family_hf_type *t, const char *what,
                             model_config *c, memra_err *err)
{
    (void)t;
    if (config_hf_refuse_true(obj, "use_sliding_window", what, err))
        return -1;
    int64_t step = 1;
    if (json_get_int(obj, "num_experts", 1, &c->n_experts, what, err) ||
        json_get_int(obj, "num_experts_per_tok", 1, &c->n_experts_used, what, err) ||
        json_get_int(obj, "moe_intermediate_size", 1, &c->moe_ffn_dim, what, err) ||
        json_get_bool(obj, "norm_topk_prob", 0, &c->norm_topk_prob, what, err) ||
        json_get_int(obj, "decoder_sparse_step", 0, &step, what, err))
        return -1;
    json_t *dense = json_object_get(obj, "mlp_only_layers");
    if (step != 1 || (json_is_array(dense) && json_array_size(dense) > 0))
        return memra_fail(err, "%s: dense layers among the MoE layers (decoder_sparse_step "
                          "or mlp_only_layers) are not supported", what);
    if (dense && !json_is_null(dense) && !json_is_array(dense))
        return memra_fail(err, "%s: key \"mlp_only_layers\" must be a list", what);
    return config_hf_layer_types(obj, what, c, err);
}

static void qwen3_moe_hf_write(const model_config *c, const family_hf_type *t, json_t *o)
{
    (void)t;
    json_object_set_new(o, "use_sliding_window", json_false());
    config_json_set_int(o, "num_experts", c->n_experts);
    config_json_set_int(o, "num_experts_per_tok", c->n_experts_used);
    config_json_set_int(o, "moe_intermediate_size", c->moe_ffn_dim);
    json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
    config_json_set_int(o, "decoder_sparse_step", 1);
    json_object_set_new(o, "mlp_only_layers", json_array());
}

static int qwen3_moe_gguf_read(const cfg_gguf *g, model_config *c, memra_err *err)
{
    c->norm_topk_prob = 1; /* llama.cpp always renormalizes qwen3moe's top-k */
    if (cfg_gguf_int(g, "expert_count", 1, 1, &c->n_experts, err) ||
        cfg_gguf_int(g, "expert_used_count", 1, 1, &c->n_experts_used, err) ||
        cfg_gguf_int(g, "expert_feed_forward_length", 1, 1, &c->moe_ffn_dim, err) ||
        cfg_gguf_bool(g, "expert_weights_norm", 1, &c->norm_topk_prob, err))
        return -1;
    return 0;
}

static void qwen3_moe_gguf_write(const model_config *c, const char *arch, gguf_writer *w)
{
    char key[256];
    cfg_gguf_set_u32(w, arch, "expert_count", c->n_experts);
    cfg_gguf_set_u32(w, arch, "expert_used_count", c->n_experts_used);
    cfg_gguf_set_u32(w, arch, "expert_feed_forward_length", c->moe_ffn_dim);
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    gguf_writer_set_bool(w, key, c->norm_topk_prob);
}

static int qwen3_moe_validate(const model_config *c, const char *what, memra_err *err)
{
    double d = (double)c->dim;
    if (config_size_ok(what, "num_experts", c->n_experts, CONFIG_MAX_EXPERTS, err) ||
        config_size_ok(what, "num_experts_per_tok", c->n_experts_used, CONFIG_MAX_EXPERTS,
                       err) ||
        config_size_ok(what, "moe_intermediate_size", c->moe_ffn_dim, CONFIG_MAX_SIZE, err) ||
        config_elems_ok(what, "experts", (double)c->n_experts * (double)c->moe_ffn_dim * d,
                        err))
        return -1;
    if (c->n_experts_used > c->n_experts)
        return memra_fail(err,
                          "%s: num_experts_per_tok %" PRId64 " exceeds num_experts %" PRId64,
                          what, c->n_experts_used, c->n_experts);
    return 0;
}

/* ---- tensors ---- */

static const family_tensor_name qwen3_moe_tensor_names[] = {
    {"attn_q_norm.weight", "self_attn.q_norm.weight", 0, 0},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", 0, 0},
    {"ffn_norm.weight", "post_attention_layernorm.weight", 0, 0},
    {"ffn_gate_inp.weight", "mlp.gate.weight", 0, 0},
    {"ffn_gate_exps.weight", "gate_proj.weight", 0, 1},
    {"ffn_up_exps.weight", "up_proj.weight", 0, 1},
    {"ffn_down_exps.weight", "down_proj.weight", 0, 1},
};

static void qwen3_moe_contract(const model_config *c, tensor_contract *k)
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

/* ---- forward ---- */

/* As transformers' Qwen3MoeDecoderLayer with Qwen3MoeSparseMoeBlock:
 *
 *   per layer:  x += attn(rmsnorm(x))
 *               x += sum_k w_k * expert_k(h),  h = rmsnorm(x)
 *
 * Routing (softmax, top-k, renormalization) is the backend's ffn_moe. */
static void qwen3_moe_forward(model *m, const bk_batch *rows, const int32_t *tokens)
{
    const backend_ops *op = m->bk->ops;
    const model_config *c = &m->config;
    run_state *s = &m->state;
    int n = rows->n;
    size_t nd = (size_t)n * (size_t)c->dim;
    if (m->layer_begin == 0)
        op->embed(m->bk, &m->weights.embed, tokens, n, m->embed_scale, s->x);
    for (int l = m->layer_begin; l < m->layer_end; l++) {
        const layer_weights *w = &m->weights.layers[l];
        model_report_hidden(m, l, rows, s->x);
        op->rmsnorm(m->bk, s->x, n, &w->attn_norm, m->norm_offset, m->norm_eps, s->xb);
        model_attention(m, l, rows, s->xb, s->xb2);
        op->add(m->bk, s->x, s->xb2, nd);
        op->rmsnorm(m->bk, s->x, n, &w->ffn_norm, m->norm_offset, m->norm_eps, s->xb);
        model_moe_ffn(m, l, n, s->xb, s->xb2);
        op->add(m->bk, s->x, s->xb2, nd);
    }
}

const model_family_desc family_qwen3_moe = {
    .id = FAMILY_QWEN3_MOE,
    .name = "qwen3_moe",
    .gguf_arch = "qwen3moe",
    .hf_types = qwen3_moe_hf_types,
    .n_hf_types = MEMRA_ARRAY_LEN(qwen3_moe_hf_types),
    .hf_act_key = "hidden_act",
    .hf_act = "silu",
    .hf_read = qwen3_moe_hf_read,
    .hf_write = qwen3_moe_hf_write,
    .gguf_read = qwen3_moe_gguf_read,
    .gguf_write = qwen3_moe_gguf_write,
    .validate = qwen3_moe_validate,
    .qk_norm = 1,
    .moe = 1,
    .contract = qwen3_moe_contract,
    .tensor_names = qwen3_moe_tensor_names,
    .n_tensor_names = MEMRA_ARRAY_LEN(qwen3_moe_tensor_names),
    .forward = qwen3_moe_forward,
    .act = BK_ACT_SILU,
    .tensor_parallel = 1,
};
