/* Token masks. The vocabulary becomes a byte trie once; a step walks it
 * depth first beside the matcher: entering a child advances the stack set
 * by the child's byte, and a byte no stack reads cuts off the whole subtree
 * (every token that starts with that prefix) at once. Tokens that end at a
 * node the walk reaches are allowed. The work is one advance per trie node
 * visited, not per byte of every token. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "grammar/gram_internal.h"

typedef struct {
    uint32_t first_child, next_sibling; /* 0: none (node 0 is the root) */
    int32_t first_token;                /* -1: no token ends here */
    uint8_t byte;
} trie_node;

struct gram_vocab {
    int n;
    trie_node *nodes;
    uint32_t n_nodes;
    int32_t *next_token;  /* tokens with the same bytes, chained */
    char **pieces;        /* copies, for gram_token_allowed / accept */
    size_t *lens;
    uint8_t *is_eog;
};

typedef struct {
    const char *const *pieces;
    const size_t *lens;
} sort_ctx;

/* qsort has no context argument in C11: two vocabularies must not be
 * built at once (the engine builds one per model at load). */
static sort_ctx g_sort;

static int cmp_tokens(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    size_t lx = g_sort.lens[x], ly = g_sort.lens[y];
    int c = memcmp(g_sort.pieces[x], g_sort.pieces[y], lx < ly ? lx : ly);
    if (c)
        return c;
    return lx < ly ? -1 : lx > ly;
}

gram_vocab *gram_vocab_build(const char *const *pieces, const size_t *lens, int n,
                             memra_err *err)
{
    if (n <= 0)
        return memra_fail(err, "grammar vocab: %d tokens", n), NULL;
    gram_vocab *v = xcalloc(1, sizeof *v);
    v->n = n;
    v->next_token = xmalloc((size_t)n * sizeof *v->next_token);
    v->pieces = xcalloc((size_t)n, sizeof *v->pieces);
    v->lens = xcalloc((size_t)n, sizeof *v->lens);
    v->is_eog = xcalloc((size_t)n, 1);
    int *order = xmalloc((size_t)n * sizeof *order);
    int m = 0;
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        v->next_token[i] = -1;
        if (!pieces[i] || !lens[i])
            continue;
        v->pieces[i] = xmalloc(lens[i]);
        memcpy(v->pieces[i], pieces[i], lens[i]);
        v->lens[i] = lens[i];
        order[m++] = i;
        total += lens[i];
    }
    /* Sorted, each token's path shares its prefix with the token before it,
     * so a new child is always the last child of its parent. */
    g_sort.pieces = (const char *const *)v->pieces;
    g_sort.lens = v->lens;
    qsort(order, (size_t)m, sizeof *order, cmp_tokens);
    uint32_t cap = (uint32_t)(total + 1);
    v->nodes = xmalloc(cap * sizeof *v->nodes);
    uint32_t *last_child = xcalloc(cap, sizeof *last_child);
    v->nodes[0] = (trie_node){0, 0, -1, 0};
    v->n_nodes = 1;
    for (int k = 0; k < m; k++) {
        int id = order[k];
        const uint8_t *s = (const uint8_t *)v->pieces[id];
        uint32_t at = 0;
        for (size_t i = 0; i < v->lens[id]; i++) {
            uint32_t c = last_child[at];
            if (!c || v->nodes[c].byte != s[i]) {
                uint32_t nn = v->n_nodes++;
                v->nodes[nn] = (trie_node){0, 0, -1, s[i]};
                if (c)
                    v->nodes[c].next_sibling = nn;
                else
                    v->nodes[at].first_child = nn;
                last_child[at] = nn;
                c = nn;
            }
            at = c;
        }
        v->next_token[id] = v->nodes[at].first_token;
        v->nodes[at].first_token = id;
    }
    free(last_child);
    free(order);
    return v;
}

gram_vocab *gram_vocab_from_tok(const tokenizer *t, memra_err *err)
{
    int n = (int)tok_vocab_size(t);
    const char **pieces = xcalloc((size_t)n, sizeof *pieces);
    size_t *lens = xcalloc((size_t)n, sizeof *lens);
    for (int i = 0; i < n; i++) {
        if (tok_is_control(t, i))
            continue;
        pieces[i] = tok_piece(t, i, &lens[i]);
    }
    size_t n_stop = 0;
    const int32_t *stop = tok_stop_ids(t, &n_stop);
    for (size_t i = 0; i < n_stop; i++)
        if (stop[i] >= 0 && stop[i] < n)
            pieces[stop[i]] = NULL;
    gram_vocab *v = gram_vocab_build(pieces, lens, n, err);
    free(pieces);
    free(lens);
    if (v)
        gram_vocab_set_eog(v, stop, (int)n_stop);
    return v;
}

