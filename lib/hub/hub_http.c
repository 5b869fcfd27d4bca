#include "hub/hub_http.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "core/check.h"
#include "core/clock.h"
#include "core/log.h"
#include "core/strbuf.h"

#define MAX_HOPS 10

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void) { curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT); }

/* Headers of the last response seen; a status line starts a new response
 * (redirect hops and "100 Continue" each send their own). */
typedef struct {
    long status;
    char commit[HUB_COMMIT_MAX + 1];
    char etag[HUB_ETAG_MAX + 1];
    char linked_etag[HUB_ETAG_MAX + 1];
    int64_t length, linked_size;
    int64_t range_start; /* Content-Range first byte; -1 when absent */
    strbuf location;
    char error_message[200];
} resp_headers;

static void headers_reset(resp_headers *h)
{
    h->status = 0;
    h->commit[0] = h->etag[0] = h->linked_etag[0] = h->error_message[0] = '\0';
    h->length = h->linked_size = h->range_start = -1;
    sb_clear(&h->location);
}

static int64_t parse_size(const char *s)
{
    if (!isdigit((unsigned char)*s))
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    return errno || *end ? -1 : (int64_t)v;
}

/* huggingface_hub accepts `W/"x"` and `"x"` alike and names the blob x. */
static void normalize_etag(const char *v, char out[HUB_ETAG_MAX + 1])
{
    if (strncmp(v, "W/", 2) == 0)
        v += 2;
    size_t n = strlen(v);
    if (n >= 2 && v[0] == '"' && v[n - 1] == '"') {
        v++;
        n -= 2;
    }
    out[0] = '\0';
    if (n == 0 || n > HUB_ETAG_MAX)
        return;
    memcpy(out, v, n);
    out[n] = '\0';
    if (!hub_valid_etag(out))
        out[0] = '\0';
}

static void copy_bounded(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *ctx)
{
    resp_headers *h = ctx;
    size_t n = size * nmemb;
    /* Signed CDN URLs in Location can be long: never cut a header. */
    char stack[2048];
    char *line = n < sizeof stack ? stack : xmalloc(n + 1);
    size_t len = n;
    memcpy(line, data, len);
    line[len] = '\0';
    while (len > 0 && (line[len - 1] == '\r' || line[len - 1] == '\n' || line[len - 1] == ' '))
        line[--len] = '\0';
    if (strncmp(line, "HTTP/", 5) == 0) {
        headers_reset(h);
        const char *sp = strchr(line, ' ');
        h->status = sp ? strtol(sp + 1, NULL, 10) : 0;
        goto out;
    }
    char *colon = strchr(line, ':');
    if (!colon)
        goto out;
    *colon = '\0';
    char *v = colon + 1;
    while (*v == ' ' || *v == '\t')
        v++;
    if (!strcasecmp(line, "X-Repo-Commit")) {
        if (hub_valid_commit(v))
            copy_bounded(h->commit, sizeof h->commit, v);
    } else if (!strcasecmp(line, "ETag")) {
        normalize_etag(v, h->etag);
    } else if (!strcasecmp(line, "X-Linked-Etag")) {
        normalize_etag(v, h->linked_etag);
    } else if (!strcasecmp(line, "Content-Length")) {
        h->length = parse_size(v);
    } else if (!strcasecmp(line, "X-Linked-Size")) {
        h->linked_size = parse_size(v);
    } else if (!strcasecmp(line, "Location")) {
        sb_clear(&h->location);
        sb_puts(&h->location, v);
    } else if (!strcasecmp(line, "X-Error-Message")) {
        copy_bounded(h->error_message, sizeof h->error_message, v);
    } else if (!strcasecmp(line, "Content-Range")) {
        /* "bytes START-END/TOTAL" */
        if (strncasecmp(v, "bytes ", 6) == 0) {
            char *dash = strchr(v + 6, '-');
            if (dash) {
                *dash = '\0';
                h->range_start = parse_size(v + 6);
            }
        }
    }
out:
    if (line != stack)
        free(line);
    return n;
}

/* The origin ("scheme://host[:port]") of an absolute URL, as a length. */
static size_t origin_len(const char *url)
{
    const char *p = strstr(url, "://");
    if (!p)
        return 0;
    p += 3;
    return (size_t)(p - url) + strcspn(p, "/?#");
}

int hub_http_same_origin(const char *a, const char *b)
{
    size_t n = origin_len(a);
    return n > 0 && n == origin_len(b) && strncasecmp(a, b, n) == 0;
}

