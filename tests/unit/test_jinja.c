/* The Jinja interpreter: every case of tests/fixtures/chat/jinja_cases.json
 * (language features, whitespace control, Python printing, filters, tests,
 * Markup, errors) against the output Python's jinja2 gave with Hugging Face's
 * settings (scripts/render_reference.py); error messages carry the
 * template line; bad inputs and runaway templates fail cleanly; and a
 * fuzz-style pass over truncated and mutated real templates must never
 * crash (run under ASan + UBSan in the san build). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/check.h"
#include "core/json.h"
#include "core/mapfile.h"
#include "core/strbuf.h"
#include "jinja/jinja.h"
#include "test.h"

#define CASES "tests/fixtures/chat/jinja_cases.json"
#define FIXED_DATE "2025-06-15T09:30:00" /* as in scripts/render_reference.py */

/* Render src with a JSON context given as text; returns rc, fills out/err. */
static int render(const char *src, const char *ctx_json, char **out, memra_err *err)
{
    json_t *ctx = NULL;
    if (ctx_json) {
        json_error_t je;
        ctx = json_loads(ctx_json, JSON_ALLOW_NUL, &je);
        if (!ctx) {
            fprintf(stderr, "  bad test context %s: %s\n", ctx_json, je.text);
            abort();
        }
    }
    int rc = jinja_render(src, ctx, out, err);
    json_decref(ctx);
    return rc;
}

/* Output of src, or "ERR:" + message, as a heap string. */
static char *result(const char *src, const char *ctx_json)
{
    char *out = NULL;
    memra_err err = {{0}};
    if (render(src, ctx_json, &out, &err)) {
        size_t n = strlen(err.msg) + 5;
        char *r = xmalloc(n);
        snprintf(r, n, "ERR:%s", err.msg);
        return r;
    }
    return out;
}

static void first_difference(const char *name, const char *want, const char *got)
{
    size_t i = 0;
    while (want[i] && want[i] == got[i])
        i++;
    size_t from = i > 20 ? i - 20 : 0;
    fprintf(stderr, "  %s: first difference at byte %zu\n    want: ...%.60s\n    got:  ...%.60s\n", name,
            i, want + from, got + from);
}

static void test_cases_match_jinja2(void)
{
    setenv("MEMRA_FIXED_DATE", FIXED_DATE, 1);
    memra_err err;
    json_t *cases = json_load_path(CASES, 64u << 20, &err);
    CHECK_MSG(cases != NULL, "%s", err.msg);
    if (!cases)
        return;
    CHECK(json_array_size(cases) >= 500);
    size_t i, failures = 0;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        const char *name = json_string_value(json_object_get(c, "name"));
        const char *src = json_string_value(json_object_get(c, "template"));
        json_t *ctx = json_object_get(c, "context");
        json_t *expect = json_object_get(c, "expect");
        CHECK(name && src && expect);
        if (!name || !src || !expect)
            continue;
        char *out = NULL;
        memra_err e = {{0}};
        int rc = jinja_render(src, ctx, &out, &e);
        json_t *want_out = json_object_get(expect, "output");
        json_t *want_raise = json_object_get(expect, "raise");
        int ok;
        if (want_out) {
            ok = rc == 0 && out && strcmp(out, json_string_value(want_out)) == 0;
            if (!ok && failures < 10) {
                if (rc)
                    fprintf(stderr, "  %s: failed: %s\n", name, e.msg);
                else
                    first_difference(name, json_string_value(want_out), out);
            }
        } else {
            /* jinja2 raised: so must we, with a message (raise_exception's own text) */
            ok = rc == -1 && e.msg[0] != 0 &&
                 (!want_raise || strstr(e.msg, json_string_value(want_raise)) != NULL);
            if (!ok && failures < 10)
                fprintf(stderr, "  %s: expected an error%s%s, got %s\n", name, want_raise ? " containing " : "",
                        want_raise ? json_string_value(want_raise) : "", rc ? e.msg : "success");
        }
        if (!ok)
            failures++;
        free(out);
    }
    CHECK_MSG(failures == 0, "%zu of %zu cases differ from jinja2", failures, json_array_size(cases));
    json_decref(cases);
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void test_error_messages_name_the_line(void)
{
    static const struct {
        const char *src, *prefix, *contains;
    } cases[] = {
        {"a\nb\n{{ x.y }}", "template line 3: ", "'x' is undefined"},
        {"{% if true %}\n\n{% for x in [] %}\n", "template line 3: ", "unexpected end of template"},
        {"line1\n{{ 1 +* 2 }}", "template line 2: ", "unexpected"},
        {"\n\n\n{{ raise_exception('No user query found.') }}", "template line 4: ", "No user query found."},
        {"{#\n\n#}{{ 1|nosuchfilter }}", "template line 3: ", "no filter named 'nosuchfilter'"},
        {"{{ 'a' +\n 1 }}", "template line 1: ", "can only concatenate str"},
        {"{% frob %}", "template line 1: ", "unknown tag 'frob'"},
        {"{% endif %}", "template line 1: ", "unexpected 'endif'"},
        {"x\n{% for a, b in [1] %}{% endfor %}", "template line 2: ", "not iterable"},
        {"{{ 'unterminated }}", "template line 1: ", "unexpected char"},
        {"{# never closed", "template line 1: ", "missing end of comment"},
        {"{% raw %} never closed", "template line 1: ", "missing end of raw"},
        {"{{ [1, 2) }}", "template line 1: ", "unexpected ')'"},
        {"{{ '\\xZZ' }}", "template line 1: ", "truncated \\x escape"},
        {"{% set ns = namespace() %}{% set d = {} %}{% set d.x = 1 %}", "template line 1: ", "non-namespace"},
        {"{{ [1, 2].append(3) }}", "template line 1: ", "unsafe"},
        {"{{ raise_exception('two\nlines\tand a tab') }}", "template line 1: ", "two lines and a tab"},
        {"{{ 1 // 0 }}", "template line 1: ", "division by zero"},
        {"{{ {'a': 1}|tojson(indent=[1]) }}", "template line 1: ", "indent"},
        {"{{ undefined_thing|tojson }}", "template line 1: ", "not JSON serializable"},
        {"{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "template line 1: ", "takes not more than 1"},
    };
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(cases); i++) {
        char *r = result(cases[i].src, NULL);
        int ok = starts_with(r, "ERR:") && starts_with(r + 4, cases[i].prefix) && strstr(r, cases[i].contains) &&
                 !strchr(r, '\n');
        CHECK_MSG(ok, "%s -> %s (want %s...%s)", cases[i].src, r, cases[i].prefix, cases[i].contains);
        free(r);
    }
}

