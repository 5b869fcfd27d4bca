/* The OpenAI surfaces: POST /v1/chat/completions and /v1/completions.
 * Request validation (every field of the documented set, each checked and
 * named when wrong), prompt preparation, and the response shapes: blocking
 * JSON and SSE chunks. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "grammar/json_schema.h"
#include "serve/serve_internal.h"
#include "serve/serve_tools.h"

static const char *const chat_fields[] = {
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
    "min_p", "seed", "stop", "presence_penalty", "frequency_penalty", "repetition_penalty",
    "logit_bias", "n", "user", "chat_template_kwargs", "stream", "stream_options", "ignore_eos",
    "logprobs", "top_logprobs", "reasoning_effort", "response_format", "grammar", "tools",
    "tool_choice", "parallel_tool_calls",
    /* accepted and checked, changing nothing here (see check_accepted) */
    "store", "metadata", "service_tier", "prompt_cache_key", "modalities", NULL,
};

static const char *const completion_fields[] = {
    "model", "prompt", "max_tokens", "temperature", "top_p", "top_k", "min_p", "seed", "stop",
    "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias", "n", "user",
    "stream", "stream_options", "ignore_eos", "logprobs", "service_tier", "prompt_cache_key",
    "grammar", "echo", "best_of", "suffix", NULL,
};

void serve_job_clear(serve_job *job)
{
    serve_req_unref(job->req);
    for (int i = 0; i < SERVE_MAX_CHOICES; i++) {
        serve_choice_free(&job->got[i]);
        toolparse_free(job->tp[i]);
    }
    if (job->ext_free)
        job->ext_free(job->ext);
    memset(job, 0, sizeof *job);
}

void serve_job_parse_pending(serve_job *job, int i, toolparse_cb cb, void *user)
{
    serve_choice *c = &job->got[i];
    if (c->text.len)
        toolparse_feed(job->tp[i], sb_str(&c->text), c->text.len, cb, user);
    sb_clear(&c->text);
    c->n_lp = 0;
    sb_clear(&c->bytes);
}

static int check_accepted(const json_t *body, serve_error *e);

/* Fields accepted only where they ask for nothing this server lacks. */
static int check_unsupported(serve_kind kind, const json_t *body, serve_error *e)
{
    const json_t *v;
    (void)kind;
    if ((v = serve_present(body, "echo")))
        if (!json_is_false(v))
            return serve_bad(e, "echo", "echo: not supported by this server (only false)");
    if ((v = serve_present(body, "best_of")))
        if (!(json_is_integer(v) && json_integer_value(v) == 1))
            return serve_bad(e, "best_of", "best_of: only 1 is supported");
    if ((v = serve_present(body, "suffix")))
        return serve_bad(e, "suffix", "suffix: insertion is not supported");
    return check_accepted(body, e);
}

/* Fields clients (the openai SDK, agent frameworks) send that ask this
 * server for nothing it would have to do differently: each is checked for
 * its documented type, so a typo'd value is still a 400, then ignored.
 * store: nothing is stored (true is accepted: refusing it would break
 * clients that set it everywhere). metadata: OpenAI's 16 string pairs,
 * kept with nothing. service_tier: one tier here. prompt_cache_key: a
 * routing hint for a prefix cache. modalities: text is the only output, so anything else is refused. */
static int check_accepted(const json_t *body, serve_error *e)
{
    static const char *const tiers[] = {"auto", "default", "flex", "scale", "priority", NULL};
    const json_t *v;
    if ((v = serve_present(body, "store")) && !json_is_boolean(v))
        return serve_bad(e, "store", "store: must be true or false");
    if ((v = serve_present(body, "prompt_cache_key")) && !json_is_string(v))
        return serve_bad(e, "prompt_cache_key", "prompt_cache_key: must be a string");
    if ((v = serve_present(body, "user")) && !json_is_string(v))
        return serve_bad(e, "user", "user: must be a string");
    if ((v = serve_present(body, "service_tier"))) {
        int ok = 0;
        for (const char *const *t = tiers; json_is_string(v) && *t && !ok; t++)
            ok = !strcmp(*t, json_string_value(v));
        if (!ok)
            return serve_bad(e, "service_tier", "service_tier: must be one of auto, default, "
                                                "flex, scale, priority");
    }
    if ((v = serve_present(body, "metadata"))) {
        if (!json_is_object(v))
            return serve_bad(e, "metadata", "metadata: must be an object of string values");
        if (json_object_size(v) > 16)
            return serve_bad(e, "metadata", "metadata: at most 16 keys (got %zu)",
                             json_object_size(v));
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)v, key, val) {
            if (strlen(key) > 64)
                return serve_bad(e, "metadata", "metadata: key '%.64s...' is over 64 characters",
                                 key);
            if (!json_is_string(val) || json_string_length(val) > 512)
                return serve_bad(e, "metadata", "metadata['%s']: must be a string of at most 512 "
                                 "characters", key);
        }
    }
    if ((v = serve_present(body, "modalities"))) {
        if (!json_is_array(v) || json_array_size(v) == 0)
            return serve_bad(e, "modalities", "modalities: must be a non-empty array (only "
                                              "[\"text\"])");
        size_t i;
        json_t *m;
        json_array_foreach(v, i, m) {
            if (!json_is_string(m) || strcmp(json_string_value(m), "text"))
                return serve_bad(e, "modalities", "modalities[%zu]: only \"text\" output is "
                                 "supported", i);
        }
    }
    if ((v = serve_present(body, "reasoning_effort"))) {
        static const char *const efforts[] = {"none", "minimal", "low", "medium", "high", NULL};
        int ok = 0;
        for (const char *const *t = efforts; json_is_string(v) && *t && !ok; t++)
            ok = !strcmp(*t, json_string_value(v));
        if (!ok)
            return serve_bad(e, "reasoning_effort", "reasoning_effort: must be one of none, "
                                                    "minimal, low, medium, high");
    }
    return 0;
}

