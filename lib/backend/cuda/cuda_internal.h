/* The CUDA backend's insides, shared by its files:
 *   cuda_backend.c    setup, errors, device memory, activations, the vtable
 *   cuda_weights.c    weight upload and repacking (weight_prepare)
 *   cuda_ops.c        embed, norms, projections, FFN, elementwise ops
 *   cuda_attention.c  row metadata, the device KV pool, QK-norm + RoPE, attention
 *   cuda_moe.c        routed experts
 *   cuda_delta.c      the gated DeltaNet mixer and the gated attention's small ops
 *   cuda_sample.c     sampling on the device
 *   cuda_graph.c      decode steps captured as CUDA graphs and replayed
 *   cuda_gemm.c       prefill projections as tensor-core GEMMs (cuBLASLt)
 *   cuda_dgemm.c      decode projections: the bf16 decode GEMM or the mat-vec
 *
 * Everything runs in order on one stream. Ops return nothing (backend.h),
 * so the first failure (a CUDA error, device memory exhausted, a weight the
 * op cannot read) is recorded in `err` with the call, file and line; every
 * later op returns at once, act_read fills its output with NaN, and
 * backend_status reports the failure. */
#ifndef MEMRA_BACKEND_CUDA_INTERNAL_H
#define MEMRA_BACKEND_CUDA_INTERNAL_H

#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_device.h"
#include "kernels/matmul.cuh"
#include "kernels/weight_layout.h"

/* The device copy of one weight (bk_weight.dev points here). */
typedef struct cuda_weight {
    const void *owner;  /* the cuda_backend that made it */
    const char *name;
    dtype type;
    cu_matrix m;        /* the matrix in its kernel layout */
    float *vec;         /* f32 copy of a vector weight (rows == 1), else NULL */
    struct cuda_weight *next;
} cuda_weight;

/* Device pointer tables of one MoE layer's experts, made on first use. */
/* A prompt chunk's routed experts go to the tensor cores from this many
 * (row, expert) pairs (cuda_moe.c). */
enum { CU_MOE_GEMM_PAIRS = 64 };

typedef struct cuda_moe_table {
    const bk_weight *gate_host; /* the layer's host array: the cache key */
    int n_experts;
    const void **key;           /* [3][n_experts] the experts' bk_weight.dev when made */
    const void **gate, **up, **down; /* device arrays [n_experts] */
    cu_matrix gate_m, up_m, down_m;  /* shape and format (data unused) */
    struct cuda_moe_table *next;
} cuda_moe_table;

/* A pinned host buffer and the device buffer it is copied into; `done`
 * marks when the last copy out of the host buffer finished. */
typedef struct {
    void *host, *dev;
    size_t cap;
    cudaEvent_t done;
    int pending;
} cuda_stage;

enum { STAGE_TOKENS = 0, STAGE_ROWS, N_STAGES };
enum { SCR_ATTN = 0, SCR_MOE_PROBS, SCR_MOE_IDS, SCR_MOE_W, SCR_MOE_HB, SCR_MOE_HB2, SCR_MOE_Y,
       SCR_MOE_ORDER, SCR_MOE_CHUNKS, SCR_MOE_XG, SCR_MOE_XBF, SCR_DG_PARTIALS, SCR_FLASH,
       SCR_DELTA, SCR_DELTA_CHUNK, SCR_XSHADOW, SCR_GLU_BF, N_SCRATCH };
/* The fewest rows of a prefill step that run the DeltaNet rule chunked
 * (cuda_delta.c); fewer run it row after row, as decode steps do. */
enum { CUDA_DELTA_CHUNK_MIN_ROWS = 32 };
enum { CUDA_ROPE_CACHE = 8 };

typedef struct cuda_sampler cuda_sampler;
typedef struct cuda_graphs cuda_graphs;
typedef struct cuda_gemm cuda_gemm;
typedef struct cuda_link cuda_link;

/* The step the engine is running (backend.h step_begin / step_end). */
typedef struct {
    int active;      /* between step_begin and step_end */
    int prefill;     /* the rows are one sequence's prompt chunk */
    int n;
    /* the step's device sampling (bk_step.sample), its lists uploaded;
     * NULL when it has none or they were refused */
    bk_sample_req *sample;
} cuda_step;

/* A residual add held back so the RMSNorm after it can do it (the add and
 * the norm in one launch, the same bytes as two). Only inside a step. */
typedef struct {
    float *x;
    const float *y;
    size_t n;
} cuda_pending_add;

