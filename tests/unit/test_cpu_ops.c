/* The CPU backend's ops against plain double-precision references, for
 * every weight format it reads, plus the invariances the numerics contract
 * promises: a row's result does not depend on the batch it is in or the
 * number of threads. Also the RoPE tables of each scaling. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"
#include "core/check.h"
#include "core/rng.h"
#include "backend/kv_cache.h"
#include "format/dequant.h"
#include "numerics/half.h"
#include "model/contract.h"
#include "model/model.h"
#include "test.h"
#include "test_weight.h"

static rng_state rng;

static float urand(float lo, float hi) { return lo + (hi - lo) * rng_uniform(&rng); }

static void fill(float *x, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        x[i] = urand(-scale, scale);
}

/* Random weights from this file's generator (tests/unit/test_weight.h). */
static void make_weight(bk_weight *w, dtype t, int64_t rows, int64_t cols)
{
    test_make_weight(w, t, rows, cols, &rng);
}

/* The whole matrix dequantized by the format's reference decoder. */
static float *dequant_all(const bk_weight *w)
{
    float *d = malloc((size_t)(w->rows * w->cols) * sizeof(float));
    for (int64_t r = 0; r < w->rows; r++)
        CHECK(dequant_row(w->type, w->data + (size_t)r * w->row_bytes, d + r * w->cols, w->cols,
                          NULL) == 0);
    return d;
}

/* matmul against a double reference, for each format; the same rows in a
 * batch of 1 and with another thread count must come out bit-identical. */
static void test_matmul_formats(void)
{
    static const dtype types[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q8_0,  DT_Q4_0,
                                  DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_NVFP4, DT_MXFP8};
    backend *b1 = backend_cpu_ref_create(1), *b3 = backend_cpu_ref_create(3);
    memra_err err = {{0}};
    const int n = 5;
    for (size_t ti = 0; ti < MEMRA_ARRAY_LEN(types); ti++) {
        int64_t rows = 37, cols = 512;
        bk_weight w, bias;
        make_weight(&w, types[ti], rows, cols);
        make_weight(&bias, DT_F32, 1, rows);
        CHECK_MSG(b1->ops->weight_prepare(b1, &w, &err) == 0, "%s", err.msg);
        float *x = malloc((size_t)(n * cols) * sizeof(float));
        fill(x, (size_t)(n * cols), 1.0f);
        float *out = malloc((size_t)(n * rows) * sizeof(float));
        float *out3 = malloc((size_t)(n * rows) * sizeof(float));
        float *one = malloc((size_t)rows * sizeof(float));
        b3->ops->matmul(b3, &w, &bias, x, n, out);
        b1->ops->matmul(b1, &w, &bias, x, n, out3);
        float *wd = dequant_all(&w);
        float bv[64];
        memcpy(bv, bias.data, (size_t)rows * 4);
        double worst = 0;
        for (int t = 0; t < n; t++)
            for (int64_t r = 0; r < rows; r++) {
                double acc = 0, mag = 0;
                for (int64_t k = 0; k < cols; k++) {
                    acc += (double)wd[r * cols + k] * x[t * cols + k];
                    mag += fabs((double)wd[r * cols + k] * x[t * cols + k]);
                }
                acc += bv[r];
                double e = fabs(acc - out[t * rows + r]) / (mag + fabs(bv[r]) + 1e-30);
                worst = fmax(worst, e);
            }
        CHECK_MSG(worst < 1e-6, "%s: relative error %g", dtype_get(types[ti])->name, worst);
        CHECK_MSG(memcmp(out, out3, (size_t)(n * rows) * 4) == 0, "%s: thread count changes bits",
                  dtype_get(types[ti])->name);
        b1->ops->matmul(b1, &w, &bias, x + 3 * cols, 1, one);
        CHECK_MSG(memcmp(one, out + 3 * rows, (size_t)rows * 4) == 0,
                  "%s: batch size changes bits", dtype_get(types[ti])->name);
        free(wd);
        free(x);
        free(out);
        free(out3);
        free(one);
        free((void *)w.data);
        free((void *)bias.data);
    }
    backend_destroy(b1);
    backend_destroy(b3);
}

/* F32 weights at an odd address (safetensors offsets need not be aligned)
 * read the same values. */
