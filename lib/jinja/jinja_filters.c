/* jinja2's builtin filters and tests, with Hugging Face's tojson.
 *
 * Each filter does what its jinja2 counterpart does with the same input,
 * Undefined included: most treat it as "" or empty (trim, join, list,
 * length, map), a few raise (int, float, tojson, dictsort, indent), default
 * replaces it. Filters jinja2 has but chat templates have no use for
 * (urlize, pprint, random ...) are known names that fail when run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "jinja/jinja_internal.h"

static const char *const FILTERS[] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "filesizeformat", "first", "float", "forceescape", "format", "groupby", "indent",
    "int", "join", "last", "length", "list", "lower", "items", "map", "min", "max", "pprint",
    "random", "reject", "rejectattr", "replace", "reverse", "round", "safe", "select",
    "selectattr", "slice", "sort", "string", "striptags", "sum", "title", "trim", "truncate",
    "unique", "upper", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr", "tojson", NULL};

static const char *const TESTS[] = {
    "odd", "even", "divisibleby", "defined", "undefined", "filter", "test", "none", "boolean",
    "false", "true", "integer", "float", "lower", "upper", "string", "mapping", "number",
    "sequence", "iterable", "callable", "sameas", "escaped", "in", "==", "eq", "equalto", "!=",
    "ne", ">", "gt", "greaterthan", "ge", ">=", "<", "lt", "lessthan", "<=", "le", NULL};

static int in_names(const char *const *l, const char *name)
{
    for (int i = 0; l[i]; i++)
        if (!strcmp(l[i], name))
            return 1;
    return 0;
}

int jinja_filter_known(const char *name)
{
    return in_names(FILTERS, name);
}

int jinja_test_known(const char *name)
{
    return in_names(TESTS, name);
}

static jv *undef_err(jctx *c, int line, const jv *v)
{
    return jfail(c, line, "%s", v->u.undef ? v->u.undef : "undefined value");
}

static int64_t as_int(const jv *v)
{
    return v->k == JV_BOOL ? v->u.b : v->u.i;
}

static int is_int(const jv *v)
{
    return v && (v->k == JV_INT || v->k == JV_BOOL);
}

/* ---- attribute getters (jinja2's make_attrgetter) ---- */

/* item.a.b (dotted, numeric parts as indexes) via getitem; NULL attribute:
 * the item itself. */
static jv *attr_get(jctx *c, int line, jv *item, const jv *attribute, const jv *dflt)
{
    if (!attribute || attribute->k == JV_NONE)
        return item;
    jv *v = item;
    if (attribute->k == JV_STR) {
        const char *s = attribute->u.s.s;
        size_t n = attribute->u.s.n, b = 0;
        for (size_t i = 0; i <= n; i++) {
            if (i < n && s[i] != '.')
                continue;
            int digits = i > b;
            for (size_t k = b; k < i; k++)
                digits &= s[k] >= '0' && s[k] <= '9';
            jv *key;
            if (digits && i - b < 18) {
                int64_t x = 0;
                for (size_t k = b; k < i; k++)
                    x = x * 10 + (s[k] - '0');
                key = jv_int(c->h, x);
            } else {
                key = jv_str_ref(c->h, s + b, i - b);
            }
            v = jgetitem(c, line, v, key);
            if (!v)
                return NULL;
            if (v->k == JV_UNDEF && dflt)
                return (jv *)dflt;
            b = i + 1;
        }
        return v;
    }
    v = jgetitem(c, line, v, (jv *)attribute);
    if (v && v->k == JV_UNDEF && dflt)
        return (jv *)dflt;
    return v;
}

static jv *lower_if_str(jctx *c, jv *v)
{
    return v->k == JV_STR ? jstr_case(c, v, 'l') : v;
}

/* ---- sorting (stable, like Python's sorted) ---- */

typedef struct {
    jctx *c;
    int line;
    int reverse;
    int failed;
} sorter;

static int key_less(sorter *st, const jv *a, const jv *b)
{
    if (st->failed)
        return 0;
    int cmp;
    const jv *x = st->reverse ? b : a, *y = st->reverse ? a : b;
    if (x->k == JV_UNDEF || y->k == JV_UNDEF) {
        undef_err(st->c, st->line, x->k == JV_UNDEF ? x : y);
        st->failed = 1;
        return 0;
    }
    if (jv_compare(x, y, &cmp)) {
        jfail(st->c, st->line, "'<' not supported between instances of '%s' and '%s'", jv_type_name(x),
              jv_type_name(y));
        st->failed = 1;
        return 0;
    }
    return cmp == -1;
}

