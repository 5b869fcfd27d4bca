/* The gated DeltaNet mixer (backend.h, bk_delta) on the CPU, and the two
 * small ops the hybrid layers need beside it (mul_sigmoid, split_heads).
 *
 * The reference's numerics, as transformers' torch fallback computes them
 * in f32: the conv sums its conv_k taps oldest first; the L2 norm and the
 * gated RMSNorm reduce with cpu_dot; the state update is the recurrent
 * form (decay, read, correct, write, read out), one token at a time, its
 * two reads over the key dims in sixteen partial sums (each quarter of the
 * key dims by r mod 4), reduced in a fixed order the GPU shares. Work
 * is split by value head, each head's rows in order, so a row's result is
 * the same whatever else the step holds and however a prompt is chunked. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_backend.h"
#include "core/check.h"

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* torch's softplus: log(1 + e^x), x itself above 20. */
static float softplusf(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

void cpu_op_mul_sigmoid(backend *b, float *x, const float *g, int n, int64_t x_cols,
                        int64_t g_cols)
{
    (void)b;
    for (int i = 0; i < n; i++) {
        float *xr = x + (size_t)i * (size_t)x_cols;
        const float *gr = g + (size_t)i * (size_t)g_cols;
        for (int64_t j = 0; j < x_cols; j++)
            xr[j] *= sigmoidf(gr[g_cols == 1 ? 0 : j]);
    }
}

void cpu_op_split_heads(backend *b, const float *x, int n, int n_heads, int a_dim, int b_dim,
                        float *a, float *bo)
{
    (void)b;
    size_t w = (size_t)a_dim + (size_t)b_dim;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < n_heads; h++) {
            const float *src = x + ((size_t)i * (size_t)n_heads + (size_t)h) * w;
            memcpy(a + ((size_t)i * n_heads + h) * (size_t)a_dim, src, (size_t)a_dim * 4);
            memcpy(bo + ((size_t)i * n_heads + h) * (size_t)b_dim, src + a_dim,
                   (size_t)b_dim * 4);
        }
}

void cpu_op_join_heads(backend *b, const float *a, const float *bo, int n, int n_heads,
                       int a_dim, int b_dim, float *x)
{
    (void)b;
    size_t w = (size_t)a_dim + (size_t)b_dim;
    for (int i = 0; i < n; i++)
        for (int h = 0; h < n_heads; h++) {
            float *dst = x + ((size_t)i * (size_t)n_heads + (size_t)h) * w;
            memcpy(dst, a + ((size_t)i * n_heads + h) * (size_t)a_dim, (size_t)a_dim * 4);
            memcpy(dst + a_dim, bo + ((size_t)i * n_heads + h) * (size_t)b_dim,
                   (size_t)b_dim * 4);
        }
}

typedef struct {
    const bk_delta *d;
    const bk_batch *rows;
    const float *qkv, *z, *beta_in, *alpha;
    float *conv_out; /* [n][conv_dim] */
    float *out;
    const float *conv_w; /* [conv_dim][conv_k] */
    const float *dt_bias, *a, *norm;
    size_t conv_dim;
} delta_job;

static float *state_of(const bk_delta *d, const kv_seq *s)
{
    const kv_cache *c = s->cache;
    MEMRA_ASSERT(c->state && s->state_slot >= 0);
    return c->state + (size_t)s->state_slot * c->state_floats + d->state_off;
}

/* This layer's part of the slot that keeps s's state after position pos
 * (a checkpoint's: kv_seq_save_slot), or NULL. */
static float *save_of(const bk_delta *d, const kv_seq *s, int64_t pos)
{
    int slot = kv_seq_save_slot(s, pos);
    return slot < 0 ? NULL : s->cache->state + (size_t)slot * s->cache->state_floats + d->state_off;
}

