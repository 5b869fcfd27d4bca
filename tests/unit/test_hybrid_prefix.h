/* The prefix cache on a model with recurrent layers (tiny-qwen3_5, random
 * weights), on one backend: a prompt run in chunks of 32 and published
 * after each chunk keeps the state at 32, 64 and 96; prompts sharing 0,
 * 40, 64 or all 100 tokens adopt the chunks whose end kept a state and
 * give the logits of a cold run, bit for bit (on one backend, a pipeline
 * of pp stages: every stage keeps its layers' states, or tp
 * tensor-parallel ranks: every rank its heads' part); blocks
 * published where the
 * sequence does not stand (no state) are never adopted. Shared by
 * test_prefix_cache (CPU) and test_cuda_engine (CUDA). Include after
 * test.h. */
#ifndef MEMRA_TEST_HYBRID_PREFIX_H
#define MEMRA_TEST_HYBRID_PREFIX_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine/engine.h"
#include "model/checkpoint.h"
#include "model/convert.h"

/* Logits of the last of tokens[pos, n) run on s in chunks of `chunk`,
 * publishing the whole chunks in namespace ns after each (ns 0: none). */
static inline int prefix_run(engine *e, engine_seq *s, const int32_t *tokens, int64_t n,
                             int chunk, uint64_t ns, float *logits)
{
    memra_err err = {{0}};
    for (int64_t at = engine_seq_pos(s); at < n;) {
        int step = (int)(n - at < chunk ? n - at : chunk);
        if (engine_forward(e, s, tokens + at, step, at + step == n ? logits : NULL, 0, &err)) {
            CHECK_MSG(0, "forward: %s", err.msg);
            return -1;
        }
        at += step;
        if (ns)
            engine_seq_publish_prefix(s, ns, tokens, at / chunk * chunk);
    }
    return 0;
}

static inline void hybrid_prefix_check(backend_kind kind, int pp, int tp, const char *what)
{
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/memra-test-hybrid-prefix-%d-%s-%d-%d", test_tmp_dir(),
             (int)getpid(), what, pp, tp);
    memra_err err = {{0}};
    convert_opts co = {.outtype = DT_F32, .n_threads = 2};
    checkpoint ck;
    if (convert_random("tests/fixtures/configs/tiny-qwen3_5.json", 7, dir, &co, &err) != 0 ||
        checkpoint_open(dir, &ck, &err) != 0) {
        CHECK_MSG(0, "%s: tiny-qwen3_5: %s", what, err.msg);
        return;
    }
    engine_opts o;
    engine_opts_default(&o);
    o.backend = kind;
    o.n_threads = 2;
    o.n_batch = 32;
    o.n_ctx = 256;
    o.n_seqs = 3;
    o.prefix_cache = 1;
    o.pp = pp; /* a pipeline's stages each keep and restore their layers' states */
    o.tp = tp; /* a tensor-parallel rank, its heads' part of each state */
    engine *e = NULL;
    if (engine_load(&ck, &o, &e, &err) != 0) {
        CHECK_MSG(0, "%s: engine_load: %s", what, err.msg);
        checkpoint_close(&ck);
        return;
    }
    CHECK(engine_prefix_shareable(e));
    int64_t vocab = engine_config(e)->n_vocab;
    float *a = malloc((size_t)vocab * sizeof *a), *b = malloc((size_t)vocab * sizeof *b);
    int32_t base[100], p[120];
    for (int i = 0; i < 100; i++)
        base[i] = (int32_t)((i * 37 + 11) % vocab);
    engine_seq *s1, *s2, *cold;
    engine_seq_new(e, &s1, &err);
    engine_seq_new(e, &s2, &err);
    engine_seq_new(e, &cold, &err);
    CHECK(prefix_run(e, s1, base, 100, 32, 1, a) == 0);
    static const int64_t shared[] = {0, 40, 64, 100};
    for (size_t k = 0; k < sizeof shared / sizeof shared[0]; k++) {
        for (int i = 0; i < 120; i++)
            p[i] = i < shared[k] ? base[i] : (int32_t)((i * 53 + 5 + (int)k) % vocab);
        engine_seq_reset(s2);
        int64_t got = engine_seq_adopt_prefix(s2, 1, p, 120, 32);
        int64_t want = shared[k] / 32 * 32 > 96 ? 96 : shared[k] / 32 * 32;
        CHECK_MSG(got == want, "%s: shared %lld: adopted %lld, want %lld", what,
                  (long long)shared[k], (long long)got, (long long)want);
        CHECK(prefix_run(e, s2, p, 120, 32, 0, a) == 0);
        engine_seq_reset(cold);
        CHECK(prefix_run(e, cold, p, 120, 32, 0, b) == 0);
        CHECK_MSG(!memcmp(a, b, (size_t)vocab * sizeof *a),
                  "%s: shared %lld: logits differ with the prefix adopted", what,
                  (long long)shared[k]);
    }
    /* published only at the end, where the sequence stands at 100, not at
     * a block's end: indexed blocks without a state, never adopted */
    engine_seq_reset(s1);
    CHECK(engine_forward(e, s1, base, 100, NULL, 0, &err) == 0);
    engine_seq_publish_prefix(s1, 2, base, 96);
    engine_seq_reset(s2);
    CHECK(engine_seq_adopt_prefix(s2, 2, base, 100, 32) == 0);
    engine_seq_free(s1);
    engine_seq_free(s2);
    engine_seq_free(cold);
    free(a);
    free(b);
    engine_free(e);
    checkpoint_close(&ck);
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "  could not remove %s\n", dir);
}

#endif
