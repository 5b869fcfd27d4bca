/* Errors as OpenAI shapes them: an HTTP status and
 *   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
 * One line of message that names the field (param) when a field is at
 * fault; nothing the server cannot honour is silently ignored. */
#ifndef MEMRA_SERVE_SERVE_ERROR_H
#define MEMRA_SERVE_SERVE_ERROR_H

#include <jansson.h>

typedef struct {
    int status;          /* HTTP status */
    const char *type;    /* "invalid_request_error", "authentication_error", ... */
    const char *code;    /* NULL or "model_not_found", "context_length_exceeded", ... */
    char param[160];     /* the field at fault, "" when none */
    char message[1024];
    int retry_after;     /* seconds for a Retry-After header; 0: none */
} serve_error;

/* Fill e; returns -1 so a parser can `return serve_fail(...)`. */
int serve_fail(serve_error *e, int status, const char *type, const char *code, const char *param,
               const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* 400 invalid_request_error naming param. */
int serve_bad(serve_error *e, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

json_t *serve_error_json(const serve_error *e);

#endif
