/* The engine end to end on real and random checkpoints: the stories260K
 * golden decode, chunked prefill against token-by-token, f16 KV against
 * f32, GGUF against the same weights as an HF dir (RoPE pairing and the
 * Q/K permutation), every family's tiny random checkpoint, the paged KV
 * cache with interleaved sequences, the hidden-state hook, and the error
 * cases. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "engine/engine.h"
#include "backend/kv_cache.h"
#include "format/gguf.h"
#include "numerics/half.h"
#include "format/safetensors.h"
#include "model/checkpoint.h"
#include "model/convert.h"
#include "test.h"
#include "test_model.h"

static const int32_t stories_ref[40] = {
    403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
    426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
    295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
};

/* The 41 tokens of the golden run: BOS and the 40 reference ids. */
static void stories_tokens(int32_t *t)
{
    t[0] = 1;
    memcpy(t + 1, stories_ref, sizeof stories_ref);
}

static int argmax(const float *x, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int)i;
    return best;
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) /* NaN counts as the largest difference */
            m = isnan(d) ? INFINITY : d;
    }
    return m;
}

static int argmax_agree(const float *a, const float *b, int n, int64_t vocab)
{
    for (int i = 0; i < n; i++)
        if (argmax(a + (size_t)i * vocab, vocab) != argmax(b + (size_t)i * vocab, vocab))
            return 0;
    return 1;
}

static engine *load_engine_opts(const checkpoint *ck, const engine_opts *o)
{
    engine *e = NULL;
    memra_err err = {{0}};
    if (engine_load(ck, o, &e, &err) != 0)
        CHECK_MSG(0, "engine_load: %s", err.msg);
    return e;
}

static engine *load_engine(const checkpoint *ck, int n_batch, kv_type kt, int64_t n_ctx)
{
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 2;
    o.n_batch = n_batch;
    o.kv_type = kt;
    o.n_ctx = n_ctx;
    return load_engine_opts(ck, &o);
}

/* All-position logits of tokens run through a fresh sequence in one call
 * (the engine chunks it by its n_batch), or token by token when one_by_one. */
static float *run_logits(engine *e, const int32_t *tokens, int n, int one_by_one)
{
    memra_err err = {{0}};
    int64_t vocab = engine_config(e)->n_vocab;
    float *out = malloc((size_t)n * (size_t)vocab * sizeof(float));
    engine_seq *s;
    engine_seq_new(e, &s, &err);
    int rc = 0;
    if (one_by_one) {
        for (int i = 0; i < n && rc == 0; i++)
            rc = engine_forward(e, s, tokens + i, 1, out + (size_t)i * vocab, 0, &err);
    } else {
        rc = engine_forward(e, s, tokens, n, out, 1, &err);
    }
    if (rc != 0) {
        CHECK_MSG(0, "forward: %s", err.msg);
        free(out);
        out = NULL;
    }
    engine_seq_free(s);
    return out;
}

/* Greedy decode from [BOS]: argmax of the logits at each step. */
static void test_stories_golden(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    memra_err err = {{0}};
    engine *e = load_engine(&ck, 0, KV_F32, 0);
    if (e) {
        engine_seq *s;
        CHECK(engine_seq_new(e, &s, &err) == 0);
        int64_t vocab = engine_config(e)->n_vocab;
        CHECK(vocab == 512);
        CHECK(engine_bytes_per_token(e) > 0);
        float *logits = malloc((size_t)vocab * sizeof(float));
        int32_t tok = 1;
        for (int i = 0; i < 40; i++) {
            if (engine_forward(e, s, &tok, 1, logits, 0, &err) != 0) {
                CHECK_MSG(0, "%s", err.msg);
                break;
            }
            tok = argmax(logits, vocab);
            if (tok != stories_ref[i]) {
                CHECK_MSG(0, "step %d: got %d, reference %d", i, tok, stories_ref[i]);
                break;
            }
        }
        CHECK(engine_seq_pos(s) == 40);
        free(logits);
        engine_seq_free(s);
        engine_free(e);
    }
    checkpoint_close(&ck);
}

/* Prefill in chunks of 1, 3, 7 and the whole prompt gives the logits of
 * token-by-token decode. Tolerance: none. Every output value is one dot
 * product in a fixed order computed from that row alone, so chunking
 * cannot change a bit; a difference would mean rows leak into each other. */
