/* The aarch64 kernels of the fast path, written once and compiled twice:
 * cpu_fast_neon.c (Advanced SIMD, every aarch64 CPU) and
 * cpu_fast_dotprod.c (with the Armv8.2 dot product, sdot) set the target
 * and define
 *   CPU_ARM_TABLE   the cpu_kernels object to define
 *   CPU_ARM_ISA     its cpu_isa
 *   CPU_ARM_NAME    its name
 *   CPU_ARM_DOT     1: the int8 products by sdot; 0: by smull + sadalp
 *
 * The int8 formats: a block's products are summed exactly in int32 lanes
 * and the lanes of four blocks folded to one exact sum each (pairwise
 * adds) before any float step, so the lanes' layout (which differs between
 * sdot and smull) never shows: both levels give the same bits (tested).
 * Four blocks' sums then meet their four scales in one float vector. The
 * F32/F16/BF16 rows: one accumulator of 16 lanes (four registers) per row
 * and token. Every kernel is written for NT tokens (and the plain ones for
 * NR rows), compile-time constants after inlining, each (row, token)
 * running the very operations of the one-token kernel, so its result is
 * the same bits alone or in a group (decision 0018). Not a header of
 * declarations: include it only from those two files. */
#include <arm_neon.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_fast.h"
#include "backend/cpu/cpu_fast_wrap.h"
#include "format/dequant.h"

#define ARM_INLINE static inline __attribute__((always_inline))

ARM_INLINE float arm_f16(const uint8_t *p)
{
    __fp16 h;
    memcpy(&h, p, 2);
    return (float)h;
}

/* The four lanes summed as (0 + 1) + (2 + 3). */
ARM_INLINE float arm_hsum4(float32x4_t v)
{
    float32x4_t p = vpaddq_f32(v, v);
    return vgetq_lane_f32(p, 0) + vgetq_lane_f32(p, 1);
}

/* acc plus the products of the 16 signed bytes of a and b, exactly, in
 * some int32 lanes (only the lanes' total is ever used). At most
 * 2 x 128 x 127 per int16 lane in the smull form: no overflow. */
ARM_INLINE int32x4_t arm_dot16(int32x4_t acc, int8x16_t a, int8x16_t b)
{
#if CPU_ARM_DOT
    return vdotq_s32(acc, a, b);
#else
    int16x8_t p = vmull_s8(vget_low_s8(a), vget_low_s8(b));
    p = vmlal_high_s8(p, a, b);
    return vpadalq_s16(acc, p);
#endif
}

/* The exact totals of four blocks' lanes, block u in lane u. */
ARM_INLINE int32x4_t arm_fold4(int32x4_t s0, int32x4_t s1, int32x4_t s2, int32x4_t s3)
{
    return vpaddq_s32(vpaddq_s32(s0, s1), vpaddq_s32(s2, s3));
}

/* ---- f32-x formats: 16 lanes (four registers) per row and token ---- */

enum { VL = 16, PLAIN_NT = 2, PLAIN_NR = 2 };

typedef struct {
    float32x4_t v[4];
} vf16;

ARM_INLINE vf16 ld_f32(const uint8_t *p)
{
    const float *f = (const float *)(const void *)p;
    return (vf16){{vld1q_f32(f), vld1q_f32(f + 4), vld1q_f32(f + 8), vld1q_f32(f + 12)}};
}
ARM_INLINE vf16 ld_f16(const uint8_t *p)
{
    float16x8_t a = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)(const void *)p));
    float16x8_t b = vreinterpretq_f16_u16(vld1q_u16((const uint16_t *)(const void *)p + 8));
    return (vf16){{vcvt_f32_f16(vget_low_f16(a)), vcvt_high_f32_f16(a), vcvt_f32_f16(vget_low_f16(b)),
                   vcvt_high_f32_f16(b)}};
}
ARM_INLINE vf16 ld_bf16(const uint8_t *p)
{
    uint16x8_t a = vld1q_u16((const uint16_t *)(const void *)p);
    uint16x8_t b = vld1q_u16((const uint16_t *)(const void *)p + 8);
    return (vf16){{vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(a), 16)),
                   vreinterpretq_f32_u32(vshll_high_n_u16(a, 16)),
                   vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(b), 16)),
                   vreinterpretq_f32_u32(vshll_high_n_u16(b, 16))}};
}

