/* memra-parity: numeric agreement of our logits with a reference dump.
 * Argument parsing and output; the comparison is lib/engine/parity.c. */
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#if MEMRA_CUDA
#include "check/kernel_check.h"
#endif
#include "core/check.h"
#include "core/cli.h"
#include "engine/engine.h"
#include "engine/parity.h"
#include "engine/imatrix_collect.h"
#include "engine/perplexity.h"
#include "engine/quality.h"
#include "quant/imatrix.h"
#include "core/mapfile.h"
#include "tok/tokenizer.h"
#include "format/safetensors.h"
#include "model/checkpoint.h"

static const char usage[] =
    "usage: memra-parity MODEL --reference REF.safetensors [--json] [--max-abs X]\n"
    "                    [--min-cosine C] [--kv TYPE] [--backend cpu|cpu-ref|cuda] [-t N]\n"
    "                    [--draft ASSISTANT]\n"
    "       memra-parity MODEL --perplexity TEXT_FILE [--window N] [--chunks N] [--json]\n"
    "       memra-parity MODEL --imatrix OUT -f TEXT_FILE [--chunk N] [--chunks N] [--json]\n"
    "       memra-parity QUANT --against REF -f TEXT_FILE [--chunk N] [--chunks N] [--json]\n"
    "                    [--backend cpu|cpu-ref|cuda]\n"
    "       memra-parity MODEL --backends cpu,cuda --prompt-ids ID,ID,... [--json]\n"
    "                    [--pp N | --tp N] [--devices LIST]\n"
    "       memra-parity --kernels [--perf] [--only OP] [--skip OP] [--device N] [--seed S]\n"
    "\n"
    "Runs MODEL over the token ids of a reference dump (scripts/hf_reference.py writes them:\n"
    "tokens I32 [n], logits F32 [n, vocab], optional hidden F32 [n_layers + 1, n, dim]) and\n"
    "compares logits position by position, and hidden states layer by layer when present.\n"
    "A dump with mtp_logits F32 [n - 1, vocab] (and mtp_hidden [n - 1, dim]) also checks the\n"
    "checkpoint's MTP block: row q from the hidden state at q and the token at q + 1.\n"
    "A dump with assistant_logits (and assistant_hidden) checks an assistant the same way\n"
    "(--draft ASSISTANT: a gemma4_assistant reading MODEL's K/V; its next hidden state).\n"
    "\n"
    "  --reference F   the dump to compare with (required)\n"
    "  --json          one JSON object instead of a table\n"
    "  --draft A       the assistant checkpoint the reference's assistant rows are from\n"
    "  --max-abs X     fail when |ours - ref| > X * max(1, max |ref logit|) anywhere\n"
    "                  (default 1e-4 for float weights; not gated for quantized ones)\n"
    "  --min-cosine C  fail when a position's cosine similarity is below C\n"
    "                  (default 0.99999 float, 0.999 Q8_0/Q6_K, 0.99 other quantized)\n"
    "  --kv TYPE       KV cache type: f32 (the default here, on every backend, so a parity\n"
    "                  run holds the cache exact), f16, bf16 or q8_0\n"
    "  --perplexity F  perplexity on text file F: consecutive windows from the start, each run\n"
    "                  from position 0, mean NLL over every next token (no reference needed)\n"
    "  --window N      perplexity window in tokens (default: the context, at most 512)\n"
    "  --chunk N       the same as --window (the name --imatrix and --against use)\n"
    "  --chunks N      use at most the first N windows of the text\n"
    "  --imatrix OUT   importance matrix: run MODEL (CPU) over the whole chunks of -f TEXT and\n"
    "                  write, per weight matrix, the mean squared input per column (llama.cpp's\n"
    "                  GGUF imatrix format, for memra-quantize --imatrix)\n"
    "  --against REF   quantization quality: run MODEL and REF over the same windows of -f TEXT;\n"
    "                  perplexity of each, KL(REF || MODEL) of the next-token distributions\n"
    "                  (mean, median, 99th percentile, max) and top-1 agreement\n"
    "  -f FILE         the text for --imatrix and --against\n"
    "  --backend B     run MODEL on cpu (default: the fast path), cpu-ref (the reference,\n"
    "                  f32 products: the oracle for parity gates) or cuda\n"
    "  --backends A,B  compare two backends' logits and hidden states on --prompt-ids\n"
    "                  (same gates as --reference, with A as the reference)\n"
    "  --prompt-ids L  comma-separated token ids for --backends\n"
    "  --kernels       every CUDA op against the CPU reference's on random inputs: one line\n"
    "                  per check, then ALL GREEN (exit 0) or the failures (exit 1)\n"
    "  --perf          with --kernels: also time each op (us per call, GB/s), large shapes too\n"
    "  --only OP       with --kernels: only the checks whose op name contains OP\n"
    "  --skip OP       with --kernels: leave out the checks whose op name contains OP\n"
    "  --device N      CUDA device (default 0), for --kernels and --backend(s) cuda\n"
    "  --pp N          run MODEL split over N pipeline stages (with --backends: B, A on one\n"
    "                  device), for --reference and --backends; --max-abs 0 asks for the\n"
    "                  same bytes as one device\n"
    "  --tp N          run MODEL split over N tensor-parallel ranks (with --backends: B, A on\n"
    "                  one device), for --reference and --backends; the sums over ranks\n"
    "                  change the order of additions, so compare with the usual bounds\n"
    "  --devices LIST  the CUDA device of each stage or rank (e.g. 0,1; a device may repeat)\n"
    "  --seed S        with --kernels: the random inputs' seed (default 1)\n"
    "  -t, --threads N worker threads (default all cores; env MEMRA_THREADS)\n"
    "  -h, --help      this text\n"
    "\n"
    "Exit status: 0 within thresholds, 1 beyond them or on failure, 2 bad usage.\n";

typedef struct {
    const char *model, *reference, *perplexity_file;
    const char *imatrix_out, *against, *text_file;
    int json, window, chunks;
    double max_abs, min_cosine; /* < 0: the default for the weights' dtype */
    kv_type kv;
    int n_threads;
    backend_kind backend;
    int kernels, perf, device, n_backends;
    backend_kind backends[2];
    const char *prompt_ids, *only, *skip;
    const char *draft; /* an assistant checkpoint (--draft) */
    const char *devices; /* --devices */
    int pp;              /* --pp */
    int tp;              /* --tp */
    uint64_t seed;
} parity_opts;

/* Collects hidden states as the engine reports them, by position. */
typedef struct {
    int64_t n_pos, dim;
    int n_index;
    float *h; /* [n_index][n_pos][dim] */
} hidden_capture;

