/* KL divergence, top-1 agreement and perplexity of a model against a
 * reference; see quality.h. */
#include "engine/quality.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

int quality_log_softmax(const float *logits, int64_t n, double *logp)
{
    double max = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(logits[i]))
            return -1;
        if (logits[i] > max)
            max = logits[i];
    }
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        sum += exp((double)logits[i] - max);
    double lse = log(sum);
    for (int64_t i = 0; i < n; i++)
        logp[i] = ((double)logits[i] - max) - lse;
    return 0;
}

double quality_kl(const double *logp, const double *logq, int64_t n)
{
    double kl = 0;
    for (int64_t i = 0; i < n; i++)
        kl += exp(logp[i]) * (logp[i] - logq[i]);
    /* a sum of terms that cancel can round a hair below zero */
    return kl > 0 ? kl : 0;
}

double quality_quantile(const double *sorted, size_t n, double q)
{
    if (n == 0)
        return 0;
    double r = q * (double)(n - 1);
    size_t lo = (size_t)floor(r), hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (r - (double)lo) * (sorted[hi] - sorted[lo]);
}

static int64_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

typedef struct {
    float *lr, *lq;   /* [QUALITY_STEP][vocab] logits of each model */
    double *pr, *pq;  /* [vocab] log-probabilities of one position */
    double *kl;       /* [n] one value per position */
    double nll_r, nll_q, kl_sum, kl_sq;
} quality_work;

/* One window: both sequences reset, the tokens fed QUALITY_STEP at a
 * time, every position with a next token in the window measured. */
static int quality_window(engine *ref, engine *quant, engine_seq *sr, engine_seq *sq,
                          const int32_t *ids, size_t start, size_t len, int64_t vocab,
                          quality_work *w, quality_result *out, memra_err *err)
{
    engine_seq_reset(sr);
    engine_seq_reset(sq);
    for (size_t off = 0; off < len; off += QUALITY_STEP) {
        int step = (int)(len - off < QUALITY_STEP ? len - off : QUALITY_STEP);
        if (engine_forward(ref, sr, ids + start + off, step, w->lr, 1, err) != 0)
            return memra_wrap(err, "reference");
        if (engine_forward(quant, sq, ids + start + off, step, w->lq, 1, err) != 0)
            return memra_wrap(err, "model");
        for (int i = 0; i < step && off + (size_t)i + 1 < len; i++) {
            size_t pos = start + off + (size_t)i;
            const float *a = w->lr + (size_t)i * (size_t)vocab, *b = w->lq + (size_t)i * (size_t)vocab;
            if (quality_log_softmax(a, vocab, w->pr) != 0)
                return memra_fail(err, "the reference's logits at token %zu are not finite", pos);
            if (quality_log_softmax(b, vocab, w->pq) != 0)
                return memra_fail(err, "the model's logits at token %zu are not finite", pos);
            double kl = quality_kl(w->pr, w->pq, vocab);
            int32_t next = ids[pos + 1];
            w->nll_r -= w->pr[next];
            w->nll_q -= w->pq[next];
            w->kl_sum += kl;
            w->kl_sq += kl * kl;
            w->kl[out->n_positions++] = kl;
            if (kl > out->kl_max)
                out->kl_max = kl;
            out->top1_agree += argmax(a, vocab) == argmax(b, vocab);
        }
    }
    out->n_windows++;
    return 0;
}

int quality_compare(engine *ref, engine *quant, const int32_t *ids, size_t n, int window,
                    quality_result *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    out->n_tokens = n;
    int64_t vocab = engine_config(ref)->n_vocab;
    if (engine_config(quant)->n_vocab != vocab)
        return memra_fail(err, "the model's vocabulary has %lld tokens, the reference's %lld",
                          (long long)engine_config(quant)->n_vocab, (long long)vocab);
    if (window < 2)
        return memra_fail(err, "window of %d tokens: it must be at least 2", window);
    if (window > engine_n_ctx(ref) || window > engine_n_ctx(quant))
        return memra_fail(err, "window of %d tokens is larger than a model's context", window);
    quality_work w = {0};
    w.lr = xmalloc((size_t)QUALITY_STEP * (size_t)vocab * sizeof(float));
    w.lq = xmalloc((size_t)QUALITY_STEP * (size_t)vocab * sizeof(float));
    w.pr = xmalloc((size_t)vocab * sizeof(double));
    w.pq = xmalloc((size_t)vocab * sizeof(double));
    w.kl = xmalloc((n > 0 ? n : 1) * sizeof(double));
    engine_seq *sr = NULL, *sq = NULL;
    int rc = engine_seq_new(ref, &sr, err);
    if (rc == 0)
        rc = engine_seq_new(quant, &sq, err);
    for (size_t start = 0; rc == 0 && start + 2 <= n; start += (size_t)window) {
        size_t len = n - start < (size_t)window ? n - start : (size_t)window;
        rc = quality_window(ref, quant, sr, sq, ids, start, len, vocab, &w, out, err);
    }
    if (rc == 0 && out->n_positions == 0)
        rc = memra_fail(err, "the text has %zu tokens, too few to predict any", n);
    if (rc == 0) {
        double np = (double)out->n_positions;
        out->ref_nll = w.nll_r / np;
        out->quant_nll = w.nll_q / np;
        out->ref_ppl = exp(out->ref_nll);
        out->quant_ppl = exp(out->quant_nll);
        out->kl_mean = w.kl_sum / np;
        double var = out->n_positions > 1
                         ? (w.kl_sq - w.kl_sum * w.kl_sum / np) / (np - 1)
                         : 0;
        out->kl_stderr = var > 0 ? sqrt(var / np) : 0;
        qsort(w.kl, out->n_positions, sizeof(double), cmp_double);
        out->kl_median = quality_quantile(w.kl, out->n_positions, 0.5);
        out->kl_p99 = quality_quantile(w.kl, out->n_positions, 0.99);
    }
    engine_seq_free(sr);
    engine_seq_free(sq);
    free(w.lr);
    free(w.lq);
    free(w.pr);
    free(w.pq);
    free(w.kl);
    return rc;
}
