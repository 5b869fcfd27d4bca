/* Speculative decoding: a drafter proposes up to K tokens, the model
 * checks them all in one forward of K+1 rows, and the output is what
 * plain decoding gives (docs/SPECULATIVE.md).
 *
 * One round, with `last` the newest token (sampled, not yet run):
 *
 *   drafter:  d1..dm = propose(context, m <= K)
 *   model:    one engine_forward of [last, d1..dm] with every row's logits:
 *             row i is the distribution p_i after (..., last, d1..di)
 *   verify:   d(i+1) against p_i in order; the first rejected one is
 *             replaced by a token drawn from the residual and the round
 *             ends; when all m are accepted, p_m gives a bonus token
 *   rollback: engine_seq_truncate drops the rejected rows' KV (no copies)
 *
 * so a round emits between 1 and m+1 tokens for one forward of the model.
 *
 * Exactness. Greedy (temperature 0): the model's token at each row is the
 * argmax of that row (sampler_probs, ties to the lowest id, exactly as
 * plain decoding's sampler_sample picks it), a draft is accepted only when
 * it is that token, and the replacement is that token: token for token
 * the plain greedy output, whatever the drafter proposes, provided a row's
 * logits do not depend on how many rows run with it. The CPU backend
 * computes every row alone in a fixed order, so that holds there; on CUDA,
 * a step of up to 31 rows keeps the row-by-row kernels (engine.h).
 * Sampled (temperature > 0): the modified rejection sampling of Leviathan
 * et al. (2023) and Chen et al. (2023): d drawn from the drafter's q is
 * kept with probability min(1, p(d)/q(d)), else replaced by a draw from
 * max(0, p - q) normalized; each emitted token is then distributed
 * exactly as p (up to double rounding), though not the token plain
 * sampling would draw with the same seed. Every uniform comes from
 * Philox4x32-10 keyed by the request's seed, one counter per draw, so a
 * seeded run is reproducible.
 *
 * Sampling parameters: temperature, top-k, top-p, min-p and logit bias
 * (p and q are the distributions after them, sampler_probs). The
 * penalties are refused: they depend on the history, which a rejected
 * draft would have to take back. */
#ifndef MEMRA_ENGINE_SPEC_H
#define MEMRA_ENGINE_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "tok/tokenizer.h"

/* Draft tokens per round at most. */
#define SPEC_K_MAX 8

/* A distribution over token ids: n ids ascending with their
 * probabilities (summing to 1). A deterministic proposal is the point
 * mass {id: 1}. */
typedef struct {
    const int32_t *ids;
    const double *probs;
    int32_t n;
} spec_dist;

/* The request's random stream: draw i takes Philox counter i under the
 * seed. */
typedef struct {
    uint64_t seed;
    uint64_t n;
} spec_rng;

/* A uniform double in [0, 1) (53 bits), the next draw of the stream. */
double spec_uniform(spec_rng *r);
/* A token drawn from d with one uniform (the last id on rounding); a
 * point mass takes no uniform. */
int32_t spec_draw(const spec_dist *d, spec_rng *r);
/* The probability of id under d (0 when absent; binary search). */
double spec_prob(const spec_dist *d, int32_t id);

/* Scratch for the residual distribution, owned by the caller. */
typedef struct {
    int32_t *ids;
    double *probs;
    int32_t cap;
} spec_scratch;

void spec_scratch_free(spec_scratch *s);

/* Verify one draft token x, drawn from q, against the model's p: returns
 * 1 when x is accepted, else 0 with *repl drawn from max(0, p - q)
 * normalized. A point-mass p (greedy) accepts exactly its id and draws
 * nothing. */
int spec_verify_token(const spec_dist *p, const spec_dist *q, int32_t x, spec_rng *r,
                      spec_scratch *s, int32_t *repl);

/* ---- drafters ----
 *
 * A drafter proposes the tokens that continue a context. Three kinds plug
 * in here: a separate draft model of the same vocabulary
 * (spec_draft_model.c), n-gram / prompt lookup over the context itself
 * (spec_ngram.c), and the MTP (NextN) block a checkpoint carries beside
 * its layers (spec_mtp.c), which the model's engine runs itself
 * (engine_mtp_draft). */

/* What a drafter returns: n tokens and, for each, the distribution q it
 * was drawn from. The arrays belong to the drafter until its next call. */
typedef struct {
    int32_t n;
    int32_t tokens[SPEC_K_MAX];
    spec_dist q[SPEC_K_MAX];
} spec_draft;

