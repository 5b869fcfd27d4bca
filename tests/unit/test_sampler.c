#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "core/rng.h"
#include "engine/sampler.h"
#include "numerics/logit_scan.h"
#include "numerics/sample_weights.h"
#include "test.h"

/* Logits whose softmax is {0.15, 0.5, 0.05, 0.3}: hand-checkable sets for
 * top-k/top-p/min-p (best first: id 1, 3, 0, 2). */
static void four_logits(float *l)
{
    l[0] = logf(0.15f);
    l[1] = logf(0.5f);
    l[2] = logf(0.05f);
    l[3] = logf(0.3f);
}

static sampler *make(const sampler_params *p, int32_t n_vocab)
{
    memra_err e = {{0}};
    sampler *s = sampler_new(p, n_vocab, &e);
    CHECK_MSG(s != NULL, "%s", e.msg);
    return s;
}

/* The kept ids (ascending) and probabilities for one parameter set. */
static int32_t probs_of(const sampler_params *p, const float *logits_in, int32_t nv, int32_t *ids,
                        double *probs)
{
    sampler *s = make(p, nv);
    if (!s)
        return -1;
    float *l = malloc((size_t)nv * sizeof *l);
    memcpy(l, logits_in, (size_t)nv * sizeof *l);
    const int32_t *oi;
    const double *op;
    int32_t n = -1;
    memra_err e = {{0}};
    int rc = sampler_probs(s, l, &oi, &op, &n, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (rc == 0) {
        memcpy(ids, oi, (size_t)n * sizeof *ids);
        memcpy(probs, op, (size_t)n * sizeof *probs);
    }
    free(l);
    sampler_free(s);
    return rc == 0 ? n : -1;
}

static int near(double a, double b, double tol) { return fabs(a - b) <= tol; }

static void check_set(const sampler_params *p, const float *l, int32_t nv, int32_t n_want,
                      const int32_t *ids_want, const double *probs_want)
{
    int32_t ids[16];
    double probs[16];
    int32_t n = probs_of(p, l, nv, ids, probs);
    CHECK_MSG(n == n_want, "kept %d, want %d", n, n_want);
    if (n != n_want)
        return;
    for (int32_t i = 0; i < n; i++) {
        CHECK_MSG(ids[i] == ids_want[i], "id[%d] = %d, want %d", i, ids[i], ids_want[i]);
        CHECK_MSG(near(probs[i], probs_want[i], 1e-6), "p[%d] = %.9g, want %.9g", i, probs[i],
                  probs_want[i]);
    }
}

static void test_greedy_argmax_and_ties(void)
{
    sampler_params p = sampler_params_default();
    p.temperature = 0;
    sampler *s = make(&p, 6);
    float l[6] = {1.0f, 3.0f, -INFINITY, 3.0f, 2.5f, 3.0f};
    memra_err e;
    CHECK(sampler_sample(s, l, &e) == 1);
    float l2[6] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -7.0f};
    CHECK(sampler_sample(s, l2, &e) == 5);
    float l3[6] = {0, 0, 0, 0, 0, 0};
    CHECK(sampler_sample(s, l3, &e) == 0);
    /* Greedy ignores the filters: they all keep the argmax anyway. */
    sampler_free(s);
    p.top_k = 2;
    p.top_p = 0.1;
    p.min_p = 0.9;
    s = make(&p, 6);
    float l4[6] = {1.0f, 3.0f, -INFINITY, 3.0f, 2.5f, 3.0f};
    CHECK(sampler_sample(s, l4, &e) == 1);
    sampler_free(s);
}

/* top_k = 1 keeps only the best (lowest id among equal logits), so every
 * draw, whatever the seed, is the greedy token. */
static void test_top_k_1_is_greedy(void)
{
    enum { NV = 1000 };
    float l[NV], work[NV];
    rng_state r;
    rng_seed(&r, 7, 0);
    for (int i = 0; i < NV; i++)
        l[i] = roundf(rng_normal(&r)); /* integers: ties, also at the top */
    sampler_params g = sampler_params_default();
    g.temperature = 0;
    sampler *gs = make(&g, NV);
    memra_err e;
    memcpy(work, l, sizeof l);
    int32_t want = sampler_sample(gs, work, &e);
    sampler_free(gs);
    int first = -1;
    for (int i = 0; i < NV; i++)
        if (l[i] == l[want]) {
            first = i;
            break;
        }
    CHECK(want == first);
    int ties = 0;
    for (int i = 0; i < NV; i++)
        ties += l[i] == l[want];
    CHECK(ties > 1); /* the test data really has a tie at the top */
    for (uint64_t seed = 0; seed < 20; seed++) {
        sampler_params p = sampler_params_default();
        p.top_k = 1;
        p.temperature = 1.5;
        p.seed = seed;
        sampler *s = make(&p, NV);
        for (int k = 0; k < 5; k++) {
            memcpy(work, l, sizeof l);
            CHECK(sampler_sample(s, work, &e) == want);
        }
        sampler_free(s);
    }
}

/* Draw many tokens and compare the counts with the expected probabilities.
 * The seed is fixed, so the statistic is a fixed number; the bound is the
 * 0.999 quantile of chi-square, which a wrong distribution (e.g. the
 * temperature ignored) exceeds by orders of magnitude. */
static double chi_square(const sampler_params *p, const float *logits, int32_t nv,
                         const double *expect, int draws)
{
    sampler *s = make(p, nv);
    if (!s)
        return INFINITY;
    int counts[16] = {0};
    float work[16];
    memra_err e;
    for (int d = 0; d < draws; d++) {
        memcpy(work, logits, (size_t)nv * sizeof *work);
        int32_t id = sampler_sample(s, work, &e);
        CHECK(id >= 0 && id < nv);
        if (id >= 0 && id < nv)
            counts[id]++;
    }
    sampler_free(s);
    double chi = 0;
    for (int i = 0; i < nv; i++) {
        if (expect[i] == 0) {
            CHECK(counts[i] == 0);
            continue;
        }
        double ex = expect[i] * draws;
        chi += (counts[i] - ex) * (counts[i] - ex) / ex;
    }
    return chi;
}

