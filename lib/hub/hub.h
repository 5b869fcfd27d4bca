/* Models from the Hugging Face Hub: `hf:owner/repo` (a safetensors
 * checkpoint: config, tokenizer, chat template and weights) or
 * `hf:owner/repo:file` (one file, typically a GGUF), downloaded with libcurl
 * into the cache layout huggingface_hub uses, so memra and the Python tools
 * share one cache:
 *
 *   $HF_HUB_CACHE (default $HF_HOME/hub, HF_HOME default ~/.cache/huggingface)
 *     models--owner--repo/
 *       blobs/<etag>                  the bytes (etag: sha256 for LFS files, git sha1 otherwise)
 *       blobs/<etag>.incomplete       a partial download, continued with Range
 *       snapshots/<commit>/<file>     symlink to ../../blobs/<etag>
 *       refs/main                     the commit main pointed at
 *     .locks/models--owner--repo/<etag>.lock   flock()ed while a blob downloads
 *
 * Environment: HF_ENDPOINT (default https://huggingface.co), HF_TOKEN (or the
 * token file $HF_HOME/token) sent as "Authorization: Bearer", HF_HUB_OFFLINE
 * (1/ON/YES/TRUE: never touch the network), HF_HUB_CACHE / HF_HOME /
 * XDG_CACHE_HOME for the cache, MEMRA_HUB_REFRESH=1 to ask the Hub for the
 * current commit even when the cache already holds what the spec needs.
 *
 * The cache is consulted first: when refs/main points at a snapshot that
 * already holds the file (or a complete checkpoint) no request is made, so
 * a cached model loads with no network and with no latency. */
#ifndef MEMRA_HUB_HUB_H
#define MEMRA_HUB_HUB_H

#include "core/err.h"

#define HUB_NAME_MAX 96    /* owner or repo name, as the Hub limits them */
#define HUB_FILE_MAX 1024  /* a file path inside a repo */

/* A parsed `hf:` spec. file[0] == '\0' means the whole repo. */
typedef struct {
    char owner[HUB_NAME_MAX + 1];
    char repo[HUB_NAME_MAX + 1];
    char file[HUB_FILE_MAX + 1];
} hub_spec;

/* Where and how to reach the Hub, read from the environment. */
typedef struct {
    char *endpoint;  /* no trailing '/' */
    char *cache_dir; /* the ".../hub" folder */
    char *token;     /* NULL when none is configured */
    int offline;     /* HF_HUB_OFFLINE */
    int refresh;     /* MEMRA_HUB_REFRESH: ask the Hub even when cached */
} hub_config;

/* True when spec starts with "hf:". */
int hub_is_spec(const char *spec);

/* Parse and validate "hf:owner/repo[:file]". Owner and repo: 1-96 of
 * [A-Za-z0-9._-], not starting or ending with '.' or '-', without "--" or
 * ".." (the cache folder joins them with "--"). File: a relative path of
 * printable characters, no '\\', no empty, "." or ".." component. */
int hub_parse_spec(const char *spec, hub_spec *out, memra_err *err);

/* Check one file name from a spec or a repo listing (rules above); `what`
 * names the source in the error. */
int hub_check_filename(const char *name, const char *what, memra_err *err);

int hub_config_from_env(hub_config *cfg, memra_err *err);
void hub_config_free(hub_config *cfg);

/* Fetch one file (cache first) and return the path of its snapshot entry. */
int hub_fetch_file(const hub_config *cfg, const hub_spec *spec, char **out_path,
                   memra_err *err);

/* Fetch a safetensors checkpoint (cache first) and return its snapshot dir.
 * Picked from the repo listing: config.json, generation_config.json,
 * tokenizer*, special_tokens_map.json, added_tokens.json,
 * chat_template.json, *.jinja, model.safetensors.index.json and the shards
 * it names (or every top-level *.safetensors when there is no index).
 * A repo of GGUF files only is an error that lists them: a GGUF is one file,
 * named with hf:owner/repo:FILE. */
int hub_fetch_repo(const hub_config *cfg, const hub_spec *spec, char **out_dir,
                   memra_err *err);

/* Download `file` of spec's repo (spec->file is ignored) at `revision` (a
 * branch such as "main", or a commit hash) into the cache, and return the
 * path of its snapshot entry. A commit-hash revision whose entry is cached
 * makes no request. Otherwise a HEAD on the resolve URL gives the commit,
 * the etag and the size; a blob already cached is linked, a missing one is
 * downloaded to blobs/<etag>.incomplete under the blob lock (continuing a
 * partial file with a Range request, retrying a dropped connection), its
 * size and, for sha256 etags, its hash checked before it is renamed into
 * place. A branch revision updates refs/<branch>. */
int hub_download_one(const hub_config *cfg, const hub_spec *spec, const char *file,
                     const char *revision, char **out_path, memra_err *err);

/* Parse `spec`, read the configuration from the environment and fetch;
 * *out_path (heap) is a file or a snapshot dir. */
int hub_resolve(const char *spec, char **out_path, memra_err *err);

#endif
