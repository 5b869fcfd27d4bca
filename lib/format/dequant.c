/* dequant_row's dispatch, the plain types, and the 32-element block
 * formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL, MXFP4). The 256-element
 * super-block formats live in dequant_kquant.c, NVFP4 and MXFP8 in
 * dequant_fp.c. */
#include "format/dequant.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "numerics/half.h"

static float rd_f16(const uint8_t *p) { return fp16_to_f32((uint16_t)(p[0] | (p[1] << 8))); }

/* The 16 IQ4_NL levels (also used by IQ4_XS): a non-uniform 4-bit grid. */
const int8_t dequant_iq4nl_values[16] = {
    -127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113,
};

/* FP4 E2M1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 -> 0..12), sign in
 * the top bit of the nibble; dequant_e8m0_half takes the factor 2 back. */
static const int8_t mxfp4_values[16] = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};

float dequant_e8m0_half(uint8_t e)
{
    /* 2^(e-128): e >= 2 is a normal float with biased exponent e-1; e = 0, 1
     * are the subnormals with the single mantissa bit 21 or 22. */
    uint32_t bits = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

float fp8_e4m3_to_f32(uint8_t x)
{
    float sign = (x & 0x80) ? -1.0f : 1.0f;
    int e = (x >> 3) & 0xF, m = x & 7;
    if (e == 15 && m == 7)
        return sign * NAN;
    if (e == 0)
        return sign * ldexpf((float)m, -9);
    return sign * ldexpf((float)(8 + m), e - 10);
}

/* E5M2 is binary16 with the low 8 mantissa bits cut off. */
float fp8_e5m2_to_f32(uint8_t x) { return fp16_to_f32((uint16_t)(x << 8)); }

void dequant_q4_0(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
        const float d = rd_f16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            const int x0 = (qs[j] & 0x0F) - 8, x1 = (qs[j] >> 4) - 8;
            y[j] = x0 * d;
            y[j + 16] = x1 * d;
        }
    }
}

void dequant_q4_1(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 20, y += 32) {
        const float d = rd_f16(b), m = rd_f16(b + 2);
        const uint8_t *qs = b + 4;
        for (int j = 0; j < 16; j++) {
            const int x0 = qs[j] & 0x0F, x1 = qs[j] >> 4;
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        }
    }
}

/* Q5: the fifth bit of element j is bit j of the 32-bit qh, so the low
 * nibbles (elements 0..15) use qh bits 0..15 and the high ones 16..31. */
static uint32_t rd_u32le(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void dequant_q5_0(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 22, y += 32) {
        const float d = rd_f16(b);
        const uint32_t qh = rd_u32le(b + 2);
        const uint8_t *qs = b + 6;
        for (int j = 0; j < 16; j++) {
            const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
            const int x0 = ((qs[j] & 0x0F) | h0) - 16, x1 = ((qs[j] >> 4) | h1) - 16;
            y[j] = x0 * d;
            y[j + 16] = x1 * d;
        }
    }
}

void dequant_q5_1(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 24, y += 32) {
        const float d = rd_f16(b), m = rd_f16(b + 2);
        const uint32_t qh = rd_u32le(b + 4);
        const uint8_t *qs = b + 8;
        for (int j = 0; j < 16; j++) {
            const int h0 = ((qh >> j) & 1) << 4, h1 = ((qh >> (j + 16)) & 1) << 4;
            const int x0 = (qs[j] & 0x0F) | h0, x1 = (qs[j] >> 4) | h1;
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        }
    }
}

void dequant_q8_0(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 34, y += 32) {
        const float d = rd_f16(b);
        for (int j = 0; j < 32; j++)
            y[j] = (int8_t)b[2 + j] * d;
    }
}

void dequant_iq4_nl(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 18, y += 32) {
        const float d = rd_f16(b);
        const uint8_t *qs = b + 2;
        for (int j = 0; j < 16; j++) {
            y[j] = d * dequant_iq4nl_values[qs[j] & 0x0F];
            y[j + 16] = d * dequant_iq4nl_values[qs[j] >> 4];
        }
    }
}

