/* Sampling through the engine, the KV types on CUDA and CUDA device
 * selection.
 *
 * Everywhere: engine_forward_sample and engine_forward_batch_sample give
 * the tokens sampler_sample gives on the logits engine_forward returns
 * (the CPU backend samples on the host), a row that cannot be sampled
 * fails alone, and generate() repeats with a seed.
 *
 * With a CUDA device (or the emulation, tests/gpu/emulate.sh): the same
 * on CUDA, where the token is picked on the device from logits that never
 * leave it; sampled decode steps replayed from CUDA graphs (the forward
 * and the sample kernel in one graph) pick the same ids as the same steps
 * run eagerly (MEMRA_CUDA_GRAPHS=0), greedy and seeded, with penalties and
 * logit_bias, under allowed-token masks that change every step, alone
 * and batched, and replays really happened; the CUDA
 * engine defaults to bf16 KV and runs q8_0 KV close to
 * the CPU's q8_0; an engine on the last device works from a thread that
 * never selected it, and a device index past the last is refused naming
 * how many there are. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "model/checkpoint.h"
#include "test.h"
#include "test_model.h"
#if MEMRA_CUDA
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_device.h"
#endif

static int n_devices(void)
{
#if MEMRA_CUDA
    return cuda_device_count();
#else
    return 0;
#endif
}

static int skip_without_gpu(void)
{
    if (n_devices() > 0)
        return 0;
    test_skip("no CUDA device");
    return 1;
}

static engine *load(const checkpoint *ck, backend_kind kind, int device, kv_type kv, int n_seqs)
{
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 2;
    o.backend = kind;
    o.device = device;
    o.kv_type = kv;
    o.n_seqs = n_seqs;
    o.n_batch = 8;
    o.n_ctx = 128;
    engine *e = NULL;
    memra_err err = {{0}};
    if (engine_load(ck, &o, &e, &err) != 0)
        CHECK_MSG(0, "engine_load (%s): %s", backend_kind_name(kind), err.msg);
    return e;
}

static sampler_params mixed_params(uint64_t seed)
{
    sampler_params p = sampler_params_default();
    p.temperature = 0.9;
    p.top_k = 40;
    p.top_p = 0.92;
    p.min_p = 0.01;
    p.repetition_penalty = 1.1;
    p.presence_penalty = 0.2;
    p.penalty_last_n = 32;
    p.seed = seed;
    return p;
}

/* An allowed-token mask that changes every step, as a grammar's does:
 * about a third of the ids, none at or past vocab - 3 (salt picks which). */
static void step_mask(sampler *s, int32_t vocab, int salt)
{
    uint32_t *bits = calloc(((size_t)vocab + 31) / 32, sizeof *bits);
    for (int32_t id = 0; id < vocab; id++)
        if (((uint32_t)id * 2654435761u + (uint32_t)salt * 40503u) % 3 == 0)
            bits[id / 32] |= 1u << (id % 32);
    sampler_set_mask(s, bits, vocab - 3);
    free(bits);
}

/* STEPS tokens sampled two ways on one engine: engine_forward's logits
 * through sampler_sample, and engine_forward_sample (the device path on a
 * backend that samples). The tokens must be the same. */
enum { STEPS = 24 };

static void sample_two_ways(engine *e, const char *label)
{
    memra_err err = {{0}};
    int64_t vocab = engine_config(e)->n_vocab;
    sampler_params p = mixed_params(7);
    sampler *host = sampler_new(&p, (int32_t)vocab, &err), *dev = sampler_new(&p, (int32_t)vocab, &err);
    engine_seq *a, *b;
    engine_seq_new(e, &a, &err);
    engine_seq_new(e, &b, &err);
    float *logits = malloc((size_t)vocab * sizeof *logits);
    const int32_t prompt[3] = {1, 403, 407};
    int32_t ta = -1, tb = -1;
    /* every other step under a mask (a grammar's step), the same on both */
    step_mask(host, (int32_t)vocab, 0);
    step_mask(dev, (int32_t)vocab, 0);
    int rc = engine_forward(e, a, prompt, 3, logits, 0, &err);
    if (rc == 0)
        ta = sampler_sample(host, logits, &err);
    if (rc == 0)
        rc = engine_forward_sample(e, b, prompt, 3, dev, &tb, &err);
    int same = 0;
    for (int s = 0; s < STEPS && rc == 0 && ta >= 0; s++) {
        same += ta == tb;
        if (ta != tb)
            break;
        sampler_accept(host, ta, &err);
        sampler_accept(dev, tb, &err);
        if (s % 2) {
            step_mask(host, (int32_t)vocab, s);
            step_mask(dev, (int32_t)vocab, s);
        } else {
            sampler_set_mask(host, NULL, 0);
            sampler_set_mask(dev, NULL, 0);
        }
        rc = engine_forward(e, a, &ta, 1, logits, 0, &err);
        if (rc == 0)
            ta = sampler_sample(host, logits, &err);
        if (rc == 0)
            rc = engine_forward_sample(e, b, &tb, 1, dev, &tb, &err);
    }
    CHECK_MSG(rc == 0, "%s: %s", label, err.msg);
    CHECK_MSG(same == STEPS, "%s: %d of %d tokens the same (then host %d, sampled %d)", label,
              same, STEPS, ta, tb);
    free(logits);
    engine_seq_free(a);
    engine_seq_free(b);
    sampler_free(host);
    sampler_free(dev);
}