typedef struct spec_drafter spec_drafter;
struct spec_drafter {
    const char *kind; /* "draft", "ngram", "mtp" */
    void *impl;
    /* A new generation: the prompt and the sampling parameters of the
     * request (a drafter that samples draws from the same temperature,
     * top-k, top-p and min-p). May run the prompt (a draft model's
     * prefill). */
    int (*begin)(spec_drafter *d, const int32_t *prompt, int64_t n, const sampler_params *sp,
                 memra_err *err);
    /* Up to k tokens continuing ctx[0, n) (the prompt and every token
     * emitted so far; ctx[n - 1] the newest), drawing from r when it
     * samples. Fewer (none) when it has nothing to propose. */
    int (*propose)(spec_drafter *d, const int32_t *ctx, int64_t n, int k, spec_rng *r,
                   spec_draft *out, memra_err *err);
    void (*free)(spec_drafter *d);
    /* The model's sequence of the round, set by spec_round (and
     * spec_rounds) before propose: a drafter that reads the model's own
     * state (mtp) drafts on it. */
    engine_seq *seq;
};

void spec_drafter_free(spec_drafter *d);

/* Whether two tokenizers have the same vocabulary: the same number of ids
 * and the same text for each. Fails naming the first difference. */
int spec_check_vocab(const tokenizer *target, const tokenizer *draft, const char *draft_name,
                     memra_err *err);

/* A vocabulary-trimmed draft head: the ids of d2t (n_trim distinct ones,
 * rank order, each below n_allowed) and those rows of draft's output
 * matrix on the draft's backend (engine_head_new). Made once and shared
 * by every drafter on that draft engine (a server's sessions), which it
 * must outlive; freed before the engine. */
typedef struct spec_trim spec_trim;
int spec_trim_new(engine *draft, int32_t n_allowed, const int32_t *d2t, int32_t n_trim,
                  spec_trim **out, memra_err *err);
void spec_trim_free(spec_trim *t);

/* The draft-model drafter: draft (an engine of its own, which the drafter
 * drives and never frees) proposes by running the context and sampling its
 * own distribution. n_allowed: ids the model may emit (the tokenizer's
 * size, or the smaller vocabulary); the drafter never proposes another.
 * With trim (made for this draft engine and n_allowed; borrowed), drafting
 * is limited to its ids and the draft's steps run the trim's head, which
 * reads only their rows. Greedy drafts are sampled where the draft runs
 * (on the device, only the id read back). */
int spec_drafter_model_new(engine *draft, int32_t n_allowed, const spec_trim *trim,
                           spec_drafter **out, memra_err *err);

/* The n-gram drafter: the tokens that followed the latest earlier
 * occurrence of the context's last n tokens, for n from max_n down to
 * min_n (1 <= min_n <= max_n <= 8). Deterministic: q is a point mass. */
int spec_drafter_ngram_new(int min_n, int max_n, spec_drafter **out, memra_err *err);

/* The MTP drafter: the MTP block of e (loaded with engine_opts.mtp)
 * drafts on the round's sequence, the model's own: depth 0 from the
 * model's hidden state at the newest run position and the newest token,
 * each further depth from the block's own output and the token drafted
 * before (one block, chained). It samples from the block's distribution
 * as the draft model does (the request's temperature, top-k, top-p,
 * min-p and bias). Several drafters may share e, one per sequence. */
int spec_drafter_mtp_new(engine *e, spec_drafter **out, memra_err *err);

/* ---- generation ---- */

typedef struct {
    int k;                    /* draft tokens per round, 1..SPEC_K_MAX */
    int n_predict;            /* tokens to generate at most; < 0: until a stop or the context ends */
    sampler_params sampling;
    int penalize_prompt;      /* prompt tokens count for the penalties (gen_params') */
    int ignore_eos;
} spec_params;

typedef struct {
    int32_t *tokens;          /* generated ids, malloc'ed (the stop id included) */
    size_t n_tokens;
    gen_finish finish;
    size_t n_prompt;
    double prefill_ms;        /* the model's and the drafter's prompt */
    double decode_ms;         /* every round after it */
    double draft_ms;          /* of it, the drafter's proposals */
    uint64_t rounds;          /* forwards of the model after the prefill */
    uint64_t drafted;         /* draft tokens verified */
    uint64_t accepted;        /* of them, accepted */
    uint64_t accepted_hist[SPEC_K_MAX + 1]; /* rounds by accepted count */
} spec_result;

void spec_params_default(spec_params *p);

/* Whether e can verify drafts: its sequences cut back to any position
 * (engine_rewindable), or it keeps checkpoints of their recurrent state
 * (engine_opts.snapshots, spec_snapshots() rows); fails naming the family
 * otherwise. */
int spec_target_check(const engine *e, memra_err *err);
/* engine_opts.snapshots for an engine that verifies drafts: the rows a
 * round runs at most (SPEC_K_MAX + 1). */
