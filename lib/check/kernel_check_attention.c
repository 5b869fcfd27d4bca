/* The kernel check's attention family: KV append and attention over the
 * paged cache, on both kernels (launch_attention_decode where it takes the
 * shape, the older launch_attention for the shapes it does not), against
 * the CPU backend's attention on the same cache contents.
 *
 * Short cases prefill three sequences in chunks through the op (so every
 * row of a prompt chunk is checked too), then decode one row of each in
 * one batch. Long cases fill the cache directly (rows through the CPU's
 * codecs, copied to the device pool: the same bytes both backends store)
 * up to depths of thousands of keys, where a row has many splits, then
 * decode a batch of sequences at different depths. Every decode batch is
 * run again with each row alone and in reverse order, which must give
 * the same bytes (batch invariance). The decode kernel also runs a few
 * batches with the most splits of the fewest keys (a row of many splits,
 * the last one short). With --perf, a Qwen3-8B layer (32 / 8 heads of
 * 128, bf16) for one row at depth 512, 8192 and 32768 and for 64 rows at
 * about 512 is timed under several floors of keys a split has, and the
 * decode kernel alone on graph buckets' grids. */
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
#include "kernels/attention.cuh"

#define BOUND_DOT 1e-5
#define MAX_ROWS 64

typedef struct {
    int heads, kv_heads, hd;
    int64_t window;
    float softcap;
    kv_type kvt;
} attn_case;

/* The kernel cuda_op_attention picks for the case (cuda_attention.c):
 * "new" (the split-K decode kernel) where it takes the shape, else "old". */
static const char *kernel_name(const attn_case *c)
{
    return attn_decode_fits(c->heads, c->kv_heads, c->hd) ? "new" : "old";
}

/* Runs rows through both backends' attention; returns the error, the GPU
 * output in *got (malloc'd). */
static double attn_step(kc *k, const bk_attn *a, const bk_batch *rows, float **got_out)
{
    int n = rows->n;
    size_t nq = (size_t)n * a->n_heads * a->head_dim, nkv = (size_t)n * a->n_kv_heads * a->head_dim;
    float *in = xmalloc((nq + 2 * nkv) * sizeof(float)), *ref = xmalloc(nq * sizeof(float));
    kc_fill(k, in, nq + 2 * nkv, 1.5f);
    k->cpu->ops->attention(k->cpu, a, rows, in, in + nq, in + nq + nkv, ref);
    float *din = kc_dev(k, in, nq + 2 * nkv), *dout = k->gpu->ops->act_alloc(k->gpu, nq);
    k->gpu->ops->attention(k->gpu, a, rows, din, din + nq, din + nq + nkv, dout);
    float *got = kc_read(k, dout, nq);
    double err = kc_rel_err(got, ref, nq);
    kc_dev_free(k, din);
    kc_dev_free(k, dout);
    free(in);
    free(ref);
    if (got_out)
        *got_out = got;
    else
        free(got);
    return err;
}

/* The same rows as in `batch`, with the same q/k/v, run on the GPU in
 * another grouping: each alone, and all in reverse order. */
static int attn_regroup_identical(kc *k, const bk_attn *a, const bk_batch *batch, const float *in,
                                  const float *got)
{
    int n = batch->n, hq = a->n_heads * a->head_dim, hkv = a->n_kv_heads * a->head_dim;
    int ok = n <= MAX_ROWS;
    if (!ok)
        return 0;
    float *dout = k->gpu->ops->act_alloc(k->gpu, (size_t)n * hq);
    float *rin = xmalloc((size_t)n * (hq + 2 * hkv) * sizeof(float));
    for (int i = 0; i < n; i++) {
        float *d = kc_dev(k, in + (size_t)i * hq, (size_t)hq);
        float *dk = kc_dev(k, in + (size_t)n * hq + (size_t)i * hkv, (size_t)hkv);
        float *dv = kc_dev(k, in + (size_t)n * (hq + hkv) + (size_t)i * hkv, (size_t)hkv);
        bk_batch one = {1, batch->pos + i, batch->seq + i};
        k->gpu->ops->attention(k->gpu, a, &one, d, dk, dv, dout);
        float *g = kc_read(k, dout, (size_t)hq);
        ok &= memcmp(g, got + (size_t)i * hq, (size_t)hq * 4) == 0;
        free(g);
        kc_dev_free(k, d);
        kc_dev_free(k, dk);
        kc_dev_free(k, dv);
    }
    int32_t rpos[MAX_ROWS];
    kv_seq *rseq[MAX_ROWS];
    for (int i = 0; i < n; i++) {
        int j = n - 1 - i;
        rpos[i] = batch->pos[j];
        rseq[i] = batch->seq[j];
        memcpy(rin + (size_t)i * hq, in + (size_t)j * hq, (size_t)hq * 4);
        memcpy(rin + (size_t)n * hq + (size_t)i * hkv, in + (size_t)n * hq + (size_t)j * hkv,
               (size_t)hkv * 4);
        memcpy(rin + (size_t)n * (hq + hkv) + (size_t)i * hkv,
               in + (size_t)n * (hq + hkv) + (size_t)j * hkv, (size_t)hkv * 4);
    }
    bk_batch rev = {n, rpos, rseq};
    float *din = kc_dev(k, rin, (size_t)n * (hq + 2 * hkv));
    k->gpu->ops->attention(k->gpu, a, &rev, din, din + (size_t)n * hq,
                           din + (size_t)n * (hq + hkv), dout);
    float *g = kc_read(k, dout, (size_t)n * hq);
    for (int i = 0; i < n; i++)
        ok &= memcmp(g + (size_t)i * hq, got + (size_t)(n - 1 - i) * hq, (size_t)hq * 4) == 0;
    free(g);
    free(rin);
    kc_dev_free(k, din);
    kc_dev_free(k, dout);
    return ok;
}