static void count_call(void *ctx)
{
    ++*(int *)ctx;
}

/* Three sequences decoded together with engine_forward_batch_sample (every
 * other step through engine_forward_batch_sample_with, its overlap work
 * run once) give each the tokens engine_forward_sample gives it alone; a
 * fourth whose sampler bans every token fails alone, with the sampler's
 * message. */
static void batch_vs_single(engine *e, const char *label)
{
    enum { N = 4 };
    memra_err err = {{0}}, row_errs[N];
    int64_t vocab = engine_config(e)->n_vocab;
    sampler_logit_bias *ban = malloc((size_t)vocab * sizeof *ban);
    for (int64_t i = 0; i < vocab; i++)
        ban[i] = (sampler_logit_bias){(int32_t)i, -INFINITY};
    sampler *bs[N], *ss[N];
    engine_seq *bq[N], *sq[N];
    int32_t bt[N], st[N];
    for (int i = 0; i < N; i++) {
        sampler_params p = mixed_params(100 + (uint64_t)i);
        if (i == 3) {
            p.logit_bias = ban;
            p.n_logit_bias = (int32_t)vocab;
        }
        bs[i] = sampler_new(&p, (int32_t)vocab, &err);
        ss[i] = sampler_new(&p, (int32_t)vocab, &err);
        engine_seq_new(e, &bq[i], &err);
        engine_seq_new(e, &sq[i], &err);
        const int32_t prompt[2] = {1, (int32_t)(300 + 17 * i)};
        /* prompts of different lengths, so the rows sit at other depths */
        engine_forward(e, bq[i], prompt, 1 + (i & 1), NULL, 0, &err);
        engine_forward(e, sq[i], prompt, 1 + (i & 1), NULL, 0, &err);
        bt[i] = st[i] = (int32_t)(400 + i);
    }
    int bad = 0, row3 = 1, calls = 0;
    for (int step = 0; step < 10; step++) {
        if (engine_forward_batch_sample_with(e, bq, bt, N, bs, bt, row_errs,
                                             step % 2 ? count_call : NULL, &calls, &err) != 0) {
            CHECK_MSG(0, "%s: batch: %s", label, err.msg);
            break;
        }
        for (int i = 0; i < N; i++) {
            memra_err se;
            int rc = engine_forward_sample(e, sq[i], &st[i], 1, ss[i], &st[i], &se);
            if (i == 3) {
                row3 &= bt[3] == -1 && rc != 0 &&
                        strcmp(row_errs[3].msg, "every token is banned by logit_bias") == 0 &&
                        strcmp(se.msg, row_errs[3].msg) == 0;
                bt[3] = st[3] = 400; /* a token to feed on */
                continue;
            }
            bad += rc != 0 || bt[i] != st[i];
            sampler_accept(bs[i], bt[i] < 0 ? 0 : bt[i], &se);
            sampler_accept(ss[i], st[i] < 0 ? 0 : st[i], &se);
            if (bt[i] < 0)
                bt[i] = st[i] = 400;
        }
    }
    CHECK_MSG(bad == 0, "%s: %d batched tokens differ from alone", label, bad);
    CHECK_MSG(calls == 5, "%s: the overlap work ran %d times in 5 steps", label, calls);
    CHECK_MSG(row3, "%s: the all-banned row did not fail alone with its message", label);
    for (int i = 0; i < N; i++) {
        sampler_free(bs[i]);
        sampler_free(ss[i]);
        engine_seq_free(bq[i]);
        engine_seq_free(sq[i]);
    }
    free(ban);
}

