// A CPU emulation of the CUDA execution model, for running the real
// kernels/*.cu on a machine without a GPU (tests/gpu/emulate.sh). Force-
// included (g++ -include) into each kernel file, which the script first
// rewrites in two mechanical ways: `k<<<g, b, s, st>>>(args)` becomes
// `emu::launch(k, g, b, s, st)(args)`, and `extern __shared__ T x[];`
// becomes `T *x = emu::dyn_smem<T>();`.
//
// Each CUDA thread is a fiber on its own stack; a block's fibers run on
// one OS thread, switching at __syncthreads and at warp shuffles, which
// are real barriers (a divergent barrier or a shuffle over exited lanes
// stops the run with a message). Between two barriers a block's threads
// run one by one, in ascending order in one round and descending in the
// next, so shared data rewritten before every thread has read it (a
// missing barrier) shows. Shared memory is per block (static __shared__
// arrays become function statics, which is the same thing when blocks run
// one after another); shared-memory atomics are plain read-modify-writes.
// The _rn intrinsics are the plain IEEE operations they are;
// transcendental functions are the host's (they differ from the device's
// in the last bits). 16-byte loads check their alignment. Everything a
// kernel does is thus checked except timing, concurrency between blocks
// and the memory model.
#ifndef MEMRA_TESTS_EMU_CUDA_H
#define MEMRA_TESTS_EMU_CUDA_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __noinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#undef __grid_constant__
#define __grid_constant__

namespace emu {

extern uint3 g_block_idx;
extern dim3 g_block_dim, g_grid_dim;
uint3 &thread_idx();
void sync_block();
float shfl_xor(float v, int off);
float shfl(float v, int src);
unsigned ballot(bool pred); /* every lane's pred, bit i lane i's */
void *dyn_smem_ptr();
void check_aligned(const void *p, size_t align, const char *what);
typedef void (*body_fn)(void *);
/* Runs kernel k's grid; k names it for its shared memory limit. */
void run_grid(const void *k, dim3 grid, dim3 block, size_t smem, body_fn fn, void *ctx);
/* A static __shared__ object of the running kernel (emulate.sh adds the
 * call after each declaration): its bytes count against the block's
 * limit with the dynamic ones, as on the device. */
void note_shared(const void *p, size_t bytes);
/* Whether the stream belongs to the calling thread's current device; if
 * not, the launch fails (cudaGetLastError says so) and does not run. */
bool stream_ok(cudaStream_t s);
/* Stream capture: while a capture runs, launches and copies are recorded
 * into the graph being made instead of run (cudaGraphLaunch runs them). */
bool capturing();
void record(std::function<void()> op);

template <class T> T *dyn_smem() { return static_cast<T *>(dyn_smem_ptr()); }

[[noreturn]] void die(const char *what);
/* A warp barrier (__syncwarp). */
void warp_sync();
void spin();
int lane_id();
/* One warp's record of its current collective (WMMA) operation. */
struct warp_slot {
    unsigned long long gen;
    const void *p;
    unsigned ldm;
    int layout;
    float a[256], b[256], c[256], d[256];
};
/* The warp barrier a WMMA call begins with; *first: this lane is the
 * first of its warp to run the call (it fills the slot, the others check
 * their arguments against it). */
warp_slot *warp_collective(bool *first);

template <class... P> struct launcher {
    void (*k)(P...);
    dim3 grid, block;
    size_t smem;
    cudaStream_t stream;
    template <class... A> void operator()(A &&...a) const
    {
        if (!stream_ok(stream))
            return;
        if (capturing()) {
            /* The arguments as they are now, kept with the graph. */
            auto args = std::make_shared<std::tuple<P...>>(static_cast<P>(a)...);
            void (*kk)(P...) = k;
            dim3 g = grid, b = block;
            size_t sm = smem;
            record([kk, args, g, b, sm]() {
                struct call {
                    void (*k)(P...);
                    std::tuple<P...> *args;
                } c{kk, args.get()};
                run_grid(reinterpret_cast<const void *>(kk), g, b, sm, [](void *p) {
                    call *cc = static_cast<call *>(p);
                    std::apply(cc->k, *cc->args);
                }, &c);
            });
            return;
        }
        std::tuple<P...> args(static_cast<P>(a)...);
        struct call {
            void (*k)(P...);
            std::tuple<P...> *args;
        } c{k, &args};
        run_grid(reinterpret_cast<const void *>(k), grid, block, smem, [](void *p) {
            call *cc = static_cast<call *>(p);
            std::apply(cc->k, *cc->args);
        }, &c);
    }
};

template <class... P>
launcher<P...> launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem = 0,
                      cudaStream_t stream = 0)
{
    return launcher<P...>{k, grid, block, smem, stream};
}

} // namespace emu

