/* memra-serve: the OpenAI-compatible server. Flags, environment, signals
 * and the drain; the server itself is lib/serve/. */
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "core/check.h"
#include "core/cli.h"
#include "core/log.h"
#include "core/mapfile.h"
#include "serve/serve.h"
#include "serve/serve_spec.h"

static const char usage[] =
    "usage: memra-serve -m ALIAS=MODEL [-m ...] [options]\n"
    "\n"
    "Serves each MODEL (a GGUF file, an HF checkpoint dir or hf:owner/repo[:file]) under its\n"
    "ALIAS through an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions,\n"
    "/v1/embeddings, /v1/rerank, /v1/models, /tokenize, /detokenize, /apply-template, /health,\n"
    "/readyz, /metrics). Without ALIAS= the alias is the file name without .gguf.\n"
    "\n"
    "  -m, --model ALIAS=MODEL  a model to serve (repeatable; env MEMRA_MODELS=\"a=/p,b=/q\");\n"
    "                           ALIAS:TASK=MODEL sets its --task (e.g. emb:embed=/p)\n"
    "  --task chat|embed|rerank what the -m just before serves (default: as the checkpoint's\n"
    "                           pooling says: last/mean/cls embed, rank rerank, none chat)\n"
    "  --draft DRAFT            speculative decoding for the -m just before (a chat model):\n"
    "                           DRAFT, a smaller model of its vocabulary, drafts tokens\n"
    "  --trim RANKS             limit --draft's head to a rank file's ids (memra-trim-ranks)\n"
    "  --ngram                  speculative decoding for the -m just before with n-gram /\n"
    "                           prompt-lookup drafting (no model; not with --draft)\n"
    "  --mtp                    speculative decoding for the -m just before with the MTP\n"
    "                           (NextN) block its checkpoint carries (Qwen3.5)\n"
    "  --spec-k N               draft tokens per speculation round, 1..8 (default 4)\n"
    "  --spec-max-batch N       speculate only while at most N requests decode (default 2,\n"
    "                           measured on the CPU and the H200: docs/FLAGS.md)\n"
    "  --host HOST              address to listen on (default 127.0.0.1; env MEMRA_HOST)\n"
    "  --port N                 port (default 8080; 0: any free one; env MEMRA_PORT)\n"
    "                           (env MEMRA_ADDR=HOST:PORT sets both)\n"
    "  -c, --ctx N              context length per sequence (default the model's, at most 4096;\n"
    "                           env MEMRA_CTX)\n"
    "  --max-sessions N         sequences generating at once per model (default 16;\n"
    "                           env MEMRA_MAX_SESSIONS)\n"
    "  --prefill-chunk N        prompt tokens a sequence prefills per scheduler tick (default the\n"
    "                           backend's step: 512 on H100/H200, 64 elsewhere; env\n"
    "                           MEMRA_PREFILL_CHUNK)\n"
    "  --prefix-cache on|off    keep prompts' KV blocks for later requests that start the same\n"
    "                           way, per tenant (default on; env MEMRA_PREFIX_CACHE)\n"
    "  --cache-blocks N         KV blocks kept cached that no request holds (default: all the\n"
    "                           pool's free room; env MEMRA_CACHE_BLOCKS)\n"
    "  --max-queue N            requests that may wait beyond them, then 429 (default 64;\n"
    "                           env MEMRA_MAX_QUEUE)\n"
    "  --api-key KEY            require this key (env MEMRA_API_KEY)\n"
    "  --api-keys FILE          keys from FILE, one per line or \"key tenant\"; reloaded when it\n"
    "                           changes (env MEMRA_API_KEYS)\n"
    "  --insecure               allow a non-loopback address without a key (env MEMRA_INSECURE=1)\n"
    "  --chat-template FILE     a Jinja chat template for every model instead of its own\n"
    "                           (env MEMRA_CHAT_TEMPLATE)\n"
    "  -t, --threads N          engine threads per model (default all cores; env MEMRA_THREADS)\n"
    "  --backend B              cpu (fast path), cpu-ref (reference) or cuda\n"
    "                           (default cuda when a GPU is present, else cpu)\n"
    "  --device N               CUDA device index for every model (default 0)\n"
    "  --devices LIST           CUDA devices, one per pipeline stage or tensor-parallel rank, for\n"
    "                           every model (e.g. 0,1; a device may repeat)\n"
    "  --pp N                   split each model's layers over N pipeline stages (default one\n"
    "                           per --devices entry); the same bytes as one device\n"
    "  --tp N                   split each model's heads and FFN columns over N tensor-parallel\n"
    "                           ranks (one per --devices entry); deterministic\n"
    "  --kv f32|f16|bf16|q8_0   KV cache type (default bf16; f32 on cpu-ref)\n"
    "  --http-threads N         HTTP worker threads (default 4; env MEMRA_HTTP_THREADS)\n"
    "  --max-body BYTES         largest request body, K/M suffixes (default 8M; env MEMRA_MAX_BODY)\n"
    "  --drain-timeout S        on SIGTERM, seconds in-flight requests get to finish (default 30;\n"
    "                           env MEMRA_DRAIN_TIMEOUT)\n"
    "  --idle-timeout S         close a connection idle or half-sent this long (default 5;\n"
    "                           env MEMRA_IDLE_TIMEOUT); a generation's answer gets 120 s\n"
    "  --max-conns-per-ip N     connections one client address may hold (default 256, 0: no cap;\n"
    "                           env MEMRA_MAX_CONNS_PER_IP)\n"
    "  --cors ORIGIN            answer CORS preflights and allow ORIGIN (or *) in browsers\n"
    "                           (default none: no CORS headers; env MEMRA_CORS)\n"
    "  --allow-special-in-content  special-token text in chat message content becomes control\n"
    "                           tokens (default: plain text; env MEMRA_ALLOW_SPECIAL_IN_CONTENT=1)\n"
    "  -v, --verbose            log requests and engine events (env MEMRA_LOG=info|debug)\n"
    "\n"
    "Flags win over the environment. SIGTERM or SIGINT drains: /readyz and new requests answer\n"
    "503, in-flight requests finish (or are cut at the drain timeout), exit 0. Exit status: 0 ok,\n"
    "1 failure (a model that does not load, a port in use), 2 bad usage.\n";