ARM_INLINE float rd1_f32(const uint8_t *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}
ARM_INLINE float rd1_f16(const uint8_t *p) { return arm_f16(p); }
ARM_INLINE float rd1_bf16(const uint8_t *p)
{
    uint32_t bits = (uint32_t)(p[0] | (p[1] << 8)) << 16;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* NR rows (w, w + rbytes, ...) against NT tokens, out[r * NT + t]: each
 * (row, token) one FMA a register per 16 values, the four registers
 * folded as (0 + 1) + (2 + 3), its lanes by arm_hsum4, then the tail
 * (n mod 16) in order. Prefill takes blocks of PLAIN_NR x PLAIN_NT (16
 * accumulators of the 32 registers); decode a row at a time. */
ARM_INLINE void plain_blk(const uint8_t *w, size_t rbytes, const cpu_xrow *x, int64_t n,
                          float *out, const int NR, const int NT, const int BYTES,
                          vf16 (*load)(const uint8_t *), float (*read1)(const uint8_t *))
{
    float32x4_t a[PLAIN_NR][PLAIN_NT][4];
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                a[r][t][k] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        float32x4_t xv[PLAIN_NT][4];
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                xv[t][k] = vld1q_f32(x[t].f + i + 4 * k);
#pragma GCC unroll 2
        for (int r = 0; r < NR; r++) {
            vf16 wv = load(w + (size_t)r * rbytes + i * BYTES);
#pragma GCC unroll 2
            for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++)
                    a[r][t][k] = vfmaq_f32(a[r][t][k], wv.v[k], xv[t][k]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++) {
            float tail = 0;
            for (int64_t j = i; j < n; j++)
                tail += read1(w + (size_t)r * rbytes + j * BYTES) * x[t].f[j];
            float32x4_t s = vaddq_f32(vaddq_f32(a[r][t][0], a[r][t][1]),
                                      vaddq_f32(a[r][t][2], a[r][t][3]));
            out[r * NT + t] = arm_hsum4(s) + tail;
        }
}

PLAIN_KERNELS(f32, 4)
PLAIN_KERNELS(f16, 2)
PLAIN_KERNELS(bf16, 2)

/* ---- int8-x formats: one float accumulator per token, four blocks a
 * step (block b in lane b mod 4) ---- */
enum { Q_NT = 4 };

/* A block's 32 signed weights: lo pairs x's first 16 bytes, hi the rest. */
typedef struct {
    int8x16_t lo, hi;
} q32w;

ARM_INLINE q32w q8_0_unpack(const uint8_t *blk)
{
    return (q32w){vld1q_s8((const int8_t *)(blk + 2)), vld1q_s8((const int8_t *)(blk + 18))};
}
ARM_INLINE q32w q4_0_unpack(const uint8_t *blk)
{
    uint8x16_t raw = vld1q_u8(blk + 2);
    int8x16_t eight = vdupq_n_s8(8);
    return (q32w){vsubq_s8(vreinterpretq_s8_u8(vandq_u8(raw, vdupq_n_u8(0x0F))), eight),
                  vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(raw, 4)), eight)};
}

/* Blocks b .. b + M - 1 (M <= 4) of Q8_0 / Q4_0 against NT tokens. */
ARM_INLINE void q32_step(const uint8_t *w, const cpu_xrow *x, int64_t b, float32x4_t *acc,
                         const int M, const int NT, const int BYTES, q32w (*unpack)(const uint8_t *))
{
    q32w q[4];
    float dw[4];
#pragma GCC unroll 4
    for (int u = 0; u < M; u++) {
        q[u] = unpack(w + BYTES * (b + u));
        dw[u] = arm_f16(w + BYTES * (b + u));
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        int32x4_t s[4];
        float f[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
            s[u] = vdupq_n_s32(0);
            f[u] = 0.0f;
        }
#pragma GCC unroll 4
        for (int u = 0; u < M; u++) {
            const int8_t *xq = x[t].q + (b + u) * 32;
            s[u] = arm_dot16(arm_dot16(s[u], q[u].lo, vld1q_s8(xq)), q[u].hi, vld1q_s8(xq + 16));
            f[u] = dw[u] * x[t].d[b + u];
        }
        acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(arm_fold4(s[0], s[1], s[2], s[3])), vld1q_f32(f));
    }
}

