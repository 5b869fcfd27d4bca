/* The sampler's fixed-point weights for many candidates at once: what the
 * host sampler spends its time on at a large vocabulary (every finite
 * logit's weight at temperature 1 for top-p, and every survivor's at the
 * row's temperature for the draw: a double-precision exp each). One core
 * of the 2-core development VM (AVX-512), one row of 151,936 N(0, 9)
 * logits, best of 300 sampler_sample calls, 2026-12-06: temperature 1
 * alone 2.2 ms a token with the scalar form, 0.72 with this file's; with
 * top-p 0.99 3.8 and 2.7.
 *
 * The same bits as smp_weight(smp_dist(...)) (sample_math.h) on every CPU,
 * so the host sampler keeps choosing the device's token: eight lanes of
 * the same IEEE operations with AVX-512 (F and DQ) where the CPU has it
 * and MEMRA_CPU_ISA does not ask for a lower level, else the scalar
 * expression. */
#ifndef MEMRA_NUMERICS_SAMPLE_WEIGHTS_H
#define MEMRA_NUMERICS_SAMPLE_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

/* out[i] = smp_weight(smp_dist(logit[i * stride], max, temperature)),
 * i < n; every logit <= max (none NaN), temperature > 0. */
void smp_weights(const float *logit, size_t stride, int64_t n, float max, double temperature,
                 uint64_t *out);

/* The same by one form: simd 0 the scalar expression, 1 the AVX-512 form
 * (returns -1, writing nothing, where this CPU or build lacks it). For
 * the tests. */
int smp_weights_form(int simd, const float *logit, size_t stride, int64_t n, float max,
                     double temperature, uint64_t *out);

#endif
