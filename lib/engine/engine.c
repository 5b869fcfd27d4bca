#include "engine/engine.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/check.h"
#include "core/cli.h"
#include "model/contract.h"

struct engine {
    const checkpoint *ck;
    engine_opts opts;
    contract_binding binding;
    backend *bk;
    model m;
    int64_t n_ctx;
    int max_blocks; /* KV blocks one sequence can hold */
    /* per-step row descriptors, [opts.n_batch] */
    int32_t *pos;
    kv_seq **seqs;
    /* sampling (engine_forward*_sample): a device's rows, lists and
     * outcomes, or the host copy of the logits when the backend has no
     * sample op; grown on first use */
    smp_row *srows;
    smp_outcome *souts;
    smp_bias *sbias;
    smp_pen *spen;
    uint32_t *smask; /* the rows' allowed-token masks, ceil(n_vocab / 32) words each */
    size_t sbias_cap, spen_cap, smask_cap;
    float *host_logits;
    /* the MTP block's rows after a step (opts.mtp): [n_batch] each, h [n_batch][dim] */
    int32_t *mtp_pos, *mtp_next;
    kv_seq **mtp_seqs;
    float *mtp_in;
    /* an attached assistant (engine_attach_assistant): its model, drafting
     * on this engine's backend and KV cache */
    model *asst;
    contract_binding asst_binding;
};

/* A sequence keeps the final hidden states of its last MTP_KEEP positions
 * when the engine runs an MTP block: the block's input at a position is
 * the model's hidden state there, and a speculation round cut back by up
 * to SPEC_K_MAX + 1 rows still finds it at the new end. */
#define MTP_KEEP 16

struct engine_seq {
    engine *e;
    kv_seq kv;
    float *mtp_h;           /* [MTP_KEEP][dim]: position p in row p % MTP_KEEP */
    int64_t mtp_lo, mtp_hi; /* the positions kept: [lo, hi) */
};

void engine_opts_default(engine_opts *o)
{
    memset(o, 0, sizeof *o);
    o->kv_type = KV_DEFAULT;
}

int engine_opts_parallel(engine_opts *o, const char *devices, int pp, int tp, memra_err *err)
{
    o->n_devices = 0;
    if (devices) {
        if (o->backend != BK_CUDA)
            return memra_fail(err, "--devices %s: the %s backend has no devices (use --backend "
                              "cuda)", devices, backend_kind_name(o->backend));
        int n = cli_parse_int_list(devices, 0, 1024, o->devices, BACKEND_MAX_STAGES,
                                   "--devices", err);
        if (n < 0)
            return -1;
        o->n_devices = n;
    }
    if (pp < 0 || pp > BACKEND_MAX_STAGES)
        return memra_fail(err, "--pp %d: a pipeline has 1 to %d stages", pp, BACKEND_MAX_STAGES);
    if (tp < 0 || tp > BACKEND_MAX_STAGES)
        return memra_fail(err, "--tp %d: tensor parallel has 1 to %d ranks", tp,
                          BACKEND_MAX_STAGES);
    if (pp > 1 && tp > 1)
        return memra_fail(err, "--pp %d with --tp %d: a model splits by layers or by heads, not "
                          "both at once (not built)", pp, tp);
    o->tp = tp > 1 ? tp : 0;
    if (o->tp) {
        o->pp = 0;
        if (o->n_devices > 1 && o->n_devices != o->tp)
            return memra_fail(err, "--tp %d with --devices %s: one device per rank (list a "
                              "device again to put two ranks on it)", o->tp, devices);
        if (o->n_devices == 1) /* every rank on the one device */
            o->device = o->devices[0], o->n_devices = 0;
        return 0;
    }
    o->pp = pp > 0 ? pp : o->n_devices;
    if (o->n_devices > 1 && o->n_devices != o->pp)
        return memra_fail(err, "--pp %d with --devices %s: one device per stage (list a device "
                          "again to put two stages on it)", o->pp, devices);
    if (o->n_devices == 1 && o->pp > 1) /* every stage on the one device */
        o->device = o->devices[0], o->n_devices = 0;
    return 0;
}

int engine_opts_rank(engine_opts *o, int rank, const char *nccl_id, memra_err *err)
{
    o->n_ranks = 0;
    o->rank = 0;
    o->nccl_id = NULL;
    if (rank < 0) {
        if (nccl_id)
            return memra_fail(err, "--nccl-id %s without --rank: the id joins the processes of "
                              "one pipeline, each told its stage", nccl_id);
        return 0;
    }
    int parts = o->tp > 1 ? o->tp : o->pp;
    if (parts < 2)
        return memra_fail(err, "--rank %d: name the pipeline's stages with --pp N or the "
                          "tensor-parallel ranks with --tp N (2 to %d), one process each", rank,
                          BACKEND_MAX_STAGES);
    if (rank >= parts)
        return memra_fail(err, "--rank %d: %s %d has ranks 0 to %d", rank,
                          o->tp > 1 ? "--tp" : "--pp", parts, parts - 1);
    if (o->backend != BK_CUDA)
        return memra_fail(err, "--rank %d: stages in processes of their own talk through NCCL: "
                          "use --backend cuda (not %s)", rank, backend_kind_name(o->backend));
    if (o->n_devices > 1)
        return memra_fail(err, "--rank %d: this process runs one stage, on one device (--devices "
                          "names one, or none for device 0)", rank);
    const char *env = getenv("NCCL_COMM_ID");
    if (!nccl_id && !(env && *env))
        return memra_fail(err, "--rank %d: the processes meet through --nccl-id FILE (a path "
                          "every process reads; rank 0 writes it) or NCCL_COMM_ID=HOST:PORT",
                          rank);
    if (o->n_devices == 1)
        o->device = o->devices[0];
    o->n_devices = 0;
    o->n_ranks = parts;
    o->rank = rank;
    o->nccl_id = nccl_id;
    return 0;
}

kv_type engine_kv_type_default(backend_kind k)
{
    return k == BK_CPU_REF ? KV_F32 : KV_BF16;
}

/* The backend the options ask for: one, or a group of pp pipeline stages
 * or tp tensor-parallel ranks. */
static backend *engine_backend(const engine_opts *o, memra_err *err)
{
    if (o->n_devices < 0 || o->n_devices > BACKEND_MAX_STAGES || o->pp < 0 ||
        o->pp > BACKEND_MAX_STAGES || o->tp < 0 || o->tp > BACKEND_MAX_STAGES ||
        (o->pp > 1 && o->tp > 1)) {
        memra_fail(err, "parallel: %d stages and %d ranks over %d devices (one kind, at most %d)",
                   o->pp, o->tp, o->n_devices, BACKEND_MAX_STAGES);
        return NULL;
    }
    int parts = o->tp > 1 ? o->tp : o->pp;
    const char *part = o->tp > 1 ? "tensor-parallel rank" : "pipeline stage";
    if (o->n_ranks > 0) { /* this process's stage or rank alone */
        if (o->n_ranks != parts || o->rank < 0 || o->rank >= o->n_ranks || o->n_devices > 1) {
            memra_fail(err, "parallel: %s %d of %d processes for %d", part, o->rank, o->n_ranks,
                       parts);
            return NULL;
        }
        backend *l = backend_create(o->backend, o->n_devices ? o->devices[0] : o->device,
                                    o->n_threads, err);
        return l ? backend_pipeline_join(l, o->n_ranks, o->rank, o->nccl_id, err) : NULL;
    }
    if (o->n_devices > 0 && o->backend != BK_CUDA) {
        memra_fail(err, "devices: the %s backend has no devices (use the cuda backend)",
                   backend_kind_name(o->backend));
        return NULL;
    }
    if (parts <= 1) {
        if (o->n_devices > 1) {
            memra_fail(err, "devices: %d devices for one stage (a pipeline of %d stages runs "
                       "on %d devices)", o->n_devices, o->n_devices, o->n_devices);
            return NULL;
        }
        return backend_create(o->backend, o->n_devices ? o->devices[0] : o->device,
                              o->n_threads, err);
    }
    if (o->n_devices != 0 && o->n_devices != parts) {
        memra_fail(err, "parallel: %d %ss need %d devices, %d given", parts, part, parts,
                   o->n_devices);
        return NULL;
    }
    backend *stages[BACKEND_MAX_STAGES];
    for (int s = 0; s < parts; s++) {
        stages[s] = backend_create(o->backend, o->n_devices ? o->devices[s] : o->device,
                                   o->n_threads, err);
        if (!stages[s]) {
            memra_wrap(err, "%s %d", part, s);
            while (s-- > 0)
                backend_destroy(stages[s]);
            return NULL;
        }
    }
    return backend_pipeline_create(stages, parts, err);
}

