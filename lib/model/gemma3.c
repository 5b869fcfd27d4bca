/* The gemma3 family (gemma3_text; the text model of the multimodal
 * gemma-3-4b and larger). Four RMSNorms per layer (before and after
 * attention, before and after the FFN), QK-norm, GeGLU (tanh GELU) FFN,
 * embeddings scaled by sqrt(dim) and tied to the output head, and 5 of every
 * 6 layers attending in a sliding window with their own rope base.
 *
 * Gemma's RMSNorm computes x * (1 + w); HF stores w, GGUF stores w + 1
 * (llama.cpp's converter adds 1 to every norm, q/k norms included). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "core/check.h"
#include "core/json.h"
#include "model/family.h"

/* ---- config ---- */

/* Gemma3TextConfig. Google's own gemma-3-4b+ text_config omits
 * num_attention_heads, num_key_value_heads, head_dim and vocab_size and
 * relies on these defaults, so they are not required here. */
static const family_hf_type gemma3_hf_types[] = {
    {.model_type = "gemma3_text", .architecture = "Gemma3ForCausalLM", .n_kv_heads = 4,
     .head_dim = 256, .n_ctx = 131072, .rope_theta = 1000000.0, .tie = 1, .bos = 2, .eos = 1,
     .sliding_window = 4096, .n_vocab = 262208, .n_heads = 8, .attention_bias_key = 1},
};

static int gemma3_hf_read(const json_t *obj, const family_hf_type *t, const char *what,
                          model_config *c, memra_err *err)
{
    if (config_hf_sliding_window(obj, t->sliding_window, what, c, err))
        return -1;
    c->rope_local_theta = 10000.0;
    c->sliding_window_pattern = 6;
    c->query_pre_attn_scalar = 256;
    if (json_get_num(obj, "rope_local_base_freq", 0, &c->rope_local_theta, what, err) ||
        json_get_int(obj, "sliding_window_pattern", 0, &c->sliding_window_pattern, what, err) ||
        json_get_num(obj, "query_pre_attn_scalar", 0, &c->query_pre_attn_scalar, what, err) ||
        json_get_num(obj, "final_logit_softcapping", 0, &c->final_softcap, what, err) ||
        json_get_num(obj, "attn_logit_softcapping", 0, &c->attn_softcap, what, err))
        return -1;
    return config_hf_layer_types(obj, what, c, err);
}