static void test_chunked_prefill(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    memra_err err = {{0}};
    int32_t toks[41];
    stories_tokens(toks);
    engine *e1 = load_engine(&ck, 1, KV_F32, 0);
    float *ref = e1 ? run_logits(e1, toks, 41, 1) : NULL;
    CHECK(ref != NULL);
    int64_t vocab = e1 ? engine_config(e1)->n_vocab : 0;
    const int chunks[] = {1, 3, 7, 64};
    for (size_t c = 0; ref && c < MEMRA_ARRAY_LEN(chunks); c++) {
        engine *e = load_engine(&ck, chunks[c], KV_F32, 0);
        float *got = e ? run_logits(e, toks, 41, 0) : NULL;
        CHECK(got != NULL);
        if (got) {
            double d = max_abs_diff(ref, got, (size_t)41 * vocab);
            CHECK_MSG(d == 0, "chunk %d: max |diff| %g", chunks[c], d);
        }
        free(got);
        engine_free(e);
    }
    /* The same, split unevenly across calls on one sequence. */
    if (ref) {
        float *got = malloc((size_t)41 * vocab * sizeof(float));
        engine_seq *s;
        engine_seq_new(e1, &s, &err);
        const int parts[] = {5, 1, 17, 18};
        int at = 0;
        for (size_t p = 0; p < MEMRA_ARRAY_LEN(parts); p++) {
            CHECK(engine_forward(e1, s, toks + at, parts[p], got + (size_t)at * vocab, 1, &err) ==
                  0);
            at += parts[p];
        }
        CHECK(at == 41 && engine_seq_pos(s) == 41);
        CHECK(max_abs_diff(ref, got, (size_t)41 * vocab) == 0);
        /* logits_all = 0 gives the last row only */
        engine_seq_reset(s);
        CHECK(engine_seq_pos(s) == 0);
        CHECK(engine_forward(e1, s, toks, 41, got, 0, &err) == 0);
        CHECK(memcmp(got, ref + (size_t)40 * vocab, (size_t)vocab * sizeof(float)) == 0);
        /* dropping tokens and running them again (speculative rollback) */
        engine_seq_truncate(s, 30);
        CHECK(engine_seq_pos(s) == 30);
        CHECK(engine_forward(e1, s, toks + 30, 11, got, 1, &err) == 0);
        CHECK(memcmp(got, ref + (size_t)30 * vocab, (size_t)11 * vocab * sizeof(float)) == 0);
        engine_seq_free(s);
        free(got);
    }
    free(ref);
    engine_free(e1);
    checkpoint_close(&ck);
}

/* f16 KV rounds K and V to 11 significant bits: the logits move a little
 * (about 1e-2 here, on logits of magnitude ~10) and the greedy choice not
 * at all on this model. */
static void test_kv_f16(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    int32_t toks[41];
    stories_tokens(toks);
    engine *a = load_engine(&ck, 8, KV_F32, 0), *b = load_engine(&ck, 8, KV_F16, 0);
    float *la = a ? run_logits(a, toks, 41, 0) : NULL;
    float *lb = b ? run_logits(b, toks, 41, 0) : NULL;
    CHECK(la && lb);
    if (la && lb) {
        int64_t vocab = engine_config(a)->n_vocab;
        double d = max_abs_diff(la, lb, (size_t)41 * vocab);
        CHECK_MSG(d > 0 && d < 5e-2, "f16 vs f32 KV: max |diff| %g", d);
        CHECK(argmax_agree(la, lb, 41, vocab));
    }
    free(la);
    free(lb);
    engine_free(a);
    engine_free(b);
    checkpoint_close(&ck);
}

static void tmp_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/memra-test-engine-%d-%s", test_tmp_dir(), (int)getpid(), name);
}

static void rm_rf(const char *path)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "  could not remove %s\n", path);
}

/* Both checkpoints' logits over the same tokens, chunked. */
static void compare_checkpoints(const checkpoint *a, const checkpoint *b, const int32_t *toks,
                                int n, double tol, const char *what)
{
    engine *ea = load_engine(a, 5, KV_F32, 0), *eb = load_engine(b, 5, KV_F32, 0);
    float *la = ea ? run_logits(ea, toks, n, 0) : NULL;
    float *lb = eb ? run_logits(eb, toks, n, 0) : NULL;
    if (la && lb) {
        int64_t vocab = engine_config(ea)->n_vocab;
        double d = max_abs_diff(la, lb, (size_t)n * vocab);
        int agree = argmax_agree(la, lb, n, vocab);
        CHECK_MSG(d <= tol && agree, "%s: max |diff| %g (tolerance %g), argmax %s", what, d, tol,
                  agree ? "agrees" : "differs");
    } else {
        CHECK_MSG(0, "%s: could not run both", what);
    }
    free(la);
    free(lb);
    engine_free(ea);
    engine_free(eb);
}

/* stories260K as an HF dir: memra-convert undoes llama.cpp's Q/K row
 * permutation, and the engine switches RoPE from adjacent pairs to
 * rotate-half, so the logits agree up to the order of the q.k sums
 * (measured 7e-6). Without the switch they would be far apart. */
