/* The model, in four structs (DESIGN.md): the config (model_config, in
 * config.h), the weights (one bk_weight per tensor, shapes in the comments,
 * each a view into the checkpoint's map), the run state (activations for
 * one step of up to `cap` rows, and the paged KV cache), and the model
 * itself: the three plus the backend and the bytes a decode step streams.
 *
 * A family writes its forward pass once against the backend ops, in its
 * own file (llama_forward in llama.c, which qwen2 and qwen3 share;
 * qwen3_moe.c; gemma3.c) and names it in its descriptor (family.h):
 * embedding and layers, leaving the final residual stream in state.x.
 * model_forward adds the final norm and the head.
 *
 * Layout facts the forward passes rely on, fixed at load from the family's
 * descriptor and the checkpoint format, so no weight is ever rewritten:
 *   - a llama-family GGUF holds Q/K rows permuted by llama.cpp's converter,
 *     so RoPE pairs adjacent elements there; HF llama weights and every
 *     other family pair element i with i + head_dim/2 (rotate_half);
 *   - gemma3 computes x * (1 + w): HF stores w (norm_offset 1), GGUF stores
 *     w + 1 (norm_offset 0). */
#ifndef MEMRA_MODEL_MODEL_H
#define MEMRA_MODEL_MODEL_H

#include <stdint.h>

#include "backend/backend.h"
#include "core/err.h"
#include "backend/kv_cache.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/contract.h"

typedef struct {
    bk_weight attn_norm;      /* [dim] */
    bk_weight wq;             /* [n_heads * head_dim][dim] */
    bk_weight wk, wv;         /* [n_kv_heads * head_dim][dim] */
    bk_weight wo;             /* [dim][n_heads * head_dim] */
    bk_weight bq;             /* [n_heads * head_dim]     attn_bias only */
    bk_weight bk, bv;         /* [n_kv_heads * head_dim]  attn_bias only */
    bk_weight bo;             /* [dim]                    llama attention_bias only */
    bk_weight q_norm, k_norm; /* [head_dim]               qk_norm only */
    bk_weight attn_post_norm; /* [dim]                    gemma3 */
    bk_weight ffn_norm;       /* [dim] */
    bk_weight ffn_gate;       /* [ffn_dim][dim]           dense FFN */
    bk_weight ffn_up;         /* [ffn_dim][dim] */
    bk_weight ffn_down;       /* [dim][ffn_dim] */
    bk_weight ffn_post_norm;  /* [dim]                    gemma3 */
    bk_weight moe_router;     /* [n_experts][dim]         qwen3_moe */
    bk_weight *moe_gate;      /* n_experts x [moe_ffn_dim][dim] */
    bk_weight *moe_up;        /* n_experts x [moe_ffn_dim][dim] */
    bk_weight *moe_down;      /* n_experts x [dim][moe_ffn_dim] */
    /* a gated DeltaNet layer (qwen3_5), with conv_dim = 2 n_k k_dim + n_v v_dim */
    bk_weight ssm_qkv;        /* [conv_dim][dim] */
    bk_weight ssm_z;          /* [n_v * v_dim][dim] */
    bk_weight ssm_beta;       /* [n_v][dim] */
    bk_weight ssm_alpha;      /* [n_v][dim] */
    bk_weight ssm_conv;       /* [conv_dim * conv_k]: a vector, channel-major */
    bk_weight ssm_dt_bias;    /* [n_v] */
    bk_weight ssm_a;          /* [n_v]: A_log (HF) or -exp(A_log) (GGUF) */
    bk_weight ssm_norm;       /* [v_dim] */
    bk_weight ssm_out;        /* [dim][n_v * v_dim] */
    /* the shared expert (qwen3_5_moe) */
    bk_weight shexp_gate, shexp_up; /* [shared_ffn_dim][dim] */
    bk_weight shexp_down;     /* [dim][shared_ffn_dim] */
    bk_weight shexp_inp;      /* [dim]: a 1 x dim projection, its sigmoid the expert's scale */
    /* gemma4: the per-layer input branch, and the layer's output scale */
    bk_weight ple_gate;       /* [ple_dim][dim] */
    bk_weight ple_out;        /* [dim][ple_dim] */
    bk_weight ple_post_norm;  /* [dim] */
    float layer_scale;        /* read at load; 1 where the family has none */
    /* gemma4's MoE layers (experts beside the dense FFN; moe_gate/up/down
     * view its stacked tensors, moe_router is the router) */
    bk_weight moe_router_scale; /* [dim] */
    bk_weight moe_expert_scale; /* [n_experts] */
    bk_weight ffn_pre_norm_2, ffn_post_norm_1, ffn_post_norm_2; /* [dim] */
} layer_weights;

