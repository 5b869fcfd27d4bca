/* The OpenAI Responses API: POST /v1/responses, and GET / DELETE
 * /v1/responses/{id} for what was stored, on the engine the chat surface
 * uses.
 *
 * A request's input (a string, or items: messages, function calls, their
 * outputs, reasoning) is translated into an OpenAI chat body and prepared
 * as one, so tools, forced tool calls, reasoning and structured output work
 * the same way (docs/SERVING.md, OpenAI Responses). The reply always goes
 * through the tool-call parser, whose events drive one state machine of
 * output items (reasoning, message, function_call): a stream writes its
 * events as the items open, grow and close, a blocking request runs the
 * same machine silently and returns the items, so both give the same
 * output. Errors are OpenAI's shape, the default. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "core/check.h"
#include "core/log.h"
#include "serve/serve_internal.h"
#include "serve/serve_responses_store.h"

static int one_of(const json_t *v, const char *const *names)
{
    if (!json_is_string(v))
        return 0;
    for (; *names; names++)
        if (!strcmp(*names, json_string_value(v)))
            return 1;
    return 0;
}

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

/* ---- what a request keeps (job->ext) ----------------------------------- */

enum { IT_NONE, IT_REASONING, IT_MESSAGE, IT_CALL };

typedef struct {
    json_t *body;   /* the request, echoed in the response object */
    json_t *items;  /* the conversation: a previous response's items, then this input */
    json_t *tools;  /* the function tools, echoed */
    uint64_t scope; /* whose store entries it may read and write */
    int store;
    char id[64];    /* resp_... */
    long long created;
    /* The reply as output items. */
    json_t *output;  /* the closed items */
    int open;        /* the open item's kind, IT_NONE: none */
    char item_id[64];
    char call_id[96], call_name[96];
    strbuf text;     /* the open item's text or arguments so far */
    strbuf held;     /* content of whitespace alone, shown only when text follows */
    int seq;         /* the next sequence_number */
    strbuf *out;     /* where events go during a feed; NULL: nowhere (a blocking reply) */
} resp_state;

static void state_free(void *p)
{
    resp_state *st = p;
    if (!st)
        return;
    json_decref(st->body);
    json_decref(st->items);
    json_decref(st->tools);
    json_decref(st->output);
    sb_free(&st->text);
    sb_free(&st->held);
    free(st);
}

/* ---- the request ------------------------------------------------------- */

static const char *const request_fields[] = {
    "model", "input", "instructions", "tools", "tool_choice", "parallel_tool_calls", "text",
    "reasoning", "max_output_tokens", "temperature", "top_p", "stream", "store",
    "previous_response_id", "include", "prompt_cache_key", "metadata", "user", "truncation",
    "service_tier",
    /* accepted where they ask for nothing this server would do differently */
    "background", "safety_identifier", "stream_options", "top_logprobs",
    "prompt_cache_retention", "client_metadata", NULL,
};

/* Text parts (input_text, output_text, refusal) joined by newlines; a
 * string as it is. Images, files and audio are refused by name. */
static int content_text(const json_t *c, const char *where, strbuf *out, serve_error *e)
{
    if (json_is_string(c)) {
        sb_append(out, json_string_value(c), json_string_length(c));
        return 0;
    }
    if (!json_is_array(c))
        return serve_bad(e, where, "%s: must be a string or an array of content parts", where);
    size_t i;
    json_t *p;
    json_array_foreach(c, i, p) {
        const char *t = json_is_object(p) ? json_string_value(json_object_get(p, "type")) : NULL;
        if (!t)
            return serve_bad(e, where, "%s[%zu]: must be a content part with a type", where, i);
        if (!strcmp(t, "input_image") || !strcmp(t, "input_file") || !strcmp(t, "input_audio"))
            return serve_bad(e, where, "%s[%zu]: %s parts are not supported (this server reads "
                             "text only)", where, i, t);
        const char *key = !strcmp(t, "refusal") ? "refusal" : "text";
        const json_t *tx = json_object_get(p, key);
        if ((strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "refusal")) ||
            !json_is_string(tx))
            return serve_bad(e, where, "%s[%zu]: want an input_text or output_text part with "
                             "its text (got '%s')", where, i, t);
        if (i)
            sb_putc(out, '\n');
        sb_append(out, json_string_value(tx), json_string_length(tx));
    }
    return 0;
}

/* Items to chat messages. An assistant's turn may come as several items
 * (reasoning, a message, function calls): they are gathered into one
 * assistant message until an item of another role comes. Leading system
 * and developer messages join the instructions as the first system
 * message, since templates want one system message and want it first. */
typedef struct {
    json_t *messages;
    strbuf sys;         /* instructions and the leading system messages */
    int past_leading;   /* a non-system item has come */
    int asst;           /* an assistant turn is being gathered */
    strbuf text, thought;
    json_t *calls;
} conv;

