#include "core/err.h"

#include <stdio.h>
#include <string.h>

int memra_failv(memra_err *err, const char *fmt, va_list ap)
{
    if (err)
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    return -1;
}

int memra_fail(memra_err *err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    memra_failv(err, fmt, ap);
    va_end(ap);
    return -1;
}

int memra_wrap(memra_err *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[MEMRA_ERR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Truncation keeps the front of the line, which names the file. */
    char joined[2 * MEMRA_ERR_MAX + 2];
    snprintf(joined, sizeof joined, "%s: %s", prefix, err->msg);
    memcpy(err->msg, joined, MEMRA_ERR_MAX - 1);
    err->msg[MEMRA_ERR_MAX - 1] = '\0';
    return -1;
}