#define MAX_STOP 16

static int parse_stop(const json_t *body, serve_req *r, serve_error *e)
{
    const json_t *v = serve_present(body, "stop");
    if (!v)
        return 0;
    const char *stops[MAX_STOP];
    size_t n = 0;
    if (json_is_string(v)) {
        stops[n++] = json_string_value(v);
    } else if (json_is_array(v)) {
        if (json_array_size(v) > MAX_STOP)
            return serve_bad(e, "stop", "stop: at most %d stop strings", MAX_STOP);
        size_t i;
        json_t *s;
        json_array_foreach(v, i, s) {
            if (!json_is_string(s))
                return serve_bad(e, "stop", "stop[%zu]: must be a string", i);
            stops[n++] = json_string_value(s);
        }
    } else {
        return serve_bad(e, "stop", "stop: must be a string or an array of strings");
    }
    for (size_t i = 0; i < n; i++)
        if (!stops[i][0])
            return serve_bad(e, "stop", "stop: an empty stop string would end every reply at once");
    serve_req_set_stop(r, stops, n);
    return 0;
}

static int parse_logit_bias(const json_t *body, serve_req *r, int32_t n_vocab, serve_error *e)
{
    const json_t *v = serve_present(body, "logit_bias");
    if (!v)
        return 0;
    if (!json_is_object(v))
        return serve_bad(e, "logit_bias", "logit_bias: must be an object of token id -> bias");
    size_t n = json_object_size(v), k = 0;
    r->bias = n ? xmalloc(n * sizeof *r->bias) : NULL;
    const char *key;
    json_t *b;
    json_object_foreach((json_t *)v, key, b) {
        char *end;
        long long id = strtoll(key, &end, 10);
        if (!*key || *end || id < 0 || id >= n_vocab)
            return serve_bad(e, "logit_bias", "logit_bias: key '%s' is not a token id in [0, %d)",
                             key, n_vocab);
        if (!json_is_number(b))
            return serve_bad(e, "logit_bias", "logit_bias['%s']: must be a number", key);
        double d = json_number_value(b);
        if (!(d >= -100 && d <= 100))
            return serve_bad(e, "logit_bias", "logit_bias['%s']: %g is out of range [-100, 100]",
                             key, d);
        for (size_t j = 0; j < k; j++)
            if (r->bias[j].id == (int32_t)id)
                return serve_bad(e, "logit_bias", "logit_bias: token %lld given twice", id);
        r->bias[k].id = (int32_t)id;
        r->bias[k].bias = d <= -100 ? -INFINITY : (float)d; /* -100 bans, as OpenAI documents */
        k++;
    }
    r->sampling.logit_bias = r->bias;
    r->sampling.n_logit_bias = (int32_t)k;
    return 0;
}

static uint64_t fresh_seed(serve_server *s)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                 (atomic_fetch_add(&s->next_id, 1) * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31;
    return x * 0xBF58476D1CE4E5B9ull;
}

static int parse_sampling(serve_server *s, const json_t *body, serve_req *r, int32_t n_vocab,
                          serve_error *e)
{
    sampler_params *p = &r->sampling;
    /* OpenAI's defaults: temperature 1, top_p 1, no penalties. */
    p->temperature = 1;
    p->top_p = 1;
    p->penalty_last_n = -1; /* penalties see every generated token */
    int64_t top_k = 0, seed = 0;
    if (serve_field_num(body, "temperature", 0, 2, &p->temperature, e) ||
        serve_field_num(body, "top_p", 0, 1, &p->top_p, e) ||
        serve_field_int(body, "top_k", -1, INT32_MAX, &top_k, e) ||
        serve_field_num(body, "min_p", 0, 1, &p->min_p, e) ||
        serve_field_num(body, "presence_penalty", -2, 2, &p->presence_penalty, e) ||
        serve_field_num(body, "frequency_penalty", -2, 2, &p->frequency_penalty, e) ||
        serve_field_num(body, "repetition_penalty", 1e-6, 100, &p->repetition_penalty, e))
        return -1;
    p->top_k = top_k < 0 ? 0 : (int32_t)top_k; /* -1: off, as vLLM spells it */
    if (serve_present(body, "seed")) {
        if (serve_field_int(body, "seed", INT64_MIN, INT64_MAX, &seed, e) != 0)
            return -1;
        p->seed = (uint64_t)seed;
    } else {
        p->seed = fresh_seed(s);
    }
    return parse_logit_bias(body, r, n_vocab, e);
}