static void flush_assistant(conv *cv)
{
    if (cv->asst && (cv->text.len || json_array_size(cv->calls))) {
        json_t *m = json_pack("{s:s,s:s%}", "role", "assistant", "content", sb_str(&cv->text),
                              cv->text.len);
        if (json_array_size(cv->calls))
            json_object_set(m, "tool_calls", cv->calls);
        if (cv->thought.len)
            json_object_set_new(m, "reasoning_content",
                                json_stringn(sb_str(&cv->thought), cv->thought.len));
        json_array_append_new(cv->messages, m);
    }
    /* reasoning with neither text nor calls after it has no message to join */
    cv->asst = 0;
    sb_clear(&cv->text);
    sb_clear(&cv->thought);
    json_array_clear(cv->calls);
}

static void start_assistant(conv *cv)
{
    cv->past_leading = 1;
    cv->asst = 1;
}

/* reasoning: its content's reasoning_text, else its summary's text. */
static int reasoning_item(conv *cv, const json_t *it, const char *where, serve_error *e)
{
    static const char *const keys[] = {"type", "id", "summary", "content", "encrypted_content",
                                       "status", NULL};
    if (serve_only_keys(it, keys, where, e) != 0)
        return -1;
    start_assistant(cv);
    const char *lists[] = {"content", "summary"};
    for (int l = 0; l < 2; l++) {
        const json_t *a = serve_present(it, lists[l]);
        if (a && !json_is_array(a))
            return serve_bad(e, where, "%s.%s: must be an array", where, lists[l]);
        size_t n0 = cv->thought.len, i;
        json_t *p;
        json_array_foreach(a, i, p) {
            const json_t *tx = json_is_object(p) ? json_object_get(p, "text") : NULL;
            if (!json_is_string(tx))
                return serve_bad(e, where, "%s.%s[%zu]: must be {\"type\", \"text\"}", where,
                                 lists[l], i);
            if (cv->thought.len)
                sb_putc(&cv->thought, '\n');
            sb_append(&cv->thought, json_string_value(tx), json_string_length(tx));
        }
        if (cv->thought.len > n0)
            break; /* the summary only stands in when there is no content */
    }
    return 0;
}

static int message_item(conv *cv, const json_t *it, const char *where, serve_error *e)
{
    static const char *const keys[] = {"type", "role", "content", "id", "status", "phase", NULL};
    static const char *const roles[] = {"user", "assistant", "system", "developer", NULL};
    if (serve_only_keys(it, keys, where, e) != 0)
        return -1;
    const json_t *role = json_object_get(it, "role");
    if (!one_of(role, roles))
        return serve_bad(e, where, "%s.role: must be user, assistant, system or developer",
                         where);
    const char *r = json_string_value(role);
    char cw[96];
    snprintf(cw, sizeof cw, "%s.content", where);
    const json_t *c = json_object_get(it, "content");
    if (!strcmp(r, "assistant")) {
        start_assistant(cv);
        if (cv->text.len)
            sb_putc(&cv->text, '\n');
        return content_text(c, cw, &cv->text, e);
    }
    flush_assistant(cv);
    strbuf t;
    sb_init(&t);
    int rc = content_text(c, cw, &t, e);
    int sys = r[0] == 's' || r[0] == 'd';
    if (rc == 0 && sys && !cv->past_leading) {
        if (cv->sys.len)
            sb_puts(&cv->sys, "\n\n");
        sb_append(&cv->sys, sb_str(&t), t.len);
    } else if (rc == 0) {
        cv->past_leading = 1;
        json_t *m = json_pack("{s:s,s:s%}", "role", sys ? "system" : "user", "content",
                              sb_str(&t), t.len);
        if (!m)
            rc = serve_bad(e, cw, "%s: not valid UTF-8", cw);
        else
            json_array_append_new(cv->messages, m);
    }
    sb_free(&t);
    return rc;
}

static int call_item(conv *cv, const json_t *it, const char *where, serve_error *e)
{
    static const char *const keys[] = {"type", "id", "call_id", "name", "arguments", "status",
                                       NULL};
    if (serve_only_keys(it, keys, where, e) != 0)
        return -1;
    const json_t *id = json_object_get(it, "call_id"), *name = json_object_get(it, "name");
    const json_t *args = json_object_get(it, "arguments");
    if (!json_is_string(id) || !json_is_string(name) || !json_is_string(args))
        return serve_bad(e, where, "%s: a function_call needs call_id, name and arguments "
                         "(strings)", where);
    start_assistant(cv);
    json_array_append_new(cv->calls, json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", id, "type",
                                               "function", "function", "name", name,
                                               "arguments", args));
    return 0;
}

static int call_output_item(conv *cv, const json_t *it, const char *where, serve_error *e)
{
    static const char *const keys[] = {"type", "id", "call_id", "output", "status", NULL};
    if (serve_only_keys(it, keys, where, e) != 0)
        return -1;
    const json_t *id = json_object_get(it, "call_id");
    if (!json_is_string(id))
        return serve_bad(e, where, "%s.call_id: required, a string", where);
    flush_assistant(cv);
    cv->past_leading = 1;
    strbuf t;
    sb_init(&t);
    char ow[96];
    snprintf(ow, sizeof ow, "%s.output", where);
    int rc = content_text(json_object_get(it, "output"), ow, &t, e);
    if (rc == 0) {
        json_t *m = json_pack("{s:s,s:O,s:s%}", "role", "tool", "tool_call_id", id, "content",
                              sb_str(&t), t.len);
        if (!m)
            rc = serve_bad(e, ow, "%s: not valid UTF-8", ow);
        else
            json_array_append_new(cv->messages, m);
    }
    sb_free(&t);
    return rc;
}

