/* A tokenizer from GGUF tokenizer.* metadata, set up the way llama.cpp's
 * llama_vocab::load does: vocabulary and types, merges (gpt2) or scores
 * (llama), the pre-type regexes, special ids with llama.cpp's defaults,
 * add_bos/add_eos/add_space_prefix, tokens that look like end-of-turn or
 * fill-in-the-middle markers promoted to control, and the special-token
 * candidates ordered longest first. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tok/tok_internal.h"
#include "tok/tok_pre_names.h"

static const gguf_value *find_arr(const gguf_file *f, const char *key, gguf_vtype elem, int required,
                                  memra_err *err, int *fail)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        if (required) {
            memra_fail(err, "%s: missing %s", f->map.path, key);
            *fail = 1;
        }
        return NULL;
    }
    if (kv->value.type != GGUF_ARRAY || kv->value.v.arr.elem_type != elem) {
        memra_fail(err, "%s: %s is not an array of %s", f->map.path, key, gguf_vtype_name(elem));
        *fail = 1;
        return NULL;
    }
    return &kv->value;
}

/* An optional token-id key; out-of-range ids keep the default (llama.cpp
 * warns and does the same), 0xFFFFFFFF / -1 mean none. */
static void get_id(const gguf_file *f, const char *key, int32_t n_vocab, int32_t *id)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv)
        return;
    int64_t v;
    if (kv->value.type == GGUF_INT8 || kv->value.type == GGUF_INT16 ||
        kv->value.type == GGUF_INT32 || kv->value.type == GGUF_INT64)
        v = kv->value.v.i;
    else if (kv->value.type == GGUF_UINT8 || kv->value.type == GGUF_UINT16 ||
             kv->value.type == GGUF_UINT32 || kv->value.type == GGUF_UINT64)
        v = kv->value.v.u > INT32_MAX ? -1 : (int64_t)kv->value.v.u;
    else
        return;
    if (v == -1 || v == 0xFFFFFFFFll) {
        *id = -1;
        return;
    }
    if (v >= 0 && v < n_vocab)
        *id = (int32_t)v;
}

/* "[PAD<digits>]": the name convert_hf_to_gguf.py and memra-convert give
 * the embedding rows past the last real token (with the row's id, or a
 * count from 1 on the SentencePiece path). */
static int is_pad_text(const gguf_str *s)
{
    if (s->len < 6 || memcmp(s->str, "[PAD", 4) != 0 || s->str[s->len - 1] != ']')
        return 0;
    for (uint64_t i = 4; i + 1 < s->len; i++)
        if (s->str[i] < '0' || s->str[i] > '9')
            return 0;
    return 1;
}

static void get_bool(const gguf_file *f, const char *key, int *out)
{
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (kv && kv->value.type == GGUF_BOOL)
        *out = kv->value.v.u != 0;
}

/* The id of a merge part, giving strings the vocabulary lacks an id past
 * the vocabulary (llama.cpp merges strings, so such merges still apply). */
static int32_t part_id(tokenizer *t, strmap *extra_map, const char *s, size_t len)
{
    int32_t id = strmap_get(&t->map, s, len);
    if (id >= 0)
        return id;
    id = strmap_get(extra_map, s, len);
    if (id >= 0)
        return id;
    int32_t k = t->n_extra++;
    t->extra = xrealloc(t->extra, (size_t)t->n_extra * sizeof *t->extra);
    t->extra_len = xrealloc(t->extra_len, (size_t)t->n_extra * sizeof *t->extra_len);
    t->extra[k] = xmalloc(len + 1);
    memcpy(t->extra[k], s, len);
    t->extra[k][len] = '\0';
    t->extra_len[k] = (uint32_t)len;
    strmap_put(extra_map, t->extra[k], len, t->n_vocab + k);
    return t->n_vocab + k;
}

