/* Routed experts on the device, without a round trip to the host: router
 * logits (a mat-vec), routing on the device (softmax, top-k, optional
 * renormalization, choices sorted by expert id), the chosen experts' SwiGLU
 * as grouped mat-vecs (a (token, choice) pair at a time for a few pairs,
 * gate, up and the GLU in one launch and down with the combine in one;
 * from MOE_TILED_PAIRS, the pairs sorted by expert and each weight row read
 * once for a run of up to CU_MOE_TILE pairs of one expert), and the combine,
 * which adds the weighted outputs in ascending expert id order as the CPU
 * reference does. Each (token, choice) row is computed from that token
 * alone, so routing other tokens differently changes nothing for it. */
#include <inttypes.h>
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"
#include "core/check.h"
#include "kernels/decode_gemm.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/moe.cuh"

/* Device array of the experts' row data; every expert must share the
 * first's format and shape (the grouped kernel reads them alike). */
static int expert_array(cuda_backend *cb, const bk_weight *ws, int ne, const void ***dev_out,
                        cu_matrix *m)
{
    const void **host = xmalloc((size_t)ne * sizeof *host);
    for (int e = 0; e < ne; e++) {
        const cuda_weight *cw = cuda_weight_of(cb, &ws[e], "ffn_moe");
        if (!cw) {
            free(host);
            return -1;
        }
        if (e == 0) {
            *m = cw->m;
        } else if (cw->m.fmt != m->fmt || cw->m.rows != m->rows || cw->m.cols != m->cols) {
            cuda_failf(cb, "ffn_moe: expert %d of '%s' is %s %" PRId64 " x %" PRId64
                       ", expert 0 is %s %" PRId64 " x %" PRId64 ": the CUDA backend needs one "
                       "format and shape per layer", e, cw->name, dtype_get(cw->type)->name,
                       cw->m.rows, cw->m.cols, dtype_get(((const cuda_weight *)ws[0].dev)->type)->name,
                       m->rows, m->cols);
            free(host);
            return -1;
        }
        host[e] = cw->m.data;
    }
    void *dev;
    memra_err e;
    int rc = cuda_alloc(cb, &dev, (size_t)ne * sizeof *host, "expert table", 1, NULL);
    if (rc == 0 && cuda_upload_sync(cb, dev, host, (size_t)ne * sizeof *host, &e) != 0) {
        cuda_failf(cb, "%s", e.msg);
        cudaFree(dev);
        rc = -1;
    }
    free(host);
    if (rc != 0)
        return -1;
    *dev_out = (const void **)dev;
    return 0;
}

/* Whether t was made for exactly these experts: the same host array and
 * the same device copies (an array at a reused address must not hit). */
static int table_matches(const cuda_moe_table *t, const bk_moe *m)
{
    if (t->gate_host != m->gate || t->n_experts != m->n_experts)
        return 0;
    int ne = m->n_experts;
    for (int e = 0; e < ne; e++)
        if (t->key[e] != m->gate[e].dev || t->key[ne + e] != m->up[e].dev ||
            t->key[2 * ne + e] != m->down[e].dev)
            return 0;
    return 1;
}

static cuda_moe_table *moe_table(cuda_backend *cb, const bk_moe *m)
{
    for (cuda_moe_table *t = cb->moe; t; t = t->next)
        if (table_matches(t, m))
            return t;
    if (m->n_experts <= 0) {
        cuda_failf(cb, "ffn_moe: %d experts", m->n_experts);
        return NULL;
    }
    cuda_moe_table *t = xcalloc(1, sizeof *t);
    t->gate_host = m->gate;
    t->n_experts = m->n_experts;
    t->key = xmalloc(3 * (size_t)m->n_experts * sizeof *t->key);
    for (int e = 0; e < m->n_experts; e++) {
        t->key[e] = m->gate[e].dev;
        t->key[m->n_experts + e] = m->up[e].dev;
        t->key[2 * m->n_experts + e] = m->down[e].dev;
    }
    t->next = cb->moe;
    cb->moe = t; /* listed before filling, so cuda_moe_free finds a half-made one */
    if (expert_array(cb, m->gate, m->n_experts, &t->gate, &t->gate_m) != 0 ||
        expert_array(cb, m->up, m->n_experts, &t->up, &t->up_m) != 0 ||
        expert_array(cb, m->down, m->n_experts, &t->down, &t->down_m) != 0)
        return NULL;
    return t;
}

