#include "format/dtype.h"

#include <stddef.h>
#include <strings.h>

#include "core/check.h"

/* Block sizes and byte sizes follow the ggml block structs; the sum of each
 * struct's fields is noted where it is not obvious. */
static const dtype_info table[] = {
    {DT_F32, "F32", "F32", 1, 4, 1},
    {DT_F16, "F16", "F16", 1, 2, 1},
    {DT_Q4_0, "Q4_0", NULL, 32, 18, 0},      /* d f16 + 16 nibble bytes */
    {DT_Q4_1, "Q4_1", NULL, 32, 20, 0},      /* d, m f16 + 16 */
    {DT_Q5_0, "Q5_0", NULL, 32, 22, 0},      /* d + qh[4] + 16 */
    {DT_Q5_1, "Q5_1", NULL, 32, 24, 0},      /* d, m + qh[4] + 16 */
    {DT_Q8_0, "Q8_0", NULL, 32, 34, 0},      /* d + 32 int8 */
    {DT_Q8_1, "Q8_1", NULL, 32, 36, 0},      /* d, s + 32 int8 */
    {DT_Q2_K, "Q2_K", NULL, 256, 84, 0},     /* scales[16] qs[64] d dmin */
    {DT_Q3_K, "Q3_K", NULL, 256, 110, 0},    /* hmask[32] qs[64] scales[12] d */
    {DT_Q4_K, "Q4_K", NULL, 256, 144, 0},    /* d dmin scales[12] qs[128] */
    {DT_Q5_K, "Q5_K", NULL, 256, 176, 0},    /* d dmin scales[12] qh[32] qs[128] */
    {DT_Q6_K, "Q6_K", NULL, 256, 210, 0},    /* ql[128] qh[64] scales[16] d */
    {DT_Q8_K, "Q8_K", NULL, 256, 292, 0},    /* d f32, qs[256], bsums i16[16] */
    {DT_IQ2_XXS, "IQ2_XXS", NULL, 256, 66, 0}, /* d + u16 qs[32] */
    {DT_IQ2_XS, "IQ2_XS", NULL, 256, 74, 0},   /* d + u16 qs[32] + scales[8] */
    {DT_IQ3_XXS, "IQ3_XXS", NULL, 256, 98, 0}, /* d + qs[96] */
    {DT_IQ1_S, "IQ1_S", NULL, 256, 50, 0},     /* d + qs[32] + u16 qh[8] */
    {DT_IQ4_NL, "IQ4_NL", NULL, 32, 18, 0},    /* d + qs[16] */
    {DT_IQ3_S, "IQ3_S", NULL, 256, 110, 0},    /* d qs[64] qh[8] signs[32] scales[4] */
    {DT_IQ2_S, "IQ2_S", NULL, 256, 82, 0},     /* d qs[64] qh[8] scales[8] */
    {DT_IQ4_XS, "IQ4_XS", NULL, 256, 136, 0},  /* d scales_h u16 scales_l[4] qs[128] */
    {DT_I8, "I8", "I8", 1, 1, 0},
    {DT_I16, "I16", "I16", 1, 2, 0},
    {DT_I32, "I32", "I32", 1, 4, 0},
    {DT_I64, "I64", "I64", 1, 8, 0},
    {DT_F64, "F64", "F64", 1, 8, 1},
    {DT_IQ1_M, "IQ1_M", NULL, 256, 56, 0},     /* qs[32] qh[16] scales[8] */
    {DT_BF16, "BF16", "BF16", 1, 2, 1},
    {DT_TQ1_0, "TQ1_0", NULL, 256, 54, 0},     /* qs[48] qh[4] d */
    {DT_TQ2_0, "TQ2_0", NULL, 256, 66, 0},     /* qs[64] d */
    {DT_MXFP4, "MXFP4", NULL, 32, 17, 0},      /* e8m0 exponent + qs[16] */
    {DT_NVFP4, "NVFP4", NULL, 64, 36, 0},      /* 4 ue4m3 scales + qs[32] */
    {DT_U8, "U8", "U8", 1, 1, 0},
    {DT_U16, "U16", "U16", 1, 2, 0},
    {DT_U32, "U32", "U32", 1, 4, 0},
    {DT_U64, "U64", "U64", 1, 8, 0},
    {DT_BOOL, "BOOL", "BOOL", 1, 1, 0},
    {DT_F8_E4M3, "F8_E4M3", "F8_E4M3", 1, 1, 1},
    {DT_F8_E5M2, "F8_E5M2", "F8_E5M2", 1, 1, 1},
    {DT_MXFP8, "MXFP8", NULL, 32, 33, 0},      /* e8m0 exponent + 32 e4m3 */
};

const dtype_info *dtype_get(int id)
{
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(table); i++)
        if ((int)table[i].id == id)
            return &table[i];
    return NULL;
}

dtype dtype_from_name(const char *name)
{
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(table); i++)
        if (!strcasecmp(table[i].name, name))
            return table[i].id;
    return DT_INVALID;
}

dtype dtype_from_st_name(const char *name)
{
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(table); i++)
        if (table[i].st_name && !strcasecmp(table[i].st_name, name))
            return table[i].id;
    return DT_INVALID;
}

int dtype_in_ggml(int id) { return id >= 0 && id < DT_GGML_COUNT && dtype_get(id) != NULL; }

int dtype_is_memra_ext(int id) { return id == DT_MXFP8; }

int dtype_in_gguf(int id) { return dtype_in_ggml(id) || dtype_is_memra_ext(id); }

int64_t dtype_row_bytes(dtype t, int64_t n_elements)
{
    const dtype_info *info = dtype_get(t);
    if (!info || n_elements < 0 || n_elements % info->block_size != 0)
        return -1;
    int64_t blocks = n_elements / info->block_size;
    if (blocks > INT64_MAX / info->type_size)
        return -1;
    return blocks * info->type_size;
}
