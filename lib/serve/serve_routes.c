/* The endpoints besides generation: /v1/models, /tokenize, /detokenize,
 * /apply-template and /metrics. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/config.h"
#include "serve/serve_internal.h"
#include "serve/serve_tools.h"

static json_t *fail_json(const serve_error *e, int *status)
{
    *status = e->status;
    return serve_error_json(e);
}

/* An alias: its task (chat, embed, rerank), whether it chats (a chat
 * model with a template), the parameters its endpoints take; an embed
 * model's vector length and pooling. */
static json_t *model_json(serve_model *m)
{
    static const char *const chat_params[] = {
        "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "min_p", "seed",
        "stop", "presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias",
        "stream", "stream_options", "chat_template_kwargs", "ignore_eos", "n", "logprobs",
        "top_logprobs", "reasoning_effort", NULL,
    };
    static const char *const embed_params[] = {"input", "encoding_format", "dimensions", "user",
                                               NULL};
    static const char *const rerank_params[] = {"query", "documents", "top_n",
                                                "return_documents", "instruction", NULL};
    serve_task task = serve_model_task(m);
    const char *const *params = task == SERVE_TASK_EMBED    ? embed_params
                                : task == SERVE_TASK_RERANK ? rerank_params
                                                            : chat_params;
    json_t *sp = json_array();
    for (const char *const *p = params; *p; p++)
        json_array_append_new(sp, json_string(*p));
    const char *why;
    json_t *j = json_pack("{s:s,s:s,s:i,s:s,s:I,s:I,s:s,s:b,s:o}", "id", serve_model_alias(m),
                          "object", "model", "created", 0, "owned_by", "memra", "context_length",
                          (json_int_t)serve_model_n_ctx(m), "vocab_size",
                          (json_int_t)serve_model_n_vocab(m), "task", serve_task_name(task),
                          "chat", task == SERVE_TASK_CHAT && serve_model_template(m, &why) != NULL,
                          "supported_parameters", sp);
    if (task == SERVE_TASK_EMBED) {
        int p = serve_model_pooling(m);
        json_object_set_new(j, "dimensions", json_integer((json_int_t)serve_model_dim(m)));
        json_object_set_new(j, "pooling", json_string(p == MODEL_POOL_MEAN  ? "mean"
                                                      : p == MODEL_POOL_CLS ? "cls"
                                                                            : "last"));
    }
    return j;
}

json_t *serve_route_models(serve_server *s, const char *one, int *status)
{
    *status = 200;
    if (one) {
        serve_model *m = serve_find_model(s, one);
        if (m)
            return model_json(m);
        serve_error e;
        serve_fail(&e, 404, "invalid_request_error", "model_not_found", "model",
                   "The model '%s' does not exist", one);
        return fail_json(&e, status);
    }
    json_t *data = json_array();
    for (int i = 0; i < s->n_models; i++)
        json_array_append_new(data, model_json(s->models[i]));
    return json_pack("{s:s,s:o}", "object", "list", "data", data);
}

static json_t *ids_json(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer(ids[i]));
    return a;
}

