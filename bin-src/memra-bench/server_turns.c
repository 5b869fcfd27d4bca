/* The server bench's multi-turn mode (--turns): conversations against an
 * OpenAI-compatible server's chat endpoint, reported per turn index, to
 * see what a prefix cache does for the turns after the first. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cli.h"
#include "bench/convo.h"
#include "bench/loadgen.h"
#include "bench/membw.h"

#include "bench_cli.h"

#define SEED 20261130
/* The system prompt's filler stream, one per length: clear of the
 * conversations' (below 2^63) and the calibration's (loadgen_turns.c), and
 * different for each length, so a run never finds a shorter run's system
 * prompt cached as its own prefix (filler of one stream is prefix-stable). */
#define SYSTEM_STREAM(words) ((1ull << 63) | (uint64_t)(words))

/* Filler words for about `tokens` tokens at the measured rate. */
static size_t words_for(int64_t tokens, double tokens_per_word)
{
    if (tokens <= 0)
        return 0;
    double w = floor((double)tokens / tokens_per_word + 0.5);
    return w < 1 ? 1 : (size_t)w;
}

static json_t *turn_levels_json(const loadgen_turns_result *r)
{
    json_t *a = json_array();
    for (int k = 0; k < r->turns; k++) {
        json_t *j = json_object();
        json_object_set_new(j, "turn", json_integer(k + 1));
        json_t *l = bench_level_json(&r->turn[k]);
        json_object_update(j, l);
        json_decref(l);
        json_array_append_new(a, j);
    }
    return a;
}

static void print_row(const char *label, const loadgen_level *l)
{
    char pts[32], ts[32], fresh[32] = "-";
    bench_fmt_num(l->prompt_tok_s, pts, sizeof pts);
    bench_fmt_num(l->tok_s, ts, sizeof ts);
    if (l->ok)
        bench_fmt_num((double)(l->prompt_tokens - l->cached_tokens) / l->ok, fresh,
                      sizeof fresh);
    printf("| %4s | %8d | %6d | %10" PRIu64 " | %10" PRIu64 " | %9s | %9.2f | %9.2f | %9.2f | "
           "%10s | %9s |\n", label, l->requests, l->errors, l->prompt_tokens, l->cached_tokens,
           fresh, l->ttft_ms.mean, l->ttft_ms.p50, l->ttft_ms.p99, pts, ts);
}

static void print_header(void)
{
    printf("| %4s | %8s | %6s | %10s | %10s | %9s | %9s | %9s | %9s | %10s | %9s |\n", "turn",
           "requests", "errors", "prompt tok", "cached tok", "new/req", "TTFT mean", "TTFT p50",
           "TTFT p99", "prompt t/s", "tok/s");
    printf("|------|----------|--------|------------|------------|-----------|-----------|"
           "-----------|-----------|------------|-----------|\n");
}

