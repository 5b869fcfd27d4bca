/* Candidate truncation for the sampler (top-k, top-p, min-p) over arrays
 * of (logit, id) pairs, without sorting the whole vocabulary.
 *
 * "Better" is one total order: higher logit first, the lower id first on
 * equal logits, so every selection is deterministic whatever the pivots. */
#ifndef MEMRA_ENGINE_SAMPLER_SELECT_H
#define MEMRA_ENGINE_SAMPLER_SELECT_H

#include <stdint.h>

typedef struct {
    float logit; /* finite */
    int32_t id;
} sampler_cand;

/* Reorder c[0..n) so that c[0..k) hold its k best entries (in no
 * particular order) and the rest follow; 0 <= k <= n. */
void sampler_select_best(sampler_cand *c, int32_t n, int32_t k);

/* Sort c[0..n) best first. */
void sampler_sort_best_first(sampler_cand *c, int32_t n);

/* Sort c[0..n) by ascending id. */
void sampler_sort_by_id(sampler_cand *c, int32_t n);

/* Top-p over c[0..n) at temperature 1, `max` being the largest logit in c:
 * reorders c best first as far as needed and returns how many of the best
 * to keep: the fewest whose probabilities sum to >= p (at least 1). */
int32_t sampler_top_p(sampler_cand *c, int32_t n, float max, double p);

/* Min-p: keeps, in their order, the entries whose probability is at least
 * min_p times the most likely one's (logit - max >= log(min_p)); returns
 * the new count (at least 1: the max itself always stays). */
int32_t sampler_min_p(sampler_cand *c, int32_t n, float max, double min_p);

#endif
