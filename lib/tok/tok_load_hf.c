/* A tokenizer from a Hugging Face tokenizer.json (+ tokenizer_config.json,
 * generation_config.json), reproducing `tokenizers`: the BPE model (vocab,
 * merges by rank, byte_fallback, unk/fuse_unk, ignore_merges), the added
 * tokens with their flags, the normalizer and pre-tokenizer chains, and
 * BOS/EOS from the config (add_bos_token/add_eos_token) or else the
 * post-processor's template. Anything the file declares that we do not
 * implement is an error naming it, never a silent difference. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/json.h"
#include "core/mapfile.h"
#include "tok/hf_tokenizer_internal.h"
#include "tok/tok_internal.h"
#include "tok/tok_json_scan.h"

#define TOKENIZER_JSON_MAX (512u << 20)

typedef struct {
    tokenizer *t;
    const char *path; /* tokenizer.json, for messages */
    memra_err *err;
} loader;

static int is_type(const json_t *o, const char *type)
{
    const char *s = json_string_value(json_object_get(o, "type"));
    return s && strcmp(s, type) == 0;
}

static int get_flag(const json_t *o, const char *key, int dflt)
{
    json_t *v = json_object_get(o, key);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

/* A pattern object {"String": s} or {"Regex": r}. */
static int get_pattern(loader *L, const json_t *o, const char *where, const char **s, size_t *n,
                       int *is_regex)
{
    json_t *p = json_object_get(o, "pattern");
    json_t *v;
    if ((v = json_object_get(p, "String")) && json_is_string(v)) {
        *is_regex = 0;
    } else if ((v = json_object_get(p, "Regex")) && json_is_string(v)) {
        *is_regex = 1;
    } else {
        return memra_fail(L->err, "%s: %s: pattern must be {\"String\": ...} or {\"Regex\": ...}",
                          L->path, where);
    }
    *s = json_string_value(v);
    *n = json_string_length(v);
    return 0;
}

/* ---- normalizer ---- */

static void add_norm(tokenizer *t, tok_norm_type type, const char *a, size_t alen, const char *b,
                     size_t blen)
{
    t->norm = xrealloc(t->norm, (t->n_norm + 1) * sizeof *t->norm);
    tok_norm_step *st = &t->norm[t->n_norm++];
    memset(st, 0, sizeof *st);
    st->type = type;
    if (a) {
        st->a = xmalloc(alen + 1);
        memcpy(st->a, a, alen);
        st->a[alen] = '\0';
        st->alen = alen;
    }
    if (b) {
        st->b = xmalloc(blen + 1);
        memcpy(st->b, b, blen);
        st->b[blen] = '\0';
        st->blen = blen;
    }
}

static int load_normalizer(loader *L, const json_t *n)
{
    if (!n || json_is_null(n))
        return 0;
    const char *type = json_string_value(json_object_get(n, "type"));
    if (!type)
        return memra_fail(L->err, "%s: normalizer without a type", L->path);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(n, "normalizers");
        if (!json_is_array(list))
            return memra_fail(L->err, "%s: normalizer Sequence without \"normalizers\"", L->path);
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) if (load_normalizer(L, v)) return -1;
        return 0;
    }
    static const struct {
        const char *name;
        tok_norm_type type;
    } unicode[] = {{"NFC", NORM_NFC}, {"NFD", NORM_NFD}, {"NFKC", NORM_NFKC}, {"NFKD", NORM_NFKD},
                   {"Lowercase", NORM_LOWERCASE}};
    for (size_t i = 0; i < sizeof unicode / sizeof unicode[0]; i++) {
        if (strcmp(type, unicode[i].name) == 0) {
            add_norm(L->t, unicode[i].type, NULL, 0, NULL, 0);
            return 0;
        }
    }
    if (strcmp(type, "Prepend") == 0) {
        json_t *p = json_object_get(n, "prepend");
        if (!json_is_string(p))
            return memra_fail(L->err, "%s: normalizer Prepend without \"prepend\"", L->path);
        add_norm(L->t, NORM_PREPEND, json_string_value(p), json_string_length(p), NULL, 0);
        return 0;
    }
    if (strcmp(type, "Replace") == 0) {
        const char *pat;
        size_t plen;
        int is_regex;
        if (get_pattern(L, n, "normalizer Replace", &pat, &plen, &is_regex))
            return -1;
        json_t *c = json_object_get(n, "content");
        if (!json_is_string(c))
            return memra_fail(L->err, "%s: normalizer Replace needs a string \"content\"",
                              L->path);
        add_norm(L->t, NORM_REPLACE, pat, plen, json_string_value(c), json_string_length(c));
        if (is_regex) {
            tok_norm_step *st = &L->t->norm[L->t->n_norm - 1];
            st->re = tok_regex_compile(pat, plen, 0, L->err);
            if (!st->re) {
                char why[sizeof L->err->msg];
                snprintf(why, sizeof why, "%s", L->err->msg);
                return memra_fail(L->err, "%s: normalizer Replace: %s", L->path, why);
            }
        }
        return 0;
    }
    if (strcmp(type, "StripAccents") == 0) {
        add_norm(L->t, NORM_STRIP_ACCENTS, NULL, 0, NULL, 0);
        return 0;
    }
    if (strcmp(type, "Strip") == 0) {
        add_norm(L->t, NORM_STRIP, NULL, 0, NULL, 0);
        L->t->norm[L->t->n_norm - 1].strip_left = (uint8_t)get_flag(n, "strip_left", 1);
        L->t->norm[L->t->n_norm - 1].strip_right = (uint8_t)get_flag(n, "strip_right", 1);
        return 0;
    }
    return memra_fail(L->err, "%s: normalizer type \"%s\" is not supported", L->path, type);
}

