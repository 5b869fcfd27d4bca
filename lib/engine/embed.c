/* Pooling the final hidden states of a prefill (engine/embed.h). The
 * engine reports them through its final-hidden hook after every chunk (the
 * other layers are not read back); the sum is kept in double so a mean over
 * a long input does not depend on the chunking beyond the rounding of each
 * state. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "engine/embed.h"
#include "format/dequant.h"
#include "model/config.h"
#include "model/model.h"

struct embed_pool {
    int kind;
    int64_t dim;
    double *acc;   /* [dim]: the sum (mean), or the kept row (last, cls) */
    int64_t n;     /* rows pooled */
    int have;      /* acc holds a row */
};

embed_pool *embed_pool_new(int kind, int64_t dim)
{
    embed_pool *p = xcalloc(1, sizeof *p);
    p->kind = kind;
    p->dim = dim;
    p->acc = xcalloc((size_t)dim, sizeof *p->acc);
    return p;
}

void embed_pool_free(embed_pool *p)
{
    if (!p)
        return;
    free(p->acc);
    free(p);
}

void embed_pool_reset(embed_pool *p)
{
    memset(p->acc, 0, (size_t)p->dim * sizeof *p->acc);
    p->n = 0;
    p->have = 0;
}

/* The final-hidden hook's context: which pool takes the rows of which
 * sequence (one pair for a lone input's chunk). */
typedef struct {
    int n;
    const kv_seq *const *seqs;
    embed_pool *const *pools;
} pool_hook;

static void pool_row(embed_pool *p, const float *x, int32_t pos)
{
    if (p->kind == MODEL_POOL_MEAN) {
        for (int64_t i = 0; i < p->dim; i++)
            p->acc[i] += x[i];
    } else if (p->kind == MODEL_POOL_LAST || (p->kind == MODEL_POOL_CLS && pos == 0)) {
        for (int64_t i = 0; i < p->dim; i++)
            p->acc[i] = x[i];
        p->have = 1;
    }
    p->n++;
}

static void take_rows(void *ctx, int index, const bk_batch *rows, int64_t dim, const float *h)
{
    (void)index;
    const pool_hook *k = ctx;
    for (int r = 0, i = 0; r < rows->n; r++) {
        /* rows of one sequence are consecutive: look again only when it changes */
        if (k->seqs[i] != rows->seq[r])
            for (i = 0; i < k->n - 1 && k->seqs[i] != rows->seq[r];)
                i++;
        if (k->seqs[i] == rows->seq[r] && dim == k->pools[i]->dim)
            pool_row(k->pools[i], h + (size_t)r * (size_t)dim, rows->pos[r]);
    }
}

static int pool_check(engine *e, const embed_pool *p, memra_err *err)
{
    if (p->kind != MODEL_POOL_LAST && p->kind != MODEL_POOL_MEAN && p->kind != MODEL_POOL_CLS)
        return memra_fail(err, "embedding: pooling %d is not last, mean or cls", p->kind);
    if (engine_config(e)->dim != p->dim)
        return memra_fail(err, "embedding: the pool is for dim %lld, the model's is %lld",
                          (long long)p->dim, (long long)engine_config(e)->dim);
    return 0;
}

int embed_pool_forward(engine *e, engine_seq *s, const int32_t *tokens, int n, embed_pool *p,
                       memra_err *err)
{
    if (pool_check(e, p, err) != 0)
        return -1;
    const kv_seq *kv = engine_seq_kv(s);
    pool_hook k = {1, &kv, &p};
    engine_set_final_hidden_hook(e, take_rows, &k);
    int rc = engine_forward(e, s, tokens, n, NULL, 0, err);
    engine_set_hidden_hook(e, NULL, NULL);
    return rc;
}

int embed_pool_forward_packed(engine *e, engine_seq *const *seqs, const int32_t *const *tokens,
                              const int *n, int n_seqs, embed_pool *const *pools,
                              memra_err *err)
{
    if (n_seqs <= 0)
        return memra_fail(err, "embedding: no inputs in the step");
    const kv_seq **kvs = xmalloc((size_t)n_seqs * sizeof *kvs);
    for (int i = 0; i < n_seqs; i++) {
        kvs[i] = engine_seq_kv(seqs[i]);
        for (int j = 0; j < i; j++)
            if (pools[j] == pools[i]) {
                free(kvs);
                return memra_fail(err, "embedding: inputs %d and %d share a pool", j, i);
            }
        if (pool_check(e, pools[i], err) != 0) {
            free(kvs);
            return -1;
        }
    }
    pool_hook k = {n_seqs, kvs, pools};
    engine_set_final_hidden_hook(e, take_rows, &k);
    int rc = engine_forward_packed(e, seqs, tokens, n, n_seqs, err);
    engine_set_hidden_hook(e, NULL, NULL);
    free(kvs);
    return rc;
}