void dequant_mxfp4(const uint8_t *b, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, b += 17, y += 32) {
        const float d = dequant_e8m0_half(b[0]);
        const uint8_t *qs = b + 1;
        for (int j = 0; j < 16; j++) {
            y[j] = mxfp4_values[qs[j] & 0x0F] * d;
            y[j + 16] = mxfp4_values[qs[j] >> 4] * d;
        }
    }
}

/* Plain element types, read with memcpy since src may be unaligned. */
static void plain_row(dtype t, const uint8_t *p, float *y, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        switch (t) {
        case DT_F32: memcpy(&y[i], p + 4 * i, 4); break;
        case DT_F16: y[i] = rd_f16(p + 2 * i); break;
        case DT_BF16: y[i] = bf16_to_f32((uint16_t)(p[2 * i] | (p[2 * i + 1] << 8))); break;
        case DT_F64: { double v; memcpy(&v, p + 8 * i, 8); y[i] = (float)v; break; }
        case DT_I8: y[i] = (float)(int8_t)p[i]; break;
        case DT_I16: { int16_t v; memcpy(&v, p + 2 * i, 2); y[i] = (float)v; break; }
        case DT_I32: { int32_t v; memcpy(&v, p + 4 * i, 4); y[i] = (float)v; break; }
        case DT_I64: { int64_t v; memcpy(&v, p + 8 * i, 8); y[i] = (float)v; break; }
        case DT_F8_E4M3: y[i] = fp8_e4m3_to_f32(p[i]); break;
        case DT_F8_E5M2: y[i] = fp8_e5m2_to_f32(p[i]); break;
        default: return;
        }
    }
}

typedef void (*block_fn)(const uint8_t *, float *, int64_t);

static block_fn block_decoder(dtype t)
{
    switch (t) {
    case DT_Q4_0: return dequant_q4_0;
    case DT_Q4_1: return dequant_q4_1;
    case DT_Q5_0: return dequant_q5_0;
    case DT_Q5_1: return dequant_q5_1;
    case DT_Q8_0: return dequant_q8_0;
    case DT_IQ4_NL: return dequant_iq4_nl;
    case DT_MXFP4: return dequant_mxfp4;
    case DT_Q2_K: return dequant_q2_k;
    case DT_Q3_K: return dequant_q3_k;
    case DT_Q4_K: return dequant_q4_k;
    case DT_Q5_K: return dequant_q5_k;
    case DT_Q6_K: return dequant_q6_k;
    case DT_Q8_K: return dequant_q8_k;
    case DT_IQ4_XS: return dequant_iq4_xs;
    case DT_NVFP4: return dequant_nvfp4;
    case DT_MXFP8: return dequant_mxfp8;
    default: return NULL;
    }
}

static int is_plain(dtype t)
{
    switch (t) {
    case DT_F32: case DT_F16: case DT_BF16: case DT_F64: case DT_I8: case DT_I16: case DT_I32:
    case DT_I64: case DT_F8_E4M3: case DT_F8_E5M2:
        return 1;
    default:
        return 0;
    }
}

int dequant_supported(dtype t) { return is_plain(t) || block_decoder(t) != NULL; }

int dequant_row(dtype t, const void *src, float *dst, int64_t n, memra_err *err)
{
    const dtype_info *info = dtype_get((int)t);
    if (!info)
        return memra_fail(err, "dequantize: unknown type id %d", (int)t);
    if (!dequant_supported(t))
        return memra_fail(err, "dequantize: type %s is not supported", info->name);
    if (n < 0 || n % info->block_size != 0)
        return memra_fail(err, "dequantize: %" PRId64 " elements is not a whole number of %s blocks "
                               "of %d",
                          n, info->name, info->block_size);
    if (is_plain(t))
        plain_row(t, src, dst, n);
    else
        block_decoder(t)(src, dst, n / info->block_size);
    return 0;
}
