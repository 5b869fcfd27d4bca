/* GBNF, llama.cpp's grammar format, parsed into the builder.
 *
 *   root  ::= "{" ws pair ("," ws pair)* "}"   # a comment
 *   pair  ::= [a-z]+ ":" [^\n]{1,8}
 *
 * Rules are `name ::= alternatives`; a rule ends at the end of its line
 * unless a group is still open, the line ends in `|` or `::=`, or the next
 * line starts with `|`. Elements: "literals" and [classes] with escapes
 * (\n \r \t \\ \" \xHH \uHHHH \UHHHHHHHH ...), [^...] negation, `.` (any
 * character), rule names, ( groups ), and the postfixes * + ? {m} {m,}
 * {m,n} {,n}. Names are letters, digits, '-' and '_'. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/salt.h"
#include "grammar/gram_internal.h"

#define GBNF_MAX_REPEAT 4096

typedef struct {
    const char *src;
    size_t len, pos;
    gram_builder b;
    memra_err *err;
    int failed;
    int depth;
} gbnf_parser;

static void where(const gbnf_parser *p, size_t at, int *line, int *col)
{
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at && i < p->len; i++) {
        if (p->src[i] == '\n') {
            (*line)++;
            *col = 1;
        } else {
            (*col)++;
        }
    }
}

__attribute__((format(printf, 3, 4))) static int fail_at(gbnf_parser *p, size_t at,
                                                         const char *fmt, ...)
{
    if (p->failed)
        return -1;
    int line, col;
    where(p, at, &line, &col);
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    p->failed = 1;
    return memra_fail(p->err, "gbnf %d:%d: %s", line, col, msg);
}

static int peek(const gbnf_parser *p)
{
    return p->pos < p->len ? (unsigned char)p->src[p->pos] : -1;
}

static int is_name_char(int c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when `newlines`. */
static void skip_space(gbnf_parser *p, int newlines)
{
    while (p->pos < p->len) {
        char c = p->src[p->pos];
        if (c == ' ' || c == '\t' || c == '\r') {
            p->pos++;
        } else if (c == '#') {
            while (p->pos < p->len && p->src[p->pos] != '\n')
                p->pos++;
        } else if (c == '\n' && newlines) {
            p->pos++;
        } else {
            break;
        }
    }
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class, escapes decoded, as a code point. */
static int read_char(gbnf_parser *p, uint32_t *cp)
{
    size_t at = p->pos;
    const unsigned char *s = (const unsigned char *)p->src;
    if (p->pos >= p->len)
        return fail_at(p, at, "unexpected end of grammar");
    unsigned c = s[p->pos];
    if (c == '\\') {
        if (p->pos + 1 >= p->len)
            return fail_at(p, at, "unexpected end of grammar after '\\'");
        char e = p->src[p->pos + 1];
        p->pos += 2;
        int nhex = 0;
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case '0': *cp = 0; return 0;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
            *cp = (uint32_t)e;
            return 0;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        default:
            return fail_at(p, at, "unknown escape '\\%c'", e);
        }
        uint32_t v = 0;
        for (int i = 0; i < nhex; i++) {
            int h = p->pos < p->len ? hexval((unsigned char)p->src[p->pos]) : -1;
            if (h < 0)
                return fail_at(p, at, "escape '\\%c' needs %d hex digits", e, nhex);
            v = v * 16 + (uint32_t)h;
            p->pos++;
        }
        if (v > 0x10FFFF)
            return fail_at(p, at, "escape past U+10FFFF");
        *cp = v;
        return 0;
    }
    if (c < 0x80) {
        *cp = c;
        p->pos++;
        return 0;
    }
    int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
    if (n == 0 || p->pos + (size_t)n > p->len)
        return fail_at(p, at, "invalid UTF-8 in the grammar");
    uint32_t v = c & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        unsigned d = s[p->pos + (size_t)i];
        if ((d & 0xC0) != 0x80)
            return fail_at(p, at, "invalid UTF-8 in the grammar");
        v = (v << 6) | (d & 0x3F);
    }
    p->pos += (size_t)n;
    *cp = v;
    return 0;
}

