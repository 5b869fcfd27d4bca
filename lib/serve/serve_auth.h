/* API keys: `Authorization: Bearer KEY` or `x-api-key: KEY`.
 *
 * Keys come from one --api-key or from a key file (one key per line, or
 * "key tenant"; blank lines and lines starting with # are skipped). The
 * file is checked at most once a second and reloaded when its inode, size
 * or modification time changes; a file that stops parsing keeps the keys
 * it had (and says so in the log). Every key is compared in constant time
 * (no early exit on the first differing byte, nor on the first match), so
 * response timing does not reveal how much of a key was right. */
#ifndef MEMRA_SERVE_SERVE_AUTH_H
#define MEMRA_SERVE_SERVE_AUTH_H

#include <stddef.h>

#include "core/err.h"

typedef struct serve_auth serve_auth;

/* key and file may both be NULL (no auth); not both set. */
int serve_auth_new(const char *key, const char *file, serve_auth **out, memra_err *err);
void serve_auth_free(serve_auth *a);
int serve_auth_enabled(const serve_auth *a);
/* 1 when `presented` (NULL: none given) is a valid key; the key's tenant
 * ("" when none) is copied to tenant. */
int serve_auth_check(serve_auth *a, const char *presented, char *tenant, size_t tenant_cap);
/* Equal in time that depends only on the lengths. */
int serve_ct_equal(const char *a, size_t na, const char *b, size_t nb);

#endif
