#include "engine/perplexity.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

/* -log softmax(logits)[target] in double, stable against large logits. */
static double token_nll(const float *logits, int64_t n_vocab, int32_t target, int *is_top1)
{
    float max = logits[0];
    int64_t arg = 0;
    for (int64_t i = 1; i < n_vocab; i++)
        if (logits[i] > max) {
            max = logits[i];
            arg = i;
        }
    double sum = 0;
    for (int64_t i = 0; i < n_vocab; i++)
        sum += exp((double)logits[i] - max);
    *is_top1 = arg == target;
    return log(sum) - ((double)logits[target] - max);
}

int perplexity_run(engine *e, const int32_t *ids, size_t n, int window, perplexity_result *out,
                   memra_err *err)
{
    memset(out, 0, sizeof *out);
    out->n_tokens = n;
    if (window < 2)
        return memra_fail(err, "perplexity window of %d tokens: it must be at least 2", window);
    if (window > engine_n_ctx(e))
        return memra_fail(err, "perplexity window of %d tokens is larger than the context of %lld",
                          window, (long long)engine_n_ctx(e));
    int64_t n_vocab = engine_config(e)->n_vocab;
    float *logits = xmalloc((size_t)window * (size_t)n_vocab * sizeof(float));
    engine_seq *s;
    if (engine_seq_new(e, &s, err) != 0) {
        free(logits);
        return -1;
    }
    double total = 0;
    int rc = 0;
    for (size_t start = 0; start + 2 <= n && rc == 0; start += (size_t)window) {
        size_t len = n - start < (size_t)window ? n - start : (size_t)window;
        engine_seq_reset(s);
        rc = engine_forward(e, s, ids + start, (int)len, logits, 1, err);
        for (size_t i = 0; rc == 0 && i + 1 < len; i++) {
            int top1;
            total += token_nll(logits + i * (size_t)n_vocab, n_vocab, ids[start + i + 1], &top1);
            out->n_top1 += (size_t)top1;
            out->n_predictions++;
        }
        out->n_windows++;
    }
    engine_seq_free(s);
    free(logits);
    if (rc != 0)
        return -1;
    if (out->n_predictions == 0)
        return memra_fail(err, "perplexity: the text has %zu tokens, too few to predict any", n);
    out->mean_nll = total / (double)out->n_predictions;
    out->perplexity = exp(out->mean_nll);
    return 0;
}
