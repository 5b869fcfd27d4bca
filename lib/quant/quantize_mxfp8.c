/* MXFP8 (memra type 2000, the OCP MX FP8 E4M3 block): 32 values in 33
 * bytes, an E8M0 exponent e then 32 E4M3 bytes; y = e4m3 * 2^(e-127).
 *
 * The OCP rule picks e so the largest value's exponent lands on E4M3's top
 * binade, which can clip it (the binade ends at 448, not 512). The search
 * tries that exponent and its two neighbours with every value rounded to
 * the nearest E4M3 (even on ties), and keeps the one with the smallest
 * weighted error. */
#include <math.h>

#include "format/dequant.h"
#include "quant/quantize.h"
#include "quant/quantize_internal.h"

uint8_t f32_to_fp8_e4m3(float x)
{
    if (isnan(x))
        return 0x7F;
    const uint8_t sign = signbit(x) ? 0x80 : 0x00;
    const float a = fabsf(x);
    if (a >= 448.0f)
        return sign | 0x7E;
    if (a < 0.015625f) /* below 2^-6: subnormals m * 2^-9 (m = 8 is 2^-6, code 0x08) */
        return (uint8_t)(sign | qz_round(a * 512.0f));
    int e;
    const float f = frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1) */
    int exp = e - 1, man = qz_round((2.0f * f - 1.0f) * 8.0f);
    if (man == 8) {
        exp++;
        man = 0;
    }
    const int code = ((exp + 7) << 3) | man;
    return (uint8_t)(sign | (code > 0x7E ? 0x7E : code));
}

static float block_error(const float *x, const float *w, int e8, uint8_t *q)
{
    const float s = dequant_e8m0((uint8_t)e8), is = 1.0f / s;
    float err = 0.0f;
    for (int i = 0; i < 32; i++) {
        q[i] = f32_to_fp8_e4m3(x[i] * is);
        const float diff = x[i] - fp8_e4m3_to_f32(q[i]) * s;
        err += w[i] * diff * diff;
    }
    return err;
}

void quantize_mxfp8(const float *x, uint8_t *y, int64_t nb, const float *w)
{
    for (int64_t i = 0; i < nb; i++, x += 32, y += 33) {
        const float *bw = qz_block_weights(w ? w + 32 * i : NULL, 32);
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        if (amax == 0.0f) {
            y[0] = 127;
            memset(y + 1, 0, 32);
            continue;
        }
        /* smallest e with amax / 2^(e-127) <= 448 */
        int ex;
        frexpf(amax / 448.0f, &ex); /* amax / 448 = f * 2^ex, f in [0.5, 1) */
        const int e0 = 127 + ex;
        uint8_t q[32], tq[32];
        int best_e = -1;
        float best = INFINITY;
        for (int e8 = e0 - 1; e8 <= e0 + 1; e8++) {
            if (e8 < 0 || e8 > 254)
                continue;
            const float e = block_error(x, bw, e8, tq);
            if (e < best) {
                best = e;
                best_e = e8;
                memcpy(q, tq, 32);
            }
        }
        y[0] = (uint8_t)best_e;
        memcpy(y + 1, q, 32);
    }
}
