/* Which type each tensor gets when a checkpoint is quantized: a plain type
 * (every matrix in that type) or a mix preset in llama.cpp's manner, plus
 * --keep overrides. Works on a tensor contract's entries (names, roles,
 * layers and shapes), so a plan needs no weights: memra-quantize --dry-run
 * sizes a model from its config.json alone.
 *
 * The rules (docs/QUANTIZATION.md has the table):
 *   - 1-D tensors (norms, biases), the MoE router and generated tensors
 *     (rope_freqs) are written as F32, never quantized;
 *   - plain TYPE: every other tensor in TYPE; a tensor whose rows are not
 *     whole blocks of TYPE is an error naming it;
 *   - Q4_K_M / Q5_K_M (llama.cpp's mixes): base Q4_K / Q5_K; the output
 *     head (and a tied token embedding, which is the head) Q6_K; attn_v and
 *     ffn_down (dense or experts) Q6_K in the layers use_more_bits picks
 *     (the first and last eighth, and every third in between); for exactly
 *     8 experts attn_v and attn_k Q8_0, and for Q4_K_M attn_output Q5_K;
 *   - Q6_K_M (memra's, the same pattern one step up): base Q6_K, head,
 *     tied embedding and the picked attn_v / ffn_down Q8_0;
 *   - in a mix, a tensor whose rows are not whole blocks of its type falls
 *     back to Q8_0 (rows a multiple of 32), else F16 (llama.cpp falls back
 *     to Q5_0 / Q5_1 / Q8_0 / F16; memra has no Q5_0 / Q5_1 kernels);
 *   - --keep REGEX=TYPE: the first --keep whose regex (PCRE2, searched in
 *     the GGUF name) matches a quantizable tensor decides its type, over
 *     the preset; F32, F16, BF16 or any quantized type; rows that do not
 *     fit the type are an error. */
#ifndef MEMRA_MODEL_QUANT_RECIPE_H
#define MEMRA_MODEL_QUANT_RECIPE_H

#include <stdint.h>

#include "core/err.h"
#include "format/dtype.h"
#include "model/config.h"
#include "model/contract.h"

typedef enum { QMIX_PLAIN = 0, QMIX_Q4_K_M, QMIX_Q5_K_M, QMIX_Q6_K_M } quant_mix;

#define QUANT_MAX_KEEP 64

typedef struct {
    char *pattern; /* the regex as given */
    void *re;      /* pcre2_code */
    dtype type;
    int n_matched; /* tensors it decided */
} quant_keep;

typedef struct {
    char name[16]; /* canonical: "Q4_K_M", "Q8_0", "MXFP8" ... */
    quant_mix mix;
    dtype base;
    int n_keep;
    quant_keep keep[QUANT_MAX_KEEP];
    /* quantized source tensors are read (dequantized) instead of refused:
     * each value is then rounded twice */
    int allow_requantize;
} quant_recipe;

/* TYPE as the user writes it, case-insensitive: Q8_0, Q4_0, Q4_K, Q5_K,
 * Q6_K, NVFP4, MXFP8 (alias FP8), or Q4_K_M, Q5_K_M, Q6_K_M. */
int quant_recipe_parse(const char *type, quant_recipe *out, memra_err *err);
/* "REGEX=TYPE" (split at the last '='); bad regexes and types are errors. */
int quant_recipe_add_keep(quant_recipe *r, const char *spec, memra_err *err);
void quant_recipe_free(quant_recipe *r);

/* The type of one tensor of a GGUF-named contract for config c, and in
 * *why (may be NULL) a short static reason ("base", "output head",
 * "more bits (layer pattern)", "fallback: rows not whole blocks", "--keep",
 * "not a matrix"). Fails, naming the tensor, when a plain type or a --keep
 * type does not fit its rows. Counts --keep matches. */
int quant_recipe_type(quant_recipe *r, const model_config *c, const contract_entry *e,
                      dtype *out, const char **why, memra_err *err);
/* The llama.cpp general.file_type of the recipe (llama_ftype), or -1 when
 * llama.cpp has none (MXFP8). */
int quant_recipe_llama_ftype(const quant_recipe *r);
/* "Q4_K_M" or "Q4_K_M --keep 'attn_q=Q8_0' ..." (the caller frees). */
char *quant_recipe_describe(const quant_recipe *r);
/* The types TYPE accepts, for usage text. */
const char *quant_recipe_names(void);

#endif