/* Whether the device pool holds the same bytes as the CPU's cache in
 * every row both stored (positions [0, upto[s]] of layer `layer`): both
 * backends store through numerics/kv_codec.h, so they must. */
static int kv_bytes_identical(kc *k, const kv_cache *kv, const kv_seq *seqs, const int64_t *upto,
                              int n_seqs, int layer)
{
    cuda_backend *cb = cuda_of(k->gpu);
    size_t total = (size_t)kv->n_layers * (size_t)kv->n_blocks * (size_t)kv->block_size *
                   kv->row_bytes;
    uint8_t *dk = xmalloc(total), *dv = xmalloc(total);
    int ok = cudaMemcpyAsync(dk, cb->kv_k, total, cudaMemcpyDeviceToHost, cb->stream) ==
                 cudaSuccess &&
             cudaMemcpyAsync(dv, cb->kv_v, total, cudaMemcpyDeviceToHost, cb->stream) ==
                 cudaSuccess &&
             cudaStreamSynchronize(cb->stream) == cudaSuccess;
    for (int s = 0; s < n_seqs && ok; s++)
        for (int64_t t = 0; t <= upto[s] && ok; t++) {
            size_t off = kv_offset(kv, &seqs[s], layer, t);
            ok = memcmp(dk + off, kv->k + off, kv->row_bytes) == 0 &&
                 memcmp(dv + off, kv->v + off, kv->row_bytes) == 0;
        }
    free(dk);
    free(dv);
    return ok;
}

/* Set by attention_perf: decode_batch then also times the op as a graph
 * (its shapes run in one group, nothing uploaded once they have run). */
static int perf_graphed;

/* --perf: the op's launches for these rows, 20 times, captured in one
 * CUDA graph and replayed, microseconds a time: the device's time for
 * them without the host's launch gaps (decode steps run as graphs).
 * Nothing in the op allocates or uploads once it has run on these rows.
 * -1 when the capture fails. */
