/* GGUF tokenizer.* keys -> a Hugging Face tokenizer directory
 * (tokenizer.json, tokenizer_config.json, and tokenizer.model for
 * SentencePiece-style vocabularies). The inverse of hf_tokenizer_to_gguf as
 * far as the HF files can say it; hf_tokenizer.h lists what is not carried. */
#include "tok/hf_tokenizer.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "core/check.h"
#include "core/log.h"
#include "core/mapfile.h"
#include "core/strbuf.h"
#include "tok/hf_tokenizer_internal.h"

enum { KIND_GPT2, KIND_LLAMA };

typedef struct {
    const gguf_file *f;
    const char *what; /* the GGUF's name in errors */
    const char *dir;
    int kind;
    const gguf_str *tokens;
    size_t n;
    const int32_t *types; /* NULL: all normal */
    const float *scores;  /* NULL: all 0 */
    const gguf_str *merges;
    size_t n_merges;
    const char *pre;
    strmap map;
    int64_t sp_id[6]; /* bos, eos, unk, sep, pad, mask; -1 absent */
    int add_flag[3];  /* bos, eos, sep; -1 absent */
    int add_space_prefix;
} exporter;

static const char *const sp_keys[6] = {
    "tokenizer.ggml.bos_token_id",     "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id", "tokenizer.ggml.mask_token_id"};
static const char *const sp_config[6] = {"bos_token", "eos_token", "unk_token",
                                         "sep_token", "pad_token", "mask_token"};

static int type_of(const exporter *x, size_t i)
{
    return x->types ? x->types[i] : HFT_NORMAL;
}

/* An array key of the given element type and (when n_want) length; NULL
 * without error when absent. */
static int get_array(const exporter *x, const char *key, gguf_vtype elem, size_t n_want,
                     const gguf_value **out, memra_err *err)
{
    *out = NULL;
    const gguf_kv *kv = gguf_find_kv(x->f, key);
    if (!kv)
        return 0;
    if (kv->value.type != GGUF_ARRAY || kv->value.v.arr.elem_type != elem)
        return memra_fail(err, "%s: key '%s' must be an array of %s", x->what, key,
                          gguf_vtype_name(elem));
    if (n_want && kv->value.v.arr.n != n_want)
        return memra_fail(err, "%s: key '%s' has %llu entries, but there are %zu tokens", x->what,
                          key, (unsigned long long)kv->value.v.arr.n, n_want);
    *out = &kv->value;
    return 0;
}

static int get_bool(const exporter *x, const char *key, int *out, memra_err *err)
{
    const gguf_kv *kv = gguf_find_kv(x->f, key);
    if (!kv)
        return 0;
    if (kv->value.type != GGUF_BOOL)
        return memra_fail(err, "%s: key '%s' must be a bool", x->what, key);
    *out = kv->value.v.u != 0;
    return 0;
}

static int check_text(const exporter *x, const char *key, size_t index, const gguf_str *s,
                      memra_err *err)
{
    if (strlen(s->str) != s->len)
        return memra_fail(err, "%s: %s[%zu] contains a NUL byte", x->what, key, index);
    if (!utf8_valid((const uint8_t *)s->str, s->len))
        return memra_fail(err, "%s: %s[%zu] is not valid UTF-8", x->what, key, index);
    return 0;
}

