/* The x86 kernels of the fast path, written once and compiled three
 * times: cpu_fast_avx2.c, cpu_fast_avx512.c and cpu_fast_amx.c set the
 * target (a #pragma before including this) and define
 *   CPU_X86_TABLE   the cpu_kernels object to define
 *   CPU_X86_ISA     its cpu_isa
 *   CPU_X86_512     1: 512-bit registers (F32/F16/BF16 rows 16 lanes x 4;
 *                   the int8 formats two blocks a register)
 *   CPU_X86_VNNI    1: the int8 products by vpdpbusd
 *   CPU_X86_AMX     1: the panel formats' tile kernels too (cpu_fast_amx.h)
 * The int8 kernels of both levels compute the same exact integer sums
 * (vpmaddubsw + vpmaddwd never saturates on these ranges: at most
 * 2 x 128 x 127 per pair) and the same float steps in the same lanes (an
 * even block's in the low half of a 512-bit register, the odd block's in
 * the high half, as the two 256-bit accumulators), so both levels give
 * the same bits (amx is avx512's code with tile kernels beside it). Not a
 * header of declarations: include it only from those three files. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_fast.h"
#include "backend/cpu/cpu_fast_wrap.h"
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

/* Every kernel is written once for NT tokens (a compile-time constant
 * after inlining): the weights of a block are loaded and unpacked once
 * and meet each token's x in turn, each token with its own accumulators
 * and the very operations, in the same order, of the one-token kernel
 * (which is the same code with NT = 1). So a token's result is the same
 * bits whether it came alone or with others: prefill reads a weight row
 * once per NT tokens at no cost to the invariance. */
#define X86_INLINE static inline __attribute__((always_inline))

/* ---- f32-x formats: one accumulator of VL lanes per row and token ---- */

#if CPU_X86_512
typedef __m512 vf;
enum { VL = 16, PLAIN_NT = 4, PLAIN_NR = 4 };
#define VZERO() _mm512_setzero_ps()
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VLOADF(p) _mm512_loadu_ps(p)
X86_INLINE __m256 v_to8(vf s)
{
    return _mm256_add_ps(_mm512_castps512_ps256(s),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
}
X86_INLINE vf ld_f32(const uint8_t *p) { return _mm512_loadu_ps((const float *)p); }
X86_INLINE vf ld_f16(const uint8_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
X86_INLINE vf ld_bf16(const uint8_t *p)
{
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
#else
typedef __m256 vf;
enum { VL = 8, PLAIN_NT = 2, PLAIN_NR = 4 };
#define VZERO() _mm256_setzero_ps()
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VLOADF(p) _mm256_loadu_ps(p)
X86_INLINE __m256 v_to8(vf s) { return s; }
X86_INLINE vf ld_f32(const uint8_t *p) { return _mm256_loadu_ps((const float *)p); }
X86_INLINE vf ld_f16(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
X86_INLINE vf ld_bf16(const uint8_t *p)
{
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
#endif

X86_INLINE float rd1_f32(const uint8_t *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}
X86_INLINE float rd1_f16(const uint8_t *p) { return x86_f16(p); }
X86_INLINE float rd1_bf16(const uint8_t *p)
{
    uint32_t bits = (uint32_t)(p[0] | (p[1] << 8)) << 16;
    float v;
    memcpy(&v, &bits, 4);
    return v;
}

/* How far ahead of its loads a one-row, one-token kernel (decode's)
 * prefetches its weights: 8 KiB, past the end of the row into the next
 * one (a task's rows are read in order, back to back). Decode streams
 * each weight once, and the hardware's prefetchers alone kept too few
 * lines in flight: BF16 rows of 4,096 on the 2-core VM, two threads
 * streaming a 384 MiB matrix, 15 interleaved rounds, the median 20.9 ->
 * 34.1 GB/s (4 KiB ahead 31.3; a bf16-x vdpbf16ps loop as llama.cpp's
 * 29.4 in the same rounds); the Qwen3-8B shape's decode, BF16 and
 * Q4_K_M, 1.1x to 1.5x (docs/decisions/0018, "Decode prefetch"). The
 * lines go to L2 (prefetcht1, AHEAD_HINT), not L1: on the 2-core Xeon
 * VM the Qwen3-0.6B shape's decode read Q8_0 40.0 / 41.9 -> 47.2 / 44.3
 * tok/s, BF16 16.4 / 16.5 -> 19.7 / 19.9 (L1's few miss buffers held
 * the stream back). The arithmetic is untouched: the same bits. */
enum { PLAIN_AHEAD = 8192, AHEAD_HINT = 2 };

/* The panels' decode kernels (one token) likewise: every cache line of
 * the panel PLAIN_AHEAD bytes on, as each panel is read. */
X86_INLINE void panel_ahead(const uint8_t *w, const int NT, const int BYTES)
{
    if (NT == 1)
        for (int k = 0; k < BYTES; k += 64)
            __builtin_prefetch(w + PLAIN_AHEAD + k, 0, AHEAD_HINT);
}

/* One accumulator of VL lanes per (row, token): each step of VL values
 * one FMA into it, then the lanes folded to 8 (AVX-512: low half + high
 * half), the fixed tree of x86_hsum8, then the tail (n mod VL) in order.
 * Written for NR rows (w, w + rbytes, ...) and NT tokens at once, both
 * compile-time constants: a block of rows shares each load of x and a
 * group of tokens each widened weight vector, and every (row, token)
 * pair runs the same FMAs in the same order whatever the block, so its
 * result is the same bits alone or in any block. out[r * NT + t].
 *
 * Prefill takes blocks of PLAIN_NR rows x PLAIN_NT tokens: x's loads per
 * FMA fall to a quarter, so rows wider than L1 holds (x of 8 tokens at
 * 2048 or 3072 columns) run as fast as narrow ones (2-core AVX-512 VM,
 * one core, weights in L2: 1024 columns 72 -> 100, 3072 columns 34 -> 91
 * GMAC/s against four accumulators a token and one row). Decode runs a
 * row at a time, prefetched PLAIN_AHEAD bytes on: the rows of a block
 * read side by side stream from memory at half the rate of one row read
 * through (13.5 against 17.8 GMAC/s, the same bytes), and two rows a call
 * with their streams prefetched measured slower in the model too
 * (decision 0018). */
X86_INLINE void plain_blk(const uint8_t *w, size_t rbytes, const cpu_xrow *x, int64_t n,
                          float *out, const int NR, const int NT, const int BYTES,
                          vf (*load)(const uint8_t *), float (*read1)(const uint8_t *))
{
    vf a[PLAIN_NR][PLAIN_NT];
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
            a[r][t] = VZERO();
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf xv[PLAIN_NT];
        if (NR == 1 && NT == 1) /* decode: the stream PLAIN_AHEAD bytes on */
            __builtin_prefetch(w + i * BYTES + PLAIN_AHEAD, 0, AHEAD_HINT);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++)
            xv[t] = VLOADF(x[t].f + i);
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++) {
            vf wv = load(w + (size_t)r * rbytes + i * BYTES);
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++)
                a[r][t] = VFMA(wv, xv[t], a[r][t]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            float tail = 0;
            for (int64_t j = i; j < n; j++)
                tail += read1(w + (size_t)r * rbytes + j * BYTES) * x[t].f[j];
            out[r * NT + t] = x86_hsum8(v_to8(a[r][t])) + tail;
        }
}

PLAIN_KERNELS(f32, 4)
PLAIN_KERNELS(f16, 2)
PLAIN_KERNELS(bf16, 2)

/* ---- int8-x formats: per token two float accumulators, even and odd
 * blocks (named registers after unrolling: an array indexed by a
 * run-time parity would live in memory) ---- */
enum { Q_NT = 4 };

X86_INLINE __m256 q_fma(__m256 acc, __m256i p, float scale)
{
    return _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(p), acc);
}

/* Q8_0 and Q4_0 share the loop: signed weight bytes q of one block. */
X86_INLINE __m256i q8_0_unpack(const uint8_t *blk) { return x86_load32(blk + 2); }
X86_INLINE __m256i q4_0_unpack(const uint8_t *blk)
{
    __m128i raw = _mm_loadu_si128((const __m128i *)(blk + 2));
    __m256i q = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_sub_epi8(_mm256_and_si256(q, _mm256_set1_epi8(0x0F)), _mm256_set1_epi8(8));
}

X86_INLINE void q32_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT,
                       const int BYTES, __m256i (*unpack)(const uint8_t *))
{
    __m256 a0[Q_NT], a1[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        a0[t] = a1[t] = _mm256_setzero_ps();
    int64_t nb = n / 32, b = 0;
    for (; b + 2 <= nb; b += 2) {
        const uint8_t *b0 = w + BYTES * b, *b1 = b0 + BYTES;
        __m256i q0 = unpack(b0), q1 = unpack(b1);
        __m256i u0 = _mm256_sign_epi8(q0, q0), u1 = _mm256_sign_epi8(q1, q1);
        float d0 = x86_f16(b0), d1 = x86_f16(b1);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m256i p0 = x86_dot_us8(u0, _mm256_sign_epi8(x86_load32(x[t].q + b * 32), q0));
            __m256i p1 = x86_dot_us8(u1, _mm256_sign_epi8(x86_load32(x[t].q + b * 32 + 32), q1));
            a0[t] = q_fma(a0[t], p0, d0 * x[t].d[b]);
            a1[t] = q_fma(a1[t], p1, d1 * x[t].d[b + 1]);
        }
    }
    if (b < nb) {
        const uint8_t *b0 = w + BYTES * b;
        __m256i q0 = unpack(b0), u0 = _mm256_sign_epi8(q0, q0);
        float d0 = x86_f16(b0);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m256i p0 = x86_dot_us8(u0, _mm256_sign_epi8(x86_load32(x[t].q + b * 32), q0));
            a0[t] = q_fma(a0[t], p0, d0 * x[t].d[b]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(_mm256_add_ps(a0[t], a1[t]));
}

/* Q4_K / Q5_K: the eight 6-bit scales and mins of a super-block (the
 * layout of dequant_k4_scale_min) as f32 lanes, unpacked four at a time
 * from the 12 bytes read as three 32-bit words: scales 0-3 are the low 6
 * bits of bytes 0-3, mins 0-3 of bytes 4-7; scales 4-7 take their low
 * nibble from bytes 8-11 and their top two bits from bits 6-7 of bytes
 * 0-3, mins 4-7 the high nibble of bytes 8-11 and bits 6-7 of bytes 4-7. */
X86_INLINE void k4_scales(const uint8_t *q, __m256 *sc, __m256 *m)
{
    uint32_t w0, w1, w2;
    memcpy(&w0, q, 4);
    memcpy(&w1, q + 4, 4);
    memcpy(&w2, q + 8, 4);
    const uint32_t low6 = 0x3f3f3f3f, low4 = 0x0f0f0f0f, low2 = 0x03030303;
    uint32_t sc03 = w0 & low6, m03 = w1 & low6;
    uint32_t sc47 = (w2 & low4) | (((w0 >> 6) & low2) << 4);
    uint32_t m47 = ((w2 >> 4) & low4) | (((w1 >> 6) & low2) << 4);
    *sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32((int)sc03, (int)sc47, 0, 0)));
    *m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_setr_epi32((int)m03, (int)m47, 0, 0)));
}

