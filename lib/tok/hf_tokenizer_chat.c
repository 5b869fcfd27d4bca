/* Chat templates of a Hugging Face directory -> tokenizer.chat_template*
 * GGUF keys, following gguf-py's SpecialVocab and GGUFWriter: a single
 * template is tokenizer.chat_template; a list of {name, template} puts
 * "default" there and every other one under tokenizer.chat_template.<name>
 * (the name kept to [A-Za-z0-9_]), with the names in tokenizer.chat_templates. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/mapfile.h"
#include "tok/hf_tokenizer_internal.h"

#define MAX_TEMPLATES 256
#define MAX_NAME 200

static int has_nul(const json_t *s)
{
    return memchr(json_string_value(s), 0, json_string_length(s)) != NULL;
}

static int read_text_file(const char *path, char **out, memra_err *err)
{
    size_t len;
    if (read_small_file(path, HF_SMALL_MAX, out, &len, err))
        return -1;
    if (strlen(*out) != len) {
        free(*out);
        *out = NULL;
        return memra_fail(err, "%s: contains a NUL byte", path);
    }
    return 0;
}

static void clean_name(const char *name, char *out)
{
    size_t i = 0;
    for (; name[i] && i < MAX_NAME; i++) {
        char ch = name[i];
        int ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        out[i] = ok ? ch : '_';
    }
    out[i] = 0;
}

/* Walk a list of {name, template}: validate it (w NULL) or write it. Entries
 * without a name or template are skipped, as gguf-py skips them. */
static int template_list(gguf_writer *w, const json_t *list, const char *what, memra_err *err)
{
    char (*names)[MAX_NAME + 1] = xmalloc(MAX_TEMPLATES * sizeof *names);
    const char *name_ptrs[MAX_TEMPLATES];
    size_t n_names = 0;
    const char *def = NULL;
    int rc = 0;
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e)
    {
        json_t *tmpl = json_object_get(e, "template");
        json_t *name = json_object_get(e, "name");
        if (!json_is_object(e) || (tmpl && !json_is_null(tmpl) && !json_is_string(tmpl)) ||
            (name && !json_is_null(name) && !json_is_string(name))) {
            rc = memra_fail(err, "%s: chat_template[%zu] must be {\"name\": string, "
                                 "\"template\": string}", what, i);
            break;
        }
        if (!json_is_string(name) || !*json_string_value(name) || !json_is_string(tmpl))
            continue;
        if (json_string_length(name) > MAX_NAME || has_nul(tmpl)) {
            rc = memra_fail(err, "%s: chat_template[%zu]: name longer than %d characters or "
                                 "template with a NUL byte", what, i, MAX_NAME);
            break;
        }
        char clean[MAX_NAME + 1];
        clean_name(json_string_value(name), clean);
        if (!strcmp(clean, "default")) {
            def = json_string_value(tmpl);
            continue;
        }
        size_t k = 0;
        while (k < n_names && strcmp(names[k], clean) != 0)
            k++;
        if (k == n_names) {
            if (n_names == MAX_TEMPLATES) {
                rc = memra_fail(err, "%s: more than %d chat templates", what, MAX_TEMPLATES);
                break;
            }
            memcpy(names[n_names], clean, sizeof clean);
            name_ptrs[n_names] = names[n_names];
            n_names++;
        }
        if (w) {
            char key[sizeof "tokenizer.chat_template." + MAX_NAME];
            snprintf(key, sizeof key, "tokenizer.chat_template.%s", clean);
            gguf_writer_set_str(w, key, json_string_value(tmpl));
        }
    }
    if (!rc && w && n_names)
        gguf_writer_set_arr(w, "tokenizer.chat_templates", GGUF_STRING, n_names, name_ptrs);
    if (!rc && w && def)
        gguf_writer_set_str(w, "tokenizer.chat_template", def);
    free(names);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *join(const char *dir, const char *name)
{
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = xmalloc(n);
    snprintf(p, n, "%s/%s", dir, name);
    return p;
}

