/* JSON Schema compiled to GBNF.
 *
 * Every schema node becomes a rule named after its path; $ref targets are
 * compiled once and referenced by name, so recursive schemas work. Layout of
 * the JSON we allow, deterministic and bounded:
 *   ws     ::= "" | " " | "\n" followed by at most 20 spaces or tabs
 *   object ::= "{" ws ( member ( "," ws member )* )? "}"
 *   member ::= key ws ":" ws value ws
 *   array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
 * so whitespace may follow any opening bracket, value or comma, and never
 * precedes the document or follows its end. Numbers are bounded too (16
 * integer digits, 16 fraction digits, 2 exponent digits, so
 * every number is a finite double): a model cannot
 * spin forever inside one number or one run of whitespace. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json.h"
#include "core/strbuf.h"
#include "grammar/jsch_internal.h"
#include "grammar/json_schema.h"

#define JSCH_MAX_COUNT 4096

static const char PRIMITIVES[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws ( member ( \",\" ws member )* )? \"}\"\n"
    "member ::= string ws \":\" ws value ws\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" unit )\n"
    /* \\u escapes name whole characters: no lone surrogate halves, which
     * many JSON parsers refuse. */
    "unit ::= [0-9a-cA-CefEF] hex{3} | [dD] [0-7] hex{2} | [dD] [89abAB] hex{2} \"\\\\u\" [dD] [c-fC-F] hex{2}\n"
    "hex ::= [0-9a-fA-F]\n"
    "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} )\n"
    "number ::= integer ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
    "boolean ::= \"true\" | \"false\"\n"
    "null ::= \"null\"\n"
    /* Days as each month has them; February 29 only in a leap year (by 4,
     * not by 100 unless by 400), as RFC 3339 and validators check. */
    "date ::= [0-9]{4} \"-\" month-day | leap-year \"-02-29\"\n"
    "month-day ::= ( \"0\" [13578] | \"1\" [02] ) \"-\" ( day-28 | \"29\" | \"30\" | \"31\" ) | "
    "( \"0\" [469] | \"11\" ) \"-\" ( day-28 | \"29\" | \"30\" ) | \"02-\" day-28\n"
    "day-28 ::= \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]\n"
    "leap-year ::= [0-9]{2} ( \"0\" [48] | [2468] [048] | [13579] [26] ) | "
    "( \"0\" [048] | [2468] [048] | [13579] [26] ) \"00\"\n"
    "time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} )? "
    "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n"
    "uuid ::= [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{12}\n"
    /* Dots only between atoms, hyphens only inside a label: what the
     * RFC 5322 dot-atom form and validators (ajv-formats) accept. */
    "email ::= email-atom ( \".\" email-atom ){0,3} \"@\" ( email-label \".\" ){1,4} [a-zA-Z]{2,24}\n"
    "email-atom ::= [a-zA-Z0-9_%+-]{1,16}\n"
    "email-label ::= [a-zA-Z0-9] ( \"-\"? [a-zA-Z0-9] ){0,31}\n";

/* Keywords that only describe: they never change what is valid. */
static const char *const ANNOTATIONS[] = {
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated",
    "readOnly", "writeOnly", "$defs", "definitions", NULL};

/* Keywords handled here; anything else that constrains is refused. */
static const char *const HANDLED[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems",
    "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "format", "minLength", "maxLength",
    "uniqueItems", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL};

static const char *const BOUNDS[] = {"minimum", "maximum", "exclusiveMinimum",
                                     "exclusiveMaximum", NULL};

typedef struct {
    char *ref;
    char *rule;
} ref_rule;

typedef struct {
    const json_t *root;
    strbuf out;
    memra_err *err;
    ref_rule *refs;
    int n_refs, cap_refs;
    int counter;
} jsch_ctx;

static int in_list(const char *const *list, const char *k)
{
    for (int i = 0; list[i]; i++)
        if (strcmp(list[i], k) == 0)
            return 1;
    return 0;
}

