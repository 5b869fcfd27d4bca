/* The HTTP glue over libmicrohttpd: the daemon, routing, bodies, auth,
 * admission, and the two ways a generation waits for its engine thread
 * (a suspended connection resumed by the engine: the blocking request's
 * access handler runs again when the request ends; a stream's content
 * reader runs again when there is text). */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/hash.h"
#include "core/log.h"
#include "serve/serve_internal.h"

typedef enum {
    R_ROOT, R_HEALTH, R_READYZ, R_METRICS, R_MODELS, R_MODEL_ONE, R_CHAT, R_COMPLETIONS,
    R_MESSAGES, R_COUNT_TOKENS, R_RESPONSES, R_RESPONSE_ONE, R_RESPONSE_DELETE, R_TOKENIZE, R_DETOKENIZE, R_TEMPLATE,
    R_EMBEDDINGS, R_RERANK, R_NONE,
} route_id;

typedef struct {
    const char *path;
    const char *method;
    route_id id;
    int prefix; /* path is a prefix: /v1/models/{id} */
    const serve_dialect *dialect; /* the API whose shapes it answers in; NULL: OpenAI's */
} route;

static const route routes[] = {
    {"/", "GET", R_ROOT, 0, NULL},
    {"/health", "GET", R_HEALTH, 0, NULL},
    {"/readyz", "GET", R_READYZ, 0, NULL},
    {"/metrics", "GET", R_METRICS, 0, NULL},
    {"/v1/models", "GET", R_MODELS, 0, NULL},
    {"/v1/models/", "GET", R_MODEL_ONE, 1, NULL},
    {"/v1/chat/completions", "POST", R_CHAT, 0, NULL},
    {"/v1/completions", "POST", R_COMPLETIONS, 0, NULL},
    {"/v1/messages", "POST", R_MESSAGES, 0, &serve_dialect_anthropic},
    {"/v1/messages/count_tokens", "POST", R_COUNT_TOKENS, 0, &serve_dialect_anthropic},
    {"/v1/responses", "POST", R_RESPONSES, 0, &serve_dialect_responses},
    {"/v1/responses/", "GET", R_RESPONSE_ONE, 1, NULL},
    {"/v1/responses/", "DELETE", R_RESPONSE_DELETE, 1, NULL},
    {"/tokenize", "POST", R_TOKENIZE, 0, NULL},
    {"/detokenize", "POST", R_DETOKENIZE, 0, NULL},
    {"/apply-template", "POST", R_TEMPLATE, 0, NULL},
    {"/v1/embeddings", "POST", R_EMBEDDINGS, 0, NULL},
    {"/v1/rerank", "POST", R_RERANK, 0, NULL},
    {"/rerank", "POST", R_RERANK, 0, NULL}, /* vLLM's and llama.cpp's other spelling */
};

/* One HTTP request. */
typedef struct {
    serve_server *srv;
    struct MHD_Connection *conn;
    const route *rt;      /* NULL: no such endpoint */
    const char *endpoint; /* the metrics label */
    strbuf body;
    int too_large;
    int status;           /* of the response queued */
    double t0;
    char line[160];       /* "METHOD /path" for the log */
    char rid[80];         /* x-request-id: the client's when sane, else ours */
    int close_after;      /* answer with Connection: close (framing or size refused) */
    int answered;         /* a response is queued */
    int has_job;          /* a blocking generation waits */
    uint64_t cache_ns;    /* the prefix cache's namespace: the tenant, else the key */
    serve_job job;
} conn_ctx;

/* One SSE stream: owned by its MHD response. */
typedef struct {
    serve_server *srv;
    struct MHD_Connection *conn;
    serve_job job;
    strbuf out;
    size_t off;
    int done;
} stream_ctx;

/* ---- responses -------------------------------------------------------- */

/* What the browser may send across origins: the auth headers, the JSON
 * content type and the request id. */
#define CORS_ALLOW_HEADERS "Authorization, Content-Type, X-Api-Key, X-Request-Id"

/* Headers every response of ours carries: the request id, so a client can
 * quote it and the log line can be found, and with --cors the origin
 * (without --cors, none: a browser then refuses cross-origin reads). */
