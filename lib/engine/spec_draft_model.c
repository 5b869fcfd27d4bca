/* The draft-model drafter (spec.h): a small model of the same vocabulary
 * runs the context on its own engine and samples K tokens from its own
 * distribution, one decode step each.
 *
 * Its KV follows the context by the tokens it holds: before drafting, the
 * longest common prefix of what it ran and the context stays, the rest is
 * dropped with engine_seq_truncate (the rejected drafts of the last round:
 * no copies) and the context's new tokens run in one forward.
 *
 * The vocabulary-trimmed head (d2t): the draft's steps run a head of
 * those rows of its output matrix alone (engine_head_new, on the draft's
 * backend, in the matrix's own format), which gives every other id -inf
 * and each kept id the logit the full head gives it. The head is the
 * largest part of a small drafter (memra-tiny-draft: 524,288 of its
 * 967,936 parameters), so the step reads n_trim / n_vocab of it.
 *
 * Greedy drafting samples where the draft runs (engine_forward_sample: on
 * the device, only the id comes back); otherwise the logits come back for
 * the drafter's distribution.
 *
 * Several drafters may share one draft engine (each with a sequence of
 * its own), as long as their calls do not overlap. */
#include "engine/spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/model.h"

typedef struct {
    engine *e;
    engine_seq *s;
    int32_t *kv;        /* the tokens s holds, [n_ctx] */
    int64_t n_kv, n_ctx;
    int32_t n_vocab;    /* the draft's logits */
    int32_t n_allowed;  /* ids it may propose: [0, n_allowed) */
    sampler *smp;
    float *logits;      /* [n_vocab] */
    const model_head *head; /* the trimmed head (borrowed), or NULL */
    /* the distributions drafted this round */
    int32_t *q_ids[SPEC_K_MAX];
    double *q_probs[SPEC_K_MAX];
} draft_model;

static void ran(draft_model *dm, const int32_t *tokens, int n)
{
    memcpy(dm->kv + dm->n_kv, tokens, (size_t)n * sizeof *tokens);
    dm->n_kv += n;
}

/* Run tokens at the end of the draft's sequence; with logits, the last
 * one's into dm->logits with every id it may not propose at -inf. */
static int run(draft_model *dm, const int32_t *tokens, int n, int logits, memra_err *err)
{
    /* The head is the engine's, one at a time: drafters sharing a draft
     * engine (the server's, one per slot) each name theirs per forward. */
    engine_use_head(dm->e, dm->head);
    int rc = engine_forward(dm->e, dm->s, tokens, n, logits ? dm->logits : NULL, 0, err);
    engine_use_head(dm->e, NULL);
    if (rc != 0)
        return memra_wrap(err, "draft model");
    ran(dm, tokens, n);
    if (logits)
        for (int32_t i = dm->n_allowed; i < dm->n_vocab; i++)
            dm->logits[i] = -INFINITY;
    return 0;
}

/* Run tokens and sample the next one greedily where the draft runs. Only
 * when no id needs banning beyond what the head does (greedy_here). */
static int run_sample(draft_model *dm, const int32_t *tokens, int n, int32_t *tok,
                      memra_err *err)
{
    engine_use_head(dm->e, dm->head);
    int rc = engine_forward_sample(dm->e, dm->s, tokens, n, dm->smp, tok, err);
    engine_use_head(dm->e, NULL);
    if (rc != 0)
        return memra_wrap(err, "draft model");
    ran(dm, tokens, n);
    return 0;
}

/* Greedy drafting on the draft's own sampler: every id it may not propose
 * is out already (a trimmed head holds allowed ids only, or every id is
 * allowed). */
static int greedy_here(const draft_model *dm)
{
    return sampler_is_greedy(dm->smp) && (dm->head || dm->n_allowed == dm->n_vocab);
}

