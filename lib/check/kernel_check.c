/* The kernel check's harness: the two backends, random weights and
 * inputs, the report lines, and the error paths. The op checks are in
 * kernel_check_ops.c. */
#include "check/kernel_check.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "check/kernel_check_internal.h"
#include "core/check.h"
#include "numerics/half.h"

/* ---- inputs ---- */

void kc_fill(kc *k, float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++) {
        float v = 0.1f + 0.9f * rng_uniform(&k->rng);
        x[i] = (rng_next_u64(&k->rng) & 1 ? v : -v) * scale;
    }
}

static void put_f16(uint8_t *p, float v)
{
    uint16_t h = f32_to_fp16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* Random quant bytes with small finite positive scales, or random float
 * values: every block is valid and no value is NaN. */
static uint8_t *random_weight_bytes(kc *k, dtype t, int64_t rows, int64_t cols, size_t *row_bytes)
{
    const dtype_info *ti = dtype_get(t);
    *row_bytes = (size_t)dtype_row_bytes(t, cols);
    size_t nb = *row_bytes * (size_t)rows;
    uint8_t *p = xmalloc(nb + 1); /* + 1: odd start for the F32 unaligned case */
    uint8_t *d = p;
    for (size_t i = 0; i < nb; i++)
        d[i] = (uint8_t)rng_next_u64(&k->rng);
    int64_t blocks = (int64_t)(nb / (size_t)ti->type_size);
    for (int64_t b = 0; b < blocks; b++) {
        uint8_t *blk = d + b * ti->type_size;
        float v;
        kc_fill(k, &v, 1, 1.0f);
        switch (t) {
        case DT_F32: memcpy(blk, &v, 4); break;
        case DT_F16: put_f16(blk, v); break;
        case DT_BF16: {
            uint16_t h = f32_to_bf16(v);
            memcpy(blk, &h, 2);
            break;
        }
        case DT_Q8_0: case DT_Q4_0: put_f16(blk, 0.001f + 0.02f * rng_uniform(&k->rng)); break;
        case DT_Q4_K: case DT_Q5_K:
            put_f16(blk, 0.001f + 0.01f * rng_uniform(&k->rng));
            put_f16(blk + 2, 0.001f + 0.01f * rng_uniform(&k->rng));
            break;
        case DT_Q6_K: put_f16(blk + 208, 0.001f + 0.01f * rng_uniform(&k->rng)); break;
        case DT_NVFP4: /* UE4M3 scales 2^-7 .. 2^-4 (halved) */
            for (int s = 0; s < 4; s++)
                blk[s] = (uint8_t)(8 + rng_next_u64(&k->rng) % 24);
            break;
        case DT_MXFP8: /* exponent 2^-8 .. 2^-5; no NaN elements */
            blk[0] = (uint8_t)(119 + rng_next_u64(&k->rng) % 4);
            for (int j = 1; j < 33; j++)
                if ((blk[j] & 0x7F) == 0x7F)
                    blk[j] ^= 1;
            break;
        default: break;
        }
    }
    return p;
}

int kc_weight(kc *k, bk_weight *w, dtype t, int64_t rows, int64_t cols, const char *name)
{
    memset(w, 0, sizeof *w);
    w->name = name;
    w->type = t;
    w->rows = rows;
    w->cols = cols;
    w->data = random_weight_bytes(k, t, rows, cols, &w->row_bytes);
    memra_err err;
    if (k->cpu->ops->weight_prepare(k->cpu, w, &err) != 0 ||
        k->gpu->ops->weight_prepare(k->gpu, w, &err) != 0) {
        kc_report_ok(k, "weight", name, 0, err.msg);
        kc_weight_free(w);
        return -1;
    }
    return 0;
}

void kc_weight_free(bk_weight *w)
{
    free((void *)w->data);
    w->data = NULL;
}

float *kc_dev(kc *k, const float *host, size_t n)
{
    float *d = k->gpu->ops->act_alloc(k->gpu, n);
    backend_cuda_act_write(k->gpu, d, host, n);
    return d;
}

float *kc_read(kc *k, const float *dev, size_t n)
{
    float *h = xmalloc((n ? n : 1) * sizeof(float));
    k->gpu->ops->act_read(k->gpu, dev, h, n);
    return h;
}

void kc_dev_free(kc *k, float *dev)
{
    k->gpu->ops->act_free(k->gpu, dev);
}

double kc_rel_err(const float *got, const float *ref, size_t n)
{
    double md = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(ref[i]) && !isfinite(got[i]))
            return INFINITY;
        double d = fabs((double)got[i] - (double)ref[i]);
        if (d > md)
            md = d;
        if (fabs(ref[i]) > mr)
            mr = fabs(ref[i]);
    }
    return md / (mr > 1e-30 ? mr : 1e-30);
}

