/* FNV-1a, the one byte-string hash memra writes down: 64-bit for hash
 * tables and checksums, 32-bit where an index is 32 bits wide.
 *
 * Its values are observable, so they never change: memra-census --checksum
 * prints the 64-bit hash of each tensor's bytes, and the random-weight
 * converter seeds each tensor's stream with the 64-bit hash of its name.
 * It is a byte-at-a-time hash; a table on a hot path that needs more speed
 * uses core/strmap.h's word-at-a-time hash instead. */
#ifndef MEMRA_CORE_HASH_H
#define MEMRA_CORE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define HASH_FNV1A64_BASIS 0xcbf29ce484222325ull
#define HASH_FNV1A64_PRIME 0x100000001b3ull
#define HASH_FNV1A32_BASIS 2166136261u
#define HASH_FNV1A32_PRIME 16777619u

static inline uint64_t hash_fnv1a64(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = HASH_FNV1A64_BASIS;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * HASH_FNV1A64_PRIME;
    return h;
}

/* Of a NUL-terminated string, without its terminator. */
static inline uint64_t hash_fnv1a64_str(const char *s)
{
    uint64_t h = HASH_FNV1A64_BASIS;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * HASH_FNV1A64_PRIME;
    return h;
}

static inline uint32_t hash_fnv1a32_str(const char *s)
{
    uint32_t h = HASH_FNV1A32_BASIS;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * HASH_FNV1A32_PRIME;
    return h;
}

#endif
