/* memra-bench's parts (bin-src/memra-bench/): the options, the output
 * helpers and the three benches (model, tokenizer, server), each in its own
 * file; memra-bench.c holds main. */
#ifndef MEMRA_BENCH_CLI_H
#define MEMRA_BENCH_CLI_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/kv_cache.h"
#include "bench/loadgen.h"

#define DEFAULT_TEXT_BYTES 1000000

/* Backends memra-bench knows of; `built` says whether the engine runs on
 * it today. The ceiling of each is its memory bandwidth: the host's read
 * bandwidth for cpu and cpu-ref (lib/bench/membw.c), the device's for cuda (to come with
 * the CUDA backend, from its device-copy probe). */
typedef enum { BACKEND_CPU = 0, BACKEND_CUDA = 1, BACKEND_CPU_REF = 2 } bench_backend;
typedef struct {
    const char *name;
    int built;
    const char *ceiling_what;
} bench_backend_desc;
extern const bench_backend_desc bench_backends[3];

typedef struct {
    int64_t *v;
    size_t n;
    int given;
} int_list;

typedef struct {
    const char *model, *text_file;
    const char *json_schema; /* --json-schema: the decode rows constrained by it */
    int_list pp, tg, depths, pp_depths, batches;
    int reps, warmup, n_threads, n_batch, json, tokenizer, remeasure, profile_range;
    int sampler; /* --sampler: the host sampler bench */
    int64_t ctx;
    kv_type kv;
    int device, device_given;
    const char *devices; /* --devices: one CUDA device per pipeline stage */
    int pipe_stages;     /* --pp */
    int tp_ranks;        /* --tp */
    int rank;            /* --rank, or -1 */
    const char *nccl_id; /* --nccl-id */
    bench_backend backend;
    int backend_given;
    double bandwidth; /* > 0: given */
    /* flags that only the model bench takes, for a clear error with --tokenizer */
    const char *model_flag;
    /* --server: the load client */
    const char *server, *server_model, *api_key, *c_arg;
    int_list conc;
    double timeout_s;
    int64_t vocab; /* --vocab: --server's prompt ids, or --sampler's row */
    const char *local_flag;  /* a flag of the model or tokenizer bench */
    const char *server_flag; /* a flag of --server only */
    /* --server --turns: multi-turn conversations */
    int turns, reps_given;
    int64_t system_tokens, turn_tokens;
    const char *turns_flag;  /* a flag of --turns only */
} bench_opts;

/* The command line into o (exits 2 with a usage line on a bad one). */
void bench_parse_args(int argc, char **argv, bench_opts *o);

/* The host's name, CPU model and core count. */
json_t *bench_host_json(void);
/* A rate or a percentage for the tables, with the digits that matter. */
void bench_fmt_num(double v, char *out, size_t n);
/* j on stdout, indented, keys in order. */
void bench_print_json(json_t *j);

/* The three benches; each returns the exit status (or exits on failure). */
int bench_run_model(const bench_opts *o);
int bench_run_tokenizer(const bench_opts *o);
int bench_run_sampler(const bench_opts *o);
int bench_run_server(const bench_opts *o);
/* --server --turns (server_turns.c). */
int bench_run_server_turns(const bench_opts *o);
/* A load level as JSON (server.c), for both server benches. */
json_t *bench_level_json(const loadgen_level *l);

#endif
