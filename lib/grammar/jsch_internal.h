/* Pieces of the JSON Schema compiler shared between its files. */
#ifndef MEMRA_GRAMMAR_JSCH_INTERNAL_H
#define MEMRA_GRAMMAR_JSCH_INTERNAL_H

#include "core/err.h"
#include "core/strbuf.h"

/* Appends a GBNF expression for the JSON text of a string's contents that
 * matches the regular expression `re` (the rule `char` is one JSON string
 * character). Errors name the schema path, the pattern and the offset. */
int jsch_pattern(const char *re, const char *path, strbuf *out, memra_err *err);

/* Appends a GBNF expression for the integers in [lo, hi] (a missing bound:
 * the integer rule's own, 16 digits). lo <= hi. */
#include <stdint.h>
void jsch_int_range(int has_lo, int64_t lo, int has_hi, int64_t hi, strbuf *out);

#endif
