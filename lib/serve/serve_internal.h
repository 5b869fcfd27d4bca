/* What the server's own files share: the server state, the OpenAI
 * surfaces (serve_openai.c) and the other endpoints (serve_routes.c),
 * which serve_http.c calls. Not for programs. */
#ifndef MEMRA_SERVE_SERVE_INTERNAL_H
#define MEMRA_SERVE_SERVE_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/strbuf.h"
#include "serve/serve.h"
#include "serve/serve_error.h"
#include "serve/serve_metrics.h"
#include "serve/serve_model.h"
#include "serve/serve_req.h"
#include "serve/tool_parse.h"

struct serve_server {
    serve_opts opts;
    /* HTTP threads hold it (read) while they use a model; shutdown takes it
     * (write) to take the models away before they are freed. */
    pthread_rwlock_t models_lock;
    struct MHD_Daemon *daemon;
    int port;
    serve_model **models;
    int n_models;
    serve_metrics *metrics;
    atomic_int ready, draining;
    atomic_long inflight;
    atomic_ulong next_id;
    uint64_t rid_seed; /* request ids: splitmix64 of seed + counter */
};

serve_model *serve_find_model(serve_server *s, const char *alias);

typedef enum { SERVE_CHAT = 0, SERVE_COMPLETION = 1 } serve_kind;

struct serve_dialect;

/* How serve_openai_prepare treats a request another API translated. */
typedef struct {
    int clamp_max_tokens; /* a max_tokens past the context is cut to fit, not refused */
    int always_parse;     /* every reply goes through a parser (content blocks, items) */
    /* Who asks (set by the HTTP side before translate): the API key's
     * tenant ("" when it names none) and the key (NULL when none), for
     * state kept per client (the Responses store). */
    const char *tenant;
    const char *api_key;
    /* What translate hands the job (job->ext and its free), so the
     * response writer can use what the translation learnt. */
    void *ext;
    void (*ext_free)(void *ext);
} serve_prepare_opts;

/* A generation request on its way through the HTTP side. */
typedef struct {
    serve_kind kind;
    serve_model *model;  /* valid until the request is submitted */
    char model_name[128]; /* for the responses, which may outlive the model */
    serve_req *req;
    int stream, include_usage;
    char id[64];
    long long created;
    int sent_role;
    int n_choices;
    /* What the engine has produced and the response has not used yet
     * (serve_req_poll_choices fills it). */
    serve_choice got[SERVE_MAX_CHOICES];
    int sent_finish[SERVE_MAX_CHOICES];   /* a stream sent this choice's finish */
    size_t text_offset[SERVE_MAX_CHOICES]; /* completions' logprobs: bytes so far */
    /* Chat replies split into content, reasoning and tool calls (the
     * request has tools, or the template thinks): a parser per choice. */
    toolparse *tp[SERVE_MAX_CHOICES];
    int n_calls[SERVE_MAX_CHOICES]; /* tool calls a stream has announced */
    /* The API the request came in through (NULL: OpenAI's), and what its
     * response writer keeps between calls. */
    const struct serve_dialect *dialect;
    void *ext;
    void (*ext_free)(void *ext);
} serve_job;

/* An API other than OpenAI's chat and completions, on the same engine:
 * its request is translated into an OpenAI chat body, prepared as one,
 * and its response written in its own shape from the same parsed reply. */
typedef struct serve_dialect {
    /* The error body in this API's shape. */
    json_t *(*error_json)(const serve_error *e);
    /* The request as an OpenAI chat body (a new reference), or NULL with e
     * set; may set opts. */
    json_t *(*translate)(serve_server *s, const json_t *body, serve_prepare_opts *opts,
                         serve_error *e);
    /* After the chat body is prepared: what the response needs of the
     * original request (job->ext). May be NULL. */
    int (*begin)(serve_server *s, serve_job *job, const json_t *body, serve_error *e);
    json_t *(*response)(serve_job *job, const serve_req_view *v);
    void (*sse_start)(serve_job *job, strbuf *out);
    int (*sse_update)(serve_job *job, strbuf *out, const serve_req_view *v);
    const char *keepalive; /* the SSE text of a keep-alive */
} serve_dialect;

extern const serve_dialect serve_dialect_anthropic;
extern const serve_dialect serve_dialect_responses;

/* Validate a chat or completion request body, render and tokenize: on
 * success job->req is ready to submit (the caller sets its wake). */
