/* Tool calling, the request side (serve_tools.h). */
#include "serve/serve_tools.h"

#include "serve/serve_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/strbuf.h"
#include "grammar/json_schema.h"

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return 0;
    return 1;
}

static int check_tool(const json_t *tool, size_t i, serve_error *e)
{
    char param[96];
    snprintf(param, sizeof param, "tools[%zu]", i);
    if (!json_is_object(tool))
        return serve_bad(e, param, "%s: must be an object", param);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)tool, key, v) {
        if (strcmp(key, "type") && strcmp(key, "function"))
            return serve_bad(e, param, "%s: unknown field '%s'", param, key);
    }
    const json_t *type = json_object_get(tool, "type");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function")) {
        snprintf(param, sizeof param, "tools[%zu].type", i);
        return serve_bad(e, param, "%s: only \"function\" tools are supported", param);
    }
    const json_t *fn = json_object_get(tool, "function");
    snprintf(param, sizeof param, "tools[%zu].function", i);
    if (!json_is_object(fn))
        return serve_bad(e, param, "%s: required, an object", param);
    json_object_foreach((json_t *)fn, key, v) {
        if (strcmp(key, "name") && strcmp(key, "description") && strcmp(key, "parameters") &&
            strcmp(key, "strict"))
            return serve_bad(e, param, "%s: unknown field '%s'", param, key);
    }
    const json_t *name = json_object_get(fn, "name");
    if (!json_is_string(name) || !valid_name(json_string_value(name))) {
        snprintf(param, sizeof param, "tools[%zu].function.name", i);
        return serve_bad(e, param, "%s: required, 1-64 characters of a-z, A-Z, 0-9, _ and -",
                         param);
    }
    if ((v = (json_t *)serve_present(fn, "description")) && !json_is_string(v))
        return serve_bad(e, param, "%s.description: must be a string", param);
    if ((v = (json_t *)serve_present(fn, "parameters")) && !json_is_object(v))
        return serve_bad(e, param, "%s.parameters: must be a JSON Schema object", param);
    if ((v = (json_t *)serve_present(fn, "strict")) && !json_is_boolean(v))
        return serve_bad(e, param, "%s.strict: must be true or false", param);
    return 0;
}

static const char *tool_name(const json_t *tool)
{
    return json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
}

int serve_tools_parse(const json_t *body, serve_tools *t, serve_error *e)
{
    memset(t, 0, sizeof *t);
    t->parallel = 1;
    const json_t *tools = serve_present(body, "tools"), *choice = serve_present(body, "tool_choice");
    const json_t *par = serve_present(body, "parallel_tool_calls");
    if (par && !json_is_boolean(par))
        return serve_bad(e, "parallel_tool_calls", "parallel_tool_calls: must be true or false");
    t->parallel = !par || json_is_true(par);
    if (tools) {
        if (!json_is_array(tools))
            return serve_bad(e, "tools", "tools: must be an array of tools");
        if (json_array_size(tools) > SERVE_MAX_TOOLS)
            return serve_bad(e, "tools", "tools: at most %d tools (got %zu)", SERVE_MAX_TOOLS,
                             json_array_size(tools));
        size_t i;
        json_t *tool;
        json_array_foreach(tools, i, tool) {
            if (check_tool(tool, i, e) != 0)
                return -1;
            for (size_t j = 0; j < i; j++)
                if (!strcmp(tool_name(json_array_get(tools, j)), tool_name(tool)))
                    return serve_bad(e, "tools", "tools[%zu].function.name: '%s' is also "
                                     "tools[%zu]'s name", i, tool_name(tool), j);
        }
        if (json_array_size(tools) == 0)
            tools = NULL;
    }
    t->choice = tools ? SERVE_TOOLS_AUTO : SERVE_TOOLS_NONE;
    if (!choice) {
        t->tools = tools;
        return 0;
    }
    if (json_is_string(choice)) {
        const char *c = json_string_value(choice);
        if (!strcmp(c, "none"))
            t->choice = SERVE_TOOLS_NONE;
        else if (!strcmp(c, "auto") || !strcmp(c, "required"))
            t->choice = c[0] == 'a' ? SERVE_TOOLS_AUTO : SERVE_TOOLS_REQUIRED;
        else
            return serve_bad(e, "tool_choice", "tool_choice: '%s' is not none, auto, required "
                             "or {\"type\": \"function\", \"function\": {\"name\": ...}}", c);
    } else if (json_is_object(choice)) {
        const json_t *type = json_object_get(choice, "type");
        const json_t *fn = json_object_get(choice, "function");
        const json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") ||
            !json_is_string(name) || json_object_size(choice) != 2 || json_object_size(fn) != 1)
            return serve_bad(e, "tool_choice", "tool_choice: an object must be {\"type\": "
                                               "\"function\", \"function\": {\"name\": ...}}");
        t->choice = SERVE_TOOLS_NAMED;
        snprintf(t->named, sizeof t->named, "%s", json_string_value(name));
        int found = 0;
        for (size_t i = 0; tools && i < json_array_size(tools) && !found; i++)
            found = !strcmp(tool_name(json_array_get(tools, i)), json_string_value(name));
        if (!found)
            return serve_bad(e, "tool_choice", "tool_choice: no tool named '%.64s' in tools",
                             json_string_value(name));
    } else {
        return serve_bad(e, "tool_choice", "tool_choice: must be a string or an object");
    }
    if (t->choice != SERVE_TOOLS_NONE && !tools)
        return serve_bad(e, "tool_choice", "tool_choice: needs tools");
    t->tools = t->choice == SERVE_TOOLS_NONE ? NULL : tools;
    return 0;
}

