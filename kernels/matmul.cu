#include "kernels/matmul.cuh"
#include "kernels/weight_decode.cuh"

// ---- kernels ----

namespace {

constexpr int MM_WARPS = 4;  // output rows per block, one warp each
constexpr int MM_TOKENS = 8; // input rows a block takes together when n > 1

// acc[t] += v . x_t[0..U) for the first nt of T input rows ldx floats apart.
// AX: x is 16-byte aligned (read as float4); the arithmetic is the same.
template <int U, int T, bool AX>
DEV void unit_dot(const float (&v)[U], const float *x, int64_t ldx, int nt, float (&acc)[T])
{
#pragma unroll
    for (int t = 0; t < T; t++) {
        if (t >= nt)
            break;
        const float *xr = x + t * ldx;
        if (AX) {
#pragma unroll
            for (int j = 0; j < U; j += 4) {
                const float4 xv = __ldg(reinterpret_cast<const float4 *>(xr + j));
                acc[t] = __fmaf_rn(v[j], xv.x, acc[t]);
                acc[t] = __fmaf_rn(v[j + 1], xv.y, acc[t]);
                acc[t] = __fmaf_rn(v[j + 2], xv.z, acc[t]);
                acc[t] = __fmaf_rn(v[j + 3], xv.w, acc[t]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < U; j++)
                acc[t] = __fmaf_rn(v[j], __ldg(xr + j), acc[t]);
        }
    }
}

// The last, partial unit of a float-format row: its first `valid` values.
template <int U, int T>
DEV void unit_dot_tail(const float (&v)[U], const float *x, int64_t ldx, int nt, int valid,
                       float (&acc)[T])
{
#pragma unroll
    for (int t = 0; t < T; t++) {
        if (t >= nt)
            break;
#pragma unroll
        for (int j = 0; j < U; j++)
            if (j < valid)
                acc[t] = __fmaf_rn(v[j], __ldg(x + t * ldx + j), acc[t]);
    }
}

// The warp's dot products of one weight row with nt input rows: lane l
// takes units l, l + 32, ... in ascending order, then the butterfly. Every
// lane ends with the sums.
template <int F, int T, bool AX>
DEV void row_dot(const uint8_t *wr, size_t soff, int64_t cols, const float *x, int64_t ldx, int nt,
                 float (&acc)[T])
{
    constexpr int U = WFmt<F>::U;
    const int lane = threadIdx.x & 31;
    const int64_t nu = wfmt_units<F>(cols);
#pragma unroll
    for (int t = 0; t < T; t++)
        acc[t] = 0.0f;
    for (int64_t u = lane; u < nu; u += 32) {
        float v[U];
        WFmt<F>::load(wr, soff, u, v);
        const int64_t c0 = u * U;
        if (c0 + U <= cols)
            unit_dot<U, T, AX>(v, x + c0, ldx, nt, acc);
        else
            unit_dot_tail<U, T>(v, x + c0, ldx, nt, (int)(cols - c0), acc);
    }
#pragma unroll
    for (int t = 0; t < T; t++)
        acc[t] = warp_sum(acc[t]);
}

template <int F, int T, bool AX>
__global__ void __launch_bounds__(MM_WARPS * 32)
matmul_kernel(const uint8_t *__restrict__ w, size_t stride, size_t soff, int64_t rows,
              int64_t cols, const float *__restrict__ x, int n, const float *__restrict__ bias,
              float *__restrict__ out)
{
    const int64_t r = (int64_t)blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    const int t0 = blockIdx.y * T;
    if (r >= rows)
        return; // the whole warp: no block-wide barrier follows
    const int nt = min(T, n - t0);
    float acc[T];
    row_dot<F, T, AX>(w + r * (int64_t)stride, soff, cols, x + (int64_t)t0 * cols, cols, nt, acc);
    if ((threadIdx.x & 31) == 0) {
#pragma unroll
        for (int t = 0; t < T; t++) {
            if (t >= nt)
                break;
            out[(int64_t)(t0 + t) * rows + r] = bias ? __fadd_rn(acc[t], bias[r]) : acc[t];
        }
    }
}

template <int F, bool AX>
__global__ void __launch_bounds__(MM_WARPS * 32)
matmul_grouped_kernel(const uint8_t *const *__restrict__ experts, const int32_t *__restrict__ ids,
                      int in_div, size_t stride, size_t soff, int64_t rows, int64_t cols,
                      const float *__restrict__ x, float *__restrict__ out)
{
    const int64_t r = (int64_t)blockIdx.x * MM_WARPS + (threadIdx.x >> 5);
    const int p = blockIdx.y;
    if (r >= rows)
        return;
    const uint8_t *w = experts[ids[p]];
    float acc[1];
    row_dot<F, 1, AX>(w + r * (int64_t)stride, soff, cols, x + (int64_t)(p / in_div) * cols, cols,
                      1, acc);
    if ((threadIdx.x & 31) == 0)
        out[(int64_t)p * rows + r] = acc[0];
}

template <int F, int T>
void mm_launch(const cu_matrix *w, const float *bias, const float *x, int n, float *out, bool ax,
               cudaStream_t s)
{
    dim3 grid((unsigned)((w->rows + MM_WARPS - 1) / MM_WARPS), (unsigned)((n + T - 1) / T));
    const uint8_t *d = static_cast<const uint8_t *>(w->data);
    if (ax)
        matmul_kernel<F, T, true><<<grid, MM_WARPS * 32, 0, s>>>(d, w->stride, w->scale_off, w->rows,
                                                                 w->cols, x, n, bias, out);
    else
        matmul_kernel<F, T, false><<<grid, MM_WARPS * 32, 0, s>>>(d, w->stride, w->scale_off,
                                                                  w->rows, w->cols, x, n, bias, out);
}

template <int F>
void mm_dispatch_t(const cu_matrix *w, const float *bias, const float *x, int n, float *out, bool ax,
                   cudaStream_t s)
{
    if (n == 1)
        mm_launch<F, 1>(w, bias, x, n, out, ax, s);
    else
        mm_launch<F, MM_TOKENS>(w, bias, x, n, out, ax, s);
}

template <int F>
void mm_grouped(const cu_matrix *w, const void *const *experts, const int32_t *ids, int in_div,
                const float *x, int n_pairs, float *out, bool ax, cudaStream_t s)
{
    dim3 grid((unsigned)((w->rows + MM_WARPS - 1) / MM_WARPS), (unsigned)n_pairs);
    const uint8_t *const *e = reinterpret_cast<const uint8_t *const *>(experts);
    if (ax)
        matmul_grouped_kernel<F, true><<<grid, MM_WARPS * 32, 0, s>>>(
            e, ids, in_div, w->stride, w->scale_off, w->rows, w->cols, x, out);
    else
        matmul_grouped_kernel<F, false><<<grid, MM_WARPS * 32, 0, s>>>(
            e, ids, in_div, w->stride, w->scale_off, w->rows, w->cols, x, out);
}

bool x_aligned(const float *x, int64_t cols)
{
    return cols % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_matmul(const cu_matrix *w, const float *bias, const float *x, int n,
                                     float *out, cudaStream_t stream)
{
    if (n <= 0 || w->rows <= 0)
        return cudaSuccess;
    if ((n + MM_TOKENS - 1) / MM_TOKENS > 65535 || (w->rows + MM_WARPS - 1) / MM_WARPS > INT32_MAX)
        return cudaErrorInvalidValue;
    const bool ax = x_aligned(x, w->cols);
    switch (w->fmt) {
    case CW_F32: mm_dispatch_t<CW_F32>(w, bias, x, n, out, ax, stream); break;
    case CW_F16: mm_dispatch_t<CW_F16>(w, bias, x, n, out, ax, stream); break;
    case CW_BF16: mm_dispatch_t<CW_BF16>(w, bias, x, n, out, ax, stream); break;
    case CW_Q8_0: mm_dispatch_t<CW_Q8_0>(w, bias, x, n, out, ax, stream); break;
    case CW_Q4_0: mm_dispatch_t<CW_Q4_0>(w, bias, x, n, out, ax, stream); break;
    case CW_Q4_K: mm_dispatch_t<CW_Q4_K>(w, bias, x, n, out, ax, stream); break;
    case CW_Q5_K: mm_dispatch_t<CW_Q5_K>(w, bias, x, n, out, ax, stream); break;
    case CW_Q6_K: mm_dispatch_t<CW_Q6_K>(w, bias, x, n, out, ax, stream); break;
    case CW_NVFP4: mm_dispatch_t<CW_NVFP4>(w, bias, x, n, out, ax, stream); break;
    case CW_MXFP8: mm_dispatch_t<CW_MXFP8>(w, bias, x, n, out, ax, stream); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t launch_matmul_grouped(const cu_matrix *w, const void *const *experts,
                                             const int32_t *ids, int in_div, const float *x,
                                             int n_pairs, float *out, cudaStream_t stream)
{
    if (n_pairs <= 0 || w->rows <= 0)
        return cudaSuccess;
    if (n_pairs > 65535 || in_div <= 0 || (w->rows + MM_WARPS - 1) / MM_WARPS > INT32_MAX)
        return cudaErrorInvalidValue;
    const bool ax = x_aligned(x, w->cols);
    switch (w->fmt) {
    case CW_F32: mm_grouped<CW_F32>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_F16: mm_grouped<CW_F16>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_BF16: mm_grouped<CW_BF16>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_Q8_0: mm_grouped<CW_Q8_0>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_Q4_0: mm_grouped<CW_Q4_0>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_Q4_K: mm_grouped<CW_Q4_K>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_Q5_K: mm_grouped<CW_Q5_K>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_Q6_K: mm_grouped<CW_Q6_K>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_NVFP4: mm_grouped<CW_NVFP4>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_MXFP8: mm_grouped<CW_MXFP8>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
