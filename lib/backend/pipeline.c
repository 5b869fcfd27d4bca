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
 * device's).
 *
 * Stages in processes of their own (backend_pipeline_join): this process
 * holds one stage (`rank`); each other is a stand-in, a "peer" backend
 * that runs nothing, keeps no weights and makes no activations. The calls
 * fanned out go to the local stage alone, and what the engine reads of a
 * step (the logits, the sampled outcomes, a choice a stage makes such as
 * the rows a step may hold) is shared from the process that has it to
 * every process through the local stage's link (link_share), in the same
 * order everywhere, so every process takes the same decisions. */
#include "backend/backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static const char pipeline_name[] = "pipeline";
static const char peer_name[] = "peer";

enum { ALONE_CACHE = 4 };

typedef struct {
    backend b;
    backend_ops ops; /* the calls some stage has; the others NULL */
    backend *stage[BACKEND_MAX_STAGES];
    int n;
    int rank;        /* the one stage of this process, or -1: every stage */
    bk_step inner;   /* the step as the stages before the last see it */
    bk_step last;    /* ... and as the last sees it (its sampling, no graph) */
    /* rows_alone agreed by the processes, per moe_used asked */
    int alone_moe[ALONE_CACHE], alone_rows[ALONE_CACHE], n_alone;
} pipeline;

static pipeline *pl_of(backend *b) { return (pipeline *)b->impl; }
static backend *last_of(backend *b) { return pl_of(b)->stage[pl_of(b)->n - 1]; }
static int local(const pipeline *p, int s) { return p->rank < 0 || p->rank == s; }
/* The stage the calls that concern no stage in particular go to. */
static backend *home(const pipeline *p) { return p->stage[p->rank < 0 ? 0 : p->rank]; }

/* ---- the stand-in for a stage in another process ----
 * The model binds weights and makes activations on every stage: a peer
 * keeps nothing (weight_prepare does nothing, act_alloc gives NULL). The
 * forward pass skips a pipeline stage that is a peer (backend_stage_local)
 * but, with tensor-parallel ranks, every process runs the family's forward
 * pass, and the leader's own ops (embedding, norms, the residual stream,
 * the head) are told to the leader's stand-in where the leader is another
 * process: those ops run there, and here they do nothing. A peer never
 * gives data back (no act_read: what the engine reads comes through the
 * pipeline's shares). */

typedef struct {
    int rank;
} peer;

static int peer_rank(const backend *b)
{
    return b->name == peer_name ? ((const peer *)b->impl)->rank : -1;
}

static void peer_destroy(backend *b)
{
    free(b->impl);
    free(b);
}

static int peer_weight_prepare(backend *b, bk_weight *w, memra_err *err)
{
    (void)b, (void)w, (void)err;
    return 0;
}

static float *peer_act_alloc(backend *b, size_t n)
{
    (void)b, (void)n;
    return NULL;
}

static void peer_act_free(backend *b, float *p) { (void)b, (void)p; }

/* The ops another process runs (above). */
static void peer_embed(backend *b, const bk_weight *t, const int32_t *tok, int n, float sc,
                       float *out)
{
    (void)b, (void)t, (void)tok, (void)n, (void)sc, (void)out;
}
static void peer_rmsnorm(backend *b, const float *x, int n, const bk_weight *w, float off,
                         float eps, float *out)
{
    (void)b, (void)x, (void)n, (void)w, (void)off, (void)eps, (void)out;
}
static void peer_matmul(backend *b, const bk_weight *w, const bk_weight *bias, const float *x,
                        int n, float *out)
{
    (void)b, (void)w, (void)bias, (void)x, (void)n, (void)out;
}
static void peer_add(backend *b, float *x, const float *y, size_t n)
{
    (void)b, (void)x, (void)y, (void)n;
}
static void peer_scale(backend *b, float *x, size_t n, float s) { (void)b, (void)x, (void)n, (void)s; }
static void peer_gather_cols(backend *b, const float *src, int n, int64_t n_src,
                             const int32_t *map, int64_t n_dst, float fill, float *out)
{
    (void)b, (void)src, (void)n, (void)n_src, (void)map, (void)n_dst, (void)fill, (void)out;
}
static void peer_act_mul(backend *b, float *x, const float *y, int n, int64_t cols,
                         int64_t y_stride, bk_act act)
{
    (void)b, (void)x, (void)y, (void)n, (void)cols, (void)y_stride, (void)act;
}
static void peer_mul_sigmoid(backend *b, float *x, const float *g, int n, int64_t x_cols,
                             int64_t g_cols)
{
    (void)b, (void)x, (void)g, (void)n, (void)x_cols, (void)g_cols;
}
static void peer_split_heads(backend *b, const float *x, int n, int n_heads, int a_dim,
                             int b_dim, float *a, float *bo)
{
    (void)b, (void)x, (void)n, (void)n_heads, (void)a_dim, (void)b_dim, (void)a, (void)bo;
}
static void peer_join_heads(backend *b, const float *a, const float *bo, int n, int n_heads,
                            int a_dim, int b_dim, float *x)
{
    (void)b, (void)a, (void)bo, (void)n, (void)n_heads, (void)a_dim, (void)b_dim, (void)x;
}