static int translate_items(const json_t *items, const json_t *instructions, json_t *chat,
                           serve_error *e)
{
    conv cv = {.messages = json_array(), .calls = json_array()};
    sb_init(&cv.sys);
    sb_init(&cv.text);
    sb_init(&cv.thought);
    if (instructions)
        sb_append(&cv.sys, json_string_value(instructions), json_string_length(instructions));
    int rc = 0;
    size_t i;
    json_t *it;
    json_array_foreach(items, i, it) {
        char where[48];
        snprintf(where, sizeof where, "input[%zu]", i);
        if (!json_is_object(it)) {
            rc = serve_bad(e, "input", "%s: must be an object (an item)", where);
            break;
        }
        const json_t *tv = json_object_get(it, "type");
        const char *t = json_is_string(tv) ? json_string_value(tv)
                        : !tv && json_object_get(it, "role") ? "message" : NULL;
        if (!t)
            rc = serve_bad(e, "input", "%s: an item needs a type", where);
        else if (!strcmp(t, "message"))
            rc = message_item(&cv, it, where, e);
        else if (!strcmp(t, "function_call"))
            rc = call_item(&cv, it, where, e);
        else if (!strcmp(t, "function_call_output"))
            rc = call_output_item(&cv, it, where, e);
        else if (!strcmp(t, "reasoning"))
            rc = reasoning_item(&cv, it, where, e);
        else
            rc = serve_bad(e, "input", "%s: items of type '%s' are not supported (message, "
                           "function_call, function_call_output and reasoning are)", where, t);
        if (rc != 0)
            break;
    }
    flush_assistant(&cv);
    if (rc == 0 && cv.sys.len) {
        json_t *m = json_pack("{s:s,s:s%}", "role", "system", "content", sb_str(&cv.sys),
                              cv.sys.len);
        if (m)
            json_array_insert_new(cv.messages, 0, m);
        else
            rc = serve_bad(e, "instructions", "instructions: not valid UTF-8");
    }
    if (rc == 0 && json_array_size(cv.messages) == 0)
        rc = serve_bad(e, "input", "input: no messages to answer (the input is empty)");
    if (rc == 0)
        json_object_set(chat, "messages", cv.messages);
    json_decref(cv.messages);
    json_decref(cv.calls);
    sb_free(&cv.sys);
    sb_free(&cv.text);
    sb_free(&cv.thought);
    return rc;
}

/* Flat function tools to chat tools; other types (web_search, namespace,
 * the hosted tools) are skipped: the model is simply not shown them. The
 * function tools are kept for the response's echo. */
static int translate_tools(const json_t *body, json_t *chat, resp_state *st, serve_error *e)
{
    const json_t *tools = serve_present(body, "tools"), *choice = serve_present(body, "tool_choice");
    st->tools = json_array();
    if (tools && !json_is_array(tools))
        return serve_bad(e, "tools", "tools: must be an array");
    json_t *out = json_array();
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t) {
        char w[48];
        snprintf(w, sizeof w, "tools[%zu]", i);
        const char *type = json_is_object(t) ? json_string_value(json_object_get(t, "type"))
                                             : NULL;
        if (!type) {
            json_decref(out);
            return serve_bad(e, "tools", "%s: must be an object with a type", w);
        }
        if (strcmp(type, "function")) {
            log_debug("responses: %s: tool type '%s' skipped (only function tools are shown "
                      "to the model)", w, type);
            continue;
        }
        static const char *const keys[] = {"type", "name", "description", "parameters",
                                           "strict", NULL};
        if (serve_only_keys(t, keys, w, e) != 0) {
            json_decref(out);
            return -1;
        }
        if (!json_is_string(json_object_get(t, "name"))) {
            json_decref(out);
            return serve_bad(e, "tools", "%s.name: required, a string", w);
        }
        json_t *fn = json_pack("{s:O}", "name", json_object_get(t, "name"));
        const json_t *params = serve_present(t, "parameters");
        /* a tool without parameters takes none */
        json_object_set_new(fn, "parameters",
                            params ? json_incref((json_t *)params)
                                   : json_pack("{s:s,s:{}}", "type", "object", "properties"));
        static const char *const copied[] = {"description", "strict", NULL};
        for (const char *const *k = copied; *k; k++)
            if (serve_present(t, *k))
                json_object_set(fn, *k, json_object_get(t, *k));
        json_array_append_new(out, json_pack("{s:s,s:o}", "type", "function", "function", fn));
        json_array_append(st->tools, t);
    }
    int have = json_array_size(out) > 0;
    if (have)
        json_object_set(chat, "tools", out);
    json_decref(out);
    if (!choice)
        return 0;
    if (json_is_string(choice)) {
        static const char *const modes[] = {"none", "auto", "required", NULL};
        if (!one_of(choice, modes))
            return serve_bad(e, "tool_choice", "tool_choice: must be none, auto, required or "
                             "{\"type\": \"function\", \"name\": ...}");
        if (!strcmp(json_string_value(choice), "required") && !have)
            return serve_bad(e, "tool_choice", "tool_choice: \"required\" needs function tools");
        if (have)
            json_object_set(chat, "tool_choice", (json_t *)choice);
        return 0;
    }
    const char *type = json_is_object(choice) ? json_string_value(json_object_get(choice, "type"))
                                              : NULL;
    const json_t *name = json_is_object(choice) ? json_object_get(choice, "name") : NULL;
    if (!type || strcmp(type, "function") || !json_is_string(name))
        return serve_bad(e, "tool_choice", "tool_choice: an object must be {\"type\": "
                         "\"function\", \"name\": ...} (got type '%s')", type ? type : "?");
    static const char *const keys[] = {"type", "name", NULL};
    if (serve_only_keys(choice, keys, "tool_choice", e) != 0)
        return -1;
    if (!have)
        return serve_bad(e, "tool_choice", "tool_choice: names '%s' but there are no function "
                         "tools", json_string_value(name));
    json_object_set_new(chat, "tool_choice",
                        json_pack("{s:s,s:{s:O}}", "type", "function", "function", "name", name));
    return 0;
}

