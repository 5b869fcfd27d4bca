#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include "kernels/attention.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/dev_common.cuh"
#include "kernels/launch.cuh"
#include "kernels/mma.cuh"
#include "numerics/kv_codec.h"

// ---- kernels ----

namespace {

constexpr int ATTN_THREADS = 128;
constexpr int ATTN_WARPS = ATTN_THREADS / 32;
constexpr int APPEND_THREADS = 256;

// The element codecs: get(row, e) is value e of a stored row, as f32;
// put2 stores values [e0, e1) of a K row and a V row, a thread a value
// (both loads first, then both stores). f16 / bf16 / q8_0 go through
// lib/numerics/kv_codec.h, the CPU's own codecs, so both backends store the
// same bytes.
struct KvF32 {
    static DEV float get(const uint8_t *row, int64_t e)
    {
        return reinterpret_cast<const float *>(row)[e];
    }
    static DEV void put2(const float *xk, const float *xv, int64_t e0, int64_t e1, uint8_t *rk,
                         uint8_t *rv)
    {
        for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
            const float a = xk[e], b = xv[e];
            reinterpret_cast<float *>(rk)[e] = a;
            reinterpret_cast<float *>(rv)[e] = b;
        }
    }
};

struct KvF16 {
    static DEV float get(const uint8_t *row, int64_t e)
    {
        return __half2float(reinterpret_cast<const __half *>(row)[e]);
    }
    static DEV void put2(const float *xk, const float *xv, int64_t e0, int64_t e1, uint8_t *rk,
                         uint8_t *rv)
    {
        for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
            const float a = xk[e], b = xv[e];
            reinterpret_cast<uint16_t *>(rk)[e] = kvc_f32_to_f16(a);
            reinterpret_cast<uint16_t *>(rv)[e] = kvc_f32_to_f16(b);
        }
    }
};

struct KvBF16 {
    static DEV float get(const uint8_t *row, int64_t e)
    {
        return bf16_bits_to_f32(reinterpret_cast<const uint16_t *>(row)[e]);
    }
    static DEV void put2(const float *xk, const float *xv, int64_t e0, int64_t e1, uint8_t *rk,
                         uint8_t *rv)
    {
        for (int64_t e = e0 + threadIdx.x; e < e1; e += blockDim.x) {
            const float a = xk[e], b = xv[e];
            reinterpret_cast<uint16_t *>(rk)[e] = kvc_f32_to_bf16(a);
            reinterpret_cast<uint16_t *>(rv)[e] = kvc_f32_to_bf16(b);
        }
    }
};

// q8_0: a warp per block of 32 (e0 a multiple of 32); lane j quantizes
// value j. The block's amax is a max (exact in any order), the rest is
// kv_codec.h's arithmetic.
struct KvQ8 {
    static DEV float get(const uint8_t *row, int64_t e) { return kvc_q8_0_get(row, e); }
    static DEV void put_block(float x, uint8_t *b)
    {
        const int lane = threadIdx.x & 31;
        const float d = kvc_q8_0_scale(warp_max(fabsf(x)));
        b[2 + lane] = (uint8_t)kvc_q8_0_quant(x, kvc_q8_0_inv(d));
        if (lane == 0)
            kvc_st16(b, kvc_f32_to_f16(d));
    }
    static DEV void put2(const float *xk, const float *xv, int64_t e0, int64_t e1, uint8_t *rk,
                         uint8_t *rv)
    {
        const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
        for (int64_t blk = e0 / KV_Q8_0_BLOCK + warp; blk < e1 / KV_Q8_0_BLOCK; blk += nw) {
            const float a = xk[blk * KV_Q8_0_BLOCK + lane], b = xv[blk * KV_Q8_0_BLOCK + lane];
            put_block(a, rk + blk * KV_Q8_0_BYTES);
            put_block(b, rv + blk * KV_Q8_0_BYTES);
        }
    }
};

// Row index of (layer, position t) in the pool, through the row's table.
DEV int64_t kv_row_index(const int32_t *table, int64_t t, int layer, int n_blocks, int bs)
{
    const int p = (int)t; // positions are int32 (the row metadata): a 32-bit divide
    const int64_t blk = table[p / bs];
    return ((int64_t)layer * n_blocks + blk) * bs + p % bs;
}

// Block (row, piece): values [piece * APPEND_PIECE, + APPEND_PIECE) of
// the row's K and V, so that one row's append is a few blocks working side
// by side, not one block's loop of dependent loads and stores.
constexpr int APPEND_PIECE = APPEND_THREADS;

template <typename KV>
__global__ void __launch_bounds__(APPEND_THREADS)
kv_append_kernel(const float *__restrict__ k, const float *__restrict__ v,
                 const int32_t *__restrict__ meta, int n, int layer, int n_blocks, int bs,
                 int64_t kv_dim, int64_t row_bytes, uint8_t *kp, uint8_t *vp)
{
    pdl_trigger();
    pdl_wait(); // k, v come from the kernel before (kernels/launch.cuh)
    const int i = blockIdx.x;
    const int64_t e0 = (int64_t)blockIdx.y * APPEND_PIECE;
    const int64_t e1 = min(kv_dim, e0 + APPEND_PIECE);
    const int32_t *table = meta + 2 * n + meta[n + i];
    const int64_t off = kv_row_index(table, meta[i], layer, n_blocks, bs) * row_bytes;
    KV::put2(k + (int64_t)i * kv_dim, v + (int64_t)i * kv_dim, e0, e1, kp + off, vp + off);
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

// ---- decode attention: split-K over the row's own span, GQA-shared K/V ----
//
// Block (split, KV head, row), DEC_THREADS threads: the split's keys are
// read once for all G query heads of the KV head. A lane loads 8
// consecutive values of a key (one 16-byte load for f16/bf16, two for
// f32, 8 bytes + the block scale for q8_0); the LPK lanes (hd / 8 rounded
// up to a power of two) of a "key group" cover one key's head, so a warp
// takes 32 / LPK keys per tile. Scores are the key group's butterfly;
// each warp keeps an online softmax (max, exp-sum, weighted V) per query
// head over its tiles, then the block merges its warps in order. Every
// sum has a fixed shape that depends on the split's key range only.

constexpr int DEC_THREADS = 128;
constexpr int DEC_WARPS = DEC_THREADS / 32;
constexpr int DEC_UNROLL = 4;  // tiles whose loads are in flight at once
constexpr int DEC_PIECE = 256; // keys whose row offsets are staged at once
// The most splits a row may have for the decode kernel's blocks to merge
// them themselves (the last block of each (row, KV head) to finish), which
// saves the combine kernel's launch; rows of more splits leave it to that
// kernel, whose blocks of one head each spread a long merge wider. Only
// launches of fewer than DEC_MANY_ROWS rows merge in the decode kernel:
// on the H200 (Qwen3-8B shape, depth 512) one sequence decodes 3% faster
// so, 8 the same, and 64 about 1.5% slower (the merging blocks' tail).
constexpr int DEC_FOLD_MAX = 16;

// Eight values of a stored row starting at element e (e % 8 == 0):
// fetch() issues the loads into a raw register form (as few registers as
// the bytes take, so more of them can be in flight), cvt() makes f32s.
struct Ld8F32 {
    struct raw { float4 a, b; };
    static DEV raw fetch(const uint8_t *row, int64_t e)
    {
        return {__ldg(reinterpret_cast<const float4 *>(row + e * 4)),
                __ldg(reinterpret_cast<const float4 *>(row + e * 4 + 16))};
    }
    static DEV raw zero() { return {make_float4(0, 0, 0, 0), make_float4(0, 0, 0, 0)}; }
    static DEV void cvt(const raw &r, float *x)
    {
        x[0] = r.a.x, x[1] = r.a.y, x[2] = r.a.z, x[3] = r.a.w;
        x[4] = r.b.x, x[5] = r.b.y, x[6] = r.b.z, x[7] = r.b.w;
    }
};

template <bool BF16> struct Ld8Half {
    typedef uint4 raw;
    static DEV raw fetch(const uint8_t *row, int64_t e)
    {
        return __ldg(reinterpret_cast<const uint4 *>(row + e * 2));
    }
    static DEV raw zero() { return make_uint4(0, 0, 0, 0); }
    static DEV void cvt(const raw &u, float *x)
    {
        const unsigned w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const uint16_t lo = (uint16_t)(w[j] & 0xFFFFu), hi = (uint16_t)(w[j] >> 16);
            x[2 * j] = BF16 ? bf16_bits_to_f32(lo) : f16_bits_to_f32(lo);
            x[2 * j + 1] = BF16 ? bf16_bits_to_f32(hi) : f16_bits_to_f32(hi);
        }
    }
};

