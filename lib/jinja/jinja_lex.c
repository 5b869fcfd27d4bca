/* The Jinja lexer, written to give the same tokens as jinja2's regex lexer
 * with trim_blocks and lstrip_blocks on.
 *
 * Whitespace is where templates differ from each other by one newline, so
 * the rules are followed to the letter:
 *  - all newlines (\r\n, \r, \n) become \n and one trailing newline of the
 *    template is dropped (keep_trailing_newline=False);
 *  - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}",
 *    "-#}" strip all whitespace after it (Python's \s, Unicode included);
 *  - trim_blocks: "%}" and "#}" eat one following newline, "+%}" keeps it;
 *    "{% raw %}" never does;
 *  - lstrip_blocks: spaces before "{%" or "{#" (not "{{", not "{%+") are
 *    removed when only whitespace precedes the tag on its line; at the
 *    start of the text this counts only when the previous token ended with
 *    a newline (or at the start of the template);
 *  - inside a tag, "%}" / "}}" only end it when brackets are balanced. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "jinja/jinja_internal.h"

typedef struct {
    jheap *h;
    const char *s;
    size_t n;
    size_t pos;
    int line;
    int line_starting;
    jtok *toks;
    size_t n_toks, cap;
    memra_err *err;
    char balance[JINJA_MAX_NESTING];
    int n_balance;
} lexer;

static const char *const tok_names[] = {
    "end of template", "template data", "begin of print statement", "end of print statement",
    "begin of statement block", "end of statement block", "name", "string", "integer", "float",
    "'+'", "'-'", "'/'", "'//'", "'*'", "'%'", "'**'", "'~'", "'['", "']'", "'('", "')'", "'{'",
    "'}'", "'=='", "'!='", "'>'", "'>='", "'<'", "'<='", "'='", "'.'", "':'", "'|'", "','", "';'",
};

const char *jinja_tok_name(jtok_type t)
{
    if ((size_t)t < MEMRA_ARRAY_LEN(tok_names))
        return tok_names[t];
    return "token";
}

static jtok *push(lexer *L, jtok_type type, int line)
{
    if (L->n_toks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *t = jh_alloc(L->h, cap * sizeof *t);
        if (L->n_toks)
            memcpy(t, L->toks, L->n_toks * sizeof *t);
        L->toks = t;
        L->cap = cap;
    }
    jtok *t = &L->toks[L->n_toks++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = line;
    return t;
}

static int count_nl(const char *s, size_t n)
{
    int c = 0;
    for (size_t i = 0; i < n; i++)
        c += s[i] == '\n';
    return c;
}

/* Length of the Python-\s run starting at i. */
static size_t space_run(const lexer *L, size_t i)
{
    size_t j = i;
    while (j < L->n) {
        uint32_t cp;
        size_t l = ju_decode(L->s, L->n, j, &cp);
        if (!ju_isspace(cp))
            break;
        j += l;
    }
    return j - i;
}

/* Length of text[0..len) once trailing Python whitespace is removed. */
static size_t rstrip_len(const char *s, size_t len)
{
    while (len > 0) {
        size_t l = ju_prev_len(s, len);
        uint32_t cp;
        ju_decode(s, len, len - l, &cp);
        if (!ju_isspace(cp))
            break;
        len -= l;
    }
    return len;
}

/* The text before a tag, after the tag's whitespace control: `sign` is '-',
 * '+' or 0; `lstrip` says whether lstrip_blocks applies to this tag kind. */
static size_t strip_before(const lexer *L, const char *text, size_t len, char sign, int lstrip)
{
    if (sign == '-')
        return rstrip_len(text, len);
    if (sign == '+' || !lstrip)
        return len;
    size_t l_pos = 0;
    for (size_t i = len; i > 0; i--)
        if (text[i - 1] == '\n') {
            l_pos = i;
            break;
        }
    if (l_pos == 0 && !L->line_starting)
        return len;
    /* jinja2 uses \s+ here: an empty tail does not match (nothing to strip) */
    if (l_pos == len)
        return len;
    size_t i = l_pos;
    while (i < len) {
        uint32_t cp;
        size_t l = ju_decode(text, len, i, &cp);
        if (!ju_isspace(cp))
            return len;
        i += l;
    }
    return l_pos;
}

