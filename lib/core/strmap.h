/* A byte string -> non-negative int32 map: open addressing with linear
 * probing, kept at most half full, keys borrowed (the bytes must outlive
 * the map). Built for vocabularies of hundreds of thousands of tokens,
 * where a lookup runs once per merge candidate: each slot keeps the high
 * half of its key's hash, so most mismatches are skipped without touching
 * the key. */
#ifndef MEMRA_CORE_STRMAP_H
#define MEMRA_CORE_STRMAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    const char *key; /* not owned */
    uint32_t len;
    int32_t val; /* -1: empty slot */
    uint32_t tag; /* high bits of the hash */
} strmap_entry;

typedef struct {
    strmap_entry *e;
    size_t cap, n;
} strmap;

void strmap_init(strmap *m, size_t expected);
void strmap_free(strmap *m);
/* Inserts key -> val (val >= 0) unless the key is present; returns the
 * value now stored for the key, so a result other than val means the key
 * was already there with that value. */
int32_t strmap_put(strmap *m, const char *key, size_t len, int32_t val);
/* The value for key, or -1. */
int32_t strmap_get(const strmap *m, const char *key, size_t len);
/* The map's hash: a multiply-xorshift over 8-byte words, several times
 * faster than a byte-at-a-time hash on token-sized keys. Not a stable
 * value: nothing outside a table may depend on it. */
uint64_t strmap_hash(const void *p, size_t n);

#endif