int engine_load(const checkpoint *ck, const engine_opts *o, engine **out, memra_err *err)
{
    *out = NULL;
    if (!ck->has_config)
        return memra_fail(err, "%s: has no model (a vocab-only file?)", ck->path);
    const model_config *c = &ck->config;
    engine_opts eo = *o;
    if (eo.n_seqs <= 0)
        eo.n_seqs = 1;
    if (eo.kv_block_size <= 0)
        eo.kv_block_size = 16;
    if (eo.kv_type == KV_DEFAULT)
        eo.kv_type = engine_kv_type_default(eo.backend);
    int64_t n_ctx = eo.n_ctx;
    if (n_ctx <= 0)
        n_ctx = c->n_ctx_train > 0 && c->n_ctx_train < 4096 ? c->n_ctx_train : 4096;
    if (n_ctx > INT32_MAX)
        return memra_fail(err, "n_ctx %" PRId64 " is too large", n_ctx);
    int64_t blocks_per_seq = (n_ctx + eo.kv_block_size - 1) / eo.kv_block_size;
    if (blocks_per_seq * eo.n_seqs > INT32_MAX)
        return memra_fail(err, "n_ctx %" PRId64 " x %d sequences is too large", n_ctx,
                          eo.n_seqs);
    int64_t pool_blocks = blocks_per_seq * eo.n_seqs;
    if (eo.kv_tokens < 0)
        return memra_fail(err, "kv_tokens %" PRId64 " is negative", eo.kv_tokens);
    if (eo.snapshots < 0 || eo.snapshots >= KV_SNAP_MAX)
        return memra_fail(err, "snapshots %d: a checkpoint keeps 0 to %d rows", eo.snapshots,
                          KV_SNAP_MAX - 1);
    if (eo.kv_tokens > 0) {
        /* every sequence may hold one partly filled block besides */
        int64_t b = (eo.kv_tokens + eo.kv_block_size - 1) / eo.kv_block_size + eo.n_seqs;
        pool_blocks = b < pool_blocks ? b : pool_blocks;
    }
    engine *e = xcalloc(1, sizeof *e);
    e->ck = ck;
    e->opts = eo;
    e->n_ctx = n_ctx;
    if (contract_bind(c, ck->format, ck->tensors, ck->n_tensors, &e->binding, err) != 0) {
        free(e);
        return memra_wrap(err, "%s", ck->path);
    }
    e->max_blocks = (int)blocks_per_seq;
    e->bk = engine_backend(&eo, err);
    if (!e->bk) {
        contract_binding_free(&e->binding);
        free(e);
        return -1;
    }
    if (e->bk->ops->plan_decode)
        e->bk->ops->plan_decode(e->bk, eo.n_seqs);
    /* The prefill step: the caller's, else the backend's (a GPU wants
     * long chunks for its GEMMs), else 64. */
    if (e->opts.n_batch <= 0 && e->bk->ops->preferred_batch)
        e->opts.n_batch = e->bk->ops->preferred_batch(e->bk);
    if (e->opts.n_batch <= 0)
        e->opts.n_batch = 64;
    model_opts mo = {
        .cap = e->opts.n_batch,
        .kv_type = e->opts.kv_type,
        .kv_block_size = e->opts.kv_block_size,
        .kv_blocks = (int)pool_blocks,
        /* with the prefix cache, as many again for the states it keeps
         * (a model without recurrent layers takes none) */
        .state_slots = eo.n_seqs * (1 + (eo.snapshots > 0 ? eo.snapshots + 1 : 0) +
                                    (eo.prefix_cache ? 1 : 0)),
        .mtp = eo.mtp,
        .tp = eo.tp,
    };
    int init = model_init(&e->m, c, &e->binding, ck->format, e->bk, &mo, err);
    /* A device backend sizes its own KV storage now, and reports any
     * failure of the uploads and allocations model_init made. */
    int rc = init;
    if (rc == 0 &&
        ((e->bk->ops->kv_prepare && e->bk->ops->kv_prepare(e->bk, &e->m.state.kv, err) != 0) ||
         backend_status(e->bk, err) != 0))
        rc = -1;
    /* stages in processes of their own: each learns whether all loaded,
     * asked for the same steps */
    struct {
        int64_t n_ctx, pool_blocks, n_layers, dim, n_vocab;
        int32_t n_batch, kv_type, n_seqs, kv_block_size, snapshots, prefix_cache, mtp;
    } asked;
    memset(&asked, 0, sizeof asked);
    asked.n_ctx = n_ctx;
    asked.pool_blocks = pool_blocks;
    asked.n_layers = c->n_layers;
    asked.dim = c->dim;
    asked.n_vocab = c->n_vocab;
    asked.n_batch = e->opts.n_batch;
    asked.kv_type = (int32_t)eo.kv_type;
    asked.n_seqs = eo.n_seqs;
    asked.kv_block_size = eo.kv_block_size;
    asked.snapshots = eo.snapshots;
    asked.prefix_cache = eo.prefix_cache;
    asked.mtp = eo.mtp;
    if (backend_group_settle(e->bk, rc, &asked, sizeof asked, err) != 0) {
        memra_wrap(err, "%s", ck->path);
        if (init == 0)
            model_free(&e->m);
        backend_destroy(e->bk);
        contract_binding_free(&e->binding);
        free(e);
        return -1;
    }
    if (e->opts.prefix_cache &&
        (kv_cache_enable_prefix(&e->m.state.kv,
                                e->opts.prefix_cache_idle > 0 ? e->opts.prefix_cache_idle : -1,
                                err) != 0 ||
         (e->m.state_floats && kv_cache_prefix_states(&e->m.state.kv, eo.n_seqs, err) != 0))) {
        model_free(&e->m);
        backend_destroy(e->bk);
        contract_binding_free(&e->binding);
        free(e);
        return -1;
    }
    e->pos = xmalloc((size_t)e->opts.n_batch * sizeof *e->pos);
    e->seqs = xmalloc((size_t)e->opts.n_batch * sizeof *e->seqs);
    if (e->m.mtp) {
        size_t nb = (size_t)e->opts.n_batch;
        e->m.keep_hidden = 1;
        e->mtp_pos = xmalloc(nb * sizeof *e->mtp_pos);
        e->mtp_next = xmalloc(nb * sizeof *e->mtp_next);
        e->mtp_seqs = xmalloc(nb * sizeof *e->mtp_seqs);
        e->mtp_in = xmalloc(nb * (size_t)c->dim * sizeof *e->mtp_in);
    }
    *out = e;
    return 0;
}

