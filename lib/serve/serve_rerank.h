/* POST /v1/rerank (and /rerank): the Jina / Cohere shape vLLM and
 * llama.cpp serve, scored as Qwen3-Reranker's model card defines it.
 *
 * Each document becomes one prompt:
 *   PREFIX + "<Instruct>: {instruction}\n<Query>: {query}\n<Document>: {doc}" + SUFFIX
 * where PREFIX is the system turn that asks for "yes" or "no" and opens
 * the user turn, and SUFFIX closes it and opens the assistant's with an
 * empty think block. PREFIX and SUFFIX are tokenized with special-token
 * parsing (they hold <|im_start|> and <|im_end|>), the middle without, so
 * a query or a document cannot write control tokens. The score is
 * sigmoid(logit(yes) - logit(no)) at the last position, where yes and no
 * are the single-token encodings of "yes" and "no". */
#ifndef MEMRA_SERVE_SERVE_RERANK_H
#define MEMRA_SERVE_SERVE_RERANK_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "tok/tokenizer.h"

/* The instruction when the request gives none (the model card's). */
#define SERVE_RERANK_INSTRUCTION \
    "Given a web search query, retrieve relevant passages that answer the query"
/* Documents a request may hold. */
#define SERVE_RERANK_MAX_DOCS 64

/* A rerank model's fixed token ids, made once at load. */
typedef struct serve_rerank_tmpl {
    int32_t *prefix, *suffix; /* owned */
    size_t n_prefix, n_suffix;
    int32_t yes, no;
} serve_rerank_tmpl;

/* Fails (naming the word) when "yes" or "no" is not one token. */
int serve_rerank_tmpl_init(const tokenizer *t, serve_rerank_tmpl *out, memra_err *err);
void serve_rerank_tmpl_free(serve_rerank_tmpl *t);

#endif