/* Lane j of v in every lane. */
X86_INLINE __m256 lane_bcast(__m256 v, int j)
{
    return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(j));
}

/* Q4_K (Q5 = 0) and Q5_K (Q5 = 1): the scaled sums in the even/odd
 * accumulators, block j's float factor (d sc_j) d_x,j computed for the
 * eight blocks at once (the same two roundings as one at a time); the
 * mins of the eight blocks in the eight lanes of their own accumulator,
 * lane j += (dmin m_j) (d_x,j s_j) by one FMA a super-block, subtracted
 * last. */
X86_INLINE void k45_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT,
                       const int Q5)
{
    const int BYTES = Q5 ? 176 : 144, QS = Q5 ? 48 : 16;
    const __m256i lo4 = _mm256_set1_epi8(0x0F), bit5 = _mm256_set1_epi8(0x10);
    __m256 a0[Q_NT], a1[Q_NT], mins[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        a0[t] = a1[t] = mins[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < n / 256; sb++, w += BYTES) {
        __m256 sc, m;
        k4_scales(w + 4, &sc, &m);
        __m256 dsc = _mm256_mul_ps(_mm256_set1_ps(x86_f16(w)), sc);
        __m256 dm = _mm256_mul_ps(_mm256_set1_ps(x86_f16(w + 2)), m);
        __m256 f[Q_NT];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m256 xd = _mm256_loadu_ps(x[t].d + sb * 8);
            f[t] = _mm256_mul_ps(dsc, xd);
            __m256 xs = _mm256_mul_ps(xd, _mm256_cvtepi32_ps(x86_load32(x[t].s + sb * 8)));
            mins[t] = _mm256_fmadd_ps(dm, xs, mins[t]);
        }
        __m256i qh = Q5 ? x86_load32(w + 16) : _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 8; j += 2) {
            __m256i raw = x86_load32(w + QS + 16 * j);
            __m256i q0 = _mm256_and_si256(raw, lo4);
            __m256i q1 = _mm256_and_si256(_mm256_srli_epi16(raw, 4), lo4);
            if (Q5) {
                __m256i m0 = _mm256_set1_epi8((char)(1 << j)), m1 = _mm256_set1_epi8((char)(2 << j));
                q0 = _mm256_or_si256(
                    q0, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m0), m0), bit5));
                q1 = _mm256_or_si256(
                    q1, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m1), m1), bit5));
            }
            int64_t b = sb * 8 + j;
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m256i p0 = x86_dot_us8(q0, x86_load32(x[t].q + b * 32));
                __m256i p1 = x86_dot_us8(q1, x86_load32(x[t].q + b * 32 + 32));
                a0[t] = _mm256_fmadd_ps(lane_bcast(f[t], j), _mm256_cvtepi32_ps(p0), a0[t]);
                a1[t] = _mm256_fmadd_ps(lane_bcast(f[t], j + 1), _mm256_cvtepi32_ps(p1), a1[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(_mm256_add_ps(a0[t], a1[t])) - x86_hsum8(mins[t]);
}

#if CPU_X86_512
/* The 512-bit form of the int8 kernels: a register holds an even block's
 * eight lanes (low half) and the next odd block's (high half), which are
 * the even and odd accumulators of the 256-bit form, lane for lane; the
 * same integer sums and the same float steps give the same bits at half
 * the instructions. */
X86_INLINE __m512i z_pair(__m256i lo, __m256i hi)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* lanes j (low half) and j + 1 (high half) of f */
X86_INLINE __m512 z_lanes(__m256 f, int j)
{
    const __m512i idx = _mm512_setr_epi32(j, j, j, j, j, j, j, j, j + 1, j + 1, j + 1, j + 1,
                                          j + 1, j + 1, j + 1, j + 1);
    return _mm512_permutexvar_ps(idx, _mm512_castps256_ps512(f));
}

X86_INLINE __m256 z_fold(__m512 acc)
{
    return _mm256_add_ps(_mm512_castps512_ps256(acc),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
}

X86_INLINE void k45_nt_z(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out,
                         const int NT, const int Q5)
{
    const int BYTES = Q5 ? 176 : 144, QS = Q5 ? 48 : 16;
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    const __m256i bit5 = _mm256_set1_epi8(0x10);
    __m512 acc[Q_NT];
    __m256 mins[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        acc[t] = _mm512_setzero_ps();
        mins[t] = _mm256_setzero_ps();
    }
    for (int64_t sb = 0; sb < n / 256; sb++, w += BYTES) {
        __m256 sc, m;
        k4_scales(w + 4, &sc, &m);
        __m256 dsc = _mm256_mul_ps(_mm256_set1_ps(x86_f16(w)), sc);
        __m256 dm = _mm256_mul_ps(_mm256_set1_ps(x86_f16(w + 2)), m);
        __m256 f[Q_NT];
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m256 xd = _mm256_loadu_ps(x[t].d + sb * 8);
            f[t] = _mm256_mul_ps(dsc, xd);
            __m256 xs = _mm256_mul_ps(xd, _mm256_cvtepi32_ps(x86_load32(x[t].s + sb * 8)));
            mins[t] = _mm256_fmadd_ps(dm, xs, mins[t]);
        }
        __m256i qh = Q5 ? x86_load32(w + 16) : _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int j = 0; j < 8; j += 2) {
            __m256i raw = x86_load32(w + QS + 16 * j);
            __m512i q = _mm512_and_si512(z_pair(raw, _mm256_srli_epi16(raw, 4)), lo4);
            if (Q5) {
                __m256i m0 = _mm256_set1_epi8((char)(1 << j)), m1 = _mm256_set1_epi8((char)(2 << j));
                __m256i h0 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m0), m0), bit5);
                __m256i h1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m1), m1), bit5);
                q = _mm512_or_si512(q, z_pair(h0, h1));
            }
            int64_t b = sb * 8 + j;
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q,
                                                _mm512_loadu_si512(x[t].q + b * 32));
                acc[t] = _mm512_fmadd_ps(z_lanes(f[t], j), _mm512_cvtepi32_ps(p), acc[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(z_fold(acc[t])) - x86_hsum8(mins[t]);
}
/* Signed weight bytes w times signed x: |w| times x with w's signs
 * (vpsignb has no 512-bit form; a zero w makes the product 0 either way). */
X86_INLINE __m512i z_dot_ss8(__m512i w, __m512i x)
{
    __m512i xs = _mm512_mask_sub_epi8(x, _mm512_movepi8_mask(w), _mm512_setzero_si512(), x);
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_abs_epi8(w), xs);
}

