/* A family's tensor contract: every tensor a checkpoint of a given config
 * must (or may) hold, with its role, layer, shape and the transform that
 * converting between HF and GGUF applies to it. Binding checks a
 * checkpoint's tensors against the contract: every required tensor present,
 * none twice, none unknown, every shape as the config says.
 *
 * Shapes are outermost first and the same logical shape in both namings:
 * attn_q is [n_heads*head_dim, dim] whether it is HF q_proj or GGUF attn_q
 * (GGUF's ne[] is the reverse). Merged GGUF experts are [n_experts, rows,
 * cols]; HF names each expert's [rows, cols] separately.
 *
 * Each family file (llama.c, qwen2.c, ...) declares its tensors through the
 * contract_add_* helpers below, in the function its descriptor's contract
 * points to (family.h); contract.c turns them into either naming. */
#ifndef MEMRA_MODEL_CONTRACT_H
#define MEMRA_MODEL_CONTRACT_H

#include <stdint.h>

#include "core/err.h"
#include "model/checkpoint.h"
#include "model/config.h"

typedef enum {
    ROLE_EMBED = 0,
    ROLE_OUTPUT,
    ROLE_OUTPUT_NORM,
    ROLE_ROPE_FREQS,
    ROLE_ATTN_NORM,
    ROLE_ATTN_Q,
    ROLE_ATTN_K,
    ROLE_ATTN_V,
    ROLE_ATTN_O,
    ROLE_ATTN_Q_BIAS,
    ROLE_ATTN_K_BIAS,
    ROLE_ATTN_V_BIAS,
    ROLE_ATTN_O_BIAS,
    ROLE_ATTN_Q_NORM,
    ROLE_ATTN_K_NORM,
    ROLE_ATTN_POST_NORM, /* gemma3: after attention, before the residual add */
    ROLE_FFN_NORM,       /* the norm before the FFN */
    ROLE_FFN_GATE,
    ROLE_FFN_UP,
    ROLE_FFN_DOWN,
    ROLE_FFN_POST_NORM, /* gemma3: after the FFN, before the residual add */
    ROLE_MOE_ROUTER,
    ROLE_MOE_GATE_EXPS,
    ROLE_MOE_UP_EXPS,
    ROLE_MOE_DOWN_EXPS,
    /* a gated DeltaNet layer (qwen3_5's linear attention) */
    ROLE_SSM_QKV,     /* in_proj_qkv [2 n_k k_dim + n_v v_dim][dim] */
    ROLE_SSM_Z,       /* in_proj_z: the output gate [n_v v_dim][dim] */
    ROLE_SSM_BETA,    /* in_proj_b [n_v][dim] */
    ROLE_SSM_ALPHA,   /* in_proj_a [n_v][dim] */
    ROLE_SSM_CONV,    /* conv1d [conv_dim][conv_k] (HF [conv_dim][1][conv_k]) */
    ROLE_SSM_DT_BIAS, /* [n_v] */
    ROLE_SSM_A,       /* [n_v]: HF A_log, GGUF -exp(A_log) */
    ROLE_SSM_NORM,    /* the gated RMSNorm [v_dim] (plain w, never 1 + w) */
    ROLE_SSM_OUT,     /* out_proj [dim][n_v v_dim] */
    /* a shared expert beside the routed ones (qwen3_5_moe) */
    ROLE_FFN_GATE_SHEXP, /* [shared_ffn_dim][dim] */
    ROLE_FFN_UP_SHEXP,
    ROLE_FFN_DOWN_SHEXP, /* [dim][shared_ffn_dim] */
    ROLE_MOE_SHARED_GATE, /* [dim]: sigmoid(x . w) scales the shared expert (HF [1][dim]) */
    /* gemma4 */
    ROLE_LAYER_SCALE,     /* [1]: the residual stream's scale at the end of the layer */
    ROLE_PLE_EMBED,       /* [ple_vocab][n_layers * ple_dim]: per-layer token embeddings */
    ROLE_PLE_PROJ,        /* [n_layers * ple_dim][dim]: their projection of the embedding */
    ROLE_PLE_PROJ_NORM,   /* [ple_dim] */
    ROLE_PLE_GATE,        /* [ple_dim][dim]: a layer's gate on its per-layer input */
    ROLE_PLE_OUT,         /* [dim][ple_dim]: back to the residual stream */
    ROLE_PLE_POST_NORM,   /* [dim] */
    /* gemma4's MoE layers: experts stacked in HF too, beside the dense FFN */
    ROLE_MOE_GATE_UP_STACK, /* [n_experts][2 moe_ffn_dim][dim]: gate rows, then up rows */
    ROLE_MOE_DOWN_STACK,    /* [n_experts][dim][moe_ffn_dim] */
    ROLE_MOE_ROUTER_SCALE,  /* [dim]: on the RMS-normed router input */
    ROLE_MOE_EXPERT_SCALE,  /* [n_experts]: on each chosen expert's weight */
    ROLE_FFN_PRE_NORM_2,    /* [dim]: the experts' input norm */
    ROLE_FFN_POST_NORM_1,   /* [dim]: the dense FFN's output norm */
    ROLE_FFN_POST_NORM_2,   /* [dim]: the experts' output norm */
    /* an MTP (NextN) block: its layer's tensors take the usual roles at
     * layer n_layers; these are its own (qwen3_5: mtp.fc, the two pre-fc
     * norms, mtp.norm) */
    ROLE_MTP_EH_PROJ,       /* [dim][2 dim]: over [enorm(embedding) | hnorm(hidden)] */
    ROLE_MTP_ENORM,         /* [dim] */
    ROLE_MTP_HNORM,         /* [dim] */
    ROLE_MTP_HEAD_NORM,     /* [dim]: before the shared output head */
    /* a drafter reading another model's state (gemma4_assistant) */
    ROLE_ASSIST_PRE_PROJ,   /* [dim][2 backbone_dim] over [embedding | hidden] of the model */
    ROLE_ASSIST_POST_PROJ,  /* [backbone_dim][dim]: the hidden state the next draft reads */
    ROLE_COUNT
} tensor_role;