/* text (format, verbosity) and reasoning (effort, summary). */
static int translate_text_reasoning(const json_t *body, json_t *chat, serve_error *e)
{
    const json_t *text = serve_present(body, "text"), *rs = serve_present(body, "reasoning");
    if (text) {
        static const char *const keys[] = {"format", "verbosity", NULL};
        static const char *const verb[] = {"low", "medium", "high", NULL};
        if (!json_is_object(text))
            return serve_bad(e, "text", "text: must be an object");
        if (serve_only_keys(text, keys, "text", e) != 0)
            return -1;
        const json_t *v = serve_present(text, "verbosity");
        if (v && !one_of(v, verb))
            return serve_bad(e, "text.verbosity", "text.verbosity: must be low, medium or high");
        const json_t *f = serve_present(text, "format");
        const char *type = json_is_object(f) ? json_string_value(json_object_get(f, "type"))
                                             : NULL;
        if (f && !type)
            return serve_bad(e, "text.format", "text.format: must be an object with a type");
        if (type && !strcmp(type, "json_schema")) {
            static const char *const fk[] = {"type", "name", "schema", "strict", "description",
                                             NULL};
            if (serve_only_keys(f, fk, "text.format", e) != 0)
                return -1;
            json_t *js = json_deep_copy(f);
            json_object_del(js, "type");
            if (!json_object_get(js, "name"))
                json_object_set_new(js, "name", json_string("output"));
            json_object_set_new(chat, "response_format",
                                json_pack("{s:s,s:o}", "type", "json_schema", "json_schema", js));
        } else if (type && (!strcmp(type, "text") || !strcmp(type, "json_object"))) {
            if (json_object_size(f) != 1)
                return serve_bad(e, "text.format", "text.format: \"%s\" takes no other field",
                                 type);
            json_object_set(chat, "response_format", (json_t *)f);
        } else if (type) {
            return serve_bad(e, "text.format", "text.format.type: '%s' is not text, json_object "
                             "or json_schema", type);
        }
    }
    if (rs) {
        static const char *const keys[] = {"effort", "summary", "generate_summary", NULL};
        static const char *const efforts[] = {"none", "minimal", "low", "medium", "high",
                                              "xhigh", NULL};
        static const char *const summaries[] = {"auto", "concise", "detailed", NULL};
        if (!json_is_object(rs))
            return serve_bad(e, "reasoning", "reasoning: must be an object");
        if (serve_only_keys(rs, keys, "reasoning", e) != 0)
            return -1;
        const json_t *ef = serve_present(rs, "effort");
        if (ef && !one_of(ef, efforts))
            return serve_bad(e, "reasoning.effort", "reasoning.effort: must be none, minimal, "
                             "low, medium, high or xhigh");
        for (int k = 0; k < 2; k++) {
            const char *key = k ? "generate_summary" : "summary";
            const json_t *s = serve_present(rs, key);
            if (s && !one_of(s, summaries))
                return serve_bad(e, "reasoning.summary", "reasoning.%s: must be auto, concise "
                                 "or detailed", key);
        }
        if (ef) {
            const char *v = json_string_value(ef);
            json_object_set_new(chat, "reasoning_effort",
                                json_string(strcmp(v, "xhigh") ? v : "high"));
            /* none: a template with a thinking switch (Qwen3's) turns it off */
            if (!strcmp(v, "none"))
                json_object_set_new(chat, "chat_template_kwargs",
                                    json_pack("{s:b}", "enable_thinking", 0));
        }
    }
    return 0;
}

