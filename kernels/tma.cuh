// The tensor memory accelerator (Hopper, sm_90a): a box of a 2-D tensor
// copied from global to shared memory by one instruction of one thread,
// bf16 in the 128-byte swizzle wgmma reads (kernels/wgmma.cuh) or bytes
// as they are, its completion counted in bytes on an mbarrier (C++ only).
//
// Why: a decode GEMM block at 64 tokens copied x's step by 512 cp.async of
// 16 bytes, two a thread, and its quant bytes by more, each with its
// address arithmetic: about a third of the instructions of a quant step,
// for bytes no lane computes with on the way
// (docs/decisions/0034-decode-gemm-copies-by-the-tma.md). A tensor map
// (the tensor's address, sizes and pitch, the box, the swizzle) is encoded
// on the host and passed in the kernel's parameters; the copy zero-fills a
// box's rows and columns past the tensor's end.
//
// Use: tma_map_2d() on the host; in the kernel one thread inits each
// slot's mbarrier with the arrivals a phase has (mbar_init, then a block
// barrier), and per phase each arriving thread calls mbar_expect() with
// the bytes of its boxes and tma_load_2d() for each; the threads that
// read the boxes call mbar_wait() with the slot's phase (0 at its first
// use, flipping each use).
//
// Under the CPU emulation (MEMRA_CUDA_EMU) the map is this file's own
// struct, the copy is done at once, and an mbarrier counts arrivals and
// bytes as the device's does: a thread waiting for a phase lets the others
// run, and a wait that no thread's copy ever ends stops the run (a
// deadlock).
#ifndef MEMRA_KERNELS_TMA_CUH
#define MEMRA_KERNELS_TMA_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#include "kernels/wgmma.cuh"

#if !defined(MEMRA_CUDA_EMU)
#include <cuda.h>
#include <cudaTypedefs.h>
typedef CUtensorMap cu_tmap;
#else
struct alignas(64) cu_tmap {
    const void *base;
    uint64_t cols, rows, pitch; // elements, rows, bytes a row
    uint32_t box_cols, box_rows, elem; // elem: bytes an element
    bool swizzle;
};
#endif

// What a map's elements are and how its boxes land in shared memory:
// bf16 in the 128-byte swizzle (boxes 64 columns wide: wgmma's operand
// tiles), or bytes as they are (box_cols bytes a row, a multiple of 16,
// rows one after another).
enum tma_kind { TMA_BF16_SWIZZLED, TMA_BYTES };

// A map of rows x cols elements at base (pitch bytes a row, a multiple of
// 16), boxes of box_rows x box_cols. 0 on success.
static inline int tma_map_2d(cu_tmap *m, tma_kind kind, const void *base, uint64_t cols, uint64_t rows,
                             uint64_t pitch, uint32_t box_cols, uint32_t box_rows)
{
    const uint64_t elem = kind == TMA_BF16_SWIZZLED ? 2 : 1;
    if (!base || rows < 1 || pitch % 16 != 0 || cols * elem > pitch || box_rows < 1 || box_rows > 256 ||
        (kind == TMA_BF16_SWIZZLED ? box_cols != 64 : box_cols % 16 != 0 || box_cols > 256) ||
        cols < box_cols || (reinterpret_cast<uintptr_t>(base) & 15u) != 0)
        return -1;
#if defined(MEMRA_CUDA_EMU)
    *m = cu_tmap{base, cols, rows, pitch, box_cols, box_rows, (uint32_t)elem, kind == TMA_BF16_SWIZZLED};
    return 0;
#else
    // The driver's encoder, found once through the runtime (no link
    // against libcuda).
    static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
    if (!encode) {
        void *fn = nullptr;
        cudaDriverEntryPointQueryResult q;
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !fn)
            return -1;
        encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
    }
    const cuuint64_t dim[2] = {cols, rows}, stride[1] = {pitch};
    const cuuint32_t box[2] = {box_cols, box_rows}, estride[2] = {1, 1};
    const bool sw = kind == TMA_BF16_SWIZZLED;
    return encode(m, sw ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void *>(base),
                  dim, stride, box, estride, CU_TENSOR_MAP_INTERLEAVE_NONE,
                  sw ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS
               ? 0
               : -1;
#endif
}

