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

// The same for rows whose floats and bf16s are 16- and 8-byte aligned
// (cols a multiple of 4): four values per thread, one 16-byte load and one
// 8-byte store, over all rows at once. (The scalar kernel ran at about
// 1 TB/s on a 512 x 4,096 chunk on the H200: 11.8 us, six times a layer.)
__global__ void to_bf16_vec4_kernel(const float4 *__restrict__ x, int64_t q_cols, int64_t q_ld,
                                    int64_t n_quads, uint2 *__restrict__ dst)
{
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < n_quads;
         g += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = g / q_ld, c = g - r * q_ld;
        uint2 q = {0, 0};
        if (c < q_cols) {
            const float4 v = x[r * q_cols + c];
            q.x = to_bf16_bits(v.x) | ((uint32_t)to_bf16_bits(v.y) << 16);
            q.y = to_bf16_bits(v.z) | ((uint32_t)to_bf16_bits(v.w) << 16);
        }
        dst[g] = q;
    }
}

// dst = bf16(act(g) * u), four values a thread as to_bf16_vec4_kernel:
// launch_glu then launch_to_bf16 in one pass, the same floats rounded the
// same way. (Apart, a 512 x 12,288 FFN chunk took 29.7 + 10.7 us a layer
// on the H200: the f32 product written and read back.)
template <int ACT>
__global__ void glu_to_bf16_kernel(const float4 *__restrict__ g, const float4 *__restrict__ u,
                                   int64_t q_cols, int64_t q_ld, int64_t n_quads,
                                   uint2 *__restrict__ dst)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_quads;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / q_ld, c = i - r * q_ld;
        uint2 q = {0, 0};
        if (c < q_cols) {
            const float4 a = g[r * q_cols + c], b = u[r * q_cols + c];
            const float v[4] = {a.x, b.x, a.y, b.y};
            const float w[4] = {a.z, b.z, a.w, b.w};
            float o[4];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                o[j] = __fmul_rn(ACT == 0 ? silu_f(v[2 * j]) : gelu_tanh_f(v[2 * j]), v[2 * j + 1]);
                o[2 + j] =
                    __fmul_rn(ACT == 0 ? silu_f(w[2 * j]) : gelu_tanh_f(w[2 * j]), w[2 * j + 1]);
            }
            q.x = to_bf16_bits(o[0]) | ((uint32_t)to_bf16_bits(o[1]) << 16);
            q.y = to_bf16_bits(o[2]) | ((uint32_t)to_bf16_bits(o[3]) << 16);
        }
        dst[i] = q;
    }
}

// Eight (or four, for f32's 4-element units) bf16 values as one store.
template <int N> struct Bf16Store;
template <> struct Bf16Store<8> {
    DEV static void put(uint16_t *d, const float *v)
    {
        uint4 q;
        q.x = to_bf16_bits(v[0]) | ((uint32_t)to_bf16_bits(v[1]) << 16);
        q.y = to_bf16_bits(v[2]) | ((uint32_t)to_bf16_bits(v[3]) << 16);
        q.z = to_bf16_bits(v[4]) | ((uint32_t)to_bf16_bits(v[5]) << 16);
        q.w = to_bf16_bits(v[6]) | ((uint32_t)to_bf16_bits(v[7]) << 16);
        *reinterpret_cast<uint4 *>(d) = q;
    }
};
template <> struct Bf16Store<4> {
    DEV static void put(uint16_t *d, const float *v)
    {
        uint2 q;
        q.x = to_bf16_bits(v[0]) | ((uint32_t)to_bf16_bits(v[1]) << 16);
        q.y = to_bf16_bits(v[2]) | ((uint32_t)to_bf16_bits(v[3]) << 16);
        *reinterpret_cast<uint2 *>(d) = q;
    }
};

