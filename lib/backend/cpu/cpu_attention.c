/* RMSNorm, QK-norm + RoPE, and attention over the paged KV cache, on the
 * CPU. Attention is computed per (row, head) by one thread: scores over the
 * row's visible positions, softmax, weighted sum of values, in ascending
 * position order, so a row's output does not depend on what else is in
 * the step. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "numerics/kv_codec.h"

/* Below this much work the calling thread runs every task itself. */
#define ATTN_INLINE_MACS 32768.0
/* Keys the fast path's attention takes at once (cpu_kernels.dot_ref_n). */
#define ATTN_GROUP 8
/* The most query heads of one KV head a task takes. */
#define ATTN_HEADS_MAX 16

/* ---- norms ---- */

/* x / sqrt(mean(x^2) + eps) * (w + w_offset), as transformers' RMSNorm
 * computes it in f32 (the scale applied to x first, then the weight). */
void cpu_rmsnorm_row(const float *x, const float *w, float w_offset, float eps, int64_t n,
                     float *out)
{
    float ss = cpu_dot(x, x, n);
    float inv = 1.0f / sqrtf(ss / (float)n + eps);
    for (int64_t i = 0; i < n; i++)
        out[i] = (x[i] * inv) * (w[i] + w_offset);
}

/* A prompt chunk's rows go to the pool in runs of ROWS_TASK (a decode
 * step's stay on the calling thread); a row's bytes are the same
 * wherever it runs. */
enum { ROWS_TASK = 8 };

static int row_tasks(int n) { return (n + ROWS_TASK - 1) / ROWS_TASK; }

typedef struct {
    const float *x, *w;
    float w_offset, eps;
    int64_t d;
    int n;
    float *out;
} norm_job;

static void norm_task(void *ctx, int task, int thread)
{
    (void)thread;
    const norm_job *j = ctx;
    int i1 = (task + 1) * ROWS_TASK < j->n ? (task + 1) * ROWS_TASK : j->n;
    for (int i = task * ROWS_TASK; i < i1; i++)
        cpu_rmsnorm_row(j->x + (size_t)i * j->d, j->w, j->w_offset, j->eps, j->d,
                        j->out + (size_t)i * j->d);
}

void cpu_op_rmsnorm(backend *b, const float *x, int n, const bk_weight *w, float w_offset,
                    float eps, float *out)
{
    cpu_backend *c = cpu_of(b);
    norm_job j = {x, cpu_weight_vec(c, 0, w), w_offset, eps, w->cols, n, out};
    if (row_tasks(n) > 1)
        pool_run(c->pool, row_tasks(n), norm_task, &j);
    else
        norm_task(&j, 0, 0);
}

/* ---- RoPE ---- */

/* The angle is rounded to f32 before cos/sin, as transformers forms it
 * (inv_freq times the position, in f32). */
void cpu_rope_table(const bk_rope *r, int32_t pos, float *cs)
{
    for (int i = 0; i < r->n_freqs; i++) {
        float ang = r->inv_freq[i] * (float)pos;
        cs[i] = cosf(ang) * r->attn_factor;
        cs[r->n_freqs + i] = sinf(ang) * r->attn_factor;
    }
}

void cpu_rope_head(float *x, const float *cs, int n_freqs, rope_pairing pairing)
{
    const float *cs_sin = cs + n_freqs;
    for (int i = 0; i < n_freqs; i++) {
        int a = pairing == ROPE_PAIR_NEOX ? i : 2 * i;
        int bi = pairing == ROPE_PAIR_NEOX ? i + n_freqs : 2 * i + 1;
        float x1 = x[a], x2 = x[bi], co = cs[i], si = cs_sin[i];
        x[a] = x1 * co - x2 * si;
        x[bi] = x2 * co + x1 * si;
    }
}

typedef struct {
    float *q, *k;
    const bk_batch *rows;
    const bk_attn *a;
    const float *qn, *kn;
    float w_offset, eps;
    const bk_rope *rope;
    float *const *cs; /* [threads] a table of 2 n_freqs floats each */
} rope_job;

