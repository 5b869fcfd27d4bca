/* Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as
 * easy as 1, 2, 3", SC'11): a counter-based generator, so the n-th number
 * of a stream is computed directly from (key, counter), with no state to
 * carry or advance. The same header compiles for the host and the device
 * (core/hd.h): the sampler draws its uniforms from it on both, which is
 * what lets the CPU and the GPU sample the same token from the same
 * logits and seed. Checked against the Random123 known-answer vectors
 * (tests/unit/test_sampler.c). */
#ifndef MEMRA_CORE_PHILOX_H
#define MEMRA_CORE_PHILOX_H

#include <stdint.h>

#include "core/hd.h"

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u /* the key schedule: golden ratio */
#define PHILOX_W1 0xBB67AE85u /* and sqrt(3) - 1 */

/* out = Philox4x32-10(ctr, key): ten rounds, the key bumped between them. */
MEMRA_HD void philox4x32_10(const uint32_t ctr[4], const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < 10; r++) {
        if (r > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0, p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0, n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1, n3 = (uint32_t)p0;
        c0 = n0;
        c1 = n1;
        c2 = n2;
        c3 = n3;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* 64 random bits: words 0 and 1 of Philox4x32-10 with key = seed and
 * counter = (n, stream): n the position in the stream (the 64-bit counter
 * words 0-1), stream a 64-bit id keeping independent uses of one seed
 * apart (words 2-3). */
MEMRA_HD uint64_t philox_u64(uint64_t seed, uint64_t n, uint64_t stream)
{
    const uint32_t ctr[4] = {(uint32_t)n, (uint32_t)(n >> 32), (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t out[4];
    philox4x32_10(ctr, key, out);
    return (uint64_t)out[0] | ((uint64_t)out[1] << 32);
}

#endif
