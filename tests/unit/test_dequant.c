/* Dequantization: hand-built blocks whose expected values were worked out
 * by hand from the ggml block definitions (the arithmetic is in the
 * comments), and the f16/bf16 conversions at their edges. Every expected
 * value is exactly representable, so the checks are exact (==). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "format/dequant.h"
#include "numerics/half.h"
#include "test.h"

/* f16 bit patterns used below */
#define H_0_25 0x3400
#define H_0_5 0x3800
#define H_1 0x3C00
#define H_2 0x4000
#define H_M1 0xBC00

static void put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Dequantize through the public entry point and check y[idx] == want. */
typedef struct {
    int idx;
    float want;
} expect;

static void run(dtype t, const uint8_t *blk, int64_t n, const expect *e, int ne, int line)
{
    float y[512];
    memra_err err = {{0}};
    for (int i = 0; i < 512; i++)
        y[i] = -12345.0f;
    int rc = dequant_row(t, blk, y, n, &err);
    CHECK_MSG(rc == 0, "line %d: %s", line, err.msg);
    for (int i = 0; i < ne; i++)
        CHECK_MSG(half_f32_bits(y[e[i].idx]) == half_f32_bits(e[i].want), "line %d: y[%d] = %.9g, want %.9g", line,
                  e[i].idx, y[e[i].idx], e[i].want);
    for (int64_t i = 0; i < n; i++)
        CHECK_MSG(y[i] != -12345.0f, "line %d: y[%d] not written", line, (int)i);
    CHECK(y[n] == -12345.0f); /* nothing written past n */
}
#define RUN(t, blk, n, ...)                                                                        \
    do {                                                                                           \
        const expect e_[] = {__VA_ARGS__};                                                         \
        run((t), (blk), (n), e_, (int)(sizeof e_ / sizeof e_[0]), __LINE__);                       \
    } while (0)

/* ---- 32-element blocks ---- */

static void test_q8_0(void)
{
    uint8_t b[34] = {0};
    put16(b, H_0_5);      /* d = 0.5 */
    b[2 + 0] = 3;         /* y[0]  = 3 * 0.5 = 1.5 */
    b[2 + 1] = 0xFC;      /* y[1]  = -4 * 0.5 = -2 */
    b[2 + 31] = 127;      /* y[31] = 127 * 0.5 = 63.5 */
    b[2 + 30] = 0x80;     /* y[30] = -128 * 0.5 = -64 */
    RUN(DT_Q8_0, b, 32, {0, 1.5f}, {1, -2.0f}, {31, 63.5f}, {30, -64.0f}, {5, 0.0f});
}

static void test_q4_0(void)
{
    uint8_t b[18];
    put16(b, H_2); /* d = 2 */
    memset(b + 2, 0x88, 16); /* every nibble 8 -> (8 - 8) * 2 = 0 */
    b[2 + 0] = 0x9F;  /* y[0] = (15 - 8) * 2 = 14, y[16] = (9 - 8) * 2 = 2 */
    b[2 + 15] = 0x08; /* y[15] = (8 - 8) * 2 = 0, y[31] = (0 - 8) * 2 = -16 */
    RUN(DT_Q4_0, b, 32, {0, 14.0f}, {16, 2.0f}, {15, 0.0f}, {31, -16.0f}, {7, 0.0f});
}

static void test_q4_1(void)
{
    uint8_t b[20] = {0};
    put16(b, H_1);      /* d = 1 */
    put16(b + 2, H_M1); /* m = -1; zero nibbles give 0 * 1 + -1 = -1 */
    b[4 + 0] = 0x3A;    /* y[0] = 10 * 1 - 1 = 9, y[16] = 3 * 1 - 1 = 2 */
    b[4 + 7] = 0xF0;    /* y[7] = 0 - 1 = -1, y[23] = 15 - 1 = 14 */
    RUN(DT_Q4_1, b, 32, {0, 9.0f}, {16, 2.0f}, {7, -1.0f}, {23, 14.0f}, {1, -1.0f});
}

static void test_q5_0(void)
{
    uint8_t b[22] = {0};
    put16(b, H_1); /* d = 1 */
    /* qh = 0x80010001: bits 0 (element 0), 16 (element 16), 31 (element 31) */
    b[2] = 0x01, b[3] = 0x00, b[4] = 0x01, b[5] = 0x80;
    b[6 + 0] = 0x21;  /* y[0] = (1 | 16) - 16 = 1;  y[16] = (2 | 16) - 16 = 2 */
    b[6 + 1] = 0x21;  /* y[1] = 1 - 16 = -15;       y[17] = 2 - 16 = -14 */
    b[6 + 15] = 0xF0; /* y[15] = 0 - 16 = -16;      y[31] = (15 | 16) - 16 = 15 */
    RUN(DT_Q5_0, b, 32, {0, 1.0f}, {16, 2.0f}, {1, -15.0f}, {17, -14.0f}, {15, -16.0f},
        {31, 15.0f});
}

