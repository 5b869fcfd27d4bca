/* The model bench: prefill, decode at each depth and batched decode rows,
 * against the backend's memory bandwidth ceiling. The measurements are
 * lib/bench/bench.c's. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu_fast.h"
#include "core/check.h"
#include "core/cli.h"
#include "bench/membw.h"
#include "bench/bench.h"
#include "engine/engine.h"
#if MEMRA_CUDA
#include "backend/cuda/cuda_device.h"
#endif
#include "core/mapfile.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "model/checkpoint.h"

#include "bench_cli.h"
#include "rows.h"

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
    case BACKEND_CPU:
    case BACKEND_CPU_REF: {
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
        int dev = o->device, listed[8];
        if (o->devices && cli_parse_int_list(o->devices, 0, 1024, listed, 8, "--devices", &err) > 0)
            dev = listed[0]; /* a pipeline's first stage */
        if (cuda_device_query(dev, &info, &err) != 0 ||
            cuda_measure_copy_bandwidth(dev, (size_t)1 << 30, 20, &c->gb_s, &err) != 0)
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

/* A measured row's peak memory and figures, appended to rows. */
static void row_done(bench_row *r, mem_probe *mem, uint64_t bytes_per_token, double ceiling_gbs,
                     json_t *rows)
{
    r->peak_mem = bench_mem_row_end(mem);
    bench_finish_row(r, bytes_per_token, ceiling_gbs);
    json_array_append_new(rows, bench_row_json(r));
}

