/* The error convention of the whole library.
 *
 * A library function that can fail returns an int (0 on success, -1 on
 * failure) and fills a caller-owned `memra_err` with one line that says what
 * went wrong and where ("model.gguf: tensor 'blk.0.attn_q.weight': offset
 * 4096 past end of file"). Programs print that line and exit 1; bad usage
 * exits 2. Nothing in lib/ prints an error or exits on bad input. */
#ifndef MEMRA_CORE_ERR_H
#define MEMRA_CORE_ERR_H

#include <stdarg.h>

#define MEMRA_ERR_MAX 1024

typedef struct {
    char msg[MEMRA_ERR_MAX];
} memra_err;

/* Fill `err` (which may be NULL) with a printf-style message; returns -1 so
 * a failing function can `return memra_fail(err, ...)`. */
int memra_fail(memra_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int memra_failv(memra_err *err, const char *fmt, va_list ap);

/* Prefix the message already in `err` with context ("loading x.gguf: ...");
 * returns -1 like memra_fail. */
int memra_wrap(memra_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Process exit codes shared by every program. */
enum { MEMRA_EXIT_OK = 0, MEMRA_EXIT_FAIL = 1, MEMRA_EXIT_USAGE = 2 };

#endif
