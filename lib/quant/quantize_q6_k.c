/* Q6_K: 256 values in 210 bytes. Sixteen sub-blocks of 16, each
 * y = (d * sc) * (q - 32) with int8 sc, f16 d and 6-bit q; the low four
 * bits of q in ql[128], the top two in qh[64], interleaved so one byte
 * serves elements 32 or 64 apart (see dequant_q6_k).
 *
 * Each sub-block's float scale comes from the symmetric search on the
 * levels -32..31 (both sides); d maps the largest of them to -128 or to
 * 127 (both are tried), and each sub-block then tries its integer scale one
 * step either way, quants re-rounded against the decoded values, keeping
 * the best: the 8-bit scale rounding measured on what the decoder computes.
 * The plain rule (each extreme on -32, the largest scale on -128) is the
 * last candidate, so no block is worse than it. */
#include <math.h>

#include "quant/quantize.h"
#include "quant/quantize_internal.h"

#define Q6_NSTEP 9

/* Integer scales and quants for super-scale bits dh: each sub-block's
 * rounded scale and its two neighbours. Returns the total error. */
static float q6_assign(const float *x, const float *bw, const float *s, uint16_t dh, int8_t *sc,
                       int8_t *L)
{
    const float d = fp16_to_f32(dh);
    float total = 0.0f;
    for (int k = 0; k < 16; k++) {
        const float *xs = x + 16 * k, *ws = bw + 16 * k;
        int r = d != 0.0f ? qz_round(qz_clamp(s[k] / d, -128.0f, 127.0f)) : 0;
        /* decoded as (d * sc) * q: the error of scale d * sc */
        float best = qz_err_symmetric(xs, ws, 16, d * (float)r, -32, 31);
        sc[k] = (int8_t)r;
        for (int dd = -1; dd <= 1 && d != 0.0f; dd += 2) {
            const int c = r + dd;
            if (c < -128 || c > 127)
                continue;
            const float e = qz_err_symmetric(xs, ws, 16, d * (float)c, -32, 31);
            if (e < best) {
                best = e;
                sc[k] = (int8_t)c;
            }
        }
        qz_quants_symmetric(xs, 16, d * (float)sc[k], -32, 31, L + 16 * k);
        total += best;
    }
    return total;
}

void quantize_q6_k(const float *x, uint8_t *y, int64_t nb, const float *w)
{
    for (int64_t i = 0; i < nb; i++, x += 256, y += 210) {
        const float *bw = qz_block_weights(w ? w + 256 * i : NULL, 256);
        float s[16], smax = 0.0f, e, r[16], rmax = 0.0f;
        for (int k = 0; k < 16; k++) {
            s[k] = qz_fit_symmetric(x + 16 * k, bw + 16 * k, 16, -32, 31, Q6_NSTEP, &e);
            if (fabsf(s[k]) > fabsf(smax))
                smax = s[k];
            /* the plain rule's scale: the extreme value on -32 */
            float xm = 0.0f;
            for (int j = 0; j < 16; j++)
                xm = fabsf(x[16 * k + j]) > fabsf(xm) ? x[16 * k + j] : xm;
            r[k] = xm / -32.0f;
            if (fabsf(r[k]) > fabsf(rmax))
                rmax = r[k];
        }
        int8_t sc[16], L[256], sc2[16], L2[256];
        uint16_t dh = qz_f16(smax / -128.0f);
        float err = q6_assign(x, bw, s, dh, sc, L);
        const uint16_t dh2 = qz_f16(smax / 127.0f);
        float e2;
        if (smax != 0.0f && (e2 = q6_assign(x, bw, s, dh2, sc2, L2)) < err) {
            err = e2;
            dh = dh2;
            memcpy(sc, sc2, 16);
            memcpy(L, L2, 256);
        }
        /* the plain rule (extremes on -32, the largest scale on -128), whose
         * rounded scales q6_assign only improves: never worse than it */
        const uint16_t dh3 = qz_f16(rmax / -128.0f);
        if (rmax != 0.0f && q6_assign(x, bw, r, dh3, sc2, L2) < err) {
            dh = dh3;
            memcpy(sc, sc2, 16);
            memcpy(L, L2, 256);
        }
        uint8_t *ql = y, *qh = y + 128;
        memset(qh, 0, 64);
        for (int h = 0; h < 2; h++) {
            const int8_t *q = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                const int q1 = q[l] + 32, q2 = q[l + 32] + 32, q3 = q[l + 64] + 32,
                          q4 = q[l + 96] + 32;
                ql[64 * h + l] = (uint8_t)((q1 & 0xF) | ((q3 & 0xF) << 4));
                ql[64 * h + l + 32] = (uint8_t)((q2 & 0xF) | ((q4 & 0xF) << 4));
                qh[32 * h + l] =
                    (uint8_t)((q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6));
            }
        }
        memcpy(y + 192, sc, 16);
        qz_put_f16(y + 208, dh);
    }
}
