/* The Jinja parser: tokens -> syntax tree, following jinja2's grammar
 * (parser.py) rule for rule, since precedence quirks show up in real
 * templates: filters bind tighter than arithmetic ('a' + x | tojson),
 * `is` tests bind at the unary level (not x is defined == not (x is
 * defined)), `**` is left-associative, and `x if c` without else yields an
 * undefined value. */
#include <string.h>

#include "core/check.h"
#include "jinja/jinja_internal.h"

typedef struct {
    jinja_template *t;
    jheap *h;
    const jtok *toks;
    size_t n, pos;
    memra_err *err;
    int failed;
    int depth;      /* recursion, against stack exhaustion */
    int loop_depth; /* for break/continue; reset inside macros */
    int soft;       /* inside an if test/body or a conditional expression */
} parser;

/* A growable node list in the arena. */
typedef struct {
    jnode **v;
    size_t n, cap;
} nlist;

static void nl_push(parser *p, nlist *l, jnode *x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jnode **v = jh_alloc(p->h, cap * sizeof *v);
        if (l->n)
            memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static const jtok *cur(const parser *p)
{
    return &p->toks[p->pos < p->n ? p->pos : p->n - 1];
}

static const jtok *look(const parser *p)
{
    size_t i = p->pos + 1;
    return &p->toks[i < p->n ? i : p->n - 1];
}

static void advance(parser *p)
{
    if (p->pos + 1 < p->n)
        p->pos++;
}

static jnode *fail(parser *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static jnode *fail(parser *p, int line, const char *fmt, ...)
{
    if (!p->failed) {
        char msg[512];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        memra_fail(p->err, "template line %d: %s", line, msg);
        p->failed = 1;
    }
    return NULL;
}

static const char *describe(const jtok *t)
{
    static __thread char buf[96];
    if (t->type == JT_NAME) {
        snprintf(buf, sizeof buf, "'%.80s'", t->s);
        return buf;
    }
    return jinja_tok_name(t->type);
}

static int is_name(const jtok *t, const char *name)
{
    return t->type == JT_NAME && strcmp(t->s, name) == 0;
}

static int expect(parser *p, jtok_type type)
{
    const jtok *t = cur(p);
    if (t->type != type) {
        fail(p, t->line, "expected %s, got %s", jinja_tok_name(type), describe(t));
        return -1;
    }
    advance(p);
    return 0;
}

static int skip_if(parser *p, jtok_type type)
{
    if (cur(p)->type == type) {
        advance(p);
        return 1;
    }
    return 0;
}

static int skip_name(parser *p, const char *name)
{
    if (is_name(cur(p), name)) {
        advance(p);
        return 1;
    }
    return 0;
}

static jnode *node(parser *p, jn_kind kind, int line)
{
    jnode *n = jh_alloc(p->h, sizeof *n);
    n->kind = kind;
    n->line = line;
    return n;
}

static int enter(parser *p)
{
    if (++p->depth > JINJA_MAX_NESTING) {
        fail(p, cur(p)->line, "template nested too deeply");
        return -1;
    }
    return 0;
}

#define LEAVE(p, x) (p->depth--, (x))

static jnode *parse_expression(parser *p, int with_condexpr);
static jnode *parse_tuple(parser *p, int simplified, int with_condexpr, const char *extra_end,
                          int explicit_parens);
static jnode *parse_unary(parser *p, int with_filter);
static jnode *parse_primary(parser *p);
static jnode *parse_postfix(parser *p, jnode *n);
static jnode *parse_filter_expr(parser *p, jnode *n);
static jnode *parse_filter(parser *p, jnode *n, int start_inline);
static int parse_statements(parser *p, const char *const *ends, int drop_needle, nlist *out);

/* Positional, keyword, *args and **kwargs arguments of a call. */
static int parse_call_args(parser *p, jnode *n)
{
    int line = cur(p)->line;
    if (expect(p, JT_LPAREN))
        return -1;
    nlist args = {0}, kws = {0};
    const char **names = NULL;
    size_t names_cap = 0;
    int require_comma = 0;
    while (cur(p)->type != JT_RPAREN) {
        if (p->failed)
            return -1;
        if (require_comma) {
            if (expect(p, JT_COMMA))
                return -1;
            if (cur(p)->type == JT_RPAREN)
                break;
        }
        if (cur(p)->type == JT_MUL) {
            if (n->star_args || n->star_kwargs)
                return fail(p, line, "invalid syntax for function call expression"), -1;
            advance(p);
            n->star_args = parse_expression(p, 1);
        } else if (cur(p)->type == JT_POW) {
            if (n->star_kwargs)
                return fail(p, line, "invalid syntax for function call expression"), -1;
            advance(p);
            n->star_kwargs = parse_expression(p, 1);
        } else if (cur(p)->type == JT_NAME && look(p)->type == JT_ASSIGN) {
            if (n->star_kwargs)
                return fail(p, line, "invalid syntax for function call expression"), -1;
            const char *key = cur(p)->s;
            advance(p);
            advance(p);
            jnode *v = parse_expression(p, 1);
            if (!v)
                return -1;
            if (kws.n == names_cap) {
                size_t cap = names_cap ? names_cap * 2 : 4;
                const char **nn = jh_alloc(p->h, cap * sizeof *nn);
                if (kws.n)
                    memcpy(nn, names, kws.n * sizeof *nn);
                names = nn;
                names_cap = cap;
            }
            names[kws.n] = key;
            nl_push(p, &kws, v);
        } else {
            if (n->star_args || n->star_kwargs || kws.n)
                return fail(p, line, "invalid syntax for function call expression"), -1;
            jnode *v = parse_expression(p, 1);
            if (!v)
                return -1;
            nl_push(p, &args, v);
        }
        if (p->failed)
            return -1;
        require_comma = 1;
    }
    if (expect(p, JT_RPAREN))
        return -1;
    n->args = args.v;
    n->n_args = args.n;
    n->kw = kws.v;
    n->kw_names = names;
    n->n_kw = kws.n;
    return 0;
}

static const char *dotted_name(parser *p)
{
    const jtok *t = cur(p);
    if (t->type != JT_NAME) {
        fail(p, t->line, "expected name, got %s", describe(t));
        return NULL;
    }
    const char *name = t->s;
    advance(p);
    while (cur(p)->type == JT_DOT) {
        advance(p);
        const jtok *x = cur(p);
        if (x->type != JT_NAME) {
            fail(p, x->line, "expected name, got %s", describe(x));
            return NULL;
        }
        size_t l1 = strlen(name), l2 = strlen(x->s);
        char *s = jh_alloc(p->h, l1 + l2 + 2);
        memcpy(s, name, l1);
        s[l1] = '.';
        memcpy(s + l1 + 1, x->s, l2 + 1);
        name = s;
        advance(p);
    }
    return name;
}

static jnode *parse_filter(parser *p, jnode *n, int start_inline)
{
    while (cur(p)->type == JT_PIPE || start_inline) {
        if (!start_inline)
            advance(p);
        int line = cur(p)->line;
        const char *name = dotted_name(p);
        if (!name)
            return NULL;
        if (!p->soft && !jinja_filter_known(name))
            return fail(p, line, "no filter named '%s'", name);
        jnode *f = node(p, JN_FILTER, line);
        f->a = n;
        f->name = name;
        if (cur(p)->type == JT_LPAREN && parse_call_args(p, f))
            return NULL;
        n = f;
        start_inline = 0;
    }
    return n;
}

static jnode *parse_test(parser *p, jnode *n)
{
    int line = cur(p)->line;
    advance(p); /* is */
    int negated = skip_name(p, "not");
    const char *name = dotted_name(p);
    if (!name)
        return NULL;
    if (!p->soft && !jinja_test_known(name))
        return fail(p, line, "no test named '%s'", name);
    jnode *t = node(p, JN_TEST, line);
    t->a = n;
    t->name = name;
    const jtok *c = cur(p);
    if (c->type == JT_LPAREN) {
        if (parse_call_args(p, t))
            return NULL;
    } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT ||
                c->type == JT_FLOAT || c->type == JT_LBRACKET || c->type == JT_LBRACE) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            return fail(p, c->line, "you cannot chain multiple tests with is");
        jnode *arg = parse_primary(p);
        if (!arg)
            return NULL;
        arg = parse_postfix(p, arg);
        if (!arg)
            return NULL;
        t->args = jh_alloc(p->h, sizeof *t->args);
        t->args[0] = arg;
        t->n_args = 1;
    }
    if (negated) {
        jnode *x = node(p, JN_NOT, line);
        x->a = t;
        return x;
    }
    return t;
}

