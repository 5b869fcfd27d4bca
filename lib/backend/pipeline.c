/* The pipeline backend: stages of one kind behind the one backend the
 * engine holds (backend.h, "pipeline parallel"; docs/decisions/0028).
 *
 * It runs no op itself: the model runs each layer's ops on its stage and
 * moves the residual stream from stage to stage. What it does is fan the
 * engine's calls out: every stage is bound, prepared, told each step
 * begins and ends, and asked for its failure; the logits and their
 * sampling live on the last stage, which runs the head.
 *
 * A step is never captured as a graph across stages: each stage is told
 * the step with graph_ok off, so it runs its ops eagerly (and a graphed
 * step's bytes are the eager step's, so a pipeline's output is one
 * device's). */
#include "backend/backend.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static const char pipeline_name[] = "pipeline";

typedef struct {
    backend b;
    backend_ops ops; /* the calls some stage has; the others NULL */
    backend *stage[BACKEND_MAX_STAGES];
    int n;
    bk_step inner;   /* the step as the stages before the last see it */
    bk_step last;    /* ... and as the last sees it (its sampling, no graph) */
} pipeline;

static pipeline *pl_of(backend *b) { return (pipeline *)b->impl; }
static backend *last_of(backend *b) { return pl_of(b)->stage[pl_of(b)->n - 1]; }

static void pl_destroy(backend *b)
{
    pipeline *p = pl_of(b);
    for (int s = p->n - 1; s >= 0; s--)
        backend_destroy(p->stage[s]);
    free(p);
}

/* The model never asks the pipeline for weights or activations of its
 * own; the engine reads the logits, which the last stage holds. */
static void pl_act_read(backend *b, const float *src, float *dst, size_t n)
{
    backend *l = last_of(b);
    backend_bind(l);
    l->ops->act_read(l, src, dst, n);
}

static int pl_kv_prepare(backend *b, const kv_cache *kv, memra_err *err)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++) {
        backend_bind(p->stage[s]);
        if (p->stage[s]->ops->kv_prepare(p->stage[s], kv, err) != 0)
            return memra_wrap(err, "pipeline stage %d", s);
    }
    backend_bind(p->stage[0]);
    return 0;
}

/* Every stage keeps the recurrent state of its own layers in its slots. */
static void pl_state_copy(backend *b, const kv_cache *kv, int from, int to)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++) {
        backend_bind(p->stage[s]);
        p->stage[s]->ops->state_copy(p->stage[s], kv, from, to);
    }
    backend_bind(p->stage[0]);
}

static int pl_status(backend *b, memra_err *err)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++)
        if (backend_status(p->stage[s], err) != 0)
            return memra_wrap(err, "pipeline stage %d", s);
    return 0;
}

/* The stages' figures summed (a device serving two stages counts twice). */
static int pl_mem_stats(backend *b, uint64_t *used, uint64_t *total, memra_err *err)
{
    pipeline *p = pl_of(b);
    *used = *total = 0;
    for (int s = 0; s < p->n; s++) {
        uint64_t u, t;
        backend_bind(p->stage[s]);
        int r = backend_mem_stats(p->stage[s], &u, &t, err);
        if (r != 0) {
            backend_bind(p->stage[0]);
            return r;
        }
        *used += u;
        *total += t;
    }
    backend_bind(p->stage[0]);
    return 0;
}

static int pl_sample(backend *b, float *logits, int n_rows, int64_t n_vocab, const smp_row *rows,
                     const smp_bias *bias, const smp_pen *pen, const uint32_t *mask,
                     smp_outcome *out, memra_err *err)
{
    backend *l = last_of(b);
    backend_bind(l);
    return l->ops->sample(l, logits, n_rows, n_vocab, rows, bias, pen, mask, out, err);
}

/* The first stage is where a step starts. */
static void pl_bind(backend *b) { backend_bind(pl_of(b)->stage[0]); }

/* Each stage is told the step, eagerly: the stages before the last read
 * nothing back and sample nothing; the last has the engine's reads and
 * sampling. Returns 0 (the engine runs the ops), or -1 when a stage
 * failed. */
static int pl_step_begin(backend *b, const bk_step *st)
{
    pipeline *p = pl_of(b);
    p->inner = *st;
    p->inner.graph_ok = 0;
    p->inner.logits = NULL;
    p->inner.n_logits = 0;
    p->inner.hidden = NULL;
    p->inner.n_hidden = 0;
    p->inner.sample = NULL;
    p->inner.dev_logits = NULL;
    p->last = *st;
    p->last.graph_ok = 0;
    int rc = 0;
    for (int s = 0; s < p->n && rc == 0; s++) {
        backend *sb = p->stage[s];
        backend_bind(sb);
        rc = sb->ops->step_begin(sb, s == p->n - 1 ? &p->last : &p->inner);
    }
    backend_bind(p->stage[0]);
    return rc == 0 ? 0 : -1;
}