/* A fresh rule name from a schema path: "#/properties/a b" -> "properties-a-b-7". */
static char *rule_name(jsch_ctx *c, const char *path)
{
    strbuf sb;
    sb_init(&sb);
    const char *p = path;
    if (p[0] == '#')
        p++;
    while (*p == '/')
        p++;
    size_t n = 0;
    for (; *p && n < 60; p++, n++) {
        char ch = *p;
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        sb_putc(&sb, ok ? ch : '-');
    }
    sb_printf(&sb, "%sr%d", sb.len ? "-" : "", c->counter++);
    return sb_take(&sb);
}

/* A GBNF literal for bytes: quotes, backslashes and control bytes escaped. */
static void put_literal(strbuf *sb, const char *s, size_t n)
{
    sb_putc(sb, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\')
            sb_printf(sb, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7F)
            sb_printf(sb, "\\x%02X", ch);
        else
            sb_putc(sb, (char)ch);
    }
    sb_putc(sb, '"');
}

/* A JSON value, exactly as compact JSON, as a GBNF literal. */
static void put_json_literal(strbuf *sb, const json_t *v)
{
    char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    put_literal(sb, s, strlen(s));
    free(s);
}

static int gen(jsch_ctx *c, const json_t *s, const char *path, char **name);

static int get_count(jsch_ctx *c, const json_t *s, const char *key, const char *path, int def,
                     int *out)
{
    const json_t *v = json_object_get(s, key);
    *out = def;
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0 ||
        json_integer_value(v) > JSCH_MAX_COUNT)
        return memra_fail(c->err, "schema %s: '%s' must be an integer from 0 to %d", path, key,
                          JSCH_MAX_COUNT);
    *out = (int)json_integer_value(v);
    return 0;
}

static void path_join(char *out, size_t cap, const char *path, const char *a, const char *b)
{
    if (b)
        snprintf(out, cap, "%s/%s/%s", path, a, b);
    else
        snprintf(out, cap, "%s/%s", path, a);
}

