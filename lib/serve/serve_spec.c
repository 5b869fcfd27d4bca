/* The model's speculation (serve_spec.h): the drafter's engine, one
 * drafter per slot, and each speculating slot's context and stream. */
#include "serve/serve_spec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "format/ranks.h"
#include "model/checkpoint.h"

struct serve_spec_slot {
    spec_drafter *d;
    int32_t *ctx;       /* the prompt and every token emitted, [n_ctx + 1] */
    int64_t n;
    int begun;          /* the drafter has had begin() for this request */
    sampler_params sp;  /* the request's (its bias points into the request) */
    spec_rng rng;
    float *raw;         /* [(SPEC_K_MAX + 1) * n_vocab]: the raw logits of its last round, made at first use */
    serve_spec *owner;
};

struct serve_spec {
    int k, max_batch;
    engine *target;
    int64_t n_ctx;
    checkpoint dck;     /* the draft model's, open while its engine lives */
    int dck_open;
    engine *draft;      /* NULL: n-gram */
    spec_trim *trim;    /* --trim's head, shared by the sessions' drafters; NULL: none */
    serve_spec_slot *slots;
    int n_slots;
    float *logits;      /* [logits_rows * n_vocab]: the verify rows of one shared step */
    int logits_rows;
    spec_round_job *jobs; /* [n_slots] */
    size_t n_vocab;
    spec_scratch scratch;
    char describe[512];
};

int serve_spec_wanted(const serve_spec_opts *o) { return o->draft != NULL || o->ngram || o->mtp; }

/* A round replaces a batched decode step by a forward of K+1 rows of a
 * sequence; the rounds of the speculating requests share the model's
 * steps (serve_spec_rounds). They pay while the model's step is bound by
 * reading its weights and the drafts are accepted often enough; the
 * batch pays more once it serves enough requests. Measured per device
 * class (docs/FLAGS.md), both at 2 for now: on the 2-core CPU speculation
 * paid up to two requests decoding (a 0.6B shape in Q8_0, the n-gram
 * drafter, 58% accepted: c = 2 57.2 / 63.1 plain against 79.4 / 75.7
 * speculating) and not at four; on the H200 (a Qwen3-8B-shaped bf16 pair,
 * tests/tools/draft_bigram.py, K = 4) a draft that agrees with about half
 * of the model's tokens gave 297 / 370 / 443 tok/s at 1 / 2 / 4 requests
 * against 192 / 365 / 693 plain, and one that agrees with every token
 * 495 / 657 / 800 / 826 at 1 / 2 / 4 / 8 against 192 / 365 / 693 / 1,274. */
int serve_spec_default_max_batch(backend_kind b) { (void)b; return 2; }

int serve_spec_k(const serve_spec *sp) { return sp->k; }
int serve_spec_max_batch(const serve_spec *sp) { return sp->max_batch; }
const char *serve_spec_describe(const serve_spec *sp) { return sp->describe; }

int serve_spec_eligible(const serve_req *r) { return !r->work; }

/* The draft model: same vocabulary (spec_check_vocab), its own engine of
 * one sequence per slot, and one drafter per slot on it. */
static int load_draft(serve_spec *sp, const serve_spec_opts *o, const tokenizer *tok,
                      int32_t n_allowed, const engine_opts *eo, memra_err *err)
{
    if (checkpoint_open(o->draft, &sp->dck, err) != 0)
        return memra_wrap(err, "--draft");
    sp->dck_open = 1;
    if (sp->dck.vocab_only)
        return memra_fail(err, "--draft %s: a vocab-only GGUF has no weights to draft with",
                          o->draft);
    if (config_is_assistant(&sp->dck.config)) {
        /* an assistant drafts on the model's own engine, one drafter per slot */
        if (o->trim)
            return memra_fail(err, "--trim %s goes with a draft model, not an assistant (%s)",
                              o->trim, o->draft);
        if (engine_attach_assistant(sp->target, &sp->dck, err) != 0)
            return memra_wrap(err, "--draft");
        int rc = 0;
        for (int i = 0; i < sp->n_slots && rc == 0; i++)
            rc = spec_drafter_mtp_new(sp->target, &sp->slots[i].d, err);
        return rc;
    }
    tokenizer *dt;
    if (checkpoint_load_tokenizer(&sp->dck, &dt, err) != 0)
        return memra_wrap(err, "--draft %s", o->draft);
    int rc = spec_check_vocab(tok, dt, o->draft, err);
    tok_free(dt);
    if (rc != 0)
        return memra_wrap(err, "--draft");
    /* a draft model is small: it runs on one device, the last listed (a
     * tensor-parallel leader's), not split like the model */
    engine_opts deo = *eo;
    if (deo.n_devices > 0)
        deo.device = deo.devices[deo.n_devices - 1];
    deo.pp = deo.tp = deo.n_devices = 0;
    deo.n_ctx = sp->n_ctx;
    deo.n_seqs = sp->n_slots;
    deo.prefix_cache = 0;
    if (engine_load(&sp->dck, &deo, &sp->draft, err) != 0)
        return memra_wrap(err, "--draft %s", o->draft);
    int32_t *d2t = NULL, n_trim = 0;
    if (o->trim) {
        int32_t nv;
        if (ranks_read(o->trim, &d2t, &n_trim, &nv, err) != 0)
            return memra_wrap(err, "--trim");
        int64_t want = engine_config(sp->target)->n_vocab;
        if (nv != want) {
            free(d2t);
            return memra_fail(err, "--trim %s: the ranks were counted over a vocabulary of %d "
                              "ids; the model has %lld", o->trim, (int)nv, (long long)want);
        }
    }
    if (d2t) {
        rc = spec_trim_new(sp->draft, n_allowed, d2t, n_trim, &sp->trim, err);
        free(d2t);
        if (rc != 0)
            return memra_wrap(err, "--trim %s", o->trim);
    }
    for (int i = 0; i < sp->n_slots && rc == 0; i++)
        if ((rc = spec_drafter_model_new(sp->draft, n_allowed, sp->trim, &sp->slots[i].d, err)) != 0)
            memra_wrap(err, "%s %s", o->trim ? "--trim" : "--draft", o->trim ? o->trim : o->draft);
    return rc;
}