/* Scalars a (low half) and b (high half). */
X86_INLINE __m512 z_two(float a, float b)
{
    return _mm512_castpd_ps(_mm512_insertf64x4(_mm512_castps_pd(_mm512_set1_ps(a)),
                                               _mm256_castps_pd(_mm256_set1_ps(b)), 1));
}

X86_INLINE void q32_nt_z(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out,
                         const int NT, const int BYTES, __m256i (*unpack)(const uint8_t *))
{
    __m512 acc[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    int64_t nb = n / 32, b = 0;
    for (; b + 2 <= nb; b += 2) {
        const uint8_t *b0 = w + BYTES * b, *b1 = b0 + BYTES;
        __m512i q = z_pair(unpack(b0), unpack(b1));
        float d0 = x86_f16(b0), d1 = x86_f16(b1);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            __m512i p = z_dot_ss8(q, _mm512_loadu_si512(x[t].q + b * 32));
            acc[t] = _mm512_fmadd_ps(z_two(d0 * x[t].d[b], d1 * x[t].d[b + 1]),
                                     _mm512_cvtepi32_ps(p), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++) {
        __m256 a0 = _mm512_castps512_ps256(acc[t]);
        __m256 a1 = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[t]), 1));
        if (b < nb) {
            const uint8_t *b0 = w + BYTES * b;
            __m256i q0 = unpack(b0);
            __m256i p0 = x86_dot_us8(_mm256_sign_epi8(q0, q0),
                                     _mm256_sign_epi8(x86_load32(x[t].q + b * 32), q0));
            a0 = q_fma(a0, p0, x86_f16(b0) * x[t].d[b]);
        }
        out[t] = x86_hsum8(_mm256_add_ps(a0, a1));
    }
}
#define Q32_NT q32_nt_z
#define K45_NT k45_nt_z
#else
#define K45_NT k45_nt
#define Q32_NT q32_nt
#endif

/* Q6_K: quants 0..63 less 32 as signed bytes; lanes 0..3 of a block's
 * integer sums are its first 16 elements (scale sc[0]), lanes 4..7 the
 * next 16 (sc[1]); the scaled sums are exact integers. */
X86_INLINE __m256 q6_block(__m256 acc, __m256i u, __m256i q, __m256i s, float d,
                           const cpu_xrow *x, int64_t b)
{
    __m256i p = x86_dot_us8(u, _mm256_sign_epi8(x86_load32(x->q + b * 32), q));
    return q_fma(acc, _mm256_mullo_epi32(p, s), d * x->d[b]);
}

X86_INLINE void q6_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT)
{
    const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(3),
                  off = _mm256_set1_epi8(32);
    __m256 a0[Q_NT], a1[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        a0[t] = a1[t] = _mm256_setzero_ps();
    for (int64_t sb = 0; sb < n / 256; sb++, w += 210) {
        const float d = x86_f16(w + 208);
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = w + 64 * h;
            const int8_t *sc = (const int8_t *)(w + 192 + 8 * h);
            __m256i la = x86_load32(ql), lb = x86_load32(ql + 32), qh = x86_load32(w + 128 + 32 * h);
            __m256i q[4], u[4], s[4];
            q[0] = _mm256_or_si256(_mm256_and_si256(la, lo4),
                                   _mm256_slli_epi16(_mm256_and_si256(qh, lo2), 4));
            q[1] = _mm256_or_si256(
                _mm256_and_si256(lb, lo4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), lo2), 4));
            q[2] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(la, 4), lo4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), lo2), 4));
            q[3] = _mm256_or_si256(
                _mm256_and_si256(_mm256_srli_epi16(lb, 4), lo4),
                _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), lo2), 4));
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                q[g] = _mm256_sub_epi8(q[g], off);
                u[g] = _mm256_sign_epi8(q[g], q[g]);
                s[g] = _mm256_setr_epi32(sc[2 * g], sc[2 * g], sc[2 * g], sc[2 * g],
                                         sc[2 * g + 1], sc[2 * g + 1], sc[2 * g + 1],
                                         sc[2 * g + 1]);
            }
            int64_t b = sb * 8 + 4 * h;
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                a0[t] = q6_block(a0[t], u[0], q[0], s[0], d, &x[t], b + 0);
                a1[t] = q6_block(a1[t], u[1], q[1], s[1], d, &x[t], b + 1);
                a0[t] = q6_block(a0[t], u[2], q[2], s[2], d, &x[t], b + 2);
                a1[t] = q6_block(a1[t], u[3], q[3], s[3], d, &x[t], b + 3);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(_mm256_add_ps(a0[t], a1[t]));
}

#if CPU_X86_512
/* Q6_K on 512-bit registers: blocks b (low half) and b + 1 (high half),
 * then b + 2 and b + 3: the even and odd accumulators as above. */
X86_INLINE void q6_nt_z(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT)
{
    const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(3),
                  off = _mm256_set1_epi8(32);
    __m512 acc[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t] = _mm512_setzero_ps();
    for (int64_t sb = 0; sb < n / 256; sb++, w += 210) {
        const float d = x86_f16(w + 208);
#pragma GCC unroll 2
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
            __m512i qa = z_pair(_mm256_sub_epi8(q0, off), _mm256_sub_epi8(q1, off));
            __m512i qb = z_pair(_mm256_sub_epi8(q2, off), _mm256_sub_epi8(q3, off));
            __m512i sa = _mm512_setr_epi32(sc[0], sc[0], sc[0], sc[0], sc[1], sc[1], sc[1], sc[1],
                                           sc[2], sc[2], sc[2], sc[2], sc[3], sc[3], sc[3], sc[3]);
            __m512i sbv = _mm512_setr_epi32(sc[4], sc[4], sc[4], sc[4], sc[5], sc[5], sc[5], sc[5],
                                            sc[6], sc[6], sc[6], sc[6], sc[7], sc[7], sc[7], sc[7]);
            int64_t b = sb * 8 + 4 * h;
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m512i pa = _mm512_mullo_epi32(z_dot_ss8(qa, _mm512_loadu_si512(x[t].q + b * 32)), sa);
                acc[t] = _mm512_fmadd_ps(z_two(d * x[t].d[b], d * x[t].d[b + 1]),
                                         _mm512_cvtepi32_ps(pa), acc[t]);
                __m512i pb =
                    _mm512_mullo_epi32(z_dot_ss8(qb, _mm512_loadu_si512(x[t].q + b * 32 + 64)), sbv);
                acc[t] = _mm512_fmadd_ps(z_two(d * x[t].d[b + 2], d * x[t].d[b + 3]),
                                         _mm512_cvtepi32_ps(pb), acc[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(z_fold(acc[t]));
}
#define Q6_NT q6_nt_z
#else
#define Q6_NT q6_nt
#endif

/* NVFP4: a 64-value block is four 16-value sub-blocks with their own
 * scales; an x block of 32 meets two of them. Their 32 nibbles (low then
 * high nibbles of each sub-block's 8 bytes, the dequantizer's order) are
 * looked up as doubled E2M1 integers, multiplied with x's int8 by the
 * sign trick; lanes 0-3 of the product sum the first sub-block, lanes 4-7
 * the second, each lane scaled by its sub-block's factor. The same code
 * at every x86 level: the same bits. */
X86_INLINE void nvfp4_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out,
                         const int NT)
{
    const __m256i lut = _mm256_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
                                         0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
    const __m128i lo4 = _mm_set1_epi8(0x0F);
    __m256 acc[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 64; i++, w += 36) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m128i raw = _mm_loadu_si128((const __m128i *)(w + 4 + 16 * h));
            __m128i lo = _mm_and_si128(raw, lo4), hi = _mm_and_si128(_mm_srli_epi16(raw, 4), lo4);
            __m256i q = _mm256_shuffle_epi8(
                lut, _mm256_set_m128i(_mm_unpackhi_epi64(lo, hi), _mm_unpacklo_epi64(lo, hi)));
            __m256i u = _mm256_sign_epi8(q, q);
            float d0 = cpu_ue4m3_half(w[2 * h]), d1 = cpu_ue4m3_half(w[2 * h + 1]);
            int64_t b = 2 * i + h;
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++) {
                __m256i p = x86_dot_us8(u, _mm256_sign_epi8(x86_load32(x[t].q + b * 32), q));
                float xd = x[t].d[b];
                __m256 f = _mm256_set_m128(_mm_set1_ps(d1 * xd), _mm_set1_ps(d0 * xd));
                acc[t] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(p), acc[t]);
            }
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(acc[t]);
}

