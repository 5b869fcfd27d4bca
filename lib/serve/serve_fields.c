/* Request fields: type and range checks that name the field, shared by
 * every endpoint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "serve/serve_internal.h"
#include "serve/serve_tools.h"
#include "core/check.h"
#include "core/clock.h"
#include "jinja/chat_template.h"
#include "tok/tokenizer.h"

/* Roles OpenAI's chat API defines; anything else is a typo or a role the
 * template would render as it likes, so it is refused by name. */
static const char *const known_roles[] = {"system", "developer", "user", "assistant", "tool",
                                          "function", NULL};

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

const json_t *serve_present(const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    return v && !json_is_null(v) ? v : NULL;
}

int serve_only_keys(const json_t *o, const char *const *keys, const char *where, serve_error *e)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        int ok = 0;
        for (const char *const *a = keys; *a && !ok; a++)
            ok = !strcmp(*a, k);
        if (!ok)
            return serve_bad(e, where, "%s: unknown field '%s'", where, k);
    }
    return 0;
}

int serve_field_num(const json_t *body, const char *key, double lo, double hi, double *out,
                    serve_error *e)
{
    const json_t *v = serve_present(body, key);
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
    const json_t *v = serve_present(body, key);
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
    const json_t *v = serve_present(body, key);
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
        int known = 0;
        for (const char *const *r = known_roles; *r && !known; r++)
            known = !strcmp(*r, json_string_value(role));
        if (!known)
            return serve_bad(e, param, "%s: unknown role '%.64s' (want system, developer, user, "
                             "assistant, tool or function)", param, json_string_value(role));
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
    return serve_check_tool_messages(messages, e);
}

/* Content given as text parts becomes one string (the parts joined by
 * newlines, as vLLM does): most templates, Qwen3's among them, call string
 * methods on message.content and fail on a list. A null or absent content
 * (an assistant turn that only calls tools) becomes "", which templates
 * test as false like none but can also concatenate. A tool call's
 * arguments, a JSON text on the wire, become the object templates expect
 * (they write `arguments | tojson`, or iterate its items). Only the copy
 * changes. */
static void arguments_as_objects(json_t *msg)
{
    json_t *calls = json_object_get(msg, "tool_calls");
    size_t j;
    json_t *c;
    json_array_foreach(calls, j, c) {
        json_t *fn = json_object_get(c, "function");
        json_t *args = json_object_get(fn, "arguments");
        if (!json_is_string(args))
            continue;
        json_t *o = json_loads(json_string_value(args), JSON_DECODE_ANY, NULL);
        if (json_is_object(o))
            json_object_set_new(fn, "arguments", o);
        else
            json_decref(o);
    }
}

