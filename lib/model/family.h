/* A model family, described in one place: everything that sets it apart
 * from the shared decoder, as data and hooks that config.c, tensor_names.c,
 * contract.c and model.c ask instead of branching on the family.
 *
 * Each family's file (llama.c, qwen2.c, qwen3.c, qwen3_moe.c, gemma3.c)
 * defines one model_family_desc and the functions it points to; its row in
 * families.def registers it. What the shared code does for every family:
 *   - HF config.json: model_type, architectures, the sizes (hidden_size,
 *     num_hidden_layers, intermediate_size, heads, head_dim, vocab_size),
 *     max_position_embeddings, rms_norm_eps, tie_word_embeddings,
 *     attention_bias, the activation key, rope_theta / rope_scaling /
 *     rope_parameters, bos/eos ids, and the sanity checks;
 *   - GGUF: general.architecture, the <arch>.* shape, norm and rope keys,
 *     attention.sliding_window, the tokenizer's bos/eos, the memra.* keys;
 *   - tensors: the embedding, final norm, head and the q/k/v/o projections
 *     (weights and biases) under their common names (tensor_names.c);
 *   - forward: embedding, the attention sublayer (model_attention), the
 *     final norm, the head and the final soft-cap (model.c).
 * A hook left NULL means the family adds nothing there. */
#ifndef MEMRA_MODEL_FAMILY_H
#define MEMRA_MODEL_FAMILY_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"
#include "format/gguf.h"
#include "model/config.h"
#include "model/config_keys.h"
#include "model/contract.h"
#include "model/model.h"

/* One HF model_type of a family, with the defaults its transformers
 * configuration class gives the keys that are optional. */
typedef struct {
    const char *model_type, *architecture; /* "mistral", "MistralForCausalLM" */
    int64_t n_kv_heads, head_dim;          /* 0: n_heads, dim / n_heads */
    int64_t n_ctx;                         /* max_position_embeddings */
    double rope_theta;
    int tie;
    int64_t bos, eos;
    int64_t sliding_window; /* for the types that read sliding_window */
    /* vocab_size and num_attention_heads when absent; 0: the key is required */
    int64_t n_vocab, n_heads;
    int attention_bias_key; /* reads and writes "attention_bias" */
} family_hf_type;

/* A tensor the family names its own way (or has and others lack): gguf is
 * the name for a global tensor, else the suffix after "blk.N."; hf the name
 * (global), the suffix after "model.layers.N." (layer) or after
 * "model.layers.N.mlp.experts.E." (expert). hf NULL: GGUF-only. */
typedef struct {
    const char *gguf, *hf;
    int global;
    int expert; /* merged [n_experts, rows, cols] in GGUF, one per expert in HF */
} family_tensor_name;

/* An HF name prefix read as another (gemma3's multimodal checkpoints keep
 * the text model under language_model.model.). */
typedef struct {
    const char *from, *to;
} family_hf_prefix;

typedef struct model_family_desc model_family_desc;

struct model_family_desc {
    model_family id;
    const char *name;      /* "qwen3_moe" */
    const char *gguf_arch; /* general.architecture: "qwen3moe" */

    /* ---- HF config.json ---- */
    const family_hf_type *hf_types; /* the first is written when a config names none */
    size_t n_hf_types;
    /* A model_type whose "text_config" object holds this family's config
     * (gemma3's multimodal wrapper), or NULL. */
    const char *hf_wrapper_type;
    /* A model_type of a drafter checkpoint made of this family's layers
     * ("gemma4_assistant"): its "text_config" is read as this family's
     * config, then hf_assistant_read reads the drafter's own keys from the
     * top level (config_is_assistant); hf_assistant_write writes them. */
    const char *hf_assistant_type;
    const char *hf_assistant_architecture; /* its class: "Gemma4AssistantForCausalLM" */
    int (*hf_assistant_read)(const json_t *cfg, const char *what, model_config *c,
                             memra_err *err);
    void (*hf_assistant_write)(const model_config *c, json_t *o);
    /* The drafter's general.architecture in a GGUF ("gemma4-assistant",
     * llama.cpp's), or NULL: its keys are the family's under that name
     * plus embedding_length_out (backbone_dim) and nextn_predict_layers. */
    const char *gguf_assistant_arch;
    const char *hf_act_key, *hf_act; /* "hidden_act", "silu" */
    /* Keys after the shared ones, in the order transformers reads them;
     * t is the model_type read. */
    int (*hf_read)(const json_t *obj, const family_hf_type *t, const char *what,
                   model_config *c, memra_err *err);
    /* Keys config_to_hf adds after rope_scaling, for a config of type t. */
    void (*hf_write)(const model_config *c, const family_hf_type *t, json_t *o);