static void rope_task(void *ctx, int task, int thread)
{
    const rope_job *j = ctx;
    const bk_attn *a = j->a;
    float *cs = j->cs[thread];
    int hd = a->head_dim;
    int i1 = (task + 1) * ROWS_TASK < j->rows->n ? (task + 1) * ROWS_TASK : j->rows->n;
    for (int i = task * ROWS_TASK; i < i1; i++) {
        cpu_rope_table(j->rope, j->rows->pos[i] + a->q_ahead, cs);
        float *qr = j->q + (size_t)i * a->n_heads * hd;
        for (int h = 0; h < a->n_heads; h++) {
            float *x = qr + (size_t)h * hd;
            if (j->qn)
                cpu_rmsnorm_row(x, j->qn, j->w_offset, j->eps, hd, x);
            cpu_rope_head(x, cs, j->rope->n_freqs, j->rope->pairing);
        }
        float *kr = j->k ? j->k + (size_t)i * a->n_kv_heads * hd : NULL;
        for (int h = 0; kr && h < a->n_kv_heads; h++) {
            float *x = kr + (size_t)h * hd;
            if (j->kn)
                cpu_rmsnorm_row(x, j->kn, j->w_offset, j->eps, hd, x);
            cpu_rope_head(x, cs, j->rope->n_freqs, j->rope->pairing);
        }
    }
}

void cpu_op_qk_norm_rope(backend *b, float *q, float *k, const bk_batch *rows, const bk_attn *a,
                         const bk_weight *q_norm, const bk_weight *k_norm, float w_offset,
                         float eps, const bk_rope *rope)
{
    cpu_backend *c = cpu_of(b);
    MEMRA_ASSERT(!k || a->q_ahead == 0); /* q alone stands ahead (backend.h) */
    /* each thread's rope table in its scratch (attention reserves it again) */
    cpu_scratch_reserve(c, 2 * (size_t)rope->n_freqs);
    rope_job j = {q,   k,        rows, a, cpu_weight_vec(c, 1, q_norm), cpu_weight_vec(c, 2, k_norm),
                  w_offset, eps, rope, c->scratch};
    if (row_tasks(rows->n) > 1)
        pool_run(c->pool, row_tasks(rows->n), rope_task, &j);
    else
        rope_task(&j, 0, 0);
}

/* ---- attention ---- */

/* One row of n <= kv_dim values into the cache (a layer's own width),
 * through the codecs the GPU shares (numerics/kv_codec.h), so both
 * backends store the same bytes. */
static void kv_store(const kv_cache *kc, uint8_t *base, size_t off, const float *src, int64_t n)
{
    MEMRA_ASSERT(base != NULL); /* a tables-only cache belongs to a device backend */
    MEMRA_ASSERT(n <= kc->kv_dim);
    uint8_t *dst = base + off;
    switch (kc->type) {
    case KV_F32: memcpy(dst, src, (size_t)n * 4); break;
    case KV_F16:
        for (int64_t i = 0; i < n; i++)
            kvc_st16(dst + 2 * i, kvc_f32_to_f16(src[i]));
        break;
    case KV_BF16:
        for (int64_t i = 0; i < n; i++)
            kvc_st16(dst + 2 * i, kvc_f32_to_bf16(src[i]));
        break;
    case KV_Q8_0:
        for (int64_t i = 0; i < n; i += KV_Q8_0_BLOCK)
            kvc_q8_0_block(src + i, dst + (i / KV_Q8_0_BLOCK) * KV_Q8_0_BYTES);
        break;
    case KV_DEFAULT: MEMRA_ASSERT(0 && "KV cache without a type");
    }
}

/* Head `h` of the K or V row at byte offset off, as f32. */
static const float *kv_head(const kv_cache *kc, const uint8_t *base, size_t off, int h, int hd,
                            float *buf)
{
    const uint8_t *row = base + off;
    int64_t e0 = (int64_t)h * hd;
    switch (kc->type) {
    case KV_F32: return (const float *)(const void *)row + e0;
    case KV_F16:
        for (int i = 0; i < hd; i++)
            buf[i] = kvc_f16_to_f32(kvc_ld16(row + 2 * (e0 + i)));
        return buf;
    case KV_BF16:
        for (int i = 0; i < hd; i++)
            buf[i] = kvc_bf16_to_f32(kvc_ld16(row + 2 * (e0 + i)));
        return buf;
    case KV_Q8_0:
        for (int i = 0; i < hd; i++)
            buf[i] = kvc_q8_0_get(row, e0 + i);
        return buf;
    case KV_DEFAULT: break;
    }
    MEMRA_ASSERT(0 && "KV cache without a type");
    return NULL;
}

typedef struct {
    cpu_backend *c;
    const bk_attn *a;
    const bk_batch *rows;
    const float *q;
    float *out;
    int hg; /* query heads a task takes: a divisor of the heads a KV head serves */
} attn_job;

