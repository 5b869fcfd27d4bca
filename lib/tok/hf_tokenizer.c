/* Hugging Face tokenizer directory -> GGUF tokenizer.* keys (see
 * hf_tokenizer.h for the mapping). Mirrors convert_hf_to_gguf.py's
 * get_vocab_base / _set_vocab_gpt2 / LlamaHfVocab paths and gguf-py's
 * SpecialVocab, reading the JSON directly instead of through transformers. */
#include "tok/hf_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/arena.h"
#include "core/check.h"
#include "core/json.h"
#include "core/log.h"
#include "core/mapfile.h"
#include "core/strbuf.h"
#include "tok/hf_tokenizer_internal.h"

#define HF_JSON_MAX (512u << 20)
#define HF_MAX_VOCAB (1 << 22) /* ids; the largest real vocabularies hold ~262k */

enum { KIND_GPT2, KIND_LLAMA };

typedef struct {
    const char *text; /* into the JSON or the arena; NUL-terminated */
    size_t len;
    int in_vocab, added, special;
    int type;
    float score;
} tok_entry;

/* The special token kinds of gguf-py's SpecialVocab, with their GGUF keys
 * (NULL: read for fallbacks but never written, as gguf-py has no key). */
enum { SP_BOS, SP_EOS, SP_UNK, SP_SEP, SP_PAD, SP_CLS, SP_MASK, SP_EOT, SP_COUNT };
static const char *const sp_names[SP_COUNT] = {"bos", "eos", "unk", "sep",
                                               "pad", "cls", "mask", "eot"};
static const char *const sp_keys[SP_COUNT] = {
    "tokenizer.ggml.bos_token_id",       "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.unknown_token_id",   "tokenizer.ggml.seperator_token_id",
    "tokenizer.ggml.padding_token_id",   NULL,
    "tokenizer.ggml.mask_token_id",      "tokenizer.ggml.eot_token_id"};

typedef struct {
    const char *dir;
    int64_t rows; /* the model's embedding rows; -1: config.json's vocab_size */
    arena mem;
    char *tj_path, *tc_path;
    json_t *tj, *tc, *cfg, *gen;
    json_t *model;
    int kind;
    tok_entry *tok;
    size_t n;
    strmap vocab_map; /* model.vocab text -> id */
    strmap added_map; /* added token content -> first id */
    char **merges;    /* as written to GGUF ("a b") */
    const char **merge_a, **merge_b; /* the two halves, for score derivation */
    size_t *merge_alen, *merge_blen;
    size_t n_merges;
    const char *sp_content[SP_COUNT];
    int64_t sp_id[SP_COUNT];
    int add_flag[3]; /* bos, eos, sep: -1 unset, 0, 1 */
    json_t *chat; /* string, list of {name, template}, or NULL */
} conv;

static char *path_in(conv *c, const char *name)
{
    size_t n = strlen(c->dir) + strlen(name) + 2;
    char *p = arena_alloc(&c->mem, n);
    snprintf(p, n, "%s/%s", c->dir, name);
    return p;
}

int hf_file_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

int hf_json_optional(const char *path, size_t max, json_t **out, memra_err *err)
{
    *out = NULL;
    if (!hf_file_exists(path))
        return 0;
    json_t *j = json_load_path(path, max, err);
    if (!j)
        return -1;
    if (!json_is_object(j)) {
        json_decref(j);
        return memra_fail(err, "%s: top level is not a JSON object", path);
    }
    *out = j;
    return 0;
}

/* ---- vocabulary ---- */

static int has_nul(const char *s, size_t len)
{
    return memchr(s, 0, len) != NULL;
}

