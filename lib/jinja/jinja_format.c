/* Python's string formatting for templates: the % operator and the
 * format filter (printf-style conversions), and str.format with its
 * format-spec mini-language (fill, align, sign, width, grouping,
 * precision, type). */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja/jinja_internal.h"

/* Format a number per a conversion: type d/i/x/X/o/f/F/e/E/g/G/%, with
 * flags, width and precision (-1: default) as in Python's %-format and
 * format-spec (they share these). */
static int format_number(jctx *c, int line, strbuf *sb, const jv *v, char type, const char *flags,
                         int64_t width, int64_t prec)
{
    char spec[32], buf[512];
    int left = strchr(flags, '-') != NULL, zero = strchr(flags, '0') != NULL;
    int plus = strchr(flags, '+') != NULL, space = strchr(flags, ' ') != NULL;
    int alt = strchr(flags, '#') != NULL;
    if (width > 400 || prec > 400) {
        jfail(c, line, "format width or precision too large");
        return -1;
    }
    if (!jv_is_num(v)) {
        jfail(c, line, "a number is required, not %s", jv_type_name(v));
        return -1;
    }
    int n;
    if (type == 'd' || type == 'i' || type == 'x' || type == 'X' || type == 'o') {
        int64_t i;
        if (v->k == JV_FLOAT) {
            if (type != 'd' && type != 'i') {
                jfail(c, line, "%%%c format: an integer is required, not float", type);
                return -1;
            }
            if (!isfinite(v->u.f) || fabs(v->u.f) >= 9.2e18) {
                jfail(c, line, "cannot convert float to integer");
                return -1;
            }
            i = (int64_t)v->u.f;
        } else {
            i = v->k == JV_BOOL ? v->u.b : v->u.i;
        }
        char conv = type == 'i' ? 'd' : type;
        uint64_t mag = i < 0 ? (uint64_t)0 - (uint64_t)i : (uint64_t)i;
        const char *pfx = "";
        if (alt && conv == 'x')
            pfx = "0x";
        else if (alt && conv == 'X')
            pfx = "0X";
        else if (alt && conv == 'o')
            pfx = "0o";
        snprintf(spec, sizeof spec, "%%%s", conv == 'd' ? PRIu64 : conv == 'x' ? PRIx64 : conv == 'X' ? PRIX64 : PRIo64);
        char digits[64];
        snprintf(digits, sizeof digits, spec, mag);
        const char *sign = i < 0 ? "-" : plus ? "+" : space ? " " : "";
        n = snprintf(buf, sizeof buf, "%s%s%s", sign, pfx, digits);
        /* padding */
        int64_t padn = width > n ? width - n : 0;
        if (left) {
            sb_append(sb, buf, (size_t)n);
            for (int64_t k = 0; k < padn; k++)
                sb_putc(sb, ' ');
        } else if (zero) {
            size_t pre = strlen(sign) + strlen(pfx);
            sb_append(sb, buf, pre);
            for (int64_t k = 0; k < padn; k++)
                sb_putc(sb, '0');
            sb_append(sb, buf + pre, (size_t)n - pre);
        } else {
            for (int64_t k = 0; k < padn; k++)
                sb_putc(sb, ' ');
            sb_append(sb, buf, (size_t)n);
        }
        return 0;
    }
    double f = jv_num(v);
    int pct = type == '%';
    if (pct) {
        f *= 100;
        type = 'f';
    }
    if (prec < 0)
        prec = 6;
    if (!isfinite(f)) {
        const char *word = isnan(f) ? "nan" : "inf";
        if (type == 'F' || type == 'E' || type == 'G')
            word = isnan(f) ? "NAN" : "INF";
        n = snprintf(buf, sizeof buf, "%s%s%s", f < 0 ? "-" : plus ? "+" : space ? " " : "", word, pct ? "%" : "");
    } else {
        snprintf(spec, sizeof spec, "%%%s%s%s%s.%d%c", plus ? "+" : "", space ? " " : "", alt ? "#" : "",
                 "", (int)prec, type);
        n = snprintf(buf, sizeof buf, spec, f);
        if (pct && n < (int)sizeof buf - 1)
            buf[n++] = '%', buf[n] = 0;
    }
    if (n < 0 || n >= (int)sizeof buf) {
        jfail(c, line, "formatted number too long");
        return -1;
    }
    int64_t padn = width > n ? width - n : 0;
    if (left) {
        sb_append(sb, buf, (size_t)n);
        for (int64_t k = 0; k < padn; k++)
            sb_putc(sb, ' ');
    } else if (zero && isfinite(f)) {
        size_t pre = (buf[0] == '-' || buf[0] == '+' || buf[0] == ' ') ? 1 : 0;
        sb_append(sb, buf, pre);
        for (int64_t k = 0; k < padn; k++)
            sb_putc(sb, '0');
        sb_append(sb, buf + pre, (size_t)n - pre);
    } else {
        for (int64_t k = 0; k < padn; k++)
            sb_putc(sb, ' ');
        sb_append(sb, buf, (size_t)n);
    }
    return 0;
}

