#include "bench/loadgen.h"

#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/rng.h"
#include "core/strbuf.h"
#include "bench/loadgen_priv.h"
#include "bench/sse_parse.h"

#define MAX_ERROR_BODY (64 * 1024)

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double loadgen_quantile_sorted(const double *s, size_t n, double q)
{
    double h = q * (double)(n - 1);
    size_t lo = (size_t)floor(h);
    if (lo + 1 >= n)
        return s[n - 1];
    return s[lo] + (h - (double)lo) * (s[lo + 1] - s[lo]);
}

void loadgen_dist_of(const double *v, size_t n, loadgen_dist *out)
{
    memset(out, 0, sizeof *out);
    if (n == 0)
        return;
    double *s = xmalloc(n * sizeof *s);
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += s[i];
    out->n = n;
    out->min = s[0];
    out->max = s[n - 1];
    out->mean = sum / (double)n;
    out->p50 = loadgen_quantile_sorted(s, n, 0.50);
    out->p90 = loadgen_quantile_sorted(s, n, 0.90);
    out->p99 = loadgen_quantile_sorted(s, n, 0.99);
    free(s);
}

void lg_dv_push(lg_dvec *d, double x)
{
    if (d->n == d->cap)
        d->v = xrealloc(d->v, (d->cap = d->cap ? 2 * d->cap : 256) * sizeof *d->v);
    d->v[d->n++] = x;
}

/* ---- setup ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;
static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

static void common_opts(CURL *h, const loadgen *lg, char *errbuf)
{
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_USERAGENT, "memra-bench/0.1 (" LIBCURL_VERSION ")");
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                     (long)((lg->o.timeout_s > 0 ? lg->o.timeout_s : 600) * 1e3));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, lg->headers);
}

static size_t collect(char *p, size_t sz, size_t n, void *ctx)
{
    strbuf *b = ctx;
    if (b->len + sz * n <= (size_t)16 << 20)
        sb_append(b, p, sz * n);
    return sz * n;
}

/* The message of an OpenAI-shaped error body, else its first line. */
static void error_of_body(const char *body, size_t len, char *out, size_t cap)
{
    json_t *j = json_loadb(body, len, 0, NULL);
    const char *msg = j ? json_string_value(json_object_get(json_object_get(j, "error"),
                                                            "message"))
                        : NULL;
    if (msg) {
        snprintf(out, cap, "%s", msg);
    } else {
        size_t n = 0;
        while (n < len && n < 200 && body[n] != '\n' && body[n] != '\r')
            n++;
        snprintf(out, cap, "%.*s", (int)n, n ? body : "(empty body)");
    }
    json_decref(j);
    for (char *p = out; *p; p++) /* one line */
        if ((unsigned char)*p < 0x20)
            *p = ' ';
}

/* Whether libcurl's parser takes url as http or https with a host, and
 * nothing after the path. */
static int url_ok(const char *url)
{
    CURLU *u = curl_url();
    if (!u)
        return 0;
    char *scheme = NULL, *host = NULL;
    int ok = curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK &&
             curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK && host[0] &&
             (!strcmp(scheme, "http") || !strcmp(scheme, "https")) && !strchr(url, '?') &&
             !strchr(url, '#');
    curl_free(scheme);
    curl_free(host);
    curl_url_cleanup(u);
    return ok;
}

int loadgen_base_url(const char *url, char **out, memra_err *err)
{
    pthread_once(&curl_once, curl_init);
    *out = NULL;
    char *b = xstrdup(url);
    size_t n = strlen(b);
    while (n && b[n - 1] == '/')
        b[--n] = '\0';
    if (n >= 3 && !strcmp(b + n - 3, "/v1"))
        b[n -= 3] = '\0';
    while (n && b[n - 1] == '/')
        b[--n] = '\0';
    /* the base must still be a URL: "http:///v1" is not "http://" */
    if (!url_ok(url) || !url_ok(b)) {
        free(b);
        return memra_fail(err, "--server '%s': not an http:// or https:// URL with a host "
                          "(e.g. http://127.0.0.1:8080)", url);
    }
    *out = b;
    return 0;
}

