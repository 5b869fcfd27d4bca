#include "bench/bench.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/rng.h"
#include "core/strbuf.h"
#include "engine/sampler.h"
#include "grammar/gram_maskpool.h"

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void bench_stats_of(const double *samples, int n, bench_stats *out)
{
    MEMRA_ASSERT(n >= 1);
    double *s = xmalloc((size_t)n * sizeof *s);
    memcpy(s, samples, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += s[i];
    out->n = n;
    out->min = s[0];
    out->max = s[n - 1];
    out->median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
    out->mean = sum / n;
    free(s);
}

/* One program benchmarks one engine at a time, so the profiled engine is
 * the tool's setting rather than every measurement's parameter. */
static engine *profiled;

void bench_profile(engine *e) { profiled = e; }

int bench_repeat(bench_rep_fn fn, void *ctx, int warmup, int reps, bench_stats *out,
                 memra_err *err)
{
    if (reps < 1)
        return memra_fail(err, "bench: %d repetitions (need at least 1)", reps);
    double ms;
    for (int i = 0; i < warmup; i++)
        if (fn(ctx, &ms, err) != 0)
            return -1;
    double *samples = xmalloc((size_t)reps * sizeof *samples);
    for (int i = 0; i < reps; i++) {
        if (i == 0 && profiled)
            engine_profiler_range(profiled, 1);
        int rc = fn(ctx, &samples[i], err);
        if (i == 0 && profiled)
            engine_profiler_range(profiled, 0);
        if (rc != 0) {
            free(samples);
            return -1;
        }
    }
    bench_stats_of(samples, reps, out);
    free(samples);
    return 0;
}

/* ---- engine measurements ---- */

/* ---- constrained decode rows (bench_constrain) ---- */

static const gram_grammar *c_grammar;
static const gram_vocab *c_vocab;
static gram_maskpool *c_pool; /* a batch's masks on worker threads, as memra-serve's */

void bench_constrain(const gram_grammar *g, const gram_vocab *v)
{
    c_grammar = g && v ? g : NULL;
    c_vocab = g && v ? v : NULL;
    if (c_grammar && !c_pool) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        c_pool = gram_maskpool_new(n > 16 ? 16 : n > 0 ? (int)n : 1);
    }
}

/* One sequence's grammar: its matcher and its mask's words. */
typedef struct {
    gram_state *st;
    uint32_t *mask;
} seq_grammar;

static seq_grammar *grammars_new(int n)
{
    if (!c_grammar)
        return NULL;
    seq_grammar *g = xcalloc((size_t)n, sizeof *g);
    for (int i = 0; i < n; i++)
        g[i].mask = xmalloc(gram_mask_words(c_vocab) * sizeof *g[i].mask);
    return g;
}

static void grammars_free(seq_grammar *g, int n)
{
    for (int i = 0; g && i < n; i++) {
        gram_state_free(g[i].st);
        free(g[i].mask);
    }
    free(g);
}

/* A repetition starts every grammar at its beginning. */
static void grammars_restart(seq_grammar *g, int n)
{
    for (int i = 0; g && i < n; i++) {
        gram_state_free(g[i].st);
        g[i].st = gram_state_new(c_grammar);
    }
}

/* Before a step: the sequence's allowed tokens become its sampler's mask
 * (a finished grammar starts over). */
static int grammar_before(seq_grammar *g, sampler *s, memra_err *err)
{
    if (gram_mask(g->st, c_vocab, g->mask) == 0) {
        gram_state_free(g->st);
        g->st = gram_state_new(c_grammar);
        if (gram_mask(g->st, c_vocab, g->mask) == 0)
            return memra_fail(err, "bench: the grammar allows no first token in this "
                                   "vocabulary");
    }
    sampler_set_mask(s, g->mask, gram_vocab_size(c_vocab));
    return 0;
}

/* Before a batched step: every sequence's mask, computed together on the
 * pool's threads (those whose grammar finished start over, serially). */
