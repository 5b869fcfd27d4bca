/* The block-scaled low-precision float formats other than MXFP4 (which
 * dequant.c keeps beside the other 32-element formats):
 *
 *   NVFP4 (ggml type 40) 64 elements in 36 bytes: four UE4M3 scale bytes,
 *         one per 16-element sub-block, then 32 bytes of E2M1 nibbles.
 *         Sub-block s uses bytes 4 + 8s .. 4 + 8s + 7; byte j holds element
 *         16s + j in its low nibble and 16s + 8 + j in its high nibble.
 *   MXFP8 (memra type 2000, OCP MX FP8 E4M3) 32 elements in 33 bytes: one
 *         E8M0 exponent byte, then the 32 E4M3 ("fn") bytes in order.
 *
 * The NVFP4 arithmetic is ggml's: the E2M1 nibble indexes the doubled table
 * shared with MXFP4 and the scale decoder halves to compensate, so every
 * value is table * scale with both factors exact (the product is exact). */
#include <math.h>
#include <string.h>

#include "format/dequant.h"

/* E2M1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 -> 0..12), sign in bit 3. */
static const int8_t e2m1_doubled[16] = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};

/* ggml reads the scale byte as an unsigned E4M3 (bias 7, no sign: bit 7 is
 * ignored except that 0x7F, the E4M3 NaN, reads as 0 like 0x00). */
float dequant_ue4m3_half(uint8_t x)
{
    if (x == 0 || x == 0x7F)
        return 0.0f;
    int e = (x >> 3) & 0xF, m = x & 7;
    float raw = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return raw * 0.5f;
}

/* OCP E8M0: 2^(e-127); e = 0 is the subnormal 2^-127, 255 is NaN. */
float dequant_e8m0(uint8_t e)
{
    uint32_t bits = e == 255 ? 0x7FC00000u : e == 0 ? 0x00400000u : (uint32_t)e << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

void dequant_nvfp4(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 36) {
        for (int s = 0; s < 4; s++, y += 16) {
            const float d = dequant_ue4m3_half(b[s]);
            const uint8_t *qs = b + 4 + 8 * s;
            for (int j = 0; j < 8; j++) {
                y[j] = e2m1_doubled[qs[j] & 0x0F] * d;
                y[j + 8] = e2m1_doubled[qs[j] >> 4] * d;
            }
        }
    }
}

void dequant_mxfp8(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 33, y += 32) {
        const float d = dequant_e8m0(b[0]);
        for (int j = 0; j < 32; j++)
            y[j] = fp8_e4m3_to_f32(b[1 + j]) * d;
    }
}
