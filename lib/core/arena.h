/* A bump allocator for things that live and die together (a parsed header's
 * strings, a request's scratch). Chunks grow geometrically; freeing the
 * arena frees everything at once. */
#ifndef MEMRA_CORE_ARENA_H
#define MEMRA_CORE_ARENA_H

#include <stddef.h>

typedef struct arena_chunk arena_chunk;

typedef struct {
    arena_chunk *head;
    size_t chunk_size;
} arena;

void arena_init(arena *a, size_t first_chunk_size);
/* Zeroed memory aligned to 16 bytes; aborts only when the machine is out of memory. */
void *arena_alloc(arena *a, size_t n);
char *arena_strndup(arena *a, const char *s, size_t n);
char *arena_strdup(arena *a, const char *s);
void arena_free(arena *a);

#endif
