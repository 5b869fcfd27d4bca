/* Importance-matrix collection by a backend wrapper; see imatrix_collect.h. */
#include "engine/imatrix_collect.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/moe_route.h"
#include "core/check.h"
#include "model/tensor_names.h"

/* One weight's running sums: n_mats matrices (experts) of cols columns. */
typedef struct {
    char *name; /* GGUF name */
    int64_t cols;
    int n_mats;
    double *sum2;    /* [n_mats][cols] */
    int64_t *count;  /* [n_mats] rows accumulated */
} imx_acc;

/* A weight's source name (by pointer) -> its accumulator. */
typedef struct {
    const char *src;
    int acc;
} imx_cache;

struct imatrix_collector {
    /* The backend handed to the model. It shares the CPU backend's impl,
     * so ops not intercepted run as they are; intercepted ones find the
     * collector by this being the first member. */
    backend wrap;
    backend_ops ops;
    backend *inner;
    model *m;
    imx_acc *acc;
    int n_acc, cap_acc;
    imx_cache *cache;
    int n_cache, cap_cache;
    /* host scratch for routing and recomputed FFN inputs, grown as needed */
    float *buf[5];
    size_t buf_cap[5];
    int *route_ids;
    size_t route_cap;
    int failed;
    memra_err err;
};

enum { BUF_LOGITS, BUF_X, BUF_G, BUF_U, BUF_ROW };

static imatrix_collector *collector_of(backend *b) { return (imatrix_collector *)b; }

static float *scratch(imatrix_collector *c, int i, size_t n)
{
    if (n > c->buf_cap[i]) {
        free(c->buf[i]);
        c->buf[i] = xmalloc(n * sizeof(float));
        c->buf_cap[i] = n;
    }
    return c->buf[i];
}

static void collect_fail(imatrix_collector *c, const char *fmt, const char *name)
{
    if (!c->failed)
        memra_fail(&c->err, fmt, name);
    c->failed = 1;
}

/* The accumulator of weight w (n_mats x [rows][cols]), created on first
 * sight under its GGUF name; -1 (and a recorded failure) when an HF name
 * has no GGUF counterpart. Cached by name pointer: the model's weights
 * keep pointing at the checkpoint's strings. */
static int acc_index(imatrix_collector *c, const bk_weight *w, int n_mats, int experts)
{
    for (int i = 0; i < c->n_cache; i++)
        if (c->cache[i].src == w->name)
            return c->cache[i].acc;
    char gguf[256];
    const char *name = w->name;
    if (c->m->format == CKPT_HF) {
        int expert = -1;
        if (tensor_name_hf_to_gguf(c->m->config.family, w->name, gguf, sizeof gguf, &expert) != 0 ||
            experts != (expert >= 0)) {
            collect_fail(c, "imatrix: weight '%s' has no GGUF name", w->name);
            return -1;
        }
        name = gguf;
    } else if (experts != tensor_name_gguf_is_experts(name)) {
        collect_fail(c, "imatrix: weight '%s' is not where its name says", w->name);
        return -1;
    }
    int idx = -1;
    for (int i = 0; i < c->n_acc && idx < 0; i++)
        if (strcmp(c->acc[i].name, name) == 0)
            idx = i;
    if (idx < 0) {
        if (c->n_acc == c->cap_acc) {
            c->cap_acc = c->cap_acc ? c->cap_acc * 2 : 64;
            c->acc = xrealloc(c->acc, (size_t)c->cap_acc * sizeof *c->acc);
        }
        imx_acc *a = &c->acc[c->n_acc];
        a->name = xstrdup(name);
        a->cols = w->cols;
        a->n_mats = n_mats;
        a->sum2 = xcalloc((size_t)n_mats * (size_t)w->cols, sizeof(double));
        a->count = xcalloc((size_t)n_mats, sizeof(int64_t));
        idx = c->n_acc++;
    } else if (c->acc[idx].cols != w->cols || c->acc[idx].n_mats != n_mats) {
        collect_fail(c, "imatrix: weight '%s' seen with two shapes", w->name);
        return -1;
    }
    if (c->n_cache == c->cap_cache) {
        c->cap_cache = c->cap_cache ? c->cap_cache * 2 : 64;
        c->cache = xrealloc(c->cache, (size_t)c->cap_cache * sizeof *c->cache);
    }
    c->cache[c->n_cache++] = (imx_cache){w->name, idx};
    return idx;
}

/* Add n rows of x ([n][cols], host) to matrix `mat` of accumulator idx. */
static void acc_rows(imatrix_collector *c, int idx, int mat, const float *x, int n)
{
    if (idx < 0)
        return;
    imx_acc *a = &c->acc[idx];
    double *s = a->sum2 + (size_t)mat * (size_t)a->cols;
    for (int t = 0; t < n; t++) {
        const float *r = x + (size_t)t * (size_t)a->cols;
        for (int64_t j = 0; j < a->cols; j++)
            s[j] += (double)r[j] * (double)r[j];
    }
    a->count[mat] += n;
}