static int gen_object(jsch_ctx *c, const json_t *s, const char *path, strbuf *body)
{
    const json_t *props = json_object_get(s, "properties");
    const json_t *req = json_object_get(s, "required");
    const json_t *addl = json_object_get(s, "additionalProperties");
    char sub[1024];
    if (props && !json_is_object(props))
        return memra_fail(c->err, "schema %s: 'properties' must be an object", path);
    if (req && !json_is_array(req))
        return memra_fail(c->err, "schema %s: 'required' must be an array", path);
    size_t i;
    const json_t *r;
    json_array_foreach(req, i, r) {
        if (!json_is_string(r))
            return memra_fail(c->err, "schema %s/required/%zu: must be a string", path, i);
        if (!props || !json_object_get(props, json_string_value(r)))
            return memra_fail(c->err, "schema %s: required property '%s' is not in 'properties'",
                              path, json_string_value(r));
    }
    /* Extra members: absent additionalProperties allows none when the
     * properties are declared (what strict SDK schemas mean, and every such
     * output is valid), any when they are not. */
    char *extra = NULL;
    int allow_extra;
    if (!addl)
        allow_extra = !props;
    else if (json_is_boolean(addl))
        allow_extra = json_is_true(addl);
    else if (json_is_object(addl))
        allow_extra = 1;
    else
        return memra_fail(c->err, "schema %s: 'additionalProperties' must be a boolean or a "
                          "schema", path);
    if (allow_extra) {
        if (addl && json_is_object(addl)) {
            path_join(sub, sizeof sub, path, "additionalProperties", NULL);
            char *vn = NULL;
            if (gen(c, addl, sub, &vn))
                return -1;
            extra = rule_name(c, sub);
            sb_printf(&c->out, "%s ::= string ws \":\" ws %s ws\n", extra, vn);
            free(vn);
        } else {
            extra = xstrdup("member");
        }
    }

    /* Members: the required ones first, then the optional ones, each group
     * in declared order. */
    size_t n = props ? json_object_size(props) : 0;
    char **members = xcalloc(n + 1, sizeof *members);
    char *is_req = xcalloc(n + 1, 1);
    size_t k = 0;
    int rc = 0;
    const char *key;
    const json_t *ps;
    for (int pass = 0; pass < 2 && !rc; pass++) {
        json_object_foreach((json_t *)props, key, ps) {
            int required = 0;
            json_array_foreach(req, i, r) if (strcmp(json_string_value(r), key) == 0) required = 1;
            if (required != (pass == 0))
                continue;
            path_join(sub, sizeof sub, path, "properties", key);
            char *vn = NULL;
            if (gen(c, ps, sub, &vn)) {
                rc = -1;
                break;
            }
            char *mn = rule_name(c, sub);
            strbuf m;
            sb_init(&m);
            json_t *ks = json_string(key);
            put_json_literal(&m, ks);
            json_decref(ks);
            sb_printf(&c->out, "%s ::= %s ws \":\" ws %s ws\n", mn, sb_str(&m), vn);
            sb_free(&m);
            free(vn);
            is_req[k] = (char)required;
            members[k++] = mn;
        }
    }
    if (!rc) {
        size_t n_req = 0;
        while (n_req < k && is_req[n_req])
            n_req++;
        sb_puts(body, "\"{\" ws ");
        if (n_req > 0) {
            for (size_t j = 0; j < k; j++) {
                if (j < n_req)
                    sb_printf(body, "%s%s ", j ? "\",\" ws " : "", members[j]);
                else
                    sb_printf(body, "( \",\" ws %s )? ", members[j]);
            }
            if (extra)
                sb_printf(body, "( \",\" ws %s )* ", extra);
        } else if (k > 0 || extra) {
            /* No member is required: any of them may come first. */
            sb_puts(body, "( ");
            for (size_t j = 0; j < k; j++) {
                sb_printf(body, "%s%s ", j ? "| " : "", members[j]);
                for (size_t l = j + 1; l < k; l++)
                    sb_printf(body, "( \",\" ws %s )? ", members[l]);
                if (extra)
                    sb_printf(body, "( \",\" ws %s )* ", extra);
            }
            if (extra)
                sb_printf(body, "%s%s ( \",\" ws %s )* ", k ? "| " : "", extra, extra);
            sb_puts(body, ")? ");
        }
        sb_puts(body, "\"}\"");
    }
    for (size_t j = 0; j < k; j++)
        free(members[j]);
    free(members);
    free(is_req);
    free(extra);
    return rc;
}

static int gen_array(jsch_ctx *c, const json_t *s, const char *path, strbuf *body)
{
    const json_t *items = json_object_get(s, "items");
    const json_t *uniq = json_object_get(s, "uniqueItems");
    if (uniq && !json_is_false(uniq))
        return memra_fail(c->err, "schema %s: keyword 'uniqueItems' is not supported (a "
                          "grammar cannot compare items)", path);
    int min, max;
    if (get_count(c, s, "minItems", path, 0, &min) || get_count(c, s, "maxItems", path, -1, &max))
        return -1;
    if (max >= 0 && max < min)
        return memra_fail(c->err, "schema %s: maxItems %d is below minItems %d", path, max, min);
    char *item = NULL;
    if (items && !json_is_object(items) && !json_is_true(items))
        return memra_fail(c->err, "schema %s: 'items' must be a schema", path);
    if (items && json_is_object(items)) {
        char sub[1024];
        path_join(sub, sizeof sub, path, "items", NULL);
        if (gen(c, items, sub, &item))
            return -1;
    } else {
        item = xstrdup("value");
    }
    sb_puts(body, "\"[\" ws ");
    if (max != 0) {
        sb_printf(body, "%s%s ws ( \",\" ws %s ws )", min ? "" : "( ", item, item);
        int lo = min ? min - 1 : 0;
        if (max < 0)
            sb_printf(body, "{%d,} ", lo);
        else
            sb_printf(body, "{%d,%d} ", lo, max - 1);
        if (!min)
            sb_puts(body, ")? ");
    }
    sb_puts(body, "\"]\"");
    free(item);
    return 0;
}

