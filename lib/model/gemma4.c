/* The gemma4 family (gemma4_text, and the text model of the multimodal
 * gemma4 checkpoints): Gemma 3's four norms a layer and GeGLU FFN, with
 *   - plain RMSNorms (x * w, not x * (1 + w)), and V RMS-normalized too
 *     (no weight); attention unscaled (q and k are normed per head);
 *   - full-attention layers with their own head size (global_head_dim),
 *     and with attention_k_eq_v their own KV heads and no V projection (V
 *     is the K projection before k_norm); "proportional" RoPE on them:
 *     only the first rope_full_angles of the head_dim / 2 pairs turn, at
 *     theta^(2i / head_dim), the rest pass through;
 *   - the last num_kv_shared_layers layers computing no K/V: they attend
 *     over the K/V of the last earlier layer of their kind;
 *   - per-layer embeddings (PLE): a second token table gives each layer
 *     ple_dim values, mixed with a projection of the embedding, which a
 *     gated branch at the end of the layer adds back;
 *   - a learned scalar on the residual stream at the end of each layer;
 *   - with enable_moe_block (gemma-4-26B-A4B), routed experts beside the
 *     dense FFN of every layer, both reading the residual stream: the
 *     router an RMS-normed (unweighted) copy times router.scale and
 *     dim^-1/2, softmax over all experts, the top k renormalized, then
 *     times per_expert_scale; the experts their own input norm; each
 *     branch its own output norm, summed before the post-FFN norm. The
 *     experts are stacked in HF too (gate and up in one tensor).
 *
 * GGUF as llama.cpp's converter writes it (arch "gemma4"): no norm is
 * shifted, no tensor permuted; key_length is the full layers' head size
 * and key_length_swa the sliding ones'; head_count_kv and
 * feed_forward_length become per-layer lists where layers differ; the
 * proportional RoPE is the generated rope_freqs.weight (1 for the pairs
 * that turn, 1e30 for the rest, which stops them). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json.h"
#include "model/family.h"

/* ---- config ---- */

/* Gemma4TextConfig's defaults. */
static const family_hf_type gemma4_hf_types[] = {
    {.model_type = "gemma4_text", .architecture = "Gemma4ForCausalLM", .n_kv_heads = 4,
     .head_dim = 256, .n_ctx = 131072, .rope_theta = 1000000.0, .tie = 1, .bos = 2, .eos = 1,
     .sliding_window = 512, .n_vocab = 262144, .n_heads = 8, .attention_bias_key = 1},
};

/* rope_parameters per layer type: "default" on the sliding layers,
 * "proportional" (or "default" turning every pair) on the full ones. */
static int read_rope(const json_t *obj, const char *what, model_config *c, memra_err *err)
{
    c->rope_local_theta = 10000.0;
    c->rope_theta = 1000000.0;
    double prf = 0.25;
    json_t *rp = json_object_get(obj, "rope_parameters");
    if (rp && !json_is_null(rp)) {
        char rwhat[800];
        snprintf(rwhat, sizeof rwhat, "%.700s: rope_parameters", what);
        if (!json_is_object(rp))
            return memra_fail(err, "%s must be an object", rwhat);
        static const char *const kinds[2] = {"sliding_attention", "full_attention"};
        for (int i = 0; i < 2; i++) {
            json_t *p = json_object_get(rp, kinds[i]);
            if (!p)
                continue;
            char pwhat[900];
            snprintf(pwhat, sizeof pwhat, "%.780s.%s", rwhat, kinds[i]);
            if (!json_is_object(p))
                return memra_fail(err, "%s must be an object", pwhat);
            const char *type = "default";
            double factor = 1.0, f = 1.0;
            if (json_get_str(p, "rope_type", 0, &type, pwhat, err) ||
                json_get_num(p, "factor", 0, &factor, pwhat, err) ||
                json_get_num(p, "rope_theta", 0, i ? &c->rope_theta : &c->rope_local_theta, pwhat,
                             err) ||
                json_get_num(p, "partial_rotary_factor", 0, &f, pwhat, err))
                return -1;
            if (factor != 1.0)
                return memra_fail(err, "%s: factor %g is not supported (only 1)", pwhat, factor);
            int proportional = strcmp(type, "proportional") == 0;
            if (strcmp(type, "default") != 0 && !(i && proportional))
                return memra_fail(err, "%s: rope_type \"%s\" is not supported (%s)", pwhat, type,
                                  i ? "default, proportional" : "default");
            if (!proportional && f != 1.0)
                return memra_fail(err, "%s: partial_rotary_factor %g with rope_type \"%s\" is "
                                  "not supported", pwhat, f, type);
            if (!(f > 0 && f <= 1))
                return memra_fail(err, "%s: partial_rotary_factor %g is out of (0, 1]", pwhat, f);
            if (i)
                prf = f;
        }
    }
    /* transformers: rope_angles = int(partial_rotary_factor * head_dim // 2) */
    c->rope_full_angles = (int64_t)floor(prf * (double)c->head_dim_full / 2.0);
    return 0;
}