int64_t engine_seq_adopt_prefix(engine_seq *s, uint64_t ns, const int32_t *tokens, int64_t n,
                                int64_t granule)
{
    int64_t got = kv_seq_adopt(&s->kv, ns, tokens, n, granule);
    kv_cache *c = s->kv.cache;
    if (got <= 0 || !c->state_floats)
        return got;
    /* the state kept at the prefix's end into the sequence's own slot */
    memra_err err;
    int src = kv_cache_block_state(c, s->kv.blocks[got / c->block_size - 1]);
    if (src < 0 || kv_seq_reserve(&s->kv, got, &err) != 0) {
        kv_seq_truncate(&s->kv, 0);
        return 0;
    }
    backend *bk = s->e->bk;
    backend_bind(bk);
    bk->ops->state_copy(bk, c, src, s->kv.state_slot);
    return got;
}

void engine_seq_publish_prefix(engine_seq *s, uint64_t ns, const int32_t *tokens, int64_t n)
{
    kv_seq_publish(&s->kv, ns, tokens, n);
    kv_cache *c = s->kv.cache;
    int bs = c->block_size;
    /* A recurrent state is kept where the sequence stands now, if that is
     * the end of a published block: its state is the state after n. */
    if (!c->block_state || n <= 0 || n != s->kv.n_tokens || n % bs || s->kv.state_slot < 0)
        return;
    int b = s->kv.blocks[n / bs - 1];
    if (kv_cache_block_state(c, b) >= 0)
        return; /* kept already (the same tokens give the same state) */
    int dst = kv_cache_attach_state(c, b);
    if (dst < 0)
        return; /* another sequence's twin block holds the key */
    backend *bk = s->e->bk;
    backend_bind(bk);
    bk->ops->state_copy(bk, c, s->kv.state_slot, dst);
}

void engine_prefix_stats(const engine *e, kv_prefix_stats *out)
{
    memset(out, 0, sizeof *out);
    if (e->m.state.kv.prefix)
        kv_prefix_get_stats(e->m.state.kv.prefix, out);
}

int engine_kv_block_size(const engine *e) { return e->m.state.kv.block_size; }

int64_t engine_kv_blocks_held(const engine *e)
{
    return (int64_t)e->m.state.kv.n_blocks - kv_cache_available(&e->m.state.kv);
}

void engine_free(engine *e)
{
    if (!e)
        return;
    backend_bind(e->bk);
    if (e->asst) {
        model_free(e->asst);
        free(e->asst);
        contract_binding_free(&e->asst_binding);
    }
    model_free(&e->m);
    backend_destroy(e->bk);
    contract_binding_free(&e->binding);
    free(e->pos);
    free(e->seqs);
    free(e->srows);
    free(e->souts);
    free(e->sbias);
    free(e->spen);
    free(e->smask);
    free(e->host_logits);
    free(e->mtp_pos);
    free(e->mtp_next);
    free(e->mtp_seqs);
    free(e->mtp_in);
    free(e);
}

const model_config *engine_config(const engine *e) { return &e->m.config; }

void engine_profiler_range(engine *e, int on)
{
    if (e->bk->ops->profiler_range) {
        backend_bind(e->bk);
        e->bk->ops->profiler_range(e->bk, on);
    }
}
void engine_finish(engine *e)
{
    if (e->bk->ops->finish) {
        backend_bind(e->bk);
        e->bk->ops->finish(e->bk);
    }
}

uint64_t engine_bytes_per_token(const engine *e) { return e->m.bytes_per_token; }
int64_t engine_n_ctx(const engine *e) { return e->n_ctx; }
kv_type engine_kv_type(const engine *e) { return e->opts.kv_type; }
int engine_n_batch(const engine *e) { return e->opts.n_batch; }
model *engine_model(engine *e) { return &e->m; }

void engine_set_hidden_hook(engine *e, model_hidden_fn fn, void *ctx)
{
    e->m.hidden_fn = fn;
    e->m.hidden_ctx = ctx;
    e->m.hidden_from = 0;
}

void engine_set_final_hidden_hook(engine *e, model_hidden_fn fn, void *ctx)
{
    e->m.hidden_fn = fn;
    e->m.hidden_ctx = ctx;
    e->m.hidden_from = (int)e->m.config.n_layers;
}

int engine_head_new(engine *e, const int32_t *ids, int32_t n, model_head **out, memra_err *err)
{
    backend_bind(e->bk);
    return model_head_new(&e->m, ids, n, out, err);
}

void engine_head_free(engine *e, model_head *h)
{
    backend_bind(e->bk);
    model_head_free(&e->m, h);
}

void engine_use_head(engine *e, const model_head *h) { e->m.head = h; }

int engine_seq_new(engine *e, engine_seq **out, memra_err *err)
{
    (void)err;
    engine_seq *s = xcalloc(1, sizeof *s);
    s->e = e;
    kv_seq_init(&s->kv, &e->m.state.kv);
    *out = s;
    return 0;
}

void engine_seq_free(engine_seq *s)
{
    if (!s)
        return;
    kv_seq_free(&s->kv);
    free(s->mtp_h);
    free(s);
}

void engine_seq_reset(engine_seq *s)
{
    kv_seq_truncate(&s->kv, 0);
    s->mtp_lo = s->mtp_hi = 0;
}

void engine_seq_truncate(engine_seq *s, int64_t n)
{
    if (n >= s->kv.n_tokens)
        return;
    if (s->mtp_hi > n)
        s->mtp_hi = n > s->mtp_lo ? n : s->mtp_lo;
    if (n > 0 && s->kv.cache->state_floats) {
        /* a recurrent state goes back only to what its checkpoint kept */
        int from = kv_seq_restore_slot(&s->kv, n);
        MEMRA_ASSERT(from >= 0 && s->kv.state_slot >= 0);
        backend *bk = s->e->bk;
        backend_bind(bk);
        bk->ops->state_copy(bk, s->kv.cache, from, s->kv.state_slot);
        kv_seq_restore_point(&s->kv, n);
        return;
    }
    kv_seq_truncate(&s->kv, n);
}

int engine_seq_checkpoint(engine_seq *s, int rows, memra_err *err)
{
    if (!s->kv.cache->state_floats || s->kv.state_slot < 0)
        return 0; /* nothing recurrent (yet): a cut back re-runs from position 0 */
    if (rows < 0 || rows > s->e->opts.snapshots)
        return memra_fail(err, "a checkpoint of %d rows: the engine keeps up to %d", rows,
                          s->e->opts.snapshots);
    if (kv_seq_checkpoint(&s->kv, rows, err) != 0)
        return -1;
    backend *bk = s->e->bk;
    backend_bind(bk);
    bk->ops->state_copy(bk, s->kv.cache, s->kv.state_slot, s->kv.snap[0]);
    return 0;
}

int engine_can_checkpoint(const engine *e)
{
    return e->m.state_floats == 0 || e->opts.snapshots > 0;
}

int64_t engine_seq_pos(const engine_seq *s) { return s->kv.n_tokens; }

int engine_rewindable(const engine *e) { return e->m.state_floats == 0; }

int engine_prefix_shareable(const engine *e)
{
    return e->m.state_floats == 0 || e->m.state.kv.block_state != NULL;
}

/* ---- the MTP block (opts.mtp) ----
 *
 * The block at position q reads the model's hidden state at q and the
 * token at q + 1, so it runs one step behind the model: after each step,
 * every row whose previous position's hidden state is known (from this
 * step or kept from the last) gives the block a row, and the step's
 * hidden states are kept for the next. The block's K/V then always holds
 * every position but a sequence's newest, which engine_mtp_draft runs
 * with the token the caller is about to feed. */

static engine_seq *seq_of(kv_seq *kv)
{
    return (engine_seq *)(void *)((char *)kv - offsetof(engine_seq, kv));
}

