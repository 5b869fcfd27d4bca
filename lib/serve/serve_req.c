#include "serve/serve_req.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/clock.h"

void serve_choice_init(serve_choice *c)
{
    memset(c, 0, sizeof *c);
    sb_init(&c->text);
    sb_init(&c->bytes);
}

void serve_choice_free(serve_choice *c)
{
    sb_free(&c->text);
    sb_free(&c->bytes);
    free(c->lp);
    memset(c, 0, sizeof *c);
}

static void push_lp(serve_choice *c, const serve_logprob *lp, const char *bytes)
{
    if (c->n_lp == c->cap_lp) {
        c->cap_lp = c->cap_lp ? 2 * c->cap_lp : 16;
        c->lp = xrealloc(c->lp, c->cap_lp * sizeof *c->lp);
    }
    /* The bytes are copied and the offsets moved onto this buffer. */
    serve_logprob *d = &c->lp[c->n_lp++];
    *d = *lp;
    serve_tok_lp *all[1 + SERVE_MAX_TOP_LOGPROBS];
    all[0] = &d->tok;
    for (int32_t k = 0; k < d->n_top; k++)
        all[1 + k] = &d->top[k];
    for (int32_t k = 0; k <= d->n_top; k++) {
        size_t at = c->bytes.len;
        sb_append(&c->bytes, bytes + all[k]->off, all[k]->len);
        all[k]->off = (uint32_t)at;
    }
}

void serve_choice_take(serve_choice *dst, serve_choice *src)
{
    if (src->text.len)
        sb_append(&dst->text, src->text.data, src->text.len);
    sb_clear(&src->text);
    for (size_t i = 0; i < src->n_lp; i++)
        push_lp(dst, &src->lp[i], src->bytes.data);
    src->n_lp = 0;
    sb_clear(&src->bytes);
    dst->n_generated = src->n_generated;
    dst->n_reasoning = src->n_reasoning;
    dst->stop_hit = src->stop_hit;
    dst->finish = src->finish;
}

serve_work *serve_work_new(serve_work_kind kind, int n_inputs, int64_t dims)
{
    serve_work *w = xcalloc(1, sizeof *w);
    w->kind = kind;
    w->n_inputs = n_inputs;
    w->dims = dims;
    w->ids = xcalloc((size_t)n_inputs, sizeof *w->ids);
    w->n_ids = xcalloc((size_t)n_inputs, sizeof *w->n_ids);
    if (kind == SERVE_WORK_EMBED)
        w->vecs = xcalloc((size_t)n_inputs * (size_t)dims, sizeof *w->vecs);
    else
        w->scores = xcalloc((size_t)n_inputs, sizeof *w->scores);
    return w;
}

void serve_work_free(serve_work *w)
{
    if (!w)
        return;
    for (int i = 0; i < w->n_inputs; i++)
        free(w->ids[i]);
    free(w->ids);
    free(w->n_ids);
    free(w->vecs);
    free(w->scores);
    free(w);
}

serve_req *serve_req_new(void)
{
    serve_req *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    r->n_choices = 1;
    for (int i = 0; i < SERVE_MAX_CHOICES; i++)
        serve_choice_init(&r->choice[i]);
    r->sampling = sampler_params_default();
    r->refs = 1;
    r->watch_fd = -1;
    r->t_arrival = clock_now_s();
    return r;
}

void serve_req_ref(serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    r->refs++;
    pthread_mutex_unlock(&r->mu);
}

void serve_req_unref(serve_req *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left > 0)
        return;
    pthread_mutex_destroy(&r->mu);
    for (int i = 0; i < SERVE_MAX_CHOICES; i++)
        serve_choice_free(&r->choice[i]);
    serve_work_free(r->work);
    free(r->prompt);
    free(r->bias);
    gram_free(r->grammar);
    gram_free(r->lazy_grammar);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->stop);
    free(r);
}

void serve_req_set_stop(serve_req *r, const char *const *stop, size_t n)
{
    r->stop = n ? xmalloc(n * sizeof *r->stop) : NULL;
    for (size_t i = 0; i < n; i++)
        r->stop[i] = xstrdup(stop[i]);
    r->n_stop = n;
}

/* Called with mu held; returns whether the caller must wake (after
 * unlocking). */
static int take_parked(serve_req *r)
{
    int w = r->parked;
    r->parked = 0;
    return w && r->wake;
}

void serve_req_emit(serve_req *r, int choice, const char *text, size_t len, size_t n_generated,
                    const serve_logprob *lp, const char *lp_bytes)
{
    pthread_mutex_lock(&r->mu);
    serve_choice *c = &r->choice[choice];
    if (len)
        sb_append(&c->text, text, len);
    if (lp)
        push_lp(c, lp, lp_bytes);
    c->n_generated = n_generated;
    int wake = len && r->stream ? take_parked(r) : 0; /* a blocking reply waits for the end */
    pthread_mutex_unlock(&r->mu);
    if (wake)
        r->wake(r->wake_ctx);
}