static int gemma4_hf_read(const json_t *obj, const family_hf_type *t, const char *what,
                          model_config *c, memra_err *err)
{
    c->last_layer_full = 1;
    c->sliding_window_pattern = 6;
    c->head_dim_full = 512;
    c->ple_dim = 256;
    c->ple_vocab = 262144;
    if (config_hf_sliding_window(obj, t->sliding_window, what, c, err) ||
        json_get_int(obj, "global_head_dim", 0, &c->head_dim_full, what, err) ||
        json_get_bool(obj, "attention_k_eq_v", 0, &c->attn_k_eq_v, what, err) ||
        json_get_int(obj, "num_kv_shared_layers", 0, &c->n_kv_shared, what, err) ||
        json_get_int(obj, "vocab_size_per_layer_input", 0, &c->ple_vocab, what, err) ||
        json_get_bool(obj, "use_double_wide_mlp", 0, &c->double_wide_ffn, what, err) ||
        json_get_num(obj, "final_logit_softcapping", 0, &c->final_softcap, what, err) ||
        json_get_bool(obj, "enable_moe_block", 0, &c->moe_with_dense, what, err))
        return -1;
    if (c->moe_with_dense) {
        c->norm_topk_prob = 1; /* the top k always renormalized */
        if (json_get_int(obj, "num_experts", 1, &c->n_experts, what, err) ||
            json_get_int(obj, "top_k_experts", 1, &c->n_experts_used, what, err) ||
            json_get_int(obj, "moe_intermediate_size", 1, &c->moe_ffn_dim, what, err))
            return -1;
    }
    json_t *ple = json_object_get(obj, "hidden_size_per_layer_input");
    if (ple && json_is_null(ple))
        c->ple_dim = 0;
    else if (json_get_int(obj, "hidden_size_per_layer_input", 0, &c->ple_dim, what, err))
        return -1;
    /* KV heads of the full layers: their own only with k_eq_v */
    int64_t global_kv = 0;
    if (json_get_int(obj, "num_global_key_value_heads", 0, &global_kv, what, err))
        return -1;
    if (c->attn_k_eq_v && global_kv > 0)
        c->n_kv_heads_full = global_kv;
    if (config_hf_layer_types(obj, what, c, err) != 0)
        return -1;
    return read_rope(obj, what, c, err);
}

