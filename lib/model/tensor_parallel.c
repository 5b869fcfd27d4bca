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

int tp_check(const model_config *c, int tp, kv_type kvt, memra_err *err)
{
    const model_family_desc *fam = family_desc(c->family);
    if (tp < 2 || tp > BACKEND_MAX_STAGES)
        return memra_fail(err, "model: %d tensor-parallel ranks (2 to %d)", tp,
                          BACKEND_MAX_STAGES);
    if (!fam || !fam->tensor_parallel)
        return memra_fail(err, "model: the %s family does not split over tensor-parallel ranks "
                          "yet (llama, qwen2, qwen3, qwen3_moe and gemma3 do; --pp splits any "
                          "family by layers)", fam ? fam->name : "unknown");
    if (c->n_heads % tp != 0 || c->n_kv_heads % tp != 0)
        return memra_fail(err, "model: %" PRId64 " heads and %" PRId64 " KV heads do not split "
                          "evenly over %d tensor-parallel ranks", c->n_heads, c->n_kv_heads, tp);
    if (!fam->moe && c->ffn_dim % tp != 0)
        return memra_fail(err, "model: the FFN's %" PRId64 " columns do not split evenly over %d "
                          "tensor-parallel ranks", c->ffn_dim, tp);
    if (fam->moe && c->moe_ffn_dim % tp != 0)
        return memra_fail(err, "model: an expert's %" PRId64 " columns do not split evenly over "
                          "%d tensor-parallel ranks", c->moe_ffn_dim, tp);
    int64_t width = c->n_kv_heads / tp * c->head_dim;
    if (kvt == KV_Q8_0 && width % KV_Q8_0_BLOCK != 0)
        return memra_fail(err, "model: a q8_0 KV cache needs each rank's K/V width to be a "
                          "multiple of %d; %d ranks have %" PRId64 " (use f16 or bf16)",
                          KV_Q8_0_BLOCK, tp, width);
    return 0;
}

typedef enum {
    CUT_WHOLE,  /* every rank has all of it (norms, the router) */
    CUT_ROWS,   /* output features: heads, FFN columns */
    CUT_VALUES, /* a vector of output features (the Q/K/V biases) */
    CUT_COLS,   /* input features: the output and down projections */
    CUT_FIRST,  /* added once to the sum: rank 0 */
} cut_kind;

static cut_kind cut_of(tensor_role r)
{
    switch (r) {
    case ROLE_ATTN_Q:
    case ROLE_ATTN_K:
    case ROLE_ATTN_V:
    case ROLE_FFN_GATE:
    case ROLE_FFN_UP:
    case ROLE_MOE_GATE_EXPS:
    case ROLE_MOE_UP_EXPS: return CUT_ROWS;
    case ROLE_ATTN_Q_BIAS:
    case ROLE_ATTN_K_BIAS:
    case ROLE_ATTN_V_BIAS: return CUT_VALUES;
    case ROLE_ATTN_O:
    case ROLE_FFN_DOWN:
    case ROLE_MOE_DOWN_EXPS: return CUT_COLS;
    case ROLE_ATTN_O_BIAS: return CUT_FIRST;
    default: return CUT_WHOLE;
    }
}

/* Columns [c0, c0 + n) of every row of w, into a buffer the model owns. */
static int cut_cols(model *m, bk_weight *w, int64_t c0, int64_t n, memra_err *err)
{
    int64_t off = dtype_row_bytes(w->type, c0), rb = dtype_row_bytes(w->type, n);
    if (off < 0 || rb <= 0) {
        const dtype_info *ti = dtype_get(w->type);
        return memra_fail(err, "tensor '%s': a tensor-parallel rank's %" PRId64 " of its %" PRId64
                          " columns are not whole %s blocks of %d (fewer ranks, or another "
                          "format)", w->name, n, w->cols, ti ? ti->name : "?",
                          ti ? ti->block_size : 0);
    }
    uint8_t *buf = xmalloc((size_t)w->rows * (size_t)rb);
    for (int64_t r = 0; r < w->rows; r++)
        memcpy(buf + (size_t)r * (size_t)rb, w->data + (size_t)r * w->row_bytes + (size_t)off,
               (size_t)rb);
    m->tp_copies = xrealloc(m->tp_copies, (size_t)(m->n_tp_copies + 1) * sizeof *m->tp_copies);
    m->tp_copies[m->n_tp_copies++] = buf;
    w->data = buf;
    w->cols = n;
    w->row_bytes = (size_t)rb;
    return 0;
}

