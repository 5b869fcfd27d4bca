/* One pass over a row of logits, what the host sampler learns of a row
 * before anything else: whether any value is NaN or +inf, the argmax
 * (the lowest id of the largest value) and how many values are above
 * -inf. A greedy token needs nothing more; at Qwen3's vocabulary (151,936
 * ids) the scalar loops took 0.27 ms a token on the 2-core development VM,
 * about 1% of a Qwen3-0.6B-shaped CPU decode step, spent while the other
 * threads wait.
 *
 * Eight lanes with AVX2 where the CPU has it and MEMRA_CPU_ISA (the CPU
 * fast path's level) does not ask for `scalar`, else plain C: the same
 * result either way (no arithmetic, only comparisons). */
#ifndef MEMRA_NUMERICS_LOGIT_SCAN_H
#define MEMRA_NUMERICS_LOGIT_SCAN_H

#include <stdint.h>

typedef struct {
    int bad;          /* some value is NaN or +inf: nothing below is set */
    int32_t best;     /* the lowest id of the largest value; -1 when all are -inf */
    int32_t n_finite; /* values above -inf */
} logit_scan;

void logit_scan_row(const float *x, int32_t n, logit_scan *out);

/* The same by one form: simd 0 plain C, 1 the AVX2 form (returns -1,
 * writing nothing, where this CPU or build lacks it). For the tests. */
int logit_scan_form(int simd, const float *x, int32_t n, logit_scan *out);

#endif
