/* Loading a model onto a backend (weights bound as views, per-layer
 * attention shapes and RoPE tables, the run state), the shared attention
 * sublayer, and the final norm + output head every family ends with. */
#include "model/model.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "format/dequant.h"
#include "numerics/kv_codec.h"
#include "model/family.h"
#include "model/tensor_parallel.h"

/* ---- weights ---- */

static void view_to_weight(const tensor_view *v, bk_weight *w)
{
    memset(w, 0, sizeof *w);
    w->name = v->name;
    w->type = v->type;
    if (v->n_dims == 1) {
        w->rows = 1;
        w->cols = v->shape[0];
    } else {
        /* [rows][cols], or HF's depthwise conv [rows][1][cols] */
        w->rows = v->shape[0];
        w->cols = v->shape[v->n_dims - 1];
    }
    w->row_bytes = w->rows > 0 ? (size_t)(v->nbytes / (uint64_t)w->rows) : 0;
    w->data = v->data;
}

/* The bound tensor for (role, layer) as a weight, checked by the backend;
 * an absent optional tensor leaves w empty. */
static int bind_weight(model *m, const contract_binding *b, tensor_role role, int layer,
                       bk_weight *w, memra_err *err)
{
    memset(w, 0, sizeof *w);
    const tensor_view *v = contract_get(b, role, layer, -1);
    if (!v)
        return 0;
    view_to_weight(v, w);
    if (tp_cut(m, role, w, err) != 0)
        return -1;
    if (!bk_weight_present(w)) /* a share that is not this rank's (the output bias) */
        return 0;
    if (m->bk->ops->weight_prepare(m->bk, w, err) != 0)
        return -1;
    tp_settle(m, w, v->data);
    return 0;
}

/* Expert matrices: HF binds one tensor per expert; GGUF one merged
 * [n_experts][rows][cols] tensor whose experts are consecutive slices. */
static int bind_experts(model *m, const contract_binding *b, tensor_role role, int layer,
                        bk_weight **out, memra_err *err)
{
    int ne = (int)m->config.n_experts;
    bk_weight *w = xcalloc((size_t)ne, sizeof *w);
    *out = w;
    const tensor_view *merged = contract_get(b, role, layer, -1);
    for (int e = 0; e < ne; e++) {
        if (merged) {
            uint64_t per = merged->nbytes / (uint64_t)ne;
            w[e].name = merged->name;
            w[e].type = merged->type;
            w[e].rows = merged->shape[1];
            w[e].cols = merged->shape[2];
            w[e].row_bytes = (size_t)(per / (uint64_t)w[e].rows);
            w[e].data = merged->data + (size_t)per * (size_t)e;
        } else {
            const tensor_view *v = contract_get(b, role, layer, e);
            MEMRA_ASSERT(v); /* binding guarantees every expert */
            view_to_weight(v, &w[e]);
        }
        const uint8_t *view = w[e].data;
        if (tp_cut(m, role, &w[e], err) != 0 ||
            m->bk->ops->weight_prepare(m->bk, &w[e], err) != 0)
            return -1;
        tp_settle(m, &w[e], view);
    }
    return 0;
}

/* Rows [row0, row0 + rows) of expert e of a stacked [n_experts][r][cols]
 * tensor, as a weight. */
static void stack_slice(const tensor_view *v, int e, int64_t row0, int64_t rows, bk_weight *w)
{
    int64_t ne = v->shape[0], r = v->shape[1];
    size_t row_bytes = (size_t)(v->nbytes / (uint64_t)(ne * r));
    memset(w, 0, sizeof *w);
    w->name = v->name;
    w->type = v->type;
    w->rows = rows;
    w->cols = v->shape[2];
    w->row_bytes = row_bytes;
    w->data = v->data + ((size_t)e * (size_t)r + (size_t)row0) * row_bytes;
}

/* gemma4's experts, stacked in every naming: gate rows then up rows per
 * expert in one tensor, down in another; each expert's matrices are views
 * into them. */
static int bind_expert_stacks(model *m, const contract_binding *b, int l, layer_weights *lw,
                              memra_err *err)
{
    const tensor_view *gu = contract_get(b, ROLE_MOE_GATE_UP_STACK, l, -1);
    const tensor_view *dn = contract_get(b, ROLE_MOE_DOWN_STACK, l, -1);
    MEMRA_ASSERT(gu && dn && gu->n_dims == 3 && dn->n_dims == 3); /* the contract */
    int ne = (int)m->config.n_experts;
    int64_t mf = gu->shape[1] / 2;
    lw->moe_gate = xcalloc((size_t)ne, sizeof *lw->moe_gate);
    lw->moe_up = xcalloc((size_t)ne, sizeof *lw->moe_up);
    lw->moe_down = xcalloc((size_t)ne, sizeof *lw->moe_down);
    for (int e = 0; e < ne; e++) {
        stack_slice(gu, e, 0, mf, &lw->moe_gate[e]);
        stack_slice(gu, e, mf, mf, &lw->moe_up[e]);
        stack_slice(dn, e, 0, dn->shape[1], &lw->moe_down[e]);
        if (m->bk->ops->weight_prepare(m->bk, &lw->moe_gate[e], err) ||
            m->bk->ops->weight_prepare(m->bk, &lw->moe_up[e], err) ||
            m->bk->ops->weight_prepare(m->bk, &lw->moe_down[e], err))
            return -1;
    }
    return 0;
}

