/* The kernel check of the tensor-core flash attention for prompt chunks
 * (kernels/flash_prefill.cuh), through the CUDA backend's attention op in
 * a prefill step, against the CPU backend's attention.
 *
 * Each case prefills one sequence in two chunks (the second over a prefix
 * already in the cache) with random q, k, v (never zero), and reports per
 * chunk two errors, both as max |got - ref| over the largest |v| stored
 * (the output is a convex combination of V rows, so V's scale is the
 * natural unit):
 *
 *   "q rounded": against the CPU run on q rounded to the cache's element
 *   type as the kernel stages it. What is left is the rounding of P to
 *   that type before the P V product (relative u_p = 2^-9 for bf16,
 *   2^-11 for f16, on each weight: at most u_p of the largest |v|),
 *   the f32 sums of both sides in their own orders (the order inside one
 *   mma is unspecified, so only the order-free bound gamma(n) of n terms
 *   is used) and exp/tanh ulps. A wrong mask, scale or cap is off by far
 *   more than u_p.
 *
 *   "f32 q": against the CPU run on the q it got. Q's rounding moves each
 *   logit by at most u_q * scale * sum_e |q_e k_e| (u_q as u_p), which
 *   moves each softmax weight by a factor within exp(+-2 delta): the bound
 *   adds that, computed from the case's data.
 *
 * Both bounds are computed from the data (max over rows, heads and the
 * keys a row sees of scale * sum_e |q_e k_e|, the longest span). Each case
 * also checks that a row's result is the same bytes however the launch
 * is cut: the chunk in two halves, a few rows alone in launches of their
 * own, and the chunk after another sequence's rows in one step.
 *
 * Dispatch: f32 and q8_0 caches, a head size the kernel lacks, a chunk
 * under the row threshold and a card without bf16 tensor cores (tune.flash
 * 0) keep the split-K kernel, whose error is that of a dot product (1e-5). With perf,
 * the 512-row chunk of the Qwen3-8B shape and an 8192-row prompt, flash
 * and split-K timed, checked on a sample of rows. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "check/kernel_check_internal.h"
#include "core/check.h"
#include "backend/kv_cache.h"
#include "numerics/kv_codec.h"
#include "kernels/flash_prefill.cuh"

/* The threshold the kernel's cases run with (tune.flash_min_rows, so the
 * regroupings can cut a chunk into launches of a few rows); the dispatch
 * case uses the backend's own. */
#define FL_MIN_ROWS 16
#define FL_BOUND_SPLITK 1e-5

/* The segment size and split the GPU runs with (gpu_rows): 0 / -1 the
 * backend's own; the cases take segments of one key block, so their
 * hundred-odd positions make rows of several segments, and compare the
 * launch split (1) and not (0). */
static int g_seg_keys, g_split = -1;

typedef struct {
    int heads, kv_heads, hd;
    int64_t window;
    float softcap;
    kv_type kvt;
    int chunk0, chunk1; /* rows of the first chunk (from position 0), then of the second */
} flash_case;

/* One sequence's cache and everything stored in it, as the host saw it. */
typedef struct {
    kv_cache kc;
    kv_seq seq, other;
    int have_cache;
    bk_attn a;
    int64_t len;       /* positions [0, len) */
    float *q, *k, *v;  /* [len][n_heads * hd], [len][kv_dim] x 2 */
    float *kr;         /* k as stored (rounded to the element type) */
} flash_seq;

static double gam(double n) { return n * 0x1p-24 / (1.0 - n * 0x1p-24); }

static float round_elem(kv_type t, float x)
{
    return t == KV_F16 ? kvc_f16_to_f32(kvc_f32_to_f16(x)) : kvc_bf16_to_f32(kvc_f32_to_bf16(x));
}

static double unit_of(kv_type t) { return t == KV_F16 ? 0x1p-11 : 0x1p-9; }

static int64_t span_lo_of(int64_t pos, int64_t window)
{
    return window > 0 && pos - window + 1 > 0 ? pos - window + 1 : 0;
}

/* Runs the GPU's attention on rows [i0, i0 + n) of the sequence (rows of
 * `pre` other-sequence rows first, positions 0.. of fs->other, when pre >
 * 0) inside a prefill step, flash on with threshold min_rows. Returns the
 * n rows' output (malloc'd). */