static int grammars_before_all(seq_grammar *g, sampler *const *smp, int n, memra_err *err)
{
    gram_state *st[256];
    uint32_t *mk[256];
    int cnt[256];
    for (int k0 = 0; k0 < n; k0 += 256) {
        int m = n - k0 < 256 ? n - k0 : 256;
        for (int k = 0; k < m; k++) {
            st[k] = g[k0 + k].st;
            mk[k] = g[k0 + k].mask;
        }
        gram_maskpool_masks(c_pool, st, c_vocab, mk, cnt, m);
        for (int k = 0; k < m; k++) {
            if (cnt[k] == 0) {
                if (grammar_before(&g[k0 + k], smp[k0 + k], err) != 0)
                    return -1;
                continue;
            }
            sampler_set_mask(smp[k0 + k], g[k0 + k].mask, gram_vocab_size(c_vocab));
        }
    }
    return 0;
}

/* The batch's masks as the engine's overlap work: computed while the
 * step's forward runs on the device, as memra-serve does. */
typedef struct {
    seq_grammar *g;
    sampler *const *smp;
    int n, rc;
    memra_err err;
} masks_job;

static void grammars_overlap(void *ctx)
{
    masks_job *j = ctx;
    j->rc = grammars_before_all(j->g, j->smp, j->n, &j->err);
}

/* After a step: the grammar takes the sampled token. */
static int grammar_after(seq_grammar *g, int32_t id, memra_err *err)
{
    if (gram_accept_token(g->st, c_vocab, id, err) != 0)
        return memra_wrap(err, "bench: the grammar refused the token %d sampled under its "
                               "mask", id);
    return 0;
}

typedef struct {
    engine *e;
    engine_seq *s;
    int32_t *tokens;
    int n_prompt;
    int64_t depth;
    int n_gen;
    float *logits;
    sampler *smp; /* decode: greedy */
    seq_grammar *gram; /* decode: the constraint (bench_constrain), or NULL */
} engine_run;

/* Decode rows generate: each step samples its token greedily (on the
 * device where the backend samples, as memra-gen and memra-serve do) and
 * feeds it to the next, so a step costs what a real one does, the logits
 * never crossing to the host. */
static sampler *greedy_sampler(const engine *e, memra_err *err)
{
    sampler_params p = sampler_params_default();
    p.temperature = 0;
    return sampler_new(&p, (int32_t)engine_config(e)->n_vocab, err);
}

/* Pseudo-random ids over the whole vocabulary: what the weights see does not
 * change the work a step does, and fixed ids keep runs comparable. */
static int32_t *random_tokens(const engine *e, int64_t n, uint64_t seed)
{
    int64_t vocab = engine_config(e)->n_vocab;
    int32_t *t = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    rng_state r;
    rng_seed(&r, seed, 0);
    for (int64_t i = 0; i < n; i++)
        t[i] = (int32_t)(rng_next_u64(&r) % (uint64_t)vocab);
    return t;
}

/* s filled with the run's first depth tokens, untimed: a prefill in the
 * engine's chunks, logits skipped. */
static int fill_depth(engine_run *r, memra_err *err)
{
    engine_seq_reset(r->s);
    for (int64_t done = 0; done < r->depth;) {
        int step = r->depth - done > (1 << 20) ? 1 << 20 : (int)(r->depth - done);
        if (engine_forward(r->e, r->s, r->tokens + done, step, NULL, 0, err) != 0)
            return -1;
        done += step;
    }
    return 0;
}

static int prefill_rep(void *ctx, double *ms, memra_err *err)
{
    engine_run *r = ctx;
    if (r->depth == 0)
        engine_seq_reset(r->s);
    else if (engine_rewindable(r->e) || engine_seq_pos(r->s) == r->depth)
        engine_seq_truncate(r->s, r->depth);
    else if (fill_depth(r, err) != 0) /* a recurrent state cannot be cut back */
        return -1;
    engine_finish(r->e); /* the untimed work done before the clock starts */
    double t0 = clock_now_ms();
    if (engine_forward(r->e, r->s, r->tokens + r->depth, r->n_prompt, r->logits, 0, err) != 0)
        return -1;
    *ms = clock_now_ms() - t0;
    return 0;
}

