/* The matcher: the grammar as a pushdown automaton over bytes, run as a set
 * of stacks (every way the text so far can be parsed, at once). Reading a
 * byte keeps the stacks whose top byte set has it and moves each past it,
 * expanding rule references until every top is a byte set again. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "grammar/gram_internal.h"

void gram_pool_init(gram_pool *p, const gram_grammar *g)
{
    memset(p, 0, sizeof *p);
    p->g = g;
    p->cap_nodes = 64;
    p->nodes = xmalloc(p->cap_nodes * sizeof *p->nodes);
    p->nodes[0] = (gram_node){0, 0, 0};
    p->n_nodes = 1;
    p->cap_tops = 64;
    p->tops = xmalloc(p->cap_tops * sizeof *p->tops);
}

void gram_pool_free(gram_pool *p)
{
    free(p->nodes);
    free(p->tops);
    free(p->intern);
    memset(p, 0, sizeof *p);
}

static uint32_t node_hash(const gram_pool *p, uint32_t pos, uint32_t below)
{
    uint32_t h = p->nodes[below].hash * 0x01000193u ^ (pos + 1) * 0x9E3779B1u;
    return h ^ (h >> 15);
}

static uint32_t intern_slot(const gram_pool *p, uint32_t pos, uint32_t below)
{
    uint32_t h = pos * 0x9E3779B1u + below;
    h ^= h >> 16;
    h *= 0x7FEB352Du;
    h ^= h >> 15;
    h *= 0x846CA68Bu;
    h ^= h >> 16;
    return h & (p->intern_cap - 1);
}

void gram_pool_intern(gram_pool *p)
{
    p->intern_cap = 1024;
    p->intern = xcalloc(p->intern_cap, sizeof *p->intern);
}

static void intern_grow(gram_pool *p)
{
    free(p->intern);
    p->intern_cap *= 2;
    p->intern = xcalloc(p->intern_cap, sizeof *p->intern);
    p->intern_used = p->n_nodes - 1;
    for (uint32_t n = 1; n < p->n_nodes; n++) {
        uint32_t i = intern_slot(p, p->nodes[n].pos, p->nodes[n].parent);
        while (p->intern[i])
            i = (i + 1) & (p->intern_cap - 1);
        p->intern[i] = n;
    }
}

static uint32_t new_node(gram_pool *p, uint32_t pos, uint32_t below, uint32_t hash)
{
    uint32_t slot = 0;
    if (p->intern) {
        slot = intern_slot(p, pos, below);
        for (uint32_t n; (n = p->intern[slot]); slot = (slot + 1) & (p->intern_cap - 1))
            if (n < p->n_nodes && p->nodes[n].pos == pos && p->nodes[n].parent == below)
                return n;
    }
    if (p->n_nodes == p->cap_nodes) {
        p->cap_nodes *= 2;
        p->nodes = xrealloc(p->nodes, p->cap_nodes * sizeof *p->nodes);
    }
    p->nodes[p->n_nodes] = (gram_node){pos, below, hash};
    if (p->intern) {
        p->intern[slot] = p->n_nodes++;
        if (2 * ++p->intern_used > p->intern_cap)
            intern_grow(p);
        return p->n_nodes - 1;
    }
    return p->n_nodes++;
}

uint32_t gram_pool_node(gram_pool *p, uint32_t pos, uint32_t below)
{
    return new_node(p, pos, below, node_hash(p, pos, below));
}

static int same_stack(const gram_pool *p, uint32_t a, uint32_t b)
{
    while (a != b) {
        if (a == 0 || b == 0)
            return 0;
        const gram_node *x = &p->nodes[a], *y = &p->nodes[b];
        if (x->hash != y->hash || x->pos != y->pos)
            return 0;
        a = x->parent;
        b = y->parent;
    }
    return 1;
}

static void push_top(gram_pool *p, uint32_t t)
{
    if (p->n_tops == p->cap_tops) {
        p->cap_tops *= 2;
        p->tops = xrealloc(p->tops, p->cap_tops * sizeof *p->tops);
    }
    p->tops[p->n_tops++] = t;
}

static void add_top(gram_pool *p, uint32_t pos, uint32_t below, uint32_t set_start)
{
    if (pos == UINT32_MAX) { /* the empty stack: the whole grammar matched */
        for (uint32_t i = set_start; i < p->n_tops; i++)
            if (p->tops[i] == 0)
                return;
        push_top(p, 0);
        return;
    }
    uint32_t h = node_hash(p, pos, below);
    if (p->intern) {
        uint32_t n = new_node(p, pos, below, h);
        for (uint32_t i = set_start; i < p->n_tops; i++)
            if (p->tops[i] == n)
                return;
        push_top(p, n);
        return;
    }
    for (uint32_t i = set_start; i < p->n_tops; i++) {
        uint32_t t = p->tops[i];
        if (t && p->nodes[t].hash == h && p->nodes[t].pos == pos &&
            same_stack(p, p->nodes[t].parent, below))
            return;
    }
    push_top(p, new_node(p, pos, below, h));
}