static float *gpu_rows(kc *k, flash_seq *fs, int64_t i0, int n, int pre, int min_rows,
                       double *us)
{
    cuda_backend *cb = cuda_of(k->gpu);
    const bk_attn *a = &fs->a;
    size_t hq = (size_t)a->n_heads * a->head_dim, hkv = (size_t)a->n_kv_heads * a->head_dim;
    int tot = pre + n;
    int32_t *pos = xmalloc((size_t)tot * sizeof *pos);
    kv_seq **seqs = xmalloc((size_t)tot * sizeof *seqs);
    float *in = xmalloc((size_t)tot * (hq + 2 * hkv) * sizeof(float));
    float *iq = in, *ik = in + (size_t)tot * hq, *iv = ik + (size_t)tot * hkv;
    for (int r = 0; r < tot; r++) {
        /* The other sequence (positions 0..pre-1) reuses the first rows'
         * data, wrapping when it is longer than this sequence. */
        int64_t src = r < pre ? r % fs->len : i0 + (r - pre);
        pos[r] = (int32_t)(r < pre ? r : src);
        seqs[r] = r < pre ? &fs->other : &fs->seq;
        memcpy(iq + (size_t)r * hq, fs->q + (size_t)src * hq, hq * sizeof(float));
        memcpy(ik + (size_t)r * hkv, fs->k + (size_t)src * hkv, hkv * sizeof(float));
        memcpy(iv + (size_t)r * hkv, fs->v + (size_t)src * hkv, hkv * sizeof(float));
    }
    bk_batch rows = {tot, pos, seqs};
    float *din = kc_dev(k, in, (size_t)tot * (hq + 2 * hkv));
    float *dout = k->gpu->ops->act_alloc(k->gpu, (size_t)tot * hq);
    cuda_step saved = cb->step;
    cuda_tuning saved_tune = cb->tune;
    cb->step = (cuda_step){.active = 1, .prefill = 1, .n = tot};
    cb->tune.flash_min_rows = min_rows;
    cb->tune.flash = 1;
    if (g_seg_keys > 0)
        cb->tune.flash_seg_keys = g_seg_keys;
    if (g_split >= 0)
        cb->tune.flash_split_blocks = g_split ? INT32_MAX : 0;
    k->gpu->ops->attention(k->gpu, a, &rows, din, din + (size_t)tot * hq,
                           din + (size_t)tot * (hq + hkv), dout);
    if (us && k->o->perf) /* re-storing the same K/V rows changes nothing */
        KC_TIME(k, *us, k->gpu->ops->attention(k->gpu, a, &rows, din, din + (size_t)tot * hq,
                                               din + (size_t)tot * (hq + hkv), dout));
    cb->step = saved;
    cb->tune = saved_tune;
    float *all = kc_read(k, dout, (size_t)tot * hq);
    float *got = xmalloc((size_t)n * hq * sizeof(float));
    memcpy(got, all + (size_t)pre * hq, (size_t)n * hq * sizeof(float));
    free(all);
    kc_dev_free(k, din);
    kc_dev_free(k, dout);
    free(in);
    free(pos);
    free(seqs);
    return got;
}

/* The CPU's attention for rows [i0, i0 + n), on q as given or rounded to
 * the cache's element type. Stores the rows' K/V in the CPU's cache. */
static float *cpu_rows(kc *k, flash_seq *fs, int64_t i0, int n, int round_q)
{
    const bk_attn *a = &fs->a;
    size_t hq = (size_t)a->n_heads * a->head_dim, hkv = (size_t)a->n_kv_heads * a->head_dim;
    float *q = xmalloc((size_t)n * hq * sizeof(float)), *out = xmalloc((size_t)n * hq * sizeof(float));
    for (size_t e = 0; e < (size_t)n * hq; e++) {
        float x = fs->q[(size_t)i0 * hq + e];
        q[e] = round_q ? round_elem(fs->kc.type, x) : x;
    }
    int32_t *pos = xmalloc((size_t)n * sizeof *pos);
    kv_seq **seqs = xmalloc((size_t)n * sizeof *seqs);
    for (int r = 0; r < n; r++) {
        pos[r] = (int32_t)(i0 + r);
        seqs[r] = &fs->seq;
    }
    bk_batch rows = {n, pos, seqs};
    k->cpu->ops->attention(k->cpu, a, &rows, q, fs->k + (size_t)i0 * hkv, fs->v + (size_t)i0 * hkv,
                           out);
    free(q);
    free(pos);
    free(seqs);
    return out;
}

