#include "kernels/matmul.cuh"
#include "kernels/weight_decode.cuh"

// ---- kernels ----
//
// A block is MV_WARPS warps; a warp computes R weight rows (or, in GLU
// mode, row r of the gate and of the up matrix) for T tokens. A lane keeps
// D units of each of its rows in flight: it issues all their 16-byte loads
// before it decodes the first, which is what lets a few warps per SM
// stream weights at the memory's rate. None of R, T, D changes the order
// in which a value is summed (matmul.cuh).

namespace {

constexpr int MV_WARPS = 4;
constexpr int MV_THREADS = MV_WARPS * 32;
constexpr int MV_TOKENS = 8;       // input rows a block takes together when n > 1
constexpr int MV_LANE_BYTES = 128; // raw weight bytes a lane aims to have in flight
#ifndef MV_PREFETCH
#define MV_PREFETCH 1 // single-token rows_dot loads the next units before decoding these
#endif

struct MVSeg {
    const uint8_t *w;
    size_t stride, soff;
    int64_t rows;
    const float *bias;
    float *out;
    unsigned blk0; // the segment's first block
};

struct MVArgs {
    MVSeg seg[CU_MV_MAX_W];
    int n_seg;
    int mode;          // cu_mv_mode
    const uint8_t *w2; // GLU: the up matrix, row-paired with seg[0]
    int64_t cols;
    const float *x;
    int n;
};

// Units in flight per lane and row.
template <int F, int R, int T> struct MVDepth {
    static constexpr int raw = (int)sizeof(typename WFmt<F>::Raw);
    static constexpr int budget = T > 1 ? MV_LANE_BYTES / 2 : MV_LANE_BYTES;
    static constexpr int d = budget / (raw * R);
    static constexpr int D = d < 1 ? 1 : d > 4 ? 4 : d;
};

// The single-token INT path keeps x in shared memory, staged once per
// block: a warp's lanes read their units' x U floats apart, which from
// global memory is one L1 wavefront per lane (the mat-vec's bound, not the
// decode); from shared memory, padded, it is conflict-free. Per unit S
// floats: its U values of x already scaled as the INT path wants them, then
// the P sums of x of its pieces, S / 4 odd so that the 8 lanes of a
// 16-byte access phase hit distinct banks. The values are the very floats
// the register path computes, so both give the same bytes.
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
        float sx = xv[0];
#pragma unroll
        for (int j = 1; j < PW; j++)
            sx = __fadd_rn(sx, xv[j]);
        float *d = sm + u * S + p * PW;
#pragma unroll
        for (int j = 0; j < PW; j++)
            d[j] = __fmul_rn(xv[j], xup_of(xpos_of(W::xkind(p), j & 3)));
        sm[u * S + W::U + p] = sx;
    }
    __syncthreads();
}

