/* The speculative decoding loop (spec.h): rounds of propose, one forward
 * of K+1 rows, verify, roll back. */
#include "engine/spec.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/clock.h"
#include "engine/generate.h"

void spec_params_default(spec_params *p)
{
    memset(p, 0, sizeof *p);
    p->k = 3;
    p->n_predict = 256;
    p->sampling = sampler_params_default();
    p->penalize_prompt = 1;
}

void spec_result_free(spec_result *r)
{
    free(r->tokens);
    memset(r, 0, sizeof *r);
}

void spec_drafter_free(spec_drafter *d)
{
    if (d)
        d->free(d);
}

int spec_check_vocab(const tokenizer *target, const tokenizer *draft, const char *draft_name,
                     memra_err *err)
{
    size_t nm = tok_vocab_size(target), nd = tok_vocab_size(draft);
    if (nm != nd)
        return memra_fail(err, "%s: its vocabulary has %zu tokens, the model's %zu: a drafter "
                          "must share the model's vocabulary", draft_name, nd, nm);
    for (size_t id = 0; id < nm; id++) {
        const char *a = tok_text(target, (int32_t)id), *b = tok_text(draft, (int32_t)id);
        if (!a || !b || strcmp(a, b) != 0)
            return memra_fail(err, "%s: token %zu is '%s' there and '%s' in the model: a "
                              "drafter must share the model's vocabulary", draft_name, id,
                              b ? b : "(none)", a ? a : "(none)");
    }
    return 0;
}

static int check_params(const spec_params *p, memra_err *err)
{
    if (p->k < 1 || p->k > SPEC_K_MAX)
        return memra_fail(err, "speculative decoding: K = %d draft tokens per round is outside "
                          "1..%d", p->k, SPEC_K_MAX);
    return 0;
}

/* The model's distribution of one row of logits (modified in place). */
static int row_dist(sampler *s, float *logits, spec_dist *out, memra_err *err)
{
    return sampler_probs(s, logits, &out->ids, &out->probs, &out->n, err);
}

typedef struct {
    engine *e;
    const tokenizer *t;
    const spec_params *p;
    spec_result *out;
    int32_t *ctx;       /* prompt + emitted, [n_ctx + 1] */
    int64_t n;          /* tokens in ctx */
    size_t cap;
    int done;
} spec_run;

/* Emit one token with generate()'s checks, in its order: the length
 * limit, then the token, then an end-of-generation id ends the run. */
static void emit(spec_run *r, int32_t id)
{
    spec_result *o = r->out;
    if (r->done)
        return;
    if (r->p->n_predict >= 0 && (int64_t)o->n_tokens >= r->p->n_predict) {
        r->done = 1;
        return;
    }
    if (o->n_tokens == r->cap) {
        r->cap *= 2;
        o->tokens = xrealloc(o->tokens, r->cap * sizeof(int32_t));
    }
    o->tokens[o->n_tokens++] = id;
    r->ctx[r->n++] = id;
    if (r->t && !r->p->ignore_eos && tok_is_stop(r->t, id)) {
        o->finish = GEN_FINISH_STOP;
        r->done = 1;
    }
}

int spec_target_check(const engine *e, memra_err *err)
{
    if (!engine_can_checkpoint(e))
        return memra_fail(err, "speculative decoding of a %s model needs the engine to keep a "
                          "checkpoint of each sequence's recurrent state (engine_opts.snapshots)",
                          family_name(engine_config(e)->family));
    return 0;
}

/* The rows a round's checkpoint must keep (the newest token's and the
 * drafts'), so SPEC_K_MAX + 1 for every K. */
int spec_snapshots(void) { return SPEC_K_MAX + 1; }

/* One round between its phases: the drafts, the rows to verify them
 * (the newest token and the drafts) and where the sequence stood. */
