/* A checkpoint opened for reading, whatever its format: a GGUF file or an
 * HF safetensors dir (config.json + model.safetensors or shards). Tensors
 * are views into the mmapped files, with shapes outermost first. Names are
 * in the checkpoint's own scheme (GGUF names for GGUF, HF names for HF). */
#ifndef MEMRA_MODEL_CHECKPOINT_H
#define MEMRA_MODEL_CHECKPOINT_H

#include <jansson.h>
#include <stdint.h>

#include "core/err.h"
#include "format/dtype.h"
#include "format/gguf.h"
#include "format/safetensors.h"
#include "model/config.h"
#include "tok/tokenizer.h"

#define TENSOR_MAX_DIMS 8

typedef struct {
    const char *name;
    dtype type;
    int n_dims;
    int64_t shape[TENSOR_MAX_DIMS]; /* outermost first, as PyTorch writes it */
    int64_t n_elements;
    uint64_t nbytes;
    const uint8_t *data; /* into the map */
} tensor_view;

typedef enum { CKPT_GGUF = 0, CKPT_HF = 1 } checkpoint_format;

typedef struct {
    checkpoint_format format;
    char *path;       /* the resolved local path */
    int vocab_only;   /* a GGUF with tokenizer metadata and no tensors */
    int has_config;   /* config below is valid (not for vocab-only files) */
    model_config config;
    int n_tensors;
    tensor_view *tensors;
    gguf_file gguf;   /* format == CKPT_GGUF */
    st_set st;        /* format == CKPT_HF */
    json_t *hf_config; /* format == CKPT_HF: config.json */
} checkpoint;

/* spec: a GGUF path, an HF dir, or hf:owner/repo[:file]. */
int checkpoint_open(const char *spec, checkpoint *out, memra_err *err);
void checkpoint_close(checkpoint *c);
const tensor_view *checkpoint_find(const checkpoint *c, const char *name);
/* The checkpoint's own tokenizer: its GGUF keys, or its HF dir's files. */
int checkpoint_load_tokenizer(const checkpoint *c, tokenizer **out, memra_err *err);

#endif
