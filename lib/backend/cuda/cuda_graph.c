/* Decode steps as CUDA graphs: the whole forward of a decode step (a few
 * hundred kernels) captured once per shape and replayed, so a step costs
 * one launch instead of one per kernel.
 *
 * What changes from step to step (token ids, positions, block tables) is
 * not baked into the graph: the step's first node copies it from a pinned
 * host buffer, which step_begin fills before each launch, into a device
 * buffer the embed and attention ops read during the capture. What the
 * kernels' grids depend on is the key: the row count n, the attention
 * split's bucket (the step's most key chunks rounded up to a power of
 * two; a row's split still depends on its own position only, attention.cuh)
 * and the block-table width. The logits come back through a copy node into
 * pinned memory, copied out after the launch, and before them, in the
 * same buffer, the rows' hidden states when the engine keeps them
 * (bk_step.hidden: a drafter reading the model's state).
 *
 * A step that samples on the device (bk_step.sample: memra-gen's and
 * memra-serve's decode) is graphed the same way, under its own key: its
 * sampling lists go up before the launch (cuda_sample_upload: the seed,
 * stream position, parameters and lists are read from device memory, at
 * addresses that stay put), the graph ends with the sample kernels on the
 * logits, which never leave the device, and the outcomes come back after
 * the launch, with the step's one wait. Which sample kernels run (top-k,
 * top-p, the draw: what the rows' parameters need) is part of the key.
 *
 * A key is run eagerly the first time (in the graph's input layout: that
 * run sizes the scratch buffers the capture will use and makes one-time
 * uploads), captured the second time, replayed after that. Graphs whose
 * buffers moved (a scratch grown, the KV pool remade) are captured again.
 * A capture that fails (something in it could not be captured) is
 * abandoned: the key is marked, and the engine runs the step again
 * eagerly. Replayed steps give the same bytes as eager ones: the same
 * kernels with the same arguments (tests/unit/test_cuda_engine.c).
 *
 * A chain (backend_ops.chain_begin: a drafter's greedy steps) is k such
 * one-row sampled steps in one graph: each step's inputs have a region of
 * their own in the pinned buffer (all filled before the launch), its
 * first node copies them over the one device input buffer (the steps run
 * in stream order, so each reads its own), and from the second step on a
 * kernel writes the id the step before sampled over the token
 * (launch_sample_feed); each step's outcome is copied to pinned memory
 * as it is made. k steps cost one launch and one wait instead of k of
 * each. A chain key is warmed by one chain run step by step (which warms
 * and captures its one-step graphs, sizing the scratch), captured the
 * next time, replayed after; a capture that fails is abandoned and the
 * engine runs that chain step by step again. All of a chain's steps take
 * the bucket of its last position: a row's split depends on its own
 * position only, so a wider grid changes no bits. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "core/check.h"
#include "kernels/attention.cuh"
#include "kernels/sample.cuh"

enum { GRAPH_SLOTS = 64, CHAIN_MAX = 16 };

typedef struct {
    int n, bucket, tbl_cap;
    size_t n_logits;
    size_t n_hidden; /* the hidden states read before the logits (bk_step.hidden) */
    const void *forward_id; /* bk_step.forward_id */
    int sampled;   /* ends with the sample kernels, not a logits copy: their
                    * cuda_sample_kind, else 0 */
    int dev;       /* ends with the logits left on the device (bk_step.dev_logits) */
    int chain_k;   /* a chain of this many one-row steps, 0 a single step */
    float *dev_logits; /* where, for the replays */
    int seen;      /* eager runs of this key */
    int broken;    /* a capture failed: always eager */
    cudaGraphExec_t exec;
    uint64_t epoch;
    const void *kv_k;
} graph_entry;

typedef enum { GM_NONE = 0, GM_WARM, GM_CAPTURE } graph_mode;

/* A chain being run (cuda_graph_chain_begin to cuda_graph_chain_end). */
typedef struct {
    int active;
    int k, i;          /* its steps, the step running now */
    int replay;        /* 1: replaying e's graph, 0: capturing it */
    int bad;           /* a step did not fit, or its capture was abandoned */
    int skip;          /* bad before anything was captured: no ops run */
    graph_entry *e;
    size_t len;        /* int32s of one step's inputs */
    int64_t n_vocab;
    smp_outcome *host; /* pinned [CHAIN_MAX]: the steps' outcomes */
} graph_chain;

