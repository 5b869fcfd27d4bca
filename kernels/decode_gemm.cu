#include <cuda_bf16.h>

#include "kernels/decode_gemm.cuh"
#include "kernels/cp_async.cuh"
#include "kernels/launch.cuh"
#include "kernels/mma.cuh"
#include "kernels/dev_common.cuh"
#include "kernels/weight_decode.cuh"
#include "kernels/tma.cuh"
#include "kernels/weight_layout.h"
#include "kernels/wgmma.cuh"

// ---- kernels ----
//
// A block takes one tile of DG_TILE output slots (weight rows; in GLU mode
// 64 gate rows then the same 64 up rows), one split of the columns and up
// to DG_TOK tokens. Its warps copy RW groups of 16 slots each (8 / RW
// warps). Per step of DG_KC columns:
//   - each warp's lanes put the step DG_STAGES - 1 ahead of its math in
//     flight with cp.async, 16 bytes a piece, into the warp's rows of a
//     ring of DG_STAGES weight tiles in shared memory (the weights never
//     pass through registers, so a block holds ~50 KB of loads in flight
//     and two blocks fit an SM);
//   - x's next step reaches shared memory from registers loaded a step
//     ahead, rounded to bf16 there or already rounded by a pre-pass
//     (dg_round_x_kernel, where that saves enough L2 reads); by each warp
//     for its own copy up to DG_WARPX_MAX tokens, else by the block into
//     a ring of x steps (one block barrier per step);
//   - four m16n8k16 mma.sync per 8 tokens and 16 rows (kernels/mma.cuh),
//     fragments loaded by ldmatrix from padded rows (conflict-free): up to
//     16 tokens each warp computes its own rows for all the tokens; above,
//     a pair of warps computes its 32 rows, each for half the tokens (TS).
// The output tile goes through shared memory to the partial-sum scratch
// or, with one split, straight to the output with bias or activation.

namespace {

constexpr int DG_TILE = 128;            // output slots per block
constexpr int DG_GROUPS = DG_TILE / 16; // 16-slot groups per block
constexpr int DG_KC = CU_DG_COLS_STEP;  // columns per step
constexpr int DG_LDS = DG_KC + 8;       // bf16 row stride in shared memory (bank spread)
constexpr int DG_TOK = 64;              // tokens per block
constexpr int DG_STAGES = 4;            // weight steps in the ring (DG_STAGES - 1 in flight)
constexpr int DG_LDO = DG_TILE + 4;     // f32 row stride of the output tile
constexpr size_t DG_STAGE_BYTES = (size_t)DG_TILE * DG_LDS * 2;
constexpr size_t DG_W_BYTES = DG_STAGES * DG_STAGE_BYTES;
constexpr size_t DG_X_BYTES = (size_t)3 * DG_TOK * DG_LDS * 2; // three steps of x
constexpr size_t DG_O_BYTES = (size_t)DG_TOK * DG_LDO * 4;
constexpr size_t DG_SMEM = DG_W_BYTES + DG_X_BYTES > DG_O_BYTES ? DG_W_BYTES + DG_X_BYTES
                                                                 : DG_O_BYTES;
// Blocks an SM holds at once, what every instance is built for (shared
// memory: 2 x 99 KB of 228; registers: 128 a thread at 256 threads) and
// what the split count assumes.
constexpr int DG_MINB = 2;
// The split count's cost model: a block's fixed cost (the ring's fill, the
// output tile) in steps of weights.
constexpr int DG_BLOCK_COST = 2;
// x is rounded to bf16 once per launch by dg_round_x_kernel (cu_dg_x_bytes)
// instead of by every block when that saves the blocks at least this many
// bytes of x read from L2 (tiles x tokens x columns x 2). The pre-pass
// costs about 2 us: on the H200 (2026-11-30) it won at gate+up's 50 MB (32
// tokens) and 100 MB (64), down's 50 MB (64); it lost at down's 24 MiB
// (32 tokens) and o's 16 MiB (64), and q+k+v's 24 MiB (64) was even.
constexpr double DG_XBF_SAVED_MIN = 32.0 * 1024 * 1024;
// The formats other than BF16 read x's bf16 copy from this many tokens on
// and round x in the blocks below it (one instance per size).
constexpr int DG_QXB_MIN = 17;
// The fewest tokens a launch of weights of format fmt runs on the Hopper
// kernel (and so reads x's bf16 copy) in an sm_90a build: DG_QXB_MIN, and
// fewer where the H200 measured it faster than the mma.sync kernel
// (docs/decisions/0033, "Eight and sixteen tokens"): Q8_0, Q6_K, Q5_K and
// MXFP8 from 8 (their decode on the lanes bounded the mma.sync kernel),
// Q4_K and Q4_0 from 9 (at 8 the mma.sync kernel was as fast or faster);
// NVFP4 ran slower on it at 8 and 16.
constexpr int dg_wg_from(int fmt)
{
    return !MEMRA_HAS_WGMMA ? DG_QXB_MIN
           : fmt == CW_Q8_0 || fmt == CW_Q6_K || fmt == CW_Q5_K || fmt == CW_MXFP8 ? 8
           : fmt == CW_Q4_K || fmt == CW_Q4_0 ? 9
                                              : DG_QXB_MIN;
}
// Splits whose partial sums the reduction loads at once.
constexpr int DG_RED_BATCH = 8;

// Above 16 tokens, the tokens split between warp pairs (decode_gemm_kernel's
// TS).
constexpr bool DG_TS_BIG = true;
// The most tokens for which each warp rounds its own copy of x (no block
// barrier per step); past that the block shares one copy. At 8 tokens
// the block's copy is 15-20 % faster (eight warps each loading x cost
// more than a barrier), at one token the same.
constexpr int DG_WARPX_MAX = 2;

struct DGSeg {
    const uint8_t *w, *w2; // w2: GLU's up matrix
    size_t stride, soff; // soff: the scale area's offset in a row (split formats)
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
    const __nv_bfloat16 *xb; // x rounded to bf16 by dg_round_x_kernel, or null
    __nv_bfloat16 *glu_bf;   // GLU: the output rounded to bf16 as well, or null
    int n;
    int ks, cps;    // splits, steps per split
    unsigned tiles; // in all segments
    float *partials;
    unsigned *counters;
    // Grouped (launch_decode_gemm_grouped): blockIdx.y is chunk k of
    // chunks[3k..3k+2] = (expert, first row of x, rows <= DG_TOK), the
    // expert's matrices wtab[e] (and wtab2[e]); output row order[j] for
    // x's row j (order null: j). chunks null: a plain launch.
    const int32_t *chunks, *n_chunks, *order;
    const void *const *wtab, *const *wtab2;
    // decode_gemm_wg_kernel (set by dg_launch_wg): xb as a tensor of n
    // rows, boxes of the instance's tokens x one step; the quant formats
    // outside grouped launches: each segment's matrix (GLU: w, and w2 in
    // wmap2) as bytes, boxes of 16 bytes x the tile's rows (QSrc's NB).
    cu_tmap xmap, wmap[CU_MV_MAX_W], wmap2;
    int wtma; // the weights' maps are set (else the lanes copy the weights)
};

// cp.async: 16 bytes from global to shared memory without a register in
// between, completing in kernels/cp_async.cuh's groups (commit / wait).
// Where it does not exist (the CPU emulation) a plain copy, which the same
// waits and barriers then order.
DEV void dg_cp16(void *dst, const void *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
#else
    *reinterpret_cast<uint4 *>(dst) = __ldg(reinterpret_cast<const uint4 *>(src));
#endif
}

// 4 bytes the same way (cp.async.ca: the .cg form copies 16 only).
DEV void dg_cp4(void *dst, const void *src)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src) : "memory");
#else
    *reinterpret_cast<uint32_t *>(dst) = __ldg(reinterpret_cast<const unsigned int *>(src));
#endif
}

// x's steps reach shared memory through registers, loaded one step ahead
// so their latency (an L2 round trip) is not paid at every step: XR
// 16-byte pieces per thread, by threads `who` of `count` (the warp's
// lanes, or the block's threads) over ntok tokens' DG_KC columns. BF: x
// was rounded to bf16 by dg_round_x_kernel (half the bytes, no
// conversion here); else f32, rounded here. Both round with
// __floats2bfloat162_rn: the same bf16 values either way.
template <int XR, bool BF> struct XPrefetch {
    static constexpr int PER = DG_KC / (BF ? 8 : 4); // pieces per token and step
    uint4 v[XR];
    DEV void load(const float *x, const __nv_bfloat16 *xb, int64_t cols, int ntok, int64_t kc,
                  int who, int count)
    {
#pragma unroll
        for (int i = 0; i < XR; i++) {
            const int q = who + i * count;
            if (q < ntok * PER) {
                const int64_t e = (int64_t)(q / PER) * cols + kc * DG_KC + (q % PER) * (BF ? 8 : 4);
                v[i] = BF ? __ldg(reinterpret_cast<const uint4 *>(xb + e))
                          : __ldg(reinterpret_cast<const uint4 *>(x + e));
            }
        }
    }
    // Into d [token][DG_LDS], rounded to bf16.
    DEV void store(__nv_bfloat16 *d, int ntok, int who, int count) const
    {
#pragma unroll
        for (int i = 0; i < XR; i++) {
            const int q = who + i * count;
            if (q < ntok * PER) {
                __nv_bfloat16 *o = d + (q / PER) * DG_LDS + (q % PER) * (BF ? 8 : 4);
                if (BF) {
                    *reinterpret_cast<uint4 *>(o) = v[i];
                } else {
                    const float4 f = make_float4(__uint_as_float(v[i].x), __uint_as_float(v[i].y),
                                                 __uint_as_float(v[i].z), __uint_as_float(v[i].w));
                    __nv_bfloat162 *o2 = reinterpret_cast<__nv_bfloat162 *>(o);
                    o2[0] = __floats2bfloat162_rn(f.x, f.y);
                    o2[1] = __floats2bfloat162_rn(f.z, f.w);
                }
            }
        }
    }
};

