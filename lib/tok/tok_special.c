/* Added and special tokens are cut out of the text before the normal
 * split. The two references do it differently and we follow each:
 *
 * llama.cpp (GGUF): the candidate tokens (control, user-defined, unknown)
 * are taken longest first; each claims every leftmost non-overlapping
 * occurrence in the text the longer ones left. We find all occurrences of
 * all candidates with one trie walk per position, then accept them in
 * (priority, position) order over a "taken" map, which gives the same
 * result without rescanning the text once per token.
 *
 * Hugging Face: one leftmost-longest scan over a trie of the added tokens
 * (Aho-Corasick LeftmostLongest); a match is then dropped when it is a
 * special token and special parsing is off, or a single_word token touching
 * a word character; lstrip/rstrip widen it over adjacent whitespace. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/check.h"
#include "tok/tok_internal.h"

void tok_trie_init(tok_trie *t)
{
    memset(t, 0, sizeof *t);
    t->root = xmalloc(256 * sizeof *t->root);
    for (int i = 0; i < 256; i++)
        t->root[i] = -1;
}

void tok_trie_free(tok_trie *t)
{
    free(t->root);
    free(t->nodes);
    memset(t, 0, sizeof *t);
}

static int32_t new_node(tok_trie *t, uint8_t byte)
{
    if (t->n_nodes == t->cap_nodes) {
        t->cap_nodes = t->cap_nodes ? t->cap_nodes * 2 : 256;
        t->nodes = xrealloc(t->nodes, t->cap_nodes * sizeof *t->nodes);
    }
    struct tok_trie_node *n = &t->nodes[t->n_nodes];
    n->first_child = n->next_sibling = -1;
    n->value = -1;
    n->byte = byte;
    return (int32_t)t->n_nodes++;
}

static int32_t child(const tok_trie *t, int32_t node, uint8_t b)
{
    for (int32_t c = t->nodes[node].first_child; c >= 0; c = t->nodes[c].next_sibling)
        if (t->nodes[c].byte == b)
            return c;
    return -1;
}

void tok_trie_insert(tok_trie *t, const char *s, size_t len, int32_t value)
{
    if (len == 0)
        return;
    int32_t node = t->root[(uint8_t)s[0]];
    if (node < 0) {
        node = new_node(t, (uint8_t)s[0]);
        t->root[(uint8_t)s[0]] = node;
    }
    for (size_t i = 1; i < len; i++) {
        int32_t c = child(t, node, (uint8_t)s[i]);
        if (c < 0) {
            c = new_node(t, (uint8_t)s[i]);
            t->nodes[c].next_sibling = t->nodes[node].first_child;
            t->nodes[node].first_child = c;
        }
        node = c;
    }
    if (t->nodes[node].value < 0)
        t->nodes[node].value = value;
}

int32_t tok_trie_longest(const tok_trie *t, const char *s, size_t len, size_t *mlen)
{
    if (!t->root || len == 0)
        return -1;
    int32_t node = t->root[(uint8_t)s[0]];
    int32_t best = -1;
    size_t i = 1;
    while (node >= 0) {
        if (t->nodes[node].value >= 0) {
            best = t->nodes[node].value;
            *mlen = i;
        }
        if (i == len)
            break;
        node = child(t, node, (uint8_t)s[i++]);
    }
    return best;
}

void tok_segs_push(tok_segs *s, int32_t id, size_t start, size_t len)
{
    if (id < 0 && len == 0)
        return;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->v = xrealloc(s->v, s->cap * sizeof *s->v);
    }
    s->v[s->n].id = id;
    s->v[s->n].start = start;
    s->v[s->n].len = len;
    s->n++;
}

/* ---- llama.cpp partition ---- */

typedef struct {
    uint32_t prio;
    uint32_t pos;
} occurrence;

