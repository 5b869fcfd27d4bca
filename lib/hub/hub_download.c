/* One file from the Hub into the cache: metadata, blob download with
 * resume, verification, snapshot link. */
#include "hub/hub.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "hub/hub_cache.h"
#include "hub/hub_http.h"
#include "hub/hub_sha256.h"

#define MAX_ATTEMPTS 5

/* Percent-encode a repo file path for the resolve URL, keeping '/'. */
static void url_path_encode(strbuf *sb, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        unsigned char c = *p;
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
            sb_putc(sb, (char)c);
        } else {
            sb_putc(sb, '%');
            sb_putc(sb, hex[c >> 4]);
            sb_putc(sb, hex[c & 15]);
        }
    }
}

static int is_sha256_hex(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

static int is_commit_hash(const char *s) { return strlen(s) == 40 && hub_valid_commit(s); }

/* Feed the bytes already in a partial file to the hash, so the check at
 * the end covers the whole blob however many sessions wrote it. */
static int hash_prefix(int fd, int64_t n, hub_sha256 *hash, const char *path, memra_err *err)
{
    unsigned char *buf = xmalloc(1 << 20);
    int64_t done = 0;
    int rc = 0;
    while (done < n) {
        size_t want = n - done < (1 << 20) ? (size_t)(n - done) : (1 << 20);
        ssize_t r = pread(fd, buf, want, done);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = memra_fail(err, "%s: cannot read the partial file: %s", path,
                            r < 0 ? strerror(errno) : "unexpected end");
            break;
        }
        hub_sha256_update(hash, buf, (size_t)r);
        done += r;
    }
    free(buf);
    return rc;
}

/* Under the blob lock: bring blobs/<etag>.incomplete to the full size,
 * check it, rename it to blobs/<etag>. */
static int download_blob(const hub_config *cfg, const hub_meta *meta, const char *blob,
                         const char *what, const char *file, memra_err *err)
{
    char *partial = hub_strf("%s.incomplete", blob);
    int fd = open(partial, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        memra_fail(err, "%s: cannot create: %s", partial, strerror(errno));
        free(partial);
        return -1;
    }
    int rc = -1;
    struct stat st;
    hub_sha256 hash;
    int check_hash = is_sha256_hex(meta->etag);
    hub_sink sink = {.fd = fd, .expected = meta->size, .hash = check_hash ? &hash : NULL,
                     .label = file};
    if (fstat(fd, &st) != 0) {
        memra_fail(err, "%s: cannot stat: %s", partial, strerror(errno));
        goto done;
    }
    sink.offset = st.st_size;
    if (meta->size >= 0 && sink.offset > meta->size) {
        if (ftruncate(fd, 0) != 0) {
            memra_fail(err, "%s: cannot truncate: %s", partial, strerror(errno));
            goto done;
        }
        sink.offset = 0;
    }
    hub_sha256_init(&hash);
    if (check_hash && sink.offset > 0 && hash_prefix(fd, sink.offset, &hash, partial, err) != 0)
        goto done;

    /* The token goes to the Hub, not to the CDN it may redirect to. */
    int send_token = hub_http_same_origin(meta->location, cfg->endpoint);
    for (int attempt = 1;; attempt++) {
        if (meta->size >= 0 && sink.offset == meta->size)
            break;
        int64_t before = sink.offset;
        int retry;
        memra_err why; /* err may be NULL, and a retried failure is only a warning */
        if (hub_http_download(cfg, meta->location, send_token, what, &sink, &retry, &why) == 0)
            break;
        if (!retry || attempt == MAX_ATTEMPTS) {
            memra_fail(err, "%s", why.msg);
            goto done;
        }
        log_warn("%s (attempt %d of %d, retrying)", why.msg, attempt, MAX_ATTEMPTS);
        /* Back off only when the last attempt got nowhere. */
        if (sink.offset == before)
            sleep(1u << (attempt < 4 ? attempt - 1 : 3));
    }
    if (meta->size >= 0 && sink.offset != meta->size) {
        char *shown = hub_http_display_url(meta->location);
        memra_fail(err, "%s: got %" PRId64 " bytes, want %" PRId64 " (from %s)", what,
                   sink.offset, meta->size, shown);
        free(shown);
        goto done;
    }
    if (check_hash) {
        char got[65];
        hub_sha256_hex(&hash, got);
        if (strcmp(got, meta->etag) != 0) {
            /* Nothing of it can be trusted, so nothing of it is resumed. */
            unlink(partial);
            char *shown = hub_http_display_url(meta->location);
            memra_fail(err, "%s: sha256 of the download is %s, want %s (from %s)", what, got,
                       meta->etag, shown);
            free(shown);
            goto done;
        }
    }
    if (rename(partial, blob) != 0) {
        memra_fail(err, "%s: cannot rename to %s: %s", partial, blob, strerror(errno));
        goto done;
    }
    log_info("%s: %" PRId64 " bytes in %s", what, sink.offset, blob);
    rc = 0;
done:
    close(fd);
    free(partial);
    return rc;
}