static void test_cpu_sampling(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    engine *e = load(&ck, BK_CPU, 0, KV_DEFAULT, 8);
    if (e) {
        CHECK(engine_kv_type(e) == KV_BF16); /* the fast path's default */
        sample_two_ways(e, "cpu");
        batch_vs_single(e, "cpu");
        /* generate() with a seed repeats, and another seed differs */
        gen_params gp;
        gen_params_default(&gp);
        gp.n_predict = 20;
        gp.sampling = mixed_params(3);
        const int32_t prompt[1] = {1};
        gen_result r1, r2, r3;
        memra_err err = {{0}};
        CHECK(generate(e, NULL, prompt, 1, &gp, NULL, NULL, &r1, &err) == 0);
        CHECK(generate(e, NULL, prompt, 1, &gp, NULL, NULL, &r2, &err) == 0);
        gp.sampling.seed = 4;
        CHECK(generate(e, NULL, prompt, 1, &gp, NULL, NULL, &r3, &err) == 0);
        CHECK(r1.n_tokens == 20 && r2.n_tokens == 20 && r3.n_tokens == 20);
        CHECK(memcmp(r1.tokens, r2.tokens, 20 * sizeof(int32_t)) == 0);
        CHECK(memcmp(r1.tokens, r3.tokens, 20 * sizeof(int32_t)) != 0);
        gen_result_free(&r1);
        gen_result_free(&r2);
        gen_result_free(&r3);
        /* n_predict 0: no token, no sampling */
        gp.n_predict = 0;
        CHECK(generate(e, NULL, prompt, 1, &gp, NULL, NULL, &r1, &err) == 0 && r1.n_tokens == 0);
        gen_result_free(&r1);
        engine_free(e);
    }
    checkpoint_close(&ck);
}

static void test_cuda_sampling(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    engine *e = load(&ck, BK_CUDA, 0, KV_F32, 8);
    if (e) {
        sample_two_ways(e, "cuda");
        batch_vs_single(e, "cuda");
        engine_free(e);
    }
    checkpoint_close(&ck);
}

/* ---- the sampled step graphed ---- */

/* steps of sequence 0 alone, batched steps (3, 3, 2 rows, repeated),
 * steps of sequence 0 again; ids: a first one per sequence, then one per
 * row of every step */
enum { GS_ALONE = 40, GS_BATCH = 12, GS_AGAIN = 8,
       GS_IDS = 4 + GS_ALONE + 8 * GS_BATCH / 3 + GS_AGAIN };

typedef struct {
    int32_t ids[GS_IDS];
    int n_ids;
    uint64_t replays, sampled_replays, captures, abandoned;
} sampled_trace;

/* Sequence i's sampler: greedy or seeded temperature / top-k / top-p /
 * min-p, both with penalties and a logit_bias list (sequence 2's longer
 * than the device's first staging capacity, so its first batched step
 * moves the staging buffers and every graph is captured again). */
static sampler *trace_sampler(int greedy, int i, int32_t vocab, sampler_logit_bias *lb)
{
    memra_err err = {{0}};
    sampler_params p = mixed_params(11 + (uint64_t)i);
    if (greedy) {
        p.temperature = 0.0;
        p.repetition_penalty = 1.3;
        p.frequency_penalty = 0.4;
    }
    int nb = i == 2 ? 300 : 5;
    for (int j = 0; j < nb; j++)
        lb[j] = (sampler_logit_bias){(int32_t)((37 * i + 7 * j + 5) % vocab),
                                     (float)((j % 5) - 2) * 0.75f};
    if (i != 2)
        lb[nb - 1].bias = -INFINITY; /* a banned token too */
    p.logit_bias = lb;
    p.n_logit_bias = nb;
    sampler *s = sampler_new(&p, vocab, &err);
    CHECK_MSG(s != NULL, "sampler_new: %s", err.msg);
    return s;
}

/* The batch's new masks, set from the overlap work of
 * engine_forward_batch_sample_with: while the forward runs, as memra-serve
 * sets its grammars' masks. */
typedef struct {
    sampler **smp; /* the batch's, from sequence 1 */
    int32_t vocab;
    int j, n, calls;
} overlap_masks;

