/* Q8_0: 32 values in 34 bytes, an f16 scale d then 32 int8 quants;
 * y = q * d. Quants stay in [-127, 127]: ggml's SIMD dot products take
 * the absolute value of an int8, which -128 overflows. At 8 bits the
 * largest value is never worth clipping, so the search only looks at scales
 * near amax / 127 (and the least-squares refits), then the f16 rounding;
 * ggml's own rule, d = amax / 127, is among the final candidates. */
#include <math.h>

#include "quant/quantize.h"
#include "quant/quantize_internal.h"

void quantize_q8_0(const float *x, uint8_t *y, int64_t nb, const float *w)
{
    for (int64_t i = 0; i < nb; i++, x += 32, y += 34) {
        const float *bw = qz_block_weights(w ? w + 32 * i : NULL, 32);
        float e;
        const float s = qz_fit_symmetric(x, bw, 32, -127, 127, 2, &e);
        float amax = 0.0f;
        for (int j = 0; j < 32; j++)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        int8_t q[32];
        qz_put_f16(y, qz_f16_scale(x, bw, 32, s, amax / 127.0f, -127, 127, q));
        memcpy(y + 2, q, 32);
    }
}
