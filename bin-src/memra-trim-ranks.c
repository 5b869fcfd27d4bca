/* memra-trim-ranks: the rank file of a vocabulary-trimmed draft head. The
 * model generates over a prompt pack, the ids it emits are counted, and
 * the N most frequent become the ids a drafter may propose
 * (docs/SPECULATIVE.md). Argument parsing, the prompt loop and output:
 * generation is lib/engine/generate.c, the file lib/format/ranks.c. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/cli.h"
#include "core/hash.h"
#include "core/mapfile.h"
#include "core/strbuf.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/spec.h"
#include "format/ranks.h"
#include "jinja/chat_template.h"
#include "model/chat_source.h"
#include "model/checkpoint.h"
#include "tok/tokenizer.h"

#include "memra-trim-ranks/prompt_pack.h"

#define TOP_DEFAULT 32768

static const char usage[] =
    "usage: memra-trim-ranks MODEL OUT.gguf [options]\n"
    "\n"
    "Generates with MODEL over a prompt pack, counts the ids it emits, and writes the rank\n"
    "file of a vocabulary-trimmed draft head: OUT.gguf (one I32 tensor d2t: the top N ids,\n"
    "count descending, id ascending on ties, then unseen ids ascending) and OUT.txt (the\n"
    "same ids, one per line). MODEL is a GGUF file, an HF dir or hf:owner/repo[:file].\n"
    "\n"
    "  --top N             ids to keep (default 32768, at most the vocabulary)\n"
    "  --prompts P         a text file (one prompt), a directory of them, or a .jsonl of\n"
    "                      {\"prompt\"|\"text\": TEXT} or {\"messages\": [...]} lines\n"
    "                      (default: the built-in pack of 24 code, chat and prose prompts)\n"
    "  --n-gen N           tokens to generate per prompt (default 128)\n"
    "  --temp T            temperature (default 0.7; 0 = greedy)\n"
    "  --seed N            prompt i is sampled with seed N + i (default 0)\n"
    "  --resume            continue from OUT.gguf.state, written after every prompt\n"
    "  --limit N           stop after N more prompts, keeping the state for --resume\n"
    "  --validate          then A/B speculative decoding with and without the trim\n"
    "  --draft DRAFT       the draft model --validate runs (same vocabulary)\n"
    "  -K N                draft tokens per round for --validate (1..8, default 4)\n"
    "  --backend B         cpu (fast path), cpu-ref (reference) or cuda\n"
    "                      (default cuda when a GPU is present, else cpu)\n"
    "  --device N          CUDA device index (default 0)\n"
    "  -t, --threads N     (default all cores; env MEMRA_THREADS)\n"
    "  -c, --ctx N         context length (default the model's, at most 4096)\n"
    "\n"
    "Exit status: 0 ok, 1 failure (--validate: the outputs differ), 2 bad usage.\n";

typedef struct {
    const char *model, *out, *prompts, *draft;
    int64_t top;
    int top_given, n_gen, resume, limit, validate, k, n_threads;
    double temp;
    uint64_t seed;
    backend_kind backend;
    int backend_given, device, device_given;
    int64_t n_ctx;
} trim_opts;

static void parse_args(int argc, char **argv, trim_opts *o)
{
    o->top = TOP_DEFAULT;
    o->n_gen = 128;
    o->temp = 0.7;
    o->k = 4;
    o->limit = -1;
    o->n_threads = cli_threads_default();
    enum { O_TOP = 1000, O_PROMPTS, O_NGEN, O_TEMP, O_SEED, O_RESUME, O_LIMIT, O_VALIDATE,
           O_DRAFT, O_BACKEND, O_DEVICE };
    static const struct option longs[] = {
        {"top", required_argument, NULL, O_TOP},     {"prompts", required_argument, NULL, O_PROMPTS},
        {"n-gen", required_argument, NULL, O_NGEN},  {"temp", required_argument, NULL, O_TEMP},
        {"seed", required_argument, NULL, O_SEED},   {"resume", no_argument, NULL, O_RESUME},
        {"limit", required_argument, NULL, O_LIMIT}, {"validate", no_argument, NULL, O_VALIDATE},
        {"draft", required_argument, NULL, O_DRAFT}, {"backend", required_argument, NULL, O_BACKEND},
        {"device", required_argument, NULL, O_DEVICE},
        {"threads", required_argument, NULL, 't'},   {"ctx", required_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int ch;
    memra_err err;
    while ((ch = getopt_long(argc, argv, ":K:t:c:h", longs, NULL)) != -1) {
        switch (ch) {
        case O_TOP:
            o->top = cli_int_or_usage(optarg, 1, INT32_MAX, "--top");
            o->top_given = 1;
            break;
        case O_PROMPTS: o->prompts = optarg; break;
        case O_NGEN: o->n_gen = (int)cli_int_or_usage(optarg, 1, INT32_MAX, "--n-gen"); break;
        case O_TEMP:
            if (cli_parse_f64(optarg, 0, 1e6, &o->temp, "--temp", &err) != 0)
                cli_usage("%s", err.msg);
            break;
        case O_SEED: o->seed = (uint64_t)cli_int_or_usage(optarg, 0, INT64_MAX / 2, "--seed"); break;
        case O_RESUME: o->resume = 1; break;
        case O_LIMIT: o->limit = (int)cli_int_or_usage(optarg, 1, INT32_MAX, "--limit"); break;
        case O_VALIDATE: o->validate = 1; break;
        case O_DRAFT: o->draft = optarg; break;
        case 'K': o->k = (int)cli_int_or_usage(optarg, 1, SPEC_K_MAX, "-K"); break;
        case O_BACKEND:
            o->backend = backend_kind_or_usage(optarg);
            o->backend_given = 1;
            break;
        case O_DEVICE:
            o->device = (int)cli_int_or_usage(optarg, 0, 1024, "--device");
            o->device_given = 1;
            break;
        case 't': o->n_threads = (int)cli_int_or_usage(optarg, 1, 4096, "--threads"); break;
        case 'c': o->n_ctx = cli_int_or_usage(optarg, 1, INT32_MAX, "--ctx"); break;
        case 'h': fputs(usage, stdout); exit(0);
        case ':': cli_usage("%s needs a value", argv[optind - 1]);
        default: cli_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (argc - optind < 2)
        cli_usage("want MODEL and OUT.gguf");
    if (argc - optind > 2)
        cli_usage("unexpected argument '%s'", argv[optind + 2]);
    o->model = argv[optind];
    o->out = argv[optind + 1];
    if (o->validate && !o->draft)
        cli_usage("--validate needs --draft DRAFT (the trim applies to a draft model's head)");
    if (o->draft && !o->validate)
        cli_usage("--draft goes with --validate");
    if (o->validate && o->limit >= 0)
        cli_usage("--validate runs on the finished rank file: it does not go with --limit");
}

static backend_kind default_backend(const trim_opts *o)
{
    return o->backend_given ? o->backend : backend_kind_default();
}

static engine *load_engine(const trim_opts *o, const checkpoint *c, int n_seqs)
{
    engine_opts eo;
    engine_opts_default(&eo);
    eo.n_seqs = n_seqs;
    eo.n_threads = o->n_threads;
    eo.n_ctx = o->n_ctx;
    eo.snapshots = spec_snapshots(); /* a hybrid target goes back to a row's state after a rejection */
    eo.backend = default_backend(o);
    eo.device = o->device;
    if (o->device_given && eo.backend != BK_CUDA)
        cli_usage("--device %d: the cpu backend has no devices (use --backend cuda)", o->device);
    engine *e;
    memra_err err;
    if (engine_load(c, &eo, &e, &err) != 0)
        cli_failf("%s: %s", c->path, err.msg);
    return e;
}

