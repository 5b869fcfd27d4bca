#include "engine/parity.h"

#include <math.h>

void parity_compare_row(const float *ours, const float *ref, int64_t n, parity_row *out)
{
    double max_abs = 0, max_rel = 0, dot = 0, na = 0, nb = 0;
    int64_t am_o = 0, am_r = 0;
    double top1 = -INFINITY, top2 = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double a = ours[i], b = ref[i];
        double d = fabs(a - b);
        if (isnan(d))
            max_abs = INFINITY;
        else if (d > max_abs)
            max_abs = d;
        if (fabs(b) >= PARITY_REL_FLOOR && d / fabs(b) > max_rel)
            max_rel = d / fabs(b);
        dot += a * b;
        na += a * a;
        nb += b * b;
        if (ours[i] > ours[am_o])
            am_o = i;
        if (ref[i] > ref[am_r])
            am_r = i;
        if (b > top1) {
            top2 = top1;
            top1 = b;
        } else if (b > top2) {
            top2 = b;
        }
    }
    out->max_abs = max_abs;
    out->max_rel = max_rel;
    out->cosine = (na > 0 && nb > 0) ? dot / (sqrt(na) * sqrt(nb)) : (na == nb ? 1.0 : 0.0);
    out->argmax_ours = (int32_t)am_o;
    out->argmax_ref = (int32_t)am_r;
    out->ref_margin = n > 1 ? top1 - top2 : INFINITY;
}

void parity_summarize(const parity_row *rows, int n, parity_summary *out)
{
    out->max_abs = 0;
    out->max_rel = 0;
    out->min_cosine = 1;
    out->n_rows = n;
    out->argmax_agree = 0;
    out->argmax_real_disagreements = 0;
    out->worst_row = 0;
    for (int i = 0; i < n; i++) {
        const parity_row *r = &rows[i];
        if (r->max_abs > out->max_abs) {
            out->max_abs = r->max_abs;
            out->worst_row = i;
        }
        if (r->max_rel > out->max_rel)
            out->max_rel = r->max_rel;
        if (r->cosine < out->min_cosine)
            out->min_cosine = r->cosine;
        if (r->argmax_ours == r->argmax_ref)
            out->argmax_agree++;
        else if (r->ref_margin > 2 * r->max_abs)
            out->argmax_real_disagreements++;
    }
}
