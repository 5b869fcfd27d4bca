/* The huggingface_hub cache layout (see hub.h): paths, refs, snapshot
 * symlinks, per-blob locks, and whether a cached snapshot holds a whole
 * checkpoint. */
#ifndef MEMRA_HUB_HUB_CACHE_H
#define MEMRA_HUB_HUB_CACHE_H

#include "core/err.h"
#include "hub/hub.h"

#define HUB_COMMIT_MAX 64
#define HUB_ETAG_MAX 128

/* A heap-allocated printf. */
char *hub_strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* <cache>/models--owner--repo */
char *hub_repo_dir(const hub_config *cfg, const hub_spec *spec);

/* mkdir -p */
int hub_mkdirs(const char *path, memra_err *err);

/* A commit or an etag becomes a path component: only [A-Za-z0-9] for a
 * commit, [A-Za-z0-9._-] (no leading '.') for an etag. */
int hub_valid_commit(const char *s);
int hub_valid_etag(const char *s);

/* refs/<ref>: 1 when found (commit filled), 0 when absent, -1 when it
 * holds something that is not a commit. */
int hub_read_ref(const char *repo_dir, const char *ref, char commit[HUB_COMMIT_MAX + 1],
                 memra_err *err);
int hub_write_ref(const char *repo_dir, const char *ref, const char *commit, memra_err *err);

/* snapshots/<commit>/<file> -> ../../blobs/<etag> (one more "../" per
 * folder in file), replacing what was there. */
int hub_link_snapshot(const char *repo_dir, const char *commit, const char *file,
                      const char *etag, memra_err *err);

/* Take the exclusive flock huggingface_hub also takes on
 * <cache>/.locks/models--owner--repo/<etag>.lock; *fd is released with
 * hub_unlock. */
int hub_lock(const hub_config *cfg, const hub_spec *spec, const char *etag, int *fd,
             memra_err *err);
void hub_unlock(int fd);

/* The shard files named by a model.safetensors.index.json weight_map:
 * sorted, without duplicates, each name checked. */
int hub_index_shards(const char *index_path, char ***names, int *count, memra_err *err);
void hub_free_names(char **names, int count);

/* 1 when the snapshot dir holds a whole checkpoint (config.json, and the
 * index with every shard it names, or at least one top-level
 * *.safetensors without an index), 0 when not, -1 on a malformed index. */
int hub_snapshot_complete(const char *snap_dir, memra_err *err);

/* stat() succeeds (a dangling symlink does not exist). */
int hub_path_exists(const char *path);

#endif
