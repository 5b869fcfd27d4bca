/* Benchmark helpers: timing with a warm-up and r repetitions summarized
 * as median / min / max, the engine's prefill and decode measurements, the
 * tokenizer's throughput, and the built-in mixed text it is measured on.
 *
 * A repetition times only its own steady part (a decode row fills the KV
 * cache to its depth untimed first), so each measurement is a callback
 * that reports the milliseconds it timed. The measurements drive an engine
 * through its public API only, so they measure whatever backend the engine
 * was loaded on. */
#ifndef MEMRA_BENCH_BENCH_H
#define MEMRA_BENCH_BENCH_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "engine/engine.h"
#include "grammar/grammar.h"
#include "tok/tokenizer.h"

typedef struct {
    int n;          /* repetitions summarized */
    double median;  /* the middle one; the mean of the two middle ones when n is even */
    double min, max, mean;
} bench_stats;

/* Summarize n >= 1 samples (they are not reordered). */
void bench_stats_of(const double *samples, int n, bench_stats *out);

/* One repetition: any untimed setup, then the timed part, whose length in
 * ms goes to *ms. Returns 0 or -1 with err filled. */
typedef int (*bench_rep_fn)(void *ctx, double *ms, memra_err *err);
/* warmup untimed calls, then reps timed ones summarized into out. When a
 * profiled engine is set (bench_profile), the first timed call runs inside
 * its profiler range (engine_profiler_range). */
int bench_repeat(bench_rep_fn fn, void *ctx, int warmup, int reps, bench_stats *out,
                 memra_err *err);

/* Profile the first timed repetition of every later bench_repeat on e
 * (NULL: none). For memra-bench --profile-range. */
void bench_profile(engine *e);

/* Constrain every later decode row (bench_decode, bench_decode_batch) by
 * grammar g over vocabulary v (NULL: unconstrained), as memra-serve runs a
 * response_format request: before each step, each sequence's allowed
 * tokens (gram_mask) become its sampler's mask, sampled under it (on the
 * device where the backend samples), and after it the grammar takes the
 * token (gram_accept_token); the mask and the accept are timed with the
 * step. A sequence whose grammar has finished, or allows nothing more,
 * starts a fresh one, so a long row keeps writing objects. Each
 * repetition starts every sequence's grammar anew. For memra-bench
 * --json-schema. Both stay the caller's and must outlive the rows. */
void bench_constrain(const gram_grammar *g, const gram_vocab *v);

/* Prefill: n_prompt tokens into the sequence s after depth tokens
 * already in its cache (the last token's logits computed, as a real
 * prompt needs). s is filled to depth once, untimed, and cut back to it
 * before each repetition (filled again, untimed, where the model's
 * recurrent state cannot be cut back). out is the time of the n_prompt
 * tokens in ms. Tokens are pseudo-random ids from seed. s is left empty. */
int bench_prefill(engine *e, engine_seq *s, int64_t depth, int n_prompt, int warmup, int reps,
                  uint64_t seed, bench_stats *out, memra_err *err);
/* Decode: s is filled to depth tokens once (untimed), then each
 * repetition runs n_gen single-token steps, each sampling its token
 * greedily (engine_forward_sample: on the device where the backend
 * samples) as the next step's input, and is truncated back to depth.
 * out is the time of the n_gen steps in ms. */
int bench_decode(engine *e, engine_seq *s, int64_t depth, int n_gen, int warmup, int reps,
                 uint64_t seed, bench_stats *out, memra_err *err);
/* Batched decode: b sequences, each filled with its own n_prompt
 * pseudo-random ids (untimed; seed + 1 + i for sequence i, so no two
 * prompts are alike), then each repetition runs n_gen steps of one token
 * per sequence (engine_forward_batch_sample: every sequence's token
 * sampled greedily, the next step's input) and cuts the sequences back to
 * n_prompt. out is the time of the n_gen steps in ms. The engine needs n_seqs >= b and n_ctx >= n_prompt + n_gen. */
int bench_decode_batch(engine *e, engine_seq *const *seqs, int b, int64_t n_prompt, int n_gen,
                       int warmup, int reps, uint64_t seed, bench_stats *out, memra_err *err);
/* Tokenizer: tok_encode of the whole text (no BOS/EOS added, special-token
 * text not parsed) per repetition, on the calling thread. out is ms per
 * encode; *n_tokens the ids one encode gives. */
int bench_tokenize(const tokenizer *t, const char *text, size_t len, int warmup, int reps,
                   bench_stats *out, size_t *n_tokens, memra_err *err);

/* A deterministic mixed text of about target bytes (whole paragraphs, so
 * never more than target; valid UTF-8, NUL-terminated, malloc'ed): English
 * prose, C and Python code, JSON and log lines, tables of numbers, Chinese,
 * Japanese, Korean, European and Cyrillic text, emoji (ZWJ sequences,
 * flags, skin tones) and runs of spaces, tabs and newlines. Paragraphs are
 * picked and their numbers, names and whitespace runs varied by a fixed
 * seed, so the same target always gives the same bytes. */
char *bench_mixed_text(size_t target, size_t *len);
/* What bench_mixed_text holds, in one line, for reports. */
const char *bench_mixed_text_description(void);

#endif
