/* Benchmark helpers: the statistics, the repetition driver, the built-in
 * mixed text, the engine and tokenizer measurements on real models, and
 * the bandwidth probe with its cache. No speed is asserted: only that the
 * figures exist, are positive and add up. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/mapfile.h"
#include "bench/membw.h"
#include "bench/bench.h"
#include "bench/convo.h"
#include <jansson.h>
#include "engine/engine.h"
#include "model/checkpoint.h"
#include "core/utf8.h"
#include "test.h"
#include "tok/tokenizer.h"

static void test_stats(void)
{
    double odd[] = {5, 1, 4, 2, 3};
    bench_stats s;
    bench_stats_of(odd, 5, &s);
    CHECK(s.n == 5 && s.median == 3 && s.min == 1 && s.max == 5 && s.mean == 3);
    CHECK(odd[0] == 5 && odd[4] == 3); /* not reordered */
    double even[] = {10, 2, 8, 4};
    bench_stats_of(even, 4, &s);
    CHECK(s.median == 6 && s.min == 2 && s.max == 10 && s.mean == 6);
    double one[] = {7.5};
    bench_stats_of(one, 1, &s);
    CHECK(s.median == 7.5 && s.min == 7.5 && s.max == 7.5);
}

typedef struct {
    int calls, fail_at;
} rep_ctx;

static int fake_rep(void *ctx, double *ms, memra_err *err)
{
    rep_ctx *c = ctx;
    c->calls++;
    if (c->calls == c->fail_at)
        return memra_fail(err, "rep %d failed", c->calls);
    *ms = c->calls; /* warm-up calls come first, so they are 1..warmup */
    return 0;
}

static void test_repeat(void)
{
    rep_ctx c = {0, -1};
    bench_stats s;
    memra_err err;
    CHECK(bench_repeat(fake_rep, &c, 2, 3, &s, &err) == 0);
    CHECK(c.calls == 5);
    CHECK(s.n == 3 && s.min == 3 && s.max == 5 && s.median == 4); /* warm-ups left out */
    c = (rep_ctx){0, 4};
    CHECK(bench_repeat(fake_rep, &c, 1, 5, &s, &err) == -1);
    CHECK(strstr(err.msg, "rep 4 failed") != NULL);
    c = (rep_ctx){0, -1};
    CHECK(bench_repeat(fake_rep, &c, 0, 0, &s, &err) == -1);
    CHECK(strstr(err.msg, "0 repetitions") != NULL);
}

static void test_mixed_text(void)
{
    size_t n1, n2;
    char *a = bench_mixed_text(1000000, &n1), *b = bench_mixed_text(1000000, &n2);
    CHECK(n1 == n2 && memcmp(a, b, n1) == 0); /* deterministic */
    CHECK(n1 <= 1000000 && n1 > 990000);
    CHECK(strlen(a) == n1);
    CHECK(utf8_valid(a, n1));
    static const char *must[] = {
        "lighthouse", "static int ", "def ", "\"ratio\": ", "| north |", "東京", "오늘은", "今天",
        "Москва", "👨‍👩‍👧‍👦", "🇯🇵", "\t\t", "    indented", "https://example.org/", "\r\n",
    };
    for (size_t i = 0; i < sizeof must / sizeof *must; i++)
        CHECK_MSG(strstr(a, must[i]) != NULL, "missing '%s'", must[i]);
    /* every placeholder was expanded */
    static const char *left[] = {"%N", "%F", "%X", "%I", "%W"};
    for (size_t i = 0; i < 5; i++)
        CHECK_MSG(strstr(a, left[i]) == NULL, "placeholder '%s' left", left[i]);
    /* varied: the first 200 bytes do not simply repeat */
    CHECK(memcmp(a, a + n1 / 2, 200) != 0);
    /* a prefix of the same sequence for a smaller target */
    size_t n3;
    char *c = bench_mixed_text(50000, &n3);
    CHECK(n3 <= 50000 && n3 > 40000 && memcmp(a, c, n3) == 0);
    size_t n0;
    char *z = bench_mixed_text(0, &n0);
    CHECK(n0 == 0 && z[0] == '\0');
    free(a);
    free(b);
    free(c);
    free(z);
}