static int decode_rep(void *ctx, double *ms, memra_err *err)
{
    engine_run *r = ctx;
    /* a recurrent state cannot be cut back: fill the context again, untimed */
    if (!engine_rewindable(r->e) && engine_seq_pos(r->s) != r->depth && fill_depth(r, err) != 0)
        return -1;
    engine_seq_truncate(r->s, r->depth);
    sampler_reset(r->smp);
    grammars_restart(r->gram, 1);
    int32_t tok = r->tokens[r->depth];
    engine_finish(r->e); /* the untimed refill done before the clock starts */
    double t0 = clock_now_ms();
    for (int i = 0; i < r->n_gen; i++) {
        if (r->gram && grammar_before(r->gram, r->smp, err) != 0)
            return -1;
        if (engine_forward_sample(r->e, r->s, &tok, 1, r->smp, &tok, err) != 0)
            return -1;
        if (r->gram && grammar_after(r->gram, tok, err) != 0)
            return -1;
    }
    *ms = clock_now_ms() - t0;
    return 0;
}

int bench_prefill(engine *e, engine_seq *s, int64_t depth, int n_prompt, int warmup, int reps,
                  uint64_t seed, bench_stats *out, memra_err *err)
{
    if (n_prompt < 1 || depth < 0)
        return memra_fail(err, "bench: prefill of %d tokens at depth %lld", n_prompt,
                          (long long)depth);
    engine_run r = {
        .e = e, .s = s, .n_prompt = n_prompt, .depth = depth,
        .tokens = random_tokens(e, depth + n_prompt, seed),
        .logits = xmalloc((size_t)engine_config(e)->n_vocab * sizeof(float)),
    };
    int rc = depth > 0 ? fill_depth(&r, err) : 0;
    if (rc == 0)
        rc = bench_repeat(prefill_rep, &r, warmup, reps, out, err);
    engine_seq_reset(s);
    free(r.tokens);
    free(r.logits);
    return rc;
}

int bench_decode(engine *e, engine_seq *s, int64_t depth, int n_gen, int warmup, int reps,
                 uint64_t seed, bench_stats *out, memra_err *err)
{
    if (n_gen < 1 || depth < 0)
        return memra_fail(err, "bench: decode of %d tokens at depth %lld", n_gen,
                          (long long)depth);
    engine_run r = {
        .e = e, .s = s, .depth = depth, .n_gen = n_gen,
        .tokens = random_tokens(e, depth + 1, seed),
        .smp = greedy_sampler(e, err),
        .gram = grammars_new(1),
    };
    if (!r.smp) {
        free(r.tokens);
        grammars_free(r.gram, 1);
        return -1;
    }
    int rc = fill_depth(&r, err);
    if (rc == 0)
        rc = bench_repeat(decode_rep, &r, warmup, reps, out, err);
    engine_seq_reset(s);
    free(r.tokens);
    sampler_free(r.smp);
    grammars_free(r.gram, 1);
    return rc;
}

typedef struct {
    engine *e;
    engine_seq *const *seqs;
    int b, n_gen;
    int64_t n_prompt;
    int32_t *first;  /* [b]: each sequence's first decode token */
    int32_t *toks;   /* [b]: the step's tokens, then the sampled ones */
    sampler **smp;   /* [b]: greedy, one per sequence */
    memra_err *row_errs; /* [b] */
    seq_grammar *gram;   /* [b]: the constraint (bench_constrain), or NULL */
    uint64_t seed;       /* sequence i's prompt is random_tokens(seed + 1 + i) */
} batch_run;

/* Reset seq and run n_prompt random tokens (random_tokens(seed)) into it. */
static int fill_prompt(engine *e, engine_seq *seq, int64_t n_prompt, uint64_t seed,
                       memra_err *err)
{
    engine_seq_reset(seq);
    if (n_prompt == 0)
        return 0;
    int32_t *prompt = random_tokens(e, n_prompt, seed);
    int rc = 0;
    for (int64_t done = 0; done < n_prompt && rc == 0;) {
        int step = n_prompt - done > (1 << 20) ? 1 << 20 : (int)(n_prompt - done);
        rc = engine_forward(e, seq, prompt + done, step, NULL, 0, err);
        done += step;
    }
    free(prompt);
    return rc;
}

/* Every step samples each sequence's token greedily (on the device where
 * the backend samples, as memra-serve's batched steps do) and feeds it
 * to the next step. */
