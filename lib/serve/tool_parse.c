/* The incremental tool-call parser: generated text in, events out.
 *
 * The text is scanned as it arrives against the markers of the format
 * (tool_parse.h lists them). Text that cannot be the start of a marker is
 * passed on at once; a tail that could still grow into one is held until
 * the next piece decides it. A call's body is held whole and announced
 * (start, arguments, end) only at its closing marker, once it has been read
 * as valid: announcing a call and then finding its JSON broken would leave a
 * streaming client with a call that never was. A body that does not read as
 * a call goes out as content, markers and all, so no text is ever dropped.
 *
 * Whitespace next to markup is the template's layout, not the model's
 * answer: whitespace right after <think>, </think> or a call, and right
 * before </think> or a call, is dropped; everywhere else text is kept byte
 * for byte. Every decision depends on the bytes only, never on where the
 * chunks were cut, which is what makes the result chunking-invariant. */
#include "serve/tool_parse.h"

#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/strbuf.h"

enum mode {
    M_START,   /* llama3: before the first non-space byte */
    M_CONTENT,
    M_REASON,
    M_CALL,    /* inside call_open .. call_close */
    M_SECTION, /* inside section_open .. section_close, between calls */
    M_WHOLE,   /* llama3: a message that may be all calls: held to the end */
    M_MISTRAL, /* after [TOOL_CALLS] */
    M_H_HEADER,/* harmony: a message header, up to <|message|> */
    M_H_BODY,  /* harmony: a message body, up to <|end|> <|call|> <|return|> */
};

/* The markup of the tag-delimited formats. */
typedef struct {
    const char *think_open, *think_close;
    const char *section_open, *section_close;
    const char *call_open, *call_close;
} tcp_tags;

#define DS(x) "<\xef\xbd\x9c" x "\xef\xbd\x9c>" /* <｜x｜> */
#define DSP "\xe2\x96\x81"                       /* ▁ */

static const tcp_tags format_tags[TOOLPARSE_FORMAT_COUNT] = {
    [TOOLPARSE_NONE] = {"<think>", "</think>", NULL, NULL, NULL, NULL},
    [TOOLPARSE_HERMES] = {"<think>", "</think>", NULL, NULL, "<tool_call>", "</tool_call>"},
    [TOOLPARSE_QWEN3_CODER] = {"<think>", "</think>", NULL, NULL, "<tool_call>", "</tool_call>"},
    [TOOLPARSE_GLM45] = {"<think>", "</think>", NULL, NULL, "<tool_call>", "</tool_call>"},
    [TOOLPARSE_LLAMA3] = {"<think>", "</think>", NULL, NULL, "<|python_tag|>", NULL},
    [TOOLPARSE_MISTRAL] = {"[THINK]", "[/THINK]", NULL, NULL, "[TOOL_CALLS]", NULL},
    [TOOLPARSE_DEEPSEEK] = {"<think>", "</think>", DS("tool" DSP "calls" DSP "begin"),
                            DS("tool" DSP "calls" DSP "end"), DS("tool" DSP "call" DSP "begin"),
                            DS("tool" DSP "call" DSP "end")},
    [TOOLPARSE_KIMI_K2] = {"<think>", "</think>", "<|tool_calls_section_begin|>",
                           "<|tool_calls_section_end|>", "<|tool_call_begin|>",
                           "<|tool_call_end|>"},
    [TOOLPARSE_GEMMA4] = {"<|channel>thought", "<channel|>", NULL, NULL, "<|tool_call>",
                          "<tool_call|>"},
    [TOOLPARSE_HARMONY] = {NULL, NULL, NULL, NULL, NULL, NULL},
};

/* Harmony ends a message body at any of these; a new header may also
 * start without the previous body closed. */
static const char *const harmony_ends[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>",
                                           "<|channel|>"};
#define HARMONY_HEADER_MAX 512

