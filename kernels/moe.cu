#include <math.h>

#include "kernels/dev_common.cuh"
#include "kernels/moe.cuh"

// ---- kernels ----

namespace {

constexpr int ROUTE_THREADS = 64;
constexpr int COMBINE_THREADS = 256;

// One thread per token, sequential over the experts exactly as the CPU
// reference: max, exp and sum in id order, divide; then n_used passes each
// taking the highest remaining probability (the lower id wins a tie);
// renormalize in that order; finally sort the choices by id, the order the
// combine adds them in.
__global__ void moe_route_kernel(float *__restrict__ probs, int n, int ne, int nu, int norm_topk,
                                 int32_t *__restrict__ ids, float *__restrict__ w)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n)
        return;
    float *p = probs + (int64_t)t * ne;
    int32_t *id = ids + (int64_t)t * nu;
    float *wt = w + (int64_t)t * nu;
    float mx = -INFINITY, sum = 0.0f;
    for (int e = 0; e < ne; e++)
        if (p[e] > mx)
            mx = p[e];
    for (int e = 0; e < ne; e++) {
        p[e] = expf(__fsub_rn(p[e], mx));
        sum = __fadd_rn(sum, p[e]);
    }
    for (int e = 0; e < ne; e++)
        p[e] = __fdiv_rn(p[e], sum);
    for (int k = 0; k < nu; k++) {
        int best = -1;
        for (int e = 0; e < ne; e++) {
            bool taken = false;
            for (int u = 0; u < k; u++)
                taken |= id[u] == e;
            if (!taken && (best < 0 || p[e] > p[best]))
                best = e;
        }
        id[k] = best;
        wt[k] = p[best];
    }
    if (norm_topk) {
        float s = 0.0f;
        for (int k = 0; k < nu; k++)
            s = __fadd_rn(s, wt[k]);
        for (int k = 0; k < nu; k++)
            wt[k] = __fdiv_rn(wt[k], s);
    }
    for (int k = 1; k < nu; k++) // insertion sort by id; ids are distinct
        for (int j = k; j > 0 && id[j - 1] > id[j]; j--) {
            const int32_t ti = id[j];
            id[j] = id[j - 1];
            id[j - 1] = ti;
            const float tw = wt[j];
            wt[j] = wt[j - 1];
            wt[j - 1] = tw;
        }
}

// The CPU adds y * w into a zeroed row expert by expert, ascending.
__global__ void moe_combine_kernel(const float *__restrict__ y, const float *__restrict__ w, int nu,
                                   int64_t dim, float *__restrict__ out)
{
    const int t = blockIdx.x;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < nu; j++)
            acc = __fadd_rn(acc, __fmul_rn(y[((int64_t)t * nu + j) * dim + d], w[(int64_t)t * nu + j]));
        out[(int64_t)t * dim + d] = acc;
    }
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_moe_route(float *probs, int n, int n_experts, int n_used,
                                        int norm_topk, int32_t *ids, float *w, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (n_used <= 0 || n_used > n_experts)
        return cudaErrorInvalidValue;
    moe_route_kernel<<<(n + ROUTE_THREADS - 1) / ROUTE_THREADS, ROUTE_THREADS, 0, stream>>>(
        probs, n, n_experts, n_used, norm_topk, ids, w);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_moe_combine(const float *y, const float *w, int n, int n_used,
                                          int64_t dim, float *out, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    moe_combine_kernel<<<n, COMBINE_THREADS, 0, stream>>>(y, w, n_used, dim, out);
    return cudaGetLastError();
}
