/* Where a checkpoint keeps its chat template: the GGUF key
 * tokenizer.chat_template, or in an HF dir chat_template.jinja, else
 * tokenizer_config.json's "chat_template" (a string, or a list of
 * {name, template} whose "default" entry is used). */
#ifndef MEMRA_MODEL_CHAT_SOURCE_H
#define MEMRA_MODEL_CHAT_SOURCE_H

#include "core/err.h"
#include "model/checkpoint.h"

/* *out is malloc'ed. A checkpoint without a template is an error that says
 * so (and suggests --chat-template). */
int chat_template_of(const checkpoint *c, char **out, memra_err *err);

#endif
