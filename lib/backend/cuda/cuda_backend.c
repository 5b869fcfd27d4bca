/* The CUDA backend: setup on one device, the sticky error, device memory
 * (plain cudaMalloc, no managed memory), activations, staging of per-step
 * host data, and the vtable. The ops live in the sibling files
 * (cuda_internal.h lists them). */
#include "backend/cuda/cuda_backend.h"
#include <cuda_profiler_api.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "core/check.h"
#include "kernels/launch.cuh"

/* ---- errors ---- */

int cuda_failf(cuda_backend *cb, const char *fmt, ...)
{
    if (cb->failed)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    memra_failv(&cb->err, fmt, ap);
    va_end(ap);
    cb->failed = 1;
    return -1;
}

int cuda_check_at(cuda_backend *cb, cudaError_t rc, const char *what, const char *file, int line)
{
    if (rc == cudaSuccess)
        return 0;
    return cuda_failf(cb, "CUDA device %d: %s failed: %s (%s:%d)", cb->info.index, what,
                      cudaGetErrorString(rc), file, line);
}

int cuda_alloc(cuda_backend *cb, void **p, size_t bytes, const char *what, int sticky,
               memra_err *err)
{
    *p = NULL;
    cudaError_t rc = cudaMalloc(p, bytes ? bytes : 1);
    if (rc == cudaSuccess)
        return 0;
    *p = NULL;
    cudaGetLastError(); /* an allocation failure is not sticky in CUDA; clear it */
    size_t free_b = 0, total_b = 0;
    cudaMemGetInfo(&free_b, &total_b);
    memra_err local;
    memra_err *e = err ? err : &local;
    if (rc == cudaErrorMemoryAllocation)
        memra_fail(e, "CUDA device %d: out of device memory: %s needs %zu bytes (%zu of %zu "
                   "bytes free)", cb->info.index, what, bytes, free_b, total_b);
    else
        memra_fail(e, "CUDA device %d: cudaMalloc of %zu bytes for %s failed: %s",
                   cb->info.index, bytes, what, cudaGetErrorString(rc));
    if (sticky && !cb->failed) {
        cb->err = *e;
        cb->failed = 1;
    }
    return -1;
}

void *cuda_scratch(cuda_backend *cb, int slot, size_t bytes, const char *what)
{
    if (cb->failed)
        return NULL;
    if (bytes <= cb->scratch_cap[slot])
        return cb->scratch[slot];
    if (cuda_graph_capturing(cb)) {
        /* No sync or free inside a capture: give it up, run eagerly. */
        cuda_graph_spoil(cb);
        return NULL;
    }
    /* Queued kernels may still read the old buffer; graphs hold its address. */
    cb->mem_epoch++;
    if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
        return NULL;
    cudaFree(cb->scratch[slot]);
    cb->scratch[slot] = NULL;
    cb->scratch_cap[slot] = 0;
    /* Grow by half again so a slowly rising need does not reallocate often. */
    size_t want = bytes + bytes / 2;
    if (cuda_alloc(cb, &cb->scratch[slot], want, what, 1, NULL) != 0)
        return NULL;
    cb->scratch_cap[slot] = want;
    return cb->scratch[slot];
}

void *cuda_stage_upload(cuda_backend *cb, int which, const void *src, size_t n)
{
    if (cb->failed)
        return NULL;
    if (cuda_graph_capturing(cb)) {
        cuda_graph_spoil(cb);
        return NULL;
    }
    cuda_stage *s = &cb->stage[which];
    /* The pinned buffer is reused: the previous copy out of it must be done. */
    if (s->pending && CU_OK(cb, cudaEventSynchronize(s->done)))
        return NULL;
    s->pending = 0;
    if (n > s->cap) {
        if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
            return NULL;
        cudaFreeHost(s->host);
        cudaFree(s->dev);
        s->host = s->dev = NULL;
        s->cap = 0;
        size_t want = n < 4096 ? 4096 : n + n / 2;
        if (CU_OK(cb, cudaMallocHost(&s->host, want)) ||
            cuda_alloc(cb, &s->dev, want, "staging buffer", 1, NULL) != 0)
            return NULL;
        s->cap = want;
    }
    memcpy(s->host, src, n);
    if (CU_OK(cb, cudaMemcpyAsync(s->dev, s->host, n, cudaMemcpyHostToDevice, cb->stream)) ||
        CU_OK(cb, cudaEventRecord(s->done, cb->stream)))
        return NULL;
    s->pending = 1;
    return s->dev;
}

