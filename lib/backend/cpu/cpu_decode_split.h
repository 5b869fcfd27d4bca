/* How a decode step's weight rows are shared among the pool's threads
 * (docs/decisions/0018-cpu-fast-path.md, "Decode tasks that shrink").
 *
 * A step of one to a few tokens reads each weight row once, straight
 * from memory, so a task is a stream: long tasks stream best, but the
 * threads must also finish together, or a core sits idle at the join
 * while the other streams alone. Tasks therefore shrink: each takes the
 * rows still left divided by twice the threads (a quarter of a matrix
 * first on 2 threads), down to a floor of CPU_SPLIT_MIN_BYTES of weights
 * (a quarter of a thread's share where that is less: a small matrix on
 * many cores still gives every core a share), so the last tasks are
 * short and a thread that finishes early waits for at most one of them.
 * The split never changes a row's bits: each row is computed by the same
 * kernel whatever task holds it. */
#ifndef MEMRA_BACKEND_CPU_CPU_DECODE_SPLIT_H
#define MEMRA_BACKEND_CPU_CPU_DECODE_SPLIT_H

#include <stddef.h>
#include <stdint.h>

enum {
    CPU_SPLIT_MIN_BYTES = 64 * 1024, /* the smallest task's weights, at most */
    CPU_SPLIT_ROW_UNIT = 4,          /* tasks hold whole blocks of this many rows */
    CPU_SPLIT_MAX_TASKS = 1024       /* bounds[] holds CPU_SPLIT_MAX_TASKS + 1 */
};

/* Splits rows (each row_bytes of weights) for `threads` threads into
 * tasks of shrinking size: task i is rows [bounds[i], bounds[i + 1]).
 * Returns the number of tasks (1 to CPU_SPLIT_MAX_TASKS; 0 when rows is
 * 0). Every size but the last is a multiple of CPU_SPLIT_ROW_UNIT, sizes
 * never grow, and the split depends only on the arguments. */
int cpu_decode_split(int64_t rows, size_t row_bytes, int threads, int64_t *bounds);

#endif