static int bind_layer(model *m, const contract_binding *b, int l, layer_weights *lw,
                      memra_err *err)
{
    static const struct {
        tensor_role role;
        size_t off;
    } plain[] = {
        {ROLE_ATTN_NORM, offsetof(layer_weights, attn_norm)},
        {ROLE_ATTN_Q, offsetof(layer_weights, wq)},
        {ROLE_ATTN_K, offsetof(layer_weights, wk)},
        {ROLE_ATTN_V, offsetof(layer_weights, wv)},
        {ROLE_ATTN_O, offsetof(layer_weights, wo)},
        {ROLE_ATTN_Q_BIAS, offsetof(layer_weights, bq)},
        {ROLE_ATTN_K_BIAS, offsetof(layer_weights, bk)},
        {ROLE_ATTN_V_BIAS, offsetof(layer_weights, bv)},
        {ROLE_ATTN_O_BIAS, offsetof(layer_weights, bo)},
        {ROLE_ATTN_Q_NORM, offsetof(layer_weights, q_norm)},
        {ROLE_ATTN_K_NORM, offsetof(layer_weights, k_norm)},
        {ROLE_ATTN_POST_NORM, offsetof(layer_weights, attn_post_norm)},
        {ROLE_FFN_NORM, offsetof(layer_weights, ffn_norm)},
        {ROLE_FFN_GATE, offsetof(layer_weights, ffn_gate)},
        {ROLE_FFN_UP, offsetof(layer_weights, ffn_up)},
        {ROLE_FFN_DOWN, offsetof(layer_weights, ffn_down)},
        {ROLE_FFN_POST_NORM, offsetof(layer_weights, ffn_post_norm)},
        {ROLE_MOE_ROUTER, offsetof(layer_weights, moe_router)},
        {ROLE_SSM_QKV, offsetof(layer_weights, ssm_qkv)},
        {ROLE_SSM_Z, offsetof(layer_weights, ssm_z)},
        {ROLE_SSM_BETA, offsetof(layer_weights, ssm_beta)},
        {ROLE_SSM_ALPHA, offsetof(layer_weights, ssm_alpha)},
        {ROLE_SSM_DT_BIAS, offsetof(layer_weights, ssm_dt_bias)},
        {ROLE_SSM_A, offsetof(layer_weights, ssm_a)},
        {ROLE_SSM_NORM, offsetof(layer_weights, ssm_norm)},
        {ROLE_SSM_OUT, offsetof(layer_weights, ssm_out)},
        {ROLE_FFN_GATE_SHEXP, offsetof(layer_weights, shexp_gate)},
        {ROLE_FFN_UP_SHEXP, offsetof(layer_weights, shexp_up)},
        {ROLE_FFN_DOWN_SHEXP, offsetof(layer_weights, shexp_down)},
        {ROLE_MOE_SHARED_GATE, offsetof(layer_weights, shexp_inp)},
        {ROLE_PLE_GATE, offsetof(layer_weights, ple_gate)},
        {ROLE_PLE_OUT, offsetof(layer_weights, ple_out)},
        {ROLE_PLE_POST_NORM, offsetof(layer_weights, ple_post_norm)},
        {ROLE_MOE_ROUTER_SCALE, offsetof(layer_weights, moe_router_scale)},
        {ROLE_MOE_EXPERT_SCALE, offsetof(layer_weights, moe_expert_scale)},
        {ROLE_FFN_PRE_NORM_2, offsetof(layer_weights, ffn_pre_norm_2)},
        {ROLE_FFN_POST_NORM_1, offsetof(layer_weights, ffn_post_norm_1)},
        {ROLE_FFN_POST_NORM_2, offsetof(layer_weights, ffn_post_norm_2)},
    };
    /* a layer reading another's K/V leaves its own unbound (never uploaded) */
    int own_kv = config_layer_kv_source(&m->config, l) == l;
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(plain); i++) {
        tensor_role r = plain[i].role;
        if (!own_kv && (r == ROLE_ATTN_K || r == ROLE_ATTN_V || r == ROLE_ATTN_K_NORM))
            continue;
        if (bind_weight(m, b, r, l, (bk_weight *)((char *)lw + plain[i].off), err))
            return -1;
    }
    /* The DeltaNet conv, a few taps a channel, is read as one vector
     * [conv_dim * conv_k] (the backends keep vectors in f32). */
    const tensor_view *conv = contract_get(b, ROLE_SSM_CONV, l, -1);
    if (conv) {
        view_to_weight(conv, &lw->ssm_conv);
        lw->ssm_conv.cols = (int64_t)conv->n_elements;
        lw->ssm_conv.rows = 1;
        lw->ssm_conv.row_bytes = (size_t)conv->nbytes;
        if (tp_cut(m, ROLE_SSM_CONV, &lw->ssm_conv, err) != 0 ||
            m->bk->ops->weight_prepare(m->bk, &lw->ssm_conv, err) != 0)
            return -1;
        tp_settle(m, &lw->ssm_conv, conv->data);
    }
    /* The layer's output scale is one value, read once here. */
    lw->layer_scale = 1.0f;
    const tensor_view *ls = contract_get(b, ROLE_LAYER_SCALE, l, -1);
    if (ls) {
        float v[1];
        if (ls->n_elements != 1 || dequant_row(ls->type, ls->data, v, 1, err) != 0)
            return ls->n_elements != 1
                       ? memra_fail(err, "tensor '%s': %" PRId64 " values, expected 1", ls->name,
                                    (int64_t)ls->n_elements)
                       : -1;
        if (!isfinite(v[0]))
            return memra_fail(err, "tensor '%s': the layer scale %g is not finite", ls->name,
                              (double)v[0]);
        lw->layer_scale = v[0];
    }
    if (contract_get(b, ROLE_MOE_GATE_UP_STACK, l, -1) &&
        bind_expert_stacks(m, b, l, lw, err) != 0)
        return -1;
    if (family_desc(m->config.family)->moe) {
        if (bind_experts(m, b, ROLE_MOE_GATE_EXPS, l, &lw->moe_gate, err) ||
            bind_experts(m, b, ROLE_MOE_UP_EXPS, l, &lw->moe_up, err) ||
            bind_experts(m, b, ROLE_MOE_DOWN_EXPS, l, &lw->moe_down, err))
            return -1;
    }
    return 0;
}

/* The pipeline stage that runs layer l (the MTP block's, n_layers: the
 * last). */
static int stage_of_layer(const model *m, int l)
{
    int s = 0;
    while (s + 1 < m->n_stages && l >= m->stage_first[s + 1])
        s++;
    return s;
}

/* Make stage s current: its backend bound, its activations in state, its
 * layers the range the forward pass runs. */
static void use_stage(model *m, int s)
{
    if (!m->stage_state || s == m->stage_now)
        return;
    m->stage_now = s;
    m->bk = backend_stage(m->pipe, s);
    backend_bind(m->bk);
    memcpy(&m->state, &m->stage_state[s], offsetof(run_state, kv));
    m->layer_begin = m->stage_first[s];
    m->layer_end = m->stage_first[s + 1];
}

/* Weights go up to stage s's backend from here on (its device bound). */
static void bind_on(model *m, int s)
{
    m->bk = backend_stage(m->pipe, s);
    m->bind_here = backend_stage_local(m->pipe, s);
    backend_bind(m->bk);
}

