/* UTF-8 well-formedness, in one place: the file parsers check keys and
 * names with it, the tokenizer and the template engine check text. Well
 * formed means the Unicode definition: no overlong forms, no surrogates,
 * nothing past U+10FFFF, no cut sequences. */
#ifndef MEMRA_CORE_UTF8_H
#define MEMRA_CORE_UTF8_H

#include <stddef.h>

/* The offset of the first byte that is not part of a well-formed sequence,
 * or n when all of s[0..n) is well formed. */
size_t utf8_invalid_at(const void *s, size_t n);
static inline int utf8_valid(const void *s, size_t n) { return utf8_invalid_at(s, n) == n; }

#endif