static void gemma4_hf_write(const model_config *c, const family_hf_type *t, json_t *o)
{
    (void)t;
    json_object_del(o, "rope_theta");
    json_object_del(o, "rope_scaling");
    config_json_set_int(o, "global_head_dim", c->head_dim_full);
    json_object_set_new(o, "num_global_key_value_heads",
                        c->n_kv_heads_full > 0 ? json_integer(c->n_kv_heads_full) : json_null());
    json_object_set_new(o, "attention_k_eq_v", json_boolean(c->attn_k_eq_v));
    config_json_set_int(o, "num_kv_shared_layers", c->n_kv_shared);
    config_json_set_int(o, "hidden_size_per_layer_input", c->ple_dim);
    config_json_set_int(o, "vocab_size_per_layer_input", c->ple_vocab);
    json_object_set_new(o, "use_double_wide_mlp", json_boolean(c->double_wide_ffn));
    json_object_set_new(o, "enable_moe_block", json_boolean(c->moe_with_dense));
    if (c->moe_with_dense) {
        config_json_set_int(o, "num_experts", c->n_experts);
        config_json_set_int(o, "top_k_experts", c->n_experts_used);
        config_json_set_int(o, "moe_intermediate_size", c->moe_ffn_dim);
    }
    json_object_set_new(o, "final_logit_softcapping",
                        c->final_softcap > 0 ? json_real(c->final_softcap) : json_null());
    json_object_set_new(o, "sliding_window",
                        c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
    json_t *lt = json_array();
    for (int64_t l = 0; l < c->n_layers; l++)
        json_array_append_new(lt, json_string(config_layer_full(c, l) ? "full_attention"
                                                                      : "sliding_attention"));
    json_object_set_new(o, "layer_types", lt);
    json_t *rp = json_object(), *sl = json_object(), *fu = json_object();
    json_object_set_new(sl, "rope_type", json_string("default"));
    config_json_set_num(sl, "rope_theta", c->rope_local_theta);
    json_object_set_new(fu, "rope_type", json_string("proportional"));
    config_json_set_num(fu, "partial_rotary_factor",
                        2.0 * (double)c->rope_full_angles / (double)c->head_dim_full);
    config_json_set_num(fu, "rope_theta", c->rope_theta);
    json_object_set_new(rp, "sliding_attention", sl);
    json_object_set_new(rp, "full_attention", fu);
    json_object_set_new(o, "rope_parameters", rp);
}

/* The layer pattern from llama.cpp's sliding_window_pattern (true where a
 * layer slides): every Nth layer full, and the last. */
static int read_pattern(const cfg_gguf *g, model_config *c, memra_err *err)
{
    char key[160];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", g->arch);
    const gguf_kv *kv = gguf_find_kv(g->f, key);
    if (!kv)
        return 0; /* the default: every 6th */
    if (kv->value.type != GGUF_ARRAY || kv->value.v.arr.elem_type != GGUF_BOOL ||
        kv->value.v.arr.n != (uint64_t)c->n_layers)
        return memra_fail(err, "%s: key %s must be a list of %" PRId64 " booleans", g->what, key,
                          c->n_layers);
    const uint8_t *sl = kv->value.v.arr.data;
    int64_t pattern = 0;
    for (int64_t l = 0; l < c->n_layers && !pattern; l++)
        if (!sl[l])
            pattern = l + 1;
    c->sliding_window_pattern = pattern ? pattern : c->n_layers + 1;
    for (int64_t l = 0; l < c->n_layers; l++)
        if ((sl[l] == 0) != (config_layer_full(c, l) != 0))
            return memra_fail(err, "%s: key %s is not a pattern memra supports (every Nth "
                              "layer and the last full)", g->what, key);
    return 0;
}

/* rope_freqs.weight: 1 for the pairs that turn, then 1e30. */
static int read_rope_freqs(const cfg_gguf *g, model_config *c, memra_err *err)
{
    const gguf_tensor *t = gguf_find_tensor(g->f, "rope_freqs.weight");
    c->rope_full_angles = c->head_dim_full / 2;
    if (!t)
        return 0;
    if (t->type != DT_F32 || t->n_dims != 1 || t->ne[0] != c->head_dim_full / 2)
        return memra_fail(err, "%s: tensor rope_freqs.weight must be F32 [%" PRId64 "]", g->what,
                          c->head_dim_full / 2);
    int64_t n = 0;
    for (int64_t i = 0; i < t->ne[0]; i++) {
        float v;
        memcpy(&v, t->data + 4 * i, 4);
        int turns = v == 1.0f, stops = v >= 1e29f;
        if (!(turns && n == i) && !stops)
            return memra_fail(err, "%s: rope_freqs.weight[%" PRId64 "] = %g: memra reads only "
                              "1 (the pair turns) then 1e30 (it does not)", g->what, i,
                              (double)v);
        if (turns)
            n++;
    }
    c->rope_full_angles = n;
    return 0;
}

static int gemma4_gguf_read(const cfg_gguf *g, model_config *c, memra_err *err)
{
    c->last_layer_full = 1;
    c->sliding_window_pattern = 6;
    c->rope_local_theta = 10000.0;
    c->head_dim_full = c->head_dim; /* key_length is the full layers' */
    /* no key for it: the per-layer table's rows when there is one, else
     * the vocabulary (an assistant's config says 0: it has no such table) */
    c->ple_vocab = config_is_assistant(c) ? 0 : c->n_vocab;
    if (cfg_gguf_int(g, "attention.key_length_swa", 1, 1, &c->head_dim, err) ||
        cfg_gguf_num(g, "rope.freq_base_swa", 1, 0, &c->rope_local_theta, err) ||
        cfg_gguf_int(g, "attention.shared_kv_layers", 1, 0, &c->n_kv_shared, err) ||
        cfg_gguf_int(g, "embedding_length_per_layer_input", 1, 1, &c->ple_dim, err) ||
        cfg_gguf_num(g, "final_logit_softcapping", 1, 0, &c->final_softcap, err) ||
        cfg_gguf_int(g, "expert_count", 1, 0, &c->n_experts, err) ||
        read_pattern(g, c, err) || read_rope_freqs(g, c, err))
        return -1;
    if (c->n_experts > 0) {
        c->moe_with_dense = 1;
        c->norm_topk_prob = 1;
        if (cfg_gguf_int(g, "expert_used_count", 1, 1, &c->n_experts_used, err) ||
            cfg_gguf_int(g, "expert_feed_forward_length", 1, 1, &c->moe_ffn_dim, err))
            return -1;
    }
    if (c->rope_dim == c->head_dim_full) /* the shared reader compared it to key_length */
        c->rope_dim = 0;
    const gguf_tensor *ple = gguf_find_tensor(g->f, "per_layer_token_embd.weight");
    if (ple && ple->n_dims == 2)
        c->ple_vocab = ple->ne[1];
    /* the per-layer lists: the full layers' KV heads, the shared layers' FFN */
    if (c->n_layers <= 0 || c->n_layers > CONFIG_MAX_LAYERS)
        return memra_fail(err, "%s: block_count %" PRId64 " is out of range", g->what,
                          c->n_layers);
    int64_t last = c->n_layers - 1, kv_full = c->n_kv_heads, ffn_last = c->ffn_dim;
    if (cfg_gguf_int_at(g, "attention.head_count_kv", 1, 0, last, &kv_full, err) ||
        cfg_gguf_int_at(g, "feed_forward_length", 1, 1, last, &ffn_last, err))
        return -1;
    char name[64];
    snprintf(name, sizeof name, "blk.%" PRId64 ".attn_v.weight", last);
    c->attn_k_eq_v = g->f->n_tensors > 0 && gguf_find_tensor(g->f, "blk.0.attn_q.weight") &&
                     !gguf_find_tensor(g->f, name) &&
                     config_layer_kv_source(c, last) == last;
    if (kv_full != c->n_kv_heads) {
        c->n_kv_heads_full = kv_full;
        c->attn_k_eq_v = 1;
    }
    c->double_wide_ffn = ffn_last != c->ffn_dim;
    if (c->double_wide_ffn && ffn_last != 2 * c->ffn_dim)
        return memra_fail(err, "%s: feed_forward_length: %" PRId64 " on the last layer, %" PRId64
                          " on the first (memra reads only a doubled width on the shared layers)",
                          g->what, ffn_last, c->ffn_dim);
    return 0;
}

static void gemma4_gguf_write(const model_config *c, const char *arch, gguf_writer *w)
{
    char key[160];
    int64_t n = c->n_layers;
    uint32_t *ffn = xmalloc((size_t)n * sizeof *ffn), *kv = xmalloc((size_t)n * sizeof *kv);
    uint8_t *sl = xmalloc((size_t)n);
    for (int64_t l = 0; l < n; l++) {
        ffn[l] = (uint32_t)config_layer_ffn_dim(c, l);
        kv[l] = (uint32_t)config_layer_kv_heads(c, l);
        sl[l] = !config_layer_full(c, l);
    }
    snprintf(key, sizeof key, "%s.feed_forward_length", arch);
    if (c->double_wide_ffn && c->n_kv_shared > 0)
        gguf_writer_set_arr(w, key, GGUF_UINT32, (uint64_t)n, ffn);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    if (c->n_kv_heads_full > 0)
        gguf_writer_set_arr(w, key, GGUF_UINT32, (uint64_t)n, kv);
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    gguf_writer_set_arr(w, key, GGUF_BOOL, (uint64_t)n, sl);
    free(ffn);
    free(kv);
    free(sl);
    cfg_gguf_set_u32(w, arch, "attention.key_length", c->head_dim_full);
    cfg_gguf_set_u32(w, arch, "attention.value_length", c->head_dim_full);
    cfg_gguf_set_u32(w, arch, "attention.key_length_swa", c->head_dim);
    cfg_gguf_set_u32(w, arch, "attention.value_length_swa", c->head_dim);
    cfg_gguf_set_u32(w, arch, "rope.dimension_count", c->head_dim_full);
    cfg_gguf_set_u32(w, arch, "rope.dimension_count_swa", c->head_dim);
    cfg_gguf_set_f32(w, arch, "rope.freq_base_swa", c->rope_local_theta);
    cfg_gguf_set_u32(w, arch, "attention.sliding_window", c->sliding_window);
    cfg_gguf_set_u32(w, arch, "attention.shared_kv_layers", c->n_kv_shared);
    cfg_gguf_set_u32(w, arch, "embedding_length_per_layer_input", c->ple_dim);
    if (c->final_softcap > 0)
        cfg_gguf_set_f32(w, arch, "final_logit_softcapping", c->final_softcap);
    if (c->moe_with_dense) {
        cfg_gguf_set_u32(w, arch, "expert_count", c->n_experts);
        cfg_gguf_set_u32(w, arch, "expert_used_count", c->n_experts_used);
        cfg_gguf_set_u32(w, arch, "expert_feed_forward_length", c->moe_ffn_dim);
    }
}

/* ---- the assistant (gemma4_assistant) ----
 *
 * Gemma4AssistantForCausalLM: a small gemma4_text stack that drafts for a
 * Gemma 4 model. Its layers compute q alone and attend over the model's
 * K/V (the last layer of each kind that computes any); its input is
 * pre_projection([embedding of the newest token | the model's final-normed
 * hidden state]), its output head the tied embedding, and post_projection
 * of its final-normed output is the hidden state the next draft reads
 * (model_forward_assistant). transformers forces every layer to share
 * K/V (num_kv_shared_layers = num_hidden_layers) and refuses per-layer
 * inputs, MoE and the double-wide MLP. The centroid head
 * (use_ordered_embeddings) ranks tokens by 32 of 2048 clusters; memra
 * reads its tensors but drafts from the whole head, as llama.cpp does. */

static int gemma4_assistant_read(const json_t *cfg, const char *what, model_config *c,
                                 memra_err *err)
{
    c->backbone_dim = 1536;
    int64_t centroids = 2048, top_k = 32;
    int tie = 1;
    if (json_get_int(cfg, "backbone_hidden_size", 0, &c->backbone_dim, what, err) ||
        json_get_bool(cfg, "use_ordered_embeddings", 0, &c->ordered_embeddings, what, err) ||
        json_get_int(cfg, "num_centroids", 0, &centroids, what, err) ||
        json_get_int(cfg, "centroid_intermediate_top_k", 0, &top_k, what, err) ||
        json_get_bool(cfg, "tie_word_embeddings", 0, &tie, what, err))
        return -1;
    if (config_size_ok(what, "backbone_hidden_size", c->backbone_dim, CONFIG_MAX_SIZE, err))
        return -1;
    if (!tie)
        return memra_fail(err, "%s: tie_word_embeddings false is not supported for "
                          "gemma4_assistant (its head is the tied embedding)", what);
    c->tie_embeddings = 1;
    /* Gemma4AssistantConfig: every layer reads the model's K/V */
    if (c->n_kv_shared == 0)
        c->n_kv_shared = c->n_layers;
    return 0;
}

static void gemma4_assistant_write(const model_config *c, json_t *o)
{
    config_json_set_int(o, "backbone_hidden_size", c->backbone_dim);
    json_object_set_new(o, "use_ordered_embeddings", json_boolean(c->ordered_embeddings));
    json_object_set_new(o, "tie_word_embeddings", json_true());
}

static int gemma4_assistant_validate(const model_config *c, const char *what, memra_err *err)
{
    if (c->n_kv_shared != c->n_layers)
        return memra_fail(err, "%s: num_kv_shared_layers %" PRId64 " must be num_hidden_layers "
                          "(%" PRId64 "): a gemma4_assistant's layers read the model's K/V",
                          what, c->n_kv_shared, c->n_layers);
    if (c->ple_dim > 0 || c->moe_with_dense || c->double_wide_ffn)
        return memra_fail(err, "%s: a gemma4_assistant has no per-layer inputs, MoE block or "
                          "double-wide MLP (hidden_size_per_layer_input 0, enable_moe_block "
                          "and use_double_wide_mlp false)", what);
    return 0;
}

static int gemma4_validate(const model_config *c, const char *what, memra_err *err)
{
    if (config_size_ok(what, "global_head_dim", c->head_dim_full, CONFIG_MAX_SIZE, err) ||
        config_size_ok(what, "sliding_window_pattern", c->sliding_window_pattern,
                       CONFIG_MAX_LAYERS + 1, err) ||
        config_finite_pos(what, "rope_parameters.sliding_attention.rope_theta",
                          c->rope_local_theta, err))
        return -1;
    if (c->attn_bias)
        return memra_fail(err, "%s: attention_bias true is not supported for gemma4", what);
    if (c->moe_with_dense &&
        (config_size_ok(what, "num_experts", c->n_experts, CONFIG_MAX_EXPERTS, err) ||
         config_size_ok(what, "top_k_experts", c->n_experts_used, CONFIG_MAX_EXPERTS, err) ||
         config_size_ok(what, "moe_intermediate_size", c->moe_ffn_dim, CONFIG_MAX_SIZE, err) ||
         config_elems_ok(what, "experts",
                         (double)c->n_experts * (double)c->moe_ffn_dim * (double)c->dim * 3.0,
                         err)))
        return -1;
    if (c->moe_with_dense && c->n_experts_used > c->n_experts)
        return memra_fail(err, "%s: top_k_experts %" PRId64 " is more than num_experts %" PRId64,
                          what, c->n_experts_used, c->n_experts);
    if (c->head_dim_full % 2 || c->rope_full_angles < 1 ||
        c->rope_full_angles > c->head_dim_full / 2)
        return memra_fail(err, "%s: RoPE over %" PRId64 " pairs of a %" PRId64 "-dim head is "
                          "out of range", what, c->rope_full_angles, c->head_dim_full);
    if (c->n_kv_heads_full > 0 &&
        (c->n_kv_heads_full > c->n_heads || c->n_heads % c->n_kv_heads_full != 0))
        return memra_fail(err, "%s: num_global_key_value_heads %" PRId64 " does not divide "
                          "num_attention_heads %" PRId64, what, c->n_kv_heads_full, c->n_heads);
    if (config_is_assistant(c))
        return gemma4_assistant_validate(c, what, err);
    if (c->n_kv_shared < 0 || c->n_kv_shared >= c->n_layers)
        return memra_fail(err, "%s: num_kv_shared_layers %" PRId64 " must be below the %" PRId64
                          " layers", what, c->n_kv_shared, c->n_layers);
    for (int64_t l = 0; l < c->n_layers; l++)
        if (config_layer_kv_source(c, l) < 0)
            return memra_fail(err, "%s: layer %" PRId64 " shares K/V, but no earlier layer of "
                              "its kind (%s) computes any", what, l,
                              config_layer_full(c, l) ? "full_attention" : "sliding_attention");
    /* a token past the per-layer table would have no row (transformers'
     * released configs size both tables alike) */
    if (c->ple_dim > 0 && c->ple_vocab < c->n_vocab)
        return memra_fail(err, "%s: vocab_size_per_layer_input %" PRId64 " is below vocab_size "
                          "%" PRId64 " (not supported)", what, c->ple_vocab, c->n_vocab);
    if (c->ple_dim < 0 || c->ple_dim > CONFIG_MAX_SIZE ||
        (c->ple_dim > 0 &&
         (config_size_ok(what, "vocab_size_per_layer_input", c->ple_vocab, CONFIG_MAX_SIZE,
                         err) ||
          config_elems_ok(what, "embed_tokens_per_layer",
                          (double)c->ple_vocab * (double)c->n_layers * (double)c->ple_dim, err))))
        return c->ple_dim < 0 || c->ple_dim > CONFIG_MAX_SIZE
                   ? memra_fail(err, "%s: hidden_size_per_layer_input %" PRId64 " is out of "
                                "range", what, c->ple_dim)
                   : -1;
    return 0;
}

/* ---- tensors ---- */

/* HF's post_attention_layernorm is the norm after attention, as in gemma3. */
static const family_tensor_name gemma4_tensor_names[] = {
    {"rope_freqs.weight", NULL, 1, 0},
    {"per_layer_token_embd.weight", "model.embed_tokens_per_layer.weight", 1, 0},
    {"per_layer_model_proj.weight", "model.per_layer_model_projection.weight", 1, 0},
    {"per_layer_proj_norm.weight", "model.per_layer_projection_norm.weight", 1, 0},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", 0, 0},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", 0, 0},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", 0, 0},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight", 0, 0},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", 0, 0},
    {"ffn_gate.weight", "mlp.gate_proj.weight", 0, 0},
    {"ffn_up.weight", "mlp.up_proj.weight", 0, 0},
    {"ffn_down.weight", "mlp.down_proj.weight", 0, 0},
    {"layer_output_scale.weight", "layer_scalar", 0, 0},
    {"inp_gate.weight", "per_layer_input_gate.weight", 0, 0},
    {"proj.weight", "per_layer_projection.weight", 0, 0},
    {"post_norm.weight", "post_per_layer_input_norm.weight", 0, 0},
    {"nextn.pre_projection.weight", "pre_projection.weight", 1, 0},
    {"nextn.post_projection.weight", "post_projection.weight", 1, 0},
    {"ffn_gate_inp.weight", "router.proj.weight", 0, 0},
    {"ffn_gate_inp.scale", "router.scale", 0, 0},
    {"ffn_down_exps.scale", "router.per_expert_scale", 0, 0},
    {"ffn_gate_up_exps.weight", "experts.gate_up_proj", 0, 0},
    {"ffn_down_exps.weight", "experts.down_proj", 0, 0},
    {"pre_ffw_norm_2.weight", "pre_feedforward_layernorm_2.weight", 0, 0},
    {"post_ffw_norm_1.weight", "post_feedforward_layernorm_1.weight", 0, 0},
    {"post_ffw_norm_2.weight", "post_feedforward_layernorm_2.weight", 0, 0},
};

