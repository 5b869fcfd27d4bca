/* Rank-ordered BPE over one pre-tokenized word.
 *
 * The symbols start as the word's bytes (byte-level BPE: each byte is the
 * token of its byte-level character) or its UTF-8 characters (SPM-style
 * tokenizer.json: a character with no token becomes its <0xNN> byte
 * tokens, else the unknown token). Every adjacent pair that has a merge
 * goes into a min-heap keyed by (rank, position); the lowest is applied,
 * stale entries (a side already merged away, or a pair whose merge no
 * longer yields the recorded id) are dropped when popped, and the new
 * pairs on either side are pushed. This is the order both llama.cpp and
 * Hugging Face `tokenizers` apply merges in, at O(n log n) per word. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tok/tok_heap.h"
#include "tok/tok_internal.h"

void tok_ids_push(tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        ids->cap = ids->cap ? ids->cap * 2 : 64;
        ids->v = xrealloc(ids->v, ids->cap * sizeof *ids->v);
    }
    ids->v[ids->n++] = id;
}

static void sym_reserve(tok_scratch *s, size_t n)
{
    if (n > s->sym_cap) {
        s->sym_cap = n + n / 2 + 16;
        s->sym = xrealloc(s->sym, s->sym_cap * sizeof *s->sym);
    }
}

static void sym_add(tok_scratch *s, size_t *n, int32_t id, uint32_t start, uint32_t len)
{
    sym_reserve(s, *n + 1);
    tok_sym *y = &s->sym[*n];
    y->id = id;
    y->start = start;
    y->len = len;
    y->prev = (int32_t)*n - 1;
    y->next = -1;
    if (*n > 0)
        s->sym[*n - 1].next = (int32_t)*n;
    (*n)++;
}

/* ---- min-heap on (rank, left) ---- */

static int cand_less(const tok_cand *a, const tok_cand *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

TOK_HEAP_DEFINE(heap, cand_less)

static void try_pair(const tokenizer *t, tok_scratch *s, int32_t left)
{
    if (left < 0)
        return;
    int32_t right = s->sym[left].next;
    if (right < 0)
        return;
    const tok_pair_entry *m = tok_pairmap_get(&t->merges, s->sym[left].id, s->sym[right].id);
    if (!m)
        return;
    tok_cand c = {.rank = m->rank, .left = left, .right = right, .new_id = m->id,
                  .left_id = s->sym[left].id, .right_id = s->sym[right].id};
    heap_push(s, &c);
}

static int in_model(const tokenizer *t, int32_t id)
{
    return id >= 0 && (t->flavor == TOK_FLAVOR_GGUF || (t->tok[id].flags & TOKF_IN_MODEL));
}

/* The byte-level characters of w, for looking the whole word up. */
static const char *encode_bytelevel(tok_scratch *s, const char *w, size_t n, size_t *out_len)
{
    if (s->enc_cap < 2 * n + 1) {
        s->enc_cap = 2 * n + 64;
        s->enc = xrealloc(s->enc, s->enc_cap);
    }
    size_t o = 0;
    for (size_t i = 0; i < n; i++)
        o += tok_utf8_encode(tok_bytelevel_cp((uint8_t)w[i]), s->enc + o);
    *out_len = o;
    return s->enc;
}

/* SPM-style initial symbols: characters, byte fallback, unknown (fused). */
static size_t init_spm_symbols(const tokenizer *t, tok_scratch *s, const char *w, size_t n)
{
    size_t ns = 0;
    int32_t unk_start = -1;
    uint32_t unk_len = 0;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad;
        size_t l = tok_utf8_next((const uint8_t *)w + i, n - i, &cp, &bad);
        if (!l)
            l = bad; /* input is sanitized; keep going on anything else */
        int32_t id = strmap_get(&t->map, w + i, l);
        if (id >= 0 && !in_model(t, id))
            id = -1;
        if (id >= 0) {
            if (unk_start >= 0) {
                sym_add(s, &ns, t->unk, (uint32_t)unk_start, unk_len);
                unk_start = -1;
            }
            sym_add(s, &ns, id, (uint32_t)i, (uint32_t)l);
        } else {
            int all = t->byte_fallback;
            for (size_t k = 0; all && k < l; k++)
                all = t->byte_id[(uint8_t)w[i + k]] >= 0;
            if (all) {
                if (unk_start >= 0) {
                    sym_add(s, &ns, t->unk, (uint32_t)unk_start, unk_len);
                    unk_start = -1;
                }
                for (size_t k = 0; k < l; k++)
                    sym_add(s, &ns, t->byte_id[(uint8_t)w[i + k]], (uint32_t)(i + k), 1);
            } else if (t->unk >= 0) {
                if (unk_start >= 0 && t->fuse_unk) {
                    unk_len += (uint32_t)l;
                } else {
                    if (unk_start >= 0)
                        sym_add(s, &ns, t->unk, (uint32_t)unk_start, unk_len);
                    unk_start = (int32_t)i;
                    unk_len = (uint32_t)l;
                }
            }
        }
        i += l;
    }
    if (unk_start >= 0)
        sym_add(s, &ns, t->unk, (uint32_t)unk_start, unk_len);
    return ns;
}

