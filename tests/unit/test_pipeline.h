/* Pipeline parallel (engine_opts.pp) gives the bytes of one backend: the
 * same trace of steps (a 40-row prompt step, decode steps, batched decode
 * of two sequences, steps sampled where the backend samples) on one
 * backend and on a pipeline of `pp` stages, logits and tokens compared
 * bit for bit. Tensor parallel (engine_opts.tp) gives the same bytes run
 * after run, one backend's logits within a bound and its greedy tokens,
 * and a sequence's bytes whether it decodes alone or beside another. On
 * CUDA the stages (ranks) go on devices 0 and 1 where there are two, else
 * all on device 0. Shared by test_cuda_engine's CPU and CUDA cases.
 * Include after test.h. */
#ifndef MEMRA_TEST_PIPELINE_H
#define MEMRA_TEST_PIPELINE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/checkpoint.h"

#define PIPE_PROMPT 40
#define PIPE_DECODE 6
#define PIPE_BATCH 4
#define PIPE_SAMPLED 3
/* logit rows of a trace: every prompt position, each decode step, two
 * sequences per batched step */
#define PIPE_ROWS (PIPE_PROMPT + PIPE_DECODE + 2 * PIPE_BATCH)

/* The trace on an engine of pp stages or tp ranks (both <= 1: one
 * backend); NULL on failure (recorded). tokens gets the PIPE_SAMPLED
 * sampled ids. With `alone`, the batched steps run as one step per
 * sequence instead. */
static inline float *parallel_trace(const checkpoint *ck, backend_kind kind, int pp, int tp,
                                    int alone, int n_devices, int32_t *tokens)
{
    engine_opts o;
    engine_opts_default(&o);
    o.backend = kind;
    o.n_threads = 2;
    o.n_batch = 64;
    o.n_ctx = 128;
    o.n_seqs = 2;
    o.kv_type = KV_F32;
    o.pp = pp;
    o.tp = tp;
    int parts = tp > 1 ? tp : pp;
    if (parts > 1 && kind == BK_CUDA) {
        o.n_devices = parts;
        for (int s = 0; s < parts; s++)
            o.devices[s] = s % n_devices;
    }
    memra_err err = {{0}};
    engine *e = NULL;
    if (engine_load(ck, &o, &e, &err) != 0) {
        CHECK_MSG(0, "%d stages, %d ranks: engine_load: %s", pp, tp, err.msg);
        return NULL;
    }
    int64_t vocab = engine_config(e)->n_vocab;
    float *out = calloc((size_t)PIPE_ROWS * (size_t)vocab, sizeof *out);
    int32_t prompt[PIPE_PROMPT];
    for (int i = 0; i < PIPE_PROMPT; i++)
        prompt[i] = (int32_t)((i * 53 + 7) % vocab);
    engine_seq *s[2];
    engine_seq_new(e, &s[0], &err);
    engine_seq_new(e, &s[1], &err);
    size_t at = 0;
    int ok = engine_forward(e, s[0], prompt, PIPE_PROMPT, out, 1, &err) == 0;
    at += PIPE_PROMPT;
    for (int j = 0; ok && j < PIPE_DECODE; j++, at++)
        ok = engine_forward(e, s[0], &prompt[j], 1, out + at * (size_t)vocab, 0, &err) == 0;
    ok = ok && engine_forward(e, s[1], prompt + 3, 7, NULL, 0, &err) == 0;
    for (int j = 0; ok && j < PIPE_BATCH; j++, at += 2) {
        int32_t bt[2] = {prompt[j + 10], prompt[j + 20]};
        if (alone)
            ok = engine_forward(e, s[0], &bt[0], 1, out + at * (size_t)vocab, 0, &err) == 0 &&
                 engine_forward(e, s[1], &bt[1], 1, out + (at + 1) * (size_t)vocab, 0,
                                &err) == 0;
        else
            ok = engine_forward_batch(e, s, bt, 2, out + at * (size_t)vocab, &err) == 0;
    }
    sampler_params sp = sampler_params_default();
    sp.temperature = 0;
    sampler *greedy = ok ? sampler_new(&sp, (int32_t)vocab, &err) : NULL;
    int32_t next = prompt[30];
    for (int j = 0; ok && greedy && j < PIPE_SAMPLED; j++) {
        ok = engine_forward_sample(e, s[1], &next, 1, greedy, &next, &err) == 0;
        tokens[j] = next;
    }
    CHECK_MSG(ok, "%d stages, %d ranks: the trace: %s", pp, tp, err.msg);
    sampler_free(greedy);
    engine_seq_free(s[0]);
    engine_seq_free(s[1]);
    engine_free(e);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

static inline float *pipeline_trace(const checkpoint *ck, backend_kind kind, int pp,
                                    int n_devices, int32_t *tokens)
{
    return parallel_trace(ck, kind, pp, 1, 0, n_devices, tokens);
}

/* The first index where a and b differ in bits; n when none. */
static inline size_t trace_first_diff(const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0)
            return i;
    return n;
}

/* The largest |a - b| over n floats (NaN: infinite), and the largest |a|
 * into *scale. */
static inline double trace_max_diff(const float *a, const float *b, size_t n, double *scale)
{
    double worst = 0, sc = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        worst = d != d ? INFINITY : d > worst ? d : worst;
        sc = fabs((double)a[i]) > sc ? fabs((double)a[i]) : sc;
    }
    if (scale)
        *scale = sc;
    return worst;
}

