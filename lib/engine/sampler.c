#include "engine/sampler.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "numerics/logit_scan.h"
#include "numerics/sample_math.h"
#include "numerics/sample_weights.h"
#include "engine/sampler_select.h"

struct sampler {
    sampler_params p;
    int32_t n_vocab;
    sampler_logit_bias *bias; /* p.logit_bias points here */
    int penalize;             /* any penalty active and a window > 0 */
    uint64_t step;            /* sampling calls since the last reset: the Philox counter */
    uint64_t top_p_q32;       /* top_p in 2^-32 units */
    double min_p_log;         /* log(min_p), -inf when off */
    /* The allowed-token mask (sampler_set_mask), mask_words words with no
     * bit set at or past n_vocab; has_mask 0: none. */
    uint32_t *mask;
    int32_t mask_words;
    int has_mask;

    /* History (only when penalize): how often each id occurs in the window,
     * the ids with a count (lazily pruned of zeros, listed[] says who is in
     * it) and, for a finite window, the accepted ids in order; hist[start,
     * len) is the window. */
    uint32_t *count;
    uint8_t *listed;
    int32_t *seen;
    int32_t n_seen;
    int32_t *hist;
    size_t hist_start, hist_len, hist_cap;

    /* Scratch for one call: candidates, the survivors' ids, fixed-point
     * weights and their total, probabilities (sampler_probs), exported
     * penalty counts. */
    sampler_cand *cand;
    int32_t *out_ids;
    uint64_t *out_w;
    smp_u128 total;
    double *out_probs;
    uint8_t *mark;
    smp_pen *pen;
};

sampler_params sampler_params_default(void)
{
    sampler_params p;
    memset(&p, 0, sizeof p);
    p.temperature = 1.0;
    p.top_k = 0;
    p.top_p = 1.0;
    p.min_p = 0.0;
    p.repetition_penalty = 1.0;
    p.penalty_last_n = 64;
    p.presence_penalty = 0.0;
    p.frequency_penalty = 0.0;
    return p;
}

/* Comparisons are written so NaN fails them and lands in the error. */
static int check_params(const sampler_params *p, int32_t n_vocab, memra_err *err)
{
    if (n_vocab <= 0)
        return memra_fail(err, "sampler: n_vocab %d is out of range [1, 2147483647]", n_vocab);
    if (!(p->temperature >= 0.0 && isfinite(p->temperature)))
        return memra_fail(err, "temperature %g is out of range [0, inf)", p->temperature);
    if (p->top_k < 0)
        return memra_fail(err, "top_k %d is out of range [0, inf)", p->top_k);
    if (!(p->top_p >= 0.0 && p->top_p <= 1.0))
        return memra_fail(err, "top_p %g is out of range [0, 1]", p->top_p);
    if (!(p->min_p >= 0.0 && p->min_p <= 1.0))
        return memra_fail(err, "min_p %g is out of range [0, 1]", p->min_p);
    if (!(p->repetition_penalty > 0.0 && isfinite(p->repetition_penalty)))
        return memra_fail(err, "repetition_penalty %g is out of range (0, inf)",
                          p->repetition_penalty);
    if (p->penalty_last_n < -1)
        return memra_fail(err, "penalty_last_n %d is out of range [-1, inf)", p->penalty_last_n);
    if (!(p->presence_penalty >= -2.0 && p->presence_penalty <= 2.0))
        return memra_fail(err, "presence_penalty %g is out of range [-2, 2]", p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0 && p->frequency_penalty <= 2.0))
        return memra_fail(err, "frequency_penalty %g is out of range [-2, 2]",
                          p->frequency_penalty);
    if (p->n_logit_bias < 0)
        return memra_fail(err, "n_logit_bias %d is out of range [0, inf)", p->n_logit_bias);
    if (p->n_logit_bias > 0 && !p->logit_bias)
        return memra_fail(err, "logit_bias has %d entries but no list", p->n_logit_bias);
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const sampler_logit_bias *b = &p->logit_bias[i];
        if (b->id < 0 || b->id >= n_vocab)
            return memra_fail(err, "logit_bias id %d is out of range [0, %d)", b->id, n_vocab);
        if (isnan(b->bias) || b->bias == INFINITY)
            return memra_fail(err, "logit_bias for id %d is %g (allowed: finite, or -inf to ban)",
                              b->id, (double)b->bias);
    }
    return 0;
}