/* Sort idx[0..n) by keys[idx[i]]; tmp is scratch of n entries. */
static void merge_sort(sorter *st, jv **keys, size_t *idx, size_t *tmp, size_t n)
{
    if (n < 2 || st->failed)
        return;
    size_t h = n / 2;
    merge_sort(st, keys, idx, tmp, h);
    merge_sort(st, keys, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        if (key_less(st, keys[idx[j]], keys[idx[i]]))
            tmp[k++] = idx[j++];
        else
            tmp[k++] = idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* Sort items by keys; returns a new array or NULL on error. */
static jv **sort_by(jctx *c, int line, jv **items, jv **keys, size_t n, int reverse)
{
    size_t *idx = xmalloc((n ? n : 1) * sizeof *idx);
    size_t *tmp = xmalloc((n ? n : 1) * sizeof *tmp);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    sorter st = {c, line, reverse, 0};
    merge_sort(&st, keys, idx, tmp, n);
    jv **out = NULL;
    if (!st.failed) {
        out = jh_alloc(c->h, (n ? n : 1) * sizeof *out);
        for (size_t i = 0; i < n; i++)
            out[i] = items[idx[i]];
    }
    free(idx);
    free(tmp);
    return out;
}

/* ---- tojson ---- */

static jv *f_tojson(jctx *c, int line, jv *v, const jargs *a)
{
    jv *ensure = jarg(a, 0, "ensure_ascii"), *indent = jarg(a, 1, "indent"), *seps = jarg(a, 2, "separators"),
       *sort = jarg(a, 3, "sort_keys");
    static const char *const ok[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (a->n_pos > 4)
        return jfail(c, line, "tojson() takes at most 5 arguments");
    for (size_t i = 0; i < a->n_kw; i++)
        if (!in_names(ok, a->kw_names[i]))
            return jfail(c, line, "tojson() got an unexpected keyword argument '%s'", a->kw_names[i]);
    jjson_opts o = {0};
    o.ensure_ascii = ensure && jv_truthy(ensure);
    o.sort_keys = sort && jv_truthy(sort);
    if (indent && indent->k != JV_NONE) {
        if (is_int(indent)) {
            int64_t w = as_int(indent);
            if (w > 1000)
                return jfail(c, line, "tojson indent too large");
            char *sp = jh_alloc(c->h, (size_t)(w > 0 ? w : 0) + 1);
            for (int64_t i = 0; i < w; i++)
                sp[i] = ' ';
            o.indent = sp;
        } else if (indent->k == JV_STR) {
            o.indent = jh_strndup(c->h, indent->u.s.s, indent->u.s.n);
        } else {
            return jfail(c, line, "tojson indent must be an integer or a string, not %s", jv_type_name(indent));
        }
    }
    if (seps && seps->k != JV_NONE) {
        if (!jv_is_seq(seps) || seps->u.l.n != 2 || seps->u.l.v[0]->k != JV_STR || seps->u.l.v[1]->k != JV_STR)
            return jfail(c, line, "tojson separators must be a pair of strings");
        o.item_sep = jh_strndup(c->h, seps->u.l.v[0]->u.s.s, seps->u.l.v[0]->u.s.n);
        o.key_sep = jh_strndup(c->h, seps->u.l.v[1]->u.s.s, seps->u.l.v[1]->u.s.n);
    }
    strbuf sb;
    sb_init(&sb);
    char why[256];
    if (jv_tojson(&sb, v, &o, why, sizeof why)) {
        sb_free(&sb);
        return jfail(c, line, "tojson: %s", why);
    }
    jv *r = NULL;
    if (!jreserve(c, line, sb.len))
        r = jv_str(c->h, sb_str(&sb), sb.len);
    sb_free(&sb);
    return r;
}

/* ---- select / reject / map ---- */

static jv *f_select(jctx *c, jscope *s, int line, jv *v, const jargs *a, int attr, int reject)
{
    size_t off = attr ? 1 : 0;
    jv *attribute = NULL;
    if (attr) {
        if (a->n_pos < 1)
            return jfail(c, line, "Missing parameter for attribute name");
        attribute = a->pos[0];
    }
    const char *test = NULL;
    if (a->n_pos > off) {
        jv *t = a->pos[off];
        if (t->k != JV_STR)
            return jfail(c, line, "test name must be a string");
        test = jh_strndup(c->h, t->u.s.s, t->u.s.n);
    }
    jv **out = NULL;
    size_t n = 0, k = 0;
    if (jv_truthy(v)) {
        jv **items = jiterate(c, line, v, &n);
        if (!items)
            return NULL;
        out = jh_alloc(c->h, (n ? n : 1) * sizeof *out);
        jargs ta = {a->pos + (test ? off + 1 : a->n_pos), test ? a->n_pos - off - 1 : 0, a->kw_names, a->kw, a->n_kw};
        for (size_t i = 0; i < n; i++) {
            jv *x = attr_get(c, line, items[i], attribute, NULL);
            if (!x)
                return NULL;
            int r;
            if (test) {
                r = jinja_apply_test(c, s, line, test, x, &ta);
                if (r < 0)
                    return NULL;
            } else {
                r = jv_truthy(x);
            }
            if (r != reject)
                out[k++] = items[i];
        }
    }
    return jv_list(c->h, out ? out : (jv *[]){NULL}, k);
}

static jv *f_map(jctx *c, jscope *s, int line, jv *v, const jargs *a)
{
    if (!jv_truthy(v))
        return jv_list(c->h, NULL, 0);
    size_t n;
    jv **items = jiterate(c, line, v, &n);
    if (!items)
        return NULL;
    jv **out = jh_alloc(c->h, (n ? n : 1) * sizeof *out);
    jv *attribute = jarg(a, -1, "attribute");
    if (a->n_pos == 0 && attribute) {
        jv *dflt = jarg(a, -1, "default");
        for (size_t i = 0; i < n; i++)
            if (!(out[i] = attr_get(c, line, items[i], attribute, dflt)))
                return NULL;
        return jv_list(c->h, out, n);
    }
    if (a->n_pos == 0 || a->pos[0]->k != JV_STR)
        return jfail(c, line, "map requires a filter argument");
    const char *fname = jh_strndup(c->h, a->pos[0]->u.s.s, a->pos[0]->u.s.n);
    if (!jinja_filter_known(fname))
        return jfail(c, line, "no filter named '%s'", fname);
    jargs fa = {a->pos + 1, a->n_pos - 1, a->kw_names, a->kw, a->n_kw};
    for (size_t i = 0; i < n; i++)
        if (!(out[i] = jinja_apply_filter(c, s, line, fname, items[i], &fa)))
            return NULL;
    return jv_list(c->h, out, n);
}

/* ---- the rest ---- */

static jv *f_join(jctx *c, int line, jv *v, const jargs *a)
{
    jv *sep = jarg(a, 0, "d"), *attribute = jarg(a, 1, "attribute");
    size_t n;
    jv **items = jiterate(c, line, v, &n);
    if (!items)
        return NULL;
    strbuf sb;
    sb_init(&sb);
    for (size_t i = 0; i < n; i++) {
        jv *x = attr_get(c, line, items[i], attribute, NULL);
        if (!x || jreserve(c, line, sb.len)) {
            sb_free(&sb);
            return NULL;
        }
        if (i && sep)
            jv_str_into(&sb, sep);
        jv_str_into(&sb, x);
    }
    jv *r = NULL;
    if (!jreserve(c, line, sb.len))
        r = jv_str(c->h, sb_str(&sb), sb.len);
    sb_free(&sb);
    return r;
}

static jv *f_length(jctx *c, int line, jv *v)
{
    switch (v->k) {
    case JV_STR:
        return jv_int(c->h, (int64_t)ju_count(v->u.s.s, v->u.s.n));
    case JV_LIST:
    case JV_TUPLE:
        return jv_int(c->h, (int64_t)v->u.l.n);
    case JV_DICT:
        return jv_int(c->h, (int64_t)v->u.d->n);
    case JV_UNDEF:
        return jv_int(c->h, 0);
    case JV_LOOP:
        return jv_int(c->h, (int64_t)v->u.loop->n);
    default:
        return jfail(c, line, "object of type '%s' has no len()", jv_type_name(v));
    }
}

static jv *f_indent(jctx *c, int line, jv *v, const jargs *a)
{
    if (v->k == JV_UNDEF)
        return undef_err(c, line, v);
    if (v->k != JV_STR) /* jinja2 does s += "\n" */
        return jfail(c, line, "unsupported operand type(s) for +=: '%s' and 'str'", jv_type_name(v));
    jv *width = jarg(a, 0, "width"), *first = jarg(a, 1, "first"), *blank = jarg(a, 2, "blank");
    const char *ind = "    ";
    size_t ind_n = 4;
    if (width) {
        if (width->k == JV_STR) {
            ind = width->u.s.s;
            ind_n = width->u.s.n;
        } else if (is_int(width)) {
            int64_t w = as_int(width);
            if (w > 10000)
                return jfail(c, line, "indent width too large");
            ind_n = w > 0 ? (size_t)w : 0;
            char *sp = jh_alloc(c->h, ind_n + 1);
            memset(sp, ' ', ind_n);
            ind = sp;
        } else {
            return jfail(c, line, "indent width must be an integer or a string");
        }
    }
    jv *s = jstr_of(c, line, v);
    if (!s)
        return NULL;
    /* s + "\n", split into lines at Python line boundaries */
    strbuf src;
    sb_init(&src);
    sb_append(&src, s->u.s.s, s->u.s.n);
    sb_putc(&src, '\n');
    jv whole = {.k = JV_STR, .u.s = {sb_str(&src), src.len}};
    jargs none = {0};
    jv *lines = jinja_call_method(c, line, &whole, "splitlines", &none);
    if (!lines) {
        sb_free(&src);
        return NULL;
    }
    strbuf sb;
    sb_init(&sb);
    size_t n = lines->u.l.n;
    if (jreserve(c, line, s->u.s.n + (n + 1) * (ind_n + 1))) {
        sb_free(&src);
        sb_free(&sb);
        return NULL;
    }
    if (first && jv_truthy(first))
        sb_append(&sb, ind, ind_n);
    for (size_t i = 0; i < n; i++) {
        jv *ln = lines->u.l.v[i];
        if (i) {
            sb_putc(&sb, '\n');
            if (ln->u.s.n || (blank && jv_truthy(blank)))
                sb_append(&sb, ind, ind_n);
        }
        sb_append(&sb, ln->u.s.s, ln->u.s.n);
    }
    jv *r = jv_str(c->h, sb_str(&sb), sb.len);
    sb_free(&src);
    sb_free(&sb);
    return r;
}

/* Python int(str, base): optional sign, underscores between digits, spaces around. */
static int parse_int_str(const jv *s, int base, int64_t *out)
{
    const char *p = s->u.s.s;
    size_t n = s->u.s.n, i = 0;
    while (i < n && (p[i] == ' ' || (p[i] >= 9 && p[i] <= 13)))
        i++;
    while (n > i && (p[n - 1] == ' ' || (p[n - 1] >= 9 && p[n - 1] <= 13)))
        n--;
    int neg = 0;
    if (i < n && (p[i] == '+' || p[i] == '-'))
        neg = p[i++] == '-';
    if (base == 0 || base == 16 || base == 8 || base == 2) {
        if (i + 1 < n && p[i] == '0') {
            char x = p[i + 1] | 0x20;
            int b = x == 'x' ? 16 : x == 'o' ? 8 : x == 'b' ? 2 : 0;
            if (b && (base == 0 || base == b)) {
                base = b;
                i += 2;
                if (i < n && p[i] == '_')
                    i++;
            }
        }
        if (base == 0)
            base = 10;
    }
    if (i >= n)
        return -1;
    uint64_t v = 0;
    int prev_us = 1;
    for (; i < n; i++) {
        if (p[i] == '_') {
            if (prev_us)
                return -1;
            prev_us = 1;
            continue;
        }
        int d = (p[i] >= '0' && p[i] <= '9') ? p[i] - '0'
                : ((p[i] | 0x20) >= 'a' && (p[i] | 0x20) <= 'z') ? (p[i] | 0x20) - 'a' + 10 : 99;
        if (d >= base)
            return -1;
        if (v > ((uint64_t)INT64_MAX + 1 - (uint64_t)d) / (uint64_t)base)
            return -2;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_us = 0;
    }
    if (prev_us)
        return -1;
    if (!neg && v > INT64_MAX)
        return -2;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

/* Python float(str). */
static int parse_float_str(const jv *s, double *out)
{
    char buf[128];
    const char *p = s->u.s.s;
    size_t n = s->u.s.n, i = 0, k = 0;
    while (i < n && (p[i] == ' ' || (p[i] >= 9 && p[i] <= 13)))
        i++;
    while (n > i && (p[n - 1] == ' ' || (p[n - 1] >= 9 && p[n - 1] <= 13)))
        n--;
    if (i >= n || n - i >= sizeof buf)
        return -1;
    for (; i < n; i++) {
        char ch = p[i];
        if (ch == '_') {
            if (k == 0 || !(buf[k - 1] >= '0' && buf[k - 1] <= '9') || i + 1 >= n || !(p[i + 1] >= '0' && p[i + 1] <= '9'))
                return -1;
            continue;
        }
        if (!((ch >= '0' && ch <= '9') || ch == '.' || ch == 'e' || ch == 'E' || ch == '+' || ch == '-' ||
              ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'z')))
            return -1;
        buf[k++] = ch;
    }
    buf[k] = 0;
    /* strtod accepts hex floats and "infinity"/"nan(...)": Python accepts inf/infinity/nan only */
    for (size_t j = 0; j < k; j++) {
        char x = buf[j] | 0x20;
        if (x == 'x' || x == 'p' || buf[j] == '(')
            return -1;
    }
    char *end;
    double v = strtod(buf, &end);
    if (*end)
        return -1;
    *out = v;
    return 0;
}

static jv *f_int(jctx *c, int line, jv *v, const jargs *a)
{
    jv *dflt = jarg(a, 0, "default"), *basev = jarg(a, 1, "base");
    jv *fallback = dflt ? dflt : jv_int(c->h, 0);
    int base = basev && is_int(basev) ? (int)as_int(basev) : 10;
    switch (v->k) {
    case JV_UNDEF:
        return undef_err(c, line, v);
    case JV_BOOL:
    case JV_INT:
        return jv_int(c->h, as_int(v));
    case JV_FLOAT:
        if (!isfinite(v->u.f))
            return fallback;
        if (fabs(v->u.f) >= 9.2e18)
            return jfail(c, line, "integer overflow (Python integers are unbounded, ours are 64-bit)");
        return jv_int(c->h, (int64_t)v->u.f);
    case JV_STR: {
        int64_t x;
        int r = parse_int_str(v, base, &x);
        if (r == 0)
            return jv_int(c->h, x);
        if (r == -2)
            return jfail(c, line, "integer overflow (Python integers are unbounded, ours are 64-bit)");
        double f;
        if (parse_float_str(v, &f) == 0 && isfinite(f) && fabs(f) < 9.2e18)
            return jv_int(c->h, (int64_t)f);
        return fallback;
    }
    default:
        return fallback;
    }
}

static jv *f_float(jctx *c, int line, jv *v, const jargs *a)
{
    jv *dflt = jarg(a, 0, "default");
    jv *fallback = dflt ? dflt : jv_float(c->h, 0.0);
    if (v->k == JV_UNDEF)
        return undef_err(c, line, v);
    if (jv_is_num(v))
        return jv_float(c->h, jv_num(v));
    if (v->k == JV_STR) {
        double f;
        if (parse_float_str(v, &f) == 0)
            return jv_float(c->h, f);
    }
    return fallback;
}

/* Python's round(x, n) for floats: correctly rounded, ties to even. */
static double py_round(double x, int64_t nd)
{
    if (!isfinite(x) || nd > 300)
        return x;
    if (nd >= 0) {
        char buf[512];
        snprintf(buf, sizeof buf, "%.*f", (int)nd, x);
        return strtod(buf, NULL);
    }
    if (nd < -308)
        return 0.0 * x;
    double p = pow(10.0, (double)-nd);
    double y = x / p;
    double r = nearbyint(y);
    return r * p;
}

static jv *f_round(jctx *c, int line, jv *v, const jargs *a)
{
    jv *precv = jarg(a, 0, "precision"), *methodv = jarg(a, 1, "method");
    int64_t prec = precv && is_int(precv) ? as_int(precv) : 0;
    const char *method = "common";
    if (methodv && methodv->k == JV_STR)
        method = jh_strndup(c->h, methodv->u.s.s, methodv->u.s.n);
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
        return jfail(c, line, "method must be common, ceil or floor");
    if (v->k == JV_UNDEF)
        return jfail(c, line, "type Undefined doesn't define __round__ method");
    if (!jv_is_num(v))
        return jfail(c, line, "type %s doesn't define __round__ method", jv_type_name(v));
    if (!strcmp(method, "common")) {
        if (v->k != JV_FLOAT) {
            if (prec >= 0)
                return jv_int(c->h, as_int(v));
            int64_t p = 1;
            for (int64_t i = 0; i < -prec && p < INT64_MAX / 10; i++)
                p *= 10;
            if (-prec > 18)
                return jv_int(c->h, 0);
            int64_t x = as_int(v), q = x / p, r = x % p;
            if (r < 0) {
                r += p;
                q -= 1;
            }
            if (r * 2 > p || (r * 2 == p && (q & 1)))
                q += 1;
            return jv_int(c->h, q * p);
        }
        return jv_float(c->h, py_round(v->u.f, prec));
    }
    double p = pow(10.0, (double)prec);
    double x = jv_num(v) * p;
    x = method[0] == 'c' ? ceil(x) : floor(x);
    return jv_float(c->h, x / p);
}

static jv *f_sort(jctx *c, int line, jv *v, const jargs *a, int dictsort)
{
    jv **items;
    size_t n;
    jv *rev = jarg(a, dictsort ? 2 : 0, "reverse");
    jv *cs = jarg(a, dictsort ? 0 : 1, "case_sensitive");
    if (dictsort) {
        if (v->k == JV_UNDEF)
            return undef_err(c, line, v);
        if (v->k != JV_DICT)
            return jfail(c, line, "'%s' object has no attribute 'items'", jv_type_name(v));
        jv *by = jarg(a, 1, "by");
        int pos = 0;
        if (by) {
            if (by->k == JV_STR && by->u.s.n == 3 && !memcmp(by->u.s.s, "key", 3))
                pos = 0;
            else if (by->k == JV_STR && by->u.s.n == 5 && !memcmp(by->u.s.s, "value", 5))
                pos = 1;
            else
                return jfail(c, line, "You can only sort by either \"key\" or \"value\"");
        }
        n = v->u.d->n;
        items = jh_alloc(c->h, (n ? n : 1) * sizeof *items);
        jv **keys = jh_alloc(c->h, (n ? n : 1) * sizeof *keys);
        for (size_t i = 0; i < n; i++) {
            jv *pair[2] = {v->u.d->keys[i], v->u.d->vals[i]};
            items[i] = jv_tuple(c->h, pair, 2);
            keys[i] = pair[pos];
            if (!(cs && jv_truthy(cs)))
                keys[i] = lower_if_str(c, keys[i]);
        }
        jv **sorted = sort_by(c, line, items, keys, n, rev && jv_truthy(rev));
        return sorted ? jv_list(c->h, sorted, n) : NULL;
    }
    jv *attribute = jarg(a, 2, "attribute");
    items = jiterate(c, line, v, &n);
    if (!items)
        return NULL;
    jv **keys = jh_alloc(c->h, (n ? n : 1) * sizeof *keys);
    for (size_t i = 0; i < n; i++) {
        jv *k;
        if (attribute && attribute->k == JV_STR && memchr(attribute->u.s.s, ',', attribute->u.s.n)) {
            /* several attributes: a tuple key */
            jv sep = {.k = JV_STR, .u.s = {",", 1}};
            jargs sa = {(jv *[]){&sep}, 1, NULL, NULL, 0};
            jv *parts = jinja_call_method(c, line, attribute, "split", &sa);
            if (!parts)
                return NULL;
            jv **ks = jh_alloc(c->h, parts->u.l.n * sizeof *ks);
            for (size_t j = 0; j < parts->u.l.n; j++) {
                ks[j] = attr_get(c, line, items[i], parts->u.l.v[j], NULL);
                if (!ks[j])
                    return NULL;
                if (!(cs && jv_truthy(cs)))
                    ks[j] = lower_if_str(c, ks[j]);
            }
            k = jv_tuple(c->h, ks, parts->u.l.n);
        } else {
            k = attr_get(c, line, items[i], attribute, NULL);
            if (!k)
                return NULL;
            if (!(cs && jv_truthy(cs)))
                k = lower_if_str(c, k);
        }
        keys[i] = k;
    }
    jv **sorted = sort_by(c, line, items, keys, n, rev && jv_truthy(rev));
    return sorted ? jv_list(c->h, sorted, n) : NULL;
}

static jv *f_minmax(jctx *c, int line, jv *v, const jargs *a, int want_max)
{
    jv *cs = jarg(a, 0, "case_sensitive"), *attribute = jarg(a, 1, "attribute");
    size_t n;
    jv **items = jiterate(c, line, v, &n);
    if (!items)
        return NULL;
    if (n == 0)
        return jv_undef(c->h, "No aggregated item, sequence was empty.");
    jv *best = NULL, *best_key = NULL;
    sorter st = {c, line, 0, 0};
    for (size_t i = 0; i < n; i++) {
        jv *k = attr_get(c, line, items[i], attribute, NULL);
        if (!k)
            return NULL;
        if (!(cs && jv_truthy(cs)))
            k = lower_if_str(c, k);
        if (!best || (want_max ? key_less(&st, best_key, k) : key_less(&st, k, best_key))) {
            best = items[i];
            best_key = k;
        }
        if (st.failed)
            return NULL;
    }
    return best;
}

static jv *f_unique(jctx *c, int line, jv *v, const jargs *a)
{
    jv *cs = jarg(a, 0, "case_sensitive"), *attribute = jarg(a, 1, "attribute");
    size_t n;
    jv **items = jiterate(c, line, v, &n);
    if (!items)
        return NULL;
    jv **out = jh_alloc(c->h, (n ? n : 1) * sizeof *out);
    jv **seen = jh_alloc(c->h, (n ? n : 1) * sizeof *seen);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        jv *key = attr_get(c, line, items[i], attribute, NULL);
        if (!key)
            return NULL;
        if (!(cs && jv_truthy(cs)))
            key = lower_if_str(c, key);
        if (key->k == JV_LIST || key->k == JV_DICT)
            return jfail(c, line, "unhashable type: '%s'", jv_type_name(key));
        int dup = 0;
        for (size_t j = 0; j < k && !dup; j++)
            dup = jv_equal(seen[j], key);
        if (!dup) {
            seen[k] = key;
            out[k++] = items[i];
        }
    }
    return jv_list(c->h, out, k);
}

void jescape_into(strbuf *sb, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        switch (s[i]) {
        case '&':
            sb_puts(sb, "&amp;");
            break;
        case '<':
            sb_puts(sb, "&lt;");
            break;
        case '>':
            sb_puts(sb, "&gt;");
            break;
        case '"':
            sb_puts(sb, "&#34;");
            break;
        case '\'':
            sb_puts(sb, "&#39;");
            break;
        default:
            sb_putc(sb, s[i]);
        }
    }
}

jv *jescape(jctx *c, int line, jv *v)
{
    if (v->k == JV_STR && v->safe)
        return v;
    jv *s = jstr_of(c, line, v);
    if (!s)
        return NULL;
    strbuf sb;
    sb_init(&sb);
    jescape_into(&sb, s->u.s.s, s->u.s.n);
    jv *r = jstr_finish(c, line, &sb);
    return r ? jv_markup(c->h, r) : NULL;
}

jv *jescape_arg(jctx *c, int line, jv *v)
{
    return v->k == JV_STR ? jescape(c, line, v) : v;
}

static jv *f_title(jctx *c, int line, jv *v)
{
    /* jinja2 splits at runs of [-\s({[<] and capitalizes each piece */
    jv *s = jstr_of(c, line, v);
    if (!s)
        return NULL;
    strbuf sb;
    sb_init(&sb);
    int at_start = 1;
    for (size_t i = 0; i < s->u.s.n;) {
        uint32_t cp;
        size_t l = ju_decode(s->u.s.s, s->u.s.n, i, &cp);
        i += l;
        int sep = ju_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        uint32_t out = sep ? cp : at_start ? ju_upper(cp) : ju_lower(cp);
        at_start = sep;
        char buf[4];
        sb_append(&sb, buf, ju_encode(out, buf));
    }
    jv *r = jv_str(c->h, sb_str(&sb), sb.len);
    sb_free(&sb);
    return r;
}

static jv *f_truncate(jctx *c, int line, jv *v, const jargs *a)
{
    jv *lenv = jarg(a, 0, "length"), *kill = jarg(a, 1, "killwords"), *endv = jarg(a, 2, "end"),
       *leewayv = jarg(a, 3, "leeway");
    int64_t length = lenv && is_int(lenv) ? as_int(lenv) : 255;
    int64_t leeway = leewayv && is_int(leewayv) ? as_int(leewayv) : 5;
    if (v->k != JV_STR) {
        /* jinja2 measures len(s) first and returns s unchanged when short */
        jv *len = jinja_apply_filter(c, NULL, line, "length", v, &(jargs){0});
        if (!len)
            return NULL;
        if (len->u.i <= length + leeway)
            return v;
        return jfail(c, line, "truncate: cannot truncate a %s", jv_type_name(v));
    }
    jv *s = v;
    if (!s)
        return NULL;
    jv *end = endv ? jstr_of(c, line, endv) : jv_str_ref(c->h, "...", 3);
    if (!end)
        return NULL;
    int64_t end_len = (int64_t)ju_count(end->u.s.s, end->u.s.n);
    if (length < end_len)
        return jfail(c, line, "expected length >= %lld, got %lld", (long long)end_len, (long long)length);
    if (leeway < 0)
        return jfail(c, line, "expected leeway >= 0, got %lld", (long long)leeway);
    int64_t count = (int64_t)ju_count(s->u.s.s, s->u.s.n);
    if (count <= length + leeway)
        return s;
    size_t cut = ju_offset(s->u.s.s, s->u.s.n, (size_t)(length - end_len));
    strbuf sb;
    sb_init(&sb);
    if (kill && jv_truthy(kill)) {
        sb_append(&sb, s->u.s.s, cut);
    } else {
        /* result = s[:length - len(end)].rsplit(" ", 1)[0] */
        size_t k = cut;
        while (k > 0 && s->u.s.s[k - 1] != ' ')
            k--;
        sb_append(&sb, s->u.s.s, k ? k - 1 : cut);
    }
    sb_append(&sb, end->u.s.s, end->u.s.n);
    jv *r = jv_str(c->h, sb_str(&sb), sb.len);
    sb_free(&sb);
    return r;
}

static jv *apply_filter(jctx *c, jscope *s, int line, const char *name, jv *v, const jargs *a)
{
    if (c->failed)
        return NULL;
    if (!strcmp(name, "tojson"))
        return f_tojson(c, line, v, a);
    if (!strcmp(name, "trim")) {
        jv *str = jstr_of(c, line, v);
        jv *chars = jarg(a, 0, "chars");
        if (chars && chars->k != JV_NONE && chars->k != JV_STR)
            return jfail(c, line, "strip arg must be None or str");
        return str ? jstr_strip(c, str, chars, 1, 1) : NULL;
    }
    if (!strcmp(name, "upper") || !strcmp(name, "lower") || !strcmp(name, "capitalize")) {
        jv *str = jstr_of(c, line, v);
        return str ? jstr_case(c, str, name[0] == 'u' ? 'u' : name[0] == 'l' ? 'l' : 'c') : NULL;
    }
    if (!strcmp(name, "title"))
        return f_title(c, line, v);
    if (!strcmp(name, "length") || !strcmp(name, "count"))
        return f_length(c, line, v);
    if (!strcmp(name, "string")) /* soft_str: a Markup stays one */
        return jstr_of(c, line, v);
    if (!strcmp(name, "safe")) {
        jv *str = jstr_of(c, line, v);
        return str ? jv_markup(c->h, str) : NULL;
    }
    if (!strcmp(name, "default") || !strcmp(name, "d")) {
        jv *dv = jarg(a, 0, "default_value"), *boolean = jarg(a, 1, "boolean");
        if (v->k == JV_UNDEF || (boolean && jv_truthy(boolean) && !jv_truthy(v)))
            return dv ? dv : jv_str_ref(c->h, "", 0);
        return v;
    }
    if (!strcmp(name, "first") || !strcmp(name, "last")) {
        size_t n;
        jv **items = jiterate(c, line, v, &n);
        if (!items)
            return NULL;
        if (!n)
            return jv_undef(c->h, name[0] == 'f' ? "No first item, sequence was empty." : "No last item, sequence was empty.");
        return name[0] == 'f' ? items[0] : items[n - 1];
    }
    if (!strcmp(name, "list")) {
        size_t n;
        jv **items = jiterate(c, line, v, &n);
        return items ? jv_list(c->h, items, n) : NULL;
    }
    if (!strcmp(name, "items")) {
        if (v->k == JV_UNDEF)
            return jv_list(c->h, NULL, 0);
        if (v->k != JV_DICT)
            return jfail(c, line, "Can only get item pairs from a mapping.");
        jargs none = {0};
        jv *view = jinja_call_method(c, line, v, "items", &none);
        return view ? jv_list(c->h, view->u.l.v, view->u.l.n) : NULL;
    }
    if (!strcmp(name, "join"))
        return f_join(c, line, v, a);
    if (!strcmp(name, "replace")) {
        jv *str = jstr_of(c, line, v);
        jv *old = jarg(a, 0, "old"), *new_ = jarg(a, 1, "new"), *cnt = jarg(a, 2, "count");
        if (!str)
            return NULL;
        if (!old || !new_)
            return jfail(c, line, "replace() missing required arguments");
        old = jstr_of(c, line, old);
        new_ = jstr_of(c, line, new_);
        if (!old || !new_)
            return NULL;
        int64_t count = -1;
        if (cnt && cnt->k != JV_NONE) {
            if (!is_int(cnt))
                return jfail(c, line, "replace() count must be an integer");
            count = as_int(cnt);
        }
        return jstr_replace(c, line, str, old, new_, count);
    }
    if (!strcmp(name, "map"))
        return f_map(c, s, line, v, a);
    if (!strcmp(name, "select") || !strcmp(name, "reject"))
        return f_select(c, s, line, v, a, 0, name[0] == 'r');
    if (!strcmp(name, "selectattr") || !strcmp(name, "rejectattr"))
        return f_select(c, s, line, v, a, 1, name[0] == 'r');
    if (!strcmp(name, "int"))
        return f_int(c, line, v, a);
    if (!strcmp(name, "float"))
        return f_float(c, line, v, a);
    if (!strcmp(name, "abs")) {
        if (v->k == JV_FLOAT)
            return jv_float(c->h, fabs(v->u.f));
        if (is_int(v)) {
            if (as_int(v) == INT64_MIN)
                return jfail(c, line, "integer overflow (Python integers are unbounded, ours are 64-bit)");
            return jv_int(c->h, as_int(v) < 0 ? -as_int(v) : as_int(v));
        }
        return jfail(c, line, "bad operand type for abs(): '%s'", jv_type_name(v));
    }
    if (!strcmp(name, "round"))
        return f_round(c, line, v, a);
    if (!strcmp(name, "indent"))
        return f_indent(c, line, v, a);
    if (!strcmp(name, "dictsort"))
        return f_sort(c, line, v, a, 1);
    if (!strcmp(name, "sort"))
        return f_sort(c, line, v, a, 0);
    if (!strcmp(name, "unique"))
        return f_unique(c, line, v, a);
    if (!strcmp(name, "min") || !strcmp(name, "max"))
        return f_minmax(c, line, v, a, name[1] == 'a');
    if (!strcmp(name, "reverse")) {
        if (v->k == JV_STR) {
            strbuf sb;
            sb_init(&sb);
            for (size_t e = v->u.s.n; e > 0;) {
                size_t l = ju_prev_len(v->u.s.s, e);
                sb_append(&sb, v->u.s.s + e - l, l);
                e -= l;
            }
            jv *r = jv_str(c->h, sb_str(&sb), sb.len);
            sb_free(&sb);
            return r;
        }
        size_t n;
        jv **items = jiterate(c, line, v, &n);
        if (!items)
            return NULL;
        jv **out = jh_alloc(c->h, (n ? n : 1) * sizeof *out);
        for (size_t i = 0; i < n; i++)
            out[i] = items[n - 1 - i];
        return jv_list(c->h, out, n);
    }
    if (!strcmp(name, "sum")) {
        jv *attribute = jarg(a, 0, "attribute"), *start = jarg(a, 1, "start");
        jv *acc = start ? start : jv_int(c->h, 0);
        if (acc->k == JV_STR)
            return jfail(c, line, "sum() can't sum strings [use ''.join(seq) instead]");
        size_t n;
        jv **items = jiterate(c, line, v, &n);
        if (!items)
            return NULL;
        for (size_t i = 0; i < n; i++) {
            jv *x = attr_get(c, line, items[i], attribute, NULL);
            if (!x)
                return NULL;
            jnode add = {.kind = JN_BINOP, .op = JT_ADD, .line = line};
            jnode ca = {.kind = JN_CONST, .line = line, .value = acc};
            jnode cb = {.kind = JN_CONST, .line = line, .value = x};
            add.a = &ca;
            add.b = &cb;
            acc = jeval(c, s, &add);
            if (!acc)
                return NULL;
        }
        return acc;
    }
    if (!strcmp(name, "wordcount")) {
        jv *str = jstr_of(c, line, v);
        if (!str)
            return NULL;
        int64_t words = 0;
        int in_word = 0;
        for (size_t i = 0; i < str->u.s.n;) {
            uint32_t cp;
            i += ju_decode(str->u.s.s, str->u.s.n, i, &cp);
            int w = ju_isword(cp);
            if (w && !in_word)
                words++;
            in_word = w;
        }
        return jv_int(c->h, words);
    }
    if (!strcmp(name, "center")) {
        jv *str = jstr_of(c, line, v);
        jv *width = jarg(a, 0, "width");
        if (!str)
            return NULL;
        jargs ca = {(jv *[]){width ? width : jv_int(c->h, 80)}, 1, NULL, NULL, 0};
        return jinja_call_method(c, line, str, "center", &ca);
    }
    if (!strcmp(name, "escape") || !strcmp(name, "e"))
        return jescape(c, line, v);
    if (!strcmp(name, "forceescape")) /* escape(str(value)): a Markup too */
        return jescape(c, line, v->k == JV_STR ? jv_plain(c->h, v) : v);
    if (!strcmp(name, "format")) {
        jv *str = jstr_of(c, line, v);
        if (!str)
            return NULL;
        if (a->n_pos && a->n_kw)
            return jfail(c, line, "can't handle positional and keyword arguments at the same time");
        jv *args;
        if (a->n_kw) {
            args = jv_dict(c->h);
            for (size_t i = 0; i < a->n_kw; i++)
                jdict_set(c->h, args->u.d, jv_cstr(c->h, a->kw_names[i]), a->kw[i]);
        } else {
            args = jv_tuple(c->h, a->pos, a->n_pos);
        }
        return jstr_percent(c, line, str, args);
    }
    if (!strcmp(name, "batch")) {
        jv *cnt = jarg(a, 0, "linecount"), *fill = jarg(a, 1, "fill_with");
        if (!is_int(cnt) || as_int(cnt) <= 0)
            return jfail(c, line, "batch size must be a positive integer");
        size_t per = (size_t)as_int(cnt), n;
        jv **items = jiterate(c, line, v, &n);
        if (!items)
            return NULL;
        size_t groups = (n + per - 1) / per;
        jv **out = jh_alloc(c->h, (groups ? groups : 1) * sizeof *out);
        for (size_t g = 0; g < groups; g++) {
            size_t b = g * per, k = n - b < per ? n - b : per;
            size_t total = fill && k < per ? per : k;
            jv **row = jh_alloc(c->h, total * sizeof *row);
            for (size_t i = 0; i < total; i++)
                row[i] = i < k ? items[b + i] : fill;
            out[g] = jv_list(c->h, row, total);
        }
        return jv_list(c->h, out, groups);
    }
    if (!strcmp(name, "attr")) {
        jv *nm = jarg(a, 0, "name");
        if (!nm || nm->k != JV_STR)
            return jfail(c, line, "attr() needs an attribute name");
        const char *attr = jh_strndup(c->h, nm->u.s.s, nm->u.s.n);
        if (v->k == JV_UNDEF)
            return undef_err(c, line, v);
        if (v->k == JV_DICT && !jinja_has_method(v, attr) && !jinja_unsafe_method(v, attr))
            return jv_undef_attr(c->h, v, attr);
        return jgetattr(c, line, v, attr);
    }
    if (!strcmp(name, "truncate"))
        return f_truncate(c, line, v, a);
    if (jinja_filter_known(name))
        return jfail(c, line, "filter '%s' is not supported", name);
    return jfail(c, line, "no filter named '%s'", name);
}

/* ---- tests ---- */

static int cmp_test(jctx *c, int line, jv *v, jv *other, int op)
{
    if (!other) {
        jfail(c, line, "test needs an argument");
        return -1;
    }
    if (op == JT_EQ)
        return jv_equal(v, other);
    if (op == JT_NE)
        return !jv_equal(v, other);
    if (v->k == JV_UNDEF || other->k == JV_UNDEF) {
        undef_err(c, line, v->k == JV_UNDEF ? v : other);
        return -1;
    }
    int cmp;
    if (jv_compare(v, other, &cmp)) {
        jfail(c, line, "comparison not supported between instances of '%s' and '%s'", jv_type_name(v),
              jv_type_name(other));
        return -1;
    }
    if (cmp == 2)
        return 0;
    switch (op) {
    case JT_LT:
        return cmp < 0;
    case JT_LTEQ:
        return cmp <= 0;
    case JT_GT:
        return cmp > 0;
    default:
        return cmp >= 0;
    }
}

static int mod_test(jctx *c, int line, jv *v, jv *by, int64_t want)
{
    if (v->k == JV_UNDEF) {
        undef_err(c, line, v);
        return -1;
    }
    if (!by || !jv_is_num(by) || !jv_is_num(v)) {
        jfail(c, line, "unsupported operand type(s) for %%: '%s' and '%s'", jv_type_name(v),
              by ? jv_type_name(by) : "nothing");
        return -1;
    }
    if (jv_num(by) == 0) {
        jfail(c, line, "integer division or modulo by zero");
        return -1;
    }
    if (is_int(v) && is_int(by)) {
        int64_t x = as_int(v), y = as_int(by);
        if (y == -1)
            return want == 0;
        int64_t m = x % y;
        if (m != 0 && ((m < 0) != (y < 0)))
            m += y;
        return m == want;
    }
    double m = fmod(jv_num(v), jv_num(by));
    if (m != 0 && ((m < 0) != (jv_num(by) < 0)))
        m += jv_num(by);
    return m == (double)want;
}

int jinja_apply_test(jctx *c, jscope *s, int line, const char *name, jv *v, const jargs *a)
{
    (void)s;
    if (c->failed)
        return -1;
    jv *arg = jarg(a, 0, NULL);
    if (!strcmp(name, "defined"))
        return v->k != JV_UNDEF;
    if (!strcmp(name, "undefined"))
        return v->k == JV_UNDEF;
    if (!strcmp(name, "none"))
        return v->k == JV_NONE;
    if (!strcmp(name, "boolean"))
        return v->k == JV_BOOL;
    if (!strcmp(name, "true"))
        return v->k == JV_BOOL && v->u.b;
    if (!strcmp(name, "false"))
        return v->k == JV_BOOL && !v->u.b;
    if (!strcmp(name, "integer"))
        return v->k == JV_INT;
    if (!strcmp(name, "float"))
        return v->k == JV_FLOAT;
    if (!strcmp(name, "number"))
        return jv_is_num(v);
    if (!strcmp(name, "string"))
        return v->k == JV_STR;
    if (!strcmp(name, "mapping"))
        return v->k == JV_DICT;
    if (!strcmp(name, "iterable"))
        return v->k == JV_STR || v->k == JV_LIST || v->k == JV_TUPLE || v->k == JV_DICT ||
               v->k == JV_UNDEF || v->k == JV_LOOP;
    if (!strcmp(name, "sequence"))
        return v->k == JV_STR || v->k == JV_LIST || v->k == JV_TUPLE || v->k == JV_DICT || v->k == JV_UNDEF;
    if (!strcmp(name, "callable"))
        return v->k == JV_MACRO || v->k == JV_FUNC || v->k == JV_METHOD || v->k == JV_UNDEF;
    if (!strcmp(name, "escaped"))
        return 0;
    if (!strcmp(name, "sameas")) {
        if (!arg) {
            jfail(c, line, "sameas needs an argument");
            return -1;
        }
        if (v->k == JV_NONE || v->k == JV_BOOL)
            return arg->k == v->k && (v->k == JV_NONE || arg->u.b == v->u.b);
        if (v->k == JV_INT && arg->k == JV_INT && v->u.i >= -5 && v->u.i <= 256)
            return v->u.i == arg->u.i;
        return v == arg;
    }
    if (!strcmp(name, "in")) {
        if (!arg) {
            jfail(c, line, "in needs an argument");
            return -1;
        }
        return jcontains(c, line, arg, v);
    }
    if (!strcmp(name, "==") || !strcmp(name, "eq") || !strcmp(name, "equalto"))
        return cmp_test(c, line, v, arg, JT_EQ);
    if (!strcmp(name, "!=") || !strcmp(name, "ne"))
        return cmp_test(c, line, v, arg, JT_NE);
    if (!strcmp(name, ">") || !strcmp(name, "gt") || !strcmp(name, "greaterthan"))
        return cmp_test(c, line, v, arg, JT_GT);
    if (!strcmp(name, ">=") || !strcmp(name, "ge"))
        return cmp_test(c, line, v, arg, JT_GTEQ);
    if (!strcmp(name, "<") || !strcmp(name, "lt") || !strcmp(name, "lessthan"))
        return cmp_test(c, line, v, arg, JT_LT);
    if (!strcmp(name, "<=") || !strcmp(name, "le"))
        return cmp_test(c, line, v, arg, JT_LTEQ);
    if (!strcmp(name, "odd") || !strcmp(name, "even")) {
        jv two = {.k = JV_INT, .u.i = 2};
        return mod_test(c, line, v, &two, name[0] == 'o');
    }
    if (!strcmp(name, "divisibleby"))
        return mod_test(c, line, v, arg, 0);
    if (!strcmp(name, "lower") || !strcmp(name, "upper")) {
        jv *str = jstr_of(c, line, v);
        if (!str)
            return -1;
        jargs none = {0};
        jv *r = jinja_call_method(c, line, str, name[0] == 'l' ? "islower" : "isupper", &none);
        return r ? r->u.b : -1;
    }
    if (!strcmp(name, "filter") || !strcmp(name, "test")) {
        if (v->k != JV_STR)
            return 0;
        char *nm = jh_strndup(c->h, v->u.s.s, v->u.s.n);
        return name[0] == 'f' ? jinja_filter_known(nm) : jinja_test_known(nm);
    }
    jfail(c, line, "no test named '%s'", name);
    return -1;
}

static int name_in(const char *name, const char *const *set)
{
    for (; *set; set++)
        if (!strcmp(name, *set))
            return 1;
    return 0;
}

/* jinja2's filters run on soft_str(value), so on a Markup the Markup's own
 * methods do the work and the result is a Markup again (upper, trim ...),
 * and |last too, as reversed() indexes the Markup. title, replace and join
 * build a plain str whatever they were given (the last two call str() when
 * autoescape is off). */
jv *jinja_apply_filter(jctx *c, jscope *s, int line, const char *name, jv *v, const jargs *a)
{
    static const char *const keeps[] = {"upper", "lower", "capitalize", "trim", "center", "string",
                                        "format", "indent", "reverse", "truncate", "last", NULL};
    static const char *const drops[] = {"title", "replace", "join", NULL};
    int markup_in = v->k == JV_STR && v->safe;
    jv *r = apply_filter(c, s, line, name, v, a);
    if (!r || r->k != JV_STR)
        return r;
    if (name_in(name, drops))
        return jv_plain(c->h, r);
    if (markup_in && !strcmp(name, "truncate") &&
        (r->u.s.n != v->u.s.n || memcmp(r->u.s.s, v->u.s.s, r->u.s.n))) {
        /* cut, so the result is Markup(s[:k]) + end, and that escapes end:
         * the cut itself was measured with end as given */
        jv *end = jarg(a, 2, "end");
        if (!end)
            end = jv_cstr(c->h, "...");
        if (end->k != JV_STR || end->u.s.n > r->u.s.n) /* not what a cut leaves */
            return jfail(c, line, "truncate: cannot cut a Markup with end %s", jv_type_name(end));
        jv *esc = jescape(c, line, end);
        if (!esc)
            return NULL;
        strbuf sb;
        sb_init(&sb);
        sb_append(&sb, r->u.s.s, r->u.s.n - end->u.s.n);
        sb_append(&sb, esc->u.s.s, esc->u.s.n);
        jv *m = jstr_finish(c, line, &sb);
        return m ? jv_markup(c->h, m) : NULL;
    }
    if (markup_in && name_in(name, keeps))
        return jv_markup(c->h, r);
    return r;
}
