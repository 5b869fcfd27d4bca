// The mat-vec's single-token instances (one input row: decode), apart from
// the batched and grouped ones in kernels/matmul.cu so that the two
// translation units compile in parallel. Device code both use:
// kernels/matmul_kernels.cuh.
//
// The quant formats' single-token kernel (mvs_kernel) streams each warp's
// weight rows through shared memory: the warp copies its rows 32 units at
// a time with asynchronous 16-byte copies (cp.async), coalesced, each byte
// once (the register path loaded a Q4_K header once per 64-element unit,
// a Q6_K high-bit byte once per quarter), into a ring of stages; a lane
// then reads its unit from shared memory into the very Raw the register
// path loads (WFmt<F>::fetch) and sums it with the same unit_acc. So every
// value keeps its order: lane l takes units l, l + 32, ..., the fixed
// butterfly follows, and out[t][r] is bit-identical to the batched
// instances' and to any rows per warp (kernels/matmul.cuh). Measured on
// the H200 (docs/decisions/0006-cuda-decode-defaults.md, 2026-11-30) the
// quant mat-vec is bound by its instruction issue (about 4.7 warp
// instructions a 32 elements for Q4_K, two thirds of the issue slots
// busy), not by the bytes in flight: two stages (one copied while the
// other is summed) are as fast as more, and what the streamed kernel buys
// is registers (no raw units held in flight: up to 24 warps an SM where
// the register path ran 16) and work spread evenly over the SMs (a task is
// one warp's rows, numbered warp-major over the grid).
#include "kernels/cp_async.cuh"
#include "kernels/matmul_kernels.cuh"

namespace {

DEV float *mv_stage_smem()
{
    extern __shared__ float mv_stage[];
    return mv_stage;
}

// A shared-memory address as the copies take it: on the device the 32-bit
// shared-space address (converted once, then offset by plain adds that the
// copy folds into its address), in the emulation the pointer.
#if defined(__CUDA_ARCH__)
using mvs_saddr = unsigned;
DEV mvs_saddr mvs_shared(void *p) { return (unsigned)__cvta_generic_to_shared(p); }
#else
using mvs_saddr = uint8_t *;
DEV mvs_saddr mvs_shared(void *p) { return static_cast<uint8_t *>(p); }
#endif

// 16 bytes from global src to shared dst when p: one predicated copy, no
// branch around it.
DEV void cp_async16_if(mvs_saddr dst, const void *src, bool p)
{
#if defined(__CUDA_ARCH__)
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.b32 q, %2, 0;\n\t"
                 "@q cp.async.cg.shared.global [%0], [%1], 16;\n\t}\n" ::"r"(dst),
                 "l"(src), "r"((int)p)
                 : "memory");
#else
    if (p) {
        const unsigned char *s = static_cast<const unsigned char *>(src);
        for (int i = 0; i < 16; i++)
            dst[i] = s[i];
    }
#endif
}

DEV uint4 lds16(const uint8_t *p) { return *reinterpret_cast<const uint4 *>(p); }
DEV uint32_t lds_u16(const uint8_t *p) { return *reinterpret_cast<const uint16_t *>(p); }
DEV uint32_t lds_u32(const uint8_t *p) { return *reinterpret_cast<const uint32_t *>(p); }

// ---- a chunk: 32 consecutive units of a row, one a lane ----
//
// In shared memory a row's chunk is its body bytes (CB: the 32 units'
// blocks, contiguous in the device row) and then its scale bytes (SCB: the
// split formats' scales of those blocks, contiguous in the row's scale
// area; weight_layout.h). load(c, l, u) gives unit u (= 32 * chunk + l)
// as WFmt<F>::fetch gives it from the global row.
template <int F> struct MVChunk;

template <> struct MVChunk<CW_Q8_0> {
    static constexpr int CB = 32 * 32, SCB = 32 * 2;
    DEV static WFmt<CW_Q8_0>::Raw load(const uint8_t *c, int l, int64_t)
    {
        return {lds16(c + l * 32), lds16(c + l * 32 + 16), lds_u16(c + CB + l * 2)};
    }
};

template <> struct MVChunk<CW_Q4_0> {
    static constexpr int CB = 32 * 16, SCB = 32 * 2;
    DEV static WFmt<CW_Q4_0>::Raw load(const uint8_t *c, int l, int64_t)
    {
        return {lds16(c + l * 16), lds_u16(c + CB + l * 2)};
    }
};

