/* The sampler's arithmetic, one definition for the host sampler
 * (lib/engine/sampler.c) and the device one (kernels/sample.cu), so that
 * both pick the same token from the same logits, parameters and seed.
 *
 * What makes that possible: every step whose result could depend on the
 * order of a reduction is done in integers. A candidate's weight is
 * exp(d) for d = (logit - max) / temperature (or at temperature 1 for
 * top-p), computed by smp_exp (basic IEEE operations only, the same bits
 * everywhere) and held as a 62-bit fixed-point integer (exp(d) * 2^62,
 * truncated); masses are exact 128-bit sums of those, so any summation
 * order, sequential on the CPU or a tree of threads on the GPU, gives the
 * same number. Top-p compares masses exactly against top_p quantized to
 * 2^-32, and the draw maps a 64-bit Philox output u to the target
 * floor(u * total / 2^64) and takes the first id, in ascending order,
 * whose running mass passes it. The price: a token whose weight is below
 * 2^-62 of the best (about exp(-43)) is never drawn.
 *
 * Order and semantics of the stages are lib/engine/sampler.h's. */
#ifndef MEMRA_NUMERICS_SAMPLE_MATH_H
#define MEMRA_NUMERICS_SAMPLE_MATH_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/hd.h"
#include "core/philox.h"

/* ---- what a device sampler is handed (plain data, host and device) ---- */

typedef struct {
    int32_t id;
    float bias; /* finite, or -INFINITY to ban the token */
} smp_bias;

typedef struct {
    int32_t id;     /* distinct within a row */
    uint32_t count; /* occurrences in the penalty window, > 0 */
} smp_pen;

/* One row's sampling parameters, as sampler_row_export fills them. */
typedef struct {
    double temperature;        /* 0: greedy */
    double min_p_log;          /* log(min_p); -inf: min-p off */
    double repetition_penalty; /* 1: off */
    double presence_penalty, frequency_penalty;
    uint64_t seed, step;       /* Philox key, and the counter: sampling calls since reset */
    uint64_t top_p_q32;        /* round(top_p * 2^32); 2^32: top-p off */
    int32_t top_k;             /* 0: off */
    int32_t n_bias, n_pen;     /* entries of this row in the bias and penalty lists */
    int32_t bias_at, pen_at;   /* where they start in those lists */
    /* The allowed-token mask (sampler_set_mask): 0, or ceil(n_vocab / 32)
     * words at mask_at in the mask list; bit i % 32 of word i / 32 set =
     * token i allowed. A token not allowed is banned before the bias, as
     * a logit of -inf. */
    int32_t n_mask, mask_at;
} smp_row;

enum {
    SMP_OK = 0,
    SMP_BAD_LOGIT,   /* a NaN or +inf logit: bad_id, bad_value */
    SMP_INF_AFTER,   /* a logit overflowed to +inf after bias and penalties: bad_id */
    SMP_ALL_NEG_INF, /* every logit -inf to begin with */
    SMP_NONE_LEFT,   /* every logit -inf after bias and penalties */
};

typedef struct {
    int32_t id;       /* the token, or -1 */
    int32_t status;   /* SMP_* */
    int32_t bad_id;
    float bad_value;
} smp_outcome;

#define SMP_WEIGHT_ONE ((uint64_t)1 << 62) /* the weight of the best token */
#define SMP_TOP_P_OFF ((uint64_t)1 << 32)
/* Philox stream id of the sampler's uniforms ("samp"). */
#define SMP_STREAM 0x706d6173ull

/* Whether a row's mask allows token id (the mask covers id). */
MEMRA_HD int smp_mask_allows(const uint32_t *mask, int64_t id)
{
    return (int)(mask[id >> 5] >> (id & 31) & 1u);
}

/* ---- 128-bit unsigned integers ---- */

typedef struct {
    uint64_t lo, hi;
} smp_u128;

MEMRA_HD smp_u128 smp_u128_of(uint64_t x)
{
    smp_u128 r = {x, 0};
    return r;
}

MEMRA_HD smp_u128 smp_add(smp_u128 a, smp_u128 b)
{
    smp_u128 r;
    r.lo = a.lo + b.lo;
    r.hi = a.hi + b.hi + (r.lo < a.lo);
    return r;
}

MEMRA_HD smp_u128 smp_add64(smp_u128 a, uint64_t b) { return smp_add(a, smp_u128_of(b)); }

MEMRA_HD smp_u128 smp_sub(smp_u128 a, smp_u128 b)
{
    smp_u128 r;
    r.lo = a.lo - b.lo;
    r.hi = a.hi - b.hi - (a.lo < b.lo);
    return r;
}

MEMRA_HD int smp_lt(smp_u128 a, smp_u128 b) { return a.hi < b.hi || (a.hi == b.hi && a.lo < b.lo); }
MEMRA_HD int smp_is_zero(smp_u128 a) { return (a.lo | a.hi) == 0; }

/* The full 128-bit product of two 64-bit numbers, from 32-bit limbs. */
MEMRA_HD smp_u128 smp_mul64(uint64_t a, uint64_t b)
{
    uint64_t a0 = (uint32_t)a, a1 = a >> 32, b0 = (uint32_t)b, b1 = b >> 32;
    uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    uint64_t mid = (p00 >> 32) + (uint32_t)p01 + (uint32_t)p10;
    smp_u128 r;
    r.lo = (mid << 32) | (uint32_t)p00;
    r.hi = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
    return r;
}

