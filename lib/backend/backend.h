/* The op interface every backend implements, and the forward passes in
 * lib/model are written against.
 *
 * Ops are coarse on purpose (DESIGN.md): the q/k/v projections of an
 * attention block are one op, per-head norm + RoPE is one op, KV append +
 * attention is one op, gate + up + activation + down is one op, a whole
 * routed-expert FFN is one op. A backend is free to fuse inside an op; the
 * CPU backend is the plain reference that the others are checked against.
 *
 * Activations are f32 arrays the backend allocates (host memory on CPU,
 * device memory elsewhere); the forward code only passes them between ops
 * and reads results back with act_read. Rows are tokens: an activation of
 * "[n][dim]" holds n rows of dim floats, row-major.
 *
 * Weights are bk_weight: a row-major matrix [rows][cols] (or a vector) in
 * its stored format, viewing the checkpoint's map. weight_prepare gives a
 * backend the chance to upload or repack it once at load. */
#ifndef MEMRA_BACKEND_BACKEND_H
#define MEMRA_BACKEND_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "backend/kv_cache.h"
#include "numerics/sample_math.h"
#include "format/dtype.h"

typedef struct {
    const char *name;      /* the checkpoint's tensor name, for errors */
    dtype type;
    int64_t rows, cols;    /* a vector is 1 x n */
    size_t row_bytes;      /* bytes of one stored row */
    const uint8_t *data;   /* NULL: the weight is absent (an optional bias) */
    void *dev;             /* the backend's own copy, if it makes one (it then reads data
                            * only in weight_prepare) */
    /* The CPU fast path's copy in its panel layout (backend/cpu/cpu_panel.h),
     * made by its weight_prepare, or NULL; rows of packed_row_bytes. */
    const uint8_t *packed;
    size_t packed_row_bytes;
} bk_weight;

static inline int bk_weight_present(const bk_weight *w) { return w && w->data; }

/* The rows of one forward step: row i is token i, at position pos[i] of
 * sequence seq[i]. Rows of one sequence are consecutive positions, in
 * order; a step may mix sequences (batched decode). */
typedef struct {
    int n;
    const int32_t *pos; /* [n] */
    kv_seq *const *seq; /* [n] */
} bk_batch;

typedef enum {
    ROPE_PAIR_NEOX = 0,    /* element i pairs with i + head_dim/2 (HF rotate_half) */
    ROPE_PAIR_ADJACENT,    /* element 2i pairs with 2i+1 (llama.cpp's permuted llama Q/K) */
} rope_pairing;

/* One RoPE table: pair i turns by pos * inv_freq[i]; cos and sin are
 * multiplied by attn_factor (YaRN's attention scaling; 1 otherwise). */
typedef struct {
    rope_pairing pairing;
    int n_freqs;            /* head_dim / 2 */
    const float *inv_freq;  /* [n_freqs] */
    float attn_factor;
} bk_rope;

typedef enum { BK_ACT_SILU = 0, BK_ACT_GELU_TANH } bk_act;

/* The shape and numerics of one attention layer. */
typedef struct {
    int layer;         /* index into the KV cache */
    int n_heads, n_kv_heads, head_dim;
    float scale;       /* on q.k before softcap and softmax */
    float softcap;     /* 0: none; else scores = softcap * tanh(scores / softcap) */
    int64_t window;    /* 0: full causal; else key j is seen from i when i - j < window */
    /* RoPE turns q at its row's position plus this, while the row still
     * attends over keys up to its position: a query that reads a cache it
     * does not extend (k and v NULL), standing past the newest key it sees
     * (gemma4_assistant: 1). 0 for every layer that stores K/V. */
    int q_ahead;
    /* The first of the cache row's KV heads these heads are: a
     * tensor-parallel rank's share of the heads keeps its K/V at head
     * kv_head0 onwards of each row; 0 otherwise. */
    int kv_head0;
} bk_attn;