static int load_merges(tokenizer *t, const gguf_file *f, memra_err *err)
{
    int fail = 0;
    const gguf_value *m = find_arr(f, "tokenizer.ggml.merges", GGUF_STRING, 1, err, &fail);
    if (fail)
        return -1;
    const gguf_str *ms = m->v.arr.data;
    uint64_t n = m->v.arr.n;
    if (n > UINT32_MAX)
        return memra_fail(err, "%s: %llu merges", f->map.path, (unsigned long long)n);
    tok_pairmap_init(&t->merges, (size_t)n);
    strmap extra_map;
    strmap_init(&extra_map, 16);
    strbuf cat;
    sb_init(&cat);
    for (uint64_t i = 0; i < n; i++) {
        const char *s = ms[i].str;
        size_t len = (size_t)ms[i].len;
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp)
            continue; /* llama.cpp keys such a merge by empty strings: it never applies */
        size_t la = (size_t)(sp - s), lb = len - la - 1;
        int32_t a = part_id(t, &extra_map, s, la);
        int32_t b = part_id(t, &extra_map, sp + 1, lb);
        sb_clear(&cat);
        sb_append(&cat, s, la);
        sb_append(&cat, sp + 1, lb);
        int32_t r = part_id(t, &extra_map, cat.data, cat.len);
        tok_pairmap_put(&t->merges, a, b, (uint32_t)i, r);
    }
    sb_free(&cat);
    strmap_free(&extra_map);
    return 0;
}

static const char *const fim_texts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>", "\xE2\x96\x81<PRE>",
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>", "\xE2\x96\x81<SUF>",
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>", "\xE2\x96\x81<MID>",
    "<|fim_pad|>",    "<fim-pad>",    "<fim_pad>",    "<PAD>", "<|fim_repo|>",
    "<|repo_name|>",  "<fim-repo>",   "<REPO>",       "<reponame>", "<|file_sep|>",
};

/* The end-of-turn token when the file names none, by llama.cpp's texts. */
static const char *const eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]", "<end_of_utterance>",
};

static int len_desc(const void *a, const void *b, void *ctx)
{
    const tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (t->tok[x].len != t->tok[y].len)
        return t->tok[x].len > t->tok[y].len ? -1 : 1;
    return (x > y) - (x < y);
}

static void build_special_order(tokenizer *t)
{
    size_t n = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->tok[i].flags & TOKF_ADDED)
            n++;
    t->special_order = xmalloc((n ? n : 1) * sizeof *t->special_order);
    t->n_special_order = 0;
    for (int32_t i = 0; i < t->n_vocab; i++)
        if (t->tok[i].flags & TOKF_ADDED)
            t->special_order[t->n_special_order++] = i;
    qsort_r(t->special_order, t->n_special_order, sizeof *t->special_order, len_desc, t);
    tok_trie_init(&t->special_trie);
    for (size_t k = 0; k < t->n_special_order; k++) {
        const tok_token *tk = &t->tok[t->special_order[k]];
        tok_trie_insert(&t->special_trie, tk->text, tk->len, (int32_t)k);
    }
}