static void add_common_headers(const conn_ctx *c, struct MHD_Response *r)
{
    MHD_add_response_header(r, "x-request-id", c->rid);
    if (c->rt && c->rt->dialect == &serve_dialect_anthropic)
        MHD_add_response_header(r, "request-id", c->rid); /* where Anthropic's SDKs look */
    if (c->srv->opts.cors_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", c->srv->opts.cors_origin);
        MHD_add_response_header(r, "Access-Control-Expose-Headers", "x-request-id, Retry-After");
        if (strcmp(c->srv->opts.cors_origin, "*"))
            MHD_add_response_header(r, "Vary", "Origin");
    }
    if (c->close_after)
        MHD_add_response_header(r, "Connection", "close");
}

/* The methods a path takes, for Allow and the CORS preflight: a GET path
 * answers HEAD too. */
static const char *allowed_methods(const conn_ctx *c)
{
    int get = !strcmp(c->rt->method, "GET");
    if (c->rt->id == R_RESPONSE_ONE || c->rt->id == R_RESPONSE_DELETE)
        return c->srv->opts.cors_origin ? "GET, HEAD, DELETE, OPTIONS" : "GET, HEAD, DELETE";
    if (c->srv->opts.cors_origin)
        return get ? "GET, HEAD, OPTIONS" : "POST, OPTIONS";
    return get ? "GET, HEAD" : "POST";
}

static enum MHD_Result send_buf(conn_ctx *c, int status, const char *ctype, const char *data,
                                size_t len, int retry_after)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, (void *)data, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    if (ctype)
        MHD_add_response_header(r, "Content-Type", ctype);
    add_common_headers(c, r);
    if (retry_after > 0) {
        char b[24];
        snprintf(b, sizeof b, "%d", retry_after);
        MHD_add_response_header(r, "Retry-After", b);
    }
    if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 405 && c->rt)
        MHD_add_response_header(r, "Allow", allowed_methods(c));
    enum MHD_Result ret = MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    c->answered = 1;
    c->status = status;
    serve_metrics_request(c->srv->metrics, c->endpoint, status);
    return ret;
}

static enum MHD_Result send_json(conn_ctx *c, int status, json_t *j, int retry_after)
{
    char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT);
    json_decref(j);
    if (!s)
        return MHD_NO;
    size_t n = strlen(s);
    s = xrealloc(s, n + 2);
    s[n++] = '\n';
    enum MHD_Result ret = send_buf(c, status, "application/json", s, n, retry_after);
    free(s);
    return ret;
}

/* In the shape of the API the path belongs to. */
static enum MHD_Result send_error(conn_ctx *c, const serve_error *e)
{
    const serve_dialect *d = c->rt ? c->rt->dialect : NULL;
    return send_json(c, e->status, d ? d->error_json(e) : serve_error_json(e), e->retry_after);
}

/* ---- waiting on the engine -------------------------------------------- */

static void park_conn(void *conn) { MHD_suspend_connection(conn); }
static void wake_conn(void *conn) { MHD_resume_connection(conn); }

