/* Whole masks, remembered per state. The mask is a pure function of the
 * matcher's stack set and the vocabulary, and decoding keeps coming back to
 * the same few sets: inside a free JSON string every ordinary character
 * leads back to the set it left, so after the first token of a string each
 * step would walk the whole trie (milliseconds) to rebuild the mask it just
 * built. The cache keys a mask by the set's contents, written canonically
 * (every stack as its positions top to bottom, the stacks in a fixed
 * order), so it survives the pool's compaction and node renumbering, and by
 * the vocabulary's serial number. A hit is the key, one compare and a copy
 * of the mask (19 KB for 151,936 tokens): microseconds.
 *
 * Only masks whose walk visited many trie nodes are kept; a cheap mask is
 * quicker to walk again than to copy, and keeping it would push the
 * expensive ones out. The cache holds a few entries, least recently used
 * out first, and lives in the state (a state belongs to one thread), so it
 * needs no lock. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "grammar/gram_internal.h"

/* Walks that visit fewer trie nodes than this are not cached. */
#define CACHE_MIN_VISITS 2048
/* Sets with longer keys (very deep nesting, thousands of parses) are not
 * cached: each entry stays bounded. */
#define CACHE_MAX_KEY 4096

typedef struct {
    uint64_t hash, vocab_serial, used;
    uint32_t *key;
    uint32_t key_len, key_cap;
    uint32_t *mask;
    size_t mask_words;
    int allowed;
} cache_entry;

struct gram_mask_cache {
    int cap, n;
    cache_entry *e;
    uint64_t clock;
    uint64_t hits, misses;
    uint32_t *key; /* the key being built */
    uint32_t key_cap;
    uint32_t *order;
    uint32_t order_cap;
};

gram_mask_cache *gram_mask_cache_new(int entries)
{
    gram_mask_cache *c = xcalloc(1, sizeof *c);
    c->cap = entries < 0 ? 0 : entries;
    c->e = c->cap ? xcalloc((size_t)c->cap, sizeof *c->e) : NULL;
    return c;
}

void gram_mask_cache_free(gram_mask_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].key);
        free(c->e[i].mask);
    }
    free(c->e);
    free(c->key);
    free(c->order);
    free(c);
}

int gram_mask_cache_capacity(const gram_mask_cache *c)
{
    return c ? c->cap : 0;
}

/* Stacks in a fixed order: by their structural hash (a node's hash is made
 * of its position and the hash below it), ties by their positions. */
static int cmp_stacks(const gram_pool *p, uint32_t a, uint32_t b)
{
    if (p->nodes[a].hash != p->nodes[b].hash)
        return p->nodes[a].hash < p->nodes[b].hash ? -1 : 1;
    while (a != b) {
        if (!a || !b)
            return a ? 1 : -1;
        if (p->nodes[a].pos != p->nodes[b].pos)
            return p->nodes[a].pos < p->nodes[b].pos ? -1 : 1;
        a = p->nodes[a].parent;
        b = p->nodes[b].parent;
    }
    return 0;
}

static uint64_t mix64(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 33;
    return h;
}

/* The canonical key of the state's set into c->key; its length, or 0 when
 * it is too long to cache. */
static uint32_t build_key(gram_mask_cache *c, const gram_state *s, uint64_t *hash)
{
    const gram_pool *p = &s->pool;
    uint32_t n = s->set_end - s->set_start;
    if (n > CACHE_MAX_KEY)
        return 0;
    if (n > c->order_cap) {
        c->order_cap = n;
        c->order = xrealloc(c->order, n * sizeof *c->order);
    }
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = p->tops[s->set_start + i], j = i;
        while (j > 0 && cmp_stacks(p, c->order[j - 1], t) > 0) {
            c->order[j] = c->order[j - 1];
            j--;
        }
        c->order[j] = t;
    }
    if (!c->key) {
        c->key_cap = CACHE_MAX_KEY;
        c->key = xmalloc(c->key_cap * sizeof *c->key);
    }
    uint32_t len = 0;
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (uint32_t i = 0; i < n; i++) {
        for (uint32_t k = c->order[i];; k = p->nodes[k].parent) {
            if (len == CACHE_MAX_KEY)
                return 0;
            uint32_t w = k ? p->nodes[k].pos : UINT32_MAX; /* the bottom ends a stack */
            c->key[len++] = w;
            h = mix64(h ^ w);
            if (!k)
                break;
        }
    }
    *hash = h;
    return len;
}

/* Keep a mask in the state's cache (the least recently used entry goes). */
static void put(gram_mask_cache *c, const uint32_t *key, uint32_t len, uint64_t h,
                uint64_t serial, const uint32_t *mask, size_t words, int allowed)
{
    cache_entry *e = &c->e[0];
    if (c->n < c->cap) {
        e = &c->e[c->n++];
    } else {
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < e->used)
                e = &c->e[i];
    }
    if (e->mask_words != words) {
        free(e->mask);
        e->mask = xmalloc(words * sizeof *e->mask);
        e->mask_words = words;
    }
    if (e->key_cap < len) {
        free(e->key);
        e->key = xmalloc(len * sizeof *e->key);
        e->key_cap = len;
    }
    memcpy(e->key, key, len * sizeof *key);
    memcpy(e->mask, mask, words * sizeof *mask);
    e->key_len = len;
    e->hash = h;
    e->vocab_serial = serial;
    e->allowed = allowed;
    e->used = c->clock;
}

