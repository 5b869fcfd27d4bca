#include "kernels/dev_common.cuh"
#include "kernels/norm.cuh"

// ---- kernels ----

namespace {

constexpr int NORM_THREADS = 256;
constexpr int ROPE_THREADS = 128;

// As the CPU: inv = 1 / sqrt(sum(x^2) / d + eps); out = (x * inv) * (w + off).
__global__ void __launch_bounds__(NORM_THREADS)
rmsnorm_kernel(const float *x, int64_t d, const float *__restrict__ w, float off, float eps,
               float *out)
{
    __shared__ float red[32];
    const float *xr = x + (int64_t)blockIdx.x * d;
    float *o = out + (int64_t)blockIdx.x * d;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
        ss = __fmaf_rn(xr[j], xr[j], ss);
    ss = block_sum(ss, red);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), eps)));
    // Each thread rewrites only the elements it read, after every read
    // above (block_sum's barriers), so x may be out.
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
        o[j] = __fmul_rn(__fmul_rn(xr[j], inv), __fadd_rn(w[j], off));
}

// x += y, then the RMSNorm of the sum: the bytes launch_add then
// launch_rmsnorm give (the same _rn sum, then rmsnorm_kernel's arithmetic),
// in one launch. Each thread reads, adds and later rereads only its own
// elements.
__global__ void __launch_bounds__(NORM_THREADS)
add_rmsnorm_kernel(float *x, const float *__restrict__ y, int64_t d, const float *__restrict__ w,
                   float off, float eps, float *out)
{
    __shared__ float red[32];
    float *xr = x + (int64_t)blockIdx.x * d;
    const float *yr = y + (int64_t)blockIdx.x * d;
    float *o = out + (int64_t)blockIdx.x * d;
    float ss = 0.0f;
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) {
        const float v = __fadd_rn(xr[j], yr[j]);
        xr[j] = v;
        ss = __fmaf_rn(v, v, ss);
    }
    ss = block_sum(ss, red);
    const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)d), eps)));
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x)
        o[j] = __fmul_rn(__fmul_rn(xr[j], inv), __fadd_rn(w[j], off));
}

// One block per (row, head): heads [0, n_heads) of q, then the k heads.
__global__ void __launch_bounds__(ROPE_THREADS)
qk_norm_rope_kernel(float *q, float *k, const int32_t *__restrict__ pos, cu_qk_rope p)
{
    extern __shared__ float sh[]; // [head_dim]
    __shared__ float red[32];
    const int i = blockIdx.x, h = blockIdx.y, hd = p.head_dim;
    const bool is_q = h < p.n_heads;
    float *x = is_q ? q + ((int64_t)i * p.n_heads + h) * hd
                    : k + ((int64_t)i * p.n_kv_heads + (h - p.n_heads)) * hd;
    const float *nw = is_q ? p.q_norm : p.k_norm;
    for (int e = threadIdx.x; e < hd; e += blockDim.x)
        sh[e] = x[e];
    __syncthreads();
    if (nw) { // the same for the whole block
        float ss = 0.0f;
        for (int e = threadIdx.x; e < hd; e += blockDim.x)
            ss = __fmaf_rn(sh[e], sh[e], ss);
        ss = block_sum(ss, red);
        const float inv = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(ss, (float)hd), p.eps)));
        for (int e = threadIdx.x; e < hd; e += blockDim.x)
            sh[e] = __fmul_rn(__fmul_rn(sh[e], inv), __fadd_rn(nw[e], p.w_offset));
        __syncthreads();
    }
    const float fpos = (float)pos[i];
    for (int f = threadIdx.x; f < p.n_freqs; f += blockDim.x) {
        const float ang = __fmul_rn(p.inv_freq[f], fpos);
        const float co = __fmul_rn(cosf(ang), p.attn_factor);
        const float si = __fmul_rn(sinf(ang), p.attn_factor);
        const int a = p.pairing == 0 ? f : 2 * f;
        const int b = p.pairing == 0 ? f + p.n_freqs : 2 * f + 1;
        const float x1 = sh[a], x2 = sh[b];
        x[a] = __fsub_rn(__fmul_rn(x1, co), __fmul_rn(x2, si));
        x[b] = __fadd_rn(__fmul_rn(x2, co), __fmul_rn(x1, si));
    }
    // Elements past the rotated pairs keep their normed value.
    for (int e = 2 * p.n_freqs + threadIdx.x; e < hd; e += blockDim.x)
        x[e] = sh[e];
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_rmsnorm(const float *x, int n, int64_t d, const float *w,
                                      float w_offset, float eps, float *out, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    rmsnorm_kernel<<<n, NORM_THREADS, 0, stream>>>(x, d, w, w_offset, eps, out);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_add_rmsnorm(float *x, const float *y, int n, int64_t d,
                                          const float *w, float w_offset, float eps, float *out,
                                          cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    add_rmsnorm_kernel<<<n, NORM_THREADS, 0, stream>>>(x, y, d, w, w_offset, eps, out);
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
    dim3 grid((unsigned)n, (unsigned)(p->n_heads + p->n_kv_heads));
    qk_norm_rope_kernel<<<grid, ROPE_THREADS, (size_t)p->head_dim * sizeof(float), stream>>>(q, k,
                                                                                           pos, *p);
    return cudaGetLastError();
}