/* The blocking request: answer once the engine has ended it. */
static enum MHD_Result poll_blocking(conn_ctx *c)
{
    serve_req_view v;
    if (serve_req_poll_choices(c->job.req, c->job.got, &v, park_conn, c->conn))
        return MHD_YES; /* suspended until the engine ends it */
    if (v.cancelled && v.finish == SERVE_FINISH_NONE) {
        /* the engine saw the client hang up: nobody is left to answer */
        c->status = 499;
        serve_metrics_request(c->srv->metrics, c->endpoint, 499);
        return MHD_NO;
    }
    if (v.finish == SERVE_FINISH_ERROR) {
        serve_error e;
        if (!strcmp(v.error, SERVE_SHUTDOWN_WHY)) {
            /* Cut by the drain timeout: nothing was wrong with the request,
             * so the client should send it again (to this server's
             * successor or another replica), not treat it as a failure. */
            serve_fail(&e, 503, "server_error", "server_draining", NULL,
                       "the server shut down before this request finished (drain timeout); "
                       "retry it");
            e.retry_after = 1;
        } else {
            serve_fail(&e, 500, "server_error", NULL, NULL, "%s", v.error);
        }
        return send_error(c, &e);
    }
    const serve_dialect *d = c->job.dialect;
    return send_json(c, 200, d ? d->response(&c->job, &v) : serve_openai_response(&c->job, &v),
                     0);
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    stream_ctx *st = cls;
    if (st->off >= st->out.len) {
        sb_clear(&st->out);
        st->off = 0;
        if (st->done)
            return MHD_CONTENT_READER_END_OF_STREAM;
        const serve_dialect *d = st->job.dialect;
        if (!st->job.sent_role) {
            (d ? d->sse_start : serve_openai_sse_start)(&st->job, &st->out);
        } else {
            serve_req_view v;
            if (serve_req_poll_choices(st->job.req, st->job.got, &v, park_conn, st->conn))
                return 0; /* suspended: the engine resumes us */
            if (v.cancelled && v.finish == SERVE_FINISH_NONE)
                return MHD_CONTENT_READER_END_WITH_ERROR; /* the client hung up */
            if (!(d ? d->sse_update : serve_openai_sse_update)(&st->job, &st->out, &v) &&
                v.keepalive)
                sb_puts(&st->out, d ? d->keepalive : ": keep-alive\n\n");
            if (v.finish != SERVE_FINISH_NONE)
                st->done = 1;
        }
        if (st->out.len == 0)
            return st->done ? MHD_CONTENT_READER_END_OF_STREAM : 0;
    }
    size_t n = st->out.len - st->off;
    if (n > max)
        n = max;
    memcpy(buf, st->out.data + st->off, n);
    st->off += n;
    return (ssize_t)n;
}

static void stream_free(void *cls)
{
    stream_ctx *st = cls;
    if (!st->done)
        serve_req_cancel(st->job.req); /* the client went away */
    serve_job_clear(&st->job);
    sb_free(&st->out);
    free(st);
}

static const char *presented_key(struct MHD_Connection *conn);

/* Hands a prepared job to its model (the caller holds models_lock): the
 * engine wakes this connection; fills e on a 429 or 503. */
static int submit_job(conn_ctx *c, serve_job *job, serve_error *e)
{
    serve_server *s = c->srv;
    job->req->cache_ns = c->cache_ns;
    job->req->wake = wake_conn;
    job->req->wake_ctx = c->conn;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    job->req->watch_fd = ci ? ci->connect_fd : -1;
    /* The idle timeout is for clients that send nothing; an answer the
     * engine is still producing may be quiet longer (a blocking request,
     * a stream whose reader is slow), and parked connections are not
     * timed anyway. */
    MHD_set_connection_option(c->conn, MHD_CONNECTION_OPTION_TIMEOUT, s->opts.conn_timeout);
    int rc = serve_model_submit(job->model, job->req);
    if (rc == -1)
        serve_fail(e, 429, "rate_limit_error", "rate_limit_exceeded", NULL,
                   "model '%s' is at capacity (every session busy and the queue full); "
                   "retry later", job->model_name);
    else if (rc == -2)
        serve_fail(e, 503, "server_error", "server_shutting_down", NULL,
                   "the server is shutting down");
    e->retry_after = rc == -1 ? 1 : 0;
    return rc;
}

/* A submitted job's answer: the blocking wait, or the stream. */
static enum MHD_Result answer_job(conn_ctx *c, serve_job *job)
{
    serve_server *s = c->srv;
    if (!job->stream) {
        c->job = *job;
        c->has_job = 1;
        return poll_blocking(c);
    }
    stream_ctx *st = xcalloc(1, sizeof *st);
    st->srv = s;
    st->conn = c->conn;
    st->job = *job;
    sb_init(&st->out);
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, stream_read, st, stream_free);
    if (!r) {
        stream_free(st);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    add_common_headers(c, r);
    enum MHD_Result ret = MHD_queue_response(c->conn, 200, r);
    MHD_destroy_response(r);
    c->answered = 1;
    c->status = 200;
    serve_metrics_request(s->metrics, c->endpoint, 200);
    return ret;
}

/* A generation endpoint asked of a model served for embeddings or
 * rerank: a 400 naming the alias, its task and the endpoint, before
 * anything of the request is prepared for it. */