// q8_0: the 8 values lie in one block of 32 (e % 8 == 0); its bytes are
// only 2-byte aligned (blocks of 34 bytes), so four 2-byte loads, and the
// block's f16 scale. Each value is q * d, as kvc_q8_0_get.
struct Ld8Q8 {
    struct raw { unsigned q0, q1; float d; };
    static DEV raw fetch(const uint8_t *row, int64_t e)
    {
        const uint8_t *b = row + (e / KV_Q8_0_BLOCK) * KV_Q8_0_BYTES;
        const uint16_t *qs = reinterpret_cast<const uint16_t *>(b + 2 + e % KV_Q8_0_BLOCK);
        return {(unsigned)qs[0] | (unsigned)qs[1] << 16, (unsigned)qs[2] | (unsigned)qs[3] << 16,
                f16_bits_to_f32(*reinterpret_cast<const uint16_t *>(b))};
    }
    static DEV raw zero() { return {0u, 0u, 0.0f}; }
    static DEV void cvt(const raw &r, float *x)
    {
#pragma unroll
        for (int j = 0; j < 4; j++) {
            x[j] = __fmul_rn((float)(int8_t)(r.q0 >> (8 * j)), r.d);
            x[4 + j] = __fmul_rn((float)(int8_t)(r.q1 >> (8 * j)), r.d);
        }
    }
};

// The decode kernels' lane reductions, unrolled: with LPK (the lanes of
// a key group) a constant the dead steps vanish; with LPK 0 the group
// size lpk comes at run time and every step is a shuffle and a select, so
// that the code stays straight and the independent chains of a tile
// interleave (a loop with a run-time bound ran them one after another).
// xor-butterfly over lanes [from, 32) strides (from a power of two).
template <int LPK> DEV float lanes_sum(float v, int from)
{
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        if (LPK ? off >= LPK : true) {
            const float o = __shfl_xor_sync(0xffffffffu, v, off);
            v = LPK || off >= from ? __fadd_rn(v, o) : v;
        }
    }
    return v;
}

template <int LPK> DEV float lanes_max(float v, int from)
{
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
        if (LPK ? off >= LPK : true) {
            const float o = __shfl_xor_sync(0xffffffffu, v, off);
            v = LPK || off >= from ? fmaxf(v, o) : v;
        }
    }
    return v;
}

// Sum over the key group (lanes differing in the bits below lpk), the
// largest stride first.
template <int LPK> DEV float group_sum(float v, int lpk)
{
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        if (LPK ? off < LPK : true) {
            const float o = __shfl_xor_sync(0xffffffffu, v, off);
            v = LPK || off < lpk ? __fadd_rn(v, o) : v;
        }
    }
    return v;
}

// The lane's partial dot products of its UN keys (8 values each, raw as
// stored) with each head's 8 query values: s[g * UN + u] for head g, tile
// u, each summed j = 0..7 in order. Both folds below start from these.
template <typename LD, int GT, int UN>
DEV void key_partials(const typename LD::raw (&kx)[UN], const float (&qr)[GT][8],
                      float (&s)[GT * UN])
{
#pragma unroll
    for (int u = 0; u < UN; u++) {
        float kf[8];
        LD::cvt(kx[u], kf);
#pragma unroll
        for (int g = 0; g < GT; g++) {
            float d = 0.0f;
#pragma unroll
            for (int j = 0; j < 8; j++)
                d = __fmaf_rn(qr[g][j], kf[j], d);
            s[g * UN + u] = d;
        }
    }
}

// UN tiles folded into a warp's online softmax: kx / vx are this lane's
// raw K and V values of its key in tile u, ok[u] whether that key is in
// the split (at least tile 0's first key is); per query head g, qr the
// lane's 8 query values, m the max, l the exp-sum, acc the weighted V of
// the lane's 8 values. Heads past G (GT rounds G up) have zero queries
// and are never written: computing them keeps the code free of branches.
// Both decode kernels call it with the same tiles in the same order, so
// they give the same bytes.
template <typename LD, int GT, int UN, int LPK>
DEV void dec_tiles(const typename LD::raw (&kx)[UN], const typename LD::raw (&vx)[UN],
                   const bool (&ok)[UN], const float (&qr)[GT][8], float (&m)[GT], float (&l)[GT],
                   float (&acc)[GT][8], int lpk, float scale, float softcap)
{
    // Scores: each key's values once, for every head; then the key
    // groups' sums, all chains side by side.
    float s[GT * UN];
    key_partials<LD, GT, UN>(kx, qr, s);
#pragma unroll
    for (int u = 0; u < UN; u++)
#pragma unroll
        for (int g = 0; g < GT; g++)
            s[g * UN + u] = __fmul_rn(group_sum<LPK>(s[g * UN + u], lpk), scale);
    if (softcap > 0.0f) {
#pragma unroll
        for (int u = 0; u < UN; u++)
#pragma unroll
            for (int g = 0; g < GT; g++)
                s[g * UN + u] = __fmul_rn(tanhf(__fdiv_rn(s[g * UN + u], softcap)), softcap);
    }
#pragma unroll
    for (int u = 0; u < UN; u++)
#pragma unroll
        for (int g = 0; g < GT; g++)
            s[g * UN + u] = ok[u] ? s[g * UN + u] : -INFINITY;
#pragma unroll
    for (int g = 0; g < GT; g++) {
        float mt = -INFINITY;
#pragma unroll
        for (int u = 0; u < UN; u++)
            mt = fmaxf(mt, s[g * UN + u]);
        mt = lanes_max<LPK>(mt, lpk);
        const float mn = fmaxf(m[g], mt);
        const float alpha = expf(__fsub_rn(m[g], mn));
        m[g] = mn;
        l[g] = __fmul_rn(l[g], alpha);
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[g][j] = __fmul_rn(acc[g][j], alpha);
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const float p = ok[u] ? expf(__fsub_rn(s[g * UN + u], mn)) : 0.0f;
            float vf[8];
            LD::cvt(vx[u], vf);
            l[g] = __fadd_rn(l[g], p);
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[g][j] = __fmaf_rn(p, vf[j], acc[g][j]);
        }
    }
}

// The same fold by a reduce-scatter, for key groups of a constant LPK of
// 8, 16 or 32 lanes (head sizes 40 to 256). The key group's sums of the
// V = GT x UN partial dot products of the lane's tiles are taken over the
// same lanes in the same xor order as group_sum's butterfly, so every
// score is the same bit for bit; but at each step a lane keeps half of
// its values and sends the other half, so after log2(LPK) steps it holds
// V / LPK of the sums (or one, which LPK / V lanes hold): 15 shuffles for
// 16 sums where the butterfly took 64. A head's max is then a few
// shuffles over the lanes holding its sums, each exp is taken once (the
// butterfly's lanes took each of them LPK times), and each weight goes
// from the lane holding it to its key group as the V values are summed.
// m, acc and their rescaling are dec_tiles' operations in its order (a
// rescale by exp(0) = 1, where a head's max did not move, is skipped:
// the same bytes); only the exp-sum is summed in another order: l[0] is
// the lane's own sum of its weights, turned into the heads' sums by
// dec_lane_sums at the end.
__host__ __device__ constexpr int ilog2(int x) { return x <= 1 ? 0 : 1 + ilog2(x / 2); }

// Tiles a warp folds at once: eight heads' registers leave room for 2.
__host__ __device__ constexpr int dec_un(int gt) { return gt >= 8 ? 2 : DEC_UNROLL; }

// Where dec_tiles_rs's sums lie: V sums (index g * UN + u) over the LPK
// lanes of a key group (ch = lane % LPK); a lane holds NV of them from
// index ch * NV, or (V < LPK) the one of index ch >> REP, which the
// 1 << REP lanes differing in ch's low REP bits share; its head is
// ch >> GB.
template <int GT, int LPK> struct RsShape {
    static constexpr int UN = dec_un(GT), V = GT * UN;
    static constexpr int NV = V >= LPK ? V / LPK : 1;
    static constexpr int REP = V >= LPK ? 0 : ilog2(LPK / V);
    static constexpr int GB = ilog2(LPK / GT);
    static_assert(LPK >= 8 && GT <= LPK && NV <= UN, "a lane's sums are of one head");
};

// Step K of the reduce-scatter on the first C values of s: C halves at
// each step until one is left, then the steps add that one over the
// remaining lanes.
template <int LPK, int C, int K> struct RsStep {
    static DEV void run(float *s, int lane)
    {
        constexpr int off = LPK >> (K + 1);
        if constexpr (off >= 1) {
            if constexpr (C > 1) {
                constexpr int H = C / 2;
                const bool up = (lane & off) != 0;
#pragma unroll
                for (int j = 0; j < H; j++) {
                    const float send = up ? s[j] : s[j + H], keep = up ? s[j + H] : s[j];
                    s[j] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, off));
                }
                RsStep<LPK, H, K + 1>::run(s, lane);
            } else {
                s[0] = __fadd_rn(s[0], __shfl_xor_sync(0xffffffffu, s[0], off));
                RsStep<LPK, 1, K + 1>::run(s, lane);
            }
        }
    }
};

