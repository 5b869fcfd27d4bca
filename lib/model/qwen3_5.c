/* The qwen3_5 family (Qwen3.5 dense: qwen3_5_text, and the text model of
 * the multimodal qwen3_5 checkpoints): a hybrid of gated DeltaNet layers
 * (linear attention with a recurrent state per sequence) and, every
 * full_attention_interval-th layer, full attention.
 *
 *   per layer:  x += mixer(rmsnorm(x))
 *               x += ffn_glu(rmsnorm(x))
 *   mixer, a DeltaNet layer: qkv = in_proj_qkv h, z = in_proj_z h,
 *               b = in_proj_b h, a = in_proj_a h; the backend's delta_net
 *               (conv, L2 norms, gated delta rule, gated RMSNorm); out_proj
 *   mixer, an attention layer: q_proj gives [q | gate] per head; qwen3's
 *               QK-norm; RoPE over the first rope_dim (a quarter) of each
 *               head; attention; out *= sigmoid(gate); o_proj
 *
 * Every RMSNorm computes x * (1 + w) except the DeltaNet's gated one
 * (plain w): HF stores w, GGUF w + 1 (llama.cpp's converter adds 1 to
 * every norm but linear_attn.norm). llama.cpp also stores A as -exp(A_log)
 * and, when there are more value heads than key heads, tiles the value
 * heads (contract.h, tensor_vtile); the forward pass reads either order. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/json.h"
#include "model/family.h"

/* ---- config ---- */

static const family_hf_type qwen3_5_hf_types[] = {
    /* Qwen3_5TextConfig */
    {.model_type = "qwen3_5_text", .architecture = "Qwen3_5ForCausalLM", .n_kv_heads = 4,
     .head_dim = 256, .n_ctx = 32768, .rope_theta = 10000.0, .bos = -1, .eos = -1,
     .n_vocab = 248320, .n_heads = 16, .attention_bias_key = 1},
};

/* layer_types must be the interval pattern llama.cpp's GGUF keeps. */
static int read_layer_types(const json_t *obj, const char *what, model_config *c,
                            memra_err *err)
{
    json_t *lt = json_object_get(obj, "layer_types");
    if (!lt || json_is_null(lt))
        return 0;
    if (!json_is_array(lt) || (int64_t)json_array_size(lt) != c->n_layers)
        return memra_fail(err, "%s: layer_types must be a list of %" PRId64 " entries", what,
                          c->n_layers);
    int64_t first_full = 0;
    for (size_t i = 0; i < json_array_size(lt) && !first_full; i++) {
        const char *s = json_string_value(json_array_get(lt, i));
        if (s && strcmp(s, "full_attention") == 0)
            first_full = (int64_t)i + 1;
    }
    c->full_attn_interval = first_full ? first_full : c->n_layers + 1;
    for (size_t i = 0; i < json_array_size(lt); i++) {
        const char *s = json_string_value(json_array_get(lt, i));
        int rec = config_layer_recurrent(c, (int64_t)i);
        if (!s || strcmp(s, rec ? "linear_attention" : "full_attention") != 0)
            return memra_fail(err, "%s: layer_types[%zu] is \"%s\": only one full_attention "
                              "layer every N, the rest linear_attention, is supported", what, i,
                              s ? s : "(not a string)");
    }
    return 0;
}