static void test_temperature_distribution(void)
{
    const float l[5] = {0.0f, 1.0f, 2.0f, 0.5f, -1.0f};
    const double temps[3] = {0.7, 1.0, 2.5};
    for (int t = 0; t < 3; t++) {
        double want[5], z = 0;
        for (int i = 0; i < 5; i++)
            z += want[i] = exp(l[i] / temps[t]);
        for (int i = 0; i < 5; i++)
            want[i] /= z;
        sampler_params p = sampler_params_default();
        p.temperature = temps[t];
        p.seed = 1234 + (uint64_t)t;
        int32_t ids[5];
        double probs[5];
        CHECK(probs_of(&p, l, 5, ids, probs) == 5);
        for (int i = 0; i < 5; i++) {
            CHECK(ids[i] == i);
            CHECK_MSG(near(probs[i], want[i], 1e-6), "T=%g p[%d]=%g want %g", temps[t], i,
                      probs[i], want[i]);
        }
        double chi = chi_square(&p, l, 5, want, 20000);
        CHECK_MSG(chi < 18.47, "T=%g chi-square %g (df 4, 0.999 quantile 18.47)", temps[t], chi);
        /* The same draws judged against the temperature-1 distribution fail
         * clearly, so the bound does discriminate. */
        if (temps[t] != 1.0) {
            double t1[5], z1 = 0;
            for (int i = 0; i < 5; i++)
                z1 += t1[i] = exp(l[i]);
            for (int i = 0; i < 5; i++)
                t1[i] /= z1;
            CHECK(chi_square(&p, l, 5, t1, 20000) > 100);
        }
    }
    /* Extreme temperatures stay finite: a subnormal one is greedy in effect
     * (its reciprocal would be inf), a huge one uniform. */
    sampler_params x = sampler_params_default();
    x.temperature = 1e-310;
    check_set(&x, l, 5, 5, (int32_t[]){0, 1, 2, 3, 4}, (double[]){0, 0, 1, 0, 0});
    x.temperature = 1e300;
    check_set(&x, l, 5, 5, (int32_t[]){0, 1, 2, 3, 4}, (double[]){0.2, 0.2, 0.2, 0.2, 0.2});

    /* Truncated sampling draws from the renormalized survivors only. */
    float l4[4];
    four_logits(l4);
    sampler_params p = sampler_params_default();
    p.top_k = 3;
    p.seed = 99;
    const double want[4] = {0.15 / 0.95, 0.5 / 0.95, 0, 0.3 / 0.95};
    double chi = chi_square(&p, l4, 4, want, 20000);
    CHECK_MSG(chi < 13.82, "top_k 3 chi-square %g (df 2, 0.999 quantile 13.82)", chi);
}

static void test_top_k_top_p_min_p_hand(void)
{
    float l[4];
    four_logits(l); /* probabilities {0.15, 0.5, 0.05, 0.3} */
    sampler_params p = sampler_params_default();

    p.top_k = 2;
    check_set(&p, l, 4, 2, (int32_t[]){1, 3}, (double[]){0.625, 0.375});
    p.top_k = 4;
    check_set(&p, l, 4, 4, (int32_t[]){0, 1, 2, 3}, (double[]){0.15, 0.5, 0.05, 0.3});
    p.top_k = 100; /* above n_vocab: off */
    check_set(&p, l, 4, 4, (int32_t[]){0, 1, 2, 3}, (double[]){0.15, 0.5, 0.05, 0.3});
    p.top_k = 0;

    /* Smallest set reaching p: 0.5 < 0.75 <= 0.5 + 0.3. */
    p.top_p = 0.75;
    check_set(&p, l, 4, 2, (int32_t[]){1, 3}, (double[]){0.625, 0.375});
    p.top_p = 0.85; /* 0.8 < 0.85 <= 0.95 */
    check_set(&p, l, 4, 3, (int32_t[]){0, 1, 3}, (double[]){0.15 / 0.95, 0.5 / 0.95, 0.3 / 0.95});
    p.top_p = 0.4;
    check_set(&p, l, 4, 1, (int32_t[]){1}, (double[]){1.0});
    p.top_p = 0.0; /* keeps at least the best */
    check_set(&p, l, 4, 1, (int32_t[]){1}, (double[]){1.0});
    p.top_p = 0.97;
    check_set(&p, l, 4, 4, (int32_t[]){0, 1, 2, 3}, (double[]){0.15, 0.5, 0.05, 0.3});
    /* Exactly reaching p is enough, and among equal logits the lower ids
     * come first: four equal tokens, p = 0.5, keeps ids 0 and 1. */
    const float flat[4] = {0, 0, 0, 0};
    p.top_p = 0.5;
    check_set(&p, flat, 4, 2, (int32_t[]){0, 1}, (double[]){0.5, 0.5});
    p.top_p = 0.97;
    check_set(&p, l, 4, 4, (int32_t[]){0, 1, 2, 3}, (double[]){0.15, 0.5, 0.05, 0.3});

    /* Top-p sees temperature-1 probabilities; the temperature then reshapes
     * the survivors: 0.5^2 : 0.3^2 at T = 0.5. */
    p.top_p = 0.75;
    p.temperature = 0.5;
    check_set(&p, l, 4, 2, (int32_t[]){1, 3}, (double[]){0.25 / 0.34, 0.09 / 0.34});
    p.temperature = 1.0;

    /* Top-k runs first and top-p renormalizes over its survivors:
     * {0.625, 0.375} reaches 0.6 with one token, the full set needs two. */
    p.top_p = 0.6;
    check_set(&p, l, 4, 2, (int32_t[]){1, 3}, (double[]){0.625, 0.375});
    p.top_k = 2;
    check_set(&p, l, 4, 1, (int32_t[]){1}, (double[]){1.0});
    p.top_k = 0;
    p.top_p = 1.0;

    /* Min-p 0.25: floor 0.125 keeps 0.5, 0.3, 0.15; 0.65 keeps 0.5 alone
     * (0.3 / 0.5 = 0.6). */
    p.min_p = 0.25;
    check_set(&p, l, 4, 3, (int32_t[]){0, 1, 3}, (double[]){0.15 / 0.95, 0.5 / 0.95, 0.3 / 0.95});
    p.min_p = 0.65;
    check_set(&p, l, 4, 1, (int32_t[]){1}, (double[]){1.0});
    p.min_p = 1.0;
    check_set(&p, l, 4, 1, (int32_t[]){1}, (double[]){1.0});
    /* Min-p after top-k 3: same floor relative to the max. */
    p.min_p = 0.4; /* floor 0.2: keeps 0.5 and 0.3 */
    p.top_k = 3;
    check_set(&p, l, 4, 2, (int32_t[]){1, 3}, (double[]){0.625, 0.375});

    /* -inf logits are never candidates. */
    sampler_params q = sampler_params_default();
    float l5[5] = {0.0f, -INFINITY, 0.0f, -INFINITY, 0.0f};
    check_set(&q, l5, 5, 3, (int32_t[]){0, 2, 4}, (double[]){1 / 3.0, 1 / 3.0, 1 / 3.0});
}