void gram_pool_expand(gram_pool *p, uint32_t pos, uint32_t below, uint32_t set_start)
{
    const gram_grammar *g = p->g;
    for (;;) {
        const gram_elem *e = &g->elems[pos];
        if (e->kind == GE_BYTES) {
            add_top(p, pos, below, set_start);
            return;
        }
        if (e->kind == GE_END) {
            if (below == 0) {
                add_top(p, UINT32_MAX, 0, set_start);
                return;
            }
            /* Return to the caller: its continuation is never at an END. */
            const gram_node *n = &p->nodes[below];
            pos = n->pos;
            below = n->parent;
            continue;
        }
        /* A reference: where to go on when the rule is done. A reference
         * that ends its alternative returns straight to the caller's caller,
         * so right recursion (repetition) keeps the stack flat. */
        uint32_t next = pos + 1, ret = below;
        if (g->elems[next].kind != GE_END)
            ret = new_node(p, next, below, node_hash(p, next, below));
        uint32_t r = e->arg;
        for (uint32_t a = g->alt_first[r]; a < g->alt_first[r + 1]; a++)
            gram_pool_expand(p, g->alts[a], ret, set_start);
        return;
    }
}

uint32_t gram_pool_advance(gram_pool *p, uint32_t from, uint32_t to, unsigned byte)
{
    const gram_grammar *g = p->g;
    uint32_t start = p->n_tops;
    for (uint32_t i = from; i < to; i++) {
        uint32_t t = p->tops[i];
        if (t == 0)
            continue;
        gram_node n = p->nodes[t];
        if (gram_bs_has(&g->sets[g->elems[n.pos].arg], byte))
            gram_pool_expand(p, n.pos + 1, n.parent, start);
    }
    return start;
}

gram_state *gram_state_new(const gram_grammar *g)
{
    gram_state *s = xcalloc(1, sizeof *s);
    gram_pool_init(&s->pool, g);
    gram_pool_intern(&s->pool);
    s->set_start = 0;
    for (uint32_t a = g->alt_first[g->root]; a < g->alt_first[g->root + 1]; a++)
        gram_pool_expand(&s->pool, g->alts[a], 0, 0);
    s->set_end = s->pool.n_tops;
    s->cache = gram_mask_cache_new(GRAM_MASK_CACHE_DEFAULT);
    return s;
}

gram_state *gram_state_clone(const gram_state *s)
{
    gram_state *c = xcalloc(1, sizeof *c);
    *c = *s;
    c->pool.nodes = xmalloc(s->pool.cap_nodes * sizeof *c->pool.nodes);
    memcpy(c->pool.nodes, s->pool.nodes, s->pool.n_nodes * sizeof *c->pool.nodes);
    c->pool.tops = xmalloc(s->pool.cap_tops * sizeof *c->pool.tops);
    memcpy(c->pool.tops, s->pool.tops, s->pool.n_tops * sizeof *c->pool.tops);
    c->pool.intern = xmalloc(s->pool.intern_cap * sizeof *c->pool.intern);
    memcpy(c->pool.intern, s->pool.intern, s->pool.intern_cap * sizeof *c->pool.intern);
    /* The clone's cache starts empty: the masks would be right for it, but
     * copying them costs more than a clone for one token check is worth. */
    c->cache = gram_mask_cache_new(gram_mask_cache_capacity(s->cache));
    return c;
}

void gram_state_free(gram_state *s)
{
    if (!s)
        return;
    gram_pool_free(&s->pool);
    gram_mask_cache_free(s->cache);
    free(s);
}

