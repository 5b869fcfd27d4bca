// The fiber scheduler behind tests/gpu/emu/emu_cuda.h, and a stand-in for
// the parts of the CUDA runtime memra uses (linked instead of cudart):
// device memory is host memory (fresh allocations filled with 0xFF, NaN
// as floats, so reading memory nothing wrote shows), copies are memcpy,
// streams and events are synchronous, MEMRA_EMU_DEVICES devices (default
// one) that share the host's memory. Tests only.
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <functional>
#include <map>
#include <set>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#else
#define EMU_ASAN 0
#endif

namespace emu {

enum { RUN, WAIT_BLOCK, WAIT_WARP, WAIT_SPIN, DONE };
enum { MAX_THREADS = 1024, STACK_BYTES = 256 * 1024 };

struct fiber {
    jmp_buf ctx;
    uint3 tid;
    int state;
    bool started;
    char *stack;
    void *fake_stack; /* ASan's bookkeeping while switched out */
    unsigned long long coll; /* warp-collective (WMMA) operations this thread reached */
};

static fiber fibers[MAX_THREADS];
static int n_fibers, cur = -1;
static jmp_buf sched;
static body_fn g_fn;
static void *g_ctx;
static float xchg[MAX_THREADS];
static std::vector<unsigned char> smem;
static unsigned char *smem_base; /* smem's data, aligned to 128 bytes as on the device */
static warp_slot slots[MAX_THREADS / 32];
#if EMU_ASAN
static void *sched_fake_stack;
static const void *sched_stack_bottom;
static size_t sched_stack_size;
#endif

uint3 g_block_idx;
dim3 g_block_dim, g_grid_dim;

[[noreturn]] void die(const char *what)
{
    fprintf(stderr, "emu: block (%u,%u,%u) of (%u,%u,%u), %u threads: %s\n", g_block_idx.x,
            g_block_idx.y, g_block_idx.z, g_grid_dim.x, g_grid_dim.y, g_grid_dim.z, g_block_dim.x,
            what);
    abort();
}

uint3 &thread_idx()
{
    if (cur < 0)
        die("threadIdx read outside a kernel");
    return fibers[cur].tid;
}

void *dyn_smem_ptr() { return smem_base; }

void check_aligned(const void *p, size_t align, const char *what)
{
    if ((reinterpret_cast<uintptr_t>(p) & (align - 1)) != 0) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s of %zu bytes at %p: misaligned (thread %u)", what, align, p,
                 cur >= 0 ? fibers[cur].tid.x : 0u);
        die(msg);
    }
}

void tma_fail(const char *what) { die(what); }

/* Leave the fiber for the scheduler; back here when it is released. */
static void yield(int state)
{
    fibers[cur].state = state;
    if (!_setjmp(fibers[cur].ctx)) {
#if EMU_ASAN
        __sanitizer_start_switch_fiber(&fibers[cur].fake_stack, sched_stack_bottom,
                                       sched_stack_size);
#endif
        _longjmp(sched, 1);
    }
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(fibers[cur].fake_stack, nullptr, nullptr);
#endif
}

void sync_block() { yield(WAIT_BLOCK); }

float shfl_xor(float v, int off)
{
    const int t = (int)fibers[cur].tid.x;
    xchg[t] = v;
    yield(WAIT_WARP);
    const float r = xchg[(t & ~31) | ((t & 31) ^ off)];
    yield(WAIT_WARP); // nobody overwrites its slot before every lane has read
    return r;
}

float shfl(float v, int src)
{
    const int t = (int)fibers[cur].tid.x;
    xchg[t] = v;
    yield(WAIT_WARP);
    const float r = xchg[(t & ~31) | (src & 31)];
    yield(WAIT_WARP);
    return r;
}

