#include "hub/hub_cache.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/json.h"
#include "core/log.h"
#include "core/mapfile.h"
#include "core/strbuf.h"

char *hub_strf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    MEMRA_ASSERT(n >= 0);
    char *s = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

char *hub_repo_dir(const hub_config *cfg, const hub_spec *spec)
{
    return hub_strf("%s/models--%s--%s", cfg->cache_dir, spec->owner, spec->repo);
}

int hub_path_exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0;
}

int hub_mkdirs(const char *path, memra_err *err)
{
    char *p = xstrdup(path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char saved = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            memra_fail(err, "%s: cannot create directory: %s", p, strerror(e));
            free(p);
            return -1;
        }
        *s = saved;
        if (saved == '\0')
            break;
    }
    struct stat st;
    int ok = stat(p, &st) == 0 && S_ISDIR(st.st_mode);
    if (!ok)
        memra_fail(err, "%s: exists and is not a directory", p);
    free(p);
    return ok ? 0 : -1;
}

int hub_valid_commit(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > HUB_COMMIT_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]))
            return 0;
    return 1;
}

int hub_valid_etag(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > HUB_ETAG_MAX || s[0] == '.')
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '.' && s[i] != '_' && s[i] != '-')
            return 0;
    return 1;
}

int hub_read_ref(const char *repo_dir, const char *ref, char commit[HUB_COMMIT_MAX + 1],
                 memra_err *err)
{
    char *path = hub_strf("%s/refs/%s", repo_dir, ref);
    commit[0] = '\0';
    if (!hub_path_exists(path)) {
        free(path);
        return 0;
    }
    char *buf;
    size_t len;
    if (read_small_file(path, 4096, &buf, &len, err) != 0) {
        free(path);
        return -1;
    }
    /* huggingface_hub writes the bare hash; tolerate a trailing newline
     * from hand edits. */
    while (len > 0 && isspace((unsigned char)buf[len - 1]))
        buf[--len] = '\0';
    int ok = hub_valid_commit(buf);
    if (ok)
        memcpy(commit, buf, len + 1);
    else
        memra_fail(err, "%s: does not hold a commit hash", path);
    free(buf);
    free(path);
    return ok ? 1 : -1;
}

int hub_write_ref(const char *repo_dir, const char *ref, const char *commit, memra_err *err)
{
    char *dir = hub_strf("%s/refs", repo_dir);
    char *path = hub_strf("%s/%s", dir, ref);
    int rc = hub_mkdirs(dir, err);
    if (rc == 0) {
        char old[HUB_COMMIT_MAX + 1];
        memra_err ignored;
        /* Rewrite only on change: a read-only shared cache stays usable. */
        if (hub_read_ref(repo_dir, ref, old, &ignored) != 1 || strcmp(old, commit) != 0)
            rc = write_file_atomic(path, commit, strlen(commit), err);
    }
    free(dir);
    free(path);
    return rc;
}

int hub_link_snapshot(const char *repo_dir, const char *commit, const char *file,
                      const char *etag, memra_err *err)
{
    char *link = hub_strf("%s/snapshots/%s/%s", repo_dir, commit, file);
    char *parent = xstrdup(link);
    *strrchr(parent, '/') = '\0';
    strbuf target;
    sb_init(&target);
    sb_puts(&target, "../../");
    for (const char *p = file; *p; p++)
        if (*p == '/')
            sb_puts(&target, "../");
    sb_printf(&target, "blobs/%s", etag);
    char *tmp = hub_strf("%s.tmp%ld", link, (long)getpid());
    int rc = hub_mkdirs(parent, err);
    if (rc == 0) {
        unlink(tmp);
        /* Made aside and renamed over, so a reader never sees no link. */
        if (symlink(sb_str(&target), tmp) != 0 || rename(tmp, link) != 0) {
            int e = errno;
            unlink(tmp);
            rc = memra_fail(err, "%s: cannot create the snapshot link: %s", link, strerror(e));
        }
    }
    free(tmp);
    sb_free(&target);
    free(parent);
    free(link);
    return rc;
}