Q_SEQ_KERNELS(q8_0, Q32_NT(w, x, n, out, NT, 34, q8_0_unpack))
Q_SEQ_KERNELS(q4_0, Q32_NT(w, x, n, out, NT, 18, q4_0_unpack))
Q_SEQ_KERNELS(q4_k, K45_NT(w, x, n, out, NT, 0))
Q_SEQ_KERNELS(q5_k, K45_NT(w, x, n, out, NT, 1))
Q_SEQ_KERNELS(q6_k, Q6_NT(w, x, n, out, NT))
Q_SEQ_KERNELS(nvfp4, nvfp4_nt(w, x, n, out, NT))

/* ---- panels (cpu_panel.h): each 32-block's products summed exactly in
 * its own int32 lane over the panel's 8 steps, its scales applied once ----
 * A panel's 16 lanes are one 512-bit register, or two 256-bit halves
 * (lanes 0-7, 8-15) on AVX2, holding the very same values: the integer
 * sums are exact either way, and the float steps are the same per lane,
 * so both levels give the same bits. Per token and panel:
 *   Q8_0: acc_l += float(S_l) * (d_l * dx_l)
 *   Q4_K: acc_l += float(S_l) * ((d sc_l) * dx_l),
 *         mins_l += (dmin m_l) * (dx_l * float(s_l)); result sum(acc) - sum(mins)
 *   Q6_K: acc_l += float(sa_l * A_l + sb_l * B_l) * (d * dx_l), A and B the
 *         sums of the block's first and last 16 products (q less 32)
 * then the 16 lanes folded to 8 (low + high half) and summed by x86_hsum8. */
#if CPU_X86_512
typedef __m512i pbv; /* a step: 64 bytes */
typedef __m512i piv; /* 16 int32 lanes */
typedef __m512 pfv;  /* 16 f32 lanes */
X86_INLINE pbv pb_load(const void *p) { return _mm512_loadu_si512(p); }
X86_INLINE pbv pb_and(pbv a, uint8_t m) { return _mm512_and_si512(a, _mm512_set1_epi8((char)m)); }
X86_INLINE pbv pb_srl(pbv a, int n) { return _mm512_srli_epi16(a, (unsigned)n); }
X86_INLINE pbv pb_sll4(pbv a) { return _mm512_slli_epi16(a, 4); }
X86_INLINE pbv pb_or(pbv a, pbv b) { return _mm512_or_si512(a, b); }
/* q with bit s of each byte of top as its bit 4 (q's bit 4 clear): the
 * 16-bit shift moves no other byte's bit onto a bit 4. */
X86_INLINE pbv pb_fifth(pbv q, pbv top, int s)
{
    pbv t = s < 4 ? _mm512_slli_epi16(top, (unsigned)(4 - s)) : _mm512_srli_epi16(top, (unsigned)(s - 4));
    return _mm512_ternarylogic_epi32(q, t, _mm512_set1_epi8(0x10), 0xF8); /* q | (t & 0x10) */
}
X86_INLINE piv pi_zero(void) { return _mm512_setzero_si512(); }
X86_INLINE piv pi_load(const int32_t *p) { return _mm512_loadu_si512(p); }
X86_INLINE piv pi_i8(const uint8_t *p) { return _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p)); }
X86_INLINE piv pi_add(piv a, piv b) { return _mm512_add_epi32(a, b); }
X86_INLINE piv pi_sub(piv a, piv b) { return _mm512_sub_epi32(a, b); }
X86_INLINE piv pi_sll(piv a, int n) { return _mm512_slli_epi32(a, (unsigned)n); }
X86_INLINE piv pi_mul(piv a, piv b) { return _mm512_mullo_epi32(a, b); }
/* acc + per lane the sum of 4 products of u (unsigned bytes) and x (signed) */
X86_INLINE piv pi_dot_u(piv acc, pbv u, const int8_t *x)
{
    return _mm512_dpbusd_epi32(acc, u, _mm512_loadu_si512(x));
}
X86_INLINE pfv pf_zero(void) { return _mm512_setzero_ps(); }
X86_INLINE pfv pf_load(const float *p) { return _mm512_loadu_ps(p); }
X86_INLINE pfv pf_cvt(piv a) { return _mm512_cvtepi32_ps(a); }
X86_INLINE pfv pf_mul(pfv a, pfv b) { return _mm512_mul_ps(a, b); }
X86_INLINE pfv pf_fma(pfv a, pfv b, pfv c) { return _mm512_fmadd_ps(a, b, c); }
X86_INLINE pfv pf_f16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
X86_INLINE pfv pf_u8(const uint8_t *p)
{
    return _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
}
X86_INLINE pfv pf_two(float a, float b) { return z_two(a, b); }
X86_INLINE __m256 pf_fold(pfv a) { return z_fold(a); }
#else
typedef struct { __m256i a, b; } pbv;
typedef struct { __m256i a, b; } piv;
typedef struct { __m256 a, b; } pfv;
X86_INLINE pbv pb_load(const void *p)
{
    return (pbv){x86_load32(p), x86_load32((const uint8_t *)p + 32)};
}
X86_INLINE pbv pb_and(pbv v, uint8_t m)
{
    __m256i k = _mm256_set1_epi8((char)m);
    return (pbv){_mm256_and_si256(v.a, k), _mm256_and_si256(v.b, k)};
}
X86_INLINE pbv pb_srl(pbv v, int n)
{
    return (pbv){_mm256_srli_epi16(v.a, n), _mm256_srli_epi16(v.b, n)};
}
X86_INLINE pbv pb_sll4(pbv v) { return (pbv){_mm256_slli_epi16(v.a, 4), _mm256_slli_epi16(v.b, 4)}; }
X86_INLINE pbv pb_or(pbv x, pbv y) { return (pbv){_mm256_or_si256(x.a, y.a), _mm256_or_si256(x.b, y.b)}; }
X86_INLINE pbv pb_fifth(pbv q, pbv top, int s)
{
    pbv t = s < 4 ? (pbv){_mm256_slli_epi16(top.a, 4 - s), _mm256_slli_epi16(top.b, 4 - s)}
                  : pb_srl(top, s - 4);
    return pb_or(q, pb_and(t, 0x10));
}
X86_INLINE piv pi_zero(void) { return (piv){_mm256_setzero_si256(), _mm256_setzero_si256()}; }
X86_INLINE piv pi_load(const int32_t *p) { return (piv){x86_load32(p), x86_load32(p + 8)}; }
X86_INLINE piv pi_i8(const uint8_t *p)
{
    return (piv){_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)),
                 _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8)))};
}
X86_INLINE piv pi_add(piv x, piv y) { return (piv){_mm256_add_epi32(x.a, y.a), _mm256_add_epi32(x.b, y.b)}; }
X86_INLINE piv pi_sub(piv x, piv y) { return (piv){_mm256_sub_epi32(x.a, y.a), _mm256_sub_epi32(x.b, y.b)}; }
X86_INLINE piv pi_sll(piv x, int n) { return (piv){_mm256_slli_epi32(x.a, n), _mm256_slli_epi32(x.b, n)}; }
X86_INLINE piv pi_mul(piv x, piv y) { return (piv){_mm256_mullo_epi32(x.a, y.a), _mm256_mullo_epi32(x.b, y.b)}; }
X86_INLINE piv pi_dot_u(piv acc, pbv u, const int8_t *x)
{
    return (piv){_mm256_add_epi32(acc.a, x86_dot_us8(u.a, x86_load32(x))),
                 _mm256_add_epi32(acc.b, x86_dot_us8(u.b, x86_load32(x + 32)))};
}
X86_INLINE pfv pf_zero(void) { return (pfv){_mm256_setzero_ps(), _mm256_setzero_ps()}; }
X86_INLINE pfv pf_load(const float *p) { return (pfv){_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
X86_INLINE pfv pf_cvt(piv x) { return (pfv){_mm256_cvtepi32_ps(x.a), _mm256_cvtepi32_ps(x.b)}; }
X86_INLINE pfv pf_mul(pfv x, pfv y) { return (pfv){_mm256_mul_ps(x.a, y.a), _mm256_mul_ps(x.b, y.b)}; }
X86_INLINE pfv pf_fma(pfv x, pfv y, pfv z)
{
    return (pfv){_mm256_fmadd_ps(x.a, y.a, z.a), _mm256_fmadd_ps(x.b, y.b, z.b)};
}
X86_INLINE pfv pf_f16(const uint8_t *p)
{
    return (pfv){_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)),
                 _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p + 16)))};
}
X86_INLINE pfv pf_u8(const uint8_t *p)
{
    return (pfv){_mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p))),
                 _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(p + 8))))};
}
X86_INLINE pfv pf_two(float x, float y) { return (pfv){_mm256_set1_ps(x), _mm256_set1_ps(y)}; }
X86_INLINE __m256 pf_fold(pfv v) { return _mm256_add_ps(v.a, v.b); }
#endif