struct cuda_graphs {
    graph_entry e[GRAPH_SLOTS];
    int n_e;
    /* The step's inputs: [tokens n][pad][meta], pinned host and device. */
    int32_t *in_host, *in_dev;
    size_t in_cap;        /* int32s */
    float *rb_host;       /* logits read back by the graph */
    size_t rb_cap;        /* floats */
    /* The step running now. */
    graph_mode mode;
    graph_entry *cur;
    size_t meta_off;
    size_t slots_off;     /* the rows' state slots [n], after the tables */
    int n_reads, bad;
    int sample_launched; /* the capture holds the sample kernel */
    /* the capture's reads, in order, each after the last in rb_host */
    float *read_dst[2];
    size_t read_n[2], read_at;
    int saved_failed;
    memra_err saved_err;
    /* The chain being run (cuda_graph_chain_begin to _end). */
    graph_chain chain;
    uint64_t replays, captures, abandoned, sampled_replays, chain_replays;
};


static cuda_graphs *graphs_of(cuda_backend *cb)
{
    if (!cb->graphs)
        cb->graphs = xcalloc(1, sizeof *cb->graphs);
    return cb->graphs;
}

int cuda_graph_capturing(const cuda_backend *cb)
{
    return cb->graphs && cb->graphs->mode == GM_CAPTURE;
}

const int32_t *cuda_graph_tokens(cuda_backend *cb)
{
    cuda_graphs *g = cb->graphs;
    return g && g->mode != GM_NONE ? g->in_dev : NULL;
}

const int32_t *cuda_graph_slots(cuda_backend *cb)
{
    cuda_graphs *g = cb->graphs;
    return g && g->mode != GM_NONE ? g->in_dev + g->slots_off : NULL;
}

const int32_t *cuda_graph_saves(cuda_backend *cb)
{
    cuda_graphs *g = cb->graphs;
    return g && g->mode != GM_NONE ? g->in_dev + g->slots_off + g->cur->n : NULL;
}

const int32_t *cuda_graph_rows(cuda_backend *cb)
{
    cuda_graphs *g = cb->graphs;
    return g && g->mode != GM_NONE ? g->in_dev + g->meta_off : NULL;
}

int cuda_graph_chunks(cuda_backend *cb)
{
    cuda_graphs *g = cb->graphs;
    return g && g->mode != GM_NONE ? g->cur->bucket : 0;
}

void cuda_graph_spoil(cuda_backend *cb)
{
    if (cuda_graph_capturing(cb))
        cb->graphs->bad = 1;
}

void cuda_graph_read(cuda_backend *cb, const float *src, float *dst, size_t n)
{
    cuda_graphs *g = cb->graphs;
    if (cb->failed)
        return;
    /* The logits (after the hidden states, when kept), into the readback
     * buffer sized at begin. */
    if (g->n_reads >= 2 || g->read_at + n > g->rb_cap) {
        g->bad = 1;
        return;
    }
    g->read_dst[g->n_reads] = dst;
    g->read_n[g->n_reads++] = n;
    CU_OK(cb, cudaMemcpyAsync(g->rb_host + g->read_at, src, n * sizeof(float),
                              cudaMemcpyDeviceToHost, cb->stream));
    g->read_at += n;
}

static void entry_drop(graph_entry *e)
{
    if (e->exec)
        cudaGraphExecDestroy(e->exec);
    e->exec = NULL;
}

void cuda_graph_stats(cuda_backend *cb, uint64_t *replays, uint64_t *captures,
                      uint64_t *abandoned)
{
    cuda_graphs *g = cb->graphs;
    *replays = g ? g->replays : 0;
    *captures = g ? g->captures : 0;
    *abandoned = g ? g->abandoned : 0;
}

uint64_t cuda_graph_sampled_replays(cuda_backend *cb)
{
    return cb->graphs ? cb->graphs->sampled_replays : 0;
}

uint64_t cuda_graph_chain_replays(cuda_backend *cb)
{
    return cb->graphs ? cb->graphs->chain_replays : 0;
}

