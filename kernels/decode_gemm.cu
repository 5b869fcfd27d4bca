#include <cuda_bf16.h>
#include <mma.h>

#include "kernels/decode_gemm.cuh"
#include "kernels/dev_common.cuh"
#include "kernels/weight_layout.h"

// ---- kernels ----
//
// A block is DG_WARPS warps over one tile of DG_TILE output slots (weight
// rows; in GLU mode 64 gate rows then the same 64 up rows), one split of
// the columns and up to DG_TOK tokens. Each warp owns 16 slots. Per step
// of DG_KC columns:
//   - every warp copies its 16 rows' raw bf16 (2 KB, 16-byte loads issued
//     DG_PD steps ahead, which is what keeps the memory busy at batch 1)
//     into its own shared tile;
//   - the block rounds the next step's x to bf16 into the other half of a
//     double buffer (tokens past the batch stay zero);
//   - four 16x16x16 mma steps per 16 tokens.
// The output tile goes through shared memory to the partial-sum scratch
// or, with one split, straight to the output with bias or activation.

namespace {

using namespace nvcuda;

constexpr int DG_WARPS = 8;
constexpr int DG_THREADS = DG_WARPS * 32;
constexpr int DG_TILE = DG_WARPS * 16; // output slots per block
constexpr int DG_KC = CU_DG_COLS_STEP; // columns per step
constexpr int DG_LDS = DG_KC + 8;      // bf16 row stride in shared memory (bank spread)
constexpr int DG_TOK = 64;             // tokens per block
constexpr int DG_PD = 4;               // steps of weight loads in flight per lane
constexpr int DG_LDO = DG_TILE + 4;    // f32 row stride of the output tile
constexpr size_t DG_W_BYTES = (size_t)DG_WARPS * 16 * DG_LDS * 2;
constexpr size_t DG_X_BYTES = (size_t)2 * DG_TOK * DG_LDS * 2;
constexpr size_t DG_O_BYTES = (size_t)DG_TOK * DG_LDO * 4;
constexpr size_t DG_SMEM = DG_W_BYTES + DG_X_BYTES > DG_O_BYTES ? DG_W_BYTES + DG_X_BYTES
                                                                 : DG_O_BYTES;

struct DGSeg {
    const uint8_t *w, *w2; // w2: GLU's up matrix
    size_t stride;
    int64_t rows;
    const float *bias;
    float *out;
    unsigned tile0; // the segment's first tile
};

struct DGArgs {
    DGSeg seg[CU_MV_MAX_W];
    int n_seg;
    int mode;
    int64_t cols;
    const float *x;
    int n;
    int ks, cps;    // splits, steps per split
    unsigned tiles; // in all segments
    float *partials;
    unsigned *counters;
};

// x's steps reach shared memory through registers, loaded one step ahead
// so their latency (an L2 round trip) is not paid at every step: XR float4
// per thread, by threads `who` of `count` (the warp's lanes, or the
// block's threads) over ntok tokens' DG_KC columns.
template <int XR> struct XPrefetch {
    float4 v[XR];
    DEV void load(const float *x, int64_t cols, int ntok, int64_t kc, int who, int count)
    {
#pragma unroll
        for (int i = 0; i < XR; i++) {
            const int q = who + i * count;
            if (q < ntok * (DG_KC / 4))
                v[i] = __ldg(reinterpret_cast<const float4 *>(
                    x + (int64_t)(q / (DG_KC / 4)) * cols + kc * DG_KC + (q % (DG_KC / 4)) * 4));
        }
    }
    // Round to bf16 into d [token][DG_LDS].
    DEV void store(__nv_bfloat16 *d, int ntok, int who, int count) const
    {
#pragma unroll
        for (int i = 0; i < XR; i++) {
            const int q = who + i * count;
            if (q < ntok * (DG_KC / 4)) {
                __nv_bfloat16 *o = d + (q / (DG_KC / 4)) * DG_LDS + (q % (DG_KC / 4)) * 4;
                o[0] = __float2bfloat16_rn(v[i].x);
                o[1] = __float2bfloat16_rn(v[i].y);
                o[2] = __float2bfloat16_rn(v[i].z);
                o[3] = __float2bfloat16_rn(v[i].w);
            }
        }
    }
};

// NT: 16-token mma columns; XT: the most tokens a block has (sizes the x
// prefetch); MINB: blocks an SM should hold at once (2 caps the registers
// at 128).
template <int NT, int XT, int MINB>
__global__ void __launch_bounds__(DG_THREADS, MINB) decode_gemm_kernel(const DGArgs a)
{
    __shared__ __align__(128) unsigned char sm[DG_SMEM];
    __shared__ unsigned last_block;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned tile = blockIdx.x / (unsigned)a.ks;
    const int split = (int)(blockIdx.x % (unsigned)a.ks);
    int s = 0;
#pragma unroll
    for (int i = 1; i < CU_MV_MAX_W; i++)
        if (i < a.n_seg && tile >= a.seg[i].tile0)
            s = i;
    const DGSeg sg = a.seg[s];
    const bool glu = a.mode != CU_MV_STORE;
    const int64_t base = (int64_t)(tile - sg.tile0) * (glu ? DG_TILE / 2 : DG_TILE);
    const int64_t row0 = base + (glu ? (warp & 3) * 16 : warp * 16);
    const uint8_t *wm = glu && warp >= 4 ? sg.w2 : sg.w;
    const int t0 = blockIdx.y * DG_TOK;
    const int ntok = min(DG_TOK, a.n - t0);
    const int64_t nsteps = a.cols / DG_KC;
    const int64_t c0 = (int64_t)split * a.cps;
    const int nc = (int)min((int64_t)a.cps, nsteps - c0);
    const float *x = a.x + (int64_t)t0 * a.cols;

    // Lane l copies 16-byte piece (l & 7) of rows l / 8, 4 + l / 8, ...;
    // rows past the matrix read its last row and are never stored.
    const uint8_t *wp[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int64_t r = min(row0 + i * 4 + (lane >> 3), sg.rows - 1);
        wp[i] = wm + r * (int64_t)sg.stride + (lane & 7) * 16 + c0 * DG_KC * 2;
    }
    uint4 raw[DG_PD][4];
#pragma unroll
    for (int p = 0; p < DG_PD; p++)
        if (p < nc)
#pragma unroll
            for (int i = 0; i < 4; i++)
                raw[p][i] = __ldg(reinterpret_cast<const uint4 *>(wp[i] + p * DG_KC * 2));

    // Up to 16 tokens (NT 1) each warp rounds its own copy of x's steps
    // (one tile, rewritten between __syncwarp()s: no block barrier in the
    // loop); more tokens share a double-buffered block copy.
    constexpr bool WARP_X = NT == 1;
    constexpr int XR = (XT * (DG_KC / 4) + (WARP_X ? 32 : DG_THREADS) - 1) / (WARP_X ? 32 : DG_THREADS);
    const int xwho = WARP_X ? lane : (int)threadIdx.x, xcount = WARP_X ? 32 : DG_THREADS;
    __nv_bfloat16 *wt = reinterpret_cast<__nv_bfloat16 *>(sm) + warp * 16 * DG_LDS;
    __nv_bfloat16 *xs = reinterpret_cast<__nv_bfloat16 *>(sm + DG_W_BYTES);
    __nv_bfloat16 *xw = xs + warp * 16 * DG_LDS;
    for (int i = threadIdx.x; i < (int)(DG_X_BYTES / 16); i += DG_THREADS)
        reinterpret_cast<uint4 *>(xs)[i] = make_uint4(0, 0, 0, 0);
    XPrefetch<XR> xp;
    xp.load(x, a.cols, ntok, c0, xwho, xcount);
    __syncthreads();
    if (!WARP_X) {
        xp.store(xs, ntok, xwho, xcount);
        if (nc > 1)
            xp.load(x, a.cols, ntok, c0 + 1, xwho, xcount);
        __syncthreads();
    }

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        wmma::fill_fragment(acc[t], 0.0f);
    for (int c = 0; c < nc; c += DG_PD) {
#pragma unroll
        for (int p = 0; p < DG_PD; p++) {
            const int cc = c + p;
            if (cc >= nc)
                break;
            __syncwarp();
            if (WARP_X) {
                xp.store(xw, ntok, xwho, xcount);
                if (cc + 1 < nc)
                    xp.load(x, a.cols, ntok, c0 + cc + 1, xwho, xcount);
            } else if (cc + 1 < nc) {
                xp.store(xs + ((cc + 1) & 1) * DG_TOK * DG_LDS, ntok, xwho, xcount);
                if (cc + 2 < nc)
                    xp.load(x, a.cols, ntok, c0 + cc + 2, xwho, xcount);
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
                *reinterpret_cast<uint4 *>(wt + (i * 4 + (lane >> 3)) * DG_LDS + (lane & 7) * 8) =
                    raw[p][i];
            if (cc + DG_PD < nc)
#pragma unroll
                for (int i = 0; i < 4; i++)
                    raw[p][i] = __ldg(reinterpret_cast<const uint4 *>(wp[i] + (int64_t)(cc + DG_PD) * DG_KC * 2));
            __syncwarp();
            const __nv_bfloat16 *xb = WARP_X ? xw : xs + (cc & 1) * DG_TOK * DG_LDS;
#pragma unroll
            for (int kk = 0; kk < DG_KC / 16; kk++) {
                wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
                wmma::load_matrix_sync(fa, wt + kk * 16, DG_LDS);
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> fb;
                    wmma::load_matrix_sync(fb, xb + t * 16 * DG_LDS + kk * 16, DG_LDS);
                    wmma::mma_sync(acc[t], fa, fb, acc[t]);
                }
            }
            if (!WARP_X)
                __syncthreads();
        }
    }

    // o[token][slot]: the block's sums (nc == 0 leaves them 0).
    float *o = reinterpret_cast<float *>(sm);
    __syncthreads();
#pragma unroll
    for (int t = 0; t < NT; t++)
        wmma::store_matrix_sync(o + t * 16 * DG_LDO + warp * 16, acc[t], DG_LDO,
                                wmma::mem_col_major);
    __syncthreads();

    if (a.ks > 1) {
        const size_t slots = (size_t)a.tiles * DG_TILE;
        for (int q = threadIdx.x; q < ntok * DG_TILE; q += DG_THREADS) {
            const int t = q / DG_TILE, i = q % DG_TILE;
            a.partials[((size_t)split * a.n + t0 + t) * slots + (size_t)tile * DG_TILE + i] =
                o[t * DG_LDO + i];
        }
        __threadfence();
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned *cnt = a.counters + (size_t)blockIdx.y * a.tiles + tile;
            const unsigned prev = atomicAdd(cnt, 1u);
            last_block = prev == (unsigned)a.ks - 1;
            if (last_block)
                *cnt = 0; // every split has counted: ready for the next launch
        }
        __syncthreads();
        if (!last_block)
            return;
        __threadfence();
        // The splits' sums in ascending order, whichever block is last.
        for (int q = threadIdx.x; q < ntok * DG_TILE; q += DG_THREADS) {
            const int t = q / DG_TILE, i = q % DG_TILE;
            const float *p = a.partials + ((size_t)t0 + t) * slots + (size_t)tile * DG_TILE + i;
            float v = __ldcg(p);
            for (int k = 1; k < a.ks; k++)
                v = __fadd_rn(v, __ldcg(p + (size_t)k * a.n * slots));
            o[t * DG_LDO + i] = v;
        }
        __syncthreads();
    }