/* The conv of channels [c0, c1) over every row, in row order. */
static void conv_task(void *ctx, int task, int thread)
{
    (void)thread;
    delta_job *j = ctx;
    const bk_delta *d = j->d;
    int km = d->conv_k - 1;
    size_t per = (j->conv_dim + 63) / 64;
    size_t c0 = (size_t)task * per;
    if (c0 >= j->conv_dim)
        return;
    size_t c1 = c0 + per > j->conv_dim ? j->conv_dim : c0 + per;
    for (int i = 0; i < j->rows->n; i++) {
        float *win = state_of(d, j->rows->seq[i]); /* [km][conv_dim] */
        if (j->rows->pos[i] == 0)
            for (int k = 0; k < km; k++)
                memset(win + (size_t)k * j->conv_dim + c0, 0, (c1 - c0) * 4);
        const float *x = j->qkv + (size_t)i * j->conv_dim;
        float *y = j->conv_out + (size_t)i * j->conv_dim;
        for (size_t ch = c0; ch < c1; ch++) {
            const float *w = j->conv_w + ch * (size_t)d->conv_k;
            float acc = 0;
            for (int k = 0; k < km; k++)
                acc += w[k] * win[(size_t)k * j->conv_dim + ch];
            acc += w[km] * x[ch];
            for (int k = 0; k + 1 < km; k++)
                win[(size_t)k * j->conv_dim + ch] = win[(size_t)(k + 1) * j->conv_dim + ch];
            if (km > 0)
                win[(size_t)(km - 1) * j->conv_dim + ch] = x[ch];
            y[ch] = cpu_silu(acc);
        }
        float *keep = save_of(d, j->rows->seq[i], j->rows->pos[i]);
        for (int k = 0; keep && k < km; k++)
            memcpy(keep + (size_t)k * j->conv_dim + c0, win + (size_t)k * j->conv_dim + c0,
                   (c1 - c0) * 4);
    }
}

/* Column c of the partial sums acc[quarter][r mod 4]: the quarters in
 * order, then the four sums pairwise. */