static int check_chat_task(serve_server *s, const conn_ctx *c, const json_t *body, serve_error *e)
{
    const json_t *v = json_object_get(body, "model");
    serve_model *m = json_is_string(v) ? serve_find_model(s, json_string_value(v)) : NULL;
    return m ? serve_check_task(m, SERVE_TASK_CHAT, c->rt->path, e) : 0;
}

/* A generation: chat or completions, or another API's request translated
 * into a chat body (dialect). */
static enum MHD_Result generate(conn_ctx *c, serve_kind kind, const serve_dialect *dialect,
                                const json_t *body, const char *tenant)
{
    serve_server *s = c->srv;
    serve_job job;
    serve_error e;
    serve_prepare_opts po = {.tenant = tenant, .api_key = presented_key(c->conn)};
    json_t *chat = NULL;
    memset(&job, 0, sizeof job);
    if (dialect && !(chat = dialect->translate(s, body, &po, &e)))
        return send_error(c, &e);
    pthread_rwlock_rdlock(&s->models_lock);
    int rc = check_chat_task(s, c, chat ? chat : body, &e);
    if (rc != 0) {
        if (po.ext_free) /* what the translation made, which no job took */
            po.ext_free(po.ext);
    } else {
        rc = serve_openai_prepare(s, kind, chat ? chat : body, &po, &job, &e);
    }
    if (rc == 0 && dialect) {
        job.dialect = dialect;
        if (dialect->begin)
            rc = dialect->begin(s, &job, body, &e);
    }
    json_decref(chat);
    if (rc == 0)
        rc = submit_job(c, &job, &e);
    pthread_rwlock_unlock(&s->models_lock);
    if (rc != 0) {
        serve_job_clear(&job);
        return send_error(c, &e);
    }
    return answer_job(c, &job);
}

/* Embeddings or rerank: the inputs go through the same queue, slots and
 * admission as a generation, and the answer is one JSON body. */
static enum MHD_Result pool_inputs(conn_ctx *c, const json_t *body)
{
    serve_server *s = c->srv;
    serve_job job;
    serve_error e;
    memset(&job, 0, sizeof job);
    pthread_rwlock_rdlock(&s->models_lock);
    int rc = c->rt->id == R_EMBEDDINGS ? serve_embed_prepare(s, body, c->rt->path, &job, &e)
                                       : serve_rerank_prepare(s, body, c->rt->path, &job, &e);
    if (rc == 0)
        rc = submit_job(c, &job, &e);
    pthread_rwlock_unlock(&s->models_lock);
    if (rc != 0) {
        serve_job_clear(&job);
        return send_error(c, &e);
    }
    return answer_job(c, &job);
}

/* ---- routing ---------------------------------------------------------- */

/* The route of this path and method, else the path's first (whose
 * method check answers 405), else NULL. */
static const route *find_route(const char *url, const char *method)
{
    const route *first = NULL;
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(routes); i++) {
        const route *r = &routes[i];
        if (r->prefix ? !strncmp(url, r->path, strlen(r->path)) && url[strlen(r->path)]
                      : !strcmp(url, r->path)) {
            if (!strcmp(r->method, method))
                return r;
            if (!first)
                first = r;
        }
    }
    return first;
}

static const char *presented_key(struct MHD_Connection *conn)
{
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (h && !strncasecmp(h, "Bearer ", 7)) {
        h += 7;
        while (*h == ' ')
            h++;
        return h;
    }
    return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "x-api-key");
}

