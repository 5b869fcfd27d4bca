/* Grammars that constrain decoding: a context-free grammar over bytes, a
 * matcher that follows generated text through it, and per-step token masks.
 *
 * The pieces, in the order the engine uses them:
 *   - gram_parse_gbnf (GBNF text, llama.cpp's grammar format) or
 *     jsch_compile (grammar/json_schema.h, JSON Schema) makes a gram_grammar;
 *   - gram_vocab_build (or gram_vocab_from_tok) makes a token trie once per
 *     vocabulary; it is read-only afterwards and shared by every request;
 *   - gram_state_new starts a matcher for one sequence; per decode step
 *     gram_mask fills the allowed-token bitmask, the sampler picks among the
 *     allowed ids, and gram_accept_token advances the matcher.
 *
 * The grammar is compiled to bytes: character classes over code points become
 * alternatives of UTF-8 byte sequences, so the matcher never decodes UTF-8 and
 * a token that ends inside a multi-byte character is followed exactly.
 *
 * Thread safety: a grammar and a vocab are read-only once built (any number
 * of states and threads may use them); a state belongs to one thread, and
 * that holds for gram_mask too, though it takes a const state: it keeps a
 * cache of recent masks inside the state. */
#ifndef MEMRA_GRAMMAR_GRAMMAR_H
#define MEMRA_GRAMMAR_GRAMMAR_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "tok/tokenizer.h"

typedef struct gram_grammar gram_grammar;
typedef struct gram_state gram_state;
typedef struct gram_vocab gram_vocab;

/* GBNF text -> grammar. The start rule is `root`. Errors name the line and
 * column ("gbnf 3:14: unterminated character class"). */
gram_grammar *gram_parse_gbnf(const char *text, size_t len, memra_err *err);
void gram_free(gram_grammar *g);
int gram_n_rules(const gram_grammar *g);

/* A matcher at the start of the grammar. NULL only when out of memory. */
gram_state *gram_state_new(const gram_grammar *g);
gram_state *gram_state_clone(const gram_state *s);
void gram_state_free(gram_state *s);

/* Advance over bytes. A byte the grammar does not allow here is an error
 * naming its offset, and the state is left as it was. */
int gram_accept_bytes(gram_state *s, const void *bytes, size_t len, memra_err *err);
/* Whether the text so far is a whole sentence of the grammar (it may still
 * go on: "12" is complete and "123" too). */
int gram_is_complete(const gram_state *s);
/* Whether nothing but the end may follow (complete, and no byte allowed). */
int gram_is_final(const gram_state *s);
/* Whether an end-of-generation token was accepted. */
int gram_is_finished(const gram_state *s);

/* The vocabulary as a byte trie. pieces[i] (lens[i] bytes) is what token i
 * decodes to; a NULL piece or a zero length marks a token the grammar never
 * allows (control and special tokens). */
gram_vocab *gram_vocab_build(const char *const *pieces, const size_t *lens, int n,
                             memra_err *err);
/* From a tokenizer: control tokens are never allowed; the end-of-generation
 * ids are tok_stop_ids. */
gram_vocab *gram_vocab_from_tok(const tokenizer *t, memra_err *err);
/* End-of-generation ids: allowed exactly when the grammar is complete (their
 * pieces, if given, are ignored). */
void gram_vocab_set_eog(gram_vocab *v, const int32_t *ids, int n);
void gram_vocab_free(gram_vocab *v);
int gram_vocab_size(const gram_vocab *v);

/* Fill mask_bits (gram_mask_words(v) words; bit i%32 of word i/32 is token i;
 * logits past gram_vocab_size are the caller's to mask)
 * with the tokens that may come next; returns how many are allowed (0 when
 * finished; never a failure). */
int gram_mask(const gram_state *s, const gram_vocab *v, uint32_t *mask_bits);
size_t gram_mask_words(const gram_vocab *v);

/* gram_mask remembers the last few expensive masks of a state, keyed by the
 * matcher's whole stack set and the vocab: a state that comes back to a set
 * it had (inside a free JSON string, after every ordinary character) gets
 * its mask as a copy, in microseconds, instead of a walk over the trie. The
 * answer is the same either way. Each entry holds one mask
 * (gram_mask_words(v) * 4 bytes) and its key (at most 16 KB); a state has
 * GRAM_MASK_CACHE_DEFAULT entries, least recently used out first, and a
 * clone starts with an empty cache of the same size. */
#define GRAM_MASK_CACHE_DEFAULT 8
/* Empties the state's cache and gives it room for `entries` masks
 * (0: none, every mask is walked). */
void gram_state_set_mask_cache(gram_state *s, int entries);
typedef struct {
    uint64_t hits, misses; /* gram_mask calls answered from the cache, and not */
    int entries, capacity;
    size_t bytes; /* what the cache holds now */
} gram_mask_cache_stats;
void gram_state_mask_cache_stats(const gram_state *s, gram_mask_cache_stats *out);
/* Whether one token may come next (for a sampler that tries its pick first
 * and computes the mask only when the pick is refused). */
int gram_token_allowed(const gram_state *s, const gram_vocab *v, int32_t id);
/* Advance over a sampled token; an end-of-generation id finishes the state
 * (an error unless complete). A refused token leaves the state as it was. */
int gram_accept_token(gram_state *s, const gram_vocab *v, int32_t id, memra_err *err);

#endif