unsigned ballot(bool pred)
{
    const int t = (int)fibers[cur].tid.x;
    xchg[t] = pred ? 1.0f : 0.0f;
    yield(WAIT_WARP);
    unsigned r = 0;
    const int base = t & ~31;
    for (int i = 0; i < 32; i++)
        if (xchg[base + i] != 0.0f)
            r |= 1u << i;
    yield(WAIT_WARP);
    return r;
}

void warp_sync() { yield(WAIT_WARP); }

/* A thread polling for what another thread will do (an mbarrier's phase):
 * the others run on; a round in which every thread that ran only polled
 * again is a deadlock. */
void spin() { yield(WAIT_SPIN); }

int lane_id() { return (int)(fibers[cur].tid.x & 31); }

/* Every lane of the warp arrives (a warp barrier, as the WMMA calls wait
 * for the whole warp); the k-th collective of each lane is the same call,
 * so the lane that runs first after the barrier finds the warp's slot
 * holding an older generation and fills it, the others compare. */
warp_slot *warp_collective(bool *first)
{
    if (cur < 0)
        die("a warp-collective operation outside a kernel");
    yield(WAIT_WARP);
    const unsigned long long gen = ++fibers[cur].coll;
    warp_slot *s = &slots[fibers[cur].tid.x >> 5];
    *first = s->gen != gen;
    s->gen = gen;
    return s;
}

static void fiber_main()
{
#if EMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_stack_bottom, &sched_stack_size);
#endif
    g_fn(g_ctx);
    fibers[cur].state = DONE;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, sched_stack_bottom, sched_stack_size);
#endif
    _longjmp(sched, 1);
}

/* First entry: switch to the fiber's stack and call fiber_main there. */
static void start_fiber(int i)
{
    char *top = fibers[i].stack + STACK_BYTES;
#if EMU_ASAN
    __sanitizer_start_switch_fiber(&sched_fake_stack, fibers[i].stack, STACK_BYTES);
#endif
    asm volatile("mov %0, %%rsp\n\tcall *%1\n\t" : : "r"(top), "r"(fiber_main) : "memory");
    __builtin_unreachable();
}

static void run_block(int n)
{
    for (int i = 0; i < n; i++) {
        fibers[i].state = RUN;
        fibers[i].started = false;
        fibers[i].tid = make_uint3((unsigned)i, 0, 0);
        fibers[i].coll = 0;
    }
    for (int w = 0; w < n / 32; w++)
        slots[w].gen = 0;
    /* Between barriers the threads run one after another, forward in one
     * round and backward in the next: a thread that rewrites shared data
     * before another has read it (a missing barrier) then shows, whichever
     * of the two comes first in thread order. */
    bool moved = false; // a thread ran to anything but polling again
    for (int round = 0;; round++) {
        for (int ii = 0; ii < n; ii++) {
            const int i = round & 1 ? n - 1 - ii : ii;
            if (fibers[i].state != RUN)
                continue;
            cur = i;
            if (!_setjmp(sched)) {
                if (!fibers[i].started) {
                    fibers[i].started = true;
                    start_fiber(i);
                }
#if EMU_ASAN
                __sanitizer_start_switch_fiber(&sched_fake_stack, fibers[i].stack, STACK_BYTES);
#endif
                _longjmp(fibers[i].ctx, 1);
            }
#if EMU_ASAN
            __sanitizer_finish_switch_fiber(sched_fake_stack, nullptr, nullptr);
#endif
            moved = moved || fibers[i].state != WAIT_SPIN;
            cur = -1;
        }
        int done = 0, at_block = 0;
        for (int i = 0; i < n; i++) {
            done += fibers[i].state == DONE;
            at_block += fibers[i].state == WAIT_BLOCK;
        }
        if (done == n)
            return;
        bool released = false;
        for (int w = 0; w < n / 32; w++) {
            int at_warp = 0, exited = 0, elsewhere = 0, polling = 0;
            for (int l = 0; l < 32; l++) {
                int s = fibers[w * 32 + l].state;
                at_warp += s == WAIT_WARP;
                exited += s == DONE;
                elsewhere += s == WAIT_BLOCK;
                polling += s == WAIT_SPIN;
            }
            if (at_warp == 0 || polling)
                continue; // (a polling lane may reach the warp's collective yet)
            if (exited || elsewhere) {
                char msg[160];
                snprintf(msg, sizeof msg, "warp %d: a shuffle reached by %d lanes while %d exited "
                         "and %d wait at __syncthreads", w, at_warp, exited, elsewhere);
                die(msg);
            }
            for (int l = 0; l < 32; l++)
                fibers[w * 32 + l].state = RUN;
            released = true;
        }
        // Polling threads poll again next round, while some thread moves.
        int polling = 0;
        for (int i = 0; i < n; i++)
            if (fibers[i].state == WAIT_SPIN) {
                fibers[i].state = RUN;
                polling++;
            }
        const bool moved_now = moved;
        moved = false;
        if (released)
            continue;
        if (polling) {
            if (!moved_now)
                die("deadlock: threads poll for what no thread does (an mbarrier's phase)");
            continue;
        }
        if (at_block + done == n) {
            if (done) {
                char msg[128];
                snprintf(msg, sizeof msg, "__syncthreads reached by %d threads after %d exited",
                         at_block, done);
                die(msg);
            }
            for (int i = 0; i < n; i++)
                fibers[i].state = RUN;
            continue;
        }
        die("deadlock");
    }
}

