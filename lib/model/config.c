/* The normalized model config, read from an HF config.json or GGUF metadata
 * and written back to either.
 *
 * The shared keys are read here; a family's own keys, defaults and checks
 * are in its file, reached through its descriptor (family.h).
 *
 * HF: each model_type reads the keys its transformers configuration class
 * reads, with that class's defaults, except that the keys fixing the tensor
 * shapes (hidden_size, num_hidden_layers, intermediate_size,
 * num_attention_heads, vocab_size; num_experts, num_experts_per_tok and
 * moe_intermediate_size for MoE) are required: a config that leaves them out
 * almost certainly is not the checkpoint's, and transformers' defaults are
 * just some model's sizes. gemma3 is the exception: Google's own gemma-3-4b+
 * text_config omits num_attention_heads, num_key_value_heads, head_dim and
 * vocab_size and relies on Gemma3TextConfig's defaults, so those do too.
 * Features we cannot run (an unknown rope type, qwen's use_sliding_window,
 * llama's mlp_bias, a non-SiLU/GELU activation, MoE layers that are not all
 * sparse) are errors, never silently dropped.
 *
 * GGUF: the llama.cpp keys ({arch}.embedding_length ...). Values llama.cpp
 * does not store, or stores somewhere we cannot read back, go into memra.*
 * keys, which other readers ignore:
 *   memra.hf.model_type, memra.hf.architecture  (mistral is GGUF "llama")
 *   memra.tie_word_embeddings, memra.attention.bias (llama.cpp infers both
 *       from which tensors exist; we read the tensors when the keys are absent)
 *   memra.attention.sliding_window_pattern, memra.attention.query_pre_attn_scalar
 *       (gemma3: llama.cpp hard-codes 6 and derives the scale from the model size)
 *   memra.rope.scaling.{type,factor,low_freq_factor,high_freq_factor,
 *       original_context_length} for llama3 rope scaling.
 *
 * Floats: GGUF stores f32; we read an f32 back as the shortest decimal that
 * rounds to it (1e-05, not 9.99999975e-06), which is what config.json said,
 * so HF -> GGUF -> config round trips are exact for real configs.
 *
 * YaRN: rope_scaling.attn_factor is HF's attention_factor, the total factor
 * on cos/sin (default 0.1*ln(factor)+1). ggml multiplies that default in
 * itself, so GGUF's rope.scaling.yarn_attn_factor holds attn_factor divided
 * by it and is written only when it is not 1. */
#include "model/config.h"

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json.h"
#include "model/config_keys.h"
#include "model/family.h"

