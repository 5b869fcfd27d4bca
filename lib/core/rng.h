/* A small seeded generator (xoshiro256**, seeded through splitmix64) for
 * reproducible random weights and tests. Streams are independent per
 * (seed, stream id), so tensors can be filled in parallel and still come
 * out the same whatever the thread count. */
#ifndef MEMRA_CORE_RNG_H
#define MEMRA_CORE_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} rng_state;

void rng_seed(rng_state *r, uint64_t seed, uint64_t stream);
uint64_t rng_next_u64(rng_state *r);
/* Uniform in [0, 1) with 24 random bits. */
float rng_uniform(rng_state *r);
/* Standard normal (Box-Muller). */
float rng_normal(rng_state *r);
/* A tensor name's stream id: its FNV-1a 64 (core/hash.h), which fixes the
 * random weights memra-convert --random writes, so it never changes. */
uint64_t rng_hash_str(const char *s);

#endif
