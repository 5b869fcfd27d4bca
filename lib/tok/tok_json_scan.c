/* Fast reading of the two big members of a tokenizer.json.
 *
 * model.vocab (hundreds of thousands of "token": id pairs) and model.merges
 * (as many "a b" strings or ["a", "b"] pairs) are nearly all of the file:
 * building a jansson tree of them and freeing it takes over a second for
 * Gemma 3's 33 MB. So we find those two values with a structural scan,
 * read them here into flat arrays, and hand jansson a copy of the file with
 * both blanked out ({} and [] padded with spaces), which it parses in a
 * few milliseconds. Anything this reader does not expect (bad escapes,
 * invalid UTF-8, other shapes) makes it give up, and the caller parses the
 * whole file with jansson, whose errors then name the problem. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "tok/tok_json_scan.h"
#include "tok/tok_internal.h"

typedef struct {
    const char *p, *end;
    arena *mem;
} scan;

static void ws(scan *s)
{
    while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\r' || *s->p == '\t'))
        s->p++;
}

static int hex4(const char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* A JSON string at s->p: its decoded bytes (pointing into the file when it
 * has no escapes). */
static int read_string(scan *s, const char **out, size_t *len)
{
    if (s->p >= s->end || *s->p != '"')
        return -1;
    const char *a = ++s->p;
    int escaped = 0;
    while (s->p < s->end && *s->p != '"') {
        if ((unsigned char)*s->p < 0x20)
            return -1;
        if (*s->p == '\\') {
            escaped = 1;
            s->p++;
        }
        s->p++;
    }
    if (s->p >= s->end)
        return -1;
    const char *b = s->p++;
    if (!escaped) {
        if (!tok_utf8_valid(a, (size_t)(b - a)))
            return -1;
        *out = a;
        *len = (size_t)(b - a);
        return 0;
    }
    char *o = arena_alloc(s->mem, (size_t)(b - a) + 1);
    size_t k = 0;
    for (const char *q = a; q < b; q++) {
        if (*q != '\\') {
            o[k++] = *q;
            continue;
        }
        q++;
        switch (*q) {
        case '"': o[k++] = '"'; break;
        case '\\': o[k++] = '\\'; break;
        case '/': o[k++] = '/'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'u': {
            uint32_t v, w;
            if (b - q < 5 || hex4(q + 1, &v))
                return -1;
            q += 4;
            if (v >= 0xD800 && v <= 0xDBFF) {
                if (b - q < 7 || q[1] != '\\' || q[2] != 'u' || hex4(q + 3, &w) || w < 0xDC00 ||
                    w > 0xDFFF)
                    return -1;
                v = 0x10000 + ((v - 0xD800) << 10) + (w - 0xDC00);
                q += 6;
            } else if (v >= 0xDC00 && v <= 0xDFFF) {
                return -1;
            }
            if (v == 0)
                return -1; /* NUL inside a token: leave it to jansson */
            k += tok_utf8_encode(v, o + k);
            break;
        }
        default:
            return -1;
        }
    }
    if (!tok_utf8_valid(o, k))
        return -1;
    *out = o;
    *len = k;
    return 0;
}

/* Skip any JSON value (structure only; the blanked copy is validated by
 * jansson, the read values here). */
static int skip_value(scan *s)
{
    ws(s);
    if (s->p >= s->end)
        return -1;
    char c = *s->p;
    if (c == '"') {
        s->p++;
        while (s->p < s->end && *s->p != '"') {
            if (*s->p == '\\')
                s->p++;
            s->p++;
        }
        if (s->p >= s->end)
            return -1;
        s->p++;
        return 0;
    }
    if (c == '{' || c == '[') {
        int depth = 0;
        while (s->p < s->end) {
            char d = *s->p;
            if (d == '"') {
                if (skip_value(s))
                    return -1;
                continue;
            }
            if (d == '{' || d == '[')
                depth++;
            else if (d == '}' || d == ']')
                depth--;
            s->p++;
            if (depth == 0)
                return 0;
        }
        return -1;
    }
    while (s->p < s->end && *s->p != ',' && *s->p != '}' && *s->p != ']' && *s->p != ' ' &&
           *s->p != '\n' && *s->p != '\r' && *s->p != '\t')
        s->p++;
    return 0;
}

/* Walk the object at s->p; for each member, `visit` reads or skips the
 * value at s->p (returning -1 on anything unexpected). */
typedef int (*member_fn)(scan *s, const char *key, size_t klen, void *ctx);

static int walk_object(scan *s, member_fn visit, void *ctx)
{
    ws(s);
    if (s->p >= s->end || *s->p != '{')
        return -1;
    s->p++;
    for (;;) {
        ws(s);
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            return 0;
        }
        const char *k;
        size_t kl;
        if (read_string(s, &k, &kl))
            return -1;
        ws(s);
        if (s->p >= s->end || *s->p != ':')
            return -1;
        s->p++;
        ws(s);
        if (visit(s, k, kl, ctx))
            return -1;
        ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == '}') {
            s->p++;
            return 0;
        }
        return -1;
    }
}

static int key_is(const char *k, size_t kl, const char *name)
{
    return strlen(name) == kl && memcmp(k, name, kl) == 0;
}