static tokenizer *open_model(const char *path, checkpoint *c)
{
    memra_err err;
    if (checkpoint_open(path, c, &err) != 0)
        cli_fail(&err);
    if (c->vocab_only)
        cli_failf("%s: a vocab-only GGUF has no weights to generate with", c->path);
    tokenizer *t;
    if (checkpoint_load_tokenizer(c, &t, &err) != 0)
        cli_failf("%s: %s (memra-trim-ranks encodes text prompts)", path, err.msg);
    return t;
}

/* A prompt's ids: text as memra-gen encodes it; a chat through the
 * model's template, or, for a model without one, its last message's text
 * as plain text. */
static int32_t *prompt_ids(const trim_prompt *p, const char *tmpl, const tokenizer *t,
                           size_t *n)
{
    memra_err err;
    char *text = NULL;
    int add_special = 1, parse_special = 0;
    if (p->text) {
        text = xstrdup(p->text);
    } else if (tmpl) {
        const char *bos = tok_bos(t) >= 0 ? tok_text(t, tok_bos(t)) : NULL;
        const char *eos = tok_eos(t) >= 0 ? tok_text(t, tok_eos(t)) : NULL;
        if (chat_template_render(tmpl, p->messages, NULL, NULL, 1, NULL, bos, eos, &text, &err) != 0)
            cli_failf("%s: %s", p->where, err.msg);
        add_special = 0;
        parse_special = 1;
    } else {
        json_t *last = json_array_get(p->messages, json_array_size(p->messages) - 1);
        const char *content = json_string_value(json_object_get(last, "content"));
        if (!content)
            cli_failf("%s: the last message has no text \"content\"", p->where);
        text = xstrdup(content);
    }
    int32_t *ids;
    if (tok_encode(t, text, strlen(text), add_special, parse_special, &ids, n, &err) != 0)
        cli_failf("%s: %s", p->where, err.msg);
    free(text);
    if (*n == 0)
        cli_failf("%s: the prompt encodes to no tokens", p->where);
    return ids;
}

