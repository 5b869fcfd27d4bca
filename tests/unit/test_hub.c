/* hf: specs, the Hugging Face cache layout and downloads, against the fake
 * Hub in tests/tools/hub-server.js (node, on 127.0.0.1 only). */
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "core/mapfile.h"
#include "hub/hub.h"
#include "hub/hub_cache.h"
#include "hub/hub_http.h"
#include "hub/hub_sha256.h"
#include "hub/model_source.h"
#include "test.h"

#define SERVER_JS "tests/tools/hub-server.js"
#define BIG_SIZE (1 << 20) /* model.safetensors of the tiny repo */

static char base_dir[512];

/* ---- scratch files ------------------------------------------------------ */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void rm_rf(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* The scratch files stay behind for a look when a check failed. */
static void remove_scratch(void)
{
    if (base_dir[0] && test_failed_checks == 0)
        rm_rf(base_dir);
}

/* A fresh directory for one test case under the binary's scratch dir. */
static char *case_dir(const char *name)
{
    if (!base_dir[0]) {
        snprintf(base_dir, sizeof base_dir, "%s/test_hub.%ld", test_tmp_dir(), (long)getpid());
        rm_rf(base_dir);
        atexit(remove_scratch);
    }
    char *d = hub_strf("%s/%s", base_dir, name);
    rm_rf(d);
    memra_err err;
    if (hub_mkdirs(d, &err) != 0)
        fprintf(stderr, "  %s\n", err.msg);
    return d;
}

static void write_bytes(const char *path, const void *data, size_t len)
{
    char *parent = hub_strf("%s", path);
    *strrchr(parent, '/') = '\0';
    memra_err err;
    if (hub_mkdirs(parent, &err) != 0 || write_file_atomic(path, data, len, &err) != 0)
        fprintf(stderr, "  fixture: %s\n", err.msg);
    free(parent);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char *p = hub_strf("%s/%s", dir, name);
    write_bytes(p, text, strlen(text));
    free(p);
}

/* Deterministic bytes that look like nothing in particular. */
static unsigned char *made_up_bytes(size_t n, uint32_t seed)
{
    unsigned char *b = malloc(n);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        b[i] = (unsigned char)(x >> 24);
    }
    return b;
}

static void write_made_up(const char *dir, const char *name, size_t n, uint32_t seed)
{
    unsigned char *b = made_up_bytes(n, seed);
    char *p = hub_strf("%s/%s", dir, name);
    write_bytes(p, b, n);
    free(p);
    free(b);
}

static char *slurp(const char *path, size_t *len)
{
    char *buf = NULL;
    memra_err err;
    size_t n = 0;
    if (read_small_file(path, 64u << 20, &buf, &n, &err) != 0)
        return NULL;
    if (len)
        *len = n;
    return buf;
}

static int same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static void sha256_of_file(const char *path, char hex[65])
{
    size_t n;
    char *b = slurp(path, &n);
    hub_sha256 s;
    hub_sha256_init(&s);
    if (b)
        hub_sha256_update(&s, b, n);
    hub_sha256_hex(&s, hex);
    free(b);
}

static int is_hex40(const char *s)
{
    if (strlen(s) != 40)
        return 0;
    for (; *s; s++)
        if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
            return 0;
    return 1;
}

/* The repos the fake Hub serves. */
static void make_repos(const char *root)
{
    char *tiny = hub_strf("%s/acme/tiny", root);
    write_text(tiny, "config.json", "{\"architectures\": [\"LlamaForCausalLM\"]}\n");
    write_text(tiny, "tokenizer.json", "{\"model\": {\"type\": \"BPE\"}}\n");
    write_text(tiny, "tokenizer_config.json", "{\"bos_token\": \"<s>\"}\n");
    write_text(tiny, "chat_template.jinja", "{{ messages }}\n");
    write_text(tiny, "README.md", "not needed for inference\n");
    write_made_up(tiny, "model.safetensors", BIG_SIZE, 1);
    write_made_up(tiny, "original/consolidated.pth", 4096, 2);

    char *sharded = hub_strf("%s/acme/sharded", root);
    write_text(sharded, "config.json", "{}\n");
    write_text(sharded, "model.safetensors.index.json",
               "{\"metadata\": {}, \"weight_map\": {"
               "\"a.weight\": \"model-00002-of-00002.safetensors\","
               "\"b.weight\": \"model-00001-of-00002.safetensors\","
               "\"c.weight\": \"model-00002-of-00002.safetensors\"}}\n");
    write_made_up(sharded, "model-00001-of-00002.safetensors", 3000, 3);
    write_made_up(sharded, "model-00002-of-00002.safetensors", 5000, 4);
    write_made_up(sharded, "consolidated.safetensors", 8000, 5);

    char *gguf = hub_strf("%s/acme/gguf", root);
    write_made_up(gguf, "tiny.Q4_K_M.gguf", 2000, 6);
    write_made_up(gguf, "tiny.Q8_0.gguf", 3000, 7);
    write_made_up(gguf, "q4/tiny-nested.gguf", 1000, 8);
    write_text(gguf, "README.md", "ggufs\n");

    char *empty = hub_strf("%s/acme/empty", root);
    write_text(empty, "README.md", "nothing\n");
    free(tiny);
    free(sharded);
    free(gguf);
    free(empty);
}

