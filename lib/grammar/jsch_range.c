/* Integer bounds (minimum, maximum and the exclusive forms) as a grammar of
 * decimal digits: the range is cut where the number of digits changes, then
 * each same-length range [X, Y] becomes X's first digit followed by the rest
 * of X's range up to 9...9, the first digits strictly between followed by
 * any digits, and Y's first digit followed by 0...0 up to the rest of Y. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "grammar/jsch_internal.h"

/* The largest magnitude the integer rule writes: 16 digits. */
#define JSCH_INT_MAX 9999999999999999LL

static void same_length(strbuf *out, const char *x, const char *y, size_t n)
{
    if (n == 0) {
        sb_puts(out, "\"\"");
        return;
    }
    if (n == 1) {
        if (x[0] == y[0])
            sb_printf(out, "\"%c\"", x[0]);
        else
            sb_printf(out, "[%c-%c]", x[0], y[0]);
        return;
    }
    int rest_all = 1;
    for (size_t i = 1; i < n; i++)
        if (x[i] != '0' || y[i] != '9')
            rest_all = 0;
    if (rest_all) {
        if (x[0] == y[0])
            sb_printf(out, "\"%c\" [0-9]{%zu}", x[0], n - 1);
        else
            sb_printf(out, "[%c-%c] [0-9]{%zu}", x[0], y[0], n - 1);
        return;
    }
    if (x[0] == y[0]) {
        sb_printf(out, "\"%c\" ( ", x[0]);
        same_length(out, x + 1, y + 1, n - 1);
        sb_puts(out, " )");
        return;
    }
    char nines[20], zeros[20];
    memset(nines, '9', n - 1);
    memset(zeros, '0', n - 1);
    sb_printf(out, "\"%c\" ( ", x[0]);
    same_length(out, x + 1, nines, n - 1);
    sb_puts(out, " )");
    if (x[0] + 1 <= y[0] - 1)
        sb_printf(out, " | [%c-%c] [0-9]{%zu}", x[0] + 1, y[0] - 1, n - 1);
    sb_printf(out, " | \"%c\" ( ", y[0]);
    same_length(out, zeros, y + 1, n - 1);
    sb_puts(out, " )");
}

/* 0 <= a <= b, written without leading zeros. */
static void non_negative(strbuf *out, int64_t a, int64_t b)
{
    int first = 1;
    int64_t lo_len = 1;
    for (int len = 1; len <= 16; len++, lo_len *= 10) {
        int64_t lo = len == 1 ? 0 : lo_len, hi = lo_len * 10 - 1;
        if (a > lo)
            lo = a;
        if (b < hi)
            hi = b;
        if (lo > hi)
            continue;
        char x[24], y[24];
        snprintf(x, sizeof x, "%" PRId64, lo);
        snprintf(y, sizeof y, "%" PRId64, hi);
        sb_puts(out, first ? "( " : " | ( ");
        same_length(out, x, y, strlen(x));
        sb_puts(out, " )");
        first = 0;
    }
}

void jsch_int_range(int has_lo, int64_t lo, int has_hi, int64_t hi, strbuf *out)
{
    if (!has_lo || lo < -JSCH_INT_MAX)
        lo = -JSCH_INT_MAX;
    if (!has_hi || hi > JSCH_INT_MAX)
        hi = JSCH_INT_MAX;
    sb_puts(out, "( ");
    if (lo < 0) {
        sb_puts(out, "\"-\" ( ");
        non_negative(out, hi < 0 ? -hi : 1, -lo);
        sb_puts(out, " )");
    }
    if (hi >= 0) {
        sb_puts(out, lo < 0 ? " | " : "");
        non_negative(out, lo > 0 ? lo : 0, hi);
    }
    sb_puts(out, " )");
}