// x rounded to bf16 once per launch, for a GEMM launch that reads the
// copy: every block of a 64-token launch otherwise reads x's f32 bytes
// from L2 (as many as the weights) and converts them itself. The same
// rounding as XPrefetch's f32 path, so the GEMM's bytes do not change.
__global__ void __launch_bounds__(256) dg_round_x_kernel(const float *x, __nv_bfloat16 *xb, size_t n8)
{
    pdl_trigger();
    pdl_wait();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n8;
         i += (size_t)gridDim.x * blockDim.x) {
        const float4 lo = __ldg(reinterpret_cast<const float4 *>(x) + 2 * i);
        const float4 hi = __ldg(reinterpret_cast<const float4 *>(x) + 2 * i + 1);
        __nv_bfloat162 r[4] = {__floats2bfloat162_rn(lo.x, lo.y), __floats2bfloat162_rn(lo.z, lo.w),
                               __floats2bfloat162_rn(hi.x, hi.y), __floats2bfloat162_rn(hi.z, hi.w)};
        reinterpret_cast<uint4 *>(xb)[i] = *reinterpret_cast<const uint4 *>(r);
    }
}

// Where a quant unit's bytes lie (its WFmt<F>::fetch, split into what
// cp.async can copy): NV 16-byte vectors and NS 32-bit words (a word
// holds a 2- or 1-byte scalar at bit `shift`), and the Raw they make.
//
// The same bytes as the tensor memory accelerator copies them for a
// whole tile (decode_gemm_wg_kernel): NB boxes of 16 bytes a row a step,
// box b at byte bx(soff, u0, b) of every row (u0: the step's first unit;
// a split format's scale area 16-byte aligned), each box's rows one after
// another; unit u's vector v is its row's 16 bytes of box vbox(u, v), its
// word w the 32-bit word holding byte wbyte(u, w) of box wbox(w).
template <int F> struct QSrc;

DEV const uint8_t *word_of(const uint8_t *p, int &shift)
{
    shift = (int)(reinterpret_cast<uintptr_t>(p) & 3u) * 8;
    return reinterpret_cast<const uint8_t *>(reinterpret_cast<uintptr_t>(p) & ~(uintptr_t)3);
}

template <> struct QSrc<CW_Q8_0> {
    static constexpr int NV = 2, NS = 1;
    DEV static const uint8_t *vec(const uint8_t *row, size_t, int64_t u, int i) { return row + u * 32 + i * 16; }
    DEV static const uint8_t *word(const uint8_t *row, size_t soff, int64_t u, int, int &sh)
    {
        return word_of(row + soff + u * 2, sh);
    }
    DEV static WFmt<CW_Q8_0>::Raw make(const uint4 *v, const uint32_t *w) { return {v[0], v[1], w[0] & 0xFFFFu}; }
    // Two units a step: their 64 bytes, then the 16 holding their scales.
    static constexpr int NB = 5;
    DEV static int64_t bx(size_t soff, int64_t u0, int b)
    {
        return b < 4 ? u0 * 32 + 16 * b : (int64_t)soff + ((u0 * 2) & ~(int64_t)15);
    }
    DEV static int vbox(int64_t u, int v) { return 2 * (int)(u & 1) + v; }
    DEV static int wbox(int) { return 4; }
    DEV static int wbyte(int64_t u, int) { return (int)((u * 2) & 15); }
};
template <> struct QSrc<CW_Q4_0> {
    static constexpr int NV = 1, NS = 1;
    DEV static const uint8_t *vec(const uint8_t *row, size_t, int64_t u, int) { return row + u * 16; }
    DEV static const uint8_t *word(const uint8_t *row, size_t soff, int64_t u, int, int &sh)
    {
        return word_of(row + soff + u * 2, sh);
    }
    DEV static WFmt<CW_Q4_0>::Raw make(const uint4 *v, const uint32_t *w) { return {v[0], w[0] & 0xFFFFu}; }
    static constexpr int NB = 3;
    DEV static int64_t bx(size_t soff, int64_t u0, int b)
    {
        return b < 2 ? u0 * 16 + 16 * b : (int64_t)soff + ((u0 * 2) & ~(int64_t)15);
    }
    DEV static int vbox(int64_t u, int) { return (int)(u & 1); }
    DEV static int wbox(int) { return 2; }
    DEV static int wbyte(int64_t u, int) { return (int)((u * 2) & 15); }
};
template <> struct QSrc<CW_Q4_K> {
    static constexpr int NV = 3, NS = 0;
    DEV static const uint8_t *vec(const uint8_t *row, size_t, int64_t u, int i)
    {
        const uint8_t *blk = row + (u >> 2) * 144;
        return i == 0 ? blk : blk + 16 * i + (u & 3) * 32;
    }
    DEV static const uint8_t *word(const uint8_t *row, size_t, int64_t, int, int &sh) { sh = 0; return row; }
    DEV static WFmt<CW_Q4_K>::Raw make(const uint4 *v, const uint32_t *) { return {v[0], v[1], v[2]}; }
    // One unit a step, shared by the pair: its vectors.
    static constexpr int NB = 3;
    DEV static int64_t bx(size_t, int64_t u0, int b)
    {
        const int64_t blk = (u0 >> 2) * 144;
        return b == 0 ? blk : blk + 16 * b + (u0 & 3) * 32;
    }
    DEV static int vbox(int64_t, int v) { return v; }
    DEV static int wbox(int) { return 0; }
    DEV static int wbyte(int64_t, int) { return 0; }
};
template <> struct QSrc<CW_Q5_K> {
    static constexpr int NV = 5, NS = 0;
    DEV static const uint8_t *vec(const uint8_t *row, size_t, int64_t u, int i)
    {
        const uint8_t *blk = row + (u >> 2) * 176;
        return i == 0 ? blk : i < 3 ? blk + 32 + 16 * i + (u & 3) * 32 : blk + 16 * (i - 2);
    }
    DEV static const uint8_t *word(const uint8_t *row, size_t, int64_t, int, int &sh) { sh = 0; return row; }
    DEV static WFmt<CW_Q5_K>::Raw make(const uint4 *v, const uint32_t *) { return {v[0], v[1], v[2], v[3], v[4]}; }
    static constexpr int NB = 5;
    DEV static int64_t bx(size_t, int64_t u0, int b)
    {
        const int64_t blk = (u0 >> 2) * 176;
        return b == 0 ? blk : b < 3 ? blk + 32 + 16 * b + (u0 & 3) * 32 : blk + 16 * (b - 2);
    }
    DEV static int vbox(int64_t, int v) { return v; }
    DEV static int wbox(int) { return 0; }
    DEV static int wbyte(int64_t, int) { return 0; }
};
template <> struct QSrc<CW_Q6_K> {
    static constexpr int NV = 4, NS = 2;
    DEV static const uint8_t *vec(const uint8_t *row, size_t, int64_t u, int i)
    {
        const int k = (int)(u & 7), n = k >> 2, q = k & 3;
        const uint8_t *blk = row + (u >> 3) * 208;
        return i < 2 ? blk + n * 64 + (q & 1) * 32 + 16 * i : blk + 128 + n * 32 + 16 * (i - 2);
    }
    DEV static const uint8_t *word(const uint8_t *row, size_t soff, int64_t u, int j, int &sh)
    {
        const int k = (int)(u & 7), n = k >> 2, q = k & 3;
        return word_of(j == 0 ? row + (u >> 3) * 208 + 192 + n * 8 + 2 * q : row + soff + (u >> 3) * 2, sh);
    }
    DEV static WFmt<CW_Q6_K>::Raw make(const uint4 *v, const uint32_t *w)
    {
        return {v[0], v[1], v[2], v[3], w[0] & 0xFFFFu, w[1] & 0xFFFFu};
    }
    // Two units a step (q and q + 1 of a half n): the half's 64 ql bytes,
    // its 32 qh bytes, the block's 16 scales, the 16 bytes holding d.
    static constexpr int NB = 8;
    DEV static int64_t bx(size_t soff, int64_t u0, int b)
    {
        const int64_t blk = (u0 >> 3) * 208;
        const int n = (int)(u0 & 7) >> 2;
        return b < 4 ? blk + n * 64 + 16 * b
             : b < 6 ? blk + 128 + n * 32 + 16 * (b - 4)
             : b == 6 ? blk + 192
                      : (int64_t)soff + (((u0 >> 3) * 2) & ~(int64_t)15);
    }
    DEV static int vbox(int64_t u, int v) { return v < 2 ? 2 * (int)(u & 1) + v : 4 + (v - 2); }
    DEV static int wbox(int w) { return w == 0 ? 6 : 7; }
    DEV static int wbyte(int64_t u, int w)
    {
        return w == 0 ? ((int)(u & 7) >> 2) * 8 + 2 * (int)(u & 3) : (int)(((u >> 3) * 2) & 15);
    }
};
template <> struct QSrc<CW_NVFP4> {
    static constexpr int NV = 2, NS = 1;
    DEV static const uint8_t *vec(const uint8_t *row, size_t, int64_t u, int i) { return row + u * 32 + i * 16; }
    DEV static const uint8_t *word(const uint8_t *row, size_t soff, int64_t u, int, int &sh)
    {
        return word_of(row + soff + u * 4, sh);
    }
    DEV static WFmt<CW_NVFP4>::Raw make(const uint4 *v, const uint32_t *w) { return {v[0], v[1], w[0]}; }
    // One unit a step, shared by the pair.
    static constexpr int NB = 3;
    DEV static int64_t bx(size_t soff, int64_t u0, int b)
    {
        return b < 2 ? u0 * 32 + 16 * b : (int64_t)soff + ((u0 * 4) & ~(int64_t)15);
    }
    DEV static int vbox(int64_t, int v) { return v; }
    DEV static int wbox(int) { return 2; }
    DEV static int wbyte(int64_t u, int) { return (int)((u * 4) & 15); }
};
template <> struct QSrc<CW_MXFP8> {
    static constexpr int NV = 2, NS = 1;
    DEV static const uint8_t *vec(const uint8_t *row, size_t, int64_t u, int i) { return row + u * 32 + i * 16; }
    DEV static const uint8_t *word(const uint8_t *row, size_t soff, int64_t u, int, int &sh)
    {
        return word_of(row + soff + u, sh);
    }
    DEV static WFmt<CW_MXFP8>::Raw make(const uint4 *v, const uint32_t *w) { return {v[0], v[1], w[0] & 0xFFu}; }
    static constexpr int NB = 5;
    DEV static int64_t bx(size_t soff, int64_t u0, int b)
    {
        return b < 4 ? u0 * 32 + 16 * b : (int64_t)soff + (u0 & ~(int64_t)15);
    }
    DEV static int vbox(int64_t u, int v) { return 2 * (int)(u & 1) + v; }
    DEV static int wbox(int) { return 4; }
    DEV static int wbyte(int64_t u, int) { return (int)(u & 15); }
};

