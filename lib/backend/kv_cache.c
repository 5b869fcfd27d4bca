#include "backend/kv_cache.h"

#include <inttypes.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>

#include "core/check.h"
#include "numerics/kv_codec.h"

const char *kv_type_name(kv_type t)
{
    switch (t) {
    case KV_F32: return "f32";
    case KV_F16: return "f16";
    case KV_BF16: return "bf16";
    case KV_Q8_0: return "q8_0";
    case KV_DEFAULT: return "default";
    }
    return "?";
}

int kv_type_parse(const char *s, kv_type *out, memra_err *err)
{
    static const kv_type all[] = {KV_F32, KV_F16, KV_BF16, KV_Q8_0};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (!strcmp(s, kv_type_name(all[i]))) {
            *out = all[i];
            return 0;
        }
    return memra_fail(err, "KV type '%s' is not f32, f16, bf16 or q8_0", s);
}

size_t kv_row_bytes(kv_type t, int64_t kv_dim)
{
    if (kv_dim <= 0)
        return 0;
    switch (t) {
    case KV_F32: return (size_t)kv_dim * 4;
    case KV_F16: case KV_BF16: return (size_t)kv_dim * 2;
    case KV_Q8_0:
        return kv_dim % KV_Q8_0_BLOCK ? 0 : (size_t)(kv_dim / KV_Q8_0_BLOCK) * KV_Q8_0_BYTES;
    case KV_DEFAULT: break;
    }
    return 0;
}

/* The geometry and the free list; the K/V storage is the caller's. */
static int init_tables(kv_cache *c, kv_type type, int n_layers, int64_t kv_dim, int block_size,
                       int n_blocks, memra_err *err)
{
    memset(c, 0, sizeof *c);
    if (type != KV_F32 && type != KV_F16 && type != KV_BF16 && type != KV_Q8_0)
        return memra_fail(err, "KV cache: unknown element type %d", (int)type);
    if (n_layers <= 0 || kv_dim <= 0 || block_size <= 0 || n_blocks <= 0)
        return memra_fail(err, "KV cache: layers %d, kv_dim %" PRId64 ", block size %d and "
                          "%d blocks must all be positive", n_layers, kv_dim, block_size,
                          n_blocks);
    if (type == KV_Q8_0 && kv_dim % KV_Q8_0_BLOCK != 0)
        return memra_fail(err, "KV cache: q8_0 needs kv_dim (n_kv_heads x head_dim = %" PRId64
                          ") to be a multiple of %d; use f16 or bf16", kv_dim, KV_Q8_0_BLOCK);
    c->type = type;
    c->n_layers = n_layers;
    c->kv_dim = kv_dim;
    c->block_size = block_size;
    c->n_blocks = n_blocks;
    c->row_bytes = kv_row_bytes(type, kv_dim);
    /* The product in double first: a bogus n_ctx must be an error, not a
     * wrapped size. */
    double bytes = (double)n_layers * n_blocks * block_size * (double)c->row_bytes;
    if (bytes > (double)(SIZE_MAX / 4))
        return memra_fail(err, "KV cache: %.0f bytes per K and V is too large", bytes);
    c->free_blocks = xmalloc((size_t)n_blocks * sizeof *c->free_blocks);
    /* Hand out low block ids first. */
    for (int i = 0; i < n_blocks; i++)
        c->free_blocks[i] = n_blocks - 1 - i;
    c->n_free = n_blocks;
    c->refs = xcalloc((size_t)n_blocks, sizeof *c->refs);
    return 0;
}

int kv_cache_init_tables(kv_cache *c, kv_type type, int n_layers, int64_t kv_dim,
                         int block_size, int n_blocks, memra_err *err)
{
    return init_tables(c, type, n_layers, kv_dim, block_size, n_blocks, err);
}

/* A pool's K or V bytes. Untouched pages are never committed, so a large
 * pool costs only what sequences use. A pool of 2 MiB or more is aligned
 * to 2 MiB and marked for transparent huge pages where the kernel offers
 * them: a CPU attention task reads one head's slice of every row, a page
 * for every second row of a layer in 4 KiB pages, and the TLB misses
 * cost decode at depth a quarter of its time (docs/PERFORMANCE.md,
 * "Decode at depth"); the price is memory committed 2 MiB at a time. */
static void *kv_alloc(size_t bytes)
{
    const size_t huge = (size_t)2 << 20;
    if (bytes < huge)
        return malloc(bytes);
    size_t len = (bytes + huge - 1) / huge * huge;
    void *p = aligned_alloc(huge, len);
#ifdef MADV_HUGEPAGE
    if (p)
        madvise(p, len, MADV_HUGEPAGE);
#endif
    return p;
}