int bench_run_model(const bench_opts *o)
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
    /* Prefill at depth: given depths only (the default is 0), so one that
     * does not fit with a prompt is an error. */
    for (size_t i = 0; i < n_pps; i++)
        for (size_t k = 0; k < o->pp_depths.n; k++) {
            int64_t d = o->pp_depths.v[k];
            if (limit > 0 && d + pps[i] > limit)
                cli_usage("--prefill-depth %" PRId64 " + prompt %" PRId64 " = %" PRId64
                          " does not fit the context of %" PRId64 " (%s)", d, pps[i],
                          d + pps[i], limit, limit_what);
            need = d + pps[i] > need ? d + pps[i] : need;
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

    engine_opts eo;
    engine_opts_default(&eo);
    eo.n_threads = o->n_threads;
    eo.backend = o->backend == BACKEND_CUDA ? BK_CUDA : o->backend == BACKEND_CPU_REF ? BK_CPU_REF
                                                                                  : BK_CPU;
    eo.device = o->device;
    /* the pipeline flags, before the probe runs on the first device */
    if (engine_opts_parallel(&eo, o->devices, o->pipe_stages, o->tp_ranks, &err) != 0 ||
        engine_opts_rank(&eo, o->rank, o->nccl_id, &err) != 0)
        cli_usage("%s", err.msg);
    /* the other ranks run the same rows; rank 0 reports them */
    if (o->rank > 0 && !freopen("/dev/null", "w", stdout))
        cli_failf("--rank %d: cannot silence standard output", o->rank);

    ceiling_info ceil;
    get_ceiling(o, &ceil);

    eo.n_ctx = need;
    eo.kv_type = o->kv;
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
    /* --json-schema: the grammar and the vocabulary's trie, built once, as
     * memra-serve builds them for response_format. */
    gram_grammar *grammar = NULL;
    gram_vocab *gvocab = NULL;
    tokenizer *tok = NULL;
    if (o->json_schema) {
        char *buf;
        size_t len;
        if (read_small_file(o->json_schema, 16u << 20, &buf, &len, &err) != 0)
            cli_fail(&err);
        grammar = jsch_compile_text(buf, len, &err);
        free(buf);
        if (!grammar)
            cli_failf("%s: %s", o->json_schema, err.msg);
        if (checkpoint_load_tokenizer(&ck, &tok, &err) != 0)
            cli_failf("--json-schema: %s: a constrained decode needs the model's tokenizer: %s",
                      ck.path, err.msg);
        if (!(gvocab = gram_vocab_from_tok(tok, &err)))
            cli_fail(&err);
        bench_constrain(grammar, gvocab);
    }
    mem_probe mem;
    bench_mem_init(&mem, engine_model(e)->bk);
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

    json_t *host = bench_host_json();
    /* The fast path's ISA level (the one its backend chose the same way). */
    const char *cpu_level = o->backend == BACKEND_CPU ? cpu_fast_kernels()->name : NULL;
    if (!o->json) {
        char hb[32], wb[32];
        cli_human_bytes(bpt, hb, sizeof hb);
        cli_human_bytes(weight_bytes, wb, sizeof wb);
        printf("memra-bench %s\n", date);
        printf("model     %s: %s, %s, %s (%s of weights); %" PRId64 " layers, dim %" PRId64
               ", vocab %" PRId64 "\n", ck.path, family_name(cfg->family), fmt, main_dtype, wb,
               cfg->n_layers, cfg->dim, cfg->n_vocab);
        printf("streams   %s per decode token\n", hb);
        printf("backend   %s%s%s%s, %d threads, kv %s, prefill chunk %d, context %" PRId64
               " allocated x %d sequence%s\n", bench_backends[o->backend].name,
               cpu_level ? " (kernels: " : "", cpu_level ? cpu_level : "", cpu_level ? ")" : "",
               o->n_threads, kv_name, n_batch, engine_n_ctx(e), max_b, max_b == 1 ? "" : "s");
        if (eo.pp > 1)
            printf("pipeline  %d stages%s%s\n", eo.pp, o->devices ? " on devices " : "",
                   o->devices ? o->devices : "");
        if (eo.tp > 1)
            printf("tensor    %d tensor-parallel ranks%s%s\n", eo.tp,
                   o->devices ? " on devices " : "", o->devices ? o->devices : "");
        printf("ceiling   %.2f GB/s %s (%s); decode ceiling %.1f tok/s\n", ceil.gb_s,
               bench_backends[o->backend].ceiling_what, ceil.detail, ceiling_tok_s);
        printf("cpu       %s (%d online CPUs)\n",
               json_string_value(json_object_get(host, "cpu")), membw_online_cpus());
        printf("timing    %d warm-up, median of %d [min, max]; GB/s: decode = bytes/token x "
               "tok/s, prefill = weight bytes / prompt time\n", o->warmup, o->reps);
        if (o->json_schema)
            printf("schema    %s constrains every decode row (a grammar mask per sequence "
                   "per step)\n", o->json_schema);
        if (mem.device) {
            char tb[32];
            bench_fmt_mem(mem.total, tb, sizeof tb);
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
    for (size_t i = 0; i < n_pps; i++)
        for (size_t k = 0; k < o->pp_depths.n; k++) {
            bench_row r = {.n_prompt = pps[i], .tokens = pps[i], .batch = 1,
                           .depth = o->pp_depths.v[k]};
            snprintf(r.test, sizeof r.test, "pp%" PRId64, r.n_prompt);
            bench_mem_row_begin(&mem);
            if (bench_prefill(e, s, r.depth, (int)r.n_prompt, o->warmup, o->reps, seed, &r.ms,
                              &err) != 0)
                cli_fail(&err);
            row_done(&r, &mem, bpt, ceil.gb_s, rows);
            if (!o->json)
                bench_print_row(&r);
        }
    for (size_t i = 0; i < o->tg.n; i++) {
        if (o->tg.v[i] == 0)
            continue;
        for (size_t k = 0; k < n_depths; k++) {
            bench_row r = {.decode = 1, .n_gen = o->tg.v[i], .depth = depths[k],
                           .tokens = o->tg.v[i], .batch = 1,
                           .constrained = o->json_schema != NULL};
            snprintf(r.test, sizeof r.test, "tg%" PRId64, r.n_gen);
            bench_mem_row_begin(&mem);
            if (bench_decode(e, s, r.depth, (int)r.n_gen, o->warmup, o->reps, seed, &r.ms,
                             &err) != 0)
                cli_fail(&err);
            row_done(&r, &mem, bpt, ceil.gb_s, rows);
            if (!o->json)
                bench_print_row(&r);
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
                               .tokens = o->tg.v[i] * b, .constrained = o->json_schema != NULL};
                snprintf(r.test, sizeof r.test, "tg%" PRId64, r.n_gen);
                bench_mem_row_begin(&mem);
                if (bench_decode_batch(e, seqs, b, r.n_prompt, (int)r.n_gen, o->warmup, o->reps,
                                       seed, &r.ms, &err) != 0)
                    cli_fail(&err);
                row_done(&r, &mem, bpt, ceil.gb_s, rows);
                if (!o->json) {
                    if (!batch_header++)
                        bench_print_batch_header();
                    bench_print_batch_row(&r);
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
        json_object_set_new(j, "backend", json_string(bench_backends[o->backend].name));
        if (cpu_level)
            json_object_set_new(j, "cpu_level", json_string(cpu_level));
        json_object_set_new(j, "threads", json_integer(o->n_threads));
        json_object_set_new(j, "pp", json_integer(eo.pp > 1 ? eo.pp : 1));
        json_object_set_new(j, "tp", json_integer(eo.tp > 1 ? eo.tp : 1));
        json_object_set_new(j, "kv_type", json_string(kv_name));
        json_object_set_new(j, "n_batch", json_integer(n_batch));
        json_object_set_new(j, "n_ctx", json_integer(engine_n_ctx(e)));
        json_object_set_new(j, "n_seqs", json_integer(max_b));
        if (o->json_schema)
            json_object_set_new(j, "json_schema", json_string(o->json_schema));
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
        json_object_set_new(cj, "what", json_string(bench_backends[o->backend].ceiling_what));
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
        bench_print_json(j);
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
    bench_constrain(NULL, NULL);
    gram_vocab_free(gvocab);
    gram_free(grammar);
    if (tok)
        tok_free(tok);
    engine_free(e);
    checkpoint_close(&ck);
    return 0;
}

/* ---- the tokenizer bench ---- */