/* Shared memory as the device limits it: a block gets 48 kB, static and
 * dynamic together, unless its kernel raised its dynamic limit with
 * cudaFuncSetAttribute (then the dynamic bytes up to that, and 227 kB in
 * all). Static objects count as the running kernel declares them. */
static std::map<const void *, int> smem_optin;
static const void *cur_kernel;
static size_t cur_dyn, cur_static;
static std::set<const void *> cur_seen;

static void check_smem()
{
    const auto it = smem_optin.find(cur_kernel);
    if (it == smem_optin.end() ? cur_dyn + cur_static > 48 * 1024
                               : cur_dyn > (size_t)it->second || cur_dyn + cur_static > 227 * 1024) {
        char what[200];
        snprintf(what, sizeof what,
                 "%zu bytes of dynamic and %zu of static shared memory: past %s", cur_dyn,
                 cur_static,
                 it == smem_optin.end() ? "the 48 kB a kernel gets without cudaFuncSetAttribute"
                                        : "the limit its cudaFuncSetAttribute set");
        die(what);
    }
}

void note_shared(const void *p, size_t bytes)
{
    if (cur_seen.insert(p).second) {
        cur_static += bytes;
        check_smem();
    }
}

void run_grid(const void *k, dim3 grid, dim3 block, size_t smem_bytes, body_fn fn, void *ctx)
{
    cur_kernel = k;
    cur_dyn = smem_bytes;
    cur_static = 0;
    cur_seen.clear();
    check_smem();
    unsigned n = block.x * block.y * block.z;
    if (block.y != 1 || block.z != 1 || n == 0 || n > MAX_THREADS || n % 32 != 0) {
        fprintf(stderr, "emu: block of %u x %u x %u threads is not supported\n", block.x, block.y,
                block.z);
        abort();
    }
    if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
        fprintf(stderr, "emu: invalid grid %u x %u x %u\n", grid.x, grid.y, grid.z);
        abort();
    }
    for (unsigned i = 0; i < n; i++)
        if (!fibers[i].stack)
            fibers[i].stack = static_cast<char *>(aligned_alloc(64, STACK_BYTES));
    g_fn = fn;
    g_ctx = ctx;
    g_grid_dim = grid;
    g_block_dim = block;
    n_fibers = (int)n;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                g_block_idx = make_uint3(x, y, z);
                smem.assign((smem_bytes ? smem_bytes : 1) + 128, 0xFF);
                smem_base = smem.data() + ((128 - (reinterpret_cast<uintptr_t>(smem.data()) & 127)) & 127);
                run_block((int)n);
            }
}