// acc[k][t] += unit u of row k . x_t, for the first nt of T input rows ldx
// floats apart. Float formats multiply-add element by element; quant
// formats sum v . x over a piece, then add a * sum (+ b * sum of x).
// FULL: the unit lies inside the row (always, but for the last unit of a
// float-format row whose width is no multiple of U); else only its first
// `valid` elements count.
template <int F, int R, int T, bool AX, bool FULL, bool SM>
DEV void unit_acc(const typename WFmt<F>::Raw (&raw)[R], int64_t u, const float *x, int64_t ldx,
                  int nt, int valid_unit, float (&acc)[R][T], const float *sm)
{
    using W = WFmt<F>;
    constexpr int PW = W::PW;
    const int64_t c0 = u * W::U;
    // SM: this unit's staged x and piece sums (T is 1).
    const float *su = SM ? sm + u * MVStage<F>::S : nullptr;
    float sxs[W::P];
    if constexpr (SM) {
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
            float xv[PW];
            if constexpr (!SM)
                load_x<PW, AX>(x + t * ldx + c0 + p * PW, valid, xv);
            if constexpr (W::DIRECT) {
#pragma unroll
                for (int k = 0; k < R; k++)
#pragma unroll
                    for (int j = 0; j < PW; j++)
                        if (FULL || j < valid)
                            acc[k][t] = __fmaf_rn(v[k][j], xv[j], acc[k][t]);
            } else if constexpr (W::INT) {
                // Subnormal quants (weight_decode.cuh): x_j scaled by
                // 2^(MV_XEXP - its field's bit), exactly; b takes the sum of x.
                float xs[PW], sx;
                if constexpr (SM) {
#pragma unroll
                    for (int j = 0; j < PW; j += 4) {
                        const float4 v = *reinterpret_cast<const float4 *>(su + p * PW + j);
                        xs[j] = v.x;
                        xs[j + 1] = v.y;
                        xs[j + 2] = v.z;
                        xs[j + 3] = v.w;
                    }
                    sx = sxs[p];
                } else {
#pragma unroll
                    for (int j = 0; j < PW; j++)
                        xs[j] = __fmul_rn(xv[j], xup_of(xpos_of(W::xkind(p), j & 3)));
                    sx = xv[0];
#pragma unroll
                    for (int j = 1; j < PW; j++)
                        sx = __fadd_rn(sx, xv[j]);
                }
#pragma unroll
                for (int k = 0; k < R; k++) {
                    float s = __fmul_rn(v[k][0], xs[0]);
#pragma unroll
                    for (int j = 1; j < PW; j++)
                        s = __fmaf_rn(v[k][j], xs[j], s);
                    acc[k][t] = __fmaf_rn(a[k][p], s, acc[k][t]);
                    acc[k][t] = __fmaf_rn(b[k][p], sx, acc[k][t]);
                }
            } else {
                float sx = 0.0f;
                if (W::HAS_B) {
                    sx = xv[0];
#pragma unroll
                    for (int j = 1; j < PW; j++)
                        sx = __fadd_rn(sx, xv[j]);
                }
#pragma unroll
                for (int k = 0; k < R; k++) {
                    float s = __fmul_rn(v[k][0], xv[0]);
#pragma unroll
                    for (int j = 1; j < PW; j++)
                        s = __fmaf_rn(v[k][j], xv[j], s);
                    acc[k][t] = __fmaf_rn(a[k][p], s, acc[k][t]);
                    if (W::HAS_B)
                        acc[k][t] = __fmaf_rn(b[k][p], sx, acc[k][t]);
                }
            }
        }
    }
}

// The lane's share of R rows' dot products with nt input rows, summed over
// the warp: every lane ends with the sums. The main loop takes D units per
// row at a time with no bounds checks; the tail, one at a time. Either way
// a lane meets its units in ascending order.
template <int F, int R, int T, bool AX, bool SM = false>
DEV void rows_dot(const uint8_t *const *wr, size_t soff, int64_t cols, const float *x, int nt,
                  float (&acc)[R][T], const float *sm = nullptr)
{
    using W = WFmt<F>;
    constexpr int D = MVDepth<F, R, T>::D;
    const int lane = threadIdx.x & 31;
    const int64_t nu = wfmt_units<F>(cols), nfull = cols / W::U;
#pragma unroll
    for (int k = 0; k < R; k++)
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[k][t] = 0.0f;
    int64_t u0 = lane;
    if (MV_PREFETCH && T == 1 && u0 + 32 * (D - 1) < nfull) {
        // Software-pipelined: the next D units' loads go out before this
        // step's decode (on the last step they re-read this step's units,
        // from L2, and are dropped).
        typename W::Raw raw[D][R];
#pragma unroll
        for (int d = 0; d < D; d++)
#pragma unroll
            for (int k = 0; k < R; k++)
                raw[d][k] = W::fetch(wr[k], soff, u0 + 32 * d);
        for (;;) {
            const int64_t un = u0 + 32 * D;
            const bool more = un + 32 * (D - 1) < nfull;
            const int64_t uf = more ? un : u0;
            typename W::Raw nxt[D][R];
#pragma unroll
            for (int d = 0; d < D; d++)
#pragma unroll
                for (int k = 0; k < R; k++)
                    nxt[d][k] = W::fetch(wr[k], soff, uf + 32 * d);
#pragma unroll
            for (int d = 0; d < D; d++)
                unit_acc<F, R, T, AX, true, SM>(raw[d], u0 + 32 * d, x, cols, nt, W::U, acc, sm);
            u0 = un;
            if (!more)
                break;
#pragma unroll
            for (int d = 0; d < D; d++)
#pragma unroll
                for (int k = 0; k < R; k++)
                    raw[d][k] = nxt[d][k];
        }
    }
    for (; u0 + 32 * (D - 1) < nfull; u0 += 32 * D) {
        typename W::Raw raw[D][R];
#pragma unroll
        for (int d = 0; d < D; d++)
#pragma unroll
            for (int k = 0; k < R; k++)
                raw[d][k] = W::fetch(wr[k], soff, u0 + 32 * d);
#pragma unroll
        for (int d = 0; d < D; d++)
            unit_acc<F, R, T, AX, true, SM>(raw[d], u0 + 32 * d, x, cols, nt, W::U, acc, sm);
    }
    for (; u0 < nu; u0 += 32) {
        typename W::Raw raw[R];
#pragma unroll
        for (int k = 0; k < R; k++)
            raw[k] = W::fetch(wr[k], soff, u0);
        if (u0 < nfull)
            unit_acc<F, R, T, AX, true, SM>(raw, u0, x, cols, nt, W::U, acc, sm);
        else
            unit_acc<F, R, T, AX, false, SM>(raw, u0, x, cols, nt, (int)(cols - u0 * W::U), acc, sm);
    }
#pragma unroll
    for (int k = 0; k < R; k++)
#pragma unroll
        for (int t = 0; t < T; t++)
            acc[k][t] = warp_sum(acc[k][t]);
}