static void test_engine_measurements(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_data_dir());
    if (!test_need_file(path))
        return;
    checkpoint ck;
    memra_err err;
    CHECK_MSG(checkpoint_open(path, &ck, &err) == 0, "%s", err.msg);
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 1;
    o.n_ctx = 48;
    engine *e;
    CHECK_MSG(engine_load(&ck, &o, &e, &err) == 0, "%s", err.msg);
    engine_seq *s;
    CHECK(engine_seq_new(e, &s, &err) == 0);
    bench_stats st;
    CHECK_MSG(bench_prefill(e, s, 0, 40, 1, 3, 1, &st, &err) == 0, "%s", err.msg);
    CHECK(st.n == 3 && st.min > 0 && st.min <= st.median && st.median <= st.max);
    CHECK(engine_seq_pos(s) == 0); /* left empty */
    /* after 32 tokens: each repetition cut back to them (a repetition that
     * kept the one before's 16 would run past the context of 48) */
    CHECK_MSG(bench_prefill(e, s, 32, 16, 1, 3, 1, &st, &err) == 0, "%s", err.msg);
    CHECK(st.n == 3 && st.min > 0 && st.median <= st.max);
    CHECK(engine_seq_pos(s) == 0);
    CHECK(bench_prefill(e, s, 40, 16, 0, 1, 1, &st, &err) == -1);
    CHECK_MSG(strstr(err.msg, "n_ctx 48") != NULL, "%s", err.msg);
    CHECK_MSG(bench_decode(e, s, 32, 8, 1, 3, 1, &st, &err) == 0, "%s", err.msg);
    CHECK(st.n == 3 && st.min > 0 && st.median <= st.max);
    CHECK(engine_seq_pos(s) == 0);
    /* past the context: the engine's error comes back, naming n_ctx */
    CHECK(bench_decode(e, s, 40, 16, 0, 1, 1, &st, &err) == -1);
    CHECK_MSG(strstr(err.msg, "n_ctx 48") != NULL, "%s", err.msg);
    CHECK(bench_prefill(e, s, 0, 0, 0, 1, 1, &st, &err) == -1);
    CHECK(bench_prefill(e, s, -1, 8, 0, 1, 1, &st, &err) == -1);
    engine_seq_free(s);
    engine_free(e);
    checkpoint_close(&ck);
}

static void test_tokenize_measurement(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-qwen2.gguf", test_data_dir());
    if (!test_need_file(path))
        return;
    checkpoint ck;
    memra_err err;
    CHECK_MSG(checkpoint_open(path, &ck, &err) == 0, "%s", err.msg);
    tokenizer *t;
    CHECK_MSG(checkpoint_load_tokenizer(&ck, &t, &err) == 0, "%s", err.msg);
    size_t len, n_tokens = 0;
    char *text = bench_mixed_text(20000, &len);
    bench_stats st;
    CHECK_MSG(bench_tokenize(t, text, len, 1, 2, &st, &n_tokens, &err) == 0, "%s", err.msg);
    CHECK(st.n == 2 && st.min > 0);
    /* the count is that of a plain encode */
    int32_t *ids;
    size_t n;
    CHECK(tok_encode(t, text, len, 0, 0, &ids, &n, &err) == 0);
    CHECK(n_tokens == n && n > len / 10 && n < len);
    free(ids);
    free(text);
    tok_free(t);
    checkpoint_close(&ck);
}

static void test_membw_probe(void)
{
    membw_result r;
    memra_err err;
    CHECK_MSG(membw_probe(2, 8u << 20, 3, &r, &err) == 0, "%s", err.msg);
    CHECK(r.gb_s > 0 && r.median_gb_s > 0 && r.median_gb_s <= r.gb_s);
    CHECK(r.n_threads == 2 && r.reps == 3 && r.buffer_bytes == 8u << 20);
    CHECK(r.n_cpus == membw_online_cpus() && r.cpu[0] && r.hostname[0]);
    CHECK(strlen(r.measured_at) == 20 && r.measured_at[10] == 'T');
    /* a buffer too small for its threads is refused */
    CHECK(membw_probe(4, 128, 1, &r, &err) == -1);
    CHECK(strstr(err.msg, "too small") != NULL);
}

