/* One generation request as both sides of the server see it.
 *
 * The HTTP thread fills the prompt and parameters, submits the request to
 * a model's engine thread and then only reads; the engine thread appends
 * text as it becomes safe to show and finally ends the request. That
 * hand-over is the per-request token queue: pending text in a buffer under
 * the request's mutex, which the HTTP side drains.
 *
 * Waiting without threads: when the HTTP side finds nothing to send it
 * "parks" (the glue suspends the connection) under the mutex, and the
 * engine calls the wake function (which resumes it) after the next push,
 * outside the mutex. A park and a wake can thus never cross: the engine
 * sees the parked flag only once the park is complete.
 *
 * Lifetime: reference counted; the HTTP side and the engine each hold one
 * while they use the request. A client that goes away sets `cancelled`,
 * and the engine drops the sequence at its next tick.
 *
 * Choices: a request asking for n completions (OpenAI's `n`) is one
 * request of n choices, each generated in a sequence of its own (the
 * engine holds one slot per choice) and each with its own pending text,
 * token log-probabilities and finish. The request is over when every
 * choice is; one choice's error ends them all. */
#ifndef MEMRA_SERVE_SERVE_REQ_H
#define MEMRA_SERVE_SERVE_REQ_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "core/strbuf.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"

typedef enum {
    SERVE_FINISH_NONE = 0, /* still running */
    SERVE_FINISH_STOP,     /* end-of-generation token or stop string */
    SERVE_FINISH_LENGTH,   /* max_tokens or the end of the context */
    SERVE_FINISH_ERROR,    /* the engine failed for this request (error says why) */
} serve_finish;

/* The error of a request cut at shutdown (the drain timeout): the HTTP
 * side answers it 503 with Retry-After, not 500. */
#define SERVE_SHUTDOWN_WHY "the server is shutting down"

typedef void (*serve_wake_fn)(void *ctx);

/* OpenAI's limits: n up to 16 here (OpenAI allows 128; each choice is a
 * sequence), top_logprobs up to 20. */
#define SERVE_MAX_CHOICES 16
#define SERVE_MAX_TOP_LOGPROBS 20

/* A token's bytes, as an offset into the choice's `bytes` buffer. */
typedef struct {
    int32_t id;
    float logprob;
    uint32_t off, len;
} serve_tok_lp;

/* One generated token's log-probability and the most likely tokens at its
 * position (n_top of them, most likely first). */
typedef struct {
    serve_tok_lp tok;
    int32_t n_top;
    serve_tok_lp top[SERVE_MAX_TOP_LOGPROBS];
} serve_logprob;

/* What one choice has produced and nobody has taken yet (the engine fills
 * it under the request's mutex; the HTTP side moves it into its own). */
typedef struct {
    strbuf text;
    serve_logprob *lp;
    size_t n_lp, cap_lp;
    strbuf bytes;        /* the tokens' bytes lp points into */
    size_t n_generated;  /* tokens sampled so far (a stop token included) */
    size_t n_reasoning;  /* of those, the tokens of the reasoning (req->reason_open) */
    int stop_hit;        /* 1 + the index of the stop string that ended it; 0: none did */
    serve_finish finish;
} serve_choice;

void serve_choice_init(serve_choice *c);
void serve_choice_free(serve_choice *c);
/* Move src's pending text and log-probabilities to the end of dst. */
void serve_choice_take(serve_choice *dst, serve_choice *src);

/* An embeddings or rerank request's work: inputs pooled into vectors or
 * scored, nothing generated. Each input prefills in a slot of its own
 * (chunk by chunk, beside the other slots' decodes), so a request of k
 * inputs runs up to --max-sessions of them at once and answers when the
 * last is done. The HTTP side fills the inputs; the engine thread writes
 * each input's result before the request ends (its mutex orders the
 * writes before the HTTP side's read). */
typedef enum { SERVE_WORK_EMBED = 1, SERVE_WORK_RERANK = 2 } serve_work_kind;

typedef struct {
    serve_work_kind kind;
    int n_inputs;
    int32_t **ids;      /* [n_inputs] token ids, each owned */
    size_t *n_ids;      /* [n_inputs] */
    int64_t dims;       /* embed: floats per vector (dimensions) */
    float *vecs;        /* embed: [n_inputs][dims], unit length */
    double *scores;     /* rerank: [n_inputs] in [0, 1] */
    size_t n_tokens;    /* the inputs' tokens, for usage */
    /* Engine side only. */
    int n_admitted;     /* inputs placed into slots so far (in index order) */
    int n_done;         /* inputs pooled or scored */
    int weight_waiting; /* what it still counts in the model's waiting gauge */
    int ended;          /* counted in the model's work counters */
} serve_work;

/* A work of n_inputs empty inputs (the caller fills ids and n_ids); vecs
 * ([n_inputs][dims]) for embed, scores for rerank. */
serve_work *serve_work_new(serve_work_kind kind, int n_inputs, int64_t dims);
void serve_work_free(serve_work *w);

