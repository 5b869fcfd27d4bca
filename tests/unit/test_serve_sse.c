/* Server-sent events both ways: the client parser (lib/bench/sse_parse.c)
 * fed in every possible split, and the server's OpenAI framing
 * (serve_openai_sse_*) read back through it. Also the load client's
 * statistics and URL handling (lib/bench/loadgen.c), which need no
 * server. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/loadgen.h"
#include "serve/serve_internal.h"
#include "bench/sse_parse.h"
#include "test.h"

typedef struct {
    char events[16][128]; /* "type|data" */
    int n;
} got;

static void on_event(void *ctx, const char *event, const char *data, size_t len)
{
    got *g = ctx;
    if (g->n < 16)
        snprintf(g->events[g->n], sizeof g->events[0], "%s|%.*s", event, (int)len, data);
    g->n++;
}

/* Every split of text into two pieces, and byte by byte, gives the same
 * events as one piece. */
static void feed_all_ways(const char *text, size_t len, const char *const *want, int n_want,
                          size_t comments)
{
    for (size_t split = 0; split <= len + 1; split++) {
        got g = {0};
        sse_parser p;
        sse_init(&p, on_event, &g, 0);
        if (split <= len) {
            sse_feed(&p, text, split);
            sse_feed(&p, text + split, len - split);
        } else {
            for (size_t i = 0; i < len; i++)
                sse_feed(&p, text + i, 1);
        }
        CHECK_MSG(g.n == n_want, "split %zu: %d events, want %d", split, g.n, n_want);
        for (int i = 0; i < n_want && i < g.n; i++)
            CHECK_MSG(!strcmp(g.events[i], want[i]), "split %zu: event %d is '%s', want '%s'",
                      split, i, g.events[i], want[i]);
        CHECK(p.n_comments == comments);
        sse_free(&p);
    }
}

static void test_sse_parse_lines(void)
{
    /* LF, CRLF and CR line ends; comments; a field without a colon; one
     * space dropped after the colon, a second one kept; multi-line data;
     * event names reset per event; id and retry ignored; the last event
     * has no blank line after it and is not dispatched. */
    static const char text[] =
        ": keep-alive\n\n"
        "data: {\"a\":1}\n\n"
        "data:no-space\r\n\r\n"
        "data:  two spaces\r\rdata: x\ndata: y\n\n"
        "event: ping\nid: 7\nretry: 100\ndata: p\n\n"
        "data\n\n"
        "event: lonely\n\n"
        ":c2\r\n"
        "data: [DONE]\n\n"
        "data: unterminated";
    static const char *const want[] = {
        "|{\"a\":1}", "|no-space", "| two spaces", "|x\ny", "ping|p", "|", "|[DONE]",
    };
    feed_all_ways(text, sizeof text - 1, want, 7, 2);
}

static void test_sse_parse_bom_and_limits(void)
{
    static const char bom[] = "\xEF\xBB\xBF" "data: a\n\ndata: b\n\n";
    static const char *const want[] = {"|a", "|b"};
    feed_all_ways(bom, sizeof bom - 1, want, 2, 0);
    /* a partial BOM is ordinary text: the line "\xEF\xBBdata..." is a field
     * named "\xEF\xBBdata", which is ignored */
    static const char partial[] = "\xEF\xBB" "data: a\n\ndata: b\n\n";
    static const char *const want2[] = {"|b"};
    feed_all_ways(partial, sizeof partial - 1, want2, 1, 0);

    /* a line over the limit is dropped whole, and the parser goes on */
    got g = {0};
    sse_parser p;
    sse_init(&p, on_event, &g, 16);
    sse_feed(&p, "data: 0123456789abcdef-too-long\n", 32);
    sse_feed(&p, "\ndata: ok\n\n", 11);
    CHECK(g.n == 1 && !strcmp(g.events[0], "|ok"));
    /* reset: a half-read event is forgotten */
    sse_feed(&p, "data: half", 10);
    sse_reset(&p);
    sse_feed(&p, "\n\ndata: new\n\n", 13);
    CHECK(g.n == 2 && !strcmp(g.events[1], "|new"));
    sse_free(&p);
}

/* The server's chunks, parsed back. */
typedef struct {
    json_t *events[16];
    int n, done;
} chunks;

static void on_chunk(void *ctx, const char *event, const char *data, size_t len)
{
    (void)event;
    chunks *c = ctx;
    if (len == 6 && !memcmp(data, "[DONE]", 6)) {
        c->done++;
        return;
    }
    CHECK_MSG(!c->done, "an event after [DONE]");
    json_error_t je;
    json_t *j = json_loadb(data, len, 0, &je);
    CHECK_MSG(j != NULL, "chunk is not JSON: %.*s", (int)len, data);
    if (c->n < 16)
        c->events[c->n++] = j;
    else
        json_decref(j);
}