static int gen_string(jsch_ctx *c, const json_t *s, const char *path, strbuf *body)
{
    const json_t *fmt = json_object_get(s, "format");
    int min, max;
    if (get_count(c, s, "minLength", path, 0, &min) ||
        get_count(c, s, "maxLength", path, -1, &max))
        return -1;
    if (max >= 0 && max < min)
        return memra_fail(c->err, "schema %s: maxLength %d is below minLength %d", path, max,
                          min);
    const json_t *pat = json_object_get(s, "pattern");
    if (pat) {
        if (!json_is_string(pat))
            return memra_fail(c->err, "schema %s: 'pattern' must be a string", path);
        if (fmt || json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
            return memra_fail(c->err, "schema %s: 'pattern' beside format/minLength/maxLength "
                              "is not supported", path);
        sb_puts(body, "\"\\\"\" ");
        if (jsch_pattern(json_string_value(pat), path, body, c->err))
            return -1;
        sb_puts(body, " \"\\\"\"");
        return 0;
    }
    if (fmt) {
        const char *f = json_string_value(fmt);
        static const char *const formats[] = {"date-time", "date", "time", "uuid", "email", NULL};
        static const char *const bodies[] = {"date \"T\" time", "date", "time", "uuid", "email"};
        if (!f)
            return memra_fail(c->err, "schema %s: 'format' must be a string", path);
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
            return memra_fail(c->err, "schema %s: minLength/maxLength beside 'format' are not "
                              "supported", path);
        for (int i = 0; formats[i]; i++)
            if (strcmp(f, formats[i]) == 0) {
                sb_printf(body, "\"\\\"\" %s \"\\\"\"", bodies[i]);
                return 0;
            }
        return memra_fail(c->err, "schema %s: format '%s' is not supported (date-time, date, "
                          "time, uuid and email are)", path, f);
    }
    if (min == 0 && max < 0)
        sb_puts(body, "string");
    else if (max < 0)
        sb_printf(body, "\"\\\"\" char{%d,} \"\\\"\"", min);
    else
        sb_printf(body, "\"\\\"\" char{%d,%d} \"\\\"\"", min, max);
    return 0;
}

static int has_bounds(const json_t *s)
{
    for (int i = 0; BOUNDS[i]; i++)
        if (json_object_get(s, BOUNDS[i]))
            return 1;
    return 0;
}

/* Integer bounds become a digit grammar; bounds past 16 digits are the
 * integer rule's own. */
static int gen_integer(jsch_ctx *c, const json_t *s, const char *path, strbuf *body)
{
    if (!has_bounds(s)) {
        sb_puts(body, "integer");
        return 0;
    }
    int has_lo = 0, has_hi = 0;
    double lo = 0, hi = 0;
    for (int i = 0; BOUNDS[i]; i++) {
        const json_t *v = json_object_get(s, BOUNDS[i]);
        if (!v)
            continue;
        if (!json_is_number(v))
            return memra_fail(c->err, "schema %s: '%s' must be a number", path, BOUNDS[i]);
        double d = json_number_value(v);
        if (d > 9999999999999999.0 || d < -9999999999999999.0)
            return memra_fail(c->err, "schema %s: '%s' %g is past the 16-digit integers", path,
                              BOUNDS[i], d);
        double f = (double)(int64_t)d; /* truncation toward zero */
        if (i == 0 || i == 2) { /* a lower bound: the least integer allowed */
            double b = i == 0 ? (f < d ? f + 1 : f) : (f <= d ? f + 1 : f);
            if (!has_lo || b > lo)
                lo = b;
            has_lo = 1;
        } else { /* an upper bound: the greatest integer allowed */
            double b = i == 1 ? (f > d ? f - 1 : f) : (f >= d ? f - 1 : f);
            if (!has_hi || b < hi)
                hi = b;
            has_hi = 1;
        }
    }
    if (has_lo && has_hi && lo > hi)
        return memra_fail(c->err, "schema %s: no integer lies within the bounds", path);
    jsch_int_range(has_lo, (int64_t)lo, has_hi, (int64_t)hi, body);
    return 0;
}

/* Of the bounds on a number, only a lower bound of 0 (inclusive) can be
 * written as a grammar without digit-by-digit decimals: no minus sign. */
static int gen_number(jsch_ctx *c, const json_t *s, const char *path, strbuf *body)
{
    const json_t *min = json_object_get(s, "minimum");
    for (int i = 0; BOUNDS[i]; i++) {
        const json_t *v = json_object_get(s, BOUNDS[i]);
        if (v && !(i == 0 && json_is_number(v) && json_number_value(v) == 0))
            return memra_fail(c->err, "schema %s: keyword '%s' on a number is not supported "
                              "(only minimum 0; integers take any bounds)", path, BOUNDS[i]);
    }
    sb_puts(body, min ? "( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? "
                        "( [eE] [-+]? [0-9]{1,2} )?" : "number");
    return 0;
}

/* The body for one type name. */
static int gen_type(jsch_ctx *c, const json_t *s, const char *type, const char *path,
                    strbuf *body)
{
    if (strcmp(type, "object") == 0)
        return gen_object(c, s, path, body);
    if (strcmp(type, "array") == 0)
        return gen_array(c, s, path, body);
    if (strcmp(type, "string") == 0)
        return gen_string(c, s, path, body);
    if (strcmp(type, "integer") == 0)
        return gen_integer(c, s, path, body);
    if (strcmp(type, "number") == 0)
        return gen_number(c, s, path, body);
    if (strcmp(type, "boolean") == 0 || strcmp(type, "null") == 0) {
        sb_puts(body, type);
        return 0;
    }
    return memra_fail(c->err, "schema %s: unknown type '%s'", path, type);
}

/* "#/$defs/a~1b" resolved in the root document. */
static const json_t *resolve_ref(jsch_ctx *c, const char *ref, const char *path)
{
    if (ref[0] != '#') {
        memra_fail(c->err, "schema %s: $ref '%s': only local references (#/...) are supported",
                   path, ref);
        return NULL;
    }
    const json_t *at = c->root;
    const char *p = ref + 1;
    while (*p == '/') {
        p++;
        char tok[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof tok) {
            if (p[0] == '~' && p[1] == '1') {
                tok[n++] = '/';
                p += 2;
            } else if (p[0] == '~' && p[1] == '0') {
                tok[n++] = '~';
                p += 2;
            } else {
                tok[n++] = *p++;
            }
        }
        tok[n] = 0;
        at = json_is_object(at) ? json_object_get(at, tok) : NULL;
        if (!at) {
            memra_fail(c->err, "schema %s: $ref '%s' points at nothing", path, ref);
            return NULL;
        }
    }
    if (*p) {
        memra_fail(c->err, "schema %s: $ref '%s' is not a JSON pointer", path, ref);
        return NULL;
    }
    return at;
}

static int gen_ref(jsch_ctx *c, const char *ref, const char *path, char **name)
{
    for (int i = 0; i < c->n_refs; i++)
        if (strcmp(c->refs[i].ref, ref) == 0) {
            *name = xstrdup(c->refs[i].rule);
            return 0;
        }
    const json_t *target = resolve_ref(c, ref, path);
    if (!target)
        return -1;
    /* The name is known before the body is made, so a schema may refer to
     * itself (trees, linked lists). */
    if (c->n_refs == c->cap_refs) {
        c->cap_refs = c->cap_refs ? 2 * c->cap_refs : 8;
        c->refs = xrealloc(c->refs, (size_t)c->cap_refs * sizeof *c->refs);
    }
    char *rn = rule_name(c, ref);
    c->refs[c->n_refs].ref = xstrdup(ref);
    c->refs[c->n_refs].rule = rn;
    c->n_refs++;
    char *inner = NULL;
    if (gen(c, target, ref, &inner))
        return -1;
    sb_printf(&c->out, "%s ::= %s\n", rn, inner);
    free(inner);
    *name = xstrdup(rn);
    return 0;
}

static int gen_alternatives(jsch_ctx *c, const json_t *list, const char *kw, const char *path,
                            strbuf *body)
{
    if (!json_is_array(list) || json_array_size(list) == 0)
        return memra_fail(c->err, "schema %s: '%s' must be a non-empty array", path, kw);
    size_t i;
    const json_t *v;
    json_array_foreach(list, i, v) {
        char sub[1024], idx[32];
        snprintf(idx, sizeof idx, "%zu", i);
        path_join(sub, sizeof sub, path, kw, idx);
        char *n = NULL;
        if (gen(c, v, sub, &n))
            return -1;
        sb_printf(body, "%s%s", i ? " | " : "", n);
        free(n);
    }
    return 0;
}

static int type_is(const char *t, const json_t *v)
{
    if (strcmp(t, "object") == 0)
        return json_is_object(v);
    if (strcmp(t, "array") == 0)
        return json_is_array(v);
    if (strcmp(t, "string") == 0)
        return json_is_string(v);
    if (strcmp(t, "integer") == 0)
        return json_is_integer(v);
    if (strcmp(t, "number") == 0)
        return json_is_number(v);
    if (strcmp(t, "boolean") == 0)
        return json_is_boolean(v);
    if (strcmp(t, "null") == 0)
        return json_is_null(v);
    return 0;
}

/* Whether a value has one of the types (no "type": any value). */
static int type_admits(const json_t *type, const json_t *v)
{
    if (!type)
        return 1;
    if (json_is_string(type))
        return type_is(json_string_value(type), v);
    size_t i;
    const json_t *t;
    json_array_foreach(type, i, t) if (json_is_string(t) && type_is(json_string_value(t), v))
        return 1;
    return 0;
}

/* Compiles schema s into a rule; *name is its name (malloc'ed). */
static int gen(jsch_ctx *c, const json_t *s, const char *path, char **name)
{
    if (json_is_true(s)) {
        *name = xstrdup("value");
        return 0;
    }
    if (!json_is_object(s))
        return memra_fail(c->err, "schema %s: a schema must be an object or true", path);
    const char *key;
    const json_t *v;
    int constraining = 0;
    json_object_foreach((json_t *)s, key, v) {
        if (in_list(ANNOTATIONS, key))
            continue;
        if (!in_list(HANDLED, key))
            return memra_fail(c->err, "schema %s: keyword '%s' is not supported", path, key);
        constraining++;
    }
    const json_t *ref = json_object_get(s, "$ref");
    const json_t *any = json_object_get(s, "anyOf");
    const json_t *one = json_object_get(s, "oneOf");
    const json_t *all = json_object_get(s, "allOf");
    const json_t *en = json_object_get(s, "enum");
    const json_t *cn = json_object_get(s, "const");
    const json_t *type = json_object_get(s, "type");
    int combinators = !!ref + !!any + !!one + !!all + !!en + !!cn;
    /* "type" beside enum or const narrows the values; anything else beside
     * a combinator would need an intersection of grammars. */
    if ((en || cn) && type)
        constraining--;
    if (combinators > 1 || (combinators == 1 && constraining > 1)) {
        const char *which = ref ? "$ref" : any ? "anyOf" : one ? "oneOf" : all ? "allOf"
                          : en ? "enum" : "const";
        return memra_fail(c->err, "schema %s: '%s' beside other constraining keywords is not "
                          "supported", path, which);
    }
    if (ref) {
        if (!json_is_string(ref))
            return memra_fail(c->err, "schema %s: '$ref' must be a string", path);
        return gen_ref(c, json_string_value(ref), path, name);
    }
    strbuf body;
    sb_init(&body);
    int rc = 0;
    if (any || one) {
        /* oneOf is compiled as anyOf: a grammar cannot see that a value
         * matches two branches; the output matches at least one. */
        rc = gen_alternatives(c, any ? any : one, any ? "anyOf" : "oneOf", path, &body);
    } else if (all) {
        if (!json_is_array(all) || json_array_size(all) != 1)
            rc = memra_fail(c->err, "schema %s: 'allOf' with more than one schema is not "
                            "supported", path);
        else
            rc = gen_alternatives(c, all, "allOf", path, &body);
    } else if (en) {
        if (!json_is_array(en) || json_array_size(en) == 0) {
            rc = memra_fail(c->err, "schema %s: 'enum' must be a non-empty array", path);
        } else {
            size_t i, n = 0;
            json_array_foreach(en, i, v) {
                if (!type_admits(type, v))
                    continue;
                if (n++)
                    sb_puts(&body, " | ");
                put_json_literal(&body, v);
            }
            if (!n)
                rc = memra_fail(c->err, "schema %s: no 'enum' value has the schema's 'type'",
                                path);
        }
    } else if (cn) {
        if (!type_admits(type, cn))
            rc = memra_fail(c->err, "schema %s: the 'const' value does not have the schema's "
                            "'type'", path);
        put_json_literal(&body, cn);
    } else {
        if (!type) {
            if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties") ||
                json_object_get(s, "required"))
                rc = gen_type(c, s, "object", path, &body);
            else if (json_object_get(s, "items") || json_object_get(s, "minItems") ||
                     json_object_get(s, "maxItems"))
                rc = gen_type(c, s, "array", path, &body);
            else if (json_object_get(s, "format") || json_object_get(s, "pattern") ||
                     json_object_get(s, "minLength") ||
                     json_object_get(s, "maxLength"))
                rc = gen_type(c, s, "string", path, &body);
            else if (has_bounds(s))
                rc = memra_fail(c->err, "schema %s: numeric bounds without 'type' (integer or "
                                "number) are not supported", path);
            else
                sb_puts(&body, "value");
        } else if (json_is_string(type)) {
            rc = gen_type(c, s, json_string_value(type), path, &body);
        } else if (json_is_array(type) && json_array_size(type) > 0) {
            size_t i;
            json_array_foreach(type, i, v) {
                if (!json_is_string(v)) {
                    rc = memra_fail(c->err, "schema %s/type/%zu: must be a string", path, i);
                    break;
                }
                if (i)
                    sb_puts(&body, " | ");
                sb_puts(&body, "( ");
                if ((rc = gen_type(c, s, json_string_value(v), path, &body)))
                    break;
                sb_puts(&body, " )");
            }
        } else {
            rc = memra_fail(c->err, "schema %s: 'type' must be a string or an array of them",
                            path);
        }
    }
    if (rc) {
        sb_free(&body);
        return -1;
    }
    *name = rule_name(c, path);
    sb_printf(&c->out, "%s ::= %s\n", *name, sb_str(&body));
    sb_free(&body);
    return 0;
}

