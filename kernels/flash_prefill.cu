#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <mma.h>

#include <type_traits>

#include "kernels/cp_async.cuh"
#include "kernels/dev_common.cuh"
#include "kernels/flash_prefill.cuh"
#include "kernels/mma.cuh"
#include "numerics/kv_codec.h"

// ---- kernels ----

namespace {

using namespace nvcuda;

constexpr int FP_THREADS = 128; // 4 warps, 16 query rows each
constexpr int FP_WARPS = FP_THREADS / 32;
static_assert(FP_WARPS * 16 == FP_ROWS, "a warp owns 16 query rows");
static_assert(FP_KEYS == 64, "the softmax below gives each lane 32 keys of a row");
// How far a block's max may exceed a row's reference max before the
// reference moves (and the row's output is rescaled): P <= e^8, 2981.
constexpr float FP_LAZY = 8.0f;
// Whether heads 64 and 128 prefetch the next key block's K/V into
// registers (docs/decisions/0010-prefill-decode-flash.md).
constexpr bool FP_PREFETCH = true;

// The operand type of the products: the KV cache's element type, so K and
// V are used as stored; Q and P are rounded to it (round to nearest even,
// the codecs of lib/numerics/kv_codec.h).
struct OpBF16 {
    typedef __nv_bfloat16 T;
    static DEV uint16_t round(float x) { return kvc_f32_to_bf16(x); }
};
struct OpF16 {
    typedef __half T;
    static DEV uint16_t round(float x) { return kvc_f32_to_f16(x); }
};

// Shared memory, in elements: K and V tiles (Q is staged through K's),
// the f32 scores, P, the f32 output rows, and per row its position, the
// first key it sees, its running max and exp-sum. Strides are padded by 16
// bytes (bank spread) and keep every fragment's first element 32-byte
// aligned, as WMMA requires.
template <int HD> struct Smem {
    static constexpr int LDK = HD + 8;      // K, V, Q staging: 16-bit elements
    static constexpr int LDS = FP_KEYS + 4; // scores: f32
    static constexpr int LDP = FP_KEYS + 8; // P: 16-bit
    static constexpr int LDO = HD + 4;      // output accumulator: f32
    static constexpr size_t K_OFF = 0;
    static constexpr size_t V_OFF = K_OFF + (size_t)FP_KEYS * LDK * 2;
    static constexpr size_t S_OFF = V_OFF + (size_t)FP_KEYS * LDK * 2;
    static constexpr size_t P_OFF = S_OFF + (size_t)FP_ROWS * LDS * 4;
    static constexpr size_t O_OFF = P_OFF + (size_t)FP_ROWS * LDP * 2;
    static constexpr size_t ROW_OFF = O_OFF + (size_t)FP_ROWS * LDO * 4;
    // per row: position, first key, running max and exp-sum, the folded
    // segments' max and exp-sum, what its segment's end does
    static constexpr int ROW_WORDS = 7;
    static constexpr size_t BYTES = ROW_OFF + (size_t)FP_ROWS * ROW_WORDS * 4;
    static_assert(V_OFF % 32 == 0 && S_OFF % 32 == 0 && P_OFF % 32 == 0 && O_OFF % 32 == 0,
                  "WMMA tiles start 32-byte aligned");
};

// The fold of a segment (max ms, exp-sum ls, output o) into the rows'
// folded ones (M, L, oc; M -inf before the first): the same arithmetic in
// the flash kernel and in the split launch's fold kernel, so a row's bytes
// do not depend on which did it. The first fold gives (ms, ls, o) exactly
// (factors 0 and 1, oc 0).
DEV void fp_fold_factors(float M, float L, float ms, float ls, float *Mn, float *Ln, float *fa,
                         float *fb)
{
    const float mn = fmaxf(M, ms);
    *fa = M == -INFINITY ? 0.0f : expf(__fsub_rn(M, mn));
    *fb = expf(__fsub_rn(ms, mn));
    *Ln = __fadd_rn(__fmul_rn(L, *fa), __fmul_rn(ls, *fb));
    *Mn = mn;
}

DEV float fp_fold(float oc, float o, float fa, float fb)
{
    return __fadd_rn(__fmul_rn(oc, fa), __fmul_rn(o, fb));
}

DEV int32_t fp_first_key(int32_t pos, int window)
{
    return window > 0 && (int64_t)pos - window + 1 > 0 ? (int32_t)(pos - window + 1) : 0;
}

DEV int64_t fp_row_index(const int32_t *table, int64_t t, int layer, int n_blocks, int bs)
{
    const int64_t blk = table[t / bs];
    return ((int64_t)layer * n_blocks + blk) * bs + t % bs;
}

// The tile's Q rows (rows past nr zero), rounded to the operand type,
// into ks (ldk elements a row), and the f32 rows os (ldo a row) zeroed;
// then a barrier.
template <typename OP, int HD>
DEV void fp_stage_q(const float *q, const cu_attn &a, int h, int r0, int nr, uint16_t *ks, int ldk,
                    float *os, int ldo)
{
    for (int idx = threadIdx.x; idx < FP_ROWS * HD / 4; idx += FP_THREADS) {
        const int r = idx / (HD / 4), e = idx % (HD / 4) * 4;
        const float4 x = r < nr ? __ldg(reinterpret_cast<const float4 *>(
                                      q + ((int64_t)(r0 + r) * a.n_heads + h) * HD + e))
                                : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        uint2 b;
        b.x = OP::round(x.x) | ((uint32_t)OP::round(x.y) << 16);
        b.y = OP::round(x.z) | ((uint32_t)OP::round(x.w) << 16);
        *reinterpret_cast<uint2 *>(ks + r * ldk + e) = b;
        *reinterpret_cast<float4 *>(os + r * ldo + e) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    __syncthreads();
}

// K and V of one key block, thread tid's share: the 16-byte chunk
// tid % CH of the keys tid / CH + i * JSTEP. All of a batch's table reads
// are issued before its row reads, and all row reads before any is used,
// so a block's staging costs two memory latencies, not two per key. A
// position no row of the tile sees is zero (never read from the pool: its
// table entry may not exist).
template <int HD> struct KvStage {
    static constexpr int CH = HD / 8;                 // 16-byte chunks a row
    static constexpr int JSTEP = FP_THREADS / CH;     // keys a pass
    static constexpr int NJ = FP_KEYS / JSTEP;        // passes a key block
    static_assert(FP_THREADS % CH == 0 && FP_KEYS % JSTEP == 0, "whole passes");
    uint4 k[NJ], v[NJ];

    DEV void fetch(int i0, int ni, int32_t t0, int32_t kmin, int32_t kmax, const int32_t *table,
                   const cu_attn &a, int kvh, int n_blocks, int bs, int64_t row_bytes,
                   const uint8_t *kp, const uint8_t *vp)
    {
        const int tid = threadIdx.x, c8 = tid % CH, j0 = tid / CH;
        int64_t off[NJ];
#pragma unroll
        for (int i = i0; i < i0 + ni; i++) {
            const int32_t t = t0 + j0 + i * JSTEP;
            off[i] = t >= kmin && t <= kmax
                         ? fp_row_index(table, t, a.layer, n_blocks, bs) * row_bytes +
                               ((int64_t)kvh * HD + c8 * 8) * 2
                         : -1;
        }
#pragma unroll
        for (int i = i0; i < i0 + ni; i++) {
            k[i] = v[i] = make_uint4(0, 0, 0, 0);
            if (off[i] >= 0) {
                k[i] = __ldg(reinterpret_cast<const uint4 *>(kp + off[i]));
                v[i] = __ldg(reinterpret_cast<const uint4 *>(vp + off[i]));
            }
        }
    }
    DEV void store(int i0, int ni, uint16_t *ks, uint16_t *vs, int ldk) const
    {
        const int tid = threadIdx.x, c8 = tid % CH, j0 = tid / CH;
#pragma unroll
        for (int i = i0; i < i0 + ni; i++) {
            *reinterpret_cast<uint4 *>(ks + (j0 + i * JSTEP) * ldk + c8 * 8) = k[i];
            *reinterpret_cast<uint4 *>(vs + (j0 + i * JSTEP) * ldk + c8 * 8) = v[i];
        }
    }
};

// Block (head, tile): tiles run last first (the longest causal spans
// start first), and the query heads of one KV head are neighbours in the
// launch order, so they share its K/V in L2.
template <typename OP, int HD, bool PF>
__global__ void __launch_bounds__(FP_THREADS)
flash_prefill_kernel(const float *__restrict__ q, const int32_t *__restrict__ meta, int n_meta,
                     int row0, int n, cu_attn a, int n_blocks, int bs, int64_t row_bytes,
                     const uint8_t *__restrict__ kp, const uint8_t *__restrict__ vp,
                     cu_flash_cut cut, float *__restrict__ out)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    typedef typename OP::T T;
    typedef Smem<HD> L;
    extern __shared__ float4 fp_smem[];
    uint8_t *sm = reinterpret_cast<uint8_t *>(fp_smem);
    uint16_t *ks = reinterpret_cast<uint16_t *>(sm + L::K_OFF);
    uint16_t *vs = reinterpret_cast<uint16_t *>(sm + L::V_OFF);
    float *ss = reinterpret_cast<float *>(sm + L::S_OFF);
    uint16_t *ps = reinterpret_cast<uint16_t *>(sm + L::P_OFF);
    float *os = reinterpret_cast<float *>(sm + L::O_OFF);
    int32_t *rpos = reinterpret_cast<int32_t *>(sm + L::ROW_OFF);
    int32_t *rlo = rpos + FP_ROWS;
    float *rmax = reinterpret_cast<float *>(rlo + FP_ROWS);
    float *rsum = rmax + FP_ROWS;
    float *cmax = rsum + FP_ROWS, *csum = cmax + FP_ROWS; // the folded segments'
    int32_t *rmode = reinterpret_cast<int32_t *>(csum + FP_ROWS); // at a segment's end

    const int h = blockIdx.x, tile = gridDim.y - 1 - blockIdx.y;
    const int kvh = h / (a.n_heads / a.n_kv_heads);
    const int r0 = row0 + tile * FP_ROWS;
    const int nr = min(FP_ROWS, row0 + n - r0);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int32_t *table = meta + 2 * n_meta + meta[n_meta + r0];

    // Rows past the chunk's end see no key.
    if (tid < FP_ROWS) {
        const int32_t pos = tid < nr ? meta[r0 + tid] : -1;
        const int32_t lo = tid < nr ? fp_first_key(pos, a.window) : INT32_MAX;
        rpos[tid] = pos;
        rlo[tid] = lo;
        rmax[tid] = -INFINITY;
        rsum[tid] = 0.0f;
        cmax[tid] = -INFINITY;
        csum[tid] = 0.0f;
    }
    // Q rows, rounded, staged in K's tile; the output rows start at zero.
    fp_stage_q<OP, HD>(q, a, h, r0, nr, ks, L::LDK, os, L::LDO);
    // The span of keys the tile's rows see.
    int32_t kmin = INT32_MAX, kmax = -1;
    for (int r = 0; r < nr; r++) {
        kmin = min(kmin, rlo[r]);
        kmax = max(kmax, rpos[r]);
    }
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> qf[HD / 16];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        wmma::load_matrix_sync(qf[kk], reinterpret_cast<const T *>(ks + warp * 16 * L::LDK + kk * 16),
                               L::LDK);
    __syncthreads(); // K's tile is overwritten next

    // The lane pair (2r, 2r + 1) does row r of the warp's 16 in the
    // softmax; each lane takes every other key (lane half c: keys c, c + 2, ...).
    const int rr = warp * 16 + (lane >> 1), half = lane & 1;
    const int32_t my_pos = rpos[rr], my_lo = rlo[rr];

    // The warp's rows' span, to skip its 16-key sub-tiles no row sees.
    int32_t wlo = INT32_MAX, whi = -1;
    for (int r = warp * 16; r < warp * 16 + 16; r++) {
        wlo = min(wlo, rlo[r]);
        whi = max(whi, rpos[r]);
    }

    // K/V staging: with PF and head 64 or 128, the next key block's rows
    // are fetched into registers while this one is computed (PIPE);
    // otherwise each block's rows are fetched and stored in batches of at
    // most 4 passes (head 256's 16 passes would take 128 registers).
    typedef KvStage<HD> KS;
    constexpr bool PIPE = PF && HD <= 128;
    constexpr int BATCH = PIPE ? KS::NJ : (KS::NJ < 4 ? KS::NJ : 4);
    // With head 64 or 128 the warp's output rows stay in accumulator
    // fragments across the key blocks of a segment (OREG), rescaled there
    // (by a factor fragment, below); at the segment's end they are folded
    // into the rows in shared memory.
    constexpr bool OREG = HD <= 128;
    const int seg_kb = OREG ? cut.seg_keys / FP_KEYS : 1; // key blocks a segment
    int32_t kb_first = kmin / FP_KEYS, kb_last = kmax / FP_KEYS;
    if (OREG && cut.nseg > 0) {
        // Split: this block takes one segment of the tile's span.
        const int32_t sg = cut.seg0 + (int32_t)blockIdx.z;
        kb_first = max(kb_first, sg * seg_kb);
        kb_last = min(kb_last, sg * seg_kb + seg_kb - 1);
        if (kb_first > kb_last)
            return; // the whole block: no row of the tile sees that segment
    }
    KS stage;
    // The segments folded so far are in the output rows' shared memory.
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> oreg[OREG ? HD / 16 : 1];
#pragma unroll
    for (int nb = 0; nb < (OREG ? HD / 16 : 1); nb++)
        wmma::fill_fragment(oreg[nb], 0.0f);
    if (PIPE && kb_first <= kb_last)
        stage.fetch(0, KS::NJ, kb_first * FP_KEYS, kmin, kmax, table, a, kvh, n_blocks, bs,
                    row_bytes, kp, vp);
    // The tile's key blocks, a segment at a time (head 256: one segment).
    for (int32_t sb = kb_first; sb <= kb_last;) {
        const int32_t se = OREG ? min(kb_last, (sb / seg_kb + 1) * seg_kb - 1) : kb_last;
        for (int32_t kb = sb; kb <= se; kb++) {
            const int32_t t0 = kb * FP_KEYS;
            if (PIPE) {
                stage.store(0, KS::NJ, ks, vs, L::LDK);
            } else {
    #pragma unroll
                for (int i0 = 0; i0 < KS::NJ; i0 += BATCH) {
                    stage.fetch(i0, BATCH, t0, kmin, kmax, table, a, kvh, n_blocks, bs, row_bytes,
                                kp, vp);
                    stage.store(i0, BATCH, ks, vs, L::LDK);
                }
            }
            __syncthreads();
            if (PIPE && kb < kb_last)
                stage.fetch(0, KS::NJ, t0 + FP_KEYS, kmin, kmax, table, a, kvh, n_blocks, bs,
                            row_bytes, kp, vp);

            // S = Q K^T for the warp's 16 rows and the block's 64 keys.
            {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> sf[FP_KEYS / 16];
    #pragma unroll
                for (int j = 0; j < FP_KEYS / 16; j++)
                    wmma::fill_fragment(sf[j], 0.0f);
    #pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
    #pragma unroll
                    for (int j = 0; j < FP_KEYS / 16; j++) {
                        // Keys none of the warp's rows sees: their scores are
                        // never read (the softmax masks them).
                        if (t0 + 16 * j > whi || t0 + 16 * j + 15 < wlo)
                            continue;
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> kf;
                        wmma::load_matrix_sync(
                            kf, reinterpret_cast<const T *>(ks + j * 16 * L::LDK + kk * 16), L::LDK);
                        wmma::mma_sync(sf[j], qf[kk], kf, sf[j]);
                    }
                }
    #pragma unroll
                for (int j = 0; j < FP_KEYS / 16; j++)
                    wmma::store_matrix_sync(ss + warp * 16 * L::LDS + j * 16, sf[j], L::LDS,
                                            wmma::mem_row_major);
            }
            __syncwarp();

            // Online softmax of row rr over this block: scale, soft-cap, mask,
            // the new reference max, P (rounded) and its f32 sum; the output
            // row is rescaled by exp(old max - new max). The reference max
            // moves only when the block's max exceeds it by more than
            // FP_LAZY (or at the row's first key): P = exp(s - max) is then
            // at most e^FP_LAZY, and most blocks leave every row's max, so
            // no rescale, as they are. Which blocks move it depends on the
            // row's own scores alone.
            //
            // Both loops run unrolled and without branches (a key the row does
            // not see is masked by a select), so a lane's shared-memory loads
            // are issued together instead of one latency per key; the values
            // and the order of the sum are the same as key by key.
            float *srow = ss + rr * L::LDS;
            float mx = -INFINITY;
    #pragma unroll 8
            for (int c = half; c < FP_KEYS; c += 2) {
                const int32_t t = t0 + c;
                float s = __fmul_rn(srow[c], a.scale);
                if (a.softcap > 0.0f)
                    s = __fmul_rn(tanhf(__fdiv_rn(s, a.softcap)), a.softcap);
                srow[c] = s;
                mx = t < my_lo || t > my_pos ? mx : fmaxf(mx, s);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            const float m_old = rmax[rr];
            const float m_new = mx > __fadd_rn(m_old, FP_LAZY) ? mx : m_old;
            const float alpha = m_new == m_old ? 1.0f : expf(__fsub_rn(m_old, m_new));
            // alpha 1 changes nothing; before the row's first key its output
            // is still all zeros, which alpha (0) leaves as they are.
            const bool rescale = alpha != 1.0f && m_old != -INFINITY;
            float sum = 0.0f;
    #pragma unroll 8
            for (int c = half; c < FP_KEYS; c += 2) {
                const int32_t t = t0 + c;
                const float e = expf(__fsub_rn(srow[c], m_new));
                const float p = t < my_lo || t > my_pos ? 0.0f : e;
                ps[rr * L::LDP + c] = OP::round(p);
                sum = __fadd_rn(sum, p);
            }
            sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
            if (half == 0) {
                rmax[rr] = m_new;
                rsum[rr] = __fadd_rn(__fmul_rn(rsum[rr], alpha), sum);
            }
            if (OREG) {
                float any = rescale ? 1.0f : 0.0f;
    #pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    any = fmaxf(any, __shfl_xor_sync(0xffffffffu, any, o));
                if (any != 0.0f) { /* the whole warp: fragments are warp-wide */
                    // Each row's factor (alpha, or 1: exact) laid out in a 16 x
                    // 16 tile of its value, in the warp's S rows (read by now,
                    // each lane its own columns), and loaded as a fragment of
                    // the accumulators' layout: element i of every fragment is
                    // then of one row, whatever the layout is.
                    float *fsc = ss + warp * 16 * L::LDS;
                    for (int c = half; c < 16; c += 2)
                        fsc[(lane >> 1) * L::LDS + c] = rescale ? alpha : 1.0f;
                    __syncwarp();
                    wmma::fragment<wmma::accumulator, 16, 16, 16, float> ff;
                    wmma::load_matrix_sync(ff, fsc, L::LDS, wmma::mem_row_major);
    #pragma unroll
                    for (int nb = 0; nb < (OREG ? HD / 16 : 1); nb++)
    #pragma unroll
                        for (int i = 0; i < ff.num_elements; i++)
                            oreg[nb].x[i] = __fmul_rn(oreg[nb].x[i], ff.x[i]);
                }
            } else if (rescale) {
                for (int e = half; e < HD; e += 2)
                    os[rr * L::LDO + e] = __fmul_rn(os[rr * L::LDO + e], alpha);
            }
            __syncwarp();

            // O += P V for the warp's rows.
            {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> pf[FP_KEYS / 16];
    #pragma unroll
                for (int kc = 0; kc < FP_KEYS / 16; kc++)
                    wmma::load_matrix_sync(
                        pf[kc], reinterpret_cast<const T *>(ps + warp * 16 * L::LDP + kc * 16), L::LDP);
                if (OREG) {
    #pragma unroll
                    for (int nb = 0; nb < (OREG ? HD / 16 : 1); nb++) {
    #pragma unroll
                        for (int kc = 0; kc < FP_KEYS / 16; kc++) {
                            if (t0 + 16 * kc > whi || t0 + 16 * kc + 15 < wlo)
                                continue;
                            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vf;
                            wmma::load_matrix_sync(
                                vf, reinterpret_cast<const T *>(vs + kc * 16 * L::LDK + nb * 16),
                                L::LDK);
                            wmma::mma_sync(oreg[nb], pf[kc], vf, oreg[nb]);
                        }
                    }
                } else
    #pragma unroll 2
                for (int nb = 0; nb < HD / 16; nb++) {
                    wmma::fragment<wmma::accumulator, 16, 16, 16, float> of;
                    float *op = os + warp * 16 * L::LDO + nb * 16;
                    wmma::load_matrix_sync(of, op, L::LDO, wmma::mem_row_major);
    #pragma unroll
                    for (int kc = 0; kc < FP_KEYS / 16; kc++) {
                        // P is exactly 0 there for every row of the warp.
                        if (t0 + 16 * kc > whi || t0 + 16 * kc + 15 < wlo)
                            continue;
                        wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> vf;
                        wmma::load_matrix_sync(
                            vf, reinterpret_cast<const T *>(vs + kc * 16 * L::LDK + nb * 16), L::LDK);
                        wmma::mma_sync(of, pf[kc], vf, of);
                    }
                    wmma::store_matrix_sync(op, of, L::LDO, wmma::mem_row_major);
                }
            }
            __syncthreads(); // the next block overwrites K and V
        }
        if (OREG) {
            // The segment's end: its output rows, max and exp-sum are
            // folded into the rows' (os, cmax, csum; a row's last segment
            // writes its result), or written as the split launch's
            // partials. Then the next segment starts afresh. The fold's
            // factors go in fragments as the rescale's do.
            const int32_t sg = se / seg_kb;
            const bool split = cut.nseg > 0;
            const float ms = rmax[rr], ls = rsum[rr];
            const bool has = ms != -INFINITY; // the row saw keys in the segment
            float fa = 1.0f, fb = 0.0f, mn = cmax[rr], ln = csum[rr];
            if (has && !split)
                fp_fold_factors(cmax[rr], csum[rr], ms, ls, &mn, &ln, &fa, &fb);
            const bool last = has && !split && my_pos / (seg_kb * FP_KEYS) == sg;
            float *fsc = ss + warp * 16 * L::LDS;
            for (int c = half; c < 16; c += 2) {
                fsc[(lane >> 1) * L::LDS + c] = fa;
                fsc[(lane >> 1) * L::LDS + 16 + c] = fb;
            }
            __syncwarp(); // every lane has read the row's state
            if (half == 0) {
                cmax[rr] = mn;
                csum[rr] = ln;
                rmax[rr] = -INFINITY;
                rsum[rr] = 0.0f;
                rmode[rr] = !has ? 0 : split ? 8 : last ? 4 : 1;
                if (has && split) {
                    const size_t wrow = (size_t)(r0 + rr - row0) * a.n_heads + h;
                    float *ml = cut.ws + (size_t)n * a.n_heads * cut.nseg * HD +
                                (wrow * cut.nseg + (size_t)(sg - cut.seg0)) * 2;
                    ml[0] = ms;
                    ml[1] = ls;
                }
            }
            __syncwarp();
            if (split) {
#pragma unroll
                for (int nb = 0; nb < (OREG ? HD / 16 : 1); nb++)
                    wmma::store_matrix_sync(os + warp * 16 * L::LDO + nb * 16, oreg[nb], L::LDO,
                                            wmma::mem_row_major);
                __syncwarp();
                for (int idx = lane; idx < 16 * HD; idx += 32) {
                    const int r = warp * 16 + idx / HD, e = idx % HD;
                    if (rmode[r] == 8)
                        cut.ws[(((size_t)(r0 + r - row0) * a.n_heads + h) * cut.nseg +
                                (size_t)(sg - cut.seg0)) * HD + e] = os[r * L::LDO + e];
                }
            } else {
                wmma::fragment<wmma::accumulator, 16, 16, 16, float> ffa, ffb, oc;
                wmma::load_matrix_sync(ffa, fsc, L::LDS, wmma::mem_row_major);
                wmma::load_matrix_sync(ffb, fsc + 16, L::LDS, wmma::mem_row_major);
#pragma unroll
                for (int nb = 0; nb < (OREG ? HD / 16 : 1); nb++) {
                    float *op = os + warp * 16 * L::LDO + nb * 16;
                    wmma::load_matrix_sync(oc, op, L::LDO, wmma::mem_row_major);
#pragma unroll
                    for (int i = 0; i < ffa.num_elements; i++)
                        oc.x[i] = fp_fold(oc.x[i], oreg[nb].x[i], ffa.x[i], ffb.x[i]);
                    wmma::store_matrix_sync(op, oc, L::LDO, wmma::mem_row_major);
                }
                float any_last = last ? 1.0f : 0.0f;
#pragma unroll
                for (int o = 16; o > 0; o >>= 1)
                    any_last = fmaxf(any_last, __shfl_xor_sync(0xffffffffu, any_last, o));
                if (any_last != 0.0f) {
                    __syncwarp();
                    for (int idx = lane; idx < 16 * HD; idx += 32) {
                        const int r = warp * 16 + idx / HD, e = idx % HD;
                        if (rmode[r] == 4)
                            out[((int64_t)(r0 + r) * a.n_heads + h) * HD + e] =
                                __fdiv_rn(os[r * L::LDO + e], csum[r]);
                    }
                }
            }
#pragma unroll
            for (int nb = 0; nb < (OREG ? HD / 16 : 1); nb++)
                wmma::fill_fragment(oreg[nb], 0.0f);
            __syncwarp();
        }
        sb = se + 1;
    }

    // Head 256 (one pass): out = O / exp-sum for the warp's rows that exist.
    for (int idx = lane; !OREG && idx < 16 * HD; idx += 32) {
        const int r = warp * 16 + idx / HD, e = idx % HD;
        if (r < nr)
            out[((int64_t)(r0 + r) * a.n_heads + h) * HD + e] =
                __fdiv_rn(os[r * L::LDO + e], rsum[r]);
    }
#else
    __trap(); // launch_flash_prefill is only called on sm_80 and later
#endif
}

// ---- the register kernel: bf16 cache, head 64 or 128 ----
//
// The same block, rows, key blocks, segments, masking, lazy max and fold
// as flash_prefill_kernel, with the scores, P and the output rows in the
// mma.sync fragments' registers (kernels/mma.cuh) instead of shared
// memory: lane l of a warp holds rows g = l / 4 and g + 8 of the warp's 16,
// key (or output) columns 2t and 2t + 1 of each 8-wide tile (t = l % 4).
// A row's max and exp-sum are reduced over the four lanes of its quad by
// two butterflies (each lane then holds the same bits); the exp-sum of a
// lane is its values in ascending key order. Only the folded segments'
// output rows stay in shared memory, each element read and written by the
// lane that holds it.
template <int HD> struct MSmem {
    static constexpr int LDK = HD + 8; // K, V, Q staging: bf16 elements
    static constexpr int LDO = HD + 4; // the folded output rows: f32
    static constexpr size_t TILE = (size_t)FP_KEYS * LDK * 2; // one K or V tile, bytes
    // two buffers of (K, V): buffer b's K at b * 2 TILE, its V a TILE on
    static constexpr size_t O_OFF = 4 * TILE;
    static constexpr size_t BYTES = O_OFF + (size_t)FP_ROWS * LDO * 4;
    static_assert((LDK * 2) % 16 == 0 && TILE % 16 == 0 && O_OFF % 16 == 0,
                  "ldmatrix rows start 16-byte aligned");
};

// Key block kb's K and V rows into buffer (ks, vs), thread tid's share:
// the 16-byte chunk tid % CH of keys tid / CH + i * JSTEP (KvStage's), a
// position no row of the tile sees zero (never read from the pool: its
// table entry may not exist).
template <int HD>
DEV void fm_issue(int32_t t0, int32_t kmin, int32_t kmax, const int32_t *table, const cu_attn &a,
                  int kvh, int n_blocks, int bs, int64_t row_bytes, const uint8_t *kp,
                  const uint8_t *vp, uint16_t *ks, uint16_t *vs)
{
    typedef KvStage<HD> KS;
    const int tid = threadIdx.x, c8 = tid % KS::CH, j0 = tid / KS::CH;
#pragma unroll
    for (int i = 0; i < KS::NJ; i++) {
        const int j = j0 + i * KS::JSTEP;
        const int32_t t = t0 + j;
        const bool valid = t >= kmin && t <= kmax;
        const int64_t off = valid ? fp_row_index(table, t, a.layer, n_blocks, bs) * row_bytes +
                                        ((int64_t)kvh * HD + c8 * 8) * 2
                                  : 0;
        cp_async16(ks + j * MSmem<HD>::LDK + c8 * 8, kp + off, valid ? 16 : 0);
        cp_async16(vs + j * MSmem<HD>::LDK + c8 * 8, vp + off, valid ? 16 : 0);
    }
    cp_async_commit();
}

// Two floats as a bf16x2 register (round to nearest even), the lower
// index in the low half.
DEV unsigned fm_pack(float lo, float hi)
{
    return (unsigned)kvc_f32_to_bf16(lo) | ((unsigned)kvc_f32_to_bf16(hi) << 16);
}

// One row's online softmax step over the lane's 16 scores of a key block
// (s[j][e0], s[j][e0 + 1] of tile j: key t0 + 8 j + 2 t + e): scale,
// soft-cap, mask, the quad's max, the new reference max, P (masked keys
// 0) left in s, and the quad's exp-sum of the unrounded P. Returns alpha,
// the factor the row's output takes (1: none).
DEV float fm_softmax_row(float (&s)[FP_KEYS / 8][4], int e0, int32_t t0, int t4, int32_t pos,
                         int32_t lo, const cu_attn &a, float &m, float &l)
{
    // A block the row sees whole (most of a long prompt's) needs no mask:
    // the same values without the compares and selects.
    const bool whole = t0 >= lo && t0 + FP_KEYS - 1 <= pos;
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < FP_KEYS / 8; j++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int32_t t = t0 + 8 * j + 2 * t4 + e;
            float v = __fmul_rn(s[j][e0 + e], a.scale);
            if (a.softcap > 0.0f)
                v = __fmul_rn(tanhf(__fdiv_rn(v, a.softcap)), a.softcap);
            s[j][e0 + e] = v;
            mx = !whole && (t < lo || t > pos) ? mx : fmaxf(mx, v);
        }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_old = m;
    const float m_new = mx > __fadd_rn(m_old, FP_LAZY) ? mx : m_old;
    const float alpha = m_new == m_old ? 1.0f : __expf(__fsub_rn(m_old, m_new));
    float sum = 0.0f;
    if (whole) {
#pragma unroll
        for (int j = 0; j < FP_KEYS / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const float p = __expf(__fsub_rn(s[j][e0 + e], m_new));
                s[j][e0 + e] = p;
                sum = __fadd_rn(sum, p);
            }
    } else {
#pragma unroll
        for (int j = 0; j < FP_KEYS / 8; j++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int32_t t = t0 + 8 * j + 2 * t4 + e;
                const float p = t < lo || t > pos ? 0.0f : __expf(__fsub_rn(s[j][e0 + e], m_new));
                s[j][e0 + e] = p;
                sum = __fadd_rn(sum, p);
            }
    }
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 1));
    sum = __fadd_rn(sum, __shfl_xor_sync(0xffffffffu, sum, 2));
    m = m_new;
    l = __fadd_rn(__fmul_rn(l, alpha), sum);
    // before the row's first key its output is all zeros: nothing to scale
    return m_old == -INFINITY ? 1.0f : alpha;
}

