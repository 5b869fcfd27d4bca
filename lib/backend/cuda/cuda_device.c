#include "backend/cuda/cuda_device.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/attention.cuh"
#include "kernels/copy_bandwidth.cuh"

#define CUDA_TRY(call, err)                                                                \
    do {                                                                                   \
        cudaError_t cuda_try_rc = (call);                                                  \
        if (cuda_try_rc != cudaSuccess)                                                    \
            return memra_fail((err), "%s failed: %s (%s:%d)", #call,                      \
                              cudaGetErrorString(cuda_try_rc), __FILE__, __LINE__);        \
    } while (0)

const char *device_class_name(device_class c)
{
    return c == DEVICE_CLASS_HOPPER ? "hopper" : "generic";
}

/* An integer environment variable in [lo, hi]; absent or empty: *v kept. */
static int env_int(const char *name, int lo, int hi, int *v, memra_err *err)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    char *end;
    long x = strtol(s, &end, 10);
    if (*end || x < lo || x > hi)
        return memra_fail(err, "%s=%s: expected an integer from %d to %d", name, s, lo, hi);
    *v = (int)x;
    return 0;
}

int cuda_tuning_for(const cuda_device_info *d, cuda_tuning *t, memra_err *err)
{
    /* Every class: graphs change no result (tests check the bytes), so
     * they are on wherever they run. The prefill GEMM, flash prefill and
     * the decode GEMM need bf16 tensor cores (sm_80 and later); older
     * cards keep the mat-vec and the split-K attention, which every card
     * also runs where those do not apply. The prefill GEMM and flash
     * prefill start at 32 rows (docs/decisions/0006-cuda-decode-defaults.md,
     * 0007-flash-prefill.md); a prompt chunk of 2 to 31 rows runs its
     * projections on the decode GEMM, and so does a quantized matrix's
     * chunk up to dgemm_chunk_max rows, which the Hopper class raises to
     * the decode GEMM's 64-row tile (decision 0030). */
    const int tensor_cores = d->cc_major >= 8;
    t->graphs = 1;
    t->graph_max_rows = 64;
    t->gemm = tensor_cores;
    t->gemm_min_rows = 32;
    t->dgemm_chunk_max = 31;
    t->prefill_chunk = 64;
    t->attn_partials_cap = (size_t)64 << 20; /* 256 MB */
    t->flash = tensor_cores;
    t->flash_min_rows = 32;
    /* A short chunk over a long context has few (head, 64-row) tiles, each
     * walking every key: a launch of fewer blocks than multiprocessors is
     * split by segments of 1,024 keys, one block each (measured on the
     * H200: 96 rows over 8,192 keys 3.0x faster split; 512 rows, 256
     * blocks, 0.92x split, so not; docs/decisions/0015-flash-segments.md). */
    t->flash_seg_keys = 1024;
    t->flash_split_blocks = d->sm_count;
    t->flash_ws_cap = (size_t)64 << 20; /* 256 MB */
    t->attn_splits = 0;
    /* -1: the engine's plan chooses (cuda_plan_decode; the kernel check,
     * which has none, takes ATTN_SPLIT_MIN). docs/decisions/0008. */
    t->attn_split_min = -1;
    /* The decode GEMM rounds x to bf16 as the prefill GEMM does. -1: the
     * engine's plan chooses (plan_decode: on when it batches;
     * docs/decisions/0009-decode-gemm.md). */
    t->dgemm = tensor_cores ? -1 : 0;
    t->dgemm_blocks_per_sm = 2;
    /* Programmatic dependent launch needs sm_90's griddepcontrol; a
     * kernel's results never depend on it (kernels/launch.cuh,
     * docs/decisions/0011). */
    t->pdl = d->cc_major >= 9;
    if (d->klass == DEVICE_CLASS_HOPPER) {
        /* Measured on the H200 (docs/decisions/0006-cuda-decode-defaults.md;
         * the decode GEMM for quantized chunks to 64 rows: Q4_K_M 64-token
         * prompt 5,457 against 3,908 tok/s on the prefill GEMM, 65 rows
         * 3,629 against 3,934; 0030-short-prompt-chunks.md). */
        t->prefill_chunk = 512;
        t->dgemm_chunk_max = 64;
    }
    /* The overrides left (docs/FLAGS.md, docs/decisions/0012-knobs.md):
     * graphs off, for the tests that compare graph replay with plain
     * launches and for debugging a driver; the prefill GEMM and flash
     * prefill off, for f32 parity with a reference (tests/gpu/run.sh
     * matches transformers' f32 logits); the decode GEMM forced on or off,
     * for an operator who wants a batching server's numerics to be a
     * single sequence's (f32 products) and for the tests that compare both
     * with the CPU. With the prefill GEMM off every product stays f32
     * unless MEMRA_CUDA_DGEMM says otherwise. */
    if (env_int("MEMRA_CUDA_GRAPHS", 0, 1, &t->graphs, err) ||
        env_int("MEMRA_CUDA_GEMM", 0, 1, &t->gemm, err) ||
        env_int("MEMRA_CUDA_FLASH", 0, 1, &t->flash, err))
        return -1;
    if (!t->gemm)
        t->dgemm = 0;
    if (env_int("MEMRA_CUDA_DGEMM", 0, 1, &t->dgemm, err))
        return -1;
    if (!tensor_cores) {
        t->gemm = 0;
        t->flash = 0;
        t->dgemm = 0;
    }
    return 0;
}

int cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

int cuda_device_query(int index, cuda_device_info *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    int n = cuda_device_count();
    if (index < 0 || index >= n)
        return memra_fail(err, "CUDA device %d: not present (%d device%s found)", index, n,
                          n == 1 ? "" : "s");
    struct cudaDeviceProp p;
    CUDA_TRY(cudaGetDeviceProperties(&p, index), err);
    out->index = index;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    out->sm_count = p.multiProcessorCount;
    out->total_mem = p.totalGlobalMem;
    out->smem_optin = p.sharedMemPerBlockOptin;
    /* sm_90 with HBM-sized memory: the H100/H200 class the defaults were measured on. */
    out->klass = (p.major == 9 && p.minor == 0) ? DEVICE_CLASS_HOPPER : DEVICE_CLASS_GENERIC;
    return 0;
}

int cuda_measure_copy_bandwidth(int index, size_t bytes, int reps, double *gbs, memra_err *err)
{
    cuda_device_info info;
    if (cuda_device_query(index, &info, err) != 0)
        return -1;
    CUDA_TRY(cudaSetDevice(index), err);
    bytes &= ~(size_t)15;
    void *src = NULL, *dst = NULL;
    cudaEvent_t start = NULL, stop = NULL;
    int rc = -1;
    if (cudaMalloc(&src, bytes) != cudaSuccess || cudaMalloc(&dst, bytes) != cudaSuccess) {
        memra_fail(err, "CUDA device %d: cannot allocate 2 x %zu bytes for the bandwidth probe",
                   index, bytes);
        goto done;
    }
    cudaMemset(src, 1, bytes);
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    /* Warm-up launch, then the timed ones. */
    if (launch_copy_16b(src, dst, bytes / 16, info.sm_count, 0) != cudaSuccess)
        goto launch_failed;
    cudaEventRecord(start, 0);
    for (int r = 0; r < reps; r++)
        if (launch_copy_16b(src, dst, bytes / 16, info.sm_count, 0) != cudaSuccess)
            goto launch_failed;
    cudaEventRecord(stop, 0);
    if (cudaEventSynchronize(stop) != cudaSuccess)
        goto launch_failed;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    *gbs = (double)bytes * 2.0 * reps / (ms * 1e-3) / 1e9;
    rc = 0;
    goto done;
launch_failed:
    memra_fail(err, "CUDA device %d: bandwidth probe failed: %s", index,
               cudaGetErrorString(cudaGetLastError()));
done:
    if (start)
        cudaEventDestroy(start);
    if (stop)
        cudaEventDestroy(stop);
    cudaFree(src);
    cudaFree(dst);
    return rc;
}
