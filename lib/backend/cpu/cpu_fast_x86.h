/* The x86 kernels of the fast path, written once and compiled twice:
 * cpu_fast_avx2.c and cpu_fast_avx512.c set the target (a #pragma before
 * including this) and define
 *   CPU_X86_TABLE   the cpu_kernels object to define
 *   CPU_X86_ISA     its cpu_isa
 *   CPU_X86_512     1: F32/F16/BF16 rows in 512-bit registers (16 lanes x 4)
 *   CPU_X86_VNNI    1: the int8 products by vpdpbusd
 * The int8 kernels use 256-bit registers on both levels and compute the
 * same exact integer sums (vpmaddubsw + vpmaddwd never saturates on these
 * ranges: at most 2 x 128 x 127 per pair), then the same float steps, so
 * both levels give the same bits. Not a header of declarations: include
 * it only from those two files. */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu_fast.h"
#include "format/dequant.h"

static inline float x86_f16(const uint8_t *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* The eight lanes summed in a fixed tree: (0+4, 1+5, 2+6, 3+7), then
 * pairs, then the last two. */
static inline float x86_hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lane i (of 8): the sum of products of bytes 4i..4i+3, a unsigned and b
 * signed. */
static inline __m256i x86_dot_us8(__m256i a, __m256i b)
{
#if CPU_X86_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
#endif
}

/* The same for two signed operands: |a| times b with a's signs. */
static inline __m256i x86_dot_ss8(__m256i a, __m256i b)
{
    return x86_dot_us8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
}

static inline __m256i x86_load32(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* ---- f32-x formats ---- */

/* Tail elements past the vector loop, in order, after the lanes. */
#define X86_TAIL(READ)                                                                             \
    for (; i < n; i++) {                                                                           \
        float wv;                                                                                  \
        READ;                                                                                      \
        tail += wv * xf[i];                                                                        \
    }

#if CPU_X86_512
/* 16 lanes x 4 accumulators, then 16 at a time into the first. */
#define X86_PLAIN_DOT(NAME, BYTES, LOAD16, READ1)                                                  \
    static float NAME(const uint8_t *w, const cpu_xrow *x, int64_t n)                              \
    {                                                                                              \
        const float *xf = x->f;                                                                    \
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                \
        int64_t i = 0;                                                                             \
        for (; i + 64 <= n; i += 64) {                                                             \
            a0 = _mm512_fmadd_ps(LOAD16(w + (i + 0) * BYTES), _mm512_loadu_ps(xf + i + 0), a0);   \
            a1 = _mm512_fmadd_ps(LOAD16(w + (i + 16) * BYTES), _mm512_loadu_ps(xf + i + 16), a1);  \
            a2 = _mm512_fmadd_ps(LOAD16(w + (i + 32) * BYTES), _mm512_loadu_ps(xf + i + 32), a2);  \
            a3 = _mm512_fmadd_ps(LOAD16(w + (i + 48) * BYTES), _mm512_loadu_ps(xf + i + 48), a3);  \
        }                                                                                          \
        for (; i + 16 <= n; i += 16)                                                               \
            a0 = _mm512_fmadd_ps(LOAD16(w + i * BYTES), _mm512_loadu_ps(xf + i), a0);              \
        __m512 s = _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3));                    \
        __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),                                        \
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));\
        float tail = 0;                                                                            \
        X86_TAIL(READ1)                                                                            \
        return x86_hsum8(h) + tail;                                                                \
    }

static inline __m512 ld16_f32(const uint8_t *p) { return _mm512_loadu_ps((const float *)p); }
static inline __m512 ld16_f16(const uint8_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
static inline __m512 ld16_bf16(const uint8_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
#define LD_F32 ld16_f32
#define LD_F16 ld16_f16
#define LD_BF16 ld16_bf16
#else
/* 8 lanes x 4 accumulators, then 8 at a time into the first. */
#define X86_PLAIN_DOT(NAME, BYTES, LOAD8, READ1)                                                   \
    static float NAME(const uint8_t *w, const cpu_xrow *x, int64_t n)                              \
    {                                                                                              \
        const float *xf = x->f;                                                                    \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;                                \
        int64_t i = 0;                                                                             \
        for (; i + 32 <= n; i += 32) {                                                             \
            a0 = _mm256_fmadd_ps(LOAD8(w + (i + 0) * BYTES), _mm256_loadu_ps(xf + i + 0), a0);     \
            a1 = _mm256_fmadd_ps(LOAD8(w + (i + 8) * BYTES), _mm256_loadu_ps(xf + i + 8), a1);     \
            a2 = _mm256_fmadd_ps(LOAD8(w + (i + 16) * BYTES), _mm256_loadu_ps(xf + i + 16), a2);   \
            a3 = _mm256_fmadd_ps(LOAD8(w + (i + 24) * BYTES), _mm256_loadu_ps(xf + i + 24), a3);   \
        }                                                                                          \
        for (; i + 8 <= n; i += 8)                                                                 \
            a0 = _mm256_fmadd_ps(LOAD8(w + i * BYTES), _mm256_loadu_ps(xf + i), a0);               \
        __m256 h = _mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3));                    \
        float tail = 0;                                                                            \
        X86_TAIL(READ1)                                                                            \
        return x86_hsum8(h) + tail;                                                                \
    }