static int read_vocab(conv *c, memra_err *err)
{
    json_t *vocab = json_object_get(c->model, "vocab");
    if (!json_is_object(vocab))
        return memra_fail(err, "%s: model.vocab must be an object of token -> id", c->tj_path);
    json_t *added = json_object_get(c->tj, "added_tokens");
    if (added && !json_is_null(added) && !json_is_array(added))
        return memra_fail(err, "%s: added_tokens must be an array", c->tj_path);

    int64_t max_id = -1;
    const char *key;
    size_t klen;
    json_t *v;
    json_object_keylen_foreach(vocab, key, klen, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= HF_MAX_VOCAB)
            return memra_fail(err, "%s: model.vocab[\"%.*s\"]: id must be an integer in [0, %d)",
                              c->tj_path, (int)klen, key, HF_MAX_VOCAB);
        if (json_integer_value(v) > max_id)
            max_id = json_integer_value(v);
    }
    size_t n_added = added ? json_array_size(added) : 0;
    for (size_t i = 0; i < n_added; i++) {
        json_t *a = json_array_get(added, i);
        json_t *id = json_object_get(a, "id");
        json_t *content = json_object_get(a, "content");
        if (!json_is_object(a) || !json_is_integer(id) || !json_is_string(content))
            return memra_fail(err, "%s: added_tokens[%zu] needs an integer \"id\" and a string "
                                   "\"content\"", c->tj_path, i);
        if (json_integer_value(id) < 0 || json_integer_value(id) >= HF_MAX_VOCAB)
            return memra_fail(err, "%s: added_tokens[%zu]: id %lld out of range", c->tj_path, i,
                              (long long)json_integer_value(id));
        json_t *sp = json_object_get(a, "special");
        if (sp && !json_is_boolean(sp))
            return memra_fail(err, "%s: added_tokens[%zu]: \"special\" must be true or false",
                              c->tj_path, i);
        if (json_integer_value(id) > max_id)
            max_id = json_integer_value(id);
    }

    size_t n = (size_t)(max_id + 1);
    if (n > json_object_size(vocab) + n_added) {
        /* A gap for sure: name the first missing id before allocating
         * anything the size of the (bogus) largest id. */
        unsigned char *seen = xcalloc(n, 1);
        json_object_keylen_foreach(vocab, key, klen, v) seen[json_integer_value(v)] = 1;
        for (size_t i = 0; i < n_added; i++)
            seen[json_integer_value(json_object_get(json_array_get(added, i), "id"))] = 1;
        size_t first = 0;
        while (seen[first])
            first++;
        free(seen);
        return memra_fail(err, "%s: no token has id %zu (ids must be contiguous from 0 to %zu)",
                          c->tj_path, first, n - 1);
    }
    /* The embedding rows past the last token (Qwen pads to a multiple of
     * 128) become [PAD<id>] tokens, as convert_hf_to_gguf.py writes them:
     * llama.cpp sizes token_embd and output from the token count and
     * refuses a file whose rows differ. The rows are the model's when the
     * caller knows them (a tokenizer dir given beside a checkpoint or a
     * random config need not hold a config.json, or may hold another
     * model's), else config.json's vocab_size. */
    int64_t vocab_size = -1;
    if (c->rows >= 0) {
        if ((size_t)c->rows < n)
            return memra_fail(err, "%s: the tokenizer has %zu tokens but the model's embedding "
                                   "has %lld rows (GGUF readers need a row for every token)",
                              c->dir, n, (long long)c->rows);
        if (c->rows > HF_MAX_VOCAB)
            return memra_fail(err, "%s: the model's %lld embedding rows are too many for a "
                                   "tokenizer", c->dir, (long long)c->rows);
        vocab_size = c->rows;
    } else if (c->cfg) {
        json_t *holder = c->cfg;
        if (!json_object_get(holder, "vocab_size") && json_is_object(json_object_get(c->cfg, "text_config")))
            holder = json_object_get(c->cfg, "text_config");
        if (json_get_int(holder, "vocab_size", 0, &vocab_size, "config.json", err))
            return memra_wrap(err, "%s", c->dir);
        if (vocab_size >= 0 && (size_t)vocab_size < n)
            return memra_fail(err, "%s/config.json: vocab_size %lld is smaller than the "
                                   "tokenizer's %zu tokens", c->dir, (long long)vocab_size, n);
        if (vocab_size > HF_MAX_VOCAB)
            return memra_fail(err, "%s/config.json: vocab_size %lld too large", c->dir,
                              (long long)vocab_size);
    }
    size_t n_total = vocab_size > (int64_t)n ? (size_t)vocab_size : n;
    if (n_total == 0)
        return memra_fail(err, "%s: model.vocab is empty", c->tj_path);

    c->tok = xcalloc(n_total, sizeof *c->tok);
    c->n = n_total;
    strmap_init(&c->vocab_map, n);
    strmap_init(&c->added_map, n_added + 1);

    json_object_keylen_foreach(vocab, key, klen, v)
    {
        size_t id = (size_t)json_integer_value(v);
        if (has_nul(key, klen))
            return memra_fail(err, "%s: model.vocab: token with id %zu contains a NUL byte",
                              c->tj_path, id);
        if (c->tok[id].text)
            return memra_fail(err, "%s: model.vocab: id %zu is given to both \"%s\" and \"%s\"",
                              c->tj_path, id, c->tok[id].text, key);
        c->tok[id].text = key;
        c->tok[id].len = klen;
        c->tok[id].in_vocab = 1;
        strmap_put(&c->vocab_map, key, klen, (int32_t)id);
    }
    for (size_t i = 0; i < n_added; i++) {
        json_t *a = json_array_get(added, i);
        size_t id = (size_t)json_integer_value(json_object_get(a, "id"));
        json_t *content = json_object_get(a, "content");
        const char *text = json_string_value(content);
        size_t len = json_string_length(content);
        if (has_nul(text, len))
            return memra_fail(err, "%s: added_tokens[%zu] (id %zu) contains a NUL byte",
                              c->tj_path, i, id);
        tok_entry *t = &c->tok[id];
        if (t->added)
            return memra_fail(err, "%s: added_tokens[%zu]: id %zu clashes with added token "
                                   "\"%s\"", c->tj_path, i, id, t->text);
        if (t->text && (t->len != len || memcmp(t->text, text, len) != 0))
            return memra_fail(err, "%s: added_tokens[%zu]: \"%s\" has id %zu, which model.vocab "
                                   "gives to \"%s\"", c->tj_path, i, text, id, t->text);
        int32_t vid = strmap_get(&c->vocab_map, text, len);
        if (vid >= 0 && (size_t)vid != id)
            return memra_fail(err, "%s: added_tokens[%zu]: \"%s\" has id %zu but model.vocab "
                                   "has it at id %d", c->tj_path, i, text, id, vid);
        int32_t prev = strmap_put(&c->added_map, text, len, (int32_t)id);
        if (prev != (int32_t)id)
            return memra_fail(err, "%s: added_tokens[%zu]: \"%s\" is already added with id %d",
                              c->tj_path, i, text, prev);
        t->text = text;
        t->len = len;
        t->added = 1;
        t->special = json_is_true(json_object_get(a, "special"));
    }
    for (size_t id = 0; id < n; id++)
        if (!c->tok[id].text)
            return memra_fail(err, "%s: no token has id %zu (ids must be contiguous from 0 to "
                                   "%zu)", c->tj_path, id, n - 1);
    for (size_t id = n; id < n_total; id++) {
        char buf[32];
        int k = snprintf(buf, sizeof buf, "[PAD%zu]", id);
        c->tok[id].text = arena_strndup(&c->mem, buf, (size_t)k);
        c->tok[id].len = (size_t)k;
        c->tok[id].type = HFT_UNUSED;
        c->tok[id].score = HFT_ADDED_SCORE;
    }
    return 0;
}

