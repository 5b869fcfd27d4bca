/* Base64 (RFC 4648, the standard alphabet with '=' padding): the encoding
 * OpenAI's embeddings API uses for encoding_format "base64" (a vector's
 * little-endian float32 bytes). Encoding only: nothing here reads it. */
#ifndef MEMRA_CORE_BASE64_H
#define MEMRA_CORE_BASE64_H

#include <stddef.h>

#include "core/strbuf.h"

/* Characters the encoding of n bytes takes (no terminator). */
size_t base64_encoded_len(size_t n);
/* Appends the encoding of data[0..n) to out. */
void base64_encode(strbuf *out, const void *data, size_t n);

#endif
