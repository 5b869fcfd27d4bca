/* The forward pass of qwen3_moe: qwen3's attention (QK-norm) and, in every
 * layer, a routed mixture of SwiGLU experts in place of the dense FFN
 * (transformers' Qwen3MoeDecoderLayer with Qwen3MoeSparseMoeBlock):
 *
 *   per layer:  x += attn(rmsnorm(x))
 *               x += sum_k w_k * expert_k(h),  h = rmsnorm(x)
 *
 * Routing (softmax, top-k, renormalization) is the backend's ffn_moe. */
#include "model/model.h"

void qwen3_moe_forward(model *m, const bk_batch *rows, const int32_t *tokens)
{
    const backend_ops *op = m->bk->ops;
    const model_config *c = &m->config;
    run_state *s = &m->state;
    int n = rows->n;
    size_t nd = (size_t)n * (size_t)c->dim;
    op->embed(m->bk, &m->weights.embed, tokens, n, m->embed_scale, s->x);
    for (int l = 0; l < c->n_layers; l++) {
        const layer_weights *w = &m->weights.layers[l];
        model_report_hidden(m, l, rows, s->x);
        op->rmsnorm(m->bk, s->x, n, &w->attn_norm, m->norm_offset, m->norm_eps, s->xb);
        model_attention(m, l, rows, s->xb, s->xb2);
        op->add(m->bk, s->x, s->xb2, nd);
        op->rmsnorm(m->bk, s->x, n, &w->ffn_norm, m->norm_offset, m->norm_eps, s->xb);
        bk_moe moe = {
            .router = &w->moe_router,
            .gate = w->moe_gate,
            .up = w->moe_up,
            .down = w->moe_down,
            .n_experts = (int)c->n_experts,
            .n_used = (int)c->n_experts_used,
            .norm_topk = c->norm_topk_prob,
            .act = m->act,
        };
        op->ffn_moe(m->bk, &moe, s->xb, n, s->xb2);
        op->add(m->bk, s->x, s->xb2, nd);
    }
}
