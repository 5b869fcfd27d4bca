/* The gated DeltaNet mixer (delta_net) against the CPU reference, over a
 * state pool on each backend: a prompt chunk, then batched decode steps of
 * two sequences, one of them starting (position 0 clears its slot), a
 * chunk that goes on from the window, and a step whose rows' states a
 * checkpoint keeps. The first chunk's rows one step each
 * on a third sequence must give the chunk's bytes
 * (the rows of a sequence run in order, whatever the step holds). And the
 * gated attention's small ops: mul_sigmoid and split_heads (and
 * join_heads, its reverse, which an MTP block uses). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/kv_cache.h"
#include "check/kernel_check_internal.h"
#include "core/check.h"
#include "format/dtype.h"

/* A pool of one KV layer and state slots on each backend: one for each of
 * three sequences, and five for a checkpoint of four rows. */
#define POOL_SLOTS 8
typedef struct {
    kv_cache cpu, gpu;
    kv_seq cs[3], gs[3];
} delta_pools;

static int pools_make(kc *k, delta_pools *p, size_t floats, int reserve)
{
    memra_err err;
    memset(p, 0, sizeof *p);
    const int blocks = 3 * ((reserve + 15) / 16) + 4;
    if (kv_cache_init(&p->cpu, KV_F32, 1, 32, 16, blocks, &err) ||
        kv_cache_enable_state(&p->cpu, POOL_SLOTS, floats, 1, &err) ||
        kv_cache_init_tables(&p->gpu, KV_F32, 1, 32, 16, blocks, &err) ||
        kv_cache_enable_state(&p->gpu, POOL_SLOTS, floats, 0, &err) ||
        k->gpu->ops->kv_prepare(k->gpu, &p->gpu, &err)) {
        kc_report_ok(k, "delta_net", "state pools", 0, err.msg);
        return -1;
    }
    for (int i = 0; i < 3; i++) {
        kv_seq_init(&p->cs[i], &p->cpu);
        kv_seq_init(&p->gs[i], &p->gpu);
        if (kv_seq_reserve(&p->cs[i], reserve, &err) ||
            kv_seq_reserve(&p->gs[i], reserve, &err)) {
            kc_report_ok(k, "delta_net", "state slots", 0, err.msg);
            return -1;
        }
        MEMRA_ASSERT(p->cs[i].state_slot == p->gs[i].state_slot);
    }
    return 0;
}

static void pools_free(delta_pools *p)
{
    for (int i = 0; i < 3; i++) {
        kv_seq_free(&p->cs[i]);
        kv_seq_free(&p->gs[i]);
    }
    kv_cache_free(&p->cpu);
    kv_cache_free(&p->gpu);
}

/* One step on both backends: rows (seq index, position), inputs on the
 * host; the GPU's output into got, the CPU's into want. */
#define MAX_ROWS 256
typedef struct {
    const bk_delta *d;
    size_t conv_dim, vdim, nv;
} delta_case;

static void run_step(kc *k, delta_pools *p, const delta_case *dc, int n, const int *seq,
                     const int32_t *pos, const float *in, float *want, float *got)
{
    kv_seq *cs[MAX_ROWS], *gs[MAX_ROWS];
    for (int i = 0; i < n; i++) {
        cs[i] = &p->cs[seq[i]];
        gs[i] = &p->gs[seq[i]];
    }
    bk_batch cr = {n, pos, cs}, gr = {n, pos, gs};
    size_t nq = (size_t)n * dc->conv_dim, nz = (size_t)n * dc->vdim, nb = (size_t)n * dc->nv;
    const float *qkv = in, *z = in + nq, *b = z + nz, *a = b + nb;
    k->cpu->ops->delta_net(k->cpu, dc->d, &cr, qkv, z, b, a, want);
    float *dev = kc_dev(k, in, nq + nz + 2 * nb);
    float *dout = kc_dev(k, want, nz);
    k->gpu->ops->delta_net(k->gpu, dc->d, &gr, dev, dev + nq, dev + nq + nz, dev + nq + nz + nb,
                           dout);
    float *r = kc_read(k, dout, nz);
    memcpy(got, r, nz * sizeof(float));
    free(r);
    kc_dev_free(k, dev);
    kc_dev_free(k, dout);
}

