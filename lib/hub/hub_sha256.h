/* SHA-256, streamed: the Hub names an LFS file's blob by the sha256 of its
 * bytes, so a download (resumed or not) is checked against its name before
 * it enters the cache. The hashing is OpenSSL's libcrypto (already there
 * for libcurl); this wrapper only keeps its types out of the callers. */
#ifndef MEMRA_HUB_HUB_SHA256_H
#define MEMRA_HUB_HUB_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    /* OpenSSL's SHA256_CTX, held opaquely and stack-allocatable: 8 state
     * words, 2 length words, a 64-byte block, num and md_len. */
    _Alignas(8) unsigned char ctx[128];
} hub_sha256;

void hub_sha256_init(hub_sha256 *s);
void hub_sha256_update(hub_sha256 *s, const void *data, size_t n);
/* Finish and write 64 lowercase hex digits and a NUL into hex. */
void hub_sha256_hex(hub_sha256 *s, char hex[65]);

#endif
