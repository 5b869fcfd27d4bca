/* Tensor parallel inside the model: the ranks' shares of each layer, and
 * a sublayer run over them (tensor_parallel.h, docs/decisions/0029). */
#include "model/tensor_parallel.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/family.h"
#include "numerics/kv_codec.h"

/* A rank's KV heads: a 1/tp share of them, or, with fewer KV heads than
 * ranks, the one its query heads read (each held by tp / n_kv_heads
 * ranks, which compute and store it alike). */
static int64_t rank_kv_heads(const model_config *c, int tp)
{
    return c->n_kv_heads >= tp ? c->n_kv_heads / tp : 1;
}

static int64_t rank_kv_head0(const model_config *c, int tp, int r)
{
    return c->n_kv_heads >= tp ? r * (c->n_kv_heads / tp) : r / (tp / c->n_kv_heads);
}

int tp_check(const model_config *c, int tp, kv_type kvt, memra_err *err)
{
    const model_family_desc *fam = family_desc(c->family);
    if (tp < 2 || tp > BACKEND_MAX_STAGES)
        return memra_fail(err, "model: %d tensor-parallel ranks (2 to %d)", tp,
                          BACKEND_MAX_STAGES);
    if (!fam || !fam->tensor_parallel)
        return memra_fail(err, "model: the %s family does not split over tensor-parallel ranks "
                          "yet (llama, qwen2, qwen3, qwen3_moe, gemma3, qwen3_5 and qwen3_5_moe "
                          "do; --pp splits any family by layers)", fam ? fam->name : "unknown");
    if (c->n_kv_heads <= 0 || c->n_heads % tp != 0 ||
        (c->n_kv_heads >= tp ? c->n_kv_heads % tp : tp % c->n_kv_heads))
        return memra_fail(err, "model: %" PRId64 " heads and %" PRId64 " KV heads do not split "
                          "evenly over %d tensor-parallel ranks", c->n_heads, c->n_kv_heads, tp);
    if (!fam->moe && c->ffn_dim % tp != 0)
        return memra_fail(err, "model: the FFN's %" PRId64 " columns do not split evenly over %d "
                          "tensor-parallel ranks", c->ffn_dim, tp);
    if (fam->moe && c->moe_ffn_dim % tp != 0)
        return memra_fail(err, "model: an expert's %" PRId64 " columns do not split evenly over "
                          "%d tensor-parallel ranks", c->moe_ffn_dim, tp);
    if (fam->recurrent && (c->lin_n_k_heads % tp != 0 || c->lin_n_v_heads % tp != 0))
        return memra_fail(err, "model: the DeltaNet layers' %" PRId64 " key and %" PRId64 " value "
                          "heads do not split evenly over %d tensor-parallel ranks",
                          c->lin_n_k_heads, c->lin_n_v_heads, tp);
    if (c->shared_ffn_dim % tp != 0)
        return memra_fail(err, "model: the shared expert's %" PRId64 " columns do not split evenly "
                          "over %d tensor-parallel ranks", c->shared_ffn_dim, tp);
    int64_t width = rank_kv_heads(c, tp) * c->head_dim;
    if (kvt == KV_Q8_0 && width % KV_Q8_0_BLOCK != 0)
        return memra_fail(err, "model: a q8_0 KV cache needs each rank's K/V width to be a "
                          "multiple of %d; %d ranks have %" PRId64 " (use f16 or bf16)",
                          KV_Q8_0_BLOCK, tp, width);
    return 0;
}

typedef enum {
    CUT_WHOLE,  /* every rank has all of it (norms, the routers) */
    CUT_ROWS,   /* output features: heads, FFN columns */
    CUT_VALUES, /* a vector of output features (the Q bias) */
    CUT_KV_ROWS, CUT_KV_VALUES, /* K and V, and their biases: the rank's KV heads */
    CUT_COLS,   /* input features: the output and down projections */
    CUT_FIRST,  /* added once to the sum: rank 0 */
    /* a DeltaNet layer's, by its rank's key and value heads (ssm_runs) */
    CUT_SSM_QKV_ROWS, CUT_SSM_VALUE_ROWS, CUT_SSM_HEAD_ROWS, CUT_SSM_HEAD_VALUES, CUT_SSM_CONV,
    CUT_SSM_VALUE_COLS,
} cut_kind;

