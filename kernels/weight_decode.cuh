// Reading device weight rows (kernels/weight_layout.h) as f32, one "unit"
// at a time: a run of WFmt<F>::U consecutive columns that a thread decodes
// from a few 16-byte loads. Two ways in:
//
//  - load(row, soff, u, v): the unit's values as floats, bit-identical to
//    lib/format/dequant.c (each decoder evaluates the CPU's float
//    expressions in the same order with the _rn intrinsics: Q4_K
//    (d * sc) * q - dmin * m, Q6_K (d * sc) * q, Q8_0 / Q4_0 q * d, NVFP4
//    e2m1 * ue4m3 and MXFP8 e4m3 * 2^(e-127), both products exact:
//    dequant_fp.c). The embedding kernel uses it.
//  - fetch(row, soff, u) -> Raw, then scales(raw, u, a, b) and
//    piece(raw, u, p, v): the mat-vec's way. fetch issues the unit's loads
//    (so a lane can have several units in flight before it uses any),
//    piece p gives PW consecutive elements as v with
//    element = a[p] * v + b[p] exactly as the CPU rounds it
//    (fl(fl(a * v) + b)); for quant formats v are small integers, held
//    exactly. DIRECT formats (F32, F16, BF16) give the elements themselves
//    (a = 1, b = 0, never applied). HAS_B: b is not zero (Q4_K, Q5_K).
//
// Integers become floats without the slow int-to-float unit: byte k of a
// word, put under the exponent of 2^23 with one byte permute, is the float
// 2^23 + byte; subtracting 2^23 + offset is exact for these small values.
//
// The formats of small integer fields (Q4_0, Q4_K, Q5_K, Q6_K) also give
// fields(raw, u, p, w): piece p's unsigned fields, one a byte in w[0]
// (elements 0-3) and w[1] (4-7), with element = a * (field - FIELD_OFF)
// + b; piece() is bytes_to_f of them. The decode GEMM takes them so
// (kernels/decode_gemm.cu).
//
// INT formats (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) have a leaner way for the mat-vec:
// ipiece(raw, u, p, v) gives each element's unsigned quant q as the bits of
// a subnormal float, q * 2^(XPOS - 149), masked in place: XPOS = xpos(p, j)
// is the bit the field starts at in its word (0..20), so one AND (or a
// shift for the word's top byte) per element, no permute, no subtract.
// The mat-vec multiplies x_j by 2^(MV_XEXP - XPOS) (exact), so each
// product is q * x * 2^(MV_XEXP - 149) exactly: the same product as
// q * x, scaled by a power of two, rounded the same way. iscales gives
// a' = a * 2^(149 - MV_XEXP) (exact) and b, with element = a * q + b as
// the CPU's value: the signed formats' offset (Q8_0 128, Q4_0 8, Q6_K 32)
// moves into b = -offset * a, Q4_K's and Q5_K's b is -dmin * m as for piece().
#ifndef MEMRA_KERNELS_WEIGHT_DECODE_CUH
#define MEMRA_KERNELS_WEIGHT_DECODE_CUH

#include "kernels/dev_common.cuh"
#include "kernels/weight_layout.h"

#if defined(__CUDA_ARCH__)
// Weights are read once per step: don't keep them in L1, where x lives.
DEV uint4 ld16(const uint8_t *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
#else
DEV uint4 ld16(const uint8_t *p) { return __ldg(reinterpret_cast<const uint4 *>(p)); }
#endif

DEV uint16_t ld_u16(const uint8_t *p) { return __ldg(reinterpret_cast<const unsigned short *>(p)); }

// Byte k (0..15, may be a run-time value) of a 16-byte vector, by selects
// rather than an indexed array so the vector stays in registers.
DEV uint32_t byte_at(const uint4 &v, int k)
{
    uint32_t w = k < 4 ? v.x : k < 8 ? v.y : k < 12 ? v.z : v.w;
    return (w >> ((k & 3) * 8)) & 0xFFu;
}

// Byte k (a compile-time constant after unrolling) of two 16-byte vectors.
DEV uint32_t byte32(const uint4 &a, const uint4 &b, int k)
{
    const uint4 &v = k < 16 ? a : b;
    return byte_at(v, k & 15);
}

// Word i (0..3, compile-time) of a 16-byte vector.
DEV uint32_t word_at(const uint4 &v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// The four bytes of w as exact floats minus off (0 <= off <= 255).
DEV void bytes_to_f(uint32_t w, float off, float *out)
{
    const float bias = __fadd_rn(8388608.0f, off);
#pragma unroll
    for (int k = 0; k < 4; k++)
        out[k] = __fsub_rn(__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | (unsigned)k)), bias);
}

template <int F> struct WFmt;


// The x exponent offset of the INT path: products carry 2^(MV_XEXP - 149),
// here 2^-64, which keeps every |q * x| above 2^-62 normal (smaller
// products underflow by at most 2^-86 each) and x below 2^43 finite after
// its 2^(MV_XEXP - XPOS) scaling.
constexpr int MV_XEXP = 85;
// 2^(149 - MV_XEXP): what turns a scale a into a'.
#define MV_AUP 18446744073709551616.0f /* 2^64 */

