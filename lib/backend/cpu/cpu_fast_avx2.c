/* The fast path's AVX2 level (AVX2 + FMA + F16C): the kernels of
 * cpu_fast_x86.h built for it. Only called when the CPU reports these
 * features (cpu_isa.c); the rest of the binary stays baseline x86-64. */
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c")

#define CPU_X86_TABLE cpu_kernels_avx2
#define CPU_X86_ISA CPU_ISA_AVX2
#define CPU_X86_NAME "avx2"
#define CPU_X86_512 0
#define CPU_X86_VNNI 0
#include "backend/cpu/cpu_fast_x86.h"
#else
/* Nothing to build off x86-64; ISO C wants a declaration in every file. */
typedef int cpu_fast_avx2_unused;
#endif