static void test_q5_1(void)
{
    uint8_t b[24] = {0};
    put16(b, H_0_5);   /* d = 0.5 */
    put16(b + 2, H_2); /* m = 2 */
    b[4] = 0x02;       /* qh bit 1: element 1 gets +16 */
    b[8 + 1] = 0x13;   /* y[1] = (3 | 16) * 0.5 + 2 = 19 * 0.5 + 2 = 11.5; y[17] = 1 * 0.5 + 2 = 2.5 */
    /* y[0] = 0 * 0.5 + 2 = 2 */
    RUN(DT_Q5_1, b, 32, {1, 11.5f}, {17, 2.5f}, {0, 2.0f}, {16, 2.0f});
}

static void test_iq4_nl(void)
{
    uint8_t b[18] = {0};
    put16(b, H_0_5); /* d = 0.5; table index 0 is -127 -> -63.5 */
    b[2 + 0] = 0xF0;  /* y[0] = 0.5 * table[0] = 0.5 * -127 = -63.5; y[16] = 0.5 * table[15] = 56.5 */
    b[2 + 15] = 0x78; /* y[15] = 0.5 * table[8] = 0.5 * 1 = 0.5; y[31] = 0.5 * table[7] = -5 */
    RUN(DT_IQ4_NL, b, 32, {0, -63.5f}, {16, 56.5f}, {15, 0.5f}, {31, -5.0f}, {3, -63.5f});
}

static void test_mxfp4(void)
{
    uint8_t b[17 * 4] = {0};
    /* Block 0: e = 128 -> d = 2^(128-127) / 2 = 1. Nibble 1 is e2m1 0.5
     * (table 1), nibble 15 is -6 (table -12): y[0] = 1 * 1 = 1 (0.5 * 2^1),
     * y[16] = -12 (-6 * 2^1). */
    b[0] = 128;
    b[1 + 0] = 0xF1;
    /* nibble 7 = 6.0 -> table 12; nibble 5 = 3.0 -> table 6 */
    b[1 + 15] = 0x57; /* y[15] = 12, y[31] = 6 */
    /* Block 1: e = 0 -> d = 2^-128 (the subnormal 0x00200000).
     * nibble 7: y[32] = 12 * 2^-128 = 1.5 * 2^-125. */
    b[17] = 0;
    b[18] = 0x07;
    /* Block 2: e = 1 -> d = 2^-127 (0x00400000). nibble 2 (1.0 -> 2): y[64] = 2^-126. */
    b[34] = 1;
    b[35] = 0x02;
    /* Block 3: e = 254 -> d = 2^126; nibble 9 (-0.5 -> -1): y[96] = -2^126.
     * nibble 8 is -0: table 0 -> y[112] = 0 * 2^126 = +0. */
    b[51] = 254;
    b[52] = 0x89;
    RUN(DT_MXFP4, b, 128, {0, 1.0f}, {16, -12.0f}, {15, 12.0f}, {31, 6.0f}, {1, 0.0f},
        {32, ldexpf(1.5f, -125)}, {64, ldexpf(1.0f, -126)}, {96, -ldexpf(1.0f, 126)},
        {112, 0.0f});
    CHECK(half_f32_bits(dequant_e8m0_half(0)) == 0x00200000u);
    CHECK(half_f32_bits(dequant_e8m0_half(1)) == 0x00400000u);
    CHECK(dequant_e8m0_half(127) == 0.5f); /* 2^0 / 2 */
    CHECK(dequant_e8m0_half(255) == ldexpf(1.0f, 127));
}

/* ---- K-quants (256-element super-blocks) ---- */