/* Moves local references ("#", "#/$defs/x") under `prefix`, so a tool's
 * parameters schema still resolves its own definitions once nested in the
 * grammar's schema. Values (const, enum, default, examples) are data and
 * stay as they are; anchors ("#name") are left alone. */
static void move_refs(json_t *s, const char *prefix);

/* An object whose keys are names and whose values are schemas
 * (properties, $defs ...). */
static void move_refs_in_values(json_t *o, const char *prefix)
{
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
        move_refs(v, prefix);
}

static void move_refs(json_t *s, const char *prefix)
{
    const char *key;
    json_t *v;
    size_t i;
    if (json_is_array(s)) {
        json_array_foreach(s, i, v)
            move_refs(v, prefix);
        return;
    }
    if (!json_is_object(s))
        return;
    json_object_foreach(s, key, v) {
        /* values, not schemas: a "$ref" key in them is data */
        if (!strcmp(key, "const") || !strcmp(key, "enum") || !strcmp(key, "default") ||
            !strcmp(key, "examples"))
            continue;
        if (json_is_object(v) && (!strcmp(key, "properties") || !strcmp(key, "$defs") ||
                                  !strcmp(key, "definitions") ||
                                  !strcmp(key, "patternProperties"))) {
            move_refs_in_values(v, prefix);
            continue;
        }
        const char *r = json_is_string(v) ? json_string_value(v) : "";
        if (!strcmp(key, "$ref") && r[0] == '#' && (r[1] == '\0' || r[1] == '/')) {
            strbuf sb;
            sb_init(&sb);
            sb_printf(&sb, "%s%s", prefix, r + 1);
            json_object_set_new(s, key, json_string(sb_str(&sb)));
            sb_free(&sb);
        } else {
            move_refs(v, prefix);
        }
    }
}

/* {"anyOf": [{"type": "object", "properties": {"name": {"const": N},
 * "arguments": PARAMETERS}, ...}, ...]}, one branch per tool allowed. */
static int is_strict(const json_t *tool)
{
    return json_is_true(json_object_get(json_object_get(tool, "function"), "strict"));
}

static json_t *calls_schema(const serve_tools *t, int lazy)
{
    json_t *any = json_array();
    size_t i;
    json_t *tool;
    json_array_foreach(t->tools, i, tool) {
        const char *name = tool_name(tool);
        if (t->choice == SERVE_TOOLS_NAMED && strcmp(name, t->named))
            continue;
        const json_t *params = serve_present(json_object_get(tool, "function"), "parameters");
        if (lazy && !is_strict(tool))
            params = NULL; /* only strict tools promise their schema: any object */
        json_t *args = params ? json_deep_copy(params) : json_pack("{s:s}", "type", "object");
        char prefix[64];
        snprintf(prefix, sizeof prefix, "#/anyOf/%zu/properties/arguments",
                 json_array_size(any));
        move_refs(args, prefix);
        json_array_append_new(
            any, json_pack("{s:s,s:{s:{s:s},s:o},s:[s,s],s:b}", "type", "object", "properties",
                           "name", "const", name, "arguments", args, "required", "name",
                           "arguments", "additionalProperties", 0));
    }
    return json_pack("{s:o}", "anyOf", any);
}

/* The grammar of calls (lazy: of one call's body after its opening
 * marker, up to its closing one). */