/* max over rows [i0, i0 + n), heads and visible keys of scale * sum_e
 * |q_e k_e| (q rounded as staged, k as stored), and the longest span. */
static double score_mass(const flash_seq *fs, int64_t i0, int n, int64_t *span_out)
{
    const bk_attn *a = &fs->a;
    int hd = a->head_dim, G = a->n_heads / a->n_kv_heads;
    size_t hq = (size_t)a->n_heads * hd, hkv = (size_t)a->n_kv_heads * hd;
    double s1 = 0;
    int64_t span = 0;
    for (int64_t i = i0; i < i0 + n; i++) {
        int64_t lo = span_lo_of(i, a->window);
        if (i - lo + 1 > span)
            span = i - lo + 1;
        for (int h = 0; h < a->n_heads; h++) {
            float qr[256];
            for (int e = 0; e < hd; e++)
                qr[e] = fabsf(round_elem(fs->kc.type, fs->q[(size_t)i * hq + (size_t)h * hd + e]));
            for (int64_t t = lo; t <= i; t++) {
                const float *kk = fs->kr + (size_t)t * hkv + (size_t)(h / G) * hd;
                double m = 0;
                for (int e = 0; e < hd; e++)
                    m += (double)qr[e] * fabsf(kk[e]);
                if (m > s1)
                    s1 = m;
            }
        }
    }
    *span_out = span;
    return s1 * a->scale;
}

/* The bound on max |got - ref| / max |v| (the header says why); u_q: 0
 * against the reference on rounded q. */
static double flash_bound(const flash_seq *fs, double s1, int64_t span, double u_q)
{
    const bk_attn *a = &fs->a;
    double u_p = unit_of(fs->kc.type);
    /* Each logit: both sides' dot products (any order) and the scale
     * product, the cap's tanh, and q's rounding. */
    double delta = (2 * gam(a->head_dim) + 0x1p-22) * s1 + u_q * s1 +
                   (a->softcap > 0 ? a->softcap * 0x1p-21 : 0);
    double nb = (double)span / FP_KEYS + 2;
    return u_p + 2.1 * delta + 2 * gam(2.0 * (double)span + 8) + nb * 0x1p-21 +
           (double)span * 0x1p-25 + 0x1p-20;
}

static double err_over_v(const float *got, const float *ref, size_t n, double vmax)
{
    double d = 0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(ref[i]) && !isfinite(got[i]))
            return INFINITY;
        double x = fabs((double)got[i] - ref[i]);
        if (x > d)
            d = x;
    }
    return d / (vmax > 1e-30 ? vmax : 1e-30);
}

static int flash_seq_init(kc *k, flash_seq *fs, const flash_case *c, int64_t len, int64_t other)
{
    memset(fs, 0, sizeof *fs);
    memra_err err;
    int64_t kv_dim = (int64_t)c->kv_heads * c->hd;
    const int bs = 16;
    int n_blocks = (int)((len + bs) / bs) + (int)((other + bs) / bs) + 2;
    if (kv_cache_init(&fs->kc, c->kvt, 2, kv_dim, bs, n_blocks, &err) != 0 ||
        k->gpu->ops->kv_prepare(k->gpu, &fs->kc, &err) != 0) {
        kc_report_ok(k, "flash_prefill", "KV cache", 0, err.msg);
        if (fs->kc.k)
            kv_cache_free(&fs->kc);
        return -1;
    }
    fs->have_cache = 1;
    kv_seq_init(&fs->seq, &fs->kc);
    kv_seq_init(&fs->other, &fs->kc);
    /* The other sequence's blocks first, so the two interleave nothing
     * but do not start at block 0. */
    if ((other > 0 && kv_seq_reserve(&fs->other, other, &err) != 0) ||
        kv_seq_reserve(&fs->seq, len, &err) != 0) {
        kc_report_ok(k, "flash_prefill", "KV blocks", 0, err.msg);
        return -1;
    }
    fs->a = (bk_attn){.layer = 1, .n_heads = c->heads, .n_kv_heads = c->kv_heads,
                      .head_dim = c->hd, .scale = 1.0f / sqrtf((float)c->hd),
                      .softcap = c->softcap, .window = c->window};
    fs->len = len;
    size_t hq = (size_t)c->heads * c->hd;
    fs->q = xmalloc((size_t)len * hq * sizeof(float));
    fs->k = xmalloc((size_t)len * kv_dim * sizeof(float));
    fs->v = xmalloc((size_t)len * kv_dim * sizeof(float));
    kc_fill(k, fs->q, (size_t)len * hq, 1.5f);
    kc_fill(k, fs->k, (size_t)len * kv_dim, 1.5f);
    kc_fill(k, fs->v, (size_t)len * kv_dim, 1.5f);
    fs->kr = xmalloc((size_t)len * kv_dim * sizeof(float));
    for (size_t e = 0; e < (size_t)len * kv_dim; e++)
        fs->kr[e] = round_elem(c->kvt, fs->k[e]);
    return 0;
}