/* The fields that change nothing here, each checked for its type. */
static int check_accepted(const json_t *body, serve_error *e)
{
    const json_t *v;
    static const char *const known_includes[] = {
        "reasoning.encrypted_content", "web_search_call.action.sources",
        "web_search_call.results", "code_interpreter_call.outputs",
        "computer_call_output.output.image_url", "file_search_call.results",
        "message.input_image.image_url", NULL,
    };
    if ((v = serve_present(body, "include"))) {
        if (!json_is_array(v))
            return serve_bad(e, "include", "include: must be an array of strings");
        size_t i;
        json_t *s;
        json_array_foreach(v, i, s) {
            if (json_is_string(s) && !strcmp(json_string_value(s), "message.output_text.logprobs"))
                return serve_bad(e, "include", "include[%zu]: message.output_text.logprobs is "
                                 "not supported on /v1/responses (use /v1/chat/completions)", i);
            if (!one_of(s, known_includes))
                return serve_bad(e, "include", "include[%zu]: '%s' is not a known value", i,
                                 json_is_string(s) ? json_string_value(s) : "?");
        }
    }
    if ((v = serve_present(body, "truncation")) &&
        !(json_is_string(v) && !strcmp(json_string_value(v), "disabled")))
        return serve_bad(e, "truncation", "truncation: only \"disabled\" (the input is never cut; "
                         "one past the context is refused)");
    if ((v = serve_present(body, "background")) && !json_is_false(v))
        return serve_bad(e, "background", "background: only false (responses are not run in "
                         "the background)");
    if ((v = serve_present(body, "top_logprobs")) && !(json_is_integer(v) && json_integer_value(v) == 0))
        return serve_bad(e, "top_logprobs", "top_logprobs: only 0 (use /v1/chat/completions for "
                         "log-probabilities)");
    if ((v = serve_present(body, "safety_identifier")) && !json_is_string(v))
        return serve_bad(e, "safety_identifier", "safety_identifier: must be a string");
    if ((v = serve_present(body, "prompt_cache_retention")) && !json_is_string(v))
        return serve_bad(e, "prompt_cache_retention", "prompt_cache_retention: must be a string");
    if ((v = serve_present(body, "stream_options"))) {
        static const char *const keys[] = {"include_obfuscation", NULL};
        if (!json_is_object(v))
            return serve_bad(e, "stream_options", "stream_options: must be an object");
        if (serve_only_keys(v, keys, "stream_options", e) != 0)
            return -1;
    }
    /* Codex's: ids of its session and turn, for OpenAI's logs */
    if ((v = serve_present(body, "client_metadata"))) {
        const char *k;
        json_t *x;
        if (!json_is_object(v))
            return serve_bad(e, "client_metadata", "client_metadata: must be an object");
        json_object_foreach((json_t *)v, k, x)
            if (!json_is_string(x))
                return serve_bad(e, "client_metadata", "client_metadata['%s']: must be a string",
                                 k);
    }
    if ((v = serve_present(body, "instructions")) && !json_is_string(v))
        return serve_bad(e, "instructions", "instructions: must be a string");
    if ((v = serve_present(body, "previous_response_id")) && !json_is_string(v))
        return serve_bad(e, "previous_response_id", "previous_response_id: must be a string");
    return 0;
}

/* The conversation: what previous_response_id stored, then the input as
 * items (a string is one user message). */
static int gather_items(const json_t *body, resp_state *st, serve_error *e)
{
    const json_t *prev = serve_present(body, "previous_response_id");
    if (prev) {
        if (rstore_get(st->scope, json_string_value(prev), &st->items, NULL) != 0)
            return serve_fail(e, 404, "invalid_request_error", "previous_response_not_found",
                              "previous_response_id", "Previous response with id '%s' not found "
                              "(responses are kept in memory for %d s, and only when store is "
                              "not false)", json_string_value(prev), RSTORE_TTL);
    } else {
        st->items = json_array();
    }
    const json_t *in = json_object_get(body, "input");
    if (json_is_string(in)) {
        json_array_append_new(st->items,
                              json_pack("{s:s,s:s,s:[{s:s,s:O}]}", "type", "message", "role",
                                        "user", "content", "type", "input_text", "text", in));
    } else if (json_is_array(in)) {
        json_array_extend(st->items, (json_t *)in);
    } else if (in && !json_is_null(in)) {
        return serve_bad(e, "input", "input: must be a string or an array of items");
    } else if (!prev) {
        return serve_bad(e, "input", "input: required (a string or an array of items)");
    }
    return 0;
}

static json_t *translate(serve_server *s, const json_t *body, serve_prepare_opts *opts,
                         serve_error *e)
{
    (void)s;
    if (serve_check_fields(body, request_fields, e) != 0 || check_accepted(body, e) != 0)
        return NULL;
    const json_t *model = json_object_get(body, "model");
    if (!json_is_string(model)) {
        serve_bad(e, "model", "model: required, a string");
        return NULL;
    }
    resp_state *st = xcalloc(1, sizeof *st);
    sb_init(&st->text);
    sb_init(&st->held);
    st->output = json_array();
    st->body = json_incref((json_t *)body);
    st->scope = rstore_scope(opts->tenant, opts->api_key);
    st->store = !json_is_false(json_object_get(body, "store"));
    json_t *chat = json_pack("{s:O}", "model", model);
    if (gather_items(body, st, e) != 0 ||
        translate_items(st->items, serve_present(body, "instructions"), chat, e) != 0 ||
        translate_tools(body, chat, st, e) != 0 || translate_text_reasoning(body, chat, e) != 0)
        goto fail;
    const json_t *v;
    if ((v = serve_present(body, "max_output_tokens"))) {
        if (!json_is_integer(v) || json_integer_value(v) < 1) {
            serve_bad(e, "max_output_tokens", "max_output_tokens: must be an integer >= 1");
            goto fail;
        }
        json_object_set(chat, "max_tokens", (json_t *)v);
    }
    static const char *const copied[] = {"temperature", "top_p", "stream", "parallel_tool_calls",
                                         "prompt_cache_key", "metadata", "user", "store",
                                         "service_tier", NULL};
    for (const char *const *k = copied; *k; k++)
        if ((v = serve_present(body, *k)))
            json_object_set(chat, *k, (json_t *)v);
    random_id(st->id, sizeof st->id, "resp_");
    st->created = (long long)time(NULL);
    opts->clamp_max_tokens = 1; /* agents ask for more than a small model's context */
    opts->always_parse = 1;
    opts->ext = st;
    opts->ext_free = state_free;
    return chat;
fail:
    json_decref(chat);
    state_free(st);
    return NULL;
}

