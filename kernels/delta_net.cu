#include "kernels/delta_net.cuh"
#include "kernels/dev_common.cuh"
#include "kernels/launch.cuh"

namespace {

constexpr int CONV_THREADS = 128;

// The CPU reference's cpu_dot: eight interleaved partial sums, combined
// pairwise, then the tail.
DEV float dot8(const float *a, const float *b, int n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[j] = __fadd_rn(acc[j], __fmul_rn(a[i + j], b[i + j]));
    float tail = 0.0f;
    for (; i < n; i++)
        tail = __fadd_rn(tail, __fmul_rn(a[i], b[i]));
    float s = __fadd_rn(__fadd_rn(__fadd_rn(acc[0], acc[1]), __fadd_rn(acc[2], acc[3])),
                        __fadd_rn(__fadd_rn(acc[4], acc[5]), __fadd_rn(acc[6], acc[7])));
    return __fadd_rn(s, tail);
}

DEV float sigmoid_f(float x) { return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-x))); }
DEV float softplus_f(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

// Whether row i starts its sequence's run of rows in the step (the block
// of a row that does not returns at once).
DEV bool run_start(const cu_delta &p, int i)
{
    return p.slot[i] >= 0 && (i == 0 || p.slot[i] != p.slot[i - 1]);
}

// The causal conv of one channel over its sequence's rows: grid (channel
// blocks, rows); the window lives in registers for the run.
template <int KC>
__global__ void delta_conv_kernel(cu_delta p)
{
    pdl_trigger();
    pdl_wait();
    const int i = blockIdx.y;
    if (!run_start(p, i))
        return;
    const size_t conv_dim = 2 * (size_t)p.n_k * p.k_dim + (size_t)p.n_v * p.v_dim;
    const size_t ch = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= conv_dim)
        return;
    const int s = p.slot[i];
    float *win = p.state + (size_t)s * p.state_floats + p.state_off;
    float w[KC], v[KC > 1 ? KC - 1 : 1];
#pragma unroll
    for (int k = 0; k < KC; k++)
        w[k] = p.conv_w[ch * KC + k];
    const bool fresh = p.pos[i] == 0;
#pragma unroll
    for (int k = 0; k < KC - 1; k++)
        v[k] = fresh ? 0.0f : win[(size_t)k * conv_dim + ch];
    for (int r = i; r < p.n && p.slot[r] == s; r++) {
        const float x = p.qkv[(size_t)r * conv_dim + ch];
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < KC - 1; k++)
            acc = __fadd_rn(acc, __fmul_rn(w[k], v[k]));
        acc = __fadd_rn(acc, __fmul_rn(w[KC - 1], x));
#pragma unroll
        for (int k = 0; k + 1 < KC - 1; k++)
            v[k] = v[k + 1];
        if (KC > 1)
            v[KC - 2] = x;
        p.conv_out[(size_t)r * conv_dim + ch] = silu_f(acc);
    }
#pragma unroll
    for (int k = 0; k < KC - 1; k++)
        win[(size_t)k * conv_dim + ch] = v[k];
}