static int bind_weights(model *m, const contract_binding *b, memra_err *err)
{
    model_weights *w = &m->weights;
    /* each weight on the stage that reads it: the embedding (and gemma4's
     * per-layer inputs) on the first, the head on the last; with
     * tensor-parallel ranks, both on the leader */
    int first = m->tp > 1 ? m->tp - 1 : 0, last = m->tp > 1 ? m->tp - 1 : m->n_stages - 1;
    bind_on(m, first);
    if (bind_weight(m, b, ROLE_EMBED, -1, &w->embed, err) ||
        bind_weight(m, b, ROLE_PLE_EMBED, -1, &w->ple_embed, err) ||
        bind_weight(m, b, ROLE_PLE_PROJ, -1, &w->ple_proj, err) ||
        bind_weight(m, b, ROLE_PLE_PROJ_NORM, -1, &w->ple_proj_norm, err))
        return -1;
    bind_on(m, last);
    if (bind_weight(m, b, ROLE_OUTPUT_NORM, -1, &w->output_norm, err) ||
        bind_weight(m, b, ROLE_OUTPUT, -1, &w->output, err) ||
        bind_weight(m, b, ROLE_ASSIST_PRE_PROJ, -1, &w->assist_pre, err) ||
        bind_weight(m, b, ROLE_ASSIST_POST_PROJ, -1, &w->assist_post, err))
        return -1;
    if (!bk_weight_present(&w->output)) { /* tied head */
        if (last == first)
            w->output = w->embed;
        else if (bind_weight(m, b, ROLE_EMBED, -1, &w->output, err) != 0)
            return -1; /* the last stage's own copy */
    }
    int n = (int)m->config.n_layers + m->mtp;
    if (m->tp > 1) { /* every rank its share of every layer */
        for (int r = 0; r < m->tp; r++)
            m->rank_layers[r] = xcalloc((size_t)n, sizeof *w->layers);
        for (int r = 0; r < m->tp; r++) {
            bind_on(m, r);
            m->bind_rank = r;
            for (int l = 0; l < n; l++)
                if (bind_layer(m, b, l, &m->rank_layers[r][l], err) != 0)
                    return -1;
        }
        w->layers = m->rank_layers[last];
        bind_on(m, last);
        return 0;
    }
    w->layers = xcalloc((size_t)n, sizeof *w->layers);
    for (int l = 0; l < n; l++) {
        bind_on(m, stage_of_layer(m, l));
        if (bind_layer(m, b, l, &w->layers[l], err) != 0)
            return -1;
    }
    bind_on(m, last);
    if (m->mtp) {
        int l = (int)m->config.n_layers;
        if (bind_weight(m, b, ROLE_MTP_EH_PROJ, l, &w->mtp.eh_proj, err) ||
            bind_weight(m, b, ROLE_MTP_ENORM, l, &w->mtp.enorm, err) ||
            bind_weight(m, b, ROLE_MTP_HNORM, l, &w->mtp.hnorm, err) ||
            bind_weight(m, b, ROLE_MTP_HEAD_NORM, l, &w->mtp.head_norm, err))
            return -1;
    }
    return 0;
}

/* ---- derived parameters ---- */

/* RoPE tables and each layer's attention shape: every layer global with
 * scale head_dim^-1/2, the config's window and soft-cap, unless the family's
 * layer_attention says otherwise (gemma3's sliding layers, with their own
 * RoPE base; gemma4's two head sizes). A layer that shares another's K/V
 * (gemma4's last layers) reads that layer's KV index and has none of its
 * own. */
static void setup_layers(model *m)
{
    const model_config *c = &m->config;
    const model_family_desc *fam = family_desc(c->family);
    int half = (int)(c->head_dim / 2);
    rope_pairing pairing = (fam->gguf_rope_permuted && m->format == CKPT_GGUF)
                               ? ROPE_PAIR_ADJACENT
                               : ROPE_PAIR_NEOX;
    if (c->head_dim_full > 0) {
        /* gemma4's full layers: head_dim_full / 2 pairs, the first
         * rope_full_angles turning ("proportional"), the rest still */
        int half_full = (int)(c->head_dim_full / 2);
        int angles = c->rope_full_angles > 0 ? (int)c->rope_full_angles : half_full;
        m->inv_freq_global = xcalloc((size_t)half_full, sizeof(float));
        model_rope_inv_freq_partial((int)c->head_dim_full, angles, c->rope_theta,
                                    m->inv_freq_global);
        m->rope_global = (bk_rope){pairing, half_full, m->inv_freq_global, 1.0f};
    } else {
        m->inv_freq_global = xmalloc((size_t)half * sizeof(float));
        model_rope_inv_freq(c, c->rope_theta, 1, m->inv_freq_global,
                            &m->rope_global.attn_factor);
        m->rope_global = (bk_rope){pairing, half, m->inv_freq_global, m->rope_global.attn_factor};
        /* partial rotary: the table covers the dims that turn */
        m->rope_global.n_freqs = (int)(config_rope_dim(c) / 2);
    }
    /* The local layers' tables: their own base, never scaled (transformers
     * builds gemma3's local rotary embedding with rope_type "default"). */
    m->inv_freq_local = xmalloc((size_t)half * sizeof(float));
    double local_theta = fam->sliding_pattern ? c->rope_local_theta : c->rope_theta;
    model_rope_inv_freq(c, local_theta, 0, m->inv_freq_local, &m->rope_local.attn_factor);
    m->rope_local = (bk_rope){pairing, half, m->inv_freq_local, 1.0f};
    m->rope_local.n_freqs = (int)(config_rope_dim(c) / 2);

    float scale = (float)pow((double)c->head_dim, -0.5);
    /* an MTP block's layer (n_layers) is one more attention layer with a
     * KV layer of its own */
    int n_layers = (int)c->n_layers + m->mtp;
    m->attn = xcalloc((size_t)n_layers, sizeof *m->attn);
    m->rope = xcalloc((size_t)n_layers, sizeof *m->rope);
    m->delta = xcalloc((size_t)n_layers, sizeof *m->delta);
    int n_kv = 0;
    int64_t kv_dim = 0;
    size_t state_off = 0;
    for (int l = 0; l < n_layers; l++) {
        if (config_layer_recurrent(c, l)) {
            const layer_weights *w = &m->weights.layers[l];
            bk_delta *d = &m->delta[l];
            *d = (bk_delta){
                .state_off = state_off,
                .n_k_heads = (int)c->lin_n_k_heads,
                .n_v_heads = (int)c->lin_n_v_heads,
                .k_dim = (int)c->lin_k_dim,
                .v_dim = (int)c->lin_v_dim,
                .conv_k = (int)c->lin_conv_k,
                .tiled = m->format == CKPT_GGUF, /* llama.cpp's order (contract.h) */
                .conv = &w->ssm_conv,
                .dt_bias = &w->ssm_dt_bias,
                .a = &w->ssm_a,
                .a_is_log = m->format == CKPT_HF,
                .norm = &w->ssm_norm,
                .eps = (float)c->norm_eps,
            };
            state_off += bk_delta_state_floats(d->n_k_heads, d->n_v_heads, d->k_dim, d->v_dim,
                                               d->conv_k);
            continue;
        }
        bk_attn *a = &m->attn[l];
        int64_t src = config_layer_kv_source(c, l);
        MEMRA_ASSERT(m->target || (src >= 0 && src <= l)); /* config_validate */
        /* only attention layers keep K and V, and only those computing
         * them; an assistant's read the model's (assistant_layers) */
        a->layer = m->target ? -1 : src == l ? n_kv++ : m->attn[src].layer;
        a->n_heads = (int)c->n_heads;
        a->n_kv_heads = (int)c->n_kv_heads;
        a->head_dim = (int)c->head_dim;
        a->scale = scale;
        a->softcap = (float)c->attn_softcap;
        a->window = c->sliding_window; /* Mistral slides every layer */
        int local = 0;
        if (fam->layer_attention)
            fam->layer_attention(c, l, a, &local);
        m->rope[l] = local ? &m->rope_local : &m->rope_global;
        if ((int64_t)a->n_kv_heads * a->head_dim > kv_dim)
            kv_dim = (int64_t)a->n_kv_heads * a->head_dim;
    }
    m->n_kv_layers = n_kv;
    m->kv_dim = kv_dim;
    m->state_floats = state_off;
}