void cuda_graphs_free(cuda_backend *cb)
{
    cuda_graphs *g = cb->graphs;
    if (!g)
        return;
    for (int i = 0; i < g->n_e; i++)
        entry_drop(&g->e[i]);
    cudaFreeHost(g->in_host);
    cudaFree(g->in_dev);
    cudaFreeHost(g->rb_host);
    cudaFreeHost(g->chain.host);
    free(g);
    cb->graphs = NULL;
}

/* Grow a pinned host buffer and its device twin (never during a capture:
 * step_begin calls this before one starts). The old device buffer may be
 * in a graph: those are captured again. */
static int ensure_inputs(cuda_backend *cb, cuda_graphs *g, size_t n32)
{
    if (n32 <= g->in_cap)
        return 0;
    if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
        return -1;
    cudaFreeHost(g->in_host);
    cudaFree(g->in_dev);
    g->in_host = NULL;
    g->in_dev = NULL;
    g->in_cap = 0;
    size_t want = n32 < 1024 ? 1024 : n32 + n32 / 2;
    if (CU_OK(cb, cudaMallocHost((void **)&g->in_host, want * sizeof(int32_t))) ||
        cuda_alloc(cb, (void **)&g->in_dev, want * sizeof(int32_t), "graph inputs", 1, NULL) != 0)
        return -1;
    g->in_cap = want;
    cb->mem_epoch++;
    return 0;
}

static int ensure_readback(cuda_backend *cb, cuda_graphs *g, size_t n)
{
    if (n <= g->rb_cap)
        return 0;
    if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
        return -1;
    cudaFreeHost(g->rb_host);
    g->rb_host = NULL;
    g->rb_cap = 0;
    if (CU_OK(cb, cudaMallocHost((void **)&g->rb_host, n * sizeof(float))))
        return -1;
    g->rb_cap = n;
    cb->mem_epoch++;
    return 0;
}

/* The key's slot; NULL when the table is full (the step runs eagerly). */
static graph_entry *entry_for(cuda_graphs *g, int n, int bucket, int tbl_cap, size_t n_logits,
                              size_t n_hidden, const void *forward_id, int sampled, int dev,
                              int chain_k)
{
    for (int i = 0; i < g->n_e; i++) {
        graph_entry *e = &g->e[i];
        if (e->n == n && e->bucket == bucket && e->tbl_cap == tbl_cap &&
            e->n_logits == n_logits && e->n_hidden == n_hidden &&
            e->forward_id == forward_id && e->sampled == sampled && e->dev == dev &&
            e->chain_k == chain_k)
            return e;
    }
    if (g->n_e == GRAPH_SLOTS)
        return NULL;
    graph_entry *e = &g->e[g->n_e++];
    memset(e, 0, sizeof *e);
    e->n = n;
    e->bucket = bucket;
    e->tbl_cap = tbl_cap;
    e->n_logits = n_logits;
    e->n_hidden = n_hidden;
    e->forward_id = forward_id;
    e->sampled = sampled;
    e->dev = dev;
    e->chain_k = chain_k;
    return e;
}

/* The step's inputs in the graph layout, into the pinned buffer: tokens,
 * then (at meta_off) [n] positions, [n] table offsets, [n][tbl_cap]
 * tables, then (at slots_off) [n] state slots and [n] checkpoint slots
 * (kv_seq_save_slot: a speculation round's verify rows on a model with
 * recurrent layers keep the states they leave). -1 (nothing recorded) when a row does not fit the layout: the
 * step then runs eagerly, and the ops report what is wrong with it. */
static int fill_inputs(cuda_graphs *g, int32_t *h, const bk_step *st, int tbl_cap)
{
    const bk_batch *rows = st->rows;
    int n = rows->n;
    memcpy(h, st->tokens, (size_t)n * sizeof(int32_t));
    int32_t *m = h + g->meta_off;
    for (int i = 0; i < n; i++) {
        const kv_seq *s = rows->seq[i];
        if (!s || rows->pos[i] < 0 || s->n_blocks > tbl_cap ||
            (int64_t)rows->pos[i] >= (int64_t)s->n_blocks * s->cache->block_size)
            return -1;
        m[i] = rows->pos[i];
        m[n + i] = i * tbl_cap;
        int32_t *t = m + 2 * n + (size_t)i * tbl_cap;
        memcpy(t, s->blocks, (size_t)s->n_blocks * sizeof(int32_t));
        memset(t + s->n_blocks, 0, (size_t)(tbl_cap - s->n_blocks) * sizeof(int32_t));
        h[g->slots_off + (size_t)i] = s->state_slot;
        h[g->slots_off + (size_t)n + (size_t)i] = kv_seq_save_slot(s, rows->pos[i]);
    }
    return 0;
}