/* Row i of a step's inputs laid out for n rows ([n] qkv, [n] z, [n] b,
 * [n] a) as the inputs of a step of that row alone. */
static void one_row(const delta_case *dc, const float *in, int n, int i, float *row)
{
    size_t nq = (size_t)n * dc->conv_dim, nz = (size_t)n * dc->vdim, nb = (size_t)n * dc->nv;
    memcpy(row, in + (size_t)i * dc->conv_dim, dc->conv_dim * 4);
    memcpy(row + dc->conv_dim, in + nq + (size_t)i * dc->vdim, dc->vdim * 4);
    memcpy(row + dc->conv_dim + dc->vdim, in + nq + nz + (size_t)i * dc->nv, dc->nv * 4);
    memcpy(row + dc->conv_dim + dc->vdim + dc->nv, in + nq + nz + nb + (size_t)i * dc->nv,
           dc->nv * 4);
}

/* A slot of the GPU's state pool, read to the host (malloc'd). */
static float *gpu_slot(kc *k, const kv_cache *c, int slot)
{
    const float *pool = cuda_of(k->gpu)->state;
    return kc_read(k, pool + (size_t)slot * c->state_floats, c->state_floats);
}

/* A checkpoint of sequence 0 at position at that keeps the state after
 * each of its next 4 rows: a step of 5 rows leaves those states the CPU's
 * (within bound, into *worst), and each the bytes that running only the
 * rows up to it leaves (*inv), which a speculation round's rollback
 * relies on. */
static void checkpoint_rows(kc *k, delta_pools *p, const delta_case *dc, int32_t at,
                            size_t per_row, double *worst, int *inv)
{
    memra_err err;
    const int n = 5;
    kv_seq *cs = &p->cs[0], *gs = &p->gs[0];
    cs->n_tokens = gs->n_tokens = at;
    if (kv_seq_checkpoint(cs, n - 1, &err) || kv_seq_checkpoint(gs, n - 1, &err)) {
        kc_report_ok(k, "delta_net", "checkpoint slots", 0, err.msg);
        return;
    }
    k->cpu->ops->state_copy(k->cpu, &p->cpu, cs->state_slot, cs->snap[0]);
    k->gpu->ops->state_copy(k->gpu, &p->gpu, gs->state_slot, gs->snap[0]);
    float *in = xmalloc((size_t)n * per_row * sizeof(float));
    float *want = xmalloc((size_t)n * dc->vdim * sizeof(float));
    float *got = xmalloc((size_t)n * dc->vdim * sizeof(float));
    float *row = xmalloc(per_row * sizeof(float));
    kc_fill(k, in, (size_t)n * per_row, 1.0f);
    int seq[5] = {0, 0, 0, 0, 0};
    int32_t pos[5];
    for (int i = 0; i < n; i++)
        pos[i] = at + i;
    run_step(k, p, dc, n, seq, pos, in, want, got);
    double e = kc_rel_err(got, want, (size_t)n * dc->vdim);
    *worst = e > *worst ? e : *worst;
    for (int j = 1; j < n; j++) {
        float *g = gpu_slot(k, &p->gpu, gs->snap[j]);
        const float *c = p->cpu.state + (size_t)cs->snap[j] * p->cpu.state_floats;
        e = kc_rel_err(g, c, p->cpu.state_floats);
        *worst = e > *worst ? e : *worst;
        /* back to the checkpoint, the j rows one step each: the live state
         * is the kept one, byte for byte */
        k->gpu->ops->state_copy(k->gpu, &p->gpu, gs->snap[0], gs->state_slot);
        for (int i = 0; i < j; i++) {
            one_row(dc, in, n, i, row);
            run_step(k, p, dc, 1, seq, pos + i, row, want, got);
        }
        float *live = gpu_slot(k, &p->gpu, gs->state_slot);
        *inv = *inv && memcmp(live, g, p->gpu.state_floats * sizeof(float)) == 0;
        free(live);
        free(g);
    }
    free(in);
    free(want);
    free(got);
    free(row);
}

/* A DeltaNet layer of random weights (a conv of four taps), as a case. */
typedef struct {
    bk_weight conv, dt, a, norm;
    bk_delta d;
    delta_case dc;  /* dc.d points at d */
    size_t floats;  /* state floats a sequence */
} delta_layer;