/* ---- pre-tokenizer ---- */

static tok_pre_step *add_pre(tokenizer *t, tok_pre_type type)
{
    t->pre = xrealloc(t->pre, (t->n_pre + 1) * sizeof *t->pre);
    tok_pre_step *st = &t->pre[t->n_pre++];
    memset(st, 0, sizeof *st);
    st->type = type;
    st->behavior = SPLIT_ISOLATED;
    return st;
}

static int parse_behavior(loader *L, const json_t *o, tok_split_behavior *b)
{
    const char *s = json_string_value(json_object_get(o, "behavior"));
    static const struct {
        const char *name;
        tok_split_behavior b;
    } names[] = {{"Isolated", SPLIT_ISOLATED},
                 {"Removed", SPLIT_REMOVED},
                 {"MergedWithPrevious", SPLIT_MERGED_PREV},
                 {"MergedWithNext", SPLIT_MERGED_NEXT},
                 {"Contiguous", SPLIT_CONTIGUOUS}};
    for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(s, names[i].name) == 0) {
            *b = names[i].b;
            return 0;
        }
    }
    return memra_fail(L->err, "%s: Split behavior \"%s\" is not supported", L->path,
                      s ? s : "(missing)");
}

static int add_regex_step(loader *L, const char *re, size_t len, tok_split_behavior b, int invert)
{
    tok_pre_step *st = add_pre(L->t, PRE_SPLIT_REGEX);
    st->behavior = b;
    st->invert = invert;
    st->re = tok_regex_compile(re, len, L->t->multiline_regex, L->err);
    if (!st->re)
        return memra_wrap(L->err, "%s", L->path);
    return 0;
}