/* ---- the response object ----------------------------------------------- */

static json_t *echo(const json_t *body, const char *key, json_t *dflt)
{
    const json_t *v = serve_present(body, key);
    if (v) {
        json_decref(dflt);
        return json_incref((json_t *)v);
    }
    return dflt;
}

static json_t *usage(const serve_job *job, const serve_req_view *v)
{
    size_t in = job->req->n_prompt, out = v->n_generated;
    return json_pack("{s:I,s:{s:I},s:I,s:{s:I},s:I}", "input_tokens", (json_int_t)in,
                     "input_tokens_details", "cached_tokens", (json_int_t)v->n_cached,
                     "output_tokens", (json_int_t)out,
                     "output_tokens_details", "reasoning_tokens", (json_int_t)v->n_reasoning,
                     "total_tokens", (json_int_t)(in + out));
}

/* The response object, in OpenAI's field order; v NULL: still running. */
static json_t *response_object(const serve_job *job, const resp_state *st, const char *status,
                               const serve_req_view *v)
{
    const json_t *b = st->body;
    const json_t *rs = serve_present(b, "reasoning");
    json_t *text = json_pack("{s:{s:s},s:s}", "format", "type", "text", "verbosity", "medium");
    const json_t *tx = serve_present(b, "text");
    if (tx && serve_present(tx, "format"))
        json_object_set(text, "format", json_object_get(tx, "format"));
    if (tx && serve_present(tx, "verbosity"))
        json_object_set(text, "verbosity", json_object_get(tx, "verbosity"));
    json_t *r = json_pack("{s:s,s:s,s:I,s:s,s:b,s:n}", "id", st->id, "object", "response",
                          "created_at", (json_int_t)st->created, "status", status, "background",
                          0, "error");
    json_object_set_new(r, "incomplete_details",
                        strcmp(status, "incomplete")
                            ? json_null()
                            : json_pack("{s:s}", "reason", "max_output_tokens"));
    json_object_set_new(r, "instructions", echo(b, "instructions", json_null()));
    json_object_set_new(r, "max_output_tokens", echo(b, "max_output_tokens", json_null()));
    json_object_set_new(r, "max_tool_calls", json_null());
    json_object_set_new(r, "model", json_string(job->model_name));
    json_object_set_new(r, "output", v ? json_deep_copy(st->output) : json_array());
    json_object_set_new(r, "parallel_tool_calls", echo(b, "parallel_tool_calls", json_true()));
    json_object_set_new(r, "previous_response_id", echo(b, "previous_response_id", json_null()));
    json_object_set_new(r, "prompt_cache_key", echo(b, "prompt_cache_key", json_null()));
    json_object_set_new(r, "reasoning",
                        json_pack("{s:O,s:O}", "effort",
                                  rs && serve_present(rs, "effort") ? json_object_get(rs, "effort")
                                                              : json_null(),
                                  "summary",
                                  rs && serve_present(rs, "summary") ? json_object_get(rs, "summary")
                                                               : json_null()));
    json_object_set_new(r, "safety_identifier", echo(b, "safety_identifier", json_null()));
    json_object_set_new(r, "service_tier", json_string("default"));
    json_object_set_new(r, "store", json_boolean(st->store));
    json_object_set_new(r, "temperature", echo(b, "temperature", json_real(1.0)));
    json_object_set_new(r, "text", text);
    json_object_set_new(r, "tool_choice", echo(b, "tool_choice", json_string("auto")));
    json_object_set_new(r, "tools", json_deep_copy(st->tools));
    json_object_set_new(r, "top_logprobs", json_integer(0));
    json_object_set_new(r, "top_p", echo(b, "top_p", json_real(1.0)));
    json_object_set_new(r, "truncation", json_string("disabled"));
    json_object_set_new(r, "usage", v ? usage(job, v) : json_null());
    json_object_set_new(r, "user", echo(b, "user", json_null()));
    json_object_set_new(r, "metadata", echo(b, "metadata", json_object()));
    return r;
}

/* ---- output items: one state machine for streams and blocking replies -- */

static void emit(resp_state *st, const char *name, json_t *fields)
{
    if (!st->out) {
        json_decref(fields);
        return;
    }
    json_t *o = json_pack("{s:s}", "type", name);
    json_object_update(o, fields);
    json_decref(fields);
    json_object_set_new(o, "sequence_number", json_integer(st->seq++));
    char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
    sb_printf(st->out, "event: %s\ndata: %s\n\n", name, s);
    free(s);
    json_decref(o);
}

static int output_index(const resp_state *st) { return (int)json_array_size(st->output); }

