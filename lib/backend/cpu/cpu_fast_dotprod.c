/* The fast path's dotprod level (Armv8.2's int8 dot product, sdot): the
 * kernels of cpu_fast_arm.h with the int8 products by vdotq_s32. Only
 * called when the kernel reports the feature (HWCAP_ASIMDDP, cpu_isa.c). */
#if defined(__aarch64__)
#pragma GCC target("arch=armv8.2-a+dotprod")

#define CPU_ARM_TABLE cpu_kernels_dotprod
#define CPU_ARM_ISA CPU_ISA_DOTPROD
#define CPU_ARM_NAME "dotprod"
#define CPU_ARM_DOT 1
#include "backend/cpu/cpu_fast_arm.h"
#else
typedef int cpu_fast_dotprod_unused;
#endif
