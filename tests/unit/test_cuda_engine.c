/* The engine on the CUDA backend, and the batched decode entry point.
 *
 * Everywhere (CI has no GPU): engine_forward_batch on the CPU backend gives
 * each sequence the bytes it gets alone, and refuses bad batches; so do
 * packed prompt steps (engine_forward_packed); the CUDA
 * backend fails cleanly, with a message, when there is no device (or no
 * CUDA in the build).
 *
 * On a GPU machine: stories260K's 40 greedy reference ids; three
 * sequences at different depths decoded in shifting batches give
 * byte-identical logits to each decoded alone; chunked prefill under the
 * prefill-GEMM threshold is byte-identical to token-by-token (and above it
 * close and reproducible); decode steps replayed from CUDA graphs are
 * byte-identical to eager ones; every family's tiny random checkpoint
 * and every weight format agree with the CPU backend; f16 KV too. Without
 * a device those cases report SKIP. */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "backend/backend.h"
#include "core/check.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "format/gguf.h"
#include "numerics/half.h"
#include "quant/quantize.h"
#include "model/checkpoint.h"
#include "model/convert.h"
#include "test.h"
#include "test_model.h"
#include "test_hybrid_prefix.h"
#include "test_pipeline.h"
#if MEMRA_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#endif

static const int32_t stories_ref[40] = {
    403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317,
    426, 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282,
    295, 433, 426, 385, 328, 432, 358, 394, 261, 370, 432, 352,
};

static int have_gpu(void)
{
#if MEMRA_CUDA
    return cuda_device_count() > 0;
#else
    return 0;
#endif
}

#if MEMRA_CUDA
/* Device 0's description into d; 0 where it cannot be queried. */
static int device0(cuda_device_info *d)
{
    memra_err err = {{0}};
    return cuda_device_query(0, d, &err) == 0;
}
#endif

/* Whether device 0 has bf16 tensor cores (the prefill and decode GEMMs
 * run there; the CPU emulation has none). */
static int tensor_cores(void)
{
#if MEMRA_CUDA
    cuda_device_info d;
    return device0(&d) && d.cc_major >= 8;
#else
    return 0;
#endif
}

/* Whether device 0 is of the Hopper class (its tuning differs). */
static int hopper(void)
{
#if MEMRA_CUDA
    cuda_device_info d;
    return device0(&d) && d.klass == DEVICE_CLASS_HOPPER;
#else
    return 0;
#endif
}

static int skip_without_gpu(void)
{
    if (have_gpu())
        return 0;
    test_skip("no CUDA device");
    return 1;
}

static void tmp_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/memra-test-cuda-engine-%d-%s", test_tmp_dir(), (int)getpid(), name);
}

static void rm_rf(const char *path)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0)
        fprintf(stderr, "  could not remove %s\n", path);
}

typedef struct {
    backend_kind kind;
    int n_batch, n_seqs, block;
    int64_t n_ctx;
    kv_type kv;
} load_opts;

/* Engines load the checkpoint's MTP block (engine_opts.mtp) while set. */
static int g_mtp;

static engine *load(const checkpoint *ck, const load_opts *lo)
{
    engine_opts o;
    engine_opts_default(&o);
    o.mtp = g_mtp;
    o.n_threads = 2;
    o.backend = lo->kind;
    o.n_batch = lo->n_batch;
    o.n_seqs = lo->n_seqs;
    o.kv_block_size = lo->block;
    o.n_ctx = lo->n_ctx;
    o.kv_type = lo->kv;
    engine *e = NULL;
    memra_err err = {{0}};
    if (engine_load(ck, &o, &e, &err) != 0)
        CHECK_MSG(0, "engine_load (%s): %s", backend_kind_name(lo->kind), err.msg);
    return e;
}

static int argmax(const float *x, int64_t n)
{
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = (int)i;
    return best;
}

/* All-position logits of tokens in one fresh sequence, in one call (the
 * engine chunks by n_batch) or token by token. */
static float *run_logits(engine *e, const int32_t *tokens, int n, int one_by_one)
{
    memra_err err = {{0}};
    int64_t vocab = engine_config(e)->n_vocab;
    float *out = malloc((size_t)n * (size_t)vocab * sizeof(float));
    engine_seq *s;
    engine_seq_new(e, &s, &err);
    int rc = 0;
    if (one_by_one)
        for (int i = 0; i < n && rc == 0; i++)
            rc = engine_forward(e, s, tokens + i, 1, out + (size_t)i * vocab, 0, &err);
    else
        rc = engine_forward(e, s, tokens, n, out, 1, &err);
    engine_seq_free(s);
    if (rc != 0) {
        CHECK_MSG(0, "forward: %s", err.msg);
        free(out);
        return NULL;
    }
    return out;
}

/* ---- no device ---- */

/* Without a device the backend is refused with one clear line, and so is
 * an engine asking for it; with one, a device index past the last is. */
static void test_cuda_refused_cleanly(void)
{
    memra_err err = {{0}};
    int n_dev = 0;
#if MEMRA_CUDA
    n_dev = cuda_device_count();
#endif
    backend *b = backend_cuda_create(n_dev + 2, &err);
    CHECK(b == NULL);
    CHECK_MSG(strstr(err.msg, "CUDA device") &&
                  (strstr(err.msg, "not present") || strstr(err.msg, "no CUDA backend")),
              "%s", err.msg);
    if (n_dev > 0)
        return;
    memset(&err, 0, sizeof err);
    CHECK(backend_cuda_create(0, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "CUDA device 0") != NULL, "%s", err.msg);
    CHECK(strchr(err.msg, '\n') == NULL);
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    engine_opts o;
    engine_opts_default(&o);
    o.backend = BK_CUDA;
    engine *e = (engine *)&o; /* must be reset to NULL */
    memset(&err, 0, sizeof err);
    CHECK(engine_load(&ck, &o, &e, &err) != 0);
    CHECK(e == NULL);
    CHECK_MSG(strstr(err.msg, "CUDA device 0") != NULL, "%s", err.msg);
    backend_kind k;
    CHECK(backend_kind_parse("cuda", &k, &err) == 0 && k == BK_CUDA);
    CHECK(backend_kind_parse("gpu", &k, &err) != 0 && strstr(err.msg, "'gpu'"));
    checkpoint_close(&ck);
}

/* ---- batched decode vs alone ---- */

enum { BV_SEQS = 3, BV_STEPS = 30 };

static int32_t stream_token(int s, int i, int64_t vocab)
{
    return (int32_t)((i * 37 + 11 + 101 * s) % vocab);
}

/* Three sequences with prompts of 5, 1 and 12 tokens, then BV_STEPS
 * decode steps each (teacher-forced, so the tokens do not depend on the
 * logits). Alone: each sequence by itself. Batched: all three in one
 * engine_forward_batch per step, in a rotating order, with sequence 1
 * sitting out every fourth step so the batches change size and the
 * sequences drift apart in depth. Every decode step's logits must be the
 * same bytes. Small KV blocks make the sequences' blocks interleave. */
