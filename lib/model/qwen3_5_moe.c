/* The qwen3_5_moe family (Qwen3.5-35B-A3B and up: qwen3_5_moe_text, and the
 * text model of the multimodal qwen3_5_moe checkpoints): qwen3_5's hybrid
 * layers (qwen3_5.c) with, in place of the dense FFN, routed experts (a
 * router [n_experts, dim], softmax, top-k, always renormalized) beside one
 * shared expert whose output a sigmoid gate scales:
 *
 *   per layer:  x += mixer(rmsnorm(x))                  (qwen3_5_mixer_step)
 *               h = rmsnorm(x)
 *               x += sum_k w_k expert_k(h) + sigmoid(h . g) shared(h)
 *
 * HF names each expert's matrices apart (mlp.experts.E.*_proj), as
 * transformers saves them; GGUF merges them (ffn_*_exps) and keeps the
 * shared expert as ffn_*_shexp and its gate as the vector
 * ffn_gate_inp_shexp (HF [1, dim]). */
#include <inttypes.h>

#include "core/check.h"
#include "core/json.h"
#include "model/family.h"

/* ---- config ---- */

static const family_hf_type qwen3_5_moe_hf_types[] = {
    /* Qwen3_5MoeTextConfig */
    {.model_type = "qwen3_5_moe_text", .architecture = "Qwen3_5MoeForCausalLM", .n_kv_heads = 2,
     .head_dim = 256, .n_ctx = 32768, .rope_theta = 10000.0, .bos = -1, .eos = -1,
     .n_vocab = 248320, .n_heads = 16, .attention_bias_key = 1},
};

static int qwen3_5_moe_hf_read(const json_t *obj, const family_hf_type *t, const char *what,
                               model_config *c, memra_err *err)
{
    (void)t;
    c->n_experts = 256;
    c->n_experts_used = 8;
    c->moe_ffn_dim = 512;
    c->shared_ffn_dim = 512;
    c->norm_topk_prob = 1; /* Qwen3_5MoeTopKRouter renormalizes, whatever the config says */
    if (json_get_int(obj, "num_experts", 0, &c->n_experts, what, err) ||
        json_get_int(obj, "num_experts_per_tok", 0, &c->n_experts_used, what, err) ||
        json_get_int(obj, "moe_intermediate_size", 0, &c->moe_ffn_dim, what, err) ||
        json_get_int(obj, "shared_expert_intermediate_size", 0, &c->shared_ffn_dim, what, err))
        return -1;
    return qwen3_5_hybrid_hf_read(obj, what, c, err);
}

static void qwen3_5_moe_hf_write(const model_config *c, const family_hf_type *t, json_t *o)
{
    (void)t;
    config_json_set_int(o, "num_experts", c->n_experts);
    config_json_set_int(o, "num_experts_per_tok", c->n_experts_used);
    config_json_set_int(o, "moe_intermediate_size", c->moe_ffn_dim);
    config_json_set_int(o, "shared_expert_intermediate_size", c->shared_ffn_dim);
    qwen3_5_hybrid_hf_write(c, o);
}

static int qwen3_5_moe_gguf_read(const cfg_gguf *g, model_config *c, memra_err *err)
{
    c->norm_topk_prob = 1;
    if (cfg_gguf_int(g, "expert_count", 1, 1, &c->n_experts, err) ||
        cfg_gguf_int(g, "expert_used_count", 1, 1, &c->n_experts_used, err) ||
        cfg_gguf_int(g, "expert_feed_forward_length", 1, 1, &c->moe_ffn_dim, err) ||
        cfg_gguf_int(g, "expert_shared_feed_forward_length", 1, 1, &c->shared_ffn_dim, err))
        return -1;
    return qwen3_5_hybrid_gguf_read(g, c, err);
}

