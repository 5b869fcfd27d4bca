/* Tool calls out of a model's text: which convention a chat template
 * teaches (toolparse_detect), and an incremental parser that turns the
 * generated text, fed in chunks of any size as tokens arrive, into content,
 * reasoning and tool calls for the OpenAI surface (docs/TOOL-CALLS.md).
 *
 * The parser sees the detokenized text with special tokens written out
 * (<|python_tag|>, [TOOL_CALLS], <|channel|> ...): the markup is the
 * evidence. One parser per choice:
 *
 *     toolparse *p = toolparse_new(fmt, NULL);
 *     toolparse_feed(p, text, len, on_event, ctx);   // per detokenized piece
 *     toolparse_result r;
 *     toolparse_finish(p, on_event, ctx, &r);        // flushes what was held
 *     ... r.content, r.reasoning, r.calls[], r.finish_reason ...
 *     toolparse_result_free(&r);
 *     toolparse_free(p);
 *
 * The events concatenate to the result, byte for byte, whatever the chunk
 * sizes: content and reasoning events never carry tool-call markup or a
 * split UTF-8 sequence, and a call is announced only once it is complete
 * and valid (a malformed one comes back as content, never dropped). */
#ifndef MEMRA_SERVE_TOOL_PARSE_H
#define MEMRA_SERVE_TOOL_PARSE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

typedef enum {
    TOOLPARSE_NONE = 0,   /* no tool-call convention: everything is content (and <think>) */
    TOOLPARSE_HERMES,     /* <tool_call>{"name":..,"arguments":{..}}</tool_call> (Qwen 2.5/3, Hermes, Granite) */
    TOOLPARSE_QWEN3_CODER,/* <tool_call><function=N><parameter=K>V</parameter></function></tool_call> */
    TOOLPARSE_LLAMA3,     /* {"name":..,"parameters":{..}} as the message, or after <|python_tag|> */
    TOOLPARSE_MISTRAL,    /* [TOOL_CALLS][{..}] and [TOOL_CALLS]name[ARGS]{..} */
    TOOLPARSE_DEEPSEEK,   /* <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>..<｜tool▁sep｜>..<｜tool▁call▁end｜> (V3.1 and R1 forms) */
    TOOLPARSE_HARMONY,    /* gpt-oss: <|channel|>commentary to=functions.N <|constrain|>json<|message|>{..}<|call|> */
    TOOLPARSE_GEMMA4,     /* <|tool_call>call:N{k:<|"|>v<|"|>}<tool_call|> */
    TOOLPARSE_KIMI_K2,    /* <|tool_calls_section_begin|><|tool_call_begin|>functions.N:0<|tool_call_argument_begin|>{..}<|tool_call_end|> */
    TOOLPARSE_GLM45,      /* <tool_call>N<arg_key>K</arg_key><arg_value>V</arg_value></tool_call> (GLM-4.5/4.6) */
    TOOLPARSE_FORMAT_COUNT
} toolparse_format;

/* The convention a chat template's source teaches, from the markup it
 * writes for an assistant's tool_calls; TOOLPARSE_NONE when it writes none. */
toolparse_format toolparse_detect(const char *template_src);
/* "hermes", "qwen3-coder", "llama3", ... (stable: logs and --tool-format). */
const char *toolparse_format_name(toolparse_format f);
/* The format named so, or -1. */
int toolparse_format_from_name(const char *name);

typedef enum {
    TOOLPARSE_EV_CONTENT,    /* text, len: visible text */
    TOOLPARSE_EV_REASONING,  /* text, len: reasoning text (<think>, harmony analysis) */
    TOOLPARSE_EV_CALL_START, /* index, id, name */
    TOOLPARSE_EV_CALL_ARGS,  /* index, text, len: a piece of the arguments JSON string */
    TOOLPARSE_EV_CALL_END,   /* index */
} toolparse_event_kind;

typedef struct {
    toolparse_event_kind kind;
    int index;        /* the call's position in tool_calls[] */
    const char *id;   /* CALL_START */
    const char *name; /* CALL_START */
    const char *text; /* CONTENT, REASONING, CALL_ARGS: not NUL-terminated */
    size_t len;
} toolparse_event;

typedef void (*toolparse_cb)(void *user, const toolparse_event *ev);

typedef struct {
    /* The generation prompt already opened the reasoning block (a template
     * that ends the prompt with "<think>"): the text starts as reasoning. */
    int starts_in_reasoning;
    /* Call ids: "call_" + 24 characters of [A-Za-z0-9], drawn from rand
     * (with rand_ctx) when set, else from a generator seeded with id_seed. */
    uint64_t (*rand)(void *rand_ctx);
    void *rand_ctx;
    uint64_t id_seed;
} toolparse_opts;

typedef struct {
    char *id;        /* "call_..." */
    char *name;
    char *arguments; /* a JSON object, as text */
} toolparse_call;

typedef struct {
    char *content;   /* never NULL; "" when there was none */
    char *reasoning; /* never NULL; "" when there was none */
    toolparse_call *calls;
    int n_calls;
    const char *finish_reason; /* "tool_calls" when n_calls > 0, else NULL (the caller's own) */
} toolparse_result;

typedef struct toolparse toolparse;

/* opts may be NULL (defaults: not in reasoning, id_seed 0). */
toolparse *toolparse_new(toolparse_format f, const toolparse_opts *opts);
/* Feeds the next piece of generated text; cb (may be NULL) gets the events
 * that piece decides. */
void toolparse_feed(toolparse *p, const char *text, size_t len, toolparse_cb cb, void *user);
/* The text has ended: decides what was held back (a partial marker, an
 * unterminated call), sends those events, and fills out. Feeding after
 * finish is a programming error. */
void toolparse_finish(toolparse *p, toolparse_cb cb, void *user, toolparse_result *out);
void toolparse_free(toolparse *p);

void toolparse_result_free(toolparse_result *r);
/* The OpenAI assistant message: {"role":"assistant","content":..,
 * "reasoning_content":.. (when any), "tool_calls":[{id,type,function:{name,
 * arguments}}] (when any)}; content is null when empty and there are calls. */
json_t *toolparse_result_message(const toolparse_result *r);

/* ---- the per-format pieces (tool_format_*.c), shared with the parser ---- */

/* Bytes of the JSON object or array that starts at s[0] (after leading
 * whitespace, which it counts): 0 when it is not complete yet, -1 when s
 * does not start with '{' or '['. Strings and escapes are honoured; the
 * value is not validated (jansson does that). */
long tcp_json_extent(const char *s, size_t n);
/* A tool call body, in the format's own syntax, to a name and arguments
 * JSON object text (both malloc'd); 0 on success, -1 when malformed. */
int tcp_parse_body(toolparse_format f, const char *body, size_t n, char **name, char **args);
/* A JSON text for an argument value written bare (XML parameters, GLM
 * arg_value): the value itself when it parses as JSON, else a JSON string
 * of the text. malloc'd. */
char *tcp_value_json(const char *v, size_t n);
/* {"name": N, "arguments"|"parameters": {..} or "{..}"} to name and
 * arguments JSON text (malloc'd); 0, or -1 when it is not a call. */
int tcp_call_from_object(json_t *o, char **name, char **args);
/* A name and an arguments text that must be a JSON object; 0 or -1. */
int tcp_call_from_parts(const char *nm, size_t nn, const char *a, size_t an, char **name,
                        char **args);

#endif
