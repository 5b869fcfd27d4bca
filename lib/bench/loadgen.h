/* memra-bench --server's load client: streamed completion requests against
 * an OpenAI-compatible server, at a fixed concurrency, timed from the
 * client's side.
 *
 * One libcurl multi handle drives every stream from one thread: each of
 * the c concurrent streams is an easy handle that sends its next request
 * as soon as the last one ends (a closed loop), over a kept-alive HTTP/1.1
 * connection. A request is POST /v1/completions with a prompt of exactly
 * n_prompt token ids (the API takes arrays of ids, so no tokenizer is
 * involved and the length is exact), max_tokens n_gen, greedy,
 * "ignore_eos": true (so the model does not stop early), streamed with
 * stream_options.include_usage. The ids are drawn from the server's
 * vocabulary by a generator seeded per request, so no two prompts share a
 * prefix and a prefix cache cannot help.
 *
 * The body is parsed as it arrives (lib/bench/sse_parse.h): the time to
 * first token (TTFT) is from sending the request to the first event that
 * carries text; the inter-token latency (ITL) is the gap between
 * consecutive text events; the tokens a request got are its usage's
 * completion_tokens (a text event may carry several tokens, or a token no
 * text), and the prompt tokens it reported cached are its usage's
 * prompt_tokens_details.cached_tokens (0 when absent).
 *
 * The multi-turn run (loadgen_run_turns, lib/bench/loadgen_turns.c) sends
 * conversations (lib/bench/convo.h) to /v1/chat/completions instead: each
 * stream is a client whose next request is its conversation's next turn,
 * the whole history resent. */
#ifndef MEMRA_BENCH_LOADGEN_H
#define MEMRA_BENCH_LOADGEN_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

typedef struct {
    const char *url;     /* http[s]://host[:port][/prefix]; a trailing "/" or "/v1" is dropped */
    const char *model;   /* an alias the server lists; NULL: the first of GET /v1/models */
    const char *api_key; /* sent as Authorization: Bearer; NULL: none */
    int n_prompt;        /* prompt tokens per request, >= 1; 0: multi-turn runs only */
    int n_gen;           /* max_tokens per request, >= 1 */
    int64_t n_vocab;     /* > 0: draw ids below it (else the server's vocab_size) */
    double timeout_s;    /* per request; <= 0: 600 */
    uint64_t seed;       /* of the prompts */
} loadgen_opts;

/* A distribution over samples: linear interpolation between the closest
 * ranks (numpy's default), in the unit of the samples. n == 0: all 0. */
typedef struct {
    size_t n;
    double p50, p90, p99, min, max, mean;
} loadgen_dist;

void loadgen_dist_of(const double *v, size_t n, loadgen_dist *out);
/* The q-quantile (0 <= q <= 1) of n >= 1 sorted samples. */
double loadgen_quantile_sorted(const double *sorted, size_t n, double q);

/* One concurrency level's results. */
typedef struct {
    int concurrency;
    int requests;             /* sent */
    int ok, errors;
    char first_error[512];    /* "" when none */
    double duration_s;        /* first request sent to last one ended */
    double requests_s;        /* ok / duration */
    double tok_s;             /* tokens_received / duration: the aggregate */
    uint64_t tokens_requested; /* n_gen x ok */
    uint64_t tokens_received;  /* completion_tokens summed over the ok requests */
    uint64_t prompt_tokens;    /* prompt_tokens summed (the server's count) */
    uint64_t cached_tokens;    /* of those, the ones the server said it had cached */
    double prompt_tok_s;       /* prompt_tokens / duration */
    int short_requests;       /* ok requests that got fewer tokens than n_gen */
    int textless_requests;    /* ok requests whose tokens carried no text (only special
                               * tokens): counted, but with no TTFT, ITL or TPOT */
    loadgen_dist ttft_ms, itl_ms, tpot_ms, e2e_ms;
} loadgen_level;

typedef struct loadgen loadgen;

/* The URL checked (libcurl's parser; http or https with a host, no query
 * or fragment) and reduced to its base: the trailing "/" and "/v1"
 * dropped. *base is malloc'ed. */
int loadgen_base_url(const char *url, char **base, memra_err *err);

/* Check the URL, ask the server for its models (GET /v1/models) and pick
 * the model: its alias, context length and vocabulary. Fails with one
 * line: a bad URL, the server down or refusing, the model not served, a
 * prompt + n_gen over its context, no vocab_size and no n_vocab given. */
int loadgen_new(const loadgen_opts *o, loadgen **out, memra_err *err);
void loadgen_free(loadgen *lg);
const char *loadgen_model(const loadgen *lg);
int64_t loadgen_n_ctx(const loadgen *lg);   /* 0: the server did not say */
int64_t loadgen_n_vocab(const loadgen *lg);
/* The completions endpoint requests go to. */
const char *loadgen_endpoint(const loadgen *lg);
/* The chat completions endpoint multi-turn requests go to. */
const char *loadgen_chat_endpoint(const loadgen *lg);

/* n_requests requests, c at a time (c <= n_requests). Request failures
 * (transport errors, HTTP errors, error events, a stream cut short) are
 * counted in the level, not returned; -1 only when the client itself
 * cannot run. */
int loadgen_run(loadgen *lg, int concurrency, int n_requests, loadgen_level *out,
                memra_err *err);

/* ---- multi-turn runs (lib/bench/loadgen_turns.c) ---- */

/* The filler's size in the server's tokens, measured: two chat requests
 * (max_tokens 1, not streamed) whose system messages differ only in their
 * number of filler words, and their usage.prompt_tokens. *tokens_per_word
 * is the slope; *overhead the tokens a turn adds besides its words (the
 * chat template's). The calibration texts share nothing with a run's, so
 * they leave nothing in a prefix cache that a run could find; they also
 * warm the server up. */
int loadgen_calibrate(loadgen *lg, uint64_t seed, double *tokens_per_word, double *overhead,
                      memra_err *err);

typedef struct {
    int turns;            /* per conversation, >= 1 */
    int conversations;    /* per client, back to back, >= 1 */
    const char *system;   /* the system prompt every conversation shares */
    size_t turn_words;    /* filler words per user message */
    uint64_t seed;        /* of the user messages; conversation ids go on from first_id */
    uint64_t first_id;
} loadgen_turns_opts;

typedef struct {
    loadgen_level all;    /* every turn's requests over the run's wall time */
    loadgen_level *turn;  /* [turns]: turn k+1's requests, their rates over that turn's own
                           * span (its first sent to its last ended: turns overlap when
                           * clients drift apart, so these do not add up to all's) */
    int turns;
} loadgen_turns_result;

/* c clients, each running o->conversations conversations of o->turns
 * turns one request at a time. A failed turn ends its conversation (the
 * history has no reply to go on with): its later turns are not sent.
 * Failures are counted, not returned, as in loadgen_run. */
int loadgen_run_turns(loadgen *lg, int c, const loadgen_turns_opts *o,
                      loadgen_turns_result *out, memra_err *err);
void loadgen_turns_result_free(loadgen_turns_result *r);

#endif
