/* The KV cache's element types: the shared codecs (numerics/kv_codec.h)
 * against the format library's own conversions and ggml's q8_0 rule, the
 * cache geometry per type, tables-only caches, and attention through each
 * type on the CPU backend against f32 KV. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "backend/kv_cache.h"
#include "numerics/kv_codec.h"
#include "format/dequant.h"
#include "numerics/half.h"
#include "test.h"

/* Random floats over many magnitudes, with the edge cases among them. */
static float edge_or_random(rng_state *r, int i)
{
    static const float edges[] = {0.0f, -0.0f, 65504.0f, 65519.0f, 65520.0f, -70000.0f,
                                  6.1e-5f, 5.96e-8f, 2.9e-8f, 1e-40f, 3.4e38f, INFINITY,
                                  -INFINITY, 1.00390625f, 1.005859375f};
    if (i < (int)(sizeof edges / sizeof edges[0]))
        return edges[i];
    uint32_t u = (uint32_t)rng_next_u64(r);
    float f;
    memcpy(&f, &u, 4);
    return isnan(f) ? 1.5f : f;
}

static void test_codecs_match_the_format_library(void)
{
    rng_state r;
    rng_seed(&r, 1, 0);
    int bad16 = 0, badbf = 0, badback = 0;
    for (int i = 0; i < 200000; i++) {
        float x = edge_or_random(&r, i);
        bad16 += kvc_f32_to_f16(x) != f32_to_fp16(x);
        badbf += kvc_f32_to_bf16(x) != f32_to_bf16(x);
        uint16_t h = (uint16_t)rng_next_u64(&r);
        float a = kvc_f16_to_f32(h), b = fp16_to_f32(h);
        float c = kvc_bf16_to_f32(h), d = bf16_to_f32(h);
        badback += memcmp(&a, &b, 4) != 0 || memcmp(&c, &d, 4) != 0;
    }
    CHECK_MSG(bad16 == 0, "%d f16 conversions differ", bad16);
    CHECK_MSG(badbf == 0, "%d bf16 conversions differ", badbf);
    CHECK_MSG(badback == 0, "%d widenings differ", badback);
    /* NaN stays NaN (quiet), never becomes inf. */
    CHECK(isnan(kvc_f16_to_f32(kvc_f32_to_f16(NAN))));
    CHECK(isnan(kvc_bf16_to_f32(kvc_f32_to_bf16(NAN))));
}

/* q8_0 as ggml's reference: d = amax / 127 stored f16, q = round(x / d),
 * read back as lib/format/dequant.c reads a Q8_0 tensor. */
static void test_q8_0_blocks(void)
{
    rng_state r;
    rng_seed(&r, 2, 0);
    float x[64], y[64];
    uint8_t blk[2 * KV_Q8_0_BYTES];
    for (int rep = 0; rep < 2000; rep++) {
        float scale = powf(10.0f, (float)(rep % 9) - 4.0f);
        for (int i = 0; i < 64; i++)
            x[i] = rng_normal(&r) * scale;
        if (rep == 7)
            memset(x, 0, 32 * sizeof(float)); /* an all-zero block: d = 0, q = 0 */
        kvc_q8_0_block(x, blk);
        kvc_q8_0_block(x + 32, blk + KV_Q8_0_BYTES);
        dequant_q8_0(blk, y, 2);
        for (int b = 0; b < 2; b++) {
            float amax = 0;
            for (int j = 0; j < 32; j++)
                amax = fmaxf(amax, fabsf(x[32 * b + j]));
            float d = fp16_to_f32(f32_to_fp16(amax / 127.0f));
            CHECK(fp16_to_f32(kvc_ld16(blk + b * KV_Q8_0_BYTES)) == d);
            /* within half a step, plus 127 times the f16 rounding of d
             * (large when d is an f16 subnormal) */
            float bound = 0.5f * d + 127.5f * fabsf(d - amax / 127.0f) + 1e-30f;
            for (int j = 0; j < 32; j++) {
                int e = 32 * b + j;
                CHECK_MSG(fabsf(y[e] - x[e]) <= bound * 1.0001f,
                          "rep %d value %d: %g stored as %g (d %g)", rep, e, x[e], y[e], d);
                CHECK(kvc_q8_0_get(blk, e) == y[e]);
            }
        }
        if (rep == 7)
            for (int j = 0; j < 32; j++)
                CHECK(blk[2 + j] == 0 && y[j] == 0.0f);
    }
}