/* Tensor parallel over 2 ranks (and 4 where the heads divide; ranks share
 * a KV head where there are fewer): the same
 * bytes twice, the same bytes batched and alone, and as close to the
 * exact reference as one backend is: on the CPU, one backend's logits
 * within rel_bound of the largest; on CUDA, whose activations pass
 * through bf16 where a change of the order of additions moves a rounding,
 * no further from the CPU reference's logits than twice one device's
 * distance (plus rel_bound). One backend's greedy tokens either way. */
static inline void tensor_parallel_check(const checkpoint *ck, backend_kind kind, int n_devices,
                                         double rel_bound, const char *what)
{
    size_t n = (size_t)PIPE_ROWS * (size_t)ck->config.n_vocab;
    int32_t ref_tok[PIPE_SAMPLED] = {0}, tok[PIPE_SAMPLED] = {0}, tok2[PIPE_SAMPLED] = {0};
    float *ref = parallel_trace(ck, kind, 1, 1, 0, n_devices, ref_tok);
    float *exact = kind == BK_CUDA ? parallel_trace(ck, BK_CPU_REF, 1, 1, 0, 1, tok2) : NULL;
    double scale = 1, one_err = 0;
    if (exact && ref) {
        one_err = trace_max_diff(ref, exact, n, &scale);
        printf("  # %s: one device %g from the CPU reference (logits up to %g)\n", what,
               one_err, scale);
    }
    for (int tp = 2; ref && (exact || kind != BK_CUDA) && tp <= 4; tp *= 2) {
        const model_config *c = &ck->config;
        if (c->n_heads % tp != 0 || (c->n_kv_heads >= tp ? c->n_kv_heads % tp : tp % c->n_kv_heads) ||
            c->lin_n_k_heads % tp != 0)
            continue; /* does not split (KV heads fewer than ranks are shared) */
        float *got = parallel_trace(ck, kind, 1, tp, 0, n_devices, tok);
        float *again = parallel_trace(ck, kind, 1, tp, 0, n_devices, tok2);
        float *alone = parallel_trace(ck, kind, 1, tp, 1, n_devices, tok2);
        if (got && again && alone) {
            size_t d = trace_first_diff(got, again, n);
            CHECK_MSG(d == n, "%s: %d ranks differ from themselves run to run at logit row %zu",
                      what, tp, d / (size_t)ck->config.n_vocab);
            d = trace_first_diff(got, alone, n);
            CHECK_MSG(d == n, "%s: %d ranks: a batched step differs from the sequences alone at "
                      "logit row %zu", what, tp, d / (size_t)ck->config.n_vocab);
            if (exact) {
                double err = trace_max_diff(got, exact, n, NULL);
                printf("  # %s: %d ranks %g from the CPU reference\n", what, tp, err);
                CHECK_MSG(err <= 2 * one_err + rel_bound * scale, "%s: %d ranks are %g from the "
                          "CPU reference's logits, one device %g (bound twice that + %g of %g)",
                          what, tp, err, one_err, rel_bound, scale);
            } else {
                double err = trace_max_diff(got, ref, n, &scale);
                CHECK_MSG(err <= rel_bound * scale, "%s: %d ranks: max |diff| %g of logits up "
                          "to %g (bound %g of it)", what, tp, err, scale, rel_bound);
            }
            CHECK_MSG(memcmp(tok, ref_tok, sizeof tok) == 0, "%s: %d ranks sampled %d %d %d "
                      "greedily, one backend %d %d %d", what, tp, tok[0], tok[1], tok[2],
                      ref_tok[0], ref_tok[1], ref_tok[2]);
        }
        free(got);
        free(again);
        free(alone);
    }
    free(ref);
    free(exact);
}

/* One backend against pipelines of 2 (and, where the model has the
 * layers, 3) stages. */
static inline void pipeline_check(const checkpoint *ck, backend_kind kind, int n_devices,
                                  const char *what)
{
    size_t n = (size_t)PIPE_ROWS * (size_t)ck->config.n_vocab;
    int32_t ref_tok[PIPE_SAMPLED] = {0}, tok[PIPE_SAMPLED] = {0};
    float *ref = pipeline_trace(ck, kind, 1, n_devices, ref_tok);
    for (int pp = 2; ref && pp <= 3 && pp <= ck->config.n_layers; pp++) {
        float *got = pipeline_trace(ck, kind, pp, n_devices, tok);
        if (got) {
            size_t first = n;
            for (size_t i = 0; i < n && first == n; i++)
                if (memcmp(&got[i], &ref[i], sizeof *got) != 0)
                    first = i;
            CHECK_MSG(first == n, "%s: a pipeline of %d stages differs from one backend at "
                      "logit row %zu (%g, one backend %g)", what, pp,
                      first / (size_t)ck->config.n_vocab, first < n ? got[first] : 0.0,
                      first < n ? ref[first] : 0.0);
            CHECK_MSG(memcmp(tok, ref_tok, sizeof tok) == 0, "%s: a pipeline of %d stages "
                      "sampled %d %d %d, one backend %d %d %d", what, pp, tok[0], tok[1], tok[2],
                      ref_tok[0], ref_tok[1], ref_tok[2]);
        }
        free(got);
    }
    free(ref);
}

#endif