// Thread g: unit g of the whole matrix (row-major over rows x units per
// output row, padding units included), decoded into registers and written
// with 16-byte stores. Consecutive threads take consecutive units, so the
// weight reads coalesce and every block is full whatever the row length.
// (The first version decoded a row per block through shared memory: a
// 64-element unit per thread put 32 lanes on one bank, and a 4,096-column
// Q4_K row kept 64 of 256 threads busy; 317 us for a 12,288 x 4,096 matrix
// on the H200.)
template <int F>
__global__ void dequant_bf16_kernel(const uint8_t *__restrict__ w, size_t stride, size_t soff,
                                    int64_t rows, int64_t cols, int64_t ld,
                                    uint16_t *__restrict__ dst)
{
    constexpr int U = WFmt<F>::U;
    constexpr int S = U % 8 == 0 ? 8 : 4; // values per store
    const int64_t nu = (ld + U - 1) / U;  // units per output row
    const int64_t total = rows * nu;
    for (int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; g < total;
         g += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = g / nu, u = g - r * nu, c0 = u * U;
        uint16_t *d = dst + r * ld + c0;
        float v[U];
        if (c0 < cols)
            WFmt<F>::load(w + r * (int64_t)stride, soff, u, v);
        if (c0 + U <= cols && c0 + U <= ld) {
#pragma unroll
            for (int j = 0; j < U; j += S)
                Bf16Store<S>::put(d + j, v + j);
        } else {
#pragma unroll
            for (int j = 0; j < U; j++)
                if (c0 + j < ld)
                    d[j] = c0 + j < cols ? to_bf16_bits(v[j]) : (uint16_t)0;
        }
    }
}

// Thread i of a block: unit base + i of the whole matrix (row-major over
// rows x units per output row, padding units included), decoded by
// WFmt<F>::load (bit-identical to the CPU) and rounded to bf16 into shared
// memory; then the block writes its units' bf16 back out with each lane
// storing the next 16 bytes, so a warp's store is 512 contiguous bytes.
// The unit-per-thread kernel above stores straight from registers at a
// lane stride of U * 2 bytes: for Q4_K 32 partial lines per store, about
// 1.3 TB/s on the H200; it stays for the float formats only. A unit's
// 16-byte granule c sits at slot (c + i) % G of the thread's G slots, so
// the eight lanes of a quarter warp touch eight different bank groups in
// both phases. The registers are bounded for three blocks an SM (Q4_K:
// 80, a few bytes spilled; unbounded it took 128, two blocks an SM, and
// ran 99.9 against 60.9 us on a 12,288 x 4,096 matrix; decision 0010).
template <int F>
__global__ void __launch_bounds__(PREP_THREADS, 3)
dequant_staged_kernel(const uint8_t *__restrict__ w, size_t stride, size_t soff, int64_t rows,
                      int64_t cols, int64_t ld, uint16_t *__restrict__ dst)
{
    constexpr int U = WFmt<F>::U, G = U / 8; // 16-byte granules a unit
    static_assert(U % 8 == 0, "whole granules");
    __shared__ uint4 buf[PREP_THREADS * G];
    const int64_t nu = (ld + U - 1) / U; // units per output row
    const int64_t total = rows * nu;
    const int tid = threadIdx.x;
    for (int64_t base = (int64_t)blockIdx.x * PREP_THREADS; base < total;
         base += (int64_t)gridDim.x * PREP_THREADS) {
        const int64_t g = base + tid;
        if (g < total) {
            const int64_t r = g / nu, u = g - r * nu, c0 = u * U;
            float v[U];
            if (c0 < cols)
                WFmt<F>::load(w + r * (int64_t)stride, soff, u, v);
#pragma unroll
            for (int c = 0; c < G; c++) {
                float e[8];
#pragma unroll
                for (int j = 0; j < 8; j++)
                    e[j] = c0 + c * 8 + j < cols ? v[c * 8 + j] : 0.0f;
                uint4 q;
                q.x = to_bf16_bits(e[0]) | ((uint32_t)to_bf16_bits(e[1]) << 16);
                q.y = to_bf16_bits(e[2]) | ((uint32_t)to_bf16_bits(e[3]) << 16);
                q.z = to_bf16_bits(e[4]) | ((uint32_t)to_bf16_bits(e[5]) << 16);
                q.w = to_bf16_bits(e[6]) | ((uint32_t)to_bf16_bits(e[7]) << 16);
                buf[tid * G + (c + tid) % G] = q;
            }
        }
        __syncthreads();
        // Granule k of the block's units: unit k / G, granule c = k % G.
#pragma unroll
        for (int k = tid; k < PREP_THREADS * G; k += PREP_THREADS) {
            const int i = k / G, c = k % G;
            const int64_t gi = base + i;
            if (gi < total) {
                const int64_t r = gi / nu, c0 = (gi - r * nu) * U + c * 8;
                if (c0 < ld) /* a granule past the padded row is not written */
                    *reinterpret_cast<uint4 *>(dst + r * ld + c0) = buf[i * G + (c + i) % G];
            }
        }
        __syncthreads();
    }
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
    constexpr int U = WFmt<F>::U;
    const int64_t total = w->rows * ((ld + U - 1) / U);
    const int64_t blocks = (total + PREP_THREADS - 1) / PREP_THREADS;
    dequant_bf16_kernel<F><<<(unsigned)(blocks < (1 << 20) ? blocks : (1 << 20)), PREP_THREADS, 0, s>>>(
        static_cast<const uint8_t *>(w->data), w->stride, w->scale_off, w->rows, w->cols, ld, dst);
    return cudaGetLastError();
}

