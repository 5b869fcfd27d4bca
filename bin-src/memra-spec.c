/* memra-spec: speculative decoding, checked against plain decoding.
 * Argument parsing and output only: the loop and the drafters are
 * lib/engine/spec*.c, rank files lib/format/ranks.c. */
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/cli.h"
#include "core/mapfile.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/spec.h"
#include "format/ranks.h"
#include "model/checkpoint.h"
#include "tok/tokenizer.h"

/* The prompt when none is given: plain prose any base model continues. */
#define DEFAULT_PROMPT "The report of the committee shows that"

static const char usage[] =
    "usage: memra-spec MODEL (--draft DRAFT | --ngram | --mtp) [options]\n"
    "\n"
    "Runs plain decoding, then speculative decoding for each K, and checks that the\n"
    "speculative output is token-identical to plain greedy decoding and that drafts are\n"
    "accepted (at --temp above 0: that seeded runs are reproducible and drafts are\n"
    "accepted). Prints acceptance, tokens per round and tok/s per K against plain, then\n"
    "SELF-CONSISTENCY PASS, or FIRST DIVERGENCE at token i (exit 1).\n"
    "MODEL and DRAFT are GGUF files, HF checkpoint dirs or hf:owner/repo[:file].\n"
    "\n"
    "drafter (one):\n"
    "  --draft DRAFT       a smaller model of the same vocabulary, or an assistant that\n"
    "                      drafts on the model's own state (gemma4_assistant)\n"
    "  --ngram             n-gram / prompt-lookup drafting from the context (no model)\n"
    "  --mtp               the model's own MTP (NextN) block (Qwen3.5 checkpoints carry one)\n"
    "  --trim RANKS        limit the draft model's head to a rank file's ids (memra-trim-ranks)\n"
    "options:\n"
    "  -K LIST             draft tokens per round: N, A..B or N,M,... within 1..8 (default 1..8)\n"
    "  -p TEXT | -f FILE   the prompt (default: \"" DEFAULT_PROMPT "\")\n"
    "  -n N                tokens to generate (default 128)\n"
    "  --temp T            temperature (default 0 = greedy)\n"
    "  --seed N            seed of sampled runs (default 0)\n"
    "  --ignore-eos        do not stop at end-of-generation tokens\n"
    "  --backend B         cpu (fast path), cpu-ref (reference) or cuda\n"
    "                      (default cuda when a GPU is present, else cpu)\n"
    "  --device N          CUDA device index (default 0)\n"
    "  -t, --threads N     (default all cores; env MEMRA_THREADS)\n"
    "  -c, --ctx N         context length (default the model's, at most 4096)\n"
    "  --json              one JSON object instead of the table\n"
    "\n"
    "Exit status: 0 pass, 1 a failed check or error, 2 bad usage.\n";

typedef struct {
    const char *model, *draft, *trim, *prompt, *prompt_file;
    int ngram, mtp, json, ignore_eos, n_predict, n_threads;
    int ks[SPEC_K_MAX], n_ks;
    double temp;
    uint64_t seed;
    backend_kind backend;
    int backend_given, device, device_given;
    int64_t n_ctx;
} spec_opts;

/* -K: "3", "1..8" or "1,2,4", each within 1..SPEC_K_MAX, no repeats. */
static void parse_ks(const char *s, spec_opts *o)
{
    o->n_ks = 0;
    const char *dots = strstr(s, "..");
    if (dots) {
        char lo[32];
        size_t n = (size_t)(dots - s);
        if (n == 0 || n >= sizeof lo)
            cli_usage("-K: '%s' is not N, A..B or N,M,...", s);
        memcpy(lo, s, n);
        lo[n] = '\0';
        int a = (int)cli_int_or_usage(lo, 1, SPEC_K_MAX, "-K"),
            b = (int)cli_int_or_usage(dots + 2, 1, SPEC_K_MAX, "-K");
        if (a > b)
            cli_usage("-K: the range %d..%d is empty", a, b);
        for (int k = a; k <= b; k++)
            o->ks[o->n_ks++] = k;
        return;
    }
    char *copy = xstrdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int k = (int)cli_int_or_usage(tok, 1, SPEC_K_MAX, "-K");
        for (int i = 0; i < o->n_ks; i++)
            if (o->ks[i] == k)
                cli_usage("-K: %d is listed twice", k);
        o->ks[o->n_ks++] = k;
    }
    free(copy);
    if (o->n_ks == 0)
        cli_usage("-K: '%s' names no K", s);
}

