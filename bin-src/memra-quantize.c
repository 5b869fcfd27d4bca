/* memra-quantize: a checkpoint to a quantized GGUF, or the plan of one.
 * Argument parsing and output only; the types are lib/model/quant_recipe.c,
 * the pipeline lib/model/quantize_model.c, the block codecs
 * lib/quant/quantize_*.c. */
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/cli.h"
#include "core/clock.h"
#include "core/json.h"
#include "quant/imatrix.h"
#include "model/checkpoint.h"
#include "model/quantize_model.h"

static const char usage[] =
    "usage: memra-quantize SRC DST.gguf TYPE [--threads N] [--keep NAME_REGEX=TYPE ...]\n"
    "                      [--imatrix FILE] [--allow-requantize]\n"
    "       memra-quantize --dry-run SRC TYPE [--keep NAME_REGEX=TYPE ...] [--json]\n"
    "\n"
    "Quantizes SRC (a GGUF file, an HF checkpoint dir, or hf:owner/repo[:file]) into DST.gguf.\n"
    "TYPE is a tensor type (every matrix in it): Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, NVFP4, MXFP8\n"
    "(alias FP8: memra's own GGUF type, other readers refuse it), or a mix: Q4_K_M, Q5_K_M,\n"
    "Q6_K_M. Norms, biases and the MoE router stay F32. Progress goes to stderr.\n"
    "\n"
    "  --keep REGEX=TYPE  matrices whose GGUF name matches REGEX (PCRE2, searched) get TYPE\n"
    "                     (F32, F16, BF16 or a quantized type); the first match wins\n"
    "  --imatrix FILE     importance matrix (memra-parity --imatrix, or llama-imatrix's\n"
    "                     GGUF / .dat): weights each column's squared error\n"
    "  --allow-requantize read a quantized SRC (dequantized, so each value is rounded\n"
    "                     twice: for benchmark models, not for quality)\n"
    "  --dry-run          print which type each tensor gets and the sizes, write nothing;\n"
    "                     SRC may also be an HF config.json (shapes only)\n"
    "  --json             --dry-run output as JSON\n"
    "  -t, --threads N    worker threads (default all cores; env MEMRA_THREADS)\n"
    "  -h, --help         this text\n"
    "\n"
    "Exit status: 0 ok, 1 failure (names the tensor), 2 bad usage (unknown TYPE, bad --keep).\n";

typedef struct {
    const char *src, *dst, *type, *imatrix;
    int dry_run, json, requantize;
    int64_t threads;
    quant_recipe recipe;
} q_args;

static void parse_args(int argc, char **argv, q_args *a)
{
    memra_err err;
    a->threads = cli_threads_default();
    static const struct option longs[] = {
        {"threads", required_argument, NULL, 't'}, {"keep", required_argument, NULL, 'k'},
        {"imatrix", required_argument, NULL, 'i'}, {"dry-run", no_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},          {"help", no_argument, NULL, 'h'},
        {"allow-requantize", no_argument, NULL, 'R'}, {NULL, 0, NULL, 0},
    };
    const char *keeps[QUANT_MAX_KEEP + 1];
    int n_keep = 0;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, ":t:h", longs, NULL)) != -1) {
        switch (ch) {
        case 't':
            if (cli_parse_i64(optarg, 1, 4096, &a->threads, "--threads", &err) != 0)
                cli_usage("%s", err.msg);
            break;
        case 'k':
            if (n_keep > QUANT_MAX_KEEP)
                cli_usage("more than %d --keep options", QUANT_MAX_KEEP);
            keeps[n_keep++] = optarg;
            break;
        case 'i': a->imatrix = optarg; break;
        case 'n': a->dry_run = 1; break;
        case 'j': a->json = 1; break;
        case 'R': a->requantize = 1; break;
        case 'h': fputs(usage, stdout); exit(0);
        case ':': cli_usage("%s needs a value", argv[optind - 1]);
        default: cli_usage("unknown option '%s'", argv[optind - 1]);
        }
    }
    const int n_pos = argc - optind, want = a->dry_run ? 2 : 3;
    if (n_pos != want)
        cli_usage(n_pos < want ? (a->dry_run ? "--dry-run takes SRC and TYPE"
                                             : "SRC, DST and TYPE are required")
                               : "unexpected argument '%s'",
                  argv[optind + want < argc ? optind + want : optind]);
    a->src = argv[optind];
    if (a->dry_run) {
        a->type = argv[optind + 1];
        if (a->imatrix)
            cli_usage("--imatrix does not change a --dry-run plan");
    } else {
        a->dst = argv[optind + 1];
        a->type = argv[optind + 2];
        if (a->json)
            cli_usage("--json only applies to --dry-run");
        size_t n = strlen(a->dst);
        if (n < 5 || strcasecmp(a->dst + n - 5, ".gguf") != 0)
            cli_usage("DST '%s' must be a .gguf file", a->dst);
    }
    if (quant_recipe_parse(a->type, &a->recipe, &err) != 0)
        cli_usage("%s", err.msg);
    a->recipe.allow_requantize = a->requantize;
    for (int i = 0; i < n_keep; i++)
        if (quant_recipe_add_keep(&a->recipe, keeps[i], &err) != 0)
            cli_usage("%s", err.msg);
}

