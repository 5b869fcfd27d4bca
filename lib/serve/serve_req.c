#include "serve/serve_req.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"

double serve_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

serve_req *serve_req_new(void)
{
    serve_req *r = xcalloc(1, sizeof *r);
    pthread_mutex_init(&r->mu, NULL);
    sb_init(&r->text);
    r->sampling = sampler_params_default();
    r->refs = 1;
    r->watch_fd = -1;
    r->t_arrival = serve_now();
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
    sb_free(&r->text);
    free(r->prompt);
    free(r->bias);
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

void serve_req_emit(serve_req *r, const char *text, size_t len, size_t n_generated)
{
    pthread_mutex_lock(&r->mu);
    if (len)
        sb_append(&r->text, text, len);
    r->n_generated = n_generated;
    int wake = len && r->stream ? take_parked(r) : 0; /* a blocking reply waits for the end */
    pthread_mutex_unlock(&r->mu);
    if (wake)
        r->wake(r->wake_ctx);
}

void serve_req_end(serve_req *r, serve_finish f, size_t n_generated, const char *error)
{
    pthread_mutex_lock(&r->mu);
    if (r->finish != SERVE_FINISH_NONE) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    r->finish = f;
    r->n_generated = n_generated;
    if (error)
        snprintf(r->error, sizeof r->error, "%s", error);
    int wake = take_parked(r);
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

int serve_req_poll(serve_req *r, strbuf *out, serve_req_view *v, void (*park)(void *),
                   void *park_ctx)
{
    pthread_mutex_lock(&r->mu);
    int fresh = r->text.len > 0 || r->keepalive;
    if (r->text.len) {
        sb_append(out, r->text.data, r->text.len);
        sb_clear(&r->text);
    }
    v->finish = r->finish;
    v->n_generated = r->n_generated;
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

void serve_req_cancel(serve_req *r)
{
    pthread_mutex_lock(&r->mu);
    r->cancelled = 1;
    r->parked = 0;
    pthread_mutex_unlock(&r->mu);
}
