// The mat-vec's device code and host helpers (kernels/matmul.cuh), shared by
// its two translation units: kernels/matmul.cu (the launchers, the batched
// and grouped instances) and kernels/matmul_single.cu (the single-token
// instances), compiled in parallel. Launches stay in the .cu files (the CPU
// emulation rewrites them there, tests/gpu/emulate.sh), as does the dynamic
// shared memory's declaration (mv_stage_smem).
#ifndef MEMRA_KERNELS_MATMUL_KERNELS_CUH
#define MEMRA_KERNELS_MATMUL_KERNELS_CUH

#include "kernels/launch.cuh"
#include "kernels/matmul.cuh"
#include "kernels/weight_decode.cuh"

#include <atomic>

// What one launch reads and writes; passed between the translation units.
namespace memra_mv {

struct MVSeg {
    const uint8_t *w;
    size_t stride, soff;
    int64_t rows;
    const float *bias;
    float *out;
    unsigned blk0; // the segment's first group
};

struct MVArgs {
    MVSeg seg[CU_MV_MAX_W];
    int n_seg;
    int mode;          // cu_mv_mode
    const uint8_t *w2; // GLU: the up matrix, row-paired with seg[0]
    int64_t cols;
    const float *x;
    int n;
    unsigned n_groups; // groups of rows over all segments
};

// Whether the single-token launch of format fmt with r rows per warp
// streams its weights through shared memory (kernels/matmul_single.cu):
// then a launch's groups of rows are one warp's (MVArgs.n_groups counts
// tasks of r rows, GLU r / 2 pairs), else MV_WARPS warps'.
bool single_streamed(int fmt, int64_t cols, int r);

// Shared memory a block of this device may opt into, remembered per
// device (0: unknown).
int smem_optin_max();

// The single-token launch of format fmt: R = r rows per warp, x 16-byte
// aligned when ax, streamed as single_streamed said.
void launch_single(int fmt, const MVArgs &a, dim3 grid, int r, bool ax, bool streamed,
                   int sm_count, cudaStream_t s);

} // namespace memra_mv

// ---- kernels ----
//
// A block is MV_WARPS warps; a warp computes R weight rows (or, in GLU
// mode, row r of the gate and of the up matrix) for T tokens. A block takes
// one group of MV_WARPS * R rows (a "group": the rows the block's warps
// take together) after another, group g, g + gridDim.x, ..., as many
// blocks as the device holds at once, so a warp streams without pause: it
// issues the next group's first loads before it reduces and stores this
// group's sums, and the single-token path stages x once per block rather
// than once per group. A lane keeps D units of each of its rows in flight:
// it issues all their 16-byte loads before it decodes the first, which is
// what lets a few warps per SM stream weights at the memory's rate. None
// of R, T, D or the groups a block takes changes the order in which a
// value is summed (matmul.cuh). This kernel runs the batched instances,
// the float formats' single-token ones and quant rows too wide to stream;
// the quant formats' single-token kernel is mvs_kernel
// (kernels/matmul_single.cu), which sums with the same unit_acc.

