/* The Anthropic Messages API: POST /v1/messages and
 * /v1/messages/count_tokens, on the engine the OpenAI surface uses.
 *
 * A request is checked field by field (names as Anthropic spells them),
 * then translated into an OpenAI chat body and prepared as one, so tools,
 * forced tool calls, reasoning and structured output work the same way
 * (docs/SERVING.md, Anthropic Messages). The reply always goes through the
 * tool-call parser and is written as content blocks, in Anthropic's order:
 * thinking, text, tool_use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "core/check.h"
#include "serve/serve_internal.h"
#include "serve/serve_tools.h"

/* ---- errors ---------------------------------------------------------- */

/* {"type": "error", "error": {"type", "message"}}, the type following the
 * status as Anthropic's documentation lists them. */
static json_t *error_json(const serve_error *e)
{
    const char *type = e->status == 401   ? "authentication_error"
                       : e->status == 403 ? "permission_error"
                       : e->status == 404 ? "not_found_error"
                       : e->status == 413 ? "request_too_large"
                       : e->status == 429 ? "rate_limit_error"
                       : e->status == 503 || e->status == 529 ? "overloaded_error"
                       : e->status >= 500 ? "api_error"
                                          : "invalid_request_error";
    return json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type", type, "message",
                     e->message);
}

/* ---- the request ------------------------------------------------------ */

static const char *block_type(const json_t *b)
{
    return json_string_value(json_object_get(b, "type"));
}

/* Text blocks (system, tool_result content) joined by newlines; other
 * blocks are refused by name. */
static int join_text(const json_t *v, const char *where, strbuf *out, serve_error *e)
{
    if (json_is_string(v)) {
        sb_append(out, json_string_value(v), json_string_length(v));
        return 0;
    }
    if (!json_is_array(v))
        return serve_bad(e, where, "%s: must be a string or an array of text blocks", where);
    size_t i;
    json_t *b;
    json_array_foreach(v, i, b) {
        const char *t = json_is_object(b) ? block_type(b) : NULL;
        if (!t)
            return serve_bad(e, where, "%s[%zu]: must be a content block with a type", where, i);
        if (!strcmp(t, "image") || !strcmp(t, "document"))
            return serve_bad(e, where, "%s[%zu]: %s blocks are not supported (this server reads "
                             "text only)", where, i, t);
        if (strcmp(t, "text") || !json_is_string(json_object_get(b, "text")))
            return serve_bad(e, where, "%s[%zu]: a '%s' block is not supported here (text only)",
                             where, i, t);
        if (i)
            sb_putc(out, '\n');
        sb_puts(out, json_string_value(json_object_get(b, "text")));
    }
    return 0;
}

/* One Anthropic message to OpenAI messages appended to `out`: a user's
 * tool_result blocks become tool messages (before its text, as the
 * results answer the previous turn's calls), an assistant's tool_use
 * blocks its tool_calls and its thinking blocks its reasoning_content. */