static const family_hf_prefix gemma4_hf_prefixes[] = {
    {"model.language_model.", "model."},
};

/* The multimodal checkpoints' towers: memra runs the text model. */
static const char *const gemma4_hf_ignored[] = {
    "model.vision_tower.", "model.embed_vision.", "model.audio_tower.", "model.embed_audio.",
    "masked_embedding.", /* an assistant's centroid head */
};

/* llama.cpp's names of the centroid head, which memra does not run. */
static const char *const gemma4_gguf_ignored[] = {
    "masked_embd_centroids.",
    "masked_embd_ordering",
};

static void gemma4_contract(const model_config *c, tensor_contract *k)
{
    int64_t d = c->dim, p = c->ple_dim;
    contract_add_globals(k, c, 0);
    if (config_is_assistant(c)) {
        contract_add_2d(k, ROLE_ASSIST_PRE_PROJ, -1, "nextn.pre_projection.weight", d,
                        2 * c->backbone_dim, 0, 0);
        contract_add_2d(k, ROLE_ASSIST_POST_PROJ, -1, "nextn.post_projection.weight",
                        c->backbone_dim, d, 0, 0);
    }
    if (p > 0) {
        contract_add_2d(k, ROLE_PLE_EMBED, -1, "per_layer_token_embd.weight", c->ple_vocab,
                        c->n_layers * p, 0, 0);
        contract_add_2d(k, ROLE_PLE_PROJ, -1, "per_layer_model_proj.weight", c->n_layers * p, d,
                        0, 0);
        contract_add_1d(k, ROLE_PLE_PROJ_NORM, -1, "per_layer_proj_norm.weight", p, 0, 0);
    }
    /* llama.cpp's form of the proportional RoPE; memra computes it from
     * the config */
    contract_add_1d(k, ROLE_ROPE_FREQS, -1, "rope_freqs.weight", c->head_dim_full / 2,
                    CE_OPTIONAL | CE_GENERATED, 0);
    for (int l = 0; l < c->n_layers; l++) {
        int64_t hd = config_layer_head_dim(c, l), nkv = config_layer_kv_heads(c, l);
        int64_t ffn = config_layer_ffn_dim(c, l);
        /* a layer reading another's K/V has no use for its own projections
         * (transformers ignores them when a checkpoint has them); an
         * assistant's GGUF has none, as llama.cpp's gemma4-assistant
         * loader takes every tensor of a file */
        unsigned kv = config_layer_kv_source(c, l) != l ? CE_OPTIONAL : 0;
        const int kv_none = config_is_assistant(c) && k->naming == CKPT_GGUF;
        contract_add_1d(k, ROLE_ATTN_NORM, l, "attn_norm.weight", d, 0, 0);
        contract_add_2d(k, ROLE_ATTN_Q, l, "attn_q.weight", c->n_heads * hd, d, 0, 0);
        if (!kv_none)
            contract_add_2d(k, ROLE_ATTN_K, l, "attn_k.weight", nkv * hd, d, kv, 0);
        if (!kv_none && !(c->attn_k_eq_v && config_layer_full(c, l)))
            contract_add_2d(k, ROLE_ATTN_V, l, "attn_v.weight", nkv * hd, d, kv, 0);
        contract_add_2d(k, ROLE_ATTN_O, l, "attn_output.weight", d, c->n_heads * hd, 0, 0);
        contract_add_1d(k, ROLE_ATTN_Q_NORM, l, "attn_q_norm.weight", hd, 0, 0);
        if (!kv_none)
            contract_add_1d(k, ROLE_ATTN_K_NORM, l, "attn_k_norm.weight", hd, kv, 0);
        contract_add_1d(k, ROLE_ATTN_POST_NORM, l, "post_attention_norm.weight", d, 0, 0);
        contract_add_1d(k, ROLE_FFN_NORM, l, "ffn_norm.weight", d, 0, 0);
        contract_add_2d(k, ROLE_FFN_GATE, l, "ffn_gate.weight", ffn, d, 0, 0);
        contract_add_2d(k, ROLE_FFN_UP, l, "ffn_up.weight", ffn, d, 0, 0);
        contract_add_2d(k, ROLE_FFN_DOWN, l, "ffn_down.weight", d, ffn, 0, 0);
        contract_add_1d(k, ROLE_FFN_POST_NORM, l, "post_ffw_norm.weight", d, 0, 0);
        contract_add_1d(k, ROLE_LAYER_SCALE, l, "layer_output_scale.weight", 1, 0, 0);
        if (c->moe_with_dense) {
            int64_t ne = c->n_experts, mf = c->moe_ffn_dim;
            contract_add_2d(k, ROLE_MOE_ROUTER, l, "ffn_gate_inp.weight", ne, d, 0, 0);
            contract_add_1d(k, ROLE_MOE_ROUTER_SCALE, l, "ffn_gate_inp.scale", d, 0, 0);
            contract_add_1d(k, ROLE_MOE_EXPERT_SCALE, l, "ffn_down_exps.scale", ne, 0, 0);
            contract_add_3d(k, ROLE_MOE_GATE_UP_STACK, l, "ffn_gate_up_exps.weight", ne, 2 * mf,
                            d);
            contract_add_3d(k, ROLE_MOE_DOWN_STACK, l, "ffn_down_exps.weight", ne, d, mf);
            contract_add_1d(k, ROLE_FFN_PRE_NORM_2, l, "pre_ffw_norm_2.weight", d, 0, 0);
            contract_add_1d(k, ROLE_FFN_POST_NORM_1, l, "post_ffw_norm_1.weight", d, 0, 0);
            contract_add_1d(k, ROLE_FFN_POST_NORM_2, l, "post_ffw_norm_2.weight", d, 0, 0);
        }
        if (p > 0) {
            contract_add_2d(k, ROLE_PLE_GATE, l, "inp_gate.weight", p, d, 0, 0);
            contract_add_2d(k, ROLE_PLE_OUT, l, "proj.weight", d, p, 0, 0);
            contract_add_1d(k, ROLE_PLE_POST_NORM, l, "post_norm.weight", d, 0, 0);
        }
    }
}