/* ---- the state file: counts so far, written after every prompt ---- */

/* What the counts depend on: the model, the prompts and the settings. A
 * state written for anything else is refused rather than mixed in. */
static uint64_t run_key(const trim_opts *o, const checkpoint *c, const trim_prompts *ps,
                        int64_t top)
{
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "%s|%lld|%lld|%lld|%d|%.17g|%" PRIu64 "|%lld|", c->path,
              (long long)c->config.n_vocab, (long long)c->config.dim,
              (long long)c->config.n_layers, o->n_gen, o->temp, o->seed, (long long)top);
    for (size_t i = 0; i < ps->n; i++) {
        if (ps->p[i].text) {
            sb_puts(&sb, ps->p[i].text);
        } else {
            char *m = json_dumps(ps->p[i].messages, JSON_COMPACT | JSON_SORT_KEYS);
            sb_puts(&sb, m);
            free(m);
        }
        sb_putc(&sb, '\x1f');
    }
    uint64_t h = hash_fnv1a64(sb.data, sb.len);
    sb_free(&sb);
    return h;
}

static char *state_path(const char *out)
{
    size_t len = strlen(out) + 7;
    char *p = xmalloc(len);
    snprintf(p, len, "%s.state", out);
    return p;
}

static void state_write(const char *path, uint64_t key, size_t done, uint64_t tokens,
                        const uint64_t *counts, int32_t n_vocab)
{
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "memra-trim-ranks state 1\nkey %016" PRIx64 "\ndone %zu\ntokens %" PRIu64
              "\nn_vocab %d\n", key, done, tokens, (int)n_vocab);
    for (int32_t id = 0; id < n_vocab; id++)
        if (counts[id])
            sb_printf(&sb, "%d %" PRIu64 "\n", (int)id, counts[id]);
    memra_err err;
    if (write_file_atomic(path, sb.data, sb.len, &err) != 0)
        cli_fail(&err);
    sb_free(&sb);
}

/* 1 when a state was read, 0 when there is none. */
static int state_read(const char *path, uint64_t key, size_t n_prompts, size_t *done,
                      uint64_t *tokens, uint64_t *counts, int32_t n_vocab)
{
    if (access(path, F_OK) != 0)
        return 0;
    memra_err err;
    char *buf;
    size_t len;
    if (read_small_file(path, 256u << 20, &buf, &len, &err) != 0)
        cli_fail(&err);
    uint64_t k = 0;
    int nv = 0, used = 0;
    if (sscanf(buf, "memra-trim-ranks state 1\nkey %" SCNx64 "\ndone %zu\ntokens %" SCNu64
               "\nn_vocab %d\n%n", &k, done, tokens, &nv, &used) != 4 || used == 0)
        cli_failf("%s: not a memra-trim-ranks state file", path);
    if (k != key || nv != n_vocab || *done > n_prompts)
        cli_failf("%s: written for another model, prompt pack or settings (delete it to start "
                  "over)", path);
    for (char *p = buf + used; *p;) {
        int id, n = 0;
        uint64_t c;
        if (sscanf(p, "%d %" SCNu64 "\n%n", &id, &c, &n) != 2 || n == 0 || id < 0 ||
            id >= n_vocab)
            cli_failf("%s: a bad count line near byte %zu", path, (size_t)(p - buf));
        counts[id] = c;
        p += n;
    }
    free(buf);
    return 1;
}