static void test_q2_k(void)
{
    /* scales[16] @0, qs[64] @16, d @80, dmin @82.
     * Element e: half h = e/128, j = (e%128)/32, w = e%32; qs byte 32h + w at
     * shift 2j; scale byte 8h + 2j + (w >= 16). */
    uint8_t b[84] = {0};
    put16(b + 80, H_1);   /* d = 1 */
    put16(b + 82, H_0_5); /* dmin = 0.5 */
    b[0] = 0x21;          /* scale 0: sc 1, m 2 -> dl 1, ml 1 */
    b[1] = 0x07;          /* scale 1: dl 7, ml 0 */
    b[2] = 0x13;          /* scale 2: dl 3, ml 0.5 */
    b[4] = 0x05;          /* scale 4: dl 5, ml 0 */
    b[6] = 0xF4;          /* scale 6: dl 4, ml 15 * 0.5 = 7.5 */
    b[9] = 0x42;          /* scale 9: dl 2, ml 4 * 0.5 = 2 */
    b[16 + 0] = 0xE4;     /* 2-bit fields 0,1,2,3 at shifts 0,2,4,6 */
    b[16 + 16] = 0x03;
    b[16 + 49] = 0x02;
    /* y[0]   = 1 * 0 - 1 = -1          (byte 0 shift 0, scale 0)
     * y[32]  = 3 * 1 - 0.5 = 2.5       (byte 0 shift 2, scale 2)
     * y[64]  = 5 * 2 - 0 = 10          (byte 0 shift 4, scale 4)
     * y[96]  = 4 * 3 - 7.5 = 4.5       (byte 0 shift 6, scale 6)
     * y[16]  = 7 * 3 - 0 = 21          (byte 16 shift 0, scale 1)
     * y[145] = 2 * 2 - 2 = 2           (half 1: byte 32+17=49, shift 0, scale 9)
     * y[5]   = 1 * 0 - 1 = -1          (byte 5 = 0, scale 0)
     * y[200] = 0 * q - 0 = 0           (scale 12 = 0) */
    RUN(DT_Q2_K, b, 256, {0, -1.0f}, {32, 2.5f}, {64, 10.0f}, {96, 4.5f}, {16, 21.0f},
        {145, 2.0f}, {5, -1.0f}, {200, 0.0f});
}

static void test_q3_k(void)
{
    /* hmask[32] @0, qs[64] @32, scales[12] @96, d @108.
     * Element e: h = e/128, j = (e%128)/32, w = e%32: q = (qs[32h + w] >> 2j) & 3,
     * high bit = hmask[w] bit (4h + j), value q - (bit ? 0 : 4); scale index
     * s = 8h + 2j + (w >= 16), 6 bits: low 4 from packed[s] (s < 8) or
     * packed[s-8] >> 4, top 2 from packed[8 + s%4] >> 2(s/4); minus 32. */
    uint8_t b[110] = {0};
    uint8_t *hm = b, *qs = b + 32, *sc = b + 96;
    put16(b + 108, H_1); /* d = 1 */
    /* scale 0 = 33 (low 1, top 2) -> +1 */
    sc[0] = 0x01;
    sc[8] = 0x02;
    /* scale 9 = 20 (low 4 from packed[1] >> 4, top 1 from packed[9] >> 4) -> -12 */
    sc[1] = 0x40;
    sc[9] = 0x10;
    /* scale 15 = 63 (low 15 from packed[7] >> 4, top 3 from packed[11] >> 6) -> 31 */
    sc[7] = 0xF0;
    sc[11] = 0xC0;
    /* scale 6: low packed[6] & 0xF = 0, top (packed[10] >> 2) & 3 = 0 -> -32 */
    qs[0] = 0x43;   /* shift 0: 3; shift 6: 1 */
    hm[0] = 0x09;   /* bits 0 and 3 */
    qs[1] = 0x01;   /* shift 0: 1, hmask[1] bit 0 clear */
    qs[48] = 0x02;  /* element 144 (h 1, j 0, w 16): q 2, hmask[16] bit 4 clear */
    qs[63] = 0x80;  /* element 255 (h 1, j 3, w 31): shift 6 -> 2 */
    hm[31] = 0x80;  /* ... hmask[31] bit 7 set */
    /* y[0]   = 1 * (3 - 0) = 3
     * y[1]   = 1 * (1 - 4) = -3
     * y[2]   = 1 * (0 - 4) = -4
     * y[96]  = -32 * (1 - 0) = -32      (byte 0 shift 6, hmask bit 3, scale 6)
     * y[144] = -12 * (2 - 4) = 24       (scale 9)
     * y[255] = 31 * (2 - 0) = 62        (scale 15)
     * y[200] = -32 * (0 - 4) = 128      (scale 12: low packed[4] >> 4 = 0, top packed[8] >> 6 = 0) */
    RUN(DT_Q3_K, b, 256, {0, 3.0f}, {1, -3.0f}, {2, -4.0f}, {96, -32.0f}, {144, 24.0f},
        {255, 62.0f}, {200, 128.0f});
}

static void test_k4_scale_min(void)
{
    /* Pairs 0..3: low 6 bits of bytes 0..3 / 4..7. Pairs 4..7: low nibble /
     * high nibble of bytes 8..11, top two bits from bytes 0..3 / 4..7. */
    uint8_t s[12] = {0};
    s[0] = 10 | 0x40;  /* pair 0 scale 10; top bits 01 -> pair 4 scale += 16 */
    s[4] = 3 | 0x80;   /* pair 0 min 3; top bits 10 -> pair 4 min += 32 */
    s[8] = 0x35;       /* pair 4: scale low 5, min low 3 */
    uint8_t sc, m;
    dequant_k4_scale_min(0, s, &sc, &m);
    CHECK(sc == 10 && m == 3);
    dequant_k4_scale_min(4, s, &sc, &m);
    CHECK(sc == 5 + 16 && m == 3 + 32);
    dequant_k4_scale_min(1, s, &sc, &m);
    CHECK(sc == 0 && m == 0);
}