/* "embed", "attn_q", "moe_gate_exps" ... */
const char *role_name(tensor_role r);
/* The coarse group census reports bytes in: "embed", "output", "attention",
 * "ffn", "moe_experts", "moe_router", "norms" (with gemma4's layer scales),
 * "rope_freqs", "per_layer_embed" (gemma4's PLE table and projections). */
const char *role_group(tensor_role r);
int role_is_expert(tensor_role r);
/* Experts stacked into one tensor in every naming (gemma4's). */
int role_is_expert_stack(tensor_role r);

/* What converting HF -> GGUF does to a tensor's values (GGUF -> HF undoes it). */
typedef enum {
    XFORM_NONE = 0,
    /* llama Q and K (weights and biases): llama.cpp's converter reorders each
     * head's rows from HF's rotate-half layout to interleaved pairs. */
    XFORM_ROPE_PERMUTE,
    /* gemma3 norms: HF stores w and computes x*(1+w); GGUF stores w+1. */
    XFORM_NORM_SHIFT,
    /* qwen3_5's A: HF stores A_log, GGUF -exp(A_log). */
    XFORM_NEG_EXP,
} tensor_xform;

/* qwen3_5's value heads, in llama.cpp's GGUF order: HF groups the n_v
 * value heads by the key head they read (head h reads key head h / r, r =
 * n_v / n_k); llama.cpp's converter tiles them (its head p = i_r n_k + i_k
 * is HF's i_k r + i_r, reading key head p % n_k). Applied to the rows (or,
 * for cols, the columns) [offset, offset + n_v * width) of a tensor, in
 * blocks of width. n_k 0: none. */
typedef struct {
    int n_k, n_v;
    int64_t offset, width;
    int cols;
} tensor_vtile;

