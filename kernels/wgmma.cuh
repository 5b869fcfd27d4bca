// Warpgroup MMA (Hopper, sm_90a): wgmma.mma_async with both operands in
// shared memory, bf16 in, f32 accumulators (C++ only).
//
// Why: mma.sync moves every operand through registers (ldmatrix per warp,
// per 16 x 8 x 16 product), so a warp's instructions and their latencies
// bound a tile of 64 tokens (docs/decisions/0033-decode-gemm-wgmma.md).
// One wgmma takes a warpgroup's 64 rows x N columns x 16 k from shared
// memory by descriptor and runs asynchronously: the warps go on (decoding
// the next step's weights) until they wait for it.
//
// Layout: both operands K-major in the 128-byte swizzle: a tile of rows of
// 64 bf16 (128 bytes), 1024-byte aligned; the 16-byte chunk c of row r
// lies at r * 128 + ((c ^ (r % 8)) * 16). wg_chunk() gives that offset.
// The k-th slice of 16 columns is the tile's descriptor moved by 32 k
// bytes (the hardware swizzles the final address, so a start inside the
// 128-byte row is the slice).
//
// Accumulators (PTX ISA, "Register fragment of wgmma .m64nNk16 D"): warp
// w of the warpgroup, lane l: d[i] is row 16 w + l / 4 + 8 ((i / 2) % 2),
// column 8 (i / 4) + 2 (l % 4) + (i % 2), for i < N / 2.
//
// Order of use per step: the generic proxy's writes of the operands
// (st.shared, cp.async) complete, wg_fence_proxy() by each writer, a block
// barrier; then wg_arrive(), the wgmmas, wg_commit(); wg_wait<n>() before
// the accumulators are read or the operands overwritten.
//
// Under the CPU emulation (MEMRA_CUDA_EMU) wg_mma reads the swizzled tiles
// itself and is synchronous; each product is summed in f32 in ascending k,
// then added to the accumulator, as the mma.sync emulation does.
#ifndef MEMRA_KERNELS_WGMMA_CUH
#define MEMRA_KERNELS_WGMMA_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#define WG_DEV __device__ __forceinline__

// Whether this build launches kernels that use them (the Makefile's
// MEMRA_SM90A for an sm_90a target; always under the emulation), and
// whether this compilation pass has the instructions (nvcc's sm_90a pass;
// its compute_90 PTX pass has not, and compiles the calls to nothing).
#if defined(MEMRA_CUDA_EMU) || (defined(MEMRA_SM90A) && MEMRA_SM90A)
#define MEMRA_HAS_WGMMA 1
#else
#define MEMRA_HAS_WGMMA 0
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL) && !defined(MEMRA_CUDA_EMU)
#define WG_ASM 1
#else
#define WG_ASM 0
#endif

// Byte offset of 16-byte chunk c (0..7) of row r in a swizzled tile.
WG_DEV constexpr int wg_chunk(int r, int c) { return r * 128 + ((c ^ (r & 7)) << 4); }

// A shared-memory operand for wg_mma: on the device its descriptor (K-major,
// 128-byte swizzle: start >> 4, leading offset 1 (unused by this layout),
// 1024 bytes between 8-row groups, swizzle mode 1); under the emulation
// the address itself. wg_at() moves one by a byte offset (a multiple of
// 16; shared addresses fit the start field, so no carry leaves it).
typedef uint64_t wg_desc_t;
WG_DEV wg_desc_t wg_desc(const void *p)
{
#if WG_ASM
    const uint64_t a = (unsigned)__cvta_generic_to_shared(p);
    return ((a & 0x3FFFFu) >> 4) | (uint64_t)1 << 16 | (uint64_t)(1024 >> 4) << 32 | (uint64_t)1 << 62;
#else
    return (wg_desc_t) reinterpret_cast<uintptr_t>(p);
#endif
}
WG_DEV wg_desc_t wg_at(wg_desc_t d, unsigned bytes)
{
#if WG_ASM
    return d + (bytes >> 4);
#else
    return d + bytes;
#endif
}

