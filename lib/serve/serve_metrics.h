/* Prometheus text exposition: counters, gauges and histograms, written by
 * hand (the format is a few lines per sample).
 *
 * Requests are counted by endpoint and HTTP status here; the per-model
 * counters and histograms live in each model (its engine thread updates
 * them) and are rendered through the same helpers. */
#ifndef MEMRA_SERVE_SERVE_METRICS_H
#define MEMRA_SERVE_SERVE_METRICS_H

#include <pthread.h>
#include <stdint.h>

#include "core/strbuf.h"

#define SERVE_HISTO_MAX_BUCKETS 16

typedef struct {
    int n_bounds;
    double bounds[SERVE_HISTO_MAX_BUCKETS]; /* upper bounds, ascending; +Inf is implicit */
    uint64_t counts[SERVE_HISTO_MAX_BUCKETS + 1]; /* per bucket, not cumulative */
    double sum;
    uint64_t count;
} serve_histo;

/* Buckets for time to first token and inter-token latency, in seconds. */
void serve_histo_init_ttft(serve_histo *h);
void serve_histo_init_itl(serve_histo *h);
void serve_histo_observe(serve_histo *h, double v);

/* "# HELP" and "# TYPE" lines of a family. */
void serve_prom_family(strbuf *out, const char *name, const char *type, const char *help);
/* One histogram's _bucket/_sum/_count lines with label model="alias". */
void serve_prom_histo(strbuf *out, const char *name, const char *model, const serve_histo *h);
/* A label value with \, " and newline escaped as the format wants. */
void serve_prom_label(strbuf *out, const char *value);

typedef struct serve_metrics serve_metrics;

serve_metrics *serve_metrics_new(void);
void serve_metrics_free(serve_metrics *m);
/* One finished HTTP request; endpoint is a static string (the route). */
void serve_metrics_request(serve_metrics *m, const char *endpoint, int status);
/* The memra_http_requests_total family. */
void serve_metrics_render(serve_metrics *m, strbuf *out);

#endif