static const backend_ops peer_ops = {
    .destroy = peer_destroy,
    .weight_prepare = peer_weight_prepare,
    .act_alloc = peer_act_alloc,
    .act_free = peer_act_free,
    .embed = peer_embed,
    .rmsnorm = peer_rmsnorm,
    .matmul = peer_matmul,
    .add = peer_add,
    .softcap = peer_scale,
    .scale = peer_scale,
    .gather_cols = peer_gather_cols,
    .act_mul = peer_act_mul,
    .mul_sigmoid = peer_mul_sigmoid,
    .split_heads = peer_split_heads,
    .join_heads = peer_join_heads,
};

static backend *peer_new(int rank)
{
    peer *q = xcalloc(1, sizeof *q);
    q->rank = rank;
    backend *b = xcalloc(1, sizeof *b);
    b->name = peer_name;
    b->ops = &peer_ops;
    b->n_threads = 1;
    b->impl = q;
    return b;
}

/* A joined pipeline's last stage waits for its work so far (its input
 * from the other processes among it) watching the link, before a call
 * that waits on its own (reading the logits or the sampled tokens back):
 * that wait would outlast a process that stopped. */
static void watch(pipeline *p, backend *l)
{
    if (p->rank >= 0)
        l->ops->link_share(l, NULL, 0, p->n - 1);
}

/* `bytes` of host memory from stage root's process to every process's
 * buf (a joined pipeline only); 0, or -1 when the link failed (recorded
 * by the local stage: its status says why). */
static int share(pipeline *p, void *buf, size_t bytes, int root)
{
    backend *l = home(p);
    backend_bind(l);
    return l->ops->link_share(l, buf, bytes, root);
}

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
    pipeline *p = pl_of(b);
    backend *l = last_of(b);
    if (local(p, p->n - 1)) {
        backend_bind(l);
        watch(p, l);
        l->ops->act_read(l, src, dst, n);
    }
    /* from the last stage's process (src is its); a failed link gives
     * NaN, never stale numbers that look right */
    if (p->rank >= 0 && share(p, dst, n * sizeof *dst, p->n - 1) != 0)
        for (size_t i = 0; i < n; i++)
            dst[i] = NAN;
}

static int pl_kv_prepare(backend *b, const kv_cache *kv, memra_err *err)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++) {
        if (!local(p, s))
            continue;
        backend_bind(p->stage[s]);
        if (p->stage[s]->ops->kv_prepare(p->stage[s], kv, err) != 0)
            return memra_wrap(err, "pipeline stage %d", s);
    }
    backend_bind(home(p));
    return 0;
}

/* Every stage keeps the recurrent state of its own layers in its slots. */
static void pl_state_copy(backend *b, const kv_cache *kv, int from, int to)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++) {
        if (!local(p, s))
            continue;
        backend_bind(p->stage[s]);
        p->stage[s]->ops->state_copy(p->stage[s], kv, from, to);
    }
    backend_bind(home(p));
}

static int pl_status(backend *b, memra_err *err)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++)
        if (local(p, s) && backend_status(p->stage[s], err) != 0)
            return memra_wrap(err, "pipeline stage %d", s);
    return 0;
}

/* The stages' figures summed (a device serving two stages counts twice;
 * a joined pipeline's process, its own stage's). */
static int pl_mem_stats(backend *b, uint64_t *used, uint64_t *total, memra_err *err)
{
    pipeline *p = pl_of(b);
    *used = *total = 0;
    for (int s = 0; s < p->n; s++) {
        if (!local(p, s))
            continue;
        uint64_t u, t;
        backend_bind(p->stage[s]);
        int r = backend_mem_stats(p->stage[s], &u, &t, err);
        if (r != 0) {
            backend_bind(home(p));
            return r;
        }
        *used += u;
        *total += t;
    }
    backend_bind(home(p));
    return 0;
}

