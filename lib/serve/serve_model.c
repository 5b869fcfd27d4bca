#include "serve/serve_model.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "engine/embed.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/checkpoint.h"
#include "model/chat_source.h"
#include "model/config.h"
#include "serve/serve_rerank.h"
#include "serve/serve_spec.h"
#include "grammar/gram_maskpool.h"
#include "tok/detok.h"

#define KV_BLOCK_SIZE 16
#define KEEPALIVE_S 1.0

typedef struct {
    serve_req *req; /* NULL: the slot is free */
    int choice;     /* which of the request's choices this slot generates */
    serve_logprob lp; /* the sampled token's log-probabilities (req->logprobs) */
    strbuf lp_bytes;  /* the bytes lp's offsets point into */
    int32_t host_in;  /* the token a host-path slot runs next (host_pending) */
    gram_state *gst;  /* the request's grammar, advanced token by token (req->grammar) */
    int lazy;         /* gst is req->lazy_grammar's, started at its trigger */
    int gram_dead;    /* the step's mask allowed nothing: ends after the step */
    uint32_t *gmask;  /* [gram_mask_words] this slot's mask of the step (batched masks) */
    char ltail[48];   /* the last bytes generated, where the trigger is looked for */
    size_t n_ltail;
    int host_pending;
    serve_spec_slot *spec; /* the request speculates when few slots decode; NULL: never */
    int spec_pending;      /* a round is due this tick (host_in its newest token) */
    int spec_ahead;        /* tokens the round added to smp's history (slot_sample skips them) */
    /* tokens a round's constraint followed already (the reasoning markers,
     * the lazy grammar's trigger: slot_sample skips them), and the
     * reasoning count after each, so a request that stops inside the
     * round counts what plain decoding would */
    int spec_watched, n_spec_watched;
    size_t reason_after[SPEC_K_MAX + 1];
    engine_seq *seq;
    sampler *smp;
    detok *dt;
    int32_t next;   /* the token the last forward sampled, or -1 (next_err) */
    memra_err next_err;
    int has_logits; /* the last forward sampled this slot's next token */
    size_t n_prefilled, n_generated;
    double t_last;  /* when its last token (or the request) came */
    strbuf piece;
    /* reasoning tokens (req->reason_open): inside it now, how many, and the
     * last bytes generated, where the markers are looked for */
    int in_reason;
    size_t n_reasoning;
    int stop_hit;   /* 1 + the index of the stop string that ended it */
    size_t n_adopted; /* prompt tokens the prefix cache gave */
    int follows;      /* waited last tick for another slot computing its next chunk */
    /* What it prefills: the request's prompt, or one input of its work. */
    const int32_t *prompt;
    size_t n_prompt;
    int input;        /* work: the input's index */
    embed_pool *pool; /* embed models: this slot's pooling, reset for each input */
    char tail[96];
    size_t n_tail;
} serve_slot;

struct serve_model {
    char *alias;
    checkpoint ck;
    int ck_open;
    tokenizer *tok;
    engine *eng;
    jinja_template *tmpl;
    char *tmpl_why;
    char *bos, *eos;
    toolparse_format tool_fmt; /* what the template teaches (toolparse_detect) */
    const char *reason_open;   /* the reasoning markup the template knows, or NULL */
    const char *reason_close;
    int64_t n_ctx;
    int32_t n_vocab;
    int32_t n_tok;  /* the tokenizer's ids: [n_tok, n_vocab) is padding */
    int max_sessions, max_queue, prefill_chunk;
    int64_t granule;  /* prefix cache: tokens shared in multiples of this (0: off) */
    serve_task task;
    int pooling;      /* embed: MODEL_POOL_LAST, MEAN or CLS */
    int64_t dim;
    serve_rerank_tmpl rr; /* rerank: the prompt's fixed ids, yes and no */
    embed_head *rr_head;  /* rerank: the output head's yes and no rows */
    serve_req **work_reqs; /* [max_sessions] a tick's work requests (scratch) */
    serve_spec *spec;     /* the drafter (opts.spec), or NULL */

    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* under mu */
    serve_req *q_head, *q_tail;
    int n_waiting, n_running, stop;
    int64_t kv_used;
    uint64_t prompt_tokens, generated_tokens;
    uint64_t fin_stop, fin_length, fin_error, n_cancelled;
    uint64_t prompt_cached;
    kv_prefix_stats prefix_stats; /* the engine's, as of the last tick */
    serve_histo ttft, itl;
    uint64_t work_ok, work_error, work_cancelled, work_inputs, work_steps;
    uint64_t spec_drafted, spec_accepted, spec_rounds, spec_steps;

    serve_slot *slots; /* [max_sessions], engine thread only */
    /* decode_step scratch */
    int32_t *ids;
    serve_slot **batch;
    /* the tick's speculation rounds: a job, a constraint and its context a
     * speculating slot, [max_sessions] each */
    serve_spec_job *spec_jobs;
    struct slot_con *spec_sc;
    spec_constraint *spec_con;
    engine_seq **seqs;    /* [max_sessions] */
    sampler **smps;       /* [max_sessions] */
    int32_t *next_ids;    /* [max_sessions] */
    int *rc;
    memra_err *errs;
    float *logits, *raw;  /* [n_vocab] each: the host path (logprobs) */
    tok_cache *tcache;    /* serve_model_tok_cache */
    gram_vocab *gvocab;   /* the tokenizer's pieces as a trie, made at the first grammar */
    uint32_t *gmask;      /* [gram_mask_words] the allowed tokens of one step */
    gram_maskpool *gpool;     /* the batch's masks computed on worker threads */
    gram_state **gstates; /* [max_sessions] scratch for gram_maskpool_masks */
    uint32_t **gmasks;
    int *gcounts;
    serve_slot **gslots;
    int n_gram;           /* gslots gathered for the coming step's masks */
};

/* ---- scheduling ------------------------------------------------------- */

static void slot_release(serve_model *m, serve_slot *s)
{
    engine_seq_reset(s->seq);
    sampler_free(s->smp);
    detok_free(s->dt);
    gram_state_free(s->gst);
    s->gst = NULL;
    s->lazy = 0;
    s->gram_dead = 0;
    s->smp = NULL;
    s->dt = NULL;
    serve_req_unref(s->req);
    s->req = NULL;
    s->has_logits = 0;
    s->host_pending = 0;
    s->spec = NULL;
    s->spec_pending = 0;
    s->spec_ahead = 0;
    s->spec_watched = s->n_spec_watched = 0;
    pthread_mutex_lock(&m->mu);
    m->n_running--;
    pthread_mutex_unlock(&m->mu);
}

/* The slot is given back before the client hears the end: a client that
 * sends its next request the moment this one ends must find the room
 * this one held (else, with no queue, it would get a 429). */
static void slot_end(serve_model *m, serve_slot *s, serve_finish f, const char *error)
{
    serve_req *r = s->req;
    size_t n_generated = s->n_generated;
    serve_req_ref(r);
    pthread_mutex_lock(&m->mu);
    if (f == SERVE_FINISH_STOP)
        m->fin_stop++;
    else if (f == SERVE_FINISH_LENGTH)
        m->fin_length++;
    else
        m->fin_error++;
    pthread_mutex_unlock(&m->mu);
    if (error)
        log_warn("%s: request failed: %s", m->alias, error);
    int choice = s->choice;
    serve_req_set_details(r, choice, s->n_reasoning, s->stop_hit);
    slot_release(m, s);
    serve_req_end_choice(r, choice, f, n_generated, error);
    /* One choice's error ends the request: its other choices stop too. */
    for (int i = 0; f == SERVE_FINISH_ERROR && i < m->max_sessions; i++)
        if (m->slots[i].req == r)
            slot_release(m, &m->slots[i]);
    serve_req_unref(r);
}

/* A request enters a free slot: its sampler and detokenizer. Ids past
 * the tokenizer's (the padding rows of a model whose embedding is rounded
 * up, as Qwen's 151936 rows for 151669 tokens) have no text: they are
 * banned, whatever the request's own logit_bias says about them. */