/* ---- the fake Hub ------------------------------------------------------- */

typedef struct {
    pid_t pid;
    char *dir, *root, *log, *hf_home;
    char endpoint[64];
} hub_server;

static void clean_env(void)
{
    static const char *vars[] = {"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_TOKEN",
                                 "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
                                 "MEMRA_HUB_REFRESH", "XDG_CACHE_HOME"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
        unsetenv(vars[i]);
    /* Loopback must never go through a proxy from the environment. */
    setenv("no_proxy", "127.0.0.1,localhost", 1);
    setenv("NO_PROXY", "127.0.0.1,localhost", 1);
}

/* Start node on the repos of a fresh case dir, with extra server flags
 * (NULL-terminated); points HF_HOME and HF_ENDPOINT at it. 0 on success. */
static int server_start(hub_server *s, const char *name, const char *const *extra)
{
    memset(s, 0, sizeof *s);
    s->pid = -1;
    s->dir = case_dir(name);
    s->root = hub_strf("%s/repos", s->dir);
    s->log = hub_strf("%s/requests.log", s->dir);
    s->hf_home = hub_strf("%s/hf", s->dir);
    make_repos(s->root);
    clean_env();
    setenv("HF_HOME", s->hf_home, 1);

    if (access(SERVER_JS, R_OK) != 0) {
        fprintf(stderr, "  %s not found: run the test from the project root\n", SERVER_JS);
        return -1;
    }
    char *port_file = hub_strf("%s/port", s->dir);
    char *err_file = hub_strf("%s/server.err", s->dir);
    const char *argv[32] = {"node", SERVER_JS, "--root", s->root, "--port-file", port_file,
                            "--log", s->log, "--time-limit", "120"};
    int argc = 10;
    for (int i = 0; extra && extra[i] && argc < 31; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    fflush(NULL);
    s->pid = fork();
    if (s->pid == 0) {
        if (!freopen(err_file, "w", stderr))
            _exit(126);
        execvp("node", (char *const *)argv);
        fprintf(stderr, "exec node: %s\n", strerror(errno));
        fflush(stderr);
        _exit(127);
    }
    int rc = -1;
    for (int i = 0; i < 200 && s->pid > 0; i++) { /* up to 10 s */
        char *port = slurp(port_file, NULL);
        if (port) {
            snprintf(s->endpoint, sizeof s->endpoint, "http://127.0.0.1:%d", atoi(port));
            free(port);
            rc = 0;
            break;
        }
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
            char *why = slurp(err_file, NULL);
            fprintf(stderr, "  the fake Hub did not start (exit %d): %s%s",
                    WIFEXITED(status) ? WEXITSTATUS(status) : -1, why ? why : "",
                    WIFEXITED(status) && WEXITSTATUS(status) == 127
                        ? "  (node is missing: scripts/deps.sh installs nodejs)\n"
                        : "");
            free(why);
            s->pid = -1;
            break;
        }
        struct timespec ts = {0, 50 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    if (rc == 0)
        setenv("HF_ENDPOINT", s->endpoint, 1);
    else if (s->pid > 0)
        fprintf(stderr, "  the fake Hub wrote no port file in 10 s\n");
    free(port_file);
    free(err_file);
    return rc;
}

static void server_stop(hub_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        waitpid(s->pid, NULL, 0);
    }
    s->pid = -1;
    free(s->dir);
    free(s->root);
    free(s->log);
    free(s->hf_home);
}

static int log_lines(const hub_server *s)
{
    char *b = slurp(s->log, NULL);
    int n = 0;
    for (char *p = b; p && *p; p++)
        n += *p == '\n';
    free(b);
    return n;
}

static int log_has(const hub_server *s, const char *needle)
{
    char *b = slurp(s->log, NULL);
    int found = b && strstr(b, needle) != NULL;
    free(b);
    return found;
}

/* The cache paths of a repo in the server's HF_HOME. */
static char *repo_cache(const hub_server *s, const char *owner, const char *repo)
{
    return hub_strf("%s/hub/models--%s--%s", s->hf_home, owner, repo);
}

static void read_main_ref(const hub_server *s, const char *owner, const char *repo,
                          char commit[HUB_COMMIT_MAX + 1])
{
    char *rc = repo_cache(s, owner, repo);
    memra_err err;
    if (hub_read_ref(rc, "main", commit, &err) != 1)
        commit[0] = '\0';
    free(rc);
}

/* A snapshot entry must be a symlink to ../../blobs/<etag> (deeper for
 * nested files) whose bytes equal the repo's file. */
static void check_entry(const hub_server *s, const char *owner, const char *repo,
                        const char *snap, const char *file, int lfs)
{
    char *entry = hub_strf("%s/%s", snap, file);
    char *src = hub_strf("%s/%s/%s/%s", s->root, owner, repo, file);
    char target[1024];
    ssize_t n = readlink(entry, target, sizeof target - 1);
    CHECK_MSG(n > 0, "%s is not a symlink", entry);
    if (n > 0) {
        target[n] = '\0';
        const char *prefix = strchr(file, '/') ? "../../../blobs/" : "../../blobs/";
        CHECK_MSG(strncmp(target, prefix, strlen(prefix)) == 0, "%s -> %s", entry, target);
        const char *etag = target + strlen(prefix);
        if (lfs) {
            char want[65];
            sha256_of_file(src, want);
            CHECK_MSG(strcmp(etag, want) == 0, "%s: blob %s, want sha256 %s", file, etag, want);
        } else {
            CHECK_MSG(is_hex40(etag), "%s: blob %s is not a git sha1", file, etag);
        }
        /* The repo's cache folder is the snapshot dir's grandparent. */
        char *cache = hub_strf("%s", snap);
        char *cut = strstr(cache, "/snapshots/");
        if (cut)
            *cut = '\0';
        char *blob = hub_strf("%s/blobs/%s", cache, etag);
        struct stat st;
        CHECK_MSG(lstat(blob, &st) == 0 && S_ISREG(st.st_mode), "%s: no regular blob", blob);
        free(blob);
        free(cache);
    }
    CHECK_MSG(same_file(entry, src), "%s differs from %s", entry, src);
    free(entry);
    free(src);
}

static int no_incomplete_blobs(const hub_server *s, const char *owner, const char *repo)
{
    char *cache = repo_cache(s, owner, repo);
    char *cmd = hub_strf("ls '%s/blobs' 2>/dev/null | grep -q incomplete", cache);
    int found = system(cmd) == 0;
    free(cmd);
    free(cache);
    return !found;
}

static char *resolve_ok(const char *spec)
{
    char *path = NULL;
    memra_err err;
    err.msg[0] = '\0';
    int rc = model_source_resolve(spec, &path, &err);
    CHECK_MSG(rc == 0 && path, "%s: %s", spec, err.msg);
    return path;
}

static void resolve_fails(const char *spec, const char *want1, const char *want2)
{
    char *path = NULL;
    memra_err err;
    err.msg[0] = '\0';
    int rc = model_source_resolve(spec, &path, &err);
    CHECK_MSG(rc == -1 && !path, "%s resolved to %s", spec, path ? path : "?");
    CHECK_MSG(strchr(err.msg, '\n') == NULL, "%s: more than one line: %s", spec, err.msg);
    CHECK_MSG(strstr(err.msg, want1), "%s: '%s' lacks '%s'", spec, err.msg, want1);
    if (want2)
        CHECK_MSG(strstr(err.msg, want2), "%s: '%s' lacks '%s'", spec, err.msg, want2);
    free(path);
}

/* ---- tests without a server --------------------------------------------- */

static void test_sha256_vectors(void)
{
    static const struct {
        const char *in, *hex;
    } v[] = {
        {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
    };
    char hex[65];
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        hub_sha256 s;
        hub_sha256_init(&s);
        hub_sha256_update(&s, v[i].in, strlen(v[i].in));
        hub_sha256_hex(&s, hex);
        CHECK_MSG(strcmp(hex, v[i].hex) == 0, "sha256(\"%s\") = %s", v[i].in, hex);
    }
    /* A million 'a' fed in odd pieces crosses every block boundary case. */
    char chunk[997];
    memset(chunk, 'a', sizeof chunk);
    hub_sha256 s;
    hub_sha256_init(&s);
    size_t left = 1000000;
    for (size_t piece = 1; left > 0; piece = piece % 997 + 1) {
        size_t n = piece < left ? piece : left;
        hub_sha256_update(&s, chunk, n);
        left -= n;
    }
    hub_sha256_hex(&s, hex);
    CHECK(strcmp(hex, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0);
}

static void test_spec_parse(void)
{
    hub_spec sp;
    memra_err err;
    CHECK(hub_parse_spec("hf:acme/tiny", &sp, &err) == 0);
    CHECK(!strcmp(sp.owner, "acme") && !strcmp(sp.repo, "tiny") && sp.file[0] == '\0');
    CHECK(hub_parse_spec("hf:Org-1/Model_v2.5:q4/model-Q4_K_M.gguf", &sp, &err) == 0);
    CHECK(!strcmp(sp.owner, "Org-1") && !strcmp(sp.repo, "Model_v2.5"));
    CHECK(!strcmp(sp.file, "q4/model-Q4_K_M.gguf"));
    CHECK(hub_is_spec("hf:a/b") && !hub_is_spec("./hf:a/b") && !hub_is_spec("model.gguf"));

    static const char *bad[] = {
        "hf:",          "hf:a",          "hf:a/b/../c",   "hf:a/b:../c",   "hf:a/b:/etc/passwd",
        "hf:a/b:",      "hf:a--b/c",     "hf:a/.b",       "hf:a/b:x/./y",  "hf:a/b c",
        "hf:/b",        "hf:a/",         "hf:a/b/c",      "hf:a/b:x//y",   "hf:a/b:x\\y",
        "hf:a/b.",      "hf:-a/b",       "hf:a/b:x/..",   "hf:a/b..c",     "hf:a/b:x\ty",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err.msg[0] = '\0';
        int rc = hub_parse_spec(bad[i], &sp, &err);
        CHECK_MSG(rc == -1, "%s was accepted", bad[i]);
        CHECK_MSG(strncmp(err.msg, bad[i], strlen(bad[i])) == 0 || strstr(err.msg, bad[i]),
                  "%s: error does not name the spec: %s", bad[i], err.msg);
    }
    char long_name[200];
    memset(long_name, 'x', sizeof long_name);
    memcpy(long_name, "hf:a/", 5);
    long_name[5 + 97] = '\0';
    CHECK(hub_parse_spec(long_name, &sp, &err) == -1 && strstr(err.msg, "longer than"));
    /* model_source_resolve refuses the same specs without touching the net. */
    resolve_fails("hf:a/b/../c", "hf:a/b/../c", NULL);
}

static void test_config_from_env(void)
{
    clean_env();
    char *dir = case_dir("config");
    hub_config cfg;
    memra_err err;
    setenv("HF_HOME", dir, 1);
    unsetenv("HF_ENDPOINT");
    CHECK(hub_config_from_env(&cfg, &err) == 0);
    char *want = hub_strf("%s/hub", dir);
    CHECK(!strcmp(cfg.cache_dir, want));
    CHECK(!strcmp(cfg.endpoint, "https://huggingface.co"));
    CHECK(cfg.token == NULL && !cfg.offline && !cfg.refresh);
    hub_config_free(&cfg);
    free(want);

    /* The token file under HF_HOME, HF_TOKEN over it. */
    write_text(dir, "token", "hf_from_file\n");
    CHECK(hub_config_from_env(&cfg, &err) == 0);
    CHECK(cfg.token && !strcmp(cfg.token, "hf_from_file"));
    hub_config_free(&cfg);
    setenv("HF_TOKEN", "hf_from_env", 1);
    setenv("HF_ENDPOINT", "http://mirror.example/", 1);
    setenv("HF_HUB_OFFLINE", "yes", 1);
    setenv("HF_HUB_CACHE", "/elsewhere/hub", 1);
    CHECK(hub_config_from_env(&cfg, &err) == 0);
    CHECK(!strcmp(cfg.token, "hf_from_env"));
    CHECK(!strcmp(cfg.endpoint, "http://mirror.example"));
    CHECK(!strcmp(cfg.cache_dir, "/elsewhere/hub"));
    CHECK(cfg.offline == 1);
    hub_config_free(&cfg);

    setenv("HF_HUB_OFFLINE", "0", 1);
    unsetenv("HF_HUB_CACHE");
    unsetenv("HF_HOME");
    setenv("XDG_CACHE_HOME", "/xdg", 1);
    CHECK(hub_config_from_env(&cfg, &err) == 0);
    CHECK(!strcmp(cfg.cache_dir, "/xdg/huggingface/hub") && cfg.offline == 0);
    hub_config_free(&cfg);

    setenv("HF_ENDPOINT", "ftp://nope", 1);
    CHECK(hub_config_from_env(&cfg, &err) == -1 && strstr(err.msg, "HF_ENDPOINT"));
    clean_env();
    unsetenv("HF_ENDPOINT");
    free(dir);
}

static void test_local_paths(void)
{
    char *dir = case_dir("local");
    write_text(dir, "model.gguf", "GGUF");
    char *file = hub_strf("%s/model.gguf", dir);
    char *path = resolve_ok(file);
    CHECK(path && !strcmp(path, file));
    free(path);
    path = resolve_ok(dir);
    CHECK(path && !strcmp(path, dir));
    free(path);
    char *missing = hub_strf("%s/x.gguf", dir);
    char *want = hub_strf("%s: no such file or directory", missing);
    memra_err err;
    CHECK(model_source_resolve(missing, &path, &err) == -1 && !strcmp(err.msg, want));
    CHECK(model_source_resolve("x.gguf", &path, &err) == -1 &&
          !strcmp(err.msg, "x.gguf: no such file or directory"));
    free(want);
    free(missing);
    free(file);
    free(dir);
}

static void test_cache_layout_helpers(void)
{
    char *dir = case_dir("helpers");
    memra_err err;
    char commit[HUB_COMMIT_MAX + 1];
    CHECK(hub_read_ref(dir, "main", commit, &err) == 0);
    CHECK(hub_write_ref(dir, "main", "0123456789abcdef0123456789abcdef01234567", &err) == 0);
    CHECK(hub_read_ref(dir, "main", commit, &err) == 1);
    CHECK(!strcmp(commit, "0123456789abcdef0123456789abcdef01234567"));
    write_text(dir, "refs/bad", "../../etc\n");
    CHECK(hub_read_ref(dir, "bad", commit, &err) == -1 && strstr(err.msg, "refs/bad"));
    CHECK(hub_link_snapshot(dir, "c0ffee", "sub/dir/f.bin", "e7a9", &err) == 0);
    char *link = hub_strf("%s/snapshots/c0ffee/sub/dir/f.bin", dir);
    char target[256];
    ssize_t n = readlink(link, target, sizeof target - 1);
    CHECK(n > 0);
    if (n > 0) {
        target[n] = '\0';
        CHECK(!strcmp(target, "../../../../blobs/e7a9"));
    }
    CHECK(hub_http_same_origin("https://huggingface.co/a/b", "https://huggingface.co"));
    CHECK(hub_http_same_origin("HTTPS://HuggingFace.co/a", "https://huggingface.co"));
    CHECK(!hub_http_same_origin("https://huggingface.co.evil.example/a", "https://huggingface.co"));
    CHECK(!hub_http_same_origin("http://127.0.0.1:12345/a", "http://127.0.0.1:1234"));
    CHECK(!hub_http_same_origin("http://huggingface.co/a", "https://huggingface.co"));
    CHECK(hub_valid_etag("abc-12_3.x") && !hub_valid_etag("../x") && !hub_valid_etag(".x") &&
          !hub_valid_etag("a/b") && !hub_valid_etag(""));
    free(link);
    free(dir);
}

/* ---- tests against the fake Hub ------------------------------------------ */

static void test_download_repo(void)
{
    hub_server s;
    if (server_start(&s, "repo", NULL) != 0) {
        CHECK_MSG(0, "the fake Hub is needed (node %s)", SERVER_JS);
        server_stop(&s);
        return;
    }
    char *dir = resolve_ok("hf:acme/tiny");
    char commit[HUB_COMMIT_MAX + 1];
    read_main_ref(&s, "acme", "tiny", commit);
    CHECK_MSG(is_hex40(commit), "refs/main holds '%s'", commit);
    char *cache = repo_cache(&s, "acme", "tiny");
    char *want = hub_strf("%s/snapshots/%s", cache, commit);
    CHECK_MSG(dir && !strcmp(dir, want), "got %s, want %s", dir ? dir : "(null)", want);
    if (dir) {
        check_entry(&s, "acme", "tiny", dir, "config.json", 0);
        check_entry(&s, "acme", "tiny", dir, "tokenizer.json", 0);
        check_entry(&s, "acme", "tiny", dir, "tokenizer_config.json", 0);
        check_entry(&s, "acme", "tiny", dir, "chat_template.jinja", 0);
        check_entry(&s, "acme", "tiny", dir, "model.safetensors", 1);
        char *readme = hub_strf("%s/README.md", dir);
        char *orig = hub_strf("%s/original", dir);
        CHECK(!hub_path_exists(readme) && !hub_path_exists(orig));
        free(readme);
        free(orig);
    }
    CHECK(no_incomplete_blobs(&s, "acme", "tiny"));
    CHECK(log_has(&s, "\"url\":\"/api/models/acme/tiny/revision/main\""));

    /* Cached now: neither the whole repo nor one of its files asks the Hub. */
    int before = log_lines(&s);
    char *again = resolve_ok("hf:acme/tiny");
    CHECK(again && dir && !strcmp(again, dir));
    char *one = resolve_ok("hf:acme/tiny:config.json");
    char *one_want = hub_strf("%s/config.json", want);
    CHECK(one && !strcmp(one, one_want));
    CHECK_MSG(log_lines(&s) == before, "%d requests after the cache had it",
              log_lines(&s) - before);

    /* MEMRA_HUB_REFRESH asks for the commit again but downloads nothing. */
    setenv("MEMRA_HUB_REFRESH", "1", 1);
    free(again);
    again = resolve_ok("hf:acme/tiny");
    unsetenv("MEMRA_HUB_REFRESH");
    CHECK(again && dir && !strcmp(again, dir));
    CHECK(log_lines(&s) > before);
    char *lines = slurp(s.log, NULL);
    int later_gets = 0;
    int line_no = 0;
    for (char *p = lines; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : p + strlen(p))
        if (line_no++ >= before && strncmp(p, "{\"method\":\"GET\"", 15) == 0 &&
            strncmp(p, "{\"method\":\"GET\",\"url\":\"/api/", 27) != 0)
            later_gets++;
    CHECK_MSG(later_gets == 0, "%d file GETs on refresh of a cached repo", later_gets);
    free(lines);

    free(one);
    free(one_want);
    free(again);
    free(want);
    free(cache);
    free(dir);
    server_stop(&s);
}

static void test_download_sharded(void)
{
    hub_server s;
    if (server_start(&s, "sharded", NULL) != 0) {
        CHECK_MSG(0, "the fake Hub is needed");
        server_stop(&s);
        return;
    }
    char *dir = resolve_ok("hf:acme/sharded");
    if (dir) {
        check_entry(&s, "acme", "sharded", dir, "config.json", 0);
        check_entry(&s, "acme", "sharded", dir, "model.safetensors.index.json", 0);
        check_entry(&s, "acme", "sharded", dir, "model-00001-of-00002.safetensors", 1);
        check_entry(&s, "acme", "sharded", dir, "model-00002-of-00002.safetensors", 1);
        char *cons = hub_strf("%s/consolidated.safetensors", dir);
        CHECK_MSG(!hub_path_exists(cons), "consolidated.safetensors was downloaded too");
        free(cons);

        /* A shard link lost (an interrupted run) is fetched again online;
         * its blob is still cached, so no bytes move. */
        char *shard = hub_strf("%s/model-00002-of-00002.safetensors", dir);
        unlink(shard);
        setenv("HF_HUB_OFFLINE", "1", 1);
        resolve_fails("hf:acme/sharded", "not in the cache at", "HF_HUB_OFFLINE=1");
        unsetenv("HF_HUB_OFFLINE");
        int before = log_lines(&s);
        char *again = resolve_ok("hf:acme/sharded");
        CHECK(again && !strcmp(again, dir));
        CHECK(hub_path_exists(shard));
        CHECK(log_lines(&s) > before && !log_has(&s, "\"range\":\"bytes="));
        char *lines = slurp(s.log, NULL);
        int cdn_gets = 0;
        for (char *p = lines; p && (p = strstr(p, "\"url\":\"/cdn/")); p++)
            cdn_gets++;
        CHECK_MSG(cdn_gets == 2, "%d blob downloads, want 2 (one per shard, once)", cdn_gets);
        free(lines);
        free(again);
        free(shard);
    }
    free(dir);
    server_stop(&s);
}

static void test_gguf_repo(void)
{
    hub_server s;
    if (server_start(&s, "gguf", NULL) != 0) {
        CHECK_MSG(0, "the fake Hub is needed");
        server_stop(&s);
        return;
    }
    resolve_fails("hf:acme/gguf", "GGUF files only", "tiny.Q4_K_M.gguf, tiny.Q8_0.gguf");
    resolve_fails("hf:acme/empty", "no top-level *.safetensors and no *.gguf", NULL);
    char commit[HUB_COMMIT_MAX + 1];
    char *path = resolve_ok("hf:acme/gguf:tiny.Q8_0.gguf");
    read_main_ref(&s, "acme", "gguf", commit);
    CHECK(is_hex40(commit));
    char *cache = repo_cache(&s, "acme", "gguf");
    char *snap = hub_strf("%s/snapshots/%s", cache, commit);
    char *want = hub_strf("%s/tiny.Q8_0.gguf", snap);
    CHECK(path && !strcmp(path, want));
    check_entry(&s, "acme", "gguf", snap, "tiny.Q8_0.gguf", 1);
    char *nested = resolve_ok("hf:acme/gguf:q4/tiny-nested.gguf");
    CHECK(nested != NULL);
    check_entry(&s, "acme", "gguf", snap, "q4/tiny-nested.gguf", 1);
    free(nested);
    free(path);
    free(want);
    free(snap);
    free(cache);
    server_stop(&s);
}

static void test_not_found(void)
{
    hub_server s;
    if (server_start(&s, "notfound", NULL) != 0) {
        CHECK_MSG(0, "the fake Hub is needed");
        server_stop(&s);
        return;
    }
    resolve_fails("hf:nobody/missing", "HTTP 404 from http://127.0.0.1:",
                  "/api/models/nobody/missing/revision/main: repo or file not found");
    resolve_fails("hf:acme/tiny:nope.json", "HTTP 404", "/acme/tiny/resolve/main/nope.json");
    resolve_fails("hf:acme/tiny:nope.json", "hf:acme/tiny:nope.json: ", NULL);
    server_stop(&s);
}

static void test_resume_after_truncation(void)
{
    static const char *const args[] = {"--truncate-once", "model.safetensors", NULL};
    hub_server s;
    if (server_start(&s, "truncated", args) != 0) {
        CHECK_MSG(0, "the fake Hub is needed");
        server_stop(&s);
        return;
    }
    char *dir = resolve_ok("hf:acme/tiny");
    CHECK_MSG(log_has(&s, "\"range\":\"bytes="), "no Range request in the log");
    if (dir)
        check_entry(&s, "acme", "tiny", dir, "model.safetensors", 1);
    CHECK(no_incomplete_blobs(&s, "acme", "tiny"));
    free(dir);
    server_stop(&s);
}

/* A partial blob left by an earlier process: continued with Range when
 * the server honours it, started over when it answers 200. */
static void resume_partial(const char *name, const char *const *args, int expect_206)
{
    hub_server s;
    if (server_start(&s, name, args) != 0) {
        CHECK_MSG(0, "the fake Hub is needed");
        server_stop(&s);
        return;
    }
    char *src = hub_strf("%s/acme/tiny/model.safetensors", s.root);
    char sha[65];
    sha256_of_file(src, sha);
    char *cache = repo_cache(&s, "acme", "tiny");
    char *partial = hub_strf("%s/blobs/%s.incomplete", cache, sha);
    size_t n;
    char *bytes = slurp(src, &n);
    if (bytes) {
        /* The right first 1000 bytes, except when the server will restart
         * it anyway: then garbage proves the restart really truncated. */
        if (!expect_206)
            memset(bytes, 0x5a, 1000);
        write_bytes(partial, bytes, 1000);
    }
    char *path = resolve_ok("hf:acme/tiny:model.safetensors");
    CHECK(log_has(&s, "\"range\":\"bytes=1000-\""));
    char *link_dir = path ? hub_strf("%s", path) : NULL;
    if (link_dir) {
        *strrchr(link_dir, '/') = '\0';
        check_entry(&s, "acme", "tiny", link_dir, "model.safetensors", 1);
    }
    CHECK(!hub_path_exists(partial));
    free(link_dir);
    free(path);
    free(bytes);
    free(partial);
    free(cache);
    free(src);
    server_stop(&s);
}

static void test_resume_partial_blob(void) { resume_partial("partial", NULL, 1); }

static void test_restart_when_range_ignored(void)
{
    static const char *const args[] = {"--no-range", NULL};
    resume_partial("norange", args, 0);
}

static void test_corrupt_download(void)
{
    static const char *const args[] = {"--corrupt", "model.safetensors", NULL};
    hub_server s;
    if (server_start(&s, "corrupt", args) != 0) {
        CHECK_MSG(0, "the fake Hub is needed");
        server_stop(&s);
        return;
    }
    resolve_fails("hf:acme/tiny:model.safetensors", "sha256 of the download", "want ");
    /* The CDN URL's signature is a credential: it stays out of the message. */
    char *path = NULL;
    memra_err err;
    CHECK(model_source_resolve("hf:acme/tiny:model.safetensors", &path, &err) == -1);
    CHECK_MSG(!strstr(err.msg, "signature"), "%s", err.msg);
    free(path);
    char *cache = repo_cache(&s, "acme", "tiny");
    char *cmd = hub_strf("ls '%s/blobs' | grep -qv '^[0-9a-f]\\{40\\}$'", cache);
    CHECK_MSG(system(cmd) != 0, "a blob or partial file survived a sha256 mismatch");
    free(cmd);
    free(cache);
    server_stop(&s);
}

static void test_token(void)
{
    /* The CDN on another origin (same server, other host name). */
    static const char *const args[] = {"--token", "s3cret", "--cdn-host", "localhost", NULL};
    hub_server s;
    if (server_start(&s, "token", args) != 0) {
        CHECK_MSG(0, "the fake Hub is needed");
        server_stop(&s);
        return;
    }
    resolve_fails("hf:acme/tiny", "HTTP 401", "set HF_TOKEN");
    resolve_fails("hf:acme/tiny:config.json", "HTTP 401", "HF_TOKEN");
    setenv("HF_TOKEN", "wrong", 1);
    resolve_fails("hf:acme/tiny", "HTTP 401", "refused the token in HF_TOKEN");
    CHECK(log_has(&s, "\"auth\":\"Bearer wrong\""));
    setenv("HF_TOKEN", "s3cret", 1);
    char *dir = resolve_ok("hf:acme/tiny");
    if (dir)
        check_entry(&s, "acme", "tiny", dir, "config.json", 0);
    CHECK(log_has(&s, "\"auth\":\"Bearer s3cret\""));
    /* The token went to the Hub only, never to the CDN. */
    char *lines = slurp(s.log, NULL);
    int cdn = 0, cdn_with_token = 0;
    for (char *p = lines; p && *p;) {
        char *nl = strchr(p, '\n');
        if (nl)
            *nl = '\0';
        if (strstr(p, "\"url\":\"/cdn/")) {
            cdn++;
            cdn_with_token += strstr(p, "Bearer") != NULL;
        }
        p = nl ? nl + 1 : p + strlen(p);
    }
    CHECK_MSG(cdn > 0 && cdn_with_token == 0, "%d CDN requests, %d with the token", cdn,
              cdn_with_token);
    free(lines);
    unsetenv("HF_TOKEN");
    free(dir);
    server_stop(&s);
}

static void test_offline(void)
{
    hub_server s;
    if (server_start(&s, "offline", NULL) != 0) {
        CHECK_MSG(0, "the fake Hub is needed");
        server_stop(&s);
        return;
    }
    char *dir = resolve_ok("hf:acme/tiny");
    char *gguf = resolve_ok("hf:acme/gguf:tiny.Q4_K_M.gguf");
    /* The Hub goes away: offline mode must not even try it. */
    kill(s.pid, SIGTERM);
    waitpid(s.pid, NULL, 0);
    s.pid = -1;
    setenv("HF_HUB_OFFLINE", "1", 1);
    char *again = resolve_ok("hf:acme/tiny");
    CHECK(again && dir && !strcmp(again, dir));
    char *g2 = resolve_ok("hf:acme/gguf:tiny.Q4_K_M.gguf");
    CHECK(g2 && gguf && !strcmp(g2, gguf));
    char *cfg = resolve_ok("hf:acme/tiny:config.json");
    CHECK(cfg != NULL);
    resolve_fails("hf:acme/sharded", "hf:acme/sharded: not in the cache at ", "HF_HUB_OFFLINE=1");
    resolve_fails("hf:acme/gguf:tiny.Q8_0.gguf", "not in the cache at ", "HF_HUB_OFFLINE=1");
    char *repo_dir = repo_cache(&s, "acme", "sharded");
    resolve_fails("hf:acme/sharded", repo_dir, NULL);
    /* Online with the Hub gone: one clear line naming the URL. */
    unsetenv("HF_HUB_OFFLINE");
    resolve_fails("hf:acme/sharded", "cannot fetch http://127.0.0.1:", NULL);
    free(repo_dir);
    free(cfg);
    free(g2);
    free(again);
    free(gguf);
    free(dir);
    server_stop(&s);
}

static void test_renamed_repo(void)
{
    static const char *const args[] = {"--rename", "old-name/tiny=acme/tiny", NULL};
    hub_server s;
    if (server_start(&s, "renamed", args) != 0) {
        CHECK_MSG(0, "the fake Hub is needed");
        server_stop(&s);
        return;
    }
    char *cfg = resolve_ok("hf:old-name/tiny:config.json");
    char *dir = resolve_ok("hf:old-name/tiny");
    if (dir)
        check_entry(&s, "acme", "tiny", dir, "model.safetensors", 1);
    CHECK(cfg && strstr(cfg, "/models--old-name--tiny/snapshots/"));
    CHECK(log_has(&s, "\"url\":\"/acme/tiny/resolve/main/config.json\""));
    free(dir);
    free(cfg);
    server_stop(&s);
}

TEST_MAIN(TEST_CASE(test_sha256_vectors), TEST_CASE(test_spec_parse),
          TEST_CASE(test_config_from_env), TEST_CASE(test_local_paths),
          TEST_CASE(test_cache_layout_helpers), TEST_CASE(test_download_repo),
          TEST_CASE(test_download_sharded), TEST_CASE(test_gguf_repo), TEST_CASE(test_not_found),
          TEST_CASE(test_resume_after_truncation), TEST_CASE(test_resume_partial_blob),
          TEST_CASE(test_restart_when_range_ignored), TEST_CASE(test_corrupt_download),
          TEST_CASE(test_token), TEST_CASE(test_offline), TEST_CASE(test_renamed_repo))