/* x rounded to bf16 by the op that made it (an RMSNorm, or decode
 * attention's combine: the bytes the decode GEMM's own rounding gives),
 * for the projections of the op right after it: the op's decode GEMM
 * reads it instead of launching its rounding (the GLU's GEMM hands down
 * its own copy the same way, inside cuda_op_ffn_glu).
 * Every other op drops it (cuda_flush_pending, and the ops that do not
 * flush), so it never outlives the f32 rows it copies. */
typedef struct {
    const float *x; /* the producer's f32 output, or NULL */
    size_t n_floats;
    const void *bf;
} cuda_xshadow;

typedef struct {
    cuda_device_info info;
    cuda_tuning tune;
    cudaStream_t stream;
    int failed;
    memra_err err;

    cuda_weight *weights;   /* every upload, freed at destroy */
    uint64_t weight_bytes;
    cuda_moe_table *moe;

    cuda_stage stage[N_STAGES];
    void *scratch[N_SCRATCH];
    size_t scratch_cap[N_SCRATCH];

    /* The device KV pool, the geometry of the host cache it mirrors. */
    const kv_cache *kv;
    kv_cache kv_geom;       /* its geometry when the pool was made (no pointers kept) */
    void *kv_k, *kv_v;
    /* A pipeline stage's part of the cache (backend_ops.cache_window):
     * the pools hold those KV layers and state floats only; has_win 0:
     * the whole cache. cuda_attention.c's cuda_kv_layers and
     * cuda_state_stride say what the pools hold. */
    bk_cache_window win;
    int has_win;
    /* Recorded on the stream after a pipeline stage's activations are
     * copied in or read out (cuda_act_import), for the other stream to
     * wait on. */
    cudaEvent_t xfer;
    /* The recurrent state pool (kv_cache_enable_state's slots), zeroed. */
    float *state;
    size_t state_n_floats;
    /* The row metadata last uploaded (host copy, int32s), so a step's
     * layers upload it once. */
    int32_t *rows_host, *rows_new;
    size_t rows_len, rows_cap;
    int rows_n;

    /* RoPE inverse-frequency tables seen so far, host and device copies. */
    struct {
        float *host, *dev;
        int n;
    } rope[CUDA_ROPE_CACHE];
    int n_rope;

    /* Sampling's staging buffers (cuda_sample.c), made on first use. */
    struct cuda_sampler *sampler;
    cuda_step step;
    cuda_pending_add pending;
    cuda_xshadow xshadow;
    cuda_graphs *graphs;    /* NULL until the first graphed step */
    cuda_gemm *gemm;        /* NULL until the first prefill GEMM */
    /* The decode GEMM's split counters (cuda_dgemm.c): zeroed when made,
     * left zero by every launch. */
    unsigned *dg_counters;
    size_t dg_counters_cap;
    /* Bumped whenever a buffer a captured graph may use is freed or moved
     * (scratch, staging, the KV pool): graphs made before are stale. */
    uint64_t mem_epoch;
    /* The NCCL link of a pipeline stage in a process of its own
     * (cuda_link.c), or NULL. */
    cuda_link *link;
} cuda_backend;

static inline cuda_backend *cuda_of(backend *b) { return (cuda_backend *)b->impl; }

