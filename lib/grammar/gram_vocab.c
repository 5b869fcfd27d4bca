/* Token masks. The vocabulary becomes a byte trie once; a step walks it
 * depth first beside the matcher: entering a child advances the stack set
 * by the child's byte, and a byte no stack reads cuts off the whole subtree
 * (every token that starts with that prefix) at once. Tokens that end at a
 * node the walk reaches are allowed. The work is one advance per trie node
 * visited, not per byte of every token. */
#include <stdatomic.h>
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
    uint64_t serial;
};

static atomic_uint_fast64_t g_vocab_serial;

uint64_t gram_vocab_serial(const gram_vocab *v)
{
    return v->serial;
}

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
    v->serial = atomic_fetch_add(&g_vocab_serial, 1) + 1;
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

/* The walk caches what it computes. Stack sets are interned (nodes are
 * hash-consed and a set is its sorted list of tops), so a set is a small id
 * and (set, byte) -> set is a transition computed once per mask: inside a
 * JSON string almost every byte leads back to the same few sets, and the
 * walk over most of the trie becomes table lookups. */
typedef struct {
    uint32_t start, end; /* tops of the pool */
    uint32_t hash;
    gram_byteset bytes;  /* what any stack of the set reads next */
} walk_set;

typedef struct {
    gram_pool pool;
    const gram_vocab *v;
    uint32_t *mask;
    int allowed;
    uint64_t visits;
    walk_set *sets;
    uint32_t n_sets, cap_sets;
    uint32_t *set_tab; /* open addressing: set id + 1, 0 empty */
    uint32_t set_cap;
    uint64_t *trans; /* open addressing: (set << 8 | byte) + 1 << 32 | result + 1 */
    uint32_t trans_cap, n_trans;
    /* The first sets also get a direct table (256 entries: 0 unknown, 1 no
     * stack reads the byte, else the next set + 2):
     * the lookups that run once per trie node stay a single load. */
    uint32_t **direct;
} walker;

#define WALK_DIRECT_SETS 4096

static uint32_t mix32(uint32_t h)
{
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    return h ^ (h >> 16);
}

static void sort_tops(uint32_t *t, uint32_t n)
{
    for (uint32_t i = 1; i < n; i++) {
        uint32_t x = t[i], j = i;
        while (j > 0 && t[j - 1] > x) {
            t[j] = t[j - 1];
            j--;
        }
        t[j] = x;
    }
}

static int same_set(const walker *w, const walk_set *a, uint32_t start, uint32_t end)
{
    return a->end - a->start == end - start &&
           memcmp(&w->pool.tops[a->start], &w->pool.tops[start],
                  (end - start) * sizeof(uint32_t)) == 0;
}

static void set_tab_put(walker *w, uint32_t id)
{
    uint32_t i = w->sets[id].hash & (w->set_cap - 1);
    while (w->set_tab[i])
        i = (i + 1) & (w->set_cap - 1);
    w->set_tab[i] = id + 1;
}

/* The id of the set tops[start..n_tops); a set seen before gives its old id
 * and its tops are dropped. */
static uint32_t intern_set(walker *w, uint32_t start)
{
    gram_pool *p = &w->pool;
    uint32_t end = p->n_tops;
    sort_tops(&p->tops[start], end - start);
    uint32_t h = 0x811C9DC5u;
    for (uint32_t i = start; i < end; i++)
        h = mix32(h ^ p->tops[i]);
    for (uint32_t i = h & (w->set_cap - 1); w->set_tab[i]; i = (i + 1) & (w->set_cap - 1)) {
        const walk_set *s = &w->sets[w->set_tab[i] - 1];
        if (s->hash == h && same_set(w, s, start, end)) {
            p->n_tops = start;
            return w->set_tab[i] - 1;
        }
    }
    if (w->n_sets == w->cap_sets) {
        w->cap_sets *= 2;
        w->sets = xrealloc(w->sets, w->cap_sets * sizeof *w->sets);
    }
    walk_set *s = &w->sets[w->n_sets];
    s->start = start;
    s->end = end;
    s->hash = h;
    memset(&s->bytes, 0, sizeof s->bytes);
    const gram_grammar *g = p->g;
    for (uint32_t i = start; i < end; i++) {
        uint32_t t = p->tops[i];
        if (!t)
            continue;
        const gram_byteset *b = &g->sets[g->elems[p->nodes[t].pos].arg];
        for (int k = 0; k < 8; k++)
            s->bytes.w[k] |= b->w[k];
    }
    uint32_t id = w->n_sets++;
    if (2 * w->n_sets > w->set_cap) {
        free(w->set_tab);
        w->set_cap *= 2;
        w->set_tab = xcalloc(w->set_cap, sizeof *w->set_tab);
        for (uint32_t k = 0; k < w->n_sets; k++)
            set_tab_put(w, k);
    } else {
        set_tab_put(w, id);
    }
    return id;
}

static uint32_t trans_slot(const walker *w, uint32_t key)
{
    return mix32(key) & (w->trans_cap - 1);
}