// How a word holds four fields j = 0..3 (one per byte), for ipiece.
enum { XK_BYTE8 = 0, XK_BYTE6, XK_NIB_LO, XK_NIB_HI };

// Field j of w as a subnormal float: its bits kept where they are when the
// field lies below bit 23 (the float's exponent), else moved down first;
// xpos_of says the bit it then starts at. Per word the two nibble kinds
// share one shift (w >> 16), so a byte of nibbles costs about one op per
// value. BYTE6: bytes holding values below 64.
template <int K> DEV float sub_field(uint32_t w, int j)
{
    uint32_t f;
    if (K == XK_BYTE8)
        f = j == 0 ? w & 0xFFu : j == 1 ? w & 0xFF00u : j == 2 ? __byte_perm(w, 0u, 0x4442u) : w >> 24;
    else if (K == XK_BYTE6)
        f = j == 0 ? w & 0xFFu : j == 1 ? w & 0xFF00u : j == 2 ? w & 0xFF0000u : w >> 24;
    else if (K == XK_NIB_LO)
        f = j == 0 ? w & 0xFu : j == 1 ? w & 0xF00u : j == 2 ? w & 0xF0000u : (w >> 16) & 0xF00u;
    else
        f = j == 0 ? w & 0xF0u : j == 1 ? w & 0xF000u : j == 2 ? (w >> 16) & 0xF0u : w >> 28;
    return __uint_as_float(f);
}

// The bit field j of kind k starts at after sub_field.
DEV int xpos_of(int k, int j)
{
    if (k == XK_BYTE8)
        return j == 1 ? 8 : 0;
    if (k == XK_BYTE6)
        return j == 3 ? 0 : 8 * j;
    if (k == XK_NIB_LO)
        return j == 3 ? 8 : 8 * j;
    return j == 0 ? 4 : j == 1 ? 12 : j == 2 ? 4 : 0;
}

// 2^(MV_XEXP - pos), exact.
DEV float xup_of(int pos) { return __uint_as_float((uint32_t)(127 + MV_XEXP - pos) << 23); }

// piece() of the formats with fields(): their bytes as floats less
// FIELD_OFF (exact).
template <class W> DEV void piece_of_fields(const typename W::Raw &r, int64_t u, int p, float (&v)[8])
{
    uint32_t w[2];
    W::fields(r, u, p, w);
    bytes_to_f(w[0], (float)W::FIELD_OFF, v);
    bytes_to_f(w[1], (float)W::FIELD_OFF, v + 4);
}

// ipiece() of Q5_K and Q6_K: their fields (at most 6 bits, a byte each)
// as the subnormals of the INT path.
template <class W> DEV void ipiece_of_fields(const typename W::Raw &r, int64_t u, int p, float (&v)[8])
{
    uint32_t w[2];
    W::fields(r, u, p, w);
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            v[4 * i + j] = sub_field<XK_BYTE6>(w[i], j);
}

// The float formats: a unit is one 16-byte vector, one piece.
template <> struct WFmt<CW_F32> {
    static constexpr int U = 4, PW = 4, P = 1;
    static constexpr bool DIRECT = true, HAS_B = false, INT = false;
    struct Raw { uint4 q; };
    DEV static Raw fetch(const uint8_t *row, size_t, int64_t u) { return Raw{ld16(row + u * 16)}; }
    DEV static void scales(const Raw &, int64_t, float (&)[P], float (&)[P]) {}
    DEV static void piece(const Raw &r, int64_t, int, float (&v)[PW])
    {
        v[0] = __uint_as_float(r.q.x);
        v[1] = __uint_as_float(r.q.y);
        v[2] = __uint_as_float(r.q.z);
        v[3] = __uint_as_float(r.q.w);
    }
    DEV static void load(const uint8_t *row, size_t soff, int64_t u, float (&v)[U])
    {
        piece(fetch(row, soff, u), u, 0, v);
    }
};

template <> struct WFmt<CW_F16> {
    static constexpr int U = 8, PW = 8, P = 1;
    static constexpr bool DIRECT = true, HAS_B = false, INT = false;
    struct Raw { uint4 q; };
    DEV static Raw fetch(const uint8_t *row, size_t, int64_t u) { return Raw{ld16(row + u * 16)}; }
    DEV static void scales(const Raw &, int64_t, float (&)[P], float (&)[P]) {}
    DEV static void piece(const Raw &r, int64_t, int, float (&v)[PW])
    {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t w = word_at(r.q, i);
            v[2 * i] = f16_bits_to_f32((uint16_t)(w & 0xFFFFu));
            v[2 * i + 1] = f16_bits_to_f32((uint16_t)(w >> 16));
        }
    }
    DEV static void load(const uint8_t *row, size_t soff, int64_t u, float (&v)[U])
    {
        piece(fetch(row, soff, u), u, 0, v);
    }
};