    /* ---- GGUF metadata ---- */
    /* Keys after the shared ones (and attention.sliding_window). */
    int (*gguf_read)(const cfg_gguf *g, model_config *c, memra_err *err);
    void (*gguf_write)(const model_config *c, const char *arch, gguf_writer *w);

    /* Checks on the family's own fields, after the shared ones. */
    int (*validate)(const model_config *c, const char *what, memra_err *err);

    /* ---- features the config readers set ---- */
    int attn_bias_always; /* q/k/v biases whatever the config says (qwen2) */
    int qk_norm;          /* RMSNorm over each head of q and k */
    /* Layers slide in a pattern, one global every sliding_window_pattern,
     * the sliding ones with their own RoPE base rope_local_theta (gemma3);
     * else a sliding_window applies to every layer. */
    int sliding_pattern;
    int moe; /* routed experts in place of the dense FFN */
    int partial_rope; /* RoPE may turn only the first rope_dim dims of a head */
    int no_dense_ffn; /* every FFN is routed: no intermediate_size / feed_forward_length */
    int recurrent;    /* some layers are gated DeltaNet layers (config_layer_recurrent) */
    int own_rope_parameters; /* hf_read reads rope_parameters itself (gemma4's kinds) */
    /* GGUF keys that may hold one value per layer (head_count_kv,
     * feed_forward_length): the shared reader takes layer 0's, gguf_read
     * the rest */
    int gguf_per_layer_keys;

    /* ---- tensors ---- */
    /* Every tensor of a config of this family (contract.h's helpers). */
    void (*contract)(const model_config *c, tensor_contract *k);
    const family_tensor_name *tensor_names; /* beyond the common names */
    size_t n_tensor_names;
    /* A family whose tensor names this one has too (looked up after its own). */
    const model_family_desc *names_base;
    const family_hf_prefix *hf_prefixes;
    size_t n_hf_prefixes;
    /* HF name prefixes of tensors that are not run (a vision tower, an MTP
     * block): binding skips them and counts them as ignored. */
    const char *const *hf_ignored;
    size_t n_hf_ignored;
    /* The same for GGUF names (an assistant's centroid head). */
    const char *const *gguf_ignored;
    size_t n_gguf_ignored;
    /* An MTP block (config mtp_layers): the HF prefix of its layer
     * ("mtp.layers.", then the block's index) and the HF names of its own
     * tensors by GGUF suffix (gguf: "nextn.eh_proj.weight", hf:
     * "mtp.fc.weight"). NULL: the family has no MTP block. */
    const char *mtp_hf_prefix;
    const family_tensor_name *mtp_names;
    size_t n_mtp_names;