static int translate_message(const json_t *m, size_t i, json_t *out, serve_error *e)
{
    char where[64];
    snprintf(where, sizeof where, "messages[%zu]", i);
    if (!json_is_object(m))
        return serve_bad(e, where, "%s: must be an object", where);
    static const char *const keys[] = {"role", "content", NULL};
    if (serve_only_keys(m, keys, where, e) != 0)
        return -1;
    const char *role = json_string_value(json_object_get(m, "role"));
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant")))
        return serve_bad(e, where, "%s.role: must be \"user\", \"assistant\" or \"system\"", where);
    int user = role[0] == 'u';
    const json_t *content = json_object_get(m, "content");
    if (json_is_string(content)) {
        json_array_append_new(out, json_pack("{s:s,s:O}", "role", role, "content", content));
        return 0;
    }
    snprintf(where, sizeof where, "messages[%zu].content", i);
    if (!json_is_array(content))
        return serve_bad(e, where, "%s: must be a string or an array of content blocks", where);
    strbuf text, thought;
    sb_init(&text);
    sb_init(&thought);
    json_t *calls = json_array();
    int rc = 0;
    size_t j;
    json_t *b;
    json_array_foreach(content, j, b) {
        char bw[96];
        snprintf(bw, sizeof bw, "messages[%zu].content[%zu]", i, j);
        const char *t = json_is_object(b) ? block_type(b) : NULL;
        if (!t) {
            rc = serve_bad(e, bw, "%s: must be a content block with a type", bw);
            break;
        }
        if (!strcmp(t, "text")) {
            const json_t *tx = json_object_get(b, "text");
            if (!json_is_string(tx)) {
                rc = serve_bad(e, bw, "%s.text: required, a string", bw);
                break;
            }
            if (text.len)
                sb_putc(&text, '\n');
            sb_append(&text, json_string_value(tx), json_string_length(tx));
        } else if (!strcmp(t, "tool_result") && user) {
            const json_t *id = json_object_get(b, "tool_use_id"), *c = serve_present(b, "content");
            if (!json_is_string(id)) {
                rc = serve_bad(e, bw, "%s.tool_use_id: required, a string", bw);
                break;
            }
            strbuf res;
            sb_init(&res);
            char cw[112];
            snprintf(cw, sizeof cw, "%s.content", bw);
            if (c && join_text(c, cw, &res, e) != 0) {
                sb_free(&res);
                rc = -1;
                break;
            }
            const json_t *err = serve_present(b, "is_error");
            if (err && !json_is_boolean(err)) {
                sb_free(&res);
                rc = serve_bad(e, bw, "%s.is_error: must be true or false", bw);
                break;
            }
            /* the template sees the result as text; an error says so */
            json_t *tm = json_pack("{s:s,s:O,s:s%}", "role", "tool", "tool_call_id", id,
                                   "content", sb_str(&res), res.len);
            if (json_is_true(err)) {
                strbuf x;
                sb_init(&x);
                sb_printf(&x, "Error: %s", sb_str(&res));
                json_object_set_new(tm, "content", json_stringn(sb_str(&x), x.len));
                sb_free(&x);
            }
            sb_free(&res);
            if (!json_object_get(tm, "content")) { /* not UTF-8 */
                json_decref(tm);
                rc = serve_bad(e, bw, "%s.content: not valid UTF-8", bw);
                break;
            }
            json_array_append_new(out, tm);
        } else if (!strcmp(t, "tool_use") && !user) {
            const json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name");
            const json_t *input = json_object_get(b, "input");
            if (!json_is_string(id) || !json_is_string(name) || !json_is_object(input)) {
                rc = serve_bad(e, bw, "%s: a tool_use block needs id, name and an input object",
                               bw);
                break;
            }
            char *args = json_dumps(input, JSON_COMPACT | JSON_PRESERVE_ORDER);
            json_array_append_new(calls, json_pack("{s:O,s:s,s:{s:O,s:s}}", "id", id, "type",
                                                   "function", "function", "name", name,
                                                   "arguments", args));
            free(args);
        } else if (!strcmp(t, "thinking") && !user) {
            const json_t *th = json_object_get(b, "thinking");
            if (!json_is_string(th)) {
                rc = serve_bad(e, bw, "%s.thinking: required, a string", bw);
                break;
            }
            sb_append(&thought, json_string_value(th), json_string_length(th));
        } else if (!strcmp(t, "redacted_thinking") && !user) {
            /* another model's encrypted thought: nothing a template can show */
        } else if (!strcmp(t, "image") || !strcmp(t, "document")) {
            rc = serve_bad(e, bw, "%s: %s blocks are not supported (this server reads text only)",
                           bw, t);
            break;
        } else {
            rc = serve_bad(e, bw, "%s: a '%s' block is not supported in a%s %s message", bw, t,
                           user ? "" : "n", role);
            break;
        }
    }
    if (rc == 0 && (text.len || json_array_size(calls) || thought.len || !user)) {
        json_t *msg = json_pack("{s:s,s:s%}", "role", role, "content", sb_str(&text), text.len);
        if (json_array_size(calls))
            json_object_set(msg, "tool_calls", calls);
        if (thought.len)
            json_object_set_new(msg, "reasoning_content",
                                json_stringn(sb_str(&thought), thought.len));
        json_array_append_new(out, msg);
    }
    json_decref(calls);
    sb_free(&text);
    sb_free(&thought);
    return rc;
}

