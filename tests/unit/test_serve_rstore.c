/* The Responses store (lib/serve/serve_responses_store.c): what is put is
 * got back as copies, only in its own scope (a tenant, else a key), deleted
 * once, and the oldest entries go when the count cap is passed. */
#include <stdio.h>
#include <string.h>

#include "serve/serve_responses_store.h"
#include "test.h"

static void test_scopes(void)
{
    uint64_t a = rstore_scope("acme", "sk-1"), a2 = rstore_scope("acme", "sk-2");
    uint64_t k1 = rstore_scope("", "sk-1"), k2 = rstore_scope(NULL, "sk-2");
    uint64_t anon = rstore_scope("", NULL);
    CHECK(a == a2);            /* a tenant's keys share its store */
    CHECK(k1 != k2);           /* keys without a tenant do not */
    CHECK(a != k1 && k1 != anon);
    CHECK(rstore_scope("sk-1", NULL) != k1); /* a tenant named like a key is not that key */
}

static void test_put_get_delete(void)
{
    uint64_t s = rstore_scope("t-put", NULL), other = rstore_scope("t-other", NULL);
    rstore_put(s, "resp_1", json_pack("[{s:s}]", "type", "message"), json_pack("{s:s}", "id",
                                                                               "resp_1"));
    json_t *items = NULL, *resp = NULL;
    CHECK(rstore_get(s, "resp_1", &items, &resp) == 0);
    CHECK(json_array_size(items) == 1);
    CHECK(!strcmp(json_string_value(json_object_get(resp, "id")), "resp_1"));
    /* a copy: editing it leaves the store's */
    json_array_clear(items);
    json_decref(items);
    json_decref(resp);
    CHECK(rstore_get(s, "resp_1", &items, NULL) == 0 && json_array_size(items) == 1);
    json_decref(items);
    CHECK(rstore_get(other, "resp_1", NULL, NULL) == -1);
    CHECK(rstore_delete(other, "resp_1") == -1);
    CHECK(rstore_get(s, "resp_2", NULL, NULL) == -1);
    CHECK(rstore_delete(s, "resp_1") == 0);
    CHECK(rstore_delete(s, "resp_1") == -1);
    CHECK(rstore_get(s, "resp_1", NULL, NULL) == -1);
}

static void test_count_cap(void)
{
    uint64_t s = rstore_scope("t-cap", NULL);
    char id[32];
    for (int i = 0; i < RSTORE_MAX_ENTRIES + 10; i++) {
        snprintf(id, sizeof id, "resp_cap%d", i);
        rstore_put(s, id, json_array(), json_object());
    }
    CHECK(rstore_get(s, "resp_cap0", NULL, NULL) == -1); /* the oldest went */
    CHECK(rstore_get(s, "resp_cap9", NULL, NULL) == -1);
    CHECK(rstore_get(s, "resp_cap10", NULL, NULL) == 0);
    snprintf(id, sizeof id, "resp_cap%d", RSTORE_MAX_ENTRIES + 9);
    CHECK(rstore_get(s, id, NULL, NULL) == 0);
}

TEST_MAIN(TEST_CASE(test_scopes), TEST_CASE(test_put_get_delete), TEST_CASE(test_count_cap))