template <> struct WFmt<CW_BF16> {
    static constexpr int U = 8, PW = 8, P = 1;
    static constexpr bool DIRECT = true, HAS_B = false, INT = false;
    struct Raw { uint4 q; };
    DEV static Raw fetch(const uint8_t *row, size_t, int64_t u) { return Raw{ld16(row + u * 16)}; }
    DEV static void scales(const Raw &, int64_t, float (&)[P], float (&)[P]) {}
    DEV static void piece(const Raw &r, int64_t, int, float (&v)[PW])
    {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const uint32_t w = word_at(r.q, i);
            v[2 * i] = __uint_as_float(w << 16);
            v[2 * i + 1] = __uint_as_float(w & 0xFFFF0000u);
        }
    }
    DEV static void load(const uint8_t *row, size_t soff, int64_t u, float (&v)[U])
    {
        piece(fetch(row, soff, u), u, 0, v);
    }
};

// Q8_0: one block per unit, 32 int8 quants then the block's f16 d; piece p
// is quants 8p..8p+7.
template <> struct WFmt<CW_Q8_0> {
    static constexpr int U = 32, PW = 8, P = 4;
    static constexpr bool DIRECT = false, HAS_B = false, INT = true;
    struct Raw { uint4 a, b; uint32_t d; };
    DEV static Raw fetch(const uint8_t *row, size_t soff, int64_t u)
    {
        const uint8_t *q = row + u * 32;
        return Raw{ld16(q), ld16(q + 16), ld_u16(row + soff + u * 2)};
    }
    DEV static void scales(const Raw &r, int64_t, float (&a)[P], float (&)[P])
    {
        const float d = f16_bits_to_f32((uint16_t)r.d);
#pragma unroll
        for (int p = 0; p < P; p++)
            a[p] = d;
    }
    DEV static void piece(const Raw &r, int64_t, int p, float (&v)[PW])
    {
        const uint4 &q = p < 2 ? r.a : r.b;
        bytes_to_f(word_at(q, 2 * (p & 1)) ^ 0x80808080u, 128.0f, v);
        bytes_to_f(word_at(q, 2 * (p & 1) + 1) ^ 0x80808080u, 128.0f, v + 4);
    }
    // INT path: q + 128 per byte, b = -128 d.
    DEV static int xkind(int) { return XK_BYTE8; }
    DEV static void iscales(const Raw &r, int64_t, float (&a)[P], float (&b)[P])
    {
        const float d = f16_bits_to_f32((uint16_t)r.d);
#pragma unroll
        for (int p = 0; p < P; p++) {
            a[p] = __fmul_rn(d, MV_AUP);
            b[p] = __fmul_rn(d, -128.0f);
        }
    }
    DEV static void ipiece(const Raw &r, int64_t, int p, float (&v)[PW])
    {
        const uint4 &q = p < 2 ? r.a : r.b;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const uint32_t w = word_at(q, 2 * (p & 1) + i) ^ 0x80808080u;
#pragma unroll
            for (int j = 0; j < 4; j++)
                v[4 * i + j] = sub_field<XK_BYTE8>(w, j);
        }
    }
    DEV static void load(const uint8_t *row, size_t soff, int64_t u, float (&v)[U])
    {
        const uint8_t *q = row + u * 32;
        uint4 a = ld16(q), b = ld16(q + 16);
        const float d = f16_bits_to_f32(ld_u16(row + soff + u * 2));
#pragma unroll
        for (int j = 0; j < 32; j++)
            v[j] = __fmul_rn((float)(int8_t)byte32(a, b, j), d);
    }
};

// Q4_0: one block per unit; byte j holds element j (low nibble) and j + 16.
// Pieces: 0, 1 the low nibbles of bytes 0..7, 8..15; 2, 3 their high nibbles.
template <> struct WFmt<CW_Q4_0> {
    static constexpr int U = 32, PW = 8, P = 4;
    static constexpr bool DIRECT = false, HAS_B = false, INT = true;
    struct Raw { uint4 q; uint32_t d; };
    DEV static Raw fetch(const uint8_t *row, size_t soff, int64_t u)
    {
        return Raw{ld16(row + u * 16), ld_u16(row + soff + u * 2)};
    }
    DEV static void scales(const Raw &r, int64_t, float (&a)[P], float (&)[P])
    {
        const float d = f16_bits_to_f32((uint16_t)r.d);
#pragma unroll
        for (int p = 0; p < P; p++)
            a[p] = d;
    }
    // The fields of piece p, a byte each (element = a * (field - FIELD_OFF)).
    static constexpr int FIELD_OFF = 8;
    DEV static void fields(const Raw &r, int64_t, int p, uint32_t (&w)[2])
    {
        const int sh = p < 2 ? 0 : 4;
        w[0] = (word_at(r.q, 2 * (p & 1)) >> sh) & 0x0F0F0F0Fu;
        w[1] = (word_at(r.q, 2 * (p & 1) + 1) >> sh) & 0x0F0F0F0Fu;
    }
    DEV static void piece(const Raw &r, int64_t u, int p, float (&v)[PW])
    {
        piece_of_fields<WFmt<CW_Q4_0>>(r, u, p, v);
    }
    // INT path: the nibbles unsigned, b = -8 d.
    DEV static int xkind(int p) { return p < 2 ? XK_NIB_LO : XK_NIB_HI; }
    DEV static void iscales(const Raw &r, int64_t, float (&a)[P], float (&b)[P])
    {
        const float d = f16_bits_to_f32((uint16_t)r.d);
#pragma unroll
        for (int p = 0; p < P; p++) {
            a[p] = __fmul_rn(d, MV_AUP);
            b[p] = __fmul_rn(d, -8.0f);
        }
    }
    DEV static void ipiece(const Raw &r, int64_t, int p, float (&v)[PW])
    {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const uint32_t w = word_at(r.q, 2 * (p & 1) + i);
#pragma unroll
            for (int j = 0; j < 4; j++)
                v[4 * i + j] = p < P / 2 ? sub_field<XK_NIB_LO>(w, j) : sub_field<XK_NIB_HI>(w, j);
        }
    }
    DEV static void load(const uint8_t *row, size_t soff, int64_t u, float (&v)[U])
    {
        uint4 q = ld16(row + u * 16);
        const float d = f16_bits_to_f32(ld_u16(row + soff + u * 2));
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const uint32_t by = byte_at(q, j);
            v[j] = __fmul_rn((float)((int)(by & 0xFu) - 8), d);
            v[j + 16] = __fmul_rn((float)((int)(by >> 4) - 8), d);
        }
    }
};