/* Launch the entry's graph and copy the logits, or the sampled outcomes,
 * out; a graph that leaves its logits on the device returns at once, the
 * device still computing. */
static int replay(cuda_backend *cb, cuda_graphs *g, graph_entry *e, const bk_step *st)
{
    g->replays++;
    if (CU_OK(cb, cudaGraphLaunch(e->exec, cb->stream)))
        return -1;
    if (e->dev) {
        *st->dev_logits = e->dev_logits;
        return 1;
    }
    if (e->sampled) {
        g->sampled_replays++;
        if (cuda_sample_read(cb, st->sample->n_rows, st->sample->out) != 0)
            return -1;
        /* (the wait for the outcomes covers the hidden states' copy) */
        if (e->n_hidden)
            memcpy(st->hidden, g->rb_host, e->n_hidden * sizeof(float));
        return 1;
    }
    if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
        return -1;
    if (e->n_hidden)
        memcpy(st->hidden, g->rb_host, e->n_hidden * sizeof(float));
    memcpy(st->logits, g->rb_host + e->n_hidden, st->n_logits * sizeof(float));
    return 1;
}

static int pow2_at_least(int x)
{
    int p = 1;
    while (p < x)
        p *= 2;
    return p;
}

/* ---- chains ---- */

/* Abandon the chain's capture: end it if it is open, keep nothing, and
 * give back the failure state it began with (what failed inside it fails
 * again when the engine runs the steps one at a time, if it is real). */
static void chain_abandon(cuda_backend *cb, cuda_graphs *g)
{
    if (g->mode == GM_CAPTURE) {
        cudaGraph_t graph = NULL;
        cudaStreamEndCapture(cb->stream, &graph);
        if (graph)
            cudaGraphDestroy(graph);
        cudaGetLastError();
        cb->failed = g->saved_failed;
        cb->err = g->saved_err;
        g->mode = GM_NONE;
    }
    g->chain.e->broken = 1;
    g->chain.bad = 1;
    g->abandoned++;
}

int cuda_graph_chain_begin(cuda_backend *cb, int k, int first_pos, int max_blocks,
                           const void *forward_id)
{
    if (!cb->tune.graphs || cb->failed || k < 2 || k > CHAIN_MAX || max_blocks <= 0 ||
        first_pos < 0)
        return 0;
    cuda_graphs *g = graphs_of(cb);
    if (g->chain.active || g->mode != GM_NONE)
        return 0;
    int chunks = 1;
    for (int i = 0; i < k; i++) {
        int c = attn_row_chunks(first_pos + i, 0);
        chunks = c > chunks ? c : chunks;
    }
    graph_entry *e = entry_for(g, 1, pow2_at_least(chunks), max_blocks, 0, 0, forward_id, 1, 0,
                               k);
    if (!e || e->broken)
        return 0;
    if (!e->exec && e->seen == 0) {
        /* The warm-up: the engine runs these steps one at a time. */
        e->seen = 1;
        return 0;
    }
    /* one row: [token][pad 3][pos][table offset][table][slot][save] */
    size_t meta_off = 4, slots_off = meta_off + 2 + (size_t)max_blocks, len = slots_off + 2;
    if (ensure_inputs(cb, g, (size_t)k * len) != 0)
        return 0;
    if (!g->chain.host &&
        CU_OK(cb, cudaMallocHost((void **)&g->chain.host, CHAIN_MAX * sizeof(smp_outcome))))
        return 0;
    if (e->exec && (e->epoch != cb->mem_epoch || e->kv_k != cb->kv_k))
        entry_drop(e);
    g->meta_off = meta_off;
    g->slots_off = slots_off;
    g->chain.active = 1;
    g->chain.k = k;
    g->chain.i = 0;
    g->chain.replay = e->exec != NULL;
    g->chain.bad = 0;
    g->chain.skip = 0;
    g->chain.e = e;
    g->chain.len = len;
    g->chain.n_vocab = 0;
    return 1;
}