static jnode *parse_filter_expr(parser *p, jnode *n)
{
    while (n && !p->failed) {
        const jtok *c = cur(p);
        if (c->type == JT_PIPE) {
            n = parse_filter(p, n, 0);
        } else if (is_name(c, "is")) {
            n = parse_test(p, n);
        } else if (c->type == JT_LPAREN) {
            jnode *call = node(p, JN_CALL, c->line);
            call->a = n;
            if (parse_call_args(p, call))
                return NULL;
            n = call;
        } else {
            break;
        }
    }
    return p->failed ? NULL : n;
}

/* One subscript: an expression or a slice a:b:c. */
static jnode *parse_subscribed(parser *p)
{
    int line = cur(p)->line;
    jnode *parts[3] = {NULL, NULL, NULL};
    if (cur(p)->type == JT_COLON) {
        advance(p);
    } else {
        jnode *e = parse_expression(p, 1);
        if (!e)
            return NULL;
        if (cur(p)->type != JT_COLON)
            return e;
        advance(p);
        parts[0] = e;
    }
    jtok_type t = cur(p)->type;
    if (t != JT_COLON && t != JT_RBRACKET && t != JT_COMMA) {
        parts[1] = parse_expression(p, 1);
        if (!parts[1])
            return NULL;
    }
    if (cur(p)->type == JT_COLON) {
        advance(p);
        t = cur(p)->type;
        if (t != JT_RBRACKET && t != JT_COMMA) {
            parts[2] = parse_expression(p, 1);
            if (!parts[2])
                return NULL;
        }
    }
    jnode *s = node(p, JN_SLICE, line);
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    return s;
}

