/* Quantizing a checkpoint (GGUF or HF dir) into a GGUF: every tensor of the
 * family's contract, typed by a quant_recipe, produced row-parallel.
 *
 * Tensors are done one after the other, each split into row chunks over
 * the thread pool, so a big tensor (a 150k-row embedding) uses every core
 * and memory holds one tensor's f32 rows per thread, not the model. A row's
 * f32 values come straight from the source bytes (GGUF, or HF with each
 * expert's matrix stacked in place); only tensors the HF -> GGUF conversion
 * transforms (llama's Q/K permutation) are first converted whole, as
 * memra-convert does. The quantized tensors stay in memory until the GGUF
 * is written (the size of the output).
 *
 * The GGUF keeps the source's metadata (tokenizer, chat template, names)
 * and records the recipe: general.file_type (llama.cpp's llama_ftype, when
 * it has one), memra.quantize.type and memra.quantize.recipe, and with an
 * importance matrix llama.cpp's quantize.imatrix.* keys. */
#ifndef MEMRA_MODEL_QUANTIZE_MODEL_H
#define MEMRA_MODEL_QUANTIZE_MODEL_H

#include <stdint.h>

#include "core/err.h"
#include "quant/imatrix.h"
#include "model/checkpoint.h"
#include "model/quant_recipe.h"

/* One destination tensor of a plan. */
typedef struct {
    const contract_entry *e; /* name, role, layer, shape (into plan.contract) */
    dtype src_type;          /* DT_INVALID for a plan from a config, or generated */
    dtype type;
    const char *why; /* quant_recipe_type's reason */
    int64_t n_elements;
    uint64_t nbytes;
} quantize_plan_entry;

typedef struct {
    tensor_contract contract; /* GGUF naming */
    int n;
    quantize_plan_entry *entries;
    uint64_t total_bytes, total_elements;
    uint64_t matrix_bytes, matrix_elements; /* the quantizable tensors */
} quantize_plan;

/* The plan for config c: with src (bound to c) the tensors it has and their
 * types; without (a config alone) every tensor the config implies. Fails
 * on what quant_recipe_type refuses and, with src, on a source tensor that
 * is already quantized (naming it) unless r->allow_requantize. */
int quantize_plan_build(const model_config *c, const contract_binding *src, quant_recipe *r,
                        quantize_plan *out, memra_err *err);
void quantize_plan_free(quantize_plan *p);

typedef struct {
    int n_threads;               /* <= 0: all cores */
    const imatrix *importance;   /* NULL for plain squared error */
    const char *imatrix_path;    /* recorded in the metadata */
    /* called on the calling thread after each tensor (may be NULL) */
    void (*progress)(void *ctx, int done, int total, const quantize_plan_entry *e,
                     uint64_t elements_done, uint64_t elements_total);
    void *progress_ctx;
    /* out: tensors quantized without an importance entry (an imatrix was
     * given but has none for them) */
    int n_without_importance;
} quantize_opts;

/* Quantize src into the GGUF file dst (written atomically). */
int quantize_checkpoint(const checkpoint *src, const char *dst, quant_recipe *r,
                        quantize_opts *o, memra_err *err);

#endif
