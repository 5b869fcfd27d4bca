/* A JSON Schema `pattern` (an ECMA-262 regular expression) as a GBNF
 * expression over the JSON text of a string's contents.
 *
 * The grammar constrains JSON text, so every character the regex matches is
 * written as JSON would write it: `"` as \", `\` as \\, control characters
 * as their escapes; everything else raw. A pattern is unanchored unless it
 * starts with ^ / ends with $, as JSON Schema says, so an unanchored side
 * lets any characters through.
 *
 * The subset: literals, escapes (\d \w \s \D \W \S, \t \n \r \f \v \0, \xHH,
 * \uHHHH, escaped metacharacters), classes [...] and [^...], `.`, groups
 * (...) and (?:...), alternation, and the quantifiers * + ? {m} {m,} {m,n}
 * (lazy forms too: for matching they are the same). Refused with the offset:
 * back-references, lookaround, word boundaries, named groups, Unicode
 * property classes and anchors anywhere but the ends. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "grammar/gram_internal.h"
#include "grammar/jsch_internal.h"

typedef struct {
    const char *re;
    size_t len, pos;
    const char *path;
    memra_err *err;
    int failed;
} rx;

__attribute__((format(printf, 2, 3))) static int rx_fail(rx *r, const char *fmt, ...)
{
    if (r->failed)
        return -1;
    r->failed = 1;
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return memra_fail(r->err, "schema %s: pattern '%s': %s at offset %zu", r->path, r->re, msg,
                      r->pos);
}

typedef struct {
    gram_cprange *v;
    int n, cap;
} cpset;

static void cp_add(cpset *s, uint32_t lo, uint32_t hi)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->v = xrealloc(s->v, (size_t)s->cap * sizeof *s->v);
    }
    s->v[s->n++] = (gram_cprange){lo, hi};
}

static int cmp_cp(const void *a, const void *b)
{
    const gram_cprange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* Sorted and merged; complemented over all characters when negated. */
static void cp_normalize(cpset *s, int negated)
{
    qsort(s->v, (size_t)s->n, sizeof *s->v, cmp_cp);
    int m = 0;
    for (int i = 0; i < s->n; i++) {
        if (m && s->v[i].lo <= s->v[m - 1].hi + 1) {
            if (s->v[i].hi > s->v[m - 1].hi)
                s->v[m - 1].hi = s->v[i].hi;
        } else {
            s->v[m++] = s->v[i];
        }
    }
    s->n = m;
    if (!negated)
        return;
    cpset c = {0};
    uint32_t next = 0;
    for (int i = 0; i < s->n; i++) {
        if (s->v[i].lo > next)
            cp_add(&c, next, s->v[i].lo - 1);
        next = s->v[i].hi + 1;
    }
    if (next <= 0x10FFFF)
        cp_add(&c, next, 0x10FFFF);
    free(s->v);
    *s = c;
}

static int cp_has(const cpset *s, uint32_t c)
{
    for (int i = 0; i < s->n; i++)
        if (c >= s->v[i].lo && c <= s->v[i].hi)
            return 1;
    return 0;
}

static void add_class_escape(cpset *s, char e)
{
    switch (e) {
    case 'd':
        cp_add(s, '0', '9');
        break;
    case 'w':
        cp_add(s, '0', '9');
        cp_add(s, 'A', 'Z');
        cp_add(s, 'a', 'z');
        cp_add(s, '_', '_');
        break;
    case 's':
        cp_add(s, '\t', '\r');
        cp_add(s, ' ', ' ');
        cp_add(s, 0xA0, 0xA0);
        cp_add(s, 0x2028, 0x2029);
        cp_add(s, 0xFEFF, 0xFEFF);
        break;
    }
}

/* The characters a set matches, written as JSON text: a class of the raw
 * ones, and the escaped forms of the quote, backslash and control
 * characters it holds. */
static void emit_set(const cpset *s, strbuf *out)
{
    static const char *const ctl[32] = {
        NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "b", "t", "n", NULL, "f", "r"};
    int alts = 0;
    sb_puts(out, "( ");
    strbuf cls;
    sb_init(&cls);
    for (int i = 0; i < s->n; i++) {
        uint32_t lo = s->v[i].lo, hi = s->v[i].hi;
        /* Raw characters: from 0x20, without '"' and '\'. */
        uint32_t cuts[][2] = {{0x20, 0x21}, {0x23, 0x5B}, {0x5D, 0x10FFFF}};
        for (int k = 0; k < 3; k++) {
            uint32_t a = lo > cuts[k][0] ? lo : cuts[k][0];
            uint32_t b = hi < cuts[k][1] ? hi : cuts[k][1];
            if (a <= b)
                sb_printf(&cls, "\\U%08X-\\U%08X", a, b);
        }
    }
    if (cls.len) {
        sb_printf(out, "[%s]", sb_str(&cls));
        alts++;
    }
    sb_free(&cls);
    if (cp_has(s, '"'))
        sb_printf(out, "%s\"\\\\\\\"\"", alts++ ? " | " : "");
    if (cp_has(s, '\\'))
        sb_printf(out, "%s\"\\\\\\\\\"", alts++ ? " | " : "");
    for (uint32_t c = 0; c < 0x20; c++) {
        if (!cp_has(s, c))
            continue;
        if (ctl[c])
            sb_printf(out, "%s\"\\\\%s\"", alts++ ? " | " : "", ctl[c]);
        else
            sb_printf(out, "%s\"\\\\u%04x\"", alts++ ? " | " : "", c);
    }
    if (!alts)
        sb_puts(out, "[^\\x00-\\U0010FFFF]"); /* matches nothing */
    sb_puts(out, " )");
}

