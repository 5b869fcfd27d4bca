/* The MTP drafter (spec.h): the MTP (NextN) block a checkpoint carries
 * beside its layers (Qwen3.5's mtp.*) drafts on the model's own sequence.
 *
 * The block predicts the token after next from the model's final hidden
 * state at a position and the token that follows it; the engine keeps its
 * K/V up to date with every step of the model (engine_opts.mtp), so a
 * round costs the block's rows only: depth 0 at the newest run position
 * with the newest token (not run yet) gives d1, and each further depth
 * chains the block on its own output and the token it drafted before
 * (engine_mtp_draft). The chained rows' K/V is what the model's verify
 * step writes again from its real hidden states.
 *
 * Drafts are sampled from the block's distribution under the request's
 * sampling, as the draft model's are; verification makes the output
 * exact whatever they are (spec.h). */
#include "engine/spec.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

typedef struct {
    engine *e;
    int32_t n_vocab;
    int64_t dim;
    sampler *smp;
    float *logits;     /* [n_vocab] */
    float *h, *h_next; /* [dim]: the block's output, fed to the next depth */
    int32_t *q_ids[SPEC_K_MAX];
    double *q_probs[SPEC_K_MAX];
} mtp_drafter;

static int mtp_begin(spec_drafter *d, const int32_t *prompt, int64_t n, const sampler_params *sp,
                     memra_err *err)
{
    (void)prompt, (void)n;
    mtp_drafter *md = d->impl;
    sampler_free(md->smp);
    md->smp = sampler_new(sp, md->n_vocab, err);
    return md->smp ? 0 : memra_wrap(err, "mtp drafter");
}

static int mtp_propose(spec_drafter *d, const int32_t *ctx, int64_t n, int k, spec_rng *r,
                       spec_draft *out, memra_err *err)
{
    mtp_drafter *md = d->impl;
    out->n = 0;
    MEMRA_ASSERT(d->seq && md->smp);
    /* every chained row stays inside the context */
    int64_t room = engine_n_ctx(md->e) - engine_seq_pos(d->seq);
    if (k > room)
        k = (int)room;
    int32_t next = ctx[n - 1];
    /* nothing to draft from: the newest position's hidden state was never
     * kept (its tokens came from the prefix cache) */
    if (!engine_mtp_ready(md->e, d->seq))
        return 0;
    int greedy = sampler_is_greedy(md->smp);
    for (int i = 0; i < k; i++) {
        /* (the last depth's output feeds nothing: not read back) */
        float *h_out = i + 1 < k ? md->h_next : NULL;
        int32_t tok = -1;
        /* greedy: the token only, sampled where the draft runs */
        int rc = greedy ? engine_mtp_draft_sample(md->e, d->seq, next, i, i ? md->h : NULL,
                                                  md->smp, &tok, h_out, err)
                        : engine_mtp_draft(md->e, d->seq, next, i, i ? md->h : NULL, md->logits,
                                           h_out, err);
        if (rc != 0) {
            /* a deeper row the KV pool has no room for: the drafts so far */
            if (i > 0)
                return 0;
            return memra_wrap(err, "mtp drafter");
        }
        float *t = md->h;
        md->h = md->h_next;
        md->h_next = t;
        if (greedy) {
            /* the point mass on the argmax, as sampler_probs gives it */
            md->q_ids[i] = xrealloc(md->q_ids[i], sizeof(int32_t));
            md->q_probs[i] = xrealloc(md->q_probs[i], sizeof(double));
            md->q_ids[i][0] = tok;
            md->q_probs[i][0] = 1.0;
            out->q[i] = (spec_dist){md->q_ids[i], md->q_probs[i], 1};
            out->tokens[i] = next = tok;
            out->n = i + 1;
            continue;
        }
        spec_dist q;
        if (sampler_probs(md->smp, md->logits, &q.ids, &q.probs, &q.n, err) != 0)
            return memra_wrap(err, "mtp drafter");
        /* q lives until the sampler's next call: keep a copy */
        md->q_ids[i] = xrealloc(md->q_ids[i], (size_t)q.n * sizeof(int32_t));
        md->q_probs[i] = xrealloc(md->q_probs[i], (size_t)q.n * sizeof(double));
        memcpy(md->q_ids[i], q.ids, (size_t)q.n * sizeof(int32_t));
        memcpy(md->q_probs[i], q.probs, (size_t)q.n * sizeof(double));
        out->q[i] = (spec_dist){md->q_ids[i], md->q_probs[i], q.n};
        out->tokens[i] = next = spec_draw(&out->q[i], r);
        out->n = i + 1;
    }
    return 0;
}

static void mtp_free(spec_drafter *d)
{
    mtp_drafter *md = d->impl;
    sampler_free(md->smp);
    for (int i = 0; i < SPEC_K_MAX; i++) {
        free(md->q_ids[i]);
        free(md->q_probs[i]);
    }
    free(md->logits);
    free(md->h);
    free(md->h_next);
    free(md);
    free(d);
}

int spec_drafter_mtp_new(engine *e, spec_drafter **out, memra_err *err)
{
    *out = NULL;
    if (!engine_has_mtp(e))
        return memra_fail(err, "the MTP drafter needs the model's MTP block loaded "
                          "(engine_opts.mtp)");
    const model_config *c = engine_config(e);
    mtp_drafter *md = xcalloc(1, sizeof *md);
    md->e = e;
    md->n_vocab = (int32_t)c->n_vocab;
    md->dim = c->dim;
    md->logits = xmalloc((size_t)md->n_vocab * sizeof *md->logits);
    md->h = xmalloc((size_t)md->dim * sizeof *md->h);
    md->h_next = xmalloc((size_t)md->dim * sizeof *md->h_next);
    spec_drafter *d = xcalloc(1, sizeof *d);
    *d = (spec_drafter){.kind = engine_has_assistant(e) ? "assistant" : "mtp", .impl = md, .begin = mtp_begin, .propose = mtp_propose,
                        .free = mtp_free};
    *out = d;
    return 0;
}
