/* The CPU backend's insides, shared by its files (cpu_backend.c: setup,
 * weights and small elementwise ops; cpu_matmul.c: projections and FFNs;
 * cpu_attention.c: norm, RoPE and attention; cpu_moe.c: routed experts;
 * cpu_delta.c: the gated DeltaNet mixer;
 * cpu_fast_*.c, cpu_isa.c: the fast path's products).
 *
 * Two kinds share this code: the reference (cpu-ref) and the fast path
 * (cpu), which differs only in the weight products (cpu_matmul_multi goes
 * to cpu_fast_matmul_multi; docs/decisions/0018-cpu-fast-path.md).
 *
 * The reference's numerics: f32 activations and f32 accumulation. Every dot
 * product goes through cpu_dot, whose reduction order depends only on the
 * length, and every output row is computed by one thread from its own
 * inputs, so a row's result is bit-identical whatever the batch size, the
 * row's place in the batch, the prefill chunking or the thread count. */
#ifndef MEMRA_BACKEND_CPU_BACKEND_H
#define MEMRA_BACKEND_CPU_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_fast.h"
#include "core/pool.h"

enum { CPU_VEC_SLOTS = 4 };

typedef struct {
    thread_pool *pool;
    int n_threads;
    /* Per-thread scratch (dequantized weight rows, attention scores). */
    float **scratch;
    size_t scratch_cap;
    /* Caller-side scratch: dequantized norm weights and biases. */
    float *vec[CPU_VEC_SLOTS];
    size_t vec_cap[CPU_VEC_SLOTS];
    /* ffn_moe working space, grown as needed: router probabilities, the
     * gathered inputs and outputs of one expert, its two hidden buffers. */
    float *moe_buf[5];
    size_t moe_cap[5];
    /* per token: chosen experts and weights; per expert: its tokens */
    int *moe_ids, *moe_who;
    float *moe_w, *moe_ww;
    size_t moe_rows_cap;
    /* The fast path's kernels (NULL: this is the reference), and x of a
     * call quantized to int8 blocks, grown as needed and kept. */
    const cpu_kernels *fast;
    int8_t *xq;
    float *xd;
    int32_t *xs;
    size_t xq_cap;
    /* x of a call copied to rows that start on cache lines, for the f32-x
     * kernels, grown as needed and kept. */
    float *xf;
    size_t xf_cap;
    /* x of a call in the panel order, and its blocks' half sums, for the
     * panel kernels; the panel copies of weights this backend made. */
    int8_t *xp;
    int32_t *xlo;
    size_t xp_cap;
    /* x of a call in tiles of 16 tokens for the tile kernels (cpu_xtile),
     * grown as needed and kept. */
    int8_t *xt;
    float *xtd;
    int32_t *xts, *xtlo;
    size_t xt_cap;
    uint8_t **packed;
    int n_packed, packed_cap;
} cpu_backend;

static inline cpu_backend *cpu_of(backend *b) { return (cpu_backend *)b->impl; }

/* Make each thread's scratch hold at least n floats (call before pool_run). */
void cpu_scratch_reserve(cpu_backend *c, size_t n);
/* A caller-side buffer of at least n floats. */
float *cpu_vec(cpu_backend *c, int slot, size_t n);

/* Row r of w as f32: a pointer into the map for aligned F32, else
 * dequantized into buf (w->cols floats). */
const float *cpu_weight_row(const bk_weight *w, int64_t r, float *buf);
/* A whole vector weight (1 x n) as f32 in caller scratch slot `slot`;
 * NULL for an absent weight. */
const float *cpu_weight_vec(cpu_backend *c, int slot, const bk_weight *w);
/* Whether the CPU backend reads this weight format. */
int cpu_type_supported(dtype t);

/* The one dot product: eight interleaved partial sums combined pairwise. */
float cpu_dot(const float *a, const float *b, int64_t n);

float cpu_silu(float x);
/* h[i] = act(h[i]) * u[i] for i < m as cpu_op_ffn_glu computes it (the
 * fast path's vector SiLU where the level has one): every GLU of a
 * forward runs through it, so a token's bits do not depend on the path. */