static void test_q4_k(void)
{
    /* d @0, dmin @2, scales[12] @4, qs[128] @16. Element e: c = e/64,
     * r = e%64: qs byte 32c + r%32, low nibble if r < 32 else high;
     * pair 2c + (r >= 32). */
    uint8_t b[144] = {0};
    uint8_t *s = b + 4, *qs = b + 16;
    put16(b, H_0_5);   /* d = 0.5 */
    put16(b + 2, H_1); /* dmin = 1 */
    s[0] = 10;         /* pair 0: scale 10, min 3 -> d1 = 5, m1 = 3 */
    s[4] = 3;
    s[1] = 2;          /* pair 1: scale 2, min 0 -> d = 1, m = 0 */
    s[8] = 0x35;       /* pair 4: scale 5, min 3 -> d = 2.5, m = 3 */
    s[11] = 0x21;      /* pair 7: scale low 1 | (s[3] >> 6) << 4, min low 2 | (s[7] >> 6) << 4 */
    s[3] = 0xC0;       /* -> scale 1 + 48 = 49 (pair 3 scale = s[3] & 63 = 0) */
    s[7] = 0x40;       /* -> min 2 + 16 = 18 (pair 3 min = 0) */
    qs[0] = 0xF7;
    qs[64] = 0x04;
    qs[96] = 0x20;
    /* y[0]   = 5 * 7 - 3 = 32
     * y[1]   = 5 * 0 - 3 = -3
     * y[32]  = 1 * 15 - 0 = 15
     * y[128] = 2.5 * 4 - 3 = 7          (c 2, pair 4, qs[64] low)
     * y[224] = (0.5 * 49) * 2 - 18 = 24.5 * 2 - 18 = 31   (c 3, pair 7, qs[96] high) */
    RUN(DT_Q4_K, b, 256, {0, 32.0f}, {1, -3.0f}, {32, 15.0f}, {128, 7.0f}, {224, 31.0f});
}

static void test_q5_k(void)
{
    /* d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48. As Q4_K, plus
     * the fifth bit of element e from qh[r%32] bit 2c + (r >= 32). */
    uint8_t b[176] = {0};
    uint8_t *s = b + 4, *qh = b + 16, *ql = b + 48;
    put16(b, H_1);     /* d = 1 */
    put16(b + 2, H_1); /* dmin = 1 */
    s[0] = 2;          /* pair 0: d1 = 2, m1 = 1 */
    s[4] = 1;
    s[1] = 1;          /* pair 1: d = 1, m = 0 */
    s[11] = 0x01;      /* pair 7: scale 1, min 0 */
    ql[0] = 0xA3;
    ql[1] = 0x03;
    qh[0] = 0x03;      /* bit 0 (element 0) and bit 1 (element 32) */
    ql[127] = 0xF0;    /* element 255: high nibble 15 */
    qh[31] = 0x80;     /* ... bit 7 -> +16 */
    /* y[0]   = 2 * (3 + 16) - 1 = 37
     * y[1]   = 2 * 3 - 1 = 5
     * y[32]  = 1 * (10 + 16) - 0 = 26
     * y[255] = 1 * (15 + 16) - 0 = 31
     * y[64]  = pair 2 (scale 0, min 0): 0 */
    RUN(DT_Q5_K, b, 256, {0, 37.0f}, {1, 5.0f}, {32, 26.0f}, {255, 31.0f}, {64, 0.0f});
}