ARM_INLINE void q32_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT,
                       const int BYTES, q32w (*unpack)(const uint8_t *))
{
    float32x4_t acc[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t] = vdupq_n_f32(0.0f);
    int64_t nb = n / 32, b = 0;
    for (; b + 4 <= nb; b += 4)
        q32_step(w, x, b, acc, 4, NT, BYTES, unpack);
    switch (nb - b) {
    case 3: q32_step(w, x, b, acc, 3, NT, BYTES, unpack); break;
    case 2: q32_step(w, x, b, acc, 2, NT, BYTES, unpack); break;
    case 1: q32_step(w, x, b, acc, 1, NT, BYTES, unpack); break;
    default: break;
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = arm_hsum4(acc[t]);
}

Q_KERNELS(q8_0, q32_nt(w, x, n, out, NT, 34, q8_0_unpack))
Q_KERNELS(q4_0, q32_nt(w, x, n, out, NT, 18, q4_0_unpack))

/* Q4_K / Q5_K: the eight 6-bit scales and mins of a super-block (the
 * layout of dequant_k4_scale_min) as two f32 vectors each, blocks 0-3
 * and 4-7: scales 0-3 are the low 6 bits of bytes 0-3, mins 0-3 of bytes
 * 4-7; scales 4-7 take their low nibble from bytes 8-11 and their top two
 * bits from bits 6-7 of bytes 0-3, mins 4-7 the high nibble of bytes 8-11
 * and bits 6-7 of bytes 4-7. */
ARM_INLINE float32x4_t arm_u8x4_to_f32(uint32_t v)
{
    uint16x8_t h = vmovl_u8(vcreate_u8((uint64_t)v));
    return vcvtq_f32_u32(vmovl_u16(vget_low_u16(h)));
}

ARM_INLINE void k4_scales(const uint8_t *q, float32x4_t sc[2], float32x4_t m[2])
{
    uint32_t w0, w1, w2;
    memcpy(&w0, q, 4);
    memcpy(&w1, q + 4, 4);
    memcpy(&w2, q + 8, 4);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
    sc[0] = arm_u8x4_to_f32(w0 & low6);
    m[0] = arm_u8x4_to_f32(w1 & low6);
    sc[1] = arm_u8x4_to_f32((w2 & low4) | (((w0 >> 6) & low2) << 4));
    m[1] = arm_u8x4_to_f32(((w2 >> 4) & low4) | (((w1 >> 6) & low2) << 4));
}

/* Q4_K (Q5 = 0) and Q5_K (Q5 = 1): block j's factor (d sc_j) d_x,j for
 * four blocks at once, its exact sum in lane j mod 4 of the half's
 * accumulator; the mins' (dmin m_j) (d_x,j s_j) in lanes of their own,
 * subtracted last. */
ARM_INLINE void k45_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT,
                       const int Q5)
{
    const int BYTES = Q5 ? 176 : 144, QS = Q5 ? 48 : 16;
    const uint8x16_t lo4 = vdupq_n_u8(0x0F), bit5 = vdupq_n_u8(0x10);
    float32x4_t acc[Q_NT][2], mins[Q_NT][2];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t][0] = acc[t][1] = mins[t][0] = mins[t][1] = vdupq_n_f32(0.0f);
    for (int64_t sb = 0; sb < n / 256; sb++, w += BYTES) {
        float32x4_t sc[2], m[2];
        k4_scales(w + 4, sc, m);
        const float d = arm_f16(w), dmin = arm_f16(w + 2);
        float32x4_t dsc[2] = {vmulq_n_f32(sc[0], d), vmulq_n_f32(sc[1], d)};
        float32x4_t dm[2] = {vmulq_n_f32(m[0], dmin), vmulq_n_f32(m[1], dmin)};
        uint8x16_t qh0 = vdupq_n_u8(0), qh1 = vdupq_n_u8(0);
        if (Q5) {
            qh0 = vld1q_u8(w + 16);
            qh1 = vld1q_u8(w + 32);
        }
        /* block j's 32 quants: lo pairs x's first 16 bytes, hi the rest */
        int8x16_t qlo[8], qhi[8];
#pragma GCC unroll 4
        for (int p = 0; p < 4; p++) {
            uint8x16_t r0 = vld1q_u8(w + QS + 32 * p), r1 = vld1q_u8(w + QS + 32 * p + 16);
            uint8x16_t e0 = vandq_u8(r0, lo4), e1 = vandq_u8(r1, lo4);
            uint8x16_t o0 = vshrq_n_u8(r0, 4), o1 = vshrq_n_u8(r1, 4);
            if (Q5) {
                uint8x16_t me = vdupq_n_u8((uint8_t)(1u << (2 * p)));
                uint8x16_t mo = vdupq_n_u8((uint8_t)(2u << (2 * p)));
                e0 = vorrq_u8(e0, vandq_u8(vtstq_u8(qh0, me), bit5));
                e1 = vorrq_u8(e1, vandq_u8(vtstq_u8(qh1, me), bit5));
                o0 = vorrq_u8(o0, vandq_u8(vtstq_u8(qh0, mo), bit5));
                o1 = vorrq_u8(o1, vandq_u8(vtstq_u8(qh1, mo), bit5));
            }
            qlo[2 * p] = vreinterpretq_s8_u8(e0);
            qhi[2 * p] = vreinterpretq_s8_u8(e1);
            qlo[2 * p + 1] = vreinterpretq_s8_u8(o0);
            qhi[2 * p + 1] = vreinterpretq_s8_u8(o1);
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const int8_t *xq = x[t].q + sb * 256;
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                int32x4_t s[4];
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++) {
                    int j = 4 * h + u;
                    s[u] = arm_dot16(arm_dot16(vdupq_n_s32(0), qlo[j], vld1q_s8(xq + 32 * j)),
                                     qhi[j], vld1q_s8(xq + 32 * j + 16));
                }
                float32x4_t xd = vld1q_f32(x[t].d + sb * 8 + 4 * h);
                float32x4_t xs = vmulq_f32(xd, vcvtq_f32_s32(vld1q_s32(x[t].s + sb * 8 + 4 * h)));
                acc[t][h] = vfmaq_f32(acc[t][h], vcvtq_f32_s32(arm_fold4(s[0], s[1], s[2], s[3])),
                                      vmulq_f32(dsc[h], xd));
                mins[t][h] = vfmaq_f32(mins[t][h], dm[h], xs);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = arm_hsum4(vaddq_f32(acc[t][0], acc[t][1])) -
                 arm_hsum4(vaddq_f32(mins[t][0], mins[t][1]));
}