    /* ---- forward pass ---- */
    model_forward_fn forward; /* the layers; model_forward adds the head */
    /* One decoder layer l on state.x (x += mixer; x += ffn), for running an
     * MTP block (l = n_layers) outside forward. NULL: no MTP support. */
    void (*layer)(model *m, int l, const bk_batch *rows);
    bk_act act;
    int gguf_rope_permuted;   /* GGUF Q/K rows in llama.cpp's interleaved order */
    int norm_adds_one;        /* RMSNorm is x * (1 + w); HF stores w, GGUF w + 1 */
    int embed_scale_sqrt_dim; /* embeddings multiplied by sqrt(dim) */
    /* Layer l's attention where it differs from every layer global with
     * scale head_dim^-1/2, sliding_window and attn_softcap: *local_rope
     * set when the layer uses the rope_local_theta tables. NULL: none. */
    void (*layer_attention)(const model_config *c, int layer, bk_attn *a, int *local_rope);
    int v_norm; /* V RMS-normalized per head, without a weight (gemma4) */
    /* Its forward pass runs every head and FFN column through
     * model_attention, model_ffn and model_moe_ffn, so its layers split
     * over tensor-parallel ranks (tensor_parallel.c). */
    int tensor_parallel;
    /* Whether a GGUF of config c carries the generated rope_freqs.weight
     * (llama.cpp's frequency factors); when it does and out is not NULL,
     * its [contract length] values. NULL: never. */
    int (*gguf_rope_freqs)(const model_config *c, float *out);
};

/* Every registered descriptor (the rows of families.def). */
#define MEMRA_FAMILY(id, desc) extern const model_family_desc desc;
#include "model/families.def"
#undef MEMRA_FAMILY

/* ---- the registry (families.c) ---- */

/* The descriptor of f, or NULL when f is no family. */
const model_family_desc *family_desc(model_family f);
/* The family whose general.architecture is arch, or NULL. */
const model_family_desc *family_by_gguf_arch(const char *arch);
/* The family whose drafter's GGUF architecture (gguf_assistant_arch) is
 * arch, or NULL. */
const model_family_desc *family_by_gguf_assistant_arch(const char *arch);
/* The family reading HF model_type mt (and *type, its entry), or NULL. */
const model_family_desc *family_by_hf_type(const char *mt, const family_hf_type **type);
/* The family whose multimodal wrapper model_type is mt, or NULL. */
const model_family_desc *family_by_hf_wrapper(const char *mt);
/* The family whose drafter model_type (hf_assistant_type) is mt, or NULL. */
const model_family_desc *family_by_hf_assistant(const char *mt);
/* "llama, mistral, qwen2, ..." (every model_type, wrappers after their
 * family's) and "llama, qwen2, ..." (every architecture), for errors. */
void family_list_hf_types(char *out, size_t n);
void family_list_gguf_archs(char *out, size_t n);
/* The names of the families with sliding_pattern set, for errors. */
void family_list_sliding_pattern(char *out, size_t n);
/* The family's generated rope_freqs.weight for config c (gguf_rope_freqs):
 * 1 when a GGUF carries it (and out, when not NULL, holds its values),
 * else 0. */
int family_rope_freqs(const model_config *c, float *out);

/* The shared pre-norm decoder layers (llama.c), which qwen2 and qwen3 use
 * as they are: x += attn(rmsnorm(x)); x += ffn_glu(rmsnorm(x)). */
void llama_forward(model *m, const bk_batch *rows, const int32_t *tokens);
/* qwen3's per-layer attention tensors and pre-FFN norm, shared with qwen3_moe. */
void qwen3_attention_contract(const model_config *c, tensor_contract *k, int l);

/* qwen3_5's hybrid half, shared with qwen3_5_moe (qwen3_5.c): the config
 * keys of the DeltaNet layers and the layer pattern, their checks, and per
 * layer the input norm, the mixer (DeltaNet or gated attention) and the
 * post-attention norm, as tensors and as a forward step (x += mixer). */
int qwen3_5_hybrid_hf_read(const json_t *obj, const char *what, model_config *c,
                           memra_err *err);
void qwen3_5_hybrid_hf_write(const model_config *c, json_t *o);
int qwen3_5_hybrid_gguf_read(const cfg_gguf *g, model_config *c, memra_err *err);
void qwen3_5_hybrid_gguf_write(const model_config *c, const char *arch, gguf_writer *w);
int qwen3_5_hybrid_validate(const model_config *c, const char *what, memra_err *err);
void qwen3_5_mixer_contract(const model_config *c, tensor_contract *k, int l);
void qwen3_5_mixer_step(model *m, int l, const bk_batch *rows);
/* The MTP block's own tensor names, shared by both qwen3_5 families. */
extern const family_tensor_name qwen3_5_mtp_names[4];

#endif
