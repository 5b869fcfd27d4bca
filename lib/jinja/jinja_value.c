/* Template values and the Python behaviour they must copy: equality
 * (1 == 1.0 == True), ordering, truthiness, str() and repr() as Python
 * prints them (None, True, 1.0, 1e+16, ['a', 1], {'k': 'v'}), and
 * json.dumps for the tojson filter. All values live in the render's arena
 * and, except namespaces, never change once made. */
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "jinja/jinja_internal.h"

jv jv_none_v = {.k = JV_NONE};
jv jv_true_v = {.k = JV_BOOL, .u.b = 1};
jv jv_false_v = {.k = JV_BOOL, .u.b = 0};

static jv *alloc(jheap *h, jv_kind k)
{
    jv *v = jh_alloc(h, sizeof *v);
    v->k = k;
    v->safe = 0;
    return v;
}

jv *jv_bool(int b)
{
    return b ? JV_TRUE_P : JV_FALSE_P;
}

/* Small integers are shared (values never change), so loops over
 * range() and loop.index cost no allocation per item. */
#define SMALL_INT_MIN (-5)
#define SMALL_INT_MAX 16383
static jv small_ints[SMALL_INT_MAX - SMALL_INT_MIN + 1];
static pthread_once_t small_ints_once = PTHREAD_ONCE_INIT;

static void small_ints_init(void)
{
    for (int i = SMALL_INT_MIN; i <= SMALL_INT_MAX; i++) {
        small_ints[i - SMALL_INT_MIN].k = JV_INT;
        small_ints[i - SMALL_INT_MIN].u.i = i;
    }
}

jv *jv_int(jheap *h, int64_t i)
{
    if (i >= SMALL_INT_MIN && i <= SMALL_INT_MAX) {
        pthread_once(&small_ints_once, small_ints_init);
        return &small_ints[i - SMALL_INT_MIN];
    }
    jv *v = alloc(h, JV_INT);
    v->u.i = i;
    return v;
}

jv *jv_float(jheap *h, double f)
{
    jv *v = alloc(h, JV_FLOAT);
    v->u.f = f;
    return v;
}

jv *jv_str_ref(jheap *h, const char *s, size_t n)
{
    jv *v = alloc(h, JV_STR);
    v->u.s.s = s;
    v->u.s.n = n;
    return v;
}

jv *jv_str(jheap *h, const char *s, size_t n)
{
    return jv_str_ref(h, jh_strndup(h, s, n), n);
}

jv *jv_markup(jheap *h, jv *v)
{
    if (v->safe)
        return v;
    jv *m = jv_str_ref(h, v->u.s.s, v->u.s.n);
    m->safe = 1;
    return m;
}

jv *jv_plain(jheap *h, jv *v)
{
    return v->k == JV_STR && v->safe ? jv_str_ref(h, v->u.s.s, v->u.s.n) : v;
}

jv *jv_cstr(jheap *h, const char *s)
{
    return jv_str(h, s, strlen(s));
}

static jv *seq(jheap *h, jv_kind k, jv **items, size_t n)
{
    jv *v = alloc(h, k);
    v->u.l.n = n;
    v->u.l.v = jh_alloc(h, (n ? n : 1) * sizeof *items);
    if (n)
        memcpy(v->u.l.v, items, n * sizeof *items);
    return v;
}

jv *jv_list(jheap *h, jv **items, size_t n)
{
    return seq(h, JV_LIST, items, n);
}

jv *jv_tuple(jheap *h, jv **items, size_t n)
{
    return seq(h, JV_TUPLE, items, n);
}

jv *jv_dict(jheap *h)
{
    jv *v = alloc(h, JV_DICT);
    v->u.d = jh_alloc(h, sizeof *v->u.d);
    return v;
}

jv *jv_undef(jheap *h, const char *why)
{
    jv *v = alloc(h, JV_UNDEF);
    v->u.undef = why;
    return v;
}

jv *jv_undef_name(jheap *h, const char *name)
{
    size_t n = strlen(name) + 32;
    char *s = jh_alloc(h, n);
    snprintf(s, n, "'%s' is undefined", name);
    return jv_undef(h, s);
}