/* A routed-expert FFN layer (qwen3_moe). */
typedef struct {
    const bk_weight *router;     /* [n_experts][dim] */
    const bk_weight *gate, *up;  /* n_experts weights, each [ffn][dim] */
    const bk_weight *down;       /* n_experts weights, each [dim][ffn] */
    int n_experts, n_used;
    int norm_topk;               /* renormalize the chosen probabilities to sum 1 */
    bk_act act;
    /* NULL: the router reads the op's x; else its own input [n][dim]
     * (gemma4 routes on a normed, scaled copy of what the experts read) */
    const float *router_x;
    /* NULL, or [n_experts]: each chosen expert's weight (after the
     * renormalization) times its entry (gemma4's per_expert_scale) */
    const bk_weight *expert_scale;
} bk_moe;

/* A gated DeltaNet layer's token mixer after its input projections
 * (qwen3_5's linear-attention layers), over each row's sequence state
 * (kv_seq.state_slot; the state of a row at position 0 starts from zero):
 *   1. a causal depthwise conv of kernel conv_k over each channel of
 *      qkv = [q | k | v], its last conv_k - 1 inputs kept in the state,
 *      then SiLU;
 *   2. q and k L2-normalized per head (x / sqrt(sum x^2 + 1e-6)), q then
 *      times k_dim^-1/2; value head h reads q/k head h / (n_v / n_k), or
 *      h % n_k when the value heads are tiled (llama.cpp's GGUF order);
 *   3. per value head, g = -exp(A_log) softplus(alpha + dt_bias) and
 *      beta = sigmoid(beta_in); the state S [k_dim][v_dim] decays by e^g,
 *      then S += k (beta (v - S^T k))^T, and o = S^T q;
 *   4. o = rmsnorm(o) * norm * silu(z) per value head.
 * A sequence's rows run in order; rows of different sequences never
 * meet, so a row's result does not depend on the rest of the step. */
typedef struct {
    size_t state_off;      /* floats into a sequence's state slot where this layer's begins */
    int n_k_heads, n_v_heads, k_dim, v_dim, conv_k;
    int tiled;                /* value head h reads key head h % n_k_heads */
    const bk_weight *conv;    /* a vector [conv_dim * conv_k], channel-major; conv_dim =
                               * 2 n_k_heads k_dim + n_v_heads v_dim */
    const bk_weight *dt_bias; /* [n_v_heads] */
    const bk_weight *a;       /* [n_v_heads]: A_log when a_is_log, else -exp(A_log) (GGUF) */
    int a_is_log;
    const bk_weight *norm;    /* [v_dim] */
    float eps;
} bk_delta;

/* Floats of recurrent state one bk_delta layer keeps per sequence: the
 * conv window [conv_k - 1][conv_dim], then S [n_v_heads][k_dim][v_dim]. */
static inline size_t bk_delta_state_floats(int n_k_heads, int n_v_heads, int k_dim, int v_dim,
                                           int conv_k)
{
    size_t conv_dim = 2 * (size_t)n_k_heads * (size_t)k_dim + (size_t)n_v_heads * (size_t)v_dim;
    return (size_t)(conv_k - 1) * conv_dim + (size_t)n_v_heads * (size_t)k_dim * (size_t)v_dim;
}

/* A pipeline stage's or tensor-parallel rank's part of the cache: its
 * attention layers' K/V are KV layers [kv_lo, kv_lo + kv_n), and of each
 * row the values [kv_col_lo, kv_col_lo + kv_cols) (kv_cols 0: the whole
 * row); its recurrent layers' state the floats [state_lo, state_lo +
 * state_n) of each sequence's slot. */
typedef struct {
    int kv_lo, kv_n;
    int64_t kv_col_lo, kv_cols;
    size_t state_lo, state_n;
} bk_cache_window;