template <int HD, bool PF>
__global__ void __launch_bounds__(FP_THREADS)
flash_mma_kernel(const float *__restrict__ q, const int32_t *__restrict__ meta, int n_meta, int row0,
                 int n, cu_attn a, int n_blocks, int bs, int64_t row_bytes,
                 const uint8_t *__restrict__ kp, const uint8_t *__restrict__ vp, cu_flash_cut cut,
                 float *__restrict__ out)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    typedef MSmem<HD> L;
    extern __shared__ float4 fp_smem[];
    uint8_t *sm = reinterpret_cast<uint8_t *>(fp_smem);
    uint16_t *ks = reinterpret_cast<uint16_t *>(sm); // buffer 0's K: Q's staging first
    float *os = reinterpret_cast<float *>(sm + L::O_OFF);

    const int h = blockIdx.x, tile = gridDim.y - 1 - blockIdx.y;
    const int kvh = h / (a.n_heads / a.n_kv_heads);
    const int r0 = row0 + tile * FP_ROWS;
    const int nr = min(FP_ROWS, row0 + n - r0);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int g = lane >> 2, t4 = lane & 3;
    const int32_t *table = meta + 2 * n_meta + meta[n_meta + r0];

    // This lane's two rows (rows past the chunk's end see no key).
    int32_t pos[2], lo[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = warp * 16 + g + 8 * i;
        pos[i] = r < nr ? meta[r0 + r] : -1;
        lo[i] = r < nr ? fp_first_key(pos[i], a.window) : INT32_MAX;
    }
    // The span of keys the tile's rows see, and the warp's.
    int32_t kmin = INT32_MAX, kmax = -1, wlo = INT32_MAX, whi = -1;
    for (int r = 0; r < nr; r++) {
        const int32_t p = meta[r0 + r], f = fp_first_key(p, a.window);
        kmin = min(kmin, f);
        kmax = max(kmax, p);
        if (r >= warp * 16 && r < warp * 16 + 16) {
            wlo = min(wlo, f);
            whi = max(whi, p);
        }
    }
    // Q rows, rounded, staged in K's tile; the folded output rows start at zero.
    fp_stage_q<OpBF16, HD>(q, a, h, r0, nr, ks, L::LDK, os, L::LDO);
    unsigned qa[HD / 16][4];
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++)
        ldmatrix_x4(qa[kk], ks + (warp * 16 + (lane & 15)) * L::LDK + kk * 16 + 8 * (lane >> 4));
    __syncthreads(); // K's tile is overwritten next

    const int seg_kb = cut.seg_keys / FP_KEYS;
    int32_t kb_first = kmin / FP_KEYS, kb_last = kmax / FP_KEYS;
    if (cut.nseg > 0) {
        const int32_t sg = cut.seg0 + (int32_t)blockIdx.z;
        kb_first = max(kb_first, sg * seg_kb);
        kb_last = min(kb_last, sg * seg_kb + seg_kb - 1);
        if (kb_first > kb_last)
            return; // the whole block: no row of the tile sees that segment
    }
    // Key blocks alternate between two buffers; with PF the next block's
    // copies are issued before this one's products, so they overlap.
    const auto kbuf = [&](int32_t kb) {
        return reinterpret_cast<uint16_t *>(sm + (size_t)((kb - kb_first) & 1) * 2 * L::TILE);
    };
    const auto vbuf = [&](int32_t kb) {
        return reinterpret_cast<uint16_t *>(sm + ((size_t)((kb - kb_first) & 1) * 2 + 1) * L::TILE);
    };
    if (PF && kb_first <= kb_last)
        fm_issue<HD>(kb_first * FP_KEYS, kmin, kmax, table, a, kvh, n_blocks, bs, row_bytes, kp,
                     vp, kbuf(kb_first), vbuf(kb_first));
    // Per row: the segment's max and exp-sum, the folded segments'.
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    float cm[2] = {-INFINITY, -INFINITY}, cl[2] = {0.0f, 0.0f};
    float o[HD / 8][4];
