/* Attention on the device: the rows' metadata (positions and block
 * tables, uploaded once per step), the device KV pool behind the engine's
 * block tables, QK-norm + RoPE, and KV append + split-K attention
 * (kernels/attention.cuh), or for a prompt chunk over a bf16/f16 cache
 * the tensor-core flash kernel (kernels/flash_prefill.cuh).
 *
 * The host kv_cache keeps the block tables and hands out blocks; the
 * device pool has the same geometry ((layer, block, slot) addressing, f32,
 * f16, bf16 or q8_0 rows), so the same tables address it. The engine makes
 * that cache without host K/V storage (kv_cache_init_tables), since this
 * backend has kv_prepare. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "core/check.h"
#include "kernels/attention.cuh"
#include "kernels/flash_prefill.cuh"
#include "kernels/norm.cuh"

_Static_assert(CU_KV_F32 == (int)KV_F32 && CU_KV_F16 == (int)KV_F16 &&
                   CU_KV_BF16 == (int)KV_BF16 && CU_KV_Q8_0 == (int)KV_Q8_0,
               "kernels/attention.cuh's element types are kv_type's values");
_Static_assert(ATTN_SPLIT_UNIT >= ATTN_CHUNK,
               "a row's decode splits never outnumber its chunks, which size a graph's bucket");

/* ---- row metadata ---- */

/* [n] positions, [n] table offsets, then the tables of the rows'
 * sequences (consecutive rows of one sequence share one), then [n] state
 * slots (kv_seq.state_slot), then [n] checkpoint slots (kv_seq_save_slot). Identical content is not uploaded again, so
 * the layers of one step share an upload. Returns the device copy, or
 * NULL after a failure. */
