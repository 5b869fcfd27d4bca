// The mat-vec's launchers (kernels/matmul.cuh) and its batched and grouped
// instances; the single-token instances are in kernels/matmul_single.cu, the
// device code both use in kernels/matmul_kernels.cuh.
#include "kernels/matmul_kernels.cuh"

#include <type_traits>

namespace {

// The batched instances' stage of x (the quant formats', batched_staged);
// the declaration is shared (kernels/matmul_kernels.cuh).
DEV float *mv_stage_smem()
{
    extern __shared__ float mv_stage[];
    return mv_stage;
}

// The batched instances' stage, at most: two blocks an SM of Hopper's
// 228 KB, which holds two rows of 12,288 columns of Q6_K or Q8_0 (the 8B
// FFN's down projection; decision 0039), and never more than the device
// lets a block opt into.
constexpr size_t MV_BATCH_STAGE_MAX = 108 * 1024;

size_t batch_stage_max()
{
    const int optin = memra_mv::smem_optin_max();
    return optin > 0 && (size_t)optin < MV_BATCH_STAGE_MAX ? (size_t)optin : MV_BATCH_STAGE_MAX;
}

// Whether the batched instances of T input rows stage x in shared memory
// for this format and width: the quant formats (whose x the piece dot
// wants scaled and summed, the same values staged or not) of whole units,
// while the T rows' stage fits batch_stage_max().
template <int F> bool batched_staged(int64_t cols, int t)
{
    return !WFmt<F>::DIRECT && cols % WFmt<F>::U == 0 &&
           (size_t)t * mv_stage_bytes<F>(cols) <= batch_stage_max();
}

// The batched instances (T input rows a block, mv_tokens): x from the
// block's stage where batched_staged, else from registers; the
// single-token ones are in kernels/matmul_single.cu.
template <int F, int R, int T, bool AX>
void mv_launch(const MVArgs &a, dim3 grid, int sm_count, cudaStream_t s)
{
    // (the float formats take x as it is: never staged)
    if constexpr (!WFmt<F>::DIRECT) {
        if (batched_staged<F>(a.cols, T)) {
            static std::atomic<uint64_t> memo_sm{0};
            static std::atomic<int> opted{0}; // bytes the kernel may ask for
            const size_t smem = (size_t)T * mv_stage_bytes<F>(a.cols);
            if (smem > 48 * 1024 && opted.load(std::memory_order_relaxed) < (int)smem) {
                const int lim = (int)batch_stage_max();
                if (cudaFuncSetAttribute(matvec_kernel<F, R, T, AX, true>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         lim) != cudaSuccess)
                    return; // the error stays for the caller's cudaGetLastError
                opted.store(lim, std::memory_order_relaxed);
            }
            grid = mv_grid(matvec_kernel<F, R, T, AX, true>, MV_THREADS, smem, grid, sm_count,
                           memo_sm);
            launch_pdl(matvec_kernel<F, R, T, AX, true>, grid, dim3(MV_THREADS), smem, s, a);
            return;
        }
    }
    static std::atomic<uint64_t> memo{0};
    grid = mv_grid(matvec_kernel<F, R, T, AX, false>, MV_THREADS, 0, grid, sm_count, memo);
    launch_pdl(matvec_kernel<F, R, T, AX, false>, grid, dim3(MV_THREADS), 0, s, a);
}

template <int F, int T>
void mv_dispatch_r(const MVArgs &a, dim3 grid, int r, bool ax, int sms, cudaStream_t s)
{
    if (ax) {
        if (r == 1)
            mv_launch<F, 1, T, true>(a, grid, sms, s);
        else if (r == 2)
            mv_launch<F, 2, T, true>(a, grid, sms, s);
        else
            mv_launch<F, 4, T, true>(a, grid, sms, s);
    } else {
        if (r == 1)
            mv_launch<F, 1, T, false>(a, grid, sms, s);
        else
            mv_launch<F, 2, T, false>(a, grid, sms, s);
    }
}

// R is 1, 2 or 4 (4 only with x aligned) for the batched instances; t the
// block's input rows.
template <int F>
void mv_dispatch(const MVArgs &a, dim3 grid, int r, int t, bool ax, int sms, cudaStream_t s)
{
    if (t <= 2)
        mv_dispatch_r<F, 2>(a, grid, r, ax, sms, s);
    else if (t <= 4)
        mv_dispatch_r<F, 4>(a, grid, r, ax, sms, s);
    else
        mv_dispatch_r<F, MV_TOKENS>(a, grid, r, ax, sms, s);
}

// batched_staged for a run-time format.
bool staged_at(int fmt, int64_t cols, int t)
{
    switch (fmt) {
    case CW_Q8_0: return batched_staged<CW_Q8_0>(cols, t);
    case CW_Q4_0: return batched_staged<CW_Q4_0>(cols, t);
    case CW_Q4_K: return batched_staged<CW_Q4_K>(cols, t);
    case CW_Q5_K: return batched_staged<CW_Q5_K>(cols, t);
    case CW_Q6_K: return batched_staged<CW_Q6_K>(cols, t);
    case CW_NVFP4: return batched_staged<CW_NVFP4>(cols, t);
    case CW_MXFP8: return batched_staged<CW_MXFP8>(cols, t);
    default: return false;
    }
}

// f(AX, SM), the grouped kernels' two run-time switches (x 16-byte aligned,
// x staged in shared memory) as compile-time constants: the four instances.
template <class Fn>
void with_ax_sm(bool ax, bool sm, Fn &&f)
{
    if (ax && sm)
        f(std::true_type(), std::true_type());
    else if (ax)
        f(std::true_type(), std::false_type());
    else if (sm)
        f(std::false_type(), std::true_type());
    else
        f(std::false_type(), std::false_type());
}

template <int F>
void mm_grouped(const cu_matrix *w, const void *const *experts, const int32_t *ids, int in_div,
                const float *x, int n_pairs, float *out, bool ax, cudaStream_t s)
{
    dim3 grid((unsigned)((w->rows + MV_WARPS - 1) / MV_WARPS), (unsigned)n_pairs);
    const uint8_t *const *e = reinterpret_cast<const uint8_t *const *>(experts);
    const bool sm = grouped_staged<F>(w->cols);
    const size_t smem = sm ? mv_stage_bytes<F>(w->cols) : 0;
    with_ax_sm(ax, sm, [&](auto AXV, auto SMV) {
        constexpr bool A = decltype(AXV)::value, S = decltype(SMV)::value;
        matmul_grouped_kernel<F, A, S><<<grid, MV_THREADS, smem, s>>>(
            e, ids, in_div, w->stride, w->scale_off, w->rows, w->cols, x, out);
    });
}

// The two fused forms of the few-pair experts (launch_matmul_grouped_glu,
// launch_matmul_grouped_combine), PDL launches with the grouped kernel's
// grid and staging.
template <int F>
void mm_grouped_glu(const cu_matrix *w, const void *const *gate, const void *const *up,
                    const int32_t *ids, int in_div, const float *x, int n_pairs, int act,
                    float *out, bool ax, cudaStream_t s)
{
    dim3 grid((unsigned)((w->rows + MV_WARPS - 1) / MV_WARPS), (unsigned)n_pairs);
    const uint8_t *const *g = reinterpret_cast<const uint8_t *const *>(gate);
    const uint8_t *const *u = reinterpret_cast<const uint8_t *const *>(up);
    const bool sm = grouped_staged<F>(w->cols);
    const size_t smem = sm ? mv_stage_bytes<F>(w->cols) : 0;
    with_ax_sm(ax, sm, [&](auto AXV, auto SMV) {
        constexpr bool A = decltype(AXV)::value, S = decltype(SMV)::value;
        launch_pdl(matmul_grouped_glu_kernel<F, A, S>, grid, dim3(MV_THREADS), smem, s, g, u, ids,
                   in_div, w->stride, w->scale_off, w->rows, w->cols, x, act, out);
    });
}

template <int F>
void mm_grouped_combine(const cu_matrix *w, const void *const *experts, const int32_t *ids,
                        const float *wts, int nu, const float *x, int n_pairs, float *y,
                        unsigned *counters, float *out, bool ax, cudaStream_t s)
{
    dim3 grid((unsigned)((w->rows + MV_WARPS - 1) / MV_WARPS), (unsigned)n_pairs);
    const uint8_t *const *e = reinterpret_cast<const uint8_t *const *>(experts);
    const bool sm = grouped_staged<F>(w->cols);
    const size_t smem = sm ? mv_stage_bytes<F>(w->cols) : 0;
    with_ax_sm(ax, sm, [&](auto AXV, auto SMV) {
        constexpr bool A = decltype(AXV)::value, S = decltype(SMV)::value;
        launch_pdl(matmul_grouped_combine_kernel<F, A, S>, grid, dim3(MV_THREADS), smem, s, e, ids,
                   wts, nu, w->stride, w->scale_off, w->rows, w->cols, x, y, counters, out);
    });
}

template <int F>
void mm_grouped_tokens(const cu_matrix *w, const void *const *experts, const int32_t *chunks,
                       const int32_t *n_chunks, int max_chunks, const float *xs,
                       const int32_t *out_idx, float *out, bool ax, cudaStream_t s)
{
    dim3 grid((unsigned)((w->rows + MV_WARPS - 1) / MV_WARPS), (unsigned)max_chunks);
    const uint8_t *const *e = reinterpret_cast<const uint8_t *const *>(experts);
    const bool sm = grouped_staged<F>(w->cols);
    const size_t smem = sm ? mv_stage_bytes<F>(w->cols) : 0;
    with_ax_sm(ax, sm, [&](auto AXV, auto SMV) {
        constexpr bool A = decltype(AXV)::value, S = decltype(SMV)::value;
        matmul_grouped_tokens_kernel<F, A, S><<<grid, MV_THREADS, smem, s>>>(
            e, chunks, n_chunks, w->stride, w->scale_off, w->rows, w->cols, xs, out_idx, out);
    });
}

bool x_aligned(const float *x, int64_t cols)
{
    return cols % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15u) == 0;
}

