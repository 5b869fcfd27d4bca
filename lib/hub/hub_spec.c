/* `hf:` specs and the Hub configuration from the environment. */
#include "hub/hub.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"
#include "core/mapfile.h"
#include "core/strbuf.h"

int hub_is_spec(const char *spec) { return strncmp(spec, "hf:", 3) == 0; }

/* The Hub's own rule for owner and repo names; "--" and ".." are refused
 * because the cache folder is "models--owner--repo" and must map back to
 * exactly one repo. */
static int check_name(const char *spec, const char *name, size_t len, const char *what,
                      memra_err *err)
{
    if (len == 0)
        return memra_fail(err, "%s: empty %s name (want hf:owner/repo or hf:owner/repo:file)",
                          spec, what);
    if (len > HUB_NAME_MAX)
        return memra_fail(err, "%s: %s name longer than %d characters", spec, what,
                          HUB_NAME_MAX);
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!isalnum((unsigned char)c) && c != '.' && c != '_' && c != '-')
            return memra_fail(err, "%s: %s name \"%.*s\" has a character outside [A-Za-z0-9._-]",
                              spec, what, (int)len, name);
        if (i > 0 && (c == '.' || c == '-') && name[i - 1] == c)
            return memra_fail(err, "%s: %s name \"%.*s\" contains \"%c%c\"", spec, what, (int)len,
                              name, c, c);
    }
    if (name[0] == '.' || name[0] == '-' || name[len - 1] == '.' || name[len - 1] == '-')
        return memra_fail(err, "%s: %s name \"%.*s\" starts or ends with '.' or '-'", spec, what,
                          (int)len, name);
    return 0;
}

int hub_check_filename(const char *name, const char *what, memra_err *err)
{
    size_t len = strlen(name);
    if (len == 0)
        return memra_fail(err, "%s: empty file name", what);
    if (len > HUB_FILE_MAX)
        return memra_fail(err, "%s: file name longer than %d bytes", what, HUB_FILE_MAX);
    if (name[0] == '/')
        return memra_fail(err, "%s: file name \"%s\" is absolute", what, name);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f || c == '\\')
            return memra_fail(err, "%s: file name \"%s\" has a control character or '\\'", what,
                              name);
    }
    /* Every component must name something inside the snapshot dir. */
    for (const char *p = name;;) {
        const char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return memra_fail(err, "%s: file name \"%s\" has an empty, \".\" or \"..\" component",
                              what, name);
        if (!slash)
            break;
        p = slash + 1;
    }
    return 0;
}

int hub_parse_spec(const char *spec, hub_spec *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    if (!hub_is_spec(spec))
        return memra_fail(err, "%s: not an hf: spec (want hf:owner/repo or hf:owner/repo:file)",
                          spec);
    const char *id = spec + 3;
    const char *slash = strchr(id, '/');
    if (!slash)
        return memra_fail(err, "%s: want hf:owner/repo or hf:owner/repo:file", spec);
    const char *repo = slash + 1;
    size_t repo_len = strcspn(repo, ":/");
    if (repo[repo_len] == '/')
        return memra_fail(err, "%s: repo id has more than one '/' (a file goes after ':', as in "
                               "hf:owner/repo:file)", spec);
    if (check_name(spec, id, (size_t)(slash - id), "owner", err) != 0 ||
        check_name(spec, repo, repo_len, "repo", err) != 0)
        return -1;
    memcpy(out->owner, id, (size_t)(slash - id));
    memcpy(out->repo, repo, repo_len);
    if (repo[repo_len] == ':') {
        const char *file = repo + repo_len + 1;
        if (hub_check_filename(file, spec, err) != 0)
            return -1;
        memcpy(out->file, file, strlen(file) + 1);
    }
    return 0;
}

static int env_true(const char *name)
{
    const char *v = getenv(name);
    return v && (!strcasecmp(v, "1") || !strcasecmp(v, "on") || !strcasecmp(v, "yes") ||
                 !strcasecmp(v, "true"));
}

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v && v[0] ? v : NULL;
}

/* A leading "~/" is expanded as huggingface_hub does, since these paths are
 * often written in shell profiles with quotes. */