int bench_run_server_turns(const bench_opts *o)
{
    memra_err err;
    loadgen_opts lo = {
        .url = o->server, .model = o->server_model, .api_key = o->api_key, .n_prompt = 0,
        .n_gen = (int)o->tg.v[0], .n_vocab = o->vocab, .timeout_s = o->timeout_s,
        .seed = SEED,
    };
    /* a server without vocab_size is fine: chat requests send text, no ids */
    if (lo.n_vocab <= 0)
        lo.n_vocab = 1;
    loadgen *lg;
    if (loadgen_new(&lo, &lg, &err) != 0)
        cli_fail(&err);
    double tpw, overhead;
    if (loadgen_calibrate(lg, SEED, &tpw, &overhead, &err) != 0)
        cli_fail(&err);
    size_t sys_words = words_for(o->system_tokens, tpw);
    size_t turn_words = words_for(o->turn_tokens, tpw);
    /* The last turn's prompt, roughly: the system prompt, every user
     * message and every reply but its own, and the template's tokens per
     * turn. Past the context every late turn would fail; say so first. */
    double last = (double)o->system_tokens + o->turns * ((double)o->turn_tokens + overhead) +
                  (o->turns - 1) * (double)lo.n_gen;
    if (loadgen_n_ctx(lg) > 0 && last + lo.n_gen > (double)loadgen_n_ctx(lg))
        cli_failf("--turns %d: the last turn's prompt (about %.0f tokens) + %d generated do "
                  "not fit the context of %" PRId64 " of model '%s'", o->turns, last, lo.n_gen,
                  loadgen_n_ctx(lg), loadgen_model(lg));
    char *system = convo_filler(SEED, SYSTEM_STREAM(sys_words), sys_words);

    char date[32];
    membw_utc_now(date, sizeof date);
    json_t *host = bench_host_json();
    if (!o->json) {
        char ctx[32] = "unknown";
        if (loadgen_n_ctx(lg) > 0)
            snprintf(ctx, sizeof ctx, "%" PRId64, loadgen_n_ctx(lg));
        printf("memra-bench --server --turns %d, %s\n", o->turns, date);
        printf("server    %s: model '%s' (context %s)\n", o->server, loadgen_model(lg), ctx);
        printf("requests  POST %s, streamed with usage; max_tokens %d, ignore_eos, "
               "temperature 0\n", loadgen_chat_endpoint(lg), lo.n_gen);
        printf("prompts   a shared system prompt of %zu words (~%" PRId64 " tokens), user "
               "messages of %zu words (~%" PRId64 " tokens); %.3f tokens/word and %.0f "
               "template tokens a turn, measured\n", sys_words, o->system_tokens, turn_words,
               o->turn_tokens, tpw, overhead);
        printf("load      per level: c clients, each running %d conversation%s of %d turns, "
               "every turn resending the whole history\n", o->reps, o->reps == 1 ? "" : "s",
               o->turns);
        printf("cpu       %s (client side)\n\n", json_string_value(json_object_get(host, "cpu")));
        fflush(stdout);
    }

    json_t *levels = json_array();
    int total = 0, failed = 0;
    char first_error[512] = "";
    uint64_t first_id = 0;
    for (size_t i = 0; i < o->conc.n; i++) {
        int c = (int)o->conc.v[i];
        loadgen_turns_opts to = {
            .turns = o->turns, .conversations = o->reps, .system = system,
            .turn_words = turn_words, .seed = SEED, .first_id = first_id,
        };
        /* each level's conversations are new; only the system prompt recurs */
        first_id += (uint64_t)c * (uint64_t)o->reps;
        loadgen_turns_result r;
        if (loadgen_run_turns(lg, c, &to, &r, &err) != 0)
            cli_fail(&err);
        total += r.all.requests;
        failed += r.all.errors;
        if (r.all.errors && !first_error[0])
            snprintf(first_error, sizeof first_error, "%s", r.all.first_error);
        json_t *lj = bench_level_json(&r.all);
        json_object_set_new(lj, "conversations", json_integer((json_int_t)c * o->reps));
        json_object_set_new(lj, "per_turn", turn_levels_json(&r));
        json_array_append_new(levels, lj);
        if (!o->json) {
            printf("c=%d: %d conversation%s, %d requests in %.2f s\n", c, c * o->reps,
                   c * o->reps == 1 ? "" : "s", r.all.requests, r.all.duration_s);
            print_header();
            for (int k = 0; k < r.turns; k++) {
                char label[16];
                snprintf(label, sizeof label, "%d", k + 1);
                print_row(label, &r.turn[k]);
            }
            print_row("all", &r.all);
            printf("\n");
            fflush(stdout);
        }
        loadgen_turns_result_free(&r);
    }
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "program", json_string("memra-bench"));
        json_object_set_new(j, "mode", json_string("server"));
        json_object_set_new(j, "date", json_string(date));
        json_object_set_new(j, "host", json_incref(host));
        json_t *sj = json_object();
        json_object_set_new(sj, "url", json_string(o->server));
        json_object_set_new(sj, "endpoint", json_string(loadgen_chat_endpoint(lg)));
        json_object_set_new(sj, "model", json_string(loadgen_model(lg)));
        if (loadgen_n_ctx(lg) > 0)
            json_object_set_new(sj, "context_length", json_integer(loadgen_n_ctx(lg)));
        json_object_set_new(j, "server", sj);
        json_object_set_new(
            j, "multiturn",
            json_pack("{s:i,s:i,s:I,s:I,s:I,s:I,s:f,s:f}", "turns", o->turns,
                      "conversations_per_client", o->reps, "system_tokens",
                      (json_int_t)o->system_tokens, "turn_tokens", (json_int_t)o->turn_tokens,
                      "system_words", (json_int_t)sys_words, "turn_words",
                      (json_int_t)turn_words, "tokens_per_word", tpw, "template_tokens",
                      overhead));
        json_object_set_new(j, "n_gen", json_integer(lo.n_gen));
        json_object_set_new(j, "levels", levels);
        levels = NULL;
        bench_print_json(j);
        json_decref(j);
    } else {
        printf("ms throughout; prompt and cached tokens are the server's counts (cached: "
               "usage.prompt_tokens_details.cached_tokens, 0 when absent); new/req = (prompt - "
               "cached) / ok requests; rates over each turn's span (first sent to last ended), "
               "all over the level's wall time\n");
    }
    json_decref(levels);
    json_decref(host);
    free(system);
    loadgen_free(lg);
    if (failed)
        cli_failf("%d of %d requests failed; the first: %s", failed, total, first_error);
    return 0;
}