static void test_matmul_unaligned_f32(void)
{
    backend *b = backend_cpu_ref_create(2);
    bk_weight w;
    make_weight(&w, DT_F32, 9, 40);
    uint8_t *shifted = malloc(w.row_bytes * 9 + 3);
    memcpy(shifted + 2, w.data, w.row_bytes * 9);
    bk_weight w2 = w;
    w2.data = shifted + 2;
    float x[80], o1[18], o2[18];
    fill(x, 80, 1);
    b->ops->matmul(b, &w, NULL, x, 2, o1);
    b->ops->matmul(b, &w2, NULL, x, 2, o2);
    CHECK(memcmp(o1, o2, sizeof o1) == 0);
    free(shifted);
    free((void *)w.data);
    backend_destroy(b);
}

static void test_rmsnorm(void)
{
    backend *b = backend_cpu_ref_create(1);
    bk_weight w;
    make_weight(&w, DT_BF16, 1, 48);
    float x[96], out[96];
    fill(x, 96, 3);
    float *wd = dequant_all(&w);
    for (int off = 0; off <= 1; off++) {
        b->ops->rmsnorm(b, x, 2, &w, (float)off, 1e-6f, out);
        for (int r = 0; r < 2; r++) {
            double ss = 0;
            for (int i = 0; i < 48; i++)
                ss += (double)x[r * 48 + i] * x[r * 48 + i];
            double inv = 1.0 / sqrt(ss / 48 + 1e-6);
            for (int i = 0; i < 48; i++) {
                double ref = x[r * 48 + i] * inv * (wd[i] + off);
                CHECK_MSG(fabs(ref - out[r * 48 + i]) < 1e-5 * (fabs(ref) + 1), "%g vs %g", ref,
                          out[r * 48 + i]);
            }
        }
    }
    free(wd);
    free((void *)w.data);
    backend_destroy(b);
}

/* HF row layout -> llama.cpp's permuted layout within one head. */
static void permute_head(const float *hf, float *gg, int hd)
{
    int half = hd / 2;
    for (int i = 0; i < half; i++)
        for (int t = 0; t < 2; t++)
            gg[2 * i + t] = hf[t * half + i];
}

/* RoPE: rotate-half on HF layout against the angle formula, and adjacent
 * pairs on the permuted layout giving the permuted result exactly. */
static void test_rope_pairings(void)
{
    enum { HD = 16, HALF = 8 };
    float inv[HALF];
    for (int i = 0; i < HALF; i++)
        inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / HD);
    bk_rope neox = {ROPE_PAIR_NEOX, HALF, inv, 1.0f}, adj = {ROPE_PAIR_ADJACENT, HALF, inv, 1.0f};
    float x[HD], xp[HD], cs[2 * HALF];
    fill(x, HD, 1);
    permute_head(x, xp, HD);
    const int32_t positions[] = {0, 1, 7, 300};
    for (size_t p = 0; p < MEMRA_ARRAY_LEN(positions); p++) {
        float a[HD], bb[HD], ap[HD];
        memcpy(a, x, sizeof a);
        memcpy(bb, xp, sizeof bb);
        cpu_rope_table(&neox, positions[p], cs);
        cpu_rope_head(a, cs, HALF, ROPE_PAIR_NEOX);
        cpu_rope_table(&adj, positions[p], cs);
        cpu_rope_head(bb, cs, HALF, ROPE_PAIR_ADJACENT);
        permute_head(a, ap, HD);
        CHECK(memcmp(ap, bb, sizeof ap) == 0);
        for (int i = 0; i < HALF; i++) {
            double ang = (double)(inv[i] * (float)positions[p]);
            double r0 = x[i] * cos(ang) - x[i + HALF] * sin(ang);
            double r1 = x[i + HALF] * cos(ang) + x[i] * sin(ang);
            CHECK(fabs(r0 - a[i]) < 1e-5 && fabs(r1 - a[i + HALF]) < 1e-5);
        }
        if (positions[p] == 0)
            CHECK(memcmp(a, x, sizeof a) == 0);
    }
}

/* A naive attention over positions [lo, pos] in double. */
static void naive_attention(const float *q, const float *ks, const float *vs, int pos, int lo,
                            int hd, double scale, double softcap, double *out)
{
    double sc[256], mx = -INFINITY, sum = 0;
    for (int t = lo; t <= pos; t++) {
        double s = 0;
        for (int d = 0; d < hd; d++)
            s += (double)q[d] * ks[t * hd + d];
        s *= scale;
        if (softcap > 0)
            s = tanh(s / softcap) * softcap;
        sc[t] = s;
        mx = fmax(mx, s);
    }
    for (int t = lo; t <= pos; t++)
        sum += sc[t] = exp(sc[t] - mx);
    for (int d = 0; d < hd; d++) {
        out[d] = 0;
        for (int t = lo; t <= pos; t++)
            out[d] += sc[t] / sum * vs[t * hd + d];
    }
}

