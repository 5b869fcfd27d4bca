/* The ids of long text fragments, remembered. The encoder cuts a text at
 * its added and special tokens first and encodes each fragment between
 * them on its own (tok_encode.c), so a fragment's ids are a function of
 * its bytes, of where it sits (first in the text, after a special token)
 * and of special parsing. A server sees the same long fragments again and
 * again (an agent's system prompt, a conversation's earlier turns between
 * their template's markers): each is encoded once and then found by its
 * hash and bytes. Entries are whole copies of the bytes, compared in full
 * on a hit, so a hit gives the ids an encoding would. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tok/tok_internal.h"

typedef struct {
    uint64_t hash, used;
    int ctx;
    char *bytes;
    size_t len;
    int32_t *ids;
    size_t n_ids;
} text_entry;

struct tok_cache {
    pthread_mutex_t mu;
    text_entry *e;
    int n, cap;
    size_t bytes, max_bytes;
    uint64_t clock, hits, misses;
};

tok_cache *tok_cache_new(size_t max_bytes, int max_entries)
{
    tok_cache *c = xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->cap = max_entries > 0 ? max_entries : 1;
    c->e = xcalloc((size_t)c->cap, sizeof *c->e);
    c->max_bytes = max_bytes;
    return c;
}

void tok_cache_free(tok_cache *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n; i++) {
        free(c->e[i].bytes);
        free(c->e[i].ids);
    }
    free(c->e);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

void tok_cache_stats(tok_cache *c, uint64_t *hits, uint64_t *misses)
{
    pthread_mutex_lock(&c->mu);
    *hits = c->hits;
    *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}

uint64_t tok_text_hash(const char *p, size_t n, int ctx)
{
    uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n << 8) ^ (uint64_t)ctx;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 32;
    }
    for (; i < n; i++)
        h = (h ^ (uint8_t)p[i]) * 0x100000001B3ull;
    return h ^ (h >> 29);
}

int tok_cache_get(tok_cache *c, uint64_t hash, int ctx, const char *p, size_t n, tok_ids *out)
{
    int found = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n && !found; i++) {
        text_entry *e = &c->e[i];
        if (e->hash != hash || e->ctx != ctx || e->len != n || memcmp(e->bytes, p, n))
            continue;
        e->used = ++c->clock;
        for (size_t k = 0; k < e->n_ids; k++)
            tok_ids_push(out, e->ids[k]);
        found = 1;
    }
    if (found)
        c->hits++;
    else
        c->misses++;
    pthread_mutex_unlock(&c->mu);
    return found;
}

void tok_cache_put(tok_cache *c, uint64_t hash, int ctx, const char *p, size_t n,
                   const int32_t *ids, size_t n_ids)
{
    size_t cost = n + n_ids * sizeof *ids;
    if (cost > c->max_bytes)
        return;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (c->e[i].hash == hash && c->e[i].ctx == ctx && c->e[i].len == n &&
            !memcmp(c->e[i].bytes, p, n)) {
            pthread_mutex_unlock(&c->mu); /* another thread put it first */
            return;
        }
    /* the least recently used go until it fits */
    while (c->n > 0 && (c->n == c->cap || c->bytes + cost > c->max_bytes)) {
        int lru = 0;
        for (int i = 1; i < c->n; i++)
            if (c->e[i].used < c->e[lru].used)
                lru = i;
        c->bytes -= c->e[lru].len + c->e[lru].n_ids * sizeof *ids;
        free(c->e[lru].bytes);
        free(c->e[lru].ids);
        c->e[lru] = c->e[--c->n];
    }
    text_entry *e = &c->e[c->n++];
    e->hash = hash;
    e->ctx = ctx;
    e->used = ++c->clock;
    e->bytes = xmalloc(n);
    memcpy(e->bytes, p, n);
    e->len = n;
    e->ids = xmalloc((n_ids ? n_ids : 1) * sizeof *ids);
    if (n_ids)
        memcpy(e->ids, ids, n_ids * sizeof *ids);
    e->n_ids = n_ids;
    c->bytes += cost;
    pthread_mutex_unlock(&c->mu);
}