/* An assistant's layers read the model's K/V: each the K/V of the model's
 * last layer of its kind that computes any (what transformers passes as
 * shared_kv_states), through the same heads, over every position the
 * model has run on a full layer and the newest window + 1 on a sliding
 * one, with q turned one position past the newest key (transformers'
 * assistant drafts at the position of the token it embeds). */
static int assistant_layers(model *m, memra_err *err)
{
    const model *t = m->target;
    const model_config *c = &m->config, *tc = &t->config;
    for (int l = 0; l < c->n_layers; l++) {
        bk_attn *a = &m->attn[l];
        int full = config_layer_full(c, l);
        int64_t src = -1;
        for (int64_t j = tc->n_layers - 1; j >= 0 && src < 0; j--)
            if (!config_layer_recurrent(tc, j) && config_layer_kv_source(tc, j) == j &&
                config_layer_full(tc, j) == full)
                src = j;
        if (src < 0)
            return memra_fail(err, "assistant: layer %d attends over the model's %s layers, "
                              "and the model has none", l, full ? "full" : "sliding");
        const bk_attn *ta = &t->attn[src];
        if (a->head_dim != ta->head_dim || a->n_kv_heads != ta->n_kv_heads)
            return memra_fail(err, "assistant: layer %d has %d KV heads of %d, the model's "
                              "layer %" PRId64 " it reads %d of %d", l, a->n_kv_heads,
                              a->head_dim, src, ta->n_kv_heads, ta->head_dim);
        a->layer = ta->layer;
        a->window = a->window > 0 ? a->window + 1 : 0;
        a->q_ahead = 1;
    }
    return 0;
}

/* The V norm's weights of ones (v_norm families): one per head size. */
static int setup_v_norm(model *m, memra_err *err)
{
    const model_config *c = &m->config;
    int64_t hd[2] = {c->head_dim, c->head_dim_full > 0 ? c->head_dim_full : c->head_dim};
    int64_t most = hd[0] > hd[1] ? hd[0] : hd[1];
    m->ones = xmalloc((size_t)most * sizeof(float));
    for (int64_t i = 0; i < most; i++)
        m->ones[i] = 1.0f;
    for (int i = 0; i < 2; i++) {
        bk_weight *w = &m->v_norm_w[i];
        *w = (bk_weight){.name = i ? "v_norm (full layers)" : "v_norm", .type = DT_F32,
                         .rows = 1, .cols = hd[i], .row_bytes = (size_t)hd[i] * sizeof(float),
                         .data = (const uint8_t *)m->ones};
        if (m->bk->ops->weight_prepare(m->bk, w, err) != 0)
            return -1;
    }
    return 0;
}

/* The activations of one step of cap rows on m->bk; with_head: the
 * logits too (the last stage's). */
/* Each pipeline stage keeps its own layers' part of the cache only: the
 * KV indices of its attention layers and the state offsets of its
 * recurrent ones, both given in layer order, are one run each
 * (backend_ops.cache_window). */
static void cache_windows(model *m)
{
    for (int s = 0; s < m->n_stages; s++) {
        bk_cache_window w = {0};
        int kv_any = 0, state_any = 0;
        for (int l = m->stage_first[s]; l < m->stage_first[s + 1]; l++) {
            if (config_layer_recurrent(&m->config, l)) {
                const bk_delta *d = &m->delta[l];
                size_t end = d->state_off + bk_delta_state_floats(d->n_k_heads, d->n_v_heads,
                                                                  d->k_dim, d->v_dim, d->conv_k);
                if (!state_any++)
                    w.state_lo = d->state_off;
                w.state_n = end - w.state_lo;
                continue;
            }
            if (!kv_any++)
                w.kv_lo = m->attn[l].layer;
            w.kv_n = m->attn[l].layer + 1 - w.kv_lo;
        }
        backend *sb = backend_stage(m->pipe, s);
        if (sb->ops->cache_window)
            sb->ops->cache_window(sb, &w);
    }
}

static void alloc_state(model *m, int cap, int with_head)
{
    const model_config *c = &m->config;
    backend *bk = m->bk;
    run_state *s = &m->state;
    size_t n = (size_t)cap, qd = 0, kvd = (size_t)m->kv_dim, ffn = 0;
    for (int64_t l = 0; l < c->n_layers; l++) {
        size_t lq = (size_t)(c->n_heads * config_layer_head_dim(c, l));
        size_t lf = (size_t)config_layer_ffn_dim(c, l);
        qd = lq > qd ? lq : qd;
        ffn = lf > ffn ? lf : ffn;
    }
    if ((size_t)c->moe_ffn_dim > ffn)
        ffn = (size_t)c->moe_ffn_dim;
    if ((size_t)c->shared_ffn_dim > ffn)
        ffn = (size_t)c->shared_ffn_dim;
    s->cap = cap;
    s->x = bk->ops->act_alloc(bk, n * (size_t)c->dim);
    s->xb = bk->ops->act_alloc(bk, n * (size_t)c->dim);
    s->xb2 = bk->ops->act_alloc(bk, n * (size_t)c->dim);
    s->q = bk->ops->act_alloc(bk, n * qd);
    s->k = bk->ops->act_alloc(bk, n * (kvd ? kvd : 1));
    s->v = bk->ops->act_alloc(bk, n * (kvd ? kvd : 1));
    s->att = bk->ops->act_alloc(bk, n * qd);
    s->hb = bk->ops->act_alloc(bk, n * ffn);
    s->hb2 = bk->ops->act_alloc(bk, n * ffn);
    s->logits = with_head ? bk->ops->act_alloc(bk, n * (size_t)c->n_vocab) : NULL;
    s->host_hidden = xmalloc(n * (size_t)c->dim * sizeof(float));
    if (c->attn_out_gate) {
        s->qg = bk->ops->act_alloc(bk, n * 2 * qd);
        s->gate = bk->ops->act_alloc(bk, n * qd);
    }
    if (c->shared_ffn_dim) {
        s->shared = bk->ops->act_alloc(bk, n * (size_t)c->dim);
        s->shared_gate = bk->ops->act_alloc(bk, n);
    }
    if (m->mtp) {
        s->mtp_cat = bk->ops->act_alloc(bk, n * 2 * (size_t)c->dim);
        s->h_in = bk->ops->act_alloc(bk, n * (size_t)c->dim);
    }
    if (m->target) {
        size_t bd = (size_t)c->backbone_dim;
        s->mtp_cat = bk->ops->act_alloc(bk, n * 2 * bd);
        s->assist_e = bk->ops->act_alloc(bk, n * bd);
        s->h_in = bk->ops->act_alloc(bk, n * bd);
    }
    if (c->moe_with_dense) {
        s->moe_router_in = bk->ops->act_alloc(bk, n * (size_t)c->dim);
        s->moe_out = bk->ops->act_alloc(bk, n * (size_t)c->dim);
    }
    if (c->ple_dim > 0) {
        size_t lp = (size_t)(c->n_layers * c->ple_dim);
        s->ple = bk->ops->act_alloc(bk, n * lp);
        s->ple_mix = bk->ops->act_alloc(bk, n * lp);
        s->ple_gate = bk->ops->act_alloc(bk, n * (size_t)c->ple_dim);
    }
    if (m->tp > 1) {
        s->tp_in = bk->ops->act_alloc(bk, n * (size_t)c->dim);
        s->tp_part = bk->ops->act_alloc(bk, n * (size_t)c->dim);
    }
    if (m->state_floats) {
        size_t vd = (size_t)(c->lin_n_v_heads * c->lin_v_dim);
        s->lin_qkv = bk->ops->act_alloc(bk, n * (2 * (size_t)(c->lin_n_k_heads * c->lin_k_dim) + vd));
        s->lin_z = bk->ops->act_alloc(bk, n * vd);
        s->lin_o = bk->ops->act_alloc(bk, n * vd);
        s->lin_b = bk->ops->act_alloc(bk, n * (size_t)c->lin_n_v_heads);
        s->lin_a = bk->ops->act_alloc(bk, n * (size_t)c->lin_n_v_heads);
    }
}