static jnode *parse_subscript(parser *p, jnode *n)
{
    const jtok *t = cur(p);
    int line = t->line;
    advance(p);
    if (t->type == JT_DOT) {
        const jtok *attr = cur(p);
        advance(p);
        if (attr->type == JT_NAME) {
            jnode *g = node(p, JN_GETATTR, line);
            g->a = n;
            g->name = attr->s;
            return g;
        }
        if (attr->type != JT_INT)
            return fail(p, attr->line, "expected name or number");
        jnode *k = node(p, JN_CONST, attr->line);
        k->value = jv_int(p->h, attr->i);
        jnode *g = node(p, JN_GETITEM, line);
        g->a = n;
        g->b = k;
        return g;
    }
    /* '[' */
    nlist args = {0};
    while (cur(p)->type != JT_RBRACKET) {
        if (args.n && expect(p, JT_COMMA))
            return NULL;
        jnode *x = parse_subscribed(p);
        if (!x)
            return NULL;
        nl_push(p, &args, x);
    }
    if (expect(p, JT_RBRACKET))
        return NULL;
    if (args.n == 0)
        return fail(p, line, "expected an expression in subscript");
    jnode *key;
    if (args.n == 1) {
        key = args.v[0];
    } else {
        key = node(p, JN_TUPLE, line);
        key->args = args.v;
        key->n_args = args.n;
    }
    if (key->kind == JN_SLICE) {
        key->a = n;
        return key;
    }
    jnode *g = node(p, JN_GETITEM, line);
    g->a = n;
    g->b = key;
    return g;
}

static jnode *parse_postfix(parser *p, jnode *n)
{
    while (n && !p->failed) {
        jtok_type t = cur(p)->type;
        if (t == JT_DOT || t == JT_LBRACKET) {
            n = parse_subscript(p, n);
        } else if (t == JT_LPAREN) {
            jnode *call = node(p, JN_CALL, cur(p)->line);
            call->a = n;
            if (parse_call_args(p, call))
                return NULL;
            n = call;
        } else {
            break;
        }
    }
    return p->failed ? NULL : n;
}

static jnode *parse_list(parser *p)
{
    int line = cur(p)->line;
    advance(p);
    nlist items = {0};
    while (cur(p)->type != JT_RBRACKET) {
        if (items.n && expect(p, JT_COMMA))
            return NULL;
        if (cur(p)->type == JT_RBRACKET)
            break;
        jnode *x = parse_expression(p, 1);
        if (!x)
            return NULL;
        nl_push(p, &items, x);
    }
    if (expect(p, JT_RBRACKET))
        return NULL;
    jnode *l = node(p, JN_LIST, line);
    l->args = items.v;
    l->n_args = items.n;
    return l;
}

static jnode *parse_dict(parser *p)
{
    int line = cur(p)->line;
    advance(p);
    nlist keys = {0}, vals = {0};
    while (cur(p)->type != JT_RBRACE) {
        if (keys.n && expect(p, JT_COMMA))
            return NULL;
        if (cur(p)->type == JT_RBRACE)
            break;
        jnode *k = parse_expression(p, 1);
        if (!k || expect(p, JT_COLON))
            return NULL;
        jnode *v = parse_expression(p, 1);
        if (!v)
            return NULL;
        nl_push(p, &keys, k);
        nl_push(p, &vals, v);
    }
    if (expect(p, JT_RBRACE))
        return NULL;
    jnode *d = node(p, JN_DICT, line);
    d->args = keys.v;
    d->n_args = keys.n;
    d->kw = vals.v;
    d->n_kw = vals.n;
    return d;
}