void cuda_moe_free(cuda_backend *cb)
{
    while (cb->moe) {
        cuda_moe_table *n = cb->moe->next;
        cudaFree((void *)cb->moe->gate);
        cudaFree((void *)cb->moe->up);
        cudaFree((void *)cb->moe->down);
        free(cb->moe->key);
        free(cb->moe);
        cb->moe = n;
    }
}

/* From this many (token, choice) pairs the experts run over runs of pairs
 * of one expert (each weight row read once for up to CU_MOE_TILE pairs)
 * after sorting the pairs by expert; below, a pair at a time, which saves
 * the sort's two launches. Both give each pair the same bits. */
enum { MOE_TILED_PAIRS = 32 };

/* The experts' SwiGLU over the pairs sorted by expert: x gathered into
 * sorted order, gate and up into hb/hb2 in that order, down back to each
 * pair's own row of y. */
static int moe_tiled(cuda_backend *cb, const cuda_moe_table *t, const bk_moe *m,
                     const int32_t *ids, const float *x, int pairs, float *hb, float *hb2, float *y)
{
    int ne = m->n_experts, nu = m->n_used;
    int64_t dim = t->gate_m.cols, ffn = t->gate_m.rows;
    int max_chunks = (pairs + CU_MOE_TILE - 1) / CU_MOE_TILE + (pairs < ne ? pairs : ne);
    int32_t *order = cuda_scratch(cb, SCR_MOE_ORDER, (size_t)pairs * 4, "expert order");
    int32_t *chunks = cuda_scratch(cb, SCR_MOE_CHUNKS, (3 * (size_t)max_chunks + 1) * 4,
                                   "expert chunks");
    float *xg = cuda_scratch(cb, SCR_MOE_XG, (size_t)pairs * (size_t)dim * 4, "expert inputs");
    if (cb->failed)
        return -1;
    int32_t *n_chunks = chunks + 3 * (size_t)max_chunks;
    if (CU_OK(cb, launch_moe_plan(ids, pairs, ne, CU_MOE_TILE, order, chunks, n_chunks,
                                  cb->stream)) ||
        CU_OK(cb, launch_moe_gather(x, order, pairs, nu, dim, xg, cb->stream)) ||
        CU_OK(cb, launch_matmul_grouped_tokens(&t->gate_m, t->gate, chunks, n_chunks, max_chunks,
                                               xg, NULL, hb, cb->stream)) ||
        CU_OK(cb, launch_matmul_grouped_tokens(&t->up_m, t->up, chunks, n_chunks, max_chunks, xg,
                                               NULL, hb2, cb->stream)) ||
        CU_OK(cb, launch_glu(hb, hb2, (size_t)pairs * (size_t)ffn,
                             m->act == BK_ACT_GELU_TANH ? 1 : 0, cb->stream)) ||
        CU_OK(cb, launch_matmul_grouped_tokens(&t->down_m, t->down, chunks, n_chunks, max_chunks,
                                               hb, order, y, cb->stream)))
        return -1;
    return 0;
}

/* The experts on the tensor cores (moe_gemm, x rounded to bf16):
 *   - a prompt chunk's from this many pairs, as the prefill GEMM of the
 *     dense projections, and off with it (tune.gemm, MEMRA_CUDA_GEMM=0; a
 *     prompt chunk's rounding may depend on the step: backend.h,
 *     bk_step.prefill), and every chunk's in an engine that chose them for
 *     its decode steps (below), so a short chunk's rows (a speculation
 *     round's) get decode's bytes;
 *   - every decode step's when the engine chose the decode GEMM for its
 *     life (tune.dgemm: plan_decode, several rows a step), whatever the
 *     step's pairs, so a row's bytes never depend on its batch; else the
 *     f32 paths above (one row an engine: the mat-vec is faster there). */

/* The experts' GLU over the pairs sorted by expert, a chunk of up to
 * CU_DG_GROUP_ROWS pairs of one expert and a tile of rows per block
 * (launch_decode_gemm_grouped): gate and up into hb in sorted order, down
 * back to each pair's own row of y. 1: the shapes or formats do not fit
 * the kernel (nothing launched); -1: a failure (recorded). */