static gram_grammar *build(const serve_tools *t, int lazy, serve_error *e)
{
    memra_err err = {{0}};
    json_t *schema = calls_schema(t, lazy);
    char *body = jsch_to_gbnf(schema, &err);
    json_decref(schema);
    if (!body) {
        if (lazy)
            serve_bad(e, "tools", "tools: a strict tool's parameters schema cannot be enforced: "
                      "%s", err.msg);
        else
            serve_bad(e, "tools", "tools: a parameters schema cannot be enforced for "
                      "tool_choice '%s': %s", t->choice == SERVE_TOOLS_NAMED ? t->named
                                                                            : "required",
                      err.msg);
        return NULL;
    }
    /* The schema's grammar becomes one call's body: its root rule is
     * renamed (generated rule names always end in -rN) and a root of
     * call markers put around it. */
    char *at = strncmp(body, "root ::= ", 9) ? strstr(body, "\nroot ::= ") : body;
    if (!at) { /* jsch_to_gbnf always writes one */
        free(body);
        serve_bad(e, "tools", "tools: the tool-call grammar (internal): no root rule");
        return NULL;
    }
    if (at != body)
        at++;
    strbuf g;
    sb_init(&g);
    if (lazy) {
        sb_puts(&g, "root ::= lz-ws call-body lz-ws \"</tool_call>\"\n");
        sb_puts(&g, "lz-ws ::= [ \\n]? [ \\n]?\n");
    } else {
        sb_printf(&g, "root ::= call%s\n", t->parallel && t->choice == SERVE_TOOLS_REQUIRED
                                              ? " (\"\\n\" call)*" : "");
        sb_puts(&g, "call ::= \"<tool_call>\\n\" call-body \"\\n</tool_call>\"\n");
    }
    sb_append(&g, body, (size_t)(at - body));
    sb_puts(&g, "call-body ::= ");
    sb_puts(&g, at + 9);
    free(body);
    gram_grammar *gr = gram_parse_gbnf(sb_str(&g), g.len, &err);
    sb_free(&g);
    if (!gr)
        serve_bad(e, "tools", "tools: the tool-call grammar (internal): %s", err.msg);
    return gr;
}

int serve_check_tool_messages(const json_t *messages, serve_error *e)
{
    char param[96];
    size_t i;
    json_t *msg;
    json_array_foreach(messages, i, msg) {
        const char *role = json_string_value(json_object_get(msg, "role"));
        const json_t *calls = serve_present(msg, "tool_calls"), *id = serve_present(msg, "tool_call_id");
        if (calls && strcmp(role, "assistant"))
            return serve_bad(e, "messages", "messages[%zu].tool_calls: only assistant messages "
                             "carry tool calls", i);
        if (id && !json_is_string(id))
            return serve_bad(e, "messages", "messages[%zu].tool_call_id: must be a string", i);
        if (!calls)
            continue;
        if (!json_is_array(calls))
            return serve_bad(e, "messages", "messages[%zu].tool_calls: must be an array", i);
        size_t j;
        json_t *c;
        json_array_foreach(calls, j, c) {
            snprintf(param, sizeof param, "messages[%zu].tool_calls[%zu]", i, j);
            const json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
            const json_t *type = json_is_object(c) ? json_object_get(c, "type") : NULL;
            const json_t *cid = json_is_object(c) ? json_object_get(c, "id") : NULL;
            if (!json_is_object(fn))
                return serve_bad(e, param, "%s: must be {\"id\", \"type\": \"function\", "
                                 "\"function\": {\"name\", \"arguments\"}}", param);
            if (type && !json_is_null(type) &&
                !(json_is_string(type) && !strcmp(json_string_value(type), "function")))
                return serve_bad(e, param, "%s.type: only \"function\"", param);
            if (cid && !json_is_null(cid) && !json_is_string(cid))
                return serve_bad(e, param, "%s.id: must be a string", param);
            if (!json_is_string(json_object_get(fn, "name")))
                return serve_bad(e, param, "%s.function.name: required, a string", param);
            const json_t *args = json_object_get(fn, "arguments");
            if (!json_is_string(args) && !json_is_object(args))
                return serve_bad(e, param, "%s.function.arguments: required, a JSON object "
                                 "as a string", param);
            if (json_is_string(args)) {
                json_error_t je;
                json_t *o = json_loads(json_string_value(args), JSON_DECODE_ANY, &je);
                int ok = json_is_object(o);
                json_decref(o);
                if (!ok)
                    return serve_bad(e, param, "%s.function.arguments: not a JSON object "
                                     "(%s)", param, o ? "another JSON value" : je.text);
            }
        }
    }
    return 0;
}

gram_grammar *serve_tools_grammar(const serve_tools *t, serve_error *e)
{
    return build(t, 0, e);
}

gram_grammar *serve_tools_lazy_grammar(const serve_tools *t, serve_error *e)
{
    int any = 0;
    for (size_t i = 0; t->tools && i < json_array_size(t->tools) && !any; i++)
        any = is_strict(json_array_get(t->tools, i));
    if (!any) {
        e->status = 0;
        return NULL;
    }
    return build(t, 1, e);
}
