#include <cuda_bf16.h>

#include "kernels/dev_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/norm.cuh"

// ---- kernels ----

namespace {

constexpr int NORM_MAX_THREADS = 1024;
constexpr int ROPE_WARPS = 8;

// Threads for a row of d: one group of four elements each, up to 1024 (a
// 4096-wide row in one step: the norm is one block per row, so its latency
// is the step's, not its bandwidth).
int norm_threads(int64_t d)
{
    const int64_t g = (d + 3) / 4;
    const int64_t t = (g + 31) / 32 * 32;
    return (int)(t < 32 ? 32 : t > NORM_MAX_THREADS ? NORM_MAX_THREADS : t);
}

// Group g (elements 4g .. 4g + 3, those below d) of a row.
template <bool VEC> DEV void load4(const float *p, int64_t g, int64_t d, float (&v)[4])
{
    if (VEC) {
        const float4 q = *reinterpret_cast<const float4 *>(p + 4 * g);
        v[0] = q.x;
        v[1] = q.y;
        v[2] = q.z;
        v[3] = q.w;
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++)
            v[j] = 4 * g + j < d ? p[4 * g + j] : 0.0f;
    }
}

template <bool VEC> DEV void store4(float *p, int64_t g, int64_t d, const float (&v)[4])
{
    if (VEC) {
        *reinterpret_cast<float4 *>(p + 4 * g) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (4 * g + j < d)
                p[4 * g + j] = v[j];
    }
}

// 16-byte access is possible for every row: d a multiple of 4 and the
// pointers aligned.
bool norm_vec(int64_t d, const void *a, const void *b, const void *c, const void *e)
{
    const uintptr_t m = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                        reinterpret_cast<uintptr_t>(c) | reinterpret_cast<uintptr_t>(e);
    return d % 4 == 0 && (m & 15u) == 0;
}


// RMSNorm of one row per block, as the CPU: inv = 1 / sqrt(sum(x^2) / d +
// eps); out = (x * inv) * (w + off). ADD: x += y first (the bytes
// launch_add gives), written back. Thread t takes the groups of four
// elements t, t + B, ... (B = blockDim, a function of d alone: norm_threads),
// read as one 16-byte vector when VEC, else one by one; the arithmetic is
// the same either way, so a row's result depends on d and its own values
// only. Each thread rewrites only the elements it read, after every read
// (block_sum's barriers), so x may be out. xb, when not null, takes out
// rounded to bf16 (round to nearest even, as the decode GEMM rounds x).
template <bool ADD, bool VEC>
__global__ void __launch_bounds__(NORM_MAX_THREADS)
rmsnorm_kernel(float *x, const float *y, int64_t d, const float *__restrict__ w, float off,
               float eps, float *out, __nv_bfloat16 *xb)
{
    __shared__ float red[32];
    pdl_trigger();
    pdl_wait();
    float *xr = x + (int64_t)blockIdx.x * d;
    const float *yr = ADD ? y + (int64_t)blockIdx.x * d : nullptr;
    float *o = out + (int64_t)blockIdx.x * d;
    const int64_t ng = (d + 3) / 4;
    float ss = 0.0f;
    for (int64_t g = threadIdx.x; g < ng; g += blockDim.x) {
        float v[4];
        load4<VEC>(xr, g, d, v);
        if (ADD) {
            float u[4];
            load4<VEC>(yr, g, d, u);
#pragma unroll
            for (int j = 0; j < 4; j++)
                v[j] = __fadd_rn(v[j], u[j]);
            store4<VEC>(xr, g, d, v);
        }
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (4 * g + j < d)
                ss = __fmaf_rn(v[j], v[j], ss);
    }
    ss = block_sum(ss, red);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), eps)));
    for (int64_t g = threadIdx.x; g < ng; g += blockDim.x) {
        float v[4], ww[4];
        load4<VEC>(xr, g, d, v);
        load4<VEC>(w, g, d, ww);
#pragma unroll
        for (int j = 0; j < 4; j++)
            v[j] = __fmul_rn(__fmul_rn(v[j], inv), __fadd_rn(ww[j], off));
        store4<VEC>(o, g, d, v);
        if (xb) {
            __nv_bfloat16 *ob = xb + (int64_t)blockIdx.x * d;
            if (VEC) {
                const __nv_bfloat162 r[2] = {__floats2bfloat162_rn(v[0], v[1]),
                                             __floats2bfloat162_rn(v[2], v[3])};
                *reinterpret_cast<uint2 *>(ob + 4 * g) = *reinterpret_cast<const uint2 *>(r);
            } else {
#pragma unroll
                for (int j = 0; j < 4; j++)
                    if (4 * g + j < d)
                        ob[4 * g + j] = __float2bfloat16_rn(v[j]);
            }
        }
    }
}

