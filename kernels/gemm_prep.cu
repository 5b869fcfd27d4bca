#include <cuda_bf16.h>

#include "kernels/gemm_prep.cuh"
#include "kernels/weight_decode.cuh"

// ---- kernels ----

namespace {

constexpr int PREP_THREADS = 256;

DEV uint16_t to_bf16_bits(float v) { return __bfloat16_as_ushort(__float2bfloat16_rn(v)); }

__global__ void to_bf16_kernel(const float *__restrict__ x, int64_t cols, int64_t ld,
                               uint16_t *__restrict__ dst)
{
    const float *xr = x + (int64_t)blockIdx.x * cols;
    uint16_t *d = dst + (int64_t)blockIdx.x * ld;
    for (int64_t j = threadIdx.x; j < ld; j += blockDim.x)
        d[j] = j < cols ? to_bf16_bits(xr[j]) : (uint16_t)0;
}

// Block r: row r decoded into shared memory (threads take units in turn),
// then written out with 16-byte stores by consecutive threads, so the
// writes coalesce (a thread's own unit is up to 128 bytes: written
// directly, consecutive threads would touch addresses that far apart).
template <int F>
__global__ void dequant_bf16_kernel(const uint8_t *__restrict__ w, size_t stride, size_t soff,
                                    int64_t cols, int64_t ld, uint16_t *__restrict__ dst)
{
    constexpr int U = WFmt<F>::U;
    extern __shared__ uint16_t srow[]; // [ld], ld a multiple of 8
    const int64_t r = blockIdx.x;
    const uint8_t *row = w + r * (int64_t)stride;
    const int64_t nu = wfmt_units<F>(cols);
    for (int64_t u = threadIdx.x; u < nu; u += blockDim.x) {
        float v[U];
        WFmt<F>::load(row, soff, u, v);
#pragma unroll
        for (int j = 0; j < U; j++)
            if (u * U + j < cols)
                srow[u * U + j] = to_bf16_bits(v[j]);
    }
    for (int64_t j = cols + threadIdx.x; j < ld; j += blockDim.x)
        srow[j] = 0;
    __syncthreads();
    uint4 *d = reinterpret_cast<uint4 *>(dst + r * ld);
    const uint4 *sv = reinterpret_cast<const uint4 *>(srow);
    for (int64_t j = threadIdx.x; j < ld / 8; j += blockDim.x)
        d[j] = sv[j];
}

__global__ void add_bias_kernel(float *__restrict__ out, const float *__restrict__ bias,
                                int64_t rows)
{
    float *o = out + (int64_t)blockIdx.x * rows;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
        o[r] = __fadd_rn(o[r], bias[r]);
}

template <int F>
cudaError_t dequant_launch(const cu_matrix *w, int64_t ld, uint16_t *dst, cudaStream_t s)
{
    const size_t smem = (size_t)ld * sizeof(uint16_t);
    if (smem > 48 * 1024) {
        cudaError_t rc = cudaFuncSetAttribute(dequant_bf16_kernel<F>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem);
        if (rc != cudaSuccess)
            return rc;
    }
    dequant_bf16_kernel<F><<<(unsigned)w->rows, PREP_THREADS, smem, s>>>(
        static_cast<const uint8_t *>(w->data), w->stride, w->scale_off, w->cols, ld, dst);
    return cudaGetLastError();
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_to_bf16(const float *x, int n, int64_t cols, int64_t ld,
                                      uint16_t *dst, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (ld < cols)
        return cudaErrorInvalidValue;
    to_bf16_kernel<<<n, PREP_THREADS, 0, stream>>>(x, cols, ld, dst);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_dequant_bf16(const cu_matrix *w, int64_t ld, uint16_t *dst,
                                           cudaStream_t stream)
{
    if (w->rows <= 0)
        return cudaSuccess;
    /* ld: a multiple of 8 (16-byte rows), a row in shared memory. */
    if (ld < w->cols || ld % 8 != 0 || ld > 64 * 1024 || w->rows > INT32_MAX)
        return cudaErrorInvalidValue;
    switch (w->fmt) {
    case CW_F32: return dequant_launch<CW_F32>(w, ld, dst, stream);
    case CW_F16: return dequant_launch<CW_F16>(w, ld, dst, stream);
    case CW_BF16: return dequant_launch<CW_BF16>(w, ld, dst, stream);
    case CW_Q8_0: return dequant_launch<CW_Q8_0>(w, ld, dst, stream);
    case CW_Q4_0: return dequant_launch<CW_Q4_0>(w, ld, dst, stream);
    case CW_Q4_K: return dequant_launch<CW_Q4_K>(w, ld, dst, stream);
    case CW_Q5_K: return dequant_launch<CW_Q5_K>(w, ld, dst, stream);
    case CW_Q6_K: return dequant_launch<CW_Q6_K>(w, ld, dst, stream);
    default: return cudaErrorInvalidValue;
    }
}

extern "C" cudaError_t launch_add_bias(float *out, const float *bias, int n, int64_t rows,
                                       cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    add_bias_kernel<<<n, PREP_THREADS, 0, stream>>>(out, bias, rows);
    return cudaGetLastError();
}