template <typename LD, int GT, int UN, int LPK>
DEV void dec_tiles_rs(const typename LD::raw (&kx)[UN], const typename LD::raw (&vx)[UN],
                      const bool (&ok)[UN], const float (&qr)[GT][8], float (&m)[GT],
                      float (&l)[GT], float (&acc)[GT][8], float scale, float softcap)
{
    typedef RsShape<GT, LPK> S;
    static_assert(S::UN == UN, "the tiles dec_un gives");
    constexpr int V = S::V, NV = S::NV, GB = S::GB;
    const int lane = threadIdx.x & 31, ch = lane & (LPK - 1), gl = ch >> GB;
    const int idx0 = V >= LPK ? ch * NV : ch >> S::REP;
    unsigned okm = 0;
#pragma unroll
    for (int u = 0; u < UN; u++)
        okm |= ok[u] ? 1u << u : 0u;
    static_assert(V == GT * UN, "one sum a head and tile");
    float s[V];
    key_partials<LD, GT, UN>(kx, qr, s);
    RsStep<LPK, V, 0>::run(s, lane);
    // The lane's sums scaled, capped and masked; their max over the lanes
    // of head gl (ch's bits below GB, the lane bits above the key group).
    float mt = -INFINITY;
#pragma unroll
    for (int r = 0; r < NV; r++) {
        float x = __fmul_rn(s[r], scale);
        if (softcap > 0.0f)
            x = __fmul_rn(tanhf(__fdiv_rn(x, softcap)), softcap);
        s[r] = (okm >> ((idx0 + r) % UN)) & 1u ? x : -INFINITY;
        mt = fmaxf(mt, s[r]);
    }
#pragma unroll
    for (int off = 1; off < (1 << GB); off <<= 1)
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
#pragma unroll
    for (int off = LPK; off < 32; off <<= 1)
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, off));
    float ml = -INFINITY; // head gl's max after this fold
#pragma unroll
    for (int g = 0; g < GT; g++) {
        const float mn = fmaxf(m[g], __shfl_xor_sync(0xffffffffu, mt, ch ^ (g << GB)));
        if (mn > m[g]) { // the same on every lane: no divergence
            const float alpha = expf(__fsub_rn(m[g], mn));
            l[0] = g == gl ? __fmul_rn(l[0], alpha) : l[0];
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[g][j] = __fmul_rn(acc[g][j], alpha);
            m[g] = mn;
        }
        ml = g == gl ? m[g] : ml;
    }
    float p[NV];
#pragma unroll
    for (int r = 0; r < NV; r++) {
        p[r] = expf(__fsub_rn(s[r], ml)); // 0 for a key past the split
        l[0] = __fadd_rn(l[0], p[r]);
    }
#pragma unroll
    for (int g = 0; g < GT; g++) {
#pragma unroll
        for (int u = 0; u < UN; u++) {
            const int idx = g * UN + u;
            const int holder = V >= LPK ? idx / NV : idx << S::REP;
            const float pv =
                __shfl_xor_sync(0xffffffffu, p[V >= LPK ? idx % NV : 0], ch ^ holder);
            float vf[8];
            LD::cvt(vx[u], vf);
#pragma unroll
            for (int j = 0; j < 8; j++)
                acc[g][j] = __fmaf_rn(pv, vf[j], acc[g][j]);
        }
    }
}

// dec_tiles_rs's l[0] (the lane's sum of its weights) into l[g], head g's
// exp-sum over the lane's key group, as dec_finish takes it: one lane of
// each sum counts it (its copies add 0), summed over the lanes of head g
// in ascending xor order, then passed to every lane.
template <int GT, int LPK> DEV void dec_lane_sums(float (&l)[GT])
{
    typedef RsShape<GT, LPK> S;
    const int lane = threadIdx.x & 31, ch = lane & (LPK - 1);
    float x = ch & ((1 << S::REP) - 1) ? 0.0f : l[0];
#pragma unroll
    for (int off = 1; off < (1 << S::GB); off <<= 1)
        x = __fadd_rn(x, __shfl_xor_sync(0xffffffffu, x, off));
#pragma unroll
    for (int g = 0; g < GT; g++)
        l[g] = __shfl_xor_sync(0xffffffffu, x, ch ^ (g << S::GB));
}

// One fold of a warp's UN tiles: the reduce-scatter where the key group's
// size is a constant it takes, else dec_tiles.
template <typename LD, int GT, int UN, int LPK>
DEV void dec_fold_tiles(const typename LD::raw (&kx)[UN], const typename LD::raw (&vx)[UN],
                        const bool (&ok)[UN], const float (&qr)[GT][8], float (&m)[GT],
                        float (&l)[GT], float (&acc)[GT][8], int lpk, float scale,
                        float softcap)
{
    if constexpr (LPK >= 8)
        dec_tiles_rs<LD, GT, UN, LPK>(kx, vx, ok, qr, m, l, acc, scale, softcap);
    else
        dec_tiles<LD, GT, UN, LPK>(kx, vx, ok, qr, m, l, acc, lpk, scale, softcap);
}

// The end of both decode kernels: the warp's key groups share m, so their
// sums are added; then the block's warps are merged in order (wacc:
// DEC_WARPS * GT * hd floats of shared memory; wm / wl: DEC_WARPS + 1
// rows) into the split's partial, pp + g * pstride for head g: [hd]
// weighted V, then max and exp-sum.
template <int GT>
DEV void dec_warps_merge(float *wacc, int wstride, float (*wm)[GT], float (*wl)[GT], int G, int hd,
                         float *pp, int64_t pstride);

template <int GT, int LPK>
DEV void dec_finish(const float (&m)[GT], const float (&l)[GT], const float (&acc)[GT][8],
                    float *wacc, float (*wm)[GT], float (*wl)[GT], int G, int hd, int lpk,
                    float *pp, int64_t pstride)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kslot = lane / lpk, ch = lane % lpk;
    const bool act = ch < hd / 8;
    const int acc_stride = GT * hd;
#pragma unroll
    for (int g = 0; g < GT; g++) {
        if (g >= G)
            break;
        const float lg = lanes_sum<LPK>(l[g], lpk);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float v = lanes_sum<LPK>(acc[g][j], lpk);
            if (kslot == 0 && act)
                wacc[warp * acc_stride + g * hd + ch * 8 + j] = v;
        }
        if (lane == 0) {
            wm[warp][g] = m[g];
            wl[warp][g] = lg;
        }
    }
    __syncthreads();
    dec_warps_merge<GT>(wacc, acc_stride, wm, wl, G, hd, pp, pstride);
}

// The block's warps merged in order into the split's partial, pp + g *
// pstride for head g: [hd] weighted V, then max and exp-sum. Warp w's
// weighted V of head g at wacc + w * wstride + g * hd, its max and
// exp-sum at wm[w][g], wl[w][g] (a warp without keys: -inf and 0); every
// thread of the block calls it after a barrier past those stores.
template <int GT>
DEV void dec_warps_merge(float *wacc, int wstride, float (*wm)[GT], float (*wl)[GT], int G, int hd,
                         float *pp, int64_t pstride)
{
    // Each warp's weight in head g's merge, exp(m_w - max), taken once
    // (into wm[w][g]); row DEC_WARPS holds the max and the exp-sum.
    if ((int)threadIdx.x < G) {
        const int g = threadIdx.x;
        float mx = -INFINITY;
        for (int w = 0; w < DEC_WARPS; w++)
            mx = fmaxf(mx, wm[w][g]);
        float ls = 0.0f;
        for (int w = 0; w < DEC_WARPS; w++) {
            const float f = expf(__fsub_rn(wm[w][g], mx)); // 0 for a warp without keys
            wm[w][g] = f;
            ls = __fmaf_rn(wl[w][g], f, ls);
        }
        wm[DEC_WARPS][g] = mx;
        wl[DEC_WARPS][g] = ls;
    }
    __syncthreads();
    for (int g = 0; g < G; g++) {
        float *pg = pp + (int64_t)g * pstride;
        for (int e = threadIdx.x; e < hd; e += DEC_THREADS) {
            float o = 0.0f;
            for (int w = 0; w < DEC_WARPS; w++)
                o = __fmaf_rn(wacc[w * wstride + g * hd + e], wm[w][g], o);
            pg[e] = o;
        }
        if (threadIdx.x == 0) {
            pg[hd] = wm[DEC_WARPS][g];
            pg[hd + 1] = wl[DEC_WARPS][g];
        }
    }
}

// Keys per lane group: the LPK lanes covering one key's head (hd / 8
// pieces, rounded up to a power of two).
ATTN_HD int dec_lpk(int hd)
{
    int lpk = 1;
    while (lpk < hd / 8)
        lpk <<= 1;
    return lpk;
}

// The lane's 8 query values of each head in registers, and an empty
// online softmax.
template <int GT>
DEV void dec_start(const float *__restrict__ q, const cu_attn &a, int i, int kvh, int ch, bool act,
                   float (&qr)[GT][8], float (&m)[GT], float (&l)[GT], float (&acc)[GT][8])
{
    const int hd = a.head_dim, G = a.n_heads / a.n_kv_heads;
#pragma unroll
    for (int g = 0; g < GT; g++) {
#pragma unroll
        for (int j = 0; j < 8; j++)
            qr[g][j] = g < G && act ? q[((int64_t)i * a.n_heads + (int64_t)kvh * G + g) * hd +
                                        ch * 8 + j]
                                    : 0.0f;
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++)
            acc[g][j] = 0.0f;
    }
}