#define CONTRACT_NAME_MAX 96

typedef struct {
    char name[CONTRACT_NAME_MAX]; /* in the contract's naming */
    tensor_role role;
    int layer;  /* -1 for global tensors */
    int expert; /* HF per-expert entries: the expert; else -1 */
    int n_dims;
    int64_t shape[TENSOR_MAX_DIMS]; /* outermost first */
    int optional;  /* output.weight when tied; rope_freqs */
    int generated; /* computed from the config, not trained (rope_freqs) */
    tensor_xform xform;
    int xform_heads; /* XFORM_ROPE_PERMUTE: heads of the tensor (n_heads or n_kv_heads) */
    tensor_vtile vtile; /* value heads tiled in GGUF (applied with xform) */
} contract_entry;

/* Whether converting between HF and GGUF changes the entry's values. */
static inline int contract_entry_transforms(const contract_entry *e)
{
    return e->xform != XFORM_NONE || e->vtile.n_k > 0;
}

typedef struct {
    model_family family;
    checkpoint_format naming;
    int n, cap;
    contract_entry *entries;
    int64_t n_layers;   /* the model's layers and its MTP blocks after them */
    int64_t mtp_first;  /* the first MTP block's layer index (the model's n_layers) */
    /* (layer + 1) * ROLE_COUNT + role -> first entry of that role and layer, or -1 */
    int *first;
    /* open-addressing name index over entries */
    int *hash;
    uint32_t hash_cap;
} tensor_contract;

/* The full contract of c's family in the given naming. Fails only on a
 * config whose family has no contract. */
int contract_build(const model_config *c, checkpoint_format naming, tensor_contract *out,
                   memra_err *err);
void contract_free(tensor_contract *k);
/* The entry with this name, or NULL. */
const contract_entry *contract_find(const tensor_contract *k, const char *name);
/* Entry index for (role, layer, expert) (expert -1 except for HF per-expert
 * entries), or -1. */
int contract_index(const tensor_contract *k, tensor_role role, int layer, int expert);

/* ---- binding ---- */

typedef struct {
    tensor_contract contract;
    const tensor_view **bound; /* contract.n entries; NULL for an absent optional one */
    /* tensors skipped as carrying nothing (tensor_name_hf_is_ignorable) */
    int n_ignored;
    /* the MTP block's tensors were bound (the config names one and the
     * checkpoint carries it whole) */
    int has_mtp;
} contract_binding;

/* Bind a checkpoint's tensors (views in `naming`) to c's contract. Exits -1,
 * naming the tensor, on: a required tensor missing, a name given twice, a
 * tensor not in the contract, or a shape other than the config's (both
 * shapes in the message). On success every view is bound to exactly one
 * entry (or ignored); `out` must be freed with contract_binding_free. */
int contract_bind(const model_config *c, checkpoint_format naming, const tensor_view *t, int n,
                  contract_binding *out, memra_err *err);
void contract_binding_free(contract_binding *b);
/* The bound view for (role, layer, expert), or NULL when absent. */
const tensor_view *contract_get(const contract_binding *b, tensor_role role, int layer,
                                int expert);

typedef struct {
    uint64_t by_role[ROLE_COUNT];
    uint64_t total;
    /* Bytes a decode step reads: every weight once, except the token
     * embedding and gemma4's per-layer embedding table (one row each) --
     * unless the output head is tied, when the embedding is read in full
     * as the head -- the experts, of which only n_experts_used / n_experts
     * are read, and the tensors contract_entry_unused names. */
    uint64_t per_token;
} contract_bytes;

/* Whether a checkpoint may hold e but the forward pass never reads it:
 * K/V projections and k_norm of a layer that reads another layer's K/V
 * (gemma4's shared layers; transformers ignores them too), and an MTP
 * block's tensors (only its drafter reads them). */
int contract_entry_unused(const model_config *c, const contract_entry *e);

