/* The fast path's weight products: x [n][cols] times a stored weight
 * [rows][cols] transposed, on the SIMD kernels of cpu_fast.h.
 *
 * x is quantized once per call (for the block formats) into buffers the
 * backend keeps. Output rows are split over the pool in tasks of whole
 * rows: for a decode step, tasks that shrink (cpu_decode_split.h). Within
 * a task, tokens go in tiles of FM_TILE tokens (their x
 * stays in L1) against the task's rows (at most FM_BLOCK_BYTES of
 * weights, which stay in L2), so prefill reads each weight row from
 * memory once per task, not once per token; within a tile the kernels
 * take whole groups of their nt tokens, the rest one at a time. On a
 * level with tile kernels (amx) a prompt's panel matrices go instead in
 * blocks of CPU_TILE_ROWS rows against whole tiles of CPU_TILE_TOKENS
 * tokens, x written per call in the tiles' layout. Every
 * output value is the same kernel arithmetic on one (row, token) pair,
 * whatever the grouping, the tiling, the task split or the thread count:
 * the bytes of a token's outputs never depend on the batch it came in. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_decode_split.h"
#include "backend/cpu/cpu_panel.h"
#include "core/check.h"

#define FM_TASKS_PER_THREAD 8
#define FM_MIN_ROWS 4
#define FM_TILE 8 /* a multiple of every kernel's nt */
#define FM_BLOCK_BYTES (256 * 1024)
#define FM_MAX_NR 4 /* the most rows a kernel takes at once */
/* Below this many multiply-adds, waking the workers costs more than the
 * product (a tiny model's decode step): run it on the calling thread. The
 * pool's wake-up is tens of microseconds on the 2-core VM; the kernels do
 * 512K int8 multiply-adds in about as long (memra-tiny decode on 2
 * threads: 1,460 tok/s at 64K, 2,600 at 512K; 1 thread 4,000). */
#define FM_INLINE_MACS 524288.0
/* Tokens from which x's quantization is worth waking the workers. */
#define FM_QUANT_POOL_MIN 4
/* Tokens from which a call's panel matrices run on the tile kernels
 * where the level has them (amx), and the fewest of a tile's tokens a
 * task gives them (fewer: the panel kernels, a token group at a time). A
 * tile costs the same whatever it holds: on the 2-core Xeon VM, Qwen3-0.6B
 * Q4_K_M, pp8 / pp12 read 235 / 268 tok/s on the panel kernels and 160 /
 * 226 on tiles of 8 and 12 tokens; whole tiles are level at 16 (293 /
 * 294) and ahead from 32 (332 -> 409) (decision 0040). */
#define FM_TILE_MIN 16

typedef struct {
    const cpu_mm_item *items;
    int n_items;
    const int64_t *first; /* [n_items + 1]: items' rows concatenated */
    const cpu_kernel *k[CPU_MM_MAX_ITEMS];
    const uint8_t *data[CPU_MM_MAX_ITEMS]; /* each item's rows: its panel copy or its stored bytes */
    size_t rbytes[CPU_MM_MAX_ITEMS];
    int64_t rows_per_task;
    const int64_t *bounds; /* a decode step's task rows (cpu_decode_split), else NULL */
    int tok_groups;    /* tasks per row range: its tokens split in that many groups */
    int toks_per_task; /* a multiple of FM_TILE */
    int64_t cols, nb;
    int n;
    const float *x; /* token t's f32 x at x + t * xstride */
    int64_t xstride;
    int8_t *xq; /* x quantized (NULL: no item reads int8 x) */
    float *xd;
    int32_t *xs;
    int8_t *xp; /* xq in the panel order (NULL: no item is in panels) */
    int32_t *xlo;
    void (*quantize_x)(const float *x, int64_t n, int8_t *q, float *d, int32_t *s);
    /* x in tiles of CPU_TILE_TOKENS (NULL: no tile kernels this call) */
    int8_t *xt;
    float *xtd;
    int32_t *xts, *xtlo;
    float *const *scratch; /* each thread's, CPU_TILE_SCRATCH(cols) bytes */
} fm_job;

/* Rows [r0, r1) of the items against tokens [tb, te) on the one-token,
 * seq, many-token and rows kernels. */