static void push_cp(gbnf_parser *p, gb_seq *seq, uint32_t cp)
{
    uint8_t buf[4];
    size_t n;
    if (cp < 0x80) {
        buf[0] = (uint8_t)cp;
        n = 1;
    } else if (cp < 0x800) {
        buf[0] = (uint8_t)(0xC0 | (cp >> 6));
        buf[1] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 2;
    } else if (cp < 0x10000) {
        buf[0] = (uint8_t)(0xE0 | (cp >> 12));
        buf[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        buf[2] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 3;
    } else {
        buf[0] = (uint8_t)(0xF0 | (cp >> 18));
        buf[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        buf[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        buf[3] = (uint8_t)(0x80 | (cp & 0x3F));
        n = 4;
    }
    gb_push_literal(&p->b, seq, buf, n);
}

static int parse_alternatives(gbnf_parser *p, int rule);

static int parse_class(gbnf_parser *p, gb_seq *seq, const char *base)
{
    size_t at = p->pos;
    p->pos++; /* [ */
    int negated = 0;
    if (peek(p) == '^') {
        negated = 1;
        p->pos++;
    }
    gram_cprange *r = NULL;
    int n = 0, cap = 0;
    while (peek(p) != ']') {
        if (p->pos >= p->len || peek(p) == '\n') {
            free(r);
            return fail_at(p, at, "unterminated character class");
        }
        uint32_t lo, hi;
        if (read_char(p, &lo)) {
            free(r);
            return -1;
        }
        hi = lo;
        if (peek(p) == '-' && p->pos + 1 < p->len && p->src[p->pos + 1] != ']') {
            p->pos++;
            size_t hat = p->pos;
            if (read_char(p, &hi)) {
                free(r);
                return -1;
            }
            if (hi < lo) {
                free(r);
                return fail_at(p, hat, "character range is backwards");
            }
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            r = xrealloc(r, (size_t)cap * sizeof *r);
        }
        r[n++] = (gram_cprange){lo, hi};
    }
    p->pos++; /* ] */
    if (n == 0 && !negated) {
        free(r);
        return fail_at(p, at, "empty character class matches nothing");
    }
    gb_push_class(&p->b, seq, r, n, negated, base);
    free(r);
    return 0;
}

/* Wraps seq[from..] into a new rule so a postfix applies to one element. */
static void wrap_tail(gbnf_parser *p, gb_seq *seq, int from, const char *base)
{
    if (seq->n - from == 1)
        return;
    int r = gb_new_rule(&p->b, base);
    gb_seq inner = {0};
    for (int i = from; i < seq->n; i++)
        gb_seq_push(&inner, seq->v[i].kind, seq->v[i].arg);
    gb_add_alt(&p->b, r, &inner);
    seq->n = from;
    gb_seq_push(seq, GE_REF, (uint32_t)r);
}

static int read_uint(gbnf_parser *p, int *out)
{
    int c = peek(p), v = 0, any = 0;
    while (c >= '0' && c <= '9') {
        v = v * 10 + (c - '0');
        if (v > GBNF_MAX_REPEAT)
            return fail_at(p, p->pos, "repetition count over %d", GBNF_MAX_REPEAT);
        any = 1;
        p->pos++;
        c = peek(p);
    }
    *out = any ? v : -1;
    return 0;
}

/* X{min,max} (max -1: unbounded) as rules: min copies, then either X*
 * (star ::= X star | ) or a chain of nested optionals (opt_k ::= X opt_k-1 | ). */
static void repeat(gbnf_parser *p, gb_seq *seq, int min, int max, const char *base)
{
    gram_elem x = seq->v[seq->n - 1];
    seq->n--;
    for (int i = 0; i < min; i++)
        gb_seq_push(seq, x.kind, x.arg);
    if (max < 0) {
        int star = gb_new_rule(&p->b, base);
        gb_seq a = {0}, e = {0};
        gb_seq_push(&a, x.kind, x.arg);
        gb_seq_push(&a, GE_REF, (uint32_t)star);
        gb_add_alt(&p->b, star, &a);
        gb_add_alt(&p->b, star, &e);
        gb_seq_push(seq, GE_REF, (uint32_t)star);
        return;
    }
    int prev = -1;
    for (int k = 0; k < max - min; k++) {
        int opt = gb_new_rule(&p->b, base);
        gb_seq a = {0}, e = {0};
        gb_seq_push(&a, x.kind, x.arg);
        if (prev >= 0)
            gb_seq_push(&a, GE_REF, (uint32_t)prev);
        gb_add_alt(&p->b, opt, &a);
        gb_add_alt(&p->b, opt, &e);
        prev = opt;
    }
    if (prev >= 0)
        gb_seq_push(seq, GE_REF, (uint32_t)prev);
}

/* One sequence, up to '|', ')', the end of the line (outside groups) or the
 * end of the text. */
static int parse_sequence(gbnf_parser *p, int rule, gb_seq *seq)
{
    const char *base = p->b.rules[rule].name;
    int last = -1; /* where the last element starts, for postfixes */
    for (;;) {
        skip_space(p, p->depth > 0);
        int c = peek(p);
        size_t at = p->pos;
        if (c < 0 || c == '|' || c == ')' || c == '\n')
            return 0;
        if (c == '"') {
            p->pos++;
            last = seq->n;
            while (peek(p) != '"') {
                if (p->pos >= p->len || peek(p) == '\n')
                    return fail_at(p, at, "unterminated string literal");
                uint32_t cp;
                if (read_char(p, &cp))
                    return -1;
                push_cp(p, seq, cp);
            }
            p->pos++;
            if (seq->n == last) /* "" matches nothing: no element */
                last = -1;
        } else if (c == '[') {
            last = seq->n;
            if (parse_class(p, seq, base))
                return -1;
        } else if (c == '.') {
            p->pos++;
            last = seq->n;
            gb_push_class(&p->b, seq, NULL, 0, 1, base);
        } else if (c == '(') {
            p->pos++;
            int g = gb_new_rule(&p->b, base);
            p->depth++;
            if (parse_alternatives(p, g))
                return -1;
            p->depth--;
            if (peek(p) != ')')
                return fail_at(p, at, "unclosed '('");
            p->pos++;
            last = seq->n;
            gb_seq_push(seq, GE_REF, (uint32_t)g);
        } else if (is_name_char(c)) {
            size_t s = p->pos;
            while (is_name_char(peek(p)))
                p->pos++;
            size_t save = p->pos;
            skip_space(p, 0);
            if (p->pos + 2 < p->len && memcmp(p->src + p->pos, "::=", 3) == 0) {
                if (p->depth > 0)
                    return fail_at(p, at, "rule definition inside a group");
                p->pos = s; /* the next rule starts here */
                return 0;
            }
            p->pos = save;
            int r = gb_rule_id(&p->b, p->src + s, p->pos - s);
            if (!p->b.rules[r].ref_line)
                where(p, s, &p->b.rules[r].ref_line, &p->b.rules[r].ref_col);
            base = p->b.rules[rule].name; /* rules may have moved */
            last = seq->n;
            gb_seq_push(seq, GE_REF, (uint32_t)r);
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last < 0)
                return fail_at(p, at, "'%c' follows nothing it could repeat", c);
            wrap_tail(p, seq, last, base);
            int min = 0, max = -1;
            p->pos++;
            if (c == '+') {
                min = 1;
            } else if (c == '?') {
                max = 1;
            } else if (c == '{') {
                skip_space(p, 0);
                if (read_uint(p, &min))
                    return -1;
                skip_space(p, 0);
                if (peek(p) == ',') {
                    p->pos++;
                    skip_space(p, 0);
                    if (read_uint(p, &max))
                        return -1;
                } else {
                    if (min < 0)
                        return fail_at(p, at, "'{' needs a count: {m}, {m,}, {m,n} or {,n}");
                    max = min;
                }
                skip_space(p, 0);
                if (peek(p) != '}')
                    return fail_at(p, at, "unclosed '{' repetition");
                p->pos++;
                if (min < 0)
                    min = 0;
                if (max >= 0 && max < min)
                    return fail_at(p, at, "repetition {%d,%d}: the maximum is below the minimum",
                                   min, max);
            }
            repeat(p, seq, min, max, base);
            base = p->b.rules[rule].name;
            last = -1;
        } else {
            return fail_at(p, at, "unexpected character '%c'", c);
        }
    }
}

/* A line that starts with '|' continues the rule above it. */
static int continues_on_next_line(const gbnf_parser *p)
{
    size_t i = p->pos;
    while (i < p->len) {
        char c = p->src[i];
        if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
            i++;
        } else if (c == '#') {
            while (i < p->len && p->src[i] != '\n')
                i++;
        } else {
            return c == '|';
        }
    }
    return 0;
}

static int parse_alternatives(gbnf_parser *p, int rule)
{
    for (;;) {
        gb_seq seq = {0};
        if (parse_sequence(p, rule, &seq)) {
            gb_seq_free(&seq);
            return -1;
        }
        gb_add_alt(&p->b, rule, &seq);
        if (p->depth == 0 && peek(p) == '\n' && continues_on_next_line(p))
            skip_space(p, 1);
        if (peek(p) != '|')
            return 0;
        p->pos++;
        skip_space(p, 1);
    }
}

gram_grammar *gram_parse_gbnf(const char *text, size_t len, memra_err *err)
{
    gbnf_parser p = {.src = text, .len = len, .err = err};
    gb_init(&p.b);
    for (;;) {
        skip_space(&p, 1);
        if (p.pos >= p.len)
            break;
        size_t at = p.pos;
        if (!is_name_char(peek(&p))) {
            fail_at(&p, at, "expected a rule name");
            goto fail;
        }
        while (is_name_char(peek(&p)))
            p.pos++;
        size_t name_end = p.pos;
        skip_space(&p, 0);
        if (p.pos + 3 > p.len || memcmp(p.src + p.pos, "::=", 3) != 0) {
            fail_at(&p, p.pos, "expected '::=' after rule name '%.*s'", (int)(name_end - at),
                    p.src + at);
            goto fail;
        }
        p.pos += 3;
        skip_space(&p, 1);
        int r = gb_rule_id(&p.b, p.src + at, name_end - at);
        if (p.b.rules[r].defined) {
            fail_at(&p, at, "rule '%s' is defined twice", p.b.rules[r].name);
            goto fail;
        }
        p.b.rules[r].defined = 1;
        if (parse_alternatives(&p, r))
            goto fail;
        if (peek(&p) == ')') {
            fail_at(&p, p.pos, "')' without '('");
            goto fail;
        }
    }
    gram_grammar *g = gb_finish(&p.b, err);
    if (g) {
        /* salted: nobody can craft a text whose masks land on another's */
        uint64_t h = 0xcbf29ce484222325ull ^ (uint64_t)len ^ memra_process_salt();
        for (size_t i = 0; i < len; i++)
            h = (h ^ (unsigned char)text[i]) * 0x100000001b3ull;
        g->fingerprint = h | 1;
    }
    return g;
fail:
    gb_free(&p.b);
    return NULL;
}