jv *jv_undef_attr(jheap *h, const jv *obj, const char *attr)
{
    size_t n = strlen(attr) + 64;
    char *s = jh_alloc(h, n);
    if (obj->k == JV_UNDEF)
        snprintf(s, n, "'%s' is undefined", attr);
    else
        snprintf(s, n, "'%s object' has no attribute '%s'", /* jinja2's object_type_repr */
                 obj->k == JV_STR && obj->safe ? "markupsafe.Markup" : jv_type_name(obj), attr);
    return jv_undef(h, s);
}

/* ---- dicts ---- */

static int key_equal(const jv *a, const jv *b)
{
    if (a->k == JV_STR && b->k == JV_STR)
        return a->u.s.n == b->u.s.n && memcmp(a->u.s.s, b->u.s.s, a->u.s.n) == 0;
    return jv_equal(a, b);
}

static jv **slot(const jdict *d, const jv *key)
{
    for (size_t i = 0; i < d->n; i++)
        if (key_equal(d->keys[i], key))
            return &d->vals[i];
    return NULL;
}

void jdict_set(jheap *h, jdict *d, jv *key, jv *val)
{
    jv **s = slot(d, key);
    if (s) {
        *s = val;
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 8;
        jv **k = jh_alloc(h, cap * sizeof *k);
        jv **v = jh_alloc(h, cap * sizeof *v);
        if (d->n) {
            memcpy(k, d->keys, d->n * sizeof *k);
            memcpy(v, d->vals, d->n * sizeof *v);
        }
        d->keys = k;
        d->vals = v;
        d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
}

jv *jdict_get(const jdict *d, const jv *key)
{
    jv **s = slot(d, key);
    return s ? *s : NULL;
}

jv *jdict_get_str(const jdict *d, const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < d->n; i++) {
        const jv *k = d->keys[i];
        if (k->k == JV_STR && k->u.s.n == n && memcmp(k->u.s.s, key, n) == 0)
            return d->vals[i];
    }
    return NULL;
}

/* ---- predicates ---- */

int jv_is_seq(const jv *v)
{
    return v->k == JV_LIST || v->k == JV_TUPLE;
}

int jv_is_num(const jv *v)
{
    return v->k == JV_BOOL || v->k == JV_INT || v->k == JV_FLOAT;
}

double jv_num(const jv *v)
{
    if (v->k == JV_FLOAT)
        return v->u.f;
    if (v->k == JV_INT)
        return (double)v->u.i;
    if (v->k == JV_BOOL)
        return v->u.b;
    return 0;
}

static int64_t int_of(const jv *v)
{
    return v->k == JV_BOOL ? v->u.b : v->u.i;
}

int jv_truthy(const jv *v)
{
    switch (v->k) {
    case JV_UNDEF:
    case JV_NONE:
        return 0;
    case JV_BOOL:
        return v->u.b;
    case JV_INT:
        return v->u.i != 0;
    case JV_FLOAT:
        return v->u.f != 0.0;
    case JV_STR:
        return v->u.s.n != 0;
    case JV_LIST:
    case JV_TUPLE:
        return v->u.l.n != 0;
    case JV_DICT:
        return v->u.d->n != 0;
    default:
        return 1;
    }
}

int jv_hashable(const jv *v)
{
    if (v->k == JV_LIST || v->k == JV_DICT || v->k == JV_NS || v->k == JV_LOOP)
        return 0;
    if (v->k == JV_TUPLE)
        for (size_t i = 0; i < v->u.l.n; i++)
            if (!jv_hashable(v->u.l.v[i]))
                return 0;
    return 1;
}

const char *jv_type_name(const jv *v)
{
    switch (v->k) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return v->safe ? "Markup" : "str";
    case JV_LIST:
        return "list";
    case JV_TUPLE:
        return "tuple";
    case JV_DICT:
        return "dict";
    case JV_NS:
        return "Namespace";
    case JV_MACRO:
        return "Macro";
    case JV_FUNC:
        return "function";
    case JV_METHOD:
        return "builtin_function_or_method";
    case JV_LOOP:
        return "LoopContext";
    }
    return "object";
}