int qwen3_5_hybrid_hf_read(const json_t *obj, const char *what, model_config *c,
                           memra_err *err)
{
    c->lin_conv_k = 4;
    c->lin_k_dim = 128;
    c->lin_v_dim = 128;
    c->lin_n_k_heads = 16;
    c->lin_n_v_heads = 32;
    c->full_attn_interval = 4;
    c->attn_out_gate = 1;
    int gate = 1;
    double partial = 0.25;
    if (json_get_int(obj, "linear_conv_kernel_dim", 0, &c->lin_conv_k, what, err) ||
        json_get_int(obj, "linear_key_head_dim", 0, &c->lin_k_dim, what, err) ||
        json_get_int(obj, "linear_value_head_dim", 0, &c->lin_v_dim, what, err) ||
        json_get_int(obj, "linear_num_key_heads", 0, &c->lin_n_k_heads, what, err) ||
        json_get_int(obj, "linear_num_value_heads", 0, &c->lin_n_v_heads, what, err) ||
        json_get_int(obj, "full_attention_interval", 0, &c->full_attn_interval, what, err) ||
        json_get_bool(obj, "attn_output_gate", 0, &gate, what, err) ||
        json_get_num(obj, "partial_rotary_factor", 0, &partial, what, err) ||
        json_get_int(obj, "mtp_num_hidden_layers", 0, &c->mtp_layers, what, err))
        return -1;
    if (!gate)
        return memra_fail(err, "%s: attn_output_gate false is not supported", what);
    if (c->full_attn_interval < 1)
        return memra_fail(err, "%s: full_attention_interval must be positive", what);
    c->rope_sections[0] = 11, c->rope_sections[1] = 11, c->rope_sections[2] = 10;
    json_t *rp = json_object_get(obj, "rope_parameters");
    if (json_is_object(rp)) {
        char rwhat[700];
        snprintf(rwhat, sizeof rwhat, "%.600s: rope_parameters", what);
        if (json_get_num(rp, "partial_rotary_factor", 0, &partial, rwhat, err))
            return -1;
        json_t *ms = json_object_get(rp, "mrope_section");
        if (ms && !json_is_null(ms)) {
            if (!json_is_array(ms) || json_array_size(ms) > 4)
                return memra_fail(err, "%s: mrope_section must be a list of at most 4 "
                                  "integers", rwhat);
            memset(c->rope_sections, 0, sizeof c->rope_sections);
            for (size_t i = 0; i < json_array_size(ms); i++) {
                json_t *v = json_array_get(ms, i);
                if (!json_is_integer(v) || json_integer_value(v) < 0)
                    return memra_fail(err, "%s: mrope_section[%zu] is not a count", rwhat, i);
                c->rope_sections[i] = json_integer_value(v);
            }
        }
    }
    if (!(partial > 0 && partial <= 1))
        return memra_fail(err, "%s: partial_rotary_factor %g is not in (0, 1]", what, partial);
    /* transformers: int(head_dim * partial_rotary_factor) */
    int64_t rd = (int64_t)((double)c->head_dim * partial);
    c->rope_dim = rd == c->head_dim ? 0 : rd;
    return read_layer_types(obj, what, c, err);
}

static int qwen3_5_hf_read(const json_t *obj, const family_hf_type *t, const char *what,
                           model_config *c, memra_err *err)
{
    (void)t;
    return qwen3_5_hybrid_hf_read(obj, what, c, err);
}

void qwen3_5_hybrid_hf_write(const model_config *c, json_t *o)
{
    config_json_set_int(o, "linear_conv_kernel_dim", c->lin_conv_k);
    config_json_set_int(o, "linear_key_head_dim", c->lin_k_dim);
    config_json_set_int(o, "linear_value_head_dim", c->lin_v_dim);
    config_json_set_int(o, "linear_num_key_heads", c->lin_n_k_heads);
    config_json_set_int(o, "linear_num_value_heads", c->lin_n_v_heads);
    config_json_set_num(o, "partial_rotary_factor",
                        (double)config_rope_dim(c) / (double)c->head_dim);
    json_t *lt = json_array();
    for (int64_t l = 0; l < c->n_layers; l++)
        json_array_append_new(lt, json_string(config_layer_recurrent(c, l) ? "linear_attention"
                                                                           : "full_attention"));
    json_object_set_new(o, "layer_types", lt);
    if (c->mtp_layers > 0)
        config_json_set_int(o, "mtp_num_hidden_layers", c->mtp_layers);
}

static void qwen3_5_hf_write(const model_config *c, const family_hf_type *t, json_t *o)
{
    (void)t;
    qwen3_5_hybrid_hf_write(c, o);
}

