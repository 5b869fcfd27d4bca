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

// The CPU's x[i] *= s.
__global__ void scale_kernel(float *__restrict__ x, size_t n, float s)
{
    pdl_trigger();
    pdl_wait();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        x[i] = __fmul_rn(x[i], s);
}

// x [n][cols] = act(x) * y, y's rows y_stride apart (the GLU's arithmetic).
template <int ACT>
__global__ void act_mul_kernel(float *__restrict__ x, const float *__restrict__ y, size_t n,
                               int64_t cols, int64_t y_stride)
{
    pdl_trigger();
    pdl_wait();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t row = i / (size_t)cols, col = i % (size_t)cols;
        const float a = ACT == 0 ? silu_f(x[i]) : gelu_tanh_f(x[i]);
        x[i] = __fmul_rn(a, y[row * (size_t)y_stride + col]);
    }
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

// The CPU's x * (1 / (1 + e^-g)).
__global__ void mul_sigmoid_kernel(float *__restrict__ x, const float *__restrict__ g, size_t n,
                                   int64_t x_cols, int64_t g_cols)
{
    pdl_trigger();
    pdl_wait();
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t row = i / (size_t)x_cols, col = i % (size_t)x_cols;
        const float gv = g[row * (size_t)g_cols + (g_cols == 1 ? 0 : col)];
        x[i] = __fmul_rn(x[i], __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-gv))));
    }
}

__global__ void split_heads_kernel(const float *__restrict__ x, size_t n, int a_dim, int b_dim,
                                   float *__restrict__ a, float *__restrict__ b)
{
    pdl_trigger();
    pdl_wait();
    const size_t w = (size_t)a_dim + (size_t)b_dim;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    // i runs over (row, head) pairs times w values
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t rh = i / w, e = i % w;
        if (e < (size_t)a_dim)
            a[rh * (size_t)a_dim + e] = x[i];
        else
            b[rh * (size_t)b_dim + (e - (size_t)a_dim)] = x[i];
    }
}

__global__ void join_heads_kernel(const float *__restrict__ a, const float *__restrict__ b,
                                  size_t n, int a_dim, int b_dim, float *__restrict__ x)
{
    pdl_trigger();
    pdl_wait();
    const size_t w = (size_t)a_dim + (size_t)b_dim;
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        const size_t rh = i / w, e = i % w;
        x[i] = e < (size_t)a_dim ? a[rh * (size_t)a_dim + e]
                                 : b[rh * (size_t)b_dim + (e - (size_t)a_dim)];
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

extern "C" cudaError_t launch_scale(float *x, size_t n, float s, cudaStream_t stream)
{
    if (n == 0)
        return cudaSuccess;
    launch_pdl(scale_kernel, dim3(ew_blocks(n)), dim3(EW_THREADS), 0, stream, x, n, s);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_act_mul(float *x, const float *y, int n, int64_t cols,
                                      int64_t y_stride, int act, cudaStream_t stream)
{
    const size_t total = (size_t)n * (size_t)cols;
    if (total == 0)
        return cudaSuccess;
    if (act == 1)
        launch_pdl(act_mul_kernel<1>, dim3(ew_blocks(total)), dim3(EW_THREADS), 0, stream, x, y,
                   total, cols, y_stride);
    else
        launch_pdl(act_mul_kernel<0>, dim3(ew_blocks(total)), dim3(EW_THREADS), 0, stream, x, y,
                   total, cols, y_stride);
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

extern "C" cudaError_t launch_mul_sigmoid(float *x, const float *g, int n, int64_t x_cols,
                                          int64_t g_cols, cudaStream_t stream)
{
    const size_t total = (size_t)n * (size_t)x_cols;
    if (total == 0)
        return cudaSuccess;
    launch_pdl(mul_sigmoid_kernel, dim3(ew_blocks(total)), dim3(EW_THREADS), 0, stream, x, g,
               total, x_cols, g_cols);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_join_heads(const float *a, const float *b, int n, int n_heads,
                                         int a_dim, int b_dim, float *x, cudaStream_t stream)
{
    const size_t total = (size_t)n * (size_t)n_heads * ((size_t)a_dim + (size_t)b_dim);
    if (total == 0)
        return cudaSuccess;
    launch_pdl(join_heads_kernel, dim3(ew_blocks(total)), dim3(EW_THREADS), 0, stream, a, b,
               total, a_dim, b_dim, x);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_split_heads(const float *x, int n, int n_heads, int a_dim,
                                          int b_dim, float *a, float *b, cudaStream_t stream)
{
    const size_t total = (size_t)n * (size_t)n_heads * ((size_t)a_dim + (size_t)b_dim);
    if (total == 0)
        return cudaSuccess;
    launch_pdl(split_heads_kernel, dim3(ew_blocks(total)), dim3(EW_THREADS), 0, stream, x,
               total, a_dim, b_dim, a, b);
    return cudaGetLastError();
}
