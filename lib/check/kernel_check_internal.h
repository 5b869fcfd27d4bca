/* Shared by kernel_check.c (the harness, weights, reporting, error paths)
 * and kernel_check_ops.c (one function per op family). */
#ifndef MEMRA_CHECK_KERNEL_CHECK_INTERNAL_H
#define MEMRA_CHECK_KERNEL_CHECK_INTERNAL_H

#include <cuda_runtime.h>
#include <stdio.h>

#include "backend/backend.h"
#include "check/kernel_check.h"
#include "core/rng.h"

typedef struct {
    backend *cpu, *gpu;
    const kcheck_opts *o;
    rng_state rng;
    FILE *out;
    int n_checks, n_failed, n_skipped;
    cudaEvent_t ev0, ev1;
    cudaStream_t stream;
} kc;

/* Random values in +-[0.1, 1] * scale: never zero. */
void kc_fill(kc *k, float *x, size_t n, float scale);
/* A random weight [rows][cols] of type t, prepared on both backends.
 * Caller frees with kc_weight_free. Fails (reported as a check) when a
 * backend refuses it. */
int kc_weight(kc *k, bk_weight *w, dtype t, int64_t rows, int64_t cols, const char *name);
void kc_weight_free(bk_weight *w);
/* A device activation holding host data. */
float *kc_dev(kc *k, const float *host, size_t n);
float *kc_read(kc *k, const float *dev, size_t n); /* malloc'd host copy */
void kc_dev_free(kc *k, float *dev);

/* max |got - ref| / max(max |ref|, tiny); infinite when got has a NaN/inf
 * where ref has not. */
double kc_rel_err(const float *got, const float *ref, size_t n);
/* Whether the op family is selected by opts.only. */
int kc_selected(kc *k, const char *op);

/* One line: op, what was run, the error against its bound, the
 * batch-invariance result (inv: -1 not checked, 0 differs, 1 identical),
 * and with perf the time per call and bytes per second (us < 0: not timed). */
void kc_report(kc *k, const char *op, const char *what, double err, double bound, int inv,
               double us, double bytes);
/* A check with no error figure (the error paths): ok or not, and why. */
/* A case that cannot run on this device: counted apart, neither ok nor failed. */
void kc_report_skip(kc *k, const char *op, const char *what, const char *why);
void kc_report_ok(kc *k, const char *op, const char *what, int ok, const char *detail);

/* Time the statement: one warm-up run, then reps runs between events on
 * the backend's stream; microseconds per run. */
#define KC_TIME(k, us_out, stmt)                                                          \
    do {                                                                                  \
        const int kc_reps = 20;                                                           \
        stmt;                                                                             \
        cudaEventRecord((k)->ev0, (k)->stream);                                           \
        for (int kc_r = 0; kc_r < kc_reps; kc_r++) {                                      \
            stmt;                                                                         \
        }                                                                                 \
        cudaEventRecord((k)->ev1, (k)->stream);                                           \
        float kc_ms = 0;                                                                  \
        if (cudaEventSynchronize((k)->ev1) == cudaSuccess &&                              \
            cudaEventElapsedTime(&kc_ms, (k)->ev0, (k)->ev1) == cudaSuccess)              \
            (us_out) = (double)kc_ms * 1000.0 / kc_reps;                                  \
    } while (0)

void kc_check_matmul(kc *k);
void kc_check_embed(kc *k);
void kc_check_rmsnorm(kc *k);
void kc_check_qkv(kc *k);
void kc_check_rope(kc *k);
void kc_check_attention(kc *k);
void kc_check_ffn(kc *k);
void kc_check_moe(kc *k);
void kc_check_elementwise(kc *k);
void kc_check_sample(kc *k);
void kc_check_fused(kc *k);
void kc_check_gemm(kc *k);
void kc_check_dequant(kc *k);
void kc_check_flash_prefill(kc *k); /* kernel_check_flash.c */
void kc_check_dgemm(kc *k);         /* kernel_check_dgemm.c */
void kc_check_delta(kc *k);         /* kernel_check_delta.c */

#endif