typedef struct {
    strbuf held;  /* passed text not yet sent: trailing spaces, a split UTF-8 tail */
    int skip_ws;  /* drop leading whitespace (right after markup) */
} sink;

enum { K_CONTENT, K_REASON };

struct toolparse {
    toolparse_format f;
    const tcp_tags *tags;
    enum mode mode;
    int in_section;
    int finished;
    strbuf buf;  /* input not yet decided */
    strbuf raw;  /* the opening markup of the call being held */
    sink sinks[2];
    strbuf out[2];
    toolparse_call *calls;
    int n_calls, cap_calls;
    toolparse_opts opts;
    rng_state rng;
    /* harmony: what the current body is */
    int h_kind; /* K_CONTENT, K_REASON, or 2 for a call */
    char *h_name;
    toolparse_cb cb;
    void *user;
};

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* ---- sending ------------------------------------------------------------ */

static void send_text(toolparse *p, int k, const char *s, size_t n)
{
    if (!n)
        return;
    sb_append(&p->out[k], s, n);
    if (p->cb) {
        toolparse_event ev = {.kind = k == K_CONTENT ? TOOLPARSE_EV_CONTENT
                                                     : TOOLPARSE_EV_REASONING,
                              .index = -1, .text = s, .len = n};
        p->cb(p->user, &ev);
    }
}

/* Bytes of s[0..n) that end on a whole UTF-8 sequence. */
static size_t utf8_whole(const unsigned char *s, size_t n)
{
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = s[n - back];
        if ((c & 0xC0) == 0x80)
            continue;
        size_t need = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3
                                    : (c & 0xF8) == 0xF0 ? 4 : 1;
        return need > back ? n - back : n;
    }
    return n;
}

static void sink_flush(toolparse *p, int k, size_t upto)
{
    strbuf *h = &p->sinks[k].held;
    if (!upto)
        return;
    send_text(p, k, h->data, upto);
    memmove(h->data, h->data + upto, h->len - upto);
    h->len -= upto;
    if (h->data)
        h->data[h->len] = '\0';
}

/* Passes text to a channel, sending all but what must wait: trailing
 * whitespace (markup may follow and take it) and a split UTF-8 tail. */
static void sink_put(toolparse *p, int k, const char *s, size_t n)
{
    sink *sk = &p->sinks[k];
    if (sk->skip_ws) {
        while (n && is_ws(*s)) {
            s++;
            n--;
        }
        if (!n)
            return;
        sk->skip_ws = 0;
    }
    sb_append(&sk->held, s, n);
    size_t e = sk->held.len;
    while (e && is_ws(sk->held.data[e - 1]))
        e--;
    e = utf8_whole((const unsigned char *)sk->held.data, e);
    if (e)
        sink_flush(p, k, e);
}

/* Markup follows: the held whitespace was layout. */
static void sink_drop_ws(toolparse *p, int k)
{
    strbuf *h = &p->sinks[k].held;
    size_t e = h->len;
    while (e && is_ws(h->data[e - 1]))
        e--;
    sink_flush(p, k, e);
    sb_clear(h);
}

static void sink_end(toolparse *p, int k) { sink_flush(p, k, p->sinks[k].held.len); }