/* Sampling on the device as the last part of a step (bk_step.sample):
 * backend_ops.sample's request, run by the backend after the step's ops,
 * so a graphed step replays the forward and the sampling as one graph.
 * The engine fills everything but `out`, `rc` and `err` before step_begin
 * (the lists do not depend on the logits), and `logits` after the ops. */
typedef struct {
    float *logits;          /* the logits in the backend's memory, [n_rows][n_vocab] */
    int n_rows;
    int64_t n_vocab;
    const smp_row *rows;    /* [n_rows]; bias_at / pen_at / mask_at index the lists */
    const smp_bias *bias;
    const smp_pen *pen;
    const uint32_t *mask;   /* the rows' allowed-token masks (smp_row.n_mask words each) */
    smp_outcome *out;       /* [n_rows] host: filled once the step is done */
    /* Set by the backend: 0, or -1 when the request itself was bad (a list
     * out of range: err says which; the step's ops still ran and the
     * backend has not failed). */
    int rc;
    memra_err err;
} bk_sample_req;

/* One forward step as the engine runs it (backend_ops.step_begin). */
typedef struct {
    const bk_batch *rows;
    const int32_t *tokens;  /* [rows->n] host ids */
    /* 1: the rows are prompt tokens, a run of consecutive positions of one
     * sequence (a prompt chunk) or several runs of distinct sequences (a
     * packed step: engine_forward_packed); a backend may compute them in a
     * way whose rounding depends on the step's rows (a GEMM over them),
     * never on anything else. 0: decode rows, each row's result the same
     * bits whatever else the step holds. */
    int prefill;
    int max_blocks;         /* the most KV blocks one sequence can hold */
    float *logits;          /* host destination of the step's logits, or NULL */
    size_t n_logits;        /* floats the step reads into it */
    /* The step's rows' final-normed hidden states go to this host memory
     * too (model.keep_hidden: n_hidden floats, read before the logits;
     * an assistant's next hidden state), or NULL. */
    float *hidden;
    size_t n_hidden;
    /* Which forward the step runs, where one backend runs several (a
     * model, and an assistant drafting for it): steps of different
     * forwards are never replayed for each other. NULL: the model's. */
    const void *forward_id;
    /* The engine allows the step to be captured and replayed: its only
     * reads are the logits, at the end, and before them the hidden states
     * when hidden is set (no hidden-state hook), or it samples them on the
     * device (sample) and reads the outcomes only. */
    int graph_ok;
    /* NULL, or sample the step's logits on the device before the step is
     * done (only given to a backend with the sample op). The logits then
     * stay in the backend's memory: logits is NULL. */
    bk_sample_req *sample;
    /* NULL, or the step keeps its logits in the backend's memory for a
     * sample op the engine runs after it (its lists were not ready when
     * the step began): the engine sets *dev_logits to them after the ops,
     * and a backend that ran the whole step itself (a replay) sets it to
     * where that step left them. Never with sample or logits. */
    float **dev_logits;
} bk_step;

typedef struct backend backend;