int qwen3_5_hybrid_gguf_read(const cfg_gguf *g, model_config *c, memra_err *err)
{
    c->full_attn_interval = 4;
    c->attn_out_gate = 1;
    int64_t inner = 0;
    if (cfg_gguf_int(g, "ssm.conv_kernel", 1, 1, &c->lin_conv_k, err) ||
        cfg_gguf_int(g, "ssm.state_size", 1, 1, &c->lin_k_dim, err) ||
        cfg_gguf_int(g, "ssm.group_count", 1, 1, &c->lin_n_k_heads, err) ||
        cfg_gguf_int(g, "ssm.time_step_rank", 1, 1, &c->lin_n_v_heads, err) ||
        cfg_gguf_int(g, "ssm.inner_size", 1, 1, &inner, err) ||
        cfg_gguf_int(g, "full_attention_interval", 1, 0, &c->full_attn_interval, err) ||
        cfg_gguf_int(g, "nextn_predict_layers", 1, 0, &c->mtp_layers, err))
        return -1;
    /* block_count counts the MTP layers (llama.cpp's convention) */
    if (c->mtp_layers < 0 || c->mtp_layers >= c->n_layers)
        return memra_fail(err, "%s: %s.nextn_predict_layers %" PRId64 " is out of range for %"
                          PRId64 " blocks", g->what, g->arch, c->mtp_layers, c->n_layers);
    c->n_layers -= c->mtp_layers;
    if (c->lin_n_v_heads <= 0 || inner <= 0 || inner % c->lin_n_v_heads)
        return memra_fail(err, "%s: %s.ssm.inner_size %" PRId64 " is not a multiple of "
                          "%s.ssm.time_step_rank %" PRId64, g->what, g->arch, inner, g->arch,
                          c->lin_n_v_heads);
    c->lin_v_dim = inner / c->lin_n_v_heads;
    char key[256];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", g->arch);
    const gguf_kv *kv = gguf_find_kv(g->f, key);
    if (kv) {
        const gguf_value *v = &kv->value;
        if (v->type != GGUF_ARRAY || v->v.arr.n > 4 ||
            (v->v.arr.elem_type != GGUF_INT32 && v->v.arr.elem_type != GGUF_UINT32))
            return memra_fail(err, "%s: %s is not an array of at most 4 int32", g->what, key);
        for (uint64_t i = 0; i < v->v.arr.n; i++)
            c->rope_sections[i] = ((const int32_t *)v->v.arr.data)[i];
    } else {
        c->rope_sections[0] = 11, c->rope_sections[1] = 11, c->rope_sections[2] = 10;
    }
    return 0;
}

void qwen3_5_hybrid_gguf_write(const model_config *c, const char *arch, gguf_writer *w)
{
    cfg_gguf_set_u32(w, arch, "ssm.conv_kernel", c->lin_conv_k);
    cfg_gguf_set_u32(w, arch, "ssm.state_size", c->lin_k_dim);
    cfg_gguf_set_u32(w, arch, "ssm.group_count", c->lin_n_k_heads);
    cfg_gguf_set_u32(w, arch, "ssm.time_step_rank", c->lin_n_v_heads);
    cfg_gguf_set_u32(w, arch, "ssm.inner_size", c->lin_v_dim * c->lin_n_v_heads);
    cfg_gguf_set_u32(w, arch, "full_attention_interval", c->full_attn_interval);
    if (c->mtp_layers > 0) {
        cfg_gguf_set_u32(w, arch, "block_count", c->n_layers + c->mtp_layers);
        cfg_gguf_set_u32(w, arch, "nextn_predict_layers", c->mtp_layers);
    }
    int32_t sec[4];
    for (int i = 0; i < 4; i++)
        sec[i] = (int32_t)c->rope_sections[i];
    char key[256];
    snprintf(key, sizeof key, "%s.rope.dimension_sections", arch);
    gguf_writer_set_arr(w, key, GGUF_INT32, 4, sec);
}

/* The DeltaNet kernels keep a head's q, k and output rows on the stack. */
#define QWEN3_5_MAX_HEAD 1024

