/* What every program shares: the one-line error and exit convention, and
 * number parsing that refuses trailing junk and out-of-range values. */
#ifndef MEMRA_CORE_CLI_H
#define MEMRA_CORE_CLI_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* Set once at the start of main: the name used in messages. */
void cli_set_program(const char *name);
const char *cli_program(void);

/* "memra-x: <msg>" on stderr, exit 1. */
_Noreturn void cli_fail(const memra_err *err);
_Noreturn void cli_failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "memra-x: <msg> (try --help)" on stderr, exit 2. */
_Noreturn void cli_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Parse an integer in [min, max]; `what` names the flag in errors. */
int cli_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out, const char *what,
                  memra_err *err);
int cli_parse_f64(const char *s, double min, double max, double *out, const char *what,
                  memra_err *err);
/* cli_parse_i64 for a flag or environment variable whose bad value is a
 * usage error: "memra-x: WHAT: ... (try --help)" on stderr, exit 2. */
int64_t cli_int_or_usage(const char *s, int64_t min, int64_t max, const char *what);
/* A comma-separated list of integers in [min, max] ("0,1"), at most
 * max_n of them, into out; returns how many, or -1 (err names `what`,
 * the bad item, or the count). */
int cli_parse_int_list(const char *s, int64_t min, int64_t max, int *out, int max_n,
                       const char *what, memra_err *err);
/* Whether environment variable `name` says yes: 1, true or yes (any case).
 * Anything else, unset included, is no. */
int cli_env_true(const char *name);
/* The worker-thread count a program starts from, before its --threads flag:
 * MEMRA_THREADS when set and not empty (1 to 4096; anything else is a usage
 * error naming MEMRA_THREADS), else the physical cores this process may
 * run on (core/cpus.h). */
int cli_threads_default(void);
/* A byte size with an optional K/M/G/T suffix (powers of 1000; KiB/MiB/GiB for 1024). */
int cli_parse_bytes(const char *s, uint64_t *out, const char *what, memra_err *err);
/* A byte count for people, in powers of 1000 as cli_parse_bytes reads them:
 * "512 B", "1.5 kB", "22.24 GB" (truncated to n - 1 characters). */
void cli_human_bytes(uint64_t b, char *out, size_t n);

#endif