static void qwen3_5_moe_gguf_write(const model_config *c, const char *arch, gguf_writer *w)
{
    cfg_gguf_set_u32(w, arch, "expert_count", c->n_experts);
    cfg_gguf_set_u32(w, arch, "expert_used_count", c->n_experts_used);
    cfg_gguf_set_u32(w, arch, "expert_feed_forward_length", c->moe_ffn_dim);
    cfg_gguf_set_u32(w, arch, "expert_shared_feed_forward_length", c->shared_ffn_dim);
    qwen3_5_hybrid_gguf_write(c, arch, w);
}

static int qwen3_5_moe_validate(const model_config *c, const char *what, memra_err *err)
{
    double d = (double)c->dim;
    if (config_size_ok(what, "num_experts", c->n_experts, CONFIG_MAX_EXPERTS, err) ||
        config_size_ok(what, "num_experts_per_tok", c->n_experts_used, CONFIG_MAX_EXPERTS,
                       err) ||
        config_size_ok(what, "moe_intermediate_size", c->moe_ffn_dim, CONFIG_MAX_SIZE, err) ||
        config_size_ok(what, "shared_expert_intermediate_size", c->shared_ffn_dim,
                       CONFIG_MAX_SIZE, err) ||
        config_elems_ok(what, "experts", (double)c->n_experts * (double)c->moe_ffn_dim * d,
                        err))
        return -1;
    if (c->n_experts_used > c->n_experts)
        return memra_fail(err,
                          "%s: num_experts_per_tok %" PRId64 " exceeds num_experts %" PRId64,
                          what, c->n_experts_used, c->n_experts);
    return qwen3_5_hybrid_validate(c, what, err);
}

/* ---- tensors ---- */

/* Beyond qwen3_5's names (names_base). */
static const family_tensor_name qwen3_5_moe_tensor_names[] = {
    {"ffn_gate_inp.weight", "mlp.gate.weight", 0, 0},
    {"ffn_gate_exps.weight", "gate_proj.weight", 0, 1},
    {"ffn_up_exps.weight", "up_proj.weight", 0, 1},
    {"ffn_down_exps.weight", "down_proj.weight", 0, 1},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", 0, 0},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", 0, 0},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", 0, 0},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", 0, 0},
};

static const family_hf_prefix qwen3_5_moe_hf_prefixes[] = {
    {"model.language_model.", "model."},
};
static const char *const qwen3_5_moe_hf_ignored[] = {"model.visual.", "mtp."};

static void qwen3_5_moe_contract(const model_config *c, tensor_contract *k)
{
    contract_add_globals(k, c, CE_NORM_SHIFT);
    for (int l = 0; l < c->n_layers + c->mtp_layers; l++) {
        qwen3_5_mixer_contract(c, k, l);
        contract_add_2d(k, ROLE_MOE_ROUTER, l, "ffn_gate_inp.weight", c->n_experts, c->dim, 0, 0);
        contract_add_experts(k, ROLE_MOE_GATE_EXPS, l, "ffn_gate_exps.weight", c->n_experts,
                             c->moe_ffn_dim, c->dim);
        contract_add_experts(k, ROLE_MOE_UP_EXPS, l, "ffn_up_exps.weight", c->n_experts,
                             c->moe_ffn_dim, c->dim);
        contract_add_experts(k, ROLE_MOE_DOWN_EXPS, l, "ffn_down_exps.weight", c->n_experts,
                             c->dim, c->moe_ffn_dim);
        contract_add_2d(k, ROLE_FFN_GATE_SHEXP, l, "ffn_gate_shexp.weight", c->shared_ffn_dim,
                        c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_UP_SHEXP, l, "ffn_up_shexp.weight", c->shared_ffn_dim,
                        c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_DOWN_SHEXP, l, "ffn_down_shexp.weight", c->dim,
                        c->shared_ffn_dim, 0, 0);
        contract_add_1d(k, ROLE_MOE_SHARED_GATE, l, "ffn_gate_inp_shexp.weight", c->dim,
                        CE_HF_ROW1, 0);
    }
    if (c->mtp_layers > 0)
        contract_add_mtp(k, c, CE_NORM_SHIFT);
}

/* ---- forward ---- */

/* The routed experts plus the shared expert, scaled by its gate: a
 * sublayer (model_sublayer), so over tensor-parallel ranks each adds its
 * columns of both, the gate computed from the whole input on every rank. */