char *hub_http_display_url(const char *url)
{
    size_t n = strcspn(url, "?#");
    return hub_strf("%.*s%s", (int)n, url, url[n] ? "?..." : "");
}

static CURL *easy_new(const hub_config *cfg, const char *url, int send_token,
                      struct curl_slist **hdrs, resp_headers *h, char *errbuf)
{
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return NULL;
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    errbuf[0] = '\0';
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "memra/0.1 (" LIBCURL_VERSION ")");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    /* A stalled transfer fails (and is retried) instead of hanging. */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
    *hdrs = NULL;
    if (send_token && cfg->token) {
        char *auth = hub_strf("Authorization: Bearer %s", cfg->token);
        *hdrs = curl_slist_append(*hdrs, auth);
        free(auth);
    }
    /* The size a HEAD reports must be the size of the bytes on disk. */
    *hdrs = curl_slist_append(*hdrs, "Accept-Encoding: identity");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
    return c;
}

static int status_error(memra_err *err, const char *what, long status, const char *url,
                        int token_sent, const char *server_msg)
{
    const char *hint = "";
    if (status == 401)
        hint = token_sent ? ": the Hub refused the token in HF_TOKEN, or the repo does not exist"
                          : ": the repo is private, gated or does not exist; set HF_TOKEN to a "
                            "token with access";
    else if (status == 403)
        hint = token_sent ? ": the token in HF_TOKEN has no access (a gated repo needs its terms "
                            "accepted on the Hub)"
                          : ": access denied; set HF_TOKEN to a token with access (a gated repo "
                            "needs its terms accepted on the Hub)";
    else if (status == 404)
        hint = ": repo or file not found";
    else if (status == 429)
        hint = ": rate limited by the Hub, try again later";
    if (server_msg && server_msg[0])
        return memra_fail(err, "%s: HTTP %ld from %s%s (%s)", what, status, url, hint, server_msg);
    return memra_fail(err, "%s: HTTP %ld from %s%s", what, status, url, hint);
}

static int curl_error(memra_err *err, const char *what, const char *url, CURLcode rc,
                      const char *errbuf)
{
    return memra_fail(err, "%s: cannot fetch %s: %s", what, url,
                      errbuf[0] ? errbuf : curl_easy_strerror(rc));
}

static int no_curl(memra_err *err, const char *what)
{
    return memra_fail(err, "%s: cannot initialize libcurl", what);
}

int hub_http_head(const hub_config *cfg, const char *start_url, const char *what, hub_meta *out,
                  memra_err *err)
{
    memset(out, 0, sizeof *out);
    out->size = -1;
    char *url = xstrdup(start_url);
    resp_headers h;
    memset(&h, 0, sizeof h);
    sb_init(&h.location);
    int rc = -1;
    for (int hop = 0;; hop++) {
        if (hop == MAX_HOPS) {
            memra_fail(err, "%s: more than %d redirects from %s", what, MAX_HOPS, start_url);
            break;
        }
        headers_reset(&h);
        char errbuf[CURL_ERROR_SIZE];
        struct curl_slist *hdrs;
        /* The token only goes to the endpoint that it was issued for. */
        int same_origin = hub_http_same_origin(url, cfg->endpoint);
        CURL *c = easy_new(cfg, url, same_origin, &hdrs, &h, errbuf);
        if (!c) {
            no_curl(err, what);
            break;
        }
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
        CURLcode cr = curl_easy_perform(c);
        curl_easy_cleanup(c);
        curl_slist_free_all(hdrs);
        if (cr != CURLE_OK) {
            curl_error(err, what, url, cr, errbuf);
            break;
        }
        if (h.status >= 300 && h.status < 400) {
            const char *loc = sb_str(&h.location);
            if (!loc[0]) {
                memra_fail(err, "%s: HTTP %ld from %s without a Location", what, h.status, url);
                break;
            }
            if (loc[0] == '/' && loc[1] != '/') {
                /* Same site: a renamed repo; follow and ask again. */
                char *next = hub_strf("%.*s%s", (int)origin_len(url), url, loc);
                free(url);
                url = next;
                continue;
            }
            if (strncmp(loc, "http://", 7) != 0 && strncmp(loc, "https://", 8) != 0) {
                char *shown = hub_http_display_url(loc);
                memra_fail(err, "%s: HTTP %ld from %s: unsupported Location \"%s\"", what,
                           h.status, url, shown);
                free(shown);
                break;
            }
            out->location = xstrdup(loc);
        } else if (h.status >= 400 || h.status < 200) {
            status_error(err, what, h.status, url, same_origin && cfg->token, h.error_message);
            break;
        } else {
            out->location = xstrdup(url);
        }
        memcpy(out->commit, h.commit, sizeof out->commit);
        memcpy(out->etag, h.linked_etag[0] ? h.linked_etag : h.etag, sizeof out->etag);
        out->size = h.linked_size >= 0 ? h.linked_size : h.length;
        rc = 0;
        break;
    }
    free(url);
    sb_free(&h.location);
    return rc;
}

