/* Sampling on the device (backend_ops.sample, and bk_step.sample inside
 * a step): the rows' parameters, the logit-bias and penalty lists go up,
 * kernels/sample.cu picks one token per row from the logits where the
 * head left them, and only the outcomes (an id and a status per row) come
 * back. Rows with an allowed-token mask (a grammar's step) send its
 * ceil(n_vocab / 32) words up with the lists. The token is the one the
 * host sampler would pick from the same logits (the arithmetic is lib/numerics/sample_math.h's, shared by both).
 *
 * Three parts, so a graphed decode step can hold the middle one: the
 * upload (before the step, or before a graph replay), the launch (after
 * the forward: captured with it), the readback (after the step; the one
 * wait). The launch reads everything, seed and stream position included,
 * from device memory at fixed addresses: the staging buffers keep one
 * layout, [rows][bias][pen][mask][outcomes] with a capacity for each, and only
 * move when one of them must grow, which bumps mem_epoch so the graphs
 * that hold the old addresses are captured again. The device buffer ends
 * with the kernels' scratch, [rows][SMP_SCRATCH_WORDS] words, which the
 * host side does not mirror. Which kernels a launch runs (top-k, top-p,
 * the draw) is set by the upload from the rows' parameters. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "core/check.h"
#include "kernels/sample.cuh"

struct cuda_sampler {
    uint8_t *host; /* pinned, the device layout */
    uint8_t *dev;
    size_t cap_rows, cap_bias, cap_pen, cap_mask; /* entries (mask: words) */
    size_t o_bias, o_pen, o_mask, o_out, o_scan;  /* byte offsets */
    cudaEvent_t uploaded;               /* the last copy out of host is done */
    int pending;
    unsigned stages;                    /* smp_stages of the uploaded rows */
};

static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

void cuda_sample_free(cuda_backend *cb)
{
    cuda_sampler *s = cb->sampler;
    if (!s)
        return;
    cudaFreeHost(s->host);
    cudaFree(s->dev);
    if (s->uploaded)
        cudaEventDestroy(s->uploaded);
    free(s);
    cb->sampler = NULL;
}

static size_t grown(size_t have, size_t need, size_t least)
{
    if (need <= have)
        return have;
    size_t want = need + need / 2;
    return want < least ? least : want;
}

/* Room for n_rows rows, nb / np list entries and nm mask words. Growing waits for queued
 * work, moves both buffers and bumps mem_epoch (graphs holding the old
 * addresses are stale); never during a capture (the callers run before
 * one starts). */
static int stage_reserve(cuda_backend *cb, size_t n_rows, size_t nb, size_t np, size_t nm)
{
    if (!cb->sampler) {
        cb->sampler = xcalloc(1, sizeof *cb->sampler);
        if (CU_OK(cb, cudaEventCreateWithFlags(&cb->sampler->uploaded,
                                               cudaEventDisableTiming)))
            return -1;
    }
    cuda_sampler *s = cb->sampler;
    if (s->host && n_rows <= s->cap_rows && nb <= s->cap_bias && np <= s->cap_pen &&
        nm <= s->cap_mask)
        return 0;
    if (cuda_graph_capturing(cb))
        return cuda_failf(cb, "sample: the staging buffers would grow inside a graph capture");
    size_t cr = grown(s->cap_rows, n_rows, 64), cbias = grown(s->cap_bias, nb, 256),
           cp = grown(s->cap_pen, np, 1024), cm = grown(s->cap_mask, nm, 0);
    if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
        return -1;
    cb->mem_epoch++;
    cudaFreeHost(s->host);
    cudaFree(s->dev);
    s->host = s->dev = NULL;
    s->cap_rows = s->cap_bias = s->cap_pen = s->cap_mask = 0;
    s->pending = 0;
    s->o_bias = align16(cr * sizeof(smp_row));
    s->o_pen = s->o_bias + align16(cbias * sizeof(smp_bias));
    s->o_mask = s->o_pen + align16(cp * sizeof(smp_pen));
    s->o_out = s->o_mask + align16(cm * sizeof(uint32_t));
    s->o_scan = s->o_out + align16(cr * sizeof(smp_outcome));
    size_t total = s->o_scan, dev_total = s->o_scan + cr * SMP_SCRATCH_WORDS * sizeof(uint64_t);
    void *h = NULL, *d = NULL;
    if (CU_OK(cb, cudaMallocHost(&h, total)) ||
        cuda_alloc(cb, &d, dev_total, "the sampler's parameters", 1, NULL) != 0) {
        cudaFreeHost(h);
        return -1;
    }
    s->host = h;
    s->dev = d;
    s->cap_rows = cr;
    s->cap_bias = cbias;
    s->cap_pen = cp;
    s->cap_mask = cm;
    return 0;
}

