/* The normalized model config: the hyperparameters of every supported
 * family, whatever the source (HF config.json or GGUF metadata).
 * Fields a family does not use stay 0. */
#ifndef MEMRA_MODEL_CONFIG_H
#define MEMRA_MODEL_CONFIG_H

#include <jansson.h>
#include <stdint.h>

#include "core/err.h"
#include "format/gguf.h"

/* FAMILY_LLAMA, FAMILY_QWEN2 ...: one per row of the registry
 * (families.def); each family's descriptor is in family.h. */
typedef enum {
#define MEMRA_FAMILY(id, desc) FAMILY_##id,
#include "model/families.def"
#undef MEMRA_FAMILY
    FAMILY_COUNT
} model_family;

typedef enum {
    ROPE_SCALING_NONE = 0,
    ROPE_SCALING_LINEAR,
    ROPE_SCALING_LLAMA3,
    ROPE_SCALING_YARN,
} rope_scaling_kind;

typedef struct {
    model_family family;
    char hf_architecture[64]; /* "LlamaForCausalLM" ... */
    char hf_model_type[32];   /* "llama", "qwen3", "gemma3_text" ... */

    int64_t n_vocab;
    int64_t dim;        /* hidden_size */
    int64_t n_layers;
    int64_t n_heads;
    int64_t n_kv_heads;
    int64_t head_dim;   /* explicit in qwen3/gemma3, else dim / n_heads */
    int64_t ffn_dim;    /* intermediate_size */
    int64_t n_ctx_train; /* max_position_embeddings */
    double norm_eps;
    double rope_theta;
    int tie_embeddings;
    int attn_bias; /* bias on q/k/v projections (qwen2; llama's attention_bias) */
    int qk_norm;   /* RMSNorm on q and k per head (qwen3, qwen3_moe, gemma3) */

    struct {
        rope_scaling_kind kind;
        double factor;
        int64_t original_ctx; /* original_max_position_embeddings */
        double low_freq_factor, high_freq_factor; /* llama3 */
        double beta_fast, beta_slow, attn_factor;   /* yarn */
    } rope_scaling;

    /* qwen3_moe */
    int64_t n_experts, n_experts_used, moe_ffn_dim;
    int norm_topk_prob;

    /* gemma3 */
    double rope_local_theta;      /* rope base of the sliding-window layers */
    int64_t sliding_window;       /* tokens; 0 = none */
    int64_t sliding_window_pattern; /* every Nth layer is global (6) */
    double query_pre_attn_scalar;
    double attn_softcap, final_softcap; /* 0 = none */

    /* qwen3_5: gated DeltaNet (linear attention) layers among full attention ones */
    int64_t full_attn_interval; /* layer l attends in full when (l + 1) % it == 0; 0: all do */
    int64_t rope_dim;           /* head dims RoPE turns (partial rotary); 0: head_dim */
    int64_t rope_sections[4];   /* M-RoPE sections in pairs (text positions ignore them) */
    int64_t lin_conv_k;         /* linear_conv_kernel_dim */
    int64_t lin_n_k_heads, lin_n_v_heads; /* linear_num_{key,value}_heads */
    int64_t lin_k_dim, lin_v_dim;         /* linear_{key,value}_head_dim */
    int attn_out_gate;          /* q_proj emits [q | gate] per head; out *= sigmoid(gate) */
    int64_t shared_ffn_dim;     /* qwen3_5_moe: the shared expert's width (0: none) */
    /* MTP (NextN) blocks the checkpoint carries after its layers: one more
     * full-attention layer of the model's kind that predicts the token
     * after next (HF mtp_num_hidden_layers, GGUF nextn_predict_layers, whose
     * block_count counts them). The model never runs them; the MTP drafter
     * does (engine_opts.mtp). 0 or 1. */
    int64_t mtp_layers;

    /* gemma4: the full-attention layers have their own head size and (with
     * attn_k_eq_v) KV heads, and take V from the K projection; the last
     * n_kv_shared layers compute no K/V and attend over the K/V of the last
     * earlier layer of their kind; per-layer embeddings (PLE) of ple_dim
     * values a layer feed every layer; the shared layers' FFN is twice as
     * wide with double_wide_ffn; the full layers turn rope_full_angles of
     * their head_dim / 2 frequency pairs ("proportional" RoPE). */
    int64_t head_dim_full;      /* 0: head_dim */
    int64_t n_kv_heads_full;    /* 0: n_kv_heads */
    int attn_k_eq_v;
    int64_t n_kv_shared;
    int64_t ple_dim, ple_vocab; /* hidden_size_per_layer_input, vocab_size_per_layer_input */
    int double_wide_ffn;
    int64_t rope_full_angles;   /* 0: every pair */
    int last_layer_full;        /* the last layer attends in full whatever the pattern */
    int moe_with_dense;         /* routed experts beside the dense FFN (enable_moe_block) */
    /* A gemma4_assistant checkpoint: a drafter whose layers read a Gemma 4
     * model's K/V and hidden state instead of computing K/V of their own
     * (every layer n_kv_shared). backbone_dim is the model's hidden size
     * (0: not an assistant); use_ordered_embeddings' centroid head is
     * read but not run (the tied head is). */
    int64_t backbone_dim;
    int ordered_embeddings;

    int64_t bos_id, eos_id; /* -1 when the config does not say */

    /* What the checkpoint says it is for, with llama.cpp's pooling_type
     * values: 0 nothing (a language model), 1 mean, 2 CLS, 3 last-token
     * pooling (an embedding model), 4 rank (a reranker). GGUF
     * <arch>.pooling_type; an HF dir's sentence-transformers Pooling
     * module (checkpoint.c). */
    int64_t pooling;
} model_config;