static int hexdigits(rx *r, int n, uint32_t *out)
{
    uint32_t v = 0;
    for (int i = 0; i < n; i++) {
        char c = r->pos < r->len ? r->re[r->pos] : 0;
        int h = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (h < 0)
            return rx_fail(r, "escape needs %d hex digits", n);
        v = v * 16 + (uint32_t)h;
        r->pos++;
    }
    *out = v;
    return 0;
}

/* One character (UTF-8 decoded) at pos. */
static uint32_t next_cp(rx *r)
{
    const unsigned char *s = (const unsigned char *)r->re;
    unsigned c = s[r->pos];
    int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    if (r->pos + (size_t)n > r->len)
        n = 1;
    uint32_t v = n == 1 ? c : c & (0x7Fu >> n);
    for (int i = 1; i < n; i++)
        v = (v << 6) | (s[r->pos + (size_t)i] & 0x3F);
    r->pos += (size_t)n;
    return v;
}

/* An escape after '\': a character (*cp) or a class added to s (returns 1). */
static int read_escape(rx *r, cpset *s, uint32_t *cp)
{
    if (r->pos >= r->len)
        return rx_fail(r, "'\\' at the end");
    char e = r->re[r->pos++];
    switch (e) {
    case 'd': case 'w': case 's':
        add_class_escape(s, e);
        return 1;
    case 'D': case 'W': case 'S': {
        cpset t = {0};
        add_class_escape(&t, (char)(e - 'A' + 'a'));
        cp_normalize(&t, 1);
        for (int i = 0; i < t.n; i++)
            cp_add(s, t.v[i].lo, t.v[i].hi);
        free(t.v);
        return 1;
    }
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'x': return hexdigits(r, 2, cp) ? -1 : 0;
    case 'u': return hexdigits(r, 4, cp) ? -1 : 0;
    default:
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')) {
            r->pos--;
            return rx_fail(r, "escape '\\%c' is not supported", e);
        }
        *cp = (uint32_t)(unsigned char)e;
        return 0;
    }
}

static int parse_alt(rx *r, strbuf *out);

static int parse_class(rx *r, strbuf *out)
{
    r->pos++; /* [ */
    int negated = 0;
    if (r->pos < r->len && r->re[r->pos] == '^') {
        negated = 1;
        r->pos++;
    }
    cpset s = {0};
    while (r->pos < r->len && r->re[r->pos] != ']') {
        uint32_t lo, hi;
        if (r->re[r->pos] == '\\') {
            r->pos++;
            int k = read_escape(r, &s, &lo);
            if (k < 0) {
                free(s.v);
                return -1;
            }
            if (k == 1)
                continue;
        } else {
            lo = next_cp(r);
        }
        hi = lo;
        if (r->pos + 1 < r->len && r->re[r->pos] == '-' && r->re[r->pos + 1] != ']') {
            r->pos++;
            if (r->re[r->pos] == '\\') {
                r->pos++;
                cpset dummy = {0};
                int k = read_escape(r, &dummy, &hi);
                free(dummy.v);
                if (k != 0) {
                    free(s.v);
                    return k < 0 ? -1 : rx_fail(r, "a class escape ends a range");
                }
            } else {
                hi = next_cp(r);
            }
            if (hi < lo) {
                free(s.v);
                return rx_fail(r, "range out of order");
            }
        }
        cp_add(&s, lo, hi);
    }
    if (r->pos >= r->len) {
        free(s.v);
        return rx_fail(r, "unterminated '['");
    }
    r->pos++;
    cp_normalize(&s, negated);
    emit_set(&s, out);
    free(s.v);
    return 0;
}