static void slot_start(serve_model *m, serve_slot *s, serve_req *r, int choice)
{
    memra_err err;
    s->req = r;
    s->choice = choice;
    s->spec = NULL;
    s->prompt = r->prompt;
    s->n_prompt = r->n_prompt;
    s->n_prefilled = s->n_generated = s->n_adopted = 0;
    s->follows = 0;
    s->has_logits = 0;
    s->in_reason = r->reason_open[0] && r->starts_in_reasoning;
    s->n_reasoning = 0;
    s->n_tail = 0;
    s->stop_hit = 0;
    s->t_last = clock_now_s();
    sampler_params p = r->sampling;
    p.seed += (uint64_t)choice; /* choice i is the single request of seed + i */
    sampler_logit_bias *merged = NULL;
    if (m->n_tok < m->n_vocab) {
        size_t n = 0, cap = (size_t)p.n_logit_bias + (size_t)(m->n_vocab - m->n_tok);
        merged = xmalloc(cap * sizeof *merged);
        for (int32_t i = 0; i < p.n_logit_bias; i++)
            if (p.logit_bias[i].id < m->n_tok)
                merged[n++] = p.logit_bias[i];
        for (int32_t id = m->n_tok; id < m->n_vocab; id++)
            merged[n++] = (sampler_logit_bias){id, -INFINITY};
        p.logit_bias = merged;
        p.n_logit_bias = (int32_t)n;
    }
    s->smp = sampler_new(&p, m->n_vocab, &err);
    free(merged);
    detok_opts dopts = {.stop = (const char *const *)r->stop, .n_stop = r->n_stop,
                        .skip_special = !r->keep_special, .at_start = 1};
    s->dt = detok_new(m->tok, &dopts);
    s->lazy = 0;
    s->n_ltail = 0;
    if (s->smp && (r->grammar || r->lazy_grammar)) {
        if (!m->gvocab && (m->gvocab = gram_vocab_from_tok(m->tok, &err)) != NULL)
            m->gmask = xmalloc(gram_mask_words(m->gvocab) * sizeof *m->gmask);
        if (!m->gvocab) {
            slot_end(m, s, SERVE_FINISH_ERROR, err.msg);
            return;
        }
        if (r->grammar)
            s->gst = gram_state_new(r->grammar);
    }
    if (!s->smp) {
        slot_end(m, s, SERVE_FINISH_ERROR, err.msg);
        return;
    }
    if (m->granule) {
        /* the prompt's cached whole chunks: prefill starts after them */
        int64_t got = engine_seq_adopt_prefix(s->seq, r->cache_ns, s->prompt,
                                              (int64_t)s->n_prompt, m->granule);
        s->n_prefilled = s->n_adopted = (size_t)got;
        if (choice == 0)
            serve_req_set_cached(r, (size_t)got);
    }
    if (m->spec && serve_spec_eligible(r) && (int64_t)r->n_prompt < m->n_ctx)
        s->spec = serve_spec_slot_start(m->spec, (int)(s - m->slots), r, choice);
}

/* The log-probabilities OpenAI reports: the model's own distribution,
 * log-softmax of the raw logits over the tokenizer's ids (the padding
 * rows, never sampled, left out), before logit bias, penalties,
 * truncation and temperature, so they describe the model, not this
 * request's sampling. The top list is the k most likely ids, ties to the
 * lower id. A -inf (or NaN) logit is reported as -9999, as OpenAI does. */
static void slot_logprobs(serve_model *m, serve_slot *s, const float *logits, int32_t id)
{
    int32_t n = m->n_tok, k = s->req->top_logprobs;
    float mx = -INFINITY;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] > mx)
            mx = logits[i];
    double sum = 0;
    for (int32_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    int32_t top[SERVE_MAX_TOP_LOGPROBS];
    int32_t n_top = 0;
    for (int32_t i = 0; i < n && k > 0; i++) {
        if (n_top == k && !(logits[i] > logits[top[n_top - 1]]))
            continue;
        int32_t j = n_top < k ? n_top++ : k - 1;
        while (j > 0 && logits[i] > logits[top[j - 1]]) {
            top[j] = top[j - 1];
            j--;
        }
        top[j] = i;
    }
    sb_clear(&s->lp_bytes);
    serve_tok_lp *all[1 + SERVE_MAX_TOP_LOGPROBS];
    int32_t ids[1 + SERVE_MAX_TOP_LOGPROBS];
    all[0] = &s->lp.tok;
    ids[0] = id;
    for (int32_t j = 0; j < n_top; j++) {
        all[1 + j] = &s->lp.top[j];
        ids[1 + j] = top[j];
    }
    s->lp.n_top = n_top;
    for (int32_t j = 0; j <= n_top; j++) {
        size_t len = 0;
        const char *piece = tok_piece(m->tok, ids[j], &len);
        double lp = ids[j] < n ? (double)logits[ids[j]] - lse : -INFINITY;
        all[j]->id = ids[j];
        all[j]->logprob = isfinite(lp) ? (float)lp : -9999.0f;
        all[j]->off = (uint32_t)s->lp_bytes.len;
        all[j]->len = (uint32_t)len;
        if (len)
            sb_append(&s->lp_bytes, piece, len);
    }
}

/* The grammar's step for a slot (req->grammar): the tokens it allows
 * next become the slot's sampler mask, ids past the grammar's vocabulary
 * (the padding rows among them) banned, so the sampler, on the device or
 * on the host, picks only what the grammar can take. Returns 0, or -1
 * with s->next_err set when no token can continue. */
static int slot_grammar_mask(serve_model *m, serve_slot *s)
{
    if (gram_mask(s->gst, m->gvocab, m->gmask) == 0)
        return memra_fail(&s->next_err, "response_format: no token can continue the output "
                                        "(the schema admits nothing the vocabulary can write)");
    sampler_set_mask(s->smp, m->gmask, gram_vocab_size(m->gvocab));
    return 0;
}

/* After a grammar slot's token is sampled: the grammar takes it (a
 * refusal, which the mask should make impossible, is the slot's error). */
static void slot_grammar_accept(serve_model *m, serve_slot *s)
{
    if (s->next >= 0 && gram_accept_token(s->gst, m->gvocab, s->next, &s->next_err) != 0)
        s->next = -1;
    if (s->next >= 0 && s->lazy && gram_is_final(s->gst)) {
        /* the call is whole: the model writes freely again */
        gram_state_free(s->gst);
        s->gst = NULL;
        s->lazy = 0;
        sampler_set_mask(s->smp, NULL, 0);
    }
}

/* A lazy grammar (req->lazy_grammar) starts once the generated bytes
 * complete its trigger (the model opened a tool call); bytes of the same
 * token past the trigger are the grammar's first. If the grammar refuses
 * them, this call is left to the parser as written. */
static void lazy_grammar_watch(serve_model *m, serve_slot *s, int32_t id)
{
    const serve_req *r = s->req;
    if (!r->lazy_grammar || s->gst || s->in_reason) {
        s->n_ltail = 0; /* a call opened inside the thought is not a call */
        return;
    }
    size_t len = 0;
    const char *piece = tok_piece(m->tok, id, &len);
    size_t cap = sizeof s->ltail;
    for (size_t i = 0; i < len; i++) {
        if (s->n_ltail == cap) {
            memmove(s->ltail, s->ltail + 1, cap - 1);
            s->n_ltail--;
        }
        s->ltail[s->n_ltail++] = piece[i];
        size_t n = strlen(r->lazy_trigger);
        if (s->n_ltail < n || memcmp(s->ltail + s->n_ltail - n, r->lazy_trigger, n))
            continue;
        s->n_ltail = 0;
        gram_state *g = gram_state_new(r->lazy_grammar);
        memra_err err;
        if (i + 1 < len && gram_accept_bytes(g, piece + i + 1, len - i - 1, &err) != 0) {
            gram_state_free(g);
            return;
        }
        s->gst = g;
        s->lazy = 1;
        return;
    }
}

/* A grammar slot's last prompt chunk, sampled in the engine (on the device
 * when the backend samples) under the grammar's mask. */
static int grammar_forward_sample(serve_model *m, serve_slot *s, const int32_t *tokens, int n,
                                  memra_err *err)
{
    if (slot_grammar_mask(m, s) != 0) {
        s->next = -1; /* the slot ends with next_err at its next sample */
        return engine_forward(m->eng, s->seq, tokens, n, NULL, 0, err);
    }
    if (engine_forward_sample(m->eng, s->seq, tokens, n, s->smp, &s->next, err) != 0)
        return -1;
    slot_grammar_accept(m, s);
    return 0;
}

