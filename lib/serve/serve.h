/* memra-serve's server: HTTP through libmicrohttpd (a thread pool over
 * epoll), JSON through jansson, one engine thread per model.
 *
 * HTTP threads parse, validate, render chat templates, tokenize and hand
 * requests to a model (serve_model_submit); they never run the engine.
 * Streams and blocking requests wait with their connection suspended and
 * are resumed by the engine thread when there is something to send, so no
 * HTTP thread ever blocks on generation.
 *
 * Lifecycle: start (the listener answers /health "loading" at once), add
 * the models, mark ready; on SIGTERM drain (readyz and new requests 503,
 * in-flight requests go on), wait for them, stop. */
#ifndef MEMRA_SERVE_SERVE_H
#define MEMRA_SERVE_SERVE_H

#include <stddef.h>
#include <sys/socket.h>

#include "core/err.h"
#include "serve/serve_auth.h"
#include "serve/serve_model.h"

typedef struct {
    const char *host;    /* an address or a name; "127.0.0.1" */
    int port;            /* 0: any free port (serve_server_port says which) */
    int http_threads;    /* libmicrohttpd's pool */
    size_t max_body;     /* bytes; a larger body is a 413 */
    unsigned idle_timeout; /* seconds a connection may sit idle or half-sent
                              before it is closed (headers, body, keep-alive) */
    unsigned conn_timeout; /* the same once a generation answers: a stream
                              stalled by a client that does not read */
    unsigned max_conns_per_ip; /* 0: no cap */
    const char *cors_origin;   /* NULL: no CORS headers at all */
    int allow_special_in_content; /* message text may produce control tokens */
    serve_auth *auth;    /* owned by the caller, outlives the server */
} serve_opts;

typedef struct serve_server serve_server;

/* host (a name or an address) and port to a socket address. */
int serve_resolve(const char *host, int port, struct sockaddr_storage *ss, socklen_t *len,
                  memra_err *err);
int serve_is_loopback(const struct sockaddr *sa);

int serve_start(const serve_opts *o, serve_server **out, memra_err *err);
int serve_port(const serve_server *s);
/* The models (owned by the caller, outliving the server); then ready. */
void serve_set_models(serve_server *s, serve_model **models, int n);
void serve_set_ready(serve_server *s);
/* Take the models away (waiting for the HTTP threads that use one), so
 * they can be freed; requests from now on answer 503. */
void serve_detach_models(serve_server *s);
/* From now on readyz and new requests answer 503. */
void serve_drain(serve_server *s);
/* Generation requests not yet answered in full. */
long serve_inflight(serve_server *s);
/* Stop listening and free; the models must have been detached and freed
 * first, so every request has ended and no connection is left suspended. */
void serve_stop(serve_server *s);

#endif