static void batch_vs_alone(const checkpoint *ck, backend_kind kind, const char *label)
{
    static const int prompt[BV_SEQS] = {5, 1, 12};
    load_opts lo = {kind, 8, BV_SEQS, 4, 64, KV_F32};
    engine *e = load(ck, &lo);
    if (!e)
        return;
    memra_err err = {{0}};
    int64_t vocab = engine_config(e)->n_vocab;
    size_t per = (size_t)BV_STEPS * (size_t)vocab;
    float *alone = malloc(BV_SEQS * per * sizeof(float));
    float *batched = malloc(BV_SEQS * per * sizeof(float));
    int32_t toks[64];
    for (int s = 0; s < BV_SEQS; s++) {
        engine_seq *q;
        engine_seq_new(e, &q, &err);
        for (int i = 0; i < prompt[s] + BV_STEPS; i++)
            toks[i] = stream_token(s, i, vocab);
        CHECK(engine_forward(e, q, toks, prompt[s], NULL, 0, &err) == 0);
        for (int j = 0; j < BV_STEPS; j++)
            CHECK(engine_forward(e, q, toks + prompt[s] + j, 1, alone + s * per + (size_t)j * vocab,
                                 0, &err) == 0);
        engine_seq_free(q);
    }
    engine_seq *seqs[BV_SEQS];
    int done[BV_SEQS] = {0};
    for (int s = 0; s < BV_SEQS; s++) {
        engine_seq_new(e, &seqs[s], &err);
        for (int i = 0; i < prompt[s]; i++)
            toks[i] = stream_token(s, i, vocab);
        CHECK(engine_forward(e, seqs[s], toks, prompt[s], NULL, 0, &err) == 0);
    }
    float *step_logits = malloc((size_t)BV_SEQS * vocab * sizeof(float));
    for (int step = 0; step < 4 * BV_STEPS; step++) {
        engine_seq *batch[BV_SEQS];
        int32_t btok[BV_SEQS];
        int who[BV_SEQS], n = 0;
        for (int r = 0; r < BV_SEQS; r++) {
            int s = (step + r) % BV_SEQS;
            if (done[s] >= BV_STEPS || (s == 1 && step % 4 == 1))
                continue;
            batch[n] = seqs[s];
            btok[n] = stream_token(s, prompt[s] + done[s], vocab);
            who[n++] = s;
        }
        if (n == 0)
            continue; /* sequence 1 sitting out after the others finished */
        if (engine_forward_batch(e, batch, btok, n, step_logits, &err) != 0) {
            CHECK_MSG(0, "%s: batch step %d: %s", label, step, err.msg);
            break;
        }
        for (int i = 0; i < n; i++) {
            int s = who[i];
            memcpy(batched + s * per + (size_t)done[s] * vocab, step_logits + (size_t)i * vocab,
                   (size_t)vocab * sizeof(float));
            done[s]++;
        }
    }
    for (int s = 0; s < BV_SEQS; s++) {
        CHECK_MSG(done[s] == BV_STEPS, "%s: sequence %d ran %d steps", label, s, done[s]);
        CHECK(engine_seq_pos(seqs[s]) == prompt[s] + done[s]);
        int first_diff = -1;
        for (int j = 0; j < done[s] && first_diff < 0; j++)
            if (memcmp(alone + s * per + (size_t)j * vocab, batched + s * per + (size_t)j * vocab,
                       (size_t)vocab * sizeof(float)) != 0)
                first_diff = j;
        CHECK_MSG(first_diff < 0, "%s (%s): sequence %d: batched logits differ from alone at "
                  "decode step %d", label, backend_kind_name(kind), s, first_diff);
        engine_seq_free(seqs[s]);
    }
    free(step_logits);
    free(alone);
    free(batched);
    engine_free(e);
}

static void test_batch_vs_alone_cpu(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    batch_vs_alone(&ck, BK_CPU, "stories260K");
    checkpoint_close(&ck);
}

/* A bad batch changes nothing: a repeated sequence, an id out of range,
 * a full context. */
static void test_batch_errors(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    load_opts lo = {BK_CPU, 4, 2, 16, 8, KV_F32};
    engine *e = load(&ck, &lo);
    if (!e) {
        checkpoint_close(&ck);
        return;
    }
    memra_err err = {{0}};
    engine_seq *a, *b;
    engine_seq_new(e, &a, &err);
    engine_seq_new(e, &b, &err);
    float logits[2 * 512];
    engine_seq *twice[2] = {a, a};
    int32_t t2[2] = {1, 2};
    CHECK(engine_forward_batch(e, twice, t2, 2, logits, &err) != 0);
    CHECK_MSG(strstr(err.msg, "sequence 1 is also sequence 0"), "%s", err.msg);
    engine_seq *ab[2] = {a, b};
    int32_t bad[2] = {1, 512};
    CHECK(engine_forward_batch(e, ab, bad, 2, logits, &err) != 0);
    CHECK_MSG(strstr(err.msg, "token id 512") && strstr(err.msg, "sequence 1"), "%s", err.msg);
    CHECK(engine_seq_pos(a) == 0 && engine_seq_pos(b) == 0);
    int32_t seven[7] = {1, 2, 3, 4, 5, 6, 7};
    CHECK(engine_forward(e, b, seven, 7, NULL, 0, &err) == 0);
    CHECK(engine_forward_batch(e, ab, t2, 2, logits, &err) == 0);
    CHECK(engine_seq_pos(a) == 1 && engine_seq_pos(b) == 8);
    CHECK(engine_forward_batch(e, ab, t2, 2, logits, &err) != 0);
    CHECK_MSG(strstr(err.msg, "context full") && strstr(err.msg, "sequence 1"), "%s", err.msg);
    CHECK(engine_seq_pos(a) == 1 && engine_seq_pos(b) == 8);
    CHECK(engine_forward_batch(e, ab, t2, 0, logits, &err) != 0);
    engine_seq_free(a);
    engine_seq_free(b);
    engine_free(e);
    checkpoint_close(&ck);
}

/* ---- packed prompt steps ---- */

/* Three prompts (5, 9 and 3 tokens) run as two packed steps, [all of 0,
 * the first 4 of 1] and [the rest of 1, all of 2], then one decode token
 * each in a batch: every sequence's logits are the bytes it gets with its
 * prompt run alone. Steps under the prefill GEMM's rows keep every row on
 * the row-by-row kernels, on CUDA too. */
static void packed_vs_alone(const checkpoint *ck, backend_kind kind)
{
    load_opts lo = {kind, 16, 4, 16, 64, KV_F32};
    engine *e = load(ck, &lo);
    if (!e)
        return;
    int64_t vocab = engine_config(e)->n_vocab;
    enum { N = 3 };
    const int len[N] = {5, 9, 3};
    int32_t prompt[N][9], next[N];
    for (int s = 0; s < N; s++) {
        for (int i = 0; i < len[s]; i++)
            prompt[s][i] = stream_token(s, i, vocab);
        next[s] = stream_token(s, 50, vocab);
    }
    memra_err err = {{0}};
    engine_seq *seq[N];
    for (int s = 0; s < N; s++)
        engine_seq_new(e, &seq[s], &err);
    engine_seq *step1[2] = {seq[0], seq[1]}, *step2[2] = {seq[1], seq[2]};
    const int32_t *t1[2] = {prompt[0], prompt[1]}, *t2[2] = {prompt[1] + 4, prompt[2]};
    int n1[2] = {5, 4}, n2[2] = {5, 3};
    float *got = malloc((size_t)N * (size_t)vocab * sizeof(float));
    float *want = malloc((size_t)vocab * sizeof(float));
    int ok = engine_forward_packed(e, step1, t1, n1, 2, &err) == 0 &&
             engine_forward_packed(e, step2, t2, n2, 2, &err) == 0 &&
             engine_forward_batch(e, seq, next, N, got, &err) == 0;
    CHECK_MSG(ok, "%s: packed steps: %s", backend_kind_name(kind), err.msg);
    for (int s = 0; ok && s < N; s++) {
        CHECK(engine_seq_pos(seq[s]) == len[s] + 1);
        engine_seq *alone;
        engine_seq_new(e, &alone, &err);
        CHECK(engine_forward(e, alone, prompt[s], len[s], NULL, 0, &err) == 0 &&
              engine_forward(e, alone, &next[s], 1, want, 0, &err) == 0);
        CHECK_MSG(memcmp(want, got + (size_t)s * (size_t)vocab, (size_t)vocab * sizeof(float)) == 0,
                  "%s: sequence %d packed differs from alone", backend_kind_name(kind), s);
        engine_seq_free(alone);
    }
    free(got);
    free(want);
    for (int s = 0; s < N; s++)
        engine_seq_free(seq[s]);
    engine_free(e);
}

static void test_packed_vs_alone_cpu(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    packed_vs_alone(&ck, BK_CPU);
    packed_vs_alone(&ck, BK_CPU_REF);
    checkpoint_close(&ck);
}