typedef struct {
    void (*destroy)(backend *b);
    /* Check a weight's type is one this backend reads and make it ready
     * (upload, repack). Fails naming the tensor and its type. */
    int (*weight_prepare)(backend *b, bk_weight *w, memra_err *err);
    float *(*act_alloc)(backend *b, size_t n_floats);
    void (*act_free)(backend *b, float *p);
    /* Copy n floats of an activation to host memory. */
    void (*act_read)(backend *b, const float *src, float *host_dst, size_t n);
    /* Copy n floats of host memory into an activation (an MTP block's
     * hidden-state input). Not during a graphed step. */
    void (*act_write)(backend *b, float *dst, const float *host_src, size_t n);

    /* out[i] = table[tokens[i]] * scale; tokens are host ids, in range. */
    void (*embed)(backend *b, const bk_weight *table, const int32_t *tokens, int n, float scale,
                  float *out);
    /* RMSNorm of n rows of w->cols values: out = x / rms(x) * (w + w_offset). */
    void (*rmsnorm)(backend *b, const float *x, int n, const bk_weight *w, float w_offset,
                    float eps, float *out);
    /* out[n][w->rows] = x[n][w->cols] . w^T (+ bias when present). */
    void (*matmul)(backend *b, const bk_weight *w, const bk_weight *bias, const float *x, int n,
                   float *out);
    /* The attention block's projections: q = x wq^T + bq, k = ..., v = ... */
    void (*attn_qkv)(backend *b, const bk_weight *wq, const bk_weight *wk, const bk_weight *wv,
                     const bk_weight *bq, const bk_weight *bk, const bk_weight *bv,
                     const float *x, int n, float *q, float *k, float *v);
    /* Per head: RMSNorm with q_norm / k_norm when present (weights over
     * head_dim, + w_offset), then RoPE at each row's position. k NULL: q
     * only (a layer reading another layer's K/V). */
    void (*qk_norm_rope)(backend *b, float *q, float *k, const bk_batch *rows,
                         const bk_attn *a, const bk_weight *q_norm, const bk_weight *k_norm,
                         float w_offset, float eps, const bk_rope *rope);
    /* Store each row's k and v in its sequence's KV cache at its position,
     * then out = softmax(causal masked q.k) . v for every row and head.
     * k and v are [n][n_kv_heads * head_dim], which may be less than the
     * cache's kv_dim (a layer narrower than the widest: the front of each
     * row). k and v NULL: store nothing, attend over what layer a->layer
     * holds (gemma4's layers sharing an earlier layer's K/V). */
    void (*attention)(backend *b, const bk_attn *a, const bk_batch *rows, const float *q,
                      const float *k, const float *v, float *out);
    /* out = down(act(gate x) * up x); hb, hb2 are [n][gate->rows] scratch. */
    void (*ffn_glu)(backend *b, const bk_weight *gate, const bk_weight *up,
                    const bk_weight *down, bk_act act, const float *x, int n, float *hb,
                    float *hb2, float *out);
    /* out = sum over the chosen experts of weight * expert(x), experts in
     * ascending id order. */
    void (*ffn_moe)(backend *b, const bk_moe *m, const float *x, int n, float *out);
    /* x[i] += y[i] for n floats. */
    void (*add)(backend *b, float *x, const float *y, size_t n);
    /* x [n][x_cols] *= sigmoid(g): g is [n][x_cols] (elementwise) or
     * [n][1] (one gate per row). */
    void (*mul_sigmoid)(backend *b, float *x, const float *g, int n, int64_t x_cols,
                        int64_t g_cols);
    /* Each row of x holds n_heads heads of a_dim then b_dim values; a gets
     * the first parts [n][n_heads * a_dim], b the second [n][n_heads * b_dim]. */
    void (*split_heads)(backend *b, const float *x, int n, int n_heads, int a_dim, int b_dim,
                        float *a, float *bo);
    /* split_heads undone: x [n][n_heads * (a_dim + b_dim)] from a and bo
     * (an MTP block's [embedding | hidden] rows, one head). */
    void (*join_heads)(backend *b, const float *a, const float *bo, int n, int n_heads,
                       int a_dim, int b_dim, float *x);
    /* A gated DeltaNet layer's input projections, all of one x: qkv = x
     * w_qkv^T (the conv's input), z = x w_z^T, beta_in = x w_beta^T and
     * alpha = x w_alpha^T (delta_net's inputs below). */
    void (*delta_in_proj)(backend *b, const bk_weight *w_qkv, const bk_weight *w_z,
                          const bk_weight *w_beta, const bk_weight *w_alpha, const float *x,
                          int n, float *qkv, float *z, float *beta_in, float *alpha);
    /* The gated DeltaNet mixer (bk_delta): qkv [n][conv_dim], z [n][n_v *
     * v_dim], beta_in and alpha [n][n_v] -> out [n][n_v * v_dim]. */
    void (*delta_net)(backend *b, const bk_delta *d, const bk_batch *rows, const float *qkv,
                      const float *z, const float *beta_in, const float *alpha, float *out);
    /* x = cap * tanh(x / cap) for n floats. */
    void (*softcap)(backend *b, float *x, size_t n, float cap);
    /* x[i] *= s for n floats. */
    void (*scale)(backend *b, float *x, size_t n, float s);
    /* out [n][n_dst]: out[r][c] = src[r][map[c]] where map[c] >= 0, else
     * fill. src is [n][n_src]; map is n_dst int32 in this backend's memory
     * (act_alloc'd and written by act_write with the ids' bit patterns: the
     * copy is bytewise). A trimmed head's logits spread over the whole
     * vocabulary (model_head). */
    void (*gather_cols)(backend *b, const float *src, int n, int64_t n_src, const int32_t *map,
                        int64_t n_dst, float fill, float *out);
    /* x [n][cols] = act(x) * y, y's rows y_stride floats apart (a slice of
     * a wider activation). */
    void (*act_mul)(backend *b, float *x, const float *y, int n, int64_t cols, int64_t y_stride,
                    bk_act act);

    /* Optional (NULL: nothing to do). The KV cache the attention op will
     * address. A backend that keeps K and V in its own memory (the GPU)
     * allocates storage of the same geometry here, behind the same block
     * tables, so running out of memory shows at load, not mid-step. */
    int (*kv_prepare)(backend *b, const kv_cache *kv, memra_err *err);
    /* Optional (NULL: the backend cannot run recurrent layers). Copy
     * recurrent state slot `from` of kv's pool to slot `to`, in order with
     * the ops (a checkpoint of a sequence, or its restore). */
    void (*state_copy)(backend *b, const kv_cache *kv, int from, int to);
    /* Optional (NULL: never fails). Ops return nothing, so a backend whose
     * ops can fail (a device error, device memory exhausted) records the
     * first failure, skips every later op and reports it here, naming the
     * call, file and line. It does not wait for queued work: act_read
     * does, so call this after reading a step's results. A failed backend
     * stays failed. */
    int (*status)(backend *b, memra_err *err);
    /* Optional (NULL: the backend keeps nothing in memory of its own; the
     * host's figures are the process's). The device memory in use, as the
     * device reports it (every context on it, the driver's own included),
     * and the device's total, in bytes. For memra-bench's peak memory. */
    int (*mem_stats)(backend *b, uint64_t *used, uint64_t *total, memra_err *err);
    /* Optional (NULL: the engine reads the logits back and samples on the
     * host). One token per row of logits [n_rows][n_vocab] in the
     * backend's memory, exactly the token sampler_sample would pick from
     * the same logits with the same parameters and stream position
     * (rows[i], whose bias_at / pen_at / mask_at index the bias, pen and
     * mask lists; see numerics/sample_math.h); the mask's bans, bias and
     * penalties are applied to the logits in place, as the host sampler
     * does. Only the outcomes come back. Fails on bad lists, or with the
     * backend's recorded failure. */
    int (*sample)(backend *b, float *logits, int n_rows, int64_t n_vocab, const smp_row *rows,
                  const smp_bias *bias, const smp_pen *pen, const uint32_t *mask,
                  smp_outcome *out, memra_err *err);
    /* Optional (NULL: nothing to do). Make the calling thread use this
     * backend's device (cudaSetDevice), so any thread can drive it; the
     * engine calls it at the start of each entry point. A failure is
     * recorded like an op's. */
    void (*bind)(backend *b);

    /* Optional (NULL: the engine just runs the ops). step_begin comes
     * before a step's ops: 1 the backend ran the whole step itself (a
     * graph replay; the logits are in st->logits, or the outcomes of
     * st->sample in its out, or *st->dev_logits says where they are), 0 the engine runs the ops, -1 a failure
     * (recorded: see status). After the ops (only when step_begin gave 0)
     * step_end: 1 the step is done (st->sample sampled), 0 the backend
     * could not finish it (a capture abandoned): run the ops again and
     * call step_begin and step_end again, -1 a failure. A backend with
     * both these and sample must honour st->sample. */
    int (*step_begin)(backend *b, const bk_step *st);
    int (*step_end)(backend *b, const bk_step *st);
    /* Optional (NULL: the engine runs a chain one step at a time, reading
     * each token back). A chain (engine_forward_chain_sample) is k decode
     * steps of one row of one sequence, each sampled greedily on the
     * device, step i's token the id step i - 1 sampled. chain_begin says
     * how the next k steps run: 1 the backend records them (the engine
     * calls step_begin / step_end for each as usual, with its token a
     * placeholder after the first, which the backend replaces on the
     * device; nothing comes back until chain_end), 0 the engine runs them
     * one at a time (this chain is a warm-up, or cannot be recorded).
     * chain_end, after the k steps of a recorded chain: 1 the outcomes of
     * the k steps are in out, in order; 0 the backend could not run them
     * (a capture abandoned: nothing ran, run the k steps one at a time),
     * -1 a failure (recorded: status). first_pos is the first step's
     * position; each step's rows, tables and sampling lists are the
     * first's, but for the position; max_blocks and forward_id are its
     * steps' (bk_step). */
    int (*chain_begin)(backend *b, int k, int first_pos, int max_blocks,
                       const void *forward_id);
    int (*chain_end)(backend *b, smp_outcome *out);
    /* Optional (NULL: none). The prefill step (rows per forward) this
     * backend runs best at; <= 0: no preference. */
    int (*preferred_batch)(backend *b);
    /* Optional (NULL: nothing to choose). Called once, before any op, with
     * the most rows a decode step will hold (the engine's sequences). A
     * backend may pick its decode kernels by it (CUDA: bf16 weights'
     * projections on the tensor cores, x rounded to bf16, when more than
     * one; docs/decisions/0009-decode-gemm.md). The choice holds for the
     * backend's life, so a row's bytes never depend on the batch it is in. */
    void (*plan_decode)(backend *b, int max_rows);
    /* Optional (NULL: any number). The most rows a step may hold with each
     * row's result the bytes it has in a step of its own sequence's rows
     * alone (CUDA: below the rows where a step takes the prefill GEMM or
     * flash attention, and, for a model routing each row to moe_used
     * experts (0: none), the (row, expert) pairs where its experts go to
     * the tensor cores); <= 0: any number. */
    int (*rows_alone)(backend *b, int moe_used);
    /* Optional (NULL: nothing to mark). Marks the start (on = 1) and end
     * (on = 0) of a span of work for an external profiler (CUDA:
     * cudaProfilerStart / cudaProfilerStop, which `ncu --profile-from-start
     * off` honours), so a profile can hold one benchmark repetition and
     * not the model's load and untimed prefill. */
    void (*profiler_range)(backend *b, int on);
    /* Optional (NULL: every op is done when it returns). Wait until the
     * work queued so far is done: a device runs behind the host, and a
     * step that reads nothing back returns before its kernels finish. */
    void (*finish)(backend *b);
    /* Optional (NULL: the caller goes through host memory, act_read then
     * act_write). Copy n floats of activation src, held by backend `from`,
     * into this backend's activation dst, in order with both backends'
     * work: after from's ops so far, before this backend's next ops, and
     * before from's later ops may write src again. Returns 0, or -1 when
     * it cannot (from is another kind of backend), having done nothing.
     * A pipeline stage's output goes to the next stage this way. */
    int (*act_import)(backend *b, float *dst, backend *from, const float *src, size_t n);
    /* Optional (NULL: the backend keeps the whole cache). Called before
     * kv_prepare: this backend runs only a pipeline stage's layers or a
     * tensor-parallel rank's heads, so it keeps storage for their part of
     * the cache alone (bk_cache_window). */
    void (*cache_window)(backend *b, const bk_cache_window *w);

    /* Optional (NULL: the backend runs in one process only). The link of
     * a pipeline whose stages run in processes of their own, one stage a
     * process (backend_pipeline_join; CUDA: NCCL). link_join makes this
     * backend rank `rank` of n_ranks, meeting the others through the
     * NCCL unique id in the file id_file (rank 0 writes it, the others
     * wait for it) or, id_file NULL, NCCL_COMM_ID; fails naming why. The
     * other three run in order with the backend's work, on every rank in
     * the same order (each call waits for its counterpart in the other
     * process): link_send sends n floats of activation src to rank peer,
     * link_recv receives them into dst, link_share copies `bytes` of host
     * memory from rank root to the same buffer on every rank (and waits
     * for it; 0 bytes: waits for this backend's work so far, shares
     * nothing). A wait that meets a failed link (another process stopped)
     * fails naming it instead of waiting forever. They return 0, or -1
     * with the failure recorded (status). */
    int (*link_join)(backend *b, const char *id_file, int n_ranks, int rank, memra_err *err);
    int (*link_send)(backend *b, const float *src, size_t n, int peer);
    int (*link_recv)(backend *b, float *dst, size_t n, int peer);
    int (*link_share)(backend *b, void *host, size_t bytes, int root);
} backend_ops;