static void test_gguf_vs_hf(void)
{
    char dir[1024];
    tmp_path(dir, sizeof dir, "stories-hf");
    checkpoint ck, hf;
    memra_err err = {{0}};
    if (open_stories(&ck) != 0)
        return;
    convert_opts co = {.outtype = DT_INVALID, .n_threads = 2};
    if (convert_checkpoint(&ck, dir, &co, &err) != 0 || checkpoint_open(dir, &hf, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        checkpoint_close(&ck);
        rm_rf(dir);
        return;
    }
    CHECK(hf.format == CKPT_HF);
    int32_t toks[41];
    stories_tokens(toks);
    compare_checkpoints(&ck, &hf, toks, 41, 1e-4, "stories GGUF vs HF");
    checkpoint_close(&hf);
    checkpoint_close(&ck);
    rm_rf(dir);
}

/* Every family's tiny random checkpoint (memra-convert --random): loads,
 * runs, gives finite logits, chunking changes nothing, and the same
 * weights as GGUF (llama.cpp's layout: permuted llama Q/K, gemma3 norms
 * stored as 1 + w, merged experts) give the same logits. The matrices are
 * written in F32, F16 or BF16 so each float path runs. */
static void test_families(void)
{
    static const struct {
        const char *config;
        dtype type;
    } fams[] = {
        {"tiny-llama.json", DT_F32},  {"tiny-llama3.json", DT_F32},
        {"tiny-qwen2.json", DT_F32},  {"tiny-qwen3.json", DT_BF16},
        {"tiny-qwen3-moe.json", DT_F16}, {"tiny-gemma3.json", DT_BF16},
        {"tiny-qwen3_5.json", DT_BF16}, {"tiny-qwen3_5-moe.json", DT_F16},
        {"tiny-gemma4.json", DT_BF16}, {"tiny-gemma4-moe.json", DT_F16},
    };
    int32_t toks[40];
    for (int i = 0; i < 40; i++)
        toks[i] = (int32_t)((i * 37 + 11) % 256);
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(fams); f++) {
        char cfg[1024], dir[1024], gguf[1100];
        snprintf(cfg, sizeof cfg, "tests/fixtures/configs/%s", fams[f].config);
        tmp_path(dir, sizeof dir, fams[f].config);
        snprintf(gguf, sizeof gguf, "%s.gguf", dir);
        memra_err err = {{0}};
        convert_opts co = {.outtype = fams[f].type, .n_threads = 2};
        checkpoint hf, gg;
        if (convert_random(cfg, 7, dir, &co, &err) != 0 || checkpoint_open(dir, &hf, &err) != 0) {
            CHECK_MSG(0, "%s: %s", fams[f].config, err.msg);
            rm_rf(dir);
            continue;
        }
        convert_opts keep = {.outtype = DT_INVALID, .n_threads = 2};
        if (convert_checkpoint(&hf, gguf, &keep, &err) != 0 ||
            checkpoint_open(gguf, &gg, &err) != 0) {
            CHECK_MSG(0, "%s: %s", fams[f].config, err.msg);
            checkpoint_close(&hf);
            rm_rf(dir);
            rm_rf(gguf);
            continue;
        }
        engine *e1 = load_engine(&hf, 1, KV_F32, 0), *e7 = load_engine(&hf, 7, KV_F32, 0);
        float *a = e1 ? run_logits(e1, toks, 40, 1) : NULL;
        float *b = e7 ? run_logits(e7, toks, 40, 0) : NULL;
        CHECK_MSG(a && b, "%s: did not run", fams[f].config);
        if (a && b) {
            int64_t vocab = engine_config(e1)->n_vocab;
            int finite = 1;
            double mx = 0;
            for (size_t i = 0; i < (size_t)40 * vocab; i++) {
                finite &= isfinite(a[i]) != 0;
                mx = fabs(a[i]) > mx ? fabs(a[i]) : mx;
            }
            CHECK_MSG(finite && mx > 0, "%s: logits not finite or all zero", fams[f].config);
            CHECK_MSG(max_abs_diff(a, b, (size_t)40 * vocab) == 0,
                      "%s: chunked prefill differs", fams[f].config);
        }
        free(a);
        free(b);
        engine_free(e1);
        engine_free(e7);
        char what[256];
        snprintf(what, sizeof what, "%s HF vs GGUF", fams[f].config);
        compare_checkpoints(&hf, &gg, toks, 40, 1e-4, what);
        checkpoint_close(&gg);
        checkpoint_close(&hf);
        rm_rf(dir);
        rm_rf(gguf);
    }
}

/* ---- paged KV cache ---- */

static void test_kv_blocks(void)
{
    kv_cache c;
    memra_err err = {{0}};
    CHECK(kv_cache_init(&c, KV_F16, 2, 8, 4, 6, &err) == 0);
    CHECK(kv_cache_bytes(&c) == 2ull * 2 * 6 * 4 * 8 * 2);
    kv_seq a, b;
    kv_seq_init(&a, &c);
    kv_seq_init(&b, &c);
    CHECK(kv_seq_reserve(&a, 10, &err) == 0 && a.n_blocks == 3);
    CHECK(kv_seq_reserve(&b, 12, &err) == 0 && b.n_blocks == 3 && c.n_free == 0);
    CHECK(kv_seq_reserve(&a, 12, &err) == 0 && a.n_blocks == 3); /* fits the last block */
    CHECK(kv_seq_reserve(&a, 13, &err) != 0);
    CHECK_MSG(strstr(err.msg, "KV cache full") != NULL, "%s", err.msg);
    CHECK(a.n_blocks == 3);
    /* the two tables hold distinct blocks */
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            CHECK(a.blocks[i] != b.blocks[j]);
    b.n_tokens = 12;
    kv_seq_truncate(&b, 5);
    CHECK(b.n_blocks == 2 && b.n_tokens == 5 && c.n_free == 1);
    CHECK(kv_seq_reserve(&a, 13, &err) == 0 && a.n_blocks == 4 && c.n_free == 0);
    /* offsets: layer-major, then block, then slot */
    size_t off = kv_offset(&c, &a, 1, 5);
    CHECK(off == (size_t)(((1 * 6 + a.blocks[1]) * 4 + 1) * 8) * 2);
    kv_seq_free(&a);
    kv_seq_free(&b);
    CHECK(c.n_free == 6);
    kv_cache_free(&c);
    CHECK(kv_cache_init(&c, KV_F32, 1, 8, 0, 4, &err) != 0);
}