static void capture_hidden(void *ctx, int index, const bk_batch *rows, int64_t dim, const float *h)
{
    hidden_capture *c = ctx;
    if (index < 0 || index >= c->n_index || dim != c->dim)
        return;
    for (int i = 0; i < rows->n; i++) {
        int64_t p = rows->pos[i];
        if (p >= 0 && p < c->n_pos)
            memcpy(c->h + ((size_t)index * c->n_pos + p) * dim, h + (size_t)i * dim,
                   (size_t)dim * sizeof(float));
    }
}

/* The dtype of the checkpoint's matrices, which sets the default gates. */
static dtype weight_dtype(const checkpoint *c)
{
    for (int i = 0; i < c->n_tensors; i++)
        if (c->tensors[i].n_dims == 2)
            return c->tensors[i].type;
    return DT_F32;
}

static void default_gates(dtype t, parity_opts *o)
{
    int is_float = t == DT_F32 || t == DT_F16 || t == DT_BF16;
    if (o->max_abs < 0)
        o->max_abs = is_float ? 1e-4 : INFINITY;
    if (o->min_cosine < 0)
        o->min_cosine = is_float ? 0.99999 : (t == DT_Q8_0 || t == DT_Q6_K) ? 0.999 : 0.99;
}

static const st_tensor *need_tensor(const st_set *s, const char *name, dtype type, int n_dims,
                                    const char *path)
{
    const st_tensor *t = st_find(s, name);
    if (!t)
        cli_failf("%s: no '%s' tensor (not a reference dump?)", path, name);
    if (t->type != type || t->n_dims != n_dims)
        cli_failf("%s: tensor '%s' must be %s with %d dims", path, name, dtype_get(type)->name,
                  n_dims);
    return t;
}