/* ---- progress ---- */

typedef struct {
    int tty;
    int last_decile;
} progress_state;

static void progress(void *ctx, int done, int total, const quantize_plan_entry *e,
                     uint64_t el_done, uint64_t el_total)
{
    progress_state *p = ctx;
    const double frac = el_total ? (double)el_done / (double)el_total : 1.0;
    if (p->tty) {
        char bar[31];
        const int fill = (int)(frac * 30.0);
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = '\0';
        fprintf(stderr, "\r\033[K[%s] %3d%% %d/%d %s %s", bar, (int)(frac * 100.0), done, total,
                e->e->name, dtype_get(e->type)->name);
        if (done == total)
            fputc('\n', stderr);
    } else {
        const int decile = (int)(frac * 10.0);
        if (decile > p->last_decile || done == total) {
            p->last_decile = decile;
            fprintf(stderr, "memra-quantize: %3d%% (%d/%d tensors)\n", (int)(frac * 100.0), done,
                    total);
        }
    }
}

/* ---- the plan ---- */

static void shape_str(const contract_entry *e, char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "[");
    for (int d = 0; d < e->n_dims && len < n; d++)
        len += (size_t)snprintf(out + len, n - len, "%s%" PRId64, d ? ", " : "", e->shape[d]);
    if (len < n)
        snprintf(out + len, n - len, "]");
}

static double bpw(uint64_t bytes, uint64_t elements)
{
    return elements ? 8.0 * (double)bytes / (double)elements : 0.0;
}

static void print_plan(const quantize_plan *p, const quant_recipe *r, const char *src, int json)
{
    if (json) {
        json_t *j = json_object(), *ts = json_array();
        json_object_set_new(j, "source", json_string(src));
        json_object_set_new(j, "type", json_string(r->name));
        char *desc = quant_recipe_describe(r);
        json_object_set_new(j, "recipe", json_string(desc));
        free(desc);
        for (int i = 0; i < p->n; i++) {
            const quantize_plan_entry *e = &p->entries[i];
            json_t *t = json_object(), *sh = json_array();
            json_object_set_new(t, "name", json_string(e->e->name));
            for (int d = 0; d < e->e->n_dims; d++)
                json_array_append_new(sh, json_integer(e->e->shape[d]));
            json_object_set_new(t, "shape", sh);
            json_object_set_new(t, "source_type", e->src_type == DT_INVALID
                                                      ? json_null()
                                                      : json_string(dtype_get(e->src_type)->name));
            json_object_set_new(t, "type", json_string(dtype_get(e->type)->name));
            json_object_set_new(t, "why", json_string(e->why));
            json_object_set_new(t, "bytes", json_integer((json_int_t)e->nbytes));
            json_array_append_new(ts, t);
        }
        json_object_set_new(j, "tensors", ts);
        json_object_set_new(j, "total_bytes", json_integer((json_int_t)p->total_bytes));
        json_object_set_new(j, "total_elements", json_integer((json_int_t)p->total_elements));
        json_object_set_new(j, "bpw", json_real(bpw(p->total_bytes, p->total_elements)));
        json_object_set_new(j, "matrix_bpw", json_real(bpw(p->matrix_bytes, p->matrix_elements)));
        char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        puts(s);
        free(s);
        json_decref(j);
        return;
    }
    printf("%-40s %-22s %-6s %-6s %12s  %s\n", "tensor", "shape", "from", "type", "bytes", "why");
    for (int i = 0; i < p->n; i++) {
        const quantize_plan_entry *e = &p->entries[i];
        char shape[96];
        shape_str(e->e, shape, sizeof shape);
        printf("%-40s %-22s %-6s %-6s %12" PRIu64 "  %s\n", e->e->name, shape,
               e->src_type == DT_INVALID ? "-" : dtype_get(e->src_type)->name,
               dtype_get(e->type)->name, e->nbytes, e->why);
    }
    printf("\n%d tensors, %" PRIu64 " values, %" PRIu64 " bytes (%.2f MiB): %.3f bits per weight "
           "(%.3f over the matrices)\n",
           p->n, p->total_elements, p->total_bytes, (double)p->total_bytes / 1048576.0,
           bpw(p->total_bytes, p->total_elements), bpw(p->matrix_bytes, p->matrix_elements));
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcasecmp(s + n - m, suffix);
}