/* Step i of a chain: its inputs into region i; replaying, nothing runs
 * until the last step launches the graph; capturing, the step's ops go
 * into the capture the first step began. */
static int chain_step_begin(cuda_backend *cb, cuda_graphs *g, const bk_step *st)
{
    graph_chain *c = &g->chain;
    int i = c->i;
    cb->step = (cuda_step){.active = 1, .prefill = 0, .n = 1};
    bk_sample_req *sr = st->sample;
    int fits = sr && sr->n_rows == 1 && st->rows->n == 1 && !st->logits && !st->hidden &&
               st->graph_ok && st->forward_id == c->e->forward_id &&
               st->max_blocks == c->e->tbl_cap && !cb->failed;
    if (fits && i == 0) {
        /* The lists go up once, outside the graph; every step reads them. */
        sr->rc = 0;
        if (cuda_sample_upload(cb, 1, sr->n_vocab, sr->rows, sr->bias, sr->pen, sr->mask,
                               &sr->err) != 0) {
            sr->rc = -1;
            fits = 0;
        }
        c->n_vocab = sr->n_vocab;
        /* A list longer than the staging buffers moved them (mem_epoch):
         * the graph holds the old addresses, so this chain is captured
         * again. */
        if (c->replay && (c->e->epoch != cb->mem_epoch || c->e->kv_k != cb->kv_k)) {
            entry_drop(c->e);
            c->replay = 0;
        }
    }
    /* greedy rows only: the same outcome whatever the stream position */
    fits = fits && cuda_sample_kind(cb) == 1 && sr->n_vocab == c->n_vocab;
    if (fits) {
        sr->rc = 0;
        cb->step.sample = sr;
    }
    if (!fits || fill_inputs(g, g->in_host + (size_t)i * c->len, st, c->e->tbl_cap) != 0)
        c->bad = 1;
    if (c->bad && g->mode != GM_CAPTURE)
        c->skip = 1;
    if (c->replay || c->skip) {
        cb->step.active = 0;
        c->i++;
        if (c->replay && !c->skip && c->i == c->k) {
            g->chain_replays++;
            if (CU_OK(cb, cudaGraphLaunch(c->e->exec, cb->stream)))
                return -1;
        }
        return 1;
    }
    if (i == 0) {
        g->saved_failed = cb->failed;
        g->saved_err = cb->err;
        if (cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal) !=
            cudaSuccess) {
            cudaGetLastError();
            chain_abandon(cb, g);
            c->skip = 1;
            cb->step.active = 0;
            c->i++;
            return 1;
        }
        g->mode = GM_CAPTURE;
        g->cur = c->e;
        g->n_reads = 0;
        g->read_at = 0;
        g->bad = 0;
        g->sample_launched = 0;
    }
    CU_OK(cb, cudaMemcpyAsync(g->in_dev, g->in_host + (size_t)i * c->len,
                              c->len * sizeof(int32_t), cudaMemcpyHostToDevice, cb->stream));
    if (i > 0)
        CU_OK(cb, launch_sample_feed(cuda_sample_outcomes(cb), c->n_vocab, g->in_dev,
                                     cb->stream));
    return 0;
}

/* After step i's ops (captured): its sample kernel and the copy of its
 * outcome; the last step ends the capture and launches the graph. */
static int chain_step_end(cuda_backend *cb, cuda_graphs *g)
{
    graph_chain *c = &g->chain;
    cuda_flush_pending(cb);
    bk_sample_req *sr = cb->step.sample;
    cb->step.active = 0;
    if (sr && sr->logits && cuda_sample_launch(cb, sr->logits, 1, c->n_vocab) == 0)
        g->sample_launched++;
    else
        g->bad = 1;
    CU_OK(cb, cudaMemcpyAsync(c->host + c->i, cuda_sample_outcomes(cb), sizeof(smp_outcome),
                              cudaMemcpyDeviceToHost, cb->stream));
    if (++c->i < c->k)
        return 1;
    graph_entry *e = c->e;
    cudaGraph_t graph = NULL;
    cudaError_t rc = cudaStreamEndCapture(cb->stream, &graph);
    g->mode = GM_NONE;
    int ok = rc == cudaSuccess && graph && !cb->failed && !g->bad && !c->bad &&
             g->sample_launched == c->k && g->n_reads == 0;
    if (ok)
        ok = cudaGraphInstantiate(&e->exec, graph, 0) == cudaSuccess;
    if (graph)
        cudaGraphDestroy(graph);
    if (!ok) {
        /* the capture is over: chain_abandon keeps the failure state */
        e->exec = NULL;
        cudaGetLastError();
        cb->failed = g->saved_failed;
        cb->err = g->saved_err;
        chain_abandon(cb, g);
        return 1;
    }
    g->captures++;
    e->epoch = cb->mem_epoch;
    e->kv_k = cb->kv_k;
    if (CU_OK(cb, cudaGraphLaunch(e->exec, cb->stream)))
        return -1;
    return 1;
}

