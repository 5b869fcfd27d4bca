/* Methods of template values: Python's str, dict and list methods that a
 * sandboxed template may call (the mutating ones are refused, as the
 * immutable sandbox refuses them) and loop.cycle / loop.changed. Text
 * positions are code points, as in Python. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "jinja/jinja_internal.h"

jv *jarg(const jargs *a, int index, const char *name)
{
    if (index >= 0 && (size_t)index < a->n_pos)
        return a->pos[index];
    if (name)
        for (size_t i = 0; i < a->n_kw; i++)
            if (!strcmp(a->kw_names[i], name))
                return a->kw[i];
    return NULL;
}

/* Refuse extra positional arguments and unknown keywords, as Python would. */
int jargs_check(jctx *c, int line, const char *fname, const jargs *a, size_t max_pos,
                const char *const *kw_ok)
{
    if (a->n_pos > max_pos) {
        jfail(c, line, "%s() takes at most %zu argument(s) (%zu given)", fname, max_pos, a->n_pos);
        return -1;
    }
    for (size_t i = 0; i < a->n_kw; i++) {
        int ok = 0;
        for (int k = 0; kw_ok && kw_ok[k]; k++)
            ok |= !strcmp(kw_ok[k], a->kw_names[i]);
        if (!ok) {
            jfail(c, line, "%s() got an unexpected keyword argument '%s'", fname, a->kw_names[i]);
            return -1;
        }
    }
    return 0;
}

jv *jstr_of(jctx *c, int line, const jv *v)
{
    if (v->k == JV_STR)
        return (jv *)v;
    strbuf sb;
    sb_init(&sb);
    jv_str_into(&sb, v);
    jv *r = NULL;
    if (!jreserve(c, line, sb.len))
        r = jv_str(c->h, sb_str(&sb), sb.len);
    sb_free(&sb);
    return r;
}

jv *jstr_finish(jctx *c, int line, strbuf *sb)
{
    jv *r = NULL;
    if (!jreserve(c, line, sb->len))
        r = jv_str(c->h, sb_str(sb), sb->len);
    sb_free(sb);
    return r;
}

/* ---- strip, case ---- */

static int in_chars(const jv *chars, uint32_t cp)
{
    if (!chars)
        return ju_isspace(cp);
    for (size_t i = 0; i < chars->u.s.n;) {
        uint32_t x;
        i += ju_decode(chars->u.s.s, chars->u.s.n, i, &x);
        if (x == cp)
            return 1;
    }
    return 0;
}

jv *jstr_strip(jctx *c, const jv *s, const jv *chars, int left, int right)
{
    if (chars && chars->k == JV_NONE)
        chars = NULL;
    const char *p = s->u.s.s;
    size_t b = 0, e = s->u.s.n;
    if (left)
        while (b < e) {
            uint32_t cp;
            size_t l = ju_decode(p, e, b, &cp);
            if (!in_chars(chars, cp))
                break;
            b += l;
        }
    if (right)
        while (e > b) {
            size_t l = ju_prev_len(p, e);
            uint32_t cp;
            ju_decode(p, e, e - l, &cp);
            if (!in_chars(chars, cp))
                break;
            e -= l;
        }
    return jv_str_ref(c->h, p + b, e - b);
}

jv *jstr_case(jctx *c, const jv *s, int mode)
{
    strbuf sb;
    sb_init(&sb);
    int prev_cased = 0, first = 1;
    for (size_t i = 0; i < s->u.s.n;) {
        uint32_t cp;
        i += ju_decode(s->u.s.s, s->u.s.n, i, &cp);
        uint32_t out = cp;
        switch (mode) {
        case 'u':
            out = ju_upper(cp);
            break;
        case 'l':
            out = ju_lower(cp);
            break;
        case 's':
            out = ju_isupper(cp) ? ju_lower(cp) : ju_islower(cp) ? ju_upper(cp) : cp;
            break;
        case 'c':
            out = first ? ju_title(cp) : ju_lower(cp);
            break;
        case 't':
            out = prev_cased ? ju_lower(cp) : ju_title(cp);
            prev_cased = ju_iscased(cp);
            break;
        default:
            break;
        }
        first = 0;
        ju_put(&sb, out);
    }
    return jstr_finish(c, 0, &sb);
}