static void parse_args(int argc, char **argv, spec_opts *o)
{
    o->n_predict = 128;
    o->n_threads = cli_threads_default();
    for (int k = 1; k <= SPEC_K_MAX; k++)
        o->ks[o->n_ks++] = k;
    enum { O_DRAFT = 1000, O_NGRAM, O_MTP, O_TRIM, O_TEMP, O_SEED, O_IGNORE_EOS, O_BACKEND,
           O_DEVICE, O_JSON };
    static const struct option longs[] = {
        {"draft", required_argument, NULL, O_DRAFT},   {"ngram", no_argument, NULL, O_NGRAM},
        {"mtp", no_argument, NULL, O_MTP},             {"trim", required_argument, NULL, O_TRIM},
        {"prompt", required_argument, NULL, 'p'},      {"file", required_argument, NULL, 'f'},
        {"n-predict", required_argument, NULL, 'n'},   {"temp", required_argument, NULL, O_TEMP},
        {"seed", required_argument, NULL, O_SEED},
        {"ignore-eos", no_argument, NULL, O_IGNORE_EOS},
        {"backend", required_argument, NULL, O_BACKEND},
        {"device", required_argument, NULL, O_DEVICE}, {"threads", required_argument, NULL, 't'},
        {"ctx", required_argument, NULL, 'c'},         {"json", no_argument, NULL, O_JSON},
        {"help", no_argument, NULL, 'h'},              {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int ch;
    memra_err err;
    while ((ch = getopt_long(argc, argv, ":K:p:f:n:t:c:h", longs, NULL)) != -1) {
        switch (ch) {
        case O_DRAFT: o->draft = optarg; break;
        case O_NGRAM: o->ngram = 1; break;
        case O_MTP: o->mtp = 1; break;
        case O_TRIM: o->trim = optarg; break;
        case 'K': parse_ks(optarg, o); break;
        case 'p': o->prompt = optarg; break;
        case 'f': o->prompt_file = optarg; break;
        case 'n': o->n_predict = (int)cli_int_or_usage(optarg, 1, INT32_MAX, "-n"); break;
        case O_TEMP:
            if (cli_parse_f64(optarg, 0, 1e6, &o->temp, "--temp", &err) != 0)
                cli_usage("%s", err.msg);
            break;
        case O_SEED: o->seed = (uint64_t)cli_int_or_usage(optarg, 0, INT64_MAX, "--seed"); break;
        case O_IGNORE_EOS: o->ignore_eos = 1; break;
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
        case O_JSON: o->json = 1; break;
        case 'h': fputs(usage, stdout); exit(0);
        case ':': cli_usage("%s needs a value", argv[optind - 1]);
        default: cli_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        cli_usage("no MODEL given");
    if (optind + 1 < argc)
        cli_usage("unexpected argument '%s'", argv[optind + 1]);
    o->model = argv[optind];
    if (!!o->draft + o->ngram + o->mtp > 1)
        cli_usage("give one drafter: --draft DRAFT, --ngram or --mtp");
    if (!o->draft && !o->ngram && !o->mtp)
        cli_usage("no drafter: give --draft DRAFT, --ngram or --mtp");
    if (o->trim && !o->draft)
        cli_usage("--trim goes with --draft (the n-gram and MTP drafters have no trimmed head)");
    if (o->prompt && o->prompt_file)
        cli_usage("give one of -p and -f");
}

static backend_kind default_backend(const spec_opts *o)
{
    return o->backend_given ? o->backend : backend_kind_default();
}

static engine *load_engine(const spec_opts *o, const checkpoint *c, int mtp)
{
    engine_opts eo;
    engine_opts_default(&eo);
    eo.mtp = mtp;
    eo.n_threads = o->n_threads;
    eo.n_ctx = o->n_ctx;
    eo.backend = default_backend(o);
    eo.device = o->device;
    eo.snapshots = spec_snapshots(); /* a hybrid target goes back to a row's state after a rejection */
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
        cli_failf("%s: a vocab-only GGUF has no weights to run", c->path);
    if (config_is_assistant(&c->config))
        cli_failf("%s: a %s assistant drafts for another model: give it with --draft", c->path,
                  family_name(c->config.family));
    tokenizer *t;
    if (checkpoint_load_tokenizer(c, &t, &err) != 0)
        cli_failf("%s: %s (memra-spec encodes a text prompt)", path, err.msg);
    return t;
}

typedef struct {
    int k;
    spec_result r;
    long divergence; /* greedy: against plain; sampled: against the repeated run; -1 none */
    int32_t want, got; /* the tokens at the divergence (-1: one output ended) */
} k_run;

static long first_divergence(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t n = na < nb ? na : nb;
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return na == nb ? -1 : (long)n;
}

static double tok_s(size_t n, double ms) { return ms > 0 ? (double)n / (ms / 1e3) : 0; }

static json_t *run_json(const k_run *kr, double plain_tps)
{
    const spec_result *r = &kr->r;
    double tps = tok_s(r->n_tokens, r->decode_ms);
    json_t *hist = json_array();
    for (int i = 0; i <= kr->k; i++)
        json_array_append_new(hist, json_integer((json_int_t)r->accepted_hist[i]));
    json_t *j = json_pack(
        "{s:i,s:I,s:I,s:I,s:f,s:f,s:I,s:f,s:f,s:f,s:f,s:o,s:b}", "k", kr->k, "rounds",
        (json_int_t)r->rounds, "drafted", (json_int_t)r->drafted, "accepted",
        (json_int_t)r->accepted, "acceptance",
        r->drafted ? (double)r->accepted / (double)r->drafted : 0.0, "tokens_per_round",
        r->rounds ? (double)(r->n_tokens - 1) / (double)r->rounds : 0.0, "tokens",
        (json_int_t)r->n_tokens, "prefill_ms", r->prefill_ms, "decode_ms", r->decode_ms,
        "tok_s", tps, "speedup", plain_tps > 0 ? tps / plain_tps : 0.0, "accepted_per_round",
        hist, "consistent", kr->divergence < 0);
    json_object_set_new(j, "first_divergence",
                        kr->divergence < 0 ? json_null() : json_integer(kr->divergence));
    json_object_set_new(j, "draft_ms", json_real(r->draft_ms));
    return j;
}

int main(int argc, char **argv)
{
    cli_set_program("memra-spec");
    spec_opts o = {0};
    parse_args(argc, argv, &o);
    memra_err err;

    checkpoint ck, dck;
    tokenizer *t = open_model(o.model, &ck), *dt = NULL;
    if (o.mtp && ck.config.mtp_layers <= 0)
        cli_failf("%s: --mtp: the checkpoint carries no MTP block (its config names none, or "
                  "its tensors are absent)", ck.path);
    engine *e = load_engine(&o, &ck, o.mtp), *de = NULL;
    int32_t n_allowed = (int32_t)tok_vocab_size(t);
    if (n_allowed > engine_config(e)->n_vocab)
        n_allowed = (int32_t)engine_config(e)->n_vocab;
    spec_drafter *d = NULL;
    spec_trim *trim = NULL;
    int32_t *d2t = NULL, n_trim = 0;
    int assistant = 0;
    if (o.draft) {
        /* a drafter that reads the model's own state (gemma4_assistant)
         * runs on the model's engine, with no tokenizer of its own */
        if (checkpoint_open(o.draft, &dck, &err) != 0)
            cli_fail(&err);
        assistant = config_is_assistant(&dck.config);
        if (!assistant)
            checkpoint_close(&dck);
    }
    if (assistant) {
        if (o.trim)
            cli_usage("--trim goes with a draft model, not an assistant (%s)", o.draft);
        if (engine_attach_assistant(e, &dck, &err) != 0 || spec_drafter_mtp_new(e, &d, &err) != 0)
            cli_fail(&err);
    } else if (o.draft) {
        dt = open_model(o.draft, &dck);
        if (spec_check_vocab(t, dt, o.draft, &err) != 0)
            cli_fail(&err);
        de = load_engine(&o, &dck, 0);
        if (o.trim) {
            int32_t nv;
            if (ranks_read(o.trim, &d2t, &n_trim, &nv, &err) != 0)
                cli_fail(&err);
            if (nv != engine_config(e)->n_vocab)
                cli_failf("%s: the ranks were counted over a vocabulary of %d ids; %s has %lld",
                          o.trim, (int)nv, o.model, (long long)engine_config(e)->n_vocab);
            if (spec_trim_new(de, n_allowed, d2t, n_trim, &trim, &err) != 0 ||
                spec_drafter_model_new(de, n_allowed, trim, &d, &err) != 0)
                cli_failf("%s: %s", o.trim, err.msg);
        } else if (spec_drafter_model_new(de, n_allowed, NULL, &d, &err) != 0) {
            cli_fail(&err);
        }
    } else if (o.mtp) {
        if (spec_drafter_mtp_new(e, &d, &err) != 0)
            cli_fail(&err);
    } else if (spec_drafter_ngram_new(1, 3, &d, &err) != 0) {
        cli_fail(&err);
    }

    char *text;
    size_t len;
    if (o.prompt_file) {
        if (read_small_file(o.prompt_file, 64u << 20, &text, &len, &err) != 0)
            cli_fail(&err);
    } else {
        text = xstrdup(o.prompt ? o.prompt : DEFAULT_PROMPT);
        len = strlen(text);
    }
    int32_t *prompt;
    size_t n_prompt;
    if (tok_encode(t, text, len, 1, 0, &prompt, &n_prompt, &err) != 0)
        cli_fail(&err);
    free(text);

    /* Plain decoding: generate(), memra-gen's loop. */
    gen_params gp;
    gen_params_default(&gp);
    gp.n_predict = o.n_predict;
    gp.sampling.temperature = o.temp;
    gp.sampling.seed = o.seed;
    gp.sampling.penalty_last_n = 0;
    gp.ignore_eos = o.ignore_eos;
    gen_result plain;
    /* plain decoding at its own speed: the MTP block follows no step */
    engine_mtp_follow(e, 0);
    if (generate(e, t, prompt, n_prompt, &gp, NULL, NULL, &plain, &err) != 0)
        cli_fail(&err);
    engine_mtp_follow(e, 1);
    double plain_tps = tok_s(plain.n_tokens, plain.decode_ms);

    /* A K the backend cannot verify with plain decoding's bytes runs as
     * the most it can (spec_k_cap): said, not silent. */
    for (int i = 0; i < o.n_ks; i++)
        if (o.ks[i] > spec_k_cap(e))
            fprintf(stderr, "memra-spec: K = %d runs as K = %d: this backend verifies at most %d "
                            "draft tokens a round with plain decoding's bytes for this model\n",
                    o.ks[i], spec_k_cap(e), spec_k_cap(e));
    /* Speculative decoding for each K; greedy runs are checked against
     * plain greedy, sampled runs against a second run with the seed. */
    k_run runs[SPEC_K_MAX];
    int greedy = o.temp == 0, pass = 1;
    const char *why = NULL;
    for (int i = 0; i < o.n_ks; i++) {
        k_run *kr = &runs[i];
        kr->k = o.ks[i];
        spec_params sp;
        spec_params_default(&sp);
        sp.k = kr->k;
        sp.n_predict = o.n_predict;
        sp.sampling = gp.sampling;
        sp.ignore_eos = o.ignore_eos;
        if (spec_generate(e, t, d, prompt, n_prompt, &sp, &kr->r, &err) != 0)
            cli_failf("K=%d: %s", kr->k, err.msg);
        const int32_t *want = plain.tokens;
        size_t n_want = plain.n_tokens;
        spec_result again = {0};
        if (!greedy) {
            if (spec_generate(e, t, d, prompt, n_prompt, &sp, &again, &err) != 0)
                cli_failf("K=%d: %s", kr->k, err.msg);
            want = again.tokens;
            n_want = again.n_tokens;
        }
        kr->divergence = first_divergence(want, n_want, kr->r.tokens, kr->r.n_tokens);
        if (kr->divergence >= 0) {
            kr->want = (size_t)kr->divergence < n_want ? want[kr->divergence] : -1;
            kr->got = (size_t)kr->divergence < kr->r.n_tokens ? kr->r.tokens[kr->divergence] : -1;
            if (pass)
                why = "divergence";
            pass = 0;
        } else if (kr->r.accepted == 0) {
            if (pass)
                why = "acceptance";
            pass = 0;
        }
        spec_result_free(&again);
    }

    const char *drafter = o.draft ? o.draft : o.mtp ? "mtp" : "ngram";
    if (o.json) {
        json_t *j = json_object();
        json_object_set_new(j, "model", json_string(o.model));
        json_object_set_new(j, "drafter", json_string(d->kind));
        json_object_set_new(j, "draft", o.draft ? json_string(o.draft) : json_null());
        json_object_set_new(j, "trim", o.trim ? json_string(o.trim) : json_null());
        json_object_set_new(j, "trim_ids", json_integer(n_trim));
        json_object_set_new(j, "temperature", json_real(o.temp));
        json_object_set_new(j, "seed", json_integer((json_int_t)o.seed));
        json_object_set_new(j, "n_prompt", json_integer((json_int_t)n_prompt));
        json_object_set_new(j, "n_predict", json_integer(o.n_predict));
        json_object_set_new(j, "plain", json_pack("{s:I,s:f,s:f,s:f,s:s}", "tokens",
                                                  (json_int_t)plain.n_tokens, "prefill_ms",
                                                  plain.prefill_ms, "decode_ms", plain.decode_ms,
                                                  "tok_s", plain_tps, "text", plain.text));
        json_t *arr = json_array();
        for (int i = 0; i < o.n_ks; i++)
            json_array_append_new(arr, run_json(&runs[i], plain_tps));
        json_object_set_new(j, "runs", arr);
        json_object_set_new(j, "self_consistency", json_string(pass ? "PASS" : "FAIL"));
        char *s = json_dumps(j, JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
        json_decref(j);
    } else {
        printf("model %s, drafter %s", o.model, drafter);
        if (o.trim)
            printf(" (trimmed to %d ids by %s)", (int)n_trim, o.trim);
        printf(", prompt %zu tokens, %s\n", n_prompt,
               greedy ? "greedy" : "sampled (checked: seeded runs reproducible)");
        printf("plain: %zu tokens, %.1f tok/s\n", plain.n_tokens, plain_tps);
        printf("%3s %7s %8s %8s %10s %10s %8s %8s\n", "K", "rounds", "drafted", "accepted",
               "acceptance", "tok/round", "tok/s", "speedup");
        for (int i = 0; i < o.n_ks; i++) {
            const spec_result *r = &runs[i].r;
            double tps = tok_s(r->n_tokens, r->decode_ms);
            printf("%3d %7llu %8llu %8llu %10.3f %10.2f %8.1f %7.2fx\n", runs[i].k,
                   (unsigned long long)r->rounds, (unsigned long long)r->drafted,
                   (unsigned long long)r->accepted,
                   r->drafted ? (double)r->accepted / (double)r->drafted : 0.0,
                   r->rounds ? (double)(r->n_tokens - 1) / (double)r->rounds : 0.0, tps,
                   plain_tps > 0 ? tps / plain_tps : 0.0);
        }
    }
    /* The verdict: stdout carries it in the table; the failure's detail
     * goes to stderr as one line either way. */
    if (pass) {
        if (!o.json)
            puts("SELF-CONSISTENCY PASS");
    } else {
        for (int i = 0; i < o.n_ks; i++) {
            const k_run *kr = &runs[i];
            if (!strcmp(why, "divergence") && kr->divergence >= 0) {
                if (!o.json)
                    printf("FIRST DIVERGENCE at token %ld (K=%d)\n", kr->divergence, kr->k);
                fprintf(stderr,
                        "memra-spec: FIRST DIVERGENCE at token %ld (K=%d): %s %d, speculative "
                        "%d\n", kr->divergence, kr->k, greedy ? "plain" : "first seeded run",
                        (int)kr->want, (int)kr->got);
                break;
            }
            if (!strcmp(why, "acceptance") && kr->divergence < 0 && kr->r.accepted == 0) {
                if (!o.json)
                    printf("SELF-CONSISTENCY FAIL: K=%d accepted none of %llu drafted tokens\n",
                           kr->k, (unsigned long long)kr->r.drafted);
                fprintf(stderr, "memra-spec: K=%d: the drafter's %llu tokens were all "
                        "rejected (acceptance 0)\n", kr->k, (unsigned long long)kr->r.drafted);
                break;
            }
        }
    }
    fflush(stdout);
    for (int i = 0; i < o.n_ks; i++)
        spec_result_free(&runs[i].r);
    gen_result_free(&plain);
    free(prompt);
    spec_drafter_free(d);
    spec_trim_free(trim);
    free(d2t);
    engine_free(e);
    if (de)
        engine_free(de);
    tok_free(t);
    if (dt)
        tok_free(dt);
    if (dt || assistant)
        checkpoint_close(&dck);
    checkpoint_close(&ck);
    return pass ? 0 : 1;
}