static void test_q6_k(void)
{
    /* ql[128] @0, qh[64] @128, int8 scales[16] @192, d @208. Element e:
     * n = e/128, r = e%128, l = r%32, k = r/32: ql byte 64n + l + 32(k&1),
     * low nibble for k < 2; qh byte 32n + l at shift 2k; scale 8n + l/16 + 2k;
     * q = (nibble | top << 4) - 32; y = d * scale * q. */
    uint8_t b[210] = {0};
    uint8_t *ql = b, *qh = b + 128;
    int8_t *sc = (int8_t *)(b + 192);
    put16(b + 208, H_0_5); /* d = 0.5 */
    ql[0] = 0xF5;
    qh[0] = 0x72; /* k0: 2, k1: 0, k2: 3, k3: 1 */
    sc[0] = 3;
    sc[2] = -2;
    sc[4] = 1;
    sc[6] = -128;
    ql[80] = 0x01;
    qh[48] = 0x03;
    sc[9] = 127;
    /* y[0]   = 0.5 * 3 * ((5 | 2 << 4) - 32 = 5) = 7.5
     * y[32]  = 0.5 * -2 * ((0 | 0) - 32) = 32         (ql[32] low, qh bits 2-3)
     * y[64]  = 0.5 * 1 * ((15 | 3 << 4) - 32 = 31) = 15.5
     * y[96]  = 0.5 * -128 * ((0 | 1 << 4) - 32 = -16) = 1024
     * y[144] = 0.5 * 127 * ((1 | 3 << 4) - 32 = 17) = 63.5 * 17 = 1079.5
     *          (n 1, l 16: ql[64 + 16], qh[32 + 16], scale 8 + 1)
     * y[1]   = 0.5 * 3 * (0 - 32) = -48 */
    RUN(DT_Q6_K, b, 256, {0, 7.5f}, {32, 32.0f}, {64, 15.5f}, {96, 1024.0f}, {144, 1079.5f},
        {1, -48.0f});
}

static void test_q8_k(void)
{
    uint8_t b[292] = {0};
    float d = 0.25f;
    memcpy(b, &d, 4);
    b[4 + 0] = 0x80; /* y[0] = 0.25 * -128 = -32 */
    b[4 + 255] = 100; /* y[255] = 25 */
    b[260] = 0xFF;    /* bsums do not affect values */
    RUN(DT_Q8_K, b, 256, {0, -32.0f}, {255, 25.0f}, {7, 0.0f});
}

static void test_iq4_xs(void)
{
    /* d @0, u16 scales_h @2, scales_l[4] @4, qs[128] @8. Block ib (32
     * elements): ls = nibble ib%2 of scales_l[ib/2] | ((scales_h >> 2ib) & 3) << 4;
     * dl = d * (ls - 32); y = dl * table[nibble], low nibbles first. */
    uint8_t b[136] = {0};
    uint8_t *qs = b + 8;
    put16(b, H_0_25);    /* d = 0.25 */
    put16(b + 2, 0xC002); /* ib 0 top bits 2, ib 7 top bits 3 */
    b[4 + 0] = 0x01;     /* ib 0 low 1 -> ls 33 -> dl 0.25; ib 1 low 0 -> ls 0 -> dl -8 */
    b[4 + 3] = 0xF0;     /* ib 7 low 15 -> ls 63 -> dl 0.25 * 31 = 7.75 */
    qs[16] = 0x09;       /* element 32 (ib 1): table[9] = 13 */
    qs[127] = 0xD0;      /* element 255 (ib 7, high nibble of its 16th byte): table[13] = 69 */
    /* y[0]   = 0.25 * table[0] = 0.25 * -127 = -31.75
     * y[32]  = -8 * 13 = -104
     * y[255] = 7.75 * 69 = 534.75
     * y[48]  = -8 * table[0] = 1016 */
    RUN(DT_IQ4_XS, b, 256, {0, -31.75f}, {32, -104.0f}, {255, 534.75f}, {48, 1016.0f});
}

/* ---- plain types ---- */

static void test_plain(void)
{
    uint8_t b[64];
    uint16_t h[4] = {0x3C00, 0xC000, 0x7C00, 0x0001}; /* 1, -2, inf, 2^-24 */
    memcpy(b, h, 8);
    RUN(DT_F16, b, 4, {0, 1.0f}, {1, -2.0f}, {2, INFINITY}, {3, ldexpf(1.0f, -24)});
    uint16_t bf[2] = {0x3F80, 0xC0A0}; /* 1, -(1 + 0.25) * 4 = -5 */
    memcpy(b, bf, 4);
    RUN(DT_BF16, b, 2, {0, 1.0f}, {1, -5.0f});
    float f[2] = {0.1f, -3.5f};
    memcpy(b + 1, f, 8); /* unaligned source */
    RUN(DT_F32, b + 1, 2, {0, 0.1f}, {1, -3.5f});
    double dd[2] = {0.1, 1e300};
    memcpy(b, dd, 16);
    RUN(DT_F64, b, 2, {0, 0.1f}, {1, INFINITY});
    int8_t i8[2] = {-128, 127};
    memcpy(b, i8, 2);
    RUN(DT_I8, b, 2, {0, -128.0f}, {1, 127.0f});
    int16_t i16[2] = {-32768, 1234};
    memcpy(b, i16, 4);
    RUN(DT_I16, b, 2, {0, -32768.0f}, {1, 1234.0f});
    int32_t i32[2] = {-7, 16777217}; /* 2^24 + 1 rounds to even: 16777216 */
    memcpy(b, i32, 8);
    RUN(DT_I32, b, 2, {0, -7.0f}, {1, 16777216.0f});
    int64_t i64[1] = {-(1ll << 40)};
    memcpy(b, i64, 8);
    RUN(DT_I64, b, 1, {0, -ldexpf(1.0f, 40)});
    /* F8 E4M3 (bias 7): 0x38 = 2^0 = 1; 0x01 = 1/8 * 2^-6 = 2^-9;
     * 0x7E = 1.75 * 2^8 = 448 (the largest); 0xB8 = -1. */
    uint8_t e4[4] = {0x38, 0x01, 0x7E, 0xB8};
    RUN(DT_F8_E4M3, e4, 4, {0, 1.0f}, {1, ldexpf(1.0f, -9)}, {2, 448.0f}, {3, -1.0f});
    CHECK(isnan(fp8_e4m3_to_f32(0x7F)) && isnan(fp8_e4m3_to_f32(0xFF)));
    CHECK(fp8_e4m3_to_f32(0x78) == 256.0f); /* exponent 15 is a normal exponent in E4M3fn */
    /* F8 E5M2 (bias 15): 0x3C = 1; 0x01 = 1/4 * 2^-14 = 2^-16; 0x7B = 1.75 * 2^15 = 57344. */
    uint8_t e5[3] = {0x3C, 0x01, 0x7B};
    RUN(DT_F8_E5M2, e5, 3, {0, 1.0f}, {1, ldexpf(1.0f, -16)}, {2, 57344.0f});
    CHECK(fp8_e5m2_to_f32(0x7C) == INFINITY && isnan(fp8_e5m2_to_f32(0x7D)));
}