/* The host path of a slot whose request wants log-probabilities: run the
 * tokens with the logits read back, then the host's sampler picks the
 * token (the same one the device would from these logits), under the
 * grammar's mask when it has one. Sampling applies the mask, bias and
 * penalties to the logits in place, so the log-probabilities are taken
 * from a copy of the raw ones. */
static int host_forward_sample(serve_model *m, serve_slot *s, const int32_t *tokens, int n,
                               memra_err *err)
{
    if (engine_forward(m->eng, s->seq, tokens, n, m->logits, 0, err) != 0)
        return -1;
    memcpy(m->raw, m->logits, (size_t)m->n_vocab * sizeof *m->raw);
    if (s->gst && slot_grammar_mask(m, s) != 0) {
        s->next = -1;
        return 0;
    }
    s->next = sampler_sample(s->smp, m->logits, &s->next_err);
    if (s->gst)
        slot_grammar_accept(m, s);
    if (s->next >= 0 && s->req->logprobs)
        slot_logprobs(m, s, m->raw, s->next);
    return 0;
}

/* One decode step for every running slot, as one batch of rows, each
 * slot's next token sampled with its own sampler by the engine (on the
 * device when the backend samples: only the ids come back). A sequence's
 * logits are the same bits alone or in the batch (the engine's contract),
 * so batching changes no request's output. When the batched call fails
 * (one sequence's context full, say), the slots run one by one so the
 * failure stays with the request that caused it. A row that cannot be
 * sampled keeps its error for slot_sample. */
static void batch_grammar_masks(void *ctx);

static void decode_step(serve_model *m, serve_slot **batch, const int32_t *ids, int n, int *rc,
                        memra_err *errs)
{
    if (n > 1) {
        for (int i = 0; i < n; i++) {
            m->seqs[i] = batch[i]->seq;
            m->smps[i] = batch[i]->smp;
        }
        memra_err err;
        if (engine_forward_batch_sample_with(m->eng, m->seqs, ids, n, m->smps, m->next_ids, errs,
                                             batch_grammar_masks, m, &err) == 0) {
            for (int i = 0; i < n; i++) {
                batch[i]->next = m->next_ids[i];
                batch[i]->next_err = errs[i];
                rc[i] = 0;
            }
            return;
        }
    }
    batch_grammar_masks(m); /* unless the refused batched step ran it */
    for (int i = 0; i < n; i++)
        rc[i] = engine_forward_sample(m->eng, batch[i]->seq, &ids[i], 1, batch[i]->smp,
                                      &batch[i]->next, &errs[i]);
}

/* Where marker starts in s->tail at or after `from`, or -1. */
static long tail_find(const serve_slot *s, size_t from, const char *marker)
{
    size_t n = strlen(marker);
    for (size_t i = from; n && i + n <= s->n_tail; i++)
        if (!memcmp(s->tail + i, marker, n))
            return (long)i;
    return -1;
}

/* Counts the reasoning tokens: those from the one that completes the
 * opening marker to the one that completes the closing marker (a marker
 * may span tokens, and a token may hold the end of one and more text).
 * The markers are looked for in the tokens' own bytes, not in the
 * streamed text, which a stop string can hold back. */
static void track_reasoning(serve_model *m, serve_slot *s, int32_t id)
{
    const serve_req *r = s->req;
    if (!r->reason_open[0])
        return;
    size_t len = 0;
    const char *piece = tok_piece(m->tok, id, &len);
    if (len > sizeof s->tail / 2) { /* only a marker's worth of bytes matters */
        piece += len - sizeof s->tail / 2;
        len = sizeof s->tail / 2;
    }
    if (s->n_tail + len > sizeof s->tail) {
        size_t drop = s->n_tail + len - sizeof s->tail;
        memmove(s->tail, s->tail + drop, s->n_tail - drop);
        s->n_tail -= drop;
    }
    size_t before = s->n_tail;
    memcpy(s->tail + s->n_tail, piece, len);
    s->n_tail += len;
    size_t from = 0;
    int counted = 0;
    for (;;) {
        const char *marker = s->in_reason ? r->reason_close : r->reason_open;
        size_t n = strlen(marker);
        size_t lo = before + 1 >= n ? before + 1 - n : 0; /* overlapping the new bytes */
        long at = tail_find(s, lo > from ? lo : from, marker);
        if (s->in_reason && !counted) {
            s->n_reasoning++;
            counted = 1;
        }
        if (at < 0)
            break;
        s->in_reason = !s->in_reason;
        from = (size_t)at + n;
    }
    if (from) { /* keep only what follows the last marker */
        memmove(s->tail, s->tail + from, s->n_tail - from);
        s->n_tail -= from;
    }
}

/* The position the slot's newest token takes: the tokens before it are
 * in its KV after a plain step. A speculation round's KV holds its
 * accepted drafts before they are emitted one by one, so a speculating
 * slot counts them: the prompt and the tokens emitted but the newest. */
static int64_t slot_pos(const serve_slot *s)
{
    if (s->spec)
        return (int64_t)(s->n_prompt + s->n_generated) - 1;
    return engine_seq_pos(s->seq);
}

/* Take the token the engine sampled for a slot; returns 1 when the request goes
 * on (its token is in *next), 0 when it ended here. */
/* The token joins the slot sampler's penalty history, unless the
 * speculation round that emitted it added it already (spec_round). */
static int slot_history_add(serve_slot *s, int32_t id, memra_err *err)
{
    if (s->spec_ahead > 0) {
        s->spec_ahead--;
        return 0;
    }
    return sampler_accept(s->smp, id, err);
}

static int slot_sample(serve_model *m, serve_slot *s, double now, int32_t *next)
{
    memra_err err;
    serve_req *r = s->req;
    s->has_logits = 0;
    int32_t id = s->next;
    if (id < 0) {
        slot_end(m, s, SERVE_FINISH_ERROR, s->next_err.msg);
        return 0;
    }
    s->n_generated++;
    if (s->spec)
        serve_spec_slot_push(s->spec, id);
    int watched = s->spec_watched < s->n_spec_watched;
    size_t reason_after = watched ? s->reason_after[s->spec_watched++] : 0;
    pthread_mutex_lock(&m->mu);
    m->generated_tokens++;
    if (s->n_generated == 1)
        serve_histo_observe(&m->ttft, now - r->t_arrival);
    else
        serve_histo_observe(&m->itl, now - s->t_last);
    pthread_mutex_unlock(&m->mu);
    s->t_last = now;

    serve_finish fin = SERVE_FINISH_NONE;
    int stop_index = -1, st = 0;
    sb_clear(&s->piece);
    /* Every token but the end-of-generation one that ends the request has
     * its log-probabilities reported (those of a stop string included,
     * though its text is not). */
    const serve_logprob *lp = r->logprobs ? &s->lp : NULL;
    if (tok_is_stop(m->tok, id) && !r->ignore_eos) {
        fin = SERVE_FINISH_STOP;
        lp = NULL;
    } else {
        if (watched) {
            s->n_reasoning = reason_after;
        } else {
            track_reasoning(m, s, id);
            lazy_grammar_watch(m, s, id);
        }
        st = detok_feed(s->dt, id, &s->piece, &stop_index, &err);
        if (st < 0) {
            serve_req_emit(r, s->choice, s->piece.data, s->piece.len, s->n_generated, lp,
                           s->lp_bytes.data);
            slot_end(m, s, SERVE_FINISH_ERROR, err.msg);
            return 0;
        }
        if (st == 1) {
            fin = SERVE_FINISH_STOP;
            s->stop_hit = stop_index + 1;
        }
        else if (slot_history_add(s, id, &err) != 0) {
            serve_req_emit(r, s->choice, s->piece.data, s->piece.len, s->n_generated, lp,
                           s->lp_bytes.data);
            slot_end(m, s, SERVE_FINISH_ERROR, err.msg);
            return 0;
        } else if (slot_pos(s) >= m->n_ctx || (int64_t)s->n_generated >= r->max_tokens)
            fin = SERVE_FINISH_LENGTH;
    }
    if (fin != SERVE_FINISH_NONE && st != 1)
        detok_flush(s->dt, &s->piece); /* a held partial stop string or UTF-8 tail */
    serve_req_emit(r, s->choice, s->piece.data, s->piece.len, s->n_generated, lp,
                           s->lp_bytes.data);
    if (fin != SERVE_FINISH_NONE) {
        slot_end(m, s, fin, NULL);
        return 0;
    }
    *next = id;
    return 1;
}