    if (!glu) {
        for (int q = threadIdx.x; q < ntok * DG_TILE; q += DG_THREADS) {
            const int t = q / DG_TILE, i = q % DG_TILE;
            const int64_t row = base + i;
            if (row < sg.rows) {
                const float v = o[t * DG_LDO + i];
                sg.out[(int64_t)(t0 + t) * sg.rows + row] = sg.bias ? __fadd_rn(v, sg.bias[row]) : v;
            }
        }
    } else {
        constexpr int H = DG_TILE / 2;
        for (int q = threadIdx.x; q < ntok * H; q += DG_THREADS) {
            const int t = q / H, i = q % H;
            const int64_t row = base + i;
            if (row < sg.rows) {
                const float g = o[t * DG_LDO + i];
                const float act = a.mode == CU_MV_GLU_GELU ? gelu_tanh_f(g) : silu_f(g);
                sg.out[(int64_t)(t0 + t) * sg.rows + row] = __fmul_rn(act, o[t * DG_LDO + H + i]);
            }
        }
    }
}

// Tiles of each segment and in all.
unsigned dg_tiles(const cu_mv_job *j, unsigned *tile0)
{
    const bool glu = j->mode != CU_MV_STORE;
    const int per = glu ? DG_TILE / 2 : DG_TILE;
    const int nseg = glu ? 1 : j->n_w;
    unsigned t = 0;
    for (int i = 0; i < nseg; i++) {
        if (tile0)
            tile0[i] = t;
        t += (unsigned)((j->w[i]->rows + per - 1) / per);
    }
    return t;
}

