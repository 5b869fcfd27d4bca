/* HF tokenizer directory <-> GGUF tokenizer.* keys: the hand-made fixtures
 * in tests/fixtures/tokenizers (byte-level BPE with the Qwen2 and Llama 3
 * regexes, a Llama 2 style SentencePiece BPE), round trips through both
 * directions, llama.cpp's own vocab files, and malformed inputs that must
 * each fail with a message naming the file and what is wrong. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/mapfile.h"
#include "format/gguf.h"
#include "tok/hf_tokenizer.h"
#include "tok/hf_tokenizer_internal.h"
#include "test.h"

#define FIX "tests/fixtures/tokenizers/"

/* ---- scratch directories ---- */

static void scratch(char *buf, size_t cap, const char *name)
{
    mkdir(test_tmp_dir(), 0755);
    snprintf(buf, cap, "%s/hftok-%d-%s", test_tmp_dir(), (int)getpid(), name);
}

/* Remove a flat directory we made (files and one level of subdirectories). */
static void rm_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *de;
    char p[4096];
    while ((de = readdir(d))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        if (unlink(p) != 0)
            rm_dir(p);
    }
    closedir(d);
    rmdir(dir);
}

static void put_file(const char *dir, const char *name, const char *text)
{
    char p[4096];
    mkdir(dir, 0755);
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "wb");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
}

/* ---- GGUF helpers ---- */

/* Convert an HF dir into a vocab-only GGUF and open it; 0 on success. */
static int hf_to_file(const char *dir, const char *gguf_path, gguf_file *out, memra_err *err)
{
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    int rc = hf_tokenizer_to_gguf(dir, w, err);
    if (rc == 0)
        rc = gguf_writer_write(w, gguf_path, err);
    gguf_writer_free(w);
    if (rc == 0)
        rc = gguf_open(gguf_path, out, err);
    return rc;
}

static const gguf_value *arr(const gguf_file *f, const char *key, gguf_vtype elem)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv || kv->value.type != GGUF_ARRAY || kv->value.v.arr.elem_type != elem)
        return NULL;
    return &kv->value;
}

static const char *tok(const gguf_file *f, size_t i)
{
    const gguf_value *v = arr(f, "tokenizer.ggml.tokens", GGUF_STRING);
    return v && i < v->v.arr.n ? ((const gguf_str *)v->v.arr.data)[i].str : "";
}

static int32_t ttype(const gguf_file *f, size_t i)
{
    const gguf_value *v = arr(f, "tokenizer.ggml.token_type", GGUF_INT32);
    return v && i < v->v.arr.n ? ((const int32_t *)v->v.arr.data)[i] : -1;
}

static float score(const gguf_file *f, size_t i)
{
    const gguf_value *v = arr(f, "tokenizer.ggml.scores", GGUF_FLOAT32);
    return v && i < v->v.arr.n ? ((const float *)v->v.arr.data)[i] : NAN;
}

static uint64_t n_of(const gguf_file *f, const char *key, gguf_vtype elem)
{
    const gguf_value *v = arr(f, key, elem);
    return v ? v->v.arr.n : 0;
}

static int64_t u64_or(const gguf_file *f, const char *key, int64_t dflt)
{
    uint64_t v;
    return gguf_get_u64(f, key, &v, NULL) == 0 ? (int64_t)v : dflt;
}

static const char *str_or(const gguf_file *f, const char *key)
{
    const char *s;
    return gguf_get_str(f, key, &s, NULL) == 0 ? s : NULL;
}

static int bool_of(const gguf_file *f, const char *key)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    return kv && kv->value.type == GGUF_BOOL ? (int)kv->value.v.u : -1;
}

static int values_equal(const gguf_value *a, const gguf_value *b)
{
    if (a->type != b->type)
        return 0;
    switch (a->type) {
    case GGUF_STRING:
        return a->v.s.len == b->v.s.len && !memcmp(a->v.s.str, b->v.s.str, a->v.s.len);
    case GGUF_ARRAY: {
        if (a->v.arr.elem_type != b->v.arr.elem_type || a->v.arr.n != b->v.arr.n)
            return 0;
        if (a->v.arr.elem_type == GGUF_STRING) {
            const gguf_str *x = a->v.arr.data, *y = b->v.arr.data;
            for (uint64_t i = 0; i < a->v.arr.n; i++)
                if (x[i].len != y[i].len || memcmp(x[i].str, y[i].str, x[i].len))
                    return 0;
            return 1;
        }
        size_t es = a->v.arr.elem_type == GGUF_BOOL ? 1 : gguf_vtype_size(a->v.arr.elem_type);
        return !a->v.arr.n || !memcmp(a->v.arr.data, b->v.arr.data, es * a->v.arr.n);
    }
    case GGUF_FLOAT32:
    case GGUF_FLOAT64:
        return a->v.f == b->v.f;
    case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64:
        return a->v.i == b->v.i;
    default:
        return a->v.u == b->v.u;
    }
}