template <> struct MVChunk<CW_Q4_K> {
    static constexpr int CB = 8 * 144, SCB = 0;
    DEV static WFmt<CW_Q4_K>::Raw load(const uint8_t *c, int l, int64_t)
    {
        const uint8_t *blk = c + (l >> 2) * 144;
        const int g = l & 3;
        return {lds16(blk), lds16(blk + 16 + g * 32), lds16(blk + 32 + g * 32)};
    }
};

template <> struct MVChunk<CW_Q5_K> {
    static constexpr int CB = 8 * 176, SCB = 0;
    DEV static WFmt<CW_Q5_K>::Raw load(const uint8_t *c, int l, int64_t)
    {
        const uint8_t *blk = c + (l >> 2) * 176;
        const int g = l & 3;
        return {lds16(blk), lds16(blk + 48 + g * 32), lds16(blk + 64 + g * 32), lds16(blk + 16),
                lds16(blk + 32)};
    }
};

template <> struct MVChunk<CW_Q6_K> {
    static constexpr int CB = 4 * 208, SCB = 4 * 2;
    DEV static WFmt<CW_Q6_K>::Raw load(const uint8_t *c, int l, int64_t)
    {
        const int k = l & 7, n = k >> 2, q = k & 3;
        const uint8_t *blk = c + (l >> 3) * 208;
        const uint8_t *ql = blk + n * 64 + (q & 1) * 32, *qh = blk + 128 + n * 32;
        return {lds16(ql), lds16(ql + 16), lds16(qh), lds16(qh + 16),
                lds_u16(blk + 192 + n * 8 + 2 * q), lds_u16(c + CB + (l >> 3) * 2)};
    }
};

template <> struct MVChunk<CW_NVFP4> {
    static constexpr int CB = 32 * 32, SCB = 32 * 4;
    DEV static WFmt<CW_NVFP4>::Raw load(const uint8_t *c, int l, int64_t)
    {
        return {lds16(c + l * 32), lds16(c + l * 32 + 16), lds_u32(c + CB + l * 4)};
    }
};

template <> struct MVChunk<CW_MXFP8> {
    static constexpr int CB = 32 * 32, SCB = 32;
    DEV static WFmt<CW_MXFP8>::Raw load(const uint8_t *c, int l, int64_t)
    {
        return {lds16(c + l * 32), lds16(c + l * 32 + 16), (uint32_t)c[CB + l]};
    }
};

// A row's chunk in shared memory, padded to 16 bytes; a stage holds R of
// them; a warp's ring holds MVS_RING stages, MVS_RING - 1 being copied
// while one is summed (3 and 4 measured no faster than 2).
constexpr int MVS_RING = 2;
template <int F, int R> struct MVRing {
    static constexpr int RB = (MVChunk<F>::CB + MVChunk<F>::SCB + 15) / 16 * 16;
    static constexpr int SB = R * RB;
    static constexpr size_t warp_bytes = (size_t)MVS_RING * SB;
};
// Warps a block at most: as many as registers allow at R rows a warp
// (as launched on the H200: 40 to 98 registers at R <= 2, 89 to 128 at
// R = 4).
template <int R> struct MVSBounds {
    static constexpr int warps = R >= 4 ? 16 : 24;
};

// The warp copies chunk c of its R rows into stage st: 16 bytes a lane at
// a time, the body then the scales, as much of the chunk as the row has
// (nu units in all). A whole chunk (every one but a row's last, when
// partial) takes the copies the format fixes, each at a constant offset
// from one source and one destination address a row (the lane's start),
// so a copy is one instruction and no address arithmetic of its own.
template <int F, int R>
DEV void mvs_copy(uint8_t *st, const MVRows<R> &m, size_t soff, int64_t c, int64_t nu, int lane)
{
    using C = MVChunk<F>;
    constexpr int RB = MVRing<F, R>::RB;
    constexpr int NJ = (C::CB + 511) / 512;
    const int64_t left = nu - c * 32;
    const size_t cofs = (size_t)c * C::CB + (size_t)lane * 16;
    const mvs_saddr dst = mvs_shared(st + lane * 16);
    // Body bytes of this chunk: the whole chunk's, or the last units' of a row.
    const int body = left >= 32 ? C::CB : (int)left * (C::CB / 32);
#pragma unroll
    for (int k = 0; k < R; k++) {
        const uint8_t *src = m.wr[k] + cofs;
#pragma unroll
        for (int j = 0; j < NJ; j++)
            cp_async16_if(dst + (k * RB + j * 512), src + j * 512, j * 512 + lane * 16 < body);
    }
    const int units = (int)min((int64_t)32, left);
#pragma unroll
    for (int k = 0; k < R; k++) {
        if constexpr (C::SCB == 8) {
            if (lane == 0)
                cp_async8(st + k * RB + C::CB, m.wr[k] + soff + c * 8, units / 4);
        } else if constexpr (C::SCB > 0) {
            const int sbytes = units * (C::SCB / 32);
            const int off = lane * 16;
            if (off < sbytes)
                cp_async16(st + k * RB + C::CB + off, m.wr[k] + soff + c * C::SCB + off,
                           min(16, sbytes - off));
        }
    }
}

