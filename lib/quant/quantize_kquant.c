/* Q4_K and Q5_K: 256 values in 144 / 176 bytes. Eight sub-blocks of 32,
 * each y = (d * sc) * q - dmin * m with 6-bit sc and m, f16 d and dmin,
 * q in 0..15 (Q4_K) or 0..31 (Q5_K, the fifth bit in qh).
 *
 * Three steps per super-block:
 *   1. each sub-block's float scale and min by the affine search
 *      (qz_fit_affine, 21 stretches of the range, least squares);
 *   2. d = max scale / 63 and dmin = max min / 63 as f16, and each
 *      sub-block's sc and m rounded;
 *   3. each sub-block tries sc and m one step either way (nine pairs) with
 *      its quants re-rounded against the decoded values, and keeps the pair
 *      with the smallest error: this is where the 6-bit rounding of step 2
 *      is repaired, measured on exactly what the decoder computes.
 * The plain min/max rule is the last candidate (kq_block). */
#include "quant/quantize.h"
#include "quant/quantize_internal.h"

#define KQ_NSTEP 20

/* Error of one sub-block decoded with (d * sc) * q - dmin * m, each quant
 * re-rounded for those values. */
static float sub_error(const float *x, const float *w, float d, float dmin, int sc, int m,
                       int nmax)
{
    const float A = d * (float)sc, B = dmin * (float)m;
    const float iA = A > 0.0f ? 1.0f / A : 0.0f;
    float e[QZ_LANES] = {0};
    for (int i = 0; i < 32; i += QZ_LANES) {
        for (int k = 0; k < QZ_LANES; k++) {
            const float q = qz_roundf(qz_clamp((x[i + k] + B) * iA, 0.0f, (float)nmax));
            const float diff = x[i + k] - (A * q - B);
            e[k] += w[i + k] * diff * diff;
        }
    }
    return qz_lanes_sum(e);
}

/* The quants sub_error measured. */
static void sub_quants(const float *x, float d, float dmin, int sc, int m, int nmax, uint8_t *l)
{
    const float A = d * (float)sc, B = dmin * (float)m;
    const float iA = A > 0.0f ? 1.0f / A : 0.0f;
    for (int i = 0; i < 32; i++)
        l[i] = (uint8_t)qz_round(qz_clamp((x[i] + B) * iA, 0.0f, (float)nmax));
}

static int clamp63(int v) { return v < 0 ? 0 : v > 63 ? 63 : v; }

/* Pack the eight (sc, m) pairs as dequant_k4_scale_min unpacks them. */
static void pack_scales(const uint8_t *sc, const uint8_t *m, uint8_t *q)
{
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

/* 6-bit scales for float scales and mins: d and dmin from the largest,
 * each pair rounded. */
static void kq_round_scales(const float *a, const float *b, uint16_t *dh, uint16_t *mh,
                            uint8_t *sc, uint8_t *m)
{
    float max_a = 0.0f, max_b = 0.0f;
    for (int j = 0; j < 8; j++) {
        max_a = a[j] > max_a ? a[j] : max_a;
        max_b = b[j] > max_b ? b[j] : max_b;
    }
    *dh = qz_f16(max_a / 63.0f);
    *mh = qz_f16(max_b / 63.0f);
    const float d = fp16_to_f32(*dh), dmin = fp16_to_f32(*mh);
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0.0f ? clamp63(qz_round(a[j] / d)) : 0);
        m[j] = (uint8_t)(dmin > 0.0f ? clamp63(qz_round(b[j] / dmin)) : 0);
    }
}

/* Steps 1-3 for one super-block: header fields and the 256 quants. The
 * plain min/max rule (each sub-block's range spread over 0..nmax, scales
 * rounded to 6 bits) is evaluated too and kept if the search did worse, so
 * no block is worse than that rule. */
