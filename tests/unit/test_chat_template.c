/* Chat templates: every official template of the test data (scripts/fetch-test-data.sh) rendered
 * with every conversation of tests/fixtures/chat/conversations must equal,
 * byte for byte, what Python's jinja2 rendered with Hugging Face's settings
 * (tests/fixtures/chat/expected, made by scripts/render_reference.py); a
 * template that raised there must fail here, with raise_exception's text.
 * Then the variables chat_template_render passes, and its refusals. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/json.h"
#include "core/mapfile.h"
#include "jinja/chat_template.h"
#include "test.h"

#define FIX "tests/fixtures/chat/"
#define FIXED_DATE "2025-06-15T09:30:00" /* as in scripts/render_reference.py */

static char *read_text(const char *path)
{
    char *s;
    size_t n;
    memra_err err;
    if (read_small_file(path, 16u << 20, &s, &n, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        return NULL;
    }
    return s;
}

static const char *str_of(const json_t *o, const char *key)
{
    const char *s = json_string_value(json_object_get(o, key));
    return s ? s : "";
}

static int render_pair(const char *tmpl, const json_t *conv, const json_t *tokens, char **out,
                       memra_err *err)
{
    const json_t *bos = json_object_get(tokens, "bos_token"), *eos = json_object_get(tokens, "eos_token");
    return chat_template_render(tmpl, json_object_get(conv, "messages"), json_object_get(conv, "tools"),
                                json_object_get(conv, "documents"),
                                json_is_true(json_object_get(conv, "add_generation_prompt")),
                                json_object_get(conv, "extra"), bos ? json_string_value(bos) : NULL,
                                eos ? json_string_value(eos) : NULL, out, err);
}

static void report_difference(const char *label, const char *want, const char *got)
{
    size_t i = 0;
    while (want[i] && want[i] == got[i])
        i++;
    size_t from = i > 30 ? i - 30 : 0;
    fprintf(stderr, "  %s: first difference at byte %zu (want %zu bytes, got %zu)\n"
                    "    want: ...%.80s\n    got:  ...%.80s\n",
            label, i, strlen(want), strlen(got), want + from, got + from);
}

static void test_templates_render_like_hugging_face(void)
{
    setenv("MEMRA_FIXED_DATE", FIXED_DATE, 1);
    memra_err err;
    json_t *manifest = json_load_path(FIX "expected/manifest.json", 16u << 20, &err);
    json_t *tokens = json_load_path(FIX "special_tokens.json", 1u << 20, &err);
    CHECK_MSG(manifest && tokens, "%s", err.msg);
    if (!manifest || !tokens)
        return;
    CHECK(!strcmp(str_of(manifest, "fixed_date"), FIXED_DATE));
    json_t *cases = json_object_get(manifest, "cases");
    size_t i, failures = 0, renders = 0, raises = 0, errors = 0;
    json_t *c;
    json_array_foreach(cases, i, c)
    {
        const char *tname = str_of(c, "template"), *cname = str_of(c, "conversation");
        const char *kind = str_of(c, "kind");
        char path[4096], label[512];
        snprintf(label, sizeof label, "%s + %s", tname, cname);
        snprintf(path, sizeof path, "%s/templates/%s.jinja", test_data_dir(), tname);
        char *tmpl = read_text(path);
        snprintf(path, sizeof path, FIX "conversations/%s.json", cname);
        json_t *conv = json_load_path(path, 1u << 20, &err);
        snprintf(path, sizeof path, FIX "expected/%s", str_of(c, "file"));
        char *want = !strcmp(kind, "output") ? read_text(path) : NULL;
        json_t *tok = json_object_get(tokens, tname);
        if (!tmpl || !conv || !tok || (!strcmp(kind, "output") && !want)) {
            CHECK_MSG(0, "%s: missing template, conversation, tokens or expected file", label);
            failures++;
        } else {
            char *out = NULL;
            memra_err e = {{0}};
            int rc = render_pair(tmpl, conv, tok, &out, &e);
            int ok;
            if (!strcmp(kind, "output")) {
                renders++;
                ok = rc == 0 && !strcmp(out, want);
                if (!ok && failures < 8) {
                    if (rc)
                        fprintf(stderr, "  %s: failed: %s\n", label, e.msg);
                    else
                        report_difference(label, want, out);
                }
            } else {
                const char *msg = str_of(c, "message");
                if (!strcmp(kind, "raise"))
                    raises++;
                else
                    errors++;
                ok = rc == -1 && !strncmp(e.msg, "template line ", 14) &&
                     (strcmp(kind, "raise") || strstr(e.msg, msg));
                if (!ok && failures < 8)
                    fprintf(stderr, "  %s: jinja2 raised (%s%s), we %s %s\n", label, kind, *msg ? ": " : "",
                            rc ? "failed with" : "rendered", rc ? e.msg : "");
            }
            if (!ok)
                failures++;
            free(out);
        }
        free(tmpl);
        free(want);
        json_decref(conv);
    }
    fprintf(stderr, "  %zu pairs: %zu renders, %zu raise_exception, %zu other errors\n",
            json_array_size(cases), renders, raises, errors);
    CHECK(renders >= 300 && raises > 0);
    CHECK_MSG(failures == 0, "%zu of %zu template/conversation pairs differ", failures, json_array_size(cases));
    json_decref(manifest);
    json_decref(tokens);
}

/* Every template in the shared directory has goldens, and there are 20. */
static void test_every_template_is_covered(void)
{
    memra_err err;
    json_t *manifest = json_load_path(FIX "expected/manifest.json", 16u << 20, &err);
    CHECK_MSG(manifest != NULL, "%s", err.msg);
    if (!manifest)
        return;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/templates", test_data_dir());
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d) {
        json_decref(manifest);
        return;
    }
    struct dirent *de;
    size_t n = 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 7 || strcmp(de->d_name + l - 6, ".jinja"))
            continue;
        n++;
        size_t i, pairs = 0;
        json_t *c;
        json_array_foreach(json_object_get(manifest, "cases"), i, c)
        {
            const char *t = str_of(c, "template");
            pairs += strlen(t) == l - 6 && !strncmp(t, de->d_name, l - 6);
        }
        CHECK_MSG(pairs >= 20, "%s has %zu golden renders", de->d_name, pairs);
    }
    closedir(d);
    CHECK_MSG(n == 20, "%zu templates in %s", n, dir);
    json_decref(manifest);
}

