/* The 256-element super-block formats: Q2_K..Q6_K, Q8_K and IQ4_XS.
 *
 * A K-quant super-block holds 16 sub-blocks of 16 (Q2_K, Q3_K, Q6_K) or 8
 * of 32 (Q4_K, Q5_K), each with its own small integer scale (and for
 * Q2/Q4/Q5 a min) that multiplies the block's f16 super-scale. The quant
 * bits are interleaved so that one byte feeds elements 32 (or 64) apart;
 * the loops below walk them in ggml's order and evaluate ggml's
 * expressions, so the floats are identical. */
#include <string.h>

#include "format/dequant.h"
#include "numerics/half.h"

static float rd_f16(const uint8_t *p) { return fp16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

void dequant_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q2_K: scales[16] (low nibble scale, high nibble min), qs[64] (2 bits per
 * element), d, dmin. Each 128-element half uses 32 qs bytes four times at
 * shifts 0, 2, 4, 6; every 16 elements take the next scale byte. */
void dequant_q2_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 84) {
        const uint8_t *scales = b, *q = b + 16;
        const float d = rd_f16(b + 80), min = rd_f16(b + 82);
        int is = 0;
        for (int n = 0; n < 256; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    const uint8_t sc = scales[is++];
                    const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                    for (int l = 0; l < 16; l++)
                        *y++ = dl * (int8_t)((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* Q3_K: hmask[32], qs[64], scales[12], d. Quants are 2 low bits from qs
 * (laid out as Q2_K) plus a high bit from hmask; a clear high bit means
 * subtract 4, giving -4..3. The 16 signed 6-bit scales (biased by 32) are
 * packed as: low nibbles of scales 0..7 in bytes 0..7, of 8..15 in the high
 * nibbles of bytes 0..7; top 2 bits of scale i in byte 8 + i%4 at bit
 * 2*(i/4). */
void dequant_q3_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 110) {
        const uint8_t *hm = b, *q = b + 32, *packed = b + 96;
        const float d_all = rd_f16(b + 108);
        int8_t scales[16];
        for (int s = 0; s < 16; s++) {
            const int low = s < 8 ? packed[s] & 0xF : packed[s - 8] >> 4;
            const int high = (packed[8 + s % 4] >> (2 * (s / 4))) & 3;
            scales[s] = (int8_t)((low | (high << 4)) - 32);
        }
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < 256; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d_all * scales[is++];
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * ((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
                }
            }
        }
    }
}

/* Q4_K: d, dmin, scales[12] (eight 6-bit scale/min pairs), qs[128]. Each
 * 64 elements use 32 qs bytes: low nibbles first, then high nibbles, with
 * their own scale/min pair. */
void dequant_q4_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 144) {
        const float d = rd_f16(b), min = rd_f16(b + 2);
        const uint8_t *scales = b + 4, *q = b + 16;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, q += 32) {
            uint8_t sc, m;
            dequant_k4_scale_min(is, scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            dequant_k4_scale_min(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (q[l] >> 4) - m2;
        }
    }
}

/* Q5_K: Q4_K plus qh[32]: element l of the k-th 32-element group gets its
 * fifth bit from bit k of qh[l]. */
void dequant_q5_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 176) {
        const float d = rd_f16(b), min = rd_f16(b + 2);
        const uint8_t *scales = b + 4, *qh = b + 16, *ql = b + 48;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0, is = 0; j < 256; j += 64, is += 2, ql += 32, u1 <<= 2, u2 <<= 2) {
            uint8_t sc, m;
            dequant_k4_scale_min(is, scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            dequant_k4_scale_min(is + 1, scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * ((ql[l] & 0xF) + ((qh[l] & u1) ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * ((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
        }
    }
}

/* Q6_K: ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16], d.
 * Per 128 elements: ql bytes 0..31 and 32..63 give low then high nibbles,
 * qh bytes 0..31 give the top bits at shifts 0, 2, 4, 6 for the four
 * 32-element quarters; quants are 0..63 biased by 32. */
void dequant_q6_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 210) {
        const float d = rd_f16(b + 208);
        const uint8_t *ql = b, *qh = b + 128;
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int8_t q1 = (int8_t)((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int8_t q3 = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

/* Q8_K: f32 d, int8 qs[256], int16 bsums[16] (sums for dot products, not
 * needed to decode). */
void dequant_q8_k(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 292, y += 256) {
        float d;
        memcpy(&d, b, 4);
        for (int j = 0; j < 256; j++)
            y[j] = d * (int8_t)b[4 + j];
    }
}

/* IQ4_XS: d, u16 scales_h, scales_l[4], qs[128]. Eight 32-element blocks,
 * each with a 6-bit scale (low 4 bits from a nibble of scales_l, top 2
 * from scales_h) biased by 32, over the IQ4_NL levels. */
void dequant_iq4_xs(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 136) {
        const float d = rd_f16(b);
        const unsigned scales_h = (unsigned)(b[2] | (b[3] << 8));
        const uint8_t *scales_l = b + 4, *qs = b + 8;
        for (int ib = 0; ib < 8; ib++, y += 32, qs += 16) {
            const int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xF) |
                           (((scales_h >> 2 * ib) & 3) << 4);
            const float dl = d * (ls - 32);
            for (int j = 0; j < 16; j++) {
                y[j] = dl * dequant_iq4nl_values[qs[j] & 0xF];
                y[j + 16] = dl * dequant_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}