static void pad_text(strbuf *sb, const char *s, size_t n, int64_t width, int64_t prec, int left)
{
    size_t count = ju_count(s, n);
    if (prec >= 0 && (uint64_t)prec < count) {
        n = ju_offset(s, n, (size_t)prec);
        count = (size_t)prec;
    }
    int64_t padn = width > (int64_t)count ? width - (int64_t)count : 0;
    if (!left)
        for (int64_t k = 0; k < padn; k++)
            sb_putc(sb, ' ');
    sb_append(sb, s, n);
    if (left)
        for (int64_t k = 0; k < padn; k++)
            sb_putc(sb, ' ');
}

static jv *percent(jctx *c, int line, const jv *fmt, jv *args)
{
    jv **items = &args;
    size_t n_items = 1, next = 0;
    const jdict *map = NULL;
    if (args->k == JV_TUPLE) {
        items = args->u.l.v;
        n_items = args->u.l.n;
    } else if (args->k == JV_DICT) {
        map = args->u.d;
    }
    strbuf sb;
    sb_init(&sb);
    const char *p = fmt->u.s.s;
    size_t n = fmt->u.s.n;
    for (size_t i = 0; i < n;) {
        if (p[i] != '%') {
            sb_putc(&sb, p[i++]);
            continue;
        }
        i++;
        if (i < n && p[i] == '%') {
            sb_putc(&sb, '%');
            i++;
            continue;
        }
        jv *v = NULL;
        if (i < n && p[i] == '(') {
            size_t k = i + 1;
            while (k < n && p[k] != ')')
                k++;
            if (k >= n || !map) {
                sb_free(&sb);
                return jfail(c, line, "format requires a mapping");
            }
            jv key = {.k = JV_STR, .u.s = {p + i + 1, k - i - 1}};
            v = jdict_get(map, &key);
            if (!v) {
                sb_free(&sb);
                return jfail(c, line, "format key not found");
            }
            i = k + 1;
        }
        char flags[8] = "";
        size_t nf = 0;
        while (i < n && strchr("-+ #0", p[i]) && nf < 7)
            flags[nf++] = p[i++];
        flags[nf] = 0;
        int64_t width = 0, prec = -1;
        while (i < n && p[i] >= '0' && p[i] <= '9' && width < 100000)
            width = width * 10 + (p[i++] - '0');
        if (i < n && p[i] == '.') {
            i++;
            prec = 0;
            while (i < n && p[i] >= '0' && p[i] <= '9' && prec < 100000)
                prec = prec * 10 + (p[i++] - '0');
        }
        if (i >= n) {
            sb_free(&sb);
            return jfail(c, line, "incomplete format");
        }
        char type = p[i++];
        if (!v) {
            if (map) {
                v = args;
            } else if (next >= n_items) {
                sb_free(&sb);
                return jfail(c, line, "not enough arguments for format string");
            } else {
                v = items[next++];
            }
        }
        if (jreserve(c, line, sb.len + (size_t)width)) {
            sb_free(&sb);
            return NULL;
        }
        int rc = 0;
        if (type == 's' || type == 'r' || type == 'a') {
            strbuf tmp;
            sb_init(&tmp);
            if (type == 's')
                jv_str_into(&tmp, v);
            else
                jv_repr_into(&tmp, v);
            if (fmt->safe && !(type == 's' && v->k == JV_STR && v->safe)) {
                /* Markup % x: %s gives escape(x) (a Markup as it is), %r escape(repr(x)) */
                strbuf esc;
                sb_init(&esc);
                jescape_into(&esc, sb_str(&tmp), tmp.len);
                sb_free(&tmp);
                tmp = esc;
            }
            pad_text(&sb, sb_str(&tmp), tmp.len, width, prec, strchr(flags, '-') != NULL);
            sb_free(&tmp);
        } else if (type == 'c') {
            if (v->k == JV_STR && ju_count(v->u.s.s, v->u.s.n) == 1)
                pad_text(&sb, v->u.s.s, v->u.s.n, width, -1, strchr(flags, '-') != NULL);
            else if (v->k == JV_INT && v->u.i >= 0 && v->u.i <= 0x10FFFF) {
                char buf[4];
                pad_text(&sb, buf, ju_encode((uint32_t)v->u.i, buf), width, -1, strchr(flags, '-') != NULL);
            } else
                rc = (jfail(c, line, "%%c requires an int or a unicode character"), -1);
        } else if (strchr("diouxXeEfFgG", type)) {
            rc = format_number(c, line, &sb, v, type == 'u' ? 'd' : type, flags, width, prec);
        } else {
            rc = (jfail(c, line, "unsupported format character '%c'", type), -1);
        }
        if (rc) {
            sb_free(&sb);
            return NULL;
        }
    }
    if (!map && next < n_items && args->k == JV_TUPLE) {
        sb_free(&sb);
        return jfail(c, line, "not all arguments converted during string formatting");
    }
    return jstr_finish(c, line, &sb);
}

