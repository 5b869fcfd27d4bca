/* Heads of some of the output matrix's rows (model.h: model_head). The
 * rows are copied out of the checkpoint in the head's order and handed to
 * the backend like any weight, so a quantized head stays quantized and a
 * step reads only those rows. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "model/model.h"

int model_head_new(model *m, const int32_t *ids, int32_t n, model_head **out, memra_err *err)
{
    *out = NULL;
    const model_config *c = &m->config;
    const bk_weight *o = &m->weights.output;
    if (m->n_stages > 1 || m->tp > 1)
        return memra_fail(err, "a trimmed head on a model split over devices (--pp, --tp) is "
                          "not built");
    if (!bk_weight_present(o) || o->rows < c->n_vocab)
        return memra_fail(err, "the model has no output matrix of %lld rows to trim",
                          (long long)c->n_vocab);
    if (!m->bk->ops->gather_cols)
        return memra_fail(err, "the %s backend cannot run a trimmed head (no gather_cols)",
                          m->bk->name);
    if (n < 1 || n > c->n_vocab)
        return memra_fail(err, "a head of %d rows: the vocabulary has %lld ids", (int)n,
                          (long long)c->n_vocab);
    int32_t *map = xmalloc((size_t)c->n_vocab * sizeof *map);
    for (int64_t i = 0; i < c->n_vocab; i++)
        map[i] = -1;
    for (int32_t j = 0; j < n; j++) {
        if (ids[j] < 0 || ids[j] >= c->n_vocab) {
            free(map);
            return memra_fail(err, "head row %d: id %d is outside the vocabulary (%lld ids)",
                              (int)j, (int)ids[j], (long long)c->n_vocab);
        }
        if (map[ids[j]] >= 0) {
            int first = map[ids[j]];
            free(map);
            return memra_fail(err, "head rows %d and %d: id %d twice", first, (int)j,
                              (int)ids[j]);
        }
        map[ids[j]] = j;
    }
    model_head *h = xcalloc(1, sizeof *h);
    h->n = n;
    h->rows = xmalloc((size_t)n * o->row_bytes);
    for (int32_t j = 0; j < n; j++)
        memcpy(h->rows + (size_t)j * o->row_bytes, o->data + (size_t)ids[j] * o->row_bytes,
               o->row_bytes);
    h->w = (bk_weight){.name = "output (trimmed head)", .type = o->type, .rows = n,
                       .cols = o->cols, .row_bytes = o->row_bytes, .data = h->rows};
    backend *bk = m->bk;
    if (bk->ops->weight_prepare(bk, &h->w, err) != 0) {
        free(h->rows);
        free(h);
        free(map);
        return -1;
    }
    /* the map's int32s go up as their bytes (backend_ops.gather_cols) */
    h->map = (int32_t *)bk->ops->act_alloc(bk, (size_t)c->n_vocab);
    bk->ops->act_write(bk, (float *)h->map, (const float *)(const void *)map, (size_t)c->n_vocab);
    h->logits = bk->ops->act_alloc(bk, (size_t)m->state.cap * (size_t)n);
    free(map);
    *out = h;
    return 0;
}

void model_head_free(model *m, model_head *h)
{
    if (!h)
        return;
    if (m->head == h)
        m->head = NULL;
    m->bk->ops->act_free(m->bk, (float *)h->map);
    m->bk->ops->act_free(m->bk, h->logits);
    free(h->rows);
    free(h);
}