static void delta_layer_free(delta_layer *l)
{
    kc_weight_free(&l->conv);
    kc_weight_free(&l->dt);
    kc_weight_free(&l->a);
    kc_weight_free(&l->norm);
}

static int delta_layer_make(kc *k, delta_layer *l, int nk, int nvh, int kd, int vd, int tiled)
{
    const int ck = 4;
    memset(l, 0, sizeof *l);
    size_t conv_dim = 2 * (size_t)nk * kd + (size_t)nvh * vd;
    if (kc_weight(k, &l->conv, DT_F32, 1, (int64_t)(conv_dim * ck), "conv") ||
        kc_weight(k, &l->dt, DT_F32, 1, nvh, "dt_bias") ||
        kc_weight(k, &l->a, DT_F32, 1, nvh, "A") || kc_weight(k, &l->norm, DT_BF16, 1, vd, "norm")) {
        delta_layer_free(l);
        return -1;
    }
    l->d = (bk_delta){.state_off = 0, .n_k_heads = nk, .n_v_heads = nvh, .k_dim = kd,
                      .v_dim = vd, .conv_k = ck, .tiled = tiled, .conv = &l->conv,
                      .dt_bias = &l->dt, .a = &l->a, .a_is_log = !tiled, .norm = &l->norm,
                      .eps = 1e-6f};
    l->dc = (delta_case){&l->d, conv_dim, (size_t)nvh * vd, (size_t)nvh};
    l->floats = bk_delta_state_floats(nk, nvh, kd, vd, ck);
    return 0;
}

static void delta_case_run(kc *k, int nk, int nvh, int kd, int vd, int tiled)
{
    delta_layer l;
    if (delta_layer_make(k, &l, nk, nvh, kd, vd, tiled) != 0)
        return;
    const delta_case dc = l.dc;
    const size_t conv_dim = dc.conv_dim;
    delta_pools p;
    if (pools_make(k, &p, l.floats, 64) != 0) {
        pools_free(&p);
        delta_layer_free(&l);
        return;
    }
    const int chunk = 40; /* more rows than one tile of the rule kernel stages */
    size_t per_row = conv_dim + dc.vdim + 2 * dc.nv;
    float *in = xmalloc((size_t)chunk * per_row * sizeof(float));
    float *want = xmalloc((size_t)chunk * dc.vdim * sizeof(float));
    float *got = xmalloc((size_t)chunk * dc.vdim * sizeof(float));
    float *one = xmalloc(dc.vdim * sizeof(float)), *g1 = xmalloc(dc.vdim * sizeof(float));
    double worst = 0;
    int inv = 1;
    /* a prompt chunk of sequence 0, positions 0..5 */
    kc_fill(k, in, (size_t)chunk * per_row, 1.0f);
    int seq[64];
    int32_t pos[64];
    for (int i = 0; i < chunk; i++)
        seq[i] = 0, pos[i] = i;
    run_step(k, &p, &dc, chunk, seq, pos, in, want, got);
    double e = kc_rel_err(got, want, (size_t)chunk * dc.vdim);
    worst = e > worst ? e : worst;
    /* the same rows one step each on sequence 2: the chunk's bytes */
    for (int i = 0; i < chunk; i++) {
        float *row = xmalloc(per_row * sizeof(float));
        one_row(&dc, in, chunk, i, row);
        int s2 = 2;
        run_step(k, &p, &dc, 1, &s2, pos + i, row, one, g1);
        inv = inv && memcmp(g1, got + (size_t)i * dc.vdim, dc.vdim * 4) == 0;
        free(row);
    }
    /* batched decode: sequence 0 goes on, sequence 1 starts; twice */
    for (int step = 0; step < 2; step++) {
        seq[0] = step ? 1 : 0, pos[0] = step ? 1 : chunk;
        seq[1] = step ? 0 : 1, pos[1] = step ? chunk + 1 : 0;
        kc_fill(k, in, 2 * per_row, 1.0f);
        run_step(k, &p, &dc, 2, seq, pos, in, want, got);
        e = kc_rel_err(got, want, 2 * dc.vdim);
        worst = e > worst ? e : worst;
    }
    /* a chunk that goes on from the window: sequence 0, three positions on */
    for (int i = 0; i < 3; i++)
        seq[i] = 0, pos[i] = chunk + 2 + i;
    kc_fill(k, in, 3 * per_row, 1.0f);
    run_step(k, &p, &dc, 3, seq, pos, in, want, got);
    e = kc_rel_err(got, want, 3 * dc.vdim);
    worst = e > worst ? e : worst;
    checkpoint_rows(k, &p, &dc, chunk + 5, per_row, &worst, &inv);
    char what[112];
    snprintf(what, sizeof what, "%d/%d heads k%d v%d %s, chunk 40 + 2 batched + chunk 3 + "
             "5 rows kept", nk, nvh, kd, vd, tiled ? "tiled" : "grouped");
    kc_report(k, "delta_net", what, worst, 1e-5, inv, -1, 0);
    free(in);
    free(want);
    free(got);
    free(one);
    free(g1);
    pools_free(&p);
    delta_layer_free(&l);
}

