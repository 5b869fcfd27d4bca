#include "numerics/sample_weights.h"

#include <stdlib.h>
#include <string.h>

#include "numerics/sample_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SW_X86 1
#define SW_TARGET __attribute__((target("avx512f,avx512dq")))
#else
#define SW_X86 0
#endif

static void weights_scalar(const float *logit, size_t stride, int64_t n, float max,
                           double temperature, uint64_t *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = smp_weight(smp_dist(logit[(size_t)i * stride], max, temperature));
}

#if SW_X86
/* smp_exp on eight lanes: the same operations in the same order (a mul
 * and an add, never fused: this file is ISO C, -ffp-contract=off), so
 * each lane's bits are the scalar's, except that a lane whose 2^k is
 * subnormal (x below about -708, where smp_exp scales in two steps) gives
 * 0: its weight is 0 either way, the weights stopping at 2^-62. Lanes at
 * or below -745.5 give 0 as smp_exp does. */
SW_TARGET static __m512d exp8(__m512d x)
{
    const __m512d ln2_hi = _mm512_set1_pd(6.93147180369123816490e-01);
    const __m512d ln2_lo = _mm512_set1_pd(1.90821492927058770002e-10);
    const __m512d inv_ln2 = _mm512_set1_pd(1.44269504088896338700e+00);
    static const double c[13] = {1.6059043836821613e-10, 2.08767569878681e-09,
                                 2.505210838544172e-08,  2.755731922398589e-07,
                                 2.7557319223985893e-06, 2.48015873015873e-05,
                                 1.984126984126984e-04,  1.388888888888889e-03,
                                 8.333333333333333e-03,  4.1666666666666664e-02,
                                 1.6666666666666666e-01, 0.5, 1.0};
    const __mmask8 live = _mm512_cmp_pd_mask(x, _mm512_set1_pd(-745.5), _CMP_GT_OQ);
    __m512d kd = _mm512_add_pd(_mm512_mul_pd(x, inv_ln2), _mm512_set1_pd(0.5));
    kd = _mm512_roundscale_pd(kd, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
    __m512d r = _mm512_sub_pd(_mm512_sub_pd(x, _mm512_mul_pd(kd, ln2_hi)),
                              _mm512_mul_pd(kd, ln2_lo));
    __m512d p = _mm512_set1_pd(c[0]);
    for (int i = 1; i < 13; i++)
        p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(c[i]));
    p = _mm512_add_pd(_mm512_mul_pd(p, r), _mm512_set1_pd(1.0));
    /* kd is an integer (live lanes: within [-1076, 1]) */
    __m512i k = _mm512_cvtpd_epi64(_mm512_maskz_mov_pd(live, kd));
    const __mmask8 normal = _mm512_cmp_epi64_mask(k, _mm512_set1_epi64(-1022), _MM_CMPINT_GE);
    __m512i bits = _mm512_slli_epi64(_mm512_add_epi64(k, _mm512_set1_epi64(1023)), 52);
    __m512d e = _mm512_mul_pd(p, _mm512_castsi512_pd(bits));
    return _mm512_maskz_mov_pd(live & normal, e);
}

SW_TARGET static void weights_avx512(const float *logit, size_t stride, int64_t n, float max,
                                     double temperature, uint64_t *out)
{
    const __m512d vmax = _mm512_set1_pd((double)max), vt = _mm512_set1_pd(temperature);
    const __m512d two62 = _mm512_set1_pd(0x1p62);
    const __m256i idx = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                           _mm256_set1_epi32((int)stride));
    const __m512i evens = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    int64_t i = 0;
    if (stride <= (size_t)INT32_MAX / 8)
        for (; i + 8 <= n; i += 8) {
            const float *p = logit + (size_t)i * stride;
            /* stride 2, the sampler's (logit, id) pairs: one load and a
             * permute of the even lanes, three times a gather's rate */
            __m256 l = stride == 1   ? _mm256_loadu_ps(p)
                       : stride == 2 ? _mm512_castps512_ps256(
                                           _mm512_permutexvar_ps(evens, _mm512_loadu_ps(p)))
                                     : _mm256_i32gather_ps(p, idx, 4);
            __m512d d = _mm512_div_pd(_mm512_sub_pd(_mm512_cvtps_pd(l), vmax), vt);
            __m512d e = exp8(d);
            _mm512_storeu_si512((void *)(out + i), _mm512_cvttpd_epu64(_mm512_mul_pd(e, two62)));
        }
    weights_scalar(logit + (size_t)i * stride, stride, n - i, max, temperature, out + i);
}

/* AVX-512 F and DQ present, and MEMRA_CPU_ISA (the CPU fast path's level:
 * scalar, avx2, avx512, ...) not asking for less. */
static int avx512_ok(void)
{
    static int ok = -1;
    if (ok < 0) {
        __builtin_cpu_init();
        const char *env = getenv("MEMRA_CPU_ISA");
        ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             !(env && (strcmp(env, "scalar") == 0 || strcmp(env, "avx2") == 0));
    }
    return ok;
}
#endif

int smp_weights_form(int simd, const float *logit, size_t stride, int64_t n, float max,
                     double temperature, uint64_t *out)
{
    if (!simd) {
        weights_scalar(logit, stride, n, max, temperature, out);
        return 0;
    }
#if SW_X86
    if (avx512_ok()) {
        weights_avx512(logit, stride, n, max, temperature, out);
        return 0;
    }
#endif
    return -1;
}

/* Fewer candidates than this take the scalar form (a few microseconds
 * either way): a top-k 40 token that ran its survivors' weights on the
 * 512-bit units took 0.40 to 0.45 ms against 0.26 to 0.28 with the
 * scalar form on the 2-core VM (sampler_sample in a loop), as if the
 * units woke for each. */
enum { SIMD_MIN = 1024 };

void smp_weights(const float *logit, size_t stride, int64_t n, float max, double temperature,
                 uint64_t *out)
{
    if (n < SIMD_MIN || smp_weights_form(1, logit, stride, n, max, temperature, out) != 0)
        weights_scalar(logit, stride, n, max, temperature, out);
}