int qwen3_5_hybrid_validate(const model_config *c, const char *what, memra_err *err)
{
    if (config_size_ok(what, "linear_conv_kernel_dim", c->lin_conv_k, 16, err) ||
        config_size_ok(what, "linear_key_head_dim", c->lin_k_dim, QWEN3_5_MAX_HEAD, err) ||
        config_size_ok(what, "linear_value_head_dim", c->lin_v_dim, QWEN3_5_MAX_HEAD, err) ||
        config_size_ok(what, "linear_num_key_heads", c->lin_n_k_heads, CONFIG_MAX_SIZE, err) ||
        config_size_ok(what, "linear_num_value_heads", c->lin_n_v_heads, CONFIG_MAX_SIZE, err) ||
        config_size_ok(what, "full_attention_interval", c->full_attn_interval,
                       CONFIG_MAX_LAYERS, err) ||
        config_elems_ok(what, "linear attention",
                        (double)(2 * c->lin_n_k_heads * c->lin_k_dim +
                                 2 * c->lin_n_v_heads * c->lin_v_dim) * (double)c->dim,
                        err))
        return -1;
    if (c->mtp_layers < 0 || c->mtp_layers > 1)
        return memra_fail(err, "%s: mtp_num_hidden_layers %" PRId64 ": only 0 or 1 MTP layer "
                          "is supported", what, c->mtp_layers);
    if (c->lin_k_dim % 4 != 0)
        return memra_fail(err, "%s: linear_key_head_dim %" PRId64 " is not a multiple of 4",
                          what, c->lin_k_dim);
    if (c->lin_n_v_heads % c->lin_n_k_heads != 0)
        return memra_fail(err, "%s: linear_num_value_heads %" PRId64 " is not a multiple of "
                          "linear_num_key_heads %" PRId64, what, c->lin_n_v_heads,
                          c->lin_n_k_heads);
    return 0;
}

/* ---- tensors ---- */

static const family_tensor_name qwen3_5_tensor_names[] = {
    {"attn_q_norm.weight", "self_attn.q_norm.weight", 0, 0},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", 0, 0},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", 0, 0},
    {"ffn_gate.weight", "mlp.gate_proj.weight", 0, 0},
    {"ffn_up.weight", "mlp.up_proj.weight", 0, 0},
    {"ffn_down.weight", "mlp.down_proj.weight", 0, 0},
    {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight", 0, 0},
    {"attn_gate.weight", "linear_attn.in_proj_z.weight", 0, 0},
    {"ssm_beta.weight", "linear_attn.in_proj_b.weight", 0, 0},
    {"ssm_alpha.weight", "linear_attn.in_proj_a.weight", 0, 0},
    {"ssm_conv1d.weight", "linear_attn.conv1d.weight", 0, 0},
    {"ssm_dt.bias", "linear_attn.dt_bias", 0, 0},
    {"ssm_a", "linear_attn.A_log", 0, 0},
    {"ssm_norm.weight", "linear_attn.norm.weight", 0, 0},
    {"ssm_out.weight", "linear_attn.out_proj.weight", 0, 0},
};

/* The official checkpoints are the multimodal wrapper: its text model
 * under model.language_model., the vision tower and the MTP block beside
 * it (neither is run: text in, text out). */
static const family_hf_prefix qwen3_5_hf_prefixes[] = {
    {"model.language_model.", "model."},
};
static const char *const qwen3_5_hf_ignored[] = {"model.visual.", "mtp."};

/* The MTP block's own tensors (transformers' names, as vLLM's Qwen3-Next
 * MTP reads them; GGUF as llama.cpp's converter writes them). Its layer's
 * tensors are named as a layer's under mtp.layers.0. */
const family_tensor_name qwen3_5_mtp_names[4] = {
    {"nextn.eh_proj.weight", "mtp.fc.weight", 0, 0},
    {"nextn.enorm.weight", "mtp.pre_fc_norm_embedding.weight", 0, 0},
    {"nextn.hnorm.weight", "mtp.pre_fc_norm_hidden.weight", 0, 0},
    {"nextn.shared_head_norm.weight", "mtp.norm.weight", 0, 0},
};