#pragma unroll
    for (int nb = 0; nb < HD / 8; nb++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[nb][e] = 0.0f;
    for (int32_t sb = kb_first; sb <= kb_last;) {
        const int32_t se = min(kb_last, (sb / seg_kb + 1) * seg_kb - 1);
        for (int32_t kb = sb; kb <= se; kb++) {
            const int32_t t0 = kb * FP_KEYS;
            const uint16_t *kt = kbuf(kb), *vt = vbuf(kb);
            if (PF && kb < kb_last) {
                fm_issue<HD>(t0 + FP_KEYS, kmin, kmax, table, a, kvh, n_blocks, bs, row_bytes, kp,
                             vp, kbuf(kb + 1), vbuf(kb + 1));
                cp_async_wait<1>(); // this block's copies are done, the next one's in flight
            } else {
                if (!PF)
                    fm_issue<HD>(t0, kmin, kmax, table, a, kvh, n_blocks, bs, row_bytes, kp, vp,
                                 kbuf(kb), vbuf(kb));
                cp_async_wait<0>();
            }
            __syncthreads(); // every thread's copies of this block are visible

            // S = Q K^T: the warp's 16 rows, the block's 64 keys in 8-key
            // tiles, two tiles an ldmatrix. Keys no row of the warp sees
            // keep S 0 and are masked.
            float s[FP_KEYS / 8][4];
#pragma unroll
            for (int j = 0; j < FP_KEYS / 8; j++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    s[j][e] = 0.0f;
#pragma unroll
            for (int jp = 0; jp < FP_KEYS / 16; jp++) {
                if (t0 + 16 * jp > whi || t0 + 16 * jp + 15 < wlo)
                    continue;
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
                    unsigned b[4];
                    ldmatrix_x4(b, kt + (16 * jp + 8 * (lane >> 4) + (lane & 7)) * L::LDK + kk * 16 +
                                       8 * ((lane >> 3) & 1));
                    mma_bf16_16816(s[2 * jp], qa[kk], b);
                    mma_bf16_16816(s[2 * jp + 1], qa[kk], b + 2);
                }
            }
            // The online softmax of the lane's two rows; their outputs rescaled.
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const float alpha = fm_softmax_row(s, 2 * i, t0, t4, pos[i], lo[i], a, m[i], l[i]);
                if (alpha != 1.0f)
#pragma unroll
                    for (int nb = 0; nb < HD / 8; nb++) {
                        o[nb][2 * i] = __fmul_rn(o[nb][2 * i], alpha);
                        o[nb][2 * i + 1] = __fmul_rn(o[nb][2 * i + 1], alpha);
                    }
            }
            // O += P V: P (rounded) from the score registers as the A
            // fragments of 16-key chunks; V's 8 x 8 matrices transposed by
            // ldmatrix into B fragments, two 8-column tiles a load.
#pragma unroll
            for (int kc = 0; kc < FP_KEYS / 16; kc++) {
                if (t0 + 16 * kc > whi || t0 + 16 * kc + 15 < wlo)
                    continue; // P is exactly 0 there for every row of the warp
                unsigned pa[4] = {fm_pack(s[2 * kc][0], s[2 * kc][1]),
                                  fm_pack(s[2 * kc][2], s[2 * kc][3]),
                                  fm_pack(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                                  fm_pack(s[2 * kc + 1][2], s[2 * kc + 1][3])};
#pragma unroll
                for (int np = 0; np < HD / 16; np++) {
                    unsigned b[4];
                    ldmatrix_x4_trans(b, vt + (16 * kc + 8 * ((lane >> 3) & 1) + (lane & 7)) * L::LDK +
                                             np * 16 + 8 * (lane >> 4));
                    mma_bf16_16816(o[2 * np], pa, b);
                    mma_bf16_16816(o[2 * np + 1], pa, b + 2);
                }
            }
            __syncthreads(); // the next block's copies go into this buffer
        }
        // The segment's end: each row's output, max and exp-sum folded
        // into its folded rows (a row's last segment writes its result),
        // or written as the split launch's partials; then the next
        // segment starts afresh.
        const int32_t sg = se / seg_kb;
        const bool split = cut.nseg > 0;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int r = warp * 16 + g + 8 * i;
            if (m[i] != -INFINITY) { // the row saw keys in the segment
                if (split) {
                    const size_t wrow = (size_t)(r0 + r - row0) * a.n_heads + h;
                    float *po = cut.ws + (wrow * cut.nseg + (size_t)(sg - cut.seg0)) * HD;
#pragma unroll
                    for (int nb = 0; nb < HD / 8; nb++)
                        *reinterpret_cast<float2 *>(po + 8 * nb + 2 * t4) =
                            make_float2(o[nb][2 * i], o[nb][2 * i + 1]);
                    if (t4 == 0) {
                        float *ml = cut.ws + (size_t)n * a.n_heads * cut.nseg * HD +
                                    (wrow * cut.nseg + (size_t)(sg - cut.seg0)) * 2;
                        ml[0] = m[i];
                        ml[1] = l[i];
                    }
                } else {
                    float mn, ln, fa, fb;
                    fp_fold_factors(cm[i], cl[i], m[i], l[i], &mn, &ln, &fa, &fb);
                    cm[i] = mn;
                    cl[i] = ln;
                    const bool last = pos[i] / (seg_kb * FP_KEYS) == sg;
                    float *orow = os + r * L::LDO;
                    float *dst = out + ((int64_t)(r0 + r) * a.n_heads + h) * HD;
#pragma unroll
                    for (int nb = 0; nb < HD / 8; nb++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int c = 8 * nb + 2 * t4 + e;
                            const float v = fp_fold(orow[c], o[nb][2 * i + e], fa, fb);
                            if (last)
                                dst[c] = __fdiv_rn(v, ln);
                            else
                                orow[c] = v;
                        }
                }
            }
            m[i] = -INFINITY;
            l[i] = 0.0f;
#pragma unroll
            for (int nb = 0; nb < HD / 8; nb++) {
                o[nb][2 * i] = 0.0f;
                o[nb][2 * i + 1] = 0.0f;
            }
        }
        sb = se + 1;
    }