static void history_clear(sampler *s)
{
    if (!s->penalize)
        return;
    memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
    memset(s->listed, 0, (size_t)s->n_vocab);
    s->n_seen = 0;
    s->hist_start = s->hist_len = 0;
}

sampler *sampler_new(const sampler_params *p, int32_t n_vocab, memra_err *err)
{
    if (check_params(p, n_vocab, err) < 0)
        return NULL;
    sampler *s = xcalloc(1, sizeof *s);
    s->p = *p;
    s->n_vocab = n_vocab;
    if (p->n_logit_bias > 0) {
        /* Duplicates are refused: OpenAI's logit_bias is a map, so two
         * entries for one id mean the caller built the list wrongly. A
         * scratch mark per id finds them in one pass. */
        uint8_t *dup = xcalloc((size_t)n_vocab, 1);
        for (int32_t i = 0; i < p->n_logit_bias; i++) {
            int32_t id = p->logit_bias[i].id;
            if (dup[id]) {
                free(dup);
                free(s);
                memra_fail(err, "logit_bias id %d appears twice", id);
                return NULL;
            }
            dup[id] = 1;
        }
        free(dup);
        s->bias = xmalloc((size_t)p->n_logit_bias * sizeof *s->bias);
        memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
    }
    s->p.logit_bias = s->bias;
    s->penalize = p->penalty_last_n != 0 &&
                  (p->repetition_penalty != 1.0 || p->presence_penalty != 0.0 ||
                   p->frequency_penalty != 0.0);
    if (s->penalize) {
        s->count = xcalloc((size_t)n_vocab, sizeof *s->count);
        s->listed = xcalloc((size_t)n_vocab, 1);
        s->seen = xmalloc((size_t)n_vocab * sizeof *s->seen);
        s->pen = xmalloc((size_t)n_vocab * sizeof *s->pen);
    }
    s->top_p_q32 = smp_top_p_q32(p->top_p);
    s->min_p_log = p->min_p > 0.0 ? log(p->min_p) : -INFINITY;
    s->cand = xmalloc((size_t)n_vocab * sizeof *s->cand);
    s->out_ids = xmalloc((size_t)n_vocab * sizeof *s->out_ids);
    s->out_w = xmalloc((size_t)n_vocab * sizeof *s->out_w);
    s->out_probs = xmalloc((size_t)n_vocab * sizeof *s->out_probs);
    s->mark = xcalloc((size_t)n_vocab, 1);
    s->mask_words = (int32_t)(((int64_t)n_vocab + 31) / 32);
    sampler_reset(s);
    return s;
}

void sampler_free(sampler *s)
{
    if (!s)
        return;
    free(s->bias);
    free(s->count);
    free(s->listed);
    free(s->seen);
    free(s->hist);
    free(s->cand);
    free(s->out_ids);
    free(s->out_w);
    free(s->out_probs);
    free(s->mark);
    free(s->pen);
    free(s->mask);
    free(s);
}

int sampler_is_greedy(const sampler *s) { return s->p.temperature == 0.0; }

void sampler_set_mask(sampler *s, const uint32_t *bits, int32_t n_bits)
{
    if (!bits) {
        s->has_mask = 0;
        return;
    }
    if (!s->mask)
        s->mask = xmalloc((size_t)s->mask_words * sizeof *s->mask);
    int32_t n = n_bits < 0 ? 0 : n_bits > s->n_vocab ? s->n_vocab : n_bits;
    int32_t full = n / 32, rest = n % 32;
    memcpy(s->mask, bits, (size_t)full * sizeof *s->mask);
    int32_t w = full;
    if (rest) {
        s->mask[w] = bits[w] & ((1u << rest) - 1u);
        w++;
    }
    memset(s->mask + w, 0, (size_t)(s->mask_words - w) * sizeof *s->mask);
    s->has_mask = 1;
}

void sampler_reset(sampler *s)
{
    history_clear(s);
    s->step = 0;
}

