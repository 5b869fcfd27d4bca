/* The inside of a tokenizer (tok_*.c only): the vocabulary and its maps,
 * the merge table, the normalizer and pre-tokenizer steps, the added-token
 * matchers, and the UTF-8 helpers they share. Not a public interface. */
#ifndef MEMRA_TOK_INTERNAL_H
#define MEMRA_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "core/arena.h"
#include "core/err.h"
#include "core/strbuf.h"
#include "core/strmap.h"
#include "tok/tokenizer.h"

/* Token types, as GGUF tokenizer.ggml.token_type numbers them. */
enum {
    TOKT_NORMAL = 1,
    TOKT_UNKNOWN = 2,
    TOKT_CONTROL = 3,
    TOKT_USER_DEFINED = 4,
    TOKT_UNUSED = 5,
    TOKT_BYTE = 6,
};

/* Per-token flags. */
enum {
    TOKF_CONTROL = 1,  /* special: parsed only with parse_special, skipped by skip_special */
    TOKF_IN_MODEL = 2, /* the BPE model may produce it (HF: in model.vocab) */
    TOKF_ADDED = 4,    /* matched before the split (added / user-defined / control) */
};

typedef struct {
    const char *text; /* vocabulary form, NUL-terminated (arena) */
    const char *piece; /* decoded bytes (arena) */
    uint32_t len, piece_len;
    float score;
    uint8_t type;  /* TOKT_* */
    uint8_t flags; /* TOKF_* */
} tok_token;

/* ---- (left id, right id) -> (rank, merged id) ---- */

typedef struct {
    uint64_t key; /* left << 32 | right; UINT64_MAX: empty */
    uint32_t rank;
    int32_t id;
} tok_pair_entry;

typedef struct {
    tok_pair_entry *e;
    size_t cap, n;
} tok_pairmap;

void tok_pairmap_init(tok_pairmap *m, size_t expected);
void tok_pairmap_free(tok_pairmap *m);
/* The first insertion of a pair wins (later duplicates keep the lower rank). */
void tok_pairmap_put(tok_pairmap *m, int32_t left, int32_t right, uint32_t rank, int32_t id);
const tok_pair_entry *tok_pairmap_get(const tok_pairmap *m, int32_t left, int32_t right);

/* ---- normalizers (HF tokenizer.json) ---- */

typedef enum {
    NORM_NFC,
    NORM_NFD,
    NORM_NFKC,
    NORM_NFKD,
    NORM_PREPEND,
    NORM_REPLACE, /* literal string pattern, or a regex when `re` is set */
    NORM_LOWERCASE,
    NORM_STRIP_ACCENTS, /* drops every combining mark (General_Category M) */
    NORM_STRIP,         /* White_Space off the left and/or the right end */
} tok_norm_type;

typedef struct {
    tok_norm_type type;
    char *a, *b; /* PREPEND: a; REPLACE: a -> b */
    size_t alen, blen;
    pcre2_code *re; /* REPLACE with a Regex pattern (a is its source) */
    uint8_t strip_left, strip_right; /* STRIP */
} tok_norm_step;

/* ---- pre-tokenizers ---- */

typedef enum {
    PRE_SPLIT_REGEX,   /* re with behavior/invert */
    PRE_SPLIT_LITERAL, /* lit with behavior/invert */
    PRE_BYTELEVEL,     /* add_prefix_space; use_regex -> re (GPT-2 regex) */
    PRE_METASPACE,     /* lit = replacement; prepend_scheme; split */
} tok_pre_type;

typedef enum {
    SPLIT_ISOLATED,
    SPLIT_REMOVED,
    SPLIT_MERGED_PREV,
    SPLIT_MERGED_NEXT,
    SPLIT_CONTIGUOUS,
} tok_split_behavior;

enum { PREPEND_ALWAYS = 0, PREPEND_FIRST = 1, PREPEND_NEVER = 2 };

typedef struct {
    tok_pre_type type;
    pcre2_code *re;
    char *lit;
    size_t lit_len;
    tok_split_behavior behavior;
    int invert;
    int add_prefix_space; /* BYTELEVEL */
    int prepend_scheme;   /* METASPACE */
    int split;            /* METASPACE */
} tok_pre_step;

/* ---- added / special token matching ---- */

/* A byte trie: node 0 is the root; each node's children form a sorted
 * list in `edges`, except the root's, which is a 256-entry table. */
typedef struct {
    int32_t *root;   /* [256] child node of the root per byte, -1 none */
    struct tok_trie_node *nodes;
    size_t n_nodes, cap_nodes;
} tok_trie;