static void flash_seq_free(flash_seq *fs)
{
    if (fs->have_cache) {
        kv_seq_free(&fs->seq);
        kv_seq_free(&fs->other);
        kv_cache_free(&fs->kc);
    }
    free(fs->q);
    free(fs->k);
    free(fs->v);
    free(fs->kr);
}

static double vmax_of(const flash_seq *fs)
{
    double m = 0;
    size_t nv = (size_t)fs->len * (size_t)fs->a.n_kv_heads * fs->a.head_dim;
    for (size_t i = 0; i < nv; i++)
        m = fmax(m, fabs(round_elem(fs->kc.type, fs->v[i])));
    return m;
}

/* One chunk, rows [i0, i0 + n): both errors against their bounds; for
 * the second chunk (i0 > 0) also the regroupings. */
static void flash_chunk(kc *k, flash_seq *fs, const flash_case *c, int64_t i0, int n)
{
    size_t hq = (size_t)c->heads * c->hd, no = (size_t)n * hq;
    float *ref_f = cpu_rows(k, fs, i0, n, 0);
    float *ref_r = cpu_rows(k, fs, i0, n, 1);
    float *got = gpu_rows(k, fs, i0, n, 0, FL_MIN_ROWS, NULL);
    double vmax = vmax_of(fs);
    int64_t span;
    double s1 = score_mass(fs, i0, n, &span);
    int inv = -1;
    if (i0 > 0) {
        /* In two halves (the second starts mid-tile), rows alone, and
         * after another sequence's rows. */
        inv = 1;
        int h1 = n / 2;
        float *a1 = gpu_rows(k, fs, i0, h1, 0, 1, NULL);
        float *a2 = gpu_rows(k, fs, i0 + h1, n - h1, 0, 1, NULL);
        inv &= memcmp(a1, got, (size_t)h1 * hq * sizeof(float)) == 0 &&
               memcmp(a2, got + (size_t)h1 * hq, (size_t)(n - h1) * hq * sizeof(float)) == 0;
        free(a1);
        free(a2);
        const int alone[3] = {0, n / 2 + 1, n - 1};
        for (int s = 0; s < 3; s++) {
            float *one = gpu_rows(k, fs, i0 + alone[s], 1, 0, 1, NULL);
            inv &= memcmp(one, got + (size_t)alone[s] * hq, hq * sizeof(float)) == 0;
            free(one);
        }
        float *mixed = gpu_rows(k, fs, i0, n, FL_MIN_ROWS + 3, FL_MIN_ROWS, NULL);
        inv &= memcmp(mixed, got, no * sizeof(float)) == 0;
        free(mixed);
        /* split by segments (one block each, then the fold) and not */
        for (int split = 0; split <= 1; split++) {
            g_split = split;
            float *cut = gpu_rows(k, fs, i0, n, 0, FL_MIN_ROWS, NULL);
            g_split = -1;
            inv &= memcmp(cut, got, no * sizeof(float)) == 0;
            free(cut);
        }
    }
    char what[96];
    snprintf(what, sizeof what, "%d/%dx%d %s win %" PRId64 " cap %g rows %" PRId64 "+%d q rnd",
             c->heads, c->kv_heads, c->hd, kv_type_name(c->kvt), c->window, c->softcap, i0, n);
    kc_report(k, "flash_prefill", what, err_over_v(got, ref_r, no, vmax),
              flash_bound(fs, s1, span, 0), inv, -1, 0);
    snprintf(what, sizeof what, "%d/%dx%d %s win %" PRId64 " cap %g rows %" PRId64 "+%d f32 q",
             c->heads, c->kv_heads, c->hd, kv_type_name(c->kvt), c->window, c->softcap, i0, n);
    kc_report(k, "flash_prefill", what, err_over_v(got, ref_f, no, vmax),
              flash_bound(fs, s1, span, unit_of(fs->kc.type)), -1, -1, 0);
    free(ref_f);
    free(ref_r);
    free(got);
}