/* The 8 steps' unsigned products with x, each lane's sum exact: two
 * chains of vpdpbusd (integer sums: the order is free). */
X86_INLINE piv pi_sum8(const pbv *q, const int8_t *x)
{
    piv a0 = pi_zero(), a1 = pi_zero();
#pragma GCC unroll 8
    for (int s = 0; s < 8; s += 2) {
        a0 = pi_dot_u(a0, q[s], x + 64 * s);
        a1 = pi_dot_u(a1, q[s + 1], x + 64 * s + 64);
    }
    return pi_add(a0, a1);
}
#if CPU_X86_512
/* Signed weight bytes, as w + 128 unsigned: the sum of (w + 128) x less
 * 128 sum(x), exact. The 8 steps' offset form first (shared by tokens). */
typedef struct { pbv u[8]; } pq8;
X86_INLINE pq8 pq8_prep(const pbv *q)
{
    pq8 r;
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++)
        r.u[s] = _mm512_xor_si512(q[s], _mm512_set1_epi8((char)0x80));
    return r;
}
X86_INLINE piv pq8_dot(const pq8 *w, const pbv *q, const int8_t *x, const int32_t *xs)
{
    (void)q;
    return pi_sub(pi_sum8(w->u, x), pi_sll(pi_load(xs), 7));
}
#else
/* Signed weight bytes: |w| times x with w's signs (exact: at most
 * 2 x 128 x 127 per pair of vpmaddubsw). */
typedef struct { pbv u[8]; } pq8;
X86_INLINE pq8 pq8_prep(const pbv *q)
{
    pq8 r;
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++)
        r.u[s] = (pbv){_mm256_sign_epi8(q[s].a, q[s].a), _mm256_sign_epi8(q[s].b, q[s].b)};
    return r;
}
X86_INLINE piv pq8_dot(const pq8 *w, const pbv *q, const int8_t *x, const int32_t *xs)
{
    (void)xs;
    piv acc = pi_zero();
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        const int8_t *xp = x + 64 * s;
        acc.a = _mm256_add_epi32(acc.a, x86_dot_us8(w->u[s].a, _mm256_sign_epi8(x86_load32(xp), q[s].a)));
        acc.b = _mm256_add_epi32(acc.b, x86_dot_us8(w->u[s].b, _mm256_sign_epi8(x86_load32(xp + 32), q[s].b)));
    }
    return acc;
}
#endif