static int moe_gemm(cuda_backend *cb, const cuda_moe_table *t, const bk_moe *m,
                    const int32_t *ids, const float *x, int pairs, int tile, float *hb, float *y)
{
    int ne = m->n_experts, nu = m->n_used;
    int64_t dim = t->gate_m.cols, ffn = t->gate_m.rows;
    int max_chunks = (pairs + tile - 1) / tile + (pairs < ne ? pairs : ne);
    cu_dg_grouped gu = {
        .w = t->gate, .w2 = t->up, .shape = t->gate_m,
        .mode = m->act == BK_ACT_GELU_TANH ? CU_MV_GLU_GELU : CU_MV_GLU_SILU,
        .pairs = pairs, .max_chunks = max_chunks, .tile = tile, .out = hb,
    };
    cu_dg_grouped dn = {
        .w = t->down, .shape = t->down_m, .mode = CU_MV_STORE, .x = hb, .pairs = pairs,
        .max_chunks = max_chunks, .tile = tile, .out = y,
    };
    if (t->up_m.fmt != t->gate_m.fmt || t->up_m.stride != t->gate_m.stride ||
        !cu_dg_grouped_ok(&gu) || !cu_dg_grouped_ok(&dn))
        return 1;
    int32_t *order = cuda_scratch(cb, SCR_MOE_ORDER, (size_t)pairs * 4, "expert order");
    int32_t *chunks = cuda_scratch(cb, SCR_MOE_CHUNKS, (3 * (size_t)max_chunks + 1) * 4,
                                   "expert chunks");
    float *xg = cuda_scratch(cb, SCR_MOE_XG, (size_t)pairs * (size_t)dim * 4, "expert inputs");
    int64_t widest = dim > ffn ? dim : ffn;
    void *xbf = cuda_scratch(cb, SCR_MOE_XBF, (size_t)pairs * (size_t)widest * 2,
                             "expert inputs in bf16");
    if (cb->failed)
        return -1;
    int32_t *n_chunks = chunks + 3 * (size_t)max_chunks;
    gu.x = xg;
    gu.chunks = dn.chunks = chunks;
    gu.n_chunks = dn.n_chunks = n_chunks;
    dn.order = order;
    if (CU_OK(cb, launch_moe_plan(ids, pairs, ne, tile, order, chunks, n_chunks, cb->stream)) ||
        CU_OK(cb, launch_moe_gather(x, order, pairs, nu, dim, xg, cb->stream)) ||
        CU_OK(cb, launch_decode_gemm_grouped(&gu, xbf, cb->stream)) ||
        CU_OK(cb, launch_decode_gemm_grouped(&dn, xbf, cb->stream)))
        return -1;
    return 0;
}

