#include "format/tensor_cast.h"

#include <string.h>

#include "format/dequant.h"
#include "numerics/half.h"

int cast_to_f32(dtype t, const void *src, float *dst, int64_t n, memra_err *err)
{
    return dequant_row(t, src, dst, n, err);
}

int cast_is_float_target(dtype t) { return t == DT_F32 || t == DT_F16 || t == DT_BF16; }

int cast_from_f32(const float *src, dtype t, void *dst, int64_t n, memra_err *err)
{
    switch (t) {
    case DT_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        return 0;
    case DT_F16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = f32_to_fp16(src[i]);
        return 0;
    }
    case DT_BF16: {
        uint16_t *d = dst;
        for (int64_t i = 0; i < n; i++)
            d[i] = f32_to_bf16(src[i]);
        return 0;
    }
    default: {
        const dtype_info *info = dtype_get(t);
        return memra_fail(err, "cannot write %s tensors (F32, F16 and BF16 only)",
                          info ? info->name : "unknown");
    }
    }
}
