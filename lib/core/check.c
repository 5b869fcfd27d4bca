#include "core/check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Noreturn void out_of_memory(size_t n, const char *file, int line)
{
    fprintf(stderr, "memra: out of memory allocating %zu bytes at %s:%d\n", n, file, line);
    abort();
}

void *memra_malloc_at(size_t n, const char *file, int line)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        out_of_memory(n, file, line);
    return p;
}

void *memra_calloc_at(size_t count, size_t size, const char *file, int line)
{
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        out_of_memory(count * size, file, line);
    return p;
}

void *memra_realloc_at(void *p, size_t n, const char *file, int line)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        out_of_memory(n, file, line);
    return q;
}

char *memra_strdup_at(const char *s, const char *file, int line)
{
    size_t n = strlen(s) + 1;
    char *p = memra_malloc_at(n, file, line);
    memcpy(p, s, n);
    return p;
}

void memra_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "memra: assertion failed: %s at %s:%d\n", expr, file, line);
    abort();
}