/* rope_freqs.weight as llama.cpp's converter writes it: the full layers'
 * frequency factors, 1 where a pair turns and 1e30 (which stops it) where
 * it does not. */
static int gemma4_rope_freqs(const model_config *c, float *out)
{
    if (out)
        for (int64_t i = 0; i < c->head_dim_full / 2; i++)
            out[i] = i < c->rope_full_angles ? 1.0f : 1e30f;
    return 1;
}

/* ---- forward ---- */

/* Layer l attends unscaled (q and k are RMS-normed per head), in a window
 * on the sliding layers, with the layer kind's head size, KV heads, RoPE
 * table and K/V (a shared layer reads its source's; model.c maps the
 * source to its KV index). */
static void gemma4_layer_attention(const model_config *c, int l, bk_attn *a, int *local_rope)
{
    int full = config_layer_full(c, l);
    a->scale = 1.0f;
    a->softcap = 0.0f;
    a->head_dim = (int)config_layer_head_dim(c, l);
    a->n_kv_heads = (int)config_layer_kv_heads(c, l);
    a->window = full ? 0 : c->sliding_window;
    *local_rope = !full;
}

/* As transformers' Gemma4TextModel / Gemma4TextDecoderLayer:
 *
 *   x = embed(tokens) * sqrt(dim)
 *   ple = (rmsnorm(x . W_ple_proj^T * dim^-1/2) + ple_embed(tokens) * sqrt(ple_dim)) * 2^-1/2
 *   per layer:  x += post_attn_norm(attn(input_norm(x)))
 *               x += post_ffn_norm(down(gelu_tanh(gate(h)) * up(h))),  h = pre_ffn_norm(x)
 *                   (MoE: x += post_ffn_norm(post_ffn_norm_1(dense) + post_ffn_norm_2(experts)),
 *                    the experts on pre_ffn_norm_2(x), routed on the normed, scaled x)
 *               x += post_norm(proj(gelu_tanh(inp_gate(x)) * ple[layer]))
 *               x *= layer_scalar
 *
 * The attention sublayer (model_attention) RMS-normalizes V, takes V from
 * the K projection on the k_eq_v layers, and computes q alone on the
 * layers that share K/V. The final logit soft-cap is model_forward's. */
