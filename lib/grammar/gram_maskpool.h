/* Masks for many grammar states at once, on worker threads: a batch of
 * constrained sequences needs one mask each per decode step, and computed
 * one after another on the engine's thread they add up (64 masks of a
 * ~150 us average are most of an H200 decode step). Each state belongs to
 * one worker for the call, as grammar.h requires; the vocab is shared
 * read-only.
 *
 *     gram_maskpool *p = gram_maskpool_new(16);
 *     gram_maskpool_masks(p, states, vocab, masks, counts, n);  // per step
 *     gram_maskpool_free(p);
 */
#ifndef MEMRA_GRAMMAR_GRAM_MASKPOOL_H
#define MEMRA_GRAMMAR_GRAM_MASKPOOL_H

#include <stdint.h>

#include "grammar/grammar.h"

typedef struct gram_maskpool gram_maskpool;

/* n_threads workers in all, the caller's thread among them (<= 1: the
 * caller alone). NULL only when threads cannot be started (then use
 * gram_mask directly). */
gram_maskpool *gram_maskpool_new(int n_threads);
void gram_maskpool_free(gram_maskpool *p);
/* counts[i] = gram_mask(states[i], v, masks[i]) for i in [0, n); returns
 * when all are done. p may be NULL (serial). */
void gram_maskpool_masks(gram_maskpool *p, gram_state *const *states, const gram_vocab *v,
                     uint32_t *const *masks, int *counts, int n);

#endif