// The 6-bit (scale, min) pair j of a Q4_K / Q5_K header (bytes 4..15 of h).
DEV void k4_scale_min(const uint4 &h, int j, uint32_t &sc, uint32_t &m)
{
    if (j < 4) {
        sc = byte_at(h, 4 + j) & 63u;
        m = byte_at(h, 8 + j) & 63u;
    } else {
        sc = (byte_at(h, 8 + j) & 0xFu) | ((byte_at(h, j) >> 6) << 4);
        m = (byte_at(h, 8 + j) >> 4) | ((byte_at(h, 4 + j) >> 6) << 4);
    }
}

// The exact float of byte k (0..3) of w, by the byte permute under 2^23.
DEV float byte_f(uint32_t w, int k)
{
    return __fsub_rn(__uint_as_float(__byte_perm(w, 0x4B000000u, 0x7540u | (unsigned)k)),
                     8388608.0f);
}

// The 6-bit scales and mins of pairs 2g and 2g + 1 of a Q4_K / Q5_K header
// (k4_scale_min's values) in bytes 0 and 1 of sc and m, by whole-word
// shifts and masks: pairs 0..3 are the low six bits of bytes 4..7 (scales)
// and 8..11 (mins); pairs 4..7 take their low four bits from bytes 12..15
// and their top two from the top bits of bytes 4..7 (scales), 8..11 (mins).
// Both forms are computed and one selected: g is the lane's own (u & 3),
// so a branch on it diverges in every warp and runs both sides anyway.
DEV void k4_group_scale_min(const uint4 &h, int g, uint32_t &sc, uint32_t &m)
{
    const int s = 16 * (g & 1);
    const uint32_t y = h.y >> s, z = h.z >> s, w = h.w >> s;
    const uint32_t sc_lo = y & 0x3F3Fu, m_lo = z & 0x3F3Fu;
    const uint32_t sc_hi = (w & 0x0F0Fu) | ((y & 0xC0C0u) >> 2);
    const uint32_t m_hi = ((w >> 4) & 0x0F0Fu) | ((z & 0xC0C0u) >> 2);
    sc = g < 2 ? sc_lo : sc_hi;
    m = g < 2 ? m_lo : m_hi;
}

// The scales of group g of a Q4_K / Q5_K super-block: pieces 0..3 (the low
// nibbles, elements 0..31) take (d1, -m1), pieces 4..7 (d2, -m2). UP: a
// comes times 2^(149 - MV_XEXP) for the INT path, by scaling d first:
// d * sc is exact in f32 (an 11-bit by a 6-bit integer mantissa) and so is
// either product by the power of two (d * 2^64 stays normal and finite),
// so (d * 2^64) * sc is the very float fl(d * sc) * 2^64, one multiply a
// unit fewer than scaling d1 and d2.
template <int P, bool UP = false>
DEV void k4_piece_scales(const uint4 &h, int g, float (&a)[P], float (&b)[P])
{
    const float d0 = f16_bits_to_f32((uint16_t)(h.x & 0xFFFFu));
    const float d = UP ? __fmul_rn(d0, MV_AUP) : d0;
    const float dmin = f16_bits_to_f32((uint16_t)(h.x >> 16));
    uint32_t sc, m;
    k4_group_scale_min(h, g, sc, m);
    const float d1 = __fmul_rn(d, byte_f(sc, 0)), m1 = __fmul_rn(dmin, byte_f(m, 0));
    const float d2 = __fmul_rn(d, byte_f(sc, 1)), m2 = __fmul_rn(dmin, byte_f(m, 1));
#pragma unroll
    for (int p = 0; p < P; p++) {
        a[p] = p < P / 2 ? d1 : d2;
        b[p] = p < P / 2 ? -m1 : -m2;
    }
}