static char *expand_home(const char *path)
{
    strbuf sb;
    sb_init(&sb);
    const char *home = getenv("HOME");
    if (path[0] == '~' && (path[1] == '/' || path[1] == '\0') && home) {
        sb_puts(&sb, home);
        path++;
    }
    sb_puts(&sb, path);
    return sb_take(&sb);
}

static char *hf_home(memra_err *err)
{
    const char *v = env_nonempty("HF_HOME");
    if (v)
        return expand_home(v);
    strbuf sb;
    sb_init(&sb);
    const char *xdg = env_nonempty("XDG_CACHE_HOME");
    const char *home = env_nonempty("HOME");
    if (xdg) {
        char *x = expand_home(xdg);
        sb_printf(&sb, "%s/huggingface", x);
        free(x);
    } else if (home) {
        sb_printf(&sb, "%s/.cache/huggingface", home);
    } else {
        memra_fail(err, "hf: cannot place the Hugging Face cache: none of HF_HUB_CACHE, HF_HOME, "
                        "XDG_CACHE_HOME or HOME is set");
        return NULL;
    }
    return sb_take(&sb);
}

/* The token file holds the token and maybe a newline; anything unreadable
 * simply means no token, as for huggingface_hub. */
static char *read_token_file(const char *path)
{
    char *buf;
    size_t len;
    memra_err ignored;
    if (read_small_file(path, 4096, &buf, &len, &ignored) != 0)
        return NULL;
    while (len > 0 && isspace((unsigned char)buf[len - 1]))
        buf[--len] = '\0';
    char *start = buf;
    while (isspace((unsigned char)*start))
        start++;
    char *tok = start[0] ? xstrdup(start) : NULL;
    free(buf);
    return tok;
}

int hub_config_from_env(hub_config *cfg, memra_err *err)
{
    memset(cfg, 0, sizeof *cfg);
    const char *endpoint = env_nonempty("HF_ENDPOINT");
    cfg->endpoint = xstrdup(endpoint ? endpoint : "https://huggingface.co");
    size_t n = strlen(cfg->endpoint);
    while (n > 0 && cfg->endpoint[n - 1] == '/')
        cfg->endpoint[--n] = '\0';
    if (strncmp(cfg->endpoint, "http://", 7) != 0 && strncmp(cfg->endpoint, "https://", 8) != 0) {
        memra_fail(err, "HF_ENDPOINT=%s: want an http:// or https:// URL", cfg->endpoint);
        hub_config_free(cfg);
        return -1;
    }
    cfg->offline = env_true("HF_HUB_OFFLINE");
    cfg->refresh = env_true("MEMRA_HUB_REFRESH");

    char *home = NULL;
    const char *cache = env_nonempty("HF_HUB_CACHE");
    if (!cache)
        cache = env_nonempty("HUGGINGFACE_HUB_CACHE"); /* the older name */
    if (cache) {
        cfg->cache_dir = expand_home(cache);
    } else {
        home = hf_home(err);
        if (!home) {
            hub_config_free(cfg);
            return -1;
        }
        strbuf sb;
        sb_init(&sb);
        sb_printf(&sb, "%s/hub", home);
        cfg->cache_dir = sb_take(&sb);
    }

    const char *token = env_nonempty("HF_TOKEN");
    if (!token)
        token = env_nonempty("HUGGING_FACE_HUB_TOKEN"); /* the older name */
    if (token) {
        cfg->token = xstrdup(token);
    } else {
        const char *token_path = env_nonempty("HF_TOKEN_PATH");
        if (token_path) {
            char *p = expand_home(token_path);
            cfg->token = read_token_file(p);
            free(p);
        } else {
            memra_err ignored; /* no home for a token file just means no token */
            if (!home)
                home = hf_home(&ignored);
            if (home) {
                strbuf sb;
                sb_init(&sb);
                sb_printf(&sb, "%s/token", home);
                cfg->token = read_token_file(sb_str(&sb));
                sb_free(&sb);
            }
        }
    }
    free(home);
    return 0;
}

void hub_config_free(hub_config *cfg)
{
    free(cfg->endpoint);
    free(cfg->cache_dir);
    free(cfg->token);
    memset(cfg, 0, sizeof *cfg);
}