static int read_keys(exporter *x, memra_err *err)
{
    const char *model;
    if (gguf_get_str(x->f, "tokenizer.ggml.model", &model, err))
        return -1;
    if (!strcmp(model, "gpt2"))
        x->kind = KIND_GPT2;
    else if (!strcmp(model, "llama"))
        x->kind = KIND_LLAMA;
    else
        return memra_fail(err, "%s: tokenizer.ggml.model \"%s\" has no Hugging Face BPE form "
                               "(only gpt2 and llama)", x->what, model);
    const gguf_kv *pre = gguf_find_kv(x->f, "tokenizer.ggml.pre");
    x->pre = pre && pre->value.type == GGUF_STRING ? pre->value.v.s.str : "default";

    const gguf_value *v;
    if (get_array(x, "tokenizer.ggml.tokens", GGUF_STRING, 0, &v, err))
        return -1;
    if (!v || !v->v.arr.n)
        return memra_fail(err, "%s: tokenizer.ggml.tokens is missing or empty", x->what);
    if (v->v.arr.n > INT32_MAX)
        return memra_fail(err, "%s: tokenizer.ggml.tokens has too many entries", x->what);
    x->tokens = v->v.arr.data;
    x->n = (size_t)v->v.arr.n;
    strmap_init(&x->map, x->n);
    for (size_t i = 0; i < x->n; i++) {
        if (check_text(x, "tokenizer.ggml.tokens", i, &x->tokens[i], err))
            return -1;
        int32_t prev = strmap_put(&x->map, x->tokens[i].str, x->tokens[i].len, (int32_t)i);
        if (prev != (int32_t)i)
            return memra_fail(err, "%s: tokenizer.ggml.tokens: \"%s\" appears at ids %d and %zu",
                              x->what, x->tokens[i].str, prev, i);
    }
    if (get_array(x, "tokenizer.ggml.token_type", GGUF_INT32, x->n, &v, err))
        return -1;
    x->types = v ? v->v.arr.data : NULL;
    for (size_t i = 0; x->types && i < x->n; i++)
        if (x->types[i] < HFT_NORMAL || x->types[i] > HFT_BYTE)
            return memra_fail(err, "%s: tokenizer.ggml.token_type[%zu] is %d (not 1..6)", x->what,
                              i, x->types[i]);
    if (get_array(x, "tokenizer.ggml.scores", GGUF_FLOAT32, x->n, &v, err))
        return -1;
    x->scores = v ? v->v.arr.data : NULL;
    if (get_array(x, "tokenizer.ggml.merges", GGUF_STRING, 0, &v, err))
        return -1;
    if (x->kind == KIND_GPT2 && !v)
        return memra_fail(err, "%s: gpt2 tokenizer without tokenizer.ggml.merges", x->what);
    if (v && x->kind == KIND_GPT2) {
        x->merges = v->v.arr.data;
        x->n_merges = (size_t)v->v.arr.n;
        for (size_t i = 0; i < x->n_merges; i++) {
            const gguf_str *m = &x->merges[i];
            if (check_text(x, "tokenizer.ggml.merges", i, m, err))
                return -1;
            if (m->len < 3 || !memchr(m->str + 1, ' ', m->len - 1))
                return memra_fail(err, "%s: tokenizer.ggml.merges[%zu] \"%s\" is not two tokens "
                                       "separated by a space", x->what, i, m->str);
        }
    }

    for (int i = 0; i < 6; i++) {
        x->sp_id[i] = -1;
        if (!gguf_find_kv(x->f, sp_keys[i]))
            continue;
        uint64_t id;
        const gguf_kv *kv = gguf_find_kv(x->f, sp_keys[i]);
        if (kv->value.type == GGUF_INT32 && kv->value.v.i == -1)
            continue; /* -1: llama.cpp's "no such token" */
        if (gguf_get_u64(x->f, sp_keys[i], &id, err))
            return -1;
        /* Writers that store the id as u32 spell "none" 0xFFFFFFFF (llama2.c's
         * export does, e.g. stories260K's separator id). */
        if (id == UINT32_MAX || id == UINT64_MAX)
            continue;
        if (id >= x->n)
            return memra_fail(err, "%s: %s %llu is past the %zu tokens", x->what, sp_keys[i],
                              (unsigned long long)id, x->n);
        x->sp_id[i] = (int64_t)id;
    }
    static const char *const add_keys[3] = {"tokenizer.ggml.add_bos_token",
                                            "tokenizer.ggml.add_eos_token",
                                            "tokenizer.ggml.add_sep_token"};
    for (int i = 0; i < 3; i++) {
        x->add_flag[i] = -1;
        if (get_bool(x, add_keys[i], &x->add_flag[i], err))
            return -1;
    }
    x->add_space_prefix = 1;
    return get_bool(x, "tokenizer.ggml.add_space_prefix", &x->add_space_prefix, err);
}