/* A packed step that cannot run changes nothing and says why. */
static void test_packed_errors(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    load_opts lo = {BK_CPU, 16, 2, 16, 12, KV_F32};
    engine *e = load(&ck, &lo);
    if (!e) {
        checkpoint_close(&ck);
        return;
    }
    memra_err err = {{0}};
    engine_seq *a, *b;
    engine_seq_new(e, &a, &err);
    engine_seq_new(e, &b, &err);
    int32_t ten[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, bad[3] = {1, 512, 3};
    engine_seq *twice[2] = {a, a}, *ab[2] = {a, b};
    const int32_t *tt[2] = {ten, ten}, *tb[2] = {ten, bad};
    int n33[2] = {3, 3}, n10[2] = {10, 10}, n0[2] = {3, 0};
    CHECK(engine_forward_packed(e, twice, tt, n33, 2, &err) != 0);
    CHECK_MSG(strstr(err.msg, "sequence 1 is also sequence 0"), "%s", err.msg);
    CHECK(engine_forward_packed(e, ab, tb, n33, 2, &err) != 0);
    CHECK_MSG(strstr(err.msg, "token id 512 at index 1 of sequence 1"), "%s", err.msg);
    CHECK(engine_forward_packed(e, ab, tt, n10, 2, &err) != 0);
    CHECK_MSG(strstr(err.msg, "20 rows") && strstr(err.msg, "16"), "%s", err.msg);
    CHECK(engine_forward_packed(e, ab, tt, n0, 2, &err) != 0);
    CHECK_MSG(strstr(err.msg, "sequence 1 has no tokens"), "%s", err.msg);
    CHECK(engine_seq_pos(a) == 0 && engine_seq_pos(b) == 0);
    CHECK(engine_forward(e, b, ten, 10, NULL, 0, &err) == 0);
    CHECK(engine_forward_packed(e, ab, tt, n33, 2, &err) != 0);
    CHECK_MSG(strstr(err.msg, "context full") && strstr(err.msg, "sequence 1"), "%s", err.msg);
    CHECK(engine_seq_pos(a) == 0 && engine_seq_pos(b) == 10);
    CHECK(engine_forward_packed(e, ab, tt, n33, 0, &err) != 0);
    engine_seq_free(a);
    engine_seq_free(b);
    engine_free(e);
    checkpoint_close(&ck);
}

static void test_cuda_packed_vs_alone(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    packed_vs_alone(&ck, BK_CUDA);
    checkpoint_close(&ck);
}

/* ---- on the GPU ---- */

static void test_cuda_stories_golden(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    load_opts lo = {BK_CUDA, 0, 1, 0, 0, KV_F32};
    engine *e = load(&ck, &lo);
    if (e) {
        memra_err err = {{0}};
        engine_seq *s;
        engine_seq_new(e, &s, &err);
        float logits[512];
        int32_t tok = 1;
        for (int i = 0; i < 40; i++) {
            if (engine_forward(e, s, &tok, 1, logits, 0, &err) != 0) {
                CHECK_MSG(0, "%s", err.msg);
                break;
            }
            tok = argmax(logits, 512);
            if (tok != stories_ref[i]) {
                CHECK_MSG(0, "step %d: got %d, reference %d", i, tok, stories_ref[i]);
                break;
            }
        }
        engine_seq_free(s);
        engine_free(e);
    }
    checkpoint_close(&ck);
}

/* Largest |a - b| over largest |a|, over n floats (inf on a NaN in b). */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double d = 0, m = 1e-30;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(b[i]))
            return INFINITY;
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs(a[i]));
    }
    return d / m;
}

/* Prefill in chunks of 1, 3, 7 and 64 rows. Chunks under the prefill-GEMM
 * threshold (32 rows) run the batch-invariant mat-vec: the same bytes as
 * token by token. The 41-row chunk may run the GEMM (bf16 operands, on a
 * card with tensor cores and cuBLASLt): then its logits are within 5e-2
 * of the largest and the same bytes on a second run; without cuBLASLt
 * it is the mat-vec again, byte-identical. */
static void test_cuda_chunked_prefill(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    int32_t toks[41];
    toks[0] = 1;
    memcpy(toks + 1, stories_ref, sizeof stories_ref);
    const size_t nl = (size_t)41 * 512;
    load_opts lo = {BK_CUDA, 1, 1, 0, 0, KV_F32};
    engine *e1 = load(&ck, &lo);
    float *ref = e1 ? run_logits(e1, toks, 41, 1) : NULL;
    const int chunks[] = {1, 3, 7};
    for (size_t c = 0; ref && c < MEMRA_ARRAY_LEN(chunks); c++) {
        lo.n_batch = chunks[c];
        engine *e = load(&ck, &lo);
        float *got = e ? run_logits(e, toks, 41, 0) : NULL;
        CHECK_MSG(got && memcmp(got, ref, nl * sizeof(float)) == 0,
                  "chunk %d: prefill differs from token by token", chunks[c]);
        free(got);
        engine_free(e);
    }
    lo.n_batch = 64;
    engine *e = ref ? load(&ck, &lo) : NULL;
    float *a = e ? run_logits(e, toks, 41, 0) : NULL;
    float *b = e ? run_logits(e, toks, 41, 0) : NULL;
    if (a && b) {
        double d = rel_diff(ref, a, nl);
        fprintf(stderr, "  # 41-row chunk vs token by token: max |diff| %.3g of the largest "
                "logit\n", d);
        CHECK_MSG(d <= 5e-2, "chunk 64: prefill %.3g from token by token (bound 5e-2)", d);
        CHECK_MSG(memcmp(a, b, nl * sizeof(float)) == 0, "chunk 64: two runs differ");
    }
    free(a);
    free(b);
    engine_free(e);
    /* Without cuBLASLt (a path that does not load), as on a machine that
     * lacks it, prefill stays on the batch-invariant mat-vec. */
    setenv("MEMRA_CUBLASLT", "/nonexistent/libcublasLt.so", 1);
    e = ref ? load(&ck, &lo) : NULL;
    a = e ? run_logits(e, toks, 41, 0) : NULL;
    unsetenv("MEMRA_CUBLASLT");
    CHECK_MSG(!ref || (a && memcmp(a, ref, nl * sizeof(float)) == 0),
              "chunk 64 without the GEMM: prefill differs from token by token");
    free(a);
    engine_free(e);
    free(ref);
    engine_free(e1);
    checkpoint_close(&ck);
}

/* ---- graphs ---- */

enum { GV_LONG = 140, GV_BATCH = 12 };

/* One decode trace with graphs on or off: a sequence decoded one token at
 * a time past position 128 (the attention split gains a chunk there, so
 * a second graph is captured), then three sequences in batches of 3 and
 * 2. Returns the logits of every step, in order; *replays the steps the
 * backend replayed from graphs. With an MTP block (g_mtp), whose engine
 * keeps every step's hidden states, the block's draft after the trace
 * comes last: it reads what the steps kept. */