typedef struct {
    char **aliases, **paths;
    serve_task *tasks;
    serve_spec_opts *specs; /* per model: --draft, --trim, --ngram */
    int n_models;
    int spec_k, spec_max_batch;
    char *host;
    int port;
    int64_t n_ctx;
    int max_sessions, max_queue, n_threads, http_threads, insecure, prefill_chunk;
    int prefix_cache, cache_blocks;
    backend_kind backend;
    int backend_given, device, device_given;
    const char *devices; /* --devices */
    int pp;              /* --pp */
    int tp;              /* --tp */
    kv_type kv;
    double drain_timeout;
    int idle_timeout, max_conns_per_ip, allow_special;
    const char *cors;
    uint64_t max_body;
    const char *api_key, *api_keys, *template_file;
} serve_args;

/* "ALIAS=MODEL", or "MODEL" whose alias is the file name without .gguf. */
/* ALIAS=MODEL, ALIAS:TASK=MODEL (the task as --task gives it, so
 * MEMRA_MODELS can say it too) or MODEL. */
static void add_model(serve_args *a, const char *spec, const char *what)
{
    const char *eq = strchr(spec, '=');
    char *alias, *path;
    serve_task task = SERVE_TASK_AUTO;
    if (eq && eq != spec && !memchr(spec, '/', (size_t)(eq - spec))) {
        alias = xstrdup(spec);
        alias[eq - spec] = '\0';
        path = xstrdup(eq + 1);
        char *colon = strchr(alias, ':');
        if (colon) {
            *colon = '\0';
            int t = serve_task_parse(colon + 1);
            if (t < 0 || t == SERVE_TASK_AUTO)
                cli_usage("%s '%s': '%s' is not chat, embed or rerank (ALIAS:TASK=MODEL)", what,
                          spec, colon + 1);
            if (!*alias)
                cli_usage("%s '%s': the alias before ':%s' is empty", what, spec, colon + 1);
            task = (serve_task)t;
        }
    } else {
        path = xstrdup(spec);
        const char *base = strrchr(spec, '/');
        base = base && base[1] ? base + 1 : spec;
        alias = xstrdup(base);
        size_t n = strlen(alias);
        if (n > 5 && !strcmp(alias + n - 5, ".gguf"))
            alias[n - 5] = '\0';
    }
    if (!*path)
        cli_usage("%s '%s': the model path is empty", what, spec);
    for (int i = 0; i < a->n_models; i++)
        if (!strcmp(a->aliases[i], alias))
            cli_usage("%s: alias '%s' is given twice", what, alias);
    a->aliases = xrealloc(a->aliases, (size_t)(a->n_models + 1) * sizeof *a->aliases);
    a->tasks = xrealloc(a->tasks, (size_t)(a->n_models + 1) * sizeof *a->tasks);
    a->tasks[a->n_models] = task;
    a->specs = xrealloc(a->specs, (size_t)(a->n_models + 1) * sizeof *a->specs);
    a->specs[a->n_models] = (serve_spec_opts){0};
    a->paths = xrealloc(a->paths, (size_t)(a->n_models + 1) * sizeof *a->paths);
    a->aliases[a->n_models] = alias;
    a->paths[a->n_models] = path;
    a->n_models++;
}

