/* The inside of one tool call, per format, to (name, arguments JSON).
 *
 * The parser (tool_parse.c) finds where a call starts and ends; this file
 * reads what is between. Arguments always come out as one compact JSON
 * object text, whatever the family wrote (JSON, XML parameters, GLM
 * key/value pairs, Gemma's own value syntax), because the OpenAI surface
 * promises clients a JSON string they can parse. A body that does not read
 * as a call is -1: the parser then returns its text as content. */
#include "serve/tool_parse.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

static int is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static void trim(const char **s, size_t *n)
{
    while (*n && is_ws(**s)) {
        (*s)++;
        (*n)--;
    }
    while (*n && is_ws((*s)[*n - 1]))
        (*n)--;
}

static const char *find(const char *s, size_t n, const char *needle)
{
    return memmem(s, n, needle, strlen(needle));
}

long tcp_json_extent(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && is_ws(s[i]))
        i++;
    if (i == n)
        return 0;
    if (s[i] != '{' && s[i] != '[')
        return -1;
    int depth = 0, in_str = 0, esc = 0;
    for (; i < n; i++) {
        char c = s[i];
        if (in_str) {
            if (esc)
                esc = 0;
            else if (c == '\\')
                esc = 1;
            else if (c == '"')
                in_str = 0;
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            depth++;
        } else if (c == '}' || c == ']') {
            if (--depth == 0)
                return (long)(i + 1);
        }
    }
    return 0;
}

static char *dump(json_t *v)
{
    return json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
}

char *tcp_value_json(const char *v, size_t n)
{
    json_error_t err;
    json_t *j = json_loadb(v, n, JSON_DECODE_ANY, &err);
    if (!j)
        j = json_stringn(v, n);
    char *s = j ? dump(j) : NULL;
    json_decref(j);
    return s ? s : strdup("\"\"");
}

/* A name a client can dispatch on: non-empty, no whitespace or markup. */
static char *take_name(const char *s, size_t n)
{
    trim(&s, &n);
    if (!n)
        return NULL;
    for (size_t i = 0; i < n; i++)
        if (is_ws(s[i]) || s[i] == '<' || s[i] == '>' || s[i] == '"' || s[i] == '{')
            return NULL;
    return strndup(s, n);
}

/* Arguments as a model writes them in JSON: an object, or a string holding
 * one (some fine-tunes double-encode); absent means no arguments. */
static char *args_from_json(json_t *a)
{
    if (!a)
        return strdup("{}");
    if (json_is_object(a))
        return dump(a);
    if (json_is_string(a)) {
        json_error_t err;
        json_t *o = json_loadb(json_string_value(a), json_string_length(a), 0, &err);
        char *s = json_is_object(o) ? dump(o) : NULL;
        json_decref(o);
        return s;
    }
    return NULL;
}

/* {"name": N, "arguments"|"parameters": {...}} (Hermes, Llama 3, Mistral). */
int tcp_call_from_object(json_t *o, char **name, char **args)
{
    json_t *jn = json_object_get(o, "name");
    if (!json_is_object(o) || !json_is_string(jn))
        return -1;
    json_t *ja = json_object_get(o, "arguments");
    if (!ja)
        ja = json_object_get(o, "parameters");
    char *a = args_from_json(ja);
    char *nm = take_name(json_string_value(jn), json_string_length(jn));
    if (!a || !nm) {
        free(a);
        free(nm);
        return -1;
    }
    *name = nm;
    *args = a;
    return 0;
}

static int body_json_call(const char *s, size_t n, char **name, char **args)
{
    json_error_t err;
    json_t *o = json_loadb(s, n, 0, &err);
    int rc = o ? tcp_call_from_object(o, name, args) : -1;
    json_decref(o);
    return rc;
}

/* An arguments text that must be a JSON object (DeepSeek, Kimi). */
static char *args_object(const char *s, size_t n)
{
    trim(&s, &n);
    json_error_t err;
    json_t *o = json_loadb(s, n, 0, &err);
    char *a = json_is_object(o) ? dump(o) : NULL;
    json_decref(o);
    return a;
}

int tcp_call_from_parts(const char *nm, size_t nn, const char *a, size_t an, char **name,
                        char **args)
{
    char *n = take_name(nm, nn);
    char *j = n ? args_object(a, an) : NULL;
    if (!n || !j) {
        free(n);
        free(j);
        return -1;
    }
    *name = n;
    *args = j;
    return 0;
}

/* Adds key = the bare value text, read by the tcp_value_json rule. */
static int set_bare(json_t *obj, const char *k, size_t kn, const char *v, size_t vn)
{
    char *key = take_name(k, kn);
    if (!key)
        return -1;
    char *vj = tcp_value_json(v, vn);
    json_error_t err;
    json_t *jv = json_loads(vj, JSON_DECODE_ANY, &err);
    free(vj);
    json_object_set_new(obj, key, jv ? jv : json_null());
    free(key);
    return 0;
}

