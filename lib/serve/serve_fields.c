/* Request fields: type and range checks that name the field, shared by
 * every endpoint. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "serve/serve_internal.h"
#include "jinja/chat_template.h"

int serve_check_fields(const json_t *body, const char *const *allowed, serve_error *e)
{
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v) {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++)
            ok = !strcmp(*a, key);
        if (!ok)
            return serve_bad(e, key, "unknown field '%s' (this endpoint does not support it)",
                             key);
    }
    return 0;
}

static const json_t *present(const json_t *body, const char *key)
{
    const json_t *v = json_object_get(body, key);
    return v && !json_is_null(v) ? v : NULL;
}

int serve_field_num(const json_t *body, const char *key, double lo, double hi, double *out,
                    serve_error *e)
{
    const json_t *v = present(body, key);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return serve_bad(e, key, "%s: must be a number", key);
    double d = json_number_value(v);
    if (!isfinite(d) || d < lo || d > hi)
        return serve_bad(e, key, "%s: %g is out of range [%g, %g]", key, d, lo, hi);
    *out = d;
    return 0;
}

int serve_field_int(const json_t *body, const char *key, int64_t lo, int64_t hi, int64_t *out,
                    serve_error *e)
{
    const json_t *v = present(body, key);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return serve_bad(e, key, "%s: must be an integer", key);
    json_int_t i = json_integer_value(v);
    if (i < lo || i > hi)
        return serve_bad(e, key, "%s: %lld is out of range [%lld, %lld]", key, (long long)i,
                         (long long)lo, (long long)hi);
    *out = i;
    return 0;
}

int serve_field_bool(const json_t *body, const char *key, int *out, serve_error *e)
{
    const json_t *v = present(body, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v))
        return serve_bad(e, key, "%s: must be true or false", key);
    *out = json_is_true(v);
    return 0;
}

int serve_field_model(serve_server *s, const json_t *body, serve_model **out, serve_error *e)
{
    const json_t *v = json_object_get(body, "model");
    if (!v || json_is_null(v))
        return serve_bad(e, "model", "model: required (one of the served aliases; GET /v1/models)");
    if (!json_is_string(v))
        return serve_bad(e, "model", "model: must be a string");
    *out = serve_find_model(s, json_string_value(v));
    if (!*out)
        return serve_fail(e, 404, "invalid_request_error", "model_not_found", "model",
                          "The model '%s' does not exist (GET /v1/models lists the served ones)",
                          json_string_value(v));
    return 0;
}

int serve_check_messages(const json_t *messages, serve_error *e)
{
    char param[96];
    if (!messages || json_is_null(messages))
        return serve_bad(e, "messages", "messages: required");
    if (!json_is_array(messages))
        return serve_bad(e, "messages", "messages: must be an array of message objects");
    if (json_array_size(messages) == 0)
        return serve_bad(e, "messages", "messages: must not be empty");
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg) {
        snprintf(param, sizeof param, "messages[%zu]", i);
        if (!json_is_object(msg))
            return serve_bad(e, param, "%s: must be an object", param);
        const json_t *role = json_object_get(msg, "role");
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_string(role))
            return serve_bad(e, param, "%s: required, a string", param);
        const json_t *content = json_object_get(msg, "content");
        snprintf(param, sizeof param, "messages[%zu].content", i);
        if (!content || json_is_null(content) || json_is_string(content))
            continue;
        if (!json_is_array(content))
            return serve_bad(e, param, "%s: must be a string, an array of parts or null", param);
        size_t j;
        json_t *part;
        json_array_foreach(content, j, part) {
            snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, j);
            if (!json_is_object(part))
                return serve_bad(e, param, "%s: must be an object", param);
            const json_t *type = json_object_get(part, "type");
            snprintf(param, sizeof param, "messages[%zu].content[%zu].type", i, j);
            if (!json_is_string(type))
                return serve_bad(e, param, "%s: required, a string", param);
            if (strcmp(json_string_value(type), "text"))
                return serve_bad(e, param, "%s: '%s' parts are not supported (text only)",
                                 param, json_string_value(type));
            snprintf(param, sizeof param, "messages[%zu].content[%zu].text", i, j);
            if (!json_is_string(json_object_get(part, "text")))
                return serve_bad(e, param, "%s: required, a string", param);
        }
    }
    return 0;
}

/* Content given as text parts becomes one string (the parts joined by
 * newlines, as vLLM does): most templates, Qwen3's among them, call string
 * methods on message.content and fail on a list. Only the copy changes. */
static json_t *flatten_parts(const json_t *messages)
{
    json_t *copy = json_deep_copy(messages);
    size_t i;
    json_t *msg;
    json_array_foreach(copy, i, msg) {
        json_t *content = json_object_get(msg, "content");
        if (!json_is_array(content))
            continue;
        strbuf sb;
        sb_init(&sb);
        size_t j;
        json_t *part;
        json_array_foreach(content, j, part) {
            const json_t *text = json_object_get(part, "text");
            if (j)
                sb_putc(&sb, '\n');
            sb_append(&sb, json_string_value(text), json_string_length(text));
        }
        json_object_set_new(msg, "content", json_stringn(sb_str(&sb), sb.len));
        sb_free(&sb);
    }
    return copy;
}

int serve_render_chat(serve_model *m, const json_t *messages, int add_generation_prompt,
                      const json_t *kwargs, char **out, serve_error *e)
{
    const char *why;
    const jinja_template *t = serve_model_template(m, &why);
    if (!t)
        return serve_bad(e, "messages", "model '%s' cannot render chat messages: %s",
                         serve_model_alias(m), why);
    memra_err err;
    json_t *flat = flatten_parts(messages);
    int rc = chat_template_render_parsed(t, flat, NULL, NULL, add_generation_prompt, kwargs,
                                         serve_model_bos_text(m), serve_model_eos_text(m), out,
                                         &err);
    json_decref(flat);
    if (rc != 0)
        return serve_bad(e, "messages", "chat template: %s", err.msg);
    return 0;
}