static void emit_data(lexer *L, const char *text, size_t len, int line)
{
    if (len == 0)
        return;
    jtok *t = push(L, JT_DATA, line);
    t->s = text;
    t->n = len;
}

static int lex_fail(lexer *L, int line, const char *fmt, const char *arg)
{
    char msg[256];
    snprintf(msg, sizeof msg, fmt, arg);
    return memra_fail(L->err, "template line %d: %s", line, msg);
}

/* ---- numbers, names, strings ---- */

static int isdig(char c)
{
    return c >= '0' && c <= '9';
}

/* (\d+_)*\d+ at i: end position, or i when absent. */
static size_t digits_us(const lexer *L, size_t i)
{
    size_t j = i;
    if (j >= L->n || !isdig(L->s[j]))
        return i;
    while (j < L->n && isdig(L->s[j]))
        j++;
    while (j + 1 < L->n && L->s[j] == '_' && isdig(L->s[j + 1])) {
        j++;
        while (j < L->n && isdig(L->s[j]))
            j++;
    }
    return j;
}

/* float_re: end of a float at i, or i. */
static size_t match_float(const lexer *L, size_t i)
{
    if (i > 0 && L->s[i - 1] == '.')
        return i;
    size_t d = digits_us(L, i);
    if (d == i)
        return i;
    size_t frac = d;
    if (d < L->n && L->s[d] == '.') {
        size_t f = digits_us(L, d + 1);
        if (f != d + 1)
            frac = f;
    }
    size_t e = frac;
    if (e < L->n && (L->s[e] == 'e' || L->s[e] == 'E')) {
        size_t k = e + 1;
        if (k < L->n && (L->s[k] == '+' || L->s[k] == '-'))
            k++;
        size_t x = digits_us(L, k);
        if (x != k)
            return x;
    }
    return frac != d ? frac : i;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* integer_re: end of an integer at i, or i; base in *base. */
static size_t match_int(const lexer *L, size_t i, int *base)
{
    const char *s = L->s;
    size_t n = L->n;
    if (i >= n || !isdig(s[i]))
        return i;
    if (s[i] == '0' && i + 1 < n) {
        char p = s[i + 1];
        int b = (p == 'b' || p == 'B') ? 2 : (p == 'o' || p == 'O') ? 8 : (p == 'x' || p == 'X') ? 16 : 0;
        if (b) {
            size_t j = i + 2, end = i;
            for (;;) {
                size_t k = j;
                if (k < n && s[k] == '_')
                    k++;
                int v = k < n ? hexval(s[k]) : -1;
                if (v < 0 || v >= b)
                    break;
                j = k + 1;
                end = j;
            }
            if (end != i) {
                *base = b;
                return end;
            }
        }
    }
    *base = 10;
    size_t j = i + 1;
    if (s[i] == '0') {
        for (;;) {
            size_t k = j;
            if (k < n && s[k] == '_')
                k++;
            if (k < n && s[k] == '0')
                j = k + 1;
            else
                break;
        }
        return j;
    }
    for (;;) {
        size_t k = j;
        if (k < n && s[k] == '_')
            k++;
        if (k < n && isdig(s[k]))
            j = k + 1;
        else
            break;
    }
    return j;
}

static int int_value(lexer *L, size_t i, size_t end, int base, int64_t *out)
{
    size_t k = i;
    if (base != 10)
        k += 2;
    uint64_t v = 0;
    for (; k < end; k++) {
        if (L->s[k] == '_')
            continue;
        int d = hexval(L->s[k]);
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base || v * (uint64_t)base + (uint64_t)d > INT64_MAX)
            return memra_fail(L->err, "template line %d: integer literal too large", L->line);
        v = v * (uint64_t)base + (uint64_t)d;
    }
    *out = (int64_t)v;
    return 0;
}

