/* Perplexity of a model on a token sequence, computed the way the
 * project's training script computes it (models/README.md): consecutive
 * windows of `window` tokens from the start (the last one shorter, dropped
 * under 2 tokens), each run from position 0 in a fresh sequence, the
 * negative log-likelihood of every next token inside each window averaged
 * over all predictions; perplexity = exp(mean). */
#ifndef MEMRA_ENGINE_PERPLEXITY_H
#define MEMRA_ENGINE_PERPLEXITY_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "engine/engine.h"

typedef struct {
    size_t n_tokens, n_windows, n_predictions, n_top1;
    double mean_nll;   /* nats per predicted token */
    double perplexity;
} perplexity_result;

int perplexity_run(engine *e, const int32_t *ids, size_t n, int window, perplexity_result *out,
                   memra_err *err);

#endif