/* Attention with GQA, a window and soft-capping, the prompt run as chunks
 * through a paged cache, against the naive formula; and f16 KV close. */
static void test_attention(void)
{
    enum { NH = 4, NKV = 2, HD = 8, N = 23, BS = 4 };
    const int64_t windows[] = {0, 5};
    const float caps[] = {0, 3};
    float q[N * NH * HD], k[N * NKV * HD], v[N * NKV * HD], out[N * NH * HD];
    fill(q, MEMRA_ARRAY_LEN(q), 1.5f);
    fill(k, MEMRA_ARRAY_LEN(k), 1.5f);
    fill(v, MEMRA_ARRAY_LEN(v), 1);
    backend *b = backend_cpu_ref_create(3);
    memra_err err = {{0}};
    for (int kt = 0; kt < 2; kt++)
        for (size_t wi = 0; wi < 2; wi++)
            for (size_t ci = 0; ci < 2; ci++) {
                kv_cache kc;
                CHECK(kv_cache_init(&kc, kt ? KV_F16 : KV_F32, 2, NKV * HD, BS, 16, &err) == 0);
                kv_seq s, other;
                kv_seq_init(&s, &kc);
                kv_seq_init(&other, &kc);
                /* interleave another sequence's blocks */
                CHECK(kv_seq_reserve(&other, 5, &err) == 0);
                CHECK(kv_seq_reserve(&s, N, &err) == 0);
                bk_attn a = {1, NH, NKV, HD, 0.35f, caps[ci], windows[wi], 0, 0};
                int32_t pos[N];
                kv_seq *seqs[N];
                for (int i = 0; i < N; i++) {
                    pos[i] = i;
                    seqs[i] = &s;
                }
                /* chunks of 7, 1 and the rest */
                const int cuts[] = {0, 7, 8, N};
                for (int c = 0; c < 3; c++) {
                    int i0 = cuts[c], m = cuts[c + 1] - cuts[c];
                    bk_batch rows = {m, pos + i0, seqs + i0};
                    b->ops->attention(b, &a, &rows, q + i0 * NH * HD, k + i0 * NKV * HD,
                                      v + i0 * NKV * HD, out + i0 * NH * HD);
                }
                double worst = 0;
                for (int i = 0; i < N; i++)
                    for (int h = 0; h < NH; h++) {
                        int kvh = h / (NH / NKV);
                        float ks[N * HD], vs[N * HD];
                        for (int t = 0; t < N; t++)
                            for (int d = 0; d < HD; d++) {
                                ks[t * HD + d] = k[(t * NKV + kvh) * HD + d];
                                vs[t * HD + d] = v[(t * NKV + kvh) * HD + d];
                            }
                        int lo = windows[wi] && i - windows[wi] + 1 > 0 ? i - (int)windows[wi] + 1
                                                                       : 0;
                        double ref[HD];
                        naive_attention(q + (i * NH + h) * HD, ks, vs, i, lo, HD, 0.35f, caps[ci],
                                        ref);
                        for (int d = 0; d < HD; d++)
                            worst = fmax(worst, fabs(ref[d] - out[(i * NH + h) * HD + d]));
                    }
                double tol = kt ? 5e-3 : 1e-5;
                CHECK_MSG(worst < tol, "kv %s window %d softcap %g: max error %g",
                          kv_type_name(kc.type), (int)windows[wi], caps[ci], worst);
                kv_seq_free(&s);
                kv_seq_free(&other);
                kv_cache_free(&kc);
            }
    backend_destroy(b);
}

/* Scores far above 100 (exp overflows f32 past 88): the softmax must
 * subtract the row's maximum first, or the output is inf/NaN. */