static void gemma3_hf_write(const model_config *c, const family_hf_type *t, json_t *o)
{
    (void)t;
    config_json_set_num(o, "query_pre_attn_scalar", c->query_pre_attn_scalar);
    json_object_set_new(o, "sliding_window",
                        c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
    config_json_set_int(o, "sliding_window_pattern", c->sliding_window_pattern);
    config_json_set_num(o, "rope_local_base_freq", c->rope_local_theta);
    json_object_set_new(o, "final_logit_softcapping",
                        c->final_softcap > 0 ? json_real(c->final_softcap) : json_null());
    json_object_set_new(o, "attn_logit_softcapping",
                        c->attn_softcap > 0 ? json_real(c->attn_softcap) : json_null());
}

/* llama.cpp hard-codes the pattern (6) and derives the query scale from the
 * model size, so we keep ours in memra.* keys, which other readers ignore. */
static int gemma3_gguf_read(const cfg_gguf *g, model_config *c, memra_err *err)
{
    c->rope_local_theta = 10000.0;
    c->sliding_window_pattern = 6;
    /* llama.cpp's rule: 27B (62 layers) scales by dim/n_heads. */
    c->query_pre_attn_scalar =
        c->n_layers == 62 ? (double)(c->dim / c->n_heads) : (double)c->head_dim;
    if (cfg_gguf_num(g, "rope.freq_base_swa", 1, 0, &c->rope_local_theta, err) ||
        cfg_gguf_int(g, "memra.attention.sliding_window_pattern", 0, 0,
                     &c->sliding_window_pattern, err) ||
        cfg_gguf_num(g, "memra.attention.query_pre_attn_scalar", 0, 0,
                     &c->query_pre_attn_scalar, err) ||
        cfg_gguf_num(g, "final_logit_softcapping", 1, 0, &c->final_softcap, err) ||
        cfg_gguf_num(g, "attn_logit_softcapping", 1, 0, &c->attn_softcap, err))
        return -1;
    return 0;
}

static void gemma3_gguf_write(const model_config *c, const char *arch, gguf_writer *w)
{
    cfg_gguf_set_f32(w, arch, "rope.freq_base_swa", c->rope_local_theta);
    gguf_writer_set_u32(w, "memra.attention.sliding_window_pattern",
                        (uint32_t)c->sliding_window_pattern);
    gguf_writer_set_f32(w, "memra.attention.query_pre_attn_scalar",
                        (float)c->query_pre_attn_scalar);
    if (c->final_softcap > 0)
        cfg_gguf_set_f32(w, arch, "final_logit_softcapping", c->final_softcap);
    if (c->attn_softcap > 0)
        cfg_gguf_set_f32(w, arch, "attn_logit_softcapping", c->attn_softcap);
}

static int gemma3_validate(const model_config *c, const char *what, memra_err *err)
{
    if (config_size_ok(what, "sliding_window_pattern", c->sliding_window_pattern,
                       CONFIG_MAX_LAYERS, err) ||
        config_finite_pos(what, "query_pre_attn_scalar", c->query_pre_attn_scalar, err) ||
        config_finite_pos(what, "rope_local_base_freq", c->rope_local_theta, err))
        return -1;
    return 0;
}

/* ---- tensors ---- */

/* HF's post_attention_layernorm is the norm after attention here, not the
 * pre-FFN norm as in llama and qwen. */
static const family_tensor_name gemma3_tensor_names[] = {
    {"attn_q_norm.weight", "self_attn.q_norm.weight", 0, 0},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", 0, 0},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", 0, 0},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight", 0, 0},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", 0, 0},
    {"ffn_gate.weight", "mlp.gate_proj.weight", 0, 0},
    {"ffn_up.weight", "mlp.up_proj.weight", 0, 0},
    {"ffn_down.weight", "mlp.down_proj.weight", 0, 0},
};

/* The multimodal checkpoints keep the text model under another prefix. */
static const family_hf_prefix gemma3_hf_prefixes[] = {
    {"language_model.model.", "model."},
    {"model.language_model.", "model."},
    {"language_model.lm_head.", "lm_head."},
};

static void gemma3_contract(const model_config *c, tensor_contract *k)
{
    int64_t q_rows = c->n_heads * c->head_dim, kv_rows = c->n_kv_heads * c->head_dim;
    const unsigned norm = CE_NORM_SHIFT;
    contract_add_globals(k, c, norm);
    for (int l = 0; l < c->n_layers; l++) {
        contract_add_1d(k, ROLE_ATTN_NORM, l, "attn_norm.weight", c->dim, norm, 0);
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
        contract_add_1d(k, ROLE_ATTN_Q_NORM, l, "attn_q_norm.weight", c->head_dim, norm, 0);
        contract_add_1d(k, ROLE_ATTN_K_NORM, l, "attn_k_norm.weight", c->head_dim, norm, 0);
        contract_add_1d(k, ROLE_ATTN_POST_NORM, l, "post_attention_norm.weight", c->dim, norm, 0);
        contract_add_1d(k, ROLE_FFN_NORM, l, "ffn_norm.weight", c->dim, norm, 0);
        contract_add_2d(k, ROLE_FFN_GATE, l, "ffn_gate.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_UP, l, "ffn_up.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_DOWN, l, "ffn_down.weight", c->dim, c->ffn_dim, 0, 0);
        contract_add_1d(k, ROLE_FFN_POST_NORM, l, "post_ffw_norm.weight", c->dim, norm, 0);
    }
}

/* ---- forward ---- */

/* Layer l slides unless (l + 1) is a multiple of the pattern; the sliding
 * layers use the local RoPE base (unscaled: transformers builds their
 * rotary embedding with rope_type "default"). */