/* Two sequences decoded in lockstep on one small-block pool, so their
 * blocks interleave, give exactly what each gives alone. */
static void test_interleaved_sequences(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    memra_err err = {{0}};
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 2;
    o.n_seqs = 2;
    o.n_ctx = 64;
    o.kv_block_size = 4;
    engine *e = load_engine_opts(&ck, &o);
    if (!e) {
        checkpoint_close(&ck);
        return;
    }
    int32_t ta[41], tb[41];
    stories_tokens(ta);
    tb[0] = 1;
    for (int i = 1; i < 41; i++)
        tb[i] = stories_ref[40 - i];
    float *ra = run_logits(e, ta, 41, 1), *rb = run_logits(e, tb, 41, 1);
    int64_t vocab = engine_config(e)->n_vocab;
    float *ga = malloc((size_t)41 * vocab * sizeof(float));
    float *gb = malloc((size_t)41 * vocab * sizeof(float));
    engine_seq *sa, *sb;
    engine_seq_new(e, &sa, &err);
    engine_seq_new(e, &sb, &err);
    /* b starts with a 3-token prefill so the block boundaries differ */
    CHECK(engine_forward(e, sb, tb, 3, gb, 1, &err) == 0);
    for (int i = 0; i < 41; i++) {
        CHECK(engine_forward(e, sa, ta + i, 1, ga + (size_t)i * vocab, 0, &err) == 0);
        if (i + 3 < 41)
            CHECK(engine_forward(e, sb, tb + i + 3, 1, gb + (size_t)(i + 3) * vocab, 0, &err) ==
                  0);
    }
    CHECK(ra && rb);
    if (ra && rb) {
        CHECK(max_abs_diff(ra, ga, (size_t)41 * vocab) == 0);
        CHECK(max_abs_diff(rb, gb, (size_t)41 * vocab) == 0);
    }
    /* A third sequence finds the pool full (two of 64 tokens fit). */
    engine_seq *sc;
    engine_seq_new(e, &sc, &err);
    int32_t many[64];
    for (int i = 0; i < 64; i++)
        many[i] = 1;
    CHECK(engine_forward(e, sc, many, 64, NULL, 0, &err) != 0);
    CHECK_MSG(strstr(err.msg, "KV cache full") != NULL, "%s", err.msg);
    CHECK(engine_seq_pos(sc) == 0);
    engine_seq_free(sa);
    CHECK(engine_forward(e, sc, many, 40, NULL, 0, &err) == 0);
    engine_seq_free(sb);
    engine_seq_free(sc);
    free(ra);
    free(rb);
    free(ga);
    free(gb);
    engine_free(e);
    checkpoint_close(&ck);
}

/* ---- hidden states ---- */

typedef struct {
    int calls[16];
    int order_ok;
    int last;
    float emb0[64];
    float final_h[64];
} hidden_log;

static void on_hidden(void *ctx, int index, const bk_batch *rows, int64_t dim, const float *h)
{
    hidden_log *lg = ctx;
    if (index != lg->last + 1 && !(index == 0 && lg->last == 5))
        lg->order_ok = 0;
    lg->last = index;
    if (index >= 0 && index < 16)
        lg->calls[index]++;
    if (dim != 64 || rows->n != 1)
        lg->order_ok = 0;
    if (index == 0)
        memcpy(lg->emb0, h, sizeof lg->emb0);
    if (index == 5)
        memcpy(lg->final_h, h, sizeof lg->final_h);
}

/* transformers' convention: embedding output, each layer's output but the
 * last, and the last after the final norm, which the head turns into the
 * logits. */