static int parse_stream(const json_t *body, serve_job *job, serve_error *e)
{
    if (serve_field_bool(body, "stream", &job->stream, e) != 0)
        return -1;
    const json_t *so = serve_present(body, "stream_options");
    if (!so)
        return 0;
    if (!job->stream)
        return serve_bad(e, "stream_options", "stream_options: only allowed when stream is true");
    if (!json_is_object(so))
        return serve_bad(e, "stream_options", "stream_options: must be an object");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)so, key, v) {
        if (strcmp(key, "include_usage"))
            return serve_bad(e, "stream_options", "stream_options: unknown field '%s'", key);
    }
    return serve_field_bool(so, "include_usage", &job->include_usage, e);
}

/* n, logprobs and top_logprobs. Chat: logprobs a boolean, top_logprobs
 * 0-20 and only with logprobs (as OpenAI). Completions: logprobs an
 * integer 0-5, the number of top entries (0: the sampled tokens only).
 * n: 1-16, and no more than the model's sessions, since every choice holds
 * a sequence of its own. */
static int parse_choices(serve_kind kind, const json_t *body, serve_job *job, serve_error *e)
{
    serve_req *r = job->req;
    int64_t n = 1, top = 0;
    if (serve_field_int(body, "n", 1, SERVE_MAX_CHOICES, &n, e) != 0)
        return -1;
    if (n > serve_model_max_sessions(job->model))
        return serve_bad(e, "n", "n: %lld choices need as many sessions, and model '%s' has "
                         "%d (--max-sessions)", (long long)n, job->model_name,
                         serve_model_max_sessions(job->model));
    r->n_choices = job->n_choices = (int)n;
    if (kind == SERVE_CHAT) {
        if (serve_field_bool(body, "logprobs", &r->logprobs, e) != 0 ||
            serve_field_int(body, "top_logprobs", 0, SERVE_MAX_TOP_LOGPROBS, &top, e) != 0)
            return -1;
        if (top > 0 && !r->logprobs)
            return serve_bad(e, "top_logprobs", "top_logprobs: needs \"logprobs\": true");
    } else if (serve_present(body, "logprobs")) {
        if (serve_field_int(body, "logprobs", 0, 5, &top, e) != 0)
            return -1;
        r->logprobs = 1;
    }
    r->top_logprobs = (int)top;
    return 0;
}

/* response_format: "text" (nothing to enforce), "json_object" (any JSON
 * object) or "json_schema" ({name, schema, strict, description}): the
 * output is held to the grammar while it is sampled (lib/grammar), so it
 * always parses, and validates against the schema. A schema keyword the
 * compiler does not enforce is a 400 naming it, never dropped. */
static int parse_response_format(const json_t *body, serve_req *r, serve_error *e)
{
    const json_t *v = serve_present(body, "response_format");
    if (!v)
        return 0;
    const json_t *t = json_is_object(v) ? json_object_get(v, "type") : NULL;
    if (!json_is_string(t))
        return serve_bad(e, "response_format", "response_format: must be an object with a "
                                               "\"type\": text, json_object or json_schema");
    const char *type = json_string_value(t);
    memra_err err = {{0}};
    if (!strcmp(type, "text")) {
        if (json_object_size(v) != 1)
            return serve_bad(e, "response_format", "response_format: \"text\" takes no other field");
        return 0;
    }
    if (!strcmp(type, "json_object")) {
        if (json_object_size(v) != 1)
            return serve_bad(e, "response_format",
                             "response_format: \"json_object\" takes no other field");
        r->grammar = jsch_json_object(&err);
    } else if (!strcmp(type, "json_schema")) {
        const json_t *js = json_object_get(v, "json_schema");
        const json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
        if (!json_is_object(schema))
            return serve_bad(e, "response_format.json_schema.schema",
                             "response_format.json_schema.schema: a JSON Schema object is required");
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)js, k, x)
            if (strcmp(k, "name") && strcmp(k, "schema") && strcmp(k, "strict") &&
                strcmp(k, "description"))
                return serve_bad(e, "response_format.json_schema",
                                 "response_format.json_schema: unknown field '%s'", k);
        r->grammar = jsch_compile(schema, &err);
    } else {
        return serve_bad(e, "response_format.type",
                         "response_format: type '%s' is not one of text, json_object, json_schema",
                         type);
    }
    if (!r->grammar)
        return serve_bad(e, "response_format", "response_format: %s", err.msg);
    return 0;
}