static float *decode_trace(const checkpoint *ck, int graphs, size_t *n_out, uint64_t *replays,
                           uint64_t *abandoned)
{
    setenv("MEMRA_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    load_opts lo = {BK_CUDA, 8, 3, 4, 200, KV_F32};
    engine *e = load(ck, &lo);
    unsetenv("MEMRA_CUDA_GRAPHS");
    if (!e)
        return NULL;
    memra_err err = {{0}};
    int64_t vocab = engine_config(e)->n_vocab;
    size_t steps = GV_LONG + 3 * GV_BATCH + (g_mtp ? 1 : 0), at = 0;
    float *out = malloc(steps * (size_t)vocab * sizeof(float));
    int32_t toks[GV_LONG + 8];
    for (int i = 0; i < GV_LONG + 8; i++)
        toks[i] = stream_token(0, i, vocab);
    engine_seq *q[3];
    for (int s = 0; s < 3; s++)
        engine_seq_new(e, &q[s], &err);
    int ok = engine_forward(e, q[0], toks, 5, NULL, 0, &err) == 0;
    for (int j = 0; ok && j < GV_LONG; j++, at++)
        ok = engine_forward(e, q[0], toks + 5 + j, 1, out + at * (size_t)vocab, 0, &err) == 0;
    for (int s = 1; ok && s < 3; s++)
        ok = engine_forward(e, q[s], toks, 3 + 4 * s, NULL, 0, &err) == 0;
    for (int j = 0; ok && j < GV_BATCH; j++) {
        int n = j % 3 == 2 ? 2 : 3;
        int32_t bt[3] = {toks[j], toks[j + 1], toks[j + 2]};
        ok = engine_forward_batch(e, q, bt, n, out + at * (size_t)vocab, &err) == 0;
        at += (size_t)n;
    }
    if (ok && g_mtp) {
        float *row = out + at++ * (size_t)vocab;
        ok = engine_mtp_draft(e, q[0], toks[3], 0, NULL, row, NULL, &err) == 0;
        /* the same draft sampled where it runs (greedy): the row's argmax */
        sampler_params sp = sampler_params_default();
        sp.temperature = 0;
        sampler *greedy = sampler_new(&sp, (int32_t)vocab, &err);
        int32_t tok = -1;
        for (int rep = 0; ok && greedy && rep < 3; rep++) /* eager, captured, replayed */
            ok = engine_mtp_draft_sample(e, q[0], toks[3], 0, NULL, greedy, &tok, NULL, &err) ==
                     0 &&
                 tok == argmax(row, vocab);
        sampler_free(greedy);
    }
    CHECK_MSG(ok, "decode trace (graphs %s): %s", graphs ? "on" : "off", err.msg);
    *n_out = at * (size_t)vocab;
#if MEMRA_CUDA
    uint64_t captures;
    backend_cuda_graph_stats(engine_model(e)->bk, replays, &captures, abandoned);
#else
    *replays = *abandoned = 0;
#endif
    for (int s = 0; s < 3; s++)
        engine_seq_free(q[s]);
    engine_free(e);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

/* Decode steps replayed from CUDA graphs give the same bytes as the same
 * steps run op by op (MEMRA_CUDA_GRAPHS=0), and graphs were really used. */
static void graphed_vs_eager(const checkpoint *ck, const char *label)
{
    size_t na = 0, nb = 0;
    uint64_t ra = 0, rb = 0, aa = 0, ab = 0;
    float *eager = decode_trace(ck, 0, &na, &ra, &aa);
    float *graphed = decode_trace(ck, 1, &nb, &rb, &ab);
    if (eager && graphed) {
        CHECK_MSG(na == nb && memcmp(eager, graphed, na * sizeof(float)) == 0,
                  "%s: graphed decode differs from eager", label);
        CHECK_MSG(ra == 0, "%s: %" PRIu64 " replays with graphs off", label, ra);
        CHECK_MSG(rb > GV_LONG / 2 && ab == 0, "%s: %" PRIu64 " steps replayed, %" PRIu64
                  " captures abandoned", label, rb, ab);
    }
    free(eager);
    free(graphed);
}

static void test_cuda_graphs(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) == 0) {
        graphed_vs_eager(&ck, "stories260K");
        checkpoint_close(&ck);
    }
    static const struct {
        const char *config;
        dtype t;
    } fams[] = {{"tiny-qwen3.json", DT_BF16}, {"tiny-qwen3-moe.json", DT_F16},
                {"tiny-gemma3.json", DT_BF16}, {"tiny-qwen3_5.json", DT_BF16},
                {"tiny-gemma4.json", DT_BF16}, {"tiny-gemma4-moe.json", DT_F16}};
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(fams); f++) {
        char cfg[512], dir[1024];
        snprintf(cfg, sizeof cfg, "tests/fixtures/configs/%s", fams[f].config);
        tmp_path(dir, sizeof dir, fams[f].config);
        memra_err err = {{0}};
        convert_opts co = {.outtype = fams[f].t, .n_threads = 2};
        checkpoint hf;
        if (convert_random(cfg, 5, dir, &co, &err) != 0 || checkpoint_open(dir, &hf, &err) != 0) {
            CHECK_MSG(0, "%s: %s", fams[f].config, err.msg);
        } else {
            graphed_vs_eager(&hf, fams[f].config);
            checkpoint_close(&hf);
        }
        rm_rf(dir);
    }
    /* An engine keeping its steps' hidden states (an MTP block following
     * the model): its decode steps are graphed too, the states read back
     * beside the logits, and the block drafts from the same bytes. */
    char dir[1024];
    tmp_path(dir, sizeof dir, "qwen3_5-mtp");
    memra_err err = {{0}};
    convert_opts co = {.outtype = DT_BF16, .n_threads = 2};
    checkpoint hf;
    if (convert_random("tests/fixtures/parity/configs/tiny-qwen3_5-mtp.json", 5, dir, &co,
                       &err) != 0 ||
        checkpoint_open(dir, &hf, &err) != 0) {
        CHECK_MSG(0, "tiny-qwen3_5-mtp: %s", err.msg);
    } else {
        g_mtp = 1;
        graphed_vs_eager(&hf, "tiny-qwen3_5-mtp (hidden states kept)");
        g_mtp = 0;
        checkpoint_close(&hf);
    }
    rm_rf(dir);
}

/* An assistant's drafts (engine_mtp_draft on a gemma4 model with a
 * gemma4_assistant attached), graphs on or off: four chained depths after
 * each of a few decode steps, logits then next hidden states. */
