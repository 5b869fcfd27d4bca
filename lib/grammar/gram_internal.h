/* The grammar's internal form, shared by the builder, the GBNF parser, the
 * matcher and the mask walk.
 *
 * A compiled grammar is one flat array of elements. Each alternative of each
 * rule is a contiguous run of elements ending in GE_END, so a position in
 * the array is a complete "where am I" inside a rule, and a matcher stack is
 * just a list of positions. An element is either a set of bytes (one byte of
 * input) or a reference to a rule. */
#ifndef MEMRA_GRAMMAR_GRAM_INTERNAL_H
#define MEMRA_GRAMMAR_GRAM_INTERNAL_H

#include <stdint.h>

#include "core/err.h"
#include "grammar/grammar.h"

typedef struct {
    uint32_t w[8];
} gram_byteset;

static inline int gram_bs_has(const gram_byteset *s, unsigned b)
{
    return (s->w[b >> 5] >> (b & 31)) & 1u;
}
static inline void gram_bs_add(gram_byteset *s, unsigned b)
{
    s->w[b >> 5] |= 1u << (b & 31);
}

enum { GE_END = 0, GE_BYTES = 1, GE_REF = 2 };

typedef struct {
    uint32_t kind; /* GE_* */
    uint32_t arg;  /* byte-set index (GE_BYTES) or rule index (GE_REF) */
} gram_elem;

struct gram_grammar {
    gram_elem *elems;
    uint32_t n_elems;
    gram_byteset *sets;
    uint32_t n_sets;
    /* Rule r's alternatives start at elems[alts[alt_first[r] .. alt_first[r+1])]. */
    uint32_t *alt_first;
    uint32_t *alts;
    uint32_t n_rules;
    uint32_t root;
    char **names;
    /* Of the GBNF text it was parsed from: grammars of the same text (every
     * request with one schema) share the process-wide mask cache. */
    uint64_t fingerprint;
};

/* The builder: rules as lists of alternatives of element sequences, with
 * names, before they are flattened. Repetitions and non-ASCII classes become
 * auxiliary rules here. */
typedef struct {
    gram_elem *v;
    int n, cap;
} gb_seq;

typedef struct {
    char *name;
    gb_seq *alts;
    int n_alts, cap_alts;
    int defined;
    int ref_line, ref_col; /* first reference, for "undefined rule" errors */
} gb_rule;

typedef struct {
    gb_rule *rules;
    int n_rules, cap_rules;
    gram_byteset *sets;
    int n_sets, cap_sets;
} gram_builder;

/* A code-point range, inclusive. */
typedef struct {
    uint32_t lo, hi;
} gram_cprange;

void gb_init(gram_builder *b);
void gb_free(gram_builder *b);
/* The index of the rule named name[0..len); creates an undefined one. */
int gb_rule_id(gram_builder *b, const char *name, size_t len);
/* A new auxiliary rule named base-N. */
int gb_new_rule(gram_builder *b, const char *base);
void gb_seq_push(gb_seq *s, uint32_t kind, uint32_t arg);
void gb_seq_free(gb_seq *s);
/* Moves seq into rule r as a new alternative (seq is left empty). */
void gb_add_alt(gram_builder *b, int r, gb_seq *seq);
int gb_set_id(gram_builder *b, const gram_byteset *set);
/* Appends what matches one code point in the ranges (negated: outside them)
 * to seq: one byte-set element when every code point is ASCII, else a
 * reference to a new rule of UTF-8 byte-sequence alternatives. Surrogates
 * never match. */
void gb_push_class(gram_builder *b, gb_seq *seq, const gram_cprange *r, int n, int negated,
                   const char *base);
/* Appends the UTF-8 bytes of a literal. */
void gb_push_literal(gram_builder *b, gb_seq *seq, const uint8_t *s, size_t n);
/* Checks (every rule defined, no left recursion, root present) and
 * flattens; the builder is freed either way. */
gram_grammar *gb_finish(gram_builder *b, memra_err *err);

/* Matcher stacks, persistent: a node is one position with a link to the
 * node below it, so stacks that share their lower part share nodes. Node 0
 * is the bottom; a stack whose top is 0 has matched the whole grammar. The
 * top of every other stack is at a GE_BYTES element. A stack set is a range
 * of `tops`; pools grow and are cut back to a mark (the mask walk goes depth
 * first, so a subtree's nodes are freed when it is done). */
typedef struct {
    uint32_t pos, parent, hash;
} gram_node;

typedef struct {
    const gram_grammar *g;
    gram_node *nodes;
    uint32_t n_nodes, cap_nodes;
    uint32_t *tops;
    uint32_t n_tops, cap_tops;
    /* When set, nodes are hash-consed: one node per (position, parent), so
     * equal stacks are equal ids. Open addressing, 0 empty; an entry at or
     * past n_nodes is stale (the pool was cut back) and is skipped. */
    uint32_t *intern;
    uint32_t intern_cap, intern_used;
} gram_pool;

void gram_pool_init(gram_pool *p, const gram_grammar *g);
void gram_pool_free(gram_pool *p);
/* Turns hash-consing on (before the first node past the bottom). */
void gram_pool_intern(gram_pool *p);
/* A node for (pos, below): new, or the existing one when interning. */
uint32_t gram_pool_node(gram_pool *p, uint32_t pos, uint32_t below);
/* Stack n of src rebuilt in dst (interned there when dst interns). */
uint32_t gram_pool_copy_stack(gram_pool *dst, const gram_pool *src, uint32_t n);
/* Appends to the set that starts at tops[set_start] (and ends at n_tops)
 * every stack reached from position pos over stack `below`, without
 * duplicates. */
void gram_pool_expand(gram_pool *p, uint32_t pos, uint32_t below, uint32_t set_start);
/* The stacks of set [from, to) that read `byte`, advanced, as a new set
 * [returned start, n_tops). */
uint32_t gram_pool_advance(gram_pool *p, uint32_t from, uint32_t to, unsigned byte);

/* Recent masks of one state, keyed by its stack set's contents and the
 * vocabulary (gram_mask_cache.c). */
typedef struct gram_mask_cache gram_mask_cache;
gram_mask_cache *gram_mask_cache_new(int entries);
void gram_mask_cache_free(gram_mask_cache *c);
int gram_mask_cache_capacity(const gram_mask_cache *c);

struct gram_state {
    gram_pool pool;
    uint32_t set_start, set_end;
    uint32_t live_nodes; /* nodes after the last compaction */
    int finished;
    /* Written by gram_mask through a const state: a state belongs to one
     * thread, and the cache changes no answer, only its cost. */
    gram_mask_cache *cache;
};

/* The mask computed by walking the vocabulary's trie (what gram_mask
 * returns on a cache miss); *visits (when not NULL) is set to the number of
 * trie nodes the walk entered, its cost. */
int gram_mask_walk(const gram_state *s, const gram_vocab *v, uint32_t *mask_bits,
                   uint64_t *visits);
/* A number no other vocabulary built in this process has: masks cached for
 * one vocabulary are never taken for another, even at a reused address. */
uint64_t gram_vocab_serial(const gram_vocab *v);

#endif