/* The graph being captured, if any; a capture broken by a call that may
 * not be made during one (a synchronization, a free) fails at its end. */
static std::vector<std::function<void()>> *cap_ops;
static bool cap_broken;

bool capturing() { return cap_ops != nullptr; }

void record(std::function<void()> op) { cap_ops->push_back(std::move(op)); }

} // namespace emu

struct CUgraph_st {
    std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> ops;
};

/* ---- the runtime API memra calls ---- */

/* The error state and the current device are per host thread, as in
 * CUDA. MEMRA_EMU_DEVICES (1-8, default 1) devices exist; a stream belongs
 * to the device current when it was made, and using it (a launch, a copy,
 * a wait) from a thread whose current device is another one fails with
 * "invalid resource handle", as a kernel launch does on CUDA, so a backend
 * that forgets to select its device on a new thread is caught. Kernels
 * run on the calling thread: drive the emulation from one thread at a
 * time. */
static thread_local cudaError_t last_error = cudaSuccess;
static thread_local int cur_device = 0;

struct emu_stream {
    int device;
};

static cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

static int n_devices(void)
{
    const char *s = getenv("MEMRA_EMU_DEVICES");
    int n = s ? atoi(s) : 1;
    return n < 1 ? 1 : n > 8 ? 8 : n;
}

namespace emu {

bool stream_ok(cudaStream_t s)
{
    if (!s || reinterpret_cast<emu_stream *>(s)->device == cur_device)
        return true;
    fail(cudaErrorInvalidResourceHandle);
    return false;
}

} // namespace emu

struct emu_event {
    double t;
    int device; /* current when it was made: it is recorded on that device's streams only */
};

static double now_s()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

extern "C" {

cudaError_t cudaGetDeviceCount(int *n)
{
    *n = n_devices();
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int d)
{
    if (d < 0 || d >= n_devices())
        return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    if (d == 0)
        snprintf(p->name, sizeof p->name, "memra CPU emulation of a CUDA device");
    else
        snprintf(p->name, sizeof p->name, "memra CPU emulation of a CUDA device (%d)", d);
    p->major = 0;
    p->minor = 0;
    p->multiProcessorCount = 4;
    p->totalGlobalMem = (size_t)16 << 30;
    p->sharedMemPerBlockOptin = 227 << 10; // sm_90's
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int d)
{
    if (d < 0 || d >= n_devices())
        return fail(cudaErrorInvalidDevice);
    cur_device = d;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *d)
{
    *d = cur_device;
    return cudaSuccess;
}

cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "emulated CUDA error";
    }
}

cudaError_t cudaMalloc(void **p, size_t n)
{
    *p = nullptr;
    if (emu::capturing()) { /* memra never allocates inside a capture */
        emu::cap_broken = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (n > ((size_t)64 << 30))
        return fail(cudaErrorMemoryAllocation);
    /* Exactly n bytes, so the address sanitizer sees a read one past the end. */
    if (posix_memalign(p, 256, n ? n : 1) != 0) {
        *p = nullptr;
        return fail(cudaErrorMemoryAllocation);
    }
    memset(*p, 0xFF, n);
    return cudaSuccess;
}

/* Calls CUDA refuses while a stream captures: they break the capture. */
static bool refused_in_capture()
{
    if (!emu::capturing())
        return false;
    emu::cap_broken = true;
    return true;
}

cudaError_t cudaFree(void *p)
{
    if (refused_in_capture())
        return fail(cudaErrorStreamCaptureUnsupported);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **p, size_t n)
{
    if (refused_in_capture())
        return fail(cudaErrorStreamCaptureUnsupported);
    return cudaMalloc(p, n);
}
cudaError_t cudaFreeHost(void *p) { return cudaFree(p); }

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind,
                            cudaStream_t s)
{
    if (!emu::stream_ok(s))
        return cudaErrorInvalidResourceHandle;
    if (emu::capturing()) {
        /* A copy node reads its source when the graph runs. */
        emu::record([dst, src, n]() {
            if (n)
                memcpy(dst, src, n);
        });
        return cudaSuccess;
    }
    if (n)
        memcpy(dst, src, n);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    if (!emu::stream_ok(s))
        return cudaErrorInvalidResourceHandle;
    if (emu::capturing()) {
        emu::record([p, v, n]() { memset(p, v, n); });
        return cudaSuccess;
    }
    memset(p, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n) { return cudaMemsetAsync(p, v, n, 0); }

cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    *free_b = (size_t)8 << 30;
    *total_b = (size_t)16 << 30;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int)
{
    *s = reinterpret_cast<cudaStream_t>(new emu_stream{cur_device});
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s)
{
    if (!emu::stream_ok(s))
        return cudaErrorInvalidResourceHandle;
    return refused_in_capture() ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

// Work runs when it is issued: a stream is always done.
cudaError_t cudaStreamQuery(cudaStream_t s)
{
    if (!emu::stream_ok(s))
        return cudaErrorInvalidResourceHandle;
    return refused_in_capture() ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!emu::stream_ok(s))
        return cudaErrorInvalidResourceHandle;
    delete reinterpret_cast<emu_stream *>(s);
    return cudaSuccess;
}