static json_t *parse_body(conn_ctx *c, serve_error *e)
{
    if (c->body.len == 0) {
        serve_bad(e, NULL, "the request body is empty: want a JSON object");
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(c->body.data, c->body.len, JSON_REJECT_DUPLICATES, &je);
    if (!j) {
        for (char *p = je.text; *p; p++)
            if ((unsigned char)*p < 0x20)
                *p = '?';
        serve_bad(e, NULL, "invalid JSON in the request body at line %d column %d: %s", je.line,
                  je.column, je.text);
        return NULL;
    }
    if (!json_is_object(j)) {
        json_decref(j);
        serve_bad(e, NULL, "the request body must be a JSON object");
        return NULL;
    }
    return j;
}

static enum MHD_Result dispatch(conn_ctx *c, const char *url, const char *method)
{
    serve_server *s = c->srv;
    serve_error e;
    const route *rt = c->rt;
    if (rt && !strcmp(method, "OPTIONS") && s->opts.cors_origin) {
        /* A CORS preflight: browsers send it without credentials, so it
         * is answered before auth and says only what may be asked. */
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (!r)
            return MHD_NO;
        add_common_headers(c, r);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", allowed_methods(c));
        MHD_add_response_header(r, "Access-Control-Allow-Headers", CORS_ALLOW_HEADERS);
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
        MHD_add_response_header(r, "Allow", allowed_methods(c));
        enum MHD_Result ret = MHD_queue_response(c->conn, 204, r);
        MHD_destroy_response(r);
        c->answered = 1;
        c->status = 204;
        serve_metrics_request(s->metrics, c->endpoint, 204);
        return ret;
    }
    /* HEAD is GET without the body, which libmicrohttpd leaves out. */
    int head_ok = !strcmp(method, "HEAD") && rt && !strcmp(rt->method, "GET");
    if (rt && strcmp(method, rt->method) && !head_ok) {
        serve_fail(&e, 405, "invalid_request_error", "method_not_allowed", NULL,
                   "%s %s: use %s", method, rt->path, allowed_methods(c));
        return send_error(c, &e);
    }
    if (rt && rt->id == R_ROOT) /* a reachability probe (agents send HEAD /) */
        return send_json(c, 200, json_pack("{s:s}", "status", "ok"), 0);
    if (rt && rt->id == R_HEALTH) {
        int ready = atomic_load(&s->ready);
        return send_json(c, 200, json_pack("{s:s}", "status", ready ? "ok" : "loading"), 0);
    }
    if (rt && rt->id == R_READYZ) {
        const char *st = !atomic_load(&s->ready) ? "loading"
                         : atomic_load(&s->draining) ? "draining" : "ready";
        return send_json(c, strcmp(st, "ready") ? 503 : 200, json_pack("{s:s}", "status", st), 0);
    }
    char tenant[128];
    if (!serve_auth_check(s->opts.auth, presented_key(c->conn), tenant, sizeof tenant)) {
        int given = presented_key(c->conn) != NULL;
        serve_fail(&e, 401, "invalid_request_error", "invalid_api_key", NULL,
                   given ? "Incorrect API key provided"
                         : "Missing API key: send Authorization: Bearer KEY or x-api-key: KEY");
        return send_error(c, &e);
    }
    if (!rt) {
        serve_fail(&e, 404, "invalid_request_error", "not_found", NULL,
                   "no endpoint %s %s", method, url);
        return send_error(c, &e);
    }
    if (c->too_large) {
        serve_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                   "the request body is larger than %zu bytes", s->opts.max_body);
        return send_error(c, &e);
    }
    if (!atomic_load(&s->ready)) {
        serve_fail(&e, 503, "server_error", "model_loading", NULL, "the models are loading");
        e.retry_after = 1;
        return send_error(c, &e);
    }
    if (atomic_load(&s->draining) && rt->id != R_METRICS) {
        serve_fail(&e, 503, "server_error", "server_draining",
                   NULL, "the server is shutting down and takes no new requests");
        return send_error(c, &e);
    }
    if (tenant[0])
        log_debug("%s %s (tenant %s)", method, url, tenant);
    /* One tenant's cached prompts never shorten another's prefill (a
     * timing side channel): the namespace is the tenant the key file
     * names, else the key itself; without keys, everyone is one tenant. */
    {
        const char *key = presented_key(c->conn);
        c->cache_ns = tenant[0] ? hash_fnv1a64_str(tenant) ^ 0x7465
                      : key     ? hash_fnv1a64_str(key) ^ 0x6b6579
                                : 0;
    }
    if (rt->id == R_METRICS) {
        strbuf out;
        sb_init(&out);
        pthread_rwlock_rdlock(&s->models_lock);
        serve_route_metrics(s, &out);
        pthread_rwlock_unlock(&s->models_lock);
        enum MHD_Result r =
            send_buf(c, 200, "text/plain; version=0.0.4; charset=utf-8", sb_str(&out), out.len, 0);
        sb_free(&out);
        return r;
    }
    int status = 0;
    json_t *res = NULL;
    if (rt->id == R_MODELS || rt->id == R_MODEL_ONE) {
        pthread_rwlock_rdlock(&s->models_lock);
        res = serve_route_models(s, rt->id == R_MODEL_ONE ? url + strlen(rt->path) : NULL,
                                 &status);
        pthread_rwlock_unlock(&s->models_lock);
        return send_json(c, status, res, 0);
    }
    if (rt->id == R_RESPONSE_ONE || rt->id == R_RESPONSE_DELETE) {
        res = serve_responses_stored(url + strlen(rt->path), rt->id == R_RESPONSE_DELETE, tenant,
                                     presented_key(c->conn), &status);
        return send_json(c, status, res, 0);
    }
    json_t *body = parse_body(c, &e);
    if (!body)
        return send_error(c, &e);
    enum MHD_Result ret;
    if (rt->id == R_CHAT || rt->id == R_COMPLETIONS || rt->id == R_MESSAGES ||
        rt->id == R_RESPONSES) {
        ret = generate(c, rt->id == R_COMPLETIONS ? SERVE_COMPLETION : SERVE_CHAT, rt->dialect,
                       body, tenant);
    } else if (rt->id == R_EMBEDDINGS || rt->id == R_RERANK) {
        ret = pool_inputs(c, body);
    } else if (rt->id == R_COUNT_TOKENS) {
        pthread_rwlock_rdlock(&s->models_lock);
        res = serve_anthropic_count_tokens(s, body, &status);
        pthread_rwlock_unlock(&s->models_lock);
        ret = send_json(c, status, res, 0);
    } else {
        pthread_rwlock_rdlock(&s->models_lock);
        res = rt->id == R_TOKENIZE     ? serve_route_tokenize(s, body, &status)
              : rt->id == R_DETOKENIZE ? serve_route_detokenize(s, body, &status)
                                       : serve_route_apply_template(s, body, &status);
        pthread_rwlock_unlock(&s->models_lock);
        ret = send_json(c, status, res, 0);
    }
    json_decref(body);
    return ret;
}

