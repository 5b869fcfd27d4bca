/* Rank files for vocabulary-trimmed draft heads (docs/SPECULATIVE.md).
 *
 * A rank file lists the N target-vocabulary ids a drafter may propose,
 * most frequent first: d2t[r] is the id of rank r ("draft to target", the
 * name EAGLE-3 gives the same table). It is a GGUF v3 file holding one
 * metadata pair and one tensor, nothing else, so its bytes are fixed by
 * N and the ids:
 *
 *   "GGUF", u32 3, u64 1 (tensors), u64 1 (metadata pairs)
 *   u64 17, "memra.d2t.n_vocab", u32 4 (UINT32), u32 n_vocab
 *   u64 3, "d2t", u32 1 (dims), u64 N, u32 26 (I32), u64 0 (offset)
 *   4 zero bytes (the header is 92 bytes, padded to 96)
 *   N little-endian i32 ids, zero-padded to a multiple of 32 bytes
 *
 * n_vocab is the vocabulary the ranks were counted over, so a rank file
 * is refused with a model of another vocabulary size. A text sidecar
 * (ranks_write's OUT.txt) holds the same ids, one per line. */
#ifndef MEMRA_FORMAT_RANKS_H
#define MEMRA_FORMAT_RANKS_H

#include <stdint.h>

#include "core/err.h"

#define RANKS_KEY_N_VOCAB "memra.d2t.n_vocab"
#define RANKS_TENSOR "d2t"

/* The ranks of counts[n_vocab]: the top ids by count, descending, ties to
 * the lower id, then ids never counted in ascending order, into d2t[top]
 * (1 <= top <= n_vocab). Ids with a zero count are "never counted". */
void ranks_from_counts(const uint64_t *counts, int32_t n_vocab, int32_t top, int32_t *d2t);

/* The sidecar path of a rank file: OUT.gguf -> OUT.txt, else OUT + ".txt"
 * (malloc'ed). */
char *ranks_txt_path(const char *gguf_path);

/* Write d2t[n] (distinct ids in [0, n_vocab)) as the GGUF above at path,
 * and the ids one per line at ranks_txt_path(path). Both are written to a
 * temporary name and renamed, so a failure leaves no partial file. */
int ranks_write(const char *path, const int32_t *d2t, int32_t n, int32_t n_vocab,
                memra_err *err);

/* Read a rank file: *d2t (malloc'ed, *n ids) and the vocabulary size it
 * was counted over. Refuses, naming the file and what is wrong, anything
 * but a GGUF with an I32 vector "d2t" of distinct ids in [0, n_vocab) and
 * a UINT32 "memra.d2t.n_vocab". */
int ranks_read(const char *path, int32_t **d2t, int32_t *n, int32_t *n_vocab, memra_err *err);

#endif