static const float *mtp_kept(const engine_seq *s, int64_t p, size_t dim)
{
    if (p < s->mtp_lo || p >= s->mtp_hi)
        return NULL;
    return s->mtp_h + (size_t)(p % MTP_KEEP) * dim;
}

static void mtp_keep(engine_seq *s, int64_t p, const float *h, size_t dim)
{
    if (!s->mtp_h)
        s->mtp_h = xmalloc((size_t)MTP_KEEP * dim * sizeof *s->mtp_h);
    if (p < s->mtp_lo || p > s->mtp_hi)
        s->mtp_lo = p; /* not contiguous with what is kept: start again */
    memcpy(s->mtp_h + (size_t)(p % MTP_KEEP) * dim, h, dim * sizeof *h);
    s->mtp_hi = p + 1;
    if (s->mtp_hi - s->mtp_lo > MTP_KEEP)
        s->mtp_lo = s->mtp_hi - MTP_KEEP;
}

/* The block on n rows staged in e->mtp_*, told to the backend as a step
 * of its own (never graphed); logits / h_out as model_forward_mtp. */
static void mtp_step(engine *e, int n, int logits_from, float *logits, float *h_out)
{
    backend *bk = e->bk;
    bk_batch rows = {n, e->mtp_pos, e->mtp_seqs};
    bk_step st = {.rows = &rows, .tokens = e->mtp_next, .prefill = n > 1,
                  .max_blocks = e->max_blocks};
    if (bk->ops->step_begin && bk->ops->step_begin(bk, &st) != 0)
        return; /* failed: backend_status says */
    model_forward_mtp(&e->m, &rows, e->mtp_next, e->mtp_in, logits_from, logits, h_out);
    if (bk->ops->step_end)
        bk->ops->step_end(bk, &st);
}

/* After a step of the model: the block's rows it makes runnable, then the
 * step's hidden states kept (model.keep_hidden read them back). */
static void mtp_follow(engine *e, const bk_batch *rows, const int32_t *tokens)
{
    size_t dim = (size_t)e->m.config.dim;
    const float *hid = e->m.state.host_hidden;
    int nj = 0;
    for (int i = 0; i < rows->n && e->m.mtp; i++) {
        int64_t p = rows->pos[i];
        const float *h = NULL;
        if (i > 0 && rows->seq[i - 1] == rows->seq[i] && rows->pos[i - 1] == p - 1)
            h = hid + (size_t)(i - 1) * dim;
        else if (p > 0)
            h = mtp_kept(seq_of(rows->seq[i]), p - 1, dim);
        if (!h)
            continue; /* never ran here (an adopted prefix): the block skips it */
        e->mtp_pos[nj] = (int32_t)(p - 1);
        e->mtp_seqs[nj] = rows->seq[i];
        e->mtp_next[nj] = tokens[i];
        memcpy(e->mtp_in + (size_t)nj * dim, h, dim * sizeof *h);
        nj++;
    }
    for (int i = 0; i < rows->n; i++)
        mtp_keep(seq_of(rows->seq[i]), rows->pos[i], hid + (size_t)i * dim, dim);
    if (nj > 0)
        mtp_step(e, nj, nj, NULL, NULL);
}

int engine_has_mtp(const engine *e) { return e->m.mtp || e->asst; }

int engine_has_assistant(const engine *e) { return e->asst != NULL; }

void engine_mtp_follow(engine *e, int on) { e->m.keep_hidden = (e->m.mtp || e->asst) && on; }

int engine_mtp_ready(const engine *e, const engine_seq *s)
{
    return engine_has_mtp(e) && s->kv.n_tokens >= 1 &&
           mtp_kept(s, s->kv.n_tokens - 1, (size_t)e->m.config.dim) != NULL;
}

/* ---- an assistant (engine_attach_assistant) ----
 *
 * It keeps no K/V: every draft of a round reads the model's cache up to
 * the sequence's newest position q and stands at q + 1 (model.c's
 * assistant_layers), from the model's hidden state at q (kept as for the
 * MTP block, with no block to run) or its own output of the draft before. */

int engine_attach_assistant(engine *e, const checkpoint *ck, memra_err *err)
{
    if (e->asst || e->m.mtp)
        return memra_fail(err, "%s: the engine drafts with %s already", ck->path,
                          e->m.mtp ? "its MTP block" : "an assistant");
    const model_config *c = &ck->config;
    if (!config_is_assistant(c))
        return memra_fail(err, "%s: a %s model, not an assistant (a gemma4_assistant "
                          "checkpoint drafts on its model's state)", ck->path,
                          family_name(c->family));
    backend_bind(e->bk);
    if (contract_bind(c, ck->format, ck->tensors, ck->n_tensors, &e->asst_binding, err) != 0)
        return memra_wrap(err, "%s", ck->path);
    model *a = xcalloc(1, sizeof *a);
    model_opts mo = {.cap = 1, .target = &e->m};
    if (model_init(a, c, &e->asst_binding, ck->format, e->bk, &mo, err) != 0 ||
        backend_status(e->bk, err) != 0) {
        if (a->bk)
            model_free(a);
        free(a);
        contract_binding_free(&e->asst_binding);
        return memra_wrap(err, "%s", ck->path);
    }
    e->asst = a;
    e->m.keep_hidden = 1;
    if (!e->mtp_pos) {
        e->mtp_pos = xmalloc(sizeof *e->mtp_pos);
        e->mtp_next = xmalloc(sizeof *e->mtp_next);
        e->mtp_seqs = xmalloc(sizeof *e->mtp_seqs);
        e->mtp_in = xmalloc((size_t)e->m.config.dim * sizeof *e->mtp_in);
    }
    return 0;
}

static bk_sample_req *sample_request(engine *e, int n, sampler *const *smp, bk_sample_req *req);
static int sample_rows(engine *e, float *dev, int n, sampler *const *smp, bk_sample_req *req,
                       int sampled, int32_t *ids, memra_err *errs, memra_err *err);

/* One assistant row staged in e->mtp_*, a step of its own: its hidden
 * state goes up first, so the backend may replay the step from a graph
 * (under the assistant's own key), reading back its next hidden state and
 * then its logits as a model step reads its kept hidden states and logits. */
static void assistant_step(engine *e, float *logits, float *h_out)
{
    backend *bk = e->bk;
    model *a = e->asst;
    bk_batch rows = {1, e->mtp_pos, e->mtp_seqs};
    model_assistant_input(a, e->mtp_in, 1);
    if (!bk->ops->step_begin || !bk->ops->step_end) {
        model_forward_assistant(a, &rows, e->mtp_next, NULL, 0, logits, h_out);
        return;
    }
    bk_step st = {.rows = &rows,
                  .tokens = e->mtp_next,
                  .prefill = 0,
                  .max_blocks = e->max_blocks,
                  .logits = logits,
                  .n_logits = (size_t)a->config.n_vocab,
                  .hidden = h_out,
                  .n_hidden = h_out ? (size_t)a->config.backbone_dim : 0,
                  .forward_id = a,
                  .graph_ok = 1};
    for (int attempt = 0; attempt < 2; attempt++) {
        if (bk->ops->step_begin(bk, &st) != 0)
            return; /* replayed, or failed: backend_status says */
        model_forward_assistant(a, &rows, e->mtp_next, NULL, 0, logits, h_out);
        if (bk->ops->step_end(bk, &st) != 0)
            return;
        st.graph_ok = 0;
    }
}

static int mtp_draft_stage(engine *e, engine_seq *s, int32_t next, int depth, const float *h,
                           memra_err *err);

/* The drafting row staged in e->mtp_* (an assistant's, or the MTP
 * block's), its token sampled with smp where the step runs: a graphed step
 * (under the drafter's own key) ends with the sample kernel, and only the
 * token and h_out come back. */