/* The CPU's and the GPU's state of sequence i: the largest difference
 * over the largest value (into *worst). */
static void states_agree(kc *k, delta_pools *p, int i, double *worst)
{
    float *g = gpu_slot(k, &p->gpu, p->gs[i].state_slot);
    const float *c = p->cpu.state + (size_t)p->cs[i].state_slot * p->cpu.state_floats;
    double e = kc_rel_err(g, c, p->cpu.state_floats);
    *worst = e > *worst ? e : *worst;
    free(g);
}

/* Prefill steps that take the chunked rule (kernels/delta_chunk.cuh): a
 * packed step of two fresh sequences (100 and 70 rows: the middle window
 * holds the end of one and the start of the other), then 41 rows more of
 * the first from its state (an odd window: the last 2 x 2 tile of the
 * window's pairs is half outside), then a decode step of both (the row-after-row
 * rule from the chunked form's states). Outputs and states against the
 * CPU's; within a looser bound than the recurrent rule's, which sums in
 * the CPU's order. */
static void delta_chunk_case(kc *k, int nk, int nvh, int kd, int vd, int tiled)
{
    delta_layer l;
    if (delta_layer_make(k, &l, nk, nvh, kd, vd, tiled) != 0)
        return;
    const delta_case dc = l.dc;
    const size_t conv_dim = dc.conv_dim;
    delta_pools p;
    if (pools_make(k, &p, l.floats, 160) != 0) {
        pools_free(&p);
        delta_layer_free(&l);
        return;
    }
    const int n = 170;
    size_t per_row = conv_dim + dc.vdim + 2 * dc.nv;
    float *in = xmalloc((size_t)n * per_row * sizeof(float));
    float *want = xmalloc((size_t)n * dc.vdim * sizeof(float));
    float *got = xmalloc((size_t)n * dc.vdim * sizeof(float));
    int seq[MAX_ROWS];
    int32_t pos[MAX_ROWS];
    double worst = 0;
    cuda_backend *cb = cuda_of(k->gpu);
    /* the packed step */
    for (int i = 0; i < n; i++)
        seq[i] = i < 100 ? 0 : 1, pos[i] = i < 100 ? i : i - 100;
    kc_fill(k, in, (size_t)n * per_row, 1.0f);
    cb->step = (cuda_step){.active = 1, .prefill = 1, .n = n};
    run_step(k, &p, &dc, n, seq, pos, in, want, got);
    double e = kc_rel_err(got, want, (size_t)n * dc.vdim);
    worst = e > worst ? e : worst;
    states_agree(k, &p, 0, &worst);
    states_agree(k, &p, 1, &worst);
    /* 41 rows more of sequence 0 */
    for (int i = 0; i < 41; i++)
        seq[i] = 0, pos[i] = 100 + i;
    kc_fill(k, in, 41 * per_row, 1.0f);
    cb->step = (cuda_step){.active = 1, .prefill = 1, .n = 41};
    run_step(k, &p, &dc, 41, seq, pos, in, want, got);
    cb->step = (cuda_step){0};
    e = kc_rel_err(got, want, 41 * dc.vdim);
    worst = e > worst ? e : worst;
    /* a decode step of both */
    seq[0] = 0, pos[0] = 141, seq[1] = 1, pos[1] = 70;
    kc_fill(k, in, 2 * per_row, 1.0f);
    run_step(k, &p, &dc, 2, seq, pos, in, want, got);
    e = kc_rel_err(got, want, 2 * dc.vdim);
    worst = e > worst ? e : worst;
    states_agree(k, &p, 0, &worst);
    states_agree(k, &p, 1, &worst);
    char what[112];
    snprintf(what, sizeof what, "chunked %d/%d heads k%d v%d %s, 100 | 70 + 41 + decode", nk,
             nvh, kd, vd, tiled ? "tiled" : "grouped");
    kc_report(k, "delta_net", what, worst, 5e-5, -1, -1, 0);
    free(in);
    free(want);
    free(got);
    pools_free(&p);
    delta_layer_free(&l);
}