static int read_vocab(scan *s, tok_json_big *out)
{
    size_t cap = 1024;
    out->vocab = xmalloc(cap * sizeof *out->vocab);
    ws(s);
    if (*s->p != '{')
        return -1;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == '}')
        return 0;
    for (;;) {
        ws(s);
        tok_json_vocab_entry e;
        size_t l;
        if (read_string(s, &e.s, &l))
            return -1;
        e.len = l;
        ws(s);
        if (s->p >= s->end || *s->p != ':')
            return -1;
        s->p++;
        ws(s);
        int64_t v = 0;
        const char *d = s->p;
        if (s->p < s->end && *s->p == '-')
            return -1;
        while (s->p < s->end && *s->p >= '0' && *s->p <= '9' && s->p - d < 12)
            v = v * 10 + (*s->p++ - '0');
        if (s->p == d || (s->p < s->end && (*s->p == '.' || *s->p == 'e' || *s->p == 'E')))
            return -1;
        e.id = v;
        if (out->n_vocab == cap) {
            cap *= 2;
            out->vocab = xrealloc(out->vocab, cap * sizeof *out->vocab);
        }
        out->vocab[out->n_vocab++] = e;
        ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == '}')
            return 0;
        return -1;
    }
}

static int read_merges(scan *s, tok_json_big *out)
{
    size_t cap = 1024;
    out->merges = xmalloc(cap * sizeof *out->merges);
    ws(s);
    if (*s->p != '[')
        return -1;
    s->p++;
    ws(s);
    if (s->p < s->end && *s->p == ']')
        return 0;
    for (;;) {
        ws(s);
        tok_json_merge m;
        size_t la, lb;
        if (s->p < s->end && *s->p == '"') {
            const char *x;
            size_t xl;
            if (read_string(s, &x, &xl))
                return -1;
            const char *sp = memchr(x, ' ', xl);
            if (!sp || memchr(sp + 1, ' ', xl - (size_t)(sp + 1 - x)))
                return -1;
            m.a = x, la = (size_t)(sp - x), m.b = sp + 1, lb = xl - la - 1;
        } else if (s->p < s->end && *s->p == '[') {
            s->p++;
            ws(s);
            if (read_string(s, &m.a, &la))
                return -1;
            ws(s);
            if (s->p >= s->end || *s->p != ',')
                return -1;
            s->p++;
            ws(s);
            if (read_string(s, &m.b, &lb))
                return -1;
            ws(s);
            if (s->p >= s->end || *s->p != ']')
                return -1;
            s->p++;
        } else {
            return -1;
        }
        m.la = la;
        m.lb = lb;
        if (out->n_merges == cap) {
            cap *= 2;
            out->merges = xrealloc(out->merges, cap * sizeof *out->merges);
        }
        out->merges[out->n_merges++] = m;
        ws(s);
        if (s->p < s->end && *s->p == ',') {
            s->p++;
            continue;
        }
        if (s->p < s->end && *s->p == ']')
            return 0;
        return -1;
    }
}

void tok_json_big_free(tok_json_big *b)
{
    free(b->vocab);
    free(b->merges);
    arena_free(&b->mem);
    memset(b, 0, sizeof *b);
}

typedef struct {
    tok_json_big *out;
    const char *base;
    int got_vocab, got_merges, got_model;
} scan_ctx;

static int visit_model(scan *s, const char *k, size_t kl, void *vctx)
{
    scan_ctx *c = vctx;
    if (key_is(k, kl, "vocab") && !c->got_vocab) {
        c->out->vocab_at = (size_t)(s->p - c->base);
        if (read_vocab(s, c->out))
            return -1;
        s->p++; /* the closing brace */
        c->out->vocab_len = (size_t)(s->p - c->base) - c->out->vocab_at;
        c->got_vocab = 1;
        return 0;
    }
    if (key_is(k, kl, "merges") && !c->got_merges) {
        c->out->merges_at = (size_t)(s->p - c->base);
        if (read_merges(s, c->out))
            return -1;
        s->p++; /* the closing bracket */
        c->out->merges_len = (size_t)(s->p - c->base) - c->out->merges_at;
        c->got_merges = 1;
        return 0;
    }
    return skip_value(s);
}

static int visit_root(scan *s, const char *k, size_t kl, void *vctx)
{
    scan_ctx *c = vctx;
    if (key_is(k, kl, "model") && !c->got_model) {
        c->got_model = 1;
        return walk_object(s, visit_model, c);
    }
    return skip_value(s);
}

int tok_json_scan_model(char *buf, size_t len, tok_json_big *out)
{
    memset(out, 0, sizeof *out);
    arena_init(&out->mem, 1 << 16);
    scan s = {buf, buf + len, &out->mem};
    scan_ctx c = {out, buf, 0, 0, 0};
    if (walk_object(&s, visit_root, &c) || !c.got_vocab || !c.got_merges)
        goto fail;
    out->found = 1;
    return 0;
fail:
    tok_json_big_free(out);
    return -1;
}

size_t tok_json_without_big(const char *src, size_t len, const tok_json_big *b, char *dst)
{
    size_t a0 = b->vocab_at, a1 = b->vocab_at + b->vocab_len;
    size_t b0 = b->merges_at, b1 = b->merges_at + b->merges_len;
    const char *ra = "{}", *rb = "[]";
    if (b0 < a0) {
        size_t t0 = a0, t1 = a1;
        a0 = b0, a1 = b1, b0 = t0, b1 = t1;
        ra = "[]", rb = "{}";
    }
    size_t o = 0;
    memcpy(dst + o, src, a0), o += a0;
    memcpy(dst + o, ra, 2), o += 2;
    memcpy(dst + o, src + a1, b0 - a1), o += b0 - a1;
    memcpy(dst + o, rb, 2), o += 2;
    memcpy(dst + o, src + b1, len - b1), o += len - b1;
    dst[o] = '\0';
    return o;
}
