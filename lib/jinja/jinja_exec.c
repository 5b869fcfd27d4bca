/* Statements and the entry points. Scopes follow jinja2's frames: a
 * for-loop, a macro call and the blocks jinja2 compiles as inner frames
 * (with, filter, set-block, call bodies, generation) get a new scope; `if`
 * does not. A `set` goes to the innermost scope, so a variable set in a
 * loop is gone after the loop (hence namespace()). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "jinja/jinja_internal.h"

/* A loop iteration's scope. jinja2 runs a whole loop in one frame and, at
 * the start of each iteration, resets what the body assigned (a macro
 * defined in the body sees the variables as they change, like a Python
 * closure): so one scope per loop, emptied per iteration. */
static jscope *iteration_scope(jctx *c, jscope *prev, jscope *parent)
{
    if (!prev)
        return jscope_new(c, parent);
    for (size_t i = 0; i < prev->vars.n; i++)
        prev->vars.vals[i] = NULL;
    return prev;
}

static int assign(jctx *c, jscope *s, const jnode *target, jv *v)
{
    if (target->kind == JN_NAME) {
        jscope_set(c, s, target->name, v);
        return 0;
    }
    if (target->kind == JN_NSREF) {
        jv *ns = jlookup(c, s, target->name);
        if (ns->k != JV_NS) {
            jfail(c, target->line, "cannot assign attribute on non-namespace object");
            return -1;
        }
        jdict_set(c->h, ns->u.d, target->value, v);
        return 0;
    }
    /* tuple unpacking */
    size_t n;
    jv **items = jiterate(c, target->line, v, &n);
    if (!items)
        return -1;
    if (n != target->n_args) {
        if (n > target->n_args)
            jfail(c, target->line, "too many values to unpack (expected %zu)", target->n_args);
        else
            jfail(c, target->line, "not enough values to unpack (expected %zu, got %zu)", target->n_args, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++)
        if (assign(c, s, target->args[i], items[i]))
            return -1;
    return 0;
}

static int emit(jctx *c, int line, strbuf *out, const jv *v)
{
    jv_str_into(out, v);
    /* the output buffer lives outside the heap: count it against the limit */
    return jreserve(c, line, out->len);
}

static int exec_for(jctx *c, jscope *s, const jnode *n, strbuf *out)
{
    jv *it = jeval(c, s, n->b);
    if (!it)
        return JX_ERR;
    size_t count;
    jv **items = jiterate(c, n->line, it, &count);
    if (!items)
        return JX_ERR;
    if (n->c) {
        jv **kept = jh_alloc(c->h, (count ? count : 1) * sizeof *kept);
        size_t k = 0;
        jscope *fs = NULL;
        for (size_t i = 0; i < count; i++) {
            fs = iteration_scope(c, fs, s);
            if (assign(c, fs, n->a, items[i]))
                return JX_ERR;
            jv *ok = jeval(c, fs, n->c);
            if (!ok)
                return JX_ERR;
            if (jv_truthy(ok))
                kept[k++] = items[i];
        }
        items = kept;
        count = k;
    }
    if (count == 0)
        return jexec_body(c, s, n->else_body, n->n_else, out);
    jloop *l = jh_alloc(c->h, sizeof *l);
    l->items = items;
    l->n = count;
    jv *loopv = jh_alloc(c->h, sizeof *loopv);
    loopv->k = JV_LOOP;
    loopv->u.loop = l;
    jscope *is = NULL;
    for (size_t i = 0; i < count; i++) {
        l->i = i;
        is = iteration_scope(c, is, s);
        if (assign(c, is, n->a, items[i]))
            return JX_ERR;
        jscope_set(c, is, "loop", loopv);
        int rc = jexec_body(c, is, n->body, n->n_body, out);
        if (rc == JX_ERR)
            return JX_ERR;
        if (rc == JX_BREAK)
            break;
    }
    return JX_OK;
}

static jmacro *make_macro(jctx *c, const jnode *def, jscope *closure, const char *name)
{
    jmacro *m = jh_alloc(c->h, sizeof *m);
    m->def = def;
    m->closure = closure;
    m->name = name;
    return m;
}

/* Render a body in an inner scope into a string value. */
static jv *render_inner(jctx *c, jscope *s, jnode *const *body, size_t n)
{
    strbuf tmp;
    sb_init(&tmp);
    int rc = jexec_body(c, jscope_new(c, s), body, n, &tmp);
    jv *r = rc == JX_ERR ? NULL : jv_str(c->h, sb_str(&tmp), tmp.len);
    sb_free(&tmp);
    return r;
}

static int exec_stmt(jctx *c, jscope *s, const jnode *n, strbuf *out)
{
    if (jstep(c, n->line))
        return JX_ERR;
    jv *v;
    switch (n->kind) {
    case JN_DATA:
        return emit(c, n->line, out, n->value) ? JX_ERR : JX_OK;
    case JN_PRINT:
        v = jeval(c, s, n->a);
        if (!v || emit(c, n->line, out, v))
            return JX_ERR;
        return JX_OK;
    case JN_IF:
        v = jeval(c, s, n->a);
        if (!v)
            return JX_ERR;
        if (jv_truthy(v))
            return jexec_body(c, s, n->body, n->n_body, out);
        return jexec_body(c, s, n->else_body, n->n_else, out);
    case JN_FOR:
        return exec_for(c, s, n, out);
    case JN_SET:
        v = jeval(c, s, n->b);
        if (!v || assign(c, s, n->a, v))
            return JX_ERR;
        return JX_OK;
    case JN_SETBLOCK:
        v = render_inner(c, s, n->body, n->n_body);
        if (v)
            v = japply_filters(c, s, n->c, v);
        if (!v || assign(c, s, n->a, v))
            return JX_ERR;
        return JX_OK;
    case JN_MACRO: {
        jv *m = jh_alloc(c->h, sizeof *m);
        m->k = JV_MACRO;
        m->u.m = make_macro(c, n, s, n->name);
        jscope_set(c, s, n->name, m);
        return JX_OK;
    }
    case JN_CALLBLOCK: {
        jv *caller = jh_alloc(c->h, sizeof *caller);
        caller->k = JV_MACRO;
        caller->u.m = make_macro(c, n, s, NULL);
        v = jeval_call(c, s, n->a, "caller", caller);
        if (!v || emit(c, n->line, out, v))
            return JX_ERR;
        return JX_OK;
    }
    case JN_FILTERBLOCK:
        v = render_inner(c, s, n->body, n->n_body);
        if (v)
            v = japply_filters(c, s, n->c, v);
        if (!v || emit(c, n->line, out, v))
            return JX_ERR;
        return JX_OK;
    case JN_WITH: {
        jv **vals = jh_alloc(c->h, (n->n_kw ? n->n_kw : 1) * sizeof *vals);
        for (size_t i = 0; i < n->n_kw; i++)
            if (!(vals[i] = jeval(c, s, n->kw[i])))
                return JX_ERR;
        jscope *ws = jscope_new(c, s);
        for (size_t i = 0; i < n->n_args; i++)
            if (assign(c, ws, n->args[i], vals[i]))
                return JX_ERR;
        return jexec_body(c, ws, n->body, n->n_body, out);
    }
    case JN_SCOPE:
        return jexec_body(c, jscope_new(c, s), n->body, n->n_body, out);
    case JN_BREAK:
        return JX_BREAK;
    case JN_CONTINUE:
        return JX_CONTINUE;
    default:
        jfail(c, n->line, "not a statement");
        return JX_ERR;
    }
}

int jexec_body(jctx *c, jscope *s, jnode *const *body, size_t n, strbuf *out)
{
    for (size_t i = 0; i < n; i++) {
        int rc = exec_stmt(c, s, body[i], out);
        if (rc != JX_OK)
            return rc;
    }
    return JX_OK;
}

/* ---- entry points ---- */

jinja_template *jinja_parse(const char *src, size_t len, memra_err *err)
{
    if (!src)
        return memra_fail(err, "template: no text"), NULL;
    if (!ju_valid(src, len))
        return memra_fail(err, "template: not valid UTF-8"), NULL;
    if (memchr(src, 0, len))
        return memra_fail(err, "template: contains a NUL byte"), NULL;
    jinja_template *t = xcalloc(1, sizeof *t);
    jh_init(&t->h, SIZE_MAX);
    jtok *toks;
    size_t n;
    if (jinja_lex(&t->h, src, len, &toks, &n, err) || jinja_parse_tokens(t, toks, n, err)) {
        if (err)
            jone_line(err->msg); /* "unexpected char" may quote a control character */
        jinja_free(t);
        return NULL;
    }
    return t;
}

void jinja_free(jinja_template *t)
{
    if (!t)
        return;
    jh_free(&t->h);
    free(t);
}

int jinja_render_vars(const jinja_template *t, const jinja_var *vars, size_t n_vars, char **out,
                      memra_err *err)
{
    *out = NULL;
    jheap h;
    jh_init(&h, JINJA_MAX_BYTES);
    jctx c = {0};
    c.h = &h;
    c.err = err;
    jv *inputs = jv_dict(&h);
    c.inputs = inputs->u.d;
    for (size_t i = 0; i < n_vars; i++) {
        if (!vars[i].name || !vars[i].value)
            continue;
        jv *v = jv_from_json(&h, vars[i].value);
        if (!v) {
            jh_free(&h);
            return memra_fail(err, "template input '%s': nested too deeply", vars[i].name);
        }
        jdict_set(&h, c.inputs, jv_cstr(&h, vars[i].name), v);
    }
    jscope *root = jscope_new(&c, NULL);
    strbuf sb;
    sb_init(&sb);
    int rc = jexec_body(&c, root, t->body, t->n_body, &sb);
    if (rc == JX_ERR || c.failed) {
        sb_free(&sb);
        jh_free(&h);
        if (!c.failed) /* every failing path sets a message; this is a safety net */
            return memra_fail(err, "template: render failed without a reason (internal error)");
        return -1;
    }
    jh_free(&h);
    if (memchr(sb_str(&sb), 0, sb.len)) {
        sb_free(&sb);
        return memra_fail(err, "template: rendered text contains a NUL character");
    }
    *out = sb.len ? sb_take(&sb) : xstrdup("");
    sb_free(&sb);
    return 0;
}

int jinja_render(const char *tmpl, const json_t *context, char **out, memra_err *err)
{
    *out = NULL;
    if (context && !json_is_object(context))
        return memra_fail(err, "template context: not a JSON object");
    jinja_template *t = jinja_parse(tmpl, tmpl ? strlen(tmpl) : 0, err);
    if (!t)
        return -1;
    size_t n = context ? json_object_size(context) : 0;
    jinja_var *vars = xcalloc(n ? n : 1, sizeof *vars);
    size_t i = 0;
    if (context) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)context, key, val)
        {
            vars[i].name = key;
            vars[i].value = val;
            i++;
        }
    }
    int rc = jinja_render_vars(t, vars, i, out, err);
    free(vars);
    jinja_free(t);
    return rc;
}
