/* The engine: a model loaded from an open checkpoint onto a backend, and
 * sequences whose tokens it runs. This is the API programs use.
 *
 *   engine_opts o;
 *   engine_opts_default(&o);
 *   engine *e;  engine_load(&ck, &o, &e, &err);
 *   engine_seq *s;  engine_seq_new(e, &s, &err);
 *   engine_forward(e, s, prompt, n, logits, 0, &err);   // prefill, last logits
 *   engine_forward(e, s, &next, 1, logits, 0, &err);    // one decode step
 *   engine_forward_sample(e, s, &next, 1, smp, &next, &err); // a step, sampled
 *
 * The checkpoint must stay open while the engine lives: weights are views
 * into its map. A forward appends the tokens to the sequence's KV cache;
 * prompts longer than the step size run in chunks of n_batch tokens, and
 * on the CPU every token's logits are the same whatever the chunking (each
 * row is computed alone, in a fixed reduction order). On CUDA a prompt
 * chunk of 32 or more rows goes through a bf16 tensor-core GEMM and, over
 * a bf16/f16 KV cache, tensor-core flash attention (each within its bound
 * of the row-by-row result, the same bytes for the same chunk); decode
 * steps keep the row-by-row, batch-invariant kernels. */
#ifndef MEMRA_ENGINE_ENGINE_H
#define MEMRA_ENGINE_ENGINE_H

#include <stdint.h>

#include "core/err.h"
#include "backend/backend.h"
#include "backend/kv_cache.h"
#include "engine/sampler.h"
#include "model/checkpoint.h"
#include "model/config.h"
#include "model/model.h"

typedef struct {
    int n_threads;      /* <= 0: one per core */
    int64_t n_ctx;      /* tokens per sequence; 0: the model's n_ctx_train, at most 4096 */
    kv_type kv_type;    /* KV_DEFAULT (the backend's: engine_kv_type_default), KV_F32,
                         * KV_F16, KV_BF16 or KV_Q8_0 (kv_dim a multiple of 32) */
    int n_batch;        /* prefill chunk: tokens per step; 0: the backend's choice (CUDA:
                           512 on H100/H200, else 64), else 64 */
    int n_seqs;         /* sequences that can hold n_ctx tokens at once; 0: 1 */
    int64_t kv_tokens;  /* the KV pool in tokens, shared by all sequences; 0: n_seqs x n_ctx
                         * (set it lower when the sequences never all fill n_ctx at once) */
    int kv_block_size;  /* tokens per KV block; 0: 16 */
    int prefix_cache;   /* share full KV blocks between sequences by content (kv_prefix.h) */
    int prefix_cache_idle; /* blocks kept cached that no sequence holds; <= 0: the pool */
    int snapshots;      /* a model with recurrent layers keeps room for a checkpoint of each
                         * sequence's state that also keeps the states after up to this many
                         * positions past it (engine_seq_checkpoint; a speculation round's
                         * K + 1 rows, < KV_SNAP_MAX); 0: none */
    int mtp;            /* load the checkpoint's MTP block and keep its K/V up to date with
                         * every step (engine_mtp_draft); the MTP drafter needs it */
    backend_kind backend; /* BK_CPU (default) or BK_CUDA */
    int device;         /* CUDA device index (BK_CUDA); any thread may then drive the
                         * engine: every entry point binds it to that device */
    /* Pipeline parallel (backend.h): the layers split evenly over pp stages
     * (0 or 1: one), each on a backend of its own, with the same bytes as
     * one backend. On CUDA stage s runs on devices[s] (n_devices == pp) or
     * every stage on `device` (n_devices 0); on the CPU each stage is a CPU
     * backend of n_threads. n_devices 1 with pp <= 1: devices[0] is the
     * device. Not with mtp, an assistant, or a model with per-layer inputs
     * (gemma4's E2B/E4B). */
    int pp;
    /* Tensor parallel (model.h, docs/decisions/0029): every layer's heads
     * and FFN columns split over tp ranks (0 or 1: none), placed like
     * pipeline stages (devices[r], or every rank on `device`); not with
     * pp > 1. Deterministic run to run; the sums over ranks differ from
     * one backend's in order. llama, qwen2, qwen3, qwen3_moe, gemma3,
     * qwen3_5, qwen3_5_moe. */
    int tp;
    int devices[BACKEND_MAX_STAGES];
    int n_devices;
    /* Pipeline stages or tensor-parallel ranks in processes of their own
     * (docs/decisions/0036): n_ranks > 0 (== pp, or tp): this process
     * runs stage or rank `rank` alone, on
     * devices[0] (n_devices 1) or `device`, and meets the others through
     * NCCL: the unique id in the file nccl_id (rank 0 writes it, the
     * others wait for it) or, nccl_id NULL, NCCL_COMM_ID. Every process
     * runs the same program on the same inputs. CUDA only. */
    int n_ranks, rank;
    const char *nccl_id;
} engine_opts;