#define threadIdx (emu::thread_idx())
#define blockIdx (emu::g_block_idx)
#define blockDim (emu::g_block_dim)
#define gridDim (emu::g_grid_dim)

inline void __syncthreads() { emu::sync_block(); }
inline float __shfl_xor_sync(unsigned, float v, int off) { return emu::shfl_xor(v, off); }
inline float __shfl_sync(unsigned, float v, int src) { return emu::shfl(v, src); }
/* An int's bits through the float exchange (copied, never computed on). */
inline int __shfl_sync(unsigned, int v, int src)
{
    float f;
    memcpy(&f, &v, 4);
    f = emu::shfl(f, src);
    memcpy(&v, &f, 4);
    return v;
}
inline unsigned __ballot_sync(unsigned, bool pred) { return emu::ballot(pred); }
inline int __popc(unsigned v) { return __builtin_popcount(v); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
/* The device's ex2.approx of x log2(e): the same form, to within its few ulps. */
inline float __expf(float x) { return exp2f(__fmul_rn(x, 1.4426950408889634f)); }
/* Byte select (the modes without sign replication). */
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++)
        r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
inline float __uint_as_float(unsigned u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* Fibers of a block switch only at barriers and shuffles, so a shared-
 * memory atomic is a plain read-modify-write here. */
inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    unsigned o = *p;
    *p = o + v;
    return o;
}
inline int atomicMin(int *p, int v)
{
    int o = *p;
    *p = v < o ? v : o;
    return o;
}
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v)
{
    unsigned long long o = *p;
    *p = o + v;
    return o;
}
template <class T> inline T __ldg(const T *p)
{
    emu::check_aligned(p, sizeof(T) >= 16 ? 16 : sizeof(T), "__ldg");
    return *p;
}
/* Blocks run one after another, so every write of an earlier block is
 * seen: a fence has nothing to order, and an L1-bypassing load is a load. */
inline void __threadfence() {}
template <class T> inline T __ldcg(const T *p)
{
    emu::check_aligned(p, sizeof(T) >= 16 ? 16 : sizeof(T), "__ldcg");
    return *p;
}
/* nvcc's C++ overload taking the kernel itself. */
template <class F> inline cudaError_t cudaFuncSetAttribute(F *f, cudaFuncAttribute a, int v)
{
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(f), a, v);
}
using std::max;
using std::min;

/* Warp barrier: every lane of the warp must reach it (a partial mask is
 * not emulated). */
inline void __syncwarp(unsigned mask = 0xffffffffu)
{
    if (mask != 0xffffffffu)
        emu::die("__syncwarp with a partial mask is not emulated");
    emu::warp_sync();
}

/* ---- WMMA (nvcuda::wmma), 16x16x16 tiles ----
 *
 * A fragment here holds its whole tile in every lane, as f32 values (a
 * bf16 or f16 element converts exactly), row-major over the tile whatever
 * the memory layout it was loaded from. x[] / num_elements are that whole
 * tile (256 elements): an element-wise operation between fragments of one
 * type, which the device allows because they share the unspecified
 * element-to-lane layout, is emulated exactly; code that assumed which
 * element a lane holds would compute something else here than on the
 * device, which the kernel check's comparison with the CPU would show. load / store / mma are warp-collective as on the device (each
 * begins with a warp barrier; a lane that skips one stops the run), and
 * every lane must pass the same pointer and stride (checked) with the
 * device's constraints: a 256-bit aligned pointer, ldm a multiple of 16
 * bytes. store_matrix_sync writes each element from one lane only (element
 * e from lane e % 32, an arbitrary ownership), so a lane reading what
 * another lane stored before a __syncwarp reads stale data here, as it
 * may on the device. mma_sync: bf16 and f16 products are exact in f32;
 * they are summed in f32 in ascending k, then added to c (the device's
 * order inside one mma is unspecified; memra's bounds assume none). The
 * first lane computes it, the others check that their fragments are the
 * same bits (lanes that loaded different data: a missing __syncwarp). */
namespace nvcuda {
namespace wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulation has 16x16x16 WMMA tiles only");
    static constexpr int num_elements = 256;
    float x[256];
};