int cuda_upload_sync(cuda_backend *cb, void *dst, const void *src, size_t n, memra_err *err)
{
    cudaError_t rc = cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, cb->stream);
    if (rc == cudaSuccess)
        rc = cudaStreamSynchronize(cb->stream);
    if (rc != cudaSuccess)
        return memra_fail(err, "CUDA device %d: copying %zu bytes to the device failed: %s",
                          cb->info.index, n, cudaGetErrorString(rc));
    return 0;
}

/* ---- activations ---- */

static float *cuda_act_alloc(backend *b, size_t n)
{
    cuda_backend *cb = cuda_of(b);
    void *p = NULL;
    if (cb->failed)
        return NULL;
    char what[64];
    snprintf(what, sizeof what, "an activation of %zu floats", n);
    if (cuda_alloc(cb, &p, (n ? n : 1) * sizeof(float), what, 1, NULL) != 0)
        return NULL;
    return p;
}

static void cuda_act_free(backend *b, float *p)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (!p)
        return;
    cudaStreamSynchronize(cb->stream);
    cudaFree(p);
}

static void cuda_act_read(backend *b, const float *src, float *dst, size_t n)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (cuda_graph_capturing(cb)) {
        cuda_graph_read(cb, src, dst, n);
        return;
    }
    if (!cb->failed && src) {
        if (CU_OK(cb, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToHost,
                                      cb->stream)) == 0 &&
            CU_OK(cb, cudaStreamSynchronize(cb->stream)) == 0)
            return;
    }
    /* Nothing valid to give: NaN, never stale numbers that look right. */
    for (size_t i = 0; i < n; i++)
        dst[i] = NAN;
}

void backend_cuda_act_write(backend *b, float *dst, const float *src, size_t n)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->failed || !dst)
        return;
    if (CU_OK(cb, cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyHostToDevice,
                                  cb->stream)) == 0)
        CU_OK(cb, cudaStreamSynchronize(cb->stream));
}

/* A pipeline stage's input from the stage before it, on another device
 * (or the same one): the copy waits on the source stream's work so far,
 * and the source stream's later work waits on the copy, so neither side
 * blocks the host. Peer access is not needed: the driver stages the copy
 * where the devices cannot reach each other. */
static int cuda_act_import(backend *b, float *dst, backend *from, const float *src, size_t n)
{
    if (from->ops != b->ops)
        return -1;
    cuda_backend *cb = cuda_of(b), *fb = cuda_of(from);
    cuda_xshadow_drop(cb);
    if (cb->failed || fb->failed)
        return 0; /* recorded already: the step's status says */
    int dev = cb->info.index, fdev = fb->info.index;
    /* either side's held-back add (a residual add waiting for a norm, or
     * a sum the copy is about to overwrite the input of) goes first */
    if (CU_OK(cb, cudaSetDevice(dev)))
        return 0;
    cuda_flush_pending(cb);
    if (CU_OK(fb, cudaSetDevice(fdev)))
        return 0;
    cuda_flush_pending(fb);
    if (CU_OK(fb, cudaEventRecord(fb->xfer, fb->stream)) ||
        CU_OK(cb, cudaSetDevice(dev)) || CU_OK(cb, cudaStreamWaitEvent(cb->stream, fb->xfer, 0)))
        return 0;
    cudaError_t rc = dev == fdev ? cudaMemcpyAsync(dst, src, n * sizeof(float),
                                                   cudaMemcpyDeviceToDevice, cb->stream)
                                 : cudaMemcpyPeerAsync(dst, dev, src, fdev, n * sizeof(float),
                                                       cb->stream);
    if (CU_OK(cb, rc) || CU_OK(cb, cudaEventRecord(cb->xfer, cb->stream)) ||
        CU_OK(fb, cudaSetDevice(fdev)) || CU_OK(fb, cudaStreamWaitEvent(fb->stream, cb->xfer, 0)))
        return 0;
    CU_OK(cb, cudaSetDevice(dev));
    return 0;
}

