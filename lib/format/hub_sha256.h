/* SHA-256 (FIPS 180-4), streamed: the Hub names an LFS file's blob by the
 * sha256 of its bytes, so a download (resumed or not) is checked against
 * its name before it enters the cache. */
#ifndef MEMRA_FORMAT_HUB_SHA256_H
#define MEMRA_FORMAT_HUB_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t total; /* bytes hashed so far */
    uint8_t block[64];
    size_t fill; /* bytes waiting in block */
} hub_sha256;

void hub_sha256_init(hub_sha256 *s);
void hub_sha256_update(hub_sha256 *s, const void *data, size_t n);
/* Finish and write 64 lowercase hex digits and a NUL into hex. */
void hub_sha256_hex(hub_sha256 *s, char hex[65]);

#endif
