/* The prefix cache: the index alone (keys, lookups that check tokens and
 * parents, LRU eviction, the idle cap, backward-shift deletion keeping
 * every entry findable), and through the engine on stories260K: a prompt
 * whose prefix was published gives bit-identical logits with the prefix
 * adopted and without, at the boundary cases (a prefix ending mid-chunk,
 * the whole prompt cached, a prompt shorter than a block); namespaces
 * never share; a block under a reader is never evicted. */
#include <stdlib.h>
#include <string.h>

#include "backend/kv_cache.h"
#include "backend/kv_prefix.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "test.h"
#include "test_model.h"
#include "test_hybrid_prefix.h"

static void fill(int32_t *t, int n, uint64_t seed)
{
    rng_state r;
    rng_seed(&r, seed, 0);
    for (int i = 0; i < n; i++)
        t[i] = 3 + (int32_t)(rng_next_u64(&r) % 500);
}

static void test_index(void)
{
    memra_err err = {{0}};
    kv_prefix *p = kv_prefix_new(64, 4, -1, &err);
    CHECK(p != NULL);
    if (!p)
        return;
    int32_t t[64 * 4];
    fill(t, 64 * 4, 1);
    uint64_t keys[64], parent = kv_prefix_root(7);
    for (int b = 0; b < 64; b++) {
        keys[b] = kv_prefix_key(parent, t + b * 4, 4);
        CHECK(kv_prefix_insert(p, b, keys[b], parent, t + b * 4) == 0);
        parent = keys[b];
    }
    /* a second block with a key already present stays out */
    CHECK(kv_prefix_insert(p, 5, keys[5], keys[4], t + 5 * 4) == 0); /* itself: no-op */
    /* every entry found, with its parent and tokens checked */
    int found = 0;
    for (int b = 0; b < 64; b++)
        found += kv_prefix_find(p, keys[b], b ? keys[b - 1] : kv_prefix_root(7), t + b * 4) == b;
    CHECK_MSG(found == 64, "%d of 64 found", found);
    int32_t other[4] = {1, 2, 3, 4};
    CHECK(kv_prefix_find(p, keys[3], keys[2], other) == -1);    /* tokens differ */
    CHECK(kv_prefix_find(p, keys[3], keys[1], t + 12) == -1);   /* parent differs */
    CHECK(kv_prefix_root(7) != kv_prefix_root(8));
    /* remove every other block: the rest stay findable (backward shift) */
    for (int b = 0; b < 64; b += 2)
        kv_prefix_remove(p, b);
    found = 0;
    for (int b = 1; b < 64; b += 2)
        found += kv_prefix_find(p, keys[b], keys[b - 1], t + b * 4) == b;
    CHECK_MSG(found == 32, "%d of 32 found after deletions", found);
    /* LRU: idle in order 1, 3, 5; evicted in that order; unidle protects */
    kv_prefix_idle(p, 1);
    kv_prefix_idle(p, 3);
    kv_prefix_idle(p, 5);
    kv_prefix_unidle(p, 3);
    CHECK(kv_prefix_n_idle(p) == 2);
    CHECK(kv_prefix_evict(p) == 1);
    CHECK(kv_prefix_evict(p) == 5);
    CHECK(kv_prefix_evict(p) == -1);
    CHECK(!kv_prefix_has(p, 1) && kv_prefix_has(p, 3));
    kv_prefix_free(p);

    /* the idle cap */
    p = kv_prefix_new(8, 4, 2, &err);
    for (int b = 0; b < 4; b++) {
        kv_prefix_insert(p, b, keys[b], b ? keys[b - 1] : 0, t + b * 4);
        kv_prefix_idle(p, b);
    }
    int over = 0;
    while (kv_prefix_over_cap(p) >= 0)
        over++;
    CHECK(over == 2 && kv_prefix_n_idle(p) == 2);
    kv_prefix_free(p);
}