static float *draft_row_logits(engine *e, const bk_batch *rows, float *h_out)
{
    return e->asst ? model_forward_assistant_logits(e->asst, rows, e->mtp_next, NULL, h_out)
                   : model_forward_mtp_logits(&e->m, rows, e->mtp_next, NULL, h_out);
}

static int draft_step_sample(engine *e, sampler *smp, int32_t *tok, float *h_out, memra_err *err)
{
    backend *bk = e->bk;
    model *a = e->asst;
    bk_batch rows = {1, e->mtp_pos, e->mtp_seqs};
    if (a)
        model_assistant_input(a, e->mtp_in, 1);
    else
        model_mtp_input(&e->m, e->mtp_in, 1);
    bk_sample_req store;
    bk_sample_req *req = sample_request(e, 1, &smp, &store);
    float *dev = NULL;
    int sampled = 0;
    if (!bk->ops->step_begin || !bk->ops->step_end) {
        dev = draft_row_logits(e, &rows, h_out);
    } else {
        bk_step st = {.rows = &rows,
                      .tokens = e->mtp_next,
                      .prefill = 0,
                      .max_blocks = e->max_blocks,
                      .hidden = h_out,
                      .n_hidden = h_out ? (size_t)e->m.config.dim : 0,
                      .forward_id = a ? (const void *)a : (const void *)&e->m.weights.mtp,
                      .graph_ok = req != NULL,
                      .sample = req};
        for (int attempt = 0; attempt < 2; attempt++) {
            if (req)
                req->logits = NULL;
            int r = bk->ops->step_begin(bk, &st);
            if (r != 0) {
                sampled = r > 0 && req != NULL;
                break;
            }
            dev = draft_row_logits(e, &rows, h_out);
            if (req)
                req->logits = dev;
            r = bk->ops->step_end(bk, &st);
            if (r != 0) {
                sampled = r > 0 && req != NULL;
                break;
            }
            st.graph_ok = 0;
        }
    }
    memra_err row_err;
    if (sample_rows(e, dev, 1, &smp, req, sampled, tok, &row_err, err) != 0)
        return -1;
    if (*tok < 0) {
        *err = row_err;
        return -1;
    }
    return 0;
}

int engine_mtp_draft_sample(engine *e, engine_seq *s, int32_t next, int depth, const float *h,
                            sampler *smp, int32_t *tok, float *h_out, memra_err *err)
{
    *tok = -1;
    /* the checks and staging of engine_mtp_draft, then the sampled step */
    return mtp_draft_stage(e, s, next, depth, h, err) != 0
               ? -1
               : draft_step_sample(e, smp, tok, h_out, err);
}

/* engine_mtp_draft's checks, then its row staged in e->mtp_* (the MTP
 * block's KV position reserved). */
static int mtp_draft_stage(engine *e, engine_seq *s, int32_t next, int depth, const float *h,
                           memra_err *err)
{
    const model_config *c = &e->m.config;
    backend_bind(e->bk);
    if (!engine_has_mtp(e))
        return memra_fail(err, "mtp: the engine runs no MTP block (engine_opts.mtp) and no "
                          "assistant");
    if (s->e != e)
        return memra_fail(err, "mtp: the sequence belongs to another engine");
    if (next < 0 || next >= c->n_vocab)
        return memra_fail(err, "mtp: token id %" PRId32 " is out of range: the vocabulary has "
                          "%" PRId64 " ids", next, c->n_vocab);
    int64_t q = s->kv.n_tokens - 1 + depth;
    if (depth < 0 || s->kv.n_tokens < 1 || (depth > 0 && !h))
        return memra_fail(err, "mtp: nothing to draft from (%" PRId64 " tokens, depth %d)",
                          s->kv.n_tokens, depth);
    if (q + 1 > e->n_ctx)
        return memra_fail(err, "mtp: position %" PRId64 " is past n_ctx %" PRId64, q, e->n_ctx);
    if (e->asst)
        q -= depth; /* every draft of a round stands at the newest position */
    if (depth == 0 && !(h = mtp_kept(s, q, (size_t)c->dim)))
        return memra_fail(err, "mtp: the hidden state at position %" PRId64 " was not kept (the "
                          "sequence's newest tokens never ran on this engine)", q);
    if (!e->asst && kv_seq_reserve(&s->kv, q + 1, err) != 0)
        return -1;
    e->mtp_pos[0] = (int32_t)q;
    e->mtp_seqs[0] = &s->kv;
    e->mtp_next[0] = next;
    memcpy(e->mtp_in, h, (size_t)c->dim * sizeof *h);
    return 0;
}

int engine_mtp_draft(engine *e, engine_seq *s, int32_t next, int depth, const float *h,
                     float *logits, float *h_out, memra_err *err)
{
    if (mtp_draft_stage(e, s, next, depth, h, err) != 0)
        return -1;
    if (e->asst)
        assistant_step(e, logits, h_out);
    else
        mtp_step(e, 1, 0, logits, h_out);
    return backend_status(e->bk, err);
}

/* One model_forward, told to the backend first (step_begin / step_end),
 * which may replay it from a captured graph (a decode step) or pick
 * prefill kernels for it. A step the backend could not finish (a capture
 * it abandoned) runs again, eagerly. With dev_out the logits of rows
 * [logits_from, n) stay in the backend's memory and *dev_out points at
 * them (for sampling on the device). With dev_out and smp as well, the
 * backend samples them inside the step, so a decode step is graphed with
 * its sampling (a replay never hands the logits out): returns 1 when it
 * did (smp->out filled, or smp->rc -1), 0 when the caller samples
 * *dev_out itself. */
static int forward_step_model(engine *e, const bk_batch *rows, const int32_t *tokens,
                              int prefill, int logits_from, float *logits, float **dev_out,
                              bk_sample_req *smp)
{
    backend *bk = e->bk;
    model *m = &e->m;
    if (!bk->ops->step_begin || !bk->ops->step_end) {
        if (dev_out)
            *dev_out = model_forward_logits(m, rows, tokens, logits_from);
        else
            model_forward(m, rows, tokens, logits_from, logits);
        return 0;
    }
    if (!dev_out || !bk->ops->sample)
        smp = NULL;
    /* A short step asking every row's logits (a speculation round's
     * verify rows) is a decode step: no more rows than keep each row's
     * decode bytes (engine_rows_alone), so it may be graphed like one. */
    int alone = engine_rows_alone(e);
    if (prefill && logits_from == 0 && alone > 0 && rows->n <= alone)
        prefill = 0;
    size_t nl = logits && logits_from < rows->n
                    ? (size_t)(rows->n - logits_from) * (size_t)m->config.n_vocab
                    : 0;
    bk_step st = {
        .rows = rows,
        .tokens = tokens,
        .prefill = prefill,
        .max_blocks = e->max_blocks,
        .logits = dev_out ? NULL : logits,
        .n_logits = dev_out ? 0 : nl,
        /* kept hidden states come back beside host logits only */
        .hidden = m->keep_hidden ? m->state.host_hidden : NULL,
        .n_hidden = m->keep_hidden ? (size_t)rows->n * (size_t)m->config.dim : 0,
        .graph_ok = !prefill && logits_from == 0 && !m->hidden_fn &&
                    (m->keep_hidden ? (!dev_out && logits != NULL) || smp != NULL
                     : dev_out      ? smp != NULL || bk->ops->sample
                                    : logits != NULL),
        .sample = smp,
        /* a trimmed head's steps are graphs of their own */
        .forward_id = m->head,
        /* logits kept on the device for a sample op after the step */
        .dev_logits = dev_out && !smp && bk->ops->sample ? dev_out : NULL,
    };
    for (int attempt = 0; attempt < 2; attempt++) {
        if (smp)
            smp->logits = NULL;
        if (bk->ops->step_begin(bk, &st) != 0)
            return smp != NULL; /* replayed, or failed: backend_status says */
        if (dev_out) {
            *dev_out = model_forward_logits(m, rows, tokens, logits_from);
            if (smp)
                smp->logits = *dev_out;
        } else {
            model_forward(m, rows, tokens, logits_from, logits);
        }
        if (bk->ops->step_end(bk, &st) != 0)
            return smp != NULL;
        st.graph_ok = 0;
    }
    return smp != NULL;
}

