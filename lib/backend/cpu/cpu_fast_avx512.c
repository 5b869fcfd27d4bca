/* The fast path's AVX-512 level (F, BW, VL, VNNI, with AVX2, FMA, F16C):
 * the kernels of cpu_fast_x86.h with 512-bit F32/F16/BF16 rows and
 * vpdpbusd for the int8 products. Only called when the CPU (and the OS's
 * saved state) reports these features (cpu_isa.c). */
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")

#define CPU_X86_TABLE cpu_kernels_avx512
#define CPU_X86_ISA CPU_ISA_AVX512
#define CPU_X86_NAME "avx512"
#define CPU_X86_512 1
#define CPU_X86_VNNI 1
#include "backend/cpu/cpu_fast_x86.h"
#else
typedef int cpu_fast_avx512_unused;
#endif