int spec_snapshots(void);

/* A constraint on the emitted tokens (a grammar), for spec_round: mask
 * sets s's allowed-token mask (sampler_set_mask) for the next token from
 * the constraint's state; accept advances the state by an emitted token.
 * Each returns 0, or -1 with err set (mask: nothing can continue). */
typedef struct {
    void *ctx;
    int (*mask)(void *ctx, sampler *s, memra_err *err);
    int (*accept)(void *ctx, int32_t id, memra_err *err);
} spec_constraint;

/* What one round emitted: the accepted drafts, then the model's own token
 * (the replacement of the first rejected draft, or the bonus). */
typedef struct {
    int32_t tokens[SPEC_K_MAX + 1];
    int32_t n;
    int32_t drafted, accepted;
    double draft_ms;          /* the drafter's part of the round */
} spec_round_result;

/* One round on seq, whose KV holds ctx[0, n - 1): ctx[n - 1], the newest
 * token, is not run yet and runs first. At most k draft tokens (0..K_MAX;
 * the caller cuts k to what its limits leave: the round writes up to
 * k + 1 rows of KV and emits up to k + 1 tokens; 0 is a plain decode
 * step). s is the model's sampler (p is its sampler_probs), rng the
 * request's stream, logits scratch of (SPEC_K_MAX + 1) x n_vocab floats;
 * with raw (as large), each verified row's logits as the model gave them,
 * before the sampler's bias and penalties (the tokens' log-probabilities:
 * emitted token i's row is raw + i * n_vocab). Each emitted token joins
 * s's penalty history (sampler_accept) as it is emitted, before the next
 * row's distribution is formed, as plain decoding adds it; the caller adds
 * none of them again (rejected drafts never join). With con, each row's
 * distribution is formed under the constraint's mask as it stands after
 * the tokens emitted before it, and each emitted token advances it (a
 * draft the constraint does not allow has probability 0: it is rejected);
 * the caller does not advance it again.
 * Afterwards the KV holds ctx[0, n) and the accepted drafts, and the last
 * emitted token is the newest, not run. spec_generate is this in a loop;
 * the server runs it one round per tick. */
int spec_round(engine *e, engine_seq *seq, sampler *s, spec_drafter *d, const int32_t *ctx,
               int64_t n, int k, spec_rng *rng, spec_scratch *scratch, float *logits,
               float *raw, const spec_constraint *con, spec_round_result *out,
               memra_err *err);

/* The most draft tokens a round of e verifies with every row the bytes
 * of plain decoding: SPEC_K_MAX, or fewer where the backend computes a
 * step of that many rows differently (engine_rows_alone). spec_round and
 * spec_rounds cut k to it. */
int spec_k_cap(const engine *e);

/* One sequence's round among several (spec_rounds): spec_round's
 * arguments, its result in out, rc 0 or -1 with err. */
typedef struct {
    engine_seq *seq;
    sampler *smp;
    spec_drafter *d;
    const int32_t *ctx;
    int64_t n;
    int k;
    spec_rng *rng;
    float *raw;                 /* NULL, or (SPEC_K_MAX + 1) x n_vocab floats */
    const spec_constraint *con; /* NULL: none */
    spec_round_result out;
    int rc;
    memra_err err;
} spec_round_job;

/* The rounds of several distinct sequences, each as spec_round would run
 * it alone, with their verify rows in shared steps: every drafter
 * proposes, then the jobs' rows go through engine_forward_rows in order,
 * as many jobs a step as engine_rows_alone(e), the engine's step
 * (engine_n_batch) and logits_rows allow
 * (logits: logits_rows x n_vocab floats of scratch; a job's k is cut to
 * fit one step), then each job is verified on its rows. A row's logits
 * are those of its round alone, so each job's tokens are the ones
 * spec_round gives. Returns how many jobs failed (each with rc -1 and
 * err; a failed job's sequence is as before its round); *n_steps (when
 * not NULL) the forward steps the verify rows took. */
int spec_rounds(engine *e, spec_round_job *jobs, int n_jobs, spec_scratch *scratch,
                float *logits, int logits_rows, int *n_steps);

/* Generate from prompt with drafter d, stopping as generate() does (an
 * end-of-generation id of t unless ignore_eos, n_predict, the context's
 * end); t may be NULL (no stop ids). The tokens are generate()'s for a
 * greedy request. Embedding rows past the tokenizer's last token are
 * banned as generate() bans them. */
int spec_generate(engine *e, const tokenizer *t, spec_drafter *d, const int32_t *prompt,
                  size_t n_prompt, const spec_params *p, spec_result *out, memra_err *err);
void spec_result_free(spec_result *r);

#endif
