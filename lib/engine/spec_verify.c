/* The verification step of speculative decoding (spec.h): the modified
 * rejection sampling of Leviathan et al. and Chen et al., and the
 * request's random stream it draws from.
 *
 * Why it is exact: with x drawn from q, accepted with probability
 * min(1, p(x)/q(x)), the chance of emitting y through acceptance is
 * min(q(y), p(y)); a rejection happens with probability
 * 1 - sum min(p, q) = sum max(0, p - q) = Z, and then y comes from
 * max(0, p - q)/Z, so P(y) = min(p(y), q(y)) + max(0, p(y) - q(y)) = p(y). */
#include "engine/spec.h"

#include <stdlib.h>

#include "core/check.h"
#include "core/philox.h"

/* Philox stream of speculative decoding's uniforms ("spec"), apart from
 * the sampler's (SMP_STREAM), so the two never share a counter. */
#define SPEC_STREAM 0x63657073ull

double spec_uniform(spec_rng *r)
{
    uint64_t x = philox_u64(r->seed, r->n++, SPEC_STREAM);
    return (double)(x >> 11) * (1.0 / 9007199254740992.0);
}

int32_t spec_draw(const spec_dist *d, spec_rng *r)
{
    MEMRA_ASSERT(d->n > 0);
    /* A point mass (greedy, a deterministic drafter) draws nothing. */
    if (d->n == 1)
        return d->ids[0];
    double u = spec_uniform(r);
    double total = 0;
    for (int32_t i = 0; i < d->n; i++)
        total += d->probs[i];
    double target = u * total, cum = 0;
    int32_t last = d->ids[d->n - 1];
    for (int32_t i = 0; i < d->n; i++) {
        if (d->probs[i] <= 0)
            continue;
        cum += d->probs[i];
        last = d->ids[i];
        if (target < cum)
            return d->ids[i];
    }
    /* target < total in exact arithmetic; rounding may leave it at the
     * end, where the last id of positive probability is the right one */
    return last;
}

double spec_prob(const spec_dist *d, int32_t id)
{
    int32_t lo = 0, hi = d->n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (d->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < d->n && d->ids[lo] == id ? d->probs[lo] : 0.0;
}

void spec_scratch_free(spec_scratch *s)
{
    free(s->ids);
    free(s->probs);
    s->ids = NULL;
    s->probs = NULL;
    s->cap = 0;
}

static void scratch_reserve(spec_scratch *s, int32_t n)
{
    if (n <= s->cap)
        return;
    s->ids = xrealloc(s->ids, (size_t)n * sizeof *s->ids);
    s->probs = xrealloc(s->probs, (size_t)n * sizeof *s->probs);
    s->cap = n;
}

int spec_verify_token(const spec_dist *p, const spec_dist *q, int32_t x, spec_rng *r,
                      spec_scratch *s, int32_t *repl)
{
    MEMRA_ASSERT(p->n > 0);
    /* A point mass (greedy): min(1, p(x)/q(x)) is 1 for its id and 0 for
     * any other, and the residual is the point mass itself, so no uniform
     * is needed and none is drawn. */
    if (p->n == 1) {
        if (x == p->ids[0])
            return 1;
        *repl = p->ids[0];
        return 0;
    }
    double px = spec_prob(p, x), qx = spec_prob(q, x);
    double u = spec_uniform(r);
    /* u < p(x)/q(x) without the division (qx > 0 for a token drawn from
     * q). A deterministic drafter's point mass has q(x) = 1: x is kept
     * with probability p(x) and the residual is p without x. */
    if (u * qx < px)
        return 1;
    /* The residual max(0, p - q) over p's support (q's other ids give 0),
     * merged in id order since both lists are sorted. */
    scratch_reserve(s, p->n);
    int32_t n = 0, j = 0;
    for (int32_t i = 0; i < p->n; i++) {
        int32_t id = p->ids[i];
        while (j < q->n && q->ids[j] < id)
            j++;
        double qi = j < q->n && q->ids[j] == id ? q->probs[j] : 0.0;
        double v = p->probs[i] - qi;
        if (v > 0) {
            s->ids[n] = id;
            s->probs[n] = v;
            n++;
        }
    }
    /* Z is the rejection probability: when rounding leaves nothing,
     * p and q agree to the last bit and p itself is the residual's limit. */
    spec_dist res = {s->ids, s->probs, n};
    *repl = spec_draw(n > 0 ? &res : p, r);
    return 0;
}
