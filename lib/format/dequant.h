/* Reference dequantization to f32, bit-exact with the ggml definitions.
 *
 * Each block decoder below follows the ggml block layout byte for byte and
 * evaluates the same float expressions in the same order (for example
 * Q6_K's (d * scale) * q, Q2_K's (d * sc) * q - dmin * m), so our f32
 * values are the ones ggml's reference dequantize_row_* produces. Blocks
 * are read from raw bytes (f16 fields little-endian, unaligned is fine),
 * so a pointer into an mmapped file can be passed as it is.
 *
 * This is the CPU reference: plain loops, no SIMD. Fast paths elsewhere
 * (mat-vec kernels) are checked against it. */
#ifndef MEMRA_FORMAT_DEQUANT_H
#define MEMRA_FORMAT_DEQUANT_H

#include <stdint.h>

#include "core/err.h"
#include "format/dtype.h"

/* Dequantize n elements of type t (n a whole number of blocks) from src to
 * dst. Returns 0, or -1 with a message naming the type when t has no
 * decoder or n is not a multiple of its block size. Supported: F32, F16,
 * BF16, F64, I8, I16, I32, I64, F8_E4M3, F8_E5M2, Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K, IQ4_NL, IQ4_XS, MXFP4, NVFP4,
 * MXFP8. */
int dequant_row(dtype t, const void *src, float *dst, int64_t n, memra_err *err);
/* Whether dequant_row decodes type t. */
int dequant_supported(dtype t);

/* ---- per-type decoders: nb whole blocks from src to dst ---- */

void dequant_q4_0(const uint8_t *src, float *dst, int64_t nb);   /* 32 in 18 bytes */
void dequant_q4_1(const uint8_t *src, float *dst, int64_t nb);   /* 32 in 20 */
void dequant_q5_0(const uint8_t *src, float *dst, int64_t nb);   /* 32 in 22 */
void dequant_q5_1(const uint8_t *src, float *dst, int64_t nb);   /* 32 in 24 */
void dequant_q8_0(const uint8_t *src, float *dst, int64_t nb);   /* 32 in 34 */
void dequant_iq4_nl(const uint8_t *src, float *dst, int64_t nb); /* 32 in 18 */
void dequant_mxfp4(const uint8_t *src, float *dst, int64_t nb);  /* 32 in 17 */
void dequant_q2_k(const uint8_t *src, float *dst, int64_t nb);   /* 256 in 84 */
void dequant_q3_k(const uint8_t *src, float *dst, int64_t nb);   /* 256 in 110 */
void dequant_q4_k(const uint8_t *src, float *dst, int64_t nb);   /* 256 in 144 */
void dequant_q5_k(const uint8_t *src, float *dst, int64_t nb);   /* 256 in 176 */
void dequant_q6_k(const uint8_t *src, float *dst, int64_t nb);   /* 256 in 210 */
void dequant_q8_k(const uint8_t *src, float *dst, int64_t nb);   /* 256 in 292 */
void dequant_iq4_xs(const uint8_t *src, float *dst, int64_t nb); /* 256 in 136 */
void dequant_nvfp4(const uint8_t *src, float *dst, int64_t nb);  /* 64 in 36 */
void dequant_mxfp8(const uint8_t *src, float *dst, int64_t nb);  /* 32 in 33 */

/* The K-quant 6-bit scale/min unpacking shared by Q4_K and Q5_K: eight
 * (scale, min) pairs packed in 12 bytes. Pairs 0..3 are the low 6 bits of
 * bytes 0..3 (scales) and 4..7 (mins); pairs 4..7 take their low 4 bits
 * from the nibbles of bytes 8..11 and their top 2 bits from the top bits
 * of bytes 0..3 (scales) and 4..7 (mins). */
void dequant_k4_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m);

/* The 16 IQ4_NL levels, shared with IQ4_XS. */
extern const int8_t dequant_iq4nl_values[16];

/* The E8M0 block exponent of MXFP4 as ggml applies it: 2^(e-127) halved,
 * because ggml's e2m1 value table is doubled to stay integral. e = 0 and 1
 * give the subnormals 2^-128 and 2^-127; 255 gives 2^127 (not NaN). */
float dequant_e8m0_half(uint8_t e);

/* NVFP4's sub-block scale as ggml applies it: the byte as an unsigned E4M3
 * (bias 7, bit 7 ignored), halved for the doubled E2M1 table; 0x00 and 0x7F
 * read as 0. Largest: 0x7E = 448 / 2 = 224 (0xFF reads as 240). */
float dequant_ue4m3_half(uint8_t x);
/* MXFP8's block scale: 2^(e-127), e = 0 the subnormal 2^-127, 255 NaN. */
float dequant_e8m0(uint8_t e);

/* FP8 to f32 (safetensors F8_E4M3 is the "fn" variant: no infinities,
 * S.1111.111 is NaN; F8_E5M2 follows IEEE with infinities). */
float fp8_e4m3_to_f32(uint8_t x);
float fp8_e5m2_to_f32(uint8_t x);

#endif