static void test_penalties_hand(void)
{
    const float base[6] = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
    float l[6];
    memra_err e;
    sampler_params p = sampler_params_default();
    p.temperature = 0;
    p.repetition_penalty = 2.0;
    p.presence_penalty = 0.5;
    p.frequency_penalty = 0.25;
    p.penalty_last_n = -1;
    sampler *s = make(&p, 6);
    const int32_t acc[4] = {0, 1, 1, 4};
    for (int i = 0; i < 4; i++)
        CHECK(sampler_accept(s, acc[i], &e) == 0);
    memcpy(l, base, sizeof l);
    CHECK(sampler_sample(s, l, &e) == 3);
    CHECK(l[0] == 0.25f);  /* 2 / 2 - 0.5 - 0.25 */
    CHECK(l[1] == -3.0f);  /* -1 * 2 - 0.5 - 2 * 0.25 */
    CHECK(l[2] == 0.5f);
    CHECK(l[3] == 3.0f);
    CHECK(l[4] == -4.75f); /* -2 * 2 - 0.5 - 0.25 */
    CHECK(l[5] == 1.0f);
    /* Penalized enough, the argmax moves: id 3 seen three times. */
    for (int i = 0; i < 3; i++)
        sampler_accept(s, 3, &e);
    memcpy(l, base, sizeof l);
    CHECK(sampler_sample(s, l, &e) == 5);
    CHECK(l[3] == 0.25f); /* 3 / 2 - 0.5 - 3 * 0.25 */
    /* Reset forgets the history. */
    sampler_reset(s);
    memcpy(l, base, sizeof l);
    CHECK(sampler_sample(s, l, &e) == 3);
    CHECK(memcmp(l, base, sizeof l) == 0);
    sampler_free(s);

    /* A window of 2 sees only the last two accepted tokens (1 and 4). */
    p.penalty_last_n = 2;
    s = make(&p, 6);
    for (int i = 0; i < 4; i++)
        sampler_accept(s, acc[i], &e);
    memcpy(l, base, sizeof l);
    sampler_sample(s, l, &e);
    CHECK(l[0] == 2.0f);
    CHECK(l[1] == -2.75f);
    CHECK(l[4] == -4.75f);
    sampler_free(s);

    /* A window of 0 turns the penalties off. */
    p.penalty_last_n = 0;
    s = make(&p, 6);
    for (int i = 0; i < 4; i++)
        sampler_accept(s, acc[i], &e);
    memcpy(l, base, sizeof l);
    sampler_sample(s, l, &e);
    CHECK(memcmp(l, base, sizeof l) == 0);
    sampler_free(s);

    /* The bias comes first, then the penalty: (3 + 1) / 2 - 0.5 - 0.25,
     * not 3 / 2 - 0.5 - 0.25 + 1. */
    p.penalty_last_n = 64;
    sampler_logit_bias b = {3, 1.0f};
    p.logit_bias = &b;
    p.n_logit_bias = 1;
    s = make(&p, 6);
    sampler_accept(s, 3, &e);
    memcpy(l, base, sizeof l);
    sampler_sample(s, l, &e);
    CHECK(l[3] == 1.25f);
    sampler_free(s);
}

/* A sliding window over a long history, checked against counting by hand
 * at every step (this crosses the history buffer's compactions). */
static void test_penalty_window_slides(void)
{
    enum { NV = 10, STEPS = 1000, WIN = 5 };
    sampler_params p = sampler_params_default();
    p.temperature = 0;
    p.frequency_penalty = 1.0;
    p.penalty_last_n = WIN;
    sampler *s = make(&p, NV);
    rng_state r;
    rng_seed(&r, 3, 0);
    int32_t hist[STEPS];
    memra_err e;
    int bad = 0;
    for (int step = 0; step < STEPS; step++) {
        hist[step] = (int32_t)(rng_next_u64(&r) % NV);
        sampler_accept(s, hist[step], &e);
        float l[NV] = {0};
        sampler_sample(s, l, &e);
        int want[NV] = {0};
        for (int i = step + 1 - WIN < 0 ? 0 : step + 1 - WIN; i <= step; i++)
            want[hist[i]]++;
        for (int i = 0; i < NV; i++)
            bad += l[i] != (float)-want[i];
    }
    CHECK_MSG(bad == 0, "%d mismatched penalties", bad);
    sampler_free(s);
}

static void test_logit_bias(void)
{
    float l[4];
    memra_err e;
    sampler_logit_bias ban[2] = {{1, -INFINITY}, {3, -INFINITY}};
    sampler_params p = sampler_params_default();
    p.temperature = 0;
    p.logit_bias = ban;
    p.n_logit_bias = 1;
    sampler *s = make(&p, 4);
    four_logits(l);
    CHECK(sampler_sample(s, l, &e) == 3);
    CHECK(l[1] == -INFINITY);
    sampler_free(s);

    /* Banned tokens never come out of a sampled draw either. */
    p.temperature = 1.0;
    p.n_logit_bias = 2;
    s = make(&p, 4);
    int counts[4] = {0};
    for (int i = 0; i < 2000; i++) {
        four_logits(l);
        int32_t id = sampler_sample(s, l, &e);
        CHECK(id == 0 || id == 2);
        if (id >= 0)
            counts[id]++;
    }
    CHECK(counts[0] > counts[2] && counts[2] > 0); /* 0.75 : 0.25 */
    sampler_free(s);

    /* A positive bias can force a token. */
    sampler_logit_bias push = {2, 50.0f};
    p.temperature = 0;
    p.logit_bias = &push;
    p.n_logit_bias = 1;
    s = make(&p, 4);
    four_logits(l);
    CHECK(sampler_sample(s, l, &e) == 2);
    sampler_free(s);

    /* Every token banned: a clear error, not a made-up token. */
    sampler_logit_bias all[4] = {{0, -INFINITY}, {1, -INFINITY}, {2, -INFINITY}, {3, -INFINITY}};
    p.logit_bias = all;
    p.n_logit_bias = 4;
    for (int t = 0; t < 2; t++) {
        p.temperature = t ? 1.0 : 0.0;
        s = make(&p, 4);
        four_logits(l);
        e.msg[0] = 0;
        CHECK(sampler_sample(s, l, &e) == -1);
        CHECK_MSG(strcmp(e.msg, "every token is banned by logit_bias") == 0, "%s", e.msg);
        sampler_free(s);
    }
}