typedef struct {
    spec_draft draft;
    int32_t rows[SPEC_K_MAX + 1];
    int64_t pos;
    int rewind; /* the sequence cuts back (else its checkpoint keeps the rows' states) */
    double draft_ms; /* the drafter's time */
} round_prep;

/* The drafter's proposal and the rows to run; a recurrent state's
 * checkpoint to go back to. */
static int round_propose(engine *e, engine_seq *seq, spec_drafter *d, const int32_t *ctx,
                         int64_t n, int k, spec_rng *rng, round_prep *p, memra_err *err)
{
    p->pos = engine_seq_pos(seq);
    MEMRA_ASSERT(p->pos == n - 1 && k >= 0 && k <= SPEC_K_MAX);
    p->draft.n = 0;
    d->seq = seq;
    double t0 = clock_now_ms();
    if (k > 0 && d->propose(d, ctx, n, k, rng, &p->draft, err) != 0)
        return -1;
    p->draft_ms = clock_now_ms() - t0;
    MEMRA_ASSERT(p->draft.n >= 0 && p->draft.n <= k);
    p->rows[0] = ctx[n - 1];
    memcpy(p->rows + 1, p->draft.tokens, (size_t)p->draft.n * sizeof *p->rows);
    /* A recurrent state cannot be cut back: the checkpoint keeps the state
     * after each row the round runs, whichever it ends at. */
    p->rewind = engine_rewindable(e);
    if (!p->rewind && engine_seq_checkpoint(seq, p->draft.n + 1, err) != 0)
        return -1;
    return 0;
}

/* Verify p's drafts against the model's rows (logits: draft.n + 1 rows of
 * the round's forward, modified), emit, and cut the sequence back. */
static int round_verify(engine *e, engine_seq *seq, sampler *s, const round_prep *p,
                        float *logits, spec_rng *rng, spec_scratch *scratch, float *raw,
                        const spec_constraint *con, spec_round_result *out, memra_err *err)
{
    size_t vocab = (size_t)engine_config(e)->n_vocab;
    int64_t pos = p->pos;
    /* Row i is the model's distribution after draft token i: verify
     * draft i + 1 against it, stopping at the first rejection. */
    spec_dist dist;
    int32_t tok, a = 0;
    for (int32_t i = 0; i <= p->draft.n; i++) {
        if (raw)
            memcpy(raw + (size_t)i * vocab, logits + (size_t)i * vocab, vocab * sizeof *raw);
        if ((con && con->mask(con->ctx, s, err) != 0) ||
            row_dist(s, logits + (size_t)i * vocab, &dist, err) != 0) {
            engine_seq_truncate(seq, pos); /* as before the round */
            return -1;
        }
        int32_t emitted;
        int last = 1;
        if (i == p->draft.n) {
            emitted = spec_draw(&dist, rng); /* every draft accepted: a bonus */
        } else if (spec_verify_token(&dist, &p->draft.q[i], p->draft.tokens[i], rng, scratch,
                                     &tok)) {
            emitted = p->draft.tokens[i];
            a++;
            last = 0;
        } else {
            emitted = tok;
        }
        out->tokens[out->n++] = emitted;
        /* the penalties of the next row count it, as plain decoding's do,
         * and the constraint takes it */
        if (sampler_accept(s, emitted, err) != 0 ||
            (con && con->accept(con->ctx, emitted, err) != 0)) {
            engine_seq_truncate(seq, pos);
            return -1;
        }
        if (last)
            break;
    }
    /* Keep the newest token's row and the accepted drafts' rows: a
     * recurrent state goes back to the state the step left after the last
     * of them, which its checkpoint kept (the bytes a step of those rows
     * alone gives: every backend computes a row's state in order, whatever
     * else the step holds). */
    engine_seq_truncate(seq, pos + 1 + a);
    out->drafted = p->draft.n;
    out->accepted = a;
    out->draft_ms = p->draft_ms;
    return 0;
}

