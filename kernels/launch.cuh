/* Kernel launches that may overlap the previous kernel on the stream:
 * programmatic dependent launch (PDL, compute capability 9.0 and up).
 *
 * A decode step is a chain of several hundred kernels, most of them
 * short, each waiting for the one before. With PDL a kernel's blocks are
 * placed on the SMs while its predecessor is still running (once every
 * block of the predecessor has called pdl_trigger or exited) and run
 * their prologue (a mat-vec fetches its first weights, which depend on
 * nothing) until pdl_wait, which returns when the predecessor grid has
 * finished and its writes are visible. So the launch gap and the
 * weights' first round trip overlap the previous kernel's tail.
 *
 * The rule for a kernel launched through launch_pdl: every thread calls
 * pdl_wait before it reads anything an earlier kernel wrote or writes
 * anything an earlier kernel may still read. Before it, only loads of
 * data no kernel writes (weights). The order of everything a kernel
 * computes is unchanged, so results are the same bytes with PDL on or off.
 *
 * launch_set_pdl turns the attribute on or off for the process (the CUDA
 * backend: on when the device has compute capability >= 9.0; off wins
 * when devices disagree). Off, the
 * launches are plain stream-ordered ones. */
#ifndef MEMRA_KERNELS_LAUNCH_CUH
#define MEMRA_KERNELS_LAUNCH_CUH

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif

/* on = 1: later launch_pdl launches carry the PDL attribute; 0: they do
 * not. */
void launch_set_pdl(int on);
int launch_pdl_on(void);

#ifdef __cplusplus
}

#include <utility>

#define LAUNCH_DEV __device__ __forceinline__

// Wait for the previous grid on the stream to finish (a no-op when the
// kernel was not launched with PDL, and before sm_90).
LAUNCH_DEV void pdl_wait()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Let the next kernel's blocks be placed once every block of this grid
// has called it (or exited). It promises nothing about this grid's
// writes: the next kernel's pdl_wait waits for all of them.
LAUNCH_DEV void pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with the PDL attribute
// when launch_pdl_on(). Returns the launch's error.
template <class... P, class... A>
cudaError_t launch_pdl(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t stream, A &&...args)
{
#ifdef MEMRA_TESTS_EMU_CUDA_H
    // The CPU emulation runs each launch to its end in order: PDL changes
    // nothing there.
    emu::launch(kernel, grid, block, smem, stream)(std::forward<A>(args)...);
    return cudaGetLastError();
#else
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = launch_pdl_on() ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
#endif
}
#endif

#endif