int serve_openai_prepare(serve_server *s, serve_kind kind, const json_t *body,
                         const serve_prepare_opts *opts, serve_job *job, serve_error *e);
void serve_job_clear(serve_job *job);
/* Feeds choice i's pending text to its reply parser (events to cb) and
 * drops what the choice holds (text, log-probabilities): the streaming
 * writers of the other APIs, which report no log-probabilities. */
void serve_job_parse_pending(serve_job *job, int i, toolparse_cb cb, void *user);
/* The blocking response body, from job->got. */
json_t *serve_openai_response(serve_job *job, const serve_req_view *v);
/* SSE events: the first ones (chat: the role, one per choice); then what
 * job->got holds (text and log-probabilities, each choice's finish as it
 * comes), which it takes; when v says the request is over, the end
 * (usage when asked, [DONE]). Returns whether anything was written. */
void serve_openai_sse_start(serve_job *job, strbuf *out);
int serve_openai_sse_update(serve_job *job, strbuf *out, const serve_req_view *v);

/* POST /v1/embeddings (serve_embed.c) and /v1/rerank (serve_rerank.c):
 * validate the body and tokenize its inputs into job->req->work; on
 * success the job is ready to submit (the caller sets its wake), and
 * job->dialect writes the response once the engine has ended it. */
/* path: the route the request came by, for the task-mismatch message. */
int serve_embed_prepare(serve_server *s, const json_t *body, const char *path, serve_job *job,
                        serve_error *e);
int serve_rerank_prepare(serve_server *s, const json_t *body, const char *path, serve_job *job,
                         serve_error *e);
/* A 400 unless model m is served for `task`; endpoint names the path. */
int serve_check_task(serve_model *m, serve_task task, const char *endpoint, serve_error *e);

/* The other endpoints: fill *status and return the body (JSON). */
json_t *serve_route_models(serve_server *s, const char *one, int *status);
json_t *serve_route_tokenize(serve_server *s, const json_t *body, int *status);
json_t *serve_route_detokenize(serve_server *s, const json_t *body, int *status);
json_t *serve_route_apply_template(serve_server *s, const json_t *body, int *status);
/* POST /v1/messages/count_tokens (serve_anthropic.c): {"input_tokens"}. */
json_t *serve_anthropic_count_tokens(serve_server *s, const json_t *body, int *status);
/* GET (del 0) or DELETE (del 1) /v1/responses/{id} (serve_responses.c):
 * a stored response of the caller's scope, or a 404 body. */
json_t *serve_responses_stored(const char *id, int del, const char *tenant, const char *key,
                               int *status);
/* Prometheus text. */
void serve_route_metrics(serve_server *s, strbuf *out);

/* Shared request-field helpers (serve_fields.c). A JSON null counts as
 * absent. Each names the field in its error. */
int serve_check_fields(const json_t *body, const char *const *allowed, serve_error *e);
/* The value of key in o; NULL when absent or null. */
const json_t *serve_present(const json_t *o, const char *key);
/* Every key of o is one of keys (NULL-terminated); else a 400 naming `where`
 * and the key. */
int serve_only_keys(const json_t *o, const char *const *keys, const char *where, serve_error *e);
int serve_field_num(const json_t *body, const char *key, double lo, double hi, double *out,
                    serve_error *e);
int serve_field_int(const json_t *body, const char *key, int64_t lo, int64_t hi, int64_t *out,
                    serve_error *e);
int serve_field_bool(const json_t *body, const char *key, int *out, serve_error *e);
/* The "model" field, resolved (404 model_not_found). */
int serve_field_model(serve_server *s, const json_t *body, serve_model **out, serve_error *e);
/* messages: structure checks the template relies on (text parts only). */
int serve_check_messages(const json_t *messages, serve_error *e);
/* Render messages through the model's template and tokenize the prompt:
 * special-token text the template wrote becomes control tokens, the
 * messages' content stays plain text unless allow_special (serve_fields.c
 * says how). *ids malloc'ed. */
int serve_chat_tokens(serve_model *m, const json_t *messages, const json_t *tools,
                      int add_generation_prompt,
                      const json_t *kwargs, int add_special, int allow_special, int32_t **ids,
                      size_t *n, serve_error *e);
/* Render messages (and tools, may be NULL) through the model's template. */
int serve_render_chat(serve_model *m, const json_t *messages, const json_t *tools,
                      int add_generation_prompt,
                      const json_t *kwargs, char **out, serve_error *e);

#endif