static char *render_simple(const char *tmpl, const char *messages_json, const char *extra_json,
                           const char *bos, const char *eos, memra_err *err)
{
    json_t *msgs = json_loads(messages_json, 0, NULL);
    json_t *extra = extra_json ? json_loads(extra_json, 0, NULL) : NULL;
    char *out = NULL;
    if (chat_template_render(tmpl, msgs, NULL, NULL, 1, extra, bos, eos, &out, err))
        out = NULL;
    json_decref(msgs);
    json_decref(extra);
    return out;
}

static void test_variables_as_hugging_face_passes_them(void)
{
    memra_err err;
    const char *probe = "{{ bos_token is defined }}|{{ eos_token }}|{{ tools is none }}|{{ documents is none }}|"
                        "{{ add_generation_prompt }}|{{ messages|length }}|{{ enable_thinking }}";
    char *out = render_simple(probe, "[{\"role\": \"user\", \"content\": \"x\"}]", NULL, NULL, "</s>", &err);
    CHECK_MSG(out && !strcmp(out, "False|</s>|True|True|True|1|"), "%s", out ? out : err.msg);
    free(out);
    /* chat_template_kwargs become variables and may override the special tokens */
    out = render_simple(probe, "[]", "{\"enable_thinking\": false, \"eos_token\": \"<eot>\"}", "<s>", "</s>", &err);
    CHECK_MSG(out && !strcmp(out, "True|<eot>|True|True|True|0|False"), "%s", out ? out : err.msg);
    free(out);
    /* tool_call arguments stay objects: tojson prints them, not a string of them */
    out = render_simple("{{ messages[0].tool_calls[0].function.arguments|tojson }}",
                        "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\","
                        " \"arguments\": {\"city\": \"Zürich\", \"n\": 2.0}}}]}]",
                        NULL, NULL, NULL, &err);
    CHECK_MSG(out && !strcmp(out, "{\"city\": \"Zürich\", \"n\": 2.0}"), "%s", out ? out : err.msg);
    free(out);
    /* tools and documents as given */
    json_t *msgs = json_array(), *tools = json_loads("[{\"type\": \"function\"}]", 0, NULL);
    json_t *docs = json_loads("[{\"text\": \"d\"}]", 0, NULL);
    CHECK(chat_template_render("{{ tools|length }}{{ documents[0].text }}{{ add_generation_prompt }}", msgs, tools,
                               docs, 0, NULL, NULL, NULL, &out, &err) == 0);
    CHECK_MSG(out && !strcmp(out, "1dFalse"), "%s", out);
    free(out);
    json_decref(msgs);
    json_decref(tools);
    json_decref(docs);
}