/* ---- the process-wide cache ----
 *
 * Many sequences decode under grammars of one text at once (a batch of
 * requests with one schema, n choices, memra-bench's rows) and meet the
 * same states: the first token of a string value, say, whose mask is a
 * walk of the whole trie. A state's own cache helps that state only; this
 * one, keyed also by the grammar text's fingerprint, lets every sequence
 * reuse a mask any of them walked. It is bounded (SHARED_ENTRIES masks,
 * least recently used out first) and locked: a lookup is a key compare
 * and a copy under the lock, against a walk of milliseconds. */
#define SHARED_ENTRIES 256

typedef struct {
    cache_entry e;
    uint64_t fingerprint;
} shared_entry;

static pthread_mutex_t shared_mu = PTHREAD_MUTEX_INITIALIZER;
static shared_entry shared[SHARED_ENTRIES];
static int shared_n;
static uint64_t shared_clock;

static int shared_get(uint64_t fp, uint64_t h, uint64_t serial, const uint32_t *key,
                      uint32_t len, uint32_t *mask, size_t words, int *allowed)
{
    int hit = 0;
    pthread_mutex_lock(&shared_mu);
    for (int i = 0; i < shared_n && !hit; i++) {
        cache_entry *e = &shared[i].e;
        if (shared[i].fingerprint == fp && e->hash == h && e->vocab_serial == serial &&
            e->key_len == len && e->mask_words == words &&
            memcmp(e->key, key, len * sizeof *key) == 0) {
            memcpy(mask, e->mask, words * sizeof *mask);
            *allowed = e->allowed;
            e->used = ++shared_clock;
            hit = 1;
        }
    }
    pthread_mutex_unlock(&shared_mu);
    return hit;
}

static void shared_put(uint64_t fp, uint64_t h, uint64_t serial, const uint32_t *key,
                       uint32_t len, const uint32_t *mask, size_t words, int allowed)
{
    pthread_mutex_lock(&shared_mu);
    shared_entry *se = &shared[0];
    if (shared_n < SHARED_ENTRIES) {
        se = &shared[shared_n++];
    } else {
        for (int i = 1; i < shared_n; i++)
            if (shared[i].e.used < se->e.used)
                se = &shared[i];
    }
    gram_mask_cache one = {.cap = 1, .n = 0, .e = &se->e, .clock = ++shared_clock};
    put(&one, key, len, h, serial, mask, words, allowed);
    se->fingerprint = fp;
    pthread_mutex_unlock(&shared_mu);
}

int gram_mask(const gram_state *s, const gram_vocab *v, uint32_t *mask_bits)
{
    gram_mask_cache *c = s->cache;
    size_t words = gram_mask_words(v);
    if (s->finished || !c || !c->cap)
        return gram_mask_walk(s, v, mask_bits, NULL);
    uint64_t h = 0, serial = gram_vocab_serial(v);
    uint32_t len = build_key(c, s, &h);
    int allowed_shared = 0;
    c->clock++;
    if (len)
        for (int i = 0; i < c->n; i++) {
            cache_entry *e = &c->e[i];
            if (e->hash == h && e->vocab_serial == serial && e->key_len == len &&
                memcmp(e->key, c->key, len * sizeof *c->key) == 0) {
                memcpy(mask_bits, e->mask, words * sizeof *mask_bits);
                e->used = c->clock;
                c->hits++;
                return e->allowed;
            }
        }
    c->misses++;
    uint64_t fp = s->pool.g->fingerprint;
    if (len && shared_get(fp, h, serial, c->key, len, mask_bits, words, &allowed_shared)) {
        put(c, c->key, len, h, serial, mask_bits, words, allowed_shared);
        return allowed_shared;
    }
    uint64_t visits = 0;
    int allowed = gram_mask_walk(s, v, mask_bits, &visits);
    if (!len || visits < CACHE_MIN_VISITS)
        return allowed;
    put(c, c->key, len, h, serial, mask_bits, words, allowed);
    shared_put(fp, h, serial, c->key, len, mask_bits, words, allowed);
    return allowed;
}

void gram_state_set_mask_cache(gram_state *s, int entries)
{
    gram_mask_cache_free(s->cache);
    s->cache = gram_mask_cache_new(entries);
}

void gram_state_mask_cache_stats(const gram_state *s, gram_mask_cache_stats *out)
{
    memset(out, 0, sizeof *out);
    const gram_mask_cache *c = s->cache;
    if (!c)
        return;
    out->hits = c->hits;
    out->misses = c->misses;
    out->entries = c->n;
    out->capacity = c->cap;
    out->bytes = sizeof *c + (size_t)c->cap * sizeof *c->e + c->key_cap * sizeof *c->key +
                 c->order_cap * sizeof *c->order;
    for (int i = 0; i < c->n; i++)
        out->bytes += c->e[i].mask_words * sizeof *c->e[i].mask +
                      c->e[i].key_cap * sizeof *c->e[i].key;
}