static void parse_args(int argc, char **argv, parity_opts *o)
{
    memra_err err;
    int64_t threads = cli_threads_default();
    o->max_abs = o->min_cosine = -1;
    o->kv = KV_F32;
    static const struct option longs[] = {
        {"reference", required_argument, NULL, 'r'}, {"json", no_argument, NULL, 'j'},
        {"max-abs", required_argument, NULL, 'a'},   {"min-cosine", required_argument, NULL, 'c'},
        {"kv", required_argument, NULL, 'k'},        {"threads", required_argument, NULL, 't'},
        {"kernels", no_argument, NULL, 'K'},         {"imatrix", required_argument, NULL, 'I'},
        {"against", required_argument, NULL, 'A'},   {"help", no_argument, NULL, 'h'},
        {"perplexity", required_argument, NULL, 'P'}, {"window", required_argument, NULL, 'W'},
        {"backend", required_argument, NULL, 'B'},   {"backends", required_argument, NULL, 'D'},
        {"prompt-ids", required_argument, NULL, 'p'}, {"perf", no_argument, NULL, 'F'},
        {"device", required_argument, NULL, 'd'},   {"seed", required_argument, NULL, 's'},
        {"only", required_argument, NULL, 'O'},      {"chunk", required_argument, NULL, 'W'},
        {"chunks", required_argument, NULL, 'N'},   {"skip", required_argument, NULL, 'X'},
        {"draft", required_argument, NULL, 'G'},
        {"devices", required_argument, NULL, 'V'},   {"pp", required_argument, NULL, 'L'},
        {"tp", required_argument, NULL, 'T'},
        {"rank", required_argument, NULL, 'R'},      {"nccl-id", required_argument, NULL, 'R'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":t:f:h", longs, NULL)) != -1) {
        switch (ch) {
        case 'r': o->reference = optarg; break;
        case 'G': o->draft = optarg; break;
        case 'P': o->perplexity_file = optarg; break;
        case 'W': {
            int64_t w;
            if (cli_parse_i64(optarg, 2, 1 << 20, &w, "--window/--chunk", &err) != 0)
                cli_usage("%s", err.msg);
            o->window = (int)w;
            break;
        }
        case 'N': {
            int64_t k;
            if (cli_parse_i64(optarg, 1, INT32_MAX, &k, "--chunks", &err) != 0)
                cli_usage("%s", err.msg);
            o->chunks = (int)k;
            break;
        }
        case 'f': o->text_file = optarg; break;
        case 'j': o->json = 1; break;
        case 'a':
            if (cli_parse_f64(optarg, 0, 1e30, &o->max_abs, "--max-abs", &err) != 0)
                cli_usage("%s", err.msg);
            break;
        case 'c':
            if (cli_parse_f64(optarg, -1, 1, &o->min_cosine, "--min-cosine", &err) != 0)
                cli_usage("%s", err.msg);
            break;
        case 'k':
            if (kv_type_parse(optarg, &o->kv, &err) != 0)
                cli_usage("--kv: %s", err.msg);
            break;
        case 't':
            if (cli_parse_i64(optarg, 1, 4096, &threads, "--threads", &err) != 0)
                cli_usage("%s", err.msg);
            break;
        case 'K': o->kernels = 1; break;
        case 'F': o->perf = 1; break;
        case 'O': o->only = optarg; break;
        case 'X': o->skip = optarg; break;
        case 'p': o->prompt_ids = optarg; break;
        case 'B':
            if (backend_kind_parse(optarg, &o->backend, &err) != 0)
                cli_usage("--backend: %s", err.msg);
            break;
        case 'D': {
            char buf[64];
            snprintf(buf, sizeof buf, "%s", optarg);
            char *comma = strchr(buf, ',');
            if (!comma || strchr(comma + 1, ','))
                cli_usage("--backends: '%s' is not two backends like cpu,cuda", optarg);
            *comma = '\0';
            if (backend_kind_parse(buf, &o->backends[0], &err) != 0 ||
                backend_kind_parse(comma + 1, &o->backends[1], &err) != 0)
                cli_usage("--backends: %s", err.msg);
            o->n_backends = 2;
            break;
        }
        case 'V': o->devices = optarg; break;
        case 'L': o->pp = (int)cli_int_or_usage(optarg, 1, 8, "--pp"); break;
        case 'T': o->tp = (int)cli_int_or_usage(optarg, 1, 8, "--tp"); break;
        case 'R':
            cli_usage("--rank, --nccl-id: memra-parity reads every layer's hidden states, which "
                      "would stay in the other processes; run --pp N or --tp N in one process "
                      "(memra-gen and memra-bench take --rank)");
        case 'd': {
            int64_t d;
            if (cli_parse_i64(optarg, 0, 1024, &d, "--device", &err) != 0)
                cli_usage("%s", err.msg);
            o->device = (int)d;
            break;
        }
        case 's': {
            int64_t sd;
            if (cli_parse_i64(optarg, 0, INT64_MAX, &sd, "--seed", &err) != 0)
                cli_usage("%s", err.msg);
            o->seed = (uint64_t)sd;
            break;
        }
        case 'I': o->imatrix_out = optarg; break;
        case 'A': o->against = optarg; break;
        case 'h': fputs(usage, stdout); exit(0);
        case ':': cli_usage("%s needs a value", argv[optind - 1]);
        default: cli_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    o->n_threads = (int)threads;
    if ((o->perf || o->only || o->skip) && !o->kernels)
        cli_usage("%s goes with --kernels", o->perf ? "--perf" : o->only ? "--only" : "--skip");
    if (o->kernels) {
        if (o->reference || o->perplexity_file || o->n_backends || o->imatrix_out || o->against)
            cli_usage("--kernels is a mode of its own: no --reference, --perplexity, --backends, "
                      "--imatrix or --against");
        if (optind < argc)
            cli_usage("--kernels takes no MODEL (unexpected '%s')", argv[optind]);
        return;
    }
    if (optind >= argc)
        cli_usage("no MODEL given");
    if (optind + 1 < argc)
        cli_usage("unexpected argument '%s'", argv[optind + 1]);
    if (!!o->reference + !!o->perplexity_file + !!o->n_backends + !!o->imatrix_out + !!o->against >
        1)
        cli_usage("--reference, --perplexity, --backends, --imatrix and --against are separate "
                  "modes: give one");
    if ((o->imatrix_out || o->against) && !o->text_file)
        cli_usage("%s needs the text: -f TEXT_FILE", o->imatrix_out ? "--imatrix" : "--against");
    if (o->text_file && !o->imatrix_out && !o->against)
        cli_usage("-f goes with --imatrix or --against (--perplexity takes its file itself)");
    if (o->imatrix_out && o->backend == BK_CUDA)
        cli_usage("--imatrix collects on the CPU backend only (not --backend %s)",
                  backend_kind_name(o->backend));
    if ((o->pp || o->tp || o->devices) && !o->reference && !o->n_backends)
        cli_usage("--pp, --tp and --devices go with --reference or --backends");
    if (o->n_backends && !o->prompt_ids)
        cli_usage("--backends needs --prompt-ids");
    if (o->prompt_ids && !o->n_backends)
        cli_usage("--prompt-ids goes with --backends");
    if (!o->reference && !o->perplexity_file && !o->n_backends && !o->imatrix_out && !o->against)
        cli_usage("--reference REF.safetensors (or --perplexity FILE, --imatrix OUT, --against "
                  "REF) is required");
    if ((o->window || o->chunks) && !o->perplexity_file && !o->imatrix_out && !o->against)
        cli_usage("%s goes with --perplexity, --imatrix or --against",
                  o->window ? "--window/--chunk" : "--chunks");
    o->model = argv[optind];
}

/* A model to run: open, with weights, and its tokenizer. */
static void open_model(const char *spec, checkpoint *ck, tokenizer **t)
{
    memra_err err;
    if (checkpoint_open(spec, ck, &err) != 0)
        cli_fail(&err);
    if (ck->vocab_only)
        cli_failf("%s: a vocab-only GGUF has no weights to run", ck->path);
    if (checkpoint_load_tokenizer(ck, t, &err) != 0)
        cli_fail(&err);
}

/* The text file's token ids (nothing added: no BOS), as --perplexity
 * has always read it. */
static int32_t *tokenize_file(const tokenizer *t, const char *path, size_t *n)
{
    memra_err err;
    char *text;
    size_t len;
    if (read_small_file(path, 1u << 30, &text, &len, &err) != 0)
        cli_fail(&err);
    int32_t *ids;
    if (tok_encode(t, text, len, 0, 0, &ids, n, &err) != 0)
        cli_failf("%s: %s", path, err.msg);
    free(text);
    return ids;
}

/* --window/--chunk, else the training context capped at 512. */
static int window_of(const parity_opts *o, const checkpoint *ck)
{
    if (o->window)
        return o->window;
    return ck->config.n_ctx_train > 0 && ck->config.n_ctx_train < 512 ? (int)ck->config.n_ctx_train
                                                                     : 512;
}

/* --chunks N: only the tokens of the first N windows. */
static size_t limit_chunks(const parity_opts *o, size_t n, int window)
{
    if (o->chunks > 0 && (uint64_t)o->chunks * (uint64_t)window < n)
        return (size_t)o->chunks * (size_t)window;
    return n;
}

static void print_json(json_t *j)
{
    char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    puts(txt);
    free(txt);
    json_decref(j);
}

static int run_perplexity(const parity_opts *o)
{
    memra_err err;
    checkpoint ck;
    tokenizer *t;
    open_model(o->model, &ck, &t);
    size_t n;
    int32_t *ids = tokenize_file(t, o->perplexity_file, &n);
    int window = window_of(o, &ck);
    n = limit_chunks(o, n, window);
    engine_opts eo;
    engine_opts_default(&eo);
    eo.n_threads = o->n_threads;
    eo.kv_type = o->kv;
    eo.n_ctx = window;
    eo.backend = o->backend;
    eo.device = o->device;
    engine *e;
    if (engine_load(&ck, &eo, &e, &err) != 0)
        cli_fail(&err);
    perplexity_result r;
    if (perplexity_run(e, ids, n, window, &r, &err) != 0)
        cli_fail(&err);
    if (o->json) {
        json_t *j = json_pack("{s:s,s:s,s:I,s:i,s:I,s:I,s:f,s:f,s:f}", "model", ck.path, "text",
                              o->perplexity_file, "tokens", (json_int_t)r.n_tokens, "window",
                              window, "windows", (json_int_t)r.n_windows, "predictions",
                              (json_int_t)r.n_predictions, "mean_nll", r.mean_nll, "perplexity",
                              r.perplexity, "top1", (double)r.n_top1 / (double)r.n_predictions);
        char *txt = json_dumps(j, JSON_PRESERVE_ORDER);
        puts(txt);
        free(txt);
        json_decref(j);
    }
    else
        printf("%s on %s: %zu tokens, %zu windows of %d, %zu predictions: mean NLL %.6f nats, "
               "perplexity %.4f, top-1 %.4f\n",
               ck.path, o->perplexity_file, r.n_tokens, r.n_windows, window, r.n_predictions,
               r.mean_nll, r.perplexity, (double)r.n_top1 / (double)r.n_predictions);
    engine_free(e);
    free(ids);
    tok_free(t);
    checkpoint_close(&ck);
    return 0;
}

/* --imatrix OUT: the model over every whole chunk of the text on the CPU,
 * the collector accumulating what enters each weight matrix. Only whole
 * chunks, so every statistic comes from the same context length. */
static int run_imatrix(const parity_opts *o)
{
    memra_err err;
    checkpoint ck;
    tokenizer *t;
    open_model(o->model, &ck, &t);
    size_t n;
    int32_t *ids = tokenize_file(t, o->text_file, &n);
    int chunk = window_of(o, &ck);
    size_t n_chunks = n / (size_t)chunk;
    if (n_chunks == 0)
        cli_failf("%s: %zu tokens, shorter than one chunk of %d (give a longer text or a smaller "
                  "--chunk)",
                  o->text_file, n, chunk);
    if (o->chunks > 0 && (size_t)o->chunks < n_chunks)
        n_chunks = (size_t)o->chunks;
    if (n_chunks > INT32_MAX)
        cli_failf("%s: %zu chunks is too many", o->text_file, n_chunks);
    engine_opts eo;
    engine_opts_default(&eo);
    eo.n_threads = o->n_threads;
    eo.kv_type = o->kv;
    eo.n_ctx = chunk;
    engine *e;
    if (engine_load(&ck, &eo, &e, &err) != 0)
        cli_fail(&err);
    imatrix_collector *col;
    if (imatrix_collect_attach(e, &col, &err) != 0)
        cli_fail(&err);
    int tty = isatty(STDERR_FILENO);
    double nll = 0;
    size_t predictions = 0;
    for (size_t i = 0; i < n_chunks; i++) {
        if (tty)
            fprintf(stderr, "\rmemra-parity: imatrix: chunk %zu/%zu", i + 1, n_chunks);
        perplexity_result r;
        if (perplexity_run(e, ids + i * (size_t)chunk, (size_t)chunk, chunk, &r, &err) != 0 ||
            imatrix_collect_status(col, &err) != 0)
            cli_fail(&err);
        nll += r.mean_nll * (double)r.n_predictions;
        predictions += r.n_predictions;
    }
    if (tty)
        fputc('\n', stderr);
    imatrix m;
    if (imatrix_collect_result(col, (int32_t)n_chunks, o->text_file, &m, &err) != 0 ||
        imatrix_write(o->imatrix_out, &m, &err) != 0)
        cli_fail(&err);
    /* as llama-imatrix does: say which experts the text never reached
     * (their importance is written as 1, the neutral value) */
    int partial = 0;
    for (int i = 0; i < m.n_entries; i++) {
        int unused = 0, mats = 0;
        for (int k = 0; imatrix_collect_rows(col, m.entries[i].name, k) >= 0; k++, mats++)
            unused += imatrix_collect_rows(col, m.entries[i].name, k) == 0;
        if (unused) {
            partial++;
            fprintf(stderr, "memra-parity: warning: %s: %d of %d experts received no token\n",
                    m.entries[i].name, unused, mats);
        }
    }
    double ppl = exp(nll / (double)predictions);
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "model", json_string(ck.path));
        json_object_set_new(j, "text", json_string(o->text_file));
        json_object_set_new(j, "imatrix", json_string(o->imatrix_out));
        json_object_set_new(j, "partial_entries", json_integer(partial));
        json_object_set_new(j, "tokens", json_integer((json_int_t)n));
        json_object_set_new(j, "chunk", json_integer(chunk));
        json_object_set_new(j, "chunks", json_integer((json_int_t)n_chunks));
        json_object_set_new(j, "tokens_used", json_integer((json_int_t)(n_chunks * (size_t)chunk)));
        json_object_set_new(j, "entries", json_integer(m.n_entries));
        json_object_set_new(j, "perplexity", json_real(ppl));
        print_json(j);
    } else {
        printf("%s: %d entries from %zu chunk%s of %d tokens of %s (%zu of %zu tokens; "
               "perplexity %.4f)\n",
               o->imatrix_out, m.n_entries, n_chunks, n_chunks == 1 ? "" : "s", chunk,
               o->text_file, n_chunks * (size_t)chunk, n, ppl);
    }
    imatrix_free(&m);
    imatrix_collect_free(col);
    engine_free(e);
    free(ids);
    tok_free(t);
    checkpoint_close(&ck);
    return 0;
}

