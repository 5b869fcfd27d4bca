/* Sentence embeddings and reranker scores from a prefill.
 *
 * An embedding is the model's last-layer hidden states after the final
 * norm, pooled over the input (the last token's, the mean of every
 * token's, or the first token's: MODEL_POOL_LAST / MEAN / CLS, as the
 * checkpoint says in config.pooling) and L2-normalized; no logits are
 * computed. A reranker of Qwen3-Reranker's kind scores a formatted query
 * and document by its next-token logits for "yes" and "no" at the last
 * position: sigmoid(logit(yes) - logit(no)).
 *
 * Each input is a sequence of its own. engine_embed runs a whole input; a
 * caller that schedules prompt chunks itself (memra-serve) feeds them in
 * order through embed_pool_forward, or several inputs' chunks at once
 * through embed_pool_forward_packed, and takes embed_pool_result at the end.
 *
 *     embed_pool *p = embed_pool_new(MODEL_POOL_LAST, dim);
 *     embed_pool_forward(e, s, chunk, n, p, &err);   // every chunk, in order
 *     embed_pool_result(p, dims, vec, &err);          // dims floats, unit length
 *     embed_pool_free(p);
 *
 * A reranker's score is computed from its last position's final hidden
 * state (a MODEL_POOL_LAST pool) and the output head's "yes" and "no" rows,
 * on the host in double (embed_head), so packed inputs need no logits.
 */
#ifndef MEMRA_ENGINE_EMBED_H
#define MEMRA_ENGINE_EMBED_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "engine/engine.h"

typedef struct embed_pool embed_pool;

/* kind: MODEL_POOL_LAST, MEAN or CLS (model/config.h); dim: the model's. */
embed_pool *embed_pool_new(int kind, int64_t dim);
void embed_pool_free(embed_pool *p);
/* Forget what was pooled (the next input starts). */
void embed_pool_reset(embed_pool *p);
/* engine_forward of the input's next chunk on s, no logits, its final
 * hidden states pooled into p. */
int embed_pool_forward(engine *e, engine_seq *s, const int32_t *tokens, int n, embed_pool *p,
                       memra_err *err);
/* Several inputs' next chunks in one forward step (engine_forward_packed):
 * seqs[i] runs tokens[i][0, n[i]) and pools[i] (distinct) pools its rows. */
int embed_pool_forward_packed(engine *e, engine_seq *const *seqs, const int32_t *const *tokens,
                              const int *n, int n_seqs, embed_pool *const *pools,
                              memra_err *err);
/* The pooled vector's first dims floats (dims <= dim; fewer: Matryoshka
 * truncation), scaled to unit length after the cut, into out. Fails when
 * nothing was pooled or the vector is zero or not finite. */
int embed_pool_result(const embed_pool *p, int64_t dims, float *out, memra_err *err);

/* A whole input: s reset, tokens[0..n) forwarded in chunks, pooled as
 * kind, dims floats into out; s left reset. */
int engine_embed(engine *e, engine_seq *s, const int32_t *tokens, size_t n, int kind,
                 int64_t dims, float *out, memra_err *err);

/* The output head's rows of two tokens, for a reranker's score: the
 * logits of "yes" and "no" from a final hidden state h are h . row (and
 * the model's final softcap), in double. */
typedef struct embed_head embed_head;

/* Fails on an id outside the vocabulary or a head type the host cannot
 * decode. */
int embed_head_new(engine *e, int32_t yes, int32_t no, embed_head **out, memra_err *err);
void embed_head_free(embed_head *h);
/* sigmoid(logit(yes) - logit(no)) of the last pooled row of p (a
 * MODEL_POOL_LAST pool). Fails when nothing was pooled or a logit is not
 * finite. */
int embed_head_score(const embed_head *h, const embed_pool *p, double *score, memra_err *err);

#endif