typedef struct engine engine;
typedef struct engine_seq engine_seq;

void engine_opts_default(engine_opts *o);
/* A program's --devices LIST, --pp N and --tp N into o (pp and tp 0: as
 * many pipeline stages as devices listed), for o->backend: fails naming
 * what does not fit (devices on the CPU, a count that is not the stages'
 * or ranks', too many, both pp and tp). */
int engine_opts_parallel(engine_opts *o, const char *devices, int pp, int tp, memra_err *err);
/* A program's --rank R and --nccl-id FILE into o, after
 * engine_opts_parallel (rank < 0: not given): this process runs pipeline
 * stage R of o->pp, or tensor-parallel rank R of o->tp, alone. Fails
 * naming what does not fit (no --pp or --tp, a rank past them, more than
 * one device, not the cuda backend, no id). */
int engine_opts_rank(engine_opts *o, int rank, const char *nccl_id, memra_err *err);
/* The KV element type a backend gets by default: bf16 on CUDA and on the
 * CPU's fast path (half the bytes per step, f32's range; decision 0035),
 * f32 on the CPU reference (exact). */
kv_type engine_kv_type_default(backend_kind k);

int engine_load(const checkpoint *ck, const engine_opts *o, engine **out, memra_err *err);
void engine_free(engine *e);

const model_config *engine_config(const engine *e);
/* Bytes of weights one decode step reads. */
uint64_t engine_bytes_per_token(const engine *e);
int64_t engine_n_ctx(const engine *e);
/* The KV element type in use (KV_DEFAULT resolved). */
kv_type engine_kv_type(const engine *e);
/* Rows per forward step (the prefill chunk; opts.n_batch or the default). */
int engine_n_batch(const engine *e);
/* The model, for programs that look inside (parity, bench). */
model *engine_model(engine *e);
/* Mark the start (on = 1) or end (0) of a span for an external profiler
 * (CUDA: ncu --profile-from-start off); nothing on a backend without one.
 * The engine's work so far is finished before the mark. */
void engine_profiler_range(engine *e, int on);
/* Wait until the engine's work so far is done on its devices (a forward
 * that returns no logits may leave kernels running), as a timer must
 * before it starts. */
void engine_finish(engine *e);

/* A new empty sequence. Sequences share the engine's KV pool (n_seqs x
 * n_ctx tokens) and take blocks as they grow; free them before the engine. */
int engine_seq_new(engine *e, engine_seq **out, memra_err *err);
void engine_seq_free(engine_seq *s);
/* Forget every token (the KV blocks go back to the pool). */
void engine_seq_reset(engine_seq *s);
/* Keep the first n tokens (n <= pos), e.g. to drop rejected draft tokens. */
void engine_seq_truncate(engine_seq *s, int64_t n);
/* Whether a sequence can be cut back to any position (engine_seq_truncate
 * with 0 < n < its length): not for a model with recurrent layers
 * (qwen3_5), whose state sums every position so far; such a sequence is
 * only ever reset, or cut back to what its checkpoint kept (its length
 * then, or a row after it: engine_seq_checkpoint). */
int engine_rewindable(const engine *e);
/* Whether sequences can share prefixes through the prefix cache: always
 * for a rewindable engine; for one with recurrent layers, when the cache
 * keeps states at chunk ends (opts.prefix_cache: one kept state per
 * sequence the engine was sized for, reused oldest first). */
int engine_prefix_shareable(const engine *e);
/* Whether the engine keeps state checkpoints (opts.snapshots; always
 * true for a rewindable engine, which needs none). */
