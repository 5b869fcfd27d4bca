/* A string -> id map for vocabularies (hundreds of thousands of tokens):
 * open addressing with linear probing over FNV-1a hashes, kept at most half
 * full. Keys are borrowed, never copied. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tok/hf_tokenizer_internal.h"

static uint64_t fnv1a(const char *s, size_t len)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 1099511628211ull;
    }
    return h;
}

void tokmap_init(tokmap *m, size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2 + 1)
        cap *= 2;
    m->e = xcalloc(cap, sizeof *m->e);
    for (size_t i = 0; i < cap; i++)
        m->e[i].val = -1;
    m->cap = cap;
    m->n = 0;
}

void tokmap_free(tokmap *m)
{
    free(m->e);
    m->e = NULL;
    m->cap = m->n = 0;
}

static size_t find_slot(const tokmap *m, const char *key, size_t len)
{
    size_t mask = m->cap - 1;
    size_t i = (size_t)fnv1a(key, len) & mask;
    while (m->e[i].val >= 0) {
        if (m->e[i].len == len && memcmp(m->e[i].key, key, len) == 0)
            return i;
        i = (i + 1) & mask;
    }
    return i;
}

static void grow(tokmap *m)
{
    tokmap bigger;
    tokmap_init(&bigger, m->cap);
    for (size_t i = 0; i < m->cap; i++) {
        if (m->e[i].val < 0)
            continue;
        size_t j = find_slot(&bigger, m->e[i].key, m->e[i].len);
        bigger.e[j] = m->e[i];
        bigger.n++;
    }
    free(m->e);
    *m = bigger;
}

int32_t tokmap_put(tokmap *m, const char *key, size_t len, int32_t val)
{
    MEMRA_ASSERT(val >= 0);
    if ((m->n + 1) * 2 > m->cap)
        grow(m);
    size_t i = find_slot(m, key, len);
    if (m->e[i].val >= 0)
        return m->e[i].val;
    m->e[i].key = key;
    m->e[i].len = len;
    m->e[i].val = val;
    m->n++;
    return -1;
}

int32_t tokmap_get(const tokmap *m, const char *key, size_t len)
{
    if (!m->cap)
        return -1;
    return m->e[find_slot(m, key, len)].val;
}
