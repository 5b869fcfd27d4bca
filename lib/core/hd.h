/* MEMRA_HD: a function compiled for both the host (C, and the CPU
 * emulation's C++) and the device (nvcc), for the few small helpers whose
 * results must be bit-identical on both sides: the KV cache's element
 * codecs (numerics/kv_codec.h), Philox (core/philox.h) and the sampler's
 * arithmetic (numerics/sample_math.h). Such helpers use only operations
 * whose IEEE results are fixed (+, -, *, / in one rounding, conversions,
 * integer ops): the host build never contracts (-std=c11 implies
 * -ffp-contract=off and x86-64 has no FMA by default) and device code
 * spells the float operations with the _rn intrinsics through the
 * HD_ADD-style macros below, which nvcc may not contract either. */
#ifndef MEMRA_CORE_HD_H
#define MEMRA_CORE_HD_H

#ifdef __CUDACC__
#define MEMRA_HD static __host__ __device__ __forceinline__
#else
#define MEMRA_HD static inline
#endif

/* Double and float arithmetic in one rounding each, never fused. */
#if defined(__CUDA_ARCH__)
#define HD_DADD(a, b) __dadd_rn((a), (b))
#define HD_DSUB(a, b) __dsub_rn((a), (b))
#define HD_DMUL(a, b) __dmul_rn((a), (b))
#define HD_DDIV(a, b) __ddiv_rn((a), (b))
#define HD_FMUL(a, b) __fmul_rn((a), (b))
#define HD_FDIV(a, b) __fdiv_rn((a), (b))
#define HD_FADD(a, b) __fadd_rn((a), (b))
#else
#define HD_DADD(a, b) ((a) + (b))
#define HD_DSUB(a, b) ((a) - (b))
#define HD_DMUL(a, b) ((a) * (b))
#define HD_DDIV(a, b) ((a) / (b))
#define HD_FMUL(a, b) ((a) * (b))
#define HD_FDIV(a, b) ((a) / (b))
#define HD_FADD(a, b) ((a) + (b))
#endif

#endif