/* Two models share a vocabulary when every id is the same piece: then the
 * same text is the same ids for both, and positions compare. */
static void check_same_vocab(const tokenizer *tq, const char *q, const tokenizer *tr,
                             const char *r)
{
    size_t nq = tok_vocab_size(tq), nr = tok_vocab_size(tr);
    if (nq != nr)
        cli_failf("%s and %s do not share a vocabulary: %zu tokens vs %zu", q, r, nq, nr);
    for (size_t i = 0; i < nq; i++) {
        size_t lq, lr;
        const char *pq = tok_piece(tq, (int32_t)i, &lq), *pr = tok_piece(tr, (int32_t)i, &lr);
        if (lq != lr || (lq && memcmp(pq, pr, lq) != 0))
            cli_failf("%s and %s do not share a vocabulary: token %zu is '%.*s' vs '%.*s'", q, r,
                      i, (int)(lq > 40 ? 40 : lq), pq, (int)(lr > 40 ? 40 : lr), pr);
    }
}

/* --against REF: MODEL (the quantized one) measured against REF. */
static int run_against(const parity_opts *o)
{
    memra_err err;
    checkpoint ckq, ckr;
    tokenizer *tq, *tr;
    open_model(o->model, &ckq, &tq);
    open_model(o->against, &ckr, &tr);
    check_same_vocab(tq, ckq.path, tr, ckr.path);
    if (ckq.config.n_vocab != ckr.config.n_vocab)
        cli_failf("%s and %s do not share a vocabulary: %lld logits vs %lld", ckq.path, ckr.path,
                  (long long)ckq.config.n_vocab, (long long)ckr.config.n_vocab);
    size_t n, n2;
    int32_t *ids = tokenize_file(tr, o->text_file, &n);
    int32_t *ids2 = tokenize_file(tq, o->text_file, &n2);
    if (n != n2 || memcmp(ids, ids2, n * sizeof *ids) != 0)
        cli_failf("%s and %s tokenize %s differently", ckq.path, ckr.path, o->text_file);
    free(ids2);
    int window = window_of(o, &ckr);
    n = limit_chunks(o, n, window);
    engine *e[2];
    const checkpoint *ck[2] = {&ckr, &ckq};
    for (int i = 0; i < 2; i++) {
        engine_opts eo;
        engine_opts_default(&eo);
        eo.n_threads = o->n_threads;
        eo.kv_type = o->kv;
        eo.n_ctx = window;
        eo.backend = o->backend;
        eo.device = o->device;
        if (engine_load(ck[i], &eo, &e[i], &err) != 0)
            cli_fail(&err);
    }
    quality_result r;
    if (quality_compare(e[0], e[1], ids, n, window, &r, &err) != 0)
        cli_failf("%s against %s on %s: %s", ckq.path, ckr.path, o->text_file, err.msg);
    double top1 = (double)r.top1_agree / (double)r.n_positions;
    if (o->json) {
        json_t *j = json_object();
        json_object_set_new(j, "model", json_string(ckq.path));
        json_object_set_new(j, "reference", json_string(ckr.path));
        json_object_set_new(j, "text", json_string(o->text_file));
        json_object_set_new(j, "backend", json_string(backend_kind_name(o->backend)));
        json_object_set_new(j, "tokens", json_integer((json_int_t)r.n_tokens));
        json_object_set_new(j, "window", json_integer(window));
        json_object_set_new(j, "windows", json_integer((json_int_t)r.n_windows));
        json_object_set_new(j, "positions", json_integer((json_int_t)r.n_positions));
        json_object_set_new(j, "ref_mean_nll", json_real(r.ref_nll));
        json_object_set_new(j, "mean_nll", json_real(r.quant_nll));
        json_object_set_new(j, "ref_perplexity", json_real(r.ref_ppl));
        json_object_set_new(j, "perplexity", json_real(r.quant_ppl));
        json_object_set_new(j, "ppl_ratio", json_real(r.quant_ppl / r.ref_ppl));
        json_object_set_new(j, "ppl_delta", json_real(r.quant_ppl - r.ref_ppl));
        json_object_set_new(j, "kl_mean", json_real(r.kl_mean));
        json_object_set_new(j, "kl_stderr", json_real(r.kl_stderr));
        json_object_set_new(j, "kl_median", json_real(r.kl_median));
        json_object_set_new(j, "kl_p99", json_real(r.kl_p99));
        json_object_set_new(j, "kl_max", json_real(r.kl_max));
        json_object_set_new(j, "top1_agree", json_integer((json_int_t)r.top1_agree));
        json_object_set_new(j, "top1_agree_frac", json_real(top1));
        print_json(j);
    } else {
        printf("%s against %s\non %s: %zu tokens, %zu window%s of %d, %zu positions (%s)\n\n",
               ckq.path, ckr.path, o->text_file, r.n_tokens, r.n_windows,
               r.n_windows == 1 ? "" : "s", window, r.n_positions, backend_kind_name(o->backend));
        printf("%-22s %14s %14s\n", "", "reference", "model");
        printf("%-22s %14.6f %14.6f\n", "perplexity", r.ref_ppl, r.quant_ppl);
        printf("%-22s %14.6f %14.6f\n", "mean NLL (nats)", r.ref_nll, r.quant_nll);
        printf("\n%-22s %.6f (%+.4f%%), delta %+.6f\n", "perplexity ratio", r.quant_ppl / r.ref_ppl,
               100.0 * (r.quant_ppl / r.ref_ppl - 1), r.quant_ppl - r.ref_ppl);
        printf("%-22s mean %.6g +- %.2g, median %.6g, p99 %.6g, max %.6g\n",
               "KL(ref || model) nats", r.kl_mean, r.kl_stderr, r.kl_median, r.kl_p99, r.kl_max);
        printf("%-22s %.4f%% (%zu of %zu)\n", "top-1 agreement", 100.0 * top1, r.top1_agree,
               r.n_positions);
    }
    for (int i = 0; i < 2; i++)
        engine_free(e[i]);
    free(ids);
    tok_free(tq);
    tok_free(tr);
    checkpoint_close(&ckq);
    checkpoint_close(&ckr);
    return 0;
}