json_t *serve_route_tokenize(serve_server *s, const json_t *body, int *status)
{
    static const char *const fields[] = {"model", "prompt", "messages", "add_special",
                                         "add_generation_prompt", "chat_template_kwargs", NULL};
    serve_error e;
    serve_model *m;
    if (serve_check_fields(body, fields, &e) != 0 || serve_field_model(s, body, &m, &e) != 0)
        return fail_json(&e, status);
    const json_t *prompt = json_object_get(body, "prompt");
    const json_t *messages = json_object_get(body, "messages");
    if (!!prompt == !!messages) {
        serve_bad(&e, prompt ? "messages" : "prompt", "give \"prompt\" (text) or \"messages\" "
                                                       "(rendered through the chat template), "
                                                       "one of them");
        return fail_json(&e, status);
    }
    int add_special = prompt != NULL, add_gen = 1;
    if (serve_field_bool(body, "add_special", &add_special, &e) != 0 ||
        serve_field_bool(body, "add_generation_prompt", &add_gen, &e) != 0)
        return fail_json(&e, status);
    size_t n;
    int32_t *ids;
    if (prompt) {
        if (!json_is_string(prompt)) {
            serve_bad(&e, "prompt", "prompt: must be a string");
            return fail_json(&e, status);
        }
        memra_err err;
        if (tok_encode(serve_model_tokenizer(m), json_string_value(prompt),
                       json_string_length(prompt), add_special, 1, &ids, &n, &err) != 0) {
            serve_bad(&e, "prompt", "%s", err.msg);
            return fail_json(&e, status);
        }
    } else {
        /* The ids a chat request with these messages would get. */
        const json_t *kwargs = json_object_get(body, "chat_template_kwargs");
        if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) {
            serve_bad(&e, "chat_template_kwargs", "chat_template_kwargs: must be an object");
            return fail_json(&e, status);
        }
        if (serve_check_messages(messages, &e) != 0 ||
            serve_chat_tokens(m, messages, NULL, add_gen, json_is_object(kwargs) ? kwargs : NULL,
                              add_special, s->opts.allow_special_in_content, &ids, &n, &e) != 0)
            return fail_json(&e, status);
    }
    json_t *out = json_pack("{s:o,s:I,s:I}", "tokens", ids_json(ids, n), "count", (json_int_t)n,
                            "max_model_len", (json_int_t)serve_model_n_ctx(m));
    free(ids);
    *status = 200;
    return out;
}

json_t *serve_route_detokenize(serve_server *s, const json_t *body, int *status)
{
    static const char *const fields[] = {"model", "tokens", "skip_special", NULL};
    serve_error e;
    serve_model *m;
    int skip = 0;
    if (serve_check_fields(body, fields, &e) != 0 || serve_field_model(s, body, &m, &e) != 0 ||
        serve_field_bool(body, "skip_special", &skip, &e) != 0)
        return fail_json(&e, status);
    const json_t *tokens = json_object_get(body, "tokens");
    if (!json_is_array(tokens)) {
        serve_bad(&e, "tokens", "tokens: required, an array of token ids");
        return fail_json(&e, status);
    }
    size_t n = json_array_size(tokens);
    int32_t *ids = xmalloc((n ? n : 1) * sizeof *ids);
    for (size_t i = 0; i < n; i++) {
        const json_t *t = json_array_get(tokens, i);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) > INT32_MAX) {
            free(ids);
            serve_bad(&e, "tokens", "tokens[%zu]: must be a token id (a non-negative integer)", i);
            return fail_json(&e, status);
        }
        ids[i] = (int32_t)json_integer_value(t);
    }
    char *text;
    size_t len;
    memra_err err;
    int rc = tok_decode(serve_model_tokenizer(m), ids, n, skip, &text, &len, &err);
    free(ids);
    if (rc != 0) {
        serve_bad(&e, "tokens", "tokens: %s", err.msg);
        return fail_json(&e, status);
    }
    json_t *out = json_pack("{s:s%}", "text", text, len);
    free(text);
    *status = 200;
    return out;
}

json_t *serve_route_apply_template(serve_server *s, const json_t *body, int *status)
{
    static const char *const fields[] = {"model", "messages", "add_generation_prompt",
                                         "chat_template_kwargs", "tools", NULL};
    serve_error e;
    serve_model *m;
    int add_gen = 1;
    if (serve_check_fields(body, fields, &e) != 0 || serve_field_model(s, body, &m, &e) != 0 ||
        serve_field_bool(body, "add_generation_prompt", &add_gen, &e) != 0)
        return fail_json(&e, status);
    const json_t *messages = json_object_get(body, "messages");
    const json_t *kwargs = json_object_get(body, "chat_template_kwargs");
    if (kwargs && !json_is_null(kwargs) && !json_is_object(kwargs)) {
        serve_bad(&e, "chat_template_kwargs", "chat_template_kwargs: must be an object");
        return fail_json(&e, status);
    }
    char *text;
    serve_tools tools;
    if (serve_check_messages(messages, &e) != 0 || serve_tools_parse(body, &tools, &e) != 0 ||
        serve_render_chat(m, messages, tools.tools, add_gen, json_is_object(kwargs) ? kwargs : NULL, &text,
                          &e) != 0)
        return fail_json(&e, status);
    json_t *out = json_pack("{s:s}", "prompt", text);
    free(text);
    *status = 200;
    return out;
}