Q_KERNELS(q4_k, k45_nt(w, x, n, out, NT, 0))
Q_KERNELS(q5_k, k45_nt(w, x, n, out, NT, 1))

/* Q6_K: each half of 128 values is four 32-blocks; block g's quants are
 * the nibbles of ql (low for g < 2, high after) with two bits of qh
 * (shifted by 2g) on top, less 32; its two 16-value halves carry signed
 * scales, applied to the exact half sums before the block's sum leaves
 * the integers (at most 16 x 32 x 127 x 128 per lane). */
ARM_INLINE void q6_k_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT)
{
    const uint8x16_t lo4 = vdupq_n_u8(0x0F), two = vdupq_n_u8(3);
    const int8x16_t m32 = vdupq_n_s8(32);
    float32x4_t acc[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t] = vdupq_n_f32(0.0f);
    for (int64_t sb = 0; sb < n / 256; sb++, w += 210) {
        const float d = arm_f16(w + 208);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h, *qhp = w + 128 + 32 * h;
            const int8_t *sc = (const int8_t *)(w + 192 + 8 * h);
            uint8x16_t qh0 = vld1q_u8(qhp), qh1 = vld1q_u8(qhp + 16);
            int8x16_t q[4][2];
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                uint8x16_t l0 = vld1q_u8(ql + 32 * (g % 2)), l1 = vld1q_u8(ql + 32 * (g % 2) + 16);
                if (g / 2) {
                    l0 = vshrq_n_u8(l0, 4);
                    l1 = vshrq_n_u8(l1, 4);
                } else {
                    l0 = vandq_u8(l0, lo4);
                    l1 = vandq_u8(l1, lo4);
                }
                const int8x16_t sh = vdupq_n_s8((int8_t)(-2 * g));
                uint8x16_t h0 = vshlq_n_u8(vandq_u8(vshlq_u8(qh0, sh), two), 4);
                uint8x16_t h1 = vshlq_n_u8(vandq_u8(vshlq_u8(qh1, sh), two), 4);
                q[g][0] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l0, h0)), m32);
                q[g][1] = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(l1, h1)), m32);
            }
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                int64_t b0 = sb * 8 + 4 * h;
                const int8_t *xq = x[t].q + b0 * 32;
                int32x4_t s[4];