static void count_add(sampler *s, int32_t id)
{
    if (s->count[id]++ == 0 && !s->listed[id]) {
        s->listed[id] = 1;
        s->seen[s->n_seen++] = id;
    }
}

/* A finite window keeps the accepted ids in hist[start, len). When the
 * buffer is full, the live part (at most the window) moves down if the dead
 * front is at least as long, else the buffer doubles; so memory stays
 * within about twice the window and each accept is O(1) amortized. */
int sampler_accept(sampler *s, int32_t id, memra_err *err)
{
    if (id < 0 || id >= s->n_vocab)
        return memra_fail(err, "sampler: accepted token id %d is out of range [0, %d)", id,
                          s->n_vocab);
    if (!s->penalize)
        return 0;
    count_add(s, id);
    if (s->p.penalty_last_n < 0)
        return 0;
    size_t window = (size_t)s->p.penalty_last_n;
    if (s->hist_len == s->hist_cap) {
        if (s->hist_start > 0 && s->hist_start >= s->hist_len - s->hist_start) {
            memmove(s->hist, s->hist + s->hist_start,
                    (s->hist_len - s->hist_start) * sizeof *s->hist);
            s->hist_len -= s->hist_start;
            s->hist_start = 0;
        } else {
            s->hist_cap = s->hist_cap ? 2 * s->hist_cap : 64;
            s->hist = xrealloc(s->hist, s->hist_cap * sizeof *s->hist);
        }
    }
    s->hist[s->hist_len++] = id;
    if (s->hist_len - s->hist_start > window)
        s->count[s->hist[s->hist_start++]]--;
    return 0;
}

/* Ids whose count fell to zero leave the seen list here rather than in
 * accept, to keep accept O(1). */
static void prune_seen(sampler *s)
{
    int32_t kept = 0;
    for (int32_t i = 0; i < s->n_seen; i++) {
        int32_t id = s->seen[i];
        if (s->count[id] == 0) {
            s->listed[id] = 0;
            continue;
        }
        s->seen[kept++] = id;
    }
    s->n_seen = kept;
}

/* The mask's bans: -inf at every id it leaves out, a word at a time (a
 * grammar's mask is mostly zeros or mostly ones). */
static void apply_mask(const sampler *s, float *logits)
{
    for (int32_t w = 0; w < s->mask_words; w++) {
        uint32_t banned = ~s->mask[w];
        if (!banned)
            continue;
        int32_t base = w * 32, end = base + 32 < s->n_vocab ? base + 32 : s->n_vocab;
        for (int32_t id = base; id < end; id++)
            if (banned >> (id - base) & 1u)
                logits[id] = -INFINITY;
    }
}

/* Mask, bias and penalties touch only the listed and seen ids (the mask
 * every id it bans); the arithmetic is sample_math.h's, the device's.
 * Returns whether it may have changed a logit (0: nothing to mask, bias
 * or penalize, the row is as the forward left it). */
static int apply_bias_and_penalties(sampler *s, float *logits)
{
    if (s->has_mask)
        apply_mask(s, logits);
    for (int32_t i = 0; i < s->p.n_logit_bias; i++)
        logits[s->bias[i].id] += s->bias[i].bias;
    if (!s->penalize)
        return s->has_mask || s->p.n_logit_bias > 0;
    prune_seen(s);
    for (int32_t i = 0; i < s->n_seen; i++) {
        int32_t id = s->seen[i];
        logits[id] = smp_penalize(logits[id], s->count[id], s->p.repetition_penalty,
                                  s->p.presence_penalty, s->p.frequency_penalty);
    }
    return 1;
}

/* The message for a failed row, the same whether the host or a device
 * found it. */