static jnode *parse_primary(parser *p)
{
    if (enter(p))
        return NULL;
    const jtok *t = cur(p);
    jnode *n = NULL;
    switch (t->type) {
    case JT_NAME:
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") ||
            !strcmp(t->s, "False")) {
            n = node(p, JN_CONST, t->line);
            n->value = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            n = node(p, JN_CONST, t->line);
            n->value = JV_NONE_P;
        } else {
            n = node(p, JN_NAME, t->line);
            n->name = t->s;
        }
        advance(p);
        break;
    case JT_STRING: {
        /* adjacent string literals concatenate */
        strbuf sb;
        sb_init(&sb);
        int line = t->line;
        while (cur(p)->type == JT_STRING) {
            sb_append(&sb, cur(p)->s, cur(p)->n);
            advance(p);
        }
        n = node(p, JN_CONST, line);
        n->value = jv_str(p->h, sb_str(&sb), sb.len);
        sb_free(&sb);
        break;
    }
    case JT_INT:
        n = node(p, JN_CONST, t->line);
        n->value = jv_int(p->h, t->i);
        advance(p);
        break;
    case JT_FLOAT:
        n = node(p, JN_CONST, t->line);
        n->value = jv_float(p->h, t->f);
        advance(p);
        break;
    case JT_LPAREN:
        advance(p);
        n = parse_tuple(p, 0, 1, NULL, 1);
        if (n && expect(p, JT_RPAREN))
            n = NULL;
        break;
    case JT_LBRACKET:
        n = parse_list(p);
        break;
    case JT_LBRACE:
        n = parse_dict(p);
        break;
    default:
        n = fail(p, t->line, "unexpected %s", describe(t));
        break;
    }
    return LEAVE(p, n);
}

static jnode *parse_unary(parser *p, int with_filter)
{
    if (enter(p))
        return NULL;
    const jtok *t = cur(p);
    jnode *n;
    if (t->type == JT_SUB || t->type == JT_ADD) {
        advance(p);
        jnode *x = parse_unary(p, 0);
        if (!x)
            return LEAVE(p, NULL);
        n = node(p, t->type == JT_SUB ? JN_NEG : JN_POS, t->line);
        n->a = x;
    } else {
        n = parse_primary(p);
    }
    n = parse_postfix(p, n);
    if (with_filter)
        n = parse_filter_expr(p, n);
    return LEAVE(p, n);
}

static jnode *binop(parser *p, int line, int op, jnode *a, jnode *b)
{
    jnode *n = node(p, JN_BINOP, line);
    n->op = op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *p)
{
    int line = cur(p)->line;
    jnode *left = parse_unary(p, 1);
    while (left && cur(p)->type == JT_POW) {
        advance(p);
        jnode *right = parse_unary(p, 1);
        if (!right)
            return NULL;
        left = binop(p, line, JT_POW, left, right);
        line = cur(p)->line;
    }
    return left;
}

static jnode *parse_math2(parser *p)
{
    int line = cur(p)->line;
    jnode *left = parse_pow(p);
    for (;;) {
        jtok_type t = cur(p)->type;
        if (!left || (t != JT_MUL && t != JT_DIV && t != JT_FLOORDIV && t != JT_MOD))
            return left;
        advance(p);
        jnode *right = parse_pow(p);
        if (!right)
            return NULL;
        left = binop(p, line, (int)t, left, right);
        line = cur(p)->line;
    }
}

static jnode *parse_concat(parser *p)
{
    int line = cur(p)->line;
    jnode *first = parse_math2(p);
    if (!first || cur(p)->type != JT_TILDE)
        return first;
    nlist args = {0};
    nl_push(p, &args, first);
    while (cur(p)->type == JT_TILDE) {
        advance(p);
        jnode *x = parse_math2(p);
        if (!x)
            return NULL;
        nl_push(p, &args, x);
    }
    jnode *n = node(p, JN_CONCAT, line);
    n->args = args.v;
    n->n_args = args.n;
    return n;
}

static jnode *parse_math1(parser *p)
{
    int line = cur(p)->line;
    jnode *left = parse_concat(p);
    for (;;) {
        jtok_type t = cur(p)->type;
        if (!left || (t != JT_ADD && t != JT_SUB))
            return left;
        advance(p);
        jnode *right = parse_concat(p);
        if (!right)
            return NULL;
        left = binop(p, line, (int)t, left, right);
        line = cur(p)->line;
    }
}

static jnode *parse_compare(parser *p)
{
    int line = cur(p)->line;
    jnode *expr = parse_math1(p);
    if (!expr)
        return NULL;
    nlist operands = {0};
    int *ops = NULL;
    size_t ops_cap = 0;
    for (;;) {
        const jtok *t = cur(p);
        int op;
        if (t->type == JT_EQ || t->type == JT_NE || t->type == JT_LT || t->type == JT_LTEQ ||
            t->type == JT_GT || t->type == JT_GTEQ) {
            op = (int)t->type;
            advance(p);
        } else if (is_name(t, "in")) {
            op = JN_OP_IN;
            advance(p);
        } else if (is_name(t, "not") && is_name(look(p), "in")) {
            op = JN_OP_NOTIN;
            advance(p);
            advance(p);
        } else {
            break;
        }
        jnode *x = parse_math1(p);
        if (!x)
            return NULL;
        if (operands.n == ops_cap) {
            size_t cap = ops_cap ? ops_cap * 2 : 4;
            int *o = jh_alloc(p->h, cap * sizeof *o);
            if (operands.n)
                memcpy(o, ops, operands.n * sizeof *o);
            ops = o;
            ops_cap = cap;
        }
        ops[operands.n] = op;
        nl_push(p, &operands, x);
    }
    if (!operands.n)
        return expr;
    jnode *n = node(p, JN_COMPARE, line);
    n->a = expr;
    n->args = operands.v;
    n->n_args = operands.n;
    n->ops = ops;
    return n;
}