#pragma GCC unroll 4
                for (int g = 0; g < 4; g++) {
                    int32x4_t p0 = arm_dot16(vdupq_n_s32(0), q[g][0], vld1q_s8(xq + 32 * g));
                    int32x4_t p1 = arm_dot16(vdupq_n_s32(0), q[g][1], vld1q_s8(xq + 32 * g + 16));
                    s[g] = vmlaq_n_s32(vmulq_n_s32(p0, sc[2 * g]), p1, sc[2 * g + 1]);
                }
                float32x4_t f = vmulq_n_f32(vld1q_f32(x[t].d + b0), d);
                acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(arm_fold4(s[0], s[1], s[2], s[3])), f);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = arm_hsum4(acc[t]);
}

Q_KERNELS(q6_k, q6_k_nt(w, x, n, out, NT))

/* NVFP4: a 36-byte block of 64 values is four 16-value sub-blocks, each
 * with its own scale byte; a sub-block's 8 bytes hold values 0-7 in the
 * low nibbles and 8-15 in the high ones, looked up as doubled E2M1
 * integers. Its four exact sums meet (scale_s d_x) in one vector. */
ARM_INLINE void nvfp4_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT)
{
    const int8x16_t table = vld1q_s8(cpu_e2m1_doubled);
    const uint8x8_t lo4 = vdup_n_u8(0x0F);
    float32x4_t acc[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t] = vdupq_n_f32(0.0f);
    for (int64_t i = 0; i < n / 64; i++, w += 36) {
        int8x16_t q[4];
        float sc[4];
#pragma GCC unroll 4
        for (int s = 0; s < 4; s++) {
            uint8x8_t raw = vld1_u8(w + 4 + 8 * s);
            uint8x16_t idx = vcombine_u8(vand_u8(raw, lo4), vshr_n_u8(raw, 4));
            q[s] = vqtbl1q_s8(table, idx);
            sc[s] = cpu_ue4m3_half(w[s]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const int8_t *xq = x[t].q + i * 64;
            int32x4_t s[4];
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                s[u] = arm_dot16(vdupq_n_s32(0), q[u], vld1q_s8(xq + 16 * u));
            const float d0 = x[t].d[2 * i], d1 = x[t].d[2 * i + 1];
            const float f[4] = {sc[0] * d0, sc[1] * d0, sc[2] * d1, sc[3] * d1};
            acc[t] = vfmaq_f32(acc[t], vcvtq_f32_s32(arm_fold4(s[0], s[1], s[2], s[3])), vld1q_f32(f));
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = arm_hsum4(acc[t]);
}

Q_KERNELS(nvfp4, nvfp4_nt(w, x, n, out, NT))

/* MXFP8: E4M3 bytes to f32 four at a time, exactly as fp8_e4m3_to_f32:
 * the byte's low seven bits placed at the f32's exponent and mantissa
 * bits give 2^(e - 127) (1 + m / 8), or the subnormal m 2^-129 for e = 0;
 * times 2^120 both are the E4M3 value. S.1111.111 is NaN. */
ARM_INLINE float32x4_t e4m3x4(uint32x4_t b)
{
    uint32x4_t mag = vandq_u32(b, vdupq_n_u32(0x7F));
    float32x4_t v = vmulq_n_f32(vreinterpretq_f32_u32(vshlq_n_u32(mag, 20)), 0x1p120f);
    uint32x4_t bits = vorrq_u32(vreinterpretq_u32_f32(v),
                                vshlq_n_u32(vandq_u32(b, vdupq_n_u32(0x80)), 24));
    uint32x4_t nan = vceqq_u32(mag, vdupq_n_u32(0x7F));
    return vreinterpretq_f32_u32(vbslq_u32(nan, vdupq_n_u32(0x7FC00000u), bits));
}

/* Each value (E4M3 times the block's power of two, exact) times x, one
 * FMA a lane into 16 lanes per token, folded as the plain kernels. */
ARM_INLINE void mxfp8_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT)
{
    float32x4_t a[PLAIN_NT][4];
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            a[t][k] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < n / 32; b++, w += 33) {
        const float d = dequant_e8m0(w[0]);
        float32x4_t v[8];
#pragma GCC unroll 2
        for (int hlf = 0; hlf < 2; hlf++) {
            uint8x16_t raw = vld1q_u8(w + 1 + 16 * hlf);
            uint16x8_t lo = vmovl_u8(vget_low_u8(raw)), hi = vmovl_high_u8(raw);
            v[4 * hlf + 0] = vmulq_n_f32(e4m3x4(vmovl_u16(vget_low_u16(lo))), d);
            v[4 * hlf + 1] = vmulq_n_f32(e4m3x4(vmovl_high_u16(lo)), d);
            v[4 * hlf + 2] = vmulq_n_f32(e4m3x4(vmovl_u16(vget_low_u16(hi))), d);
            v[4 * hlf + 3] = vmulq_n_f32(e4m3x4(vmovl_high_u16(hi)), d);
        }
#pragma GCC unroll 2
        for (int t = 0; t < NT; t++) {
            const float *xf = x[t].f + b * 32;
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
                a[t][k % 4] = vfmaq_f32(a[t][k % 4], v[k], vld1q_f32(xf + 4 * k));
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < NT; t++)
        out[t] = arm_hsum4(vaddq_f32(vaddq_f32(a[t][0], a[t][1]), vaddq_f32(a[t][2], a[t][3])));
}

NT_KERNELS(mxfp8, PLAIN_NT, mxfp8_nt(w, x, n, out, NT))

/* ---- attention (docs/decisions/0035-cpu-fast-attention.md) ---- */

/* NK keys' scores side by side: 16 lanes (four registers) a key, one FMA
 * a register per 16 values, folded as plain_blk folds a row, then the
 * tail, then the scale; a key's ops are the same in any group. */
ARM_INLINE void attn_dot_k(const float *q, const void *const *k, int64_t n, float scale,
                           float *out, const int NK, vf16 (*load)(const uint8_t *, int64_t),
                           float (*read1)(const uint8_t *, int64_t))
{
    float32x4_t a[4][4];
#pragma GCC unroll 4
    for (int j = 0; j < NK; j++)
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            a[j][r] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        float32x4_t qv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
            qv[r] = vld1q_f32(q + i + 4 * r);
#pragma GCC unroll 4
        for (int j = 0; j < NK; j++) {
            vf16 kv = load((const uint8_t *)k[j], i);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                a[j][r] = vfmaq_f32(a[j][r], kv.v[r], qv[r]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < NK; j++) {
        float tail = 0;
        for (int64_t t = i; t < n; t++)
            tail += q[t] * read1((const uint8_t *)k[j], t);
        float32x4_t s = vaddq_f32(vaddq_f32(a[j][0], a[j][1]), vaddq_f32(a[j][2], a[j][3]));
        out[j] = (arm_hsum4(s) + tail) * scale;
    }
}

/* o += p[j] v[j] for the keys in turn, 16 values of o in registers across
 * them, each element's FMAs key after key; the tail a product and a sum. */
ARM_INLINE void attn_axpy_k(float *o, const float *p, const void *const *v, int nv, int64_t n,
                            vf16 (*load)(const uint8_t *, int64_t),
                            float (*read1)(const uint8_t *, int64_t))
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        float32x4_t r[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            r[u] = vld1q_f32(o + i + 4 * u);
        for (int j = 0; j < nv; j++) {
            vf16 vv = load((const uint8_t *)v[j], i);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                r[u] = vfmaq_n_f32(r[u], vv.v[u], p[j]);
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            vst1q_f32(o + i + 4 * u, r[u]);
    }
    for (int j = 0; j < nv; j++)
        for (int64_t t = i; t < n; t++)
            o[t] += p[j] * read1((const uint8_t *)v[j], t);
}

/* A Q8_0 row's 16 values from i (a multiple of 16, inside one block of
 * 32): the int8 values as f32 times the block's scale, each product
 * rounded as kvc_q8_0_get rounds it. */
ARM_INLINE vf16 attn_ld_kq8(const uint8_t *r, int64_t i)
{
    const uint8_t *b = r + (i / 32) * 34;
    const float d = arm_f16(b);
    int8x16_t q = vld1q_s8((const int8_t *)(b + 2 + i % 32));
    int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
    return (vf16){{vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d),
                   vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(lo)), d),
                   vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d),
                   vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(hi)), d)}};
}
static inline float attn_rd_kq8(const uint8_t *r, int64_t i)
{
    const uint8_t *b = r + (i / 32) * 34;
    return (float)(int8_t)b[2 + i % 32] * arm_f16(b);
}