/* GET /v1/models: the model to load, its context and vocabulary. */
static int pick_model(loadgen *lg, memra_err *err)
{
    char url[4096], errbuf[CURL_ERROR_SIZE] = "";
    snprintf(url, sizeof url, "%s/v1/models", lg->base);
    CURL *h = curl_easy_init();
    if (!h)
        return memra_fail(err, "%s: curl_easy_init failed", url);
    strbuf body;
    sb_init(&body);
    common_opts(h, lg, errbuf);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    int ret = -1;
    json_t *j = NULL;
    if (rc != CURLE_OK) {
        memra_fail(err, "%s: %s%s%s%s", url, curl_easy_strerror(rc), errbuf[0] ? " (" : "",
                   errbuf, errbuf[0] ? ")" : "");
        goto out;
    }
    if (status != 200) {
        char msg[512];
        error_of_body(sb_str(&body), body.len, msg, sizeof msg);
        memra_fail(err, "%s: HTTP %ld: %s", url, status, msg);
        goto out;
    }
    j = json_loadb(sb_str(&body), body.len, 0, NULL);
    json_t *data = json_object_get(j, "data");
    if (!json_is_array(data) || json_array_size(data) == 0) {
        memra_fail(err, "%s: no models listed (want {\"data\": [{\"id\": ...}]})", url);
        goto out;
    }
    json_t *m = NULL, *it;
    size_t i;
    strbuf names;
    sb_init(&names);
    json_array_foreach(data, i, it) {
        const char *id = json_string_value(json_object_get(it, "id"));
        if (!id)
            continue;
        sb_printf(&names, "%s%s", names.len ? ", " : "", id);
        if (!m && (!lg->o.model || !strcmp(id, lg->o.model)))
            m = it;
    }
    if (!m) {
        memra_fail(err, "%s: model '%s' is not served (served: %s)", url,
                   lg->o.model ? lg->o.model : "", sb_str(&names));
        sb_free(&names);
        goto out;
    }
    sb_free(&names);
    snprintf(lg->model, sizeof lg->model, "%s", json_string_value(json_object_get(m, "id")));
    json_t *ctx = json_object_get(m, "context_length");
    if (!ctx)
        ctx = json_object_get(m, "max_model_len"); /* vLLM's name */
    lg->n_ctx = json_is_integer(ctx) ? json_integer_value(ctx) : 0;
    json_t *voc = json_object_get(m, "vocab_size");
    lg->n_vocab = lg->o.n_vocab > 0 ? lg->o.n_vocab
                  : json_is_integer(voc) ? json_integer_value(voc)
                                         : 0;
    if (lg->n_vocab <= 0) {
        memra_fail(err, "%s: the server gives no vocab_size for '%s': give --vocab N (prompt "
                   "ids are drawn below it)", url, lg->model);
        goto out;
    }
    if (lg->n_ctx > 0 && lg->o.n_prompt > 0 &&
        (int64_t)lg->o.n_prompt + lg->o.n_gen > lg->n_ctx) {
        memra_fail(err, "model '%s': prompt %d + %d generated tokens = %d do not fit its "
                   "context of %lld", lg->model, lg->o.n_prompt, lg->o.n_gen,
                   lg->o.n_prompt + lg->o.n_gen, (long long)lg->n_ctx);
        goto out;
    }
    ret = 0;
out:
    json_decref(j);
    sb_free(&body);
    return ret;
}