/* Framing two readers could disagree on is refused, and the connection
 * closed after the answer, so nothing a proxy in front read as one request
 * can become two here (request smuggling): several Content-Length headers,
 * or Content-Length beside Transfer-Encoding (RFC 9112 6.3). */
typedef struct {
    int n_cl, n_te;
    const char *cl;
    int cl_differ;
} framing;

static enum MHD_Result count_framing(void *cls, enum MHD_ValueKind kind, const char *key,
                                     const char *value)
{
    (void)kind;
    framing *f = cls;
    if (!strcasecmp(key, "Content-Length")) {
        if (f->cl && strcmp(f->cl, value ? value : ""))
            f->cl_differ = 1;
        f->cl = value ? value : "";
        f->n_cl++;
    } else if (!strcasecmp(key, "Transfer-Encoding")) {
        f->n_te++;
    }
    return MHD_YES;
}

/* The request line and headers get limits of our own, below the memory
 * libmicrohttpd gives a connection (SERVE_CONN_MEMORY), so that a long URI
 * or a pile of headers is refused here with the JSON error body; only
 * what overflows that memory is refused by the library itself (its own
 * HTML body). */
#define SERVE_MAX_URI (8u << 10)
#define SERVE_MAX_HEADERS (32u << 10)
#define SERVE_CONN_MEMORY ((size_t)96 << 10)

static enum MHD_Result sum_sizes(void *cls, enum MHD_ValueKind kind, const char *key,
                                 const char *value)
{
    (void)kind;
    *(size_t *)cls += strlen(key) + (value ? strlen(value) : 0) + 4; /* ": ", "\r\n" or "&=" */
    return MHD_YES;
}

