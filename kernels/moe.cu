#include <math.h>

#include "kernels/dev_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/moe.cuh"

// ---- kernels ----

namespace {

constexpr int COMBINE_THREADS = 256;

// The better of two candidates (probability, expert id; id < 0: none):
// the higher probability, the lower id on a tie or an unordered pair, so
// the warp's choice is the CPU's first-highest scan.
__device__ __forceinline__ void route_better(float &v, int &id, float ov, int oid)
{
    if (oid < 0)
        return;
    if (id < 0 || ov > v || (!(v > ov) && oid < id)) {
        v = ov;
        id = oid;
    }
}

// One warp per token, with the CPU reference's arithmetic
// (lib/backend/moe_route.c): the max (order free), each exp(p - max)
// (elementwise), their sum in id order, each division; then
// n_used rounds each taking the highest untaken probability, the lower id
// winning a tie; the renormalization in choice order; the choices sorted
// by id, the order the combine adds them in. Shared memory holds the
// token's probabilities (ne floats) and taken flags (ne bytes).
__global__ void moe_route_kernel(float *__restrict__ probs, int ne, int nu, int norm_topk,
                                 const float *__restrict__ escale, int32_t *__restrict__ ids,
                                 float *__restrict__ w)
{
    extern __shared__ float route_smem[];
    pdl_trigger(); // the experts' launch after it waits for every choice
    pdl_wait();
    float *sp = route_smem;
    unsigned char *taken = reinterpret_cast<unsigned char *>(route_smem + ne);
    const int t = blockIdx.x, lane = threadIdx.x;
    float *p = probs + (int64_t)t * ne;
    int32_t *id = ids + (int64_t)t * nu;
    float *wt = w + (int64_t)t * nu;
    float mx = -INFINITY;
    for (int e = lane; e < ne; e += 32) {
        const float v = p[e];
        sp[e] = v;
        taken[e] = 0;
        if (v > mx)
            mx = v;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const float other = __shfl_xor_sync(0xffffffffu, mx, o);
        if (other > mx)
            mx = other;
    }
    for (int e = lane; e < ne; e += 32)
        sp[e] = expf(__fsub_rn(sp[e], mx));
    __syncwarp();
    float sum = 0.0f; // every lane the same sum (the reads are broadcasts)
    for (int e = 0; e < ne; e++)
        sum = __fadd_rn(sum, sp[e]);
    __syncwarp();
    for (int e = lane; e < ne; e += 32) {
        sp[e] = __fdiv_rn(sp[e], sum);
        p[e] = sp[e];
    }
    __syncwarp();
    for (int k = 0; k < nu; k++) {
        float bv = 0.0f;
        int best = -1;
        for (int e = lane; e < ne; e += 32)
            if (!taken[e])
                route_better(bv, best, sp[e], e);
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            const int oid = __shfl_xor_sync(0xffffffffu, best, o);
            route_better(bv, best, ov, oid);
        }
        if (lane == 0) {
            id[k] = best;
            wt[k] = bv;
            taken[best] = 1;
        }
        __syncwarp();
    }
    if (lane != 0)
        return;
    if (norm_topk) {
        float s = 0.0f;
        for (int k = 0; k < nu; k++)
            s = __fadd_rn(s, wt[k]);
        for (int k = 0; k < nu; k++)
            wt[k] = __fdiv_rn(wt[k], s);
    }
    if (escale) // each chosen expert's own scale, after the renormalization
        for (int k = 0; k < nu; k++)
            wt[k] = __fmul_rn(wt[k], escale[id[k]]);
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

// The (token, choice) pairs grouped by expert for the grouped mat-vec
// over several pairs at once: order[j] is the pair at sorted position j
// (the pairs of expert 0 first, then of expert 1 ...; within an expert in
// no fixed order, which changes no result: each pair's row is computed
// from its own input alone), chunks[3k..3k+2] = (expert, first position,
// count <= tile) the k-th run of at most `tile` pairs of one expert, and
// *n_chunks their number. One block: counts by shared-memory atomics, the
// starts and chunks by one thread in expert order.
__global__ void moe_plan_kernel(const int32_t *__restrict__ ids, int pairs, int ne, int tile,
                                int32_t *__restrict__ order, int32_t *__restrict__ chunks,
                                int32_t *__restrict__ n_chunks)
{
    extern __shared__ unsigned plan_smem[];
    unsigned *cnt = plan_smem, *fill = plan_smem + ne;
    for (int e = threadIdx.x; e < ne; e += blockDim.x)
        cnt[e] = 0;
    __syncthreads();
    for (int p = threadIdx.x; p < pairs; p += blockDim.x)
        atomicAdd(&cnt[ids[p]], 1u);
    __syncthreads();
    if (threadIdx.x == 0) {
        int start = 0, k = 0;
        for (int e = 0; e < ne; e++) {
            const int c = (int)cnt[e];
            fill[e] = (unsigned)start;
            for (int o = 0; o < c; o += tile) {
                chunks[3 * k] = e;
                chunks[3 * k + 1] = start + o;
                chunks[3 * k + 2] = c - o < tile ? c - o : tile;
                k++;
            }
            start += c;
        }
        *n_chunks = k;
    }
    __syncthreads();
    for (int p = threadIdx.x; p < pairs; p += blockDim.x)
        order[atomicAdd(&fill[ids[p]], 1u)] = p;
}

// xg[j] = x[order[j] / in_div], rows of dim floats.
__global__ void moe_gather_kernel(const float *__restrict__ x, const int32_t *__restrict__ order,
                                  int in_div, int64_t dim, float *__restrict__ xg)
{
    const int j = blockIdx.x;
    const float *src = x + (int64_t)(order[j] / in_div) * dim;
    float *dst = xg + (int64_t)j * dim;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x)
        dst[d] = src[d];
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
                                        int norm_topk, const float *expert_scale, int32_t *ids,
                                        float *w, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (n_used <= 0 || n_used > n_experts)
        return cudaErrorInvalidValue;
    const size_t smem = (size_t)n_experts * (sizeof(float) + 1);
    if (smem > 48 * 1024)
        return cudaErrorInvalidValue; // 9,830 experts; the largest families route over 512
    return launch_pdl(moe_route_kernel, dim3(n), dim3(32), smem, stream, probs, n_experts, n_used,
                      norm_topk, expert_scale, ids, w);
}