/* forward_step_model, then the MTP block's rows the step made runnable. */
static int forward_step(engine *e, const bk_batch *rows, const int32_t *tokens, int prefill,
                        int logits_from, float *logits, float **dev_out, bk_sample_req *smp)
{
    int r = forward_step_model(e, rows, tokens, prefill, logits_from, logits, dev_out, smp);
    if (e->m.keep_hidden)
        mtp_follow(e, rows, tokens);
    return r;
}

/* The rows of one sequence's tokens, in chunks of n_batch. The logits of
 * every token go to `logits` (logits_all), else those of the last one; with
 * dev_last, the last chunk leaves its last token's logits in the backend's
 * memory and *dev_last points at them; with smp too, that chunk samples
 * them inside its step where the backend can, and *sampled says so. */
static int forward_seq(engine *e, engine_seq *s, const int32_t *tokens, int n, float *logits,
                       int logits_all, float **dev_last, bk_sample_req *smp, int *sampled,
                       memra_err *err)
{
    const model_config *c = &e->m.config;
    backend_bind(e->bk);
    if (n <= 0)
        return memra_fail(err, "forward: no tokens (n = %d)", n);
    if (s->e != e)
        return memra_fail(err, "forward: the sequence belongs to another engine");
    int64_t pos0 = s->kv.n_tokens;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->n_vocab)
            return memra_fail(err, "token id %" PRId32 " at index %d (position %" PRId64
                              ") is out of range: the vocabulary has %" PRId64 " ids",
                              tokens[i], i, pos0 + i, c->n_vocab);
    if (pos0 + n > e->n_ctx)
        return memra_fail(err, "context full: %d tokens at position %" PRId64
                          " would run past n_ctx %" PRId64, n, pos0, e->n_ctx);
    if (kv_seq_reserve(&s->kv, pos0 + n, err) != 0)
        return -1;
    size_t vocab = (size_t)c->n_vocab;
    for (int done = 0; done < n;) {
        int step = n - done < e->opts.n_batch ? n - done : e->opts.n_batch;
        for (int i = 0; i < step; i++) {
            e->pos[i] = (int32_t)(pos0 + done + i);
            e->seqs[i] = &s->kv;
        }
        bk_batch rows = {step, e->pos, e->seqs};
        int last_step = done + step == n;
        /* One token is a decode step; more are a prompt chunk. */
        int prefill = step > 1;
        if (logits && logits_all)
            forward_step(e, &rows, tokens + done, prefill, 0, logits + (size_t)done * vocab,
                         NULL, NULL);
        else if (dev_last && last_step)
            *sampled = forward_step(e, &rows, tokens + done, prefill, step - 1, NULL, dev_last,
                                    smp);
        else if (logits && last_step)
            forward_step(e, &rows, tokens + done, prefill, step - 1, logits, NULL, NULL);
        else
            forward_step(e, &rows, tokens + done, prefill, step, NULL, NULL, NULL);
        done += step;
        s->kv.n_tokens = pos0 + done;
    }
    return backend_status(e->bk, err);
}

int engine_forward(engine *e, engine_seq *s, const int32_t *tokens, int n, float *logits,
                   int logits_all, memra_err *err)
{
    return forward_seq(e, s, tokens, n, logits, logits_all, NULL, NULL, NULL, err);
}

/* Room for n rows of sampling state, and lists of nb / np / nm entries. */
static void sample_reserve(engine *e, size_t nb, size_t np, size_t nm)
{
    if (!e->srows) {
        e->srows = xcalloc((size_t)e->opts.n_batch, sizeof *e->srows);
        e->souts = xcalloc((size_t)e->opts.n_batch, sizeof *e->souts);
    }
    if (nb > e->sbias_cap) {
        e->sbias_cap = nb + nb / 2;
        e->sbias = xrealloc(e->sbias, e->sbias_cap * sizeof *e->sbias);
    }
    if (np > e->spen_cap) {
        e->spen_cap = np + np / 2;
        e->spen = xrealloc(e->spen, e->spen_cap * sizeof *e->spen);
    }
    if (nm > e->smask_cap) {
        e->smask_cap = nm + nm / 2;
        e->smask = xrealloc(e->smask, e->smask_cap * sizeof *e->smask);
    }
}

/* The device's request for rows [0, n) of a step (n <= n_batch), with
 * smp[i]'s parameters and lists; NULL when the backend has no sample op
 * (the engine samples on the host). The lists do not depend on the
 * logits, so this comes before the step: a backend may then sample inside
 * it (bk_step.sample). */
static bk_sample_req *sample_request(engine *e, int n, sampler *const *smp, bk_sample_req *req)
{
    if (!e->bk->ops->sample)
        return NULL;
    sample_reserve(e, 0, 0, 0);
    size_t nb = 0, np = 0, nm = 0;
    for (int i = 0; i < n; i++) {
        const smp_bias *b;
        const smp_pen *p;
        const uint32_t *mk;
        smp_row *r = &e->srows[i];
        sampler_row_export(smp[i], r, &b, &p, &mk);
        sample_reserve(e, nb + (size_t)r->n_bias, np + (size_t)r->n_pen, nm + (size_t)r->n_mask);
        if (r->n_bias)
            memcpy(e->sbias + nb, b, (size_t)r->n_bias * sizeof *b);
        if (r->n_pen)
            memcpy(e->spen + np, p, (size_t)r->n_pen * sizeof *p);
        if (r->n_mask)
            memcpy(e->smask + nm, mk, (size_t)r->n_mask * sizeof *mk);
        r->bias_at = (int32_t)nb;
        r->pen_at = (int32_t)np;
        r->mask_at = (int32_t)nm;
        nb += (size_t)r->n_bias;
        np += (size_t)r->n_pen;
        nm += (size_t)r->n_mask;
    }
    memset(req, 0, sizeof *req);
    req->n_rows = n;
    req->n_vocab = e->m.config.n_vocab;
    req->rows = e->srows;
    req->bias = e->sbias;
    req->pen = e->spen;
    req->mask = e->smask;
    req->out = e->souts;
    return req;
}

/* Sample one token per row of the step's logits (dev: backend memory,
 * n <= n_batch rows) with smp[i]: on the device when the backend has a
 * sample op (req, from sample_request; `sampled` when the step already
 * did it, else the op runs now; only the ids come back), else on the host
 * from the logits read back. Both pick the same token. ids[i] is -1 with
 * errs[i] set when row i cannot be sampled (a NaN logit, every token
 * banned); returns -1 only when the backend failed or refused the lists. */