// What the decode kernel works out first for its block (split, KV
// head, row): the split's keys [t0, t0 + nt) of the row's ns splits, its
// block table, the lane's place in its key group, and (dec_start) the
// lane's query values and an empty online softmax. The block's (split,
// KV head) comes from its index, split fastest. False: the row has fewer
// splits, and the whole block returns. The decode kernel and the combine
// kernel are launched with PDL (launch_pdl): each waits for the kernel
// before it first thing, so only their launches overlap.
struct DecBlock {
    int i, slot, kvh, hd, G, ns, nt;
    int64_t t0;
    const int32_t *table;
    int lane, warp, lpk, kpw, kslot, ch;
    bool act;
};

// The block's split (both decode kernels): false where the row has fewer.
DEV bool dec_span(const int32_t *__restrict__ meta, int n, const cu_attn &a, DecBlock &b)
{
    b.i = blockIdx.z;
    b.slot = (int)blockIdx.x;
    b.kvh = (int)blockIdx.y;
    b.hd = a.head_dim;
    b.G = a.n_heads / a.n_kv_heads;
    const int64_t pos = meta[b.i], lo = span_lo(pos, a.window), span = pos - lo + 1;
    const int64_t ck = attn_split_keys(span, a.splits, a.split_min);
    if ((int64_t)b.slot * ck >= span)
        return false;
    b.ns = (int)((span + ck - 1) / ck);
    b.t0 = lo + (int64_t)b.slot * ck;
    b.nt = (int)(min(pos, b.t0 + ck - 1) - b.t0 + 1);
    b.table = meta + 2 * n + meta[n + b.i];
    return true;
}

template <int GT, int LPK>
DEV bool dec_setup(const float *__restrict__ q, const int32_t *__restrict__ meta, int n,
                   const cu_attn &a, DecBlock &b, float (&qr)[GT][8], float (&m)[GT],
                   float (&l)[GT], float (&acc)[GT][8])
{
    pdl_trigger();
    pdl_wait(); // q and the K/V rows come from the kernels before
    if (!dec_span(meta, n, a, b))
        return false;
    b.lane = threadIdx.x & 31;
    b.warp = threadIdx.x >> 5;
    b.lpk = LPK ? LPK : dec_lpk(b.hd);
    b.kpw = 32 / b.lpk;
    b.kslot = b.lane / b.lpk;
    b.ch = b.lane % b.lpk;
    b.act = b.ch < b.hd / 8;
    dec_start<GT>(q, a, b.i, b.kvh, b.ch, b.act, qr, m, l, acc);
    return true;
}

// The end of the decode kernel: the warps' softmaxes merged into the
// split's partial (wacc: DEC_WARPS * GT * hd floats of shared memory);
// attn_decode_combine_kernel then merges a row's splits.
template <int GT, int LPK>
DEV void dec_end(const DecBlock &b, const cu_attn &a, const float (&m)[GT], float (&l)[GT],
                 const float (&acc)[GT][8], float *wacc, float (*wm)[GT], float (*wl)[GT],
                 int max_splits, float *__restrict__ part)
{
    if constexpr (LPK >= 8)
        dec_lane_sums<GT, LPK>(l);
    const int hd = b.hd, G = b.G;
    const int64_t pstride = (int64_t)max_splits * (hd + 2);
    float *pp = part + ((int64_t)b.i * a.n_heads + (int64_t)b.kvh * G) * pstride;
    dec_finish<GT, LPK>(m, l, acc, wacc, wm, wl, G, hd, b.lpk, pp + (int64_t)b.slot * (hd + 2),
                        pstride);
}

// The split's keys folded with each lane's K/V loaded into registers
// (DEC_UNROLL tiles in flight), a piece of row offsets at a time.
template <typename LD, int GT, int LPK>
DEV void dec_keys_direct(const DecBlock &b, const cu_attn &a, int n_blocks, int bs,
                         int64_t row_bytes, const uint8_t *__restrict__ kp,
                         const uint8_t *__restrict__ vp, int64_t (&roff)[2][DEC_PIECE],
                         const float (&qr)[GT][8], float (&m)[GT], float (&l)[GT],
                         float (&acc)[GT][8])
{
    constexpr int UN = dec_un(GT);
    const int nt = b.nt, kpw = b.kpw, kslot = b.kslot, warp = b.warp;
    const bool act = b.act;
    const int64_t e0 = (int64_t)b.kvh * b.hd + (int64_t)b.ch * 8;
    for (int p0 = 0; p0 < nt; p0 += DEC_PIECE) {
        const int np = min(DEC_PIECE, nt - p0);
        __syncthreads(); // the previous piece's offsets are read
        for (int tt = threadIdx.x; tt < np; tt += DEC_THREADS)
            roff[0][tt] = kv_row_index(b.table, b.t0 + p0 + tt, a.layer, n_blocks, bs) * row_bytes;
        __syncthreads();
        const int ntiles = (np + kpw - 1) / kpw;
        // Warp w takes tiles w, w + DEC_WARPS, ...; UN of them at once.
        for (int tb = warp; tb < ntiles; tb += DEC_WARPS * UN) {
            typename LD::raw kx[UN], vx[UN];
            bool ok[UN];
#pragma unroll
            for (int u = 0; u < UN; u++) {
                const int tt = (tb + u * DEC_WARPS) * kpw + kslot;
                ok[u] = tt < np;
                kx[u] = vx[u] = LD::zero();
                if (ok[u] && act) {
                    kx[u] = LD::fetch(kp + roff[0][tt], e0);
                    vx[u] = LD::fetch(vp + roff[0][tt], e0);
                }
            }
            dec_fold_tiles<LD, GT, UN, LPK>(kx, vx, ok, qr, m, l, acc, b.lpk, a.scale, a.softcap);
        }
    }
}

// The same rounds of UN tiles folded in the same order, so the same bytes,
// with each warp's K/V copied ahead (f16 / bf16 caches, key groups of 8
// to 32 lanes): a lane copies its own 16 bytes of K and of V for round
// j + S - 1 (cp.async, a group a round) into its slots of an S-deep ring
// in shared memory (dec_ring_bytes, after wacc) while it folds round j,
// then reads back only what it copied: no barrier beyond the pieces' row
// offsets, which are staged a piece ahead in two buffers.
// The decode kernel's static shared memory (roff, wm, wl, last).
template <int GT> constexpr size_t dec_static_smem()
{
    return 2 * DEC_PIECE * sizeof(int64_t) + 2 * (DEC_WARPS + 1) * GT * sizeof(float) +
           sizeof(unsigned);
}

template <int UN, int S> constexpr size_t dec_ring_bytes()
{
    return (size_t)S * DEC_WARPS * UN * 2 * 32 * sizeof(uint4);
}

// A warp's rounds in order: piece p, first tile tb (tiles tb + u *
// DEC_WARPS); p == pieces once they are done. Only a split's last piece
// is short, so a warp may have no round in it.
struct DecRound {
    int p, tb;
};

DEV int dec_piece_keys(int nt, int p) { return min(DEC_PIECE, nt - p * DEC_PIECE); }

DEV DecRound dec_round_norm(DecRound r, int nt, int pieces, int kpw, int warp)
{
    while (r.p < pieces && r.tb >= (dec_piece_keys(nt, r.p) + kpw - 1) / kpw)
        r = DecRound{r.p + 1, warp};
    return r;
}

