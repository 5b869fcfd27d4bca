/* The paged KV cache: keys and values of every layer in fixed-size blocks
 * of block_size tokens, handed out from one pool, and a block table per
 * sequence mapping its logical blocks (positions / block_size) to physical
 * ones. Sequences grow a block at a time and give their blocks back when
 * reset or freed, so many sequences share one allocation without copies
 * and without reserving n_ctx tokens each.
 *
 * Storage is per layer, then per block: K of layer l, block b, slot s is
 * the row of kv_dim values at byte ((l * n_blocks + b) * block_size + s) *
 * row_bytes, in f32, f16 or bf16 (rounded to nearest even on store), or
 * q8_0 (ggml's blocks of 32 along the row); numerics/kv_codec.h has the
 * codecs, shared with the GPU. V is laid out the same.
 *
 * A backend that keeps K and V in its own memory (the GPU) uses a cache
 * made by kv_cache_init_tables: the same block tables and geometry, no host
 * storage (k and v NULL). */
#ifndef MEMRA_BACKEND_KV_CACHE_H
#define MEMRA_BACKEND_KV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/kv_prefix.h"
#include "core/err.h"

typedef enum {
    KV_DEFAULT = -1, /* engine_opts only: the backend's default (engine_kv_type_default) */
    KV_F32 = 0,
    KV_F16 = 1,
    KV_BF16 = 2,
    KV_Q8_0 = 3,
} kv_type;

typedef struct {
    kv_type type;
    int n_layers;
    int64_t kv_dim;     /* n_kv_heads * head_dim */
    int block_size;     /* tokens per block */
    int n_blocks;       /* blocks in the pool */
    size_t row_bytes;   /* bytes of one position's kv_dim values */
    uint8_t *k, *v;     /* [n_layers][n_blocks][block_size] rows; NULL: tables only */
    int *free_blocks;   /* stack of free block ids */
    int n_free;
    int *refs;          /* [n_blocks] sequences holding each block */
    kv_prefix *prefix;  /* the prefix index, NULL when off (kv_cache_enable_prefix) */
    /* Recurrent state (kv_cache_enable_state): a slot of state_floats f32
     * values for each sequence that holds tokens, beside its blocks. */
    int n_state_slots;
    size_t state_floats;   /* per slot; 0: the model has no recurrent layers */
    float *state;          /* [n_state_slots][state_floats]; NULL: the backend keeps it */
    int *free_slots;       /* stack of free slot ids */
    int n_free_slots;
    /* State kept with the prefix index (kv_cache_prefix_states): slot
     * block_state[b] holds the state after the tokens through the end of
     * indexed block b (-1: none); the index's own n_pstates slots, each
     * naming the block it serves in pstate_block (-1: unused), reused
     * oldest attachment first from pstate_next. */
    int *block_state;
    int *pstate_slot, *pstate_block;
    int n_pstates, pstate_next;
} kv_cache;

/* The most positions a checkpoint of a sequence's recurrent state keeps
 * the state after (a speculation round's rows: SPEC_K_MAX + 1), plus the
 * state at the checkpoint itself. */
#define KV_SNAP_MAX 17

typedef struct {
    kv_cache *cache;
    int *blocks;        /* block table: logical block -> physical block */
    int n_blocks, cap;
    int64_t n_tokens;   /* positions [0, n_tokens) hold valid K/V */
    int state_slot;     /* its recurrent state slot, -1 when it holds none */
    /* A checkpoint of its recurrent state (the engine's, for verifying
     * drafts): snap[0] holds the state at length snap_tokens, snap[j] the
     * state after position snap_tokens + j - 1, which the recurrent op
     * writes as it runs that position (kv_seq_save_slot), for j up to
     * snap_rows. The n_snap slots stay the sequence's until it is cut to
     * 0. snap_tokens -1: no checkpoint. */
    int snap[KV_SNAP_MAX];
    int n_snap;
    int64_t snap_tokens;
    int snap_rows;
} kv_seq;

const char *kv_type_name(kv_type t); /* "f32", "f16", "bf16", "q8_0" ("default") */
/* "f32", "f16", "bf16" or "q8_0"; fails naming the bad value. */
int kv_type_parse(const char *s, kv_type *out, memra_err *err);
/* Bytes of one row of kv_dim values of type t (q8_0: kv_dim a multiple of
 * 32); 0 for a type or size that has none. */
size_t kv_row_bytes(kv_type t, int64_t kv_dim);

/* Fails (no abort) when the sizes are out of range, q8_0 is asked for a
 * kv_dim that is not a multiple of 32, or the pool cannot be allocated,
 * naming the bytes asked for. */
int kv_cache_init(kv_cache *c, kv_type type, int n_layers, int64_t kv_dim, int block_size,
                  int n_blocks, memra_err *err);
/* The same cache without host K/V storage: block tables and geometry only,
 * for a backend that keeps K and V itself (backend_ops.kv_prepare). */
int kv_cache_init_tables(kv_cache *c, kv_type type, int n_layers, int64_t kv_dim,
                         int block_size, int n_blocks, memra_err *err);