#if defined(MEMRA_CUDA_EMU)
namespace emu {
void tma_fail(const char *what);
// The emulation's mbarrier: phases completed, arrivals expected and made
// in this phase, bytes announced and not yet arrived.
struct mbar {
    uint16_t done;
    uint8_t count, arrived;
    int32_t tx;
};
static_assert(sizeof(mbar) == 8, "an mbarrier is 8 bytes");
inline mbar *mbar_of(uint64_t *bar) { return reinterpret_cast<mbar *>(bar); }
inline void mbar_settle(mbar *b)
{
    if (b->tx < 0)
        tma_fail("mbarrier: more bytes arrived than announced");
    if (b->arrived == b->count && b->tx == 0) {
        b->done++;
        b->arrived = 0;
    }
}
} // namespace emu
#endif

// The mbarrier of one slot expects `arrivals` arrivals a phase (the
// copying threads' mbar_expect calls).
WG_DEV void mbar_init(uint64_t *bar, unsigned arrivals)
{
#if WG_ASM
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(b), "r"(arrivals) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
#elif defined(MEMRA_CUDA_EMU)
    *emu::mbar_of(bar) = emu::mbar{0, (uint8_t)arrivals, 0, 0};
#else
    (void)bar;
    (void)arrivals;
#endif
}

// The copying thread's arrival, announcing the bytes its copies bring.
WG_DEV void mbar_expect(uint64_t *bar, unsigned bytes)
{
#if WG_ASM
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(b), "r"(bytes) : "memory");
#elif defined(MEMRA_CUDA_EMU)
    emu::mbar *m = emu::mbar_of(bar);
    if (++m->arrived > m->count)
        emu::tma_fail("mbarrier: more arrivals than its count");
    m->tx += (int32_t)bytes;
    emu::mbar_settle(m);
#else
    (void)bar;
    (void)bytes;
#endif
}

// Until the phase of parity `phase` completed (its bytes arrived).
WG_DEV void mbar_wait(uint64_t *bar, unsigned phase)
{
#if WG_ASM
    const unsigned b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("{\n.reg .pred p;\nWAIT:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT;\n}\n" ::"r"(b),
                 "r"(phase)
                 : "memory");
#elif defined(MEMRA_CUDA_EMU)
    // Phase k (parity k % 2) is complete once k + 1 phases are; until
    // then the block's other threads run (the copying one among them).
    for (;;) {
        const unsigned done = emu::mbar_of(bar)->done;
        if (done > 0 && ((done - 1) & 1u) == (phase & 1u))
            break;
        emu::spin();
    }
#else
    (void)bar;
    (void)phase;
#endif
}

// The map's descriptor fetched ahead of the first copy (its latency
// hidden under whatever the thread waits for next).
WG_DEV void tma_prefetch(const cu_tmap *m)
{
#if WG_ASM
    asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(m)) : "memory");
#else
    (void)m;
#endif
}

// The box whose first column is x and first row y into dst (1024-byte
// aligned for the swizzle, else 128), its bytes counted on bar.
WG_DEV void tma_load_2d(void *dst, const cu_tmap *m, int x, int y, uint64_t *bar)
{
#if WG_ASM
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst), b = (unsigned)__cvta_generic_to_shared(bar);
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], "
                 "[%2];\n" ::"r"(d),
                 "l"(reinterpret_cast<uint64_t>(m)), "r"(b), "r"(x), "r"(y)
                 : "memory");
#elif defined(MEMRA_CUDA_EMU)
    emu::check_aligned(dst, m->swizzle ? 1024 : 128, "tma_load_2d destination");
    if (x < 0 || y < 0 || (x * m->elem) % 16 != 0)
        emu::tma_fail("tma_load_2d: a box outside the tensor's start or not 16-byte aligned");
    unsigned char *o = static_cast<unsigned char *>(dst);
    const uint32_t row_bytes = m->box_cols * m->elem;
    for (uint32_t r = 0; r < m->box_rows; r++)
        for (uint32_t b = 0; b < row_bytes; b++) {
            const uint64_t row = (uint64_t)y + r, col = (uint64_t)x + b / m->elem;
            const uint32_t at = m->swizzle ? (uint32_t)wg_chunk((int)r, (int)(b / 16)) + b % 16 : r * row_bytes + b;
            o[at] = row < m->rows && col < m->cols
                        ? static_cast<const unsigned char *>(m->base)[row * m->pitch + (uint64_t)x * m->elem + b]
                        : 0;
        }
    emu::mbar *b = emu::mbar_of(bar);
    b->tx -= (int32_t)(row_bytes * m->box_rows);
    emu::mbar_settle(b);
#else
    (void)dst;
    (void)m;
    (void)x;
    (void)y;
    (void)bar;
#endif
}

#endif