/* --kernels: lib/check/kernel_check.c prints the lines. */
static int run_kernels(const parity_opts *o)
{
#if MEMRA_CUDA
    memra_err err;
    kcheck_opts ko = {.device = o->device, .perf = o->perf, .seed = o->seed, .only = o->only,
                       .skip = o->skip};
    int failed = 0;
    if (kernel_check_run(&ko, stdout, &failed, &err) != 0)
        cli_fail(&err);
    if (failed)
        fprintf(stderr, "memra-parity: --kernels: %d check%s failed\n", failed,
                failed == 1 ? "" : "s");
    return failed ? 1 : 0;
#else
    (void)o;
    cli_failf("--kernels: this build has no CUDA backend (built with CUDA=0)");
#endif
}

/* "1,2,3" into ids (malloc'd). */
static int32_t *parse_ids(const char *s, int64_t n_vocab, int *n_out)
{
    int cap = 16, n = 0;
    int32_t *ids = xmalloc((size_t)cap * sizeof *ids);
    const char *p = s;
    while (*p) {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || (*end && *end != ',') || v < 0 || v >= n_vocab)
            cli_usage("--prompt-ids: '%s' is not a list of ids below the vocabulary (%lld)", s,
                      (long long)n_vocab);
        if (n == cap)
            ids = xrealloc(ids, (size_t)(cap *= 2) * sizeof *ids);
        ids[n++] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0)
        cli_usage("--prompt-ids: no ids");
    *n_out = n;
    return ids;
}

/* --backends A,B: the same ids through two backends, logits and hidden
 * states compared position by position with A as the reference. */