extern "C" cudaError_t launch_moe_combine(const float *y, const float *w, int n, int n_used,
                                          int64_t dim, float *out, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    moe_combine_kernel<<<n, COMBINE_THREADS, 0, stream>>>(y, w, n_used, dim, out);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_moe_plan(const int32_t *ids, int pairs, int n_experts, int tile,
                                       int32_t *order, int32_t *chunks, int32_t *n_chunks,
                                       cudaStream_t stream)
{
    if (pairs <= 0)
        return cudaSuccess;
    const size_t smem = 2 * (size_t)n_experts * sizeof(unsigned);
    if (n_experts <= 0 || tile <= 0 || smem > 48 * 1024)
        return cudaErrorInvalidValue;
    moe_plan_kernel<<<1, 256, smem, stream>>>(ids, pairs, n_experts, tile, order, chunks,
                                              n_chunks);
    return cudaGetLastError();
}

extern "C" cudaError_t launch_moe_gather(const float *x, const int32_t *order, int pairs,
                                         int in_div, int64_t dim, float *xg, cudaStream_t stream)
{
    if (pairs <= 0)
        return cudaSuccess;
    if (in_div <= 0)
        return cudaErrorInvalidValue;
    moe_gather_kernel<<<pairs, 256, 0, stream>>>(x, order, in_div, dim, xg);
    return cudaGetLastError();
}