/* Exact int/float comparison as Python does it: -1, 0, 1, or 2 when NaN. */
static int int_float_cmp(int64_t i, double f)
{
    if (isnan(f))
        return 2;
    if (f >= 9223372036854775808.0)
        return -1;
    if (f < -9223372036854775808.0)
        return 1;
    double fl = floor(f);
    int64_t t = (int64_t)fl;
    if (i < t)
        return -1;
    if (i > t)
        return 1;
    return fl < f ? -1 : 0;
}

static int num_cmp(const jv *a, const jv *b)
{
    if (a->k != JV_FLOAT && b->k != JV_FLOAT) {
        int64_t x = int_of(a), y = int_of(b);
        return x < y ? -1 : x > y;
    }
    if (a->k == JV_FLOAT && b->k == JV_FLOAT) {
        double x = a->u.f, y = b->u.f;
        if (isnan(x) || isnan(y))
            return 2;
        return x < y ? -1 : x > y;
    }
    if (a->k == JV_FLOAT) {
        int c = int_float_cmp(int_of(b), a->u.f);
        return c == 2 ? 2 : -c;
    }
    return int_float_cmp(int_of(a), b->u.f);
}

int jv_equal(const jv *a, const jv *b)
{
    if (a == b)
        return a->k != JV_FLOAT || !isnan(a->u.f);
    if (jv_is_num(a) && jv_is_num(b))
        return num_cmp(a, b) == 0;
    if (a->k != b->k)
        return 0;
    switch (a->k) {
    case JV_UNDEF:
    case JV_NONE:
        return 1;
    case JV_STR:
        return a->u.s.n == b->u.s.n && memcmp(a->u.s.s, b->u.s.s, a->u.s.n) == 0;
    case JV_LIST:
    case JV_TUPLE:
        if (a->u.l.n != b->u.l.n)
            return 0;
        for (size_t i = 0; i < a->u.l.n; i++)
            if (!jv_equal(a->u.l.v[i], b->u.l.v[i]))
                return 0;
        return 1;
    case JV_DICT:
        if (a->u.d->n != b->u.d->n)
            return 0;
        for (size_t i = 0; i < a->u.d->n; i++) {
            jv *o = jdict_get(b->u.d, a->u.d->keys[i]);
            if (!o || !jv_equal(a->u.d->vals[i], o))
                return 0;
        }
        return 1;
    case JV_FUNC:
        return a->u.fn == b->u.fn;
    case JV_METHOD:
        return a->u.meth.self == b->u.meth.self && !strcmp(a->u.meth.name, b->u.meth.name);
    default:
        return 0; /* identity was checked above */
    }
}

int jv_compare(const jv *a, const jv *b, int *cmp)
{
    if (jv_is_num(a) && jv_is_num(b)) {
        int c = num_cmp(a, b);
        *cmp = c == 2 ? 2 : c;
        return 0;
    }
    if (a->k == JV_STR && b->k == JV_STR) {
        size_t n = a->u.s.n < b->u.s.n ? a->u.s.n : b->u.s.n;
        int c = n ? memcmp(a->u.s.s, b->u.s.s, n) : 0;
        if (c == 0)
            c = a->u.s.n < b->u.s.n ? -1 : a->u.s.n > b->u.s.n;
        *cmp = c < 0 ? -1 : c > 0;
        return 0;
    }
    if ((a->k == JV_LIST || a->k == JV_TUPLE) && a->k == b->k) {
        size_t n = a->u.l.n < b->u.l.n ? a->u.l.n : b->u.l.n;
        for (size_t i = 0; i < n; i++)
            if (!jv_equal(a->u.l.v[i], b->u.l.v[i]))
                return jv_compare(a->u.l.v[i], b->u.l.v[i], cmp);
        *cmp = a->u.l.n < b->u.l.n ? -1 : a->u.l.n > b->u.l.n;
        return 0;
    }
    return -1;
}

