/* Evaluation of expressions, with jinja2's runtime semantics:
 *  - names resolve through the scopes, then the render's inputs, then the
 *    builtin globals; a missing one is Undefined, which prints as "" and is
 *    false and empty, but raises when its attribute, item or arithmetic is
 *    needed;
 *  - attribute and item access follow the immutable sandbox: obj.x tries
 *    the attribute (methods) first, then the item; obj['x'] the other way;
 *    a miss is Undefined; list.append and other mutators are refused.
 *  - macros see the scope they were defined in (late-binding, like Python
 *    closures); a call binds arguments as jinja2's Macro.__call__ does. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "jinja/jinja_internal.h"

/* Errors are one line: a template's own message (raise_exception) may hold
 * newlines or tabs. */
void jone_line(char *msg)
{
    for (char *p = msg; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
}

jv *jfail(jctx *c, int line, const char *fmt, ...)
{
    if (!c->failed) {
        char msg[MEMRA_ERR_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        jone_line(msg);
        memra_fail(c->err, "template line %d: %s", line, msg);
        c->failed = 1;
    }
    return NULL;
}

int jreserve(jctx *c, int line, size_t n)
{
    if (c->failed)
        return -1;
    if (n > c->h->limit || c->h->used > c->h->limit - n) {
        jfail(c, line, "render needs more than %zu MiB", c->h->limit >> 20);
        return -1;
    }
    return 0;
}

/* Count one step; fail when the render has run too long or used too much. */
int jstep(jctx *c, int line)
{
    if (c->failed)
        return -1;
    if (++c->steps > JINJA_MAX_STEPS) {
        jfail(c, line, "render took more than %d steps", JINJA_MAX_STEPS);
        return -1;
    }
    if (jh_over(c->h)) {
        jfail(c, line, "render needs more than %zu MiB", c->h->limit >> 20);
        return -1;
    }
    return 0;
}

static jv *undefined_error(jctx *c, int line, const jv *u)
{
    return jfail(c, line, "%s", u->u.undef ? u->u.undef : "undefined value");
}

/* ---- scopes ---- */

jscope *jscope_new(jctx *c, jscope *parent)
{
    jscope *s = jh_alloc(c->h, sizeof *s);
    s->parent = parent;
    return s;
}

void jscope_set(jctx *c, jscope *s, const char *name, jv *v)
{
    size_t n = strlen(name);
    for (size_t i = 0; i < s->vars.n; i++) {
        const jv *k = s->vars.keys[i];
        if (k->u.s.n == n && memcmp(k->u.s.s, name, n) == 0) {
            s->vars.vals[i] = v;
            return;
        }
    }
    jdict_set(c->h, &s->vars, jv_str_ref(c->h, name, n), v);
}

jv *jlookup(jctx *c, jscope *s, const char *name)
{
    for (; s; s = s->parent) {
        jv *v = jdict_get_str(&s->vars, name);
        if (v)
            return v;
    }
    jv *v = jdict_get_str(c->inputs, name);
    if (v)
        return v;
    v = jinja_global(name);
    if (v)
        return v;
    return jv_undef_name(c->h, name);
}

/* ---- iteration and membership ---- */

jv **jiterate(jctx *c, int line, jv *v, size_t *n)
{
    switch (v->k) {
    case JV_LIST:
    case JV_TUPLE:
        *n = v->u.l.n;
        return v->u.l.v;
    case JV_DICT:
        *n = v->u.d->n;
        return v->u.d->n ? v->u.d->keys : jh_alloc(c->h, sizeof(jv *));
    case JV_UNDEF: {
        *n = 0;
        return jh_alloc(c->h, sizeof(jv *));
    }
    case JV_STR: {
        size_t count = ju_count(v->u.s.s, v->u.s.n);
        jv **items = jh_alloc(c->h, (count ? count : 1) * sizeof *items);
        size_t k = 0;
        for (size_t i = 0; i < v->u.s.n;) {
            uint32_t cp;
            size_t l = ju_decode(v->u.s.s, v->u.s.n, i, &cp);
            items[k++] = jv_str_ref(c->h, v->u.s.s + i, l);
            i += l;
        }
        *n = k;
        return items;
    }
    default:
        jfail(c, line, "'%s' object is not iterable", jv_type_name(v));
        return NULL;
    }
}

static int str_find(const jv *hay, const jv *needle)
{
    size_t n = needle->u.s.n, h = hay->u.s.n;
    if (n == 0)
        return 1;
    if (n > h)
        return 0;
    for (size_t i = 0; i + n <= h; i++)
        if (memcmp(hay->u.s.s + i, needle->u.s.s, n) == 0)
            return 1;
    return 0;
}

int jcontains(jctx *c, int line, jv *container, jv *item)
{
    switch (container->k) {
    case JV_STR:
        if (item->k != JV_STR) {
            jfail(c, line, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
            return -1;
        }
        return str_find(container, item);
    case JV_LIST:
    case JV_TUPLE:
        for (size_t i = 0; i < container->u.l.n; i++)
            if (jv_equal(container->u.l.v[i], item))
                return 1;
        return 0;
    case JV_DICT:
        if (!jv_hashable(item)) {
            jfail(c, line, "unhashable type: '%s'", jv_type_name(item));
            return -1;
        }
        return jdict_get(container->u.d, item) != NULL;
    case JV_UNDEF:
        return 0;
    default:
        jfail(c, line, "argument of type '%s' is not iterable", jv_type_name(container));
        return -1;
    }
}

/* ---- attribute and item access ---- */

static jv *loop_attr(jctx *c, jv *obj, const char *name)
{
    jloop *l = obj->u.loop;
    if (!strcmp(name, "index"))
        return jv_int(c->h, (int64_t)l->i + 1);
    if (!strcmp(name, "index0"))
        return jv_int(c->h, (int64_t)l->i);
    if (!strcmp(name, "revindex"))
        return jv_int(c->h, (int64_t)(l->n - l->i));
    if (!strcmp(name, "revindex0"))
        return jv_int(c->h, (int64_t)(l->n - l->i - 1));
    if (!strcmp(name, "first"))
        return jv_bool(l->i == 0);
    if (!strcmp(name, "last"))
        return jv_bool(l->i + 1 == l->n);
    if (!strcmp(name, "length"))
        return jv_int(c->h, (int64_t)l->n);
    if (!strcmp(name, "depth"))
        return jv_int(c->h, 1);
    if (!strcmp(name, "depth0"))
        return jv_int(c->h, 0);
    if (!strcmp(name, "previtem"))
        return l->i > 0 ? l->items[l->i - 1] : jv_undef(c->h, "there is no previous item");
    if (!strcmp(name, "nextitem"))
        return l->i + 1 < l->n ? l->items[l->i + 1] : jv_undef(c->h, "there is no next item");
    return NULL;
}

static jv *method(jctx *c, jv *self, const char *name)
{
    jv *m = jh_alloc(c->h, sizeof *m);
    m->k = JV_METHOD;
    m->u.meth.self = self;
    m->u.meth.name = name;
    return m;
}

/* getattr(obj, name) without the item fallback: NULL when absent. */
static jv *real_attr(jctx *c, jv *obj, const char *name)
{
    if (obj->k == JV_LOOP) {
        jv *v = loop_attr(c, obj, name);
        if (v)
            return v;
    }
    if (obj->k == JV_NS)
        return jdict_get_str(obj->u.d, name);
    if (jinja_has_method(obj, name))
        return method(c, obj, name);
    if (jinja_unsafe_method(obj, name)) {
        size_t n = strlen(name) + 64;
        char *why = jh_alloc(c->h, n);
        snprintf(why, n, "access to attribute '%s' of '%s' object is unsafe.", name, jv_type_name(obj));
        return jv_undef(c->h, why);
    }
    return NULL;
}

jv *jgetattr(jctx *c, int line, jv *obj, const char *name)
{
    if (obj->k == JV_UNDEF)
        return undefined_error(c, line, obj);
    jv *v = real_attr(c, obj, name);
    if (v)
        return v;
    if (obj->k == JV_DICT) {
        v = jdict_get_str(obj->u.d, name);
        if (v)
            return v;
    }
    return jv_undef_attr(c->h, obj, name);
}

/* Python's index normalization: NULL when out of range. */
static int norm_index(int64_t i, size_t n, size_t *out)
{
    if (i < 0)
        i += (int64_t)n;
    if (i < 0 || (uint64_t)i >= n)
        return 0;
    *out = (size_t)i;
    return 1;
}

jv *jgetitem(jctx *c, int line, jv *obj, jv *key)
{
    if (obj->k == JV_UNDEF)
        return undefined_error(c, line, obj);
    int int_key = key->k == JV_INT || key->k == JV_BOOL;
    int64_t ki = key->k == JV_BOOL ? key->u.b : key->k == JV_INT ? key->u.i : 0;
    size_t idx;
    switch (obj->k) {
    case JV_DICT: {
        jv *v = jdict_get(obj->u.d, key);
        if (v)
            return v;
        break;
    }
    case JV_LIST:
    case JV_TUPLE:
        if (int_key) {
            if (norm_index(ki, obj->u.l.n, &idx))
                return obj->u.l.v[idx];
            return jv_undef(c->h, "list index out of range");
        }
        break;
    case JV_STR:
        if (int_key) {
            size_t count = ju_count(obj->u.s.s, obj->u.s.n);
            if (norm_index(ki, count, &idx)) {
                size_t off = ju_offset(obj->u.s.s, obj->u.s.n, idx);
                uint32_t cp;
                size_t l = ju_decode(obj->u.s.s, obj->u.s.n, off, &cp);
                return jv_str_ref(c->h, obj->u.s.s + off, l);
            }
            return jv_undef(c->h, "string index out of range");
        }
        break;
    default:
        break;
    }
    if (key->k == JV_STR) {
        char *name = jh_strndup(c->h, key->u.s.s, key->u.s.n);
        jv *v = real_attr(c, obj, name);
        if (v)
            return v;
        return jv_undef_attr(c->h, obj, name);
    }
    return jv_undef(c->h, "no such item");
}

/* Python slice index adjustment for one bound. */
static int64_t slice_bound(const jv *v, int64_t len, int64_t step, int is_start)
{
    if (!v || v->k == JV_NONE)
        return is_start ? (step < 0 ? len - 1 : 0) : (step < 0 ? -1 : len);
    int64_t i = v->k == JV_BOOL ? v->u.b : v->u.i;
    if (i < 0) {
        i = i < -len ? -1 : i + len; /* no overflow for huge negatives */
        if (i < 0)
            i = step < 0 ? -1 : 0;
    } else if (i >= len) {
        i = step < 0 ? len - 1 : len;
    }
    return i;
}

static int slice_arg_ok(const jv *v)
{
    return !v || v->k == JV_NONE || v->k == JV_INT || v->k == JV_BOOL;
}

/* r made from the string `from` is a Markup when `from` was one (Markup's
 * __mul__ and __getitem__ wrap their results). */
static jv *keep_markup(jctx *c, const jv *from, jv *r)
{
    return r && r->k == JV_STR && from->k == JV_STR && from->safe ? jv_markup(c->h, r) : r;
}

static jv *eval_slice(jctx *c, jscope *s, const jnode *n)
{
    jv *obj = jeval(c, s, n->a);
    if (!obj)
        return NULL;
    jv *parts[3] = {NULL, NULL, NULL};
    const jnode *nodes[3] = {n->b, n->c, n->d};
    for (int i = 0; i < 3; i++)
        if (nodes[i] && !(parts[i] = jeval(c, s, nodes[i])))
            return NULL;
    /* jinja2 compiles slices to a plain Python subscript (no sandbox
     * getitem): what Python refuses is an error, not Undefined */
    if (obj->k == JV_UNDEF)
        return undefined_error(c, n->line, obj);
    if (obj->k == JV_DICT)
        return jfail(c, n->line, "unhashable type: 'slice'");
    if (obj->k != JV_STR && obj->k != JV_LIST && obj->k != JV_TUPLE)
        return jfail(c, n->line, "'%s' object is not subscriptable", jv_type_name(obj));
    for (int i = 0; i < 3; i++) {
        if (parts[i] && parts[i]->k == JV_UNDEF)
            return undefined_error(c, n->line, parts[i]);
        if (!slice_arg_ok(parts[i]))
            return jfail(c, n->line, "slice indices must be integers or None or have an __index__ method");
    }
    int64_t stepv = 1;
    if (parts[2] && parts[2]->k != JV_NONE)
        stepv = parts[2]->k == JV_BOOL ? parts[2]->u.b : parts[2]->u.i;
    if (stepv == 0)
        return jfail(c, n->line, "slice step cannot be zero");
    if (stepv < -INT64_MAX)
        stepv = -INT64_MAX;
    /* code point offsets for strings */
    size_t *offs = NULL;
    int64_t len;
    if (obj->k == JV_STR) {
        size_t count = ju_count(obj->u.s.s, obj->u.s.n);
        offs = jh_alloc(c->h, (count + 1) * sizeof *offs);
        size_t k = 0;
        for (size_t i = 0; i < obj->u.s.n;) {
            uint32_t cp;
            offs[k++] = i;
            i += ju_decode(obj->u.s.s, obj->u.s.n, i, &cp);
        }
        offs[k] = obj->u.s.n;
        len = (int64_t)count;
    } else {
        len = (int64_t)obj->u.l.n;
    }
    int64_t start = slice_bound(parts[0], len, stepv, 1);
    int64_t stop = slice_bound(parts[1], len, stepv, 0);
    uint64_t count = 0;
    if (stepv > 0 && start < stop)
        count = (uint64_t)(stop - start - 1) / (uint64_t)stepv + 1;
    else if (stepv < 0 && stop < start)
        count = (uint64_t)(start - stop - 1) / (uint64_t)(-stepv) + 1;
    if (obj->k == JV_STR) {
        if (stepv == 1) {
            size_t b = offs[count ? start : 0], e = count ? offs[stop] : b;
            return keep_markup(c, obj, jv_str_ref(c->h, obj->u.s.s + b, e - b));
        }
        if (jreserve(c, n->line, obj->u.s.n))
            return NULL;
        strbuf sb;
        sb_init(&sb);
        for (uint64_t k = 0; k < count; k++) {
            int64_t i = start + (int64_t)k * stepv;
            sb_append(&sb, obj->u.s.s + offs[i], offs[i + 1] - offs[i]);
        }
        jv *r = jv_str(c->h, sb_str(&sb), sb.len);
        sb_free(&sb);
        return keep_markup(c, obj, r);
    }
    jv **items = jh_alloc(c->h, (count ? count : 1) * sizeof *items);
    for (uint64_t k = 0; k < count; k++)
        items[k] = obj->u.l.v[start + (int64_t)k * stepv];
    return obj->k == JV_LIST ? jv_list(c->h, items, count) : jv_tuple(c->h, items, count);
}

/* ---- arithmetic ---- */

static int is_intlike(const jv *v)
{
    return v->k == JV_INT || v->k == JV_BOOL;
}

static int64_t ival(const jv *v)
{
    return v->k == JV_BOOL ? v->u.b : v->u.i;
}

static jv *type_error(jctx *c, int line, const char *op, const jv *a, const jv *b)
{
    return jfail(c, line, "unsupported operand type(s) for %s: '%s' and '%s'", op, jv_type_name(a),
                 jv_type_name(b));
}

static jv *overflow(jctx *c, int line)
{
    return jfail(c, line, "integer overflow (Python integers are unbounded, ours are 64-bit)");
}

static jv *repeat(jctx *c, int line, jv *seqv, int64_t times)
{
    if (times < 0)
        times = 0;
    if (seqv->k == JV_STR) {
        if (seqv->u.s.n && (uint64_t)times > SIZE_MAX / seqv->u.s.n)
            return jfail(c, line, "string repetition too large");
        size_t total = seqv->u.s.n * (size_t)times;
        if (jreserve(c, line, total))
            return NULL;
        char *buf = jh_alloc(c->h, total + 1);
        for (int64_t i = 0; i < times; i++)
            memcpy(buf + (size_t)i * seqv->u.s.n, seqv->u.s.s, seqv->u.s.n);
        return jv_str_ref(c->h, buf, total);
    }
    size_t n = seqv->u.l.n;
    if (n && (uint64_t)times > (SIZE_MAX / sizeof(jv *)) / n)
        return jfail(c, line, "sequence repetition too large");
    size_t total = n * (size_t)times;
    if (jreserve(c, line, total * sizeof(jv *)))
        return NULL;
    jv **items = jh_alloc(c->h, (total ? total : 1) * sizeof *items);
    for (size_t i = 0; i < total; i++)
        items[i] = seqv->u.l.v[i % n];
    return seqv->k == JV_LIST ? jv_list(c->h, items, total) : jv_tuple(c->h, items, total);
}

/* Python's float divmod: the floor quotient and the modulo with the sign of b. */
static void float_divmod(double a, double b, double *div, double *mod)
{
    double m = fmod(a, b);
    double d = (a - m) / b;
    if (m != 0.0) {
        if ((b < 0) != (m < 0)) {
            m += b;
            d -= 1.0;
        }
    } else {
        m = copysign(0.0, b);
    }
    double fd;
    if (d != 0.0) {
        fd = floor(d);
        if (d - fd > 0.5)
            fd += 1.0;
    } else {
        fd = copysign(0.0, a / b);
    }
    *div = fd;
    *mod = m;
}

static jv *binop(jctx *c, int line, int op, jv *a, jv *b)
{
    if (op == JT_MOD && a->k == JV_STR) /* str.__mod__ accepts any right operand */
        return jstr_percent(c, line, a, b);
    if (a->k == JV_UNDEF)
        return undefined_error(c, line, a);
    if (b->k == JV_UNDEF)
        return undefined_error(c, line, b);
    int both_num = jv_is_num(a) && jv_is_num(b);
    int both_int = is_intlike(a) && is_intlike(b);
    int64_t r;
    switch (op) {
    case JT_ADD:
        if (both_int) {
            if (__builtin_add_overflow(ival(a), ival(b), &r))
                return overflow(c, line);
            return jv_int(c->h, r);
        }
        if (both_num)
            return jv_float(c->h, jv_num(a) + jv_num(b));
        if (a->k == JV_STR && b->k == JV_STR && a->safe != b->safe) {
            /* Markup.__add__ / __radd__: the plain operand is escaped first */
            jv *ea = jescape(c, line, a), *eb = jescape(c, line, b);
            jv *m = ea && eb ? binop(c, line, op, ea, eb) : NULL;
            return m ? jv_markup(c->h, m) : NULL;
        }
        if (a->k == JV_STR && b->k == JV_STR) {
            size_t n = a->u.s.n + b->u.s.n;
            if (jreserve(c, line, n))
                return NULL;
            char *buf = jh_alloc(c->h, n + 1);
            memcpy(buf, a->u.s.s, a->u.s.n);
            memcpy(buf + a->u.s.n, b->u.s.s, b->u.s.n);
            jv *sum = jv_str_ref(c->h, buf, n);
            sum->safe = a->safe; /* Markup + Markup is a Markup */
            return sum;
        }
        if ((a->k == JV_LIST || a->k == JV_TUPLE) && a->k == b->k) {
            size_t n = a->u.l.n + b->u.l.n;
            if (jreserve(c, line, n * sizeof(jv *)))
                return NULL;
            jv **items = jh_alloc(c->h, (n ? n : 1) * sizeof *items);
            if (a->u.l.n)
                memcpy(items, a->u.l.v, a->u.l.n * sizeof *items);
            if (b->u.l.n)
                memcpy(items + a->u.l.n, b->u.l.v, b->u.l.n * sizeof *items);
            return a->k == JV_LIST ? jv_list(c->h, items, n) : jv_tuple(c->h, items, n);
        }
        if (a->k == JV_STR)
            return jfail(c, line, "can only concatenate str (not \"%s\") to str", jv_type_name(b));
        return type_error(c, line, "+", a, b);
    case JT_SUB:
        if (both_int) {
            if (__builtin_sub_overflow(ival(a), ival(b), &r))
                return overflow(c, line);
            return jv_int(c->h, r);
        }
        if (both_num)
            return jv_float(c->h, jv_num(a) - jv_num(b));
        return type_error(c, line, "-", a, b);
    case JT_MUL:
        if (both_int) {
            if (__builtin_mul_overflow(ival(a), ival(b), &r))
                return overflow(c, line);
            return jv_int(c->h, r);
        }
        if (both_num)
            return jv_float(c->h, jv_num(a) * jv_num(b));
        if ((a->k == JV_STR || jv_is_seq(a)) && is_intlike(b))
            return keep_markup(c, a, repeat(c, line, a, ival(b)));
        if ((b->k == JV_STR || jv_is_seq(b)) && is_intlike(a))
            return keep_markup(c, b, repeat(c, line, b, ival(a)));
        return type_error(c, line, "*", a, b);
    case JT_DIV:
        if (!both_num)
            return type_error(c, line, "/", a, b);
        if (jv_num(b) == 0)
            return jfail(c, line, "division by zero");
        if (both_int) {
            /* Python divides ints exactly-rounded; doubles are exact below 2^53 */
            return jv_float(c->h, (double)ival(a) / (double)ival(b));
        }
        return jv_float(c->h, jv_num(a) / jv_num(b));
    case JT_FLOORDIV:
    case JT_MOD:
        if (a->k == JV_STR && op == JT_MOD)
            return jstr_percent(c, line, a, b);
        if (!both_num)
            return type_error(c, line, op == JT_MOD ? "%" : "//", a, b);
        if (jv_num(b) == 0)
            return jfail(c, line, op == JT_MOD ? "modulo by zero" : "division by zero");
        if (both_int) {
            int64_t x = ival(a), y = ival(b);
            if (x == INT64_MIN && y == -1) {
                if (op == JT_MOD)
                    return jv_int(c->h, 0);
                return overflow(c, line);
            }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q -= 1;
                m += y;
            }
            return jv_int(c->h, op == JT_MOD ? m : q);
        } else {
            double d, m;
            float_divmod(jv_num(a), jv_num(b), &d, &m);
            return jv_float(c->h, op == JT_MOD ? m : d);
        }
    case JT_POW:
        if (!both_num)
            return type_error(c, line, "** or pow()", a, b);
        if (both_int && ival(b) >= 0) {
            int64_t base = ival(a), e = ival(b), acc = 1;
            while (e > 0) {
                if (e & 1) {
                    if (__builtin_mul_overflow(acc, base, &acc))
                        return overflow(c, line);
                }
                e >>= 1;
                if (e && __builtin_mul_overflow(base, base, &base))
                    return overflow(c, line);
            }
            return jv_int(c->h, acc);
        } else {
            double x = jv_num(a), y = jv_num(b);
            if (x == 0 && y < 0)
                return jfail(c, line, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y))
                return jfail(c, line, "complex results are not supported");
            return jv_float(c->h, pow(x, y));
        }
    default:
        return jfail(c, line, "unknown operator");
    }
}

static int compare_op(jctx *c, int line, int op, jv *a, jv *b)
{
    if (op == JT_EQ)
        return jv_equal(a, b);
    if (op == JT_NE)
        return !jv_equal(a, b);
    if (op == JN_OP_IN || op == JN_OP_NOTIN) {
        int r = jcontains(c, line, b, a);
        if (r < 0)
            return -1;
        return op == JN_OP_IN ? r : !r;
    }
    if (a->k == JV_UNDEF || b->k == JV_UNDEF) {
        undefined_error(c, line, a->k == JV_UNDEF ? a : b);
        return -1;
    }
    int cmp;
    const char *sym = op == JT_LT ? "<" : op == JT_LTEQ ? "<=" : op == JT_GT ? ">" : ">=";
    if (jv_compare(a, b, &cmp)) {
        jfail(c, line, "'%s' not supported between instances of '%s' and '%s'", sym, jv_type_name(a),
              jv_type_name(b));
        return -1;
    }
    if (cmp == 2)
        return 0; /* NaN */
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

/* ---- calls ---- */

typedef struct {
    jv **pos;
    size_t n_pos, cap_pos;
    const char **names;
    jv **kw;
    size_t n_kw, cap_kw;
} argbuild;

static void ab_pos(jctx *c, argbuild *b, jv *v)
{
    if (b->n_pos == b->cap_pos) {
        size_t cap = b->cap_pos ? b->cap_pos * 2 : 4;
        jv **p = jh_alloc(c->h, cap * sizeof *p);
        if (b->n_pos)
            memcpy(p, b->pos, b->n_pos * sizeof *p);
        b->pos = p;
        b->cap_pos = cap;
    }
    b->pos[b->n_pos++] = v;
}

static void ab_kw(jctx *c, argbuild *b, const char *name, jv *v)
{
    if (b->n_kw == b->cap_kw) {
        size_t cap = b->cap_kw ? b->cap_kw * 2 : 4;
        jv **p = jh_alloc(c->h, cap * sizeof *p);
        const char **nm = jh_alloc(c->h, cap * sizeof *nm);
        if (b->n_kw) {
            memcpy(p, b->kw, b->n_kw * sizeof *p);
            memcpy(nm, b->names, b->n_kw * sizeof *nm);
        }
        b->kw = p;
        b->names = nm;
        b->cap_kw = cap;
    }
    b->names[b->n_kw] = name;
    b->kw[b->n_kw++] = v;
}

/* Evaluate the arguments of a call, filter or test node. */
static int eval_args(jctx *c, jscope *s, const jnode *n, argbuild *b)
{
    for (size_t i = 0; i < n->n_args; i++) {
        jv *v = jeval(c, s, n->args[i]);
        if (!v)
            return -1;
        ab_pos(c, b, v);
    }
    if (n->star_args) {
        jv *v = jeval(c, s, n->star_args);
        if (!v)
            return -1;
        size_t k;
        jv **items = jiterate(c, n->line, v, &k);
        if (!items)
            return -1;
        for (size_t i = 0; i < k; i++)
            ab_pos(c, b, items[i]);
    }
    for (size_t i = 0; i < n->n_kw; i++) {
        jv *v = jeval(c, s, n->kw[i]);
        if (!v)
            return -1;
        ab_kw(c, b, n->kw_names[i], v);
    }
    if (n->star_kwargs) {
        jv *v = jeval(c, s, n->star_kwargs);
        if (!v)
            return -1;
        if (v->k != JV_DICT) {
            jfail(c, n->line, "argument after ** must be a mapping, not %s", jv_type_name(v));
            return -1;
        }
        for (size_t i = 0; i < v->u.d->n; i++) {
            jv *k = v->u.d->keys[i];
            if (k->k != JV_STR) {
                jfail(c, n->line, "keywords must be strings");
                return -1;
            }
            ab_kw(c, b, jh_strndup(c->h, k->u.s.s, k->u.s.n), v->u.d->vals[i]);
        }
    }
    return 0;
}


static jv *call_macro(jctx *c, int line, jv *fn, jv **args, size_t n_args, const char **kw_names,
                      jv **kw, size_t n_kw)
{
    const jmacro *m = fn->u.m;
    const jnode *def = m->def;
    const char *mname = m->name ? m->name : "caller";
    if (c->depth >= JINJA_MAX_CALL_DEPTH)
        return jfail(c, line, "maximum recursion depth exceeded in macro '%s'", mname);
    jscope *s = jscope_new(c, m->closure);
    size_t n_params = def->n_args;
    size_t n_bound = n_args < n_params ? n_args : n_params;
    char *used = jh_alloc(c->h, n_kw + 1);
    int found_caller = 0;
    /* parameters: positional, then keyword, then default or undefined */
    for (size_t i = 0; i < n_params; i++) {
        const char *pname = def->args[i]->name;
        jv *v = NULL;
        if (i < n_bound) {
            v = args[i];
        } else {
            for (size_t k = 0; k < n_kw; k++)
                if (!used[k] && !strcmp(kw_names[k], pname)) {
                    v = kw[k];
                    used[k] = 1;
                    break;
                }
            if (!strcmp(pname, "caller"))
                found_caller = 1;
        }
        if (!v && def->kw[i]) {
            v = jeval(c, s, def->kw[i]); /* defaults see the parameters bound before them */
            if (!v)
                return NULL;
        }
        if (!v) {
            size_t len = strlen(pname) + 40;
            char *why = jh_alloc(c->h, len);
            snprintf(why, len, "parameter '%s' was not provided", pname);
            v = jv_undef(c->h, why);
        }
        jscope_set(c, s, pname, v);
    }
    if ((def->flags & JM_CALLER) && !found_caller) {
        jv *caller = NULL;
        for (size_t k = 0; k < n_kw; k++)
            if (!used[k] && !strcmp(kw_names[k], "caller")) {
                caller = kw[k];
                used[k] = 1;
            }
        jscope_set(c, s, "caller", caller ? caller : jv_undef(c->h, "No caller defined"));
    }
    if (def->flags & JM_KWARGS) {
        jv *d = jv_dict(c->h);
        for (size_t k = 0; k < n_kw; k++)
            if (!used[k])
                jdict_set(c->h, d->u.d, jv_cstr(c->h, kw_names[k]), kw[k]);
        jscope_set(c, s, "kwargs", d);
    } else {
        for (size_t k = 0; k < n_kw; k++) {
            if (used[k])
                continue;
            if (!strcmp(kw_names[k], "caller"))
                return jfail(c, line, "macro '%s' was invoked with two values for the special caller argument",
                             mname);
            return jfail(c, line, "macro '%s' takes no keyword argument '%s'", mname, kw_names[k]);
        }
    }
    if (def->flags & JM_VARARGS) {
        jscope_set(c, s, "varargs", jv_tuple(c->h, args + n_bound, n_args - n_bound));
    } else if (n_args > n_params) {
        return jfail(c, line, "macro '%s' takes not more than %zu argument(s)", mname, n_params);
    }
    strbuf out;
    sb_init(&out);
    c->depth++;
    int rc = jexec_body(c, s, def->body, def->n_body, &out);
    c->depth--;
    if (rc == JX_ERR) {
        sb_free(&out);
        return NULL;
    }
    jv *r = jv_str(c->h, sb_str(&out), out.len);
    sb_free(&out);
    return r;
}

jv *jcall(jctx *c, int line, jv *fn, jv **args, size_t n_args, const char **kw_names, jv **kw,
          size_t n_kw)
{
    jargs a = {args, n_args, kw_names, kw, n_kw};
    switch (fn->k) {
    case JV_UNDEF:
        return undefined_error(c, line, fn);
    case JV_MACRO:
        return call_macro(c, line, fn, args, n_args, kw_names, kw, n_kw);
    case JV_FUNC:
        return jinja_call_global(c, line, fn->u.fn, &a);
    case JV_METHOD:
        return jinja_call_method(c, line, fn->u.meth.self, fn->u.meth.name, &a);
    default:
        return jfail(c, line, "'%s' object is not callable", jv_type_name(fn));
    }
}

jv *jeval_call(jctx *c, jscope *s, const jnode *n, const char *extra_name, jv *extra)
{
    jv *fn = jeval(c, s, n->a);
    if (!fn)
        return NULL;
    argbuild b = {0};
    if (eval_args(c, s, n, &b))
        return NULL;
    if (extra_name)
        ab_kw(c, &b, extra_name, extra);
    return jcall(c, n->line, fn, b.pos, b.n_pos, b.names, b.kw, b.n_kw);
}

/* Apply a chain of filters (innermost first) to v. */
jv *japply_filters(jctx *c, jscope *s, const jnode *f, jv *v)
{
    if (!f)
        return v;
    if (f->a) {
        v = japply_filters(c, s, f->a, v);
        if (!v)
            return NULL;
    }
    argbuild b = {0};
    if (eval_args(c, s, f, &b))
        return NULL;
    jargs a = {b.pos, b.n_pos, b.names, b.kw, b.n_kw};
    return jinja_apply_filter(c, s, f->line, f->name, v, &a);
}

/* ---- expressions ---- */

jv *jeval(jctx *c, jscope *s, const jnode *n)
{
    if (jstep(c, n->line))
        return NULL;
    jv *a, *b;
    switch (n->kind) {
    case JN_CONST:
        return n->value;
    case JN_NAME:
        return jlookup(c, s, n->name);
    case JN_GETATTR:
        a = jeval(c, s, n->a);
        return a ? jgetattr(c, n->line, a, n->name) : NULL;
    case JN_GETITEM:
        a = jeval(c, s, n->a);
        if (!a)
            return NULL;
        b = jeval(c, s, n->b);
        return b ? keep_markup(c, a, jgetitem(c, n->line, a, b)) : NULL;
    case JN_SLICE:
        return eval_slice(c, s, n);
    case JN_CALL:
        return jeval_call(c, s, n, NULL, NULL);
    case JN_FILTER: {
        a = jeval(c, s, n->a);
        if (!a)
            return NULL;
        argbuild ab = {0};
        if (eval_args(c, s, n, &ab))
            return NULL;
        jargs args = {ab.pos, ab.n_pos, ab.names, ab.kw, ab.n_kw};
        return jinja_apply_filter(c, s, n->line, n->name, a, &args);
    }
    case JN_TEST: {
        a = jeval(c, s, n->a);
        if (!a)
            return NULL;
        argbuild ab = {0};
        if (eval_args(c, s, n, &ab))
            return NULL;
        jargs args = {ab.pos, ab.n_pos, ab.names, ab.kw, ab.n_kw};
        int r = jinja_apply_test(c, s, n->line, n->name, a, &args);
        return r < 0 ? NULL : jv_bool(r);
    }
    case JN_NEG:
    case JN_POS:
        a = jeval(c, s, n->a);
        if (!a)
            return NULL;
        if (a->k == JV_UNDEF)
            return undefined_error(c, n->line, a);
        if (is_intlike(a)) {
            if (n->kind == JN_POS)
                return jv_int(c->h, ival(a));
            if (ival(a) == INT64_MIN)
                return overflow(c, n->line);
            return jv_int(c->h, -ival(a));
        }
        if (a->k == JV_FLOAT)
            return jv_float(c->h, n->kind == JN_NEG ? -a->u.f : a->u.f);
        return jfail(c, n->line, "bad operand type for unary %c: '%s'", n->kind == JN_NEG ? '-' : '+',
                     jv_type_name(a));
    case JN_NOT:
        a = jeval(c, s, n->a);
        return a ? jv_bool(!jv_truthy(a)) : NULL;
    case JN_AND:
        a = jeval(c, s, n->a);
        if (!a || !jv_truthy(a))
            return a;
        return jeval(c, s, n->b);
    case JN_OR:
        a = jeval(c, s, n->a);
        if (!a || jv_truthy(a))
            return a;
        return jeval(c, s, n->b);
    case JN_BINOP:
        a = jeval(c, s, n->a);
        if (!a)
            return NULL;
        b = jeval(c, s, n->b);
        return b ? binop(c, n->line, n->op, a, b) : NULL;
    case JN_COMPARE: {
        a = jeval(c, s, n->a);
        if (!a)
            return NULL;
        for (size_t i = 0; i < n->n_args; i++) {
            b = jeval(c, s, n->args[i]);
            if (!b)
                return NULL;
            int r = compare_op(c, n->line, n->ops[i], a, b);
            if (r < 0)
                return NULL;
            if (!r)
                return JV_FALSE_P;
            a = b;
        }
        return JV_TRUE_P;
    }
    case JN_COND:
        a = jeval(c, s, n->a);
        if (!a)
            return NULL;
        if (jv_truthy(a))
            return jeval(c, s, n->b);
        if (n->c)
            return jeval(c, s, n->c);
        return jv_undef(c->h, "the inline if-expression evaluated to false and no else section was defined");
    case JN_LIST:
    case JN_TUPLE: {
        jv **items = jh_alloc(c->h, (n->n_args ? n->n_args : 1) * sizeof *items);
        for (size_t i = 0; i < n->n_args; i++)
            if (!(items[i] = jeval(c, s, n->args[i])))
                return NULL;
        return n->kind == JN_LIST ? jv_list(c->h, items, n->n_args) : jv_tuple(c->h, items, n->n_args);
    }
    case JN_DICT: {
        jv *d = jv_dict(c->h);
        for (size_t i = 0; i < n->n_args; i++) {
            jv *k = jeval(c, s, n->args[i]);
            if (!k)
                return NULL;
            jv *v = jeval(c, s, n->kw[i]);
            if (!v)
                return NULL;
            if (!jv_hashable(k))
                return jfail(c, n->line, "unhashable type: '%s'", jv_type_name(k));
            jdict_set(c->h, d->u.d, k, v);
        }
        return d;
    }
    case JN_CONCAT: {
        strbuf sb;
        sb_init(&sb);
        for (size_t i = 0; i < n->n_args; i++) {
            jv *v = jeval(c, s, n->args[i]);
            if (!v || jreserve(c, n->line, sb.len)) {
                sb_free(&sb);
                return NULL;
            }
            jv_str_into(&sb, v);
        }
        if (jreserve(c, n->line, sb.len)) {
            sb_free(&sb);
            return NULL;
        }
        jv *r = jv_str(c->h, sb_str(&sb), sb.len);
        sb_free(&sb);
        return r;
    }
    default:
        return jfail(c, n->line, "not an expression");
    }
}
