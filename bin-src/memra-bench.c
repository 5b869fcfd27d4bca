/* memra-bench: how fast the engine and the tokenizer run, against the
 * machine's ceiling. Argument parsing and output only: the measurements are
 * lib/engine/bench.c, the bandwidth probe and its cache lib/core/membw.c. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/cli.h"
#include "core/mapfile.h"
#include "core/membw.h"
#include "core/memstat.h"
#include "engine/bench.h"
#include "engine/engine.h"
#include "serve/loadgen.h"
#if MEMRA_CUDA
#include "backend/cuda/cuda_device.h"
#endif
#include "model/checkpoint.h"
#include "tok/tokenizer.h"

static const char usage[] =
    "usage: memra-bench MODEL [-p 512] [-n 128] [-d 0,512] [-b 1,8,32,64] [-r 5] [-t N]\n"
    "                         [--kv TYPE] [--json] [--backend cpu|cuda] [--device N] [options]\n"
    "       memra-bench MODEL --tokenizer [-f TEXT] [-r 5] [--json]\n"
    "       memra-bench --server URL [-c 1,8,32,64] [-p 512] [-n 128] [-r 5] [--model ALIAS]\n"
    "                         [--api-key KEY] [--json]\n"
    "\n"
    "Measures prefill (pp<P>: a P-token prompt from empty) and decode (tg<N>: N single-token\n"
    "steps after the KV cache is filled to each depth D, untimed) and batched decode (B\n"
    "sequences each prefilled with a P-token prompt, then N steps of one token each), with\n"
    "warm-up runs first and the median of r repetitions with min and max. Each row gives\n"
    "tok/s, ms/token, the GB/s of weights streamed, the % of the machine's ceiling (for\n"
    "--backend cpu the host memory read bandwidth, measured once and cached per host; for\n"
    "cuda the device's copy bandwidth) and the peak memory (host RSS; device memory in use).\n"
    "MODEL is a GGUF file, an HF checkpoint dir or hf:owner/repo[:file].\n"
    "\n"
    "  -p LIST             prompt lengths, e.g. 512 or 128,512 (default 512; 0: no prefill row)\n"
    "  -n LIST             decode steps per row (default 128; 0: no decode row)\n"
    "  -d LIST             KV depths for the decode rows (default 0,512; defaults that do not\n"
    "                      fit the context are skipped with a note, given ones are an error)\n"
    "  -b LIST             batched decode rows, one per batch size: B sequences prefilled\n"
    "                      with each -p prompt, then -n steps through engine_forward_batch\n"
    "  -r N                repetitions (default 5)    --warmup N  warm-up runs (default 1)\n"
    "  -t, --threads N     (default all cores; env MEMRA_THREADS)\n"
    "  -c, --ctx N         the context depth + n must fit (default the model's training context)\n"
    "  --n-batch N         prefill chunk in tokens (default the engine's: 512 on H100/H200,\n"
    "                      64 on other cards and the CPU)\n"
    "  --kv f32|f16|bf16|q8_0  KV cache type (default f32 on cpu, bf16 on cuda)\n"
    "  --backend cpu|cuda  (default cuda when a GPU is present, else cpu)\n"
    "  --device N          CUDA device index (default 0), for the run and the probe\n"
    "  --bandwidth GB/s    use this ceiling instead of the measured one\n"
    "  --remeasure         measure the bandwidth again (and update the cache)\n"
    "  --profile-range     the first timed repetition of each row inside a profiler range\n"
    "                      (cudaProfilerStart/Stop: ncu --profile-from-start off)\n"
    "  --tokenizer         tokenizer throughput on one thread: MB/s, tokens/s, bytes/token.\n"
    "                      MODEL may be a vocab-only GGUF or a dir holding just tokenizer.json\n"
    "  -f FILE             with --tokenizer: the text (default: a built-in ~1 MB mixed text)\n"
    "  --json              one JSON object (for scripts/bench-compare.jq)\n"
    "\n"
    "With --server URL, a load client against an OpenAI-compatible server (memra-serve):\n"
    "streamed /v1/completions requests of -p token ids (fresh per request) and -n tokens\n"
    "(ignore_eos), c at a time, each of the c streams sending -r requests back to back;\n"
    "per level: requests/s, aggregate tok/s, TTFT and inter-token latency p50/p99, errors;\n"
    "one warm-up request first, then the cold TTFT (one request alone).\n"
    "  -c LIST             concurrency levels (default 1,8,32,64)\n"
    "  --model ALIAS       the served model (default the first of GET /v1/models)\n"
    "  --api-key KEY       sent as a Bearer token (env MEMRA_API_KEY)\n"
    "  --vocab N           draw prompt ids below N (when /v1/models gives no vocab_size)\n"
    "  --timeout S         per request (default 600)\n"
    "  -h, --help          this text\n"
    "\n"
    "GB = 1e9 bytes, MB = 1e6 bytes. The bandwidth cache is $MEMRA_CACHE/bandwidth-<host>.json\n"
    "(MEMRA_CACHE defaults to ~/.cache/memra). Exit status: 0 ok, 1 failure, 2 bad usage.\n";

#define DEFAULT_TEXT_BYTES 1000000

/* Backends memra-bench knows of; `built` says whether the engine runs on
 * it today. The ceiling of each is its memory bandwidth: the host's read
 * bandwidth for cpu (lib/core/membw.c), the device's for cuda (to come with
 * the CUDA backend, from its device-copy probe). */
typedef enum { BACKEND_CPU = 0, BACKEND_CUDA = 1 } bench_backend;
static const struct {
    const char *name;
    int built;
    const char *ceiling_what;
} backends[] = {
    [BACKEND_CPU] = {"cpu", 1, "host memory read bandwidth"},
    [BACKEND_CUDA] = {"cuda", MEMRA_CUDA, "device memory bandwidth (16-byte copy probe)"},
};

typedef struct {
    int64_t *v;
    size_t n;
    int given;
} int_list;

typedef struct {
    const char *model, *text_file;
    int_list pp, tg, depths, batches;
    int reps, warmup, n_threads, n_batch, json, tokenizer, remeasure, profile_range;
    int64_t ctx;
    kv_type kv;
    int device, device_given;
    bench_backend backend;
    int backend_given;
    double bandwidth; /* > 0: given */
    /* flags that only the model bench takes, for a clear error with --tokenizer */
    const char *model_flag;
    /* --server: the load client */
    const char *server, *server_model, *api_key, *c_arg;
    int_list conc;
    double timeout_s;
    int64_t vocab;
    const char *local_flag;  /* a flag of the model or tokenizer bench */
    const char *server_flag; /* a flag of --server only */
} bench_opts;

static int64_t parse_int_or_usage(const char *s, int64_t lo, int64_t hi, const char *what)
{
    memra_err err;
    int64_t v;
    if (cli_parse_i64(s, lo, hi, &v, what, &err) != 0)
        cli_usage("%s", err.msg);
    return v;
}

/* "0,512" into a list; every entry in [lo, hi]. */
static void parse_list(const char *s, int64_t lo, int64_t hi, const char *what, int_list *out)
{
    free(out->v);
    out->v = NULL;
    out->n = 0;
    out->given = 1;
    char *copy = xstrdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        out->v = xrealloc(out->v, (out->n + 1) * sizeof *out->v);
        out->v[out->n++] = parse_int_or_usage(tok, lo, hi, what);
    }
    free(copy);
    if (out->n == 0)
        cli_usage("%s: the list '%s' is empty", what, s);
}