static int run_backends(const parity_opts *po)
{
    parity_opts o = *po;
    memra_err err;
    checkpoint ck;
    if (checkpoint_open(o.model, &ck, &err) != 0)
        cli_fail(&err);
    if (ck.vocab_only)
        cli_failf("%s: a vocab-only GGUF has no weights to run", ck.path);
    default_gates(weight_dtype(&ck), &o);
    int n;
    int32_t *ids = parse_ids(o.prompt_ids, ck.config.n_vocab, &n);
    int64_t vocab = ck.config.n_vocab, dim = ck.config.dim;
    int n_index = (int)ck.config.n_layers + 1;
    float *logits[2];
    hidden_capture cap[2];
    for (int b = 0; b < 2; b++) {
        engine_opts eo;
        engine_opts_default(&eo);
        eo.n_threads = o.n_threads;
        eo.kv_type = o.kv;
        eo.n_ctx = n > 16 ? n : 16;
        eo.backend = o.backends[b];
        eo.device = o.device;
        if (b == 1 && engine_opts_parallel(&eo, o.devices, o.pp, o.tp, &err) != 0)
            cli_usage("%s", err.msg);
        engine *e;
        if (engine_load(&ck, &eo, &e, &err) != 0)
            cli_fail(&err);
        cap[b] = (hidden_capture){n, dim, n_index, xcalloc((size_t)n_index * n * dim, sizeof(float))};
        engine_set_hidden_hook(e, capture_hidden, &cap[b]);
        logits[b] = xmalloc((size_t)n * vocab * sizeof(float));
        engine_seq *s;
        if (engine_seq_new(e, &s, &err) != 0 || engine_forward(e, s, ids, n, logits[b], 1, &err) != 0)
            cli_fail(&err);
        engine_seq_free(s);
        engine_free(e);
    }
    parity_row *rows = xcalloc((size_t)n, sizeof *rows);
    double scale = 1;
    for (int64_t i = 0; i < n * vocab; i++)
        scale = fabs(logits[0][i]) > scale ? fabs(logits[0][i]) : scale;
    for (int p = 0; p < n; p++)
        parity_compare_row(logits[1] + (size_t)p * vocab, logits[0] + (size_t)p * vocab, vocab,
                           &rows[p]);
    parity_summary sum;
    parity_summarize(rows, n, &sum);
    double *hid = xcalloc((size_t)n_index, sizeof(double));
    for (int idx = 0; idx < n_index; idx++) {
        double worst = 0, hs = 1e-6;
        for (int64_t j = 0; j < n * dim; j++) {
            double r = cap[0].h[(size_t)idx * n * dim + j], d = fabs(cap[1].h[(size_t)idx * n * dim + j] - r);
            worst = isnan(d) ? INFINITY : d > worst ? d : worst;
            hs = fabs(r) > hs ? fabs(r) : hs;
        }
        hid[idx] = worst / hs;
    }
    double abs_gate = o.max_abs * scale;
    int ok = sum.max_abs <= abs_gate && sum.min_cosine >= o.min_cosine &&
             sum.argmax_real_disagreements == 0;
    const char *na = backend_kind_name(o.backends[0]), *nb = backend_kind_name(o.backends[1]);
    if (o.json) {
        json_t *j = json_object();
        json_object_set_new(j, "model", json_string(ck.path));
        json_object_set_new(j, "reference_backend", json_string(na));
        json_object_set_new(j, "backend", json_string(nb));
        json_object_set_new(j, "pp", json_integer(o.pp > 0 ? o.pp : 1));
        json_object_set_new(j, "tp", json_integer(o.tp > 0 ? o.tp : 1));
        json_object_set_new(j, "positions", json_integer(n));
        json_object_set_new(j, "max_abs", json_real(sum.max_abs));
        json_object_set_new(j, "max_rel", json_real(sum.max_rel));
        json_object_set_new(j, "min_cosine", json_real(sum.min_cosine));
        json_object_set_new(j, "argmax_agree", json_integer(sum.argmax_agree));
        json_object_set_new(j, "argmax_real_disagreements", json_integer(sum.argmax_real_disagreements));
        json_object_set_new(j, "gate_max_abs", json_real(abs_gate));
        json_object_set_new(j, "gate_min_cosine", json_real(o.min_cosine));
        json_t *h = json_array();
        for (int idx = 0; idx < n_index; idx++)
            json_array_append_new(h, json_real(hid[idx]));
        json_object_set_new(j, "hidden_rel_err", h);
        json_object_set_new(j, "pass", json_boolean(ok));
        char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(txt);
        free(txt);
        json_decref(j);
    } else {
        printf("%s: %s vs %s over %d positions\n", ck.path, nb, na, n);
        printf("hidden states (max |diff| / max |%s|):", na);
        for (int idx = 0; idx < n_index; idx++)
            printf(" %d:%.1e", idx, hid[idx]);
        printf("\nmax_abs %.3e (gate %.3e), max_rel %.3e, min cosine %.9f (gate %.6f), argmax "
               "%d/%d (%d real disagreements): %s\n",
               sum.max_abs, abs_gate, sum.max_rel, sum.min_cosine, o.min_cosine, sum.argmax_agree,
               sum.n_rows, sum.argmax_real_disagreements, ok ? "PASS" : "FAIL");
    }
    if (!ok)
        fprintf(stderr, "memra-parity: %s: %s vs %s beyond thresholds (max_abs %.3e > %.3e, min "
                        "cosine %.9f < %.6f, or %d real argmax disagreements)\n",
                ck.path, nb, na, sum.max_abs, abs_gate, sum.min_cosine, o.min_cosine,
                sum.argmax_real_disagreements);
    for (int b = 0; b < 2; b++) {
        free(logits[b]);
        free(cap[b].h);
    }
    free(hid);
    free(rows);
    free(ids);
    checkpoint_close(&ck);
    return ok ? 0 : 1;
}

/* The MTP block against the reference's mtp_logits (and mtp_hidden):
 * row q is the block at position q with the token at q + 1, drafted
 * (engine_mtp_draft, depth 0) once the model has run tokens [0, q]. Two
 * passes: token by token (rows 0..n-2), and the first half as one chunk
 * (whose block rows the engine runs together) then token by token (rows
 * from n/2 - 1). Each row is gated like the logits. */
typedef struct {
    parity_summary sum;
    double scale, hidden_rel_err;
    int ok;
} mtp_check;

static void check_mtp(engine *e, const int32_t *tokens, int64_t n, int64_t vocab, int64_t dim,
                      const st_tensor *mt, const st_tensor *mht, mtp_check *out)
{
    memra_err err;
    int64_t rows = n - 1;
    float *ref = xmalloc((size_t)(rows * vocab) * sizeof *ref);
    memcpy(ref, mt->data, (size_t)(rows * vocab) * sizeof *ref);
    float *href = NULL;
    if (mht && mht->type == DT_F32 && mht->n_dims == 2 && mht->shape[0] == rows &&
        mht->shape[1] == dim) {
        href = xmalloc((size_t)(rows * dim) * sizeof *href);
        memcpy(href, mht->data, (size_t)(rows * dim) * sizeof *href);
    }
    out->scale = 1;
    for (int64_t i = 0; i < rows * vocab; i++)
        out->scale = fabs(ref[i]) > out->scale ? fabs(ref[i]) : out->scale;
    double hscale = 1e-6, hworst = 0;
    for (int64_t i = 0; href && i < rows * dim; i++)
        hscale = fabs(href[i]) > hscale ? fabs(href[i]) : hscale;
    float *logits = xmalloc((size_t)vocab * sizeof *logits);
    float *h = xmalloc((size_t)dim * sizeof *h);
    parity_row *pr = xcalloc((size_t)(2 * rows), sizeof *pr);
    int n_pr = 0;
    for (int pass = 0; pass < 2; pass++) {
        engine_seq *s;
        int64_t first = pass ? n / 2 : 1; /* tokens run before the first row */
        if (engine_seq_new(e, &s, &err) != 0 ||
            engine_forward(e, s, tokens, (int)first, NULL, 0, &err) != 0)
            cli_fail(&err);
        for (int64_t q = first - 1; q < rows; q++) {
            if (q >= first && engine_forward(e, s, &tokens[q], 1, NULL, 0, &err) != 0)
                cli_fail(&err);
            if (engine_mtp_draft(e, s, tokens[q + 1], 0, NULL, logits, h, &err) != 0)
                cli_fail(&err);
            parity_compare_row(logits, ref + q * vocab, vocab, &pr[n_pr++]);
            for (int64_t k = 0; href && k < dim; k++) {
                double d = fabs(h[k] - href[q * dim + k]);
                hworst = d > hworst || isnan(d) ? (isnan(d) ? INFINITY : d) : hworst;
            }
        }
        engine_seq_free(s);
    }
    parity_summarize(pr, n_pr, &out->sum);
    out->hidden_rel_err = href ? hworst / hscale : 0;
    free(pr);
    free(h);
    free(logits);
    free(href);
    free(ref);
}

