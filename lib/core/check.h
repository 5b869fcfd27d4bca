/* Checked wrappers for the things that may only fail when the machine is in
 * trouble (out of memory): they report the call, file and line and abort.
 * Input-dependent failures never go through these; they use memra_err. */
#ifndef MEMRA_CORE_CHECK_H
#define MEMRA_CORE_CHECK_H

#include <stddef.h>

void *memra_malloc_at(size_t n, const char *file, int line);
void *memra_calloc_at(size_t count, size_t size, const char *file, int line);
void *memra_realloc_at(void *p, size_t n, const char *file, int line);
char *memra_strdup_at(const char *s, const char *file, int line);

#define xmalloc(n) memra_malloc_at((n), __FILE__, __LINE__)
#define xcalloc(c, s) memra_calloc_at((c), (s), __FILE__, __LINE__)
#define xrealloc(p, n) memra_realloc_at((p), (n), __FILE__, __LINE__)
#define xstrdup(s) memra_strdup_at((s), __FILE__, __LINE__)

/* Assertions stay on in release builds (DESIGN.md). */
#define MEMRA_ASSERT(cond)                                                      \
    do {                                                                        \
        if (!(cond))                                                            \
            memra_assert_fail(#cond, __FILE__, __LINE__);                       \
    } while (0)
_Noreturn void memra_assert_fail(const char *expr, const char *file, int line);

#define MEMRA_ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#endif