ATTN_KERNELS(vf16)

/* Several queries against the same keys (cpu_kernels.attn_dotq /
 * attn_axpyq), two at a time: each key's widened registers serve both.
 * Every (query, key) pair's FMAs, fold and tail are attn_dot_k's, every
 * output element's FMAs come key after key as attn_axpy_k's: each result
 * is the same bits as a query's own call. */
enum { ATTN_NQ = 2 };

ARM_INLINE void attn_dotq_k(const float *const *q, const void *const *k, int64_t n, float scale,
                            float *const *out, int j0, const int NQ, const int NK,
                            vf16 (*load)(const uint8_t *, int64_t),
                            float (*read1)(const uint8_t *, int64_t))
{
    float32x4_t a[ATTN_NQ][2][4];
#pragma GCC unroll 2
    for (int t = 0; t < NQ; t++)
#pragma GCC unroll 2
        for (int j = 0; j < NK; j++)
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                a[t][j][r] = vdupq_n_f32(0.0f);
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        float32x4_t qv[ATTN_NQ][4];
#pragma GCC unroll 2
        for (int t = 0; t < NQ; t++)
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++)
                qv[t][r] = vld1q_f32(q[t] + i + 4 * r);
#pragma GCC unroll 2
        for (int j = 0; j < NK; j++) {
            vf16 kv = load((const uint8_t *)k[j], i);
#pragma GCC unroll 2
            for (int t = 0; t < NQ; t++)
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++)
                    a[t][j][r] = vfmaq_f32(a[t][j][r], kv.v[r], qv[t][r]);
        }
    }