/* ---- merges ---- */

/* Spaces inside a part of a ["a", "b"] merge become U+0120, as gguf-py
 * writes them (the "a b" string form cannot hold a space). */
static void append_part(strbuf *sb, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (s[i] == ' ')
            sb_append(sb, "\xc4\xa0", 2);
        else
            sb_putc(sb, s[i]);
    }
}

static int read_merges(conv *c, memra_err *err)
{
    json_t *merges = json_object_get(c->model, "merges");
    if (!merges || json_is_null(merges)) {
        c->n_merges = 0;
        return 0;
    }
    if (!json_is_array(merges))
        return memra_fail(err, "%s: model.merges must be an array", c->tj_path);
    size_t n = json_array_size(merges);
    c->n_merges = n;
    c->merges = arena_alloc(&c->mem, (n + 1) * sizeof *c->merges);
    c->merge_a = arena_alloc(&c->mem, (n + 1) * sizeof *c->merge_a);
    c->merge_b = arena_alloc(&c->mem, (n + 1) * sizeof *c->merge_b);
    c->merge_alen = arena_alloc(&c->mem, (n + 1) * sizeof *c->merge_alen);
    c->merge_blen = arena_alloc(&c->mem, (n + 1) * sizeof *c->merge_blen);
    strbuf sb;
    sb_init(&sb);
    for (size_t i = 0; i < n; i++) {
        json_t *m = json_array_get(merges, i);
        const char *a, *b;
        size_t alen, blen;
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            size_t len = json_string_length(m);
            /* llama.cpp splits at the first space after the first byte. */
            const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
            if (!sp || has_nul(s, len)) {
                sb_free(&sb);
                return memra_fail(err, "%s: model.merges[%zu] \"%s\" is not two tokens separated "
                                       "by a space", c->tj_path, i, s);
            }
            a = s;
            alen = (size_t)(sp - s);
            b = sp + 1;
            blen = len - alen - 1;
            c->merges[i] = arena_strndup(&c->mem, s, len);
        } else if (json_is_array(m) && json_array_size(m) == 2 &&
                   json_is_string(json_array_get(m, 0)) && json_is_string(json_array_get(m, 1))) {
            json_t *ja = json_array_get(m, 0), *jb = json_array_get(m, 1);
            a = json_string_value(ja);
            alen = json_string_length(ja);
            b = json_string_value(jb);
            blen = json_string_length(jb);
            if (!alen || !blen || has_nul(a, alen) || has_nul(b, blen)) {
                sb_free(&sb);
                return memra_fail(err, "%s: model.merges[%zu]: parts must be non-empty strings "
                                       "without NUL bytes", c->tj_path, i);
            }
            sb_clear(&sb);
            append_part(&sb, a, alen);
            sb_putc(&sb, ' ');
            append_part(&sb, b, blen);
            c->merges[i] = arena_strndup(&c->mem, sb.data, sb.len);
        } else {
            sb_free(&sb);
            return memra_fail(err, "%s: model.merges[%zu] must be a string \"a b\" or a "
                                   "2-element array [\"a\", \"b\"]", c->tj_path, i);
        }
        c->merge_a[i] = a;
        c->merge_alen[i] = alen;
        c->merge_b[i] = b;
        c->merge_blen[i] = blen;
    }
    sb_free(&sb);
    return 0;
}