int loadgen_new(const loadgen_opts *o, loadgen **out, memra_err *err)
{
    *out = NULL;
    if (o->n_prompt < 0)
        return memra_fail(err, "loadgen: prompt length %d must be >= 0", o->n_prompt);
    if (o->n_gen < 1)
        return memra_fail(err, "loadgen: max_tokens %d must be >= 1", o->n_gen);
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return memra_fail(err, "libcurl: %s", curl_easy_strerror(curl_init_rc));
    loadgen *lg = xcalloc(1, sizeof *lg);
    lg->o = *o; /* the strings are the caller's: not kept past this call */
    if (loadgen_base_url(o->url, &lg->base, err) != 0) {
        loadgen_free(lg);
        return -1;
    }
    strbuf ep;
    sb_init(&ep);
    sb_printf(&ep, "%s/v1/completions", lg->base);
    lg->endpoint = sb_take(&ep);
    sb_printf(&ep, "%s/v1/chat/completions", lg->base);
    lg->chat_endpoint = sb_take(&ep);
    lg->headers = curl_slist_append(lg->headers, "Content-Type: application/json");
    lg->headers = curl_slist_append(lg->headers, "Accept: text/event-stream");
    lg->headers = curl_slist_append(lg->headers, "Expect:"); /* no 100-continue round trip */
    if (o->api_key) {
        strbuf a;
        sb_init(&a);
        sb_printf(&a, "Authorization: Bearer %s", o->api_key);
        lg->headers = curl_slist_append(lg->headers, sb_str(&a));
        sb_free(&a);
    }
    lg->multi = curl_multi_init();
    if (!lg->headers || !lg->multi) {
        loadgen_free(lg);
        return memra_fail(err, "libcurl: cannot set up the client");
    }
    if (pick_model(lg, err) != 0) {
        loadgen_free(lg);
        return -1;
    }
    lg->o.url = lg->o.model = lg->o.api_key = NULL;
    *out = lg;
    return 0;
}

void loadgen_free(loadgen *lg)
{
    if (!lg)
        return;
    if (lg->multi)
        curl_multi_cleanup(lg->multi);
    curl_slist_free_all(lg->headers);
    free(lg->base);
    free(lg->endpoint);
    free(lg->chat_endpoint);
    free(lg);
}

const char *loadgen_model(const loadgen *lg) { return lg->model; }
int64_t loadgen_n_ctx(const loadgen *lg) { return lg->n_ctx; }
int64_t loadgen_n_vocab(const loadgen *lg) { return lg->n_vocab; }
const char *loadgen_endpoint(const loadgen *lg) { return lg->endpoint; }
const char *loadgen_chat_endpoint(const loadgen *lg) { return lg->chat_endpoint; }

int lg_post_json(loadgen *lg, const char *url, const char *body, json_t **out, memra_err *err)
{
    *out = NULL;
    char errbuf[CURL_ERROR_SIZE] = "";
    CURL *h = curl_easy_init();
    if (!h)
        return memra_fail(err, "%s: curl_easy_init failed", url);
    strbuf reply;
    sb_init(&reply);
    common_opts(h, lg, errbuf);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &reply);
    CURLcode rc = curl_easy_perform(h);
    long status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(h);
    int ret = -1;
    if (rc != CURLE_OK) {
        memra_fail(err, "%s: %s%s%s%s", url, curl_easy_strerror(rc), errbuf[0] ? " (" : "",
                   errbuf, errbuf[0] ? ")" : "");
    } else if (status != 200) {
        char msg[512];
        error_of_body(sb_str(&reply), reply.len, msg, sizeof msg);
        memra_fail(err, "%s: HTTP %ld: %s", url, status, msg);
    } else if (!(*out = json_loadb(sb_str(&reply), reply.len, 0, NULL))) {
        memra_fail(err, "%s: the reply is not JSON", url);
    } else {
        ret = 0;
    }
    sb_free(&reply);
    return ret;
}

/* ---- one stream ---- */

static void set_error(lg_stream *st, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_error(lg_stream *st, const char *fmt, ...)
{
    if (st->error[0])
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->error, sizeof st->error, fmt, ap);
    va_end(ap);
}