/* A symbol the vocabulary lacks (a GGUF merge produced a string with no
 * token): llama.cpp emits the tokens of its single bytes, where they exist. */
static void emit_extra(const tokenizer *t, int32_t id, tok_ids *ids)
{
    int32_t k = id - t->n_vocab;
    if (k < 0 || k >= t->n_extra)
        return;
    for (uint32_t i = 0; i < t->extra_len[k]; i++) {
        int32_t b = strmap_get(&t->map, t->extra[k] + i, 1);
        if (b >= 0)
            tok_ids_push(ids, b);
    }
}

void tok_bpe_word(const tokenizer *t, tok_scratch *s, const char *w, size_t n, tok_ids *ids)
{
    if (n == 0)
        return;
    if (t->newline_words) {
        size_t k = 0;
        while (k < n && w[k] == '\n')
            k++;
        int32_t id = k == n ? strmap_get(&t->map, w, n) : -1;
        if (id >= 0) {
            tok_ids_push(ids, id);
            return;
        }
    }
    if (t->ignore_merges) {
        size_t el = n;
        const char *e = t->kind == TOK_BPE_BYTELEVEL ? encode_bytelevel(s, w, n, &el) : w;
        int32_t id = strmap_get(&t->map, e, el);
        if (in_model(t, id)) {
            tok_ids_push(ids, id);
            return;
        }
    }
    size_t ns = 0;
    if (t->kind == TOK_BPE_BYTELEVEL) {
        sym_reserve(s, n);
        for (size_t i = 0; i < n; i++) {
            int32_t id = t->byte_id[(uint8_t)w[i]];
            if (id >= 0)
                sym_add(s, &ns, id, (uint32_t)i, 1);
        }
    } else {
        ns = init_spm_symbols(t, s, w, n);
    }
    if (ns == 1) {
        if (s->sym[0].id < t->n_vocab)
            tok_ids_push(ids, s->sym[0].id);
        else
            emit_extra(t, s->sym[0].id, ids);
        return;
    }
    s->heap_n = 0;
    for (size_t i = 0; i + 1 < ns; i++)
        try_pair(t, s, (int32_t)i);
    while (s->heap_n > 0) {
        tok_cand c = heap_pop(s);
        tok_sym *l = &s->sym[c.left];
        if (l->len == 0 || l->next < 0)
            continue;
        tok_sym *r = &s->sym[l->next];
        if (l->next != c.right || l->id != c.left_id || r->id != c.right_id) {
            /* changed since pushed: still applies if the pair now there
             * merges into the same token (what tokenizers checks) */
            const tok_pair_entry *m = tok_pairmap_get(&t->merges, l->id, r->id);
            if (!m || m->id != c.new_id)
                continue;
        }
        l->id = c.new_id;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->sym[r->next].prev = c.left;
        try_pair(t, s, l->prev);
        try_pair(t, s, c.left);
    }
    for (int32_t i = 0; i >= 0 && (size_t)i < ns; i = s->sym[i].next) {
        int32_t id = s->sym[i].id;
        if (id < t->n_vocab)
            tok_ids_push(ids, id);
        else
            emit_extra(t, id, ids);
    }
}

