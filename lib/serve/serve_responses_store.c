/* The in-memory store behind previous_response_id (serve_responses_store.h
 * says what it bounds). A list in insertion order under one mutex: lookups
 * are rare (one per request that names a previous response) and the list
 * is capped, so a linear scan costs less than it would to maintain an index. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/clock.h"
#include "serve/serve_responses_store.h"

typedef struct entry {
    struct entry *next;
    uint64_t scope;
    char *id;
    json_t *items, *response;
    size_t bytes;
    double born;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static entry *head, *tail; /* oldest first */
static size_t n_entries, n_bytes;

/* FNV-1a over a tag and the text, so a tenant never shares a scope with a
 * key spelled the same. The key itself is not kept. */
static uint64_t fnv(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

uint64_t rstore_scope(const char *tenant, const char *key)
{
    uint64_t h = 0xcbf29ce484222325ull;
    if (tenant && tenant[0])
        return fnv(fnv(h, "tenant:"), tenant);
    return key ? fnv(fnv(h, "key:"), key) : fnv(h, "anonymous");
}

static size_t json_bytes(const json_t *j)
{
    char *s = json_dumps(j, JSON_COMPACT);
    size_t n = s ? strlen(s) : 0;
    free(s);
    return n;
}

static void entry_free(entry *e)
{
    json_decref(e->items);
    json_decref(e->response);
    free(e->id);
    free(e);
}

static void drop_head(void)
{
    entry *e = head;
    head = e->next;
    if (!head)
        tail = NULL;
    n_entries--;
    n_bytes -= e->bytes;
    entry_free(e);
}

/* Entries are in birth order, so the expired ones are at the head. */
static void expire(double t)
{
    while (head && t - head->born > RSTORE_TTL)
        drop_head();
}

void rstore_put(uint64_t scope, const char *id, json_t *items, json_t *response)
{
    entry *e = xcalloc(1, sizeof *e);
    e->scope = scope;
    e->id = xstrdup(id);
    e->items = items;
    e->response = response;
    e->bytes = json_bytes(items) + json_bytes(response) + sizeof *e;
    e->born = clock_now_s();
    pthread_mutex_lock(&lock);
    expire(e->born);
    if (tail)
        tail->next = e;
    else
        head = e;
    tail = e;
    n_entries++;
    n_bytes += e->bytes;
    /* one entry bigger than the whole budget is kept alone rather than not at all */
    while (head != tail && (n_entries > RSTORE_MAX_ENTRIES || n_bytes > RSTORE_MAX_BYTES))
        drop_head();
    pthread_mutex_unlock(&lock);
}

int rstore_get(uint64_t scope, const char *id, json_t **items, json_t **response)
{
    int rc = -1;
    pthread_mutex_lock(&lock);
    expire(clock_now_s());
    for (entry *e = head; e; e = e->next) {
        if (e->scope == scope && !strcmp(e->id, id)) {
            /* copies: the caller may edit them, the store's stay as they were */
            if (items)
                *items = json_deep_copy(e->items);
            if (response)
                *response = json_deep_copy(e->response);
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

int rstore_delete(uint64_t scope, const char *id)
{
    int rc = -1;
    pthread_mutex_lock(&lock);
    expire(clock_now_s());
    entry *prev = NULL;
    for (entry *e = head; e; prev = e, e = e->next) {
        if (e->scope == scope && !strcmp(e->id, id)) {
            if (prev)
                prev->next = e->next;
            else
                head = e->next;
            if (tail == e)
                tail = prev;
            n_entries--;
            n_bytes -= e->bytes;
            entry_free(e);
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return rc;
}