static void draw_seq(const sampler_params *p, const float *l, int32_t nv, int32_t *out, int n)
{
    sampler *s = make(p, nv);
    float *work = malloc((size_t)nv * sizeof *work);
    memra_err e;
    for (int i = 0; i < n; i++) {
        memcpy(work, l, (size_t)nv * sizeof *work);
        out[i] = sampler_sample(s, work, &e);
    }
    free(work);
    sampler_free(s);
}

static void test_seed_reproducible(void)
{
    enum { NV = 300, N = 200 };
    float l[NV];
    rng_state r;
    rng_seed(&r, 11, 0);
    for (int i = 0; i < NV; i++)
        l[i] = rng_normal(&r);
    int32_t a[N], b[N], c[N], d[N];
    sampler_params p = sampler_params_default();
    p.seed = 42;
    draw_seq(&p, l, NV, a, N);
    draw_seq(&p, l, NV, b, N);
    CHECK(memcmp(a, b, sizeof a) == 0);
    p.seed = 43;
    draw_seq(&p, l, NV, c, N);
    int same = 0;
    for (int i = 0; i < N; i++)
        same += a[i] == c[i];
    CHECK_MSG(same < N / 4, "seeds 42 and 43 agree on %d of %d draws", same, N);

    /* The draw walks survivors in id order, so the same surviving set gives
     * the same tokens however it was reached: top_k = n_vocab - 1 (a
     * selection that reorders) against a ban of the worst token (none). */
    int32_t worst = 0;
    for (int i = 1; i < NV; i++)
        if (l[i] < l[worst])
            worst = i;
    sampler_logit_bias ban = {worst, -INFINITY};
    p.seed = 42;
    p.logit_bias = &ban;
    p.n_logit_bias = 1;
    draw_seq(&p, l, NV, c, N);
    p.logit_bias = NULL;
    p.n_logit_bias = 0;
    p.top_k = NV - 1;
    draw_seq(&p, l, NV, d, N);
    CHECK(memcmp(c, d, sizeof c) == 0);

    /* Reset restarts the stream. */
    p.top_k = 0;
    sampler *s = make(&p, NV);
    float work[NV];
    memra_err e;
    for (int i = 0; i < 10; i++) {
        memcpy(work, l, sizeof l);
        sampler_sample(s, work, &e);
    }
    sampler_reset(s);
    for (int i = 0; i < N; i++) {
        memcpy(work, l, sizeof l);
        b[i] = sampler_sample(s, work, &e);
    }
    CHECK(memcmp(a, b, sizeof a) == 0);
    sampler_free(s);
}

static void expect_new_error(const sampler_params *p, int32_t nv, const char *want)
{
    memra_err e = {{0}};
    sampler *s = sampler_new(p, nv, &e);
    CHECK_MSG(s == NULL, "accepted, want \"%s\"", want);
    sampler_free(s);
    CHECK_MSG(strcmp(e.msg, want) == 0, "got \"%s\", want \"%s\"", e.msg, want);
}

static void test_validation(void)
{
    sampler_params d = sampler_params_default(), p;
    p = d; p.temperature = -0.5;
    expect_new_error(&p, 10, "temperature -0.5 is out of range [0, inf)");
    p = d; p.temperature = NAN;
    expect_new_error(&p, 10, "temperature nan is out of range [0, inf)");
    p = d; p.temperature = INFINITY;
    expect_new_error(&p, 10, "temperature inf is out of range [0, inf)");
    p = d; p.top_k = -1;
    expect_new_error(&p, 10, "top_k -1 is out of range [0, inf)");
    p = d; p.top_p = 1.5;
    expect_new_error(&p, 10, "top_p 1.5 is out of range [0, 1]");
    p = d; p.top_p = -0.1;
    expect_new_error(&p, 10, "top_p -0.1 is out of range [0, 1]");
    p = d; p.min_p = 2;
    expect_new_error(&p, 10, "min_p 2 is out of range [0, 1]");
    p = d; p.repetition_penalty = 0;
    expect_new_error(&p, 10, "repetition_penalty 0 is out of range (0, inf)");
    p = d; p.penalty_last_n = -2;
    expect_new_error(&p, 10, "penalty_last_n -2 is out of range [-1, inf)");
    p = d; p.presence_penalty = 2.5;
    expect_new_error(&p, 10, "presence_penalty 2.5 is out of range [-2, 2]");
    p = d; p.frequency_penalty = -3;
    expect_new_error(&p, 10, "frequency_penalty -3 is out of range [-2, 2]");
    expect_new_error(&d, 0, "sampler: n_vocab 0 is out of range [1, 2147483647]");

    sampler_logit_bias b[2] = {{3, 1.0f}, {10, 1.0f}};
    p = d; p.logit_bias = b; p.n_logit_bias = 2;
    expect_new_error(&p, 10, "logit_bias id 10 is out of range [0, 10)");
    b[1].id = -4;
    expect_new_error(&p, 10, "logit_bias id -4 is out of range [0, 10)");
    b[1].id = 3;
    expect_new_error(&p, 10, "logit_bias id 3 appears twice");
    b[1] = (sampler_logit_bias){5, NAN};
    expect_new_error(&p, 10, "logit_bias for id 5 is nan (allowed: finite, or -inf to ban)");
    b[1].bias = INFINITY;
    expect_new_error(&p, 10, "logit_bias for id 5 is inf (allowed: finite, or -inf to ban)");
    p.logit_bias = NULL;
    expect_new_error(&p, 10, "logit_bias has 2 entries but no list");

    /* Edge values that are allowed. */
    p = d; p.temperature = 0; p.top_p = 0; p.min_p = 1; p.penalty_last_n = -1;
    p.presence_penalty = -2; p.frequency_penalty = 2; p.top_k = 1 << 30;
    memra_err e;
    sampler *s = sampler_new(&p, 10, &e);
    CHECK(s != NULL);

    /* Bad input at run time. */
    CHECK(sampler_accept(s, 10, &e) == -1);
    CHECK(strcmp(e.msg, "sampler: accepted token id 10 is out of range [0, 10)") == 0);
    CHECK(sampler_accept(s, -1, &e) == -1);
    float l[10] = {0};
    l[7] = NAN;
    CHECK(sampler_sample(s, l, &e) == -1);
    CHECK_MSG(strcmp(e.msg, "sampler: logit of token 7 is nan") == 0, "%s", e.msg);
    l[7] = INFINITY;
    CHECK(sampler_sample(s, l, &e) == -1);
    CHECK_MSG(strcmp(e.msg, "sampler: logit of token 7 is inf") == 0, "%s", e.msg);
    for (int i = 0; i < 10; i++)
        l[i] = -INFINITY;
    CHECK(sampler_sample(s, l, &e) == -1);
    CHECK_MSG(strcmp(e.msg, "sampler: every logit is -inf") == 0, "%s", e.msg);
    sampler_free(s);
}