static int check_sizes(struct MHD_Connection *conn, const char *url, serve_error *e)
{
    size_t uri = strlen(url), hdr = 0;
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, sum_sizes, &uri);
    if (uri > SERVE_MAX_URI)
        return serve_fail(e, 414, "invalid_request_error", "uri_too_long", NULL,
                          "the request URI is about %zu bytes, more than %u", uri, SERVE_MAX_URI);
    MHD_get_connection_values(conn, MHD_HEADER_KIND, sum_sizes, &hdr);
    if (hdr > SERVE_MAX_HEADERS)
        return serve_fail(e, 431, "invalid_request_error", "headers_too_large", NULL,
                          "the request headers are about %zu bytes, more than %u", hdr,
                          SERVE_MAX_HEADERS);
    return 0;
}

static int check_framing(struct MHD_Connection *conn, serve_error *e)
{
    framing f = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, count_framing, &f);
    if (f.n_cl > 1)
        return serve_bad(e, NULL, "%d Content-Length headers%s: send one", f.n_cl,
                         f.cl_differ ? " that differ" : "");
    if (f.n_cl && f.n_te)
        return serve_bad(e, NULL, "Content-Length and Transfer-Encoding together: send one");
    return 0;
}

/* The client's X-Request-Id when it is one short token of safe characters
 * (it goes into a header and the log), else a fresh random one. */
static void request_id(serve_server *s, struct MHD_Connection *conn, char *out, size_t cap)
{
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "X-Request-Id");
    size_t n = h ? strlen(h) : 0;
    int sane = n > 0 && n <= 64;
    for (size_t i = 0; sane && i < n; i++)
        sane = strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:+=/@",
                      h[i]) != NULL;
    if (sane) {
        snprintf(out, cap, "%s", h);
        return;
    }
    uint64_t x = s->rid_seed + 0x9e3779b97f4a7c15ull * (atomic_fetch_add(&s->next_id, 1) + 1);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull; /* splitmix64: unique per request, unguessable */
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    snprintf(out, cap, "req-%016llx", (unsigned long long)x);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    (void)version;
    serve_server *s = cls;
    conn_ctx *c = *con_cls;
    if (!c) {
        c = xcalloc(1, sizeof *c);
        c->srv = s;
        c->conn = conn;
        c->rt = find_route(url, method);
        c->endpoint = c->rt ? c->rt->path : "other";
        if (c->rt && c->rt->id == R_MODEL_ONE)
            c->endpoint = "/v1/models/{id}";
        if (c->rt && (c->rt->id == R_RESPONSE_ONE || c->rt->id == R_RESPONSE_DELETE))
            c->endpoint = "/v1/responses/{id}";
        sb_init(&c->body);
        c->t0 = clock_now_s();
        snprintf(c->line, sizeof c->line, "%s %s", method, url);
        for (char *p = c->line; *p; p++) /* the log stays one line of printable text */
            if ((unsigned char)*p < 0x20 || (unsigned char)*p == 0x7f)
                *p = '?';
        *con_cls = c;
        atomic_fetch_add(&s->inflight, 1);
        request_id(s, conn, c->rid, sizeof c->rid);
        /* Each request starts on the short clock again, after a
         * generation on this keep-alive connection set the long one. */
        MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, s->opts.idle_timeout);
        serve_error fe;
        if (check_sizes(conn, url, &fe) != 0) {
            c->close_after = 1;
            return send_error(c, &fe);
        }
        if (check_framing(conn, &fe) != 0) {
            c->close_after = 1; /* the next bytes cannot be trusted to be a request */
            return send_error(c, &fe);
        }
        /* A declared body over the limit is refused before it is read. */
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl) {
            char *end;
            unsigned long long n = strtoull(cl, &end, 10);
            if (*end == '\0' && n > s->opts.max_body) {
                c->too_large = 1;
                serve_error e;
                serve_fail(&e, 413, "invalid_request_error", "request_too_large", NULL,
                           "the request body is larger than %zu bytes", s->opts.max_body);
                return send_error(c, &e);
            }
        }
        return MHD_YES;
    }
    if (c->answered) { /* e.g. the early 413: the rest of the body is dropped */
        *upload_size = 0;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!c->too_large) {
            if (c->body.len + *upload_size > s->opts.max_body) {
                c->too_large = 1;
                sb_free(&c->body);
                sb_init(&c->body);
            } else {
                sb_append(&c->body, upload_data, *upload_size);
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (c->has_job)
        return poll_blocking(c); /* resumed by the engine */
    return dispatch(c, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    serve_server *s = cls;
    conn_ctx *c = *con_cls;
    if (!c)
        return;
    log_info("%s -> %d%s (%.1f ms, %s)", c->line, c->status,
             toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : ", connection lost",
             (clock_now_s() - c->t0) * 1e3, c->rid);
    /* Back on the short clock while the connection idles between
     * keep-alive requests (a generation set the long one). */
    MHD_set_connection_option(conn, MHD_CONNECTION_OPTION_TIMEOUT, s->opts.idle_timeout);
    if (c->has_job) {
        serve_req_cancel(c->job.req); /* a no-op for a request already over */
        serve_job_clear(&c->job);
    }
    sb_free(&c->body);
    free(c);
    *con_cls = NULL;
    atomic_fetch_sub(&s->inflight, 1);
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[512];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    log_debug("http: %s", line);
}

/* ---- the server ------------------------------------------------------- */

int serve_resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len,
                  memra_err *err)
{
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0)
        return memra_fail(err, "cannot resolve host '%s': %s", host, gai_strerror(rc));
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

int serve_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a))
            return 1;
        if (IN6_IS_ADDR_V4MAPPED(a))
            return a->s6_addr[12] == 127;
    }
    return 0;
}