enum { MODEL_POOL_NONE = 0, MODEL_POOL_MEAN = 1, MODEL_POOL_CLS = 2, MODEL_POOL_LAST = 3,
       MODEL_POOL_RANK = 4 };

/* Whether layer l is a recurrent (gated DeltaNet) layer, not attention. */
static inline int config_layer_recurrent(const model_config *c, int64_t l)
{
    /* an MTP layer (l >= n_layers) attends in full */
    return l < c->n_layers && c->full_attn_interval > 0 && (l + 1) % c->full_attn_interval != 0;
}

/* Whether layer l of a family with a sliding pattern attends in full:
 * every sliding_window_pattern-th layer, and gemma4's last one. */
static inline int config_layer_full(const model_config *c, int64_t l)
{
    if (c->sliding_window_pattern <= 0)
        return 1;
    return (l + 1) % c->sliding_window_pattern == 0 ||
           (c->last_layer_full && l == c->n_layers - 1);
}

/* gemma4: layer l's attention head size, KV heads, and the layer whose K/V
 * it reads (itself, unless it is one of the last n_kv_shared layers). */
static inline int64_t config_layer_head_dim(const model_config *c, int64_t l)
{
    return c->head_dim_full > 0 && config_layer_full(c, l) ? c->head_dim_full : c->head_dim;
}

static inline int64_t config_layer_kv_heads(const model_config *c, int64_t l)
{
    return c->n_kv_heads_full > 0 && config_layer_full(c, l) ? c->n_kv_heads_full
                                                             : c->n_kv_heads;
}

static inline int64_t config_layer_kv_source(const model_config *c, int64_t l)
{
    int64_t first = c->n_layers - c->n_kv_shared;
    if (c->n_kv_shared <= 0 || l < first)
        return l;
    for (int64_t j = first - 1; j >= 0; j--)
        if (config_layer_full(c, j) == config_layer_full(c, l))
            return j;
    return -1; /* config_validate refuses such a config */
}

/* gemma4: layer l's FFN width (twice intermediate_size on the shared
 * layers with double_wide_ffn). */
static inline int64_t config_layer_ffn_dim(const model_config *c, int64_t l)
{
    return c->double_wide_ffn && c->n_kv_shared > 0 && l >= c->n_layers - c->n_kv_shared
               ? 2 * c->ffn_dim
               : c->ffn_dim;
}

/* The paged KV cache's geometry: the layers keeping K/V of their own
 * (attention layers not reading another's) and the floats a token keeps
 * in each, the widest such layer's n_kv_heads * head_dim (a narrower
 * layer uses the front of its row). */
static inline void config_kv_layout(const model_config *c, int64_t *n_kv_layers, int64_t *kv_dim)
{
    *n_kv_layers = 0;
    *kv_dim = 0;
    for (int64_t l = 0; l < c->n_layers; l++) {
        if (config_layer_recurrent(c, l) || config_layer_kv_source(c, l) != l)
            continue;
        int64_t w = config_layer_kv_heads(c, l) * config_layer_head_dim(c, l);
        ++*n_kv_layers;
        *kv_dim = w > *kv_dim ? w : *kv_dim;
    }
}

/* Whether c is a drafter of another model's (gemma4_assistant). */
static inline int config_is_assistant(const model_config *c) { return c->backbone_dim > 0; }

/* The head dims RoPE turns (rope_dim, else all of head_dim). */
static inline int64_t config_rope_dim(const model_config *c)
{
    return c->rope_dim > 0 ? c->rope_dim : c->head_dim;
}

/* From the family's descriptor (families.c); "?" for no family. */
const char *family_name(model_family f);      /* "llama", "qwen3_moe" ... */
const char *family_gguf_arch(model_family f); /* "llama", "qwen2", "qwen3", "qwen3moe", "gemma3" */

/* From a parsed HF config.json; `what` names it in errors. Unknown
 * model_type or missing required keys are errors naming the key. */
int config_from_hf(const json_t *cfg, const char *what, model_config *out, memra_err *err);
/* From GGUF metadata (general.architecture and the <arch>.* keys). */
int config_from_gguf(const gguf_file *f, model_config *out, memra_err *err);
/* Write general.architecture and every <arch>.* key other GGUF readers expect. */
void config_to_gguf(const model_config *c, gguf_writer *w);
/* An HF config.json object that config_from_hf reads back to the same config. */
json_t *config_to_hf(const model_config *c);

#endif
