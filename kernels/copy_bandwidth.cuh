/* Launcher for the bandwidth probe: a device-to-device copy with 16-byte
 * loads and stores, the access pattern every decode mat-vec uses, so its
 * rate is the ceiling the benchmarks report against. */
#ifndef MEMRA_KERNELS_COPY_BANDWIDTH_CUH
#define MEMRA_KERNELS_COPY_BANDWIDTH_CUH

#include <cuda_runtime.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copy n16 16-byte vectors from src to dst (both 16-byte aligned). */
cudaError_t launch_copy_16b(const void *src, void *dst, size_t n16, int n_sms, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