static int decode_batch_rep(void *ctx, double *ms, memra_err *err)
{
    batch_run *r = ctx;
    for (int i = 0; i < r->b; i++) {
        if (!engine_rewindable(r->e) && engine_seq_pos(r->seqs[i]) != r->n_prompt) {
            /* a recurrent state cannot be cut back: prefill again, untimed */
            engine_seq_reset(r->seqs[i]);
            if (fill_prompt(r->e, r->seqs[i], r->n_prompt, r->seed + 1 + (uint64_t)i, err) != 0)
                return -1;
        }
        engine_seq_truncate(r->seqs[i], r->n_prompt);
        sampler_reset(r->smp[i]);
        r->toks[i] = r->first[i];
    }
    grammars_restart(r->gram, r->b);
    engine_finish(r->e); /* the untimed refills done before the clock starts */
    double t0 = clock_now_ms();
    for (int i = 0; i < r->n_gen; i++) {
        masks_job mj = {.g = r->gram, .smp = r->smp, .n = r->b};
        if (engine_forward_batch_sample_with(r->e, r->seqs, r->toks, r->b, r->smp, r->toks,
                                             r->row_errs, r->gram ? grammars_overlap : NULL,
                                             &mj, err) != 0)
            return -1;
        if (mj.rc != 0) {
            *err = mj.err;
            return -1;
        }
        for (int k = 0; k < r->b; k++)
            if (r->toks[k] < 0)
                return memra_fail(err, "bench: step %d, sequence %d: %s", i, k,
                                  r->row_errs[k].msg);
        for (int k = 0; r->gram && k < r->b; k++)
            if (grammar_after(&r->gram[k], r->toks[k], err) != 0)
                return -1;
    }
    *ms = clock_now_ms() - t0;
    return 0;
}

int bench_decode_batch(engine *e, engine_seq *const *seqs, int b, int64_t n_prompt, int n_gen,
                       int warmup, int reps, uint64_t seed, bench_stats *out, memra_err *err)
{
    if (b < 1 || n_gen < 1 || n_prompt < 0)
        return memra_fail(err, "bench: batched decode of %d sequences x %d tokens after %lld",
                          b, n_gen, (long long)n_prompt);
    batch_run r = {
        .e = e, .seqs = seqs, .b = b, .n_gen = n_gen, .n_prompt = n_prompt,
        .first = random_tokens(e, b, seed),
        .toks = xmalloc((size_t)b * sizeof(int32_t)),
        .smp = xcalloc((size_t)b, sizeof(sampler *)),
        .row_errs = xcalloc((size_t)b, sizeof(memra_err)),
        .gram = grammars_new(b),
        .seed = seed,
    };
    int rc = 0;
    for (int i = 0; i < b && rc == 0; i++)
        if (!(r.smp[i] = greedy_sampler(e, err)))
            rc = -1;
    for (int i = 0; i < b && rc == 0; i++)
        rc = fill_prompt(e, seqs[i], n_prompt, seed + 1 + (uint64_t)i, err);
    if (rc == 0)
        rc = bench_repeat(decode_batch_rep, &r, warmup, reps, out, err);
    for (int i = 0; i < b; i++) {
        engine_seq_reset(seqs[i]);
        sampler_free(r.smp[i]);
    }
    free(r.first);
    free(r.toks);
    free(r.smp);
    free(r.row_errs);
    grammars_free(r.gram, b);
    return rc;
}

/* ---- tokenizer ---- */

typedef struct {
    const tokenizer *t;
    const char *text;
    size_t len, n_tokens;
} tok_run;

static int tokenize_rep(void *ctx, double *ms, memra_err *err)
{
    tok_run *r = ctx;
    int32_t *ids = NULL;
    size_t n = 0;
    double t0 = clock_now_ms();
    int rc = tok_encode(r->t, r->text, r->len, 0, 0, &ids, &n, err);
    *ms = clock_now_ms() - t0;
    free(ids);
    r->n_tokens = n;
    return rc;
}

int bench_tokenize(const tokenizer *t, const char *text, size_t len, int warmup, int reps,
                   bench_stats *out, size_t *n_tokens, memra_err *err)
{
    tok_run r = {.t = t, .text = text, .len = len};
    if (bench_repeat(tokenize_rep, &r, warmup, reps, out, err) != 0)
        return -1;
    *n_tokens = r.n_tokens;
    return 0;
}

/* ---- the built-in mixed text ---- */