struct backend {
    const char *name;
    const backend_ops *ops;
    int n_threads;
    void *impl;
};

/* BK_CPU: the CPU's fast path (SIMD kernels, x rounded to int8 for
 * quantized weights; docs/decisions/0018-cpu-fast-path.md); BK_CPU_REF:
 * the CPU reference, every product in f32 from dequantized rows, the
 * oracle of the parity and kernel checks. */
typedef enum { BK_CPU = 0, BK_CUDA = 1, BK_CPU_REF = 2 } backend_kind;

/* "cpu", "cuda", "cpu-ref". */
const char *backend_kind_name(backend_kind k);
/* Parse "cpu", "cpu-ref" or "cuda"; fails naming the bad value. */
int backend_kind_parse(const char *s, backend_kind *out, memra_err *err);
/* What a program runs on when not told: cuda when the build has CUDA and
 * a device is present, else cpu (the fast path). */
backend_kind backend_kind_default(void);
/* A program's --backend value: cpu, cpu-ref, or cuda where the build has
 * it; any other value exits with a usage error (cli_usage) naming it. */
backend_kind backend_kind_or_usage(const char *arg);

/* The CPU fast path with n_threads workers (<= 0: one per core). */
backend *backend_cpu_create(int n_threads);
/* The CPU reference backend with n_threads workers (<= 0: one per core):
 * what the parity and kernel checks compare against. */
