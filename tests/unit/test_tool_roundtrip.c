/* Tool calls round-trip through each official template: a conversation
 * whose assistant message holds tool_calls is rendered by the model's own
 * chat template (lib/jinja), the assistant's part is cut out, and the
 * parser of the format detected from that template must read the same
 * calls back (names, and arguments compared as parsed JSON) with no markup
 * left in the content. The template is the evidence of what the model was
 * trained to write, so this ties detection, the template engine and the
 * parser together for every family: a parser that cannot read its own
 * template's rendering would not read the model either.
 *
 * The assistant's part is what the conversation rendered with the
 * assistant message has beyond the longest common prefix with the same
 * conversation rendered without it and with add_generation_prompt: what
 * the model generates after the prompt memra-serve would send. Where a
 * template renders a past call differently from how the model writes it,
 * the table below says so and the test checks what is right instead
 * (docs/TOOL-CALLS.md, "Round trip").
 *
 * MEMRA_ROUNDTRIP_DUMP=1 prints each assistant part (for debugging). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/strbuf.h"
#include "jinja/chat_template.h"
#include "serve/tool_parse.h"
#include "test.h"

static char *read_all(const char *path)
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
    sb_puts(&sb, "");
    return sb_take(&sb);
}

/* ---- the conversation --------------------------------------------------- */

static json_t *load(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    if (!j) {
        fprintf(stderr, "bad fixture JSON: %s\n", e.text);
        abort();
    }
    return j;
}

static const char tools_json[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"description\":\"Weather forecast for a place\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"location\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},"
    "\"options\":{\"type\":\"object\"},\"note\":{\"type\":\"string\"}},"
    "\"required\":[\"location\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"search_recipes\","
    "\"description\":\"Find recipes\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"query\":{\"type\":\"string\"},\"limit\":{\"type\":\"number\"},"
    "\"filters\":{\"type\":\"object\"}},\"required\":[\"query\"]}}}]";

/* A string, a number, a nested object and a non-ASCII string each. */
static const char *const call_names[2] = {"get_weather", "search_recipes"};
static const char *const call_args[2] = {
    "{\"location\":\"Paris\",\"days\":3,\"options\":{\"units\":\"metric\",\"hourly\":true},"
    "\"note\":\"caf\xc3\xa9 \xe2\x98\x95\"}",
    "{\"query\":\"cr\xc3\xa8me br\xc3\xbbl\xc3\xa9" "e\",\"limit\":2.5,"
    "\"filters\":{\"diet\":\"vegetarian\",\"max_minutes\":45}}",
};

/* [system, user] (+ the assistant with n_calls calls when n_calls > 0).
 * Arguments are objects, as memra-serve passes them to a template. The
 * assistant's content is "" or null (content_null): templates disagree on
 * which they survive (the table says). */
static json_t *conversation(int n_calls, int content_null)
{
    json_t *m = json_array();
    json_array_append_new(m, load("{\"role\":\"system\",\"content\":\"You are a helpful "
                                  "assistant.\"}"));
    json_array_append_new(m, load("{\"role\":\"user\",\"content\":\"What is the weather in "
                                  "Paris, and a dessert recipe?\"}"));
    if (n_calls) {
        json_t *calls = json_array();
        for (int i = 0; i < n_calls; i++) {
            json_t *fn = json_object();
            json_object_set_new(fn, "name", json_string(call_names[i]));
            json_object_set_new(fn, "arguments", load(call_args[i]));
            json_t *c = json_object();
            /* Mistral's templates accept only 9-character alphanumeric ids. */
            json_object_set_new(c, "id", json_string(i ? "f5G6h7J8k" : "a1B2c3D4e"));
            json_object_set_new(c, "type", json_string("function"));
            json_object_set_new(c, "function", fn);
            json_array_append_new(calls, c);
        }
        json_t *a = json_object();
        json_object_set_new(a, "role", json_string("assistant"));
        json_object_set_new(a, "content", content_null ? json_null() : json_string(""));
        json_object_set_new(a, "tool_calls", calls);
        json_array_append_new(m, a);
    }
    return m;
}

/* ---- the templates ------------------------------------------------------ */

enum {
    MULTI_OK,      /* renders every call of the message */
    MULTI_RAISES,  /* raise_exception on more than one call (Llama 3.x) */
    MULTI_FIRST,   /* renders tool_calls[0] only (gpt-oss: one call per message) */
};