static void fm_rows(const fm_job *j, int64_t r0, int64_t r1, int tb, int te)
{
    cpu_xrow xr[FM_TILE];
    float s[FM_TILE * FM_MAX_NR];
    for (int t0 = tb; t0 < te; t0 += FM_TILE) {
        int t1 = t0 + FM_TILE < te ? t0 + FM_TILE : te;
        for (int t = t0; t < t1; t++) {
            cpu_xrow *r = &xr[t - t0];
            r->f = j->x + (size_t)t * j->xstride;
            r->q = j->xq ? j->xq + (size_t)t * j->cols : NULL;
            r->d = j->xq ? j->xd + (size_t)t * j->nb : NULL;
            r->s = j->xq ? j->xs + (size_t)t * j->nb : NULL;
            r->p = j->xp ? j->xp + (size_t)t * j->cols : NULL;
            r->lo = j->xp ? j->xlo + (size_t)t * j->nb : NULL;
        }
        int it = 0, nt = t1 - t0;
        for (int64_t g = r0; g < r1;) {
            while (g >= j->first[it + 1])
                it++;
            const cpu_mm_item *m = &j->items[it];
            const cpu_kernel *k = j->k[it];
            int64_t r = g - j->first[it], rows = m->w->rows;
            const uint8_t *wr = j->data[it] + (size_t)r * j->rbytes[it];
            /* A block of the kernel's rows for whole groups of its tokens
             * when the task and the item hold them all, else a row at a
             * time (a decode step: rows side by side stream from memory
             * slower than one after the other); the same bits for every
             * (row, token) either way. */
            int nr = 1, t = 0;
            if (k->rows && nt >= k->nt && g + k->nr <= r1 && r + k->nr <= rows) {
                nr = k->nr;
                for (; t + k->nt <= nt; t += k->nt) {
                    float b[FM_MAX_NR * FM_TILE];
                    k->rows(wr, j->rbytes[it], xr + t, j->cols, b);
                    for (int i = 0; i < nr; i++)
                        for (int u = 0; u < k->nt; u++)
                            s[i * FM_TILE + t + u] = b[i * k->nt + u];
                }
                for (int i = 0; i < nr; i++)
                    for (int u = t; u < nt; u++)
                        s[i * FM_TILE + u] = k->one(wr + (size_t)i * j->rbytes[it], xr + u, j->cols);
            } else if (nt == 1 && k->seq) {
                /* one token (a decode step): the task's rows of this item
                 * in one call, straight into the output */
                int64_t e = r1 - g < rows - r ? r1 - g : rows - r;
                float *o = m->out + (size_t)t0 * rows + r;
                k->seq(wr, j->rbytes[it], (int)e, xr, j->cols, o);
                if (m->bias)
                    for (int64_t i = 0; i < e; i++)
                        o[i] += m->bias[r + i];
                g += e;
                continue;
            } else {
                if (k->many)
                    for (; t + k->nt <= nt; t += k->nt)
                        k->many(wr, xr + t, j->cols, s + t);
                for (; t < nt; t++)
                    s[t] = k->one(wr, xr + t, j->cols);
            }
            for (int i = 0; i < nr; i++)
                for (t = 0; t < nt; t++) {
                    float v = s[i * FM_TILE + t];
                    m->out[(size_t)(t0 + t) * rows + r + i] = m->bias ? v + m->bias[r + i] : v;
                }
            g += nr;
        }
    }
}

/* The same on the tile kernels where an item has them: per CPU_TILE_ROWS
 * rows, the task's tiles of tokens (whole tiles but the call's last) up
 * to FM_TILE_GROUP at a time; a tile of which the task holds fewer than
 * FM_TILE_MIN tokens, and items without tile kernels, by fm_rows. */