/* Copies a stack into another pool, bottom first, without recursion (a
 * deeply nested document makes deep stacks). */
uint32_t gram_pool_copy_stack(gram_pool *dst, const gram_pool *src, uint32_t n)
{
    uint32_t depth = 0;
    for (uint32_t k = n; k; k = src->nodes[k].parent)
        depth++;
    if (!depth)
        return 0;
    uint32_t *chain = xmalloc(depth * sizeof *chain);
    uint32_t i = depth;
    for (uint32_t k = n; k; k = src->nodes[k].parent)
        chain[--i] = k;
    uint32_t below = 0;
    for (i = 0; i < depth; i++)
        below = gram_pool_node(dst, src->nodes[chain[i]].pos, below);
    free(chain);
    return below;
}

/* Keeps only the live set's stacks, so a long generation does not grow the
 * pool without bound. A node shared by several stacks is copied once (map:
 * old index -> new index, 0 not yet copied). */
static void compact(gram_state *s)
{
    gram_pool fresh;
    gram_pool_init(&fresh, s->pool.g);
    gram_pool_intern(&fresh);
    uint32_t *map = xcalloc(s->pool.n_nodes, sizeof *map);
    uint32_t *chain = NULL;
    uint32_t cap = 0;
    for (uint32_t i = s->set_start; i < s->set_end; i++) {
        uint32_t depth = 0, k = s->pool.tops[i];
        for (; k && !map[k]; k = s->pool.nodes[k].parent) {
            if (depth == cap) {
                cap = cap ? 2 * cap : 64;
                chain = xrealloc(chain, cap * sizeof *chain);
            }
            chain[depth++] = k;
        }
        uint32_t below = k ? map[k] : 0;
        while (depth--) {
            below = gram_pool_node(&fresh, s->pool.nodes[chain[depth]].pos, below);
            map[chain[depth]] = below;
        }
        push_top(&fresh, s->pool.tops[i] ? map[s->pool.tops[i]] : 0);
    }
    free(chain);
    free(map);
    gram_pool_free(&s->pool);
    s->pool = fresh;
    s->set_start = 0;
    s->set_end = fresh.n_tops;
    s->live_nodes = fresh.n_nodes;
}

int gram_accept_bytes(gram_state *s, const void *bytes, size_t len, memra_err *err)
{
    const unsigned char *b = bytes;
    if (s->finished && len)
        return memra_fail(err, "grammar: text after the end of generation");
    uint32_t n_nodes = s->pool.n_nodes, n_tops = s->pool.n_tops;
    uint32_t from = s->set_start, to = s->set_end;
    for (size_t i = 0; i < len; i++) {
        uint32_t start = gram_pool_advance(&s->pool, from, to, b[i]);
        if (start == s->pool.n_tops) {
            s->pool.n_nodes = n_nodes;
            s->pool.n_tops = n_tops;
            unsigned c = b[i];
            if (c >= 0x20 && c < 0x7F)
                return memra_fail(err, "grammar: byte %zu ('%c') is not allowed here", i, c);
            return memra_fail(err, "grammar: byte %zu (0x%02X) is not allowed here", i, c);
        }
        from = start;
        to = s->pool.n_tops;
    }
    s->set_start = from;
    s->set_end = to;
    /* Compacting costs the live stacks' size, so it waits until the pool
     * has doubled past them: amortized, even for deeply nested text. */
    if (s->pool.n_nodes > 2 * s->live_nodes + 4096) {
        compact(s);
    } else if (s->set_start > 4096) {
        /* Old sets are dead: only the live one moves, to the front. */
        memmove(s->pool.tops, s->pool.tops + s->set_start, (to - from) * sizeof *s->pool.tops);
        s->pool.n_tops = s->set_end = to - from;
        s->set_start = 0;
    }
    return 0;
}

int gram_is_complete(const gram_state *s)
{
    for (uint32_t i = s->set_start; i < s->set_end; i++)
        if (s->pool.tops[i] == 0)
            return 1;
    return 0;
}

int gram_is_final(const gram_state *s)
{
    return gram_is_complete(s) && s->set_end - s->set_start == 1;
}

int gram_is_finished(const gram_state *s)
{
    return s->finished;
}