/* ---- tokenizer.json ---- */

static json_t *str_n(const gguf_str *s)
{
    return json_stringn(s->str, s->len);
}

static json_t *added_tokens(const exporter *x)
{
    json_t *list = json_array();
    for (size_t i = 0; i < x->n; i++) {
        int t = type_of(x, i);
        if (t == HFT_NORMAL || t == HFT_BYTE)
            continue;
        int special = t == HFT_CONTROL || t == HFT_UNKNOWN;
        json_array_append_new(list, json_pack("{s:I,s:o,s:b,s:b,s:b,s:b,s:b}", "id",
                                              (json_int_t)i, "content", str_n(&x->tokens[i]),
                                              "single_word", 0, "lstrip", 0, "rstrip", 0,
                                              "normalized", 0, "special", special));
    }
    return list;
}

typedef struct {
    float score;
    int32_t t, a, b;
} merge_cand;

static int cmp_cand(const void *pa, const void *pb)
{
    const merge_cand *a = pa, *b = pb;
    if (a->score != b->score)
        return a->score > b->score ? -1 : 1;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    if (a->a != b->a)
        return a->a < b->a ? -1 : 1;
    return (a->b > b->b) - (a->b < b->b);
}

static size_t utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
}

/* The merges a SentencePiece vocabulary implies: every split of a normal
 * token into two normal tokens, highest-scoring result first (ties by id),
 * which is the order llama.cpp's score-driven merging applies them. */
static json_t *spm_merges(const exporter *x)
{
    merge_cand *c = NULL;
    size_t n = 0, cap = 0;
    int any_space = 0;
    for (size_t i = 0; i < x->n; i++) {
        if (type_of(x, i) != HFT_NORMAL)
            continue;
        const gguf_str *s = &x->tokens[i];
        float score = x->scores ? x->scores[i] : 0.0f;
        if (isnan(score))
            score = -INFINITY;
        for (size_t k = utf8_len((unsigned char)s->str[0]); k < s->len;
             k += utf8_len((unsigned char)s->str[k])) {
            int32_t a = strmap_get(&x->map, s->str, k);
            int32_t b = strmap_get(&x->map, s->str + k, s->len - k);
            if (a < 0 || b < 0 || type_of(x, (size_t)a) != HFT_NORMAL ||
                type_of(x, (size_t)b) != HFT_NORMAL)
                continue;
            if (n == cap) {
                cap = cap ? cap * 2 : 4096;
                c = xrealloc(c, cap * sizeof *c);
            }
            c[n++] = (merge_cand){score, (int32_t)i, a, b};
            any_space |= memchr(s->str, ' ', s->len) != NULL;
        }
    }
    if (n)
        qsort(c, n, sizeof *c, cmp_cand);
    json_t *list = json_array();
    strbuf sb;
    sb_init(&sb);
    for (size_t i = 0; i < n; i++) {
        const gguf_str *a = &x->tokens[c[i].a], *b = &x->tokens[c[i].b];
        if (any_space) {
            /* "a b" cannot hold a space inside a part: use the pair form. */
            json_array_append_new(list, json_pack("[o,o]", str_n(a), str_n(b)));
            continue;
        }
        sb_clear(&sb);
        sb_append(&sb, a->str, a->len);
        sb_putc(&sb, ' ');
        sb_append(&sb, b->str, b->len);
        json_array_append_new(list, json_stringn(sb.data, sb.len));
    }
    sb_free(&sb);
    free(c);
    return list;
}