static void test_geometry(void)
{
    memra_err err = {{0}};
    kv_type t;
    CHECK(kv_type_parse("bf16", &t, &err) == 0 && t == KV_BF16);
    CHECK(kv_type_parse("q8_0", &t, &err) == 0 && t == KV_Q8_0);
    CHECK(kv_type_parse("q8", &t, &err) != 0);
    CHECK_MSG(strcmp(err.msg, "KV type 'q8' is not f32, f16, bf16 or q8_0") == 0, "%s", err.msg);
    CHECK(kv_row_bytes(KV_F32, 96) == 384 && kv_row_bytes(KV_F16, 96) == 192 &&
          kv_row_bytes(KV_BF16, 96) == 192 && kv_row_bytes(KV_Q8_0, 96) == 102 &&
          kv_row_bytes(KV_Q8_0, 80) == 0);
    kv_cache c;
    CHECK(kv_cache_init(&c, KV_Q8_0, 2, 64, 16, 4, &err) == 0);
    CHECK(c.row_bytes == 68 && c.k && c.v && kv_cache_bytes(&c) == 2ull * 2 * 4 * 16 * 68);
    kv_cache_free(&c);
    CHECK(kv_cache_init(&c, KV_Q8_0, 2, 48, 16, 4, &err) != 0);
    CHECK_MSG(strstr(err.msg, "q8_0 needs kv_dim") && strstr(err.msg, "48"), "%s", err.msg);
    /* Tables only: the same geometry and block handling, no storage. */
    CHECK(kv_cache_init_tables(&c, KV_BF16, 3, 64, 16, 1000000, &err) == 0);
    CHECK(c.k == NULL && c.v == NULL && c.row_bytes == 128);
    CHECK(kv_cache_bytes(&c) == 2ull * 3 * 1000000 * 16 * 128);
    kv_seq s;
    kv_seq_init(&s, &c);
    CHECK(kv_seq_reserve(&s, 100, &err) == 0 && s.n_blocks == 7);
    CHECK(kv_offset(&c, &s, 1, 17) == ((size_t)(1 * 1000000 + s.blocks[1]) * 16 + 1) * 128);
    kv_seq_free(&s);
    CHECK(c.n_free == 1000000);
    kv_cache_free(&c);
}

/* Attention on the CPU backend through each KV type against f32 KV, on
 * the same q, k, v: the error is the storage's rounding, no more. */
static void test_attention_each_type(void)
{
    enum { H = 4, KVH = 2, HD = 64, T = 40 };
    const float bounds[4] = {0, 2e-3f, 1.5e-2f, 2e-2f}; /* f32 exact; f16, bf16, q8_0 */
    backend *b = backend_cpu_create(1);
    rng_state r;
    rng_seed(&r, 3, 0);
    float *q = malloc(sizeof(float) * T * H * HD), *k = malloc(sizeof(float) * T * KVH * HD),
          *v = malloc(sizeof(float) * T * KVH * HD);
    for (int i = 0; i < T * H * HD; i++)
        q[i] = rng_normal(&r) * 0.3f;
    for (int i = 0; i < T * KVH * HD; i++) {
        k[i] = rng_normal(&r) * 0.3f;
        v[i] = rng_normal(&r);
    }
    float *out[4];
    for (int ti = 0; ti < 4; ti++) {
        kv_cache c;
        memra_err err;
        CHECK(kv_cache_init(&c, (kv_type)ti, 1, KVH * HD, 16, 4, &err) == 0);
        kv_seq s;
        kv_seq_init(&s, &c);
        kv_seq_reserve(&s, T, &err);
        int32_t pos[T];
        kv_seq *seqs[T];
        for (int i = 0; i < T; i++) {
            pos[i] = i;
            seqs[i] = &s;
        }
        bk_batch rows = {T, pos, seqs};
        bk_attn a = {.layer = 0, .n_heads = H, .n_kv_heads = KVH, .head_dim = HD,
                     .scale = 0.125f};
        out[ti] = malloc(sizeof(float) * T * H * HD);
        b->ops->attention(b, &a, &rows, q, k, v, out[ti]);
        kv_seq_free(&s);
        kv_cache_free(&c);
    }
    for (int ti = 1; ti < 4; ti++) {
        double worst = 0;
        for (int i = 0; i < T * H * HD; i++)
            worst = fmax(worst, fabs(out[ti][i] - out[0][i]));
        CHECK_MSG(worst <= bounds[ti] && worst > 0, "%s KV: worst difference %g (bound %g)",
                  kv_type_name((kv_type)ti), worst, bounds[ti]);
        free(out[ti]);
    }
    free(out[0]);
    free(q);
    free(k);
    free(v);
    backend_destroy(b);
}

/* The recurrent state slots: a sequence takes one at its first reserve
 * and gives it back cut to 0; when all are held the next reserve fails,
 * naming them, and takes no blocks; a stateful cache adopts no prefix. */