void kv_cache_free(kv_cache *c);
/* Give each sequence a recurrent state of floats_per_slot f32 values (a
 * hybrid model's conv and delta-rule state, every recurrent layer's
 * together), for at most n_slots sequences at once: a sequence takes a slot
 * when it first reserves positions and gives it back when cut to 0. The
 * state is the sum of every position so far, so it cannot be cut back:
 * such a cache adopts a prefix only where a state was kept and truncates
 * only to 0 or to its length (unless the prefix index keeps states:
 * kv_cache_prefix_states). With host set the slots are host memory
 * (state); else a device backend keeps them (kv_prepare). Fails on absurd
 * sizes or when the memory cannot be had, naming the bytes. */
int kv_cache_enable_state(kv_cache *c, int n_slots, size_t floats_per_slot, int host,
                          memra_err *err);
/* Make s a checkpoint at its length that also keeps the state after each
 * of its next `rows` positions (0 <= rows < KV_SNAP_MAX): rows + 1 slots
 * for copies of its state, those it has, more taken from the pool. The
 * caller copies the state into snap[0]. Fails (changing nothing) naming
 * the pool when it has too few slots free. */
int kv_seq_checkpoint(kv_seq *s, int rows, memra_err *err);
/* The slot that takes the state after position pos as a step runs it: a
 * checkpoint's, or -1. */
int kv_seq_save_slot(const kv_seq *s, int64_t pos);
/* The slot holding s's state at length n (its checkpoint's, from
 * snap_tokens to snap_tokens + snap_rows), or -1. */
int kv_seq_restore_slot(const kv_seq *s, int64_t n);
/* Cut a stateful sequence back to length n, once the caller has copied
 * kv_seq_restore_slot(s, n) into its state slot: the blocks as
 * kv_seq_truncate cuts them; the checkpoint keeps the rows up to n. */
void kv_seq_restore_point(kv_seq *s, int64_t n);
/* Bytes of recurrent state (every slot, wherever it is kept). */
uint64_t kv_cache_state_bytes(const kv_cache *c);
/* Bytes of K and V together (wherever they are stored). */
uint64_t kv_cache_bytes(const kv_cache *c);

void kv_seq_init(kv_seq *s, kv_cache *c);
/* Give every block back and forget the table. */
void kv_seq_free(kv_seq *s);
/* Turn the prefix index on (kv_prefix.h): full blocks can then be shared
 * between sequences (kv_seq_adopt, kv_seq_publish); max_idle caps the
 * blocks kept indexed that no sequence holds (< 0: the whole pool). */
int kv_cache_enable_prefix(kv_cache *c, int max_idle, memra_err *err);
/* Let the prefix index of a cache with recurrent state keep states: n of
 * the cache's free state slots become the index's (the engine sized the
 * pool for them), to hold the state at the end of indexed blocks
 * (kv_cache_attach_state), so that kv_seq_adopt can map a prefix that ends
 * where a state was kept. Needs the prefix index and the state on; fails
 * when fewer than n slots are free. */
int kv_cache_prefix_states(kv_cache *c, int n, memra_err *err);
/* The slot holding the state after indexed block b, -1 when none. */
int kv_cache_block_state(const kv_cache *c, int b);
/* A slot to keep the state after indexed block b in (the caller copies it
 * there): the one b has, else an unused one of the index's, else the one
 * attached longest ago, taken from its block. -1 when the cache keeps no
 * prefix states or b is not indexed. */
int kv_cache_attach_state(kv_cache *c, int b);
/* Blocks a sequence could take now: free ones and idle indexed ones. */
int kv_cache_available(const kv_cache *c);

/* Map the longest indexed prefix of tokens[0, n) in namespace ns onto the
 * empty sequence s: whole blocks, a multiple of `granule` tokens (a
 * multiple of the block size), and short of n by at least one token (the
 * caller still computes the last token's logits). With recurrent state,
 * only a prefix whose last block has a state kept (the caller copies it
 * into the sequence's slot, which kv_seq_reserve gives). Returns the
 * tokens mapped (s->n_tokens), 0 when none or when the index is off. */
int64_t kv_seq_adopt(kv_seq *s, uint64_t ns, const int32_t *tokens, int64_t n, int64_t granule);
/* Enter the whole blocks of positions [0, n) into the index (n <= the
 * sequence's valid tokens; tokens[0, n) are what they hold). Blocks
 * already indexed stay as they are. Nothing when the index is off. */
void kv_seq_publish(kv_seq *s, uint64_t ns, const int32_t *tokens, int64_t n);

/* Make room for positions [0, n_tokens): take blocks from the pool as
 * needed, and a recurrent state slot when the cache has state and the
 * sequence none. On failure (pool or slots exhausted) nothing is taken. */
int kv_seq_reserve(kv_seq *s, int64_t n_tokens, memra_err *err);
/* Keep positions [0, n_tokens); blocks wholly past them go back. A block
 * cut in part is written again, so it leaves the prefix index; cutting into
 * a block other sequences share is a programming error (aborts), as is
 * cutting a sequence with recurrent state to anything but 0 or its length
 * (a checkpoint's: kv_seq_restore_point). Cut to 0, a sequence gives its
 * state slots back. */
void kv_seq_truncate(kv_seq *s, int64_t n_tokens);

/* Byte offset of the row of position pos of layer `layer`; the position
 * must be reserved. */
static inline size_t kv_offset(const kv_cache *c, const kv_seq *s, int layer, int64_t pos)
{
    int64_t blk = s->blocks[pos / c->block_size];
    int64_t slot = pos % c->block_size;
    return (size_t)(((int64_t)layer * c->n_blocks + blk) * c->block_size + slot) * c->row_bytes;
}

#endif
