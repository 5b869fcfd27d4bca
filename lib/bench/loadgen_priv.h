/* The load client's insides, shared by its single-turn run (loadgen.c)
 * and its multi-turn run (loadgen_turns.c): the client, one stream (an
 * easy handle and the request it carries), the samples a level collects,
 * and the closed loop that drives c streams through one multi handle. */
#ifndef MEMRA_BENCH_LOADGEN_PRIV_H
#define MEMRA_BENCH_LOADGEN_PRIV_H

#include <curl/curl.h>
#include <jansson.h>

#include "bench/loadgen.h"
#include "bench/sse_parse.h"
#include "core/strbuf.h"

struct loadgen {
    loadgen_opts o;
    char *base;          /* the URL without a trailing "/" or "/v1" */
    char *endpoint;      /* base + "/v1/completions" */
    char *chat_endpoint; /* base + "/v1/chat/completions" */
    char model[256];
    int64_t n_ctx, n_vocab;
    struct curl_slist *headers;
    CURLM *multi;
    uint64_t next_request; /* every request's prompt comes from its own index */
};

typedef struct {
    double *v;
    size_t n, cap;
} lg_dvec;

void lg_dv_push(lg_dvec *d, double x);

typedef struct {
    loadgen *lg;
    CURL *h;
    char errbuf[CURL_ERROR_SIZE];
    char *body;
    sse_parser sse;
    strbuf raw;          /* a non-200 body */
    strbuf reply;        /* the text the request streamed (choices[0]) */
    long status;         /* 0 until the first body bytes */
    double t_start, t_first, t_last;
    lg_dvec gaps;        /* this request's ITL samples, ms */
    long completion_tokens, prompt_tokens; /* -1: no usage seen */
    long cached_tokens;  /* usage.prompt_tokens_details.cached_tokens; 0 when absent */
    int done;            /* data: [DONE] came */
    char error[512];     /* the request failed: why */
    int index;           /* which of the run's c streams */
} lg_stream;

/* What a level collects besides its counters. */
typedef struct {
    lg_dvec ttft, itl, tpot, e2e;
    double t_first_sent, t_last_end; /* ms; 0: none yet */
} lg_samples;

/* A request ended (t_end): judge it and count it into lv and ls. Calling
 * it again for another level counts the same request there too. Returns
 * whether it succeeded. */
int lg_stream_finish(lg_stream *st, CURLcode rc, double t_end, loadgen_level *lv,
                     lg_samples *ls);
/* The level's rates and distributions from its counters and samples over
 * duration_s; the samples freed. */
void lg_level_finish(loadgen_level *lv, lg_samples *ls, double duration_s);

/* The closed loop's two questions: the stream's next request (a malloc'ed
 * body, *url its endpoint; NULL: the stream has no more), and what to do
 * with one that ended (the stream's handle already off the multi handle;
 * st->reply holds its text). */
typedef struct {
    char *(*next)(void *ctx, lg_stream *st, const char **url);
    void (*ended)(void *ctx, lg_stream *st, CURLcode rc, double t_end);
    void *ctx;
} lg_plan;

/* c streams, each sending the plan's requests back to back until it has
 * none. *t_begin: the first sent; *t_end: the last ended (ms). -1 only
 * when the client itself cannot run. */
int lg_drive(loadgen *lg, int c, const lg_plan *plan, double *t_begin, double *t_end,
             memra_err *err);

/* A non-streamed POST of a JSON body; *out the parsed reply of a 200
 * (else an error naming the URL, the status and the server's message). */
int lg_post_json(loadgen *lg, const char *url, const char *body, json_t **out, memra_err *err);

#endif
