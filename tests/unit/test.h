/* A tiny test harness: each TEST is a function; CHECK records a failure with
 * file and line and carries on; the runner prints "PASS name", "FAIL name"
 * or "SKIP name: why" lines that tests/run.sh counts. A case that cannot run
 * here (no GPU) calls test_skip; a fixture the repository provides that is
 * missing is a failure naming the file (test_need_file), never a crash. */
#ifndef MEMRA_TEST_H
#define MEMRA_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>

static int test_failed_checks;
static const char *test_current;
static int test_skipped;
static char test_skip_reason[256];

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
    int cleanup; /* frees what earlier cases shared: no test, not counted */
} test_case;

#define TEST_CASE(fn) {#fn, fn, 0}
/* Runs like a case but is no test: it prints a line only when it fails. */
#define TEST_CLEANUP(fn) {#fn, fn, 1}

/* Directory of the test data (vocab/, templates/, models/), made by
 * scripts/fetch-test-data.sh; MEMRA_TEST_DATA when set, else
 * build/test-data from the project root. */
static inline const char *test_data_dir(void)
{
    const char *s = getenv("MEMRA_TEST_DATA");
    return s && *s ? s : "build/test-data";
}

/* Marks the current case skipped (it cannot run here), with the reason;
 * the case then reports SKIP unless a check failed. */
static inline void test_skip(const char *why)
{
    test_skipped = 1;
    snprintf(test_skip_reason, sizeof test_skip_reason, "%s", why);
}

/* 1 when path is a regular file; else a failed check naming it (a fixture
 * the repository provides is missing: the setup is broken, not the code). */
#define test_need_file(path) test_need_file_at((path), __FILE__, __LINE__)
static inline int test_need_file_at(const char *path, const char *file, int line)
{
    struct stat st;
    if (stat(path, &st) == 0 && S_ISREG(st.st_mode))
        return 1;
    fprintf(stderr, "  %s:%d: %s: missing fixture %s (scripts/fetch-test-data.sh makes the "
                    "test data)\n", file, line, test_current, path);
    test_failed_checks++;
    return 0;
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
    /* MEMRA_TEST_ONLY=TEXT: only the cases whose name contains TEXT (a
     * developer's or a device run's focus; the others say SKIP) */
    const char *only = getenv("MEMRA_TEST_ONLY");
    for (int i = 0; i < n; i++) {
        test_current = cases[i].name;
        test_skipped = 0;
        if (only && *only && !strstr(cases[i].name, only) && !cases[i].cleanup) {
            printf("SKIP %s: not in MEMRA_TEST_ONLY\n", cases[i].name);
            continue;
        }
        int before = test_failed_checks;
        cases[i].fn();
        if (test_failed_checks == before && cases[i].cleanup) {
            continue;
        } else if (test_failed_checks == before && test_skipped) {
            printf("SKIP %s: %s\n", cases[i].name, test_skip_reason);
        } else if (test_failed_checks == before) {
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