#pragma GCC unroll 2
    for (int t = 0; t < NQ; t++)
#pragma GCC unroll 2
        for (int j = 0; j < NK; j++) {
            float tail = 0;
            for (int64_t s = i; s < n; s++)
                tail += q[t][s] * read1((const uint8_t *)k[j], s);
            float32x4_t sv = vaddq_f32(vaddq_f32(a[t][j][0], a[t][j][1]),
                                       vaddq_f32(a[t][j][2], a[t][j][3]));
            out[t][j0 + j] = (arm_hsum4(sv) + tail) * scale;
        }
}

ARM_INLINE void attn_axpyq_k(float *const *o, const float *const *p, const void *const *v, int nv,
                             int64_t n, const int NQ, vf16 (*load)(const uint8_t *, int64_t),
                             float (*read1)(const uint8_t *, int64_t))
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        float32x4_t r[ATTN_NQ][4];
#pragma GCC unroll 2
        for (int t = 0; t < NQ; t++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                r[t][u] = vld1q_f32(o[t] + i + 4 * u);
        for (int j = 0; j < nv; j++) {
            vf16 vv = load((const uint8_t *)v[j], i);
#pragma GCC unroll 2
            for (int t = 0; t < NQ; t++)
#pragma GCC unroll 4
                for (int u = 0; u < 4; u++)
                    r[t][u] = vfmaq_n_f32(r[t][u], vv.v[u], p[t][j]);
        }
#pragma GCC unroll 2
        for (int t = 0; t < NQ; t++)
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                vst1q_f32(o[t] + i + 4 * u, r[t][u]);
    }
#pragma GCC unroll 2
    for (int t = 0; t < NQ; t++)
        for (int j = 0; j < nv; j++)
            for (int64_t s = i; s < n; s++)
                o[t][s] += p[t][j] * read1((const uint8_t *)v[j], s);
}

ATTN_QFORMS(f32, 2)
ATTN_QFORMS(bf16, 2)
ATTN_QFORMS(f16, 2)
ATTN_QFORMS(kq8, 2)
ATTN_QDISPATCH

/* cpu_exp_neg on four lanes, its steps with FMA; lanes below CPU_EXP_MIN
 * are 0 and NaN stays NaN (vmaxnm would drop it: a NaN lane is kept by
 * the select below). */
