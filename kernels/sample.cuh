/* Launchers for sampling on the device: one token per row of logits, the
 * same token lib/engine/sampler.c picks on the host for the same logits,
 * parameters and stream position (the shared arithmetic is
 * lib/numerics/sample_math.h: Philox draws, exact fixed-point weights).
 *
 * Each stage that reads a whole row is spread over blocks of slices of it
 * (one block a row left one SM computing every weight: 2.5 ms a top-p
 * token at 248,320 ids on an H100), and the last block of a row to finish
 * a stage makes the row's decision (a counter a row in scratch; the
 * block that takes its last ticket reads what the others added). The
 * stages, in launch order:
 *   1. the scan: NaN / +inf, the argmax (highest logit, lowest id on
 *      ties) and the count of finite logits, per slice;
 *   2. one block a row: the slices folded, the mask's bans (-inf where
 *      its bit is clear), bias, then penalties, in place, and the argmax
 *      after them; a greedy row ends here;
 *   3. top-k: a radix select (8-bit digits of an order-preserving key,
 *      four launches) for the k-th best key, histograms added by every
 *      slice, then the ties at that key taken lowest id first;
 *   4. top-p: the same radix walk over exact masses (128-bit sums of the
 *      fixed-point weights at temperature 1) to the key where the best-
 *      first prefix reaches top_p, then the ties it needs;
 *   5. min-p: a threshold on logit - max, applied by the draw;
 *   6. the draw: the survivors' mass per slice; the last block finds the
 *      slice holding floor(u * total / 2^64) and walks it in id order.
 * Integer sums make every stage independent of the reduction order and
 * of how the row is cut. Nothing is synchronized with the host and the
 * grids depend only on the rows, the vocabulary and the stages asked
 * for, so a launch can be captured in a CUDA graph; all parameters,
 * including the seed and the stream position, are read from device
 * memory. A row that needs no stage of a launch leaves it at once. */
#ifndef MEMRA_KERNELS_SAMPLE_CUH
#define MEMRA_KERNELS_SAMPLE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "numerics/sample_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most slices a row is cut into. */
#define SMP_SCAN_SLICES 64
/* Scratch words (uint64) a row: the scan's partial values, the row's
 * state between stages, a histogram, per-slice sums and the counter. */
#define SMP_SCRATCH_WORDS 1280

/* The stages a launch runs besides the scan and the greedy pick: each is
 * run when any row needs it (a greedy row needs none). */
enum { SMP_STAGE_DRAW = 1, SMP_STAGE_TOP_K = 2, SMP_STAGE_TOP_P = 4 };

/* The stages n rows need. */
static inline unsigned smp_stages(const smp_row *rows, int n)
{
    unsigned s = 0;
    for (int i = 0; i < n; i++) {
        if (rows[i].temperature == 0.0)
            continue;
        s |= SMP_STAGE_DRAW;
        if (rows[i].top_k > 0)
            s |= SMP_STAGE_TOP_K;
        if (rows[i].top_p_q32 < SMP_TOP_P_OFF)
            s |= SMP_STAGE_TOP_P;
    }
    return s;
}

/* logits [n_rows][n_vocab] (the mask's bans, bias and penalties are
 * applied in place, as the host sampler does), rows [n_rows], the bias,
 * penalty and mask lists they index, scratch [n_rows][SMP_SCRATCH_WORDS]
 * (any contents: each launch sets what it reads), out [n_rows]: all
 * device memory. stages: smp_stages of the rows (or
 * more). n_vocab < 2^31, n_rows < 65536. */
cudaError_t launch_sample(float *logits, int64_t n_vocab, int n_rows, const smp_row *rows,
                          const smp_bias *bias, const smp_pen *pen, const uint32_t *mask,
                          uint64_t *scratch, unsigned stages, smp_outcome *out,
                          cudaStream_t stream);

/* token[0] = the id of outcome o when it is a token of [0, n_vocab), else
 * 0: the next step's token in a chain of greedy steps captured in one
 * graph (the id never goes through the host). A failed row feeds a valid
 * id, so the later steps read inside the embedding table; the chain's
 * outcomes report the failure. One lane of one warp. */
cudaError_t launch_sample_feed(const smp_outcome *o, int64_t n_vocab, int32_t *token,
                               cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