inline float emu_elem(const __nv_bfloat16 *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return __uint_as_float((unsigned)h << 16);
}
inline float emu_elem(const __half *p) { return __half2float(*p); }
inline float emu_elem(const float *p) { return *p; }
inline float emu_round(float x, const __nv_bfloat16 *) { return __bfloat162float(__float2bfloat16_rn(x)); }
inline float emu_round(float x, const __half *) { return __half2float(__float2half_rn(x)); }
inline float emu_round(float x, const float *) { return x; }

inline emu::warp_slot *emu_enter(const void *p, unsigned ldm, int layout, size_t elem,
                                 const char *what)
{
    bool first;
    emu::warp_slot *s = emu::warp_collective(&first);
    char msg[200];
    if ((reinterpret_cast<uintptr_t>(p) & 31) != 0 || (ldm * elem) % 16 != 0) {
        snprintf(msg, sizeof msg, "%s: pointer %p / ldm %u: the pointer must be 256-bit aligned "
                 "and ldm a multiple of 16 bytes", what, p, ldm);
        emu::die(msg);
    }
    if (first) {
        s->p = p;
        s->ldm = ldm;
        s->layout = layout;
    } else if (s->p != p || s->ldm != ldm || s->layout != layout) {
        snprintf(msg, sizeof msg, "%s: lane %d passes %p / ldm %u, another lane %p / ldm %u", what,
                 emu::lane_id(), p, ldm, s->p, s->ldm);
        emu::die(msg);
    }
    return s;
}

template <class Use, int M, int N, int K, class T, class L, class V>
void fill_fragment(fragment<Use, M, N, K, T, L> &f, const V &v)
{
    const float x = emu_round((float)v, static_cast<const T *>(nullptr));
    for (int i = 0; i < 256; i++)
        f.x[i] = x;
}

template <class Use, class T, class L>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, L> &f, const T *p, unsigned ldm)
{
    const int col = std::is_same<L, col_major>::value;
    emu_enter(p, ldm, col, sizeof(T), "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = emu_elem(col ? p + (size_t)c * ldm + r : p + (size_t)r * ldm + c);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p,
                             unsigned ldm, layout_t l)
{
    const int col = l == mem_col_major;
    emu_enter(p, ldm, col, 4, "load_matrix_sync");
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++)
            f.x[r * 16 + c] = col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c];
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f,
                              unsigned ldm, layout_t l)
{
    const int col = l == mem_col_major;
    emu_enter(p, ldm, col, 4, "store_matrix_sync");
    for (int e = emu::lane_id(); e < 256; e += 32) {
        const int r = e / 16, c = e % 16;
        (col ? p[(size_t)c * ldm + r] : p[(size_t)r * ldm + c]) = f.x[e];
    }
}

template <class T, class LA, class LB>
void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
              const fragment<matrix_a, 16, 16, 16, T, LA> &a,
              const fragment<matrix_b, 16, 16, 16, T, LB> &b,
              const fragment<accumulator, 16, 16, 16, float> &c)
{
    bool first;
    emu::warp_slot *s = emu::warp_collective(&first);
    if (!first) {
        if (memcmp(s->a, a.x, sizeof a.x) || memcmp(s->b, b.x, sizeof b.x) ||
            memcmp(s->c, c.x, sizeof c.x)) {
            char msg[160];
            snprintf(msg, sizeof msg, "mma_sync: lane %d holds other fragments than the warp's "
                     "first lane (a load raced a store: a missing __syncwarp?)", emu::lane_id());
            emu::die(msg);
        }
        memcpy(d.x, s->d, sizeof d.x);
        return;
    }
    memcpy(s->a, a.x, sizeof a.x);
    memcpy(s->b, b.x, sizeof b.x);
    memcpy(s->c, c.x, sizeof c.x);
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float acc = 0.0f;
            for (int k = 0; k < 16; k++)
                acc += s->a[i * 16 + k] * s->b[k * 16 + j];
            s->d[i * 16 + j] = acc + s->c[i * 16 + j];
        }
    memcpy(d.x, s->d, sizeof d.x);
}

} // namespace wmma
} // namespace nvcuda

