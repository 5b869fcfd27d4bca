/* Shared between the jinja_*.c files: tokens, syntax tree, values and the
 * render context. Nothing here is part of the library's public interface. */
#ifndef MEMRA_JINJA_JINJA_INTERNAL_H
#define MEMRA_JINJA_JINJA_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "core/arena.h"
#include "core/err.h"
#include "core/strbuf.h"
#include "jinja/jinja.h"

/* Limits that keep a hostile template from exhausting the machine. The
 * range limit is jinja2's sandbox MAX_RANGE. */
#define JINJA_MAX_NESTING 200           /* parser recursion (brackets, nested blocks) */
#define JINJA_MAX_CALL_DEPTH 250        /* macro calls within macro calls */
#define JINJA_MAX_RANGE 100000
#define JINJA_MAX_BYTES ((size_t)512 << 20) /* memory one render may use */
#define JINJA_MAX_STEPS 50000000        /* expressions + statements one render may evaluate */

/* ---- memory (jinja_utf8.c) ---- */

/* An arena that counts what it hands out, so a render can be stopped when
 * it has used too much (the allocation itself still succeeds; callers check
 * jh_over, and check sizes before building anything large). */
typedef struct {
    arena a;
    size_t used, limit;
} jheap;

void jh_init(jheap *h, size_t limit);
void jh_free(jheap *h);
void *jh_alloc(jheap *h, size_t n);
char *jh_strndup(jheap *h, const char *s, size_t n);
int jh_over(const jheap *h);

/* ---- UTF-8 and Python string predicates (jinja_utf8.c) ---- */

/* Decode the code point at s[i] (i < n); returns its byte length (1 for a
 * malformed byte, whose value is then the byte itself). */
size_t ju_decode(const char *s, size_t n, size_t i, uint32_t *cp);
/* Encode cp as UTF-8 into buf (4 bytes); returns the length. */
size_t ju_encode(uint32_t cp, char *buf);
void ju_put(strbuf *sb, uint32_t cp);
/* Byte length of the code point ending just before s[i] (i > 0). */
size_t ju_prev_len(const char *s, size_t i);
size_t ju_count(const char *s, size_t n);
/* Byte offset of code point number `index` (clamped to n). */
size_t ju_offset(const char *s, size_t n, size_t index);
int ju_valid(const char *s, size_t n);
/* Python's str.isspace / regex \s for one code point. */
int ju_isspace(uint32_t cp);
/* Python's \w (letters, digits, underscore, marks, connectors). */
int ju_isword(uint32_t cp);
int ju_isalpha(uint32_t cp);
int ju_isdigit(uint32_t cp);
/* Cased letters as Python's str.title / islower see them. */
int ju_iscased(uint32_t cp);
int ju_islower(uint32_t cp);
int ju_isupper(uint32_t cp);
int ju_isprintable(uint32_t cp);
uint32_t ju_upper(uint32_t cp);
uint32_t ju_lower(uint32_t cp);
uint32_t ju_title(uint32_t cp);
/* Python line boundaries (str.splitlines): \n \r \v \f \x1c-\x1e \x85 \u2028 \u2029. */
int ju_islinebreak(uint32_t cp);

/* ---- tokens (jinja_lex.c) ---- */

typedef enum {
    JT_EOF,
    JT_DATA,
    JT_VAR_BEGIN,
    JT_VAR_END,
    JT_BLOCK_BEGIN,
    JT_BLOCK_END,
    JT_NAME,
    JT_STRING,
    JT_INT,
    JT_FLOAT,
    JT_ADD,
    JT_SUB,
    JT_DIV,
    JT_FLOORDIV,
    JT_MUL,
    JT_MOD,
    JT_POW,
    JT_TILDE,
    JT_LBRACKET,
    JT_RBRACKET,
    JT_LPAREN,
    JT_RPAREN,
    JT_LBRACE,
    JT_RBRACE,
    JT_EQ,
    JT_NE,
    JT_GT,
    JT_GTEQ,
    JT_LT,
    JT_LTEQ,
    JT_ASSIGN,
    JT_DOT,
    JT_COLON,
    JT_PIPE,
    JT_COMMA,
    JT_SEMICOLON,
} jtok_type;

typedef struct {
    jtok_type type;
    int line;
    const char *s; /* DATA, STRING: the text (decoded); NAME: NUL-terminated name */
    size_t n;
    int64_t i;     /* INT */
    double f;      /* FLOAT */
} jtok;

/* Split a template into tokens, applying newline normalization,
 * trim_blocks, lstrip_blocks and the -/+ whitespace controls exactly as
 * jinja2's lexer does. Tokens and their text live in `h`. */
int jinja_lex(jheap *h, const char *src, size_t len, jtok **out, size_t *n_out, memra_err *err);
const char *jinja_tok_name(jtok_type t);