static void test_engine_exact(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 2;
    o.n_batch = 32;
    o.n_ctx = 512;
    o.n_seqs = 3;
    o.kv_block_size = 16;
    o.prefix_cache = 1;
    engine *e = NULL;
    memra_err err = {{0}};
    if (engine_load(&ck, &o, &e, &err) != 0) {
        CHECK_MSG(0, "engine_load: %s", err.msg);
        checkpoint_close(&ck);
        return;
    }
    int64_t vocab = engine_config(e)->n_vocab;
    float *a = malloc((size_t)vocab * sizeof *a), *b = malloc((size_t)vocab * sizeof *b);
    int32_t base[300];
    fill(base, 300, 3);
    engine_seq *s1, *s2;
    engine_seq_new(e, &s1, &err);
    engine_seq_new(e, &s2, &err);

    /* publish a 300-token prompt computed in chunks of 32 */
    prefix_run(e, s1, base, 300, 32, 0, a);
    engine_seq_publish_prefix(s1, 1, base, 300 / 32 * 32);
    kv_prefix_stats st;
    engine_prefix_stats(e, &st);
    CHECK_MSG(st.indexed == 288 / 16, "%d blocks indexed, want %d", st.indexed, 288 / 16);

    /* prompts sharing 0, 17, 100, 288 and all 300 tokens, and one of 5 */
    static const int64_t shared[] = {0, 17, 100, 288, 300, 5};
    for (size_t k = 0; k < sizeof shared / sizeof shared[0]; k++) {
        int64_t n = k == 5 ? 5 : 320;
        int32_t p[320];
        fill(p, 320, 100 + k);
        memcpy(p, base, (size_t)(shared[k] < n ? shared[k] : n) * sizeof *p);
        engine_seq_reset(s2);
        int64_t got = engine_seq_adopt_prefix(s2, 1, p, n, 32);
        int64_t want = (shared[k] < n - 1 ? shared[k] : n - 1) / 32 * 32;
        if (want > 288)
            want = 288;
        CHECK_MSG(got == want, "shared %lld: adopted %lld, want %lld", (long long)shared[k],
                  (long long)got, (long long)want);
        CHECK(prefix_run(e, s2, p, n, 32, 0, a) == 0);
        engine_seq_reset(s2); /* and cold, in the same chunks */
        engine_seq *cold;
        engine_seq_new(e, &cold, &err);
        CHECK(prefix_run(e, cold, p, n, 32, 0, b) == 0);
        engine_seq_free(cold);
        CHECK_MSG(!memcmp(a, b, (size_t)vocab * sizeof *a),
                  "shared %lld: logits differ with the prefix adopted", (long long)shared[k]);
    }

    /* another namespace sees nothing */
    engine_seq_reset(s2);
    CHECK(engine_seq_adopt_prefix(s2, 2, base, 300, 32) == 0);

    /* a block under a reader is never evicted: fill the pool from s1 while
     * s2 holds the prefix; then, once released, the LRU gives it up */
    engine_seq_reset(s1);
    engine_seq_reset(s2);
    CHECK(engine_seq_adopt_prefix(s2, 1, base, 300, 32) == 288);
    int32_t big[512];
    fill(big, 512, 9);
    engine_seq *s3, *s4;
    engine_seq_new(e, &s3, &err);
    engine_seq_new(e, &s4, &err);
    /* pool: 3 x 512 tokens = 96 blocks; s2 holds 18, s1 and s3 take 64 */
    CHECK(engine_forward(e, s1, big, 512, NULL, 0, &err) == 0);
    CHECK(engine_forward(e, s3, big, 512, NULL, 0, &err) == 0);
    int rc = engine_forward(e, s4, big, 512, NULL, 0, &err);
    CHECK_MSG(rc != 0, "s4 took blocks s2 still reads");
    engine_prefix_stats(e, &st);
    CHECK(st.indexed == 18 && st.evictions == 0);
    engine_seq_reset(s2); /* idle now: evictable */
    CHECK_MSG(engine_forward(e, s4, big, 512, NULL, 0, &err) == 0, "%s", err.msg);
    engine_prefix_stats(e, &st);
    CHECK_MSG(st.evictions == 18 && st.indexed == 0, "%llu evictions, %d indexed",
              (unsigned long long)st.evictions, st.indexed);
    engine_seq_free(s4);
    engine_seq_free(s3);
    engine_seq_free(s1);
    engine_seq_free(s2);
    free(a);
    free(b);
    engine_free(e);
    checkpoint_close(&ck);
}

/* The same on a hybrid model: the state kept at chunk ends (CPU). */
static void test_hybrid_exact(void)
{
    hybrid_prefix_check(BK_CPU, 1, 1, "cpu");
    hybrid_prefix_check(BK_CPU, 2, 1, "cpu");
    hybrid_prefix_check(BK_CPU, 1, 2, "cpu");
}

TEST_MAIN(TEST_CASE(test_index), TEST_CASE(test_engine_exact), TEST_CASE(test_hybrid_exact))