int kv_cache_init(kv_cache *c, kv_type type, int n_layers, int64_t kv_dim, int block_size,
                  int n_blocks, memra_err *err)
{
    if (init_tables(c, type, n_layers, kv_dim, block_size, n_blocks, err) != 0)
        return -1;
    size_t nb = (size_t)n_layers * (size_t)n_blocks * (size_t)block_size * c->row_bytes;
    c->k = kv_alloc(nb);
    c->v = kv_alloc(nb);
    if (!c->k || !c->v) {
        kv_cache_free(c);
        return memra_fail(err, "KV cache: cannot allocate 2 x %zu bytes (%s, %d blocks of %d "
                          "tokens)", nb, kv_type_name(type), n_blocks, block_size);
    }
    return 0;
}

void kv_cache_free(kv_cache *c)
{
    free(c->k);
    free(c->v);
    free(c->state);
    free(c->free_slots);
    free(c->free_blocks);
    free(c->refs);
    free(c->block_state);
    free(c->pstate_slot);
    free(c->pstate_block);
    kv_prefix_free(c->prefix);
    memset(c, 0, sizeof *c);
}

uint64_t kv_cache_bytes(const kv_cache *c)
{
    return 2ull * (uint64_t)c->n_layers * (uint64_t)c->n_blocks * (uint64_t)c->block_size *
           (uint64_t)c->row_bytes;
}

int kv_cache_enable_state(kv_cache *c, int n_slots, size_t floats_per_slot, int host,
                          memra_err *err)
{
    if (n_slots <= 0 || floats_per_slot == 0)
        return memra_fail(err, "recurrent state: %d slots of %zu floats must both be positive",
                          n_slots, floats_per_slot);
    double bytes = (double)n_slots * (double)floats_per_slot * 4.0;
    if (bytes > (double)(SIZE_MAX / 4))
        return memra_fail(err, "recurrent state: %.0f bytes is too large", bytes);
    if (host) {
        c->state = calloc((size_t)n_slots * floats_per_slot, sizeof(float));
        if (!c->state)
            return memra_fail(err, "recurrent state: cannot allocate %.0f bytes (%d sequences "
                              "x %zu floats)", bytes, n_slots, floats_per_slot);
    }
    c->n_state_slots = n_slots;
    c->state_floats = floats_per_slot;
    c->free_slots = xmalloc((size_t)n_slots * sizeof *c->free_slots);
    for (int i = 0; i < n_slots; i++)
        c->free_slots[i] = n_slots - 1 - i;
    c->n_free_slots = n_slots;
    return 0;
}

uint64_t kv_cache_state_bytes(const kv_cache *c)
{
    return (uint64_t)c->n_state_slots * (uint64_t)c->state_floats * 4u;
}

void kv_seq_init(kv_seq *s, kv_cache *c)
{
    memset(s, 0, sizeof *s);
    s->cache = c;
    s->state_slot = -1;
    s->snap_tokens = -1;
}

int kv_seq_checkpoint(kv_seq *s, int rows, memra_err *err)
{
    kv_cache *c = s->cache;
    MEMRA_ASSERT(rows >= 0 && rows < KV_SNAP_MAX);
    if (!c->state_floats)
        return memra_fail(err, "recurrent state: the cache keeps none to copy");
    int more = rows + 1 - s->n_snap;
    if (more > c->n_free_slots)
        return memra_fail(err, "recurrent state: no slot free for a checkpoint of %d rows "
                          "(%d of %d free; the engine keeps a sequence's checkpoint slots when "
                          "it verifies drafts)", rows, c->n_free_slots, c->n_state_slots);
    while (s->n_snap < rows + 1)
        s->snap[s->n_snap++] = c->free_slots[--c->n_free_slots];
    s->snap_tokens = s->n_tokens;
    s->snap_rows = rows;
    return 0;
}

int kv_seq_save_slot(const kv_seq *s, int64_t pos)
{
    int64_t j = pos - s->snap_tokens;
    return s->snap_tokens >= 0 && j >= 0 && j < s->snap_rows ? s->snap[j + 1] : -1;
}

int kv_seq_restore_slot(const kv_seq *s, int64_t n)
{
    int64_t j = n - s->snap_tokens;
    return s->snap_tokens >= 0 && j >= 0 && j <= s->snap_rows ? s->snap[j] : -1;
}

static void truncate_blocks(kv_seq *s, int64_t n_tokens);

void kv_seq_restore_point(kv_seq *s, int64_t n)
{
    MEMRA_ASSERT(kv_seq_restore_slot(s, n) >= 0 && n <= s->n_tokens);
    truncate_blocks(s, n);
    s->snap_rows = (int)(n - s->snap_tokens);
}