static void on_event(void *ctx, const char *event, const char *data, size_t len)
{
    (void)event;
    lg_stream *st = ctx;
    double t = clock_now_ms();
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        st->done = 1;
        return;
    }
    if (st->done) {
        set_error(st, "an event after data: [DONE]");
        return;
    }
    json_error_t je;
    json_t *j = json_loadb(data, len, 0, &je);
    if (!j) {
        set_error(st, "an SSE event that is not JSON: %.80s", data);
        return;
    }
    json_t *e = json_object_get(j, "error");
    if (e) {
        const char *msg = json_string_value(json_object_get(e, "message"));
        set_error(st, "error event: %s", msg ? msg : "(no message)");
    }
    json_t *choices = json_object_get(j, "choices");
    if (json_array_size(choices) > 0) {
        json_t *c0 = json_array_get(choices, 0);
        json_t *text = json_object_get(c0, "text");
        if (!text)
            text = json_object_get(json_object_get(c0, "delta"), "content");
        if (json_string_length(text) > 0) {
            if (st->t_first == 0)
                st->t_first = t;
            else
                lg_dv_push(&st->gaps, t - st->t_last);
            st->t_last = t;
            /* a multi-turn run resends it as the assistant's message */
            sb_append(&st->reply, json_string_value(text), json_string_length(text));
        }
    }
    json_t *u = json_object_get(j, "usage");
    if (json_is_object(u)) {
        json_t *ct = json_object_get(u, "completion_tokens"),
               *pt = json_object_get(u, "prompt_tokens"),
               *cached = json_object_get(json_object_get(u, "prompt_tokens_details"),
                                         "cached_tokens");
        st->completion_tokens = json_is_integer(ct) ? (long)json_integer_value(ct) : -1;
        st->prompt_tokens = json_is_integer(pt) ? (long)json_integer_value(pt) : -1;
        /* servers without a prefix cache (or without the field) cache nothing */
        st->cached_tokens = json_is_integer(cached) ? (long)json_integer_value(cached) : 0;
    }
    json_decref(j);
}

static size_t on_body(char *p, size_t sz, size_t n, void *ctx)
{
    lg_stream *st = ctx;
    size_t len = sz * n;
    if (st->status == 0)
        curl_easy_getinfo(st->h, CURLINFO_RESPONSE_CODE, &st->status);
    if (st->status != 200) {
        if (st->raw.len + len <= MAX_ERROR_BODY)
            sb_append(&st->raw, p, len);
        return len;
    }
    sse_feed(&st->sse, p, len);
    return len;
}

