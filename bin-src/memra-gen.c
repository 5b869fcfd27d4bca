/* memra-gen: one generation, and the tokenizer / template modes that touch
 * no weights. Argument parsing and output only: the loop is
 * lib/engine/generate.c, tokenizing lib/tok/, templates lib/tok/chat*.c. */
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/cli.h"
#include "core/json.h"
#include "core/log.h"
#include "core/mapfile.h"
#include "core/strbuf.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "engine/embed.h"
#include "model/checkpoint.h"
#include "model/chat_source.h"
#include "jinja/chat_template.h"
#include "tok/tokenizer.h"

static const char usage[] =
    "usage: memra-gen [MODEL] [-p TEXT | -f FILE | --prompt-ids IDS] [options]\n"
    "       memra-gen [MODEL] --tokenize -p TEXT [--add-special] [--parse-special] [--json]\n"
    "       memra-gen [MODEL] --detokenize --ids 1,2,3\n"
    "       memra-gen [MODEL] --render [--chat-template FILE] < request.json\n"
    "       memra-gen [MODEL] --embed [-p TEXT | -f FILE | --prompt-ids IDS] [--pooling P]\n"
    "                 [--dimensions N]"
    "\n"
    "MODEL is a GGUF file, an HF checkpoint dir or hf:owner/repo[:file]; without one,\n"
    "$MEMRA_MODEL, else the project's models/memra-tiny.gguf. The prompt comes from -p, -f,\n"
    "or standard input when that is not a terminal; an empty prompt is just BOS.\n"
    "\n"
    "generation:\n"
    "  -n N                tokens to generate (default 256; -1: until a stop)\n"
    "  --temp T            temperature (default 0.8; 0 = greedy)\n"
    "  --top-k K           (default 40; 0 = off)     --top-p P   (default 0.95; 1 = off)\n"
    "  --min-p P           (default 0.05; 0 = off)   --seed N    (default: from the clock)\n"
    "  --repeat-penalty R  (default 1 = off)  --presence-penalty X  --frequency-penalty X\n"
    "  --stop STR          stop string (repeatable; never printed)\n"
    "  --ignore-eos        do not stop at end-of-generation tokens\n"
    "  --grammar FILE      constrain the output to a GBNF grammar (root rule 'root')\n"
    "  --json-schema FILE  constrain the output to JSON valid against a JSON Schema\n"
    "  --chat              apply the model's chat template (env MEMRA_CHAT=1); --system TEXT\n"
    "  --parse-special     special-token text in a plain prompt becomes those tokens\n"
    "  --backend B         cpu (fast path), cpu-ref (reference) or cuda\n"
    "                      (default cuda when a GPU is present, else cpu)\n"
    "  --device N          CUDA device index (default 0)\n"
    "  --devices LIST      CUDA devices, one per pipeline stage or tensor-parallel rank (e.g.\n"
    "                      0,1; a device may repeat)\n"
    "  --pp N              split the layers over N pipeline stages (default: one per --devices\n"
    "                      entry; on the cpu backend N CPU stages); the output is one device's\n"
    "  --tp N              split every layer's heads and FFN columns over N tensor-parallel\n"
    "                      ranks (one per --devices entry; every family but gemma4);\n"
    "                      deterministic, within one device's parity bounds\n"
    "  --rank R            run pipeline stage R of --pp N (or rank R of --tp N) alone, the\n"
    "                      others in processes of their own (one a GPU, on this host or\n"
    "                      others), joined through NCCL; every process takes the same\n"
    "                      arguments but --rank (and --devices); rank 0 writes the output\n"
    "  --nccl-id FILE      where the processes meet: rank 0 writes NCCL's id there, the others\n"
    "                      read it (a path they all see; else env NCCL_COMM_ID=HOST:PORT)\n"
    "  --kv f32|f16|bf16|q8_0  KV cache type (default bf16; f32 on cpu-ref)\n"
    "  -t, --threads N     (default all cores; env MEMRA_THREADS)\n"
    "  -c, --ctx N         context length (default the model's, at most 4096)\n"
    "  --json              print one JSON object instead of streaming text\n"
    "embedding mode:\n"
    "  --embed             print the prompt's embedding as JSON: the final hidden states\n"
    "                      pooled and L2-normalized (the prompt encoded with BOS/EOS as the\n"
    "                      model's config says)\n"
    "  --pooling P         last, mean or cls (default: the checkpoint's; last if it says none)\n"
    "  --dimensions N      keep the first N dimensions, renormalized (Matryoshka models)\n"
    "tokenizer and template modes (no weights read; vocab-only GGUFs work):\n"
    "  --tokenize          print the ids of the prompt (raw: no BOS/EOS, special text not parsed)\n"
    "  --add-special       with --tokenize: add BOS/EOS as the model's config says\n"
    "  --detokenize        print the text of --ids\n"
    "  --ids 1,2,3         ids for --detokenize\n"
    "  --render            print the prompt an OpenAI chat request (stdin) renders to\n"
    "  --chat-template F   a template file instead of the model's\n"
    "\n"
    "Timings (prefill and decode tok/s, ms/token) go to stderr. Exit status: 0 ok, 1 failure,\n"
    "2 bad usage.\n";