static void trans_put(walker *w, uint32_t key, uint32_t val)
{
    uint32_t i = trans_slot(w, key);
    while (w->trans[i])
        i = (i + 1) & (w->trans_cap - 1);
    w->trans[i] = ((uint64_t)(key + 1) << 32) | val;
}

/* The set after reading `byte` from set `id`; UINT32_MAX when no stack
 * reads it. */
static uint32_t step_hashed(walker *w, uint32_t id, unsigned byte);

static inline uint32_t step(walker *w, uint32_t id, unsigned byte)
{
    if (id >= WALK_DIRECT_SETS)
        return step_hashed(w, id, byte);
    uint32_t *d = w->direct[id];
    if (!d)
        d = w->direct[id] = xcalloc(256, sizeof *d);
    if (!d[byte]) {
        uint32_t r = step_hashed(w, id, byte);
        d[byte] = r == UINT32_MAX ? 1 : r + 2;
    }
    return d[byte] == 1 ? UINT32_MAX : d[byte] - 2;
}

static uint32_t step_hashed(walker *w, uint32_t id, unsigned byte)
{
    uint32_t key = id << 8 | byte;
    for (uint32_t i = trans_slot(w, key); w->trans[i]; i = (i + 1) & (w->trans_cap - 1))
        if ((uint32_t)(w->trans[i] >> 32) == key + 1)
            return (uint32_t)w->trans[i] - 1;
    uint32_t start = gram_pool_advance(&w->pool, w->sets[id].start, w->sets[id].end, byte);
    uint32_t r = start == w->pool.n_tops ? UINT32_MAX : intern_set(w, start);
    if (2 * (w->n_trans + 1) > w->trans_cap) {
        uint64_t *old = w->trans;
        uint32_t old_cap = w->trans_cap;
        w->trans_cap *= 2;
        w->trans = xcalloc(w->trans_cap, sizeof *w->trans);
        for (uint32_t i = 0; i < old_cap; i++)
            if (old[i])
                trans_put(w, (uint32_t)(old[i] >> 32) - 1, (uint32_t)old[i]);
        free(old);
    }
    trans_put(w, key, r + 1);
    w->n_trans++;
    return r;
}

static void walk(walker *w, uint32_t node, uint32_t id)
{
    const trie_node *nodes = w->v->nodes;
    for (uint32_t c = nodes[node].first_child; c; c = nodes[c].next_sibling) {
        if (!gram_bs_has(&w->sets[id].bytes, nodes[c].byte))
            continue;
        uint32_t next = step(w, id, nodes[c].byte);
        if (next == UINT32_MAX)
            continue;
        w->visits++;
        for (int32_t t = nodes[c].first_token; t >= 0; t = w->v->next_token[t]) {
            if (w->v->is_eog[t])
                continue; /* allowed by completeness, never by its bytes */
            w->mask[t >> 5] |= 1u << (t & 31);
            w->allowed++;
        }
        if (nodes[c].first_child)
            walk(w, c, next);
    }
}

int gram_mask_walk(const gram_state *s, const gram_vocab *v, uint32_t *mask_bits,
                   uint64_t *visits)
{
    memset(mask_bits, 0, gram_mask_words(v) * sizeof *mask_bits);
    if (s->finished)
        return 0;
    walker w = {.v = v, .mask = mask_bits};
    /* The walk has a pool of its own, hash-consed, seeded with the state's
     * live stacks; the state is not touched. */
    gram_pool_init(&w.pool, s->pool.g);
    gram_pool_intern(&w.pool);
    w.cap_sets = 64;
    w.sets = xmalloc(w.cap_sets * sizeof *w.sets);
    w.set_cap = 256;
    w.set_tab = xcalloc(w.set_cap, sizeof *w.set_tab);
    w.trans_cap = 4096;
    w.trans = xcalloc(w.trans_cap, sizeof *w.trans);
    w.direct = xcalloc(WALK_DIRECT_SETS, sizeof *w.direct);
    uint32_t start = w.pool.n_tops;
    for (uint32_t i = s->set_start; i < s->set_end; i++) {
        uint32_t t = gram_pool_copy_stack(&w.pool, &s->pool, s->pool.tops[i]);
        uint32_t j = start;
        while (j < w.pool.n_tops && w.pool.tops[j] != t)
            j++;
        if (j == w.pool.n_tops) {
            if (w.pool.n_tops == w.pool.cap_tops) {
                w.pool.cap_tops *= 2;
                w.pool.tops = xrealloc(w.pool.tops, w.pool.cap_tops * sizeof *w.pool.tops);
            }
            w.pool.tops[w.pool.n_tops++] = t;
        }
    }
    walk(&w, 0, intern_set(&w, start));
    gram_pool_free(&w.pool);
    free(w.sets);
    free(w.set_tab);
    free(w.trans);
    for (uint32_t i = 0; i < WALK_DIRECT_SETS && i < w.n_sets; i++)
        free(w.direct[i]);
    free(w.direct);
    if (gram_is_complete(s))
        for (int i = 0; i < v->n; i++)
            if (v->is_eog[i]) {
                mask_bits[i >> 5] |= 1u << (i & 31);
                w.allowed++;
            }
    if (visits)
        *visits = w.visits;
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