static int translate_tools(const json_t *body, json_t *chat, serve_error *e)
{
    const json_t *tools = serve_present(body, "tools"), *choice = serve_present(body, "tool_choice");
    if (tools) {
        if (!json_is_array(tools))
            return serve_bad(e, "tools", "tools: must be an array");
        json_t *out = json_array();
        size_t i;
        json_t *t;
        json_array_foreach(tools, i, t) {
            char w[48];
            snprintf(w, sizeof w, "tools[%zu]", i);
            /* defer_loading (tool search: the tool is found by a search
             * tool, not shown up front) leaves it out of the prompt;
             * eager_input_streaming, input_examples and allowed_callers
             * shape how Anthropic's service streams or calls it, which
             * changes nothing here. */
            static const char *const keys[] = {"name", "description", "input_schema", "strict",
                                               "cache_control", "type", "defer_loading",
                                               "eager_input_streaming", "input_examples",
                                               "allowed_callers", NULL};
            if (!json_is_object(t) || serve_only_keys(t, keys, w, e) != 0) {
                json_decref(out);
                return json_is_object(t) ? -1 : serve_bad(e, w, "%s: must be an object", w);
            }
            const json_t *type = serve_present(t, "type");
            if (type && !(json_is_string(type) && !strcmp(json_string_value(type), "custom"))) {
                json_decref(out);
                return serve_bad(e, w, "%s: tool type '%s' is not supported (only custom tools "
                                 "with an input_schema)", w,
                                 json_is_string(type) ? json_string_value(type) : "?");
            }
            const json_t *dl = serve_present(t, "defer_loading");
            if (dl && !json_is_boolean(dl)) {
                json_decref(out);
                return serve_bad(e, w, "%s.defer_loading: must be true or false", w);
            }
            if (json_is_true(dl))
                continue;
            const json_t *schema = json_object_get(t, "input_schema");
            if (!json_is_object(schema)) {
                json_decref(out);
                return serve_bad(e, w, "%s.input_schema: required, a JSON Schema object", w);
            }
            json_t *fn = json_pack("{s:O,s:O}", "name", json_object_get(t, "name"), "parameters",
                                   schema);
            if (!fn) {
                json_decref(out);
                return serve_bad(e, w, "%s.name: required, a string", w);
            }
            if (serve_present(t, "description"))
                json_object_set(fn, "description", json_object_get(t, "description"));
            if (serve_present(t, "strict"))
                json_object_set(fn, "strict", json_object_get(t, "strict"));
            json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
        }
        if (json_array_size(out))
            json_object_set_new(chat, "tools", out);
        else
            json_decref(out); /* every tool deferred */
    }
    if (!choice)
        return 0;
    const char *type = json_is_object(choice) ? json_string_value(json_object_get(choice, "type"))
                                              : NULL;
    static const char *const keys[] = {"type", "name", "disable_parallel_tool_use", NULL};
    if (!type)
        return serve_bad(e, "tool_choice", "tool_choice: must be an object with a type");
    if (serve_only_keys(choice, keys, "tool_choice", e) != 0)
        return -1;
    const json_t *dp = serve_present(choice, "disable_parallel_tool_use");
    if (dp && !json_is_boolean(dp))
        return serve_bad(e, "tool_choice", "tool_choice.disable_parallel_tool_use: must be true "
                                           "or false");
    if (json_is_true(dp))
        json_object_set_new(chat, "parallel_tool_calls", json_false());
    int shown = json_object_get(chat, "tools") != NULL; /* some tool not deferred */
    if (!strcmp(type, "auto") || !strcmp(type, "none")) {
        if (shown) /* with every tool deferred there is nothing to choose among */
            json_object_set_new(chat, "tool_choice", json_string(type));
    } else if (!strcmp(type, "any") || !strcmp(type, "tool")) {
        if (!shown && tools)
            return serve_bad(e, "tool_choice", "tool_choice: '%s' needs a tool that is not "
                             "defer_loading", type);
        const json_t *name = json_object_get(choice, "name");
        if (type[0] == 't' && !json_is_string(name))
            return serve_bad(e, "tool_choice", "tool_choice.name: required with type \"tool\"");
        json_object_set_new(chat, "tool_choice",
                            type[0] == 'a' ? json_string("required")
                                           : json_pack("{s:s,s:{s:O}}", "type", "function",
                                                       "function", "name", name));
    } else {
        return serve_bad(e, "tool_choice", "tool_choice.type: '%s' is not auto, any, tool or none",
                         type);
    }
    if (!tools && strcmp(type, "none"))
        return serve_bad(e, "tool_choice", "tool_choice: needs tools");
    return 0;
}