int hub_lock(const hub_config *cfg, const hub_spec *spec, const char *etag, int *fd,
             memra_err *err)
{
    *fd = -1;
    char *dir = hub_strf("%s/.locks/models--%s--%s", cfg->cache_dir, spec->owner, spec->repo);
    char *path = hub_strf("%s/%s.lock", dir, etag);
    int rc = hub_mkdirs(dir, err);
    if (rc == 0) {
        *fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (*fd < 0) {
            rc = memra_fail(err, "%s: cannot open the lock file: %s", path, strerror(errno));
        } else if (flock(*fd, LOCK_EX | LOCK_NB) != 0) {
            log_info("%s: another process is downloading this blob; waiting", path);
            while (flock(*fd, LOCK_EX) != 0) {
                if (errno != EINTR) {
                    rc = memra_fail(err, "%s: cannot lock: %s", path, strerror(errno));
                    close(*fd);
                    *fd = -1;
                    break;
                }
            }
        }
    }
    free(dir);
    free(path);
    return rc;
}

void hub_unlock(int fd)
{
    if (fd >= 0)
        close(fd); /* closing drops the flock */
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void hub_free_names(char **names, int count)
{
    for (int i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

int hub_index_shards(const char *index_path, char ***names, int *count, memra_err *err)
{
    *names = NULL;
    *count = 0;
    json_t *root = json_load_path(index_path, 64u << 20, err);
    if (!root)
        return -1;
    json_t *map = json_object_get(root, "weight_map");
    if (!json_is_object(map)) {
        json_decref(root);
        return memra_fail(err, "%s: missing object \"weight_map\"", index_path);
    }
    size_t n = json_object_size(map), k = 0;
    char **list = xcalloc(n ? n : 1, sizeof *list);
    const char *tensor;
    json_t *v;
    int rc = 0;
    json_object_foreach(map, tensor, v) {
        if (!json_is_string(v)) {
            rc = memra_fail(err, "%s: weight_map[\"%s\"] is not a file name", index_path, tensor);
            break;
        }
        if (hub_check_filename(json_string_value(v), index_path, err) != 0) {
            rc = -1;
            break;
        }
        list[k++] = xstrdup(json_string_value(v));
    }
    json_decref(root);
    if (rc != 0) {
        hub_free_names(list, (int)k);
        return -1;
    }
    qsort(list, k, sizeof *list, cmp_str);
    size_t u = 0;
    for (size_t i = 0; i < k; i++) {
        if (u > 0 && strcmp(list[u - 1], list[i]) == 0)
            free(list[i]);
        else
            list[u++] = list[i];
    }
    if (u == 0) {
        free(list);
        return memra_fail(err, "%s: weight_map names no files", index_path);
    }
    *names = list;
    *count = (int)u;
    return 0;
}

static int has_top_level_safetensors(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 12 && strcmp(e->d_name + n - 12, ".safetensors") == 0) {
            char *p = hub_strf("%s/%s", dir, e->d_name);
            found = hub_path_exists(p);
            free(p);
        }
    }
    closedir(d);
    return found;
}

/* Whole-repo downloads fetch the index before any shard, so a snapshot that
 * holds a shard but no index is a single-file checkpoint, never a cut-off
 * sharded one. */
int hub_snapshot_complete(const char *snap_dir, memra_err *err)
{
    char *config = hub_strf("%s/config.json", snap_dir);
    char *index = hub_strf("%s/model.safetensors.index.json", snap_dir);
    int result;
    if (!hub_path_exists(config)) {
        result = 0;
    } else if (hub_path_exists(index)) {
        char **names;
        int count;
        if (hub_index_shards(index, &names, &count, err) != 0) {
            result = -1;
        } else {
            result = 1;
            for (int i = 0; i < count && result; i++) {
                char *p = hub_strf("%s/%s", snap_dir, names[i]);
                result = hub_path_exists(p);
                free(p);
            }
            hub_free_names(names, count);
        }
    } else {
        result = has_top_level_safetensors(snap_dir);
    }
    free(config);
    free(index);
    return result;
}