/* With mu held: end one choice; returns whether the caller must wake. */
void serve_req_set_cached(serve_req *r, size_t n_cached)
{
    pthread_mutex_lock(&r->mu);
    r->n_cached = n_cached;
    pthread_mutex_unlock(&r->mu);
}

void serve_req_set_details(serve_req *r, int choice, size_t n_reasoning, int stop_hit)
{
    pthread_mutex_lock(&r->mu);
    r->choice[choice].n_reasoning = n_reasoning;
    r->choice[choice].stop_hit = stop_hit;
    pthread_mutex_unlock(&r->mu);
}

static int end_choice(serve_req *r, int choice, serve_finish f, size_t n_generated,
                      const char *error)
{
    serve_choice *c = &r->choice[choice];
    if (r->finish != SERVE_FINISH_NONE || c->finish != SERVE_FINISH_NONE)
        return 0;
    c->finish = f;
    c->n_generated = n_generated;
    r->n_over++;
    if (f == SERVE_FINISH_ERROR) {
        r->finish = f;
        if (error)
            snprintf(r->error, sizeof r->error, "%s", error);
    } else if (r->n_over == r->n_choices) {
        r->finish = f;
    }
    return r->finish != SERVE_FINISH_NONE ? take_parked(r) : 0;
}

void serve_req_end_choice(serve_req *r, int choice, serve_finish f, size_t n_generated,
                          const char *error)
{
    pthread_mutex_lock(&r->mu);
    int wake = end_choice(r, choice, f, n_generated, error);
    pthread_mutex_unlock(&r->mu);
    if (wake)
        r->wake(r->wake_ctx);
}

void serve_req_end(serve_req *r, serve_finish f, size_t n_generated, const char *error)
{
    pthread_mutex_lock(&r->mu);
    int wake = 0;
    for (int i = 0; i < r->n_choices; i++)
        if (r->choice[i].finish == SERVE_FINISH_NONE)
            wake |= end_choice(r, i, f, i == 0 ? n_generated : r->choice[i].n_generated, error);
    pthread_mutex_unlock(&r->mu);
    if (wake)
        r->wake(r->wake_ctx);
}

void serve_req_ping(serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    r->keepalive = 1;
    int wake = take_parked(r);
    pthread_mutex_unlock(&r->mu);
    if (wake)
        r->wake(r->wake_ctx);
}

int serve_req_cancelled(serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    int c = r->cancelled;
    pthread_mutex_unlock(&r->mu);
    return c;
}

int serve_req_check_client(serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    int gone = r->cancelled, wake = 0;
    /* Parked means suspended: nothing closes the socket until the wake, so
     * the fd is still this client's. POLLRDHUP is the peer's FIN (a full
     * close, or a half-close: either way it is not reading a reply it
     * has stopped waiting for); data it pipelined meanwhile is no
     * hang-up. */
    if (!gone && r->parked && r->watch_fd >= 0) {
        struct pollfd p = {.fd = r->watch_fd, .events = POLLRDHUP};
        if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR))) {
            r->cancelled = gone = 1;
            wake = take_parked(r);
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (wake)
        r->wake(r->wake_ctx);
    return gone;
}

int serve_req_poll_choices(serve_req *r, serve_choice *out, serve_req_view *v,
                           void (*park)(void *), void *park_ctx)
{
    pthread_mutex_lock(&r->mu);
    int fresh = r->keepalive;
    v->n_generated = v->n_reasoning = 0;
    for (int i = 0; i < r->n_choices; i++) {
        serve_choice *c = &r->choice[i];
        fresh |= c->text.len > 0;
        if (out)
            serve_choice_take(&out[i], c);
        else
            sb_clear(&c->text);
        v->choice_finish[i] = c->finish;
        v->choice_stop[i] = c->stop_hit;
        v->n_generated += c->n_generated;
        v->n_reasoning += c->n_reasoning;
    }
    v->finish = r->finish;
    v->n_cached = r->n_cached;
    v->keepalive = r->keepalive;
    v->cancelled = r->cancelled;
    r->keepalive = 0;
    memcpy(v->error, r->error, sizeof v->error);
    int parked = 0;
    if (r->finish == SERVE_FINISH_NONE && !r->cancelled && (!fresh || !r->stream) && park) {
        r->parked = 1;
        park(park_ctx);
        parked = 1;
    }
    pthread_mutex_unlock(&r->mu);
    return parked;
}

int serve_req_poll(serve_req *r, strbuf *out, serve_req_view *v, void (*park)(void *),
                   void *park_ctx)
{
    serve_choice c[SERVE_MAX_CHOICES];
    for (int i = 0; i < r->n_choices; i++)
        serve_choice_init(&c[i]);
    int parked = serve_req_poll_choices(r, c, v, park, park_ctx);
    if (c[0].text.len)
        sb_append(out, c[0].text.data, c[0].text.len);
    for (int i = 0; i < r->n_choices; i++)
        serve_choice_free(&c[i]);
    return parked;
}

void serve_req_cancel(serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    r->cancelled = 1;
    r->parked = 0;
    pthread_mutex_unlock(&r->mu);
}