void cpu_glu(const cpu_backend *c, bk_act act, float *h, const float *u, size_t m);
float cpu_gelu_tanh(float x);

/* One matrix of a multi-matrix product: out[n][w->rows] = x . w^T + bias. */
typedef struct {
    const bk_weight *w;
    const float *bias; /* f32 [w->rows] or NULL */
    float *out;
} cpu_mm_item;

/* Matrices one cpu_matmul_multi takes: a decode step's gate and up of
 * eight routed experts. */
#define CPU_MM_MAX_ITEMS 16

/* All items' rows, threaded together (they share the input x [n][cols]). */
void cpu_matmul_multi(cpu_backend *c, const cpu_mm_item *items, int n_items, const float *x,
                      int n);

/* The same product on the fast path's kernels; -1 (nothing done) when an
 * item's weight type has no fast kernel, for the reference to compute. */
int cpu_fast_matmul_multi(cpu_backend *c, const cpu_mm_item *items, int n_items, const float *x,
                          int n);
void cpu_fast_free(cpu_backend *c);

/* The vtable entries, defined across the cpu_*.c files. */
void cpu_op_matmul(backend *b, const bk_weight *w, const bk_weight *bias, const float *x, int n,
                   float *out);
void cpu_op_delta_in_proj(backend *b, const bk_weight *w_qkv, const bk_weight *w_z,
                          const bk_weight *w_beta, const bk_weight *w_alpha, const float *x,
                          int n, float *qkv, float *z, float *beta_in, float *alpha);
void cpu_op_attn_qkv(backend *b, const bk_weight *wq, const bk_weight *wk, const bk_weight *wv,
                     const bk_weight *bq, const bk_weight *bk, const bk_weight *bv,
                     const float *x, int n, float *q, float *k, float *v);
void cpu_op_ffn_glu(backend *b, const bk_weight *gate, const bk_weight *up,
                    const bk_weight *down, bk_act act, const float *x, int n, float *hb,
                    float *hb2, float *out);
void cpu_op_rmsnorm(backend *b, const float *x, int n, const bk_weight *w, float w_offset,
                    float eps, float *out);
void cpu_op_qk_norm_rope(backend *b, float *q, float *k, const bk_batch *rows, const bk_attn *a,
                         const bk_weight *q_norm, const bk_weight *k_norm, float w_offset,
                         float eps, const bk_rope *rope);
void cpu_op_attention(backend *b, const bk_attn *a, const bk_batch *rows, const float *q,
                      const float *k, const float *v, float *out);
void cpu_op_ffn_moe(backend *b, const bk_moe *m, const float *x, int n, float *out);
void cpu_moe_free(cpu_backend *c);
void cpu_op_mul_sigmoid(backend *b, float *x, const float *g, int n, int64_t x_cols,
                        int64_t g_cols);
void cpu_op_join_heads(backend *b, const float *a, const float *bo, int n, int n_heads,
                       int a_dim, int b_dim, float *x);
void cpu_op_split_heads(backend *b, const float *x, int n, int n_heads, int a_dim, int b_dim,
                        float *a, float *bo);
void cpu_op_delta_net(backend *b, const bk_delta *d, const bk_batch *rows, const float *qkv,
                      const float *z, const float *beta_in, const float *alpha, float *out);
void cpu_op_state_copy(backend *b, const kv_cache *kv, int from, int to);

/* The plain RMSNorm of one row (also used per head for QK-norm). */
void cpu_rmsnorm_row(const float *x, const float *w, float w_offset, float eps, int64_t n,
                     float *out);
/* RoPE of one head vector at position pos; cs holds cos then sin for the
 * n_freqs pairs (already scaled by attn_factor). */
void cpu_rope_head(float *x, const float *cs, int n_freqs, rope_pairing pairing);
/* cos and sin of pos * inv_freq[i] (times attn_factor) into cs[0..2n). */
void cpu_rope_table(const bk_rope *r, int32_t pos, float *cs);

#endif