/* ---- searching ---- */

static size_t cp_index_of(const jv *s, size_t byte_off)
{
    return ju_count(s->u.s.s, byte_off);
}

/* Python's start/end arguments of find/count/startswith as byte offsets. */
static int range_args(jctx *c, int line, const jv *s, const jv *start, const jv *end, size_t *b, size_t *e)
{
    size_t count = ju_count(s->u.s.s, s->u.s.n);
    int64_t lo = 0, hi = (int64_t)count;
    const jv *v[2] = {start, end};
    int64_t *dst[2] = {&lo, &hi};
    for (int k = 0; k < 2; k++) {
        if (!v[k] || v[k]->k == JV_NONE)
            continue;
        if (v[k]->k != JV_INT && v[k]->k != JV_BOOL) {
            jfail(c, line, "slice indices must be integers or None");
            return -1;
        }
        int64_t x = v[k]->k == JV_BOOL ? v[k]->u.b : v[k]->u.i;
        if (x < 0) {
            x = x < -(int64_t)count ? 0 : x + (int64_t)count;
        }
        if (x > (int64_t)count)
            x = (int64_t)count;
        *dst[k] = x;
    }
    if (hi < lo)
        hi = lo - 1; /* empty window that can't match */
    *b = ju_offset(s->u.s.s, s->u.s.n, (size_t)lo);
    *e = hi < lo ? *b : ju_offset(s->u.s.s, s->u.s.n, (size_t)hi);
    if (hi < lo)
        return 1;
    return 0;
}

static int64_t find_in(const char *s, size_t b, size_t e, const char *sub, size_t n, int reverse)
{
    if (n > e - b)
        return -1;
    if (!reverse) {
        for (size_t i = b; i + n <= e; i++)
            if (memcmp(s + i, sub, n) == 0)
                return (int64_t)i;
    } else {
        for (size_t i = e - n + 1; i-- > b;)
            if (memcmp(s + i, sub, n) == 0)
                return (int64_t)i;
    }
    return -1;
}

int jarg_need_str(jctx *c, int line, const char *fname, const jv *v)
{
    if (!v || v->k != JV_STR) {
        jfail(c, line, "%s() argument must be str, not %s", fname, v ? jv_type_name(v) : "nothing");
        return -1;
    }
    return 0;
}

int jarg_need_int(jctx *c, int line, const char *fname, const jv *v, int64_t *out)
{
    if (!v || (v->k != JV_INT && v->k != JV_BOOL)) {
        jfail(c, line, "%s() argument must be an integer, not %s", fname, v ? jv_type_name(v) : "nothing");
        return -1;
    }
    *out = v->k == JV_BOOL ? v->u.b : v->u.i;
    return 0;
}

/* ---- split ---- */

static jv *split_ws(jctx *c, const jv *s, int64_t maxsplit, int reverse)
{
    jv **parts = jh_alloc(c->h, (s->u.s.n / 2 + 2) * sizeof *parts);
    size_t np = 0;
    const char *p = s->u.s.s;
    size_t n = s->u.s.n;
    if (!reverse) {
        size_t i = 0;
        for (;;) {
            while (i < n) {
                uint32_t cp;
                size_t l = ju_decode(p, n, i, &cp);
                if (!ju_isspace(cp))
                    break;
                i += l;
            }
            if (i >= n)
                break;
            if (maxsplit >= 0 && (int64_t)np == maxsplit) {
                /* the rest as it is, trailing whitespace included */
                parts[np++] = jv_str_ref(c->h, p + i, n - i);
                break;
            }
            size_t j = i;
            while (j < n) {
                uint32_t cp;
                size_t l = ju_decode(p, n, j, &cp);
                if (ju_isspace(cp))
                    break;
                j += l;
            }
            parts[np++] = jv_str_ref(c->h, p + i, j - i);
            i = j;
        }
        return jv_list(c->h, parts, np);
    }
    size_t e = n;
    for (;;) {
        while (e > 0) {
            size_t l = ju_prev_len(p, e);
            uint32_t cp;
            ju_decode(p, e, e - l, &cp);
            if (!ju_isspace(cp))
                break;
            e -= l;
        }
        if (e == 0)
            break;
        if (maxsplit >= 0 && (int64_t)np == maxsplit) {
            parts[np++] = jv_str_ref(c->h, p, e);
            break;
        }
        size_t b = e;
        while (b > 0) {
            size_t l = ju_prev_len(p, b);
            uint32_t cp;
            ju_decode(p, b, b - l, &cp);
            if (ju_isspace(cp))
                break;
            b -= l;
        }
        parts[np++] = jv_str_ref(c->h, p + b, e - b);
        e = b;
    }
    for (size_t i = 0; i < np / 2; i++) {
        jv *t = parts[i];
        parts[i] = parts[np - 1 - i];
        parts[np - 1 - i] = t;
    }
    return jv_list(c->h, parts, np);
}

