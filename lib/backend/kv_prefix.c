/* The prefix index (kv_prefix.h): an open-addressing table from key to
 * block (linear probing, deletion by backward shift, so no tombstones
 * build up over a long run), and a doubly linked LRU list of the idle
 * blocks. */
#include "backend/kv_prefix.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/salt.h"

struct kv_prefix {
    int n_blocks, block_size, max_idle;
    uint64_t *key, *parent;  /* [n_blocks] of each indexed block */
    int32_t *tokens;         /* [n_blocks][block_size] */
    uint8_t *indexed;        /* [n_blocks] */
    int *slot_of;            /* [n_blocks] its table slot */
    int *prev, *next;        /* [n_blocks] the idle list, -1 ends */
    uint8_t *is_idle;
    int head, tail, n_idle, n_indexed;
    int *table;              /* [cap] block or -1 */
    int cap;                 /* a power of two, at least twice n_blocks */
    uint64_t hit_blocks, published, evictions;
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* The process's secret is in every root: keys cannot be computed from
 * outside, so nobody can make a block of theirs collide with the key of a
 * block another request's chain passes through (a lookup compares a
 * parent by its key only). */
uint64_t kv_prefix_root(uint64_t ns) { return mix(ns ^ 0x6d656d7261707265ull ^ memra_process_salt()); }

uint64_t kv_prefix_key(uint64_t parent, const int32_t *tokens, int block_size)
{
    uint64_t h = mix(parent + 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < block_size; i++)
        h = mix(h ^ (uint32_t)tokens[i]) + (uint64_t)i;
    return h | 1; /* never 0 */
}

kv_prefix *kv_prefix_new(int n_blocks, int block_size, int max_idle, memra_err *err)
{
    if (n_blocks <= 0 || block_size <= 0) {
        memra_fail(err, "prefix cache: %d blocks of %d tokens", n_blocks, block_size);
        return NULL;
    }
    kv_prefix *p = xcalloc(1, sizeof *p);
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->max_idle = max_idle < 0 || max_idle > n_blocks ? n_blocks : max_idle;
    p->key = xcalloc((size_t)n_blocks, sizeof *p->key);
    p->parent = xcalloc((size_t)n_blocks, sizeof *p->parent);
    p->tokens = xcalloc((size_t)n_blocks * (size_t)block_size, sizeof *p->tokens);
    p->indexed = xcalloc((size_t)n_blocks, 1);
    p->is_idle = xcalloc((size_t)n_blocks, 1);
    p->slot_of = xmalloc((size_t)n_blocks * sizeof *p->slot_of);
    p->prev = xmalloc((size_t)n_blocks * sizeof *p->prev);
    p->next = xmalloc((size_t)n_blocks * sizeof *p->next);
    p->cap = 16;
    while (p->cap < 2 * n_blocks)
        p->cap *= 2;
    p->table = xmalloc((size_t)p->cap * sizeof *p->table);
    memset(p->table, 0xff, (size_t)p->cap * sizeof *p->table);
    p->head = p->tail = -1;
    return p;
}

void kv_prefix_free(kv_prefix *p)
{
    if (!p)
        return;
    free(p->key);
    free(p->parent);
    free(p->tokens);
    free(p->indexed);
    free(p->is_idle);
    free(p->slot_of);
    free(p->prev);
    free(p->next);
    free(p->table);
    free(p);
}

int kv_prefix_find(const kv_prefix *p, uint64_t key, uint64_t parent, const int32_t *tokens)
{
    for (int i = (int)(key & (uint64_t)(p->cap - 1));; i = (i + 1) & (p->cap - 1)) {
        int b = p->table[i];
        if (b < 0)
            return -1;
        if (p->key[b] == key && p->parent[b] == parent &&
            !memcmp(p->tokens + (size_t)b * p->block_size, tokens,
                    (size_t)p->block_size * sizeof *tokens))
            return b;
    }
}

int kv_prefix_has(const kv_prefix *p, int b) { return p->indexed[b]; }

int kv_prefix_insert(kv_prefix *p, int b, uint64_t key, uint64_t parent, const int32_t *tokens)
{
    if (p->indexed[b])
        return 0;
    int i = (int)(key & (uint64_t)(p->cap - 1));
    for (; p->table[i] >= 0; i = (i + 1) & (p->cap - 1))
        if (p->key[p->table[i]] == key)
            return -1;
    p->table[i] = b;
    p->slot_of[b] = i;
    p->key[b] = key;
    p->parent[b] = parent;
    memcpy(p->tokens + (size_t)b * p->block_size, tokens, (size_t)p->block_size * sizeof *tokens);
    p->indexed[b] = 1;
    p->n_indexed++;
    p->published++;
    return 0;
}

static void unlink_idle(kv_prefix *p, int b)
{
    if (!p->is_idle[b])
        return;
    if (p->prev[b] >= 0)
        p->next[p->prev[b]] = p->next[b];
    else
        p->head = p->next[b];
    if (p->next[b] >= 0)
        p->prev[p->next[b]] = p->prev[b];
    else
        p->tail = p->prev[b];
    p->is_idle[b] = 0;
    p->n_idle--;
}

void kv_prefix_remove(kv_prefix *p, int b)
{
    if (!p->indexed[b])
        return;
    unlink_idle(p, b);
    /* backward-shift deletion: move later entries of the probe run up */
    int i = p->slot_of[b], mask = p->cap - 1;
    p->table[i] = -1;
    for (int j = (i + 1) & mask; p->table[j] >= 0; j = (j + 1) & mask) {
        int c = p->table[j];
        int home = (int)(p->key[c] & (uint64_t)mask);
        /* c may fill the hole at i when its home is not in (i, j] */
        int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            p->table[i] = c;
            p->slot_of[c] = i;
            p->table[j] = -1;
            i = j;
        }
    }
    p->indexed[b] = 0;
    p->n_indexed--;
}

void kv_prefix_idle(kv_prefix *p, int b)
{
    if (!p->indexed[b] || p->is_idle[b])
        return;
    p->is_idle[b] = 1;
    p->prev[b] = p->tail;
    p->next[b] = -1;
    if (p->tail >= 0)
        p->next[p->tail] = b;
    else
        p->head = b;
    p->tail = b;
    p->n_idle++;
}

void kv_prefix_unidle(kv_prefix *p, int b) { unlink_idle(p, b); }

int kv_prefix_n_idle(const kv_prefix *p) { return p->n_idle; }

int kv_prefix_evict(kv_prefix *p)
{
    int b = p->head;
    if (b < 0)
        return -1;
    kv_prefix_remove(p, b);
    p->evictions++;
    return b;
}

int kv_prefix_over_cap(kv_prefix *p)
{
    return p->n_idle > p->max_idle ? kv_prefix_evict(p) : -1;
}

void kv_prefix_count_hits(kv_prefix *p, int n) { p->hit_blocks += (uint64_t)n; }

void kv_prefix_get_stats(const kv_prefix *p, kv_prefix_stats *out)
{
    out->hit_blocks = p->hit_blocks;
    out->published = p->published;
    out->evictions = p->evictions;
    out->indexed = p->n_indexed;
    out->idle = p->n_idle;
}
