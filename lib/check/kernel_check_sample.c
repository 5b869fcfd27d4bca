/* The kernel check of sampling on the device: for every parameter mix
 * (greedy, temperature, top-k, top-p, min-p, penalties, logit bias, an
 * allowed-token mask as a grammar sets it, ties,
 * -inf logits, extreme temperatures, the error rows) the device's token
 * must be the CPU sampler's token for the same logits and stream position,
 * step after step, and a row's token must not change when it is sampled
 * alone instead of in its batch. With perf, the op is timed on a
 * 151936-token vocabulary. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "check/kernel_check_internal.h"
#include "core/check.h"
#include "engine/sampler.h"

enum { GEN_NORMAL = 0, GEN_TIES, GEN_HALF_NEG_INF, GEN_PEAKED, GEN_NAN, GEN_POS_INF, GEN_ALL_NEG_INF,
       GEN_HUGE };

typedef struct {
    const char *name;
    int64_t vocab;
    int rows, steps;
    int gen;
    double temp;
    int32_t top_k;
    double top_p, min_p, rep, pres, freq;
    int bias;     /* 0 none, 1 bans and boosts, 2 ban everything */
    int history;  /* tokens accepted before the first step (penalties) */
    int mask;     /* 0 none, 1 a grammar-like mask (few ids, new each step), 2 none allowed */
    int mix;      /* rows 1, 4, .. greedy and rows 2, 5, .. temperature alone: a batch
                   * whose rows need different kernels */
} sample_case;

/* A row's allowed-token mask at a step: a few ids scattered over the
 * vocabulary (a grammar's step: mostly banned), or none; n_bits stops
 * short of the vocabulary so the ids past it are banned too. */