static int load_pre(loader *L, const json_t *p, int *bytelevel)
{
    if (!p || json_is_null(p))
        return 0;
    const char *type = json_string_value(json_object_get(p, "type"));
    if (!type)
        return memra_fail(L->err, "%s: pre_tokenizer without a type", L->path);
    if (strcmp(type, "Sequence") == 0) {
        json_t *list = json_object_get(p, "pretokenizers");
        if (!json_is_array(list))
            return memra_fail(L->err, "%s: pre_tokenizer Sequence without \"pretokenizers\"",
                              L->path);
        size_t i;
        json_t *v;
        json_array_foreach(list, i, v) if (load_pre(L, v, bytelevel)) return -1;
        return 0;
    }
    if (strcmp(type, "Split") == 0) {
        const char *pat;
        size_t plen;
        int is_regex;
        tok_split_behavior b = SPLIT_ISOLATED;
        if (get_pattern(L, p, "pre_tokenizer Split", &pat, &plen, &is_regex) ||
            parse_behavior(L, p, &b))
            return -1;
        int invert = get_flag(p, "invert", 0);
        if (is_regex)
            return add_regex_step(L, pat, plen, b, invert);
        tok_pre_step *st = add_pre(L->t, PRE_SPLIT_LITERAL);
        st->lit = xmalloc(plen + 1);
        memcpy(st->lit, pat, plen);
        st->lit[plen] = '\0';
        st->lit_len = plen;
        st->behavior = b;
        st->invert = invert;
        return 0;
    }
    if (strcmp(type, "ByteLevel") == 0) {
        *bytelevel = 1;
        int use_regex = get_flag(p, "use_regex", 1);
        int prefix = get_flag(p, "add_prefix_space", 1);
        if (!use_regex && !prefix)
            return 0; /* only the byte mapping, which BPE does on bytes anyway */
        tok_pre_step *st = add_pre(L->t, PRE_BYTELEVEL);
        st->add_prefix_space = prefix;
        if (use_regex) {
            st->re = tok_regex_compile(HF_GPT2_REGEX, strlen(HF_GPT2_REGEX), 0, L->err);
            if (!st->re)
                return -1;
        }
        return 0;
    }
    if (strcmp(type, "Digits") == 0) {
        const char *re = get_flag(p, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+";
        return add_regex_step(L, re, strlen(re), SPLIT_ISOLATED, 0);
    }
    if (strcmp(type, "Metaspace") == 0) {
        json_t *r = json_object_get(p, "replacement");
        tok_pre_step *st = add_pre(L->t, PRE_METASPACE);
        const char *rep = json_is_string(r) ? json_string_value(r) : "\xE2\x96\x81";
        st->lit_len = strlen(rep);
        st->lit = xstrdup(rep);
        const char *scheme = json_string_value(json_object_get(p, "prepend_scheme"));
        if (scheme)
            st->prepend_scheme = strcmp(scheme, "first") == 0   ? PREPEND_FIRST
                                 : strcmp(scheme, "never") == 0 ? PREPEND_NEVER
                                                                : PREPEND_ALWAYS;
        else
            st->prepend_scheme = get_flag(p, "add_prefix_space", 1) ? PREPEND_ALWAYS
                                                                     : PREPEND_NEVER;
        st->split = get_flag(p, "split", 1);
        return 0;
    }
    return memra_fail(L->err, "%s: pre_tokenizer type \"%s\" is not supported", L->path, type);
}

/* ---- decoder / post-processor: flags only ---- */

static void scan_decoder(tokenizer *t, const json_t *d, int *bytelevel)
{
    if (!d || json_is_null(d))
        return;
    if (is_type(d, "Sequence")) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(d, "decoders"), i, v) scan_decoder(t, v, bytelevel);
        return;
    }
    if (is_type(d, "ByteLevel"))
        *bytelevel = 1;
    if (is_type(d, "Strip")) {
        const char *c = json_string_value(json_object_get(d, "content"));
        json_t *start = json_object_get(d, "start");
        if (c && strcmp(c, " ") == 0 && json_integer_value(start) >= 1)
            t->strip_leading_space = 1;
    }
    if (is_type(d, "Metaspace")) {
        const char *scheme = json_string_value(json_object_get(d, "prepend_scheme"));
        if (scheme ? strcmp(scheme, "never") != 0 : get_flag(d, "add_prefix_space", 1))
            t->strip_leading_space = 1;
    }
}

static int32_t special_token_id(const json_t *tp, const char *name)
{
    json_t *st = json_object_get(json_object_get(tp, "special_tokens"), name);
    json_t *ids = json_object_get(st, "ids");
    if (json_array_size(ids) != 1 || !json_is_integer(json_array_get(ids, 0)))
        return -1;
    return (int32_t)json_integer_value(json_array_get(ids, 0));
}

/* TemplateProcessing: a special token before $A adds BOS, one after it EOS. */
static void scan_post(const json_t *pp, int32_t *bos, int32_t *eos)
{
    if (!pp || json_is_null(pp))
        return;
    if (is_type(pp, "Sequence")) {
        size_t i;
        json_t *v;
        json_array_foreach(json_object_get(pp, "processors"), i, v) scan_post(v, bos, eos);
        return;
    }
    if (is_type(pp, "RobertaProcessing") || is_type(pp, "BertProcessing")) {
        json_t *cls = json_object_get(pp, "cls"), *sep = json_object_get(pp, "sep");
        if (json_is_integer(json_array_get(cls, 1)))
            *bos = (int32_t)json_integer_value(json_array_get(cls, 1));
        if (json_is_integer(json_array_get(sep, 1)))
            *eos = (int32_t)json_integer_value(json_array_get(sep, 1));
        return;
    }
    if (!is_type(pp, "TemplateProcessing"))
        return;
    json_t *single = json_object_get(pp, "single");
    size_t n = json_array_size(single), i;
    int seen_seq = 0;
    for (i = 0; i < n; i++) {
        json_t *item = json_array_get(single, i);
        json_t *sp = json_object_get(item, "SpecialToken");
        if (json_object_get(item, "Sequence")) {
            seen_seq = 1;
            continue;
        }
        const char *name = json_string_value(json_object_get(sp, "id"));
        if (!name)
            continue;
        int32_t id = special_token_id(pp, name);
        if (!seen_seq && *bos < 0)
            *bos = id;
        else if (seen_seq)
            *eos = id;
    }
}