static inline __m256 ld8_f32(const uint8_t *p) { return _mm256_loadu_ps((const float *)p); }
static inline __m256 ld8_f16(const uint8_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
static inline __m256 ld8_bf16(const uint8_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
#define LD_F32 ld8_f32
#define LD_F16 ld8_f16
#define LD_BF16 ld8_bf16
#endif

static inline float rd1_bf16(const uint8_t *p)
{
    uint32_t bits = (uint32_t)(p[0] | (p[1] << 8)) << 16;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

X86_PLAIN_DOT(dot_f32, 4, LD_F32, memcpy(&wv, w + i * 4, 4))
X86_PLAIN_DOT(dot_f16, 2, LD_F16, wv = x86_f16(w + i * 2))
X86_PLAIN_DOT(dot_bf16, 2, LD_BF16, wv = rd1_bf16(w + i * 2))

/* ---- int8-x formats: two float accumulators, even and odd blocks ----
 * (named registers, not an array indexed by the block's parity, which
 * the compiler keeps in memory) */

static inline __m256 q8_0_step(__m256 acc, const uint8_t *blk, const cpu_xrow *x, int64_t b)
{
    __m256i p = x86_dot_ss8(x86_load32(blk + 2), x86_load32(x->q + b * 32));
    return _mm256_fmadd_ps(_mm256_set1_ps(x86_f16(blk) * x->d[b]), _mm256_cvtepi32_ps(p), acc);
}

static float dot_q8_0(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t nb = n / 32, b = 0;
    for (; b + 2 <= nb; b += 2) {
        a0 = q8_0_step(a0, w + 34 * b, x, b);
        a1 = q8_0_step(a1, w + 34 * (b + 1), x, b + 1);
    }
    if (b < nb)
        a0 = q8_0_step(a0, w + 34 * b, x, b);
    return x86_hsum8(_mm256_add_ps(a0, a1));
}

static inline __m256 q4_0_step(__m256 acc, const uint8_t *blk, const cpu_xrow *x, int64_t b)
{
    const __m256i lo4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
    __m128i raw = _mm_loadu_si128((const __m128i *)(blk + 2));
    __m256i q = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    q = _mm256_sub_epi8(_mm256_and_si256(q, lo4), eight);
    __m256i p = x86_dot_ss8(q, x86_load32(x->q + b * 32));
    return _mm256_fmadd_ps(_mm256_set1_ps(x86_f16(blk) * x->d[b]), _mm256_cvtepi32_ps(p), acc);
}

static float dot_q4_0(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    int64_t nb = n / 32, b = 0;
    for (; b + 2 <= nb; b += 2) {
        a0 = q4_0_step(a0, w + 18 * b, x, b);
        a1 = q4_0_step(a1, w + 18 * (b + 1), x, b + 1);
    }
    if (b < nb)
        a0 = q4_0_step(a0, w + 18 * b, x, b);
    return x86_hsum8(_mm256_add_ps(a0, a1));
}

/* Q4_K / Q5_K: the scaled sums in vector lanes, the mins in one scalar
 * accumulator in block order, as cpu_fast_scalar.c states them. */
static inline __m256 kq_step(__m256 acc, float *mins, __m256i q, const cpu_xrow *x, int64_t b,
                             float d, float dmin, const uint8_t *scales, int j)
{
    uint8_t sc, m;
    dequant_k4_scale_min(j, scales, &sc, &m);
    __m256i p = x86_dot_us8(q, x86_load32(x->q + b * 32));
    *mins += (dmin * m) * (x->d[b] * (float)x->s[b]);
    return _mm256_fmadd_ps(_mm256_set1_ps((d * sc) * x->d[b]), _mm256_cvtepi32_ps(p), acc);
}

static float dot_q4_k(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    float mins = 0;
    for (int64_t sb = 0; sb < n / 256; sb++, w += 144) {
        const float d = x86_f16(w), dmin = x86_f16(w + 2);
        for (int j = 0; j < 8; j += 2) {
            __m256i raw = x86_load32(w + 16 + 16 * j);
            a0 = kq_step(a0, &mins, _mm256_and_si256(raw, lo4), x, sb * 8 + j, d, dmin, w + 4, j);
            a1 = kq_step(a1, &mins, _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4), x,
                         sb * 8 + j + 1, d, dmin, w + 4, j + 1);
        }
    }
    return x86_hsum8(_mm256_add_ps(a0, a1)) - mins;
}

static float dot_q5_k(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    const __m256i lo4 = _mm256_set1_epi8(0x0F), bit5 = _mm256_set1_epi8(0x10);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    float mins = 0;
    for (int64_t sb = 0; sb < n / 256; sb++, w += 176) {
        const float d = x86_f16(w), dmin = x86_f16(w + 2);
        const __m256i qh = x86_load32(w + 16);
        for (int j = 0; j < 8; j += 2) {
            __m256i raw = x86_load32(w + 48 + 16 * j);
            __m256i m0 = _mm256_set1_epi8((char)(1 << j)), m1 = _mm256_set1_epi8((char)(2 << j));
            __m256i h0 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m0), m0), bit5);
            __m256i h1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m1), m1), bit5);
            a0 = kq_step(a0, &mins, _mm256_or_si256(_mm256_and_si256(raw, lo4), h0), x,
                         sb * 8 + j, d, dmin, w + 4, j);
            a1 = kq_step(a1, &mins,
                         _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4), h1), x,
                         sb * 8 + j + 1, d, dmin, w + 4, j + 1);
        }
    }
    return x86_hsum8(_mm256_add_ps(a0, a1)) - mins;
}