static void cuda_cache_window(backend *b, const bk_cache_window *w)
{
    cuda_backend *cb = cuda_of(b);
    cb->win = *w;
    /* a stage of only recurrent layers, or only attention ones: one unused
     * layer, one unused float, so no pool is empty */
    if (cb->win.kv_n <= 0)
        cb->win.kv_n = 1;
    if (cb->win.state_n == 0)
        cb->win.state_n = 1;
    cb->has_win = 1;
}

static void cuda_act_write(backend *b, float *dst, const float *src, size_t n)
{
    cuda_flush_pending(cuda_of(b));
    backend_cuda_act_write(b, dst, src, n);
}

static int cuda_status(backend *b, memra_err *err)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (!cb->failed)
        CU_OK(cb, cudaGetLastError());
    if (cb->failed) {
        if (err)
            *err = cb->err;
        return -1;
    }
    return 0;
}

int backend_cuda_sync(backend *b, memra_err *err)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    if (!cb->failed)
        CU_OK(cb, cudaStreamSynchronize(cb->stream));
    return cuda_status(b, err);
}

uint64_t backend_cuda_weight_bytes(backend *b)
{
    return cuda_of(b)->weight_bytes;
}

void backend_cuda_graph_stats(backend *b, uint64_t *replays, uint64_t *captures,
                              uint64_t *abandoned)
{
    cuda_graph_stats(cuda_of(b), replays, captures, abandoned);
}

uint64_t backend_cuda_graph_sampled_replays(backend *b)
{
    return cuda_graph_sampled_replays(cuda_of(b));
}

uint64_t backend_cuda_graph_chain_replays(backend *b)
{
    return cuda_graph_chain_replays(cuda_of(b));
}

/* ---- lifetime ---- */

static void cuda_destroy(backend *b)
{
    cuda_backend *cb = cuda_of(b);
    cudaSetDevice(cb->info.index); /* frees go to this backend's device, whoever calls */
    if (cb->stream)
        cudaStreamSynchronize(cb->stream);
    cuda_link_free(cb);
    cuda_graphs_free(cb);
    cuda_gemm_free(cb);
    cuda_dgemm_free(cb);
    cuda_weights_free(cb);
    cuda_moe_free(cb);
    cuda_attention_free(cb);
    cuda_sample_free(cb);
    for (int i = 0; i < N_SCRATCH; i++)
        cudaFree(cb->scratch[i]);
    for (int i = 0; i < N_STAGES; i++) {
        cudaFreeHost(cb->stage[i].host);
        cudaFree(cb->stage[i].dev);
        if (cb->stage[i].done)
            cudaEventDestroy(cb->stage[i].done);
    }
    if (cb->xfer)
        cudaEventDestroy(cb->xfer);
    if (cb->stream)
        cudaStreamDestroy(cb->stream);
    cudaGetLastError();
    free(cb);
    free(b);
}

static int cuda_mem_stats(backend *b, uint64_t *used, uint64_t *total, memra_err *err);
/* Every CUDA call runs on the calling thread's current device, which is
 * per thread: a thread other than the one that made the backend (the
 * server's engine thread) must select this backend's device first. */
static void cuda_bind(backend *b)
{
    cuda_backend *cb = cuda_of(b);
    if (!cb->failed)
        CU_OK(cb, cudaSetDevice(cb->info.index));
}

/* ---- ops from the sibling files, after any held-back add ---- */

static void op_qk_norm_rope(backend *b, float *q, float *k, const bk_batch *rows,
                            const bk_attn *a, const bk_weight *q_norm, const bk_weight *k_norm,
                            float w_offset, float eps, const bk_rope *rope)
{
    cuda_flush_pending(cuda_of(b));
    cuda_op_qk_norm_rope(b, q, k, rows, a, q_norm, k_norm, w_offset, eps, rope);
}