X86_INLINE void p_q8_0_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT)
{
    pfv acc[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t] = pf_zero();
    for (int64_t p = 0; p < n / 512; p++, w += 544) {
        panel_ahead(w, NT, 544);
        pfv dw = pf_f16(w);
        pbv q[8];
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++)
            q[s] = pb_load(w + 32 + 64 * s);
        pq8 u = pq8_prep(q);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            piv sum = pq8_dot(&u, q, x[t].p + p * 512, x[t].s + p * 16);
            acc[t] = pf_fma(pf_cvt(sum), pf_mul(dw, pf_load(x[t].d + p * 16)), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(pf_fold(acc[t]));
}

/* The 4-bit fields of a panel: nibble vector k gives steps 2k and 2k + 1. */
X86_INLINE void p_nibbles(const uint8_t *v, pbv *q)
{
#pragma GCC unroll 8
    for (int k = 0; k < 4; k++) {
        pbv raw = pb_load(v + 64 * k);
        q[2 * k] = pb_and(raw, 0x0F);
        q[2 * k + 1] = pb_and(pb_srl(raw, 4), 0x0F);
    }
}

/* Q4_0: the sums of q x with q = 0..15, less 8 sum(x): exact. */
X86_INLINE void p_q4_0_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT)
{
    pfv acc[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t] = pf_zero();
    for (int64_t p = 0; p < n / 512; p++, w += 288) {
        panel_ahead(w, NT, 288);
        pfv dw = pf_f16(w);
        pbv q[8];
        p_nibbles(w + 32, q);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const int8_t *xp = x[t].p + p * 512;
            piv sum = pi_sub(pi_sum8(q, xp), pi_sll(pi_load(x[t].s + p * 16), 3));
            acc[t] = pf_fma(pf_cvt(sum), pf_mul(dw, pf_load(x[t].d + p * 16)), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(pf_fold(acc[t]));
}

X86_INLINE void p_k45_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT,
                         const int Q5)
{
    pfv acc[Q_NT], mins[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t] = mins[t] = pf_zero();
    for (int64_t p = 0; p < n / 512; p++, w += Q5 ? 360 : 296) {
        panel_ahead(w, NT, Q5 ? 360 : 296);
        pfv dsc = pf_mul(pf_two(x86_f16(w), x86_f16(w + 4)), pf_u8(w + 8));
        pfv dm = pf_mul(pf_two(x86_f16(w + 2), x86_f16(w + 6)), pf_u8(w + 24));
        pbv q[8];
        p_nibbles(w + 40, q);
        if (Q5) {
            pbv top = pb_load(w + 296);
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++)
                q[s] = pb_fifth(q[s], top, s);
        }
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const int8_t *xp = x[t].p + p * 512;
            piv sum = pi_sum8(q, xp);
            pfv xd = pf_load(x[t].d + p * 16);
            acc[t] = pf_fma(pf_cvt(sum), pf_mul(dsc, xd), acc[t]);
            mins[t] = pf_fma(dm, pf_mul(xd, pf_cvt(pi_load(x[t].s + p * 16))), mins[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(pf_fold(acc[t])) - x86_hsum8(pf_fold(mins[t]));
}

/* A Q6_K panel's quants (q + 32, 0..63): the low nibbles, then each
 * step's top two bits as bits 4 and 5. */
X86_INLINE void p_q6_quants(const uint8_t *w, pbv *q)
{
    p_nibbles(w + 36, q);
#pragma GCC unroll 8
    for (int h = 0; h < 2; h++) {
        pbv top = pb_load(w + 292 + 64 * h);
#pragma GCC unroll 8
        for (int s = 0; s < 4; s++)
            q[4 * h + s] = pb_or(q[4 * h + s], pb_sll4(pb_and(pb_srl(top, 2 * s), 0x03)));
    }
}

X86_INLINE void p_q6_k_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT)
{
    pfv acc[Q_NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        acc[t] = pf_zero();
    for (int64_t p = 0; p < n / 512; p++, w += 420) {
        panel_ahead(w, NT, 420);
        piv sa = pi_i8(w), sb = pi_i8(w + 16);
        pfv d = pf_two(x86_f16(w + 32), x86_f16(w + 34));
        pbv q[8];
        p_q6_quants(w, q);
#pragma GCC unroll 4
        for (int t = 0; t < NT; t++) {
            const int8_t *xp = x[t].p + p * 512;
            piv a = pi_zero(), b = pi_zero();
#pragma GCC unroll 8
            for (int s = 0; s < 4; s++)
                a = pi_dot_u(a, q[s], xp + 64 * s);
#pragma GCC unroll 8
            for (int s = 4; s < 8; s++)
                b = pi_dot_u(b, q[s], xp + 64 * s);
            piv lo = pi_load(x[t].lo + p * 16), all = pi_load(x[t].s + p * 16);
            a = pi_sub(a, pi_sll(lo, 5));
            b = pi_sub(b, pi_sll(pi_sub(all, lo), 5));
            piv sum = pi_add(pi_mul(a, sa), pi_mul(b, sb));
            acc[t] = pf_fma(pf_cvt(sum), pf_mul(d, pf_load(x[t].d + p * 16)), acc[t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(pf_fold(acc[t]));
}

Q_SEQ_KERNELS(q8_0_p, p_q8_0_nt(w, x, n, out, NT))
Q_SEQ_KERNELS(q4_0_p, p_q4_0_nt(w, x, n, out, NT))
Q_SEQ_KERNELS(q4_k_p, p_k45_nt(w, x, n, out, NT, 0))
Q_SEQ_KERNELS(q5_k_p, p_k45_nt(w, x, n, out, NT, 1))
Q_SEQ_KERNELS(q6_k_p, p_q6_k_nt(w, x, n, out, NT))

/* ---- MXFP8: an f32-x format with a scale per 32 values ----
 * E4M3 bytes to f32 lanes by their bits (normal: exponent + 120, mantissa
 * at bit 20; subnormal: m 2^-9; 0x7F / 0xFF NaN), times the block's power
 * of two (exact, as the dequantizer's product), then the plain kernels'
 * accumulators: one per VL-wide slice of a block. */
#if CPU_X86_512
X86_INLINE vf ld_e4m3(const uint8_t *p)
{
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    __m512i sgn = _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0x80)), 24);
    __m512i e = _mm512_and_si512(_mm512_srli_epi32(v, 3), _mm512_set1_epi32(0xF));
    __m512i m = _mm512_and_si512(v, _mm512_set1_epi32(7));
    __m512i nrm = _mm512_or_si512(_mm512_slli_epi32(_mm512_add_epi32(e, _mm512_set1_epi32(120)), 23),
                                  _mm512_slli_epi32(m, 20));
    __m512i sub = _mm512_castps_si512(
        _mm512_mul_ps(_mm512_cvtepi32_ps(m), _mm512_set1_ps(1.0f / 512.0f)));
    __mmask16 is_sub = _mm512_cmpeq_epi32_mask(e, _mm512_setzero_si512());
    __mmask16 is_nan = _mm512_cmpeq_epi32_mask(_mm512_and_si512(v, _mm512_set1_epi32(0x7F)),
                                               _mm512_set1_epi32(0x7F));
    __m512i r = _mm512_mask_blend_epi32(is_sub, nrm, sub);
    r = _mm512_mask_blend_epi32(is_nan, r, _mm512_set1_epi32(0x7FC00000));
    return _mm512_castsi512_ps(_mm512_or_si512(r, sgn));
}
#else
X86_INLINE vf ld_e4m3(const uint8_t *p)
{
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i sgn = _mm256_slli_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x80)), 24);
    __m256i e = _mm256_and_si256(_mm256_srli_epi32(v, 3), _mm256_set1_epi32(0xF));
    __m256i m = _mm256_and_si256(v, _mm256_set1_epi32(7));
    __m256i nrm = _mm256_or_si256(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(120)), 23),
                                  _mm256_slli_epi32(m, 20));
    __m256i sub = _mm256_castps_si256(
        _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(1.0f / 512.0f)));
    __m256i is_sub = _mm256_cmpeq_epi32(e, _mm256_setzero_si256());
    __m256i is_nan = _mm256_cmpeq_epi32(_mm256_and_si256(v, _mm256_set1_epi32(0x7F)),
                                        _mm256_set1_epi32(0x7F));
    __m256i r = _mm256_blendv_epi8(nrm, sub, is_sub);
    r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC00000), is_nan);
    return _mm256_castsi256_ps(_mm256_or_si256(r, sgn));
}
#endif

X86_INLINE void mxfp8_nt(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out, const int NT)
{
    enum { K = 32 / VL }; /* slices of a block: 2 (avx512) or 4 (avx2) */
    vf a[4][4];
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        for (int k = 0; k < 4; k++)
            a[t][k] = VZERO();
    for (int64_t b = 0; b < n / 32; b++, w += 33) {
        float db = dequant_e8m0(w[0]);
#if CPU_X86_512
        vf d = _mm512_set1_ps(db);
#else
        vf d = _mm256_set1_ps(db);
#endif
#pragma GCC unroll 4
        for (int k = 0; k < K; k++) {
#if CPU_X86_512
            vf wv = _mm512_mul_ps(ld_e4m3(w + 1 + k * VL), d);
#else
            vf wv = _mm256_mul_ps(ld_e4m3(w + 1 + k * VL), d);
#endif
#pragma GCC unroll 4
            for (int t = 0; t < NT; t++)
                a[t][k] = VFMA(wv, VLOADF(x[t].f + b * 32 + k * VL), a[t][k]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NT; t++)
        out[t] = x86_hsum8(v_to8(VADD(VADD(a[t][0], a[t][1]), VADD(a[t][2], a[t][3]))));
}

static float dot_mxfp8(const uint8_t *w, const cpu_xrow *x, int64_t n)
{
    float r;
    mxfp8_nt(w, x, n, &r, 1);
    return r;
}

static void dotn_mxfp8(const uint8_t *w, const cpu_xrow *x, int64_t n, float *out)
{
    mxfp8_nt(w, x, n, out, PLAIN_NT);
}

/* ---- x to int8 blocks: cpu_quantize_x's arithmetic, 8 lanes at a time ----
 * The same IEEE operations in the same order per value (|x|, the block's
 * max, amax / 127, 1 / d, x * (1 / d) + 1.5 * 2^23 - 1.5 * 2^23), so the
 * bytes equal the portable function's on every input; a block holding a
 * NaN or an infinity goes to the portable function itself. */
static void quant_x(const float *x, int64_t n, int8_t *q, float *d, int32_t *s)
{
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    const __m256 magic = _mm256_set1_ps(12582912.0f), inf = _mm256_set1_ps(INFINITY);
    const __m256i lim = _mm256_set1_epi32(127), nlim = _mm256_set1_epi32(-127);
    for (int64_t b = 0; b < n / 32; b++) {
        const float *xb = x + b * 32;
        __m256 v[4], m = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(xb + 8 * k);
            __m256 a = _mm256_and_ps(v[k], absmask);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, inf, _CMP_NLT_UQ)); /* NaN or inf */
            m = _mm256_max_ps(m, a);
        }
        if (_mm256_movemask_ps(bad)) {
            cpu_quantize_x(xb, 32, q + b * 32, d + b, s + b);
            continue;
        }
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        float amax = _mm_cvtss_f32(h);
        float db = amax / 127.0f;
        float id = db > 0.0f ? 1.0f / db : 0.0f;
        __m256 vid = _mm256_set1_ps(id);
        __m256i r[4], sum = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            __m256 f = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(v[k], vid), magic), magic);
            r[k] = _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(f), lim), nlim);
            sum = _mm256_add_epi32(sum, r[k]);
        }
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(q + b * 32), p);
        __m128i t = _mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
        t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
        d[b] = db;
        s[b] = _mm_cvtsi128_si32(t);
    }
}

