/* The KV cache's element codecs, one definition for the CPU and the GPU:
 * the CPU backend (lib/backend/cpu/cpu_attention.c) and the CUDA kernels
 * (kernels/attention.cu) both store and load K/V through these, so a row
 * stored from the same f32 values has the same bytes on both backends.
 *
 *   f32   4 bytes per value, as is
 *   f16   IEEE binary16, rounded to nearest even (subnormals, overflow to
 *         inf, NaN kept a quiet NaN): lib/numerics/half.h
 *   bf16  the top 16 bits of the f32, rounded to nearest even (NaN kept):
 *         lib/numerics/half.h
 *   q8_0  ggml's block of 32: an f16 scale d then 32 int8 q, value = q * d;
 *         quantized as ggml's quantize_row_q8_0_ref: d = amax / 127,
 *         q = roundf(x * (1 / d)); a row's blocks run along the row (its
 *         kv_dim values, all heads), so kv_dim must be a multiple of 32.
 *
 * Loads of f16 / bf16 / q8_0 are exact conversions (q8_0 one f32 multiply,
 * as lib/format/dequant.c). */
#ifndef MEMRA_NUMERICS_KV_CODEC_H
#define MEMRA_NUMERICS_KV_CODEC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/hd.h"
#include "numerics/half.h"

#define KV_Q8_0_BLOCK 32      /* values per q8_0 block */
#define KV_Q8_0_BYTES 34      /* bytes per q8_0 block: f16 d + 32 int8 */

/* The f16 / bf16 element codecs are numerics/half.h's, under the names the
 * KV code uses. */
MEMRA_HD uint16_t kvc_f32_to_f16(float f) { return f32_to_fp16(f); }
MEMRA_HD float kvc_f16_to_f32(uint16_t h) { return fp16_to_f32(h); }
MEMRA_HD uint16_t kvc_f32_to_bf16(float f) { return f32_to_bf16(f); }
MEMRA_HD float kvc_bf16_to_f32(uint16_t h) { return bf16_to_f32(h); }

MEMRA_HD uint16_t kvc_ld16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

MEMRA_HD void kvc_st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* The q8_0 scale of a block whose largest magnitude is amax, and its
 * reciprocal as ggml forms it (0 for an all-zero block). */
MEMRA_HD float kvc_q8_0_scale(float amax) { return HD_FDIV(amax, 127.0f); }
MEMRA_HD float kvc_q8_0_inv(float d) { return d != 0.0f ? HD_FDIV(1.0f, d) : 0.0f; }
MEMRA_HD int8_t kvc_q8_0_quant(float x, float id) { return (int8_t)roundf(HD_FMUL(x, id)); }

/* One q8_0 block of 32 values into 34 bytes. */
MEMRA_HD void kvc_q8_0_block(const float *x, uint8_t *out)
{
    float amax = 0.0f;
    for (int j = 0; j < KV_Q8_0_BLOCK; j++) {
        float v = fabsf(x[j]);
        amax = amax > v ? amax : v;
    }
    float d = kvc_q8_0_scale(amax), id = kvc_q8_0_inv(d);
    kvc_st16(out, kvc_f32_to_f16(d));
    for (int j = 0; j < KV_Q8_0_BLOCK; j++)
        out[2 + j] = (uint8_t)kvc_q8_0_quant(x[j], id);
}

/* Value e of a q8_0 row. */
MEMRA_HD float kvc_q8_0_get(const uint8_t *row, int64_t e)
{
    const uint8_t *b = row + (e / KV_Q8_0_BLOCK) * KV_Q8_0_BYTES;
    return HD_FMUL((float)(int8_t)b[2 + e % KV_Q8_0_BLOCK], kvc_f16_to_f32(kvc_ld16(b)));
}

#endif