static void acc_dense(imatrix_collector *c, const bk_weight *w, const float *x, int n)
{
    if (bk_weight_present(w) && w->rows > 1)
        acc_rows(c, acc_index(c, w, 1, 0), 0, x, n);
}

/* ---- the intercepted ops ---- */

static void imx_matmul(backend *b, const bk_weight *w, const bk_weight *bias, const float *x,
                       int n, float *out)
{
    imatrix_collector *c = collector_of(b);
    acc_dense(c, w, x, n);
    c->inner->ops->matmul(c->inner, w, bias, x, n, out);
}

static void imx_attn_qkv(backend *b, const bk_weight *wq, const bk_weight *wk,
                         const bk_weight *wv, const bk_weight *bq, const bk_weight *bk,
                         const bk_weight *bv, const float *x, int n, float *q, float *k, float *v)
{
    imatrix_collector *c = collector_of(b);
    acc_dense(c, wq, x, n);
    acc_dense(c, wk, x, n);
    acc_dense(c, wv, x, n);
    c->inner->ops->attn_qkv(c->inner, wq, wk, wv, bq, bk, bv, x, n, q, k, v);
}

/* act(gate x) * up x for n rows of x into out [n][gate->rows], by the
 * backend's own matmul and activation, so it is what the op computes. */
static void glu_input(imatrix_collector *c, const bk_weight *gate, const bk_weight *up, bk_act act,
                      const float *x, int n, float *out)
{
    size_t m = (size_t)n * (size_t)gate->rows;
    float *u = scratch(c, BUF_U, m);
    c->inner->ops->matmul(c->inner, gate, NULL, x, n, out);
    c->inner->ops->matmul(c->inner, up, NULL, x, n, u);
    backend_cpu_glu(c->inner, act, out, u, m);
}

/* The down projection's input is left in hb by the CPU op; the first row
 * is recomputed each call and must match bit for bit (rows are computed
 * alone, in a fixed order), so a change of the op is caught, not
 * silently collected. */
static void imx_ffn_glu(backend *b, const bk_weight *gate, const bk_weight *up,
                        const bk_weight *down, bk_act act, const float *x, int n, float *hb,
                        float *hb2, float *out)
{
    imatrix_collector *c = collector_of(b);
    acc_dense(c, gate, x, n);
    acc_dense(c, up, x, n);
    c->inner->ops->ffn_glu(c->inner, gate, up, down, act, x, n, hb, hb2, out);
    float *row = scratch(c, BUF_ROW, (size_t)gate->rows);
    glu_input(c, gate, up, act, x, 1, row);
    if (memcmp(row, hb, (size_t)gate->rows * sizeof(float)) != 0) {
        collect_fail(c, "imatrix: the CPU ffn_glu op no longer leaves act(gate x) * up x in its "
                        "scratch (checked at '%s')", down->name);
        return;
    }
    acc_dense(c, down, hb, n);
}

static void imx_ffn_moe(backend *b, const bk_moe *m, const float *x, int n, float *out)
{
    imatrix_collector *c = collector_of(b);
    c->inner->ops->ffn_moe(c->inner, m, x, n, out);
    if (m->router_x) {
        collect_fail(c, "imatrix: experts routed on an input of their own (gemma4's MoE, at "
                        "'%s') are not supported yet", m->router->name);
        return;
    }
    int ne = m->n_experts, nu = m->n_used;
    int64_t dim = m->router->cols, ffn = m->gate[0].rows;
    acc_dense(c, m->router, x, n);
    int ig = acc_index(c, &m->gate[0], ne, 1), iu = acc_index(c, &m->up[0], ne, 1),
        id = acc_index(c, &m->down[0], ne, 1);
    if (ig < 0 || iu < 0 || id < 0)
        return;
    float *logits = scratch(c, BUF_LOGITS, (size_t)n * (size_t)ne);
    c->inner->ops->matmul(c->inner, m->router, NULL, x, n, logits);
    if ((size_t)n * (size_t)nu > c->route_cap) {
        free(c->route_ids);
        c->route_cap = (size_t)n * (size_t)nu;
        c->route_ids = xmalloc(c->route_cap * sizeof(int));
    }
    for (int t = 0; t < n; t++)
        moe_route_token(logits + (size_t)t * ne, ne, nu, 0, c->route_ids + (size_t)t * nu, NULL);
    /* the CPU op keeps its choices (per token, n_used ids): ours must be
     * the same, or the statistics would follow a routing the forward did
     * not take */
    const int *chosen = backend_cpu_moe_choices(c->inner, (size_t)n, nu);
    if (!chosen || memcmp(chosen, c->route_ids, (size_t)n * (size_t)nu * sizeof(int)) != 0) {
        collect_fail(c, "imatrix: the routing reproduced on the host differs from the CPU "
                        "op's at '%s'", m->router->name);
        return;
    }
    float *xg = scratch(c, BUF_X, (size_t)n * (size_t)dim);
    float *g = scratch(c, BUF_G, (size_t)n * (size_t)ffn);
    for (int e = 0; e < ne; e++) {
        int cnt = 0;
        for (int t = 0; t < n; t++)
            for (int k = 0; k < nu; k++)
                if (c->route_ids[(size_t)t * nu + k] == e)
                    memcpy(xg + (size_t)cnt++ * dim, x + (size_t)t * dim,
                           (size_t)dim * sizeof(float));
        if (cnt == 0)
            continue;
        acc_rows(c, ig, e, xg, cnt);
        acc_rows(c, iu, e, xg, cnt);
        glu_input(c, &m->gate[e], &m->up[e], m->act, xg, cnt, g);
        acc_rows(c, id, e, g, cnt);
    }
}