/* ---- attention (docs/decisions/0035-cpu-fast-attention.md) ---- */

#if CPU_X86_512
#define VSTORE(p, v) _mm512_storeu_ps(p, v)
#define VSET1(x) _mm512_set1_ps(x)
#define VMAX(a, b) _mm512_max_ps(a, b)
#define VMULF(a, b) _mm512_mul_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#else
#define VSTORE(p, v) _mm256_storeu_ps(p, v)
#define VSET1(x) _mm256_set1_ps(x)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VMULF(a, b) _mm256_mul_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#endif

/* The keys' scores, NK of them side by side (a compile-time constant):
 * one accumulator of VL lanes a key, each step one FMA of q's VL values
 * with the key's, folded as plain_blk folds a row's lanes, then the
 * tail, then the scale. A key's ops are the same in any group. */
X86_INLINE void attn_dot_k(const float *q, const void *const *k, int64_t n, float scale,
                           float *out, const int NK, vf (*load)(const uint8_t *, int64_t),
                           float (*read1)(const uint8_t *, int64_t))
{
    vf a[4];
#pragma GCC unroll 4
    for (int j = 0; j < NK; j++)
        a[j] = VZERO();
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf qv = VLOADF(q + i);
#pragma GCC unroll 4
        for (int j = 0; j < NK; j++)
            a[j] = VFMA(load((const uint8_t *)k[j], i), qv, a[j]);
    }
#pragma GCC unroll 4
    for (int j = 0; j < NK; j++) {
        float tail = 0;
        for (int64_t t = i; t < n; t++)
            tail += q[t] * read1((const uint8_t *)k[j], t);
        out[j] = (x86_hsum8(v_to8(a[j])) + tail) * scale;
    }
}

/* o += p[j] v[j] for the nv keys in turn: a slice of o of 4 VL values
 * stays in registers across the keys, each element's FMAs key after key;
 * then slices of VL, then the tail (a product and a sum). */
X86_INLINE void attn_axpy_k(float *o, const float *p, const void *const *v, int nv, int64_t n,
                            vf (*load)(const uint8_t *, int64_t),
                            float (*read1)(const uint8_t *, int64_t))
{
    int64_t i = 0;
    for (; i + 4 * VL <= n; i += 4 * VL) {
        vf r[4];
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            r[u] = VLOADF(o + i + u * VL);
        for (int j = 0; j < nv; j++) {
            const vf vp = VSET1(p[j]);
#pragma GCC unroll 4
            for (int u = 0; u < 4; u++)
                r[u] = VFMA(vp, load((const uint8_t *)v[j], i + u * VL), r[u]);
        }
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++)
            VSTORE(o + i + u * VL, r[u]);
    }
    for (; i + VL <= n; i += VL) {
        vf r = VLOADF(o + i);
        for (int j = 0; j < nv; j++)
            r = VFMA(VSET1(p[j]), load((const uint8_t *)v[j], i), r);
        VSTORE(o + i, r);
    }
    for (int j = 0; j < nv; j++)
        for (int64_t t = i; t < n; t++)
            o[t] += p[j] * read1((const uint8_t *)v[j], t);
}

/* A Q8_0 row's values i .. i + VL (i a multiple of VL, inside one block of
 * 32): the int8 values as f32 times the block's scale, each product
 * rounded as kvc_q8_0_get rounds it. */
X86_INLINE vf attn_ld_kq8(const uint8_t *r, int64_t i)
{
    const uint8_t *b = r + (i / 32) * 34;
#if CPU_X86_512
    __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2 + i % 32))));
    return _mm512_mul_ps(v, VSET1(x86_f16(b)));
#else
    __m256 v = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + i % 32))));
    return _mm256_mul_ps(v, VSET1(x86_f16(b)));
#endif
}
static inline float attn_rd_kq8(const uint8_t *r, int64_t i)
{
    const uint8_t *b = r + (i / 32) * 34;
    return (float)(int8_t)b[2 + i % 32] * x86_f16(b);
}

ATTN_KERNELS(vf)

/* Several queries against the same keys (a prompt chunk's rows and heads,
 * cpu_kernels.attn_dotq / attn_axpyq): each key's widened vector serves
 * NQ queries (AVX2's sixteen registers hold 2 x 4 accumulators, AVX-512's
 * thirty-two 4 x 4). Every (query, key) pair's FMAs, fold and tail are
 * attn_dot_k's, and every output element's FMAs come key after key as
 * attn_axpy_k's, so each result is the same bits as a query's own call. */
#if CPU_X86_512
enum { ATTN_NQ = 4 };
#else
enum { ATTN_NQ = 2 };
#endif