static cut_kind cut_of(tensor_role r)
{
    switch (r) {
    case ROLE_ATTN_K:
    case ROLE_ATTN_V: return CUT_KV_ROWS;
    case ROLE_ATTN_K_BIAS:
    case ROLE_ATTN_V_BIAS: return CUT_KV_VALUES;
    case ROLE_ATTN_Q:
    case ROLE_FFN_GATE:
    case ROLE_FFN_UP:
    case ROLE_FFN_GATE_SHEXP:
    case ROLE_FFN_UP_SHEXP:
    case ROLE_MOE_GATE_EXPS:
    case ROLE_MOE_UP_EXPS: return CUT_ROWS;
    case ROLE_ATTN_Q_BIAS: return CUT_VALUES;
    case ROLE_ATTN_O:
    case ROLE_FFN_DOWN:
    case ROLE_FFN_DOWN_SHEXP:
    case ROLE_MOE_DOWN_EXPS: return CUT_COLS;
    case ROLE_ATTN_O_BIAS: return CUT_FIRST;
    case ROLE_SSM_QKV: return CUT_SSM_QKV_ROWS;
    case ROLE_SSM_Z: return CUT_SSM_VALUE_ROWS;
    case ROLE_SSM_BETA:
    case ROLE_SSM_ALPHA: return CUT_SSM_HEAD_ROWS;
    case ROLE_SSM_DT_BIAS:
    case ROLE_SSM_A: return CUT_SSM_HEAD_VALUES;
    case ROLE_SSM_CONV: return CUT_SSM_CONV;
    case ROLE_SSM_OUT: return CUT_SSM_VALUE_COLS;
    default: return CUT_WHOLE;
    }
}

/* A share as runs of consecutive indices (rows, columns or values). */
typedef struct {
    int64_t start[2 * BACKEND_MAX_STAGES * 64], len[2 * BACKEND_MAX_STAGES * 64];
    int n;
} runs;

static void runs_add(runs *r, int64_t start, int64_t len)
{
    if (r->n > 0 && r->start[r->n - 1] + r->len[r->n - 1] == start) {
        r->len[r->n - 1] += len;
        return;
    }
    MEMRA_ASSERT(r->n < (int)MEMRA_ARRAY_LEN(r->start));
    r->start[r->n] = start;
    r->len[r->n++] = len;
}

static int64_t runs_total(const runs *r)
{
    int64_t t = 0;
    for (int i = 0; i < r->n; i++)
        t += r->len[i];
    return t;
}

/* Rank rk's value heads of a DeltaNet layer, in order, each `per` indices
 * from `base`: its key heads are [rk nk/tp, (rk+1) nk/tp), and the value
 * heads reading them are a run (grouped: head h reads key head h / (nv /
 * nk)) or one per group of nk (tiled, llama.cpp's GGUF order: h reads
 * h % nk), which keeps the tiled order among the rank's own heads. */
static void value_head_runs(const model *m, int rk, int64_t base, int64_t per, runs *out)
{
    const model_config *c = &m->config;
    int64_t nk = c->lin_n_k_heads, nv = c->lin_n_v_heads, tp = m->tp;
    if (m->format != CKPT_GGUF) {
        runs_add(out, base + rk * (nv / tp) * per, (nv / tp) * per);
        return;
    }
    for (int64_t g = 0; g < nv / nk; g++)
        runs_add(out, base + (g * nk + rk * (nk / tp)) * per, (nk / tp) * per);
}

/* The share of a DeltaNet tensor (cut kind k), in rows, columns or values
 * as the kind says; conv channels are conv_k values each. */