// Rows per warp when the caller leaves it open, as measured on the H200
// (docs/decisions/0006-cuda-decode-defaults.md): float formats one (their
// 16-byte units already keep enough in flight, and more rows per warp
// means fewer warps), two for GLU pairs. A few input rows (T > 1, x
// aligned; docs/decisions/0039-few-rows-four-rows-a-warp.md): four, so
// each x a lane loads (or reads from the stage) serves four weight rows,
// for the quant formats but NVFP4, and for the float formats from four
// input rows where four rows a warp still leave four blocks an SM; else
// two. The quant formats' streamed single-token kernel: one for matrices
// of fewer than 16 rows an SM (more
// warps), four for the K-quants' large matrices of narrow rows (the FFN's
// gate and up pair, the output head: x read from shared memory once for
// four rows), else two. Quant rows too wide to stream (the register path,
// measured before the streamed kernel existed): four for wide rows of large matrices, else two. GLU pairs
// count as two rows.
constexpr int64_t MV_WIDE_COLS = 8192;
int mv_rows_per_warp(int fmt, int64_t rows, int64_t cols, int t, int sm_count, bool glu, bool ax,
                     bool streamed)
{
    const bool quant = fmt != CW_F32 && fmt != CW_F16 && fmt != CW_BF16;
    const bool kquant = fmt == CW_Q4_K || fmt == CW_Q5_K || fmt == CW_Q6_K;
    const int64_t sms = sm_count > 0 ? sm_count : 32;
    if (!ax)
        return 2;
    if (t > 1) {
        if (quant)
            return fmt == CW_NVFP4 ? 2 : 4;
        return t >= 4 && rows >= (int64_t)4 * MV_WARPS * 4 * sms ? 4 : 2; // four blocks an SM
    }
    if (!quant)
        return glu ? 2 : 1;
    if (streamed) {
        if (rows < 16 * sms)
            return glu ? 2 : 1;
        return kquant && rows >= 64 * sms && cols < MV_WIDE_COLS ? 4 : 2;
    }
    return rows >= (int64_t)MV_WARPS * 4 * sms && cols >= MV_WIDE_COLS ? 4 : 2;
}

