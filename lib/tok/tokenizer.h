/* Text <-> token ids, exactly as the model's own tokenizer does it.
 *
 * Two algorithms behind one interface:
 *   - byte-level BPE (GPT-2, Llama 3, Qwen2/2.5/3, DeepSeek ...): text is
 *     split by the pre-tokenizer regexes (PCRE2 with JIT and Unicode
 *     classes), each piece's bytes become symbols and merges are applied
 *     by rank;
 *   - SentencePiece-style BPE with byte fallback (Llama 2, Mistral v0.1,
 *     Gemma): spaces become U+2581, symbols are UTF-8 characters, merges by
 *     score (GGUF "llama" vocabularies, as llama.cpp does) or by merge rank
 *     (tokenizer.json, as Hugging Face `tokenizers` does), and characters
 *     with no token become <0xNN> byte tokens.
 *
 * Two sources, each reproducing its reference implementation:
 *   - GGUF tokenizer.* metadata (vocab-only files too): llama.cpp's
 *     behaviour (its special-token partition, SPM prefix space, pre-type
 *     regexes, add_bos/add_eos defaults and end-of-generation ids);
 *   - an HF tokenizer.json + tokenizer_config.json: Hugging Face
 *     `tokenizers` behaviour (added-token matching with lstrip/rstrip/
 *     single_word/normalized, the normalizer and pre-tokenizer chains).
 *
 * Invalid UTF-8 input never fails and never crashes: every ill-formed
 * sequence is replaced by U+FFFD first (one per maximal subpart, as
 * Python's bytes.decode("utf-8", "replace") and Rust's from_utf8_lossy do),
 * so the ids are those `tokenizers` gives for the lossily decoded string.
 * (llama.cpp replaces per byte in the BPE path and keeps raw bytes in the
 * SPM path; we use the one rule everywhere.)
 *
 * A tokenizer is read-only once loaded: any number of threads may encode
 * and decode with it at once. */
#ifndef MEMRA_TOK_TOKENIZER_H
#define MEMRA_TOK_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "format/gguf.h"

typedef struct tokenizer tokenizer;

typedef enum {
    TOK_BPE_BYTELEVEL = 0, /* GPT-2 style byte-level BPE */
    TOK_SPM = 1,           /* SentencePiece-style BPE with byte fallback */
} tok_kind;

/* From GGUF tokenizer.* keys (tokenizer.ggml.model "gpt2" or "llama"). The
 * tokenizer copies what it needs; `f` may be closed afterwards. */
int tok_load_gguf(const gguf_file *f, tokenizer **out, memra_err *err);
/* From an HF directory: tokenizer.json (model.type "BPE") and, when
 * present, tokenizer_config.json (special tokens, add_bos_token/
 * add_eos_token) and generation_config.json (extra eos ids). */
int tok_load_hf_dir(const char *dir, tokenizer **out, memra_err *err);
void tok_free(tokenizer *t);

/* Encode text[0..len) into *ids (malloc'ed, caller frees; *ids may be NULL
 * when *n is 0). add_special: BOS/EOS as the tokenizer's config says.
 * parse_special: special (control) token text in the input becomes those
 * tokens; non-special added tokens (user-defined) are always matched, as
 * both references do. */
int tok_encode(const tokenizer *t, const char *text, size_t len, int add_special,
               int parse_special, int32_t **ids, size_t *n, memra_err *err);

/* Remembered encodings of long text fragments, for a caller that encodes
 * the same long texts again and again (a server's system prompts): at most
 * max_bytes of text and ids in max_entries fragments, least recently used
 * out first. Safe to share between threads. */
typedef struct tok_cache tok_cache;
tok_cache *tok_cache_new(size_t max_bytes, int max_entries);
void tok_cache_free(tok_cache *c);
void tok_cache_stats(tok_cache *c, uint64_t *hits, uint64_t *misses);

/* tok_encode, the text's long fragments (those between added and special
 * tokens) looked up in c and put there: the same ids as tok_encode. c may
 * be NULL. */
int tok_encode_cached(const tokenizer *t, tok_cache *c, const char *text, size_t len,
                      int add_special, int parse_special, int32_t **ids, size_t *n,
                      memra_err *err);

/* Whether parse_special changes text's ids: 1 when the text holds special
 * (control) token text, 0 when not, -1 on an error. Only the added-token
 * split runs (one pass over the text, not two encodings). */
int tok_has_special_text(const tokenizer *t, const char *text, size_t len, memra_err *err);

/* The raw bytes a token stands for: byte-level characters mapped back to
 * bytes, U+2581 back to a space, <0xNN> byte tokens to their byte; added
 * and control tokens give their text. Not NUL-terminated; may be part of a
 * UTF-8 sequence. NULL (and *len 0) for an id out of range. */
const char *tok_piece(const tokenizer *t, int32_t id, size_t *len);
/* The token's text as the vocabulary stores it (e.g. "Ġhello"); NULL when
 * out of range. NUL-terminated. */
const char *tok_text(const tokenizer *t, int32_t id);

/* ids -> text (malloc'ed, NUL-terminated, valid UTF-8: ill-formed byte
 * sequences become U+FFFD). skip_special leaves control tokens out. A
 * SentencePiece tokenizer that adds a prefix space drops the first space
 * of the result, as llama.cpp and the Llama 2 decoder do. An id out of
 * range is an error naming it. */
int tok_decode(const tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **out,
               size_t *out_len, memra_err *err);

tok_kind tok_get_kind(const tokenizer *t);
size_t tok_vocab_size(const tokenizer *t);
/* -1 when the tokenizer has none. */
int32_t tok_bos(const tokenizer *t);
int32_t tok_eos(const tokenizer *t);
/* The end-of-turn token (<|im_end|>, <|eot_id|>, <end_of_turn> ...), -1 when none. */
int32_t tok_eot(const tokenizer *t);
int32_t tok_unk(const tokenizer *t);
int32_t tok_pad(const tokenizer *t);
/* Whether add_special puts BOS in front / EOS at the end. */
int tok_adds_bos(const tokenizer *t);
int tok_adds_eos(const tokenizer *t);
/* Every id generation should stop on (EOS, end-of-turn, end-of-message and
 * the other end-of-generation tokens), sorted ascending. */
const int32_t *tok_stop_ids(const tokenizer *t, size_t *n);
int tok_is_stop(const tokenizer *t, int32_t id);
/* A control token (BOS, <|im_start|> ...): what skip_special leaves out. */
int tok_is_control(const tokenizer *t, int32_t id);
/* Whether decoding drops the first token's leading space (SentencePiece
 * tokenizers that add a prefix space). */
int tok_strips_leading_space(const tokenizer *t);
/* The id of the token whose vocabulary text is exactly `text` (added
 * tokens included), or -1. */
int32_t tok_id_of(const tokenizer *t, const char *text);

#endif