static double yarn_mscale(double factor, double mscale)
{
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* ---- sanity, shared by both readers ---- */

/* Every size positive and plausible, heads divisible, rope parameters
 * usable. `what` names the source (file, and the key spelling it uses is
 * the HF one since that is what people read). */
static int config_validate(const model_config *c, const char *what, memra_err *err)
{
    if (config_size_ok(what, "vocab_size", c->n_vocab, CONFIG_MAX_SIZE, err) ||
        config_size_ok(what, "hidden_size", c->dim, CONFIG_MAX_SIZE, err) ||
        config_size_ok(what, "num_hidden_layers", c->n_layers, CONFIG_MAX_LAYERS, err) ||
        config_size_ok(what, "num_attention_heads", c->n_heads, CONFIG_MAX_SIZE, err) ||
        config_size_ok(what, "num_key_value_heads", c->n_kv_heads, CONFIG_MAX_SIZE, err) ||
        config_size_ok(what, "head_dim", c->head_dim, CONFIG_MAX_SIZE, err) ||
        (!family_desc(c->family)->no_dense_ffn &&
         config_size_ok(what, "intermediate_size", c->ffn_dim, CONFIG_MAX_SIZE, err)) ||
        config_size_ok(what, "max_position_embeddings", c->n_ctx_train, CONFIG_MAX_CTX, err))
        return -1;
    if (c->n_heads % c->n_kv_heads != 0)
        return memra_fail(err,
                          "%s: num_attention_heads %" PRId64
                          " is not a multiple of num_key_value_heads %" PRId64,
                          what, c->n_heads, c->n_kv_heads);
    if (c->head_dim % 2 != 0)
        return memra_fail(err, "%s: head_dim %" PRId64 " must be even for RoPE", what,
                          c->head_dim);
    double d = (double)c->dim;
    if (config_elems_ok(what, "embedding", (double)c->n_vocab * d, err) ||
        config_elems_ok(what, "attention", (double)c->n_heads * (double)c->head_dim * d, err) ||
        config_elems_ok(what, "ffn", (double)c->ffn_dim * d, err))
        return -1;
    if (!isfinite(c->norm_eps) || c->norm_eps <= 0 || c->norm_eps >= 1)
        return memra_fail(err, "%s: rms_norm_eps %g is not in (0, 1)", what, c->norm_eps);
    if (config_finite_pos(what, "rope_theta", c->rope_theta, err))
        return -1;
    switch (c->rope_scaling.kind) {
    case ROPE_SCALING_NONE:
        break;
    case ROPE_SCALING_LINEAR:
        if (config_finite_pos(what, "rope_scaling.factor", c->rope_scaling.factor, err))
            return -1;
        break;
    case ROPE_SCALING_LLAMA3:
        if (config_finite_pos(what, "rope_scaling.factor", c->rope_scaling.factor, err) ||
            config_finite_pos(what, "rope_scaling.low_freq_factor",
                              c->rope_scaling.low_freq_factor, err) ||
            config_finite_pos(what, "rope_scaling.high_freq_factor",
                              c->rope_scaling.high_freq_factor, err) ||
            config_size_ok(what, "rope_scaling.original_max_position_embeddings",
                           c->rope_scaling.original_ctx, CONFIG_MAX_CTX, err))
            return -1;
        if (!(c->rope_scaling.low_freq_factor < c->rope_scaling.high_freq_factor))
            return memra_fail(err,
                              "%s: rope_scaling.low_freq_factor %g must be below "
                              "high_freq_factor %g",
                              what, c->rope_scaling.low_freq_factor,
                              c->rope_scaling.high_freq_factor);
        break;
    case ROPE_SCALING_YARN:
        if (config_finite_pos(what, "rope_scaling.factor", c->rope_scaling.factor, err) ||
            config_finite_pos(what, "rope_scaling.beta_fast", c->rope_scaling.beta_fast, err) ||
            config_finite_pos(what, "rope_scaling.beta_slow", c->rope_scaling.beta_slow, err) ||
            config_finite_pos(what, "rope_scaling.attention_factor",
                              c->rope_scaling.attn_factor, err) ||
            config_size_ok(what, "rope_scaling.original_max_position_embeddings",
                           c->rope_scaling.original_ctx, CONFIG_MAX_CTX, err))
            return -1;
        break;
    default:
        return memra_fail(err, "%s: unknown rope scaling kind %d", what,
                          (int)c->rope_scaling.kind);
    }
    const model_family_desc *fam = family_desc(c->family);
    if (c->rope_dim && (!fam->partial_rope || c->rope_dim < 2 || c->rope_dim % 2 ||
                        c->rope_dim > c->head_dim))
        return memra_fail(err, "%s: RoPE over %" PRId64 " of %" PRId64 " head dims (partial "
                          "rotary) is not supported for %s", what, c->rope_dim, c->head_dim,
                          fam->name);
    if (fam->validate && fam->validate(c, what, err) != 0)
        return -1;
    if (c->sliding_window < 0 || c->sliding_window > CONFIG_MAX_CTX)
        return memra_fail(err, "%s: sliding_window %" PRId64 " is out of range", what,
                          c->sliding_window);
    if (!isfinite(c->attn_softcap) || c->attn_softcap < 0 || !isfinite(c->final_softcap) ||
        c->final_softcap < 0)
        return memra_fail(err, "%s: logit softcapping must be a non-negative number", what);
    if (c->bos_id < -1 || c->bos_id >= c->n_vocab)
        return memra_fail(err, "%s: bos_token_id %" PRId64 " is outside the vocab of %" PRId64,
                          what, c->bos_id, c->n_vocab);
    if (c->eos_id < -1 || c->eos_id >= c->n_vocab)
        return memra_fail(err, "%s: eos_token_id %" PRId64 " is outside the vocab of %" PRId64,
                          what, c->eos_id, c->n_vocab);
    return 0;
}

/* ---- HF config.json ---- */

static int copy_name(char *dst, size_t n, const char *src, const char *what, const char *key,
                     memra_err *err)
{
    size_t len = strlen(src);
    if (len >= n)
        return memra_fail(err, "%s: %s \"%s\" is too long (%zu bytes, limit %zu)", what, key, src,
                          len, n - 1);
    memcpy(dst, src, len + 1);
    return 0;
}

/* bos_token_id / eos_token_id: an integer, null, or a list of integers of
 * which we keep the first (generation_config / the tokenizer carry the full
 * stop list; instruct models list several eos ids). *found says whether the
 * key was there at all. */
static int read_token_id(const json_t *obj, const char *key, int64_t *out, int *found,
                         const char *what, memra_err *err)
{
    json_t *v = json_object_get(obj, key);
    *found = v != NULL;
    if (!v)
        return 0;
    if (json_is_null(v)) {
        *out = -1;
        return 0;
    }
    if (json_is_array(v)) {
        if (json_array_size(v) == 0) {
            *out = -1;
            return 0;
        }
        v = json_array_get(v, 0);
    }
    if (!json_is_integer(v))
        return memra_fail(err, "%s: key \"%s\" must be an integer or a list of integers", what,
                          key);
    *out = json_integer_value(v);
    return 0;
}

static int check_act(const json_t *obj, const char *key, const char *want, const char *what,
                     memra_err *err)
{
    const char *act = NULL;
    if (json_get_str(obj, key, 0, &act, what, err) != 0)
        return -1;
    if (act && strcmp(act, want) != 0)
        return memra_fail(err, "%s: %s \"%s\" is not supported (this family uses \"%s\")", what,
                          key, act, want);
    return 0;
}

/* rope_scaling (or a transformers v5 rope_parameters entry): type linear,
 * llama3 or yarn; "default" means none. */
static int read_rope_scaling(const json_t *rs, const char *what, model_config *c, memra_err *err)
{
    char rwhat[800];
    snprintf(rwhat, sizeof rwhat, "%.700s: rope_scaling", what);
    if (!rs || json_is_null(rs))
        return 0;
    if (!json_is_object(rs))
        return memra_fail(err, "%s must be an object or null", rwhat);
    const char *type = NULL;
    if (json_get_str(rs, "rope_type", 0, &type, rwhat, err) != 0)
        return -1;
    if (!type && json_get_str(rs, "type", 0, &type, rwhat, err) != 0)
        return -1;
    if (!type)
        return memra_fail(err, "%s has neither \"rope_type\" nor \"type\"", rwhat);
    if (strcmp(type, "default") == 0)
        return 0;
    if (json_get_num(rs, "factor", 1, &c->rope_scaling.factor, rwhat, err) != 0)
        return -1;
    if (strcmp(type, "linear") == 0) {
        c->rope_scaling.kind = ROPE_SCALING_LINEAR;
        return 0;
    }
    if (strcmp(type, "llama3") == 0) {
        c->rope_scaling.kind = ROPE_SCALING_LLAMA3;
        if (json_get_num(rs, "low_freq_factor", 1, &c->rope_scaling.low_freq_factor, rwhat,
                         err) ||
            json_get_num(rs, "high_freq_factor", 1, &c->rope_scaling.high_freq_factor, rwhat,
                         err) ||
            json_get_int(rs, "original_max_position_embeddings", 1, &c->rope_scaling.original_ctx,
                         rwhat, err))
            return -1;
        return 0;
    }
    if (strcmp(type, "yarn") == 0) {
        c->rope_scaling.kind = ROPE_SCALING_YARN;
        c->rope_scaling.original_ctx = c->n_ctx_train;
        c->rope_scaling.beta_fast = 32;
        c->rope_scaling.beta_slow = 1;
        double af = 0, mscale = 0, mscale_all = 0;
        int truncate = 1;
        if (json_get_int(rs, "original_max_position_embeddings", 0, &c->rope_scaling.original_ctx,
                         rwhat, err) ||
            json_get_num(rs, "beta_fast", 0, &c->rope_scaling.beta_fast, rwhat, err) ||
            json_get_num(rs, "beta_slow", 0, &c->rope_scaling.beta_slow, rwhat, err) ||
            json_get_num(rs, "attention_factor", 0, &af, rwhat, err) ||
            json_get_num(rs, "mscale", 0, &mscale, rwhat, err) ||
            json_get_num(rs, "mscale_all_dim", 0, &mscale_all, rwhat, err) ||
            json_get_bool(rs, "truncate", 0, &truncate, rwhat, err))
            return -1;
        if (!truncate)
            return memra_fail(err, "%s: \"truncate\": false is not supported", rwhat);
        double f = c->rope_scaling.factor;
        if (af > 0)
            c->rope_scaling.attn_factor = af;
        else if (mscale > 0 && mscale_all > 0)
            c->rope_scaling.attn_factor = yarn_mscale(f, mscale) / yarn_mscale(f, mscale_all);
        else
            c->rope_scaling.attn_factor = yarn_mscale(f, 1.0);
        return 0;
    }
    return memra_fail(err, "%s: type \"%s\" is not supported (supported: linear, llama3, yarn)",
                      rwhat, type);
}

/* transformers v5 configs carry rope_theta and the scaling in
 * rope_parameters (per layer type for gemma3) instead of rope_theta /
 * rope_scaling; read them when the v4 keys are absent. */
static int read_rope_parameters(const json_t *obj, const char *what, model_config *c,
                                int have_theta, int have_scaling, memra_err *err)
{
    json_t *rp = json_object_get(obj, "rope_parameters");
    if (!rp || json_is_null(rp) || family_desc(c->family)->own_rope_parameters)
        return 0;
    if (!json_is_object(rp))
        return memra_fail(err, "%s: rope_parameters must be an object", what);
    char rwhat[800];
    snprintf(rwhat, sizeof rwhat, "%.700s: rope_parameters", what);
    json_t *full = json_object_get(rp, "full_attention");
    json_t *sliding = json_object_get(rp, "sliding_attention");
    if (full || sliding) {
        if (!family_desc(c->family)->sliding_pattern) {
            char fams[128];
            family_list_sliding_pattern(fams, sizeof fams);
            return memra_fail(err, "%s: per-layer-type rope parameters are only supported for "
                              "%s", rwhat, fams);
        }
        int have_local = json_object_get(obj, "rope_local_base_freq") != NULL;
        if (sliding && !have_local &&
            json_get_num(sliding, "rope_theta", 0, &c->rope_local_theta, rwhat, err) != 0)
            return -1;
        rp = full;
        if (!rp)
            return 0;
        if (!json_is_object(rp))
            return memra_fail(err, "%s: full_attention must be an object", rwhat);
    }
    if (!have_theta && json_get_num(rp, "rope_theta", 0, &c->rope_theta, rwhat, err) != 0)
        return -1;
    if (!have_scaling && read_rope_scaling(rp, what, c, err) != 0)
        return -1;
    return 0;
}

static int from_hf(const json_t *cfg, const char *what, int validate, model_config *out,
                   memra_err *err);

/* A drafter checkpoint (family.h's hf_assistant_type): its text_config is
 * the family's config, the top level the drafter's own keys. */
static int assistant_from_hf(const json_t *cfg, const model_family_desc *fam, const char *mt,
                             const char *what, model_config *out, memra_err *err)
{
    const json_t *text = json_object_get(cfg, "text_config");
    if (!json_is_object(text))
        return memra_fail(err, "%s: model_type \"%s\" needs a \"text_config\" object", what,
                          mt);
    char twhat[600];
    snprintf(twhat, sizeof twhat, "%.580s: text_config", what);
    model_config c;
    if (from_hf(text, twhat, 0, &c, err) != 0)
        return -1;
    if (c.family != fam->id)
        return memra_fail(err, "%s: model_type \"%s\" where \"%s\" was expected", twhat,
                          c.hf_model_type, fam->hf_types[0].model_type);
    if (fam->hf_assistant_read(cfg, what, &c, err) != 0)
        return -1;
    const char *arch = NULL;
    json_t *archs = json_object_get(cfg, "architectures");
    if (json_is_array(archs) && json_is_string(json_array_get(archs, 0)))
        arch = json_string_value(json_array_get(archs, 0));
    if (copy_name(c.hf_model_type, sizeof c.hf_model_type, mt, what, "model_type", err) ||
        (arch && copy_name(c.hf_architecture, sizeof c.hf_architecture, arch, what,
                           "architectures[0]", err)))
        return -1;
    if (config_validate(&c, what, err) != 0)
        return -1;
    *out = c;
    return 0;
}

int config_from_hf(const json_t *cfg, const char *what, model_config *out, memra_err *err)
{
    return from_hf(cfg, what, 1, out, err);
}

static int from_hf(const json_t *cfg, const char *what, int validate, model_config *out,
                   memra_err *err)
{
    model_config c;
    memset(&c, 0, sizeof c);
    memset(out, 0, sizeof *out);
    if (!json_is_object(cfg))
        return memra_fail(err, "%s: the config is not a JSON object", what);
    const char *mt;
    if (json_get_str(cfg, "model_type", 1, &mt, what, err) != 0)
        return -1;
    const model_family_desc *assist = family_by_hf_assistant(mt);
    if (assist)
        return assistant_from_hf(cfg, assist, mt, what, out, err);
    const json_t *obj = cfg;
    char twhat[600];
    const model_family_desc *wrapped = family_by_hf_wrapper(mt);
    if (wrapped) {
        /* A multimodal wrapper (gemma-3 4b and up): its text model is what
         * we run. */
        const char *inner = wrapped->hf_types[0].model_type;
        obj = json_object_get(cfg, "text_config");
        if (!json_is_object(obj))
            return memra_fail(err, "%s: model_type \"%s\" needs a \"text_config\" object",
                              what, mt);
        snprintf(twhat, sizeof twhat, "%.580s: text_config", what);
        what = twhat;
        const char *tmt = inner;
        if (json_get_str(obj, "model_type", 0, &tmt, what, err) != 0)
            return -1;
        if (strcmp(tmt, inner) != 0)
            return memra_fail(err, "%s: model_type \"%s\" where \"%s\" was expected", what,
                              tmt, inner);
        mt = inner;
    }
    const family_hf_type *ht = NULL;
    const model_family_desc *fam = family_by_hf_type(mt, &ht);
    if (!fam) {
        char supported[256];
        family_list_hf_types(supported, sizeof supported);
        return memra_fail(err, "%s: unsupported model_type \"%s\" (supported: %s)", what, mt,
                          supported);
    }
    c.family = fam->id;
    if (copy_name(c.hf_model_type, sizeof c.hf_model_type, ht->model_type, what, "model_type",
                  err))
        return -1;
    /* A multimodal wrapper is normalized to its text model. */
    const char *arch = ht->architecture;
    json_t *archs = json_object_get(cfg, "architectures");
    if (obj == cfg && json_is_array(archs) && json_is_string(json_array_get(archs, 0)))
        arch = json_string_value(json_array_get(archs, 0));
    if (copy_name(c.hf_architecture, sizeof c.hf_architecture, arch, what, "architectures[0]",
                  err))
        return -1;

    /* Shapes. */
    c.n_vocab = ht->n_vocab;
    c.n_heads = ht->n_heads;
    if (json_get_int(obj, "hidden_size", 1, &c.dim, what, err) ||
        json_get_int(obj, "num_hidden_layers", 1, &c.n_layers, what, err) ||
        json_get_int(obj, "intermediate_size", !fam->no_dense_ffn, &c.ffn_dim, what, err) ||
        json_get_int(obj, "num_attention_heads", !ht->n_heads, &c.n_heads, what, err) ||
        json_get_int(obj, "vocab_size", !ht->n_vocab, &c.n_vocab, what, err))
        return -1;
    c.n_kv_heads = ht->n_kv_heads ? ht->n_kv_heads : c.n_heads;
    if (json_get_int(obj, "num_key_value_heads", 0, &c.n_kv_heads, what, err))
        return -1;
    if (c.n_heads <= 0)
        return memra_fail(err, "%s: num_attention_heads must be positive, got %" PRId64, what,
                          c.n_heads);
    c.head_dim = ht->head_dim ? ht->head_dim : c.dim / c.n_heads;
    if (json_get_int(obj, "head_dim", 0, &c.head_dim, what, err))
        return -1;
    c.n_ctx_train = ht->n_ctx;
    c.norm_eps = 1e-6;
    c.rope_theta = ht->rope_theta;
    c.tie_embeddings = ht->tie;
    if (json_get_int(obj, "max_position_embeddings", 0, &c.n_ctx_train, what, err) ||
        json_get_num(obj, "rms_norm_eps", 0, &c.norm_eps, what, err) ||
        json_get_bool(obj, "tie_word_embeddings", 0, &c.tie_embeddings, what, err))
        return -1;
    int have_theta = json_object_get(obj, "rope_theta") != NULL;
    if (json_get_num(obj, "rope_theta", 0, &c.rope_theta, what, err))
        return -1;

    /* Family features: the shared keys, then the family's own. */
    c.qk_norm = fam->qk_norm;
    if (fam->attn_bias_always) {
        c.attn_bias = 1;
    } else if (ht->attention_bias_key) {
        if (json_get_bool(obj, "attention_bias", 0, &c.attn_bias, what, err))
            return -1;
    }
    if (check_act(obj, fam->hf_act_key, fam->hf_act, what, err))
        return -1;
    if (fam->hf_read && fam->hf_read(obj, ht, what, &c, err) != 0)
        return -1;

    /* RoPE. */
    json_t *rs = json_object_get(obj, "rope_scaling");
    if (read_rope_scaling(rs, what, &c, err) != 0)
        return -1;
    if (read_rope_parameters(obj, what, &c, have_theta, rs && !json_is_null(rs), err) != 0)
        return -1;

    /* Special tokens: the text config's, else the wrapper's, else the default. */
    c.bos_id = ht->bos;
    c.eos_id = ht->eos;
    int found;
    const char *ids[2] = {"bos_token_id", "eos_token_id"};
    int64_t *dst[2] = {&c.bos_id, &c.eos_id};
    for (int i = 0; i < 2; i++) {
        if (read_token_id(obj, ids[i], dst[i], &found, what, err))
            return -1;
        if (!found && obj != cfg && read_token_id(cfg, ids[i], dst[i], &found, what, err))
            return -1;
    }

    if (validate && config_validate(&c, what, err) != 0)
        return -1;
    *out = c;
    return 0;
}

/* ---- GGUF ---- */

/* A drafter's own keys (family.h's gguf_assistant_arch): the hidden size
 * of the model it drafts for, and llama.cpp's count of its layers; every
 * layer reads the model's K/V. The centroid head is not carried
 * (llama.cpp's converter drops it), so the whole tied head drafts. */
static int config_gguf_assistant(const cfg_gguf *g, model_config *c, memra_err *err)
{
    int64_t nextn = c->n_layers;
    if (cfg_gguf_int(g, "embedding_length_out", 1, 1, &c->backbone_dim, err) ||
        cfg_gguf_int(g, "nextn_predict_layers", 1, 0, &nextn, err))
        return -1;
    if (c->backbone_dim <= 0)
        return memra_fail(err, "%s: %s.embedding_length_out must be positive", g->what, g->arch);
    if (nextn != c->n_layers)
        return memra_fail(err, "%s: %s.nextn_predict_layers %" PRId64 " differs from "
                          "block_count %" PRId64 " (an assistant is all drafting layers)",
                          g->what, g->arch, nextn, c->n_layers);
    c->n_kv_shared = c->n_layers; /* unless the family's reader finds its key */
    c->ordered_embeddings = 0;
    return 0;
}

int config_from_gguf(const gguf_file *f, model_config *out, memra_err *err)
{
    model_config c;
    memset(&c, 0, sizeof c);
    memset(out, 0, sizeof *out);
    cfg_gguf g = {f, "", f->map.path ? f->map.path : "GGUF"};
    const char *arch = NULL;
    if (cfg_gguf_str(&g, "general.architecture", 0, &arch, err) != 0)
        return -1;
    if (!arch)
        return memra_fail(err, "%s: missing required key general.architecture", g.what);
    const model_family_desc *fam = family_by_gguf_arch(arch);
    const int assistant = !fam && (fam = family_by_gguf_assistant_arch(arch)) != NULL;
    if (!fam) {
        char supported[256];
        family_list_gguf_archs(supported, sizeof supported);
        return memra_fail(err, "%s: unsupported general.architecture \"%s\" (supported: %s)",
                          g.what, arch, supported);
    }
    g.arch = arch;
    c.family = fam->id;

    /* HF identity: ours when we wrote the file, else the family's. */
    const family_hf_type *ht = &fam->hf_types[0];
    const char *mt = NULL, *ha = NULL;
    if (cfg_gguf_str(&g, "memra.hf.model_type", 0, &mt, err) ||
        cfg_gguf_str(&g, "memra.hf.architecture", 0, &ha, err))
        return -1;
    /* an assistant's: its drafter type and class, as from_hf names them */
    const char *own_mt = assistant ? fam->hf_assistant_type : NULL;
    const char *own_arch = assistant ? fam->hf_assistant_architecture : NULL;
    if (mt && !(own_mt && strcmp(mt, own_mt) == 0)) {
        const family_hf_type *t = NULL;
        if (assistant || family_by_hf_type(mt, &t) != fam)
            return memra_fail(err, "%s: memra.hf.model_type \"%s\" does not fit architecture "
                              "\"%s\"", g.what, mt, arch);
        ht = t;
    }
    if (copy_name(c.hf_model_type, sizeof c.hf_model_type, own_mt ? own_mt : ht->model_type,
                  g.what, "memra.hf.model_type", err) ||
        copy_name(c.hf_architecture, sizeof c.hf_architecture,
                  ha ? ha : own_arch ? own_arch : ht->architecture, g.what,
                  "memra.hf.architecture", err))
        return -1;

    if (cfg_gguf_int(&g, "context_length", 1, 1, &c.n_ctx_train, err) ||
        cfg_gguf_int(&g, "embedding_length", 1, 1, &c.dim, err) ||
        cfg_gguf_int(&g, "block_count", 1, 1, &c.n_layers, err) ||
        cfg_gguf_int(&g, "attention.head_count", 1, 1, &c.n_heads, err))
        return -1;
    /* A family that may list these per layer gets layer 0's here and
     * reads the rest in its gguf_read. */
    int per_layer = fam->gguf_per_layer_keys;
    c.n_kv_heads = c.n_heads;
    if (cfg_gguf_int_at(&g, "feed_forward_length", 1, !fam->no_dense_ffn, per_layer ? 0 : -1,
                        &c.ffn_dim, err) ||
        cfg_gguf_int_at(&g, "attention.head_count_kv", 1, 0, per_layer ? 0 : -1, &c.n_kv_heads,
                        err))
        return -1;
    if (c.n_heads <= 0)
        return memra_fail(err, "%s: %s.attention.head_count must be positive", g.what, arch);
    c.head_dim = c.dim / c.n_heads;
    int64_t vlen = -1, rope_dims = -1;
    if (cfg_gguf_int(&g, "attention.key_length", 1, 0, &c.head_dim, err) ||
        cfg_gguf_int(&g, "attention.value_length", 1, 0, &vlen, err) ||
        cfg_gguf_int(&g, "rope.dimension_count", 1, 0, &rope_dims, err))
        return -1;
    if (vlen >= 0 && vlen != c.head_dim)
        return memra_fail(err, "%s: %s.attention.value_length %" PRId64 " differs from key_length "
                          "%" PRId64 " (not supported)", g.what, arch, vlen, c.head_dim);
    if (rope_dims >= 0 && rope_dims != c.head_dim)
        c.rope_dim = rope_dims; /* config_validate says whether the family turns part */
    c.rope_theta = 10000.0;
    if (cfg_gguf_num(&g, "attention.layer_norm_rms_epsilon", 1, 1, &c.norm_eps, err) ||
        cfg_gguf_num(&g, "rope.freq_base", 1, 0, &c.rope_theta, err))
        return -1;

    /* Vocab: the key, else the token list, else the embedding's rows. */
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    const gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
    c.n_vocab = -1;
    if (cfg_gguf_int(&g, "vocab_size", 1, 0, &c.n_vocab, err))
        return -1;
    if (c.n_vocab < 0 && toks && toks->value.type == GGUF_ARRAY)
        c.n_vocab = toks->value.v.arr.n > (uint64_t)INT64_MAX ? INT64_MAX
                                                               : (int64_t)toks->value.v.arr.n;
    if (c.n_vocab < 0 && embd && embd->n_dims == 2)
        c.n_vocab = embd->ne[1];
    if (c.n_vocab < 0)
        return memra_fail(err, "%s: no vocab size (no %s.vocab_size, tokenizer.ggml.tokens or "
                          "token_embd.weight)", g.what, arch);

    /* Which tensors exist says what llama.cpp did not write down. */
    c.tie_embeddings = ht->tie;
    if (f->n_tensors > 0)
        c.tie_embeddings = embd && !gguf_find_tensor(f, "output.weight");
    if (cfg_gguf_bool(&g, "memra.tie_word_embeddings", 0, &c.tie_embeddings, err))
        return -1;
    c.attn_bias = fam->attn_bias_always || gguf_find_tensor(f, "blk.0.attn_q.bias") != NULL;
    if (cfg_gguf_bool(&g, "memra.attention.bias", 0, &c.attn_bias, err))
        return -1;
    c.qk_norm = fam->qk_norm;

    /* RoPE scaling. */
    const char *st = NULL, *mst = NULL;
    double scale_linear = 0;
    if (cfg_gguf_str(&g, "rope.scaling.type", 1, &st, err) ||
        cfg_gguf_num(&g, "rope.scale_linear", 1, 0, &scale_linear, err) ||
        cfg_gguf_str(&g, "memra.rope.scaling.type", 0, &mst, err))
        return -1;
    if (st && strcmp(st, "none") != 0) {
        if (cfg_gguf_num(&g, "rope.scaling.factor", 1, 1, &c.rope_scaling.factor, err))
            return -1;
        if (strcmp(st, "linear") == 0) {
            c.rope_scaling.kind = ROPE_SCALING_LINEAR;
        } else if (strcmp(st, "yarn") == 0) {
            double attn = 1.0;
            c.rope_scaling.kind = ROPE_SCALING_YARN;
            c.rope_scaling.original_ctx = c.n_ctx_train;
            c.rope_scaling.beta_fast = 32;
            c.rope_scaling.beta_slow = 1;
            if (cfg_gguf_int(&g, "rope.scaling.original_context_length", 1, 0,
                             &c.rope_scaling.original_ctx, err) ||
                cfg_gguf_num(&g, "rope.scaling.yarn_beta_fast", 1, 0, &c.rope_scaling.beta_fast,
                             err) ||
                cfg_gguf_num(&g, "rope.scaling.yarn_beta_slow", 1, 0, &c.rope_scaling.beta_slow,
                             err) ||
                cfg_gguf_num(&g, "rope.scaling.yarn_attn_factor", 1, 0, &attn, err))
                return -1;
            c.rope_scaling.attn_factor = attn * yarn_mscale(c.rope_scaling.factor, 1.0);
        } else {
            return memra_fail(err, "%s: %s.rope.scaling.type \"%s\" is not supported (supported: "
                              "none, linear, yarn)", g.what, arch, st);
        }
    } else if (scale_linear > 0 && scale_linear != 1.0) {
        c.rope_scaling.kind = ROPE_SCALING_LINEAR; /* the key older llama.cpp wrote */
        c.rope_scaling.factor = scale_linear;
    }
    if (mst) {
        if (strcmp(mst, "llama3") != 0)
            return memra_fail(err, "%s: memra.rope.scaling.type \"%s\" is not supported", g.what,
                              mst);
        if (c.rope_scaling.kind != ROPE_SCALING_NONE)
            return memra_fail(err, "%s: both %s.rope.scaling.type and memra.rope.scaling.type "
                              "are set", g.what, arch);
        c.rope_scaling.kind = ROPE_SCALING_LLAMA3;
        if (cfg_gguf_num(&g, "memra.rope.scaling.factor", 0, 1, &c.rope_scaling.factor, err) ||
            cfg_gguf_num(&g, "memra.rope.scaling.low_freq_factor", 0, 1,
                         &c.rope_scaling.low_freq_factor, err) ||
            cfg_gguf_num(&g, "memra.rope.scaling.high_freq_factor", 0, 1,
                         &c.rope_scaling.high_freq_factor, err) ||
            cfg_gguf_int(&g, "memra.rope.scaling.original_context_length", 0, 1,
                         &c.rope_scaling.original_ctx, err))
            return -1;
    }
    if (cfg_gguf_int(&g, "attention.sliding_window", 1, 0, &c.sliding_window, err) ||
        cfg_gguf_int(&g, "pooling_type", 1, 0, &c.pooling, err))
        return -1;
    if (c.pooling < 0 || c.pooling > MODEL_POOL_RANK)
        return memra_fail(err, "%s: %s.pooling_type %" PRId64 " is not one memra knows (0 none, "
                          "1 mean, 2 cls, 3 last, 4 rank)", g.what, arch, c.pooling);
    /* (the drafter's keys first: the family's reader may ask
     * config_is_assistant) */
    if (assistant && config_gguf_assistant(&g, &c, err) != 0)
        return -1;
    if (fam->gguf_read && fam->gguf_read(&g, &c, err) != 0)
        return -1;
    if (cfg_gguf_token(&g, "tokenizer.ggml.bos_token_id", &c.bos_id, err) ||
        cfg_gguf_token(&g, "tokenizer.ggml.eos_token_id", &c.eos_id, err))
        return -1;

    if (config_validate(&c, g.what, err) != 0)
        return -1;
    *out = c;
    return 0;
}

void config_to_gguf(const model_config *c, gguf_writer *w)
{
    const model_family_desc *fam = family_desc(c->family);
    const int assistant = config_is_assistant(c) && fam->gguf_assistant_arch;
    const char *arch = assistant ? fam->gguf_assistant_arch : fam->gguf_arch;
    const family_hf_type *ht = &fam->hf_types[0];
    gguf_writer_set_str(w, "general.architecture", arch);
    cfg_gguf_set_u32(w, arch, "vocab_size", c->n_vocab);
    cfg_gguf_set_u32(w, arch, "context_length", c->n_ctx_train);
    cfg_gguf_set_u32(w, arch, "embedding_length", c->dim);
    cfg_gguf_set_u32(w, arch, "block_count", c->n_layers);
    if (c->ffn_dim > 0)
        cfg_gguf_set_u32(w, arch, "feed_forward_length", c->ffn_dim);
    cfg_gguf_set_u32(w, arch, "attention.head_count", c->n_heads);
    cfg_gguf_set_u32(w, arch, "attention.head_count_kv", c->n_kv_heads);
    cfg_gguf_set_u32(w, arch, "attention.key_length", c->head_dim);
    cfg_gguf_set_u32(w, arch, "attention.value_length", c->head_dim);
    cfg_gguf_set_u32(w, arch, "rope.dimension_count", config_rope_dim(c));
    cfg_gguf_set_f32(w, arch, "attention.layer_norm_rms_epsilon", c->norm_eps);
    cfg_gguf_set_f32(w, arch, "rope.freq_base", c->rope_theta);
    char key[256];
    switch (c->rope_scaling.kind) {
    case ROPE_SCALING_NONE:
        break;
    case ROPE_SCALING_LINEAR:
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        gguf_writer_set_str(w, key, "linear");
        cfg_gguf_set_f32(w, arch, "rope.scaling.factor", c->rope_scaling.factor);
        break;
    case ROPE_SCALING_YARN: {
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        gguf_writer_set_str(w, key, "yarn");
        cfg_gguf_set_f32(w, arch, "rope.scaling.factor", c->rope_scaling.factor);
        cfg_gguf_set_u32(w, arch, "rope.scaling.original_context_length",
                         c->rope_scaling.original_ctx);
        cfg_gguf_set_f32(w, arch, "rope.scaling.yarn_beta_fast", c->rope_scaling.beta_fast);
        cfg_gguf_set_f32(w, arch, "rope.scaling.yarn_beta_slow", c->rope_scaling.beta_slow);
        double ratio = c->rope_scaling.attn_factor / yarn_mscale(c->rope_scaling.factor, 1.0);
        if (ratio != 1.0)
            cfg_gguf_set_f32(w, arch, "rope.scaling.yarn_attn_factor", ratio);
        break;
    }
    case ROPE_SCALING_LLAMA3:
        gguf_writer_set_str(w, "memra.rope.scaling.type", "llama3");
        gguf_writer_set_f32(w, "memra.rope.scaling.factor", (float)c->rope_scaling.factor);
        gguf_writer_set_f32(w, "memra.rope.scaling.low_freq_factor",
                            (float)c->rope_scaling.low_freq_factor);
        gguf_writer_set_f32(w, "memra.rope.scaling.high_freq_factor",
                            (float)c->rope_scaling.high_freq_factor);
        gguf_writer_set_u32(w, "memra.rope.scaling.original_context_length",
                            (uint32_t)c->rope_scaling.original_ctx);
        break;
    }
    if (c->sliding_window > 0)
        cfg_gguf_set_u32(w, arch, "attention.sliding_window", c->sliding_window);
    if (c->pooling > 0)
        cfg_gguf_set_u32(w, arch, "pooling_type", c->pooling);
    if (fam->gguf_write)
        fam->gguf_write(c, arch, w);
    if (assistant) {
        cfg_gguf_set_u32(w, arch, "embedding_length_out", c->backbone_dim);
        cfg_gguf_set_u32(w, arch, "nextn_predict_layers", c->n_layers);
    }
    if (c->bos_id >= 0)
        gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)c->bos_id);
    if (c->eos_id >= 0)
        gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)c->eos_id);
    gguf_writer_set_str(w, "memra.hf.model_type",
                        c->hf_model_type[0] ? c->hf_model_type : ht->model_type);
    gguf_writer_set_str(w, "memra.hf.architecture",
                        c->hf_architecture[0] ? c->hf_architecture : ht->architecture);
    gguf_writer_set_bool(w, "memra.tie_word_embeddings", c->tie_embeddings);
    gguf_writer_set_bool(w, "memra.attention.bias", c->attn_bias);
}

