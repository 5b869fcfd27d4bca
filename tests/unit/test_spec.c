/* Speculative decoding (lib/engine/spec*.c) and rank files
 * (lib/format/ranks.c): greedy output token-identical to plain greedy
 * decoding for K = 1..8 with memra-tiny-draft drafting for memra-tiny,
 * and for K = 1, 3, 8 with it trimmed and with the n-gram drafter; the
 * KV rollback; the
 * rejection sampling's output distribution, measured over many seeded
 * draws on a tiny vocabulary; seeded sampled runs reproducible; the rank
 * file's round trip and its exact bytes. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mapfile.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/spec.h"
#include "format/ranks.h"
#include "model/checkpoint.h"
#include "test.h"

#define TINY "models/memra-tiny.gguf"
#define TINY_DRAFT "models/memra-tiny-draft.gguf"

/* The pair every model test shares, loaded once. */
static checkpoint ck_t, ck_d;
static engine *e_t, *e_d;
static tokenizer *tok_t, *tok_d;
static int pair_state; /* 0 not tried, 1 loaded, -1 failed */

static engine *load(const checkpoint *ck)
{
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 2;
    o.n_ctx = 256;
    engine *e = NULL;
    memra_err err = {{0}};
    CHECK_MSG(engine_load(ck, &o, &e, &err) == 0, "%s", err.msg);
    return e;
}