/* A greedy round needs only the model's token at each row: the rows are
 * sampled where the step runs (engine_forward_rows_sample: on the device,
 * no logits read back) when nothing else wants their logits (no
 * constraint's per-row mask, no raw copy). */
static int greedy_rows(sampler *s, const spec_constraint *con, const float *raw)
{
    return sampler_is_greedy(s) && !con && !raw;
}

/* round_verify for greedy_rows: ids[i] the model's token at row i, the
 * argmax (lowest id on ties) after the bias, as round_verify's point
 * masses have it; a draft is kept only when it is that token. */
static int round_verify_ids(engine_seq *seq, sampler *s, const round_prep *p, const int32_t *ids,
                            const memra_err *row_errs, spec_round_result *out, memra_err *err)
{
    int64_t pos = p->pos;
    int32_t a = 0;
    for (int32_t i = 0; i <= p->draft.n; i++) {
        if (ids[i] < 0) {
            *err = row_errs[i];
            engine_seq_truncate(seq, pos); /* as before the round */
            return -1;
        }
        int last = i == p->draft.n || ids[i] != p->draft.tokens[i];
        out->tokens[out->n++] = ids[i];
        if (sampler_accept(s, ids[i], err) != 0) {
            engine_seq_truncate(seq, pos);
            return -1;
        }
        if (last)
            break;
        a++;
    }
    engine_seq_truncate(seq, pos + 1 + a);
    out->drafted = p->draft.n;
    out->accepted = a;
    out->draft_ms = p->draft_ms;
    return 0;
}

int spec_k_cap(const engine *e)
{
    int rows = engine_rows_alone(e);
    return rows > 0 && rows - 1 < SPEC_K_MAX ? rows - 1 : SPEC_K_MAX;
}

int spec_round(engine *e, engine_seq *seq, sampler *s, spec_drafter *d, const int32_t *ctx,
               int64_t n, int k, spec_rng *rng, spec_scratch *scratch, float *logits,
               float *raw, const spec_constraint *con, spec_round_result *out,
               memra_err *err)
{
    memset(out, 0, sizeof *out);
    if (k > spec_k_cap(e))
        k = spec_k_cap(e);
    round_prep p;
    if (round_propose(e, seq, d, ctx, n, k, rng, &p, err) != 0)
        return -1;
    if (greedy_rows(s, con, raw)) {
        int rows = p.draft.n + 1;
        sampler *smp[SPEC_K_MAX + 1];
        int32_t ids[SPEC_K_MAX + 1];
        memra_err row_errs[SPEC_K_MAX + 1];
        const int32_t *toks = p.rows;
        for (int i = 0; i < rows; i++)
            smp[i] = s;
        if (engine_forward_rows_sample(e, &seq, &toks, &rows, 1, smp, ids, row_errs, err) != 0)
            return -1;
        return round_verify_ids(seq, s, &p, ids, row_errs, out, err);
    }
    if (engine_forward(e, seq, p.rows, p.draft.n + 1, logits, 1, err) != 0)
        return -1;
    return round_verify(e, seq, s, &p, logits, rng, scratch, raw, con, out, err);
}