static jv *split_sep(jctx *c, int line, const jv *s, const jv *sep, int64_t maxsplit, int reverse)
{
    size_t m = sep->u.s.n;
    if (m == 0)
        return jfail(c, line, "empty separator");
    const char *p = s->u.s.s;
    size_t n = s->u.s.n;
    size_t cap = n / m + 2;
    jv **parts = jh_alloc(c->h, cap * sizeof *parts);
    size_t np = 0;
    if (!reverse) {
        size_t i = 0;
        for (;;) {
            int64_t at = (maxsplit >= 0 && (int64_t)np >= maxsplit) ? -1 : find_in(p, i, n, sep->u.s.s, m, 0);
            if (at < 0) {
                parts[np++] = jv_str_ref(c->h, p + i, n - i);
                break;
            }
            parts[np++] = jv_str_ref(c->h, p + i, (size_t)at - i);
            i = (size_t)at + m;
        }
        return jv_list(c->h, parts, np);
    }
    size_t e = n;
    for (;;) {
        int64_t at = (maxsplit >= 0 && (int64_t)np >= maxsplit) ? -1 : find_in(p, 0, e, sep->u.s.s, m, 1);
        if (at < 0) {
            parts[np++] = jv_str_ref(c->h, p, e);
            break;
        }
        parts[np++] = jv_str_ref(c->h, p + at + m, e - (size_t)at - m);
        e = (size_t)at;
    }
    for (size_t i = 0; i < np / 2; i++) {
        jv *t = parts[i];
        parts[i] = parts[np - 1 - i];
        parts[np - 1 - i] = t;
    }
    return jv_list(c->h, parts, np);
}

/* str.splitlines: line boundaries as Python defines them. */
static jv *splitlines(jctx *c, const jv *s, int keepends)
{
    const char *p = s->u.s.s;
    size_t n = s->u.s.n;
    jv **parts = jh_alloc(c->h, (n + 1) * sizeof *parts);
    size_t np = 0, start = 0, i = 0;
    while (i < n) {
        uint32_t cp;
        size_t l = ju_decode(p, n, i, &cp);
        if (ju_islinebreak(cp)) {
            size_t end = i;
            i += l;
            if (cp == '\r' && i < n && p[i] == '\n')
                i++;
            parts[np++] = jv_str_ref(c->h, p + start, (keepends ? i : end) - start);
            start = i;
        } else {
            i += l;
        }
    }
    if (start < n)
        parts[np++] = jv_str_ref(c->h, p + start, n - start);
    return jv_list(c->h, parts, np);
}

jv *jstr_replace(jctx *c, int line, const jv *s, const jv *old, const jv *new_, int64_t count)
{
    strbuf sb;
    sb_init(&sb);
    const char *p = s->u.s.s;
    size_t n = s->u.s.n, m = old->u.s.n;
    int64_t done = 0;
    if (m == 0) {
        /* "" matches before every code point and at the end */
        size_t i = 0;
        for (;;) {
            if (count < 0 || done < count) {
                if (jreserve(c, line, sb.len + new_->u.s.n)) {
                    sb_free(&sb);
                    return NULL;
                }
                sb_append(&sb, new_->u.s.s, new_->u.s.n);
                done++;
            }
            if (i >= n)
                break;
            uint32_t cp;
            size_t l = ju_decode(p, n, i, &cp);
            sb_append(&sb, p + i, l);
            i += l;
        }
        return jstr_finish(c, line, &sb);
    }
    size_t i = 0;
    while (i < n) {
        int64_t at = (count >= 0 && done >= count) ? -1 : find_in(p, i, n, old->u.s.s, m, 0);
        if (at < 0)
            break;
        if (jreserve(c, line, sb.len + ((size_t)at - i) + new_->u.s.n)) {
            sb_free(&sb);
            return NULL;
        }
        sb_append(&sb, p + i, (size_t)at - i);
        sb_append(&sb, new_->u.s.s, new_->u.s.n);
        i = (size_t)at + m;
        done++;
    }
    sb_append(&sb, p + i, n - i);
    return jstr_finish(c, line, &sb);
}