backend *backend_cpu_ref_create(int n_threads);
/* The experts the CPU backend's last ffn_moe chose, n_used ids per token
 * for n_rows tokens, or NULL when b is no CPU backend or its last call had
 * fewer rows. A wrapper that reproduces the routing (the imatrix collector)
 * checks its choices against these. */
const int *backend_cpu_moe_choices(backend *b, size_t n_rows, int n_used);
/* h[i] = act(h[i]) * u[i] for i < m, as the CPU backend b's ffn_glu op
 * computes them (the fast path's vector SiLU or the reference's), for code
 * that must recompute exactly what the op computed. */
void backend_cpu_glu(backend *b, bk_act act, float *h, const float *u, size_t m);
/* The CUDA backend on device `device`. NULL with a message when there is
 * no such device, the build has no CUDA (CUDA=0), or setup fails. */
backend *backend_cuda_create(int device, memra_err *err);
/* Any of the above; n_threads is the CPU's, device the GPU's. */
backend *backend_create(backend_kind k, int device, int n_threads, memra_err *err);

/* ---- pipeline and tensor parallel (backend/pipeline.c) ----
 *
 * A pipeline is n backends of one kind (one per device, or n CPU
 * backends), each running a contiguous range of the model's layers (a
 * stage), or, for a model loaded with model_opts.tp, a share of every
 * layer's heads and FFN columns (a tensor-parallel rank; the last is the
 * leader, model.h). The model runs every op on its stage's backend (model_init asks
 * backend_stage for them) and passes the residual stream from one stage
 * to the next (backend_act_move); the pipeline object itself runs no ops:
 * it is what the engine holds, and fans its per-step and per-cache calls
 * out to the stages (bind, status, kv_prepare, state_copy, step_begin /
 * step_end, plan_decode, profiler_range), with the logits, their
 * sampling and act_read on the last stage, where the head runs. */