// (splits, steps per split) for the job: about blocks_per_sm blocks per
// SM in all, the columns shared out in whole steps.
void dg_split(const cu_mv_job *j, int blocks_per_sm, int *ks, int *cps)
{
    const int64_t nsteps = j->w[0]->cols / DG_KC;
    const unsigned tiles = dg_tiles(j, nullptr);
    const int64_t target = (int64_t)(blocks_per_sm > 0 ? blocks_per_sm : 1) *
                           (j->sm_count > 0 ? j->sm_count : 16);
    int64_t k = (target + tiles / 2) / tiles;
    k = k < 1 ? 1 : k > nsteps ? nsteps : k;
    const int64_t per = (nsteps + k - 1) / k;
    *cps = (int)per;
    *ks = (int)((nsteps + per - 1) / per);
}

} // namespace

// ---- launchers ----

extern "C" int cu_dg_job_ok(const cu_mv_job *j)
{
    if (!cu_mv_job_ok(j) || j->n <= 0)
        return 0;
    const int64_t cols = j->w[0]->cols;
    if (cols < DG_KC || cols % DG_KC != 0 || cols / DG_KC > INT32_MAX)
        return 0;
    if ((reinterpret_cast<uintptr_t>(j->x) & 15u) != 0)
        return 0;
    for (int i = 0; i < j->n_w; i++)
        if (j->w[i]->fmt != CW_BF16 || (reinterpret_cast<uintptr_t>(j->w[i]->data) & 15u) != 0 ||
            j->w[i]->stride % 16 != 0)
            return 0;
    return 1;
}