/* One replacement field's format spec: [[fill]align][sign][#][0][width][.prec][type]. */
static int format_spec(jctx *c, int line, strbuf *sb, const jv *v, const char *spec, size_t n)
{
    size_t i = 0;
    uint32_t fill = ' ';
    char align = 0;
    if (n >= 2) {
        uint32_t cp;
        size_t l = ju_decode(spec, n, 0, &cp);
        if (l < n && strchr("<>^=", spec[l])) {
            fill = cp;
            align = spec[l];
            i = l + 1;
        }
    }
    if (!align && i < n && strchr("<>^=", spec[i]))
        align = spec[i++];
    char flags[8] = "";
    size_t nf = 0;
    if (i < n && strchr("+- ", spec[i]))
        flags[nf++] = spec[i] == '-' ? 'm' : spec[i], i++;
    if (i < n && spec[i] == '#')
        flags[nf++] = '#', i++;
    if (i < n && spec[i] == '0') {
        if (!align) {
            align = '=';
            fill = '0';
        }
        i++;
    }
    flags[nf] = 0;
    int64_t width = 0, prec = -1;
    while (i < n && spec[i] >= '0' && spec[i] <= '9' && width < 100000)
        width = width * 10 + (spec[i++] - '0');
    char group = 0;
    if (i < n && (spec[i] == ',' || spec[i] == '_'))
        group = spec[i++];
    if (i < n && spec[i] == '.') {
        i++;
        prec = 0;
        while (i < n && spec[i] >= '0' && spec[i] <= '9' && prec < 100000)
            prec = prec * 10 + (spec[i++] - '0');
    }
    char type = i < n ? spec[i++] : 0;
    if (i != n) {
        jfail(c, line, "invalid format specifier");
        return -1;
    }
    strbuf body;
    sb_init(&body);
    int rc = 0;
    if (type == 0 && !jv_is_num(v)) {
        strbuf tmp;
        sb_init(&tmp);
        jv_str_into(&tmp, v);
        pad_text(&body, sb_str(&tmp), tmp.len, 0, prec, 0);
        sb_free(&tmp);
        if (!align)
            align = '<';
    } else if (type == 's') {
        if (v->k != JV_STR) {
            rc = (jfail(c, line, "unknown format code 's' for object of type '%s'", jv_type_name(v)), -1);
        } else {
            pad_text(&body, v->u.s.s, v->u.s.n, 0, prec, 0);
            if (!align)
                align = '<';
        }
    } else {
        char t = type;
        if (t == 0)
            t = v->k == JV_FLOAT ? 'g' : 'd';
        if (t == 'n')
            t = 'd';
        char pflags[8] = "";
        size_t k = 0;
        if (strchr(flags, '+'))
            pflags[k++] = '+';
        if (strchr(flags, ' '))
            pflags[k++] = ' ';
        if (strchr(flags, '#'))
            pflags[k++] = '#';
        pflags[k] = 0;
        if (type == 0 && v->k == JV_FLOAT && prec < 0) {
            jv_float_repr(&body, v->u.f);
        } else if (strchr("dxXobeEfFgG%", t) && t != 'b') {
            rc = format_number(c, line, &body, v, t, pflags, 0, prec);
        } else {
            rc = (jfail(c, line, "unknown format code '%c' for object of type '%s'", t, jv_type_name(v)), -1);
        }
        if (!align)
            align = '>';
    }
    if (!rc && group) {
        if (!jv_is_num(v) || (type && !strchr("dfFeEgG%n", type))) {
            rc = (jfail(c, line, "cannot specify '%c' with this format", group), -1);
        } else {
            /* separators every three digits of the integer part */
            const char *b = sb_str(&body);
            size_t ds = 0;
            while (ds < body.len && !(b[ds] >= '0' && b[ds] <= '9'))
                ds++;
            size_t de = ds;
            while (de < body.len && b[de] >= '0' && b[de] <= '9')
                de++;
            strbuf g;
            sb_init(&g);
            sb_append(&g, b, ds);
            for (size_t k = ds; k < de; k++) {
                if (k > ds && (de - k) % 3 == 0)
                    sb_putc(&g, group);
                sb_putc(&g, b[k]);
            }
            sb_append(&g, b + de, body.len - de);
            sb_free(&body);
            body = g;
        }
    }
    if (!rc) {
        int64_t len = (int64_t)ju_count(sb_str(&body), body.len);
        int64_t marg = width > len ? width - len : 0;
        int64_t left = align == '<' ? 0 : align == '^' ? marg / 2 : marg;
        const char *b = sb_str(&body);
        size_t sign = 0;
        if (align == '=' && body.len && strchr("+- ", b[0]))
            sign = 1;
        sb_append(sb, b, sign);
        for (int64_t k = 0; k < left; k++)
            ju_put(sb, fill);
        sb_append(sb, b + sign, body.len - sign);
        for (int64_t k = 0; k < marg - left; k++)
            ju_put(sb, fill);
    }
    sb_free(&body);
    return rc;
}

