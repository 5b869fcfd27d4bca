/* Matrix products on the CPU: x [n][cols] times a stored weight [rows][cols]
 * transposed. Each weight row is dequantized once into the thread's scratch
 * and dotted with all n input rows, so prefill reads the weights once per
 * chunk and decode (n = 1) reads them once per token. Work is split over
 * output rows; one output value is always one cpu_dot by one thread. */
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"

/* Rows per task: enough tasks to balance the threads, few enough that the
 * hand-out overhead stays small. */
#define MM_TASKS_PER_THREAD 8
#define MM_MIN_ROWS 4
#define MM_INLINE_MACS 65536.0

typedef struct {
    cpu_backend *c;
    const cpu_mm_item *items;
    int n_items;
    const int64_t *first_row; /* [n_items + 1]: items' rows concatenated */
    int64_t rows_per_task;
    const float *x;
    int n;
} mm_job;

static void mm_task(void *ctx, int task, int thread)
{
    mm_job *j = ctx;
    int64_t r0 = (int64_t)task * j->rows_per_task;
    int64_t r1 = r0 + j->rows_per_task;
    if (r1 > j->first_row[j->n_items])
        r1 = j->first_row[j->n_items];
    float *buf = j->c->scratch[thread];
    int it = 0;
    for (int64_t g = r0; g < r1; g++) {
        while (g >= j->first_row[it + 1])
            it++;
        const cpu_mm_item *m = &j->items[it];
        int64_t r = g - j->first_row[it], rows = m->w->rows, cols = m->w->cols;
        const float *wr = cpu_weight_row(m->w, r, buf);
        float b = m->bias ? m->bias[r] : 0.0f;
        for (int t = 0; t < j->n; t++) {
            float s = cpu_dot(wr, j->x + (size_t)t * cols, cols);
            m->out[(size_t)t * rows + r] = m->bias ? s + b : s;
        }
    }
}

void cpu_matmul_multi(cpu_backend *c, const cpu_mm_item *items, int n_items, const float *x,
                      int n)
{
    MEMRA_ASSERT(n_items > 0 && n_items <= CPU_MM_MAX_ITEMS);
    if (c->fast && cpu_fast_matmul_multi(c, items, n_items, x, n) == 0)
        return;
    int64_t first[CPU_MM_MAX_ITEMS + 1] = {0};
    int64_t cols = items[0].w->cols;
    for (int i = 0; i < n_items; i++) {
        MEMRA_ASSERT(items[i].w->cols == cols);
        first[i + 1] = first[i] + items[i].w->rows;
    }
    int64_t total = first[n_items];
    if (total == 0 || n == 0)
        return;
    cpu_scratch_reserve(c, (size_t)cols);
    int64_t per = total / ((int64_t)c->n_threads * MM_TASKS_PER_THREAD);
    if (per < MM_MIN_ROWS)
        per = MM_MIN_ROWS;
    mm_job j = {c, items, n_items, first, per, x, n};
    int n_tasks = (int)((total + per - 1) / per);
    /* Waking the workers costs more than a tiny product (a small model's
     * decode step); run those on the calling thread (index 0). */
    if ((double)total * (double)cols * n < MM_INLINE_MACS) {
        for (int t = 0; t < n_tasks; t++)
            mm_task(&j, t, 0);
        return;
    }
    pool_run(c->pool, n_tasks, mm_task, &j);
}

void cpu_op_matmul(backend *b, const bk_weight *w, const bk_weight *bias, const float *x, int n,
                   float *out)
{
    cpu_backend *c = cpu_of(b);
    cpu_mm_item it = {w, cpu_weight_vec(c, 0, bias), out};
    cpu_matmul_multi(c, &it, 1, x, n);
}

void cpu_op_attn_qkv(backend *b, const bk_weight *wq, const bk_weight *wk, const bk_weight *wv,
                     const bk_weight *bq, const bk_weight *bk, const bk_weight *bv,
                     const float *x, int n, float *q, float *k, float *v)
{
    cpu_backend *c = cpu_of(b);
    cpu_mm_item it[3] = {
        {wq, cpu_weight_vec(c, 0, bq), q},
        {wk, cpu_weight_vec(c, 1, bk), k},
        {wv, cpu_weight_vec(c, 2, bv), v},
    };
    cpu_matmul_multi(c, it, 3, x, n);
}

void cpu_op_delta_in_proj(backend *b, const bk_weight *w_qkv, const bk_weight *w_z,
                          const bk_weight *w_beta, const bk_weight *w_alpha, const float *x,
                          int n, float *qkv, float *z, float *beta_in, float *alpha)
{
    cpu_mm_item it[4] = {
        {w_qkv, NULL, qkv}, {w_z, NULL, z}, {w_beta, NULL, beta_in}, {w_alpha, NULL, alpha}};
    cpu_matmul_multi(cpu_of(b), it, 4, x, n);
}

/* act(gate) * up over hb, hb2 in tasks of GLU_TASK elements. */
enum { GLU_TASK = 16384 };
typedef struct {
    float *hb;
    const float *hb2;
    size_t m;
    bk_act act;
    void (*silu)(float *h, const float *g, int64_t n); /* the fast path's, or NULL */
} glu_job;

static void glu_range(const glu_job *j, size_t i0, size_t i1)
{
    if (j->act == BK_ACT_GELU_TANH)
        for (size_t i = i0; i < i1; i++)
            j->hb[i] = cpu_gelu_tanh(j->hb[i]) * j->hb2[i];
    else if (j->silu)
        j->silu(j->hb + i0, j->hb2 + i0, (int64_t)(i1 - i0));
    else
        for (size_t i = i0; i < i1; i++)
            j->hb[i] = cpu_silu(j->hb[i]) * j->hb2[i];
}

static void glu_task(void *ctx, int task, int thread)
{
    (void)thread;
    const glu_job *j = ctx;
    size_t i0 = (size_t)task * GLU_TASK, i1 = i0 + GLU_TASK < j->m ? i0 + GLU_TASK : j->m;
    glu_range(j, i0, i1);
}

void cpu_glu(const cpu_backend *c, bk_act act, float *h, const float *u, size_t m)
{
    glu_job j = {h, u, m, act, c->fast ? c->fast->glu_silu : NULL};
    glu_range(&j, 0, m);
}

void backend_cpu_glu(backend *b, bk_act act, float *h, const float *u, size_t m)
{
    cpu_glu(cpu_of(b), act, h, u, m);
}

void cpu_op_ffn_glu(backend *b, const bk_weight *gate, const bk_weight *up,
                    const bk_weight *down, bk_act act, const float *x, int n, float *hb,
                    float *hb2, float *out)
{
    cpu_backend *c = cpu_of(b);
    cpu_mm_item gu[2] = {{gate, NULL, hb}, {up, NULL, hb2}};
    cpu_matmul_multi(c, gu, 2, x, n);
    glu_job j = {hb, hb2, (size_t)n * (size_t)gate->rows, act,
                 c->fast ? c->fast->glu_silu : NULL};
    /* A prompt chunk's activations on the pool (a decode step's stay
     * here); each element the same arithmetic wherever it runs. */
    int tasks = (int)((j.m + GLU_TASK - 1) / GLU_TASK);
    if (tasks > 1)
        pool_run(c->pool, tasks, glu_task, &j);
    else
        glu_task(&j, 0, 0);
    cpu_mm_item d = {down, NULL, out};
    cpu_matmul_multi(c, &d, 1, hb, n);
}
