/* Streaming detokenizer: ids go in one at a time, and what comes out is
 * only text that is safe to show now.
 *
 *   - Token pieces are raw bytes (byte-level characters and <0xNN> byte
 *     tokens already mapped back), reassembled here: an incomplete UTF-8
 *     sequence is held until its last byte arrives.
 *   - Ill-formed bytes become U+FFFD, one per maximal subpart (the rule
 *     tok_decode and Python's "replace" use), so the concatenated stream is
 *     exactly tok_decode's text.
 *   - Stop strings: text that may still turn out to be the start of a stop
 *     string is held back. When one completes, the text before it is
 *     emitted, the stop string never is, and the stream ends there; when a
 *     held prefix stops matching, it is released.
 *   - A SentencePiece tokenizer that adds a prefix space drops the first
 *     token's leading space when the stream starts a text (at_start), as
 *     tok_decode does.
 *
 * The output is always valid UTF-8. */
#ifndef MEMRA_TOK_DETOK_H
#define MEMRA_TOK_DETOK_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/strbuf.h"
#include "tok/tokenizer.h"

typedef struct detok detok;

typedef struct {
    const char *const *stop; /* stop strings (copied); empty ones are ignored */
    size_t n_stop;
    int skip_special; /* control tokens add no text */
    int at_start;     /* the first id fed begins the text */
} detok_opts;

/* opts may be NULL (no stop strings, special tokens shown, mid-text). */
detok *detok_new(const tokenizer *t, const detok_opts *opts);
void detok_free(detok *d);

/* Feed one id: the text now safe to show is appended to `out`. Returns 0;
 * 1 when a stop string has completed (now or earlier), with its index in
 * *stop_index when that is not NULL; -1 for an id out of range (err names
 * it; nothing is consumed). */
int detok_feed(detok *d, int32_t id, strbuf *out, int *stop_index, memra_err *err);
/* The same for raw bytes (a piece the caller already has). */
int detok_feed_bytes(detok *d, const char *bytes, size_t n, strbuf *out, int *stop_index);
/* End of stream: an incomplete UTF-8 sequence becomes U+FFFD and a held
 * partial stop string is released. Nothing after a completed stop. */
void detok_flush(detok *d, strbuf *out);
/* Whether a stop string has completed. */
int detok_stopped(const detok *d);

#endif