/* Seed paragraphs, written for this benchmark. Placeholders, each varied
 * by the generator: %N an integer, %F a decimal number, %X eight hex
 * digits, %I an identifier, %W a run of whitespace. Any other '%' is
 * literal. */
static const char *const seed_paragraphs[] = {
    /* English prose */
    "The lighthouse keeper had kept a logbook for %N years, and every page of it began the "
    "same way: the date, the wind, the colour of the sea at dawn. On the morning the supply "
    "boat failed to arrive, he wrote \"calm, grey, no boat\" and underlined the last two words "
    "twice. By noon he'd counted %N gulls on the rocks and decided that was a sign of "
    "something, though he couldn't have said what.",
    "\"I'll be back before six,\" she said, but we'd all heard that before. It wasn't that she "
    "lied; it's that the hours moved differently for her. They'd start at %N and end at %N, and "
    "whatever happened in between was anyone's guess. 'You're late,' he'd say. 'I know,' she'd "
    "answer, 'I've always been.' Nobody ever asked what she did with the time.",
    "Memory bandwidth, not arithmetic, sets the pace of decoding: a model that streams %F GB of "
    "weights per token can't run faster than the bus allows. We've measured it at %F GB/s on "
    "this machine (that's roughly %N tokens per second, if nothing else gets in the way). Isn't "
    "it odd that the fastest step is the one that does the least work?",
    /* C */
    "static int %I(const float *x, int n, float *out)\n{\n    float acc = 0.0f;\n"
    "    for (int i = 0; i < n; i++) {\n        if (x[i] > %Ff)\n"
    "            acc += x[i] * x[i];%W\n    }\n    *out = acc / (float)(n + %N);\n"
    "    return acc > 0 ? 0 : -1; /* empty input is an error */\n}",
    /* Python */
    "def %I(items, limit=%N):\n    \"\"\"Return the first items whose score passes the "
    "limit.\"\"\"\n    kept = []\n    for i, item in enumerate(items):\n"
    "        if item.score >= limit * %F:\n"
    "            kept.append((i, item.name.strip().lower()))\n"
    "    return kept[:%N]  # TODO: sort by score first?",
    /* JSON and logs */
    "{\"id\": %N, \"name\": \"%I\", \"ok\": true, \"ratio\": %F, \"tags\": [\"alpha\", \"beta\", "
    "null], \"nested\": {\"depth\": %N, \"hash\": \"%X%X\"}}\n"
    "2026-11-30 08:15:%N INFO  worker-%N handled request 0x%X in %F ms (status=200, bytes=%N)\n"
    "2026-11-30 08:15:%N WARN  cache miss for key=\"%I\" after %N retries",
    /* numbers */
    "| region | q1 | q2 | q3 | q4 | change |\n|--------|----|----|----|----|--------|\n"
    "| north | %N | %N | %N | %N | +%F% |\n| south | %N | %N | %N | %N | -%F% |\n"
    "total: %N,%N.%N; call +1 (555) %N-%N; pi is about 3.14159265358979; e^%F = %F; "
    "1e-6 < %F < 2.5E+10",
    /* Chinese */
    "今天早上下了一场小雨，街道上的行人比平时少了很多。我在咖啡馆里坐了%N分钟，读完了一本关于海洋"
    "的书。书里说，深海中有许多我们从未见过的生物，它们在黑暗中发出微弱的光。“真的吗？”朋友问我。"
    "我点点头，说：“至少书上是这么写的。”",
    /* Japanese */
    "東京の朝はいつも忙しい。電車は%N分ごとに来るけれど、それでも満員だ。私はカフェでコーヒーを"
    "飲みながら、新しいプロジェクトの計画を考えていました。ひらがなとカタカナと漢字が混ざった文章は、"
    "トークナイザーにとって面白いテストになります。",
    /* Korean */
    "오늘은 날씨가 정말 좋아서 공원에 산책을 갔습니다. 아이들이 %N명쯤 연을 날리고 있었고, 나무 "
    "아래에서는 노인들이 바둑을 두고 있었습니다. 한국어 문장은 띄어쓰기가 있어서 토큰 분리가 조금 "
    "다릅니다.",
    /* European, Cyrillic, Greek, Arabic */
    "Déjà vu : le café était fermé, alors nous sommes allés à la brasserie d'à côté. Größere "
    "Straßen führen über die Brücke nach Süden. Москва — столица России, в ней живёт около %N "
    "миллионов человек. Η γλώσσα είναι ζωντανή και αλλάζει. مرحبا بالعالم، هذا نص تجريبي رقم %N.",
    /* emoji */
    "Party time 🎉🎉🎉 family: 👨‍👩‍👧‍👦 thumbs 👍🏽👍🏿 flags 🇯🇵🇧🇷🇫🇷 heart on fire ❤️‍🔥 "
    "black cat 🐈‍⬛ %N× 🚀✨ — done ✅ (ok 👌) smiles 😀😃😄😁 weather ☀️🌧️⛈️ %W🙂",
    /* whitespace runs */
    "    indented four\n\t\ttwo tabs then text%Wtrailing   \n\n\n\nafter blank lines%Wx\r\n"
    "windows line end\r\n        \t  \t mixed%Wend\n                                        "
    "forty spaces above%W.",
    /* markup, paths, addresses, symbols */
    "See [the guide](https://example.org/docs/v%N/guide.html#section-%N) or mail "
    "ops+%I@example.com. Run `memra-bench -p %N -n %N` and compare: **%Fx** faster; "
    "~~slower~~. Path: /usr/local/share/memra/models/%I.gguf; regex ^[a-z0-9_]+$ & 100% of "
    "<tag attr=\"v\"/> -> => != <= {} [] () ### --- ***",
};