cudaError_t cudaStreamBeginCapture(cudaStream_t, enum cudaStreamCaptureMode)
{
    if (emu::capturing())
        return fail(cudaErrorIllegalState);
    emu::cap_ops = new std::vector<std::function<void()>>();
    emu::cap_broken = false;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *graph)
{
    *graph = nullptr;
    if (!emu::capturing())
        return fail(cudaErrorIllegalState);
    std::vector<std::function<void()>> *ops = emu::cap_ops;
    emu::cap_ops = nullptr;
    if (emu::cap_broken) {
        delete ops;
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    *graph = new CUgraph_st{std::move(*ops)};
    delete ops;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph, unsigned long long)
{
    *exec = new CUgraphExec_st{graph->ops};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t)
{
    if (emu::capturing())
        return fail(cudaErrorStreamCaptureUnsupported);
    for (auto &op : exec->ops)
        op();
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph)
{
    delete graph;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec)
{
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int)
{
    *e = reinterpret_cast<cudaEvent_t>(new emu_event{0, cur_device});
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    if (!emu::stream_ok(s))
        return cudaErrorInvalidResourceHandle;
    emu_event *ev = reinterpret_cast<emu_event *>(e);
    if (ev->device != cur_device) /* CUDA: event and stream on one device */
        return fail(cudaErrorInvalidResourceHandle);
    ev->t = now_s();
    return cudaSuccess;
}

/* Streams run their work as it is issued, so a wait has nothing to wait
 * for; the stream must still be the current device's. Any device's event
 * may be waited on, as in CUDA. */
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t, unsigned int)
{
    if (!emu::stream_ok(s))
        return cudaErrorInvalidResourceHandle;
    return emu::capturing() ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t cudaMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t n,
                                cudaStream_t s)
{
    if (dst_dev < 0 || dst_dev >= n_devices() || src_dev < 0 || src_dev >= n_devices())
        return fail(cudaErrorInvalidDevice);
    return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s);
}

// No profiler watches the emulation: the range marks do nothing.
cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
cudaError_t cudaProfilerStop(void) { return cudaSuccess; }

cudaError_t cudaEventSynchronize(cudaEvent_t)
{
    return refused_in_capture() ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
    *ms = (float)((reinterpret_cast<emu_event *>(b)->t - reinterpret_cast<emu_event *>(a)->t) * 1e3);
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    delete reinterpret_cast<emu_event *>(e);
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *f, enum cudaFuncAttribute a, int value)
{
    if (value > 227 * 1024)
        return fail(cudaErrorInvalidValue);
    if (a == cudaFuncAttributeMaxDynamicSharedMemorySize)
        emu::smem_optin[f] = value;
    return cudaSuccess;
}

} // extern "C"