/* ---- --validate ---- */

typedef struct {
    uint64_t drafted, accepted, tokens;
    double ms;
} ab_side;

static void validate(const trim_opts *o, engine *e, const tokenizer *t, const char *tmpl,
                     const trim_prompts *ps, const int32_t *d2t, int32_t n_trim)
{
    memra_err err;
    checkpoint dck;
    tokenizer *dt = open_model(o->draft, &dck);
    if (spec_check_vocab(t, dt, o->draft, &err) != 0)
        cli_fail(&err);
    /* two drafters, each with its sequence */
    engine *de = load_engine(o, &dck, 2);
    int32_t n_allowed = (int32_t)tok_vocab_size(t);
    if (n_allowed > engine_config(e)->n_vocab)
        n_allowed = (int32_t)engine_config(e)->n_vocab;
    spec_drafter *full, *trim;
    spec_trim *head;
    if (spec_drafter_model_new(de, n_allowed, NULL, &full, &err) != 0 ||
        spec_trim_new(de, n_allowed, d2t, n_trim, &head, &err) != 0)
        cli_fail(&err);
    /* Greedy, so the two outputs must be the same tokens: a trim changes
     * speed and acceptance, never output. Every third prompt of the pack,
     * so each kind is in it. */
    spec_params sp;
    spec_params_default(&sp);
    sp.k = o->k;
    sp.n_predict = o->n_gen;
    sp.sampling.temperature = 0;
    ab_side side[2] = {{0}};
    size_t n_val = 0;
    for (size_t i = 0; i < ps->n; i += 3) {
        size_t n_prompt;
        int32_t *prompt = prompt_ids(&ps->p[i], tmpl, t, &n_prompt);
        spec_result r[2];
        for (int s = 0; s < 2; s++) {
            /* one drafter at a time owns the draft engine's hook */
            spec_drafter *d = full;
            if (s == 1 && spec_drafter_model_new(de, n_allowed, head, &trim, &err) != 0)
                cli_fail(&err);
            if (s == 1)
                d = trim;
            if (spec_generate(e, t, d, prompt, n_prompt, &sp, &r[s], &err) != 0)
                cli_failf("%s: %s", ps->p[i].where, err.msg);
            if (s == 1)
                spec_drafter_free(trim);
            side[s].drafted += r[s].drafted;
            side[s].accepted += r[s].accepted;
            side[s].tokens += r[s].n_tokens;
            side[s].ms += r[s].decode_ms;
        }
        if (r[0].n_tokens != r[1].n_tokens ||
            memcmp(r[0].tokens, r[1].tokens, r[0].n_tokens * sizeof(int32_t)) != 0)
            cli_failf("%s: the trimmed drafter changed the output (a bug: verification uses "
                      "the full vocabulary)", ps->p[i].where);
        spec_result_free(&r[0]);
        spec_result_free(&r[1]);
        free(prompt);
        n_val++;
    }
    for (int s = 0; s < 2; s++) {
        double acc = side[s].drafted ? (double)side[s].accepted / (double)side[s].drafted : 0;
        double tps = side[s].ms > 0 ? (double)side[s].tokens / (side[s].ms / 1e3) : 0;
        printf("validate %s: acceptance %.3f (%" PRIu64 "/%" PRIu64 "), %.1f tok/s\n",
               s ? "trimmed  " : "untrimmed", acc, side[s].accepted, side[s].drafted, tps);
    }
    printf("validate: greedy, K=%d, %zu prompts, %d ids of %lld: outputs identical\n", o->k, n_val,
           (int)n_trim, (long long)engine_config(e)->n_vocab);
    spec_drafter_free(full);
    spec_trim_free(head);
    engine_free(de);
    tok_free(dt);
    checkpoint_close(&dck);
}