/* Whether slot i's next chunk is one another slot is computing: the
 * same tenant, the same tokens up to the end of that chunk, and the other
 * ahead (or level and earlier in slot order, so two never wait on each
 * other). Then slot i waits a tick and maps the chunk from the cache once
 * it is published: concurrent identical prefixes are computed once. A slot
 * that waited maps again what the cache has before it computes. */
static int prefix_follow(serve_model *m, int i)
{
    serve_slot *s = &m->slots[i];
    const serve_req *r = s->req;
    if (s->n_prefilled != s->n_adopted)
        return 0; /* it has computed chunks of its own: no mapping any more */
    if (s->follows) {
        s->follows = 0;
        engine_seq_reset(s->seq);
        int64_t got = engine_seq_adopt_prefix(s->seq, r->cache_ns, s->prompt,
                                              (int64_t)s->n_prompt, m->granule);
        s->n_prefilled = s->n_adopted = (size_t)got;
        if (s->choice == 0 && !r->work)
            serve_req_set_cached(s->req, (size_t)got);
    }
    size_t upto = s->n_prefilled + (size_t)m->granule;
    if (upto >= s->n_prompt)
        return 0; /* its last chunk: it computes that one itself */
    for (int j = 0; j < m->max_sessions; j++) {
        const serve_slot *o = &m->slots[j];
        if (j == i || !o->req || o->req->cache_ns != r->cache_ns ||
            o->n_prefilled >= o->n_prompt || o->n_prompt <= upto ||
            !(o->n_prefilled > s->n_prefilled || (o->n_prefilled == s->n_prefilled && j < i)) ||
            memcmp(o->prompt, s->prompt, upto * sizeof *s->prompt))
            continue;
        s->follows = 1;
        return 1;
    }
    return 0;
}

/* The batch's grammar slots, gathered before a step (m->n_gram of them). */
static void batch_grammar_gather(serve_model *m, int n)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        serve_slot *s = m->batch[i];
        if (!s->gst)
            continue;
        if (!s->gmask)
            s->gmask = xmalloc(gram_mask_words(m->gvocab) * sizeof *s->gmask);
        m->gslots[k] = s;
        m->gstates[k] = s->gst;
        m->gmasks[k] = s->gmask;
        k++;
    }
    m->n_gram = k;
}

/* The gathered slots' masks, computed together on the mask pool's threads
 * and set on their samplers: the engine runs this while the step's forward
 * is on the device (engine_forward_batch_sample_with), so the masks cost
 * the step nothing while they take less time than the forward. A slot
 * whose grammar allows no token gets the empty mask (its row samples
 * nothing) and is marked to end after the step with that error. */
static void batch_grammar_masks(void *ctx)
{
    serve_model *m = ctx;
    int k = m->n_gram;
    if (k == 0)
        return;
    gram_maskpool_masks(m->gpool, m->gstates, m->gvocab, m->gmasks, m->gcounts, k);
    for (int j = 0; j < k; j++) {
        serve_slot *s = m->gslots[j];
        s->gram_dead = m->gcounts[j] == 0;
        sampler_set_mask(s->smp, s->gmask, gram_vocab_size(m->gvocab));
    }
    m->n_gram = 0;
}

/* ---- embeddings and rerank inputs ------------------------------------- */

static void work_slot_start(serve_slot *s, serve_req *r, int input)
{
    s->req = r;
    s->choice = 0;
    s->input = input;
    s->prompt = r->work->ids[input];
    s->n_prompt = r->work->n_ids[input];
    s->n_prefilled = s->n_generated = s->n_adopted = 0;
    s->follows = 0;
    s->has_logits = 0;
    s->host_pending = 0;
    if (s->pool)
        embed_pool_reset(s->pool);
}

/* What a queued request counts in the waiting gauge (mu held). */
static int queue_weight(const serve_req *r)
{
    return r->work ? r->work->weight_waiting : r->n_choices;
}

/* Takes r out of the waiting queue if it is there, with its weight and
 * the queue's reference (mu held; the caller holds a reference too). */
static void queue_remove(serve_model *m, serve_req *r)
{
    for (serve_req **pp = &m->q_head, *prev = NULL; *pp; prev = *pp, pp = &(*pp)->next) {
        if (*pp != r)
            continue;
        *pp = r->next;
        if (m->q_tail == r)
            m->q_tail = prev;
        m->n_waiting -= queue_weight(r);
        if (r->work)
            r->work->weight_waiting = 0;
        r->next = NULL;
        serve_req_unref(r);
        return;
    }
}

/* An input failed: the request ends with the error, and its other inputs
 * go with it, running or still queued. */
static void work_fail(serve_model *m, serve_slot *s, const char *error)
{
    serve_req *r = s->req;
    serve_req_ref(r);
    log_warn("%s: request failed: %s", m->alias, error);
    for (int i = 0; i < m->max_sessions; i++)
        if (m->slots[i].req == r)
            slot_release(m, &m->slots[i]);
    pthread_mutex_lock(&m->mu);
    if (!r->work->ended) {
        r->work->ended = 1;
        m->work_error++;
    }
    queue_remove(m, r);
    pthread_mutex_unlock(&m->mu);
    serve_req_end_choice(r, 0, SERVE_FINISH_ERROR, 0, error);
    serve_req_unref(r);
}

/* An input's last chunk is done: its vector or score goes into the
 * request's work and the slot is freed at once; the request ends with
 * its last input. */
static void work_input_done(serve_model *m, serve_slot *s)
{
    serve_req *r = s->req;
    serve_work *w = r->work;
    memra_err err;
    if (w->kind == SERVE_WORK_EMBED) {
        float *out = w->vecs + (size_t)s->input * (size_t)w->dims;
        if (embed_pool_result(s->pool, w->dims, out, &err) != 0) {
            work_fail(m, s, err.msg);
            return;
        }
    } else if (embed_head_score(m->rr_head, s->pool, &w->scores[s->input], &err) != 0) {
        work_fail(m, s, err.msg);
        return;
    }
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += s->n_prompt;
    m->prompt_cached += s->n_adopted;
    m->work_inputs++;
    int over = ++w->n_done == w->n_inputs;
    if (over) {
        w->ended = 1;
        m->work_ok++;
    }
    pthread_mutex_unlock(&m->mu);
    serve_req_ref(r);
    slot_release(m, s);
    if (over)
        serve_req_end_choice(r, 0, SERVE_FINISH_STOP, 0, NULL);
    serve_req_unref(r);
}

/* A work request's next step (the tick's prefill phase): its inputs' tokens
 * as one stream, in order, cut into steps of up to prefill_chunk rows (at
 * most the engine's step) from up to WORK_PACK_INPUTS inputs, each step one
 * packed forward (docs/decisions/0019-packed-embedding-steps.md). The cut
 * depends on the request alone, so an input's vector or score is the same
 * bytes whatever else the server runs; on CUDA a step's rows round
 * together, so an input alone and the same input among others in one
 * request may differ in the last bits. A step waits until each input it
 * takes holds a slot. Work never uses the prefix cache: a packed step's
 * KV is not what a prompt's own chunks would compute. */
enum { WORK_PACK_INPUTS = 16 };

static void work_step(serve_model *m, serve_req *r)
{
    serve_work *w = r->work;
    serve_slot *slot[WORK_PACK_INPUTS];
    engine_seq *seqs[WORK_PACK_INPUTS];
    const int32_t *toks[WORK_PACK_INPUTS];
    int n[WORK_PACK_INPUTS];
    embed_pool *pools[WORK_PACK_INPUTS];
    int k = 0, rows = 0;
    int limit = WORK_PACK_INPUTS < m->max_sessions ? WORK_PACK_INPUTS : m->max_sessions;
    int chunk = m->prefill_chunk < engine_n_batch(m->eng) ? m->prefill_chunk
                                                          : engine_n_batch(m->eng);
    for (int in = w->n_done; in < w->n_inputs && k < limit && rows < chunk; in++) {
        serve_slot *s = NULL;
        for (int i = 0; i < m->max_sessions && !s; i++)
            if (m->slots[i].req == r && m->slots[i].input == in)
                s = &m->slots[i];
        if (!s)
            return; /* not admitted yet: the step waits for its slot */
        size_t left = s->n_prompt - s->n_prefilled;
        int take = left < (size_t)(chunk - rows) ? (int)left : chunk - rows;
        slot[k] = s;
        seqs[k] = s->seq;
        toks[k] = s->prompt + s->n_prefilled;
        n[k] = take;
        pools[k++] = s->pool;
        rows += take;
    }
    memra_err err;
    if (k == 0)
        return;
    if (embed_pool_forward_packed(m->eng, seqs, toks, n, k, pools, &err) != 0) {
        work_fail(m, slot[0], err.msg);
        return;
    }
    pthread_mutex_lock(&m->mu);
    m->work_steps++;
    pthread_mutex_unlock(&m->mu);
    for (int j = 0; j < k; j++) {
        slot[j]->n_prefilled += (size_t)n[j];
        if (slot[j]->n_prefilled == slot[j]->n_prompt)
            work_input_done(m, slot[j]); /* may end the request: r's slots go */
    }
}