int cuda_graph_chain_end(cuda_backend *cb, smp_outcome *out)
{
    cuda_graphs *g = cb->graphs;
    if (!g || !g->chain.active)
        return 0;
    graph_chain *c = &g->chain;
    /* A capture left open (a step that failed to begin never ended). */
    if (g->mode == GM_CAPTURE)
        chain_abandon(cb, g);
    c->active = 0;
    g->mode = GM_NONE;
    cb->step.active = 0;
    if (cb->failed)
        return -1;
    if (c->bad || c->skip || c->i != c->k)
        return 0;
    if (CU_OK(cb, cudaStreamSynchronize(cb->stream)))
        return -1;
    memcpy(out, c->host, (size_t)c->k * sizeof *out);
    return 1;
}

int cuda_graph_step_begin(cuda_backend *cb, const bk_step *st)
{
    if (cb->graphs && cb->graphs->chain.active)
        return chain_step_begin(cb, cb->graphs, st);
    int n = st->rows->n;
    cb->step = (cuda_step){.active = 1, .prefill = st->prefill, .n = n};
    if (cb->failed) {
        cb->step.active = 0;
        return -1;
    }
    bk_sample_req *sr = st->sample;
    if (sr) {
        /* Every step, before any capture or replay: the lists go up
         * outside the graph, which reads them where they land. */
        sr->rc = 0;
        if (cuda_sample_upload(cb, sr->n_rows, sr->n_vocab, sr->rows, sr->bias, sr->pen, sr->mask,
                               &sr->err) == 0) {
            cb->step.sample = sr;
        } else if (cb->failed) {
            cb->step.active = 0;
            return -1;
        } else {
            sr->rc = -1; /* refused: the ops run, nothing is sampled */
        }
    }
    int sampled = cb->step.sample ? cuda_sample_kind(cb) : 0;
    int dev = !sampled && st->dev_logits;
    if (!cb->tune.graphs || !st->graph_ok || n > cb->tune.graph_max_rows || st->max_blocks <= 0)
        return 0;
    if (sampled ? sr->n_rows != n || st->logits
        : dev   ? st->logits != NULL
                : !st->logits || st->n_logits == 0)
        return 0;
    /* kept hidden states beside logits read back or sampled (engine.c) */
    size_t n_hidden = st->hidden ? st->n_hidden : 0;
    if (n_hidden && dev)
        return 0;
    cuda_graphs *g = graphs_of(cb);
    g->mode = GM_NONE;
    int chunks = 1;
    for (int i = 0; i < n; i++) {
        int c = attn_row_chunks(st->rows->pos[i], 0);
        chunks = c > chunks ? c : chunks;
    }
    graph_entry *e = entry_for(g, n, pow2_at_least(chunks), st->max_blocks, st->n_logits,
                               n_hidden, st->forward_id, sampled, dev, 0);
    if (!e || e->broken)
        return 0;
    g->meta_off = ((size_t)n + 3) & ~(size_t)3;
    g->slots_off = g->meta_off + 2 * (size_t)n + (size_t)n * (size_t)st->max_blocks;
    size_t len = g->slots_off + 2 * (size_t)n;
    if (ensure_inputs(cb, g, len) != 0 ||
        ensure_readback(cb, g, n_hidden + (sampled || dev ? 0 : st->n_logits)) != 0) {
        cb->step.active = 0;
        return -1;
    }
    if (fill_inputs(g, g->in_host, st, st->max_blocks) != 0)
        return 0;
    if (e->exec && (e->epoch != cb->mem_epoch || e->kv_k != cb->kv_k))
        entry_drop(e);
    if (e->exec) {
        cb->step.active = 0;
        return replay(cb, g, e, st);
    }
    g->cur = e;
    g->n_reads = 0;
    g->read_at = 0;
    g->bad = 0;
    g->sample_launched = 0;
    if (e->seen == 0) {
        /* The warm-up: eager, in the graph's layout. */
        e->seen = 1;
        g->mode = GM_WARM;
        return CU_OK(cb, cudaMemcpyAsync(g->in_dev, g->in_host, len * sizeof(int32_t),
                                         cudaMemcpyHostToDevice, cb->stream))
                   ? -1
                   : 0;
    }
    g->saved_failed = cb->failed;
    g->saved_err = cb->err;
    if (cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        /* A device or driver without stream capture: this key runs eagerly. */
        cudaGetLastError();
        e->broken = 1;
        return 0;
    }
    g->mode = GM_CAPTURE;
    CU_OK(cb, cudaMemcpyAsync(g->in_dev, g->in_host, len * sizeof(int32_t),
                              cudaMemcpyHostToDevice, cb->stream));
    return 0;
}