/* thinking and output_config: the template's enable_thinking (Qwen3's
 * switch; off unless asked, as Anthropic's default is) and
 * reasoning_effort; a JSON schema format through the grammar engine. */
static int translate_thinking(const json_t *body, json_t *chat, serve_error *e)
{
    const json_t *th = serve_present(body, "thinking"), *oc = serve_present(body, "output_config");
    int think = 0;
    if (th) {
        /* display (summarized / omitted) says how Anthropic's service
         * shows a thought; this server's thoughts are the model's own. */
        static const char *const keys[] = {"type", "budget_tokens", "display", NULL};
        const char *type = json_is_object(th) ? json_string_value(json_object_get(th, "type"))
                                              : NULL;
        if (!type || serve_only_keys(th, keys, "thinking", e) != 0)
            return type ? -1 : serve_bad(e, "thinking", "thinking: must be an object with a type");
        if (strcmp(type, "enabled") && strcmp(type, "disabled") && strcmp(type, "adaptive"))
            return serve_bad(e, "thinking", "thinking.type: '%s' is not enabled, disabled or "
                                            "adaptive", type);
        const json_t *b = serve_present(th, "budget_tokens");
        if (b && !(json_is_integer(b) && json_integer_value(b) >= 1))
            return serve_bad(e, "thinking", "thinking.budget_tokens: must be a positive integer");
        think = strcmp(type, "disabled") != 0;
    }
    json_object_set_new(chat, "chat_template_kwargs",
                        json_pack("{s:b}", "enable_thinking", think));
    if (!oc)
        return 0;
    static const char *const keys[] = {"effort", "format", NULL};
    if (!json_is_object(oc))
        return serve_bad(e, "output_config", "output_config: must be an object");
    if (serve_only_keys(oc, keys, "output_config", e) != 0)
        return -1;
    const json_t *effort = serve_present(oc, "effort");
    if (effort) {
        const char *v = json_string_value(effort);
        if (!v || (strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high") &&
                   strcmp(v, "xhigh") && strcmp(v, "max")))
            return serve_bad(e, "output_config", "output_config.effort: must be low, medium, high, "
                                                 "xhigh or max");
        int top = !strcmp(v, "max") || !strcmp(v, "xhigh"); /* OpenAI's scale ends at high */
        json_object_set_new(chat, "reasoning_effort", json_string(top ? "high" : v));
    }
    const json_t *fmt = serve_present(oc, "format");
    if (fmt) {
        const char *type = json_is_object(fmt) ? json_string_value(json_object_get(fmt, "type"))
                                               : NULL;
        const json_t *schema = json_is_object(fmt) ? json_object_get(fmt, "schema") : NULL;
        if (!type || strcmp(type, "json_schema") || !json_is_object(schema))
            return serve_bad(e, "output_config", "output_config.format: must be {\"type\": "
                                                 "\"json_schema\", \"schema\": {...}}");
        json_object_set_new(chat, "response_format",
                            json_pack("{s:s,s:{s:s,s:O}}", "type", "json_schema", "json_schema",
                                      "name", "output", "schema", schema));
    }
    return 0;
}

static const char *const message_fields[] = {
    "model", "max_tokens", "messages", "system", "stop_sequences", "stream", "temperature",
    "top_p", "top_k", "tools", "tool_choice", "thinking", "metadata", "service_tier",
    "output_config", "context_management", NULL,
};

/* The fields count_tokens and messages share, translated; max_tokens and
 * the sampling fields only for messages. */