static void flash_case_run(kc *k, const flash_case *c)
{
    flash_seq fs;
    int64_t len = (int64_t)c->chunk0 + c->chunk1;
    if (flash_seq_init(k, &fs, c, len, FL_MIN_ROWS + 3) != 0) {
        flash_seq_free(&fs);
        return;
    }
    if (c->chunk0 >= FL_MIN_ROWS)
        flash_chunk(k, &fs, c, 0, c->chunk0);
    else { /* a short first chunk: the prefix, stored by both backends */
        free(cpu_rows(k, &fs, 0, c->chunk0, 0));
        free(gpu_rows(k, &fs, 0, c->chunk0, 0, FL_MIN_ROWS, NULL));
    }
    flash_chunk(k, &fs, c, c->chunk0, c->chunk1);
    flash_seq_free(&fs);
}

/* A prefill chunk the dispatch keeps on the split-K kernel: the split-K
 * kernel's bound. flash_on: tune.flash during the step; min_rows: the
 * threshold. */
static void splitk_case(kc *k, const flash_case *c, int flash_on, int min_rows, const char *why)
{
    flash_seq fs;
    if (flash_seq_init(k, &fs, c, c->chunk0, 0) != 0) {
        flash_seq_free(&fs);
        return;
    }
    cuda_backend *cb = cuda_of(k->gpu);
    size_t no = (size_t)c->chunk0 * c->heads * c->hd;
    float *ref = cpu_rows(k, &fs, 0, c->chunk0, 0);
    int saved = cb->tune.flash;
    float *got;
    if (flash_on) {
        got = gpu_rows(k, &fs, 0, c->chunk0, 0, min_rows, NULL);
    } else {
        /* gpu_rows turns flash on; run the step here with it off. */
        size_t hq = (size_t)c->heads * c->hd, hkv = (size_t)c->kv_heads * c->hd;
        int n = c->chunk0;
        int32_t *pos = xmalloc((size_t)n * sizeof *pos);
        kv_seq **seqs = xmalloc((size_t)n * sizeof *seqs);
        for (int r = 0; r < n; r++) {
            pos[r] = r;
            seqs[r] = &fs.seq;
        }
        bk_batch rows = {n, pos, seqs};
        float *din = kc_dev(k, fs.q, (size_t)n * hq);
        float *dk = kc_dev(k, fs.k, (size_t)n * hkv), *dv = kc_dev(k, fs.v, (size_t)n * hkv);
        float *dout = k->gpu->ops->act_alloc(k->gpu, (size_t)n * hq);
        cuda_step st = cb->step;
        cb->step = (cuda_step){.active = 1, .prefill = 1, .n = n};
        cb->tune.flash = 0;
        k->gpu->ops->attention(k->gpu, &fs.a, &rows, din, dk, dv, dout);
        cb->step = st;
        cb->tune.flash = saved;
        got = kc_read(k, dout, (size_t)n * hq);
        kc_dev_free(k, din);
        kc_dev_free(k, dk);
        kc_dev_free(k, dv);
        kc_dev_free(k, dout);
        free(pos);
        free(seqs);
    }
    char what[96];
    snprintf(what, sizeof what, "%d/%dx%d %s rows %d: split-K (%s)", c->heads, c->kv_heads,
             c->hd, kv_type_name(c->kvt), c->chunk0, why);
    kc_report(k, "flash_prefill", what, kc_rel_err(got, ref, no), FL_BOUND_SPLITK, -1, -1, 0);
    free(ref);
    free(got);
    flash_seq_free(&fs);
}

