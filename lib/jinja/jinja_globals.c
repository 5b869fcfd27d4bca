/* The global functions of Hugging Face's template environment: range
 * (capped at the sandbox's MAX_RANGE), dict, namespace, raise_exception
 * and strftime_now (the clock, or MEMRA_FIXED_DATE for reproducible
 * renders). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja/jinja_internal.h"

static jv g_range = {.k = JV_FUNC, .u.fn = JF_RANGE};
static jv g_dict = {.k = JV_FUNC, .u.fn = JF_DICT};
static jv g_namespace = {.k = JV_FUNC, .u.fn = JF_NAMESPACE};
static jv g_raise = {.k = JV_FUNC, .u.fn = JF_RAISE_EXCEPTION};
static jv g_strftime = {.k = JV_FUNC, .u.fn = JF_STRFTIME_NOW};

jv *jinja_global(const char *name)
{
    if (!strcmp(name, "range"))
        return &g_range;
    if (!strcmp(name, "dict"))
        return &g_dict;
    if (!strcmp(name, "namespace"))
        return &g_namespace;
    if (!strcmp(name, "raise_exception"))
        return &g_raise;
    if (!strcmp(name, "strftime_now"))
        return &g_strftime;
    return NULL;
}

/* "now" for strftime_now: the clock, or MEMRA_FIXED_DATE. */
static int now_tm(jctx *c, int line, struct tm *tm)
{
    const char *fixed = getenv("MEMRA_FIXED_DATE");
    if (fixed && *fixed) {
        int y, mo, d, h = 0, mi = 0, s = 0, used = 0;
        size_t len = strlen(fixed);
        int ok = sscanf(fixed, "%4d-%2d-%2d%n", &y, &mo, &d, &used) == 3 && (size_t)used == 10;
        if (ok && len > 10)
            ok = len == 19 && (fixed[10] == 'T' || fixed[10] == ' ') &&
                 sscanf(fixed + 11, "%2d:%2d:%2d", &h, &mi, &s) == 3;
        if (!ok || mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || s > 60) {
            jfail(c, line, "MEMRA_FIXED_DATE '%s' is not YYYY-MM-DD or YYYY-MM-DDTHH:MM:SS", fixed);
            return -1;
        }
        memset(tm, 0, sizeof *tm);
        tm->tm_year = y - 1900;
        tm->tm_mon = mo - 1;
        tm->tm_mday = d;
        tm->tm_hour = h;
        tm->tm_min = mi;
        tm->tm_sec = s;
        time_t t = timegm(tm); /* normalizes and fills the weekday and year day */
        gmtime_r(&t, tm);
        return 0;
    }
    time_t t = time(NULL);
    localtime_r(&t, tm);
    return 0;
}

jv *jinja_call_global(jctx *c, int line, jfunc fn, const jargs *a)
{
    static const char *const none[] = {NULL};
    switch (fn) {
    case JF_RANGE: {
        if (a->n_kw)
            return jfail(c, line, "range() takes no keyword arguments");
        if (a->n_pos < 1 || a->n_pos > 3)
            return jfail(c, line, "range expected 1 to 3 arguments, got %zu", a->n_pos);
        int64_t v[3] = {0, 0, 1};
        for (size_t i = 0; i < a->n_pos; i++)
            if (jarg_need_int(c, line, "range", a->pos[i], &v[a->n_pos == 1 ? 1 : i]))
                return NULL;
        if (v[2] == 0)
            return jfail(c, line, "range() arg 3 must not be zero");
        double count = v[2] > 0 ? ceil(((double)v[1] - (double)v[0]) / (double)v[2])
                                : ceil(((double)v[0] - (double)v[1]) / -(double)v[2]);
        if (count < 0)
            count = 0;
        if (count > JINJA_MAX_RANGE)
            return jfail(c, line, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                         JINJA_MAX_RANGE);
        size_t n = (size_t)count;
        jv **items = jh_alloc(c->h, (n ? n : 1) * sizeof *items);
        for (size_t i = 0; i < n; i++)
            items[i] = jv_int(c->h, v[0] + (int64_t)i * v[2]);
        jv *l = jv_list(c->h, items, n);
        int64_t *r = jh_alloc(c->h, 3 * sizeof *r);
        memcpy(r, v, sizeof v);
        l->u.l.view = 'r';
        l->u.l.range = r;
        return l;
    }
    case JF_DICT:
    case JF_NAMESPACE: {
        jv *d = jv_dict(c->h);
        if (a->n_pos > 1)
            return jfail(c, line, "%s expected at most 1 argument, got %zu", fn == JF_DICT ? "dict" : "namespace",
                         a->n_pos);
        if (a->n_pos == 1) {
            jv *src = a->pos[0];
            if (src->k == JV_DICT || src->k == JV_NS) {
                for (size_t i = 0; i < src->u.d->n; i++)
                    jdict_set(c->h, d->u.d, src->u.d->keys[i], src->u.d->vals[i]);
            } else {
                size_t n;
                jv **items = jiterate(c, line, src, &n);
                if (!items)
                    return NULL;
                for (size_t i = 0; i < n; i++) {
                    if (!jv_is_seq(items[i]) || items[i]->u.l.n != 2)
                        return jfail(c, line, "dictionary update sequence element #%zu has the wrong length", i);
                    jdict_set(c->h, d->u.d, items[i]->u.l.v[0], items[i]->u.l.v[1]);
                }
            }
        }
        for (size_t i = 0; i < a->n_kw; i++)
            jdict_set(c->h, d->u.d, jv_cstr(c->h, a->kw_names[i]), a->kw[i]);
        if (fn == JF_NAMESPACE)
            d->k = JV_NS;
        return d;
    }
    case JF_RAISE_EXCEPTION: {
        if (jargs_check(c, line, "raise_exception", a, 1, none))
            return NULL;
        jv *msg = jarg(a, 0, NULL);
        if (!msg)
            return jfail(c, line, "raise_exception() missing 1 required positional argument: 'message'");
        strbuf sb;
        sb_init(&sb);
        jv_str_into(&sb, msg);
        jfail(c, line, "%s", sb_str(&sb));
        sb_free(&sb);
        return NULL;
    }
    case JF_STRFTIME_NOW: {
        if (jargs_check(c, line, "strftime_now", a, 1, none))
            return NULL;
        jv *fmt = jarg(a, 0, NULL);
        if (jarg_need_str(c, line, "strftime_now", fmt))
            return NULL;
        struct tm tm;
        if (now_tm(c, line, &tm))
            return NULL;
        char *f = jh_strndup(c->h, fmt->u.s.s, fmt->u.s.n);
        if (strlen(f) != fmt->u.s.n)
            return jfail(c, line, "strftime_now: embedded null character");
        if (fmt->u.s.n > 4096)
            return jfail(c, line, "strftime_now: format too long");
        size_t cap = fmt->u.s.n * 64 + 64;
        char *buf = jh_alloc(c->h, cap);
        size_t n = fmt->u.s.n ? strftime(buf, cap, f, &tm) : 0;
        return jv_str_ref(c->h, buf, n);
    }
    }
    return jfail(c, line, "unknown function");
}