static float *assistant_trace(const checkpoint *ck, const checkpoint *ack, int graphs,
                              size_t *n_out, uint64_t *replays)
{
    setenv("MEMRA_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    load_opts lo = {BK_CUDA, 8, 1, 4, 64, KV_F32};
    engine *e = load(ck, &lo);
    unsetenv("MEMRA_CUDA_GRAPHS");
    memra_err err = {{0}};
    if (!e || engine_attach_assistant(e, ack, &err) != 0) {
        CHECK_MSG(0, "assistant: %s", err.msg);
        engine_free(e);
        return NULL;
    }
    int64_t vocab = engine_config(e)->n_vocab, dim = engine_config(e)->dim;
    sampler_params sp = sampler_params_default();
    sp.temperature = 0;
    sampler *greedy = sampler_new(&sp, (int32_t)vocab, &err);
    CHECK(greedy != NULL);
    enum { STEPS = 6, DEPTHS = 4 };
    size_t per = (size_t)(vocab + dim);
    float *out = malloc((size_t)STEPS * DEPTHS * per * sizeof(float));
    float h[2][64];
    CHECK(dim <= 64);
    engine_seq *s;
    int32_t toks[16];
    for (int i = 0; i < 16; i++)
        toks[i] = stream_token(1, i, vocab);
    int ok = engine_seq_new(e, &s, &err) == 0 && engine_forward(e, s, toks, 5, NULL, 0, &err) == 0;
    size_t at = 0;
    for (int j = 0; ok && j < STEPS; j++) {
        int32_t next = toks[5 + j];
        for (int d = 0; ok && d < DEPTHS; d++, at += per) {
            ok = engine_mtp_draft(e, s, next, d, d ? h[(d - 1) & 1] : NULL, out + at, h[d & 1],
                                  &err) == 0;
            memcpy(out + at + vocab, h[d & 1], (size_t)dim * sizeof(float));
            /* the same draft sampled where it runs: the argmax, the same next state */
            float hs[64];
            int32_t tok = -1;
            ok = ok && engine_mtp_draft_sample(e, s, next, d, d ? h[(d - 1) & 1] : NULL, greedy,
                                               &tok, hs, &err) == 0;
            CHECK_MSG(!ok || (tok == argmax(out + at, vocab) &&
                              memcmp(hs, h[d & 1], (size_t)dim * sizeof(float)) == 0),
                      "assistant draft sampled (graphs %s): token %d, argmax %d", graphs ? "on" : "off",
                      (int)tok, argmax(out + at, vocab));
            next = argmax(out + at, vocab);
        }
        ok = ok && engine_forward(e, s, &toks[5 + j], 1, NULL, 0, &err) == 0;
    }
    CHECK_MSG(ok, "assistant trace (graphs %s): %s", graphs ? "on" : "off", err.msg);
    *n_out = at;
#if MEMRA_CUDA
    uint64_t captures, abandoned;
    backend_cuda_graph_stats(engine_model(e)->bk, replays, &captures, &abandoned);
#else
    *replays = 0;
#endif
    engine_seq_free(s);
    engine_free(e);
    sampler_free(greedy);
    if (!ok) {
        free(out);
        return NULL;
    }
    return out;
}

/* An assistant's draft steps replayed from graphs give the bytes of the
 * same steps run op by op, and were replayed. */
static void test_cuda_assistant_graphs(void)
{
    if (skip_without_gpu())
        return;
    char dir[1024], adir[1024];
    tmp_path(dir, sizeof dir, "g4");
    tmp_path(adir, sizeof adir, "g4a");
    memra_err err = {{0}};
    convert_opts co = {.outtype = DT_BF16, .n_threads = 2};
    checkpoint ck, ack;
    if (convert_random("tests/fixtures/parity/configs/tiny-gemma4.json", 5, dir, &co, &err) != 0 ||
        convert_random("tests/fixtures/parity/configs/tiny-gemma4-assistant.json", 6, adir, &co,
                       &err) != 0 ||
        checkpoint_open(dir, &ck, &err) != 0) {
        CHECK_MSG(0, "tiny-gemma4 and its assistant: %s", err.msg);
    } else {
        if (checkpoint_open(adir, &ack, &err) != 0) {
            CHECK_MSG(0, "%s", err.msg);
        } else {
            size_t na = 0, nb = 0;
            uint64_t ra = 0, rb = 0;
            float *eager = assistant_trace(&ck, &ack, 0, &na, &ra);
            float *graphed = assistant_trace(&ck, &ack, 1, &nb, &rb);
            if (eager && graphed)
                CHECK_MSG(na == nb && memcmp(eager, graphed, na * sizeof(float)) == 0 &&
                              ra == 0 && rb > 6,
                          "assistant drafts: graphed differ from eager, or %" PRIu64
                          " replays", rb);
            free(eager);
            free(graphed);
            checkpoint_close(&ack);
        }
        checkpoint_close(&ck);
    }
    rm_rf(dir);
    rm_rf(adir);
}

/* tiny-qwen3-moe with experts 64 wide in BF16: shapes the decode GEMM's
 * kernel takes (the fixtures' 32 are too narrow), so the routed experts of
 * a several-row engine run on the tensor cores (cuda_moe.c, moe_gemm).
 * Writes the config to path; 0 or -1. */
static int wide_moe_config(const char *path)
{
    json_error_t je;
    json_t *c = json_load_file("tests/fixtures/configs/tiny-qwen3-moe.json", 0, &je);
    if (!c)
        return -1;
    json_object_set_new(c, "moe_intermediate_size", json_integer(64));
    int rc = json_dump_file(c, path, 0);
    json_decref(c);
    return rc;
}

/* A trimmed head on CUDA (engine_head_new): its kept ids' logits are the
 * full head's (the same rows through the same mat-vec), the others -inf;
 * its decode steps, graphed under their own key beside the full head's,
 * give the eager steps' logits and sample their argmax on the device. */
static void test_cuda_trimmed_head(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    load_opts lo = {BK_CUDA, 8, 4, 16, 64, KV_F32};
    engine *e = load(&ck, &lo);
    memra_err err = {{0}};
    if (!e) {
        checkpoint_close(&ck);
        return;
    }
    int64_t nv = engine_config(e)->n_vocab;
    enum { N_KEEP = 40, STEPS = 8 };
    int32_t ids[N_KEEP];
    for (int j = 0; j < N_KEEP; j++)
        ids[j] = (int32_t)((j * 37 + 11) % nv);
    model_head *h = NULL;
    if (engine_head_new(e, ids, N_KEEP, &h, &err) != 0) {
        CHECK_MSG(0, "engine_head_new: %s", err.msg);
        engine_free(e);
        checkpoint_close(&ck);
        return;
    }
    sampler_params sp = sampler_params_default();
    sp.temperature = 0;
    sampler *greedy = sampler_new(&sp, (int32_t)nv, &err);
    float *full = malloc((size_t)nv * sizeof *full), *trim = malloc((size_t)nv * sizeof *trim);
    engine_seq *a, *b, *c;
    CHECK(engine_seq_new(e, &a, &err) == 0 && engine_seq_new(e, &b, &err) == 0 &&
          engine_seq_new(e, &c, &err) == 0);
    int32_t tok = 1;
    int ok = 1;
    double worst = 0;
    for (int i = 0; ok && i < STEPS; i++) {
        /* the full head, the trimmed head's logits, the trimmed head sampled */
        ok = engine_forward(e, a, &tok, 1, full, 0, &err) == 0;
        engine_use_head(e, h);
        ok = ok && engine_forward(e, b, &tok, 1, trim, 0, &err) == 0;
        int32_t sampled = -1;
        ok = ok && engine_forward_sample(e, c, &tok, 1, greedy, &sampled, &err) == 0;
        engine_use_head(e, NULL);
        if (!ok)
            break;
        float scale = 0;
        int outside = 0;
        for (int64_t v = 0; v < nv; v++)
            scale = fabsf(full[v]) > scale ? fabsf(full[v]) : scale;
        for (int64_t v = 0; v < nv; v++) {
            int in = 0;
            for (int j = 0; j < N_KEEP; j++)
                in |= ids[j] == v;
            if (!in)
                outside += !(isinf(trim[v]) && trim[v] < 0);
            else if (fabs((double)trim[v] - full[v]) > worst)
                worst = fabs((double)trim[v] - full[v]);
        }
        CHECK_MSG(outside == 0 && worst <= 1e-5 * scale,
                  "step %d: %d ids outside the head not -inf, kept ids %.3g from the full head's", i,
                  outside, worst);
        CHECK_MSG(sampled == argmax(trim, nv), "step %d: sampled %d, the trimmed argmax %d", i,
                  (int)sampled, argmax(trim, nv));
        CHECK_MSG(!isinf(full[argmax(full, nv)]), "step %d: the full head's step lost its logits", i);
        tok = (int32_t)argmax(trim, nv);
    }
    CHECK_MSG(ok, "trimmed head: %s", err.msg);
#if MEMRA_CUDA
    uint64_t replays = 0, captures, abandoned;
    backend_cuda_graph_stats(engine_model(e)->bk, &replays, &captures, &abandoned);
    CHECK_MSG(replays > 0 && abandoned == 0, "trimmed head steps: %llu replays, %llu abandoned",
              (unsigned long long)replays, (unsigned long long)abandoned);
#endif
    engine_seq_free(a);
    engine_seq_free(b);
    engine_seq_free(c);
    engine_head_free(e, h);
    sampler_free(greedy);
    free(full);
    free(trim);
    engine_free(e);
    checkpoint_close(&ck);
}

static void test_cuda_batch_vs_alone(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) == 0) {
        batch_vs_alone(&ck, BK_CUDA, "stories260K");
        checkpoint_close(&ck);
    }
    /* MoE routing and gemma3's sliding window (32, passed by the longest
     * sequence) on the device as well. */
    static const struct {
        const char *config;
        dtype t;
    } fams[] = {{"tiny-qwen3-moe.json", DT_F16}, {"tiny-gemma3.json", DT_BF16},
                {"tiny-qwen3_5.json", DT_BF16}, {"tiny-qwen3_5-moe.json", DT_F16},
                {"tiny-gemma4.json", DT_BF16}, {"tiny-gemma4-moe.json", DT_F16}};
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(fams); f++) {
        char cfg[512], dir[1024];
        snprintf(cfg, sizeof cfg, "tests/fixtures/configs/%s", fams[f].config);
        tmp_path(dir, sizeof dir, fams[f].config);
        memra_err err = {{0}};
        convert_opts co = {.outtype = fams[f].t, .n_threads = 2};
        checkpoint hf;
        if (convert_random(cfg, 3, dir, &co, &err) != 0 || checkpoint_open(dir, &hf, &err) != 0) {
            CHECK_MSG(0, "%s: %s", fams[f].config, err.msg);
        } else {
            batch_vs_alone(&hf, BK_CUDA, fams[f].config);
            checkpoint_close(&hf);
        }
        rm_rf(dir);
    }
    char cfg[1024], dir[1024];
    tmp_path(cfg, sizeof cfg, "tiny-qwen3-moe-wide.json");
    tmp_path(dir, sizeof dir, "tiny-qwen3-moe-wide");
    memra_err err = {{0}};
    convert_opts co = {.outtype = DT_BF16, .n_threads = 2};
    checkpoint hf;
    if (wide_moe_config(cfg) != 0 || convert_random(cfg, 3, dir, &co, &err) != 0 ||
        checkpoint_open(dir, &hf, &err) != 0) {
        CHECK_MSG(0, "tiny-qwen3-moe, experts 64 wide: %s", err.msg);
    } else {
        batch_vs_alone(&hf, BK_CUDA, "tiny-qwen3-moe, experts 64 wide, BF16 (tensor cores)");
        checkpoint_close(&hf);
    }
    rm_rf(dir);
    unlink(cfg);
}