/* ---- lifetime ---- */

int imatrix_collect_attach(engine *e, imatrix_collector **out, memra_err *err)
{
    *out = NULL;
    model *m = engine_model(e);
    if (strcmp(m->bk->name, "cpu") != 0)
        return memra_fail(err, "imatrix: collection runs on the CPU backend only (this engine "
                               "runs on %s)", m->bk->name);
    imatrix_collector *c = xcalloc(1, sizeof *c);
    c->inner = m->bk;
    c->m = m;
    c->ops = *m->bk->ops;
    c->ops.matmul = imx_matmul;
    c->ops.attn_qkv = imx_attn_qkv;
    c->ops.ffn_glu = imx_ffn_glu;
    c->ops.ffn_moe = imx_ffn_moe;
    c->wrap = *m->bk;
    c->wrap.ops = &c->ops;
    m->bk = &c->wrap;
    *out = c;
    return 0;
}

int imatrix_collect_status(const imatrix_collector *c, memra_err *err)
{
    if (!c->failed)
        return 0;
    *err = c->err;
    return -1;
}

int imatrix_collect_result(const imatrix_collector *c, int32_t n_chunks, const char *dataset,
                           imatrix *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    if (imatrix_collect_status(c, err) != 0)
        return -1;
    if (c->n_acc == 0)
        return memra_fail(err, "imatrix: no weight multiplications were seen");
    out->entries = xcalloc((size_t)c->n_acc, sizeof *out->entries);
    out->n_chunks = n_chunks;
    out->dataset = dataset ? xstrdup(dataset) : NULL;
    for (int i = 0; i < c->n_acc; i++) {
        const imx_acc *a = &c->acc[i];
        imatrix_entry *en = &out->entries[out->n_entries++];
        en->name = xstrdup(a->name);
        en->n_values = (int64_t)a->n_mats * a->cols;
        en->values = xmalloc((size_t)en->n_values * sizeof(float));
        int64_t most = 0;
        for (int mat = 0; mat < a->n_mats; mat++) {
            int64_t cnt = a->count[mat];
            most = cnt > most ? cnt : most;
            for (int64_t j = 0; j < a->cols; j++) {
                double s = a->sum2[(size_t)mat * (size_t)a->cols + (size_t)j];
                if (!isfinite(s) || (cnt > 0 && !isfinite((float)(s / (double)cnt)))) {
                    imatrix_free(out);
                    return memra_fail(err, "imatrix: '%s': the activations entering column %lld "
                                           "are not finite", a->name, (long long)j);
                }
                en->values[(size_t)mat * (size_t)a->cols + (size_t)j] =
                    cnt > 0 ? (float)(s / (double)cnt) : 1.0f;
            }
        }
        if (most > INT32_MAX) {
            imatrix_free(out);
            return memra_fail(err, "imatrix: '%s': %lld rows overflow the call count", a->name,
                              (long long)most);
        }
        en->n_calls = (int32_t)most;
    }
    return 0;
}

int64_t imatrix_collect_rows(const imatrix_collector *c, const char *gguf_name, int mat)
{
    for (int i = 0; i < c->n_acc; i++)
        if (strcmp(c->acc[i].name, gguf_name) == 0)
            return mat >= 0 && mat < c->acc[i].n_mats ? c->acc[i].count[mat] : -1;
    return -1;
}

void imatrix_collect_free(imatrix_collector *c)
{
    if (!c)
        return;
    if (c->m->bk == &c->wrap)
        c->m->bk = c->inner;
    for (int i = 0; i < c->n_acc; i++) {
        free(c->acc[i].name);
        free(c->acc[i].sum2);
        free(c->acc[i].count);
    }
    free(c->acc);
    free(c->cache);
    for (int i = 0; i < 5; i++)
        free(c->buf[i]);
    free(c->route_ids);
    free(c);
}
