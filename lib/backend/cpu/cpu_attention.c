/* RMSNorm, QK-norm + RoPE, and attention over the paged KV cache, on the
 * CPU. Attention is computed per (row, head) by one thread: scores over the
 * row's visible positions, softmax, weighted sum of values, in ascending
 * position order, so a row's output does not depend on what else is in
 * the step. The reference backend runs attn_task_ref, the fast backend
 * attn_task_fast (its own bounded numerics, decision 0035). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "numerics/kv_codec.h"

/* Below this much work the calling thread runs every task itself. */
#define ATTN_INLINE_MACS 32768.0
/* Keys the fast path's attention takes at once (cpu_kernels.attn_dot). */
#define ATTN_GROUP 8
/* The most query heads of one KV head a task takes. */
#define ATTN_HEADS_MAX 16
/* The most rows of one sequence a fast-path task takes (attn_task_fast). */
#define ATTN_TILE_ROWS 8

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
    case KV_Q8_0: /* kvc_q8_0_get's product, a block's scale widened once */
        if (hd % KV_Q8_0_BLOCK != 0) { /* heads that straddle blocks */
            for (int i = 0; i < hd; i++)
                buf[i] = kvc_q8_0_get(row, e0 + i);
            return buf;
        }
        for (int i = 0; i < hd; i += KV_Q8_0_BLOCK) {
            const uint8_t *b = row + ((e0 + i) / KV_Q8_0_BLOCK) * KV_Q8_0_BYTES;
            const float d = kvc_f16_to_f32(kvc_ld16(b));
            for (int j = 0; j < KV_Q8_0_BLOCK; j++)
                buf[i + j] = (float)(int8_t)b[2 + j] * d;
        }
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
    /* the fast path's tiles: tile k is rows tile_row[k] .. tile_row[k + 1] - 1 */
    const int *tile_row;
} attn_job;

/* What a task (row, KV head, group of hg of its query heads) reads: the
 * row's visible positions lo .. hi, its q and out at head h0, its KV head. */
typedef struct {
    const kv_seq *s;
    const kv_cache *kc;
    int64_t lo, hi, span;
    int kvh;
    const float *q;
    float *o;
} attn_span;

static attn_span attn_span_of(const attn_job *j, int task)
{
    const bk_attn *a = j->a;
    const int hd = a->head_dim, per_kv = a->n_heads / a->n_kv_heads / j->hg;
    const int i = task / (a->n_kv_heads * per_kv), r = task % (a->n_kv_heads * per_kv);
    const int h0 = (r / per_kv) * (a->n_heads / a->n_kv_heads) + (r % per_kv) * j->hg;
    attn_span sp = {j->rows->seq[i], j->rows->seq[i]->cache, 0, j->rows->pos[i], 0,
                    a->kv_head0 + r / per_kv, j->q + ((size_t)i * a->n_heads + h0) * hd,
                    j->out + ((size_t)i * a->n_heads + h0) * hd};
    if (a->window > 0 && sp.hi - a->window + 1 > 0)
        sp.lo = sp.hi - a->window + 1;
    sp.span = sp.hi - sp.lo + 1;
    return sp;
}

/* The reference: per head, its scores by cpu_dot, softmax by expf and a
 * division per key, the weighted sum key after key, all in ascending
 * position order. Each K and V row is read (and widened) once for the
 * task's heads; each head's arithmetic is that of a head alone, so a
 * head's output does not depend on hg. */