int kc_selected(kc *k, const char *op)
{
    if (k->o->skip && strstr(op, k->o->skip))
        return 0;
    return !k->o->only || strstr(op, k->o->only) != NULL;
}

/* ---- report ---- */

void kc_report(kc *k, const char *op, const char *what, double err, double bound, int inv,
               double us, double bytes)
{
    memra_err st;
    int dev_ok = backend_status(k->gpu, &st) == 0;
    int ok = dev_ok && err <= bound && inv != 0;
    k->n_checks++;
    k->n_failed += !ok;
    fprintf(k->out, "%-13s %-34s err %8.2e <= %7.1e  %-13s", op, what, err, bound,
            inv < 0 ? "" : inv ? "batch-invar" : "BATCH-DIFFERS");
    if (k->o->perf && us >= 0)
        fprintf(k->out, " %9.2f us %8.1f GB/s", us, bytes / (us * 1e-6) / 1e9);
    fprintf(k->out, "  %s\n", ok ? "ok" : "FAIL");
    if (!dev_ok)
        fprintf(k->out, "  device: %s\n", st.msg);
    fflush(k->out);
}

void kc_report_ok(kc *k, const char *op, const char *what, int ok, const char *detail)
{
    k->n_checks++;
    k->n_failed += !ok;
    fprintf(k->out, "%-13s %-34s %s  %s\n", op, what, detail, ok ? "ok" : "FAIL");
    fflush(k->out);
}

void kc_report_skip(kc *k, const char *op, const char *what, const char *why)
{
    k->n_skipped++;
    fprintf(k->out, "%-13s %-34s %s  skipped\n", op, what, why);
    fflush(k->out);
}

/* ---- error paths ---- */