/* ---- str() and repr() ---- */

/* Python's float repr: the shortest digits that round-trip, in fixed
 * notation when the decimal exponent is in [-4, 16), else 1e+16 style. */
void jv_float_repr(strbuf *sb, double f)
{
    if (isnan(f)) {
        sb_puts(sb, "nan");
        return;
    }
    if (isinf(f)) {
        sb_puts(sb, f < 0 ? "-inf" : "inf");
        return;
    }
    char buf[64];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f)
            break;
    }
    /* buf: [-]d[.ddd]e[+-]XX */
    const char *p = buf;
    int neg = 0;
    if (*p == '-') {
        neg = 1;
        p++;
    }
    char digits[32];
    int nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p >= '0' && *p <= '9')
            digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    int exp10 = atoi(p + 1);
    int decpt = exp10 + 1; /* digits d1 d2 ... mean 0.d1d2.. x 10^decpt */
    if (neg)
        sb_putc(sb, '-');
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            sb_puts(sb, "0.");
            for (int i = 0; i < -decpt; i++)
                sb_putc(sb, '0');
            sb_append(sb, digits, (size_t)nd);
        } else if (decpt >= nd) {
            sb_append(sb, digits, (size_t)nd);
            for (int i = nd; i < decpt; i++)
                sb_putc(sb, '0');
            sb_puts(sb, ".0");
        } else {
            sb_append(sb, digits, (size_t)decpt);
            sb_putc(sb, '.');
            sb_append(sb, digits + decpt, (size_t)(nd - decpt));
        }
        return;
    }
    sb_putc(sb, digits[0]);
    if (nd > 1) {
        sb_putc(sb, '.');
        sb_append(sb, digits + 1, (size_t)(nd - 1));
    }
    int e = decpt - 1;
    sb_printf(sb, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
}

static void str_repr(strbuf *sb, const char *s, size_t n)
{
    int has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    sb_putc(sb, q);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = ju_decode(s, n, i, &cp);
        if (cp == (uint32_t)q || cp == '\\') {
            sb_putc(sb, '\\');
            sb_putc(sb, (char)cp);
        } else if (cp == '\t') {
            sb_puts(sb, "\\t");
        } else if (cp == '\n') {
            sb_puts(sb, "\\n");
        } else if (cp == '\r') {
            sb_puts(sb, "\\r");
        } else if (cp < 0x20 || cp == 0x7F) {
            sb_printf(sb, "\\x%02x", (unsigned)cp);
        } else if (cp < 0x7F) {
            sb_putc(sb, (char)cp);
        } else if (ju_isprintable(cp)) {
            sb_append(sb, s + i, l);
        } else if (cp <= 0xFF) {
            sb_printf(sb, "\\x%02x", (unsigned)cp);
        } else if (cp <= 0xFFFF) {
            sb_printf(sb, "\\u%04x", (unsigned)cp);
        } else {
            sb_printf(sb, "\\U%08x", (unsigned)cp);
        }
        i += l;
    }
    sb_putc(sb, q);
}

static void dict_repr(strbuf *sb, const jdict *d)
{
    sb_putc(sb, '{');
    for (size_t i = 0; i < d->n; i++) {
        if (i)
            sb_puts(sb, ", ");
        jv_repr_into(sb, d->keys[i]);
        sb_puts(sb, ": ");
        jv_repr_into(sb, d->vals[i]);
    }
    sb_putc(sb, '}');
}

static const char *func_name(jfunc fn)
{
    switch (fn) {
    case JF_RANGE:
        return "range";
    case JF_DICT:
        return "dict";
    case JF_NAMESPACE:
        return "namespace";
    case JF_RAISE_EXCEPTION:
        return "raise_exception";
    case JF_STRFTIME_NOW:
        return "strftime_now";
    }
    return "function";
}