/* ---- tokenizer_config.json / generation_config.json ---- */

static const char *config_token(const json_t *tc, const char *key)
{
    json_t *v = json_object_get(tc, key);
    if (json_is_string(v))
        return json_string_value(v);
    return json_string_value(json_object_get(v, "content"));
}

/* Configs may hold integers past int64 (model_max_length of 1e30 written
 * out in full), which jansson only reads as reals. */
static json_t *load_config_json(const char *path, memra_err *err)
{
    char *buf;
    size_t len;
    if (read_small_file(path, 64u << 20, &buf, &len, err))
        return NULL;
    json_error_t je;
    json_t *root = json_loadb(buf, len, JSON_DECODE_INT_AS_REAL, &je);
    free(buf);
    if (!root) {
        memra_fail(err, "%s: invalid JSON at line %d column %d", path, je.line, je.column);
        return NULL;
    }
    if (!json_is_object(root)) {
        json_decref(root);
        memra_fail(err, "%s: not a JSON object", path);
        return NULL;
    }
    return root;
}

static const char *const eot_texts[] = {
    "<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "<|end_of_text|>",
};

/* ---- the model ---- */

/* model.vocab and model.merges from the jansson tree, when the fast
 * reader gave up (their strings live as long as the tree). */
static int big_from_json(loader *L, const json_t *model, tok_json_big *big)
{
    memset(big, 0, sizeof *big);
    arena_init(&big->mem, 1024);
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab) || !json_is_array(merges))
        return memra_fail(L->err, "%s: model needs a \"vocab\" object and a \"merges\" array",
                          L->path);
    big->vocab = xmalloc((json_object_size(vocab) + 1) * sizeof *big->vocab);
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v)
    {
        if (!json_is_integer(v))
            return memra_fail(L->err, "%s: model.vocab[\"%s\"] is not an id below 2^24", L->path,
                              key);
        tok_json_vocab_entry *e = &big->vocab[big->n_vocab++];
        e->s = key;
        e->len = strlen(key);
        e->id = json_integer_value(v);
    }
    big->merges = xmalloc((json_array_size(merges) + 1) * sizeof *big->merges);
    size_t i;
    json_array_foreach(merges, i, v)
    {
        tok_json_merge *m = &big->merges[big->n_merges];
        if (json_is_string(v)) {
            const char *s = json_string_value(v);
            size_t n = json_string_length(v);
            const char *sp = memchr(s, ' ', n);
            if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - s)))
                return memra_fail(L->err, "%s: model.merges[%zu] \"%s\" is not \"a b\"", L->path,
                                  i, s);
            m->a = s, m->la = (size_t)(sp - s), m->b = sp + 1, m->lb = n - m->la - 1;
        } else if (json_array_size(v) == 2 && json_is_string(json_array_get(v, 0)) &&
                   json_is_string(json_array_get(v, 1))) {
            m->a = json_string_value(json_array_get(v, 0));
            m->la = json_string_length(json_array_get(v, 0));
            m->b = json_string_value(json_array_get(v, 1));
            m->lb = json_string_length(json_array_get(v, 1));
        } else {
            return memra_fail(L->err, "%s: model.merges[%zu] is neither \"a b\" nor [a, b]",
                              L->path, i);
        }
        big->n_merges++;
    }
    return 0;
}