static float reduce_parts(float acc[4][4][1024], int c)
{
    float s[4];
    for (int m = 0; m < 4; m++)
        s[m] = ((acc[0][m][c] + acc[1][m][c]) + acc[2][m][c]) + acc[3][m][c];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

/* x / sqrt(sum x^2 + 1e-6), as transformers' l2norm. */
static void l2norm(const float *x, int n, float scale, float *out)
{
    float inv = 1.0f / sqrtf(cpu_dot(x, x, n) + 1e-6f);
    for (int i = 0; i < n; i++)
        out[i] = x[i] * inv * scale;
}

/* Value head `task` over every row, in row order. */
static void head_task(void *ctx, int task, int thread)
{
    delta_job *j = ctx;
    const bk_delta *d = j->d;
    int h = task, kd = d->k_dim, vd = d->v_dim;
    int kh = d->tiled ? h % d->n_k_heads : h / (d->n_v_heads / d->n_k_heads);
    size_t key_dim = (size_t)d->n_k_heads * (size_t)kd;
    size_t conv_floats = (size_t)(d->conv_k - 1) * j->conv_dim;
    float q[1024], k[1024], o[1024], kv[1024];
    static _Thread_local float acc[4][4][1024];
    const int qd = kd / 4; /* a quarter of the key dims */
    (void)thread;
    MEMRA_ASSERT(kd <= 1024 && vd <= 1024 && kd % 4 == 0);
    for (int i = 0; i < j->rows->n; i++) {
        float *S = state_of(d, j->rows->seq[i]) + conv_floats + (size_t)h * kd * vd;
        if (j->rows->pos[i] == 0)
            memset(S, 0, (size_t)kd * (size_t)vd * 4);
        const float *row = j->conv_out + (size_t)i * j->conv_dim;
        l2norm(row + (size_t)kh * kd, kd, 1.0f / sqrtf((float)kd), q);
        l2norm(row + key_dim + (size_t)kh * kd, kd, 1.0f, k);
        const float *v = row + 2 * key_dim + (size_t)h * vd;
        size_t nv = (size_t)d->n_v_heads;
        float g = d->a_is_log ? -expf(j->a[h]) : j->a[h];
        g *= softplusf(j->alpha[(size_t)i * nv + h] + j->dt_bias[h]);
        float decay = expf(g);
        float beta = sigmoidf(j->beta_in[(size_t)i * nv + h]);
        /* S^T k and S^T q: each quarter of the key dims summed by r mod 4,
         * the quarters added in order, then the four sums pairwise (the
         * GPU's order: its threads split a column in quarters) */
        memset(acc, 0, sizeof acc);
        for (int r = 0; r < kd; r++) {
            float *sr = S + (size_t)r * vd, *a = acc[r / qd][r & 3];
            for (int c = 0; c < vd; c++) {
                sr[c] *= decay;
                a[c] += sr[c] * k[r];
            }
        }
        for (int c = 0; c < vd; c++)
            kv[c] = (v[c] - reduce_parts(acc, c)) * beta; /* the correction written */
        memset(acc, 0, sizeof acc);
        for (int r = 0; r < kd; r++) {
            float *sr = S + (size_t)r * vd, *a = acc[r / qd][r & 3];
            for (int c = 0; c < vd; c++) {
                sr[c] += k[r] * kv[c];
                a[c] += sr[c] * q[r];
            }
        }
        for (int c = 0; c < vd; c++)
            o[c] = reduce_parts(acc, c);
        const float *z = j->z + ((size_t)i * nv + h) * vd;
        float *out = j->out + ((size_t)i * nv + h) * vd;
        float inv = 1.0f / sqrtf(cpu_dot(o, o, vd) / (float)vd + d->eps);
        for (int c = 0; c < vd; c++)
            out[c] = (o[c] * inv) * j->norm[c] * cpu_silu(z[c]);
        float *keep = save_of(d, j->rows->seq[i], j->rows->pos[i]);
        if (keep)
            memcpy(keep + conv_floats + (size_t)h * kd * vd, S, (size_t)kd * (size_t)vd * 4);
    }
}

void cpu_op_delta_net(backend *b, const bk_delta *d, const bk_batch *rows, const float *qkv,
                      const float *z, const float *beta_in, const float *alpha, float *out)
{
    cpu_backend *c = cpu_of(b);
    size_t conv_dim = 2 * (size_t)d->n_k_heads * (size_t)d->k_dim +
                      (size_t)d->n_v_heads * (size_t)d->v_dim;
    MEMRA_ASSERT(d->n_k_heads > 0 && d->n_v_heads % d->n_k_heads == 0 && d->conv_k >= 1);
    MEMRA_ASSERT(d->conv->rows == 1 && (size_t)d->conv->cols == conv_dim * (size_t)d->conv_k);
    const float *conv_w = cpu_weight_vec(c, 0, d->conv);
    delta_job j = {
        .d = d,
        .rows = rows,
        .qkv = qkv,
        .z = z,
        .beta_in = beta_in,
        .alpha = alpha,
        .conv_out = cpu_vec(c, 3, (size_t)rows->n * conv_dim),
        .out = out,
        .conv_w = conv_w,
        .dt_bias = cpu_weight_vec(c, 1, d->dt_bias),
        .a = cpu_weight_vec(c, 2, d->a),
        .conv_dim = conv_dim,
    };
    /* the four caller slots are taken: the norm weight is read to the stack */
    float norm[1024];
    MEMRA_ASSERT(d->v_dim <= 1024 && d->norm->cols == d->v_dim);
    const float *nr = cpu_weight_row(d->norm, 0, norm);
    if (nr != norm)
        memcpy(norm, nr, (size_t)d->v_dim * 4);
    j.norm = norm;
    pool_run(c->pool, 64, conv_task, &j);
    pool_run(c->pool, d->n_v_heads, head_task, &j);
}

void cpu_op_state_copy(backend *b, const kv_cache *kv, int from, int to)
{
    (void)b;
    MEMRA_ASSERT(kv->state && from >= 0 && to >= 0 && from < kv->n_state_slots &&
                 to < kv->n_state_slots);
    memcpy(kv->state + (size_t)to * kv->state_floats,
           kv->state + (size_t)from * kv->state_floats, kv->state_floats * sizeof(float));
}