/* An MTP (NextN) block's own tensors; its decoder layer is layers[n_layers]. */
typedef struct {
    bk_weight eh_proj;      /* [dim][2 dim] over [enorm(embed(next)) | hnorm(h)] */
    bk_weight enorm, hnorm; /* [dim] */
    bk_weight head_norm;    /* [dim]: before the shared output head */
} mtp_weights;

typedef struct {
    bk_weight embed;        /* [n_vocab][dim] */
    bk_weight output_norm;  /* [dim] */
    bk_weight output;       /* [n_vocab][dim]; the embedding when tied */
    /* gemma4's per-layer embeddings (ple_dim > 0) */
    bk_weight ple_embed;     /* [ple_vocab][n_layers * ple_dim] */
    bk_weight ple_proj;      /* [n_layers * ple_dim][dim] */
    bk_weight ple_proj_norm; /* [ple_dim] */
    layer_weights *layers;  /* [n_layers], and the MTP block's layer after them */
    mtp_weights mtp;        /* model.mtp only */
    /* an assistant only (config_is_assistant) */
    bk_weight assist_pre;   /* [dim][2 backbone_dim] */
    bk_weight assist_post;  /* [backbone_dim][dim] */
} model_weights;

typedef struct {
    int cap;             /* rows one step holds (the prefill chunk) */
    float *x;            /* [cap][dim] the residual stream */
    float *xb, *xb2;     /* [cap][dim] a sublayer's normed input and its output */
    /* sized for the widest layer where layers differ (gemma4) */
    float *q;            /* [cap][n_heads * head_dim] */
    float *k, *v;        /* [cap][n_kv_heads * head_dim] */
    float *att;          /* [cap][n_heads * head_dim] attention before the output projection */
    float *hb, *hb2;     /* [cap][ffn_dim] FFN hidden */
    float *logits;       /* [cap][n_vocab] */
    float *host_hidden;  /* [cap][dim] host copy for the hidden-state hook */
    /* attn_out_gate only: */
    float *qg;           /* [cap][n_heads * 2 * head_dim] q and gate as q_proj gives them */
    float *gate;         /* [cap][n_heads * head_dim] */
    /* recurrent families only (DeltaNet layers): */
    float *lin_qkv;      /* [cap][conv_dim] */
    float *lin_z, *lin_o; /* [cap][n_v * v_dim] the output gate; the mixer's output */
    float *lin_b, *lin_a; /* [cap][n_v] */
    /* a shared expert only: */
    float *shared;       /* [cap][dim] its output */
    float *shared_gate;  /* [cap] its gate before the sigmoid */
    /* per-layer embeddings only (gemma4): */
    float *ple;          /* [cap][n_layers * ple_dim] the token's rows of the PLE table */
    float *ple_mix;      /* [cap][n_layers * ple_dim] every layer's per-layer input */
    float *ple_gate;     /* [cap][ple_dim] one layer's gated branch */
    /* routed experts beside the dense FFN only (gemma4 MoE): */
    float *moe_router_in; /* [cap][dim] the router's input */
    float *moe_out;       /* [cap][dim] the dense branch's normed output */
    /* an MTP block only: */
    float *mtp_cat;       /* [cap][2 dim] the eh_proj input; an assistant's [cap][2 backbone_dim] */
    /* an assistant only (config_is_assistant): */
    float *assist_e;      /* [cap][backbone_dim] the model's embedding of the next tokens */
    /* an MTP block's or an assistant's hidden-state input, [cap][dim] or
     * [cap][backbone_dim] (model_mtp_input, model_assistant_input) */
    float *h_in;
    /* a tensor-parallel rank only (model.tp > 1): its sublayer input from
     * the leader, and its share of the sublayer's output (the leader's
     * tp_in receives the other ranks' shares), [cap][dim] */
    float *tp_in, *tp_part;
    /* last, so a pipeline stage's activations are the bytes before it
     * (model.stage_state) */
    kv_cache kv;         /* K and V of every attention layer, paged; the recurrent state */
} run_state;

