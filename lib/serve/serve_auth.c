#include "serve/serve_auth.h"

#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/mapfile.h"
#include "serve/serve_req.h"

typedef struct {
    char *key, *tenant;
} auth_key;

struct serve_auth {
    int enabled;
    char *file;
    pthread_rwlock_t lock;
    auth_key *keys;
    size_t n_keys;
    /* file state, under lock (write) */
    pthread_mutex_t stat_mu;
    double last_check;
    struct stat st;
};

int serve_ct_equal(const char *a, size_t na, const char *b, size_t nb)
{
    /* Walk the presented string's whole length whatever happens. */
    unsigned diff = (unsigned)(na ^ nb);
    for (size_t i = 0; i < na; i++)
        diff |= (unsigned char)a[i] ^ (unsigned char)(nb ? b[i % nb] : 0);
    return diff == 0;
}

static void free_keys(auth_key *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(k[i].key);
        free(k[i].tenant);
    }
    free(k);
}

/* Parse the key file; one line names a bad entry. */
static int load_file(const char *path, auth_key **out, size_t *n_out, struct stat *st,
                     memra_err *err)
{
    char *buf;
    size_t len;
    if (stat(path, st) != 0)
        return memra_fail(err, "%s: cannot stat the key file", path);
    if (read_small_file(path, 16u << 20, &buf, &len, err) != 0)
        return -1;
    auth_key *keys = NULL;
    size_t n = 0, cap = 0;
    int line_no = 0;
    char *save = NULL;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        line_no++;
        size_t l = strlen(line);
        while (l && isspace((unsigned char)line[l - 1]))
            line[--l] = '\0';
        while (*line && isspace((unsigned char)*line))
            line++;
        if (!*line || *line == '#')
            continue;
        char *sp = line;
        while (*sp && !isspace((unsigned char)*sp))
            sp++;
        char *tenant = sp;
        if (*sp) {
            *sp = '\0';
            tenant = sp + 1;
            while (*tenant && isspace((unsigned char)*tenant))
                tenant++;
            for (char *q = tenant; *q; q++)
                if (isspace((unsigned char)*q)) {
                    free_keys(keys, n);
                    free(buf);
                    return memra_fail(err, "%s: line %d: want \"key\" or \"key tenant\"", path,
                                      line_no);
                }
        }
        if (n == cap)
            keys = xrealloc(keys, (cap = cap ? cap * 2 : 8) * sizeof *keys);
        keys[n].key = xstrdup(line);
        keys[n].tenant = xstrdup(tenant);
        n++;
    }
    free(buf);
    *out = keys;
    *n_out = n;
    return 0;
}

int serve_auth_new(const char *key, const char *file, serve_auth **out, memra_err *err)
{
    *out = NULL;
    if (key && file)
        return memra_fail(err, "give an API key or a key file, not both");
    serve_auth *a = xcalloc(1, sizeof *a);
    pthread_rwlock_init(&a->lock, NULL);
    pthread_mutex_init(&a->stat_mu, NULL);
    if (key) {
        if (!*key) {
            serve_auth_free(a);
            return memra_fail(err, "the API key is empty");
        }
        a->enabled = 1;
        a->keys = xcalloc(1, sizeof *a->keys);
        a->keys[0].key = xstrdup(key);
        a->keys[0].tenant = xstrdup("");
        a->n_keys = 1;
    } else if (file) {
        a->enabled = 1;
        a->file = xstrdup(file);
        if (load_file(file, &a->keys, &a->n_keys, &a->st, err) != 0) {
            serve_auth_free(a);
            return -1;
        }
        a->last_check = clock_now_s();
    }
    *out = a;
    return 0;
}

void serve_auth_free(serve_auth *a)
{
    if (!a)
        return;
    free_keys(a->keys, a->n_keys);
    free(a->file);
    pthread_rwlock_destroy(&a->lock);
    pthread_mutex_destroy(&a->stat_mu);
    free(a);
}

int serve_auth_enabled(const serve_auth *a) { return a && a->enabled; }

/* Reload the key file when it changed (checked at most once a second). */
static void maybe_reload(serve_auth *a)
{
    pthread_mutex_lock(&a->stat_mu);
    double now = clock_now_s();
    if (now - a->last_check < 1.0) {
        pthread_mutex_unlock(&a->stat_mu);
        return;
    }
    a->last_check = now;
    struct stat st;
    if (stat(a->file, &st) == 0 && st.st_ino == a->st.st_ino && st.st_size == a->st.st_size &&
        st.st_mtim.tv_sec == a->st.st_mtim.tv_sec && st.st_mtim.tv_nsec == a->st.st_mtim.tv_nsec) {
        pthread_mutex_unlock(&a->stat_mu);
        return;
    }
    auth_key *keys;
    size_t n;
    memra_err err;
    if (load_file(a->file, &keys, &n, &st, &err) != 0) {
        log_warn("keeping the previous API keys: %s", err.msg);
        pthread_mutex_unlock(&a->stat_mu);
        return;
    }
    a->st = st;
    pthread_rwlock_wrlock(&a->lock);
    auth_key *old = a->keys;
    size_t n_old = a->n_keys;
    a->keys = keys;
    a->n_keys = n;
    pthread_rwlock_unlock(&a->lock);
    free_keys(old, n_old);
    log_info("reloaded %zu API keys from %s", n, a->file);
    pthread_mutex_unlock(&a->stat_mu);
}

int serve_auth_check(serve_auth *a, const char *presented, char *tenant, size_t tenant_cap)
{
    if (tenant_cap)
        tenant[0] = '\0';
    if (!serve_auth_enabled(a))
        return 1;
    if (a->file)
        maybe_reload(a);
    if (!presented)
        return 0;
    size_t np = strlen(presented);
    int ok = 0;
    pthread_rwlock_rdlock(&a->lock);
    for (size_t i = 0; i < a->n_keys; i++) {
        int eq = serve_ct_equal(presented, np, a->keys[i].key, strlen(a->keys[i].key));
        if (eq && !ok && tenant_cap)
            snprintf(tenant, tenant_cap, "%s", a->keys[i].tenant);
        ok |= eq;
    }
    pthread_rwlock_unlock(&a->lock);
    return ok;
}
