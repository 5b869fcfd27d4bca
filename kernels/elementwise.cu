#include "kernels/dev_common.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/launch.cuh"

// ---- kernels ----

namespace {

constexpr int EW_THREADS = 256;

__global__ void add_kernel(float *__restrict__ x, const float *__restrict__ y, size_t n)
{
    pdl_trigger();
    pdl_wait();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = __fadd_rn(x[i], y[i]);
}

// The CPU's tanhf(x / cap) * cap.
__global__ void softcap_kernel(float *__restrict__ x, size_t n, float cap)
{
    pdl_trigger();
    pdl_wait();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = __fmul_rn(tanhf(__fdiv_rn(x[i], cap)), cap);
}

template <int ACT>
__global__ void glu_kernel(float *__restrict__ g, const float *__restrict__ u, size_t n)
{
    pdl_trigger();
    pdl_wait();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const float a = ACT == 0 ? silu_f(g[i]) : gelu_tanh_f(g[i]);
        g[i] = __fmul_rn(a, u[i]);
    }
}

unsigned ew_blocks(size_t n)
{
    size_t b = (n + EW_THREADS - 1) / EW_THREADS;
    return (unsigned)(b > 65536 ? 65536 : b);
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_add(float *x, const float *y, size_t n, cudaStream_t stream)
{
    if (n == 0)
        return cudaSuccess;
    launch_pdl(add_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, x, y, n);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_softcap(float *x, size_t n, float cap, cudaStream_t stream)
{
    if (n == 0)
        return cudaSuccess;
    launch_pdl(softcap_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, x, n, cap);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_glu(float *gate, const float *up, size_t n, int act,
                                  cudaStream_t stream)
{
    if (n == 0)
        return cudaSuccess;
    if (act == 1)
        launch_pdl(glu_kernel<1>, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, gate, up, n);
    else
        launch_pdl(glu_kernel<0>, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, gate, up, n);
    return cudaGetLastError();
}