typedef struct {
    const char *file;
    const char *bos, *eos;
    int content_null;
    int multi;
    /* What the prompt (add_generation_prompt) has beyond the common prefix,
     * when the template is not prefix-stable; NULL: nothing. */
    const char *gen_tail;
    /* When set, the model's text starts after the first occurrence of this
     * in the longer rendering's rest (the prompt was rearranged). */
    const char *resync;
} tmpl_case;

#define DS(x) "<\xef\xbd\x9c" x "\xef\xbd\x9c>" /* <｜x｜> */
#define DSP "\xe2\x96\x81"                       /* ▁ */
#define DS_BOS DS("begin" DSP "of" DSP "sentence")
#define DS_EOS DS("end" DSP "of" DSP "sentence")

static const tmpl_case templates[] = {
    /* Qwen3 renders every assistant message after the last user one with
     * an empty <think>\n\n</think> block: the model's own empty reasoning.
     * With content null its template fails ('</think>' in None). */
    {"Qwen-Qwen3-0.6B", NULL, "<|im_end|>", 0, MULTI_OK, NULL, NULL},
    {"Qwen-Qwen2.5-7B-Instruct", NULL, "<|im_end|>", 0, MULTI_OK, NULL, NULL},
    /* QwQ and the R1 distill end the prompt with an empty, closed thinking
     * block (enable_thinking unset) that history leaves out. */
    {"Qwen-QwQ-32B", NULL, "<|im_end|>", 0, MULTI_OK, "<think>\n</think>", NULL},
    {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", "<|begin_of_text|>", "<|im_end|>", 0,
     MULTI_OK, NULL, NULL},
    {"ibm-granite-granite-4.0", NULL, "<|end_of_text|>", 0, MULTI_OK, NULL, NULL},
    {"Qwen3-Coder", NULL, "<|im_end|>", 0, MULTI_OK, NULL, NULL},
    /* Qwen3.5's prompt ends in "<think>\n": the text starts in reasoning. */
    {"Qwen3.5-4B", NULL, "<|im_end|>", 0, MULTI_OK, NULL, NULL},
    /* Llama 3.x renders a past call as the whole message, {"name": ..,
     * "parameters": ..}, as the model writes a custom tool call (not after
     * <|python_tag|>, which is for its built-in tools); one call only. */
    {"meta-llama-Llama-3.1-8B-Instruct", "<|begin_of_text|>", "<|eot_id|>", 0, MULTI_RAISES,
     NULL, NULL},
    {"meta-llama-Llama-3.2-3B-Instruct", "<|begin_of_text|>", "<|eot_id|>", 0, MULTI_RAISES,
     NULL, NULL},
    {"Mistral-Small-3.2-24B-Instruct-2506", "<s>", "</s>", 0, MULTI_OK, NULL, NULL},
    /* Nemo puts the system prompt into the last user message only: with an
     * assistant message after it, the user message renders without it. */
    {"mistralai-Mistral-Nemo-Instruct-2407", "<s>", "</s>", 0, MULTI_OK,
     "You are a helpful assistant.\n\nWhat is the weather in Paris, and a dessert "
     "recipe?[/INST]",
     "[/INST]"},
    {"deepseek-ai-DeepSeek-V3.1", DS_BOS, DS_EOS, 0, MULTI_OK, NULL, NULL},
    /* R1 renders a message with content "" twice, as calls and then as an
     * empty answer: it needs null, as OpenAI sends it. */
    {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", DS_BOS, DS_EOS, 1, MULTI_OK,
     "<think>\n</think>", NULL},
    /* gpt-oss renders the template's header order (to= before the channel)
     * where the model writes it after; the parser reads both. */
    {"openai-gpt-oss-120b", "<|startoftext|>", "<|return|>", 0, MULTI_FIRST, NULL, NULL},
    /* Gemma 4's prompt ends with an empty thought channel history omits. */
    {"google-gemma-4-31B-it", "<bos>", "<eos>", 0, MULTI_OK, "<|channel>thought\n<channel|>",
     NULL},
    {"moonshotai-Kimi-K2", NULL, "<|im_end|>", 0, MULTI_OK, NULL, NULL},
    /* GLM writes content null as "None". */
    {"GLM-4.6", NULL, "<|endoftext|>", 0, MULTI_OK, NULL, NULL},
    /* These teach no tool calls (toolparse_detect says none): skipped. */
    {"google-gemma-2-2b-it", "<bos>", "<eos>", 0, MULTI_OK, NULL, NULL},
    {"HuggingFaceTB-SmolLM3-3B", NULL, "<|im_end|>", 0, MULTI_OK, NULL, NULL},
    {"microsoft-Phi-3.5-mini-instruct", "<s>", "<|endoftext|>", 0, MULTI_OK, NULL, NULL},
};