static int sample_rows(engine *e, float *dev, int n, sampler *const *smp, bk_sample_req *req,
                       int sampled, int32_t *ids, memra_err *errs, memra_err *err)
{
    size_t vocab = (size_t)e->m.config.n_vocab;
    if (backend_status(e->bk, err) != 0)
        return -1;
    if (req) {
        if (!sampled) {
            if (!dev)
                return memra_fail(err, "sample: the step left no logits");
            req->rc = e->bk->ops->sample(e->bk, dev, n, (int64_t)vocab, req->rows, req->bias,
                                         req->pen, req->mask, req->out, &req->err);
        }
        if (req->rc != 0) {
            *err = req->err;
            return -1;
        }
        for (int i = 0; i < n; i++)
            ids[i] = sampler_row_done(smp[i], &req->out[i], &errs[i]);
        return 0;
    }
    if (!dev)
        return memra_fail(err, "sample: the step left no logits");
    if (!e->host_logits)
        e->host_logits = xmalloc((size_t)e->opts.n_batch * vocab * sizeof(float));
    e->bk->ops->act_read(e->bk, dev, e->host_logits, (size_t)n * vocab);
    if (backend_status(e->bk, err) != 0)
        return -1;
    for (int i = 0; i < n; i++)
        ids[i] = sampler_sample(smp[i], e->host_logits + (size_t)i * vocab, &errs[i]);
    return 0;
}

int engine_forward_sample(engine *e, engine_seq *s, const int32_t *tokens, int n, sampler *smp,
                          int32_t *out_id, memra_err *err)
{
    float *dev = NULL;
    memra_err row_err;
    int32_t id = -1;
    bk_sample_req req_store;
    int sampled = 0;
    /* tokens may be out_id itself (the decode loop's one token) */
    bk_sample_req *req = sample_request(e, 1, &smp, &req_store);
    int rc = forward_seq(e, s, tokens, n, NULL, 0, &dev, req, &sampled, err);
    if (rc == 0)
        rc = sample_rows(e, dev, 1, &smp, req, sampled, &id, &row_err, err);
    if (rc == 0 && id < 0) {
        *err = row_err;
        rc = -1;
    }
    *out_id = id;
    return rc;
}

/* The most steps a chain records as one (longer ones run a step at a time). */
enum { CHAIN_RECORD_MAX = 16 };

/* Run a recorded chain (backend_ops.chain_begin gave 1): 1 done, 0 the
 * backend could not (nothing ran: run it a step at a time), -1 a failure. */
static int chain_recorded(engine *e, engine_seq *s, int32_t first, int k, sampler *smp,
                          int32_t *out_ids, memra_err *err)
{
    backend *bk = e->bk;
    int64_t pos0 = s->kv.n_tokens;
    bk_sample_req store;
    bk_sample_req *req = sample_request(e, 1, &smp, &store);
    for (int i = 0; i < k; i++) {
        /* after the first, a placeholder: the backend feeds the id on the device */
        int32_t tok = i ? 0 : first;
        e->pos[0] = (int32_t)(pos0 + i);
        e->seqs[0] = &s->kv;
        bk_batch rows = {1, e->pos, e->seqs};
        float *dev = NULL;
        forward_step(e, &rows, &tok, 0, 0, NULL, &dev, req);
        s->kv.n_tokens = pos0 + i + 1;
    }
    smp_outcome out[CHAIN_RECORD_MAX];
    int r = bk->ops->chain_end(bk, out);
    if (r < 0) {
        if (backend_status(bk, err) == 0)
            memra_fail(err, "forward: the chain of %d steps failed", k);
        return -1;
    }
    if (r == 0) {
        s->kv.n_tokens = pos0;
        return 0;
    }
    for (int i = 0; i < k; i++) {
        memra_err row_err;
        int32_t id = sampler_row_done(smp, &out[i], &row_err);
        if (id < 0) {
            engine_seq_truncate(s, pos0 + i + 1);
            *err = row_err;
            return -1;
        }
        out_ids[i] = id;
    }
    return 1;
}

int engine_forward_chain_sample(engine *e, engine_seq *s, int32_t first, int k, sampler *smp,
                                int32_t *out_ids, memra_err *err)
{
    backend *bk = e->bk;
    if (k <= 0)
        return memra_fail(err, "forward: a chain of %d steps", k);
    int64_t pos0 = s->kv.n_tokens;
    if (k > 1 && k <= CHAIN_RECORD_MAX && bk->ops->chain_begin && bk->ops->sample &&
        s->e == e && sampler_is_greedy(smp) && !e->m.keep_hidden && !e->m.hidden_fn &&
        engine_rewindable(e) && first >= 0 && first < e->m.config.n_vocab &&
        pos0 + k <= e->n_ctx) {
        backend_bind(bk);
        if (kv_seq_reserve(&s->kv, pos0 + k, err) != 0)
            return -1;
        if (bk->ops->chain_begin(bk, k, (int)pos0, e->max_blocks, e->m.head) == 1) {
            int r = chain_recorded(e, s, first, k, smp, out_ids, err);
            if (r != 0)
                return r < 0 ? -1 : 0;
        }
    }
    int32_t tok = first;
    for (int i = 0; i < k; i++) {
        if (engine_forward_sample(e, s, &tok, 1, smp, &tok, err) != 0)
            return -1;
        out_ids[i] = tok;
    }
    return 0;
}

/* Checks and reservations of a batched step; fails changing nothing. */
static int batch_begin(engine *e, engine_seq *const *seqs, const int32_t *tokens, int n,
                       memra_err *err)
{
    const model_config *c = &e->m.config;
    backend_bind(e->bk);
    if (n <= 0)
        return memra_fail(err, "forward: no sequences (n = %d)", n);
    for (int i = 0; i < n; i++) {
        if (seqs[i]->e != e)
            return memra_fail(err, "forward: sequence %d belongs to another engine", i);
        if (tokens[i] < 0 || tokens[i] >= c->n_vocab)
            return memra_fail(err, "token id %" PRId32 " for sequence %d is out of range: the "
                              "vocabulary has %" PRId64 " ids", tokens[i], i, c->n_vocab);
        if (seqs[i]->kv.n_tokens + 1 > e->n_ctx)
            return memra_fail(err, "context full: sequence %d is at position %" PRId64
                              ", n_ctx %" PRId64, i, seqs[i]->kv.n_tokens, e->n_ctx);
        for (int j = 0; j < i; j++)
            if (seqs[j] == seqs[i])
                return memra_fail(err, "forward: sequence %d is also sequence %d", i, j);
    }
    /* Reserve every block first so a full pool changes nothing. */
    for (int i = 0; i < n; i++) {
        kv_seq *kv = &seqs[i]->kv;
        if (kv_seq_reserve(kv, kv->n_tokens + 1, err) != 0) {
            /* give back the blocks the earlier sequences just took */
            for (int j = 0; j < i; j++)
                kv_seq_truncate(&seqs[j]->kv, seqs[j]->kv.n_tokens);
            return -1;
        }
    }
    return 0;
}

/* One chunk of a batched step, rows [done, done + step): the logits into
 * `logits` (host), or left in the backend's memory and returned (want_dev;
 * with smp sampled inside the step when the backend can: *sampled), or not
 * computed. */
static float *batch_chunk(engine *e, engine_seq *const *seqs, const int32_t *tokens, int done,
                          int step, float *logits, int want_dev, bk_sample_req *smp,
                          int *sampled)
{
    for (int i = 0; i < step; i++) {
        e->pos[i] = (int32_t)seqs[done + i]->kv.n_tokens;
        e->seqs[i] = &seqs[done + i]->kv;
    }
    bk_batch rows = {step, e->pos, e->seqs};
    float *dev = NULL;
    if (logits)
        forward_step(e, &rows, tokens + done, 0, 0, logits, NULL, NULL);
    else if (want_dev)
        *sampled = forward_step(e, &rows, tokens + done, 0, 0, NULL, &dev, smp);
    else
        forward_step(e, &rows, tokens + done, 0, step, NULL, NULL, NULL);
    for (int i = 0; i < step; i++)
        seqs[done + i]->kv.n_tokens++;
    return dev;
}

