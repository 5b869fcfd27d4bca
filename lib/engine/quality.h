/* Quality of a model against a reference on the same tokens: the measure
 * for a quantization (memra-parity QUANT --against REF).
 *
 * Both models run over the same windows the perplexity does (consecutive
 * windows of `window` tokens from the start, the last one shorter, dropped
 * under 2 tokens, each from position 0 in a fresh sequence). At every
 * position that has a next token inside its window both full next-token
 * distributions are formed by a log-softmax in double, and we record
 *   - KL(REF || QUANT) = sum_v p_ref(v) (log p_ref(v) - log p_quant(v)),
 *     in nats;
 *   - whether the two argmaxes agree (top-1 agreement; the lower id wins a
 *     tie, in both);
 *   - each model's negative log-likelihood of the actual next token, whose
 *     mean gives each perplexity (REF's is exactly what --perplexity
 *     reports).
 * Logits are held for one step of at most QUALITY_STEP positions per model;
 * only one KL value per position is kept (for the median and percentiles). */
#ifndef MEMRA_ENGINE_QUALITY_H
#define MEMRA_ENGINE_QUALITY_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "engine/engine.h"

enum { QUALITY_STEP = 64 };

typedef struct {
    size_t n_tokens, n_windows, n_positions;
    double ref_nll, quant_nll; /* mean nats per predicted token */
    double ref_ppl, quant_ppl;
    double kl_mean, kl_stderr;   /* stderr: sample std / sqrt(n) */
    double kl_median, kl_p99, kl_max;
    size_t top1_agree;           /* positions where the argmaxes agree */
} quality_result;

/* logp[i] = logits[i] - max - log(sum exp(logits - max)), all in double.
 * Returns -1 when a logit is not finite (it then leaves logp undefined). */
int quality_log_softmax(const float *logits, int64_t n, double *logp);
/* KL(P || Q) from log-probabilities: sum exp(logp) * (logp - logq). */
double quality_kl(const double *logp, const double *logq, int64_t n);
/* The q-quantile (0 <= q <= 1) of n sorted values, linearly interpolated
 * between the closest ranks (numpy's default); 0 for n = 0. */
double quality_quantile(const double *sorted, size_t n, double q);

/* Run ref and quant over ids[0..n) and measure as above. Both engines must
 * have the same vocabulary size and a context of at least `window`. Fails
 * naming the model and position on a non-finite logit. */
int quality_compare(engine *ref, engine *quant, const int32_t *ids, size_t n, int window,
                    quality_result *out, memra_err *err);

#endif