/* Called with the hidden states of a step, in transformers' convention:
 * index 0 is the embedding output, index l (1 <= l < n_layers) the output
 * of layer l-1, and index n_layers the last layer's output after the final
 * norm. h is host memory, [rows->n][dim]. */
typedef void (*model_hidden_fn)(void *ctx, int index, const bk_batch *rows, int64_t dim,
                                const float *h);

typedef struct model model;
typedef void (*model_forward_fn)(model *m, const bk_batch *rows, const int32_t *tokens);

struct model {
    model_config config;
    model_weights weights;
    run_state state;
    backend *bk;
    uint64_t bytes_per_token; /* weights a decode step reads (contract_bytes_of) */

    /* fixed at load */
    checkpoint_format format;
    model_forward_fn forward_layers;
    float norm_offset;        /* added to every norm weight (gemma3 HF: 1) */
    float embed_scale;        /* gemma3: sqrt(dim); else 1 */
    float norm_eps;
    bk_act act;
    bk_attn *attn;            /* [n_layers]; .layer: the layer's KV index (attention layers) */
    bk_delta *delta;          /* [n_layers]: the recurrent layers' shapes (recurrent families) */
    const bk_rope **rope;     /* [n_layers]: rope_global or rope_local */
    bk_rope rope_global, rope_local;
    float *inv_freq_global, *inv_freq_local; /* [head_dim / 2]; gemma4's global: [head_dim_full / 2] */
    int n_kv_layers;          /* layers with K and V of their own (not the recurrent ones,
                               * nor gemma4's layers that share another's) */
    int64_t kv_dim;           /* K (or V) floats a token keeps per KV layer: the widest
                               * layer's n_kv_heads * head_dim; narrower layers use the
                               * front of the row */
    /* v_norm families: V is RMS-normed per head without a weight; these
     * are weights of ones, [head_dim] and [head_dim_full] */
    float *ones;
    bk_weight v_norm_w[2];
    size_t state_floats;      /* recurrent state per sequence (0: none) */

    model_hidden_fn hidden_fn;
    void *hidden_ctx;
    int hidden_from; /* indices below it are not reported (each is a read back) */

    int mtp;         /* the MTP block is loaded (weights.mtp, layers[n_layers], a KV layer) */
    /* An assistant (config_is_assistant) drafts for this model: its
     * embedding table, K/V and hidden states are what it reads. */
    const model *target;
    /* Every step reads the rows' final-normed hidden states back into
     * state.host_hidden (what an MTP block takes as input). */
    int keep_hidden;

    /* Pipeline parallel (model_init given a pipeline backend, backend.h):
     * stage s runs layers [stage_first[s], stage_first[s + 1]) on
     * backend_stage(pipe, s), with activations of its own (stage_state[s];
     * its kv unused: the one cache's tables are state.kv). bk, state's
     * activations and [layer_begin, layer_end) are the current stage's
     * (stage_now): the forward passes run the layers in that range, the
     * embedding only when it starts at 0. One stage: pipe is bk, the range
     * every layer, stage_state NULL. */
    backend *pipe;
    int n_stages, stage_now;
    /* Stages or ranks in processes of their own (backend_pipeline_join):
     * where the head runs in another process, an activation of this
     * process's that stands in for the logits (never read: the pipeline's
     * act_read and sample bring the other process's); else NULL. */
    float *remote_logits;
    int stage_first[BACKEND_MAX_STAGES + 1];
    run_state *stage_state;
    int layer_begin, layer_end;

    /* Tensor parallel (model_opts.tp > 1 on a group backend of tp members;
     * tensor_parallel.c, docs/decisions/0029): rank r holds a 1/tp share
     * of every layer's heads and FFN columns (rank_layers[r], rank_attn[r])
     * and activations of its own (rank_state[r]); the leader, the last
     * rank, also runs the rest (embedding, norms, residual stream, head),
     * and sums the ranks' shares of each attention and FFN output in rank
     * order. bk, weights.layers, attn and state's activations are the
     * current rank's (rank_now); outside a sublayer, the leader's. */
    int tp, rank_now;
    int tp_inside;            /* running one rank's share of a sublayer (model_sublayer) */
    int bind_rank;            /* the rank whose share bind_weight cuts (loading) */
    int bind_here;            /* ... and whether this process runs it (backend_stage_local:
                               * a share another process runs is not cut here) */
    layer_weights *rank_layers[BACKEND_MAX_STAGES];
    bk_attn *rank_attn[BACKEND_MAX_STAGES];
    bk_delta *rank_delta[BACKEND_MAX_STAGES]; /* recurrent families */
    run_state *rank_state;
    void **tp_copies;         /* column shares copied out of the checkpoint, owned */
    int n_tp_copies;