static void test_bad_inputs_fail_cleanly(void)
{
    char *out = (char *)1;
    memra_err err = {{0}};
    CHECK(jinja_render(NULL, NULL, &out, &err) == -1 && out == NULL && err.msg[0]);
    CHECK(jinja_render("\xff\xfe{{ x }}", NULL, &out, &err) == -1 && strstr(err.msg, "UTF-8"));
    json_t *arr = json_array();
    CHECK(jinja_render("x", arr, &out, &err) == -1 && strstr(err.msg, "not a JSON object"));
    json_decref(arr);
    static const char nul_src[] = "a\0b";
    CHECK(jinja_parse(nul_src, sizeof nul_src - 1, &err) == NULL && strstr(err.msg, "NUL"));
    /* a NUL character in the output is refused, never truncated */
    char *r = result("{{ s }}", "{\"s\": \"a\\u0000b\"}");
    CHECK_MSG(starts_with(r, "ERR:") && strstr(r, "NUL"), "%s", r);
    free(r);
    /* the same variable twice: the later one wins */
    jinja_template *t = jinja_parse("{{ v }}", 7, &err);
    CHECK(t != NULL);
    json_t *a = json_string("first"), *b = json_string("second");
    jinja_var vars[] = {{"v", a}, {"v", b}, {NULL, a}, {"w", NULL}};
    CHECK(jinja_render_vars(t, vars, 4, &out, &err) == 0 && !strcmp(out, "second"));
    free(out);
    json_decref(a);
    json_decref(b);
    jinja_free(t);
    jinja_free(NULL);
}