static jv *pad(jctx *c, int line, const jv *s, int64_t width, const jv *fill, char how)
{
    uint32_t fc = ' ';
    if (fill) {
        if (fill->k != JV_STR || ju_count(fill->u.s.s, fill->u.s.n) != 1)
            return jfail(c, line, "The fill character must be exactly one character long");
        ju_decode(fill->u.s.s, fill->u.s.n, 0, &fc);
    }
    int64_t len = (int64_t)ju_count(s->u.s.s, s->u.s.n);
    if (width <= len)
        return (jv *)s;
    if (jreserve(c, line, (size_t)(width - len) * 4 + s->u.s.n))
        return NULL;
    int64_t marg = width - len, left;
    if (how == '<')
        left = 0;
    else if (how == '>')
        left = marg;
    else
        left = marg / 2 + (marg & width & 1);
    strbuf sb;
    sb_init(&sb);
    for (int64_t i = 0; i < left; i++)
        ju_put(&sb, fc);
    sb_append(&sb, s->u.s.s, s->u.s.n);
    for (int64_t i = 0; i < marg - left; i++)
        ju_put(&sb, fc);
    return jstr_finish(c, line, &sb);
}

/* ---- method tables ---- */

static const char *const STR_METHODS[] = {
    "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "startswith", "endswith",
    "upper", "lower", "title", "capitalize", "swapcase", "casefold", "replace", "find", "rfind",
    "index", "rindex", "count", "join", "isdigit", "isdecimal", "isnumeric", "isalpha",
    "isalnum", "isspace", "islower", "isupper", "istitle", "zfill", "center", "ljust", "rjust",
    "removeprefix", "removesuffix", "partition", "rpartition", "format", NULL};
static const char *const DICT_METHODS[] = {"get", "items", "keys", "values", "copy", NULL};
static const char *const LIST_METHODS[] = {"index", "count", "copy", NULL};
static const char *const TUPLE_METHODS[] = {"index", "count", NULL};
static const char *const LOOP_METHODS[] = {"cycle", "changed", NULL};
static const char *const LIST_UNSAFE[] = {"append", "clear", "pop", "reverse", "insert", "sort",
                                          "extend", "remove", NULL};
static const char *const DICT_UNSAFE[] = {"clear", "pop", "popitem", "setdefault", "update", NULL};

static int in_list(const char *const *l, const char *name)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name))
            return 1;
    return 0;
}

int jinja_has_method(const jv *self, const char *name)
{
    switch (self->k) {
    case JV_STR:
        return in_list(STR_METHODS, name);
    case JV_DICT:
        return in_list(DICT_METHODS, name);
    case JV_LIST:
        return in_list(LIST_METHODS, name);
    case JV_TUPLE:
        return in_list(TUPLE_METHODS, name);
    case JV_LOOP:
        return in_list(LOOP_METHODS, name);
    default:
        return 0;
    }
}

int jinja_unsafe_method(const jv *self, const char *name)
{
    if (self->k == JV_LIST)
        return in_list(LIST_UNSAFE, name);
    if (self->k == JV_DICT)
        return in_list(DICT_UNSAFE, name);
    return 0;
}

static jv *dict_items(jctx *c, const jdict *d, int what)
{
    jv **items = jh_alloc(c->h, (d->n ? d->n : 1) * sizeof *items);
    for (size_t i = 0; i < d->n; i++) {
        if (what == 'k') {
            items[i] = d->keys[i];
        } else if (what == 'v') {
            items[i] = d->vals[i];
        } else {
            jv *pair[2] = {d->keys[i], d->vals[i]};
            items[i] = jv_tuple(c->h, pair, 2);
        }
    }
    jv *l = jv_list(c->h, items, d->n);
    l->u.l.view = what;
    return l;
}