#else
    __trap(); // launch_flash_prefill is only called on sm_80 and later
#endif
}

// A split launch's fold: block (row, head), a thread per element, folds the
// row's segments' partials in order (fp_fold, as the flash kernel does)
// and writes the result.
template <int HD>
__global__ void __launch_bounds__(HD)
flash_fold_kernel(const int32_t *__restrict__ meta, int row0, int n, int n_heads, int window,
                  cu_flash_cut cut, float *__restrict__ out)
{
    const int r = blockIdx.x, h = blockIdx.y, e = threadIdx.x;
    const int32_t pos = meta[row0 + r];
    const int32_t s_lo = fp_first_key(pos, window) / cut.seg_keys, s_hi = pos / cut.seg_keys;
    const size_t wr = (size_t)r * n_heads + h;
    const float *ml = cut.ws + (size_t)n * n_heads * cut.nseg * HD + wr * cut.nseg * 2;
    float m = -INFINITY, l = 0.0f, oc = 0.0f;
    for (int32_t sg = s_lo; sg <= s_hi; sg++) {
        const int z = sg - cut.seg0;
        float mn, ln, fa, fb;
        fp_fold_factors(m, l, ml[2 * z], ml[2 * z + 1], &mn, &ln, &fa, &fb);
        oc = fp_fold(oc, cut.ws[(wr * cut.nseg + (size_t)z) * HD + e], fa, fb);
        m = mn;
        l = ln;
    }
    out[((int64_t)(row0 + r) * n_heads + h) * HD + e] = __fdiv_rn(oc, l);
}