/* ---- token types and scores ---- */

static int starts_with(const tok_entry *t, const char *p)
{
    size_t n = strlen(p);
    return t->len >= n && memcmp(t->text, p, n) == 0;
}

static int ends_with(const tok_entry *t, const char *p)
{
    size_t n = strlen(p);
    return t->len >= n && memcmp(t->text + t->len - n, p, n) == 0;
}

/* convert_hf_to_gguf's does_token_look_special: added tokens some models
 * forget to mark special. */
static int looks_special(const tok_entry *t)
{
    static const char *const exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(exact); i++)
        if (t->len == strlen(exact[i]) && memcmp(t->text, exact[i], t->len) == 0)
            return 1;
    if (starts_with(t, "<|") && ends_with(t, "|>"))
        return 1;
    if (starts_with(t, "<\xef\xbd\x9c") && ends_with(t, "\xef\xbd\x9c>")) /* <｜ ... ｜> */
        return 1;
    return starts_with(t, "<unused") && ends_with(t, ">");
}

static int is_byte_token(const tok_entry *t)
{
    static const char hex[] = "0123456789abcdefABCDEF";
    return t->len == 6 && memcmp(t->text, "<0x", 3) == 0 && t->text[5] == '>' &&
           t->text[3] && strchr(hex, t->text[3]) && t->text[4] && strchr(hex, t->text[4]);
}

/* User-defined tokens are matched on raw text by llama.cpp, so convert
 * writes the SentencePiece space (U+2581) as a plain space. */
static void predecode_spaces(conv *c, tok_entry *t)
{
    if (!memmem(t->text, t->len, "\xe2\x96\x81", 3))
        return;
    strbuf sb;
    sb_init(&sb);
    for (size_t i = 0; i < t->len;) {
        if (i + 3 <= t->len && memcmp(t->text + i, "\xe2\x96\x81", 3) == 0) {
            sb_putc(&sb, ' ');
            i += 3;
        } else {
            sb_putc(&sb, t->text[i++]);
        }
    }
    t->text = arena_strndup(&c->mem, sb.data, sb.len);
    t->len = sb.len;
    sb_free(&sb);
}

static void assign_types(conv *c)
{
    const char *unk = NULL;
    if (c->kind == KIND_LLAMA)
        json_get_str(c->model, "unk_token", 0, &unk, "", NULL);
    for (size_t i = 0; i < c->n; i++) {
        tok_entry *t = &c->tok[i];
        if (t->type == HFT_UNUSED)
            continue;
        if (unk && t->len == strlen(unk) && memcmp(t->text, unk, t->len) == 0)
            t->type = HFT_UNKNOWN;
        else if (c->kind == KIND_LLAMA && is_byte_token(t))
            t->type = HFT_BYTE;
        else if (t->added && (t->special || looks_special(t)))
            t->type = HFT_CONTROL;
        else if (t->added) {
            t->type = HFT_USER_DEFINED;
            predecode_spaces(c, t);
        } else
            t->type = HFT_NORMAL;
    }
}

/* Scores for a SentencePiece-style vocabulary. llama.cpp merges the adjacent
 * pair whose joined text is the highest-scoring token, so a normal token's
 * score is minus the rank of the first merge that produces it: the same
 * order the BPE merges apply in. A tokenizer.model, when present, is the
 * original source of the scores and wins where its pieces agree. */