/* Q6_K: quants 0..63 less 32 as signed bytes; lanes 0..3 of the integer
 * sums are the block's first 16 elements (scale sc[0]), lanes 4..7 the
 * next 16 (sc[1]). */
static inline __m256 q6_step(__m256 acc, __m256i q, const int8_t *sc, float d,
                             const cpu_xrow *x, int64_t b)
{
    __m256i p = x86_dot_ss8(_mm256_sub_epi8(q, _mm256_set1_epi8(32)), x86_load32(x->q + b * 32));
    __m256i s = _mm256_setr_epi32(sc[0], sc[0], sc[0], sc[0], sc[1], sc[1], sc[1], sc[1]);
    p = _mm256_mullo_epi32(p, s);
    return _mm256_fmadd_ps(_mm256_set1_ps(d * x->d[b]), _mm256_cvtepi32_ps(p), acc);
}

static float dot_q6_k(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(3);
    __m256 a0 = _mm256_setzero_ps(), a1 = a0;
    for (int64_t sb = 0; sb < n / 256; sb++, w += 210) {
        const float d = x86_f16(w + 208);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h;
            const int8_t *sc = (const int8_t *)(w + 192 + 8 * h);
            __m256i la = x86_load32(ql), lb = x86_load32(ql + 32), qh = x86_load32(w + 128 + 32 * h);
            __m256i q0 = _mm256_or_si256(_mm256_and_si256(la, lo4),
                                         _mm256_slli_epi16(_mm256_and_si256(qh, lo2), 4));
            __m256i q1 = _mm256_or_si256(
                _mm256_and_si256(lb, lo4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), lo2), 4));
            __m256i q2 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(la, 4), lo4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), lo2), 4));
            __m256i q3 = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(lb, 4), lo4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), lo2), 4));
            int64_t b = sb * 8 + 4 * h;
            a0 = q6_step(a0, q0, sc + 0, d, x, b + 0);
            a1 = q6_step(a1, q1, sc + 2, d, x, b + 1);
            a0 = q6_step(a0, q2, sc + 4, d, x, b + 2);
            a1 = q6_step(a1, q3, sc + 6, d, x, b + 3);
        }
    }
    return x86_hsum8(_mm256_add_ps(a0, a1));
}

const cpu_kernels CPU_X86_TABLE = {
    .isa = CPU_X86_ISA,
    .name = CPU_X86_NAME,
    .f32 = dot_f32,
    .f16 = dot_f16,
    .bf16 = dot_bf16,
    .q8_0 = dot_q8_0,
    .q4_0 = dot_q4_0,
    .q4_k = dot_q4_k,
    .q5_k = dot_q5_k,
    .q6_k = dot_q6_k,
};