static void ssm_runs(const model *m, cut_kind k, int rk, runs *out)
{
    const model_config *c = &m->config;
    int64_t nk = c->lin_n_k_heads, kd = c->lin_k_dim, vd = c->lin_v_dim, tp = m->tp;
    int64_t per = k == CUT_SSM_CONV ? c->lin_conv_k : 1;
    out->n = 0;
    switch (k) {
    case CUT_SSM_QKV_ROWS:
    case CUT_SSM_CONV: /* q channels of its key heads, k channels, v channels */
        runs_add(out, rk * (nk / tp) * kd * per, (nk / tp) * kd * per);
        runs_add(out, (nk + rk * (nk / tp)) * kd * per, (nk / tp) * kd * per);
        value_head_runs(m, rk, 2 * nk * kd * per, vd * per, out);
        return;
    case CUT_SSM_VALUE_ROWS:
    case CUT_SSM_VALUE_COLS: value_head_runs(m, rk, 0, vd, out); return;
    case CUT_SSM_HEAD_ROWS:
    case CUT_SSM_HEAD_VALUES: value_head_runs(m, rk, 0, 1, out); return;
    default: MEMRA_ASSERT(0 && "not a DeltaNet cut");
    }
}

static void keep_copy(model *m, bk_weight *w, uint8_t *buf)
{
    m->tp_copies = xrealloc(m->tp_copies, (size_t)(m->n_tp_copies + 1) * sizeof *m->tp_copies);
    m->tp_copies[m->n_tp_copies++] = buf;
    w->data = buf;
}

static int not_blocks(const bk_weight *w, const runs *r, const char *what, memra_err *err)
{
    const dtype_info *ti = dtype_get(w->type);
    int64_t shortest = r->len[0];
    for (int i = 1; i < r->n; i++)
        shortest = r->len[i] < shortest ? r->len[i] : shortest;
    return memra_fail(err, "tensor '%s': a tensor-parallel rank's %" PRId64 " of its %" PRId64
                      " %s (in runs of %" PRId64 " or more) are not whole %s blocks of %d "
                      "(fewer ranks, or another format)", w->name, runs_total(r),
                      w->cols, what, shortest, ti ? ti->name : "?",
                      ti ? ti->block_size : 0);
}

/* The runs' rows of w: a view when one run, else copied. */
static void gather_rows(model *m, bk_weight *w, const runs *r)
{
    int64_t rows = runs_total(r);
    if (r->n == 1) {
        w->data += (size_t)r->start[0] * w->row_bytes;
    } else {
        uint8_t *buf = xmalloc((size_t)rows * w->row_bytes), *p = buf;
        for (int i = 0; i < r->n; i++) {
            size_t bytes = (size_t)r->len[i] * w->row_bytes;
            memcpy(p, w->data + (size_t)r->start[i] * w->row_bytes, bytes);
            p += bytes;
        }
        keep_copy(m, w, buf);
    }
    w->rows = rows;
}

/* The runs' columns of every row of w (a vector: its values), copied;
 * each run must be whole blocks of w's type. */
static int gather_cols(model *m, bk_weight *w, const runs *r, memra_err *err)
{
    int64_t cols = runs_total(r), rb = dtype_row_bytes(w->type, cols);
    const char *what = w->rows == 1 ? "values" : "columns";
    for (int i = 0; i < r->n; i++)
        if (dtype_row_bytes(w->type, r->start[i]) < 0 || dtype_row_bytes(w->type, r->len[i]) < 0)
            return not_blocks(w, r, what, err);
    if (rb <= 0)
        return not_blocks(w, r, what, err);
    uint8_t *buf = xmalloc((size_t)w->rows * (size_t)rb), *p = buf;
    for (int64_t row = 0; row < w->rows; row++) {
        const uint8_t *src = w->data + (size_t)row * w->row_bytes;
        for (int i = 0; i < r->n; i++) {
            size_t off = (size_t)dtype_row_bytes(w->type, r->start[i]);
            size_t bytes = (size_t)dtype_row_bytes(w->type, r->len[i]);
            memcpy(p, src + off, bytes);
            p += bytes;
        }
    }
    keep_copy(m, w, buf);
    w->cols = cols;
    w->row_bytes = (size_t)rb;
    return 0;
}

