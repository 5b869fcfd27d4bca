/* Choosing the fast path's ISA level from the CPU's features, and the
 * per-type kernel lookup. The SIMD kernels live in files built with their
 * own target attributes (cpu_fast_avx2.c, cpu_fast_avx512.c,
 * cpu_fast_dotprod.c), so one binary runs on any x86-64 (or any aarch64)
 * and only calls what the CPU reports. */
#include "backend/cpu/cpu_fast.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"

#if defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif
#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

static const char *const isa_names[CPU_ISA_COUNT] = {"scalar", "avx2",    "avx512",
                                                     "neon",   "dotprod", "amx"};
#define ISA_LIST "scalar, avx2, avx512, neon, dotprod, amx"

int cpu_isa_parse(const char *s)
{
    for (int i = 0; i < CPU_ISA_COUNT; i++)
        if (!strcmp(s, isa_names[i]))
            return i;
    return -1;
}

#if defined(__x86_64__)
/* AMX-TILE and AMX-INT8 (CPUID leaf 7, EDX bits 24 and 25), the tile
 * state enabled by the OS (XCR0 bits 17 and 18), and Linux's leave for
 * this process to use it (arch_prctl ARCH_REQ_XCOMP_PERM for
 * XFEATURE_XTILEDATA, Linux 5.16 on): asked once, the answer kept. */
static int amx_ask(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
        return 0;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) /* OSXSAVE: xgetbv runs */
        return 0;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & (3u << 17)) != (3u << 17))
        return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
}

static int amx_granted(void)
{
    static int granted = -1;
    int g = __atomic_load_n(&granted, __ATOMIC_ACQUIRE);
    if (g < 0) {
        g = amx_ask();
        __atomic_store_n(&granted, g, __ATOMIC_RELEASE);
    }
    return g;
}
#endif

int cpu_isa_runs(cpu_isa isa)
{
    switch (isa) {
    case CPU_ISA_SCALAR: return 1;
#if defined(__x86_64__)
    case CPU_ISA_AVX2:
    case CPU_ISA_AVX512: {
        __builtin_cpu_init();
        int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                   __builtin_cpu_supports("f16c");
        if (isa == CPU_ISA_AVX2)
            return avx2;
        /* libgcc also checks that the OS saves the wide registers (XCR0). */
        return avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    }
    case CPU_ISA_AMX: return cpu_isa_runs(CPU_ISA_AVX512) && amx_granted();
#endif
#if defined(__aarch64__)
    case CPU_ISA_NEON: return 1; /* Advanced SIMD is part of every aarch64 CPU */
    case CPU_ISA_DOTPROD: return (getauxval(AT_HWCAP) & HWCAP_ASIMDDP) != 0;
#endif
    default: return 0;
    }
}

cpu_isa cpu_isa_best(void)
{
    static const cpu_isa order[] = {CPU_ISA_AMX, CPU_ISA_AVX512, CPU_ISA_AVX2, CPU_ISA_DOTPROD,
                                    CPU_ISA_NEON};
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++)
        if (cpu_isa_runs(order[i]))
            return order[i];
    return CPU_ISA_SCALAR;
}

const cpu_kernels *cpu_kernels_for(cpu_isa isa, memra_err *err)
{
    if ((int)isa < 0 || (int)isa >= CPU_ISA_COUNT) {
        memra_fail(err, "CPU ISA level %d is not one of " ISA_LIST, (int)isa);
        return NULL;
    }
    if (!cpu_isa_runs(isa)) {
        memra_fail(err, "CPU ISA level %s: this CPU runs at most %s", isa_names[isa],
                   isa_names[cpu_isa_best()]);
        return NULL;
    }
    switch (isa) {
#if defined(__x86_64__)
    case CPU_ISA_AMX: return &cpu_kernels_amx;
    case CPU_ISA_AVX512: return &cpu_kernels_avx512;
    case CPU_ISA_AVX2: return &cpu_kernels_avx2;
#endif
#if defined(__aarch64__)
    case CPU_ISA_DOTPROD: return &cpu_kernels_dotprod;
    case CPU_ISA_NEON: return &cpu_kernels_neon;
#endif
    default: return &cpu_kernels_scalar;
    }
}

