#include "backend/cpu/cpu_decode_split.h"

static int64_t round_up(int64_t v, int64_t unit) { return (v + unit - 1) / unit * unit; }

/* The split with tasks of at least min_rows rows; -1 when it needs more
 * than CPU_SPLIT_MAX_TASKS tasks. */
static int split_with_floor(int64_t rows, int threads, int64_t min_rows, int64_t *bounds)
{
    int n = 0;
    int64_t at = 0;
    bounds[0] = 0;
    while (at < rows) {
        if (n == CPU_SPLIT_MAX_TASKS)
            return -1;
        int64_t left = rows - at;
        int64_t size = round_up(left / (2 * (int64_t)threads), CPU_SPLIT_ROW_UNIT);
        if (size < min_rows)
            size = min_rows;
        if (size > left)
            size = left;
        at += size;
        bounds[++n] = at;
    }
    return n;
}

int cpu_decode_split(int64_t rows, size_t row_bytes, int threads, int64_t *bounds)
{
    if (rows <= 0) {
        bounds[0] = 0;
        return 0;
    }
    if (threads < 1)
        threads = 1;
    /* The floor, lower for a small matrix on many threads, so that it
     * still makes four tasks a thread: every core streams a share. */
    int64_t floor_bytes = CPU_SPLIT_MIN_BYTES;
    if ((double)rows * (double)row_bytes / (4.0 * threads) < (double)floor_bytes)
        floor_bytes = (int64_t)((double)rows * (double)row_bytes / (4.0 * threads));
    int64_t min_rows = row_bytes ? (floor_bytes + (int64_t)row_bytes - 1) / (int64_t)row_bytes : rows;
    min_rows = round_up(min_rows > 0 ? min_rows : 1, CPU_SPLIT_ROW_UNIT);
    /* Many threads over a tall matrix (a vocabulary's rows on 64 cores)
     * would make more tasks than bounds[] holds: a higher floor, which
     * only lengthens the shortest tasks. */
    for (;;) {
        int n = split_with_floor(rows, threads, min_rows, bounds);
        if (n > 0)
            return n;
        min_rows *= 2;
    }
}