ARM_INLINE float32x4_t exp_neg4(float32x4_t x)
{
    const uint32x4_t under = vcltq_f32(x, vdupq_n_f32(CPU_EXP_MIN));
    const uint32x4_t nan = vmvnq_u32(vceqq_f32(x, x));
    float32x4_t xc = vmaxq_f32(x, vdupq_n_f32(CPU_EXP_MIN));
    float32x4_t n = vrndnq_f32(vmulq_f32(xc, vdupq_n_f32(CPU_EXP_LOG2E)));
    float32x4_t r = vfmsq_f32(xc, n, vdupq_n_f32(CPU_EXP_LN2_HI));
    r = vfmsq_f32(r, n, vdupq_n_f32(CPU_EXP_LN2_LO));
    float32x4_t y = vfmaq_f32(vdupq_n_f32(CPU_EXP_P1), vdupq_n_f32(CPU_EXP_P0), r);
    y = vfmaq_f32(vdupq_n_f32(CPU_EXP_P2), y, r);
    y = vfmaq_f32(vdupq_n_f32(CPU_EXP_P3), y, r);
    y = vfmaq_f32(vdupq_n_f32(CPU_EXP_P4), y, r);
    y = vfmaq_f32(vdupq_n_f32(CPU_EXP_P5), y, r);
    y = vfmaq_f32(vaddq_f32(r, vdupq_n_f32(1.0f)), y, vmulq_f32(r, r));
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    float32x4_t out = vmulq_f32(y, vreinterpretq_f32_s32(e));
    out = vbslq_f32(under, vdupq_n_f32(0.0f), out);
    return vbslq_f32(nan, x, out);
}

/* The largest score (exact in any order), then the exponentials in place
 * and their sum in four lanes; a tail of fewer than four runs through the
 * lanes padded with -inf (exp 0). */
static float attn_exp(float *s, int64_t n)
{
    float32x4_t mv = vdupq_n_f32(-INFINITY);
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        mv = vmaxq_f32(mv, vld1q_f32(s + i));
    float m = vmaxvq_f32(mv);
    for (; i < n; i++)
        m = s[i] > m ? s[i] : m;
    const float32x4_t mb = vdupq_n_f32(m);
    float32x4_t sum = vdupq_n_f32(0.0f);
    for (i = 0; i + 4 <= n; i += 4) {
        float32x4_t e = exp_neg4(vsubq_f32(vld1q_f32(s + i), mb));
        vst1q_f32(s + i, e);
        sum = vaddq_f32(sum, e);
    }
    if (i < n) {
        float lanes[4];
        for (int l = 0; l < 4; l++)
            lanes[l] = i + l < n ? s[i + l] : -INFINITY;
        float32x4_t e = exp_neg4(vsubq_f32(vld1q_f32(lanes), mb));
        vst1q_f32(lanes, e);
        for (int64_t l = 0; i + l < n; l++)
            s[i + l] = lanes[l];
        sum = vaddq_f32(sum, e);
    }
    return arm_hsum4(sum);
}

const cpu_kernels CPU_ARM_TABLE = {
    .isa = CPU_ARM_ISA,
    .name = CPU_ARM_NAME,
    .f32 = {dot_f32, dotn_f32, PLAIN_NT, rows_f32, PLAIN_NR},
    .f16 = {dot_f16, dotn_f16, PLAIN_NT, rows_f16, PLAIN_NR},
    .bf16 = {dot_bf16, dotn_bf16, PLAIN_NT, rows_bf16, PLAIN_NR},
    .q8_0 = {dot_q8_0, dotn_q8_0, Q_NT, NULL, 0},
    .q4_0 = {dot_q4_0, dotn_q4_0, Q_NT, NULL, 0},
    .q4_k = {dot_q4_k, dotn_q4_k, Q_NT, NULL, 0},
    .q5_k = {dot_q5_k, dotn_q5_k, Q_NT, NULL, 0},
    .q6_k = {dot_q6_k, dotn_q6_k, Q_NT, NULL, 0},
    .nvfp4 = {dot_nvfp4, dotn_nvfp4, Q_NT, NULL, 0},
    .mxfp8 = {dot_mxfp8, dotn_mxfp8, PLAIN_NT, NULL, 0},
    .quantize_x = cpu_quantize_x,
    .attn_dot = attn_dot,
    .attn_exp = attn_exp,
    .attn_axpy = attn_axpy,
    .attn_dotq = attn_dotq,
    .attn_axpyq = attn_axpyq,
};