void cuda_op_ffn_moe(backend *b, const bk_moe *m, const float *x, int n, float *out)
{
    cuda_backend *cb = cuda_of(b);
    cuda_xshadow_drop(cb);
    if (cb->failed || n <= 0)
        return;
    const cuda_weight *router = cuda_weight_of(cb, m->router, "ffn_moe");
    const cuda_moe_table *t = router ? moe_table(cb, m) : NULL;
    if (!t)
        return;
    int ne = m->n_experts, nu = m->n_used;
    int64_t dim = router->m.cols, ffn = t->gate_m.rows;
    if (router->m.rows != ne || nu <= 0 || nu > ne || t->gate_m.cols != dim ||
        t->up_m.rows != ffn || t->up_m.cols != dim || t->down_m.rows != dim ||
        t->down_m.cols != ffn) {
        cuda_failf(cb, "ffn_moe: shapes do not fit: router %" PRId64 " x %" PRId64 " for %d "
                   "experts (top %d), gate %" PRId64 " x %" PRId64 ", up %" PRId64 " x %" PRId64
                   ", down %" PRId64 " x %" PRId64, router->m.rows, router->m.cols, ne, nu,
                   t->gate_m.rows, t->gate_m.cols, t->up_m.rows, t->up_m.cols, t->down_m.rows,
                   t->down_m.cols);
        return;
    }
    const float *escale = m->expert_scale ? cuda_vec_of(cb, m->expert_scale, "ffn_moe") : NULL;
    if (m->expert_scale && (!escale || m->expert_scale->cols != ne)) {
        if (!cb->failed)
            cuda_failf(cb, "ffn_moe: %" PRId64 " expert scales for %d experts",
                       m->expert_scale->cols, ne);
        return;
    }
    size_t pairs = (size_t)n * (size_t)nu;
    float *probs = cuda_scratch(cb, SCR_MOE_PROBS, (size_t)n * (size_t)ne * 4, "router logits");
    int32_t *ids = cuda_scratch(cb, SCR_MOE_IDS, pairs * 4, "expert choices");
    float *w = cuda_scratch(cb, SCR_MOE_W, pairs * 4, "expert weights");
    float *hb = cuda_scratch(cb, SCR_MOE_HB, pairs * (size_t)ffn * 4, "expert hidden");
    float *hb2 = cuda_scratch(cb, SCR_MOE_HB2, pairs * (size_t)ffn * 4, "expert hidden");
    float *y = cuda_scratch(cb, SCR_MOE_Y, pairs * (size_t)dim * 4, "expert outputs");
    if (cb->failed)
        return;
    if (CU_OK(cb, launch_matmul(&router->m, NULL, m->router_x ? m->router_x : x, n, probs,
                                cb->stream)) ||
        CU_OK(cb, launch_moe_route(probs, n, ne, nu, m->norm_topk, escale, ids, w, cb->stream)))
        return;
    /* the chunk size (the kernel's size, which changes no row's bytes): a
     * prompt chunk's pairs fill chunks of 64; a decode step's spread over
     * the experts, a few an expert */
    int gemm = 1, tile = CU_DG_GROUP_ROWS;
    int cores = 0;
    if (cb->step.active && cb->step.prefill) {
        /* an engine that runs its decode steps' experts on the tensor
         * cores runs every chunk's there too: a speculation round's rows
         * (a short chunk) then have the bytes of decode steps */
        cores = (cb->tune.gemm && pairs >= CU_MOE_GEMM_PAIRS) || cb->tune.dgemm > 0;
    } else if (cb->step.active) {
        cores = cb->tune.dgemm > 0;
        tile = pairs <= 2 ? 2 : pairs <= 8 ? 8 : 16;
    }
    if (cores && (gemm = moe_gemm(cb, t, m, ids, x, (int)pairs, tile, hb, y)) < 0)
        return;
    if (gemm == 0) {
        /* done on the tensor cores */
    } else if (pairs < MOE_TILED_PAIRS) {
        /* a few pairs (a decode step's): gate, up and the GLU in one
         * launch when the two are laid out alike, down and the combine in
         * another */
        const int act = m->act == BK_ACT_GELU_TANH ? 1 : 0;
        unsigned *cnt = cuda_counters(cb, matmul_grouped_combine_counters(dim, n));
        if (!cnt)
            return;
        if (t->up_m.fmt == t->gate_m.fmt && t->up_m.stride == t->gate_m.stride &&
            t->up_m.scale_off == t->gate_m.scale_off) {
            if (CU_OK(cb, launch_matmul_grouped_glu(&t->gate_m, t->gate, t->up, ids, nu, x,
                                                    (int)pairs, act, hb, cb->stream)))
                return;
        } else if (CU_OK(cb, launch_matmul_grouped(&t->gate_m, t->gate, ids, nu, x, (int)pairs,
                                                   hb, cb->stream)) ||
                   CU_OK(cb, launch_matmul_grouped(&t->up_m, t->up, ids, nu, x, (int)pairs, hb2,
                                                   cb->stream)) ||
                   CU_OK(cb, launch_glu(hb, hb2, pairs * (size_t)ffn, act, cb->stream))) {
            return;
        }
        CU_OK(cb, launch_matmul_grouped_combine(&t->down_m, t->down, ids, w, nu, hb, (int)pairs,
                                                y, cnt, out, cb->stream));
        return;
    } else if (moe_tiled(cb, t, m, ids, x, (int)pairs, hb, hb2, y) != 0) {
        return;
    }
    CU_OK(cb, launch_moe_combine(y, w, n, nu, dim, out, cb->stream));
}