/* Task (row, KV head, group of hg of its query heads): each K and V row is
 * read (and widened) once for the group's heads, not once per head, and
 * each head's scores, softmax and weighted sum are the arithmetic of a
 * head alone (the same calls on the same values in the same order), so a
 * head's output does not depend on hg. */
static void attn_task(void *ctx, int task, int thread)
{
    attn_job *j = ctx;
    const bk_attn *a = j->a;
    const int hd = a->head_dim, hg = j->hg, per_kv = a->n_heads / a->n_kv_heads / hg;
    const int i = task / (a->n_kv_heads * per_kv), r = task % (a->n_kv_heads * per_kv);
    const int h0 = (r / per_kv) * (a->n_heads / a->n_kv_heads) + (r % per_kv) * hg;
    const int kvh = a->kv_head0 + r / per_kv;
    const kv_seq *s = j->rows->seq[i];
    const kv_cache *kc = s->cache;
    int64_t hi = j->rows->pos[i], lo = 0;
    if (a->window > 0 && hi - a->window + 1 > 0)
        lo = hi - a->window + 1;
    const int64_t span = hi - lo + 1;
    const float *q = j->q + ((size_t)i * a->n_heads + h0) * hd;
    float *o = j->out + ((size_t)i * a->n_heads + h0) * hd;
    /* scratch: ATTN_GROUP rows a K/V row may be widened into, then each
     * head's scores */
    float *buf = j->c->scratch[thread], *sc = buf + (size_t)ATTN_GROUP * hd;
    /* The fast path's SIMD forms of the same arithmetic (the same bits),
     * ATTN_GROUP keys at a time. */
    const cpu_kernels *fk = j->c->fast;

    /* Positions are visited block by block: the offset of the first one
     * from the block table, the rest a row further each. */
    const size_t row = kc->row_bytes;
    const int64_t bs = kc->block_size;
    const float *kv[ATTN_GROUP];
    /* bf16 / f16 rows read as stored where the level has the kernels
     * (h16: their 16-bit values, not widened into buf first) */
    const uint16_t *kv16[ATTN_GROUP];
    const int h16 = fk && fk->dot_ref_n16 && (kc->type == KV_BF16 || kc->type == KV_F16);
    const int bf = kc->type == KV_BF16;
    float pg[ATTN_HEADS_MAX][ATTN_GROUP], dots[ATTN_GROUP], mx[ATTN_HEADS_MAX], sum[ATTN_HEADS_MAX];
    int ng = 0;
    int64_t g0 = lo;
    for (int g = 0; g < hg; g++)
        mx[g] = -INFINITY;
    for (int64_t t = lo; t <= hi;) {
        int64_t end = (t / bs + 1) * bs - 1 < hi ? (t / bs + 1) * bs - 1 : hi;
        for (size_t off = kv_offset(kc, s, a->layer, t); t <= end; t++, off += row) {
            const float *kp = NULL;
            if (h16)
                kv16[ng] = (const uint16_t *)(const void *)(kc->k + off) + (size_t)kvh * hd;
            else
                kp = kv_head(kc, kc->k, off, kvh, hd, buf + (size_t)ng * hd);
            if (fk) {
                kv[ng++] = kp;
                if (ng < ATTN_GROUP && t < hi)
                    continue;
            } else {
                ng = 1;
                g0 = t;
            }
            for (int g = 0; g < hg; g++) {
                const float *qg = q + (size_t)g * hd;
                if (h16)
                    fk->dot_ref_n16(qg, kv16, bf, ng, hd, dots);
                else if (fk)
                    fk->dot_ref_n(qg, kv, ng, hd, dots);
                else
                    dots[0] = cpu_dot(qg, kp, hd);
                float *sg = sc + (size_t)g * span;
                for (int u = 0; u < ng; u++) {
                    float x = dots[u] * a->scale;
                    if (a->softcap > 0)
                        x = tanhf(x / a->softcap) * a->softcap;
                    sg[g0 + u - lo] = x;
                    if (x > mx[g])
                        mx[g] = x;
                }
            }
            ng = 0;
            g0 = t + 1;
        }
    }
    for (int g = 0; g < hg; g++) {
        float *sg = sc + (size_t)g * span, sm = 0;
        for (int64_t t = 0; t < span; t++) {
            sg[t] = expf(sg[t] - mx[g]);
            sm += sg[t];
        }
        sum[g] = sm;
    }
    for (int d = 0; d < hg * hd; d++)
        o[d] = 0;
    for (int64_t t = lo; t <= hi;) {
        int64_t end = (t / bs + 1) * bs - 1 < hi ? (t / bs + 1) * bs - 1 : hi;
        for (size_t off = kv_offset(kc, s, a->layer, t); t <= end; t++, off += row) {
            const float *vp = NULL;
            if (h16)
                kv16[ng] = (const uint16_t *)(const void *)(kc->v + off) + (size_t)kvh * hd;
            else
                vp = kv_head(kc, kc->v, off, kvh, hd, buf + (size_t)ng * hd);
            if (!fk) {
                for (int g = 0; g < hg; g++) {
                    float p = sc[(size_t)g * span + t - lo] / sum[g], *og = o + (size_t)g * hd;
                    for (int d = 0; d < hd; d++)
                        og[d] += p * vp[d];
                }
                continue;
            }
            for (int g = 0; g < hg; g++)
                pg[g][ng] = sc[(size_t)g * span + t - lo] / sum[g];
            kv[ng++] = vp;
            if (ng == ATTN_GROUP || t == hi) {
                for (int g = 0; g < hg; g++)
                    if (h16)
                        fk->axpy_ref_n16(o + (size_t)g * hd, pg[g], kv16, bf, ng, hd);
                    else
                        fk->axpy_ref_n(o + (size_t)g * hd, pg[g], kv, ng, hd);
                ng = 0;
            }
        }
    }
}

