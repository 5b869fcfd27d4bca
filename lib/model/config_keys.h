/* The pieces config.c and the family files read configs with: plausibility
 * limits and checks, typed readers of GGUF metadata keys, and the HF keys
 * several families share. Every reader fails with a message naming the
 * source and the key. */
#ifndef MEMRA_MODEL_CONFIG_KEYS_H
#define MEMRA_MODEL_CONFIG_KEYS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "format/gguf.h"
#include "model/config.h"

#define CONFIG_MAX_SIZE 10000000     /* dims, vocab, heads, ffn: 1e7 */
#define CONFIG_MAX_LAYERS 100000
#define CONFIG_MAX_EXPERTS 65536
#define CONFIG_MAX_CTX 1000000000    /* positions */
#define CONFIG_MAX_TENSOR_ELEMS 1e15 /* elements of one tensor */

/* ---- checks; `what` names the source, `key` the HF spelling ---- */

/* v in [1, max]. */
int config_size_ok(const char *what, const char *key, int64_t v, int64_t max, memra_err *err);
/* A tensor of that many elements is plausible. */
int config_elems_ok(const char *what, const char *tensor, double elems, memra_err *err);
/* v finite and positive. */
int config_finite_pos(const char *what, const char *key, double v, memra_err *err);

/* ---- HF config.json ---- */

/* A boolean key that must not be true ("mlp_bias true is not supported"). */
int config_hf_refuse_true(const json_t *obj, const char *key, const char *what, memra_err *err);
/* sliding_window: absent keeps `dflt`, null is none (0). */
int config_hf_sliding_window(const json_t *obj, int64_t dflt, const char *what, model_config *c,
                             memra_err *err);
/* layer_types (newer configs): every entry "full_attention" or
 * "sliding_attention", in the pattern the family supports: every Nth layer
 * full (N is then c->sliding_window_pattern) for a family with
 * sliding_pattern, else all full. */
int config_hf_layer_types(const json_t *obj, const char *what, model_config *c, memra_err *err);

/* ---- GGUF metadata ---- */

typedef struct {
    const gguf_file *f;
    const char *arch; /* the prefix of arch keys: general.architecture */
    const char *what; /* the file, for errors */
} cfg_gguf;

/* Typed readers: key is "<arch>.key" when arch_key, else as given. A missing
 * key keeps *out and returns 0 unless required; a key of another type is
 * always an error naming it. Floats stored as f32 come back as the shortest
 * decimal that rounds to them (1e-05, not 9.99999975e-06). */
int cfg_gguf_int(const cfg_gguf *g, const char *key, int arch_key, int required, int64_t *out,
                 memra_err *err);
/* An integer key that may also be a list with one value per layer (gemma4's
 * head_count_kv, feed_forward_length): the scalar, or the list's value for
 * layer `index` (which must be there); index -1: only a scalar will do. */
int cfg_gguf_int_at(const cfg_gguf *g, const char *key, int arch_key, int required,
                    int64_t index, int64_t *out, memra_err *err);
int cfg_gguf_num(const cfg_gguf *g, const char *key, int arch_key, int required, double *out,
                 memra_err *err);
int cfg_gguf_bool(const cfg_gguf *g, const char *key, int arch_key, int *out, memra_err *err);
int cfg_gguf_str(const cfg_gguf *g, const char *key, int arch_key, const char **out,
                 memra_err *err);
/* A token id key: absent, or llama.cpp's "none" (u32 0xFFFFFFFF / -1), is -1. */
int cfg_gguf_token(const cfg_gguf *g, const char *key, int64_t *out, memra_err *err);
/* An f32 value as the shortest decimal that rounds to it. */
double config_f32_shortest(double v);
/* Write "<arch>.key" as u32 / f32. */
void cfg_gguf_set_u32(gguf_writer *w, const char *arch, const char *key, int64_t v);
void cfg_gguf_set_f32(gguf_writer *w, const char *arch, const char *key, double v);

/* ---- HF config.json out ---- */

void config_json_set_int(json_t *o, const char *key, int64_t v);
void config_json_set_num(json_t *o, const char *key, double v);

#endif
