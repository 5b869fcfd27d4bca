/* Quantization: f32 rows to the block formats memra writes (Q8_0, Q4_0,
 * Q4_K, Q5_K, Q6_K, NVFP4 and memra's MXFP8), byte for byte in the ggml
 * block layouts that lib/format/dequant*.c decode.
 *
 * Every quantizer searches its block parameters (scales, mins, the integer
 * sub-block scales of the K-quants) for the smallest squared error
 *
 *     sum over the row of  w[c] * (x[c] - y[c])^2
 *
 * where y is exactly what the reference dequantizer decodes the written
 * block to, and w[c] the importance of column c: the mean squared
 * activation entering that column (an importance matrix), or 1 for every
 * column when the caller has none. The algorithms are described in
 * docs/QUANTIZATION.md; quantize_*.c hold one block family each. */
#ifndef MEMRA_QUANT_QUANTIZE_H
#define MEMRA_QUANT_QUANTIZE_H

#include <stdint.h>

#include "core/err.h"
#include "format/dtype.h"

/* Quantize the n values of x (a whole number of t's blocks, one row or
 * several rows laid end to end) into dst, dtype_row_bytes(t, n) bytes.
 * importance: n weights (each >= 0 and finite; per column, repeated for
 * each row when x holds several), or NULL for plain squared error. A block
 * whose weights are all 0 is quantized with plain squared error. Returns -1
 * with a message for a type without a quantizer, n not a whole number of
 * blocks, or a value (or weight) that is not finite, naming the element. */
int quantize_row(dtype t, const float *x, void *dst, int64_t n, const float *importance,
                 memra_err *err);
/* Whether quantize_row writes type t. */
int quantize_supported(dtype t);

/* ---- per-type quantizers: nb whole blocks, w NULL or one weight per
 * value (already checked finite and >= 0) ---- */

void quantize_q8_0(const float *x, uint8_t *dst, int64_t nb, const float *w);
void quantize_q4_0(const float *x, uint8_t *dst, int64_t nb, const float *w);
void quantize_q4_k(const float *x, uint8_t *dst, int64_t nb, const float *w);
void quantize_q5_k(const float *x, uint8_t *dst, int64_t nb, const float *w);
void quantize_q6_k(const float *x, uint8_t *dst, int64_t nb, const float *w);
void quantize_nvfp4(const float *x, uint8_t *dst, int64_t nb, const float *w);
void quantize_mxfp8(const float *x, uint8_t *dst, int64_t nb, const float *w);

/* f32 to FP8 E4M3 ("fn": no infinities), round to nearest even,
 * saturating at +-448; NaN gives 0x7F. */
uint8_t f32_to_fp8_e4m3(float x);

#endif