/* ---- word cache ----
 *
 * Text repeats its words, and BPE of a word is a pure function of its
 * bytes, so long inputs keep a cache of word -> ids for the call (as
 * `tokenizers` does across calls). Only short words are cached; the table
 * is cleared when it fills. */
struct tok_wc_entry {
    uint64_t hash;
    uint32_t key_off, ids_off;
    uint16_t key_len, n_ids;
    int used;
};

#define WC_MIN_INPUT 4096
#define WC_MAX_WORD 64

static void wc_reset(tok_scratch *s)
{
    memset(s->wc, 0, s->wc_cap * sizeof *s->wc);
    s->wc_n = 0;
    s->wc_keys_len = 0;
    s->wc_ids_len = 0;
}

void tok_bpe_word_cached(const tokenizer *t, tok_scratch *s, const char *w, size_t n,
                         tok_ids *ids, size_t input_len)
{
    if (input_len < WC_MIN_INPUT || n > WC_MAX_WORD || n < 2) {
        tok_bpe_word(t, s, w, n, ids);
        return;
    }
    if (!s->wc) {
        size_t cap = 1024;
        while (cap < input_len / 4 && cap < (1u << 17))
            cap *= 2;
        s->wc_cap = cap;
        s->wc = xcalloc(cap, sizeof *s->wc);
    }
    uint64_t h = strmap_hash(w, n);
    size_t mask = s->wc_cap - 1, i = (size_t)h & mask;
    while (s->wc[i].used) {
        const struct tok_wc_entry *e = &s->wc[i];
        if (e->hash == h && e->key_len == n && memcmp(s->wc_keys + e->key_off, w, n) == 0) {
            for (uint16_t k = 0; k < e->n_ids; k++)
                tok_ids_push(ids, s->wc_ids[e->ids_off + k]);
            return;
        }
        i = (i + 1) & mask;
    }
    size_t before = ids->n;
    tok_bpe_word(t, s, w, n, ids);
    size_t got = ids->n - before;
    if (got > UINT16_MAX)
        return;
    if ((s->wc_n + 1) * 2 > s->wc_cap) {
        wc_reset(s);
        i = (size_t)h & mask;
    }
    if (s->wc_keys_len + n > s->wc_keys_cap) {
        s->wc_keys_cap = (s->wc_keys_len + n) * 2 + 4096;
        s->wc_keys = xrealloc(s->wc_keys, s->wc_keys_cap);
    }
    if (s->wc_ids_len + got > s->wc_ids_cap) {
        s->wc_ids_cap = (s->wc_ids_len + got) * 2 + 1024;
        s->wc_ids = xrealloc(s->wc_ids, s->wc_ids_cap * sizeof *s->wc_ids);
    }
    struct tok_wc_entry *e = &s->wc[i];
    e->used = 1;
    e->hash = h;
    e->key_off = (uint32_t)s->wc_keys_len;
    e->key_len = (uint16_t)n;
    e->ids_off = (uint32_t)s->wc_ids_len;
    e->n_ids = (uint16_t)got;
    memcpy(s->wc_keys + s->wc_keys_len, w, n);
    s->wc_keys_len += n;
    memcpy(s->wc_ids + s->wc_ids_len, ids->v + before, got * sizeof *ids->v);
    s->wc_ids_len += got;
    s->wc_n++;
}

tok_scratch *tok_scratch_new(void)
{
    return xcalloc(1, sizeof(tok_scratch));
}

void tok_scratch_free(tok_scratch *s)
{
    if (!s)
        return;
    free(s->sym);
    free(s->heap);
    free(s->enc);
    if (s->md)
        pcre2_match_data_free(s->md);
    if (s->mctx)
        pcre2_match_context_free(s->mctx);
    if (s->jit)
        pcre2_jit_stack_free(s->jit);
    free(s->mpos);
    free(s->wc);
    free(s->wc_keys);
    free(s->wc_ids);
    for (size_t i = 0; i < s->n_owned; i++)
        free(s->owned[i]);
    free(s->owned);
    free(s);
}