static void test_hidden_hook(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    memra_err err = {{0}};
    engine *e = load_engine(&ck, 4, KV_F32, 0);
    if (!e) {
        checkpoint_close(&ck);
        return;
    }
    hidden_log lg = {.order_ok = 1, .last = -1};
    engine_set_hidden_hook(e, on_hidden, &lg);
    engine_seq *s;
    engine_seq_new(e, &s, &err);
    float logits[512];
    int32_t tok = 1;
    CHECK(engine_forward(e, s, &tok, 1, logits, 0, &err) == 0);
    CHECK(engine_config(e)->n_layers == 5);
    CHECK(lg.order_ok);
    for (int i = 0; i <= 5; i++)
        CHECK_MSG(lg.calls[i] == 1, "index %d reported %d times", i, lg.calls[i]);
    const tensor_view *emb = checkpoint_find(&ck, "token_embd.weight");
    const tensor_view *out = checkpoint_find(&ck, "output.weight");
    CHECK(emb && emb->type == DT_F32 && out && out->type == DT_F32);
    if (emb && out) {
        CHECK(memcmp(lg.emb0, emb->data + 64 * 4, sizeof lg.emb0) == 0);
        double worst = 0;
        for (int v = 0; v < 512; v++) {
            double acc = 0;
            for (int d = 0; d < 64; d++) {
                float w;
                memcpy(&w, out->data + ((size_t)v * 64 + d) * 4, 4);
                acc += (double)w * lg.final_h[d];
            }
            worst = fmax(worst, fabs(acc - logits[v]));
        }
        CHECK_MSG(worst < 1e-4, "head(final hidden) vs logits: %g", worst);
    }
    engine_set_hidden_hook(e, NULL, NULL);
    memset(lg.calls, 0, sizeof lg.calls);
    CHECK(engine_forward(e, s, &tok, 1, logits, 0, &err) == 0);
    CHECK(lg.calls[0] == 0);
    engine_seq_free(s);
    engine_free(e);
    checkpoint_close(&ck);
}

/* ---- errors ---- */

/* A copy of stories260K with one tensor left out, or retyped as I32 (same
 * bytes), written with the GGUF writer. */
static int write_stories_variant(const checkpoint *ck, const char *path, const char *drop,
                                 const char *as_i32)
{
    memra_err err = {{0}};
    gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kv(w, &ck->gguf);
    int rc = 0;
    for (uint64_t i = 0; i < ck->gguf.n_tensors && rc == 0; i++) {
        const gguf_tensor *t = &ck->gguf.tensors[i];
        if (drop && !strcmp(t->name, drop))
            continue;
        dtype ty = as_i32 && !strcmp(t->name, as_i32) ? DT_I32 : t->type;
        rc = gguf_writer_add_tensor(w, t->name, ty, t->n_dims, t->ne, t->data, t->nbytes, &err);
    }
    if (rc == 0)
        rc = gguf_writer_write(w, path, &err);
    if (rc != 0)
        CHECK_MSG(0, "writing %s: %s", path, err.msg);
    gguf_writer_free(w);
    return rc;
}

static void expect_load_error(const char *path, const char *want1, const char *want2)
{
    checkpoint ck;
    memra_err err = {{0}};
    engine_opts o;
    engine_opts_default(&o);
    engine *e = NULL;
    if (checkpoint_open(path, &ck, &err) == 0) {
        CHECK(engine_load(&ck, &o, &e, &err) != 0);
        CHECK(e == NULL);
        checkpoint_close(&ck);
    }
    CHECK_MSG(strstr(err.msg, want1) && strstr(err.msg, want2), "%s", err.msg);
    if (getenv("MEMRA_TEST_VERBOSE"))
        fprintf(stderr, "  %s\n", err.msg);
}

static void test_errors(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    memra_err err = {{0}};
    engine *e = load_engine(&ck, 4, KV_F32, 8);
    if (e) {
        engine_seq *s;
        engine_seq_new(e, &s, &err);
        float logits[512];
        int32_t bad[3] = {1, 512, 2};
        CHECK(engine_forward(e, s, bad, 3, logits, 0, &err) != 0);
        CHECK_MSG(strstr(err.msg, "token id 512") && strstr(err.msg, "index 1"), "%s", err.msg);
        bad[1] = -3;
        CHECK(engine_forward(e, s, bad, 3, logits, 0, &err) != 0);
        CHECK_MSG(strstr(err.msg, "token id -3"), "%s", err.msg);
        CHECK(engine_seq_pos(s) == 0);
        CHECK(engine_forward(e, s, bad, 0, logits, 0, &err) != 0);
        int32_t five[5] = {1, 2, 3, 4, 5};
        CHECK(engine_forward(e, s, five, 5, logits, 0, &err) == 0);
        CHECK(engine_forward(e, s, five, 4, logits, 0, &err) != 0);
        CHECK_MSG(strstr(err.msg, "context full") && strstr(err.msg, "n_ctx 8"), "%s", err.msg);
        CHECK(engine_seq_pos(s) == 5);
        CHECK(engine_forward(e, s, five, 3, logits, 0, &err) == 0);
        CHECK(engine_seq_pos(s) == 8);
        engine_seq_free(s);
        engine_free(e);
    }

    /* An unsupported weight type names the tensor and the type. */
    char path[1024];
    tmp_path(path, sizeof path, "i32.gguf");
    if (write_stories_variant(&ck, path, NULL, "blk.2.ffn_up.weight") == 0)
        expect_load_error(path, "blk.2.ffn_up.weight", "I32");
    rm_rf(path);
    tmp_path(path, sizeof path, "missing.gguf");
    if (write_stories_variant(&ck, path, "blk.3.attn_k.weight", NULL) == 0)
        expect_load_error(path, "blk.3.attn_k.weight", "missing");
    rm_rf(path);

    /* The backend itself refuses a type it does not read. */
    backend *bk = backend_cpu_create(1);
    bk_weight w = {.name = "x.weight", .type = DT_Q2_K, .rows = 2, .cols = 256, .row_bytes = 84};
    static uint8_t blocks[168];
    w.data = blocks;
    CHECK(bk->ops->weight_prepare(bk, &w, &err) != 0);
    CHECK_MSG(strstr(err.msg, "x.weight") && strstr(err.msg, "Q2_K"), "%s", err.msg);
    w.type = DT_Q4_K;
    w.row_bytes = 144;
    CHECK(bk->ops->weight_prepare(bk, &w, &err) == 0);
    w.cols = 200; /* not whole 256-blocks */
    CHECK(bk->ops->weight_prepare(bk, &w, &err) != 0);
    backend_destroy(bk);
    checkpoint_close(&ck);
}

