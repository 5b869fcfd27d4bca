/* The vocabulary: token texts, pieces and types, the pair -> merge hash
 * map (text -> id is a core/strmap.h map), the byte-level alphabet, the
 * end-of-generation ids, and the small public accessors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tok/tok_internal.h"

/* ---- pair map ---- */

static uint64_t pair_key(int32_t l, int32_t r)
{
    return (uint64_t)(uint32_t)l << 32 | (uint32_t)r;
}

static size_t pair_hash(uint64_t k)
{
    k ^= k >> 31;
    k *= 0x7FB5D329728EA185ull;
    k ^= k >> 27;
    k *= 0x81DADEF4BC2DD44Dull;
    k ^= k >> 33;
    return (size_t)k;
}

void tok_pairmap_init(tok_pairmap *m, size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2 + 2)
        cap *= 2;
    m->e = xmalloc(cap * sizeof *m->e);
    for (size_t i = 0; i < cap; i++)
        m->e[i].key = UINT64_MAX;
    m->cap = cap;
    m->n = 0;
}

void tok_pairmap_free(tok_pairmap *m)
{
    free(m->e);
    memset(m, 0, sizeof *m);
}

static size_t pairmap_slot(const tok_pairmap *m, uint64_t key)
{
    size_t mask = m->cap - 1;
    size_t i = pair_hash(key) & mask;
    while (m->e[i].key != UINT64_MAX && m->e[i].key != key)
        i = (i + 1) & mask;
    return i;
}

void tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, uint32_t rank, int32_t id)
{
    if ((m->n + 1) * 2 > m->cap) {
        tok_pairmap big;
        tok_pairmap_init(&big, m->cap);
        for (size_t i = 0; i < m->cap; i++)
            if (m->e[i].key != UINT64_MAX)
                big.e[pairmap_slot(&big, m->e[i].key)] = m->e[i];
        big.n = m->n;
        free(m->e);
        *m = big;
    }
    uint64_t key = pair_key(left, right);
    size_t i = pairmap_slot(m, key);
    if (m->e[i].key == key)
        return;
    m->e[i].key = key;
    m->e[i].rank = rank;
    m->e[i].id = id;
    m->n++;
}

const tok_pair_entry *tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right)
{
    if (!m->e)
        return NULL;
    uint64_t key = pair_key(left, right);
    const tok_pair_entry *e = &m->e[pairmap_slot(m, key)];
    return e->key == key ? e : NULL;
}

/* ---- byte-level alphabet (GPT-2's bytes_to_unicode) ---- */

/* Printable bytes stand for themselves; the 68 others (controls, space,
 * DEL, the C1 range, NBSP and soft hyphen) map in byte order to U+0100
 * upwards, so every byte is a visible character in the vocabulary. */
static int byte_is_printable(unsigned b)
{
    return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
}

uint32_t tok_bytelevel_cp(uint8_t b)
{
    if (byte_is_printable(b))
        return b;
    unsigned n = 0;
    for (unsigned i = 0; i < b; i++)
        n += !byte_is_printable(i);
    return 256 + n;
}

int tok_bytelevel_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_printable(cp) ? (int)cp : -1;
    if (cp >= 256 + 68)
        return -1;
    unsigned n = cp - 256;
    for (unsigned b = 0; b < 256; b++) {
        if (byte_is_printable(b))
            continue;
        if (n == 0)
            return (int)b;
        n--;
    }
    return -1;
}

/* ---- vocabulary ---- */

void tok_alloc_vocab(tokenizer *t, int32_t n)
{
    t->n_vocab = n;
    t->tok = xcalloc(n > 0 ? (size_t)n : 1, sizeof *t->tok);
    for (int32_t i = 0; i < n; i++) {
        t->tok[i].text = "";
        t->tok[i].piece = "";
        t->tok[i].type = TOKT_NORMAL;
    }
}

void tok_set_text(tokenizer *t, int32_t id, const char *s, size_t len)
{
    t->tok[id].text = arena_strndup(&t->mem, s, len);
    t->tok[id].len = (uint32_t)len;
}

