/* Launchers for sampling on the device: one token per row of logits, the
 * same token lib/engine/sampler.c picks on the host for the same logits,
 * parameters and stream position (the shared arithmetic is
 * lib/numerics/sample_math.h: Philox draws, exact fixed-point weights).
 *
 * A scan first, spread over up to SMP_SCAN_SLICES blocks a row, then
 * one block per row. Its stages, each over the row's logits in global
 * memory (no sort, nothing sized by the vocabulary but the logits):
 *   1. NaN / +inf check, the argmax (highest logit, lowest id on ties)
 *      and the count of finite logits: the scan's slices, folded;
 *   2. the mask's bans (-inf where its bit is clear), bias, then
 *      penalties, in place, and the argmax after them;
 *   3. top-k: a radix select (8-bit digits of an order-preserving key,
 *      histograms in shared memory) for the k-th best key, then the
 *      ties at that key taken lowest id first;
 *   4. top-p: the same radix walk over exact masses (128-bit sums of the
 *      fixed-point weights at temperature 1) to the key where the best-
 *      first prefix reaches top_p, then the ties it needs;
 *   5. min-p: a threshold on logit - max;
 *   6. the draw: each thread sums the weights of a contiguous range of
 *      ids, a scan finds the range holding floor(u * total / 2^64), its
 *      thread walks it in id order.
 * Integer sums make every stage independent of the reduction order.
 * Nothing is synchronized with the host and the grids depend only on
 * the rows and the vocabulary, so a launch can be captured in a CUDA graph; all parameters,
 * including the seed and the stream position, are read from device
 * memory. */
#ifndef MEMRA_KERNELS_SAMPLE_CUH
#define MEMRA_KERNELS_SAMPLE_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "numerics/sample_math.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most slices the scan cuts a row into. */
#define SMP_SCAN_SLICES 64

/* logits [n_rows][n_vocab] (the mask's bans, bias and penalties are
 * applied in place, as the host sampler does), rows [n_rows], the bias,
 * penalty and mask lists they index, scan [n_rows][SMP_SCAN_SLICES][4]
 * (the scan's partial values, scratch), out [n_rows]: all device memory.
 * n_vocab < 2^31, n_rows < 65536. */
cudaError_t launch_sample(float *logits, int64_t n_vocab, int n_rows, const smp_row *rows,
                          const smp_bias *bias, const smp_pen *pen, const uint32_t *mask,
                          uint64_t *scan, smp_outcome *out, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