/* max |a - b| and the largest |a| over n values; whether b is finite. */
static int logit_diff(const float *a, const float *b, size_t n, double *d, double *scale)
{
    int finite = 1;
    *scale = 1e-30;
    *d = 0;
    for (size_t i = 0; i < n; i++) {
        *scale = fmax(*scale, fabs(a[i]));
        *d = fmax(*d, fabs((double)a[i] - b[i]));
        finite &= isfinite(b[i]) != 0;
    }
    return finite;
}

/* Rows whose argmax differs by more than a near tie (within 2 d). */
static int real_disagreements(const float *a, const float *b, int rows, int64_t vocab, double d)
{
    int n = 0;
    for (int p = 0; p < rows; p++) {
        const float *ra = a + (size_t)p * vocab, *rb = b + (size_t)p * vocab;
        int ia = argmax(ra, vocab), ib = argmax(rb, vocab);
        if (ia != ib && fabs((double)ra[ia] - ra[ib]) > 2 * d)
            n++;
    }
    return n;
}

/* CUDA against CPU on the same checkpoint. With every product in f32
 * (MEMRA_CUDA_DGEMM=0): logits within 1e-4 of the largest logit. With the
 * decode GEMM (MEMRA_CUDA_DGEMM=1: bf16 weights' decode projections on the
 * tensor cores, x rounded to bf16, where the device has them): within
 * dgemm_bound of it (0: 3e-2). Both: the same argmax except at near ties. */
static void compare_backends_within(const checkpoint *ck, kv_type kv, const char *what,
                                    double dgemm_bound)
{
    int32_t toks[40];
    int64_t vocab = ck->config.n_vocab;
    for (int i = 0; i < 40; i++)
        toks[i] = (int32_t)((i * 37 + 11) % vocab);
    load_opts lc = {BK_CPU_REF, 7, 1, 0, 0, kv}, lg = {BK_CUDA, 7, 1, 0, 0, kv};
    engine *ec = load(ck, &lc);
    float *a = ec ? run_logits(ec, toks, 40, 0) : NULL;
    for (int dflt = 0; dflt < 2; dflt++) {
        setenv("MEMRA_CUDA_DGEMM", dflt ? "1" : "0", 1);
        engine *eg = load(ck, &lg);
        unsetenv("MEMRA_CUDA_DGEMM");
        float *b = eg ? run_logits(eg, toks, 40, 0) : NULL;
        const double bound = dflt ? (dgemm_bound > 0 ? dgemm_bound : 3e-2) : 1e-4;
        if (a && b) {
            double scale, d;
            int finite = logit_diff(a, b, (size_t)40 * vocab, &d, &scale);
            int real_disagree = real_disagreements(a, b, 40, vocab, d);
            CHECK_MSG(finite && d <= bound * scale && real_disagree == 0,
                      "%s%s: CUDA vs CPU max |diff| %g (largest logit %g, bound %g of it), %d "
                      "real argmax disagreements%s", what, dflt ? "" : " (f32 products)", d,
                      scale, bound, real_disagree, finite ? "" : ", not finite");
            if (getenv("MEMRA_TEST_VERBOSE"))
                fprintf(stderr, "  %s%s: CUDA vs CPU max |diff| %g of %g\n", what,
                        dflt ? "" : " (f32 products)", d, scale);
        } else {
            CHECK_MSG(0, "%s: could not run both backends", what);
        }
        free(b);
        engine_free(eg);
    }
    free(a);
    engine_free(ec);
}

static void compare_backends(const checkpoint *ck, kv_type kv, const char *what)
{
    compare_backends_within(ck, kv, what, 0);
}

/* A 40-token prompt (its last row's logits only) in one engine of one
 * sequence, in chunks of `chunk` rows (1: token by token), then one
 * decode step: that step's logits, which read every prompt row's KV. */