int engine_can_checkpoint(const engine *e);
/* Remember s's current length and its next `rows` positions as points
 * engine_seq_truncate may cut it back to: for a model with recurrent
 * layers, a copy of its state now, and the state after each of those
 * positions as the steps that run them leave it (no step runs again to
 * cut back); nothing otherwise. rows is at most the engine's
 * opts.snapshots. Fails when too few slots are free for the copies, or
 * rows is out of range. */
int engine_seq_checkpoint(engine_seq *s, int rows, memra_err *err);
/* Tokens in the sequence: the position the next token takes. */
int64_t engine_seq_pos(const engine_seq *s);

/* ---- the prefix cache (opts.prefix_cache) ----
 *
 * A sequence that starts with tokens another has run maps their KV blocks
 * instead of computing them. Exactness: a block's values are those a
 * prefill of the same tokens would compute only when they were computed
 * the same way, and a prefill chunk's bytes depend on the chunk (on CUDA a
 * chunk of 32 or more rows runs a GEMM whose bytes may change with the row
 * count). So blocks are shared in units of `granule` tokens: the caller
 * prefills in chunks of exactly granule tokens from position 0 (memra-serve
 * does: its prefill chunk), publishes only the tokens of whole chunks
 * (never a partial last chunk, never decoded tokens), and adopts a
 * multiple of granule; the rest of a prompt is then chunked exactly as it
 * would be without the cache, and every byte is the same. On the CPU every
 * row is computed alone, so any granule is exact there. */

/* Map the longest cached prefix of tokens[0, n) in namespace ns (memra-
 * serve: the tenant) onto the empty sequence s, a multiple of granule
 * tokens and at least one token short of n. Returns the tokens mapped (the
 * sequence's position), 0 when none or when the cache is off. */
int64_t engine_seq_adopt_prefix(engine_seq *s, uint64_t ns, const int32_t *tokens, int64_t n,
                                int64_t granule);
/* Offer the whole blocks of positions [0, n) (tokens[0, n), run by this
 * sequence) to the cache. */
void engine_seq_publish_prefix(engine_seq *s, uint64_t ns, const int32_t *tokens, int64_t n);
/* The cache's counters (all zero when it is off); the KV block size. */
void engine_prefix_stats(const engine *e, kv_prefix_stats *out);
int engine_kv_block_size(const engine *e);
/* KV blocks sequences hold now (a block several share counts once; idle
 * cached blocks do not count). */
int64_t engine_kv_blocks_held(const engine *e);

/* Run n tokens at the end of s. logits, when not NULL, receives [n][vocab]
 * floats when logits_all, else [vocab] for the last token. Fails, changing
 * nothing, on a token id out of range (naming the id and its index), on
 * running past n_ctx (naming n_ctx), or when the KV pool has no blocks left. */
int engine_forward(engine *e, engine_seq *s, const int32_t *tokens, int n, float *logits,
                   int logits_all, memra_err *err);

/* One decode step for several sequences at once: token i is appended to
 * seqs[i] (each at its own position), all in one batch of rows, and
 * logits, when not NULL, receives [n][vocab]. The sequences must be
 * distinct. A sequence's logits are bit-identical to running it alone
 * (engine_forward with one token): every backend computes a row from that
 * row alone, in a fixed order. More than n_batch sequences run in chunks.
 * Fails, changing nothing, on a bad id, a repeated sequence, a full
 * context or an exhausted KV pool. */
int engine_forward_batch(engine *e, engine_seq *const *seqs, const int32_t *tokens, int n,
                         float *logits, memra_err *err);

/* Prompt tokens of several sequences in one forward step: seqs[i] gets
 * tokens[i][0, n[i]) at its end, the rows in that order (each sequence a
 * run of consecutive positions), at most engine_n_batch rows in all. No
 * logits are computed: the hidden-state hooks see the rows, and a row's
 * sequence is its bk_batch.seq (engine_seq_kv). On the CPU a row's result
 * is the same whatever the step holds; on CUDA the step's projections are
 * one GEMM over its rows, so a row's bytes depend on the whole step (as a
 * prompt chunk's do on the chunk): the same step gives the same bytes.
 * Fails, changing nothing, on a bad id (naming it), a repeated sequence,
 * too many rows, a full context or an exhausted KV pool. */