/* ggml's Q8_0 of one row of n floats (n a multiple of 32): per block the
 * scale amax / 127 as f16 and the values rounded to int8. */
static void quantize_q8_0_row(const float *x, int64_t n, uint8_t *out)
{
    for (int64_t b = 0; b < n / 32; b++, x += 32, out += 34) {
        float amax = 0;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        uint16_t h = f32_to_fp16(d);
        out[0] = (uint8_t)h;
        out[1] = (uint8_t)(h >> 8);
        for (int i = 0; i < 32; i++)
            out[2 + i] = (uint8_t)(int8_t)roundf(x[i] * id);
    }
}

/* stories260K with every matrix whose rows are whole Q8_0 blocks
 * quantized (all but ffn_down, rows of 172): the engine runs the
 * quantized path end to end, embedding lookup and head included, and
 * stays close to the F32 model. */
static void test_quantized_q8_0(void)
{
    checkpoint ck, qk;
    if (open_stories(&ck) != 0)
        return;
    char path[1024];
    tmp_path(path, sizeof path, "q8.gguf");
    memra_err err = {{0}};
    gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kv(w, &ck.gguf);
    uint8_t *bufs[64] = {0};
    int nq = 0;
    for (uint64_t i = 0; i < ck.gguf.n_tensors && i < 64; i++) {
        const gguf_tensor *t = &ck.gguf.tensors[i];
        if (t->n_dims == 2 && t->type == DT_F32 && t->ne[0] % 32 == 0) {
            uint64_t rows = (uint64_t)t->ne[1], nb = rows * (uint64_t)(t->ne[0] / 32) * 34;
            bufs[i] = malloc(nb);
            for (uint64_t r = 0; r < rows; r++)
                quantize_q8_0_row((const float *)(const void *)(t->data + r * t->ne[0] * 4),
                                  t->ne[0], bufs[i] + r * (uint64_t)(t->ne[0] / 32) * 34);
            CHECK(gguf_writer_add_tensor(w, t->name, DT_Q8_0, 2, t->ne, bufs[i], nb, &err) == 0);
            nq++;
        } else {
            CHECK(gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                         t->nbytes, &err) == 0);
        }
    }
    CHECK(nq >= 20);
    int rc = gguf_writer_write(w, path, &err);
    gguf_writer_free(w);
    for (int i = 0; i < 64; i++)
        free(bufs[i]);
    if (rc != 0 || checkpoint_open(path, &qk, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        checkpoint_close(&ck);
        rm_rf(path);
        return;
    }
    int32_t toks[41];
    stories_tokens(toks);
    engine *ef = load_engine(&ck, 8, KV_F32, 0), *eq = load_engine(&qk, 8, KV_F32, 0);
    float *lf = ef ? run_logits(ef, toks, 41, 0) : NULL;
    float *lq = eq ? run_logits(eq, toks, 41, 0) : NULL;
    CHECK(lf && lq);
    if (lf && lq) {
        int64_t vocab = engine_config(ef)->n_vocab;
        double d = max_abs_diff(lf, lq, (size_t)41 * vocab);
        int agree = 0;
        for (int i = 0; i < 41; i++)
            agree += argmax(lf + (size_t)i * vocab, vocab) == argmax(lq + (size_t)i * vocab, vocab);
        CHECK_MSG(d > 0 && d < 0.5 && agree >= 38, "Q8_0 vs F32: max |diff| %g, argmax %d/41",
                  d, agree);
        if (getenv("MEMRA_TEST_VERBOSE"))
            fprintf(stderr, "  Q8_0 vs F32: max |diff| %g, argmax %d/41\n", d, agree);
        CHECK(engine_bytes_per_token(eq) < engine_bytes_per_token(ef) / 2);
    }
    free(lf);
    free(lq);
    engine_free(ef);
    engine_free(eq);
    checkpoint_close(&qk);
    checkpoint_close(&ck);
    rm_rf(path);
}

/* ---- HF reference dumps (tests/fixtures/parity) ---- */

typedef struct {
    int n_layers, n;
    int64_t dim;
    float *h; /* [n_layers + 1][n][dim] */
} hidden_capture;

static void capture_hidden(void *ctx, int index, const bk_batch *rows, int64_t dim, const float *h)
{
    hidden_capture *hc = ctx;
    for (int i = 0; i < rows->n; i++)
        memcpy(hc->h + ((size_t)index * hc->n + (size_t)rows->pos[i]) * (size_t)dim,
               h + (size_t)i * dim, (size_t)dim * sizeof(float));
}