/* grammar: GBNF text (llama.cpp's field), held to while sampling; one
 * constraint per request, so it excludes a JSON response_format. */
static int parse_grammar(const json_t *body, serve_req *r, serve_error *e)
{
    const json_t *v = serve_present(body, "grammar");
    if (!v)
        return 0;
    if (!json_is_string(v))
        return serve_bad(e, "grammar", "grammar: must be GBNF text (a string)");
    if (r->grammar)
        return serve_bad(e, "grammar", "grammar: response_format already constrains the output; "
                                       "give one of them");
    memra_err err = {{0}};
    r->grammar = gram_parse_gbnf(json_string_value(v), json_string_length(v), &err);
    if (!r->grammar)
        return serve_bad(e, "grammar", "grammar: %s", err.msg);
    return 0;
}

/* The completion prompt: a string, an array of one string, token ids, or
 * an array of one array of token ids. */
static int completion_prompt(serve_model *m, const json_t *body, serve_req *r, serve_error *e)
{
    const json_t *v = json_object_get(body, "prompt");
    if (!v || json_is_null(v))
        return serve_bad(e, "prompt", "prompt: required");
    if (json_is_array(v) && json_array_size(v) == 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
        v = json_array_get(v, 0);
    if (json_is_string(v)) {
        memra_err err;
        size_t n;
        if (tok_encode(serve_model_tokenizer(m), json_string_value(v), json_string_length(v), 1,
                       1, &r->prompt, &n, &err) != 0)
            return serve_bad(e, "prompt", "prompt: %s", err.msg);
        r->n_prompt = n;
        return 0;
    }
    if (!json_is_array(v))
        return serve_bad(e, "prompt", "prompt: must be a string, an array of token ids, or an "
                                      "array of one of those");
    size_t n = json_array_size(v);
    if (n == 0)
        return serve_bad(e, "prompt", "prompt: the array is empty");
    if (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0)))
        return serve_bad(e, "prompt", "prompt: %zu prompts in one request are not supported "
                                      "(send one prompt per request)", n);
    r->prompt = xmalloc(n * sizeof *r->prompt);
    int32_t n_vocab = serve_model_n_vocab(m);
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(v, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 || json_integer_value(t) >= n_vocab)
            return serve_bad(e, "prompt", "prompt[%zu]: must be a token id in [0, %d)", i, n_vocab);
        r->prompt[i] = (int32_t)json_integer_value(t);
    }
    r->n_prompt = n;
    return 0;
}

static int chat_prompt(serve_server *s, serve_model *m, const json_t *body, const json_t *tools,
                       serve_req *r, serve_error *e)
{
    const json_t *messages = json_object_get(body, "messages");
    if (serve_check_messages(messages, e) != 0)
        return -1;
    const json_t *given = serve_present(body, "chat_template_kwargs");
    if (given && !json_is_object(given))
        return serve_bad(e, "chat_template_kwargs", "chat_template_kwargs: must be an object");
    /* reasoning_effort reaches the template as the variable of that name,
     * as Hugging Face's gpt-oss template reads it; given both ways, the
     * two must agree. */
    const json_t *effort = serve_present(body, "reasoning_effort");
    json_t *kwargs = given ? json_deep_copy(given) : NULL;
    if (effort) {
        const json_t *k = kwargs ? json_object_get(kwargs, "reasoning_effort") : NULL;
        if (k && !json_equal(k, effort)) {
            json_decref(kwargs);
            return serve_bad(e, "reasoning_effort", "reasoning_effort: '%s' disagrees with "
                             "chat_template_kwargs.reasoning_effort: give one",
                             json_string_value(effort));
        }
        if (!kwargs)
            kwargs = json_object();
        json_object_set(kwargs, "reasoning_effort", (json_t *)effort);
    }
    size_t n;
    int rc = serve_chat_tokens(m, messages, tools, 1, kwargs, 0, s->opts.allow_special_in_content,
                               &r->prompt, &n, e);
    json_decref(kwargs);
    if (rc != 0)
        return -1;
    r->n_prompt = n;
    return 0;
}

/* Whether the prompt ends inside an opened reasoning block (a template
 * that writes "<think>\n" after the assistant header). */
static int prompt_opens(const serve_model *m, const serve_req *r, const char *open)
{
    size_t k = r->n_prompt < 8 ? r->n_prompt : 8, len;
    char *text;
    memra_err err;
    if (tok_decode(serve_model_tokenizer(m), r->prompt + r->n_prompt - k, k, 0, &text, &len,
                   &err) != 0)
        return 0;
    while (len && (text[len - 1] == ' ' || text[len - 1] == '\n' || text[len - 1] == '\r'))
        len--;
    size_t n = strlen(open);
    int opens = len >= n && !memcmp(text + len - n, open, n);
    free(text);
    return opens;
}

