/* 16-bit floats: IEEE binary16 (F16) and bfloat16 (BF16), to and from f32.
 *
 * Widening is exact. Narrowing rounds to nearest, ties to even, with
 * subnormals, overflow to infinity and NaN handled as IEEE 754 says; a NaN
 * stays a NaN (quieted), never becomes an infinity. These are the
 * conversions every GGUF/safetensors reader and writer in memra uses, and
 * the KV cache's f16/bf16 codecs (numerics/kv_codec.h) on the CPU and in the
 * CUDA kernels: they are MEMRA_HD (core/hd.h) and use integer operations
 * only, so the host and the device produce the same bits. */
#ifndef MEMRA_NUMERICS_HALF_H
#define MEMRA_NUMERICS_HALF_H

#include <stdint.h>
#include <string.h>

#include "core/hd.h"

MEMRA_HD uint32_t half_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

MEMRA_HD float half_bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* m >> shift, rounded to nearest with ties to even (1 <= shift < 32). */
MEMRA_HD uint32_t half_round_shift(uint32_t m, int shift)
{
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1)))
        r++;
    return r;
}

MEMRA_HD float fp16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
    if (e == 0x1F) /* inf, or NaN with its payload */
        return half_bits_f32(sign | 0x7F800000u | (m << 13));
    if (e != 0)
        return half_bits_f32(sign | ((e + 112) << 23) | (m << 13));
    if (m == 0)
        return half_bits_f32(sign);
    /* Subnormal m * 2^-24: shift the leading one up to the implicit bit. */
    uint32_t exp = 113;
    while (!(m & 0x400)) {
        m <<= 1;
        exp--;
    }
    return half_bits_f32(sign | (exp << 23) | ((m & 0x3FF) << 13));
}

MEMRA_HD uint16_t f32_to_fp16(float f)
{
    uint32_t x = half_f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000);
    x &= 0x7FFFFFFFu;
    if (x > 0x7F800000u) /* NaN: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7E00 | ((x >> 13) & 0x3FF));
    /* 65520 = 65504 + half an ulp rounds (to even) up to infinity. */
    if (x >= 0x477FF000u)
        return (uint16_t)(sign | 0x7C00);
    uint32_t e = x >> 23;
    if (e >= 113) /* normal half: rebias, then round 23 mantissa bits to 10 */
        return (uint16_t)(sign | half_round_shift(((e - 112) << 23) | (x & 0x7FFFFF), 13));
    /* Below 2^-14: a subnormal half m * 2^-24 (the round may carry into the
     * smallest normal, which is the right encoding). Below 2^-25 it is 0. */
    if (e < 102)
        return sign;
    return (uint16_t)(sign | half_round_shift((x & 0x7FFFFF) | 0x800000, (int)(126 - e)));
}

MEMRA_HD float bf16_to_f32(uint16_t h) { return half_bits_f32((uint32_t)h << 16); }

MEMRA_HD uint16_t f32_to_bf16(float f)
{
    uint32_t x = half_f32_bits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) /* NaN: truncating could make it inf */
        return (uint16_t)((x >> 16) | 0x40);
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1)) >> 16);
}

/* Rows of n values. */
void fp16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void f32_to_fp16_row(const float *src, uint16_t *dst, int64_t n);
void bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n);

#endif