void hub_meta_free(hub_meta *m)
{
    free(m->location);
    m->location = NULL;
}

typedef struct {
    strbuf body;
    size_t max;
    int too_big;
} small_body;

static size_t on_small_body(char *data, size_t size, size_t nmemb, void *ctx)
{
    small_body *b = ctx;
    size_t n = size * nmemb;
    if (b->body.len + n > b->max) {
        b->too_big = 1;
        return 0; /* aborts the transfer */
    }
    sb_append(&b->body, data, n);
    return n;
}

int hub_http_get_small(const hub_config *cfg, const char *url, const char *what,
                       size_t max_bytes, char **body, size_t *len, memra_err *err)
{
    *body = NULL;
    resp_headers h;
    memset(&h, 0, sizeof h);
    sb_init(&h.location);
    headers_reset(&h);
    small_body b = {.max = max_bytes};
    sb_init(&b.body);
    char errbuf[CURL_ERROR_SIZE];
    struct curl_slist *hdrs;
    CURL *c = easy_new(cfg, url, 1, &hdrs, &h, errbuf);
    int rc = -1;
    if (!c) {
        no_curl(err, what);
    } else {
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
        curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)MAX_HOPS);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_small_body);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
        CURLcode cr = curl_easy_perform(c);
        curl_easy_cleanup(c);
        curl_slist_free_all(hdrs);
        if (b.too_big)
            memra_fail(err, "%s: the answer from %s is larger than %zu bytes", what, url,
                       max_bytes);
        else if (h.status >= 400)
            status_error(err, what, h.status, url, cfg->token != NULL, h.error_message);
        else if (cr != CURLE_OK)
            curl_error(err, what, url, cr, errbuf);
        else if (h.status != 200)
            memra_fail(err, "%s: HTTP %ld from %s, want 200", what, h.status, url);
        else
            rc = 0;
    }
    if (rc == 0) {
        if (len)
            *len = b.body.len;
        sb_putc(&b.body, '\0'); /* an empty body still gets a buffer */
        *body = sb_take(&b.body);
    }
    sb_free(&b.body);
    sb_free(&h.location);
    return rc;
}

/* A progress bar on stderr, only when stderr is a terminal. */
typedef struct {
    int tty, drawn;
    double start, last;
    int64_t start_offset;
} progress;

static void progress_draw(progress *p, const hub_sink *s, int final)
{
    if (!p->tty)
        return;
    double t = clock_now_s();
    if (!final && t - p->last < 0.1)
        return;
    p->last = t;
    double mib = 1024.0 * 1024.0;
    double rate = t > p->start ? (double)(s->offset - p->start_offset) / (t - p->start) / mib : 0;
    const char *name = strrchr(s->label, '/') ? strrchr(s->label, '/') + 1 : s->label;
    if (s->expected > 0)
        fprintf(stderr, "\r%-40.40s %5.1f%% %9.1f / %.1f MiB %7.1f MiB/s", name,
                100.0 * (double)s->offset / (double)s->expected, (double)s->offset / mib,
                (double)s->expected / mib, rate);
    else
        fprintf(stderr, "\r%-40.40s %9.1f MiB %7.1f MiB/s", name, (double)s->offset / mib, rate);
    p->drawn = 1;
}

typedef struct {
    hub_sink *sink;
    resp_headers *h;
    progress prog;
    int started;
    int failed;           /* the write side stopped the transfer */
    memra_err write_err;
} download_state;

/* The first body bytes tell which response won: 206 continues at the
 * offset asked for, 200 starts over; anything else is an error whose body
 * must not land in the blob. */
static int on_first_bytes(download_state *st)
{
    hub_sink *s = st->sink;
    long status = st->h->status;
    if (status == 206) {
        if (st->h->range_start != s->offset) {
            memra_fail(&st->write_err, "the server resumed at byte %" PRId64 ", not %" PRId64,
                       st->h->range_start, s->offset);
            return -1;
        }
    } else if (status == 200) {
        if (s->offset > 0) {
            log_info("%s: the server ignored the Range request; starting over", s->label);
            if (ftruncate(s->fd, 0) != 0 || lseek(s->fd, 0, SEEK_SET) != 0) {
                memra_fail(&st->write_err, "cannot truncate the partial file: %s",
                           strerror(errno));
                return -1;
            }
            s->offset = 0;
            st->prog.start_offset = 0;
            if (s->hash)
                hub_sha256_init(s->hash);
        }
    }
    return 0;
}