char *jsch_to_gbnf(const json_t *schema, memra_err *err)
{
    jsch_ctx c = {.root = schema, .err = err};
    sb_init(&c.out);
    char *top = NULL;
    int rc = gen(&c, schema, "#", &top);
    for (int i = 0; i < c.n_refs; i++) {
        free(c.refs[i].ref);
        free(c.refs[i].rule);
    }
    free(c.refs);
    if (rc) {
        sb_free(&c.out);
        return NULL;
    }
    sb_printf(&c.out, "root ::= %s\n%s", top, PRIMITIVES);
    free(top);
    return sb_take(&c.out);
}

gram_grammar *jsch_compile(const json_t *schema, memra_err *err)
{
    char *text = jsch_to_gbnf(schema, err);
    if (!text)
        return NULL;
    gram_grammar *g = gram_parse_gbnf(text, strlen(text), err);
    if (!g)
        memra_wrap(err, "json schema grammar (internal)");
    free(text);
    return g;
}

gram_grammar *jsch_compile_text(const char *text, size_t len, memra_err *err)
{
    json_t *j = json_parse_buf(text, len, "json schema", err);
    if (!j)
        return NULL;
    gram_grammar *g = jsch_compile(j, err);
    json_decref(j);
    return g;
}

char *jsch_json_object_gbnf(void)
{
    strbuf sb;
    sb_init(&sb);
    sb_printf(&sb, "root ::= object\n%s", PRIMITIVES);
    return sb_take(&sb);
}

gram_grammar *jsch_json_object(memra_err *err)
{
    char *text = jsch_json_object_gbnf();
    gram_grammar *g = gram_parse_gbnf(text, strlen(text), err);
    free(text);
    return g;
}