static jnode *parse_not(parser *p)
{
    if (is_name(cur(p), "not")) {
        int line = cur(p)->line;
        advance(p);
        if (enter(p))
            return NULL;
        jnode *x = parse_not(p);
        p->depth--;
        if (!x)
            return NULL;
        jnode *n = node(p, JN_NOT, line);
        n->a = x;
        return n;
    }
    return parse_compare(p);
}

static jnode *parse_and(parser *p)
{
    int line = cur(p)->line;
    jnode *left = parse_not(p);
    while (left && skip_name(p, "and")) {
        jnode *right = parse_not(p);
        if (!right)
            return NULL;
        jnode *n = node(p, JN_AND, line);
        n->a = left;
        n->b = right;
        left = n;
        line = cur(p)->line;
    }
    return left;
}

static jnode *parse_or(parser *p)
{
    int line = cur(p)->line;
    jnode *left = parse_and(p);
    while (left && skip_name(p, "or")) {
        jnode *right = parse_and(p);
        if (!right)
            return NULL;
        jnode *n = node(p, JN_OR, line);
        n->a = left;
        n->b = right;
        left = n;
        line = cur(p)->line;
    }
    return left;
}

static jnode *parse_condexpr(parser *p)
{
    int line = cur(p)->line;
    jnode *expr1 = parse_or(p);
    while (expr1 && skip_name(p, "if")) {
        p->soft++;
        jnode *expr2 = parse_or(p);
        jnode *expr3 = NULL;
        if (expr2 && skip_name(p, "else")) {
            if (enter(p))
                return NULL;
            expr3 = parse_condexpr(p);
            p->depth--;
            if (!expr3)
                expr2 = NULL;
        }
        p->soft--;
        if (!expr2)
            return NULL;
        jnode *n = node(p, JN_COND, line);
        n->a = expr2;
        n->b = expr1;
        n->c = expr3;
        expr1 = n;
        line = cur(p)->line;
    }
    return expr1;
}

static jnode *parse_expression(parser *p, int with_condexpr)
{
    if (enter(p))
        return NULL;
    jnode *n = with_condexpr ? parse_condexpr(p) : parse_or(p);
    return LEAVE(p, n);
}

static int is_tuple_end(const parser *p, const char *extra_end)
{
    const jtok *t = cur(p);
    if (t->type == JT_VAR_END || t->type == JT_BLOCK_END || t->type == JT_RPAREN || t->type == JT_EOF)
        return 1;
    return extra_end && is_name(t, extra_end);
}

static jnode *parse_tuple(parser *p, int simplified, int with_condexpr, const char *extra_end,
                          int explicit_parens)
{
    int line = cur(p)->line;
    nlist args = {0};
    int is_tuple = 0;
    for (;;) {
        if (args.n && expect(p, JT_COMMA))
            return NULL;
        if (is_tuple_end(p, extra_end))
            break;
        jnode *x = simplified ? parse_primary(p) : parse_expression(p, with_condexpr);
        if (!x)
            return NULL;
        nl_push(p, &args, x);
        if (cur(p)->type == JT_COMMA)
            is_tuple = 1;
        else
            break;
        line = cur(p)->line;
    }
    if (!is_tuple) {
        if (args.n)
            return args.v[0];
        if (!explicit_parens)
            return fail(p, cur(p)->line, "expected an expression, got %s", describe(cur(p)));
    }
    jnode *n = node(p, JN_TUPLE, line);
    n->args = args.v;
    n->n_args = args.n;
    return n;
}

/* ---- statements ---- */

static int can_assign(const jnode *n)
{
    if (n->kind == JN_NAME)
        return strcmp(n->name, "true") && strcmp(n->name, "false") && strcmp(n->name, "none") &&
               strcmp(n->name, "True") && strcmp(n->name, "False") && strcmp(n->name, "None");
    if (n->kind == JN_TUPLE) {
        for (size_t i = 0; i < n->n_args; i++)
            if (!can_assign(n->args[i]))
                return 0;
        return 1;
    }
    return 0;
}