static void make_id(toolparse *p, char out[30])
{
    static const char alnum[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(out, "call_", 5);
    for (int i = 0; i < 24; i++) {
        uint64_t r = p->opts.rand ? p->opts.rand(p->opts.rand_ctx) : rng_next_u64(&p->rng);
        out[5 + i] = alnum[r % 62];
    }
    out[29] = '\0';
}

/* Takes name and args (malloc'd); the content whitespace before the call
 * was layout. */
static void send_call(toolparse *p, char *name, char *args)
{
    sink_drop_ws(p, K_CONTENT);
    p->sinks[K_CONTENT].skip_ws = 1;
    if (p->n_calls == p->cap_calls) {
        p->cap_calls = p->cap_calls ? 2 * p->cap_calls : 4;
        p->calls = realloc(p->calls, (size_t)p->cap_calls * sizeof *p->calls);
        if (!p->calls)
            abort();
    }
    char id[30];
    make_id(p, id);
    int i = p->n_calls++;
    p->calls[i] = (toolparse_call){strdup(id), name, args};
    if (!p->cb)
        return;
    toolparse_event ev = {.kind = TOOLPARSE_EV_CALL_START, .index = i, .id = p->calls[i].id,
                          .name = name};
    p->cb(p->user, &ev);
    ev = (toolparse_event){.kind = TOOLPARSE_EV_CALL_ARGS, .index = i, .text = args,
                           .len = strlen(args)};
    p->cb(p->user, &ev);
    ev = (toolparse_event){.kind = TOOLPARSE_EV_CALL_END, .index = i};
    p->cb(p->user, &ev);
}

/* ---- scanning ----------------------------------------------------------- */

/* The earliest whole marker in s (its index, *at its offset); else -1 and
 * *safe: the bytes that cannot begin a marker (the rest may still grow
 * into one). NULL markers are skipped. */
static int scan(const char *s, size_t n, const char *const *m, int nm, size_t *at, size_t *safe)
{
    int which = -1;
    size_t best = n;
    for (int i = 0; i < nm; i++) {
        if (!m[i])
            continue;
        const char *hit = memmem(s, n, m[i], strlen(m[i]));
        if (hit && (size_t)(hit - s) < best) {
            best = (size_t)(hit - s);
            which = i;
        }
    }
    if (which >= 0) {
        *at = best;
        return which;
    }
    size_t keep = 0;
    for (int i = 0; i < nm; i++) {
        if (!m[i])
            continue;
        size_t L = strlen(m[i]);
        for (size_t k = L - 1 < n ? L - 1 : n; k > keep; k--)
            if (!memcmp(s + n - k, m[i], k)) {
                keep = k;
                break;
            }
    }
    *safe = n - keep;
    return -1;
}

static void consume(toolparse *p, size_t n)
{
    memmove(p->buf.data, p->buf.data + n, p->buf.len - n);
    p->buf.len -= n;
    p->buf.data[p->buf.len] = '\0';
}

/* A body that is not a call: its text, with its markup, is content. */
static void send_raw(toolparse *p, const char *body, size_t n, const char *close)
{
    sink_put(p, K_CONTENT, p->raw.data ? p->raw.data : "", p->raw.len);
    sink_put(p, K_CONTENT, body, n);
    if (close)
        sink_put(p, K_CONTENT, close, strlen(close));
    sb_clear(&p->raw);
}

/* Llama 3's end of turn after a call (<|eom_id|> when it awaits a built-in
 * tool's result): when the detokenizer writes it out, it ends the calls and
 * stays content, as every format's end-of-turn token does. */
static const char *const llama3_turn_ends[] = {"<|eot_id|>", "<|eom_id|>"};

static size_t turn_end_at(const char *s, size_t n)
{
    for (size_t j = 0; j < sizeof llama3_turn_ends / sizeof *llama3_turn_ends; j++) {
        size_t m = strlen(llama3_turn_ends[j]);
        if (n >= m && !memcmp(s, llama3_turn_ends[j], m))
            return m;
    }
    return 0;
}

/* Calls written as JSON objects one after another (Llama 3 may separate
 * them with ';'), up to the end or an end-of-turn token: all of them, or
 * none (-1). What follows the end-of-turn token is content. */
static int send_json_calls(toolparse *p, const char *s, size_t n)
{
    char *names[64], *args[64];
    int k = 0, ok = 1;
    size_t i = 0, tail = n;
    for (;;) {
        while (i < n && (is_ws(s[i]) || s[i] == ';'))
            i++;
        if (i < n && k && turn_end_at(s + i, n - i))
            tail = i;
        if (i == n || tail < n)
            break;
        long ext = tcp_json_extent(s + i, n - i);
        if (ext <= 0 || k == 64 || tcp_parse_body(p->f, s + i, (size_t)ext, &names[k], &args[k])) {
            ok = 0;
            break;
        }
        k++;
        i += (size_t)ext;
    }
    if (!ok || !k) {
        for (int j = 0; j < k; j++) {
            free(names[j]);
            free(args[j]);
        }
        return -1;
    }
    for (int j = 0; j < k; j++)
        send_call(p, names[j], args[j]);
    sink_put(p, K_CONTENT, s + tail, n - tail);
    return 0;
}

/* ---- one step per mode: 1 when it consumed and the loop goes on -------- */

static void open_reasoning(toolparse *p)
{
    p->mode = M_REASON;
    p->sinks[K_REASON].skip_ws = 1;
}

static int step_text(toolparse *p, int eof)
{
    const tcp_tags *t = p->tags;
    const char *m[3] = {t->think_open, t->section_open, t->call_open};
    size_t at = 0, safe = 0;
    int w = scan(p->buf.data, p->buf.len, m, 3, &at, &safe);
    if (w < 0) {
        size_t n = eof ? p->buf.len : safe;
        sink_put(p, K_CONTENT, p->buf.data, n);
        consume(p, n);
        return 0;
    }
    sink_put(p, K_CONTENT, p->buf.data, at);
    consume(p, at + strlen(m[w]));
    if (w == 0) {
        sink_drop_ws(p, K_CONTENT);
        open_reasoning(p);
    } else if (w == 1) {
        p->in_section = 1;
        p->mode = M_SECTION;
    } else {
        sb_clear(&p->raw);
        sb_puts(&p->raw, m[2]);
        p->mode = p->f == TOOLPARSE_LLAMA3 ? M_WHOLE : p->f == TOOLPARSE_MISTRAL ? M_MISTRAL
                                                                                  : M_CALL;
    }
    return 1;
}

static int step_reason(toolparse *p, int eof)
{
    const char *m[1] = {p->tags->think_close};
    size_t at = 0, safe = 0;
    if (scan(p->buf.data, p->buf.len, m, 1, &at, &safe) < 0) {
        size_t n = eof ? p->buf.len : safe;
        sink_put(p, K_REASON, p->buf.data, n);
        consume(p, n);
        return 0;
    }
    sink_put(p, K_REASON, p->buf.data, at);
    sink_drop_ws(p, K_REASON);
    consume(p, at + strlen(m[0]));
    p->mode = M_CONTENT;
    p->sinks[K_CONTENT].skip_ws = 1;
    return 1;
}

static int step_section(toolparse *p, int eof)
{
    const char *m[2] = {p->tags->call_open, p->tags->section_close};
    size_t at = 0, safe = 0;
    int w = scan(p->buf.data, p->buf.len, m, 2, &at, &safe);
    if (w < 0) {
        size_t n = eof ? p->buf.len : safe;
        sink_put(p, K_CONTENT, p->buf.data, n);
        consume(p, n);
        return 0;
    }
    sink_put(p, K_CONTENT, p->buf.data, at);
    consume(p, at + strlen(m[w]));
    if (w == 0) {
        sb_clear(&p->raw);
        sb_puts(&p->raw, m[0]);
        p->mode = M_CALL;
    } else {
        sink_drop_ws(p, K_CONTENT);
        p->sinks[K_CONTENT].skip_ws = 1;
        p->in_section = 0;
        p->mode = M_CONTENT;
    }
    return 1;
}

static int step_call(toolparse *p, int eof)
{
    const char *close = p->tags->call_close;
    const char *hit = memmem(p->buf.data, p->buf.len, close, strlen(close));
    if (!hit && !eof)
        return 0;
    size_t n = hit ? (size_t)(hit - p->buf.data) : p->buf.len;
    char *name, *args;
    if (!tcp_parse_body(p->f, p->buf.data, n, &name, &args)) {
        sb_clear(&p->raw);
        send_call(p, name, args);
    } else {
        send_raw(p, p->buf.data, n, hit ? close : NULL);
    }
    consume(p, hit ? n + strlen(close) : n);
    p->mode = p->in_section ? M_SECTION : M_CONTENT;
    return 1;
}

static int step_start(toolparse *p, int eof)
{
    size_t i = 0;
    while (i < p->buf.len && is_ws(p->buf.data[i]))
        i++;
    if (i == p->buf.len && !eof)
        return 0;
    if (i < p->buf.len && p->buf.data[i] == '{') {
        sb_clear(&p->raw);
        p->mode = M_WHOLE;
    } else {
        p->mode = M_CONTENT;
    }
    return 1;
}

static int step_whole(toolparse *p, int eof)
{
    if (!eof)
        return 0;
    if (send_json_calls(p, p->buf.data, p->buf.len))
        send_raw(p, p->buf.data, p->buf.len, NULL);
    sb_clear(&p->raw);
    consume(p, p->buf.len);
    p->mode = M_CONTENT;
    return 1;
}

/* After [TOOL_CALLS]: a JSON array of calls (Mistral Nemo, Small 3.1), or
 * name[CALL_ID]id[ARGS]{..} for one call (Small 3.2, Magistral). */
static int step_mistral(toolparse *p, int eof)
{
    const char *s = p->buf.data;
    size_t n = p->buf.len, i = 0;
    while (i < n && is_ws(s[i]))
        i++;
    size_t used = 0;
    int ok = 0;
    if (i < n && s[i] == '[') {
        long ext = tcp_json_extent(s + i, n - i);
        if (ext == 0 && !eof)
            return 0;
        if (ext > 0) {
            used = i + (size_t)ext;
            json_error_t err;
            json_t *a = json_loadb(s + i, (size_t)ext, 0, &err);
            size_t k = json_array_size(a);
            char **nm = calloc(k + 1, sizeof *nm), **ar = calloc(k + 1, sizeof *ar);
            ok = k > 0;
            for (size_t j = 0; ok && j < k; j++)
                ok = !tcp_call_from_object(json_array_get(a, j), &nm[j], &ar[j]);
            for (size_t j = 0; j < k; j++) {
                if (ok)
                    send_call(p, nm[j], ar[j]);
                else {
                    free(nm[j]);
                    free(ar[j]);
                }
            }
            free(nm);
            free(ar);
            json_decref(a);
        }
    } else {
        const char *args = memmem(s, n, "[ARGS]", 6);
        if (!args && !eof)
            return 0;
        if (args) {
            size_t an = (size_t)(args - s) + 6;
            long ext = tcp_json_extent(s + an, n - an);
            if (ext == 0 && !eof)
                return 0;
            if (ext > 0) {
                used = an + (size_t)ext;
                const char *id = memmem(s, (size_t)(args - s), "[CALL_ID]", 9);
                size_t nn = (size_t)((id ? id : args) - s);
                char *name, *ar;
                ok = !tcp_call_from_parts(s, nn, s + an, (size_t)ext, &name, &ar);
                if (ok)
                    send_call(p, name, ar);
            } else if (ext < 0) {
                used = an;
            }
        }
    }
    if (!used)
        used = n; /* the end came first */
    if (ok)
        sb_clear(&p->raw);
    else
        send_raw(p, s, used, NULL);
    consume(p, used);
    p->mode = M_CONTENT;
    return 1;
}

/* "<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json"
 * or "<|start|>assistant to=functions.NAME<|channel|>commentary json". */
static void harmony_header(toolparse *p, const char *h, size_t n)
{
    free(p->h_name);
    p->h_name = NULL;
    p->h_kind = K_CONTENT;
    const char *to = memmem(h, n, "to=", 3);
    if (to) {
        const char *r = to + 3, *e = r;
        while (e < h + n && !is_ws(*e) && *e != '<')
            e++;
        if ((size_t)(e - r) > 10 && !memcmp(r, "functions.", 10))
            r += 10;
        int to_assistant = e - r == 9 && !memcmp(r, "assistant", 9);
        if (e > r && !to_assistant) {
            p->h_name = strndup(r, (size_t)(e - r));
            p->h_kind = 2;
            return;
        }
    }
    const char *ch = memmem(h, n, "<|channel|>", 11);
    if (ch && (size_t)(h + n - ch) >= 19 && !memcmp(ch + 11, "analysis", 8))
        p->h_kind = K_REASON;
}

static int step_h_header(toolparse *p, int eof)
{
    /* Only the first HARMONY_HEADER_MAX bytes may hold the end of a header,
     * so the decision does not depend on how much has arrived. */
    size_t lim = HARMONY_HEADER_MAX + 11;
    const char *hit = memmem(p->buf.data, p->buf.len < lim ? p->buf.len : lim, "<|message|>", 11);
    if (!hit) {
        /* Not a header after all (a model answering without channels): the
         * text is content, and the body scan resumes after it. */
        if (eof || p->buf.len >= lim) {
            size_t n = eof ? p->buf.len : HARMONY_HEADER_MAX;
            sink_put(p, K_CONTENT, p->buf.data, n);
            consume(p, n);
            p->h_kind = K_CONTENT;
            p->mode = M_H_BODY;
            return 1;
        }
        return 0;
    }
    size_t n = (size_t)(hit - p->buf.data);
    harmony_header(p, p->buf.data, n);
    consume(p, n + 11);
    p->mode = M_H_BODY;
    if (p->h_kind == K_REASON)
        p->sinks[K_REASON].skip_ws = 1;
    return 1;
}

static int step_h_body(toolparse *p, int eof)
{
    size_t at = 0, safe = 0;
    int nm = (int)(sizeof harmony_ends / sizeof *harmony_ends);
    int w = scan(p->buf.data, p->buf.len, harmony_ends, nm, &at, &safe);
    if (p->h_kind == 2) {
        if (w < 0 && !eof)
            return 0;
        size_t n = w < 0 ? p->buf.len : at;
        char *name, *args;
        if (!tcp_call_from_parts(p->h_name, strlen(p->h_name), p->buf.data, n, &name, &args))
            send_call(p, name, args);
        else
            sink_put(p, K_CONTENT, p->buf.data, n);
        consume(p, n);
    } else {
        int k = p->h_kind;
        if (w < 0) {
            size_t n = eof ? p->buf.len : safe;
            sink_put(p, k, p->buf.data, n);
            consume(p, n);
            return 0;
        }
        sink_put(p, k, p->buf.data, at);
        sink_drop_ws(p, k);
        consume(p, at);
        if (k == K_CONTENT)
            p->sinks[K_CONTENT].skip_ws = 1;
    }
    if (w >= 0 && w <= 2)
        consume(p, strlen(harmony_ends[w])); /* <|start|> and <|channel|> open the header */
    p->mode = M_H_HEADER;
    return 1;
}

static void run(toolparse *p, int eof)
{
    for (;;) {
        int more;
        switch (p->mode) {
        case M_START: more = step_start(p, eof); break;
        case M_CONTENT: more = step_text(p, eof); break;
        case M_REASON: more = step_reason(p, eof); break;
        case M_SECTION: more = step_section(p, eof); break;
        case M_CALL: more = step_call(p, eof); break;
        case M_WHOLE: more = step_whole(p, eof); break;
        case M_MISTRAL: more = step_mistral(p, eof); break;
        case M_H_HEADER: more = step_h_header(p, eof); break;
        case M_H_BODY: more = step_h_body(p, eof); break;
        default: more = 0; break;
        }
        if (more)
            continue;
        if (eof && p->buf.len) { /* no step claimed the tail: it is content */
            sink_put(p, K_CONTENT, p->buf.data, p->buf.len);
            consume(p, p->buf.len);
        }
        return;
    }
}

/* ---- the API ------------------------------------------------------------ */

toolparse *toolparse_new(toolparse_format f, const toolparse_opts *opts)
{
    if (f < 0 || f >= TOOLPARSE_FORMAT_COUNT)
        f = TOOLPARSE_NONE;
    toolparse *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    p->f = f;
    p->tags = &format_tags[f];
    if (opts)
        p->opts = *opts;
    rng_seed(&p->rng, p->opts.id_seed, 0x746f6f6c); /* "tool" */
    for (int k = 0; k < 2; k++) {
        sb_init(&p->sinks[k].held);
        sb_init(&p->out[k]);
    }
    sb_init(&p->buf);
    sb_init(&p->raw);
    if (f == TOOLPARSE_HARMONY)
        p->mode = M_H_HEADER;
    else if (p->opts.starts_in_reasoning && p->tags->think_open)
        open_reasoning(p);
    else
        p->mode = f == TOOLPARSE_LLAMA3 ? M_START : M_CONTENT;
    return p;
}

void toolparse_feed(toolparse *p, const char *text, size_t len, toolparse_cb cb, void *user)
{
    if (p->finished)
        abort();
    p->cb = cb;
    p->user = user;
    sb_append(&p->buf, text, len);
    if (p->buf.data)
        run(p, 0);
}

void toolparse_finish(toolparse *p, toolparse_cb cb, void *user, toolparse_result *out)
{
    p->cb = cb;
    p->user = user;
    if (!p->finished && p->buf.data)
        run(p, 1);
    p->finished = 1;
    sink_end(p, K_REASON);
    sink_end(p, K_CONTENT);
    memset(out, 0, sizeof *out);
    out->content = strdup(sb_str(&p->out[K_CONTENT]));
    out->reasoning = strdup(sb_str(&p->out[K_REASON]));
    out->n_calls = p->n_calls;
    out->calls = calloc((size_t)p->n_calls + 1, sizeof *out->calls);
    for (int i = 0; i < p->n_calls; i++) {
        out->calls[i].id = strdup(p->calls[i].id);
        out->calls[i].name = strdup(p->calls[i].name);
        out->calls[i].arguments = strdup(p->calls[i].arguments);
    }
    out->finish_reason = p->n_calls ? "tool_calls" : NULL;
}

void toolparse_free(toolparse *p)
{
    if (!p)
        return;
    for (int k = 0; k < 2; k++) {
        sb_free(&p->sinks[k].held);
        sb_free(&p->out[k]);
    }
    sb_free(&p->buf);
    sb_free(&p->raw);
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].id);
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    free(p->h_name);
    free(p);
}

