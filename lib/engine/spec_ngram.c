/* The n-gram drafter (prompt lookup): no model, only the context. When
 * the context's last n tokens occurred before, the tokens that followed
 * their latest earlier occurrence are proposed. Text that quotes its
 * context (code edits, agents re-reading files, repetitive prose) makes
 * this a cheap drafter with high acceptance; elsewhere it proposes
 * nothing and the round is a plain step.
 *
 * The search is a backwards scan of the context for each n from max_n
 * down to min_n, longest first (a longer match predicts better): at most
 * n_ctx x max_n comparisons a round, small next to a forward. */
#include "engine/spec.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

typedef struct {
    int min_n, max_n;
    double one[SPEC_K_MAX]; /* the point masses' probability */
} ngram;

static int ng_begin(spec_drafter *d, const int32_t *prompt, int64_t n, const sampler_params *sp,
                    memra_err *err)
{
    (void)d, (void)prompt, (void)n, (void)sp, (void)err;
    return 0;
}

/* Where the latest earlier occurrence of ctx's last n tokens ends, or -1. */
static int64_t find_latest(const int32_t *ctx, int64_t len, int n)
{
    const int32_t *tail = ctx + len - n;
    for (int64_t j = len - n - 1; j >= 0; j--)
        if (ctx[j] == tail[0] && memcmp(ctx + j, tail, (size_t)n * sizeof *ctx) == 0)
            return j + n;
    return -1;
}

static int ng_propose(spec_drafter *d, const int32_t *ctx, int64_t n, int k, spec_rng *r,
                      spec_draft *out, memra_err *err)
{
    (void)r, (void)err;
    ngram *g = d->impl;
    out->n = 0;
    for (int len = g->max_n; len >= g->min_n; len--) {
        if (len >= n)
            continue;
        int64_t at = find_latest(ctx, n, len);
        if (at < 0)
            continue;
        /* The continuation may run into the context's tail itself (a
         * repeating pattern): it stops at the newest token. */
        for (int64_t i = at; i < n && out->n < k; i++) {
            int j = out->n++;
            out->tokens[j] = ctx[i];
            out->q[j] = (spec_dist){&out->tokens[j], &g->one[j], 1};
        }
        break;
    }
    return 0;
}

static void ng_free(spec_drafter *d)
{
    free(d->impl);
    free(d);
}

int spec_drafter_ngram_new(int min_n, int max_n, spec_drafter **out, memra_err *err)
{
    if (min_n < 1 || max_n < min_n || max_n > 8)
        return memra_fail(err, "n-gram drafter: n from %d to %d is not within 1 <= min <= max "
                          "<= 8", min_n, max_n);
    ngram *g = xcalloc(1, sizeof *g);
    g->min_n = min_n;
    g->max_n = max_n;
    for (int i = 0; i < SPEC_K_MAX; i++)
        g->one[i] = 1.0;
    spec_drafter *d = xcalloc(1, sizeof *d);
    *d = (spec_drafter){.kind = "ngram", .impl = g, .begin = ng_begin, .propose = ng_propose,
                        .free = ng_free};
    *out = d;
    return 0;
}
