/* llama.cpp's SentencePiece merge for GGUF "llama" vocabularies.
 *
 * The symbols start as the fragment's UTF-8 characters. Any adjacent pair
 * whose concatenation is a token (of any type) is a candidate, scored by
 * that token's score; the best score wins, the leftmost on a tie. A popped
 * candidate is stale when either side has changed size since it was
 * pushed. At the end each symbol is its token, or, when the text is no
 * token (a lone character outside the vocabulary), its <0xNN> byte tokens.
 * Candidates are looked up straight in the input: merged symbols always
 * cover contiguous bytes, so no strings are built. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tok/tok_heap.h"
#include "tok/tok_internal.h"

static int cand_better(const tok_cand *a, const tok_cand *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

TOK_HEAP_DEFINE(heap, cand_better)

static void try_bigram(const tokenizer *t, tok_scratch *s, const char *w, int32_t left,
                       int32_t right)
{
    if (left < 0 || right < 0)
        return;
    const tok_sym *l = &s->sym[left], *r = &s->sym[right];
    uint32_t size = l->len + r->len;
    int32_t id = strmap_get(&t->map, w + l->start, size);
    if (id < 0)
        return;
    tok_cand c = {.score = t->tok[id].score, .left = left, .right = right, .size = size};
    heap_push(s, &c);
}

void tok_spm_fragment(const tokenizer *t, tok_scratch *s, const char *w, size_t n, tok_ids *ids)
{
    size_t ns = 0;
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t bad;
        size_t l = tok_utf8_next((const uint8_t *)w + i, n - i, &cp, &bad);
        if (!l)
            l = bad;
        if (ns == s->sym_cap) {
            s->sym_cap = s->sym_cap ? s->sym_cap * 2 : 64;
            s->sym = xrealloc(s->sym, s->sym_cap * sizeof *s->sym);
        }
        tok_sym *y = &s->sym[ns];
        y->start = (uint32_t)i;
        y->len = (uint32_t)l;
        y->prev = (int32_t)ns - 1;
        y->next = i + l == n ? -1 : (int32_t)ns + 1;
        y->id = -1;
        ns++;
        i += l;
    }
    if (ns == 0)
        return;
    s->heap_n = 0;
    for (size_t k = 1; k < ns; k++)
        try_bigram(t, s, w, (int32_t)k - 1, (int32_t)k);
    while (s->heap_n > 0) {
        tok_cand c = heap_pop(s);
        tok_sym *l = &s->sym[c.left], *r = &s->sym[c.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != c.size)
            continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->sym[r->next].prev = c.left;
        try_bigram(t, s, w, l->prev, c.left);
        try_bigram(t, s, w, c.left, l->next);
    }
    for (int32_t k = 0; k >= 0; k = s->sym[k].next) {
        const tok_sym *y = &s->sym[k];
        int32_t id = strmap_get(&t->map, w + y->start, y->len);
        if (id >= 0) {
            tok_ids_push(ids, id);
            continue;
        }
        for (uint32_t b = 0; b < y->len; b++) {
            uint8_t byte = (uint8_t)w[y->start + b];
            int32_t bid = t->byte_id[byte];
            if (bid < 0)
                bid = strmap_get(&t->map, w + y->start + b, 1);
            if (bid < 0)
                bid = t->unk;
            if (bid >= 0)
                tok_ids_push(ids, bid);
        }
    }
}