static jnode *parse_assign_target(parser *p, int with_namespace, const char *extra_end, int name_only)
{
    const jtok *t = cur(p);
    jnode *target;
    if (name_only) {
        if (t->type != JT_NAME)
            return fail(p, t->line, "expected name, got %s", describe(t));
        target = node(p, JN_NAME, t->line);
        target->name = t->s;
        advance(p);
    } else if (with_namespace && t->type == JT_NAME && look(p)->type == JT_DOT) {
        advance(p);
        advance(p);
        const jtok *attr = cur(p);
        if (attr->type != JT_NAME)
            return fail(p, attr->line, "expected name, got %s", describe(attr));
        advance(p);
        target = node(p, JN_NSREF, t->line);
        target->name = t->s;
        target->value = jv_cstr(p->h, attr->s);
        return target;
    } else {
        target = parse_tuple(p, 1, 1, extra_end, 0);
        if (!target)
            return NULL;
    }
    if (!can_assign(target))
        return fail(p, target->line, "can't assign to this expression");
    return target;
}

static int parse_signature(parser *p, jnode *n)
{
    if (expect(p, JT_LPAREN))
        return -1;
    nlist params = {0}, defaults = {0};
    int have_default = 0;
    while (cur(p)->type != JT_RPAREN) {
        if (params.n && expect(p, JT_COMMA))
            return -1;
        jnode *arg = parse_assign_target(p, 0, NULL, 1);
        if (!arg)
            return -1;
        jnode *def = NULL;
        if (skip_if(p, JT_ASSIGN)) {
            def = parse_expression(p, 1);
            if (!def)
                return -1;
            have_default = 1;
        } else if (have_default) {
            fail(p, arg->line, "non-default argument follows default argument");
            return -1;
        }
        nl_push(p, &params, arg);
        nl_push(p, &defaults, def);
    }
    if (expect(p, JT_RPAREN))
        return -1;
    n->args = params.v;
    n->n_args = params.n;
    n->kw = defaults.v;
    n->n_kw = defaults.n;
    return 0;
}

/* Which of caller / varargs / kwargs a macro body refers to. */
static int names_used(const jnode *n)
{
    if (!n)
        return 0;
    int f = 0;
    if (n->kind == JN_NAME) {
        if (!strcmp(n->name, "caller"))
            f |= JM_CALLER;
        else if (!strcmp(n->name, "varargs"))
            f |= JM_VARARGS;
        else if (!strcmp(n->name, "kwargs"))
            f |= JM_KWARGS;
    }
    f |= names_used(n->a) | names_used(n->b) | names_used(n->c) | names_used(n->d);
    f |= names_used(n->star_args) | names_used(n->star_kwargs);
    for (size_t i = 0; i < n->n_args; i++)
        f |= names_used(n->args[i]);
    for (size_t i = 0; i < n->n_kw; i++)
        f |= names_used(n->kw[i]);
    for (size_t i = 0; i < n->n_body; i++)
        f |= names_used(n->body[i]);
    for (size_t i = 0; i < n->n_else; i++)
        f |= names_used(n->else_body[i]);
    return f;
}

static void set_body(jnode *n, const nlist *l)
{
    n->body = l->v;
    n->n_body = l->n;
}

static void set_else(jnode *n, const nlist *l)
{
    n->else_body = l->v;
    n->n_else = l->n;
}

static const char *const END_FOR[] = {"endfor", "else", NULL};
static const char *const END_FOR_ONLY[] = {"endfor", NULL};
static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_IF_ONLY[] = {"endif", NULL};

static jnode *parse_for(parser *p, int line)
{
    jnode *n = node(p, JN_FOR, line);
    n->a = parse_assign_target(p, 0, "in", 0);
    if (!n->a)
        return NULL;
    if (!skip_name(p, "in"))
        return fail(p, cur(p)->line, "expected 'in', got %s", describe(cur(p)));
    n->b = parse_tuple(p, 0, 0, "recursive", 0);
    if (!n->b)
        return NULL;
    /* the loop body and filter are an inner frame: not "soft" */
    int soft = p->soft;
    p->soft = 0;
    if (skip_name(p, "if")) {
        n->c = parse_expression(p, 1);
        if (!n->c)
            return NULL;
    }
    if (is_name(cur(p), "recursive"))
        return fail(p, cur(p)->line, "recursive loops are not supported");
    nlist body = {0}, els = {0};
    p->loop_depth++;
    int rc = parse_statements(p, END_FOR, 0, &body);
    p->loop_depth--;
    p->soft = soft;
    if (rc)
        return NULL;
    const jtok *end = cur(p);
    advance(p);
    if (!strcmp(end->s, "else") && parse_statements(p, END_FOR_ONLY, 1, &els))
        return NULL;
    set_body(n, &body);
    set_else(n, &els);
    return n;
}