static void test_errors(void)
{
    float y[256];
    uint8_t b[256] = {0};
    memra_err err = {{0}};
    CHECK(dequant_row(DT_IQ2_XXS, b, y, 256, &err) == -1 &&
          strstr(err.msg, "type IQ2_XXS is not supported"));
    CHECK(dequant_row(DT_Q4_K, b, y, 255, &err) == -1 &&
          strstr(err.msg, "255 elements is not a whole number of Q4_K blocks of 256"));
    CHECK(dequant_row((dtype)4, b, y, 32, &err) == -1 && strstr(err.msg, "unknown type id 4"));
    CHECK(dequant_row(DT_Q8_0, b, y, 0, &err) == 0);
    CHECK(dequant_supported(DT_MXFP4) && dequant_supported(DT_BF16));
    CHECK(!dequant_supported(DT_IQ1_S) && !dequant_supported(DT_TQ2_0));
}

/* Multi-block rows: block i must land at y[i * block]. */
static void test_multi_block(void)
{
    uint8_t b[3 * 34] = {0};
    float y[96];
    for (int i = 0; i < 3; i++) {
        put16(b + 34 * i, H_1);
        b[34 * i + 2 + 5] = (uint8_t)(i + 1); /* y[32i + 5] = i + 1 */
    }
    memra_err err;
    CHECK(dequant_row(DT_Q8_0, b, y, 96, &err) == 0);
    CHECK(y[5] == 1.0f && y[37] == 2.0f && y[69] == 3.0f && y[68] == 0.0f);
    uint8_t k[2 * 210] = {0};
    put16(k + 210 + 208, H_1);
    k[210 + 192] = 1;   /* block 1, scale 0 = 1 */
    k[210 + 0] = 0x01;  /* block 1 element 0: (1 | 0) - 32 = -31 */
    float yk[512];
    CHECK(dequant_row(DT_Q6_K, k, yk, 512, &err) == 0);
    CHECK(yk[256] == -31.0f && yk[0] == 0.0f);
}

/* ---- f16 / bf16 ---- */

