/* The CPU reference backend: setup, weights, scratch, and the small
 * elementwise ops. Weights stay in their stored format in the checkpoint's
 * map and are dequantized a row at a time as the format defines. */
#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_panel.h"

#include <math.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "format/dequant.h"
#include "numerics/half.h"

/* ---- weight rows ---- */

/* Every f16 bit pattern's value: widening is exact, and a table lookup is
 * the cheapest exact way to read f16 matrices row after row. */
static float f16_table[65536];
static pthread_once_t f16_once = PTHREAD_ONCE_INIT;

static void f16_table_init(void)
{
    for (uint32_t i = 0; i < 65536; i++)
        f16_table[i] = fp16_to_f32((uint16_t)i);
}

int cpu_type_supported(dtype t)
{
    switch (t) {
    case DT_F32: case DT_F16: case DT_BF16: case DT_Q8_0: case DT_Q4_0: case DT_Q4_K:
    case DT_Q5_K: case DT_Q6_K: case DT_NVFP4: case DT_MXFP8:
        return 1;
    default:
        return 0;
    }
}

const float *cpu_weight_row(const bk_weight *w, int64_t r, float *buf)
{
    const uint8_t *p = w->data + (size_t)r * w->row_bytes;
    int64_t n = w->cols;
    switch (w->type) {
    case DT_F32:
        if (((uintptr_t)p & 3u) == 0)
            return (const float *)(const void *)p;
        memcpy(buf, p, (size_t)n * 4);
        return buf;
    case DT_F16:
        for (int64_t i = 0; i < n; i++)
            buf[i] = f16_table[p[2 * i] | (p[2 * i + 1] << 8)];
        return buf;
    case DT_BF16:
        /* bf16 is the top half of an f32: a shift, which the compiler
         * vectorizes when the 16-bit loads are aligned (little-endian host). */
        if (((uintptr_t)p & 1u) == 0) {
            const uint16_t *h = (const uint16_t *)(const void *)p;
            for (int64_t i = 0; i < n; i++) {
                uint32_t bits = (uint32_t)h[i] << 16;
                memcpy(&buf[i], &bits, 4);
            }
        } else {
            for (int64_t i = 0; i < n; i++) {
                uint32_t bits = (uint32_t)(p[2 * i] | (p[2 * i + 1] << 8)) << 16;
                memcpy(&buf[i], &bits, 4);
            }
        }
        return buf;
    default:
        /* Types and row lengths were checked by weight_prepare. */
        dequant_row(w->type, p, buf, n, NULL);
        return buf;
    }
}

const float *cpu_weight_vec(cpu_backend *c, int slot, const bk_weight *w)
{
    if (!bk_weight_present(w))
        return NULL;
    float *buf = cpu_vec(c, slot, (size_t)w->cols);
    return cpu_weight_row(w, 0, buf);
}

/* ---- arithmetic shared by the ops ---- */

float cpu_dot(const float *a, const float *b, int64_t n)
{
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            acc[j] += a[i + j] * b[i + j];
    float tail = 0;
    for (; i < n; i++)
        tail += a[i] * b[i];
    return (((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))) +
           tail;
}

float cpu_silu(float x)
{
    return x / (1.0f + expf(-x));
}