int hub_download_one(const hub_config *cfg, const hub_spec *spec, const char *file,
                     const char *revision, char **out_path, memra_err *err)
{
    *out_path = NULL;
    char *what = hub_strf("hf:%s/%s:%s", spec->owner, spec->repo, file);
    char *repo_dir = hub_repo_dir(cfg, spec);
    char *pointer = NULL, *blob = NULL, *blobs_dir = NULL;
    hub_meta meta;
    memset(&meta, 0, sizeof meta);
    int lock_fd = -1, rc = -1;

    if (hub_check_filename(file, what, err) != 0)
        goto done;
    if (is_commit_hash(revision)) {
        pointer = hub_strf("%s/snapshots/%s/%s", repo_dir, revision, file);
        if (hub_path_exists(pointer)) {
            rc = 0;
            goto done;
        }
        free(pointer);
        pointer = NULL;
    }
    if (cfg->offline) {
        memra_fail(err, "%s: not in the cache at %s and HF_HUB_OFFLINE=1", what, repo_dir);
        goto done;
    }

    strbuf url;
    sb_init(&url);
    sb_printf(&url, "%s/%s/%s/resolve/%s/", cfg->endpoint, spec->owner, spec->repo, revision);
    url_path_encode(&url, file);
    int head_rc = hub_http_head(cfg, sb_str(&url), what, &meta, err);
    if (head_rc == 0 && !meta.commit[0])
        head_rc = memra_fail(err, "%s: no X-Repo-Commit header from %s (is HF_ENDPOINT=%s a "
                                  "Hugging Face Hub?)", what, sb_str(&url), cfg->endpoint);
    else if (head_rc == 0 && !meta.etag[0])
        head_rc = memra_fail(err, "%s: no usable ETag or X-Linked-Etag header from %s", what,
                             sb_str(&url));
    sb_free(&url);
    if (head_rc != 0)
        goto done;

    const char *commit = is_commit_hash(revision) ? revision : meta.commit;
    if (!is_commit_hash(revision) && hub_write_ref(repo_dir, revision, commit, err) != 0)
        goto done;
    pointer = hub_strf("%s/snapshots/%s/%s", repo_dir, commit, file);
    blobs_dir = hub_strf("%s/blobs", repo_dir);
    blob = hub_strf("%s/%s", blobs_dir, meta.etag);
    if (hub_path_exists(pointer)) {
        rc = 0;
        goto done;
    }
    if (hub_mkdirs(blobs_dir, err) != 0 || hub_lock(cfg, spec, meta.etag, &lock_fd, err) != 0)
        goto done;
    /* Another process may have brought the blob in while we waited. */
    if (!hub_path_exists(blob) && download_blob(cfg, &meta, blob, what, file, err) != 0)
        goto done;
    if (hub_link_snapshot(repo_dir, commit, file, meta.etag, err) != 0)
        goto done;
    rc = 0;
done:
    hub_unlock(lock_fd);
    if (rc == 0) {
        *out_path = pointer;
        pointer = NULL;
    }
    hub_meta_free(&meta);
    free(pointer);
    free(blob);
    free(blobs_dir);
    free(repo_dir);
    free(what);
    return rc;
}

int hub_fetch_file(const hub_config *cfg, const hub_spec *spec, char **out_path,
                   memra_err *err)
{
    *out_path = NULL;
    char *repo_dir = hub_repo_dir(cfg, spec);
    char commit[HUB_COMMIT_MAX + 1];
    memra_err ref_err;
    int ref = hub_read_ref(repo_dir, "main", commit, &ref_err);
    int rc;
    if (ref == 1 && (!cfg->refresh || cfg->offline)) {
        char *p = hub_strf("%s/snapshots/%s/%s", repo_dir, commit, spec->file);
        if (hub_path_exists(p)) {
            free(repo_dir);
            *out_path = p;
            return 0;
        }
        free(p);
    }
    if (cfg->offline) {
        if (ref < 0)
            rc = memra_fail(err, "hf:%s/%s:%s: %s (HF_HUB_OFFLINE=1)", spec->owner, spec->repo,
                            spec->file, ref_err.msg);
        else
            rc = memra_fail(err, "hf:%s/%s:%s: not in the cache at %s and HF_HUB_OFFLINE=1",
                            spec->owner, spec->repo, spec->file, repo_dir);
    } else {
        rc = hub_download_one(cfg, spec, spec->file, "main", out_path, err);
    }
    free(repo_dir);
    return rc;
}