/* What may end an assistant turn after its calls: end-of-turn and
 * end-of-sequence tokens, and Gemma 4's <|tool_response>, which the model
 * writes to hand over to the tool (generation stops there). */
static const char *const end_markers[] = {
    "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end|>", "<|return|>", "<|call|>", "</s>",
    DS_EOS, "<|end_of_text|>", "<|endoftext|>", "<eos>", "<end_of_turn>", "<turn|>",
    "<|tool_response>",
};

/* 1 when s is only end markers and whitespace. */
static int only_end_markers(const char *s)
{
    for (;;) {
        while (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')
            s++;
        if (!*s)
            return 1;
        size_t i, n = sizeof end_markers / sizeof *end_markers;
        for (i = 0; i < n; i++)
            if (!strncmp(s, end_markers[i], strlen(end_markers[i])))
                break;
        if (i == n)
            return 0;
        s += strlen(end_markers[i]);
    }
}

static char *render(const char *src, const tmpl_case *tc, const json_t *msgs,
                    const json_t *tools, int gen, memra_err *err)
{
    char *out = NULL;
    memset(err, 0, sizeof *err);
    if (chat_template_render(src, msgs, tools, NULL, gen, NULL, tc->bos, tc->eos, &out, err))
        return NULL;
    return out;
}

/* The length of the common prefix, backed off to the start of a marker it
 * would cut ("<t" of <think> against <tool_call>) and to a whole UTF-8
 * character: the model's text starts at a token, never inside one. */
static size_t common_prefix(const char *a, const char *b)
{
    size_t k = 0;
    while (a[k] && a[k] == b[k])
        k++;
    for (size_t j = k; j > 0 && k - j < 64; j--) {
        if (a[j - 1] == '>' || a[j - 1] == ']')
            break;
        if (a[j - 1] == '<' || a[j - 1] == '[') {
            k = j - 1;
            break;
        }
    }
    while (k > 0 && ((unsigned char)b[k] & 0xC0) == 0x80)
        k--;
    return k;
}

static int ends_with_trimmed(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\n'))
        n--;
    return n >= m && !memcmp(s + n - m, suffix, m);
}

/* Parses text in one piece (chunk 0) or in random 1..9-byte pieces. */
static void parse(toolparse_format f, int sir, const char *text, int chunk, uint64_t seed,
                  toolparse_result *out)
{
    toolparse_opts o = {.starts_in_reasoning = sir, .id_seed = 7};
    toolparse *p = toolparse_new(f, &o);
    size_t len = strlen(text);
    uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < len;) {
        size_t n = len;
        if (chunk) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            n = 1 + (size_t)(s % 9);
        }
        if (n > len - i)
            n = len - i;
        toolparse_feed(p, text + i, n, NULL, NULL);
        i += n;
    }
    toolparse_finish(p, NULL, NULL, out);
    toolparse_free(p);
}

static void check_result(const char *tag, const toolparse_result *r, int want_calls)
{
    CHECK_MSG(r->n_calls == want_calls, "%s: %d calls back, want %d (content [%s])", tag,
              r->n_calls, want_calls, r->content);
    for (int i = 0; i < r->n_calls && i < want_calls; i++) {
        CHECK_MSG(!strcmp(r->calls[i].name, call_names[i]), "%s: call %d is %s", tag, i,
                  r->calls[i].name);
        json_error_t e;
        json_t *got = json_loads(r->calls[i].arguments, 0, &e), *want = load(call_args[i]);
        CHECK_MSG(json_equal(got, want), "%s: call %d arguments %s", tag, i,
                  r->calls[i].arguments);
        json_decref(got);
        json_decref(want);
    }
    CHECK_MSG(only_end_markers(r->content), "%s: content [%s]", tag, r->content);
    CHECK_MSG(only_end_markers(r->reasoning), "%s: reasoning [%s]", tag, r->reasoning);
}

