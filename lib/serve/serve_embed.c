/* POST /v1/embeddings: OpenAI's embeddings API on a model served with
 * --task embed.
 *
 * `input` is a string, an array of strings, an array of token ids (one
 * input) or an array of arrays of token ids, at most SERVE_EMBED_MAX_INPUTS
 * of them. Text is encoded as transformers' tokenizer(text) does: with
 * the tokenizer's special tokens (BOS / EOS where its config adds them,
 * as Qwen3-Embedding's appends <|endoftext|>) and special-token text
 * parsed; token ids are used as given. Each input is pooled as the
 * checkpoint says (serve_model_pooling) and L2-normalized; `dimensions`
 * keeps the first d floats and normalizes again (Matryoshka truncation,
 * embed_pool_result). `encoding_format` "base64" sends each vector's
 * little-endian float32 bytes in base64, as OpenAI does. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/base64.h"
#include "core/check.h"
#include "serve/serve_internal.h"

#define SERVE_EMBED_MAX_INPUTS 32

typedef struct {
    int base64;
} embed_ext;

static void embed_ext_free(void *p) { free(p); }

/* One float vector as the response carries it. The wire format is
 * little-endian, as is every host memra builds for. */
static json_t *vector_json(const float *v, int64_t n, int base64)
{
    if (base64) {
        strbuf sb;
        sb_init(&sb);
        base64_encode(&sb, v, (size_t)n * sizeof *v);
        json_t *s = json_stringn(sb_str(&sb), sb.len);
        sb_free(&sb);
        return s;
    }
    json_t *a = json_array();
    for (int64_t i = 0; i < n; i++)
        json_array_append_new(a, json_real((double)v[i]));
    return a;
}

static json_t *embed_response(serve_job *job, const serve_req_view *v)
{
    (void)v;
    const serve_work *w = job->req->work;
    const embed_ext *x = job->ext;
    json_t *data = json_array();
    for (int i = 0; i < w->n_inputs; i++)
        json_array_append_new(
            data, json_pack("{s:s,s:i,s:o}", "object", "embedding", "index", i, "embedding",
                            vector_json(w->vecs + (size_t)i * (size_t)w->dims, w->dims,
                                        x->base64)));
    return json_pack("{s:s,s:o,s:s,s:{s:I,s:I}}", "object", "list", "data", data, "model",
                     job->model_name, "usage", "prompt_tokens", (json_int_t)w->n_tokens,
                     "total_tokens", (json_int_t)w->n_tokens);
}

static const serve_dialect embed_dialect = {.error_json = serve_error_json,
                                            .response = embed_response};

/* One input of token ids, each in the vocabulary. */
static int ids_input(serve_model *m, const json_t *a, const char *param, int32_t **ids,
                     size_t *n, serve_error *e)
{
    size_t k = json_array_size(a);
    int32_t n_vocab = serve_model_n_vocab(m);
    if (k == 0)
        return serve_bad(e, param, "%s: an empty array of token ids (nothing to embed)", param);
    *ids = xmalloc(k * sizeof **ids);
    *n = k;
    for (size_t j = 0; j < k; j++) {
        const json_t *t = json_array_get(a, j);
        if (!json_is_integer(t) || json_integer_value(t) < 0 ||
            json_integer_value(t) >= n_vocab)
            return serve_bad(e, param, "%s[%zu]: must be a token id in [0, %d)", param, j,
                             n_vocab);
        (*ids)[j] = (int32_t)json_integer_value(t);
    }
    return 0;
}

static int text_input(serve_model *m, const json_t *s, const char *param, int32_t **ids,
                      size_t *n, serve_error *e)
{
    if (json_string_length(s) == 0)
        return serve_bad(e, param, "%s: an empty string (nothing to embed)", param);
    memra_err err;
    if (tok_encode_cached(serve_model_tokenizer(m), serve_model_tok_cache(m),
                          json_string_value(s), json_string_length(s), 1, 1, ids, n,
                          &err) != 0)
        return serve_bad(e, param, "%s: %s", param, err.msg);
    if (*n == 0)
        return serve_bad(e, param, "%s: encodes to no tokens", param);
    return 0;
}

/* The inputs' forms, as OpenAI takes them: a string, [string...],
 * [id...] (one input), [[id...]...]. An array mixing forms is a 400
 * naming the first element that differs. */