extern "C" int cu_dg_splits(const cu_mv_job *j, int blocks_per_sm)
{
    int ks, cps;
    dg_split(j, blocks_per_sm, &ks, &cps);
    return ks;
}

extern "C" size_t cu_dg_partial_floats(const cu_mv_job *j, int blocks_per_sm)
{
    const int ks = cu_dg_splits(j, blocks_per_sm);
    return ks > 1 ? (size_t)ks * (size_t)j->n * dg_tiles(j, nullptr) * DG_TILE : 0;
}

extern "C" size_t cu_dg_counters(const cu_mv_job *j, int blocks_per_sm)
{
    const int ks = cu_dg_splits(j, blocks_per_sm);
    return ks > 1 ? (size_t)((j->n + DG_TOK - 1) / DG_TOK) * dg_tiles(j, nullptr) : 0;
}

extern "C" cudaError_t launch_decode_gemm(const cu_mv_job *j, int blocks_per_sm, float *partials,
                                          unsigned *counters, cudaStream_t stream)
{
    if (!cu_dg_job_ok(j))
        return cudaErrorInvalidValue;
    DGArgs a = {};
    const bool glu = j->mode != CU_MV_STORE;
    unsigned tile0[CU_MV_MAX_W] = {0};
    a.tiles = dg_tiles(j, tile0);
    dg_split(j, blocks_per_sm, &a.ks, &a.cps);
    if (a.ks > 1 && (!partials || !counters))
        return cudaErrorInvalidValue;
    a.mode = j->mode;
    a.cols = j->w[0]->cols;
    a.x = j->x;
    a.n = j->n;
    a.partials = partials;
    a.counters = counters;
    a.n_seg = glu ? 1 : j->n_w;
    for (int i = 0; i < a.n_seg; i++) {
        const cu_matrix *w = j->w[i];
        a.seg[i] = DGSeg{static_cast<const uint8_t *>(w->data),
                         glu ? static_cast<const uint8_t *>(j->w[1]->data) : nullptr, w->stride,
                         w->rows, j->bias[i], j->out[i], tile0[i]};
    }
    const int64_t blocks = (int64_t)a.tiles * a.ks, groups = (j->n + DG_TOK - 1) / DG_TOK;
    if (blocks > INT32_MAX || groups > 65535)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)blocks, (unsigned)groups);
    // Tokens per 16-wide mma: the largest group's (the rest are zero).
    const int most = j->n < DG_TOK ? j->n : DG_TOK;
    if (most <= 2 && blocks_per_sm >= 2)
        decode_gemm_kernel<1, 2, 2><<<grid, DG_THREADS, 0, stream>>>(a);
    else if (most <= 2)
        decode_gemm_kernel<1, 2, 1><<<grid, DG_THREADS, 0, stream>>>(a);
    else if (most <= 16)
        decode_gemm_kernel<1, 16, 1><<<grid, DG_THREADS, 0, stream>>>(a);
    else if (most <= 32)
        decode_gemm_kernel<2, 32, 1><<<grid, DG_THREADS, 0, stream>>>(a);
    else
        decode_gemm_kernel<4, DG_TOK, 1><<<grid, DG_THREADS, 0, stream>>>(a);
    return cudaGetLastError();
}
