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

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <tuple>
#include <utility>

#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)

namespace emu {

extern uint3 g_block_idx;
extern dim3 g_block_dim, g_grid_dim;
uint3 &thread_idx();
void sync_block();
float shfl_xor(float v, int off);
void *dyn_smem_ptr();
void check_aligned(const void *p, size_t align, const char *what);
typedef void (*body_fn)(void *);
void run_grid(dim3 grid, dim3 block, size_t smem, body_fn fn, void *ctx);
/* Whether the stream belongs to the calling thread's current device; if
 * not, the launch fails (cudaGetLastError says so) and does not run. */
bool stream_ok(cudaStream_t s);
/* Stream capture: while a capture runs, launches and copies are recorded
 * into the graph being made instead of run (cudaGraphLaunch runs them). */
bool capturing();
void record(std::function<void()> op);

template <class T> T *dyn_smem() { return static_cast<T *>(dyn_smem_ptr()); }

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
                run_grid(g, b, sm, [](void *p) {
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
        run_grid(grid, block, smem, [](void *p) {
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
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fsqrt_rn(float a) { return sqrtf(a); }
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
/* nvcc's C++ overload taking the kernel itself. */
template <class F> inline cudaError_t cudaFuncSetAttribute(F *f, cudaFuncAttribute a, int v)
{
    return cudaFuncSetAttribute(reinterpret_cast<const void *>(f), a, v);
}
using std::max;
using std::min;

#endif