static void attn_task_ref(void *ctx, int task, int thread)
{
    attn_job *j = ctx;
    const bk_attn *a = j->a;
    const attn_span sp = attn_span_of(j, task);
    const int hd = a->head_dim, hg = j->hg;
    const kv_cache *kc = sp.kc;
    /* scratch: a row K/V may be widened into, then each head's scores */
    float *buf = j->c->scratch[thread], *sc = buf + (size_t)ATTN_GROUP * hd;
    /* Positions are visited block by block: the offset of the first one
     * from the block table, the rest a row further each. */
    const size_t row = kc->row_bytes;
    const int64_t bs = kc->block_size;
    float mx[ATTN_HEADS_MAX], sum[ATTN_HEADS_MAX];
    for (int g = 0; g < hg; g++)
        mx[g] = -INFINITY;
    for (int64_t t = sp.lo; t <= sp.hi;) {
        int64_t end = (t / bs + 1) * bs - 1 < sp.hi ? (t / bs + 1) * bs - 1 : sp.hi;
        for (size_t off = kv_offset(kc, sp.s, a->layer, t); t <= end; t++, off += row) {
            const float *kp = kv_head(kc, kc->k, off, sp.kvh, hd, buf);
            for (int g = 0; g < hg; g++) {
                float x = cpu_dot(sp.q + (size_t)g * hd, kp, hd) * a->scale;
                if (a->softcap > 0)
                    x = tanhf(x / a->softcap) * a->softcap;
                sc[(size_t)g * sp.span + t - sp.lo] = x;
                if (x > mx[g])
                    mx[g] = x;
            }
        }
    }
    for (int g = 0; g < hg; g++) {
        float *sg = sc + (size_t)g * sp.span, sm = 0;
        for (int64_t t = 0; t < sp.span; t++) {
            sg[t] = expf(sg[t] - mx[g]);
            sm += sg[t];
        }
        sum[g] = sm;
    }
    for (int d = 0; d < hg * hd; d++)
        sp.o[d] = 0;
    for (int64_t t = sp.lo; t <= sp.hi;) {
        int64_t end = (t / bs + 1) * bs - 1 < sp.hi ? (t / bs + 1) * bs - 1 : sp.hi;
        for (size_t off = kv_offset(kc, sp.s, a->layer, t); t <= end; t++, off += row) {
            const float *vp = kv_head(kc, kc->v, off, sp.kvh, hd, buf);
            for (int g = 0; g < hg; g++) {
                float p = sc[(size_t)g * sp.span + t - sp.lo] / sum[g], *og = sp.o + (size_t)g * hd;
                for (int d = 0; d < hd; d++)
                    og[d] += p * vp[d];
            }
        }
    }
}

/* The fast path (docs/decisions/0035-cpu-fast-attention.md): the same
 * steps on the level's kernels, ATTN_GROUP keys a call: scores by FMA,
 * the exponentials by cpu_exp_neg's polynomial, the weighted sum of V by
 * FMA with each key's unnormalized weight, divided by the weights' sum
 * once at the end. K and V rows are read as stored (Q8_0 ones widened
 * first where a head straddles blocks).
 *
 * A task takes a tile of rows of one sequence (a prompt chunk's rows, up
 * to ATTN_TILE_ROWS; a decode step's rows are tiles of one): each group
 * of keys is read once for every row of the tile that sees it, so a
 * chunk deep in the context streams its head's K and V once a tile, not
 * once a row. Each (row, head)'s operations are its own, in position
 * order (the kernels' result for a key does not depend on the keys
 * beside it in a call), whatever the tile, hg or the thread count. */