static void qwen3_5_moe_block(model *m, int l, const bk_batch *rows, int n, const float *in,
                              float *out)
{
    (void)rows;
    const backend_ops *op = m->bk->ops;
    const layer_weights *w = &m->weights.layers[l];
    run_state *s = &m->state;
    model_moe_ffn(m, l, n, in, out);
    op->ffn_glu(m->bk, &w->shexp_gate, &w->shexp_up, &w->shexp_down, m->act, in, n, s->hb,
                s->hb2, s->shared);
    op->matmul(m->bk, &w->shexp_inp, NULL, in, n, s->shared_gate);
    op->mul_sigmoid(m->bk, s->shared, s->shared_gate, n, m->config.dim, 1);
    op->add(m->bk, out, s->shared, (size_t)n * (size_t)m->config.dim);
}

/* As transformers' Qwen3_5MoeDecoderLayer with Qwen3_5MoeSparseMoeBlock
 * (see the top of the file); routing is the backend's ffn_moe. */
static void qwen3_5_moe_layer(model *m, int l, const bk_batch *rows)
{
    const backend_ops *op = m->bk->ops;
    const layer_weights *w = &m->weights.layers[l];
    run_state *s = &m->state;
    int n = rows->n;
    qwen3_5_mixer_step(m, l, rows);
    op->rmsnorm(m->bk, s->x, n, &w->ffn_norm, m->norm_offset, m->norm_eps, s->xb);
    model_sublayer(m, qwen3_5_moe_block, l, rows, n, s->xb, s->xb2);
    op->add(m->bk, s->x, s->xb2, (size_t)n * (size_t)m->config.dim);
}

static void qwen3_5_moe_forward(model *m, const bk_batch *rows, const int32_t *tokens)
{
    if (m->layer_begin == 0)
        m->bk->ops->embed(m->bk, &m->weights.embed, tokens, rows->n, m->embed_scale, m->state.x);
    for (int l = m->layer_begin; l < m->layer_end; l++)
        qwen3_5_moe_layer(m, l, rows);
}

const model_family_desc family_qwen3_5_moe = {
    .id = FAMILY_QWEN3_5_MOE,
    .name = "qwen3_5_moe",
    .gguf_arch = "qwen35moe",
    .hf_types = qwen3_5_moe_hf_types,
    .n_hf_types = MEMRA_ARRAY_LEN(qwen3_5_moe_hf_types),
    .hf_wrapper_type = "qwen3_5_moe",
    .hf_act_key = "hidden_act",
    .hf_act = "silu",
    .hf_read = qwen3_5_moe_hf_read,
    .hf_write = qwen3_5_moe_hf_write,
    .gguf_read = qwen3_5_moe_gguf_read,
    .gguf_write = qwen3_5_moe_gguf_write,
    .validate = qwen3_5_moe_validate,
    .qk_norm = 1,
    .moe = 1,
    .partial_rope = 1,
    .recurrent = 1,
    .no_dense_ffn = 1,
    .contract = qwen3_5_moe_contract,
    .tensor_names = qwen3_5_moe_tensor_names,
    .n_tensor_names = MEMRA_ARRAY_LEN(qwen3_5_moe_tensor_names),
    .names_base = &family_qwen3_5,
    .hf_prefixes = qwen3_5_moe_hf_prefixes,
    .n_hf_prefixes = MEMRA_ARRAY_LEN(qwen3_5_moe_hf_prefixes),
    .hf_ignored = qwen3_5_moe_hf_ignored,
    .n_hf_ignored = MEMRA_ARRAY_LEN(qwen3_5_moe_hf_ignored),
    .mtp_hf_prefix = "mtp.layers.",
    .mtp_names = qwen3_5_mtp_names,
    .n_mtp_names = 4,
    .forward = qwen3_5_moe_forward,
    .layer = qwen3_5_moe_layer,
    .act = BK_ACT_SILU,
    .tensor_parallel = 1,
    .norm_adds_one = 1,
};