static int load_model(loader *L, const json_t *model, const json_t *added, int bytelevel,
                      const tok_json_big *big)
{
    tokenizer *t = L->t;
    if (!is_type(model, "BPE"))
        return memra_fail(L->err, "%s: model.type must be \"BPE\" (got \"%s\")", L->path,
                          json_string_value(json_object_get(model, "type"))
                              ? json_string_value(json_object_get(model, "type"))
                              : "(missing)");
    json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return memra_fail(L->err, "%s: model.dropout %g is not supported", L->path,
                          json_number_value(dropout));
    const char *keys[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        const char *s = json_string_value(json_object_get(model, keys[k]));
        if (s && *s)
            return memra_fail(L->err, "%s: model.%s \"%s\" is not supported", L->path, keys[k], s);
    }
    /* vocabulary size: every id of model.vocab and added_tokens */
    int64_t max_id = -1;
    for (size_t k = 0; k < big->n_vocab; k++) {
        const tok_json_vocab_entry *e = &big->vocab[k];
        if (e->id < 0 || e->id >= (1 << 24))
            return memra_fail(L->err, "%s: model.vocab[\"%.*s\"] is not an id below 2^24",
                              L->path, (int)e->len, e->s);
        if (e->id > max_id)
            max_id = e->id;
    }
    size_t i;
    json_t *v;
    json_array_foreach(added, i, v)
    {
        json_t *id = json_object_get(v, "id");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) >= (1 << 24) || !json_is_string(json_object_get(v, "content")))
            return memra_fail(L->err, "%s: added_tokens[%zu] needs an id below 2^24 and a content",
                              L->path, i);
        if (json_integer_value(id) > max_id)
            max_id = json_integer_value(id);
    }
    if (max_id < 0)
        return memra_fail(L->err, "%s: empty vocabulary", L->path);
    tok_alloc_vocab(t, (int32_t)max_id + 1);
    strmap_init(&t->map, (size_t)max_id + 1);
    for (int32_t k = 0; k < t->n_vocab; k++)
        t->tok[k].type = TOKT_UNUSED;
    for (size_t k = 0; k < big->n_vocab; k++) {
        const tok_json_vocab_entry *e = &big->vocab[k];
        int32_t id = (int32_t)e->id;
        if (t->tok[id].flags & TOKF_IN_MODEL)
            return memra_fail(L->err, "%s: model.vocab gives id %d to both \"%s\" and \"%.*s\"",
                              L->path, id, t->tok[id].text, (int)e->len, e->s);
        tok_set_text(t, id, e->s, e->len);
        t->tok[id].type = TOKT_NORMAL;
        t->tok[id].flags = TOKF_IN_MODEL;
        strmap_put(&t->map, t->tok[id].text, t->tok[id].len, id);
    }
    /* added tokens: matched before the split, in their own id order */
    t->added = xcalloc(json_array_size(added) + 1, sizeof *t->added);
    json_array_foreach(added, i, v)
    {
        int32_t id = (int32_t)json_integer_value(json_object_get(v, "id"));
        json_t *c = json_object_get(v, "content");
        tok_added *a = &t->added[t->n_added++];
        a->id = id;
        a->special = (uint8_t)get_flag(v, "special", 0);
        a->lstrip = (uint8_t)get_flag(v, "lstrip", 0);
        a->rstrip = (uint8_t)get_flag(v, "rstrip", 0);
        a->single_word = (uint8_t)get_flag(v, "single_word", 0);
        a->normalized = (uint8_t)get_flag(v, "normalized", !a->special);
        if (!(t->tok[id].flags & TOKF_IN_MODEL) || t->tok[id].len != json_string_length(c) ||
            memcmp(t->tok[id].text, json_string_value(c), t->tok[id].len) != 0) {
            if (t->tok[id].flags & TOKF_IN_MODEL)
                t->tok[id].flags &= (uint8_t)~TOKF_IN_MODEL;
            tok_set_text(t, id, json_string_value(c), json_string_length(c));
        }
        a->content = t->tok[id].text;
        a->len = t->tok[id].len;
        t->tok[id].type = a->special ? TOKT_CONTROL : TOKT_USER_DEFINED;
        t->tok[id].flags |= TOKF_ADDED | (a->special ? TOKF_CONTROL : 0);
        strmap_put(&t->map, t->tok[id].text, t->tok[id].len, id);
    }
    t->byte_fallback = get_flag(model, "byte_fallback", 0);
    t->fuse_unk = get_flag(model, "fuse_unk", 0);
    t->ignore_merges = get_flag(model, "ignore_merges", 0);
    t->kind = bytelevel ? TOK_BPE_BYTELEVEL : TOK_SPM;
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    if (unk) {
        t->unk = strmap_get(&t->map, unk, strlen(unk));
        if (t->unk < 0)
            return memra_fail(L->err, "%s: model.unk_token \"%s\" is not in the vocabulary",
                              L->path, unk);
        t->tok[t->unk].type = TOKT_UNKNOWN;
    }
    if (!bytelevel)
        for (int32_t k = 0; k < t->n_vocab; k++) {
            const char *s = t->tok[k].text;
            if ((t->tok[k].flags & TOKF_IN_MODEL) && t->tok[k].len == 6 &&
                memcmp(s, "<0x", 3) == 0 && s[5] == '>')
                t->tok[k].type = TOKT_BYTE;
        }
    /* merges by rank */
    tok_pairmap_init(&t->merges, big->n_merges);
    strbuf cat;
    sb_init(&cat);
    for (size_t k = 0; k < big->n_merges; k++) {
        const tok_json_merge *m = &big->merges[k];
        int32_t ia = strmap_get(&t->map, m->a, m->la), ib = strmap_get(&t->map, m->b, m->lb);
        sb_clear(&cat);
        sb_append(&cat, m->a, m->la);
        sb_append(&cat, m->b, m->lb);
        int32_t ic = strmap_get(&t->map, cat.data, cat.len);
        if (ia < 0 || ib < 0 || ic < 0) {
            memra_fail(L->err, "%s: model.merges[%zu] (\"%.*s\" \"%.*s\") names a token not in "
                       "the vocabulary", L->path, k, (int)m->la, m->a, (int)m->lb, m->b);
            sb_free(&cat);
            return -1;
        }
        tok_pairmap_put(&t->merges, ia, ib, (uint32_t)k, ic);
    }
    sb_free(&cat);
    return 0;
}