static int finish_obj(json_t *obj, char *nm, char **name, char **args)
{
    if (!nm) {
        json_decref(obj);
        return -1;
    }
    *name = nm;
    *args = dump(obj);
    json_decref(obj);
    return 0;
}

/* <function=N>\n<parameter=K>\nV\n</parameter>\n</function>: the template
 * writes one newline either side of a value, which are not the value's. */
static int body_qwen3_coder(const char *s, size_t n, char **name, char **args)
{
    const char *e = s + n, *f = find(s, n, "<function=");
    if (!f)
        return -1;
    f += strlen("<function=");
    const char *gt = memchr(f, '>', (size_t)(e - f));
    if (!gt)
        return -1;
    char *nm = take_name(f, (size_t)(gt - f));
    json_t *obj = json_object();
    const char *q = gt + 1;
    for (;;) {
        const char *pp = find(q, (size_t)(e - q), "<parameter=");
        if (!pp)
            break;
        const char *k = pp + strlen("<parameter=");
        const char *kg = memchr(k, '>', (size_t)(e - k));
        const char *ve = kg ? find(kg, (size_t)(e - kg), "</parameter>") : NULL;
        if (!ve) {
            free(nm);
            nm = NULL;
            break;
        }
        const char *v = kg + 1;
        if (v < ve && *v == '\n')
            v++;
        const char *vend = ve;
        if (vend > v && vend[-1] == '\n')
            vend--;
        if (set_bare(obj, k, (size_t)(kg - k), v, (size_t)(vend - v)) < 0) {
            free(nm);
            nm = NULL;
            break;
        }
        q = ve + strlen("</parameter>");
    }
    return finish_obj(obj, nm, name, args);
}

/* N\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>... (GLM-4.5/4.6): the
 * template writes strings bare and everything else as JSON. */
static int body_glm(const char *s, size_t n, char **name, char **args)
{
    const char *e = s + n, *k0 = find(s, n, "<arg_key>");
    char *nm = take_name(s, (size_t)((k0 ? k0 : e) - s));
    json_t *obj = json_object();
    for (const char *q = k0; nm && q;) {
        const char *k = q + strlen("<arg_key>");
        const char *ke = find(k, (size_t)(e - k), "</arg_key>");
        const char *v = ke ? find(ke, (size_t)(e - ke), "<arg_value>") : NULL;
        const char *ve = v ? find(v, (size_t)(e - v), "</arg_value>") : NULL;
        if (!ve || set_bare(obj, k, (size_t)(ke - k), v + strlen("<arg_value>"),
                            (size_t)(ve - v - strlen("<arg_value>"))) < 0) {
            free(nm);
            nm = NULL;
            break;
        }
        const char *after = ve + strlen("</arg_value>");
        q = find(after, (size_t)(e - after), "<arg_key>");
    }
    return finish_obj(obj, nm, name, args);
}

#define DS_SEP "<\xef\xbd\x9ctool\xe2\x96\x81sep\xef\xbd\x9c>" /* <｜tool▁sep｜> */

/* V3.1: NAME<｜tool▁sep｜>{json}. R1 and V3: function<｜tool▁sep｜>NAME\n```json\n{json}\n``` */
static int body_deepseek(const char *s, size_t n, char **name, char **args)
{
    const char *e = s + n, *sep = find(s, n, DS_SEP);
    if (!sep)
        return -1;
    const char *x = s, *y = sep + strlen(DS_SEP);
    size_t xn = (size_t)(sep - s), yn = (size_t)(e - y);
    trim(&x, &xn);
    const char *fence = find(y, yn, "```json");
    if (xn == 8 && !memcmp(x, "function", 8) && fence) {
        const char *body = fence + strlen("```json");
        const char *close = find(body, (size_t)(e - body), "```");
        char *nm = take_name(y, (size_t)(fence - y));
        char *a = args_object(body, (size_t)((close ? close : e) - body));
        if (!nm || !a) {
            free(nm);
            free(a);
            return -1;
        }
        *name = nm;
        *args = a;
        return 0;
    }
    char *nm = take_name(x, xn);
    char *a = args_object(y, yn);
    if (!nm || !a) {
        free(nm);
        free(a);
        return -1;
    }
    *name = nm;
    *args = a;
    return 0;
}

/* functions.NAME:IDX<|tool_call_argument_begin|>{json} (Kimi K2). */
static int body_kimi(const char *s, size_t n, char **name, char **args)
{
    const char *e = s + n, *ab = find(s, n, "<|tool_call_argument_begin|>");
    if (!ab)
        return -1;
    const char *x = s;
    size_t xn = (size_t)(ab - s);
    trim(&x, &xn);
    if (xn > 10 && !memcmp(x, "functions.", 10)) {
        x += 10;
        xn -= 10;
    }
    const char *colon = memchr(x, ':', xn);
    if (colon)
        xn = (size_t)(colon - x);
    const char *y = ab + strlen("<|tool_call_argument_begin|>");
    char *nm = take_name(x, xn);
    char *a = args_object(y, (size_t)(e - y));
    if (!nm || !a) {
        free(nm);
        free(a);
        return -1;
    }
    *name = nm;
    *args = a;
    return 0;
}