static void delta_contract(const model_config *c, tensor_contract *k, int l)
{
    int nk = (int)c->lin_n_k_heads, nv = (int)c->lin_n_v_heads;
    int64_t key_dim = c->lin_n_k_heads * c->lin_k_dim, value_dim = c->lin_n_v_heads * c->lin_v_dim;
    int64_t conv_dim = 2 * key_dim + value_dim, vd = c->lin_v_dim;
    contract_add_2d(k, ROLE_SSM_QKV, l, "attn_qkv.weight", conv_dim, c->dim, 0, 0);
    contract_set_vtile(k, nk, nv, 2 * key_dim, vd, 0);
    contract_add_2d(k, ROLE_SSM_Z, l, "attn_gate.weight", value_dim, c->dim, 0, 0);
    contract_set_vtile(k, nk, nv, 0, vd, 0);
    contract_add_2d(k, ROLE_SSM_BETA, l, "ssm_beta.weight", nv, c->dim, 0, 0);
    contract_set_vtile(k, nk, nv, 0, 1, 0);
    contract_add_2d(k, ROLE_SSM_ALPHA, l, "ssm_alpha.weight", nv, c->dim, 0, 0);
    contract_set_vtile(k, nk, nv, 0, 1, 0);
    contract_add_2d(k, ROLE_SSM_CONV, l, "ssm_conv1d.weight", conv_dim, c->lin_conv_k,
                    CE_HF_MID1, 0);
    contract_set_vtile(k, nk, nv, 2 * key_dim, vd, 0);
    contract_add_1d(k, ROLE_SSM_DT_BIAS, l, "ssm_dt.bias", nv, 0, 0);
    contract_set_vtile(k, nk, nv, 0, 1, 0);
    contract_add_1d(k, ROLE_SSM_A, l, "ssm_a", nv, CE_NEG_EXP, 0);
    contract_set_vtile(k, nk, nv, 0, 1, 0);
    contract_add_1d(k, ROLE_SSM_NORM, l, "ssm_norm.weight", vd, 0, 0);
    contract_add_2d(k, ROLE_SSM_OUT, l, "ssm_out.weight", c->dim, value_dim, 0, 0);
    contract_set_vtile(k, nk, nv, 0, vd, 1);
}

static void gated_attention_contract(const model_config *c, tensor_contract *k, int l)
{
    int64_t q_rows = c->n_heads * c->head_dim, kv_rows = c->n_kv_heads * c->head_dim;
    contract_add_2d(k, ROLE_ATTN_Q, l, "attn_q.weight", 2 * q_rows, c->dim, 0, 0);
    contract_add_2d(k, ROLE_ATTN_K, l, "attn_k.weight", kv_rows, c->dim, 0, 0);
    contract_add_2d(k, ROLE_ATTN_V, l, "attn_v.weight", kv_rows, c->dim, 0, 0);
    contract_add_2d(k, ROLE_ATTN_O, l, "attn_output.weight", c->dim, q_rows, 0, 0);
    if (c->attn_bias) {
        contract_add_1d(k, ROLE_ATTN_Q_BIAS, l, "attn_q.bias", 2 * q_rows, 0, 0);
        contract_add_1d(k, ROLE_ATTN_K_BIAS, l, "attn_k.bias", kv_rows, 0, 0);
        contract_add_1d(k, ROLE_ATTN_V_BIAS, l, "attn_v.bias", kv_rows, 0, 0);
        contract_add_1d(k, ROLE_ATTN_O_BIAS, l, "attn_output.bias", c->dim, 0, 0);
    }
    contract_add_1d(k, ROLE_ATTN_Q_NORM, l, "attn_q_norm.weight", c->head_dim, CE_NORM_SHIFT, 0);
    contract_add_1d(k, ROLE_ATTN_K_NORM, l, "attn_k_norm.weight", c->head_dim, CE_NORM_SHIFT, 0);
}

void qwen3_5_mixer_contract(const model_config *c, tensor_contract *k, int l)
{
    contract_add_1d(k, ROLE_ATTN_NORM, l, "attn_norm.weight", c->dim, CE_NORM_SHIFT, 0);
    if (config_layer_recurrent(c, l))
        delta_contract(c, k, l);
    else
        gated_attention_contract(c, k, l);
    contract_add_1d(k, ROLE_FFN_NORM, l, "post_attention_norm.weight", c->dim, CE_NORM_SHIFT,
                    0);
}

/* The layers, then the MTP block (a full-attention layer at n_layers with
 * its own four tensors) when the config names one. */