static int name_start(const lexer *L, size_t i, size_t *len)
{
    unsigned char c = (unsigned char)L->s[i];
    if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
        *len = 1;
        return 1;
    }
    if (c < 0x80)
        return 0;
    uint32_t cp;
    *len = ju_decode(L->s, L->n, i, &cp);
    return *len > 1 && ju_isalpha(cp);
}

static size_t match_name(const lexer *L, size_t i)
{
    size_t l;
    if (!name_start(L, i, &l))
        return i;
    size_t j = i + l;
    while (j < L->n) {
        uint32_t cp;
        size_t k = ju_decode(L->s, L->n, j, &cp);
        if (cp >= 0x80 && k == 1)
            break;
        if (!ju_isword(cp))
            break;
        j += k;
    }
    return j;
}

/* Python's unicode-escape decoding of a string literal's body, after
 * jinja2 turned non-ASCII characters into backslash escapes first (so a
 * backslash before a non-ASCII character stays literal). */
static int unescape(lexer *L, const char *s, size_t n, int line, jtok *t)
{
    strbuf sb;
    sb_init(&sb);
    char buf[8];
    for (size_t i = 0; i < n;) {
        char c = s[i];
        if (c != '\\') {
            sb_putc(&sb, c);
            i++;
            continue;
        }
        if (i + 1 >= n) {
            sb_free(&sb);
            return memra_fail(L->err, "template line %d: \\ at end of string", line);
        }
        char e = s[i + 1];
        i += 2;
        uint32_t cp;
        int digits = 0;
        switch (e) {
        case '\n':
            continue;
        case '\\':
            sb_putc(&sb, '\\');
            continue;
        case '\'':
            sb_putc(&sb, '\'');
            continue;
        case '"':
            sb_putc(&sb, '"');
            continue;
        case 'a':
            sb_putc(&sb, 7);
            continue;
        case 'b':
            sb_putc(&sb, 8);
            continue;
        case 'f':
            sb_putc(&sb, 12);
            continue;
        case 'n':
            sb_putc(&sb, '\n');
            continue;
        case 'r':
            sb_putc(&sb, '\r');
            continue;
        case 't':
            sb_putc(&sb, '\t');
            continue;
        case 'v':
            sb_putc(&sb, 11);
            continue;
        case 'x':
            digits = 2;
            break;
        case 'u':
            digits = 4;
            break;
        case 'U':
            digits = 8;
            break;
        case 'N':
            sb_free(&sb);
            return memra_fail(L->err, "template line %d: \\N{...} escapes are not supported", line);
        default:
            if (e >= '0' && e <= '7') {
                cp = (uint32_t)(e - '0');
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                sb_append(&sb, buf, ju_encode(cp, buf));
                continue;
            }
            if ((unsigned char)e >= 0x80) {
                /* "\é" -> backslashreplace gives "\\xe9" -> "\" "xe9" */
                uint32_t ch;
                size_t l = ju_decode(s, n, i - 1, &ch);
                i = i - 1 + l;
                char esc[16];
                if (ch < 0x100)
                    snprintf(esc, sizeof esc, "\\x%02x", (unsigned)ch);
                else if (ch < 0x10000)
                    snprintf(esc, sizeof esc, "\\u%04x", (unsigned)ch);
                else
                    snprintf(esc, sizeof esc, "\\U%08x", (unsigned)ch);
                sb_puts(&sb, esc);
                continue;
            }
            sb_putc(&sb, '\\');
            sb_putc(&sb, e);
            continue;
        }
        cp = 0;
        for (int k = 0; k < digits; k++) {
            int v = i < n ? hexval(s[i]) : -1;
            if (v < 0) {
                sb_free(&sb);
                return memra_fail(L->err, "template line %d: truncated \\%c escape in string", line, e);
            }
            cp = cp * 16 + (uint32_t)v;
            i++;
        }
        if (cp > 0x10FFFF) {
            sb_free(&sb);
            return memra_fail(L->err, "template line %d: illegal Unicode character in string", line);
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
            sb_free(&sb);
            return memra_fail(L->err, "template line %d: lone surrogate \\%c%04x in string", line, e,
                              (unsigned)cp);
        }
        sb_append(&sb, buf, ju_encode(cp, buf));
    }
    t->n = sb.len;
    t->s = jh_strndup(L->h, sb_str(&sb), sb.len);
    sb_free(&sb);
    return 0;
}

