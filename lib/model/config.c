/* The normalized model config, read from an HF config.json or GGUF metadata
 * and written back to either.
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
 * llama3 rope scaling: llama.cpp writes no rope.scaling keys for it (an
 * unknown rope.scaling.type would make llama.cpp refuse the file) and
 * instead stores the computed per-frequency factors as the tensor
 * rope_freqs.weight. We write the memra.rope.scaling.* keys so the config
 * round-trips exactly, and the convert tool also writes rope_freqs.weight
 * (llama_rope_freqs) so llama.cpp scales the same way; the contract lists it
 * as optional and generated. Reading a llama.cpp file that has the tensor
 * but no memra keys, we recover the parameters from the tensor: factor is
 * its largest value, low/high_freq_factor follow from two interpolated
 * entries (smooth is linear in 1/wavelength), original_context_length is
 * 8192 (what llama.cpp's converter always uses), and the factors are then
 * recomputed and must match the tensor.
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
#include "model/contract.h"

#define MAX_SIZE 10000000       /* dims, vocab, heads, ffn: 1e7 */
#define MAX_LAYERS 100000
#define MAX_EXPERTS 65536
#define MAX_CTX 1000000000      /* positions */
#define MAX_TENSOR_ELEMS 1e15   /* elements of one tensor */

static const char *const family_names[FAMILY_COUNT] = {"llama", "qwen2", "qwen3", "qwen3_moe",
                                                       "gemma3"};
static const char *const family_archs[FAMILY_COUNT] = {"llama", "qwen2", "qwen3", "qwen3moe",
                                                       "gemma3"};

const char *family_name(model_family f)
{
    return (f >= 0 && f < FAMILY_COUNT) ? family_names[f] : "?";
}

const char *family_gguf_arch(model_family f)
{
    return (f >= 0 && f < FAMILY_COUNT) ? family_archs[f] : "?";
}

/* Per HF model_type: the family and transformers' defaults for the keys
 * that are optional. 0 for n_kv_heads / head_dim means "derive". */
typedef struct {
    const char *model_type, *architecture;
    model_family family;
    int64_t n_kv_heads, head_dim, n_ctx;
    double rope_theta;
    int tie;
    int64_t bos, eos;
    int64_t sliding_window;
} hf_type;

static const hf_type hf_types[] = {
    /* LlamaConfig */
    {"llama", "LlamaForCausalLM", FAMILY_LLAMA, 0, 0, 2048, 10000.0, 0, 1, 2, 0},
    /* MistralConfig: num_key_value_heads 8, 4096*32 positions, sliding_window 4096 */
    {"mistral", "MistralForCausalLM", FAMILY_LLAMA, 8, 0, 131072, 10000.0, 0, 1, 2, 4096},
    /* Qwen2Config: num_key_value_heads 32 */
    {"qwen2", "Qwen2ForCausalLM", FAMILY_QWEN2, 32, 0, 32768, 10000.0, 0, -1, -1, 0},
    /* Qwen3Config: num_key_value_heads 32, head_dim 128 */
    {"qwen3", "Qwen3ForCausalLM", FAMILY_QWEN3, 32, 128, 32768, 10000.0, 0, -1, -1, 0},
    /* Qwen3MoeConfig: num_key_value_heads 4 */
    {"qwen3_moe", "Qwen3MoeForCausalLM", FAMILY_QWEN3_MOE, 4, 0, 32768, 10000.0, 0, -1, -1, 0},
    /* Gemma3TextConfig */
    {"gemma3_text", "Gemma3ForCausalLM", FAMILY_GEMMA3, 4, 256, 131072, 1000000.0, 1, 2, 1,
     4096},
};

#define SUPPORTED_HF "llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text, gemma3"
#define SUPPORTED_GGUF "llama, qwen2, qwen3, qwen3moe, gemma3"

static const hf_type *hf_type_of(const char *model_type)
{
    for (size_t i = 0; i < sizeof hf_types / sizeof hf_types[0]; i++)
        if (strcmp(hf_types[i].model_type, model_type) == 0)
            return &hf_types[i];
    return NULL;
}

/* The HF type written for a family when the config does not name one. */
static const hf_type *hf_type_default(model_family f)
{
    for (size_t i = 0; i < sizeof hf_types / sizeof hf_types[0]; i++)
        if (hf_types[i].family == f)
            return &hf_types[i];
    return NULL;
}

static double yarn_mscale(double factor, double mscale)
{
    return factor <= 1.0 ? 1.0 : 0.1 * mscale * log(factor) + 1.0;
}

/* ---- sanity, shared by both readers ---- */

static int size_ok(const char *what, const char *key, int64_t v, int64_t max, memra_err *err)
{
    if (v <= 0)
        return memra_fail(err, "%s: %s must be positive, got %" PRId64, what, key, v);
    if (v > max)
        return memra_fail(err, "%s: %s %" PRId64 " is absurdly large (limit %" PRId64 ")", what,
                          key, v, max);
    return 0;
}

static int elems_ok(const char *what, const char *tensor, double elems, memra_err *err)
{
    if (elems > MAX_TENSOR_ELEMS)
        return memra_fail(err, "%s: the %s tensor would have %.3g elements, absurdly many", what,
                          tensor, elems);
    return 0;
}

static int finite_pos(const char *what, const char *key, double v, memra_err *err)
{
    if (!isfinite(v) || v <= 0)
        return memra_fail(err, "%s: %s must be a positive number, got %g", what, key, v);
    return 0;
}

/* Every size positive and plausible, heads divisible, rope parameters
 * usable. `what` names the source (file, and the key spelling it uses is
 * the HF one since that is what people read). */
