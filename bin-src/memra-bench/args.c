/* memra-bench's command line: the usage text, the option parser and the
 * checks between options. */
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/cli.h"
#include "bench/membw.h"
#include "backend/backend.h"
#include "backend/kv_cache.h"
#include "bench/loadgen.h"
#if MEMRA_CUDA
#include "backend/cuda/cuda_device.h"
#endif

#include "bench_cli.h"

static const char usage[] =
    "usage: memra-bench MODEL [-p 512] [-n 128] [-d 0,512] [-b 1,8,32,64] [-r 5] [-t N]\n"
    "                         [--kv TYPE] [--json] [--backend cpu|cpu-ref|cuda] [--device N] [options]\n"
    "       memra-bench MODEL --tokenizer [-f TEXT] [-r 5] [--json]\n"
    "       memra-bench --sampler [--vocab 151936] [-r 5] [--json]\n"
    "       memra-bench --server URL [-c 1,8,32,64] [-p 512] [-n 128] [-r 5] [--model ALIAS]\n"
    "                         [--api-key KEY] [--json]\n"
    "       memra-bench --server URL --turns N [--system-tokens T] [--turn-tokens K] [-c LIST]\n"
    "                         [-n 128] [-r 1] [--json]\n"
    "\n"
    "Measures prefill (pp<P>: a P-token prompt from empty) and decode (tg<N>: N single-token\n"
    "steps after the KV cache is filled to each depth D, untimed) and batched decode (B\n"
    "sequences each prefilled with a P-token prompt, then N steps of one token each), with\n"
    "warm-up runs first and the median of r repetitions with min and max. Each row gives\n"
    "tok/s, ms/token, the GB/s of weights streamed, the % of the machine's ceiling (for\n"
    "--backend cpu or cpu-ref the host memory read bandwidth, measured once and cached per\n"
    "host; for cuda the device's copy bandwidth) and the peak memory (host RSS; device memory\n"
    "in use).\n"
    "MODEL is a GGUF file, an HF checkpoint dir or hf:owner/repo[:file].\n"
    "\n"
    "  -p LIST             prompt lengths, e.g. 512 or 128,512 (default 512; 0: no prefill row)\n"
    "  -n LIST             decode steps per row (default 128; 0: no decode row)\n"
    "  -d LIST             KV depths for the decode rows (default 0,512; defaults that do not\n"
    "                      fit the context are skipped with a note, given ones are an error)\n"
    "  --prefill-depth LIST\n"
    "                      KV depths for the prefill rows (default 0): D tokens filled\n"
    "                      untimed, then the -p prompt timed after them (llama-bench's -d\n"
    "                      for its pp rows; depth + prompt must fit the context)\n"
    "  -b LIST             batched decode rows, one per batch size: B sequences prefilled\n"
    "                      with each -p prompt, then -n steps through engine_forward_batch\n"
    "  -r N                repetitions (default 5)    --warmup N  warm-up runs (default 1)\n"
    "  -t, --threads N     (default all cores; env MEMRA_THREADS)\n"
    "  -c, --ctx N         the context depth + n must fit (default the model's training context)\n"
    "  --n-batch N         prefill chunk in tokens (default the engine's: 512 on H100/H200,\n"
    "                      64 on other cards and the CPU)\n"
    "  --kv f32|f16|bf16|q8_0  KV cache type (default bf16; f32 on cpu-ref)\n"
    "  --backend B         cpu (the fast path), cpu-ref (the reference) or cuda\n"
    "                      (default cuda when a GPU is present, else cpu)\n"
    "  --device N          CUDA device index (default 0), for the run and the probe\n"
    "  --devices LIST      CUDA devices, one per pipeline stage or tensor-parallel rank (e.g.\n"
    "                      0,1); the probe runs on the first\n"
    "  --pp N              the layers split over N pipeline stages (default one per --devices\n"
    "                      entry)\n"
    "  --tp N              every layer's heads and FFN columns split over N tensor-parallel\n"
    "                      ranks (one per --devices entry)\n"
    "  --rank R            run pipeline stage R of --pp N (or rank R of --tp N) alone, the\n"
    "                      others in processes of their own started with the same arguments\n"
    "                      (NCCL); rank 0 prints\n"
    "  --nccl-id FILE      where those processes meet (rank 0 writes it; else env\n"
    "                      NCCL_COMM_ID=HOST:PORT)\n"
    "  --bandwidth GB/s    use this ceiling instead of the measured one\n"
    "  --remeasure         measure the bandwidth again (and update the cache)\n"
    "  --profile-range     the first timed repetition of each row inside a profiler range\n"
    "                      (cudaProfilerStart/Stop: ncu --profile-from-start off)\n"
    "  --json-schema FILE  constrain the decode rows (tg and -b) by a JSON Schema, as\n"
    "                      memra-serve's response_format: each step masks each sequence's\n"
    "                      tokens by its grammar (timed); compare with a run without it\n"
    "  --tokenizer         tokenizer throughput on one thread: MB/s, tokens/s, bytes/token.\n"
    "                      MODEL may be a vocab-only GGUF or a dir holding just tokenizer.json\n"
    "  -f FILE             with --tokenizer: the text (default: a built-in ~1 MB mixed text)\n"
    "  --sampler           the host sampler on one thread: ms a token for five parameter\n"
    "                      mixes over one row of pseudo-random logits (--vocab ids, default\n"
    "                      151936); no MODEL\n"
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
    "  --vocab N           draw prompt ids below N (when /v1/models gives no vocab_size);\n"
    "                      with --sampler, the ids of its row\n"
    "  --timeout S         per request (default 600)\n"
    "With --turns N, multi-turn conversations instead: each of the c clients runs -r (default\n"
    "1) conversations of N turns through streamed /v1/chat/completions, each turn resending\n"
    "the whole history (a system prompt all clients share, earlier user messages and the\n"
    "replies they got) plus a new user message; per turn and in all: TTFT mean/p50/p99,\n"
    "prompt tokens, the cached tokens the server reports, prompt tok/s and decode tok/s.\n"
    "  --turns N           turns per conversation\n"
    "  --system-tokens T   the shared system prompt, about T tokens of filler (default 4096)\n"
    "  --turn-tokens K     each new user message, about K tokens of filler (default 64)\n"
    "  -h, --help          this text\n"
    "\n"
    "GB = 1e9 bytes, MB = 1e6 bytes. The bandwidth cache is $MEMRA_CACHE/bandwidth-<host>.json\n"
    "(MEMRA_CACHE defaults to ~/.cache/memra). Exit status: 0 ok, 1 failure, 2 bad usage.\n";