template <typename LD, int GT, int LPK, int S>
DEV void dec_keys_ring(const DecBlock &b, const cu_attn &a, int n_blocks, int bs,
                       int64_t row_bytes, const uint8_t *__restrict__ kp,
                       const uint8_t *__restrict__ vp, int64_t (&roff)[2][DEC_PIECE],
                       uint4 *ring_base, const float (&qr)[GT][8], float (&m)[GT],
                       float (&l)[GT], float (&acc)[GT][8])
{
    static_assert(sizeof(typename LD::raw) == sizeof(uint4) && LPK >= 8 && S >= 2,
                  "16-byte pieces, a constant key group");
    constexpr int UN = dec_un(GT);
    constexpr int STEP = DEC_WARPS * UN; // tiles a round of the block takes
    const int nt = b.nt, kpw = b.kpw, kslot = b.kslot, warp = b.warp;
    const bool act = b.act;
    const int64_t e0 = (int64_t)b.kvh * b.hd + (int64_t)b.ch * 8;
    const int pieces = (nt + DEC_PIECE - 1) / DEC_PIECE;
    // Slot (s, u, K or V) of this lane: 16-byte words, a warp's lanes side
    // by side.
    uint4 *ring = ring_base + warp * UN * 2 * 32 + b.lane;
    auto slot = [&](int s, int u, int kv) { return ring + ((s * DEC_WARPS * UN + u) * 2 + kv) * 32; };
    auto stage_offsets = [&](int p) {
        const int np = dec_piece_keys(nt, p);
        for (int tt = threadIdx.x; tt < np; tt += DEC_THREADS)
            roff[p & 1][tt] =
                kv_row_index(b.table, b.t0 + (int64_t)p * DEC_PIECE + tt, a.layer, n_blocks, bs) *
                row_bytes;
    };
    // Copies of round r into ring slot s (none past the last round): a key
    // past the piece, or a lane past the head, copies no byte and zeroes
    // its slots (the zero loads of dec_keys_direct), so the fold reads
    // every slot. One group either way, so that the waits count rounds.
    const uint8_t *kl = kp + e0 * 2, *vl = vp + e0 * 2;
    auto issue = [&](DecRound r, int s) {
        if (r.p < pieces) {
            const int np = dec_piece_keys(nt, r.p);
            const int64_t *ro = roff[r.p & 1];
#pragma unroll
            for (int u = 0; u < UN; u++) {
                const int tt = (r.tb + u * DEC_WARPS) * kpw + kslot;
                const bool ok = tt < np && act;
                const int64_t off = ok ? ro[tt] : 0;
                cp_async16(slot(s, u, 0), kl + off, ok ? 16 : 0);
                cp_async16(slot(s, u, 1), vl + off, ok ? 16 : 0);
            }
        }
        cp_async_commit();
    };

    stage_offsets(0);
    if (pieces > 1)
        stage_offsets(1);
    __syncthreads();
    DecRound ahead = dec_round_norm(DecRound{0, warp}, nt, pieces, kpw, warp);
    int si = 0, sf = 0; // the ring slots of the next copy and the next fold
#pragma unroll
    for (int k = 0; k < S - 1; k++) {
        issue(ahead, si);
        si = si + 1 == S ? 0 : si + 1;
        ahead = dec_round_norm(DecRound{ahead.p, ahead.tb + STEP}, nt, pieces, kpw, warp);
    }
    for (int p = 0; p < pieces; p++) {
        if (p > 0) { // every warp has issued piece p - 1's copies: its buffer is free
            __syncthreads();
            if (p + 1 < pieces)
                stage_offsets(p + 1);
            __syncthreads();
        }
        const int np = dec_piece_keys(nt, p), ntiles = (np + kpw - 1) / kpw;
        for (int tb = warp; tb < ntiles; tb += STEP) {
            issue(ahead, si);
            si = si + 1 == S ? 0 : si + 1;
            ahead = dec_round_norm(DecRound{ahead.p, ahead.tb + STEP}, nt, pieces, kpw, warp);
            cp_async_wait<S - 1>();
            const int s = sf;
            sf = sf + 1 == S ? 0 : sf + 1;
            typename LD::raw kx[UN], vx[UN];
            bool ok[UN];
#pragma unroll
            for (int u = 0; u < UN; u++) {
                ok[u] = (tb + u * DEC_WARPS) * kpw + kslot < np;
                kx[u] = *slot(s, u, 0);
                vx[u] = *slot(s, u, 1);
            }
            dec_fold_tiles<LD, GT, UN, LPK>(kx, vx, ok, qr, m, l, acc, b.lpk, a.scale, a.softcap);
        }
    }
    cp_async_wait<0>();
}

// The merge of a row's splits, head by head: split c's weight is
// exp(m_c - max); the exp-sums are added in ascending order, and value e of
// a head's output is COMBINE_WAYS sums over the splits c = j (mod
// COMBINE_WAYS), each ascending, added in order of j: a fixed shape, the
// same bytes whichever block runs it. Heads h0 .. h0 + nh - 1 of the row
// (pp: head h0's partials, [split][hd + 2], the next head pstride further;
// out, out_bf: head h0's output); every thread of the block calls it. The
// maxima and exp-sums go through shared memory once (wt, ls: nh * ns
// floats, mx: nh); each thread takes values t, t + blockDim.x, ... of the
// nh * hd and has COMBINE_UNROLL of its loads in flight. CG: the partials
// come from other blocks of the same launch, read past L1.
constexpr int COMBINE_WAYS = 4;
constexpr int COMBINE_UNROLL = 32;

template <bool CG> DEV float dec_part_load(const float *p) { return CG ? __ldcg(p) : *p; }

template <bool CG>
__device__ __noinline__ void dec_merge(const float *__restrict__ pp, int64_t pstride, int nh, int ns, int hd,
                   float *wt, float *ls, float *mx, float *__restrict__ out,
                   __nv_bfloat16 *__restrict__ out_bf)
{
    for (int k = threadIdx.x; k < nh * ns; k += blockDim.x) {
        const int g = k / ns, c = k - g * ns;
        const float *pc = pp + g * pstride + (int64_t)c * (hd + 2) + hd;
        wt[k] = dec_part_load<CG>(pc);
        ls[k] = dec_part_load<CG>(pc + 1);
    }
    __syncthreads();
    if ((int)threadIdx.x < nh) { // a max: exact in any order
        float m = -INFINITY;
        for (int c = 0; c < ns; c++)
            m = fmaxf(m, wt[threadIdx.x * ns + c]);
        mx[threadIdx.x] = m;
    }
    __syncthreads(); // every maximum is taken
    for (int k = threadIdx.x; k < nh * ns; k += blockDim.x)
        wt[k] = expf(__fsub_rn(wt[k], mx[k / ns]));
    __syncthreads();
    static_assert(COMBINE_WAYS == 4 && COMBINE_UNROLL % COMBINE_WAYS == 0, "ways written out");
    for (int v = threadIdx.x; v < nh * hd; v += blockDim.x) {
        const int g = v / hd, e = v - g * hd;
        const float *w = wt + g * ns, *lg = ls + g * ns;
        float l = 0.0f;
        for (int c = 0; c < ns; c++)
            l = __fmaf_rn(lg[c], w[c], l);
        float acc[COMBINE_WAYS] = {0.0f, 0.0f, 0.0f, 0.0f};
        const float *pe = pp + g * pstride + e;
        int c = 0;
        for (; c + COMBINE_UNROLL <= ns; c += COMBINE_UNROLL) {
            float x[COMBINE_UNROLL];
#pragma unroll
            for (int u = 0; u < COMBINE_UNROLL; u++)
                x[u] = dec_part_load<CG>(pe + (int64_t)(c + u) * (hd + 2));
#pragma unroll
            for (int u = 0; u < COMBINE_UNROLL; u++)
                acc[u % COMBINE_WAYS] = __fmaf_rn(x[u], w[c + u], acc[u % COMBINE_WAYS]);
        }
        for (; c < ns; c++) { // c % COMBINE_WAYS continues the ways' cycle
            const float x = dec_part_load<CG>(pe + (int64_t)c * (hd + 2)), wc = w[c];
#pragma unroll
            for (int j = 0; j < COMBINE_WAYS; j++)
                acc[j] = (c & (COMBINE_WAYS - 1)) == j ? __fmaf_rn(x, wc, acc[j]) : acc[j];
        }
        float o = acc[0];
#pragma unroll
        for (int j = 1; j < COMBINE_WAYS; j++)
            o = __fadd_rn(o, acc[j]);
        const float r = __fdiv_rn(o, l);
        out[v] = r;
        if (out_bf)
            out_bf[v] = __float2bfloat16_rn(r);
    }
}

// Block (row, head): merge the row's splits (dec_merge), where the decode
// kernel's blocks do not (more than DEC_FOLD_MAX splits).
__global__ void __launch_bounds__(256)
attn_decode_combine_kernel(const float *__restrict__ part, const int32_t *__restrict__ meta,
                           cu_attn a, int max_splits, float *__restrict__ out)
{
    __shared__ float wt[ATTN_SPLITS_MAX], ls[ATTN_SPLITS_MAX], mx[1];
    pdl_trigger();
    pdl_wait();
    const int i = blockIdx.x, h = blockIdx.y, hd = a.head_dim;
    const int64_t pos = meta[i], span = pos - span_lo(pos, a.window) + 1;
    const int64_t ck = attn_split_keys(span, a.splits, a.split_min);
    const int ns = (int)((span + ck - 1) / ck);
    const float *pp = part + ((int64_t)i * a.n_heads + h) * max_splits * (hd + 2);
    const int64_t o = ((int64_t)i * a.n_heads + h) * hd;
    dec_merge<false>(pp, 0, 1, ns, hd, wt, ls, mx, out + o,
                     a.out_bf ? static_cast<__nv_bfloat16 *>(a.out_bf) + o : nullptr);
}

template <int GT>
DEV void dec_fold_last(const DecBlock &b, const cu_attn &a, unsigned *__restrict__ cnt,
                       int max_splits, float *__restrict__ part, float *wacc, float (*wm)[GT],
                       float *__restrict__ out, unsigned &last);

