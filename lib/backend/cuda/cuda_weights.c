/* Weights on the device: each checkpoint tensor is uploaded once at load,
 * repacked into the layout its kernels read (kernels/weight_layout.h:
 * 16-byte aligned rows, split-off block scales for Q8_0 / Q4_0 / Q6_K /
 * NVFP4 / MXFP8).
 * Vector weights (norms, biases) also get an f32 copy decoded on the host
 * by the reference decoders, so the ops that read them see exactly the
 * CPU's values. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "core/check.h"
#include "format/dequant.h"

/* Host bytes repacked per upload: bounds the extra host memory a large
 * tensor costs at load. */
#define REPACK_CHUNK_BYTES ((size_t)64 << 20)

static int format_of(dtype t, cw_format *f)
{
    switch (t) {
    case DT_F32: *f = CW_F32; return 0;
    case DT_F16: *f = CW_F16; return 0;
    case DT_BF16: *f = CW_BF16; return 0;
    case DT_Q8_0: *f = CW_Q8_0; return 0;
    case DT_Q4_0: *f = CW_Q4_0; return 0;
    case DT_Q4_K: *f = CW_Q4_K; return 0;
    case DT_Q5_K: *f = CW_Q5_K; return 0;
    case DT_Q6_K: *f = CW_Q6_K; return 0;
    case DT_NVFP4: *f = CW_NVFP4; return 0;
    case DT_MXFP8: *f = CW_MXFP8; return 0;
    default: return -1;
    }
}

void cuda_repack_row(cw_format f, const uint8_t *src, size_t row_bytes, int64_t cols,
                     uint8_t *dst)
{
    int64_t nb = cols / cw_block_elems(f);
    size_t soff = cw_scale_offset(f, cols);
    switch (f) {
    case CW_Q8_0:
        for (int64_t j = 0; j < nb; j++) {
            memcpy(dst + 32 * j, src + 34 * j + 2, 32);
            memcpy(dst + soff + 2 * j, src + 34 * j, 2);
        }
        break;
    case CW_Q4_0:
        for (int64_t j = 0; j < nb; j++) {
            memcpy(dst + 16 * j, src + 18 * j + 2, 16);
            memcpy(dst + soff + 2 * j, src + 18 * j, 2);
        }
        break;
    case CW_Q6_K:
        for (int64_t j = 0; j < nb; j++) {
            memcpy(dst + 208 * j, src + 210 * j, 208);
            memcpy(dst + soff + 2 * j, src + 210 * j + 208, 2);
        }
        break;
    case CW_NVFP4: /* d[4] then qs[32] */
        for (int64_t j = 0; j < nb; j++) {
            memcpy(dst + 32 * j, src + 36 * j + 4, 32);
            memcpy(dst + soff + 4 * j, src + 36 * j, 4);
        }
        break;
    case CW_MXFP8: /* e then 32 E4M3 bytes */
        for (int64_t j = 0; j < nb; j++) {
            memcpy(dst + 32 * j, src + 33 * j + 1, 32);
            dst[soff + (size_t)j] = src[33 * j];
        }
        break;
    default: /* float formats, Q4_K, Q5_K: the bytes as stored */
        memcpy(dst, src, row_bytes);
        break;
    }
}

static int upload_matrix(cuda_backend *cb, const bk_weight *w, cuda_weight *cw, memra_err *err)
{
    cw_format f = (cw_format)cw->m.fmt;
    size_t stride = cw->m.stride;
    size_t total = (size_t)w->rows * stride;
    char what[512];
    snprintf(what, sizeof what, "tensor '%s' (%s, %" PRId64 " x %" PRId64 ")", w->name,
             dtype_get(w->type)->name, w->rows, w->cols);
    void *dev;
    if (cuda_alloc(cb, &dev, total, what, 0, err) != 0)
        return -1;
    cw->m.data = dev;
    if (stride == w->row_bytes && !cw_split_scale(f))
        return cuda_upload_sync(cb, dev, w->data, total, err);
    int64_t chunk = (int64_t)(REPACK_CHUNK_BYTES / stride);
    if (chunk < 1)
        chunk = 1;
    if (chunk > w->rows)
        chunk = w->rows;
    uint8_t *buf = xmalloc((size_t)chunk * stride);
    int rc = 0;
    for (int64_t r0 = 0; r0 < w->rows && rc == 0; r0 += chunk) {
        int64_t nr = w->rows - r0 < chunk ? w->rows - r0 : chunk;
        memset(buf, 0, (size_t)nr * stride);
        for (int64_t r = 0; r < nr; r++)
            cuda_repack_row(f, w->data + (size_t)(r0 + r) * w->row_bytes, w->row_bytes, w->cols,
                       buf + (size_t)r * stride);
        rc = cuda_upload_sync(cb, (uint8_t *)dev + (size_t)r0 * stride, buf, (size_t)nr * stride,
                              err);
    }
    free(buf);
    return rc;
}