static void attn_task_fast(void *ctx, int task, int thread)
{
    attn_job *j = ctx;
    const bk_attn *a = j->a;
    const int hd = a->head_dim, hg = j->hg;
    const int per_kv = a->n_heads / a->n_kv_heads / hg;
    const int tile = task / (a->n_kv_heads * per_kv), sub = task % (a->n_kv_heads * per_kv);
    const int i0 = j->tile_row[tile], nr = j->tile_row[tile + 1] - i0;
    attn_span sp[ATTN_TILE_ROWS];
    int64_t lo = INT64_MAX, hi = -1;
    for (int r = 0; r < nr; r++) {
        sp[r] = attn_span_of(j, (i0 + r) * a->n_kv_heads * per_kv + sub);
        lo = sp[r].lo < lo ? sp[r].lo : lo;
        hi = sp[r].hi > hi ? sp[r].hi : hi;
    }
    const kv_cache *kc = sp[0].kc;
    const kv_seq *seq = sp[0].s;
    const int kvh = sp[0].kvh;
    const cpu_kernels *fk = j->c->fast;
    /* scratch: ATTN_GROUP widened rows, then the scores of (row r, head
     * g) at sc + (r hg + g) stride, position t at t - the row's lo */
    float *buf = j->c->scratch[thread], *sc = buf + (size_t)ATTN_GROUP * hd;
    const size_t stride = (size_t)(hi - lo + 1);
    const size_t row = kc->row_bytes;
    const int64_t bs = kc->block_size;
    /* Rows are read as stored, Q8_0 ones where a head is whole blocks
     * (else widened into buf first, f32 then) */
    const int as_stored = kc->type != KV_Q8_0 || hd % KV_Q8_0_BLOCK == 0;
    const cpu_kv_elem e = kc->type == KV_BF16  ? CPU_KV_BF16
                          : kc->type == KV_F16 ? CPU_KV_F16
                          : kc->type == KV_Q8_0 && as_stored ? CPU_KV_Q8_0
                                               : CPU_KV_F32;
    /* the head's slice of a stored row: where it starts, how long */
    const size_t head_off = kv_row_bytes(kc->type, (int64_t)kvh * hd),
                 head_len = kv_row_bytes(kc->type, hd);
    float sum_of[ATTN_TILE_ROWS][ATTN_HEADS_MAX];
    /* a group's (row, head)s for the multi-query kernels: q, out, scores */
    const int multi = fk->attn_dotq && fk->attn_axpyq;
    const float *qs[ATTN_TILE_ROWS * ATTN_HEADS_MAX];
    float *os[ATTN_TILE_ROWS * ATTN_HEADS_MAX], *ss[ATTN_TILE_ROWS * ATTN_HEADS_MAX];
    /* Two passes over the positions, K then V: kv[] gathers a group's
     * rows, t0 the group's first position. */
    for (int pass = 0; pass < 2; pass++) {
        const uint8_t *base = pass == 0 ? kc->k : kc->v;
        const void *kv[ATTN_GROUP];
        int ng = 0;
        int64_t t0 = lo;
        if (pass == 1)
            for (int r = 0; r < nr; r++)
                for (int d = 0; d < hg * hd; d++)
                    sp[r].o[d] = 0;
        for (int64_t t = lo; t <= hi;) {
            int64_t end = (t / bs + 1) * bs - 1 < hi ? (t / bs + 1) * bs - 1 : hi;
            /* The head's bytes of the same slot a block on are fetched
             * ahead: a task reads one head's slice of every row, a stride
             * the hardware's prefetchers do not follow (decode at depth
             * 4096 waited on these loads). */
            const uint8_t *ahead =
                end < hi ? base + kv_offset(kc, seq, a->layer, end + 1) + head_off : NULL;
            for (size_t off = kv_offset(kc, seq, a->layer, t); t <= end; t++, off += row) {
                if (ahead)
                    for (size_t b = 0; b < head_len; b += 64)
                        __builtin_prefetch(ahead + (size_t)(t % bs) * row + b);
                kv[ng] = as_stored ? (const void *)(base + off + head_off)
                                   : (const void *)kv_head(kc, base, off, kvh, hd,
                                                           buf + (size_t)ng * hd);
                if (++ng < ATTN_GROUP && t < hi)
                    continue;
                /* keys t0 .. t0 + ng - 1: the (row, head)s that see them
                 * all together where the level multiplies several
                 * queries at once, then each row the part it sees */
                int nq = 0;
                for (int r = 0; multi && r < nr; r++)
                    if (sp[r].lo <= t0 && t0 + ng - 1 <= sp[r].hi)
                        for (int g = 0; g < hg; g++) {
                            qs[nq] = sp[r].q + (size_t)g * hd;
                            os[nq] = sp[r].o + (size_t)g * hd;
                            ss[nq++] = sc + ((size_t)r * hg + g) * stride + (t0 - sp[r].lo);
                        }
                if (nq > 0 && pass == 0) {
                    fk->attn_dotq(qs, nq, kv, e, ng, hd, a->scale, ss);
                    for (int m = 0; a->softcap > 0 && m < nq; m++)
                        for (int u = 0; u < ng; u++)
                            ss[m][u] = tanhf(ss[m][u] / a->softcap) * a->softcap;
                } else if (nq > 0) {
                    fk->attn_axpyq(os, (const float *const *)ss, nq, kv, e, ng, hd);
                }
                for (int r = 0; r < nr; r++) {
                    const int64_t a0 = t0 > sp[r].lo ? t0 : sp[r].lo;
                    const int64_t a1 = t0 + ng - 1 < sp[r].hi ? t0 + ng - 1 : sp[r].hi;
                    if (a0 > a1 || (nq > 0 && a0 == t0 && a1 == t0 + ng - 1))
                        continue; /* nothing seen, or taken above */
                    const int u0 = (int)(a0 - t0), nk = (int)(a1 - a0 + 1);
                    for (int g = 0; g < hg; g++) {
                        float *sg = sc + ((size_t)r * hg + g) * stride + (a0 - sp[r].lo);
                        if (pass == 0) {
                            fk->attn_dot(sp[r].q + (size_t)g * hd, kv + u0, e, nk, hd, a->scale,
                                         sg);
                            for (int u = 0; a->softcap > 0 && u < nk; u++)
                                sg[u] = tanhf(sg[u] / a->softcap) * a->softcap;
                        } else {
                            fk->attn_axpy(sp[r].o + (size_t)g * hd, sg, kv + u0, e, nk, hd);
                        }
                    }
                }
                ng = 0;
                t0 = t + 1;
            }
        }
        if (pass == 1)
            break;
        for (int r = 0; r < nr; r++)
            for (int g = 0; g < hg; g++)
                sum_of[r][g] = fk->attn_exp(sc + ((size_t)r * hg + g) * stride, sp[r].span);
    }
    for (int r = 0; r < nr; r++)
        for (int g = 0; g < hg; g++)
            for (int d = 0; d < hd; d++)
                sp[r].o[(size_t)g * hd + d] /= sum_of[r][g];
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
    /* The fast path's tiles: runs of rows of one sequence, of at most
     * ATTN_TILE_ROWS and fewer where that leaves a thread under two tasks
     * (any tiling gives the same bytes); the scores of a tile span its
     * rows' positions together. */
    int stack_tiles[65], *tile_row = NULL, n_tiles = rows->n;
    int64_t stride = longest;
    if (c->fast) {
        tile_row = rows->n < 65 ? stack_tiles : xmalloc(((size_t)rows->n + 1) * sizeof *tile_row);
        const int64_t per_tile = (int64_t)a->n_kv_heads * (G / hg);
        int most = ATTN_TILE_ROWS;
        while (most > 1 && (rows->n + most - 1) / most * per_tile < 2 * (int64_t)c->n_threads)
            most /= 2;
        n_tiles = 0;
        for (int i = 0; i < rows->n;) {
            int e = i + 1;
            int64_t lo = rows->pos[i], hi = rows->pos[i];
            while (e < rows->n && e - i < most && rows->seq[e] == rows->seq[i]) {
                lo = rows->pos[e] < lo ? rows->pos[e] : lo;
                hi = rows->pos[e] > hi ? rows->pos[e] : hi;
                e++;
            }
            /* the tile's positions: from its lowest visible one (a row's
             * window starts at most longest - 1 before it) to its highest */
            lo = lo - longest + 1 > 0 ? lo - longest + 1 : 0;
            stride = hi - lo + 1 > stride ? hi - lo + 1 : stride;
            tile_row[n_tiles++] = i;
            i = e;
        }
        tile_row[n_tiles] = rows->n;
    }
    cpu_scratch_reserve(c, (size_t)ATTN_GROUP * a->head_dim +
                               (size_t)hg * (size_t)stride * (c->fast ? ATTN_TILE_ROWS : 1));
    attn_job j = {c, a, rows, q, out, hg, tile_row};
    void (*task)(void *, int, int) = c->fast ? attn_task_fast : attn_task_ref;
    int n_tasks = n_tiles * a->n_kv_heads * (G / hg);
    if ((double)rows->n * a->n_heads * (double)longest * a->head_dim < ATTN_INLINE_MACS) {
        for (int t = 0; t < n_tasks; t++)
            task(&j, t, 0);
    } else {
        pool_run(c->pool, n_tasks, task, &j);
    }
    if (tile_row != stack_tiles)
        free(tile_row);
}