/* ---- values (jinja_value.c) ---- */

typedef struct jv jv;
typedef struct jnode jnode;
typedef struct jscope jscope;
typedef struct jctx jctx;

typedef enum {
    JV_UNDEF,
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST,
    JV_TUPLE,
    JV_DICT,
    JV_NS,     /* namespace(): a dict whose attributes can be set */
    JV_MACRO,
    JV_FUNC,   /* a builtin global function */
    JV_METHOD, /* a bound method: "abc".split, d.items, loop.cycle */
    JV_LOOP,
} jv_kind;

typedef struct {
    jv **keys;
    jv **vals;
    size_t n, cap;
} jdict;

typedef struct {
    jv **items;
    size_t n;
    size_t i; /* index0 of the current item */
    jv *changed_last;
} jloop;

typedef struct {
    const jnode *def;  /* JN_MACRO or JN_CALLBLOCK */
    jscope *closure;   /* where it was defined: free names resolve there */
    const char *name;
} jmacro;

typedef enum {
    JF_RANGE,
    JF_DICT,
    JF_NAMESPACE,
    JF_RAISE_EXCEPTION,
    JF_STRFTIME_NOW,
} jfunc;

struct jv {
    jv_kind k;
    /* A STR that is a markupsafe.Markup (from |safe, |escape, or an
     * operation on a Markup). Autoescape is off, so it prints as it is; what
     * it changes is what meets it: a plain str added to it, % or .format
     * arguments, and arguments of its own methods are HTML-escaped first. */
    unsigned char safe;
    union {
        int b;
        int64_t i;
        double f;
        struct {
            const char *s; /* UTF-8, not necessarily NUL-terminated */
            size_t n;
        } s;
        struct {
            jv **v;
            size_t n;
            int view; /* how a LIST prints: d.items()/keys()/values() 'i' 'k' 'v', range() 'r' */
            const int64_t *range; /* view 'r': start, stop, step */
        } l;        /* LIST, TUPLE */
        jdict *d;   /* DICT, NS */
        jmacro *m;
        jfunc fn;
        struct {
            jv *self;
            const char *name;
        } meth;
        jloop *loop;
        const char *undef; /* why it is undefined, for error messages */
    } u;
};

extern jv jv_none_v, jv_true_v, jv_false_v;
#define JV_NONE_P (&jv_none_v)
#define JV_TRUE_P (&jv_true_v)
#define JV_FALSE_P (&jv_false_v)

jv *jv_bool(int b);
jv *jv_int(jheap *h, int64_t i);
jv *jv_float(jheap *h, double f);
/* Copies the bytes. */
jv *jv_str(jheap *h, const char *s, size_t n);
/* Takes the bytes as they are (they must live as long as the arena). */
jv *jv_str_ref(jheap *h, const char *s, size_t n);
jv *jv_cstr(jheap *h, const char *s);
/* The same string as a Markup (v itself when it already is one). */
jv *jv_markup(jheap *h, jv *v);
/* The same string as a plain str (str(markup)); v itself when plain. */
jv *jv_plain(jheap *h, jv *v);
jv *jv_list(jheap *h, jv **items, size_t n); /* copies the pointer array */
jv *jv_tuple(jheap *h, jv **items, size_t n);
jv *jv_dict(jheap *h);
jv *jv_undef(jheap *h, const char *why);
jv *jv_undef_name(jheap *h, const char *name);
/* Undefined for a missing attribute or item of obj. */
jv *jv_undef_attr(jheap *h, const jv *obj, const char *attr);

void jdict_set(jheap *h, jdict *d, jv *key, jv *val);
/* NULL when absent. */
jv *jdict_get(const jdict *d, const jv *key);
jv *jdict_get_str(const jdict *d, const char *key);

int jv_is_seq(const jv *v); /* LIST or TUPLE */
int jv_is_num(const jv *v); /* BOOL, INT or FLOAT (Python's Number) */
int jv_truthy(const jv *v);
/* Whether Python could use it as a dict key (no lists, dicts, namespaces inside). */
int jv_hashable(const jv *v);
/* Python's `==` (1 == 1.0 == True, lists and dicts by content). */
int jv_equal(const jv *a, const jv *b);
/* Python's `<` family: 0 and *cmp (-1, 0, 1) when comparable, -1 when not. */
int jv_compare(const jv *a, const jv *b, int *cmp);
/* Python's type name ("str", "int", "NoneType" ...). */
const char *jv_type_name(const jv *v);
/* The number as a double (BOOL, INT, FLOAT). */
double jv_num(const jv *v);

/* Append Python's str(v) / repr(v). */
void jv_str_into(strbuf *sb, const jv *v);
void jv_repr_into(strbuf *sb, const jv *v);
void jv_float_repr(strbuf *sb, double f);