static int fail_status(const sampler *s, int status, int32_t id, float value, memra_err *err)
{
    switch (status) {
    case SMP_BAD_LOGIT:
        return memra_fail(err, "sampler: logit of token %d is %g", id, (double)value);
    case SMP_INF_AFTER:
        return memra_fail(err, "sampler: logit of token %d overflows to +inf after logit_bias "
                               "and penalties", id);
    case SMP_ALL_NEG_INF: return memra_fail(err, "sampler: every logit is -inf");
    case SMP_NONE_LEFT: {
        int bans = 0;
        for (int32_t i = 0; i < s->p.n_logit_bias; i++)
            bans |= s->bias[i].bias == -INFINITY;
        if (s->has_mask)
            return memra_fail(err, "every token is banned by the allowed-token mask%s",
                              bans ? " and logit_bias" : "");
        if (bans)
            return memra_fail(err, "every token is banned by logit_bias");
        return memra_fail(err, "sampler: every logit is -inf after logit_bias and penalties");
    }
    default: return memra_fail(err, "sampler: unknown outcome %d", status);
    }
}

/* A row that logit_scan found NaN or +inf in after logit_bias and the
 * penalties, element by element: the first +inf fails it; a NaN (which
 * they cannot make from finite logits) is passed over as no larger than
 * anything and not counted. */
static int scan_after_bad(const sampler *s, const float *logits, logit_scan *sc, memra_err *err)
{
    sc->best = -1;
    sc->n_finite = 0;
    float max = -INFINITY;
    for (int32_t i = 0; i < s->n_vocab; i++) {
        if (logits[i] == INFINITY)
            return fail_status(s, SMP_INF_AFTER, i, logits[i], err);
        sc->n_finite += logits[i] > -INFINITY;
        if (logits[i] > max) {
            max = logits[i];
            sc->best = i;
        }
    }
    return 0;
}

/* When top-k is this small next to the vocabulary, one heap pass over the
 * logits beats building every candidate and partitioning them. */
static int top_k_by_heap(int32_t k, int32_t n_finite) { return (int64_t)k * 8 <= n_finite; }

/* Everything up to the draw: the surviving ids in ascending order in
 * s->out_ids, their fixed-point weights (the max has SMP_WEIGHT_ONE) in
 * s->out_w and the weights' exact sum in s->total. */
static int prepare(sampler *s, float *logits, int32_t *n, memra_err *err)
{
    int32_t nv = s->n_vocab;
    /* One pass for the flags, the argmax and the count (logit_scan.h);
     * the offending id is looked up only on failure. */
    logit_scan sc;
    logit_scan_row(logits, nv, &sc);
    if (sc.bad)
        for (int32_t i = 0; i < nv; i++)
            if (!(logits[i] < INFINITY))
                return fail_status(s, SMP_BAD_LOGIT, i, logits[i], err);
    const int any_finite = sc.n_finite > 0;
    if (apply_bias_and_penalties(s, logits)) {
        logit_scan_row(logits, nv, &sc);
        if (sc.bad && scan_after_bad(s, logits, &sc, err) != 0)
            return -1;
    }
    /* The argmax: the lowest id on ties. */
    const int32_t best = sc.best, n_finite = sc.n_finite;
    const float max = best >= 0 ? logits[best] : -INFINITY;
    if (best < 0)
        return fail_status(s, any_finite ? SMP_NONE_LEFT : SMP_ALL_NEG_INF, -1, 0.0f, err);
    if (s->p.temperature == 0.0) {
        s->out_ids[0] = best;
        s->out_w[0] = SMP_WEIGHT_ONE;
        s->total = smp_u128_of(SMP_WEIGHT_ONE);
        *n = 1;
        return 0;
    }

    int32_t n_c = 0, k = s->p.top_k;
    int reordered = 0;
    if (k > 0 && k < n_finite && top_k_by_heap(k, n_finite)) {
        n_c = sampler_top_k_scan(logits, nv, k, s->cand);
        reordered = 1;
    } else {
        for (int32_t i = 0; i < nv; i++)
            if (logits[i] > -INFINITY)
                s->cand[n_c++] = (sampler_cand){logits[i], i};
        if (k > 0 && k < n_c) {
            sampler_select_best(s->cand, n_c, k);
            n_c = k;
            reordered = 1;
        }
    }
    if (s->top_p_q32 < SMP_TOP_P_OFF) {
        n_c = sampler_top_p(s->cand, n_c, max, s->top_p_q32, s->out_w);
        reordered = 1;
    }
    if (s->p.min_p > 0.0)
        n_c = sampler_min_p(s->cand, n_c, max, s->min_p_log);

    /* Back to id order, so the draw does not depend on how the survivors
     * were selected: a sort when few survive, a mark-and-scan of the
     * vocabulary when many do. */
    if (reordered) {
        if ((int64_t)n_c * 16 < nv) {
            sampler_sort_by_id(s->cand, n_c);
        } else {
            for (int32_t i = 0; i < n_c; i++)
                s->mark[s->cand[i].id] = 1;
            int32_t j = 0;
            for (int32_t i = 0; i < nv; i++)
                if (s->mark[i]) {
                    s->mark[i] = 0;
                    s->cand[j++] = (sampler_cand){logits[i], i};
                }
        }
    }

    /* Weights at the temperature (sample_math.h: the same integers a
     * device computes). */
    smp_u128 sum = smp_u128_of(0);
    smp_weights(&s->cand[0].logit, sizeof *s->cand / sizeof(float), n_c, max, s->p.temperature,
                s->out_w);
    for (int32_t i = 0; i < n_c; i++) {
        s->out_ids[i] = s->cand[i].id;
        sum = smp_add64(sum, s->out_w[i]);
    }
    *n = n_c;
    s->total = sum;
    return 0;
}

