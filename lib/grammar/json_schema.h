/* JSON Schema -> grammar, for structured output (response_format
 * json_schema, tool arguments) and the generic json_object mode.
 *
 * The schema is compiled to GBNF text (jsch_to_gbnf, useful to read when a
 * schema surprises) and parsed by gram_parse_gbnf. What a keyword can't be
 * enforced for is refused with the keyword and its schema path
 * ("schema #/properties/age: keyword 'minimum' is not supported"), never
 * dropped; annotations (title, description, default, examples ...) are
 * ignored. docs/STRUCTURED-OUTPUT.md has the coverage table and the
 * whitespace policy. */
#ifndef MEMRA_GRAMMAR_JSON_SCHEMA_H
#define MEMRA_GRAMMAR_JSON_SCHEMA_H

#include <jansson.h>
#include <stddef.h>

#include "core/err.h"
#include "grammar/grammar.h"

/* GBNF for a schema (malloc'ed, NUL-terminated; the caller frees). */
char *jsch_to_gbnf(const json_t *schema, memra_err *err);
gram_grammar *jsch_compile(const json_t *schema, memra_err *err);
/* From schema text. */
gram_grammar *jsch_compile_text(const char *text, size_t len, memra_err *err);
/* Any JSON object (response_format json_object): GBNF and grammar. */
char *jsch_json_object_gbnf(void);
gram_grammar *jsch_json_object(memra_err *err);

#endif