/* transformers' gelu_pytorch_tanh. */
float cpu_gelu_tanh(float x)
{
    const float k = 0.7978845608028654f; /* sqrt(2 / pi) */
    return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

static float cpu_activation(bk_act act, float x)
{
    return act == BK_ACT_GELU_TANH ? cpu_gelu_tanh(x) : cpu_silu(x);
}

/* ---- scratch ---- */

void cpu_scratch_reserve(cpu_backend *c, size_t n)
{
    if (n <= c->scratch_cap)
        return;
    for (int t = 0; t < c->n_threads; t++) {
        free(c->scratch[t]);
        c->scratch[t] = xmalloc(n * sizeof(float));
    }
    c->scratch_cap = n;
}

float *cpu_vec(cpu_backend *c, int slot, size_t n)
{
    MEMRA_ASSERT(slot >= 0 && slot < CPU_VEC_SLOTS);
    if (n > c->vec_cap[slot]) {
        free(c->vec[slot]);
        c->vec[slot] = xmalloc(n * sizeof(float));
        c->vec_cap[slot] = n;
    }
    return c->vec[slot];
}

/* ---- the vtable's simple entries ---- */

static void cpu_destroy(backend *b)
{
    cpu_backend *c = cpu_of(b);
    pool_destroy(c->pool);
    for (int t = 0; t < c->n_threads; t++)
        free(c->scratch[t]);
    free(c->scratch);
    for (int i = 0; i < CPU_VEC_SLOTS; i++)
        free(c->vec[i]);
    cpu_moe_free(c);
    cpu_fast_free(c);
    for (int i = 0; i < c->n_packed; i++)
        free(c->packed[i]);
    free(c->packed);
    free(c);
    free(b);
}

/* ---- the fast path's panel copies ---- */

typedef struct {
    const bk_weight *w;
    uint8_t *dst;
    int64_t rows_per_task;
} pack_job;

static void pack_task(void *ctx, int task, int thread)
{
    (void)thread;
    const pack_job *j = ctx;
    int64_t r0 = (int64_t)task * j->rows_per_task, r1 = r0 + j->rows_per_task;
    if (r1 > j->w->rows)
        r1 = j->w->rows;
    for (int64_t r = r0; r < r1; r++)
        cpu_panel_pack_row(j->w->type, j->w->data + (size_t)r * j->w->row_bytes, j->w->cols,
                           j->dst + (size_t)r * j->w->packed_row_bytes);
}

/* The fast path repacks a matrix its level has panel kernels for into
 * the panel layout (cpu_panel.h), once; the checkpoint's bytes stay
 * where they are for everything else that reads them (embedding rows,
 * the reference). */
static void cpu_pack_weight(cpu_backend *c, bk_weight *w)
{
    if (!c->fast || w->packed || !w->data || w->rows < 1 ||
        !cpu_panel_kernel_for_type(c->fast, w->type) || !cpu_panel_fits(w->type, w->cols))
        return;
    w->packed_row_bytes = (size_t)(w->cols / CPU_PANEL) * cpu_panel_bytes(w->type);
    size_t bytes = (size_t)w->rows * w->packed_row_bytes;
    /* 2 MiB-aligned and marked for transparent huge pages where the
     * kernel offers them: a few thousand page faults for an 8B model's
     * copy rather than a million, and fewer TLB misses as decode streams
     * it. */
    size_t huge = (size_t)2 << 20;
    size_t alloc = bytes >= huge ? (bytes + huge - 1) / huge * huge : (bytes + 63) / 64 * 64;
    uint8_t *dst = aligned_alloc(bytes >= huge ? huge : 64, alloc);
    if (!dst)
        memra_assert_fail("aligned_alloc", __FILE__, __LINE__);
#ifdef MADV_HUGEPAGE
    if (bytes >= huge)
        madvise(dst, alloc, MADV_HUGEPAGE);
#endif
    pack_job j = {w, dst, 0};
    int n_tasks = c->n_threads * 4;
    j.rows_per_task = (w->rows + n_tasks - 1) / n_tasks;
    n_tasks = (int)((w->rows + j.rows_per_task - 1) / j.rows_per_task);
    pool_run(c->pool, n_tasks, pack_task, &j);
#ifdef MADV_PAGEOUT
    /* The stored bytes are read again only for embedding rows: hand the
     * pages of a mapped checkpoint back (never destructive: memory that is
     * not a file's keeps its bytes), so the process holds one copy. */
    uintptr_t page = 4096, lo = ((uintptr_t)w->data + page - 1) & ~(page - 1);
    uintptr_t hi = ((uintptr_t)w->data + (size_t)w->rows * w->row_bytes) & ~(page - 1);
    if (hi > lo)
        madvise((void *)lo, hi - lo, MADV_PAGEOUT);
#endif
    if (c->n_packed == c->packed_cap) {
        c->packed_cap = c->packed_cap ? 2 * c->packed_cap : 64;
        c->packed = xrealloc(c->packed, (size_t)c->packed_cap * sizeof *c->packed);
    }
    c->packed[c->n_packed++] = dst;
    w->packed = dst;
}

static int cpu_weight_prepare(backend *b, bk_weight *w, memra_err *err)
{
    const dtype_info *ti = dtype_get(w->type);
    if (!cpu_type_supported(w->type))
        return memra_fail(err, "tensor '%s': type %s is not supported by the CPU backend "
                          "(it reads F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, NVFP4, MXFP8)",
                          w->name, ti ? ti->name : "unknown");
    int64_t rb = dtype_row_bytes(w->type, w->cols);
    if (rb < 0)
        return memra_fail(err, "tensor '%s': rows of %lld %s values are not whole blocks of %d",
                          w->name, (long long)w->cols, ti->name, ti->block_size);
    if ((size_t)rb != w->row_bytes)
        return memra_fail(err, "tensor '%s': row of %lld bytes, expected %lld", w->name,
                          (long long)w->row_bytes, (long long)rb);
    cpu_pack_weight(cpu_of(b), w);
    return 0;
}

/* Activations start on a cache line: the fast path's kernels load x 64
 * bytes at a time and copy an unaligned x to an aligned one first. calloc
 * keeps a large buffer's pages untouched until used (the logits of a
 * prompt chunk are tens of MB); the block's own start is kept just before
 * the aligned one, for cpu_act_free. */
static float *cpu_act_alloc(backend *b, size_t n)
{
    (void)b;
    uint8_t *base = xcalloc((n ? n : 1) * sizeof(float) + 64 + sizeof(void *), 1);
    uintptr_t at = ((uintptr_t)base + sizeof(void *) + 63) & ~(uintptr_t)63;
    memcpy((void *)(at - sizeof(void *)), &base, sizeof base);
    return (float *)at;
}

static void cpu_act_free(backend *b, float *p)
{
    (void)b;
    if (!p)
        return;
    void *base;
    memcpy(&base, (uint8_t *)p - sizeof base, sizeof base);
    free(base);
}

static void cpu_act_read(backend *b, const float *src, float *dst, size_t n)
{
    (void)b;
    memcpy(dst, src, n * sizeof(float));
}

static void cpu_act_write(backend *b, float *dst, const float *src, size_t n)
{
    (void)b;
    memcpy(dst, src, n * sizeof(float));
}

/* Another CPU backend's activation (a pipeline stage's or a
 * tensor-parallel rank's): the same host memory, copied directly. */
static int cpu_act_import(backend *b, float *dst, backend *from, const float *src, size_t n)
{
    if (from->ops != b->ops)
        return -1;
    memcpy(dst, src, n * sizeof(float));
    return 0;
}

static void cpu_embed(backend *b, const bk_weight *table, const int32_t *tokens, int n,
                      float scale, float *out)
{
    cpu_backend *c = cpu_of(b);
    int64_t d = table->cols;
    float *buf = cpu_vec(c, 0, (size_t)d);
    for (int i = 0; i < n; i++) {
        const float *row = cpu_weight_row(table, tokens[i], buf);
        float *o = out + (size_t)i * d;
        for (int64_t j = 0; j < d; j++)
            o[j] = scale == 1.0f ? row[j] : row[j] * scale;
    }
}

static void cpu_add(backend *b, float *x, const float *y, size_t n)
{
    (void)b;
    for (size_t i = 0; i < n; i++)
        x[i] += y[i];
}

static void cpu_softcap(backend *b, float *x, size_t n, float cap)
{
    (void)b;
    for (size_t i = 0; i < n; i++)
        x[i] = tanhf(x[i] / cap) * cap;
}

static void cpu_scale(backend *b, float *x, size_t n, float s)
{
    (void)b;
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}

static void cpu_gather_cols(backend *b, const float *src, int n, int64_t n_src,
                            const int32_t *map, int64_t n_dst, float fill, float *out)
{
    (void)b;
    for (int r = 0; r < n; r++) {
        const float *sr = src + (size_t)r * (size_t)n_src;
        float *o = out + (size_t)r * (size_t)n_dst;
        for (int64_t c = 0; c < n_dst; c++)
            o[c] = map[c] >= 0 ? sr[map[c]] : fill;
    }
}

static void cpu_act_mul(backend *b, float *x, const float *y, int n, int64_t cols,
                        int64_t y_stride, bk_act act)
{
    (void)b;
    for (int i = 0; i < n; i++) {
        float *xr = x + (size_t)i * (size_t)cols;
        const float *yr = y + (size_t)i * (size_t)y_stride;
        for (int64_t j = 0; j < cols; j++)
            xr[j] = cpu_activation(act, xr[j]) * yr[j];
    }
}

/* A prompt chunk's tokens a step where the level multiplies a prompt on
 * tiles (amx: each tile of 16 rows is unpacked once per call, so a longer
 * chunk pays it over more tokens): 128. On the 2-core Xeon VM, Qwen3-0.6B,
 * pp512 with chunks of 64 / 128: Q4_K_M 404 / 408 / 387 -> 452 / 447 /
 * 449 tok/s, Q8_0 477 / 474 / 481 -> 519 / 511 / 521, BF16 204 / 204 ->
 * 219 / 219 (decision 0040). Elsewhere the engine's default (0). */
static int cpu_preferred_batch(backend *b)
{
    const cpu_kernels *k = cpu_of(b)->fast;
    return k && k->isa == CPU_ISA_AMX ? 128 : 0;
}

static const backend_ops cpu_ops = {
    .destroy = cpu_destroy,
    .weight_prepare = cpu_weight_prepare,
    .act_alloc = cpu_act_alloc,
    .act_free = cpu_act_free,
    .act_read = cpu_act_read,
    .act_write = cpu_act_write,
    .act_import = cpu_act_import,
    .embed = cpu_embed,
    .rmsnorm = cpu_op_rmsnorm,
    .matmul = cpu_op_matmul,
    .attn_qkv = cpu_op_attn_qkv,
    .delta_in_proj = cpu_op_delta_in_proj,
    .qk_norm_rope = cpu_op_qk_norm_rope,
    .attention = cpu_op_attention,
    .ffn_glu = cpu_op_ffn_glu,
    .ffn_moe = cpu_op_ffn_moe,
    .add = cpu_add,
    .softcap = cpu_softcap,
    .scale = cpu_scale,
    .gather_cols = cpu_gather_cols,
    .act_mul = cpu_act_mul,
    .mul_sigmoid = cpu_op_mul_sigmoid,
    .split_heads = cpu_op_split_heads,
    .join_heads = cpu_op_join_heads,
    .delta_net = cpu_op_delta_net,
    .state_copy = cpu_op_state_copy,
    .preferred_batch = cpu_preferred_batch,
};

/* Both kinds share this setup and every op; `fast` routes the weight
 * products through the SIMD kernels (cpu_fast.h). b->name is "cpu" for
 * both: the engine's CPU-only wrappers (imatrix collection) take either. */
static backend *cpu_create(int n_threads, int fast)
{
    pthread_once(&f16_once, f16_table_init);
    cpu_backend *c = xcalloc(1, sizeof *c);
    c->pool = pool_create(n_threads);
    c->n_threads = pool_size(c->pool);
    c->scratch = xcalloc((size_t)c->n_threads, sizeof *c->scratch);
    if (fast)
        c->fast = cpu_fast_kernels();
    backend *b = xcalloc(1, sizeof *b);
    b->name = "cpu";
    b->ops = &cpu_ops;
    b->n_threads = c->n_threads;
    b->impl = c;
    return b;
}

backend *backend_cpu_create(int n_threads) { return cpu_create(n_threads, 1); }

backend *backend_cpu_ref_create(int n_threads) { return cpu_create(n_threads, 0); }