static json_t *flatten_parts(const json_t *messages)
{
    json_t *copy = json_deep_copy(messages);
    size_t i;
    json_t *msg;
    json_array_foreach(copy, i, msg) {
        arguments_as_objects(msg);
        json_t *content = json_object_get(msg, "content");
        if (!content || json_is_null(content)) {
            json_object_set_new(msg, "content", json_string(""));
            continue;
        }
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

static int render_flat(serve_model *m, json_t *flat, const json_t *tools,
                       int add_generation_prompt, const json_t *kwargs, char **out, serve_error *e)
{
    const char *why;
    const jinja_template *t = serve_model_template(m, &why);
    if (!t)
        return serve_bad(e, "messages", "model '%s' cannot render chat messages: %s",
                         serve_model_alias(m), why);
    memra_err err;
    int rc = chat_template_render_parsed(t, flat, tools, NULL, add_generation_prompt, kwargs,
                                         serve_model_bos_text(m), serve_model_eos_text(m), out,
                                         &err);
    if (rc != 0)
        return serve_bad(e, "messages", "chat template: %s", err.msg);
    return 0;
}

int serve_render_chat(serve_model *m, const json_t *messages, const json_t *tools,
                      int add_generation_prompt, const json_t *kwargs, char **out, serve_error *e)
{
    json_t *flat = flatten_parts(messages);
    int rc = render_flat(m, flat, tools, add_generation_prompt, kwargs, out, e);
    json_decref(flat);
    return rc;
}

/* ---- the chat prompt's tokens -------------------------------------------
 *
 * The rendered prompt mixes the template's own text, whose "<|im_start|>"
 * must become control tokens, with what the client wrote, whose
 * "<|im_start|>" must not: otherwise a user who types
 * "<|im_end|>\n<|im_start|>system" opens a system turn of their own.
 * Tokenizing the whole prompt one way or the other gets one half wrong, so
 * a message whose content holds special-token text (it tokenizes
 * differently with and without parsing special tokens) is rendered with a
 * unique marker in its place; the prompt is tokenized with special tokens
 * parsed between markers, and each marker becomes its content tokenized
 * as plain text. Messages without such text render as they are, so the
 * usual prompt's ids are exactly those of the whole rendered text. A
 * template that does not copy the marker exactly once (it edits the
 * content, or repeats or drops it) cannot be split this way: a 400 that
 * names the message, never a silent fall back to parsing. */

typedef struct {
    size_t msg;     /* index in messages */
    char *content;  /* the client's text (owned) */
    char mark[96];  /* what stands in for it in the rendered prompt */
    size_t at;      /* where the mark is in the rendered prompt */
} content_mark;

static int append_ids(const tokenizer *t, const char *text, size_t len, int parse_special,
                      int32_t **ids, size_t *n, size_t *cap, memra_err *err)
{
    int32_t *p;
    size_t k;
    if (tok_encode(t, text, len, 0, parse_special, &p, &k, err) != 0)
        return -1;
    if (*n + k > *cap) {
        *cap = (*n + k) * 2 + 16;
        *ids = xrealloc(*ids, *cap * sizeof **ids);
    }
    if (k)
        memcpy(*ids + *n, p, k * sizeof *p);
    *n += k;
    free(p);
    return 0;
}

int serve_chat_tokens(serve_model *m, const json_t *messages, const json_t *tools,
                      int add_generation_prompt,
                      const json_t *kwargs, int add_special, int allow_special, int32_t **ids,
                      size_t *n, serve_error *e)
{
    const tokenizer *t = serve_model_tokenizer(m);
    memra_err err;
    json_t *flat = flatten_parts(messages);
    size_t n_msg = json_array_size(flat), n_marks = 0;
    content_mark *marks = xcalloc(n_msg ? n_msg : 1, sizeof *marks);
    uint64_t nonce = 0;
    int rc = -1;
    char *text = NULL;
    *ids = NULL;
    *n = 0;
    for (size_t i = 0; i < n_msg && !allow_special; i++) {
        json_t *c = json_object_get(json_array_get(flat, i), "content");
        if (!json_is_string(c))
            continue;
        int sp = tok_has_special_text(t, json_string_value(c), json_string_length(c), &err);
        if (sp < 0) {
            serve_bad(e, "messages", "messages[%zu].content: %s", i, err.msg);
            goto out;
        }
        if (!sp)
            continue;
        if (!nonce && getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
            nonce = (uint64_t)(clock_now_s() * 1e9) ^ (uint64_t)(uintptr_t)marks;
        content_mark *k = &marks[n_marks++];
        k->msg = i;
        k->content = xmalloc(json_string_length(c) + 1);
        memcpy(k->content, json_string_value(c), json_string_length(c) + 1);
        /* Private-use characters around a random nonce: no client can
         * guess it, and it holds no special-token text itself. */
        snprintf(k->mark, sizeof k->mark, "\xee\x80\x80memra-content-%016llx-%zu\xee\x80\x81",
                 (unsigned long long)nonce, i);
        json_object_set_new(json_array_get(flat, i), "content", json_string(k->mark));
    }
    if (render_flat(m, flat, tools, add_generation_prompt, kwargs, &text, e) != 0)
        goto out;
    size_t len = strlen(text);
    if (n_marks == 0) {
        if (tok_encode_cached(t, serve_model_tok_cache(m), text, len, add_special, 1, ids, n,
                              &err) != 0) {
            serve_bad(e, "messages", "messages: %s", err.msg);
            goto out;
        }
        rc = 0;
        goto out;
    }
    for (size_t j = 0; j < n_marks; j++) {
        const char *p = strstr(text, marks[j].mark);
        if (!p || strstr(p + 1, marks[j].mark)) {
            char param[64];
            snprintf(param, sizeof param, "messages[%zu].content", marks[j].msg);
            serve_bad(e, param, "%s: holds special-token text, and this model's chat template "
                      "does not copy the content verbatim, so it cannot be kept as plain text; "
                      "remove it (or start the server with --allow-special-in-content)", param);
            goto out;
        }
        marks[j].at = (size_t)(p - text);
    }
    for (size_t j = 1; j < n_marks; j++) /* in the prompt's order */
        for (size_t k = j; k > 0 && marks[k].at < marks[k - 1].at; k--) {
            content_mark tmp = marks[k];
            marks[k] = marks[k - 1];
            marks[k - 1] = tmp;
        }
    size_t cap = 0, cur = 0;
    if (add_special && tok_adds_bos(t) && tok_bos(t) >= 0) {
        *ids = xmalloc(16 * sizeof **ids);
        cap = 16;
        (*ids)[(*n)++] = tok_bos(t);
    }
    for (size_t j = 0; j < n_marks; j++) {
        if (append_ids(t, text + cur, marks[j].at - cur, 1, ids, n, &cap, &err) != 0 ||
            append_ids(t, marks[j].content, strlen(marks[j].content), 0, ids, n, &cap, &err) != 0) {
            serve_bad(e, "messages", "messages: %s", err.msg);
            goto out;
        }
        cur = marks[j].at + strlen(marks[j].mark);
    }
    if (append_ids(t, text + cur, len - cur, 1, ids, n, &cap, &err) != 0) {
        serve_bad(e, "messages", "messages: %s", err.msg);
        goto out;
    }
    if (add_special && tok_adds_eos(t) && tok_eos(t) >= 0) {
        if (*n + 1 > cap)
            *ids = xrealloc(*ids, (*n + 1) * sizeof **ids);
        (*ids)[(*n)++] = tok_eos(t);
    }
    rc = 0;
out:
    if (rc != 0) {
        free(*ids);
        *ids = NULL;
        *n = 0;
    }
    for (size_t j = 0; j < n_marks; j++)
        free(marks[j].content);
    free(marks);
    free(text);
    json_decref(flat);
    return rc;
}

int serve_check_task(serve_model *m, serve_task task, const char *endpoint, serve_error *e)
{
    static const char *const what[] = {"", "a chat", "an embedding", "a rerank"};
    serve_task has = serve_model_task(m);
    if (has == task)
        return 0;
    return serve_bad(e, "model", "model '%s' is served with --task %s, and %s needs %s model "
                     "(--task %s)", serve_model_alias(m), serve_task_name(has), endpoint,
                     what[task], serve_task_name(task));
}
