#include "core/arena.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

struct arena_chunk {
    arena_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void arena_init(arena *a, size_t first_chunk_size)
{
    a->head = NULL;
    a->chunk_size = first_chunk_size ? first_chunk_size : 4096;
}

void *arena_alloc(arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = a->chunk_size;
        while (cap < n)
            cap *= 2;
        arena_chunk *c = xmalloc(sizeof *c + cap);
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        if (a->chunk_size < (1u << 24))
            a->chunk_size *= 2;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strndup(arena *a, const char *s, size_t n)
{
    char *p = arena_alloc(a, n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *arena_strdup(arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

void arena_free(arena *a)
{
    arena_chunk *c = a->head;
    while (c) {
        arena_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
}
