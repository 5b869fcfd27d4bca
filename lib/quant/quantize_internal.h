/* What the quantize_*.c files share: rounding, f16 scales, the block
 * weights, and the two scale searches (quantize_search.c). */
#ifndef MEMRA_QUANT_QUANTIZE_INTERNAL_H
#define MEMRA_QUANT_QUANTIZE_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "numerics/half.h"

/* Nearest integer, ties to even, for |v| < 2^22: adding 1.5 * 2^23 leaves
 * the integer in the low mantissa bits (the FPU's round-to-nearest-even
 * does the rounding). Branch-free, unlike lrintf on the baseline x86-64. */
static inline int qz_round(float v)
{
    float t = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &t, 4);
    return i - 0x4B400000;
}

/* The same rounding kept in float (exact for |v| < 2^22): no int
 * conversion, so the loops that use it stay in vector registers. */
static inline float qz_roundf(float v) { return (v + 12582912.0f) - 12582912.0f; }

/* v limited to [lo, hi], written as the two selects the SSE max/min
 * instructions compute exactly, so it compiles to them (and vectorizes). */
static inline float qz_clamp(float v, float lo, float hi)
{
    const float t = v > lo ? v : lo;
    return t < hi ? t : hi;
}

/* Sums over n (a multiple of 8) values are kept in 8 lanes added pairwise
 * at the end, so the compiler can run a loop's lanes in vector registers
 * (float addition is not reassociated otherwise). */
#define QZ_LANES 8
static inline float qz_lanes_sum(const float *a)
{
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}

/* The f16 nearest to v, saturated to the largest finite f16 (a scale that
 * overflowed would decode to infinity). */
static inline uint16_t qz_f16(float v)
{
    v = qz_clamp(v, -65504.0f, 65504.0f);
    return f32_to_fp16(v);
}

static inline void qz_put_f16(uint8_t *p, uint16_t h)
{
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* 256 ones: the weights of a block when the caller has no importance. */
extern const float qz_ones[256];

/* The weights a block of n values is fitted with: w itself, or ones when w
 * is NULL or all zero (no column of the block matters more than another). */
const float *qz_block_weights(const float *w, int n);

/* Symmetric fit x ~ s * q, integer q in [qmin, qmax] (qmin < 0 < qmax):
 * candidate scales map the largest-magnitude value to every
 * |side| + 0.1 k (k = -nstep .. nstep) for the sides qmin and qmax (only
 * qmax when qmin == -qmax); each candidate's quants get the least-squares
 * scale, and the best is refined by re-rounding. Returns s (0 for an
 * all-zero block; s may be negative) and *err the weighted squared error. */
float qz_fit_symmetric(const float *x, const float *w, int n, int qmin, int qmax, int nstep,
                       float *err);
/* The weighted squared error of s * q, q the quants of x for the fixed
 * scale s (rounded, clamped to [qmin, qmax]); n a multiple of 8. */
float qz_err_symmetric(const float *x, const float *w, int n, float s, int qmin, int qmax);
/* Those quants. */
void qz_quants_symmetric(const float *x, int n, float s, int qmin, int qmax, int8_t *q);

/* The f16 block scale for the searched scale s: the nearest f16, its two
 * neighbours and the f16 of s_ref (the reference rule's scale, so the
 * result is never worse than that rule), each with its re-rounded quants;
 * the one with the smallest error wins. Returns its bits; q its quants. */
uint16_t qz_f16_scale(const float *x, const float *w, int n, float s, float s_ref, int qmin,
                      int qmax, int8_t *q);

/* Affine fit x ~ a * q - b, integer q in [0, nmax], a >= 0, b >= 0 (the
 * K-quant scale and min): candidates stretch [min(x, 0), max(x)] over
 * nmax - 1 .. nmax + 1 steps in nstep + 1 tries, each solved by weighted
 * least squares for a and b, the best refined by re-rounding. */
void qz_fit_affine(const float *x, const float *w, int n, int nmax, int nstep, float *a,
                   float *b);

#endif