static void parse_chunks(const strbuf *sse, chunks *c)
{
    memset(c, 0, sizeof *c);
    sse_parser p;
    sse_init(&p, on_chunk, c, 0);
    sse_feed(&p, sse->data, sse->len);
    CHECK(p.line.len == 0); /* the body ends at an event's end */
    sse_free(&p);
}

static void free_chunks(chunks *c)
{
    for (int i = 0; i < c->n; i++)
        json_decref(c->events[i]);
}

static void make_job(serve_job *job, serve_kind kind, int include_usage)
{
    memset(job, 0, sizeof *job);
    job->kind = kind;
    job->req = serve_req_new();
    job->req->n_prompt = 5;
    job->stream = 1;
    job->include_usage = include_usage;
    snprintf(job->model_name, sizeof job->model_name, "tiny");
    snprintf(job->id, sizeof job->id, "%s", kind == SERVE_CHAT ? "chatcmpl-1" : "cmpl-1");
    job->created = 1700000000;
    job->n_choices = 1;
}

/* What the HTTP side does with new text of choice 0, and at the end. */
static void sse_text(serve_job *job, strbuf *out, const char *text, size_t len)
{
    sb_append(&job->got[0].text, text, len);
    serve_req_view v = {.finish = SERVE_FINISH_NONE};
    serve_openai_sse_update(job, out, &v);
}

static void sse_end(serve_job *job, strbuf *out, const serve_req_view *end)
{
    serve_req_view v = *end;
    if (v.finish != SERVE_FINISH_ERROR)
        v.choice_finish[0] = v.finish;
    serve_openai_sse_update(job, out, &v);
}

static void test_sse_framing_chat(void)
{
    serve_job job;
    make_job(&job, SERVE_CHAT, 1);
    strbuf out;
    sb_init(&out);
    serve_openai_sse_start(&job, &out);
    sse_text(&job, &out, "Hel", 3);
    sse_text(&job, &out, "lo \xE2\x82\xAC", 6);
    sse_text(&job, &out, "\xff", 1); /* never a broken chunk */
    serve_req_view v = {.finish = SERVE_FINISH_LENGTH, .n_generated = 4};
    sse_end(&job, &out, &v);
    /* every event is "data: ...\n\n" */
    CHECK(!strncmp(out.data, "data: ", 6) && out.len > 2 && !strcmp(out.data + out.len - 2, "\n\n"));
    CHECK(strstr(out.data, "\n\ndata: [DONE]\n\n") == out.data + out.len - 16);
    chunks c;
    parse_chunks(&out, &c);
    CHECK(c.done == 1 && c.n == 5);
    if (c.n == 5) {
        CHECK(!strcmp(json_string_value(json_object_get(c.events[0], "object")),
                      "chat.completion.chunk"));
        json_t *d0 = json_object_get(json_array_get(json_object_get(c.events[0], "choices"), 0),
                                     "delta");
        CHECK(!strcmp(json_string_value(json_object_get(d0, "role")), "assistant"));
        CHECK(!strcmp(json_string_value(json_object_get(d0, "content")), ""));
        json_t *d2 = json_object_get(json_array_get(json_object_get(c.events[2], "choices"), 0),
                                     "delta");
        CHECK(!strcmp(json_string_value(json_object_get(d2, "content")), "lo \xE2\x82\xAC"));
        for (int i = 0; i < 4; i++) /* include_usage: usage null until the last */
            CHECK(json_is_null(json_object_get(c.events[i], "usage")));
        json_t *fin = json_array_get(json_object_get(c.events[3], "choices"), 0);
        CHECK(!strcmp(json_string_value(json_object_get(fin, "finish_reason")), "length"));
        CHECK(json_object_size(json_object_get(fin, "delta")) == 0);
        json_t *u = json_object_get(c.events[4], "usage");
        CHECK(json_array_size(json_object_get(c.events[4], "choices")) == 0);
        CHECK(json_integer_value(json_object_get(u, "prompt_tokens")) == 5 &&
              json_integer_value(json_object_get(u, "completion_tokens")) == 4 &&
              json_integer_value(json_object_get(u, "total_tokens")) == 9);
        for (int i = 0; i < 5; i++)
            CHECK(!strcmp(json_string_value(json_object_get(c.events[i], "id")), "chatcmpl-1"));
    }
    free_chunks(&c);
    sb_free(&out);
    serve_job_clear(&job);
}