static void op_attention(backend *b, const bk_attn *a, const bk_batch *rows, const float *q,
                         const float *k, const float *v, float *out)
{
    cuda_flush_pending(cuda_of(b));
    cuda_op_attention(b, a, rows, q, k, v, out);
}

static void op_ffn_moe(backend *b, const bk_moe *m, const float *x, int n, float *out)
{
    cuda_flush_pending(cuda_of(b));
    cuda_op_ffn_moe(b, m, x, n, out);
}

/* ---- steps ---- */

static int cuda_step_begin(backend *b, const bk_step *st)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    return cuda_graph_step_begin(cb, st);
}

static int cuda_step_end(backend *b, const bk_step *st)
{
    cuda_xshadow_drop(cuda_of(b));
    return cuda_graph_step_end(cuda_of(b), st);
}

static int cuda_chain_begin(backend *b, int k, int first_pos, int max_blocks,
                            const void *forward_id)
{
    cuda_backend *cb = cuda_of(b);
    cuda_flush_pending(cb);
    return cuda_graph_chain_begin(cb, k, first_pos, max_blocks, forward_id);
}

static int cuda_chain_end(backend *b, smp_outcome *out)
{
    return cuda_graph_chain_end(cuda_of(b), out);
}

static int cuda_preferred_batch(backend *b)
{
    return cuda_of(b)->tune.prefill_chunk;
}

/* The decode GEMM when the engine will batch (the mat-vec is faster for
 * one row; the GEMM many times faster for many), unless
 * MEMRA_CUDA_DGEMM chose; likewise decode attention's split floor. */
static void cuda_plan_decode(backend *b, int max_rows)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->tune.dgemm < 0)
        cb->tune.dgemm = max_rows > 1;
    /* Decode attention's floor of keys a split: 64 where one row decodes
     * alone, 192 where many share a step (one row of 512 keys 11.9 vs
     * 16.7 us a layer, 64 rows 102.5 vs 81.1 on the H200, 2026-11-30:
     * docs/decisions/0008). Fixed for the engine's life, so a
     * row's splits never depend on its batch. */
    if (cb->tune.attn_split_min < 0)
        cb->tune.attn_split_min = max_rows > 1 ? 192 : 64;
}

/* The rows a step may hold and keep each row's decode bytes: below the
 * prefill GEMM's and flash attention's floors (tuning) and the chunked
 * DeltaNet rule's, and, in an engine whose decode steps keep the f32
 * experts, below the (row, expert) pairs where a prompt chunk's experts
 * take the tensor cores. */
static int cuda_rows_alone(backend *b, int moe_used)
{
    const cuda_tuning *t = &cuda_of(b)->tune;
    int lim = 0;
    if (t->gemm)
        lim = t->gemm_min_rows - 1;
    if (t->flash && (lim == 0 || t->flash_min_rows - 1 < lim))
        lim = t->flash_min_rows - 1;
    if (lim == 0 || CUDA_DELTA_CHUNK_MIN_ROWS - 1 < lim)
        lim = CUDA_DELTA_CHUNK_MIN_ROWS - 1;
    /* (an engine with the decode GEMM runs every step's experts on the
     * tensor cores, chunks and decode steps alike: no floor) */
    if (t->gemm && moe_used > 0 && t->dgemm <= 0) {
        int m = (CU_MOE_GEMM_PAIRS - 1) / moe_used;
        m = m < 1 ? 1 : m;
        lim = lim == 0 || m < lim ? m : lim;
    }
    return lim;
}

/* For ncu --profile-from-start off: the span between start and stop is
 * what it profiles. The work before is finished first, so none of it
 * falls inside. */
static void cuda_profiler_range(backend *b, int on)
{
    cuda_backend *cb = cuda_of(b);
    cuda_bind(b);
    if (CU_OK(cb, cudaStreamSynchronize(cb->stream)) == 0)
        CU_OK(cb, on ? cudaProfilerStart() : cudaProfilerStop());
}

static void cuda_finish(backend *b)
{
    cuda_backend *cb = cuda_of(b);
    cuda_bind(b);
    CU_OK(cb, cudaStreamSynchronize(cb->stream));
}