typedef enum { MODE_GENERATE, MODE_TOKENIZE, MODE_DETOKENIZE, MODE_RENDER, MODE_EMBED } gen_mode;

typedef struct {
    gen_mode mode;
    const char *model, *prompt, *prompt_file, *prompt_ids, *ids, *system, *template_file;
    const char *grammar_file, *schema_file;
    int json, chat, add_special, parse_special, ignore_eos;
    int n_predict, n_threads, seed_given;
    backend_kind backend;
    int backend_given, device, device_given;
    const char *devices; /* --devices */
    int pp;              /* --pp */
    int tp;              /* --tp */
    int rank;            /* --rank, or -1 */
    const char *nccl_id; /* --nccl-id */
    kv_type kv;
    int64_t n_ctx;
    gen_params gp;
    const char **stop;
    size_t n_stop;
    int pooling;  /* --embed: MODEL_POOL_*, 0 the checkpoint's */
    int64_t dims; /* --embed --dimensions; 0 all */
} gen_opts;

static double parse_num_or_usage(const char *s, double lo, double hi, const char *what)
{
    memra_err err;
    double v;
    if (cli_parse_f64(s, lo, hi, &v, what, &err) != 0)
        cli_usage("%s", err.msg);
    return v;
}

/* "1,2,3" (spaces allowed) into ids; a bad entry is a usage error. */
static int32_t *parse_id_list(const char *s, size_t *n, const char *what)
{
    size_t cap = 16;
    int32_t *ids = xmalloc(cap * sizeof *ids);
    *n = 0;
    char *copy = xstrdup(s), *save = NULL;
    for (char *tok = strtok_r(copy, ", \t\n", &save); tok; tok = strtok_r(NULL, ", \t\n", &save)) {
        if (*n == cap)
            ids = xrealloc(ids, (cap *= 2) * sizeof *ids);
        ids[(*n)++] = (int32_t)cli_int_or_usage(tok, 0, INT32_MAX, what);
    }
    free(copy);
    return ids;
}

/* The model when none is named: $MEMRA_MODEL, else models/memra-tiny.gguf
 * beside the program's bin/ (a build tree) or in share/memra (installed). */
static char *default_model(void)
{
    const char *env = getenv("MEMRA_MODEL");
    if (env && *env)
        return xstrdup(env);
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            static const char *rel[] = {"/../models/memra-tiny.gguf",
                                        "/../share/memra/models/memra-tiny.gguf"};
            for (size_t i = 0; i < 2; i++) {
                char path[PATH_MAX + 64];
                snprintf(path, sizeof path, "%s%s", exe, rel[i]);
                if (access(path, R_OK) == 0)
                    return xstrdup(path);
            }
        }
    }
    cli_usage("no MODEL given, MEMRA_MODEL is not set, and the default models/memra-tiny.gguf "
              "was not found beside the program");
}