/* Reference truncation by sorting everything, to check the partial
 * selections on a real-sized vocabulary. */
typedef struct {
    float l;
    int32_t id;
} ref_cand;

static int ref_cmp(const void *pa, const void *pb)
{
    const ref_cand *a = pa, *b = pb;
    if (a->l != b->l)
        return a->l > b->l ? -1 : 1;
    return (a->id > b->id) - (a->id < b->id);
}

static int int_cmp(const void *pa, const void *pb)
{
    int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
    return (a > b) - (a < b);
}

static int32_t ref_keep(const float *l, int32_t nv, const sampler_params *p, int32_t *ids)
{
    ref_cand *c = malloc((size_t)nv * sizeof *c);
    for (int32_t i = 0; i < nv; i++)
        c[i] = (ref_cand){l[i], i};
    qsort(c, (size_t)nv, sizeof *c, ref_cmp);
    int32_t n = nv;
    if (p->top_k > 0 && p->top_k < n)
        n = p->top_k;
    double max = c[0].l;
    if (p->top_p < 1) {
        double z = 0, cum = 0;
        for (int32_t i = 0; i < n; i++)
            z += exp(c[i].l - max);
        for (int32_t i = 0; i < n; i++) {
            cum += exp(c[i].l - max);
            if (cum >= p->top_p * z) {
                n = i + 1;
                break;
            }
        }
    }
    int32_t m = 0;
    for (int32_t i = 0; i < n; i++)
        if (p->min_p == 0 || exp(c[i].l - max) >= p->min_p)
            ids[m++] = c[i].id;
    qsort(ids, (size_t)m, sizeof *ids, int_cmp);
    free(c);
    return m;
}

static void test_large_vocab_matches_full_sort(void)
{
    enum { NV = 151936 };
    float *l = malloc(NV * sizeof *l);
    int32_t *want = malloc(NV * sizeof *want), *got = malloc(NV * sizeof *got);
    double *probs = malloc(NV * sizeof *probs);
    rng_state r;
    rng_seed(&r, 5, 0);
    /* Coarse steps make plenty of equal logits, so tie-breaking counts. */
    for (int32_t i = 0; i < NV; i++)
        l[i] = roundf(rng_normal(&r) * 3.0f * 64.0f) / 64.0f;
    struct {
        int32_t k;
        double p, m, t;
    } cfg[] = {
        {40, 1, 0, 1},     {1000, 1, 0, 0.8},  {0, 0.9, 0, 1},    {0, 0.999, 0, 1.3},
        {0, 1, 0.05, 1},   {5000, 0.5, 0, 1},  {50000, 0.95, 0.01, 0.7},
        {0, 1, 0.999, 1},  {0, 0.3, 0, 1},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sampler_params p = sampler_params_default();
        p.top_k = cfg[c].k;
        p.top_p = cfg[c].p;
        p.min_p = cfg[c].m;
        p.temperature = cfg[c].t;
        int32_t nw = ref_keep(l, NV, &p, want);
        int32_t ng = probs_of(&p, l, NV, got, probs);
        CHECK_MSG(ng == nw, "config %zu: kept %d, reference %d", c, ng, nw);
        if (ng != nw)
            continue;
        CHECK_MSG(memcmp(got, want, (size_t)nw * sizeof *got) == 0, "config %zu: ids differ", c);
        double max = -INFINITY, z = 0, worst = 0;
        for (int32_t i = 0; i < nw; i++)
            max = fmax(max, l[want[i]]);
        for (int32_t i = 0; i < nw; i++)
            z += exp((l[want[i]] - max) / cfg[c].t);
        for (int32_t i = 0; i < nw; i++)
            worst = fmax(worst, fabs(probs[i] - exp((l[want[i]] - max) / cfg[c].t) / z));
        CHECK_MSG(worst < 1e-12, "config %zu: probability off by %g", c, worst);
    }
    free(l);
    free(want);
    free(got);
    free(probs);
}

/* Philox4x32-10 against the Random123 distribution's known answers
 * (tests/kat_vectors, the three "philox4x32 10" lines: counter, key,
 * expected output). */
static void test_philox_known_answers(void)
{
    static const struct {
        uint32_t ctr[4], key[2], want[4];
    } kat[] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t i = 0; i < sizeof kat / sizeof kat[0]; i++) {
        uint32_t out[4];
        philox4x32_10(kat[i].ctr, kat[i].key, out);
        for (int j = 0; j < 4; j++)
            CHECK_MSG(out[j] == kat[i].want[j], "vector %zu word %d: %08x, want %08x", i, j,
                      out[j], kat[i].want[j]);
    }
    /* philox_u64 is words 0 and 1 for key = seed, counter = (n, stream). */
    uint32_t out[4];
    philox4x32_10((const uint32_t[4]){0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
                  (const uint32_t[2]){0xa4093822, 0x299f31d0}, out);
    CHECK(philox_u64(0x299f31d0a4093822ull, 0x85a308d3243f6a88ull, 0x0370734413198a2eull) ==
          ((uint64_t)out[1] << 32 | out[0]));
}

/* The sampler's own exp: within a few ulp of libm's over its whole range,
 * exact at 0, 0 below the double range and at -inf. */
static void test_smp_exp(void)
{
    double worst = 0;
    rng_state r;
    rng_seed(&r, 9, 0);
    for (int i = 0; i < 200000; i++) {
        double x = -(double)(rng_next_u64(&r) >> 11) * 0x1p-53 * (i % 4 == 0 ? 745.0 : 40.0);
        double got = smp_exp(x), want = exp(x);
        if (want < 0x1p-1022) /* subnormal: compare absolutely */
            CHECK(fabs(got - want) <= 0x1p-1074 * 2);
        else
            worst = fmax(worst, fabs(got - want) / want);
    }
    CHECK_MSG(worst < 4e-16, "smp_exp relative error %g", worst);
    CHECK(smp_exp(0.0) == 1.0);
    CHECK(smp_exp(-INFINITY) == 0.0);
    CHECK(smp_exp(-800.0) == 0.0);
    CHECK(smp_weight(0.0) == SMP_WEIGHT_ONE);
    CHECK(smp_weight(-44.0) == 0); /* below 2^-62 */
}