static int assign_scores(conv *c, memra_err *err)
{
    float no_merge = -(float)(c->n_merges + 1);
    for (size_t i = 0; i < c->n; i++) {
        tok_entry *t = &c->tok[i];
        switch (t->type) {
        case HFT_NORMAL:
            t->score = no_merge;
            break;
        case HFT_USER_DEFINED:
        case HFT_UNUSED:
            t->score = HFT_ADDED_SCORE;
            break;
        default:
            t->score = 0.0f;
        }
    }
    strbuf sb;
    sb_init(&sb);
    for (size_t m = c->n_merges; m-- > 0;) {
        sb_clear(&sb);
        sb_append(&sb, c->merge_a[m], c->merge_alen[m]);
        sb_append(&sb, c->merge_b[m], c->merge_blen[m]);
        int32_t id = strmap_get(&c->vocab_map, sb.data, sb.len);
        if (id >= 0 && c->tok[id].type == HFT_NORMAL)
            c->tok[id].score = -(float)(m + 1);
    }
    sb_free(&sb);

    char *spm_path = path_in(c, "tokenizer.model");
    if (!hf_file_exists(spm_path))
        return 0;
    spm_model spm;
    if (spm_model_read(spm_path, &spm, err))
        return -1;
    size_t mismatched = 0, first_bad = 0;
    for (size_t i = 0; i < spm.n && i < c->n; i++) {
        tok_entry *t = &c->tok[i];
        const spm_piece *p = &spm.pieces[i];
        if (p->len != t->len || memcmp(p->piece, t->text, t->len) != 0) {
            if (!mismatched++)
                first_bad = i;
            continue;
        }
        t->score = p->score;
        if (p->type == HFT_UNUSED)
            t->type = HFT_UNUSED;
    }
    if (mismatched)
        log_warn("%s: %zu pieces differ from tokenizer.json (first at id %zu); their scores "
                 "come from the merges", spm_path, mismatched, first_bad);
    spm_model_free(&spm);
    return 0;
}

/* ---- tokenizer kind and pre-tokenizer ---- */

static int has_type(const json_t *node, const char *type)
{
    const char *t = json_string_value(json_object_get(node, "type"));
    return t && strcmp(t, type) == 0;
}

/* Whether a ByteLevel pre-tokenizer sits in `node` (itself or in a
 * Sequence). */
static int has_bytelevel(const json_t *node)
{
    if (!json_is_object(node))
        return 0;
    if (has_type(node, "ByteLevel"))
        return 1;
    json_t *list = json_object_get(node, "pretokenizers");
    if (!list)
        list = json_object_get(node, "decoders");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) if (has_bytelevel(e)) return 1;
    return 0;
}

/* Whether a SentencePiece-style tokenizer prepends U+2581 to the text:
 * a Prepend normalizer, or a Metaspace pre-tokenizer that adds the prefix.
 * llama.cpp assumes it does (add_space_prefix) unless told otherwise. */
static int has_prepend(const json_t *node)
{
    if (!json_is_object(node))
        return 0;
    if (has_type(node, "Prepend")) {
        const char *p = json_string_value(json_object_get(node, "prepend"));
        return p && !strcmp(p, "\xe2\x96\x81");
    }
    if (has_type(node, "Metaspace")) {
        const char *scheme = json_string_value(json_object_get(node, "prepend_scheme"));
        if (scheme)
            return strcmp(scheme, "never") != 0;
        json_t *add = json_object_get(node, "add_prefix_space");
        return !add || json_is_true(add);
    }
    json_t *list = json_object_get(node, "normalizers");
    if (!list)
        list = json_object_get(node, "pretokenizers");
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) if (has_prepend(e)) return 1;
    return 0;
}

#define MAX_PRE_REGEX 8

/* Collect the regexes a pre_tokenizer applies, in order. Returns 0, or -1
 * when it holds something the table cannot express (then the type is
 * unknown, not an error). */
static int collect_regexes(const json_t *node, const char **out, int *n)
{
    if (!node || json_is_null(node))
        return 0;
    if (has_type(node, "Sequence")) {
        size_t i;
        json_t *e;
        json_t *list = json_object_get(node, "pretokenizers");
        if (!json_is_array(list))
            return -1;
        json_array_foreach(list, i, e) if (collect_regexes(e, out, n)) return -1;
        return 0;
    }
    if (*n >= MAX_PRE_REGEX)
        return -1;
    if (has_type(node, "Split")) {
        json_t *pat = json_object_get(node, "pattern");
        const char *re = json_string_value(json_object_get(pat, "Regex"));
        const char *behavior = json_string_value(json_object_get(node, "behavior"));
        if (!re || json_is_true(json_object_get(node, "invert")) ||
            (behavior && strcmp(behavior, "Isolated") != 0))
            return -1;
        out[(*n)++] = re;
        return 0;
    }
    if (has_type(node, "ByteLevel")) {
        json_t *use = json_object_get(node, "use_regex");
        if (!use || json_is_true(use))
            out[(*n)++] = HF_GPT2_REGEX;
        return 0;
    }
    if (has_type(node, "Digits")) {
        out[(*n)++] = json_is_true(json_object_get(node, "individual_digits")) ? "\\p{N}"
                                                                               : "\\p{N}+";
        return 0;
    }
    return -1;
}