// Partials as the old kernel lays them out: [row][head][slot][hd + 2].
// MINB: the blocks an SM the registers must allow (dec_minb); S: the
// ring's depth (dec_ring), 0 for loads into registers.
template <typename LD, int GT, int LPK, int MINB, int S>
__global__ void __launch_bounds__(DEC_THREADS, MINB)
attn_decode_kernel(const float *__restrict__ q, const int32_t *__restrict__ meta, int n, cu_attn a,
                   int n_blocks, int bs, int64_t row_bytes, const uint8_t *__restrict__ kp,
                   const uint8_t *__restrict__ vp, int max_splits, float *__restrict__ part,
                   unsigned *__restrict__ cnt, float *__restrict__ out)
{
    __shared__ int64_t roff[2][DEC_PIECE]; // (dec_static_smem counts these)
    __shared__ float wm[DEC_WARPS + 1][GT], wl[DEC_WARPS + 1][GT];
    extern __shared__ float wacc[]; // [DEC_WARPS][GT][hd], then the ring
    DecBlock b;
    float qr[GT][8], m[GT], l[GT], acc[GT][8];
    if (!dec_setup<GT, LPK>(q, meta, n, a, b, qr, m, l, acc))
        return;
    if constexpr (S > 0)
        dec_keys_ring<LD, GT, LPK, S>(b, a, n_blocks, bs, row_bytes, kp, vp, roff,
                                      reinterpret_cast<uint4 *>(wacc + DEC_WARPS * GT * b.hd), qr,
                                      m, l, acc);
    else
        dec_keys_direct<LD, GT, LPK>(b, a, n_blocks, bs, row_bytes, kp, vp, roff, qr, m, l, acc);
    dec_end<GT, LPK>(b, a, m, l, acc, wacc, wm, wl, max_splits, part);
    __shared__ unsigned last;
    dec_fold_last<GT>(b, a, cnt, max_splits, part, wacc, wm, out, last);
}

// After the block's partials are out (cnt: the launch's blocks merge the
// splits, else null and attn_decode_combine_kernel does): the row's last
// block of the KV head to finish merges its G heads. Every block's
// partials are out before its count (the fence), and the last one counted
// sees them all; it leaves the count at 0 for the next launch. wacc: at
// least 2 * GT * DEC_FOLD_MAX floats of shared memory, free.
template <int GT>
DEV void dec_fold_last(const DecBlock &b, const cu_attn &a, unsigned *__restrict__ cnt,
                       int max_splits, float *__restrict__ part, float *wacc, float (*wm)[GT],
                       float *__restrict__ out, unsigned &last)
{
    if (!cnt)
        return;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *c = cnt + (int64_t)b.i * a.n_kv_heads + b.kvh;
        last = b.ns == 1 || atomicAdd(c, 1u) == (unsigned)b.ns - 1;
        if (last && b.ns > 1)
            *c = 0;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const int hd = b.hd, G = b.G;
    const int64_t h0 = (int64_t)b.i * a.n_heads + (int64_t)b.kvh * G;
    // wacc (read by the warps' merge before its last barrier) holds the
    // weights and exp-sums.
    static_assert(2 * DEC_FOLD_MAX <= DEC_WARPS * 8, "the merge's lists fit in wacc");
    dec_merge<true>(part + h0 * max_splits * (hd + 2), (int64_t)max_splits * (hd + 2), G, b.ns, hd,
                    wacc, wacc + G * b.ns, &wm[0][0], out + h0 * hd,
                    a.out_bf ? static_cast<__nv_bfloat16 *>(a.out_bf) + h0 * hd : nullptr);
}

// ---- decode on the tensor cores ----
//
// bf16 caches, heads of 128 or 256 in groups of 4 to 8 (attn_decode_mma):
// the same splits and partials as attn_decode_kernel, each warp's keys in
// tiles of 16 folded by m16n8k16 mma with f32 sums. Scores S^T (16 keys x
// 8 heads) = K (16 x hd) Q^T; the weighted V O^T (hd x 8 heads) += V^T
// P^T. K and V enter as stored; q and the weights p are f32, each given as
// three bf16 parts whose sum is the value (x0 = bf16(x), x1 = bf16(x -
// x0), x2 = bf16(x - x0 - x1): 24 bits of significand), a product's three
// parts summed in its own f32 accumulator: every product is exact, so
// only the sums' order and rounding differ from the CUDA cores' fold, and
// the tensor cores do the arithmetic that bounded that fold at 8 heads a
// KV head (kernel check: H100, one row of 32,768 keys, 16/2x256 78 us).
// Heads past the group have zero queries and are never stored. Each warp
// copies its tiles (cp.async) into its own two-tile ring in shared memory,
// one in flight while it folds the other, its row offsets a tile ahead of
// the copies; the block then merges its warps and its splits as the other
// kernel does.
constexpr int MMA_KEYS = 16; // keys of a tile

template <int HD> struct MmaDec {
    static constexpr int RING = 2;                // a warp's tiles in shared memory
    static constexpr int KS = HD / 16;            // the scores' k-steps, the output's m-tiles
    static constexpr int ROW = HD * 2 + 16;       // a staged row's bytes (the pad: ldmatrix's
                                                  // eight rows in distinct banks)
    static constexpr int STAGE = 2 * MMA_KEYS * ROW; // a tile's K rows, then its V rows
    static constexpr int CH = HD * 2 / 16;        // 16-byte pieces of a head's row
    // Shared memory: the warps' rings (warp w's slice of the warps' merge,
    // 8 x HD floats, over its own ring once its keys are done), then each
    // warp's 16 x 8 weights for their transpose.
    static constexpr size_t smem =
        (size_t)DEC_WARPS * RING * STAGE + (size_t)DEC_WARPS * MMA_KEYS * 8 * sizeof(float);
    static_assert(RING * STAGE >= 8 * HD * (int)sizeof(float), "a warp's merge slice fits");
    static_assert((CH * MMA_KEYS) % 32 == 0, "a tile's pieces cover the warp");
};

// x as three bf16 parts (bits), largest first: their sum is x (f32).
DEV void bf16_split3(float x, uint16_t (&h)[3])
{
    h[0] = kvc_f32_to_bf16(x);
    float r = __fsub_rn(x, bf16_bits_to_f32(h[0]));
    h[1] = kvc_f32_to_bf16(r);
    r = __fsub_rn(r, bf16_bits_to_f32(h[1]));
    h[2] = kvc_f32_to_bf16(r);
}

// Two values' parts packed as mma operands: part j of lo in the low half.
DEV void bf16_pack3(float lo, float hi, unsigned (&r)[3])
{
    uint16_t a[3], b[3];
    bf16_split3(lo, a);
    bf16_split3(hi, b);
#pragma unroll
    for (int j = 0; j < 3; j++)
        r[j] = (unsigned)a[j] | (unsigned)b[j] << 16;
}