void kc_check_delta(kc *k)
{
    delta_case_run(k, 2, 4, 16, 16, 0);
    delta_case_run(k, 2, 4, 128, 128, 1);
    delta_case_run(k, 4, 4, 64, 32, 0);
    delta_chunk_case(k, 2, 4, 16, 16, 0);
    delta_chunk_case(k, 2, 4, 128, 128, 1);
    delta_chunk_case(k, 4, 4, 64, 40, 0);
    delta_chunk_case(k, 1, 2, 32, 136, 0); /* value heads past what the preparation stages */

    /* the gated attention's small ops */
    const int n = 3, heads = 4, hd = 32;
    size_t nx = (size_t)n * heads * 2 * hd, nh = (size_t)n * heads * hd;
    float *x = xmalloc(nx * 4), *qa = xmalloc(nh * 4), *ga = xmalloc(nh * 4);
    kc_fill(k, x, nx, 4.0f);
    float *dx = kc_dev(k, x, nx), *dq = kc_dev(k, qa, nh), *dg = kc_dev(k, ga, nh);
    k->cpu->ops->split_heads(k->cpu, x, n, heads, hd, hd, qa, ga);
    k->gpu->ops->split_heads(k->gpu, dx, n, heads, hd, hd, dq, dg);
    float *gq = kc_read(k, dq, nh), *gg = kc_read(k, dg, nh);
    double e = kc_rel_err(gq, qa, nh), e2 = kc_rel_err(gg, ga, nh);
    kc_report(k, "split_heads", "3 rows x 4 heads x (32 | 32)", e > e2 ? e : e2, 0.0, -1, -1, 0);
    /* and back: the rows as they were, on each backend */
    float *jx = xmalloc(nx * 4), *djx = kc_dev(k, x, nx);
    k->cpu->ops->join_heads(k->cpu, qa, ga, n, heads, hd, hd, jx);
    k->gpu->ops->join_heads(k->gpu, dq, dg, n, heads, hd, hd, djx);
    float *gj = kc_read(k, djx, nx);
    e = kc_rel_err(gj, x, nx);
    e2 = kc_rel_err(jx, x, nx);
    kc_report(k, "join_heads", "3 rows x 4 heads x (32 | 32)", e > e2 ? e : e2, 0.0, -1, -1, 0);
    free(jx);
    free(gj);
    kc_dev_free(k, djx);
    k->cpu->ops->mul_sigmoid(k->cpu, qa, ga, n, heads * hd, heads * hd);
    k->gpu->ops->mul_sigmoid(k->gpu, dq, dg, n, heads * hd, heads * hd);
    free(gq);
    gq = kc_read(k, dq, nh);
    kc_report(k, "mul_sigmoid", "elementwise, 3 x 128", kc_rel_err(gq, qa, nh), 1e-6, -1, -1, 0);
    k->cpu->ops->mul_sigmoid(k->cpu, qa, ga, n, heads * hd, 1);
    k->gpu->ops->mul_sigmoid(k->gpu, dq, dg, n, heads * hd, 1);
    free(gq);
    gq = kc_read(k, dq, nh);
    kc_report(k, "mul_sigmoid", "a gate per row, 3 x 128", kc_rel_err(gq, qa, nh), 1e-6, -1, -1,
              0);
    free(gq);
    free(gg);
    kc_dev_free(k, dx);
    kc_dev_free(k, dq);
    kc_dev_free(k, dg);
    free(x);
    free(qa);
    free(ga);
}
