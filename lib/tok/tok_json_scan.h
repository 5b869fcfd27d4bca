/* model.vocab and model.merges of a tokenizer.json read without building a
 * jansson tree (see tok_json_scan.c). Internal to lib/tok. */
#ifndef MEMRA_TOK_JSON_SCAN_H
#define MEMRA_TOK_JSON_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"

typedef struct {
    const char *s; /* decoded; into the file buffer or the scan's arena */
    size_t len;
    int64_t id;
} tok_json_vocab_entry;

typedef struct {
    const char *a, *b;
    size_t la, lb;
} tok_json_merge;

typedef struct {
    tok_json_vocab_entry *vocab;
    size_t n_vocab;
    tok_json_merge *merges;
    size_t n_merges;
    arena mem;
    int found;
    size_t vocab_at, vocab_len, merges_at, merges_len; /* spans in the file */
} tok_json_big;

/* Read model.vocab and model.merges from the file text buf[0..len); 0 on
 * success, -1 when the file is not in the expected shape (then parse it all
 * with jansson). The buffer must outlive `out`. */
int tok_json_scan_model(char *buf, size_t len, tok_json_big *out);
/* The file text without those two values ({} and [] in their place) into
 * dst (len + 1 bytes); returns the new length. */
size_t tok_json_without_big(const char *src, size_t len, const tok_json_big *b, char *dst);
void tok_json_big_free(tok_json_big *b);

#endif
