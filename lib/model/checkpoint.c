#include "model/checkpoint.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/check.h"
#include "core/json.h"
#include "hub/model_source.h"

static int is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void view_from_gguf(const gguf_tensor *t, tensor_view *v)
{
    memset(v, 0, sizeof *v);
    v->name = t->name;
    v->type = t->type;
    v->n_dims = t->n_dims;
    v->n_elements = 1;
    /* GGUF keeps ne[0] innermost; views are outermost first. */
    for (int d = 0; d < t->n_dims; d++) {
        v->shape[d] = t->ne[t->n_dims - 1 - d];
        v->n_elements *= v->shape[d];
    }
    v->nbytes = t->nbytes;
    v->data = t->data;
}

static void view_from_st(const st_tensor *t, tensor_view *v)
{
    memset(v, 0, sizeof *v);
    v->name = t->name;
    v->type = t->type;
    v->n_dims = t->n_dims;
    v->n_elements = 1;
    for (int d = 0; d < t->n_dims; d++) {
        v->shape[d] = t->shape[d];
        v->n_elements *= t->shape[d];
    }
    v->nbytes = t->nbytes;
    v->data = t->data;
}

static int open_gguf(checkpoint *c, memra_err *err)
{
    if (gguf_open(c->path, &c->gguf, err) != 0)
        return -1;
    c->format = CKPT_GGUF;
    c->n_tensors = (int)c->gguf.n_tensors;
    c->tensors = xcalloc((size_t)c->n_tensors + 1, sizeof *c->tensors);
    for (int i = 0; i < c->n_tensors; i++)
        view_from_gguf(&c->gguf.tensors[i], &c->tensors[i]);
    if (c->n_tensors == 0) {
        if (!gguf_find_kv(&c->gguf, "tokenizer.ggml.tokens"))
            return memra_fail(err, "%s: GGUF file has no tensors and no tokenizer", c->path);
        c->vocab_only = 1;
        return 0;
    }
    if (config_from_gguf(&c->gguf, &c->config, err) != 0)
        return memra_wrap(err, "%s", c->path);
    c->has_config = 1;
    return 0;
}

/* A sentence-transformers checkpoint says how it pools: modules.json names
 * a Pooling module's folder, whose config.json sets one pooling_mode_* to
 * true. Absent files mean a language model; a malformed one is an error. */
static int hf_pooling(const char *dir, int64_t *pooling, memra_err *err)
{
    size_t n = strlen(dir) + 300;
    char *path = xmalloc(n);
    snprintf(path, n, "%s/modules.json", dir);
    int rc = 0;
    json_t *mods = NULL, *pc = NULL;
    if (access(path, F_OK) != 0)
        goto out;
    if (!(mods = json_load_path(path, 1u << 20, err))) {
        rc = -1;
        goto out;
    }
    size_t i;
    json_t *m;
    json_array_foreach(mods, i, m) {
        const char *type = json_string_value(json_object_get(m, "type"));
        const char *sub = json_string_value(json_object_get(m, "path"));
        if (!type || !strstr(type, "Pooling") || !sub || strstr(sub, "..") || strlen(sub) > 200)
            continue;
        snprintf(path, n, "%s/%s/config.json", dir, sub);
        if (!(pc = json_load_path(path, 1u << 20, err))) {
            rc = -1;
            goto out;
        }
        static const struct { const char *key; int64_t v; } modes[] = {
            {"pooling_mode_lasttoken", MODEL_POOL_LAST}, {"pooling_mode_mean_tokens", MODEL_POOL_MEAN},
            {"pooling_mode_cls_token", MODEL_POOL_CLS}};
        for (size_t k = 0; k < sizeof modes / sizeof *modes; k++)
            if (json_is_true(json_object_get(pc, modes[k].key)))
                *pooling = modes[k].v;
        if (*pooling == MODEL_POOL_NONE)
            rc = memra_fail(err, "%s: no pooling mode memra runs (lasttoken, mean_tokens or "
                            "cls_token) is true", path);
        break;
    }
out:
    if (mods)
        json_decref(mods);
    if (pc)
        json_decref(pc);
    free(path);
    return rc;
}

static int open_hf_dir(checkpoint *c, memra_err *err)
{
    c->format = CKPT_HF;
    size_t n = strlen(c->path) + 32;
    char *cfg_path = xmalloc(n);
    snprintf(cfg_path, n, "%s/config.json", c->path);
    c->hf_config = json_load_path(cfg_path, 16u << 20, err);
    if (!c->hf_config) {
        free(cfg_path);
        return memra_wrap(err, "%s: not an HF checkpoint dir", c->path);
    }
    int rc = config_from_hf(c->hf_config, cfg_path, &c->config, err);
    free(cfg_path);
    if (rc != 0 || hf_pooling(c->path, &c->config.pooling, err) != 0)
        return -1;
    c->has_config = 1;
    if (st_open_dir(c->path, &c->st, err) != 0)
        return -1;
    c->n_tensors = c->st.n_tensors;
    c->tensors = xcalloc((size_t)c->n_tensors + 1, sizeof *c->tensors);
    for (int i = 0; i < c->n_tensors; i++)
        view_from_st(&c->st.tensors[i], &c->tensors[i]);
    /* transformers saves no MTP block (it never loads one) but keeps the
     * config's mtp_num_hidden_layers: such a checkpoint has none */
    if (c->config.mtp_layers > 0) {
        int any = 0;
        for (int i = 0; i < c->n_tensors && !any; i++)
            any = strncmp(c->tensors[i].name, "mtp.", 4) == 0;
        if (!any)
            c->config.mtp_layers = 0;
    }
    return 0;
}

int checkpoint_open(const char *spec, checkpoint *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    if (model_source_resolve(spec, &out->path, err) != 0)
        return -1;
    int rc = is_dir(out->path) ? open_hf_dir(out, err) : open_gguf(out, err);
    if (rc != 0) {
        checkpoint_close(out);
        return -1;
    }
    return 0;
}

void checkpoint_close(checkpoint *c)
{
    if (c->format == CKPT_GGUF && c->gguf.map.path)
        gguf_close(&c->gguf);
    if (c->format == CKPT_HF) {
        if (c->st.files)
            st_close(&c->st);
        if (c->hf_config)
            json_decref(c->hf_config);
    }
    free(c->tensors);
    free(c->path);
    memset(c, 0, sizeof *c);
}

const tensor_view *checkpoint_find(const checkpoint *c, const char *name)
{
    for (int i = 0; i < c->n_tensors; i++)
        if (!strcmp(c->tensors[i].name, name))
            return &c->tensors[i];
    return NULL;
}

int checkpoint_load_tokenizer(const checkpoint *c, tokenizer **out, memra_err *err)
{
    if (c->format == CKPT_GGUF)
        return tok_load_gguf(&c->gguf, out, err);
    if (tok_load_hf_dir(c->path, out, err) == 0)
        return 0;
    /* an assistant ships without one: say what it is for */
    if (config_is_assistant(&c->config))
        return memra_fail(err, "%s: a %s assistant is not a model of its own (it drafts for "
                          "one: give it with --draft beside its model)", c->path,
                          family_name(c->config.family));
    return -1;
}