static void common_into(strbuf *sb, const jv *v)
{
    switch (v->k) {
    case JV_NONE:
        sb_puts(sb, "None");
        break;
    case JV_BOOL:
        sb_puts(sb, v->u.b ? "True" : "False");
        break;
    case JV_INT:
        sb_printf(sb, "%" PRId64, v->u.i);
        break;
    case JV_FLOAT:
        jv_float_repr(sb, v->u.f);
        break;
    case JV_LIST:
        if (v->u.l.view == 'r') {
            const int64_t *r = v->u.l.range;
            sb_printf(sb, "range(%" PRId64 ", %" PRId64, r[0], r[1]);
            if (r[2] != 1)
                sb_printf(sb, ", %" PRId64, r[2]);
            sb_putc(sb, ')');
            break;
        }
        if (v->u.l.view)
            sb_puts(sb, v->u.l.view == 'i' ? "dict_items(" : v->u.l.view == 'k' ? "dict_keys(" : "dict_values(");
        sb_putc(sb, '[');
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i)
                sb_puts(sb, ", ");
            jv_repr_into(sb, v->u.l.v[i]);
        }
        sb_putc(sb, ']');
        if (v->u.l.view)
            sb_putc(sb, ')');
        break;
    case JV_TUPLE:
        sb_putc(sb, '(');
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i)
                sb_puts(sb, ", ");
            jv_repr_into(sb, v->u.l.v[i]);
        }
        if (v->u.l.n == 1)
            sb_putc(sb, ',');
        sb_putc(sb, ')');
        break;
    case JV_DICT:
        dict_repr(sb, v->u.d);
        break;
    case JV_NS:
        sb_puts(sb, "<Namespace ");
        dict_repr(sb, v->u.d);
        sb_putc(sb, '>');
        break;
    case JV_MACRO:
        sb_printf(sb, "<Macro '%s'>", v->u.m->name ? v->u.m->name : "caller");
        break;
    case JV_FUNC:
        if (v->u.fn == JF_NAMESPACE)
            sb_puts(sb, "<class 'jinja2.utils.Namespace'>");
        else if (v->u.fn == JF_DICT)
            sb_puts(sb, "<class 'dict'>");
        else
            sb_printf(sb, "<function %s>", func_name(v->u.fn));
        break;
    case JV_METHOD:
        sb_printf(sb, "<built-in method %s of %s object>", v->u.meth.name,
                  jv_type_name(v->u.meth.self));
        break;
    case JV_LOOP:
        sb_printf(sb, "<LoopContext %zu/%zu>", v->u.loop->i + 1, v->u.loop->n);
        break;
    default:
        break;
    }
}

void jv_str_into(strbuf *sb, const jv *v)
{
    if (v->k == JV_STR)
        sb_append(sb, v->u.s.s, v->u.s.n);
    else if (v->k != JV_UNDEF)
        common_into(sb, v);
}

void jv_repr_into(strbuf *sb, const jv *v)
{
    if (v->k == JV_STR && v->safe) { /* Markup.__repr__ */
        sb_puts(sb, "Markup(");
        str_repr(sb, v->u.s.s, v->u.s.n);
        sb_putc(sb, ')');
    } else if (v->k == JV_STR)
        str_repr(sb, v->u.s.s, v->u.s.n);
    else if (v->k == JV_UNDEF)
        sb_puts(sb, "Undefined");
    else
        common_into(sb, v);
}

/* ---- json.dumps ---- */

static void json_str_out(strbuf *sb, const char *s, size_t n, int ensure_ascii)
{
    sb_putc(sb, '"');
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = ju_decode(s, n, i, &cp);
        switch (cp) {
        case '"':
            sb_puts(sb, "\\\"");
            break;
        case '\\':
            sb_puts(sb, "\\\\");
            break;
        case '\n':
            sb_puts(sb, "\\n");
            break;
        case '\r':
            sb_puts(sb, "\\r");
            break;
        case '\t':
            sb_puts(sb, "\\t");
            break;
        case '\b':
            sb_puts(sb, "\\b");
            break;
        case '\f':
            sb_puts(sb, "\\f");
            break;
        default:
            if (cp < 0x20) {
                sb_printf(sb, "\\u%04x", (unsigned)cp);
            } else if (cp < 0x7F || !ensure_ascii) {
                sb_append(sb, s + i, l);
            } else if (cp < 0x10000) {
                sb_printf(sb, "\\u%04x", (unsigned)cp);
            } else {
                uint32_t v = cp - 0x10000;
                sb_printf(sb, "\\u%04x\\u%04x", (unsigned)(0xD800 | (v >> 10)),
                          (unsigned)(0xDC00 | (v & 0x3FF)));
            }
        }
        i += l;
    }
    sb_putc(sb, '"');
}