int main(int argc, char **argv)
{
    cli_set_program("memra-trim-ranks");
    trim_opts o = {0};
    parse_args(argc, argv, &o);
    memra_err err;
    trim_prompts ps;
    if (o.prompts) {
        if (prompt_pack_load(o.prompts, &ps, &err) != 0)
            cli_fail(&err);
    } else {
        prompt_pack_builtin(&ps);
    }
    checkpoint ck;
    tokenizer *t = open_model(o.model, &ck);
    int32_t n_vocab = (int32_t)ck.config.n_vocab;
    if (o.top > n_vocab) {
        if (o.top_given)
            cli_usage("--top %lld: the vocabulary of %s has %d ids", (long long)o.top, o.model,
                      (int)n_vocab);
        o.top = n_vocab; /* the default, on a vocabulary smaller than it */
    }
    char *tmpl = NULL;
    int has_chat = 0;
    for (size_t i = 0; i < ps.n; i++)
        has_chat |= ps.p[i].messages != NULL;
    if (has_chat && chat_template_of(&ck, &tmpl, &err) != 0) {
        fprintf(stderr, "memra-trim-ranks: %s has no chat template: chat prompts run as their "
                "last message's text\n", o.model);
        tmpl = NULL;
    }
    engine *e = load_engine(&o, &ck, 1);

    uint64_t *counts = xcalloc((size_t)n_vocab, sizeof *counts);
    uint64_t key = run_key(&o, &ck, &ps, o.top), tokens = 0;
    size_t done = 0;
    char *state = state_path(o.out);
    if (o.resume && state_read(state, key, ps.n, &done, &tokens, counts, n_vocab))
        fprintf(stderr, "memra-trim-ranks: resuming after %zu of %zu prompts (%s)\n", done, ps.n,
                state);
    else if (o.resume)
        fprintf(stderr, "memra-trim-ranks: no %s: starting from the first prompt\n", state);

    gen_params gp;
    gen_params_default(&gp);
    gp.n_predict = o.n_gen;
    gp.sampling.temperature = o.temp;
    gp.sampling.penalty_last_n = 0;
    int ran = 0;
    for (size_t i = done; i < ps.n; i++) {
        if (o.limit >= 0 && ran == o.limit) {
            printf("stopped after %zu of %zu prompts; --resume continues from %s\n", i, ps.n,
                   state);
            free(state);
            return 0;
        }
        size_t n_prompt;
        int32_t *prompt = prompt_ids(&ps.p[i], tmpl, t, &n_prompt);
        gp.sampling.seed = o.seed + i;
        gen_result r;
        if (generate(e, t, prompt, n_prompt, &gp, NULL, NULL, &r, &err) != 0)
            cli_failf("%s: %s", ps.p[i].where, err.msg);
        for (size_t j = 0; j < r.n_tokens; j++)
            counts[r.tokens[j]]++;
        tokens += r.n_tokens;
        gen_result_free(&r);
        free(prompt);
        ran++;
        state_write(state, key, i + 1, tokens, counts, n_vocab);
        if (isatty(STDERR_FILENO))
            fprintf(stderr, "\rmemra-trim-ranks: %zu/%zu prompts, %" PRIu64 " tokens", i + 1,
                    ps.n, tokens);
    }
    if (isatty(STDERR_FILENO))
        fputc('\n', stderr);

    int32_t *d2t = xmalloc((size_t)o.top * sizeof *d2t);
    ranks_from_counts(counts, n_vocab, (int32_t)o.top, d2t);
    if (ranks_write(o.out, d2t, (int32_t)o.top, n_vocab, &err) != 0)
        cli_fail(&err);
    unlink(state);
    size_t distinct = 0;
    for (int32_t id = 0; id < n_vocab; id++)
        distinct += counts[id] > 0;
    char *txt = ranks_txt_path(o.out);
    printf("wrote %s and %s: %lld ids ranked from %" PRIu64 " generated tokens over %zu prompts "
           "(%zu distinct ids seen)\n", o.out, txt, (long long)o.top, tokens, ps.n, distinct);
    fflush(stdout);
    free(txt);
    if (o.validate)
        validate(&o, e, t, tmpl, &ps, d2t, (int32_t)o.top);
    free(d2t);
    free(counts);
    free(state);
    free(tmpl);
    engine_free(e);
    tok_free(t);
    checkpoint_close(&ck);
    prompt_pack_free(&ps);
    return 0;
}
