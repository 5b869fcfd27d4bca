/* A whole checkpoint from the Hub: list the repo, pick what inference
 * needs, fetch it into one snapshot. */
#include "hub/hub.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json.h"
#include "core/log.h"
#include "core/strbuf.h"
#include "hub/hub_cache.h"
#include "hub/hub_http.h"

#define LISTING_MAX (64u << 20)

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Config, tokenizer and chat template files: small, top level. */
static int is_metadata_file(const char *name)
{
    static const char *exact[] = {"config.json",         "generation_config.json",
                                  "special_tokens_map.json", "added_tokens.json",
                                  "chat_template.json",  "model.safetensors.index.json"};
    if (strchr(name, '/'))
        return 0;
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(exact); i++)
        if (!strcmp(name, exact[i]))
            return 1;
    return strncmp(name, "tokenizer", 9) == 0 || ends_with(name, ".jinja");
}

typedef struct {
    char **names;
    int count, cap;
} name_list;

static void list_add(name_list *l, const char *name)
{
    if (l->count == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->names = xrealloc(l->names, (size_t)l->cap * sizeof *l->names);
    }
    l->names[l->count++] = xstrdup(name);
}

static void list_free(name_list *l)
{
    hub_free_names(l->names, l->count);
    memset(l, 0, sizeof *l);
}

/* "a.gguf, b.gguf, ... (12 in all)": short enough for one error line. */
static void describe_files(strbuf *sb, const name_list *l)
{
    for (int i = 0; i < l->count; i++) {
        if (sb->len > 600) {
            sb_printf(sb, ", ... (%d in all)", l->count);
            return;
        }
        sb_printf(sb, "%s%s", i ? ", " : "", l->names[i]);
    }
}

/* The Hub's listing: {"sha": commit, "siblings": [{"rfilename": ...}]}. */
static int parse_listing(const char *body, size_t len, const char *url, char commit[HUB_COMMIT_MAX + 1],
                         name_list *files, memra_err *err)
{
    json_t *root = json_parse_buf(body, len, url, err);
    if (!root)
        return -1;
    const char *sha;
    int rc = json_get_str(root, "sha", 1, &sha, url, err);
    if (rc == 0 && !hub_valid_commit(sha))
        rc = memra_fail(err, "%s: \"sha\" is not a commit hash", url);
    if (rc == 0)
        strcpy(commit, sha); /* hub_valid_commit bounds the length */
    json_t *siblings = json_object_get(root, "siblings");
    if (rc == 0 && !json_is_array(siblings))
        rc = memra_fail(err, "%s: missing array \"siblings\"", url);
    size_t i;
    json_t *s;
    if (rc == 0) {
        json_array_foreach(siblings, i, s) {
            const char *name;
            if (json_get_str(s, "rfilename", 1, &name, url, err) != 0) {
                rc = -1;
                break;
            }
            list_add(files, name);
        }
    }
    json_decref(root);
    return rc;
}

static int fetch_all(const hub_config *cfg, const hub_spec *spec, const char *commit,
                     char *const *names, int count, memra_err *err)
{
    for (int i = 0; i < count; i++) {
        char *path;
        if (hub_download_one(cfg, spec, names[i], commit, &path, err) != 0)
            return -1;
        free(path);
    }
    return 0;
}