static void test_runaway_templates_stop(void)
{
    static const struct {
        const char *src, *contains;
    } cases[] = {
        {"{{ range(100001)|length }}", "Range too big"},
        {"{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}{{ r(0) }}", "recursion"},
        {"{{ 'x' * 1000000000000 }}", "more than"},
        {"{{ [1] * 1000000000000 }}", "more than"},
        {"{{ 9223372036854775807 + 1 }}", "overflow"},
        {"{{ 2 ** 64 }}", "overflow"},
        {"{{ 99999999999999999999 }}", "too large"},
        {"{{ (-9223372036854775807 - 1) // -1 }}", "overflow"},
    };
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(cases); i++) {
        char *r = result(cases[i].src, NULL);
        CHECK_MSG(starts_with(r, "ERR:template line 1: ") && strstr(r, cases[i].contains), "%s -> %s",
                  cases[i].src, r);
        free(r);
    }
    /* brackets nested past the parser's limit */
    strbuf sb;
    sb_init(&sb);
    sb_puts(&sb, "{{ ");
    for (int i = 0; i < 5000; i++)
        sb_putc(&sb, '(');
    sb_putc(&sb, '1');
    for (int i = 0; i < 5000; i++)
        sb_putc(&sb, ')');
    sb_puts(&sb, " }}");
    char *r = result(sb_str(&sb), NULL);
    CHECK_MSG(starts_with(r, "ERR:") && strstr(r, "nested too deeply"), "%.80s", r);
    free(r);
    sb_clear(&sb);
    for (int i = 0; i < 5000; i++)
        sb_puts(&sb, "{% if true %}");
    r = result(sb_str(&sb), NULL);
    CHECK_MSG(starts_with(r, "ERR:") && strstr(r, "nested too deeply"), "%.80s", r);
    free(r);
    sb_clear(&sb);
    sb_puts(&sb, "{{ ");
    for (int i = 0; i < 5000; i++)
        sb_puts(&sb, "not ");
    sb_puts(&sb, "1 }}");
    r = result(sb_str(&sb), NULL);
    CHECK_MSG(starts_with(r, "ERR:") && strstr(r, "nested too deeply"), "%.80s", r);
    free(r);
    sb_free(&sb);
}

static void test_strftime_now(void)
{
    setenv("MEMRA_FIXED_DATE", "2024-02-29", 1);
    char *r = result("{{ strftime_now('%Y-%m-%d %a %d %b %Y %H:%M') }}", NULL);
    CHECK_MSG(!strcmp(r, "2024-02-29 Thu 29 Feb 2024 00:00"), "%s", r);
    free(r);
    setenv("MEMRA_FIXED_DATE", "2025-12-31T23:59:58", 1);
    r = result("{{ strftime_now('%j %H:%M:%S') }}", NULL);
    CHECK_MSG(!strcmp(r, "365 23:59:58"), "%s", r);
    free(r);
    setenv("MEMRA_FIXED_DATE", "31/12/2025", 1);
    r = result("{{ strftime_now('%Y') }}", NULL);
    CHECK_MSG(starts_with(r, "ERR:template line 1: ") && strstr(r, "MEMRA_FIXED_DATE"), "%s", r);
    free(r);
    unsetenv("MEMRA_FIXED_DATE");
    r = result("{{ strftime_now('%Y') }}", NULL);
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char year[16];
    snprintf(year, sizeof year, "%d", tm.tm_year + 1900);
    CHECK_MSG(!strcmp(r, year), "%s vs %s", r, year);
    free(r);
    setenv("MEMRA_FIXED_DATE", FIXED_DATE, 1);
}

static void test_parsed_template_renders_many_times(void)
{
    memra_err err;
    const char *src = "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}";
    jinja_template *t = jinja_parse(src, strlen(src), &err);
    CHECK(t != NULL);
    if (!t)
        return;
    for (int k = 0; k < 3; k++) {
        json_t *msgs = json_array();
        for (int i = 0; i <= k; i++)
            json_array_append_new(msgs, json_object());
        jinja_var v = {"messages", msgs};
        char *out;
        CHECK(jinja_render_vars(t, &v, 1, &out, &err) == 0);
        char want[16];
        snprintf(want, sizeof want, "%d", k + 1);
        CHECK_MSG(!strcmp(out, want), "render %d gave %s", k, out);
        free(out);
        json_decref(msgs);
    }
    jinja_free(t);
}