static void check_errors(kc *k, int device)
{
    memra_err err = {{0}};
    /* A type the backend does not read: named with its tensor. */
    bk_weight w = {.name = "blk.0.ffn_up.weight", .type = DT_Q4_1, .rows = 4, .cols = 32};
    w.row_bytes = (size_t)dtype_row_bytes(DT_Q4_1, 32);
    uint8_t junk[4 * 20] = {0};
    w.data = junk;
    int rc = k->gpu->ops->weight_prepare(k->gpu, &w, &err);
    kc_report_ok(k, "errors", "unsupported type (Q4_1)",
                 rc != 0 && strstr(err.msg, "blk.0.ffn_up.weight") && strstr(err.msg, "Q4_1"),
                 err.msg);
    /* Device memory exhausted: the tensor, its size and the bytes free.
     * (64 TiB is refused before any byte of the dummy data is read.) */
    bk_weight big = {.name = "huge.weight", .type = DT_F32, .rows = (int64_t)1 << 24,
                     .cols = (int64_t)1 << 20};
    big.row_bytes = (size_t)big.cols * 4;
    big.data = junk;
    memset(&err, 0, sizeof err);
    rc = k->gpu->ops->weight_prepare(k->gpu, &big, &err);
    kc_report_ok(k, "errors", "out of device memory (64 TiB)",
                 rc != 0 && strstr(err.msg, "out of device memory") &&
                     strstr(err.msg, "huge.weight") && strstr(err.msg, "70368744177664 bytes"),
                 err.msg);
    /* The backend stays usable after a refused upload. */
    kc_report_ok(k, "errors", "usable after a refused upload", backend_status(k->gpu, &err) == 0,
                 "status clean");

    /* On a throwaway backend: an op on a weight it did not prepare fails
     * the backend, later ops are skipped, reads give NaN, status names it. */
    backend *b = backend_cuda_create(device, &err);
    if (!b) {
        kc_report_ok(k, "errors", "second backend", 0, err.msg);
        return;
    }
    bk_weight nw = {.name = "output_norm.weight", .type = DT_F32, .rows = 1, .cols = 8};
    float ones[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    nw.row_bytes = 32;
    nw.data = (const uint8_t *)ones;
    float *x = b->ops->act_alloc(b, 8), host[8];
    backend_cuda_act_write(b, x, ones, 8);
    b->ops->rmsnorm(b, x, 1, &nw, 0.0f, 1e-6f, x);
    b->ops->act_read(b, x, host, 8);
    rc = backend_status(b, &err);
    kc_report_ok(k, "errors", "op on an unprepared weight",
                 rc != 0 && strstr(err.msg, "output_norm.weight") && isnan(host[0]), err.msg);
    /* A failing CUDA call is reported with the call, file and line. */
    b->ops->act_free(b, x);
    backend_destroy(b);
    b = backend_cuda_create(device, &err);
    if (b) {
        cuda_backend *cb = cuda_of(b);
        int n_dev = 0;
        cudaGetDeviceCount(&n_dev);
        CU_OK(cb, cudaSetDevice(n_dev + 7)); /* no such device: fails, changes nothing */
        cudaGetLastError();
        rc = backend_status(b, &err);
        kc_report_ok(k, "errors", "CUDA error names call, file, line",
                     rc != 0 && strstr(err.msg, "cudaSetDevice") &&
                         strstr(err.msg, "kernel_check.c:"),
                     err.msg);
        backend_destroy(b);
        cudaSetDevice(device);
    }
}

/* ---- driver ---- */

int kernel_check_run(const kcheck_opts *o, FILE *out, int *n_failed, memra_err *err)
{
    *n_failed = 0;
    kc k = {0};
    k.o = o;
    k.out = out;
    rng_seed(&k.rng, o->seed, 0x6b65726e656cull);
    k.gpu = backend_cuda_create(o->device, err);
    if (!k.gpu)
        return -1;
    k.cpu = backend_cpu_ref_create(0);
    cuda_backend *cb = cuda_of(k.gpu);
    /* The ops are checked on their f32 paths against the CPU's f32 bounds;
     * the decode GEMM, which rounds x to bf16, has its own check ("dgemm"). */
    cb->tune.dgemm = 0;
    k.stream = cb->stream;
    cudaEventCreate(&k.ev0);
    cudaEventCreate(&k.ev1);
    fprintf(out, "device %d: %s, sm_%d%d, %d SMs, %.1f GiB, class %s\n", cb->info.index,
            cb->info.name, cb->info.cc_major, cb->info.cc_minor, cb->info.sm_count,
            cb->info.total_mem / 1073741824.0, device_class_name(cb->info.klass));
    struct {
        const char *op;
        void (*fn)(kc *);
    } checks[] = {
        {"matmul", kc_check_matmul},   {"embed", kc_check_embed},
        {"rmsnorm", kc_check_rmsnorm}, {"attn_qkv", kc_check_qkv},
        {"qk_norm_rope", kc_check_rope}, {"attention", kc_check_attention},
        {"ffn_glu", kc_check_ffn},     {"ffn_moe", kc_check_moe},
        {"add softcap scale act_mul", kc_check_elementwise}, {"sample", kc_check_sample},
        {"mv_rows fused", kc_check_fused},  {"gemm", kc_check_gemm},
        {"dequant", kc_check_dequant},
        {"flash_prefill", kc_check_flash_prefill},
        {"dgemm", kc_check_dgemm},
        {"delta_net split_heads join_heads mul_sigmoid", kc_check_delta},
    };
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(checks); i++)
        if (kc_selected(&k, checks[i].op))
            checks[i].fn(&k);
    if (kc_selected(&k, "errors"))
        check_errors(&k, o->device);
    if (k.n_checks == 0)
        kc_report_ok(&k, "select", o->only ? o->only : "", 0, "no check has that name");
    if (k.n_failed == 0)
        fprintf(out, "ALL GREEN (%d checks, %d skipped)\n", k.n_checks, k.n_skipped);
    else
        fprintf(out, "%d of %d FAILED (%d skipped)\n", k.n_failed, k.n_checks, k.n_skipped);
    cudaEventDestroy(k.ev0);
    cudaEventDestroy(k.ev1);
    backend_destroy(k.gpu);
    backend_destroy(k.cpu);
    *n_failed = k.n_failed;
    return 0;
}