const cpu_kernels *cpu_fast_kernels(void)
{
    cpu_isa best = cpu_isa_best();
    const char *env = getenv("MEMRA_CPU_ISA");
    if (env && *env) {
        int want = cpu_isa_parse(env);
        memra_err err;
        const cpu_kernels *k = want < 0 ? NULL : cpu_kernels_for((cpu_isa)want, &err);
        if (k)
            return k;
        log_warn("MEMRA_CPU_ISA=%s: %s; using %s", env,
                 want < 0 ? "not one of " ISA_LIST : err.msg, isa_names[best]);
    }
    memra_err unused;
    return cpu_kernels_for(best, &unused);
}

const cpu_kernel *cpu_kernel_for_type(const cpu_kernels *k, dtype t)
{
    switch (t) {
    case DT_F32: return &k->f32;
    case DT_F16: return &k->f16;
    case DT_BF16: return &k->bf16;
    case DT_Q8_0: return &k->q8_0;
    case DT_Q4_0: return &k->q4_0;
    case DT_Q4_K: return &k->q4_k;
    case DT_Q5_K: return &k->q5_k;
    case DT_Q6_K: return &k->q6_k;
    case DT_NVFP4: return &k->nvfp4;
    case DT_MXFP8: return &k->mxfp8;
    default: return NULL;
    }
}

const cpu_kernel *cpu_panel_kernel_for_type(const cpu_kernels *k, dtype t)
{
    const cpu_kernel *p = t == DT_Q8_0 ? &k->q8_0_p : t == DT_Q4_0 ? &k->q4_0_p
                        : t == DT_Q4_K ? &k->q4_k_p : t == DT_Q5_K ? &k->q5_k_p
                        : t == DT_Q6_K ? &k->q6_k_p : NULL;
    return p && p->one ? p : NULL;
}

int cpu_type_reads_q8(dtype t)
{
    return t == DT_Q8_0 || t == DT_Q4_0 || t == DT_Q4_K || t == DT_Q5_K || t == DT_Q6_K ||
           t == DT_NVFP4;
}

void cpu_quantize_x(const float *x, int64_t n, int8_t *q, float *d, int32_t *s)
{
    /* Adding and subtracting 1.5 * 2^23 rounds a float of magnitude below
     * 2^22 to the nearest integer, ties to even, in the default rounding
     * mode: no libm call, and the same bits wherever it runs. */
    const float magic = 12582912.0f;
    for (int64_t b = 0; b < n / CPU_QBLOCK; b++) {
        const float *xb = x + b * CPU_QBLOCK;
        float amax = 0.0f;
        for (int j = 0; j < CPU_QBLOCK; j++) {
            float a = xb[j] < 0 ? -xb[j] : xb[j];
            amax = a > amax || a != a ? a : amax;
        }
        if (!(amax <= FLT_MAX)) {
            /* A NaN or infinity: the block's products are NaN, as the
             * reference's would be (0 * NaN). */
            memset(q + b * CPU_QBLOCK, 0, CPU_QBLOCK);
            d[b] = NAN;
            s[b] = 0;
            continue;
        }
        float db = amax / 127.0f;
        float id = db > 0.0f ? 1.0f / db : 0.0f;
        int32_t sum = 0;
        for (int j = 0; j < CPU_QBLOCK; j++) {
            float r = (xb[j] * id + magic) - magic;
            int v = (int)r;
            v = v > 127 ? 127 : v < -127 ? -127 : v;
            q[b * CPU_QBLOCK + j] = (int8_t)v;
            sum += v;
        }
        d[b] = db;
        s[b] = sum;
    }
}