#define FM_TILE_GROUP 8
static void fm_rows_tiled(const fm_job *j, int64_t r0, int64_t r1, int tb, int te, int thread)
{
    uint8_t *scratch = (uint8_t *)j->scratch[thread];
    float b[FM_TILE_GROUP * CPU_TILE_ROWS * CPU_TILE_TOKENS];
    cpu_xtile xt[FM_TILE_GROUP];
    int it = 0;
    for (int64_t g = r0; g < r1;) {
        while (g >= j->first[it + 1])
            it++;
        int64_t end = j->first[it + 1] < r1 ? j->first[it + 1] : r1;
        const cpu_kernel *k = j->k[it];
        if (!k->tile) {
            fm_rows(j, g, end, tb, te);
            g = end;
            continue;
        }
        const cpu_mm_item *m = &j->items[it];
        int64_t rows = m->w->rows;
        for (; g < end; g += CPU_TILE_ROWS) {
            int nr = end - g < CPU_TILE_ROWS ? (int)(end - g) : CPU_TILE_ROWS;
            int64_t r = g - j->first[it];
            for (int t0 = tb; t0 < te;) {
                int nx = 0, tg = t0;
                for (; nx < FM_TILE_GROUP && tg < te; nx++, tg += CPU_TILE_TOKENS) {
                    if (te - tg < FM_TILE_MIN)
                        break;
                    size_t tv = (size_t)tg * (size_t)j->nb;
                    xt[nx] = (cpu_xtile){j->xt + tv * CPU_QBLOCK, j->xtd + tv, j->xts + tv,
                                         j->xtlo + tv};
                }
                if (nx == 0) { /* the call's last few tokens */
                    fm_rows(j, g, g + nr, t0, te);
                    break;
                }
                k->tile(j->data[it] + (size_t)r * j->rbytes[it], j->rbytes[it], nr, xt, nx,
                        j->cols, b, scratch);
                /* a token's rows side by side, as the kernel wrote them:
                 * one cache line a token, copied whole (a constant size
                 * when the block is full: inlined). Element by element,
                 * this copy was 9% of a Q4_K_M prompt chunk. */
                for (int x = 0; x < nx; x++)
                    for (int u = 0, t = t0 + x * CPU_TILE_TOKENS; u < CPU_TILE_TOKENS && t < te;
                         u++, t++) {
                        float *o = m->out + (size_t)t * rows + r;
                        const float *v = b + (x * CPU_TILE_TOKENS + u) * CPU_TILE_ROWS;
                        if (m->bias)
                            for (int i = 0; i < nr; i++)
                                o[i] = v[i] + m->bias[r + i];
                        else if (nr == CPU_TILE_ROWS)
                            memcpy(o, v, CPU_TILE_ROWS * sizeof *o);
                        else
                            memcpy(o, v, (size_t)nr * sizeof *o);
                    }
                t0 = tg;
            }
        }
        g = end;
    }
}

static void fm_task(void *ctx, int task, int thread)
{
    const fm_job *j = ctx;
    int64_t r0, r1;
    if (j->bounds) {
        r0 = j->bounds[task];
        r1 = j->bounds[task + 1];
    } else {
        r0 = (int64_t)(task / j->tok_groups) * j->rows_per_task;
        r1 = r0 + j->rows_per_task;
        if (r1 > j->first[j->n_items])
            r1 = j->first[j->n_items];
    }
    int tb = (task % j->tok_groups) * j->toks_per_task;
    int te = tb + j->toks_per_task < j->n ? tb + j->toks_per_task : j->n;
    if (j->xt)
        fm_rows_tiled(j, r0, r1, tb, te, thread);
    else
        fm_rows(j, r0, r1, tb, te);
}

/* Token t's x into its int8 blocks. */
static void fm_quant_task(void *ctx, int t, int thread)
{
    (void)thread;
    const fm_job *j = ctx;
    j->quantize_x(j->x + (size_t)t * j->xstride, j->cols, j->xq + (size_t)t * j->cols,
                  j->xd + (size_t)t * j->nb, j->xs + (size_t)t * j->nb);
    if (j->xp)
        cpu_panel_x(j->xq + (size_t)t * j->cols, j->cols, j->xp + (size_t)t * j->cols,
                    j->xlo + (size_t)t * j->nb);
}

/* A tile of tokens: each token's int8 blocks, then the tile's layout
 * (cpu_xtile; slots past the last token zeros). A task a tile: the
 * tile's cache lines are written by one thread. */
static void fm_quant_tile_task(void *ctx, int tile, int thread)
{
    const fm_job *j = ctx;
    size_t tv = (size_t)tile * CPU_TILE_TOKENS * (size_t)j->nb;
    for (int u = 0; u < CPU_TILE_TOKENS; u++) {
        int t = tile * CPU_TILE_TOKENS + u;
        int8_t *tb = j->xt + tv * CPU_QBLOCK;
        if (t >= j->n) {
            cpu_tile_x(NULL, NULL, NULL, NULL, j->cols, u, tb, j->xtd + tv, j->xts + tv, j->xtlo + tv);
            continue;
        }
        fm_quant_task(ctx, t, thread);
        size_t tb0 = (size_t)t * j->nb;
        cpu_tile_x(j->xq + (size_t)t * j->cols, j->xd + tb0, j->xs + tb0, j->xlo + tb0, j->cols, u,
                   tb, j->xtd + tv, j->xts + tv, j->xtlo + tv);
    }
}