static const char *const ident_stems[] = {
    "buf", "scale", "row_sum", "kv_block", "tokenize", "weights", "lighthouse", "cache_line",
    "matvec", "score", "n_ctx", "DecodeStep", "parseHeader", "MAX_LEN",
};

const char *bench_mixed_text_description(void)
{
    return "built-in mixed text: English prose, C and Python code, JSON and logs, number "
           "tables, Chinese, Japanese, Korean, European/Cyrillic/Greek/Arabic, emoji, "
           "whitespace runs (fixed seed)";
}

static void put_placeholder(strbuf *sb, char kind, rng_state *r)
{
    uint64_t x = rng_next_u64(r);
    switch (kind) {
    case 'N': {
        static const uint64_t mod[] = {10, 100, 1000, 10000, 100000, 1000000};
        sb_printf(sb, "%llu", (unsigned long long)(x % mod[(x >> 32) % 6]));
        break;
    }
    case 'F':
        sb_printf(sb, "%.*f", (int)((x >> 40) % 5) + 1, (double)(x % 100000) / 97.0);
        break;
    case 'X': sb_printf(sb, "%08llx", (unsigned long long)(x & 0xffffffffu)); break;
    case 'I':
        sb_printf(sb, "%s_%llu", ident_stems[x % MEMRA_ARRAY_LEN(ident_stems)],
                  (unsigned long long)((x >> 20) % 100));
        break;
    case 'W': {
        static const char ws[] = "  \t \n";
        int n = 2 + (int)(x % 11);
        for (int i = 0; i < n; i++)
            sb_putc(sb, ws[(x >> (8 + 3 * i)) % 5]);
        break;
    }
    default: MEMRA_ASSERT(0);
    }
}

static void expand_paragraph(strbuf *sb, const char *p, rng_state *r)
{
    for (; *p; p++) {
        if (p[0] == '%' && p[1] && strchr("NFXIW", p[1])) {
            put_placeholder(sb, p[1], r);
            p++;
        } else {
            sb_putc(sb, *p);
        }
    }
}

char *bench_mixed_text(size_t target, size_t *len)
{
    strbuf out, para;
    sb_init(&out);
    sb_init(&para);
    rng_state r;
    rng_seed(&r, 20261130, 7);
    for (;;) {
        size_t pick = rng_next_u64(&r) % MEMRA_ARRAY_LEN(seed_paragraphs);
        sb_clear(&para);
        expand_paragraph(&para, seed_paragraphs[pick], &r);
        sb_puts(&para, "\n\n");
        if (out.len + para.len > target)
            break;
        sb_append(&out, para.data, para.len);
    }
    sb_free(&para);
    *len = out.len;
    if (!out.data)
        return xstrdup("");
    return sb_take(&out);
}