/* What a sampling gave, from the last stage's process to every process:
 * the outcomes, then the result and its message. */
static void share_outcomes(pipeline *p, smp_outcome *out, int n_rows, int *rc, memra_err *err)
{
    struct {
        int rc;
        memra_err err;
    } r = {.rc = *rc};
    if (err)
        r.err = *err;
    if (share(p, out, (size_t)n_rows * sizeof *out, p->n - 1) != 0 ||
        share(p, &r, sizeof r, p->n - 1) != 0) {
        /* the link failed: no outcome here is one the last stage drew */
        *rc = -1;
        if (err)
            backend_status(home(p), err);
        return;
    }
    *rc = r.rc;
    if (err)
        *err = r.err;
}

static int pl_sample(backend *b, float *logits, int n_rows, int64_t n_vocab, const smp_row *rows,
                     const smp_bias *bias, const smp_pen *pen, const uint32_t *mask,
                     smp_outcome *out, memra_err *err)
{
    pipeline *p = pl_of(b);
    backend *l = last_of(b);
    int rc = 0;
    if (local(p, p->n - 1)) {
        backend_bind(l);
        watch(p, l);
        rc = l->ops->sample(l, logits, n_rows, n_vocab, rows, bias, pen, mask, out, err);
    }
    if (p->rank >= 0)
        share_outcomes(p, out, n_rows, &rc, err);
    return rc;
}

/* The first stage is where a step starts (a joined pipeline's process:
 * its own). */
static void pl_bind(backend *b) { backend_bind(home(pl_of(b))); }

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
        if (!local(p, s))
            continue;
        backend *sb = p->stage[s];
        backend_bind(sb);
        rc = sb->ops->step_begin(sb, s == p->n - 1 ? &p->last : &p->inner);
    }
    backend_bind(home(p));
    return rc == 0 ? 0 : -1;
}

static int pl_step_end(backend *b, const bk_step *st)
{
    pipeline *p = pl_of(b);
    int rc = 1;
    for (int s = 0; s < p->n; s++) {
        if (!local(p, s))
            continue;
        backend *sb = p->stage[s];
        backend_bind(sb);
        if (s == p->n - 1 && st->sample)
            watch(p, sb);
        int r = sb->ops->step_end(sb, s == p->n - 1 ? &p->last : &p->inner);
        if (r < 0)
            rc = -1;
    }
    backend_bind(home(p));
    /* the step's sampling, done by the last stage's process */
    if (p->rank >= 0 && st->sample)
        share_outcomes(p, st->sample->out, st->sample->n_rows, &st->sample->rc,
                       &st->sample->err);
    return rc;
}

/* The first stage's (shared from its process by a joined pipeline). */
static int pl_preferred_batch(backend *b)
{
    pipeline *p = pl_of(b);
    backend *f = p->stage[0];
    int n = local(p, 0) ? f->ops->preferred_batch(f) : 0;
    if (p->rank >= 0)
        share(p, &n, sizeof n, 0);
    return n;
}

static void pl_plan_decode(backend *b, int max_rows)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++) {
        if (!local(p, s))
            continue;
        backend_bind(p->stage[s]);
        p->stage[s]->ops->plan_decode(p->stage[s], max_rows);
    }
    backend_bind(home(p));
}

static int fewest(int best, int r) { return r > 0 && (best <= 0 || r < best) ? r : best; }

/* The fewest any stage allows (a joined pipeline's processes each tell
 * theirs to all, once per moe_used: the engine asks every step). */
static int pl_rows_alone(backend *b, int moe_used)
{
    pipeline *p = pl_of(b);
    for (int i = 0; i < p->n_alone; i++)
        if (p->alone_moe[i] == moe_used)
            return p->alone_rows[i];
    int best = 0;
    for (int s = 0; s < p->n; s++) {
        int r = local(p, s) ? p->stage[s]->ops->rows_alone(p->stage[s], moe_used) : 0;
        if (p->rank >= 0)
            share(p, &r, sizeof r, s);
        best = fewest(best, r);
    }
    if (p->rank >= 0 && p->n_alone < ALONE_CACHE) {
        p->alone_moe[p->n_alone] = moe_used;
        p->alone_rows[p->n_alone++] = best;
    }
    return best;
}

static void pl_finish(backend *b)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++) {
        if (!local(p, s) || !p->stage[s]->ops->finish)
            continue;
        backend_bind(p->stage[s]);
        p->stage[s]->ops->finish(p->stage[s]);
    }
    backend_bind(home(p));
}