static void gemma3_layer_attention(const model_config *c, int l, bk_attn *a, int *local_rope)
{
    int slides = c->sliding_window_pattern <= 0 || (l + 1) % c->sliding_window_pattern != 0;
    a->scale = (float)pow(c->query_pre_attn_scalar, -0.5);
    /* attn_logit_softcapping is read but not applied: transformers'
     * Gemma3Attention never passes it to the attention kernel (gemma2's
     * does), and llama.cpp's gemma3 graph has no attention soft-cap either.
     * Measured against transformers 5.17 (tests/fixtures/parity/tiny-gemma3,
     * soft-cap 2.5): 3e-7 without it, 9e-2 with it. The op keeps
     * soft-capping for families that use it. */
    a->softcap = 0.0f;
    a->window = slides ? c->sliding_window : 0;
    *local_rope = slides;
}

/* As transformers' Gemma3TextModel / Gemma3DecoderLayer:
 *
 *   x = embed(tokens) * sqrt(dim)
 *   per layer:  x += post_attn_norm(attn(input_norm(x)))
 *               x += post_ffn_norm(down(gelu_tanh(gate(h)) * up(h))),  h = pre_ffn_norm(x)
 *
 * Every norm is x * (1 + w) (model.norm_offset bridges HF's w and GGUF's
 * w + 1). Attention has per-head QK-norm, scale query_pre_attn_scalar^-0.5,
 * and on the local layers a sliding window and their own RoPE base
 * (gemma3_layer_attention, fixed at load). The final logit soft-cap is
 * applied by model_forward. */
static void gemma3_forward(model *m, const bk_batch *rows, const int32_t *tokens)
{
    const backend_ops *op = m->bk->ops;
    run_state *s = &m->state;
    int n = rows->n;
    size_t nd = (size_t)n * (size_t)m->config.dim;
    float off = m->norm_offset, eps = m->norm_eps;
    if (m->layer_begin == 0)
        op->embed(m->bk, &m->weights.embed, tokens, n, m->embed_scale, s->x);
    for (int l = m->layer_begin; l < m->layer_end; l++) {
        const layer_weights *w = &m->weights.layers[l];
        model_report_hidden(m, l, rows, s->x);
        op->rmsnorm(m->bk, s->x, n, &w->attn_norm, off, eps, s->xb);
        model_attention(m, l, rows, s->xb, s->xb2);
        op->rmsnorm(m->bk, s->xb2, n, &w->attn_post_norm, off, eps, s->xb);
        op->add(m->bk, s->x, s->xb, nd);
        op->rmsnorm(m->bk, s->x, n, &w->ffn_norm, off, eps, s->xb);
        model_ffn(m, l, n, s->xb, s->xb2);
        op->rmsnorm(m->bk, s->xb2, n, &w->ffn_post_norm, off, eps, s->xb);
        op->add(m->bk, s->x, s->xb, nd);
    }
}

const model_family_desc family_gemma3 = {
    .id = FAMILY_GEMMA3,
    .name = "gemma3",
    .gguf_arch = "gemma3",
    .hf_types = gemma3_hf_types,
    .n_hf_types = MEMRA_ARRAY_LEN(gemma3_hf_types),
    .hf_wrapper_type = "gemma3",
    .hf_act_key = "hidden_activation",
    .hf_act = "gelu_pytorch_tanh",
    .hf_read = gemma3_hf_read,
    .hf_write = gemma3_hf_write,
    .gguf_read = gemma3_gguf_read,
    .gguf_write = gemma3_gguf_write,
    .validate = gemma3_validate,
    .qk_norm = 1,
    .sliding_pattern = 1,
    .contract = gemma3_contract,
    .tensor_names = gemma3_tensor_names,
    .n_tensor_names = MEMRA_ARRAY_LEN(gemma3_tensor_names),
    .hf_prefixes = gemma3_hf_prefixes,
    .n_hf_prefixes = MEMRA_ARRAY_LEN(gemma3_hf_prefixes),
    .forward = gemma3_forward,
    .act = BK_ACT_GELU_TANH,
    .tensor_parallel = 1,
    .norm_adds_one = 1,
    .embed_scale_sqrt_dim = 1,
    .layer_attention = gemma3_layer_attention,
};