static json_t *model_json(const exporter *x)
{
    json_t *vocab = json_object();
    for (size_t i = 0; i < x->n; i++) {
        int t = type_of(x, i);
        /* gpt2 (Qwen, Llama 3 style): added tokens live only in added_tokens;
         * llama (Llama 2 style): every token is in the vocab. */
        if (x->kind == KIND_GPT2 && t != HFT_NORMAL && t != HFT_BYTE)
            continue;
        json_object_setn_new(vocab, x->tokens[i].str, x->tokens[i].len, json_integer((json_int_t)i));
    }
    json_t *merges;
    if (x->kind == KIND_GPT2) {
        merges = json_array();
        for (size_t i = 0; i < x->n_merges; i++)
            json_array_append_new(merges, str_n(&x->merges[i]));
    } else {
        merges = spm_merges(x);
    }
    json_t *unk = json_null();
    if (x->kind == KIND_LLAMA) {
        int64_t id = x->sp_id[2];
        for (size_t i = 0; id < 0 && i < x->n; i++)
            if (type_of(x, i) == HFT_UNKNOWN)
                id = (int64_t)i;
        if (id >= 0)
            unk = str_n(&x->tokens[id]);
    }
    const hf_pre_type *pre = hf_pre_find(x->pre);
    return json_pack("{s:s,s:n,s:o,s:n,s:n,s:b,s:b,s:b,s:o,s:o}", "type", "BPE", "dropout", "unk_token",
                     unk, "continuing_subword_prefix", "end_of_word_suffix", "fuse_unk",
                     x->kind == KIND_LLAMA, "byte_fallback", x->kind == KIND_LLAMA,
                     "ignore_merges", x->kind == KIND_GPT2 && pre && pre->ignore_merges, "vocab",
                     vocab, "merges", merges);
}

static json_t *bytelevel(int use_regex, int add_prefix_space, int trim_offsets)
{
    return json_pack("{s:s,s:b,s:b,s:b}", "type", "ByteLevel", "add_prefix_space",
                     add_prefix_space, "trim_offsets", trim_offsets, "use_regex", use_regex);
}

static json_t *pre_tokenizer(const exporter *x)
{
    if (x->kind == KIND_LLAMA)
        return json_null();
    const hf_pre_type *pre = hf_pre_find(x->pre);
    if (pre && pre->n_regex == 1 && !strcmp(pre->regex[0], HF_GPT2_REGEX))
        return bytelevel(1, 0, 1);
    json_t *list = json_array();
    if (!pre)
        log_warn("%s: tokenizer.ggml.pre \"%s\" has no known regex; tokenizer.json gets no "
                 "Split pre-tokenizer", x->what, x->pre);
    for (int i = 0; pre && i < pre->n_regex; i++)
        json_array_append_new(list, json_pack("{s:s,s:{s:s},s:s,s:b}", "type", "Split", "pattern",
                                              "Regex", pre->regex[i], "behavior", "Isolated",
                                              "invert", 0));
    json_array_append_new(list, bytelevel(0, 0, 0));
    return json_pack("{s:s,s:o}", "type", "Sequence", "pretokenizers", list);
}

static json_t *normalizer(const exporter *x)
{
    if (x->kind == KIND_GPT2)
        return json_null();
    json_t *list = json_array();
    if (x->add_space_prefix)
        json_array_append_new(list, json_pack("{s:s,s:s}", "type", "Prepend", "prepend",
                                              "\xe2\x96\x81"));
    json_array_append_new(list, json_pack("{s:s,s:{s:s},s:s}", "type", "Replace", "pattern",
                                          "String", " ", "content", "\xe2\x96\x81"));
    return json_pack("{s:s,s:o}", "type", "Sequence", "normalizers", list);
}

static json_t *decoder(const exporter *x)
{
    if (x->kind == KIND_GPT2)
        return bytelevel(1, 1, 1);
    json_t *list = json_array();
    json_array_append_new(list, json_pack("{s:s,s:{s:s},s:s}", "type", "Replace", "pattern",
                                          "String", "\xe2\x96\x81", "content", " "));
    json_array_append_new(list, json_pack("{s:s}", "type", "ByteFallback"));
    json_array_append_new(list, json_pack("{s:s}", "type", "Fuse"));
    if (x->add_space_prefix)
        json_array_append_new(list, json_pack("{s:s,s:s,s:i,s:i}", "type", "Strip", "content",
                                              " ", "start", 1, "stop", 0));
    return json_pack("{s:s,s:o}", "type", "Sequence", "decoders", list);
}