static void write_text(const char *path, const char *s)
{
    FILE *f = fopen(path, "w");
    fputs(s, f);
    fclose(f);
}

static void test_membw_cache(void)
{
    char dir[600], path[700];
    snprintf(dir, sizeof dir, "%s/membw-cache/a/b", test_tmp_dir());
    snprintf(path, sizeof path, "%s/bandwidth-test.json", dir);
    membw_result w = {.gb_s = 12.5, .median_gb_s = 11.25, .n_threads = 3,
                      .buffer_bytes = 1u << 30, .reps = 10, .n_cpus = membw_online_cpus()};
    membw_cpu_model(w.cpu, sizeof w.cpu);
    snprintf(w.hostname, sizeof w.hostname, "host-a");
    snprintf(w.measured_at, sizeof w.measured_at, "2026-11-30T06:41:09Z");
    memra_err err;
    CHECK_MSG(membw_cache_write(path, &w, &err) == 0, "%s", err.msg); /* creates a/b */
    membw_result r;
    CHECK_MSG(membw_cache_read(path, &r, &err) == 0, "%s", err.msg);
    CHECK(r.gb_s == 12.5 && r.median_gb_s == 11.25 && r.n_threads == 3 && r.reps == 10);
    CHECK(r.buffer_bytes == 1u << 30 && r.n_cpus == w.n_cpus);
    CHECK(!strcmp(r.cpu, w.cpu) && !strcmp(r.hostname, "host-a"));
    CHECK(!strcmp(r.measured_at, w.measured_at));
    const char *why;
    CHECK(membw_cache_matches(&r, &why) == 1);
    snprintf(r.cpu, sizeof r.cpu, "Some Other CPU 9000");
    CHECK(membw_cache_matches(&r, &why) == 0 && strstr(why, "CPU model"));
    membw_cpu_model(r.cpu, sizeof r.cpu);
    r.n_cpus += 1;
    CHECK(membw_cache_matches(&r, &why) == 0 && strstr(why, "online CPUs"));

    /* malformed files: an error naming the file and what is wrong */
    write_text(path, "{\"read_gb_s\": 1");
    CHECK(membw_cache_read(path, &r, &err) == -1 && strstr(err.msg, path));
    write_text(path, "[1,2]");
    CHECK(membw_cache_read(path, &r, &err) == -1 && strstr(err.msg, "not a JSON object"));
    write_text(path, "{\"read_gb_s\": 5}");
    CHECK(membw_cache_read(path, &r, &err) == -1 && strstr(err.msg, "median_gb_s"));
    write_text(path, "{\"read_gb_s\": -5, \"median_gb_s\": 1, \"threads\": 1, \"reps\": 1, "
                     "\"n_cpus\": 1, \"buffer_bytes\": 4096, \"cpu\": \"x\", \"hostname\": "
                     "\"h\", \"measured_at\": \"t\"}");
    CHECK(membw_cache_read(path, &r, &err) == -1 && strstr(err.msg, "-5"));
    write_text(path, "{\"read_gb_s\": \"fast\"}");
    CHECK(membw_cache_read(path, &r, &err) == -1 && strstr(err.msg, "read_gb_s"));
}

/* The host ceiling measures once, then reads the cache; a stale or broken
 * cache is measured again and replaced; --remeasure measures again. */
static void test_membw_host_ceiling(void)
{
    char dir[600], path[800];
    snprintf(dir, sizeof dir, "%s/membw-host", test_tmp_dir());
    setenv("MEMRA_CACHE", dir, 1);
    memra_err err;
    CHECK(membw_cache_path(path, sizeof path, &err) == 0);
    CHECK(strncmp(path, dir, strlen(dir)) == 0 && strstr(path, "/bandwidth-"));
    unlink(path);
    membw_ceiling c;
    CHECK_MSG(membw_host_ceiling(0, 4u << 20, &c, &err) == 0, "%s", err.msg);
    CHECK(!c.from_cache && c.r.gb_s > 0 && !strcmp(c.path, path) && c.note[0] == '\0');
    CHECK(access(path, F_OK) == 0);
    double first = c.r.gb_s;
    CHECK(membw_host_ceiling(0, 4u << 20, &c, &err) == 0);
    CHECK(c.from_cache && c.r.gb_s == first);
    CHECK(membw_host_ceiling(1, 4u << 20, &c, &err) == 0);
    CHECK(!c.from_cache && c.r.gb_s > 0);
    write_text(path, "not json");
    CHECK(membw_host_ceiling(0, 4u << 20, &c, &err) == 0);
    CHECK(!c.from_cache && strstr(c.note, "cache not used"));
    CHECK(membw_host_ceiling(0, 4u << 20, &c, &err) == 0);
    CHECK(c.from_cache); /* rewritten by the measurement */
    unsetenv("MEMRA_CACHE");
}