static int config_validate(const model_config *c, const char *what, memra_err *err)
{
    if (size_ok(what, "vocab_size", c->n_vocab, MAX_SIZE, err) ||
        size_ok(what, "hidden_size", c->dim, MAX_SIZE, err) ||
        size_ok(what, "num_hidden_layers", c->n_layers, MAX_LAYERS, err) ||
        size_ok(what, "num_attention_heads", c->n_heads, MAX_SIZE, err) ||
        size_ok(what, "num_key_value_heads", c->n_kv_heads, MAX_SIZE, err) ||
        size_ok(what, "head_dim", c->head_dim, MAX_SIZE, err) ||
        size_ok(what, "intermediate_size", c->ffn_dim, MAX_SIZE, err) ||
        size_ok(what, "max_position_embeddings", c->n_ctx_train, MAX_CTX, err))
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
    if (elems_ok(what, "embedding", (double)c->n_vocab * d, err) ||
        elems_ok(what, "attention", (double)c->n_heads * (double)c->head_dim * d, err) ||
        elems_ok(what, "ffn", (double)c->ffn_dim * d, err))
        return -1;
    if (!isfinite(c->norm_eps) || c->norm_eps <= 0 || c->norm_eps >= 1)
        return memra_fail(err, "%s: rms_norm_eps %g is not in (0, 1)", what, c->norm_eps);
    if (finite_pos(what, "rope_theta", c->rope_theta, err))
        return -1;
    switch (c->rope_scaling.kind) {
    case ROPE_SCALING_NONE:
        break;
    case ROPE_SCALING_LINEAR:
        if (finite_pos(what, "rope_scaling.factor", c->rope_scaling.factor, err))
            return -1;
        break;
    case ROPE_SCALING_LLAMA3:
        if (finite_pos(what, "rope_scaling.factor", c->rope_scaling.factor, err) ||
            finite_pos(what, "rope_scaling.low_freq_factor", c->rope_scaling.low_freq_factor,
                       err) ||
            finite_pos(what, "rope_scaling.high_freq_factor", c->rope_scaling.high_freq_factor,
                       err) ||
            size_ok(what, "rope_scaling.original_max_position_embeddings",
                    c->rope_scaling.original_ctx, MAX_CTX, err))
            return -1;
        if (!(c->rope_scaling.low_freq_factor < c->rope_scaling.high_freq_factor))
            return memra_fail(err,
                              "%s: rope_scaling.low_freq_factor %g must be below "
                              "high_freq_factor %g",
                              what, c->rope_scaling.low_freq_factor,
                              c->rope_scaling.high_freq_factor);
        break;
    case ROPE_SCALING_YARN:
        if (finite_pos(what, "rope_scaling.factor", c->rope_scaling.factor, err) ||
            finite_pos(what, "rope_scaling.beta_fast", c->rope_scaling.beta_fast, err) ||
            finite_pos(what, "rope_scaling.beta_slow", c->rope_scaling.beta_slow, err) ||
            finite_pos(what, "rope_scaling.attention_factor", c->rope_scaling.attn_factor, err) ||
            size_ok(what, "rope_scaling.original_max_position_embeddings",
                    c->rope_scaling.original_ctx, MAX_CTX, err))
            return -1;
        break;
    default:
        return memra_fail(err, "%s: unknown rope scaling kind %d", what,
                          (int)c->rope_scaling.kind);
    }
    if (c->family == FAMILY_QWEN2 && !c->attn_bias)
        return memra_fail(err, "%s: qwen2 always has q/k/v biases", what);
    if (c->family == FAMILY_QWEN3_MOE) {
        if (size_ok(what, "num_experts", c->n_experts, MAX_EXPERTS, err) ||
            size_ok(what, "num_experts_per_tok", c->n_experts_used, MAX_EXPERTS, err) ||
            size_ok(what, "moe_intermediate_size", c->moe_ffn_dim, MAX_SIZE, err) ||
            elems_ok(what, "experts", (double)c->n_experts * (double)c->moe_ffn_dim * d, err))
            return -1;
        if (c->n_experts_used > c->n_experts)
            return memra_fail(err,
                              "%s: num_experts_per_tok %" PRId64 " exceeds num_experts %" PRId64,
                              what, c->n_experts_used, c->n_experts);
    }
    if (c->family == FAMILY_GEMMA3) {
        if (size_ok(what, "sliding_window_pattern", c->sliding_window_pattern, MAX_LAYERS, err) ||
            finite_pos(what, "query_pre_attn_scalar", c->query_pre_attn_scalar, err) ||
            finite_pos(what, "rope_local_base_freq", c->rope_local_theta, err))
            return -1;
    }
    if (c->sliding_window < 0 || c->sliding_window > MAX_CTX)
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

/* gemma3 layer_types (newer configs): "full_attention" every Nth layer and
 * "sliding_attention" otherwise; we need that N. qwen's must be all full. */
static int read_layer_types(const json_t *obj, const char *what, model_config *c, memra_err *err)
{
    json_t *lt = json_object_get(obj, "layer_types");
    if (!lt || json_is_null(lt))
        return 0;
    if (!json_is_array(lt))
        return memra_fail(err, "%s: layer_types must be a list", what);
    size_t n = json_array_size(lt);
    if ((int64_t)n != c->n_layers)
        return memra_fail(err, "%s: layer_types has %zu entries for %" PRId64 " layers", what, n,
                          c->n_layers);
    int64_t pattern = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(lt, i));
        if (!s || (strcmp(s, "full_attention") != 0 && strcmp(s, "sliding_attention") != 0))
            return memra_fail(err, "%s: layer_types[%zu] is not \"full_attention\" or "
                              "\"sliding_attention\"", what, i);
        if (!pattern && strcmp(s, "full_attention") == 0)
            pattern = (int64_t)i + 1;
    }
    if (c->family != FAMILY_GEMMA3) {
        if (pattern != 1 || n == 0)
            goto irregular;
        for (size_t i = 0; i < n; i++)
            if (strcmp(json_string_value(json_array_get(lt, i)), "full_attention") != 0)
                goto irregular;
        return 0;
    }
    if (!pattern) /* every layer slides: the period is longer than the model */
        pattern = (int64_t)n + 1;
    for (size_t i = 0; i < n; i++) {
        int full = strcmp(json_string_value(json_array_get(lt, i)), "full_attention") == 0;
        if (full != ((int64_t)(i + 1) % pattern == 0))
            goto irregular;
    }
    c->sliding_window_pattern = pattern;
    return 0;