/* additional_chat_templates/<name>.jinja appended to `list` in name order,
 * so the output does not depend on the directory's order. */
static int extra_jinja(const char *dir, json_t *list, memra_err *err)
{
    char *extra = join(dir, "additional_chat_templates");
    DIR *d = opendir(extra);
    if (!d) {
        free(extra);
        return 0;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len <= 6 || strcmp(de->d_name + len - 6, ".jinja") != 0)
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 8;
            names = xrealloc(names, cap * sizeof *names);
        }
        names[n++] = xstrdup(de->d_name);
    }
    closedir(d);
    if (n)
        qsort(names, n, sizeof *names, cmp_str);
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        char *text;
        char *p = join(extra, names[i]);
        if (!rc && read_text_file(p, &text, err) == 0) {
            names[i][strlen(names[i]) - 6] = 0;
            json_array_append_new(list, json_pack("{s:s,s:s}", "name", names[i], "template", text));
            free(text);
        } else {
            rc = -1;
        }
        free(p);
        free(names[i]);
    }
    free(names);
    free(extra);
    return rc;
}

/* chat_template.jinja (a string), or with additional_chat_templates/ the
 * list form gguf-py builds; *out NULL when there is no .jinja file. */
static int jinja_templates(const char *dir, json_t **out, memra_err *err)
{
    *out = NULL;
    char *path = join(dir, "chat_template.jinja");
    char *text = NULL;
    int rc = 0;
    if (hf_file_exists(path) && (rc = read_text_file(path, &text, err)) == 0) {
        json_t *list = json_array();
        json_array_append_new(list, json_pack("{s:s,s:s}", "name", "default", "template", text));
        if (extra_jinja(dir, list, err)) {
            json_decref(list);
            rc = -1;
        } else if (json_array_size(list) == 1) {
            *out = json_incref(json_object_get(json_array_get(list, 0), "template"));
            json_decref(list);
        } else {
            *out = list;
        }
    }
    free(text);
    free(path);
    return rc;
}

int hf_chat_templates_read(const char *dir, const json_t *tc, const char *tc_path, json_t **out,
                           memra_err *err)
{
    *out = NULL;
    json_t *tmpl = tc ? json_object_get(tc, "chat_template") : NULL;
    char *what = xstrdup(tc_path);
    if (tmpl && !json_is_null(tmpl)) {
        tmpl = json_incref(tmpl);
    } else {
        free(what);
        what = join(dir, "chat_template.jinja");
        if (jinja_templates(dir, &tmpl, err)) {
            free(what);
            return -1;
        }
        if (!tmpl) {
            free(what);
            what = join(dir, "chat_template.json");
            json_t *j;
            if (hf_json_optional(what, HF_SMALL_MAX, &j, err)) {
                free(what);
                return -1;
            }
            tmpl = j ? json_incref(json_object_get(j, "chat_template")) : NULL;
            json_decref(j);
        }
    }
    int rc = 0;
    if (!tmpl || json_is_null(tmpl))
        ;
    else if (json_is_string(tmpl)) {
        if (has_nul(tmpl))
            rc = memra_fail(err, "%s: chat_template contains a NUL byte", what);
    } else if (json_is_array(tmpl)) {
        rc = template_list(NULL, tmpl, what, err);
    } else {
        rc = memra_fail(err, "%s: chat_template must be a string or a list of {name, template}",
                        what);
    }
    free(what);
    if (rc || json_is_null(tmpl)) {
        json_decref(tmpl);
        return rc;
    }
    *out = tmpl;
    return 0;
}

void hf_chat_templates_write(const json_t *tmpl, gguf_writer *w)
{
    if (json_is_string(tmpl))
        gguf_writer_set_str(w, "tokenizer.chat_template", json_string_value(tmpl));
    else if (json_is_array(tmpl))
        template_list(w, tmpl, "", NULL);
}