template <bool ADD>
void rmsnorm_launch(float *x, const float *y, int n, int64_t d, const float *w, float off,
                    float eps, float *out, void *xb, cudaStream_t s)
{
    __nv_bfloat16 *b = static_cast<__nv_bfloat16 *>(xb);
    if (norm_vec(d, x, y, w, out) && (reinterpret_cast<uintptr_t>(xb) & 7u) == 0)
        launch_pdl(rmsnorm_kernel<ADD, true>, dim3(n), dim3(norm_threads(d)), 0, s, x, y, d, w,
                   off, eps, out, b);
    else
        launch_pdl(rmsnorm_kernel<ADD, false>, dim3(n), dim3(norm_threads(d)), 0, s, x, y, d, w,
                   off, eps, out, b);
}

// A warp per (row, head): heads [0, n_heads) of q, then the k heads;
// ROPE_WARPS heads a block (1 when a head is wider than 1024, for the
// shared memory). The head is staged in the warp's shared slice; the
// norm's sum of squares is each lane's elements lane, lane + 32, ... in
// order, then the warp's butterfly: a head's result depends on its own
// values only. (One block per head made a 512-row prompt chunk 20,480
// blocks of one head each: 24 us a layer on the H200, mostly placing
// blocks.)
__global__ void __launch_bounds__(ROPE_WARPS * 32)
qk_norm_rope_kernel(float *q, float *k, const int32_t *__restrict__ pos, cu_qk_rope p)
{
    extern __shared__ float sh[]; // [warps][head_dim]
    pdl_trigger();
    pdl_wait();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int i = blockIdx.x, h = blockIdx.y * (blockDim.x >> 5) + warp, hd = p.head_dim;
    if (h >= p.n_heads + p.n_kv_heads)
        return;
    const bool is_q = h < p.n_heads;
    float *x = is_q ? q + ((int64_t)i * p.n_heads + h) * hd
                    : k + ((int64_t)i * p.n_kv_heads + (h - p.n_heads)) * hd;
    float *s = sh + (int64_t)warp * hd;
    const float *nw = is_q ? p.q_norm : p.k_norm;
    for (int e = lane; e < hd; e += 32)
        s[e] = x[e];
    __syncwarp();
    if (nw) {
        float ss = 0.0f;
        for (int e = lane; e < hd; e += 32)
            ss = __fmaf_rn(s[e], s[e], ss);
        ss = warp_sum(ss);
        const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)hd), p.eps)));
        for (int e = lane; e < hd; e += 32)
            s[e] = __fmul_rn(__fmul_rn(s[e], inv), __fadd_rn(nw[e], p.w_offset));
        __syncwarp();
    }
    const float fpos = (float)(pos[i] + p.pos_ahead);
    for (int f = lane; f < p.n_freqs; f += 32) {
        const float ang = __fmul_rn(p.inv_freq[f], fpos);
        const float co = __fmul_rn(cosf(ang), p.attn_factor);
        const float si = __fmul_rn(sinf(ang), p.attn_factor);
        const int a = p.pairing == 0 ? f : 2 * f;
        const int b = p.pairing == 0 ? f + p.n_freqs : 2 * f + 1;
        const float x1 = s[a], x2 = s[b];
        x[a] = __fsub_rn(__fmul_rn(x1, co), __fmul_rn(x2, si));
        x[b] = __fadd_rn(__fmul_rn(x2, co), __fmul_rn(x1, si));
    }
    // Elements past the rotated pairs keep their normed value.
    for (int e = 2 * p.n_freqs + lane; e < hd; e += 32)
        x[e] = s[e];
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_rmsnorm(const float *x, int n, int64_t d, const float *w,
                                      float w_offset, float eps, float *out, void *xb,
                                      cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    /* The kernel writes x back only when it adds: x is not changed here. */
    rmsnorm_launch<false>(const_cast<float *>(x), nullptr, n, d, w, w_offset, eps, out, xb,
                          stream);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_add_rmsnorm(float *x, const float *y, int n, int64_t d,
                                          const float *w, float w_offset, float eps, float *out,
                                          void *xb, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    rmsnorm_launch<true>(x, y, n, d, w, w_offset, eps, out, xb, stream);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_qk_norm_rope(float *q, float *k, const int32_t *pos, int n,
                                           const cu_qk_rope *p, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (2 * p->n_freqs > p->head_dim || p->head_dim > 12288 || n > 65535 ||
        p->n_heads + p->n_kv_heads > 65535)
        return cudaErrorInvalidValue;
    const int heads = p->n_heads + p->n_kv_heads, warps = p->head_dim > 1024 ? 1 : ROPE_WARPS;
    dim3 grid((unsigned)n, (unsigned)((heads + warps - 1) / warps));
    launch_pdl(qk_norm_rope_kernel, grid, dim3(32 * warps),
               (size_t)warps * (size_t)p->head_dim * sizeof(float), stream, q, k, pos, *p);
    return cudaGetLastError();
}
