/* The token sampler: turns one row of logits into the next token id.
 *
 * Order of operations (llama.cpp's default chain, common/sampling:
 * logit bias, penalties, top-k, top-p, min-p, temperature, draw):
 *
 *   1. mask and bias  a token the allowed-token mask (sampler_set_mask)
 *                     leaves out is banned (its logit becomes -inf), then
 *                     logit[id] += bias; a bias of -inf bans the token.
 *   2. penalties      over the last penalty_last_n accepted tokens, for every
 *                     token seen c > 0 times: repetition (logit > 0 divided
 *                     by the penalty, logit < 0 multiplied, as llama.cpp and
 *                     HF transformers do), then
 *                     logit -= presence * (c > 0) + frequency * c (OpenAI).
 *   3. top-k          keep the k highest logits.
 *   4. top-p          keep the smallest prefix (highest first) whose
 *                     probability sums to >= top_p.
 *   5. min-p          keep tokens whose probability is >= min_p times the
 *                     most likely token's.
 *   6. temperature    probabilities = softmax(logit / temperature) over what
 *                     is left, then one seeded draw.
 *
 * Why this order: bias first so a ban or a forced token is seen by every
 * later stage (a banned token is never counted as a candidate by top-k);
 * penalties before truncation so a penalized token can fall out of the
 * top-k; truncation at temperature 1 and temperature last, as llama.cpp
 * does, so the kept set does not move with the temperature (HF
 * transformers applies temperature before top-k/top-p, so with a
 * temperature other than 1 its top-p/min-p set can differ from ours).
 * Truncation never removes the most likely token, so temperature 0
 * (greedy) is simply the argmax after bias and penalties, ties going to
 * the lowest id.
 *
 * Determinism: call n since the last reset (n = 0, 1, ...) takes its 64
 * random bits from Philox4x32-10 keyed by `seed` at counter n (greedy
 * calls count too but draw nothing), and the surviving tokens are always
 * walked in ascending id order with exact integer weights
 * (numerics/sample_math.h), so the token depends only on the seed, the
 * number of earlier sampling calls since the last reset, the history and
 * the logits; the same surviving set gives the same token whichever
 * stages produced it, and a device sampler (a backend's `sample` op, fed
 * by sampler_row_export) picks the same token from the same logits. A
 * token whose weight is below 2^-62 of the best one's (about exp(-43) at
 * the temperature) is never drawn.
 *
 * Cost: bias and penalties touch only the listed / seen ids; top-k is a
 * partial selection (O(n_vocab)), top-p sorts only as many of the highest
 * candidates as it needs (batches of doubling size), min-p and
 * temperature are linear. Nothing sorts the whole vocabulary unless top-p
 * needs nearly all of it. */
#ifndef MEMRA_ENGINE_SAMPLER_H
#define MEMRA_ENGINE_SAMPLER_H

#include <stdint.h>

#include "core/err.h"
#include "numerics/sample_math.h"

/* {id, bias}: bias finite, or -INFINITY to ban the token. */
typedef smp_bias sampler_logit_bias;

typedef struct {
    double temperature;        /* [0, inf); 0 = greedy */
    int32_t top_k;             /* [0, inf); 0 = off; above n_vocab = off */
    double top_p;              /* [0, 1]; 1 = off; 0 keeps only the best token */
    double min_p;              /* [0, 1]; 0 = off */
    double repetition_penalty; /* (0, inf); 1 = off */
    int32_t penalty_last_n;    /* [-1, inf); window of the penalties in accepted
                                * tokens; -1 = everything since the last reset,
                                * 0 = penalties off */
    double presence_penalty;   /* [-2, 2]; 0 = off */
    double frequency_penalty;  /* [-2, 2]; 0 = off */
    const sampler_logit_bias *logit_bias; /* n_logit_bias entries, copied by
                                           * sampler_new; ids must be distinct */
    int32_t n_logit_bias;
    uint64_t seed;
} sampler_params;

typedef struct sampler sampler;

/* Every stage off, temperature 1, penalty_last_n 64, seed 0. Start from
 * this rather than from a zeroed struct (a zero top_p or
 * repetition_penalty is not "off"). */
sampler_params sampler_params_default(void);

/* Checks every parameter against its range and every logit_bias id against
 * [0, n_vocab); on a bad value returns NULL with one line naming the
 * parameter, the value and the allowed range. */
sampler *sampler_new(const sampler_params *p, int32_t n_vocab, memra_err *err);
void sampler_free(sampler *s);

/* Forget the history and restart the random stream from the seed (step
 * 0), so a reset sampler reproduces the same tokens. */
void sampler_reset(sampler *s);

/* The allowed-token mask of the next sampling calls (a grammar's step):
 * bit i % 32 of bits[i / 32] set = token i allowed; ids >= n_bits (and
 * ids past the vocabulary) are banned. The bits are copied; the mask
 * holds until the next sampler_set_mask, and NULL clears it (every token
 * allowed again). A banned token is treated as a logit bias of -inf
 * (stage 1): sampler_sample and sampler_probs never pick it, and
 * sampler_row_export hands the mask to a device sampler, which bans the
 * same tokens. Every token banned is sampler_sample's "every token is
 * banned" error. A negative n_bits counts as 0. */
void sampler_set_mask(sampler *s, const uint32_t *bits, int32_t n_bits);

/* Whether the sampler picks the argmax (temperature 0). */
int sampler_is_greedy(const sampler *s);

/* Add a token to the history the penalties count (the caller decides what
 * goes in: prompt tokens too, as llama.cpp does, or only generated ones). */
int sampler_accept(sampler *s, int32_t id, memra_err *err);

/* Sample the next token from n_vocab logits. On return the logits hold the
 * values after logit bias and penalties. Returns the id, or -1 with err set
 * when a logit is NaN or +inf, or when every token is banned. */
int32_t sampler_sample(sampler *s, float *logits, memra_err *err);

/* The distribution sampler_sample would draw from, without drawing: *n ids
 * in ascending order with their probabilities (summing to 1; greedy gives
 * the argmax with probability 1). The arrays belong to the sampler and stay
 * valid until its next call. Logits are modified as in sampler_sample.
 * Returns 0, or -1 with err set. */
int sampler_probs(sampler *s, float *logits, const int32_t **ids, const double **probs,
                  int32_t *n, memra_err *err);

/* ---- sampling elsewhere (a backend's sample op) ----
 *
 * What the next sampler_sample would use, for a device to sample instead:
 * the parameters and the stream position in *row (its bias_at / pen_at /
 * mask_at left 0), the logit-bias list, the penalty counts (ids with a
 * count in the window) and the allowed-token mask (row->n_mask words,
 * 0 when none). The lists belong to the sampler and stay valid until its
 * next call. */
void sampler_row_export(sampler *s, smp_row *row, const smp_bias **bias, const smp_pen **pen,
                        const uint32_t **mask);

/* The device's outcome for the row exported last: advances the stream as
 * sampler_sample would and returns the token, or -1 with the error
 * sampler_sample would have given for those logits. */
int32_t sampler_row_done(sampler *s, const smp_outcome *o, memra_err *err);

#endif
