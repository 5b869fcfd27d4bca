#include "engine/sampler_select.h"

#include <math.h>
#include <stdlib.h>

#include "numerics/sample_math.h"
#include "numerics/sample_weights.h"

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

/* A bounded heap with the worst kept candidate on top: one pass over the
 * vocabulary, and after the first few thousand tokens nearly every logit
 * fails the single comparison with the top, so small k costs about as much
 * as finding the max. Ids arrive in ascending order, so an equal logit
 * never displaces a kept one: the lower id wins, as in the total order. */
static void heap_sift_down(sampler_cand *h, int32_t n, int32_t i)
{
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, worst = i;
        if (l < n && cand_better(&h[worst], &h[l]))
            worst = l;
        if (r < n && cand_better(&h[worst], &h[r]))
            worst = r;
        if (worst == i)
            return;
        swap_cand(&h[i], &h[worst]);
        i = worst;
    }
}

static void heap_sift_up(sampler_cand *h, int32_t i)
{
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!cand_better(&h[parent], &h[i]))
            return;
        swap_cand(&h[parent], &h[i]);
        i = parent;
    }
}

int32_t sampler_top_k_scan(const float *logits, int32_t n_vocab, int32_t k, sampler_cand *out)
{
    int32_t n = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        if (!(l > -INFINITY))
            continue;
        if (n < k) {
            out[n] = (sampler_cand){l, i};
            heap_sift_up(out, n++);
        } else if (l > out[0].logit) {
            out[0] = (sampler_cand){l, i};
            heap_sift_down(out, n, 0);
        }
    }
    return n;
}

/* A candidate's top-p weight: its exact fixed-point mass at temperature 1. */
static uint64_t mass_of(const sampler_cand *c, float max)
{
    return smp_weight(smp_dist(c->logit, max, 1.0));
}

/* Top-p over few candidates: sort them all and sum best first. */
static int32_t top_p_sorted(sampler_cand *c, int32_t n, float max, uint64_t p)
{
    sampler_sort_best_first(c, n);
    smp_u128 z = smp_u128_of(0), cum = smp_u128_of(0);
    for (int32_t i = 0; i < n; i++)
        z = smp_add64(z, mass_of(&c[i], max));
    smp_u128 target = smp_top_p_target(z, p);
    for (int32_t i = 0; i < n; i++) {
        cum = smp_add64(cum, mass_of(&c[i], max));
        if (!smp_lt(cum, target))
            return i + 1;
    }
    return n; /* not reached: target <= z */
}

#define TOP_P_BUCKETS 1024
#define TOP_P_SORT_MAX 512

static int32_t top_p_bucket(double d, double scale)
{
    double b = d * scale;
    return b >= TOP_P_BUCKETS - 1 ? TOP_P_BUCKETS - 1 : (int32_t)b;
}

/* Sorting every candidate for top-p would cost O(n log n) on 150k-token
 * vocabularies each step, though the nucleus is usually small. Instead:
 * bucket the candidates by distance below the max (equal-width buckets,
 * so a lower bucket holds only strictly better tokens), total the exact
 * mass per bucket, find the bucket where the running sum crosses the
 * target, keep every bucket before it and sort only the crossing bucket
 * to find where inside it the sum reaches the target. Linear plus one
 * bucket's sort; exact sums make it agree with sorting everything. */
int32_t sampler_top_p(sampler_cand *c, int32_t n, float max, uint64_t p, uint64_t *w)
{
    if (n <= TOP_P_SORT_MAX)
        return top_p_sorted(c, n, max, p);
    static const smp_u128 zero = {0, 0};
    smp_u128 mass[TOP_P_BUCKETS];
    for (int b = 0; b < TOP_P_BUCKETS; b++)
        mass[b] = zero;
    float min = max;
    for (int32_t i = 0; i < n; i++)
        if (c[i].logit < min)
            min = c[i].logit;
    double range = (double)max - (double)min;
    double scale = range > 0.0 ? (TOP_P_BUCKETS - 1) / range : 0.0;
    smp_u128 z = zero;
    smp_weights(&c[0].logit, sizeof *c / sizeof(float), n, max, 1.0, w);
    for (int32_t i = 0; i < n; i++) {
        int32_t b = top_p_bucket((double)max - (double)c[i].logit, scale);
        mass[b] = smp_add64(mass[b], w[i]);
        z = smp_add64(z, w[i]);
    }
    smp_u128 target = smp_top_p_target(z, p), cum = zero;
    int32_t cross = TOP_P_BUCKETS - 1;
    for (int b = 0; b < TOP_P_BUCKETS; b++) {
        if (!smp_lt(smp_add(cum, mass[b]), target) && !smp_is_zero(mass[b])) {
            cross = b;
            break;
        }
        cum = smp_add(cum, mass[b]);
    }
    /* Three-way partition: buckets before the crossing one, the crossing
     * one, the rest. */
    int32_t lo = 0, mid = 0, hi = n;
    while (mid < hi) {
        int32_t b = top_p_bucket((double)max - (double)c[mid].logit, scale);
        if (b < cross)
            swap_cand(&c[lo++], &c[mid++]);
        else if (b == cross)
            mid++;
        else
            swap_cand(&c[mid], &c[--hi]);
    }
    sampler_sort_best_first(c + lo, mid - lo);
    for (int32_t i = lo; i < mid; i++) {
        cum = smp_add64(cum, mass_of(&c[i], max));
        if (!smp_lt(cum, target))
            return i + 1;
    }
    return mid; /* not reached: the crossing bucket reaches the target */
}

int32_t sampler_min_p(sampler_cand *c, int32_t n, float max, double floor_logit)
{
    int32_t kept = 0;
    for (int32_t i = 0; i < n; i++)
        if ((double)c[i].logit - (double)max >= floor_logit)
            c[kept++] = c[i];
    return kept;
}