// Q4_K: a unit is one 64-element group g of a super-block: 32 qs bytes whose
// low nibbles are elements 0..31 (pair 2g) and high nibbles 32..63 (2g+1).
// Piece p: the low (p < 4) or high nibbles of qs bytes 8(p%4)..8(p%4)+7.
template <> struct WFmt<CW_Q4_K> {
    static constexpr int U = 64, PW = 8, P = 8;
    static constexpr bool DIRECT = false, HAS_B = true, INT = true;
    struct Raw { uint4 h, a, b; };
    DEV static Raw fetch(const uint8_t *row, size_t, int64_t u)
    {
        const uint8_t *blk = row + (u >> 2) * 144;
        const int g = (int)(u & 3);
        return Raw{ld16(blk), ld16(blk + 16 + g * 32), ld16(blk + 32 + g * 32)};
    }
    DEV static void scales(const Raw &r, int64_t u, float (&a)[P], float (&b)[P])
    {
        k4_piece_scales<P>(r.h, (int)(u & 3), a, b);
    }
    static constexpr int FIELD_OFF = 0;
    DEV static void fields(const Raw &r, int64_t, int p, uint32_t (&w)[2])
    {
        const uint4 &q = (p & 3) < 2 ? r.a : r.b;
        const int sh = p < 4 ? 0 : 4;
        w[0] = (word_at(q, 2 * (p & 1)) >> sh) & 0x0F0F0F0Fu;
        w[1] = (word_at(q, 2 * (p & 1) + 1) >> sh) & 0x0F0F0F0Fu;
    }
    DEV static void piece(const Raw &r, int64_t u, int p, float (&v)[PW])
    {
        piece_of_fields<WFmt<CW_Q4_K>>(r, u, p, v);
    }
    // INT path: the nibbles in place; a scaled up, b as for piece().
    DEV static int xkind(int p) { return p < 4 ? XK_NIB_LO : XK_NIB_HI; }
    DEV static void iscales(const Raw &r, int64_t u, float (&a)[P], float (&b)[P])
    {
        k4_piece_scales<P, true>(r.h, (int)(u & 3), a, b);
    }
    DEV static void ipiece(const Raw &r, int64_t, int p, float (&v)[PW])
    {
        const uint4 &q = (p & 3) < 2 ? r.a : r.b;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const uint32_t w = word_at(q, 2 * (p & 1) + i);
#pragma unroll
            for (int j = 0; j < 4; j++)
                v[4 * i + j] = p < P / 2 ? sub_field<XK_NIB_LO>(w, j) : sub_field<XK_NIB_HI>(w, j);
        }
    }
    DEV static void load(const uint8_t *row, size_t, int64_t u, float (&v)[U])
    {
        const uint8_t *blk = row + (u >> 2) * 144;
        const int g = (int)(u & 3);
        const uint4 h = ld16(blk);
        const uint4 a = ld16(blk + 16 + g * 32), b = ld16(blk + 32 + g * 32);
        const float d = f16_bits_to_f32((uint16_t)(h.x & 0xFFFFu));
        const float dmin = f16_bits_to_f32((uint16_t)(h.x >> 16));
        uint32_t sc, m;
        k4_scale_min(h, 2 * g, sc, m);
        const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)m);
        k4_scale_min(h, 2 * g + 1, sc, m);
        const float d2 = __fmul_rn(d, (float)sc), m2 = __fmul_rn(dmin, (float)m);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const uint32_t by = byte32(a, b, l);
            v[l] = __fsub_rn(__fmul_rn(d1, (float)(by & 0xFu)), m1);
            v[l + 32] = __fsub_rn(__fmul_rn(d2, (float)(by >> 4)), m2);
        }
    }
};

// Q5_K: Q4_K's layout plus qh[32] at bytes 16..47; element l of group g
// takes bit 2g (low half) or 2g+1 (high half) of qh[l] as its fifth bit.
template <> struct WFmt<CW_Q5_K> {
    static constexpr int U = 64, PW = 8, P = 8;
    static constexpr bool DIRECT = false, HAS_B = true, INT = true;
    struct Raw { uint4 h, qa, qb, ha, hb; };
    DEV static Raw fetch(const uint8_t *row, size_t, int64_t u)
    {
        const uint8_t *blk = row + (u >> 2) * 176;
        const int g = (int)(u & 3);
        return Raw{ld16(blk), ld16(blk + 48 + g * 32), ld16(blk + 64 + g * 32), ld16(blk + 16),
                   ld16(blk + 32)};
    }
    DEV static void scales(const Raw &r, int64_t u, float (&a)[P], float (&b)[P])
    {
        k4_piece_scales<P>(r.h, (int)(u & 3), a, b);
    }
    static constexpr int FIELD_OFF = 0;
    DEV static void fields(const Raw &r, int64_t u, int p, uint32_t (&w)[2])
    {
        const uint4 &q = (p & 3) < 2 ? r.qa : r.qb;
        const uint4 &hq = (p & 3) < 2 ? r.ha : r.hb;
        const int sh = p < 4 ? 0 : 4;
        const int hs = 2 * (int)(u & 3) + (p < 4 ? 0 : 1);
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const uint32_t lo = (word_at(q, 2 * (p & 1) + i) >> sh) & 0x0F0F0F0Fu;
            const uint32_t hi = ((word_at(hq, 2 * (p & 1) + i) >> hs) & 0x01010101u) << 4;
            w[i] = lo | hi;
        }
    }
    DEV static void piece(const Raw &r, int64_t u, int p, float (&v)[PW])
    {
        piece_of_fields<WFmt<CW_Q5_K>>(r, u, p, v);
    }
    // INT path: the 5-bit q per byte (as piece() assembles it), a scaled
    // up, b as for piece().
    DEV static int xkind(int) { return XK_BYTE6; }
    DEV static void iscales(const Raw &r, int64_t u, float (&a)[P], float (&b)[P])
    {
        k4_piece_scales<P, true>(r.h, (int)(u & 3), a, b);
    }
    DEV static void ipiece(const Raw &r, int64_t u, int p, float (&v)[PW])
    {
        ipiece_of_fields<WFmt<CW_Q5_K>>(r, u, p, v);
    }
    DEV static void load(const uint8_t *row, size_t, int64_t u, float (&v)[U])
    {
        const uint8_t *blk = row + (u >> 2) * 176;
        const int g = (int)(u & 3);
        const uint4 h = ld16(blk);
        const uint4 ha = ld16(blk + 16), hb = ld16(blk + 32);
        const uint4 a = ld16(blk + 48 + g * 32), b = ld16(blk + 64 + g * 32);
        const float d = f16_bits_to_f32((uint16_t)(h.x & 0xFFFFu));
        const float dmin = f16_bits_to_f32((uint16_t)(h.x >> 16));
        uint32_t sc, m;
        k4_scale_min(h, 2 * g, sc, m);
        const float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)m);
        k4_scale_min(h, 2 * g + 1, sc, m);
        const float d2 = __fmul_rn(d, (float)sc), m2 = __fmul_rn(dmin, (float)m);
        const uint32_t u1 = 1u << (2 * g), u2 = 2u << (2 * g);
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const uint32_t by = byte32(a, b, l), hi = byte32(ha, hb, l);
            const uint32_t q1 = (by & 0xFu) + ((hi & u1) ? 16u : 0u);
            const uint32_t q2 = (by >> 4) + ((hi & u2) ? 16u : 0u);
            v[l] = __fsub_rn(__fmul_rn(d1, (float)q1), m1);
            v[l + 32] = __fsub_rn(__fmul_rn(d2, (float)q2), m2);
        }
    }
};