/* End a capture: instantiate and launch it, or abandon it (0: the engine
 * runs the step again eagerly). */
static int end_capture(cuda_backend *cb, cuda_graphs *g, const bk_step *st)
{
    graph_entry *e = g->cur;
    cudaGraph_t graph = NULL;
    cudaError_t rc = cudaStreamEndCapture(cb->stream, &graph);
    g->mode = GM_NONE;
    /* The step's one result: the logits copy, the sample kernel, or the
     * logits left where the ops wrote them. */
    int ok = rc == cudaSuccess && graph && !cb->failed && !g->bad &&
             (e->sampled ? g->sample_launched &&
                               (e->n_hidden ? g->n_reads == 1 && g->read_dst[0] == st->hidden &&
                                                  g->read_n[0] == e->n_hidden
                                            : g->n_reads == 0)
              : e->dev   ? g->n_reads == 0 && !g->sample_launched && *st->dev_logits
              : e->n_hidden ? g->n_reads == 2 && g->read_dst[0] == st->hidden &&
                                  g->read_n[0] == e->n_hidden && g->read_dst[1] == st->logits &&
                                  g->read_n[1] == st->n_logits
                            : g->n_reads == 1 && g->read_dst[0] == st->logits &&
                                  g->read_n[0] == st->n_logits);
    if (e->dev)
        e->dev_logits = *st->dev_logits;
    if (ok) {
        rc = cudaGraphInstantiate(&e->exec, graph, 0);
        ok = rc == cudaSuccess;
    }
    if (graph)
        cudaGraphDestroy(graph);
    if (!ok) {
        /* What failed inside the capture fails again eagerly if it is real. */
        e->exec = NULL;
        e->broken = 1;
        cudaGetLastError();
        cb->failed = g->saved_failed;
        cb->err = g->saved_err;
        g->abandoned++;
        return 0;
    }
    g->captures++;
    e->epoch = cb->mem_epoch;
    e->kv_k = cb->kv_k;
    return replay(cb, g, e, st);
}

int cuda_graph_step_end(cuda_backend *cb, const bk_step *st)
{
    cuda_graphs *g = cb->graphs;
    if (g && g->chain.active)
        return chain_step_end(cb, g);
    cuda_flush_pending(cb);
    int capturing = g && g->mode == GM_CAPTURE;
    bk_sample_req *sr = cb->step.sample;
    if (sr && !sr->logits) {
        sr->rc = memra_fail(&sr->err, "sample: the step left no logits");
        sr = NULL;
    }
    /* The sample kernel after the forward: into the capture, or run now. */
    if (sr && cuda_sample_launch(cb, sr->logits, sr->n_rows, sr->n_vocab) == 0 && capturing)
        g->sample_launched = 1;
    int r = 1;
    if (capturing)
        r = end_capture(cb, g, st); /* replays it, outcomes included */
    else if (sr && cuda_sample_read(cb, sr->n_rows, sr->out) != 0)
        r = -1;
    if (g)
        g->mode = GM_NONE;
    cb->step.active = 0;
    if (r < 0 || cb->failed)
        return -1;
    return r;
}