/* The flash kernel with the other prefetch choice (launch_flash_prefill_
 * other) on the step gpu_rows left in the pool: n rows of fs's sequence
 * from position 0, q on the device. Timed; *same: whether its output is
 * the default kernel's bytes (got), as it must be (the same arithmetic). */
static double flash_other_us(kc *k, flash_seq *fs, int n, const float *dq, const float *got,
                             int *same)
{
    cuda_backend *cb = cuda_of(k->gpu);
    const kv_cache *kvc = fs->seq.cache;
    const bk_attn *a = &fs->a;
    size_t hq = (size_t)a->n_heads * a->head_dim;
    size_t len = 2 * (size_t)n + (size_t)fs->seq.n_blocks;
    int32_t *m = xmalloc(len * sizeof *m);
    for (int i = 0; i < n; i++) {
        m[i] = i;
        m[n + i] = 0;
    }
    memcpy(m + 2 * (size_t)n, fs->seq.blocks, (size_t)fs->seq.n_blocks * sizeof(int32_t));
    float *mf = xmalloc(len * sizeof *mf); /* kc_dev copies bytes */
    memcpy(mf, m, len * sizeof *m);
    float *dmeta = kc_dev(k, mf, len);
    float *dout = k->gpu->ops->act_alloc(k->gpu, (size_t)n * hq);
    cu_kv_pool pool = {cb->kv_k, cb->kv_v, (int)kvc->type, kvc->n_blocks, kvc->block_size,
                       kvc->kv_dim, (int64_t)kvc->row_bytes};
    cu_attn at = {.layer = a->layer, .n_heads = a->n_heads, .n_kv_heads = a->n_kv_heads,
                  .head_dim = a->head_dim, .scale = a->scale, .softcap = a->softcap,
                  .window = a->window};
    const int32_t *meta = (const int32_t *)dmeta;
    double us = -1;
    *same = 0;
    /* not split (its blocks fill the card), as the default kernel ran */
    cu_flash_cut cut = {cb->tune.flash_seg_keys, 0, 0, NULL};
    if (launch_flash_prefill_other(&pool, &at, meta, n, 0, n, dq, &cut, dout, cb->stream) ==
        cudaSuccess) {
        KC_TIME(k, us, launch_flash_prefill_other(&pool, &at, meta, n, 0, n, dq, &cut, dout,
                                                  cb->stream));
        float *o = kc_read(k, dout, (size_t)n * hq);
        *same = memcmp(o, got, (size_t)n * hq * sizeof(float)) == 0;
        free(o);
    }
    kc_dev_free(k, dmeta);
    kc_dev_free(k, dout);
    free(mf);
    free(m);
    return us;
}

/* The perf shapes: n rows from position 0 in one step, flash and split-K
 * timed; checked against the CPU on a sample of rows (all rows up to
 * 1024), whose K/V the CPU's cache gets directly. */
