/* One generation on one sequence: prefill the prompt, then sample, stream
 * and stop. The loop memra-gen runs; the server's scheduler runs the same
 * steps per request, batched.
 *
 * Stops on: an end-of-generation id of the tokenizer (EOS, end-of-turn ...)
 * unless ignore_eos, a stop string (never emitted: the detokenizer holds
 * back text that may still become one), n_predict tokens, or the end of
 * the context. */
#ifndef MEMRA_ENGINE_GENERATE_H
#define MEMRA_ENGINE_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "tok/tokenizer.h"

typedef struct {
    int n_predict;            /* tokens to generate at most; < 0: until a stop or the context ends */
    sampler_params sampling;
    const char *const *stop;  /* stop strings */
    size_t n_stop;
    int ignore_eos;
    int penalize_prompt;      /* prompt tokens count for the penalties (llama.cpp does) */
    /* Constrained decoding: when set (both), each step samples only tokens
     * the grammar allows from its state (gram_mask, set as the sampler's
     * allowed-token mask: the sampling stays on the device where the
     * backend samples), and an end-of-generation token only once the
     * grammar is complete. */
    const gram_grammar *grammar;
    const gram_vocab *grammar_vocab;
} gen_params;

/* Called with each piece of text as it becomes safe to show. */
typedef void (*gen_text_fn)(void *ctx, const char *text, size_t len);

typedef enum { GEN_FINISH_STOP = 0, GEN_FINISH_LENGTH } gen_finish;

typedef struct {
    int32_t *tokens;     /* generated ids, malloc'ed (the stop id included, stop-string tokens too) */
    size_t n_tokens;
    char *text;          /* the generated text, malloc'ed, without any stop string */
    gen_finish finish;
    int stop_string;     /* index of the stop string that ended it, or -1 */
    double prefill_ms, decode_ms;
    size_t n_prompt;
    size_t n_decoded;    /* forward steps after the prefill */
} gen_result;

void gen_params_default(gen_params *p);
/* A sampler over the model's n_vocab logits with the embedding rows past
 * the tokenizer's last token banned (padding rows a checkpoint may carry:
 * never a token), sp's logit_bias kept for the rest. t NULL: none banned. */
sampler *gen_model_sampler(const sampler_params *sp, const tokenizer *t, int32_t n_vocab,
                           memra_err *err);

/* t may be NULL (a model without a tokenizer, fed ids): no text then, and
 * only n_predict or the context end the generation. */
int generate(engine *e, const tokenizer *t, const int32_t *prompt, size_t n_prompt,
             const gen_params *p, gen_text_fn on_text, void *ctx, gen_result *out,
             memra_err *err);
void gen_result_free(gen_result *r);
const char *gen_finish_name(gen_finish f);

#endif