void kv_seq_free(kv_seq *s)
{
    kv_seq_truncate(s, 0);
    free(s->blocks);
    s->blocks = NULL;
    s->cap = 0;
}

int kv_cache_enable_prefix(kv_cache *c, int max_idle, memra_err *err)
{
    if (c->prefix)
        return 0;
    c->prefix = kv_prefix_new(c->n_blocks, c->block_size, max_idle, err);
    return c->prefix ? 0 : -1;
}

int kv_cache_prefix_states(kv_cache *c, int n, memra_err *err)
{
    if (!c->prefix || !c->state_floats || n <= 0)
        return memra_fail(err, "prefix states: need the prefix index, recurrent state and n > 0 "
                          "(%d)", n);
    if (c->block_state)
        return memra_fail(err, "prefix states: already on");
    if (n > c->n_free_slots)
        return memra_fail(err, "prefix states: %d slots asked, %d free of %d", n,
                          c->n_free_slots, c->n_state_slots);
    c->block_state = xmalloc((size_t)c->n_blocks * sizeof *c->block_state);
    for (int b = 0; b < c->n_blocks; b++)
        c->block_state[b] = -1;
    c->pstate_slot = xmalloc((size_t)n * sizeof *c->pstate_slot);
    c->pstate_block = xmalloc((size_t)n * sizeof *c->pstate_block);
    for (int i = 0; i < n; i++) {
        c->pstate_slot[i] = c->free_slots[--c->n_free_slots];
        c->pstate_block[i] = -1;
    }
    c->n_pstates = n;
    c->pstate_next = 0;
    return 0;
}

int kv_cache_block_state(const kv_cache *c, int b)
{
    return c->block_state && b >= 0 && b < c->n_blocks && c->block_state[b] >= 0
               ? c->pstate_slot[c->block_state[b]]
               : -1;
}

int kv_cache_attach_state(kv_cache *c, int b)
{
    if (!c->block_state || b < 0 || b >= c->n_blocks || !kv_prefix_has(c->prefix, b))
        return -1;
    if (c->block_state[b] >= 0)
        return c->pstate_slot[c->block_state[b]];
    int i = -1;
    for (int k = 0; k < c->n_pstates && i < 0; k++)
        if (c->pstate_block[k] < 0)
            i = k;
    if (i < 0) { /* all in use: the one attached longest ago */
        i = c->pstate_next;
        c->pstate_next = (c->pstate_next + 1) % c->n_pstates;
        c->block_state[c->pstate_block[i]] = -1;
    }
    c->pstate_block[i] = b;
    c->block_state[b] = i;
    return c->pstate_slot[i];
}

/* Block b leaves the index: the state kept after it goes too. */
static void drop_state(kv_cache *c, int b)
{
    if (!c->block_state || c->block_state[b] < 0)
        return;
    c->pstate_block[c->block_state[b]] = -1;
    c->block_state[b] = -1;
}

int kv_cache_available(const kv_cache *c)
{
    return c->n_free + (c->prefix ? kv_prefix_n_idle(c->prefix) : 0);
}

/* A block for a sequence: a free one, else the least recently used idle
 * indexed one (evicted). The caller checked kv_cache_available. */
static int take_block(kv_cache *c)
{
    int b = c->n_free ? c->free_blocks[--c->n_free] : kv_prefix_evict(c->prefix);
    drop_state(c, b); /* an evicted block's kept state goes with it */
    c->refs[b] = 1;
    return b;
}

static void release_block(kv_cache *c, int b)
{
    if (--c->refs[b] > 0)
        return;
    if (c->prefix && kv_prefix_has(c->prefix, b)) {
        kv_prefix_idle(c->prefix, b);
        for (int x; (x = kv_prefix_over_cap(c->prefix)) >= 0;) {
            drop_state(c, x);
            c->free_blocks[c->n_free++] = x;
        }
        return;
    }
    c->free_blocks[c->n_free++] = b;
}

static void ensure_cap(kv_seq *s, int64_t need)
{
    if (need > s->cap) {
        s->cap = (int)need;
        s->blocks = xrealloc(s->blocks, (size_t)s->cap * sizeof *s->blocks);
    }
}