// The delta rule of value head blockIdx.x over its sequence's rows: thread
// j keeps column j of the head's state S [KD][v_dim] in registers for the
// run. Shared: q and k of the row [KD] each, then the outputs [v_dim].
template <int KD>
__global__ void delta_rule_kernel(cu_delta p)
{
    pdl_trigger();
    pdl_wait();
    const int h = blockIdx.x, i = blockIdx.y;
    if (!run_start(p, i))
        return;
    extern __shared__ float sm[];
    float *qs = sm, *ks = sm + KD, *os = sm + 2 * KD;
    const int j = threadIdx.x, vd = p.v_dim, nv = p.n_v;
    const bool act = j < vd;
    const int kh = p.tiled ? h % p.n_k : h / (nv / p.n_k);
    const size_t key_dim = (size_t)p.n_k * KD, conv_dim = 2 * key_dim + (size_t)nv * vd;
    const int s = p.slot[i];
    float *S = p.state + (size_t)s * p.state_floats + p.state_off +
               (size_t)(p.conv_k - 1) * conv_dim + (size_t)h * KD * vd;
    float st[KD];
    const bool fresh = p.pos[i] == 0;
#pragma unroll
    for (int r = 0; r < KD; r++)
        st[r] = act && !fresh ? S[(size_t)r * vd + j] : 0.0f;
    const float a = p.a_is_log ? -expf(p.a[h]) : p.a[h];
    const float qscale = __fdiv_rn(1.0f, __fsqrt_rn((float)KD));
    const float nrm = act ? p.norm[j] : 0.0f;
    for (int r = i; r < p.n && p.slot[r] == s; r++) {
        const float *row = p.conv_out + (size_t)r * conv_dim;
        for (int t = threadIdx.x; t < KD; t += blockDim.x) {
            qs[t] = row[(size_t)kh * KD + t];
            ks[t] = row[key_dim + (size_t)kh * KD + t];
        }
        __syncthreads();
        const float invq = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(dot8(qs, qs, KD), 1e-6f)));
        const float invk = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(dot8(ks, ks, KD), 1e-6f)));
        const float g = __fmul_rn(a, softplus_f(__fadd_rn(p.alpha[(size_t)r * nv + h],
                                                          p.dt_bias[h])));
        const float decay = expf(g);
        const float beta = sigmoid_f(p.beta[(size_t)r * nv + h]);
        float o = 0.0f;
        if (act) {
            float kv = 0.0f;
#pragma unroll
            for (int t = 0; t < KD; t++) {
                st[t] = __fmul_rn(st[t], decay);
                kv = __fadd_rn(kv, __fmul_rn(st[t], __fmul_rn(ks[t], invk)));
            }
            const float v = row[2 * key_dim + (size_t)h * vd + j];
            const float delta = __fmul_rn(__fsub_rn(v, kv), beta);
#pragma unroll
            for (int t = 0; t < KD; t++) {
                st[t] = __fadd_rn(st[t], __fmul_rn(__fmul_rn(ks[t], invk), delta));
                o = __fadd_rn(o, __fmul_rn(st[t], __fmul_rn(__fmul_rn(qs[t], invq), qscale)));
            }
            os[j] = o;
        }
        __syncthreads();
        if (act) {
            const float inv = __fdiv_rn(
                1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(dot8(os, os, vd), (float)vd), p.eps)));
            const float zz = p.z[((size_t)r * nv + h) * vd + j];
            p.out[((size_t)r * nv + h) * vd + j] =
                __fmul_rn(__fmul_rn(__fmul_rn(o, inv), nrm), silu_f(zz));
        }
        __syncthreads(); // qs, ks and os are written again for the next row
    }
    if (act)
#pragma unroll
        for (int r = 0; r < KD; r++)
            S[(size_t)r * vd + j] = st[r];
}

template <int KD>
cudaError_t launch_rule(const cu_delta *p, cudaStream_t stream)
{
    const int threads = (p->v_dim + 31) & ~31;
    const size_t smem = (2 * (size_t)KD + (size_t)p->v_dim) * sizeof(float);
    launch_pdl(delta_rule_kernel<KD>, dim3((unsigned)p->n_v, (unsigned)p->n), dim3(threads),
               smem, stream, *p);
    return cudaGetLastError();
}

} // namespace

extern "C" int delta_net_supports(int k_dim, int v_dim)
{
    return (k_dim == 16 || k_dim == 32 || k_dim == 64 || k_dim == 128) && v_dim >= 1 &&
           v_dim <= 1024;
}

extern "C" cudaError_t launch_delta_net(const cu_delta *p, cudaStream_t stream)
{
    if (p->n <= 0)
        return cudaSuccess;
    if (!delta_net_supports(p->k_dim, p->v_dim) || p->conv_k < 2 || p->conv_k > 4 ||
        p->n_k <= 0 || p->n_v % p->n_k != 0 || p->n > 65535)
        return cudaErrorInvalidValue;
    const size_t conv_dim = 2 * (size_t)p->n_k * p->k_dim + (size_t)p->n_v * p->v_dim;
    const dim3 cgrid((unsigned)((conv_dim + CONV_THREADS - 1) / CONV_THREADS), (unsigned)p->n);
    switch (p->conv_k) {
    case 2: launch_pdl(delta_conv_kernel<2>, cgrid, dim3(CONV_THREADS), 0, stream, *p); break;
    case 3: launch_pdl(delta_conv_kernel<3>, cgrid, dim3(CONV_THREADS), 0, stream, *p); break;
    default: launch_pdl(delta_conv_kernel<4>, cgrid, dim3(CONV_THREADS), 0, stream, *p); break;
    }
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess)
        return rc;
    switch (p->k_dim) {
    case 16: return launch_rule<16>(p, stream);
    case 32: return launch_rule<32>(p, stream);
    case 64: return launch_rule<64>(p, stream);
    default: return launch_rule<128>(p, stream);
    }
}