    /* The head the steps run (model_head_new), NULL: the whole output
     * matrix. */
    const struct model_head *head;
};

/* A head of some of the output matrix's rows: a vocabulary-trimmed draft
 * head (docs/SPECULATIVE.md). A step run with it (model.head) multiplies
 * the final-normed rows by those rows alone, soft-caps them as the full
 * head's logits are, and spreads them over the whole vocabulary with
 * every other id at -inf, so sampling, bias and penalties see ids as
 * always, and an id's logit is the one the full head gives it (the same
 * op on the same row). */
typedef struct model_head {
    bk_weight w;     /* [n][dim]: the output matrix's rows ids[0, n), in that order */
    uint8_t *rows;   /* w's bytes, owned */
    int32_t n;
    int32_t *map;    /* [n_vocab] in the backend's memory: each id's row of w, or -1 */
    float *logits;   /* [cap][n] in the backend's memory */
} model_head;

/* The head of the output rows ids[0, n) (distinct ids below n_vocab;
 * copied). Its rows stay in the backend's memory until the backend is
 * destroyed (a backend frees no single weight); the rest goes with
 * model_head_free, which must come before model_free. Refused on a model
 * split over devices (--pp, --tp). */
int model_head_new(model *m, const int32_t *ids, int32_t n, model_head **out, memra_err *err);
void model_head_free(model *m, model_head *h);

typedef struct {
    int cap;            /* rows per step */
    kv_type kv_type;
    int kv_block_size;  /* tokens per KV block */
    int kv_blocks;      /* blocks in the pool */
    int state_slots;    /* sequences holding recurrent state at once (recurrent families) */
    int mtp;            /* load the checkpoint's MTP block (model_forward_mtp) */
    int tp;             /* > 1: tensor-parallel ranks, one per member of the group
                         * backend (backend_pipeline_create), instead of stages */
    /* An assistant checkpoint (config_is_assistant) drafts for this model,
     * on its backend and KV cache; kv_* and state_slots are then unused. */
    const model *target;
} model_opts;

/* Bind the weights (views, never copied), check each with the backend,
 * and allocate the run state. b must outlive the model. On a pipeline
 * backend the layers are split evenly over its stages (the embedding on
 * the first, the final norm and head on the last); a model whose layers
 * reach across layers (gemma4's per-layer inputs and shared K/V), an MTP
 * block or an assistant is refused there. */
int model_init(model *m, const model_config *c, const contract_binding *b,
               checkpoint_format format, backend *bk, const model_opts *o, memra_err *err);
void model_free(model *m);

/* One step: rows->n <= state.cap tokens, whose KV blocks are reserved.
 * When logits is not NULL, the logits of rows [logits_from, n) are written
 * there, [n - logits_from][n_vocab]. */
void model_forward(model *m, const bk_batch *rows, const int32_t *tokens, int logits_from,
                   float *logits);
/* model_forward leaving the logits in the backend's memory: returns the
 * activation holding rows [logits_from, n) ([n - logits_from][n_vocab]),
 * or NULL when logits_from >= n (no head run). For sampling on the
 * device (backend_ops.sample). */
float *model_forward_logits(model *m, const bk_batch *rows, const int32_t *tokens, int logits_from);

/* The MTP block on rows->n rows: row i stands at position rows->pos[i] of
 * its sequence, next[i] is the token after that position and h the
 * model's final-normed hidden state there ([n][dim], host memory; when
 * drafting further ahead, the block's own output of the row before).
 * Writes the block's K/V at those positions (its own KV layer). With
 * logits (host), the logits of rows [logits_from, n), [n - logits_from]
 * [n_vocab]; with h_out (host, [n][dim]), the block's output after its
 * norm, which the head reads. Needs model_opts.mtp. */
void model_forward_mtp(model *m, const bk_batch *rows, const int32_t *next, const float *h,
                       int logits_from, float *logits, float *h_out);
/* model_forward_mtp leaving every row's logits in the backend's memory
 * (returned, [n][n_vocab]); h NULL: the rows' hidden states were put in
 * ahead of the step (model_mtp_input). */
float *model_forward_mtp_logits(model *m, const bk_batch *rows, const int32_t *next,
                                const float *h, float *h_out);