static const int32_t *rows_upload(cuda_backend *cb, const bk_batch *rows)
{
    const int32_t *graphed = cuda_graph_rows(cb); /* a graphed step's input (cuda_graph.c) */
    if (graphed)
        return graphed;
    int n = rows->n;
    size_t len = 4 * (size_t)n;
    for (int i = 0; i < n; i++)
        if (rows->seq[i] && (i == 0 || rows->seq[i] != rows->seq[i - 1]))
            len += (size_t)rows->seq[i]->n_blocks;
    if (len > cb->rows_cap) {
        cb->rows_cap = len + len / 2;
        cb->rows_new = xrealloc(cb->rows_new, cb->rows_cap * sizeof(int32_t));
        int32_t *h = xmalloc(cb->rows_cap * sizeof(int32_t));
        if (cb->rows_host)
            memcpy(h, cb->rows_host, cb->rows_len * sizeof(int32_t));
        free(cb->rows_host);
        cb->rows_host = h;
    }
    int32_t *m = cb->rows_new;
    size_t at = 2 * (size_t)n;
    for (int i = 0; i < n; i++) {
        const kv_seq *s = rows->seq[i];
        m[i] = rows->pos[i];
        if (rows->pos[i] < 0) {
            cuda_failf(cb, "row %d: negative position %" PRId32, i, rows->pos[i]);
            return NULL;
        }
        if (!s) {
            m[n + i] = (int32_t)(at - 2 * (size_t)n);
            continue;
        }
        if ((int64_t)rows->pos[i] >= (int64_t)s->n_blocks * s->cache->block_size) {
            cuda_failf(cb, "row %d: position %" PRId32 " is past the %d KV blocks of %d tokens "
                       "reserved for its sequence", i, rows->pos[i], s->n_blocks,
                       s->cache->block_size);
            return NULL;
        }
        if (i > 0 && s == rows->seq[i - 1]) {
            m[n + i] = m[n + i - 1];
            continue;
        }
        m[n + i] = (int32_t)(at - 2 * (size_t)n);
        memcpy(m + at, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
        at += (size_t)s->n_blocks;
    }
    for (int i = 0; i < n; i++)
        m[at + (size_t)i] = rows->seq[i] ? rows->seq[i]->state_slot : -1;
    /* the slot keeping the state after the row (a checkpoint's), -1: none */
    for (int i = 0; i < n; i++)
        m[at + (size_t)n + (size_t)i] =
            rows->seq[i] ? kv_seq_save_slot(rows->seq[i], rows->pos[i]) : -1;
    if (cb->stage[STAGE_ROWS].dev && cb->rows_n == n && cb->rows_len == len &&
        memcmp(cb->rows_host, m, len * sizeof(int32_t)) == 0)
        return cb->stage[STAGE_ROWS].dev;
    const int32_t *dev = cuda_stage_upload(cb, STAGE_ROWS, m, len * sizeof(int32_t));
    if (!dev)
        return NULL;
    cb->rows_new = cb->rows_host;
    cb->rows_host = m;
    cb->rows_len = len;
    cb->rows_n = n;
    return dev;
}

const int32_t *cuda_rows_meta(cuda_backend *cb, const bk_batch *rows, const int32_t **slots,
                              const int32_t **saves)
{
    const int32_t *m = rows_upload(cb, rows);
    const int32_t *graphed = cuda_graph_slots(cb);
    if (m) {
        *slots = graphed ? graphed : m + cb->rows_len - 2 * (size_t)rows->n;
        *saves = graphed ? cuda_graph_saves(cb) : m + cb->rows_len - (size_t)rows->n;
    }
    return m;
}

/* ---- RoPE tables ---- */

/* The device copy of r's inverse frequencies, uploaded the first time this
 * content is seen (a model has one or two tables). */
static const float *rope_table(cuda_backend *cb, const bk_rope *r)
{
    size_t bytes = (size_t)r->n_freqs * sizeof(float);
    for (int i = 0; i < cb->n_rope; i++)
        if (cb->rope[i].n == r->n_freqs && memcmp(cb->rope[i].host, r->inv_freq, bytes) == 0)
            return cb->rope[i].dev;
    int slot = cb->n_rope < CUDA_ROPE_CACHE ? cb->n_rope++ : CUDA_ROPE_CACHE - 1;
    if (cb->rope[slot].dev) {
        /* The cache is full (not seen with real models): reuse its last slot. */
        if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
            return NULL;
        cudaFree(cb->rope[slot].dev);
        free(cb->rope[slot].host);
        cb->rope[slot].dev = NULL;
        cb->rope[slot].host = NULL;
    }
    void *dev;
    memra_err e;
    if (cuda_alloc(cb, &dev, bytes, "RoPE table", 1, NULL) != 0)
        return NULL;
    if (cuda_upload_sync(cb, dev, r->inv_freq, bytes, &e) != 0) {
        cudaFree(dev);
        cuda_failf(cb, "%s", e.msg);
        return NULL;
    }
    cb->rope[slot].dev = dev;
    cb->rope[slot].host = xmalloc(bytes ? bytes : 1);
    memcpy(cb->rope[slot].host, r->inv_freq, bytes);
    cb->rope[slot].n = r->n_freqs;
    return dev;
}

void cuda_op_qk_norm_rope(backend *b, float *q, float *k, const bk_batch *rows, const bk_attn *a,
                          const bk_weight *q_norm, const bk_weight *k_norm, float w_offset,
                          float eps, const bk_rope *rope)
{
    cuda_backend *cb = cuda_of(b);
    cuda_xshadow_drop(cb);
    if (cb->failed || rows->n <= 0)
        return;
    const float *qn = cuda_vec_of(cb, q_norm, "qk_norm_rope");
    const float *kn = cuda_vec_of(cb, k_norm, "qk_norm_rope");
    if (cb->failed)
        return;
    if ((qn && q_norm->cols != a->head_dim) || (kn && k_norm->cols != a->head_dim)) {
        cuda_failf(cb, "qk_norm_rope: norm weight of %" PRId64 " values for head_dim %d",
                   qn ? q_norm->cols : k_norm->cols, a->head_dim);
        return;
    }
    if (2 * rope->n_freqs > a->head_dim) {
        cuda_failf(cb, "qk_norm_rope: %d RoPE frequencies for head_dim %d", rope->n_freqs,
                   a->head_dim);
        return;
    }
    const int32_t *meta = rows_upload(cb, rows);
    const float *inv = rope_table(cb, rope);
    if (!meta || !inv)
        return;
    cu_qk_rope p = {
        .n_heads = a->n_heads,
        .n_kv_heads = k ? a->n_kv_heads : 0, /* k NULL: q only */
        .head_dim = a->head_dim,
        .q_norm = qn,
        .k_norm = kn,
        .w_offset = w_offset,
        .eps = eps,
        .inv_freq = inv,
        .n_freqs = rope->n_freqs,
        .attn_factor = rope->attn_factor,
        .pairing = rope->pairing == ROPE_PAIR_ADJACENT ? 1 : 0,
        .pos_ahead = a->q_ahead,
    };
    if (k && a->q_ahead) {
        cuda_failf(cb, "qk_norm_rope: q_ahead %d with k (only q alone stands ahead)",
                   a->q_ahead);
        return;
    }
    CU_OK(cb, launch_qk_norm_rope(q, k, meta, rows->n, &p, cb->stream));
}

/* ---- the device KV pool ---- */

void cuda_attention_free(cuda_backend *cb)
{
    cudaFree(cb->kv_k);
    cudaFree(cb->kv_v);
    cudaFree(cb->state);
    cb->state = NULL;
    cb->state_n_floats = 0;
    cb->kv_k = cb->kv_v = NULL;
    cb->kv = NULL;
    free(cb->rows_host);
    free(cb->rows_new);
    cb->rows_host = cb->rows_new = NULL;
    cb->rows_cap = cb->rows_len = 0;
    for (int i = 0; i < cb->n_rope; i++) {
        cudaFree(cb->rope[i].dev);
        free(cb->rope[i].host);
    }
    cb->n_rope = 0;
}

/* Whether the pool was made for this cache: the same address and the same
 * geometry (a cache freed and another made at the same address must not
 * inherit a pool of the wrong size). */
static int kv_matches(const cuda_backend *cb, const kv_cache *kv)
{
    const kv_cache *g = &cb->kv_geom;
    return cb->kv == kv && g->type == kv->type && g->n_layers == kv->n_layers &&
           g->kv_dim == kv->kv_dim && g->block_size == kv->block_size &&
           g->n_blocks == kv->n_blocks &&
           cb->state_n_floats == (size_t)kv->n_state_slots * cuda_state_stride(cb, kv);
}

/* The KV layers this backend's pool holds: a pipeline stage's window
 * (kv_lo, kv_n), else every layer of the cache. */
static int cuda_kv_layers(const cuda_backend *cb, const kv_cache *kv)
{
    return cb->has_win ? cb->win.kv_n : kv->n_layers;
}

/* Bytes of one position's row in this backend's pool: a tensor-parallel
 * rank's window keeps its heads' columns only. */
static size_t cuda_kv_row_bytes(const cuda_backend *cb, const kv_cache *kv)
{
    return cb->has_win && cb->win.kv_cols > 0 ? kv_row_bytes(kv->type, cb->win.kv_cols)
                                              : kv->row_bytes;
}

/* The pool for attention layer a: its heads' first column is the base
 * (a rank's heads start kv_head0 heads into the cache's row, which the
 * window may start before), its width the layer's. */
static cu_kv_pool cuda_pool(const cuda_backend *cb, const kv_cache *kc, const bk_attn *a)
{
    int64_t col = (int64_t)a->kv_head0 * a->head_dim - (cb->has_win ? cb->win.kv_col_lo : 0);
    size_t off = kv_row_bytes(kc->type, col);
    return (cu_kv_pool){(uint8_t *)cb->kv_k + off, (uint8_t *)cb->kv_v + off, (int)kc->type, kc->n_blocks,
                        kc->block_size, (int64_t)a->n_kv_heads * a->head_dim,
                        (int64_t)cuda_kv_row_bytes(cb, kc)};
}

size_t cuda_state_stride(const cuda_backend *cb, const kv_cache *kv)
{
    return cb->has_win ? cb->win.state_n : kv->state_floats;
}

int cuda_kv_prepare(backend *b, const kv_cache *kv, memra_err *err)
{
    cuda_backend *cb = cuda_of(b);
    if (cb->failed) {
        *err = cb->err;
        return -1;
    }
    if (kv_matches(cb, kv))
        return 0;
    if (cb->kv) { /* another cache: this backend serves one pool at a time */
        cudaStreamSynchronize(cb->stream);
        cudaFree(cb->kv_k);
        cudaFree(cb->kv_v);
        cudaFree(cb->state);
        cb->state = NULL;
        cb->state_n_floats = 0;
        cb->kv_k = cb->kv_v = NULL;
        cb->kv = NULL;
    }
    int n_layers = cuda_kv_layers(cb, kv);
    size_t bytes = (size_t)n_layers * (size_t)kv->n_blocks * (size_t)kv->block_size *
                   cuda_kv_row_bytes(cb, kv);
    char what[256];
    snprintf(what, sizeof what, "the KV cache's K (%s, %d layers x %d blocks of %d tokens x %"
             PRId64 ")", kv_type_name(kv->type), n_layers, kv->n_blocks, kv->block_size,
             kv->kv_dim);
    if (cuda_alloc(cb, &cb->kv_k, bytes, what, 0, err) != 0)
        return -1;
    what[strlen("the KV cache's ")] = 'V';
    if (cuda_alloc(cb, &cb->kv_v, bytes, what, 0, err) != 0) {
        cudaFree(cb->kv_k);
        cb->kv_k = NULL;
        return -1;
    }
    /* Zeroed, so the pool's bytes never depend on what the memory held. */
    cudaError_t rc = cudaMemsetAsync(cb->kv_k, 0, bytes, cb->stream);
    if (rc == cudaSuccess)
        rc = cudaMemsetAsync(cb->kv_v, 0, bytes, cb->stream);
    if (rc != cudaSuccess)
        return memra_fail(err, "CUDA device %d: clearing the KV cache failed: %s",
                          cb->info.index, cudaGetErrorString(rc));
    /* The recurrent state pool, zeroed likewise (a row at position 0
     * clears its slot anyway). */
    size_t sf = kv->state_floats ? (size_t)kv->n_state_slots * cuda_state_stride(cb, kv) : 0;
    if (sf) {
        snprintf(what, sizeof what, "the recurrent state (%d sequences x %zu floats)",
                 kv->n_state_slots, cuda_state_stride(cb, kv));
        if (cuda_alloc(cb, (void **)&cb->state, sf * sizeof(float), what, 0, err) != 0 ||
            cudaMemsetAsync(cb->state, 0, sf * sizeof(float), cb->stream) != cudaSuccess) {
            cudaFree(cb->kv_k);
            cudaFree(cb->kv_v);
            cudaFree(cb->state);
            cb->kv_k = cb->kv_v = NULL;
            cb->state = NULL;
            return memra_fail(err, "CUDA device %d: %s could not be made", cb->info.index, what);
        }
        cb->state_n_floats = sf;
    }
    cb->kv = kv;
    memset(&cb->kv_geom, 0, sizeof cb->kv_geom);
    cb->kv_geom.type = kv->type;
    cb->kv_geom.n_layers = kv->n_layers;
    cb->kv_geom.kv_dim = kv->kv_dim;
    cb->kv_geom.block_size = kv->block_size;
    cb->kv_geom.n_blocks = kv->n_blocks;
    return 0;
}

/* ---- flash attention for prompt chunks ---- */

/* A prefill step's chunk of at least tune.flash_min_rows rows over a bf16
 * or f16 KV cache, with a head size the kernel has, runs the tensor-core
 * flash kernel (Q and P rounded to the cache's type: its bound is in the
 * kernel check). Decode steps, speculative rows and short chunks keep the
 * split-K kernel, whose rows are batch-invariant bit for bit. */
static int flash_applies(const cuda_backend *cb, const kv_cache *kc, const bk_attn *a, int n)
{
    return cb->tune.flash && cb->step.active && cb->step.prefill &&
           n >= cb->tune.flash_min_rows && flash_prefill_supports((int)kc->type, a->head_dim);
}

/* How the launch of rows [i0, i0 + n) cuts its keys: segments of
 * tune.flash_seg_keys, and split one block a segment when its (head,
 * tile) blocks are under tune.flash_split_blocks and the partials fit
 * tune.flash_ws_cap. Split or not, a row's result is the same bytes
 * (kernels/flash_prefill.cuh). */
static cu_flash_cut flash_cut(cuda_backend *cb, const bk_attn *a, const bk_batch *rows, int i0,
                              int n)
{
    cu_flash_cut cut = {cb->tune.flash_seg_keys, 0, 0, NULL};
    if (!flash_prefill_splits(a->head_dim))
        return cut;
    int64_t lo = INT64_MAX, hi = -1;
    for (int i = i0; i < i0 + n; i++) {
        int64_t p = rows->pos[i];
        int64_t f = a->window > 0 && p - a->window + 1 > 0 ? p - a->window + 1 : 0;
        lo = f < lo ? f : lo;
        hi = p > hi ? p : hi;
    }
    int64_t seg0 = lo / cut.seg_keys, nseg = hi / cut.seg_keys - seg0 + 1;
    int64_t blocks = (int64_t)a->n_heads * ((n + FP_ROWS - 1) / FP_ROWS);
    size_t ws = flash_prefill_ws_floats(n, a->n_heads, a->head_dim, (int)(nseg < 65535 ? nseg : 65535));
    if (nseg < 2 || nseg > 65535 || blocks >= cb->tune.flash_split_blocks ||
        ws > cb->tune.flash_ws_cap)
        return cut;
    cut.ws = cuda_scratch(cb, SCR_FLASH, ws * sizeof(float), "flash attention partials");
    if (cut.ws) {
        cut.seg0 = (int)seg0;
        cut.nseg = (int)nseg;
    }
    return cut;
}

/* K/V appended, then one launch per run of consecutive rows of one
 * sequence (a prompt chunk has one, a packed step several). */
static void flash_prefill(cuda_backend *cb, const kv_cache *kc, const bk_attn *a,
                          const bk_batch *rows, const int32_t *meta, const float *q,
                          const float *k, const float *v, float *out)
{
    /* the layer's width: narrower layers use the front of each row */
    cu_kv_pool pool = cuda_pool(cb, kc, a);
    cu_attn at = {a->layer - (cb->has_win ? cb->win.kv_lo : 0), a->n_heads, a->n_kv_heads, a->head_dim, a->scale, a->softcap,
                  a->window, 0, 0, NULL};
    int n = rows->n;
    if (k && CU_OK(cb, launch_kv_append(&pool, &at, meta, n, k, v, cb->stream)))
        return;
    for (int i0 = 0, i1; i0 < n; i0 = i1) {
        for (i1 = i0 + 1; i1 < n && rows->seq[i1] == rows->seq[i0];)
            i1++;
        cu_flash_cut cut = flash_cut(cb, a, rows, i0, i1 - i0);
        if (cb->failed ||
            CU_OK(cb, launch_flash_prefill(&pool, &at, meta, n, i0, i1 - i0, q, &cut, out,
                                           cb->stream)))
            return;
    }
}

/* Decode attention's split count S for a model with n_kv_heads KV heads
 * of G query heads each: the tuning's, or from the device: one wave of
 * (split, KV head) blocks for one row, at the blocks a multiprocessor
 * holds (kernels/attention.cu bounds the CUDA-core kernel's registers to 3
 * blocks of 128 threads, 2 past 4 query heads a KV head; the tensor-core
 * kernel's shared memory to attn_decode_mma_blocks). With the floor
 * of keys a split has (tune.attn_split_min, ATTN_SPLIT_MIN), a short row
 * has fewer. It depends on the device and the model only, never on the
 * step's rows, so a row's splits (attn_row_splits) are its own
 * (docs/decisions/0008-decode-attention-split.md). */
int cuda_decode_splits(const cuda_backend *cb, int type, int n_heads, int n_kv_heads,
                       int head_dim)
{
    if (cb->tune.attn_splits > 0)
        return attn_split_count(cb->tune.attn_splits);
    int per_sm = attn_decode_mma(type, n_heads, n_kv_heads, head_dim)
                     ? attn_decode_mma_blocks(head_dim)
                     : n_heads / n_kv_heads > 4 ? 2 : 3;
    int64_t want = ((int64_t)per_sm * cb->info.sm_count + n_kv_heads - 1) / n_kv_heads;
    return want < 1 ? 1 : want > ATTN_SPLITS_MAX ? ATTN_SPLITS_MAX : (int)want;
}

void cuda_op_attention(backend *b, const bk_attn *a, const bk_batch *rows, const float *q,
                       const float *k, const float *v, float *out)
{
    cuda_backend *cb = cuda_of(b);
    cuda_xshadow_drop(cb);
    int n = rows->n;
    if (cb->failed || n <= 0)
        return;
    const kv_cache *kc = rows->seq[0] ? rows->seq[0]->cache : NULL;
    for (int i = 0; i < n; i++)
        if (!rows->seq[i] || rows->seq[i]->cache != kc) {
            cuda_failf(cb, "attention: row %d has %s", i,
                       rows->seq[i] ? "another KV cache than row 0" : "no sequence");
            return;
        }
    if (!kv_matches(cb, kc)) {
        memra_err e;
        if (cuda_kv_prepare(b, kc, &e) != 0) {
            cuda_failf(cb, "%s", e.msg);
            return;
        }
    }
    int lo = cb->has_win ? cb->win.kv_lo : 0, nl = cuda_kv_layers(cb, kc);
    int64_t col = (int64_t)a->kv_head0 * a->head_dim - (cb->has_win ? cb->win.kv_col_lo : 0);
    int64_t cols = cb->has_win && cb->win.kv_cols > 0 ? cb->win.kv_cols : kc->kv_dim;
    if (col < 0 || col + (int64_t)a->n_kv_heads * a->head_dim > cols || a->layer < lo ||
        a->layer >= lo + nl || a->layer >= kc->n_layers || a->n_kv_heads <= 0 ||
        a->n_heads % a->n_kv_heads != 0) {
        cuda_failf(cb, "attention: layer %d with %d heads / %d KV heads of %d does not fit the KV "
                   "cache (layers %d to %d of %d here, kv_dim %" PRId64 ")", a->layer, a->n_heads,
                   a->n_kv_heads, a->head_dim, lo, lo + nl - 1, kc->n_layers, kc->kv_dim);
        return;
    }
    const int32_t *meta = rows_upload(cb, rows);
    if (!meta)
        return;
    if (flash_applies(cb, kc, a, n)) {
        flash_prefill(cb, kc, a, rows, meta, q, k, v, out);
        return;
    }
    /* The split-K decode kernel where it takes the shape, else the older
     * per-64-key kernel (docs/decisions/0008); the grid is the rows' most
     * splits. */
    const int dec = attn_decode_fits(a->n_heads, a->n_kv_heads, a->head_dim) &&
                    (kc->type == KV_Q8_0 || cuda_kv_row_bytes(cb, kc) % 16 == 0);
    const int splits =
        dec ? cuda_decode_splits(cb, (int)kc->type, a->n_heads, a->n_kv_heads, a->head_dim) : 0;
    const int split_min = cb->tune.attn_split_min;
    int max_chunks = 1;
    for (int i = 0; i < n; i++) {
        int c = dec ? attn_row_splits(rows->pos[i], a->window, splits, split_min)
                    : attn_row_chunks(rows->pos[i], a->window);
        if (c > max_chunks)
            max_chunks = c;
    }
    if (cuda_graph_chunks(cb) > 0) {
        /* A graphed step: the grid is the key's (cuda_graph.c), its bucket
         * made from attn_row_chunks, never below a row's splits; for the
         * decode kernel, the most splits a row in the bucket can have
         * (blocks past a row's own return at once). */
        int bucket = cuda_graph_chunks(cb);
        if (dec)
            bucket = attn_bucket_splits(bucket, splits, split_min);
        if (bucket < max_chunks) {
            cuda_failf(cb, "attention: a graph bucket of %d splits for rows needing %d", bucket,
                       max_chunks);
            return;
        }
        max_chunks = bucket;
    }
    /* A long prompt chunk deep in the context has many rows x chunks of
     * partials: its rows go in groups, bounding the scratch (a row's
     * result does not depend on its group). */
    size_t per_row = attn_partials_floats(1, a->n_heads, a->head_dim, max_chunks);
    size_t cap = cb->tune.attn_partials_cap;
    int group = n;
    if (!cuda_graph_rows(cb) && per_row * (size_t)n > cap)
        group = per_row > cap ? 1 : (int)(cap / per_row);
    float *part = cuda_scratch(cb, SCR_ATTN, per_row * (size_t)group * sizeof(float),
                               "attention partials");
    if (!part)
        return;
    unsigned *cnt = NULL;
    if (dec && !(cnt = cuda_counters(cb, attn_decode_counters(group, a->n_kv_heads))))
        return; /* failed (recorded) or a capture given up */
    /* the layer's width: narrower layers use the front of each row */
    cu_kv_pool pool = cuda_pool(cb, kc, a);
    cu_attn at = {a->layer - (cb->has_win ? cb->win.kv_lo : 0), a->n_heads, a->n_kv_heads, a->head_dim, a->scale, a->softcap,
                  a->window, splits, split_min, NULL};
    if (k && CU_OK(cb, launch_kv_append(&pool, &at, meta, n, k, v, cb->stream)))
        return;
    size_t qd = (size_t)a->n_heads * (size_t)a->head_dim;
    /* A decode step's output that the decode GEMM takes next (the output
     * projection): its bf16 copy made by the combine (cuda_xshadow). */
    if (dec && group == n && cuda_xshadow_wanted(cb, n)) {
        at.out_bf = cuda_scratch(cb, SCR_XSHADOW, (size_t)n * qd * 2, "the attention's bf16 copy");
        if (cb->failed)
            return;
    }
    for (int i0 = 0; i0 < n && !cb->failed; i0 += group) {
        int g = n - i0 < group ? n - i0 : group;
        const int32_t *m = meta;
        if (group < n) {
            bk_batch sub = {g, rows->pos + i0, rows->seq + i0};
            if (!(m = rows_upload(cb, &sub)))
                return;
        }
        if (dec)
            CU_OK(cb, launch_attention_decode(&pool, &at, m, g, q + (size_t)i0 * qd, max_chunks,
                                              part, cnt, out + (size_t)i0 * qd, cb->stream));
        else
            CU_OK(cb, launch_attention(&pool, &at, m, g, q + (size_t)i0 * qd, max_chunks, part,
                                       out + (size_t)i0 * qd, cb->stream));
    }
    if (at.out_bf && !cb->failed)
        cb->xshadow = (cuda_xshadow){out, (size_t)n * qd, at.out_bf};
}
