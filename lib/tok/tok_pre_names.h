/* GGUF pre-tokenizer names -> the regex table of tok/hf_tokenizer_pre.c
 * (reached through tok/hf_tokenizer_internal.h, unchanged). */
#ifndef MEMRA_TOK_PRE_NAMES_H
#define MEMRA_TOK_PRE_NAMES_H

#include "tok/hf_tokenizer_internal.h"

/* The regexes llama.cpp splits with for tokenizer.ggml.pre `name` (NULL or
 * "default": its default list); NULL when the name is unknown. */
const hf_pre_type *tok_pre_for_gguf(const char *name);
/* Whether llama.cpp adds BOS for this pre type when the file does not say. */
int tok_pre_adds_bos(const char *name);

#endif