// Q6_K: a unit is one 32-element quarter k (0..7) of a super-block: half
// n = k / 4, quarter q = k % 4. Its low 4 bits are the low (q < 2) or high
// nibbles of ql[n*64 + (q & 1)*32 + l], its top 2 bits bits 2q..2q+1 of
// qh[n*32 + l], its scales sc[n*8 + 2q + l/16]; the value is (d * sc) * (q6 - 32).
// Pieces 0, 1 (l < 16) take the first scale, 2, 3 the second.
template <> struct WFmt<CW_Q6_K> {
    static constexpr int U = 32, PW = 8, P = 4;
    static constexpr bool DIRECT = false, HAS_B = false, INT = true;
    struct Raw { uint4 la, lb, ha, hb; uint32_t sc2, d; };
    DEV static Raw fetch(const uint8_t *row, size_t soff, int64_t u)
    {
        const int64_t sb = u >> 3;
        const int k = (int)(u & 7), n = k >> 2, q = k & 3;
        const uint8_t *blk = row + sb * 208;
        const uint8_t *ql = blk + n * 64 + (q & 1) * 32, *qh = blk + 128 + n * 32;
        // The two int8 scales of this quarter, bytes n*8 + 2q and + 1 (even,
        // so one aligned 16-bit load).
        return Raw{ld16(ql), ld16(ql + 16), ld16(qh), ld16(qh + 16),
                   ld_u16(blk + 192 + n * 8 + 2 * q), ld_u16(row + soff + sb * 2)};
    }
    DEV static void scales(const Raw &r, int64_t, float (&a)[P], float (&)[P])
    {
        const float d = f16_bits_to_f32((uint16_t)r.d);
        const float ds0 = __fmul_rn(d, (float)(int8_t)(r.sc2 & 0xFFu));
        const float ds1 = __fmul_rn(d, (float)(int8_t)((r.sc2 >> 8) & 0xFFu));
#pragma unroll
        for (int p = 0; p < P; p++)
            a[p] = p < 2 ? ds0 : ds1;
    }
    static constexpr int FIELD_OFF = 32;
    DEV static void fields(const Raw &r, int64_t u, int p, uint32_t (&w)[2])
    {
        const int q = (int)(u & 3);
        const int lshift = (q >> 1) * 4, hshift = 2 * q;
        const uint4 &l = p < 2 ? r.la : r.lb;
        const uint4 &h = p < 2 ? r.ha : r.hb;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const uint32_t lo = (word_at(l, 2 * (p & 1) + i) >> lshift) & 0x0F0F0F0Fu;
            const uint32_t hi = ((word_at(h, 2 * (p & 1) + i) >> hshift) & 0x03030303u) << 4;
            w[i] = lo | hi;
        }
    }
    DEV static void piece(const Raw &r, int64_t u, int p, float (&v)[PW])
    {
        piece_of_fields<WFmt<CW_Q6_K>>(r, u, p, v);
    }
    // INT path: the 6-bit q per byte (as piece() assembles it), b = -32 a.
    DEV static int xkind(int) { return XK_BYTE6; }
    DEV static void iscales(const Raw &r, int64_t u, float (&a)[P], float (&b)[P])
    {
        float a0[P], b0[P];
        scales(r, u, a0, b0);
#pragma unroll
        for (int p = 0; p < P; p++) {
            a[p] = __fmul_rn(a0[p], MV_AUP);
            b[p] = __fmul_rn(a0[p], -32.0f);
        }
    }
    DEV static void ipiece(const Raw &r, int64_t u, int p, float (&v)[PW])
    {
        ipiece_of_fields<WFmt<CW_Q6_K>>(r, u, p, v);
    }
    DEV static void load(const uint8_t *row, size_t soff, int64_t u, float (&v)[U])
    {
        const int64_t sb = u >> 3;
        const int k = (int)(u & 7), n = k >> 2, q = k & 3;
        const uint8_t *blk = row + sb * 208;
        const uint8_t *ql = blk + n * 64 + (q & 1) * 32, *qh = blk + 128 + n * 32;
        const uint4 la = ld16(ql), lb = ld16(ql + 16), ha = ld16(qh), hb = ld16(qh + 16);
        const uint4 scv = ld16(blk + 192);
        const float d = f16_bits_to_f32(ld_u16(row + soff + sb * 2));
        const float ds0 = __fmul_rn(d, (float)(int8_t)byte_at(scv, n * 8 + 2 * q));
        const float ds1 = __fmul_rn(d, (float)(int8_t)byte_at(scv, n * 8 + 2 * q + 1));
        const int lshift = (q >> 1) * 4, hshift = 2 * q;
#pragma unroll
        for (int l = 0; l < 32; l++) {
            const uint32_t lo = (byte32(la, lb, l) >> lshift) & 0xFu;
            const uint32_t hi = (byte32(ha, hb, l) >> hshift) & 3u;
            const int q6 = (int)(lo | (hi << 4)) - 32;
            v[l] = __fmul_rn(l < 16 ? ds0 : ds1, (float)q6);
        }
    }
};