int tp_cut(model *m, tensor_role role, bk_weight *w, memra_err *err)
{
    if (m->tp <= 1 || !bk_weight_present(w))
        return 0;
    int64_t r = m->bind_rank, tp = m->tp;
    switch (cut_of(role)) {
    case CUT_WHOLE: return 0;
    case CUT_FIRST:
        if (r != 0)
            memset(w, 0, sizeof *w);
        return 0;
    case CUT_ROWS: {
        MEMRA_ASSERT(w->rows % tp == 0); /* tp_check */
        int64_t n = w->rows / tp;
        w->data += (size_t)(r * n) * w->row_bytes;
        w->rows = n;
        return 0;
    }
    case CUT_VALUES: {
        MEMRA_ASSERT(w->rows == 1 && w->cols % tp == 0);
        int64_t n = w->cols / tp, off = dtype_row_bytes(w->type, r * n);
        int64_t rb = dtype_row_bytes(w->type, n);
        if (off < 0 || rb <= 0)
            return memra_fail(err, "tensor '%s': %" PRId64 " values do not split into whole "
                              "blocks over %" PRId64 " tensor-parallel ranks", w->name, w->cols, tp);
        w->data += off;
        w->cols = n;
        w->row_bytes = (size_t)rb;
        return 0;
    }
    case CUT_COLS:
        MEMRA_ASSERT(w->cols % tp == 0);
        return cut_cols(m, w, r * (w->cols / tp), w->cols / tp, err);
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

void tp_rank_attn(model *m)
{
    int n_layers = (int)m->config.n_layers;
    for (int r = 0; r < m->tp; r++) {
        bk_attn *a = xmalloc((size_t)n_layers * sizeof *a);
        memcpy(a, m->attn, (size_t)n_layers * sizeof *a);
        for (int l = 0; l < n_layers; l++) {
            a[l].n_heads /= m->tp;
            a[l].n_kv_heads /= m->tp;
            a[l].kv_head0 = r * a[l].n_kv_heads;
        }
        m->rank_attn[r] = a;
    }
    free(m->attn);
    m->attn = m->rank_attn[m->tp - 1];
}

void tp_cache_windows(model *m)
{
    int64_t cols = m->kv_dim / m->tp;
    for (int r = 0; r < m->tp; r++) {
        backend *rb = backend_stage(m->pipe, r);
        bk_cache_window w = {.kv_lo = 0, .kv_n = m->n_kv_layers, .kv_col_lo = r * cols,
                             .kv_cols = cols};
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
}

void tp_sublayer(model *m, tp_share_fn f, int l, const bk_batch *rows, int n, const float *in,
                 float *out)
{
    int lead = m->tp - 1;
    backend *lb = backend_stage(m->pipe, lead);
    size_t nd = (size_t)n * (size_t)m->config.dim;
    /* Every rank's share, issued one after another: no rank waits on the
     * host, so ranks on different devices run at once. */
    for (int r = 0; r < m->tp; r++) {
        tp_use_rank(m, r);
        const float *x = in;
        if (r != lead) {
            backend_act_move(m->bk, m->state.tp_in, lb, in, nd);
            x = m->state.tp_in;
        }
        f(m, l, rows, n, x, m->state.tp_part);
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
            lb->ops->add(lb, out, ls->tp_part, nd);
        } else {
            backend_act_move(lb, ls->tp_in, rb, m->rank_state[r].tp_part, nd);
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
        m->rank_attn[r] = NULL;
    }
    for (int i = 0; i < m->n_tp_copies; i++)
        free(m->tp_copies[i]);
    free(m->tp_copies);
    m->tp_copies = NULL;
    m->n_tp_copies = 0;
    m->weights.layers = NULL;
    m->attn = NULL;
}