static void test_refusals(void)
{
    memra_err err;
    char *out = (char *)1;
    json_t *obj = json_object(), *arr = json_array();
    CHECK(chat_template_render("x", obj, NULL, NULL, 1, NULL, NULL, NULL, &out, &err) == -1 && out == NULL);
    CHECK_MSG(strstr(err.msg, "messages is not an array"), "%s", err.msg);
    CHECK(chat_template_render("x", arr, NULL, NULL, 1, arr, NULL, NULL, &out, &err) == -1);
    CHECK_MSG(strstr(err.msg, "chat_template_kwargs is not an object"), "%s", err.msg);
    json_t *extra = json_loads("{\"messages\": []}", 0, NULL);
    CHECK(chat_template_render("x", arr, NULL, NULL, 1, extra, NULL, NULL, &out, &err) == -1);
    CHECK_MSG(strstr(err.msg, "may not set 'messages'"), "%s", err.msg);
    json_decref(extra);
    CHECK(chat_template_render(NULL, arr, NULL, NULL, 1, NULL, NULL, NULL, &out, &err) == -1);
    CHECK(chat_template_render("x", arr, NULL, NULL, 1, NULL, "\xff", NULL, &out, &err) == -1);
    CHECK_MSG(strstr(err.msg, "bos_token is not valid UTF-8"), "%s", err.msg);
    CHECK(chat_template_render("x", arr, NULL, NULL, 1, NULL, "<s>", "\xc3", &out, &err) == -1);
    CHECK_MSG(strstr(err.msg, "eos_token is not valid UTF-8"), "%s", err.msg);
    CHECK(chat_template_render("{% if %}", arr, NULL, NULL, 1, NULL, NULL, NULL, &out, &err) == -1);
    CHECK_MSG(!strncmp(err.msg, "template line 1: ", 17), "%s", err.msg);
    CHECK(chat_template_render("{{ raise_exception('System role not supported') }}", arr, NULL, NULL, 1, NULL,
                               NULL, NULL, &out, &err) == -1);
    CHECK_MSG(!strcmp(err.msg, "template line 1: System role not supported"), "%s", err.msg);
    json_decref(obj);
    json_decref(arr);
}

static void test_parsed_template_is_reusable(void)
{
    memra_err err;
    char path[4096];
    snprintf(path, sizeof path, "%s/templates/Qwen-Qwen3-0.6B.jinja", test_data_dir());
    if (!test_need_file(path))
        return;
    char *src = read_text(path);
    CHECK(src != NULL);
    if (!src)
        return;
    jinja_template *t = jinja_parse(src, strlen(src), &err);
    CHECK_MSG(t != NULL, "%s", err.msg);
    json_t *msgs = json_loads("[{\"role\": \"user\", \"content\": \"Hi\"}]", 0, NULL);
    json_t *off = json_loads("{\"enable_thinking\": false}", 0, NULL);
    char *a = NULL, *b = NULL, *c = NULL;
    CHECK(chat_template_render_parsed(t, msgs, NULL, NULL, 1, NULL, NULL, "<|im_end|>", &a, &err) == 0);
    CHECK(chat_template_render_parsed(t, msgs, NULL, NULL, 1, off, NULL, "<|im_end|>", &b, &err) == 0);
    CHECK(chat_template_render_parsed(t, msgs, NULL, NULL, 1, NULL, NULL, "<|im_end|>", &c, &err) == 0);
    CHECK_MSG(a && !strcmp(a, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"), "%s", a);
    CHECK_MSG(b && !strcmp(b, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"),
              "%s", b);
    CHECK(a && c && !strcmp(a, c));
    free(a);
    free(b);
    free(c);
    json_decref(msgs);
    json_decref(off);
    jinja_free(t);
    free(src);
}

TEST_MAIN(TEST_CASE(test_templates_render_like_hugging_face), TEST_CASE(test_every_template_is_covered),
          TEST_CASE(test_variables_as_hugging_face_passes_them), TEST_CASE(test_refusals),
          TEST_CASE(test_parsed_template_is_reusable))