template <int F, int R, int T, bool AX, bool SM>
__global__ void __launch_bounds__(MV_THREADS) matvec_kernel(const MVArgs a)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int s = 0;
#pragma unroll
    for (int i = 1; i < CU_MV_MAX_W; i++)
        if (i < a.n_seg && blockIdx.x >= a.seg[i].blk0)
            s = i;
    const MVSeg sg = a.seg[s];
    // GLU: slots 0 .. R/2-1 are gate rows first.., slots R/2.. the same up rows.
    const bool glu = a.mode != CU_MV_STORE;
    constexpr int RG = R >= 2 ? R / 2 : 1;
    const int64_t first = ((int64_t)(blockIdx.x - sg.blk0) * MV_WARPS + warp) * (glu ? RG : R);
    // Rows past the end read the last row (no branch around the shuffles)
    // and store nothing.
    const uint8_t *wr[R];
    int64_t row[R];
#pragma unroll
    for (int k = 0; k < R; k++) {
        row[k] = glu ? first + (k % RG) : first + k;
        const int64_t rr = row[k] < sg.rows ? row[k] : sg.rows - 1;
        wr[k] = (glu && k >= RG ? a.w2 : sg.w) + rr * (int64_t)sg.stride;
    }
    const int t0 = blockIdx.y * T;
    const int nt = min(T, a.n - t0);
    float acc[R][T];
    if constexpr (SM) {
        extern __shared__ float mv_stage[];
        stage_x<F, AX>(a.x + (int64_t)t0 * a.cols, a.cols, mv_stage);
        rows_dot<F, R, T, AX, true>(wr, sg.soff, a.cols, nullptr, nt, acc, mv_stage);
    } else {
        rows_dot<F, R, T, AX>(wr, sg.soff, a.cols, a.x + (int64_t)t0 * a.cols, nt, acc);
    }
    if (lane != 0)
        return;
#pragma unroll
    for (int t = 0; t < T; t++) {
        if (t >= nt)
            break;
        float *o = sg.out + (int64_t)(t0 + t) * sg.rows;
        if (glu) {
#pragma unroll
            for (int k = 0; k < RG; k++)
                if (R >= 2 && row[k] < sg.rows) {
                    const float g = acc[k][t];
                    const float act = a.mode == CU_MV_GLU_GELU ? gelu_tanh_f(g) : silu_f(g);
                    o[row[k]] = __fmul_rn(act, acc[R >= 2 ? k + RG : 0][t]);
                }
        } else {
#pragma unroll
            for (int k = 0; k < R; k++)
                if (row[k] < sg.rows)
                    o[row[k]] = sg.bias ? __fadd_rn(acc[k][t], sg.bias[row[k]]) : acc[k][t];
        }
    }
}

template <int F, bool AX>
__global__ void __launch_bounds__(MV_THREADS)
matmul_grouped_kernel(const uint8_t *const *__restrict__ experts, const int32_t *__restrict__ ids,
                      int in_div, size_t stride, size_t soff, int64_t rows, int64_t cols,
                      const float *__restrict__ x, float *__restrict__ out)
{
    const int64_t r = (int64_t)blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    const int p = blockIdx.y;
    if (r >= rows)
        return; // the whole warp: no block-wide barrier follows
    const uint8_t *wr[1] = {experts[ids[p]] + r * (int64_t)stride};
    float acc[1][1];
    rows_dot<F, 1, 1, AX>(wr, soff, cols, x + (int64_t)(p / in_div) * cols, 1, acc);
    if ((threadIdx.x & 31) == 0)
        out[(int64_t)p * rows + r] = acc[0][0];
}

