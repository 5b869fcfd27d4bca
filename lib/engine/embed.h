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
 * order through embed_pool_forward and takes embed_pool_result at the end.
 *
 *     embed_pool *p = embed_pool_new(MODEL_POOL_LAST, dim);
 *     embed_pool_forward(e, s, chunk, n, p, &err);   // every chunk, in order
 *     embed_pool_result(p, dims, vec, &err);          // dims floats, unit length
 *     embed_pool_free(p);
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
/* The pooled vector's first dims floats (dims <= dim; fewer: Matryoshka
 * truncation), scaled to unit length after the cut, into out. Fails when
 * nothing was pooled or the vector is zero or not finite. */
int embed_pool_result(const embed_pool *p, int64_t dims, float *out, memra_err *err);

/* A whole input: s reset, tokens[0..n) forwarded in chunks, pooled as
 * kind, dims floats into out; s left reset. */
int engine_embed(engine *e, engine_seq *s, const int32_t *tokens, size_t n, int kind,
                 int64_t dims, float *out, memra_err *err);

/* A reranker's score of tokens[0..n) (a pair already formatted): s reset,
 * the tokens forwarded with the last position's logits into logits
 * ([n_vocab] scratch), score = sigmoid(logits[yes] - logits[no]); s left
 * reset. */
int engine_rerank_score(engine *e, engine_seq *s, const int32_t *tokens, size_t n, int32_t yes,
                        int32_t no, float *logits, double *score, memra_err *err);

#endif
