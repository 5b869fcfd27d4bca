/* NVFP4 (ggml type 40): 64 values in 36 bytes, four sub-blocks of 16 with
 * an unsigned-E4M3 scale byte each and E2M1 nibbles (dequant_fp.c has the
 * layout). ggml's GGUF block has no per-tensor second scale, so a
 * sub-block's scale is the UE4M3 byte alone: 2^-10 .. 224 in ggml's halved
 * convention, with 3 mantissa bits.
 *
 * For a fixed scale each value's best nibble is simply the nearest E2M1
 * level, so the search is over the scale byte: the code nearest to
 * amax / 12 (the largest level 6, doubled) and three codes either side,
 * the one with the smallest weighted error wins. */
#include <math.h>

#include "format/dequant.h"
#include "quant/quantize.h"
#include "quant/quantize_internal.h"

/* Decoded scale of every usable code 0..126 (0x7F reads as 0), ascending. */
static float ue4m3_table[127];
static int ue4m3_ready;

static void ue4m3_init(void)
{
    /* idempotent and the same bytes from every thread: no lock needed */
    if (__atomic_load_n(&ue4m3_ready, __ATOMIC_ACQUIRE))
        return;
    for (int c = 0; c < 127; c++)
        ue4m3_table[c] = dequant_ue4m3_half((uint8_t)c);
    __atomic_store_n(&ue4m3_ready, 1, __ATOMIC_RELEASE);
}

/* The nibble of x for scale d: nearest doubled E2M1 level of |x| / d
 * (0 1 2 3 4 6 8 12; halfway points 0.5 1.5 2.5 3.5 5 7 10), sign in bit 3. */
static int e2m1_nibble(float x, float id)
{
    const float v = fabsf(x) * id;
    const int idx = (v > 0.5f) + (v > 1.5f) + (v > 2.5f) + (v > 3.5f) + (v > 5.0f) + (v > 7.0f) +
                    (v > 10.0f);
    return idx == 0 ? 0 : (x < 0.0f ? 8 : 0) | idx;
}

static const int8_t e2m1_doubled[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

static float sub_error(const float *x, const float *w, int code, uint8_t *nib)
{
    const float d = ue4m3_table[code], id = d > 0.0f ? 1.0f / d : 0.0f;
    float e = 0.0f;
    for (int i = 0; i < 16; i++) {
        const int q = d > 0.0f ? e2m1_nibble(x[i], id) : 0;
        nib[i] = (uint8_t)q;
        const float diff = x[i] - (float)e2m1_doubled[q] * d;
        e += w[i] * diff * diff;
    }
    return e;
}

/* The code whose scale is nearest target (codes ascend with their value). */
static int nearest_code(float target)
{
    int lo = 0, hi = 126;
    while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if (ue4m3_table[mid] < target)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo > 0 && target - ue4m3_table[lo - 1] < ue4m3_table[lo] - target)
        lo--;
    return lo;
}

void quantize_nvfp4(const float *x, uint8_t *y, int64_t nb, const float *w)
{
    ue4m3_init();
    for (int64_t i = 0; i < nb; i++, x += 64, y += 36) {
        const float *bw = qz_block_weights(w ? w + 64 * i : NULL, 64);
        for (int s = 0; s < 4; s++) {
            const float *xs = x + 16 * s, *ws = bw + 16 * s;
            float amax = 0.0f;
            for (int j = 0; j < 16; j++)
                amax = fabsf(xs[j]) > amax ? fabsf(xs[j]) : amax;
            uint8_t nib[16], tn[16];
            int best_code = 0;
            float best = sub_error(xs, ws, 0, nib);
            if (amax > 0.0f) {
                const int c0 = nearest_code(amax / 12.0f);
                for (int c = c0 - 3; c <= c0 + 3; c++) {
                    if (c < 1 || c > 126)
                        continue;
                    const float e = sub_error(xs, ws, c, tn);
                    if (e < best) {
                        best = e;
                        best_code = c;
                        memcpy(nib, tn, 16);
                    }
                }
            }
            y[s] = (uint8_t)best_code;
            for (int j = 0; j < 8; j++)
                y[4 + 8 * s + j] = (uint8_t)(nib[j] | (nib[j + 8] << 4));
        }
    }
}
