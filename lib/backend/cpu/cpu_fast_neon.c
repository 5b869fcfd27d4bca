/* The fast path's NEON level (Advanced SIMD, on every aarch64 CPU): the
 * kernels of cpu_fast_arm.h with the int8 products by smull + sadalp. */
#if defined(__aarch64__)
#define CPU_ARM_TABLE cpu_kernels_neon
#define CPU_ARM_ISA CPU_ISA_NEON
#define CPU_ARM_NAME "neon"
#define CPU_ARM_DOT 0
#include "backend/cpu/cpu_fast_arm.h"
#else
/* Nothing to build off aarch64; ISO C wants a declaration in every file. */
typedef int cpu_fast_neon_unused;
#endif