/* The low 128 bits of a * b. */
MEMRA_HD smp_u128 smp_mul(smp_u128 a, uint64_t b)
{
    smp_u128 r = smp_mul64(a.lo, b);
    r.hi += a.hi * b;
    return r;
}

MEMRA_HD double smp_to_double(smp_u128 a) { return (double)a.hi * 0x1p64 + (double)a.lo; }

/* ---- the weights ---- */

/* e^x for x <= 0 in double, from basic operations only, so the host and
 * the device get the same bits (about 1 ulp from the true value): Cody-
 * Waite reduction x = k ln2 + r with |r| <= ln2 / 2, a degree-13 Taylor
 * polynomial for e^r, then the scaling by 2^k (two steps below 2^-1022,
 * so a subnormal result is rounded once). 0 below -745 and for -inf. */
MEMRA_HD double smp_exp(double x)
{
    if (!(x > -745.5))
        return 0.0;
    const double ln2_hi = 6.93147180369123816490e-01; /* trailing zeros: k * ln2_hi is exact */
    const double ln2_lo = 1.90821492927058770002e-10;
    const double inv_ln2 = 1.44269504088896338700e+00;
    double kd = floor(HD_DADD(HD_DMUL(x, inv_ln2), 0.5));
    double r = HD_DSUB(HD_DSUB(x, HD_DMUL(kd, ln2_hi)), HD_DMUL(kd, ln2_lo));
    /* 1/n! for n = 13 .. 1 */
    const double c[13] = {1.6059043836821613e-10, 2.08767569878681e-09, 2.505210838544172e-08,
                          2.755731922398589e-07,  2.7557319223985893e-06, 2.48015873015873e-05,
                          1.984126984126984e-04,  1.388888888888889e-03,  8.333333333333333e-03,
                          4.1666666666666664e-02, 1.6666666666666666e-01, 0.5, 1.0};
    double p = c[0];
    for (int i = 1; i < 13; i++)
        p = HD_DADD(HD_DMUL(p, r), c[i]);
    p = HD_DADD(HD_DMUL(p, r), 1.0);
    int k = (int)kd;
    uint64_t bits;
    double scale;
    if (k >= -1022) {
        bits = (uint64_t)(k + 1023) << 52;
        memcpy(&scale, &bits, 8);
        return HD_DMUL(p, scale);
    }
    bits = (uint64_t)(k + 54 + 1023) << 52;
    memcpy(&scale, &bits, 8);
    return HD_DMUL(HD_DMUL(p, scale), 0x1p-54);
}

/* The fixed-point weight of a candidate at distance x = d / T <= 0 below
 * the best: floor(e^x * 2^62). */
MEMRA_HD uint64_t smp_weight(double x)
{
    return (uint64_t)HD_DMUL(smp_exp(x), 0x1p62);
}

/* (logit - max) / temperature in double, the argument of smp_weight. */
MEMRA_HD double smp_dist(float logit, float max, double temperature)
{
    return HD_DDIV(HD_DSUB((double)logit, (double)max), temperature);
}

/* ---- order, bias and penalties ---- */

/* A key whose unsigned order is the order of the float logits (finite or
 * -inf), -0 counted as +0 as float comparison does. */
MEMRA_HD uint32_t smp_key(float l)
{
    uint32_t u;
    if (l == 0.0f)
        l = 0.0f;
    memcpy(&u, &l, 4);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

MEMRA_HD float smp_key_float(uint32_t k)
{
    uint32_t u = (k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* A double beyond float range becomes +-inf, as IEEE rounding would. */
MEMRA_HD float smp_to_float(double x)
{
    if (x > FLT_MAX)
        return INFINITY;
    if (x < -FLT_MAX)
        return -INFINITY;
    return (float)x;
}

/* A seen token's logit after the penalties: repetition (positive logits
 * divided, negative ones multiplied), then presence and frequency. */
MEMRA_HD float smp_penalize(float logit, uint32_t count, double rep, double pres, double freq)
{
    double l = (double)logit;
    if (rep != 1.0)
        l = l > 0.0 ? HD_DDIV(l, rep) : HD_DMUL(l, rep);
    l = HD_DSUB(l, HD_DADD(pres, HD_DMUL(freq, (double)count)));
    return smp_to_float(l);
}

/* ---- top-p and the draw ---- */

MEMRA_HD uint64_t smp_top_p_q32(double top_p)
{
    return (uint64_t)floor(HD_DADD(HD_DMUL(top_p, 0x1p32), 0.5));
}

/* The mass the top-p prefix must reach: ceil(top_p_q32 * z / 2^32). */
MEMRA_HD smp_u128 smp_top_p_target(smp_u128 z, uint64_t top_p_q32)
{
    smp_u128 t = smp_add64(smp_mul(z, top_p_q32), 0xFFFFFFFFull);
    smp_u128 r = {(t.lo >> 32) | (t.hi << 32), t.hi >> 32};
    return r;
}

/* The draw's 64 random bits for a row at this step. */
MEMRA_HD uint64_t smp_uniform(uint64_t seed, uint64_t step)
{
    return philox_u64(seed, step, SMP_STREAM);
}

/* floor(u * total / 2^64): the draw lands on the first candidate, in
 * ascending id order, whose running mass exceeds it. */
MEMRA_HD smp_u128 smp_draw_target(smp_u128 total, uint64_t u)
{
    smp_u128 a = smp_mul64(u, total.lo), b = smp_mul64(u, total.hi);
    /* (b * 2^64 + a) >> 64 = b + a.hi (b < 2^64 * 2^64 is fine: total < 2^127) */
    return smp_add64(b, a.hi);
}

#endif