// One token, x staged, weights streamed through shared memory. A warp
// takes tasks (R rows, GLU R / 2 pairs) w, w + W * gridDim.x, ... (w its
// index in the grid, W = blockDim.x / 32 warps a block); each task is
// nc = ceil(units / 32) chunks, the warp's chunks one sequence over its
// tasks, copied S - 1 ahead of the one it sums.
template <int F, int R, bool AX>
__global__ void __launch_bounds__(MVSBounds<R>::warps * 32) mvs_kernel(const MVArgs a, size_t xbytes)
{
    using Ring = MVRing<F, R>;
    constexpr int S = MVS_RING;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const unsigned nw = blockDim.x >> 5, step = gridDim.x * nw;
    const int64_t nu = a.cols / WFmt<F>::U;
    const int64_t nc = (nu + 31) / 32;
    float *xs = mv_stage_smem();
    uint8_t *ring = reinterpret_cast<uint8_t *>(xs) + xbytes + (size_t)warp * Ring::warp_bytes;

    // The copy cursor: task ft, chunk fc of its rows fm. Warps are numbered
    // warp-major over the grid, so that when the tasks run out part way
    // through a round, the warps left idle are spread over every SM.
    const unsigned first = warp * gridDim.x + blockIdx.x;
    unsigned ft = first;
    int64_t fc = 0;
    MVRows<R> fm = {};
    if (ft < a.n_groups)
        fm = mv_rows<R, 1>(a, ft, 0);
    const auto issue = [&](int slot) {
        if (ft < a.n_groups) {
            mvs_copy<F, R>(ring + slot * Ring::SB, fm, a.seg[fm.s].soff, fc, nu, lane);
            if (++fc == nc) {
                fc = 0;
                ft += step;
                if (ft < a.n_groups)
                    fm = mv_rows<R, 1>(a, ft, 0);
            }
        }
        cp_async_commit(); // a group every time, empty or not: wait counts groups
    };
#pragma unroll
    for (int s = 0; s < S - 1; s++)
        issue(s);
    // Only weights were copied so far; x and the outputs depend on the
    // kernel before (kernels/launch.cuh).
    pdl_trigger();
    pdl_wait();
    stage_x<F, AX>(a.x, a.cols, xs);

    // The summing cursor: task dt, chunk dc of rows dm.
    unsigned dt = first;
    int64_t dc = 0;
    MVRows<R> dm = {};
    if (dt < a.n_groups)
        dm = mv_rows<R, 1>(a, dt, 0);
    float acc[R][1];
#pragma unroll
    for (int k = 0; k < R; k++)
        acc[k][0] = 0.0f;
    for (int slot = 0; dt < a.n_groups; slot = slot + 1 == S ? 0 : slot + 1) {
        cp_async_wait<S - 2>(); // this lane's copies of the chunk are in
        __syncwarp();           // and every lane's; the previous slot is read
        issue(slot == 0 ? S - 1 : slot - 1);
        const uint8_t *st = ring + slot * Ring::SB;
        const int64_t u = dc * 32 + lane;
        if (u < nu) {
            typename WFmt<F>::Raw r[R];
#pragma unroll
            for (int k = 0; k < R; k++)
                r[k] = MVChunk<F>::load(st + k * Ring::RB, lane, u);
            unit_acc<F, R, 1, AX, true, true>(r, u, nullptr, a.cols, 1, WFmt<F>::U, acc, xs);
        }
        if (++dc == nc) {
#pragma unroll
            for (int k = 0; k < R; k++)
                acc[k][0] = warp_sum(acc[k][0]);
            mv_store<R, 1>(a, dm, acc, 0, 1);
#pragma unroll
            for (int k = 0; k < R; k++)
                acc[k][0] = 0.0f;
            dc = 0;
            dt += step;
            if (dt < a.n_groups)
                dm = mv_rows<R, 1>(a, dt, 0);
        }
    }
    cp_async_wait<0>(); // nothing may land in shared memory after the block ends
}