static void set_masks_overlapped(void *ctx)
{
    overlap_masks *o = ctx;
    o->calls++;
    for (int i = 1; i <= o->n; i += 2)
        step_mask(o->smp[i - 1], o->vocab, 10 + 4 * o->j + i);
}

/* Ids sampled on the device with graphs on or off: sequence 0 decoded
 * alone, three more at different depths decoded in batches of 3 and 2,
 * then sequence 0 alone again; every id fed back. With `overlap`, the
 * batches' masks are set by the overlap work of
 * engine_forward_batch_sample_with instead of before the call. */
static int sampled_decode_trace(const checkpoint *ck, int graphs, int greedy, int overlap,
                                sampled_trace *t)
{
    memset(t, 0, sizeof *t);
    setenv("MEMRA_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    engine *e = load(ck, BK_CUDA, 0, KV_F32, 4);
    unsetenv("MEMRA_CUDA_GRAPHS");
    if (!e)
        return -1;
    memra_err err = {{0}}, row_errs[3];
    int32_t vocab = (int32_t)engine_config(e)->n_vocab;
    sampler_logit_bias lb[4][300];
    sampler *smp[4];
    engine_seq *q[4];
    int32_t tok[4];
    int ok = 1;
    for (int i = 0; i < 4; i++) {
        smp[i] = trace_sampler(greedy, i, vocab, lb[i]);
        engine_seq_new(e, &q[i], &err);
    }
    for (int i = 0; i < 4 && ok; i++) {
        /* prompts of 3, 2, 5 and 9 tokens: the batch's rows at other depths */
        int32_t prompt[9];
        static const int lens[4] = {3, 2, 5, 9};
        int np = lens[i];
        for (int j = 0; j < np; j++)
            prompt[j] = (int32_t)((1 + 53 * i + 29 * j) % vocab);
        if (smp[i] && (i & 1))
            step_mask(smp[i], vocab, i);
        ok = smp[i] && engine_forward_sample(e, q[i], prompt, np, smp[i], &tok[i], &err) == 0 &&
             sampler_accept(smp[i], tok[i], &err) == 0;
        t->ids[t->n_ids++] = tok[i];
        for (int j = 0; ok && i == 0 && j < GS_ALONE; j++) {
            ok = engine_forward_sample(e, q[0], &tok[0], 1, smp[0], &tok[0], &err) == 0 &&
                 sampler_accept(smp[0], tok[0], &err) == 0;
            t->ids[t->n_ids++] = tok[0];
        }
    }
    for (int j = 0; ok && j < GS_BATCH; j++) {
        int n = j % 3 == 2 ? 2 : 3;
        overlap_masks om = {smp + 1, vocab, j, n, 0};
        if (!overlap)
            set_masks_overlapped(&om); /* sequences 1 and 3: a new mask every step */
        ok = engine_forward_batch_sample_with(e, q + 1, tok + 1, n, smp + 1, tok + 1, row_errs,
                                              overlap ? set_masks_overlapped : NULL, &om,
                                              &err) == 0;
        if (ok && om.calls != 1) {
            ok = 0;
            snprintf(err.msg, sizeof err.msg, "the masks were set %d times in one step",
                     om.calls);
        }
        for (int i = 1; ok && i <= n; i++) {
            ok = tok[i] >= 0 && sampler_accept(smp[i], tok[i], &err) == 0;
            if (tok[i] < 0)
                err = row_errs[i - 1];
            t->ids[t->n_ids++] = tok[i];
        }
    }
    for (int j = 0; ok && j < GS_AGAIN; j++) {
        ok = engine_forward_sample(e, q[0], &tok[0], 1, smp[0], &tok[0], &err) == 0 &&
             sampler_accept(smp[0], tok[0], &err) == 0;
        t->ids[t->n_ids++] = tok[0];
    }
    CHECK_MSG(ok, "sampled trace (%s, graphs %s): %s", greedy ? "greedy" : "seeded",
              graphs ? "on" : "off", err.msg);
#if MEMRA_CUDA
    backend *bk = engine_model(e)->bk;
    backend_cuda_graph_stats(bk, &t->replays, &t->captures, &t->abandoned);
    t->sampled_replays = backend_cuda_graph_sampled_replays(bk);
#endif
    for (int i = 0; i < 4; i++) {
        sampler_free(smp[i]);
        engine_seq_free(q[i]);
    }
    engine_free(e);
    return ok ? 0 : -1;
}

/* The sampled decode step replayed from a graph (forward and sample
 * kernel) gives the ids the same steps give eagerly. Most steps must be
 * replays (a seed or stream position baked into the graph would repeat
 * the first draw; lists uploaded once would miss the penalties), and the
 * growth of the staging buffers must have had its graphs captured again. */
static void test_cuda_graphed_sampling(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    for (int greedy = 1; greedy >= 0; greedy--) {
        const char *how = greedy ? "greedy" : "seeded";
        sampled_trace off, on, lap;
        if (sampled_decode_trace(&ck, 0, greedy, 0, &off) != 0 ||
            sampled_decode_trace(&ck, 1, greedy, 0, &on) != 0 ||
            sampled_decode_trace(&ck, 1, greedy, 1, &lap) != 0)
            continue;
        /* Overlapped: the batches' forwards replayed from graphs that leave
         * the logits on the device, sampled after their masks were set:
         * the same ids as the masks set before the step. */
        int lap_first = -1;
        for (int i = 0; i < GS_IDS && lap_first < 0; i++)
            if (lap.ids[i] != on.ids[i])
                lap_first = i;
        CHECK_MSG(lap.n_ids == GS_IDS && lap_first < 0, "%s: overlapped id %d is %d, not %d",
                  how, lap_first, lap_first < 0 ? 0 : lap.ids[lap_first],
                  lap_first < 0 ? 0 : on.ids[lap_first]);
        /* the batches: a warm-up and a capture per shape, replays after */
        CHECK_MSG(lap.replays - lap.sampled_replays >= GS_BATCH - 4 && lap.abandoned == 0,
                  "%s: %" PRIu64 " of %" PRIu64 " replays left the logits on the device, "
                  "%" PRIu64 " abandoned", how, lap.replays - lap.sampled_replays,
                  lap.replays, lap.abandoned);
        CHECK_MSG(off.n_ids == GS_IDS && on.n_ids == GS_IDS, "%s: %d and %d ids", how,
                  off.n_ids, on.n_ids);
        int first = -1;
        for (int i = 0; i < GS_IDS && first < 0; i++)
            if (off.ids[i] != on.ids[i])
                first = i;
        CHECK_MSG(first < 0, "%s: graphed id %d is %d, eager %d", how, first,
                  first < 0 ? 0 : on.ids[first], first < 0 ? 0 : off.ids[first]);
        CHECK_MSG(off.replays == 0, "%s: %" PRIu64 " replays with graphs off", how, off.replays);
        /* sequence 0 alone: one warm-up, then replays; the batches: a
         * warm-up per shape; sequence 0 again: captured again, replayed */
        CHECK_MSG(on.sampled_replays == on.replays && on.sampled_replays >= GS_ALONE + 8,
                  "%s: %" PRIu64 " of %" PRIu64 " replays sampled", how, on.sampled_replays,
                  on.replays);
        CHECK_MSG(on.abandoned == 0 && on.captures >= 4, "%s: %" PRIu64 " captures, %" PRIu64
                  " abandoned", how, on.captures, on.abandoned);
    }
    checkpoint_close(&ck);
}

/* Greedy ids of a prompt's continuation, and the last logits. */
static void greedy_run(engine *e, int n, int32_t *ids, float *last)
{
    memra_err err = {{0}};
    int64_t vocab = engine_config(e)->n_vocab;
    engine_seq *s;
    engine_seq_new(e, &s, &err);
    int32_t t = 1;
    for (int i = 0; i < n; i++) {
        if (engine_forward(e, s, &t, 1, last, 0, &err) != 0) {
            CHECK_MSG(0, "%s", err.msg);
            break;
        }
        int best = 0;
        for (int64_t j = 1; j < vocab; j++)
            if (last[j] > last[best])
                best = (int)j;
        ids[i] = t = best;
    }
    engine_seq_free(s);
}

static void test_cuda_kv_types(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    engine *d = load(&ck, BK_CUDA, 0, KV_DEFAULT, 1);
    if (d)
        CHECK(engine_kv_type(d) == KV_BF16);
    engine_free(d);
    /* q8_0 and bf16 KV: CUDA against the CPU with the same KV type, which
     * stores the same bytes, so the logits differ only by the kernels'
     * reduction order. */
    const kv_type types[2] = {KV_Q8_0, KV_BF16};
    for (int ti = 0; ti < 2; ti++) {
        engine *c = load(&ck, BK_CPU_REF, 0, types[ti], 1), *g = load(&ck, BK_CUDA, 0, types[ti], 1);
        if (!c || !g) {
            engine_free(c);
            engine_free(g);
            continue;
        }
        enum { N = 20 };
        int64_t vocab = engine_config(c)->n_vocab;
        float *lc = malloc((size_t)vocab * 4), *lg = malloc((size_t)vocab * 4);
        int32_t ic[N], ig[N];
        greedy_run(c, N, ic, lc);
        greedy_run(g, N, ig, lg);
        double md = 0, mr = 0;
        for (int64_t j = 0; j < vocab; j++) {
            md = fmax(md, fabs((double)lc[j] - lg[j]));
            mr = fmax(mr, fabs((double)lc[j]));
        }
        CHECK_MSG(memcmp(ic, ig, sizeof ic) == 0, "%s KV: greedy ids differ", kv_type_name(types[ti]));
        CHECK_MSG(md <= 1e-3 * mr, "%s KV: logits differ by %g (max %g)", kv_type_name(types[ti]),
                  md, mr);
        free(lc);
        free(lg);
        engine_free(c);
        engine_free(g);
    }
    checkpoint_close(&ck);
}

typedef struct {
    engine *e;
    int32_t ids[8];
    float *last;
    int switch_device; /* first select device 0, as unrelated code on the thread might */
} thread_run;

static void *drive(void *arg)
{
    thread_run *r = arg;
#if MEMRA_CUDA
    if (r->switch_device)
        cudaSetDevice(0);
#endif
    greedy_run(r->e, 8, r->ids, r->last);
    return NULL;
}

static void test_cuda_device_selection(void)
{
    if (skip_without_gpu())
        return;
    int n = n_devices();
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    /* An index past the last: refused, naming how many devices exist. */
    engine_opts o;
    engine_opts_default(&o);
    o.backend = BK_CUDA;
    o.device = n;
    engine *bad = NULL;
    memra_err err = {{0}};
    char want[64];
    snprintf(want, sizeof want, "(%d device%s found)", n, n == 1 ? "" : "s");
    CHECK(engine_load(&ck, &o, &bad, &err) != 0 && bad == NULL);
    CHECK_MSG(strstr(err.msg, "CUDA device") && strstr(err.msg, want), "%s", err.msg);
    /* The last device, driven from threads that never selected it. */
    engine *e = load(&ck, BK_CUDA, n - 1, KV_F32, 1);
    if (e) {
        int64_t vocab = engine_config(e)->n_vocab;
        thread_run main_run = {e, {0}, malloc((size_t)vocab * 4), 0};
        drive(&main_run);
        for (int sw = 0; sw < 2; sw++) {
            thread_run r = {e, {0}, malloc((size_t)vocab * 4), sw};
            pthread_t th;
            CHECK(pthread_create(&th, NULL, drive, &r) == 0);
            pthread_join(th, NULL);
            CHECK_MSG(memcmp(r.ids, main_run.ids, sizeof r.ids) == 0,
                      "device %d from a new thread%s: other ids", n - 1,
                      sw ? " on device 0" : "");
            CHECK(memcmp(r.last, main_run.last, (size_t)vocab * 4) == 0);
            free(r.last);
        }
#if MEMRA_CUDA
        cudaSetDevice(0); /* this thread too, then free from it */
#endif
        free(main_run.last);
        engine_free(e);
    }
    if (n > 1)
        printf("# %s: engine on device %d of %d\n", test_current, n - 1, n);
    checkpoint_close(&ck);
}

/* ---- chains of greedy steps (engine_forward_chain_sample) ---- */

enum { CH_ROUNDS = 28, CH_IDS = CH_ROUNDS * 8 };

typedef struct {
    int32_t ids[CH_IDS];
    int n_ids;
    uint64_t chain_replays, captures, abandoned;
} chain_trace;

/* A drafter's rounds on one sequence: a chain of k = 2..8 steps (8, then
 * 2, 3, ... again, so each length repeats at other depths), then the
 * sequence cut back to keep j of them, and the next chain starts from a
 * token of its own. chained: engine_forward_chain_sample, else the same
 * steps by engine_forward_sample. With a trimmed head of the ids below
 * half the vocabulary, and logit_bias on a few ids; halfway through, the
 * whole head's rounds take a sampler whose bias list (297 more ids, +30
 * each: other tokens win) outgrows the device's staging buffers, which
 * move, so the chains' graphs are captured again. */
static int chain_rounds(const checkpoint *ck, int graphs, int chained, int trimmed,
                        chain_trace *t)
{
    memset(t, 0, sizeof *t);
    setenv("MEMRA_CUDA_GRAPHS", graphs ? "1" : "0", 1);
    engine *e = load(ck, BK_CUDA, 0, KV_F32, 1);
    unsetenv("MEMRA_CUDA_GRAPHS");
    if (!e)
        return -1;
    memra_err err = {{0}};
    int32_t vocab = (int32_t)engine_config(e)->n_vocab;
    sampler_params p = sampler_params_default();
    p.temperature = 0.0;
    sampler_logit_bias lb[300] = {{7, 2.5f}, {11, -INFINITY}, {(int32_t)(vocab / 3), 1.0f}};
    for (int j = 3; j < 300; j++) { /* distinct ids from 12 on, past the three */
        int32_t id = 12 + j - 3;
        lb[j] = (sampler_logit_bias){id >= vocab / 3 ? id + 1 : id, 30.0f};
    }
    p.logit_bias = lb;
    p.n_logit_bias = 3;
    sampler *smp = sampler_new(&p, vocab, &err);
    engine_seq *q = NULL;
    model_head *head = NULL;
    int ok = smp && engine_seq_new(e, &q, &err) == 0;
    if (ok && trimmed) {
        int32_t *ids = malloc((size_t)vocab / 2 * sizeof *ids);
        for (int32_t i = 0; i < vocab / 2; i++)
            ids[i] = vocab / 2 - 1 - i; /* rank order, not id order */
        ok = engine_head_new(e, ids, vocab / 2, &head, &err) == 0;
        free(ids);
        engine_use_head(e, head);
    }
    const int32_t prompt[5] = {1, 42, 7, 300 % vocab, 9};
    int32_t tok = -1;
    ok = ok && engine_forward_sample(e, q, prompt, 5, smp, &tok, &err) == 0;
    for (int r = 0; ok && r < CH_ROUNDS; r++) {
        if (r == CH_ROUNDS / 2 && !trimmed) {
            sampler_free(smp);
            p.n_logit_bias = 300;
            smp = sampler_new(&p, vocab, &err);
            ok = smp != NULL;
        }
        int k = 2 + (r + 6) % 7;
        int32_t *ids = t->ids + t->n_ids;
        int64_t at = engine_seq_kv(q)->n_tokens;
        if (chained) {
            ok = engine_forward_chain_sample(e, q, tok, k, smp, ids, &err) == 0;
        } else {
            int32_t x = tok;
            for (int i = 0; ok && i < k; i++) {
                ok = engine_forward_sample(e, q, &x, 1, smp, &x, &err) == 0;
                ids[i] = x;
            }
        }
        t->n_ids += k;
        if (ok && engine_seq_kv(q)->n_tokens != at + k) {
            ok = 0;
            snprintf(err.msg, sizeof err.msg, "the sequence holds %" PRId64 " tokens, not %" PRId64,
                     engine_seq_kv(q)->n_tokens, at + k);
        }
        /* keep j of the k steps (the token and j - 1 drafts), go on from
         * a token the drafts did not give */
        int j = 1 + r % k;
        engine_seq_truncate(q, at + j);
        tok = (int32_t)((ids[j - 1] * 31 + r + 1) % vocab);
        /* below 64 positions: one attention bucket, one graph a length */
        if (engine_seq_kv(q)->n_tokens > 50)
            engine_seq_truncate(q, 6 + r % 5);
    }
    CHECK_MSG(ok, "chain rounds (graphs %s, %s%s): %s", graphs ? "on" : "off",
              chained ? "chained" : "step by step", trimmed ? ", trimmed head" : "", err.msg);
#if MEMRA_CUDA
    uint64_t replays;
    backend *bk = engine_model(e)->bk;
    backend_cuda_graph_stats(bk, &replays, &t->captures, &t->abandoned);
    t->chain_replays = backend_cuda_graph_chain_replays(bk);
#endif
    engine_use_head(e, NULL);
    if (head)
        engine_head_free(e, head);
    engine_seq_free(q);
    sampler_free(smp);
    engine_free(e);
    return ok ? 0 : -1;
}

/* On the CPU a chain (engine_forward_chain_sample) is the steps one at a
 * time: the same ids as engine_forward_sample, and a chain of 0 steps or
 * past the context is refused. */
static void test_cpu_chain_sampling(void)
{
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    engine *c = load(&ck, BK_CPU, 0, KV_F32, 2);
    if (c) {
        memra_err err = {{0}};
        sampler_params p = sampler_params_default();
        p.temperature = 0.0;
        sampler *smp = sampler_new(&p, (int32_t)engine_config(c)->n_vocab, &err);
        engine_seq *a = NULL, *b = NULL;
        CHECK(smp && engine_seq_new(c, &a, &err) == 0 && engine_seq_new(c, &b, &err) == 0);
        int32_t ids[6], x = 1;
        CHECK(engine_forward_chain_sample(c, a, 1, 6, smp, ids, &err) == 0);
        for (int i = 0; i < 6; i++) {
            CHECK(engine_forward_sample(c, b, &x, 1, smp, &x, &err) == 0);
            CHECK_MSG(x == ids[i], "cpu chain step %d: %d, one at a time %d", i, ids[i], x);
        }
        CHECK(engine_forward_chain_sample(c, a, 1, 0, smp, ids, &err) != 0 &&
              strstr(err.msg, "chain of 0 steps"));
        int32_t fill[125];
        for (int i = 0; i < 125; i++)
            fill[i] = (int32_t)(1 + (i * 7) % 200);
        engine_seq_reset(a);
        CHECK(engine_forward(c, a, fill, 125, NULL, 0, &err) == 0);
        err.msg[0] = 0;
        CHECK_MSG(engine_forward_chain_sample(c, a, 1, 6, smp, ids, &err) != 0 &&
                  strstr(err.msg, "context full"), "past the context: %s", err.msg);
        engine_seq_free(a);
        engine_seq_free(b);
        sampler_free(smp);
        engine_free(c);
    }
    checkpoint_close(&ck);
}

/* A chain of greedy steps recorded as one graph (the drafter's) gives the
 * ids and the sequence of the same steps run one at a time, eagerly:
 * token fed on the device, every length 2..8 warmed, captured and
 * replayed at several depths, with the whole head and a trimmed one. Most
 * chains must be replays. */
static void test_cuda_chain_sampling(void)
{
    if (skip_without_gpu())
        return;
    checkpoint ck;
    if (open_stories(&ck) != 0)
        return;
    for (int trimmed = 0; trimmed < 2; trimmed++) {
        const char *how = trimmed ? "trimmed head" : "whole head";
        chain_trace ref, on, off;
        /* chained with graphs off (the steps one at a time): the whole head only */
        if (chain_rounds(&ck, 0, 0, trimmed, &ref) != 0 ||
            chain_rounds(&ck, 1, 1, trimmed, &on) != 0 ||
            (trimmed ? (off = ref, 0) : chain_rounds(&ck, 0, 1, trimmed, &off)) != 0)
            continue;
        int first = -1;
        for (int i = 0; i < ref.n_ids && first < 0; i++)
            if (ref.ids[i] != on.ids[i] || ref.ids[i] != off.ids[i])
                first = i;
        CHECK_MSG(on.n_ids == ref.n_ids && off.n_ids == ref.n_ids && first < 0,
                  "%s: id %d is %d chained in a graph, %d chained eagerly, %d one at a time",
                  how, first, first < 0 ? 0 : on.ids[first], first < 0 ? 0 : off.ids[first],
                  first < 0 ? 0 : ref.ids[first]);
        /* 7 lengths, 4 chains each: a warm-up, a capture, two replays
         * (the whole head: one, and a capture after the buffers moved) */
        CHECK_MSG(on.chain_replays >= (trimmed ? CH_ROUNDS / 2 : CH_ROUNDS / 4) &&
                      on.abandoned == 0,
                  "%s: %" PRIu64 " of %d chains replayed, %" PRIu64 " captures abandoned", how,
                  on.chain_replays, CH_ROUNDS, on.abandoned);
        CHECK_MSG(off.chain_replays == 0, "%s: %" PRIu64 " chains replayed with graphs off",
                  how, off.chain_replays);

    }
    checkpoint_close(&ck);
}

TEST_MAIN(TEST_CASE(test_cpu_sampling), TEST_CASE(test_cuda_sampling),
          TEST_CASE(test_cuda_graphed_sampling),
          TEST_CASE(test_cpu_chain_sampling), TEST_CASE(test_cuda_chain_sampling),
          TEST_CASE(test_cuda_kv_types), TEST_CASE(test_cuda_device_selection))
