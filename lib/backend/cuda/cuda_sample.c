/* Sampling on the device (backend_ops.sample): the rows' parameters, the
 * logit-bias and penalty lists go up in one copy, kernels/sample.cu picks
 * one token per row from the logits where the head left them, and only
 * the outcomes (an id and a status per row) come back. The token is the
 * one the host sampler would pick from the same logits (the arithmetic is
 * lib/engine/sample_math.h's, shared by both).
 *
 * The staging buffers (pinned host, device) grow and never shrink, so
 * their addresses stay put from step to step: the launch reads everything,
 * seed and stream position included, from device memory and can be
 * captured in a CUDA graph. The one wait is for the outcomes. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "core/check.h"
#include "kernels/sample.cuh"

struct cuda_sampler {
    uint8_t *host; /* pinned */
    void *dev;
    size_t cap;
};

static size_t align16(size_t n) { return (n + 15) & ~(size_t)15; }

void cuda_sample_free(cuda_backend *cb)
{
    if (!cb->sampler)
        return;
    cudaFreeHost(cb->sampler->host);
    cudaFree(cb->sampler->dev);
    free(cb->sampler);
    cb->sampler = NULL;
}

/* Room for `bytes` in both staging buffers; waits for queued work before
 * replacing them. */
static int stage_reserve(cuda_backend *cb, size_t bytes)
{
    if (!cb->sampler)
        cb->sampler = xcalloc(1, sizeof *cb->sampler);
    cuda_sampler *s = cb->sampler;
    if (bytes <= s->cap)
        return 0;
    if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
        return -1;
    cudaFreeHost(s->host);
    cudaFree(s->dev);
    s->host = NULL;
    s->dev = NULL;
    s->cap = 0;
    size_t want = bytes < 16384 ? 16384 : bytes + bytes / 2;
    void *h = NULL;
    if (CU_OK(cb, cudaMallocHost(&h, want)) ||
        cuda_alloc(cb, &s->dev, want, "the sampler's parameters", 1, NULL) != 0) {
        cudaFreeHost(h);
        return -1;
    }
    s->host = h;
    s->cap = want;
    return 0;
}

/* Each row's lists inside the given lists, every id inside the
 * vocabulary: the kernel writes logits at those ids. */
static int check_rows(int n_rows, int64_t n_vocab, const smp_row *rows, const smp_bias *bias,
                      const smp_pen *pen, int32_t *n_bias, int32_t *n_pen, memra_err *err)
{
    int64_t nb = 0, np = 0;
    for (int i = 0; i < n_rows; i++) {
        const smp_row *r = &rows[i];
        if (r->n_bias < 0 || r->n_pen < 0 || r->bias_at < 0 || r->pen_at < 0 ||
            (r->n_bias > 0 && !bias) || (r->n_pen > 0 && !pen))
            return memra_fail(err, "sample: row %d has a bad bias or penalty list", i);
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
    if (nb > INT32_MAX || np > INT32_MAX)
        return memra_fail(err, "sample: %" PRId64 " bias and %" PRId64 " penalty entries are "
                          "too many", nb, np);
    *n_bias = (int32_t)nb;
    *n_pen = (int32_t)np;
    return 0;
}

int cuda_op_sample(backend *b, float *logits, int n_rows, int64_t n_vocab, const smp_row *rows,
                   const smp_bias *bias, const smp_pen *pen, smp_outcome *out, memra_err *err)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->failed) {
        *err = cb->err;
        return -1;
    }
    if (n_rows <= 0 || n_vocab <= 0 || n_vocab >= INT32_MAX || !logits)
        return memra_fail(err, "sample: %d rows of %" PRId64 " logits", n_rows, n_vocab);
    int32_t nb = 0, np = 0;
    if (check_rows(n_rows, n_vocab, rows, bias, pen, &nb, &np, err) != 0)
        return -1;
    size_t o_rows = 0, o_bias = align16((size_t)n_rows * sizeof *rows);
    size_t o_pen = o_bias + align16((size_t)nb * sizeof *bias);
    size_t o_out = o_pen + align16((size_t)np * sizeof *pen);
    size_t total = o_out + (size_t)n_rows * sizeof *out;
    if (stage_reserve(cb, total) != 0) {
        *err = cb->err;
        return -1;
    }
    cuda_sampler *s = cb->sampler;
    memcpy(s->host + o_rows, rows, (size_t)n_rows * sizeof *rows);
    if (nb)
        memcpy(s->host + o_bias, bias, (size_t)nb * sizeof *bias);
    if (np)
        memcpy(s->host + o_pen, pen, (size_t)np * sizeof *pen);
    uint8_t *d = s->dev;
    if (CU_OK(cb, cudaMemcpyAsync(d, s->host, o_out, cudaMemcpyHostToDevice, cb->stream)) ||
        CU_OK(cb, launch_sample(logits, n_vocab, n_rows, (const smp_row *)(d + o_rows),
                                (const smp_bias *)(d + o_bias), (const smp_pen *)(d + o_pen),
                                (smp_outcome *)(d + o_out), cb->stream)) ||
        CU_OK(cb, cudaMemcpyAsync(s->host + o_out, d + o_out, (size_t)n_rows * sizeof *out,
                                  cudaMemcpyDeviceToHost, cb->stream)) ||
        CU_OK(cb, cudaStreamSynchronize(cb->stream))) {
        *err = cb->err;
        return -1;
    }
    memcpy(out, s->host + o_out, (size_t)n_rows * sizeof *out);
    return 0;
}
