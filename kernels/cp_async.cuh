// Asynchronous copies from global to shared memory (cp.async, sm_80 and
// later), completing in groups: issue, cp_async_commit, then
// cp_async_wait<N> and a barrier before another thread reads the bytes.
// The CPU emulation copies at once, which the same waits and barriers
// then order.
#ifndef MEMRA_KERNELS_CP_ASYNC_CUH
#define MEMRA_KERNELS_CP_ASYNC_CUH

#include "kernels/dev_common.cuh"

// n (<= 16) bytes from global src to shared dst, the rest of dst's 16 zero.
DEV void cp_async16(void *dst, const void *src, int n)
{
#if defined(__CUDA_ARCH__)
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n)
                 : "memory");
#else
    const unsigned char *s = static_cast<const unsigned char *>(src);
    unsigned char *o = static_cast<unsigned char *>(dst);
    for (int i = 0; i < 16; i++)
        o[i] = i < n ? s[i] : 0;
#endif
}

// n (<= 8) bytes, 8-byte aligned.
DEV void cp_async8(void *dst, const void *src, int n)
{
#if defined(__CUDA_ARCH__)
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(d), "l"(src), "r"(n)
                 : "memory");
#else
    const unsigned char *s = static_cast<const unsigned char *>(src);
    unsigned char *o = static_cast<unsigned char *>(dst);
    for (int i = 0; i < 8; i++)
        o[i] = i < n ? s[i] : 0;
#endif
}

DEV void cp_async_commit()
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Wait until at most N of this thread's copy groups are still in flight.
template <int N> DEV void cp_async_wait()
{
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

#endif