static void set_default_list(int_list *l, const int64_t *v, size_t n)
{
    l->v = xmalloc(n * sizeof *l->v);
    memcpy(l->v, v, n * sizeof *v);
    l->n = n;
    l->given = 0;
}

static void parse_args(int argc, char **argv, bench_opts *o)
{
    o->reps = 5;
    o->warmup = 1;
    o->kv = KV_DEFAULT;
    o->backend = BACKEND_CPU;
    const char *env = getenv("MEMRA_THREADS");
    if (env && *env)
        o->n_threads = (int)parse_int_or_usage(env, 1, 4096, "MEMRA_THREADS");
    enum {
        O_KV = 1000, O_JSON, O_BACKEND, O_BANDWIDTH, O_REMEASURE, O_TOKENIZER, O_WARMUP,
        O_NBATCH, O_SERVER, O_MODEL, O_APIKEY, O_TIMEOUT, O_VOCAB, O_DEVICE, O_PROFILE,
    };
    static const struct option longs[] = {
        {"threads", required_argument, NULL, 't'},   {"ctx", required_argument, NULL, 'c'},
        {"kv", required_argument, NULL, O_KV},       {"json", no_argument, NULL, O_JSON},
        {"backend", required_argument, NULL, O_BACKEND},
        {"bandwidth", required_argument, NULL, O_BANDWIDTH},
        {"remeasure", no_argument, NULL, O_REMEASURE},
        {"profile-range", no_argument, NULL, O_PROFILE},
        {"tokenizer", no_argument, NULL, O_TOKENIZER},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"n-batch", required_argument, NULL, O_NBATCH},
        {"device", required_argument, NULL, O_DEVICE},
        {"file", required_argument, NULL, 'f'},      {"help", no_argument, NULL, 'h'},
        {"server", required_argument, NULL, O_SERVER},
        {"model", required_argument, NULL, O_MODEL},
        {"api-key", required_argument, NULL, O_APIKEY},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"vocab", required_argument, NULL, O_VOCAB},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int ch;
    memra_err err;
    while ((ch = getopt_long(argc, argv, ":p:n:d:b:r:t:c:f:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'p': parse_list(optarg, 0, INT32_MAX, "-p", &o->pp); o->model_flag = "-p"; break;
        case 'n': parse_list(optarg, 0, INT32_MAX, "-n", &o->tg); o->model_flag = "-n"; break;
        case 'd':
            parse_list(optarg, 0, INT32_MAX, "-d", &o->depths);
            o->model_flag = o->local_flag = "-d";
            break;
        case 'b':
            parse_list(optarg, 1, 65536, "-b", &o->batches);
            o->model_flag = o->local_flag = "-b";
            break;
        case 'r': o->reps = (int)parse_int_or_usage(optarg, 1, 100000, "-r"); break;
        case O_WARMUP: o->warmup = (int)parse_int_or_usage(optarg, 0, 100000, "--warmup"); break;
        case 't':
            o->n_threads = (int)parse_int_or_usage(optarg, 1, 4096, "--threads");
            o->model_flag = o->local_flag = "--threads";
            break;
        case 'c': o->c_arg = optarg; break; /* --ctx, or with --server the concurrencies */
        case O_NBATCH:
            o->n_batch = (int)parse_int_or_usage(optarg, 1, 1 << 16, "--n-batch");
            o->model_flag = o->local_flag = "--n-batch";
            break;
        case O_KV:
            if (kv_type_parse(optarg, &o->kv, &err) != 0)
                cli_usage("--kv: %s", err.msg);
            o->model_flag = o->local_flag = "--kv";
            break;
        case O_DEVICE:
            o->device = (int)parse_int_or_usage(optarg, 0, 1024, "--device");
            o->device_given = 1;
            o->model_flag = "--device";
            break;
        case O_BACKEND: {
            int found = -1;
            for (size_t i = 0; i < MEMRA_ARRAY_LEN(backends); i++)
                if (!strcmp(optarg, backends[i].name))
                    found = (int)i;
            if (found < 0)
                cli_usage("--backend: '%s' is not cpu or cuda", optarg);
            if (!backends[found].built)
                cli_usage("--backend %s: this build has no CUDA (build with CUDA=1)", optarg);
            o->backend = (bench_backend)found;
            o->backend_given = 1;
            o->local_flag = "--backend";
            break;
        }
        case O_BANDWIDTH:
            if (cli_parse_f64(optarg, 1e-3, 1e6, &o->bandwidth, "--bandwidth", &err) != 0)
                cli_usage("%s", err.msg);
            o->model_flag = o->local_flag = "--bandwidth";
            break;
        case O_REMEASURE:
            o->remeasure = 1;
            o->model_flag = o->local_flag = "--remeasure";
            break;
        case O_PROFILE:
            o->profile_range = 1;
            o->model_flag = o->local_flag = "--profile-range";
            break;
        case O_TOKENIZER: o->tokenizer = 1; o->local_flag = "--tokenizer"; break;
        case 'f': o->text_file = optarg; o->local_flag = "-f"; break;
        case O_SERVER: o->server = optarg; break;
        case O_MODEL: o->server_model = optarg; o->server_flag = "--model"; break;
        case O_APIKEY: o->api_key = optarg; o->server_flag = "--api-key"; break;
        case O_TIMEOUT:
            if (cli_parse_f64(optarg, 0.001, 86400, &o->timeout_s, "--timeout", &err) != 0)
                cli_usage("%s", err.msg);
            o->server_flag = "--timeout";
            break;
        case O_VOCAB:
            o->vocab = parse_int_or_usage(optarg, 1, INT32_MAX, "--vocab");
            o->server_flag = "--vocab";
            break;
        case O_JSON: o->json = 1; break;
        case 'h': fputs(usage, stdout); exit(0);
        case ':': cli_usage("%s needs a value", argv[optind - 1]);
        default: cli_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (o->server) {
        if (o->local_flag)
            cli_usage("%s goes with the model or tokenizer bench, not --server", o->local_flag);
        char *base;
        if (loadgen_base_url(o->server, &base, &err) != 0)
            cli_usage("%s", err.msg);
        free(base);
        if (optind < argc)
            cli_usage("--server takes no MODEL ('%s': the server has its models; --model "
                      "ALIAS picks one)", argv[optind]);
        static const int64_t def_c[] = {1, 8, 32, 64}, one_pp[] = {512}, one_tg[] = {128};
        if (o->c_arg)
            parse_list(o->c_arg, 1, 4096, "-c", &o->conc);
        else
            set_default_list(&o->conc, def_c, 4);
        if (!o->pp.given)
            set_default_list(&o->pp, one_pp, 1);
        if (!o->tg.given)
            set_default_list(&o->tg, one_tg, 1);
        if (o->pp.n != 1 || o->pp.v[0] < 1)
            cli_usage("-p: --server takes one prompt length, at least 1");
        if (o->tg.n != 1 || o->tg.v[0] < 1)
            cli_usage("-n: --server takes one number of tokens to generate, at least 1");
        if (!o->api_key) {
            const char *k = getenv("MEMRA_API_KEY");
            o->api_key = k && *k ? k : NULL;
        }
        return;
    }
    if (o->server_flag)
        cli_usage("%s goes with --server", o->server_flag);
    if (o->c_arg) {
        o->ctx = parse_int_or_usage(o->c_arg, 1, INT32_MAX, "--ctx");
        o->model_flag = "--ctx";
    }
    if (optind >= argc)
        cli_usage("no MODEL given");
    if (optind + 1 < argc)
        cli_usage("unexpected argument '%s'", argv[optind + 1]);
    o->model = argv[optind];
    if (o->tokenizer && o->model_flag)
        cli_usage("%s goes with the model bench, not --tokenizer (which runs on one thread)",
                  o->model_flag);
    if (o->text_file && !o->tokenizer)
        cli_usage("-f goes with --tokenizer");
    /* A naked command measures the card when there is one. */
#if MEMRA_CUDA
    if (!o->backend_given && !o->tokenizer && (o->device_given || cuda_device_count() > 0))
        o->backend = BACKEND_CUDA;
#endif
    if (o->device_given && o->backend != BACKEND_CUDA)
        cli_usage("--device %d: the cpu backend has no devices (use --backend cuda)", o->device);
    static const int64_t def_pp[] = {512}, def_tg[] = {128}, def_depths[] = {0, 512};
    if (!o->pp.given)
        set_default_list(&o->pp, def_pp, 1);
    if (!o->tg.given)
        set_default_list(&o->tg, def_tg, 1);
    if (!o->depths.given)
        set_default_list(&o->depths, def_depths, 2);
    int any_pp = 0, any_tg = 0;
    for (size_t i = 0; i < o->pp.n; i++)
        any_pp |= o->pp.v[i] > 0;
    for (size_t i = 0; i < o->tg.n; i++)
        any_tg |= o->tg.v[i] > 0;
    if (!o->tokenizer && !any_pp && !any_tg)
        cli_usage("-p 0 and -n 0: nothing to measure");
    if (o->batches.n && !any_tg)
        cli_usage("-b needs decode steps: -n 0 leaves the batched rows nothing to run");
    if (o->n_threads <= 0)
        o->n_threads = membw_online_cpus();
}

static void human_bytes(uint64_t b, char *out, size_t n)
{
    if (b >= 1000000000ull)
        snprintf(out, n, "%.2f GB", b / 1e9);
    else if (b >= 1000000ull)
        snprintf(out, n, "%.2f MB", b / 1e6);
    else if (b >= 1000ull)
        snprintf(out, n, "%.1f kB", b / 1e3);
    else
        snprintf(out, n, "%" PRIu64 " B", b);
}

static json_t *host_json(void)
{
    char cpu[128], host[128];
    membw_cpu_model(cpu, sizeof cpu);
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "unknown");
    host[sizeof host - 1] = '\0';
    return json_pack("{s:s,s:s,s:i}", "hostname", host, "cpu", cpu, "n_cpus",
                     membw_online_cpus());
}

static void print_json(json_t *j)
{
    char *s = json_dumps(j, JSON_PRESERVE_ORDER | JSON_INDENT(2) | JSON_REAL_PRECISION(10));
    puts(s);
    free(s);
}

/* ---- the model bench ---- */

typedef struct {
    char test[32];      /* "pp512", "tg128" */
    int decode;         /* a decode row (batch 1 or batched) */
    int batched;        /* a -b row: B sequences through engine_forward_batch */
    int batch;          /* sequences per step */
    int64_t n_prompt, n_gen, depth, tokens;
    bench_stats ms;     /* per repetition: the whole prompt, or all n_gen steps */
    double tok_s, tok_s_min, tok_s_max, ms_per_token, gb_s, pct;
    double tok_s_per_seq, ms_per_step; /* batched rows */
    uint64_t peak_mem;  /* bytes: the row's peak RSS (cpu) or device memory in use (cuda) */
} bench_row;

/* From the repetition times to the reported figures: every rate comes from
 * the median time, so ms/token = 1000 / tok/s exactly. */
static void finish_row(bench_row *r, uint64_t bytes_per_token, double ceiling_gbs)
{
    r->tok_s = r->tokens * 1e3 / r->ms.median;
    r->tok_s_min = r->tokens * 1e3 / r->ms.max;
    r->tok_s_max = r->tokens * 1e3 / r->ms.min;
    r->ms_per_token = r->ms.median / r->tokens;
    r->ms_per_step = r->decode ? r->ms.median / r->n_gen : r->ms.median;
    r->tok_s_per_seq = r->decode ? r->n_gen * 1e3 / r->ms.median : r->tok_s;
    /* decode: the weights stream once per step, whatever the batch (each
     * weight is read once for all the step's rows: the floor); prefill:
     * once per prompt as the floor (the CPU backend reads them once per
     * n_batch chunk). */
    r->gb_s = r->decode ? bytes_per_token * (r->n_gen * 1e3 / r->ms.median) / 1e9
                        : bytes_per_token / (r->ms.median / 1e3) / 1e9;
    r->pct = ceiling_gbs > 0 ? 100 * r->gb_s / ceiling_gbs : 0;
}

static json_t *row_json(const bench_row *r)
{
    json_t *j = json_object();
    json_object_set_new(j, "test", json_string(r->test));
    json_object_set_new(j, "kind", json_string(r->batched  ? "batch"
                                               : r->decode ? "decode"
                                                           : "prefill"));
    json_object_set_new(j, "n_prompt", json_integer(r->n_prompt));
    json_object_set_new(j, "n_gen", json_integer(r->n_gen));
    json_object_set_new(j, "depth", json_integer(r->depth));
    json_object_set_new(j, "batch", json_integer(r->batch));
    json_object_set_new(j, "tokens", json_integer(r->tokens));
    json_object_set_new(j, "tok_s", json_real(r->tok_s));
    json_object_set_new(j, "tok_s_min", json_real(r->tok_s_min));
    json_object_set_new(j, "tok_s_max", json_real(r->tok_s_max));
    json_object_set_new(j, "ms_per_token", json_real(r->ms_per_token));
    if (r->decode) {
        json_object_set_new(j, "tok_s_per_seq", json_real(r->tok_s_per_seq));
        json_object_set_new(j, "ms_per_step", json_real(r->ms_per_step));
    }
    json_object_set_new(j, "ms", json_pack("{s:f,s:f,s:f,s:f}", "median", r->ms.median, "min",
                                           r->ms.min, "max", r->ms.max, "mean", r->ms.mean));
    json_object_set_new(j, "gb_s", json_real(r->gb_s));
    json_object_set_new(j, "pct_ceiling", json_real(r->pct));
    json_object_set_new(j, "peak_mem_bytes", json_integer((json_int_t)r->peak_mem));
    return j;
}

static void row_label(const bench_row *r, char *out, size_t n)
{
    if (r->batched)
        snprintf(out, n, "%s b%d @ d%" PRId64, r->test, r->batch, r->depth);
    else if (r->decode)
        snprintf(out, n, "%s @ d%" PRId64, r->test, r->depth);
    else
        snprintf(out, n, "%s", r->test);
}

/* Three significant digits or more: small models give small GB/s, the
 * H200 thousands. */
static void fmt_num(double v, char *out, size_t n)
{
    if (v >= 100)
        snprintf(out, n, "%.1f", v);
    else if (v >= 1)
        snprintf(out, n, "%.2f", v);
    else
        snprintf(out, n, "%.3g", v);
}

static void fmt_mem(uint64_t b, char *out, size_t n)
{
    if (b >= 1000000000ull)
        snprintf(out, n, "%.2f GB", b / 1e9);
    else
        snprintf(out, n, "%.1f MB", b / 1e6);
}

static void print_row(const bench_row *r)
{
    char label[64], toks[128], a[32], b[32], c[32], gbs[32], pct[32], mem[32];
    row_label(r, label, sizeof label);
    fmt_num(r->tok_s, a, sizeof a);
    fmt_num(r->tok_s_min, b, sizeof b);
    fmt_num(r->tok_s_max, c, sizeof c);
    snprintf(toks, sizeof toks, "%s [%s, %s]", a, b, c);
    fmt_num(r->gb_s, gbs, sizeof gbs);
    fmt_num(r->pct, pct, sizeof pct);
    fmt_mem(r->peak_mem, mem, sizeof mem);
    printf("| %-16s | %32s | %9.3f | %8s | %9s | %10s |\n", label, toks, r->ms_per_token, gbs,
           pct, mem);
    fflush(stdout);
}

static void print_batch_header(void)
{
    printf("\n| %-20s | %34s | %13s | %9s | %8s | %9s | %10s |\n", "batched decode",
           "aggregate tok/s median [min, max]", "tok/s per seq", "ms/step", "GB/s",
           "% ceiling", "peak mem");
    printf("|----------------------|------------------------------------|---------------|"
           "-----------|----------|-----------|------------|\n");
}

static void print_batch_row(const bench_row *r)
{
    char label[64], toks[128], a[32], b[32], c[32], per[32], gbs[32], pct[32], mem[32];
    row_label(r, label, sizeof label);
    fmt_num(r->tok_s, a, sizeof a);
    fmt_num(r->tok_s_min, b, sizeof b);
    fmt_num(r->tok_s_max, c, sizeof c);
    snprintf(toks, sizeof toks, "%s [%s, %s]", a, b, c);
    fmt_num(r->tok_s_per_seq, per, sizeof per);
    fmt_num(r->gb_s, gbs, sizeof gbs);
    fmt_num(r->pct, pct, sizeof pct);
    fmt_mem(r->peak_mem, mem, sizeof mem);
    printf("| %-20s | %34s | %13s | %9.3f | %8s | %9s | %10s |\n", label, toks, per,
           r->ms_per_step, gbs, pct, mem);
    fflush(stdout);
}

/* Peak memory per row: on a backend with device memory, what the device
 * has in use after the row (the CUDA backend's buffers only grow between
 * steps, so that is the row's high-water mark); else the process's peak
 * RSS, its mark reset before each row where the kernel allows. */
typedef struct {
    backend *bk;
    int device;       /* the backend reports device memory */
    int per_row;      /* host: the peak is reset before each row */
    uint64_t total;   /* device: its memory */
    uint64_t peak;    /* the run's */
    char note[1200];  /* host: why the peak is the process's, when it is */
} mem_probe;

static void mem_probe_init(mem_probe *m, backend *bk)
{
    memset(m, 0, sizeof *m);
    m->bk = bk;
    memra_err err;
    uint64_t used;
    int rc = backend_mem_stats(bk, &used, &m->total, &err);
    if (rc < 0)
        cli_fail(&err);
    m->device = rc == 0;
    if (!m->device) {
        m->per_row = memstat_reset_peak(&err) == 0;
        if (!m->per_row)
            snprintf(m->note, sizeof m->note, "the process's peak since it started (cannot "
                     "reset it: %s)", err.msg);
    }
}

static void mem_row_begin(mem_probe *m)
{
    memra_err err;
    if (!m->device && m->per_row)
        memstat_reset_peak(&err);
}

static uint64_t mem_row_end(mem_probe *m)
{
    memra_err err;
    uint64_t a, b;
    if (m->device) {
        if (backend_mem_stats(m->bk, &a, &b, &err) != 0)
            cli_fail(&err);
    } else if (memstat_rss(&b, &a, &err) != 0) {
        cli_fail(&err);
    }
    if (a > m->peak)
        m->peak = a;
    return a;
}

typedef struct {
    double gb_s;
    const char *source; /* "given", "measured", "cache" */
    char detail[1400];
    membw_ceiling mc;
} ceiling_info;

/* The ceiling of the chosen backend: --bandwidth, else its probe. */
static void get_ceiling(const bench_opts *o, ceiling_info *c)
{
    memset(c, 0, sizeof *c);
    if (o->bandwidth > 0) {
        c->gb_s = o->bandwidth;
        c->source = "given";
        snprintf(c->detail, sizeof c->detail, "given with --bandwidth");
        return;
    }
    memra_err err;
    switch (o->backend) {
    case BACKEND_CPU: {
        char path[1024];
        int cached = 0;
        if (!o->remeasure && membw_cache_path(path, sizeof path, &err) == 0 &&
            access(path, F_OK) == 0)
            cached = 1;
        if (!cached)
            fprintf(stderr, "memra-bench: measuring the host memory read bandwidth once "
                    "(a few seconds; cached per host)\n");
        if (membw_host_ceiling(o->remeasure, 0, &c->mc, &err) != 0)
            cli_fail(&err);
        if (c->mc.note[0])
            fprintf(stderr, "memra-bench: note: %s\n", c->mc.note);
        c->gb_s = c->mc.r.gb_s;
        c->source = c->mc.from_cache ? "cache" : "measured";
        snprintf(c->detail, sizeof c->detail, "%s %s, %d threads, %.0f MiB, best of %d; %s %s",
                 c->mc.from_cache ? "measured" : "measured now,", c->mc.r.measured_at,
                 c->mc.r.n_threads, c->mc.r.buffer_bytes / 1048576.0, c->mc.r.reps,
                 c->mc.from_cache ? "cached in" : "saved to", c->mc.path);
        break;
    }
    case BACKEND_CUDA: {
#if MEMRA_CUDA
        /* The device's 16-byte copy rate (read + write counted), measured
         * now: a second on a card, cheaper than a cache keyed on devices. */
        cuda_device_info info;
        if (cuda_device_query(o->device, &info, &err) != 0 ||
            cuda_measure_copy_bandwidth(o->device, (size_t)1 << 30, 20, &c->gb_s, &err) != 0)
            cli_fail(&err);
        c->source = "measured";
        snprintf(c->detail, sizeof c->detail,
                 "%s (class %s): 16-byte copy of 1 GiB, 20 reps, read + write counted", info.name,
                 device_class_name(info.klass));
#else
        MEMRA_ASSERT(0); /* parse_args refuses cuda in a build without it */
#endif
        break;
    }
    }
}

/* Bytes by dtype over every tensor, and the dtype holding the most. */
static json_t *dtype_bytes(const checkpoint *ck, const char **main_dtype, uint64_t *total)
{
    struct {
        dtype id;
        uint64_t bytes;
    } by[64];
    int n = 0;
    *total = 0;
    for (int i = 0; i < ck->n_tensors; i++) {
        const tensor_view *t = &ck->tensors[i];
        int k = 0;
        while (k < n && by[k].id != t->type)
            k++;
        if (k == n) {
            if (n == (int)MEMRA_ARRAY_LEN(by))
                continue; /* more dtypes than exist: cannot happen */
            by[n].id = t->type;
            by[n++].bytes = 0;
        }
        by[k].bytes += t->nbytes;
        *total += t->nbytes;
    }
    json_t *j = json_object();
    uint64_t best = 0;
    *main_dtype = "none";
    for (int k = 0; k < n; k++) {
        const dtype_info *d = dtype_get(by[k].id);
        const char *name = d ? d->name : "unknown";
        json_object_set_new(j, name, json_integer((json_int_t)by[k].bytes));
        if (by[k].bytes > best) {
            best = by[k].bytes;
            *main_dtype = name;
        }
    }
    return j;
}

static int run_model_bench(const bench_opts *o)
{
    memra_err err;
    checkpoint ck;
    if (checkpoint_open(o->model, &ck, &err) != 0)
        cli_fail(&err);
    if (ck.vocab_only)
        cli_failf("%s: a vocab-only GGUF has no weights to run (use --tokenizer)", ck.path);
    const model_config *cfg = &ck.config;

    /* What must fit the context: each prompt, and each depth + n. Depths
     * from the default list that do not fit are skipped, with a note. */
    int64_t limit = o->ctx > 0 ? o->ctx : cfg->n_ctx_train;
    const char *limit_what =
        o->ctx > 0 ? "--ctx" : "the model's training context; --ctx N raises it";
    int64_t need = 1;
    int64_t *pps = xmalloc(o->pp.n * sizeof *pps);
    size_t n_pps = 0;
    for (size_t i = 0; i < o->pp.n; i++) {
        int64_t p = o->pp.v[i];
        if (p == 0)
            continue;
        if (limit > 0 && p > limit) {
            if (o->pp.given)
                cli_usage("-p %" PRId64 ": the prompt does not fit the context of %" PRId64
                          " (%s)", p, limit, limit_what);
            fprintf(stderr, "memra-bench: note: default prompt length %" PRId64 " skipped: it "
                    "does not fit the context of %" PRId64 " (%s)\n", p, limit, limit_what);
            continue;
        }
        pps[n_pps++] = p;
        need = p > need ? p : need;
    }
    int64_t *depths = xmalloc(o->depths.n * sizeof *depths);
    size_t n_depths = 0;
    for (size_t k = 0; k < o->depths.n; k++) {
        int64_t d = o->depths.v[k];
        int fits = 1;
        for (size_t i = 0; i < o->tg.n; i++) {
            int64_t n = o->tg.v[i];
            if (n == 0 || limit <= 0 || d + n <= limit)
                continue;
            if (o->depths.given || (d == 0 && o->tg.given))
                cli_usage("depth %" PRId64 " + %" PRId64 " decode tokens = %" PRId64
                          " does not fit the context of %" PRId64 " (%s)", d, n, d + n, limit,
                          limit_what);
            fits = 0;
        }
        if (!fits) {
            fprintf(stderr, "memra-bench: note: default depth %" PRId64 " skipped: it does "
                    "not fit the context of %" PRId64 " (%s) with the decode steps\n", d, limit,
                    limit_what);
            continue;
        }
        depths[n_depths++] = d;
        for (size_t i = 0; i < o->tg.n; i++)
            if (o->tg.v[i] > 0)
                need = d + o->tg.v[i] > need ? d + o->tg.v[i] : need;
    }

    /* Batched rows: each -p prompt (0: empty sequences) + each -n must fit;
     * a default prompt length that does not is skipped, with a note. */
    int64_t *bprompts = xmalloc(o->pp.n * sizeof *bprompts);
    size_t n_bprompts = 0;
    int max_b = 1;
    for (size_t k = 0; k < o->batches.n; k++)
        max_b = o->batches.v[k] > max_b ? (int)o->batches.v[k] : max_b;
    for (size_t k = 0; o->batches.n && k < o->pp.n; k++) {
        int64_t p = o->pp.v[k];
        int fits = 1;
        for (size_t i = 0; i < o->tg.n; i++) {
            int64_t n = o->tg.v[i];
            if (n == 0 || limit <= 0 || p + n <= limit)
                continue;
            if (o->pp.given)
                cli_usage("-b: prompt %" PRId64 " + %" PRId64 " decode tokens = %" PRId64
                          " does not fit the context of %" PRId64 " (%s)", p, n, p + n, limit,
                          limit_what);
            fits = 0;
        }
        if (!fits) {
            fprintf(stderr, "memra-bench: note: default prompt length %" PRId64 " skipped for "
                    "the batched rows: it does not fit the context of %" PRId64 " (%s) with the "
                    "decode steps\n", p, limit, limit_what);
            continue;
        }
        bprompts[n_bprompts++] = p;
        for (size_t i = 0; i < o->tg.n; i++)
            if (o->tg.v[i] > 0)
                need = p + o->tg.v[i] > need ? p + o->tg.v[i] : need;
    }
    if (o->batches.n && n_bprompts == 0)
        cli_usage("-b: no prompt length leaves room for the decode steps in the context of "
                  "%" PRId64 " (%s); give -p", limit, limit_what);

    int any_tg = 0;
    for (size_t i = 0; i < o->tg.n; i++)
        any_tg |= o->tg.v[i] > 0;
    if (n_pps == 0 && (n_depths == 0 || !any_tg) && n_bprompts == 0)
        cli_usage("nothing to measure: no row fits the context of %" PRId64 " (%s)", limit,
                  limit_what);

    ceiling_info ceil;
    get_ceiling(o, &ceil);

    engine_opts eo;
    engine_opts_default(&eo);
    eo.n_threads = o->n_threads;
    eo.backend = o->backend == BACKEND_CUDA ? BK_CUDA : BK_CPU;
    eo.n_ctx = need;
    eo.kv_type = o->kv;
    eo.device = o->device;
    eo.n_batch = o->n_batch;
    eo.n_seqs = max_b;
    /* The KV pool: the longest single row, or max_b sequences of the
     * longest batched row, whichever is more (not max_b x the longest
     * row: a depth of 32768 beside -b 64 would ask for 64 x 32768). */
    int64_t bneed = 0;
    for (size_t k = 0; k < n_bprompts; k++)
        for (size_t i = 0; i < o->tg.n; i++)
            if (o->tg.v[i] > 0 && bprompts[k] + o->tg.v[i] > bneed)
                bneed = bprompts[k] + o->tg.v[i];
    eo.kv_tokens = bneed * max_b > need ? bneed * max_b : need;
    engine *e;
    if (engine_load(&ck, &eo, &e, &err) != 0)
        cli_fail(&err);
    engine_seq **seqs = xmalloc((size_t)max_b * sizeof *seqs);
    for (int i = 0; i < max_b; i++)
        if (engine_seq_new(e, &seqs[i], &err) != 0)
            cli_fail(&err);
    engine_seq *s = seqs[0];
    if (o->profile_range)
        bench_profile(e);
    mem_probe mem;
    mem_probe_init(&mem, engine_model(e)->bk);
    const char *mem_what = mem.device ? "device memory in use (cudaMemGetInfo: total - free)"
                                      : "peak resident set of this process (VmHWM)";
    uint64_t bpt = engine_bytes_per_token(e);
    const char *main_dtype;
    uint64_t weight_bytes;
    json_t *dtypes = dtype_bytes(&ck, &main_dtype, &weight_bytes);
    char date[32];
    membw_utc_now(date, sizeof date);
    int n_batch = engine_n_batch(e);
    const char *kv_name = kv_type_name(engine_kv_type(e));
    const char *fmt = ck.format == CKPT_GGUF ? "gguf" : "hf";
    double ceiling_tok_s = ceil.gb_s * 1e9 / (double)bpt;

    json_t *host = host_json();
    if (!o->json) {
        char hb[32], wb[32];
        human_bytes(bpt, hb, sizeof hb);
        human_bytes(weight_bytes, wb, sizeof wb);
        printf("memra-bench %s\n", date);
        printf("model     %s: %s, %s, %s (%s of weights); %" PRId64 " layers, dim %" PRId64
               ", vocab %" PRId64 "\n", ck.path, family_name(cfg->family), fmt, main_dtype, wb,
               cfg->n_layers, cfg->dim, cfg->n_vocab);
        printf("streams   %s per decode token\n", hb);
        printf("backend   %s, %d threads, kv %s, prefill chunk %d, context %" PRId64
               " allocated x %d sequence%s\n", backends[o->backend].name, o->n_threads, kv_name,
               n_batch, engine_n_ctx(e), max_b, max_b == 1 ? "" : "s");
        printf("ceiling   %.2f GB/s %s (%s); decode ceiling %.1f tok/s\n", ceil.gb_s,
               backends[o->backend].ceiling_what, ceil.detail, ceiling_tok_s);
        printf("cpu       %s (%d online CPUs)\n",
               json_string_value(json_object_get(host, "cpu")), membw_online_cpus());
        printf("timing    %d warm-up, median of %d [min, max]; GB/s: decode = bytes/token x "
               "tok/s, prefill = weight bytes / prompt time\n", o->warmup, o->reps);
        if (mem.device) {
            char tb[32];
            fmt_mem(mem.total, tb, sizeof tb);
            printf("memory    %s, of %s\n\n", mem_what, tb);
        } else {
            printf("memory    %s%s%s\n\n", mem_what, mem.per_row ? ", reset before each row"
                                                               : ": ", mem.note);
        }
        printf("| %-16s | %32s | %9s | %8s | %9s | %10s |\n", "test", "tok/s median [min, max]",
               "ms/token", "GB/s", "% ceiling", "peak mem");
        printf("|%.18s|%.34s|%.11s|%.10s|%.11s|%.12s|\n", "------------------------------------",
               "------------------------------------", "------------------------------------",
               "------------------------------------", "------------------------------------",
               "------------------------------------");
        fflush(stdout);
    }

    json_t *rows = json_array();
    uint64_t seed = 1;
    for (size_t i = 0; i < n_pps; i++) {
        bench_row r = {.n_prompt = pps[i], .tokens = pps[i], .batch = 1};
        snprintf(r.test, sizeof r.test, "pp%" PRId64, r.n_prompt);
        mem_row_begin(&mem);
        if (bench_prefill(e, s, (int)r.n_prompt, o->warmup, o->reps, seed, &r.ms, &err) != 0)
            cli_fail(&err);
        r.peak_mem = mem_row_end(&mem);
        finish_row(&r, bpt, ceil.gb_s);
        json_array_append_new(rows, row_json(&r));
        if (!o->json)
            print_row(&r);
    }
    for (size_t i = 0; i < o->tg.n; i++) {
        if (o->tg.v[i] == 0)
            continue;
        for (size_t k = 0; k < n_depths; k++) {
            bench_row r = {.decode = 1, .n_gen = o->tg.v[i], .depth = depths[k],
                           .tokens = o->tg.v[i], .batch = 1};
            snprintf(r.test, sizeof r.test, "tg%" PRId64, r.n_gen);
            mem_row_begin(&mem);
            if (bench_decode(e, s, r.depth, (int)r.n_gen, o->warmup, o->reps, seed, &r.ms,
                             &err) != 0)
                cli_fail(&err);
            r.peak_mem = mem_row_end(&mem);
            finish_row(&r, bpt, ceil.gb_s);
            json_array_append_new(rows, row_json(&r));
            if (!o->json)
                print_row(&r);
        }
    }
    int batch_header = 0;
    for (size_t i = 0; i < o->tg.n; i++) {
        if (o->tg.v[i] == 0)
            continue;
        for (size_t k = 0; k < n_bprompts; k++) {
            for (size_t j = 0; j < o->batches.n; j++) {
                int b = (int)o->batches.v[j];
                bench_row r = {.decode = 1, .batched = 1, .batch = b, .n_gen = o->tg.v[i],
                               .n_prompt = bprompts[k], .depth = bprompts[k],
                               .tokens = o->tg.v[i] * b};
                snprintf(r.test, sizeof r.test, "tg%" PRId64, r.n_gen);
                mem_row_begin(&mem);
                if (bench_decode_batch(e, seqs, b, r.n_prompt, (int)r.n_gen, o->warmup, o->reps,
                                       seed, &r.ms, &err) != 0)
                    cli_fail(&err);
                r.peak_mem = mem_row_end(&mem);
                finish_row(&r, bpt, ceil.gb_s);
                json_array_append_new(rows, row_json(&r));
                if (!o->json) {
                    if (!batch_header++)
                        print_batch_header();
                    print_batch_row(&r);
                }
            }
        }
    }

    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "program", json_string("memra-bench"));
        json_object_set_new(j, "mode", json_string("model"));
        json_object_set_new(j, "date", json_string(date));
        json_object_set_new(j, "host", json_incref(host));
        json_t *m = json_object();
        json_object_set_new(m, "path", json_string(ck.path));
        json_object_set_new(m, "family", json_string(family_name(cfg->family)));
        json_object_set_new(m, "format", json_string(fmt));
        json_object_set_new(m, "dtype", json_string(main_dtype));
        json_object_set_new(m, "dtype_bytes", dtypes);
        dtypes = NULL;
        json_object_set_new(m, "weight_bytes", json_integer((json_int_t)weight_bytes));
        json_object_set_new(m, "bytes_per_token", json_integer((json_int_t)bpt));
        json_object_set_new(m, "n_layers", json_integer(cfg->n_layers));
        json_object_set_new(m, "dim", json_integer(cfg->dim));
        json_object_set_new(m, "n_vocab", json_integer(cfg->n_vocab));
        json_object_set_new(m, "n_ctx_train", json_integer(cfg->n_ctx_train));
        json_object_set_new(j, "model", m);
        json_object_set_new(j, "backend", json_string(backends[o->backend].name));
        json_object_set_new(j, "threads", json_integer(o->n_threads));
        json_object_set_new(j, "kv_type", json_string(kv_name));
        json_object_set_new(j, "n_batch", json_integer(n_batch));
        json_object_set_new(j, "n_ctx", json_integer(engine_n_ctx(e)));
        json_object_set_new(j, "n_seqs", json_integer(max_b));
        json_t *mj = json_object();
        json_object_set_new(mj, "what", json_string(mem.device ? "device" : "host_rss"));
        json_object_set_new(mj, "source", json_string(mem.device ? "cudaMemGetInfo" : "VmHWM"));
        json_object_set_new(mj, "peak_bytes", json_integer((json_int_t)mem.peak));
        if (mem.device)
            json_object_set_new(mj, "device_total_bytes", json_integer((json_int_t)mem.total));
        else
            json_object_set_new(mj, "per_row", json_boolean(mem.per_row));
        json_object_set_new(j, "memory", mj);
        json_t *cj = json_object();
        json_object_set_new(cj, "gb_s", json_real(ceil.gb_s));
        json_object_set_new(cj, "what", json_string(backends[o->backend].ceiling_what));
        json_object_set_new(cj, "source", json_string(ceil.source));
        if (strcmp(ceil.source, "given") != 0) {
            json_object_set_new(cj, "cache_file", json_string(ceil.mc.path));
            json_object_set_new(cj, "measured_at", json_string(ceil.mc.r.measured_at));
            json_object_set_new(cj, "probe_threads", json_integer(ceil.mc.r.n_threads));
            json_object_set_new(cj, "probe_buffer_bytes",
                                json_integer((json_int_t)ceil.mc.r.buffer_bytes));
            json_object_set_new(cj, "probe_reps", json_integer(ceil.mc.r.reps));
        }
        json_object_set_new(cj, "decode_tok_s", json_real(ceiling_tok_s));
        json_object_set_new(j, "ceiling", cj);
        json_object_set_new(j, "warmup", json_integer(o->warmup));
        json_object_set_new(j, "reps", json_integer(o->reps));
        json_object_set_new(j, "rows", rows);
        rows = NULL;
        print_json(j);
        json_decref(j);
    }
    json_decref(rows);
    json_decref(dtypes);
    json_decref(host);
    free(depths);
    free(pps);
    free(bprompts);
    for (int i = 0; i < max_b; i++)
        engine_seq_free(seqs[i]);
    free(seqs);
    engine_free(e);
    checkpoint_close(&ck);
    return 0;
}