int64_t kv_seq_adopt(kv_seq *s, uint64_t ns, const int32_t *tokens, int64_t n, int64_t granule)
{
    kv_cache *c = s->cache;
    if (!c->prefix || (c->state_floats && !c->block_state) || s->n_blocks || granule <= 0 ||
        granule % c->block_size)
        return 0;
    int bs = c->block_size;
    int64_t limit = (n - 1) / granule * granule / bs; /* blocks, leaving a token to compute */
    ensure_cap(s, limit);
    int64_t got = 0;
    uint64_t parent = kv_prefix_root(ns);
    for (; got < limit; got++) {
        const int32_t *t = tokens + got * bs;
        uint64_t key = kv_prefix_key(parent, t, bs);
        int b = kv_prefix_find(c->prefix, key, parent, t);
        if (b < 0)
            break;
        s->blocks[got] = b;
        parent = key;
    }
    got = got * bs / granule * granule / bs;
    /* with recurrent state, back to the last granule whose end kept one */
    while (c->state_floats && got > 0 && c->block_state[s->blocks[got - 1]] < 0)
        got -= granule / bs;
    for (int64_t i = 0; i < got; i++) {
        int b = s->blocks[i];
        if (c->refs[b]++ == 0)
            kv_prefix_unidle(c->prefix, b);
    }
    kv_prefix_count_hits(c->prefix, (int)got);
    s->n_blocks = (int)got;
    s->n_tokens = got * bs;
    return s->n_tokens;
}

void kv_seq_publish(kv_seq *s, uint64_t ns, const int32_t *tokens, int64_t n)
{
    kv_cache *c = s->cache;
    if (!c->prefix || (c->state_floats && !c->block_state))
        return;
    int bs = c->block_size;
    if (n > s->n_tokens)
        n = s->n_tokens;
    uint64_t parent = kv_prefix_root(ns);
    for (int64_t i = 0; i < n / bs; i++) {
        const int32_t *t = tokens + i * bs;
        uint64_t key = kv_prefix_key(parent, t, bs);
        kv_prefix_insert(c->prefix, s->blocks[i], key, parent, t);
        parent = key;
    }
}

int kv_seq_reserve(kv_seq *s, int64_t n_tokens, memra_err *err)
{
    kv_cache *c = s->cache;
    if (n_tokens < 0)
        return memra_fail(err, "KV cache: cannot reserve %" PRId64 " tokens", n_tokens);
    int64_t need = (n_tokens + c->block_size - 1) / c->block_size;
    int slot = c->state_floats && s->state_slot < 0 && n_tokens > 0;
    if (need <= s->n_blocks && !slot)
        return 0;
    int64_t more = need > s->n_blocks ? need - s->n_blocks : 0;
    if (more > kv_cache_available(c))
        return memra_fail(err, "KV cache full: %" PRId64 " tokens need %" PRId64 " more blocks "
                          "of %d tokens, %d of %d free", n_tokens, more, c->block_size,
                          kv_cache_available(c), c->n_blocks);
    if (slot && c->n_free_slots == 0)
        return memra_fail(err, "recurrent state: all %d sequence slots are taken (one per "
                          "sequence the engine was sized for)", c->n_state_slots);
    if (slot)
        s->state_slot = c->free_slots[--c->n_free_slots];
    ensure_cap(s, need);
    while (s->n_blocks < need)
        s->blocks[s->n_blocks++] = take_block(c);
    return 0;
}

void kv_seq_truncate(kv_seq *s, int64_t n_tokens)
{
    kv_cache *c = s->cache;
    if (n_tokens < 0)
        n_tokens = 0;
    if (c->state_floats) {
        /* the state sums every position: it can only be dropped whole */
        MEMRA_ASSERT(n_tokens == 0 || n_tokens >= s->n_tokens);
        if (n_tokens == 0) {
            if (s->state_slot >= 0)
                c->free_slots[c->n_free_slots++] = s->state_slot;
            while (s->n_snap > 0)
                c->free_slots[c->n_free_slots++] = s->snap[--s->n_snap];
            s->state_slot = -1;
            s->snap_tokens = -1;
            s->snap_rows = 0;
        }
    }
    truncate_blocks(s, n_tokens);
}

/* kv_seq_truncate's cut of the blocks and the length. */
static void truncate_blocks(kv_seq *s, int64_t n_tokens)
{
    kv_cache *c = s->cache;
    int64_t keep = (n_tokens + c->block_size - 1) / c->block_size;
    while (s->n_blocks > keep)
        release_block(c, s->blocks[--s->n_blocks]);
    if (c->prefix && keep > 0 && n_tokens % c->block_size && n_tokens < s->n_tokens) {
        int b = s->blocks[keep - 1]; /* written again from n_tokens on */
        MEMRA_ASSERT(c->refs[b] == 1); /* no other sequence may read what is rewritten */
        kv_prefix_remove(c->prefix, b);
        drop_state(c, b);
    }
    if (s->n_tokens > n_tokens)
        s->n_tokens = n_tokens;
}