int embed_pool_result(const embed_pool *p, int64_t dims, float *out, memra_err *err)
{
    if (p->n == 0 || (p->kind != MODEL_POOL_MEAN && !p->have))
        return memra_fail(err, "embedding: no token was pooled (an empty input)");
    if (dims < 1 || dims > p->dim)
        return memra_fail(err, "embedding: %lld dimensions asked of a %lld-dimension model",
                          (long long)dims, (long long)p->dim);
    double scale = p->kind == MODEL_POOL_MEAN ? 1.0 / (double)p->n : 1.0, ss = 0;
    for (int64_t i = 0; i < dims; i++) {
        double v = p->acc[i] * scale;
        ss += v * v;
    }
    if (!(ss > 0) || !isfinite(ss))
        return memra_fail(err, "embedding: the pooled vector has %s norm",
                          isfinite(ss) ? "zero" : "a non-finite");
    double inv = 1.0 / sqrt(ss);
    for (int64_t i = 0; i < dims; i++)
        out[i] = (float)(p->acc[i] * scale * inv);
    return 0;
}

int engine_embed(engine *e, engine_seq *s, const int32_t *tokens, size_t n, int kind,
                 int64_t dims, float *out, memra_err *err)
{
    if (n == 0)
        return memra_fail(err, "embedding: an empty input");
    embed_pool *p = embed_pool_new(kind, engine_config(e)->dim);
    engine_seq_reset(s);
    int rc = embed_pool_forward(e, s, tokens, (int)n, p, err);
    if (rc == 0)
        rc = embed_pool_result(p, dims, out, err);
    engine_seq_reset(s);
    embed_pool_free(p);
    return rc;
}

struct embed_head {
    int64_t dim;
    double softcap;
    float *yes, *no; /* [dim] each: the head's rows, decoded */
};

int embed_head_new(engine *e, int32_t yes, int32_t no, embed_head **out, memra_err *err)
{
    *out = NULL;
    const model_config *c = engine_config(e);
    const bk_weight *w = &engine_model(e)->weights.output;
    if (yes < 0 || yes >= c->n_vocab || no < 0 || no >= c->n_vocab)
        return memra_fail(err, "rerank: the yes/no ids %d/%d are outside the vocabulary (%lld)",
                          yes, no, (long long)c->n_vocab);
    if (!w->data || w->rows < c->n_vocab || w->cols != c->dim)
        return memra_fail(err, "rerank: the output head is not [%lld][%lld]",
                          (long long)c->n_vocab, (long long)c->dim);
    embed_head *h = xcalloc(1, sizeof *h);
    h->dim = c->dim;
    h->softcap = c->final_softcap;
    h->yes = xmalloc((size_t)c->dim * sizeof *h->yes);
    h->no = xmalloc((size_t)c->dim * sizeof *h->no);
    if (dequant_row(w->type, w->data + (size_t)yes * w->row_bytes, h->yes, c->dim, err) != 0 ||
        dequant_row(w->type, w->data + (size_t)no * w->row_bytes, h->no, c->dim, err) != 0) {
        embed_head_free(h);
        return memra_wrap(err, "rerank: the output head (%s)", w->name ? w->name : "output");
    }
    *out = h;
    return 0;
}

void embed_head_free(embed_head *h)
{
    if (!h)
        return;
    free(h->yes);
    free(h->no);
    free(h);
}

int embed_head_score(const embed_head *h, const embed_pool *p, double *score, memra_err *err)
{
    if (p->kind != MODEL_POOL_LAST || !p->have)
        return memra_fail(err, "rerank: no last position was pooled (an empty input)");
    if (p->dim != h->dim)
        return memra_fail(err, "rerank: the pool is for dim %lld, the head's is %lld",
                          (long long)p->dim, (long long)h->dim);
    double ly = 0, ln = 0;
    for (int64_t i = 0; i < h->dim; i++) {
        ly += p->acc[i] * (double)h->yes[i];
        ln += p->acc[i] * (double)h->no[i];
    }
    if (h->softcap > 0) {
        ly = h->softcap * tanh(ly / h->softcap);
        ln = h->softcap * tanh(ln / h->softcap);
    }
    double d = ly - ln;
    if (!isfinite(d))
        return memra_fail(err, "rerank: the yes/no logits are not finite");
    *score = 1.0 / (1.0 + exp(-d));
    return 0;
}
