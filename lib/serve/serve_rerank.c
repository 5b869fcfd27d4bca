/* POST /v1/rerank: the request, its prompts and the response
 * (serve_rerank.h says how a document is scored). */
#include "serve/serve_rerank.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "serve/serve_internal.h"

#define RERANK_PREFIX                                                                          \
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query " \
    "and the Instruct provided. Note that the answer can only be \"yes\" or \"no\"."           \
    "<|im_end|>\n<|im_start|>user\n"
#define RERANK_SUFFIX "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"

static int one_token(const tokenizer *t, const char *word, int32_t *id, memra_err *err)
{
    int32_t *ids = NULL;
    size_t n = 0;
    if (tok_encode(t, word, strlen(word), 0, 0, &ids, &n, err) != 0)
        return -1;
    int32_t got = n == 1 ? ids[0] : -1;
    free(ids);
    if (n != 1)
        return memra_fail(err, "\"%s\" is %zu tokens in this tokenizer; a reranker of "
                          "Qwen3-Reranker's kind answers it as one", word, n);
    *id = got;
    return 0;
}

int serve_rerank_tmpl_init(const tokenizer *t, serve_rerank_tmpl *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    if (tok_encode(t, RERANK_PREFIX, strlen(RERANK_PREFIX), 0, 1, &out->prefix, &out->n_prefix,
                   err) != 0 ||
        tok_encode(t, RERANK_SUFFIX, strlen(RERANK_SUFFIX), 0, 1, &out->suffix, &out->n_suffix,
                   err) != 0 ||
        one_token(t, "yes", &out->yes, err) != 0 || one_token(t, "no", &out->no, err) != 0) {
        serve_rerank_tmpl_free(out);
        return -1;
    }
    return 0;
}

void serve_rerank_tmpl_free(serve_rerank_tmpl *t)
{
    free(t->prefix);
    free(t->suffix);
    memset(t, 0, sizeof *t);
}

/* ---- the endpoint ----------------------------------------------------- */

/* What the response needs of the request. */
typedef struct {
    json_t *docs; /* the documents' texts (strings), for return_documents */
    int64_t top_n;
    int return_documents;
} rerank_ext;

static void rerank_ext_free(void *p)
{
    rerank_ext *x = p;
    if (!x)
        return;
    json_decref(x->docs);
    free(x);
}

/* Results by score, highest first; equal scores keep the documents'
 * order (an insertion sort: at most SERVE_RERANK_MAX_DOCS). */