static int dry_run(q_args *a)
{
    memra_err err;
    quantize_plan plan;
    if (ends_with(a->src, ".json")) {
        json_t *j = json_load_path(a->src, 16u << 20, &err);
        if (!j)
            cli_fail(&err);
        model_config cfg;
        int rc = config_from_hf(j, a->src, &cfg, &err);
        json_decref(j);
        if (rc != 0 || quantize_plan_build(&cfg, NULL, &a->recipe, &plan, &err) != 0)
            cli_fail(&err);
    } else {
        checkpoint c;
        if (checkpoint_open(a->src, &c, &err) != 0)
            cli_fail(&err);
        if (c.vocab_only)
            cli_failf("%s: a vocab-only GGUF has no weights to quantize", a->src);
        contract_binding b;
        if (contract_bind(&c.config, c.format, c.tensors, c.n_tensors, &b, &err) != 0) {
            memra_wrap(&err, "%s", a->src);
            cli_fail(&err);
        }
        if (quantize_plan_build(&c.config, &b, &a->recipe, &plan, &err) != 0)
            cli_fail(&err);
        contract_binding_free(&b);
        /* the plan's entries point into its own contract: c can go */
        checkpoint_close(&c);
    }
    print_plan(&plan, &a->recipe, a->src, a->json);
    quantize_plan_free(&plan);
    return 0;
}

static void warn_unused_keeps(const quant_recipe *r)
{
    for (int i = 0; i < r->n_keep; i++)
        if (r->keep[i].n_matched == 0)
            fprintf(stderr, "memra-quantize: warning: --keep '%s' matched no matrix\n",
                    r->keep[i].pattern);
}

int main(int argc, char **argv)
{
    cli_set_program("memra-quantize");
    q_args a = {0};
    parse_args(argc, argv, &a);
    if (a.dry_run) {
        dry_run(&a);
        warn_unused_keeps(&a.recipe);
        quant_recipe_free(&a.recipe);
        return 0;
    }
    memra_err err;
    imatrix im = {0};
    if (a.imatrix && imatrix_read(a.imatrix, &im, &err) != 0)
        cli_fail(&err);
    checkpoint c;
    if (checkpoint_open(a.src, &c, &err) != 0)
        cli_fail(&err);
    progress_state ps = {isatty(STDERR_FILENO), -1};
    quantize_opts o = {
        .n_threads = (int)a.threads,
        .importance = a.imatrix ? &im : NULL,
        .imatrix_path = a.imatrix,
        .progress = progress,
        .progress_ctx = &ps,
    };
    uint64_t src_bytes = 0;
    for (int i = 0; i < c.n_tensors; i++)
        src_bytes += c.tensors[i].nbytes;
    const double t0 = clock_now_s();
    if (quantize_checkpoint(&c, a.dst, &a.recipe, &o, &err) != 0)
        cli_fail(&err);
    const double dt = clock_now_s() - t0;
    checkpoint_close(&c);
    warn_unused_keeps(&a.recipe);
    if (o.n_without_importance)
        fprintf(stderr, "memra-quantize: warning: %d quantized tensors have no entry in %s "
                        "(plain squared error for them)\n",
                o.n_without_importance, a.imatrix);
    FILE *f = fopen(a.dst, "rb");
    long out_bytes = -1;
    if (f && fseek(f, 0, SEEK_END) == 0)
        out_bytes = ftell(f);
    if (f)
        fclose(f);
    fprintf(stderr, "memra-quantize: wrote %s (%s): %.2f MiB from %.2f MiB in %.2f s, %.1f MB/s "
                    "of source\n",
            a.dst, a.recipe.name, (double)out_bytes / 1048576.0, (double)src_bytes / 1048576.0,
            dt, dt > 0 ? (double)src_bytes / 1e6 / dt : 0.0);
    imatrix_free(&im);
    quant_recipe_free(&a.recipe);
    return 0;
}