static size_t on_download_body(char *data, size_t size, size_t nmemb, void *ctx)
{
    download_state *st = ctx;
    hub_sink *s = st->sink;
    size_t n = size * nmemb;
    if (!st->started) {
        st->started = 1;
        if (on_first_bytes(st) != 0) {
            st->failed = 1;
            return 0;
        }
    }
    if (st->h->status != 200 && st->h->status != 206)
        return n; /* an error page: the status says it all */
    if (s->expected >= 0 && s->offset + (int64_t)n > s->expected) {
        memra_fail(&st->write_err, "the server sent more than the %" PRId64 " bytes announced",
                   s->expected);
        st->failed = 1;
        return 0;
    }
    for (size_t done = 0; done < n;) {
        ssize_t w = write(s->fd, data + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            memra_fail(&st->write_err, "cannot write the partial file: %s",
                       w < 0 ? strerror(errno) : "no progress");
            st->failed = 1;
            return 0;
        }
        done += (size_t)w;
    }
    if (s->hash)
        hub_sha256_update(s->hash, data, n);
    s->offset += (int64_t)n;
    return n;
}

static int on_xferinfo(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    download_state *st = ctx;
    progress_draw(&st->prog, st->sink, 0);
    return 0;
}

static int retryable_curl(CURLcode rc)
{
    switch (rc) {
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

int hub_http_download(const hub_config *cfg, const char *url, int send_token, const char *what,
                      hub_sink *sink, int *retry, memra_err *err)
{
    *retry = 0;
    if (lseek(sink->fd, sink->offset, SEEK_SET) != sink->offset)
        return memra_fail(err, "%s: cannot seek the partial file: %s", what, strerror(errno));
    resp_headers h;
    memset(&h, 0, sizeof h);
    sb_init(&h.location);
    headers_reset(&h);
    download_state st;
    memset(&st, 0, sizeof st);
    st.sink = sink;
    st.h = &h;
    st.prog.tty = isatty(STDERR_FILENO);
    st.prog.start = st.prog.last = clock_now_s();
    st.prog.start_offset = sink->offset;
    char errbuf[CURL_ERROR_SIZE];
    struct curl_slist *hdrs;
    CURL *c = easy_new(cfg, url, send_token, &hdrs, &h, errbuf);
    if (!c) {
        sb_free(&h.location);
        return no_curl(err, what);
    }
    /* A CDN may redirect again; libcurl drops the Authorization header when
     * a redirect leaves the host. */
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, (long)MAX_HOPS);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_download_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &st);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_xferinfo);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &st);
    char *shown = hub_http_display_url(url);
    char range[64];
    if (sink->offset > 0) {
        snprintf(range, sizeof range, "%" PRId64 "-", sink->offset);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    if (sink->offset == 0)
        log_info("%s: downloading %s", what, shown);
    else
        log_info("%s: resuming %s at byte %" PRId64, what, shown, sink->offset);
    CURLcode cr = curl_easy_perform(c);
    curl_easy_cleanup(c);
    curl_slist_free_all(hdrs);
    progress_draw(&st.prog, sink, 1);
    if (st.prog.drawn)
        fputc('\n', stderr);

    int rc = -1;
    if (st.failed) {
        memra_fail(err, "%s: %s (from %s)", what, st.write_err.msg, shown);
    } else if (h.status >= 400) {
        status_error(err, what, h.status, shown, send_token && cfg->token, h.error_message);
        *retry = h.status >= 500 || h.status == 429;
        if (h.status == 416) {
            /* The partial file is longer than the file: start it over. */
            if (ftruncate(sink->fd, 0) == 0) {
                sink->offset = 0;
                if (sink->hash)
                    hub_sha256_init(sink->hash);
                *retry = 1;
            }
        }
    } else if (cr != CURLE_OK) {
        memra_fail(err, "%s: download stopped after %" PRId64 " bytes: %s (from %s)", what,
                   sink->offset, errbuf[0] ? errbuf : curl_easy_strerror(cr), shown);
        *retry = retryable_curl(cr);
    } else if (h.status != 200 && h.status != 206) {
        memra_fail(err, "%s: HTTP %ld from %s, want 200 or 206", what, h.status, shown);
    } else {
        rc = 0;
    }
    free(shown);
    sb_free(&h.location);
    return rc;
}