static jnode *parse_if(parser *p, int line)
{
    jnode *result = node(p, JN_IF, line);
    jnode *n = result;
    p->soft++;
    for (;;) {
        n->a = parse_tuple(p, 0, 0, NULL, 0);
        nlist body = {0};
        if (!n->a || parse_statements(p, END_IF, 0, &body)) {
            p->soft--;
            return NULL;
        }
        set_body(n, &body);
        const jtok *t = cur(p);
        advance(p);
        if (!strcmp(t->s, "elif")) {
            jnode *next = node(p, JN_IF, cur(p)->line);
            n->else_body = jh_alloc(p->h, sizeof *n->else_body);
            n->else_body[0] = next;
            n->n_else = 1;
            n = next;
            continue;
        }
        if (!strcmp(t->s, "else")) {
            nlist els = {0};
            if (parse_statements(p, END_IF_ONLY, 1, &els)) {
                p->soft--;
                return NULL;
            }
            set_else(n, &els);
        }
        break;
    }
    p->soft--;
    return result;
}

static jnode *parse_set(parser *p, int line)
{
    jnode *target = parse_assign_target(p, 1, NULL, 0);
    if (!target)
        return NULL;
    if (skip_if(p, JT_ASSIGN)) {
        jnode *n = node(p, JN_SET, line);
        n->a = target;
        n->b = parse_tuple(p, 0, 1, NULL, 0);
        return n->b ? n : NULL;
    }
    jnode *n = node(p, JN_SETBLOCK, line);
    n->a = target;
    n->c = parse_filter(p, NULL, 0);
    if (p->failed)
        return NULL;
    static const char *const ends[] = {"endset", NULL};
    nlist body = {0};
    if (parse_statements(p, ends, 1, &body))
        return NULL;
    set_body(n, &body);
    return n;
}

static jnode *parse_macro(parser *p, int line)
{
    jnode *n = node(p, JN_MACRO, line);
    jnode *name = parse_assign_target(p, 0, NULL, 1);
    if (!name)
        return NULL;
    n->name = name->name;
    if (parse_signature(p, n))
        return NULL;
    static const char *const ends[] = {"endmacro", NULL};
    nlist body = {0};
    int saved = p->loop_depth, soft = p->soft;
    p->loop_depth = 0;
    p->soft = 0;
    int rc = parse_statements(p, ends, 1, &body);
    p->loop_depth = saved;
    p->soft = soft;
    if (rc)
        return NULL;
    set_body(n, &body);
    for (size_t i = 0; i < n->n_body; i++)
        n->flags |= names_used(n->body[i]);
    return n;
}

static jnode *parse_call_block(parser *p, int line)
{
    jnode *n = node(p, JN_CALLBLOCK, line);
    if (cur(p)->type == JT_LPAREN && parse_signature(p, n))
        return NULL;
    n->a = parse_expression(p, 1);
    if (!n->a)
        return NULL;
    if (n->a->kind != JN_CALL)
        return fail(p, line, "expected call");
    static const char *const ends[] = {"endcall", NULL};
    nlist body = {0};
    int saved = p->loop_depth, soft = p->soft;
    p->loop_depth = 0;
    p->soft = 0;
    int rc = parse_statements(p, ends, 1, &body);
    p->loop_depth = saved;
    p->soft = soft;
    if (rc)
        return NULL;
    set_body(n, &body);
    for (size_t i = 0; i < n->n_body; i++)
        n->flags |= names_used(n->body[i]);
    return n;
}

static jnode *parse_filter_block(parser *p, int line)
{
    jnode *n = node(p, JN_FILTERBLOCK, line);
    n->c = parse_filter(p, NULL, 1);
    if (!n->c)
        return NULL;
    static const char *const ends[] = {"endfilter", NULL};
    nlist body = {0};
    if (parse_statements(p, ends, 1, &body))
        return NULL;
    set_body(n, &body);
    return n;
}

static jnode *parse_with(parser *p, int line)
{
    jnode *n = node(p, JN_WITH, line);
    nlist targets = {0}, values = {0};
    while (cur(p)->type != JT_BLOCK_END) {
        if (targets.n && expect(p, JT_COMMA))
            return NULL;
        jnode *t = parse_assign_target(p, 0, NULL, 0);
        if (!t || expect(p, JT_ASSIGN))
            return NULL;
        jnode *v = parse_expression(p, 1);
        if (!v)
            return NULL;
        nl_push(p, &targets, t);
        nl_push(p, &values, v);
    }
    n->args = targets.v;
    n->n_args = targets.n;
    n->kw = values.v;
    n->n_kw = values.n;
    static const char *const ends[] = {"endwith", NULL};
    nlist body = {0};
    if (parse_statements(p, ends, 1, &body))
        return NULL;
    set_body(n, &body);
    return n;
}