// The formats of small integer fields (WFmt<F>::fields: at most 6 bits,
// element = a * (field - FIELD_OFF) (+ b)), which QStage decodes with one
// FMA an element (docs/decisions/0020-decode-gemm-few-rows.md); the others take
// the dequantizer's own arithmetic.
__host__ __device__ constexpr bool dg_field_decode(int f)
{
    return f == CW_Q4_0 || f == CW_Q4_K || f == CW_Q5_K || f == CW_Q6_K;
}

// The weights of a format other than BF16 (kernels/weight_layout.h) reach
// the mma as bf16: each lane copies the quant bytes of its share of a step
// (QSrc: the bytes WFmt<F>::fetch reads) into a ring of QStage<F>::STAGES
// steps in shared memory by cp.async, STAGES - 1 steps ahead, as the BF16
// weights come; at its step it decodes them with the CPU's arithmetic
// (scales and pieces: element = a * v (+ b), the very float
// lib/format/dequant.c gives), rounds each element to bf16 and stores it
// into its warp's 16 rows of one bf16 tile, where the mma reads it as it
// reads BF16 weights. A warp's 16 rows x DG_KC columns are 128 pieces of 8
// elements: lane l takes row l / 2, pieces 4 (l % 2) .. 4 (l % 2) + 3 of
// the row's step (one unit of 32 elements, or half a unit of 64). Where
// the pair's lanes share one unit of 64 (PAIR) they read the same bytes:
// each copies every other of them into the pair's slots and reads all
// (the caller orders the lanes' copies before the reads: __syncwarp()).
// Rounding the decoded weight to bf16 is this kernel's one change to the
// weights' values (docs/decisions/0017-quantized-decode-gemm.md); it
// depends on the weight alone, so batch invariance is the BF16 kernel's.
constexpr int DG_THREADS = DG_GROUPS * 32;
// Shared memory a quant launch may take (two blocks an SM fit 228 KB).
constexpr size_t DG_QSMEM_MAX = 110 * 1024;
template <int F> struct QStage {
    using W = WFmt<F>;
    using S = QSrc<F>;
    static_assert(W::PW == 8 && DG_KC % W::U == 0 && W::P % 4 == 0, "a lane's four pieces lie in one unit");
    static constexpr int UPS = DG_KC / W::U; // units per row per step
    static constexpr bool PAIR = W::P == 8;
    static constexpr int OWNERS = PAIR ? DG_THREADS / 2 : DG_THREADS; // lanes or pairs
    // One step of the ring: vector v of every owner, then word w of every
    // owner ([v][owner] 16 bytes, [w][owner] 4 bytes: conflict-free).
    static constexpr size_t VEC_BYTES = (size_t)S::NV * OWNERS * 16;
    // (or the tensor memory accelerator's boxes, if more: QSrc's NB)
    static constexpr size_t LANE_STEP = VEC_BYTES + ((size_t)S::NS * OWNERS * 4 + 15) / 16 * 16;
    static constexpr size_t BOX_STEP = (size_t)S::NB * DG_TILE * 16;
    static constexpr size_t STEP_BYTES = LANE_STEP > BOX_STEP ? LANE_STEP : BOX_STEP;
    static constexpr size_t FIXED = DG_STAGE_BYTES + DG_X_BYTES; // the bf16 tile, x
    static constexpr int STAGES = (DG_QSMEM_MAX - FIXED) / STEP_BYTES < 4 ? (int)((DG_QSMEM_MAX - FIXED) / STEP_BYTES) : 4;
    static_assert(STAGES >= 2, "two steps of quant bytes fit");
    static constexpr size_t SMEM = FIXED + STAGES * STEP_BYTES > DG_O_BYTES ? FIXED + STAGES * STEP_BYTES : DG_O_BYTES;

    const uint8_t *row;
    size_t soff;
    int k0; // the lane's first piece of its row's step: 0 or 4
    unsigned char *ring; // stage 0 of the ring

    // This thread's slot among the owners; PAIR: whether it copies item i
    // (vectors, then words) of the pair's.
    DEV static unsigned owner() { return PAIR ? threadIdx.x >> 1 : threadIdx.x; }
    DEV bool copies(int i) const { return !PAIR || (i & 1) == (k0 ? 1 : 0); }
    DEV void issue(int64_t step, int slot) const
    {
        unsigned char *st = ring + (size_t)slot * STEP_BYTES;
        const int64_t u = step * UPS + k0 / W::P;
#pragma unroll
        for (int v = 0; v < S::NV; v++)
            if (copies(v))
                dg_cp16(st + ((size_t)v * OWNERS + owner()) * 16, S::vec(row, soff, u, v));
#pragma unroll
        for (int w = 0; w < S::NS; w++) {
            int sh;
            if (copies(S::NV + w))
                dg_cp4(st + VEC_BYTES + ((size_t)w * OWNERS + owner()) * 4, S::word(row, soff, u, w, sh));
        }
    }
    // Step `step`, in ring slot `slot` (its copies complete), decoded and
    // rounded into dst (the lane's row of the tile, DG_LDS bf16 wide; or
    // a row of a swizzled tile, kernels/wgmma.cuh, whose 16-byte chunks
    // go to chunk ^ swz, swz = row % 8). boxes: the slot holds the tensor
    // memory accelerator's boxes of the tile (QSrc's NB), not the lanes'
    // copies; the lane's row of them is threadIdx.x / 2.
    DEV void store(__nv_bfloat16 *dst, int64_t step, int slot, int swz = 0, bool boxes = false) const
    {
        const unsigned char *st = ring + (size_t)slot * STEP_BYTES;
        const int unit = k0 / W::P;
        const int64_t u = step * UPS + unit;
        uint4 vv[S::NV > 0 ? S::NV : 1];
        uint32_t ww[S::NS > 0 ? S::NS : 1];
        if (boxes) {
            const unsigned char *mine = st + (threadIdx.x >> 1) * 16;
#pragma unroll
            for (int v = 0; v < S::NV; v++)
                vv[v] = *reinterpret_cast<const uint4 *>(mine + (size_t)S::vbox(u, v) * DG_TILE * 16);
#pragma unroll
            for (int w = 0; w < S::NS; w++) {
                const int by = S::wbyte(u, w);
                ww[w] = *reinterpret_cast<const uint32_t *>(mine + (size_t)S::wbox(w) * DG_TILE * 16 + (by & ~3)) >>
                        ((by & 3) * 8);
            }
        } else {
#pragma unroll
            for (int v = 0; v < S::NV; v++)
                vv[v] = *reinterpret_cast<const uint4 *>(st + ((size_t)v * OWNERS + owner()) * 16);
#pragma unroll
            for (int w = 0; w < S::NS; w++) {
                int sh;
                S::word(row, soff, u, w, sh);
                ww[w] = *reinterpret_cast<const uint32_t *>(st + VEC_BYTES + ((size_t)w * OWNERS + owner()) * 4) >> sh;
            }
        }
        const typename W::Raw r = S::make(vv, ww);
        float a[W::P] = {}, b[W::P] = {};
        W::scales(r, u, a, b);
        // Only a unit of eight pieces has a first piece that differs
        // between lanes (0 or 4); its scales are then picked by selects,
        // not by a run-time index into a[], which would go to local memory.
        const int pfirst = k0 % W::P;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int p = pfirst + q;
            float ap, bp;
            if constexpr (W::P == 8) {
                ap = k0 ? a[q + 4] : a[q];
                bp = k0 ? b[q + 4] : b[q];
            } else {
                ap = a[q];
                bp = b[q];
            }
            float v[8];
            if constexpr (dg_field_decode(F)) {
                // Field q (at most 6 bits) under 0.5's bits: m = 0.5 +
                // q / 256, one byte permute an element; then one FMA,
                // (256 a) m + (b - (128 + FIELD_OFF) a), whose exact value
                // is a (q - FIELD_OFF) + b: both scalings of a are exact.
                const float A = __fmul_rn(ap, 256.0f);
                const float B = __fsub_rn(W::HAS_B ? bp : 0.0f, __fmul_rn(ap, 128.0f + (float)W::FIELD_OFF));
                uint32_t w[2];
                W::fields(r, u, p, w);
#pragma unroll
                for (int e = 0; e < 8; e++)
                    v[e] = __fmaf_rn(A, __uint_as_float(__byte_perm(w[e >> 2], 0x3F00u, 0x5044u | (e & 3) << 8)), B);
            } else {
                W::piece(r, u, p, v);
#pragma unroll
                for (int e = 0; e < 8; e++)
                    v[e] = W::HAS_B ? __fadd_rn(__fmul_rn(ap, v[e]), bp) : __fmul_rn(ap, v[e]);
            }
            __nv_bfloat162 h[4] = {__floats2bfloat162_rn(v[0], v[1]), __floats2bfloat162_rn(v[2], v[3]),
                                   __floats2bfloat162_rn(v[4], v[5]), __floats2bfloat162_rn(v[6], v[7])};
            *reinterpret_cast<uint4 *>(dst + (((unit * W::U) / 8 + p) ^ swz) * 8) = *reinterpret_cast<const uint4 *>(h);
        }
    }
};
// BF16 has no QStage; its instances name Q8_0's, unused.
template <int F> constexpr size_t dg_smem_of() { return F == CW_BF16 ? DG_SMEM : QStage<F == CW_BF16 ? CW_Q8_0 : F>::SMEM; }