static void test_sse_framing_completion_and_error(void)
{
    serve_job job;
    make_job(&job, SERVE_COMPLETION, 0);
    strbuf out;
    sb_init(&out);
    serve_openai_sse_start(&job, &out);
    CHECK(out.len == 0); /* completions have no role chunk */
    sse_text(&job, &out, "Once", 4);
    serve_req_view v = {.finish = SERVE_FINISH_STOP, .n_generated = 2};
    sse_end(&job, &out, &v);
    chunks c;
    parse_chunks(&out, &c);
    CHECK(c.done == 1 && c.n == 2);
    if (c.n == 2) {
        json_t *ch = json_array_get(json_object_get(c.events[0], "choices"), 0);
        CHECK(!strcmp(json_string_value(json_object_get(ch, "text")), "Once"));
        CHECK(json_is_null(json_object_get(ch, "finish_reason")));
        CHECK(json_object_get(c.events[0], "usage") == NULL); /* not asked for */
        json_t *fin = json_array_get(json_object_get(c.events[1], "choices"), 0);
        CHECK(!strcmp(json_string_value(json_object_get(fin, "finish_reason")), "stop"));
        CHECK(!strcmp(json_string_value(json_object_get(fin, "text")), ""));
    }
    free_chunks(&c);

    /* an error after the stream started: an error event, then [DONE] */
    sb_clear(&out);
    serve_req_view ve = {.finish = SERVE_FINISH_ERROR};
    snprintf(ve.error, sizeof ve.error, "the server is shutting down");
    sse_end(&job, &out, &ve);
    parse_chunks(&out, &c);
    CHECK(c.done == 1 && c.n == 1);
    if (c.n == 1) {
        json_t *e = json_object_get(c.events[0], "error");
        CHECK(!strcmp(json_string_value(json_object_get(e, "message")),
                      "the server is shutting down"));
        CHECK(!strcmp(json_string_value(json_object_get(e, "type")), "server_error"));
    }
    free_chunks(&c);
    sb_free(&out);
    serve_job_clear(&job);
}

static void test_loadgen_stats(void)
{
    double v[] = {10, 1, 9, 2, 8, 3, 7, 4, 6, 5};
    loadgen_dist d;
    loadgen_dist_of(v, 10, &d);
    CHECK(d.n == 10 && d.min == 1 && d.max == 10 && d.mean == 5.5);
    /* numpy.percentile([1..10], [50, 90, 99]) = 5.5, 9.1, 9.91 */
    CHECK(d.p50 == 5.5);
    CHECK(d.p90 > 9.0999999 && d.p90 < 9.1000001);
    CHECK(d.p99 > 9.9099999 && d.p99 < 9.9100001);
    CHECK(v[0] == 10 && v[9] == 5); /* not reordered */
    double one = 3.25;
    loadgen_dist_of(&one, 1, &d);
    CHECK(d.n == 1 && d.p50 == 3.25 && d.p99 == 3.25 && d.min == 3.25 && d.max == 3.25);
    loadgen_dist_of(NULL, 0, &d);
    CHECK(d.n == 0 && d.p50 == 0 && d.max == 0);
    double s[] = {0, 100};
    CHECK(loadgen_quantile_sorted(s, 2, 0.25) == 25 && loadgen_quantile_sorted(s, 2, 1) == 100 &&
          loadgen_quantile_sorted(s, 2, 0) == 0);
}

static void test_loadgen_urls(void)
{
    static const struct {
        const char *in, *want;
    } ok[] = {
        {"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
        {"http://127.0.0.1:8080/", "http://127.0.0.1:8080"},
        {"http://127.0.0.1:8080/v1", "http://127.0.0.1:8080"},
        {"http://127.0.0.1:8080/v1/", "http://127.0.0.1:8080"},
        {"https://api.example.org/llm/v1", "https://api.example.org/llm"},
        {"http://[::1]:9000", "http://[::1]:9000"},
    };
    memra_err err;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char *b = NULL;
        CHECK_MSG(loadgen_base_url(ok[i].in, &b, &err) == 0, "%s: %s", ok[i].in, err.msg);
        CHECK_MSG(b && !strcmp(b, ok[i].want), "%s -> %s", ok[i].in, b ? b : "(null)");
        free(b);
    }
    static const char *const bad[] = {"", "ftp://x", "127.0.0.1:8080", "http://", "http:///v1",
                                      "http://h/?q=1", "not a url"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *b = NULL;
        CHECK_MSG(loadgen_base_url(bad[i], &b, &err) == -1, "'%s' accepted", bad[i]);
        CHECK(strstr(err.msg, "not an http:// or https:// URL") != NULL);
        free(b);
    }
    /* the server down: one line naming the URL and the reason */
    loadgen_opts o = {.url = "http://127.0.0.1:1", .n_prompt = 4, .n_gen = 4};
    loadgen *lg = NULL;
    CHECK(loadgen_new(&o, &lg, &err) == -1 && lg == NULL);
    CHECK(strstr(err.msg, "http://127.0.0.1:1/v1/models: Couldn't connect") != NULL);
    CHECK(strchr(err.msg, '\n') == NULL);
    o.n_gen = 0;
    CHECK(loadgen_new(&o, &lg, &err) == -1 && strstr(err.msg, "must be >= 1"));
}

TEST_MAIN(TEST_CASE(test_sse_parse_lines), TEST_CASE(test_sse_parse_bom_and_limits),
          TEST_CASE(test_sse_framing_chat), TEST_CASE(test_sse_framing_completion_and_error),
          TEST_CASE(test_loadgen_stats), TEST_CASE(test_loadgen_urls))
