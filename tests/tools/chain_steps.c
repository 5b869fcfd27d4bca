/* chain_steps: what a drafter's chain of greedy steps costs, as one chain
 * (engine_forward_chain_sample: on CUDA one graph) and as the same steps
 * one at a time (engine_forward_sample, each id read back before the next
 * step), alternately, on one engine. Each round runs K steps from the
 * sequence's end and cuts it back to one of them, as a round that keeps
 * its first draft does, so the positions stay between 9 and 48 (one
 * graph a length); the first round of each way warms and captures.
 *
 *   chain_steps MODEL K ROUNDS [cuda|cpu]
 *
 * Prints one line a way and repetition: microseconds a round and a step,
 * and on CUDA the graphs replayed (single steps and chains). For
 * docs/decisions/0041-draft-chain-graph.md; not a test. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/clock.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "model/checkpoint.h"
#if MEMRA_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

/* ROUNDS rounds of K steps from *tok, chained or one at a time. */
static int rounds(engine *e, engine_seq *q, sampler *smp, int chained, int k, int n,
                  int32_t *tok, memra_err *err)
{
    int32_t ids[16];
    for (int r = 0; r < n; r++) {
        int64_t at = engine_seq_kv(q)->n_tokens;
        if (chained) {
            if (engine_forward_chain_sample(e, q, *tok, k, smp, ids, err) != 0)
                return -1;
        } else {
            int32_t x = *tok;
            for (int i = 0; i < k; i++) {
                if (engine_forward_sample(e, q, &x, 1, smp, &x, err) != 0)
                    return -1;
                ids[i] = x;
            }
        }
        engine_seq_truncate(q, at + 1);
        *tok = ids[0];
        if (engine_seq_kv(q)->n_tokens > 40)
            engine_seq_truncate(q, 9);
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5) {
        fprintf(stderr, "usage: chain_steps MODEL K ROUNDS [cuda|cpu]\n");
        return 2;
    }
    int k = atoi(argv[2]), n = atoi(argv[3]);
    if (k < 1 || k > 16 || n < 1) {
        fprintf(stderr, "chain_steps: K must be 1..16 and ROUNDS at least 1\n");
        return 2;
    }
    backend_kind kind = argc == 5 && strcmp(argv[4], "cpu") == 0 ? BK_CPU : BK_CUDA;
    memra_err err = {{0}};
    checkpoint ck;
    if (checkpoint_open(argv[1], &ck, &err) != 0) {
        fprintf(stderr, "chain_steps: %s\n", err.msg);
        return 1;
    }
    engine_opts o;
    engine_opts_default(&o);
    o.backend = kind;
    o.n_ctx = 256;
    o.n_seqs = 1;
    engine *e = NULL;
    if (engine_load(&ck, &o, &e, &err) != 0) {
        fprintf(stderr, "chain_steps: %s\n", err.msg);
        return 1;
    }
    sampler_params p = sampler_params_default();
    p.temperature = 0.0;
    sampler *smp = sampler_new(&p, (int32_t)engine_config(e)->n_vocab, &err);
    engine_seq *q = NULL;
    const int32_t prompt[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    int32_t tok = 0;
    if (!smp || engine_seq_new(e, &q, &err) != 0 ||
        engine_forward_sample(e, q, prompt, 8, smp, &tok, &err) != 0) {
        fprintf(stderr, "chain_steps: %s\n", err.msg);
        return 1;
    }
    for (int rep = 0; rep < 2; rep++)
        for (int chained = 0; chained < 2; chained++) {
            double t0 = clock_now_s();
            if (rounds(e, q, smp, chained, k, n, &tok, &err) != 0) {
                fprintf(stderr, "chain_steps: %s\n", err.msg);
                return 1;
            }
            double us = (clock_now_s() - t0) / n * 1e6;
            printf("%-10s rep %d K %d: %8.1f us a round, %7.1f a step",
                   chained ? "chained" : "one-by-one", rep, k, us, us / k);
#if MEMRA_CUDA
            if (kind == BK_CUDA) {
                uint64_t replays, captures, abandoned;
                backend *bk = engine_model(e)->bk;
                backend_cuda_graph_stats(bk, &replays, &captures, &abandoned);
                printf("  (so far: %" PRIu64 " step replays, %" PRIu64 " chain replays, %" PRIu64
                       " captures, %" PRIu64 " abandoned)",
                       replays, backend_cuda_graph_chain_replays(bk), captures, abandoned);
            }
#endif
            printf("\n");
        }
    sampler_free(smp);
    engine_seq_free(q);
    engine_free(e);
    checkpoint_close(&ck);
    return 0;
}
