/* Quality measurement: log-softmax and KL divergence on hand-computed
 * distributions, quantiles, and quality_compare on real models (a model
 * against itself is exactly 0; its perplexity is --perplexity's). */
#include <math.h>
#include <string.h>

#include "core/check.h"
#include "engine/engine.h"
#include "engine/perplexity.h"
#include "engine/quality.h"
#include "test.h"

static void test_log_softmax(void)
{
    /* logits ln 2, 0, 0 -> probabilities 1/2, 1/4, 1/4 */
    float l[3] = {(float)log(2.0), 0, 0};
    double lp[3];
    CHECK(quality_log_softmax(l, 3, lp) == 0);
    CHECK(fabs(exp(lp[0]) - 0.5) < 1e-7 && fabs(exp(lp[1]) - 0.25) < 1e-7 &&
          fabs(exp(lp[2]) - 0.25) < 1e-7);
    CHECK(lp[1] == lp[2]);
    /* shifting every logit by a constant changes nothing, even far out */
    float big[3] = {1000 + l[0], 1000, 1000};
    double lb[3];
    CHECK(quality_log_softmax(big, 3, lb) == 0);
    CHECK(fabs(lb[0] - lp[0]) < 1e-4 && fabs(lb[1] - lp[1]) < 1e-4);
    float bad[3] = {0, NAN, 1};
    CHECK(quality_log_softmax(bad, 3, lb) == -1);
    bad[1] = INFINITY;
    CHECK(quality_log_softmax(bad, 3, lb) == -1);
}

static void test_kl_hand_computed(void)
{
    /* P = (1/2, 1/4, 1/4), Q = uniform:
     * KL = 1/2 ln(3/2) + 2 * 1/4 ln(3/4) = 1/2 ln(9/8) */
    double lp[3] = {log(0.5), log(0.25), log(0.25)};
    double lq[3] = {log(1 / 3.0), log(1 / 3.0), log(1 / 3.0)};
    double kl = quality_kl(lp, lq, 3);
    CHECK_MSG(fabs(kl - 0.5 * log(9.0 / 8.0)) < 1e-15, "%.17g", kl);
    CHECK(fabs(kl - 0.058891517828191) < 1e-14);
    /* the other direction: 1/3 (ln(2/3) + 2 ln(4/3)) = 1/3 ln(32/27) */
    double rk = quality_kl(lq, lp, 3);
    CHECK_MSG(fabs(rk - log(32.0 / 27.0) / 3) < 1e-15, "%.17g", rk);
    CHECK(quality_kl(lp, lp, 3) == 0);
    /* from logits: two-token distributions sigmoid(2) vs 1/2 */
    float a[2] = {2, 0}, b[2] = {0, 0};
    double la[2], lb[2];
    CHECK(quality_log_softmax(a, 2, la) == 0 && quality_log_softmax(b, 2, lb) == 0);
    double p = 1 / (1 + exp(-2.0));
    double want = p * log(p / 0.5) + (1 - p) * log((1 - p) / 0.5);
    CHECK_MSG(fabs(quality_kl(la, lb, 2) - want) < 1e-12, "%.17g vs %.17g", quality_kl(la, lb, 2),
              want);
}

static void test_quantile(void)
{
    double v[4] = {1, 2, 3, 4};
    CHECK(quality_quantile(v, 4, 0.5) == 2.5);
    CHECK(fabs(quality_quantile(v, 4, 0.99) - 3.97) < 1e-12);
    CHECK(quality_quantile(v, 4, 0) == 1 && quality_quantile(v, 4, 1) == 4);
    CHECK(quality_quantile(v, 1, 0.99) == 1);
    CHECK(quality_quantile(v, 0, 0.5) == 0);
    double w[5] = {0, 0, 0, 0, 10};
    CHECK(quality_quantile(w, 5, 0.5) == 0 && fabs(quality_quantile(w, 5, 0.99) - 9.6) < 1e-12);
}

static engine *load(const checkpoint *ck, int64_t n_ctx)
{
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 2;
    o.n_ctx = n_ctx;
    engine *e = NULL;
    memra_err err = {{0}};
    CHECK_MSG(engine_load(ck, &o, &e, &err) == 0, "%s", err.msg);
    return e;
}