/* The added tokens' tries: normalized ones are matched in normalized text,
 * with their content normalized the same way. */
static int build_added_tries(loader *L)
{
    tokenizer *t = L->t;
    tok_trie_init(&t->added_raw);
    tok_trie_init(&t->added_norm);
    strbuf nb;
    sb_init(&nb);
    for (size_t k = 0; k < t->n_added; k++) {
        tok_added *a = &t->added[k];
        if (a->normalized && t->n_norm > 0) {
            if (tok_normalize(t, a->content, a->len, &nb, L->err)) {
                sb_free(&nb);
                return -1;
            }
            a->content = arena_strndup(&t->mem, nb.data, nb.len);
            a->len = nb.len;
            tok_trie_insert(&t->added_norm, a->content, a->len, (int32_t)k);
            t->has_added_norm = 1;
        } else if (a->normalized) {
            tok_trie_insert(&t->added_norm, a->content, a->len, (int32_t)k);
            t->has_added_norm = 1;
        } else {
            tok_trie_insert(&t->added_raw, a->content, a->len, (int32_t)k);
        }
    }
    sb_free(&nb);
    return 0;
}

static int read_configs(loader *L, const char *dir, int32_t pp_bos, int32_t pp_eos)
{
    tokenizer *t = L->t;
    char path[4096];
    json_t *tc = NULL, *gc = NULL;
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    if (access(path, F_OK) == 0 && !(tc = load_config_json(path, L->err)))
        return -1;
    int32_t *more = NULL;
    size_t n_more = 0;
    t->bos = t->eos = t->pad = -1;
    t->eot = t->eom = -1;
    t->add_bos = pp_bos >= 0;
    t->add_eos = pp_eos >= 0;
    t->bos = pp_bos;
    t->eos = pp_eos;
    if (tc) {
        static const char *const names[3] = {"bos_token", "eos_token", "pad_token"};
        int32_t *dst[3] = {&t->bos, &t->eos, &t->pad};
        for (int k = 0; k < 3; k++) {
            const char *s = config_token(tc, names[k]);
            if (!s)
                continue;
            int32_t id = strmap_get(&t->map, s, strlen(s));
            if (id < 0) {
                memra_fail(L->err, "%s: %s \"%s\" is not in the vocabulary", path, names[k], s);
                json_decref(tc);
                return -1;
            }
            *dst[k] = id;
        }
        json_t *ab = json_object_get(tc, "add_bos_token"), *ae = json_object_get(tc, "add_eos_token");
        if (json_is_boolean(ab))
            t->add_bos = json_is_true(ab);
        if (json_is_boolean(ae))
            t->add_eos = json_is_true(ae);
        if (pp_bos >= 0 && t->add_bos && !json_is_boolean(ab))
            t->bos = pp_bos;
        json_decref(tc);
    }
    if ((t->add_bos && t->bos < 0) || (t->add_eos && t->eos < 0))
        return memra_fail(L->err, "%s/tokenizer_config.json: add_%s_token is set but there is no "
                          "%s token", dir, t->add_bos && t->bos < 0 ? "bos" : "eos",
                          t->add_bos && t->bos < 0 ? "bos" : "eos");
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (access(path, F_OK) == 0) {
        if (!(gc = load_config_json(path, L->err)))
            return -1;
        json_t *e = json_object_get(gc, "eos_token_id");
        more = xmalloc((json_array_size(e) + 1) * sizeof *more);
        if (json_is_number(e)) {
            more[n_more++] = (int32_t)json_number_value(e);
        } else if (json_is_array(e)) {
            size_t i;
            json_t *v;
            json_array_foreach(e, i, v) if (json_is_number(v)) more[n_more++] =
                (int32_t)json_number_value(v);
        }
        json_decref(gc);
    }
    for (size_t k = 0; t->eot < 0 && k < sizeof eot_texts / sizeof eot_texts[0]; k++)
        t->eot = strmap_get(&t->map, eot_texts[k], strlen(eot_texts[k]));
    tok_build_stop_ids(t, more, n_more);
    free(more);
    return 0;
}