/* Rows of a step's K and V into the cache, a task a run of rows (each
 * row's bytes the same whoever stores them). */
enum { KV_STORE_ROWS = 8 };
typedef struct {
    const bk_attn *a;
    const bk_batch *rows;
    const float *k, *v;
} kv_store_job;

static void kv_store_task(void *ctx, int task, int thread)
{
    (void)thread;
    const kv_store_job *j = ctx;
    size_t kv_dim = (size_t)j->a->n_kv_heads * j->a->head_dim;
    /* a tensor-parallel rank's heads start kv_head0 heads into the row */
    int64_t col0 = (int64_t)j->a->kv_head0 * j->a->head_dim;
    int i1 = (task + 1) * KV_STORE_ROWS < j->rows->n ? (task + 1) * KV_STORE_ROWS : j->rows->n;
    for (int i = task * KV_STORE_ROWS; i < i1; i++) {
        kv_seq *s = j->rows->seq[i];
        kv_cache *kc = s->cache;
        MEMRA_ASSERT(col0 + (int64_t)kv_dim <= kc->kv_dim);
        size_t off = kv_offset(kc, s, j->a->layer, j->rows->pos[i]) + kv_row_bytes(kc->type, col0);
        kv_store(kc, kc->k, off, j->k + (size_t)i * kv_dim, (int64_t)kv_dim);
        kv_store(kc, kc->v, off, j->v + (size_t)i * kv_dim, (int64_t)kv_dim);
    }
}

void cpu_op_attention(backend *b, const bk_attn *a, const bk_batch *rows, const float *q,
                      const float *k, const float *v, float *out)
{
    cpu_backend *c = cpu_of(b);
    if (k) { /* a prompt chunk's rows stored on the pool, a decode step's here */
        kv_store_job sj = {a, rows, k, v};
        int tasks = (rows->n + KV_STORE_ROWS - 1) / KV_STORE_ROWS;
        if (tasks > 1)
            pool_run(c->pool, tasks, kv_store_task, &sj);
        else
            kv_store_task(&sj, 0, 0);
    }
    int64_t longest = 0;
    for (int i = 0; i < rows->n; i++) {
        int64_t span = a->window > 0 && a->window < rows->pos[i] + 1 ? a->window
                                                                      : rows->pos[i] + 1;
        if (span > longest)
            longest = span;
    }
    /* The most query heads of a KV head a task takes that still leaves
     * every thread two tasks (the same bytes for any choice). */
    const int G = a->n_heads / a->n_kv_heads;
    int hg = G;
    while (hg > 1 && (hg > ATTN_HEADS_MAX || G % hg != 0 ||
                      (int64_t)rows->n * a->n_kv_heads * (G / hg) < 2 * (int64_t)c->n_threads))
        hg--;
    cpu_scratch_reserve(c, (size_t)ATTN_GROUP * a->head_dim + (size_t)hg * (size_t)longest);
    attn_job j = {c, a, rows, q, out, hg};
    int n_tasks = rows->n * a->n_kv_heads * (G / hg);
    if ((double)rows->n * a->n_heads * (double)longest * a->head_dim < ATTN_INLINE_MACS) {
        for (int t = 0; t < n_tasks; t++)
            attn_task(&j, t, 0);
        return;
    }
    pool_run(c->pool, n_tasks, attn_task, &j);
}