/* <0xNN> -> NN, or -1. */
static int byte_token_value(const char *s, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    if (len != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>')
        return -1;
    const char *h1 = memchr(hex, s[3], 16), *h2 = memchr(hex, s[4], 16);
    if (!h1 || !h2 || !s[3] || !s[4])
        return -1;
    return (int)((h1 - hex) * 16 + (h2 - hex));
}

/* Byte-level: map every character back through the alphabet; a token with
 * a character outside it keeps its own UTF-8 bytes (what HF's ByteLevel
 * decoder does). Control and user-defined tokens are their text. */
static void piece_bytelevel(tokenizer *t, tok_token *k)
{
    if (k->type == TOKT_CONTROL || k->type == TOKT_USER_DEFINED || k->type == TOKT_UNKNOWN ||
        (k->flags & TOKF_ADDED)) {
        if (t->flavor == TOK_FLAVOR_GGUF || !(k->flags & TOKF_IN_MODEL)) {
            k->piece = k->text;
            k->piece_len = k->len;
            return;
        }
    }
    char *out = arena_alloc(&t->mem, k->len + 1);
    size_t o = 0, i = 0;
    const uint8_t *s = (const uint8_t *)k->text;
    while (i < k->len) {
        uint32_t cp;
        size_t bad;
        size_t l = tok_utf8_next(s + i, k->len - i, &cp, &bad);
        int b = l ? tok_bytelevel_byte(cp) : -1;
        if (b < 0) {
            k->piece = k->text;
            k->piece_len = k->len;
            return;
        }
        out[o++] = (char)b;
        i += l;
    }
    k->piece = out;
    k->piece_len = (uint32_t)o;
}

/* SentencePiece: U+2581 -> space, <0xNN> byte tokens -> the byte. */
static void piece_spm(tokenizer *t, tok_token *k)
{
    int bv = byte_token_value(k->text, k->len);
    if (bv >= 0 && (k->type == TOKT_BYTE || t->flavor == TOK_FLAVOR_HF)) {
        char *out = arena_alloc(&t->mem, 2);
        out[0] = (char)bv;
        k->piece = out;
        k->piece_len = 1;
        return;
    }
    if (t->flavor == TOK_FLAVOR_GGUF && k->type != TOKT_NORMAL) {
        k->piece = k->text;
        k->piece_len = k->len;
        return;
    }
    char *out = arena_alloc(&t->mem, k->len + 1);
    size_t o = 0;
    for (size_t i = 0; i < k->len; i++) {
        if (i + 2 < k->len && memcmp(k->text + i, "\xE2\x96\x81", 3) == 0) {
            out[o++] = ' ';
            i += 2;
        } else {
            out[o++] = k->text[i];
        }
    }
    k->piece = out;
    k->piece_len = (uint32_t)o;
}

void tok_build_pieces(tokenizer *t)
{
    for (int32_t i = 0; i < t->n_vocab; i++) {
        if (t->kind == TOK_BPE_BYTELEVEL)
            piece_bytelevel(t, &t->tok[i]);
        else
            piece_spm(t, &t->tok[i]);
    }
}

void tok_build_byte_ids(tokenizer *t)
{
    for (int b = 0; b < 256; b++) {
        char buf[8];
        size_t n;
        if (t->kind == TOK_BPE_BYTELEVEL) {
            n = tok_utf8_encode(tok_bytelevel_cp((uint8_t)b), buf);
        } else {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            n = 6;
        }
        int32_t id = strmap_get(&t->map, buf, n);
        if (id >= 0 && t->flavor == TOK_FLAVOR_HF && !(t->tok[id].flags & TOKF_IN_MODEL))
            id = -1;
        t->byte_id[b] = id;
    }
}

/* The texts llama.cpp treats as end of generation (llama-vocab.cpp's list
 * of end-of-turn / end-of-text tokens). */
static const char *const eog_texts[] = {
    "<|eot_id|>",      "<|im_end|>",        "<|end|>",          "<end_of_turn>",
    "<|endoftext|>",   "<|eom_id|>",        "<EOT>",            "_<EOT>",
    "<|end_of_text|>", "<end_of_utterance>", "<|return|>",       "<|call|>",
    "[EOT]",           "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
    "<eos>",
};

int tok_text_is_eog(const char *text)
{
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++)
        if (strcmp(text, eog_texts[i]) == 0)
            return 1;
    return 0;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The generation loop stops on any of these: the configured eos/eot/eom,
 * `more` (generation_config eos lists), and every token whose text names an
 * end of turn, as llama.cpp's end-of-generation set does. */
void tok_build_stop_ids(tokenizer *t, const int32_t *more, size_t n_more)
{
    size_t cap = 8 + n_more, n = 0;
    int32_t *v = xmalloc(cap * sizeof *v);
    const int32_t fixed[3] = {t->eos, t->eot, t->eom};
    for (int i = 0; i < 3; i++)
        if (fixed[i] >= 0)
            v[n++] = fixed[i];
    for (size_t i = 0; i < n_more; i++)
        if (more[i] >= 0 && more[i] < t->n_vocab)
            v[n++] = more[i];
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!tok_text_is_eog(t->tok[id].text))
            continue;
        if (n == cap) {
            cap *= 2;
            v = xrealloc(v, cap * sizeof *v);
        }
        v[n++] = id;
    }
    qsort(v, n, sizeof *v, cmp_i32);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (u == 0 || v[u - 1] != v[i])
            v[u++] = v[i];
    free(t->stop);
    t->stop = v;
    t->n_stop = u;
}

