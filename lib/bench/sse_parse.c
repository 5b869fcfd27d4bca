#include "bench/sse_parse.h"

#include <string.h>

void sse_init(sse_parser *p, sse_event_fn fn, void *ctx, size_t max_line)
{
    memset(p, 0, sizeof *p);
    p->fn = fn;
    p->ctx = ctx;
    p->max_line = max_line ? max_line : (size_t)16 << 20;
    sb_init(&p->line);
    sb_init(&p->data);
    sb_init(&p->event);
}

void sse_reset(sse_parser *p)
{
    sb_clear(&p->line);
    sb_clear(&p->data);
    sb_clear(&p->event);
    p->have_data = p->after_cr = p->bom_checked = p->too_long = 0;
    p->n_events = p->n_comments = 0;
}

void sse_free(sse_parser *p)
{
    sb_free(&p->line);
    sb_free(&p->data);
    sb_free(&p->event);
}

static void dispatch(sse_parser *p)
{
    if (p->have_data) {
        p->n_events++;
        p->fn(p->ctx, sb_str(&p->event), sb_str(&p->data), p->data.len);
    }
    sb_clear(&p->data);
    sb_clear(&p->event);
    p->have_data = 0;
}

static void end_line(sse_parser *p)
{
    const char *l = sb_str(&p->line);
    size_t n = p->line.len;
    if (p->too_long) {
        p->too_long = 0;
    } else if (n == 0) {
        dispatch(p);
    } else if (l[0] == ':') {
        p->n_comments++;
    } else {
        const char *colon = memchr(l, ':', n);
        size_t name_len = colon ? (size_t)(colon - l) : n;
        const char *value = colon ? colon + 1 : l + n;
        if (colon && *value == ' ')
            value++;
        size_t value_len = (size_t)(l + n - value);
        if (name_len == 4 && !memcmp(l, "data", 4)) {
            if (p->have_data)
                sb_putc(&p->data, '\n');
            sb_append(&p->data, value, value_len);
            p->have_data = 1;
        } else if (name_len == 5 && !memcmp(l, "event", 5)) {
            sb_clear(&p->event);
            sb_append(&p->event, value, value_len);
        }
        /* id, retry and unknown fields: nothing to do for this client */
    }
    sb_clear(&p->line);
}

static void line_append(sse_parser *p, const char *b, size_t n)
{
    if (p->too_long)
        return;
    if (p->line.len + n > p->max_line) {
        p->too_long = 1; /* the rest of this line is dropped at its end */
        sb_clear(&p->line);
        return;
    }
    sb_append(&p->line, b, n);
}

void sse_feed(sse_parser *p, const char *buf, size_t n)
{
    static const char bom[3] = {'\xEF', '\xBB', '\xBF'};
    size_t i = 0;
    /* A UTF-8 BOM at the very start is skipped, even one split across
     * pieces; a partial match that fails is ordinary text. */
    for (; i < n && p->bom_checked < 3; i++) {
        if (buf[i] == bom[p->bom_checked]) {
            p->bom_checked++;
            continue;
        }
        line_append(p, bom, (size_t)p->bom_checked);
        p->bom_checked = 3;
        break;
    }
    while (i < n) {
        char c = buf[i];
        if (c == '\r' || c == '\n') {
            if (!(c == '\n' && p->after_cr)) /* not the LF of a CRLF */
                end_line(p);
            p->after_cr = c == '\r';
            i++;
            continue;
        }
        p->after_cr = 0;
        size_t j = i;
        while (j < n && buf[j] != '\r' && buf[j] != '\n')
            j++;
        line_append(p, buf + i, j - i);
        i = j;
    }
}