static jv *str_pred(jctx *c, const jv *s, const char *name)
{
    if (s->u.s.n == 0)
        return JV_FALSE_P;
    int any_cased = 0, ok = 1, prev_cased = 0, title_ok = 1;
    for (size_t i = 0; i < s->u.s.n && ok;) {
        uint32_t cp;
        i += ju_decode(s->u.s.s, s->u.s.n, i, &cp);
        if (!strcmp(name, "isdigit") || !strcmp(name, "isdecimal") || !strcmp(name, "isnumeric"))
            ok = ju_isdigit(cp);
        else if (!strcmp(name, "isalpha"))
            ok = ju_isalpha(cp);
        else if (!strcmp(name, "isalnum"))
            ok = ju_isalpha(cp) || ju_isdigit(cp);
        else if (!strcmp(name, "isspace"))
            ok = ju_isspace(cp);
        else if (!strcmp(name, "islower")) {
            if (ju_isupper(cp))
                ok = 0;
            any_cased |= ju_islower(cp);
        } else if (!strcmp(name, "isupper")) {
            if (ju_islower(cp))
                ok = 0;
            any_cased |= ju_isupper(cp);
        } else if (!strcmp(name, "istitle")) {
            if (ju_isupper(cp)) {
                if (prev_cased)
                    title_ok = 0;
                prev_cased = 1;
                any_cased = 1;
            } else if (ju_islower(cp)) {
                if (!prev_cased)
                    title_ok = 0;
                prev_cased = 1;
                any_cased = 1;
            } else {
                prev_cased = 0;
            }
        }
    }
    (void)c;
    if (!strcmp(name, "islower") || !strcmp(name, "isupper"))
        return jv_bool(ok && any_cased);
    if (!strcmp(name, "istitle"))
        return jv_bool(title_ok && any_cased);
    return jv_bool(ok);
}