/* Record a failure (the first one wins); returns -1. */
int cuda_failf(cuda_backend *cb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* 0 when rc is cudaSuccess, else record "<what> failed: <error> (file:line)"
 * and return -1. Use through CU_OK. */
int cuda_check_at(cuda_backend *cb, cudaError_t rc, const char *what, const char *file, int line);
#define CU_OK(cb, call) cuda_check_at((cb), (call), #call, __FILE__, __LINE__)

/* dlopen of a toolkit library: the path in env_var when set, else soname
 * on the library path, else in $CUDA_HOME/lib64 (cuda_dlopen.c); NULL
 * when none loads (dlerror says why). */
void *cuda_dlopen(const char *env_var, const char *soname);

/* The pipeline link (cuda_link.c; backend_ops.link_*). */
int cuda_link_join(backend *b, const char *id_file, int n_ranks, int rank, memra_err *err);
int cuda_link_send(backend *b, const float *src, size_t n, int peer);
int cuda_link_recv(backend *b, float *dst, size_t n, int peer);
int cuda_link_share(backend *b, void *host, size_t bytes, int root);
void cuda_link_free(cuda_backend *cb);

/* cudaMalloc that fails with "out of device memory: <what> needs N bytes
 * (F of T bytes free)" into err (and, when sticky, the backend). */
int cuda_alloc(cuda_backend *cb, void **p, size_t bytes, const char *what, int sticky,
               memra_err *err);
/* A device scratch buffer of at least `bytes` for slot (grown, never
 * shrunk; growing waits for queued work first). NULL after a failure. */
void *cuda_scratch(cuda_backend *cb, int slot, size_t bytes, const char *what);
/* Copy n bytes of host data into the stage's device buffer, ordered on the
 * stream; returns the device copy or NULL after a failure. */
void *cuda_stage_upload(cuda_backend *cb, int which, const void *src, size_t n);
/* Copy host data to device memory and wait for it (one-time uploads). */
int cuda_upload_sync(cuda_backend *cb, void *dst, const void *src, size_t n, memra_err *err);

/* One stored row (ggml bytes) into its device layout (kernels/
 * weight_layout.h); dst holds cw_row_stride bytes, already zeroed. */
void cuda_repack_row(cw_format f, const uint8_t *src, size_t row_bytes, int64_t cols,
                     uint8_t *dst);

/* The device copy of a prepared weight, or NULL (recorded as a failure,
 * naming `op`) when the CUDA backend did not prepare it. */
const cuda_weight *cuda_weight_of(cuda_backend *cb, const bk_weight *w, const char *op);
/* The f32 device vector of an optional vector weight; NULL when absent. */
const float *cuda_vec_of(cuda_backend *cb, const bk_weight *w, const char *op);

/* Launch a held-back residual add, if any (every op but add and rmsnorm
 * does this first; so do act_read, status and step_end). It also drops
 * the bf16 copy of cuda_xshadow, as do the ops that do not call it; the
 * projection ops take the copy first (cuda_xshadow_take). */
void cuda_flush_pending(cuda_backend *cb);
static inline void cuda_xshadow_drop(cuda_backend *cb) { cb->xshadow.x = NULL; }
/* Whether an op making n rows of a projection's input writes their bf16
 * copy too: a decode step of a decode-GEMM engine, 2 rows or more. */
static inline int cuda_xshadow_wanted(const cuda_backend *cb, int n)
{
    return cb->tune.dgemm > 0 && cb->step.active && !cb->step.prefill && n >= 2;
}
/* The copy when it is of n rows of cols floats at x, else NULL; dropped. */
const void *cuda_xshadow_take(cuda_backend *cb, const float *x, int n, int64_t cols);

/* Graphs (cuda_graph.c). While a step is being captured, the embed and
 * attention ops read the step's tokens and row metadata from these device
 * copies (refreshed from pinned host memory at the start of every replay)
 * instead of uploading their own, and attention sizes its split by the
 * step's bucket. Both return NULL / 0 when no capture is running. */
const int32_t *cuda_graph_tokens(cuda_backend *cb);
const int32_t *cuda_graph_rows(cuda_backend *cb);
int cuda_graph_chunks(cuda_backend *cb);
/* The graphed step's rows' state slots [n] (after its tables), or NULL. */
const int32_t *cuda_graph_slots(cuda_backend *cb);
/* The rows' checkpoint slots (kv_seq_save_slot, -1: none) in the graph
 * layout, after the state slots, or NULL outside a graphed step. */
const int32_t *cuda_graph_saves(cuda_backend *cb);
/* Whether a capture is running; act_read then records its copy. */
int cuda_graph_capturing(const cuda_backend *cb);
/* Something the capture cannot hold happened (a buffer had to grow): the
 * capture will be abandoned and the step run eagerly. */
void cuda_graph_spoil(cuda_backend *cb);
/* act_read during a capture: the copy goes into the graph, the host copy
 * happens after each launch. */
void cuda_graph_read(cuda_backend *cb, const float *src, float *dst, size_t n);
int cuda_graph_step_begin(cuda_backend *cb, const bk_step *st);
int cuda_graph_step_end(cuda_backend *cb, const bk_step *st);
/* backend_ops.chain_begin / chain_end: a chain of greedy one-row steps
 * recorded as one graph (cuda_graph.c). */
int cuda_graph_chain_begin(cuda_backend *cb, int k, int first_pos, int max_blocks,
                           const void *forward_id);
int cuda_graph_chain_end(cuda_backend *cb, smp_outcome *out);
void cuda_graphs_free(cuda_backend *cb);
void cuda_graph_stats(cuda_backend *cb, uint64_t *replays, uint64_t *captures,
                      uint64_t *abandoned);
/* Replays of steps that sampled on the device (within the replays). */
uint64_t cuda_graph_sampled_replays(cuda_backend *cb);
/* Chains replayed from one graph (each counted once, not in replays). */
uint64_t cuda_graph_chain_replays(cuda_backend *cb);

/* The prefill GEMM (cuda_gemm.c): out[n][rows] = x . W^T (+ bias) with
 * bf16 (f16 for F16 weights) operands and f32 accumulation. Returns 1 when
 * it ran, 0 when it does not apply (the caller uses the mat-vec). */
int cuda_gemm_matmul(cuda_backend *cb, const cuda_weight *cw, const float *bias, const float *x,
                     int n, float *out);
/* For ops that run several GEMMs on one input, or make the input in bf16
 * themselves: whether cuda_gemm_matmul would run cw at n rows (1) or
 * leave it to the mat-vec (0); the GEMM's bf16 input scratch for n rows of
 * cols (rows (cols + 7) & ~7 elements apart, valid until the next GEMM
 * call), empty or holding x rounded as cuda_gemm_matmul rounds it; and the
 * GEMM on such an input (cuda_gemm_takes must have said 1; -1 after a
 * failure, recorded). NULL: a failure, recorded, or no GEMM. */
int cuda_gemm_takes(cuda_backend *cb, const cuda_weight *cw, int n);
uint16_t *cuda_gemm_input(cuda_backend *cb, int n, int64_t cols);
uint16_t *cuda_gemm_input_of(cuda_backend *cb, const float *x, int n, int64_t cols);
int cuda_gemm_matmul_bf16(cuda_backend *cb, const cuda_weight *cw, const float *bias,
                          const uint16_t *xb, int n, float *out);
void cuda_gemm_free(cuda_backend *cb);
/* NULL when the prefill GEMM can run (loading cuBLASLt if need be), else
 * why not. */
const char *cuda_gemm_unavailable(cuda_backend *cb);

/* Whether a prompt chunk of n rows projected by w runs on the decode GEMM
 * in any engine: a prefill step (with the prefill GEMM on) of 2 to
 * gemm_min_rows - 1 rows, or, for a quantized w, up to dgemm_chunk_max
 * rows, where the decode GEMM (weights decoded in registers) is faster
 * than the prefill GEMM's bf16 copy of them plus cuBLASLt; the rows then
 * read the weights once, not once per few rows as on the mat-vec
 * (docs/decisions/0030-short-prompt-chunks.md). */
int cuda_chunk_on_dgemm(const cuda_backend *cb, const cu_matrix *w, int n);
/* Launch a projection job (kernels/matmul.cuh): on the decode GEMM
 * (kernels/decode_gemm.cuh) when tune.dgemm is on, or for the prompt
 * chunks cuda_chunk_on_dgemm names, and the job fits it (BF16 or quant
 * weights), else on the mat-vec. In a decode step which one depends on
 * the weights only, never on j->n, so a row's bytes do not depend on the
 * batch. A failure is recorded. */
void cuda_mv_run(cuda_backend *cb, const cu_mv_job *j);
/* Whether cuda_mv_run takes the decode GEMM for this job. */
int cuda_mv_uses_dgemm(const cuda_backend *cb, const cu_mv_job *j);
/* At least n zeroed counters for the decode kernels' blocks (left zeroed
 * by each launch), or NULL (failed, or a capture given up). */
unsigned *cuda_counters(cuda_backend *cb, size_t n);
void cuda_dgemm_free(cuda_backend *cb);

/* The vtable entries, across the cuda_*.c files. */
int cuda_weight_prepare(backend *b, bk_weight *w, memra_err *err);
void cuda_weights_free(cuda_backend *cb);
void cuda_op_embed(backend *b, const bk_weight *table, const int32_t *tokens, int n, float scale,
                   float *out);
void cuda_op_rmsnorm(backend *b, const float *x, int n, const bk_weight *w, float w_offset,
                     float eps, float *out);
void cuda_op_matmul(backend *b, const bk_weight *w, const bk_weight *bias, const float *x, int n,
                    float *out);
void cuda_op_delta_in_proj(backend *b, const bk_weight *w_qkv, const bk_weight *w_z,
                           const bk_weight *w_beta, const bk_weight *w_alpha, const float *x,
                           int n, float *qkv, float *z, float *beta_in, float *alpha);
void cuda_op_attn_qkv(backend *b, const bk_weight *wq, const bk_weight *wk, const bk_weight *wv,
                      const bk_weight *bq, const bk_weight *bk, const bk_weight *bv,
                      const float *x, int n, float *q, float *k, float *v);
void cuda_op_ffn_glu(backend *b, const bk_weight *gate, const bk_weight *up,
                     const bk_weight *down, bk_act act, const float *x, int n, float *hb,
                     float *hb2, float *out);
void cuda_op_add(backend *b, float *x, const float *y, size_t n);
/* The step's row metadata on the device ([n] positions first), each row's
 * recurrent state slot ([n], -1 for none) into *slots, and the slot that
 * keeps the state after each row ([n], -1 for none: kv_seq_save_slot;
 * NULL in a graphed step) into *saves; NULL after a failure (recorded). */
const int32_t *cuda_rows_meta(cuda_backend *cb, const bk_batch *rows, const int32_t **slots,
                              const int32_t **saves);
void cuda_op_mul_sigmoid(backend *b, float *x, const float *g, int n, int64_t x_cols,
                         int64_t g_cols);
void cuda_op_join_heads(backend *b, const float *a, const float *bo, int n, int n_heads,
                        int a_dim, int b_dim, float *x);
void cuda_op_split_heads(backend *b, const float *x, int n, int n_heads, int a_dim, int b_dim,
                         float *a, float *bo);
void cuda_op_delta_net(backend *b, const bk_delta *d, const bk_batch *rows, const float *qkv,
                       const float *z, const float *beta_in, const float *alpha, float *out);
void cuda_op_state_copy(backend *b, const kv_cache *kv, int from, int to);
void cuda_op_softcap(backend *b, float *x, size_t n, float cap);
void cuda_op_gather_cols(backend *b, const float *src, int n, int64_t n_src, const int32_t *map,
                         int64_t n_dst, float fill, float *out);
void cuda_op_scale(backend *b, float *x, size_t n, float s);
void cuda_op_act_mul(backend *b, float *x, const float *y, int n, int64_t cols, int64_t y_stride,
                     bk_act act);
void cuda_op_qk_norm_rope(backend *b, float *q, float *k, const bk_batch *rows, const bk_attn *a,
                          const bk_weight *q_norm, const bk_weight *k_norm, float w_offset,
                          float eps, const bk_rope *rope);
void cuda_op_attention(backend *b, const bk_attn *a, const bk_batch *rows, const float *q,
                       const float *k, const float *v, float *out);
int cuda_kv_prepare(backend *b, const kv_cache *kv, memra_err *err);
/* Decode attention's split count for a model of n_heads query heads over
 * n_kv_heads KV heads of head_dim, over a KV cache of `type` (a kv_type),
 * on this device (docs/decisions/0008, 0037). */
int cuda_decode_splits(const cuda_backend *cb, int type, int n_heads, int n_kv_heads,
                       int head_dim);
/* The floats of each recurrent state slot this backend keeps: the window's
 * (a pipeline stage's), else the cache's. */
size_t cuda_state_stride(const cuda_backend *cb, const kv_cache *kv);
void cuda_attention_free(cuda_backend *cb);
void cuda_op_ffn_moe(backend *b, const bk_moe *m, const float *x, int n, float *out);
void cuda_moe_free(cuda_backend *cb);
int cuda_op_sample(backend *b, float *logits, int n_rows, int64_t n_vocab, const smp_row *rows,
                   const smp_bias *bias, const smp_pen *pen, const uint32_t *mask,
                   smp_outcome *out, memra_err *err);
void cuda_sample_free(cuda_backend *cb);
/* The sample op in three parts (cuda_sample.c), so a graph can hold the
 * launch: upload checks the lists (a bad one fails into err only, the
 * backend stays well) and copies them to the device, before a capture or
 * replay; launch samples logits already there (capturable: every input
 * at a fixed device address); read brings the outcomes back and waits. */
int cuda_sample_upload(cuda_backend *cb, int n_rows, int64_t n_vocab, const smp_row *rows,
                       const smp_bias *bias, const smp_pen *pen, const uint32_t *mask,
                       memra_err *err);
int cuda_sample_launch(cuda_backend *cb, float *logits, int n_rows, int64_t n_vocab);
/* The kernels the last upload's rows need (smp_stages, kernels/sample.cuh,
 * plus one so it is never 0): the launch runs them, so a graph holding it
 * is keyed on them. */
int cuda_sample_kind(const cuda_backend *cb);
int cuda_sample_read(cuda_backend *cb, int n_rows, smp_outcome *out);
/* The device's outcomes of the last launch ([rows], where the launch
 * writes them; they move only when the staging buffers grow), or NULL
 * before the first upload. */
const smp_outcome *cuda_sample_outcomes(const cuda_backend *cb);

#endif