static int pair(void)
{
    if (pair_state)
        return pair_state > 0;
    pair_state = -1;
    memra_err err = {{0}};
    if (!test_need_file(TINY) || !test_need_file(TINY_DRAFT))
        return 0;
    if (checkpoint_open(TINY, &ck_t, &err) != 0 || checkpoint_open(TINY_DRAFT, &ck_d, &err) != 0 ||
        checkpoint_load_tokenizer(&ck_t, &tok_t, &err) != 0 ||
        checkpoint_load_tokenizer(&ck_d, &tok_d, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return 0;
    }
    if (!(e_t = load(&ck_t)) || !(e_d = load(&ck_d)))
        return 0;
    pair_state = 1;
    return 1;
}

static int32_t *encode(const char *text, size_t *n)
{
    int32_t *ids = NULL;
    memra_err err = {{0}};
    CHECK_MSG(tok_encode(tok_t, text, strlen(text), 1, 0, &ids, n, &err) == 0, "%s", err.msg);
    return ids;
}

static const char *prompt_text = "The state of the Union is";
enum { N_GEN = 24 };

/* Plain greedy decoding: generate(), the loop memra-gen runs. */
static void plain_greedy(const int32_t *prompt, size_t n_prompt, int n, gen_result *r)
{
    gen_params gp;
    gen_params_default(&gp);
    gp.n_predict = n;
    gp.sampling.temperature = 0;
    gp.ignore_eos = 1;
    memra_err err = {{0}};
    CHECK_MSG(generate(e_t, tok_t, prompt, n_prompt, &gp, NULL, NULL, r, &err) == 0, "%s",
              err.msg);
}

/* The first index where a and b differ, or -1 when equal. */
static long first_divergence(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t n = na < nb ? na : nb;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return na == nb ? -1 : (long)n;
}

/* Speculative greedy with drafter d equals plain greedy for each K of
 * ks; accepted[k] receives the drafts accepted with K = k. Returns the
 * sum. */
static uint64_t check_greedy_exact(spec_drafter *d, const char *what, const int *ks, int n_ks,
                                   uint64_t *accepted_k)
{
    size_t n_prompt;
    int32_t *prompt = encode(prompt_text, &n_prompt);
    gen_result plain;
    plain_greedy(prompt, n_prompt, N_GEN, &plain);
    uint64_t accepted = 0;
    for (int ki = 0; ki < n_ks; ki++) {
        int k = ks[ki];
        spec_params sp;
        spec_params_default(&sp);
        sp.k = k;
        sp.n_predict = N_GEN;
        sp.sampling.temperature = 0;
        sp.ignore_eos = 1;
        spec_result r;
        memra_err err = {{0}};
        if (spec_generate(e_t, tok_t, d, prompt, n_prompt, &sp, &r, &err) != 0) {
            CHECK_MSG(0, "%s K=%d: %s", what, k, err.msg);
            continue;
        }
        long div = first_divergence(plain.tokens, plain.n_tokens, r.tokens, r.n_tokens);
        CHECK_MSG(div < 0, "%s K=%d: first divergence at token %ld of %zu", what, k, div,
                  plain.n_tokens);
        CHECK(r.n_tokens == N_GEN);
        CHECK(r.accepted <= r.drafted && r.drafted <= (uint64_t)k * r.rounds);
        /* every emitted token after the first is an accepted draft or
         * one token of a round */
        CHECK_MSG(r.accepted + r.rounds >= N_GEN - 1, "%s K=%d: %llu accepted + %llu rounds",
                  what, k, (unsigned long long)r.accepted, (unsigned long long)r.rounds);
        accepted += r.accepted;
        if (accepted_k)
            accepted_k[k] = r.accepted;
        spec_result_free(&r);
    }
    gen_result_free(&plain);
    free(prompt);
    return accepted;
}

/* Every K for the draft model; the other drafters run a spread of them
 * (the sanitizer build runs these models slowly). */
static const int all_ks[] = {1, 2, 3, 4, 5, 6, 7, 8}, some_ks[] = {1, 3, 8};
static uint64_t untrimmed_accepted[SPEC_K_MAX + 1]; /* by K, for the trimmed head to match */

static void test_greedy_draft_model_exact(void)
{
    if (!pair())
        return;
    spec_drafter *d;
    memra_err err = {{0}};
    CHECK_MSG(spec_check_vocab(tok_t, tok_d, TINY_DRAFT, &err) == 0, "%s", err.msg);
    if (spec_drafter_model_new(e_d, (int32_t)tok_vocab_size(tok_t), NULL, &d, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    uint64_t acc = check_greedy_exact(d, "draft model", all_ks, 8, untrimmed_accepted);
    CHECK_MSG(acc > 0, "the draft model was never accepted");
    spec_drafter_free(d);
}

/* A trim changes what the drafter may propose, never the output: with
 * only 64 ids allowed (a table that leaves out most of the output) the
 * tokens stay plain greedy's. */
static void test_greedy_trimmed_exact(void)
{
    if (!pair())
        return;
    int32_t d2t[64];
    for (int i = 0; i < 64; i++)
        d2t[i] = (int32_t)(4000 - 61 * i); /* arbitrary distinct ids */
    spec_drafter *d, *d2;
    spec_trim *trim;
    memra_err err = {{0}};
    if (spec_trim_new(e_d, 4096, d2t, 64, &trim, &err) != 0 ||
        spec_drafter_model_new(e_d, 4096, trim, &d, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    check_greedy_exact(d, "trimmed draft (64 arbitrary ids)", some_ks, 3, NULL);
    spec_drafter_free(d);
    /* One head serves several drafters (a server's sessions), one after
     * another on its engine: the second drafts as exactly. */
    if (spec_drafter_model_new(e_d, 4096, trim, &d, &err) != 0 ||
        spec_drafter_model_new(e_d, 4096, trim, &d2, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        spec_trim_free(trim);
        return;
    }
    spec_drafter_free(d);
    check_greedy_exact(d2, "trimmed draft, a second drafter on the shared head", some_ks, 3, NULL);
    spec_drafter_free(d2);
    /* a head for another allowed count is refused */
    CHECK(spec_drafter_model_new(e_d, 1000, trim, &d, &err) == -1 && strstr(err.msg, "allowed"));
    spec_trim_free(trim);

    /* The full vocabulary as the trim: the trimmed head computes every
     * row itself, and drafts as the untrimmed model does. */
    int32_t *all = malloc(4096 * sizeof *all);
    for (int i = 0; i < 4096; i++)
        all[i] = 4095 - i;
    if (spec_trim_new(e_d, 4096, all, 4096, &trim, &err) != 0 ||
        spec_drafter_model_new(e_d, 4096, trim, &d, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        free(all);
        return;
    }
    /* The trimmed head gives each id the full head's logit (the same op
     * on the same row), so it drafts exactly as the untrimmed model: the
     * same acceptance at every K. */
    uint64_t by_k[SPEC_K_MAX + 1] = {0};
    check_greedy_exact(d, "trimmed draft (every id)", some_ks, 3, by_k);
    for (int i = 0; i < 3; i++) {
        uint64_t a = by_k[some_ks[i]], b = untrimmed_accepted[some_ks[i]];
        CHECK_MSG(b > 0 && a == b,
                  "K=%d: every-id trim accepted %llu, the untrimmed head %llu", some_ks[i],
                  (unsigned long long)a, (unsigned long long)b);
    }
    spec_drafter_free(d);
    spec_trim_free(trim);
    free(all);

    /* a table the model cannot use */
    int32_t bad[2] = {1, 5000};
    CHECK(spec_trim_new(e_d, 4096, bad, 2, &trim, &err) == -1 && strstr(err.msg, "5000") && !trim);
}

/* A trimmed head's logits: each kept id's are the full head's bits, every
 * other id's -inf; a head of repeated or unknown ids is refused. */
static void test_trimmed_head_logits(void)
{
    if (!pair())
        return;
    memra_err err = {{0}};
    const int64_t nv = engine_config(e_d)->n_vocab;
    enum { N_KEEP = 100 };
    int32_t ids[N_KEEP];
    for (int j = 0; j < N_KEEP; j++)
        ids[j] = (int32_t)((j * 389 + 17) % nv); /* distinct: 389 is prime to the sizes here */
    model_head *h = NULL;
    if (engine_head_new(e_d, ids, N_KEEP, &h, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        return;
    }
    size_t n;
    int32_t *prompt = encode(prompt_text, &n);
    float *full = malloc((size_t)nv * sizeof *full), *trim = malloc((size_t)nv * sizeof *trim);
    engine_seq *a, *b;
    CHECK(engine_seq_new(e_d, &a, &err) == 0 && engine_seq_new(e_d, &b, &err) == 0);
    CHECK_MSG(engine_forward(e_d, a, prompt, (int)n, full, 0, &err) == 0, "%s", err.msg);
    engine_use_head(e_d, h);
    CHECK_MSG(engine_forward(e_d, b, prompt, (int)n, trim, 0, &err) == 0, "%s", err.msg);
    engine_use_head(e_d, NULL);
    int kept = 0, bad = 0;
    for (int64_t i = 0; i < nv; i++) {
        int in = 0;
        for (int j = 0; j < N_KEEP; j++)
            in |= ids[j] == i;
        kept += in;
        if (in ? memcmp(&full[i], &trim[i], sizeof *full) != 0 : !(isinf(trim[i]) && trim[i] < 0))
            bad++;
    }
    CHECK_MSG(kept == N_KEEP && bad == 0, "%d of %lld logits differ from the full head's", bad,
              (long long)nv);
    engine_seq_free(a);
    engine_seq_free(b);
    engine_head_free(e_d, h);
    free(full);
    free(trim);
    free(prompt);

    int32_t twice[3] = {5, 9, 5}, outside[2] = {1, (int32_t)nv};
    CHECK(engine_head_new(e_d, twice, 3, &h, &err) == -1 && strstr(err.msg, "twice") && !h);
    CHECK(engine_head_new(e_d, outside, 2, &h, &err) == -1 && strstr(err.msg, "outside") && !h);
}

static void test_greedy_ngram_exact(void)
{
    if (!pair())
        return;
    spec_drafter *d;
    memra_err err = {{0}};
    CHECK(spec_drafter_ngram_new(1, 3, &d, &err) == 0);
    uint64_t acc = check_greedy_exact(d, "n-gram", some_ks, 3, NULL);
    CHECK_MSG(acc > 0, "the n-gram drafter was never accepted");
    spec_drafter_free(d);
    CHECK(spec_drafter_ngram_new(0, 3, &d, &err) == -1 && strstr(err.msg, "n-gram"));
    CHECK(spec_drafter_ngram_new(3, 2, &d, &err) == -1);
}

/* Prompt lookup proposes what followed the latest earlier occurrence of
 * the longest matching tail. */
static void test_ngram_proposals(void)
{
    spec_drafter *d;
    memra_err err = {{0}};
    CHECK(spec_drafter_ngram_new(1, 3, &d, &err) == 0);
    spec_draft out;
    spec_rng r = {1, 0};
    /* ... 1 2 3 9 9 | 1 2 3 7 8 | 1 2 3: the tail 1 2 3 last occurred
     * before 7 8 (and the context after it follows) */
    int32_t ctx[] = {1, 2, 3, 9, 9, 1, 2, 3, 7, 8, 1, 2, 3};
    CHECK(d->propose(d, ctx, 13, 4, &r, &out, &err) == 0);
    CHECK(out.n == 4 && out.tokens[0] == 7 && out.tokens[1] == 8 && out.tokens[2] == 1 &&
          out.tokens[3] == 2);
    CHECK(out.q[0].n == 1 && out.q[0].ids[0] == 7 && out.q[0].probs[0] == 1.0);
    /* the continuation ends with the context: in 9 9 1 2 3 9 only the
     * tail "9" occurred before, latest at index 1, followed by 1 2 3 9 */
    int32_t end[] = {9, 9, 1, 2, 3, 9};
    CHECK(d->propose(d, end, 6, 8, &r, &out, &err) == 0);
    CHECK(out.n == 4 && out.tokens[0] == 1 && out.tokens[3] == 9);
    CHECK(d->propose(d, ctx, 13, 1, &r, &out, &err) == 0 && out.n == 1 && out.tokens[0] == 7);
    /* no earlier occurrence of anything: nothing proposed */
    int32_t fresh[] = {4, 5, 6};
    CHECK(d->propose(d, fresh, 3, 4, &r, &out, &err) == 0 && out.n == 0);
    /* a run of one token continues itself */
    int32_t run[] = {5, 5, 5};
    CHECK(d->propose(d, run, 3, 4, &r, &out, &err) == 0 && out.n >= 1 && out.tokens[0] == 5);
    CHECK(r.n == 0); /* a deterministic drafter draws nothing */
    spec_drafter_free(d);
}

/* Logits after a rollback (engine_seq_truncate) are those of a sequence
 * that never ran the dropped tokens, bit for bit. */
static void test_kv_rollback(void)
{
    if (!pair())
        return;
    size_t n_prompt;
    int32_t *prompt = encode(prompt_text, &n_prompt);
    size_t v = 4096;
    float *a = malloc(4 * v * sizeof *a), *b = malloc(4 * v * sizeof *b);
    engine_seq *s1, *s2;
    memra_err err = {{0}};
    CHECK(engine_seq_new(e_t, &s1, &err) == 0 && engine_seq_new(e_t, &s2, &err) == 0);
    int32_t wrong[5] = {11, 22, 33, 44, 55}, right[4] = {100, 200, 300, 400};
    CHECK(engine_forward(e_t, s1, prompt, (int)n_prompt, NULL, 0, &err) == 0);
    CHECK(engine_forward(e_t, s1, wrong, 5, NULL, 0, &err) == 0);
    engine_seq_truncate(s1, (int64_t)n_prompt + 1); /* keep wrong[0] */
    CHECK(engine_seq_pos(s1) == (int64_t)n_prompt + 1);
    CHECK(engine_forward(e_t, s1, right, 4, a, 1, &err) == 0);
    CHECK(engine_forward(e_t, s2, prompt, (int)n_prompt, NULL, 0, &err) == 0);
    CHECK(engine_forward(e_t, s2, wrong, 1, NULL, 0, &err) == 0);
    CHECK(engine_forward(e_t, s2, right, 4, b, 1, &err) == 0);
    CHECK(memcmp(a, b, 4 * v * sizeof *a) == 0);
    /* and a fresh run of one row at a time gives the same rows: a
     * verify forward of K+1 rows is K+1 decode steps */
    engine_seq_reset(s2);
    CHECK(engine_forward(e_t, s2, prompt, (int)n_prompt, NULL, 0, &err) == 0);
    CHECK(engine_forward(e_t, s2, wrong, 1, NULL, 0, &err) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(engine_forward(e_t, s2, &right[i], 1, b + (size_t)i * v, 0, &err) == 0);
    CHECK(memcmp(a, b, 4 * v * sizeof *a) == 0);
    engine_seq_free(s1);
    engine_seq_free(s2);
    free(a);
    free(b);
    free(prompt);
}

/* What a greedy round verifies with (engine_forward_rows_sample): each
 * row's token is the argmax (lowest id on ties) of the row's logits as
 * engine_forward_rows gives them, for rows of two sequences in one step;
 * a bad id is refused changing nothing. */
static void test_rows_sampled(void)
{
    if (!pair())
        return;
    size_t n_prompt;
    int32_t *prompt = encode(prompt_text, &n_prompt);
    int64_t v = engine_config(e_t)->n_vocab;
    float *logits = malloc(5 * (size_t)v * sizeof *logits);
    engine_seq *s[2];
    memra_err err = {{0}}, row_errs[5];
    sampler_params sp = sampler_params_default();
    sp.temperature = 0;
    sampler *g = sampler_new(&sp, (int32_t)v, &err);
    CHECK(g && engine_seq_new(e_t, &s[0], &err) == 0 && engine_seq_new(e_t, &s[1], &err) == 0);
    CHECK(engine_forward(e_t, s[0], prompt, (int)n_prompt, NULL, 0, &err) == 0);
    CHECK(engine_forward(e_t, s[1], prompt, 3, NULL, 0, &err) == 0);
    int32_t a[3] = {100, 200, 300}, b[2] = {7, 9}, ids[5];
    const int32_t *toks[2] = {a, b};
    int n[2] = {3, 2};
    sampler *smp[5] = {g, g, g, g, g};
    int64_t p0 = engine_seq_pos(s[0]), p1 = engine_seq_pos(s[1]);
    CHECK(engine_forward_rows(e_t, s, toks, n, 2, logits, &err) == 0);
    engine_seq_truncate(s[0], p0);
    engine_seq_truncate(s[1], p1);
    CHECK(engine_forward_rows_sample(e_t, s, toks, n, 2, smp, ids, row_errs, &err) == 0);
    for (int r = 0; r < 5; r++) {
        int32_t best = 0;
        for (int64_t i = 1; i < v; i++)
            if (logits[(size_t)r * (size_t)v + (size_t)i] > logits[(size_t)r * (size_t)v + (size_t)best])
                best = (int32_t)i;
        CHECK_MSG(ids[r] == best, "row %d: sampled %d, argmax %d", r, (int)ids[r], (int)best);
    }
    CHECK(engine_seq_pos(s[0]) == p0 + 3 && engine_seq_pos(s[1]) == p1 + 2);
    int32_t bad[1] = {(int32_t)v};
    const int32_t *btoks[1] = {bad};
    int bn[1] = {1};
    CHECK(engine_forward_rows_sample(e_t, s, btoks, bn, 1, smp, ids, row_errs, &err) == -1 &&
          strstr(err.msg, "out of range") && engine_seq_pos(s[0]) == p0 + 3);
    sampler_free(g);
    engine_seq_free(s[0]);
    engine_seq_free(s[1]);
    free(logits);
    free(prompt);
}

/* Several sequences' rounds in shared steps (spec_rounds): each row's
 * logits are the bytes its round gives alone (spec_round), and rounds
 * to the end give each sequence plain greedy decoding's tokens, with a
 * draft model drafting for one and the n-gram drafter for the others. */
static void test_rounds_batched(void)
{
    if (!pair())
        return;
    enum { NJ = 3, K = 4 };
    static const char *const texts[NJ] = {"The state of the Union is",
                                          "the cat and the dog and the cat and the",
                                          "One, two, three, one, two, three, one,"};
    engine_opts o;
    engine_opts_default(&o);
    o.n_threads = 2;
    o.n_ctx = 256;
    o.n_seqs = NJ;
    engine *e = NULL, *ed = NULL;
    memra_err err = {{0}};
    CHECK_MSG(engine_load(&ck_t, &o, &e, &err) == 0 && engine_load(&ck_d, &o, &ed, &err) == 0,
              "%s", err.msg);
    if (!e || !ed)
        return;
    size_t vocab = (size_t)engine_config(e)->n_vocab;
    int32_t *prompt[NJ], *ctx[NJ];
    size_t n_prompt[NJ];
    int64_t n[NJ];
    engine_seq *seq[NJ];
    spec_drafter *d[NJ];
    sampler *smp[NJ];
    spec_rng rng[NJ];
    float *raw[NJ], *raw1 = malloc((SPEC_K_MAX + 1) * vocab * sizeof(float));
    float *logits = malloc((size_t)NJ * (SPEC_K_MAX + 1) * vocab * sizeof(float));
    sampler_params sp = sampler_params_default();
    sp.temperature = 0;
    spec_scratch scratch = {0};
    for (int j = 0; j < NJ; j++) {
        prompt[j] = encode(texts[j], &n_prompt[j]);
        ctx[j] = malloc(256 * sizeof(int32_t));
        memcpy(ctx[j], prompt[j], n_prompt[j] * sizeof(int32_t));
        n[j] = (int64_t)n_prompt[j];
        CHECK(engine_seq_new(e, &seq[j], &err) == 0);
        CHECK(engine_forward(e, seq[j], prompt[j], (int)n_prompt[j] - 1, NULL, 0, &err) == 0);
        CHECK(j == 0 ? spec_drafter_model_new(ed, (int32_t)vocab, NULL, &d[j], &err) == 0
                     : spec_drafter_ngram_new(1, 3, &d[j], &err) == 0);
        CHECK(d[j]->begin(d[j], ctx[j], n[j], &sp, &err) == 0);
        smp[j] = gen_model_sampler(&sp, tok_t, (int32_t)vocab, &err);
        rng[j] = (spec_rng){1, 0};
        raw[j] = malloc((SPEC_K_MAX + 1) * vocab * sizeof(float));
    }
    /* the first round of the n-gram jobs together, then each alone from
     * the same state: the same drafts, the same rows, bit for bit */
    spec_round_job jobs[NJ];
    for (int j = 0; j < NJ; j++)
        jobs[j] = (spec_round_job){.seq = seq[j], .smp = smp[j], .d = d[j], .ctx = ctx[j],
                                   .n = n[j], .k = K, .rng = &rng[j], .raw = raw[j]};
    int steps = 0;
    CHECK(spec_rounds(e, jobs + 1, NJ - 1, &scratch, logits, NJ * (SPEC_K_MAX + 1), &steps) == 0);
    CHECK(steps == 1); /* both rounds' rows in one step */
    for (int j = 1; j < NJ; j++) {
        spec_round_result alone;
        CHECK(jobs[j].out.drafted > 0);
        engine_seq_truncate(seq[j], n[j] - 1);
        sampler_free(smp[j]);
        smp[j] = gen_model_sampler(&sp, tok_t, (int32_t)vocab, &err);
        CHECK(spec_round(e, seq[j], smp[j], d[j], ctx[j], n[j], K, &rng[j], &scratch, logits, raw1,
                         NULL, &alone, &err) == 0);
        CHECK(alone.n == jobs[j].out.n && alone.drafted == jobs[j].out.drafted &&
              memcmp(alone.tokens, jobs[j].out.tokens, (size_t)alone.n * sizeof(int32_t)) == 0);
        CHECK_MSG(memcmp(raw1, raw[j], (size_t)alone.n * vocab * sizeof(float)) == 0,
                  "job %d: a row's logits differ between its round alone and among others", j);
        for (int i = 0; i < alone.n; i++)
            ctx[j][n[j]++] = alone.tokens[i];
    }
    /* then rounds of all three to N_GEN tokens each */
    int done[NJ] = {0};
    for (int j = 1; j < NJ; j++)
        done[j] = jobs[j].out.n;
    for (int round = 0; round < 4 * N_GEN; round++) {
        int nj = 0, map[NJ];
        for (int j = 0; j < NJ; j++) {
            if (done[j] >= N_GEN)
                continue;
            int left = N_GEN - done[j];
            jobs[nj] = (spec_round_job){.seq = seq[j], .smp = smp[j], .d = d[j], .ctx = ctx[j],
                                        .n = n[j], .k = K < left - 1 ? K : left - 1,
                                        .rng = &rng[j]};
            map[nj++] = j;
        }
        if (nj == 0)
            break;
        CHECK(spec_rounds(e, jobs, nj, &scratch, logits, NJ * (SPEC_K_MAX + 1), NULL) == 0);
        for (int i = 0; i < nj; i++) {
            int j = map[i];
            CHECK_MSG(jobs[i].rc == 0, "job %d: %s", j, jobs[i].err.msg);
            for (int t = 0; t < jobs[i].out.n; t++)
                ctx[j][n[j]++] = jobs[i].out.tokens[t];
            done[j] += jobs[i].out.n;
        }
    }
    for (int j = 0; j < NJ; j++) {
        gen_result plain;
        plain_greedy(prompt[j], n_prompt[j], N_GEN, &plain);
        CHECK(done[j] == N_GEN);
        long div = first_divergence(plain.tokens, plain.n_tokens, ctx[j] + n_prompt[j],
                                    (size_t)done[j]);
        CHECK_MSG(div < 0, "sequence %d: rounds among others diverge from plain greedy at token %ld",
                  j, div);
        gen_result_free(&plain);
        spec_drafter_free(d[j]);
        sampler_free(smp[j]);
        engine_seq_free(seq[j]);
        free(prompt[j]);
        free(ctx[j]);
        free(raw[j]);
    }
    spec_scratch_free(&scratch);
    free(raw1);
    free(logits);
    engine_free(ed);
    engine_free(e);
}

/* Chi-square of counts[n] against probabilities p[n] over `draws`. */
static double chi_square(const long *counts, const double *p, int n, long draws)
{
    double x2 = 0;
    for (int i = 0; i < n; i++) {
        double e = p[i] * (double)draws;
        x2 += (counts[i] - e) * (counts[i] - e) / e;
    }
    return x2;
}

/* The rejection sampling's first emitted token is distributed as the
 * model's softmax, whatever the drafter's q: the empirical distribution
 * over 40,000 seeded draws on a vocabulary of 6 against p, by chi-square
 * (5 degrees of freedom; 20.52 is the 0.999 quantile). Fixed seeds make
 * the statistic a fixed number; a verifier that kept every draft (giving
 * q) or always resampled from p - q fails by orders of magnitude, which
 * the test checks too so that it can fail. */
static void test_sampled_distribution(void)
{
    enum { V = 6 };
    const long draws = 40000;
    float lp[V] = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f};
    float lq[V] = {0.0f, 2.5f, 0.5f, 1.0f, 0.0f, -2.0f};
    const double temp = 0.9;
    sampler_params sp = sampler_params_default();
    sp.temperature = temp;
    memra_err err = {{0}};
    sampler *s_p = sampler_new(&sp, V, &err), *s_q = sampler_new(&sp, V, &err);
    spec_dist p, q;
    CHECK(sampler_probs(s_p, lp, &p.ids, &p.probs, &p.n, &err) == 0 && p.n == V);
    CHECK(sampler_probs(s_q, lq, &q.ids, &q.probs, &q.n, &err) == 0 && q.n == V);
    /* p is the softmax at the temperature */
    double z = 0, soft[V];
    for (int i = 0; i < V; i++)
        z += exp((lp[i] - 2.0) / temp);
    for (int i = 0; i < V; i++) {
        soft[i] = exp((lp[i] - 2.0) / temp) / z;
        CHECK_MSG(fabs(p.probs[i] - soft[i]) < 1e-9, "p[%d] %g vs softmax %g", i, p.probs[i],
                  soft[i]);
    }
    spec_scratch scr = {0};
    long got[V] = {0}, kept[V] = {0}, resampled[V] = {0}, point[V] = {0};
    spec_rng r = {20261202, 0};
    long n_acc = 0;
    for (long t = 0; t < draws; t++) {
        int32_t x = spec_draw(&q, &r), repl = -1;
        int acc = spec_verify_token(&p, &q, x, &r, &scr, &repl);
        n_acc += acc;
        got[acc ? x : repl]++;
        kept[x]++;
        if (!acc)
            resampled[repl]++;
    }
    /* a deterministic drafter (q a point mass at token 1) */
    double one = 1.0;
    int32_t id1 = 1;
    spec_dist q1 = {&id1, &one, 1};
    for (long t = 0; t < draws; t++) {
        int32_t repl = -1;
        int acc = spec_verify_token(&p, &q1, 1, &r, &scr, &repl);
        point[acc ? 1 : repl]++;
    }
    double x2 = chi_square(got, soft, V, draws), x2_point = chi_square(point, soft, V, draws);
    CHECK_MSG(x2 < 20.52, "chi-square %.2f of the emitted tokens against p", x2);
    CHECK_MSG(x2_point < 20.52, "chi-square %.2f with a point-mass drafter", x2_point);
    /* the acceptance rate is sum min(p, q) */
    double accept = 0;
    for (int i = 0; i < V; i++)
        accept += fmin(p.probs[i], q.probs[i]);
    CHECK_MSG(fabs((double)n_acc / draws - accept) < 0.01, "acceptance %.4f, expected %.4f",
              (double)n_acc / draws, accept);
    /* the power of the test: the draft's own tokens are far from p */
    CHECK_MSG(chi_square(kept, soft, V, draws) > 1000, "chi-square of q against p is only %.1f",
              chi_square(kept, soft, V, draws));
    long n_res = draws - n_acc;
    CHECK(n_res > 1000 && chi_square(resampled, soft, V, n_res) > 1000);
    /* greedy: a point-mass p keeps exactly its token and draws nothing */
    sampler_params g = sampler_params_default();
    g.temperature = 0;
    sampler *s_g = sampler_new(&g, V, &err);
    spec_dist pg;
    float lg[V] = {0, 3, 3, 1, 0, 0}; /* a tie: the lower id wins */
    CHECK(sampler_probs(s_g, lg, &pg.ids, &pg.probs, &pg.n, &err) == 0 && pg.n == 1 &&
          pg.ids[0] == 1);
    spec_rng rg = {1, 0};
    int32_t repl = -1;
    CHECK(spec_verify_token(&pg, &q, 1, &rg, &scr, &repl) == 1);
    CHECK(spec_verify_token(&pg, &q, 2, &rg, &scr, &repl) == 0 && repl == 1 && rg.n == 0);
    sampler_free(s_g);
    spec_scratch_free(&scr);
    sampler_free(s_p);
    sampler_free(s_q);
}

/* A seeded sampled run is reproducible, accepts drafts, and another seed
 * gives other tokens. */
static void test_sampled_reproducible(void)
{
    if (!pair())
        return;
    size_t n_prompt;
    int32_t *prompt = encode(prompt_text, &n_prompt);
    spec_drafter *d;
    memra_err err = {{0}};
    if (spec_drafter_model_new(e_d, 4096, NULL, &d, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        free(prompt);
        return;
    }
    spec_params sp;
    spec_params_default(&sp);
    sp.k = 4;
    sp.n_predict = N_GEN;
    sp.sampling.temperature = 0.8;
    sp.sampling.seed = 7;
    sp.ignore_eos = 1;
    spec_result a, b, c;
    CHECK(spec_generate(e_t, tok_t, d, prompt, n_prompt, &sp, &a, &err) == 0);
    CHECK(spec_generate(e_t, tok_t, d, prompt, n_prompt, &sp, &b, &err) == 0);
    sp.sampling.seed = 8;
    CHECK(spec_generate(e_t, tok_t, d, prompt, n_prompt, &sp, &c, &err) == 0);
    CHECK(a.n_tokens == N_GEN && b.n_tokens == N_GEN && c.n_tokens == N_GEN);
    CHECK(first_divergence(a.tokens, a.n_tokens, b.tokens, b.n_tokens) < 0);
    CHECK(a.accepted == b.accepted && a.rounds == b.rounds);
    CHECK(first_divergence(a.tokens, a.n_tokens, c.tokens, c.n_tokens) >= 0);
    CHECK_MSG(a.accepted > 0, "nothing accepted at temperature 0.8");
    spec_result_free(&c);
    spec_result_free(&a);
    spec_result_free(&b);
    spec_drafter_free(d);
    free(prompt);
}

/* Penalties speculate exactly: each emitted token joins the history before
 * the next verify row, so greedy decoding with repetition, presence and
 * frequency penalties (the prompt counted, as memra-gen counts it; and
 * not) gives plain greedy's tokens with the penalties, for the draft model
 * and the n-gram drafter, at K = 1, 4, 8; and the penalties change the
 * tokens (the test would not see a history left out). */
static void test_greedy_penalties_exact(void)
{
    if (!pair())
        return;
    size_t n_prompt;
    int32_t *prompt = encode(prompt_text, &n_prompt);
    spec_drafter *dm, *ng;
    memra_err err = {{0}};
    if (spec_drafter_model_new(e_d, (int32_t)tok_vocab_size(tok_t), NULL, &dm, &err) != 0 ||
        spec_drafter_ngram_new(1, 3, &ng, &err) != 0) {
        CHECK_MSG(0, "%s", err.msg);
        free(prompt);
        return;
    }
    gen_result unpenalized;
    plain_greedy(prompt, n_prompt, N_GEN, &unpenalized);
    for (int with_prompt = 0; with_prompt < 2; with_prompt++) {
        gen_params gp;
        gen_params_default(&gp);
        gp.n_predict = N_GEN;
        gp.sampling.temperature = 0;
        gp.sampling.repetition_penalty = 1.3;
        gp.sampling.presence_penalty = 0.4;
        gp.sampling.frequency_penalty = 0.3;
        gp.sampling.penalty_last_n = 64;
        gp.penalize_prompt = with_prompt;
        gp.ignore_eos = 1;
        gen_result plain;
        if (generate(e_t, tok_t, prompt, n_prompt, &gp, NULL, NULL, &plain, &err) != 0) {
            CHECK_MSG(0, "%s", err.msg);
            continue;
        }
        CHECK_MSG(first_divergence(plain.tokens, plain.n_tokens, unpenalized.tokens,
                                   unpenalized.n_tokens) >= 0,
                  "the penalties changed nothing: the test cannot tell");
        spec_drafter *ds[2] = {dm, ng};
        static const int ks[3] = {1, 4, 8};
        for (int di = 0; di < 2; di++)
            for (int ki = 0; ki < 3; ki++) {
                spec_params sp;
                spec_params_default(&sp);
                sp.k = ks[ki];
                sp.n_predict = N_GEN;
                sp.sampling = gp.sampling;
                sp.penalize_prompt = with_prompt;
                sp.ignore_eos = 1;
                spec_result r;
                if (spec_generate(e_t, tok_t, ds[di], prompt, n_prompt, &sp, &r, &err) != 0) {
                    CHECK_MSG(0, "%s", err.msg);
                    continue;
                }
                long div = first_divergence(plain.tokens, plain.n_tokens, r.tokens, r.n_tokens);
                CHECK_MSG(div < 0, "%s K=%d, prompt %s: first divergence at token %ld",
                          di ? "n-gram" : "draft model", ks[ki],
                          with_prompt ? "penalized" : "not penalized", div);
                /* the draft model's drafts are verified, some accepted (a
                 * history of accepted drafts); the n-gram drafter finds
                 * little to propose in text the penalties keep from
                 * repeating */
                CHECK_MSG(r.rounds > 0 && (di || r.accepted > 0), "%s K=%d: %llu accepted",
                          di ? "n-gram" : "draft model", ks[ki],
                          (unsigned long long)r.accepted);
                spec_result_free(&r);
            }
        gen_result_free(&plain);
    }
    gen_result_free(&unpenalized);
    spec_drafter_free(dm);
    spec_drafter_free(ng);
    free(prompt);
}

/* A drafter of another vocabulary is refused, naming the difference. */
static void test_vocab_mismatch(void)
{
    if (!pair())
        return;
    char path[1024];
    snprintf(path, sizeof path, "models/stories260K.gguf");
    if (!test_need_file(path))
        return;
    checkpoint ck;
    tokenizer *t = NULL;
    memra_err err = {{0}};
    CHECK(checkpoint_open(path, &ck, &err) == 0 && checkpoint_load_tokenizer(&ck, &t, &err) == 0);
    CHECK(spec_check_vocab(tok_t, t, path, &err) == -1 && strstr(err.msg, "512") &&
          strstr(err.msg, "4096"));
    CHECK(spec_check_vocab(tok_t, tok_d, TINY_DRAFT, &err) == 0);
    tok_free(t);
    checkpoint_close(&ck);
}

static void test_ranks_from_counts(void)
{
    uint64_t counts[8] = {0, 5, 2, 5, 0, 9, 2, 0};
    int32_t d2t[8];
    ranks_from_counts(counts, 8, 8, d2t);
    /* 5 (9), 1 and 3 (5, lower id first), 2 and 6 (2), then unseen 0 4 7 */
    int32_t want[8] = {5, 1, 3, 2, 6, 0, 4, 7};
    CHECK(memcmp(d2t, want, sizeof want) == 0);
    ranks_from_counts(counts, 8, 3, d2t);
    CHECK(d2t[0] == 5 && d2t[1] == 1 && d2t[2] == 3);
    char *p = ranks_txt_path("out/r.gguf"), *q = ranks_txt_path("r.bin");
    CHECK(strcmp(p, "out/r.txt") == 0 && strcmp(q, "r.bin.txt") == 0);
    free(p);
    free(q);
}

/* The rank file's bytes, exactly as docs/SPECULATIVE.md and ranks.h
 * spell them, and the round trip. */
static void test_ranks_file_bytes(void)
{
    char path[1024], txt[1040];
    snprintf(path, sizeof path, "%s/test_spec_ranks.gguf", test_tmp_dir());
    snprintf(txt, sizeof txt, "%s/test_spec_ranks.txt", test_tmp_dir());
    int32_t d2t[3] = {5, 2, 7};
    memra_err err = {{0}};
    CHECK_MSG(ranks_write(path, d2t, 3, 10, &err) == 0, "%s", err.msg);
    uint8_t want[128];
    size_t n = 0;
#define PUT(p, len) (memcpy(want + n, (p), (len)), n += (len))
    uint32_t u32;
    uint64_t u64;
    PUT("GGUF", 4);
    u32 = 3, PUT(&u32, 4);
    u64 = 1, PUT(&u64, 8);
    u64 = 1, PUT(&u64, 8);
    u64 = 17, PUT(&u64, 8);
    PUT("memra.d2t.n_vocab", 17);
    u32 = 4, PUT(&u32, 4);
    u32 = 10, PUT(&u32, 4);
    u64 = 3, PUT(&u64, 8);
    PUT("d2t", 3);
    u32 = 1, PUT(&u32, 4);
    u64 = 3, PUT(&u64, 8);
    u32 = 26, PUT(&u32, 4);
    u64 = 0, PUT(&u64, 8);
    CHECK(n == 92);
    memset(want + n, 0, 4), n += 4;
    PUT(d2t, 12);
    memset(want + n, 0, 20), n += 20;
#undef PUT
    char *got;
    size_t len;
    CHECK(read_small_file(path, 1 << 20, &got, &len, &err) == 0);
    CHECK_MSG(len == 128 && n == 128, "%zu bytes", len);
    CHECK(len == n && memcmp(got, want, n) == 0);
    free(got);
    CHECK(read_small_file(txt, 1 << 20, &got, &len, &err) == 0);
    CHECK(len == 6 && memcmp(got, "5\n2\n7\n", 6) == 0);
    free(got);

    int32_t *back = NULL, nb = 0, nv = 0;
    CHECK_MSG(ranks_read(path, &back, &nb, &nv, &err) == 0, "%s", err.msg);
    CHECK(nb == 3 && nv == 10 && back && memcmp(back, d2t, sizeof d2t) == 0);
    free(back);

    /* what is refused */
    int32_t dup[3] = {5, 2, 5}, far[2] = {1, 10};
    CHECK(ranks_write(path, dup, 3, 10, &err) == -1 && strstr(err.msg, "twice"));
    CHECK(ranks_write(path, far, 2, 10, &err) == -1 && strstr(err.msg, "outside"));
    CHECK(ranks_write(path, d2t, 0, 10, &err) == -1);
    CHECK(ranks_read(TINY, &back, &nb, &nv, &err) == -1 && strstr(err.msg, "no tensor 'd2t'"));
    CHECK(ranks_read("no/such/file.gguf", &back, &nb, &nv, &err) == -1 &&
          strstr(err.msg, "no/such/file.gguf"));
    /* a rank file with a repeated id, written by hand */
    u32 = 5;
    memcpy(want + 100, &u32, 4); /* d2t becomes 5 5 7 */
    CHECK(write_file_atomic(path, want, 128, &err) == 0);
    CHECK(ranks_read(path, &back, &nb, &nv, &err) == -1 && strstr(err.msg, "twice"));
}

static void free_pair(void)
{
    engine_free(e_t);
    engine_free(e_d);
    if (tok_t)
        tok_free(tok_t);
    if (tok_d)
        tok_free(tok_d);
    if (pair_state) {
        checkpoint_close(&ck_t);
        checkpoint_close(&ck_d);
    }
}

TEST_MAIN(TEST_CASE(test_ranks_from_counts), TEST_CASE(test_ranks_file_bytes),
          TEST_CASE(test_ngram_proposals), TEST_CASE(test_sampled_distribution),
          TEST_CASE(test_kv_rollback), TEST_CASE(test_rows_sampled), TEST_CASE(test_rounds_batched),
          TEST_CASE(test_greedy_draft_model_exact),
          TEST_CASE(test_greedy_trimmed_exact), TEST_CASE(test_trimmed_head_logits), TEST_CASE(test_greedy_ngram_exact),
          TEST_CASE(test_sampled_reproducible), TEST_CASE(test_greedy_penalties_exact),
          TEST_CASE(test_vocab_mismatch),
          TEST_CLEANUP(free_pair))