/* Cache-line aligned memory: a 512-bit load that straddles two lines
 * costs two. */
static void *cpu_aligned_alloc(size_t n)
{
    void *p = aligned_alloc(64, (n + 63) / 64 * 64);
    if (!p)
        memra_assert_fail("aligned_alloc", __FILE__, __LINE__);
    return p;
}

/* Room for n rows of x as int8 blocks. */
static void xq_reserve(cpu_backend *c, size_t n)
{
    if (n <= c->xq_cap)
        return;
    free(c->xq);
    free(c->xd);
    free(c->xs);
    c->xq = cpu_aligned_alloc(n);
    c->xd = xmalloc((n / CPU_QBLOCK + 1) * sizeof *c->xd);
    c->xs = xmalloc((n / CPU_QBLOCK + 1) * sizeof *c->xs);
    c->xq_cap = n;
}

int cpu_fast_matmul_multi(cpu_backend *c, const cpu_mm_item *items, int n_items, const float *x,
                          int n)
{
    fm_job j = {0};
    j.items = items;
    j.n_items = n_items;
    j.cols = items[0].w->cols;
    j.nb = j.cols / CPU_QBLOCK;
    j.n = n;
    j.x = x;
    j.xstride = j.cols;
    int64_t first[CPU_MM_MAX_ITEMS + 1] = {0};
    int q8 = 0, panels = 0, tiles = 0;
    size_t max_row_bytes = 0;
    for (int i = 0; i < n_items; i++) {
        const bk_weight *w = items[i].w;
        const cpu_kernel *pk = w->packed ? cpu_panel_kernel_for_type(c->fast, w->type) : NULL;
        j.k[i] = pk ? pk : cpu_kernel_for_type(c->fast, w->type);
        if (!j.k[i] || !j.k[i]->one)
            return -1;
        j.data[i] = pk ? w->packed : w->data;
        j.rbytes[i] = pk ? w->packed_row_bytes : w->row_bytes;
        panels |= pk != NULL;
        tiles |= pk && pk->tile && n >= FM_TILE_MIN;
        MEMRA_ASSERT(!j.k[i]->rows || (j.k[i]->nr <= FM_MAX_NR && j.k[i]->nt <= FM_TILE));
        q8 |= cpu_type_reads_q8(items[i].w->type);
        first[i + 1] = first[i] + items[i].w->rows;
        if (items[i].w->row_bytes > max_row_bytes)
            max_row_bytes = items[i].w->row_bytes;
    }
    j.first = first;
    int64_t total = first[n_items];
    if (total == 0 || n == 0)
        return 0;
    int f32x = 0;
    for (int i = 0; i < n_items; i++)
        f32x |= !cpu_type_reads_q8(items[i].w->type);
    if (f32x && (((uintptr_t)x & 63) != 0 || (n > 1 && j.cols % 16 != 0))) {
        /* The kernels load x 64 bytes at a time: rows from the start of a
         * cache line (the values unchanged). */
        j.xstride = (j.cols + 15) / 16 * 16;
        size_t need = (size_t)n * (size_t)j.xstride;
        if (need > c->xf_cap) {
            free(c->xf);
            c->xf = cpu_aligned_alloc(need * sizeof(float));
            c->xf_cap = need;
        }
        for (int t = 0; t < n; t++)
            memcpy(c->xf + (size_t)t * j.xstride, x + (size_t)t * j.cols,
                   (size_t)j.cols * sizeof(float));
        j.x = c->xf;
    }
    if (q8) {
        /* Block formats have whole blocks per row (weight_prepare). */
        MEMRA_ASSERT(j.cols % CPU_QBLOCK == 0);
        xq_reserve(c, (size_t)n * (size_t)j.cols);
        j.xq = c->xq;
        j.xd = c->xd;
        j.xs = c->xs;
        if (panels) {
            size_t need = (size_t)n * (size_t)j.cols;
            if (need > c->xp_cap) {
                free(c->xp);
                free(c->xlo);
                c->xp = cpu_aligned_alloc(need);
                c->xlo = xmalloc((need / CPU_QBLOCK + 1) * sizeof *c->xlo);
                c->xp_cap = need;
            }
            j.xp = c->xp;
            j.xlo = c->xlo;
        }
        if (tiles) {
            size_t need = (size_t)(n + CPU_TILE_TOKENS - 1) / CPU_TILE_TOKENS * CPU_TILE_TOKENS *
                          (size_t)j.cols;
            if (need > c->xt_cap) {
                free(c->xt);
                free(c->xtd);
                free(c->xts);
                free(c->xtlo);
                c->xt = cpu_aligned_alloc(need);
                c->xtd = cpu_aligned_alloc(need / CPU_QBLOCK * sizeof *c->xtd);
                c->xts = cpu_aligned_alloc(need / CPU_QBLOCK * sizeof *c->xts);
                c->xtlo = cpu_aligned_alloc(need / CPU_QBLOCK * sizeof *c->xtlo);
                c->xt_cap = need;
            }
            j.xt = c->xt;
            j.xtd = c->xtd;
            j.xts = c->xts;
            j.xtlo = c->xtlo;
            cpu_scratch_reserve(c, CPU_TILE_SCRATCH(j.cols) / sizeof(float) + 1);
            j.scratch = c->scratch;
        }
        j.quantize_x = c->fast->quantize_x;
        /* A token's bytes do not depend on who quantizes it: a prompt
         * chunk's tokens go to the pool, a decode step's stay here. */
        if (j.xt)
            pool_run(c->pool, (n + CPU_TILE_TOKENS - 1) / CPU_TILE_TOKENS, fm_quant_tile_task, &j);
        else if (n >= FM_QUANT_POOL_MIN)
            pool_run(c->pool, n, fm_quant_task, &j);
        else
            for (int t = 0; t < n; t++)
                fm_quant_task(&j, t, 0);
    }
    j.tok_groups = 1;
    j.toks_per_task = n;
    int n_tasks;
    int64_t bounds[CPU_SPLIT_MAX_TASKS + 1];
    if (n <= FM_TILE) {
        /* A decode step (a tile of tokens or fewer) reads each row once:
         * tasks that shrink toward the end, so the threads stream long
         * runs and still finish together. On the 2-core Xeon VM, the
         * Qwen3-8B shape's decode, eight tasks a thread -> shrinking
         * tasks: Q8_0 3.46 -> 3.52-3.58, Q4_K_M 5.15-5.38 -> 5.25-5.82
         * tok/s (decision 0018). */
        n_tasks = cpu_decode_split(total, max_row_bytes, c->n_threads, bounds);
        j.bounds = bounds;
    } else {
        /* A prompt chunk: tasks of rows that stay in L2 while the task's
         * token tiles pass over them. */
        int64_t per = total / ((int64_t)c->n_threads * FM_TASKS_PER_THREAD);
        if (max_row_bytes > 0 && per * (int64_t)max_row_bytes > FM_BLOCK_BYTES)
            per = FM_BLOCK_BYTES / (int64_t)max_row_bytes;
        if (per < FM_MIN_ROWS)
            per = FM_MIN_ROWS;
        int row_unit = j.xt ? CPU_TILE_ROWS : FM_MAX_NR; /* whole row blocks */
        per = (per + row_unit - 1) / row_unit * row_unit;
        j.rows_per_task = per;
        n_tasks = (int)((total + per - 1) / per);
        /* A chunk whose rows make fewer tasks than twice the threads (a
         * narrow matrix, rows capped to stay in L2) splits its tokens
         * too, in whole tiles, so every thread has work: the same kernels
         * on the same (row, token) pairs, whatever the split. */
        int unit = j.xt ? CPU_TILE_TOKENS : FM_TILE;
        int n_units = (n + unit - 1) / unit;
        if (n_units > 1 && n_tasks < 2 * c->n_threads) {
            int g = (2 * c->n_threads + n_tasks - 1) / n_tasks;
            g = g < n_units ? g : n_units;
            j.toks_per_task = (n_units + g - 1) / g * unit;
            j.tok_groups = (n + j.toks_per_task - 1) / j.toks_per_task;
            n_tasks *= j.tok_groups;
        }
    }
    if ((double)total * (double)j.cols * n < FM_INLINE_MACS) {
        for (int t = 0; t < n_tasks; t++)
            fm_task(&j, t, 0);
        return 0;
    }
    pool_run(c->pool, n_tasks, fm_task, &j);
    return 0;
}

void cpu_fast_free(cpu_backend *c)
{
    free(c->xf);
    free(c->xq);
    free(c->xd);
    free(c->xs);
    free(c->xp);
    free(c->xlo);
    free(c->xt);
    free(c->xtd);
    free(c->xts);
    free(c->xtlo);
}
