#include "engine/sampler_select.h"

#include <math.h>
#include <stdlib.h>

static int cand_better(const sampler_cand *a, const sampler_cand *b)
{
    return a->logit > b->logit || (a->logit == b->logit && a->id < b->id);
}

static int cmp_best_first(const void *pa, const void *pb)
{
    const sampler_cand *a = pa, *b = pb;
    if (cand_better(a, b))
        return -1;
    return cand_better(b, a) ? 1 : 0;
}

static int cmp_by_id(const void *pa, const void *pb)
{
    const sampler_cand *a = pa, *b = pb;
    return (a->id > b->id) - (a->id < b->id);
}

void sampler_sort_best_first(sampler_cand *c, int32_t n)
{
    if (n > 1)
        qsort(c, (size_t)n, sizeof *c, cmp_best_first);
}

void sampler_sort_by_id(sampler_cand *c, int32_t n)
{
    if (n > 1)
        qsort(c, (size_t)n, sizeof *c, cmp_by_id);
}

static void swap_cand(sampler_cand *a, sampler_cand *b)
{
    sampler_cand t = *a;
    *a = *b;
    *b = t;
}

/* Quickselect (Lomuto partition, median-of-three pivot). The order is total
 * (ids are distinct), so equal logits cannot degrade the partition; a depth
 * limit falls back to sorting the remaining range so an unlucky input stays
 * O(n log n) at worst. Small ranges are finished by sorting. */
void sampler_select_best(sampler_cand *c, int32_t n, int32_t k)
{
    if (k <= 0 || k >= n)
        return;
    int32_t lo = 0, hi = n; /* the k-th boundary lies in [lo, hi] */
    int depth = 0, max_depth = 2;
    for (int32_t m = n; m > 1; m >>= 1)
        max_depth += 2;
    while (hi - lo > 16) {
        if (++depth > max_depth) {
            sampler_sort_best_first(c + lo, hi - lo);
            return;
        }
        int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
        /* Median of c[lo], c[mid], c[last] into c[last]. */
        if (cand_better(&c[mid], &c[lo]))
            swap_cand(&c[mid], &c[lo]);
        if (cand_better(&c[last], &c[lo]))
            swap_cand(&c[last], &c[lo]);
        if (cand_better(&c[mid], &c[last]))
            swap_cand(&c[mid], &c[last]);
        sampler_cand pivot = c[last];
        int32_t store = lo;
        for (int32_t i = lo; i < last; i++)
            if (cand_better(&c[i], &pivot))
                swap_cand(&c[i], &c[store++]);
        swap_cand(&c[store], &c[last]);
        /* Now [lo, store) beat the pivot, which sits at store. */
        if (k < store)
            hi = store;
        else if (k > store + 1)
            lo = store + 1;
        else
            return;
    }
    sampler_sort_best_first(c + lo, hi - lo);
}

/* Sorting all candidates for top-p would cost O(n log n) on 150k-token
 * vocabularies every step, though the nucleus is usually a few dozen
 * tokens. So: total the probability mass once, then repeatedly select the
 * next batch of best candidates from the unsorted tail, sort only that
 * batch and keep summing; batches double, so a wide nucleus still costs
 * O(n log n) at most. */
int32_t sampler_top_p(sampler_cand *c, int32_t n, float max, double p)
{
    double z = 0.0;
    for (int32_t i = 0; i < n; i++)
        z += exp((double)c[i].logit - (double)max);
    double target = p * z, cum = 0.0;
    int32_t sorted = 0, batch = 64;
    while (sorted < n) {
        int32_t b = n - sorted < batch ? n - sorted : batch;
        sampler_select_best(c + sorted, n - sorted, b);
        sampler_sort_best_first(c + sorted, b);
        for (int32_t i = sorted; i < sorted + b; i++) {
            cum += exp((double)c[i].logit - (double)max);
            if (cum >= target)
                return i + 1;
        }
        sorted += b;
        batch = batch > INT32_MAX / 2 ? INT32_MAX : batch * 2;
    }
    return n; /* rounding kept the sum just under p * z: keep everything */
}

int32_t sampler_min_p(sampler_cand *c, int32_t n, float max, double min_p)
{
    double floor_logit = log(min_p);
    int32_t kept = 0;
    for (int32_t i = 0; i < n; i++)
        if ((double)c[i].logit - (double)max >= floor_logit)
            c[kept++] = c[i];
    return kept;
}