static int parse_input(serve_model *m, const json_t *body, serve_work **out, serve_error *e)
{
    const json_t *v = serve_present(body, "input");
    if (!v)
        return serve_bad(e, "input", "input: required (a string, an array of strings, an array "
                                     "of token ids or an array of arrays of token ids)");
    int one_ids = 0;
    size_t n_in = 1;
    if (json_is_array(v)) {
        const json_t *first = json_array_get(v, 0);
        if (json_array_size(v) == 0)
            return serve_bad(e, "input", "input: the array is empty (nothing to embed)");
        one_ids = json_is_integer(first);
        if (!one_ids && !json_is_string(first) && !json_is_array(first))
            return serve_bad(e, "input", "input[0]: must be a string, a token id or an array of "
                                         "token ids");
        n_in = one_ids ? 1 : json_array_size(v);
        for (size_t i = 1; !one_ids && i < json_array_size(v); i++) {
            const json_t *x = json_array_get(v, i);
            if (json_typeof(x) != json_typeof(first)) {
                char param[32];
                snprintf(param, sizeof param, "input[%zu]", i);
                return serve_bad(e, param, "%s: must be %s, as input[0] is", param,
                                 json_is_string(first) ? "a string" : "an array of token ids");
            }
        }
    } else if (!json_is_string(v)) {
        return serve_bad(e, "input", "input: must be a string, an array of strings, an array "
                                     "of token ids or an array of arrays of token ids");
    }
    if (n_in > SERVE_EMBED_MAX_INPUTS)
        return serve_bad(e, "input", "input: %zu inputs, at most %d a request", n_in,
                         SERVE_EMBED_MAX_INPUTS);
    serve_work *w = *out = serve_work_new(SERVE_WORK_EMBED, (int)n_in, serve_model_dim(m));
    int64_t n_ctx = serve_model_n_ctx(m);
    for (size_t i = 0; i < n_in; i++) {
        char param[32];
        const json_t *x = json_is_array(v) && !one_ids ? json_array_get(v, i) : v;
        if (json_is_array(v) && !one_ids)
            snprintf(param, sizeof param, "input[%zu]", i);
        else
            snprintf(param, sizeof param, "input");
        if ((json_is_string(x) ? text_input(m, x, param, &w->ids[i], &w->n_ids[i], e)
                               : ids_input(m, x, param, &w->ids[i], &w->n_ids[i], e)) != 0)
            return -1;
        if ((int64_t)w->n_ids[i] > n_ctx)
            return serve_fail(e, 400, "invalid_request_error", "context_length_exceeded", param,
                              "%s: %zu tokens, more than the model's context of %lld tokens",
                              param, w->n_ids[i], (long long)n_ctx);
        w->n_tokens += w->n_ids[i];
    }
    return 0;
}

int serve_embed_prepare(serve_server *s, const json_t *body, const char *path, serve_job *job,
                        serve_error *e)
{
    static const char *const fields[] = {"model", "input", "encoding_format", "dimensions",
                                         "user", NULL};
    memset(job, 0, sizeof *job);
    if (serve_check_fields(body, fields, e) != 0 ||
        serve_field_model(s, body, &job->model, e) != 0 ||
        serve_check_task(job->model, SERVE_TASK_EMBED, path, e) != 0)
        return -1;
    serve_model *m = job->model;
    snprintf(job->model_name, sizeof job->model_name, "%s", serve_model_alias(m));
    const json_t *v;
    if ((v = serve_present(body, "user")) && !json_is_string(v))
        return serve_bad(e, "user", "user: must be a string");
    int base64 = 0;
    if ((v = serve_present(body, "encoding_format"))) {
        if (!json_is_string(v) || (strcmp(json_string_value(v), "float") &&
                                   strcmp(json_string_value(v), "base64")))
            return serve_bad(e, "encoding_format", "encoding_format: must be \"float\" or "
                                                   "\"base64\"");
        base64 = !strcmp(json_string_value(v), "base64");
    }
    int64_t dims = serve_model_dim(m);
    if (serve_field_int(body, "dimensions", 1, dims, &dims, e) != 0)
        return -1;
    serve_work *w = NULL;
    if (parse_input(m, body, &w, e) != 0) {
        serve_work_free(w);
        return -1;
    }
    w->dims = dims; /* the vectors were sized for the model's; fewer fit */
    job->req = serve_req_new();
    job->req->work = w;
    job->n_choices = 1;
    job->dialect = &embed_dialect;
    embed_ext *x = xcalloc(1, sizeof *x);
    x->base64 = base64;
    job->ext = x;
    job->ext_free = embed_ext_free;
    return 0;
}