irregular:
    return memra_fail(err, "%s: layer_types is not a pattern this family supports "
                      "(%s: %s)", what, family_name(c->family),
                      c->family == FAMILY_GEMMA3 ? "every Nth layer full_attention"
                                                 : "all full_attention");
}

/* transformers v5 configs carry rope_theta and the scaling in
 * rope_parameters (per layer type for gemma3) instead of rope_theta /
 * rope_scaling; read them when the v4 keys are absent. */
static int read_rope_parameters(const json_t *obj, const char *what, model_config *c,
                                int have_theta, int have_scaling, int have_local,
                                memra_err *err)
{
    json_t *rp = json_object_get(obj, "rope_parameters");
    if (!rp || json_is_null(rp))
        return 0;
    if (!json_is_object(rp))
        return memra_fail(err, "%s: rope_parameters must be an object", what);
    char rwhat[800];
    snprintf(rwhat, sizeof rwhat, "%.700s: rope_parameters", what);
    json_t *full = json_object_get(rp, "full_attention");
    json_t *sliding = json_object_get(rp, "sliding_attention");
    if (full || sliding) {
        if (c->family != FAMILY_GEMMA3)
            return memra_fail(err, "%s: per-layer-type rope parameters are only supported for "
                              "gemma3", rwhat);
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

int config_from_hf(const json_t *cfg, const char *what, model_config *out, memra_err *err)
{
    model_config c;
    memset(&c, 0, sizeof c);
    memset(out, 0, sizeof *out);
    if (!json_is_object(cfg))
        return memra_fail(err, "%s: the config is not a JSON object", what);
    const char *mt;
    if (json_get_str(cfg, "model_type", 1, &mt, what, err) != 0)
        return -1;
    const json_t *obj = cfg;
    char twhat[600];
    if (strcmp(mt, "gemma3") == 0) {
        /* The multimodal gemma-3 (4b and up): its text model is what we run. */
        obj = json_object_get(cfg, "text_config");
        if (!json_is_object(obj))
            return memra_fail(err, "%s: model_type \"gemma3\" needs a \"text_config\" object",
                              what);
        snprintf(twhat, sizeof twhat, "%.580s: text_config", what);
        what = twhat;
        const char *tmt = "gemma3_text";
        if (json_get_str(obj, "model_type", 0, &tmt, what, err) != 0)
            return -1;
        if (strcmp(tmt, "gemma3_text") != 0)
            return memra_fail(err, "%s: model_type \"%s\" where \"gemma3_text\" was expected",
                              what, tmt);
        mt = "gemma3_text";
    }
    const hf_type *ht = hf_type_of(mt);
    if (!ht)
        return memra_fail(err, "%s: unsupported model_type \"%s\" (supported: " SUPPORTED_HF ")",
                          what, mt);
    c.family = ht->family;
    int gemma = c.family == FAMILY_GEMMA3;
    if (copy_name(c.hf_model_type, sizeof c.hf_model_type, ht->model_type, what, "model_type",
                  err))
        return -1;
    /* A multimodal gemma3 is normalized to its text model. */
    const char *arch = ht->architecture;
    json_t *archs = json_object_get(cfg, "architectures");
    if (obj == cfg && json_is_array(archs) && json_is_string(json_array_get(archs, 0)))
        arch = json_string_value(json_array_get(archs, 0));
    if (copy_name(c.hf_architecture, sizeof c.hf_architecture, arch, what, "architectures[0]",
                  err))
        return -1;

    /* Shapes. */
    c.n_vocab = 262208; /* Gemma3TextConfig */
    c.n_heads = 8;
    if (json_get_int(obj, "hidden_size", 1, &c.dim, what, err) ||
        json_get_int(obj, "num_hidden_layers", 1, &c.n_layers, what, err) ||
        json_get_int(obj, "intermediate_size", 1, &c.ffn_dim, what, err) ||
        json_get_int(obj, "num_attention_heads", !gemma, &c.n_heads, what, err) ||
        json_get_int(obj, "vocab_size", !gemma, &c.n_vocab, what, err))
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

    /* Family features. */
    c.qk_norm = c.family == FAMILY_QWEN3 || c.family == FAMILY_QWEN3_MOE || gemma;
    if (c.family == FAMILY_QWEN2) {
        c.attn_bias = 1;
    } else if (strcmp(ht->model_type, "mistral") != 0) {
        if (json_get_bool(obj, "attention_bias", 0, &c.attn_bias, what, err))
            return -1;
    }
    if (c.family == FAMILY_LLAMA && strcmp(ht->model_type, "llama") == 0) {
        int mlp_bias = 0;
        if (json_get_bool(obj, "mlp_bias", 0, &mlp_bias, what, err))
            return -1;
        if (mlp_bias)
            return memra_fail(err, "%s: mlp_bias true is not supported", what);
    }
    if (gemma ? check_act(obj, "hidden_activation", "gelu_pytorch_tanh", what, err)
              : check_act(obj, "hidden_act", "silu", what, err))
        return -1;
    if (c.family == FAMILY_QWEN2 || c.family == FAMILY_QWEN3 || c.family == FAMILY_QWEN3_MOE) {
        int sw = 0;
        if (json_get_bool(obj, "use_sliding_window", 0, &sw, what, err))
            return -1;
        if (sw)
            return memra_fail(err, "%s: use_sliding_window true is not supported", what);
    }
    if (strcmp(ht->model_type, "mistral") == 0 || gemma) {
        c.sliding_window = ht->sliding_window;
        json_t *sw = json_object_get(obj, "sliding_window");
        if (sw && json_is_null(sw))
            c.sliding_window = 0;
        else if (json_get_int(obj, "sliding_window", 0, &c.sliding_window, what, err))
            return -1;
    }
    if (c.family == FAMILY_QWEN3_MOE) {
        int64_t step = 1;
        if (json_get_int(obj, "num_experts", 1, &c.n_experts, what, err) ||
            json_get_int(obj, "num_experts_per_tok", 1, &c.n_experts_used, what, err) ||
            json_get_int(obj, "moe_intermediate_size", 1, &c.moe_ffn_dim, what, err) ||
            json_get_bool(obj, "norm_topk_prob", 0, &c.norm_topk_prob, what, err) ||
            json_get_int(obj, "decoder_sparse_step", 0, &step, what, err))
            return -1;
        json_t *dense = json_object_get(obj, "mlp_only_layers");
        if (step != 1 || (json_is_array(dense) && json_array_size(dense) > 0))
            return memra_fail(err, "%s: dense layers among the MoE layers (decoder_sparse_step "
                              "or mlp_only_layers) are not supported", what);
        if (dense && !json_is_null(dense) && !json_is_array(dense))
            return memra_fail(err, "%s: key \"mlp_only_layers\" must be a list", what);
    }
    int have_local = 0;
    if (gemma) {
        c.rope_local_theta = 10000.0;
        c.sliding_window_pattern = 6;
        c.query_pre_attn_scalar = 256;
        have_local = json_object_get(obj, "rope_local_base_freq") != NULL;
        if (json_get_num(obj, "rope_local_base_freq", 0, &c.rope_local_theta, what, err) ||
            json_get_int(obj, "sliding_window_pattern", 0, &c.sliding_window_pattern, what,
                         err) ||
            json_get_num(obj, "query_pre_attn_scalar", 0, &c.query_pre_attn_scalar, what, err) ||
            json_get_num(obj, "final_logit_softcapping", 0, &c.final_softcap, what, err) ||
            json_get_num(obj, "attn_logit_softcapping", 0, &c.attn_softcap, what, err))
            return -1;
    }
    if ((c.family != FAMILY_LLAMA) && read_layer_types(obj, what, &c, err) != 0)
        return -1;

    /* RoPE. */
    json_t *rs = json_object_get(obj, "rope_scaling");
    if (read_rope_scaling(rs, what, &c, err) != 0)
        return -1;
    if (read_rope_parameters(obj, what, &c, have_theta, rs && !json_is_null(rs), have_local,
                             err) != 0)
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

    if (config_validate(&c, what, err) != 0)
        return -1;
    *out = c;
    return 0;
}

/* ---- GGUF ---- */

typedef struct {
    const gguf_file *f;
    const char *arch;
    const char *what;
} gguf_ctx;

static const gguf_kv *gkv(const gguf_ctx *g, const char *key, int arch_key, char *full,
                          size_t n)
{
    if (arch_key)
        snprintf(full, n, "%s.%s", g->arch, key);
    else
        snprintf(full, n, "%s", key);
    return gguf_find_kv(g->f, full);
}

/* An f32 read back as the shortest decimal that rounds to it. */
static double f32_shortest(double v)
{
    float f = (float)v;
    if (!isfinite(f))
        return v;
    char buf[48];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f)
            return strtod(buf, NULL);
    }
    return (double)f;
}