int model_init(model *m, const model_config *c, const contract_binding *b,
               checkpoint_format format, backend *bk, const model_opts *o, memra_err *err)
{
    memset(m, 0, sizeof *m);
    m->config = *c;
    m->bk = bk;
    m->pipe = bk;
    m->tp = o->tp > 1 ? o->tp : 1;
    m->n_stages = m->tp > 1 ? 1 : backend_n_stages(bk);
    m->format = format;
    if (o->cap <= 0)
        return memra_fail(err, "model: step size %d must be positive", o->cap);
    if (m->tp > 1) {
        if (backend_n_stages(bk) != m->tp)
            return memra_fail(err, "model: %d tensor-parallel ranks on a backend of %d",
                              m->tp, backend_n_stages(bk));
        if (o->target || config_is_assistant(c) || o->mtp)
            return memra_fail(err, "model: %s runs on one device, not over %d tensor-parallel "
                              "ranks", o->mtp ? "the MTP block" : "an assistant", m->tp);
        if (tp_check(c, m->tp, o->kv_type, err) != 0)
            return -1;
    }
    if (m->n_stages > 1) {
        if (o->target || config_is_assistant(c))
            return memra_fail(err, "model: an assistant drafts on one device, not on a pipeline "
                              "of %d stages", m->n_stages);
        if (o->mtp)
            return memra_fail(err, "model: the MTP block does not run on a pipeline of %d stages "
                              "(load it on one device)", m->n_stages);
        if (c->ple_dim > 0 || c->n_kv_shared > 0)
            return memra_fail(err, "model: a %s model's per-layer inputs and shared K/V reach "
                              "across its layers: it runs on one device, not on a pipeline of %d "
                              "stages", family_desc(c->family)->name, m->n_stages);
        if (c->n_layers < m->n_stages)
            return memra_fail(err, "model: %" PRId64 " layers cannot fill a pipeline of %d stages",
                              c->n_layers, m->n_stages);
    }
    /* the layers split evenly, the later stages taking one more where
     * they do not divide */
    for (int st = 0; st <= m->n_stages; st++)
        m->stage_first[st] = (int)((int64_t)st * c->n_layers / m->n_stages);
    m->layer_begin = 0;
    m->layer_end = m->n_stages > 1 ? m->stage_first[1] : (int)c->n_layers;
    if (c->n_kv_heads <= 0 || c->n_heads % c->n_kv_heads != 0)
        return memra_fail(err, "model: %" PRId64 " heads are not a multiple of %" PRId64
                          " KV heads", c->n_heads, c->n_kv_heads);
    const model_family_desc *fam = family_desc(c->family);
    if (!fam || !fam->forward)
        return memra_fail(err, "model: family %d has no forward pass", (int)c->family);
    m->forward_layers = fam->forward;
    if (config_is_assistant(c) != (o->target != NULL))
        return memra_fail(err, o->target ? "model: the drafter's checkpoint is a %s model, not "
                                           "an assistant (gemma4_assistant)"
                                         : "model: a %s assistant checkpoint drafts for another "
                                           "model: load it as its drafter (--draft)",
                          fam->name);
    if (o->target) {
        const model_config *tc = &o->target->config;
        if (tc->family != c->family || config_is_assistant(tc) || tc->dim != c->backbone_dim ||
            tc->n_vocab != c->n_vocab)
            return memra_fail(err, "model: the assistant drafts for a %s model of hidden size "
                              "%" PRId64 " and %" PRId64 " tokens; this model is %s, %" PRId64
                              " and %" PRId64, fam->name, c->backbone_dim, c->n_vocab,
                              family_desc(tc->family)->name, tc->dim, tc->n_vocab);
        if (o->target->bk != bk)
            return memra_fail(err, "model: the assistant must run on its model's backend");
        if (!fam->layer || !bk->ops->act_write || !bk->ops->join_heads)
            return memra_fail(err, "model: the %s family cannot run an assistant on the %s "
                              "backend", fam->name, bk->name);
        m->target = o->target;
    }
    if (o->mtp) {
        if (!b->has_mtp)
            return memra_fail(err, "model: the checkpoint carries no MTP block (its config has "
                              "%" PRId64 " MTP layers)", c->mtp_layers);
        if (!fam->layer || !bk->ops->act_write || !bk->ops->join_heads)
            return memra_fail(err, "model: the %s family cannot run its MTP block on the %s "
                              "backend", fam->name, bk->name);
        m->mtp = 1;
    }
    if (bind_weights(m, b, err) != 0) {
        model_free(m);
        return -1;
    }
    contract_bytes cb;
    contract_bytes_of(b, c, &cb);
    m->bytes_per_token = cb.per_token;
    m->norm_offset = (fam->norm_adds_one && format == CKPT_HF) ? 1.0f : 0.0f;
    /* transformers multiplies by sqrt(hidden_size) cast to the compute
     * dtype; we compute in f32, as the reference does when run in f32. */
    m->embed_scale = fam->embed_scale_sqrt_dim ? (float)sqrt((double)c->dim) : 1.0f;
    m->norm_eps = (float)c->norm_eps;
    m->act = fam->act;
    setup_layers(m);
    if (m->tp > 1)
        tp_rank_shapes(m);
    if ((m->target && assistant_layers(m, err) != 0) ||
        (fam->v_norm && setup_v_norm(m, err) != 0)) {
        model_free(m);
        return -1;
    }
    if (m->target) { /* no K/V of its own */
        alloc_state(m, o->cap, 1);
        return 0;
    }
    if (m->n_stages > 1)
        cache_windows(m);
    if (m->tp > 1)
        tp_cache_windows(m);
    /* q8_0 K/V is stored in blocks of 32: every layer's row must be whole
     * blocks, not only the widest */
    for (int l = 0; l < c->n_layers && o->kv_type == KV_Q8_0; l++) {
        int64_t width = (int64_t)m->attn[l].n_kv_heads * m->attn[l].head_dim;
        if (!config_layer_recurrent(c, l) && width % KV_Q8_0_BLOCK != 0) {
            model_free(m);
            return memra_fail(err, "model: a q8_0 KV cache needs each layer's K/V width to be a "
                              "multiple of %d; layer %d has %" PRId64 " (use f16 or bf16)",
                              KV_Q8_0_BLOCK, l, width);
        }
    }
    /* A backend that keeps K and V itself (kv_prepare) gets the block
     * tables only: no host storage, not even untouched address space. */
    int (*kv_init)(kv_cache *, kv_type, int, int64_t, int, int, memra_err *) =
        bk->ops->kv_prepare ? kv_cache_init_tables : kv_cache_init;
    if (kv_init(&m->state.kv, o->kv_type, m->n_kv_layers, m->kv_dim,
                o->kv_block_size, o->kv_blocks, err) != 0 ||
        (m->state_floats &&
         kv_cache_enable_state(&m->state.kv, o->state_slots > 0 ? o->state_slots : 1,
                               m->state_floats, !bk->ops->kv_prepare, err) != 0)) {
        model_free(m);
        return -1;
    }
    /* (the kind of backend a stage of this process runs: a stage in
     * another process runs no op here) */
    backend *runs = bk;
    for (int s = backend_n_stages(bk) - 1; s >= 0; s--)
        if (backend_stage_local(bk, s))
            runs = backend_stage(bk, s);
    if (m->state_floats && !runs->ops->delta_net) {
        memra_fail(err, "model: the %s backend has no gated DeltaNet op (the %s family's "
                   "recurrent layers)", runs->name, fam->name);
        model_free(m);
        return -1;
    }
    if (m->tp > 1) {
        m->rank_state = xcalloc((size_t)m->tp, sizeof *m->rank_state);
        for (int r = 0; r < m->tp; r++) {
            m->bk = backend_stage(bk, r);
            backend_bind(m->bk);
            alloc_state(m, o->cap, r == m->tp - 1);
            memcpy(&m->rank_state[r], &m->state, offsetof(run_state, kv));
            if (backend_stage_local(bk, r))
                m->remote_logits = m->state.x;
        }
        if (backend_stage_local(bk, m->tp - 1))
            m->remote_logits = NULL;
        tp_use_rank(m, m->tp - 1);
        return 0;
    }
    if (m->n_stages == 1) {
        alloc_state(m, o->cap, 1);
        return 0;
    }
    m->stage_state = xcalloc((size_t)m->n_stages, sizeof *m->stage_state);
    for (int s = 0; s < m->n_stages; s++) {
        m->bk = backend_stage(bk, s);
        backend_bind(m->bk);
        alloc_state(m, o->cap, s == m->n_stages - 1);
        memcpy(&m->stage_state[s], &m->state, offsetof(run_state, kv));
        if (backend_stage_local(bk, s))
            m->remote_logits = m->state.x;
    }
    if (backend_stage_local(bk, m->n_stages - 1))
        m->remote_logits = NULL;
    m->stage_now = -1;
    use_stage(m, m->n_stages - 1);
    return 0;
}