/* A quoted string at i: end position or i. */
static size_t match_string(const lexer *L, size_t i)
{
    char q = L->s[i];
    if (q != '\'' && q != '"')
        return i;
    for (size_t j = i + 1; j < L->n; j++) {
        if (L->s[j] == '\\') {
            j++;
            continue;
        }
        if (L->s[j] == q)
            return j + 1;
    }
    return i;
}

static const struct {
    const char *s;
    jtok_type t;
} operators[] = {
    {"//", JT_FLOORDIV}, {"**", JT_POW}, {"==", JT_EQ}, {"!=", JT_NE}, {">=", JT_GTEQ},
    {"<=", JT_LTEQ}, {"+", JT_ADD}, {"-", JT_SUB}, {"/", JT_DIV}, {"*", JT_MUL},
    {"%", JT_MOD}, {"~", JT_TILDE}, {"[", JT_LBRACKET}, {"]", JT_RBRACKET}, {"(", JT_LPAREN},
    {")", JT_RPAREN}, {"{", JT_LBRACE}, {"}", JT_RBRACE}, {">", JT_GT}, {"<", JT_LT},
    {"=", JT_ASSIGN}, {".", JT_DOT}, {":", JT_COLON}, {"|", JT_PIPE}, {",", JT_COMMA},
    {";", JT_SEMICOLON},
};

static int at(const lexer *L, size_t i, const char *lit)
{
    size_t k = strlen(lit);
    return i + k <= L->n && memcmp(L->s + i, lit, k) == 0;
}

/* The end of a block ("%}") or print ("}}") tag at i, with its whitespace
 * control; returns the position after it or 0 when it is not there. */
static size_t match_tag_end(const lexer *L, size_t i, int block)
{
    if (block) {
        if (at(L, i, "+%}"))
            return i + 3;
        if (at(L, i, "-%}"))
            return i + 3 + space_run(L, i + 3);
        if (at(L, i, "%}"))
            return i + 2 + (i + 2 < L->n && L->s[i + 2] == '\n');
        return 0;
    }
    if (at(L, i, "-}}"))
        return i + 3 + space_run(L, i + 3);
    if (at(L, i, "}}"))
        return i + 2;
    return 0;
}

