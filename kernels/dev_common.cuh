// Device helpers shared by the kernels (C++ only, never included by C).
//
// Determinism: every reduction here has a fixed shape (a lane's values in
// ascending order, then a butterfly over the warp, then the warps in
// order), and the arithmetic is spelled with the _rn intrinsics, which the
// compiler may not contract into FMAs or reorder. So a value depends only
// on its inputs and the block size, never on which launch, batch size or
// template instance computed it: the batch-invariance contract.
#ifndef MEMRA_KERNELS_DEV_COMMON_CUH
#define MEMRA_KERNELS_DEV_COMMON_CUH

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#define DEV __device__ __forceinline__

DEV float warp_sum(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

DEV float warp_max(float v)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
    return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024): each
// warp's butterfly, then warp 0 adds the warps' sums in warp order. Every
// thread gets the result. `red` is shared scratch of 32 floats; the call
// must be reached by every thread of the block.
DEV float block_sum(float v, float *red)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); // red may still be read by a previous call
    if (lane == 0)
        red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        float s = 0.0f;
        for (int w = 0; w < nw; w++)
            s = __fadd_rn(s, red[w]);
        if (lane == 0)
            red[0] = s;
    }
    __syncthreads();
    return red[0];
}

DEV float silu_f(float x) { return __fdiv_rn(x, __fadd_rn(1.0f, expf(-x))); }
DEV float sigmoid_f(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }
DEV float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// transformers' gelu_pytorch_tanh, in the CPU reference's order.
DEV float gelu_tanh_f(float x)
{
    const float k = 0.7978845608028654f;
    float x3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, x), x), x);
    float t = tanhf(__fmul_rn(k, __fadd_rn(x, x3)));
    return __fmul_rn(__fmul_rn(0.5f, x), __fadd_rn(1.0f, t));
}

DEV float f16_bits_to_f32(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}

DEV float bf16_bits_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

#endif