static int upload_vector(cuda_backend *cb, const bk_weight *w, cuda_weight *cw, memra_err *err)
{
    float *host = xmalloc((size_t)w->cols * sizeof(float));
    if (dequant_row(w->type, w->data, host, w->cols, err) != 0) {
        free(host);
        return memra_wrap(err, "tensor '%s'", w->name);
    }
    char what[512];
    snprintf(what, sizeof what, "tensor '%s' as f32 (%" PRId64 " values)", w->name, w->cols);
    void *dev;
    int rc = cuda_alloc(cb, &dev, (size_t)w->cols * sizeof(float), what, 0, err);
    if (rc == 0) {
        cw->vec = dev;
        rc = cuda_upload_sync(cb, dev, host, (size_t)w->cols * sizeof(float), err);
    }
    free(host);
    return rc;
}

static void weight_free(cuda_weight *cw)
{
    cudaFree((void *)cw->m.data);
    cudaFree(cw->vec);
    free(cw);
}

int cuda_weight_prepare(backend *b, bk_weight *w, memra_err *err)
{
    cuda_backend *cb = cuda_of(b);
    const dtype_info *ti = dtype_get(w->type);
    cw_format f;
    if (format_of(w->type, &f) != 0)
        return memra_fail(err, "tensor '%s': type %s is not supported by the CUDA backend "
                          "(it reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, NVFP4, "
                          "MXFP8)",
                          w->name, ti ? ti->name : "unknown");
    int64_t rb = dtype_row_bytes(w->type, w->cols);
    if (rb < 0)
        return memra_fail(err, "tensor '%s': rows of %" PRId64 " %s values are not whole blocks "
                          "of %d", w->name, w->cols, ti->name, ti->block_size);
    if ((size_t)rb != w->row_bytes)
        return memra_fail(err, "tensor '%s': row of %zu bytes, expected %" PRId64, w->name,
                          w->row_bytes, rb);
    if (w->rows <= 0 || w->cols <= 0)
        return memra_fail(err, "tensor '%s': empty (%" PRId64 " x %" PRId64 ")", w->name, w->rows,
                          w->cols);
    if (cb->failed) {
        *err = cb->err;
        return -1;
    }
    cuda_weight *cw = xcalloc(1, sizeof *cw);
    cw->owner = cb;
    cw->name = w->name;
    cw->type = w->type;
    cw->m.fmt = f;
    cw->m.rows = w->rows;
    cw->m.cols = w->cols;
    cw->m.stride = cw_row_stride(f, w->cols);
    cw->m.scale_off = cw_scale_offset(f, w->cols);
    if (upload_matrix(cb, w, cw, err) != 0 || (w->rows == 1 && upload_vector(cb, w, cw, err) != 0)) {
        weight_free(cw);
        return -1;
    }
    cb->weight_bytes += (uint64_t)w->rows * cw->m.stride + (cw->vec ? (uint64_t)w->cols * 4 : 0);
    cw->next = cb->weights;
    cb->weights = cw;
    w->dev = cw;
    return 0;
}

void cuda_weights_free(cuda_backend *cb)
{
    while (cb->weights) {
        cuda_weight *n = cb->weights->next;
        weight_free(cb->weights);
        cb->weights = n;
    }
}

const cuda_weight *cuda_weight_of(cuda_backend *cb, const bk_weight *w, const char *op)
{
    const cuda_weight *cw = w ? (const cuda_weight *)w->dev : NULL;
    if (!cw || cw->owner != cb) {
        cuda_failf(cb, "%s: tensor '%s' was not prepared by this CUDA backend", op,
                   w && w->name ? w->name : "(unnamed)");
        return NULL;
    }
    return cw;
}

const float *cuda_vec_of(cuda_backend *cb, const bk_weight *w, const char *op)
{
    if (!bk_weight_present(w))
        return NULL;
    const cuda_weight *cw = cuda_weight_of(cb, w, op);
    if (!cw)
        return NULL;
    if (!cw->vec) {
        cuda_failf(cb, "%s: tensor '%s' (%" PRId64 " x %" PRId64 ") is not a vector", op, w->name,
                   w->rows, w->cols);
        return NULL;
    }
    return cw->vec;
}