size_t mvs_align16(size_t n) { return (n + 15) & ~(size_t)15; }

// The streamed launch: W warps a block, as many as registers and shared
// memory (next to the staged x) allow, but no more than spread the tasks
// over every SM; blocks as many as the device holds at once (one block a
// group of W tasks when the SM count is unknown). Returns
// false when one warp's stages do not fit (mvs_fits said they would).
template <int F, int R, bool AX>
bool mvs_launch(const MVArgs &a, int sm_count, cudaStream_t s)
{
    using Ring = MVRing<F, R>;
    const size_t xb = mvs_align16(mv_stage_bytes<F>(a.cols));
    const int smax = memra_mv::smem_optin_max();
    if (smax <= 0 || xb + Ring::warp_bytes > (size_t)smax)
        return false;
    int w = (int)((smax - xb) / Ring::warp_bytes);
    w = w > MVSBounds<R>::warps ? MVSBounds<R>::warps : w;
    const int64_t sms = sm_count > 0 ? sm_count : 1;
    const int64_t per_sm = ((int64_t)a.n_groups + sms - 1) / sms;
    w = per_sm < w ? (int)per_sm : w;
    w = w < 1 ? 1 : w;
    const size_t smem = xb + (size_t)w * Ring::warp_bytes;
    auto *k = mvs_kernel<F, R, AX>;
    // The limit goes to the device's most, never down to this launch's
    // size: one instance serves matrices of several widths, and a captured
    // graph's launch of a larger one must still fit when it replays.
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, smax) != cudaSuccess)
        return true; // launch_matvec reports it (cudaGetLastError)
    static std::atomic<uint64_t> memo{0};
    const dim3 want((unsigned)((a.n_groups + (unsigned)w - 1) / (unsigned)w));
    const dim3 grid = mv_grid(k, w * 32, smem, want, sm_count, memo);
    launch_pdl(mvs_kernel<F, R, AX>, grid, dim3(w * 32), smem, s, a, xb);
    return true;
}

// The register path: float formats, and quant rows too wide to stage.
// When the groups outnumber the blocks the device holds at once, every
// block takes the same number of groups (k or, for the last few, k - 1,
// k = ceil(groups / resident)): as many blocks as that needs, rather than
// every resident block with a last, partly empty round (1,536 groups on
// 924 blocks was two rounds, the second two-thirds full; now 768 blocks of
// two groups). The float formats' one-row instance has a second build
// held to MV_FIT_BLOCKS blocks an SM (MVDepth), launched when that puts
// every group in one round: the 4,096-row matrices. Both choices follow
// from the shape and the SM count only.
constexpr int MV_FIT_BLOCKS = 8;
template <class K>
void mv_launch_k(K k, std::atomic<uint64_t> &memo, const MVArgs &a, dim3 grid, int sm_count,
                 cudaStream_t s)
{
    const unsigned groups = grid.x;
    grid = mv_grid(k, MV_THREADS, 0, grid, sm_count, memo);
    if (grid.x < groups) {
        const unsigned per = (groups + grid.x - 1) / grid.x;
        grid.x = (groups + per - 1) / per;
    }
    launch_pdl(k, grid, dim3(MV_THREADS), 0, s, a);
}

template <int F, int R, bool AX, int MB>
void mv_launch_mb(const MVArgs &a, dim3 grid, int sm_count, cudaStream_t s)
{
    static std::atomic<uint64_t> memo{0};
    if constexpr (MB > 1)
        mv_launch_k(matvec_kernel_mb<F, R, 1, AX, false, MB>, memo, a, grid, sm_count, s);
    else
        mv_launch_k(matvec_kernel<F, R, 1, AX, false>, memo, a, grid, sm_count, s);
}

template <int F, int R, bool AX>
void mv_launch(const MVArgs &a, dim3 grid, int sm_count, cudaStream_t s)
{
    if constexpr (WFmt<F>::DIRECT && R == 1) {
        if (sm_count > 0 && grid.x <= (unsigned)(MV_FIT_BLOCKS * sm_count)) {
            static std::atomic<uint64_t> memo{0};
            const int per =
                mv_blocks_per_sm(matvec_kernel<F, R, 1, AX, false>, MV_THREADS, 0, memo);
            if (per > 0 && grid.x > (unsigned)(per * sm_count)) {
                mv_launch_mb<F, R, AX, MV_FIT_BLOCKS>(a, grid, sm_count, s);
                return;
            }
        }
    }
    mv_launch_mb<F, R, AX, 1>(a, grid, sm_count, s);
}