/* Gemma 4's value syntax: strings between <|"|> quotes, bare keys, bare
 * numbers and booleans, {k:v,...} and [v,...]. */
#define GQ "<|\"|>"
typedef struct {
    const char *s, *e;
} gcur;

static json_t *gemma_value(gcur *c, int depth);

static void gskip(gcur *c)
{
    while (c->s < c->e && is_ws(*c->s))
        c->s++;
}

static int gstarts(gcur *c, const char *t)
{
    size_t n = strlen(t);
    return (size_t)(c->e - c->s) >= n && !memcmp(c->s, t, n);
}

static json_t *gemma_string(gcur *c)
{
    c->s += strlen(GQ);
    const char *end = find(c->s, (size_t)(c->e - c->s), GQ);
    if (!end)
        return NULL;
    json_t *v = json_stringn(c->s, (size_t)(end - c->s));
    c->s = end + strlen(GQ);
    return v;
}

static json_t *gemma_value(gcur *c, int depth)
{
    gskip(c);
    if (c->s >= c->e || depth > 64)
        return NULL;
    if (gstarts(c, GQ))
        return gemma_string(c);
    if (*c->s == '{' || *c->s == '[') {
        int is_obj = *c->s == '{';
        char close = is_obj ? '}' : ']';
        json_t *v = is_obj ? json_object() : json_array();
        c->s++;
        gskip(c);
        if (c->s < c->e && *c->s == close) {
            c->s++;
            return v;
        }
        for (;;) {
            json_t *item;
            if (is_obj) {
                gskip(c);
                char *key = NULL;
                if (gstarts(c, GQ)) {
                    json_t *k = gemma_string(c);
                    key = k ? strdup(json_string_value(k)) : NULL;
                    json_decref(k);
                } else {
                    const char *colon = memchr(c->s, ':', (size_t)(c->e - c->s));
                    key = colon ? take_name(c->s, (size_t)(colon - c->s)) : NULL;
                    if (colon)
                        c->s = colon;
                }
                gskip(c);
                if (!key || c->s >= c->e || *c->s != ':') {
                    free(key);
                    json_decref(v);
                    return NULL;
                }
                c->s++;
                item = gemma_value(c, depth + 1);
                if (item)
                    json_object_set_new(v, key, item);
                free(key);
            } else {
                item = gemma_value(c, depth + 1);
                if (item)
                    json_array_append_new(v, item);
            }
            gskip(c);
            if (!item || c->s >= c->e) {
                json_decref(v);
                return NULL;
            }
            if (*c->s == close) {
                c->s++;
                return v;
            }
            if (*c->s != ',') {
                json_decref(v);
                return NULL;
            }
            c->s++;
        }
    }
    const char *t = c->s;
    while (c->s < c->e && *c->s != ',' && *c->s != '}' && *c->s != ']')
        c->s++;
    size_t tn = (size_t)(c->s - t);
    trim(&t, &tn);
    json_error_t err;
    json_t *v = json_loadb(t, tn, JSON_DECODE_ANY, &err);
    if (!v || json_is_object(v) || json_is_array(v) || json_is_string(v)) {
        json_decref(v);
        v = json_stringn(t, tn);
    }
    return v;
}

/* call:NAME{k:v,...} (Gemma 4). */
static int body_gemma4(const char *s, size_t n, char **name, char **args)
{
    trim(&s, &n);
    if (n < 5 || memcmp(s, "call:", 5))
        return -1;
    const char *e = s + n, *brace = memchr(s, '{', n);
    if (!brace)
        return -1;
    char *nm = take_name(s + 5, (size_t)(brace - s - 5));
    gcur c = {brace, e};
    json_t *obj = gemma_value(&c, 0);
    gskip(&c);
    if (!obj || c.s != c.e) {
        json_decref(obj);
        free(nm);
        return -1;
    }
    return finish_obj(obj, nm, name, args);
}

int tcp_parse_body(toolparse_format f, const char *body, size_t n, char **name, char **args)
{
    switch (f) {
    case TOOLPARSE_HERMES:
        /* Qwen3.5-era fine-tunes sometimes answer a Hermes template in the
         * XML form inside the same <tool_call> tags; both read unambiguously. */
        if (find(body, n, "<function="))
            return body_qwen3_coder(body, n, name, args);
        return body_json_call(body, n, name, args);
    case TOOLPARSE_LLAMA3:
    case TOOLPARSE_MISTRAL:
        return body_json_call(body, n, name, args);
    case TOOLPARSE_QWEN3_CODER:
        if (!find(body, n, "<function="))
            return body_json_call(body, n, name, args);
        return body_qwen3_coder(body, n, name, args);
    case TOOLPARSE_GLM45:
        return body_glm(body, n, name, args);
    case TOOLPARSE_DEEPSEEK:
        return body_deepseek(body, n, name, args);
    case TOOLPARSE_KIMI_K2:
        return body_kimi(body, n, name, args);
    case TOOLPARSE_GEMMA4:
        return body_gemma4(body, n, name, args);
    default:
        return -1;
    }
}
