/* Shared pieces of the HF tokenizer <-> GGUF conversion (hf_tokenizer*.c):
 * a string -> id hash map, the table of known pre-tokenizer regexes, the
 * SentencePiece model file (tokenizer.model) reader and writer, and the
 * token-type / key constants both directions use. Not a public interface. */
#ifndef MEMRA_TOK_HF_TOKENIZER_INTERNAL_H
#define MEMRA_TOK_HF_TOKENIZER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/arena.h"
#include "core/err.h"
#include "core/strmap.h"
#include "format/gguf.h"

/* GGUF token types (llama.cpp's llama_token_type; SentencePiece uses the
 * same numbers for its piece types). */
enum {
    HFT_NORMAL = 1,
    HFT_UNKNOWN = 2,
    HFT_CONTROL = 3,
    HFT_USER_DEFINED = 4,
    HFT_UNUSED = 5,
    HFT_BYTE = 6,
};

/* Score convert_hf_to_gguf gives added (user-defined, control) and padding
 * tokens of SentencePiece vocabularies. */
#define HFT_ADDED_SCORE (-1000.0f)

/* Side files (configs, templates) are small; refuse anything past this. */
#define HF_SMALL_MAX (64u << 20)

/* ---- files of an HF directory ---- */

int hf_file_exists(const char *path);
/* An optional JSON file: *out NULL without error when absent; an error when
 * present but unreadable, not JSON, or not an object. */
int hf_json_optional(const char *path, size_t max, json_t **out, memra_err *err);

/* The chat template(s) of an HF directory, as gguf-py finds them:
 * tokenizer_config.json's chat_template (tc, which may be NULL), else
 * chat_template.jinja (+ additional_chat_templates/<name>.jinja), else
 * chat_template.json. *out is a string, a list of {name, template}, or
 * NULL; it is validated here so writing cannot fail. */
int hf_chat_templates_read(const char *dir, const json_t *tc, const char *tc_path, json_t **out,
                           memra_err *err);
/* tokenizer.chat_template, tokenizer.chat_template.<name> and
 * tokenizer.chat_templates for a value from hf_chat_templates_read. */
void hf_chat_templates_write(const json_t *tmpl, gguf_writer *w);

/* ---- pre-tokenizers ---- */

/* One llama.cpp pre-tokenizer name with the Hugging Face regexes that
 * produce it, in the order a Sequence of Split pre-tokenizers applies them. */
typedef struct {
    const char *name;
    int n_regex;
    const char *regex[6];
    int ignore_merges; /* tokenizer.json model.ignore_merges for this family */
} hf_pre_type;

/* The regex of GPT-2's ByteLevel pre-tokenizer (use_regex true). */
extern const char *const HF_GPT2_REGEX;

/* The known type whose regex list equals regexes[0..n) exactly, or NULL. */
const hf_pre_type *hf_pre_match(const char *const *regexes, int n);
/* The known type of that name, or NULL. */
const hf_pre_type *hf_pre_find(const char *name);

/* ---- SentencePiece model (tokenizer.model, protobuf ModelProto) ---- */

typedef struct {
    const char *piece; /* NUL-terminated, in the model's arena */
    size_t len;
    float score;
    int type; /* HFT_* */
} spm_piece;

typedef struct {
    arena mem;
    spm_piece *pieces;
    size_t n;
} spm_model;

/* Parse the pieces of a tokenizer.model; trainer and normalizer specs are
 * skipped. Every length and tag is checked against the buffer. */
int spm_model_parse(const uint8_t *data, size_t size, const char *what, spm_model *out,
                    memra_err *err);
int spm_model_read(const char *path, spm_model *out, memra_err *err);
void spm_model_free(spm_model *m);

typedef struct {
    int32_t unk_id, bos_id, eos_id, pad_id; /* -1 when absent */
    int add_dummy_prefix;
} spm_write_opts;

/* A BPE ModelProto with byte_fallback, the pieces in id order, and an
 * identity normalizer that escapes whitespace as U+2581 (Llama 2 style). */
int spm_model_write(const char *path, const spm_piece *pieces, size_t n,
                    const spm_write_opts *opts, memra_err *err);

#endif