/* Layer l on state.x (the per-layer inputs already in state.ple_mix). */
static void gemma4_layer(model *m, int l, const bk_batch *rows)
{
    const backend_ops *op = m->bk->ops;
    const model_config *c = &m->config;
    run_state *s = &m->state;
    const layer_weights *w = &m->weights.layers[l];
    int n = rows->n;
    size_t nd = (size_t)n * (size_t)c->dim;
    float eps = m->norm_eps;
    int64_t p = c->ple_dim, lp = c->n_layers * p;
    model_report_hidden(m, l, rows, s->x);
    op->rmsnorm(m->bk, s->x, n, &w->attn_norm, 0.0f, eps, s->xb);
    model_attention(m, l, rows, s->xb, s->xb2);
    op->rmsnorm(m->bk, s->xb2, n, &w->attn_post_norm, 0.0f, eps, s->xb);
    op->add(m->bk, s->x, s->xb, nd);
    op->rmsnorm(m->bk, s->x, n, &w->ffn_norm, 0.0f, eps, s->xb);
    op->ffn_glu(m->bk, &w->ffn_gate, &w->ffn_up, &w->ffn_down, m->act, s->xb, n, s->hb, s->hb2,
                s->xb2);
    if (c->moe_with_dense) {
        op->rmsnorm(m->bk, s->xb2, n, &w->ffn_post_norm_1, 0.0f, eps, s->moe_out);
        op->rmsnorm(m->bk, s->x, n, &w->moe_router_scale, 0.0f, eps, s->moe_router_in);
        op->scale(m->bk, s->moe_router_in, nd, (float)pow((double)c->dim, -0.5));
        op->rmsnorm(m->bk, s->x, n, &w->ffn_pre_norm_2, 0.0f, eps, s->xb);
        model_moe_ffn_routed(m, l, n, s->xb, s->moe_router_in, s->xb2);
        op->rmsnorm(m->bk, s->xb2, n, &w->ffn_post_norm_2, 0.0f, eps, s->xb);
        op->add(m->bk, s->xb, s->moe_out, nd);
        op->rmsnorm(m->bk, s->xb, n, &w->ffn_post_norm, 0.0f, eps, s->xb2);
        op->add(m->bk, s->x, s->xb2, nd);
    } else {
        op->rmsnorm(m->bk, s->xb2, n, &w->ffn_post_norm, 0.0f, eps, s->xb);
        op->add(m->bk, s->x, s->xb, nd);
    }
    if (p > 0) {
        op->matmul(m->bk, &w->ple_gate, NULL, s->x, n, s->ple_gate);
        op->act_mul(m->bk, s->ple_gate, s->ple_mix + (size_t)l * (size_t)p, n, p, lp, m->act);
        op->matmul(m->bk, &w->ple_out, NULL, s->ple_gate, n, s->xb2);
        op->rmsnorm(m->bk, s->xb2, n, &w->ple_post_norm, 0.0f, eps, s->xb);
        op->add(m->bk, s->x, s->xb, nd);
    }
    op->scale(m->bk, s->x, nd, w->layer_scale);
}