/* ---- public accessors ---- */

void tok_free(tokenizer *t)
{
    if (!t)
        return;
    strmap_free(&t->map);
    tok_pairmap_free(&t->merges);
    for (int32_t i = 0; i < t->n_extra; i++)
        free(t->extra[i]);
    free(t->extra);
    free(t->extra_len);
    free(t->special_order);
    tok_trie_free(&t->special_trie);
    tok_trie_free(&t->added_raw);
    tok_trie_free(&t->added_norm);
    free(t->added);
    for (size_t i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
        if (t->norm[i].re)
            pcre2_code_free(t->norm[i].re);
    }
    free(t->norm);
    for (size_t i = 0; i < t->n_pre; i++) {
        if (t->pre[i].re)
            pcre2_code_free(t->pre[i].re);
        free(t->pre[i].lit);
    }
    free(t->pre);
    free(t->stop);
    free(t->tok);
    free(t->source);
    arena_free(&t->mem);
    free(t);
}

const char *tok_piece(const tokenizer *t, int32_t id, size_t *len)
{
    if (id < 0 || id >= t->n_vocab) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = t->tok[id].piece_len;
    return t->tok[id].piece;
}

const char *tok_text(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab ? t->tok[id].text : NULL;
}

tok_kind tok_get_kind(const tokenizer *t) { return t->kind; }
size_t tok_vocab_size(const tokenizer *t) { return (size_t)t->n_vocab; }
int32_t tok_bos(const tokenizer *t) { return t->bos; }
int32_t tok_eos(const tokenizer *t) { return t->eos; }
int32_t tok_eot(const tokenizer *t) { return t->eot; }
int32_t tok_unk(const tokenizer *t) { return t->unk; }
int32_t tok_pad(const tokenizer *t) { return t->pad; }
int tok_adds_bos(const tokenizer *t) { return t->add_bos; }
int tok_adds_eos(const tokenizer *t) { return t->add_eos; }
int tok_strips_leading_space(const tokenizer *t) { return t->strip_leading_space; }

const int32_t *tok_stop_ids(const tokenizer *t, size_t *n)
{
    *n = t->n_stop;
    return t->stop;
}

int tok_is_stop(const tokenizer *t, int32_t id)
{
    return bsearch(&id, t->stop, t->n_stop, sizeof *t->stop, cmp_i32) != NULL;
}

int tok_is_control(const tokenizer *t, int32_t id)
{
    return id >= 0 && id < t->n_vocab && (t->tok[id].flags & TOKF_CONTROL);
}

int32_t tok_id_of(const tokenizer *t, const char *text)
{
    return strmap_get(&t->map, text, strlen(text));
}
