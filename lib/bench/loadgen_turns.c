/* The load client's multi-turn run and the calibration that sizes its
 * filler in the server's tokens (loadgen.h). */
#include <stdlib.h>
#include <string.h>

#include "bench/convo.h"
#include "bench/loadgen.h"
#include "bench/loadgen_priv.h"
#include "core/check.h"

/* Filler streams of the calibration: far from the conversations' (which
 * count up from 0) and from the system prompt's a caller picks. */
#define CAL_STREAM_SHORT (UINT64_MAX - 16)
#define CAL_STREAM_LONG (UINT64_MAX - 17)
#define CAL_STREAM_USER (UINT64_MAX - 18)
#define CAL_SHORT_WORDS 16
#define CAL_USER_WORDS 8

/* usage.prompt_tokens of a one-turn chat: a system message of n_words
 * filler words (from stream) and a short user message. */
static int probe(loadgen *lg, uint64_t seed, uint64_t stream, size_t n_words, int64_t *n,
                 memra_err *err)
{
    char *sys = convo_filler(seed, stream, n_words);
    char *user = convo_filler(seed, CAL_STREAM_USER, CAL_USER_WORDS);
    json_t *body = json_pack("{s:s,s:[{s:s,s:s},{s:s,s:s}],s:i,s:i}", "model", lg->model,
                             "messages", "role", "system", "content", sys, "role", "user",
                             "content", user, "max_tokens", 1, "temperature", 0);
    free(sys);
    free(user);
    char *s = json_dumps(body, JSON_COMPACT);
    json_decref(body);
    json_t *reply;
    int rc = lg_post_json(lg, lg->chat_endpoint, s, &reply, err);
    free(s);
    if (rc != 0)
        return -1;
    json_t *pt = json_object_get(json_object_get(reply, "usage"), "prompt_tokens");
    *n = json_is_integer(pt) ? json_integer_value(pt) : -1;
    json_decref(reply);
    if (*n <= 0)
        return memra_fail(err, "%s: no usage.prompt_tokens in the reply: the filler cannot "
                          "be sized in tokens", lg->chat_endpoint);
    return 0;
}

int loadgen_calibrate(loadgen *lg, uint64_t seed, double *tokens_per_word, double *overhead,
                      memra_err *err)
{
    /* The longer text as long as it can be and still leave room in the
     * context: a quarter of it for at most ~3 tokens a word. */
    int64_t extra = 2048;
    if (lg->n_ctx > 0 && lg->n_ctx / 4 < extra)
        extra = lg->n_ctx / 4;
    if (extra < 8)
        extra = 8;
    int64_t p0, p1;
    if (probe(lg, seed, CAL_STREAM_SHORT, CAL_SHORT_WORDS, &p0, err) != 0 ||
        probe(lg, seed, CAL_STREAM_LONG, CAL_SHORT_WORDS + (size_t)extra, &p1, err) != 0)
        return -1;
    if (p1 <= p0)
        return memra_fail(err, "%s: %d more words gave no more prompt tokens (%lld, then "
                          "%lld): the filler cannot be sized in tokens", lg->chat_endpoint,
                          (int)extra, (long long)p0, (long long)p1);
    *tokens_per_word = (double)(p1 - p0) / (double)extra;
    *overhead = (double)p0 - *tokens_per_word * (CAL_SHORT_WORDS + CAL_USER_WORDS);
    if (*overhead < 0)
        *overhead = 0;
    return 0;
}

typedef struct {
    loadgen *lg;
    const loadgen_turns_opts *o;
    convo **cv;         /* [c]: each client's conversation now; NULL between two */
    int *started;       /* [c]: conversations each client has begun */
    loadgen_turns_result *out;
    lg_samples all, *turn;
} turns_run;

static char *turns_next(void *ctx, lg_stream *st, const char **url)
{
    turns_run *r = ctx;
    const loadgen_turns_opts *o = r->o;
    int i = st->index;
    if (r->cv[i] && convo_turns(r->cv[i]) == o->turns) {
        convo_free(r->cv[i]);
        r->cv[i] = NULL;
    }
    if (!r->cv[i]) {
        if (r->started[i] == o->conversations)
            return NULL;
        /* ids by client and order, not by timing: the same run sends the same texts */
        uint64_t id = o->first_id + (uint64_t)i * (uint64_t)o->conversations +
                      (uint64_t)r->started[i]++;
        r->cv[i] = convo_new(o->system, o->seed, id, o->turn_words);
    }
    *url = r->lg->chat_endpoint;
    return convo_next_body(r->cv[i], r->lg->model, r->lg->o.n_gen);
}

static void turns_ended(void *ctx, lg_stream *st, CURLcode rc, double t_end)
{
    turns_run *r = ctx;
    convo *cv = r->cv[st->index];
    int k = convo_turns(cv) - 1;
    int ok = lg_stream_finish(st, rc, t_end, &r->out->turn[k], &r->turn[k]);
    lg_stream_finish(st, rc, t_end, &r->out->all, &r->all);
    if (ok) {
        convo_reply(cv, sb_str(&st->reply), st->reply.len);
    } else { /* nothing to go on with: the client starts its next conversation */
        convo_free(cv);
        r->cv[st->index] = NULL;
    }
}

int loadgen_run_turns(loadgen *lg, int c, const loadgen_turns_opts *o,
                      loadgen_turns_result *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    if (c < 1 || o->turns < 1 || o->conversations < 1 || !o->system)
        return memra_fail(err, "loadgen: %d clients x %d conversations x %d turns", c,
                          o->conversations, o->turns);
    out->turns = o->turns;
    out->turn = xcalloc((size_t)o->turns, sizeof *out->turn);
    out->all.concurrency = c;
    for (int k = 0; k < o->turns; k++)
        out->turn[k].concurrency = c;
    turns_run r = {
        .lg = lg, .o = o, .out = out,
        .cv = xcalloc((size_t)c, sizeof *r.cv),
        .started = xcalloc((size_t)c, sizeof *r.started),
        .turn = xcalloc((size_t)o->turns, sizeof *r.turn),
    };
    lg_plan plan = {turns_next, turns_ended, &r};
    double t_begin, t_end;
    int rc = lg_drive(lg, c, &plan, &t_begin, &t_end, err);
    lg_level_finish(&out->all, &r.all, (t_end - t_begin) / 1e3);
    for (int k = 0; k < o->turns; k++)
        lg_level_finish(&out->turn[k], &r.turn[k],
                        (r.turn[k].t_last_end - r.turn[k].t_first_sent) / 1e3);
    for (int i = 0; i < c; i++)
        convo_free(r.cv[i]);
    free(r.cv);
    free(r.started);
    free(r.turn);
    return rc;
}

void loadgen_turns_result_free(loadgen_turns_result *r)
{
    free(r->turn);
    memset(r, 0, sizeof *r);
}