int engine_forward_packed(engine *e, engine_seq *const *seqs, const int32_t *const *tokens,
                          const int *n, int n_seqs, memra_err *err);
/* engine_forward_packed with every row's logits: logits receives
 * [rows][vocab], the rows in the order of the tokens. A row's logits are
 * the bytes it would have in a forward of its sequence's rows alone as
 * long as the step holds at most engine_rows_alone(e) rows (which is how
 * several sequences' speculation rounds verify in one step: spec_rounds). */
int engine_forward_rows(engine *e, engine_seq *const *seqs, const int32_t *const *tokens,
                        const int *n, int n_seqs, float *logits, memra_err *err);
/* engine_forward_rows, each row sampled with smp[r] (a sampler per row,
 * rows in the tokens' order) instead of its logits coming back: on the
 * device where the backend samples (only the ids come back), else on the
 * host from the logits; both pick the same token. ids[r] is -1 with
 * row_errs[r] set where a row cannot be sampled. (A speculation round's
 * greedy verification needs each row's token only.) */
int engine_forward_rows_sample(engine *e, engine_seq *const *seqs, const int32_t *const *tokens,
                               const int *n, int n_seqs, sampler *const *smp, int32_t *ids,
                               memra_err *row_errs, memra_err *err);
/* The most rows one step may hold with each row's bytes those it has in a
 * step of its sequence's rows alone, 0 for any number: 0 on the CPU (every
 * row is computed alone); on CUDA one less than the rows at which a step
 * takes the prefill GEMM or flash attention, or a MoE model's experts the
 * tensor cores (backend_ops.rows_alone). */
int engine_rows_alone(const engine *e);
/* The KV sequence behind s: what a hook's bk_batch.seq names. */
const kv_seq *engine_seq_kv(const engine_seq *s);

/* engine_forward, then the next token sampled with smp from the last
 * token's logits into *out_id. On a backend that samples (the GPU) the
 * logits never leave the device; elsewhere they are read back and
 * sampler_sample picks the token: the same token either way for the same
 * logits. Fails (*out_id -1) on anything engine_forward fails on, or
 * when the row cannot be sampled (sampler_sample's errors; the tokens are
 * then in the sequence). tokens may be out_id (a decode loop's one token). */
int engine_forward_sample(engine *e, engine_seq *s, const int32_t *tokens, int n, sampler *smp,
                          int32_t *out_id, memra_err *err);

/* k decode steps of s, each fed the token the step before sampled:
 * out_ids[i] is the token sampled with smp after running first and
 * out_ids[0, i). The ids and the sequence are those of k calls of
 * engine_forward_sample with no sampler_accept between them (a drafter's
 * chain); with a greedy sampler on a model without recurrent layers
 * (engine_rewindable), a backend that records chains (CUDA, graphs on)
 * runs the k steps as one graph and reads the ids back once.
 * Fails as engine_forward_sample does: the ids before the failing step
 * are set, and the sequence holds the steps up to it. */
int engine_forward_chain_sample(engine *e, engine_seq *s, int32_t first, int k, sampler *smp,
                                int32_t *out_ids, memra_err *err);

/* engine_forward_batch, then one token sampled per sequence with smp[i]
 * (distinct samplers) into out_ids[i], as engine_forward_sample. Returns
 * -1 (err) when the step failed, changing nothing (out_ids included) on a
 * bad argument as engine_forward_batch; otherwise 0, each out_ids[i] the
 * token or -1 with row_errs[i] ([n]) saying why that row could not be
 * sampled. out_ids may be tokens. */
int engine_forward_batch_sample(engine *e, engine_seq *const *seqs, const int32_t *tokens, int n,
                                sampler *const *smp, int32_t *out_ids, memra_err *row_errs,
                                memra_err *err);

/* Host work that runs while a batched step's forward is on the device:
 * called once, after the forward is launched and before any row is
 * sampled, so it may still change the samplers (a grammar's masks, which
 * depend only on the tokens already taken). On a backend that computes on
 * the host it simply runs between the forward and the sampling. */
typedef void (*engine_overlap_fn)(void *ctx);

