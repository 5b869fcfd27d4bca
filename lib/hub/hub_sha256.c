/* The plain SHA256_* calls are deprecated in OpenSSL 3 in favour of EVP,
 * which heap-allocates a context per hash; a fixed struct suits a streamed
 * download better and the functions remain supported. */
#define OPENSSL_SUPPRESS_DEPRECATED
#include "hub/hub_sha256.h"

#include <openssl/sha.h>
#include <stdio.h>

#include "core/check.h"

_Static_assert(sizeof(SHA256_CTX) <= sizeof(((hub_sha256 *)0)->ctx),
               "hub_sha256 too small for SHA256_CTX");

void hub_sha256_init(hub_sha256 *s) { SHA256_Init((SHA256_CTX *)s->ctx); }

void hub_sha256_update(hub_sha256 *s, const void *data, size_t n)
{
    SHA256_Update((SHA256_CTX *)s->ctx, data, n);
}

void hub_sha256_hex(hub_sha256 *s, char hex[65])
{
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256_Final(digest, (SHA256_CTX *)s->ctx);
    for (int i = 0; i < SHA256_DIGEST_LENGTH; i++)
        snprintf(hex + 2 * i, 3, "%02x", digest[i]);
}
