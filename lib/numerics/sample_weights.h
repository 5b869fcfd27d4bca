/* The sampler's fixed-point weights for many candidates at once: what the
 * host sampler spends its time on at a large vocabulary (every finite
 * logit's weight at temperature 1 for top-p, and every survivor's at the
 * row's temperature for the draw: a double-precision exp each): 2.2 ms
 * a token at temperature 1 over 151,936 ids with the scalar form, 0.73
 * with this file's, on the 2-core development VM (docs/PERFORMANCE.md).
 *
 * The same bits as smp_weight(smp_dist(...)) (sample_math.h) on every CPU,
 * so the host sampler keeps choosing the device's token: eight lanes of
 * the same IEEE operations with AVX-512 (F and DQ) for a thousand
 * candidates and more where the CPU has it and MEMRA_CPU_ISA does not ask
 * for a lower level, else the scalar expression (`memra-bench --sampler`
 * times both). */
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