static void free_acts(backend *bk, run_state *s)
{
    if (s->x) {
        float *acts[] = {s->x,  s->xb,     s->xb2,   s->q,     s->k,     s->v,
                         s->att, s->hb,    s->hb2,   s->logits, s->qg,   s->gate,
                         s->lin_qkv, s->lin_z, s->lin_o, s->lin_b, s->lin_a,
                         s->shared, s->shared_gate, s->ple, s->ple_mix, s->ple_gate,
                         s->moe_router_in, s->moe_out, s->mtp_cat, s->assist_e, s->h_in,
                         s->tp_in, s->tp_part};
        for (size_t i = 0; i < MEMRA_ARRAY_LEN(acts); i++)
            if (acts[i])
                bk->ops->act_free(bk, acts[i]);
    }
    free(s->host_hidden);
}

void model_free(model *m)
{
    if (m->rank_state) {
        for (int r = 0; r < m->tp; r++) {
            backend *rb = backend_stage(m->pipe, r);
            backend_bind(rb);
            free_acts(rb, &m->rank_state[r]);
        }
        free(m->rank_state);
        memset(&m->state, 0, offsetof(run_state, kv));
    } else if (m->stage_state) {
        for (int s = 0; s < m->n_stages; s++) {
            backend *sb = backend_stage(m->pipe, s);
            backend_bind(sb);
            free_acts(sb, &m->stage_state[s]);
        }
        free(m->stage_state);
        memset(&m->state, 0, offsetof(run_state, kv));
    } else if (m->bk) {
        free_acts(m->bk, &m->state);
    }
    run_state *s = &m->state;
    kv_cache_free(&s->kv);
    if (m->tp > 1)
        tp_free(m);
    if (m->weights.layers) {
        for (int l = 0; l < m->config.n_layers + m->mtp; l++) {
            free(m->weights.layers[l].moe_gate);
            free(m->weights.layers[l].moe_up);
            free(m->weights.layers[l].moe_down);
        }
        free(m->weights.layers);
    }
    free(m->attn);
    free(m->delta);
    free(m->rope);
    free(m->inv_freq_global);
    free(m->inv_freq_local);
    free(m->ones);
    memset(m, 0, sizeof *m);
}

/* ---- shared pieces of the forward passes ---- */

void model_report_hidden(model *m, int index, const bk_batch *rows, const float *x)
{
    if (!m->hidden_fn || index < m->hidden_from)
        return;
    int64_t dim = m->config.dim;
    m->bk->ops->act_read(m->bk, x, m->state.host_hidden, (size_t)rows->n * (size_t)dim);
    m->hidden_fn(m->hidden_ctx, index, rows, dim, m->state.host_hidden);
}

/* The attention sublayer on the current rank's heads (all of them
 * without tensor parallel). */
static void attention_share(model *m, int l, const bk_batch *rows, int n_rows, const float *in,
                            float *out)
{
    (void)n_rows;
    const backend_ops *op = m->bk->ops;
    const layer_weights *w = &m->weights.layers[l];
    run_state *s = &m->state;
    const bk_attn *a = &m->attn[l];
    const model_config *c = &m->config;
    int gated = c->attn_out_gate, n = rows->n;
    /* A layer sharing another's K/V (gemma4) projects q alone and attends
     * over the K/V its source layer stored earlier in this step. */
    int own_kv = config_layer_kv_source(c, l) == l;
    int k_is_v = c->attn_k_eq_v && config_layer_full(c, l);
    float *k = own_kv ? s->k : NULL, *v = own_kv ? s->v : NULL;
    if (!own_kv) {
        op->matmul(m->bk, &w->wq, &w->bq, in, n, gated ? s->qg : s->q);
    } else if (k_is_v) {
        /* gemma4's k_eq_v layers: V is the K projection before k_norm */
        op->matmul(m->bk, &w->wq, &w->bq, in, n, s->q);
        op->matmul(m->bk, &w->wk, &w->bk, in, n, s->k);
    } else {
        op->attn_qkv(m->bk, &w->wq, &w->wk, &w->wv, &w->bq, &w->bk, &w->bv, in, n,
                     gated ? s->qg : s->q, s->k, s->v);
    }
    if (gated)
        op->split_heads(m->bk, s->qg, n, a->n_heads, a->head_dim, a->head_dim, s->q, s->gate);
    if (own_kv && m->ones) {
        /* V RMS-normed per head without a weight (v_norm families) */
        const bk_weight *vw = &m->v_norm_w[a->head_dim == m->v_norm_w[0].cols ? 0 : 1];
        op->rmsnorm(m->bk, k_is_v ? s->k : s->v, n * a->n_kv_heads, vw, 0.0f, m->norm_eps,
                    s->v);
    }
    op->qk_norm_rope(m->bk, s->q, k, rows, a, &w->q_norm, &w->k_norm, m->norm_offset,
                     m->norm_eps, m->rope[l]);
    op->attention(m->bk, a, rows, s->q, k, v, s->att);
    if (gated) {
        int64_t qd = (int64_t)a->n_heads * a->head_dim;
        op->mul_sigmoid(m->bk, s->att, s->gate, n, qd, qd);
    }
    op->matmul(m->bk, &w->wo, &w->bo, s->att, n, out);
}