template <int F>
cudaError_t dequant_staged_launch(const cu_matrix *w, int64_t ld, uint16_t *dst, cudaStream_t s)
{
    constexpr int U = WFmt<F>::U;
    const int64_t total = w->rows * ((ld + U - 1) / U);
    const int64_t blocks = (total + PREP_THREADS - 1) / PREP_THREADS;
    const unsigned grid = (unsigned)(blocks < (1 << 20) ? blocks : (1 << 20));
    const uint8_t *data = static_cast<const uint8_t *>(w->data);
    dequant_staged_kernel<F><<<grid, PREP_THREADS, 0, s>>>(data, w->stride, w->scale_off, w->rows,
                                                          w->cols, ld, dst);
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
    if (cols % 4 == 0 && ld % 4 == 0 && ((uintptr_t)x & 15) == 0 && ((uintptr_t)dst & 7) == 0) {
        const int64_t n_quads = (int64_t)n * (ld / 4);
        int64_t blocks = (n_quads + PREP_THREADS - 1) / PREP_THREADS;
        if (blocks > (1 << 20))
            blocks = 1 << 20;
        to_bf16_vec4_kernel<<<(unsigned)blocks, PREP_THREADS, 0, stream>>>(
            reinterpret_cast<const float4 *>(x), cols / 4, ld / 4, n_quads,
            reinterpret_cast<uint2 *>(dst));
        return cudaGetLastError();
    }
    to_bf16_kernel<<<n, PREP_THREADS, 0, stream>>>(x, cols, ld, dst);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_glu_to_bf16(const float *gate, const float *up, int n,
                                          int64_t cols, int64_t ld, int act, uint16_t *dst,
                                          cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (ld < cols || !glu_to_bf16_fits(gate, up, cols, ld, dst))
        return cudaErrorInvalidValue;
    const int64_t n_quads = (int64_t)n * (ld / 4);
    int64_t blocks = (n_quads + PREP_THREADS - 1) / PREP_THREADS;
    if (blocks > (1 << 20))
        blocks = 1 << 20;
    const float4 *g4 = reinterpret_cast<const float4 *>(gate);
    const float4 *u4 = reinterpret_cast<const float4 *>(up);
    uint2 *d2 = reinterpret_cast<uint2 *>(dst);
    if (act == 1)
        glu_to_bf16_kernel<1><<<(unsigned)blocks, PREP_THREADS, 0, stream>>>(g4, u4, cols / 4, ld / 4,
                                                                            n_quads, d2);
    else
        glu_to_bf16_kernel<0><<<(unsigned)blocks, PREP_THREADS, 0, stream>>>(g4, u4, cols / 4, ld / 4,
                                                                            n_quads, d2);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_dequant_bf16(const cu_matrix *w, int64_t ld, uint16_t *dst,
                                           cudaStream_t stream)
{
    if (w->rows <= 0)
        return cudaSuccess;
    /* ld: a multiple of 8 (rows start 16-byte aligned). */
    if (ld < w->cols || ld % 8 != 0 || w->rows > INT32_MAX)
        return cudaErrorInvalidValue;
    switch (w->fmt) {
    case CW_Q8_0: return dequant_staged_launch<CW_Q8_0>(w, ld, dst, stream);
    case CW_Q4_0: return dequant_staged_launch<CW_Q4_0>(w, ld, dst, stream);
    case CW_Q4_K: return dequant_staged_launch<CW_Q4_K>(w, ld, dst, stream);
    case CW_Q5_K: return dequant_staged_launch<CW_Q5_K>(w, ld, dst, stream);
    case CW_Q6_K: return dequant_staged_launch<CW_Q6_K>(w, ld, dst, stream);
    case CW_NVFP4: return dequant_staged_launch<CW_NVFP4>(w, ld, dst, stream);
    case CW_MXFP8: return dequant_staged_launch<CW_MXFP8>(w, ld, dst, stream);
    case CW_F32: return dequant_launch<CW_F32>(w, ld, dst, stream);
    case CW_F16: return dequant_launch<CW_F16>(w, ld, dst, stream);
    case CW_BF16: return dequant_launch<CW_BF16>(w, ld, dst, stream);
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
