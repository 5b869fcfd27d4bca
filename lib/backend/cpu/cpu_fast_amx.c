/* The fast path's amx level: the avx512 level's kernels (cpu_fast_x86.h,
 * the same code and bits) with AMX int8 tile kernels for the panel
 * formats' prompt products (cpu_fast_amx.h). Only called when the CPU
 * reports AMX-TILE and AMX-INT8 and the OS grants the tile state
 * (cpu_isa.c). */
#if defined(__x86_64__)
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni,amx-tile,amx-int8")

#define CPU_X86_TABLE cpu_kernels_amx
#define CPU_X86_ISA CPU_ISA_AMX
#define CPU_X86_NAME "amx"
#define CPU_X86_512 1
#define CPU_X86_VNNI 1
#define CPU_X86_AMX 1
#include "backend/cpu/cpu_fast_x86.h"
#else
typedef int cpu_fast_amx_unused;
#endif
