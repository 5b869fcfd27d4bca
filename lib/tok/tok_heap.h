/* The merge queue both BPE flavours use: a binary heap of candidate
 * merges in the per-call scratch, ordered by the flavour's own rule
 * (byte-level: lowest merge rank; SentencePiece: highest score; ties to the
 * leftmost pair). It is a macro so each tokenizer gets its comparison
 * inlined on the hot path instead of called through a pointer.
 *
 *   TOK_HEAP_DEFINE(heap, cand_less)   defines heap_push and heap_pop */
#ifndef MEMRA_TOK_HEAP_H
#define MEMRA_TOK_HEAP_H

#include "core/check.h"
#include "tok/tok_internal.h"

#define TOK_HEAP_DEFINE(name, before)                                                     \
    static void name##_push(tok_scratch *s, const tok_cand *c)                           \
    {                                                                                     \
        if (s->heap_n == s->heap_cap) {                                                   \
            s->heap_cap = s->heap_cap ? s->heap_cap * 2 : 64;                             \
            s->heap = xrealloc(s->heap, s->heap_cap * sizeof *s->heap);                   \
        }                                                                                 \
        size_t i = s->heap_n++;                                                           \
        while (i > 0) {                                                                   \
            size_t p = (i - 1) / 2;                                                       \
            if (!before(c, &s->heap[p]))                                                  \
                break;                                                                    \
            s->heap[i] = s->heap[p];                                                      \
            i = p;                                                                        \
        }                                                                                 \
        s->heap[i] = *c;                                                                  \
    }                                                                                     \
                                                                                          \
    static tok_cand name##_pop(tok_scratch *s)                                            \
    {                                                                                     \
        tok_cand top = s->heap[0];                                                        \
        tok_cand last = s->heap[--s->heap_n];                                             \
        size_t i = 0, n = s->heap_n;                                                      \
        for (;;) {                                                                        \
            size_t l = 2 * i + 1;                                                         \
            if (l >= n)                                                                   \
                break;                                                                    \
            size_t m = l;                                                                 \
            if (l + 1 < n && before(&s->heap[l + 1], &s->heap[l]))                        \
                m = l + 1;                                                                \
            if (!before(&s->heap[m], &last))                                              \
                break;                                                                    \
            s->heap[i] = s->heap[m];                                                      \
            i = m;                                                                        \
        }                                                                                 \
        if (n > 0)                                                                        \
            s->heap[i] = last;                                                            \
        return top;                                                                       \
    }

#endif