/* ---- the tokenizer bench ---- */

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int file_exists_in(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

static int run_tokenizer_bench(const bench_opts *o)
{
    memra_err err;
    tokenizer *t;
    checkpoint ck;
    int have_ck = 0;
    const char *loaded_from;
    /* A dir with tokenizer.json but no config.json is no checkpoint, yet
     * it is all a tokenizer needs (scripts/fetch-tokenizers.sh makes them). */
    if (is_dir(o->model) && file_exists_in(o->model, "tokenizer.json") &&
        !file_exists_in(o->model, "config.json")) {
        if (tok_load_hf_dir(o->model, &t, &err) != 0)
            cli_fail(&err);
        loaded_from = "tokenizer.json";
    } else {
        if (checkpoint_open(o->model, &ck, &err) != 0)
            cli_fail(&err);
        have_ck = 1;
        if (tok_load_checkpoint(&ck, &t, &err) != 0)
            cli_fail(&err);
        loaded_from = ck.format == CKPT_GGUF ? "GGUF tokenizer.* keys" : "tokenizer.json";
    }
    char *text;
    size_t len;
    const char *text_what;
    if (o->text_file) {
        if (read_small_file(o->text_file, 1u << 30, &text, &len, &err) != 0)
            cli_fail(&err);
        text_what = o->text_file;
    } else {
        text = bench_mixed_text(DEFAULT_TEXT_BYTES, &len);
        text_what = bench_mixed_text_description();
    }
    if (len == 0)
        cli_failf("%s: the text is empty", o->text_file ? o->text_file : "built-in text");
    bench_stats ms;
    size_t n_tokens;
    if (bench_tokenize(t, text, len, o->warmup, o->reps, &ms, &n_tokens, &err) != 0)
        cli_fail(&err);
    double mb_s = len / (ms.median / 1e3) / 1e6;
    double mb_s_min = len / (ms.max / 1e3) / 1e6, mb_s_max = len / (ms.min / 1e3) / 1e6;
    double tokens_s = n_tokens / (ms.median / 1e3);
    double bytes_per_token = n_tokens ? (double)len / n_tokens : 0;
    const char *kind = tok_get_kind(t) == TOK_SPM ? "sentencepiece-bpe" : "byte-level-bpe";
    char date[32];
    membw_utc_now(date, sizeof date);
    json_t *host = host_json();
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "program", json_string("memra-bench"));
        json_object_set_new(j, "mode", json_string("tokenizer"));
        json_object_set_new(j, "date", json_string(date));
        json_object_set_new(j, "host", json_incref(host));
        json_object_set_new(j, "tokenizer",
                            json_pack("{s:s,s:s,s:s,s:I}", "path", o->model, "loaded_from",
                                      loaded_from, "kind", kind, "vocab",
                                      (json_int_t)tok_vocab_size(t)));
        json_object_set_new(j, "text", json_pack("{s:s,s:s,s:I}", "source",
                                                 o->text_file ? "file" : "builtin",
                                                 "description", text_what, "bytes",
                                                 (json_int_t)len));
        json_object_set_new(j, "threads", json_integer(1));
        json_object_set_new(j, "warmup", json_integer(o->warmup));
        json_object_set_new(j, "reps", json_integer(o->reps));
        json_object_set_new(j, "n_tokens", json_integer((json_int_t)n_tokens));
        json_object_set_new(j, "mb_s", json_real(mb_s));
        json_object_set_new(j, "mb_s_min", json_real(mb_s_min));
        json_object_set_new(j, "mb_s_max", json_real(mb_s_max));
        json_object_set_new(j, "tokens_s", json_real(tokens_s));
        json_object_set_new(j, "bytes_per_token", json_real(bytes_per_token));
        json_object_set_new(j, "ms", json_pack("{s:f,s:f,s:f,s:f}", "median", ms.median, "min",
                                               ms.min, "max", ms.max, "mean", ms.mean));
        print_json(j);
        json_decref(j);
    } else {
        printf("memra-bench --tokenizer %s\n", date);
        printf("tokenizer %s: %s, %zu tokens (from %s)\n", o->model, kind, tok_vocab_size(t),
               loaded_from);
        printf("text      %s: %zu bytes\n", text_what, len);
        printf("encode    raw (no BOS/EOS, special-token text not parsed), one thread\n");
        printf("cpu       %s\n", json_string_value(json_object_get(host, "cpu")));
        printf("timing    %d warm-up, median of %d [min, max]; MB = 1e6 bytes\n\n", o->warmup,
               o->reps);
        char mbs[96];
        snprintf(mbs, sizeof mbs, "%.2f [%.2f, %.2f]", mb_s, mb_s_min, mb_s_max);
        printf("| %28s | %12s | %11s | %10s | %12s |\n", "MB/s median [min, max]", "tokens/s",
               "bytes/token", "tokens", "ms/encode");
        printf("|------------------------------|--------------|-------------|------------|"
               "--------------|\n");
        printf("| %28s | %12.0f | %11.3f | %10zu | %12.2f |\n", mbs, tokens_s, bytes_per_token,
               n_tokens, ms.median);
    }
    json_decref(host);
    free(text);
    tok_free(t);
    if (have_ck)
        checkpoint_close(&ck);
    return 0;
}

