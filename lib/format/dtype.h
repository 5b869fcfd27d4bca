/* Tensor element types: one id space for every format memra reads.
 *
 * The ids below 1000 are the ggml tensor type ids, so a GGUF tensor's type
 * field is used as it is. Types that only safetensors has (FP8, unsigned
 * ints, bool) get ids from 1000 on and can never appear in a GGUF file.
 * Ids from 2000 on are memra's own GGUF block types (MXFP8): memra writes
 * and reads them in GGUF, other GGUF readers refuse them
 * (docs/decisions/0005-fp8-and-nvfp4-in-gguf.md).
 * Quantized types store `block_size` elements in `type_size` bytes. */
#ifndef MEMRA_FORMAT_DTYPE_H
#define MEMRA_FORMAT_DTYPE_H

#include <stdint.h>

typedef enum {
    DT_F32 = 0,
    DT_F16 = 1,
    DT_Q4_0 = 2,
    DT_Q4_1 = 3,
    /* 4 and 5 were Q4_2 and Q4_3, removed from ggml */
    DT_Q5_0 = 6,
    DT_Q5_1 = 7,
    DT_Q8_0 = 8,
    DT_Q8_1 = 9,
    DT_Q2_K = 10,
    DT_Q3_K = 11,
    DT_Q4_K = 12,
    DT_Q5_K = 13,
    DT_Q6_K = 14,
    DT_Q8_K = 15,
    DT_IQ2_XXS = 16,
    DT_IQ2_XS = 17,
    DT_IQ3_XXS = 18,
    DT_IQ1_S = 19,
    DT_IQ4_NL = 20,
    DT_IQ3_S = 21,
    DT_IQ2_S = 22,
    DT_IQ4_XS = 23,
    DT_I8 = 24,
    DT_I16 = 25,
    DT_I32 = 26,
    DT_I64 = 27,
    DT_F64 = 28,
    DT_IQ1_M = 29,
    DT_BF16 = 30,
    /* 31..33 were the Q4_0_4_4/4_8/8_8 repacks, removed from ggml */
    DT_TQ1_0 = 34,
    DT_TQ2_0 = 35,
    /* 36..38 were the IQ4_NL_4_4/4_8/8_8 repacks, removed from ggml */
    DT_MXFP4 = 39,
    DT_NVFP4 = 40,
    /* one past the last ggml id memra knows (ggml's 41 Q1_0 and 42 Q2_0 are
     * not read) */
    DT_GGML_COUNT = 41,

    /* safetensors-only */
    DT_U8 = 1000,
    DT_U16,
    DT_U32,
    DT_U64,
    DT_BOOL,
    DT_F8_E4M3,
    DT_F8_E5M2,

    /* memra GGUF extensions */
    DT_MXFP8 = 2000, /* OCP MX FP8: e8m0 block exponent + 32 e4m3 values */
    DT_INVALID = -1
} dtype;

typedef struct {
    dtype id;
    const char *name;      /* ggml spelling: "F32", "Q4_K", "BF16" ... */
    const char *st_name;   /* safetensors spelling, NULL when it has none */
    int block_size;        /* elements per block (1 for plain types) */
    int type_size;         /* bytes per block */
    int is_float;          /* a plain float type (F32/F16/BF16/F64/F8) */
} dtype_info;

/* NULL for an id that is not a known type (including the removed ggml ids). */
const dtype_info *dtype_get(int id);
/* Look up by ggml name (case-insensitive); DT_INVALID when unknown. */
dtype dtype_from_name(const char *name);
/* Look up by safetensors dtype string ("BF16", "F8_E4M3"); DT_INVALID when unknown. */
dtype dtype_from_st_name(const char *name);
/* Whether the id is a ggml type (readable by every GGUF reader). */
int dtype_in_ggml(int id);
/* Whether memra stores the id in GGUF: the ggml types and memra's own
 * block types (DT_MXFP8). */
int dtype_in_gguf(int id);
/* Whether the type is one of memra's GGUF extensions (not a ggml type). */
int dtype_is_memra_ext(int id);
/* Bytes for n_elements of the type; returns -1 when n_elements is not a whole
 * number of blocks or the size would overflow. */
int64_t dtype_row_bytes(dtype t, int64_t n_elements);

#endif