static int fetch_from_hub(const hub_config *cfg, const hub_spec *spec, const char *repo_dir,
                          char **out_dir, memra_err *err)
{
    char *what = hub_strf("hf:%s/%s", spec->owner, spec->repo);
    char *url = hub_strf("%s/api/models/%s/%s/revision/main", cfg->endpoint, spec->owner,
                         spec->repo);
    char commit[HUB_COMMIT_MAX + 1];
    name_list files = {0}, meta = {0}, shards = {0}, ggufs = {0};
    char *body = NULL, *snap = NULL;
    size_t len;
    int rc = -1;
    if (hub_http_get_small(cfg, url, what, LISTING_MAX, &body, &len, err) != 0 ||
        parse_listing(body, len, url, commit, &files, err) != 0)
        goto done;

    for (int i = 0; i < files.count; i++) {
        const char *name = files.names[i];
        if (is_metadata_file(name))
            list_add(&meta, name);
        else if (!strchr(name, '/') && ends_with(name, ".safetensors"))
            list_add(&shards, name);
        else if (ends_with(name, ".gguf"))
            list_add(&ggufs, name);
    }
    if (shards.count == 0) {
        strbuf sb;
        sb_init(&sb);
        if (ggufs.count > 0) {
            describe_files(&sb, &ggufs);
            memra_fail(err, "%s: the repo holds GGUF files only; name one as %s:FILE (%s)", what,
                       what, sb_str(&sb));
        } else {
            memra_fail(err, "%s: no top-level *.safetensors and no *.gguf files in the repo", what);
        }
        sb_free(&sb);
        goto done;
    }
    /* Checked up front so a bad name fails before anything is fetched. */
    for (int i = 0; i < meta.count + shards.count; i++) {
        const char *name = i < meta.count ? meta.names[i] : shards.names[i - meta.count];
        if (hub_check_filename(name, url, err) != 0)
            goto done;
    }
    if (hub_write_ref(repo_dir, "main", commit, err) != 0)
        goto done;
    log_info("%s: fetching commit %s", what, commit);

    /* Metadata first: the index must be in the snapshot before any shard,
     * which is what lets hub_snapshot_complete trust a shard's presence. */
    if (fetch_all(cfg, spec, commit, meta.names, meta.count, err) != 0)
        goto done;
    snap = hub_strf("%s/snapshots/%s", repo_dir, commit);
    char *index = hub_strf("%s/model.safetensors.index.json", snap);
    if (hub_path_exists(index)) {
        /* A sharded checkpoint: exactly the shards the index names (a repo
         * may also carry a consolidated copy of the same weights). */
        char **names;
        int count;
        rc = hub_index_shards(index, &names, &count, err);
        if (rc == 0) {
            rc = fetch_all(cfg, spec, commit, names, count, err);
            hub_free_names(names, count);
        }
    } else {
        rc = fetch_all(cfg, spec, commit, shards.names, shards.count, err);
    }
    free(index);
    if (rc == 0) {
        *out_dir = snap;
        snap = NULL;
    }
done:
    list_free(&files);
    list_free(&meta);
    list_free(&shards);
    list_free(&ggufs);
    free(body);
    free(snap);
    free(url);
    free(what);
    return rc;
}

int hub_fetch_repo(const hub_config *cfg, const hub_spec *spec, char **out_dir, memra_err *err)
{
    *out_dir = NULL;
    char *repo_dir = hub_repo_dir(cfg, spec);
    char commit[HUB_COMMIT_MAX + 1];
    memra_err why;
    why.msg[0] = '\0';
    int ref = hub_read_ref(repo_dir, "main", commit, &why);
    int rc = -1;
    if (ref == 1 && (!cfg->refresh || cfg->offline)) {
        char *snap = hub_strf("%s/snapshots/%s", repo_dir, commit);
        int complete = hub_snapshot_complete(snap, &why);
        if (complete == 1) {
            *out_dir = snap;
            free(repo_dir);
            return 0;
        }
        free(snap);
    }
    if (cfg->offline) {
        if (why.msg[0])
            rc = memra_fail(err, "hf:%s/%s: %s (HF_HUB_OFFLINE=1)", spec->owner, spec->repo,
                            why.msg);
        else
            rc = memra_fail(err, "hf:%s/%s: not in the cache at %s and HF_HUB_OFFLINE=1",
                            spec->owner, spec->repo, repo_dir);
    } else {
        rc = fetch_from_hub(cfg, spec, repo_dir, out_dir, err);
    }
    free(repo_dir);
    return rc;
}

int hub_resolve(const char *spec_str, char **out_path, memra_err *err)
{
    *out_path = NULL;
    hub_spec spec;
    hub_config cfg;
    if (hub_parse_spec(spec_str, &spec, err) != 0 || hub_config_from_env(&cfg, err) != 0)
        return -1;
    int rc = spec.file[0] ? hub_fetch_file(&cfg, &spec, out_path, err)
                          : hub_fetch_repo(&cfg, &spec, out_path, err);
    hub_config_free(&cfg);
    return rc;
}
