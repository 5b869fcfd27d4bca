/* Sampling through the masks over a real vocabulary (Qwen2, 151k tokens):
 * for several schemas, many random generations that pick a random allowed
 * token each step until the grammar is complete. Each output must parse as
 * JSON (jansson) and validate against its schema (a small validator below
 * for the keywords the compiler supports). Prints the mask cost as a
 * "# mask:" comment line; it is no assertion. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/strbuf.h"
#include "format/gguf.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "tok/tokenizer.h"
#include "test.h"

#define SAMPLES 100
#define MAX_TOKENS 400
/* Past this many bytes the sampler prefers tokens that close things. */
#define SOFT_BYTES 48
/* The first samples of each schema also compare every cached mask with a
 * walked one. */
#define CACHE_CHECKED_SAMPLES 15

static gguf_file g_gguf;
static tokenizer *g_tok;
static gram_vocab *g_vocab;
static double g_mask_us;
static long g_mask_steps;
static double g_mask_max_us;
static long g_cache_checked;
static uint64_t g_cache_hits;
/* The token of each single byte (-1: none), for the closing bias. */
static int32_t g_byte_tok[256];

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 16);
}

static int setup(void)
{
    if (g_vocab)
        return 1;
    char path[512];
    memra_err err;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-qwen2.gguf", test_data_dir());
    if (!test_need_file(path))
        return 0;
    if (gguf_open(path, &g_gguf, &err) || tok_load_gguf(&g_gguf, &g_tok, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return 0;
    }
    double t0 = now_us();
    g_vocab = gram_vocab_from_tok(g_tok, &err);
    CHECK_MSG(g_vocab != NULL, "%s", err.msg);
    for (int x = 0; x < 256; x++)
        g_byte_tok[x] = -1;
    for (int32_t t = 0; t < (int32_t)tok_vocab_size(g_tok); t++) {
        size_t len;
        const char *p = tok_piece(g_tok, t, &len);
        if (len == 1 && !tok_is_control(g_tok, t) && g_byte_tok[(unsigned char)p[0]] < 0)
            g_byte_tok[(unsigned char)p[0]] = t;
    }
    if (g_vocab)
        printf("# trie: %d tokens, built in %.0f ms\n", gram_vocab_size(g_vocab),
               (now_us() - t0) / 1e3);
    return g_vocab != NULL;
}

/* ---- a validator for the supported keywords ---- */

static const json_t *resolve(const json_t *root, const char *ref)
{
    const json_t *at = root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n < 255)
            tok[n++] = *p++;
        tok[n] = 0;
        at = json_object_get(at, tok);
    }
    return at;
}

static size_t n_codepoints(const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len; i++)
        n += ((unsigned char)s[i] & 0xC0) != 0x80;
    return n;
}