int spec_rounds(engine *e, spec_round_job *jobs, int n_jobs, spec_scratch *scratch,
                float *logits, int logits_rows, int *n_steps)
{
    int steps = 0;
    size_t vocab = (size_t)engine_config(e)->n_vocab;
    int cap = engine_n_batch(e) < logits_rows ? engine_n_batch(e) : logits_rows;
    if (engine_rows_alone(e) > 0 && engine_rows_alone(e) < cap)
        cap = engine_rows_alone(e);
    round_prep *prep = xmalloc((size_t)n_jobs * sizeof *prep);
    engine_seq **seqs = xmalloc((size_t)n_jobs * sizeof *seqs);
    const int32_t **toks = xmalloc((size_t)n_jobs * sizeof *toks);
    int *nrows = xmalloc((size_t)n_jobs * sizeof *nrows), *group = xmalloc((size_t)n_jobs * sizeof *group);
    int failed = 0;
    for (int j = 0; j < n_jobs; j++) {
        spec_round_job *jb = &jobs[j];
        memset(&jb->out, 0, sizeof jb->out);
        int k = jb->k < spec_k_cap(e) ? jb->k : spec_k_cap(e);
        if (k > cap - 1)
            k = cap - 1;
        jb->rc = round_propose(e, jb->seq, jb->d, jb->ctx, jb->n, k < 0 ? 0 : k, jb->rng, &prep[j],
                               &jb->err);
        failed += jb->rc != 0;
    }
    /* the proposed rows in steps of at most cap rows, jobs in order */
    for (int j0 = 0; j0 < n_jobs;) {
        int ng = 0, rows = 0, j = j0;
        for (; j < n_jobs; j++) {
            if (jobs[j].rc != 0)
                continue;
            int r = prep[j].draft.n + 1;
            if (rows + r > cap)
                break;
            seqs[ng] = jobs[j].seq;
            toks[ng] = prep[j].rows;
            nrows[ng] = r;
            group[ng++] = j;
            rows += r;
        }
        j0 = j;
        if (ng == 0)
            continue;
        memra_err ferr;
        steps++;
        /* a step of greedy rounds only: each row's token, not its logits */
        int greedy = 1;
        for (int g = 0; g < ng && greedy; g++) {
            const spec_round_job *jb = &jobs[group[g]];
            greedy = greedy_rows(jb->smp, jb->con, jb->raw);
        }
        if (greedy) {
            sampler **smp = xmalloc((size_t)rows * sizeof *smp);
            int32_t *ids = xmalloc((size_t)rows * sizeof *ids);
            memra_err *row_errs = xmalloc((size_t)rows * sizeof *row_errs);
            for (int g = 0, at = 0; g < ng; at += nrows[g], g++)
                for (int r = 0; r < nrows[g]; r++)
                    smp[at + r] = jobs[group[g]].smp;
            int frc = engine_forward_rows_sample(e, seqs, toks, nrows, ng, smp, ids, row_errs,
                                                 &ferr);
            for (int g = 0, at = 0; g < ng; at += nrows[g], g++) {
                spec_round_job *jb = &jobs[group[g]];
                if (frc != 0) {
                    engine_seq_truncate(jb->seq, prep[group[g]].pos);
                    jb->rc = -1;
                    jb->err = ferr;
                } else {
                    jb->rc = round_verify_ids(jb->seq, jb->smp, &prep[group[g]], ids + at,
                                              row_errs + at, &jb->out, &jb->err);
                }
                failed += jb->rc != 0;
            }
            free(smp);
            free(ids);
            free(row_errs);
            continue;
        }
        if (engine_forward_rows(e, seqs, toks, nrows, ng, logits, &ferr) != 0) {
            for (int g = 0; g < ng; g++) {
                spec_round_job *jb = &jobs[group[g]];
                engine_seq_truncate(jb->seq, prep[group[g]].pos);
                jb->rc = -1;
                jb->err = ferr;
                failed++;
            }
            continue;
        }
        for (int g = 0, at = 0; g < ng; at += nrows[g], g++) {
            spec_round_job *jb = &jobs[group[g]];
            jb->rc = round_verify(e, jb->seq, jb->smp, &prep[group[g]], logits + (size_t)at * vocab,
                                  jb->rng, scratch, jb->raw, jb->con, &jb->out, &jb->err);
            failed += jb->rc != 0;
        }
    }
    free(prep);
    free(seqs);
    free(toks);
    free(nrows);
    free(group);
    if (n_steps)
        *n_steps = steps;
    return failed;
}