static void gemma4_forward(model *m, const bk_batch *rows, const int32_t *tokens)
{
    const backend_ops *op = m->bk->ops;
    const model_config *c = &m->config;
    const model_weights *mw = &m->weights;
    run_state *s = &m->state;
    int n = rows->n;
    float eps = m->norm_eps;
    int64_t p = c->ple_dim, lp = c->n_layers * p;
    /* a pipeline's later stages start from the stream (model_init keeps
     * a model with per-layer inputs on one stage) */
    if (m->layer_begin > 0) {
        for (int l = m->layer_begin; l < m->layer_end; l++)
            gemma4_layer(m, l, rows);
        return;
    }
    op->embed(m->bk, &mw->embed, tokens, n, m->embed_scale, s->x);
    if (p > 0) {
        op->embed(m->bk, &mw->ple_embed, tokens, n, (float)sqrt((double)p), s->ple);
        op->matmul(m->bk, &mw->ple_proj, NULL, s->x, n, s->ple_mix);
        op->scale(m->bk, s->ple_mix, (size_t)n * (size_t)lp, (float)pow((double)c->dim, -0.5));
        op->rmsnorm(m->bk, s->ple_mix, n * (int)c->n_layers, &mw->ple_proj_norm, 0.0f, eps,
                    s->ple_mix);
        op->add(m->bk, s->ple_mix, s->ple, (size_t)n * (size_t)lp);
        op->scale(m->bk, s->ple_mix, (size_t)n * (size_t)lp, (float)pow(2.0, -0.5));
    }
    for (int l = 0; l < m->layer_end; l++)
        gemma4_layer(m, l, rows);
}

