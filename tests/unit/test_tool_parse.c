/* Tool-call parsing: format detection from the official chat templates, and
 * the incremental parser on recorded outputs of each family
 * (tests/fixtures/tool_calls/FORMAT__CASE.txt, the expected result beside it
 * in FORMAT__CASE.expect.json). Each output is parsed in one piece, one byte
 * at a time, and in random pieces of 1..7 bytes under several seeds (cuts
 * inside markers and inside UTF-8 sequences): the results must be
 * byte-identical and the streamed events must add up to them. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/strbuf.h"
#include "core/utf8.h"
#include "serve/tool_parse.h"
#include "test.h"

#define FIXTURES "tests/fixtures/tool_calls"

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    strbuf sb;
    sb_init(&sb);
    char tmp[4096];
    size_t n;
    while ((n = fread(tmp, 1, sizeof tmp, f)) > 0)
        sb_append(&sb, tmp, n);
    fclose(f);
    if (len)
        *len = sb.len;
    if (!sb.data)
        sb_append(&sb, "", 0);
    return sb_take(&sb);
}

/* ---- detection ---------------------------------------------------------- */

static void test_detect_templates(void)
{
    static const struct {
        const char *file;
        toolparse_format want;
    } cases[] = {
        {"Qwen-Qwen3-0.6B", TOOLPARSE_HERMES},
        {"Qwen-Qwen2.5-7B-Instruct", TOOLPARSE_HERMES},
        {"Qwen-QwQ-32B", TOOLPARSE_HERMES},
        {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", TOOLPARSE_HERMES},
        {"ibm-granite-granite-4.0", TOOLPARSE_HERMES},
        {"Qwen3-Coder", TOOLPARSE_QWEN3_CODER},
        {"Qwen3.5-4B", TOOLPARSE_QWEN3_CODER},
        {"meta-llama-Llama-3.1-8B-Instruct", TOOLPARSE_LLAMA3},
        {"meta-llama-Llama-3.2-3B-Instruct", TOOLPARSE_LLAMA3},
        {"Mistral-Small-3.2-24B-Instruct-2506", TOOLPARSE_MISTRAL},
        {"mistralai-Mistral-Nemo-Instruct-2407", TOOLPARSE_MISTRAL},
        {"deepseek-ai-DeepSeek-V3.1", TOOLPARSE_DEEPSEEK},
        {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", TOOLPARSE_DEEPSEEK},
        {"openai-gpt-oss-120b", TOOLPARSE_HARMONY},
        {"google-gemma-4-31B-it", TOOLPARSE_GEMMA4},
        {"google-gemma-2-2b-it", TOOLPARSE_NONE},
        {"moonshotai-Kimi-K2", TOOLPARSE_KIMI_K2},
        {"GLM-4.6", TOOLPARSE_GLM45},
        {"HuggingFaceTB-SmolLM3-3B", TOOLPARSE_NONE},
        {"microsoft-Phi-3.5-mini-instruct", TOOLPARSE_NONE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/templates/%s.jinja", test_data_dir(), cases[i].file);
        if (!test_need_file(path))
            continue;
        char *src = read_all(path, NULL);
        toolparse_format got = toolparse_detect(src);
        CHECK_MSG(got == cases[i].want, "%s: detected %s, want %s", cases[i].file,
                  toolparse_format_name(got), toolparse_format_name(cases[i].want));
        free(src);
    }
    CHECK(toolparse_detect(NULL) == TOOLPARSE_NONE);
    CHECK(toolparse_detect("{{ messages[0].content }}") == TOOLPARSE_NONE);
}

static void test_format_names(void)
{
    for (int f = 0; f < TOOLPARSE_FORMAT_COUNT; f++)
        CHECK(toolparse_format_from_name(toolparse_format_name((toolparse_format)f)) == f);
    CHECK(toolparse_format_from_name("nope") == -1);
}

/* ---- the pieces --------------------------------------------------------- */

static void test_json_extent(void)
{
    CHECK(tcp_json_extent("{\"a\": [1, {\"b\": \"}\"}]} tail", 27) == 22);
    CHECK(tcp_json_extent("  {\"a\": \"\\\"}\"}", 14) == 14);
    CHECK(tcp_json_extent("{\"a\": [1, 2", 11) == 0);
    CHECK(tcp_json_extent("   ", 3) == 0);
    CHECK(tcp_json_extent("hello", 5) == -1);
}

static void test_value_rule(void)
{
    static const struct {
        const char *in, *want;
    } cases[] = {
        {"3", "3"},          {"-2.5", "-2.5"},       {"true", "true"},
        {"null", "null"},    {"Paris", "\"Paris\""}, {"\"quoted\"", "\"quoted\""},
        {"[1, 2]", "[1,2]"}, {"{\"a\": 1}", "{\"a\":1}"}, {"3 apples", "\"3 apples\""},
        {"", "\"\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = tcp_value_json(cases[i].in, strlen(cases[i].in));
        CHECK_MSG(!strcmp(got, cases[i].want), "%s -> %s, want %s", cases[i].in, got,
                  cases[i].want);
        free(got);
    }
}

/* ---- the parser on recorded outputs ------------------------------------- */

typedef struct {
    strbuf content, reasoning;
    strbuf args[16];
    char *ids[16], *names[16];
    int started, ended;
    int bad; /* an event out of order, or a piece that splits UTF-8 */
} collector;

static void on_event(void *user, const toolparse_event *ev)
{
    collector *c = user;
    switch (ev->kind) {
    case TOOLPARSE_EV_CONTENT:
    case TOOLPARSE_EV_REASONING:
        if (!utf8_valid(ev->text, ev->len) || !ev->len)
            c->bad++;
        sb_append(ev->kind == TOOLPARSE_EV_CONTENT ? &c->content : &c->reasoning, ev->text,
                  ev->len);
        break;
    case TOOLPARSE_EV_CALL_START:
        if (ev->index != c->started || c->ended != c->started || ev->index >= 16) {
            c->bad++;
            break;
        }
        c->ids[ev->index] = strdup(ev->id);
        c->names[ev->index] = strdup(ev->name);
        c->started++;
        break;
    case TOOLPARSE_EV_CALL_ARGS:
        if (ev->index != c->started - 1 || ev->index < 0)
            c->bad++;
        else
            sb_append(&c->args[ev->index], ev->text, ev->len);
        break;
    case TOOLPARSE_EV_CALL_END:
        if (ev->index != c->ended || ev->index != c->started - 1)
            c->bad++;
        else
            c->ended++;
        break;
    }
}

static void collector_free(collector *c)
{
    sb_free(&c->content);
    sb_free(&c->reasoning);
    for (int i = 0; i < 16; i++) {
        sb_free(&c->args[i]);
        free(c->ids[i]);
        free(c->names[i]);
    }
}

/* Parses text cut into pieces: chunk 0 is one piece, -1 random 1..7 bytes
 * from seed, else that many bytes. Checks the events against the result. */
static void parse_in_pieces(const char *tag, toolparse_format f, int sir, const char *text,
                            size_t len, int chunk, uint64_t seed, toolparse_result *out)
{
    toolparse_opts o = {.starts_in_reasoning = sir, .id_seed = 42};
    toolparse *p = toolparse_new(f, &o);
    collector c;
    memset(&c, 0, sizeof c);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < len;) {
        size_t n = (size_t)chunk;
        if (chunk == 0) {
            n = len;
        } else if (chunk < 0) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            n = 1 + (size_t)(s % 7);
        }
        if (n > len - i)
            n = len - i;
        toolparse_feed(p, text + i, n, on_event, &c);
        i += n;
    }
    toolparse_finish(p, on_event, &c, out);
    CHECK_MSG(!c.bad, "%s (chunk %d seed %llu): events out of order or split UTF-8", tag,
              chunk, (unsigned long long)seed);
    CHECK_MSG(!strcmp(sb_str(&c.content), out->content),
              "%s (chunk %d seed %llu): streamed content [%s] != result [%s]", tag, chunk,
              (unsigned long long)seed, sb_str(&c.content), out->content);
    CHECK_MSG(!strcmp(sb_str(&c.reasoning), out->reasoning),
              "%s (chunk %d): streamed reasoning != result", tag, chunk);
    CHECK_MSG(c.started == out->n_calls && c.ended == out->n_calls,
              "%s (chunk %d): %d calls streamed, %d in the result", tag, chunk, c.started,
              out->n_calls);
    for (int i = 0; i < out->n_calls && i < c.started; i++) {
        CHECK(!strcmp(c.ids[i], out->calls[i].id));
        CHECK(!strcmp(c.names[i], out->calls[i].name));
        CHECK(!strcmp(sb_str(&c.args[i]), out->calls[i].arguments));
    }
    collector_free(&c);
    toolparse_free(p);
}

static int same_result(const toolparse_result *a, const toolparse_result *b)
{
    if (strcmp(a->content, b->content) || strcmp(a->reasoning, b->reasoning) ||
        a->n_calls != b->n_calls)
        return 0;
    for (int i = 0; i < a->n_calls; i++)
        if (strcmp(a->calls[i].id, b->calls[i].id) || strcmp(a->calls[i].name, b->calls[i].name) ||
            strcmp(a->calls[i].arguments, b->calls[i].arguments))
            return 0;
    return 1;
}

static int valid_id(const char *id)
{
    if (strlen(id) != 29 || strncmp(id, "call_", 5))
        return 0;
    for (int i = 5; i < 29; i++)
        if (!((id[i] >= 'a' && id[i] <= 'z') || (id[i] >= 'A' && id[i] <= 'Z') ||
              (id[i] >= '0' && id[i] <= '9')))
            return 0;
    return 1;
}

static int n_fixtures, n_formats_seen[TOOLPARSE_FORMAT_COUNT];

static void check_fixture(const char *base)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.expect.json", FIXTURES, base);
    json_error_t err;
    json_t *want = json_load_file(path, 0, &err);
    CHECK_MSG(want, "%s: %s (line %d)", path, err.text, err.line);
    if (!want)
        return;
    snprintf(path, sizeof path, "%s/%s.txt", FIXTURES, base);
    size_t len = 0;
    char *text = read_all(path, &len);
    CHECK_MSG(text, "%s: cannot read", path);
    int f = toolparse_format_from_name(json_string_value(json_object_get(want, "format")));
    CHECK_MSG(f >= 0, "%s: unknown format", base);
    if (!text || f < 0) {
        free(text);
        json_decref(want);
        return;
    }
    n_fixtures++;
    n_formats_seen[f]++;
    int sir = json_is_true(json_object_get(want, "starts_in_reasoning"));

    toolparse_result whole;
    parse_in_pieces(base, (toolparse_format)f, sir, text, len, 0, 0, &whole);
    const char *wc = json_string_value(json_object_get(want, "content"));
    const char *wr = json_string_value(json_object_get(want, "reasoning_content"));
    CHECK_MSG(wc && !strcmp(whole.content, wc), "%s: content [%s], want [%s]", base,
              whole.content, wc ? wc : "?");
    CHECK_MSG(wr && !strcmp(whole.reasoning, wr), "%s: reasoning [%s], want [%s]", base,
              whole.reasoning, wr ? wr : "?");
    json_t *calls = json_object_get(want, "tool_calls");
    CHECK_MSG((size_t)whole.n_calls == json_array_size(calls), "%s: %d calls, want %zu", base,
              whole.n_calls, json_array_size(calls));
    for (int i = 0; i < whole.n_calls && (size_t)i < json_array_size(calls); i++) {
        json_t *c = json_array_get(calls, (size_t)i);
        const char *wn = json_string_value(json_object_get(c, "name"));
        const char *wa = json_string_value(json_object_get(c, "arguments"));
        CHECK_MSG(wn && !strcmp(whole.calls[i].name, wn), "%s: call %d name %s, want %s", base,
                  i, whole.calls[i].name, wn ? wn : "?");
        CHECK_MSG(wa && !strcmp(whole.calls[i].arguments, wa),
                  "%s: call %d arguments %s, want %s", base, i, whole.calls[i].arguments,
                  wa ? wa : "?");
        CHECK_MSG(valid_id(whole.calls[i].id), "%s: id %s", base, whole.calls[i].id);
        if (i > 0)
            CHECK(strcmp(whole.calls[i].id, whole.calls[i - 1].id));
    }
    CHECK(whole.n_calls ? !strcmp(whole.finish_reason, "tool_calls") : !whole.finish_reason);

    /* The OpenAI message carries the same. */
    json_t *m = toolparse_result_message(&whole);
    CHECK(json_array_size(json_object_get(m, "tool_calls")) == (size_t)whole.n_calls);
    json_decref(m);

    int chunks[] = {1, 2, 3, -1, -1, -1, -1, -1, -1, -1, -1};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        toolparse_result r;
        parse_in_pieces(base, (toolparse_format)f, sir, text, len, chunks[k], k, &r);
        CHECK_MSG(same_result(&r, &whole), "%s: chunks of %d (seed %zu) give [%s] [%s] %d calls",
                  base, chunks[k], k, r.content, r.reasoning, r.n_calls);
        toolparse_result_free(&r);
    }
    toolparse_result_free(&whole);
    free(text);
    json_decref(want);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_recorded_outputs(void)
{
    DIR *d = opendir(FIXTURES);
    CHECK_MSG(d, "%s: cannot open (run from the project root)", FIXTURES);
    if (!d)
        return;
    char *names[512];
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 512) {
        size_t L = strlen(e->d_name);
        if (L > 4 && !strcmp(e->d_name + L - 4, ".txt"))
            names[n++] = strndup(e->d_name, L - 4);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    for (int i = 0; i < n; i++) {
        check_fixture(names[i]);
        free(names[i]);
    }
    CHECK_MSG(n_fixtures >= 60, "only %d fixtures", n_fixtures);
    for (int f = 0; f < TOOLPARSE_FORMAT_COUNT; f++)
        CHECK_MSG(n_formats_seen[f] > 0, "no fixture for %s",
                  toolparse_format_name((toolparse_format)f));
    printf("  %d recorded outputs, each parsed 12 ways\n", n_fixtures);
}

/* Random texts stitched from every family's markers, JSON pieces, spaces
 * and multi-byte characters: whatever the text, in whatever pieces, each
 * format gives the same result and its events add up to it. This is the
 * property the server relies on; the recorded outputs check the meaning. */
static void test_random_texts_chunk_invariant(void)
{
    static const char *const parts[] = {
        "<think>", "</think>", "<tool_call>", "</tool_call>", "<tool", "_call>", "\n", " \n",
        "  ", "{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
        "{\"name\": \"g\", \"parameters\": {}}", "{", "}", "\"", "[", "]", ";",
        "<function=f>", "<parameter=x>", "</parameter>", "</function>", "5", "text",
        "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]",
        "get_weather",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "calls\xe2\x96\x81" "begin\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "begin\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>",
        "<\xef\xbd\x9ctool\xe2\x96\x81" "call\xe2\x96\x81" "end\xef\xbd\x9c>",
        "<|channel|>", "analysis", "final", "commentary to=functions.f ", "<|message|>",
        "<|end|>", "<|call|>", "<|return|>", "<|start|>assistant", "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>", "functions.f:0", "<|tool_call_argument_begin|>",
        "<|tool_call_end|>", "<|tool_call>", "call:f{", "<|\"|>", "<tool_call|>",
        "<|channel>thought", "<channel|>", "<arg_key>", "</arg_key>", "<arg_value>",
        "</arg_value>", "\xc3\xa7", "\xe6\x9d\xb1", "\xf0\x9f\x99\x82", "<", "|", ">",
    };
    int np = (int)(sizeof parts / sizeof parts[0]), bad = 0;
    uint64_t s = 12345;
    for (int f = 0; f < TOOLPARSE_FORMAT_COUNT && bad < 5; f++) {
        for (int iter = 0; iter < 300 && bad < 5; iter++) {
            strbuf t;
            sb_init(&t);
            int k = 1 + iter % 24;
            for (int i = 0; i < k; i++) {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                sb_puts(&t, parts[s % (uint64_t)np]);
            }
            int sir = iter % 5 == 4;
            toolparse_result whole, r;
            int before = test_failed_checks;
            parse_in_pieces("random", (toolparse_format)f, sir, t.data, t.len, 0, 0, &whole);
            for (int seed = 0; seed < 4; seed++) {
                parse_in_pieces("random", (toolparse_format)f, sir, t.data, t.len,
                                seed ? -1 : 1, (uint64_t)(iter * 4 + seed), &r);
                CHECK_MSG(same_result(&r, &whole), "%s: [%s] gives [%s] whole, [%s] in pieces",
                          toolparse_format_name((toolparse_format)f), t.data, whole.content,
                          r.content);
                toolparse_result_free(&r);
            }
            if (test_failed_checks != before)
                bad++;
            toolparse_result_free(&whole);
            sb_free(&t);
        }
    }
}

/* Ids come from the caller's generator when it gives one. */
static uint64_t counter_rand(void *ctx)
{
    return (*(uint64_t *)ctx)++;
}

static void test_caller_ids(void)
{
    uint64_t ctr = 0;
    toolparse_opts o = {.rand = counter_rand, .rand_ctx = &ctr};
    toolparse *p = toolparse_new(TOOLPARSE_HERMES, &o);
    const char *t = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    toolparse_feed(p, t, strlen(t), NULL, NULL);
    toolparse_result r;
    toolparse_finish(p, NULL, NULL, &r);
    CHECK(r.n_calls == 1);
    if (r.n_calls == 1) {
        CHECK(!strcmp(r.calls[0].id, "call_ABCDEFGHIJKLMNOPQRSTUVWX"));
        CHECK(!strcmp(r.calls[0].arguments, "{}"));
    }
    CHECK(ctr == 24);
    toolparse_result_free(&r);
    toolparse_free(p);
}

/* Content is sent as soon as it cannot be markup: a client sees the answer
 * while it is generated, not at the end. */
static void test_content_not_held(void)
{
    toolparse *p = toolparse_new(TOOLPARSE_HERMES, NULL);
    collector c;
    memset(&c, 0, sizeof c);
    toolparse_feed(p, "Hello there <tool", 17, on_event, &c);
    CHECK(!strcmp(sb_str(&c.content), "Hello there"));
    toolparse_feed(p, "kit> ok", 7, on_event, &c);
    CHECK(!strcmp(sb_str(&c.content), "Hello there <toolkit> ok"));
    toolparse_result r;
    toolparse_finish(p, on_event, &c, &r);
    CHECK(!strcmp(r.content, "Hello there <toolkit> ok"));
    toolparse_result_free(&r);
    collector_free(&c);
    toolparse_free(p);
}

TEST_MAIN(TEST_CASE(test_detect_templates), TEST_CASE(test_format_names),
          TEST_CASE(test_json_extent), TEST_CASE(test_value_rule),
          TEST_CASE(test_recorded_outputs), TEST_CASE(test_random_texts_chunk_invariant),
          TEST_CASE(test_caller_ids),
          TEST_CASE(test_content_not_held))
