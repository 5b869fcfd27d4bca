/* Element-type changes for whole tensors: anything dequantizable to f32,
 * and f32 to the plain float types a checkpoint stores. Bit-exact where the
 * value is representable (bf16 -> f32 -> bf16 returns the same bits). */
#ifndef MEMRA_FORMAT_TENSOR_CAST_H
#define MEMRA_FORMAT_TENSOR_CAST_H

#include <stdint.h>

#include "core/err.h"
#include "format/dtype.h"

/* n elements of type t at src into dst (n a whole number of blocks). */
int cast_to_f32(dtype t, const void *src, float *dst, int64_t n, memra_err *err);
/* n f32 values into type t (F32, F16 or BF16, round to nearest even). */
int cast_from_f32(const float *src, dtype t, void *dst, int64_t n, memra_err *err);
/* Whether cast_from_f32 can write t. */
int cast_is_float_target(dtype t);

#endif
