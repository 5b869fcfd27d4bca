#include "numerics/half.h"

/* The codecs themselves are inline in half.h, shared with device code. */

void fp16_to_f32_row(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = fp16_to_f32(src[i]);
}

void f32_to_fp16_row(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = f32_to_fp16(src[i]);
}

void bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32(src[i]);
}

void f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = f32_to_bf16(src[i]);
}
