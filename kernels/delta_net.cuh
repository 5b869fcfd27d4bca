/* The gated DeltaNet mixer (backend.h, bk_delta) on the device, in two
 * launches: the causal conv + SiLU over q | k | v, then the gated delta
 * rule with the gated RMSNorm. Rows of one sequence are consecutive in a
 * step and run in order inside one block; rows of different sequences
 * never meet, so a row's bytes do not depend on the rest of the step.
 * Each sequence's state is a slot of the state pool (kv_cache's layout:
 * the conv window [conv_k - 1][conv_dim], then S [n_v][k_dim][v_dim]); a
 * row at position 0 starts from zero. The arithmetic is the CPU
 * reference's, in its order (kernels/dev_common.cuh), except for a prompt
 * chunk given scratch for the chunked rule (kernels/delta_chunk.cuh),
 * whose rounding differs from the reference's. */
#ifndef MEMRA_KERNELS_DELTA_NET_CUH
#define MEMRA_KERNELS_DELTA_NET_CUH

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int n;                     /* rows */
    const int32_t *pos;        /* [n] positions */
    const int32_t *slot;       /* [n] state slots (rows of a sequence share one) */
    const int32_t *save;       /* [n] the slot that keeps the state after the row (a
                                * checkpoint's), -1: none; NULL: no row's */
    float *state;              /* the pool: [slots][state_floats] */
    size_t state_floats, state_off; /* per slot; this layer's start in a slot */
    int n_k, n_v, k_dim, v_dim, conv_k;
    int tiled;                 /* value head h reads key head h % n_k, else h / (n_v / n_k) */
    int a_is_log;              /* a holds A_log, else -exp(A_log) */
    const float *conv_w;       /* [conv_dim][conv_k] */
    const float *dt_bias, *a;  /* [n_v] */
    const float *norm;         /* [v_dim] */
    float eps;
    const float *qkv;          /* [n][conv_dim] */
    const float *z;            /* [n][n_v * v_dim] */
    const float *beta, *alpha; /* [n][n_v] */
    float *conv_out;           /* [n][conv_dim] scratch */
    float *out;                /* [n][n_v * v_dim] */
    /* NULL: the rule row after row; else delta_chunk_floats of scratch,
     * and the rule runs in the chunked form (no row may have a save) */
    float *chunk;
    int n_runs;                /* with chunk: the sequences the rows hold */
} cu_delta;

/* Whether the rule kernel has an instance for this key head size. */
int delta_net_supports(int k_dim, int v_dim);
cudaError_t launch_delta_net(const cu_delta *p, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