static void test_compare_models(void)
{
    checkpoint a, d;
    memra_err err = {{0}};
    if (checkpoint_open("models/memra-tiny.gguf", &a, &err) != 0 ||
        checkpoint_open("models/memra-tiny-draft.gguf", &d, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    engine *e1 = load(&a, 100), *e2 = load(&a, 100), *ed = load(&d, 100);
    enum { N = 230, W = 100 }; /* windows of 100, 100, 30: crosses the 64-row steps */
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 389 + 5) % 4093);
    quality_result r;
    if (e1 && e2 && ed) {
        CHECK_MSG(quality_compare(e1, e2, ids, N, W, &r, &err) == 0, "%s", err.msg);
        CHECK(r.n_windows == 3 && r.n_positions == N - 3 && r.n_tokens == N);
        CHECK(r.kl_mean == 0 && r.kl_max == 0 && r.kl_p99 == 0 && r.kl_median == 0);
        CHECK(r.top1_agree == r.n_positions);
        CHECK(r.ref_ppl == r.quant_ppl && r.ref_nll == r.quant_nll);
        perplexity_result p;
        CHECK(perplexity_run(e1, ids, N, W, &p, &err) == 0);
        CHECK_MSG(p.mean_nll == r.ref_nll, "%.17g vs %.17g", p.mean_nll, r.ref_nll);
        CHECK(p.n_predictions == r.n_positions);

        /* another model: far apart, and the reference's numbers do not move */
        quality_result o;
        CHECK_MSG(quality_compare(e1, ed, ids, N, W, &o, &err) == 0, "%s", err.msg);
        CHECK(o.ref_nll == r.ref_nll);
        CHECK_MSG(o.kl_mean > 0.1 && o.kl_median > 0 && o.kl_p99 >= o.kl_median &&
                      o.kl_max >= o.kl_p99 && o.kl_stderr > 0 && o.kl_stderr < o.kl_mean,
                  "kl mean %g median %g p99 %g max %g", o.kl_mean, o.kl_median, o.kl_p99,
                  o.kl_max);
        CHECK(o.top1_agree < o.n_positions);
        CHECK(o.quant_nll != o.ref_nll);

        CHECK(quality_compare(e1, ed, ids, N, 1, &o, &err) == -1 && strstr(err.msg, "at least 2"));
        CHECK(quality_compare(e1, ed, ids, N, 101, &o, &err) == -1 && strstr(err.msg, "context"));
        CHECK(quality_compare(e1, ed, ids, 1, W, &o, &err) == -1 && strstr(err.msg, "too few"));
        int32_t badid[4] = {1, 2, 99999, 3};
        CHECK(quality_compare(e1, ed, badid, 4, W, &o, &err) == -1 &&
              strstr(err.msg, "out of range"));
    }
    engine_free(e1);
    engine_free(e2);
    engine_free(ed);
    checkpoint_close(&a);
    checkpoint_close(&d);
}

/* memra-parity --against reports KL(reference || model): the expectation
 * under the reference's distribution. Recomputed here position by position
 * from each engine's own logits, in that direction; swapping the models
 * inside quality_compare gives KL(model || reference), a different number
 * for two models this far apart, and fails. */
static void test_kl_direction(void)
{
    checkpoint a, d;
    memra_err err = {{0}};
    if (checkpoint_open("models/memra-tiny.gguf", &a, &err) != 0 ||
        checkpoint_open("models/memra-tiny-draft.gguf", &d, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    engine *ref = load(&a, 64), *mod = load(&d, 64);
    enum { N = 12 };
    int32_t ids[N];
    for (int i = 0; i < N; i++)
        ids[i] = (int32_t)((i * 733 + 11) % 4093);
    if (ref && mod) {
        int64_t vocab = engine_config(ref)->n_vocab;
        float *lr = malloc((size_t)N * (size_t)vocab * sizeof(float));
        float *lm = malloc((size_t)N * (size_t)vocab * sizeof(float));
        double *pr = malloc((size_t)vocab * sizeof(double)), *pm = malloc((size_t)vocab * sizeof(double));
        engine_seq *sr = NULL, *sm = NULL;
        CHECK(engine_seq_new(ref, &sr, &err) == 0 && engine_seq_new(mod, &sm, &err) == 0);
        CHECK_MSG(engine_forward(ref, sr, ids, N, lr, 1, &err) == 0, "%s", err.msg);
        CHECK_MSG(engine_forward(mod, sm, ids, N, lm, 1, &err) == 0, "%s", err.msg);
        double fwd = 0, rev = 0;
        for (int i = 0; i + 1 < N; i++) {
            CHECK(quality_log_softmax(lr + (size_t)i * vocab, vocab, pr) == 0);
            CHECK(quality_log_softmax(lm + (size_t)i * vocab, vocab, pm) == 0);
            fwd += quality_kl(pr, pm, vocab);
            rev += quality_kl(pm, pr, vocab);
        }
        fwd /= N - 1;
        rev /= N - 1;
        quality_result r;
        CHECK_MSG(quality_compare(ref, mod, ids, N, N, &r, &err) == 0, "%s", err.msg);
        CHECK(r.n_positions == N - 1);
        CHECK_MSG(fabs(r.kl_mean - fwd) <= 1e-9 * fwd, "kl_mean %.17g, KL(ref||model) %.17g",
                  r.kl_mean, fwd);
        CHECK_MSG(fabs(fwd - rev) > 0.01 * fwd, "both directions %.17g %.17g: the test cannot tell "
                  "them apart", fwd, rev);
        engine_seq_free(sr);
        engine_seq_free(sm);
        free(lr);
        free(lm);
        free(pr);
        free(pm);
    }
    engine_free(ref);
    engine_free(mod);
    checkpoint_close(&a);
    checkpoint_close(&d);
}

TEST_MAIN(TEST_CASE(test_log_softmax), TEST_CASE(test_kl_hand_computed), TEST_CASE(test_quantile),
          TEST_CASE(test_compare_models), TEST_CASE(test_kl_direction))
