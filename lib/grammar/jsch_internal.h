/* Pieces of the JSON Schema compiler shared between its files. */
#ifndef MEMRA_GRAMMAR_JSCH_INTERNAL_H
#define MEMRA_GRAMMAR_JSCH_INTERNAL_H

#include "core/err.h"
#include "core/strbuf.h"

/* Appends a GBNF expression for the JSON text of a string's contents that
 * matches the regular expression `re` (the rule `char` is one JSON string
 * character). Errors name the schema path, the pattern and the offset. */
int jsch_pattern(const char *re, const char *path, strbuf *out, memra_err *err);

#endif