// The register kernel's launch (bf16 cache, head 64 or 128).
template <int HD, bool PF>
cudaError_t flash_mma_t(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n_meta,
                        int row0, int n, const float *q, const cu_flash_cut *cut, float *out,
                        cudaStream_t s)
{
    const size_t smem = MSmem<HD>::BYTES;
    cudaError_t rc = cudaFuncSetAttribute(flash_mma_kernel<HD, PF>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (rc != cudaSuccess)
        return rc;
    const int split = cut->nseg > 0;
    dim3 grid((unsigned)a->n_heads, (unsigned)((n + FP_ROWS - 1) / FP_ROWS),
              split ? (unsigned)cut->nseg : 1u);
    flash_mma_kernel<HD, PF><<<grid, FP_THREADS, smem, s>>>(
        q, meta, n_meta, row0, n, *a, kv->n_blocks, kv->block_size, kv->row_bytes,
        static_cast<const uint8_t *>(kv->k), static_cast<const uint8_t *>(kv->v), *cut, out);
    if (split)
        flash_fold_kernel<HD><<<dim3((unsigned)n, (unsigned)a->n_heads), HD, 0, s>>>(
            meta, row0, n, a->n_heads, a->window, *cut, out);
    return cudaGetLastError();
}

template <typename OP, int HD, bool PF>
cudaError_t flash_t(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n_meta,
                    int row0, int n, const float *q, const cu_flash_cut *cut, float *out,
                    cudaStream_t s)
{
    const size_t smem = Smem<HD>::BYTES;
    cudaError_t rc = cudaFuncSetAttribute(flash_prefill_kernel<OP, HD, PF>,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (rc != cudaSuccess)
        return rc;
    const int split = HD <= 128 && cut->nseg > 0;
    dim3 grid((unsigned)a->n_heads, (unsigned)((n + FP_ROWS - 1) / FP_ROWS),
              split ? (unsigned)cut->nseg : 1u);
    flash_prefill_kernel<OP, HD, PF><<<grid, FP_THREADS, smem, s>>>(
        q, meta, n_meta, row0, n, *a, kv->n_blocks, kv->block_size, kv->row_bytes,
        static_cast<const uint8_t *>(kv->k), static_cast<const uint8_t *>(kv->v), *cut, out);
    if (split)
        flash_fold_kernel<HD><<<dim3((unsigned)n, (unsigned)a->n_heads), HD, 0, s>>>(
            meta, row0, n, a->n_heads, a->window, *cut, out);
    return cudaGetLastError();
}

template <typename OP>
cudaError_t flash_hd(const cu_kv_pool *kv, const cu_attn *a, const int32_t *meta, int n_meta,
                     int row0, int n, const float *q, const cu_flash_cut *cut, float *out,
                     cudaStream_t s)
{
    // A bf16 cache's heads 64 and 128 take the register kernel (decision
    // 0031); f16 caches and head 256 the WMMA one.
    if constexpr (std::is_same<OP, OpBF16>::value) {
        switch (a->head_dim) {
        case 64: return flash_mma_t<64, FP_PREFETCH>(kv, a, meta, n_meta, row0, n, q, cut, out, s);
        case 128: return flash_mma_t<128, FP_PREFETCH>(kv, a, meta, n_meta, row0, n, q, cut, out, s);
        case 256: return flash_t<OP, 256, false>(kv, a, meta, n_meta, row0, n, q, cut, out, s);
        default: return cudaErrorInvalidValue;
        }
    } else {
        switch (a->head_dim) {
        case 64: return flash_t<OP, 64, FP_PREFETCH>(kv, a, meta, n_meta, row0, n, q, cut, out, s);
        case 128:
            return flash_t<OP, 128, FP_PREFETCH>(kv, a, meta, n_meta, row0, n, q, cut, out, s);
        case 256: return flash_t<OP, 256, false>(kv, a, meta, n_meta, row0, n, q, cut, out, s);
        default: return cudaErrorInvalidValue;
        }
    }
}

// A cut the kernel can take: whole key blocks a segment; a split's
// segments cover every key of the launch's rows (checked by the caller,
// who knows the positions) and its partials have somewhere to go.
bool cut_fits(const cu_flash_cut *c)
{
    return c->seg_keys >= FP_KEYS && c->seg_keys % FP_KEYS == 0 && c->nseg >= 0 &&
           c->nseg <= 65535 && c->seg0 >= 0 && (c->nseg == 0 || c->ws != nullptr);
}

} // namespace

// ---- launchers ----

extern "C" cudaError_t launch_flash_prefill(const cu_kv_pool *kv, const cu_attn *a,
                                            const int32_t *meta, int n_meta, int row0, int n,
                                            const float *q, const cu_flash_cut *cut, float *out,
                                            cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (a->n_kv_heads <= 0 || a->n_heads % a->n_kv_heads != 0 || a->n_heads > 65535 ||
        row0 < 0 || row0 + n > n_meta || !flash_prefill_supports(kv->type, a->head_dim) ||
        (int64_t)a->n_kv_heads * a->head_dim != kv->kv_dim || !cut_fits(cut))
        return cudaErrorInvalidValue;
    if (kv->type == CU_KV_BF16)
        return flash_hd<OpBF16>(kv, a, meta, n_meta, row0, n, q, cut, out, stream);
    return flash_hd<OpF16>(kv, a, meta, n_meta, row0, n, q, cut, out, stream);
}

extern "C" cudaError_t launch_flash_prefill_other(const cu_kv_pool *kv, const cu_attn *a,
                                                  const int32_t *meta, int n_meta, int row0,
                                                  int n, const float *q,
                                                  const cu_flash_cut *cut, float *out,
                                                  cudaStream_t stream)
{
    if (n <= 0)
        return cudaSuccess;
    if (kv->type != CU_KV_BF16 || a->head_dim != 128 || a->n_kv_heads <= 0 ||
        a->n_heads % a->n_kv_heads != 0 || a->n_heads > 65535 || row0 < 0 || row0 + n > n_meta ||
        (int64_t)a->n_kv_heads * a->head_dim != kv->kv_dim || !cut_fits(cut))
        return cudaErrorInvalidValue;
    return flash_mma_t<128, !FP_PREFETCH>(kv, a, meta, n_meta, row0, n, q, cut, out, stream);
}