X86_INLINE void attn_dotq_k(const float *const *q, const void *const *k, int64_t n, float scale,
                            float *const *out, int j0, const int NQ, const int NK,
                            vf (*load)(const uint8_t *, int64_t),
                            float (*read1)(const uint8_t *, int64_t))
{
    vf a[ATTN_NQ][4];
#pragma GCC unroll 4
    for (int t = 0; t < NQ; t++)
#pragma GCC unroll 4
        for (int j = 0; j < NK; j++)
            a[t][j] = VZERO();
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        vf qv[ATTN_NQ];
#pragma GCC unroll 4
        for (int t = 0; t < NQ; t++)
            qv[t] = VLOADF(q[t] + i);
#pragma GCC unroll 4
        for (int j = 0; j < NK; j++) {
            const vf kv = load((const uint8_t *)k[j], i);
#pragma GCC unroll 4
            for (int t = 0; t < NQ; t++)
                a[t][j] = VFMA(kv, qv[t], a[t][j]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < NQ; t++)
#pragma GCC unroll 4
        for (int j = 0; j < NK; j++) {
            float tail = 0;
            for (int64_t s = i; s < n; s++)
                tail += q[t][s] * read1((const uint8_t *)k[j], s);
            out[t][j0 + j] = (x86_hsum8(v_to8(a[t][j])) + tail) * scale;
        }
}

X86_INLINE void attn_axpyq_k(float *const *o, const float *const *p, const void *const *v, int nv,
                             int64_t n, const int NQ, vf (*load)(const uint8_t *, int64_t),
                             float (*read1)(const uint8_t *, int64_t))
{
    int64_t i = 0;
    for (; i + 2 * VL <= n; i += 2 * VL) {
        vf r[4][2];
#pragma GCC unroll 4
        for (int t = 0; t < NQ; t++) {
            r[t][0] = VLOADF(o[t] + i);
            r[t][1] = VLOADF(o[t] + i + VL);
        }
        for (int j = 0; j < nv; j++) {
            const vf v0 = load((const uint8_t *)v[j], i), v1 = load((const uint8_t *)v[j], i + VL);
#pragma GCC unroll 4
            for (int t = 0; t < NQ; t++) {
                const vf pp = VSET1(p[t][j]);
                r[t][0] = VFMA(pp, v0, r[t][0]);
                r[t][1] = VFMA(pp, v1, r[t][1]);
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < NQ; t++) {
            VSTORE(o[t] + i, r[t][0]);
            VSTORE(o[t] + i + VL, r[t][1]);
        }
    }
    for (; i + VL <= n; i += VL) {
        vf r[4];
#pragma GCC unroll 4
        for (int t = 0; t < NQ; t++)
            r[t] = VLOADF(o[t] + i);
        for (int j = 0; j < nv; j++) {
            const vf v0 = load((const uint8_t *)v[j], i);
#pragma GCC unroll 4
            for (int t = 0; t < NQ; t++)
                r[t] = VFMA(VSET1(p[t][j]), v0, r[t]);
        }
#pragma GCC unroll 4
        for (int t = 0; t < NQ; t++)
            VSTORE(o[t] + i, r[t]);
    }
#pragma GCC unroll 4
    for (int t = 0; t < NQ; t++)
        for (int j = 0; j < nv; j++)
            for (int64_t s = i; s < n; s++)
                o[t][s] += p[t][j] * read1((const uint8_t *)v[j], s);
}

ATTN_QFORMS(f32, 4)
ATTN_QFORMS(bf16, 4)
ATTN_QFORMS(f16, 4)
ATTN_QFORMS(kq8, 4)

ATTN_QDISPATCH

/* cpu_exp_neg on VL lanes, its steps with FMA: n by the hardware's
 * round-to-nearest-even, 2^n by scalef (AVX-512) or by its exponent bits
 * (AVX2); lanes below CPU_EXP_MIN are 0, NaN stays NaN (the max keeps a
 * NaN of x, which the polynomial carries through). */
X86_INLINE vf exp_neg_v(vf x)
{
#if CPU_X86_512
    const __mmask16 under = _mm512_cmp_ps_mask(x, VSET1(CPU_EXP_MIN), _CMP_LT_OQ);
    x = _mm512_max_ps(VSET1(CPU_EXP_MIN), x);
    vf n = _mm512_roundscale_ps(_mm512_mul_ps(x, VSET1(CPU_EXP_LOG2E)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#else
    const __m256 under = _mm256_cmp_ps(x, VSET1(CPU_EXP_MIN), _CMP_LT_OQ);
    x = _mm256_max_ps(VSET1(CPU_EXP_MIN), x);
    vf n = _mm256_round_ps(_mm256_mul_ps(x, VSET1(CPU_EXP_LOG2E)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
#endif
    vf r = VFMA(n, VSET1(-CPU_EXP_LN2_HI), x);
    r = VFMA(n, VSET1(-CPU_EXP_LN2_LO), r);
    vf y = VFMA(VSET1(CPU_EXP_P0), r, VSET1(CPU_EXP_P1));
    y = VFMA(y, r, VSET1(CPU_EXP_P2));
    y = VFMA(y, r, VSET1(CPU_EXP_P3));
    y = VFMA(y, r, VSET1(CPU_EXP_P4));
    y = VFMA(y, r, VSET1(CPU_EXP_P5));
#if CPU_X86_512
    y = VFMA(y, _mm512_mul_ps(r, r), _mm512_add_ps(r, VSET1(1.0f)));
    return _mm512_maskz_mov_ps((__mmask16)~under, _mm512_scalef_ps(y, n));
#else
    y = VFMA(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, VSET1(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(y, _mm256_castsi256_ps(e)));
#endif
}

/* The largest of s[0 .. n) (exact in any order), then the exponentials
 * in place and their sum in VL lanes folded by x86_hsum8; a tail of
 * fewer than VL runs through the same lanes padded with -inf (exp 0). */
static float attn_exp(float *s, int64_t n)
{
    vf mv = VSET1(-INFINITY);
    int64_t i = 0;
    for (; i + VL <= n; i += VL)
        mv = VMAX(mv, VLOADF(s + i));
    float lanes[VL], m;
    VSTORE(lanes, mv);
    m = lanes[0];
    for (int l = 1; l < VL; l++)
        m = lanes[l] > m ? lanes[l] : m;
    for (; i < n; i++)
        m = s[i] > m ? s[i] : m;
    const vf mb = VSET1(m);
    vf sum = VZERO();
    for (i = 0; i + VL <= n; i += VL) {
        vf e = exp_neg_v(VSUB(VLOADF(s + i), mb));
        VSTORE(s + i, e);
        sum = VADD(sum, e);
    }
    if (i < n) {
        for (int l = 0; l < VL; l++)
            lanes[l] = i + l < n ? s[i + l] : -INFINITY;
        vf e = exp_neg_v(VSUB(VLOADF(lanes), mb));
        VSTORE(lanes, e);
        for (int64_t l = 0; i + l < n; l++)
            s[i + l] = lanes[l];
        sum = VADD(sum, e);
    }
    return x86_hsum8(v_to8(sum));
}

/* silu(x) on VL lanes (glu_silu, cpu_fast.h): exp_neg_v of -|x|, the
 * logistic's numerator 1 or e by x's sign, one division. */
X86_INLINE vf silu_v(vf x)
{
#if CPU_X86_512
    const vf e = exp_neg_v(_mm512_sub_ps(VZERO(), _mm512_abs_ps(x)));
    const __mmask16 neg = _mm512_cmp_ps_mask(x, VZERO(), _CMP_LT_OQ);
    const vf num = _mm512_mask_blend_ps(neg, VSET1(1.0f), e);
    return _mm512_mul_ps(x, _mm512_div_ps(num, _mm512_add_ps(VSET1(1.0f), e)));
#else
    const vf e = exp_neg_v(_mm256_sub_ps(VZERO(), _mm256_andnot_ps(VSET1(-0.0f), x)));
    const vf num = _mm256_blendv_ps(VSET1(1.0f), e, _mm256_cmp_ps(x, VZERO(), _CMP_LT_OQ));
    return _mm256_mul_ps(x, _mm256_div_ps(num, _mm256_add_ps(VSET1(1.0f), e)));
#endif
}

/* The tail of fewer than VL through the same lanes, padded with zeros. */
static void glu_silu(float *h, const float *g, int64_t n)
{
    int64_t i = 0;
    for (; i + VL <= n; i += VL)
        VSTORE(h + i, VMULF(silu_v(VLOADF(h + i)), VLOADF(g + i)));
    if (i < n) {
        float a[VL], b[VL];
        for (int l = 0; l < VL; l++) {
            a[l] = i + l < n ? h[i + l] : 0.0f;
            b[l] = i + l < n ? g[i + l] : 0.0f;
        }
        VSTORE(a, VMULF(silu_v(VLOADF(a)), VLOADF(b)));
        for (int64_t l = 0; i + l < n; l++)
            h[i + l] = a[l];
    }
}

#if defined(CPU_X86_AMX) && CPU_X86_AMX
#include "backend/cpu/cpu_fast_amx.h"
#define X86_TILE(f) tile_##f
#else
#define X86_TILE(f) NULL
#endif
/* An int8-x format's kernels: one, many, seq and the tile kernel. The
 * F32 / F16 / BF16 rows keep a call a row in decode: their rows in one
 * call read 17.6 / 17.3 against 17.9 / 17.6 tok/s (the Qwen3-0.6B
 * shape's BF16 decode, 2-core Xeon VM). */
#define Q_SEQ_KERNEL(f, TILE) {dot_##f, dotn_##f, Q_NT, NULL, 0, TILE, seq_##f}

const cpu_kernels CPU_X86_TABLE = {
    .isa = CPU_X86_ISA,
    .name = CPU_X86_NAME,
    .f32 = {dot_f32, dotn_f32, PLAIN_NT, rows_f32, PLAIN_NR},
    .f16 = {dot_f16, dotn_f16, PLAIN_NT, rows_f16, PLAIN_NR},
    .bf16 = {dot_bf16, dotn_bf16, PLAIN_NT, rows_bf16, PLAIN_NR},
    .q8_0 = Q_SEQ_KERNEL(q8_0, NULL),
    .q4_0 = Q_SEQ_KERNEL(q4_0, NULL),
    .q4_k = Q_SEQ_KERNEL(q4_k, NULL),
    .q5_k = Q_SEQ_KERNEL(q5_k, NULL),
    .q6_k = Q_SEQ_KERNEL(q6_k, NULL),
    .nvfp4 = Q_SEQ_KERNEL(nvfp4, NULL),
    .mxfp8 = {dot_mxfp8, dotn_mxfp8, PLAIN_NT},
    .q8_0_p = Q_SEQ_KERNEL(q8_0_p, X86_TILE(q8_0)),
    .q4_0_p = Q_SEQ_KERNEL(q4_0_p, X86_TILE(q4_0)),
    .q4_k_p = Q_SEQ_KERNEL(q4_k_p, X86_TILE(q4_k)),
    .q5_k_p = Q_SEQ_KERNEL(q5_k_p, X86_TILE(q5_k)),
    .q6_k_p = Q_SEQ_KERNEL(q6_k_p, X86_TILE(q6_k)),
    .quantize_x = quant_x,
    .attn_dot = attn_dot,
    .attn_exp = attn_exp,
    .attn_axpy = attn_axpy,
    .attn_dotq = attn_dotq,
    .attn_axpyq = attn_axpyq,
    .glu_silu = glu_silu,
};