/* json.dumps with the arguments Hugging Face's tojson passes through:
 * indent (NULL: none; "" .. spaces or a string), item and key separators
 * (NULL: Python's defaults), sort_keys, ensure_ascii. Returns 0, or -1 with
 * a message in why (a value that is not JSON serializable). */
typedef struct {
    const char *indent; /* NULL: single line */
    const char *item_sep, *key_sep;
    int sort_keys, ensure_ascii;
} jjson_opts;
int jv_tojson(strbuf *sb, const jv *v, const jjson_opts *o, char *why, size_t why_len);

/* A JSON input value as a template value (objects keep their key order). */
jv *jv_from_json(jheap *h, const json_t *j);

/* ---- syntax tree (jinja_parse.c) ---- */

typedef enum {
    /* expressions */
    JN_CONST,
    JN_NAME,
    JN_GETATTR,   /* a.name */
    JN_GETITEM,   /* a[b] */
    JN_SLICE,     /* a[b:c:d], each may be NULL */
    JN_CALL,      /* a(args, kw) */
    JN_FILTER,    /* a | name(args, kw); a NULL in filter blocks */
    JN_TEST,      /* a is [not] name(args); op = negated */
    JN_NEG,
    JN_POS,
    JN_NOT,
    JN_BINOP,     /* op: JT_ADD, JT_SUB, JT_MUL, JT_DIV, JT_FLOORDIV, JT_MOD, JT_POW */
    JN_AND,
    JN_OR,
    JN_COMPARE,   /* a, then ops[i] args[i]; op JT_EQ.. or JN_OP_IN / JN_OP_NOTIN */
    JN_COND,      /* b if a else c (c may be NULL) */
    JN_LIST,
    JN_TUPLE,
    JN_DICT,      /* keys in args, values in kw */
    JN_CONCAT,    /* args joined with ~ */
    JN_NSREF,     /* set target ns.attr: name, attr in value->u.s */
    /* statements */
    JN_DATA,      /* value: the text */
    JN_PRINT,     /* a */
    JN_IF,        /* a, body, else_body */
    JN_FOR,       /* target a, iterable b, filter c, body, else_body */
    JN_SET,       /* target a, value b */
    JN_SETBLOCK,  /* target a, filters c, body */
    JN_MACRO,     /* name, params args, defaults kw (aligned, NULL = none), body */
    JN_CALLBLOCK, /* call a, params args, defaults kw, body */
    JN_FILTERBLOCK, /* filters c, body */
    JN_WITH,      /* targets args, values kw, body */
    JN_SCOPE,     /* body in a new scope ({% generation %}) */
    JN_BREAK,
    JN_CONTINUE,
} jn_kind;

enum { JN_OP_IN = 1000, JN_OP_NOTIN = 1001 };

/* Macro flags: names the body uses, as jinja2 looks for them. */
enum { JM_CALLER = 1, JM_VARARGS = 2, JM_KWARGS = 4 };

struct jnode {
    jn_kind kind;
    int line;
    int op;
    int flags;
    const char *name;
    jv *value;
    jnode *a, *b, *c, *d;
    jnode **args;
    size_t n_args;
    jnode **kw; /* keyword values, dict values, macro defaults */
    const char **kw_names;
    size_t n_kw;
    int *ops;
    jnode *star_args, *star_kwargs; /* *x and **y in calls */
    jnode **body;
    size_t n_body;
    jnode **else_body;
    size_t n_else;
};

struct jinja_template {
    jheap h;
    jnode **body;
    size_t n_body;
};

/* Parse the token stream into t->body. */
int jinja_parse_tokens(jinja_template *t, const jtok *toks, size_t n, memra_err *err);
int jinja_filter_known(const char *name);
int jinja_test_known(const char *name);

/* ---- evaluation (jinja_eval.c) ---- */

struct jscope {
    jscope *parent;
    jdict vars; /* a NULL value is an unset name (loops reset their scope) */
};

struct jctx {
    jheap *h;
    memra_err *err;
    int failed;
    size_t bytes;     /* charged against JINJA_MAX_BYTES */
    int depth;        /* macro call depth */
    size_t steps;     /* expressions and statements evaluated */
    jdict *inputs;    /* the render's variables */
};

/* What running a statement did. */
enum { JX_OK = 0, JX_ERR = -1, JX_BREAK = 1, JX_CONTINUE = 2 };