int tok_load_hf_dir(const char *dir, tokenizer **out, memra_err *err)
{
    *out = NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char *buf;
    size_t len;
    if (read_small_file(path, TOKENIZER_JSON_MAX, &buf, &len, err))
        return -1;
    tok_json_big big;
    int fast = tok_json_scan_model(buf, len, &big) == 0;
    json_t *root;
    if (fast) {
        char *copy = xmalloc(len + 1);
        size_t clen = tok_json_without_big(buf, len, &big, copy);
        root = json_parse_buf(copy, clen, path, err);
        free(copy);
    } else {
        root = json_parse_buf(buf, len, path, err);
    }
    if (root && !json_is_object(root)) {
        json_decref(root);
        root = NULL;
        memra_fail(err, "%s: not a JSON object", path);
    }
    if (!root) {
        if (fast)
            tok_json_big_free(&big);
        free(buf);
        return -1;
    }
    tokenizer *t = xcalloc(1, sizeof *t);
    arena_init(&t->mem, 1 << 20);
    t->flavor = TOK_FLAVOR_HF;
    t->source = xstrdup(path);
    t->multiline_regex = 1;
    t->unk = t->bos = t->eos = t->pad = t->eot = t->eom = -1;
    loader L = {t, t->source, err};
    int bytelevel = 0;
    int32_t pp_bos = -1, pp_eos = -1;
    json_t *added = json_object_get(root, "added_tokens");
    if (added && !json_is_array(added)) {
        memra_fail(err, "%s: added_tokens must be an array", path);
        goto fail;
    }
    scan_decoder(t, json_object_get(root, "decoder"), &bytelevel);
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) {
        memra_fail(err, "%s: missing \"model\"", path);
        goto fail;
    }
    if (!is_type(model, "BPE")) {
        const char *ty = json_string_value(json_object_get(model, "type"));
        memra_fail(err, "%s: model.type must be \"BPE\" (got \"%s\")", path,
                   ty ? ty : "(missing)");
        goto fail;
    }
    if (!fast && big_from_json(&L, model, &big))
        goto fail;
    if (load_pre(&L, json_object_get(root, "pre_tokenizer"), &bytelevel) ||
        load_normalizer(&L, json_object_get(root, "normalizer")) ||
        load_model(&L, model, added, bytelevel, &big) || build_added_tries(&L))
        goto fail;
    scan_post(json_object_get(root, "post_processor"), &pp_bos, &pp_eos);
    if (pp_bos >= t->n_vocab || pp_eos >= t->n_vocab) {
        memra_fail(err, "%s: post_processor names an id past the vocabulary", path);
        goto fail;
    }
    if (read_configs(&L, dir, pp_bos, pp_eos))
        goto fail;
    tok_build_byte_ids(t);
    tok_build_pieces(t);
    json_decref(root);
    tok_json_big_free(&big);
    free(buf);
    *out = t;
    return 0;
fail:
    json_decref(root);
    tok_json_big_free(&big);
    free(buf);
    tok_free(t);
    return -1;
}