static jv *str_method(jctx *c, int line, jv *s, const char *name, const jargs *a)
{
    static const char *const none[] = {NULL};
    static const char *const split_kw[] = {"sep", "maxsplit", NULL};
    if (!strcmp(name, "format"))
        return jstr_format(c, line, s, a);
    if (!strcmp(name, "strip") || !strcmp(name, "lstrip") || !strcmp(name, "rstrip")) {
        if (jargs_check(c, line, name, a, 1, none))
            return NULL;
        jv *chars = jarg(a, 0, NULL);
        if (chars && chars->k != JV_NONE && chars->k != JV_STR)
            return jfail(c, line, "%s arg must be None or str", name);
        return jstr_strip(c, s, chars, name[0] != 'r', name[0] != 'l');
    }
    if (!strcmp(name, "split") || !strcmp(name, "rsplit")) {
        if (jargs_check(c, line, name, a, 2, split_kw))
            return NULL;
        jv *sep = jarg(a, 0, "sep"), *ms = jarg(a, 1, "maxsplit");
        int64_t maxsplit = -1;
        if (ms && jarg_need_int(c, line, name, ms, &maxsplit))
            return NULL;
        if (sep && sep->k != JV_NONE) {
            if (jarg_need_str(c, line, name, sep))
                return NULL;
            return split_sep(c, line, s, sep, maxsplit, name[0] == 'r');
        }
        return split_ws(c, s, maxsplit, name[0] == 'r');
    }
    if (!strcmp(name, "splitlines")) {
        jv *ke = jarg(a, 0, "keepends");
        return splitlines(c, s, ke && jv_truthy(ke));
    }
    if (!strcmp(name, "startswith") || !strcmp(name, "endswith")) {
        jv *what = jarg(a, 0, NULL);
        size_t b, e;
        int r = range_args(c, line, s, jarg(a, 1, NULL), jarg(a, 2, NULL), &b, &e);
        if (r < 0)
            return NULL;
        if (!what)
            return jfail(c, line, "%s() takes at least 1 argument (0 given)", name);
        jv **cands = &what;
        size_t nc = 1;
        if (what->k == JV_TUPLE) {
            cands = what->u.l.v;
            nc = what->u.l.n;
        }
        for (size_t i = 0; i < nc; i++) {
            if (cands[i]->k != JV_STR)
                return jfail(c, line, "%s first arg must be str or a tuple of str, not %s", name,
                             jv_type_name(cands[i]));
            if (r == 1)
                continue;
            size_t m = cands[i]->u.s.n;
            if (m > e - b)
                continue;
            size_t at = name[0] == 's' ? b : e - m;
            if (memcmp(s->u.s.s + at, cands[i]->u.s.s, m) == 0)
                return JV_TRUE_P;
        }
        return JV_FALSE_P;
    }
    if (!strcmp(name, "upper"))
        return jstr_case(c, s, 'u');
    if (!strcmp(name, "lower") || !strcmp(name, "casefold"))
        return jstr_case(c, s, 'l');
    if (!strcmp(name, "title"))
        return jstr_case(c, s, 't');
    if (!strcmp(name, "capitalize"))
        return jstr_case(c, s, 'c');
    if (!strcmp(name, "swapcase"))
        return jstr_case(c, s, 's');
    if (!strcmp(name, "replace")) {
        jv *old = jarg(a, 0, NULL), *new_ = jarg(a, 1, NULL), *cnt = jarg(a, 2, "count");
        int64_t count = -1;
        if (jarg_need_str(c, line, name, old) || jarg_need_str(c, line, name, new_) ||
            (cnt && jarg_need_int(c, line, name, cnt, &count)))
            return NULL;
        return jstr_replace(c, line, s, old, new_, count);
    }
    if (!strcmp(name, "find") || !strcmp(name, "rfind") || !strcmp(name, "index") ||
        !strcmp(name, "rindex") || !strcmp(name, "count")) {
        jv *sub = jarg(a, 0, NULL);
        if (jarg_need_str(c, line, name, sub))
            return NULL;
        size_t b, e;
        int r = range_args(c, line, s, jarg(a, 1, NULL), jarg(a, 2, NULL), &b, &e);
        if (r < 0)
            return NULL;
        if (!strcmp(name, "count")) {
            if (r == 1)
                return jv_int(c->h, 0);
            if (sub->u.s.n == 0)
                return jv_int(c->h, (int64_t)ju_count(s->u.s.s + b, e - b) + 1);
            int64_t k = 0;
            size_t i = b;
            for (;;) {
                int64_t at = find_in(s->u.s.s, i, e, sub->u.s.s, sub->u.s.n, 0);
                if (at < 0)
                    break;
                k++;
                i = (size_t)at + sub->u.s.n;
            }
            return jv_int(c->h, k);
        }
        int64_t at = r == 1 ? -1 : find_in(s->u.s.s, b, e, sub->u.s.s, sub->u.s.n, name[0] == 'r');
        if (at < 0) {
            if (strstr(name, "index"))
                return jfail(c, line, "substring not found");
            return jv_int(c->h, -1);
        }
        return jv_int(c->h, (int64_t)cp_index_of(s, (size_t)at));
    }
    if (!strcmp(name, "join")) {
        jv *it = jarg(a, 0, NULL);
        if (!it)
            return jfail(c, line, "join() takes exactly one argument (0 given)");
        size_t n;
        jv **items = jiterate(c, line, it, &n);
        if (!items)
            return NULL;
        strbuf sb;
        sb_init(&sb);
        for (size_t i = 0; i < n; i++) {
            if (items[i]->k != JV_STR) {
                sb_free(&sb);
                return jfail(c, line, "sequence item %zu: expected str instance, %s found", i,
                             jv_type_name(items[i]));
            }
            if (jreserve(c, line, sb.len + s->u.s.n + items[i]->u.s.n)) {
                sb_free(&sb);
                return NULL;
            }
            if (i)
                sb_append(&sb, s->u.s.s, s->u.s.n);
            sb_append(&sb, items[i]->u.s.s, items[i]->u.s.n);
        }
        return jstr_finish(c, line, &sb);
    }
    if (!strncmp(name, "is", 2))
        return str_pred(c, s, name);
    if (!strcmp(name, "zfill")) {
        int64_t w;
        if (jarg_need_int(c, line, name, jarg(a, 0, NULL), &w))
            return NULL;
        int64_t len = (int64_t)ju_count(s->u.s.s, s->u.s.n);
        if (w <= len)
            return s;
        if (jreserve(c, line, (size_t)(w - len) + s->u.s.n))
            return NULL;
        strbuf sb;
        sb_init(&sb);
        size_t sign = s->u.s.n && (s->u.s.s[0] == '+' || s->u.s.s[0] == '-');
        sb_append(&sb, s->u.s.s, sign);
        for (int64_t k = 0; k < w - len; k++)
            sb_putc(&sb, '0');
        sb_append(&sb, s->u.s.s + sign, s->u.s.n - sign);
        return jstr_finish(c, line, &sb);
    }
    if (!strcmp(name, "center") || !strcmp(name, "ljust") || !strcmp(name, "rjust")) {
        int64_t w;
        if (jarg_need_int(c, line, name, jarg(a, 0, NULL), &w))
            return NULL;
        return pad(c, line, s, w, jarg(a, 1, NULL), name[0] == 'c' ? '^' : name[0] == 'l' ? '<' : '>');
    }
    if (!strcmp(name, "removeprefix") || !strcmp(name, "removesuffix")) {
        jv *x = jarg(a, 0, NULL);
        if (jarg_need_str(c, line, name, x))
            return NULL;
        size_t m = x->u.s.n;
        if (m > s->u.s.n)
            return s;
        if (name[6] == 'p' && memcmp(s->u.s.s, x->u.s.s, m) == 0)
            return jv_str_ref(c->h, s->u.s.s + m, s->u.s.n - m);
        if (name[6] == 's' && memcmp(s->u.s.s + s->u.s.n - m, x->u.s.s, m) == 0)
            return jv_str_ref(c->h, s->u.s.s, s->u.s.n - m);
        return s;
    }
    if (!strcmp(name, "partition") || !strcmp(name, "rpartition")) {
        jv *sep = jarg(a, 0, NULL);
        if (jarg_need_str(c, line, name, sep))
            return NULL;
        if (sep->u.s.n == 0)
            return jfail(c, line, "empty separator");
        int rev = name[0] == 'r';
        int64_t at = find_in(s->u.s.s, 0, s->u.s.n, sep->u.s.s, sep->u.s.n, rev);
        jv *empty = jv_str_ref(c->h, "", 0);
        jv *parts[3];
        if (at < 0) {
            parts[0] = rev ? empty : s;
            parts[1] = empty;
            parts[2] = rev ? s : empty;
        } else {
            parts[0] = jv_str_ref(c->h, s->u.s.s, (size_t)at);
            parts[1] = sep;
            parts[2] = jv_str_ref(c->h, s->u.s.s + at + sep->u.s.n, s->u.s.n - (size_t)at - sep->u.s.n);
        }
        return jv_tuple(c->h, parts, 3);
    }
    return jfail(c, line, "'str' object has no attribute '%s'", name);
}