static jnode *parse_statement(parser *p)
{
    const jtok *t = cur(p);
    if (t->type != JT_NAME)
        return fail(p, t->line, "tag name expected");
    if (enter(p))
        return NULL;
    int line = t->line;
    const char *tag = t->s;
    advance(p);
    jnode *n;
    if (!strcmp(tag, "for")) {
        n = parse_for(p, line);
    } else if (!strcmp(tag, "if")) {
        n = parse_if(p, line);
    } else if (!strcmp(tag, "set")) {
        n = parse_set(p, line);
    } else if (!strcmp(tag, "macro")) {
        n = parse_macro(p, line);
    } else if (!strcmp(tag, "call")) {
        n = parse_call_block(p, line);
    } else if (!strcmp(tag, "filter")) {
        n = parse_filter_block(p, line);
    } else if (!strcmp(tag, "with")) {
        n = parse_with(p, line);
    } else if (!strcmp(tag, "print")) {
        n = node(p, JN_PRINT, line);
        n->a = parse_tuple(p, 0, 1, NULL, 0);
        if (!n->a)
            n = NULL;
    } else if (!strcmp(tag, "break") || !strcmp(tag, "continue")) {
        if (!p->loop_depth)
            n = fail(p, line, "'%s' outside of a loop", tag);
        else
            n = node(p, tag[0] == 'b' ? JN_BREAK : JN_CONTINUE, line);
    } else if (!strcmp(tag, "generation")) {
        /* Hugging Face's AssistantTracker: renders its body as is */
        n = node(p, JN_SCOPE, line);
        static const char *const ends[] = {"endgeneration", NULL};
        nlist body = {0};
        if (parse_statements(p, ends, 1, &body))
            n = NULL;
        else
            set_body(n, &body);
    } else {
        static const char *const known_end[] = {"endfor", "else", "elif", "endif", "endset",
                                                "endmacro", "endcall", "endfilter", "endwith",
                                                "endgeneration", "endraw", NULL};
        int is_end = 0;
        for (int i = 0; known_end[i]; i++)
            is_end |= !strcmp(tag, known_end[i]);
        if (is_end)
            n = fail(p, line, "unexpected '%s'", tag);
        else
            n = fail(p, line, "unknown tag '%s'", tag);
    }
    return LEAVE(p, n);
}

static int at_end_tag(const parser *p, const char *const *ends)
{
    for (int i = 0; ends && ends[i]; i++)
        if (is_name(cur(p), ends[i]))
            return 1;
    return 0;
}

/* Statements up to (and not including) one of the end tags; leaves the
 * stream on the end tag's name. ends NULL: up to the end of the template. */
static int subparse(parser *p, const char *const *ends, nlist *body)
{
    for (;;) {
        if (p->failed)
            return -1;
        const jtok *t = cur(p);
        switch (t->type) {
        case JT_EOF:
            if (ends) {
                char want[128] = "";
                for (int i = 0; ends[i]; i++) {
                    size_t l = strlen(want);
                    snprintf(want + l, sizeof want - l, "%s'%s'", i ? " or " : "", ends[i]);
                }
                fail(p, t->line, "unexpected end of template, expected %s", want);
                return -1;
            }
            return 0;
        case JT_DATA: {
            jnode *d = node(p, JN_DATA, t->line);
            d->value = jv_str_ref(p->h, t->s, t->n);
            nl_push(p, body, d);
            advance(p);
            break;
        }
        case JT_VAR_BEGIN: {
            advance(p);
            jnode *pr = node(p, JN_PRINT, t->line);
            pr->a = parse_tuple(p, 0, 1, NULL, 0);
            if (!pr->a || expect(p, JT_VAR_END))
                return -1;
            nl_push(p, body, pr);
            break;
        }
        case JT_BLOCK_BEGIN: {
            advance(p);
            if (at_end_tag(p, ends))
                return 0;
            jnode *st = parse_statement(p);
            if (!st || expect(p, JT_BLOCK_END))
                return -1;
            nl_push(p, body, st);
            break;
        }
        default:
            fail(p, t->line, "unexpected %s", describe(t));
            return -1;
        }
    }
}

static int parse_statements(parser *p, const char *const *ends, int drop_needle, nlist *out)
{
    skip_if(p, JT_COLON);
    if (expect(p, JT_BLOCK_END))
        return -1;
    if (subparse(p, ends, out))
        return -1;
    if (drop_needle)
        advance(p);
    return 0;
}

int jinja_parse_tokens(jinja_template *t, const jtok *toks, size_t n, memra_err *err)
{
    parser p = {0};
    p.t = t;
    p.h = &t->h;
    p.toks = toks;
    p.n = n;
    p.err = err;
    nlist body = {0};
    if (subparse(&p, NULL, &body))
        return -1;
    t->body = body.v;
    t->n_body = body.n;
    return 0;
}