static const char *detect_pre(conv *c)
{
    json_t *pre = json_object_get(c->tj, "pre_tokenizer");
    const char *re[MAX_PRE_REGEX];
    int n = 0;
    if (collect_regexes(pre, re, &n) == 0) {
        const hf_pre_type *t = hf_pre_match(re, n);
        if (t)
            return t->name;
    }
    log_warn("%s: pre-tokenizer matches no known llama.cpp type; writing tokenizer.ggml.pre "
             "\"default\" (tokenization may differ)", c->tj_path);
    return "default";
}

/* The first normalizer in `node` that rewrites text beyond what GGUF can
 * say (a Prepend or Replace of the SentencePiece space is add_space_prefix
 * and the U+2581 escape; NFC is left out because llama.cpp's converter drops
 * it too and it changes only text that is not already composed), or NULL. */
static const char *lost_normalizer(const json_t *node)
{
    if (!json_is_object(node))
        return NULL;
    const char *type = json_string_value(json_object_get(node, "type"));
    if (!type)
        return NULL;
    if (strcmp(type, "Sequence") == 0) {
        size_t i;
        json_t *e;
        json_array_foreach(json_object_get(node, "normalizers"), i, e)
        {
            const char *lost = lost_normalizer(e);
            if (lost)
                return lost;
        }
        return NULL;
    }
    static const char *const kept[] = {"NFC", "Prepend", "Replace"};
    for (size_t i = 0; i < sizeof kept / sizeof kept[0]; i++)
        if (strcmp(type, kept[i]) == 0)
            return NULL;
    return type;
}

/* ---- special tokens ---- */

static int token_content(conv *c, const char *key, const char **out, memra_err *err)
{
    *out = NULL;
    json_t *v = json_object_get(c->tc, key);
    if (!v || json_is_null(v))
        return 0;
    if (json_is_string(v)) {
        *out = json_string_value(v);
        return 0;
    }
    if (json_is_object(v)) {
        json_t *content = json_object_get(v, "content");
        if (json_is_string(content)) {
            *out = json_string_value(content);
            return 0;
        }
    }
    return memra_fail(err, "%s: \"%s\" must be a string or an object with a string \"content\"",
                      c->tc_path, key);
}

static int64_t lookup_id(conv *c, const char *text)
{
    size_t len = strlen(text);
    int32_t id = strmap_get(&c->added_map, text, len);
    if (id < 0)
        id = strmap_get(&c->vocab_map, text, len);
    return id;
}

/* gguf-py's crude reading of post_processor: a TemplateProcessing whose
 * single-sequence template starts with bos (or cls) adds bos, one that ends
 * with eos adds eos; an end token other than eos becomes eos and the old eos
 * becomes eot. RobertaProcessing adds bos, eos and sep. */
static void read_post_processor(conv *c)
{
    json_t *pp = json_object_get(c->tj, "post_processor");
    if (!json_is_object(pp))
        return;
    json_t *list = json_object_get(pp, "processors");
    size_t n = json_is_array(list) ? json_array_size(list) : 1;
    for (size_t i = 0; i < n; i++) {
        json_t *p = json_is_array(list) ? json_array_get(list, i) : pp;
        if (has_type(p, "RobertaProcessing")) {
            c->add_flag[0] = c->add_flag[1] = c->add_flag[2] = 1;
            continue;
        }
        if (!has_type(p, "TemplateProcessing"))
            continue;
        json_t *single = json_object_get(p, "single");
        size_t ns = json_array_size(single);
        if (ns <= 1)
            continue;
        const char *first = json_string_value(
            json_object_get(json_object_get(json_array_get(single, 0), "SpecialToken"), "id"));
        const char *last = json_string_value(json_object_get(
            json_object_get(json_array_get(single, ns - 1), "SpecialToken"), "id"));
        const char *bos = c->sp_content[SP_BOS], *cls = c->sp_content[SP_CLS];
        if (first && *first)
            c->add_flag[0] = (bos && !strcmp(first, bos)) || (cls && !strcmp(first, cls));
        if (last && *last) {
            const char *eos = c->sp_content[SP_EOS];
            if (c->tc && eos && strcmp(last, eos) != 0 && !c->sp_content[SP_EOT]) {
                c->sp_content[SP_EOT] = eos;
                c->sp_content[SP_EOS] = last;
            } else if (c->tc && eos && strcmp(last, eos) != 0) {
                log_warn("%s: post_processor ends with \"%s\", not eos \"%s\"", c->tj_path, last,
                         eos);
            }
            eos = c->sp_content[SP_EOS];
            c->add_flag[1] = eos && !strcmp(last, eos);
        }
    }
}

static void set_special(conv *c, int typ, int64_t id, const char *from)
{
    if (c->sp_id[typ] >= 0)
        return;
    if (id >= (int64_t)c->n) {
        log_warn("%s: %s_token_id %lld is out of the vocabulary (%zu tokens); skipped", from,
                 sp_names[typ], (long long)id, c->n);
        return;
    }
    c->sp_id[typ] = id;
}