/* Every tokenizer.* key of `a` is in `b` with the same value and vice versa;
 * returns the number of differences (each reported). */
static int compare_tokenizer_keys(const gguf_file *a, const gguf_file *b, const char *what)
{
    int diffs = 0;
    for (int pass = 0; pass < 2; pass++) {
        const gguf_file *x = pass ? b : a, *y = pass ? a : b;
        for (uint64_t i = 0; i < x->n_kv; i++) {
            const char *key = x->kv[i].key;
            if (strncmp(key, "tokenizer.", 10) != 0)
                continue;
            const gguf_kv *other = gguf_find_kv(y, key);
            if (!other) {
                fprintf(stderr, "  %s: key %s only in the %s file\n", what, key,
                        pass ? "second" : "first");
                diffs++;
            } else if (!pass && !values_equal(&x->kv[i].value, &other->value)) {
                fprintf(stderr, "  %s: key %s differs\n", what, key);
                diffs++;
            }
        }
    }
    return diffs;
}

/* ---- fixtures -> GGUF ---- */

static void test_qwen2_fixture(void)
{
    char path[512];
    scratch(path, sizeof path, "qwen2.gguf");
    gguf_file f;
    memra_err err = {{0}};
    CHECK_MSG(hf_to_file(FIX "bpe-qwen2", path, &f, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(str_or(&f, "tokenizer.ggml.model"), "gpt2"));
    CHECK(!strcmp(str_or(&f, "tokenizer.ggml.pre"), "qwen2"));
    CHECK(n_of(&f, "tokenizer.ggml.tokens", GGUF_STRING) == 28);
    CHECK(n_of(&f, "tokenizer.ggml.token_type", GGUF_INT32) == 28);
    CHECK(gguf_find_kv(&f, "tokenizer.ggml.scores") == NULL);
    CHECK(!strcmp(tok(&f, 0), "a") && !strcmp(tok(&f, 10), "\xc4\xa0"));
    CHECK(!strcmp(tok(&f, 20), "\xc4\xa0world"));
    for (int i = 0; i < 22; i++)
        CHECK(ttype(&f, i) == HFT_NORMAL);
    CHECK(!strcmp(tok(&f, 22), "<|endoftext|>") && ttype(&f, 22) == HFT_CONTROL);
    CHECK(ttype(&f, 23) == HFT_CONTROL && ttype(&f, 24) == HFT_CONTROL);
    CHECK(!strcmp(tok(&f, 25), "<tool_call>") && ttype(&f, 25) == HFT_USER_DEFINED);
    /* Not marked special, but convert's "looks special" rule makes it control. */
    CHECK(!strcmp(tok(&f, 26), "<|fake|>") && ttype(&f, 26) == HFT_CONTROL);
    /* U+2581 in a user-defined token is written as a space. */
    CHECK(!strcmp(tok(&f, 27), "a b") && ttype(&f, 27) == HFT_USER_DEFINED);
    const gguf_value *m = arr(&f, "tokenizer.ggml.merges", GGUF_STRING);
    CHECK(m && m->v.arr.n == 10);
    if (m && m->v.arr.n == 10) {
        const gguf_str *ms = m->v.arr.data;
        CHECK(!strcmp(ms[0].str, "h e") && !strcmp(ms[8].str, "\xc4\xa0worl d"));
    }
    CHECK(u64_or(&f, "tokenizer.ggml.eos_token_id", -1) == 24);
    CHECK(u64_or(&f, "tokenizer.ggml.padding_token_id", -1) == 22);
    CHECK(u64_or(&f, "tokenizer.ggml.bos_token_id", -1) == -1);
    CHECK(bool_of(&f, "tokenizer.ggml.add_bos_token") == -1);
    const char *t = str_or(&f, "tokenizer.chat_template");
    CHECK(t && !strncmp(t, "{% for message in messages %}{{'<|im_start|>'", 45));
    gguf_close(&f);
    unlink(path);
}

static void test_llama3_fixture(void)
{
    char path[512];
    scratch(path, sizeof path, "llama3.gguf");
    gguf_file f;
    memra_err err = {{0}};
    CHECK_MSG(hf_to_file(FIX "bpe-llama3", path, &f, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(str_or(&f, "tokenizer.ggml.model"), "gpt2"));
    CHECK(!strcmp(str_or(&f, "tokenizer.ggml.pre"), "llama-bpe"));
    CHECK(n_of(&f, "tokenizer.ggml.tokens", GGUF_STRING) == 16);
    CHECK(!strcmp(tok(&f, 11), "x y") && ttype(&f, 11) == HFT_NORMAL);
    CHECK(!strcmp(tok(&f, 13), "<|begin_of_text|>") && ttype(&f, 13) == HFT_CONTROL);
    const gguf_value *m = arr(&f, "tokenizer.ggml.merges", GGUF_STRING);
    CHECK(m && m->v.arr.n == 7);
    if (m && m->v.arr.n == 7) {
        const gguf_str *ms = m->v.arr.data;
        /* Pair-form merges are joined with a space; a space inside a part
         * becomes U+0120, as gguf-py writes it. */
        CHECK(!strcmp(ms[0].str, "\xc4\xa0 a"));
        CHECK(!strcmp(ms[6].str, "x\xc4\xa0y z"));
    }
    /* bos from tokenizer_config (an object with "content"), which wins over
     * config.json's bos_token_id; eos from generation_config's list. */
    CHECK(u64_or(&f, "tokenizer.ggml.bos_token_id", -1) == 13);
    CHECK(u64_or(&f, "tokenizer.ggml.eos_token_id", -1) == 15);
    CHECK(bool_of(&f, "tokenizer.ggml.add_bos_token") == 1);
    CHECK(bool_of(&f, "tokenizer.ggml.add_eos_token") == -1);
    const char *t = str_or(&f, "tokenizer.chat_template");
    CHECK(t && !strncmp(t, "{{ bos_token }}{% for m in messages %}<|start_header_id|>", 56));
    const char *tool = str_or(&f, "tokenizer.chat_template.tool_use");
    CHECK(tool && strstr(tool, "{{ tools }}"));
    const gguf_value *names = arr(&f, "tokenizer.chat_templates", GGUF_STRING);
    CHECK(names && names->v.arr.n == 1 &&
          !strcmp(((const gguf_str *)names->v.arr.data)[0].str, "tool_use"));
    gguf_close(&f);
    unlink(path);
}

static void test_spm_fixture(void)
{
    char path[512];
    scratch(path, sizeof path, "spm.gguf");
    gguf_file f;
    memra_err err = {{0}};
    CHECK_MSG(hf_to_file(FIX "spm-llama2", path, &f, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(str_or(&f, "tokenizer.ggml.model"), "llama"));
    CHECK(!strcmp(str_or(&f, "tokenizer.ggml.pre"), "default"));
    CHECK(gguf_find_kv(&f, "tokenizer.ggml.merges") == NULL);
    /* 23 vocab + 3 added, padded to config.json's vocab_size 28. */
    CHECK(n_of(&f, "tokenizer.ggml.tokens", GGUF_STRING) == 28);
    CHECK(n_of(&f, "tokenizer.ggml.scores", GGUF_FLOAT32) == 28);
    static const int32_t want_type[28] = {2, 3, 3, 6, 6, 6, 6, 6, 1, 1, 1, 1, 1, 1,
                                          1, 1, 1, 1, 1, 1, 1, 1, 1, 4, 4, 3, 5, 5};
    /* Normal tokens score minus the rank of the merge producing them; the
     * single characters no merge produces score -(merges + 1). */
    static const float want_score[28] = {0,  0,  0,   0,   0,   0,   0,     0,    -1,   -2,
                                         -3, -4, -5,  -6,  -7,  -8,  -9,    -10,  -10,  -10,
                                         -10, -10, -10, -1000, -1000, 0, -1000, -1000};
    for (int i = 0; i < 28; i++) {
        CHECK_MSG(ttype(&f, i) == want_type[i], "token %d (%s) type %d", i, tok(&f, i),
                  ttype(&f, i));
        CHECK_MSG(score(&f, i) == want_score[i], "token %d (%s) score %g", i, tok(&f, i),
                  (double)score(&f, i));
    }
    CHECK(!strcmp(tok(&f, 4), "<0x0A>") && !strcmp(tok(&f, 17), "\xe2\x96\x81"));
    CHECK(!strcmp(tok(&f, 24), "x y"));
    CHECK(!strcmp(tok(&f, 26), "[PAD26]") && !strcmp(tok(&f, 27), "[PAD27]"));
    CHECK(u64_or(&f, "tokenizer.ggml.bos_token_id", -1) == 1);
    CHECK(u64_or(&f, "tokenizer.ggml.eos_token_id", -1) == 2);
    CHECK(u64_or(&f, "tokenizer.ggml.unknown_token_id", -1) == 0);
    CHECK(u64_or(&f, "tokenizer.ggml.padding_token_id", -1) == -1);
    CHECK(bool_of(&f, "tokenizer.ggml.add_bos_token") == 1);
    CHECK(bool_of(&f, "tokenizer.ggml.add_eos_token") == 0);
    const char *t = str_or(&f, "tokenizer.chat_template");
    CHECK(t && strstr(t, "[INST]"));
    gguf_close(&f);
    unlink(path);
}

/* ---- round trips ---- */

/* GGUF -> HF dir -> GGUF; the tokenizer.* keys of both files must agree. */
static void round_trip_file(const gguf_file *a, const char *name)
{
    char dir[512], path[512];
    scratch(dir, sizeof dir, name);
    scratch(path, sizeof path, "rt.gguf");
    memra_err err = {{0}};
    CHECK_MSG(gguf_tokenizer_to_hf(a, dir, &err) == 0, "%s: %s", name, err.msg);
    gguf_file b;
    if (hf_to_file(dir, path, &b, &err) != 0) {
        CHECK_MSG(0, "%s: %s", name, err.msg);
        rm_dir(dir);
        return;
    }
    CHECK_MSG(compare_tokenizer_keys(a, &b, name) == 0, "%s: keys differ after the round trip",
              name);
    gguf_close(&b);
    unlink(path);
    rm_dir(dir);
}

static void test_round_trip_fixtures(void)
{
    static const char *const fixtures[] = {"bpe-qwen2", "bpe-llama3", "spm-llama2"};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(fixtures); i++) {
        char src[256], path[512];
        snprintf(src, sizeof src, FIX "%s", fixtures[i]);
        scratch(path, sizeof path, "first.gguf");
        gguf_file a;
        memra_err err = {{0}};
        if (hf_to_file(src, path, &a, &err) != 0) {
            CHECK_MSG(0, "%s: %s", fixtures[i], err.msg);
            continue;
        }
        round_trip_file(&a, fixtures[i]);
        gguf_close(&a);
        unlink(path);
    }
}

/* The exported tokenizer.json of a SentencePiece vocabulary must carry
 * merges that reproduce the scores' order even without tokenizer.model. */
static void test_spm_without_model_file(void)
{
    char dir[512], p1[512], p2[512], model[600];
    scratch(dir, sizeof dir, "spm-nomodel");
    scratch(p1, sizeof p1, "nm1.gguf");
    scratch(p2, sizeof p2, "nm2.gguf");
    memra_err err = {{0}};
    gguf_file a, b;
    if (hf_to_file(FIX "spm-llama2", p1, &a, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    CHECK_MSG(gguf_tokenizer_to_hf(&a, dir, &err) == 0, "%s", err.msg);
    snprintf(model, sizeof model, "%s/tokenizer.model", dir);
    CHECK(unlink(model) == 0);
    if (hf_to_file(dir, p2, &b, &err) == 0) {
        /* Merge-derived scores are identical to the fixture's (which were
         * merge-derived too); the padding comes back as user-defined. */
        for (int i = 0; i < 26; i++) {
            CHECK_MSG(score(&a, i) == score(&b, i), "token %d", i);
            CHECK_MSG(ttype(&a, i) == ttype(&b, i), "token %d", i);
        }
        CHECK(ttype(&b, 26) == HFT_USER_DEFINED && score(&b, 26) == -1000.0f);
        gguf_close(&b);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    gguf_close(&a);
    unlink(p1);
    unlink(p2);
    rm_dir(dir);
}

/* A SentencePiece vocabulary without the space prefix (Gemma style) keeps
 * tokenizer.ggml.add_space_prefix = false through the round trip. */
static void test_no_space_prefix(void)
{
    char p1[512], p2[512];
    scratch(p1, sizeof p1, "nsp1.gguf");
    scratch(p2, sizeof p2, "nsp2.gguf");
    memra_err err = {{0}};
    gguf_file a, b;
    if (hf_to_file(FIX "spm-llama2", p1, &a, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    CHECK(bool_of(&a, "tokenizer.ggml.add_space_prefix") == -1);
    gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kv(w, &a);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    CHECK_MSG(gguf_writer_write(w, p2, &err) == 0, "%s", err.msg);
    gguf_writer_free(w);
    if (gguf_open(p2, &b, &err) == 0) {
        round_trip_file(&b, "no-space-prefix");
        gguf_close(&b);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    gguf_close(&a);
    unlink(p1);
    unlink(p2);
}

static void round_trip_shared(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/vocab/%s", test_data_dir(), name);
    if (!test_need_file(path))
        return;
    gguf_file a;
    memra_err err = {{0}};
    if (gguf_open(path, &a, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    round_trip_file(&a, name);
    gguf_close(&a);
}

static void test_vocab_qwen2(void) { round_trip_shared("ggml-vocab-qwen2.gguf"); }
static void test_vocab_llama_spm(void) { round_trip_shared("ggml-vocab-llama-spm.gguf"); }
static void test_vocab_gpt2(void) { round_trip_shared("ggml-vocab-gpt-2.gguf"); }
static void test_vocab_llama_bpe(void) { round_trip_shared("ggml-vocab-llama-bpe.gguf"); }

/* ---- malformed input ---- */

static const char *const GOOD_CFG = "{\"eos_token\": \"<e>\"}";

/* Write tokenizer.json into a scratch dir, convert, and expect failure with
 * every fragment of `want` (NULL-terminated) in the message. */
static void expect_fail(const char *name, const char *tokenizer_json, const char *const *want)
{
    char dir[512];
    scratch(dir, sizeof dir, name);
    if (tokenizer_json)
        put_file(dir, "tokenizer.json", tokenizer_json);
    else
        mkdir(dir, 0755);
    put_file(dir, "tokenizer_config.json", GOOD_CFG);
    gguf_writer *w = gguf_writer_new();
    memra_err err = {{0}};
    CHECK_MSG(hf_tokenizer_to_gguf(dir, w, &err) == -1, "%s: accepted", name);
    for (const char *const *p = want; *p; p++)
        CHECK_MSG(strstr(err.msg, *p) != NULL, "%s: message \"%s\" lacks \"%s\"", name, err.msg,
                  *p);
    gguf_writer_free(w);
    rm_dir(dir);
}

#define BYTELEVEL_PRE "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}"

static void test_malformed_hf(void)
{
    expect_fail("missing", NULL, (const char *const[]){"tokenizer.json", NULL});
    expect_fail("notjson", "{\"model\": {\"type\": \"BPE\",",
                (const char *const[]){"tokenizer.json", "invalid JSON", NULL});
    expect_fail("array", "[1, 2]", (const char *const[]){"tokenizer.json", "not a JSON object", NULL});
    expect_fail("unigram", "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]]}}",
                (const char *const[]){"tokenizer.json", "\"Unigram\"", "only BPE", NULL});
    expect_fail("wordpiece", "{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}",
                (const char *const[]){"\"WordPiece\"", NULL});
    expect_fail("nobytes", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                (const char *const[]){"tokenizer.json", "byte_fallback", NULL});
    expect_fail("gap",
                "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2},"
                " \"merges\": []}}",
                (const char *const[]){"tokenizer.json", "no token has id 1", NULL});
    expect_fail("biggap",
                "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 4000000},"
                " \"merges\": []}}",
                (const char *const[]){"tokenizer.json", "no token has id 1", NULL});
    expect_fail("hugeid",
                "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999},"
                " \"merges\": []}}",
                (const char *const[]){"model.vocab[\"a\"]", "[0, ", NULL});
    expect_fail("vocabdup",
                "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0},"
                " \"merges\": []}}",
                (const char *const[]){"model.vocab", "id 0", NULL});
    expect_fail("negid",
                "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1},"
                " \"merges\": []}}",
                (const char *const[]){"model.vocab[\"a\"]", NULL});
    expect_fail("addedclash",
                "{" BYTELEVEL_PRE ", \"added_tokens\": [{\"id\": 1, \"content\": \"<x>\"}],"
                " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": []}}",
                (const char *const[]){"added_tokens[0]", "\"<x>\"", "id 1", "\"b\"", NULL});
    expect_fail("addedtwice",
                "{" BYTELEVEL_PRE ", \"added_tokens\": [{\"id\": 1, \"content\": \"<x>\"},"
                " {\"id\": 1, \"content\": \"<y>\"}],"
                " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                (const char *const[]){"added_tokens[1]", "id 1", "clashes", NULL});
    expect_fail("addedmoved",
                "{" BYTELEVEL_PRE ", \"added_tokens\": [{\"id\": 1, \"content\": \"a\"}],"
                " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                (const char *const[]){"added_tokens[0]", "model.vocab has it at id 0", NULL});
    expect_fail("addedbad",
                "{" BYTELEVEL_PRE ", \"added_tokens\": [{\"id\": \"1\", \"content\": \"a\"}],"
                " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                (const char *const[]){"added_tokens[0]", "integer", NULL});
    expect_fail("mergenum",
                "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0},"
                " \"merges\": [\"a a\", 7]}}",
                (const char *const[]){"model.merges[1]", "2-element array", NULL});
    expect_fail("merge3",
                "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0},"
                " \"merges\": [[\"a\", \"a\", \"a\"]]}}",
                (const char *const[]){"model.merges[0]", NULL});
    expect_fail("mergenospace",
                "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0},"
                " \"merges\": [\"aa\"]}}",
                (const char *const[]){"model.merges[0]", "\"aa\"", NULL});
    expect_fail("mergesobj",
                "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0},"
                " \"merges\": {}}}",
                (const char *const[]){"model.merges must be an array", NULL});
    expect_fail("nulbyte",
                "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\\u0000b\": 0},"
                " \"merges\": []}}",
                (const char *const[]){"NUL", NULL});

    /* A broken side file is an error naming that file, not ignored. */
    char dir[512];
    scratch(dir, sizeof dir, "badcfg");
    put_file(dir, "tokenizer.json",
             "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}");
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": 5}");
    gguf_writer *w = gguf_writer_new();
    memra_err err = {{0}};
    CHECK(hf_tokenizer_to_gguf(dir, w, &err) == -1);
    CHECK_MSG(strstr(err.msg, "tokenizer_config.json") && strstr(err.msg, "chat_template"), "%s",
              err.msg);
    put_file(dir, "tokenizer_config.json", "{\"eos_token\": 3}");
    CHECK(hf_tokenizer_to_gguf(dir, w, &err) == -1);
    CHECK_MSG(strstr(err.msg, "tokenizer_config.json") && strstr(err.msg, "eos_token"), "%s",
              err.msg);
    put_file(dir, "tokenizer_config.json", "{}");
    put_file(dir, "config.json", "{\"vocab_size\": ");
    CHECK(hf_tokenizer_to_gguf(dir, w, &err) == -1);
    CHECK_MSG(strstr(err.msg, "config.json"), "%s", err.msg);
    put_file(dir, "config.json", "{}");
    put_file(dir, "tokenizer.json",
             "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": true, \"vocab\": {\"a\": 0},"
             " \"merges\": []}}");
    put_file(dir, "tokenizer.model", "\x0a\x05\x0a\x09");
    CHECK(hf_tokenizer_to_gguf(dir, w, &err) == -1);
    CHECK_MSG(strstr(err.msg, "tokenizer.model") && strstr(err.msg, "truncated"), "%s", err.msg);
    /* A piece without text. */
    put_file(dir, "tokenizer.model", "\x0a\x02\x18\x01");
    CHECK(hf_tokenizer_to_gguf(dir, w, &err) == -1);
    CHECK_MSG(strstr(err.msg, "tokenizer.model") && strstr(err.msg, "piece 0 has no text"), "%s",
              err.msg);
    gguf_writer_free(w);
    rm_dir(dir);
}

/* An unknown pre-tokenizer is not an error: "default" with a warning. */
static void test_unknown_pre(void)
{
    char dir[512], path[512];
    scratch(dir, sizeof dir, "unknownpre");
    scratch(path, sizeof path, "unknownpre.gguf");
    put_file(dir, "tokenizer.json",
             "{\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
             "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, \"behavior\": \"Isolated\"},"
             "{\"type\": \"ByteLevel\", \"use_regex\": false}]},"
             " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [[\"a\", \"b\"]]}}");
    gguf_file f;
    memra_err err = {{0}};
    CHECK_MSG(hf_to_file(dir, path, &f, &err) == 0, "%s", err.msg);
    CHECK(!strcmp(str_or(&f, "tokenizer.ggml.pre"), "default"));
    CHECK(n_of(&f, "tokenizer.ggml.merges", GGUF_STRING) == 1);
    gguf_close(&f);
    unlink(path);
    rm_dir(dir);
}

/* chat_template.jinja (+ additional_chat_templates/) and chat_template.json
 * when tokenizer_config.json has none; tokenizer_config's own wins. */
static void test_chat_template_files(void)
{
    char dir[512], sub[600], path[512];
    scratch(dir, sizeof dir, "chatfiles");
    scratch(path, sizeof path, "chatfiles.gguf");
    put_file(dir, "tokenizer.json",
             "{" BYTELEVEL_PRE ", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}");
    put_file(dir, "tokenizer_config.json", "{}");
    put_file(dir, "chat_template.jinja", "J{{ messages }}");
    gguf_file f;
    memra_err err = {{0}};
    if (hf_to_file(dir, path, &f, &err) == 0) {
        CHECK(!strcmp(str_or(&f, "tokenizer.chat_template"), "J{{ messages }}"));
        CHECK(gguf_find_kv(&f, "tokenizer.chat_templates") == NULL);
        gguf_close(&f);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    snprintf(sub, sizeof sub, "%s/additional_chat_templates", dir);
    put_file(sub, "tool_use.jinja", "T");
    put_file(sub, "rag-v1.jinja", "R");
    if (hf_to_file(dir, path, &f, &err) == 0) {
        CHECK(!strcmp(str_or(&f, "tokenizer.chat_template"), "J{{ messages }}"));
        CHECK(!strcmp(str_or(&f, "tokenizer.chat_template.tool_use"), "T"));
        CHECK(!strcmp(str_or(&f, "tokenizer.chat_template.rag_v1"), "R"));
        const gguf_value *names = arr(&f, "tokenizer.chat_templates", GGUF_STRING);
        CHECK(names && names->v.arr.n == 2);
        if (names && names->v.arr.n == 2) {
            const gguf_str *nm = names->v.arr.data;
            CHECK(!strcmp(nm[0].str, "rag_v1") && !strcmp(nm[1].str, "tool_use"));
        }
        gguf_close(&f);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    put_file(dir, "tokenizer_config.json", "{\"chat_template\": \"TC\"}");
    if (hf_to_file(dir, path, &f, &err) == 0) {
        CHECK(!strcmp(str_or(&f, "tokenizer.chat_template"), "TC"));
        CHECK(gguf_find_kv(&f, "tokenizer.chat_template.tool_use") == NULL);
        gguf_close(&f);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    rm_dir(sub);
    snprintf(sub, sizeof sub, "%s/chat_template.jinja", dir);
    unlink(sub);
    put_file(dir, "tokenizer_config.json", "{}");
    put_file(dir, "chat_template.json", "{\"chat_template\": \"C\"}");
    if (hf_to_file(dir, path, &f, &err) == 0) {
        CHECK(!strcmp(str_or(&f, "tokenizer.chat_template"), "C"));
        gguf_close(&f);
    } else {
        CHECK_MSG(0, "%s", err.msg);
    }
    put_file(dir, "chat_template.json", "{\"chat_template\": [{\"name\": 3}]}");
    gguf_writer *w = gguf_writer_new();
    CHECK(hf_tokenizer_to_gguf(dir, w, &err) == -1);
    CHECK_MSG(strstr(err.msg, "chat_template.json") && strstr(err.msg, "chat_template[0]"), "%s",
              err.msg);
    gguf_writer_free(w);
    unlink(path);
    rm_dir(dir);
}

/* ---- malformed GGUF for the reverse direction ---- */

static void expect_export_fail(gguf_writer *w, const char *want)
{
    char path[512], dir[512];
    scratch(path, sizeof path, "bad-export.gguf");
    scratch(dir, sizeof dir, "bad-export");
    memra_err err = {{0}};
    gguf_writer_set_str(w, "general.architecture", "llama");
    CHECK_MSG(gguf_writer_write(w, path, &err) == 0, "%s", err.msg);
    gguf_file f;
    if (gguf_open(path, &f, &err) == 0) {
        CHECK_MSG(gguf_tokenizer_to_hf(&f, dir, &err) == -1, "accepted (want %s)", want);
        CHECK_MSG(strstr(err.msg, want) != NULL, "message \"%s\" lacks \"%s\"", err.msg, want);
        gguf_close(&f);
    }
    gguf_writer_free(w);
    unlink(path);
    rm_dir(dir);
}

static void test_malformed_gguf(void)
{
    static const char *const toks[] = {"a", "b", "a b"};
    static const char *const dup[] = {"a", "a"};
    static const int32_t types[] = {1, 1};
    static const int32_t bad_types[] = {1, 9, 1};
    static const char *const bad_merge[] = {"ab"};

    gguf_writer *w = gguf_writer_new();
    expect_export_fail(w, "tokenizer.ggml.model");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "bert");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    expect_export_fail(w, "\"bert\"");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    expect_export_fail(w, "tokenizer.ggml.tokens");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, 2, types);
    expect_export_fail(w, "2 entries, but there are 3 tokens");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, 3, bad_types);
    expect_export_fail(w, "token_type[1] is 9");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    expect_export_fail(w, "without tokenizer.ggml.merges");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    gguf_writer_set_arr(w, "tokenizer.ggml.merges", GGUF_STRING, 1, bad_merge);
    expect_export_fail(w, "merges[0] \"ab\"");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 2, dup);
    expect_export_fail(w, "appears at ids 0 and 1");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 3);
    expect_export_fail(w, "eos_token_id 3 is past the 3 tokens");

    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, 3, toks);
    gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_INT32, 3, bad_types);
    expect_export_fail(w, "tokenizer.ggml.scores' must be an array of f32");
}

/* tokenizer.model parsing: a model we write reads back; truncations fail. */
static void test_spm_model_file(void)
{
    char path[512];
    scratch(path, sizeof path, "t.model");
    spm_piece pieces[3] = {{"<unk>", 5, 0.0f, HFT_UNKNOWN},
                           {"\xe2\x96\x81t", 4, -1.5f, HFT_NORMAL},
                           {"<0x0A>", 6, 0.0f, HFT_BYTE}};
    spm_write_opts o = {0, -1, -1, -1, 1};
    memra_err err = {{0}};
    CHECK_MSG(spm_model_write(path, pieces, 3, &o, &err) == 0, "%s", err.msg);
    spm_model m;
    CHECK_MSG(spm_model_read(path, &m, &err) == 0, "%s", err.msg);
    CHECK(m.n == 3);
    if (m.n == 3) {
        CHECK(!strcmp(m.pieces[1].piece, "\xe2\x96\x81t") && m.pieces[1].score == -1.5f);
        CHECK(m.pieces[0].type == HFT_UNKNOWN && m.pieces[2].type == HFT_BYTE);
    }
    spm_model_free(&m);

    char *buf;
    size_t len;
    CHECK(read_small_file(path, 1 << 20, &buf, &len, &err) == 0);
    /* Every strict prefix that cuts a field must fail cleanly. */
    int failures = 0;
    for (size_t cut = 1; cut < len; cut++) {
        spm_model t;
        if (spm_model_parse((const uint8_t *)buf, cut, "cut", &t, &err) == 0)
            spm_model_free(&t);
        else
            failures++;
    }
    CHECK(failures > 0);
    static const uint8_t bad_type[] = {0x0a, 0x05, 0x0a, 0x01, 'a', 0x18, 0x09};
    CHECK(spm_model_parse(bad_type, sizeof bad_type, "x", &m, &err) == -1);
    CHECK_MSG(strstr(err.msg, "unknown piece type 9"), "%s", err.msg);
    static const uint8_t group[] = {0x0b};
    CHECK(spm_model_parse(group, sizeof group, "x", &m, &err) == -1);
    CHECK(spm_model_parse(NULL, 0, "x", &m, &err) == -1);
    CHECK_MSG(strstr(err.msg, "no pieces"), "%s", err.msg);
    free(buf);
    unlink(path);
}

TEST_MAIN(TEST_CASE(test_qwen2_fixture), TEST_CASE(test_llama3_fixture),
          TEST_CASE(test_spm_fixture), TEST_CASE(test_round_trip_fixtures),
          TEST_CASE(test_spm_without_model_file), TEST_CASE(test_no_space_prefix), TEST_CASE(test_vocab_qwen2),
          TEST_CASE(test_vocab_llama_spm), TEST_CASE(test_vocab_gpt2), TEST_CASE(test_vocab_llama_bpe),
          TEST_CASE(test_malformed_hf), TEST_CASE(test_unknown_pre), TEST_CASE(test_chat_template_files),
          TEST_CASE(test_malformed_gguf), TEST_CASE(test_spm_model_file))