static double round_sig5(double v)
{
    char buf[48];
    snprintf(buf, sizeof buf, "%.5g", v);
    return strtod(buf, NULL);
}

/* Typed readers: a missing key keeps *out and returns 0 unless required; a
 * key of another type is always an error naming it. */
static int g_int(const gguf_ctx *g, const char *key, int arch_key, int required, int64_t *out,
                 memra_err *err)
{
    char full[256];
    const gguf_kv *kv = gkv(g, key, arch_key, full, sizeof full);
    if (!kv) {
        if (required)
            return memra_fail(err, "%s: missing required key %s", g->what, full);
        return 0;
    }
    switch (kv->value.type) {
    case GGUF_UINT8:
    case GGUF_UINT16:
    case GGUF_UINT32:
    case GGUF_UINT64:
        if (kv->value.v.u > (uint64_t)INT64_MAX)
            return memra_fail(err, "%s: key %s: %" PRIu64 " is out of range", g->what, full,
                              kv->value.v.u);
        *out = (int64_t)kv->value.v.u;
        return 0;
    case GGUF_INT8:
    case GGUF_INT16:
    case GGUF_INT32:
    case GGUF_INT64:
        *out = kv->value.v.i;
        return 0;
    default:
        return memra_fail(err, "%s: key %s has type %s, expected an integer", g->what, full,
                          gguf_vtype_name(kv->value.type));
    }
}

static int g_num(const gguf_ctx *g, const char *key, int arch_key, int required, double *out,
                 memra_err *err)
{
    char full[256];
    const gguf_kv *kv = gkv(g, key, arch_key, full, sizeof full);
    if (!kv) {
        if (required)
            return memra_fail(err, "%s: missing required key %s", g->what, full);
        return 0;
    }
    switch (kv->value.type) {
    case GGUF_FLOAT32:
        *out = f32_shortest(kv->value.v.f);
        return 0;
    case GGUF_FLOAT64:
        *out = kv->value.v.f;
        return 0;
    default: {
        int64_t i = 0;
        if (g_int(g, key, arch_key, 1, &i, err) != 0)
            return memra_fail(err, "%s: key %s has type %s, expected a number", g->what, full,
                              gguf_vtype_name(kv->value.type));
        *out = (double)i;
        return 0;
    }
    }
}