/* Ids from config.json / generation_config.json; generation_config may give
 * a list (several end-of-sequence ids): its first is taken. */
static int special_ids_from(conv *c, json_t *j, const char *file, memra_err *err)
{
    if (!j)
        return 0;
    for (int typ = 0; typ < SP_COUNT; typ++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", sp_names[typ]);
        json_t *v = json_object_get(j, key);
        if (!v && json_is_object(json_object_get(j, "text_config")))
            v = json_object_get(json_object_get(j, "text_config"), key);
        if (json_is_array(v))
            v = json_array_get(v, 0);
        if (!json_is_integer(v))
            continue;
        if (json_integer_value(v) < 0)
            return memra_fail(err, "%s/%s: %s is negative", c->dir, file, key);
        set_special(c, typ, json_integer_value(v), file);
    }
    return 0;
}

static int read_specials(conv *c, memra_err *err)
{
    for (int i = 0; i < SP_COUNT; i++)
        c->sp_id[i] = -1;
    c->add_flag[0] = c->add_flag[1] = c->add_flag[2] = -1;
    if (c->tc) {
        for (int typ = 0; typ < SP_COUNT; typ++) {
            char key[32];
            snprintf(key, sizeof key, "%s_token", sp_names[typ]);
            if (token_content(c, key, &c->sp_content[typ], err))
                return -1;
        }
        if (!c->sp_content[SP_BOS] && c->sp_content[SP_CLS])
            c->sp_content[SP_BOS] = c->sp_content[SP_CLS];
        if (!c->sp_content[SP_EOS] && c->sp_content[SP_SEP])
            c->sp_content[SP_EOS] = c->sp_content[SP_SEP];
    }
    read_post_processor(c);
    if (c->tc) {
        static const char *const add_keys[3] = {"add_bos_token", "add_eos_token",
                                                "add_sep_token"};
        for (int i = 0; i < 3; i++) {
            json_t *v = json_object_get(c->tc, add_keys[i]);
            if (json_is_boolean(v))
                c->add_flag[i] = json_is_true(v);
        }
        for (int typ = 0; typ < SP_COUNT; typ++) {
            const char *content = c->sp_content[typ];
            if (!content)
                continue;
            int64_t id = lookup_id(c, content);
            if (id < 0)
                log_warn("%s: %s_token \"%s\" is not in the vocabulary; skipped", c->tc_path,
                         sp_names[typ], content);
            else
                set_special(c, typ, id, "tokenizer_config.json");
        }
    }
    if (special_ids_from(c, c->cfg, "config.json", err) ||
        special_ids_from(c, c->gen, "generation_config.json", err))
        return -1;
    return 0;
}

/* ---- driver ---- */

static int decide_kind(conv *c, memra_err *err)
{
    const char *type = NULL;
    if (json_get_str(c->model, "type", 0, &type, c->tj_path, err))
        return -1;
    if (!type) {
        /* Old tokenizer.json files leave BPE implicit when merges exist. */
        if (json_object_get(c->model, "merges"))
            type = "BPE";
        else
            return memra_fail(err, "%s: model.type is missing", c->tj_path);
    }
    if (strcmp(type, "BPE") != 0)
        return memra_fail(err, "%s: model.type is \"%s\"; only BPE tokenizers can be written as "
                               "GGUF tokenizer.ggml.* (gpt2 or llama)", c->tj_path, type);
    int byte_fallback = 0;
    if (json_get_bool(c->model, "byte_fallback", 0, &byte_fallback, c->tj_path, err))
        return -1;
    if (byte_fallback)
        c->kind = KIND_LLAMA;
    else if (has_bytelevel(json_object_get(c->tj, "pre_tokenizer")) ||
             has_bytelevel(json_object_get(c->tj, "decoder")))
        c->kind = KIND_GPT2;
    else
        return memra_fail(err, "%s: BPE model with neither a ByteLevel pre-tokenizer/decoder "
                               "(gpt2) nor model.byte_fallback (llama)", c->tj_path);
    return 0;
}

static int check_unique(conv *c, memra_err *err)
{
    strmap m;
    strmap_init(&m, c->n);
    for (size_t i = 0; i < c->n; i++) {
        int32_t prev = strmap_put(&m, c->tok[i].text, c->tok[i].len, (int32_t)i);
        if (prev != (int32_t)i) {
            strmap_free(&m);
            return memra_fail(err, "%s: token \"%s\" would appear at both id %d and id %zu",
                              c->tj_path, c->tok[i].text, prev, i);
        }
    }
    strmap_free(&m);
    return 0;
}