/* markupsafe's (3.x) Markup methods: the str-returning ones give a Markup
 * back, and replace's new text and the fill character of ljust, rjust and
 * center are escaped first (other arguments are not: markupsafe 2.x escaped
 * them all); split and its kin give lists of Markup; join escapes the items;
 * format escapes what it formats. Methods returning numbers or booleans are
 * str's own. */
static jv *markup_method(jctx *c, int line, jv *self, const char *name, const jargs *a)
{
    static const char *const wrapped[] = {"capitalize", "title", "lower", "upper", "replace", "ljust",
                                          "rjust", "lstrip", "rstrip", "center", "strip", "translate",
                                          "expandtabs", "swapcase", "zfill", "casefold", "removeprefix",
                                          "removesuffix", "join", NULL};
    static const char *const listed[] = {"split", "rsplit", "splitlines", "partition", "rpartition", NULL};
    static const char *const escape_second[] = {"replace", "ljust", "rjust", "center", NULL};
    if (!strcmp(name, "format"))
        return jstr_format(c, line, self, a);
    int wrap = 0, list = 0, esc2 = 0;
    for (const char *const *w = wrapped; *w; w++)
        wrap |= !strcmp(name, *w);
    for (const char *const *w = listed; *w; w++)
        list |= !strcmp(name, *w);
    for (const char *const *w = escape_second; *w; w++)
        esc2 |= !strcmp(name, *w);
    jargs ea = *a;
    jv *pos[2];
    if ((esc2 && a->n_pos == 2) || (!strcmp(name, "join") && a->n_pos == 1)) {
        memcpy(pos, a->pos, a->n_pos * sizeof *pos);
        ea.pos = pos;
    }
    if (esc2 && a->n_pos == 2 && !(pos[1] = jescape_arg(c, line, a->pos[1])))
        return NULL;
    if (!strcmp(name, "join") && a->n_pos == 1) {
        size_t n;
        jv **items = jiterate(c, line, a->pos[0], &n);
        if (!items)
            return NULL;
        jv **esc = jh_alloc(c->h, (n ? n : 1) * sizeof *esc);
        for (size_t i = 0; i < n; i++)
            if (!(esc[i] = jescape(c, line, items[i])))
                return NULL;
        pos[0] = jv_list(c->h, esc, n);
    }
    jv *r = str_method(c, line, jv_plain(c->h, self), name, &ea);
    if (!r)
        return NULL;
    if (wrap && r->k == JV_STR)
        return jv_markup(c->h, r);
    if ((wrap || list) && jv_is_seq(r)) {
        jv **items = jh_alloc(c->h, (r->u.l.n ? r->u.l.n : 1) * sizeof *items);
        for (size_t i = 0; i < r->u.l.n; i++)
            items[i] = r->u.l.v[i]->k == JV_STR ? jv_markup(c->h, r->u.l.v[i]) : r->u.l.v[i];
        return r->k == JV_TUPLE ? jv_tuple(c->h, items, r->u.l.n) : jv_list(c->h, items, r->u.l.n);
    }
    return r;
}