/* ---- the server bench ---- */

static json_t *dist_json(const loadgen_dist *d)
{
    return json_pack("{s:I,s:f,s:f,s:f,s:f,s:f,s:f}", "n", (json_int_t)d->n, "p50", d->p50,
                     "p90", d->p90, "p99", d->p99, "min", d->min, "max", d->max, "mean",
                     d->mean);
}

static json_t *level_json(const loadgen_level *l)
{
    json_t *j = json_object();
    json_object_set_new(j, "concurrency", json_integer(l->concurrency));
    json_object_set_new(j, "requests", json_integer(l->requests));
    json_object_set_new(j, "ok", json_integer(l->ok));
    json_object_set_new(j, "errors", json_integer(l->errors));
    if (l->first_error[0])
        json_object_set_new(j, "first_error", json_string(l->first_error));
    json_object_set_new(j, "duration_s", json_real(l->duration_s));
    json_object_set_new(j, "requests_s", json_real(l->requests_s));
    json_object_set_new(j, "tok_s", json_real(l->tok_s));
    json_object_set_new(j, "tokens_requested", json_integer((json_int_t)l->tokens_requested));
    json_object_set_new(j, "tokens_received", json_integer((json_int_t)l->tokens_received));
    json_object_set_new(j, "short_requests", json_integer(l->short_requests));
    json_object_set_new(j, "textless_requests", json_integer(l->textless_requests));
    json_object_set_new(j, "prompt_tokens", json_integer((json_int_t)l->prompt_tokens));
    json_object_set_new(j, "ttft_ms", dist_json(&l->ttft_ms));
    json_object_set_new(j, "itl_ms", dist_json(&l->itl_ms));
    json_object_set_new(j, "tpot_ms", dist_json(&l->tpot_ms));
    json_object_set_new(j, "e2e_ms", dist_json(&l->e2e_ms));
    return j;
}