/* One speculation round for a slot whose newest token (emitted already,
 * the last of its spec context) has not run. Its tokens go out through slot_sample, the path a
 * sampled token takes, all but the last now; the last waits for the next
 * tick as a sampled token does, and that tick decides whether the slot
 * speculates again or joins the batch. A stop (an end-of-generation id,
 * a stop string) among them ends the slot there, and the tokens after it
 * go with its KV; max_tokens and the context are never passed
 * (serve_spec_rounds cuts K). */
typedef struct slot_con {
    serve_model *m;
    serve_slot *s;
} slot_con;

static int slot_con_mask(void *ctx, sampler *smp, memra_err *err)
{
    slot_con *c = ctx;
    if (!c->s->gst) {
        sampler_set_mask(smp, NULL, 0); /* a lazy grammar not started, or ended */
        return 0;
    }
    if (slot_grammar_mask(c->m, c->s) != 0) {
        *err = c->s->next_err;
        return -1;
    }
    return 0;
}

/* An emitted token, in the order plain decoding takes it: the grammar's
 * step (a lazy grammar's call that completes ends it), then the
 * reasoning markers and the lazy grammar's trigger, which slot_sample
 * then skips for this token. */
static int slot_con_accept(void *ctx, int32_t id, memra_err *err)
{
    slot_con *c = ctx;
    serve_slot *s = c->s;
    if (s->gst) {
        if (gram_accept_token(s->gst, c->m->gvocab, id, err) != 0)
            return -1;
        if (s->lazy && gram_is_final(s->gst)) {
            gram_state_free(s->gst);
            s->gst = NULL;
            s->lazy = 0;
            sampler_set_mask(s->smp, NULL, 0);
        }
    }
    if (!(tok_is_stop(c->m->tok, id) && !s->req->ignore_eos)) {
        track_reasoning(c->m, s, id);
        lazy_grammar_watch(c->m, s, id);
    }
    MEMRA_ASSERT(s->n_spec_watched < SPEC_K_MAX + 1);
    s->reason_after[s->n_spec_watched++] = s->n_reasoning;
    return 0;
}

/* What a slot's round gave: its tokens go out through slot_sample. */
static void slot_spec_done(serve_model *m, serve_slot *s, const serve_spec_job *jb)
{
    if (jb->rc != 0) {
        slot_end(m, s, SERVE_FINISH_ERROR, jb->err.msg);
        return;
    }
    const spec_round_result *rr = &jb->out;
    int lp = s->req->logprobs;
    pthread_mutex_lock(&m->mu);
    m->spec_drafted += (uint64_t)rr->drafted;
    m->spec_accepted += (uint64_t)rr->accepted;
    pthread_mutex_unlock(&m->mu);
    s->spec_ahead = rr->n;
    double now = clock_now_s();
    int32_t id;
    for (int32_t i = 0; i + 1 < rr->n; i++) {
        s->next = rr->tokens[i];
        if (lp)
            slot_logprobs(m, s, serve_spec_raw_row(s->spec, i), s->next);
        if (!slot_sample(m, s, now, &id))
            return;
    }
    s->next = rr->tokens[rr->n - 1];
    if (lp)
        slot_logprobs(m, s, serve_spec_raw_row(s->spec, rr->n - 1), s->next);
    s->has_logits = 1;
}

/* The tick's speculation rounds, their verify rows in shared steps of the
 * model (serve_spec_rounds: each slot's tokens those of its round alone). A
 * grammar's mask for each verify row (a lazy one's from its trigger on),
 * its state advanced by each emitted token (the token path does not
 * advance it again). */
static void spec_rounds_tick(serve_model *m, serve_slot **slots, int n)
{
    for (int i = 0; i < n; i++) {
        serve_slot *s = slots[i];
        m->spec_sc[i] = (slot_con){m, s};
        m->spec_con[i] = (spec_constraint){&m->spec_sc[i], slot_con_mask, slot_con_accept};
        s->spec_watched = s->n_spec_watched = 0;
        m->spec_jobs[i] = (serve_spec_job){
            .ss = s->spec,
            .seq = s->seq,
            .smp = s->smp,
            .left = (int64_t)s->req->max_tokens - (int64_t)s->n_generated,
            .want_raw = s->req->logprobs,
            .con = s->gst || s->req->lazy_grammar ? &m->spec_con[i] : NULL,
        };
    }
    int steps = 0;
    serve_spec_rounds(m->spec, m->spec_jobs, n, &steps);
    pthread_mutex_lock(&m->mu);
    m->spec_rounds += (uint64_t)n;
    m->spec_steps += (uint64_t)steps;
    pthread_mutex_unlock(&m->mu);
    for (int i = 0; i < n; i++)
        if (slots[i]->req)
            slot_spec_done(m, slots[i], &m->spec_jobs[i]);
}