static void qwen3_5_contract(const model_config *c, tensor_contract *k)
{
    contract_add_globals(k, c, CE_NORM_SHIFT);
    for (int l = 0; l < c->n_layers + c->mtp_layers; l++) {
        qwen3_5_mixer_contract(c, k, l);
        contract_add_2d(k, ROLE_FFN_GATE, l, "ffn_gate.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_UP, l, "ffn_up.weight", c->ffn_dim, c->dim, 0, 0);
        contract_add_2d(k, ROLE_FFN_DOWN, l, "ffn_down.weight", c->dim, c->ffn_dim, 0, 0);
    }
    if (c->mtp_layers > 0)
        contract_add_mtp(k, c, CE_NORM_SHIFT);
}

/* ---- forward ---- */

void qwen3_5_mixer_step(model *m, int l, const bk_batch *rows)
{
    const backend_ops *op = m->bk->ops;
    run_state *s = &m->state;
    int n = rows->n;
    model_report_hidden(m, l, rows, s->x);
    op->rmsnorm(m->bk, s->x, n, &m->weights.layers[l].attn_norm, m->norm_offset, m->norm_eps,
                s->xb);
    if (config_layer_recurrent(&m->config, l))
        model_delta_net(m, l, rows, s->xb, s->xb2);
    else
        model_attention(m, l, rows, s->xb, s->xb2);
    op->add(m->bk, s->x, s->xb2, (size_t)n * (size_t)m->config.dim);
}

/* As transformers' Qwen3_5DecoderLayer (see the top of the file). */
static void qwen3_5_layer(model *m, int l, const bk_batch *rows)
{
    const backend_ops *op = m->bk->ops;
    const layer_weights *w = &m->weights.layers[l];
    run_state *s = &m->state;
    int n = rows->n;
    qwen3_5_mixer_step(m, l, rows);
    op->rmsnorm(m->bk, s->x, n, &w->ffn_norm, m->norm_offset, m->norm_eps, s->xb);
    model_ffn(m, l, n, s->xb, s->xb2);
    op->add(m->bk, s->x, s->xb2, (size_t)n * (size_t)m->config.dim);
}

static void qwen3_5_forward(model *m, const bk_batch *rows, const int32_t *tokens)
{
    if (m->layer_begin == 0)
        m->bk->ops->embed(m->bk, &m->weights.embed, tokens, rows->n, m->embed_scale, m->state.x);
    for (int l = m->layer_begin; l < m->layer_end; l++)
        qwen3_5_layer(m, l, rows);
}

const model_family_desc family_qwen3_5 = {
    .id = FAMILY_QWEN3_5,
    .name = "qwen3_5",
    .gguf_arch = "qwen35",
    .hf_types = qwen3_5_hf_types,
    .n_hf_types = MEMRA_ARRAY_LEN(qwen3_5_hf_types),
    .hf_wrapper_type = "qwen3_5",
    .hf_act_key = "hidden_act",
    .hf_act = "silu",
    .hf_read = qwen3_5_hf_read,
    .hf_write = qwen3_5_hf_write,
    .gguf_read = qwen3_5_hybrid_gguf_read,
    .gguf_write = qwen3_5_hybrid_gguf_write,
    .validate = qwen3_5_hybrid_validate,
    .qk_norm = 1,
    .partial_rope = 1,
    .recurrent = 1,
    .contract = qwen3_5_contract,
    .tensor_names = qwen3_5_tensor_names,
    .n_tensor_names = MEMRA_ARRAY_LEN(qwen3_5_tensor_names),
    .hf_prefixes = qwen3_5_hf_prefixes,
    .n_hf_prefixes = MEMRA_ARRAY_LEN(qwen3_5_hf_prefixes),
    .hf_ignored = qwen3_5_hf_ignored,
    .n_hf_ignored = MEMRA_ARRAY_LEN(qwen3_5_hf_ignored),
    .mtp_hf_prefix = "mtp.layers.",
    .mtp_names = qwen3_5_mtp_names,
    .n_mtp_names = MEMRA_ARRAY_LEN(qwen3_5_mtp_names),
    .forward = qwen3_5_forward,
    .layer = qwen3_5_layer,
    .act = BK_ACT_SILU,
    .tensor_parallel = 1,
    .norm_adds_one = 1,
};