typedef struct serve_req {
    /* Set before submission, read-only afterwards. */
    serve_work *work;  /* owned: an embeddings or rerank request; NULL: generation */
    int32_t *prompt; /* owned */
    size_t n_prompt;
    int32_t max_tokens;
    sampler_params sampling; /* sampling.logit_bias points into `bias` */
    sampler_logit_bias *bias; /* owned */
    char **stop;              /* owned stop strings */
    size_t n_stop;
    int n_choices;            /* [1, SERVE_MAX_CHOICES]; choice i samples with seed + i */
    int logprobs;             /* report each token's log-probability */
    int top_logprobs;         /* and this many of the most likely [0, 20] */
    gram_grammar *grammar;    /* owned: response_format, grammar or forced tool calls, or NULL */
    int keep_special;         /* the text writes control tokens too (tool-call markup) */
    /* A grammar that holds only part of the output: from where the
     * generated bytes complete `lazy_trigger` until the grammar is done
     * (strict tools under tool_choice auto: one call's body). Owned. */
    gram_grammar *lazy_grammar;
    char lazy_trigger[32];
    /* Reasoning, for the token count: the text from reason_open to
     * reason_close (both included) is the model's thought; "" when the
     * model does not think. starts_in_reasoning: the prompt opened it. */
    char reason_open[48], reason_close[48];
    int starts_in_reasoning;
    uint64_t cache_ns;        /* the prefix cache's namespace: the tenant */
    int stream;               /* the engine sends keep-alives only to streams */
    int ignore_eos;           /* end-of-generation ids do not end it (vLLM's ignore_eos) */
    int watch_fd;             /* the client's socket, polled while parked; -1: none */
    double t_arrival;         /* clock_now_s() when it arrived */
    serve_wake_fn wake;
    void *wake_ctx;

    /* Shared, under mu. */
    pthread_mutex_t mu;
    serve_choice choice[SERVE_MAX_CHOICES]; /* [n_choices] */
    int n_over;          /* choices that have finished */
    size_t n_cached;     /* prompt tokens the prefix cache gave (choice 0) */
    serve_finish finish; /* NONE until every choice is over, or ERROR at once */
    char error[512];
    int cancelled;       /* the client is gone */
    int parked;          /* the HTTP side waits for a wake */
    int keepalive;       /* a keep-alive comment is due */
    int refs;

    /* Engine side only. */
    struct serve_req *next; /* the waiting queue's link */
    double t_ping;          /* when it last got a keep-alive */
} serve_req;

/* A snapshot the HTTP side takes with the pending text. */
typedef struct {
    serve_finish finish;     /* of the request: NONE while any choice runs */
    size_t n_generated;      /* all choices' tokens */
    size_t n_reasoning;      /* of those, the reasoning tokens */
    size_t n_cached;         /* prompt tokens read from the prefix cache */
    serve_finish choice_finish[SERVE_MAX_CHOICES];
    int choice_stop[SERVE_MAX_CHOICES]; /* serve_choice.stop_hit */
    int keepalive;
    int cancelled;  /* the client is gone: send nothing more, close */
    char error[512];
} serve_req_view;

serve_req *serve_req_new(void);
void serve_req_ref(serve_req *r);
void serve_req_unref(serve_req *r);
/* Stop strings (copied); empty strings are the caller's to refuse. */
void serve_req_set_stop(serve_req *r, const char *const *stop, size_t n);

/* Engine side. Text (and, when the request asked, the token's
 * log-probabilities: lp with the bytes its offsets point into) for one
 * choice. */
void serve_req_emit(serve_req *r, int choice, const char *text, size_t len, size_t n_generated,
                    const serve_logprob *lp, const char *lp_bytes);
/* The prompt tokens the prefix cache gave (engine side, at the start). */
void serve_req_set_cached(serve_req *r, size_t n_cached);
/* How many of a choice's tokens were reasoning, and which stop string
 * ended it (1 + its index, 0: none): engine side, before its end. */
void serve_req_set_details(serve_req *r, int choice, size_t n_reasoning, int stop_hit);
/* One choice is over; an error ends the whole request. */
void serve_req_end_choice(serve_req *r, int choice, serve_finish f, size_t n_generated,
                          const char *error);
/* Every choice still running ends with f (the shutdown of a queued
 * request); n_generated is choice 0's, the others keep their count. */
void serve_req_end(serve_req *r, serve_finish f, size_t n_generated, const char *error);
void serve_req_ping(serve_req *r);
int serve_req_cancelled(serve_req *r);
/* Whether the client is gone: cancelled, or, while the HTTP side is
 * parked, its socket (watch_fd) hung up. A parked request's connection is
 * suspended, and libmicrohttpd does not watch suspended sockets, so
 * without this a blocking request whose client went away would run to its
 * end. On a hang-up the request is cancelled and woken, so the HTTP side
 * closes the connection. Engine side, between ticks. */
int serve_req_check_client(serve_req *r);

/* HTTP side: move every choice's pending text and log-probabilities to
 * the end of out[0 .. n_choices) and fill `v`; otherwise as
 * serve_req_poll. */
int serve_req_poll_choices(serve_req *r, serve_choice *out, serve_req_view *v,
                           void (*park)(void *), void *park_ctx);
/* HTTP side: move the pending text (of choice 0) to the end of `out` and fill `v`. When
 * the request is not over and there is nothing new (a stream) or it is not
 * over at all (a blocking request, woken only at the end), park(park_ctx)
 * runs under the mutex and the call returns 1 (wait for the wake); else 0.
 * A cancelled request never parks (v->cancelled says so). */
int serve_req_poll(serve_req *r, strbuf *out, serve_req_view *v, void (*park)(void *),
                   void *park_ctx);
void serve_req_cancel(serve_req *r);

#endif