#define BACKEND_MAX_STAGES 8

/* A pipeline of stages[0, n) (2 <= n <= BACKEND_MAX_STAGES, all of one
 * kind), owning them from then on (destroyed with it, or here when it
 * fails). NULL with a message when the stages differ in kind. */
backend *backend_pipeline_create(backend **stages, int n, memra_err *err);
/* Stage `rank` of a pipeline of n stages whose other stages run in
 * processes of their own, one stage each (docs/decisions/0036): local
 * (owned from then on) joins them through its link (link_join with
 * id_file), and the pipeline holds it as stage rank and a stand-in for
 * each other stage. Every process runs the same program on the same
 * inputs: the model skips the stand-ins' layers (their weights are not
 * loaded, their activations not made), the residual stream goes to the
 * next process and comes from the one before (link_send, link_recv), and
 * what the engine reads of a step (logits, sampled tokens) comes from the
 * last stage's process to every process (link_share), so each takes the
 * same decisions. NULL with a message when local has no link or the
 * join fails. */
backend *backend_pipeline_join(backend *local, int n, int rank, const char *id_file,
                               memra_err *err);
/* The stages b runs on: 1 for a plain backend (stage 0 is b itself). */
int backend_n_stages(const backend *b);
backend *backend_stage(backend *b, int s);
/* Whether stage s runs in this process (always, but for the stand-ins of
 * backend_pipeline_join). */