static void flash_perf_case(kc *k, int n)
{
    const flash_case c = {32, 8, 128, 0, 0.0f, KV_BF16, n, 0};
    flash_seq fs;
    if (flash_seq_init(k, &fs, &c, n, 0) != 0) {
        flash_seq_free(&fs);
        return;
    }
    cuda_backend *cb = cuda_of(k->gpu);
    size_t hq = (size_t)c.heads * c.hd, hkv = (size_t)c.kv_heads * c.hd;
    double us = -1, us_split = -1;
    float *got = gpu_rows(k, &fs, 0, n, 0, FL_MIN_ROWS, &us);
    /* split-K on the same step */
    int32_t *pos = xmalloc((size_t)n * sizeof *pos);
    kv_seq **seqs = xmalloc((size_t)n * sizeof *seqs);
    for (int r = 0; r < n; r++) {
        pos[r] = r;
        seqs[r] = &fs.seq;
    }
    bk_batch rows = {n, pos, seqs};
    float *din = kc_dev(k, fs.q, (size_t)n * hq);
    float *dk = kc_dev(k, fs.k, (size_t)n * hkv), *dv = kc_dev(k, fs.v, (size_t)n * hkv);
    float *dout = k->gpu->ops->act_alloc(k->gpu, (size_t)n * hq);
    cuda_step st = cb->step;
    int saved = cb->tune.flash;
    cb->step = (cuda_step){.active = 1, .prefill = 1, .n = n};
    cb->tune.flash = 0;
    KC_TIME(k, us_split, k->gpu->ops->attention(k->gpu, &fs.a, &rows, din, dk, dv, dout));
    cb->step = st;
    cb->tune.flash = saved;
    int same = 0;
    double us_other = flash_other_us(k, &fs, n, din, got, &same);
    kc_dev_free(k, din);
    kc_dev_free(k, dk);
    kc_dev_free(k, dv);
    kc_dev_free(k, dout);
    /* The CPU's cache: every row stored, then the sampled rows computed. */
    for (int64_t t = 0; t < n; t++) {
        size_t off = kv_offset(&fs.kc, &fs.seq, fs.a.layer, t);
        for (size_t e = 0; e < hkv; e++) {
            kvc_st16(fs.kc.k + off + 2 * e, kvc_f32_to_bf16(fs.k[(size_t)t * hkv + e]));
            kvc_st16(fs.kc.v + off + 2 * e, kvc_f32_to_bf16(fs.v[(size_t)t * hkv + e]));
        }
    }
    int step = n <= 1024 ? 1 : 331;
    double err = 0, bound = 0, vmax = vmax_of(&fs);
    for (int64_t i = 0; i < n; i += step) {
        int m = step == 1 ? n : 1;
        if (step != 1 && i + step >= n)
            i = n - 1; /* the last row: the longest span */
        float *ref = cpu_rows(k, &fs, i, m, 1);
        int64_t span;
        double s1 = score_mass(&fs, i, m, &span);
        double e = err_over_v(got + (size_t)i * hq, ref, (size_t)m * hq, vmax);
        double b = flash_bound(&fs, s1, span, 0);
        /* the smallest margin over the sample */
        if (err == 0 || e / b > err / bound) {
            err = e;
            bound = b;
        }
        free(ref);
        if (step == 1)
            break;
    }
    double flops = 0; /* QK^T and PV over the causal triangle */
    for (int64_t i = 0; i < n; i++)
        flops += 4.0 * (double)(i + 1) * (double)hq;
    char what[96];
    snprintf(what, sizeof what, "32/8x128 bf16 rows 0+%d q rnd%s", n, step == 1 ? "" : " (sample)");
    /* bytes: q and out in f32, K and V once */
    kc_report(k, "flash_prefill", what, err, bound, -1, us,
              (double)n * (8.0 * (double)hq + 4.0 * (double)hkv));
    if (k->o->perf && us > 0)
        fprintf(k->out, "  flash %.1f us (%.1f TFLOP/s), split-K %.1f us: %.2fx; the other "
                "prefetch choice %.1f us (%s bytes)\n", us, flops / (us * 1e-6) / 1e12,
                us_split, us_split / us, us_other, same ? "the same" : "OTHER");
    kc_report_ok(k, "flash_prefill", "the other prefetch choice: the same bytes", same,
                 same ? "" : "its output differs");
    free(got);
    free(pos);
    free(seqs);
    flash_seq_free(&fs);
}

/* A short chunk deep in the context (a conversation's next turn over a
 * cached prompt): n rows after `depth` positions, the launch split by
 * segments (the default: its tiles are few) and not, timed; the same
 * bytes both ways, the last row checked against the CPU. */