/* The multi-turn filler: the same bytes for the same seed, stream and
 * length, n words in sentences, another stream another text, and a
 * conversation's bodies resending the whole history. */
static void test_convo(void)
{
    char *a = convo_filler(7, 1, 50), *b = convo_filler(7, 1, 50), *c = convo_filler(7, 2, 50);
    char *e = convo_filler(7, 1, 0);
    CHECK(!strcmp(a, b) && strcmp(a, c) && !strcmp(e, ""));
    size_t spaces = 0;
    for (const char *p = a; *p; p++)
        spaces += *p == ' ';
    CHECK(spaces == 49 && a[0] >= 'A' && a[0] <= 'Z' && a[strlen(a) - 1] == '.');
    CHECK(utf8_valid(a, strlen(a)));
    free(a);
    free(b);
    free(c);
    free(e);

    convo *cv = convo_new("You are terse.", 7, 3, 10);
    CHECK(convo_turns(cv) == 0);
    char *b1 = convo_next_body(cv, "chat", 8);
    convo_reply(cv, "first reply", 11);
    char *b2 = convo_next_body(cv, "chat", 8);
    CHECK(convo_turns(cv) == 2);
    json_t *j1 = json_loads(b1, 0, NULL), *j2 = json_loads(b2, 0, NULL);
    CHECK(j1 && j2);
    json_t *m1 = json_object_get(j1, "messages"), *m2 = json_object_get(j2, "messages");
    CHECK(json_array_size(m1) == 2 && json_array_size(m2) == 4);
    /* turn 2 resends turn 1's messages, then the reply, then a new message */
    CHECK(json_equal(json_array_get(m1, 0), json_array_get(m2, 0)) &&
          json_equal(json_array_get(m1, 1), json_array_get(m2, 1)));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m2, 0), "content")),
                  "You are terse."));
    CHECK(!strcmp(json_string_value(json_object_get(json_array_get(m2, 2), "role")),
                  "assistant") &&
          !strcmp(json_string_value(json_object_get(json_array_get(m2, 2), "content")),
                  "first reply"));
    const char *u1 = json_string_value(json_object_get(json_array_get(m1, 1), "content")),
               *u2 = json_string_value(json_object_get(json_array_get(m2, 3), "content"));
    CHECK(u1 && u2 && strcmp(u1, u2));
    CHECK(json_integer_value(json_object_get(j2, "max_tokens")) == 8 &&
          json_is_true(json_object_get(j2, "stream")) &&
          json_is_true(json_object_get(json_object_get(j2, "stream_options"), "include_usage")) &&
          json_integer_value(json_object_get(j2, "temperature")) == 0 &&
          !strcmp(json_string_value(json_object_get(j2, "model")), "chat"));
    /* the same conversation again: the same bytes */
    convo *again = convo_new("You are terse.", 7, 3, 10);
    char *a1 = convo_next_body(again, "chat", 8);
    CHECK(!strcmp(a1, b1));
    json_decref(j1);
    json_decref(j2);
    free(b1);
    free(b2);
    free(a1);
    convo_free(cv);
    convo_free(again);
}

TEST_MAIN(TEST_CASE(test_stats), TEST_CASE(test_convo), TEST_CASE(test_repeat), TEST_CASE(test_mixed_text),
          TEST_CASE(test_engine_measurements), TEST_CASE(test_tokenize_measurement),
          TEST_CASE(test_membw_probe), TEST_CASE(test_membw_cache),
          TEST_CASE(test_membw_host_ceiling))