/* ---- HF out ---- */

json_t *config_to_hf(const model_config *c)
{
    const model_family_desc *fam = family_desc(c->family);
    const family_hf_type *ht = &fam->hf_types[0], *named = NULL;
    if (c->hf_model_type[0] && family_by_hf_type(c->hf_model_type, &named))
        ht = named;
    json_t *o = json_object();
    json_t *archs = json_array();
    json_array_append_new(archs,
                          json_string(c->hf_architecture[0] ? c->hf_architecture
                                                            : ht->architecture));
    json_object_set_new(o, "architectures", archs);
    json_object_set_new(o, "model_type", json_string(ht->model_type));
    config_json_set_int(o, "vocab_size", c->n_vocab);
    config_json_set_int(o, "hidden_size", c->dim);
    if (c->ffn_dim > 0)
        config_json_set_int(o, "intermediate_size", c->ffn_dim);
    config_json_set_int(o, "num_hidden_layers", c->n_layers);
    config_json_set_int(o, "num_attention_heads", c->n_heads);
    config_json_set_int(o, "num_key_value_heads", c->n_kv_heads);
    config_json_set_int(o, "head_dim", c->head_dim);
    config_json_set_int(o, "max_position_embeddings", c->n_ctx_train);
    config_json_set_num(o, "rms_norm_eps", c->norm_eps);
    config_json_set_num(o, "rope_theta", c->rope_theta);
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    if (ht->attention_bias_key)
        json_object_set_new(o, "attention_bias", json_boolean(c->attn_bias));
    json_object_set_new(o, fam->hf_act_key, json_string(fam->hf_act));
    json_object_set_new(o, "bos_token_id", c->bos_id >= 0 ? json_integer(c->bos_id) : json_null());
    json_object_set_new(o, "eos_token_id", c->eos_id >= 0 ? json_integer(c->eos_id) : json_null());
    json_t *rs = json_null();
    switch (c->rope_scaling.kind) {
    case ROPE_SCALING_NONE:
        break;
    case ROPE_SCALING_LINEAR:
        rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("linear"));
        config_json_set_num(rs, "factor", c->rope_scaling.factor);
        break;
    case ROPE_SCALING_LLAMA3:
        rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("llama3"));
        config_json_set_num(rs, "factor", c->rope_scaling.factor);
        config_json_set_num(rs, "low_freq_factor", c->rope_scaling.low_freq_factor);
        config_json_set_num(rs, "high_freq_factor", c->rope_scaling.high_freq_factor);
        config_json_set_int(rs, "original_max_position_embeddings", c->rope_scaling.original_ctx);
        break;
    case ROPE_SCALING_YARN:
        rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("yarn"));
        config_json_set_num(rs, "factor", c->rope_scaling.factor);
        config_json_set_int(rs, "original_max_position_embeddings", c->rope_scaling.original_ctx);
        config_json_set_num(rs, "beta_fast", c->rope_scaling.beta_fast);
        config_json_set_num(rs, "beta_slow", c->rope_scaling.beta_slow);
        config_json_set_num(rs, "attention_factor", c->rope_scaling.attn_factor);
        break;
    }
    json_object_set_new(o, "rope_scaling", rs);
    if (fam->hf_write)
        fam->hf_write(c, ht, o);
    json_object_set_new(o, "torch_dtype", json_string("bfloat16"));
    if (config_is_assistant(c) && fam->hf_assistant_type) {
        /* a drafter: the family's config becomes its text_config */
        json_t *w = json_object();
        json_object_set(w, "architectures", json_object_get(o, "architectures"));
        json_object_del(o, "architectures");
        json_object_set_new(w, "model_type", json_string(fam->hf_assistant_type));
        fam->hf_assistant_write(c, w);
        json_object_set_new(w, "text_config", o);
        return w;
    }
    return o;
}
