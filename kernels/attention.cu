#include <cuda_fp16.h>
#include <math.h>

#include "kernels/attention.cuh"
#include "kernels/dev_common.cuh"

// ---- kernels ----

namespace {

constexpr int ATTN_THREADS = 128;
constexpr int ATTN_WARPS = ATTN_THREADS / 32;
constexpr int APPEND_THREADS = 256;

DEV float kv_get(const float *p) { return *p; }
DEV float kv_get(const __half *p) { return __half2float(*p); }
DEV void kv_put(float *p, float x) { *p = x; }
DEV void kv_put(__half *p, float x) { *p = __float2half_rn(x); }

// Element offset of (layer, position t) in the pool, through the row's table.
DEV int64_t kv_row_off(const int32_t *table, int64_t t, int layer, int n_blocks, int bs,
                       int64_t kv_dim)
{
    const int64_t blk = table[t / bs];
    return (((int64_t)layer * n_blocks + blk) * bs + t % bs) * kv_dim;
}

template <typename KV>
__global__ void kv_append_kernel(const float *__restrict__ k, const float *__restrict__ v,
                                 const int32_t *__restrict__ meta, int n, int layer, int n_blocks,
                                 int bs, int64_t kv_dim, KV *kp, KV *vp)
{
    const int i = blockIdx.x;
    const int32_t *table = meta + 2 * n + meta[n + i];
    const int64_t off = kv_row_off(table, meta[i], layer, n_blocks, bs, kv_dim);
    for (int64_t e = threadIdx.x; e < kv_dim; e += blockDim.x) {
        kv_put(kp + off + e, k[(int64_t)i * kv_dim + e]);
        kv_put(vp + off + e, v[(int64_t)i * kv_dim + e]);
    }
}

// The visible span [lo, pos] of a row.
DEV int64_t span_lo(int64_t pos, int64_t window)
{
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

// Block (chunk slot, KV head, row): the chunk's partial softmax for the G
// query heads sharing that KV head. Partials: [row][head][slot][hd + 2]
// holding the weighted V sum, then the chunk's max and exp-sum.
template <typename KV>
__global__ void __launch_bounds__(ATTN_THREADS)
attn_partial_kernel(const float *__restrict__ q, const int32_t *__restrict__ meta, int n,
                    cu_attn a, int n_blocks, int bs, int64_t kv_dim, const KV *__restrict__ kp,
                    const KV *__restrict__ vp, int max_chunks, float *__restrict__ part)
{
    extern __shared__ float sh[];
    const int i = blockIdx.z, kvh = blockIdx.y, slot = blockIdx.x;
    const int hd = a.head_dim, G = a.n_heads / a.n_kv_heads;
    const int64_t pos = meta[i], lo = span_lo(pos, a.window);
    const int64_t c = lo / ATTN_CHUNK + slot;
    if (c > pos / ATTN_CHUNK)
        return; // the whole block: this row has fewer chunks
    const int64_t t0 = max(lo, c * ATTN_CHUNK), t1 = min(pos, c * ATTN_CHUNK + ATTN_CHUNK - 1);
    const int nt = (int)(t1 - t0 + 1);
    const int32_t *table = meta + 2 * n + meta[n + i];
    float *qs = sh;           // [G][hd]
    float *sc = sh + G * hd;  // [G][ATTN_CHUNK]
    // [ATTN_CHUNK] element offsets of the chunk's K/V rows for this KV head,
    // looked up once (partial_smem keeps them 8-byte aligned), so the loops
    // below issue their loads without a table lookup in front of each.
    int64_t *roff = reinterpret_cast<int64_t *>(sh + ((G * (hd + ATTN_CHUNK) + 1) & ~1));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    for (int idx = threadIdx.x; idx < G * hd; idx += blockDim.x)
        qs[idx] = q[((int64_t)i * a.n_heads + (int64_t)kvh * G) * hd + idx];
    for (int tt = threadIdx.x; tt < nt; tt += blockDim.x)
        roff[tt] = kv_row_off(table, t0 + tt, a.layer, n_blocks, bs, kv_dim) + (int64_t)kvh * hd;
    __syncthreads();

    // Scores: warp w takes positions t0 + w, t0 + w + 4, ...; each dot
    // product is a lane's elements in order, then the butterfly.
#pragma unroll 2
    for (int tt = warp; tt < nt; tt += ATTN_WARPS) {
        const KV *kr = kp + roff[tt];
        for (int g = 0; g < G; g++) {
            float s = 0.0f;
            for (int e = lane; e < hd; e += 32)
                s = __fmaf_rn(qs[g * hd + e], kv_get(kr + e), s);
            s = __fmul_rn(warp_sum(s), a.scale);
            if (a.softcap > 0.0f)
                s = __fmul_rn(tanhf(__fdiv_rn(s, a.softcap)), a.softcap);
            if (lane == 0)
                sc[g * ATTN_CHUNK + tt] = s;
        }
    }
    __syncthreads();

    // Per head: the chunk's max, then exp(score - max) in place and its sum.
    for (int g = warp; g < G; g += ATTN_WARPS) {
        float *s = sc + g * ATTN_CHUNK;
        float m = -INFINITY;
        for (int tt = lane; tt < nt; tt += 32)
            m = fmaxf(m, s[tt]);
        m = warp_max(m);
        float l = 0.0f;
        for (int tt = lane; tt < nt; tt += 32) {
            const float e = expf(__fsub_rn(s[tt], m));
            s[tt] = e;
            l = __fadd_rn(l, e);
        }
        l = warp_sum(l);
        if (lane == 0) {
            float *pp = part + (((int64_t)i * a.n_heads + (int64_t)kvh * G + g) * max_chunks + slot) *
                                   (hd + 2);
            pp[hd] = m;
            pp[hd + 1] = l;
        }
    }
    __syncthreads();

    // Weighted V: thread (g, e) sums over the chunk's positions in order.
    for (int idx = threadIdx.x; idx < G * hd; idx += blockDim.x) {
        const int g = idx / hd, e = idx % hd;
        const float *s = sc + g * ATTN_CHUNK;
        float o = 0.0f;
#pragma unroll 4
        for (int tt = 0; tt < nt; tt++)
            o = __fmaf_rn(s[tt], kv_get(vp + roff[tt] + e), o);
        part[(((int64_t)i * a.n_heads + (int64_t)kvh * G + g) * max_chunks + slot) * (hd + 2) + e] = o;
    }
}

// Block (row, head): merge the row's chunks in ascending order.
__global__ void attn_combine_kernel(const float *__restrict__ part, const int32_t *__restrict__ meta,
                                    cu_attn a, int max_chunks, float *__restrict__ out)
{
    const int i = blockIdx.x, h = blockIdx.y, hd = a.head_dim;
    const int64_t pos = meta[i];
    const int nc = (int)(pos / ATTN_CHUNK - span_lo(pos, a.window) / ATTN_CHUNK + 1);
    const float *pp = part + ((int64_t)i * a.n_heads + h) * max_chunks * (hd + 2);
    float mx = -INFINITY;
    for (int c = 0; c < nc; c++)
        mx = fmaxf(mx, pp[c * (hd + 2) + hd]);
    float l = 0.0f;
    for (int c = 0; c < nc; c++)
        l = __fadd_rn(l, __fmul_rn(pp[c * (hd + 2) + hd + 1],
                                   expf(__fsub_rn(pp[c * (hd + 2) + hd], mx))));
    float *o = out + ((int64_t)i * a.n_heads + h) * hd;
    for (int e = threadIdx.x; e < hd; e += blockDim.x) {
        float acc = 0.0f;
        for (int c = 0; c < nc; c++)
            acc = __fmaf_rn(pp[c * (hd + 2) + e], expf(__fsub_rn(pp[c * (hd + 2) + hd], mx)), acc);
        o[e] = __fdiv_rn(acc, l);
    }
}

size_t partial_smem(const cu_attn *a)
{
    const int G = a->n_heads / a->n_kv_heads;
    const size_t floats = ((size_t)G * (size_t)(a->head_dim + ATTN_CHUNK) + 1) & ~(size_t)1;
    return floats * sizeof(float) + ATTN_CHUNK * sizeof(int64_t);
}

template <typename KV>
cudaError_t attention_t(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                        const float *q, int max_chunks, float *part, float *out, cudaStream_t s)
{
    const size_t smem = partial_smem(a);
    if (smem > 48 * 1024) {
        cudaError_t rc = cudaFuncSetAttribute(attn_partial_kernel<KV>,
                                              cudaFuncAttributeMaxDynamicSharedMemorySize,
                                              (int)smem);
        if (rc != cudaSuccess)
            return rc;
    }
    dim3 grid((unsigned)max_chunks, (unsigned)a->n_kv_heads, (unsigned)n);
    attn_partial_kernel<KV><<<grid, ATTN_THREADS, smem, s>>>(
        q, meta, n, *a, kv->n_blocks, kv->block_size, kv->kv_dim, static_cast<const KV *>(kv->k),
        static_cast<const KV *>(kv->v), max_chunks, part);
    cudaError_t rc = cudaGetLastError();
    if (rc != cudaSuccess)
        return rc;
    dim3 g2((unsigned)n, (unsigned)a->n_heads);
    const int threads = a->head_dim < 128 ? 64 : 128;
    attn_combine_kernel<<<g2, threads, 0, s>>>(part, meta, *a, max_chunks, out);
    return cudaGetLastError();
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_kv_append(const cu_kv_pool *kv, const cu_attn *a,
                                        const int32_t *meta, int n, const float *k, const float *v,
                                        cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (kv->f16)
        kv_append_kernel<__half><<<n, APPEND_THREADS, 0, stream>>>(
            k, v, meta, n, a->layer, kv->n_blocks, kv->block_size, kv->kv_dim,
            static_cast<__half *>(kv->k), static_cast<__half *>(kv->v));
    else
        kv_append_kernel<float><<<n, APPEND_THREADS, 0, stream>>>(
            k, v, meta, n, a->layer, kv->n_blocks, kv->block_size, kv->kv_dim,
            static_cast<float *>(kv->k), static_cast<float *>(kv->v));
    return cudaGetLastError();
}

extern "C" cudaError_t launch_attention(const cu_kv_pool *kv, const cu_attn *a,
                                        const int32_t *meta, int n, const float *q, int max_chunks,
                                        float *part, float *out, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads != 0 || n > 65535 ||
        a->n_kv_heads > 65535 || a->n_heads > 65535 || max_chunks <= 0)
        return cudaErrorInvalidValue;
    if (kv->f16)
        return attention_t<__half>(kv, a, meta, n, q, max_chunks, part, out, stream);
    return attention_t<float>(kv, a, meta, n, q, max_chunks, part, out, stream);
}
