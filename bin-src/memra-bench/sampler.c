/* The sampler bench: the host sampler (lib/engine/sampler.c) on one
 * thread, ms a token for a few parameter mixes over one row of logits.
 * What it measures is what a CPU run pays per token on top of its
 * forward: the checks, top-k, top-p and the draw's weights at a large
 * vocabulary. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"
#include "bench/membw.h"
#include "core/check.h"
#include "core/cli.h"
#include "core/clock.h"
#include "core/rng.h"
#include "engine/sampler.h"
#include "numerics/sample_weights.h"

#include "bench_cli.h"

/* Calls a repetition: a repetition of the slowest mix at 151,936 ids
 * lasts tens of milliseconds. */
enum { CALLS = 20 };

static const struct {
    const char *name;
    double temperature, top_p, min_p;
    int32_t top_k;
} mixes[] = {
    /* the mixes with few candidates first: right after many 512-bit
     * weights (the vector form) a top-k 40 token read about half again
     * slower on the 2-core VM, the core still in some state of theirs */
    {"greedy", 0, 1, 0, 0},
    {"T 0.8, top-k 40, top-p 0.95, min-p 0.05", 0.8, 0.95, 0.05, 40},
    {"T 1", 1, 1, 0, 0},
    {"T 1, top-p 0.99", 1, 0.99, 0, 0},
    {"T 0.8, top-p 0.95", 0.8, 0.95, 0, 0},
};

typedef struct {
    sampler *s;
    float *logits; /* no bias or penalties: the sampler leaves them as they are */
} sampler_run;

static int sample_rep(void *ctx, double *ms, memra_err *err)
{
    sampler_run *r = ctx;
    double t0 = clock_now_ms();
    for (int i = 0; i < CALLS; i++)
        if (sampler_sample(r->s, r->logits, err) < 0)
            return -1;
    *ms = (clock_now_ms() - t0) / CALLS;
    return 0;
}

int bench_run_sampler(const bench_opts *o)
{
    const int64_t n = o->vocab;
    float *logits = xmalloc((size_t)n * sizeof *logits);
    rng_state rng;
    rng_seed(&rng, 1, 0);
    for (int64_t i = 0; i < n; i++)
        logits[i] = rng_normal(&rng) * 3.0f;
    uint64_t probe;
    const char *form = smp_weights_form(1, logits, 1, 1, logits[0], 1.0, &probe) == 0
                           ? "avx512"
                           : "scalar";
    enum { N_MIX = sizeof mixes / sizeof mixes[0] };
    bench_stats st[N_MIX];
    for (int m = 0; m < N_MIX; m++) {
        sampler_params p = sampler_params_default();
        p.temperature = mixes[m].temperature;
        p.top_p = mixes[m].top_p;
        p.min_p = mixes[m].min_p;
        p.top_k = mixes[m].top_k;
        p.seed = 1;
        memra_err err;
        sampler *s = sampler_new(&p, (int32_t)n, &err);
        if (!s)
            cli_fail(&err);
        sampler_run r = {s, logits};
        if (bench_repeat(sample_rep, &r, o->warmup, o->reps, &st[m], &err) != 0)
            cli_fail(&err);
        sampler_free(s);
    }
    char date[32];
    membw_utc_now(date, sizeof date);
    json_t *host = bench_host_json();
    if (o->json) {
        json_t *j = json_object(), *rows = json_array();
        json_object_set_new(j, "program", json_string("memra-bench"));
        json_object_set_new(j, "mode", json_string("sampler"));
        json_object_set_new(j, "date", json_string(date));
        json_object_set_new(j, "host", json_incref(host));
        json_object_set_new(j, "vocab", json_integer((json_int_t)n));
        json_object_set_new(j, "weights_form", json_string(form));
        json_object_set_new(j, "threads", json_integer(1));
        json_object_set_new(j, "calls_per_rep", json_integer(CALLS));
        json_object_set_new(j, "warmup", json_integer(o->warmup));
        json_object_set_new(j, "reps", json_integer(o->reps));
        for (int m = 0; m < N_MIX; m++)
            json_array_append_new(
                rows, json_pack("{s:s,s:f,s:i,s:f,s:f,s:{s:f,s:f,s:f,s:f},s:f}", "mix",
                                mixes[m].name, "temperature", mixes[m].temperature, "top_k",
                                (int)mixes[m].top_k, "top_p", mixes[m].top_p, "min_p",
                                mixes[m].min_p, "ms", "median", st[m].median, "min", st[m].min,
                                "max", st[m].max, "mean", st[m].mean, "tokens_s",
                                1e3 / st[m].median));
        json_object_set_new(j, "rows", rows);
        bench_print_json(j);
        json_decref(j);
    } else {
        printf("memra-bench --sampler %s\n", date);
        printf("sampler   lib/engine/sampler.c, one thread; one row of %lld pseudo-random "
               "logits (N(0, 9), seed 1)\n",
               (long long)n);
        printf("weights   %s form (lib/numerics/sample_weights.c)\n", form);
        printf("cpu       %s\n", json_string_value(json_object_get(host, "cpu")));
        printf("timing    %d warm-up, median of %d [min, max], each the mean of %d calls\n\n",
               o->warmup, o->reps, CALLS);
        printf("| %-40s | %28s | %10s |\n", "mix", "ms/token median [min, max]", "tokens/s");
        printf("|------------------------------------------|------------------------------|"
               "------------|\n");
        for (int m = 0; m < N_MIX; m++) {
            char ms[64];
            snprintf(ms, sizeof ms, "%.3f [%.3f, %.3f]", st[m].median, st[m].min, st[m].max);
            printf("| %-40s | %28s | %10.0f |\n", mixes[m].name, ms, 1e3 / st[m].median);
        }
    }
    json_decref(host);
    free(logits);
    return 0;
}