/* Which parser a chat reply goes through (serve_tools.h: forced calls are
 * written in the Hermes form), and what the engine must write for it:
 * control tokens when the convention's markup may be made of them, the
 * reasoning markers for the token count. No tools and no reasoning: no
 * parser, the reply is content as generated. */
static void setup_reply_parser(serve_server *s, serve_model *m, const serve_tools *t,
                               int always, serve_job *job)
{
    serve_req *r = job->req;
    toolparse_format native = serve_model_tool_format(m), f;
    const char *open = NULL, *close = NULL;
    int thinks = serve_model_reasoning(m, &open, &close);
    if (t->choice == SERVE_TOOLS_REQUIRED || t->choice == SERVE_TOOLS_NAMED)
        f = TOOLPARSE_HERMES;
    else if (t->choice == SERVE_TOOLS_AUTO || native == TOOLPARSE_HARMONY)
        f = native;
    else /* no tools: only the reasoning is split, in the template's markup */
        f = native == TOOLPARSE_MISTRAL || native == TOOLPARSE_GEMMA4 ? native : TOOLPARSE_NONE;
    if (f == TOOLPARSE_NONE && !thinks && !always)
        return;
    r->keep_special = f != TOOLPARSE_NONE;
    toolparse_opts o = {.id_seed = fresh_seed(s)};
    if (thinks) {
        snprintf(r->reason_open, sizeof r->reason_open, "%s", open);
        snprintf(r->reason_close, sizeof r->reason_close, "%s", close);
        r->starts_in_reasoning = o.starts_in_reasoning =
            f != TOOLPARSE_HARMONY && prompt_opens(m, r, open);
    }
    for (int i = 0; i < job->n_choices; i++) {
        o.id_seed += 0x9E3779B97F4A7C15ull;
        job->tp[i] = toolparse_new(f, &o);
    }
}

int serve_openai_prepare(serve_server *s, serve_kind kind, const json_t *body,
                         const serve_prepare_opts *opts, serve_job *job, serve_error *e)
{
    static const serve_prepare_opts none = {0};
    serve_tools tools = {0};
    if (!opts)
        opts = &none;
    memset(job, 0, sizeof *job);
    /* the job owns what the translation made from here on, failure or not */
    job->ext = opts->ext;
    job->ext_free = opts->ext_free;
    job->kind = kind;
    if (serve_check_fields(body, kind == SERVE_CHAT ? chat_fields : completion_fields, e) != 0 ||
        serve_field_model(s, body, &job->model, e) != 0 ||
        check_unsupported(kind, body, e) != 0 || parse_stream(body, job, e) != 0)
        return -1;
    serve_model *m = job->model;
    snprintf(job->model_name, sizeof job->model_name, "%s", serve_model_alias(m));
    serve_req *r = job->req = serve_req_new();
    r->stream = job->stream;
    if (parse_choices(kind, body, job, e) != 0 || parse_response_format(body, r, e) != 0 ||
        parse_grammar(body, r, e) != 0)
        return -1;
    if (kind == SERVE_CHAT && serve_tools_parse(body, &tools, e) != 0)
        return -1;
    if (tools.choice == SERVE_TOOLS_REQUIRED || tools.choice == SERVE_TOOLS_NAMED) {
        if (r->grammar)
            return serve_bad(e, "tool_choice", "tool_choice: forced tool calls and %s both "
                             "constrain the output; give one",
                             serve_present(body, "grammar") ? "grammar" : "response_format");
        if (!(r->grammar = serve_tools_grammar(&tools, e)))
            return -1;
    }
    if (serve_field_bool(body, "ignore_eos", &r->ignore_eos, e) != 0)
        return -1;
    int64_t max_tokens = -1, max_completion = -1;
    if (serve_field_int(body, "max_tokens", 1, INT32_MAX, &max_tokens, e) != 0)
        return -1;
    if (kind == SERVE_CHAT &&
        serve_field_int(body, "max_completion_tokens", 1, INT32_MAX, &max_completion, e) != 0)
        return -1;
    if (max_tokens > 0 && max_completion > 0 && max_tokens != max_completion)
        return serve_bad(e, "max_completion_tokens", "max_tokens (%lld) and "
                         "max_completion_tokens (%lld) disagree: give one",
                         (long long)max_tokens, (long long)max_completion);
    if (max_completion > 0)
        max_tokens = max_completion;
    if (parse_sampling(s, body, r, serve_model_n_vocab(m), e) != 0 || parse_stop(body, r, e) != 0)
        return -1;
    if ((kind == SERVE_CHAT ? chat_prompt(s, m, body, tools.tools, r, e)
                            : completion_prompt(m, body, r, e)) != 0)
        return -1;

    const char *what = kind == SERVE_CHAT ? "messages" : "prompt";
    int64_t n_ctx = serve_model_n_ctx(m);
    if (r->n_prompt == 0)
        return serve_bad(e, what, "%s: the prompt is empty (no tokens, not even BOS)", what);
    if (opts->clamp_max_tokens && max_tokens > 0 && (int64_t)r->n_prompt < n_ctx &&
        (int64_t)r->n_prompt + max_tokens > n_ctx)
        max_tokens = n_ctx - (int64_t)r->n_prompt;
    if ((int64_t)r->n_prompt >= n_ctx || (max_tokens > 0 && (int64_t)r->n_prompt + max_tokens > n_ctx))
        return serve_fail(e, 400, "invalid_request_error", "context_length_exceeded", what,
                          "This model's maximum context length is %lld tokens. However, you "
                          "requested %lld tokens (%zu in the %s, %lld in the completion). Please "
                          "reduce the length of the %s or completion.",
                          (long long)n_ctx,
                          (long long)r->n_prompt + (max_tokens > 0 ? max_tokens : 1), r->n_prompt,
                          what, (long long)(max_tokens > 0 ? max_tokens : 1), what);
    if (max_tokens < 0) {
        /* OpenAI's defaults: 16 for completions, the rest of the context for chat. */
        max_tokens = n_ctx - (int64_t)r->n_prompt;
        if (kind == SERVE_COMPLETION && max_tokens > 16)
            max_tokens = 16;
    }
    r->max_tokens = (int32_t)max_tokens;
    if (kind == SERVE_CHAT && r->n_prompt)
        setup_reply_parser(s, m, &tools, opts->always_parse, job);
    /* Strict tools under auto, in the Hermes convention: each call the
     * model opens is held to the tools' schemas until it closes. */
    if (tools.choice == SERVE_TOOLS_AUTO && !r->grammar &&
        serve_model_tool_format(m) == TOOLPARSE_HERMES) {
        if (!(r->lazy_grammar = serve_tools_lazy_grammar(&tools, e)) && e->status)
            return -1;
        snprintf(r->lazy_trigger, sizeof r->lazy_trigger, "<tool_call>");
    }

    unsigned long id = atomic_fetch_add(&s->next_id, 1);
    snprintf(job->id, sizeof job->id, "%s-%016llx%08lx", kind == SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)fresh_seed(s), id & 0xffffffffUL);
    job->created = (long long)time(NULL);
    return 0;
}