/* TemplateProcessing that adds BOS and/or EOS around each sequence, as
 * Llama's tokenizer.json does; null when neither is added. */
static json_t *post_processor(const exporter *x)
{
    int bos = x->add_flag[0] == 1 && x->sp_id[0] >= 0;
    int eos = x->add_flag[1] == 1 && x->sp_id[1] >= 0;
    if (!bos && !eos)
        return json_null();
    json_t *single = json_array(), *pair = json_array(), *specials = json_object();
    for (int seq = 0; seq < 2; seq++) {
        for (int part = 0; part < 3; part++) {
            int which = part == 0 ? 0 : 1;
            if (part == 1) {
                json_t *s = json_pack("{s:{s:s,s:i}}", "Sequence", "id", seq ? "B" : "A",
                                      "type_id", seq);
                if (!seq)
                    json_array_append(single, s);
                json_array_append_new(pair, s);
                continue;
            }
            if (!(which == 0 ? bos : eos))
                continue;
            const gguf_str *tok = &x->tokens[x->sp_id[which]];
            json_t *s = json_pack("{s:{s:o,s:i}}", "SpecialToken", "id", str_n(tok), "type_id", seq);
            if (!seq)
                json_array_append(single, s);
            json_array_append_new(pair, s);
            json_object_setn_new(specials, tok->str, tok->len,
                                 json_pack("{s:o,s:[I],s:[o]}", "id", str_n(tok), "ids",
                                           (json_int_t)x->sp_id[which], "tokens", str_n(tok)));
        }
    }
    return json_pack("{s:s,s:o,s:o,s:o}", "type", "TemplateProcessing", "single", single, "pair",
                     pair, "special_tokens", specials);
}

static json_t *tokenizer_json(const exporter *x)
{
    json_t *root = json_object();
    json_object_set_new(root, "version", json_string("1.0"));
    json_object_set_new(root, "truncation", json_null());
    json_object_set_new(root, "padding", json_null());
    json_object_set_new(root, "added_tokens", added_tokens(x));
    json_object_set_new(root, "normalizer", normalizer(x));
    json_object_set_new(root, "pre_tokenizer", pre_tokenizer(x));
    json_object_set_new(root, "post_processor", post_processor(x));
    json_object_set_new(root, "decoder", decoder(x));
    json_object_set_new(root, "model", model_json(x));
    return root;
}

/* ---- tokenizer_config.json ---- */

static int chat_templates(const exporter *x, json_t *cfg, memra_err *err)
{
    const gguf_kv *def = gguf_find_kv(x->f, "tokenizer.chat_template");
    if (def && def->value.type != GGUF_STRING)
        return memra_fail(err, "%s: tokenizer.chat_template must be a string", x->what);
    const gguf_value *names;
    if (get_array(x, "tokenizer.chat_templates", GGUF_STRING, 0, &names, err))
        return -1;
    if (def && check_text(x, "tokenizer.chat_template", 0, &def->value.v.s, err))
        return -1;
    if (!names || !names->v.arr.n) {
        if (def)
            json_object_set_new(cfg, "chat_template", str_n(&def->value.v.s));
        return 0;
    }
    json_t *list = json_array();
    if (def)
        json_array_append_new(list, json_pack("{s:s,s:o}", "name", "default", "template",
                                              str_n(&def->value.v.s)));
    const gguf_str *nm = names->v.arr.data;
    for (size_t i = 0; i < names->v.arr.n; i++) {
        char key[300];
        const gguf_kv *t = NULL;
        int bad = check_text(x, "tokenizer.chat_templates", i, &nm[i], err);
        if (!bad && snprintf(key, sizeof key, "tokenizer.chat_template.%s", nm[i].str) >=
                        (int)sizeof key)
            bad = memra_fail(err, "%s: chat template name \"%s\" too long", x->what, nm[i].str);
        if (!bad) {
            t = gguf_find_kv(x->f, key);
            if (!t || t->value.type != GGUF_STRING)
                bad = memra_fail(err, "%s: tokenizer.chat_templates names \"%s\" but %s is "
                                      "missing or not a string", x->what, nm[i].str, key);
            else
                bad = check_text(x, key, 0, &t->value.v.s, err);
        }
        if (bad) {
            json_decref(list);
            return -1;
        }
        json_array_append_new(list, json_pack("{s:o,s:o}", "name", str_n(&nm[i]), "template",
                                              str_n(&t->value.v.s)));
    }
    json_object_set_new(cfg, "chat_template", list);
    return 0;
}