// Input rows a block takes: 1 (the single-token kernels), else the
// fewest of 2, 4 or MV_TOKENS that hold n, so a few rows (a speculation
// round's verify) do not pay for eight rows' registers.
int mv_tokens(int n) { return n <= 1 ? 1 : n <= 2 ? 2 : n <= 4 ? 4 : MV_TOKENS; }

// Up to how many input rows a quantized matrix too wide to stage two rows'
// x (batched_staged) runs them one launch of the single-token kernel each:
// its batched instances read x from registers, which cost more than a
// second read of the weights. Measured on the Qwen3-8B FFN's down
// projection, 12,288 columns, with a 96 KB stage (H100, decision 0039):
// Q4_K at two / four / eight rows 59 / 87 / 166 us batched against 12.5 a
// row alone, Q8_0 63 / 92 / 168 against 21.2, Q6_K 53 / 90 / 134 against
// 26.6 (none). Since the stage holds 108 KB, Q8_0 and Q6_K rows of 12,288
// columns are staged two a block; Q4_K's are not (116,736 bytes).
int mv_alone_rows(int fmt)
{
    switch (fmt) {
    case CW_Q4_K: return MV_TOKENS;
    case CW_Q8_0: return 4;
    default: return 0;
    }
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
    if (j->n > 1 && j->n <= mv_alone_rows(j->w[0]->fmt) &&
        !staged_at(j->w[0]->fmt, j->w[0]->cols, 2)) {
        // one row at a time: the single-token kernel's bytes, as every row's
        for (int i = 0; i < j->n; i++) {
            cu_mv_job one = *j;
            one.n = 1;
            one.x = j->x + (int64_t)i * j->w[0]->cols;
            for (int s = 0; s < (glu ? 1 : j->n_w); s++)
                one.out[s] = j->out[s] + (int64_t)i * j->w[s]->rows;
            const cudaError_t e = launch_matvec(&one, stream);
            if (e != cudaSuccess)
                return e;
        }
        return cudaSuccess;
    }
    int t = mv_tokens(j->n);
    // A quantized matrix whose t rows' stage does not fit takes them in
    // blocks of the most rows whose stage does (four, else two), staged:
    // more weight reads, a fraction of the x work (measured: decisions 0032
    // and 0039).
    if (t > 2 && !staged_at(j->w[0]->fmt, j->w[0]->cols, t)) {
        int fit = t / 2;
        while (fit > 2 && !staged_at(j->w[0]->fmt, j->w[0]->cols, fit))
            fit /= 2;
        if (staged_at(j->w[0]->fmt, j->w[0]->cols, fit))
            t = fit;
    }
    const bool ax = x_aligned(j->x, j->w[0]->cols);
    int64_t total_rows = 0;
    for (int i = 0; i < j->n_w; i++)
        total_rows += j->w[i]->rows;
    const int fmt = j->w[0]->fmt;
    if (fmt < 0 || fmt >= CW_COUNT)
        return cudaErrorInvalidValue;
    const int64_t cols = j->w[0]->cols;
    int r = j->rows_per_warp;
    if (r != 1 && r != 2 && r != 4)
        r = mv_rows_per_warp(fmt, total_rows, cols, t, j->sm_count, glu, ax,
                             t == 1 && memra_mv::single_streamed(fmt, cols, 2));
    if (!ax)
        r = r > 2 ? 2 : r;
    if (glu && r < 2)
        r = 2;
    // Groups of rows: one warp's when the weights stream through shared
    // memory, else a block's (MV_WARPS warps).
    const bool streamed = t == 1 && memra_mv::single_streamed(fmt, cols, r);
    const int rows_per_group = (streamed ? 1 : MV_WARPS) * (glu ? r / 2 : r);
    MVArgs a = {};
    a.mode = j->mode;
    a.cols = j->w[0]->cols;
    a.x = j->x;
    a.n = j->n;
    a.n_seg = glu ? 1 : j->n_w;
    a.w2 = glu ? static_cast<const uint8_t *>(j->w[1]->data) : nullptr;
    int64_t groups = 0;
    for (int i = 0; i < a.n_seg; i++) {
        const cu_matrix *w = j->w[i];
        a.seg[i] = MVSeg{static_cast<const uint8_t *>(w->data), w->stride, w->scale_off, w->rows,
                         j->bias[i], j->out[i], (unsigned)groups};
        groups += (w->rows + rows_per_group - 1) / rows_per_group;
    }
    if ((j->n + t - 1) / t > 65535 || groups > INT32_MAX)
        return cudaErrorInvalidValue;
    a.n_groups = (unsigned)groups;
    dim3 grid((unsigned)groups, (unsigned)((j->n + t - 1) / t));
    const int sms = j->sm_count;
    if (t == 1) {
        memra_mv::launch_single(fmt, a, grid, r, ax, streamed, sms, stream);
        return cudaGetLastError();
    }
    switch (fmt) {
    case CW_F32: mv_dispatch<CW_F32>(a, grid, r, t, ax, sms, stream); break;
    case CW_F16: mv_dispatch<CW_F16>(a, grid, r, t, ax, sms, stream); break;
    case CW_BF16: mv_dispatch<CW_BF16>(a, grid, r, t, ax, sms, stream); break;
    case CW_Q8_0: mv_dispatch<CW_Q8_0>(a, grid, r, t, ax, sms, stream); break;
    case CW_Q4_0: mv_dispatch<CW_Q4_0>(a, grid, r, t, ax, sms, stream); break;
    case CW_Q4_K: mv_dispatch<CW_Q4_K>(a, grid, r, t, ax, sms, stream); break;
    case CW_Q5_K: mv_dispatch<CW_Q5_K>(a, grid, r, t, ax, sms, stream); break;
    case CW_Q6_K: mv_dispatch<CW_Q6_K>(a, grid, r, t, ax, sms, stream); break;
    case CW_NVFP4: mv_dispatch<CW_NVFP4>(a, grid, r, t, ax, sms, stream); break;
    case CW_MXFP8: mv_dispatch<CW_MXFP8>(a, grid, r, t, ax, sms, stream); break;
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

#define MM_FORMATS(X)                                                                              \
    X(CW_F32) X(CW_F16) X(CW_BF16) X(CW_Q8_0) X(CW_Q4_0) X(CW_Q4_K) X(CW_Q5_K) X(CW_Q6_K)           \
    X(CW_NVFP4) X(CW_MXFP8)

extern "C" cudaError_t launch_matmul_grouped_glu(const cu_matrix *w, const void *const *gate,
                                                 const void *const *up, const int32_t *ids,
                                                 int in_div, const float *x, int n_pairs, int act,
                                                 float *out, cudaStream_t stream)
{
    if (n_pairs <= 0 || w->rows <= 0)
        return cudaSuccess;
    if (n_pairs > 65535 || in_div <= 0 || (w->rows + MV_WARPS - 1) / MV_WARPS > INT32_MAX)
        return cudaErrorInvalidValue;
    const bool ax = x_aligned(x, w->cols);
    switch (w->fmt) {
#define MM_GG_CASE(FMT)                                                                            \
    case FMT: mm_grouped_glu<FMT>(w, gate, up, ids, in_div, x, n_pairs, act, out, ax, stream); break;
        MM_FORMATS(MM_GG_CASE)
#undef MM_GG_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

extern "C" size_t matmul_grouped_combine_counters(int64_t rows, int n_tokens)
{
    return rows <= 0 || n_tokens <= 0
               ? 0
               : (size_t)((rows + MV_WARPS - 1) / MV_WARPS) * (size_t)n_tokens;
}

extern "C" cudaError_t launch_matmul_grouped_combine(const cu_matrix *w, const void *const *experts,
                                                     const int32_t *ids, const float *wts,
                                                     int n_used, const float *x, int n_pairs,
                                                     float *y, unsigned *counters, float *out,
                                                     cudaStream_t stream)
{
    if (n_pairs <= 0 || w->rows <= 0)
        return cudaSuccess;
    if (n_pairs > 65535 || n_used <= 0 || n_pairs % n_used != 0 || !counters ||
        (w->rows + MV_WARPS - 1) / MV_WARPS > INT32_MAX)
        return cudaErrorInvalidValue;
    const bool ax = x_aligned(x, w->cols);
    switch (w->fmt) {
#define MM_GC_CASE(FMT)                                                                            \
    case FMT:                                                                                      \
        mm_grouped_combine<FMT>(w, experts, ids, wts, n_used, x, n_pairs, y, counters, out, ax,    \
                                stream);                                                           \
        break;
        MM_FORMATS(MM_GC_CASE)
#undef MM_GC_CASE
    default: return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

#undef MM_FORMATS

extern "C" cudaError_t launch_matmul_grouped_tokens(const cu_matrix *w, const void *const *experts,
                                                    const int32_t *chunks, const int32_t *n_chunks,
                                                    int max_chunks, const float *xs,
                                                    const int32_t *out_idx, float *out,
                                                    cudaStream_t stream)
{
    if (max_chunks <= 0 || w->rows <= 0)
        return cudaSuccess;
    if (max_chunks > 65535 || (w->rows + MV_WARPS - 1) / MV_WARPS > INT32_MAX)
        return cudaErrorInvalidValue;
    const bool ax = x_aligned(xs, w->cols);
#define MM_GT(FMT)                                                                                 \
    mm_grouped_tokens<FMT>(w, experts, chunks, n_chunks, max_chunks, xs, out_idx, out, ax, stream)
    switch (w->fmt) {
    case CW_F32: MM_GT(CW_F32); break;
    case CW_F16: MM_GT(CW_F16); break;
    case CW_BF16: MM_GT(CW_BF16); break;
    case CW_Q8_0: MM_GT(CW_Q8_0); break;
    case CW_Q4_0: MM_GT(CW_Q4_0); break;
    case CW_Q4_K: MM_GT(CW_Q4_K); break;
    case CW_Q5_K: MM_GT(CW_Q5_K); break;
    case CW_Q6_K: MM_GT(CW_Q6_K); break;
    case CW_NVFP4: MM_GT(CW_NVFP4); break;
    case CW_MXFP8: MM_GT(CW_MXFP8); break;
    default: return cudaErrorInvalidValue;
    }
#undef MM_GT
    return cudaGetLastError();
}