static int g_bool(const gguf_ctx *g, const char *key, int arch_key, int *out, memra_err *err)
{
    char full[256];
    const gguf_kv *kv = gkv(g, key, arch_key, full, sizeof full);
    if (!kv)
        return 0;
    if (kv->value.type != GGUF_BOOL)
        return memra_fail(err, "%s: key %s has type %s, expected a bool", g->what, full,
                          gguf_vtype_name(kv->value.type));
    *out = kv->value.v.u != 0;
    return 0;
}

static int g_str(const gguf_ctx *g, const char *key, int arch_key, const char **out,
                 memra_err *err)
{
    char full[256];
    const gguf_kv *kv = gkv(g, key, arch_key, full, sizeof full);
    if (!kv)
        return 0;
    if (kv->value.type != GGUF_STRING)
        return memra_fail(err, "%s: key %s has type %s, expected a string", g->what, full,
                          gguf_vtype_name(kv->value.type));
    if (strlen(kv->value.v.s.str) != kv->value.v.s.len)
        return memra_fail(err, "%s: key %s holds a NUL byte", g->what, full);
    *out = kv->value.v.s.str;
    return 0;
}

/* A token id key: absent, or llama.cpp's "none" (u32 0xFFFFFFFF / -1), is -1. */
static int g_token(const gguf_ctx *g, const char *key, int64_t *out, memra_err *err)
{
    *out = -1;
    if (g_int(g, key, 0, 0, out, err) != 0)
        return -1;
    if (*out == 0xFFFFFFFFll)
        *out = -1;
    return 0;
}

/* Recover llama3 rope scaling from llama.cpp's rope_freqs.weight (see the
 * comment at the top of the file). */
static int llama3_from_rope_freqs(const gguf_ctx *g, const gguf_tensor *t, model_config *c,
                                  memra_err *err)
{
    int64_t half = c->head_dim / 2;
    if (t->type != DT_F32 || t->n_dims != 1 || t->ne[0] != half)
        return memra_fail(err, "%s: tensor rope_freqs.weight must be F32 [%" PRId64 "]", g->what,
                          half);
    const uint8_t *p = t->data;
    double max = 0;
    for (int64_t i = 0; i < half; i++) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        if (!isfinite(v) || v < 1.0f)
            return memra_fail(err, "%s: rope_freqs.weight[%" PRId64 "] = %g is not a llama3 "
                              "rope factor", g->what, i, (double)v);
        if (v > max)
            max = v;
    }
    c->rope_scaling.kind = ROPE_SCALING_LLAMA3;
    c->rope_scaling.factor = f32_shortest(max);
    c->rope_scaling.original_ctx = 8192;
    c->rope_scaling.low_freq_factor = 1.0;
    c->rope_scaling.high_freq_factor = 4.0;
    /* For an interpolated entry, 1/f_i = (1-s)/factor + s gives
     * s_i = (1/f_i - 1/factor) / (1 - 1/factor), and s = (x - lo) / (hi - lo)
     * with x = original_ctx / wavelength: two such entries give lo and hi. */
    double xs[2], ss[2];
    int found = 0;
    for (int64_t i = 0; i < half && found < 2 && max > 1.0; i++) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        if (v <= 1.0f + 1e-6f || v >= (float)max * (1.0f - 1e-6f))
            continue;
        double freq = 1.0 / pow(c->rope_theta, (double)(2 * i) / (double)c->head_dim);
        xs[found] = 8192.0 * freq / (2.0 * M_PI);
        ss[found] = (1.0 / v - 1.0 / max) / (1.0 - 1.0 / max);
        found++;
    }
    if (found == 2 && fabs(xs[1] - xs[0]) > 1e-12 && fabs(ss[1] - ss[0]) > 1e-9) {
        double a = (ss[1] - ss[0]) / (xs[1] - xs[0]); /* 1 / (hi - lo) */
        double lo = xs[0] - ss[0] / a;
        /* The fit through f32 factors is good to ~1e-7; configs use short
         * decimals (1, 4, 0.5), so keep 5 significant digits. */
        c->rope_scaling.low_freq_factor = round_sig5(lo);
        c->rope_scaling.high_freq_factor = round_sig5(lo + 1.0 / a);
    }
    if (!(c->rope_scaling.low_freq_factor > 0 &&
          c->rope_scaling.low_freq_factor < c->rope_scaling.high_freq_factor))
        goto mismatch;
    float *want = xmalloc((size_t)half * sizeof *want);
    llama_rope_freqs(c, want);
    int ok = 1;
    for (int64_t i = 0; i < half && ok; i++) {
        float v;
        memcpy(&v, p + 4 * i, 4);
        ok = fabsf(v - want[i]) <= 1e-4f * want[i];
    }
    free(want);
    if (ok)
        return 0;
mismatch:
    return memra_fail(err, "%s: tensor rope_freqs.weight does not hold llama3 rope factors "
                      "(no memra.rope.scaling keys to say otherwise)", g->what);
}

