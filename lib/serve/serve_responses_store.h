/* What POST /v1/responses keeps for previous_response_id: each stored
 * response's conversation (the items it was given, then the items it
 * produced) and its response object, in memory only, per scope (the API
 * key's tenant, else the key: one client cannot read another's).
 *
 * Bounded so a long-running server cannot grow without end: an entry
 * lives RSTORE_TTL seconds, and past RSTORE_MAX_ENTRIES entries or
 * RSTORE_MAX_BYTES of JSON the oldest go first. A restart forgets all. */
#ifndef MEMRA_SERVE_SERVE_RESPONSES_STORE_H
#define MEMRA_SERVE_SERVE_RESPONSES_STORE_H

#include <jansson.h>
#include <stdint.h>

#define RSTORE_TTL (60 * 60)
#define RSTORE_MAX_ENTRIES 1024
#define RSTORE_MAX_BYTES ((size_t)64 << 20)

/* The scope of a request: from the tenant ("" when the key names none)
 * and the presented key (NULL when none). */
uint64_t rstore_scope(const char *tenant, const char *key);
/* Keeps items (the conversation, a JSON array) and the response object
 * under id; takes both references. */
void rstore_put(uint64_t scope, const char *id, json_t *items, json_t *response);
/* New references to what id holds in this scope (either pointer may be
 * NULL); 0, or -1 when it is not there (never stored, expired, evicted,
 * deleted, or another scope's). */
int rstore_get(uint64_t scope, const char *id, json_t **items, json_t **response);
/* 0 when it was there and is gone now, else -1. */
int rstore_delete(uint64_t scope, const char *id);

#endif