static json_t *translate_common(const json_t *body, int generation, serve_error *e)
{
    const json_t *model = json_object_get(body, "model");
    if (!json_is_string(model)) {
        serve_bad(e, "model", "model: required, a string");
        return NULL;
    }
    const json_t *msgs = json_object_get(body, "messages");
    if (!json_is_array(msgs) || json_array_size(msgs) == 0) {
        serve_bad(e, "messages", "messages: required, a non-empty array");
        return NULL;
    }
    json_t *chat = json_pack("{s:O}", "model", model), *out = json_array();
    json_object_set_new(chat, "messages", out);
    strbuf sys;
    sb_init(&sys);
    const json_t *system = serve_present(body, "system");
    if (system && join_text(system, "system", &sys, e) != 0)
        goto fail;
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        /* A system message inside the conversation (Claude Code sends its
         * environment so) joins the system prompt: not every template
         * renders a system turn anywhere but first, and one that does
         * would see the same instructions. */
        const char *role = json_is_object(m) ? json_string_value(json_object_get(m, "role"))
                                             : NULL;
        if (role && !strcmp(role, "system")) {
            static const char *const keys[] = {"role", "content", NULL};
            char where[64];
            snprintf(where, sizeof where, "messages[%zu]", i);
            if (serve_only_keys(m, keys, where, e) != 0)
                goto fail;
            snprintf(where, sizeof where, "messages[%zu].content", i);
            if (sys.len)
                sb_puts(&sys, "\n\n");
            if (join_text(json_object_get(m, "content"), where, &sys, e) != 0)
                goto fail;
            continue;
        }
        if (translate_message(m, i, out, e) != 0)
            goto fail;
        /* Anthropic continues a final assistant turn (prefill); a chat
         * template can only close it and open another, which would answer
         * a different question, so it is refused rather than misread. */
        if (role && !strcmp(role, "assistant") && i + 1 == json_array_size(msgs)) {
            serve_bad(e, "messages", "messages[%zu]: a final assistant message (prefill) is not "
                      "supported: end with a user message", i);
            goto fail;
        }
    }
    if (system || sys.len) {
        json_t *sm = json_pack("{s:s,s:s%}", "role", "system", "content", sb_str(&sys), sys.len);
        if (!sm) {
            serve_bad(e, "system", "system: not valid UTF-8");
            goto fail;
        }
        json_array_insert_new(out, 0, sm);
    }
    sb_free(&sys);
    if (translate_tools(body, chat, e) != 0 || translate_thinking(body, chat, e) != 0) {
        json_decref(chat);
        return NULL;
    }
    (void)generation;
    return chat;
fail:
    sb_free(&sys);
    json_decref(chat);
    return NULL;
}

static json_t *translate(serve_server *s, const json_t *body, serve_prepare_opts *opts,
                         serve_error *e)
{
    (void)s;
    if (serve_check_fields(body, message_fields, e) != 0)
        return NULL;
    const json_t *mt = json_object_get(body, "max_tokens");
    if (!json_is_integer(mt) || json_integer_value(mt) < 1) {
        serve_bad(e, "max_tokens", "max_tokens: required, an integer >= 1");
        return NULL;
    }
    const json_t *v;
    if ((v = serve_present(body, "temperature")) &&
        !(json_is_number(v) && json_number_value(v) >= 0 && json_number_value(v) <= 1)) {
        serve_bad(e, "temperature", "temperature: must be a number in [0, 1]");
        return NULL;
    }
    if ((v = serve_present(body, "metadata"))) {
        static const char *const keys[] = {"user_id", NULL};
        if (!json_is_object(v) || serve_only_keys(v, keys, "metadata", e) != 0) {
            if (!json_is_object(v))
                serve_bad(e, "metadata", "metadata: must be an object");
            return NULL;
        }
    }
    if ((v = serve_present(body, "service_tier")) &&
        !(json_is_string(v) && (!strcmp(json_string_value(v), "auto") ||
                                !strcmp(json_string_value(v), "standard_only")))) {
        serve_bad(e, "service_tier", "service_tier: must be auto or standard_only");
        return NULL;
    }
    if ((v = serve_present(body, "context_management")) && !json_is_object(v)) {
        serve_bad(e, "context_management", "context_management: must be an object");
        return NULL;
    }
    json_t *chat = translate_common(body, 1, e);
    if (!chat)
        return NULL;
    json_object_set(chat, "max_tokens", (json_t *)mt);
    static const char *const copied[] = {"temperature", "top_p", "top_k", "stream", NULL};
    for (const char *const *k = copied; *k; k++)
        if ((v = serve_present(body, *k)))
            json_object_set(chat, *k, (json_t *)v);
    if ((v = serve_present(body, "stop_sequences"))) {
        if (!json_is_array(v)) {
            json_decref(chat);
            serve_bad(e, "stop_sequences", "stop_sequences: must be an array of strings");
            return NULL;
        }
        json_object_set(chat, "stop", (json_t *)v);
    }
    opts->clamp_max_tokens = 1; /* Claude Code asks for 32,000 whatever the model */
    opts->always_parse = 1;
    return chat;
}

