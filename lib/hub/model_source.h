/* What every memra program accepts where a model goes: a GGUF file, an HF
 * checkpoint dir, or `hf:owner/repo[:file]` (fetched into the Hugging Face
 * cache, see hub.h). */
#ifndef MEMRA_HUB_MODEL_SOURCE_H
#define MEMRA_HUB_MODEL_SOURCE_H

#include "core/err.h"

/* *out_path (heap, the caller frees) is a local file or directory: the
 * spec itself when it is an existing path, or the cached file / snapshot
 * dir of an hf: spec. A missing path fails with
 * "x.gguf: no such file or directory". */
int model_source_resolve(const char *spec, char **out_path, memra_err *err);

#endif