void contract_bytes_of(const contract_binding *b, const model_config *c, contract_bytes *out);

/* ---- transforms (over f32 arrays; src and dst must not overlap) ---- */

/* llama.cpp's Q/K permutation: rows = n_head * head_dim, each head's rows
 * viewed as (2, head_dim/2) and transposed to (head_dim/2, 2); inverse
 * undoes it. cols is 1 for a bias. Returns -1 when rows is not a multiple
 * of 2 * n_head. */
int transform_rope_permute(const float *src, float *dst, int64_t rows, int64_t cols, int n_head,
                           int inverse);
/* The value-head tiling of a [rows][cols] tensor (t as contract_entry's),
 * HF -> GGUF order, or back with inverse. */
void transform_vtile(const tensor_vtile *t, const float *src, float *dst, int64_t rows,
                     int64_t cols, int inverse);
/* dst[i] = src[i] + shift (gemma3: +1 to GGUF, -1 back to HF). */
void transform_norm_shift(const float *src, float *dst, int64_t n, float shift);
/* Apply an entry's transform to its n_elements values, HF -> GGUF when
 * to_gguf, else GGUF -> HF (copies when the entry has none). */
int contract_transform(const contract_entry *e, int to_gguf, const float *src, float *dst,
                       int64_t n_elements, memra_err *err);

/* ---- for the family files ---- */

#define CE_OPTIONAL 1u
#define CE_GENERATED 2u
#define CE_NORM_SHIFT 4u
#define CE_ROPE_PERMUTE 8u /* with heads given to contract_add_2d/_1d via xform_heads */
#define CE_NEG_EXP 16u     /* XFORM_NEG_EXP */
#define CE_HF_MID1 32u     /* HF keeps a 2-d entry as [rows][1][cols] (a depthwise conv) */
#define CE_HF_ROW1 64u     /* HF keeps a 1-d entry as [1][n] (a one-output projection) */

/* Set the value-head tiling of the entry just added (nothing when
 * n_k == n_v). */
void contract_set_vtile(tensor_contract *k, int n_k, int n_v, int64_t offset, int64_t width,
                        int cols);

/* gguf_name: the GGUF name ("output_norm.weight") for layer -1, else the
 * suffix after "blk.N." ("attn_q.weight"). */
void contract_add_1d(tensor_contract *k, tensor_role role, int layer, const char *gguf_name,
                     int64_t n, unsigned flags, int xform_heads);
void contract_add_2d(tensor_contract *k, tensor_role role, int layer, const char *gguf_name,
                     int64_t rows, int64_t cols, unsigned flags, int xform_heads);
/* Merged experts [n_experts, rows, cols]; HF naming gets one [rows, cols]
 * entry per expert. */
/* A tensor of three dims, the same in both namings. */
void contract_add_3d(tensor_contract *k, tensor_role role, int layer, const char *gguf_name,
                     int64_t d0, int64_t d1, int64_t d2);
void contract_add_experts(tensor_contract *k, tensor_role role, int layer,
                          const char *gguf_name, int64_t n_experts, int64_t rows, int64_t cols);
/* An MTP block at layer c->n_layers: eh_proj, enorm, hnorm and the head
 * norm (GGUF blk.N.nextn.*; HF names from the family's mtp_names). The
 * family adds the block's layer tensors at that layer itself. Every MTP
 * entry is optional: contract_bind takes the block whole or not at all. */
void contract_add_mtp(tensor_contract *k, const model_config *c, unsigned norm_flags);
/* token_embd, output_norm and output (optional when tied). */
void contract_add_globals(tensor_contract *k, const model_config *c, unsigned norm_flags);

/* llama3 rope scaling as llama.cpp's rope_freqs.weight holds it: for each
 * of the head_dim/2 frequencies, the factor its wavelength is divided by
 * (1 for high frequencies, `factor` for low ones, smooth in between). */
void llama_rope_freqs(const model_config *c, float *out);

#endif