json_t *serve_anthropic_count_tokens(serve_server *s, const json_t *body, int *status)
{
    static const char *const fields[] = {"model", "messages", "system", "tools", "tool_choice",
                                         "thinking", "output_config", "context_management",
                                         NULL};
    serve_error e;
    serve_model *m;
    json_t *chat = NULL;
    int32_t *ids = NULL;
    size_t n = 0;
    serve_tools tools;
    if (serve_check_fields(body, fields, &e) != 0 || serve_field_model(s, body, &m, &e) != 0 ||
        !(chat = translate_common(body, 0, &e)) || serve_tools_parse(chat, &tools, &e) != 0 ||
        serve_check_messages(json_object_get(chat, "messages"), &e) != 0 ||
        serve_chat_tokens(m, json_object_get(chat, "messages"), tools.tools, 1,
                          json_object_get(chat, "chat_template_kwargs"), 0,
                          s->opts.allow_special_in_content, &ids, &n, &e) != 0) {
        json_decref(chat);
        *status = e.status;
        return error_json(&e);
    }
    json_decref(chat);
    free(ids);
    *status = 200;
    return json_pack("{s:I}", "input_tokens", (json_int_t)n);
}

/* ---- the response ----------------------------------------------------- */

/* What a stream keeps between calls. */
typedef struct {
    char id[40];      /* msg_... */
    int block;        /* the open content block's index, -1: none */
    int block_kind;   /* its kind: a toolparse_event_kind (CONTENT, REASONING, CALL_START) */
    int n_blocks;
    int n_calls;
    long long max_tokens; /* as asked, before any clamp */
    /* tool_choice any or tool: the grammar lets the model write calls
     * only, so any text the parser leaves is a call max_tokens cut before
     * it closed, markup rather than prose; it is not shown. */
    int forced;
    strbuf *out;      /* where events go during a feed */
    serve_job *job;
} msg_state;

static void random_id(char *out, size_t cap, const char *prefix)
{
    static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char r[24];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        for (size_t i = 0; i < sizeof r; i++)
            r[i] = (unsigned char)(rand() & 0xff);
    size_t n = (size_t)snprintf(out, cap, "%s", prefix);
    for (size_t i = 0; i < sizeof r && n + 1 < cap; i++)
        out[n++] = abc[r[i] % 62];
    out[n] = '\0';
}

/* call_XXXX (the parser's) -> toolu_XXXX (Anthropic's spelling). */
static json_t *tool_use_id(const char *call_id)
{
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "toolu_%s", strncmp(call_id, "call_", 5) ? call_id : call_id + 5);
    json_t *j = json_string(sb_str(&sb));
    sb_free(&sb);
    return j;
}

/* A length stop short of the max_tokens asked for is the context filling
 * up (the request was clamped to it): Anthropic names that
 * model_context_window_exceeded, and agents treat it as a finished turn
 * where max_tokens would be an error. */
static const char *stop_reason(const serve_job *job, const serve_req_view *v, int has_calls)
{
    const msg_state *st = job->ext;
    if (v->choice_finish[0] == SERVE_FINISH_LENGTH)
        return (long long)v->n_generated < st->max_tokens ? "model_context_window_exceeded"
                                                          : "max_tokens";
    if (has_calls)
        return "tool_use";
    return v->choice_stop[0] ? "stop_sequence" : "end_turn";
}

