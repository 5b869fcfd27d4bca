/* The kernel check behind `memra-parity --kernels`: every CUDA op against
 * the CPU backend's op on random inputs (never zeros), in several shapes
 * including odd ones, each with its own error bound, and each batched op
 * also checked bit-identical between a batch and its rows run alone.
 * Also the error paths: an unsupported weight type, device memory running
 * out, an op on a foreign weight. With perf, each op is timed (CUDA
 * events, after a warm-up) and its bytes moved per second reported.
 * Only in builds with CUDA. */
#ifndef MEMRA_CHECK_KERNEL_CHECK_H
#define MEMRA_CHECK_KERNEL_CHECK_H

#include <stdint.h>
#include <stdio.h>

#include "core/err.h"

typedef struct {
    int device;      /* CUDA device index */
    int perf;        /* also time each op and add large shapes */
    uint64_t seed;   /* random inputs */
    const char *only; /* run only the checks whose op name contains this (NULL: all) */
    const char *skip; /* leave out the checks whose op name contains this (NULL: none) */
} kcheck_opts;

/* Print one line per check to out and a last line "ALL GREEN" or
 * "N of M FAILED"; *n_failed gets the failures. Fails (-1, err) only
 * when the backends cannot be set up (no device). */
int kernel_check_run(const kcheck_opts *o, FILE *out, int *n_failed, memra_err *err);

#endif