static double attn_time_graphed(kc *k, const bk_attn *a, const bk_batch *rows, const float *q,
                                const float *kk, const float *v, float *out)
{
    enum { REPS = 20 };
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    double us = -1;
    if (cudaStreamBeginCapture(k->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return -1;
    for (int r = 0; r < REPS; r++)
        k->gpu->ops->attention(k->gpu, a, rows, q, kk, v, out);
    cudaError_t rc = cudaStreamEndCapture(k->stream, &g);
    float ms = 0;
    if (rc == cudaSuccess && cudaGraphInstantiate(&ge, g, 0) == cudaSuccess &&
        cudaGraphLaunch(ge, k->stream) == cudaSuccess &&
        cudaEventRecord(k->ev0, k->stream) == cudaSuccess &&
        cudaGraphLaunch(ge, k->stream) == cudaSuccess &&
        cudaEventRecord(k->ev1, k->stream) == cudaSuccess &&
        cudaEventSynchronize(k->ev1) == cudaSuccess &&
        cudaEventElapsedTime(&ms, k->ev0, k->ev1) == cudaSuccess)
        us = (double)ms * 1000.0 / REPS;
    if (ge)
        cudaGraphExecDestroy(ge);
    if (g)
        cudaGraphDestroy(g);
    cudaGetLastError();
    return us;
}

/* One decode row per sequence (at position len[s]) in one batch, against
 * the CPU, then regrouped; reported as "<label>". With perf, timed. */
static void decode_batch(kc *k, const bk_attn *a, const kv_cache *kv, kv_seq *seqs,
                         const int64_t *len, int n_seqs, const char *label, float **got_out)
{
    int32_t dpos[MAX_ROWS];
    kv_seq *dseq[MAX_ROWS];
    for (int s = 0; s < n_seqs; s++) {
        dpos[s] = (int32_t)len[s];
        dseq[s] = &seqs[s];
    }
    bk_batch dec = {n_seqs, dpos, dseq};
    int hq = a->n_heads * a->head_dim;
    int64_t kv_dim = kv->kv_dim;
    size_t nin = (size_t)n_seqs * (hq + 2 * kv_dim);
    float *in = xmalloc(nin * sizeof(float)), *ref = xmalloc((size_t)n_seqs * hq * sizeof(float));
    kc_fill(k, in, nin, 1.5f);
    k->cpu->ops->attention(k->cpu, a, &dec, in, in + (size_t)n_seqs * hq,
                           in + (size_t)n_seqs * (hq + kv_dim), ref);
    float *din = kc_dev(k, in, nin), *dout = k->gpu->ops->act_alloc(k->gpu, (size_t)n_seqs * hq);
    k->gpu->ops->attention(k->gpu, a, &dec, din, din + (size_t)n_seqs * hq,
                           din + (size_t)n_seqs * (hq + kv_dim), dout);
    float *got = kc_read(k, dout, (size_t)n_seqs * hq);
    double err = kc_rel_err(got, ref, (size_t)n_seqs * hq);
    double us = -1, eager = -1;
    char lab[160];
    snprintf(lab, sizeof lab, "%s", label);
    if (k->o->perf) { /* re-storing the same K/V rows changes nothing */
        KC_TIME(k, eager, k->gpu->ops->attention(k->gpu, a, &dec, din,
                                                 din + (size_t)n_seqs * hq,
                                                 din + (size_t)n_seqs * (hq + kv_dim), dout));
        if (perf_graphed)
            us = attn_time_graphed(k, a, &dec, din, din + (size_t)n_seqs * hq,
                                   din + (size_t)n_seqs * (hq + kv_dim), dout);
        snprintf(lab, sizeof lab, "%s eager %.1f", label, eager);
        if (us < 0)
            us = eager;
    }
    int inv = attn_regroup_identical(k, a, &dec, in, got);
    double kv_bytes = 0, widest = 0;
    for (int s = 0; s < n_seqs; s++) {
        int64_t span = a->window > 0 && a->window < len[s] + 1 ? a->window : len[s] + 1;
        kv_bytes += 2.0 * (double)span * (double)kv->row_bytes;
        widest = (double)span > widest ? (double)span : widest;
    }
    /* The error is relative to the largest output, an average of more V
     * rows the deeper the row: both sides' f32 rounding grows against it
     * like sqrt(span) (one row at 32768 keys: 0.7e-5 to 1.01e-5 on the
     * H200, old and new kernels alike), so past 8192 keys the bound does. */
    double bound = BOUND_DOT * (widest > 8192 ? sqrt(widest / 8192) : 1.0);
    kc_report(k, "attention", lab, err, bound, inv, us, kv_bytes);
    kc_dev_free(k, din);
    kc_dev_free(k, dout);
    free(in);
    free(ref);
    if (got_out)
        *got_out = got;
    else
        free(got);
}

static void attention_case(kc *k, const attn_case *c)
{
    enum { NSEQ = 3, CHUNK = 64, BS = 16 };
    const int64_t len[NSEQ] = {300, 5, 130};
    int64_t kv_dim = (int64_t)c->kv_heads * c->hd;
    kv_cache kc_;
    memra_err err;
    int n_blocks = 0;
    for (int s = 0; s < NSEQ; s++)
        n_blocks += (int)((len[s] + BS) / BS) + 1;
    if (kv_cache_init(&kc_, c->kvt, 2, kv_dim, BS, n_blocks, &err) != 0 ||
        k->gpu->ops->kv_prepare(k->gpu, &kc_, &err) != 0) {
        kc_report_ok(k, "attention", "KV cache", 0, err.msg);
        return;
    }
    kv_seq seqs[NSEQ];
    for (int s = 0; s < NSEQ; s++) {
        kv_seq_init(&seqs[s], &kc_);
        kv_seq_reserve(&seqs[s], len[s] + 1, &err);
    }
    bk_attn a = {.layer = 1, .n_heads = c->heads, .n_kv_heads = c->kv_heads, .head_dim = c->hd,
                 .scale = 1.0f / sqrtf((float)c->hd), .softcap = c->softcap, .window = c->window};
    /* Prefill every sequence in chunks (the blocks of the three interleave). */
    double err_pre = 0;
    int32_t pos[CHUNK];
    kv_seq *rs[CHUNK];
    for (int64_t p0 = 0; p0 < 300; p0 += CHUNK)
        for (int s = 0; s < NSEQ; s++) {
            if (p0 >= len[s])
                continue;
            int nr = (int)(len[s] - p0 < CHUNK ? len[s] - p0 : CHUNK);
            for (int i = 0; i < nr; i++) {
                pos[i] = (int32_t)(p0 + i);
                rs[i] = &seqs[s];
            }
            bk_batch rows = {nr, pos, rs};
            double e = attn_step(k, &a, &rows, NULL);
            err_pre = e > err_pre ? e : err_pre;
        }
    char what[96];
    snprintf(what, sizeof what, "%s %d/%dx%d %s win %" PRId64 " cap %g pre", kernel_name(c),
             c->heads, c->kv_heads, c->hd, kv_type_name(c->kvt), c->window, c->softcap);
    kc_report(k, "attention", what, err_pre, BOUND_DOT, -1, -1, 0);
    snprintf(what, sizeof what, "%s %d/%dx%d %s win %" PRId64 " cap %g dec3", kernel_name(c),
             c->heads, c->kv_heads, c->hd, kv_type_name(c->kvt), c->window, c->softcap);
    decode_batch(k, &a, &kc_, seqs, len, NSEQ, what, NULL);
    snprintf(what, sizeof what, "%s %d/%dx%d %s stored bytes", kernel_name(c), c->heads,
             c->kv_heads, c->hd, kv_type_name(c->kvt));
    kc_report_ok(k, "attention", what, kv_bytes_identical(k, &kc_, seqs, len, NSEQ, a.layer),
                 "K/V rows the same bytes as the CPU's");
    for (int s = 0; s < NSEQ; s++)
        kv_seq_free(&seqs[s]);
    kv_cache_free(&kc_);
}

/* Random rows [0, len) of `layer` in the host cache's K and V, through
 * the codecs both backends store with. */
static void fill_rows(kc *k, kv_cache *kv, const kv_seq *s, int layer, int64_t len)
{
    float *x = xmalloc((size_t)kv->kv_dim * sizeof(float));
    for (int side = 0; side < 2; side++)
        for (int64_t t = 0; t < len; t++) {
            kc_fill(k, x, (size_t)kv->kv_dim, 1.5f);
            uint8_t *dst = (side ? kv->v : kv->k) + kv_offset(kv, s, layer, t);
            switch (kv->type) {
            case KV_F32: memcpy(dst, x, (size_t)kv->kv_dim * 4); break;
            case KV_F16:
                for (int64_t i = 0; i < kv->kv_dim; i++)
                    kvc_st16(dst + 2 * i, kvc_f32_to_f16(x[i]));
                break;
            case KV_BF16:
                for (int64_t i = 0; i < kv->kv_dim; i++)
                    kvc_st16(dst + 2 * i, kvc_f32_to_bf16(x[i]));
                break;
            default:
                for (int64_t i = 0; i < kv->kv_dim; i += KV_Q8_0_BLOCK)
                    kvc_q8_0_block(x + i, dst + (i / KV_Q8_0_BLOCK) * KV_Q8_0_BYTES);
                break;
            }
        }
    free(x);
}

/* A cache of n_seqs sequences filled to len[s] on both backends (the
 * device pool a copy of the host's). Returns 0, or -1 reported. */
static int long_cache(kc *k, kv_cache *kv, kv_seq *seqs, const attn_case *c, const int64_t *len,
                      int n_seqs)
{
    enum { BS = 16 };
    memra_err err;
    int n_blocks = 0;
    for (int s = 0; s < n_seqs; s++)
        n_blocks += (int)((len[s] + BS) / BS) + 1;
    if (kv_cache_init(kv, c->kvt, 2, (int64_t)c->kv_heads * c->hd, BS, n_blocks, &err) != 0 ||
        k->gpu->ops->kv_prepare(k->gpu, kv, &err) != 0) {
        kc_report_ok(k, "attention", "KV cache", 0, err.msg);
        return -1;
    }
    /* Sequences' blocks interleave: reserve in rounds of 200 tokens. */
    for (int s = 0; s < n_seqs; s++)
        kv_seq_init(&seqs[s], kv);
    for (int64_t r = 200;; r += 200) {
        int more = 0;
        for (int s = 0; s < n_seqs; s++) {
            int64_t want = r < len[s] + 1 ? r : len[s] + 1;
            if (kv_seq_reserve(&seqs[s], want, &err) != 0) {
                kc_report_ok(k, "attention", "KV reserve", 0, err.msg);
                return -1;
            }
            more |= r < len[s] + 1;
        }
        if (!more)
            break;
    }
    for (int s = 0; s < n_seqs; s++)
        fill_rows(k, kv, &seqs[s], 1, len[s]);
    cuda_backend *cb = cuda_of(k->gpu);
    size_t total = (size_t)kv->n_layers * (size_t)kv->n_blocks * (size_t)kv->block_size *
                   kv->row_bytes;
    if (cudaMemcpyAsync(cb->kv_k, kv->k, total, cudaMemcpyHostToDevice, cb->stream) !=
            cudaSuccess ||
        cudaMemcpyAsync(cb->kv_v, kv->v, total, cudaMemcpyHostToDevice, cb->stream) !=
            cudaSuccess ||
        cudaStreamSynchronize(cb->stream) != cudaSuccess) {
        kc_report_ok(k, "attention", "KV upload", 0, "cudaMemcpy failed");
        return -1;
    }
    return 0;
}

static void long_free(kv_cache *kv, kv_seq *seqs, int n_seqs)
{
    for (int s = 0; s < n_seqs; s++)
        kv_seq_free(&seqs[s]);
    kv_cache_free(kv);
}

/* Sequences at the depths len[] decoded in one batch (depths that are no
 * multiples of the block size nor of the split). */
static void attention_long_case(kc *k, const attn_case *c, const int64_t *len, int n_seqs)
{
    kv_cache kv;
    kv_seq seqs[MAX_ROWS];
    if (long_cache(k, &kv, seqs, c, len, n_seqs) != 0)
        return;
    bk_attn a = {.layer = 1, .n_heads = c->heads, .n_kv_heads = c->kv_heads, .head_dim = c->hd,
                 .scale = 1.0f / sqrtf((float)c->hd), .softcap = c->softcap, .window = c->window};
    int64_t deepest = 0;
    for (int s = 0; s < n_seqs; s++)
        deepest = len[s] > deepest ? len[s] : deepest;
    const cuda_tuning *t = &cuda_of(k->gpu)->tune;
    char what[128];
    snprintf(what, sizeof what, "%s %d/%dx%d %s win %" PRId64 " cap %g dec%d<=%" PRId64 "%s",
             kernel_name(c), c->heads, c->kv_heads, c->hd, kv_type_name(c->kvt), c->window,
             c->softcap, n_seqs, deepest, t->attn_splits ? " S set" : "");
    decode_batch(k, &a, &kv, seqs, len, n_seqs, what, NULL);
    long_free(&kv, seqs, n_seqs);
}

/* One batch with ATTN_SPLITS_MAX splits of ATTN_SPLIT_UNIT keys: a row
 * of many splits, the last one short (the defaults are used everywhere
 * else). */
static void attention_many_splits(kc *k, const attn_case *c, const int64_t *len, int n_seqs)
{
    kv_cache kv;
    kv_seq seqs[MAX_ROWS];
    if (long_cache(k, &kv, seqs, c, len, n_seqs) != 0)
        return;
    bk_attn a = {.layer = 1, .n_heads = c->heads, .n_kv_heads = c->kv_heads, .head_dim = c->hd,
                 .scale = 1.0f / sqrtf((float)c->hd), .softcap = c->softcap, .window = c->window};
    cuda_tuning *t = &cuda_of(k->gpu)->tune;
    const cuda_tuning t0 = *t;
    char what[128];
    t->attn_splits = ATTN_SPLITS_MAX;
    t->attn_split_min = ATTN_SPLIT_UNIT;
    snprintf(what, sizeof what, "%s %d/%dx%d %s cap %g S%d F%d dec%d", kernel_name(c), c->heads,
             c->kv_heads, c->hd, kv_type_name(c->kvt), c->softcap, t->attn_splits,
             t->attn_split_min, n_seqs);
    decode_batch(k, &a, &kv, seqs, len, n_seqs, what, NULL);
    *t = t0;
    long_free(&kv, seqs, n_seqs);
}

/* --perf: the decode kernel alone (launch_attention_decode, no KV
 * append) on a grid of `grid` splits, which may be more than the rows
 * need (a graph's bucket: blocks past a row's splits return at once),
 * 20 launches captured in a graph; microseconds a launch, -1 on failure. */
static double decode_grid_us(kc *k, const bk_attn *a, const kv_cache *kv, const kv_seq *seqs,
                             const int64_t *len, int n, int splits, int grid)
{
    cuda_backend *cb = cuda_of(k->gpu);
    const cuda_tuning *t = &cb->tune;
    size_t len_meta = 2 * (size_t)n;
    for (int i = 0; i < n; i++)
        len_meta += (size_t)seqs[i].n_blocks;
    int32_t *m = xmalloc(len_meta * sizeof(int32_t));
    size_t at = 2 * (size_t)n;
    for (int i = 0; i < n; i++) {
        m[i] = (int32_t)len[i];
        m[n + i] = (int32_t)(at - 2 * (size_t)n);
        memcpy(m + at, seqs[i].blocks, (size_t)seqs[i].n_blocks * sizeof(int32_t));
        at += (size_t)seqs[i].n_blocks;
    }
    const size_t np = attn_partials_floats(n, a->n_heads, a->head_dim, grid);
    const size_t nq = (size_t)n * (size_t)a->n_heads * (size_t)a->head_dim;
    void *dm = NULL, *dp = NULL, *dq = NULL, *dout = NULL, *dc = NULL;
    const size_t ncnt = attn_decode_counters(n, a->n_kv_heads);
    float *hq = xmalloc(nq * sizeof(float));
    kc_fill(k, hq, nq, 1.5f);
    double us = -1;
    cudaGraph_t g = NULL;
    cudaGraphExec_t ge = NULL;
    float ms = 0;
    cu_kv_pool pool = {cb->kv_k, cb->kv_v, (int)kv->type, kv->n_blocks, kv->block_size,
                       kv->kv_dim, (int64_t)kv->row_bytes};
    cu_attn at_ = {a->layer, a->n_heads, a->n_kv_heads, a->head_dim, a->scale, a->softcap,
                   a->window, splits, t->attn_split_min, NULL};
    if (cudaMalloc(&dm, len_meta * 4) == cudaSuccess && cudaMalloc(&dp, np * 4) == cudaSuccess &&
        cudaMalloc(&dq, nq * 4) == cudaSuccess &&
        cudaMalloc(&dout, nq * 4) == cudaSuccess && cudaMalloc(&dc, ncnt * 4) == cudaSuccess &&
        cudaMemsetAsync(dc, 0, ncnt * 4, k->stream) == cudaSuccess &&
        cudaMemcpyAsync(dm, m, len_meta * 4, cudaMemcpyHostToDevice, k->stream) == cudaSuccess &&
        cudaMemcpyAsync(dq, hq, nq * 4, cudaMemcpyHostToDevice, k->stream) == cudaSuccess &&
        cudaStreamSynchronize(k->stream) == cudaSuccess &&
        cudaStreamBeginCapture(k->stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        cudaError_t rc = cudaSuccess;
        for (int r = 0; r < 20 && rc == cudaSuccess; r++)
            rc = launch_attention_decode(&pool, &at_, dm, n, dq, grid, dp, dc, dout, k->stream);
        cudaError_t rc2 = cudaStreamEndCapture(k->stream, &g);
        if (rc == cudaSuccess && rc2 == cudaSuccess &&
            cudaGraphInstantiate(&ge, g, 0) == cudaSuccess &&
            cudaGraphLaunch(ge, k->stream) == cudaSuccess &&
            cudaEventRecord(k->ev0, k->stream) == cudaSuccess &&
            cudaGraphLaunch(ge, k->stream) == cudaSuccess &&
            cudaEventRecord(k->ev1, k->stream) == cudaSuccess &&
            cudaEventSynchronize(k->ev1) == cudaSuccess &&
            cudaEventElapsedTime(&ms, k->ev0, k->ev1) == cudaSuccess)
            us = (double)ms * 1000.0 / 20;
    }
    if (ge)
        cudaGraphExecDestroy(ge);
    if (g)
        cudaGraphDestroy(g);
    cudaGetLastError();
    cudaFree(dm);
    cudaFree(dp);
    cudaFree(dq);
    cudaFree(dout);
    cudaFree(dc);
    free(m);
    free(hq);
    return us;
}

/* --perf: one layer's attention of shape c (bf16 KV) for n rows at about
 * depth `depth` (64 rows: depth - 16 to depth + 16) under each of the
 * first n_mins floors F of keys a split has below, on the same cache, for
 * the A/B of docs/decisions/0008: the op (KV append and attention) timed
 * as a graph of 20, and eagerly; then the decode kernel alone on the
 * rows' own grid, on the graph bucket's grid (attn_bucket_splits) and on
 * the grid buckets had before the floor (the bucket's chunks, up to 128). */
static void attention_perf(kc *k, const attn_case *cp, int64_t depth, int n, int n_mins)
{
    static const int split_mins[] = {64, 128, 192, 256};
    const attn_case c = *cp;
    kv_cache kv;
    kv_seq seqs[MAX_ROWS];
    int64_t len[MAX_ROWS];
    for (int i = 0; i < n; i++)
        len[i] = n == 1 ? depth : depth - 16 + (i * 7) % 33;
    if (long_cache(k, &kv, seqs, &c, len, n) != 0)
        return;
    bk_attn a = {.layer = 1, .n_heads = c.heads, .n_kv_heads = c.kv_heads, .head_dim = c.hd,
                 .scale = 1.0f / sqrtf((float)c.hd)};
    cuda_backend *cb = cuda_of(k->gpu);
    cuda_tuning *t = &cb->tune;
    const cuda_tuning t0 = *t;
    for (int i = 0; i < n_mins && i < (int)MEMRA_ARRAY_LEN(split_mins); i++) {
        char what[128];
        t->attn_split_min = split_mins[i];
        snprintf(what, sizeof what, "%s %d/%dx%d bf16 %dx d%" PRId64 " F%d", kernel_name(&c),
                 c.heads, c.kv_heads, c.hd, n, depth, (int)attn_split_floor(t->attn_split_min));
        perf_graphed = 1;
        decode_batch(k, &a, &kv, seqs, len, n, what, NULL);
        perf_graphed = 0;
        /* The kernel alone, on the rows' grid and the graph buckets'. */
        int s = cuda_decode_splits(cb, KV_BF16, c.heads, c.kv_heads, c.hd);
        int need = 1, chunks = 1;
        for (int r = 0; r < n; r++) {
            int x = attn_row_splits(len[r], 0, s, t->attn_split_min);
            need = x > need ? x : need;
            x = attn_row_chunks(len[r], 0);
            chunks = x > chunks ? x : chunks;
        }
        int b = 1;
        while (b < chunks)
            b <<= 1;
        const int grids[3] = {need, attn_bucket_splits(b, s, t->attn_split_min),
                              b < ATTN_SPLITS_MAX ? b : ATTN_SPLITS_MAX};
        fprintf(k->out, "%-13s   kernel alone: grid %d %.2f us, bucket %d %.2f us, old bucket %d "
                "%.2f us\n", "attention", grids[0],
                decode_grid_us(k, &a, &kv, seqs, len, n, s, grids[0]), grids[1],
                decode_grid_us(k, &a, &kv, seqs, len, n, s, grids[1]), grids[2],
                decode_grid_us(k, &a, &kv, seqs, len, n, s, grids[2]));
    }
    *t = t0;
    long_free(&kv, seqs, n);
}

void kc_check_attention(kc *k)
{
    /* The last seven: more than 8 query heads a KV head or a head_dim not
     * a multiple of 8, the shapes only the older kernel takes; every KV
     * type, a window and soft-capping on it too. */
    static const attn_case cases[] = {
        {8, 2, 64, 0, 0.0f, KV_F32},     {8, 2, 64, 0, 0.0f, KV_F16},
        {8, 2, 64, 0, 0.0f, KV_BF16},    {8, 2, 64, 0, 0.0f, KV_Q8_0},
        {4, 4, 128, 37, 0.0f, KV_F32},   {4, 4, 128, 37, 0.0f, KV_Q8_0},
        {6, 2, 32, 0, 0.5f, KV_F32},     {6, 2, 32, 0, 0.5f, KV_BF16},
        {8, 1, 80, 0, 0.0f, KV_F16},     {8, 1, 80, 0, 0.0f, KV_BF16},
        {16, 2, 256, 200, 0.0f, KV_F32}, {16, 2, 256, 200, 0.0f, KV_Q8_0},
        /* the tensor cores' decode (attn_decode_mma): groups of 8 heads of
         * 256 under a window, of 4 of 128 soft-capped */
        {16, 2, 256, 200, 0.0f, KV_BF16}, {8, 2, 128, 0, 0.5f, KV_BF16},
        {8, 2, 80, 0, 0.0f, KV_Q8_0}, /* kv_dim 160: head 1 starts inside block 2 */
        {16, 1, 64, 0, 0.0f, KV_BF16},  {16, 1, 64, 0, 0.0f, KV_F32},
        {16, 1, 64, 0, 0.0f, KV_Q8_0},  {16, 1, 64, 37, 0.0f, KV_F16},
        {16, 1, 64, 0, 0.5f, KV_BF16},  {4, 2, 36, 0, 0.0f, KV_F16},
        {4, 2, 36, 0, 0.0f, KV_F32},
    };
    /* Long cases: GQA 4 (the Qwen3-8B ratio), 1 and 8, every KV type,
     * a window past the first splits, soft-capping; the last on the older
     * kernel. The first has a row of S splits of many pieces of DEC_PIECE
     * keys: 16500 keys on a card (S from its SM count, 128 for 2 KV heads
     * on the H200: 86 splits of 192 keys), 4100 on the emulation (compute
     * capability 0: 4 SMs, S 6, splits of 704 keys), whose blocks run one
     * thread at a time. */
    static const attn_case longs[] = {
        {8, 2, 128, 0, 0.0f, KV_BF16},  {8, 2, 128, 0, 0.0f, KV_F16},
        {8, 2, 128, 0, 0.0f, KV_F32},   {8, 2, 128, 0, 0.0f, KV_Q8_0},
        {2, 2, 64, 3000, 0.0f, KV_BF16}, {8, 1, 64, 0, 30.0f, KV_BF16},
        {16, 1, 64, 0, 0.0f, KV_BF16},
    };
    int64_t deep[] = {16500, 5, 5000, 130, 1, 1024, 3001, 17};
    static const int64_t mid[] = {5000, 77, 1200};
    static const int64_t shallow[] = {700, 77, 130};
    cuda_backend *cb = cuda_of(k->gpu);
    if (cb->info.cc_major == 0)
        deep[0] = 4100;
    for (size_t c = 0; c < MEMRA_ARRAY_LEN(cases); c++)
        attention_case(k, &cases[c]);
    attention_long_case(k, &longs[0], deep, (int)MEMRA_ARRAY_LEN(deep));
    for (size_t c = 1; c < MEMRA_ARRAY_LEN(longs); c++)
        attention_long_case(k, &longs[c], mid, (int)MEMRA_ARRAY_LEN(mid));
    /* 17 rows, bf16 and f16: a launch of 16 rows or more (DEC_MANY_ROWS)
     * takes the decode instance with the K/V ring, a row alone the one
     * that loads into registers (kernels/attention.cu, dec_ring), and
     * attn_regroup_identical compares their bytes row by row. */
    static const int64_t many_rows[] = {5, 77, 130, 300, 257, 200, 17, 31, 64,
                                        65, 128, 129, 90, 160, 1, 2, 33};
    for (size_t c = 0; c < 2; c++)
        attention_long_case(k, &longs[c], many_rows, (int)MEMRA_ARRAY_LEN(many_rows));
    /* heads of 256 in groups of four (the Qwen3.5 shapes' attention): the
     * ring instance asks for 48 kB of dynamic shared memory exactly, which
     * with its static arrays needs the opt-in (a launch of 16 rows or more
     * failed with "invalid argument" on a card without it) */
    static const attn_case wide = {16, 4, 256, 0, 0.0f, KV_BF16};
    attention_long_case(k, &wide, many_rows, (int)MEMRA_ARRAY_LEN(many_rows));
    /* bf16 and f32 with head_dim 128, soft-capped bf16 of 64 */
    static const int many[] = {0, 2, 5};
    for (size_t c = 0; c < MEMRA_ARRAY_LEN(many); c++)
        attention_many_splits(k, &longs[many[c]], shallow, (int)MEMRA_ARRAY_LEN(shallow));
    /* Rows in groups of at most two (a long prompt chunk deep in the
     * context): the same results. */
    size_t cap = cb->tune.attn_partials_cap;
    cb->tune.attn_partials_cap = attn_partials_floats(2, 8, 64, 300 / ATTN_CHUNK + 1);
    attention_case(k, &cases[0]);
    cb->tune.attn_partials_cap = cap;
    if (k->o->perf) {
        /* the Qwen3-8B layer at each floor; the Qwen3.5 shapes' layers
         * (heads of 256, groups of 8 and 4) at a one-sequence engine's
         * floor, one row deep, and 64 rows of about 512 keys at the floors
         * up to a batched engine's (192) */
        static const attn_case q3 = {32, 8, 128, 0, 0.0f, KV_BF16};
        static const attn_case q35[] = {{16, 2, 256, 0, 0.0f, KV_BF16},
                                        {16, 4, 256, 0, 0.0f, KV_BF16}};
        attention_perf(k, &q3, 512, 1, 4);
        attention_perf(k, &q3, 8192, 1, 4);
        attention_perf(k, &q3, 32768, 1, 4);
        attention_perf(k, &q3, 512, 64, 4);
        for (size_t c = 0; c < MEMRA_ARRAY_LEN(q35); c++) {
            attention_perf(k, &q35[c], 8192, 1, 1);
            attention_perf(k, &q35[c], 32768, 1, 1);
            attention_perf(k, &q35[c], 512, 64, 3);
        }
    }
    /* q8_0 needs whole blocks of 32 along a row: 1 KV head of 80 is refused
     * with a message naming the size. */
    kv_cache bad;
    memra_err err = {{0}};
    int rc = kv_cache_init(&bad, KV_Q8_0, 2, 80, 16, 4, &err);
    kc_report_ok(k, "attention", "q8_0 KV with kv_dim 80 refused",
                 rc != 0 && strstr(err.msg, "q8_0") && strstr(err.msg, "80"), err.msg);
    if (rc == 0)
        kv_cache_free(&bad);
}