namespace {

// The block's dynamic shared memory (the staged x), defined in each .cu
// (the emulation rewrites the declaration there).
DEV float *mv_stage_smem();

constexpr int MV_WARPS = 4;
constexpr int MV_THREADS = MV_WARPS * 32;
constexpr int MV_TOKENS = 8;       // input rows a block takes together when n > 1
constexpr int MV_LANE_BYTES = 128; // raw weight bytes a lane aims to have in flight
#ifndef MV_PREFETCH
#define MV_PREFETCH 1 // single-token rows_dot loads the next units before decoding these
#endif

using memra_mv::MVSeg;
using memra_mv::MVArgs;

// Units in flight per lane and row. MB is the blocks an SM must hold at
// once (__launch_bounds__'s second argument, 1: no bound): the float
// formats' single-token one-row instance held to 8 (64 registers, so that
// a 4,096-row matrix's 1,024 groups run in one round on a 132-SM H200,
// where 72 registers, 7 blocks an SM, left a second round of 100 blocks;
// docs/decisions/0006, 2026-11-30) takes MV_MIN_DEPTH units: four spilled
// there (two 16-byte units a lane summed while two more load, 32 warps
// an SM: 64 KB an SM in flight).
#ifndef MV_MIN_DEPTH
#define MV_MIN_DEPTH 2
#endif
template <int F, int R, int T, int MB = 1> struct MVDepth {
    static constexpr int raw = (int)sizeof(typename WFmt<F>::Raw);
    static constexpr int budget = T > 4 ? MV_LANE_BYTES / 2 : MV_LANE_BYTES;
    static constexpr int d = budget / (raw * R);
    static constexpr int cap = MB > 1 ? MV_MIN_DEPTH : 4;
    static constexpr int D = d < 1 ? 1 : d > cap ? cap : d;
};

// Whether this lane's row share starts with D whole units, so that it runs
// the software-pipelined loop (single-token only), whose first loads the
// caller issues.
template <int F, int R, int T, int MB = 1> DEV bool mv_pipelined(int64_t cols)
{
    constexpr int D = MVDepth<F, R, T, MB>::D;
    return MV_PREFETCH && T == 1 && (threadIdx.x & 31) + 32 * (D - 1) < cols / WFmt<F>::U;
}

// The single-token path of the quant formats keeps x in shared memory,
// staged once per block: a warp's lanes read their units' x U floats
// apart, which from global memory is one L1 wavefront per lane (the
// mat-vec's bound, not the decode); from shared memory, padded, it is
// conflict-free. Per unit S floats: its U values of x as the piece dot
// wants them (INT formats: scaled, weight_decode.cuh), then the P sums of
// x of its pieces, S / 4 odd so that the 8 lanes of a 16-byte access phase
// hit distinct banks. The values are the very floats the register path
// computes, so both give the same bytes.
template <int F> struct MVStage {
    static constexpr int S0 = WFmt<F>::U + WFmt<F>::P;
    static constexpr int S = (S0 / 4) % 2 == 0 ? S0 + 4 : S0;
};
constexpr size_t MV_STAGE_MAX = 96 * 1024; // bytes; wider rows take the register path

template <int F> size_t mv_stage_bytes(int64_t cols)
{
    return (size_t)(cols / WFmt<F>::U) * MVStage<F>::S * sizeof(float);
}

// PW floats of x at p, the first `valid` of them (the rest 0). AX: p is
// 16-byte aligned whenever valid >= PW.
template <int PW, bool AX> DEV void load_x(const float *p, int valid, float (&xv)[PW])
{
    if (AX && valid >= PW) {
#pragma unroll
        for (int j = 0; j < PW; j += 4) {
            const float4 v = __ldg(reinterpret_cast<const float4 *>(p + j));
            xv[j] = v.x;
            xv[j + 1] = v.y;
            xv[j + 2] = v.z;
            xv[j + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < PW; j++)
            xv[j] = j < valid ? __ldg(p + j) : 0.0f;
    }
}

// x as a piece dot of format F multiplies it: INT formats scale element j
// of piece p by 2^(MV_XEXP - its field's bit) (exact); others take x as it is.
template <int F> DEV float x_for_piece(float x, int p, int j)
{
    if constexpr (WFmt<F>::INT)
        return __fmul_rn(x, xup_of(xpos_of(WFmt<F>::xkind(p), j & 3)));
    else
        return x;
}

// The sum of a piece's x, in element order.
template <int PW> DEV float x_sum(const float (&xv)[PW])
{
    float sx = xv[0];
#pragma unroll
    for (int j = 1; j < PW; j++)
        sx = __fadd_rn(sx, xv[j]);
    return sx;
}

// Fill the block's stage (MVStage) from x, one piece per thread at a time.
template <int F, bool AX> DEV void stage_x(const float *x, int64_t cols, float *sm)
{
    using W = WFmt<F>;
    constexpr int PW = W::PW, S = MVStage<F>::S;
    const int64_t npieces = cols / PW;
    for (int64_t q = threadIdx.x; q < npieces; q += blockDim.x) {
        const int64_t u = q / W::P;
        const int p = (int)(q % W::P);
        float xv[PW];
        load_x<PW, AX>(x + q * PW, PW, xv);
        float *d = sm + u * S + p * PW;
#pragma unroll
        for (int j = 0; j < PW; j += 4)
            *reinterpret_cast<float4 *>(d + j) =
                make_float4(x_for_piece<F>(xv[j], p, j), x_for_piece<F>(xv[j + 1], p, j + 1),
                            x_for_piece<F>(xv[j + 2], p, j + 2), x_for_piece<F>(xv[j + 3], p, j + 3));
        sm[u * S + W::U + p] = x_sum(xv);
    }
    __syncthreads();
}

// One row's piece: acc += a * (v . xs) (+ b * sx), the dot in element
// order. The quant formats' one way to sum a piece, whether x comes staged
// or from registers: v are the piece's quants (INT: as subnormal floats,
// xs scaled to match), a and b its scales, sx the sum of its x.
template <int PW, bool HB>
DEV void piece_dot(const float (&v)[PW], const float (&xs)[PW], float a, float b, float sx,
                   float &acc)
{
    float s = __fmul_rn(v[0], xs[0]);
#pragma unroll
    for (int j = 1; j < PW; j++)
        s = __fmaf_rn(v[j], xs[j], s);
    acc = __fmaf_rn(a, s, acc);
    if (HB)
        acc = __fmaf_rn(b, sx, acc);
}

// acc[k][t] += unit u of row k . x_t, for the first nt of T input rows ldx
// floats apart. Float formats multiply-add element by element; quant
// formats sum v . x over a piece, then add a * sum (+ b * sum of x).
// FULL: the unit lies inside the row (always, but for the last unit of a
// float-format row whose width is no multiple of U); else only its first
// `valid` elements count. SM: x comes from the block's stage, input row t's
// sts floats after row 0's (stage_x's layout; the same values as the
// register path computes, so the same sums).
template <int F, int R, int T, bool AX, bool FULL, bool SM>
DEV void unit_acc(const typename WFmt<F>::Raw (&raw)[R], int64_t u, const float *x, int64_t ldx,
                  int nt, int valid_unit, float (&acc)[R][T], const float *sm, int64_t sts = 0)
{
    using W = WFmt<F>;
    constexpr int PW = W::PW;
    constexpr bool HB = W::INT || W::HAS_B; // the piece adds b * (sum of x)
    const int64_t c0 = u * W::U;
    const float *su = SM ? sm + u * MVStage<F>::S : nullptr;
    float sxs[W::P];
    if constexpr (SM && HB && T == 1) {
#pragma unroll
        for (int p = 0; p < W::P; p += 4) {
            const float4 v = *reinterpret_cast<const float4 *>(su + W::U + p);
            sxs[p] = v.x;
            sxs[p + 1] = v.y;
            sxs[p + 2] = v.z;
            sxs[p + 3] = v.w;
        }
    }
    float a[R][W::P], b[R][W::P];
    if constexpr (W::INT) {
#pragma unroll
        for (int k = 0; k < R; k++)
            W::iscales(raw[k], u, a[k], b[k]);
    } else if (!W::DIRECT) {
#pragma unroll
        for (int k = 0; k < R; k++)
            W::scales(raw[k], u, a[k], b[k]);
    }
#pragma unroll
    for (int p = 0; p < W::P; p++) {
        float v[R][PW];
#pragma unroll
        for (int k = 0; k < R; k++) {
            if constexpr (W::INT)
                W::ipiece(raw[k], u, p, v[k]);
            else
                W::piece(raw[k], u, p, v[k]);
        }
        const int valid = FULL ? PW : valid_unit - p * PW;
#pragma unroll
        for (int t = 0; t < T; t++) {
            if (T > 1 && t >= nt)
                break;
            if constexpr (W::DIRECT) {
                float xv[PW];
                load_x<PW, AX>(x + t * ldx + c0 + p * PW, valid, xv);
#pragma unroll
                for (int k = 0; k < R; k++)
#pragma unroll
                    for (int j = 0; j < PW; j++)
                        if (FULL || j < valid)
                            acc[k][t] = __fmaf_rn(v[k][j], xv[j], acc[k][t]);
            } else {
                float xs[PW], sx = 0.0f;
                if constexpr (SM) {
                    const float *st = T > 1 ? su + t * sts : su;
#pragma unroll
                    for (int j = 0; j < PW; j += 4) {
                        const float4 q = *reinterpret_cast<const float4 *>(st + p * PW + j);
                        xs[j] = q.x;
                        xs[j + 1] = q.y;
                        xs[j + 2] = q.z;
                        xs[j + 3] = q.w;
                    }
                    if constexpr (HB)
                        sx = T > 1 ? st[W::U + p] : sxs[p];
                } else {
                    float xv[PW];
                    load_x<PW, AX>(x + t * ldx + c0 + p * PW, valid, xv);
#pragma unroll
                    for (int j = 0; j < PW; j++)
                        xs[j] = x_for_piece<F>(xv[j], p, j);
                    if (HB)
                        sx = x_sum(xv);
                }
#pragma unroll
                for (int k = 0; k < R; k++)
                    piece_dot<PW, HB>(v[k], xs, a[k][p], HB ? b[k][p] : 0.0f, sx, acc[k][t]);
            }
        }
    }
}

// The first D units of this lane's share of rows wr, as rows_dot's
// pipelined loop starts from them.
template <int F, int R, int D>
DEV void fetch_first(const uint8_t *const *wr, size_t soff, typename WFmt<F>::Raw (&raw)[D][R])
{
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int d = 0; d < D; d++)
#pragma unroll
        for (int k = 0; k < R; k++)
            raw[d][k] = WFmt<F>::fetch(wr[k], soff, lane + 32 * d);
}

// The lane's share of R rows' dot products with nt input rows, summed over
// the warp: every lane ends with the sums. The main loop takes D units per
// row at a time with no bounds checks; the tail, one at a time. Either way
// a lane meets its units in ascending order. Single-token lanes that
// mv_pipelined start from raw (this group's first D units, fetched by the
// caller) and leave in it the first D units of the rows next(wn, soffn)
// names (the block's next group) when it returns true; when there is none
// it returns false and nothing more is loaded.
template <int F, int R, int T, bool AX, bool SM = false, int MB = 1, class Next>
DEV void rows_dot(const uint8_t *const *wr, size_t soff, const Next &next, int64_t cols,
                  const float *x, int nt,
                  typename WFmt<F>::Raw (&raw)[MVDepth<F, R, T, MB>::D][R], float (&acc)[R][T],
                  const float *sm = nullptr, int64_t sts = 0)
{
    using W = WFmt<F>;
    constexpr int D = MVDepth<F, R, T, MB>::D;
    const int lane = threadIdx.x & 31;
    const int64_t nu = wfmt_units<F>(cols), nfull = cols / W::U;
#pragma unroll
    for (int k = 0; k < R; k++)
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[k][t] = 0.0f;
    int64_t u0 = lane;
    if (mv_pipelined<F, R, T, MB>(cols)) {
        // Software-pipelined: the next D units' loads go out before this
        // step's decode; on the last step, the next group's first ones.
        for (;;) {
            const int64_t un = u0 + 32 * D;
            const bool more = un + 32 * (D - 1) < nfull;
            typename W::Raw nxt[D][R];
            bool fetched = more;
            if (more) {
#pragma unroll
                for (int d = 0; d < D; d++)
#pragma unroll
                    for (int k = 0; k < R; k++)
                        nxt[d][k] = W::fetch(wr[k], soff, un + 32 * d);
            } else {
                // The next rows' pointers are made here, where they are
                // used, so they hold no registers through the loop.
                const uint8_t *wn[R];
                size_t soffn;
                fetched = next(wn, soffn);
                if (fetched)
                    fetch_first<F, R, D>(wn, soffn, nxt);
            }
#pragma unroll
            for (int d = 0; d < D; d++)
                unit_acc<F, R, T, AX, true, SM>(raw[d], u0 + 32 * d, x, cols, nt, W::U, acc, sm, sts);
            u0 = un;
            if (fetched)
#pragma unroll
                for (int d = 0; d < D; d++)
#pragma unroll
                    for (int k = 0; k < R; k++)
                        raw[d][k] = nxt[d][k];
            if (!more)
                break;
        }
    }
    for (; u0 + 32 * (D - 1) < nfull; u0 += 32 * D) {
        typename W::Raw r[D][R];
#pragma unroll
        for (int d = 0; d < D; d++)
#pragma unroll
            for (int k = 0; k < R; k++)
                r[d][k] = W::fetch(wr[k], soff, u0 + 32 * d);
#pragma unroll
        for (int d = 0; d < D; d++)
            unit_acc<F, R, T, AX, true, SM>(r[d], u0 + 32 * d, x, cols, nt, W::U, acc, sm, sts);
    }
    for (; u0 < nu; u0 += 32) {
        typename W::Raw r[R];
#pragma unroll
        for (int k = 0; k < R; k++)
            r[k] = W::fetch(wr[k], soff, u0);
        if (u0 < nfull)
            unit_acc<F, R, T, AX, true, SM>(r, u0, x, cols, nt, W::U, acc, sm, sts);
        else
            unit_acc<F, R, T, AX, false, SM>(r, u0, x, cols, nt, (int)(cols - u0 * W::U), acc, sm,
                                             sts);
    }
#pragma unroll
    for (int k = 0; k < R; k++)
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[k][t] = warp_sum(acc[k][t]);
}

// The rows warp `warp` takes in group g: its segment, its first row and
// the rows' device pointers. GLU: slots 0 .. R/2-1 are gate rows first..,
// slots R/2.. the same up rows (mv_row). Rows past the end read the last
// row (no branch around the shuffles) and store nothing.
template <int R> struct MVRows {
    int s;
    int64_t first;
    const uint8_t *wr[R];
};

template <int R> DEV int64_t mv_row(const MVArgs &a, int64_t first, int k)
{
    constexpr int RG = R >= 2 ? R / 2 : 1;
    return a.mode != CU_MV_STORE ? first + (k % RG) : first + k;
}

template <int R, int WPG = MV_WARPS> DEV MVRows<R> mv_rows(const MVArgs &a, unsigned g, int warp)
{
    MVRows<R> m;
    m.s = 0;
#pragma unroll
    for (int i = 1; i < CU_MV_MAX_W; i++)
        if (i < a.n_seg && g >= a.seg[i].blk0)
            m.s = i;
    const MVSeg &sg = a.seg[m.s];
    const bool glu = a.mode != CU_MV_STORE;
    constexpr int RG = R >= 2 ? R / 2 : 1;
    m.first = ((int64_t)(g - sg.blk0) * WPG + warp) * (glu ? RG : R);
#pragma unroll
    for (int k = 0; k < R; k++) {
        const int64_t row = mv_row<R>(a, m.first, k);
        const int64_t rr = row < sg.rows ? row : sg.rows - 1;
        m.wr[k] = (glu && k >= RG ? a.w2 : sg.w) + rr * (int64_t)sg.stride;
    }
    return m;
}

// Lane 0 stores the warp's sums of rows m for input rows t0 .. t0 + nt - 1:
// plain (+ bias) or, GLU, act(gate) * up.
template <int R, int T>
DEV void mv_store(const MVArgs &a, const MVRows<R> &m, const float (&acc)[R][T], int t0, int nt)
{
    if ((threadIdx.x & 31) != 0)
        return;
    const MVSeg &sg = a.seg[m.s];
    constexpr int RG = R >= 2 ? R / 2 : 1;
#pragma unroll
    for (int t = 0; t < T; t++) {
        if (t >= nt)
            break;
        float *o = sg.out + (int64_t)(t0 + t) * sg.rows;
        if (a.mode != CU_MV_STORE) {
#pragma unroll
            for (int k = 0; k < RG; k++) {
                const int64_t row = mv_row<R>(a, m.first, k);
                if (R >= 2 && row < sg.rows) {
                    const float gt = acc[k][t];
                    const float act = a.mode == CU_MV_GLU_GELU ? gelu_tanh_f(gt) : silu_f(gt);
                    o[row] = __fmul_rn(act, acc[R >= 2 ? k + RG : 0][t]);
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < R; k++) {
                const int64_t row = mv_row<R>(a, m.first, k);
                if (row < sg.rows)
                    o[row] = sg.bias ? __fadd_rn(acc[k][t], sg.bias[row]) : acc[k][t];
            }
        }
    }
}

template <int F, int R, int T, bool AX, bool SM, int MB> DEV void matvec_body(const MVArgs &a)
{
    constexpr int D = MVDepth<F, R, T, MB>::D;
    const int warp = threadIdx.x >> 5;
    const int t0 = blockIdx.y * T;
    const int nt = min(T, a.n - t0);
    const float *x = a.x + (int64_t)t0 * a.cols;
    unsigned g = blockIdx.x;
    MVRows<R> m = mv_rows<R>(a, g, warp);
    // The first group's loads go out before x is staged.
    typename WFmt<F>::Raw raw[D][R];
    if (mv_pipelined<F, R, T, MB>(a.cols))
        fetch_first<F, R, D>(m.wr, a.seg[m.s].soff, raw);
    // Weights depend on no kernel: x and the outputs do (kernels/launch.cuh).
    pdl_trigger();
    pdl_wait();
    float *stage = nullptr;
    // (a stage of whole units: the launcher stages only such widths)
    const int64_t sts = SM ? a.cols / WFmt<F>::U * MVStage<F>::S : 0;
    if constexpr (SM) {
        stage = mv_stage_smem();
        for (int t = 0; t < nt; t++)
            stage_x<F, AX>(x + t * a.cols, a.cols, stage + t * sts);
    }
    for (;;) {
        const unsigned gn = g + gridDim.x;
        const bool more = gn < a.n_groups;
        const MVSeg &sg = a.seg[m.s];
        float acc[R][T];
        const auto next = [&](const uint8_t *(&wn)[R], size_t &soffn) {
            if (!more)
                return false;
            const MVRows<R> mn = mv_rows<R>(a, gn, warp);
#pragma unroll
            for (int k = 0; k < R; k++)
                wn[k] = mn.wr[k];
            soffn = a.seg[mn.s].soff;
            return true;
        };
        rows_dot<F, R, T, AX, SM, MB>(m.wr, sg.soff, next, a.cols, SM ? nullptr : x, nt, raw,
                                      acc, stage, sts);
        mv_store<R, T>(a, m, acc, t0, nt);
        if (!more)
            break;
        g = gn;
        m = mv_rows<R>(a, g, warp);
    }
}

// The mat-vec kernel; the same held to MB blocks an SM (MVDepth). Two
// kernels, because a minimum of 1 block given to __launch_bounds__ is not
// the same as none: ptxas then took 109 registers for BF16 where it takes 72.
template <int F, int R, int T, bool AX, bool SM>
__global__ void __launch_bounds__(MV_THREADS) matvec_kernel(const MVArgs a)
{
    matvec_body<F, R, T, AX, SM, 1>(a);
}

template <int F, int R, int T, bool AX, bool SM, int MB>
__global__ void __launch_bounds__(MV_THREADS, MB) matvec_kernel_mb(const MVArgs a)
{
    matvec_body<F, R, T, AX, SM, MB>(a);
}

// Whether the grouped kernels stage x in shared memory for this format
// and width: quant formats (whose x the piece dot wants scaled and summed)
// of whole units, up to the 48 KB a block has without asking. Staged or
// not, a row's sums are the same bits (MVStage).
template <int F> inline bool grouped_staged(int64_t cols)
{
    return !WFmt<F>::DIRECT && cols % WFmt<F>::U == 0 && mv_stage_bytes<F>(cols) <= 48 * 1024;
}

// One row of expert e for the input x: rows_dot of one token, x from the
// block's stage when SM (the caller staged it), else from x.
template <int F, bool AX, bool SM>
DEV float grouped_row(const uint8_t *wr0, size_t soff, int64_t cols, const float *x,
                      const float *stage, typename WFmt<F>::Raw (&raw)[MVDepth<F, 1, 1>::D][1])
{
    const uint8_t *wr[1] = {wr0};
    float acc[1][1];
    const auto none = [](const uint8_t *(&)[1], size_t &) { return false; };
    rows_dot<F, 1, 1, AX, SM>(wr, soff, none, cols, SM ? nullptr : x, 1, raw, acc, stage);
    return acc[0][0];
}

// Warp row r of expert ids[p] against input row xp, the grouped kernels'
// common part: the first weight fetch, x staged by the whole block (before
// any warp leaves), then the row's sum into *v; false (nothing summed) for
// a warp past the last row.
template <int F, bool AX, bool SM>
__device__ __forceinline__ bool grouped_pair_row(const uint8_t *const *__restrict__ experts,
                                                 const int32_t *__restrict__ ids, int64_t r,
                                                 int p, size_t stride, size_t soff, int64_t rows,
                                                 int64_t cols, const float *__restrict__ xp,
                                                 float *v)
{
    const bool active = r < rows;
    const uint8_t *wr = experts[ids[p]] + (active ? r : 0) * (int64_t)stride;
    typename WFmt<F>::Raw raw[MVDepth<F, 1, 1>::D][1];
    if (active && mv_pipelined<F, 1, 1>(cols))
        fetch_first<F, 1, MVDepth<F, 1, 1>::D>(&wr, soff, raw);
    float *stage = nullptr;
    if constexpr (SM) {
        stage = mv_stage_smem();
        stage_x<F, AX>(xp, cols, stage);
    }
    if (!active)
        return false;
    *v = grouped_row<F, AX, SM>(wr, soff, cols, xp, stage, raw);
    return true;
}

// A (token, choice) pair a block row: block (g, p) computes rows
// g * MV_WARPS.. of expert ids[p] for input row p / in_div.
template <int F, bool AX, bool SM>
__global__ void __launch_bounds__(MV_THREADS)
matmul_grouped_kernel(const uint8_t *const *__restrict__ experts, const int32_t *__restrict__ ids,
                      int in_div, size_t stride, size_t soff, int64_t rows, int64_t cols,
                      const float *__restrict__ x, float *__restrict__ out)
{
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    const int p = blockIdx.y;
    float v;
    if (grouped_pair_row<F, AX, SM>(experts, ids, r, p, stride, soff, rows, cols,
                                    x + (int64_t)(p / in_div) * cols, &v) &&
        (threadIdx.x & 31) == 0)
        out[(int64_t)p * rows + r] = v;
}

// The experts' gate and up in one launch (launch_matmul_grouped_glu):
// block (g, p), warp row r of expert ids[p]'s gate and up matrices in one
// rows_dot of two rows (each summed as the one-row kernel sums it), lane 0
// writing act(gate) * up: the bytes of launch_matmul_grouped for each and
// launch_glu after them, in one launch instead of three.
template <int F, bool AX, bool SM>
__global__ void __launch_bounds__(MV_THREADS)
matmul_grouped_glu_kernel(const uint8_t *const *__restrict__ gate,
                          const uint8_t *const *__restrict__ up, const int32_t *__restrict__ ids,
                          int in_div, size_t stride, size_t soff, int64_t rows, int64_t cols,
                          const float *__restrict__ x, int act, float *__restrict__ out)
{
    // The expert ids come from the launch before: nothing to fetch early.
    pdl_trigger();
    pdl_wait();
    constexpr int D = MVDepth<F, 2, 1>::D;
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    const int p = blockIdx.y;
    const bool active = r < rows;
    const int e = ids[p];
    const int64_t off = (active ? r : 0) * (int64_t)stride;
    const uint8_t *wr[2] = {gate[e] + off, up[e] + off};
    const float *xp = x + (int64_t)(p / in_div) * cols;
    typename WFmt<F>::Raw raw[D][2];
    if (active && mv_pipelined<F, 2, 1>(cols))
        fetch_first<F, 2, D>(wr, soff, raw);
    float *stage = nullptr;
    if constexpr (SM) {
        stage = mv_stage_smem();
        stage_x<F, AX>(xp, cols, stage); // the whole block, before any warp leaves
    }
    if (!active)
        return;
    float acc[2][1];
    const auto none = [](const uint8_t *(&)[2], size_t &) { return false; };
    rows_dot<F, 2, 1, AX, SM>(wr, soff, none, cols, SM ? nullptr : xp, 1, raw, acc, stage);
    if ((threadIdx.x & 31) == 0) {
        const float a = act == 0 ? silu_f(acc[0][0]) : gelu_tanh_f(acc[0][0]);
        out[(int64_t)p * rows + r] = __fmul_rn(a, acc[1][0]);
    }
}

// The experts' down projection and the combine in one launch
// (launch_matmul_grouped_combine): block (g, p) writes rows g * MV_WARPS..
// of pair p's down projection to y as matmul_grouped_kernel does (input
// row p); the last of token t's nu blocks of group g to finish then adds
// the token's nu rows, weighted, in choice order into a zeroed sum, as
// moe_combine_kernel does. Every block's rows are out before its count
// (the fence), so the last one counted sees them all; it leaves the count
// at 0 for the next launch.
template <int F, bool AX, bool SM>
__global__ void __launch_bounds__(MV_THREADS)
matmul_grouped_combine_kernel(const uint8_t *const *__restrict__ experts,
                              const int32_t *__restrict__ ids, const float *__restrict__ wts,
                              int nu, size_t stride, size_t soff, int64_t rows, int64_t cols,
                              const float *__restrict__ x, float *y, unsigned *counters,
                              float *__restrict__ out)
{
    pdl_trigger();
    pdl_wait();
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    const int p = blockIdx.y;
    float v;
    if (grouped_pair_row<F, AX, SM>(experts, ids, r, p, stride, soff, rows, cols,
                                    x + (int64_t)p * cols, &v) &&
        (threadIdx.x & 31) == 0)
        y[(int64_t)p * rows + r] = v;
    const int t = p / nu;
    __shared__ unsigned last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned *c = counters + (int64_t)t * gridDim.x + blockIdx.x;
        last = nu == 1 || atomicAdd(c, 1u) == (unsigned)nu - 1;
        if (last && nu > 1)
            *c = 0;
    }
    __syncthreads();
    if (!last)
        return;
    __threadfence();
    const int64_t row = (int64_t)blockIdx.x * MV_WARPS + threadIdx.x;
    if (threadIdx.x >= MV_WARPS || row >= rows)
        return;
    float acc = 0.0f;
    for (int j = 0; j < nu; j++)
        acc = __fadd_rn(acc, __fmul_rn(__ldcg(y + ((int64_t)t * nu + j) * rows + row),
                                       wts[(int64_t)t * nu + j]));
    out[(int64_t)t * rows + row] = acc;
}

// Grouped over runs of pairs of one expert (launch_moe_plan's chunks):
// block (g, k) computes rows g * MV_WARPS.. of chunk k's expert for each
// of its pairs in turn, whose inputs are rows first.. of xs; a warp's
// weight row stays in L1 from one pair to the next. Each pair's sum is the
// one-pair kernel's bit for bit (the same rows_dot of one token). The
// result of sorted position j goes to row out_idx[j] of out (j when
// out_idx is NULL).
template <int F, bool AX, bool SM>
__global__ void __launch_bounds__(MV_THREADS)
matmul_grouped_tokens_kernel(const uint8_t *const *__restrict__ experts,
                             const int32_t *__restrict__ chunks, const int32_t *__restrict__ n_chunks,
                             size_t stride, size_t soff, int64_t rows, int64_t cols,
                             const float *__restrict__ xs, const int32_t *__restrict__ out_idx,
                             float *__restrict__ out)
{
    const int k = blockIdx.y;
    if (k >= *n_chunks)
        return; // the whole block
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    const bool active = r < rows;
    const int e = chunks[3 * k], first = chunks[3 * k + 1], nt = chunks[3 * k + 2];
    const uint8_t *wr = experts[e] + (active ? r : 0) * (int64_t)stride;
    float *stage = SM ? mv_stage_smem() : nullptr;
    for (int t = 0; t < nt; t++) {
        const int j = first + t;
        const float *xt = xs + (int64_t)j * cols;
        typename WFmt<F>::Raw raw[MVDepth<F, 1, 1>::D][1];
        if (active && mv_pipelined<F, 1, 1>(cols))
            fetch_first<F, 1, MVDepth<F, 1, 1>::D>(&wr, soff, raw);
        if constexpr (SM) {
            if (t > 0)
                __syncthreads(); // every warp is done with the last pair's stage
            stage_x<F, AX>(xt, cols, stage);
        }
        if (active) {
            const float v = grouped_row<F, AX, SM>(wr, soff, cols, xt, stage, raw);
            if ((threadIdx.x & 31) == 0)
                out[(int64_t)(out_idx ? out_idx[j] : j) * rows + r] = v;
        }
    }
}

// Blocks of `kernel` an SM holds at once with blocks of `threads` threads
// and smem bytes of dynamic shared memory (0: unknown), remembered per
// kernel for the last (threads, smem) asked.
template <class K>
int mv_blocks_per_sm(K kernel, int threads, size_t smem, std::atomic<uint64_t> &memo)
{
    const uint64_t key = ((uint64_t)smem << 10) | (uint64_t)threads;
    const uint64_t m = memo.load(std::memory_order_relaxed);
    if (m != 0 && (m >> 16) == key)
        return (int)(m & 0xFFFFu);
#if defined(MEMRA_TESTS_EMU_CUDA_H)
    // The CPU emulation has no occupancy query: two blocks per emulated SM,
    // so the kernel check's larger matrices give each block several groups.
    (void)kernel;
    int n = 2;
#else
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, threads, smem) != cudaSuccess)
        return 0;
#endif
    n = n > 0xFFFF ? 0xFFFF : n;
    if (n > 0)
        memo.store((key << 16) | (uint64_t)n, std::memory_order_relaxed);
    return n;
}

// grid.x is the number of groups; with sm_count known,
// no more blocks than the device holds at once, each looping over groups.
template <class K>
dim3 mv_grid(K kernel, int threads, size_t smem, dim3 grid, int sm_count,
             std::atomic<uint64_t> &memo)
{
    if (sm_count <= 0)
        return grid;
    const int per_sm = mv_blocks_per_sm(kernel, threads, smem, memo);
    if (per_sm <= 0)
        return grid;
    // Blocks of every token group count: resident blocks split among them.
    const uint64_t cap = (uint64_t)per_sm * (uint64_t)sm_count;
    const uint64_t want = (cap + grid.y - 1) / grid.y;
    if (want < grid.x)
        grid.x = (unsigned)(want < 1 ? 1 : want);
    return grid;
}

} // namespace

#endif