const model_family_desc family_gemma4 = {
    .id = FAMILY_GEMMA4,
    .name = "gemma4",
    .gguf_arch = "gemma4",
    .hf_types = gemma4_hf_types,
    .n_hf_types = MEMRA_ARRAY_LEN(gemma4_hf_types),
    .hf_wrapper_type = "gemma4",
    .hf_assistant_type = "gemma4_assistant",
    .hf_assistant_architecture = "Gemma4AssistantForCausalLM",
    .gguf_assistant_arch = "gemma4-assistant",
    .hf_assistant_read = gemma4_assistant_read,
    .hf_assistant_write = gemma4_assistant_write,
    .hf_act_key = "hidden_activation",
    .hf_act = "gelu_pytorch_tanh",
    .hf_read = gemma4_hf_read,
    .hf_write = gemma4_hf_write,
    .gguf_read = gemma4_gguf_read,
    .gguf_write = gemma4_gguf_write,
    .validate = gemma4_validate,
    .qk_norm = 1,
    .sliding_pattern = 1,
    .own_rope_parameters = 1,
    .gguf_per_layer_keys = 1,
    .contract = gemma4_contract,
    .tensor_names = gemma4_tensor_names,
    .n_tensor_names = MEMRA_ARRAY_LEN(gemma4_tensor_names),
    .hf_prefixes = gemma4_hf_prefixes,
    .n_hf_prefixes = MEMRA_ARRAY_LEN(gemma4_hf_prefixes),
    .hf_ignored = gemma4_hf_ignored,
    .n_hf_ignored = MEMRA_ARRAY_LEN(gemma4_hf_ignored),
    .gguf_ignored = gemma4_gguf_ignored,
    .n_gguf_ignored = MEMRA_ARRAY_LEN(gemma4_gguf_ignored),
    .forward = gemma4_forward,
    .layer = gemma4_layer,
    .act = BK_ACT_GELU_TANH,
    .embed_scale_sqrt_dim = 1,
    .layer_attention = gemma4_layer_attention,
    .gguf_rope_freqs = gemma4_rope_freqs,
    .v_norm = 1,
};