template <int F, int R, int T, bool AX>
void mv_launch(const MVArgs &a, dim3 grid, cudaStream_t s)
{
    if constexpr (T == 1 && WFmt<F>::INT) {
        const size_t sm = mv_stage_bytes<F>(a.cols);
        if (sm <= MV_STAGE_MAX) {
            if (sm > 48 * 1024 &&
                cudaFuncSetAttribute(matvec_kernel<F, R, T, AX, true>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)sm) != cudaSuccess)
                return; // launch_matvec reports it (cudaGetLastError)
            matvec_kernel<F, R, T, AX, true><<<grid, MV_THREADS, sm, s>>>(a);
            return;
        }
    }
    matvec_kernel<F, R, T, AX, false><<<grid, MV_THREADS, 0, s>>>(a);
}

// The instance for (R, T, AX): R in {1, 2, 4} with aligned x, {1, 2} else;
// T in {1, MV_TOKENS}.
template <int F, int T, bool AX> void mv_pick_r(const MVArgs &a, dim3 grid, int r, cudaStream_t s)
{
    if (r == 1)
        mv_launch<F, 1, T, AX>(a, grid, s);
    else if (r == 2 || !AX || T > 1)
        mv_launch<F, 2, T, AX>(a, grid, s);
    else
        mv_launch<F, 4, 1, true>(a, grid, s);
}

template <int F> void mv_dispatch(const MVArgs &a, dim3 grid, int r, int t, bool ax, cudaStream_t s)
{
    if (t == 1) {
        if (ax)
            mv_pick_r<F, 1, true>(a, grid, r, s);
        else
            mv_pick_r<F, 1, false>(a, grid, r, s);
    } else {
        if (ax)
            mv_pick_r<F, MV_TOKENS, true>(a, grid, r, s);
        else
            mv_pick_r<F, MV_TOKENS, false>(a, grid, r, s);
    }
}

template <int F>
void mm_grouped(const cu_matrix *w, const void *const *experts, const int32_t *ids, int in_div,
                const float *x, int n_pairs, float *out, bool ax, cudaStream_t s)
{
    dim3 grid((unsigned)((w->rows + MV_WARPS - 1) / MV_WARPS), (unsigned)n_pairs);
    const uint8_t *const *e = reinterpret_cast<const uint8_t *const *>(experts);
    if (ax)
        matmul_grouped_kernel<F, true><<<grid, MV_THREADS, 0, s>>>(
            e, ids, in_div, w->stride, w->scale_off, w->rows, w->cols, x, out);
    else
        matmul_grouped_kernel<F, false><<<grid, MV_THREADS, 0, s>>>(
            e, ids, in_div, w->stride, w->scale_off, w->rows, w->cols, x, out);
}

bool x_aligned(const float *x, int64_t cols)
{
    return cols % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
}

// Rows per warp when the caller leaves it open, as measured on the H200
// (docs/decisions/0006-cuda-decode-defaults.md): float formats one (their
// 16-byte units already keep enough in flight, and more rows per warp
// means fewer warps), quant formats four (the decode work per byte is
// higher, and four rows share each x load and the sum of x), two for small
// matrices so every SM still gets blocks; two for the many-token
// instances, whose accumulators are many. GLU pairs count as two rows.
int mv_rows_per_warp(int fmt, int64_t rows, int t, int sm_count, bool glu, bool ax)
{
    const bool quant = fmt != CW_F32 && fmt != CW_F16 && fmt != CW_BF16;
    const int64_t sms = sm_count > 0 ? sm_count : 32;
    if (t > 1 || !ax)
        return 2;
    if (!quant)
        return glu ? 2 : 1;
    return rows >= (int64_t)MV_WARPS * 4 * sms ? 4 : 2;
}

} // namespace

// ---- launchers ----

extern "C" int cu_mv_job_ok(const cu_mv_job *j)
{
    if (j->n_w < 1 || j->n_w > CU_MV_MAX_W || !j->w[0])
        return 0;
    const bool glu = j->mode != CU_MV_STORE;
    if (glu && (j->n_w != 2 || j->bias[0] || j->bias[1] || j->w[1]->rows != j->w[0]->rows))
        return 0;
    for (int i = 1; i < j->n_w; i++)
        if (!j->w[i] || j->w[i]->fmt != j->w[0]->fmt || j->w[i]->cols != j->w[0]->cols ||
            j->w[i]->stride != j->w[0]->stride)
            return 0;
    return 1;
}

