/* API keys (lib/serve/serve_auth.c): the constant-time comparison, one
 * key, a key file with tenants and comments, its reload when replaced, and
 * a broken replacement keeping the keys it had. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve/serve_auth.h"
#include "test.h"

static void test_ct_equal(void)
{
    CHECK(serve_ct_equal("abc", 3, "abc", 3));
    CHECK(!serve_ct_equal("abc", 3, "abd", 3));
    CHECK(!serve_ct_equal("abc", 3, "xbc", 3));
    CHECK(!serve_ct_equal("ab", 2, "abc", 3));   /* a prefix is not the key */
    CHECK(!serve_ct_equal("abcd", 4, "abc", 3)); /* nor a longer string */
    CHECK(!serve_ct_equal("", 0, "abc", 3));
    CHECK(!serve_ct_equal("abc", 3, "", 0));
    CHECK(serve_ct_equal("", 0, "", 0));
    /* lengths alone decide nothing: same length, differing only at the end */
    char a[256], b[256];
    memset(a, 'k', sizeof a);
    memcpy(b, a, sizeof b);
    b[255] = 'x';
    CHECK(!serve_ct_equal(a, 256, b, 256));
    CHECK(serve_ct_equal(a, 256, a, 256));
}

static void test_one_key(void)
{
    memra_err err;
    serve_auth *a;
    char tenant[64];
    CHECK(serve_auth_new(NULL, NULL, &a, &err) == 0);
    CHECK(!serve_auth_enabled(a));
    CHECK(serve_auth_check(a, NULL, tenant, sizeof tenant) == 1); /* no auth: all pass */
    serve_auth_free(a);

    CHECK(serve_auth_new("sk-123", NULL, &a, &err) == 0);
    CHECK(serve_auth_enabled(a));
    CHECK(serve_auth_check(a, "sk-123", tenant, sizeof tenant) == 1 && tenant[0] == '\0');
    CHECK(serve_auth_check(a, "sk-12", tenant, sizeof tenant) == 0);
    CHECK(serve_auth_check(a, "sk-1234", tenant, sizeof tenant) == 0);
    CHECK(serve_auth_check(a, "", tenant, sizeof tenant) == 0);
    CHECK(serve_auth_check(a, NULL, tenant, sizeof tenant) == 0);
    serve_auth_free(a);

    CHECK(serve_auth_new("", NULL, &a, &err) == -1 && strstr(err.msg, "empty"));
    CHECK(serve_auth_new("k", "/nonexistent", &a, &err) == -1 && strstr(err.msg, "not both"));
}

static void write_file(const char *path, const char *text)
{
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.new", path);
    FILE *f = fopen(tmp, "w");
    CHECK(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    CHECK(rename(tmp, path) == 0); /* replaced as a whole, as the docs advise */
}

static void test_key_file(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/test_serve_auth.%d.keys", test_tmp_dir(), (int)getpid());
    write_file(path, "# team keys\n\n  sk-alpha   team-a  \nsk-beta\n\t# indented comment\n"
                     "sk-gamma team-c\r\n");
    memra_err err;
    serve_auth *a;
    char tenant[64];
    CHECK_MSG(serve_auth_new(NULL, path, &a, &err) == 0, "%s", err.msg);
    CHECK(serve_auth_check(a, "sk-alpha", tenant, sizeof tenant) == 1 &&
          !strcmp(tenant, "team-a"));
    CHECK(serve_auth_check(a, "sk-beta", tenant, sizeof tenant) == 1 && tenant[0] == '\0');
    CHECK(serve_auth_check(a, "sk-gamma", tenant, sizeof tenant) == 1 &&
          !strcmp(tenant, "team-c"));
    CHECK(serve_auth_check(a, "# team keys", tenant, sizeof tenant) == 0);
    CHECK(serve_auth_check(a, "team-a", tenant, sizeof tenant) == 0);
    CHECK(serve_auth_check(a, "sk-delta", tenant, sizeof tenant) == 0);

    /* replaced: the new keys count after at most a second */
    write_file(path, "sk-delta team-d\n");
    usleep(1100 * 1000);
    CHECK(serve_auth_check(a, "sk-delta", tenant, sizeof tenant) == 1 &&
          !strcmp(tenant, "team-d"));
    CHECK(serve_auth_check(a, "sk-alpha", tenant, sizeof tenant) == 0);

    /* replaced by a file that does not parse: the keys stay */
    write_file(path, "sk-eps one two\n");
    usleep(1100 * 1000);
    CHECK(serve_auth_check(a, "sk-delta", tenant, sizeof tenant) == 1);
    CHECK(serve_auth_check(a, "sk-eps", tenant, sizeof tenant) == 0);
    serve_auth_free(a);

    /* a bad file at start is an error naming the line */
    CHECK(serve_auth_new(NULL, path, &a, &err) == -1);
    CHECK_MSG(strstr(err.msg, "line 1") && strstr(err.msg, "key tenant"), "%s", err.msg);
    unlink(path);
    CHECK(serve_auth_new(NULL, path, &a, &err) == -1 && strstr(err.msg, path));
}

TEST_MAIN(TEST_CASE(test_ct_equal), TEST_CASE(test_one_key), TEST_CASE(test_key_file))
