/* memra-trim-ranks' prompts: the built-in pack and the --prompts sources
 * (a text file, a directory of them, a .jsonl). A prompt is plain text or
 * a chat (its messages, rendered through the model's template). */
#ifndef MEMRA_TRIM_RANKS_PROMPT_PACK_H
#define MEMRA_TRIM_RANKS_PROMPT_PACK_H

#include <jansson.h>
#include <stddef.h>

#include "core/err.h"

typedef struct {
    char *text;        /* plain text; NULL for a chat */
    json_t *messages;  /* a chat's messages (owned); NULL for plain text */
    char *where;       /* "builtin:code/3", "FILE", "FILE:LINE" */
} trim_prompt;

typedef struct {
    trim_prompt *p;
    size_t n;
} trim_prompts;

/* The built-in mixed pack: code, chat and prose, in that order. */
void prompt_pack_builtin(trim_prompts *out);
/* FILE (one prompt: the whole file), DIR (each regular file in name
 * order; *.jsonl files as below) or FILE.jsonl (one JSON object a line:
 * {"prompt": TEXT}, {"text": TEXT} or {"messages": [...]}; blank lines
 * skipped). Errors name the file and line. */
int prompt_pack_load(const char *path, trim_prompts *out, memra_err *err);
void prompt_pack_free(trim_prompts *ps);

#endif