static void test_attention_large_scores(void)
{
    enum { NH = 2, NKV = 1, HD = 8, N = 9, BS = 4 };
    float q[N * NH * HD], k[N * NKV * HD], v[N * NKV * HD], out[N * NH * HD];
    fill(q, MEMRA_ARRAY_LEN(q), 1);
    fill(k, MEMRA_ARRAY_LEN(k), 1);
    fill(v, MEMRA_ARRAY_LEN(v), 1);
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(q); i++)
        q[i] = 12 + 8 * q[i]; /* 4 to 20 */
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(k); i++)
        k[i] = 12 + 8 * k[i];
    backend *b = backend_cpu_ref_create(2);
    memra_err err = {{0}};
    kv_cache kc;
    CHECK(kv_cache_init(&kc, KV_F32, 1, NKV * HD, BS, 8, &err) == 0);
    kv_seq s;
    kv_seq_init(&s, &kc);
    CHECK(kv_seq_reserve(&s, N, &err) == 0);
    bk_attn a = {0, NH, NKV, HD, 1.0f, 0, 0, 0, 0};
    int32_t pos[N];
    kv_seq *seqs[N];
    for (int i = 0; i < N; i++) {
        pos[i] = i;
        seqs[i] = &s;
    }
    bk_batch rows = {N, pos, seqs};
    b->ops->attention(b, &a, &rows, q, k, v, out);
    double worst = 0, min_score = INFINITY;
    for (int i = 0; i < N; i++)
        for (int h = 0; h < NH; h++) {
            for (int t = 0; t <= i; t++) {
                double sc = 0;
                for (int d = 0; d < HD; d++)
                    sc += (double)q[(i * NH + h) * HD + d] * k[t * HD + d];
                min_score = fmin(min_score, sc);
            }
            double ref[HD];
            naive_attention(q + (i * NH + h) * HD, k, v, i, 0, HD, 1.0, 0, ref);
            for (int d = 0; d < HD; d++) {
                float o = out[(i * NH + h) * HD + d];
                CHECK_MSG(isfinite(o), "row %d head %d value %d is %g", i, h, d, o);
                worst = fmax(worst, fabs(ref[d] - o));
            }
        }
    CHECK_MSG(min_score > 100, "the smallest score is %g: the case does not test large scores",
              min_score);
    CHECK_MSG(worst < 1e-5, "max error %g", worst);
    kv_seq_free(&s);
    kv_cache_free(&kc);
    backend_destroy(b);
}

