/* Tool calling on the chat surface, the request side: `tools`,
 * `tool_choice`, `parallel_tool_calls` checked and resolved, and the
 * grammar that forces calls when the client asks for them.
 *
 * How each tool_choice is served (docs/TOOL-CALLS.md):
 *   none      the tools are not shown to the model; the reply is content.
 *   auto      the tools reach the model through its chat template (the
 *             template's own `tools` variable) and the reply is parsed in
 *             the model's native convention (toolparse_detect).
 *   required  the reply is held to a grammar of one or more calls (one when
 *   named     parallel_tool_calls is false; the named tool only), each
 *             `<tool_call>\n{"name": N, "arguments": ARGS}\n</tool_call>`
 *             with ARGS held to that tool's parameters schema, and parsed
 *             in that form whatever the model's own convention: the output
 *             is a valid call by construction, from any model. */
#ifndef MEMRA_SERVE_SERVE_TOOLS_H
#define MEMRA_SERVE_SERVE_TOOLS_H

#include <jansson.h>

#include "grammar/grammar.h"
#include "serve/serve_error.h"

typedef enum {
    SERVE_TOOLS_NONE = 0,
    SERVE_TOOLS_AUTO,
    SERVE_TOOLS_REQUIRED,
    SERVE_TOOLS_NAMED,
} serve_tool_choice;

/* OpenAI's limit on tools per request. */
#define SERVE_MAX_TOOLS 128

typedef struct {
    const json_t *tools;      /* the request's tools array (borrowed), NULL when none */
    serve_tool_choice choice; /* none when there are no tools */
    int parallel;             /* parallel_tool_calls (default true) */
    char named[72];           /* SERVE_TOOLS_NAMED: the tool's name */
} serve_tools;

/* Checks tools (function tools: name [A-Za-z0-9_-]{1,64}, unique;
 * description a string; parameters a JSON Schema object; strict a
 * boolean), tool_choice and parallel_tool_calls; fills t. */
int serve_tools_parse(const json_t *body, serve_tools *t, serve_error *e);

/* The grammar of the forced calls (choice required or named); errors (a
 * parameters schema with a keyword that cannot be enforced) name the tool's
 * field. */
gram_grammar *serve_tools_grammar(const serve_tools *t, serve_error *e);

/* With tool_choice auto and at least one strict tool, in the Hermes
 * convention: the grammar of one call's body, from after "<tool_call>" to
 * "</tool_call>" (strict tools' arguments held to their schema, the others'
 * to any object), which memra-serve starts when the model opens a call
 * (req->lazy_grammar). NULL with e->status 0 when no tool is strict; NULL
 * with e set when a strict schema cannot be enforced. */
gram_grammar *serve_tools_lazy_grammar(const serve_tools *t, serve_error *e);

/* The messages' tool-call structure: an assistant's tool_calls (id, type
 * "function", function.name, function.arguments a JSON object text) and a
 * tool message's tool_call_id. */
int serve_check_tool_messages(const json_t *messages, serve_error *e);

#endif