int config_from_gguf(const gguf_file *f, model_config *out, memra_err *err)
{
    model_config c;
    memset(&c, 0, sizeof c);
    memset(out, 0, sizeof *out);
    gguf_ctx g = {f, "", f->map.path ? f->map.path : "GGUF"};
    const char *arch = NULL;
    if (g_str(&g, "general.architecture", 0, &arch, err) != 0)
        return -1;
    if (!arch)
        return memra_fail(err, "%s: missing required key general.architecture", g.what);
    int fam = -1;
    for (int i = 0; i < FAMILY_COUNT; i++)
        if (strcmp(arch, family_archs[i]) == 0)
            fam = i;
    if (fam < 0)
        return memra_fail(err, "%s: unsupported general.architecture \"%s\" (supported: "
                          SUPPORTED_GGUF ")", g.what, arch);
    g.arch = arch;
    c.family = (model_family)fam;
    int gemma = c.family == FAMILY_GEMMA3;

    /* HF identity: ours when we wrote the file, else the family's. */
    const hf_type *ht = hf_type_default(c.family);
    const char *mt = NULL, *ha = NULL;
    if (g_str(&g, "memra.hf.model_type", 0, &mt, err) ||
        g_str(&g, "memra.hf.architecture", 0, &ha, err))
        return -1;
    if (mt) {
        const hf_type *t = hf_type_of(mt);
        if (!t || t->family != c.family)
            return memra_fail(err, "%s: memra.hf.model_type \"%s\" does not fit architecture "
                              "\"%s\"", g.what, mt, arch);
        ht = t;
    }
    if (copy_name(c.hf_model_type, sizeof c.hf_model_type, ht->model_type, g.what,
                  "memra.hf.model_type", err) ||
        copy_name(c.hf_architecture, sizeof c.hf_architecture, ha ? ha : ht->architecture,
                  g.what, "memra.hf.architecture", err))
        return -1;

    if (g_int(&g, "context_length", 1, 1, &c.n_ctx_train, err) ||
        g_int(&g, "embedding_length", 1, 1, &c.dim, err) ||
        g_int(&g, "block_count", 1, 1, &c.n_layers, err) ||
        g_int(&g, "feed_forward_length", 1, 1, &c.ffn_dim, err) ||
        g_int(&g, "attention.head_count", 1, 1, &c.n_heads, err))
        return -1;
    c.n_kv_heads = c.n_heads;
    if (g_int(&g, "attention.head_count_kv", 1, 0, &c.n_kv_heads, err))
        return -1;
    if (c.n_heads <= 0)
        return memra_fail(err, "%s: %s.attention.head_count must be positive", g.what, arch);
    c.head_dim = c.dim / c.n_heads;
    int64_t vlen = -1, rope_dims = -1;
    if (g_int(&g, "attention.key_length", 1, 0, &c.head_dim, err) ||
        g_int(&g, "attention.value_length", 1, 0, &vlen, err) ||
        g_int(&g, "rope.dimension_count", 1, 0, &rope_dims, err))
        return -1;
    if (vlen >= 0 && vlen != c.head_dim)
        return memra_fail(err, "%s: %s.attention.value_length %" PRId64 " differs from key_length "
                          "%" PRId64 " (not supported)", g.what, arch, vlen, c.head_dim);
    if (rope_dims >= 0 && rope_dims != c.head_dim)
        return memra_fail(err, "%s: %s.rope.dimension_count %" PRId64 " differs from the head "
                          "size %" PRId64 " (partial RoPE is not supported)", g.what, arch,
                          rope_dims, c.head_dim);
    c.rope_theta = 10000.0;
    if (g_num(&g, "attention.layer_norm_rms_epsilon", 1, 1, &c.norm_eps, err) ||
        g_num(&g, "rope.freq_base", 1, 0, &c.rope_theta, err))
        return -1;

    /* Vocab: the key, else the token list, else the embedding's rows. */
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    const gguf_tensor *embd = gguf_find_tensor(f, "token_embd.weight");
    c.n_vocab = -1;
    if (g_int(&g, "vocab_size", 1, 0, &c.n_vocab, err))
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
    if (g_bool(&g, "memra.tie_word_embeddings", 0, &c.tie_embeddings, err))
        return -1;
    c.attn_bias = c.family == FAMILY_QWEN2 || gguf_find_tensor(f, "blk.0.attn_q.bias") != NULL;
    if (g_bool(&g, "memra.attention.bias", 0, &c.attn_bias, err))
        return -1;
    c.qk_norm = c.family == FAMILY_QWEN3 || c.family == FAMILY_QWEN3_MOE || gemma;

    /* RoPE scaling. */
    const char *st = NULL, *mst = NULL;
    double scale_linear = 0;
    if (g_str(&g, "rope.scaling.type", 1, &st, err) ||
        g_num(&g, "rope.scale_linear", 1, 0, &scale_linear, err) ||
        g_str(&g, "memra.rope.scaling.type", 0, &mst, err))
        return -1;
    if (st && strcmp(st, "none") != 0) {
        if (g_num(&g, "rope.scaling.factor", 1, 1, &c.rope_scaling.factor, err))
            return -1;
        if (strcmp(st, "linear") == 0) {
            c.rope_scaling.kind = ROPE_SCALING_LINEAR;
        } else if (strcmp(st, "yarn") == 0) {
            double attn = 1.0;
            c.rope_scaling.kind = ROPE_SCALING_YARN;
            c.rope_scaling.original_ctx = c.n_ctx_train;
            c.rope_scaling.beta_fast = 32;
            c.rope_scaling.beta_slow = 1;
            if (g_int(&g, "rope.scaling.original_context_length", 1, 0,
                      &c.rope_scaling.original_ctx, err) ||
                g_num(&g, "rope.scaling.yarn_beta_fast", 1, 0, &c.rope_scaling.beta_fast, err) ||
                g_num(&g, "rope.scaling.yarn_beta_slow", 1, 0, &c.rope_scaling.beta_slow, err) ||
                g_num(&g, "rope.scaling.yarn_attn_factor", 1, 0, &attn, err))
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
        if (g_num(&g, "memra.rope.scaling.factor", 0, 1, &c.rope_scaling.factor, err) ||
            g_num(&g, "memra.rope.scaling.low_freq_factor", 0, 1,
                  &c.rope_scaling.low_freq_factor, err) ||
            g_num(&g, "memra.rope.scaling.high_freq_factor", 0, 1,
                  &c.rope_scaling.high_freq_factor, err) ||
            g_int(&g, "memra.rope.scaling.original_context_length", 0, 1,
                  &c.rope_scaling.original_ctx, err))
            return -1;
    } else if (c.rope_scaling.kind == ROPE_SCALING_NONE && c.family == FAMILY_LLAMA) {
        const gguf_tensor *rf = gguf_find_tensor(f, "rope_freqs.weight");
        if (rf) {
            if (c.head_dim <= 0 || c.head_dim > MAX_SIZE)
                return memra_fail(err, "%s: head size %" PRId64 " is out of range", g.what,
                                  c.head_dim);
            if (finite_pos(g.what, "rope.freq_base", c.rope_theta, err))
                return -1;
            if (llama3_from_rope_freqs(&g, rf, &c, err) != 0)
                return -1;
        }
    }

    if (c.family == FAMILY_QWEN3_MOE) {
        c.norm_topk_prob = 1; /* llama.cpp always renormalizes qwen3moe's top-k */
        if (g_int(&g, "expert_count", 1, 1, &c.n_experts, err) ||
            g_int(&g, "expert_used_count", 1, 1, &c.n_experts_used, err) ||
            g_int(&g, "expert_feed_forward_length", 1, 1, &c.moe_ffn_dim, err) ||
            g_bool(&g, "expert_weights_norm", 1, &c.norm_topk_prob, err))
            return -1;
    }
    if (g_int(&g, "attention.sliding_window", 1, 0, &c.sliding_window, err))
        return -1;
    if (gemma) {
        c.rope_local_theta = 10000.0;
        c.sliding_window_pattern = 6;
        /* llama.cpp's rule: 27B (62 layers) scales by dim/n_heads. */
        c.query_pre_attn_scalar =
            c.n_layers == 62 ? (double)(c.dim / c.n_heads) : (double)c.head_dim;
        if (g_num(&g, "rope.freq_base_swa", 1, 0, &c.rope_local_theta, err) ||
            g_int(&g, "memra.attention.sliding_window_pattern", 0, 0, &c.sliding_window_pattern,
                  err) ||
            g_num(&g, "memra.attention.query_pre_attn_scalar", 0, 0, &c.query_pre_attn_scalar,
                  err) ||
            g_num(&g, "final_logit_softcapping", 1, 0, &c.final_softcap, err) ||
            g_num(&g, "attn_logit_softcapping", 1, 0, &c.attn_softcap, err))
            return -1;
    }
    if (g_token(&g, "tokenizer.ggml.bos_token_id", &c.bos_id, err) ||
        g_token(&g, "tokenizer.ggml.eos_token_id", &c.eos_id, err))
        return -1;

    if (config_validate(&c, g.what, err) != 0)
        return -1;
    *out = c;
    return 0;
}

static void set_u32(gguf_writer *w, const char *arch, const char *key, int64_t v)
{
    char full[256];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    gguf_writer_set_u32(w, full, (uint32_t)v);
}

static void set_f32(gguf_writer *w, const char *arch, const char *key, double v)
{
    char full[256];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    gguf_writer_set_f32(w, full, (float)v);
}

void config_to_gguf(const model_config *c, gguf_writer *w)
{
    const char *arch = family_gguf_arch(c->family);
    const hf_type *ht = hf_type_default(c->family);
    gguf_writer_set_str(w, "general.architecture", arch);
    set_u32(w, arch, "vocab_size", c->n_vocab);
    set_u32(w, arch, "context_length", c->n_ctx_train);
    set_u32(w, arch, "embedding_length", c->dim);
    set_u32(w, arch, "block_count", c->n_layers);
    set_u32(w, arch, "feed_forward_length", c->ffn_dim);
    set_u32(w, arch, "attention.head_count", c->n_heads);
    set_u32(w, arch, "attention.head_count_kv", c->n_kv_heads);
    set_u32(w, arch, "attention.key_length", c->head_dim);
    set_u32(w, arch, "attention.value_length", c->head_dim);
    set_u32(w, arch, "rope.dimension_count", c->head_dim);
    set_f32(w, arch, "attention.layer_norm_rms_epsilon", c->norm_eps);
    set_f32(w, arch, "rope.freq_base", c->rope_theta);
    char key[256];
    switch (c->rope_scaling.kind) {
    case ROPE_SCALING_NONE:
        break;
    case ROPE_SCALING_LINEAR:
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        gguf_writer_set_str(w, key, "linear");
        set_f32(w, arch, "rope.scaling.factor", c->rope_scaling.factor);
        break;
    case ROPE_SCALING_YARN: {
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        gguf_writer_set_str(w, key, "yarn");
        set_f32(w, arch, "rope.scaling.factor", c->rope_scaling.factor);
        set_u32(w, arch, "rope.scaling.original_context_length", c->rope_scaling.original_ctx);
        set_f32(w, arch, "rope.scaling.yarn_beta_fast", c->rope_scaling.beta_fast);
        set_f32(w, arch, "rope.scaling.yarn_beta_slow", c->rope_scaling.beta_slow);
        double ratio = c->rope_scaling.attn_factor / yarn_mscale(c->rope_scaling.factor, 1.0);
        if (ratio != 1.0)
            set_f32(w, arch, "rope.scaling.yarn_attn_factor", ratio);
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
    if (c->family == FAMILY_QWEN3_MOE) {
        set_u32(w, arch, "expert_count", c->n_experts);
        set_u32(w, arch, "expert_used_count", c->n_experts_used);
        set_u32(w, arch, "expert_feed_forward_length", c->moe_ffn_dim);
        snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
        gguf_writer_set_bool(w, key, c->norm_topk_prob);
    }
    if (c->sliding_window > 0)
        set_u32(w, arch, "attention.sliding_window", c->sliding_window);
    if (c->family == FAMILY_GEMMA3) {
        set_f32(w, arch, "rope.freq_base_swa", c->rope_local_theta);
        gguf_writer_set_u32(w, "memra.attention.sliding_window_pattern",
                            (uint32_t)c->sliding_window_pattern);
        gguf_writer_set_f32(w, "memra.attention.query_pre_attn_scalar",
                            (float)c->query_pre_attn_scalar);
        if (c->final_softcap > 0)
            set_f32(w, arch, "final_logit_softcapping", c->final_softcap);
        if (c->attn_softcap > 0)
            set_f32(w, arch, "attn_logit_softcapping", c->attn_softcap);
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

static void set_int(json_t *o, const char *key, int64_t v)
{
    json_object_set_new(o, key, json_integer(v));
}

static void set_num(json_t *o, const char *key, double v)
{
    json_object_set_new(o, key, json_real(v));
}

json_t *config_to_hf(const model_config *c)
{
    const hf_type *ht = hf_type_default(c->family);
    if (c->hf_model_type[0] && hf_type_of(c->hf_model_type))
        ht = hf_type_of(c->hf_model_type);
    int mistral = strcmp(ht->model_type, "mistral") == 0;
    json_t *o = json_object();
    json_t *archs = json_array();
    json_array_append_new(archs,
                          json_string(c->hf_architecture[0] ? c->hf_architecture
                                                            : ht->architecture));
    json_object_set_new(o, "architectures", archs);
    json_object_set_new(o, "model_type", json_string(ht->model_type));
    set_int(o, "vocab_size", c->n_vocab);
    set_int(o, "hidden_size", c->dim);
    set_int(o, "intermediate_size", c->ffn_dim);
    set_int(o, "num_hidden_layers", c->n_layers);
    set_int(o, "num_attention_heads", c->n_heads);
    set_int(o, "num_key_value_heads", c->n_kv_heads);
    set_int(o, "head_dim", c->head_dim);
    set_int(o, "max_position_embeddings", c->n_ctx_train);
    set_num(o, "rms_norm_eps", c->norm_eps);
    set_num(o, "rope_theta", c->rope_theta);
    json_object_set_new(o, "tie_word_embeddings", json_boolean(c->tie_embeddings));
    if (c->family != FAMILY_QWEN2 && !mistral)
        json_object_set_new(o, "attention_bias", json_boolean(c->attn_bias));
    if (c->family == FAMILY_GEMMA3)
        json_object_set_new(o, "hidden_activation", json_string("gelu_pytorch_tanh"));
    else
        json_object_set_new(o, "hidden_act", json_string("silu"));
    json_object_set_new(o, "bos_token_id", c->bos_id >= 0 ? json_integer(c->bos_id) : json_null());
    json_object_set_new(o, "eos_token_id", c->eos_id >= 0 ? json_integer(c->eos_id) : json_null());
    json_t *rs = json_null();
    switch (c->rope_scaling.kind) {
    case ROPE_SCALING_NONE:
        break;
    case ROPE_SCALING_LINEAR:
        rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("linear"));
        set_num(rs, "factor", c->rope_scaling.factor);
        break;
    case ROPE_SCALING_LLAMA3:
        rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("llama3"));
        set_num(rs, "factor", c->rope_scaling.factor);
        set_num(rs, "low_freq_factor", c->rope_scaling.low_freq_factor);
        set_num(rs, "high_freq_factor", c->rope_scaling.high_freq_factor);
        set_int(rs, "original_max_position_embeddings", c->rope_scaling.original_ctx);
        break;
    case ROPE_SCALING_YARN:
        rs = json_object();
        json_object_set_new(rs, "rope_type", json_string("yarn"));
        set_num(rs, "factor", c->rope_scaling.factor);
        set_int(rs, "original_max_position_embeddings", c->rope_scaling.original_ctx);
        set_num(rs, "beta_fast", c->rope_scaling.beta_fast);
        set_num(rs, "beta_slow", c->rope_scaling.beta_slow);
        set_num(rs, "attention_factor", c->rope_scaling.attn_factor);
        break;
    }
    json_object_set_new(o, "rope_scaling", rs);
    if (mistral)
        json_object_set_new(o, "sliding_window",
                            c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
    if (c->family == FAMILY_QWEN2 || c->family == FAMILY_QWEN3 || c->family == FAMILY_QWEN3_MOE)
        json_object_set_new(o, "use_sliding_window", json_false());
    if (c->family == FAMILY_QWEN3_MOE) {
        set_int(o, "num_experts", c->n_experts);
        set_int(o, "num_experts_per_tok", c->n_experts_used);
        set_int(o, "moe_intermediate_size", c->moe_ffn_dim);
        json_object_set_new(o, "norm_topk_prob", json_boolean(c->norm_topk_prob));
        set_int(o, "decoder_sparse_step", 1);
        json_object_set_new(o, "mlp_only_layers", json_array());
    }
    if (c->family == FAMILY_GEMMA3) {
        set_num(o, "query_pre_attn_scalar", c->query_pre_attn_scalar);
        json_object_set_new(o, "sliding_window",
                            c->sliding_window > 0 ? json_integer(c->sliding_window) : json_null());
        set_int(o, "sliding_window_pattern", c->sliding_window_pattern);
        set_num(o, "rope_local_base_freq", c->rope_local_theta);
        json_object_set_new(o, "final_logit_softcapping",
                            c->final_softcap > 0 ? json_real(c->final_softcap) : json_null());
        json_object_set_new(o, "attn_logit_softcapping",
                            c->attn_softcap > 0 ? json_real(c->attn_softcap) : json_null());
    }
    json_object_set_new(o, "torch_dtype", json_string("bfloat16"));
    return o;
}