int tok_load_gguf(const gguf_file *f, tokenizer **out, memra_err *err)
{
    *out = NULL;
    const char *model = NULL, *pre = NULL;
    if (gguf_get_str(f, "tokenizer.ggml.model", &model, err))
        return memra_wrap(err, "%s: no tokenizer", f->map.path);
    tok_kind kind;
    /* "gemma4": SentencePiece-style pieces (U+2581 for spaces, <0xNN>
     * bytes) merged by rank as BPE, as llama.cpp reads it */
    int gemma4 = strcmp(model, "gemma4") == 0;
    if (strcmp(model, "gpt2") == 0)
        kind = TOK_BPE_BYTELEVEL;
    else if (strcmp(model, "llama") == 0 || gemma4)
        kind = TOK_SPM;
    else
        return memra_fail(err, "%s: tokenizer.ggml.model '%s' is not supported (gpt2, llama, "
                          "gemma4)", f->map.path, model);
    const gguf_kv *pkv = gguf_find_kv(f, "tokenizer.ggml.pre");
    if (pkv && pkv->value.type == GGUF_STRING)
        pre = pkv->value.v.s.str;
    const hf_pre_type *pt = NULL;
    if (kind == TOK_BPE_BYTELEVEL) {
        pt = tok_pre_for_gguf(pre);
        if (!pt)
            return memra_fail(err, "%s: tokenizer.ggml.pre '%s' is not a known pre-tokenizer",
                              f->map.path, pre);
    }
    int fail = 0;
    const gguf_value *toks = find_arr(f, "tokenizer.ggml.tokens", GGUF_STRING, 1, err, &fail);
    if (fail)
        return -1;
    if (toks->v.arr.n == 0 || toks->v.arr.n > INT32_MAX / 2)
        return memra_fail(err, "%s: tokenizer.ggml.tokens has %llu entries", f->map.path,
                          (unsigned long long)toks->v.arr.n);
    int32_t n = (int32_t)toks->v.arr.n;
    const gguf_value *types = find_arr(f, "tokenizer.ggml.token_type", GGUF_INT32, 0, err, &fail);
    if (fail)
        return -1;
    const gguf_kv *skv = gguf_find_kv(f, "tokenizer.ggml.scores");
    const float *fscores = NULL;
    const int32_t *iscores = NULL;
    if (skv) {
        if (skv->value.type != GGUF_ARRAY ||
            (skv->value.v.arr.elem_type != GGUF_FLOAT32 && skv->value.v.arr.elem_type != GGUF_INT32))
            return memra_fail(err, "%s: tokenizer.ggml.scores is not an array of float32 or int32",
                              f->map.path);
        if (skv->value.v.arr.n < (uint64_t)n)
            return memra_fail(err, "%s: tokenizer.ggml.scores has %llu entries for %d tokens",
                              f->map.path, (unsigned long long)skv->value.v.arr.n, n);
        if (skv->value.v.arr.elem_type == GGUF_FLOAT32)
            fscores = skv->value.v.arr.data;
        else
            iscores = skv->value.v.arr.data;
    }
    if (types && types->v.arr.n < (uint64_t)n)
        return memra_fail(err, "%s: tokenizer.ggml.token_type has %llu entries for %d tokens",
                          f->map.path, (unsigned long long)types->v.arr.n, n);
    const gguf_str *ts = toks->v.arr.data;
    const int32_t *ty = types ? types->v.arr.data : NULL;
    /* The trailing run of unused [PAD<n>] tokens pads the list to the
     * embedding's rows, so that llama.cpp loads the file; they are not
     * part of the vocabulary: left out, tok_vocab_size is the real count
     * and generation bans the rows past it (those ids have no text). */
    while (n > 1 && ty && ty[n - 1] == TOKT_UNUSED && is_pad_text(&ts[n - 1]))
        n--;

    tokenizer *t = xcalloc(1, sizeof *t);
    arena_init(&t->mem, 1 << 20);
    t->kind = kind;
    t->flavor = TOK_FLAVOR_GGUF;
    t->source = xstrdup(f->map.path ? f->map.path : "(gguf)");
    tok_alloc_vocab(t, n);
    strmap_init(&t->map, (size_t)n);
    for (int32_t i = 0; i < n; i++) {
        if (ts[i].len == 0) {
            char buf[32];
            int l = snprintf(buf, sizeof buf, "[EMPTY_%d]", i);
            tok_set_text(t, i, buf, (size_t)l);
        } else {
            tok_set_text(t, i, ts[i].str, (size_t)ts[i].len);
        }
        if (strmap_put(&t->map, t->tok[i].text, t->tok[i].len, i) != i) {
            memra_fail(err, "%s: duplicate token '%s' has ids %d and %d", f->map.path,
                       t->tok[i].text, strmap_get(&t->map, t->tok[i].text, t->tok[i].len), i);
            tok_free(t);
            return -1;
        }
        t->tok[i].score = fscores ? fscores[i] : iscores ? (float)iscores[i] : 0.0f;
        int type = ty ? ty[i] : TOKT_NORMAL;
        t->tok[i].type = (uint8_t)(type >= TOKT_NORMAL && type <= TOKT_BYTE ? type : 0);
        t->tok[i].flags = TOKF_IN_MODEL;
        if (type == TOKT_CONTROL || type == TOKT_UNKNOWN)
            t->tok[i].flags |= TOKF_CONTROL | TOKF_ADDED;
        if (type == TOKT_USER_DEFINED)
            t->tok[i].flags |= TOKF_ADDED;
    }

    /* special ids and flags, with llama.cpp's defaults per model type */
    t->bos = t->eos = t->unk = t->pad = t->eot = t->eom = -1;
    if (gemma4) {
        t->add_bos = 1;
        t->byte_fallback = 1;
        t->newline_words = 1;
    } else if (kind == TOK_SPM) {
        t->bos = 1 < n ? 1 : -1;
        t->eos = 2 < n ? 2 : -1;
        t->unk = 0;
        t->add_bos = 1;
        t->add_space_prefix = 1;
        t->spm_scores = 1;
    } else {
        t->add_bos = tok_pre_adds_bos(pre);
        t->ignore_merges = pt->ignore_merges;
    }
    get_id(f, "tokenizer.ggml.bos_token_id", n, &t->bos);
    get_id(f, "tokenizer.ggml.eos_token_id", n, &t->eos);
    get_id(f, "tokenizer.ggml.eot_token_id", n, &t->eot);
    get_id(f, "tokenizer.ggml.eom_token_id", n, &t->eom);
    get_id(f, "tokenizer.ggml.unknown_token_id", n, &t->unk);
    get_id(f, "tokenizer.ggml.padding_token_id", n, &t->pad);
    get_bool(f, "tokenizer.ggml.add_bos_token", &t->add_bos);
    get_bool(f, "tokenizer.ggml.add_eos_token", &t->add_eos);
    get_bool(f, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
    if (gemma4) {
        /* llama.cpp adds BOS to Gemma 4 prompts whatever the file says, and
         * its BPE path never prepends a space */
        t->add_bos = 1;
        t->add_space_prefix = 0;
    }
    if (t->add_bos && t->bos < 0) {
        memra_fail(err, "%s: tokenizer.ggml.add_bos_token is true but there is no BOS token",
                   f->map.path);
        tok_free(t);
        return -1;
    }
    if (t->add_eos && t->eos < 0) {
        memra_fail(err, "%s: tokenizer.ggml.add_eos_token is true but there is no EOS token",
                   f->map.path);
        tok_free(t);
        return -1;
    }
    t->strip_leading_space = kind == TOK_SPM && t->add_space_prefix;

    /* end-of-turn, end-of-generation and fim texts are control tokens */
    for (int32_t i = 0; i < n; i++) {
        const char *txt = t->tok[i].text;
        int promote = tok_text_is_eog(txt);
        for (size_t k = 0; !promote && k < sizeof fim_texts / sizeof fim_texts[0]; k++)
            promote = strcmp(txt, fim_texts[k]) == 0;
        if (promote)
            t->tok[i].flags |= TOKF_CONTROL | TOKF_ADDED;
    }
    if (t->eot < 0)
        for (size_t k = 0; t->eot < 0 && k < sizeof eot_texts / sizeof eot_texts[0]; k++)
            t->eot = strmap_get(&t->map, eot_texts[k], strlen(eot_texts[k]));

    if (gemma4) {
        static const char newline_runs[] = "[^\\n]+|[\\n]+";
        if (load_merges(t, f, err)) {
            tok_free(t);
            return -1;
        }
        t->n_pre = 1;
        t->pre = xcalloc(1, sizeof *t->pre);
        t->pre[0].type = PRE_SPLIT_REGEX;
        t->pre[0].behavior = SPLIT_ISOLATED;
        t->pre[0].re = tok_regex_compile(newline_runs, strlen(newline_runs), 0, err);
        if (!t->pre[0].re) {
            tok_free(t);
            return -1;
        }
    } else if (kind == TOK_BPE_BYTELEVEL) {
        if (load_merges(t, f, err)) {
            tok_free(t);
            return -1;
        }
        t->n_pre = (size_t)pt->n_regex;
        t->pre = xcalloc(t->n_pre, sizeof *t->pre);
        for (size_t k = 0; k < t->n_pre; k++) {
            t->pre[k].type = PRE_SPLIT_REGEX;
            t->pre[k].behavior = SPLIT_ISOLATED;
            t->pre[k].re = tok_regex_compile(pt->regex[k], strlen(pt->regex[k]), 0, err);
            if (!t->pre[k].re) {
                memra_wrap(err, "%s: tokenizer.ggml.pre '%s'", f->map.path, pre ? pre : "default");
                tok_free(t);
                return -1;
            }
        }
    }
    build_special_order(t);
    tok_build_byte_ids(t);
    tok_build_pieces(t);
    tok_build_stop_ids(t, NULL, 0);
    *out = t;
    return 0;
}
