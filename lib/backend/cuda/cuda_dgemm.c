/* Decode projections: a job (kernels/matmul.cuh) goes to the decode GEMM
 * (kernels/decode_gemm.cuh: the weights, decoded to bf16 where they are
 * quantized, on the tensor cores, x rounded to bf16) when the device has
 * bf16 tensor cores and tune.dgemm is on (or the step is a short prompt
 * chunk: cuda_chunk_on_dgemm), else to the f32 mat-vec. In a decode step
 * the choice depends on the weights' format and width and the device,
 * never on the number of rows, so batched decode keeps plain decode's
 * bytes (DESIGN.md, numerics contract). The GEMM's column
 * splits need a partial-sum scratch and per-tile counters, and from some
 * token count on it wants a bf16 copy of x: made here. */
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "kernels/decode_gemm.cuh"

/* (one row stays on the mat-vec, which reads one row's weights faster;
 * measured: docs/decisions/0030-short-prompt-chunks.md) */
int cuda_chunk_on_dgemm(const cuda_backend *cb, const cu_matrix *w, int n)
{
    if (!cb->tune.gemm || !cb->step.active || !cb->step.prefill || n < 2 || !cu_dg_matrix_ok(w))
        return 0;
    return n < cb->tune.gemm_min_rows || (w->fmt != CW_BF16 && n <= cb->tune.dgemm_chunk_max);
}

/* An engine that chose the decode GEMM (plan_decode) runs every step's
 * projections there; one that keeps the f32 mat-vec for its decode steps
 * still gives it the prompt chunks cuda_chunk_on_dgemm names. A verify
 * step is a decode step by then (engine.c), so it keeps the mat-vec's
 * bytes. */
int cuda_mv_uses_dgemm(const cuda_backend *cb, const cu_mv_job *j)
{
    return (cb->tune.dgemm > 0 || cuda_chunk_on_dgemm(cb, j->w[0], j->n)) && cu_dg_job_ok(j);
}

/* At least n zeroed counters, grown (never inside a capture: that gives
 * the capture up and the step runs again eagerly). The decode GEMM's and
 * decode attention's blocks count on them and leave them zeroed; each
 * kernel touches them only after waiting for the one before
 * (kernels/launch.cuh), so one set serves every launch. */
unsigned *cuda_counters(cuda_backend *cb, size_t n)
{
    if (n <= cb->dg_counters_cap)
        return cb->dg_counters;
    if (cuda_graph_capturing(cb)) {
        cuda_graph_spoil(cb);
        return NULL;
    }
    cb->mem_epoch++; /* graphs hold the old address */
    if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
        return NULL;
    cudaFree(cb->dg_counters);
    cb->dg_counters = NULL;
    cb->dg_counters_cap = 0;
    size_t want = n + n / 2;
    if (cuda_alloc(cb, (void **)&cb->dg_counters, want * sizeof(unsigned),
                   "the decode kernels' counters", 1, NULL) != 0 ||
        CU_OK(cb, cudaMemsetAsync(cb->dg_counters, 0, want * sizeof(unsigned), cb->stream)))
        return NULL;
    cb->dg_counters_cap = want;
    return cb->dg_counters;
}

void cuda_mv_run(cuda_backend *cb, const cu_mv_job *j)
{
    if (cb->failed)
        return;
    if (!cuda_mv_uses_dgemm(cb, j)) {
        CU_OK(cb, launch_matvec(j, cb->stream));
        return;
    }
    const int bps = cb->tune.dgemm_blocks_per_sm;
    /* One scratch: the partial sums, then (16-byte aligned) x's bf16 copy,
     * unless the op that made x gave one (j->xbf: the same bytes), which
     * the launch reads only at the sizes that read a copy. */
    cu_mv_job jx = *j;
    if (!cu_dg_x_bytes(j))
        jx.xbf = NULL;
    j = &jx;
    const size_t np = cu_dg_partial_floats(j, bps), nc = cu_dg_counters(j, bps);
    const size_t part_bytes = (np * sizeof(float) + 15) / 16 * 16,
                 nx = j->xbf ? 0 : cu_dg_x_bytes(j);
    unsigned char *scr = NULL;
    unsigned *cnt = NULL;
    if (part_bytes + nx) {
        scr = cuda_scratch(cb, SCR_DG_PARTIALS, part_bytes + nx,
                           "the decode GEMM's partial sums and bf16 x");
        if (!scr)
            return; /* failed (recorded) or a capture given up */
    }
    if (nc) {
        cnt = cuda_counters(cb, nc);
        if (!cnt)
            return; /* failed (recorded) or a capture given up */
    }
    CU_OK(cb, launch_decode_gemm(j, bps, np ? (float *)scr : NULL, cnt, nx ? scr + part_bytes : NULL,
                                 cb->stream));
}

void cuda_dgemm_free(cuda_backend *cb)
{
    cudaFree(cb->dg_counters);
    cb->dg_counters = NULL;
    cb->dg_counters_cap = 0;
}