static void tick(serve_model *m)
{
    double now = clock_now_s();
    memra_err err;
    /* 1. clients that went away */
    for (int i = 0; i < m->max_sessions; i++) {
        serve_slot *s = &m->slots[i];
        if (s->req && serve_req_check_client(s->req)) {
            serve_work *w = s->req->work;
            pthread_mutex_lock(&m->mu);
            if (!w)
                m->n_cancelled++;
            else if (!w->ended) { /* once per request, not per input */
                w->ended = 1;
                m->work_cancelled++;
            }
            pthread_mutex_unlock(&m->mu);
            log_info("%s: client gone, sequence freed after %zu tokens", m->alias,
                     s->n_generated);
            slot_release(m, s);
        }
    }
    /* 2. one prefill chunk per slot still reading its prompt; one packed
     * step per work request, after them */
    int n_work = 0;
    for (int i = 0; i < m->max_sessions; i++) {
        serve_slot *s = &m->slots[i];
        if (!s->req || s->n_prefilled >= s->n_prompt)
            continue;
        serve_req *r = s->req;
        if (r->work) {
            int seen = 0;
            for (int j = 0; j < n_work && !seen; j++)
                seen = m->work_reqs[j] == r;
            if (!seen) {
                serve_req_ref(r);
                m->work_reqs[n_work++] = r;
            }
            continue;
        }
        if (m->granule && prefix_follow(m, i))
            continue;
        size_t n = r->n_prompt - s->n_prefilled;
        if (n > (size_t)m->prefill_chunk)
            n = (size_t)m->prefill_chunk;
        int last = s->n_prefilled + n == r->n_prompt;
        const int32_t *chunk = r->prompt + s->n_prefilled;
        if ((!last ? engine_forward(m->eng, s->seq, chunk, (int)n, NULL, 0, &err)
             : r->logprobs ? host_forward_sample(m, s, chunk, (int)n, &err)
             : r->grammar ? grammar_forward_sample(m, s, chunk, (int)n, &err)
                          : engine_forward_sample(m->eng, s->seq, chunk, (int)n, s->smp,
                                                  &s->next, &err)) != 0) {
            slot_end(m, s, SERVE_FINISH_ERROR, err.msg);
            continue;
        }
        s->n_prefilled += n;
        if (m->granule) /* whole chunks only: a partial one is chunked differently later */
            engine_seq_publish_prefix(s->seq, r->cache_ns, r->prompt,
                                      (int64_t)(s->n_prefilled / (size_t)m->granule *
                                                (size_t)m->granule));
        if (last) {
            s->has_logits = 1;
            pthread_mutex_lock(&m->mu);
            m->prompt_tokens += r->n_prompt;
            m->prompt_cached += s->n_adopted;
            pthread_mutex_unlock(&m->mu);
        } else if (r->stream && clock_now_s() - r->t_ping >= KEEPALIVE_S) {
            r->t_ping = clock_now_s();
            serve_req_ping(r);
        }
    }
    for (int j = 0; j < n_work; j++) {
        serve_req *r = m->work_reqs[j];
        if (!r->work->ended)
            work_step(m, r);
        serve_req_unref(r);
    }
    /* 3. sample, 4. one decode step for those that go on: the batch
     * (grammar slots too, each under its grammar's mask), and beside it
     * the slots on the host path (logprobs), one by one, and the
     * speculating slots' rounds, their verify rows in shared steps, when
     * few enough slots decode this tick (spec.max_batch) that rounds
     * beside the batch pay */
    int n = 0, n_host = 0, n_spec = 0, n_decoding = 0;
    for (int i = 0; m->spec && i < m->max_sessions; i++)
        n_decoding += m->slots[i].req && m->slots[i].has_logits;
    int speculate = m->spec && n_decoding <= serve_spec_max_batch(m->spec);
    now = clock_now_s();
    for (int i = 0; i < m->max_sessions; i++) {
        serve_slot *s = &m->slots[i];
        if (!s->req || !s->has_logits)
            continue;
        int32_t id;
        if (!slot_sample(m, s, now, &id))
            continue;
        if (speculate && s->spec) {
            s->spec_pending = 1;
            n_spec++;
        } else if (s->req->logprobs) {
            s->host_in = id;
            s->host_pending = 1;
            n_host++;
        } else {
            m->ids[n] = id;
            m->batch[n++] = s;
        }
    }
    if (n > 0) {
        batch_grammar_gather(m, n);
        decode_step(m, m->batch, m->ids, n, m->rc, m->errs);
        for (int i = 0; i < n; i++) {
            serve_slot *s = m->batch[i];
            if (!s->req)
                continue; /* a sibling choice's error released it */
            if (s->gram_dead) {
                s->gram_dead = 0;
                memra_fail(&s->next_err, "response_format: no token can continue the output "
                                         "(the schema admits nothing the vocabulary can write)");
                slot_end(m, s, SERVE_FINISH_ERROR, s->next_err.msg);
                continue;
            }
            if (m->rc[i] != 0) {
                slot_end(m, m->batch[i], SERVE_FINISH_ERROR, m->errs[i].msg);
                continue;
            }
            if (m->batch[i]->gst)
                slot_grammar_accept(m, m->batch[i]);
            m->batch[i]->has_logits = 1;
        }
    }
    for (int i = 0; n_host > 0 && i < m->max_sessions; i++) {
        serve_slot *s = &m->slots[i];
        if (!s->host_pending)
            continue;
        s->host_pending = 0;
        if (!s->req)
            continue;
        if (host_forward_sample(m, s, &s->host_in, 1, &err) != 0)
            slot_end(m, s, SERVE_FINISH_ERROR, err.msg);
        else
            s->has_logits = 1;
    }
    int n_rounds = 0;
    for (int i = 0; n_spec > 0 && i < m->max_sessions; i++) {
        serve_slot *s = &m->slots[i];
        if (!s->spec_pending)
            continue;
        s->spec_pending = 0;
        if (s->req)
            m->batch[n_rounds++] = s;
    }
    if (n_rounds > 0)
        spec_rounds_tick(m, m->batch, n_rounds);
    /* bookkeeping: KV blocks in use, keep-alives for streams still queued */
    int64_t used = engine_kv_blocks_held(m->eng); /* a shared block counts once */
    now = clock_now_s();
    kv_prefix_stats ps;
    engine_prefix_stats(m->eng, &ps);
    pthread_mutex_lock(&m->mu);
    m->kv_used = used;
    m->prefix_stats = ps;
    /* queued clients that hung up leave the queue now, not at admission */
    for (serve_req **pp = &m->q_head, *prev = NULL; *pp;) {
        serve_req *r = *pp;
        if (serve_req_check_client(r)) {
            *pp = r->next;
            if (m->q_tail == r)
                m->q_tail = prev;
            m->n_waiting -= queue_weight(r);
            if (!r->work) {
                m->n_cancelled++;
            } else {
                r->work->weight_waiting = 0;
                if (!r->work->ended) {
                    r->work->ended = 1;
                    m->work_cancelled++;
                }
            }
            r->next = NULL;
            serve_req_unref(r);
            continue;
        }
        if (r->stream && now - r->t_ping >= KEEPALIVE_S) {
            r->t_ping = now;
            serve_req_ping(r);
        }
        prev = r;
        pp = &r->next;
    }
    pthread_mutex_unlock(&m->mu);
}

static void *engine_main(void *arg)
{
    serve_model *m = arg;
    serve_req **admit = xmalloc((size_t)m->max_sessions * sizeof *admit);
    int *admit_input = xmalloc((size_t)m->max_sessions * sizeof *admit_input);
    for (;;) {
        pthread_mutex_lock(&m->mu);
        /* the queue, not n_waiting: a work request whose weight is
         * admitted can still hold inputs at the head */
        while (!m->stop && !m->q_head && m->n_running == 0)
            pthread_cond_wait(&m->cv, &m->mu);
        if (m->stop) {
            pthread_mutex_unlock(&m->mu);
            break;
        }
        /* Admission: free slots take waiting requests, oldest first, one
         * slot per choice (a request of n choices waits at the head until
         * n are free); cancelled ones are dropped here. Counts are in
         * slots. */
        int n_admit = 0;
        int free_slots = m->max_sessions - m->n_running;
        while (m->q_head) {
            serve_req *r = m->q_head;
            if (r->work) {
                /* Embeddings and rerank: as many inputs as there are free
                 * slots, in order, each slot with a reference of its own;
                 * the rest waits at the head for the next free slots. */
                serve_work *w = r->work;
                int take = w->n_inputs - w->n_admitted;
                if (take > free_slots - n_admit)
                    take = free_slots - n_admit;
                if (take <= 0)
                    break;
                for (int j = 0; j < take; j++) {
                    serve_req_ref(r);
                    admit[n_admit] = r;
                    admit_input[n_admit++] = w->n_admitted++;
                }
                m->n_running += take;
                int d = take < w->weight_waiting ? take : w->weight_waiting;
                w->weight_waiting -= d;
                m->n_waiting -= d;
                if (w->n_admitted < w->n_inputs)
                    break;
                queue_remove(m, r); /* every input has a slot: the queue's reference goes */
                continue;
            }
            if (n_admit + r->n_choices > free_slots)
                break;
            m->q_head = r->next;
            if (!m->q_head)
                m->q_tail = NULL;
            m->n_waiting -= r->n_choices;
            r->next = NULL;
            for (int c = 0; c < r->n_choices; c++)
                admit[n_admit++] = r;
            m->n_running += r->n_choices;
        }
        pthread_mutex_unlock(&m->mu);
        for (int k = 0, i = 0; k < n_admit;) {
            serve_req *r = admit[k];
            if (r->work) {
                /* failed already (another input), or its client is gone */
                if (r->finish != SERVE_FINISH_NONE || serve_req_check_client(r)) {
                    pthread_mutex_lock(&m->mu);
                    m->n_running--;
                    if (r->finish == SERVE_FINISH_NONE && !r->work->ended) {
                        r->work->ended = 1;
                        m->work_cancelled++;
                    }
                    pthread_mutex_unlock(&m->mu);
                    serve_req_unref(r);
                    k++;
                    continue;
                }
                while (m->slots[i].req)
                    i++;
                work_slot_start(&m->slots[i], r, admit_input[k++]);
                continue;
            }
            int nc = r->n_choices;
            if (serve_req_check_client(r)) {
                pthread_mutex_lock(&m->mu);
                m->n_running -= nc;
                m->n_cancelled++;
                pthread_mutex_unlock(&m->mu);
                serve_req_unref(r);
                k += nc;
                continue;
            }
            /* The queue's reference goes to the first choice's slot; each
             * other slot takes its own. */
            for (int c = 0; c < nc; c++, k++) {
                while (m->slots[i].req)
                    i++;
                if (c > 0)
                    serve_req_ref(r);
                if (r->finish != SERVE_FINISH_NONE) { /* an earlier choice failed to start */
                    pthread_mutex_lock(&m->mu);
                    m->n_running--;
                    pthread_mutex_unlock(&m->mu);
                    serve_req_unref(r);
                    continue;
                }
                slot_start(m, &m->slots[i], r, c);
            }
        }
        tick(m);
    }
    /* Shutdown: whatever is left ends with an error. */
    static const char why[] = SERVE_SHUTDOWN_WHY;
    for (int i = 0; i < m->max_sessions; i++)
        if (m->slots[i].req && m->slots[i].req->work)
            work_fail(m, &m->slots[i], why);
        else if (m->slots[i].req)
            slot_end(m, &m->slots[i], SERVE_FINISH_ERROR, why);
    pthread_mutex_lock(&m->mu);
    serve_req *r = m->q_head;
    m->q_head = m->q_tail = NULL;
    m->n_waiting = 0;
    pthread_mutex_unlock(&m->mu);
    while (r) {
        serve_req *next = r->next;
        serve_req_end(r, SERVE_FINISH_ERROR, 0, why);
        serve_req_unref(r);
        r = next;
    }
    free(admit);
    free(admit_input);
    return NULL;
}