int engine_forward_batch(engine *e, engine_seq *const *seqs, const int32_t *tokens, int n,
                         float *logits, memra_err *err)
{
    if (batch_begin(e, seqs, tokens, n, err) != 0)
        return -1;
    size_t vocab = (size_t)e->m.config.n_vocab;
    for (int done = 0; done < n;) {
        int step = n - done < e->opts.n_batch ? n - done : e->opts.n_batch;
        batch_chunk(e, seqs, tokens, done, step, logits ? logits + (size_t)done * vocab : NULL, 0,
                    NULL, NULL);
        done += step;
    }
    return backend_status(e->bk, err);
}

const kv_seq *engine_seq_kv(const engine_seq *s) { return &s->kv; }

static int sample_rows(engine *e, float *dev, int n, sampler *const *smp, bk_sample_req *req,
                       int sampled, int32_t *ids, memra_err *errs, memra_err *err);
static bk_sample_req *sample_request(engine *e, int n, sampler *const *smp, bk_sample_req *req);

/* engine_forward_packed, with every row's logits into logits ([rows][vocab])
 * when it is not NULL (engine_forward_rows), or every row sampled with
 * smp into ids when smp is not NULL (engine_forward_rows_sample). */
static int forward_packed(engine *e, engine_seq *const *seqs, const int32_t *const *tokens,
                          const int *n, int n_seqs, float *logits, sampler *const *smp,
                          int32_t *out_ids, memra_err *row_errs, memra_err *err)
{
    const model_config *c = &e->m.config;
    backend_bind(e->bk);
    if (n_seqs <= 0)
        return memra_fail(err, "forward: no sequences (n = %d)", n_seqs);
    int64_t rows = 0;
    for (int i = 0; i < n_seqs; i++) {
        engine_seq *s = seqs[i];
        if (s->e != e)
            return memra_fail(err, "forward: sequence %d belongs to another engine", i);
        if (n[i] <= 0)
            return memra_fail(err, "forward: sequence %d has no tokens (n = %d)", i, n[i]);
        for (int j = 0; j < i; j++)
            if (seqs[j] == s)
                return memra_fail(err, "forward: sequence %d is also sequence %d", i, j);
        for (int t = 0; t < n[i]; t++)
            if (tokens[i][t] < 0 || tokens[i][t] >= c->n_vocab)
                return memra_fail(err, "token id %" PRId32 " at index %d of sequence %d is out "
                                  "of range: the vocabulary has %" PRId64 " ids", tokens[i][t],
                                  t, i, c->n_vocab);
        if (s->kv.n_tokens + n[i] > e->n_ctx)
            return memra_fail(err, "context full: %d tokens at position %" PRId64 " of sequence "
                              "%d would run past n_ctx %" PRId64, n[i], s->kv.n_tokens, i,
                              e->n_ctx);
        rows += n[i];
    }
    if (rows > e->opts.n_batch)
        return memra_fail(err, "forward: %" PRId64 " rows in one step, more than the step's %d",
                          rows, e->opts.n_batch);
    /* Reserve every block first so a full pool changes nothing. */
    for (int i = 0; i < n_seqs; i++) {
        kv_seq *kv = &seqs[i]->kv;
        if (kv_seq_reserve(kv, kv->n_tokens + n[i], err) != 0) {
            for (int j = 0; j < i; j++)
                kv_seq_truncate(&seqs[j]->kv, seqs[j]->kv.n_tokens);
            return -1;
        }
    }
    int32_t *ids = xmalloc((size_t)rows * sizeof *ids);
    for (int i = 0, r = 0; i < n_seqs; i++)
        for (int t = 0; t < n[i]; t++, r++) {
            e->pos[r] = (int32_t)(seqs[i]->kv.n_tokens + t);
            e->seqs[r] = &seqs[i]->kv;
            ids[r] = tokens[i][t];
        }
    bk_batch b = {(int)rows, e->pos, e->seqs};
    int rc = 0;
    if (smp) {
        /* the rows' tokens: the ids stay on the device where the backend samples */
        bk_sample_req req_store;
        bk_sample_req *req = sample_request(e, (int)rows, smp, &req_store);
        float *dev = NULL;
        int sampled = forward_step(e, &b, ids, rows > 1, 0, NULL, &dev, req);
        free(ids);
        for (int i = 0; i < n_seqs; i++)
            seqs[i]->kv.n_tokens += n[i];
        rc = sample_rows(e, dev, (int)rows, smp, req, sampled, out_ids, row_errs, err);
        return rc != 0 ? rc : backend_status(e->bk, err);
    }
    if (logits)
        forward_step(e, &b, ids, rows > 1, 0, logits, NULL, NULL);
    else
        forward_step(e, &b, ids, rows > 1, (int)rows, NULL, NULL, NULL);
    free(ids);
    for (int i = 0; i < n_seqs; i++)
        seqs[i]->kv.n_tokens += n[i];
    return backend_status(e->bk, err);
}

int engine_forward_packed(engine *e, engine_seq *const *seqs, const int32_t *const *tokens,
                          const int *n, int n_seqs, memra_err *err)
{
    return forward_packed(e, seqs, tokens, n, n_seqs, NULL, NULL, NULL, NULL, err);
}

int engine_forward_rows(engine *e, engine_seq *const *seqs, const int32_t *const *tokens,
                        const int *n, int n_seqs, float *logits, memra_err *err)
{
    return forward_packed(e, seqs, tokens, n, n_seqs, logits, NULL, NULL, NULL, err);
}

int engine_forward_rows_sample(engine *e, engine_seq *const *seqs, const int32_t *const *tokens,
                               const int *n, int n_seqs, sampler *const *smp, int32_t *ids,
                               memra_err *row_errs, memra_err *err)
{
    return forward_packed(e, seqs, tokens, n, n_seqs, NULL, smp, ids, row_errs, err);
}

int engine_rows_alone(const engine *e)
{
    const model_config *c = &e->m.config;
    int k = e->bk->ops->rows_alone
                ? e->bk->ops->rows_alone(e->bk, c->n_experts > 0 ? (int)c->n_experts_used : 0)
                : 0;
    return k > 0 ? k : 0;
}

int engine_forward_batch_sample(engine *e, engine_seq *const *seqs, const int32_t *tokens, int n,
                                sampler *const *smp, int32_t *out_ids, memra_err *row_errs,
                                memra_err *err)
{
    return engine_forward_batch_sample_with(e, seqs, tokens, n, smp, out_ids, row_errs, NULL,
                                            NULL, err);
}

int engine_forward_batch_sample_with(engine *e, engine_seq *const *seqs, const int32_t *tokens,
                                     int n, sampler *const *smp, int32_t *out_ids,
                                     memra_err *row_errs, engine_overlap_fn overlap, void *ctx,
                                     memra_err *err)
{
    /* out_ids may be tokens: untouched when the step is refused */
    if (batch_begin(e, seqs, tokens, n, err) != 0)
        return -1;
    for (int done = 0; done < n;) {
        int step = n - done < e->opts.n_batch ? n - done : e->opts.n_batch;
        bk_sample_req req_store;
        int sampled = 0;
        bk_sample_req *req = NULL;
        float *dev;
        if (overlap) {
            /* The forward goes first, its logits stay on the device; the
             * host work runs while it computes, then the rows are sampled
             * with the lists as the work left them. */
            dev = batch_chunk(e, seqs, tokens, done, step, NULL, 1, NULL, &sampled);
            overlap(ctx);
            overlap = NULL;
            req = sample_request(e, step, smp + done, &req_store);
        } else {
            req = sample_request(e, step, smp + done, &req_store);
            dev = batch_chunk(e, seqs, tokens, done, step, NULL, 1, req, &sampled);
        }
        if (sample_rows(e, dev, step, smp + done, req, sampled, out_ids + done, row_errs + done,
                        err) != 0)
            return -1;
        done += step;
    }
    return 0;
}