// What a block of a launch takes: its row tile, column split, segment
// (the matrix; an MoE chunk's expert), tokens and steps. False: a grouped
// launch's block past the last chunk, which has nothing to do.
struct DGBlock {
    DGSeg sg;
    int seg;
    unsigned tile;
    int split, t0, ntok, nc;
    bool glu;
    int64_t base, c0; // the tile's first row, the split's first step
};
DEV bool dg_block(const DGArgs &a, DGBlock &b)
{
    b.tile = blockIdx.x / (unsigned)a.ks;
    b.split = (int)(blockIdx.x % (unsigned)a.ks);
    int s = 0;
#pragma unroll
    for (int i = 1; i < CU_MV_MAX_W; i++)
        if (i < a.n_seg && b.tile >= a.seg[i].tile0)
            s = i;
    b.sg = a.seg[s];
    b.seg = s;
    b.glu = a.mode != CU_MV_STORE;
    b.base = (int64_t)(b.tile - b.sg.tile0) * (b.glu ? DG_TILE / 2 : DG_TILE);
    b.t0 = blockIdx.y * DG_TOK;
    b.ntok = min(DG_TOK, a.n - b.t0);
    if (a.chunks) {
        // The chunk table and x come from the kernels before: wait for
        // them before the weights' addresses are known.
        pdl_trigger();
        pdl_wait();
        const int k = (int)blockIdx.y;
        if (k >= *a.n_chunks)
            return false;
        const int e = a.chunks[3 * k];
        b.t0 = a.chunks[3 * k + 1];
        b.ntok = a.chunks[3 * k + 2];
        b.sg.w = static_cast<const uint8_t *>(a.wtab[e]);
        if (b.glu)
            b.sg.w2 = static_cast<const uint8_t *>(a.wtab2[e]);
    }
    const int64_t nsteps = a.cols / DG_KC;
    b.c0 = (int64_t)b.split * a.cps;
    b.nc = (int)min((int64_t)a.cps, nsteps - b.c0);
    return true;
}