void model_sublayer(model *m, model_share_fn f, int l, const bk_batch *rows, int n,
                    const float *in, float *out)
{
    if (m->tp > 1 && !m->tp_inside)
        tp_sublayer(m, f, l, rows, n, in, out);
    else
        f(m, l, rows, n, in, out);
}

void model_attention(model *m, int l, const bk_batch *rows, const float *in, float *out)
{
    model_sublayer(m, attention_share, l, rows, rows->n, in, out);
}

static void ffn_share(model *m, int l, const bk_batch *rows, int n, const float *in, float *out)
{
    (void)rows;
    const layer_weights *w = &m->weights.layers[l];
    m->bk->ops->ffn_glu(m->bk, &w->ffn_gate, &w->ffn_up, &w->ffn_down, m->act, in, n,
                        m->state.hb, m->state.hb2, out);
}

void model_ffn(model *m, int l, int n, const float *in, float *out)
{
    model_sublayer(m, ffn_share, l, NULL, n, in, out);
}

/* Layer l's routed experts on the current rank's columns of each (all of
 * them without tensor parallel). */
static void moe_routed(model *m, int l, int n, const float *in, const float *router_in,
                       float *out)
{
    const layer_weights *w = &m->weights.layers[l];
    const model_config *c = &m->config;
    bk_moe moe = {
        .router = &w->moe_router,
        .gate = w->moe_gate,
        .up = w->moe_up,
        .down = w->moe_down,
        .n_experts = (int)c->n_experts,
        .n_used = (int)c->n_experts_used,
        .norm_topk = c->norm_topk_prob,
        .act = m->act,
        .router_x = router_in,
        .expert_scale = bk_weight_present(&w->moe_expert_scale) ? &w->moe_expert_scale : NULL,
    };
    m->bk->ops->ffn_moe(m->bk, &moe, in, n, out);
}

/* A rank's share: every rank routes the rows the same way (the router is
 * whole on each). */
static void moe_share(model *m, int l, const bk_batch *rows, int n, const float *in, float *out)
{
    (void)rows;
    moe_routed(m, l, n, in, NULL, out);
}

void model_moe_ffn_routed(model *m, int l, int n, const float *in, const float *router_in,
                          float *out)
{
    if (m->tp > 1) {
        MEMRA_ASSERT(!router_in); /* no family that routes on its own input splits */
        model_sublayer(m, moe_share, l, NULL, n, in, out);
    } else {
        moe_routed(m, l, n, in, router_in, out);
    }
}

void model_moe_ffn(model *m, int l, int n, const float *in, float *out)
{
    model_moe_ffn_routed(m, l, n, in, NULL, out);
}

/* The gated DeltaNet sublayer on the current rank's key and value heads
 * (all of them without tensor parallel). */
static void delta_share(model *m, int l, const bk_batch *rows, int n_rows, const float *in,
                        float *out)
{
    (void)n_rows;
    const backend_ops *op = m->bk->ops;
    const layer_weights *w = &m->weights.layers[l];
    run_state *s = &m->state;
    int n = rows->n;
    op->delta_in_proj(m->bk, &w->ssm_qkv, &w->ssm_z, &w->ssm_beta, &w->ssm_alpha, in, n,
                      s->lin_qkv, s->lin_z, s->lin_b, s->lin_a);
    op->delta_net(m->bk, &m->delta[l], rows, s->lin_qkv, s->lin_z, s->lin_b, s->lin_a, s->lin_o);
    op->matmul(m->bk, &w->ssm_out, NULL, s->lin_o, n, out);
}

void model_delta_net(model *m, int l, const bk_batch *rows, const float *in, float *out)
{
    model_sublayer(m, delta_share, l, rows, rows->n, in, out);
}

float *model_forward_logits(model *m, const bk_batch *rows, const int32_t *tokens, int logits_from)
{
    const backend_ops *op = m->bk->ops;
    run_state *s = &m->state;
    const model_config *c = &m->config;
    int n = rows->n;
    MEMRA_ASSERT(n > 0 && n <= s->cap);
    if (m->tp > 1) /* the step starts on the leader, whoever was bound */
        backend_bind(m->bk);
    for (int st = 0; st < m->n_stages; st++) {
        if (m->stage_state) {
            backend *prev = m->bk;
            const float *px = m->state.x;
            use_stage(m, st);
            if (st > 0) /* the residual stream into this stage */
                backend_act_move(m->bk, m->state.x, prev, px, (size_t)n * (size_t)c->dim);
        }
        /* (a stage another process runs is skipped here; tensor-parallel
         * ranks all run the forward pass: tp_sublayer keeps to this one's) */
        if (!m->stage_state || backend_stage_local(m->pipe, st))
            m->forward_layers(m, rows, tokens);
    }
    if (m->remote_logits) {
        /* The head runs in the last stage's (the leader's) process; the
         * pipeline's act_read and sample bring what it gives. */
        return logits_from >= n ? NULL : m->remote_logits;
    }
    op = m->bk->ops; /* the last stage's, which runs the head */
    op->rmsnorm(m->bk, s->x, n, &m->weights.output_norm, m->norm_offset, m->norm_eps, s->xb);
    model_report_hidden(m, (int)c->n_layers, rows, s->xb);
    if (m->keep_hidden)
        op->act_read(m->bk, s->xb, s->host_hidden, (size_t)n * (size_t)c->dim);
    if (logits_from >= n)
        return NULL;
    int nl = n - logits_from;
    size_t vocab = (size_t)c->n_vocab;
    const float *last = s->xb + (size_t)logits_from * (size_t)c->dim;
    if (m->head) {
        /* a trimmed head: its rows' logits, spread over the vocabulary */
        const model_head *h = m->head;
        op->matmul(m->bk, &h->w, NULL, last, nl, h->logits);
        if (c->final_softcap > 0)
            op->softcap(m->bk, h->logits, (size_t)nl * (size_t)h->n, (float)c->final_softcap);
        op->gather_cols(m->bk, h->logits, nl, h->n, h->map, (int64_t)vocab, -INFINITY,
                        s->logits);
        return s->logits;
    }
    op->matmul(m->bk, &m->weights.output, NULL, last, nl, s->logits);
    if (c->final_softcap > 0)
        op->softcap(m->bk, s->logits, (size_t)nl * vocab, (float)c->final_softcap);
    return s->logits;
}