/* The open item as it stands (status given). */
static json_t *open_item_json(const resp_state *st, const char *status)
{
    json_t *text = json_stringn(sb_str(&st->text), st->text.len);
    if (!text)
        text = json_string(""); /* the parser passes whole UTF-8 only */
    switch (st->open) {
    case IT_REASONING:
        return json_pack("{s:s,s:s,s:[],s:[{s:s,s:o}]}", "id", st->item_id, "type", "reasoning",
                         "summary", "content", "type", "reasoning_text", "text", text);
    case IT_MESSAGE:
        return json_pack("{s:s,s:s,s:s,s:s,s:[{s:s,s:[],s:o}]}", "id", st->item_id, "type",
                         "message", "status", status, "role", "assistant", "content", "type",
                         "output_text", "annotations", "text", text);
    default:
        return json_pack("{s:s,s:s,s:s,s:o,s:s,s:s}", "id", st->item_id, "type", "function_call",
                         "status", status, "arguments", text, "call_id", st->call_id, "name",
                         st->call_name);
    }
}

static void close_item(resp_state *st, const char *status)
{
    if (st->open == IT_NONE)
        return;
    int oi = output_index(st);
    json_t *item = open_item_json(st, status);
    if (st->open == IT_CALL) {
        emit(st, "response.function_call_arguments.done",
             json_pack("{s:s,s:i,s:s,s:O}", "item_id", st->item_id, "output_index", oi, "name",
                       st->call_name, "arguments", json_object_get(item, "arguments")));
    } else {
        int msg = st->open == IT_MESSAGE;
        json_t *part = json_array_get(json_object_get(item, "content"), 0);
        emit(st, msg ? "response.output_text.done" : "response.reasoning_text.done",
             msg ? json_pack("{s:s,s:i,s:i,s:O,s:[]}", "item_id", st->item_id, "output_index", oi,
                             "content_index", 0, "text", json_object_get(part, "text"),
                             "logprobs")
                 : json_pack("{s:s,s:i,s:i,s:O}", "item_id", st->item_id, "output_index", oi,
                             "content_index", 0, "text", json_object_get(part, "text")));
        emit(st, "response.content_part.done",
             json_pack("{s:s,s:i,s:i,s:O}", "item_id", st->item_id, "output_index", oi,
                       "content_index", 0, "part", part));
    }
    emit(st, "response.output_item.done",
         json_pack("{s:i,s:O}", "output_index", oi, "item", item));
    json_array_append_new(st->output, item);
    st->open = IT_NONE;
    sb_clear(&st->text);
}

static void delta(resp_state *st, const char *text, size_t len)
{
    json_t *piece = json_stringn(text, len);
    if (!piece)
        return;
    sb_append(&st->text, text, len);
    int oi = output_index(st);
    if (st->open == IT_CALL)
        emit(st, "response.function_call_arguments.delta",
             json_pack("{s:s,s:i,s:o}", "item_id", st->item_id, "output_index", oi, "delta",
                       piece));
    else if (st->open == IT_MESSAGE)
        emit(st, "response.output_text.delta",
             json_pack("{s:s,s:i,s:i,s:o,s:[]}", "item_id", st->item_id, "output_index", oi,
                       "content_index", 0, "delta", piece, "logprobs"));
    else
        emit(st, "response.reasoning_text.delta",
             json_pack("{s:s,s:i,s:i,s:o}", "item_id", st->item_id, "output_index", oi,
                       "content_index", 0, "delta", piece));
}

static void open_item(resp_state *st, int kind, const char *call_id, const char *name)
{
    close_item(st, "completed");
    st->open = kind;
    sb_clear(&st->text);
    if (kind == IT_CALL) {
        snprintf(st->call_id, sizeof st->call_id, "%s", call_id);
        snprintf(st->call_name, sizeof st->call_name, "%s", name);
        snprintf(st->item_id, sizeof st->item_id, "fc_%s",
                 strncmp(call_id, "call_", 5) ? call_id : call_id + 5);
    } else {
        random_id(st->item_id, sizeof st->item_id, kind == IT_MESSAGE ? "msg_" : "rs_");
    }
    int oi = output_index(st);
    json_t *item = open_item_json(st, "in_progress");
    if (kind == IT_REASONING) /* the content part is announced on its own */
        json_array_clear(json_object_get(item, "content"));
    if (kind == IT_MESSAGE)
        json_array_clear(json_object_get(item, "content"));
    emit(st, "response.output_item.added", json_pack("{s:i,s:o}", "output_index", oi, "item", item));
    if (kind == IT_MESSAGE)
        emit(st, "response.content_part.added",
             json_pack("{s:s,s:i,s:i,s:{s:s,s:[],s:s}}", "item_id", st->item_id, "output_index",
                       oi, "content_index", 0, "part", "type", "output_text", "annotations",
                       "text", ""));
    else if (kind == IT_REASONING)
        emit(st, "response.content_part.added",
             json_pack("{s:s,s:i,s:i,s:{s:s,s:s}}", "item_id", st->item_id, "output_index", oi,
                       "content_index", 0, "part", "type", "reasoning_text", "text", ""));
    if (kind == IT_MESSAGE && st->held.len)
        delta(st, sb_str(&st->held), st->held.len);
    sb_clear(&st->held);
}

