/* The forward pass of gemma3 (gemma3_text), as transformers'
 * Gemma3TextModel / Gemma3DecoderLayer:
 *
 *   x = embed(tokens) * sqrt(dim)
 *   per layer:  x += post_attn_norm(attn(input_norm(x)))
 *               x += post_ffn_norm(down(gelu_tanh(gate(h)) * up(h))),  h = pre_ffn_norm(x)
 *
 * Every norm is x * (1 + w) (model.norm_offset bridges HF's w and GGUF's
 * w + 1). Attention has per-head QK-norm, scale query_pre_attn_scalar^-0.5,
 * and on the local layers a sliding window and their own RoPE base; those
 * are per-layer attention parameters fixed at load (model.c), which also
 * explains why attn_logit_softcapping is not applied. The final logit
 * soft-cap is applied by model_forward. */
#include "model/model.h"

void gemma3_forward(model *m, const bk_batch *rows, const int32_t *tokens)
{
    const backend_ops *op = m->bk->ops;
    run_state *s = &m->state;
    int n = rows->n;
    size_t nd = (size_t)n * (size_t)m->config.dim;
    float off = m->norm_offset, eps = m->norm_eps;
    op->embed(m->bk, &m->weights.embed, tokens, n, m->embed_scale, s->x);
    for (int l = 0; l < m->config.n_layers; l++) {
        const layer_weights *w = &m->weights.layers[l];
        model_report_hidden(m, l, rows, s->x);
        op->rmsnorm(m->bk, s->x, n, &w->attn_norm, off, eps, s->xb);
        model_attention(m, l, rows, s->xb, s->xb2);
        op->rmsnorm(m->bk, s->xb2, n, &w->attn_post_norm, off, eps, s->xb);
        op->add(m->bk, s->x, s->xb, nd);
        op->rmsnorm(m->bk, s->x, n, &w->ffn_norm, off, eps, s->xb);
        op->ffn_glu(m->bk, &w->ffn_gate, &w->ffn_up, &w->ffn_down, m->act, s->xb, n, s->hb,
                    s->hb2, s->xb2);
        op->rmsnorm(m->bk, s->xb2, n, &w->ffn_post_norm, off, eps, s->xb);
        op->add(m->bk, s->x, s->xb, nd);
    }
}