static double gelu_ref(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static double silu_ref(double x) { return x / (1 + exp(-x)); }

/* down(act(gate x) * up x) for one row in double. */
static void glu_ref(const float *g, const float *u, const float *dn, int dim, int ffn,
                    const float *x, int gelu, double *out)
{
    double h[64];
    for (int j = 0; j < ffn; j++) {
        double a = 0, c = 0;
        for (int k = 0; k < dim; k++) {
            a += (double)g[j * dim + k] * x[k];
            c += (double)u[j * dim + k] * x[k];
        }
        h[j] = (gelu ? gelu_ref(a) : silu_ref(a)) * c;
    }
    for (int i = 0; i < dim; i++) {
        out[i] = 0;
        for (int j = 0; j < ffn; j++)
            out[i] += (double)dn[i * ffn + j] * h[j];
    }
}

static void test_ffn_glu(void)
{
    enum { DIM = 32, FFN = 64, N = 3 };
    backend *b = backend_cpu_ref_create(2);
    for (int gelu = 0; gelu <= 1; gelu++) {
        bk_weight g, u, d;
        make_weight(&g, DT_F16, FFN, DIM);
        make_weight(&u, DT_F16, FFN, DIM);
        make_weight(&d, DT_F16, DIM, FFN);
        float *gd = dequant_all(&g), *ud = dequant_all(&u), *dd = dequant_all(&d);
        float x[N * DIM], hb[N * FFN], hb2[N * FFN], out[N * DIM];
        fill(x, N * DIM, 1);
        b->ops->ffn_glu(b, &g, &u, &d, gelu ? BK_ACT_GELU_TANH : BK_ACT_SILU, x, N, hb, hb2, out);
        double worst = 0, ref[DIM];
        for (int t = 0; t < N; t++) {
            glu_ref(gd, ud, dd, DIM, FFN, x + t * DIM, gelu, ref);
            for (int i = 0; i < DIM; i++)
                worst = fmax(worst, fabs(ref[i] - out[t * DIM + i]));
        }
        CHECK_MSG(worst < 1e-5, "%s: max error %g", gelu ? "gelu" : "silu", worst);
        free(gd);
        free(ud);
        free(dd);
        free((void *)g.data);
        free((void *)u.data);
        free((void *)d.data);
    }
    backend_destroy(b);
}

/* Routed experts against softmax + top-k + (renormalized) weighted sum. */
static void test_ffn_moe(void)
{
    enum { DIM = 16, FFN = 8, NE = 6, NU = 2, N = 7 };
    backend *b = backend_cpu_ref_create(2);
    bk_weight router, gate[NE], up[NE], down[NE];
    make_weight(&router, DT_F32, NE, DIM);
    float *rd = dequant_all(&router), *gd[NE], *ud[NE], *dd[NE];
    for (int e = 0; e < NE; e++) {
        make_weight(&gate[e], DT_BF16, FFN, DIM);
        make_weight(&up[e], DT_BF16, FFN, DIM);
        make_weight(&down[e], DT_BF16, DIM, FFN);
        gd[e] = dequant_all(&gate[e]);
        ud[e] = dequant_all(&up[e]);
        dd[e] = dequant_all(&down[e]);
    }
    float x[N * DIM], out[N * DIM];
    fill(x, N * DIM, 2);
    for (int norm = 0; norm <= 1; norm++) {
        bk_moe m = {&router, gate, up, down, NE, NU, norm, BK_ACT_SILU, NULL, NULL};
        b->ops->ffn_moe(b, &m, x, N, out);
        double worst = 0;
        for (int t = 0; t < N; t++) {
            double p[NE], mx = -INFINITY, sum = 0;
            for (int e = 0; e < NE; e++) {
                p[e] = 0;
                for (int k = 0; k < DIM; k++)
                    p[e] += (double)rd[e * DIM + k] * x[t * DIM + k];
                mx = fmax(mx, p[e]);
            }
            for (int e = 0; e < NE; e++)
                sum += p[e] = exp(p[e] - mx);
            int used[NE] = {0};
            double ref[DIM] = {0}, wsum = 0, w[NU];
            int ids[NU];
            for (int k = 0; k < NU; k++) {
                int best = -1;
                for (int e = 0; e < NE; e++)
                    if (!used[e] && (best < 0 || p[e] > p[best]))
                        best = e;
                used[best] = 1;
                ids[k] = best;
                w[k] = p[best] / sum;
                wsum += w[k];
            }
            for (int k = 0; k < NU; k++) {
                double y[DIM];
                glu_ref(gd[ids[k]], ud[ids[k]], dd[ids[k]], DIM, FFN, x + t * DIM, 0, y);
                for (int i = 0; i < DIM; i++)
                    ref[i] += y[i] * (norm ? w[k] / wsum : w[k]);
            }
            for (int i = 0; i < DIM; i++)
                worst = fmax(worst, fabs(ref[i] - out[t * DIM + i]));
        }
        CHECK_MSG(worst < 1e-5, "norm_topk %d: max error %g", norm, worst);
        /* one token alone gives the same bits as in the batch */
        float one[DIM];
        b->ops->ffn_moe(b, &m, x + 4 * DIM, 1, one);
        CHECK(memcmp(one, out + 4 * DIM, sizeof one) == 0);
    }
    for (int e = 0; e < NE; e++) {
        free(gd[e]);
        free(ud[e]);
        free(dd[e]);
        free((void *)gate[e].data);
        free((void *)up[e].data);
        free((void *)down[e].data);
    }
    free(rd);
    free((void *)router.data);
    backend_destroy(b);
}

/* Per-head QK-norm happens before RoPE (qwen3, gemma3). */
static void test_qk_norm_rope(void)
{
    enum { NH = 2, NKV = 1, HD = 8 };
    backend *b = backend_cpu_ref_create(1);
    bk_weight qn, kn;
    make_weight(&qn, DT_F32, 1, HD);
    make_weight(&kn, DT_F32, 1, HD);
    float inv[HD / 2];
    for (int i = 0; i < HD / 2; i++)
        inv[i] = 1.0f / powf(1e6f, (float)(2 * i) / HD);
    bk_rope rope = {ROPE_PAIR_NEOX, HD / 2, inv, 1.0f};
    bk_attn a = {0, NH, NKV, HD, 1, 0, 0, 0, 0};
    float q[NH * HD], k[NKV * HD], q0[NH * HD], k0[NKV * HD];
    fill(q, NH * HD, 2);
    fill(k, NKV * HD, 2);
    memcpy(q0, q, sizeof q);
    memcpy(k0, k, sizeof k);
    int32_t pos = 9;
    bk_batch rows = {1, &pos, NULL};
    b->ops->qk_norm_rope(b, q, k, &rows, &a, &qn, &kn, 1.0f, 1e-6f, &rope);
    float qw[HD], cs[HD];
    memcpy(qw, qn.data, sizeof qw);
    cpu_rope_table(&rope, pos, cs);
    for (int h = 0; h < NH; h++) {
        float ref[HD];
        cpu_rmsnorm_row(q0 + h * HD, qw, 1.0f, 1e-6f, HD, ref);
        cpu_rope_head(ref, cs, HD / 2, ROPE_PAIR_NEOX);
        CHECK(memcmp(ref, q + h * HD, sizeof ref) == 0);
    }
    CHECK(memcmp(k, k0, sizeof k) != 0);
    free((void *)qn.data);
    free((void *)kn.data);
    backend_destroy(b);
}

/* RoPE tables of each scaling against the formulas written out in double. */
static void test_rope_scaling(void)
{
    model_config c;
    memset(&c, 0, sizeof c);
    c.head_dim = 128;
    c.rope_theta = 500000;
    float base[64], inv[64], af;
    model_rope_inv_freq(&c, c.rope_theta, 1, base, &af);
    CHECK(af == 1.0f);
    for (int i = 0; i < 64; i++)
        CHECK(fabs(base[i] - pow(500000.0, -2.0 * i / 128)) <= 1e-6 * base[i]);

    c.rope_scaling.kind = ROPE_SCALING_LINEAR;
    c.rope_scaling.factor = 8;
    model_rope_inv_freq(&c, c.rope_theta, 1, inv, &af);
    for (int i = 0; i < 64; i++)
        CHECK(inv[i] == base[i] / 8.0f);
    model_rope_inv_freq(&c, c.rope_theta, 0, inv, &af); /* unscaled: gemma3 local layers */
    CHECK(memcmp(inv, base, sizeof inv) == 0);

    c.rope_scaling.kind = ROPE_SCALING_LLAMA3;
    c.rope_scaling.low_freq_factor = 1;
    c.rope_scaling.high_freq_factor = 4;
    c.rope_scaling.original_ctx = 8192;
    float factors[64];
    llama_rope_freqs(&c, factors);
    model_rope_inv_freq(&c, c.rope_theta, 1, inv, &af);
    int scaled = 0, kept = 0, mid = 0;
    for (int i = 0; i < 64; i++) {
        CHECK_MSG(fabs(inv[i] - base[i] / factors[i]) <= 2e-6 * base[i], "llama3 %d", i);
        scaled += factors[i] == 8;
        kept += factors[i] == 1;
        mid += factors[i] > 1 && factors[i] < 8;
    }
    CHECK(scaled > 0 && kept > 0 && mid > 0);

    /* YaRN as Qwen2.5's model card configures it. */
    c.rope_theta = 1000000;
    c.rope_scaling.kind = ROPE_SCALING_YARN;
    c.rope_scaling.factor = 4;
    c.rope_scaling.original_ctx = 32768;
    c.rope_scaling.beta_fast = 32;
    c.rope_scaling.beta_slow = 1;
    c.rope_scaling.attn_factor = 0.1 * log(4.0) + 1;
    model_rope_inv_freq(&c, c.rope_theta, 0, base, &af);
    model_rope_inv_freq(&c, c.rope_theta, 1, inv, &af);
    CHECK(fabs(af - 1.1386294) < 1e-6);
    double lo = floor(128 * log(32768 / (32 * 2 * M_PI)) / (2 * log(1e6)));
    double hi = ceil(128 * log(32768 / (1 * 2 * M_PI)) / (2 * log(1e6)));
    for (int i = 0; i < 64; i++) {
        double ramp = fmin(1, fmax(0, (i - lo) / (hi - lo)));
        double ref = base[i] / 4.0 * ramp + base[i] * (1 - ramp);
        CHECK_MSG(fabs(inv[i] - ref) <= 1e-6 * ref, "yarn %d: %g vs %g", i, inv[i], ref);
    }
    CHECK(inv[0] == base[0]);
    CHECK(fabs(inv[63] - base[63] / 4) <= 1e-6 * inv[63]);
}

int main(void)
{
    rng_seed(&rng, 1234, 0);
    static const test_case cases[] = {
        TEST_CASE(test_matmul_formats), TEST_CASE(test_matmul_unaligned_f32),
        TEST_CASE(test_rmsnorm),        TEST_CASE(test_rope_pairings),
        TEST_CASE(test_attention),      TEST_CASE(test_attention_large_scores),      TEST_CASE(test_ffn_glu),
        TEST_CASE(test_ffn_moe),        TEST_CASE(test_qk_norm_rope),
        TEST_CASE(test_rope_scaling),
    };
    return test_run_all(cases, (int)MEMRA_ARRAY_LEN(cases));
}