int backend_stage_local(const backend *b, int s);
/* After a load, every process of a joined pipeline learns whether every
 * other loaded (rc 0 each) with what it was asked (`asked`, bytes that
 * must be the same in every process: the options that decide its steps;
 * a process whose bytes differ from stage 0's fails): returns rc where it
 * failed here, -1 with the first other stage's message where one failed
 * elsewhere, else 0. rc itself for any other backend. */
int backend_group_settle(backend *b, int rc, const void *asked, size_t bytes, memra_err *err);
/* Copy n floats of activation src (on backend from) into dst (on backend
 * to): act_import where to has it and takes from, else through host
 * memory. */
void backend_act_move(backend *to, float *dst, backend *from, const float *src, size_t n);

static inline void backend_destroy(backend *b)
{
    if (b)
        b->ops->destroy(b);
}

/* Bind the calling thread to the backend's device (backend_ops.bind). */
static inline void backend_bind(backend *b)
{
    if (b->ops->bind)
        b->ops->bind(b);
}

/* The backend's recorded failure, if any (see backend_ops.status). */
static inline int backend_status(backend *b, memra_err *err)
{
    return b->ops->status ? b->ops->status(b, err) : 0;
}

/* The backend's device memory (see backend_ops.mem_stats); 1 when the
 * backend has none to report (the CPU: use the process's RSS instead). */
static inline int backend_mem_stats(backend *b, uint64_t *used, uint64_t *total, memra_err *err)
{
    return b->ops->mem_stats ? b->ops->mem_stats(b, used, total, err) : 1;
}

#endif