static int run_server_bench(const bench_opts *o)
{
    memra_err err;
    loadgen_opts lo = {
        .url = o->server, .model = o->server_model, .api_key = o->api_key,
        .n_prompt = (int)o->pp.v[0], .n_gen = (int)o->tg.v[0], .n_vocab = o->vocab,
        .timeout_s = o->timeout_s, .seed = 20261130,
    };
    loadgen *lg;
    if (loadgen_new(&lo, &lg, &err) != 0)
        cli_fail(&err);
    char date[32];
    membw_utc_now(date, sizeof date);
    json_t *host = host_json();
    if (!o->json) {
        char ctx[32] = "unknown";
        if (loadgen_n_ctx(lg) > 0)
            snprintf(ctx, sizeof ctx, "%" PRId64, loadgen_n_ctx(lg));
        printf("memra-bench --server %s\n", date);
        printf("server    %s: model '%s' (context %s, vocab %" PRId64 ")\n", o->server,
               loadgen_model(lg), ctx, loadgen_n_vocab(lg));
        printf("requests  POST %s, streamed with usage; prompt %d token ids (fresh per "
               "request), max_tokens %d, ignore_eos, temperature 0\n", loadgen_endpoint(lg),
               lo.n_prompt, lo.n_gen);
        printf("load      per level: c streams, each sending %d request%s back to back; %d "
               "warm-up request%s first\n", o->reps, o->reps == 1 ? "" : "s", o->warmup,
               o->warmup == 1 ? "" : "s");
        printf("cpu       %s (client side)\n", json_string_value(json_object_get(host, "cpu")));
        fflush(stdout);
    }
    loadgen_level lv;
    if (o->warmup > 0) {
        if (loadgen_run(lg, 1, o->warmup, &lv, &err) != 0)
            cli_fail(&err);
        if (lv.errors)
            cli_failf("warm-up request failed: %s", lv.first_error);
    }
    /* Cold TTFT: one request alone, its prompt new to the server. */
    if (loadgen_run(lg, 1, 1, &lv, &err) != 0)
        cli_fail(&err);
    if (lv.errors)
        cli_failf("cold-TTFT request failed: %s", lv.first_error);
    double cold_ttft = lv.ttft_ms.p50;
    int cold_known = lv.ttft_ms.n > 0;
    if (!o->json) {
        if (cold_known)
            printf("cold TTFT %.2f ms (one request alone after the warm-up, a fresh prompt)\n\n",
                   cold_ttft);
        else
            printf("cold TTFT unknown: the request streamed no text (only special tokens)\n\n");
        printf("| %4s | %8s | %6s | %8s | %9s | %9s | %9s | %8s | %8s | %13s |\n", "c",
               "requests", "errors", "req/s", "tok/s", "TTFT p50", "TTFT p99", "ITL p50",
               "ITL p99", "tokens got");
        printf("|------|----------|--------|----------|-----------|-----------|-----------|"
               "----------|----------|---------------|\n");
        fflush(stdout);
    }
    json_t *levels = json_array();
    int total = 0, failed = 0, textless = 0;
    char first_error[512] = "";
    for (size_t i = 0; i < o->conc.n; i++) {
        int c = (int)o->conc.v[i];
        if (loadgen_run(lg, c, c * o->reps, &lv, &err) != 0)
            cli_fail(&err);
        total += lv.requests;
        failed += lv.errors;
        textless += lv.textless_requests;
        if (lv.errors && !first_error[0])
            snprintf(first_error, sizeof first_error, "%s", lv.first_error);
        json_array_append_new(levels, level_json(&lv));
        if (!o->json) {
            char rs[32], ts[32], got[48];
            fmt_num(lv.requests_s, rs, sizeof rs);
            fmt_num(lv.tok_s, ts, sizeof ts);
            snprintf(got, sizeof got, "%" PRIu64 "/%" PRIu64, lv.tokens_received,
                     lv.tokens_requested);
            printf("| %4d | %8d | %6d | %8s | %9s | %9.2f | %9.2f | %8.2f | %8.2f | %13s |\n", c,
                   lv.requests, lv.errors, rs, ts, lv.ttft_ms.p50, lv.ttft_ms.p99,
                   lv.itl_ms.p50, lv.itl_ms.p99, got);
            fflush(stdout);
        }
    }
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "program", json_string("memra-bench"));
        json_object_set_new(j, "mode", json_string("server"));
        json_object_set_new(j, "date", json_string(date));
        json_object_set_new(j, "host", json_incref(host));
        json_t *sj = json_object();
        json_object_set_new(sj, "url", json_string(o->server));
        json_object_set_new(sj, "endpoint", json_string(loadgen_endpoint(lg)));
        json_object_set_new(sj, "model", json_string(loadgen_model(lg)));
        if (loadgen_n_ctx(lg) > 0)
            json_object_set_new(sj, "context_length", json_integer(loadgen_n_ctx(lg)));
        json_object_set_new(sj, "vocab_size", json_integer(loadgen_n_vocab(lg)));
        json_object_set_new(j, "server", sj);
        json_object_set_new(j, "n_prompt", json_integer(lo.n_prompt));
        json_object_set_new(j, "n_gen", json_integer(lo.n_gen));
        json_object_set_new(j, "requests_per_stream", json_integer(o->reps));
        json_object_set_new(j, "warmup", json_integer(o->warmup));
        json_object_set_new(j, "cold_ttft_ms", cold_known ? json_real(cold_ttft) : json_null());
        json_object_set_new(j, "levels", levels);
        levels = NULL;
        print_json(j);
        json_decref(j);
    } else {
        printf("\nms throughout; c streams x %d request%s per level; tok/s = tokens received / "
               "the level's wall time; ITL = gaps between text events\n", o->reps,
               o->reps == 1 ? "" : "s");
        if (textless)
            printf("%d request%s streamed no text at all (only special tokens): counted in req/s "
                   "and tok/s, left out of TTFT and ITL\n", textless, textless == 1 ? "" : "s");
    }
    json_decref(levels);
    json_decref(host);
    loadgen_free(lg);
    if (failed)
        cli_failf("%d of %d requests failed; the first: %s", failed, total, first_error);
    return 0;
}

int main(int argc, char **argv)
{
    cli_set_program("memra-bench");
    bench_opts o = {0};
    parse_args(argc, argv, &o);
    int rc = o.server ? run_server_bench(&o)
             : o.tokenizer ? run_tokenizer_bench(&o)
                           : run_model_bench(&o);
    free(o.pp.v);
    free(o.tg.v);
    free(o.depths.v);
    free(o.batches.v);
    free(o.conc.v);
    return rc;
}