WG_DEV void wg_fence_proxy()
{
#if WG_ASM
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

WG_DEV void wg_arrive()
{
#if WG_ASM
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

WG_DEV void wg_commit()
{
#if WG_ASM
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

// Until at most N of this warpgroup's committed groups are in flight.
template <int N> WG_DEV void wg_wait()
{
#if WG_ASM
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

// Keeps the compiler from moving the accumulators' uses across a wait.
template <int R> WG_DEV void wg_hold(float (&d)[R])
{
#if WG_ASM
#pragma unroll
    for (int i = 0; i < R; i++)
        asm volatile("" : "+f"(d[i])::"memory");
#else
    (void)d;
#endif
}

#if defined(MEMRA_CUDA_EMU)
namespace emu {
// Element (r, k) of a swizzled tile whose slice starts at p (the tile's
// 1024-byte-aligned address + 32 bytes per slice of 16 columns).
inline float wg_elem(const void *p, int r, int k)
{
    const uintptr_t lin = reinterpret_cast<uintptr_t>(p) + (uintptr_t)(r / 8) * 1024 + (uintptr_t)(r % 8) * 128 +
                          (uintptr_t)(k / 8) * 16 + (uintptr_t)(k % 8) * 2;
    const uintptr_t sw = lin ^ (((lin >> 7) & 7u) << 4);
    uint16_t h;
    memcpy(&h, reinterpret_cast<const void *>(sw), 2);
    return __uint_as_float((unsigned)h << 16);
}
inline void wg_mma(float *d, int n, uint64_t da, uint64_t db)
{
    const void *a = reinterpret_cast<const void *>((uintptr_t)da), *b = reinterpret_cast<const void *>((uintptr_t)db);
    const int t = (int)thread_idx().x, w = (t >> 5) & 3, l = t & 31;
    check_aligned(reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(a) & ~(uintptr_t)127), 1024,
                  "wgmma operand A");
    check_aligned(reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(b) & ~(uintptr_t)127), 1024,
                  "wgmma operand B");
    for (int i = 0; i < n / 2; i++) {
        const int row = 16 * w + l / 4 + 8 * ((i / 2) % 2), col = 8 * (i / 4) + 2 * (l % 4) + (i % 2);
        float acc = 0.0f;
        for (int k = 0; k < 16; k++)
            acc += wg_elem(a, row, k) * wg_elem(b, col, k);
        d[i] = acc + d[i];
    }
}
} // namespace emu
#endif

// d += A B^T over one slice of 16 columns: A the warpgroup's 64 rows at a,
// B N rows at b (both swizzled tiles, at the slice's address).
template <int N> WG_DEV void wg_mma(float (&d)[N / 2], wg_desc_t a, wg_desc_t b);

#if defined(MEMRA_CUDA_EMU)
template <int N> WG_DEV void wg_mma(float (&d)[N / 2], wg_desc_t a, wg_desc_t b) { emu::wg_mma(d, N, a, b); }
#elif !WG_ASM
template <int N> WG_DEV void wg_mma(float (&)[N / 2], wg_desc_t, wg_desc_t) {}
#else
template <> WG_DEV void wg_mma<64>(float (&d)[32], wg_desc_t a, wg_desc_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
                 "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
                 "%32, %33, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
                   "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
                   "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
                   "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
                   "+f"(d[31])
                 : "l"(a), "l"(b), "r"(1));
}
template <> WG_DEV void wg_mma<32>(float (&d)[16], wg_desc_t a, wg_desc_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
                 "%16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
                   "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "l"(a), "l"(b), "r"(1));
}
template <> WG_DEV void wg_mma<16>(float (&d)[8], wg_desc_t a, wg_desc_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3, %4, %5, %6, %7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                   "+f"(d[7])
                 : "l"(a), "l"(b), "r"(1));
}
template <> WG_DEV void wg_mma<8>(float (&d)[4], wg_desc_t a, wg_desc_t b)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
                 "{%0, %1, %2, %3}, %4, %5, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "l"(a), "l"(b), "r"(1));
}
#endif

#endif
