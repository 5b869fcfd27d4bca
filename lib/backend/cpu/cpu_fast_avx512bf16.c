/* The fast path's AVX-512 level with AVX512_BF16: the avx512 level's
 * kernels, except that BF16 rows meet x rounded to bf16 and multiply by
 * vdpbf16ps (twice the products of an f32 FMA an instruction; x's
 * rounding is its bound, docs/decisions/0018-cpu-fast-path.md). Only
 * called when the CPU reports the feature (cpu_isa.c). */
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,avx512bf16")

#define CPU_X86_TABLE cpu_kernels_avx512bf16
#define CPU_X86_ISA CPU_ISA_AVX512BF16
#define CPU_X86_NAME "avx512bf16"
#define CPU_X86_512 1
#define CPU_X86_VNNI 1
#define CPU_X86_BF16 1
#include "backend/cpu/cpu_fast_x86.h"
#else
typedef int cpu_fast_avx512bf16_unused;
#endif
