/* Numeric agreement between two sets of logits (ours and a reference),
 * position by position: the numbers memra-parity reports and gates on. */
#ifndef MEMRA_ENGINE_PARITY_H
#define MEMRA_ENGINE_PARITY_H

#include <stdint.h>

typedef struct {
    double max_abs;   /* max |ours - ref| */
    double max_rel;   /* max |ours - ref| / |ref| over entries with |ref| >= PARITY_REL_FLOOR */
    double cosine;    /* cosine similarity of the two vectors */
    int32_t argmax_ours, argmax_ref;
    double ref_margin; /* ref's top-1 minus top-2: how close its argmax was to a tie */
} parity_row;

/* Entries whose |ref| is below this do not count for max_rel (relative
 * error of near-zero values means nothing). */
#define PARITY_REL_FLOOR 1e-2

void parity_compare_row(const float *ours, const float *ref, int64_t n, parity_row *out);

typedef struct {
    double max_abs, max_rel, min_cosine;
    int n_rows, argmax_agree;
    /* rows whose argmax differs although the reference's top-2 margin is
     * wider than twice the row's max_abs: a real disagreement, not a near tie */
    int argmax_real_disagreements;
    int worst_row; /* the row with the largest max_abs */
} parity_summary;

void parity_summarize(const parity_row *rows, int n, parity_summary *out);

#endif