static void pl_profiler_range(backend *b, int on)
{
    pipeline *p = pl_of(b);
    for (int s = 0; s < p->n; s++) {
        if (!local(p, s))
            continue;
        backend_bind(p->stage[s]);
        p->stage[s]->ops->profiler_range(p->stage[s], on);
    }
    backend_bind(home(p));
}

static backend *pipeline_finish(pipeline *p, backend *kind);

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
    p->rank = -1;
    memcpy(p->stage, stages, (size_t)n * sizeof *stages);
    return pipeline_finish(p, stages[0]);
}

backend *backend_pipeline_join(backend *local_bk, int n, int rank, const char *id_file,
                               memra_err *err)
{
    if (n < 2 || n > BACKEND_MAX_STAGES || rank < 0 || rank >= n) {
        memra_fail(err, "pipeline: stage %d of %d (2 to %d stages, a stage from 0)", rank, n,
                   BACKEND_MAX_STAGES);
        backend_destroy(local_bk);
        return NULL;
    }
    const backend_ops *lo = local_bk->ops;
    if (!lo->link_join || !lo->link_send || !lo->link_recv || !lo->link_share) {
        memra_fail(err, "pipeline: the %s backend cannot run a stage in a process of its own "
                   "(stages in separate processes talk through NCCL: use the cuda backend)",
                   local_bk->name);
        backend_destroy(local_bk);
        return NULL;
    }
    backend_bind(local_bk);
    if (lo->link_join(local_bk, id_file, n, rank, err) != 0) {
        memra_wrap(err, "pipeline stage %d of %d", rank, n);
        backend_destroy(local_bk);
        return NULL;
    }
    pipeline *p = xcalloc(1, sizeof *p);
    p->n = n;
    p->rank = rank;
    for (int s = 0; s < n; s++)
        p->stage[s] = s == rank ? local_bk : peer_new(s);
    return pipeline_finish(p, local_bk);
}

/* The group's calls, those the stages' kind has. */
static backend *pipeline_finish(pipeline *p, backend *kind)
{
    const backend_ops *so = kind->ops;
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
    o->finish = so->finish ? pl_finish : NULL;
    p->b.name = pipeline_name;
    p->b.ops = o;
    p->b.n_threads = kind->n_threads;
    p->b.impl = p;
    return &p->b;
}

int backend_n_stages(const backend *b)
{
    return b->name == pipeline_name ? ((const pipeline *)b->impl)->n : 1;
}

int backend_stage_local(const backend *b, int s)
{
    return b->name != pipeline_name || local((const pipeline *)b->impl, s);
}

int backend_group_settle(backend *b, int rc, const void *asked, size_t bytes, memra_err *err)
{
    if (b->name != pipeline_name || pl_of(b)->rank < 0)
        return rc;
    pipeline *p = pl_of(b);
    /* stage 0's options against this process's */
    unsigned char *first = xmalloc(bytes ? bytes : 1);
    memcpy(first, asked, bytes);
    if (share(p, first, bytes, 0) != 0) {
        free(first);
        backend_status(home(p), err);
        return -1;
    }
    if (rc == 0 && memcmp(first, asked, bytes) != 0)
        rc = memra_fail(err, "this process was asked for other steps than stage 0's (every "
                        "process of a pipeline takes the same arguments but --rank and "
                        "--devices)");
    free(first);
    int out = rc;
    for (int s = 0; s < p->n; s++) {
        struct {
            int rc;
            memra_err err;
        } r = {.rc = 0};
        if (s == p->rank) {
            r.rc = rc;
            if (rc != 0 && err)
                r.err = *err;
        }
        if (share(p, &r, sizeof r, s) != 0) {
            backend_status(home(p), err);
            return -1;
        }
        if (r.rc != 0 && out == 0) {
            out = -1;
            memra_fail(err, "pipeline stage %d (its own process) failed: %s", s, r.err.msg);
        }
    }
    return out;
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
    /* a stage in another process: to it, or from it, through this
     * process's stage's link; between two others, nothing here */
    int to_peer = peer_rank(to), from_peer = peer_rank(from);
    if (to_peer >= 0 || from_peer >= 0) {
        if (to_peer < 0) {
            backend_bind(to);
            to->ops->link_recv(to, dst, n, from_peer);
        } else if (from_peer < 0) {
            backend_bind(from);
            from->ops->link_send(from, src, n, to_peer);
        }
        return;
    }
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