int serve_spec_new(const serve_spec_opts *o, engine *target, const tokenizer *tok,
                   int32_t n_allowed, const engine_opts *eo, int n_slots, serve_spec **out,
                   memra_err *err)
{
    *out = NULL;
    if ((o->draft != NULL) + !!o->ngram + !!o->mtp > 1)
        return memra_fail(err, "--draft, --ngram and --mtp: give one drafter per model");
    if (o->trim && !o->draft)
        return memra_fail(err, "--trim %s goes with --draft (the n-gram and MTP drafters have "
                          "no trimmed head)", o->trim);
    if (!serve_spec_wanted(o))
        return memra_fail(err, "speculation without a drafter (--draft, --ngram or --mtp)");
    if (o->mtp && !engine_has_mtp(target))
        return memra_fail(err, "--mtp: the model was loaded without its MTP block");
    if (spec_target_check(target, err) != 0)
        return -1;
    int k = o->k > 0 ? o->k : SERVE_SPEC_K_DEFAULT;
    if (k > SPEC_K_MAX)
        return memra_fail(err, "--spec-k %d: draft tokens per round go from 1 to %d", k,
                          SPEC_K_MAX);
    serve_spec *sp = xcalloc(1, sizeof *sp);
    sp->k = k;
    sp->max_batch = o->max_batch > 0 ? o->max_batch : serve_spec_default_max_batch(eo->backend);
    sp->target = target;
    sp->n_ctx = engine_n_ctx(target);
    sp->n_slots = n_slots;
    sp->slots = xcalloc((size_t)n_slots, sizeof *sp->slots);
    for (int i = 0; i < n_slots; i++) {
        sp->slots[i].ctx = xmalloc(((size_t)sp->n_ctx + 1) * sizeof *sp->slots[i].ctx);
        sp->slots[i].owner = sp;
    }
    sp->n_vocab = (size_t)engine_config(target)->n_vocab;
    /* one shared step verifies up to 32 rows (the most CUDA keeps row by
     * row; engine_rows_alone may allow fewer), or one round's */
    int64_t rows = (int64_t)n_slots * (k + 1);
    sp->logits_rows = (int)(rows < 32 ? rows : 32 > k + 1 ? 32 : k + 1);
    sp->logits = xmalloc((size_t)sp->logits_rows * sp->n_vocab * sizeof *sp->logits);
    sp->jobs = xcalloc((size_t)n_slots, sizeof *sp->jobs);
    int rc = 0;
    if (o->draft) {
        rc = load_draft(sp, o, tok, n_allowed, eo, err);
        if (sp->dck_open && config_is_assistant(&sp->dck.config))
            snprintf(sp->describe, sizeof sp->describe, "assistant %s", o->draft);
        else if (o->trim)
            snprintf(sp->describe, sizeof sp->describe, "draft %s, trim %s", o->draft, o->trim);
        else
            snprintf(sp->describe, sizeof sp->describe, "draft %s", o->draft);
    } else if (o->mtp) {
        /* the model's own block, one drafter per slot on the model's engine */
        for (int i = 0; i < n_slots && rc == 0; i++)
            rc = spec_drafter_mtp_new(target, &sp->slots[i].d, err);
        snprintf(sp->describe, sizeof sp->describe, "mtp");
    } else {
        /* the context's last 3 tokens, else 2, else 1 (memra-spec's) */
        for (int i = 0; i < n_slots && rc == 0; i++)
            rc = spec_drafter_ngram_new(1, 3, &sp->slots[i].d, err);
        snprintf(sp->describe, sizeof sp->describe, "ngram");
    }
    if (rc != 0) {
        serve_spec_free(sp);
        return -1;
    }
    *out = sp;
    return 0;
}