static const float *f32_tensor(const st_set *st, const char *name, int64_t n_elems)
{
    const st_tensor *t = st_find(st, name);
    if (!t || t->type != DT_F32 || t->nbytes != (uint64_t)n_elems * 4 || ((uintptr_t)t->data & 3))
        return NULL;
    return (const float *)(const void *)t->data;
}

/* Our logits and hidden states for the dump's tokens against the
 * reference's: argmax identical at every position and every logit within
 * tol. The first hidden state past tol is named to show where a
 * divergence starts. Prefill runs in chunks of 5 so the KV cache and
 * chunking are part of what is compared. */
static void check_against_dump(const checkpoint *ck, const char *dump, double tol)
{
    st_set st;
    memra_err err = {{0}};
    if (st_open_file(dump, &st, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    const st_tensor *tt = st_find(&st, "tokens");
    engine *e = load_engine(ck, 5, KV_F32, 0);
    if (!tt || tt->type != DT_I32 || tt->n_dims != 1 || !e) {
        CHECK_MSG(0, "%s: no I32 tokens, or the engine did not load", dump);
        engine_free(e);
        st_close(&st);
        return;
    }
    int n = (int)tt->shape[0];
    const model_config *c = engine_config(e);
    int64_t vocab = c->n_vocab, dim = c->dim;
    int nl = (int)c->n_layers;
    const float *ref = f32_tensor(&st, "logits", (int64_t)n * vocab);
    const float *ref_h = f32_tensor(&st, "hidden", (int64_t)(nl + 1) * n * dim);
    int32_t *toks = malloc((size_t)n * sizeof *toks);
    memcpy(toks, tt->data, (size_t)n * 4);
    hidden_capture hc = {nl, n, dim, calloc((size_t)(nl + 1) * n * dim, sizeof(float))};
    engine_set_hidden_hook(e, capture_hidden, &hc);
    float *got = run_logits(e, toks, n, 0);
    CHECK_MSG(ref != NULL, "%s: logits missing or not F32 [%d, %" PRId64 "]", dump, n, vocab);
    if (got && ref) {
        double d = max_abs_diff(got, ref, (size_t)n * vocab);
        int agree = argmax_agree(got, ref, n, vocab);
        CHECK_MSG(d <= tol && agree, "%s: max |logit diff| %g (tolerance %g), argmax %s", dump, d,
                  tol, agree ? "identical" : "differs");
        if (getenv("MEMRA_TEST_VERBOSE"))
            fprintf(stderr, "  %s: max |logit diff| %g\n", dump, d);
        if (ref_h && !(d <= tol)) {
            for (int l = 0; l <= nl; l++) {
                size_t off = (size_t)l * n * dim;
                double dh = max_abs_diff(hc.h + off, ref_h + off, (size_t)n * dim);
                if (dh > tol) {
                    fprintf(stderr, "  %s: hidden state %d first past tolerance: %g\n", dump, l,
                            dh);
                    break;
                }
            }
        }
    }
    free(got);
    free(toks);
    free(hc.h);
    engine_free(e);
    st_close(&st);
}

/* Every family's tiny random checkpoint, rebuilt exactly as the fixtures
 * README says, against transformers' logits (float64 reference, float32
 * for qwen3_moe). Tolerance 1e-4 on logits of magnitude ~1: f32
 * accumulation over these sizes stays well inside it, while any real
 * semantic slip (a wrong RoPE pairing, norm offset, mask edge, routing)
 * moves logits by 1e-2 or more. */
static void test_hf_parity(void)
{
    static const char *const names[] = {
        "tiny-llama", "tiny-llama3", "tiny-llama-linear", "tiny-qwen2", "tiny-qwen2-yarn",
        "tiny-qwen3", "tiny-qwen3-moe", "tiny-gemma3", "tiny-qwen3_5", "tiny-qwen3_5-moe",
        "tiny-gemma4", "tiny-gemma4-moe",
    };
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(names); i++) {
        char cfg[512], dir[1024], dump[512];
        snprintf(cfg, sizeof cfg, "tests/fixtures/parity/configs/%s.json", names[i]);
        snprintf(dump, sizeof dump, "tests/fixtures/parity/%s.safetensors", names[i]);
        tmp_path(dir, sizeof dir, names[i]);
        memra_err err = {{0}};
        convert_opts co = {.outtype = DT_F32, .n_threads = 2};
        checkpoint ck;
        if (convert_random(cfg, 1, dir, &co, &err) != 0 || checkpoint_open(dir, &ck, &err) != 0) {
            CHECK_MSG(0, "%s: %s", names[i], err.msg);
        } else {
            check_against_dump(&ck, dump, 1e-4);
            checkpoint_close(&ck);
        }
        rm_rf(dir);
    }
}

/* stories260K against transformers, both as the GGUF (adjacent-pair RoPE
 * on llama.cpp's permuted Q/K) and converted to an HF dir. */
static void test_hf_parity_stories(void)
{
    const char *dump = "tests/fixtures/parity/stories260K.safetensors";
    checkpoint ck, hf;
    if (open_stories(&ck) != 0)
        return;
    check_against_dump(&ck, dump, 1e-4);
    char dir[1024];
    tmp_path(dir, sizeof dir, "stories-parity");
    memra_err err = {{0}};
    convert_opts co = {.outtype = DT_INVALID, .n_threads = 2};
    if (convert_checkpoint(&ck, dir, &co, &err) != 0 || checkpoint_open(dir, &hf, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
    } else {
        check_against_dump(&hf, dump, 1e-4);
        checkpoint_close(&hf);
    }
    rm_rf(dir);
    checkpoint_close(&ck);
}


/* A hybrid model's sequence goes back only to its checkpoint: the state is
 * copied and restored exactly (the same rows run again give the same
 * logits, bit for bit), the engine makes room for checkpoints only when
 * asked, and a reset drops both slots. */
static void test_recurrent_checkpoint(void)
{
    char dir[1024];
    tmp_path(dir, sizeof dir, "ckpt-qwen3_5");
    memra_err err = {{0}};
    convert_opts co = {.outtype = DT_F32, .n_threads = 2};
    checkpoint ck;
    if (convert_random("tests/fixtures/configs/tiny-qwen3_5.json", 5, dir, &co, &err) != 0 ||
        checkpoint_open(dir, &ck, &err) != 0) {
        CHECK_MSG(0, "tiny-qwen3_5: %s", err.msg);
        rm_rf(dir);
        return;
    }
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 2;
    engine *plain = load_engine_opts(&ck, &o);
    o.snapshots = 4;
    engine *e = load_engine_opts(&ck, &o);
    if (!plain || !e)
        goto done;
    CHECK(!engine_rewindable(e) && engine_can_checkpoint(e) && !engine_can_checkpoint(plain));
    int32_t toks[16];
    for (int i = 0; i < 16; i++)
        toks[i] = (int32_t)((i * 53 + 7) % 256);
    int64_t vocab = engine_config(e)->n_vocab;
    float *a = malloc(6 * (size_t)vocab * sizeof(float)), *b = malloc(6 * (size_t)vocab * sizeof(float));
    engine_seq *s, *p;
    engine_seq_new(e, &s, &err);
    engine_seq_new(plain, &p, &err);
    CHECK(engine_forward(e, s, toks, 10, NULL, 0, &err) == 0);
    CHECK(engine_seq_checkpoint(s, 4, &err) == 0);
    CHECK(engine_forward(e, s, toks + 10, 6, a, 1, &err) == 0);
    engine_seq_truncate(s, 10); /* back to the checkpoint */
    CHECK(engine_seq_pos(s) == 10);
    CHECK(engine_forward(e, s, toks + 10, 6, b, 1, &err) == 0);
    CHECK_MSG(memcmp(a, b, 6 * (size_t)vocab * sizeof(float)) == 0,
              "the rows after a restored checkpoint differ");
    /* cut back to a row inside the checkpoint's (the state the step left
     * after position 11, kept as the step ran it): the rows after it are
     * the same bytes as in the uncut run, and so from the row after that */
    for (int keep = 11; keep <= 14; keep += 3) {
        engine_seq_truncate(s, 10);
        CHECK(engine_seq_checkpoint(s, 4, &err) == 0);
        CHECK(engine_forward(e, s, toks + 10, 6, b, 1, &err) == 0);
        engine_seq_truncate(s, keep);
        CHECK(engine_seq_pos(s) == keep);
        CHECK(engine_forward(e, s, toks + keep, 16 - keep, b, 1, &err) == 0);
        CHECK_MSG(memcmp(a + (size_t)(keep - 10) * (size_t)vocab, b,
                         (size_t)(16 - keep) * (size_t)vocab * sizeof(float)) == 0,
                  "the rows after a cut back to %d differ", keep);
    }
    CHECK(engine_seq_checkpoint(s, 2, &err) == 0 &&
          engine_seq_checkpoint(s, 9, &err) != 0 && strstr(err.msg, "keeps up to 4"));
    /* the plain engine has one slot a sequence: no room for a copy */
    CHECK(engine_forward(plain, p, toks, 4, NULL, 0, &err) == 0);
    CHECK(engine_seq_checkpoint(p, 0, &err) != 0 && strstr(err.msg, "no slot free"));
    engine_seq_reset(s);
    CHECK(engine_forward(e, s, toks, 3, NULL, 0, &err) == 0 &&
          engine_seq_checkpoint(s, 0, &err) == 0);
    free(a);
    free(b);
    engine_seq_free(s);
    engine_seq_free(p);
done:
    engine_free(e);
    engine_free(plain);
    checkpoint_close(&ck);
    rm_rf(dir);
}

TEST_MAIN(TEST_CASE(test_stories_golden), TEST_CASE(test_chunked_prefill), TEST_CASE(test_kv_f16),
          TEST_CASE(test_gguf_vs_hf), TEST_CASE(test_families), TEST_CASE(test_kv_blocks),
          TEST_CASE(test_interleaved_sequences), TEST_CASE(test_hidden_hook),
          TEST_CASE(test_errors), TEST_CASE(test_quantized_q8_0),
          TEST_CASE(test_hf_parity), TEST_CASE(test_recurrent_checkpoint),
          TEST_CASE(test_hf_parity_stories))