int main(int argc, char **argv)
{
    cli_set_program("memra-parity");
    parity_opts o = {0};
    o.seed = 1;
    parse_args(argc, argv, &o);
    if (o.draft && !o.reference)
        cli_usage("--draft goes with --reference (an assistant's rows in the dump)");
    if (o.kernels)
        return run_kernels(&o);
    if (o.n_backends)
        return run_backends(&o);
    if (o.perplexity_file)
        return run_perplexity(&o);
    if (o.imatrix_out)
        return run_imatrix(&o);
    if (o.against)
        return run_against(&o);
    memra_err err;

    st_set ref;
    if (st_open_file(o.reference, &ref, &err) != 0)
        cli_fail(&err);
    const st_tensor *tt = need_tensor(&ref, "tokens", DT_I32, 1, o.reference);
    const st_tensor *lt = need_tensor(&ref, "logits", DT_F32, 2, o.reference);
    const st_tensor *ht = st_find(&ref, "hidden");
    const st_tensor *mt = st_find(&ref, "mtp_logits"), *mht = st_find(&ref, "mtp_hidden");
    /* an assistant's rows are checked as the MTP block's are */
    const char *rows_name = "mtp_logits";
    if (st_find(&ref, "assistant_logits")) {
        if (mt)
            cli_failf("%s: both MTP and assistant rows", o.reference);
        if (!o.draft)
            cli_failf("%s: the reference has assistant rows: give the assistant with --draft",
                      o.reference);
        mt = st_find(&ref, "assistant_logits");
        mht = st_find(&ref, "assistant_hidden");
        rows_name = "assistant_logits";
    } else if (o.draft) {
        cli_failf("%s: --draft %s: the reference has no assistant rows (assistant_logits)",
                  o.reference, o.draft);
    }
    int64_t n = tt->shape[0], vocab = lt->shape[1];
    if (lt->shape[0] != n)
        cli_failf("%s: logits has %lld rows for %lld tokens", o.reference, (long long)lt->shape[0],
                  (long long)n);
    if (n == 0)
        cli_failf("%s: no tokens", o.reference);

    checkpoint ck;
    if (checkpoint_open(o.model, &ck, &err) != 0)
        cli_fail(&err);
    if (ck.vocab_only)
        cli_failf("%s: a vocab-only GGUF has no weights to run", ck.path);
    if (ck.config.n_vocab != vocab)
        cli_failf("%s: the model's vocabulary is %lld tokens, the reference's %lld", o.reference,
                  (long long)ck.config.n_vocab, (long long)vocab);
    default_gates(weight_dtype(&ck), &o);
    if (mt && (mt->type != DT_F32 || mt->n_dims != 2 || mt->shape[0] != n - 1 ||
               mt->shape[1] != vocab))
        cli_failf("%s: %s is not F32 [%lld, %lld]", o.reference, rows_name, (long long)(n - 1),
                  (long long)vocab);
    if (mt && n < 2)
        cli_failf("%s: MTP rows need at least 2 tokens", o.reference);
    if (mt && !o.draft && ck.config.mtp_layers <= 0)
        cli_failf("%s: the reference has MTP rows, but %s carries no MTP block", o.reference,
                  ck.path);

    engine_opts eo;
    engine_opts_default(&eo);
    eo.n_threads = o.n_threads;
    eo.kv_type = o.kv;
    eo.n_ctx = n > 16 ? n : 16;
    eo.backend = o.backend;
    eo.device = o.device;
    eo.mtp = mt != NULL && !o.draft;
    eo.n_seqs = mt ? 2 : 1; /* the MTP passes run beside the main sequence */
    if (engine_opts_parallel(&eo, o.devices, o.pp, o.tp, &err) != 0)
        cli_usage("%s", err.msg);
    engine *e;
    if (engine_load(&ck, &eo, &e, &err) != 0)
        cli_fail(&err);
    checkpoint ack;
    if (o.draft && (checkpoint_open(o.draft, &ack, &err) != 0 ||
                    engine_attach_assistant(e, &ack, &err) != 0))
        cli_fail(&err);
    int64_t dim = ck.config.dim, n_layers = ck.config.n_layers;
    hidden_capture cap = {0};
    int use_hidden = ht && ht->type == DT_F32 && ht->n_dims == 3 && ht->shape[0] == n_layers + 1 &&
                     ht->shape[1] == n && ht->shape[2] == dim;
    if (use_hidden) {
        cap.n_pos = n;
        cap.dim = dim;
        cap.n_index = (int)n_layers + 1;
        cap.h = xcalloc((size_t)cap.n_index * (size_t)n * (size_t)dim, sizeof(float));
        engine_set_hidden_hook(e, capture_hidden, &cap);
    }
    /* Copy the ids out of the map: safetensors data need not be aligned. */
    int32_t *tokens = xmalloc((size_t)n * sizeof(int32_t));
    memcpy(tokens, tt->data, (size_t)n * sizeof(int32_t));
    float *ref_logits = xmalloc((size_t)(n * vocab) * sizeof(float));
    memcpy(ref_logits, lt->data, (size_t)(n * vocab) * sizeof(float));
    float *ours = xmalloc((size_t)(n * vocab) * sizeof(float));
    engine_seq *s;
    if (engine_seq_new(e, &s, &err) != 0 || engine_forward(e, s, tokens, (int)n, ours, 1, &err) != 0)
        cli_fail(&err);

    parity_row *rows = xcalloc((size_t)n, sizeof *rows);
    double scale = 1;
    for (int64_t i = 0; i < n * vocab; i++)
        if (fabs(ref_logits[i]) > scale)
            scale = fabs(ref_logits[i]);
    for (int64_t p = 0; p < n; p++)
        parity_compare_row(ours + p * vocab, ref_logits + p * vocab, vocab, &rows[p]);
    parity_summary sum;
    parity_summarize(rows, (int)n, &sum);

    /* hidden states: per index, the worst |diff| relative to that state's scale */
    int first_divergent = -1;
    double *hid_err = NULL;
    if (use_hidden) {
        hid_err = xcalloc((size_t)cap.n_index, sizeof(double));
        const uint8_t *hp = ht->data;
        for (int idx = 0; idx < cap.n_index; idx++) {
            double worst = 0, hscale = 1e-6;
            for (int64_t k = 0; k < n * dim; k++) {
                float r;
                memcpy(&r, hp + ((size_t)idx * n * dim + k) * 4, 4);
                double d = fabs(cap.h[(size_t)idx * n * dim + k] - r);
                worst = d > worst || isnan(d) ? (isnan(d) ? INFINITY : d) : worst;
                hscale = fabs(r) > hscale ? fabs(r) : hscale;
            }
            hid_err[idx] = worst / hscale;
            if (first_divergent < 0 && hid_err[idx] > 1e-3)
                first_divergent = idx;
        }
    }
    double abs_gate = o.max_abs * scale;
    int ok = sum.max_abs <= abs_gate && sum.min_cosine >= o.min_cosine &&
             sum.argmax_real_disagreements == 0;
    mtp_check mc = {0};
    if (mt) {
        check_mtp(e, tokens, n, vocab, dim, mt, mht, &mc);
        mc.ok = mc.sum.max_abs <= o.max_abs * mc.scale && mc.sum.min_cosine >= o.min_cosine &&
                mc.sum.argmax_real_disagreements == 0 && mc.hidden_rel_err <= 1e-3;
        ok = ok && mc.ok;
    }

    if (o.json) {
        json_t *j = json_object();
        json_object_set_new(j, "model", json_string(ck.path));
        json_object_set_new(j, "reference", json_string(o.reference));
        json_object_set_new(j, "positions", json_integer(n));
        json_object_set_new(j, "vocab", json_integer(vocab));
        json_object_set_new(j, "max_abs", json_real(sum.max_abs));
        json_object_set_new(j, "max_rel", json_real(sum.max_rel));
        json_object_set_new(j, "min_cosine", json_real(sum.min_cosine));
        json_object_set_new(j, "argmax_agree", json_integer(sum.argmax_agree));
        json_object_set_new(j, "argmax_real_disagreements", json_integer(sum.argmax_real_disagreements));
        json_object_set_new(j, "logit_scale", json_real(scale));
        json_object_set_new(j, "gate_max_abs", json_real(abs_gate));
        json_object_set_new(j, "gate_min_cosine", json_real(o.min_cosine));
        json_t *per = json_array();
        for (int64_t p = 0; p < n; p++) {
            json_t *r = json_object();
            json_object_set_new(r, "pos", json_integer(p));
            json_object_set_new(r, "token", json_integer(tokens[p]));
            json_object_set_new(r, "max_abs", json_real(rows[p].max_abs));
            json_object_set_new(r, "max_rel", json_real(rows[p].max_rel));
            json_object_set_new(r, "cosine", json_real(rows[p].cosine));
            json_object_set_new(r, "argmax", json_integer(rows[p].argmax_ours));
            json_object_set_new(r, "argmax_ref", json_integer(rows[p].argmax_ref));
            json_array_append_new(per, r);
        }
        json_object_set_new(j, "per_position", per);
        if (use_hidden) {
            json_t *h = json_array();
            for (int idx = 0; idx < cap.n_index; idx++)
                json_array_append_new(h, json_real(hid_err[idx]));
            json_object_set_new(j, "hidden_rel_err", h);
            json_object_set_new(j, "first_divergent_hidden",
                                first_divergent < 0 ? json_null() : json_integer(first_divergent));
        }
        if (mt) {
            json_t *m = json_object();
            json_object_set_new(m, "rows", json_integer(mc.sum.n_rows));
            json_object_set_new(m, "max_abs", json_real(mc.sum.max_abs));
            json_object_set_new(m, "min_cosine", json_real(mc.sum.min_cosine));
            json_object_set_new(m, "argmax_agree", json_integer(mc.sum.argmax_agree));
            json_object_set_new(m, "argmax_real_disagreements",
                                json_integer(mc.sum.argmax_real_disagreements));
            json_object_set_new(m, "logit_scale", json_real(mc.scale));
            json_object_set_new(m, "hidden_rel_err",
                                mht ? json_real(mc.hidden_rel_err) : json_null());
            json_object_set_new(m, "pass", json_boolean(mc.ok));
            json_object_set_new(j, o.draft ? "assistant" : "mtp", m);
        }
        json_object_set_new(j, "pass", json_boolean(ok));
        char *txt = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(txt);
        free(txt);
        json_decref(j);
    } else {
        printf("%s vs %s: %lld positions, vocab %lld\n", ck.path, o.reference, (long long)n,
               (long long)vocab);
        printf("%5s %7s %12s %12s %12s %8s %8s\n", "pos", "token", "max_abs", "max_rel", "cosine",
               "argmax", "ref");
        for (int64_t p = 0; p < n; p++)
            printf("%5lld %7d %12.3e %12.3e %12.9f %8d %8d%s\n", (long long)p, tokens[p],
                   rows[p].max_abs, rows[p].max_rel, rows[p].cosine, rows[p].argmax_ours,
                   rows[p].argmax_ref, rows[p].argmax_ours != rows[p].argmax_ref ? "  <-" : "");
        if (use_hidden) {
            printf("hidden states (max |diff| / max |ref|):");
            for (int idx = 0; idx < cap.n_index; idx++)
                printf(" %d:%.1e", idx, hid_err[idx]);
            printf("\n");
            if (first_divergent >= 0)
                printf("hidden states first diverge (> 1e-3) at index %d (%s)\n", first_divergent,
                       first_divergent == 0 ? "the embeddings" : "a layer output");
        }
        if (mt)
            printf("%s: %d rows, max_abs %.3e (gate %.3e), min cosine %.9f, argmax %d/%d, "
                   "hidden rel err %.1e: %s\n", o.draft ? "assistant" : "MTP block", mc.sum.n_rows,
                   mc.sum.max_abs,
                   o.max_abs * mc.scale, mc.sum.min_cosine, mc.sum.argmax_agree, mc.sum.n_rows,
                   mc.hidden_rel_err, mc.ok ? "PASS" : "FAIL");
        printf("max_abs %.3e (gate %.3e), max_rel %.3e, min cosine %.9f (gate %.6f), argmax "
               "%d/%d (%d real disagreements): %s\n",
               sum.max_abs, abs_gate, sum.max_rel, sum.min_cosine, o.min_cosine, sum.argmax_agree,
               sum.n_rows, sum.argmax_real_disagreements, ok ? "PASS" : "FAIL");
    }
    if (!ok)
        fprintf(stderr, "memra-parity: %s: beyond thresholds (max_abs %.3e > %.3e, min cosine %.9f "
                        "< %.6f, or %d real argmax disagreements)\n",
                ck.path, sum.max_abs, abs_gate, sum.min_cosine, o.min_cosine,
                sum.argmax_real_disagreements);
    free(hid_err);
    free(cap.h);
    free(rows);
    free(ours);
    free(ref_logits);
    free(tokens);
    engine_seq_free(s);
    engine_free(e);
    if (o.draft)
        checkpoint_close(&ack);
    checkpoint_close(&ck);
    st_close(&ref);
    return ok ? 0 : 1;
}