/* ---- fuzz-style robustness ---- */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t next_rand(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static const char *const CONTEXT =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"hi\"},"
    " {\"role\": \"assistant\", \"content\": \"<think>r</think>a\", \"tool_calls\": [{\"id\": \"call12345\","
    " \"type\": \"function\", \"function\": {\"name\": \"f\", \"arguments\": {\"x\": [1, 2.5, null]}}}]},"
    " {\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"ok\"}, {\"role\": \"user\","
    " \"content\": [{\"type\": \"text\", \"text\": \"part\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"description\": \"d\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": {\"type\": \"array\", \"items\":"
    " {\"type\": \"number\"}}}}}}], \"add_generation_prompt\": true, \"bos_token\": \"<s>\","
    " \"eos_token\": \"</s>\", \"enable_thinking\": false}";

/* Either a render or an error with a one-line message: nothing else. */
static int renders_or_fails_cleanly(const char *src, size_t len, const json_t *ctx)
{
    memra_err err = {{0}};
    jinja_template *t = jinja_parse(src, len, &err);
    if (!t)
        return err.msg[0] != 0 && !strchr(err.msg, '\n');
    const char *key;
    json_t *val;
    jinja_var vars[16];
    size_t n = 0;
    json_object_foreach((json_t *)ctx, key, val)
    {
        vars[n].name = key;
        vars[n].value = val;
        n++;
    }
    char *out = NULL;
    int rc = jinja_render_vars(t, vars, n, &out, &err);
    int ok = rc == 0 ? out != NULL : (out == NULL && err.msg[0] != 0 && !strchr(err.msg, '\n'));
    free(out);
    jinja_free(t);
    return ok;
}

static const char *const PIECES[] = {
    "{{", "}}", "{%", "%}", "{#", "#}", "{%-", "-%}", "{{-", "-}}", "+%}", "{%+", "(", ")", "[", "]",
    "{", "}", "'", "\"", "\\", "|", ".", ",", ":", "=", "==", "~", "+", "-", "*", "**", "/", "//",
    "%", " if ", " else ", " for ", " in ", " endfor ", " endif ", " set ", " macro ", " endmacro ",
    " call ", " endcall ", " filter ", " endfilter ", " raw ", " endraw ", " is ", " not ", " and ",
    " or ", "loop", "messages", "ns", "namespace(", "tojson", "trim", "items", "caller()", "\n", " ",
    "x", "1", "1.5", "é", "日", "\t", "none", "true", "[0]", "[1:]", "[::-1]", "|join", "|length",
};

static void test_fuzz_truncated_and_mutated_templates(void)
{
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/templates", test_data_dir());
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d)
        return;
    json_error_t je;
    json_t *ctx = json_loads(CONTEXT, 0, &je);
    CHECK(ctx != NULL);
    struct dirent *de;
    size_t runs = 0, bad = 0, templates = 0;
    while ((de = readdir(d))) {
        size_t nl = strlen(de->d_name);
        if (nl < 7 || strcmp(de->d_name + nl - 6, ".jinja"))
            continue;
        templates++;
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        char *src;
        size_t len;
        memra_err err;
        if (read_small_file(path, 1 << 20, &src, &len, &err)) {
            CHECK_MSG(0, "%s", err.msg);
            continue;
        }
        CHECK_MSG(renders_or_fails_cleanly(src, len, ctx), "%s as is", de->d_name);
        /* every prefix at a stride, so cuts land inside tags, strings and names */
        size_t stride = len / 150 + 1;
        for (size_t cut = 0; cut < len; cut += stride, runs++)
            if (!renders_or_fails_cleanly(src, cut, ctx) && bad++ < 5)
                fprintf(stderr, "  %s cut at %zu\n", de->d_name, cut);
        /* random edits: delete a span, or insert a Jinja-significant piece */
        char *buf = xmalloc(len + 64);
        for (int k = 0; k < 120; k++, runs++) {
            memcpy(buf, src, len);
            size_t n = len, pos = next_rand() % (len + 1);
            if (next_rand() & 1) {
                size_t del = next_rand() % 8;
                if (pos + del > n)
                    del = n - pos;
                memmove(buf + pos, buf + pos + del, n - pos - del);
                n -= del;
            } else {
                const char *p = PIECES[next_rand() % MEMRA_ARRAY_LEN(PIECES)];
                size_t pl = strlen(p);
                memmove(buf + pos + pl, buf + pos, n - pos);
                memcpy(buf + pos, p, pl);
                n += pl;
            }
            if (!renders_or_fails_cleanly(buf, n, ctx) && bad++ < 5)
                fprintf(stderr, "  %s edit %d\n", de->d_name, k);
        }
        free(buf);
        free(src);
    }
    closedir(d);
    /* token soup */
    strbuf sb;
    sb_init(&sb);
    for (int k = 0; k < 3000; k++, runs++) {
        sb_clear(&sb);
        int pieces = 1 + (int)(next_rand() % 40);
        for (int i = 0; i < pieces; i++)
            sb_puts(&sb, PIECES[next_rand() % MEMRA_ARRAY_LEN(PIECES)]);
        if (!renders_or_fails_cleanly(sb_str(&sb), sb.len, ctx) && bad++ < 5)
            fprintf(stderr, "  soup: %s\n", sb_str(&sb));
    }
    sb_free(&sb);
    json_decref(ctx);
    CHECK_MSG(templates >= 20, "found %zu templates in %s", templates, dir);
    CHECK_MSG(bad == 0, "%zu of %zu fuzz renders neither rendered nor failed cleanly", bad, runs);
}

TEST_MAIN(TEST_CASE(test_cases_match_jinja2), TEST_CASE(test_error_messages_name_the_line),
          TEST_CASE(test_bad_inputs_fail_cleanly), TEST_CASE(test_runaway_templates_stop),
          TEST_CASE(test_strftime_now), TEST_CASE(test_parsed_template_renders_many_times),
          TEST_CASE(test_fuzz_truncated_and_mutated_templates))