static const backend_ops cuda_ops = {
    .destroy = cuda_destroy,
    .weight_prepare = cuda_weight_prepare,
    .act_alloc = cuda_act_alloc,
    .act_free = cuda_act_free,
    .act_read = cuda_act_read,
    .act_write = cuda_act_write,
    .embed = cuda_op_embed,
    .rmsnorm = cuda_op_rmsnorm,
    .matmul = cuda_op_matmul,
    .attn_qkv = cuda_op_attn_qkv,
    .delta_in_proj = cuda_op_delta_in_proj,
    .qk_norm_rope = op_qk_norm_rope,
    .attention = op_attention,
    .ffn_glu = cuda_op_ffn_glu,
    .ffn_moe = op_ffn_moe,
    .add = cuda_op_add,
    .softcap = cuda_op_softcap,
    .scale = cuda_op_scale,
    .gather_cols = cuda_op_gather_cols,
    .act_mul = cuda_op_act_mul,
    .mul_sigmoid = cuda_op_mul_sigmoid,
    .split_heads = cuda_op_split_heads,
    .join_heads = cuda_op_join_heads,
    .delta_net = cuda_op_delta_net,
    .state_copy = cuda_op_state_copy,
    .kv_prepare = cuda_kv_prepare,
    .status = cuda_status,
    .mem_stats = cuda_mem_stats,
    .sample = cuda_op_sample,
    .bind = cuda_bind,
    .step_begin = cuda_step_begin,
    .step_end = cuda_step_end,
    .chain_begin = cuda_chain_begin,
    .chain_end = cuda_chain_end,
    .preferred_batch = cuda_preferred_batch,
    .plan_decode = cuda_plan_decode,
    .rows_alone = cuda_rows_alone,
    .profiler_range = cuda_profiler_range,
    .finish = cuda_finish,
    .act_import = cuda_act_import,
    .cache_window = cuda_cache_window,
    .link_join = cuda_link_join,
    .link_send = cuda_link_send,
    .link_recv = cuda_link_recv,
    .link_share = cuda_link_share,
};

backend *backend_cuda_create(int device, memra_err *err)
{
    cuda_device_info info;
    cuda_tuning tune;
    if (cuda_device_query(device, &info, err) != 0 || cuda_tuning_for(&info, &tune, err) != 0)
        return NULL;
    cudaError_t rc = cudaSetDevice(device);
    if (rc != cudaSuccess) {
        memra_fail(err, "CUDA device %d: cudaSetDevice failed: %s", device,
                   cudaGetErrorString(rc));
        return NULL;
    }
    cuda_backend *cb = xcalloc(1, sizeof *cb);
    cb->info = info;
    cb->tune = tune;
    launch_set_pdl(tune.pdl);
    rc = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking);
    for (int i = 0; i < N_STAGES && rc == cudaSuccess; i++)
        rc = cudaEventCreateWithFlags(&cb->stage[i].done, cudaEventDisableTiming);
    if (rc == cudaSuccess)
        rc = cudaEventCreateWithFlags(&cb->xfer, cudaEventDisableTiming);
    backend *b = xcalloc(1, sizeof *b);
    b->name = "cuda";
    b->ops = &cuda_ops;
    b->n_threads = 1;
    b->impl = cb;
    if (rc != cudaSuccess) {
        memra_fail(err, "CUDA device %d (%s): creating the stream failed: %s", device, info.name,
                   cudaGetErrorString(rc));
        cuda_destroy(b);
        return NULL;
    }
    return b;
}

/* Device memory in use for memra-bench's peak column: cudaMemGetInfo's
 * view of the whole device (this context, the driver, other processes). */
static int cuda_mem_stats(backend *b, uint64_t *used, uint64_t *total, memra_err *err)
{
    cuda_backend *cb = b->impl;
    size_t free_b = 0, total_b = 0;
    cudaError_t rc = cudaMemGetInfo(&free_b, &total_b);
    if (rc != cudaSuccess)
        return memra_fail(err, "CUDA device %d: cudaMemGetInfo failed: %s", cb->info.index,
                          cudaGetErrorString(rc));
    *used = (uint64_t)(total_b - free_b);
    *total = (uint64_t)total_b;
    return 0;
}