static json_t *tokenizer_config(const exporter *x, memra_err *err)
{
    json_t *cfg = json_object();
    static const char *const add_names[3] = {"add_bos_token", "add_eos_token", "add_sep_token"};
    for (int i = 0; i < 3; i++)
        if (x->add_flag[i] >= 0)
            json_object_set_new(cfg, add_names[i], json_boolean(x->add_flag[i]));
    for (int i = 0; i < 6; i++)
        if (x->sp_id[i] >= 0)
            json_object_set_new(cfg, sp_config[i], str_n(&x->tokens[x->sp_id[i]]));
    if (chat_templates(x, cfg, err)) {
        json_decref(cfg);
        return NULL;
    }
    json_object_set_new(cfg, "clean_up_tokenization_spaces", json_false());
    json_object_set_new(cfg, "tokenizer_class", json_string("PreTrainedTokenizerFast"));
    return cfg;
}

/* ---- driver ---- */

static int write_json(const char *dir, const char *name, json_t *j, memra_err *err)
{
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path)
        return memra_fail(err, "%s: path too long", dir);
    char *text = json_dumps(j, JSON_INDENT(2));
    if (!text)
        return memra_fail(err, "%s: could not serialize JSON", path);
    size_t len = strlen(text);
    text = xrealloc(text, len + 2);
    text[len++] = '\n';
    int rc = write_file_atomic(path, text, len, err);
    free(text);
    return rc;
}

static int write_spm(const exporter *x, memra_err *err)
{
    spm_piece *p = xmalloc(x->n * sizeof *p);
    for (size_t i = 0; i < x->n; i++) {
        p[i].piece = x->tokens[i].str;
        p[i].len = x->tokens[i].len;
        p[i].score = x->scores ? x->scores[i] : 0.0f;
        p[i].type = type_of(x, i);
    }
    spm_write_opts o = {(int32_t)x->sp_id[2], (int32_t)x->sp_id[0], (int32_t)x->sp_id[1],
                        (int32_t)x->sp_id[4], x->add_space_prefix};
    char path[4096];
    int rc;
    if (snprintf(path, sizeof path, "%s/tokenizer.model", x->dir) >= (int)sizeof path)
        rc = memra_fail(err, "%s: path too long", x->dir);
    else
        rc = spm_model_write(path, p, x->n, &o, err);
    free(p);
    return rc;
}

int gguf_tokenizer_to_hf(const gguf_file *f, const char *dir, memra_err *err)
{
    exporter x;
    memset(&x, 0, sizeof x);
    x.f = f;
    x.what = f->map.path ? f->map.path : "gguf";
    x.dir = dir;
    int rc = -1;
    json_t *tj = NULL, *tc = NULL;
    if (read_keys(&x, err))
        goto out;
    tc = tokenizer_config(&x, err);
    if (!tc)
        goto out;
    tj = tokenizer_json(&x);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        memra_fail(err, "%s: cannot create directory: %s", dir, strerror(errno));
        goto out;
    }
    if (write_json(dir, "tokenizer.json", tj, err) ||
        write_json(dir, "tokenizer_config.json", tc, err) ||
        (x.kind == KIND_LLAMA && write_spm(&x, err)))
        goto out;
    rc = 0;
out:
    json_decref(tj);
    json_decref(tc);
    strmap_free(&x.map);
    return rc;
}