static void test_state_slots(void)
{
    memra_err err = {{0}};
    kv_cache c;
    CHECK(kv_cache_init(&c, KV_F32, 2, 8, 4, 16, &err) == 0);
    CHECK(kv_cache_enable_state(&c, 0, 10, 1, &err) != 0 && strstr(err.msg, "positive"));
    CHECK(kv_cache_enable_state(&c, 2, 10, 1, &err) == 0);
    CHECK(kv_cache_state_bytes(&c) == 80 && c.state != NULL);
    CHECK(kv_cache_enable_prefix(&c, -1, &err) == 0);
    kv_seq a, b, d;
    kv_seq_init(&a, &c);
    kv_seq_init(&b, &c);
    kv_seq_init(&d, &c);
    CHECK(a.state_slot == -1);
    CHECK(kv_seq_reserve(&a, 5, &err) == 0 && a.state_slot >= 0);
    CHECK(kv_seq_reserve(&b, 1, &err) == 0 && b.state_slot >= 0 && b.state_slot != a.state_slot);
    int free_blocks = kv_cache_available(&c);
    CHECK(kv_seq_reserve(&d, 3, &err) != 0 && strstr(err.msg, "all 2 sequence slots"));
    CHECK(d.state_slot == -1 && d.n_blocks == 0 && kv_cache_available(&c) == free_blocks);
    int held = a.state_slot;
    kv_seq_truncate(&a, 0);
    CHECK(a.state_slot == -1 && a.n_blocks == 0);
    CHECK(kv_seq_reserve(&d, 3, &err) == 0 && d.state_slot == held);
    /* no prefix is adopted without kept states (kv_cache_prefix_states) */
    int32_t toks[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    d.n_tokens = 3;
    kv_seq_publish(&d, 0, toks, 3);
    CHECK(kv_seq_adopt(&a, 0, toks, 8, 4) == 0);
    kv_seq_free(&a);
    kv_seq_free(&b);
    kv_seq_free(&d);
    CHECK(c.n_free_slots == 2);
    kv_cache_free(&c);
}

/* States kept with the prefix index: the index takes its slots from the
 * free ones; a prefix is adopted only up to the last granule whose end has
 * a state; attaching past the index's slots reuses the oldest; a block
 * that leaves the index (evicted for a sequence) takes its state along. */
static void test_prefix_states(void)
{
    memra_err err = {{0}};
    kv_cache c;
    CHECK(kv_cache_init(&c, KV_F32, 1, 8, 4, 8, &err) == 0);
    CHECK(kv_cache_enable_state(&c, 4, 10, 1, &err) == 0);
    CHECK(kv_cache_prefix_states(&c, 2, &err) != 0 && strstr(err.msg, "prefix index"));
    CHECK(kv_cache_enable_prefix(&c, -1, &err) == 0);
    CHECK(kv_cache_prefix_states(&c, 5, &err) != 0 && strstr(err.msg, "5 slots asked, 4 free"));
    CHECK(kv_cache_prefix_states(&c, 2, &err) == 0 && c.n_free_slots == 2);
    int32_t toks[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    kv_seq a, b;
    kv_seq_init(&a, &c);
    kv_seq_init(&b, &c);
    CHECK(kv_seq_reserve(&a, 12, &err) == 0);
    a.n_tokens = 12;
    kv_seq_publish(&a, 7, toks, 12); /* three blocks indexed, no state kept */
    CHECK(kv_seq_adopt(&b, 7, toks, 16, 4) == 0 && b.n_blocks == 0);
    int s1 = kv_cache_attach_state(&c, a.blocks[0]); /* the state after 4 tokens */
    CHECK(s1 >= 0 && s1 != a.state_slot && kv_cache_block_state(&c, a.blocks[0]) == s1);
    CHECK(kv_cache_attach_state(&c, a.blocks[0]) == s1);
    /* blocks 0..2 match, but only block 0's end kept a state */
    CHECK(kv_seq_adopt(&b, 7, toks, 16, 4) == 4 && b.n_blocks == 1 && b.blocks[0] == a.blocks[0]);
    kv_seq_truncate(&b, 0);
    int s3 = kv_cache_attach_state(&c, a.blocks[2]);
    CHECK(s3 >= 0 && s3 != s1);
    CHECK(kv_seq_adopt(&b, 7, toks, 16, 4) == 12);
    kv_seq_truncate(&b, 0);
    /* the granule: 8 tokens, so only an end at 8 counts, which kept none */
    CHECK(kv_seq_adopt(&b, 7, toks, 16, 8) == 0);
    /* a third attachment takes the oldest's slot: block 0 loses its state */
    CHECK(kv_cache_attach_state(&c, a.blocks[1]) == s1 && kv_cache_block_state(&c, a.blocks[0]) == -1);
    CHECK(kv_seq_adopt(&b, 7, toks, 16, 8) == 8);
    kv_seq_truncate(&b, 0);
    /* a block no sequence holds, evicted for another sequence, drops its state */
    kv_seq_free(&a);
    CHECK(kv_cache_block_state(&c, -1) == -1);
    kv_seq d;
    kv_seq_init(&d, &c);
    CHECK(kv_seq_reserve(&d, 32, &err) == 0); /* all 8 blocks: the 3 idle ones evicted */
    for (int i = 0; i < 8; i++)
        CHECK(kv_cache_block_state(&c, i) == -1);
    CHECK(kv_seq_adopt(&b, 7, toks, 16, 4) == 0);
    kv_seq_free(&d);
    kv_seq_free(&b);
    kv_cache_free(&c);
}

TEST_MAIN(TEST_CASE(test_codecs_match_the_format_library), TEST_CASE(test_q8_0_blocks),
          TEST_CASE(test_geometry), TEST_CASE(test_attention_each_type),
          TEST_CASE(test_state_slots), TEST_CASE(test_prefix_states))