static void write_keys(conv *c, gguf_writer *w, const char *pre)
{
    gguf_writer_set_str(w, "tokenizer.ggml.model", c->kind == KIND_GPT2 ? "gpt2" : "llama");
    gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    const char **texts = xmalloc(c->n * sizeof *texts);
    int32_t *types = xmalloc(c->n * sizeof *types);
    float *scores = xmalloc(c->n * sizeof *scores);
    for (size_t i = 0; i < c->n; i++) {
        texts[i] = c->tok[i].text;
        types[i] = c->tok[i].type;
        scores[i] = c->tok[i].score;
    }
    gguf_writer_set_arr(w, "tokenizer.ggml.tokens", GGUF_STRING, c->n, texts);
    if (c->kind == KIND_LLAMA)
        gguf_writer_set_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, c->n, scores);
    gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, c->n, types);
    if (c->kind == KIND_GPT2 && c->n_merges)
        gguf_writer_set_arr(w, "tokenizer.ggml.merges", GGUF_STRING, c->n_merges,
                            (const char *const *)c->merges);
    free(texts);
    free(types);
    free(scores);
    for (int typ = 0; typ < SP_COUNT; typ++)
        if (sp_keys[typ] && c->sp_id[typ] >= 0)
            gguf_writer_set_u32(w, sp_keys[typ], (uint32_t)c->sp_id[typ]);
    static const char *const add_keys[3] = {"tokenizer.ggml.add_bos_token",
                                            "tokenizer.ggml.add_eos_token",
                                            "tokenizer.ggml.add_sep_token"};
    for (int i = 0; i < 3; i++)
        if (c->add_flag[i] >= 0)
            gguf_writer_set_bool(w, add_keys[i], c->add_flag[i]);
    /* Written only when it departs from llama.cpp's SentencePiece default
     * (true), so Llama 2 style output stays as convert writes it. */
    if (c->kind == KIND_LLAMA && !has_prepend(json_object_get(c->tj, "normalizer")) &&
        !has_prepend(json_object_get(c->tj, "pre_tokenizer")))
        gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", 0);
}

int hf_tokenizer_to_gguf(const char *dir, gguf_writer *w, memra_err *err)
{
    return hf_tokenizer_to_gguf_rows(dir, -1, w, err);
}

int hf_tokenizer_to_gguf_rows(const char *dir, int64_t rows, gguf_writer *w, memra_err *err)
{
    conv c;
    memset(&c, 0, sizeof c);
    c.dir = dir;
    c.rows = rows;
    arena_init(&c.mem, 1 << 16);
    c.tj_path = path_in(&c, "tokenizer.json");
    c.tc_path = path_in(&c, "tokenizer_config.json");
    int rc = -1;

    c.tj = json_load_path(c.tj_path, HF_JSON_MAX, err);
    if (!c.tj)
        goto out;
    if (!json_is_object(c.tj)) {
        memra_fail(err, "%s: top level is not a JSON object", c.tj_path);
        goto out;
    }
    c.model = json_object_get(c.tj, "model");
    if (!json_is_object(c.model)) {
        memra_fail(err, "%s: missing object \"model\"", c.tj_path);
        goto out;
    }
    if (decide_kind(&c, err) ||
        hf_json_optional(c.tc_path, HF_SMALL_MAX, &c.tc, err) ||
        hf_json_optional(path_in(&c, "config.json"), HF_SMALL_MAX, &c.cfg, err) ||
        hf_json_optional(path_in(&c, "generation_config.json"), HF_SMALL_MAX, &c.gen, err) ||
        read_vocab(&c, err) || read_merges(&c, err))
        goto out;
    assign_types(&c);
    if (c.kind == KIND_LLAMA && assign_scores(&c, err))
        goto out;
    if (check_unique(&c, err) || read_specials(&c, err) ||
        hf_chat_templates_read(dir, c.tc, c.tc_path, &c.chat, err))
        goto out;
    const char *pre = c.kind == KIND_GPT2 ? detect_pre(&c) : "default";
    /* GGUF has no key for a normalizer and llama.cpp applies none, so the
     * converted file tokenizes such text as the raw characters: say so. */
    const char *lost = lost_normalizer(json_object_get(c.tj, "normalizer"));
    if (lost)
        log_warn("%s: normalizer %s has no GGUF equivalent and is not carried over; text it "
                 "would change tokenizes differently from tokenizer.json", c.tj_path, lost);
    write_keys(&c, w, pre);
    hf_chat_templates_write(c.chat, w);
    rc = 0;
out:
    json_decref(c.tj);
    json_decref(c.tc);
    json_decref(c.cfg);
    json_decref(c.gen);
    json_decref(c.chat);
    free(c.tok);
    strmap_free(&c.vocab_map);
    strmap_free(&c.added_map);
    arena_free(&c.mem);
    return rc;
}
