/* The forward pass of the llama family, shared by qwen2 and qwen3, which
 * differ from it only inside the attention sublayer (model_attention
 * applies the QKV bias when the checkpoint has one, and the per-head
 * QK-norm when it has q_norm / k_norm):
 *
 *   x = embed(tokens)
 *   per layer:  x += attn(rmsnorm(x))
 *               x += down(silu(gate(h)) * up(h)),  h = rmsnorm(x)
 *
 * as transformers' LlamaDecoderLayer / Qwen2DecoderLayer / Qwen3DecoderLayer. */
#include "model/model.h"

void llama_forward(model *m, const bk_batch *rows, const int32_t *tokens)
{
    const backend_ops *op = m->bk->ops;
    run_state *s = &m->state;
    int n = rows->n;
    size_t nd = (size_t)n * (size_t)m->config.dim;
    op->embed(m->bk, &m->weights.embed, tokens, n, m->embed_scale, s->x);
    for (int l = 0; l < m->config.n_layers; l++) {
        const layer_weights *w = &m->weights.layers[l];
        model_report_hidden(m, l, rows, s->x);
        op->rmsnorm(m->bk, s->x, n, &w->attn_norm, m->norm_offset, m->norm_eps, s->xb);
        model_attention(m, l, rows, s->xb, s->xb2);
        op->add(m->bk, s->x, s->xb2, nd);
        op->rmsnorm(m->bk, s->x, n, &w->ffn_norm, m->norm_offset, m->norm_eps, s->xb);
        op->ffn_glu(m->bk, &w->ffn_gate, &w->ffn_up, &w->ffn_down, m->act, s->xb, n, s->hb,
                    s->hb2, s->xb2);
        op->add(m->bk, s->x, s->xb2, nd);
    }
}
