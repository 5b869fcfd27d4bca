/* Checkpoint conversion: HF dir <-> GGUF, dtype changes, and seeded random
 * weights of any supported config. One pipeline for all of them: every
 * tensor of the destination's contract is produced from the bound source
 * (or the random generator), with HF values as the common ground: a GGUF
 * source is brought back to HF values (inverse transforms, experts
 * unstacked), then a GGUF destination gets the llama.cpp transforms
 * (Q/K permutation, gemma norm shift, experts stacked). Tensors that need no
 * change are written straight from the source map, never copied. */
#ifndef MEMRA_MODEL_CONVERT_H
#define MEMRA_MODEL_CONVERT_H

#include <stdint.h>

#include "core/err.h"
#include "format/dtype.h"
#include "model/checkpoint.h"

typedef struct {
    dtype outtype;         /* DT_F32/F16/BF16, or DT_INVALID to keep the source's */
    int n_threads;         /* <= 0: all cores */
    uint64_t shard_bytes;  /* HF output: largest shard, 0 = one file */
    const char *tokenizer_dir; /* random: HF tokenizer files to carry, or NULL */
} convert_opts;

/* Whether a destination path names a GGUF file (else an HF dir). */
int convert_dst_is_gguf(const char *dst);
int convert_checkpoint(const checkpoint *src, const char *dst, const convert_opts *o,
                       memra_err *err);
/* A random-weight checkpoint of the HF config at config_path. Matrices are
 * normal(0, 0.02), norms 1 (gemma3: 0, its norms scale by 1 + w), biases 0;
 * every tensor has its own stream from (seed, name), so the bytes do not
 * depend on the thread count. */
int convert_random(const char *config_path, uint64_t seed, const char *dst,
                   const convert_opts *o, memra_err *err);
/* A GGUF with only the tokenizer of an HF dir. */
int convert_vocab_only(const char *hf_dir, const char *dst, memra_err *err);

#endif