static json_t *stop_sequence(const serve_job *job, const serve_req_view *v)
{
    int k = v->choice_stop[0];
    return k > 0 && (size_t)k <= job->req->n_stop ? json_string(job->req->stop[k - 1])
                                                  : json_null();
}

/* Anthropic counts the prompt in parts: input_tokens are those computed,
 * cache_read_input_tokens those read from the prefix cache (known once the
 * engine has started the request: 0 in message_start). */
static json_t *usage(const serve_job *job, size_t out_tokens, size_t cached)
{
    size_t n = job->req->n_prompt;
    if (cached > n)
        cached = n;
    return json_pack("{s:I,s:I,s:i,s:I}", "input_tokens", (json_int_t)(n - cached),
                     "output_tokens", (json_int_t)out_tokens, "cache_creation_input_tokens", 0,
                     "cache_read_input_tokens", (json_int_t)cached);
}

static json_t *message_shell(const serve_job *job, const char *id)
{
    return json_pack("{s:s,s:s,s:s,s:s}", "id", id, "type", "message", "role", "assistant",
                     "model", job->model_name);
}

static json_t *response(serve_job *job, const serve_req_view *v)
{
    msg_state *st = job->ext;
    toolparse_result res;
    serve_choice *c = &job->got[0];
    toolparse_feed(job->tp[0], sb_str(&c->text), c->text.len, NULL, NULL);
    toolparse_finish(job->tp[0], NULL, NULL, &res);
    json_t *content = json_array();
    if (res.reasoning[0])
        json_array_append_new(content, json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking",
                                                 res.reasoning, "signature", ""));
    if (res.content[0] && !st->forced)
        json_array_append_new(content, json_pack("{s:s,s:s}", "type", "text", "text",
                                                 res.content));
    for (int i = 0; i < res.n_calls; i++) {
        json_t *input = json_loads(res.calls[i].arguments, 0, NULL);
        json_array_append_new(content, json_pack("{s:s,s:o,s:s,s:o}", "type", "tool_use", "id",
                                                 tool_use_id(res.calls[i].id), "name",
                                                 res.calls[i].name, "input",
                                                 input ? input : json_object()));
    }
    json_t *msg = message_shell(job, st->id);
    json_object_set_new(msg, "content", content);
    json_object_set_new(msg, "stop_reason", json_string(stop_reason(job, v, res.n_calls > 0)));
    json_object_set_new(msg, "stop_sequence", stop_sequence(job, v));
    json_object_set_new(msg, "usage", usage(job, v->n_generated, v->n_cached));
    toolparse_result_free(&res);
    return msg;
}

static void event(strbuf *out, const char *name, json_t *data)
{
    char *s = json_dumps(data, JSON_COMPACT | JSON_PRESERVE_ORDER);
    sb_printf(out, "event: %s\ndata: %s\n\n", name, s);
    free(s);
    json_decref(data);
}

static void close_block(msg_state *st)
{
    if (st->block < 0)
        return;
    if (st->block_kind == TOOLPARSE_EV_REASONING) /* the SDKs read a signature before the stop */
        event(st->out, "content_block_delta",
              json_pack("{s:s,s:i,s:{s:s,s:s}}", "type", "content_block_delta", "index",
                        st->block, "delta", "type", "signature_delta", "signature", ""));
    event(st->out, "content_block_stop",
          json_pack("{s:s,s:i}", "type", "content_block_stop", "index", st->block));
    st->block = -1;
}

static void open_block(msg_state *st, int kind, json_t *block)
{
    close_block(st);
    st->block = st->n_blocks++;
    st->block_kind = kind;
    event(st->out, "content_block_start",
          json_pack("{s:s,s:i,s:o}", "type", "content_block_start", "index", st->block,
                    "content_block", block));
}