// NVFP4's scale byte as ggml reads it (dequant_ue4m3_half): an unsigned
// E4M3 (bit 7 ignored), halved; 0x00 and 0x7F are 0. Normal values
// (1 + m/8) * 2^(e-7) / 2 have exponent field e + 119; subnormals m * 2^-10.
DEV float ue4m3_half_to_f32(uint32_t x)
{
    x &= 0xFFu;
    if (x == 0u || x == 0x7Fu)
        return 0.0f;
    const uint32_t e = (x >> 3) & 0xFu, m = x & 7u;
    if (e == 0u)
        return __fmul_rn((float)m, 0.0009765625f); /* m * 2^-10, exact */
    return __uint_as_float(((e + 119u) << 23) | (m << 20));
}

// The doubled E2M1 level of a nibble (0 1 2 3 4 6 8 12, bit 3 the sign), as
// an integer: levels 4..7 are 2 or 3 shifted by 1 or 2.
DEV int e2m1_doubled(uint32_t n)
{
    const int i = (int)(n & 7u);
    const int v = i < 4 ? i : (2 + (i & 1)) << ((i >> 1) - 1);
    return (n & 8u) ? -v : v;
}

// The doubled E2M1 level of the low nibble of n as a float (e2m1_doubled's
// value; -0 for 0x8), in a few bit operations and no int-to-float
// conversion: the nibble's magnitude bits eem put at bits 24..22 make the
// float E2M1 * 2^-126 exactly (e = 0: the subnormal m * 2^-127), its sign
// bit goes to bit 31, and * 2^127 is exact.
DEV float e2m1_doubled_f(uint32_t n)
{
    const uint32_t f = ((n << 22) & 0x01C00000u) | ((n << 28) & 0x80000000u);
    return __fmul_rn(__uint_as_float(f), 1.7014118346046923e38f); /* 2^127 */
}

// FP8 E4M3 ("fn") as fp8_e4m3_to_f32: S.1111.111 is NaN, e = 0 subnormal
// m * 2^-9, else (1 + m/8) * 2^(e-7) (exponent field e + 120).
DEV float e4m3_to_f32(uint32_t x)
{
    const uint32_t sign = (x & 0x80u) << 24, e = (x >> 3) & 0xFu, m = x & 7u;
    if (e == 15u && m == 7u)
        return __uint_as_float(0x7FC00000u);
    if (e == 0u) { /* m * 2^-9, exact; the sign kept on zero too (0x80 is -0) */
        const float v = __fmul_rn((float)m, 0.001953125f);
        return sign ? -v : v;
    }
    return __uint_as_float(sign | ((e + 120u) << 23) | (m << 20));
}

// The four E4M3 bytes of w as floats (e4m3_to_f32's values). From sm_89
// the hardware converts two at a time to f16 (exact: f16 holds every E4M3
// value, NaN stays NaN), and f16 to f32 is exact.
DEV void e4m3x4_to_f32(uint32_t w, float *v)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t h01, h23;
    asm("{\n\t.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\t"
        "cvt.rn.f16x2.e4m3x2 %0, lo;\n\tcvt.rn.f16x2.e4m3x2 %1, hi;\n\t}"
        : "=r"(h01), "=r"(h23)
        : "r"(w));
    v[0] = f16_bits_to_f32((uint16_t)(h01 & 0xFFFFu));
    v[1] = f16_bits_to_f32((uint16_t)(h01 >> 16));
    v[2] = f16_bits_to_f32((uint16_t)(h23 & 0xFFFFu));
    v[3] = f16_bits_to_f32((uint16_t)(h23 >> 16));