static float *prompt_then_step(const checkpoint *ck, int chunk)
{
    enum { P = 40 };
    int32_t toks[P + 1];
    int64_t vocab = ck->config.n_vocab;
    for (int i = 0; i <= P; i++)
        toks[i] = (int32_t)((i * 53 + 7) % vocab);
    load_opts lo = {BK_CUDA, chunk, 1, 0, 0, KV_F32};
    engine *e = load(ck, &lo);
    if (!e)
        return NULL;
    memra_err err = {{0}};
    float *out = malloc((size_t)vocab * sizeof(float));
    engine_seq *s = NULL;
    int rc = engine_seq_new(e, &s, &err);
    for (int i = 0; rc == 0 && i < P; i += chunk)
        rc = engine_forward(e, s, toks + i, chunk < P - i ? chunk : P - i, out, 0, &err);
    if (rc == 0)
        rc = engine_forward(e, s, toks + P, 1, out, 0, &err);
    CHECK_MSG(rc == 0, "prompt in chunks of %d: %s", chunk, err.msg);
    engine_seq_free(s);
    engine_free(e);
    if (rc != 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* Prompt chunks of 2 to 31 rows in an engine of one sequence (whose decode
 * steps keep the f32 mat-vec) run on the decode GEMM where the device has
 * bf16 tensor cores and the GEMM takes the format (decision 0030): one
 * chunking gives the bytes of any other (the GEMM's rows never depend on
 * how many share a launch), within the bf16 bound of token by token and
 * not its bytes (x is rounded: the path ran). F16 weights, and every
 * format without tensor cores (the CPU emulation), stay on the mat-vec:
 * token by token's bytes. On a Hopper card a quantized matrix's chunk of
 * up to 64 rows runs there too: the whole 40-row prompt in one chunk.
 * With the prefill GEMM off (MEMRA_CUDA_GEMM=0) every chunk is f32, token
 * by token's bytes. */
static void short_chunks(const checkpoint *ck, int dgemm_format, int quantized,
                         const char *what)
{
    dgemm_format = dgemm_format && tensor_cores();
    const int chunks[] = {2, 5, 8, 20, dgemm_format && quantized && hopper() ? 40 : 20};
    const int64_t vocab = ck->config.n_vocab;
    float *ref = prompt_then_step(ck, 1);
    float *first = ref ? prompt_then_step(ck, chunks[0]) : NULL;
    if (!first) {
        free(ref);
        return;
    }
    double d, scale;
    int finite = logit_diff(ref, first, (size_t)vocab, &d, &scale);
    if (dgemm_format)
        CHECK_MSG(finite && d <= 3e-2 * scale && memcmp(ref, first, (size_t)vocab * 4) != 0,
                  "%s: 2-row prompt chunks vs token by token: max |diff| %g of %g (bound 3e-2 "
                  "of it, and not the f32 bytes)", what, d, scale);
    else
        CHECK_MSG(memcmp(ref, first, (size_t)vocab * 4) == 0,
                  "%s: 2-row prompt chunks differ from token by token", what);
    for (size_t c = 1; c < MEMRA_ARRAY_LEN(chunks); c++) {
        float *got = prompt_then_step(ck, chunks[c]);
        CHECK_MSG(got && memcmp(got, first, (size_t)vocab * 4) == 0,
                  "%s: prompt in chunks of %d differs from chunks of 2", what, chunks[c]);
        free(got);
    }
    setenv("MEMRA_CUDA_GEMM", "0", 1);
    float *f32 = prompt_then_step(ck, chunks[2]);
    unsetenv("MEMRA_CUDA_GEMM");
    CHECK_MSG(f32 && memcmp(f32, ref, (size_t)vocab * 4) == 0,
              "%s: with MEMRA_CUDA_GEMM=0, 8-row prompt chunks differ from token by token", what);
    free(f32);
    free(first);
    free(ref);
}

/* Every family's tiny random checkpoint, as an HF dir and as GGUF
 * (llama.cpp's layout: permuted Q/K, shifted gemma norms, merged experts). */
static void test_cuda_families(void)
{
    if (skip_without_gpu())
        return;
    /* gemma4 attends unscaled over q and k RMS-normed with the random
     * checkpoint's unit weights (scores of a few units): the bf16 rounding
     * of x moves its random-weight logits by up to 13% of the largest
     * (measured on the H200, 2026-12-03; 1e-6 with f32 products) */
    static const struct {
        const char *config;
        dtype type;
        double dgemm_bound;
    } fams[] = {
        {"tiny-llama.json", DT_F32, 0},  {"tiny-llama3.json", DT_F32, 0},
        {"tiny-qwen2.json", DT_F32, 0},  {"tiny-qwen3.json", DT_BF16, 0},
        {"tiny-qwen3-moe.json", DT_F16, 0}, {"tiny-gemma3.json", DT_BF16, 0},
        {"tiny-qwen3_5.json", DT_BF16, 0}, {"tiny-qwen3_5-moe.json", DT_F16, 0},
        {"tiny-gemma4.json", DT_BF16, 0.2}, {"tiny-gemma4-moe.json", DT_F16, 0.2},
    };
    for (size_t f = 0; f < MEMRA_ARRAY_LEN(fams); f++) {
        char cfg[512], dir[1024], gguf[1100];
        snprintf(cfg, sizeof cfg, "tests/fixtures/configs/%s", fams[f].config);
        tmp_path(dir, sizeof dir, fams[f].config);
        snprintf(gguf, sizeof gguf, "%s.gguf", dir);
        memra_err err = {{0}};
        convert_opts co = {.outtype = fams[f].type, .n_threads = 2};
        convert_opts keep = {.outtype = DT_INVALID, .n_threads = 2};
        checkpoint hf, gg;
        if (convert_random(cfg, 7, dir, &co, &err) != 0 || checkpoint_open(dir, &hf, &err) != 0) {
            CHECK_MSG(0, "%s: %s", fams[f].config, err.msg);
            rm_rf(dir);
            continue;
        }
        compare_backends_within(&hf, KV_F32, fams[f].config, fams[f].dgemm_bound);
        if (convert_checkpoint(&hf, gguf, &keep, &err) == 0 && checkpoint_open(gguf, &gg, &err) == 0) {
            char what[256];
            snprintf(what, sizeof what, "%s as GGUF", fams[f].config);
            compare_backends_within(&gg, KV_F32, what, fams[f].dgemm_bound);
            checkpoint_close(&gg);
        } else {
            CHECK_MSG(0, "%s: %s", fams[f].config, err.msg);
        }
        checkpoint_close(&hf);
        rm_rf(dir);
        rm_rf(gguf);
    }
}

static void test_cuda_kv_f16(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    compare_backends(&ck, KV_F16, "stories260K, f16 KV");
    checkpoint_close(&ck);
}

/* ---- every weight format, end to end ---- */

static void put16(uint8_t *p, uint16_t h)
{
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* One row of n floats as type t. Q8_0 and Q4_0 are quantized from the
 * values, NVFP4 and MXFP8 by memra-quantize's quantizers; the K-quants get
 * random valid blocks with small scales: both backends must agree on any
 * valid bytes. */
static void encode_row(dtype t, const float *x, int64_t n, uint8_t *out, rng_state *r)
{
    switch (t) {
    case DT_F16:
        for (int64_t i = 0; i < n; i++)
            put16(out + 2 * i, f32_to_fp16(x[i]));
        break;
    case DT_BF16:
        for (int64_t i = 0; i < n; i++)
            put16(out + 2 * i, f32_to_bf16(x[i]));
        break;
    case DT_Q8_0: case DT_Q4_0:
        for (int64_t b = 0; b < n / 32; b++) {
            const float *v = x + 32 * b;
            float amax = 0;
            for (int i = 0; i < 32; i++)
                amax = fmaxf(amax, fabsf(v[i]));
            float d = t == DT_Q8_0 ? amax / 127.0f : amax / 7.0f, id = d != 0 ? 1.0f / d : 0.0f;
            uint8_t *blk = out + b * (t == DT_Q8_0 ? 34 : 18);
            put16(blk, f32_to_fp16(d));
            for (int i = 0; i < 32; i++) {
                int q = (int)roundf(v[i] * id);
                if (t == DT_Q8_0) {
                    blk[2 + i] = (uint8_t)(int8_t)q;
                } else {
                    q = q + 8 < 0 ? 0 : q + 8 > 15 ? 15 : q + 8;
                    if (i < 16)
                        blk[2 + i] = (uint8_t)q;
                    else
                        blk[2 + i - 16] |= (uint8_t)(q << 4);
                }
            }
        }
        break;
    case DT_NVFP4: case DT_MXFP8:
        CHECK(quantize_row(t, x, out, n, NULL, NULL) == 0);
        break;
    default: { /* Q4_K, Q5_K, Q6_K */
        const dtype_info *ti = dtype_get(t);
        int64_t nb = n / 256, bytes = nb * ti->type_size;
        for (int64_t i = 0; i < bytes; i++)
            out[i] = (uint8_t)rng_next_u64(r);
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = out + b * ti->type_size;
            if (t == DT_Q6_K) {
                put16(blk + 208, f32_to_fp16(2e-5f + 3e-5f * rng_uniform(r)));
            } else {
                put16(blk, f32_to_fp16(1e-4f + 1e-4f * rng_uniform(r)));
                put16(blk + 2, f32_to_fp16(1e-4f + 1e-4f * rng_uniform(r)));
            }
        }
        break;
    }
    }
}

/* A qwen3 model whose every dimension is a multiple of 256, written as
 * GGUF with its matrices (embedding and head included) in type t. */
static int write_format_model(const char *dir, dtype t, char *gguf, size_t gguf_n)
{
    char cfg[1100], hf[1100], f32[1100];
    snprintf(cfg, sizeof cfg, "%s.json", dir);
    snprintf(hf, sizeof hf, "%s-hf", dir);
    snprintf(f32, sizeof f32, "%s-f32.gguf", dir);
    snprintf(gguf, gguf_n, "%s-%s.gguf", dir, dtype_get(t)->name);
    FILE *f = fopen(cfg, "w");
    if (!f)
        return -1;
    fputs("{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", "
          "\"vocab_size\": 512, \"hidden_size\": 256, \"intermediate_size\": 512, "
          "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
          "\"head_dim\": 64, \"max_position_embeddings\": 1024, \"rms_norm_eps\": 1e-06, "
          "\"rope_theta\": 1000000, \"tie_word_embeddings\": false, \"attention_bias\": false, "
          "\"use_sliding_window\": false, \"bos_token_id\": 1, \"eos_token_id\": 2, "
          "\"hidden_act\": \"silu\", \"torch_dtype\": \"float32\"}\n", f);
    fclose(f);
    memra_err err = {{0}};
    convert_opts co = {.outtype = DT_F32, .n_threads = 2};
    checkpoint src;
    int rc = -1;
    if (convert_random(cfg, 11, hf, &co, &err) != 0 || checkpoint_open(hf, &src, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return -1;
    }
    checkpoint g;
    if (convert_checkpoint(&src, f32, &co, &err) != 0 || checkpoint_open(f32, &g, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        checkpoint_close(&src);
        return -1;
    }
    rng_state r;
    rng_seed(&r, 5, (uint64_t)t);
    gguf_writer *w = gguf_writer_new();
    gguf_writer_copy_kv(w, &g.gguf);
    uint8_t **bufs = calloc(g.gguf.n_tensors, sizeof *bufs);
    rc = 0;
    for (uint64_t i = 0; i < g.gguf.n_tensors && rc == 0; i++) {
        const gguf_tensor *tt = &g.gguf.tensors[i];
        if (tt->n_dims != 2 || tt->type != DT_F32) {
            rc = gguf_writer_add_tensor(w, tt->name, tt->type, tt->n_dims, tt->ne, tt->data,
                                        tt->nbytes, &err);
            continue;
        }
        int64_t cols = tt->ne[0], rows = tt->ne[1];
        int64_t rb = dtype_row_bytes(t, cols);
        bufs[i] = malloc((size_t)(rb * rows));
        float *row = malloc((size_t)cols * sizeof(float));
        for (int64_t rr = 0; rr < rows; rr++) {
            memcpy(row, tt->data + (size_t)(rr * cols) * 4, (size_t)cols * 4);
            encode_row(t, row, cols, bufs[i] + rr * rb, &r);
        }
        free(row);
        rc = gguf_writer_add_tensor(w, tt->name, t, 2, tt->ne, bufs[i], (uint64_t)(rb * rows),
                                    &err);
    }
    if (rc == 0)
        rc = gguf_writer_write(w, gguf, &err);
    if (rc != 0)
        CHECK_MSG(0, "writing %s: %s", gguf, err.msg);
    gguf_writer_free(w);
    for (uint64_t i = 0; i < g.gguf.n_tensors; i++)
        free(bufs[i]);
    free(bufs);
    checkpoint_close(&g);
    checkpoint_close(&src);
    rm_rf(hf);
    rm_rf(f32);
    rm_rf(cfg);
    return rc;
}

static void test_cuda_weight_formats(void)
{
    if (skip_without_gpu())
        return;
    static const dtype types[] = {DT_F16,  DT_BF16, DT_Q8_0, DT_Q4_0, DT_Q4_K,
                                  DT_Q5_K, DT_Q6_K, DT_NVFP4, DT_MXFP8};
    char dir[1024];
    tmp_path(dir, sizeof dir, "fmt");
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(types); i++) {
        char gguf[1200];
        if (write_format_model(dir, types[i], gguf, sizeof gguf) != 0)
            continue;
        checkpoint ck;
        memra_err err = {{0}};
        if (checkpoint_open(gguf, &ck, &err) != 0) {
            CHECK_MSG(0, "%s", err.msg);
        } else {
            char what[64];
            snprintf(what, sizeof what, "qwen3 256-dim, %s matrices", dtype_get(types[i])->name);
            compare_backends(&ck, KV_F32, what);
            /* (every format where the device runs it; the emulation's
             * mat-vec two, for time) */
            if (tensor_cores() || types[i] == DT_F16 || types[i] == DT_Q4_K)
                short_chunks(&ck, types[i] != DT_F16, types[i] != DT_F16 && types[i] != DT_BF16,
                             what);
            /* An engine of several sequences decodes them on the decode
             * GEMM (decision 0017): alone and batched, the same bytes. */
            batch_vs_alone(&ck, BK_CUDA, what);
            checkpoint_close(&ck);
        }
        rm_rf(gguf);
    }
}

/* The prefix cache on a hybrid model on the device: the state kept at
 * chunk ends and restored by state_copy (test_hybrid_prefix.h). */
static void test_cuda_hybrid_prefix(void)
{
    if (skip_without_gpu())
        return;
    hybrid_prefix_check(BK_CUDA, 1, 1, "cuda");
    hybrid_prefix_check(BK_CUDA, 2, 1, "cuda");
    hybrid_prefix_check(BK_CUDA, 1, 2, "cuda");
}

/* ---- pipeline parallel (test_pipeline.h) ---- */

/* The parallel checks' models: stories260K (llama, a tied head, 4 KV
 * heads), a routed MoE (tiny-qwen3-moe), a hybrid (tiny-qwen3_5:
 * recurrent state per stage or per rank) and a llama with biases on q, k,
 * v and the output projection (tiny-llama-bias: the output bias is rank
 * 0's alone), random weights; check(ck, label) on each. */
typedef void (*parallel_fn)(const checkpoint *ck, backend_kind kind, int n_devices, double bound,
                            const char *label);

static void parallel_models(backend_kind kind, int n_devices, double bound, const char *what,
                            parallel_fn check)
{
    checkpoint ck;
    char label[128];
    if (open_stories(&ck) == 0) {
        snprintf(label, sizeof label, "%s stories260K", what);
        check(&ck, kind, n_devices, bound, label);
        checkpoint_close(&ck);
    }
    static const char *configs[] = {"tests/fixtures/configs/tiny-qwen3_5.json",
                                    "tests/fixtures/parity/configs/tiny-qwen3-moe.json",
                                    "tests/fixtures/configs/tiny-llama-bias.json"};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(configs); i++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/memra-test-parallel-%d-%s-%zu", test_tmp_dir(),
                 (int)getpid(), what, i);
        memra_err err = {{0}};
        convert_opts co = {.outtype = DT_F32, .n_threads = 2};
        if (convert_random(configs[i], 3, dir, &co, &err) != 0 ||
            checkpoint_open(dir, &ck, &err) != 0) {
            CHECK_MSG(0, "%s: %s", configs[i], err.msg);
            continue;
        }
        snprintf(label, sizeof label, "%s %s", what, configs[i]);
        check(&ck, kind, n_devices, bound, label);
        checkpoint_close(&ck);
        rm_rf(dir);
    }
}

/* Pipelines give one backend's bytes (test_pipeline.h). */
static void pipeline_bytes(const checkpoint *ck, backend_kind kind, int n_devices, double bound,
                           const char *label)
{
    (void)bound;
    pipeline_check(ck, kind, n_devices, label);
}

static void pipeline_models(backend_kind kind, int n_devices, const char *what)
{
    parallel_models(kind, n_devices, 0, what, pipeline_bytes);
}

static void test_pipeline_cpu(void) { pipeline_models(BK_CPU, 1, "cpu"); }

/* ---- tensor parallel (test_pipeline.h) ----
 *
 * The bound is on the largest logit: the sums over ranks change the order
 * of additions (tensor_parallel_check). */
static void tensor_parallel_models(backend_kind kind, int n_devices, double bound,
                                   const char *what)
{
    parallel_models(kind, n_devices, bound, what, tensor_parallel_check);
}

static void test_tensor_parallel_cpu(void) { tensor_parallel_models(BK_CPU, 1, 1e-5, "cpu"); }

static void test_cuda_tensor_parallel(void)
{
    if (skip_without_gpu())
        return;
#if MEMRA_CUDA
    tensor_parallel_models(BK_CUDA, cuda_device_count() > 1 ? 2 : 1, 1e-5, "cuda");
#endif
}

static void test_cuda_pipeline(void)
{
    if (skip_without_gpu())
        return;
#if MEMRA_CUDA
    pipeline_models(BK_CUDA, cuda_device_count() > 1 ? 2 : 1, "cuda");
#endif
}

TEST_MAIN(TEST_CASE(test_cuda_refused_cleanly), TEST_CASE(test_batch_vs_alone_cpu),
          TEST_CASE(test_batch_errors), TEST_CASE(test_packed_vs_alone_cpu),
          TEST_CASE(test_packed_errors), TEST_CASE(test_cuda_packed_vs_alone),
          TEST_CASE(test_cuda_stories_golden),
          TEST_CASE(test_cuda_chunked_prefill), TEST_CASE(test_cuda_graphs), TEST_CASE(test_cuda_assistant_graphs),
          TEST_CASE(test_cuda_batch_vs_alone), TEST_CASE(test_cuda_trimmed_head),
          TEST_CASE(test_cuda_families), TEST_CASE(test_cuda_kv_f16),
          TEST_CASE(test_cuda_weight_formats), TEST_CASE(test_cuda_hybrid_prefix),
          TEST_CASE(test_pipeline_cpu), TEST_CASE(test_cuda_pipeline),
          TEST_CASE(test_tensor_parallel_cpu), TEST_CASE(test_cuda_tensor_parallel))
