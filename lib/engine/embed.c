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
#include "model/config.h"

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

static void take_rows(void *ctx, int index, const bk_batch *rows, int64_t dim, const float *h)
{
    (void)index;
    embed_pool *p = ctx;
    if (dim != p->dim)
        return;
    for (int r = 0; r < rows->n; r++) {
        const float *x = h + (size_t)r * (size_t)dim;
        if (p->kind == MODEL_POOL_MEAN) {
            for (int64_t i = 0; i < dim; i++)
                p->acc[i] += x[i];
        } else if (p->kind == MODEL_POOL_LAST || (p->kind == MODEL_POOL_CLS && rows->pos[r] == 0)) {
            for (int64_t i = 0; i < dim; i++)
                p->acc[i] = x[i];
            p->have = 1;
        }
        p->n++;
    }
}

int embed_pool_forward(engine *e, engine_seq *s, const int32_t *tokens, int n, embed_pool *p,
                       memra_err *err)
{
    if (p->kind != MODEL_POOL_LAST && p->kind != MODEL_POOL_MEAN && p->kind != MODEL_POOL_CLS)
        return memra_fail(err, "embedding: pooling %d is not last, mean or cls", p->kind);
    if (engine_config(e)->dim != p->dim)
        return memra_fail(err, "embedding: the pool is for dim %lld, the model's is %lld",
                          (long long)p->dim, (long long)engine_config(e)->dim);
    engine_set_final_hidden_hook(e, take_rows, p);
    int rc = engine_forward(e, s, tokens, n, NULL, 0, err);
    engine_set_hidden_hook(e, NULL, NULL);
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

int engine_rerank_score(engine *e, engine_seq *s, const int32_t *tokens, size_t n, int32_t yes,
                        int32_t no, float *logits, double *score, memra_err *err)
{
    int64_t vocab = engine_config(e)->n_vocab;
    if (n == 0)
        return memra_fail(err, "rerank: an empty input");
    if (yes < 0 || yes >= vocab || no < 0 || no >= vocab)
        return memra_fail(err, "rerank: the yes/no ids %d/%d are outside the vocabulary (%lld)",
                          yes, no, (long long)vocab);
    engine_seq_reset(s);
    int rc = engine_forward(e, s, tokens, (int)n, logits, 0, err);
    engine_seq_reset(s);
    if (rc != 0)
        return -1;
    double d = (double)logits[yes] - (double)logits[no];
    if (!isfinite(d))
        return memra_fail(err, "rerank: the yes/no logits are not finite");
    *score = 1.0 / (1.0 + exp(-d));
    return 0;
}