static void test_fp16_edges(void)
{
    /* Exact cases */
    CHECK(f32_to_fp16(1.0f) == 0x3C00);
    CHECK(f32_to_fp16(-2.0f) == 0xC000);
    CHECK(f32_to_fp16(0.0f) == 0x0000);
    CHECK(f32_to_fp16(-0.0f) == 0x8000);
    CHECK(f32_to_fp16(65504.0f) == 0x7BFF); /* largest finite */
    CHECK(f32_to_fp16(ldexpf(1.0f, -14)) == 0x0400); /* smallest normal */
    CHECK(f32_to_fp16(ldexpf(1.0f, -24)) == 0x0001); /* smallest subnormal */
    CHECK(f32_to_fp16(ldexpf(1023.0f, -24)) == 0x03FF); /* largest subnormal */
    /* Overflow: 65520 is exactly halfway between 65504 (odd mantissa 0x3FF)
     * and 65536 (infinity): ties to even -> infinity; just below stays. */
    CHECK(f32_to_fp16(65520.0f) == 0x7C00);
    CHECK(f32_to_fp16(half_bits_f32(half_f32_bits(65520.0f) - 1)) == 0x7BFF);
    CHECK(f32_to_fp16(1e10f) == 0x7C00);
    CHECK(f32_to_fp16(INFINITY) == 0x7C00 && f32_to_fp16(-INFINITY) == 0xFC00);
    /* NaN stays NaN (exponent all ones, mantissa non-zero), sign kept */
    uint16_t n = f32_to_fp16(NAN);
    CHECK((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0);
    n = f32_to_fp16(half_bits_f32(0xFF800001u)); /* a negative NaN with payload only in low bits */
    CHECK((n & 0x7C00) == 0x7C00 && (n & 0x3FF) != 0 && (n & 0x8000));
    /* Normal ties: 1 + 2^-11 is halfway between 0x3C00 (even) and 0x3C01 ->
     * 0x3C00; 1 + 3 * 2^-11 is halfway between 0x3C01 (odd) and 0x3C02 ->
     * 0x3C02; a hair above halfway rounds up. */
    CHECK(f32_to_fp16(1.0f + ldexpf(1.0f, -11)) == 0x3C00);
    CHECK(f32_to_fp16(1.0f + ldexpf(3.0f, -11)) == 0x3C02);
    CHECK(f32_to_fp16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)) == 0x3C01);
    /* Carry into the exponent: the largest half below 2 is 2 - 2^-10
     * (0x3FFF, odd); 2 - 2^-11 is halfway between it and 2 -> 0x4000. */
    CHECK(f32_to_fp16(2.0f - ldexpf(1.0f, -11)) == 0x4000);
    /* Subnormal ties: 2^-25 is halfway between 0 and 2^-24 -> 0 (even);
     * 3 * 2^-25 = 1.5 * 2^-24 is halfway between 1 and 2 (units of 2^-24) -> 2;
     * 1.5 * 2^-25 is above halfway -> 1; 2^-26 -> 0. */
    CHECK(f32_to_fp16(ldexpf(1.0f, -25)) == 0x0000);
    CHECK(f32_to_fp16(-ldexpf(1.0f, -25)) == 0x8000);
    CHECK(f32_to_fp16(ldexpf(3.0f, -25)) == 0x0002);
    CHECK(f32_to_fp16(ldexpf(1.5f, -25)) == 0x0001);
    CHECK(f32_to_fp16(ldexpf(1.0f, -26)) == 0x0000);
    CHECK(f32_to_fp16(ldexpf(1.0f, -149)) == 0x0000); /* f32 subnormal */
    /* Between the largest subnormal (1023 * 2^-24) and the smallest normal
     * (1024 * 2^-24): 1023.5 * 2^-24 ties to even -> 0x0400. */
    CHECK(f32_to_fp16(ldexpf(1023.5f, -24)) == 0x0400);
    /* Widening */
    CHECK(fp16_to_f32(0x0001) == ldexpf(1.0f, -24));
    CHECK(fp16_to_f32(0x03FF) == ldexpf(1023.0f, -24));
    CHECK(fp16_to_f32(0x8001) == -ldexpf(1.0f, -24));
    CHECK(fp16_to_f32(0x7BFF) == 65504.0f);
    CHECK(fp16_to_f32(0x3555) == 0x155 / 1024.0f * 0.25f + 0.25f); /* (1 + m/1024) * 2^(13-15) */
    CHECK(fp16_to_f32(0xFC00) == -INFINITY);
    CHECK(isnan(fp16_to_f32(0x7E00)) && isnan(fp16_to_f32(0x7C01)));
    CHECK(half_f32_bits(fp16_to_f32(0x8000)) == 0x80000000u);
    /* Every non-NaN half survives the round trip; NaNs stay NaN. */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = fp16_to_f32((uint16_t)h);
        uint16_t back = f32_to_fp16(f);
        if (((h & 0x7C00) == 0x7C00) && (h & 0x3FF)) {
            bad += !isnan(f) || (back & 0x7C00) != 0x7C00 || (back & 0x3FF) == 0;
        } else {
            bad += back != h;
        }
    }
    CHECK_MSG(bad == 0, "%d halves failed the round trip", bad);
}

/* Against the compiler's _Float16 conversions (IEEE, ties to even) over a
 * sweep of f32 bit patterns, where the compiler has the type. */
static void test_fp16_vs_compiler(void)
{
#ifdef __FLT16_MAX__
    int bad = 0;
    uint32_t x = 12345;
    for (int i = 0; i < 2000000; i++) {
        x = x * 1664525u + 1013904223u;
        /* Bias half the samples into the f16 range, where rounding matters. */
        uint32_t u = (i & 1) ? x : ((x & 0x80000000u) | (0x33000000u + (x % 0x14800000u)));
        float f = half_bits_f32(u);
        if (isnan(f))
            continue;
        volatile _Float16 hv = (_Float16)f;
        _Float16 hc = hv;
        uint16_t want;
        memcpy(&want, &hc, 2);
        if (f32_to_fp16(f) != want && bad++ < 5)
            fprintf(stderr, "  %08x: got %04x want %04x\n", u, f32_to_fp16(f), want);
    }
    CHECK_MSG(bad == 0, "%d mismatches", bad);
#endif
}

