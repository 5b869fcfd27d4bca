/* The server bench: a load client against an OpenAI-compatible server. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"
#include "bench/membw.h"
#include "bench/loadgen.h"

#include "bench_cli.h"

static json_t *dist_json(const loadgen_dist *d)
{
    return json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)d->n, "p50", d->p50,
                     "p90", d->p90, "p99", d->p99, "min", d->min, "max", d->max, "mean",
                     d->mean);
}

json_t *bench_level_json(const loadgen_level *l)
{
    json_t *j = json_object();
    json_object_set_new(j, "concurrency", json_integer(l->concurrency));
    json_object_set_new(j, "requests", json_integer(l->requests));
    json_object_set_new(j, "ok", json_integer(l->ok));
    json_object_set_new(j, "errors", json_integer(l->errors));
    if (l->first_error[0])
        json_object_set_new(j, "first_error", json_string(l->first_error));
    json_object_set_new(j, "duration_s", json_real(l->duration_s));
    json_object_set_new(j, "requests_s", json_real(l->requests_s));
    json_object_set_new(j, "tok_s", json_real(l->tok_s));
    json_object_set_new(j, "tokens_requested", json_integer((json_int_t)l->tokens_requested));
    json_object_set_new(j, "tokens_received", json_integer((json_int_t)l->tokens_received));
    json_object_set_new(j, "short_requests", json_integer(l->short_requests));
    json_object_set_new(j, "textless_requests", json_integer(l->textless_requests));
    json_object_set_new(j, "prompt_tokens", json_integer((json_int_t)l->prompt_tokens));
    json_object_set_new(j, "cached_tokens", json_integer((json_int_t)l->cached_tokens));
    json_object_set_new(j, "prompt_tok_s", json_real(l->prompt_tok_s));
    json_object_set_new(j, "ttft_ms", dist_json(&l->ttft_ms));
    json_object_set_new(j, "itl_ms", dist_json(&l->itl_ms));
    json_object_set_new(j, "tpot_ms", dist_json(&l->tpot_ms));
    json_object_set_new(j, "e2e_ms", dist_json(&l->e2e_ms));
    return j;
}

int bench_run_server(const bench_opts *o)
{
    if (o->turns)
        return bench_run_server_turns(o);
    memra_err err;
    loadgen_opts lo = {
        .url = o->server, .model = o->server_model, .api_key = o->api_key,
        .n_prompt = (int)o->pp.v[0], .n_gen = (int)o->tg.v[0], .n_vocab = o->vocab,
        .timeout_s = o->timeout_s, .seed = 20261130,
    };
    loadgen *lg;
    if (loadgen_new(&lo, &lg, &err) != 0)
        cli_fail(&err);
    char date[32];
    membw_utc_now(date, sizeof date);
    json_t *host = bench_host_json();
    if (!o->json) {
        char ctx[32] = "unknown";
        if (loadgen_n_ctx(lg) > 0)
            snprintf(ctx, sizeof ctx, "%" PRId64, loadgen_n_ctx(lg));
        printf("memra-bench --server %s\n", date);
        printf("server    %s: model '%s' (context %s, vocab %" PRId64 ")\n", o->server,
               loadgen_model(lg), ctx, loadgen_n_vocab(lg));
        printf("requests  POST %s, streamed with usage; prompt %d token ids (fresh per "
               "request), max_tokens %d, ignore_eos, temperature 0\n", loadgen_endpoint(lg),
               lo.n_prompt, lo.n_gen);
        printf("load      per level: c streams, each sending %d request%s back to back; %d "
               "warm-up request%s first\n", o->reps, o->reps == 1 ? "" : "s", o->warmup,
               o->warmup == 1 ? "" : "s");
        printf("cpu       %s (client side)\n", json_string_value(json_object_get(host, "cpu")));
        fflush(stdout);
    }
    loadgen_level lv;
    if (o->warmup > 0) {
        if (loadgen_run(lg, 1, o->warmup, &lv, &err) != 0)
            cli_fail(&err);
        if (lv.errors)
            cli_failf("warm-up request failed: %s", lv.first_error);
    }
    /* Cold TTFT: one request alone, its prompt new to the server. */
    if (loadgen_run(lg, 1, 1, &lv, &err) != 0)
        cli_fail(&err);
    if (lv.errors)
        cli_failf("cold-TTFT request failed: %s", lv.first_error);
    double cold_ttft = lv.ttft_ms.p50;
    int cold_known = lv.ttft_ms.n > 0;
    if (!o->json) {
        if (cold_known)
            printf("cold TTFT %.2f ms (one request alone after the warm-up, a fresh prompt)\n\n",
                   cold_ttft);
        else
            printf("cold TTFT unknown: the request streamed no text (only special tokens)\n\n");
        printf("| %4s | %8s | %6s | %8s | %9s | %9s | %9s | %8s | %8s | %13s |\n", "c",
               "requests", "errors", "req/s", "tok/s", "TTFT p50", "TTFT p99", "ITL p50",
               "ITL p99", "tokens got");
        printf("|------|----------|--------|----------|-----------|-----------|-----------|"
               "----------|----------|---------------|\n");
        fflush(stdout);
    }
    json_t *levels = json_array();
    int total = 0, failed = 0, textless = 0;
    char first_error[512] = "";
    for (size_t i = 0; i < o->conc.n; i++) {
        int c = (int)o->conc.v[i];
        if (loadgen_run(lg, c, c * o->reps, &lv, &err) != 0)
            cli_fail(&err);
        total += lv.requests;
        failed += lv.errors;
        textless += lv.textless_requests;
        if (lv.errors && !first_error[0])
            snprintf(first_error, sizeof first_error, "%s", lv.first_error);
        json_array_append_new(levels, bench_level_json(&lv));
        if (!o->json) {
            char rs[32], ts[32], got[48];
            bench_fmt_num(lv.requests_s, rs, sizeof rs);
            bench_fmt_num(lv.tok_s, ts, sizeof ts);
            snprintf(got, sizeof got, "%" PRIu64 "/%" PRIu64, lv.tokens_received,
                     lv.tokens_requested);
            printf("| %4d | %8d | %6d | %8s | %9s | %9.2f | %9.2f | %8.2f | %8.2f | %13s |\n", c,
                   lv.requests, lv.errors, rs, ts, lv.ttft_ms.p50, lv.ttft_ms.p99,
                   lv.itl_ms.p50, lv.itl_ms.p99, got);
            fflush(stdout);
        }
    }
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "program", json_string("memra-bench"));
        json_object_set_new(j, "mode", json_string("server"));
        json_object_set_new(j, "date", json_string(date));
        json_object_set_new(j, "host", json_incref(host));
        json_t *sj = json_object();
        json_object_set_new(sj, "url", json_string(o->server));
        json_object_set_new(sj, "endpoint", json_string(loadgen_endpoint(lg)));
        json_object_set_new(sj, "model", json_string(loadgen_model(lg)));
        if (loadgen_n_ctx(lg) > 0)
            json_object_set_new(sj, "context_length", json_integer(loadgen_n_ctx(lg)));
        json_object_set_new(sj, "vocab_size", json_integer(loadgen_n_vocab(lg)));
        json_object_set_new(j, "server", sj);
        json_object_set_new(j, "n_prompt", json_integer(lo.n_prompt));
        json_object_set_new(j, "n_gen", json_integer(lo.n_gen));
        json_object_set_new(j, "requests_per_stream", json_integer(o->reps));
        json_object_set_new(j, "warmup", json_integer(o->warmup));
        json_object_set_new(j, "cold_ttft_ms", cold_known ? json_real(cold_ttft) : json_null());
        json_object_set_new(j, "levels", levels);
        levels = NULL;
        bench_print_json(j);
        json_decref(j);
    } else {
        printf("\nms throughout; c streams x %d request%s per level; tok/s = tokens received / "
               "the level's wall time; ITL = gaps between text events\n", o->reps,
               o->reps == 1 ? "" : "s");
        if (textless)
            printf("%d request%s streamed no text at all (only special tokens): counted in req/s "
                   "and tok/s, left out of TTFT and ITL\n", textless, textless == 1 ? "" : "s");
    }
    json_decref(levels);
    json_decref(host);
    loadgen_free(lg);
    if (failed)
        cli_failf("%d of %d requests failed; the first: %s", failed, total, first_error);
    return 0;
}
