#include "model/chat_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/check.h"
#include "core/json.h"
#include "core/mapfile.h"

static int no_template(const checkpoint *c, memra_err *err)
{
    return memra_fail(err, "%s: the model has no chat template (give one with --chat-template FILE)",
                      c->path);
}

static int from_tokenizer_config(const checkpoint *c, char **out, memra_err *err)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", c->path);
    if (access(path, R_OK) != 0)
        return no_template(c, err);
    json_error_t je;
    /* Some configs hold integers past int64 (Llama 3's model_max_length). */
    json_t *j = json_load_file(path, JSON_DECODE_INT_AS_REAL, &je);
    if (!j)
        return memra_fail(err, "%s: invalid JSON at line %d: %s", path, je.line, je.text);
    json_t *t = json_object_get(j, "chat_template");
    const char *s = NULL;
    if (json_is_string(t)) {
        s = json_string_value(t);
    } else if (json_is_array(t)) {
        size_t i;
        json_t *e;
        json_array_foreach(t, i, e)
        {
            json_t *name = json_object_get(e, "name"), *tmpl = json_object_get(e, "template");
            if (json_is_string(name) && !strcmp(json_string_value(name), "default") &&
                json_is_string(tmpl))
                s = json_string_value(tmpl);
        }
        if (!s) {
            json_decref(j);
            return memra_fail(err, "%s: chat_template is a list without a \"default\" entry",
                              path);
        }
    } else if (t && !json_is_null(t)) {
        json_decref(j);
        return memra_fail(err, "%s: chat_template must be a string or a list", path);
    }
    if (!s) {
        json_decref(j);
        return no_template(c, err);
    }
    *out = xstrdup(s);
    json_decref(j);
    return 0;
}

int chat_template_of(const checkpoint *c, char **out, memra_err *err)
{
    *out = NULL;
    if (c->format == CKPT_GGUF) {
        const char *s;
        if (gguf_get_str(&c->gguf, "tokenizer.chat_template", &s, NULL) != 0)
            return no_template(c, err);
        *out = xstrdup(s);
        return 0;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", c->path);
    if (access(path, R_OK) == 0) {
        size_t len;
        return read_small_file(path, 16u << 20, out, &len, err);
    }
    return from_tokenizer_config(c, out, err);
}