static const char *finish_name(serve_finish f)
{
    return f == SERVE_FINISH_LENGTH ? "length" : "stop";
}

/* Chat usage also counts the reasoning tokens among the completion's, as
 * OpenAI's completion_tokens_details does. */
static json_t *usage_json(const serve_job *job, const serve_req_view *v)
{
    size_t p = job->req->n_prompt;
    json_t *u = json_pack("{s:I,s:I,s:I,s:{s:I}}", "prompt_tokens", (json_int_t)p,
                          "completion_tokens", (json_int_t)v->n_generated, "total_tokens",
                          (json_int_t)(p + v->n_generated), "prompt_tokens_details",
                          "cached_tokens", (json_int_t)v->n_cached);
    if (job->kind == SERVE_CHAT)
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{s:I}", "reasoning_tokens", (json_int_t)v->n_reasoning));
    return u;
}

static json_t *envelope(const serve_job *job, const char *object)
{
    return json_pack("{s:s,s:s,s:I,s:s}", "id", job->id, "object", object, "created",
                     (json_int_t)job->created, "model", job->model_name);
}

/* A token's text for the logprobs lists: its bytes when they are UTF-8,
 * else OpenAI's spelling of a partial character, "bytes:\xe2\x80". */
static json_t *token_string(const char *b, size_t len)
{
    json_t *t = json_stringn(b, len);
    if (t)
        return t;
    strbuf sb;
    sb_init(&sb);
    sb_puts(&sb, "bytes:");
    for (size_t i = 0; i < len; i++) {
        char hex[8];
        snprintf(hex, sizeof hex, "\\x%02x", (unsigned char)b[i]);
        sb_puts(&sb, hex);
    }
    t = json_stringn(sb_str(&sb), sb.len);
    sb_free(&sb);
    return t;
}

static json_t *bytes_array(const char *b, size_t len)
{
    json_t *a = json_array();
    for (size_t i = 0; i < len; i++)
        json_array_append_new(a, json_integer((unsigned char)b[i]));
    return a;
}

static json_t *tok_entry(const serve_choice *c, const serve_tok_lp *t)
{
    const char *b = c->bytes.data + t->off;
    return json_pack("{s:o,s:f,s:o}", "token", token_string(b, t->len), "logprob",
                     (double)t->logprob, "bytes", bytes_array(b, t->len));
}

/* The choice's logprobs in OpenAI's shape: chat {"content": [{token,
 * logprob, bytes, top_logprobs}]}, completions {tokens, token_logprobs,
 * top_logprobs, text_offset}; null when the request did not ask. */
