#include <cuda_fp16.h>
#include <math.h>

#include "kernels/attention.cuh"
#include "kernels/dev_common.cuh"
#include "engine/kv_codec.h"

// ---- kernels ----

namespace {

constexpr int ATTN_THREADS = 128;
constexpr int ATTN_WARPS = ATTN_THREADS / 32;
constexpr int APPEND_THREADS = 256;

// The element codecs: get(row, e) is value e of a stored row, as f32;
// put_row stores row i of kv_dim values (one block of APPEND_THREADS per
// row). f16 / bf16 / q8_0 go through lib/engine/kv_codec.h, the CPU's own
// codecs, so both backends store the same bytes.
struct KvF32 {
    static DEV float get(const uint8_t *row, int64_t e)
    {
        return reinterpret_cast<const float *>(row)[e];
    }
    static DEV void put_row(const float *x, int64_t kv_dim, uint8_t *row)
    {
        for (int64_t e = threadIdx.x; e < kv_dim; e += blockDim.x)
            reinterpret_cast<float *>(row)[e] = x[e];
    }
};

struct KvF16 {
    static DEV float get(const uint8_t *row, int64_t e)
    {
        return __half2float(reinterpret_cast<const __half *>(row)[e]);
    }
    static DEV void put_row(const float *x, int64_t kv_dim, uint8_t *row)
    {
        for (int64_t e = threadIdx.x; e < kv_dim; e += blockDim.x)
            reinterpret_cast<uint16_t *>(row)[e] = kvc_f32_to_f16(x[e]);
    }
};

struct KvBF16 {
    static DEV float get(const uint8_t *row, int64_t e)
    {
        return bf16_bits_to_f32(reinterpret_cast<const uint16_t *>(row)[e]);
    }
    static DEV void put_row(const float *x, int64_t kv_dim, uint8_t *row)
    {
        for (int64_t e = threadIdx.x; e < kv_dim; e += blockDim.x)
            reinterpret_cast<uint16_t *>(row)[e] = kvc_f32_to_bf16(x[e]);
    }
};

// q8_0: a warp per block of 32; lane j quantizes value j. The block's
// amax is a max (exact in any order), the rest is kv_codec.h's arithmetic.
struct KvQ8 {
    static DEV float get(const uint8_t *row, int64_t e) { return kvc_q8_0_get(row, e); }
    static DEV void put_row(const float *x, int64_t kv_dim, uint8_t *row)
    {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
        for (int64_t blk = warp; blk < kv_dim / KV_Q8_0_BLOCK; blk += nw) {
            const float v = x[blk * KV_Q8_0_BLOCK + lane];
            const float d = kvc_q8_0_scale(warp_max(fabsf(v)));
            uint8_t *b = row + blk * KV_Q8_0_BYTES;
            b[2 + lane] = (uint8_t)kvc_q8_0_quant(v, kvc_q8_0_inv(d));
            if (lane == 0)
                kvc_st16(b, kvc_f32_to_f16(d));
        }
    }
};

// Row index of (layer, position t) in the pool, through the row's table.
DEV int64_t kv_row_index(const int32_t *table, int64_t t, int layer, int n_blocks, int bs)
{
    const int64_t blk = table[t / bs];
    return ((int64_t)layer * n_blocks + blk) * bs + t % bs;
}

template <typename KV>
__global__ void kv_append_kernel(const float *__restrict__ k, const float *__restrict__ v,
                                 const int32_t *__restrict__ meta, int n, int layer, int n_blocks,
                                 int bs, int64_t kv_dim, int64_t row_bytes, uint8_t *kp,
                                 uint8_t *vp)
{
    const int i = blockIdx.x;
    const int32_t *table = meta + 2 * n + meta[n + i];
    const int64_t off = kv_row_index(table, meta[i], layer, n_blocks, bs) * row_bytes;
    KV::put_row(k + (int64_t)i * kv_dim, kv_dim, kp + off);
    KV::put_row(v + (int64_t)i * kv_dim, kv_dim, vp + off);
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
                    cu_attn a, int n_blocks, int bs, int64_t row_bytes,
                    const uint8_t *__restrict__ kp, const uint8_t *__restrict__ vp,
                    int max_chunks, float *__restrict__ part)
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
    // [ATTN_CHUNK] byte offsets of the chunk's K/V rows in the pools,
    // looked up once (partial_smem keeps them 8-byte aligned), so the loops
    // below issue their loads without a table lookup in front of each.
    int64_t *roff = reinterpret_cast<int64_t *>(sh + ((G * (hd + ATTN_CHUNK) + 1) & ~1));
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