void toolparse_result_free(toolparse_result *r)
{
    for (int i = 0; i < r->n_calls; i++) {
        free(r->calls[i].id);
        free(r->calls[i].name);
        free(r->calls[i].arguments);
    }
    free(r->calls);
    free(r->content);
    free(r->reasoning);
    memset(r, 0, sizeof *r);
}

json_t *toolparse_result_message(const toolparse_result *r)
{
    json_t *m = json_object();
    json_object_set_new(m, "role", json_string("assistant"));
    json_object_set_new(m, "content", r->n_calls && !*r->content ? json_null()
                                                                 : json_string(r->content));
    if (*r->reasoning)
        json_object_set_new(m, "reasoning_content", json_string(r->reasoning));
    if (r->n_calls) {
        json_t *a = json_array();
        for (int i = 0; i < r->n_calls; i++) {
            json_t *fn = json_object();
            json_object_set_new(fn, "name", json_string(r->calls[i].name));
            json_object_set_new(fn, "arguments", json_string(r->calls[i].arguments));
            json_t *c = json_object();
            json_object_set_new(c, "id", json_string(r->calls[i].id));
            json_object_set_new(c, "type", json_string("function"));
            json_object_set_new(c, "function", fn);
            json_array_append_new(a, c);
        }
        json_object_set_new(m, "tool_calls", a);
    }
    return m;
}
