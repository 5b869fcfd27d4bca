/* The Hub's HTTP side over libcurl: HEAD for a file's metadata (commit,
 * etag, size, where the bytes live), GET of small JSON bodies, and ranged
 * GETs that append to a partial blob. Errors are one line naming the
 * status and the URL. */
#ifndef MEMRA_HUB_HUB_HTTP_H
#define MEMRA_HUB_HUB_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "hub/hub.h"
#include "hub/hub_cache.h"
#include "hub/hub_sha256.h"

/* What a HEAD on a resolve URL tells. */
typedef struct {
    char commit[HUB_COMMIT_MAX + 1]; /* X-Repo-Commit; "" when absent or malformed */
    char etag[HUB_ETAG_MAX + 1];     /* X-Linked-Etag, else ETag, without W/ and quotes */
    char *location;                  /* where to GET the bytes (heap) */
    int64_t size;                    /* X-Linked-Size, else Content-Length; -1 unknown */
} hub_meta;

/* HEAD `url` following relative redirects only (a renamed repo); an
 * absolute redirect (the CDN) becomes meta->location. `what` prefixes
 * errors (the spec). */
int hub_http_head(const hub_config *cfg, const char *url, const char *what, hub_meta *out,
                  memra_err *err);
void hub_meta_free(hub_meta *m);

/* True when both absolute URLs have the same scheme, host and port: the
 * token goes to the Hub's origin only, never to a CDN it redirects to. */
int hub_http_same_origin(const char *a, const char *b);

/* A URL for messages (heap): without its query, since a signed CDN URL's
 * query is a temporary credential and long enough to push the point of an
 * error line out of the buffer. */
char *hub_http_display_url(const char *url);

/* GET a body of at most max_bytes into a NUL-terminated heap buffer. */
int hub_http_get_small(const hub_config *cfg, const char *url, const char *what,
                       size_t max_bytes, char **body, size_t *len, memra_err *err);

/* Where a ranged GET writes. */
typedef struct {
    int fd;           /* the .incomplete file */
    int64_t offset;   /* bytes already in it; advanced as bytes arrive */
    int64_t expected; /* the whole size, -1 when unknown */
    hub_sha256 *hash; /* fed every byte from 0 (NULL: no hashing) */
    const char *label; /* the file name for the progress bar */
} hub_sink;

/* GET `url` from sink->offset (a Range request when > 0), appending to
 * sink->fd. A 206 continues the file; a 200 restarts it from byte 0 (the
 * server ignored the Range). On failure *retry says whether another call
 * may pick up where this one stopped (connection lost, 5xx, 429). */
int hub_http_download(const hub_config *cfg, const char *url, int send_token, const char *what,
                      hub_sink *sink, int *retry, memra_err *err);

#endif