/* Each row's lists inside the given lists, every id inside the
 * vocabulary: the kernel writes logits at those ids. A mask covers the
 * whole vocabulary (the kernel reads its word for every id). */
static int check_rows(int n_rows, int64_t n_vocab, const smp_row *rows, const smp_bias *bias,
                      const smp_pen *pen, const uint32_t *mask, int32_t *n_bias, int32_t *n_pen,
                      int32_t *n_mask, memra_err *err)
{
    int64_t nb = 0, np = 0, nm = 0, words = (n_vocab + 31) / 32;
    for (int i = 0; i < n_rows; i++) {
        const smp_row *r = &rows[i];
        if (r->n_bias < 0 || r->n_pen < 0 || r->bias_at < 0 || r->pen_at < 0 ||
            (r->n_bias > 0 && !bias) || (r->n_pen > 0 && !pen))
            return memra_fail(err, "sample: row %d has a bad bias or penalty list", i);
        if (r->n_mask != 0 && (r->n_mask != words || r->mask_at < 0 || !mask))
            return memra_fail(err, "sample: row %d has a mask of %" PRId32 " words at %" PRId32
                              " (want 0, or %" PRId64 " for %" PRId64 " tokens)", i, r->n_mask,
                              r->mask_at, words, n_vocab);
        if (r->n_mask && (int64_t)r->mask_at + r->n_mask > nm)
            nm = (int64_t)r->mask_at + r->n_mask;
        if ((int64_t)r->bias_at + r->n_bias > nb)
            nb = (int64_t)r->bias_at + r->n_bias;
        if ((int64_t)r->pen_at + r->n_pen > np)
            np = (int64_t)r->pen_at + r->n_pen;
        for (int32_t j = 0; j < r->n_bias; j++)
            if (bias[r->bias_at + j].id < 0 || bias[r->bias_at + j].id >= n_vocab)
                return memra_fail(err, "sample: row %d: logit_bias id %" PRId32 " is out of "
                                  "range [0, %" PRId64 ")", i, bias[r->bias_at + j].id, n_vocab);
        for (int32_t j = 0; j < r->n_pen; j++)
            if (pen[r->pen_at + j].id < 0 || pen[r->pen_at + j].id >= n_vocab)
                return memra_fail(err, "sample: row %d: penalized id %" PRId32 " is out of "
                                  "range [0, %" PRId64 ")", i, pen[r->pen_at + j].id, n_vocab);
    }
    if (nb > INT32_MAX || np > INT32_MAX || nm > INT32_MAX)
        return memra_fail(err, "sample: %" PRId64 " bias, %" PRId64 " penalty entries and %"
                          PRId64 " mask words are too many", nb, np, nm);
    *n_bias = (int32_t)nb;
    *n_pen = (int32_t)np;
    *n_mask = (int32_t)nm;
    return 0;
}