void gram_vocab_set_eog(gram_vocab *v, const int32_t *ids, int n)
{
    for (int i = 0; i < n; i++)
        if (ids[i] >= 0 && ids[i] < v->n)
            v->is_eog[ids[i]] = 1;
}

void gram_vocab_free(gram_vocab *v)
{
    if (!v)
        return;
    for (int i = 0; i < v->n; i++)
        free(v->pieces[i]);
    free(v->pieces);
    free(v->lens);
    free(v->is_eog);
    free(v->next_token);
    free(v->nodes);
    free(v);
}

int gram_vocab_size(const gram_vocab *v)
{
    return v->n;
}

size_t gram_mask_words(const gram_vocab *v)
{
    return ((size_t)v->n + 31) / 32;
}

typedef struct {
    gram_pool pool;
    const gram_vocab *v;
    uint32_t *mask;
    int allowed;
} walker;

static void walk(walker *w, uint32_t node, uint32_t from, uint32_t to)
{
    const gram_grammar *g = w->pool.g;
    gram_byteset any;
    memset(&any, 0, sizeof any);
    for (uint32_t i = from; i < to; i++) {
        uint32_t t = w->pool.tops[i];
        if (!t)
            continue;
        const gram_byteset *s = &g->sets[g->elems[w->pool.nodes[t].pos].arg];
        for (int k = 0; k < 8; k++)
            any.w[k] |= s->w[k];
    }
    const trie_node *nodes = w->v->nodes;
    for (uint32_t c = nodes[node].first_child; c; c = nodes[c].next_sibling) {
        if (!gram_bs_has(&any, nodes[c].byte))
            continue;
        uint32_t mark_nodes = w->pool.n_nodes, mark_tops = w->pool.n_tops;
        uint32_t start = gram_pool_advance(&w->pool, from, to, nodes[c].byte);
        uint32_t end = w->pool.n_tops;
        if (start < end) {
            for (int32_t id = nodes[c].first_token; id >= 0; id = w->v->next_token[id]) {
                w->mask[id >> 5] |= 1u << (id & 31);
                w->allowed++;
            }
            if (nodes[c].first_child)
                walk(w, c, start, end);
        }
        w->pool.n_nodes = mark_nodes;
        w->pool.n_tops = mark_tops;
    }
}

int gram_mask(const gram_state *s, const gram_vocab *v, uint32_t *mask_bits)
{
    memset(mask_bits, 0, gram_mask_words(v) * sizeof *mask_bits);
    if (s->finished)
        return 0;
    walker w = {.v = v, .mask = mask_bits};
    /* The walk works on a copy of the state's pool: it appends and cuts back
     * and must leave the state as it was. */
    w.pool = s->pool;
    w.pool.nodes = xmalloc(s->pool.cap_nodes * sizeof *w.pool.nodes);
    memcpy(w.pool.nodes, s->pool.nodes, s->pool.n_nodes * sizeof *w.pool.nodes);
    w.pool.tops = xmalloc(s->pool.cap_tops * sizeof *w.pool.tops);
    memcpy(w.pool.tops, s->pool.tops, s->pool.n_tops * sizeof *w.pool.tops);
    walk(&w, 0, s->set_start, s->set_end);
    gram_pool_free(&w.pool);
    if (gram_is_complete(s))
        for (int i = 0; i < v->n; i++)
            if (v->is_eog[i]) {
                mask_bits[i >> 5] |= 1u << (i & 31);
                w.allowed++;
            }
    return w.allowed;
}

int gram_token_allowed(const gram_state *s, const gram_vocab *v, int32_t id)
{
    if (id < 0 || id >= v->n || s->finished)
        return 0;
    if (v->is_eog[id])
        return gram_is_complete(s);
    if (!v->pieces[id])
        return 0;
    gram_state *c = gram_state_clone(s);
    int ok = gram_accept_bytes(c, v->pieces[id], v->lens[id], NULL) == 0;
    gram_state_free(c);
    return ok;
}

int gram_accept_token(gram_state *s, const gram_vocab *v, int32_t id, memra_err *err)
{
    if (id < 0 || id >= v->n)
        return memra_fail(err, "grammar: token %d is out of the vocabulary (%d tokens)", id,
                          v->n);
    if (s->finished)
        return memra_fail(err, "grammar: token %d after the end of generation", id);
    if (v->is_eog[id]) {
        if (!gram_is_complete(s))
            return memra_fail(err, "grammar: end-of-generation token %d before the grammar "
                              "is complete", id);
        s->finished = 1;
        return 0;
    }
    if (!v->pieces[id])
        return memra_fail(err, "grammar: token %d is a special token the grammar never allows",
                          id);
    if (gram_accept_bytes(s, v->pieces[id], v->lens[id], err))
        return memra_wrap(err, "token %d", id);
    return 0;
}