static json_t *rerank_response(serve_job *job, const serve_req_view *v)
{
    (void)v;
    const serve_work *w = job->req->work;
    const rerank_ext *x = job->ext;
    int order[SERVE_RERANK_MAX_DOCS];
    for (int i = 0; i < w->n_inputs; i++) {
        int j = i;
        while (j > 0 && w->scores[order[j - 1]] < w->scores[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    int64_t n = x->top_n > 0 && x->top_n < w->n_inputs ? x->top_n : w->n_inputs;
    json_t *results = json_array();
    for (int64_t k = 0; k < n; k++) {
        int i = order[k];
        json_t *r = json_pack("{s:i,s:f}", "index", i, "relevance_score", w->scores[i]);
        if (x->return_documents)
            json_object_set_new(r, "document",
                                json_pack("{s:O}", "text", json_array_get(x->docs, (size_t)i)));
        json_array_append_new(results, r);
    }
    return json_pack("{s:s,s:s,s:o,s:{s:I,s:I}}", "id", job->id, "model", job->model_name,
                     "results", results, "usage", "prompt_tokens", (json_int_t)w->n_tokens,
                     "total_tokens", (json_int_t)w->n_tokens);
}

static const serve_dialect rerank_dialect = {.error_json = serve_error_json,
                                             .response = rerank_response};

/* documents: strings, or objects {"text": string}; their texts into docs. */
static int parse_documents(const json_t *body, json_t *docs, serve_error *e)
{
    static const char *const doc_keys[] = {"text", NULL};
    const json_t *v = serve_present(body, "documents");
    if (!v)
        return serve_bad(e, "documents", "documents: required, an array of strings or of "
                                         "{\"text\": string} objects");
    if (!json_is_array(v))
        return serve_bad(e, "documents", "documents: must be an array of strings or of "
                                         "{\"text\": string} objects");
    size_t n = json_array_size(v);
    if (n == 0)
        return serve_bad(e, "documents", "documents: the array is empty (nothing to rank)");
    if (n > SERVE_RERANK_MAX_DOCS)
        return serve_bad(e, "documents", "documents: %zu documents, at most %d a request", n,
                         SERVE_RERANK_MAX_DOCS);
    for (size_t i = 0; i < n; i++) {
        char param[40];
        snprintf(param, sizeof param, "documents[%zu]", i);
        const json_t *d = json_array_get(v, i);
        if (json_is_object(d)) {
            if (serve_only_keys(d, doc_keys, param, e) != 0)
                return -1;
            d = json_object_get(d, "text");
            snprintf(param, sizeof param, "documents[%zu].text", i);
            if (!json_is_string(d))
                return serve_bad(e, param, "%s: required, a string", param);
        } else if (!json_is_string(d)) {
            return serve_bad(e, param, "%s: must be a string or a {\"text\": string} object",
                             param);
        }
        if (json_string_length(d) == 0)
            return serve_bad(e, param, "%s: an empty string (nothing to rank)", param);
        json_array_append(docs, (json_t *)d);
    }
    return 0;
}

/* A string field: required (non-empty) or optional with a default. */
static int string_field(const json_t *body, const char *key, const char *dflt, const char **out,
                        serve_error *e)
{
    const json_t *v = serve_present(body, key);
    if (!v && !dflt)
        return serve_bad(e, key, "%s: required, a string", key);
    if (v && !json_is_string(v))
        return serve_bad(e, key, "%s: must be a string", key);
    if (v && !dflt && json_string_length(v) == 0)
        return serve_bad(e, key, "%s: an empty string", key);
    *out = v ? json_string_value(v) : dflt;
    return 0;
}

/* One document's prompt: the fixed prefix, the pair as plain text (no
 * special tokens parsed), the fixed suffix. */
static int pair_ids(serve_model *m, const char *instruction, const char *query, const char *doc,
                    int32_t **ids, size_t *n, memra_err *err)
{
    const serve_rerank_tmpl *t = serve_model_rerank_tmpl(m);
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "<Instruct>: %s\n<Query>: %s\n<Document>: %s", instruction, query, doc);
    int32_t *mid = NULL;
    size_t k = 0;
    int rc = tok_encode(serve_model_tokenizer(m), sb_str(&sb), sb.len, 0, 0, &mid, &k, err);
    sb_free(&sb);
    if (rc != 0)
        return -1;
    *n = t->n_prefix + k + t->n_suffix;
    *ids = xmalloc(*n * sizeof **ids);
    memcpy(*ids, t->prefix, t->n_prefix * sizeof **ids);
    if (k)
        memcpy(*ids + t->n_prefix, mid, k * sizeof **ids);
    memcpy(*ids + t->n_prefix + k, t->suffix, t->n_suffix * sizeof **ids);
    free(mid);
    return 0;
}

int serve_rerank_prepare(serve_server *s, const json_t *body, const char *path, serve_job *job,
                         serve_error *e)
{
    static const char *const fields[] = {"model", "query", "documents", "top_n",
                                         "return_documents", "instruction", NULL};
    memset(job, 0, sizeof *job);
    if (serve_check_fields(body, fields, e) != 0 ||
        serve_field_model(s, body, &job->model, e) != 0 ||
        serve_check_task(job->model, SERVE_TASK_RERANK, path, e) != 0)
        return -1;
    serve_model *m = job->model;
    snprintf(job->model_name, sizeof job->model_name, "%s", serve_model_alias(m));
    rerank_ext *x = xcalloc(1, sizeof *x);
    x->docs = json_array();
    x->return_documents = 1;
    job->ext = x;
    job->ext_free = rerank_ext_free;
    const char *query, *instruction;
    if (string_field(body, "query", NULL, &query, e) != 0 ||
        string_field(body, "instruction", SERVE_RERANK_INSTRUCTION, &instruction, e) != 0 ||
        serve_field_int(body, "top_n", 0, INT32_MAX, &x->top_n, e) != 0 ||
        serve_field_bool(body, "return_documents", &x->return_documents, e) != 0 ||
        parse_documents(body, x->docs, e) != 0)
        return -1;
    int n_docs = (int)json_array_size(x->docs);
    serve_work *w = serve_work_new(SERVE_WORK_RERANK, n_docs, 0);
    job->req = serve_req_new();
    job->req->work = w;
    job->n_choices = 1;
    int64_t n_ctx = serve_model_n_ctx(m);
    for (int i = 0; i < n_docs; i++) {
        memra_err err;
        if (pair_ids(m, instruction, query, json_string_value(json_array_get(x->docs, (size_t)i)),
                     &w->ids[i], &w->n_ids[i], &err) != 0)
            return serve_bad(e, "documents", "documents[%d]: %s", i, err.msg);
        if ((int64_t)w->n_ids[i] > n_ctx)
            return serve_fail(e, 400, "invalid_request_error", "context_length_exceeded",
                              "documents", "documents[%d]: the query and document are %zu "
                              "tokens in the reranker's prompt, more than the model's context of "
                              "%lld tokens", i, w->n_ids[i], (long long)n_ctx);
        w->n_tokens += w->n_ids[i];
    }
    job->dialect = &rerank_dialect;
    unsigned long id = atomic_fetch_add(&s->next_id, 1);
    uint64_t h = (s->rid_seed ^ 0x726572616e6bull) + 0x9e3779b97f4a7c15ull * (id + 1);
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
    h ^= h >> 31;
    snprintf(job->id, sizeof job->id, "rerank-%016llx", (unsigned long long)h);
    return 0;
}