static jv *format(jctx *c, int line, const jv *fmt, const jargs *a)
{
    strbuf sb;
    sb_init(&sb);
    const char *p = fmt->u.s.s;
    size_t n = fmt->u.s.n, auto_idx = 0;
    for (size_t i = 0; i < n;) {
        char ch = p[i];
        if (ch == '}' ) {
            if (i + 1 < n && p[i + 1] == '}') {
                sb_putc(&sb, '}');
                i += 2;
                continue;
            }
            sb_free(&sb);
            return jfail(c, line, "Single '}' encountered in format string");
        }
        if (ch != '{') {
            sb_putc(&sb, ch);
            i++;
            continue;
        }
        if (i + 1 < n && p[i + 1] == '{') {
            sb_putc(&sb, '{');
            i += 2;
            continue;
        }
        size_t k = i + 1;
        while (k < n && p[k] != '}' && p[k] != '!' && p[k] != ':' && p[k] != '.' && p[k] != '[')
            k++;
        jv *v;
        if (k == i + 1) {
            v = jarg(a, (int)auto_idx++, NULL);
        } else if (p[i + 1] >= '0' && p[i + 1] <= '9') {
            v = jarg(a, atoi(p + i + 1), NULL);
        } else {
            char *name = jh_strndup(c->h, p + i + 1, k - i - 1);
            v = jarg(a, -1, name);
        }
        if (!v) {
            sb_free(&sb);
            return jfail(c, line, "format field out of range or missing");
        }
        /* .attr and [key] lookups */
        while (k < n && (p[k] == '.' || p[k] == '[')) {
            char open = p[k];
            size_t b = ++k;
            while (k < n && (open == '[' ? p[k] != ']' : (p[k] != '.' && p[k] != '[' && p[k] != '}' && p[k] != '!' && p[k] != ':')))
                k++;
            char *key = jh_strndup(c->h, p + b, k - b);
            if (open == '[') {
                if (k >= n) {
                    sb_free(&sb);
                    return jfail(c, line, "expected '}' before end of string");
                }
                k++;
                char *end;
                long long idx = strtoll(key, &end, 10);
                jv *kv = (*key && !*end) ? jv_int(c->h, idx) : jv_cstr(c->h, key);
                v = jgetitem(c, line, v, kv);
            } else {
                v = jgetattr(c, line, v, key);
            }
            if (!v) {
                sb_free(&sb);
                return NULL;
            }
        }
        char conv = 0;
        if (k < n && p[k] == '!') {
            conv = k + 1 < n ? p[k + 1] : 0;
            k += 2;
        }
        size_t spec_b = k, spec_e = k;
        if (k < n && p[k] == ':') {
            spec_b = ++k;
            int depth = 0;
            while (k < n && (p[k] != '}' || depth)) {
                depth += p[k] == '{';
                depth -= p[k] == '}';
                k++;
            }
            spec_e = k;
        }
        if (k >= n || p[k] != '}') {
            sb_free(&sb);
            return jfail(c, line, "expected '}' before end of string");
        }
        i = k + 1;
        if (conv == 'r' || conv == 'a' || conv == 's') {
            strbuf tmp;
            sb_init(&tmp);
            if (conv == 's')
                jv_str_into(&tmp, v);
            else
                jv_repr_into(&tmp, v);
            v = jv_str(c->h, sb_str(&tmp), tmp.len);
            sb_free(&tmp);
        } else if (conv) {
            sb_free(&sb);
            return jfail(c, line, "unknown conversion specifier %c", conv);
        }
        if (fmt->safe && v->k == JV_STR && v->safe) {
            /* Markup.__html_format__: taken as it is, and it takes no spec */
            if (spec_e > spec_b) {
                sb_free(&sb);
                return jfail(c, line, "Unsupported format specification for Markup.");
            }
            sb_append(&sb, v->u.s.s, v->u.s.n);
            continue;
        }
        size_t from = sb.len;
        if (jreserve(c, line, sb.len) || format_spec(c, line, &sb, v, p + spec_b, spec_e - spec_b)) {
            sb_free(&sb);
            return NULL;
        }
        if (fmt->safe && sb.len > from) {
            /* markupsafe's EscapeFormatter: escape(format(value, spec)) */
            strbuf field;
            sb_init(&field);
            sb_append(&field, sb.data + from, sb.len - from);
            sb.len = from;
            jescape_into(&sb, sb_str(&field), field.len);
            sb_free(&field);
        }
    }
    return jstr_finish(c, line, &sb);
}

/* Markup.__mod__ and Markup.format escape what they put in (percent and
 * format look at fmt->safe); the result is a Markup. */
jv *jstr_percent(jctx *c, int line, const jv *fmt, jv *args)
{
    jv *r = percent(c, line, fmt, args);
    return r && fmt->safe ? jv_markup(c->h, r) : r;
}

jv *jstr_format(jctx *c, int line, const jv *fmt, const jargs *a)
{
    jv *r = format(c, line, fmt, a);
    return r && fmt->safe ? jv_markup(c->h, r) : r;
}