template <int F, int R, bool AX>
void mv_launch_any(const MVArgs &a, dim3 grid, bool streamed, int sms, cudaStream_t s)
{
    if constexpr (!WFmt<F>::DIRECT)
        if (streamed) {
            mvs_launch<F, R, AX>(a, sms, s);
            return;
        }
    mv_launch<F, R, AX>(a, grid, sms, s);
}

// The instance for R: 1, 2 or 4 with aligned x, 1 or 2 else.
template <int F>
void mv_pick(const MVArgs &a, dim3 grid, int r, bool ax, bool streamed, int sms,
             cudaStream_t s)
{
    if (!ax) {
        if (r == 1)
            mv_launch_any<F, 1, false>(a, grid, streamed, sms, s);
        else
            mv_launch_any<F, 2, false>(a, grid, streamed, sms, s);
    } else if (r == 1) {
        mv_launch_any<F, 1, true>(a, grid, streamed, sms, s);
    } else if (r == 2) {
        mv_launch_any<F, 2, true>(a, grid, streamed, sms, s);
    } else {
        mv_launch_any<F, 4, true>(a, grid, streamed, sms, s);
    }
}

template <int F> bool mvs_fits(int64_t cols, int r)
{
    if constexpr (WFmt<F>::DIRECT) {
        (void)cols;
        (void)r;
        return false;
    } else {
        const size_t xb = mvs_align16(mv_stage_bytes<F>(cols));
        const size_t wb = r == 1   ? MVRing<F, 1>::warp_bytes
                          : r == 2 ? MVRing<F, 2>::warp_bytes
                                   : MVRing<F, 4>::warp_bytes;
        const int smax = memra_mv::smem_optin_max();
        return xb <= MV_STAGE_MAX && smax > 0 && xb + wb <= (size_t)smax;
    }
}

} // namespace

int memra_mv::smem_optin_max()
{
#if defined(MEMRA_TESTS_EMU_CUDA_H)
    return 227 * 1024;
#else
    static std::atomic<int> memo[16];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess)
        return 0;
    const int m = dev >= 0 && dev < 16 ? memo[dev].load(std::memory_order_relaxed) : 0;
    if (m > 0)
        return m;
    int v = 0;
    if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return 0;
    if (dev >= 0 && dev < 16)
        memo[dev].store(v, std::memory_order_relaxed);
    return v;
#endif
}

bool memra_mv::single_streamed(int fmt, int64_t cols, int r)
{
    switch (fmt) {
    case CW_Q8_0: return mvs_fits<CW_Q8_0>(cols, r);
    case CW_Q4_0: return mvs_fits<CW_Q4_0>(cols, r);
    case CW_Q4_K: return mvs_fits<CW_Q4_K>(cols, r);
    case CW_Q5_K: return mvs_fits<CW_Q5_K>(cols, r);
    case CW_Q6_K: return mvs_fits<CW_Q6_K>(cols, r);
    case CW_NVFP4: return mvs_fits<CW_NVFP4>(cols, r);
    case CW_MXFP8: return mvs_fits<CW_MXFP8>(cols, r);
    default: return false;
    }
}

void memra_mv::launch_single(int fmt, const MVArgs &a, dim3 grid, int r, bool ax, bool streamed,
                             int sm_count, cudaStream_t s)
{
    const bool st = streamed;
    switch (fmt) {
    case CW_F32: mv_pick<CW_F32>(a, grid, r, ax, st, sm_count, s); break;
    case CW_F16: mv_pick<CW_F16>(a, grid, r, ax, st, sm_count, s); break;
    case CW_BF16: mv_pick<CW_BF16>(a, grid, r, ax, st, sm_count, s); break;
    case CW_Q8_0: mv_pick<CW_Q8_0>(a, grid, r, ax, st, sm_count, s); break;
    case CW_Q4_0: mv_pick<CW_Q4_0>(a, grid, r, ax, st, sm_count, s); break;
    case CW_Q4_K: mv_pick<CW_Q4_K>(a, grid, r, ax, st, sm_count, s); break;
    case CW_Q5_K: mv_pick<CW_Q5_K>(a, grid, r, ax, st, sm_count, s); break;
    case CW_Q6_K: mv_pick<CW_Q6_K>(a, grid, r, ax, st, sm_count, s); break;
    case CW_NVFP4: mv_pick<CW_NVFP4>(a, grid, r, ax, st, sm_count, s); break;
    case CW_MXFP8: mv_pick<CW_MXFP8>(a, grid, r, ax, st, sm_count, s); break;
    default: break; // launch_matvec checked the format
    }
}