/* smp_weights' vector form gives the scalar form's bits: logits near the
 * max and far below it (weights rounding to 0, exps in the subnormal
 * range that the vector form hands to the scalar one, -inf), ties with
 * the max, temperatures from 1e-30 to 1e30, strides 1, 2 (the host
 * sampler's (logit, id) pairs) and 3, lengths that leave a tail. SKIP where
 * the CPU has no AVX-512 (F and DQ). */
static void test_sample_weights_forms(void)
{
    enum { N = 4099 };
    static float l[2 * N];
    static uint64_t a[N], b[N];
    static const double temps[] = {1.0, 0.8, 0.07, 1.3, 1e-30, 1e30, 0.0015};
    if (smp_weights_form(1, l, 1, 0, 0.0f, 1.0, a) != 0) {
        test_skip("the AVX-512 form is not available here (the CPU, or MEMRA_CPU_ISA)");
        return;
    }
    rng_state r;
    rng_seed(&r, 11, 0);
    long diffs = 0, lanes = 0, zeros = 0, slow = 0;
    for (int round = 0; round < 40; round++) {
        const float max = (float)(rng_next_u64(&r) % 2001) / 100.0f - 10.0f;
        const double spread = round % 4 == 0 ? 1000.0 : round % 4 == 1 ? 60.0 : 8.0;
        for (int i = 0; i < 2 * N; i++) {
            const double u = (double)(rng_next_u64(&r) >> 11) * 0x1p-53;
            l[i] = (float)((double)max - u * spread);
            if (i % 97 == 0)
                l[i] = max;
            if (i % 131 == 0)
                l[i] = -INFINITY;
        }
        const double t = temps[round % 7];
        const size_t stride = (size_t)(round % 3) + 1;
        const int64_t n = (stride == 3 ? N / 2 : N) - round % 8;
        CHECK(smp_weights_form(0, l, stride, n, max, t, a) == 0);
        CHECK(smp_weights_form(1, l, stride, n, max, t, b) == 0);
        for (int64_t i = 0; i < n; i++) {
            diffs += a[i] != b[i];
            zeros += a[i] == 0;
            const double d = ((double)l[(size_t)i * stride] - (double)max) / t;
            slow += d > -745.5 && d < -708.0;
        }
        lanes += n;
    }
    CHECK_MSG(diffs == 0, "%ld of %ld weights differ between the forms", diffs, lanes);
    CHECK(zeros > 0 && zeros < lanes);
    CHECK_MSG(slow > 0, "no exp in the subnormal range was tried");
}

/* The row scan the sampler starts from, by the loop it replaced: the
 * flags, the lowest id of the largest value (ties in the vector part and
 * in the tail, +0 and -0 at the top), the count above -inf; rows of -inf
 * only, rows with a NaN or +inf at each place, lengths with and without a
 * tail. The scalar form always; the AVX2 form where the CPU has it (and
 * MEMRA_CPU_ISA is not `scalar`), else SKIP for that part. */
static void scan_by_loop(const float *x, int32_t n, logit_scan *o)
{
    memset(o, 0, sizeof *o);
    o->best = -1;
    float max = -INFINITY;
    for (int32_t i = 0; i < n; i++) {
        o->bad |= !(x[i] < INFINITY);
        o->n_finite += x[i] > -INFINITY;
        if (x[i] > max) {
            max = x[i];
            o->best = i;
        }
    }
    if (o->bad)
        o->best = o->n_finite = 0;
}

static void test_logit_scan_forms(void)
{
    enum { N = 1000 };
    static float x[N];
    logit_scan probe;
    const int vec = logit_scan_form(1, x, 0, &probe) == 0;
    rng_state r;
    rng_seed(&r, 12, 0);
    long rows = 0, bad_rows = 0, none_rows = 0, tail_best = 0;
    for (int round = 0; round < 3000; round++) {
        const int32_t n = round < 40 ? round : (int32_t)(rng_next_u64(&r) % N) + 1;
        const int kind = round % 6;
        for (int32_t i = 0; i < n; i++) {
            const double u = (double)(rng_next_u64(&r) >> 11) * 0x1p-53;
            x[i] = kind == 4 ? -INFINITY : (float)(u * 20.0 - 10.0);
            if (kind == 1 && u < 0.3)
                x[i] = -INFINITY;
            if (kind == 2) /* a few distinct values: ties everywhere */
                x[i] = (float)(rng_next_u64(&r) % 4) - 2.0f;
            if (kind == 3) /* zeros of both signs at the top */
                x[i] = u < 0.5 ? -0.0f : u < 0.6 ? 0.0f : -(float)u;
        }
        if (kind == 5 && n > 0) {
            const int32_t at = (int32_t)(rng_next_u64(&r) % (uint64_t)n);
            x[at] = round % 12 == 5 ? NAN : INFINITY;
        }
        logit_scan want, got;
        scan_by_loop(x, n, &want);
        rows++;
        bad_rows += want.bad;
        none_rows += !want.bad && want.best < 0;
        tail_best += !want.bad && want.best >= (n / 16) * 16;
        for (int form = 0; form <= vec; form++) {
            CHECK(logit_scan_form(form, x, n, &got) == 0);
            CHECK_MSG(got.bad == want.bad && got.best == want.best &&
                          got.n_finite == want.n_finite,
                      "form %d, round %d, n %d: bad %d best %d finite %d, want %d %d %d", form,
                      round, n, got.bad, got.best, got.n_finite, want.bad, want.best,
                      want.n_finite);
        }
    }
    CHECK(bad_rows > 100 && none_rows > 100 && tail_best > 10 && rows == 3000);
    if (!vec)
        test_skip("the AVX2 form is not available here (the CPU, or MEMRA_CPU_ISA)");
}