static void flash_perf_deep(kc *k, int depth, int n)
{
    const flash_case c = {32, 8, 128, 0, 0.0f, KV_BF16, depth, n};
    flash_seq fs;
    int64_t len = (int64_t)depth + n;
    if (flash_seq_init(k, &fs, &c, len, 0) != 0) {
        flash_seq_free(&fs);
        return;
    }
    size_t hq = (size_t)c.heads * c.hd, hkv = (size_t)c.kv_heads * c.hd;
    free(gpu_rows(k, &fs, 0, depth, 0, FL_MIN_ROWS, NULL)); /* the prefix's K/V */
    double us = -1, us_one = -1;
    float *got = gpu_rows(k, &fs, depth, n, 0, FL_MIN_ROWS, &us);
    g_split = 0;
    float *one = gpu_rows(k, &fs, depth, n, 0, FL_MIN_ROWS, &us_one);
    g_split = -1;
    int same = memcmp(got, one, (size_t)n * hq * sizeof(float)) == 0;
    for (int64_t t = 0; t < len; t++) {
        size_t off = kv_offset(&fs.kc, &fs.seq, fs.a.layer, t);
        for (size_t e = 0; e < hkv; e++) {
            kvc_st16(fs.kc.k + off + 2 * e, kvc_f32_to_bf16(fs.k[(size_t)t * hkv + e]));
            kvc_st16(fs.kc.v + off + 2 * e, kvc_f32_to_bf16(fs.v[(size_t)t * hkv + e]));
        }
    }
    float *ref = cpu_rows(k, &fs, len - 1, 1, 1);
    int64_t span;
    double s1 = score_mass(&fs, len - 1, 1, &span);
    double err = err_over_v(got + (size_t)(n - 1) * hq, ref, hq, vmax_of(&fs));
    char what[96];
    snprintf(what, sizeof what, "32/8x128 bf16 rows %d+%d split (last row)", depth, n);
    kc_report(k, "flash_prefill", what, err, flash_bound(&fs, s1, span, 0), same, us,
              (double)n * 8.0 * (double)hq + (double)len * 4.0 * (double)hkv);
    if (us > 0)
        fprintf(k->out, "  split by segments %.1f us, one block a tile %.1f us: %.2fx (%s bytes)\n",
                us, us_one, us_one / us, same ? "the same" : "OTHER");
    free(ref);
    free(got);
    free(one);
    flash_seq_free(&fs);
}

void kc_check_flash_prefill(kc *k)
{
    cuda_backend *cb = cuda_of(k->gpu);
    /* Compute capability 0 is the CPU emulation (tests/gpu/emulate.sh),
     * which runs the kernel as host code; a real card needs sm_80. */
    if (cb->info.cc_major != 0 && cb->info.cc_major < 8) {
        kc_report_skip(k, "flash_prefill", "bf16 tensor cores", "needs sm_80");
        return;
    }
    static const flash_case cases[] = {
        {4, 4, 64, 0, 0.0f, KV_BF16, 37, 50},     /* G 1, odd rows */
        {8, 2, 128, 0, 0.0f, KV_BF16, 70, 45},    /* G 4: the Qwen3 head */
        {8, 1, 128, 0, 0.0f, KV_F16, 33, 64},     /* G 8, f16 */
        {4, 2, 256, 37, 0.0f, KV_BF16, 100, 29},  /* sliding window, head 256 */
        {4, 2, 64, 0, 0.5f, KV_F16, 20, 47},      /* soft-capping */
        {8, 4, 256, 60, 50.0f, KV_BF16, 64, 81},  /* gemma3-like: window and cap */
        {6, 2, 64, 0, 0.0f, KV_BF16, 1, 16},      /* one row of prefix, the threshold */
        {4, 2, 128, 0, 0.0f, KV_BF16, 130, 17},   /* a deep chunk: three key blocks */
    };
    g_seg_keys = FP_KEYS;
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(cases); i++)
        flash_case_run(k, &cases[i]);
    g_seg_keys = 0;
    const flash_case f32 = {8, 2, 64, 0, 0.0f, KV_F32, 40, 0};
    const flash_case q8 = {8, 2, 64, 0, 0.0f, KV_Q8_0, 40, 0};
    const flash_case hd80 = {4, 2, 80, 0, 0.0f, KV_BF16, 40, 0};
    /* the backend's own threshold (32) */
    const int def_min = cb->tune.flash_min_rows;
    const flash_case few = {8, 2, 64, 0, 0.0f, KV_BF16, def_min - 1, 0};
    const flash_case off = {8, 2, 128, 0, 0.0f, KV_BF16, 40, 0};
    splitk_case(k, &f32, 1, FL_MIN_ROWS, "f32 KV");
    splitk_case(k, &q8, 1, FL_MIN_ROWS, "q8_0 KV");
    splitk_case(k, &hd80, 1, FL_MIN_ROWS, "head 80");
    splitk_case(k, &few, 1, def_min, "under the threshold");
    splitk_case(k, &off, 0, FL_MIN_ROWS, "no tensor cores");
    if (k->o->perf) {
        flash_perf_case(k, 512);
        flash_perf_case(k, 8192);
        flash_perf_deep(k, 8192, 96);
        flash_perf_deep(k, 7680, 512);
    }
}