#else
#pragma unroll
    for (int j = 0; j < 4; j++)
        v[j] = e4m3_to_f32((w >> (8 * j)) & 0xFFu);
#endif
}

// MXFP8's E8M0 block scale 2^(e-127): e = 0 is the subnormal 2^-127, 255 NaN.
DEV float e8m0_to_f32(uint32_t e)
{
    return __uint_as_float(e == 255u ? 0x7FC00000u : e == 0u ? 0x00400000u : e << 23);
}

// NVFP4: one 64-element block per unit: 32 nibble bytes, the 16-element
// sub-block s in bytes 8s..8s+7 (element 16s + j low nibble of byte 8s + j,
// 16s + 8 + j the high one), its UE4M3 scale byte s of the block's 4.
template <> struct WFmt<CW_NVFP4> {
    static constexpr int U = 64, PW = 8, P = 8;
    static constexpr bool DIRECT = false, HAS_B = false, INT = false;
    struct Raw { uint4 a, b; uint32_t sc; };
    DEV static Raw fetch(const uint8_t *row, size_t soff, int64_t u)
    {
        const uint8_t *q = row + u * 32;
        return Raw{ld16(q), ld16(q + 16),
                   __ldg(reinterpret_cast<const unsigned int *>(row + soff + u * 4))};
    }
    // Piece p = 2s + h: sub-block s's low (h = 0) or high (h = 1) nibbles,
    // elements 16s + 8h .. + 7, each the doubled E2M1 level times the
    // sub-block's halved scale (exact, as the CPU's product).
    DEV static void scales(const Raw &r, int64_t, float (&a)[P], float (&)[P])
    {
#pragma unroll
        for (int p = 0; p < P; p++)
            a[p] = ue4m3_half_to_f32(r.sc >> (8 * (p >> 1)));
    }
    DEV static void piece(const Raw &r, int64_t, int p, float (&v)[PW])
    {
        const int s = p >> 1, sh = (p & 1) * 4;
        const uint4 &q = s < 2 ? r.a : r.b;
        const uint32_t w0 = word_at(q, 2 * (s & 1)), w1 = word_at(q, 2 * (s & 1) + 1);
#pragma unroll
        for (int j = 0; j < 4; j++) {
            v[j] = e2m1_doubled_f(w0 >> (8 * j + sh));
            v[4 + j] = e2m1_doubled_f(w1 >> (8 * j + sh));
        }
    }
    DEV static void load(const uint8_t *row, size_t soff, int64_t u, float (&v)[U])
    {
        const uint8_t *q = row + u * 32;
        const uint4 a = ld16(q), b = ld16(q + 16);
        const uint32_t sc = __ldg(reinterpret_cast<const unsigned int *>(row + soff + u * 4));
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const float d = ue4m3_half_to_f32(sc >> (8 * s));
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const uint32_t by = byte32(a, b, 8 * s + j);
                v[16 * s + j] = __fmul_rn((float)e2m1_doubled(by & 0xFu), d);
                v[16 * s + 8 + j] = __fmul_rn((float)e2m1_doubled(by >> 4), d);
            }
        }
    }
};

// MXFP8: one 32-element block per unit: 32 E4M3 bytes, then its E8M0 byte.
template <> struct WFmt<CW_MXFP8> {
    static constexpr int U = 32, PW = 8, P = 4;
    static constexpr bool DIRECT = false, HAS_B = false, INT = false;
    struct Raw { uint4 a, b; uint32_t e; };
    DEV static Raw fetch(const uint8_t *row, size_t soff, int64_t u)
    {
        const uint8_t *q = row + u * 32;
        return Raw{ld16(q), ld16(q + 16), (uint32_t)__ldg(row + soff + u)};
    }
    DEV static void scales(const Raw &r, int64_t, float (&a)[P], float (&)[P])
    {
        const float sc = e8m0_to_f32(r.e);
#pragma unroll
        for (int p = 0; p < P; p++)
            a[p] = sc;
    }
    // Piece p: bytes 8p .. 8p + 7, each E4M3 value exactly as a float.
    DEV static void piece(const Raw &r, int64_t, int p, float (&v)[PW])
    {
        const uint4 &q = p < 2 ? r.a : r.b;
        e4m3x4_to_f32(word_at(q, 2 * (p & 1)), v);
        e4m3x4_to_f32(word_at(q, 2 * (p & 1) + 1), v + 4);
    }
    DEV static void load(const uint8_t *row, size_t soff, int64_t u, float (&v)[U])
    {
        const uint8_t *q = row + u * 32;
        const uint4 a = ld16(q), b = ld16(q + 16);
        const float s = e8m0_to_f32(__ldg(row + soff + u));
#pragma unroll
        for (int j = 0; j < 32; j++)
            v[j] = __fmul_rn(e4m3_to_f32(byte32(a, b, j)), s);
    }
};

// Units in a row of cols elements (the last may be partial for the float
// formats, whose rows are zero-padded to 16 bytes).
template <int F> DEV int64_t wfmt_units(int64_t cols)
{
    return (cols + WFmt<F>::U - 1) / WFmt<F>::U;
}

#endif