int cuda_sample_upload(cuda_backend *cb, int n_rows, int64_t n_vocab, const smp_row *rows,
                       const smp_bias *bias, const smp_pen *pen, const uint32_t *mask,
                       memra_err *err)
{
    if (cb->failed) {
        *err = cb->err;
        return -1;
    }
    if (n_rows <= 0 || n_vocab <= 0 || n_vocab >= INT32_MAX)
        return memra_fail(err, "sample: %d rows of %" PRId64 " logits", n_rows, n_vocab);
    if (n_rows > 65535)
        return memra_fail(err, "sample: %d rows in one call (at most 65535)", n_rows);
    int32_t nb = 0, np = 0, nm = 0;
    if (check_rows(n_rows, n_vocab, rows, bias, pen, mask, &nb, &np, &nm, err) != 0)
        return -1;
    if (stage_reserve(cb, (size_t)n_rows, (size_t)nb, (size_t)np, (size_t)nm) != 0) {
        *err = cb->err;
        return -1;
    }
    cuda_sampler *s = cb->sampler;
    /* The pinned buffer is reused: the previous copy out of it must be done. */
    if (s->pending && CU_OK(cb, cudaEventSynchronize(s->uploaded))) {
        *err = cb->err;
        return -1;
    }
    s->pending = 0;
    size_t rb = (size_t)n_rows * sizeof *rows, bb = (size_t)nb * sizeof *bias,
           pb = (size_t)np * sizeof *pen, mb = (size_t)nm * sizeof *mask;
    memcpy(s->host, rows, rb);
    if (nb)
        memcpy(s->host + s->o_bias, bias, bb);
    if (np)
        memcpy(s->host + s->o_pen, pen, pb);
    if (nm)
        memcpy(s->host + s->o_mask, mask, mb);
    if (CU_OK(cb, cudaMemcpyAsync(s->dev, s->host, rb, cudaMemcpyHostToDevice, cb->stream)) ||
        (nb && CU_OK(cb, cudaMemcpyAsync(s->dev + s->o_bias, s->host + s->o_bias, bb,
                                         cudaMemcpyHostToDevice, cb->stream))) ||
        (np && CU_OK(cb, cudaMemcpyAsync(s->dev + s->o_pen, s->host + s->o_pen, pb,
                                         cudaMemcpyHostToDevice, cb->stream))) ||
        (nm && CU_OK(cb, cudaMemcpyAsync(s->dev + s->o_mask, s->host + s->o_mask, mb,
                                         cudaMemcpyHostToDevice, cb->stream))) ||
        CU_OK(cb, cudaEventRecord(s->uploaded, cb->stream))) {
        *err = cb->err;
        return -1;
    }
    s->pending = 1;
    s->stages = smp_stages(rows, n_rows);
    return 0;
}

int cuda_sample_kind(const cuda_backend *cb)
{
    return cb->sampler ? 1 + (int)cb->sampler->stages : 1;
}

int cuda_sample_launch(cuda_backend *cb, float *logits, int n_rows, int64_t n_vocab)
{
    cuda_sampler *s = cb->sampler;
    if (cb->failed)
        return -1;
    if (!s || !s->host || (size_t)n_rows > s->cap_rows || !logits)
        return cuda_failf(cb, "sample: %d rows launched without their upload", n_rows);
    uint8_t *d = s->dev;
    return CU_OK(cb, launch_sample(logits, n_vocab, n_rows, (const smp_row *)d,
                                   (const smp_bias *)(d + s->o_bias),
                                   (const smp_pen *)(d + s->o_pen),
                                   (const uint32_t *)(d + s->o_mask),
                                   (uint64_t *)(d + s->o_scan), s->stages,
                                   (smp_outcome *)(d + s->o_out), cb->stream));
}

int cuda_sample_read(cuda_backend *cb, int n_rows, smp_outcome *out)
{
    cuda_sampler *s = cb->sampler;
    if (cb->failed)
        return -1;
    size_t n = (size_t)n_rows * sizeof *out;
    if (CU_OK(cb, cudaMemcpyAsync(s->host + s->o_out, s->dev + s->o_out, n,
                                  cudaMemcpyDeviceToHost, cb->stream)) ||
        CU_OK(cb, cudaStreamSynchronize(cb->stream)))
        return -1;
    memcpy(out, s->host + s->o_out, n);
    return 0;
}

const smp_outcome *cuda_sample_outcomes(const cuda_backend *cb)
{
    const cuda_sampler *s = cb->sampler;
    return s && s->dev ? (const smp_outcome *)(s->dev + s->o_out) : NULL;
}

int cuda_op_sample(backend *b, float *logits, int n_rows, int64_t n_vocab, const smp_row *rows,
                   const smp_bias *bias, const smp_pen *pen, const uint32_t *mask,
                   smp_outcome *out, memra_err *err)
{
    cuda_backend *cb = cuda_of(b);
    cuda_xshadow_drop(cb);
    if (!logits && !cb->failed)
        return memra_fail(err, "sample: %d rows of %" PRId64 " logits", n_rows, n_vocab);
    if (cuda_sample_upload(cb, n_rows, n_vocab, rows, bias, pen, mask, err) != 0)
        return -1;
    if (cuda_sample_launch(cb, logits, n_rows, n_vocab) != 0 ||
        cuda_sample_read(cb, n_rows, out) != 0) {
        *err = cb->err;
        return -1;
    }
    return 0;
}
