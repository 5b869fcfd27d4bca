/* Launchers for the matrix products: out[n][rows] = x[n][cols] . W^T (+ bias)
 * for a weight in any device format (kernels/weight_layout.h), the fused
 * forms (several matrices of one format read by one launch, as a QKV
 * projection; two matrices paired row by row with act(a) * b written, as
 * an FFN's gate and up), and the grouped form the routed experts use,
 * where each row of x meets the weight of its own expert.
 *
 * Batch invariance: each output value is one warp's dot product of its
 * weight row with one input row. Lane l takes units l, l + 32, ... in
 * ascending order (kernels/weight_decode.cuh), each unit's pieces in
 * order, each piece's elements in order; then a fixed butterfly. How many
 * rows a warp takes (rows_per_warp), how many tokens a block takes, how
 * many units a lane has in flight, how many groups of rows a block takes
 * in turn, how many blocks an SM holds (the float formats' one-row
 * instance has a build held to 8, kernels/matmul_single.cu), whether the
 * units come to the lane from registers or through shared memory (the
 * quant formats' single-token kernel streams them there,
 * kernels/matmul_single.cu), and which matrices share a launch change
 * none of that, so out[t][r] is bit-identical for a batch of 1 and of 64,
 * fused or not. */
#ifndef MEMRA_KERNELS_MATMUL_CUH
#define MEMRA_KERNELS_MATMUL_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A weight matrix in device memory. */
typedef struct {
    int fmt;          /* cw_format */
    const void *data; /* [rows][stride] bytes, 16-byte aligned */
    size_t stride;    /* bytes per row (cw_row_stride) */
    size_t scale_off; /* cw_scale_offset */
    int64_t rows, cols;
} cu_matrix;

enum { CU_MV_MAX_W = 3 };

typedef enum {
    CU_MV_STORE = 0,     /* out[i][t][r] = x[t] . W_i[r] (+ bias_i[r]) */
    CU_MV_GLU_SILU = 1,  /* n_w == 2: out[0][t][r] = silu(x[t] . W_0[r]) * (x[t] . W_1[r]) */
    CU_MV_GLU_GELU = 2,  /* the same with GELU (tanh form) */
} cu_mv_mode;

/* One launch over n_w matrices of one format and one width. */
typedef struct {
    const cu_matrix *w[CU_MV_MAX_W];
    const float *bias[CU_MV_MAX_W]; /* NULL: none */
    float *out[CU_MV_MAX_W];        /* [n][w[i]->rows]; GLU: out[0] only */
    int n_w;
    cu_mv_mode mode;
    const float *x;                 /* [n][cols] */
    const void *xbf;                /* x rounded to bf16 by the op that made it, or NULL:
                                       the decode GEMM makes its own copy where it reads one */
    void *out_bf;                   /* GLU on the decode GEMM: NULL, or [n][rows] bf16 that
                                       take out[0] rounded to nearest even as well */
    int n;
    int rows_per_warp;              /* 1, 2 or 4; 0: the launcher's choice */
    int sm_count;                   /* the device's, for that choice; 0: unknown */
} cu_mv_job;

/* Whether w[0..n_w) can share one launch (same format and width; GLU: the
 * same shape, no bias). */
int cu_mv_job_ok(const cu_mv_job *j);
cudaError_t launch_matvec(const cu_mv_job *j, cudaStream_t stream);

/* out[t][r] = x[t] . W[r] (+ bias[r] when bias is not NULL), t < n. x rows are
 * cols floats apart. */
cudaError_t launch_matmul(const cu_matrix *w, const float *bias, const float *x, int n, float *out,
                          cudaStream_t stream);

/* Grouped: for p < n_pairs, out[p][r] = x[p / in_div] . E_e[r] with
 * e = ids[p], E_e the expert whose row data is experts[e] (a device array
 * of pointers; every expert shaped and formatted as *w, whose data is
 * ignored). */
cudaError_t launch_matmul_grouped(const cu_matrix *w, const void *const *experts,
                                  const int32_t *ids, int in_div, const float *x, int n_pairs,
                                  float *out, cudaStream_t stream);

/* The grouped form's gate and up of one FFN in one launch: out[p][r] =
 * act(x_p . G_e[r]) * (x_p . U_e[r]), act SiLU (act 0) or GELU-tanh (1),
 * with G and U (device arrays of expert pointers, every expert shaped and
 * formatted as *w) read in one pass; the bytes of launch_matmul_grouped
 * on each and the GLU after them. */
cudaError_t launch_matmul_grouped_glu(const cu_matrix *w, const void *const *gate,
                                      const void *const *up, const int32_t *ids, int in_div,
                                      const float *x, int n_pairs, int act, float *out,
                                      cudaStream_t stream);

/* The grouped form's down projection and the experts' combine in one
 * launch, for n_pairs / n_used tokens of n_used choices each (pair p of
 * token p / n_used, its input row x[p]): y[p][r] = x[p] . E_e[r] (as
 * launch_matmul_grouped with in_div 1), then out[t][r] = the sum over
 * choices j in order of y[t * n_used + j][r] * wts[t * n_used + j], added
 * into 0 (moe_combine's bytes). counters: at least
 * matmul_grouped_combine_counters(rows, tokens) zeroed unsigneds, left
 * zeroed. */
size_t matmul_grouped_combine_counters(int64_t rows, int n_tokens);
cudaError_t launch_matmul_grouped_combine(const cu_matrix *w, const void *const *experts,
                                          const int32_t *ids, const float *wts, int n_used,
                                          const float *x, int n_pairs, float *y,
                                          unsigned *counters, float *out, cudaStream_t stream);

/* Pairs a block of the grouped-tokens form computes one after another,
 * its weight rows held in L1 (the tile launch_moe_plan's chunks are cut
 * to). */
#define CU_MOE_TILE 8

/* Grouped over chunks of pairs of one expert (launch_moe_plan): for
 * sorted position j of chunk k < *n_chunks (a device int; max_chunks
 * bounds it), out[out_idx ? out_idx[j] : j][r] = xs[j] . E_e[r], e the
 * chunk's expert. The same bits as launch_matmul_grouped's for each pair;
 * each weight row is read from memory once a chunk. Both stage x in
 * shared memory for the quant formats. */
cudaError_t launch_matmul_grouped_tokens(const cu_matrix *w, const void *const *experts,
                                         const int32_t *chunks, const int32_t *n_chunks,
                                         int max_chunks, const float *xs, const int32_t *out_idx,
                                         float *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
