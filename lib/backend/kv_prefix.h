/* The KV cache's prefix index: full blocks keyed by their content, so a
 * sequence that starts with tokens another sequence has already run maps
 * those blocks into its own table instead of computing them again.
 *
 * A block's key is a chain hash: of its block_size tokens, of its parent
 * block's key (so the same tokens after different prefixes are different
 * blocks), and of a namespace the caller chooses (memra-serve: the
 * tenant, so one tenant's prompts never shorten another's prefill), and of
 * a secret drawn per process (core/salt.h), so no client can compute a key.
 * A lookup compares the tokens and the parent key too: a block is mapped
 * only under the exact tokens and a parent chain no outsider can forge.
 *
 * A published block is read-only: its sequences never write it again
 * (they only append past it). When no sequence holds it any more it stays
 * indexed, idle, in least-recently-used order, and is evicted (unindexed,
 * its storage reused) only when the pool needs a block and none is free,
 * or when the idle count passes the cap. A block a sequence holds is never
 * evicted.
 *
 * What the blocks' values depend on besides the tokens (the model, the KV
 * type) is fixed per cache: one engine, one cache. How those values were
 * computed (the chunking of the prefill that wrote them) is the caller's
 * to keep equal: see engine_seq_adopt_prefix. */
#ifndef MEMRA_BACKEND_KV_PREFIX_H
#define MEMRA_BACKEND_KV_PREFIX_H

#include <stdint.h>

#include "core/err.h"

typedef struct {
    uint64_t hit_blocks;  /* blocks mapped from the index instead of computed */
    uint64_t published;   /* blocks entered into the index */
    uint64_t evictions;   /* indexed blocks whose storage was taken back */
    int indexed;          /* blocks in the index now (held or idle) */
    int idle;             /* of those, held by no sequence */
} kv_prefix_stats;

typedef struct kv_prefix kv_prefix;

/* An index for a pool of n_blocks blocks of block_size tokens; max_idle
 * caps the idle blocks kept (< 0: the whole pool). */
kv_prefix *kv_prefix_new(int n_blocks, int block_size, int max_idle, memra_err *err);
void kv_prefix_free(kv_prefix *p);

/* The key of a block of tokens after the block keyed `parent` (0 for the
 * first block, after mixing in the namespace: kv_prefix_root). */
uint64_t kv_prefix_root(uint64_t ns);
uint64_t kv_prefix_key(uint64_t parent, const int32_t *tokens, int block_size);

/* The indexed block with this key, parent and tokens, or -1. */
int kv_prefix_find(const kv_prefix *p, uint64_t key, uint64_t parent, const int32_t *tokens);
/* Whether block b is indexed. */
int kv_prefix_has(const kv_prefix *p, int b);
/* Enter block b under key (its tokens and parent kept for lookups).
 * Returns 0; -1 when another block already holds that key (b stays
 * private: two sequences computed the same block at once). */
int kv_prefix_insert(kv_prefix *p, int b, uint64_t key, uint64_t parent, const int32_t *tokens);
/* Block b, indexed, is held by no sequence any more / again. */
void kv_prefix_idle(kv_prefix *p, int b);
void kv_prefix_unidle(kv_prefix *p, int b);
int kv_prefix_n_idle(const kv_prefix *p);
/* Unindex the least recently idled block and return it (for the free
 * list); -1 when none is idle. */
int kv_prefix_evict(kv_prefix *p);
/* The idle blocks past the cap, unindexed one by one: -1 when within it. */
int kv_prefix_over_cap(kv_prefix *p);
/* Unindex block b (a sequence is about to write into it). */
void kv_prefix_remove(kv_prefix *p, int b);
void kv_prefix_count_hits(kv_prefix *p, int n);
void kv_prefix_get_stats(const kv_prefix *p, kv_prefix_stats *out);

#endif
