/* Rendering a chat request through a model's chat template, with the
 * variables Hugging Face's apply_chat_template passes:
 *   messages               the conversation: {role, content} objects whose
 *                          content is a string or an array of parts
 *                          ([{"type":"text","text":...}]); assistant
 *                          tool_calls (function.arguments as given: an
 *                          object stays an object), tool results (role
 *                          "tool"), reasoning_content;
 *   tools, documents       as given, or None when NULL;
 *   add_generation_prompt  true/false;
 *   bos_token, eos_token   the special-token strings (NULL: undefined, as
 *                          for a tokenizer that has none);
 *   every key of extra_vars (chat_template_kwargs: enable_thinking,
 *                          reasoning_effort, ...), which may override
 *                          bos_token/eos_token but not the four above.
 * Errors: one line, "template line N: ..." for template failures,
 * raise_exception's message included. */
#ifndef MEMRA_JINJA_CHAT_TEMPLATE_H
#define MEMRA_JINJA_CHAT_TEMPLATE_H

#include <jansson.h>

#include "core/err.h"
#include "jinja/jinja.h"

int chat_template_render(const char *tmpl, const json_t *messages, const json_t *tools,
                         const json_t *documents, int add_generation_prompt,
                         const json_t *extra_vars, const char *bos_token, const char *eos_token,
                         char **out, memra_err *err);

/* The same with a template parsed once (jinja_parse) and rendered for
 * many requests; a parsed template may be rendered from several threads. */
int chat_template_render_parsed(const jinja_template *t, const json_t *messages,
                                const json_t *tools, const json_t *documents,
                                int add_generation_prompt, const json_t *extra_vars,
                                const char *bos_token, const char *eos_token, char **out,
                                memra_err *err);

#endif