static int dm_begin(spec_drafter *d, const int32_t *prompt, int64_t n, const sampler_params *sp,
                    memra_err *err)
{
    draft_model *dm = d->impl;
    /* The request's sampling, without the bias entries the draft's
     * vocabulary cannot hold (run() bans those ids anyway). */
    sampler_params p = *sp;
    sampler_logit_bias *bias = xmalloc(((size_t)sp->n_logit_bias + 1) * sizeof *bias);
    p.n_logit_bias = 0;
    for (int32_t i = 0; i < sp->n_logit_bias; i++)
        if (sp->logit_bias[i].id < dm->n_allowed)
            bias[p.n_logit_bias++] = sp->logit_bias[i];
    p.logit_bias = bias;
    sampler_free(dm->smp);
    dm->smp = sampler_new(&p, dm->n_vocab, err);
    free(bias);
    if (!dm->smp)
        return memra_wrap(err, "draft model");
    engine_seq_reset(dm->s);
    dm->n_kv = 0;
    /* The prompt now (counted as prefill), all of it but the last token,
     * which propose runs for its logits. */
    if (n > 1 && n - 1 <= dm->n_ctx)
        return run(dm, prompt, (int)(n - 1), 0, err);
    return 0;
}

/* Keep q (the sampler's arrays live until its next call). */
static void keep_dist(draft_model *dm, int i, const spec_dist *q, spec_dist *out)
{
    dm->q_ids[i] = xrealloc(dm->q_ids[i], (size_t)q->n * sizeof(int32_t));
    dm->q_probs[i] = xrealloc(dm->q_probs[i], (size_t)q->n * sizeof(double));
    memcpy(dm->q_ids[i], q->ids, (size_t)q->n * sizeof(int32_t));
    memcpy(dm->q_probs[i], q->probs, (size_t)q->n * sizeof(double));
    *out = (spec_dist){dm->q_ids[i], dm->q_probs[i], q->n};
}

/* Greedy drafting where the draft runs: the context's new tokens
 * (fresh[0, n_fresh)), then each draft. The one-token steps run as one
 * chain (engine_forward_chain_sample: on CUDA one graph, the drafts read
 * back once); when the context brings more than one new token (every
 * draft of the last round accepted), their step samples the first draft
 * and the chain the rest. */
static int propose_greedy(draft_model *dm, const int32_t *fresh, int n_fresh, int k,
                          spec_draft *out, memra_err *err)
{
    int32_t *ids = out->tokens;
    int done = 0;
    if (n_fresh > 1) {
        if (run_sample(dm, fresh, n_fresh, &ids[0], err) != 0)
            return -1;
        done = 1;
    }
    if (done < k) {
        engine_use_head(dm->e, dm->head);
        int32_t first = done ? ids[0] : fresh[0];
        int rc = engine_forward_chain_sample(dm->e, dm->s, first, k - done, dm->smp, ids + done,
                                             err);
        engine_use_head(dm->e, NULL);
        if (rc != 0)
            return memra_wrap(err, "draft model");
        ran(dm, &first, 1);
        ran(dm, ids + done, k - done - 1);
    }
    for (int i = 0; i < k; i++) {
        /* the point mass on the argmax, as sampler_probs gives it */
        dm->q_ids[i] = xrealloc(dm->q_ids[i], sizeof(int32_t));
        dm->q_probs[i] = xrealloc(dm->q_probs[i], sizeof(double));
        dm->q_ids[i][0] = ids[i];
        dm->q_probs[i][0] = 1.0;
        out->q[i] = (spec_dist){dm->q_ids[i], dm->q_probs[i], 1};
    }
    out->n = k;
    return 0;
}

static int dm_propose(spec_drafter *d, const int32_t *ctx, int64_t n, int k, spec_rng *r,
                      spec_draft *out, memra_err *err)
{
    draft_model *dm = d->impl;
    out->n = 0;
    /* Drafting k tokens runs the context and k - 1 of them. */
    if (k > dm->n_ctx - n + 1)
        k = (int)(dm->n_ctx - n + 1);
    if (k <= 0)
        return 0;
    /* What the draft ran and the context share stays; at least the last
     * context token runs again, for its logits. */
    int64_t keep = 0;
    while (keep < dm->n_kv && keep < n - 1 && dm->kv[keep] == ctx[keep])
        keep++;
    engine_seq_truncate(dm->s, keep);
    dm->n_kv = keep;
    if (greedy_here(dm))
        return propose_greedy(dm, ctx + keep, (int)(n - keep), k, out, err);
    for (int i = 0; i < k; i++) {
        /* the context's new tokens first, then each draft */
        const int32_t *t = i ? &out->tokens[i - 1] : ctx + keep;
        int tn = i ? 1 : (int)(n - keep);
        if (run(dm, t, tn, 1, err) != 0)
            return -1;
        spec_dist q;
        if (sampler_probs(dm->smp, dm->logits, &q.ids, &q.probs, &q.n, err) != 0)
            return memra_wrap(err, "draft model");
        keep_dist(dm, i, &q, &out->q[i]);
        out->tokens[i] = spec_draw(&out->q[i], r);
        out->n = i + 1;
    }
    return 0;
}