/* ---- mma.sync / ldmatrix (kernels/mma.cuh), warp-collective ----
 *
 * kernels/mma.cuh wraps `ldmatrix.sync.aligned.m8n8.{x2,x4}.shared.b16`
 * and `mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32` in inline PTX
 * on the device; under the emulation (MEMRA_CUDA_EMU) it calls these,
 * which move the values between lanes with the fragment layouts the PTX
 * ISA documents, so a kernel that puts an element in the wrong lane or
 * register computes something else here as on the device. With g = lane /
 * 4, t = lane % 4, and the element of lower index in a register's low 16
 * bits:
 *   ldmatrix: lanes 8i..8i+7 give the addresses of matrix i's eight
 *     16-byte rows; register i of lane l holds row l / 4 of matrix i,
 *     elements 2 (l % 4) and 2 (l % 4) + 1 (.trans: element l / 4 of rows
 *     2 (l % 4) and 2 (l % 4) + 1);
 *   mma A (16 x 16, row): a[0] (row g, k 2t, 2t+1), a[1] (g + 8, 2t),
 *     a[2] (g, 2t + 8), a[3] (g + 8, 2t + 8);
 *   mma B (16 x 8, col): b[0] (k 2t, 2t+1, column g), b[1] (k 2t + 8);
 *   mma C/D (16 x 8, f32): d[0], d[1] (row g, columns 2t, 2t+1), d[2],
 *     d[3] (row g + 8).
 * Each call begins with a warp barrier (every lane must reach it) and ends
 * with one (nobody's next call overwrites what another lane still reads).
 * mma: the bf16 products are exact in f32; they are summed in f32 in
 * ascending k, then added to c, as the WMMA emulation does. */
#define MEMRA_CUDA_EMU 1
namespace emu {

struct mma_lane {
    const void *addr;
    unsigned a[4], b[2];
    float c[4];
};
inline mma_lane g_mma_lane[1024];

inline float mma_bf16_elem(unsigned reg, int hi)
{
    return __uint_as_float((hi ? reg >> 16 : reg & 0xFFFFu) << 16);
}

/* The registers of ldmatrix .xN (N = 2 or 4) for this lane: p is this
 * lane's row address (16-byte aligned; for .x2 lanes 16-31's are unused). */
inline void ldmatrix(unsigned *r, int n, const void *p)
{
    const int me = (int)thread_idx().x, w0 = me & ~31, lane = me & 31;
    g_mma_lane[me].addr = p;
    warp_sync();
    for (int i = 0; i < n; i++) {
        const void *row = g_mma_lane[w0 + i * 8 + lane / 4].addr;
        check_aligned(row, 16, "ldmatrix row");
        memcpy(&r[i], static_cast<const unsigned char *>(row) + 4 * (lane % 4), 4);
    }
    warp_sync();
}

/* ldmatrix .trans: register i of this lane holds element lane / 4 of
 * rows 2 (lane % 4) and 2 (lane % 4) + 1 of matrix i. */
inline void ldmatrix_trans(unsigned *r, int n, const void *p)
{
    const int me = (int)thread_idx().x, w0 = me & ~31, lane = me & 31;
    g_mma_lane[me].addr = p;
    warp_sync();
    for (int i = 0; i < n; i++) {
        uint16_t h[2];
        for (int k = 0; k < 2; k++) {
            const void *row = g_mma_lane[w0 + i * 8 + 2 * (lane % 4) + k].addr;
            check_aligned(row, 16, "ldmatrix row");
            memcpy(&h[k], static_cast<const unsigned char *>(row) + 2 * (lane / 4), 2);
        }
        r[i] = (unsigned)h[0] | (unsigned)h[1] << 16;
    }
    warp_sync();
}

/* d = A B + d for this lane's fragments. */
inline void mma_bf16_16816(float *d, const unsigned *a, const unsigned *b)
{
    const int me = (int)thread_idx().x, w0 = me & ~31, lane = me & 31;
    mma_lane &L = g_mma_lane[me];
    memcpy(L.a, a, sizeof L.a);
    memcpy(L.b, b, sizeof L.b);
    memcpy(L.c, d, sizeof L.c);
    warp_sync();
    float out[4];
    for (int e = 0; e < 4; e++) {
        const int row = lane / 4 + (e >= 2 ? 8 : 0), col = 2 * (lane % 4) + (e & 1);
        float acc = 0.0f;
        for (int k = 0; k < 16; k++) {
            const int kr = k % 8;
            const mma_lane &la = g_mma_lane[w0 + (row % 8) * 4 + kr / 2];
            const mma_lane &lb = g_mma_lane[w0 + col * 4 + kr / 2];
            const float av = mma_bf16_elem(la.a[(row >= 8 ? 1 : 0) + (k >= 8 ? 2 : 0)], k & 1);
            const float bv = mma_bf16_elem(lb.b[k >= 8 ? 1 : 0], k & 1);
            acc += av * bv;
        }
        out[e] = acc + L.c[e];
    }
    warp_sync();
    memcpy(d, out, sizeof out);
}

} // namespace emu

#endif
