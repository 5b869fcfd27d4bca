/* Decode projections on the tensor cores: the jobs of kernels/matmul.cuh
 * (cu_mv_job: one to three matrices of one width, a bias per matrix, or
 * gate and up paired with act(gate) * up written), computed with x
 * rounded to bf16 and f32 accumulation (mma.sync m16n8k16 on the tensor
 * cores, kernels/mma.cuh). BF16 weights as they are; every quant format
 * decoded in the block with the CPU's arithmetic and rounded to bf16
 * (docs/decisions/0017-quantized-decode-gemm.md). Not F32 or F16.
 *
 * Why: the mat-vec keeps x in f32, so a batch of 64 tokens costs 64 f32
 * FMAs per weight element and the L1 traffic of x: about 100 ms a step for
 * an 8B model. On the tensor cores the same step is bound by reading the
 * weights once (docs/decisions/0009-decode-gemm.md).
 *
 * Batch invariance: a block takes 128 weight rows (in GLU mode 64 rows of
 * gate and the same 64 of up), a split of the columns, and up to 64 tokens
 * (grid.y takes the next 64). Each output value is summed as: over the
 * block's column split, 64 columns at a time in ascending order, four
 * 16-column mma steps each, into one f32 accumulator (whether x was
 * rounded by the blocks or by the launch's pre-pass: the same values); then the splits' sums
 * added in ascending split order (by the last block of the row tile to
 * finish, from a scratch of partial sums, whichever block that is). The
 * number of splits depends on the matrices' shapes and the SM count only,
 * never on the number of tokens, and a token's column of an mma depends on
 * that token's x alone, so out[t][r] has the same bits for a batch of 1
 * and of 64, at any position.
 *
 * On an sm_90a build the sizes from 17 tokens take the products from
 * wgmma instead of mma.sync (docs/decisions/0033-decode-gemm-wgmma.md):
 * the same sums in the same order, the same bits on the H200 (the kernel
 * check compares them). */
#ifndef MEMRA_KERNELS_DECODE_GEMM_CUH
#define MEMRA_KERNELS_DECODE_GEMM_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#include "kernels/matmul.cuh"

#ifdef __cplusplus
extern "C" {
#endif

/* Columns per step of the kernel: a matrix's width must be a multiple. */
enum { CU_DG_COLS_STEP = 64 };

/* Whether the job can run here: a format the kernel reads (BF16 or a quant
 * format; not F32 or F16), the width a positive
 * multiple of CU_DG_COLS_STEP, x 16-byte aligned (and what cu_mv_job_ok
 * asks). rows_per_warp is ignored. */
int cu_dg_job_ok(const cu_mv_job *j);
/* Whether a job of w alone can run here (cu_dg_job_ok's checks of the
 * matrix: its format, width, alignment and stride). */
int cu_dg_matrix_ok(const cu_matrix *w);
/* The column splits for the job's shapes: the count whose waves of
 * blocks_per_sm x SMs blocks (j->sm_count; 0: 16 SMs) take the fewest
 * column steps (the kernel is built for two blocks per SM). Never depends
 * on j->n. */
int cu_dg_splits(const cu_mv_job *j, int blocks_per_sm);
/* Scratch a launch needs: floats of partial sums and counters (zeroed
 * before the first launch; every launch leaves them zero). 0 and 0 with
 * one split. */
size_t cu_dg_partial_floats(const cu_mv_job *j, int blocks_per_sm);
size_t cu_dg_counters(const cu_mv_job *j, int blocks_per_sm);
/* The ldmatrix / mma.sync fragment layouts the kernel assumes
 * (kernels/mma.cuh), on one tile: d[16][24] = a b^T + c for a[16][16],
 * b[16][16] (rows: columns of B) and c[16][16] holding values exact in
 * bf16 (columns 16-23: the second 8 columns of b again, through
 * ldmatrix .x2, plus c's columns 8-15). Device pointers. */
cudaError_t launch_dg_mma_selftest(const float *a, const float *b, const float *c, float *d,
                                   cudaStream_t stream);
/* Bytes of the bf16 copy of x the launch wants for this job's token
 * count (a pre-pass rounds x into it once instead of every block rounding
 * its own f32 reads); 0: none, the blocks round x. The bytes of the
 * output are the same either way. BF16 weights take either (the launch
 * follows xbf); the other formats exactly this one (an xbf given or
 * missing against it is cudaErrorInvalidValue). */
size_t cu_dg_x_bytes(const cu_mv_job *j);
/* Whether the launch takes x either way for this job (BF16 weights at the
 * token counts of the mma.sync kernel): an xbf given or missing. Else
 * exactly as cu_dg_x_bytes says. */
int cu_dg_x_either(const cu_mv_job *j);
/* xbf: null, or cu_dg_x_bytes(j) bytes (16-byte aligned, n x cols bf16)
 * of scratch that the launch first fills with x rounded to bf16 (with
 * another size of job: n x cols x 2 bytes; any token count works). */
cudaError_t launch_decode_gemm(const cu_mv_job *j, int blocks_per_sm, float *partials,
                               unsigned *counters, void *xbf, cudaStream_t stream);

/* The same kernel over an MoE layer's (token, choice) pairs sorted by
 * expert (launch_moe_plan with tile `tile`): chunk k of
 * chunks[3k..3k+2] = (expert, first, count <= tile) takes rows
 * [first, first + count) of x through expert e's matrix w[e] (GLU modes:
 * w[e] and w2[e], act(gate) * up written), into row order[j] of out for
 * x's row j (order NULL: row j). Each block one chunk and one row tile,
 * the whole width in one split: a row's result depends on its own x
 * alone, as in launch_decode_gemm. */
enum { CU_DG_GROUP_ROWS = 64 }; /* the most rows a chunk may have */
typedef struct {
    const void *const *w, *const *w2; /* device arrays of each expert's data; w2 GLU only */
    cu_matrix shape;      /* format, rows, cols, stride, scale_off of every expert's matrix */
    int mode;             /* CU_MV_STORE, CU_MV_GLU_SILU, CU_MV_GLU_GELU */
    const float *x;       /* [pairs][cols], sorted by expert, 16-byte aligned */
    int pairs;
    const int32_t *chunks, *n_chunks; /* device: launch_moe_plan's */
    int max_chunks;       /* the grid's chunks (blocks past *n_chunks return) */
    int tile;             /* the most rows of a chunk, <= CU_DG_GROUP_ROWS: the kernel's
                           * size (which changes no row's bytes) */
    const int32_t *order; /* device [pairs] or NULL */
    float *out;           /* [pairs][rows] */
} cu_dg_grouped;
/* Whether the kernel takes these matrices (formats, widths, modes). */
int cu_dg_grouped_ok(const cu_dg_grouped *g);
/* xbf: pairs x cols x 2 bytes (16-byte aligned) of scratch for x's bf16
 * copy (used where the kernel's size reads one). */
cudaError_t launch_decode_gemm_grouped(const cu_dg_grouped *g, void *xbf, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