int serve_start(const serve_opts *o, serve_server **out, memra_err *err)
{
    *out = NULL;
    struct sockaddr_storage ss;
    socklen_t len;
    if (serve_resolve(o->host, o->port, &ss, &len, err) != 0)
        return -1;
    serve_server *s = xcalloc(1, sizeof *s);
    s->opts = *o;
    if (!s->opts.idle_timeout)
        s->opts.idle_timeout = 5;
    if (!s->opts.conn_timeout)
        s->opts.conn_timeout = 120;
    s->metrics = serve_metrics_new();
    pthread_rwlock_init(&s->models_lock, NULL);
    if (getrandom(&s->rid_seed, sizeof s->rid_seed, 0) != (ssize_t)sizeof s->rid_seed)
        s->rid_seed = (uint64_t)(clock_now_s() * 1e9) ^ (uint64_t)(uintptr_t)s;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (ss.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    s->daemon = MHD_start_daemon(
        flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(o->http_threads > 0 ? o->http_threads : 4),
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_CONNECTION_TIMEOUT,
        s->opts.idle_timeout, MHD_OPTION_CONNECTION_LIMIT, 4096u,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->max_conns_per_ip,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, SERVE_CONN_MEMORY, MHD_OPTION_EXTERNAL_LOGGER,
        on_log, NULL, MHD_OPTION_END);
    if (!s->daemon) {
        pthread_rwlock_destroy(&s->models_lock);
        serve_metrics_free(s->metrics);
        free(s);
        return memra_fail(err, "cannot listen on %s port %d (in use, or no permission?)", o->host,
                          o->port);
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    *out = s;
    return 0;
}

int serve_port(const serve_server *s) { return s->port; }

serve_model *serve_find_model(serve_server *s, const char *alias)
{
    for (int i = 0; i < s->n_models; i++)
        if (!strcmp(serve_model_alias(s->models[i]), alias))
            return s->models[i];
    return NULL;
}

void serve_set_models(serve_server *s, serve_model **models, int n)
{
    pthread_rwlock_wrlock(&s->models_lock);
    s->models = models;
    s->n_models = n;
    pthread_rwlock_unlock(&s->models_lock);
}

void serve_set_ready(serve_server *s) { atomic_store(&s->ready, 1); }
void serve_drain(serve_server *s) { atomic_store(&s->draining, 1); }
long serve_inflight(serve_server *s) { return atomic_load(&s->inflight); }

void serve_detach_models(serve_server *s)
{
    atomic_store(&s->draining, 1);
    serve_set_models(s, NULL, 0);
}

void serve_stop(serve_server *s)
{
    if (!s)
        return;
    MHD_stop_daemon(s->daemon);
    pthread_rwlock_destroy(&s->models_lock);
    serve_metrics_free(s->metrics);
    free(s);
}