jv *jinja_call_method(jctx *c, int line, jv *self, const char *name, const jargs *a)
{
    switch (self->k) {
    case JV_STR:
        if (self->safe)
            return markup_method(c, line, self, name, a);
        return str_method(c, line, self, name, a);
    case JV_DICT:
        if (!strcmp(name, "get")) {
            jv *key = jarg(a, 0, NULL);
            if (!key)
                return jfail(c, line, "get expected at least 1 argument, got 0");
            jv *v = jdict_get(self->u.d, key);
            if (v)
                return v;
            jv *def = jarg(a, 1, NULL);
            return def ? def : JV_NONE_P;
        }
        if (!strcmp(name, "items") || !strcmp(name, "keys") || !strcmp(name, "values"))
            return dict_items(c, self->u.d, name[0] == 'i' ? 'i' : name[0]);
        if (!strcmp(name, "copy")) {
            jv *d = jv_dict(c->h);
            for (size_t i = 0; i < self->u.d->n; i++)
                jdict_set(c->h, d->u.d, self->u.d->keys[i], self->u.d->vals[i]);
            return d;
        }
        break;
    case JV_LIST:
    case JV_TUPLE: {
        if (!strcmp(name, "copy"))
            return jv_list(c->h, self->u.l.v, self->u.l.n);
        jv *x = jarg(a, 0, NULL);
        if (!x)
            return jfail(c, line, "%s() takes exactly one argument (0 given)", name);
        int64_t k = 0;
        for (size_t i = 0; i < self->u.l.n; i++)
            if (jv_equal(self->u.l.v[i], x)) {
                if (!strcmp(name, "index"))
                    return jv_int(c->h, (int64_t)i);
                k++;
            }
        if (!strcmp(name, "index"))
            return jfail(c, line, "value is not in list");
        return jv_int(c->h, k);
    }
    case JV_LOOP: {
        jloop *l = self->u.loop;
        if (!strcmp(name, "cycle")) {
            if (a->n_pos == 0)
                return jfail(c, line, "no items for cycling given");
            return a->pos[l->i % a->n_pos];
        }
        if (!strcmp(name, "changed")) {
            jv *now = jv_tuple(c->h, a->pos, a->n_pos);
            if (l->changed_last && jv_equal(l->changed_last, now))
                return JV_FALSE_P;
            l->changed_last = now;
            return JV_TRUE_P;
        }
        break;
    }
    default:
        break;
    }
    return jfail(c, line, "'%s' object has no method '%s'", jv_type_name(self), name);
}