static void parse_args(int argc, char **argv, gen_opts *o)
{
    gen_params_default(&o->gp);
    o->kv = KV_DEFAULT;
    o->rank = -1;
    o->gp.sampling.temperature = 0.8;
    o->gp.sampling.top_k = 40;
    o->gp.sampling.top_p = 0.95;
    o->gp.sampling.min_p = 0.05;
    o->n_predict = 256;
    o->n_threads = cli_threads_default();
    o->chat = cli_env_true("MEMRA_CHAT");
    enum {
        O_TEMP = 1000, O_TOPK, O_TOPP, O_MINP, O_SEED, O_REP, O_PRES, O_FREQ, O_STOP, O_CHAT,
        O_SYSTEM, O_BACKEND, O_JSON, O_TOKENIZE, O_DETOKENIZE, O_RENDER, O_IDS, O_ADDSP, O_PARSESP,
        O_EMBED, O_POOLING, O_DIMS,
        O_TEMPLATE, O_PROMPT_IDS, O_IGNORE_EOS, O_DEVICE, O_KV, O_GRAMMAR, O_SCHEMA,
        O_DEVICES, O_PP, O_TP, O_RANK, O_NCCL_ID,
    };
    static const struct option longs[] = {
        {"prompt", required_argument, NULL, 'p'},       {"file", required_argument, NULL, 'f'},
        {"prompt-ids", required_argument, NULL, O_PROMPT_IDS},
        {"n-predict", required_argument, NULL, 'n'},    {"temp", required_argument, NULL, O_TEMP},
        {"top-k", required_argument, NULL, O_TOPK},     {"top-p", required_argument, NULL, O_TOPP},
        {"min-p", required_argument, NULL, O_MINP},     {"seed", required_argument, NULL, O_SEED},
        {"repeat-penalty", required_argument, NULL, O_REP},
        {"presence-penalty", required_argument, NULL, O_PRES},
        {"frequency-penalty", required_argument, NULL, O_FREQ},
        {"stop", required_argument, NULL, O_STOP},      {"chat", no_argument, NULL, O_CHAT},
        {"system", required_argument, NULL, O_SYSTEM},  {"backend", required_argument, NULL, O_BACKEND},
        {"threads", required_argument, NULL, 't'},      {"ctx", required_argument, NULL, 'c'},
        {"json", no_argument, NULL, O_JSON},            {"tokenize", no_argument, NULL, O_TOKENIZE},
        {"embed", no_argument, NULL, O_EMBED},          {"pooling", required_argument, NULL, O_POOLING},
        {"dimensions", required_argument, NULL, O_DIMS},
        {"detokenize", no_argument, NULL, O_DETOKENIZE}, {"render", no_argument, NULL, O_RENDER},
        {"ids", required_argument, NULL, O_IDS},        {"add-special", no_argument, NULL, O_ADDSP},
        {"parse-special", no_argument, NULL, O_PARSESP},
        {"chat-template", required_argument, NULL, O_TEMPLATE},
        {"ignore-eos", no_argument, NULL, O_IGNORE_EOS}, {"help", no_argument, NULL, 'h'},
        {"device", required_argument, NULL, O_DEVICE},  {"kv", required_argument, NULL, O_KV},
        {"grammar", required_argument, NULL, O_GRAMMAR},
        {"json-schema", required_argument, NULL, O_SCHEMA},
        {"devices", required_argument, NULL, O_DEVICES}, {"pp", required_argument, NULL, O_PP},
        {"tp", required_argument, NULL, O_TP},
        {"rank", required_argument, NULL, O_RANK}, {"nccl-id", required_argument, NULL, O_NCCL_ID},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int ch, modes = 0;
    while ((ch = getopt_long(argc, argv, ":p:f:n:t:c:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'p': o->prompt = optarg; break;
        case 'f': o->prompt_file = optarg; break;
        case O_PROMPT_IDS: o->prompt_ids = optarg; break;
        case 'n': o->n_predict = (int)cli_int_or_usage(optarg, -1, INT32_MAX, "-n"); break;
        case O_TEMP: o->gp.sampling.temperature = parse_num_or_usage(optarg, 0, 1e6, "--temp"); break;
        case O_TOPK: o->gp.sampling.top_k = (int32_t)cli_int_or_usage(optarg, 0, INT32_MAX, "--top-k"); break;
        case O_TOPP: o->gp.sampling.top_p = parse_num_or_usage(optarg, 0, 1, "--top-p"); break;
        case O_MINP: o->gp.sampling.min_p = parse_num_or_usage(optarg, 0, 1, "--min-p"); break;
        case O_SEED:
            o->gp.sampling.seed = (uint64_t)cli_int_or_usage(optarg, 0, INT64_MAX, "--seed");
            o->seed_given = 1;
            break;
        case O_REP: o->gp.sampling.repetition_penalty = parse_num_or_usage(optarg, 1e-6, 1e6, "--repeat-penalty"); break;
        case O_PRES: o->gp.sampling.presence_penalty = parse_num_or_usage(optarg, -2, 2, "--presence-penalty"); break;
        case O_FREQ: o->gp.sampling.frequency_penalty = parse_num_or_usage(optarg, -2, 2, "--frequency-penalty"); break;
        case O_STOP:
            if (!*optarg)
                cli_usage("--stop: the stop string is empty");
            o->stop = xrealloc(o->stop, (o->n_stop + 1) * sizeof *o->stop);
            o->stop[o->n_stop++] = optarg;
            break;
        case O_CHAT: o->chat = 1; break;
        case O_SYSTEM: o->system = optarg; break;
        case O_BACKEND:
            o->backend = backend_kind_or_usage(optarg);
            o->backend_given = 1;
            break;
        case 't': o->n_threads = (int)cli_int_or_usage(optarg, 1, 4096, "--threads"); break;
        case 'c': o->n_ctx = cli_int_or_usage(optarg, 1, INT32_MAX, "--ctx"); break;
        case O_DEVICE:
            o->device = (int)cli_int_or_usage(optarg, 0, 1024, "--device");
            o->device_given = 1;
            break;
        case O_DEVICES: o->devices = optarg; break;
        case O_PP: o->pp = (int)cli_int_or_usage(optarg, 1, 8, "--pp"); break;
        case O_TP: o->tp = (int)cli_int_or_usage(optarg, 1, 8, "--tp"); break;
        case O_RANK: o->rank = (int)cli_int_or_usage(optarg, 0, 7, "--rank"); break;
        case O_NCCL_ID: o->nccl_id = optarg; break;
        case O_KV: {
            memra_err err;
            if (kv_type_parse(optarg, &o->kv, &err) != 0)
                cli_usage("--kv: %s", err.msg);
            break;
        }
        case O_JSON: o->json = 1; break;
        case O_TOKENIZE: o->mode = MODE_TOKENIZE; modes++; break;
        case O_DETOKENIZE: o->mode = MODE_DETOKENIZE; modes++; break;
        case O_RENDER: o->mode = MODE_RENDER; modes++; break;
        case O_EMBED: o->mode = MODE_EMBED; modes++; break;
        case O_POOLING:
            if (!strcmp(optarg, "last"))
                o->pooling = MODEL_POOL_LAST;
            else if (!strcmp(optarg, "mean"))
                o->pooling = MODEL_POOL_MEAN;
            else if (!strcmp(optarg, "cls"))
                o->pooling = MODEL_POOL_CLS;
            else
                cli_usage("--pooling: want last, mean or cls, not '%s'", optarg);
            break;
        case O_DIMS: o->dims = cli_int_or_usage(optarg, 1, INT32_MAX, "--dimensions"); break;
        case O_IDS: o->ids = optarg; break;
        case O_ADDSP: o->add_special = 1; break;
        case O_PARSESP: o->parse_special = 1; break;
        case O_TEMPLATE: o->template_file = optarg; break;
        case O_IGNORE_EOS: o->ignore_eos = 1; break;
        case O_GRAMMAR: o->grammar_file = optarg; break;
        case O_SCHEMA: o->schema_file = optarg; break;
        case 'h': fputs(usage, stdout); exit(0);
        case ':': cli_usage("%s needs a value", argv[optind - 1]);
        default: cli_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (modes > 1)
        cli_usage("--tokenize, --detokenize, --render and --embed are separate modes: give one");
    if ((o->pooling || o->dims) && o->mode != MODE_EMBED)
        cli_usage("--pooling and --dimensions go with --embed");
    if (o->mode == MODE_EMBED && o->chat)
        cli_usage("--embed takes the prompt as it is: not --chat");
    if (optind + 1 < argc)
        cli_usage("unexpected argument '%s'", argv[optind + 1]);
    o->model = optind < argc ? argv[optind] : default_model();
    if (!!o->prompt + !!o->prompt_file + !!o->prompt_ids > 1)
        cli_usage("give one of -p, -f and --prompt-ids");
    if (o->mode == MODE_DETOKENIZE && !o->ids)
        cli_usage("--detokenize needs --ids");
    if (o->mode != MODE_DETOKENIZE && o->ids)
        cli_usage("--ids goes with --detokenize (generation takes --prompt-ids)");
    if (o->add_special && o->mode != MODE_TOKENIZE)
        cli_usage("--add-special goes with --tokenize");
    if (o->template_file && o->mode != MODE_RENDER && !o->chat)
        cli_usage("--chat-template goes with --render or --chat");
    if (o->chat && o->prompt_ids)
        cli_usage("--chat renders text: it does not take --prompt-ids");
    if (o->system && !o->chat)
        cli_usage("--system goes with --chat");
    if (o->rank >= 0 && (o->mode == MODE_TOKENIZE || o->mode == MODE_DETOKENIZE ||
                         o->mode == MODE_RENDER))
        cli_usage("--rank: tokenizing and rendering load no model to split");
    if (o->rank >= 0 && o->mode == MODE_EMBED)
        cli_usage("--rank with --embed: an embedding reads the last stage's hidden states, which "
                  "stay in its process (not built; use --pp or --tp in one process)");
    /* every process of a pipeline must draw the same stream */
    if (o->mode == MODE_GENERATE && o->rank >= 0 && !o->seed_given &&
        o->gp.sampling.temperature > 0)
        cli_usage("--rank %d with --temp %g: give --seed, the same to every process (each "
                  "samples the same stream)", o->rank, o->gp.sampling.temperature);
    if (o->mode == MODE_GENERATE && !o->seed_given)
        o->gp.sampling.seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
    o->gp.n_predict = o->n_predict;
    o->gp.stop = o->stop;
    o->gp.n_stop = o->n_stop;
    o->gp.ignore_eos = o->ignore_eos;
}

/* The prompt text: -p, -f, or standard input when it is not a terminal. */
static char *read_prompt(const gen_opts *o, size_t *len)
{
    memra_err err;
    if (o->prompt) {
        *len = strlen(o->prompt);
        return xstrdup(o->prompt);
    }
    char *buf;
    if (o->prompt_file) {
        if (read_small_file(o->prompt_file, 256u << 20, &buf, len, &err) != 0)
            cli_fail(&err);
        return buf;
    }
    if (isatty(STDIN_FILENO)) {
        *len = 0;
        return xstrdup("");
    }
    if (read_small_file("/dev/stdin", 256u << 20, &buf, len, &err) != 0)
        cli_fail(&err);
    return buf;
}

static char *load_template(const gen_opts *o, const checkpoint *c)
{
    memra_err err;
    char *tmpl;
    size_t len;
    if (o->template_file) {
        if (read_small_file(o->template_file, 16u << 20, &tmpl, &len, &err) != 0)
            cli_fail(&err);
        return tmpl;
    }
    if (chat_template_of(c, &tmpl, &err) != 0)
        cli_fail(&err);
    return tmpl;
}

static char *special_text(const tokenizer *t, int32_t id)
{
    const char *s = id >= 0 ? tok_text(t, id) : NULL;
    return s ? xstrdup(s) : NULL;
}

/* Render messages (+ tools, kwargs) through the template. */
static char *render(const gen_opts *o, const checkpoint *c, const tokenizer *t,
                    const json_t *messages, const json_t *tools, const json_t *documents,
                    int add_generation_prompt, const json_t *kwargs)
{
    memra_err err;
    char *tmpl = load_template(o, c);
    char *bos = special_text(t, tok_bos(t)), *eos = special_text(t, tok_eos(t));
    char *out;
    if (chat_template_render(tmpl, messages, tools, documents, add_generation_prompt, kwargs, bos,
                             eos, &out, &err) != 0)
        cli_fail(&err);
    free(tmpl);
    free(bos);
    free(eos);
    return out;
}

static int run_render(const gen_opts *o, const checkpoint *c, const tokenizer *t)
{
    memra_err err;
    char *buf;
    size_t len;
    if (read_small_file("/dev/stdin", 64u << 20, &buf, &len, &err) != 0)
        cli_fail(&err);
    json_t *req = json_parse_buf(buf, len, "request", &err);
    free(buf);
    if (!req)
        cli_fail(&err);
    if (!json_is_object(req))
        cli_failf("request: must be a JSON object with \"messages\"");
    json_t *messages = json_object_get(req, "messages");
    if (!json_is_array(messages))
        cli_failf("request: \"messages\" must be an array");
    json_t *tools = json_object_get(req, "tools");
    json_t *documents = json_object_get(req, "documents");
    json_t *kwargs = json_object_get(req, "chat_template_kwargs");
    if (kwargs && !json_is_object(kwargs))
        cli_failf("request: \"chat_template_kwargs\" must be an object");
    int add_gen = 1;
    json_t *ag = json_object_get(req, "add_generation_prompt");
    if (ag) {
        if (!json_is_boolean(ag))
            cli_failf("request: \"add_generation_prompt\" must be true or false");
        add_gen = json_is_true(ag);
    }
    char *out = render(o, c, t, messages, json_is_null(tools) ? NULL : tools,
                       json_is_null(documents) ? NULL : documents, add_gen, kwargs);
    fputs(out, stdout);
    free(out);
    json_decref(req);
    return 0;
}

static void print_ids_json(const char *key, const int32_t *ids, size_t n, int last)
{
    printf("\"%s\":[", key);
    for (size_t i = 0; i < n; i++)
        printf("%s%d", i ? "," : "", ids[i]);
    printf("]%s", last ? "" : ",");
}

static int run_tokenize(const gen_opts *o, const tokenizer *t)
{
    memra_err err;
    size_t len, n;
    char *text = read_prompt(o, &len);
    int32_t *ids;
    if (tok_encode(t, text, len, o->add_special, o->parse_special, &ids, &n, &err) != 0)
        cli_fail(&err);
    if (o->json) {
        printf("{");
        print_ids_json("tokens", ids, n, 1);
        printf("}\n");
    } else {
        for (size_t i = 0; i < n; i++)
            printf("%s%d", i ? "," : "", ids[i]);
        printf("\n");
    }
    free(ids);
    free(text);
    return 0;
}

static int run_detokenize(const gen_opts *o, const tokenizer *t)
{
    memra_err err;
    size_t n, len;
    int32_t *ids = parse_id_list(o->ids, &n, "--ids");
    char *text;
    if (tok_decode(t, ids, n, 0, &text, &len, &err) != 0)
        cli_fail(&err);
    if (o->json) {
        json_t *j = json_pack("{s:s%}", "text", text, len);
        char *s = json_dumps(j, JSON_ENSURE_ASCII * 0);
        puts(s);
        free(s);
        json_decref(j);
    } else {
        fwrite(text, 1, len, stdout);
    }
    free(text);
    free(ids);
    return 0;
}

static void stream_text(void *ctx, const char *text, size_t len)
{
    (void)ctx;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
}

/* --backend, else cuda when this build has CUDA and a device is present. */
static backend_kind default_backend(const gen_opts *o)
{
    return o->backend_given ? o->backend : backend_kind_default();
}

/* The engine the options ask for; exits on failure. */
static engine *load_engine(const gen_opts *o, const checkpoint *c)
{
    memra_err err;
    engine_opts eo;
    engine_opts_default(&eo);
    eo.n_threads = o->n_threads;
    eo.n_ctx = o->n_ctx;
    eo.backend = default_backend(o);
    eo.device = o->device;
    eo.kv_type = o->kv;
    if (o->device_given && eo.backend != BK_CUDA)
        cli_usage("--device %d: the cpu backend has no devices (use --backend cuda)", o->device);
    if (o->device_given && o->devices)
        cli_usage("--device and --devices: give one");
    if (engine_opts_parallel(&eo, o->devices, o->pp, o->tp, &err) != 0 ||
        engine_opts_rank(&eo, o->rank, o->nccl_id, &err) != 0)
        cli_usage("%s", err.msg);
    /* the other ranks run the same steps; rank 0 speaks for them */
    if (o->rank > 0 && !freopen("/dev/null", "w", stdout))
        cli_failf("--rank %d: cannot silence standard output", o->rank);
    engine *e;
    if (engine_load(c, &eo, &e, &err) != 0)
        cli_fail(&err);
    return e;
}

static int run_generate(const gen_opts *o, const checkpoint *c, const tokenizer *t)
{
    memra_err err;
    int32_t *prompt;
    size_t n_prompt;
    if (o->prompt_ids) {
        prompt = parse_id_list(o->prompt_ids, &n_prompt, "--prompt-ids");
    } else {
        size_t len;
        char *text = read_prompt(o, &len);
        int add_special = 1, parse_special = o->parse_special;
        if (o->chat) {
            json_t *messages = json_array();
            if (o->system)
                json_array_append_new(messages, json_pack("{s:s,s:s}", "role", "system",
                                                          "content", o->system));
            json_array_append_new(messages, json_pack("{s:s,s:s%}", "role", "user", "content",
                                                      text, len));
            char *rendered = render(o, c, t, messages, NULL, NULL, 1, NULL);
            json_decref(messages);
            free(text);
            text = rendered;
            len = strlen(text);
            /* the template writes BOS itself where the model wants one */
            add_special = 0;
            parse_special = 1;
        }
        if (tok_encode(t, text, len, add_special, parse_special, &prompt, &n_prompt, &err) != 0)
            cli_fail(&err);
        free(text);
    }
    engine *e = load_engine(o, c);
    /* -n past what the context leaves is clamped, with one line saying so
     * (the server clamps max_tokens the same way). */
    gen_params gp = o->gp;
    int64_t room = engine_n_ctx(e) - (int64_t)n_prompt;
    if (room > 0 && gp.n_predict > room) {
        fprintf(stderr,
                "memra-gen: warning: -n %d is more than the context of %lld leaves after the "
                "%zu-token prompt: generating at most %lld tokens\n",
                gp.n_predict, (long long)engine_n_ctx(e), n_prompt, (long long)room);
        gp.n_predict = (int)room;
    }
    /* --grammar / --json-schema: the grammar and the vocabulary's trie,
     * built once; the output can only be what the grammar allows. */
    gram_grammar *grammar = NULL;
    gram_vocab *gvocab = NULL;
    if (o->grammar_file || o->schema_file) {
        const char *path = o->grammar_file ? o->grammar_file : o->schema_file;
        if (o->grammar_file && o->schema_file)
            cli_usage("--grammar and --json-schema: give one");
        if (!t)
            cli_failf("%s: a constrained output needs the model's tokenizer", path);
        char *buf;
        size_t len;
        if (read_small_file(path, 16u << 20, &buf, &len, &err) != 0)
            cli_fail(&err);
        grammar = o->grammar_file ? gram_parse_gbnf(buf, len, &err) : jsch_compile_text(buf, len, &err);
        free(buf);
        if (!grammar)
            cli_failf("%s: %s", path, err.msg);
        if (!(gvocab = gram_vocab_from_tok(t, &err)))
            cli_fail(&err);
        gp.grammar = grammar;
        gp.grammar_vocab = gvocab;
    }
    gen_result r;
    int streamed = !o->json && t != NULL;
    if (generate(e, t, prompt, n_prompt, &gp, streamed ? stream_text : NULL, NULL, &r, &err) != 0)
        cli_fail(&err);
    double prefill_tps = r.prefill_ms > 0 ? n_prompt / (r.prefill_ms / 1e3) : 0;
    double decode_tps = r.decode_ms > 0 ? r.n_tokens / (r.decode_ms / 1e3) : 0;
    double ms_per_token = r.n_tokens ? r.decode_ms / (double)r.n_tokens : 0;
    if (o->json) {
        json_t *j = json_object();
        json_t *pt = json_array(), *gt = json_array();
        for (size_t i = 0; i < n_prompt; i++)
            json_array_append_new(pt, json_integer(prompt[i]));
        for (size_t i = 0; i < r.n_tokens; i++)
            json_array_append_new(gt, json_integer(r.tokens[i]));
        json_object_set_new(j, "prompt_tokens", pt);
        json_object_set_new(j, "tokens", gt);
        json_object_set_new(j, "text", json_string(r.text));
        json_object_set_new(j, "finish_reason", json_string(gen_finish_name(r.finish)));
        json_object_set_new(j, "seed", json_integer((json_int_t)o->gp.sampling.seed));
        json_object_set_new(j, "timings", json_pack("{s:f,s:f,s:f,s:f,s:f}", "prefill_ms",
                                                    r.prefill_ms, "prefill_tok_s", prefill_tps,
                                                    "decode_ms", r.decode_ms, "decode_tok_s",
                                                    decode_tps, "ms_per_token", ms_per_token));
        char *s = json_dumps(j, JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
        json_decref(j);
    } else if (!t) {
        /* no tokenizer: the generated ids are the output */
        for (size_t i = 0; i < r.n_tokens; i++)
            printf("%s%d", i ? " " : "", r.tokens[i]);
        putchar('\n');
    } else {
        /* the text ends its line, so the timing line on stderr starts its own */
        putchar('\n');
    }
    fflush(stdout);
    fprintf(stderr,
            "memra-gen: prefill %zu tokens in %.1f ms (%.1f tok/s); decode %zu tokens in %.1f ms "
            "(%.1f tok/s, %.3f ms/token); finish %s\n",
            n_prompt, r.prefill_ms, prefill_tps, r.n_tokens, r.decode_ms, decode_tps,
            ms_per_token, gen_finish_name(r.finish));
    gen_result_free(&r);
    gram_vocab_free(gvocab);
    gram_free(grammar);
    engine_free(e);
    free(prompt);
    return 0;
}

/* --embed: the prompt's pooled, normalized final hidden state as JSON. */
static int run_embed(const gen_opts *o, const checkpoint *c, const tokenizer *t)
{
    memra_err err;
    int32_t *ids;
    size_t n;
    if (o->prompt_ids) {
        ids = parse_id_list(o->prompt_ids, &n, "--prompt-ids");
    } else {
        size_t len;
        char *text = read_prompt(o, &len);
        if (!t)
            cli_failf("%s: embedding text needs the model's tokenizer (or give --prompt-ids)",
                      c->path);
        if (tok_encode(t, text, len, 1, o->parse_special, &ids, &n, &err) != 0)
            cli_fail(&err);
        free(text);
    }
    if (n == 0)
        cli_failf("--embed: the input is empty (no tokens)");
    int kind = o->pooling ? o->pooling
               : c->config.pooling == MODEL_POOL_MEAN || c->config.pooling == MODEL_POOL_CLS
                   ? (int)c->config.pooling
                   : MODEL_POOL_LAST;
    if (o->dims > c->config.dim)
        cli_usage("--dimensions %lld: the model has %lld", (long long)o->dims,
                  (long long)c->config.dim);
    int64_t dims = o->dims ? o->dims : c->config.dim;
    engine *e = load_engine(o, c);
    engine_seq *s;
    if (engine_seq_new(e, &s, &err) != 0)
        cli_fail(&err);
    float *vec = xmalloc((size_t)dims * sizeof *vec);
    if (engine_embed(e, s, ids, n, kind, dims, vec, &err) != 0)
        cli_fail(&err);
    static const char *const names[] = {"none", "mean", "cls", "last", "rank"};
    printf("{\"tokens\":%zu,\"pooling\":\"%s\",\"dimensions\":%lld,\"embedding\":[", n,
           names[kind], (long long)dims);
    for (int64_t i = 0; i < dims; i++)
        printf("%s%.9g", i ? "," : "", (double)vec[i]);
    printf("]}\n");
    fflush(stdout);
    free(vec);
    engine_seq_free(s);
    engine_free(e);
    free(ids);
    return 0;
}

int main(int argc, char **argv)
{
    cli_set_program("memra-gen");
    gen_opts o = {0};
    parse_args(argc, argv, &o);
    memra_err err;
    checkpoint c;
    if (checkpoint_open(o.model, &c, &err) != 0)
        cli_fail(&err);
    tokenizer *t = NULL;
    if (checkpoint_load_tokenizer(&c, &t, &err) != 0) {
        /* A checkpoint without a tokenizer (a random one, say) can still
         * run on ids; the output is then ids only. */
        if (o.mode != MODE_GENERATE || !o.prompt_ids || o.n_stop)
            cli_fail(&err);
        log_info("%s; generating ids only", err.msg);
        t = NULL;
    }
    if (o.mode == MODE_GENERATE && c.vocab_only)
        cli_failf("%s: a vocab-only GGUF has no weights to generate with (--tokenize, "
                  "--detokenize and --render work on it)", c.path);
    int rc;
    switch (o.mode) {
    case MODE_TOKENIZE: rc = run_tokenize(&o, t); break;
    case MODE_DETOKENIZE: rc = run_detokenize(&o, t); break;
    case MODE_RENDER: rc = run_render(&o, &c, t); break;
    case MODE_EMBED: rc = run_embed(&o, &c, t); break;
    default: rc = run_generate(&o, &c, t); break;
    }
    if (t)
        tok_free(t);
    checkpoint_close(&c);
    free(o.stop);
    return rc;
}