    for (int idx = threadIdx.x; idx < G * hd; idx += blockDim.x)
        qs[idx] = q[((int64_t)i * a.n_heads + (int64_t)kvh * G) * hd + idx];
    for (int tt = threadIdx.x; tt < nt; tt += blockDim.x)
        roff[tt] = kv_row_index(table, t0 + tt, a.layer, n_blocks, bs) * row_bytes;
    __syncthreads();

    // Scores: warp w takes positions t0 + w, t0 + w + 4, ...; each dot
    // product is a lane's elements in order, then the butterfly.
#pragma unroll 2
    for (int tt = warp; tt < nt; tt += ATTN_WARPS) {
        const uint8_t *kr = kp + roff[tt];
        const int64_t e0 = (int64_t)kvh * hd;
        for (int g = 0; g < G; g++) {
            float s = 0.0f;
            for (int e = lane; e < hd; e += 32)
                s = __fmaf_rn(qs[g * hd + e], KV::get(kr, e0 + e), s);
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
        const int64_t ev = (int64_t)kvh * hd + e;
#pragma unroll 4
        for (int tt = 0; tt < nt; tt++)
            o = __fmaf_rn(s[tt], KV::get(vp + roff[tt], ev), o);
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
        q, meta, n, *a, kv->n_blocks, kv->block_size, kv->row_bytes,
        static_cast<const uint8_t *>(kv->k), static_cast<const uint8_t *>(kv->v), max_chunks, part);
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
    uint8_t *kp = static_cast<uint8_t *>(kv->k), *vp = static_cast<uint8_t *>(kv->v);
    switch (kv->type) {
    case CU_KV_F32:
        kv_append_kernel<KvF32><<<n, APPEND_THREADS, 0, stream>>>(
            k, v, meta, n, a->layer, kv->n_blocks, kv->block_size, kv->kv_dim, kv->row_bytes, kp, vp);
        break;
    case CU_KV_F16:
        kv_append_kernel<KvF16><<<n, APPEND_THREADS, 0, stream>>>(
            k, v, meta, n, a->layer, kv->n_blocks, kv->block_size, kv->kv_dim, kv->row_bytes, kp, vp);
        break;
    case CU_KV_BF16:
        kv_append_kernel<KvBF16><<<n, APPEND_THREADS, 0, stream>>>(
            k, v, meta, n, a->layer, kv->n_blocks, kv->block_size, kv->kv_dim, kv->row_bytes, kp, vp);
        break;
    case CU_KV_Q8_0:
        if (kv->kv_dim % KV_Q8_0_BLOCK != 0)
            return cudaErrorInvalidValue;
        kv_append_kernel<KvQ8><<<n, APPEND_THREADS, 0, stream>>>(
            k, v, meta, n, a->layer, kv->n_blocks, kv->block_size, kv->kv_dim, kv->row_bytes, kp, vp);
        break;
    default: return cudaErrorInvalidValue;
    }
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
    switch (kv->type) {
    case CU_KV_F32: return attention_t<KvF32>(kv, a, meta, n, q, max_chunks, part, out, stream);
    case CU_KV_F16: return attention_t<KvF16>(kv, a, meta, n, q, max_chunks, part, out, stream);
    case CU_KV_BF16: return attention_t<KvBF16>(kv, a, meta, n, q, max_chunks, part, out, stream);
    case CU_KV_Q8_0: return attention_t<KvQ8>(kv, a, meta, n, q, max_chunks, part, out, stream);
    default: return cudaErrorInvalidValue;
    }
}