int tp_cut(model *m, tensor_role role, bk_weight *w, memra_err *err)
{
    /* (a rank in another process: the whole view stands, never read) */
    if (m->tp <= 1 || !bk_weight_present(w) || !m->bind_here)
        return 0;
    int rk = m->bind_rank;
    int64_t tp = m->tp;
    runs r = {.n = 0};
    cut_kind k = cut_of(role);
    switch (k) {
    case CUT_WHOLE: return 0;
    case CUT_FIRST:
        if (rk != 0)
            memset(w, 0, sizeof *w);
        return 0;
    case CUT_ROWS:
        MEMRA_ASSERT(w->rows % tp == 0); /* tp_check */
        runs_add(&r, rk * (w->rows / tp), w->rows / tp);
        gather_rows(m, w, &r);
        return 0;
    case CUT_VALUES:
        MEMRA_ASSERT(w->rows == 1 && w->cols % tp == 0);
        runs_add(&r, rk * (w->cols / tp), w->cols / tp);
        return gather_cols(m, w, &r, err);
    case CUT_COLS:
        MEMRA_ASSERT(w->cols % tp == 0);
        runs_add(&r, rk * (w->cols / tp), w->cols / tp);
        return gather_cols(m, w, &r, err);
    case CUT_KV_ROWS:
    case CUT_KV_VALUES: {
        const model_config *c = &m->config;
        int64_t hd = (k == CUT_KV_ROWS ? w->rows : w->cols) / c->n_kv_heads;
        runs_add(&r, rank_kv_head0(c, m->tp, rk) * hd, rank_kv_heads(c, m->tp) * hd);
        if (k == CUT_KV_VALUES)
            return gather_cols(m, w, &r, err);
        gather_rows(m, w, &r);
        return 0;
    }
    case CUT_SSM_QKV_ROWS:
    case CUT_SSM_VALUE_ROWS:
    case CUT_SSM_HEAD_ROWS:
        ssm_runs(m, k, rk, &r);
        gather_rows(m, w, &r);
        return 0;
    case CUT_SSM_HEAD_VALUES:
    case CUT_SSM_CONV:
    case CUT_SSM_VALUE_COLS:
        ssm_runs(m, k, rk, &r);
        return gather_cols(m, w, &r, err);
    }
    return 0;
}

void tp_settle(model *m, bk_weight *w, const uint8_t *view)
{
    int last = m->n_tp_copies - 1;
    if (last < 0 || !w->dev || w->data != m->tp_copies[last])
        return;
    free(m->tp_copies[last]);
    m->n_tp_copies = last;
    w->data = view;
}

void tp_rank_shapes(model *m)
{
    int n_layers = (int)m->config.n_layers;
    size_t share = m->state_floats / (size_t)m->tp;
    for (int r = 0; r < m->tp; r++) {
        bk_attn *a = xmalloc((size_t)n_layers * sizeof *a);
        bk_delta *d = xmalloc((size_t)n_layers * sizeof *d);
        memcpy(a, m->attn, (size_t)n_layers * sizeof *a);
        memcpy(d, m->delta, (size_t)n_layers * sizeof *d);
        /* a rank's states lie side by side in its part of each slot */
        size_t off = (size_t)r * share;
        for (int l = 0; l < n_layers; l++) {
            a[l].n_heads /= m->tp;
            a[l].n_kv_heads = (int)rank_kv_heads(&m->config, m->tp);
            a[l].kv_head0 = (int)rank_kv_head0(&m->config, m->tp, r);
            if (!config_layer_recurrent(&m->config, l))
                continue;
            const layer_weights *w = &m->rank_layers[r][l];
            d[l].n_k_heads /= m->tp;
            d[l].n_v_heads /= m->tp;
            d[l].state_off = off;
            d[l].conv = &w->ssm_conv;
            d[l].dt_bias = &w->ssm_dt_bias;
            d[l].a = &w->ssm_a;
            d[l].norm = &w->ssm_norm;
            off += bk_delta_state_floats(d[l].n_k_heads, d[l].n_v_heads, d[l].k_dim, d[l].v_dim,
                                         d[l].conv_k);
        }
        MEMRA_ASSERT(off == (size_t)(r + 1) * share); /* tp_check: the heads divide */
        m->rank_attn[r] = a;
        m->rank_delta[r] = d;
    }
    free(m->attn);
    free(m->delta);
    m->attn = m->rank_attn[m->tp - 1];
    m->delta = m->rank_delta[m->tp - 1];
}