extern "C" cudaError_t launch_matvec(const cu_mv_job *j, cudaStream_t stream)
{
    if (j->n <= 0)
        return cudaSuccess;
    if (!cu_mv_job_ok(j))
        return cudaErrorInvalidValue;
    const bool glu = j->mode != CU_MV_STORE;
    const int t = j->n == 1 ? 1 : MV_TOKENS;
    const bool ax = x_aligned(j->x, j->w[0]->cols);
    int64_t total_rows = 0;
    for (int i = 0; i < j->n_w; i++)
        total_rows += j->w[i]->rows;
    int r = j->rows_per_warp;
    if (r != 1 && r != 2 && r != 4)
        r = mv_rows_per_warp(j->w[0]->fmt, total_rows, t, j->sm_count, glu, ax);
    if (!ax || t > 1)
        r = r > 2 ? 2 : r;
    if (glu && r < 2)
        r = 2;
    const int rows_per_block = MV_WARPS * (glu ? r / 2 : r);
    MVArgs a = {};
    a.mode = j->mode;
    a.cols = j->w[0]->cols;
    a.x = j->x;
    a.n = j->n;
    a.n_seg = glu ? 1 : j->n_w;
    a.w2 = glu ? static_cast<const uint8_t *>(j->w[1]->data) : nullptr;
    int64_t blocks = 0;
    for (int i = 0; i < a.n_seg; i++) {
        const cu_matrix *w = j->w[i];
        a.seg[i] = MVSeg{static_cast<const uint8_t *>(w->data), w->stride, w->scale_off, w->rows,
                         j->bias[i], j->out[i], (unsigned)blocks};
        blocks += (w->rows + rows_per_block - 1) / rows_per_block;
    }
    if ((j->n + t - 1) / t > 65535 || blocks > INT32_MAX)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)blocks, (unsigned)((j->n + t - 1) / t));
    switch (j->w[0]->fmt) {
    case CW_F32: mv_dispatch<CW_F32>(a, grid, r, t, ax, stream); break;
    case CW_F16: mv_dispatch<CW_F16>(a, grid, r, t, ax, stream); break;
    case CW_BF16: mv_dispatch<CW_BF16>(a, grid, r, t, ax, stream); break;
    case CW_Q8_0: mv_dispatch<CW_Q8_0>(a, grid, r, t, ax, stream); break;
    case CW_Q4_0: mv_dispatch<CW_Q4_0>(a, grid, r, t, ax, stream); break;
    case CW_Q4_K: mv_dispatch<CW_Q4_K>(a, grid, r, t, ax, stream); break;
    case CW_Q5_K: mv_dispatch<CW_Q5_K>(a, grid, r, t, ax, stream); break;
    case CW_Q6_K: mv_dispatch<CW_Q6_K>(a, grid, r, t, ax, stream); break;
    case CW_NVFP4: mv_dispatch<CW_NVFP4>(a, grid, r, t, ax, stream); break;
    case CW_MXFP8: mv_dispatch<CW_MXFP8>(a, grid, r, t, ax, stream); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" cudaError_t launch_matmul(const cu_matrix *w, const float *bias, const float *x, int n,
                                     float *out, cudaStream_t stream)
{
    cu_mv_job j = {};
    j.w[0] = w;
    j.bias[0] = bias;
    j.out[0] = out;
    j.n_w = 1;
    j.mode = CU_MV_STORE;
    j.x = x;
    j.n = n;
    if (n <= 0 || w->rows <= 0)
        return cudaSuccess;
    return launch_matvec(&j, stream);
}

extern "C" cudaError_t launch_matmul_grouped(const cu_matrix *w, const void *const *experts,
                                             const int32_t *ids, int in_div, const float *x,
                                             int n_pairs, float *out, cudaStream_t stream)
{
    if (n_pairs <= 0 || w->rows <= 0)
        return cudaSuccess;
    if (n_pairs > 65535 || in_div <= 0 || (w->rows + MV_WARPS - 1) / MV_WARPS > INT32_MAX)
        return cudaErrorInvalidValue;
    const bool ax = x_aligned(x, w->cols);
    switch (w->fmt) {
    case CW_F32: mm_grouped<CW_F32>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_F16: mm_grouped<CW_F16>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_BF16: mm_grouped<CW_BF16>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_Q8_0: mm_grouped<CW_Q8_0>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_Q4_0: mm_grouped<CW_Q4_0>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_Q4_K: mm_grouped<CW_Q4_K>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_Q5_K: mm_grouped<CW_Q5_K>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_Q6_K: mm_grouped<CW_Q6_K>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_NVFP4: mm_grouped<CW_NVFP4>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    case CW_MXFP8: mm_grouped<CW_MXFP8>(w, experts, ids, in_div, x, n_pairs, out, ax, stream); break;
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}