// The end of a block: o[token][slot] (DG_LDO floats a token, every
// thread past a barrier since it was written) holds the block's sums for
// its split. With several splits they go to the partial-sum scratch and
// the row tile's last block adds them in ascending split order; then bias
// or activation into the output rows.
template <int THREADS>
DEV void dg_finish(const DGArgs &a, const DGSeg &sg, float *o, int64_t base, unsigned tile, int split,
                   int t0, int ntok, bool glu)
{
    __shared__ unsigned last_block;
    if (a.ks > 1) {
        // Partial sums and their reduction in float4 (4 slots), the
        // reduction's loads DG_RED_BATCH splits at a time: a chain of
        // dependent L2 round trips per output was most of a 64-token
        // launch before the batched loads (docs/decisions/0009).
        constexpr int V = DG_TILE / 4;
        const size_t slots = (size_t)a.tiles * DG_TILE;
        for (int q = threadIdx.x; q < ntok * V; q += THREADS) {
            const int t = q / V, i = (q % V) * 4;
            *reinterpret_cast<float4 *>(a.partials + ((size_t)split * a.n + t0 + t) * slots +
                                        (size_t)tile * DG_TILE + i) =
                *reinterpret_cast<const float4 *>(o + t * DG_LDO + i);
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
        const size_t kstride = (size_t)a.n * slots / 4; // a split's partials, in float4
        for (int q = threadIdx.x; q < ntok * V; q += THREADS) {
            const int t = q / V, i = (q % V) * 4;
            const float4 *p = reinterpret_cast<const float4 *>(
                a.partials + ((size_t)t0 + t) * slots + (size_t)tile * DG_TILE + i);
            float4 v = __ldcg(p);
            for (int k0 = 1; k0 < a.ks; k0 += DG_RED_BATCH) {
                float4 r[DG_RED_BATCH];
#pragma unroll
                for (int u = 0; u < DG_RED_BATCH; u++)
                    if (k0 + u < a.ks)
                        r[u] = __ldcg(p + (size_t)(k0 + u) * kstride);
#pragma unroll
                for (int u = 0; u < DG_RED_BATCH; u++)
                    if (k0 + u < a.ks) {
                        v.x = __fadd_rn(v.x, r[u].x);
                        v.y = __fadd_rn(v.y, r[u].y);
                        v.z = __fadd_rn(v.z, r[u].z);
                        v.w = __fadd_rn(v.w, r[u].w);
                    }
            }
            *reinterpret_cast<float4 *>(o + t * DG_LDO + i) = v;
        }
        __syncthreads();
    }

    if (!glu) {
        for (int q = threadIdx.x; q < ntok * DG_TILE; q += THREADS) {
            const int t = q / DG_TILE, i = q % DG_TILE;
            const int64_t row = base + i;
            if (row < sg.rows) {
                const float v = o[t * DG_LDO + i];
                const int64_t orow = a.order ? a.order[t0 + t] : t0 + t;
                sg.out[orow * sg.rows + row] = sg.bias ? __fadd_rn(v, sg.bias[row]) : v;
            }
        }
    } else {
        constexpr int H = DG_TILE / 2;
        for (int q = threadIdx.x; q < ntok * H; q += THREADS) {
            const int t = q / H, i = q % H;
            const int64_t row = base + i;
            if (row < sg.rows) {
                const float g = o[t * DG_LDO + i];
                const float act = a.mode == CU_MV_GLU_GELU ? gelu_tanh_f(g) : silu_f(g);
                const int64_t orow = a.order ? a.order[t0 + t] : t0 + t;
                const float r = __fmul_rn(act, o[t * DG_LDO + H + i]);
                sg.out[orow * sg.rows + row] = r;
                if (a.glu_bf)
                    a.glu_bf[orow * sg.rows + row] = __float2bfloat16_rn(r);
            }
        }
    }
}

// F: the weights' format (cw_format; BF16 through the cp.async ring, the
// others through QStage); NT8: 8-token mma columns; XT: the most tokens a
// block has (sizes the x prefetch); RW: 16-slot groups per warp (8 / RW
// warps); XB: x read from the bf16 copy (a.xb); TS: the tokens split
// between warp pairs (below).
template <int F, int NT8, int XT, int RW, bool XB, bool TS>
__global__ void __launch_bounds__(DG_GROUPS / RW * 32, DG_MINB) decode_gemm_kernel(const DGArgs a)
{
    constexpr bool QUANT = F != CW_BF16;
    static_assert(!QUANT || RW == 1, "a quant warp decodes one group of rows");
    constexpr int WARPS = DG_GROUPS / RW, THREADS = WARPS * 32;
    // Who computes what. Plain: warp w its RW groups (the rows its lanes
    // copy) for all the tokens, so it needs no other warp's weights (a
    // warp barrier per step). TS: warp w groups 2 (w / 2) and 2 (w / 2) + 1
    // for half the tokens (8-token tiles (w % 2) NT8 / 2 ...): each warp's
    // shared-memory reads per step fall from 16 + 64 to 32 + 32 rows' worth
    // (ldmatrix's traffic bounded the 64-token launch), for a block barrier
    // per step over weights that another warp copied.
    static_assert(!TS || (RW == 1 && NT8 % 2 == 0), "the token split pairs warps of one group");
    constexpr int CG = TS ? 2 : RW, CT = TS ? NT8 / 2 : NT8;
    extern __shared__ uint4 dg_smem[];
    unsigned char *sm = reinterpret_cast<unsigned char *>(dg_smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int cgb = TS ? (warp >> 1) * 2 : warp * RW; // the first group this warp computes
    const int ctb = TS ? (warp & 1) * CT : 0;         // its first 8-token tile
    DGBlock bk;
    if (!dg_block(a, bk))
        return;
    const DGSeg &sg = bk.sg;
    const unsigned tile = bk.tile;
    const int split = bk.split, t0 = bk.t0, ntok = bk.ntok, nc = bk.nc;
    const bool glu = bk.glu;
    const int64_t base = bk.base, c0 = bk.c0;
    const float *x = a.x + (int64_t)t0 * a.cols;
    const __nv_bfloat16 *xbt = XB ? a.xb + (int64_t)t0 * a.cols : nullptr;

    // Group q = warp * RW + g: slots q * 16 .. q * 16 + 15. BF16: lane l
    // copies 16-byte piece (l & 7) of its rows l / 8, 4 + l / 8, ...; a
    // quant lane decodes its share of row l / 2 (QStage). Rows past the
    // matrix read its last row and are never stored.
    const uint8_t *wp[RW][4];
    using QS = QStage<QUANT ? F : CW_Q8_0>;
    QS qs;
#pragma unroll
    for (int g = 0; g < RW; g++) {
        const int q = warp * RW + g;
        const int64_t row0 = base + (glu ? (q & 3) * 16 : q * 16);
        const uint8_t *wm = glu && q >= DG_GROUPS / 2 ? sg.w2 : sg.w;
        if constexpr (QUANT) {
            qs.row = wm + min(row0 + (lane >> 1), sg.rows - 1) * (int64_t)sg.stride;
            qs.soff = sg.soff;
            qs.k0 = (lane & 1) * 4;
            qs.ring = sm + QS::FIXED;
        } else {
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const int64_t r = min(row0 + i * 4 + (lane >> 3), sg.rows - 1);
                wp[g][i] = wm + r * (int64_t)sg.stride + (lane & 7) * 16 + c0 * DG_KC * 2;
            }
        }
    }
    __nv_bfloat16 *ring = reinterpret_cast<__nv_bfloat16 *>(sm) + warp * RW * 16 * DG_LDS;
    // BF16: step `step` of the split into ring slot `slot`: this lane's pieces.
    auto issue = [&](int step, int slot) {
#pragma unroll
        for (int g = 0; g < RW; g++)
#pragma unroll
            for (int i = 0; i < 4; i++)
                dg_cp16(ring + (size_t)slot * DG_TILE * DG_LDS +
                            (g * 16 + i * 4 + (lane >> 3)) * DG_LDS + (lane & 7) * 8,
                        wp[g][i] + (int64_t)step * DG_KC * 2);
    };
    if constexpr (QUANT) {
#pragma unroll
        for (int p = 0; p < QS::STAGES - 1; p++) {
            if (p < nc)
                qs.issue(c0 + p, p);
            cp_async_commit();
        }
    } else {
#pragma unroll
        for (int p = 0; p < DG_STAGES - 1; p++) {
            if (p < nc)
                issue(p, p);
            cp_async_commit();
        }
    }
    // The weights depend on no kernel; x, the partials and the counters do
    // (kernels/launch.cuh).
    pdl_trigger();
    pdl_wait();

    // Up to DG_WARPX_MAX tokens each warp rounds its own copy of x's steps
    // (one tile, rewritten between __syncwarp()s: no block barrier in the
    // loop); more tokens share a double-buffered block copy.
    constexpr bool WARP_X = XT <= DG_WARPX_MAX;
    static_assert(!WARP_X || (NT8 == 1 && !TS && WARPS * 16 <= 3 * DG_TOK), "the warps' x copies fit");
    static_assert(NT8 * 8 <= DG_TOK && XT <= NT8 * 8, "the mma columns cover the tokens");
    constexpr int XR = (XT * (DG_KC / (XB ? 8 : 4)) + (WARP_X ? 32 : THREADS) - 1) / (WARP_X ? 32 : THREADS);
    const int xwho = WARP_X ? lane : (int)threadIdx.x, xcount = WARP_X ? 32 : THREADS;
    __nv_bfloat16 *xs = reinterpret_cast<__nv_bfloat16 *>(sm + (QUANT ? DG_STAGE_BYTES : DG_W_BYTES));
    __nv_bfloat16 *xw = xs + warp * 16 * DG_LDS;
    for (int i = threadIdx.x; i < (int)(DG_X_BYTES / 16); i += THREADS)
        reinterpret_cast<uint4 *>(xs)[i] = make_uint4(0, 0, 0, 0);
    XPrefetch<XR, XB> xp;
    xp.load(x, xbt, a.cols, ntok, c0, xwho, xcount);
    __syncthreads();
    if (!WARP_X) {
        xp.store(xs, ntok, xwho, xcount);
        if (nc > 1)
            xp.load(x, xbt, a.cols, ntok, c0 + 1, xwho, xcount);
        __syncthreads();
    }

    // acc[g][t]: the 16 slots of group cgb + g x tokens 8 (ctb + t) ..
    // + 7, in mma's C layout (kernels/mma.cuh).
    float acc[CG][CT][4];
#pragma unroll
    for (int g = 0; g < CG; g++)
#pragma unroll
        for (int t = 0; t < CT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[g][t][e] = 0.0f;
    // ldmatrix row addresses (kernels/mma.cuh): A's lane l points at slot
    // l % 16, columns 8 (l / 16); B's at token (l % 8) + 8 (l / 16),
    // columns 8 ((l / 8) % 2) of each pair of 8-token tiles.
    const int a_off = (lane & 15) * DG_LDS + (lane >> 4) * 8;
    const int b_off = ((lane & 7) + (lane >> 4) * 8) * DG_LDS + ((lane >> 3) & 1) * 8;
    const __nv_bfloat16 *wtile = reinterpret_cast<const __nv_bfloat16 *>(sm) + cgb * 16 * DG_LDS;
    int slot = 0; // the ring slot of step cc (quant: of its quant bytes)
    // The mma of one step over the tile wt and x's rows xb.
    auto math = [&](const __nv_bfloat16 *wt, const __nv_bfloat16 *xb) {
#pragma unroll
        for (int kk = 0; kk < DG_KC / 16; kk++) {
            unsigned fa[CG][4];
#pragma unroll
            for (int g = 0; g < CG; g++)
                ldmatrix_x4(fa[g], wt + g * 16 * DG_LDS + kk * 16 + a_off);
#pragma unroll
            for (int t = 0; t < CT; t += 2) {
                unsigned fb[4];
                if (t + 1 < CT)
                    ldmatrix_x4(fb, xb + t * 8 * DG_LDS + kk * 16 + b_off);
                else
                    ldmatrix_x2(fb, xb + t * 8 * DG_LDS + kk * 16 + b_off);
#pragma unroll
                for (int g = 0; g < CG; g++) {
                    mma_bf16_16816(acc[g][t], fa[g], fb);
                    if (t + 1 < CT)
                        mma_bf16_16816(acc[g][t + 1], fa[g], fb + 2);
                }
            }
        }
    };
    for (int cc = 0; cc < nc; cc++) {
        if constexpr (QUANT) {
            // Step cc + STAGES - 1's bytes into the slot step cc - 1's
            // left (a lane and its pair read only their own copies, past a
            // warp barrier since step cc - 1's reads); then step cc
            // decoded into the one bf16 tile once every warp that reads
            // these rows is past step cc - 1's math.
            const int ahead = slot == 0 ? QS::STAGES - 1 : slot - 1;
            if (cc + QS::STAGES - 1 < nc)
                qs.issue(c0 + cc + QS::STAGES - 1, ahead);
            cp_async_commit();
            cp_async_wait<QS::STAGES - 1>();
            if (TS)
                __syncthreads();
            else
                __syncwarp();
            qs.store(ring + (lane >> 1) * DG_LDS, c0 + cc, slot);
        } else if (!TS) {
            // The slot the previous step read takes the step DG_STAGES - 1
            // ahead (every lane is past its reads of it).
            __syncwarp();
            const int ahead = slot == 0 ? DG_STAGES - 1 : slot - 1;
            if (cc + DG_STAGES - 1 < nc)
                issue(cc + DG_STAGES - 1, ahead);
            cp_async_commit();
        }
        // x's next step into the buffer of step cc - 2: with TS the block
        // barrier before step cc - 1's math is the last one every warp
        // passed after reading it; without, the barrier ending step cc - 1.
        if (WARP_X) {
            xp.store(xw, ntok, xwho, xcount);
            if (cc + 1 < nc)
                xp.load(x, xbt, a.cols, ntok, c0 + cc + 1, xwho, xcount);
        } else if (cc + 1 < nc) {
            xp.store(xs + ((cc + 1) % (TS ? 3 : 2)) * DG_TOK * DG_LDS, ntok, xwho, xcount);
            if (cc + 2 < nc)
                xp.load(x, xbt, a.cols, ntok, c0 + cc + 2, xwho, xcount);
        }
        if (TS) {
            if (!QUANT)
                cp_async_wait<DG_STAGES - 2>(); // this thread's pieces of step cc are in,
            __syncthreads();              // and every thread's; step cc - 1's math is done
            if (!QUANT) {
                const int ahead = slot == 0 ? DG_STAGES - 1 : slot - 1;
                if (cc + DG_STAGES - 1 < nc)
                    issue(cc + DG_STAGES - 1, ahead);
                cp_async_commit();
            }
        } else {
            if (!QUANT)
                cp_async_wait<DG_STAGES - 1>(); // this lane's pieces of step cc are in
            __syncwarp();                 // and the other lanes'
        }
        const __nv_bfloat16 *wt = wtile + (QUANT ? 0 : (size_t)slot * DG_TILE * DG_LDS);
        math(wt, (WARP_X ? xw : xs + (cc % (TS ? 3 : 2)) * DG_TOK * DG_LDS) + ctb * 8 * DG_LDS);
        if (!WARP_X && !TS)
            __syncthreads();
        slot = slot == (QUANT ? QS::STAGES : DG_STAGES) - 1 ? 0 : slot + 1;
    }
    cp_async_wait<0>(); // (only empty groups are left)

    // o[token][slot]: the block's sums (nc == 0 leaves them 0).
    float *o = reinterpret_cast<float *>(sm);
    __syncthreads();
#pragma unroll
    for (int g = 0; g < CG; g++)
#pragma unroll
        for (int t = 0; t < CT; t++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                o[((ctb + t) * 8 + 2 * (lane & 3) + (e & 1)) * DG_LDO + (cgb + g) * 16 + (lane >> 2) +
                  (e >> 1) * 8] = acc[g][t][e];
    __syncthreads();

    dg_finish<THREADS>(a, sg, o, base, tile, split, t0, ntok, glu);
}

// ---- the Hopper kernel: wgmma from shared memory ----
//
// From DG_QXB_MIN tokens on an sm_90a build, most quant formats from
// fewer (dg_wg_from; docs/decisions/0033): the
// same blocks (DG_TILE slots, a column split, up to DG_TOK tokens), the
// same sums per output (the split's columns in ascending steps of DG_KC,
// each four slices of 16 into one f32 accumulator; then the splits in
// ascending order by dg_finish), but the products are wgmma's: warpgroup
// g takes slots 64 g .. 64 g + 63 for all N tokens, both operands read by
// the tensor cores from swizzled tiles (kernels/wgmma.cuh). Per step of
// the split:
//   - the weights (BF16: the tile itself; quant: the bytes QStage copies)
//     arrive by cp.async, STAGES - 1 steps ahead, in one commit group a
//     step; x's step by one copy of the tensor memory accelerator
//     (kernels/tma.cuh, thread 0), its arrival on the slot's mbarrier;
//   - quant: each lane decodes its share of the step into one of two
//     swizzled bf16 tiles, while the tensor cores still run the step
//     before from the other;
//   - one block barrier, then four wgmma a warpgroup, not waited for
//     until the next step's barrier.
constexpr size_t WG_ROW = DG_KC * 2;                    // bytes of a swizzled row
constexpr size_t WG_W_BYTES = (size_t)DG_TILE * WG_ROW; // a tile of weights
// Shared memory a block may take (two blocks an SM: 2 x (112 + 1) KB of 228).
constexpr size_t WG_SMEM_MAX = 112 * 1024;
template <int F, int N> struct WGPlan {
    static constexpr bool QUANT = F != CW_BF16;
    static constexpr size_t X = (size_t)N * WG_ROW; // a step of x
    static constexpr size_t QSTEP = QUANT ? QStage<QUANT ? F : CW_Q8_0>::STEP_BYTES : 0;
    static constexpr size_t STAGE = (QUANT ? 0 : WG_W_BYTES) + X + QSTEP;
    // 1 KB to align the tiles, 64 bytes for the slots' mbarriers; quant:
    // the two decoded tiles.
    static constexpr size_t FIXED = 1024 + 64 + (QUANT ? 2 * WG_W_BYTES : 0);
    static constexpr int STAGES = (WG_SMEM_MAX - FIXED) / STAGE < 4 ? (int)((WG_SMEM_MAX - FIXED) / STAGE) : 4;
    static_assert(STAGES >= 2, "two steps fit");
    static_assert(X % 1024 == 0, "x's tiles stay 1024-byte aligned");
    // The mbarriers' offset from the aligned base: past the tiles and the
    // output tile that reuses them at the end.
    static constexpr size_t BARS = FIXED - 1024 - 64 + STAGES * STAGE > DG_O_BYTES
                                       ? FIXED - 1024 - 64 + STAGES * STAGE
                                       : DG_O_BYTES;
    static constexpr size_t SMEM = 1024 + BARS + 64;
    // What a launch asks for: at least so much that no third block fits
    // an SM (Hopper's 228 KB, 1 KB of it reserved a block): the column
    // splits count DG_MINB blocks an SM (dg_split), and a third on some
    // SMs leaves others idle (Q4_K 4096 x 12288 at 32 tokens ran 35 %
    // slower so, on the H200).
    static constexpr size_t MIN = 228 * 1024 / (DG_MINB + 1) - 1024 + 16;
    static constexpr size_t LAUNCH = SMEM > MIN ? SMEM : MIN;
};

template <int F, int N>
__global__ void __launch_bounds__(DG_THREADS, DG_MINB) decode_gemm_wg_kernel(const __grid_constant__ DGArgs a)
{
#if MEMRA_HAS_WGMMA
    using P = WGPlan<F, N>;
    constexpr bool QUANT = F != CW_BF16;
    constexpr int S = P::STAGES, AHEAD = S - 1;
    static_assert(N % 8 == 0 && N <= DG_TOK, "the wgmma's columns cover the tokens");
    extern __shared__ uint4 dg_smem[];
    // 1024-byte aligned, by an offset from dg_smem (so the compiler keeps
    // knowing these are shared addresses).
    unsigned char *sm = reinterpret_cast<unsigned char *>(dg_smem) +
                        ((1024 - (reinterpret_cast<uintptr_t>(dg_smem) & 1023)) & 1023);
    DGBlock bk;
    if (!dg_block(a, bk))
        return;
    const DGSeg &sg = bk.sg;
    const int nc = bk.nc, ntok = bk.ntok;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wg = warp >> 2;
    unsigned char *dtile = sm;                                  // quant: two decoded tiles
    unsigned char *wring = sm + (QUANT ? 2 * WG_W_BYTES : 0);   // BF16: the weight tiles
    unsigned char *xring = wring + (QUANT ? 0 : S * WG_W_BYTES); // x's steps
    unsigned char *qring = xring + S * P::X;                     // quant: QStage's ring
    uint64_t *bars = reinterpret_cast<uint64_t *>(sm + P::BARS); // the slots' arrivals

    // Slot r of the tile: row base + r (GLU: gate rows, then the same rows
    // of up from r = 64); rows past the matrix read its last row and are
    // never stored. BF16: thread i copies chunks q = i + 256 k (k < 4),
    // row q / 8, chunk q % 8; quant: a lane decodes its share of slot
    // 16 warp + lane / 2 (QStage).
    auto row_of = [&](int r) {
        const uint8_t *m = bk.glu && r >= DG_TILE / 2 ? sg.w2 : sg.w;
        const int64_t row = bk.base + (bk.glu ? (r & (DG_TILE / 2 - 1)) : r);
        return m + min(row, sg.rows - 1) * (int64_t)sg.stride;
    };
    // Each thread's copies of a step, at step 0: BF16 weights (chunks
    // q = i + 256 k, k < 4: slot row q / 8, chunk q % 8).
    const uint8_t *wsrc[QUANT ? 1 : 4];
    unsigned woff[QUANT ? 1 : 4];
    using QS = QStage<QUANT ? F : CW_Q8_0>;
    using QSRC = QSrc<QUANT ? F : CW_Q8_0>;
    QS qs;
    const int myrow = 16 * warp + (lane >> 1);
    // The quant bytes by the tensor memory accelerator too (QSrc's boxes
    // of the tile's rows, which QStage::store reads), both copies of a
    // step counted on its slot's mbarrier. BF16's weights stay the lanes'
    // copies (by the accelerator its launches ran 2-3 % slower on the H200).
    const bool wtma = QUANT && a.wtma != 0;
    if constexpr (QUANT) {
        qs.row = row_of(myrow);
        qs.soff = sg.soff;
        qs.k0 = (lane & 1) * 4;
        qs.ring = qring;
    } else {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int q = threadIdx.x + k * DG_THREADS;
            wsrc[k] = row_of(q >> 3) + (q & 7) * 16 + bk.c0 * WG_ROW;
            woff[k] = wg_chunk(q >> 3, q & 7);
        }
    }
    auto issue_w = [&](int step, int slot) {
        if constexpr (QUANT) {
            if (!wtma) {
                qs.issue(bk.c0 + step, slot);
            } else if (threadIdx.x == 0) {
                constexpr unsigned VB = (unsigned)DG_TILE * 16; // a box of the tile's rows
                unsigned char *st = qring + (size_t)slot * QS::STEP_BYTES;
                const int64_t u0 = (bk.c0 + step) * QS::UPS;
                mbar_expect(&bars[slot], (unsigned)QSRC::NB * VB);
#pragma unroll
                for (int v = 0; v < QSRC::NB; v++) {
                    const int x = (int)QSRC::bx(sg.soff, u0, v);
                    if (bk.glu) {
                        tma_load_2d(st + v * VB, &a.wmap[0], x, (int)bk.base, &bars[slot]);
                        tma_load_2d(st + v * VB + VB / 2, &a.wmap2, x, (int)bk.base, &bars[slot]);
                    } else {
                        tma_load_2d(st + v * VB, &a.wmap[bk.seg], x, (int)bk.base, &bars[slot]);
                    }
                }
            }
        } else {
#pragma unroll
            for (int k = 0; k < 4; k++)
                dg_cp16(wring + (size_t)slot * WG_W_BYTES + woff[k], wsrc[k] + (int64_t)step * WG_ROW);
        }
    };
    // x's step: the block's tokens t0 .. t0 + N - 1 (rows past the
    // tensor arrive as zeros; a grouped launch's rows past its chunk are
    // other chunks' tokens, whose columns are never stored).
    auto issue_x = [&](int step, int slot) {
        if (threadIdx.x == 0) {
            mbar_expect(&bars[slot], (unsigned)P::X);
            tma_load_2d(xring + (size_t)slot * P::X, &a.xmap, (int)((bk.c0 + step) * DG_KC), bk.t0, &bars[slot]);
        }
    };
    if (threadIdx.x == 0) {
        tma_prefetch(&a.xmap);
        for (int s = 0; s < S; s++)
            mbar_init(&bars[s], wtma ? 2 : 1);
    }
    // The weights depend on no kernel; x does (kernels/launch.cuh). Group
    // p holds step p's weights.
    for (int p = 0; p < AHEAD; p++) {
        if (p < nc)
            issue_w(p, p);
        cp_async_commit();
    }
    pdl_trigger();
    pdl_wait();
    __syncthreads(); // the mbarriers initialized
    for (int p = 0; p < AHEAD; p++)
        if (p < nc)
            issue_x(p, p);

    float acc[N / 2];
#pragma unroll
    for (int i = 0; i < N / 2; i++)
        acc[i] = 0.0f;
    // The operands' descriptors: this warpgroup's rows of the first
    // weight tile (quant: decoded tile), x's first slot.
    const wg_desc_t ad = wg_desc((QUANT ? dtile : wring) + wg * 64 * WG_ROW), xd = wg_desc(xring);
    int slot = 0;       // step cc's ring slot
    unsigned phase = 0; // the slot's use, mod 2
    for (int cc = 0; cc < nc; cc++) {
        cp_async_wait<AHEAD - 1>(); // step cc's copies (this thread's)
        if constexpr (QUANT && QS::PAIR)
            __syncwarp(); // (and its pair's)
        const int ahead = slot == 0 ? S - 1 : slot - 1;
        // Quant: step cc + AHEAD's bytes into the slot whose bytes the
        // block decoded last step, before this step's decode (so the
        // copies' latency runs under it); x's after the barrier below.
        if constexpr (QUANT)
            if (cc + AHEAD < nc)
                issue_w(cc + AHEAD, ahead);
        if (wtma)
            mbar_wait(&bars[slot], phase); // the step's quant bytes (and x)
        if constexpr (QUANT)
            qs.store(reinterpret_cast<__nv_bfloat16 *>(dtile + (size_t)(cc & 1) * WG_W_BYTES + myrow * WG_ROW),
                     bk.c0 + cc, slot, myrow & 7, wtma);
        // Step cc - 1's wgmma are done (they read the slot refilled below
        // and the decoded tile written next step); the step's operands are
        // visible to the tensor cores, every thread's.
        if (!wtma)
            mbar_wait(&bars[slot], phase);
        wg_wait<0>();
        wg_hold(acc);
        wg_fence_proxy();
        __syncthreads();
        if (cc + AHEAD < nc) {
            if constexpr (!QUANT)
                issue_w(cc + AHEAD, ahead);
            issue_x(cc + AHEAD, ahead);
        }
        cp_async_commit();
        const wg_desc_t at = wg_at(ad, QUANT ? (unsigned)(cc & 1) * (unsigned)WG_W_BYTES : (unsigned)slot * (unsigned)WG_W_BYTES);
        const wg_desc_t bt = wg_at(xd, (unsigned)slot * (unsigned)P::X);
        wg_arrive();
#pragma unroll
        for (int kk = 0; kk < DG_KC / 16; kk++)
            wg_mma<N>(acc, wg_at(at, kk * 32), wg_at(bt, kk * 32));
        wg_commit();
        phase ^= slot == S - 1 ? 1u : 0u;
        slot = slot == S - 1 ? 0 : slot + 1;
    }
    wg_wait<0>();
    wg_hold(acc);
    cp_async_wait<0>(); // (only empty groups are left)

    float *o = reinterpret_cast<float *>(sm);
    __syncthreads();
#pragma unroll
    for (int i = 0; i < N / 2; i++)
        o[(8 * (i >> 2) + 2 * (lane & 3) + (i & 1)) * DG_LDO + wg * 64 + 16 * (warp & 3) + (lane >> 2) +
          8 * ((i >> 1) & 1)] = acc[i];
    __syncthreads();
    dg_finish<DG_THREADS>(a, sg, o, bk.base, bk.tile, bk.split, bk.t0, ntok, bk.glu);
#endif
}

// The fragment layouts of kernels/mma.cuh, checked on one tile (one
// warp): a (16 x 16, [row][k]) and b (16 columns x 16 k, [column][k])
// rounded to bf16 into padded shared rows; d[16][24] = a b^T + c through
// ldmatrix .x4 for a and for b's two 8-column tiles (d's columns 0-15)
// and .x2 for b's second tile again (columns 16-23, + c's columns 8-15).
// Exact integers make every order of the sums give the same bits, so a
// layout error, not rounding, is what a difference shows.
__global__ void dg_mma_selftest_kernel(const float *a, const float *b, const float *c, float *d)
{
    __shared__ __align__(16) __nv_bfloat16 sa[16 * DG_LDS], sb[16 * DG_LDS];
    const int lane = threadIdx.x;
    for (int i = lane; i < 16 * 16; i += 32) {
        sa[(i / 16) * DG_LDS + i % 16] = __float2bfloat16_rn(a[i]);
        sb[(i / 16) * DG_LDS + i % 16] = __float2bfloat16_rn(b[i]);
    }
    __syncwarp();
    unsigned fa[4], fb[4], fb2[2];
    ldmatrix_x4(fa, sa + (lane & 15) * DG_LDS + (lane >> 4) * 8);
    ldmatrix_x4(fb, sb + ((lane & 7) + (lane >> 4) * 8) * DG_LDS + ((lane >> 3) & 1) * 8);
    ldmatrix_x2(fb2, sb + ((lane & 7) + 8) * DG_LDS + ((lane >> 3) & 1) * 8);
    const int g = lane >> 2, t = lane & 3;
    float acc[3][4];
    for (int n = 0; n < 3; n++)
        for (int e = 0; e < 4; e++)
            acc[n][e] = c[(g + (e >> 1) * 8) * 16 + (n > 0 ? 8 : 0) + 2 * t + (e & 1)];
    mma_bf16_16816(acc[0], fa, fb);
    mma_bf16_16816(acc[1], fa, fb + 2);
    mma_bf16_16816(acc[2], fa, fb2);
    for (int n = 0; n < 3; n++)
        for (int e = 0; e < 4; e++)
            d[(g + (e >> 1) * 8) * 24 + n * 8 + 2 * t + (e & 1)] = acc[n][e];
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

// (splits, steps per split) for the job. The blocks (tiles x splits) run
// in waves of blocks_per_sm x SMs; a count that leaves the last wave
// nearly empty costs a whole wave (q+k+v's 48 tiles in 6 splits: 288
// blocks for 264 places took two). So: the count whose waves x (steps per
// split + a block's fixed cost) is least, the fewest splits on a tie. The
// shapes and SM count decide it, never the number of tokens.
void dg_split(const cu_mv_job *j, int blocks_per_sm, int *ks, int *cps)
{
    const int64_t nsteps = j->w[0]->cols / DG_KC;
    const int64_t tiles = dg_tiles(j, nullptr);
    const int64_t places = (int64_t)(blocks_per_sm > 0 ? blocks_per_sm : 1) *
                           (j->sm_count > 0 ? j->sm_count : 16);
    int64_t best_cost = -1;
    *ks = 1;
    *cps = (int)nsteps;
    const int64_t kmax = nsteps < 64 ? nsteps : 64;
    for (int64_t k = 1; k <= kmax; k++) {
        const int64_t per = (nsteps + k - 1) / k, n = (nsteps + per - 1) / per;
        if (n != k)
            continue; // the same split as a smaller k
        const int64_t waves = (tiles * n + places - 1) / places;
        const int64_t cost = waves * (per + DG_BLOCK_COST);
        if (best_cost < 0 || cost < best_cost) {
            best_cost = cost;
            *ks = (int)n;
            *cps = (int)per;
        }
    }
}

// A kernel of this file with its dynamic shared memory and the carveout
// that lets two blocks an SM have it.
template <typename K>
cudaError_t dg_launch_kernel(K kern, size_t smem, int threads, const DGArgs &a, dim3 grid, cudaStream_t stream)
{
    cudaError_t rc = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
    if (rc == cudaSuccess)
        rc = cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                  cudaSharedmemCarveoutMaxShared);
    if (rc != cudaSuccess)
        return rc;
    launch_pdl(kern, grid, dim3((unsigned)threads), smem, stream, a);
    return cudaGetLastError();
}

template <int F, int NT8, int XT, int RW, bool XB, bool TS>
cudaError_t dg_launch_one(const DGArgs &a, dim3 grid, cudaStream_t stream)
{
    return dg_launch_kernel(decode_gemm_kernel<F, NT8, XT, RW, XB, TS>, dg_smem_of<F>(), DG_GROUPS / RW * 32, a,
                            grid, stream);
}

// One size's instance: BF16 has both ways of rounding x (the launch's copy
// where it saves L2 reads, cu_dg_x_bytes); the other formats, to keep the
// instances few, read the copy exactly when the size has DG_QXB_MIN
// tokens or more (they run the Hopper kernel from dg_wg_from's count,
// which reads it).
template <int F, int NT8, int XT, bool TS>
cudaError_t dg_launch_size(const DGArgs &a, dim3 grid, cudaStream_t stream)
{
    if constexpr (F == CW_BF16) {
        return a.xb ? dg_launch_one<F, NT8, XT, 1, true, TS>(a, grid, stream)
                    : dg_launch_one<F, NT8, XT, 1, false, TS>(a, grid, stream);
    } else {
        constexpr bool QXB = XT >= DG_QXB_MIN;
        if ((a.xb != nullptr) != QXB)
            return cudaErrorInvalidValue;
        return dg_launch_one<F, NT8, XT, 1, QXB, TS>(a, grid, stream);
    }
}

// The Hopper kernel's instance of N tokens (it reads x's bf16 copy).
template <int F, int N> cudaError_t dg_launch_wg(const DGArgs &a, dim3 grid, cudaStream_t stream)
{
    if (!a.xb)
        return cudaErrorInvalidValue;
    DGArgs b = a;
    if (tma_map_2d(&b.xmap, TMA_BF16_SWIZZLED, a.xb, (uint64_t)a.cols, (uint64_t)a.n, (uint64_t)a.cols * 2, 64, N) != 0)
        return cudaErrorInvalidValue;
    // The quant bytes' maps, outside grouped launches (whose matrices the
    // blocks find per chunk) and where a split format's scale area is
    // 16-byte aligned (QSrc's boxes).
    b.wtma = F != CW_BF16 && !a.chunks;
    for (int i = 0; i < a.n_seg; i++)
        if (a.seg[i].soff % 16 != 0)
            b.wtma = 0;
    if (b.wtma) {
        const bool glu = a.mode != CU_MV_STORE;
        const uint32_t rows = glu ? DG_TILE / 2 : DG_TILE;
        for (int i = 0; i < a.n_seg; i++) {
            const DGSeg &g = a.seg[i];
            if (tma_map_2d(&b.wmap[i], TMA_BYTES, g.w, g.stride, (uint64_t)g.rows, g.stride, 16, rows) != 0 ||
                (glu && tma_map_2d(&b.wmap2, TMA_BYTES, g.w2, g.stride, (uint64_t)g.rows, g.stride, 16, rows) != 0))
                return cudaErrorInvalidValue;
        }
    }
    return dg_launch_kernel(decode_gemm_wg_kernel<F, N>, WGPlan<F, N>::LAUNCH, DG_THREADS, b, grid, stream);
}

// One format's instances by the most tokens a block has.
template <int F> cudaError_t dg_launch_fmt(const DGArgs &a, dim3 grid, int most, cudaStream_t stream)
{
    if constexpr (MEMRA_HAS_WGMMA && dg_wg_from(F) < DG_QXB_MIN) {
        if (most >= dg_wg_from(F) && most <= 8) {
            if constexpr (dg_wg_from(F) <= 8)
                return dg_launch_wg<F, 8>(a, grid, stream);
        } else if (most >= dg_wg_from(F) && most < DG_QXB_MIN) {
            return dg_launch_wg<F, 16>(a, grid, stream);
        }
    }
    if (most <= 2)
        return dg_launch_size<F, 1, 2, false>(a, grid, stream);
    if (most <= 8)
        return dg_launch_size<F, 1, 8, false>(a, grid, stream);
    if (most <= 16)
        return dg_launch_size<F, 2, 16, false>(a, grid, stream);
    static_assert(DG_QXB_MIN == 17, "the Hopper kernel takes the sizes that read x's copy");
    if constexpr (MEMRA_HAS_WGMMA) {
        return most <= 32 ? dg_launch_wg<F, 32>(a, grid, stream) : dg_launch_wg<F, DG_TOK>(a, grid, stream);
    } else {
        if (most <= 32)
            return dg_launch_size<F, 4, 32, DG_TS_BIG>(a, grid, stream);
        return dg_launch_size<F, 8, DG_TOK, DG_TS_BIG>(a, grid, stream);
    }
}

// The launch for weights of format fmt (dg_format_ok's).
cudaError_t dg_launch_any(int fmt, const DGArgs &a, dim3 grid, int most, cudaStream_t stream)
{
    switch (fmt) {
    case CW_BF16: return dg_launch_fmt<CW_BF16>(a, grid, most, stream);
    case CW_Q8_0: return dg_launch_fmt<CW_Q8_0>(a, grid, most, stream);
    case CW_Q4_0: return dg_launch_fmt<CW_Q4_0>(a, grid, most, stream);
    case CW_Q4_K: return dg_launch_fmt<CW_Q4_K>(a, grid, most, stream);
    case CW_Q5_K: return dg_launch_fmt<CW_Q5_K>(a, grid, most, stream);
    case CW_Q6_K: return dg_launch_fmt<CW_Q6_K>(a, grid, most, stream);
    case CW_NVFP4: return dg_launch_fmt<CW_NVFP4>(a, grid, most, stream);
    case CW_MXFP8: return dg_launch_fmt<CW_MXFP8>(a, grid, most, stream);
    default: return cudaErrorInvalidValue;
    }
}

// The formats the kernel reads: BF16, and those decoded through QStage
// (every quant format the CUDA backend stores). Not F32, nor F16, whose
// weights would lose three bits to bf16 (the mat-vec keeps them f32).
bool dg_format_ok(int f)
{
    switch (f) {
    case CW_BF16: case CW_Q8_0: case CW_Q4_0: case CW_Q4_K: case CW_Q5_K:
    case CW_Q6_K: case CW_NVFP4: case CW_MXFP8:
        return true;
    default:
        return false;
    }
}

} // namespace

// ---- launchers ----

extern "C" int cu_dg_matrix_ok(const cu_matrix *w)
{
    const int64_t cols = w->cols;
    return cols >= DG_KC && cols % DG_KC == 0 && cols / DG_KC <= INT32_MAX &&
           dg_format_ok(w->fmt) && (reinterpret_cast<uintptr_t>(w->data) & 15u) == 0 &&
           w->stride % 16 == 0;
}

extern "C" int cu_dg_job_ok(const cu_mv_job *j)
{
    if (!cu_mv_job_ok(j) || j->n <= 0)
        return 0;
    if ((reinterpret_cast<uintptr_t>(j->x) & 15u) != 0)
        return 0;
    for (int i = 0; i < j->n_w; i++)
        if (!cu_dg_matrix_ok(j->w[i]))
            return 0;
    return 1;
}

extern "C" cudaError_t launch_dg_mma_selftest(const float *a, const float *b, const float *c,
                                              float *d, cudaStream_t stream)
{
    dg_mma_selftest_kernel<<<1, 32, 0, stream>>>(a, b, c, d);
    return cudaGetLastError();
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

extern "C" int cu_dg_x_either(const cu_mv_job *j)
{
    const int most = j->n < DG_TOK ? j->n : DG_TOK;
    return j->w[0]->fmt == CW_BF16 && !(MEMRA_HAS_WGMMA && most >= DG_QXB_MIN);
}


extern "C" size_t cu_dg_x_bytes(const cu_mv_job *j)
{
    const int most = j->n < DG_TOK ? j->n : DG_TOK;
    if (!cu_dg_x_either(j))
        return most >= dg_wg_from(j->w[0]->fmt) ? (size_t)j->n * (size_t)j->w[0]->cols * 2 : 0;
    const double saved = (double)dg_tiles(j, nullptr) * j->n * (double)j->w[0]->cols * 2;
    return saved >= DG_XBF_SAVED_MIN ? (size_t)j->n * (size_t)j->w[0]->cols * 2 : 0;
}

extern "C" cudaError_t launch_decode_gemm(const cu_mv_job *j, int blocks_per_sm, float *partials,
                                          unsigned *counters, void *xbf, cudaStream_t stream)
{
    const void *xcopy = j->xbf ? j->xbf : xbf; // a copy given, or the one made here
    if (!cu_dg_job_ok(j) || (reinterpret_cast<uintptr_t>(xcopy) & 15u) != 0)
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
    a.xb = static_cast<const __nv_bfloat16 *>(xcopy);
    a.glu_bf = glu ? static_cast<__nv_bfloat16 *>(j->out_bf) : nullptr;
    a.n = j->n;
    a.partials = partials;
    a.counters = counters;
    a.n_seg = glu ? 1 : j->n_w;
    for (int i = 0; i < a.n_seg; i++) {
        const cu_matrix *w = j->w[i];
        a.seg[i] = DGSeg{static_cast<const uint8_t *>(w->data),
                         glu ? static_cast<const uint8_t *>(j->w[1]->data) : nullptr, w->stride,
                         w->scale_off, w->rows, j->bias[i], j->out[i], tile0[i]};
    }
    const int64_t blocks = (int64_t)a.tiles * a.ks, groups = (j->n + DG_TOK - 1) / DG_TOK;
    if (blocks > INT32_MAX || groups > 65535)
        return cudaErrorInvalidValue;
    dim3 grid((unsigned)blocks, (unsigned)groups);
    if (xbf && !j->xbf) {
        const size_t n8 = (size_t)j->n * (size_t)a.cols / 8;
        const size_t nb = (n8 + 255) / 256;
        launch_pdl(dg_round_x_kernel, dim3((unsigned)(nb < 1024 ? nb : 1024)), dim3(256), 0, stream,
                   j->x, static_cast<__nv_bfloat16 *>(xbf), n8);
        const cudaError_t rc = cudaGetLastError();
        if (rc != cudaSuccess)
            return rc;
    }
    // 8-token mma columns: the largest group's (the rest are zero).
    return dg_launch_any(j->w[0]->fmt, a, grid, j->n < DG_TOK ? j->n : DG_TOK, stream);
}

extern "C" int cu_dg_grouped_ok(const cu_dg_grouped *g)
{
    const cu_matrix *m = &g->shape;
    return g->pairs > 0 && g->max_chunks > 0 && g->max_chunks <= 65535 && g->tile > 0 &&
           g->tile <= CU_DG_GROUP_ROWS && dg_format_ok(m->fmt) &&
           m->cols >= DG_KC && m->cols % DG_KC == 0 && m->cols / DG_KC <= INT32_MAX &&
           m->stride % 16 == 0 && m->rows > 0 && (g->mode == CU_MV_STORE || g->w2);
}

extern "C" cudaError_t launch_decode_gemm_grouped(const cu_dg_grouped *g, void *xbf,
                                                  cudaStream_t stream)
{
    if (!cu_dg_grouped_ok(g) || !xbf || (reinterpret_cast<uintptr_t>(xbf) & 15u) != 0 ||
        (reinterpret_cast<uintptr_t>(g->x) & 15u) != 0)
        return cudaErrorInvalidValue;
    const bool glu = g->mode != CU_MV_STORE;
    DGArgs a = {};
    a.tiles = (unsigned)((g->shape.rows + (glu ? DG_TILE / 2 : DG_TILE) - 1) /
                         (glu ? DG_TILE / 2 : DG_TILE));
    a.ks = 1;
    a.cps = (int)(g->shape.cols / DG_KC);
    a.mode = g->mode;
    a.cols = g->shape.cols;
    a.x = g->x;
    a.n = g->pairs;
    a.n_seg = 1;
    a.seg[0] = DGSeg{nullptr, nullptr, g->shape.stride, g->shape.scale_off, g->shape.rows,
                     nullptr, g->out, 0};
    a.chunks = g->chunks;
    a.n_chunks = g->n_chunks;
    a.order = g->order;
    a.wtab = g->w;
    a.wtab2 = g->w2;
    // x rounded to bf16 once for every chunk's block where the kernel's
    // size reads a copy (the quant formats from dg_wg_from rows; BF16
    // reads one at any size): the same bytes as the blocks' own rounding
    const int most = g->tile;
    const bool copy = g->shape.fmt == CW_BF16 || most >= dg_wg_from(g->shape.fmt);
    a.xb = copy ? static_cast<const __nv_bfloat16 *>(xbf) : nullptr;
    if (copy) {
        const size_t n8 = (size_t)g->pairs * (size_t)a.cols / 8;
        const size_t nb = (n8 + 255) / 256;
        launch_pdl(dg_round_x_kernel, dim3((unsigned)(nb < 1024 ? nb : 1024)), dim3(256), 0,
                   stream, g->x, static_cast<__nv_bfloat16 *>(xbf), n8);
        cudaError_t rc = cudaGetLastError();
        if (rc != cudaSuccess)
            return rc;
    }
    return dg_launch_any(g->shape.fmt, a, dim3(a.tiles, (unsigned)g->max_chunks), most, stream);
}