struct tok_trie_node {
    int32_t first_child, next_sibling;
    int32_t value; /* index into the pattern list, -1 none */
    uint8_t byte;
};

void tok_trie_init(tok_trie *t);
void tok_trie_free(tok_trie *t);
void tok_trie_insert(tok_trie *t, const char *s, size_t len, int32_t value);
/* The longest pattern that starts at s[0]; returns its value and sets
 * *mlen, or -1. */
int32_t tok_trie_longest(const tok_trie *t, const char *s, size_t len, size_t *mlen);

typedef struct {
    int32_t id;
    const char *content; /* as matched (HF: normalized when `normalized`) */
    size_t len;
    uint8_t special, lstrip, rstrip, single_word, normalized;
} tok_added;

/* One piece of the input after the added-token split. */
typedef struct {
    int32_t id; /* >= 0: a token; -1: text */
    size_t start, len;
} tok_seg;

typedef struct {
    tok_seg *v;
    size_t n, cap;
} tok_segs;

void tok_segs_push(tok_segs *s, int32_t id, size_t start, size_t len);

typedef enum { TOK_FLAVOR_GGUF = 0, TOK_FLAVOR_HF = 1 } tok_flavor;

struct tokenizer {
    tok_kind kind;
    tok_flavor flavor;
    char *source; /* file or dir, for messages */
    arena mem;
    int32_t n_vocab;
    tok_token *tok;
    strmap map; /* vocabulary text -> id (all tokens; first id wins) */

    /* Rank-ordered merges over symbol ids. Strings that merges mention but
     * the vocabulary lacks (GGUF only) get ids from n_vocab up, with their
     * text in extra[]. */
    tok_pairmap merges;
    char **extra;
    uint32_t *extra_len;
    int32_t n_extra;
    int spm_scores; /* SPM merges by score (GGUF "llama"), not by rank */
    /* GGUF "gemma4": SentencePiece-style BPE by merge rank over the text with
     * spaces escaped to U+2581, split only at newline runs; a word of
     * newlines alone is its own token when the vocabulary has it. */
    int newline_words;
    int ignore_merges;
    int byte_fallback; /* HF model.byte_fallback */
    int fuse_unk;      /* HF model.fuse_unk */
    int32_t byte_id[256]; /* byte-level char token, or <0xNN> (SPM); -1 none */

    /* GGUF: special-token partition candidates, longest first. */
    int32_t *special_order;
    size_t n_special_order;
    tok_trie special_trie; /* values: token ids */

    /* HF: added tokens and their matchers (values: index into added). */
    tok_added *added;
    size_t n_added;
    tok_trie added_raw, added_norm;
    int has_added_norm;

    tok_norm_step *norm;
    size_t n_norm;
    tok_pre_step *pre;
    size_t n_pre;
    int multiline_regex;

    int add_space_prefix; /* GGUF SPM: " " before the first fragment and after specials */
    int strip_leading_space;
    int add_bos, add_eos;
    int32_t bos, eos, eot, eom, unk, pad;
    int32_t *stop;
    size_t n_stop;
};

/* ---- shared helpers ---- */

/* Allocate and fill the tokens array (n entries). */
void tok_alloc_vocab(tokenizer *t, int32_t n);
/* Set a token's vocabulary text (copied into the arena). */
void tok_set_text(tokenizer *t, int32_t id, const char *s, size_t len);
/* Build every token's piece from its text, type and the tokenizer kind. */
void tok_build_pieces(tokenizer *t);
/* Byte -> byte-level character (GPT-2 bytes_to_unicode), and back (-1). */
uint32_t tok_bytelevel_cp(uint8_t b);
int tok_bytelevel_byte(uint32_t cp);
/* byte_id[] for the kind: byte-level chars, or <0xNN> tokens. */
void tok_build_byte_ids(tokenizer *t);
/* Stop ids: eos/eot/eom plus tokens whose text names an end of turn. */
void tok_build_stop_ids(tokenizer *t, const int32_t *more, size_t n_more);
/* The end-of-turn/end-of-generation texts llama.cpp recognises. */
int tok_text_is_eog(const char *text);

/* ---- UTF-8 ---- */

/* Length of a well-formed sequence at s (1..4), or 0 when ill-formed: the
 * maximal subpart to replace is then *bad bytes. */
size_t tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad);
/* Whether s is well-formed. */
int tok_utf8_valid(const char *s, size_t n);
/* Append s with every ill-formed subpart replaced by U+FFFD. */
void tok_utf8_sanitize(const char *s, size_t n, strbuf *out);
size_t tok_utf8_encode(uint32_t cp, char *out);