static int all_digits(const char *s, int n)
{
    for (int i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

static int format_ok(const char *f, const char *s)
{
    size_t n = strlen(s);
    if (strcmp(f, "date") == 0)
        return n == 10 && all_digits(s, 4) && s[4] == '-' && s[7] == '-';
    if (strcmp(f, "date-time") == 0)
        return n >= 20 && all_digits(s, 4) && s[10] == 'T' && s[13] == ':';
    if (strcmp(f, "uuid") == 0)
        return n == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-';
    if (strcmp(f, "email") == 0) {
        const char *at = strchr(s, '@');
        return at && at != s && strchr(at, '.') != NULL;
    }
    return 0;
}

/* An independent regex engine (PCRE2; the subset the compiler accepts means
 * the same there as in ECMA-262): does the pattern match anywhere in s? */
static int pattern_ok(const char *re, const char *s, size_t len)
{
    int code;
    PCRE2_SIZE off;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &code, &off,
                                  NULL);
    if (!c)
        return 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(c, NULL);
    int rc = pcre2_match(c, (PCRE2_SPTR)s, len, 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(c);
    return rc >= 0;
}

static int type_is(const char *t, const json_t *v)
{
    if (strcmp(t, "object") == 0)
        return json_is_object(v);
    if (strcmp(t, "array") == 0)
        return json_is_array(v);
    if (strcmp(t, "string") == 0)
        return json_is_string(v);
    if (strcmp(t, "integer") == 0)
        return json_is_integer(v);
    if (strcmp(t, "number") == 0)
        return json_is_number(v);
    if (strcmp(t, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(t, "null") == 0)
        return json_is_null(v);
    return 0;
}

static int validate(const json_t *v, const json_t *s, const json_t *root, strbuf *why);

static int fail(strbuf *why, const char *what)
{
    sb_printf(why, "%s; ", what);
    return 0;
}

static int validate(const json_t *v, const json_t *s, const json_t *root, strbuf *why)
{
    if (json_is_true(s))
        return 1;
    const json_t *k;
    if ((k = json_object_get(s, "$ref")))
        return validate(v, resolve(root, json_string_value(k)), root, why);
    if ((k = json_object_get(s, "type"))) {
        int ok = 0;
        if (json_is_string(k)) {
            ok = type_is(json_string_value(k), v);
        } else {
            size_t i;
            const json_t *t;
            json_array_foreach(k, i, t) ok |= type_is(json_string_value(t), v);
        }
        if (!ok)
            return fail(why, "type");
    }
    if ((k = json_object_get(s, "const")) && !json_equal(k, (json_t *)v))
        return fail(why, "const");
    if ((k = json_object_get(s, "enum"))) {
        size_t i;
        const json_t *e;
        int ok = 0;
        json_array_foreach(k, i, e) ok |= json_equal(e, (json_t *)v);
        if (!ok)
            return fail(why, "enum");
    }
    const char *combs[] = {"anyOf", "oneOf"};
    for (int c = 0; c < 2; c++)
        if ((k = json_object_get(s, combs[c]))) {
            size_t i;
            const json_t *e;
            int hits = 0;
            json_array_foreach(k, i, e) {
                strbuf tmp;
                sb_init(&tmp);
                hits += validate(v, e, root, &tmp);
                sb_free(&tmp);
            }
            if (hits == 0 || (c == 1 && hits != 1))
                return fail(why, combs[c]);
        }
    if ((k = json_object_get(s, "allOf"))) {
        size_t i;
        const json_t *e;
        json_array_foreach(k, i, e) if (!validate(v, e, root, why)) return 0;
    }
    if (json_is_string(v)) {
        size_t n = n_codepoints(json_string_value(v), json_string_length(v));
        if ((k = json_object_get(s, "minLength")) && n < (size_t)json_integer_value(k))
            return fail(why, "minLength");
        if ((k = json_object_get(s, "maxLength")) && n > (size_t)json_integer_value(k))
            return fail(why, "maxLength");
        if ((k = json_object_get(s, "format")) &&
            !format_ok(json_string_value(k), json_string_value(v)))
            return fail(why, "format");
        if ((k = json_object_get(s, "pattern")) &&
            !pattern_ok(json_string_value(k), json_string_value(v), json_string_length(v)))
            return fail(why, "pattern");
    }
    if (json_is_number(v)) {
        double d = json_number_value(v);
        if ((k = json_object_get(s, "minimum")) && d < json_number_value(k))
            return fail(why, "minimum");
        if ((k = json_object_get(s, "maximum")) && d > json_number_value(k))
            return fail(why, "maximum");
        if ((k = json_object_get(s, "exclusiveMinimum")) && d <= json_number_value(k))
            return fail(why, "exclusiveMinimum");
        if ((k = json_object_get(s, "exclusiveMaximum")) && d >= json_number_value(k))
            return fail(why, "exclusiveMaximum");
    }
    if (json_is_array(v)) {
        size_t n = json_array_size(v);
        if ((k = json_object_get(s, "minItems")) && n < (size_t)json_integer_value(k))
            return fail(why, "minItems");
        if ((k = json_object_get(s, "maxItems")) && n > (size_t)json_integer_value(k))
            return fail(why, "maxItems");
        if ((k = json_object_get(s, "items"))) {
            size_t i;
            const json_t *e;
            json_array_foreach(v, i, e) if (!validate(e, k, root, why)) return fail(why, "items");
        }
    }
    if (json_is_object(v)) {
        const json_t *props = json_object_get(s, "properties");
        const json_t *addl = json_object_get(s, "additionalProperties");
        if ((k = json_object_get(s, "required"))) {
            size_t i;
            const json_t *e;
            json_array_foreach(k, i, e) if (!json_object_get(v, json_string_value(e)))
                return fail(why, "required");
        }
        const char *key;
        const json_t *e;
        json_object_foreach((json_t *)v, key, e) {
            const json_t *ps = props ? json_object_get(props, key) : NULL;
            if (ps) {
                if (!validate(e, ps, root, why))
                    return fail(why, key);
            } else if (addl && json_is_false(addl)) {
                return fail(why, "additionalProperties");
            } else if (addl && json_is_object(addl) && !validate(e, addl, root, why)) {
                return fail(why, "additionalProperties schema");
            }
        }
    }
    return 1;
}

/* ---- sampling ---- */

/* A random allowed token. Past SOFT_BYTES the choice narrows, in order, to
 * the end-of-generation token, single-byte tokens that close ("}]), and any
 * single-byte token, whichever is allowed first; so generations end. */
static int32_t pick(const uint32_t *mask, int n_allowed, size_t out_len)
{
    int n = gram_vocab_size(g_vocab);
    if (out_len > SOFT_BYTES) {
        size_t n_stop = 0;
        const int32_t *stop = tok_stop_ids(g_tok, &n_stop);
        for (size_t i = 0; i < n_stop; i++)
            if ((mask[stop[i] >> 5] >> (stop[i] & 31)) & 1)
                return stop[i];
        int32_t cand[256];
        for (int pass = 0; pass < 2; pass++) {
            int nc = 0;
            for (int b = 0; b < 256; b++) {
                if (pass == 0 && b != '"' && b != '}' && b != ']')
                    continue;
                int32_t id = g_byte_tok[b];
                if (id >= 0 && ((mask[id >> 5] >> (id & 31)) & 1))
                    cand[nc++] = id;
            }
            if (nc)
                return cand[rnd() % (uint32_t)nc];
        }
    }
    int k = (int)(rnd() % (uint32_t)n_allowed);
    for (int w = 0; w < (n + 31) / 32; w++) {
        int c = __builtin_popcount(mask[w]);
        if (k >= c) {
            k -= c;
            continue;
        }
        for (int b = 0; b < 32; b++)
            if ((mask[w] >> b) & 1 && k-- == 0)
                return w * 32 + b;
    }
    return -1;
}

/* One generation; the text is in *out. 0 when the grammar finished. With
 * `check_cache`, a second state without a mask cache follows the same
 * tokens and every mask must equal its walked one bit for bit. */
static int generate(const gram_grammar *g, strbuf *out, int check_cache)
{
    gram_state *s = gram_state_new(g);
    gram_state *plain = NULL;
    size_t words = gram_mask_words(g_vocab);
    uint32_t *mask = malloc(words * sizeof *mask);
    uint32_t *walked = NULL;
    if (check_cache) {
        plain = gram_state_new(g);
        gram_state_set_mask_cache(plain, 0);
        walked = malloc(words * sizeof *walked);
    }
    int rc = -1;
    sb_clear(out);
    for (int step = 0; step < MAX_TOKENS; step++) {
        double t0 = now_us();
        int n = gram_mask(s, g_vocab, mask);
        double dt = now_us() - t0;
        if (plain) {
            int nw = gram_mask(plain, g_vocab, walked);
            g_cache_checked++;
            CHECK_MSG(nw == n && memcmp(walked, mask, words * sizeof *mask) == 0,
                      "cached mask differs from the walk after '%s'", sb_str(out));
            gram_mask_cache_stats st;
            gram_state_mask_cache_stats(s, &st);
            CHECK(st.entries <= st.capacity && st.capacity == GRAM_MASK_CACHE_DEFAULT);
            /* Each entry: one mask and a key of at most 16 KB. */
            CHECK(st.bytes <= (size_t)st.capacity * (words * 4 + 16384 + 64) + 32768);
        }
        g_mask_us += dt;
        g_mask_steps++;
        if (dt > g_mask_max_us) {
            g_mask_max_us = dt;
            if (getenv("MEMRA_TEST_VERBOSE"))
                printf("# slowest mask so far: %.0f us after '%s'\n", dt, sb_str(out));
        }
        if (n <= 0) {
            CHECK_MSG(0, "no token allowed after '%s'", sb_str(out));
            break;
        }
        int32_t id = pick(mask, n, out->len);
        memra_err err = {{0}};
        if (gram_accept_token(s, g_vocab, id, &err)) {
            CHECK_MSG(0, "masked token refused: %s", err.msg);
            break;
        }
        if (plain)
            CHECK(gram_accept_token(plain, g_vocab, id, NULL) == 0);
        if (gram_is_finished(s)) {
            rc = 0;
            break;
        }
        size_t len;
        const char *p = tok_piece(g_tok, id, &len);
        sb_append(out, p, len);
    }
    gram_mask_cache_stats st;
    gram_state_mask_cache_stats(s, &st);
    g_cache_hits += st.hits;
    free(mask);
    free(walked);
    gram_state_free(s);
    gram_state_free(plain);
    return rc;
}

static void sample_schema(const char *schema_text)
{
    if (!setup())
        return;
    memra_err err = {{0}};
    json_t *schema = json_loads(schema_text, 0, NULL);
    CHECK(schema != NULL);
    gram_grammar *g = schema ? jsch_compile(schema, &err) : NULL;
    CHECK_MSG(g != NULL, "%s", err.msg);
    if (!g) {
        json_decref(schema);
        return;
    }
    strbuf out;
    sb_init(&out);
    int ok = 0;
    for (int i = 0; i < SAMPLES; i++) {
        if (generate(g, &out, i < CACHE_CHECKED_SAMPLES)) {
            CHECK_MSG(0, "sample %d did not finish: '%s'", i, sb_str(&out));
            continue;
        }
        json_error_t je;
        json_t *v = json_loadb(out.data, out.len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
        if (!v) {
            CHECK_MSG(0, "sample %d is not JSON (%s): '%s'", i, je.text, sb_str(&out));
            continue;
        }
        strbuf why;
        sb_init(&why);
        int valid = validate(v, schema, schema, &why);
        CHECK_MSG(valid, "sample %d fails the schema (%s): '%s'", i, sb_str(&why), sb_str(&out));
        ok += valid;
        if (i < 2 && getenv("MEMRA_TEST_VERBOSE"))
            printf("# sample: %s\n", sb_str(&out));
        sb_free(&why);
        json_decref(v);
    }
    CHECK(ok == SAMPLES);
    sb_free(&out);
    gram_free(g);
    json_decref(schema);
}

static void test_sample_person(void)
{
    sample_schema("{\"type\":\"object\",\"properties\":{"
                  "\"name\":{\"type\":\"string\",\"maxLength\":12},"
                  "\"age\":{\"type\":\"integer\"},"
                  "\"email\":{\"type\":\"string\",\"format\":\"email\"},"
                  "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"},\"maxItems\":3},"
                  "\"score\":{\"type\":[\"number\",\"null\"]}},"
                  "\"required\":[\"name\",\"age\"],\"additionalProperties\":false}");
}

static void test_sample_enum_anyof(void)
{
    sample_schema("{\"type\":\"object\",\"properties\":{"
                  "\"color\":{\"enum\":[\"red\",\"green\",\"blue\"]},"
                  "\"when\":{\"type\":\"string\",\"format\":\"date-time\"},"
                  "\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
                  "\"value\":{\"anyOf\":[{\"type\":\"boolean\"},{\"type\":\"string\","
                  "\"minLength\":1,\"maxLength\":4}]},"
                  "\"fixed\":{\"const\":{\"k\":[1,2]}}},"
                  "\"required\":[\"color\",\"when\",\"id\",\"value\",\"fixed\"]}");
}

static void test_sample_nested_arrays(void)
{
    sample_schema("{\"type\":\"array\",\"minItems\":1,\"maxItems\":3,\"items\":{"
                  "\"type\":\"object\",\"properties\":{"
                  "\"xs\":{\"type\":\"array\",\"items\":{\"type\":\"number\"},\"minItems\":2,"
                  "\"maxItems\":2},"
                  "\"d\":{\"type\":\"string\",\"format\":\"date\"}},"
                  "\"additionalProperties\":{\"type\":\"integer\"}}}");
}

static void test_sample_recursive_ref(void)
{
    sample_schema("{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{"
                  "\"v\":{\"type\":\"integer\"},\"kids\":{\"type\":\"array\",\"maxItems\":2,"
                  "\"items\":{\"$ref\":\"#/$defs/node\"}}},\"required\":[\"v\"]}},"
                  "\"$ref\":\"#/$defs/node\"}");
}

static void test_sample_patterns(void)
{
    sample_schema("{\"type\":\"object\",\"properties\":{"
                  "\"code\":{\"type\":\"string\",\"pattern\":\"^[A-Z]{2}-\\\\d{3}$\"},"
                  "\"word\":{\"type\":\"string\",\"pattern\":\"^(ok|fine|[\\\"\\\\\\\\.]{2})\"},"
                  "\"any\":{\"type\":\"string\",\"pattern\":\"^[^a-z]?\"},"
                  "\"n\":{\"type\":\"integer\",\"minimum\":-40,\"exclusiveMaximum\":1234},"
                  "\"m\":{\"type\":[\"integer\",\"null\"],\"exclusiveMinimum\":7},"
                  "\"x\":{\"type\":\"number\",\"minimum\":0}},"
                  "\"required\":[\"code\",\"word\",\"any\",\"n\",\"m\",\"x\"]}");
}

static void test_sample_json_object(void)
{
    sample_schema("{\"type\":\"object\"}");
}

/* The mask after `text` under `schema`: the first call on a fresh state
 * (the walk) and the best of 20 more (from the state's cache when the walk
 * was worth keeping). */
static void time_point(const char *schema, const char *text)
{
    memra_err err = {{0}};
    gram_grammar *g = jsch_compile_text(schema, strlen(schema), &err);
    CHECK_MSG(g != NULL, "%s", err.msg);
    if (!g)
        return;
    gram_state *s = gram_state_new(g);
    uint32_t *mask = malloc(gram_mask_words(g_vocab) * sizeof *mask);
    CHECK(gram_accept_bytes(s, text, strlen(text), &err) == 0);
    double t0 = now_us();
    int n = gram_mask(s, g_vocab, mask);
    double first = now_us() - t0, best = 1e30, total = 0;
    int reps = 20;
    for (int r = 0; r < reps; r++) {
        t0 = now_us();
        gram_mask(s, g_vocab, mask);
        double dt = now_us() - t0;
        total += dt;
        if (dt < best)
            best = dt;
    }
    printf("# mask after '%s': first %.1f us, then %.1f us (best of %d; mean %.1f), "
           "%d tokens allowed\n",
           text, first, best, reps, total / reps, n);
    free(mask);
    gram_state_free(s);
    gram_free(g);
}

/* Decoding inside one string: each step masks, then takes a 4-byte token
 * (" abc"); the mean over the steps, first included. */
static void time_string_steps(const char *schema, const char *text, int steps)
{
    memra_err err = {{0}};
    gram_grammar *g = jsch_compile_text(schema, strlen(schema), &err);
    CHECK_MSG(g != NULL, "%s", err.msg);
    if (!g)
        return;
    gram_state *s = gram_state_new(g);
    uint32_t *mask = malloc(gram_mask_words(g_vocab) * sizeof *mask);
    CHECK(gram_accept_bytes(s, text, strlen(text), &err) == 0);
    double total = 0, worst = 0;
    for (int i = 0; i < steps; i++) {
        double t0 = now_us();
        gram_mask(s, g_vocab, mask);
        double dt = now_us() - t0;
        total += dt;
        if (dt > worst)
            worst = dt;
        CHECK(gram_accept_bytes(s, " abc", 4, &err) == 0);
    }
    printf("# mask while decoding '%s...' (%s): %.1f us/step (mean of %d steps, max %.0f)\n",
           text, schema, total / steps, steps, worst);
    free(mask);
    gram_state_free(s);
    gram_free(g);
}

static void test_mask_timing(void)
{
    if (!setup() || !g_mask_steps)
        return;
    printf("# mask: %.0f us/step (mean over %ld steps, max %.0f us; Qwen2 vocabulary, "
           "%d tokens; %llu answered from the state's cache)\n",
           g_mask_us / (double)g_mask_steps, g_mask_steps, g_mask_max_us,
           gram_vocab_size(g_vocab), (unsigned long long)g_cache_hits);
    printf("# mask cache: %ld masks equal to the walk, bit for bit\n", g_cache_checked);
    CHECK(g_cache_checked > 1000 && g_cache_hits > 0);
    /* The extremes: the start and after a '{' of a fixed-key object (few
     * tokens), inside a free string (most of the vocabulary), inside a
     * string with maxLength (every position its own state). */
    const char *obj = "{\"type\":\"object\",\"properties\":{\"a\":"
                      "{\"type\":\"string\"}},\"required\":[\"a\"]}";
    const char *capped = "{\"type\":\"object\",\"properties\":{\"a\":"
                         "{\"type\":\"string\",\"maxLength\":12}},\"required\":[\"a\"]}";
    time_point(obj, "");
    time_point(obj, "{");
    time_point(obj, "{\"a\":\"");
    time_point(obj, "{\"a\":\"hello");
    time_point(capped, "{\"a\":\"");
    time_point(capped, "{\"a\":\"hello");
    time_string_steps("{\"type\":\"string\"}", "\"", 200);
    time_string_steps("{\"type\":\"string\",\"maxLength\":200}", "\"", 40);
}

static void cleanup(void)
{
    gram_vocab_free(g_vocab);
    tok_free(g_tok);
    if (g_tok)
        gguf_close(&g_gguf);
    g_vocab = NULL;
    g_tok = NULL;
}

TEST_MAIN(TEST_CASE(test_sample_person), TEST_CASE(test_sample_enum_anyof),
          TEST_CASE(test_sample_nested_arrays), TEST_CASE(test_sample_recursive_ref),
          TEST_CASE(test_sample_patterns), TEST_CASE(test_sample_json_object), TEST_CASE(test_mask_timing),
          TEST_CLEANUP(cleanup))