int spec_generate(engine *e, const tokenizer *t, spec_drafter *d, const int32_t *prompt,
                  size_t n_prompt, const spec_params *p, spec_result *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    out->n_prompt = n_prompt;
    out->finish = GEN_FINISH_LENGTH;
    if (check_params(p, err) != 0 || spec_target_check(e, err) != 0)
        return -1;
    int64_t n_ctx = engine_n_ctx(e);
    size_t vocab = (size_t)engine_config(e)->n_vocab;
    if (n_prompt == 0)
        return memra_fail(err, "the prompt is empty (no tokens, not even BOS): nothing to continue");
    if ((int64_t)n_prompt >= n_ctx)
        return memra_fail(err, "the prompt of %zu tokens does not fit the context of %lld "
                               "(room is needed for at least one generated token)",
                          n_prompt, (long long)n_ctx);
    sampler *s = gen_model_sampler(&p->sampling, t, (int32_t)vocab, err);
    if (!s)
        return -1;
    spec_run r = {.e = e, .t = t, .p = p, .out = out, .cap = 64};
    r.ctx = xmalloc(((size_t)n_ctx + 1) * sizeof *r.ctx);
    memcpy(r.ctx, prompt, n_prompt * sizeof *prompt);
    r.n = (int64_t)n_prompt;
    out->tokens = xmalloc(r.cap * sizeof(int32_t));
    float *logits = xmalloc((size_t)(SPEC_K_MAX + 1) * vocab * sizeof *logits);
    spec_rng rng = {p->sampling.seed, 0};
    spec_scratch scratch = {0};
    engine_seq *seq = NULL;
    spec_dist dist;

    /* The prompt, on the model and in the drafter, then the first token. */
    double t0 = clock_now_ms();
    int rc = engine_seq_new(e, &seq, err);
    if (rc == 0)
        rc = engine_forward(e, seq, prompt, (int)n_prompt, logits, 0, err);
    if (rc == 0)
        rc = d->begin(d, prompt, (int64_t)n_prompt, &p->sampling, err);
    for (size_t i = 0; rc == 0 && p->penalize_prompt && i < n_prompt; i++)
        rc = sampler_accept(s, prompt[i], err);
    int32_t first = -1;
    if (rc == 0 && (rc = row_dist(s, logits, &dist, err)) == 0) {
        first = spec_draw(&dist, &rng);
        emit(&r, first);
        rc = sampler_accept(s, first, err);
    }
    out->prefill_ms = clock_now_ms() - t0;

    double t1 = clock_now_ms();
    while (rc == 0 && !r.done) {
        /* The newest token is not in the KV yet: the round runs it first. */
        int64_t pos = engine_seq_pos(seq);
        MEMRA_ASSERT(pos == r.n - 1);
        if (pos >= n_ctx)
            break; /* the context is full: finish "length", as generate() */
        int64_t left = p->n_predict >= 0 ? p->n_predict - (int64_t)out->n_tokens : INT64_MAX;
        if (left <= 0)
            break;
        /* A round emits up to k + 1 tokens and runs k + 1 rows: k is cut
         * to what the limit and the context leave (0: a plain step). */
        int64_t k = p->k;
        if (k > left - 1)
            k = left - 1;
        if (k > n_ctx - pos - 1)
            k = n_ctx - pos - 1;
        spec_round_result rr;
        if ((rc = spec_round(e, seq, s, d, r.ctx, r.n, (int)k, &rng, &scratch, logits, NULL,
                             NULL, &rr, err)) != 0)
            break;
        out->rounds++;
        out->drafted += (uint64_t)rr.drafted;
        out->accepted += (uint64_t)rr.accepted;
        out->draft_ms += rr.draft_ms;
        out->accepted_hist[rr.accepted]++;
        for (int32_t i = 0; i < rr.n; i++)
            emit(&r, rr.tokens[i]);
    }
    out->decode_ms = clock_now_ms() - t1;
    if (seq)
        engine_seq_free(seq);
    spec_scratch_free(&scratch);
    free(logits);
    free(r.ctx);
    sampler_free(s);
    if (rc != 0)
        spec_result_free(out);
    return rc;
}
