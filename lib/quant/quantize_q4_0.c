/* Q4_0: 32 values in 18 bytes, an f16 scale d then 16 bytes of nibbles;
 * y = (nibble - 8) * d, byte j holding element j (low nibble) and j + 16
 * (high). The levels -8..7 are lopsided, so the search tries both the
 * negative side (the extreme value on -8, ggml's choice) and the positive
 * one (on 7), each stretched +-0.9 level around the side; ggml's own rule
 * (d = extreme / -8) is among the final candidates. */
#include <math.h>

#include "quant/quantize.h"
#include "quant/quantize_internal.h"

void quantize_q4_0(const float *x, uint8_t *y, int64_t nb, const float *w)
{
    for (int64_t i = 0; i < nb; i++, x += 32, y += 18) {
        const float *bw = qz_block_weights(w ? w + 32 * i : NULL, 32);
        float e;
        const float s = qz_fit_symmetric(x, bw, 32, -8, 7, 9, &e);
        float xm = 0.0f;
        for (int j = 0; j < 32; j++)
            xm = fabsf(x[j]) > fabsf(xm) ? x[j] : xm;
        int8_t q[32];
        qz_put_f16(y, qz_f16_scale(x, bw, 32, s, xm / -8.0f, -8, 7, q));
        for (int j = 0; j < 16; j++)
            y[2 + j] = (uint8_t)((q[j] + 8) | ((q[j + 16] + 8) << 4));
    }
}