/* The hidden states of n MTP rows ([n][dim] host) into the block's input
 * ahead of a step (a graphed step cannot hold an upload). */
void model_mtp_input(model *m, const float *h, int n);

/* An assistant (gemma4_assistant, model_opts.target) on rows->n rows: row
 * i drafts for the model's sequence rows->seq[i] whose newest position in
 * the cache is rows->pos[i]; next[i] is the token after it (not run) and
 * h its hidden state there ([n][backbone_dim] host memory: the model's
 * final-normed one for the first draft, then the assistant's own h_out).
 * Reads the model's K/V, writes none. With logits (host), the logits of
 * rows [logits_from, n), [n - logits_from][n_vocab]; with h_out (host,
 * [n][backbone_dim]), the hidden state the next draft reads. */
void model_forward_assistant(model *m, const bk_batch *rows, const int32_t *next,
                             const float *h, int logits_from, float *logits, float *h_out);
/* model_forward_assistant leaving every row's logits in the backend's
 * memory: returns them ([n][n_vocab]), for sampling on the device. */
float *model_forward_assistant_logits(model *m, const bk_batch *rows, const int32_t *next,
                                      const float *h, float *h_out);
/* The hidden states of n assistant rows into its input ahead of a step
 * (host [n][backbone_dim]): model_forward_assistant with h NULL then
 * reads them there, and the step has no upload of its own (a graphed
 * step cannot hold one). */
void model_assistant_input(model *m, const float *h, int n);

/* ---- for the family forward passes ---- */

/* A sublayer of layer l on `in` [n][dim], into out [n][dim]: what a family
 * runs between a norm and the residual add. */
typedef void (*model_share_fn)(model *m, int l, const bk_batch *rows, int n, const float *in,
                               float *out);
/* Run f once, or over the tensor-parallel ranks: each runs its share (its
 * heads and columns) on its copy of `in`, and the shares are summed in
 * rank order into out. f must be linear in the ranks' shares: matmuls
 * over its heads or columns, and per-row scales every rank computes from
 * `in` alike. Inside f, model_attention, model_ffn, model_moe_ffn and
 * model_delta_net run the current rank's share. model_attention,
 * model_ffn, model_moe_ffn and model_delta_net are such sublayers. */
void model_sublayer(model *m, model_share_fn f, int l, const bk_batch *rows, int n,
                    const float *in, float *out);

/* The dense FFN of layer l (ffn_gate, ffn_up, ffn_down, the family's
 * activation) on `in`, into out ([n][dim]). */
void model_ffn(model *m, int l, int n, const float *in, float *out);

/* Report the residual stream x to the hidden-state hook, if set. */
void model_report_hidden(model *m, int index, const bk_batch *rows, const float *x);
/* The attention sublayer of layer l on normed input `in`, into out
 * ([n][dim], before any post-norm and the residual add). With
 * attn_out_gate, q_proj's gate half gates the output (sigmoid). */
void model_attention(model *m, int l, const bk_batch *rows, const float *in, float *out);
/* Layer l's routed experts (the backend's ffn_moe: softmax, top-k, the
 * config's renormalization) on `in`, into out ([n][dim]). */
void model_moe_ffn(model *m, int l, int n, const float *in, float *out);
/* The same, routed on router_in ([n][dim]) instead of `in`, each chosen
 * weight times the layer's per-expert scale when it has one (gemma4). */
void model_moe_ffn_routed(model *m, int l, int n, const float *in, const float *router_in,
                          float *out);
/* The gated DeltaNet sublayer of recurrent layer l (bk_delta), likewise. */
void model_delta_net(model *m, int l, const bk_batch *rows, const float *in, float *out);


/* RoPE inverse frequencies [head_dim / 2] for base theta, as transformers
 * computes them in f32; with `scaled`, the config's rope scaling (linear,
 * llama3, yarn) is applied and *attn_factor set (yarn; else 1). */
void model_rope_inv_freq(const model_config *c, double theta, int scaled, float *inv_freq,
                         float *attn_factor);
/* transformers' "proportional" RoPE (gemma4's full layers): of a head's
 * head_dim / 2 pairs the first `angles` turn at theta^(-2i / head_dim), the
 * others not at all (inverse frequency 0); inv_freq is [head_dim / 2]. */
void model_rope_inv_freq_partial(int head_dim, int angles, double theta, float *inv_freq);

#endif