/* The 128-bit helpers against the compiler's __int128. */
static void test_smp_u128(void)
{
    __extension__ typedef unsigned __int128 u128;
    rng_state r;
    rng_seed(&r, 10, 0);
    for (int i = 0; i < 100000; i++) {
        uint64_t a = rng_next_u64(&r), b = rng_next_u64(&r) >> (i % 40);
        smp_u128 m = smp_mul64(a, b);
        u128 want = (u128)a * b;
        CHECK(m.lo == (uint64_t)want && m.hi == (uint64_t)(want >> 64));
        /* a total below 2^95 (n weights of 2^62), a uniform, a top-p */
        smp_u128 total = {rng_next_u64(&r), rng_next_u64(&r) >> 33};
        uint64_t u = rng_next_u64(&r), p = rng_next_u64(&r) >> 31;
        u128 t = ((u128)total.hi << 64) | total.lo;
        smp_u128 d = smp_draw_target(total, u);
        /* floor(u * t / 2^64) without overflow: split t */
        u128 wd = (u128)u * (uint64_t)(t >> 64) + (((u128)u * (uint64_t)t) >> 64);
        CHECK(d.lo == (uint64_t)wd && d.hi == (uint64_t)(wd >> 64));
        CHECK(smp_lt(d, total) || smp_is_zero(total));
        if (p > SMP_TOP_P_OFF)
            p = SMP_TOP_P_OFF;
        smp_u128 tp = smp_top_p_target(total, p);
        u128 wp = ((t * p) + 0xFFFFFFFFu) >> 32;
        CHECK(tp.lo == (uint64_t)wp && tp.hi == (uint64_t)(wp >> 64));
    }
    CHECK(smp_top_p_q32(1.0) == SMP_TOP_P_OFF);
    CHECK(smp_top_p_q32(0.5) == (uint64_t)1 << 31);
    CHECK(smp_key(-0.0f) == smp_key(0.0f));
    CHECK(smp_key(-INFINITY) < smp_key(-1e30f) && smp_key(-1.0f) < smp_key(0.0f) &&
          smp_key(0.0f) < smp_key(1e-40f) && smp_key(2.0f) < smp_key(INFINITY));
    CHECK(smp_key_float(smp_key(-3.5f)) == -3.5f && smp_key_float(smp_key(7.25f)) == 7.25f);
}

/* Call n of a sampler draws Philox(seed, n): the host path reproduced from
 * the documented arithmetic (weights, total, target, walk in id order). */
static void test_draw_is_philox_stream(void)
{
    const float l[5] = {0.3f, 1.7f, -0.4f, 1.1f, 0.9f};
    const double t = 0.8;
    sampler_params p = sampler_params_default();
    p.temperature = t;
    p.seed = 0x1234567890abcdefull;
    sampler *s = make(&p, 5);
    uint64_t w[5];
    smp_u128 total = {0, 0};
    for (int i = 0; i < 5; i++)
        total = smp_add64(total, w[i] = smp_weight(smp_dist(l[i], 1.7f, t)));
    memra_err e;
    int bad = 0;
    for (uint64_t n = 0; n < 300; n++) {
        float work[5];
        memcpy(work, l, sizeof work);
        int32_t got = sampler_sample(s, work, &e);
        smp_u128 target = smp_draw_target(total, philox_u64(p.seed, n, SMP_STREAM)), cum = {0, 0};
        int32_t want = -1;
        for (int i = 0; i < 5 && want < 0; i++) {
            cum = smp_add64(cum, w[i]);
            if (smp_lt(target, cum))
                want = i;
        }
        bad += got != want;
    }
    CHECK_MSG(bad == 0, "%d of 300 draws differ from the Philox stream", bad);
    sampler_free(s);
}

/* The export a device sampler works from, and the outcome coming back:
 * the same stream position, lists and error messages as the host path. */
static void test_row_export_and_done(void)
{
    sampler_logit_bias b[2] = {{2, -INFINITY}, {0, 0.5f}};
    sampler_params p = sampler_params_default();
    p.temperature = 0.7;
    p.top_k = 3;
    p.top_p = 0.9;
    p.min_p = 0.1;
    p.repetition_penalty = 1.3;
    p.presence_penalty = 0.2;
    p.frequency_penalty = 0.1;
    p.penalty_last_n = 3;
    p.seed = 77;
    p.logit_bias = b;
    p.n_logit_bias = 2;
    sampler *s = make(&p, 10);
    memra_err e;
    const int32_t acc[5] = {4, 4, 7, 1, 4}; /* window of 3: 7, 1, 4 */
    for (int i = 0; i < 5; i++)
        sampler_accept(s, acc[i], &e);
    smp_row row;
    const smp_bias *bias;
    const smp_pen *pen;
    const uint32_t *mask;
    sampler_row_export(s, &row, &bias, &pen, &mask);
    CHECK(row.n_mask == 0 && mask == NULL);
    CHECK(row.temperature == 0.7 && row.top_k == 3 && row.seed == 77 && row.step == 0);
    CHECK(row.top_p_q32 == smp_top_p_q32(0.9) && row.min_p_log == log(0.1));
    CHECK(row.n_bias == 2 && bias[0].id == 2 && bias[1].bias == 0.5f);
    CHECK(row.n_pen == 3);
    int seen[10] = {0};
    for (int i = 0; i < row.n_pen && i < 3; i++)
        seen[pen[i].id] = (int)pen[i].count;
    CHECK(seen[7] == 1 && seen[1] == 1 && seen[4] == 1);
    smp_outcome ok = {5, SMP_OK, 0, 0};
    CHECK(sampler_row_done(s, &ok, &e) == 5);
    sampler_row_export(s, &row, &bias, &pen, &mask);
    CHECK(row.step == 1);
    smp_outcome o = {-1, SMP_BAD_LOGIT, 6, NAN};
    CHECK(sampler_row_done(s, &o, &e) == -1);
    CHECK_MSG(strcmp(e.msg, "sampler: logit of token 6 is nan") == 0, "%s", e.msg);
    o = (smp_outcome){-1, SMP_NONE_LEFT, 0, 0};
    CHECK(sampler_row_done(s, &o, &e) == -1);
    CHECK(strcmp(e.msg, "every token is banned by logit_bias") == 0);
    o = (smp_outcome){-1, SMP_INF_AFTER, 3, INFINITY};
    CHECK(sampler_row_done(s, &o, &e) == -1);
    CHECK(strcmp(e.msg, "sampler: logit of token 3 overflows to +inf after logit_bias and "
                        "penalties") == 0);
    o = (smp_outcome){12, SMP_OK, 0, 0};
    CHECK(sampler_row_done(s, &o, &e) == -1); /* an id outside the vocabulary */
    sampler_row_export(s, &row, &bias, &pen, &mask);
    CHECK(row.step == 5);
    sampler_reset(s);
    sampler_row_export(s, &row, &bias, &pen, &mask);
    CHECK(row.step == 0 && row.n_pen == 0);
    sampler_free(s);
}

