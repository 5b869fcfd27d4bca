/* 16-bit floats: IEEE binary16 (F16) and bfloat16 (BF16), to and from f32.
 *
 * Widening is exact. Narrowing rounds to nearest, ties to even, with
 * subnormals, overflow to infinity and NaN handled as IEEE 754 says; a NaN
 * stays a NaN (quieted), never becomes an infinity. These are the
 * conversions every GGUF/safetensors reader and writer in memra uses. */
#ifndef MEMRA_NUMERICS_HALF_H
#define MEMRA_NUMERICS_HALF_H

#include <stdint.h>

float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

/* Rows of n values. */
void fp16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void f32_to_fp16_row(const float *src, uint16_t *dst, int64_t n);
void bf16_to_f32_row(const uint16_t *src, float *dst, int64_t n);
void f32_to_bf16_row(const float *src, uint16_t *dst, int64_t n);

#endif
