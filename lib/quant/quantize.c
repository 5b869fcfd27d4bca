/* quantize_row: input checks and the dispatch to the per-type quantizers. */
#include "quant/quantize.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>

typedef void (*quant_fn)(const float *, uint8_t *, int64_t, const float *);

static quant_fn quantizer(dtype t)
{
    switch (t) {
    case DT_Q8_0: return quantize_q8_0;
    case DT_Q4_0: return quantize_q4_0;
    case DT_Q4_K: return quantize_q4_k;
    case DT_Q5_K: return quantize_q5_k;
    case DT_Q6_K: return quantize_q6_k;
    case DT_NVFP4: return quantize_nvfp4;
    case DT_MXFP8: return quantize_mxfp8;
    default: return NULL;
    }
}

int quantize_supported(dtype t) { return quantizer(t) != NULL; }

int quantize_row(dtype t, const float *x, void *dst, int64_t n, const float *importance,
                 memra_err *err)
{
    const dtype_info *info = dtype_get((int)t);
    if (!info)
        return memra_fail(err, "quantize: unknown type id %d", (int)t);
    quant_fn fn = quantizer(t);
    if (!fn)
        return memra_fail(err, "quantize: no quantizer for type %s (Q8_0, Q4_0, Q4_K, Q5_K, "
                               "Q6_K, NVFP4 and MXFP8 have one)",
                          info->name);
    if (n < 0 || n % info->block_size != 0)
        return memra_fail(err, "quantize: %" PRId64 " values are not a whole number of %s blocks "
                               "of %d",
                          n, info->name, info->block_size);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return memra_fail(err, "quantize: value %" PRId64 " is %s", i,
                              isnan(x[i]) ? "NaN" : "infinite");
    for (int64_t i = 0; importance && i < n; i++)
        if (!isfinite(importance[i]) || importance[i] < 0.0f)
            return memra_fail(err, "quantize: importance %" PRId64 " is %g (must be finite and "
                                   ">= 0)",
                              i, (double)importance[i]);
    fn(x, dst, n / info->block_size, importance);
    return 0;
}