/* HOST:PORT, [V6]:PORT. */
static int on_off(const char *v, const char *what)
{
    if (!strcmp(v, "on"))
        return 1;
    if (!strcmp(v, "off"))
        return 0;
    cli_usage("%s: '%s' is not on or off", what, v);
}

static void parse_addr(serve_args *a, const char *s)
{
    const char *colon = strrchr(s, ':');
    if (!colon || colon == s)
        cli_usage("MEMRA_ADDR '%s': want HOST:PORT", s);
    const char *h = s, *he = colon;
    if (*h == '[' && he[-1] == ']') {
        h++;
        he--;
    }
    free(a->host);
    a->host = xmalloc((size_t)(he - h) + 1);
    memcpy(a->host, h, (size_t)(he - h));
    a->host[he - h] = '\0';
    a->port = (int)cli_int_or_usage(colon + 1, 0, 65535, "MEMRA_ADDR port");
}

static void parse_args(int argc, char **argv, serve_args *a)
{
    memra_err err;
    a->host = xstrdup("127.0.0.1");
    a->port = 8080;
    a->max_sessions = 16;
    a->max_queue = 64;
    a->http_threads = 4;
    a->drain_timeout = 30;
    a->max_body = 8u << 20;
    a->idle_timeout = 5;
    a->max_conns_per_ip = 256;
    /* The environment first; flags override it below. */
    const char *env;
    if ((env = getenv("MEMRA_ADDR")) && *env)
        parse_addr(a, env);
    if ((env = getenv("MEMRA_HOST")) && *env) {
        free(a->host);
        a->host = xstrdup(env);
    }
    if ((env = getenv("MEMRA_PORT")) && *env)
        a->port = (int)cli_int_or_usage(env, 0, 65535, "MEMRA_PORT");
    if ((env = getenv("MEMRA_CTX")) && *env)
        a->n_ctx = cli_int_or_usage(env, 1, INT32_MAX, "MEMRA_CTX");
    if ((env = getenv("MEMRA_MAX_SESSIONS")) && *env)
        a->max_sessions = (int)cli_int_or_usage(env, 1, 4096, "MEMRA_MAX_SESSIONS");
    if ((env = getenv("MEMRA_PREFILL_CHUNK")) && *env)
        a->prefill_chunk = (int)cli_int_or_usage(env, 1, 1 << 16, "MEMRA_PREFILL_CHUNK");
    a->prefix_cache = 1;
    if ((env = getenv("MEMRA_PREFIX_CACHE")) && *env)
        a->prefix_cache = on_off(env, "MEMRA_PREFIX_CACHE");
    if ((env = getenv("MEMRA_CACHE_BLOCKS")) && *env)
        a->cache_blocks = (int)cli_int_or_usage(env, 1, INT32_MAX, "MEMRA_CACHE_BLOCKS");
    if ((env = getenv("MEMRA_MAX_QUEUE")) && *env)
        a->max_queue = (int)cli_int_or_usage(env, 0, 1 << 20, "MEMRA_MAX_QUEUE");
    a->n_threads = cli_threads_default();
    if ((env = getenv("MEMRA_HTTP_THREADS")) && *env)
        a->http_threads = (int)cli_int_or_usage(env, 1, 1024, "MEMRA_HTTP_THREADS");
    if ((env = getenv("MEMRA_DRAIN_TIMEOUT")) && *env)
        a->drain_timeout = (double)cli_int_or_usage(env, 0, 86400, "MEMRA_DRAIN_TIMEOUT");
    if ((env = getenv("MEMRA_MAX_BODY")) && *env && cli_parse_bytes(env, &a->max_body, "MEMRA_MAX_BODY", &err) != 0)
        cli_usage("%s", err.msg);
    if ((env = getenv("MEMRA_IDLE_TIMEOUT")) && *env)
        a->idle_timeout = (int)cli_int_or_usage(env, 1, 86400, "MEMRA_IDLE_TIMEOUT");
    if ((env = getenv("MEMRA_MAX_CONNS_PER_IP")) && *env)
        a->max_conns_per_ip = (int)cli_int_or_usage(env, 0, 1 << 20, "MEMRA_MAX_CONNS_PER_IP");
    if ((env = getenv("MEMRA_CORS")) && *env)
        a->cors = env;
    a->allow_special = cli_env_true("MEMRA_ALLOW_SPECIAL_IN_CONTENT");
    const char *env_key = getenv("MEMRA_API_KEY"), *env_keys = getenv("MEMRA_API_KEYS");
    const char *env_tmpl = getenv("MEMRA_CHAT_TEMPLATE");
    a->insecure = cli_env_true("MEMRA_INSECURE");

    enum { O_HOST = 1000, O_PORT, O_MAXS, O_MAXQ, O_KEY, O_KEYS, O_INSECURE, O_TMPL, O_HTTPT,
           O_BODY, O_DRAIN, O_BACKEND, O_DEVICE, O_DEVICES, O_PIPE, O_TP, O_RANK, O_KV, O_PCHUNK, O_IDLE, O_PERIP, O_CORS, O_SPECIAL,
           O_PCACHE, O_CBLOCKS, O_TASK, O_DRAFT, O_TRIM, O_NGRAM, O_MTP, O_SPECK, O_SPECMAX };
    static const struct option longs[] = {
        {"model", required_argument, NULL, 'm'},     {"host", required_argument, NULL, O_HOST},
        {"task", required_argument, NULL, O_TASK},
        {"draft", required_argument, NULL, O_DRAFT}, {"trim", required_argument, NULL, O_TRIM},
        {"ngram", no_argument, NULL, O_NGRAM}, {"mtp", no_argument, NULL, O_MTP},
        {"spec-k", required_argument, NULL, O_SPECK},
        {"spec-max-batch", required_argument, NULL, O_SPECMAX},
        {"port", required_argument, NULL, O_PORT},   {"ctx", required_argument, NULL, 'c'},
        {"max-sessions", required_argument, NULL, O_MAXS},
        {"max-queue", required_argument, NULL, O_MAXQ},
        {"prefill-chunk", required_argument, NULL, O_PCHUNK},
        {"prefix-cache", required_argument, NULL, O_PCACHE},
        {"cache-blocks", required_argument, NULL, O_CBLOCKS},
        {"api-key", required_argument, NULL, O_KEY}, {"api-keys", required_argument, NULL, O_KEYS},
        {"insecure", no_argument, NULL, O_INSECURE},
        {"chat-template", required_argument, NULL, O_TMPL},
        {"threads", required_argument, NULL, 't'},
        {"http-threads", required_argument, NULL, O_HTTPT},
        {"max-body", required_argument, NULL, O_BODY},
        {"drain-timeout", required_argument, NULL, O_DRAIN},
        {"backend", required_argument, NULL, O_BACKEND},
        {"device", required_argument, NULL, O_DEVICE},
        {"devices", required_argument, NULL, O_DEVICES},
        {"pp", required_argument, NULL, O_PIPE},
        {"tp", required_argument, NULL, O_TP},
        {"rank", required_argument, NULL, O_RANK}, {"nccl-id", required_argument, NULL, O_RANK},
        {"kv", required_argument, NULL, O_KV},
        {"idle-timeout", required_argument, NULL, O_IDLE},
        {"max-conns-per-ip", required_argument, NULL, O_PERIP},
        {"cors", required_argument, NULL, O_CORS},
        {"allow-special-in-content", no_argument, NULL, O_SPECIAL},
        {"verbose", no_argument, NULL, 'v'},         {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int ch, flag_models = 0;
    const char *flag_key = NULL, *flag_keys = NULL;
    while ((ch = getopt_long(argc, argv, ":m:c:t:vh", longs, NULL)) != -1) {
        switch (ch) {
        case 'm': add_model(a, optarg, "-m"); flag_models = 1; break;
        case O_TASK: {
            int t = serve_task_parse(optarg);
            if (t < 0)
                cli_usage("--task: '%s' is not chat, embed or rerank", optarg);
            if (a->n_models == 0)
                cli_usage("--task %s: give it after the -m ALIAS=MODEL it applies to", optarg);
            if (a->tasks[a->n_models - 1] != SERVE_TASK_AUTO)
                cli_usage("--task %s: '%s' already has --task %s", optarg,
                          a->aliases[a->n_models - 1], serve_task_name(a->tasks[a->n_models - 1]));
            a->tasks[a->n_models - 1] = (serve_task)t;
            break;
        }
        case O_DRAFT: case O_TRIM: case O_NGRAM: case O_MTP: {
            const char *flag = ch == O_DRAFT ? "--draft" : ch == O_TRIM ? "--trim"
                             : ch == O_NGRAM ? "--ngram" : "--mtp";
            if (a->n_models == 0)
                cli_usage("%s: give it after the -m ALIAS=MODEL it applies to", flag);
            serve_spec_opts *sp = &a->specs[a->n_models - 1];
            const char *alias = a->aliases[a->n_models - 1];
            if ((ch == O_DRAFT && sp->draft) || (ch == O_TRIM && sp->trim) ||
                (ch == O_NGRAM && sp->ngram) || (ch == O_MTP && sp->mtp))
                cli_usage("%s: '%s' already has %s", flag, alias, flag);
            const char *other = sp->draft ? "--draft" : sp->ngram ? "--ngram"
                              : sp->mtp ? "--mtp" : NULL;
            if (ch != O_TRIM && other)
                cli_usage("%s: '%s' has %s already: give one drafter per model (--draft DRAFT, "
                          "--ngram or --mtp)", flag, alias, other);
            if (ch == O_DRAFT)
                sp->draft = optarg;
            else if (ch == O_TRIM)
                sp->trim = optarg;
            else if (ch == O_NGRAM)
                sp->ngram = 1;
            else
                sp->mtp = 1;
            break;
        }
        case O_SPECK: a->spec_k = (int)cli_int_or_usage(optarg, 1, SPEC_K_MAX, "--spec-k"); break;
        case O_SPECMAX:
            a->spec_max_batch = (int)cli_int_or_usage(optarg, 1, 4096, "--spec-max-batch");
            break;
        case O_HOST: free(a->host); a->host = xstrdup(optarg); break;
        case O_PORT: a->port = (int)cli_int_or_usage(optarg, 0, 65535, "--port"); break;
        case 'c': a->n_ctx = cli_int_or_usage(optarg, 1, INT32_MAX, "--ctx"); break;
        case O_MAXS: a->max_sessions = (int)cli_int_or_usage(optarg, 1, 4096, "--max-sessions"); break;
        case O_PCACHE:
            a->prefix_cache = on_off(optarg, "--prefix-cache");
            break;
        case O_CBLOCKS:
            a->cache_blocks = (int)cli_int_or_usage(optarg, 1, INT32_MAX, "--cache-blocks");
            break;
        case O_PCHUNK:
            a->prefill_chunk = (int)cli_int_or_usage(optarg, 1, 1 << 16, "--prefill-chunk");
            break;
        case O_MAXQ: a->max_queue = (int)cli_int_or_usage(optarg, 0, 1 << 20, "--max-queue"); break;
        case O_KEY: flag_key = optarg; break;
        case O_KEYS: flag_keys = optarg; break;
        case O_INSECURE: a->insecure = 1; break;
        case O_TMPL: a->template_file = optarg; break;
        case 't': a->n_threads = (int)cli_int_or_usage(optarg, 1, 4096, "--threads"); break;
        case O_BACKEND:
            a->backend = backend_kind_or_usage(optarg);
            a->backend_given = 1;
            break;
        case O_DEVICE:
            a->device = (int)cli_int_or_usage(optarg, 0, 1024, "--device");
            a->device_given = 1;
            break;
        case O_DEVICES: a->devices = optarg; break;
        case O_PIPE: a->pp = (int)cli_int_or_usage(optarg, 1, 8, "--pp"); break;
        case O_TP: a->tp = (int)cli_int_or_usage(optarg, 1, 8, "--tp"); break;
        case O_RANK:
            cli_usage("--rank, --nccl-id: memra-serve runs every stage or rank of a model in its one "
                      "process (--pp N or --tp N with --devices); a server over several processes "
                      "is not built (memra-gen and memra-bench take --rank)");
        case O_KV:
            if (kv_type_parse(optarg, &a->kv, &err) != 0)
                cli_usage("--kv: %s", err.msg);
            break;
        case O_HTTPT: a->http_threads = (int)cli_int_or_usage(optarg, 1, 1024, "--http-threads"); break;
        case O_BODY:
            if (cli_parse_bytes(optarg, &a->max_body, "--max-body", &err) != 0)
                cli_usage("%s", err.msg);
            break;
        case O_DRAIN: a->drain_timeout = (double)cli_int_or_usage(optarg, 0, 86400, "--drain-timeout"); break;
        case O_IDLE: a->idle_timeout = (int)cli_int_or_usage(optarg, 1, 86400, "--idle-timeout"); break;
        case O_PERIP:
            a->max_conns_per_ip = (int)cli_int_or_usage(optarg, 0, 1 << 20, "--max-conns-per-ip");
            break;
        case O_CORS: a->cors = optarg; break;
        case O_SPECIAL: a->allow_special = 1; break;
        case 'v': log_set_level(LOG_INFO); break;
        case 'h': fputs(usage, stdout); exit(0);
        case ':': cli_usage("%s needs a value", argv[optind - 1]);
        default: cli_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc)
        cli_usage("unexpected argument '%s' (models go with -m ALIAS=MODEL)", argv[optind]);
    if (flag_key && flag_keys)
        cli_usage("give --api-key or --api-keys, not both");
    if (flag_key || flag_keys) {
        a->api_key = flag_key;
        a->api_keys = flag_keys;
    } else {
        a->api_key = env_key && *env_key ? env_key : NULL;
        a->api_keys = env_keys && *env_keys ? env_keys : NULL;
        if (a->api_key && a->api_keys)
            cli_usage("MEMRA_API_KEY and MEMRA_API_KEYS are both set: give one");
    }
    if (!a->template_file && env_tmpl && *env_tmpl)
        a->template_file = env_tmpl;
    if (!flag_models && (env = getenv("MEMRA_MODELS")) && *env) {
        char *copy = xstrdup(env), *save = NULL;
        for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
            add_model(a, tok, "MEMRA_MODELS");
        free(copy);
    }
    if (a->n_models == 0)
        cli_usage("no model: give -m ALIAS=MODEL (or MEMRA_MODELS=\"alias=/path,...\")");
    int speculates = 0;
    for (int i = 0; i < a->n_models; i++) {
        serve_spec_opts *sp = &a->specs[i];
        if (sp->trim && !sp->draft)
            cli_usage("--trim %s: '%s' has no --draft (the trim limits a draft model's head)",
                      sp->trim, a->aliases[i]);
        if (serve_spec_wanted(sp) && a->tasks[i] != SERVE_TASK_AUTO &&
            a->tasks[i] != SERVE_TASK_CHAT)
            cli_usage("%s: '%s' is served for %s: speculative decoding is for chat models",
                      sp->draft ? "--draft" : sp->ngram ? "--ngram" : "--mtp", a->aliases[i],
                      serve_task_name(a->tasks[i]));
        sp->k = a->spec_k;
        sp->max_batch = a->spec_max_batch;
        speculates |= serve_spec_wanted(sp);
    }
    if ((a->spec_k || a->spec_max_batch) && !speculates)
        cli_usage("%s: no model has a drafter (give --draft DRAFT, --ngram or --mtp after its "
                  "-m)",
                  a->spec_k ? "--spec-k" : "--spec-max-batch");
    if (a->cors && (!*a->cors || strpbrk(a->cors, "\r\n")))
        cli_usage("--cors: want an origin such as https://example.com, or *");
    if (a->max_body == 0 || a->max_body > (1ull << 32))
        cli_usage("--max-body: %llu is out of range [1, 4G]", (unsigned long long)a->max_body);
}

static double mono(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Wait until no request is in flight, for at most `seconds`; a second
 * signal cuts the wait short. Returns whether everything finished. */
static int wait_idle(serve_server *s, double seconds, const sigset_t *sigs)
{
    double end = mono() + seconds;
    while (serve_inflight(s) > 0) {
        double left = end - mono();
        if (left <= 0)
            return 0;
        struct timespec ts = {0, 20 * 1000 * 1000};
        if (sigtimedwait(sigs, NULL, &ts) > 0)
            return 0;
    }
    return 1;
}


int main(int argc, char **argv)
{
    cli_set_program("memra-serve");
    (void)log_get_level(); /* read MEMRA_LOG before any thread starts */
    serve_args a = {0};
    a.kv = KV_DEFAULT;
    parse_args(argc, argv, &a);
    backend_kind bk = a.backend_given ? a.backend : backend_kind_default();
    if (a.device_given && bk != BK_CUDA)
        cli_usage("--device %d: the cpu backend has no devices (use --backend cuda)", a.device);
    memra_err err;
    {
        /* the pipeline flags, checked before anything is loaded */
        engine_opts check;
        engine_opts_default(&check);
        check.backend = bk;
        if (a.device_given && a.devices)
            cli_usage("--device and --devices: give one");
        if (engine_opts_parallel(&check, a.devices, a.pp, a.tp, &err) != 0)
            cli_usage("%s", err.msg);
    }

    struct sockaddr_storage ss;
    socklen_t sslen;
    if (serve_resolve(a.host, a.port, &ss, &sslen, &err) != 0)
        cli_fail(&err);
    if (!serve_is_loopback((struct sockaddr *)&ss) && !a.api_key && !a.api_keys && !a.insecure)
        cli_usage("refusing to listen on '%s' (not a loopback address) without an API key: give "
                  "--api-key/--api-keys, or --insecure to accept anyone", a.host);
    serve_auth *auth;
    if (serve_auth_new(a.api_key, a.api_keys, &auth, &err) != 0)
        cli_fail(&err);
    char *tmpl = NULL;
    if (a.template_file) {
        size_t len;
        if (read_small_file(a.template_file, 16u << 20, &tmpl, &len, &err) != 0)
            cli_fail(&err);
    }

    /* Signals go to this thread's sigwait, never to a worker. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    serve_opts so = {.host = a.host, .port = a.port, .http_threads = a.http_threads,
                     .max_body = (size_t)a.max_body, .idle_timeout = (unsigned)a.idle_timeout,
                     .conn_timeout = 120, .max_conns_per_ip = (unsigned)a.max_conns_per_ip,
                     .cors_origin = a.cors, .allow_special_in_content = a.allow_special,
                     .auth = auth};
    serve_server *srv;
    if (serve_start(&so, &srv, &err) != 0)
        cli_fail(&err);
    int v6 = ss.ss_family == AF_INET6;
    fprintf(stderr, "memra-serve: listening on http://%s%s%s:%d\n", v6 ? "[" : "", a.host,
            v6 ? "]" : "", serve_port(srv));

    serve_model **models = xcalloc((size_t)a.n_models, sizeof *models);
    for (int i = 0; i < a.n_models; i++) {
        serve_model_opts mo = {.alias = a.aliases[i], .path = a.paths[i], .n_ctx = a.n_ctx,
                               .max_sessions = a.max_sessions, .max_queue = a.max_queue,
                               .n_threads = a.n_threads, .chat_template = tmpl,
                               .backend = bk, .device = a.device, .devices = a.devices,
                               .pp = a.pp, .tp = a.tp, .kv_type = a.kv,
                               .prefill_chunk = a.prefill_chunk,
                               .prefix_cache = a.prefix_cache, .cache_blocks = a.cache_blocks,
                               .task = a.tasks[i], .spec = a.specs[i]};
        double t0 = mono();
        if (serve_model_load(&mo, &models[i], &err) != 0) {
            for (int j = 0; j < i; j++)
                serve_model_free(models[j]);
            serve_stop(srv);
            cli_fail(&err);
        }
        const char *why;
        serve_task task = serve_model_task(models[i]);
        fprintf(stderr, "memra-serve: %s = %s (context %lld, %d sessions%s) loaded in %.2f s\n",
                a.aliases[i], a.paths[i], (long long)serve_model_n_ctx(models[i]), a.max_sessions,
                task == SERVE_TASK_EMBED    ? ", embed"
                : task == SERVE_TASK_RERANK ? ", rerank"
                : serve_model_template(models[i], &why) ? ", chat" : ", no chat template",
                mono() - t0);
        const serve_spec *sp = serve_model_spec(models[i]);
        if (sp)
            fprintf(stderr, "memra-serve: %s speculates (%s, K = %d) while at most %d %s\n",
                    a.aliases[i], serve_spec_describe(sp), serve_spec_k(sp),
                    serve_spec_max_batch(sp),
                    serve_spec_max_batch(sp) == 1 ? "request decodes" : "requests decode");
    }
    serve_set_models(srv, models, a.n_models);
    serve_set_ready(srv);
    fprintf(stderr, "memra-serve: ready\n");

    int sig;
    while (sigwait(&sigs, &sig) != 0)
        ;
    fprintf(stderr, "memra-serve: %s: draining (%ld requests in flight, %.0f s timeout)\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT", serve_inflight(srv), a.drain_timeout);
    serve_drain(srv);
    int clean = wait_idle(srv, a.drain_timeout, &sigs);
    long cut = serve_inflight(srv);
    serve_detach_models(srv);
    for (int i = 0; i < a.n_models; i++)
        serve_model_free(models[i]); /* what is left ends with an error */
    wait_idle(srv, 5, &sigs);
    serve_stop(srv);
    if (clean)
        fprintf(stderr, "memra-serve: drained, exiting\n");
    else
        fprintf(stderr, "memra-serve: drain timeout: %ld requests cut, exiting\n", cut);
    free(models);
    free(tmpl);
    serve_auth_free(auth);
    for (int i = 0; i < a.n_models; i++) {
        free(a.aliases[i]);
        free(a.paths[i]);
    }
    free(a.aliases);
    free(a.paths);
    free(a.tasks);
    free(a.specs);
    free(a.host);
    return 0;
}