static int occ_cmp(const void *a, const void *b)
{
    const occurrence *x = a, *y = b;
    if (x->prio != y->prio)
        return x->prio < y->prio ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

typedef struct {
    uint32_t pos, len;
    int32_t id;
} accepted;

static int acc_cmp(const void *a, const void *b)
{
    const accepted *x = a, *y = b;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

void tok_split_special_gguf(const tokenizer *t, const char *text, size_t len, int parse_special,
                            tok_segs *out)
{
    out->n = 0;
    if (t->n_special_order == 0 || len == 0) {
        tok_segs_push(out, -1, 0, len);
        return;
    }
    occurrence *occ = NULL;
    size_t n_occ = 0, cap_occ = 0;
    const tok_trie *tr = &t->special_trie;
    for (size_t i = 0; i < len; i++) {
        int32_t node = tr->root[(uint8_t)text[i]];
        size_t k = i + 1;
        while (node >= 0) {
            int32_t prio = tr->nodes[node].value;
            if (prio >= 0) {
                int32_t id = t->special_order[prio];
                if (parse_special || !(t->tok[id].flags & TOKF_CONTROL)) {
                    if (n_occ == cap_occ) {
                        cap_occ = cap_occ ? cap_occ * 2 : 64;
                        occ = xrealloc(occ, cap_occ * sizeof *occ);
                    }
                    occ[n_occ].prio = (uint32_t)prio;
                    occ[n_occ].pos = (uint32_t)i;
                    n_occ++;
                }
            }
            if (k == len)
                break;
            node = child(tr, node, (uint8_t)text[k++]);
        }
    }
    if (n_occ == 0) {
        free(occ);
        tok_segs_push(out, -1, 0, len);
        return;
    }
    qsort(occ, n_occ, sizeof *occ, occ_cmp);
    uint8_t *taken = xcalloc(len, 1);
    accepted *acc = xmalloc(n_occ * sizeof *acc);
    size_t n_acc = 0;
    for (size_t i = 0; i < n_occ; i++) {
        int32_t id = t->special_order[occ[i].prio];
        uint32_t l = t->tok[id].len, p = occ[i].pos;
        int free_span = 1;
        for (uint32_t j = 0; j < l && free_span; j++)
            free_span = !taken[p + j];
        if (!free_span)
            continue;
        memset(taken + p, 1, l);
        acc[n_acc].pos = p;
        acc[n_acc].len = l;
        acc[n_acc].id = id;
        n_acc++;
    }
    qsort(acc, n_acc, sizeof *acc, acc_cmp);
    size_t prev = 0;
    for (size_t i = 0; i < n_acc; i++) {
        tok_segs_push(out, -1, prev, acc[i].pos - prev);
        tok_segs_push(out, acc[i].id, acc[i].pos, acc[i].len);
        prev = acc[i].pos + acc[i].len;
    }
    tok_segs_push(out, -1, prev, len - prev);
    free(taken);
    free(acc);
    free(occ);
}

/* ---- Hugging Face added vocabulary ---- */

static int is_white_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* Rust's char::is_alphanumeric (letters and numbers) or '_'. */
static int is_word_char(uint32_t c)
{
    if (c == '_')
        return 1;
    utf8proc_category_t k = utf8proc_category((utf8proc_int32_t)c);
    return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
}

/* The code point ending at s[end) (text is valid UTF-8). */
static uint32_t cp_before(const char *s, size_t end, size_t *start)
{
    size_t i = end;
    do
        i--;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80);
    uint32_t cp = 0;
    size_t bad;
    if (!tok_utf8_next((const uint8_t *)s + i, end - i, &cp, &bad))
        cp = 0xFFFD;
    *start = i;
    return cp;
}

static uint32_t cp_at(const char *s, size_t pos, size_t len, size_t *l)
{
    uint32_t cp = 0;
    size_t bad;
    *l = tok_utf8_next((const uint8_t *)s + pos, len - pos, &cp, &bad);
    if (!*l) {
        *l = bad;
        cp = 0xFFFD;
    }
    return cp;
}

/* The one byte every pattern starts with, or -1 when there are several (or
 * none). With one (all of Qwen's added tokens start with '<'), memchr finds
 * the candidates instead of a byte-by-byte walk. */
static int single_first_byte(const tok_trie *trie)
{
    int only = -1;
    for (int b = 0; b < 256; b++) {
        if (trie->root[b] < 0)
            continue;
        if (only >= 0)
            return -1;
        only = b;
    }
    return only;
}

void tok_split_added_hf(const tokenizer *t, const tok_trie *trie, const char *text, size_t len,
                        int parse_special, tok_segs *out)
{
    out->n = 0;
    size_t prev = 0, start_offset = 0, i = 0;
    int first = trie->root ? single_first_byte(trie) : -1;
    while (trie->root && i < len) {
        if (first >= 0) {
            const char *q = memchr(text + i, first, len - i);
            if (!q)
                break;
            i = (size_t)(q - text);
        } else if (trie->root[(uint8_t)text[i]] < 0) {
            i++;
            continue;
        }
        size_t mlen = 0;
        int32_t v = tok_trie_longest(trie, text + i, len - i, &mlen);
        if (v < 0) {
            i++;
            continue;
        }
        size_t start = i, stop = i + mlen;
        i = stop;
        const tok_added *a = &t->added[v];
        if (a->special && !parse_special)
            continue;
        if (a->single_word) {
            size_t q, l;
            int before = start > 0 && is_word_char(cp_before(text, start, &q));
            int after = stop < len && is_word_char(cp_at(text, stop, len, &l));
            if (before || after)
                continue;
        }
        if (a->lstrip) {
            size_t ns = start;
            while (ns > 0) {
                size_t q;
                if (!is_white_space(cp_before(text, ns, &q)))
                    break;
                ns = q;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip) {
            while (stop < len) {
                size_t l;
                if (!is_white_space(cp_at(text, stop, len, &l)))
                    break;
                stop += l;
            }
        }
        if (stop <= prev)
            continue; /* inside what an rstrip already took */
        if (start < prev)
            start = prev;
        tok_segs_push(out, -1, prev, start - prev);
        tok_segs_push(out, a->id, start, stop - start);
        prev = stop;
        start_offset = stop;
    }
    if (prev < len || out->n == 0)
        tok_segs_push(out, -1, prev, len - prev);
}
