/* An incremental parser for a text/event-stream body (the client side of
 * SSE, as the HTML standard's "event stream interpretation" defines it),
 * for memra-bench's load client.
 *
 * Bytes arrive in whatever pieces the network gives; sse_feed takes each
 * piece as it comes and calls back once per complete event, at the blank
 * line that ends it. Lines end with CRLF, LF or CR (a CR at the end of one
 * piece and an LF at the start of the next are one line end). A line
 * starting with ':' is a comment (memra-serve's keep-alives); "field:
 * value" loses one space after the colon; "data" lines are joined with
 * "\n"; "event" names the event; "id" and "retry" are ignored here; an
 * event with no data line is not dispatched. */
#ifndef MEMRA_BENCH_SSE_PARSE_H
#define MEMRA_BENCH_SSE_PARSE_H

#include <stddef.h>

#include "core/strbuf.h"

/* event: the event's type ("" when none was given: "message");
 * data: its data, NUL-terminated, len bytes. */
typedef void (*sse_event_fn)(void *ctx, const char *event, const char *data, size_t len);

typedef struct {
    sse_event_fn fn;
    void *ctx;
    strbuf line, data, event;
    int have_data;     /* a data line was seen in this event */
    int after_cr;      /* the last byte was a CR */
    int bom_checked;   /* bytes of a leading UTF-8 BOM matched; 3: done */
    size_t max_line;   /* longer lines set too_long and are dropped */
    int too_long;
    size_t n_events, n_comments;
} sse_parser;

/* max_line 0: 16 MiB. */
void sse_init(sse_parser *p, sse_event_fn fn, void *ctx, size_t max_line);
void sse_feed(sse_parser *p, const char *buf, size_t n);
/* Forget any partial line and event (a new stream on the same parser). */
void sse_reset(sse_parser *p);
void sse_free(sse_parser *p);

#endif