static int stream_init(lg_stream *st, loadgen *lg, int index, memra_err *err)
{
    memset(st, 0, sizeof *st);
    st->lg = lg;
    st->index = index;
    st->h = curl_easy_init();
    if (!st->h)
        return memra_fail(err, "libcurl: curl_easy_init failed");
    sb_init(&st->raw);
    sb_init(&st->reply);
    sse_init(&st->sse, on_event, st, 0);
    common_opts(st->h, lg, st->errbuf);
    curl_easy_setopt(st->h, CURLOPT_POST, 1L);
    curl_easy_setopt(st->h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(st->h, CURLOPT_WRITEDATA, st);
    curl_easy_setopt(st->h, CURLOPT_PRIVATE, st);
    return 0;
}

static void stream_free(lg_stream *st)
{
    if (st->h)
        curl_easy_cleanup(st->h);
    free(st->body);
    free(st->gaps.v);
    sse_free(&st->sse);
    sb_free(&st->raw);
    sb_free(&st->reply);
}

/* The request goes out with body (the stream's from now on) to url. */
static int stream_start(lg_stream *st, const char *url, char *body, memra_err *err)
{
    free(st->body);
    st->body = body;
    sse_reset(&st->sse);
    sb_clear(&st->raw);
    sb_clear(&st->reply);
    st->status = 0;
    st->t_first = st->t_last = 0;
    st->gaps.n = 0;
    st->completion_tokens = st->prompt_tokens = -1;
    st->cached_tokens = 0;
    st->done = 0;
    st->error[0] = st->errbuf[0] = '\0';
    curl_easy_setopt(st->h, CURLOPT_URL, url);
    curl_easy_setopt(st->h, CURLOPT_POSTFIELDS, st->body);
    curl_easy_setopt(st->h, CURLOPT_POSTFIELDSIZE, (long)strlen(st->body));
    st->t_start = clock_now_ms();
    CURLMcode mc = curl_multi_add_handle(st->lg->multi, st->h);
    if (mc != CURLM_OK)
        return memra_fail(err, "libcurl: %s", curl_multi_strerror(mc));
    return 0;
}

int lg_stream_finish(lg_stream *st, CURLcode rc, double t_end, loadgen_level *lv,
                     lg_samples *ls)
{
    loadgen *lg = st->lg;
    const char *url = NULL;
    curl_easy_getinfo(st->h, CURLINFO_EFFECTIVE_URL, &url);
    if (rc != CURLE_OK) {
        set_error(st, "%s: %s%s%s%s", url ? url : lg->endpoint, curl_easy_strerror(rc),
                  st->errbuf[0] ? " (" : "", st->errbuf, st->errbuf[0] ? ")" : "");
    } else if (st->status != 200) {
        char msg[400];
        long status = st->status;
        if (status == 0)
            curl_easy_getinfo(st->h, CURLINFO_RESPONSE_CODE, &status);
        error_of_body(sb_str(&st->raw), st->raw.len, msg, sizeof msg);
        set_error(st, "HTTP %ld: %s", status, msg);
    } else if (!st->done) {
        set_error(st, "the stream ended without data: [DONE]");
    } else if (st->completion_tokens < 0) {
        set_error(st, "no usage in the stream (is stream_options.include_usage supported?)");
    }
    lv->requests++;
    if (ls->t_first_sent == 0 || st->t_start < ls->t_first_sent)
        ls->t_first_sent = st->t_start;
    if (t_end > ls->t_last_end)
        ls->t_last_end = t_end;
    if (st->error[0]) {
        lv->errors++;
        if (!lv->first_error[0])
            snprintf(lv->first_error, sizeof lv->first_error, "%s", st->error);
        return 0;
    }
    lv->ok++;
    lv->tokens_requested += (uint64_t)lg->o.n_gen;
    lv->tokens_received += (uint64_t)st->completion_tokens;
    if (st->prompt_tokens > 0)
        lv->prompt_tokens += (uint64_t)st->prompt_tokens;
    if (st->cached_tokens > 0)
        lv->cached_tokens += (uint64_t)st->cached_tokens;
    if (st->completion_tokens < lg->o.n_gen)
        lv->short_requests++;
    lg_dv_push(&ls->e2e, t_end - st->t_start);
    if (st->t_first == 0 && st->completion_tokens > 0)
        lv->textless_requests++; /* greedy on random weights can loop on a special token */
    if (st->t_first > 0) {
        lg_dv_push(&ls->ttft, st->t_first - st->t_start);
        for (size_t i = 0; i < st->gaps.n; i++)
            lg_dv_push(&ls->itl, st->gaps.v[i]);
        if (st->completion_tokens > 1)
            lg_dv_push(&ls->tpot,
                       (st->t_last - st->t_first) / (double)(st->completion_tokens - 1));
    }
    return 1;
}

void lg_level_finish(loadgen_level *lv, lg_samples *ls, double duration_s)
{
    lv->duration_s = duration_s;
    if (duration_s > 0) {
        lv->requests_s = lv->ok / duration_s;
        lv->tok_s = (double)lv->tokens_received / duration_s;
        lv->prompt_tok_s = (double)lv->prompt_tokens / duration_s;
    }
    loadgen_dist_of(ls->ttft.v, ls->ttft.n, &lv->ttft_ms);
    loadgen_dist_of(ls->itl.v, ls->itl.n, &lv->itl_ms);
    loadgen_dist_of(ls->tpot.v, ls->tpot.n, &lv->tpot_ms);
    loadgen_dist_of(ls->e2e.v, ls->e2e.n, &lv->e2e_ms);
    free(ls->ttft.v);
    free(ls->itl.v);
    free(ls->tpot.v);
    free(ls->e2e.v);
    memset(ls, 0, sizeof *ls);
}

/* ---- the closed loop ---- */

/* The stream's next request from the plan, sent; *more 0 when it had none. */
static int stream_next(lg_stream *st, const lg_plan *plan, int *more, memra_err *err)
{
    const char *url = NULL;
    char *body = plan->next(plan->ctx, st, &url);
    *more = body != NULL;
    return body ? stream_start(st, url, body, err) : 0;
}

int lg_drive(loadgen *lg, int c, const lg_plan *plan, double *t_begin, double *t_end,
             memra_err *err)
{
    lg_stream *st = xcalloc((size_t)c, sizeof *st);
    int rc = 0, n_init = 0, active = 0, more;
    for (; n_init < c && rc == 0; n_init++)
        rc = stream_init(&st[n_init], lg, n_init, err);
    *t_begin = *t_end = clock_now_ms();
    for (int i = 0; i < c && rc == 0; i++) {
        rc = stream_next(&st[i], plan, &more, err);
        active += more;
    }
    while (rc == 0 && active > 0) {
        int still;
        CURLMcode mc = curl_multi_perform(lg->multi, &still);
        if (mc != CURLM_OK) {
            rc = memra_fail(err, "libcurl: %s", curl_multi_strerror(mc));
            break;
        }
        CURLMsg *msg;
        int left;
        while (rc == 0 && (msg = curl_multi_info_read(lg->multi, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            lg_stream *s;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            CURLcode res = msg->data.result;
            curl_multi_remove_handle(lg->multi, s->h);
            *t_end = clock_now_ms();
            plan->ended(plan->ctx, s, res, *t_end);
            rc = stream_next(s, plan, &more, err);
            active -= !more;
        }
        if (rc == 0 && active > 0) {
            mc = curl_multi_poll(lg->multi, NULL, 0, 100, NULL);
            if (mc != CURLM_OK)
                rc = memra_fail(err, "libcurl: %s", curl_multi_strerror(mc));
        }
    }
    for (int i = 0; i < n_init; i++) {
        if (st[i].h)
            curl_multi_remove_handle(lg->multi, st[i].h);
        stream_free(&st[i]);
    }
    free(st);
    return rc;
}

/* ---- the single-turn run ---- */

/* The next request's body: a fresh prompt of n_prompt ids. */
static char *request_body(loadgen *lg)
{
    rng_state r;
    rng_seed(&r, lg->o.seed, lg->next_request++);
    strbuf b;
    sb_init(&b);
    sb_puts(&b, "{\"model\":");
    json_t *m = json_string(lg->model);
    char *ms = json_dumps(m, JSON_ENCODE_ANY);
    sb_puts(&b, ms);
    free(ms);
    json_decref(m);
    sb_puts(&b, ",\"prompt\":[");
    for (int i = 0; i < lg->o.n_prompt; i++)
        sb_printf(&b, "%s%llu", i ? "," : "",
                  (unsigned long long)(rng_next_u64(&r) % (uint64_t)lg->n_vocab));
    sb_printf(&b, "],\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
              "\"stream_options\":{\"include_usage\":true}}", lg->o.n_gen);
    return sb_take(&b);
}

typedef struct {
    loadgen *lg;
    int n_requests, sent;
    loadgen_level *out;
    lg_samples ls;
} single_run;

static char *single_next(void *ctx, lg_stream *st, const char **url)
{
    (void)st;
    single_run *r = ctx;
    if (r->sent == r->n_requests)
        return NULL;
    r->sent++;
    *url = r->lg->endpoint;
    return request_body(r->lg);
}

static void single_ended(void *ctx, lg_stream *st, CURLcode rc, double t_end)
{
    single_run *r = ctx;
    lg_stream_finish(st, rc, t_end, r->out, &r->ls);
}

int loadgen_run(loadgen *lg, int c, int n_requests, loadgen_level *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    out->concurrency = c;
    if (c < 1 || n_requests < c)
        return memra_fail(err, "loadgen: %d requests at concurrency %d", n_requests, c);
    if (lg->o.n_prompt < 1)
        return memra_fail(err, "loadgen: no prompt length for single-turn requests");
    single_run r = {.lg = lg, .n_requests = n_requests, .out = out};
    lg_plan plan = {single_next, single_ended, &r};
    double t_begin, t_end;
    int rc = lg_drive(lg, c, &plan, &t_begin, &t_end, err);
    /* requests sent but not ended (the client failed) count as sent */
    out->requests = r.sent;
    lg_level_finish(out, &r.ls, (t_end - t_begin) / 1e3);
    return rc;
}
