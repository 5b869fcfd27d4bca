/* Chat templates rendered with Hugging Face's variables (see the header).
 * The inputs are handed to the interpreter as they are: no message is
 * rewritten, so what a template sees is what the request said. */
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "jinja/chat_template.h"

static const char *const RESERVED[] = {"messages", "tools", "documents", "add_generation_prompt"};

int chat_template_render_parsed(const jinja_template *t, const json_t *messages,
                                const json_t *tools, const json_t *documents,
                                int add_generation_prompt, const json_t *extra_vars,
                                const char *bos_token, const char *eos_token, char **out,
                                memra_err *err)
{
    *out = NULL;
    if (!json_is_array(messages))
        return memra_fail(err, "chat template: messages is not an array");
    if (extra_vars && !json_is_object(extra_vars))
        return memra_fail(err, "chat template: chat_template_kwargs is not an object");
    size_t n_extra = extra_vars ? json_object_size(extra_vars) : 0;
    jinja_var *vars = xcalloc(n_extra + 8, sizeof *vars);
    json_t *owned[3] = {NULL, NULL, NULL};
    size_t n = 0;
    /* special tokens first: chat_template_kwargs may override them */
    const char *bad = NULL;
    if (bos_token && !(owned[0] = json_string(bos_token)))
        bad = "bos_token";
    else if (eos_token && !(owned[1] = json_string(eos_token)))
        bad = "eos_token";
    if (bad) {
        free(vars);
        json_decref(owned[0]);
        return memra_fail(err, "chat template: %s is not valid UTF-8", bad);
    }
    if (owned[0])
        vars[n++] = (jinja_var){"bos_token", owned[0]};
    if (owned[1])
        vars[n++] = (jinja_var){"eos_token", owned[1]};
    if (extra_vars) {
        const char *key;
        json_t *val;
        json_object_foreach((json_t *)extra_vars, key, val)
        {
            for (size_t i = 0; i < MEMRA_ARRAY_LEN(RESERVED); i++)
                if (!strcmp(key, RESERVED[i])) {
                    free(vars);
                    json_decref(owned[0]);
                    json_decref(owned[1]);
                    return memra_fail(err, "chat template: chat_template_kwargs may not set '%s'", key);
                }
            vars[n++] = (jinja_var){key, val};
        }
    }
    owned[2] = json_boolean(add_generation_prompt);
    vars[n++] = (jinja_var){"messages", messages};
    vars[n++] = (jinja_var){"tools", tools ? tools : json_null()};
    vars[n++] = (jinja_var){"documents", documents ? documents : json_null()};
    vars[n++] = (jinja_var){"add_generation_prompt", owned[2]};
    int rc = jinja_render_vars(t, vars, n, out, err);
    free(vars);
    for (int i = 0; i < 3; i++)
        json_decref(owned[i]);
    return rc;
}

int chat_template_render(const char *tmpl, const json_t *messages, const json_t *tools,
                         const json_t *documents, int add_generation_prompt,
                         const json_t *extra_vars, const char *bos_token, const char *eos_token,
                         char **out, memra_err *err)
{
    *out = NULL;
    if (!tmpl)
        return memra_fail(err, "chat template: no template");
    jinja_template *t = jinja_parse(tmpl, strlen(tmpl), err);
    if (!t)
        return -1;
    int rc = chat_template_render_parsed(t, messages, tools, documents, add_generation_prompt,
                                         extra_vars, bos_token, eos_token, out, err);
    jinja_free(t);
    return rc;
}