/* Tokens inside {{ }} or {% %}, up to and including the end tag. */
static int lex_tag(lexer *L, int block)
{
    L->n_balance = 0;
    while (L->pos < L->n) {
        size_t i = L->pos;
        if (L->n_balance == 0) {
            size_t end = match_tag_end(L, i, block);
            if (end) {
                push(L, block ? JT_BLOCK_END : JT_VAR_END, L->line);
                L->line += count_nl(L->s + i, end - i);
                L->line_starting = L->s[end - 1] == '\n';
                L->pos = end;
                return 0;
            }
        }
        size_t sp = space_run(L, i);
        if (sp) {
            L->line += count_nl(L->s + i, sp);
            L->line_starting = L->s[i + sp - 1] == '\n';
            L->pos = i + sp;
            continue;
        }
        L->line_starting = 0;
        size_t end = match_float(L, i);
        if (end != i) {
            char buf[64];
            size_t k = 0;
            for (size_t j = i; j < end && k + 1 < sizeof buf; j++)
                if (L->s[j] != '_')
                    buf[k++] = L->s[j];
            buf[k] = 0;
            jtok *t = push(L, JT_FLOAT, L->line);
            t->f = strtod(buf, NULL);
            L->pos = end;
            continue;
        }
        int base;
        end = match_int(L, i, &base);
        if (end != i) {
            jtok *t = push(L, JT_INT, L->line);
            if (int_value(L, i, end, base, &t->i))
                return -1;
            L->pos = end;
            continue;
        }
        end = match_name(L, i);
        if (end != i) {
            jtok *t = push(L, JT_NAME, L->line);
            t->s = jh_strndup(L->h, L->s + i, end - i);
            t->n = end - i;
            L->pos = end;
            continue;
        }
        end = match_string(L, i);
        if (end != i) {
            jtok *t = push(L, JT_STRING, L->line);
            if (unescape(L, L->s + i + 1, end - i - 2, L->line, t))
                return -1;
            L->line += count_nl(L->s + i, end - i);
            L->pos = end;
            continue;
        }
        size_t op = 0;
        for (; op < MEMRA_ARRAY_LEN(operators); op++)
            if (at(L, i, operators[op].s))
                break;
        if (op == MEMRA_ARRAY_LEN(operators)) {
            uint32_t cp;
            size_t l = ju_decode(L->s, L->n, i, &cp);
            char ch[8] = {0};
            if (cp < 0x20 || cp == 0x7F)
                snprintf(ch, sizeof ch, "\\x%02x", (unsigned)cp);
            else
                memcpy(ch, L->s + i, l);
            return lex_fail(L, L->line, "unexpected char '%s'", ch);
        }
        jtok_type tt = operators[op].t;
        char open = tt == JT_LBRACE ? '}' : tt == JT_LPAREN ? ')' : tt == JT_LBRACKET ? ']' : 0;
        char close = tt == JT_RBRACE ? '}' : tt == JT_RPAREN ? ')' : tt == JT_RBRACKET ? ']' : 0;
        if (open) {
            if (L->n_balance == JINJA_MAX_NESTING)
                return memra_fail(L->err, "template line %d: brackets nested too deeply", L->line);
            L->balance[L->n_balance++] = open;
        } else if (close) {
            char cs[2] = {close, 0};
            if (L->n_balance == 0)
                return lex_fail(L, L->line, "unexpected '%s'", cs);
            if (L->balance[L->n_balance - 1] != close) {
                char msg[64];
                snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", close,
                         L->balance[L->n_balance - 1]);
                return lex_fail(L, L->line, "%s", msg);
            }
            L->n_balance--;
        }
        push(L, tt, L->line);
        L->pos = i + strlen(operators[op].s);
    }
    return 0; /* end of input inside a tag: the parser reports it */
}

/* "{%[-+]?\s*raw\s*(-%}\s*|%})" at i: end position or 0. */
static size_t match_raw_begin(const lexer *L, size_t i, char *sign)
{
    size_t j = i + 2;
    *sign = 0;
    if (j < L->n && (L->s[j] == '-' || L->s[j] == '+'))
        *sign = L->s[j++];
    j += space_run(L, j);
    if (!at(L, j, "raw"))
        return 0;
    j += 3;
    j += space_run(L, j);
    if (at(L, j, "-%}"))
        return j + 3 + space_run(L, j + 3);
    if (at(L, j, "%}"))
        return j + 2;
    return 0;
}

/* "{%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?)" at i: end position or 0. */
static size_t match_raw_end(const lexer *L, size_t i, char *sign)
{
    if (!at(L, i, "{%"))
        return 0;
    size_t j = i + 2;
    *sign = 0;
    if (j < L->n && (L->s[j] == '-' || L->s[j] == '+'))
        *sign = L->s[j++];
    j += space_run(L, j);
    if (!at(L, j, "endraw"))
        return 0;
    j += 6;
    j += space_run(L, j);
    return match_tag_end(L, j, 1);
}

