/* Routed experts on the CPU (qwen3_moe's sparse MoE block), computed the
 * way transformers does: router logits, softmax over all experts in f32,
 * the top-k probabilities (renormalized to sum 1 when norm_topk_prob),
 * then expert by expert in ascending id order, each expert's SwiGLU output
 * times its weight added into the tokens that chose it. Each expert runs
 * once over all the tokens routed to it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "backend/moe_route.h"
#include "core/check.h"

enum { MOE_PROBS, MOE_X, MOE_Y, MOE_HB, MOE_HB2 };

static float *moe_buf(cpu_backend *c, int i, size_t n)
{
    if (n > c->moe_cap[i]) {
        free(c->moe_buf[i]);
        c->moe_buf[i] = xmalloc(n * sizeof(float));
        c->moe_cap[i] = n;
    }
    return c->moe_buf[i];
}

void cpu_moe_free(cpu_backend *c)
{
    for (int i = 0; i < 5; i++)
        free(c->moe_buf[i]);
    free(c->moe_ids);
    free(c->moe_who);
    free(c->moe_w);
    free(c->moe_ww);
}

/* A decode step's token: the gate and up of all its experts in one
 * product (one hand-off to the pool, x quantized once), then each
 * expert's activation and down, added into out in ascending expert id
 * order: each row computed as the loop below computes it, so the same
 * bytes. */
static void moe_one_token(cpu_backend *c, const bk_moe *m, const float *x, int64_t ffn,
                          int64_t dim, float *out)
{
    const int nu = m->n_used;
    int order[CPU_MM_MAX_ITEMS / 2];
    for (int k = 0; k < nu; k++) { /* the choices by ascending id (ids are distinct) */
        int j = k;
        for (; j > 0 && c->moe_ids[order[j - 1]] > c->moe_ids[k]; j--)
            order[j] = order[j - 1];
        order[j] = k;
    }
    float *hb = moe_buf(c, MOE_HB, (size_t)nu * (size_t)ffn);
    float *hb2 = moe_buf(c, MOE_HB2, (size_t)nu * (size_t)ffn);
    float *yg = moe_buf(c, MOE_Y, (size_t)dim);
    cpu_mm_item gu[CPU_MM_MAX_ITEMS];
    for (int k = 0; k < nu; k++) {
        const int e = c->moe_ids[order[k]];
        gu[2 * k] = (cpu_mm_item){&m->gate[e], NULL, hb + (size_t)k * (size_t)ffn};
        gu[2 * k + 1] = (cpu_mm_item){&m->up[e], NULL, hb2 + (size_t)k * (size_t)ffn};
    }
    cpu_matmul_multi(c, gu, 2 * nu, x, 1);
    for (int k = 0; k < nu; k++) {
        const int e = c->moe_ids[order[k]];
        float *h = hb + (size_t)k * (size_t)ffn;
        const float *h2 = hb2 + (size_t)k * (size_t)ffn;
        cpu_glu(c, m->act, h, h2, (size_t)ffn); /* as cpu_op_ffn_glu's, for a batch */
        cpu_mm_item d = {&m->down[e], NULL, yg};
        cpu_matmul_multi(c, &d, 1, h, 1);
        const float w = c->moe_w[order[k]];
        for (int64_t i = 0; i < dim; i++)
            out[i] += yg[i] * w;
    }
}

void cpu_op_ffn_moe(backend *b, const bk_moe *m, const float *x, int n, float *out)
{
    cpu_backend *c = cpu_of(b);
    int64_t dim = m->router->cols, ffn = m->gate[0].rows;
    int ne = m->n_experts, nu = m->n_used;
    size_t rows = (size_t)n;
    if (rows * (size_t)nu > c->moe_rows_cap) {
        size_t cap = rows * (size_t)nu;
        free(c->moe_ids);
        free(c->moe_who);
        free(c->moe_w);
        free(c->moe_ww);
        c->moe_ids = xmalloc(cap * sizeof(int));
        c->moe_who = xmalloc(cap * sizeof(int));
        c->moe_w = xmalloc(cap * sizeof(float));
        c->moe_ww = xmalloc(cap * sizeof(float));
        c->moe_rows_cap = cap;
    }
    float *probs = moe_buf(c, MOE_PROBS, rows * (size_t)ne);
    float *xg = moe_buf(c, MOE_X, rows * (size_t)dim);
    float *yg = moe_buf(c, MOE_Y, rows * (size_t)dim);
    float *hb = moe_buf(c, MOE_HB, rows * (size_t)ffn);
    float *hb2 = moe_buf(c, MOE_HB2, rows * (size_t)ffn);

    cpu_mm_item r = {m->router, NULL, probs};
    cpu_matmul_multi(c, &r, 1, m->router_x ? m->router_x : x, n);
    const float *escale = m->expert_scale ? cpu_weight_vec(c, 0, m->expert_scale) : NULL;
    for (int t = 0; t < n; t++) {
        moe_route_token(probs + (size_t)t * ne, ne, nu, m->norm_topk, c->moe_ids + t * nu,
                        c->moe_w + t * nu);
        for (int k = 0; escale && k < nu; k++)
            c->moe_w[t * nu + k] *= escale[c->moe_ids[t * nu + k]];
    }

    memset(out, 0, rows * (size_t)dim * sizeof(float));
    if (n == 1 && 2 * nu <= CPU_MM_MAX_ITEMS) {
        moe_one_token(c, m, x, ffn, dim, out);
        return;
    }
    for (int e = 0; e < ne; e++) {
        int cnt = 0;
        for (int t = 0; t < n; t++)
            for (int k = 0; k < nu; k++)
                if (c->moe_ids[t * nu + k] == e) {
                    c->moe_who[cnt] = t;
                    c->moe_ww[cnt] = c->moe_w[t * nu + k];
                    memcpy(xg + (size_t)cnt * dim, x + (size_t)t * dim,
                           (size_t)dim * sizeof(float));
                    cnt++;
                }
        if (cnt == 0)
            continue;
        cpu_op_ffn_glu(b, &m->gate[e], &m->up[e], &m->down[e], m->act, xg, cnt, hb, hb2, yg);
        for (int j = 0; j < cnt; j++) {
            float *o = out + (size_t)c->moe_who[j] * dim;
            const float *y = yg + (size_t)j * dim;
            for (int64_t d = 0; d < dim; d++)
                o[d] += y[d] * c->moe_ww[j];
        }
    }
}

const int *backend_cpu_moe_choices(backend *b, size_t n_rows, int n_used)
{
    if (strcmp(b->name, "cpu") != 0)
        return NULL;
    const cpu_backend *c = cpu_of(b);
    if (c->moe_rows_cap < n_rows * (size_t)n_used)
        return NULL;
    return c->moe_ids;
}
