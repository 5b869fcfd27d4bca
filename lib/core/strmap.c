#include "core/strmap.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

uint64_t strmap_hash(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xC2B2AE3D27D4EB4Full);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xFF51AFD7ED558CCDull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w ^ ((uint64_t)n << 59)) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 32;
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
    return h;
}

void strmap_init(strmap *m, size_t expected)
{
    size_t cap = 16;
    while (cap < expected * 2 + 2)
        cap *= 2;
    m->e = xmalloc(cap * sizeof *m->e);
    for (size_t i = 0; i < cap; i++)
        m->e[i].val = -1;
    m->cap = cap;
    m->n = 0;
}

void strmap_free(strmap *m)
{
    free(m->e);
    memset(m, 0, sizeof *m);
}

static size_t slot_of(const strmap *m, const char *key, size_t len, uint32_t *tag)
{
    uint64_t h = strmap_hash(key, len);
    size_t mask = m->cap - 1;
    size_t i = (size_t)h & mask;
    *tag = (uint32_t)(h >> 32);
    while (m->e[i].val >= 0) {
        if (m->e[i].tag == *tag && m->e[i].len == len && memcmp(m->e[i].key, key, len) == 0)
            return i;
        i = (i + 1) & mask;
    }
    return i;
}

int32_t strmap_put(strmap *m, const char *key, size_t len, int32_t val)
{
    MEMRA_ASSERT(val >= 0 && len <= UINT32_MAX);
    if ((m->n + 1) * 2 > m->cap) {
        strmap big;
        strmap_init(&big, m->cap);
        for (size_t i = 0; i < m->cap; i++) {
            if (m->e[i].val < 0)
                continue;
            uint32_t tag;
            big.e[slot_of(&big, m->e[i].key, m->e[i].len, &tag)] = m->e[i];
        }
        big.n = m->n;
        free(m->e);
        *m = big;
    }
    uint32_t tag;
    size_t i = slot_of(m, key, len, &tag);
    if (m->e[i].val >= 0)
        return m->e[i].val;
    m->e[i].key = key;
    m->e[i].len = (uint32_t)len;
    m->e[i].val = val;
    m->e[i].tag = tag;
    m->n++;
    return val;
}

int32_t strmap_get(const strmap *m, const char *key, size_t len)
{
    if (!m->e)
        return -1;
    uint32_t tag;
    return m->e[slot_of(m, key, len, &tag)].val;
}
