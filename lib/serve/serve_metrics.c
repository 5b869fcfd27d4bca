#include "serve/serve_metrics.h"

#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static void histo_init(serve_histo *h, const double *b, int n)
{
    memset(h, 0, sizeof *h);
    MEMRA_ASSERT(n <= SERVE_HISTO_MAX_BUCKETS);
    h->n_bounds = n;
    memcpy(h->bounds, b, (size_t)n * sizeof *b);
}

void serve_histo_init_ttft(serve_histo *h)
{
    static const double b[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
    histo_init(h, b, (int)MEMRA_ARRAY_LEN(b));
}

void serve_histo_init_itl(serve_histo *h)
{
    static const double b[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
    histo_init(h, b, (int)MEMRA_ARRAY_LEN(b));
}

void serve_histo_observe(serve_histo *h, double v)
{
    int i = 0;
    while (i < h->n_bounds && v > h->bounds[i])
        i++;
    h->counts[i]++;
    h->sum += v;
    h->count++;
}

void serve_prom_family(strbuf *out, const char *name, const char *type, const char *help)
{
    sb_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void serve_prom_label(strbuf *out, const char *value)
{
    for (const char *p = value; *p; p++) {
        if (*p == '\\' || *p == '"')
            sb_putc(out, '\\');
        if (*p == '\n')
            sb_puts(out, "\\n");
        else
            sb_putc(out, *p);
    }
}

void serve_prom_histo(strbuf *out, const char *name, const char *model, const serve_histo *h)
{
    uint64_t cum = 0;
    for (int i = 0; i <= h->n_bounds; i++) {
        cum += h->counts[i];
        sb_printf(out, "%s_bucket{model=\"", name);
        serve_prom_label(out, model);
        if (i < h->n_bounds)
            sb_printf(out, "\",le=\"%g\"} %llu\n", h->bounds[i], (unsigned long long)cum);
        else
            sb_printf(out, "\",le=\"+Inf\"} %llu\n", (unsigned long long)cum);
    }
    sb_printf(out, "%s_sum{model=\"", name);
    serve_prom_label(out, model);
    sb_printf(out, "\"} %.9g\n%s_count{model=\"", h->sum, name);
    serve_prom_label(out, model);
    sb_printf(out, "\"} %llu\n", (unsigned long long)h->count);
}

#define MAX_REQUEST_SERIES 256

typedef struct {
    const char *endpoint;
    int status;
    uint64_t n;
} request_series;

struct serve_metrics {
    pthread_mutex_t mu;
    request_series series[MAX_REQUEST_SERIES];
    int n_series;
};

serve_metrics *serve_metrics_new(void)
{
    serve_metrics *m = xcalloc(1, sizeof *m);
    pthread_mutex_init(&m->mu, NULL);
    return m;
}

void serve_metrics_free(serve_metrics *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void serve_metrics_request(serve_metrics *m, const char *endpoint, int status)
{
    pthread_mutex_lock(&m->mu);
    int i = 0;
    while (i < m->n_series &&
           !(m->series[i].status == status && !strcmp(m->series[i].endpoint, endpoint)))
        i++;
    if (i == m->n_series && m->n_series < MAX_REQUEST_SERIES) {
        m->series[i] = (request_series){endpoint, status, 0};
        m->n_series++;
    }
    if (i < m->n_series)
        m->series[i].n++;
    pthread_mutex_unlock(&m->mu);
}

void serve_metrics_render(serve_metrics *m, strbuf *out)
{
    serve_prom_family(out, "memra_http_requests_total", "counter",
                      "HTTP requests answered, by endpoint and status code.");
    pthread_mutex_lock(&m->mu);
    for (int i = 0; i < m->n_series; i++) {
        sb_puts(out, "memra_http_requests_total{endpoint=\"");
        serve_prom_label(out, m->series[i].endpoint);
        sb_printf(out, "\",status=\"%d\"} %llu\n", m->series[i].status,
                  (unsigned long long)m->series[i].n);
    }
    pthread_mutex_unlock(&m->mu);
}