jscope *jscope_new(jctx *c, jscope *parent);
void jscope_set(jctx *c, jscope *s, const char *name, jv *v);
/* A name through the scopes, the inputs, the globals; Undefined if none. */
jv *jlookup(jctx *c, jscope *s, const char *name);
/* Count one step of work; -1 (with an error) past the render's limits. */
int jstep(jctx *c, int line);
/* Replace control characters in an error message by spaces. */
void jone_line(char *msg);
/* Evaluate a call node, with one extra keyword argument when extra_name. */
jv *jeval_call(jctx *c, jscope *s, const jnode *n, const char *extra_name, jv *extra);
/* Apply a chain of JN_FILTER nodes (innermost first) to v. */
jv *japply_filters(jctx *c, jscope *s, const jnode *f, jv *v);
/* Run statements into out (jinja_exec.c); a JX_ code. */
int jexec_body(jctx *c, jscope *s, jnode *const *body, size_t n, strbuf *out);

/* Record the first error ("template line N: ...") and return NULL. */
jv *jfail(jctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Fails (returns -1) when n more bytes would pass the render's limit. */
int jreserve(jctx *c, int line, size_t n);

jv *jeval(jctx *c, jscope *s, const jnode *n);
/* Call a callable value with evaluated arguments. */
jv *jcall(jctx *c, int line, jv *fn, jv **args, size_t n_args, const char **kw_names, jv **kw,
          size_t n_kw);
/* environment.getattr / getitem of the sandbox. */
jv *jgetattr(jctx *c, int line, jv *obj, const char *name);
jv *jgetitem(jctx *c, int line, jv *obj, jv *key);
/* Materialize an iterable (list, tuple, dict keys, string chars, undefined
 * as empty) into an array; NULL with an error for anything else. */
jv **jiterate(jctx *c, int line, jv *v, size_t *n);
/* Python's `in`; -1 on a type error. */
int jcontains(jctx *c, int line, jv *container, jv *item);

/* ---- filters, tests, methods, formatting, globals (jinja_filters.c,
 * jinja_methods.c, jinja_format.c, jinja_globals.c) ---- */

/* Arguments as a call passes them. */
typedef struct {
    jv **pos;
    size_t n_pos;
    const char **kw_names;
    jv **kw;
    size_t n_kw;
} jargs;

/* Fetch argument `name` (or positional `index`, -1: keyword only); NULL
 * when not given. */
jv *jarg(const jargs *a, int index, const char *name);
/* Refuse extra positional arguments and keywords not in kw_ok (NULL-ended). */
int jargs_check(jctx *c, int line, const char *fname, const jargs *a, size_t max_pos,
                const char *const *kw_ok);
/* An argument that must be a str / an int (bool counts, as in Python). */
int jarg_need_str(jctx *c, int line, const char *fname, const jv *v);
int jarg_need_int(jctx *c, int line, const char *fname, const jv *v, int64_t *out);

jv *jinja_apply_filter(jctx *c, jscope *s, int line, const char *name, jv *value, const jargs *a);
/* 1 / 0, or -1 on error. */
int jinja_apply_test(jctx *c, jscope *s, int line, const char *name, jv *value, const jargs *a);
jv *jinja_call_method(jctx *c, int line, jv *self, const char *name, const jargs *a);
/* Whether `name` is a method of self's type (so getattr gives a bound method). */
int jinja_has_method(const jv *self, const char *name);
/* Whether `name` is a method the immutable sandbox refuses (list.append ...). */
int jinja_unsafe_method(const jv *self, const char *name);
jv *jinja_call_global(jctx *c, int line, jfunc fn, const jargs *a);
/* A builtin global by name, or NULL. */
jv *jinja_global(const char *name);

/* Python string helpers shared by filters and methods. */
jv *jstr_strip(jctx *c, const jv *s, const jv *chars, int left, int right);
jv *jstr_case(jctx *c, const jv *s, int mode); /* 'u' upper, 'l' lower, 't' str.title, 'c' capitalize */
/* str.replace(old, new, count); count < 0: all. */
jv *jstr_replace(jctx *c, int line, const jv *s, const jv *old, const jv *new_, int64_t count);
/* Python %-formatting: fmt % args (args a tuple, a dict or one value). */
jv *jstr_percent(jctx *c, int line, const jv *fmt, jv *args);
/* str.format(*args, **kwargs). */
jv *jstr_format(jctx *c, int line, const jv *fmt, const jargs *a);
/* The strbuf as a string value (freeing the buffer), charged to the render. */
jv *jstr_finish(jctx *c, int line, strbuf *sb);
/* a value's str() as a string value, charging its size */
jv *jstr_of(jctx *c, int line, const jv *v);
/* markupsafe.escape(v): a Markup stays as it is, anything else becomes
 * str(v) with & < > " ' replaced, as a Markup. */
jv *jescape(jctx *c, int line, jv *v);
/* The same escaping, of n bytes, appended to sb. */
void jescape_into(strbuf *sb, const char *s, size_t n);
/* A Markup method's argument as markupsafe passes it on: a string escaped,
 * anything else as it is. */
jv *jescape_arg(jctx *c, int line, jv *v);

#endif