/* engine_forward_batch_sample with `overlap(ctx)` in the middle (NULL: as
 * engine_forward_batch_sample). The tokens are the same as if overlap had
 * run before the call. */
int engine_forward_batch_sample_with(engine *e, engine_seq *const *seqs, const int32_t *tokens,
                                     int n, sampler *const *smp, int32_t *out_ids,
                                     memra_err *row_errs, engine_overlap_fn overlap, void *ctx,
                                     memra_err *err);

/* Whether e drafts on its own: it runs the checkpoint's MTP block
 * (engine_opts.mtp) or has an assistant attached. */
int engine_has_mtp(const engine *e);
/* Load ck, a drafter that reads e's model (config_is_assistant: a
 * gemma4_assistant for a Gemma 4 model), onto e's backend; engine_mtp_draft
 * then drafts with it, and e keeps each sequence's newest hidden states
 * for it. ck must stay open while e lives. Fails when ck is not an
 * assistant, does not fit e's model (hidden size, vocabulary, the K/V
 * heads of the layers it reads), or e runs an MTP block. */
int engine_attach_assistant(engine *e, const checkpoint *ck, memra_err *err);
/* Whether an assistant is attached (engine_attach_assistant). */
int engine_has_assistant(const engine *e);
/* Whether the block follows every step of the model (on, the default, with
 * the block loaded): off, steps run as without it (and are graphed where
 * the backend graphs them), and the block's K/V is not kept for the
 * positions they run, so drafting on those sequences accepts less (never
 * changing the output). For a plain-decoding baseline. */
void engine_mtp_follow(engine *e, int on);
/* The MTP block's next-token-but-one prediction for s (or, with an
 * assistant attached, the assistant's: every depth at s's newest run
 * position, reading the model's K/V, writing none). depth 0: at s's
 * newest run position q, from the model's hidden state there and `next`,
 * the token about to follow it (not run yet): logits for the token after
 * next. depth d > 0: at q + d, from h (the block's own h_out of depth
 * d - 1) and next (the token drafted at depth d - 1). logits (host,
 * [n_vocab]) and h_out (host, [dim]) receive the row's results. The block
 * writes its K/V at that position; the model's own K/V and s's length
 * are unchanged, and the model's next step over those positions writes
 * the block's K/V again from its real hidden states. Fails on a token out
 * of range, past n_ctx, or when the hidden state at q is not known (s's
 * newest tokens came from the prefix cache). */
int engine_mtp_draft(engine *e, engine_seq *s, int32_t next, int depth, const float *h,
                     float *logits, float *h_out, memra_err *err);
/* engine_mtp_draft with the row's token sampled by smp instead of its
 * logits coming back: on a backend that samples, inside the step (a
 * graphed one ends with the sample kernel), else on the host from the
 * logits; the same token either way. *tok is -1 on failure. */
int engine_mtp_draft_sample(engine *e, engine_seq *s, int32_t next, int depth, const float *h,
                            sampler *smp, int32_t *tok, float *h_out, memra_err *err);
/* Whether engine_mtp_draft can start on s: the block is loaded and the
 * model's hidden state at s's newest run position was kept. */
int engine_mtp_ready(const engine *e, const engine_seq *s);

/* Capture hidden states (see model_hidden_fn for the convention); NULL
 * turns it off. */
void engine_set_hidden_hook(engine *e, model_hidden_fn fn, void *ctx);
/* The same, called only with the last layer's output after the final norm
 * (index n_layers): the other layers are not read back. */
void engine_set_final_hidden_hook(engine *e, model_hidden_fn fn, void *ctx);

/* A head of the output rows ids[0, n) (model_head_new: distinct ids,
 * copied; its rows stay in the backend's memory until engine_free), and
 * the head the next steps run: NULL the whole output matrix. A step
 * with a trimmed head gives every id outside it -inf and the others the
 * full head's logits; CUDA graphs it under its own key (bk_step.forward_id).
 * engine_head_free before engine_free. */
int engine_head_new(engine *e, const int32_t *ids, int32_t n, model_head **out, memra_err *err);
void engine_head_free(engine *e, model_head *h);
void engine_use_head(engine *e, const model_head *h);

#endif