static void kq_block(const float *x, const float *bw, int nmax, uint16_t *dh, uint16_t *mh,
                     uint8_t *sc, uint8_t *m, uint8_t *L)
{
    float a[8], b[8];
    for (int j = 0; j < 8; j++)
        qz_fit_affine(x + 32 * j, bw + 32 * j, 32, nmax, KQ_NSTEP, &a[j], &b[j]);
    kq_round_scales(a, b, dh, mh, sc, m);
    const float d = fp16_to_f32(*dh), dmin = fp16_to_f32(*mh);
    float total = 0.0f;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j, *ws = bw + 32 * j;
        const int s0 = sc[j], m0 = m[j];
        float best = sub_error(xs, ws, d, dmin, s0, m0, nmax);
        for (int ds = -1; ds <= 1; ds++) {
            for (int dm = -1; dm <= 1; dm++) {
                const int s1 = clamp63(s0 + ds), m1 = clamp63(m0 + dm);
                if ((s1 == s0 && m1 == m0) || (s1 > 0 && d == 0.0f) || (m1 > 0 && dmin == 0.0f))
                    continue;
                const float e = sub_error(xs, ws, d, dmin, s1, m1, nmax);
                if (e < best) {
                    best = e;
                    sc[j] = (uint8_t)s1;
                    m[j] = (uint8_t)m1;
                }
            }
        }
        total += best;
    }
    /* the min/max rule */
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float lo = xs[0], hi = xs[0];
        for (int i = 1; i < 32; i++) {
            lo = xs[i] < lo ? xs[i] : lo;
            hi = xs[i] > hi ? xs[i] : hi;
        }
        lo = lo < 0.0f ? lo : 0.0f;
        a[j] = (hi - lo) / (float)nmax;
        b[j] = -lo;
    }
    uint16_t rdh, rmh;
    uint8_t rsc[8], rm[8];
    kq_round_scales(a, b, &rdh, &rmh, rsc, rm);
    const float rd = fp16_to_f32(rdh), rdmin = fp16_to_f32(rmh);
    float ref = 0.0f;
    for (int j = 0; j < 8 && ref < total; j++)
        ref += sub_error(x + 32 * j, bw + 32 * j, rd, rdmin, rsc[j], rm[j], nmax);
    if (ref < total) {
        *dh = rdh;
        *mh = rmh;
        memcpy(sc, rsc, 8);
        memcpy(m, rm, 8);
    }
    const float fd = fp16_to_f32(*dh), fdmin = fp16_to_f32(*mh);
    for (int j = 0; j < 8; j++)
        sub_quants(x + 32 * j, fd, fdmin, sc[j], m[j], nmax, L + 32 * j);
}

void quantize_q4_k(const float *x, uint8_t *y, int64_t nb, const float *w)
{
    for (int64_t i = 0; i < nb; i++, x += 256, y += 144) {
        const float *bw = qz_block_weights(w ? w + 256 * i : NULL, 256);
        uint16_t dh, mh;
        uint8_t sc[8], m[8], L[256];
        kq_block(x, bw, 15, &dh, &mh, sc, m, L);
        qz_put_f16(y, dh);
        qz_put_f16(y + 2, mh);
        pack_scales(sc, m, y + 4);
        /* 64 elements per 32 qs bytes: low nibbles then high nibbles */
        uint8_t *qs = y + 16;
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                qs[32 * g + l] = (uint8_t)(L[64 * g + l] | (L[64 * g + 32 + l] << 4));
    }
}

void quantize_q5_k(const float *x, uint8_t *y, int64_t nb, const float *w)
{
    for (int64_t i = 0; i < nb; i++, x += 256, y += 176) {
        const float *bw = qz_block_weights(w ? w + 256 * i : NULL, 256);
        uint16_t dh, mh;
        uint8_t sc[8], m[8], L[256];
        kq_block(x, bw, 31, &dh, &mh, sc, m, L);
        qz_put_f16(y, dh);
        qz_put_f16(y + 2, mh);
        pack_scales(sc, m, y + 4);
        /* qh[l] bit 2g (low half of group g) and 2g+1 (high half) are the
         * fifth bits of elements 64g + l and 64g + 32 + l */
        uint8_t *qh = y + 16, *qs = y + 48;
        memset(qh, 0, 32);
        for (int g = 0; g < 4; g++) {
            for (int l = 0; l < 32; l++) {
                const int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
                qs[32 * g + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
                qh[l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
            }
        }
    }
}
