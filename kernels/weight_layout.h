/* How a weight matrix lies in device memory: the contract between the
 * host code that repacks a checkpoint tensor at load (lib/backend/cuda/
 * cuda_weights.c) and the kernels that read it (kernels/weight_decode.cuh).
 * Plain C, included by both.
 *
 * Every device row starts 16-byte aligned and its stride is a multiple of
 * 16, so kernels read rows with 16-byte vector loads. Formats whose blocks
 * already are multiples of 16 bytes (Q4_K 144, Q5_K 176) keep the ggml
 * block bytes unchanged. The others are split per row into a body of
 * 16-byte-aligned quant bytes and, after it, the blocks' scales:
 *
 *   F32, F16, BF16  the values as stored, the row zero-padded to 16 bytes
 *   Q8_0            [nb][32 int8]            then [nb] f16 d
 *   Q4_0            [nb][16 nibble bytes]    then [nb] f16 d
 *   Q6_K            [nb][ql 128, qh 64, scales 16] then [nb] f16 d
 *   NVFP4           [nb][32 nibble bytes]    then [nb][4] UE4M3 scale bytes
 *   MXFP8           [nb][32 E4M3 bytes]      then [nb] E8M0 exponent bytes
 *   Q4_K, Q5_K      the ggml blocks as they are
 *
 * The quant and scale bytes are copied unchanged, so the values a kernel
 * decodes are bit-identical to lib/format/dequant.c's. */
#ifndef MEMRA_KERNELS_WEIGHT_LAYOUT_H
#define MEMRA_KERNELS_WEIGHT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    CW_F32 = 0,
    CW_F16,
    CW_BF16,
    CW_Q8_0,
    CW_Q4_0,
    CW_Q4_K,
    CW_Q5_K,
    CW_Q6_K,
    CW_NVFP4,
    CW_MXFP8,
    CW_COUNT
} cw_format;

/* Elements per quant block (1 for the float formats). */
static inline int64_t cw_block_elems(cw_format f)
{
    switch (f) {
    case CW_Q8_0: case CW_Q4_0: case CW_MXFP8: return 32;
    case CW_NVFP4: return 64;
    case CW_Q4_K: case CW_Q5_K: case CW_Q6_K: return 256;
    default: return 1;
    }
}

/* Bytes of one block's body as the device stores it (the whole ggml block
 * for Q4_K / Q5_K; the block without its scales for the split formats;
 * the element size for float formats). */
static inline int64_t cw_body_bytes(cw_format f)
{
    switch (f) {
    case CW_F32: return 4;
    case CW_F16: case CW_BF16: return 2;
    case CW_Q8_0: return 32;
    case CW_Q4_0: return 16;
    case CW_Q4_K: return 144;
    case CW_Q5_K: return 176;
    case CW_Q6_K: return 208;
    case CW_NVFP4: case CW_MXFP8: return 32;
    default: return 0;
    }
}

/* Bytes of one block's scales in the scale area after the body (0 for the
 * formats that keep their blocks whole). */
static inline int64_t cw_scale_bytes(cw_format f)
{
    switch (f) {
    case CW_Q8_0: case CW_Q4_0: case CW_Q6_K: return 2; /* f16 d */
    case CW_NVFP4: return 4;                           /* four UE4M3 bytes */
    case CW_MXFP8: return 1;                           /* one E8M0 byte */
    default: return 0;
    }
}

/* Whether the block's scales move to the scale area after the body. */
static inline int cw_split_scale(cw_format f) { return cw_scale_bytes(f) > 0; }

/* Byte offset of the scale area inside a device row (split formats). */
static inline size_t cw_scale_offset(cw_format f, int64_t cols)
{
    return (size_t)(cols / cw_block_elems(f)) * (size_t)cw_body_bytes(f);
}

/* Bytes between device rows: body (+ scales), rounded up to 16. */
static inline size_t cw_row_stride(cw_format f, int64_t cols)
{
    size_t b = cw_scale_offset(f, cols);
    b += (size_t)(cols / cw_block_elems(f)) * (size_t)cw_scale_bytes(f);
    return (b + 15) & ~(size_t)15;
}

#endif