template <int HD>
__global__ void __launch_bounds__(DEC_THREADS, ATTN_DECODE_MMA_BLOCKS(HD))
attn_decode_mma_kernel(const float *__restrict__ q, const int32_t *__restrict__ meta, int n,
                       cu_attn a, int n_blocks, int bs, int64_t row_bytes,
                       const uint8_t *__restrict__ kp, const uint8_t *__restrict__ vp,
                       int max_splits, float *__restrict__ part, unsigned *__restrict__ cnt,
                       float *__restrict__ out)
{
    typedef MmaDec<HD> M;
    __shared__ float wm[DEC_WARPS + 1][8], wl[DEC_WARPS + 1][8];
    __shared__ unsigned last;
    extern __shared__ uint4 mma_dyn[];
    unsigned char *const mma_smem = reinterpret_cast<unsigned char *>(mma_dyn);
    DecBlock b;
    pdl_trigger();
    pdl_wait(); // q and the K/V rows come from the kernels before
    if (!dec_span(meta, n, a, b))
        return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const int G = b.G, nt = b.nt, ntiles = (nt + MMA_KEYS - 1) / MMA_KEYS;
    unsigned char *ring = mma_smem + (size_t)warp * M::RING * M::STAGE;
    float *pt = reinterpret_cast<float *>(mma_smem + (size_t)DEC_WARPS * M::RING * M::STAGE) +
                warp * MMA_KEYS * 8;

    // Q^T's fragments (k = the head's values, n = heads): b[0] values
    // 16 ks + 2t, + 1 of head g, b[1] 8 further; three parts each.
    unsigned qf[3][M::KS][2];
    {
        const float *qh = q + ((int64_t)b.i * a.n_heads + (int64_t)b.kvh * G + g) * HD + 2 * t;
#pragma unroll
        for (int ks = 0; ks < M::KS; ks++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float2 x = g < G ? *reinterpret_cast<const float2 *>(qh + ks * 16 + h * 8)
                                       : make_float2(0.0f, 0.0f);
                unsigned r[3];
                bf16_pack3(x.x, x.y, r);
#pragma unroll
                for (int j = 0; j < 3; j++)
                    qf[j][ks][h] = r[j];
            }
    }
    // The online softmax of heads 2t and 2t + 1 (the same on the lanes of
    // one t); o[m]: O^T's m-tile m, values 16 m + g (0, 1) and + 8 (2, 3)
    // of heads 2t (0, 2) and 2t + 1 (1, 3).
    float o[M::KS][4], mr[2] = {-INFINITY, -INFINITY}, lr[2] = {0.0f, 0.0f};
#pragma unroll
    for (int m = 0; m < M::KS; m++)
        o[m][0] = o[m][1] = o[m][2] = o[m][3] = 0.0f;

    // Tile T's row offsets: lane k (and k + 16) takes key 16 T + k, -1 past
    // the split; the copies take them by shuffles.
    const int64_t col = (int64_t)b.kvh * HD * 2;
    auto offset = [&](int T) -> int64_t {
        const int tt = T * MMA_KEYS + (lane & 15);
        return T < ntiles && tt < nt
                   ? kv_row_index(b.table, b.t0 + tt, a.layer, n_blocks, bs) * row_bytes + col
                   : (int64_t)-1;
    };
    // Tile T's K and V rows into ring stage s (a key past the split copies
    // no byte and zeroes its row); one group either way, so that the waits
    // count tiles.
    auto issue = [&](int T, int64_t off, int s) {
        if (T < ntiles) {
            unsigned char *st = ring + s * M::STAGE;
#pragma unroll
            for (int j = 0; j < M::CH * MMA_KEYS / 32; j++) {
                const int c = j * 32 + lane, key = c / M::CH, pc = c % M::CH;
                const int64_t ko =
                    (int64_t)((uint64_t)(unsigned)__shfl_sync(0xffffffffu, (int)(off >> 32), key) << 32 |
                              (unsigned)__shfl_sync(0xffffffffu, (int)(uint32_t)off, key));
                const int64_t src = ko >= 0 ? ko + pc * 16 : 0;
                const int nb = ko >= 0 ? 16 : 0;
                cp_async16(st + key * M::ROW + pc * 16, kp + src, nb);
                cp_async16(st + (MMA_KEYS + key) * M::ROW + pc * 16, vp + src, nb);
            }
        }
        cp_async_commit();
    };

    // Warp w folds tiles w, w + DEC_WARPS, ... in order: its ring's first
    // tiles now, each further one into the stage its fold just freed.
    int64_t ahead = offset(warp);
#pragma unroll
    for (int s0 = 0; s0 < M::RING; s0++) {
        issue(warp + s0 * DEC_WARPS, ahead, s0);
        ahead = offset(warp + (s0 + 1) * DEC_WARPS);
    }
    for (int r = 0; warp + r * DEC_WARPS < ntiles; r++) {
        const int T = warp + r * DEC_WARPS;
        cp_async_wait<M::RING - 1>();
        __syncwarp();
        const unsigned char *sk = ring + (r % M::RING) * M::STAGE, *sv = sk + MMA_KEYS * M::ROW;
        // Scores: A = K's 16 x 16 pieces (lane l: key l % 16, values 8 (l / 16) on).
        float sp[3][4];
#pragma unroll
        for (int j = 0; j < 3; j++)
            sp[j][0] = sp[j][1] = sp[j][2] = sp[j][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < M::KS; ks++) {
            unsigned af[4];
            ldmatrix_x4(af, sk + (lane & 15) * M::ROW + ks * 32 + (lane >> 4) * 16);
#pragma unroll
            for (int j = 0; j < 3; j++)
                mma_bf16_16816(sp[j], af, qf[j][ks]);
        }
        // s[e]: key g (e 0, 1) or g + 8 (2, 3), head 2t + (e & 1).
        float s[4], mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float x = __fmul_rn(__fadd_rn(sp[0][e], __fadd_rn(sp[1][e], sp[2][e])), a.scale);
            if (a.softcap > 0.0f)
                x = __fmul_rn(tanhf(__fdiv_rn(x, a.softcap)), a.softcap);
            s[e] = T * MMA_KEYS + g + (e >> 1) * 8 < nt ? x : -INFINITY;
            mx[e & 1] = fmaxf(mx[e & 1], s[e]);
        }
        float al[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
#pragma unroll
            for (int off = 4; off < 32; off <<= 1)
                mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], off));
            const float mn = fmaxf(mr[h], mx[h]); // finite: the tile's first key is in the split
            al[h] = expf(__fsub_rn(mr[h], mn));
            mr[h] = mn;
        }
        float p[4];
#pragma unroll
        for (int e = 0; e < 4; e++)
            p[e] = expf(__fsub_rn(s[e], mr[e & 1])); // 0 past the split
#pragma unroll
        for (int h = 0; h < 2; h++)
            lr[h] = __fadd_rn(__fmul_rn(lr[h], al[h]), __fadd_rn(p[h], p[h + 2]));
#pragma unroll
        for (int m = 0; m < M::KS; m++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                o[m][e] = __fmul_rn(o[m][e], al[e & 1]);
        // P^T's fragment (k = keys, n = heads): keys 2t, 2t + 1 of head g,
        // and 8 further, through the warp's 16 x 8 in shared memory.
        *reinterpret_cast<float2 *>(pt + g * 8 + 2 * t) = make_float2(p[0], p[1]);
        *reinterpret_cast<float2 *>(pt + (g + 8) * 8 + 2 * t) = make_float2(p[2], p[3]);
        __syncwarp();
        unsigned pf[3][2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            unsigned r[3];
            bf16_pack3(pt[(2 * t + 8 * h) * 8 + g], pt[(2 * t + 8 * h + 1) * 8 + g], r);
#pragma unroll
            for (int j = 0; j < 3; j++)
                pf[j][h] = r[j];
        }
        // O^T += V^T P^T: A = V^T's 16 x 16 pieces, transposed from the
        // stored rows (lane l: key (l % 8) + 8 (l / 16), values 8 ((l / 8) % 2) on).
#pragma unroll
        for (int m = 0; m < M::KS; m++) {
            unsigned vf[4];
            ldmatrix_x4_trans(vf, sv + ((lane & 7) + 8 * (lane >> 4)) * M::ROW + m * 32 +
                                      ((lane >> 3) & 1) * 16);
#pragma unroll
            for (int j = 0; j < 3; j++)
                mma_bf16_16816(o[m], vf, pf[j]);
        }
        __syncwarp(); // the stage and pt are read before they are written again
        issue(T + M::RING * DEC_WARPS, ahead, r % M::RING);
        ahead = offset(T + (M::RING + 1) * DEC_WARPS);
    }
    cp_async_wait<0>();
    __syncwarp();
    // The warp's exp-sums over its lanes of each t; its slice of the
    // warps' merge over its own ring.
#pragma unroll
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int off = 4; off < 32; off <<= 1)
            lr[h] = __fadd_rn(lr[h], __shfl_xor_sync(0xffffffffu, lr[h], off));
    float *wacc = reinterpret_cast<float *>(ring);
    const int wstride = M::RING * M::STAGE / (int)sizeof(float);
#pragma unroll
    for (int m = 0; m < M::KS; m++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int h = 2 * t + (e & 1);
            if (h < G)
                wacc[h * HD + m * 16 + g + (e >> 1) * 8] = o[m][e];
        }
    if (g == 0)
#pragma unroll
        for (int h = 0; h < 2; h++)
            if (2 * t + h < G) {
                wm[warp][2 * t + h] = mr[h];
                wl[warp][2 * t + h] = lr[h];
            }
    __syncthreads();
    const int64_t pstride = (int64_t)max_splits * (HD + 2);
    float *pp = part + ((int64_t)b.i * a.n_heads + (int64_t)b.kvh * G) * pstride;
    dec_warps_merge<8>(reinterpret_cast<float *>(mma_smem), wstride, wm, wl, G, HD,
                       pp + (int64_t)b.slot * (HD + 2), pstride);
    dec_fold_last<8>(b, a, cnt, max_splits, part, reinterpret_cast<float *>(mma_smem), wm, out,
                     last);
}

// The decode kernel's blocks an SM by the rows of a launch: up to four
// heads a group, a launch of DEC_MANY_ROWS rows or more takes four (128
// registers a thread; the Qwen3-8B shape's instance takes 151 at three, so
// 64 rows ran 12 warps an SM), fewer rows three (their blocks fill the card
// without it, and the extra registers serve a long row: H200, 2026-12-04,
// one layer of 64 rows x 512 keys 69.9 -> 61.3 us, one row of 8,192 keys
// 20.9 -> 23.1 us). The same code either way: the same bytes.
// Only the f16 / bf16 caches' instances for heads of 128 and 256 take
// four blocks (with the ring of dec_ring, 16 to 24 bytes of spill).
constexpr int DEC_MANY_ROWS = 16;
template <typename LD> struct DecHalf { static constexpr bool value = false; };
template <bool B> struct DecHalf<Ld8Half<B>> { static constexpr bool value = true; };
template <typename LD, int GT, int LPK> constexpr int dec_minb(bool many)
{
    return GT >= 8 ? 2 : many && DecHalf<LD>::value && LPK >= 16 ? 4 : 3;
}

// The depth of the decode kernel's K/V ring (dec_keys_ring) by its blocks
// an SM: as deep as their shared memory allows, 0 where a lane's K/V are
// not 16-byte pieces (f32 and q8_0 caches) or the key group's size is not
// a constant, and 0 for a launch of fewer than DEC_MANY_ROWS rows. H200,
// 2026-12-04, one layer of the Qwen3-8B shape (bf16 KV), the op graphed
// alone, loads into registers / ring of 2 / ring of 3: 64 rows x 512 keys
// (four blocks an SM) 61.2 / 59.1 / 62.5 (three blocks: the ring of 3 does
// not leave room for four); one row of 32,768 keys 58.0 / 50.9 / 49.8 us,
// of 8,192 keys 20.7 / 19.7 / 19.4 us. But in the whole decode step one
// row runs faster without it (H100, 2026-12-05, tg of one sequence, two
// rounds alternated, ring of 3 / none: Qwen3-8B BF16 162.1-162.7 / 168.8-
// 168.9 tok/s at depth 0, 151.0 / 155.5 at 8,192, 123.7 / 129.6 at 32,768;
// Qwen3.5-9B BF16 140.5-140.7 / 154.3 at depth 0; decision 0008). The same
// folds either way: the same bytes.
template <typename LD, int LPK> constexpr int dec_ring(int minb, bool many)
{
    return DecHalf<LD>::value && LPK >= 8 && many ? (minb >= 4 ? 2 : 3) : 0;
}