static int same_result(const toolparse_result *a, const toolparse_result *b)
{
    if (strcmp(a->content, b->content) || strcmp(a->reasoning, b->reasoning) ||
        a->n_calls != b->n_calls)
        return 0;
    for (int i = 0; i < a->n_calls; i++)
        if (strcmp(a->calls[i].name, b->calls[i].name) ||
            strcmp(a->calls[i].arguments, b->calls[i].arguments))
            return 0;
    return 1;
}

static int n_roundtrips, n_formats[TOOLPARSE_FORMAT_COUNT];

static void roundtrip_one(const tmpl_case *tc, const char *src, toolparse_format f,
                          const json_t *tools, int n_calls)
{
    char tag[256];
    snprintf(tag, sizeof tag, "%s (%s, %d call%s)", tc->file, toolparse_format_name(f),
             n_calls, n_calls > 1 ? "s" : "");
    json_t *shorter = conversation(0, tc->content_null);
    json_t *longer = conversation(n_calls, tc->content_null);
    memra_err err;
    char *a = render(src, tc, shorter, tools, 1, &err);
    CHECK_MSG(a, "%s: prompt render failed: %s", tag, err.msg);
    char *b = render(src, tc, longer, tools, 0, &err);
    if (n_calls > 1 && tc->multi == MULTI_RAISES) {
        CHECK_MSG(!b && strstr(err.msg, "single tool-call"), "%s: the template should raise",
                  tag);
        goto done;
    }
    CHECK_MSG(b, "%s: render failed: %s", tag, err.msg);
    if (!a || !b)
        goto done;
    size_t k = common_prefix(a, b);
    CHECK_MSG(!strcmp(a + k, tc->gen_tail ? tc->gen_tail : ""), "%s: prompt tail [%s]", tag,
              a + k);
    const char *text = b + k;
    if (tc->resync) {
        const char *r = strstr(text, tc->resync);
        CHECK_MSG(r, "%s: no %s in [%s]", tag, tc->resync, text);
        text = r ? r + strlen(tc->resync) : text;
    }
    int sir = ends_with_trimmed(a, f == TOOLPARSE_MISTRAL ? "[THINK]" : "<think>");
    if (getenv("MEMRA_ROUNDTRIP_DUMP"))
        printf("==== %s%s\n%s\n", tag, sir ? " (starts in reasoning)" : "", text);
    int want = tc->multi == MULTI_FIRST ? 1 : n_calls;
    toolparse_result whole;
    parse(f, sir, text, 0, 0, &whole);
    check_result(tag, &whole, want);
    for (uint64_t seed = 1; seed <= 16; seed++) {
        toolparse_result r;
        parse(f, sir, text, 1, seed, &r);
        CHECK_MSG(same_result(&whole, &r), "%s: random pieces (seed %llu) read differently",
                  tag, (unsigned long long)seed);
        toolparse_result_free(&r);
    }
    toolparse_result_free(&whole);
    n_roundtrips++;
    n_formats[f]++;
done:
    free(a);
    free(b);
    json_decref(shorter);
    json_decref(longer);
}

static void test_roundtrip(void)
{
    json_t *tools = load(tools_json);
    for (size_t i = 0; i < sizeof templates / sizeof templates[0]; i++) {
        const tmpl_case *tc = &templates[i];
        char path[1024];
        snprintf(path, sizeof path, "%s/templates/%s.jinja", test_data_dir(), tc->file);
        if (!test_need_file(path))
            continue;
        char *src = read_all(path);
        toolparse_format f = toolparse_detect(src);
        for (int n = 1; n <= 2 && f != TOOLPARSE_NONE; n++)
            roundtrip_one(tc, src, f, tools, n);
        free(src);
    }
    json_decref(tools);
    printf("  %d renderings read back, each in one piece and 16 random cuttings\n",
           n_roundtrips);
    /* Every native format came through at least one template. */
    for (int f = 1; f < TOOLPARSE_FORMAT_COUNT; f++)
        CHECK_MSG(n_formats[f] > 0, "no template round-tripped %s", toolparse_format_name(f));
}

TEST_MAIN(TEST_CASE(test_roundtrip))