static json_t *logprobs_json(serve_job *job, int i)
{
    const serve_choice *c = &job->got[i];
    if (!job->req->logprobs)
        return json_null();
    if (job->kind == SERVE_CHAT) {
        json_t *content = json_array();
        for (size_t k = 0; k < c->n_lp; k++) {
            const serve_logprob *lp = &c->lp[k];
            json_t *e = tok_entry(c, &lp->tok), *top = json_array();
            for (int32_t j = 0; j < lp->n_top; j++)
                json_array_append_new(top, tok_entry(c, &lp->top[j]));
            json_object_set_new(e, "top_logprobs", top);
            json_array_append_new(content, e);
        }
        return json_pack("{s:o,s:n}", "content", content, "refusal");
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(),
           *offs = json_array();
    for (size_t k = 0; k < c->n_lp; k++) {
        const serve_logprob *lp = &c->lp[k];
        json_array_append_new(tokens, token_string(c->bytes.data + lp->tok.off, lp->tok.len));
        json_array_append_new(lps, json_real(lp->tok.logprob));
        json_t *top = json_object();
        for (int32_t j = 0; j < lp->n_top; j++) {
            json_t *t = token_string(c->bytes.data + lp->top[j].off, lp->top[j].len);
            if (!json_object_get(top, json_string_value(t))) /* two ids, one text: the likelier */
                json_object_set_new(top, json_string_value(t), json_real(lp->top[j].logprob));
            json_decref(t);
        }
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)job->text_offset[i]));
        job->text_offset[i] += lp->tok.len;
    }
    return json_pack("{s:o,s:o,s:o,s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

json_t *serve_openai_response(serve_job *job, const serve_req_view *v)
{
    json_t *root = envelope(job, job->kind == SERVE_CHAT ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (int i = 0; i < job->n_choices; i++) {
        const serve_choice *c = &job->got[i];
        const char *fin = finish_name(v->choice_finish[i]);
        json_t *choice;
        if (job->kind == SERVE_CHAT && job->tp[i]) {
            /* the whole reply through the parser: content, reasoning, calls */
            toolparse_result res;
            toolparse_feed(job->tp[i], sb_str(&c->text), c->text.len, NULL, NULL);
            toolparse_finish(job->tp[i], NULL, NULL, &res);
            if (res.n_calls && v->choice_finish[i] == SERVE_FINISH_STOP)
                fin = "tool_calls";
            choice = json_pack("{s:i,s:o,s:o,s:s}", "index", i, "message",
                               toolparse_result_message(&res), "logprobs", logprobs_json(job, i),
                               "finish_reason", fin);
            toolparse_result_free(&res);
        } else if (job->kind == SERVE_CHAT)
            choice = json_pack("{s:i,s:{s:s,s:s%},s:o,s:s}", "index", i, "message", "role",
                               "assistant", "content", sb_str(&c->text), c->text.len, "logprobs",
                               logprobs_json(job, i), "finish_reason", fin);
        else
            choice = json_pack("{s:s%,s:i,s:o,s:s}", "text", sb_str(&c->text), c->text.len,
                               "index", i, "logprobs", logprobs_json(job, i), "finish_reason",
                               fin);
        json_array_append_new(choices, choice);
    }
    json_object_set_new(root, "choices", choices);
    json_object_set_new(root, "usage", usage_json(job, v));
    return root;
}

static void sse_event(strbuf *out, json_t *j)
{
    char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT);
    sb_puts(out, "data: ");
    sb_puts(out, s);
    sb_puts(out, "\n\n");
    free(s);
    json_decref(j);
}

/* A chunk with choice i; delta (chat) or text (completion) given. */
static json_t *chunk(const serve_job *job, int i, json_t *delta_or_text, json_t *logprobs,
                     const char *finish)
{
    json_t *root, *choice;
    if (!logprobs)
        logprobs = json_null();
    if (job->kind == SERVE_CHAT) {
        root = envelope(job, "chat.completion.chunk");
        choice = json_pack("{s:i,s:o,s:o}", "index", i, "delta", delta_or_text, "logprobs",
                           logprobs);
    } else {
        root = envelope(job, "text_completion");
        choice = json_pack("{s:o,s:i,s:o}", "text", delta_or_text, "index", i, "logprobs",
                           logprobs);
    }
    json_object_set_new(choice, "finish_reason", finish ? json_string(finish) : json_null());
    json_object_set_new(root, "choices", json_pack("[o]", choice));
    if (job->include_usage)
        json_object_set_new(root, "usage", json_null());
    return root;
}

void serve_openai_sse_start(serve_job *job, strbuf *out)
{
    job->sent_role = 1;
    for (int i = 0; job->kind == SERVE_CHAT && i < job->n_choices; i++)
        sse_event(out, chunk(job, i, json_pack("{s:s,s:s}", "role", "assistant", "content", ""),
                             NULL, NULL));
}

/* A parsed stream: each parser event is a delta; the log-probabilities of
 * the tokens polled ride on the first of them (or on an empty delta). */
typedef struct {
    serve_job *job;
    int choice;
    strbuf *out;
    json_t *lp; /* not sent yet, or NULL */
} parsed_stream;

static void on_parse_event(void *user, const toolparse_event *ev)
{
    parsed_stream *ps = user;
    json_t *delta = NULL;
    switch (ev->kind) {
    case TOOLPARSE_EV_CONTENT:
    case TOOLPARSE_EV_REASONING:
        delta = json_pack("{s:s%}", ev->kind == TOOLPARSE_EV_CONTENT ? "content"
                                                                     : "reasoning_content",
                          ev->text, ev->len);
        break;
    case TOOLPARSE_EV_CALL_START:
        ps->job->n_calls[ps->choice]++;
        delta = json_pack("{s:[{s:i,s:s,s:s,s:{s:s,s:s}}]}", "tool_calls", "index", ev->index,
                          "id", ev->id, "type", "function", "function", "name", ev->name,
                          "arguments", "");
        break;
    case TOOLPARSE_EV_CALL_ARGS:
        delta = json_pack("{s:[{s:i,s:{s:s%}}]}", "tool_calls", "index", ev->index, "function",
                          "arguments", ev->text, ev->len);
        break;
    case TOOLPARSE_EV_CALL_END:
        return;
    }
    if (!delta)
        return; /* text the parser passed is whole UTF-8; never send a broken chunk */
    sse_event(ps->out, chunk(ps->job, ps->choice, delta, ps->lp, NULL));
    ps->lp = NULL;
}

static void sse_parsed(serve_job *job, int i, strbuf *out, const serve_req_view *v)
{
    serve_choice *c = &job->got[i];
    parsed_stream ps = {job, i, out, c->n_lp ? logprobs_json(job, i) : NULL};
    if (c->text.len)
        toolparse_feed(job->tp[i], sb_str(&c->text), c->text.len, on_parse_event, &ps);
    sb_clear(&c->text);
    c->n_lp = 0;
    sb_clear(&c->bytes);
    if (v->finish != SERVE_FINISH_ERROR && v->choice_finish[i] != SERVE_FINISH_NONE &&
        !job->sent_finish[i]) {
        toolparse_result res;
        toolparse_finish(job->tp[i], on_parse_event, &ps, &res);
        toolparse_result_free(&res);
        if (ps.lp)
            sse_event(out, chunk(job, i, json_object(), ps.lp, NULL));
        job->sent_finish[i] = 1;
        const char *fin = job->n_calls[i] && v->choice_finish[i] == SERVE_FINISH_STOP
                              ? "tool_calls" : finish_name(v->choice_finish[i]);
        sse_event(out, chunk(job, i, json_object(), NULL, fin));
    } else if (ps.lp) {
        sse_event(out, chunk(job, i, json_object(), ps.lp, NULL));
    }
}

int serve_openai_sse_update(serve_job *job, strbuf *out, const serve_req_view *v)
{
    size_t len0 = out->len;
    for (int i = 0; i < job->n_choices; i++) {
        serve_choice *c = &job->got[i];
        if (job->tp[i]) {
            sse_parsed(job, i, out, v);
            continue;
        }
        if (c->text.len || c->n_lp) {
            json_t *t = json_stringn(sb_str(&c->text), c->text.len);
            /* the detokenizer only emits valid UTF-8; never send a broken chunk */
            if (t) {
                json_t *lp = c->n_lp ? logprobs_json(job, i) : NULL;
                sse_event(out, chunk(job, i, job->kind == SERVE_CHAT
                                                 ? json_pack("{s:o}", "content", t) : t,
                                     lp, NULL));
            }
            sb_clear(&c->text);
            c->n_lp = 0;
            sb_clear(&c->bytes);
        }
        if (v->finish != SERVE_FINISH_ERROR && v->choice_finish[i] != SERVE_FINISH_NONE &&
            !job->sent_finish[i]) {
            job->sent_finish[i] = 1;
            sse_event(out, chunk(job, i, job->kind == SERVE_CHAT ? json_object() : json_string(""),
                                 NULL, finish_name(v->choice_finish[i])));
        }
    }
    if (v->finish == SERVE_FINISH_NONE)
        return out->len > len0;
    if (v->finish == SERVE_FINISH_ERROR) {
        serve_error e;
        serve_fail(&e, 500, "server_error", NULL, NULL, "%s", v->error);
        sse_event(out, serve_error_json(&e));
    } else if (job->include_usage) {
        json_t *root = envelope(job, job->kind == SERVE_CHAT ? "chat.completion.chunk"
                                                             : "text_completion");
        json_object_set_new(root, "choices", json_array());
        json_object_set_new(root, "usage", usage_json(job, v));
        sse_event(out, root);
    }
    sb_puts(out, "data: [DONE]\n\n");
    return 1;
}