static void test_bf16_edges(void)
{
    CHECK(f32_to_bf16(1.0f) == 0x3F80);
    CHECK(f32_to_bf16(-5.0f) == 0xC0A0);
    CHECK(bf16_to_f32(0x3F80) == 1.0f && bf16_to_f32(0xC0A0) == -5.0f);
    /* Ties: 1 + 2^-8 is halfway between 0x3F80 (even) and 0x3F81 -> 0x3F80;
     * 1 + 3 * 2^-8 is halfway between 0x3F81 (odd) and 0x3F82 -> 0x3F82;
     * a hair above halfway rounds up. */
    CHECK(f32_to_bf16(half_bits_f32(0x3F808000u)) == 0x3F80);
    CHECK(f32_to_bf16(half_bits_f32(0x3F818000u)) == 0x3F82);
    CHECK(f32_to_bf16(half_bits_f32(0x3F808001u)) == 0x3F81);
    CHECK(f32_to_bf16(half_bits_f32(0x3F807FFFu)) == 0x3F80);
    /* Subnormals round the same way: 0x00018000 ties to 2, 0x00008000 to 0. */
    CHECK(f32_to_bf16(half_bits_f32(0x00010000u)) == 0x0001);
    CHECK(f32_to_bf16(half_bits_f32(0x00008000u)) == 0x0000);
    CHECK(f32_to_bf16(half_bits_f32(0x00018000u)) == 0x0002);
    CHECK(bf16_to_f32(0x0001) == half_bits_f32(0x00010000u));
    /* Overflow: the largest f32 is above the largest bf16 plus half an ulp -> inf. */
    CHECK(f32_to_bf16(half_bits_f32(0x7F7FFFFFu)) == 0x7F80);
    CHECK(f32_to_bf16(INFINITY) == 0x7F80 && f32_to_bf16(-INFINITY) == 0xFF80);
    CHECK(f32_to_bf16(-0.0f) == 0x8000);
    /* NaN stays NaN even when its payload is only in the low 16 bits (plain
     * truncation would turn 0x7F800001 into infinity). */
    uint16_t n = f32_to_bf16(half_bits_f32(0x7F800001u));
    CHECK((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0);
    n = f32_to_bf16(NAN);
    CHECK((n & 0x7F80) == 0x7F80 && (n & 0x7F) != 0);
    CHECK(isnan(bf16_to_f32(0x7FC0)));
    /* Every bf16 round-trips. */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = bf16_to_f32((uint16_t)h);
        if (isnan(f))
            bad += !isnan(bf16_to_f32(f32_to_bf16(f)));
        else
            bad += f32_to_bf16(f) != h;
    }
    CHECK(bad == 0);
}

static void test_rows(void)
{
    float in[3] = {1.0f, -2.0f, 0.5f}, out[3];
    uint16_t h[3];
    f32_to_fp16_row(in, h, 3);
    CHECK(h[0] == 0x3C00 && h[1] == 0xC000 && h[2] == 0x3800);
    fp16_to_f32_row(h, out, 3);
    CHECK(memcmp(in, out, sizeof in) == 0);
    f32_to_bf16_row(in, h, 3);
    CHECK(h[0] == 0x3F80 && h[1] == 0xC000 && h[2] == 0x3F00);
    bf16_to_f32_row(h, out, 3);
    CHECK(memcmp(in, out, sizeof in) == 0);
}

TEST_MAIN(TEST_CASE(test_q8_0), TEST_CASE(test_q4_0), TEST_CASE(test_q4_1), TEST_CASE(test_q5_0),
          TEST_CASE(test_q5_1), TEST_CASE(test_iq4_nl), TEST_CASE(test_mxfp4),
          TEST_CASE(test_q2_k), TEST_CASE(test_q3_k), TEST_CASE(test_k4_scale_min),
          TEST_CASE(test_q4_k), TEST_CASE(test_q5_k), TEST_CASE(test_q6_k), TEST_CASE(test_q8_k),
          TEST_CASE(test_iq4_xs), TEST_CASE(test_plain), TEST_CASE(test_errors),
          TEST_CASE(test_multi_block), TEST_CASE(test_fp16_edges),
          TEST_CASE(test_fp16_vs_compiler), TEST_CASE(test_bf16_edges), TEST_CASE(test_rows))
