/* Candidate truncation for the sampler (top-k, top-p, min-p) over arrays
 * of (logit, id) pairs, without sorting the whole vocabulary.
 *
 * "Better" is one total order: higher logit first, the lower id first on
 * equal logits, so every selection is deterministic whatever the pivots. */
#ifndef MEMRA_ENGINE_SAMPLER_SELECT_H
#define MEMRA_ENGINE_SAMPLER_SELECT_H

#include <stdint.h>

/* (smp_weights reads the logits at a stride of this struct: logit first.) */
typedef struct {
    float logit; /* finite */
    int32_t id;
} sampler_cand;

/* Reorder c[0..n) so that c[0..k) hold its k best entries (in no
 * particular order) and the rest follow; 0 <= k <= n. */
void sampler_select_best(sampler_cand *c, int32_t n, int32_t k);

/* Top-k straight from the logits: the k best finite logits (fewer when
 * fewer are finite) into out[0..k), in no particular order; returns how
 * many. For small k. */
int32_t sampler_top_k_scan(const float *logits, int32_t n_vocab, int32_t k, sampler_cand *out);

/* Sort c[0..n) best first. */
void sampler_sort_best_first(sampler_cand *c, int32_t n);

/* Sort c[0..n) by ascending id. */
void sampler_sort_by_id(sampler_cand *c, int32_t n);

/* Top-p over c[0..n) at temperature 1, `max` being the largest logit in c:
 * reorders c so that the kept ones come first and returns how many to
 * keep: the fewest of the best whose mass reaches top_p (in 2^-32 units)
 * of the whole, at least 1. Masses are sample_math.h's exact fixed-point
 * weights, so the cut is the same whatever the summation order. w: room
 * for n masses (scratch). */
int32_t sampler_top_p(sampler_cand *c, int32_t n, float max, uint64_t top_p_q32, uint64_t *w);

/* Min-p: keeps, in their order, the entries whose probability is at least
 * min_p times the most likely one's (logit - max >= min_p_log =
 * log(min_p)); returns the new count (at least 1: the max always stays). */
int32_t sampler_min_p(sampler_cand *c, int32_t n, float max, double min_p_log);

#endif
