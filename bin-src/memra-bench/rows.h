/* The model bench's rows: their figures, their text and JSON forms, and
 * the peak memory probe. */
#ifndef MEMRA_BENCH_ROWS_H
#define MEMRA_BENCH_ROWS_H

#include <jansson.h>
#include <stdint.h>

#include "backend/backend.h"
#include "bench/bench.h"

typedef struct {
    char test[32];      /* "pp512", "tg128" */
    int decode;         /* a decode row (batch 1 or batched) */
    int batched;        /* a -b row: B sequences through engine_forward_batch */
    int batch;          /* sequences per step */
    int constrained;    /* a decode row under --json-schema (bench_constrain) */
    int64_t n_prompt, n_gen, depth, tokens;
    bench_stats ms;     /* per repetition: the whole prompt, or all n_gen steps */
    double tok_s, tok_s_min, tok_s_max, ms_per_token, gb_s, pct;
    double tok_s_per_seq, ms_per_step; /* batched rows */
    uint64_t peak_mem;  /* bytes: the row's peak RSS (cpu) or device memory in use (cuda) */
} bench_row;

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

/* From the repetition times to the reported figures. */
void bench_finish_row(bench_row *r, uint64_t bytes_per_token, double ceiling_gbs);
json_t *bench_row_json(const bench_row *r);
void bench_print_row(const bench_row *r);
void bench_print_batch_header(void);
void bench_print_batch_row(const bench_row *r);
/* A byte count for the tables ("22.2 GB"). */
void bench_fmt_mem(uint64_t b, char *out, size_t n);

void bench_mem_init(mem_probe *m, backend *bk);
void bench_mem_row_begin(mem_probe *m);
/* The memory in use now (device) or the row's peak RSS (host). */
uint64_t bench_mem_row_end(mem_probe *m);

#endif
