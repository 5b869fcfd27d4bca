#include "numerics/logit_scan.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define LS_X86 1
#define LS_TARGET __attribute__((target("avx2")))
#else
#define LS_X86 0
#endif

/* The pass's running state: the flags, the count and the largest value. */
typedef struct {
    int bad;
    int32_t n_finite;
    float max;
} scan_state;

/* Values [i0, n) into st, plainly (no branch on the data, so it runs at
 * the loads' rate). */
static void scan_values(const float *x, int32_t i0, int32_t n, scan_state *st)
{
    for (int32_t i = i0; i < n; i++) {
        st->bad |= !(x[i] < INFINITY);
        st->n_finite += x[i] > -INFINITY;
        st->max = x[i] > st->max ? x[i] : st->max;
    }
}

/* The result from the finished pass, the first id holding the largest
 * value looked for from i0 on (the ids before it hold none). */
static void scan_finish(const float *x, int32_t i0, int32_t n, const scan_state *st,
                        logit_scan *o)
{
    memset(o, 0, sizeof *o);
    if (st->bad) {
        o->bad = 1;
        return;
    }
    o->n_finite = st->n_finite;
    o->best = -1;
    if (st->max > -INFINITY)
        for (int32_t i = i0; i < n; i++)
            if (x[i] == st->max) {
                o->best = i;
                return;
            }
}

static void scan_scalar(const float *x, int32_t n, logit_scan *o)
{
    scan_state st = {0, 0, -INFINITY};
    scan_values(x, 0, n, &st);
    scan_finish(x, 0, n, &st, o);
}

#if LS_X86
LS_TARGET static float hmax8(__m256 v)
{
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    return _mm_cvtss_f32(m);
}

/* Two vectors a step, each with its own maximum and flags; the lanes are
 * folded only at the end. NaN-free rows are the only ones whose maximum
 * is used, so _mm256_max_ps's NaN rule does not matter. */
LS_TARGET static void scan_avx2(const float *x, int32_t n, logit_scan *o)
{
    const __m256 inf = _mm256_set1_ps(INFINITY), ninf = _mm256_set1_ps(-INFINITY);
    __m256 m0 = ninf, m1 = ninf, bad = _mm256_setzero_ps();
    __m256i cnt = _mm256_setzero_si256();
    int32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
        bad = _mm256_or_ps(bad, _mm256_or_ps(_mm256_cmp_ps(a, inf, _CMP_NLT_UQ),
                                             _mm256_cmp_ps(b, inf, _CMP_NLT_UQ)));
        /* a true lane is all ones, -1 as an integer */
        cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(a, ninf, _CMP_GT_OQ)));
        cnt = _mm256_sub_epi32(cnt, _mm256_castps_si256(_mm256_cmp_ps(b, ninf, _CMP_GT_OQ)));
        m0 = _mm256_max_ps(m0, a);
        m1 = _mm256_max_ps(m1, b);
    }
    int32_t lanes[8];
    _mm256_storeu_si256((__m256i *)(void *)lanes, cnt);
    scan_state st = {_mm256_movemask_ps(bad) != 0, 0, hmax8(_mm256_max_ps(m0, m1))};
    for (int k = 0; k < 8; k++)
        st.n_finite += lanes[k];
    scan_values(x, i, n, &st);
    /* the first id of the largest value: eight at a time, then the tail */
    int32_t k = 0;
    if (!st.bad && st.max > -INFINITY) {
        const __m256 vm = _mm256_set1_ps(st.max);
        for (; k + 8 <= n; k += 8) {
            int hit = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + k), vm, _CMP_EQ_OQ));
            if (hit) {
                memset(o, 0, sizeof *o);
                o->n_finite = st.n_finite;
                o->best = k + __builtin_ctz((unsigned)hit);
                return;
            }
        }
    }
    scan_finish(x, k, n, &st, o);
}

/* AVX2 present, and MEMRA_CPU_ISA not asking for the scalar level. */
static int avx2_ok(void)
{
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        const char *env = getenv("MEMRA_CPU_ISA");
        ok = __builtin_cpu_supports("avx2") && !(env && strcmp(env, "scalar") == 0);
    }
    return ok;
}
#endif

int logit_scan_form(int simd, const float *x, int32_t n, logit_scan *out)
{
    if (!simd) {
        scan_scalar(x, n, out);
        return 0;
    }
#if LS_X86
    if (avx2_ok()) {
        scan_avx2(x, n, out);
        return 0;
    }
#endif
    return -1;
}

void logit_scan_row(const float *x, int32_t n, logit_scan *out)
{
    if (logit_scan_form(1, x, n, out) != 0)
        scan_scalar(x, n, out);
}