static int32_t make_mask(const sample_case *c, int r, int step, uint32_t *bits)
{
    int64_t words = (c->vocab + 31) / 32;
    memset(bits, 0, (size_t)words * sizeof *bits);
    if (c->mask == 2)
        return (int32_t)c->vocab;
    for (int64_t i = 0; i < c->vocab; i++) {
        uint64_t h = (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(r * 131 + step);
        if (h % 29 == 0 || i == (int64_t)(step * 17 + r) % c->vocab)
            bits[i / 32] |= 1u << (i % 32);
    }
    return (int32_t)(c->vocab - 5);
}

static void gen_logits(kc *k, const sample_case *c, float *l)
{
    for (int64_t i = 0; i < c->vocab; i++) {
        float r = rng_normal(&k->rng);
        switch (c->gen) {
        case GEN_TIES: l[i] = roundf(r * 16.0f) / 8.0f; break;
        case GEN_HALF_NEG_INF: l[i] = (rng_next_u64(&k->rng) & 1) ? -INFINITY : r * 2.0f; break;
        case GEN_PEAKED: l[i] = r * 3.0f + (i % 997 == 5 ? 12.0f : 0.0f); break;
        case GEN_ALL_NEG_INF: l[i] = -INFINITY; break;
        case GEN_HUGE: l[i] = r; break;
        default: l[i] = r * 2.0f; break;
        }
    }
    if (c->gen == GEN_NAN)
        l[c->vocab / 3] = NAN;
    if (c->gen == GEN_POS_INF)
        l[c->vocab - 2] = INFINITY;
    if (c->gen == GEN_HUGE) /* the second bias entry's id (make_bias): 3e38 + 3e38 */
        l[c->vocab / 23 + 2] = 3.0e38f;
}

/* The case's sampler for row r: the same parameters for the CPU and the
 * device copies, each row its own seed. */
static sampler *make_sampler(const sample_case *c, int r, sampler_logit_bias *bias, int n_bias)
{
    sampler_params p = sampler_params_default();
    p.temperature = c->temp;
    p.top_k = c->top_k;
    p.top_p = c->top_p;
    p.min_p = c->min_p;
    if (c->mix && r % 3 == 1)
        p.temperature = 0;
    if (c->mix && r % 3 == 2) {
        p.top_k = 0;
        p.top_p = 1;
    }
    p.repetition_penalty = c->rep;
    p.presence_penalty = c->pres;
    p.frequency_penalty = c->freq;
    p.penalty_last_n = 16;
    p.seed = 1000 + (uint64_t)r * 7919;
    p.logit_bias = bias;
    p.n_logit_bias = n_bias;
    memra_err err;
    sampler *s = sampler_new(&p, (int32_t)c->vocab, &err);
    for (int h = 0; s && h < c->history; h++)
        sampler_accept(s, (int32_t)((h * 7 + r * 3) % c->vocab), &err);
    return s;
}

/* The bias list of a case: a few bans and boosts, or every token banned. */
static int make_bias(const sample_case *c, sampler_logit_bias *b)
{
    if (c->bias == 2) {
        for (int64_t i = 0; i < c->vocab; i++)
            b[i] = (sampler_logit_bias){(int32_t)i, -INFINITY};
        return (int)c->vocab;
    }
    if (c->bias != 1)
        return 0;
    int n = 0;
    for (int64_t i = 1; i < c->vocab && n < 24; i += c->vocab / 23 + 1) {
        float v = n % 3 == 0 ? -INFINITY : (n % 3 == 1 ? 2.5f : -1.5f);
        if (c->gen == GEN_HUGE && n == 1)
            v = 3.0e38f; /* may overflow a huge logit to +inf */
        b[n++] = (sampler_logit_bias){(int32_t)i, v};
    }
    return n;
}

/* One device call for rows [0, n) of logits `host` with the samplers'
 * exported state; out [n]. */
static int device_sample(kc *k, const sample_case *c, const float *host, int n, sampler **smp,
                         smp_outcome *out, memra_err *err)
{
    size_t nl = (size_t)n * (size_t)c->vocab;
    smp_row *rows = xcalloc((size_t)n, sizeof *rows);
    size_t nb = 0, np = 0, nm = 0, cap = 16;
    for (int r = 0; r < n; r++) {
        const smp_bias *b;
        const smp_pen *p;
        const uint32_t *m;
        sampler_row_export(smp[r], &rows[r], &b, &p, &m);
        cap += (size_t)rows[r].n_bias + (size_t)rows[r].n_pen + (size_t)rows[r].n_mask;
    }
    smp_bias *bias = xmalloc(cap * sizeof *bias);
    smp_pen *pen = xmalloc(cap * sizeof *pen);
    uint32_t *mask = xmalloc(cap * sizeof *mask);
    for (int r = 0; r < n; r++) {
        const smp_bias *b;
        const smp_pen *p;
        const uint32_t *m;
        sampler_row_export(smp[r], &rows[r], &b, &p, &m);
        if (rows[r].n_bias)
            memcpy(bias + nb, b, (size_t)rows[r].n_bias * sizeof *b);
        if (rows[r].n_pen)
            memcpy(pen + np, p, (size_t)rows[r].n_pen * sizeof *p);
        if (rows[r].n_mask)
            memcpy(mask + nm, m, (size_t)rows[r].n_mask * sizeof *m);
        rows[r].bias_at = (int32_t)nb;
        rows[r].pen_at = (int32_t)np;
        rows[r].mask_at = (int32_t)nm;
        nb += (size_t)rows[r].n_bias;
        np += (size_t)rows[r].n_pen;
        nm += (size_t)rows[r].n_mask;
    }
    float *dl = kc_dev(k, host, nl);
    int rc = k->gpu->ops->sample(k->gpu, dl, n, c->vocab, rows, bias, pen, mask, out, err);
    kc_dev_free(k, dl);
    free(rows);
    free(bias);
    free(pen);
    free(mask);
    return rc;
}

static void sample_case_run(kc *k, const sample_case *c)
{
    int n = c->rows;
    size_t nl = (size_t)n * (size_t)c->vocab;
    float *l = xmalloc(nl * sizeof *l), *work = xmalloc(nl * sizeof *work);
    sampler_logit_bias *bias = xmalloc((size_t)(c->vocab + 32) * sizeof *bias);
    int n_bias = make_bias(c, bias);
    sampler **cpu = xcalloc((size_t)n, sizeof *cpu), **gpu = xcalloc((size_t)n, sizeof *gpu);
    for (int r = 0; r < n; r++) {
        cpu[r] = make_sampler(c, r, bias, n_bias);
        gpu[r] = make_sampler(c, r, bias, n_bias);
    }
    smp_outcome *out = xcalloc((size_t)n, sizeof *out);
    uint32_t *bits = xmalloc((size_t)((c->vocab + 31) / 32) * sizeof *bits);
    int draws = 0, same = 0, inv = 1, errors = 0;
    char detail[2304] = "";
    memra_err err = {{0}};
    for (int step = 0; step < c->steps; step++) {
        gen_logits(k, c, l);
        for (int r = 1; r < n; r++)
            gen_logits(k, c, l + (size_t)r * (size_t)c->vocab);
        for (int r = 0; c->mask && r < n; r++) {
            int32_t n_bits = make_mask(c, r, step, bits);
            sampler_set_mask(cpu[r], bits, n_bits);
            sampler_set_mask(gpu[r], bits, n_bits);
        }
        if (device_sample(k, c, l, n, gpu, out, &err) != 0) {
            snprintf(detail, sizeof detail, "sample op: %s", err.msg);
            same = -1;
            break;
        }
        /* each row alone (the same stream position: not yet advanced) */
        for (int r = 0; r < n; r++) {
            smp_outcome one;
            if (device_sample(k, c, l + (size_t)r * (size_t)c->vocab, 1, &gpu[r], &one, &err) !=
                    0 ||
                memcmp(&one, &out[r], sizeof one) != 0)
                inv = 0;
        }
        memcpy(work, l, nl * sizeof *l);
        for (int r = 0; r < n; r++) {
            memra_err ec = {{0}}, eg = {{0}};
            int32_t want = sampler_sample(cpu[r], work + (size_t)r * (size_t)c->vocab, &ec);
            int32_t got = sampler_row_done(gpu[r], &out[r], &eg);
            draws++;
            errors += want < 0;
            if (got == want && (want >= 0 || strcmp(ec.msg, eg.msg) == 0)) {
                same++;
            } else if (!detail[0]) {
                snprintf(detail, sizeof detail, "step %d row %d: device %d (%s), cpu %d (%s)",
                         step, r, got, eg.msg, want, ec.msg);
            }
            if (want >= 0) {
                sampler_accept(cpu[r], want, &ec);
                sampler_accept(gpu[r], want, &ec);
            }
        }
    }
    char what[96];
    snprintf(what, sizeof what, "%s V=%" PRId64 " x%d", c->name, c->vocab, n);
    if (!detail[0])
        snprintf(detail, sizeof detail, "%d of %d tokens as the CPU's%s%s", same, draws,
                 errors ? " (errors alike)" : "", inv ? ", batch-invar" : ", BATCH-DIFFERS");
    kc_report_ok(k, "sample", what, same == draws && inv, detail);
    for (int r = 0; r < n; r++) {
        sampler_free(cpu[r]);
        sampler_free(gpu[r]);
    }
    free(cpu);
    free(gpu);
    free(out);
    free(bits);
    free(bias);
    free(l);
    free(work);
}

/* Time per call on real vocabularies (Qwen3's and Qwen3.5's), one row
 * and eight. */
static void sample_perf(kc *k)
{
    static const struct {
        const char *name;
        double temp, top_p, min_p;
        int32_t top_k;
    } cfg[] = {
        {"greedy", 0, 1, 0, 0},
        {"T 0.8", 0.8, 1, 0, 0},
        {"T 0.8 k40 p0.95 m0.05", 0.8, 0.95, 0.05, 40},
        {"T 1 p0.99", 1.0, 0.99, 0, 0},
    };
    static const int64_t vocabs[] = {151936, 248320};
    const int64_t VMAX = 248320;
    float *l = xmalloc(8 * (size_t)VMAX * sizeof *l);
    for (size_t i = 0; i < 8 * (size_t)VMAX; i++)
        l[i] = rng_normal(&k->rng) * 3.0f;
    float *dl = kc_dev(k, l, 8 * (size_t)VMAX);
    for (size_t vi = 0; vi < MEMRA_ARRAY_LEN(vocabs); vi++) {
        for (size_t c = 0; c < MEMRA_ARRAY_LEN(cfg); c++)
            for (int n = 1; n <= 8; n += 7) {
                sampler_params p = sampler_params_default();
                p.temperature = cfg[c].temp;
                p.top_p = cfg[c].top_p;
                p.min_p = cfg[c].min_p;
                p.top_k = cfg[c].top_k;
                memra_err err;
                const int64_t V = vocabs[vi];
                sampler *s = sampler_new(&p, (int32_t)V, &err);
                smp_row rows[8];
                const smp_bias *b;
                const smp_pen *pp;
                const uint32_t *mk;
                for (int r = 0; r < n; r++)
                    sampler_row_export(s, &rows[r], &b, &pp, &mk);
                smp_outcome out[8];
                double us = -1;
                KC_TIME(k, us, k->gpu->ops->sample(k->gpu, dl, n, V, rows, NULL, NULL, NULL, out,
                                                   &err));
                char what[96];
                snprintf(what, sizeof what, "perf %s V=%" PRId64 " x%d", cfg[c].name, V, n);
                kc_report(k, "sample", what, 0, 0, -1, us, (double)n * (double)V * 4.0);
                sampler_free(s);
            }
    }
    kc_dev_free(k, dl);
    free(l);
}

void kc_check_sample(kc *k)
{
    static const sample_case cases[] = {
        /* name        vocab  rows steps gen            temp  top_k top_p min_p rep pres freq bias hist mask */
        {"greedy", 1000, 3, 3, GEN_NORMAL, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"greedy ties", 4099, 2, 3, GEN_TIES, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"temp 1", 4099, 3, 4, GEN_NORMAL, 1.0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"top-k 40 T0.7", 50257, 2, 3, GEN_NORMAL, 0.7, 40, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"top-k ties", 4099, 2, 3, GEN_TIES, 1.0, 7, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"top-p 0.9 T1.3", 50257, 2, 3, GEN_NORMAL, 1.3, 0, 0.9, 0, 1, 0, 0, 0, 0, 0, 0},
        {"top-p 0.5 ties", 4099, 3, 3, GEN_TIES, 1.0, 0, 0.5, 0, 1, 0, 0, 0, 0, 0, 0},
        {"top-p 0 (best)", 1000, 2, 2, GEN_TIES, 1.0, 0, 0.0, 0, 1, 0, 0, 0, 0, 0, 0},
        {"min-p 0.05", 4099, 2, 3, GEN_NORMAL, 0.9, 0, 1, 0.05, 1, 0, 0, 0, 0, 0, 0},
        {"k+p+min-p", 32000, 3, 3, GEN_PEAKED, 0.8, 100, 0.95, 0.02, 1, 0, 0, 0, 0, 0, 0},
        {"top-k V-1", 1000, 2, 2, GEN_NORMAL, 1.0, 999, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"penalties+bias", 32000, 3, 4, GEN_NORMAL, 0.8, 50, 0.95, 0.02, 1.2, 0.3, 0.2, 1, 40, 0, 0},
        {"greedy+penalties", 4099, 2, 4, GEN_TIES, 0, 0, 1, 0, 1.5, 0.5, 0.5, 1, 30, 0, 0},
        {"half -inf", 4099, 2, 3, GEN_HALF_NEG_INF, 1.0, 20, 0.9, 0, 1, 0, 0, 0, 0, 0, 0},
        {"T 1e-30", 1000, 2, 2, GEN_NORMAL, 1e-30, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"T 1e30", 1000, 2, 2, GEN_NORMAL, 1e30, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"peaked 151936", 151936, 2, 2, GEN_PEAKED, 1.0, 0, 0.95, 0, 1, 0, 0, 0, 0, 0, 0},
        /* the scan's slices: ties across them, rows not 16-byte aligned,
         * a bad logit in a middle slice */
        {"greedy ties 50257", 50257, 3, 3, GEN_TIES, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"greedy ties 248320", 248320, 2, 2, GEN_TIES, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"error: NaN 151936", 151936, 2, 1, GEN_NAN, 1.0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"error: +inf 50257", 50257, 3, 1, GEN_POS_INF, 0.0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"error: NaN", 1000, 2, 1, GEN_NAN, 1.0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"error: +inf", 1000, 2, 1, GEN_POS_INF, 0.0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"error: all -inf", 1000, 1, 1, GEN_ALL_NEG_INF, 1.0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"error: all banned", 64, 2, 1, GEN_NORMAL, 1.0, 0, 1, 0, 1, 0, 0, 2, 0, 0, 0},
        {"error: bias to +inf", 1000, 2, 2, GEN_HUGE, 1.0, 0, 1, 0, 1, 0, 0, 1, 0, 0, 0},
        /* the allowed-token mask (a grammar's step), alone and with everything */
        {"mask greedy", 4099, 3, 4, GEN_NORMAL, 0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0},
        {"mask T0.8 k+p", 151936, 3, 3, GEN_PEAKED, 0.8, 40, 0.95, 0, 1, 0, 0, 0, 0, 1, 0},
        {"mask+penalties+bias", 32000, 3, 4, GEN_NORMAL, 0.8, 50, 0.95, 0.02, 1.2, 0.3, 0.2, 1,
         40, 1, 0},
        {"error: mask bans all", 1000, 2, 1, GEN_NORMAL, 1.0, 0, 1, 0, 1, 0, 0, 0, 0, 2, 0},
        /* the later stages' slices (2,048 ids and up): cut keys whose ties
         * span slices, a batch whose rows need different kernels */
        {"top-k ties 50257", 50257, 2, 2, GEN_TIES, 1.0, 3000, 1, 0, 1, 0, 0, 0, 0, 0, 0},
        {"top-p ties 50257", 50257, 2, 3, GEN_TIES, 0.7, 0, 0.6, 0, 1, 0, 0, 0, 0, 0, 0},
        {"k+p ties 32000", 32000, 2, 2, GEN_TIES, 1.0, 8000, 0.3, 0, 1, 0, 0, 0, 0, 0, 0},
        {"mixed rows k+p", 32000, 6, 3, GEN_PEAKED, 0.9, 60, 0.9, 0.01, 1, 0, 0, 0, 0, 0, 1},
        {"mixed rows +penalties", 4099, 5, 3, GEN_NORMAL, 1.1, 0, 0.8, 0, 1.2, 0, 0, 1, 20, 0,
         1},
    };
    for (size_t c = 0; c < MEMRA_ARRAY_LEN(cases); c++)
        sample_case_run(k, &cases[c]);
    /* Lists naming ids outside the vocabulary are refused before launch. */
    smp_row row = {.temperature = 0, .n_bias = 1};
    smp_bias bad = {1000, 1.0f};
    smp_outcome out;
    memra_err err = {{0}};
    float host[8] = {0};
    float *dl = kc_dev(k, host, 8);
    int rc = k->gpu->ops->sample(k->gpu, dl, 1, 8, &row, &bad, NULL, NULL, &out, &err);
    kc_report_ok(k, "sample", "bias id outside the vocabulary",
                 rc != 0 && strstr(err.msg, "1000") && backend_status(k->gpu, &err) == 0,
                 err.msg);
    /* A mask that does not cover the vocabulary is refused too. */
    smp_row mrow = {.temperature = 0, .n_mask = 2};
    uint32_t words[2] = {~0u, ~0u};
    err.msg[0] = 0;
    rc = k->gpu->ops->sample(k->gpu, dl, 1, 8, &mrow, NULL, NULL, words, &out, &err);
    kc_dev_free(k, dl);
    kc_report_ok(k, "sample", "mask of the wrong length",
                 rc != 0 && strstr(err.msg, "mask of 2 words") && backend_status(k->gpu, &err) == 0,
                 err.msg);
    if (k->o->perf)
        sample_perf(k);
}