void serve_spec_free(serve_spec *sp)
{
    if (!sp)
        return;
    for (int i = 0; i < sp->n_slots; i++) {
        spec_drafter_free(sp->slots[i].d); /* its draft sequence, before the engine */
        free(sp->slots[i].ctx);
        free(sp->slots[i].raw);
    }
    free(sp->slots);
    spec_trim_free(sp->trim);
    if (sp->draft)
        engine_free(sp->draft);
    if (sp->dck_open)
        checkpoint_close(&sp->dck);
    spec_scratch_free(&sp->scratch);
    free(sp->logits);
    free(sp->jobs);
    free(sp);
}

serve_spec_slot *serve_spec_slot_start(serve_spec *sp, int i, const serve_req *r, int choice)
{
    serve_spec_slot *ss = &sp->slots[i];
    MEMRA_ASSERT(r->n_prompt <= (size_t)sp->n_ctx);
    memcpy(ss->ctx, r->prompt, r->n_prompt * sizeof *ss->ctx);
    ss->n = (int64_t)r->n_prompt;
    ss->begun = 0;
    ss->sp = r->sampling;
    /* choice i is the single request of seed + i (as its sampler is), on
     * its own stream: a seeded request speculates reproducibly */
    ss->sp.seed += (uint64_t)choice;
    ss->rng = (spec_rng){ss->sp.seed, 0};
    return ss;
}

void serve_spec_slot_push(serve_spec_slot *ss, int32_t id)
{
    MEMRA_ASSERT(ss->n <= ss->owner->n_ctx);
    ss->ctx[ss->n++] = id;
}

int serve_spec_rounds(serve_spec *sp, serve_spec_job *jobs, int n, int *n_steps)
{
    MEMRA_ASSERT(n <= sp->n_slots);
    int n_run = 0, failed = 0;
    for (int j = 0; j < n; j++) {
        serve_spec_job *jb = &jobs[j];
        serve_spec_slot *ss = jb->ss;
        memset(&jb->out, 0, sizeof jb->out);
        jb->rc = 0;
        if (jb->want_raw && !ss->raw)
            ss->raw = xmalloc((size_t)(SPEC_K_MAX + 1) * sp->n_vocab * sizeof *ss->raw);
        /* The round writes rows at positions n - 1 .. n - 1 + k and emits
         * up to k + 1 tokens: k is cut to what max_tokens and the context
         * leave, as spec_generate cuts it. */
        int64_t k = sp->k, pos = ss->n - 1;
        if (k > jb->left - 1)
            k = jb->left - 1;
        if (k > sp->n_ctx - pos - 1)
            k = sp->n_ctx - pos - 1;
        if (k < 0)
            k = 0;
        /* The drafter starts at the slot's first round, from the context as
         * it is then (a draft model prefills it there); a slot that decoded
         * plainly for a while is caught up by propose (spec_draft_model.c
         * runs what its sequence lacks in one forward). */
        if (k > 0 && !ss->begun) {
            if (ss->d->begin(ss->d, ss->ctx, ss->n, &ss->sp, &jb->err) != 0) {
                jb->rc = -1;
                failed++;
                continue;
            }
            ss->begun = 1;
        }
        sp->jobs[n_run++] = (spec_round_job){
            .seq = jb->seq, .smp = jb->smp, .d = ss->d, .ctx = ss->ctx, .n = ss->n, .k = (int)k,
            .rng = &ss->rng, .raw = jb->want_raw ? ss->raw : NULL, .con = jb->con,
        };
    }
    *n_steps = 0;
    if (n_run > 0)
        spec_rounds(sp->target, sp->jobs, n_run, &sp->scratch, sp->logits, sp->logits_rows,
                    n_steps);
    for (int j = 0, r = 0; j < n; j++) {
        if (jobs[j].rc != 0)
            continue;
        jobs[j].out = sp->jobs[r].out;
        jobs[j].rc = sp->jobs[r].rc;
        jobs[j].err = sp->jobs[r].err;
        failed += jobs[j].rc != 0;
        r++;
    }
    return failed;
}

const float *serve_spec_raw_row(const serve_spec_slot *ss, int i)
{
    return ss->raw + (size_t)i * ss->owner->n_vocab;
}