static int blank(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!strchr(" \t\r\n", s[i]))
            return 0;
    return 1;
}

static void on_event(void *user, const toolparse_event *ev)
{
    resp_state *st = user;
    switch (ev->kind) {
    case TOOLPARSE_EV_CONTENT:
        /* whitespace between the reasoning and a call is no message */
        if (st->open != IT_MESSAGE && blank(ev->text, ev->len)) {
            sb_append(&st->held, ev->text, ev->len);
            return;
        }
        if (st->open != IT_MESSAGE)
            open_item(st, IT_MESSAGE, NULL, NULL);
        delta(st, ev->text, ev->len);
        break;
    case TOOLPARSE_EV_REASONING:
        if (st->open != IT_REASONING)
            open_item(st, IT_REASONING, NULL, NULL);
        delta(st, ev->text, ev->len);
        break;
    case TOOLPARSE_EV_CALL_START:
        open_item(st, IT_CALL, ev->id, ev->name);
        break;
    case TOOLPARSE_EV_CALL_ARGS:
        delta(st, ev->text, ev->len);
        break;
    case TOOLPARSE_EV_CALL_END:
        close_item(st, "completed");
        break;
    }
}

static const char *final_status(const serve_req_view *v)
{
    return v->choice_finish[0] == SERVE_FINISH_LENGTH ? "incomplete" : "completed";
}

/* The reply is over: the open item closes, and a reply of nothing but
 * whitespace still gets its message. */
static void finish_items(serve_job *job, resp_state *st, const serve_req_view *v)
{
    toolparse_result res;
    toolparse_finish(job->tp[0], on_event, st, &res);
    toolparse_result_free(&res);
    const char *status = final_status(v);
    close_item(st, status);
    if (output_index(st) == 0) {
        open_item(st, IT_MESSAGE, NULL, NULL);
        close_item(st, status);
    }
}

/* store: the conversation (its items and the output) for a later
 * previous_response_id, and the object for GET. */
static void keep(resp_state *st, const json_t *resp)
{
    if (!st->store)
        return;
    json_t *items = json_deep_copy(st->items);
    json_array_extend(items, st->output);
    rstore_put(st->scope, st->id, items, json_deep_copy(resp));
}

static json_t *response(serve_job *job, const serve_req_view *v)
{
    resp_state *st = job->ext;
    serve_choice *c = &job->got[0];
    st->out = NULL;
    toolparse_feed(job->tp[0], sb_str(&c->text), c->text.len, on_event, st);
    finish_items(job, st, v);
    json_t *r = response_object(job, st, final_status(v), v);
    keep(st, r);
    return r;
}

static void sse_start(serve_job *job, strbuf *out)
{
    resp_state *st = job->ext;
    job->sent_role = 1;
    st->out = out;
    emit(st, "response.created",
         json_pack("{s:o}", "response", response_object(job, st, "in_progress", NULL)));
    emit(st, "response.in_progress",
         json_pack("{s:o}", "response", response_object(job, st, "in_progress", NULL)));
}

static int sse_update(serve_job *job, strbuf *out, const serve_req_view *v)
{
    resp_state *st = job->ext;
    size_t len0 = out->len;
    st->out = out;
    serve_job_parse_pending(job, 0, on_event, st);
    if (v->finish == SERVE_FINISH_NONE)
        return out->len > len0;
    if (v->finish == SERVE_FINISH_ERROR) {
        emit(st, "error", json_pack("{s:s,s:s,s:n}", "code", "server_error", "message", v->error,
                                    "param"));
        json_t *r = response_object(job, st, "failed", v);
        json_object_set_new(r, "error", json_pack("{s:s,s:s}", "code", "server_error", "message",
                                                  v->error));
        emit(st, "response.failed", json_pack("{s:o}", "response", r));
        return 1;
    }
    finish_items(job, st, v);
    const char *status = final_status(v);
    json_t *r = response_object(job, st, status, v);
    keep(st, r);
    emit(st, strcmp(status, "completed") ? "response.incomplete" : "response.completed",
         json_pack("{s:o}", "response", r));
    return 1;
}

const serve_dialect serve_dialect_responses = {
    .error_json = serve_error_json,
    .translate = translate,
    .begin = NULL,
    .response = response,
    .sse_start = sse_start,
    .sse_update = sse_update,
    .keepalive = ": keep-alive\n\n",
};

/* ---- GET and DELETE /v1/responses/{id} ----------------------------------- */

json_t *serve_responses_stored(const char *id, int del, const char *tenant, const char *key,
                               int *status)
{
    uint64_t scope = rstore_scope(tenant, key);
    json_t *r = NULL;
    if (del ? rstore_delete(scope, id) == 0 : rstore_get(scope, id, NULL, &r) == 0) {
        *status = 200;
        return del ? json_pack("{s:s,s:s,s:b}", "id", id, "object", "response", "deleted", 1)
                   : r;
    }
    serve_error e;
    serve_fail(&e, 404, "invalid_request_error", "not_found", NULL,
               "No response found with id '%.200s' (responses are kept in memory for %d s, and "
               "only when store is not false)", id, RSTORE_TTL);
    *status = 404;
    return serve_error_json(&e);
}