static void on_event(void *user, const toolparse_event *ev)
{
    msg_state *st = user;
    switch (ev->kind) {
    case TOOLPARSE_EV_CONTENT:
    case TOOLPARSE_EV_REASONING: {
        int think = ev->kind == TOOLPARSE_EV_REASONING;
        if (!think && st->forced)
            return;
        json_t *piece = json_stringn(ev->text, ev->len);
        if (!piece)
            return; /* the parser passes whole UTF-8 only */
        if (st->block < 0 || st->block_kind != (int)ev->kind)
            open_block(st, ev->kind,
                       think ? json_pack("{s:s,s:s,s:s}", "type", "thinking", "thinking", "",
                                         "signature", "")
                             : json_pack("{s:s,s:s}", "type", "text", "text", ""));
        event(st->out, "content_block_delta",
              json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index",
                        st->block, "delta", "type", think ? "thinking_delta" : "text_delta",
                        think ? "thinking" : "text", piece));
        break;
    }
    case TOOLPARSE_EV_CALL_START:
        st->n_calls++;
        open_block(st, TOOLPARSE_EV_CALL_START,
                   json_pack("{s:s,s:o,s:s,s:{}}", "type", "tool_use", "id", tool_use_id(ev->id),
                             "name", ev->name, "input"));
        break;
    case TOOLPARSE_EV_CALL_ARGS: {
        json_t *piece = json_stringn(ev->text, ev->len);
        if (piece)
            event(st->out, "content_block_delta",
                  json_pack("{s:s,s:i,s:{s:s,s:o}}", "type", "content_block_delta", "index",
                            st->block, "delta", "type", "input_json_delta", "partial_json",
                            piece));
        break;
    }
    case TOOLPARSE_EV_CALL_END:
        close_block(st);
        break;
    }
}

static void sse_start(serve_job *job, strbuf *out)
{
    msg_state *st = job->ext;
    job->sent_role = 1;
    json_t *msg = message_shell(job, st->id);
    json_object_set_new(msg, "content", json_array());
    json_object_set_new(msg, "stop_reason", json_null());
    json_object_set_new(msg, "stop_sequence", json_null());
    json_object_set_new(msg, "usage", usage(job, 0, 0));
    event(out, "message_start", json_pack("{s:s,s:o}", "type", "message_start", "message", msg));
}

static int sse_update(serve_job *job, strbuf *out, const serve_req_view *v)
{
    msg_state *st = job->ext;
    size_t len0 = out->len;
    st->out = out;
    serve_job_parse_pending(job, 0, on_event, st);
    if (v->finish == SERVE_FINISH_NONE)
        return out->len > len0;
    if (v->finish == SERVE_FINISH_ERROR) {
        serve_error e;
        serve_fail(&e, 500, "server_error", NULL, NULL, "%s", v->error);
        event(out, "error", error_json(&e));
        return 1;
    }
    toolparse_result res;
    toolparse_finish(job->tp[0], on_event, st, &res);
    toolparse_result_free(&res);
    close_block(st);
    event(out, "message_delta",
          json_pack("{s:s,s:{s:s,s:o},s:o}", "type", "message_delta", "delta", "stop_reason",
                    stop_reason(job, v, st->n_calls > 0), "stop_sequence", stop_sequence(job, v),
                    "usage", usage(job, v->n_generated, v->n_cached)));
    event(out, "message_stop", json_pack("{s:s}", "type", "message_stop"));
    return 1;
}

static int begin(serve_server *s, serve_job *job, const json_t *body, serve_error *e)
{
    (void)s;
    (void)e;
    msg_state *st = xcalloc(1, sizeof *st);
    st->max_tokens = json_integer_value(json_object_get(body, "max_tokens"));
    const char *choice = json_string_value(json_object_get(json_object_get(body, "tool_choice"),
                                                           "type"));
    st->forced = choice && (!strcmp(choice, "any") || !strcmp(choice, "tool"));
    random_id(st->id, sizeof st->id, "msg_");
    st->block = -1;
    st->job = job;
    job->ext = st;
    job->ext_free = free;
    return 0;
}

const serve_dialect serve_dialect_anthropic = {
    .error_json = error_json,
    .translate = translate,
    .begin = begin,
    .response = response,
    .sse_start = sse_start,
    .sse_update = sse_update,
    .keepalive = "event: ping\ndata: {\"type\":\"ping\"}\n\n",
};