static int lex_raw(lexer *L, int line)
{
    for (size_t k = L->pos; k < L->n; k++) {
        char sign;
        size_t end = match_raw_end(L, k, &sign);
        if (!end)
            continue;
        const char *text = L->s + L->pos;
        size_t len = strip_before(L, text, k - L->pos, sign, 1);
        emit_data(L, text, len, L->line);
        L->line += count_nl(L->s + L->pos, end - L->pos);
        L->line_starting = L->s[end - 1] == '\n';
        L->pos = end;
        return 0;
    }
    return memra_fail(L->err, "template line %d: missing end of raw directive", line);
}

static int lex_comment(lexer *L, int line)
{
    for (size_t k = L->pos; k < L->n; k++) {
        size_t end = 0;
        if (at(L, k, "+#}"))
            end = k + 3;
        else if (at(L, k, "-#}"))
            end = k + 3 + space_run(L, k + 3);
        else if (at(L, k, "#}"))
            end = k + 2 + (k + 2 < L->n && L->s[k + 2] == '\n');
        if (!end)
            continue;
        L->line += count_nl(L->s + L->pos, end - L->pos);
        L->line_starting = L->s[end - 1] == '\n';
        L->pos = end;
        return 0;
    }
    return memra_fail(L->err, "template line %d: missing end of comment tag", line);
}

/* Newline normalization and the dropped trailing newline. */
static char *normalize(jheap *h, const char *src, size_t len, size_t *out_len)
{
    char *dst = jh_alloc(h, len + 1);
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
            dst[k++] = '\n';
        } else {
            dst[k++] = src[i];
        }
    }
    if (k > 0 && dst[k - 1] == '\n')
        k--;
    dst[k] = 0;
    *out_len = k;
    return dst;
}

int jinja_lex(jheap *h, const char *src, size_t len, jtok **out, size_t *n_out, memra_err *err)
{
    lexer L = {0};
    L.h = h;
    L.err = err;
    L.s = normalize(h, src, len, &L.n);
    L.line = 1;
    L.line_starting = 1;
    while (L.pos < L.n) {
        /* the next "{{", "{%" or "{#" */
        size_t j = L.pos;
        while (j + 1 < L.n && !(L.s[j] == '{' && (L.s[j + 1] == '{' || L.s[j + 1] == '%' || L.s[j + 1] == '#')))
            j++;
        if (j + 1 >= L.n) {
            emit_data(&L, L.s + L.pos, L.n - L.pos, L.line);
            break;
        }
        const char *text = L.s + L.pos;
        size_t text_len = j - L.pos;
        int text_line = L.line;
        char kind = L.s[j + 1];
        char sign = 0;
        size_t raw_end = 0;
        if (kind == '%')
            raw_end = match_raw_begin(&L, j, &sign);
        if (!raw_end && j + 2 < L.n && (L.s[j + 2] == '-' || L.s[j + 2] == '+'))
            sign = L.s[j + 2];
        size_t kept = strip_before(&L, text, text_len, sign, kind != '{');
        emit_data(&L, text, kept, text_line);
        L.line += count_nl(text, text_len);
        if (raw_end) {
            L.line += count_nl(L.s + j, raw_end - j);
            L.line_starting = L.s[raw_end - 1] == '\n';
            L.pos = raw_end;
            if (lex_raw(&L, L.line))
                return -1;
            continue;
        }
        L.line_starting = 0;
        L.pos = j + 2 + (sign != 0);
        if (kind == '#') {
            if (lex_comment(&L, L.line))
                return -1;
            continue;
        }
        push(&L, kind == '%' ? JT_BLOCK_BEGIN : JT_VAR_BEGIN, L.line);
        if (lex_tag(&L, kind == '%'))
            return -1;
    }
    push(&L, JT_EOF, L.line);
    *out = L.toks;
    *n_out = L.n_toks;
    return 0;
}