static int pl_step_end(backend *b, const bk_step *st)
{
    (void)st;
    pipeline *p = pl_of(b);
    int rc = 1;
    for (int s = 0; s < p->n; s++) {
        backend *sb = p->stage[s];
        backend_bind(sb);
        int r = sb->ops->step_end(sb, s == p->n - 1 ? &p->last : &p->inner);
        if (r < 0)
            rc = -1;
    }
    backend_bind(p->stage[0]);
    return rc;
}

static int pl_preferred_batch(backend *b)
{
    backend *f = pl_of(b)->stage[0];
    return f->ops->preferred_batch(f);
}

static void pl_plan_decode(backend *b, int max_rows)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++) {
        backend_bind(p->stage[s]);
        p->stage[s]->ops->plan_decode(p->stage[s], max_rows);
    }
    backend_bind(p->stage[0]);
}

/* The fewest any stage allows. */
static int pl_rows_alone(backend *b, int moe_used)
{
    pipeline *p = pl_of(b);
    int best = 0;
    for (int s = 0; s < p->n; s++) {
        int r = p->stage[s]->ops->rows_alone(p->stage[s], moe_used);
        if (r > 0 && (best <= 0 || r < best))
            best = r;
    }
    return best;
}

static void pl_profiler_range(backend *b, int on)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++) {
        backend_bind(p->stage[s]);
        p->stage[s]->ops->profiler_range(p->stage[s], on);
    }
    backend_bind(p->stage[0]);
}

backend *backend_pipeline_create(backend **stages, int n, memra_err *err)
{
    if (n < 2 || n > BACKEND_MAX_STAGES) {
        memra_fail(err, "pipeline: %d stages (2 to %d)", n, BACKEND_MAX_STAGES);
        for (int s = 0; s < n; s++)
            backend_destroy(stages[s]);
        return NULL;
    }
    for (int s = 1; s < n; s++)
        if (stages[s]->ops != stages[0]->ops) {
            memra_fail(err, "pipeline: stage %d runs on %s, stage 0 on %s (one kind of backend "
                       "for every stage)", s, stages[s]->name, stages[0]->name);
            for (int t = 0; t < n; t++)
                backend_destroy(stages[t]);
            return NULL;
        }
    pipeline *p = xcalloc(1, sizeof *p);
    p->n = n;
    memcpy(p->stage, stages, (size_t)n * sizeof *stages);
    const backend_ops *so = stages[0]->ops;
    backend_ops *o = &p->ops;
    o->destroy = pl_destroy;
    o->act_read = pl_act_read;
    o->kv_prepare = so->kv_prepare ? pl_kv_prepare : NULL;
    o->state_copy = so->state_copy ? pl_state_copy : NULL;
    o->status = pl_status;
    o->mem_stats = so->mem_stats ? pl_mem_stats : NULL;
    o->sample = so->sample ? pl_sample : NULL;
    o->bind = pl_bind;
    o->step_begin = so->step_begin && so->step_end ? pl_step_begin : NULL;
    o->step_end = so->step_begin && so->step_end ? pl_step_end : NULL;
    o->preferred_batch = so->preferred_batch ? pl_preferred_batch : NULL;
    o->plan_decode = so->plan_decode ? pl_plan_decode : NULL;
    o->rows_alone = so->rows_alone ? pl_rows_alone : NULL;
    o->profiler_range = so->profiler_range ? pl_profiler_range : NULL;
    p->b.name = pipeline_name;
    p->b.ops = o;
    p->b.n_threads = stages[0]->n_threads;
    p->b.impl = p;
    return &p->b;
}

int backend_n_stages(const backend *b)
{
    return b->name == pipeline_name ? ((const pipeline *)b->impl)->n : 1;
}

backend *backend_stage(backend *b, int s)
{
    if (b->name != pipeline_name) {
        MEMRA_ASSERT(s == 0);
        return b;
    }
    pipeline *p = pl_of(b);
    MEMRA_ASSERT(s >= 0 && s < p->n);
    return p->stage[s];
}

void backend_act_move(backend *to, float *dst, backend *from, const float *src, size_t n)
{
    if (to->ops->act_import && to->ops->act_import(to, dst, from, src, n) == 0)
        return;
    /* Through host memory: act_read waits for from's work, act_write
     * lands before to's next op. */
    float *tmp = xmalloc(n * sizeof *tmp);
    backend_bind(from);
    from->ops->act_read(from, src, tmp, n);
    backend_bind(to);
    to->ops->act_write(to, dst, tmp, n);
    free(tmp);
}