/* ---- loading ---------------------------------------------------------- */

static char *token_text(const tokenizer *t, int32_t id)
{
    const char *s = id >= 0 ? tok_text(t, id) : NULL;
    return s ? xstrdup(s) : NULL;
}

/* A template that writes the model's past reasoning (or strips it) names
 * the markup the model thinks in. */
static void reasoning_markers(serve_model *m, const char *src)
{
    static const char *const pairs[][2] = {
        {"<think>", "</think>"},
        {"[THINK]", "[/THINK]"},
        {"<|channel>thought", "<channel|>"}, /* Gemma 4 */
    };
    if (m->tool_fmt == TOOLPARSE_HARMONY) {
        m->reason_open = "<|channel|>analysis<|message|>";
        m->reason_close = "<|end|>";
        return;
    }
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++)
        if (strstr(src, pairs[i][0])) {
            m->reason_open = pairs[i][0];
            m->reason_close = pairs[i][1];
            return;
        }
}

/* The task: the alias's, else what the checkpoint's pooling says. An
 * embed model pools as its checkpoint says, by the last token when it
 * says nothing (Qwen3-Embedding's pooling, and what a causal model's
 * last hidden state summarises); a rerank model needs "yes" and "no" to
 * be one token each. */
static int resolve_task(serve_model *m, const serve_model_opts *o, memra_err *err)
{
    const model_config *c = engine_config(m->eng);
    int64_t p = c->pooling;
    int pools = p == MODEL_POOL_LAST || p == MODEL_POOL_MEAN || p == MODEL_POOL_CLS;
    m->task = o->task != SERVE_TASK_AUTO ? o->task
            : p == MODEL_POOL_RANK       ? SERVE_TASK_RERANK
            : pools                      ? SERVE_TASK_EMBED
                                         : SERVE_TASK_CHAT;
    m->dim = c->dim;
    m->pooling = pools ? (int)p : MODEL_POOL_LAST;
    if (m->task == SERVE_TASK_RERANK && (serve_rerank_tmpl_init(m->tok, &m->rr, err) != 0 ||
                                         embed_head_new(m->eng, m->rr.yes, m->rr.no,
                                                        &m->rr_head, err) != 0))
        return memra_wrap(err, "%s: --task rerank", o->alias);
    return 0;
}

int serve_model_load(const serve_model_opts *o, serve_model **out, memra_err *err)
{
    *out = NULL;
    if (o->max_sessions < 1 || o->max_queue < 0)
        return memra_fail(err, "%s: max_sessions %d / max_queue %d out of range", o->alias,
                          o->max_sessions, o->max_queue);
    serve_model *m = xcalloc(1, sizeof *m);
    m->alias = xstrdup(o->alias);
    m->max_sessions = o->max_sessions;
    m->max_queue = o->max_queue;
    pthread_mutex_init(&m->mu, NULL);
    pthread_cond_init(&m->cv, NULL);
    serve_histo_init_ttft(&m->ttft);
    serve_histo_init_itl(&m->itl);
    if (checkpoint_open(o->path, &m->ck, err) != 0)
        goto fail;
    m->ck_open = 1;
    if (m->ck.vocab_only) {
        memra_fail(err, "%s: a vocab-only GGUF has no weights to serve", m->ck.path);
        goto fail;
    }
    /* 64 MB of fragments: a few hundred long system prompts */
    m->tcache = tok_cache_new((size_t)64 << 20, 256);
    if (checkpoint_load_tokenizer(&m->ck, &m->tok, err) != 0)
        goto fail;
    engine_opts eo;
    engine_opts_default(&eo);
    eo.n_threads = o->n_threads;
    eo.backend = o->backend;
    eo.device = o->device;
    if (engine_opts_parallel(&eo, o->devices, o->pp, o->tp, err) != 0)
        goto fail;
    eo.kv_type = o->kv_type;
    eo.n_ctx = o->n_ctx;
    eo.n_seqs = o->max_sessions;
    eo.kv_block_size = KV_BLOCK_SIZE;
    eo.prefix_cache = o->prefix_cache;
    eo.prefix_cache_idle = o->cache_blocks;
    /* a hybrid's speculation: a checkpoint keeps the state after each of a
     * round's K + 1 rows */
    eo.snapshots = serve_spec_wanted(&o->spec)
                       ? (o->spec.k > 0 ? o->spec.k : SERVE_SPEC_K_DEFAULT) + 1
                       : 0;
    eo.mtp = o->spec.mtp;
    if (engine_load(&m->ck, &eo, &m->eng, err) != 0)
        goto fail;
    m->n_ctx = engine_n_ctx(m->eng);
    /* A prompt's chunk per tick: the engine's step size by default (the
     * backend's measured choice: 512 rows on Hopper, decision 0006), so a
     * cold prompt is one forward, not eight. */
    m->prefill_chunk = o->prefill_chunk > 0 ? o->prefill_chunk : engine_n_batch(m->eng);
    if (o->prefix_cache) {
        /* whole prefill chunks of whole blocks (engine.h: why) */
        int64_t a = m->prefill_chunk, b = KV_BLOCK_SIZE;
        while (b) {
            int64_t t = a % b;
            a = b;
            b = t;
        }
        m->granule = m->prefill_chunk / a * KV_BLOCK_SIZE;
    }
    m->n_vocab = (int32_t)engine_config(m->eng)->n_vocab;
    m->n_tok = (int32_t)tok_vocab_size(m->tok);
    if (m->n_tok > m->n_vocab)
        m->n_tok = m->n_vocab;
    if (resolve_task(m, o, err) != 0)
        goto fail;
    if (serve_spec_wanted(&o->spec)) {
        if (m->task != SERVE_TASK_CHAT) {
            memra_fail(err, "%s: --draft/--ngram/--mtp: speculative decoding is for chat models, and "
                            "this one is served for %s", o->alias, serve_task_name(m->task));
            goto fail;
        }
        if (serve_spec_new(&o->spec, m->eng, m->tok, m->n_tok, &eo, m->max_sessions, &m->spec,
                           err) != 0) {
            memra_wrap(err, "%s", o->alias);
            goto fail;
        }
    }

    char *src = NULL;
    memra_err terr;
    if (o->chat_template)
        src = xstrdup(o->chat_template);
    else if (chat_template_of(&m->ck, &src, &terr) != 0)
        m->tmpl_why = xstrdup(terr.msg);
    if (src) {
        m->tool_fmt = toolparse_detect(src);
        reasoning_markers(m, src);
        m->tmpl = jinja_parse(src, strlen(src), err);
        free(src);
        if (!m->tmpl) {
            memra_wrap(err, "%s: chat template", o->alias);
            goto fail;
        }
    }
    m->bos = token_text(m->tok, tok_bos(m->tok));
    m->eos = token_text(m->tok, tok_eos(m->tok));

    m->slots = xcalloc((size_t)m->max_sessions, sizeof *m->slots);
    m->ids = xmalloc((size_t)m->max_sessions * sizeof *m->ids);
    m->batch = xmalloc((size_t)m->max_sessions * sizeof *m->batch);
    m->spec_jobs = xcalloc((size_t)m->max_sessions, sizeof *m->spec_jobs);
    m->spec_sc = xcalloc((size_t)m->max_sessions, sizeof *m->spec_sc);
    m->spec_con = xcalloc((size_t)m->max_sessions, sizeof *m->spec_con);
    m->seqs = xmalloc((size_t)m->max_sessions * sizeof *m->seqs);
    m->smps = xmalloc((size_t)m->max_sessions * sizeof *m->smps);
    m->next_ids = xmalloc((size_t)m->max_sessions * sizeof *m->next_ids);
    m->rc = xmalloc((size_t)m->max_sessions * sizeof *m->rc);
    /* a batch's masks on up to 16 threads (the engine's own between steps) */
    m->gpool = gram_maskpool_new(o->n_threads > 16 ? 16 : o->n_threads > 0 ? o->n_threads : 1);
    m->gstates = xmalloc((size_t)m->max_sessions * sizeof *m->gstates);
    m->gmasks = xmalloc((size_t)m->max_sessions * sizeof *m->gmasks);
    m->gcounts = xmalloc((size_t)m->max_sessions * sizeof *m->gcounts);
    m->gslots = xmalloc((size_t)m->max_sessions * sizeof *m->gslots);
    m->errs = xmalloc((size_t)m->max_sessions * sizeof *m->errs);
    m->work_reqs = xmalloc((size_t)m->max_sessions * sizeof *m->work_reqs);
    m->logits = xmalloc((size_t)m->n_vocab * sizeof *m->logits);
    m->raw = xmalloc((size_t)m->n_vocab * sizeof *m->raw);
    for (int i = 0; i < m->max_sessions; i++) {
        serve_slot *s = &m->slots[i];
        if (engine_seq_new(m->eng, &s->seq, err) != 0)
            goto fail;
        sb_init(&s->piece);
        sb_init(&s->lp_bytes);
        if (m->task == SERVE_TASK_EMBED || m->task == SERVE_TASK_RERANK)
            s->pool = embed_pool_new(m->task == SERVE_TASK_EMBED ? m->pooling : MODEL_POOL_LAST,
                                     m->dim);
    }
    if (pthread_create(&m->thread, NULL, engine_main, m) != 0) {
        memra_fail(err, "%s: cannot start the engine thread", o->alias);
        goto fail;
    }
    m->thread_started = 1;
    *out = m;
    return 0;
fail:
    serve_model_free(m);
    return -1;
}