static void dm_free(spec_drafter *d)
{
    draft_model *dm = d->impl;
    engine_seq_free(dm->s);
    sampler_free(dm->smp);
    for (int i = 0; i < SPEC_K_MAX; i++) {
        free(dm->q_ids[i]);
        free(dm->q_probs[i]);
    }
    free(dm->kv);
    free(dm->logits);
    free(dm);
    free(d);
}

struct spec_trim {
    engine *draft;
    int32_t n_allowed, n_trim;
    model_head *head;
};

int spec_trim_new(engine *draft, int32_t n_allowed, const int32_t *d2t, int32_t n_trim,
                  spec_trim **out, memra_err *err)
{
    *out = NULL;
    const model_config *c = engine_config(draft);
    if (n_allowed > c->n_vocab)
        n_allowed = (int32_t)c->n_vocab;
    if (n_trim < 1 || n_trim > n_allowed)
        return memra_fail(err, "a trim of %d ids for a drafter that may propose %d", (int)n_trim,
                          (int)n_allowed);
    for (int32_t j = 0; j < n_trim; j++)
        if (d2t[j] < 0 || d2t[j] >= n_allowed)
            return memra_fail(err, "rank %d: id %d is outside the %d ids the model may emit",
                              (int)j, (int)d2t[j], (int)n_allowed);
    spec_trim *t = xcalloc(1, sizeof *t);
    t->draft = draft;
    t->n_allowed = n_allowed;
    t->n_trim = n_trim;
    if (engine_head_new(draft, d2t, n_trim, &t->head, err) != 0) {
        free(t);
        return memra_wrap(err, "draft model's trimmed head");
    }
    *out = t;
    return 0;
}

void spec_trim_free(spec_trim *t)
{
    if (!t)
        return;
    engine_head_free(t->draft, t->head);
    free(t);
}

int spec_drafter_model_new(engine *draft, int32_t n_allowed, const spec_trim *trim,
                           spec_drafter **out, memra_err *err)
{
    const model_config *c = engine_config(draft);
    if (trim && trim->draft != draft)
        return memra_fail(err, "a trimmed head made for another draft engine");
    if (!engine_rewindable(draft))
        return memra_fail(err, "a draft model whose sequences cannot be cut back (the %s "
                          "family's recurrent layers) cannot draft yet",
                          family_name(c->family));
    draft_model *dm = xcalloc(1, sizeof *dm);
    dm->e = draft;
    dm->n_ctx = engine_n_ctx(draft);
    dm->n_vocab = (int32_t)c->n_vocab;
    dm->n_allowed = n_allowed < dm->n_vocab ? n_allowed : dm->n_vocab;
    dm->kv = xmalloc((size_t)dm->n_ctx * sizeof *dm->kv);
    dm->logits = xmalloc((size_t)dm->n_vocab * sizeof *dm->logits);
    spec_drafter *d = xcalloc(1, sizeof *d);
    *d = (spec_drafter){.kind = "draft", .impl = dm, .begin = dm_begin, .propose = dm_propose,
                        .free = dm_free};
    int rc = engine_seq_new(draft, &dm->s, err);
    if (rc == 0 && trim) {
        if (trim->n_allowed != dm->n_allowed)
            rc = memra_fail(err, "a trimmed head made for %d allowed ids, the drafter allows %d",
                            (int)trim->n_allowed, (int)dm->n_allowed);
        else
            dm->head = trim->head;
    }
    if (rc != 0) {
        if (dm->s)
            engine_seq_free(dm->s);
        dm->s = NULL;
        dm_free(d);
        return -1;
    }
    *out = d;
    return 0;
}