const bench_backend_desc bench_backends[3] = {
    [BACKEND_CPU] = {"cpu", 1, "host memory read bandwidth"},
    [BACKEND_CUDA] = {"cuda", MEMRA_CUDA, "device memory bandwidth (16-byte copy probe)"},
    [BACKEND_CPU_REF] = {"cpu-ref", 1, "host memory read bandwidth"},
};

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
        out->v[out->n++] = cli_int_or_usage(tok, lo, hi, what);
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

void bench_parse_args(int argc, char **argv, bench_opts *o)
{
    o->reps = 5;
    o->system_tokens = -1; /* not given: 0 is a run without a system prompt */
    o->warmup = 1;
    o->kv = KV_DEFAULT;
    o->rank = -1;
    o->backend = BACKEND_CPU;
    o->n_threads = cli_threads_default();
    enum {
        O_KV = 1000, O_JSON, O_BACKEND, O_BANDWIDTH, O_REMEASURE, O_TOKENIZER, O_WARMUP,
        O_NBATCH, O_SERVER, O_MODEL, O_APIKEY, O_TIMEOUT, O_VOCAB, O_DEVICE, O_PROFILE,
        O_SCHEMA, O_TURNS, O_SYSTOK, O_TURNTOK, O_DEVICES, O_PIPE, O_TP, O_PPDEPTH,
        O_RANK, O_NCCL_ID, O_SAMPLER,
    };
    static const struct option longs[] = {
        {"threads", required_argument, NULL, 't'},   {"ctx", required_argument, NULL, 'c'},
        {"kv", required_argument, NULL, O_KV},       {"json", no_argument, NULL, O_JSON},
        {"backend", required_argument, NULL, O_BACKEND},
        {"bandwidth", required_argument, NULL, O_BANDWIDTH},
        {"remeasure", no_argument, NULL, O_REMEASURE},
        {"profile-range", no_argument, NULL, O_PROFILE},
        {"json-schema", required_argument, NULL, O_SCHEMA},
        {"tokenizer", no_argument, NULL, O_TOKENIZER},
        {"sampler", no_argument, NULL, O_SAMPLER},
        {"warmup", required_argument, NULL, O_WARMUP},
        {"n-batch", required_argument, NULL, O_NBATCH},
        {"device", required_argument, NULL, O_DEVICE},
        {"devices", required_argument, NULL, O_DEVICES},
        {"pp", required_argument, NULL, O_PIPE},
        {"tp", required_argument, NULL, O_TP},
        {"rank", required_argument, NULL, O_RANK},
        {"nccl-id", required_argument, NULL, O_NCCL_ID},
        {"prefill-depth", required_argument, NULL, O_PPDEPTH},
        {"file", required_argument, NULL, 'f'},      {"help", no_argument, NULL, 'h'},
        {"server", required_argument, NULL, O_SERVER},
        {"model", required_argument, NULL, O_MODEL},
        {"api-key", required_argument, NULL, O_APIKEY},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"vocab", required_argument, NULL, O_VOCAB},
        {"turns", required_argument, NULL, O_TURNS},
        {"system-tokens", required_argument, NULL, O_SYSTOK},
        {"turn-tokens", required_argument, NULL, O_TURNTOK},
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
        case O_PPDEPTH:
            parse_list(optarg, 0, INT32_MAX, "--prefill-depth", &o->pp_depths);
            o->model_flag = o->local_flag = "--prefill-depth";
            break;
        case 'b':
            parse_list(optarg, 1, 65536, "-b", &o->batches);
            o->model_flag = o->local_flag = "-b";
            break;
        case 'r':
            o->reps = (int)cli_int_or_usage(optarg, 1, 100000, "-r");
            o->reps_given = 1;
            break;
        case O_WARMUP: o->warmup = (int)cli_int_or_usage(optarg, 0, 100000, "--warmup"); break;
        case 't':
            o->n_threads = (int)cli_int_or_usage(optarg, 1, 4096, "--threads");
            o->model_flag = o->local_flag = "--threads";
            break;
        case 'c': o->c_arg = optarg; break; /* --ctx, or with --server the concurrencies */
        case O_NBATCH:
            o->n_batch = (int)cli_int_or_usage(optarg, 1, 1 << 16, "--n-batch");
            o->model_flag = o->local_flag = "--n-batch";
            break;
        case O_KV:
            if (kv_type_parse(optarg, &o->kv, &err) != 0)
                cli_usage("--kv: %s", err.msg);
            o->model_flag = o->local_flag = "--kv";
            break;
        case O_DEVICE:
            o->device = (int)cli_int_or_usage(optarg, 0, 1024, "--device");
            o->device_given = 1;
            o->model_flag = "--device";
            break;
        case O_DEVICES:
            o->devices = optarg;
            o->model_flag = o->local_flag = "--devices";
            break;
        case O_PIPE:
            o->pipe_stages = (int)cli_int_or_usage(optarg, 1, 8, "--pp");
            o->model_flag = o->local_flag = "--pp";
            break;
        case O_TP:
            o->tp_ranks = (int)cli_int_or_usage(optarg, 1, 8, "--tp");
            o->model_flag = o->local_flag = "--tp";
            break;
        case O_RANK:
            o->rank = (int)cli_int_or_usage(optarg, 0, 7, "--rank");
            o->model_flag = o->local_flag = "--rank";
            break;
        case O_NCCL_ID:
            o->nccl_id = optarg;
            o->model_flag = o->local_flag = "--nccl-id";
            break;
        case O_BACKEND: {
            backend_kind k = backend_kind_or_usage(optarg);
            o->backend = k == BK_CUDA ? BACKEND_CUDA : k == BK_CPU_REF ? BACKEND_CPU_REF
                                                                          : BACKEND_CPU;
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
        case O_SCHEMA:
            o->json_schema = optarg;
            o->model_flag = o->local_flag = "--json-schema";
            break;
        case O_TOKENIZER: o->tokenizer = 1; o->local_flag = "--tokenizer"; break;
        case O_SAMPLER: o->sampler = 1; o->local_flag = "--sampler"; break;
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
            o->vocab = cli_int_or_usage(optarg, 1, INT32_MAX, "--vocab");
            break;
        case O_TURNS:
            o->turns = (int)cli_int_or_usage(optarg, 1, 10000, "--turns");
            o->server_flag = "--turns";
            break;
        case O_SYSTOK:
            o->system_tokens = cli_int_or_usage(optarg, 0, INT32_MAX, "--system-tokens");
            o->server_flag = o->turns_flag = "--system-tokens";
            break;
        case O_TURNTOK:
            o->turn_tokens = cli_int_or_usage(optarg, 1, INT32_MAX, "--turn-tokens");
            o->server_flag = o->turns_flag = "--turn-tokens";
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
        if (o->turns_flag && !o->turns)
            cli_usage("%s goes with --turns", o->turns_flag);
        if (o->turns && o->pp.given)
            cli_usage("-p: with --turns the prompts are sized by --system-tokens and "
                      "--turn-tokens");
        if (o->turns) {
            if (o->system_tokens < 0)
                o->system_tokens = 4096;
            if (!o->turn_tokens)
                o->turn_tokens = 64;
            if (!o->reps_given)
                o->reps = 1;
        }
        if (!o->pp.given && !o->turns)
            set_default_list(&o->pp, one_pp, 1);
        if (!o->tg.given)
            set_default_list(&o->tg, one_tg, 1);
        if (!o->turns && (o->pp.n != 1 || o->pp.v[0] < 1))
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
    if (o->sampler) {
        if (optind < argc)
            cli_usage("--sampler takes no MODEL ('%s': it times the sampler alone; --vocab N "
                      "sets its row)", argv[optind]);
        if (o->tokenizer)
            cli_usage("--sampler and --tokenizer: one bench at a time");
        if (o->model_flag || o->c_arg || o->backend_given || o->text_file)
            cli_usage("%s goes with the model bench, not --sampler (the host sampler on one "
                      "thread)", o->model_flag ? o->model_flag
                                 : o->c_arg ? "--ctx"
                                 : o->backend_given ? "--backend" : "-f");
        if (!o->vocab)
            o->vocab = 151936;
        if (o->vocab > (1 << 24))
            cli_usage("--vocab %lld: --sampler's row holds at most 16777216 ids",
                      (long long)o->vocab);
        return;
    }
    if (o->vocab)
        cli_usage("--vocab goes with --server or --sampler");
    if (o->c_arg) {
        o->ctx = cli_int_or_usage(o->c_arg, 1, INT32_MAX, "--ctx");
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
    static const int64_t def_pp[] = {512}, def_tg[] = {128}, def_depths[] = {0, 512},
                         def_pp_depths[] = {0};
    if (!o->pp.given)
        set_default_list(&o->pp, def_pp, 1);
    if (!o->tg.given)
        set_default_list(&o->tg, def_tg, 1);
    if (!o->depths.given)
        set_default_list(&o->depths, def_depths, 2);
    if (!o->pp_depths.given)
        set_default_list(&o->pp_depths, def_pp_depths, 1);
    int any_pp = 0, any_tg = 0;
    for (size_t i = 0; i < o->pp.n; i++)
        any_pp |= o->pp.v[i] > 0;
    for (size_t i = 0; i < o->tg.n; i++)
        any_tg |= o->tg.v[i] > 0;
    if (!o->tokenizer && !any_pp && !any_tg)
        cli_usage("-p 0 and -n 0: nothing to measure");
    if (o->batches.n && !any_tg)
        cli_usage("-b needs decode steps: -n 0 leaves the batched rows nothing to run");
    if (o->json_schema && !any_tg)
        cli_usage("--json-schema constrains the decode rows: -n 0 leaves none");
    if (o->n_threads <= 0)
        o->n_threads = membw_online_cpus();
}