void serve_model_free(serve_model *m)
{
    if (!m)
        return;
    if (m->thread_started) {
        pthread_mutex_lock(&m->mu);
        m->stop = 1;
        pthread_cond_signal(&m->cv);
        pthread_mutex_unlock(&m->mu);
        pthread_join(m->thread, NULL);
    }
    for (int i = 0; m->slots && i < m->max_sessions; i++) {
        if (m->slots[i].seq)
            engine_seq_free(m->slots[i].seq);
        sb_free(&m->slots[i].piece);
        embed_pool_free(m->slots[i].pool);
        free(m->slots[i].gmask);
        sb_free(&m->slots[i].lp_bytes);
    }
    free(m->slots);
    free(m->ids);
    free(m->batch);
    free(m->spec_jobs);
    free(m->spec_sc);
    free(m->spec_con);
    free(m->seqs);
    free(m->smps);
    free(m->next_ids);
    free(m->rc);
    free(m->errs);
    free(m->work_reqs);
    free(m->logits);
    gram_maskpool_free(m->gpool);
    free(m->gstates);
    free(m->gmasks);
    free(m->gcounts);
    free(m->gslots);
    gram_vocab_free(m->gvocab);
    free(m->gmask);
    free(m->raw);
    serve_spec_free(m->spec); /* the draft engine: its own, beside the model's */
    if (m->eng)
        engine_free(m->eng);
    if (m->tmpl)
        jinja_free(m->tmpl);
    if (m->tok)
        tok_free(m->tok);
    tok_cache_free(m->tcache);
    serve_rerank_tmpl_free(&m->rr);
    embed_head_free(m->rr_head);
    if (m->ck_open)
        checkpoint_close(&m->ck);
    pthread_mutex_destroy(&m->mu);
    pthread_cond_destroy(&m->cv);
    free(m->tmpl_why);
    free(m->bos);
    free(m->eos);
    free(m->alias);
    free(m);
}

/* ---- accessors -------------------------------------------------------- */

toolparse_format serve_model_tool_format(const serve_model *m) { return m->tool_fmt; }

int serve_model_reasoning(const serve_model *m, const char **open, const char **close)
{
    *open = m->reason_open;
    *close = m->reason_close;
    return m->reason_open != NULL;
}

const char *serve_model_alias(const serve_model *m) { return m->alias; }
serve_task serve_model_task(const serve_model *m) { return m->task; }
const serve_spec *serve_model_spec(const serve_model *m) { return m->spec; }
int serve_model_pooling(const serve_model *m) { return m->pooling; }
int64_t serve_model_dim(const serve_model *m) { return m->dim; }

const serve_rerank_tmpl *serve_model_rerank_tmpl(const serve_model *m)
{
    return m->task == SERVE_TASK_RERANK ? &m->rr : NULL;
}

const char *serve_task_name(serve_task t)
{
    return t == SERVE_TASK_CHAT ? "chat" : t == SERVE_TASK_EMBED ? "embed"
         : t == SERVE_TASK_RERANK ? "rerank" : "auto";
}

int serve_task_parse(const char *name)
{
    for (int t = SERVE_TASK_CHAT; t <= SERVE_TASK_RERANK; t++)
        if (!strcmp(name, serve_task_name((serve_task)t)))
            return t;
    return -1;
}
const tokenizer *serve_model_tokenizer(const serve_model *m) { return m->tok; }
tok_cache *serve_model_tok_cache(const serve_model *m) { return m->tcache; }
int64_t serve_model_n_ctx(const serve_model *m) { return m->n_ctx; }
int32_t serve_model_n_vocab(const serve_model *m) { return m->n_vocab; }
int serve_model_max_sessions(const serve_model *m) { return m->max_sessions; }
const char *serve_model_bos_text(const serve_model *m) { return m->bos; }
const char *serve_model_eos_text(const serve_model *m) { return m->eos; }

const jinja_template *serve_model_template(const serve_model *m, const char **why)
{
    if (why)
        *why = m->tmpl_why ? m->tmpl_why : "the model has no chat template";
    return m->tmpl;
}

int serve_model_submit(serve_model *m, serve_req *r)
{
    pthread_mutex_lock(&m->mu);
    if (m->stop) {
        pthread_mutex_unlock(&m->mu);
        return -2;
    }
    int weight = r->n_choices;
    if (r->work) /* its inputs need not hold slots at once */
        weight = r->work->n_inputs < m->max_sessions ? r->work->n_inputs : m->max_sessions;
    if ((!r->work && r->n_choices > m->max_sessions) ||
        m->n_waiting + m->n_running + weight > m->max_sessions + m->max_queue) {
        pthread_mutex_unlock(&m->mu);
        return -1;
    }
    if (r->work)
        r->work->weight_waiting = weight;
    serve_req_ref(r);
    r->next = NULL;
    r->t_ping = clock_now_s();
    if (m->q_tail)
        m->q_tail->next = r;
    else
        m->q_head = r;
    m->q_tail = r;
    m->n_waiting += weight;
    pthread_cond_signal(&m->cv);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

void serve_model_get_stats(serve_model *m, serve_model_stats *s)
{
    pthread_mutex_lock(&m->mu);
    s->running = m->n_running;
    s->waiting = m->n_waiting;
    s->kv_blocks_used = m->kv_used;
    s->kv_blocks_total = (int64_t)m->max_sessions * ((m->n_ctx + KV_BLOCK_SIZE - 1) / KV_BLOCK_SIZE);
    s->prompt_tokens = m->prompt_tokens;
    s->generated_tokens = m->generated_tokens;
    s->finished_stop = m->fin_stop;
    s->finished_length = m->fin_length;
    s->finished_error = m->fin_error;
    s->cancelled = m->n_cancelled;
    s->prompt_cached_tokens = m->prompt_cached;
    s->prefix = m->prefix_stats;
    s->ttft = m->ttft;
    s->itl = m->itl;
    s->work_ok = m->work_ok;
    s->work_error = m->work_error;
    s->work_cancelled = m->work_cancelled;
    s->work_inputs = m->work_inputs;
    s->work_steps = m->work_steps;
    s->speculates = m->spec != NULL;
    s->spec_drafted = m->spec_drafted;
    s->spec_accepted = m->spec_accepted;
    s->spec_rounds = m->spec_rounds;
    s->spec_steps = m->spec_steps;
    pthread_mutex_unlock(&m->mu);
}