void tp_cache_windows(model *m)
{
    const model_config *c = &m->config;
    int64_t cols = rank_kv_heads(c, m->tp) * c->head_dim;
    for (int r = 0; r < m->tp; r++) {
        backend *rb = backend_stage(m->pipe, r);
        size_t share = m->state_floats / (size_t)m->tp;
        bk_cache_window w = {.kv_lo = 0, .kv_n = m->n_kv_layers,
                             .kv_col_lo = rank_kv_head0(c, m->tp, r) * c->head_dim,
                             .kv_cols = cols, .state_lo = (size_t)r * share,
                             .state_n = share};
        if (rb->ops->cache_window)
            rb->ops->cache_window(rb, &w);
    }
}

void tp_use_rank(model *m, int r)
{
    m->rank_now = r;
    m->bk = backend_stage(m->pipe, r);
    backend_bind(m->bk);
    memcpy(&m->state, &m->rank_state[r], offsetof(run_state, kv));
    m->weights.layers = m->rank_layers[r];
    m->attn = m->rank_attn[r];
    m->delta = m->rank_delta[r];
}

void tp_sublayer(model *m, model_share_fn f, int l, const bk_batch *rows, int n, const float *in,
                 float *out)
{
    int lead = m->tp - 1;
    backend *lb = backend_stage(m->pipe, lead);
    size_t nd = (size_t)n * (size_t)m->config.dim;
    /* Ranks in processes of their own (backend_pipeline_join): each runs
     * its own share, the input comes from the leader's process and the
     * share goes back to it (backend_act_move sends and receives), and
     * only the leader's process adds. */
    int lead_here = backend_stage_local(m->pipe, lead);
    /* Every rank's share, issued one after another: no rank waits on the
     * host, so ranks on different devices run at once. */
    for (int r = 0; r < m->tp; r++) {
        int here = backend_stage_local(m->pipe, r);
        if (!here && !lead_here)
            continue;
        tp_use_rank(m, r);
        const float *x = in;
        if (r != lead) {
            backend_act_move(m->bk, m->state.tp_in, lb, in, nd);
            x = m->state.tp_in;
        }
        if (!here)
            continue;
        m->tp_inside = 1;
        f(m, l, rows, n, x, m->state.tp_part);
        m->tp_inside = 0;
    }
    /* The shares summed on the leader, ((s0 + s1) + s2) + ...: the same
     * order every step, whatever finished first. */
    tp_use_rank(m, lead);
    const run_state *ls = &m->rank_state[lead];
    for (int r = 0; r < m->tp; r++) {
        backend *rb = backend_stage(m->pipe, r);
        if (r == 0) {
            backend_act_move(lb, out, rb, m->rank_state[0].tp_part, nd);
        } else if (r == lead) {
            if (lead_here)
                lb->ops->add(lb, out, ls->tp_part, nd);
        } else {
            backend_act_move(lb, ls->tp_in, rb, m->rank_state[r].tp_part, nd);
            if (lead_here)
                lb->ops->add(lb, out, ls->tp_in, nd);
        }
    }
}

void tp_free(model *m)
{
    int n_layers = (int)m->config.n_layers;
    for (int r = 0; r < m->tp; r++) {
        if (m->rank_layers[r]) {
            for (int l = 0; l < n_layers; l++) {
                free(m->rank_layers[r][l].moe_gate);
                free(m->rank_layers[r][l].moe_up);
                free(m->rank_layers[r][l].moe_down);
            }
            free(m->rank_layers[r]);
            m->rank_layers[r] = NULL;
        }
        free(m->rank_attn[r]);
        free(m->rank_delta[r]);
        m->rank_attn[r] = NULL;
        m->rank_delta[r] = NULL;
    }
    for (int i = 0; i < m->n_tp_copies; i++)
        free(m->tp_copies[i]);
    free(m->tp_copies);
    m->tp_copies = NULL;
    m->n_tp_copies = 0;
    m->weights.layers = NULL;
    m->attn = NULL;
    m->delta = NULL;
}
