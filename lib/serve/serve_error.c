#include "serve/serve_error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static void set_message(serve_error *e, const char *fmt, va_list ap)
{
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    for (char *p = e->message; *p; p++) /* one line */
        if (*p == '\n' || *p == '\r')
            *p = ' ';
}

int serve_fail(serve_error *e, int status, const char *type, const char *code, const char *param,
               const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    e->retry_after = 0;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    set_message(e, fmt, ap);
    va_end(ap);
    return -1;
}

int serve_bad(serve_error *e, const char *param, const char *fmt, ...)
{
    e->status = 400;
    e->type = "invalid_request_error";
    e->code = NULL;
    e->retry_after = 0;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    set_message(e, fmt, ap);
    va_end(ap);
    return -1;
}

json_t *serve_error_json(const serve_error *e)
{
    json_t *err = json_object();
    json_object_set_new(err, "message", json_string(e->message));
    json_object_set_new(err, "type", json_string(e->type ? e->type : "server_error"));
    json_object_set_new(err, "param", e->param[0] ? json_string(e->param) : json_null());
    json_object_set_new(err, "code", e->code ? json_string(e->code) : json_null());
    json_t *root = json_object();
    json_object_set_new(root, "error", err);
    return root;
}