/* ---- stages (tok_normalize.c, tok_pretok.c, tok_special.c, tok_bpe.c, tok_spm.c) ---- */

int tok_normalize(const tokenizer *t, const char *s, size_t n, strbuf *out, memra_err *err);
/* The same, but where the normalizer leaves the text as it is (a lone
 * Unicode form over text already in that form) *res is s itself and nothing
 * is copied; otherwise *res is buf's data. Saves a copy of the whole input
 * per encode. */
int tok_normalize_view(const tokenizer *t, const char *s, size_t n, strbuf *buf, const char **res,
                       size_t *res_len, memra_err *err);

/* Compile an HF/Oniguruma-style regex for PCRE2 (\s and \S become the
 * Unicode White_Space class); err names the pattern. */
pcre2_code *tok_regex_compile(const char *pattern, size_t len, int multiline, memra_err *err);

/* A list of (pointer, length) pieces; pre-tokenizers that rewrite text keep
 * the new bytes in `store`. */
typedef struct {
    const char **p;
    size_t *len;
    size_t n, cap;
} tok_pieces;
void tok_pieces_push(tok_pieces *p, const char *s, size_t n);

/* Per-call working memory (one per encode call: a tokenizer is shared
 * between threads, its scratch never is). */
typedef struct {
    int32_t id, prev, next;
    uint32_t start, len;
} tok_sym;

typedef struct {
    float score;   /* SPM: higher first */
    uint32_t rank; /* BPE: lower first */
    int32_t left, right;
    int32_t new_id;
    uint32_t size;
    int32_t left_id, right_id; /* BPE: the pair as pushed */
} tok_cand;

typedef struct tok_scratch {
    tok_sym *sym;
    size_t sym_cap;
    tok_cand *heap;
    size_t heap_n, heap_cap;
    char *enc;
    size_t enc_cap;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jit;
    size_t *mpos; /* regex match bounds, pairs */
    size_t mpos_cap;
    char **owned; /* texts rewritten by pre-tokenizers, freed per call */
    size_t n_owned, cap_owned;
    /* word cache for long inputs: word bytes -> ids (see tok_bpe.c) */
    struct tok_wc_entry *wc;
    size_t wc_cap, wc_n;
    char *wc_keys;
    size_t wc_keys_len, wc_keys_cap;
    int32_t *wc_ids;
    size_t wc_ids_len, wc_ids_cap;
} tok_scratch;

tok_scratch *tok_scratch_new(void);
void tok_scratch_free(tok_scratch *s);

/* Run the pre-tokenizer steps over one text piece; words land in `out`. */
int tok_pretokenize(const tokenizer *t, tok_scratch *s, const char *text, size_t len,
                    int first_piece, tok_pieces *out, memra_err *err);
void tok_pieces_clear(tok_pieces *p);
void tok_pieces_free(tok_pieces *p);

/* Split text by added/special tokens: GGUF (llama.cpp partition) or HF. */
void tok_split_special_gguf(const tokenizer *t, const char *text, size_t len, int parse_special,
                            tok_segs *out);
void tok_split_added_hf(const tokenizer *t, const tok_trie *trie, const char *text, size_t len,
                        int parse_special, tok_segs *out);

/* One word through rank BPE (byte-level: bytes are the symbols; SPM-style:
 * UTF-8 characters with byte fallback); ids appended to *ids. */
typedef struct {
    int32_t *v;
    size_t n, cap;
} tok_ids;
void tok_ids_push(tok_ids *ids, int32_t id);

/* The text cache (tok_textcache.c): fragments of at least
 * TOK_CACHE_MIN_BYTES, keyed by their bytes and ctx (what else the
 * fragment's ids depend on). get appends the ids to out on a hit. */
#define TOK_CACHE_MIN_BYTES 512
uint64_t tok_text_hash(const char *p, size_t n, int ctx);
int tok_cache_get(tok_cache *c, uint64_t hash, int ctx, const char *p, size_t n, tok_ids *out);
void tok_cache_put(tok_cache *c, uint64_t hash, int ctx, const char *p, size_t n,
                   const int32_t *ids, size_t n_ids);
void tok_bpe_word(const tokenizer *t, tok_scratch *s, const char *w, size_t n, tok_ids *ids);
/* The same through the per-call word cache (enabled for inputs of
 * `input_len` bytes or more). */
void tok_bpe_word_cached(const tokenizer *t, tok_scratch *s, const char *w, size_t n,
                         tok_ids *ids, size_t input_len);
/* llama.cpp's score-ordered SentencePiece merge over one escaped fragment. */
void tok_spm_fragment(const tokenizer *t, tok_scratch *s, const char *w, size_t n, tok_ids *ids);


#endif