int sampler_probs(sampler *s, float *logits, const int32_t **ids, const double **probs,
                  int32_t *n, memra_err *err)
{
    if (prepare(s, logits, n, err) < 0)
        return -1;
    double total = smp_to_double(s->total);
    for (int32_t i = 0; i < *n; i++)
        s->out_probs[i] = (double)s->out_w[i] / total;
    *ids = s->out_ids;
    *probs = s->out_probs;
    return 0;
}

/* Every call takes the next counter of the stream, greedy or not, so the
 * stream position depends only on how many tokens were sampled. The draw
 * is exact integer arithmetic: the first survivor, in id order, whose
 * running weight passes floor(u * total / 2^64). */
int32_t sampler_sample(sampler *s, float *logits, memra_err *err)
{
    uint64_t step = s->step++;
    int32_t n;
    if (prepare(s, logits, &n, err) < 0)
        return -1;
    if (s->p.temperature == 0.0)
        return s->out_ids[0];
    smp_u128 target = smp_draw_target(s->total, smp_uniform(s->p.seed, step)), cum = {0, 0};
    for (int32_t i = 0; i < n; i++) {
        cum = smp_add64(cum, s->out_w[i]);
        if (smp_lt(target, cum))
            return s->out_ids[i];
    }
    /* target < total, so the walk always ends above; kept for safety */
    return s->out_ids[n - 1];
}

void sampler_row_export(sampler *s, smp_row *row, const smp_bias **bias, const smp_pen **pen,
                        const uint32_t **mask)
{
    memset(row, 0, sizeof *row);
    row->temperature = s->p.temperature;
    row->min_p_log = s->p.min_p > 0.0 ? s->min_p_log : -INFINITY;
    row->repetition_penalty = s->p.repetition_penalty;
    row->presence_penalty = s->p.presence_penalty;
    row->frequency_penalty = s->p.frequency_penalty;
    row->seed = s->p.seed;
    row->step = s->step;
    row->top_p_q32 = s->top_p_q32;
    row->top_k = s->p.top_k;
    row->n_bias = s->p.n_logit_bias;
    *bias = s->bias;
    *pen = s->pen;
    row->n_mask = s->has_mask ? s->mask_words : 0;
    *mask = s->has_mask ? s->mask : NULL;
    if (!s->penalize)
        return;
    prune_seen(s);
    for (int32_t i = 0; i < s->n_seen; i++)
        s->pen[i] = (smp_pen){s->seen[i], s->count[s->seen[i]]};
    row->n_pen = s->n_seen;
}

int32_t sampler_row_done(sampler *s, const smp_outcome *o, memra_err *err)
{
    s->step++;
    if (o->status != SMP_OK)
        return fail_status(s, o->status, o->bad_id, o->bad_value, err);
    if (o->id < 0 || o->id >= s->n_vocab)
        return memra_fail(err, "sampler: the device sampled token %d, outside [0, %d)", o->id,
                          s->n_vocab);
    return o->id;
}