static void json_float(strbuf *sb, double f)
{
    if (isnan(f))
        sb_puts(sb, "NaN");
    else if (isinf(f))
        sb_puts(sb, f < 0 ? "-Infinity" : "Infinity");
    else
        jv_float_repr(sb, f);
}

static void newline_indent(strbuf *sb, const char *indent, int level)
{
    sb_putc(sb, '\n');
    for (int i = 0; i < level; i++)
        sb_puts(sb, indent);
}

typedef struct {
    const jjson_opts *o;
    char *why;
    size_t why_len;
} jenc;

static int enc_fail(jenc *e, const char *fmt, const char *arg)
{
    snprintf(e->why, e->why_len, fmt, arg);
    return -1;
}

static int encode(jenc *e, strbuf *sb, const jv *v, int level);

/* A dict key as json.dumps converts it. */
static int encode_key(jenc *e, strbuf *sb, const jv *k)
{
    strbuf tmp;
    switch (k->k) {
    case JV_STR:
        json_str_out(sb, k->u.s.s, k->u.s.n, e->o->ensure_ascii);
        return 0;
    case JV_FLOAT:
    case JV_INT:
    case JV_BOOL:
    case JV_NONE:
        sb_init(&tmp);
        if (k->k == JV_FLOAT)
            json_float(&tmp, k->u.f);
        else if (k->k == JV_INT)
            sb_printf(&tmp, "%" PRId64, k->u.i);
        else if (k->k == JV_BOOL)
            sb_puts(&tmp, k->u.b ? "true" : "false");
        else
            sb_puts(&tmp, "null");
        json_str_out(sb, sb_str(&tmp), tmp.len, 0);
        sb_free(&tmp);
        return 0;
    default:
        return enc_fail(e, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

/* Insertion sort of item indices by key (Python's sorted is stable). */
static int sorted_order(jenc *e, const jdict *d, size_t *idx)
{
    for (size_t i = 0; i < d->n; i++)
        idx[i] = i;
    for (size_t i = 1; i < d->n; i++) {
        size_t x = idx[i], j = i;
        while (j > 0) {
            int c;
            if (jv_compare(d->keys[x], d->keys[idx[j - 1]], &c))
                return enc_fail(e, "'<' not supported between instances of %s keys", jv_type_name(d->keys[x]));
            if (c != -1)
                break;
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = x;
    }
    return 0;
}

static int encode(jenc *e, strbuf *sb, const jv *v, int level)
{
    const jjson_opts *o = e->o;
    const char *item_sep = o->item_sep ? o->item_sep : (o->indent ? "," : ", ");
    const char *key_sep = o->key_sep ? o->key_sep : ": ";
    if (level > 1000)
        return enc_fail(e, "%s", "maximum recursion depth exceeded while encoding a JSON object");
    switch (v->k) {
    case JV_STR:
        json_str_out(sb, v->u.s.s, v->u.s.n, o->ensure_ascii);
        return 0;
    case JV_NONE:
        sb_puts(sb, "null");
        return 0;
    case JV_BOOL:
        sb_puts(sb, v->u.b ? "true" : "false");
        return 0;
    case JV_INT:
        sb_printf(sb, "%" PRId64, v->u.i);
        return 0;
    case JV_FLOAT:
        json_float(sb, v->u.f);
        return 0;
    case JV_LIST:
    case JV_TUPLE:
        if (v->k == JV_LIST && v->u.l.view)
            return enc_fail(e, "Object of type %s is not JSON serializable",
                            v->u.l.view == 'r' ? "range" : v->u.l.view == 'i' ? "dict_items"
                            : v->u.l.view == 'k' ? "dict_keys" : "dict_values");
        if (v->u.l.n == 0) {
            sb_puts(sb, "[]");
            return 0;
        }
        sb_putc(sb, '[');
        for (size_t i = 0; i < v->u.l.n; i++) {
            if (i)
                sb_puts(sb, item_sep);
            if (o->indent)
                newline_indent(sb, o->indent, level + 1);
            if (encode(e, sb, v->u.l.v[i], level + 1))
                return -1;
        }
        if (o->indent)
            newline_indent(sb, o->indent, level);
        sb_putc(sb, ']');
        return 0;
    case JV_DICT: {
        const jdict *d = v->u.d;
        if (d->n == 0) {
            sb_puts(sb, "{}");
            return 0;
        }
        size_t *idx = xmalloc(d->n * sizeof *idx);
        for (size_t i = 0; i < d->n; i++)
            idx[i] = i;
        if (o->sort_keys && sorted_order(e, d, idx)) {
            free(idx);
            return -1;
        }
        sb_putc(sb, '{');
        int rc = 0;
        for (size_t i = 0; i < d->n && !rc; i++) {
            if (i)
                sb_puts(sb, item_sep);
            if (o->indent)
                newline_indent(sb, o->indent, level + 1);
            rc = encode_key(e, sb, d->keys[idx[i]]);
            if (!rc) {
                sb_puts(sb, key_sep);
                rc = encode(e, sb, d->vals[idx[i]], level + 1);
            }
        }
        free(idx);
        if (rc)
            return -1;
        if (o->indent)
            newline_indent(sb, o->indent, level);
        sb_putc(sb, '}');
        return 0;
    }
    default:
        return enc_fail(e, "Object of type %s is not JSON serializable", jv_type_name(v));
    }
}

int jv_tojson(strbuf *sb, const jv *v, const jjson_opts *o, char *why, size_t why_len)
{
    jenc e = {o, why, why_len};
    return encode(&e, sb, v, 0);
}

/* ---- from JSON input ---- */

static jv *from_json(jheap *h, const json_t *j, int depth)
{
    if (depth > 10000)
        return NULL;
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        jv *d = jv_dict(h);
        const char *key;
        size_t key_len;
        json_t *val;
        json_object_keylen_foreach((json_t *)j, key, key_len, val)
        {
            jv *v = from_json(h, val, depth + 1);
            if (!v)
                return NULL;
            /* keys are unique in a jansson object: append without lookup */
            jdict *dd = d->u.d;
            if (dd->n == dd->cap) {
                size_t cap = dd->cap ? dd->cap * 2 : 8;
                jv **k = jh_alloc(h, cap * sizeof *k);
                jv **vv = jh_alloc(h, cap * sizeof *vv);
                if (dd->n) {
                    memcpy(k, dd->keys, dd->n * sizeof *k);
                    memcpy(vv, dd->vals, dd->n * sizeof *vv);
                }
                dd->keys = k;
                dd->vals = vv;
                dd->cap = cap;
            }
            dd->keys[dd->n] = jv_str_ref(h, key, key_len);
            dd->vals[dd->n] = v;
            dd->n++;
        }
        return d;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        jv **items = jh_alloc(h, (n ? n : 1) * sizeof *items);
        for (size_t i = 0; i < n; i++) {
            items[i] = from_json(h, json_array_get(j, i), depth + 1);
            if (!items[i])
                return NULL;
        }
        jv *l = alloc(h, JV_LIST);
        l->u.l.v = items;
        l->u.l.n = n;
        return l;
    }
    case JSON_STRING:
        return jv_str_ref(h, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return jv_int(h, (int64_t)json_integer_value(j));
    case JSON_REAL:
        return jv_float(h, json_real_value(j));
    case JSON_TRUE:
        return JV_TRUE_P;
    case JSON_FALSE:
        return JV_FALSE_P;
    case JSON_NULL:
        return JV_NONE_P;
    }
    return NULL;
}

jv *jv_from_json(jheap *h, const json_t *j)
{
    return from_json(h, j, 0);
}