typedef struct {
    const char *name, *type, *help;
} family;

void serve_route_metrics(serve_server *s, strbuf *out)
{
    serve_metrics_render(s->metrics, out);
    serve_prom_family(out, "memra_http_requests_in_flight", "gauge",
                      "HTTP requests received and not yet answered in full (this one included).");
    sb_printf(out, "memra_http_requests_in_flight %ld\n", (long)atomic_load(&s->inflight));
    int n = s->n_models;
    serve_model_stats *st = xcalloc((size_t)(n ? n : 1), sizeof *st);
    for (int i = 0; i < n; i++)
        serve_model_get_stats(s->models[i], &st[i]);
    static const family gauges[] = {
        {"memra_requests_running", "gauge", "Sequences in use, prefill or decode (a request of n choices holds n)."},
        {"memra_requests_waiting", "gauge", "Sequences queued (a request of n choices waits for n)."},
        {"memra_kv_blocks_used", "gauge", "KV cache blocks held by running sequences."},
        {"memra_kv_blocks_total", "gauge", "KV cache blocks in the pool."},
        {"memra_prompt_tokens_total", "counter", "Prompt tokens of the requests started."},
        {"memra_generation_tokens_total", "counter", "Tokens generated."},
        {"memra_prefix_cache_hit_tokens_total", "counter", "Prompt tokens read from the prefix cache instead of prefilled."},
        {"memra_prefix_cache_miss_tokens_total", "counter", "Prompt tokens prefilled (not in the prefix cache)."},
        {"memra_prefix_cache_evictions_total", "counter", "Cached KV blocks whose room was taken back."},
        {"memra_prefix_cache_blocks", "gauge", "KV blocks in the prefix cache (held by requests or idle)."},
        {"memra_prefix_cache_idle_blocks", "gauge", "Cached KV blocks no request holds (evictable)."},
    };
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(gauges); f++) {
        serve_prom_family(out, gauges[f].name, gauges[f].type, gauges[f].help);
        for (int i = 0; i < n; i++) {
            long long v = f == 0 ? st[i].running : f == 1 ? st[i].waiting
                        : f == 2 ? st[i].kv_blocks_used : f == 3 ? st[i].kv_blocks_total
                        : f == 4 ? (long long)st[i].prompt_tokens
                        : f == 5 ? (long long)st[i].generated_tokens
                        : f == 6 ? (long long)st[i].prompt_cached_tokens
                        : f == 7 ? (long long)(st[i].prompt_tokens - st[i].prompt_cached_tokens)
                        : f == 8 ? (long long)st[i].prefix.evictions
                        : f == 9 ? st[i].prefix.indexed
                                 : st[i].prefix.idle;
            sb_printf(out, "%s{model=\"", gauges[f].name);
            serve_prom_label(out, serve_model_alias(s->models[i]));
            sb_printf(out, "\"} %lld\n", v);
        }
    }
    serve_prom_family(out, "memra_requests_finished_total", "counter",
                      "Generation requests ended, by reason (stop, length, error, cancelled).");
    for (int i = 0; i < n; i++) {
        static const char *const reasons[] = {"stop", "length", "error", "cancelled"};
        uint64_t v[] = {st[i].finished_stop, st[i].finished_length, st[i].finished_error,
                        st[i].cancelled};
        for (int r = 0; r < 4; r++) {
            sb_puts(out, "memra_requests_finished_total{model=\"");
            serve_prom_label(out, serve_model_alias(s->models[i]));
            sb_printf(out, "\",reason=\"%s\"} %llu\n", reasons[r], (unsigned long long)v[r]);
        }
    }
    serve_prom_family(out, "memra_embed_requests_total", "counter",
                      "Embeddings and rerank requests ended, by reason (ok, error, cancelled).");
    for (int i = 0; i < n; i++) {
        static const char *const reasons[] = {"ok", "error", "cancelled"};
        uint64_t v[] = {st[i].work_ok, st[i].work_error, st[i].work_cancelled};
        if (serve_model_task(s->models[i]) == SERVE_TASK_CHAT)
            continue;
        for (int r = 0; r < 3; r++) {
            sb_puts(out, "memra_embed_requests_total{model=\"");
            serve_prom_label(out, serve_model_alias(s->models[i]));
            sb_printf(out, "\",task=\"%s\",reason=\"%s\"} %llu\n",
                      serve_task_name(serve_model_task(s->models[i])), reasons[r],
                      (unsigned long long)v[r]);
        }
    }
    serve_prom_family(out, "memra_embed_inputs_total", "counter",
                      "Embeddings inputs pooled and rerank documents scored.");
    for (int i = 0; i < n; i++) {
        if (serve_model_task(s->models[i]) == SERVE_TASK_CHAT)
            continue;
        sb_puts(out, "memra_embed_inputs_total{model=\"");
        serve_prom_label(out, serve_model_alias(s->models[i]));
        sb_printf(out, "\",task=\"%s\"} %llu\n", serve_task_name(serve_model_task(s->models[i])),
                  (unsigned long long)st[i].work_inputs);
    }
    serve_prom_family(out, "memra_embed_steps_total", "counter",
                      "Forward steps the embeddings and rerank inputs ran in (each packs up to "
                      "a prefill chunk of one request's inputs).");
    for (int i = 0; i < n; i++) {
        if (serve_model_task(s->models[i]) == SERVE_TASK_CHAT)
            continue;
        sb_puts(out, "memra_embed_steps_total{model=\"");
        serve_prom_label(out, serve_model_alias(s->models[i]));
        sb_printf(out, "\",task=\"%s\"} %llu\n", serve_task_name(serve_model_task(s->models[i])),
                  (unsigned long long)st[i].work_steps);
    }
    static const struct {
        const char *name, *help;
    } spec[] = {
        {"memra_spec_drafted_tokens_total",
         "Draft tokens proposed and verified by speculative decoding (models with a drafter)."},
        {"memra_spec_accepted_tokens_total",
         "Of the draft tokens verified, those the model accepted."},
        {"memra_spec_rounds_total", "Speculation rounds run (one per request per round)."},
        {"memra_spec_steps_total",
         "Forward steps of the model the rounds' verify rows took (rounds of several requests "
         "share a step)."},
    };
    for (int f = 0; f < 4; f++) {
        serve_prom_family(out, spec[f].name, "counter", spec[f].help);
        for (int i = 0; i < n; i++) {
            if (!st[i].speculates)
                continue;
            sb_printf(out, "%s{model=\"", spec[f].name);
            serve_prom_label(out, serve_model_alias(s->models[i]));
            sb_printf(out, "\"} %llu\n",
                      (unsigned long long)(f == 0 ? st[i].spec_drafted
                                           : f == 1 ? st[i].spec_accepted
                                           : f == 2 ? st[i].spec_rounds
                                                    : st[i].spec_steps));
        }
    }
    serve_prom_family(out, "memra_time_to_first_token_seconds", "histogram",
                      "From the request's arrival to its first generated token.");
    for (int i = 0; i < n; i++)
        serve_prom_histo(out, "memra_time_to_first_token_seconds",
                         serve_model_alias(s->models[i]), &st[i].ttft);
    serve_prom_family(out, "memra_inter_token_latency_seconds", "histogram",
                      "Between consecutive generated tokens of one request.");
    for (int i = 0; i < n; i++)
        serve_prom_histo(out, "memra_inter_token_latency_seconds",
                         serve_model_alias(s->models[i]), &st[i].itl);
    free(st);
}