/* The block's layer on its rows, into state.x: it reads [enorm(embed(next))
 * | hnorm(h)], the two halves normed on the backend, then put side by side
 * (join_heads, one head); h NULL: already in state.h_in. */
static void mtp_layer(model *m, const bk_batch *rows, const int32_t *next, const float *h)
{
    const backend_ops *op = m->bk->ops;
    run_state *s = &m->state;
    const model_config *c = &m->config;
    const mtp_weights *w = &m->weights.mtp;
    int n = rows->n;
    size_t dim = (size_t)c->dim;
    MEMRA_ASSERT(m->mtp && n > 0 && n <= s->cap);
    /* the hidden-state hooks see the model's steps, not the block's */
    model_hidden_fn hook = m->hidden_fn;
    m->hidden_fn = NULL;
    op->embed(m->bk, &m->weights.embed, next, n, m->embed_scale, s->x);
    op->rmsnorm(m->bk, s->x, n, &w->enorm, m->norm_offset, m->norm_eps, s->xb);
    if (h)
        op->act_write(m->bk, s->h_in, h, (size_t)n * dim);
    op->rmsnorm(m->bk, s->h_in, n, &w->hnorm, m->norm_offset, m->norm_eps, s->x);
    op->join_heads(m->bk, s->xb, s->x, n, 1, (int)dim, (int)dim, s->mtp_cat);
    op->matmul(m->bk, &w->eh_proj, NULL, s->mtp_cat, n, s->x);
    family_desc(c->family)->layer(m, (int)c->n_layers, rows);
    m->hidden_fn = hook;
}

float *model_forward_mtp_logits(model *m, const bk_batch *rows, const int32_t *next,
                                const float *h, float *h_out)
{
    const backend_ops *op = m->bk->ops;
    run_state *s = &m->state;
    const model_config *c = &m->config;
    int n = rows->n;
    mtp_layer(m, rows, next, h);
    op->rmsnorm(m->bk, s->x, n, &m->weights.mtp.head_norm, m->norm_offset, m->norm_eps, s->xb);
    if (h_out)
        op->act_read(m->bk, s->xb, h_out, (size_t)n * (size_t)c->dim);
    op->matmul(m->bk, &m->weights.output, NULL, s->xb, n, s->logits);
    if (c->final_softcap > 0)
        op->softcap(m->bk, s->logits, (size_t)n * (size_t)c->n_vocab, (float)c->final_softcap);
    return s->logits;
}

void model_forward_mtp(model *m, const bk_batch *rows, const int32_t *next, const float *h,
                       int logits_from, float *logits, float *h_out)
{
    const backend_ops *op = m->bk->ops;
    run_state *s = &m->state;
    const model_config *c = &m->config;
    int n = rows->n;
    if (logits && logits_from < n) {
        float *dev = model_forward_mtp_logits(m, rows, next, h, h_out);
        op->act_read(m->bk, dev + (size_t)logits_from * (size_t)c->n_vocab, logits,
                     (size_t)(n - logits_from) * (size_t)c->n_vocab);
        return;
    }
    mtp_layer(m, rows, next, h); /* the rows following the model: no head */
    if (h_out) {
        op->rmsnorm(m->bk, s->x, n, &m->weights.mtp.head_norm, m->norm_offset, m->norm_eps,
                    s->xb);
        op->act_read(m->bk, s->xb, h_out, (size_t)n * (size_t)c->dim);
    }
}

void model_mtp_input(model *m, const float *h, int n)
{
    MEMRA_ASSERT(m->mtp && n > 0 && n <= m->state.cap);
    m->bk->ops->act_write(m->bk, m->state.h_in, h, (size_t)n * (size_t)m->config.dim);
}

/* As transformers' Gemma4AssistantForCausalLM: u = pre_projection([the
 * model's scaled embedding of next | h]) (no scale of its own), the
 * family's layers over u (layer(), which reads the model's K/V here),
 * the final norm, the tied head (no soft-cap: transformers applies none
 * to the assistant), and post_projection of the normed output as the
 * next hidden state. */
float *model_forward_assistant_logits(model *m, const bk_batch *rows, const int32_t *next,
                                      const float *h, float *h_out)
{
    const backend_ops *op = m->bk->ops;
    run_state *s = &m->state;
    const model_config *c = &m->config;
    const model *t = m->target;
    int n = rows->n;
    size_t bd = (size_t)c->backbone_dim;
    MEMRA_ASSERT(t && n > 0 && n <= s->cap);
    op->embed(m->bk, &t->weights.embed, next, n, t->embed_scale, s->assist_e);
    if (h)
        op->act_write(m->bk, s->h_in, h, (size_t)n * bd);
    op->join_heads(m->bk, s->assist_e, s->h_in, n, 1, (int)bd, (int)bd, s->mtp_cat);
    op->matmul(m->bk, &m->weights.assist_pre, NULL, s->mtp_cat, n, s->x);
    const model_family_desc *fam = family_desc(c->family);
    for (int l = 0; l < c->n_layers; l++)
        fam->layer(m, l, rows);
    op->rmsnorm(m->bk, s->x, n, &m->weights.output_norm, m->norm_offset, m->norm_eps, s->xb);
    if (h_out) {
        op->matmul(m->bk, &m->weights.assist_post, NULL, s->xb, n, s->h_in);
        op->act_read(m->bk, s->h_in, h_out, (size_t)n * bd);
    }
    op->matmul(m->bk, &m->weights.output, NULL, s->xb, n, s->logits);
    return s->logits;
}

void model_forward_assistant(model *m, const bk_batch *rows, const int32_t *next,
                             const float *h, int logits_from, float *logits, float *h_out)
{
    float *dev = model_forward_assistant_logits(m, rows, next, h, h_out);
    int n = rows->n;
    if (logits && logits_from < n)
        m->bk->ops->act_read(m->bk, dev + (size_t)logits_from * (size_t)m->config.n_vocab, logits,
                             (size_t)(n - logits_from) * (size_t)m->config.n_vocab);
}

void model_assistant_input(model *m, const float *h, int n)
{
    MEMRA_ASSERT(m->target && n > 0 && n <= m->state.cap);
    m->bk->ops->act_write(m->bk, m->state.h_in, h, (size_t)n * (size_t)m->config.backbone_dim);
}

void model_forward(model *m, const bk_batch *rows, const int32_t *tokens, int logits_from,
                   float *logits)
{
    float *dev = model_forward_logits(m, rows, tokens, logits ? logits_from : rows->n);
    /* a pipeline's logits through it: on its last stage, or brought from
     * that stage's process */
    backend *rb = m->n_stages > 1 ? m->pipe : m->bk;
    if (dev)
        rb->ops->act_read(rb, dev, logits,
                          (size_t)(rows->n - logits_from) * (size_t)m->config.n_vocab);
}