/* The allowed-token mask: a ban like a -inf logit bias, before the
 * penalties and truncation, so a masked sampler and one banning the same
 * ids by logit_bias pick the same tokens from the same stream. */
static void test_mask(void)
{
    enum { NV = 70 };
    float l[NV], work[NV];
    memra_err e;
    uint32_t bits[3] = {0, 0, 0};
    for (int i = 0; i < NV; i++)
        l[i] = (float)((i * 37) % 23) * 0.25f;
    l[5] = 9.0f; /* the best token, banned below */
    /* allowed: every id = 1 mod 3 but 64; 67 has a bit but is >= n_bits */
    for (int i = 0; i < NV; i++)
        if (i % 3 == 1 && i != 64)
            bits[i / 32] |= 1u << (i % 32);
    bits[5 / 32] &= ~(1u << 5);
    sampler_params p = sampler_params_default();
    p.temperature = 0;
    sampler *s = make(&p, NV);
    sampler_set_mask(s, bits, 66);
    memcpy(work, l, sizeof l);
    int32_t want = -1;
    for (int i = 0; i < 66; i++)
        if (i % 3 == 1 && i != 64 && (want < 0 || l[i] > l[want]))
            want = i;
    CHECK_MSG(sampler_sample(s, work, &e) == want, "greedy under the mask: want %d", want);
    CHECK(work[5] == -INFINITY && work[67] == -INFINITY && work[64] == -INFINITY);
    CHECK(work[want] == l[want]);
    /* NULL clears it: the best token is back */
    sampler_set_mask(s, NULL, 0);
    memcpy(work, l, sizeof l);
    CHECK(sampler_sample(s, work, &e) == 5);
    sampler_free(s);

    /* The same tokens as -inf logit_bias, with every stage on and penalties. */
    sampler_logit_bias ban[NV];
    int n_ban = 0;
    for (int i = 0; i < NV; i++)
        if (i >= 66 || !(bits[i / 32] >> (i % 32) & 1u))
            ban[n_ban++] = (sampler_logit_bias){i, -INFINITY};
    p.temperature = 0.9;
    p.top_k = 12;
    p.top_p = 0.95;
    p.min_p = 0.01;
    p.repetition_penalty = 1.2;
    p.seed = 4242;
    sampler *masked = make(&p, NV);
    sampler_set_mask(masked, bits, 66);
    p.logit_bias = ban;
    p.n_logit_bias = n_ban;
    sampler *biased = make(&p, NV);
    for (int step = 0; step < 200; step++) {
        float w2[NV];
        for (int i = 0; i < NV; i++)
            l[i] = (float)(((i + step) * 37) % 23) * 0.3f;
        memcpy(work, l, sizeof l);
        memcpy(w2, l, sizeof l);
        int32_t a = sampler_sample(masked, work, &e), b = sampler_sample(biased, w2, &e);
        CHECK_MSG(a == b && a >= 0, "step %d: masked %d, biased %d", step, a, b);
        CHECK(a < 0 || (a < 66 && a % 3 == 1 && a != 64));
        CHECK(memcmp(work, w2, sizeof work) == 0);
        if (a >= 0) {
            sampler_accept(masked, a, &e);
            sampler_accept(biased, a, &e);
        }
    }
    /* sampler_probs honours it too */
    const int32_t *ids;
    const double *probs;
    int32_t n = 0;
    memcpy(work, l, sizeof l);
    CHECK(sampler_probs(masked, work, &ids, &probs, &n, &e) == 0);
    for (int32_t i = 0; i < n; i++)
        CHECK(ids[i] < 66 && ids[i] % 3 == 1 && ids[i] != 64);
    CHECK(n > 0);
    /* the export: the words, every bit past n_bits clear */
    smp_row row;
    const smp_bias *bias;
    const smp_pen *pen;
    const uint32_t *mask;
    sampler_row_export(masked, &row, &bias, &pen, &mask);
    CHECK(row.n_mask == 3 && mask != NULL);
    CHECK(mask && mask[0] == bits[0] && mask[1] == bits[1] && mask[2] == (bits[2] & 3u));
    CHECK(mask && smp_mask_allows(mask, 4) && !smp_mask_allows(mask, 5) &&
          !smp_mask_allows(mask, 67));
    smp_outcome none = {-1, SMP_NONE_LEFT, 0, 0};
    CHECK(sampler_row_done(masked, &none, &e) == -1);
    CHECK_MSG(strcmp(e.msg, "every token is banned by the allowed-token mask") == 0, "%s",
              e.msg);
    sampler_set_mask(masked, NULL, 0);
    sampler_row_export(masked, &row, &bias, &pen, &mask);
    CHECK(row.n_mask == 0 && mask == NULL);
    sampler_free(masked);
    sampler_free(biased);

    /* Every token banned: sampler_sample's error, greedy or drawn; a
     * negative n_bits bans everything. */
    uint32_t zero[3] = {0, 0, 0};
    for (int t = 0; t < 3; t++) {
        p = sampler_params_default();
        p.temperature = t ? 1.0 : 0.0;
        s = make(&p, NV);
        if (t == 2)
            sampler_set_mask(s, bits, -5);
        else
            sampler_set_mask(s, zero, NV);
        memcpy(work, l, sizeof l);
        e.msg[0] = 0;
        CHECK(sampler_sample(s, work, &e) == -1);
        CHECK_MSG(strcmp(e.msg, "every token is banned by the allowed-token mask") == 0, "%s",
                  e.msg);
        sampler_free(s);
    }
}

TEST_MAIN(TEST_CASE(test_greedy_argmax_and_ties), TEST_CASE(test_top_k_1_is_greedy),
          TEST_CASE(test_temperature_distribution), TEST_CASE(test_top_k_top_p_min_p_hand),
          TEST_CASE(test_penalties_hand), TEST_CASE(test_penalty_window_slides),
          TEST_CASE(test_logit_bias), TEST_CASE(test_seed_reproducible),
          TEST_CASE(test_validation), TEST_CASE(test_large_vocab_matches_full_sort),
          TEST_CASE(test_philox_known_answers), TEST_CASE(test_smp_exp),
          TEST_CASE(test_sample_weights_forms), TEST_CASE(test_logit_scan_forms),
          TEST_CASE(test_smp_u128), TEST_CASE(test_draw_is_philox_stream),
          TEST_CASE(test_row_export_and_done), TEST_CASE(test_mask))