static int parse_atom(rx *r, strbuf *out)
{
    char c = r->re[r->pos];
    if (c == '(') {
        r->pos++;
        if (r->pos < r->len && r->re[r->pos] == '?') {
            if (r->pos + 1 < r->len && r->re[r->pos + 1] == ':')
                r->pos += 2;
            else
                return rx_fail(r, "lookaround and named groups are not supported");
        }
        sb_puts(out, "( ");
        if (parse_alt(r, out))
            return -1;
        if (r->pos >= r->len || r->re[r->pos] != ')')
            return rx_fail(r, "unclosed '('");
        r->pos++;
        sb_puts(out, " )");
        return 0;
    }
    if (c == '[')
        return parse_class(r, out);
    cpset s = {0};
    uint32_t cp;
    if (c == '.') {
        r->pos++;
        cp_add(&s, '\n', '\n');
        cp_add(&s, '\r', '\r');
        cp_add(&s, 0x2028, 0x2029);
        cp_normalize(&s, 1);
    } else if (c == '\\') {
        r->pos++;
        if (r->pos < r->len && (r->re[r->pos] == 'b' || r->re[r->pos] == 'B'))
            return rx_fail(r, "word boundaries are not supported");
        if (r->pos < r->len && r->re[r->pos] >= '1' && r->re[r->pos] <= '9')
            return rx_fail(r, "back-references are not supported");
        int k = read_escape(r, &s, &cp);
        if (k < 0) {
            free(s.v);
            return -1;
        }
        if (k == 0)
            cp_add(&s, cp, cp);
        cp_normalize(&s, 0);
    } else if (c == '^' || c == '$') {
        return rx_fail(r, "'%c' inside the pattern is not supported", c);
    } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        return rx_fail(r, "'%c' follows nothing it could repeat", c);
    } else {
        cp = next_cp(r);
        cp_add(&s, cp, cp);
    }
    emit_set(&s, out);
    free(s.v);
    return 0;
}

static int read_count(rx *r, int *out)
{
    int v = -1;
    while (r->pos < r->len && r->re[r->pos] >= '0' && r->re[r->pos] <= '9') {
        v = (v < 0 ? 0 : v) * 10 + (r->re[r->pos++] - '0');
        if (v > 4096)
            return rx_fail(r, "repetition count over 4096");
    }
    *out = v;
    return 0;
}

static int parse_seq(rx *r, strbuf *out)
{
    int any = 0;
    while (r->pos < r->len && r->re[r->pos] != '|' && r->re[r->pos] != ')') {
        if (r->re[r->pos] == '$' && r->pos + 1 == r->len)
            break; /* the end anchor, handled by the caller */
        sb_puts(out, any++ ? " ( " : "( ");
        if (parse_atom(r, out))
            return -1;
        sb_puts(out, " )");
        if (r->pos >= r->len)
            break;
        char q = r->re[r->pos];
        if (q == '*' || q == '+' || q == '?') {
            sb_putc(out, q);
            r->pos++;
        } else if (q == '{') {
            size_t save = r->pos;
            r->pos++;
            int m, n;
            if (read_count(r, &m))
                return -1;
            n = m;
            if (r->pos < r->len && r->re[r->pos] == ',') {
                r->pos++;
                if (read_count(r, &n))
                    return -1;
            }
            if (m < 0 || r->pos >= r->len || r->re[r->pos] != '}') {
                r->pos = save;
                return rx_fail(r, "'{' is not a repetition {m}, {m,} or {m,n}");
            }
            r->pos++;
            if (n >= 0 && n < m)
                return rx_fail(r, "repetition {%d,%d} is backwards", m, n);
            if (n < 0)
                sb_printf(out, "{%d,}", m);
            else
                sb_printf(out, "{%d,%d}", m, n);
        } else {
            continue;
        }
        if (r->pos < r->len && r->re[r->pos] == '?')
            r->pos++; /* lazy: the same strings */
        else if (r->pos < r->len && r->re[r->pos] == '+')
            return rx_fail(r, "possessive quantifiers are not supported");
    }
    if (!any)
        sb_puts(out, "\"\"");
    return 0;
}

static int parse_alt(rx *r, strbuf *out)
{
    for (;;) {
        sb_puts(out, "( ");
        if (parse_seq(r, out))
            return -1;
        sb_puts(out, " )");
        if (r->pos >= r->len || r->re[r->pos] != '|')
            return 0;
        r->pos++;
        sb_puts(out, " | ");
    }
}

int jsch_pattern(const char *re, const char *path, strbuf *out, memra_err *err)
{
    rx r = {.re = re, .len = strlen(re), .path = path, .err = err};
    int start = r.len && re[0] == '^';
    if (start)
        r.pos = 1;
    if (!start)
        sb_puts(out, "char* ");
    sb_puts(out, "( ");
    if (parse_alt(&r, out))
        return -1;
    int end = r.pos + 1 == r.len && re[r.pos] == '$';
    if (!end && r.pos < r.len)
        return rx_fail(&r, "unexpected '%c'", re[r.pos]);
    sb_puts(out, " )");
    if (!end)
        sb_puts(out, " char*");
    return 0;
}
