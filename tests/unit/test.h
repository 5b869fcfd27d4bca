/* A tiny test harness: each TEST is a function; CHECK records a failure with
 * file and line and carries on; the runner prints "PASS name" / "FAIL name"
 * lines that tests/run.sh counts. */
#ifndef MEMRA_TEST_H
#define MEMRA_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failed_checks;
static const char *test_current;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "  %s:%d: %s: check failed: %s\n", __FILE__, __LINE__,      \
                    test_current, #cond);                                               \
            test_failed_checks++;                                                       \
        }                                                                               \
    } while (0)

#define CHECK_MSG(cond, ...)                                                            \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "  %s:%d: %s: check failed: %s: ", __FILE__, __LINE__,      \
                    test_current, #cond);                                               \
            fprintf(stderr, __VA_ARGS__);                                               \
            fputc('\n', stderr);                                                        \
            test_failed_checks++;                                                       \
        }                                                                               \
    } while (0)

typedef void (*test_fn)(void);
typedef struct {
    const char *name;
    test_fn fn;
} test_case;

#define TEST_CASE(fn) {#fn, fn}

/* Directory of the shared files (../shared from the project root), taken
 * from MEMRA_SHARED when set. */
static inline const char *test_shared_dir(void)
{
    const char *s = getenv("MEMRA_SHARED");
    return s ? s : "../shared";
}

/* A scratch directory for this test binary, from MEMRA_TEST_TMP. */
static inline const char *test_tmp_dir(void)
{
    const char *s = getenv("MEMRA_TEST_TMP");
    return s ? s : "/tmp";
}

static inline int test_run_all(const test_case *cases, int n)
{
    int failed = 0;
    for (int i = 0; i < n; i++) {
        test_current = cases[i].name;
        int before = test_failed_checks;
        cases[i].fn();
        if (test_failed_checks == before) {
            printf("PASS %s\n", cases[i].name);
        } else {
            printf("FAIL %s\n", cases[i].name);
            failed++;
        }
        fflush(stdout);
    }
    return failed ? 1 : 0;
}

#define TEST_MAIN(...)                                                                  \
    int main(void)                                                                      \
    {                                                                                   \
        static const test_case cases[] = {__VA_ARGS__};                                 \
        return test_run_all(cases, (int)(sizeof cases / sizeof cases[0]));              \
    }

#endif