template <typename LD, int GT, int LPK, bool MANY>
cudaError_t decode_k(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                     const float *q, int max_splits, float *part, unsigned *cnt, float *out,
                     cudaStream_t s)
{
    constexpr int MINB = dec_minb<LD, GT, LPK>(MANY), S = dec_ring<LD, LPK>(MINB, MANY);
    const auto kern = attn_decode_kernel<LD, GT, LPK, MINB, S>;
    const size_t smem = (size_t)DEC_WARPS * GT * (size_t)a->head_dim * sizeof(float) +
                        dec_ring_bytes<dec_un(GT), S>();
    // Past 48 kB with the kernel's static arrays a block must opt in: heads
    // of 256 in groups of four with the ring ask for 48 kB exactly.
    if (smem + dec_static_smem<GT>() > 48 * 1024) {
        const cudaError_t rc =
            cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (rc != cudaSuccess)
            return rc;
    }
    const dim3 grid((unsigned)max_splits, (unsigned)a->n_kv_heads, (unsigned)n);
    return launch_pdl(kern, grid, dim3(DEC_THREADS), smem, s, q, meta, n, *a, kv->n_blocks,
                      kv->block_size, kv->row_bytes, static_cast<const uint8_t *>(kv->k),
                      static_cast<const uint8_t *>(kv->v), max_splits, part, cnt, out);
}

template <typename LD, int GT, int LPK>
cudaError_t decode_t(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                     const float *q, int max_splits, float *part, unsigned *cnt, float *out,
                     cudaStream_t s)
{
    unsigned *fold = cnt && max_splits <= DEC_FOLD_MAX && n < DEC_MANY_ROWS ? cnt : nullptr;
    const cudaError_t rc =
        n >= DEC_MANY_ROWS
            ? decode_k<LD, GT, LPK, true>(kv, a, meta, n, q, max_splits, part, fold, out, s)
            : decode_k<LD, GT, LPK, false>(kv, a, meta, n, q, max_splits, part, fold, out, s);
    if (rc != cudaSuccess || fold)
        return rc;
    const dim3 g2((unsigned)n, (unsigned)a->n_heads);
    return launch_pdl(attn_decode_combine_kernel, g2, dim3((unsigned)(a->head_dim + 31) / 32 * 32),
                      0, s, part, meta, *a, max_splits, out);
}

// The tensor cores' decode (attn_decode_mma shapes): the same grid, the
// same partials, the same merges as decode_t.
template <int HD>
cudaError_t decode_mma(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                       const float *q, int max_splits, float *part, unsigned *cnt, float *out,
                       cudaStream_t s)
{
    const auto kern = attn_decode_mma_kernel<HD>;
    const size_t smem = MmaDec<HD>::smem;
    if (smem > 48 * 1024) {
        const cudaError_t rc =
            cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (rc != cudaSuccess)
            return rc;
    }
    unsigned *fold = cnt && max_splits <= DEC_FOLD_MAX && n < DEC_MANY_ROWS ? cnt : nullptr;
    const dim3 grid((unsigned)max_splits, (unsigned)a->n_kv_heads, (unsigned)n);
    cudaError_t rc = launch_pdl(kern, grid, dim3(DEC_THREADS), smem, s, q, meta, n, *a,
                                kv->n_blocks, kv->block_size, kv->row_bytes,
                                static_cast<const uint8_t *>(kv->k),
                                static_cast<const uint8_t *>(kv->v), max_splits, part, fold, out);
    if (rc != cudaSuccess || fold)
        return rc;
    const dim3 g2((unsigned)n, (unsigned)a->n_heads);
    return launch_pdl(attn_decode_combine_kernel, g2, dim3((unsigned)(a->head_dim + 31) / 32 * 32),
                      0, s, part, meta, *a, max_splits, out);
}

// Key groups of 8, 16 and 32 lanes (head_dim 40 to 256) get their own
// code, the lane reductions' strides fixed and the reduce-scatter fold
// (dec_tiles_rs); smaller ones take the strides at run time (dec_tiles).
template <typename LD, int GT>
cudaError_t decode_l(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                     const float *q, int max_splits, float *part, unsigned *cnt, float *out,
                     cudaStream_t s)
{
    switch (dec_lpk(a->head_dim)) {
    case 8: return decode_t<LD, GT, 8>(kv, a, meta, n, q, max_splits, part, cnt, out, s);
    case 16: return decode_t<LD, GT, 16>(kv, a, meta, n, q, max_splits, part, cnt, out, s);
    case 32: return decode_t<LD, GT, 32>(kv, a, meta, n, q, max_splits, part, cnt, out, s);
    default: return decode_t<LD, GT, 0>(kv, a, meta, n, q, max_splits, part, cnt, out, s);
    }
}

template <typename LD>
cudaError_t decode_g(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                     const float *q, int max_splits, float *part, unsigned *cnt, float *out,
                     cudaStream_t s)
{
    const int G = a->n_heads / a->n_kv_heads;
    if (G <= 1)
        return decode_l<LD, 1>(kv, a, meta, n, q, max_splits, part, cnt, out, s);
    if (G <= 2)
        return decode_l<LD, 2>(kv, a, meta, n, q, max_splits, part, cnt, out, s);
    if (G <= 4)
        return decode_l<LD, 4>(kv, a, meta, n, q, max_splits, part, cnt, out, s);
    return decode_l<LD, 8>(kv, a, meta, n, q, max_splits, part, cnt, out, s);
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

template <typename KV>
cudaError_t append_t(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n,
                     const float *k, const float *v, cudaStream_t stream)
{
    const dim3 grid((unsigned)n, (unsigned)((kv->kv_dim + APPEND_PIECE - 1) / APPEND_PIECE));
    return launch_pdl(kv_append_kernel<KV>, grid, dim3(APPEND_THREADS), 0, stream, k, v, meta, n,
                      a->layer, kv->n_blocks, kv->block_size, kv->kv_dim, kv->row_bytes,
                      static_cast<uint8_t *>(kv->k), static_cast<uint8_t *>(kv->v));
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_kv_append(const cu_kv_pool *kv, const cu_attn *a,
                                        const int32_t *meta, int n, const float *k, const float *v,
                                        cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (n > 2147483647 || kv->kv_dim <= 0 || (kv->kv_dim + APPEND_PIECE - 1) / APPEND_PIECE > 65535)
        return cudaErrorInvalidValue;
    switch (kv->type) {
    case CU_KV_F32: return append_t<KvF32>(kv, a, meta, n, k, v, stream);
    case CU_KV_F16: return append_t<KvF16>(kv, a, meta, n, k, v, stream);
    case CU_KV_BF16: return append_t<KvBF16>(kv, a, meta, n, k, v, stream);
    case CU_KV_Q8_0:
        if (kv->kv_dim % KV_Q8_0_BLOCK != 0)
            return cudaErrorInvalidValue;
        return append_t<KvQ8>(kv, a, meta, n, k, v, stream);
    default: return cudaErrorInvalidValue;
    }
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

extern "C" cudaError_t launch_attention_decode(const cu_kv_pool *kv, const cu_attn *a,
                                               const int32_t *meta, int n, const float *q,
                                               int max_splits, float *part, unsigned *counters,
                                               float *out, cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (!attn_decode_fits(a->n_heads, a->n_kv_heads, a->head_dim) || n > 65535 ||
        a->n_kv_heads > 65535 || a->n_heads > 65535 || max_splits <= 0 ||
        max_splits > ATTN_SPLITS_MAX ||
        (kv->type != CU_KV_Q8_0 ? kv->row_bytes % 16 : kv->row_bytes % 2) != 0)
        return cudaErrorInvalidValue;
    switch (kv->type) {
    case CU_KV_F32: return decode_g<Ld8F32>(kv, a, meta, n, q, max_splits, part, counters, out, stream);
    case CU_KV_F16:
        return decode_g<Ld8Half<false>>(kv, a, meta, n, q, max_splits, part, counters, out, stream);
    case CU_KV_BF16:
        if (attn_decode_mma(kv->type, a->n_heads, a->n_kv_heads, a->head_dim))
            return a->head_dim == 128
                       ? decode_mma<128>(kv, a, meta, n, q, max_splits, part, counters, out, stream)
                       : decode_mma<256>(kv, a, meta, n, q, max_splits, part, counters, out, stream);
        return decode_g<Ld8Half<true>>(kv, a, meta, n, q, max_splits, part, counters, out, stream);
    case CU_KV_Q8_0: return decode_g<Ld8Q8>(kv, a, meta, n, q, max_splits, part, counters, out, stream);
    default: return cudaErrorInvalidValue;
    }
}
