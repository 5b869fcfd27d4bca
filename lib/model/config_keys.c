/* Limits, typed GGUF key readers and the HF keys several families share
 * (config_keys.h). */
#include "model/config_keys.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "model/family.h"

/* ---- checks ---- */

int config_size_ok(const char *what, const char *key, int64_t v, int64_t max, memra_err *err)
{
    if (v <= 0)
        return memra_fail(err, "%s: %s must be positive, got %" PRId64, what, key, v);
    if (v > max)
        return memra_fail(err, "%s: %s %" PRId64 " is absurdly large (limit %" PRId64 ")", what,
                          key, v, max);
    return 0;
}

int config_elems_ok(const char *what, const char *tensor, double elems, memra_err *err)
{
    if (elems > CONFIG_MAX_TENSOR_ELEMS)
        return memra_fail(err, "%s: the %s tensor would have %.3g elements, absurdly many", what,
                          tensor, elems);
    return 0;
}

int config_finite_pos(const char *what, const char *key, double v, memra_err *err)
{
    if (!isfinite(v) || v <= 0)
        return memra_fail(err, "%s: %s must be a positive number, got %g", what, key, v);
    return 0;
}

/* ---- HF config.json ---- */

int config_hf_refuse_true(const json_t *obj, const char *key, const char *what, memra_err *err)
{
    int v = 0;
    if (json_get_bool(obj, key, 0, &v, what, err))
        return -1;
    if (v)
        return memra_fail(err, "%s: %s true is not supported", what, key);
    return 0;
}

int config_hf_sliding_window(const json_t *obj, int64_t dflt, const char *what, model_config *c,
                             memra_err *err)
{
    c->sliding_window = dflt;
    json_t *sw = json_object_get(obj, "sliding_window");
    if (sw && json_is_null(sw))
        c->sliding_window = 0;
    else if (json_get_int(obj, "sliding_window", 0, &c->sliding_window, what, err))
        return -1;
    return 0;
}

/* gemma3's layer_types: "full_attention" every Nth layer and
 * "sliding_attention" otherwise; we need that N. qwen's must be all full. */
int config_hf_layer_types(const json_t *obj, const char *what, model_config *c, memra_err *err)
{
    json_t *lt = json_object_get(obj, "layer_types");
    if (!lt || json_is_null(lt))
        return 0;
    if (!json_is_array(lt))
        return memra_fail(err, "%s: layer_types must be a list", what);
    size_t n = json_array_size(lt);
    if ((int64_t)n != c->n_layers)
        return memra_fail(err, "%s: layer_types has %zu entries for %" PRId64 " layers", what, n,
                          c->n_layers);
    int64_t pattern = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = json_string_value(json_array_get(lt, i));
        if (!s || (strcmp(s, "full_attention") != 0 && strcmp(s, "sliding_attention") != 0))
            return memra_fail(err, "%s: layer_types[%zu] is not \"full_attention\" or "
                              "\"sliding_attention\"", what, i);
        if (!pattern && strcmp(s, "full_attention") == 0)
            pattern = (int64_t)i + 1;
    }
    const model_family_desc *d = family_desc(c->family);
    if (!d->sliding_pattern) {
        if (pattern != 1 || n == 0)
            goto irregular;
        for (size_t i = 0; i < n; i++)
            if (strcmp(json_string_value(json_array_get(lt, i)), "full_attention") != 0)
                goto irregular;
        return 0;
    }
    if (!pattern) /* every layer slides: the period is longer than the model */
        pattern = (int64_t)n + 1;
    for (size_t i = 0; i < n; i++) {
        int full = strcmp(json_string_value(json_array_get(lt, i)), "full_attention") == 0;
        if (full != ((int64_t)(i + 1) % pattern == 0 || (c->last_layer_full && i == n - 1)))
            goto irregular;
    }
    c->sliding_window_pattern = pattern;
    return 0;
irregular:
    return memra_fail(err, "%s: layer_types is not a pattern this family supports "
                      "(%s: %s)", what, family_name(c->family),
                      !d->sliding_pattern  ? "all full_attention"
                      : c->last_layer_full ? "every Nth layer and the last full_attention"
                                           : "every Nth layer full_attention");
}

/* ---- GGUF metadata ---- */

static const gguf_kv *gkv(const cfg_gguf *g, const char *key, int arch_key, char *full,
                          size_t n)
{
    if (arch_key)
        snprintf(full, n, "%s.%s", g->arch, key);
    else
        snprintf(full, n, "%s", key);
    return gguf_find_kv(g->f, full);
}

/* An f32 read back as the shortest decimal that rounds to it. */
double config_f32_shortest(double v)
{
    float f = (float)v;
    if (!isfinite(f))
        return v;
    char buf[48];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)f);
        if (strtof(buf, NULL) == f)
            return strtod(buf, NULL);
    }
    return (double)f;
}

int cfg_gguf_int(const cfg_gguf *g, const char *key, int arch_key, int required, int64_t *out,
                 memra_err *err)
{
    char full[256];
    const gguf_kv *kv = gkv(g, key, arch_key, full, sizeof full);
    if (!kv) {
        if (required)
            return memra_fail(err, "%s: missing required key %s", g->what, full);
        return 0;
    }
    switch (kv->value.type) {
    case GGUF_UINT8:
    case GGUF_UINT16:
    case GGUF_UINT32:
    case GGUF_UINT64:
        if (kv->value.v.u > (uint64_t)INT64_MAX)
            return memra_fail(err, "%s: key %s: %" PRIu64 " is out of range", g->what, full,
                              kv->value.v.u);
        *out = (int64_t)kv->value.v.u;
        return 0;
    case GGUF_INT8:
    case GGUF_INT16:
    case GGUF_INT32:
    case GGUF_INT64:
        *out = kv->value.v.i;
        return 0;
    default:
        return memra_fail(err, "%s: key %s has type %s, expected an integer", g->what, full,
                          gguf_vtype_name(kv->value.type));
    }
}

int cfg_gguf_int_at(const cfg_gguf *g, const char *key, int arch_key, int required,
                    int64_t index, int64_t *out, memra_err *err)
{
    char full[256];
    const gguf_kv *kv = gkv(g, key, arch_key, full, sizeof full);
    if (!kv || kv->value.type != GGUF_ARRAY || index < 0)
        return cfg_gguf_int(g, key, arch_key, required, out, err);
    const gguf_value *v = &kv->value;
    if ((uint64_t)index >= v->v.arr.n)
        return memra_fail(err, "%s: key %s has %" PRIu64 " values, none for layer %" PRId64,
                          g->what, full, v->v.arr.n, index);
    const void *d = v->v.arr.data;
    switch (v->v.arr.elem_type) {
    case GGUF_UINT8: *out = ((const uint8_t *)d)[index]; return 0;
    case GGUF_UINT16: *out = ((const uint16_t *)d)[index]; return 0;
    case GGUF_UINT32: *out = ((const uint32_t *)d)[index]; return 0;
    case GGUF_INT8: *out = ((const int8_t *)d)[index]; return 0;
    case GGUF_INT16: *out = ((const int16_t *)d)[index]; return 0;
    case GGUF_INT32: *out = ((const int32_t *)d)[index]; return 0;
    case GGUF_INT64: *out = ((const int64_t *)d)[index]; return 0;
    case GGUF_UINT64:
        if (((const uint64_t *)d)[index] > (uint64_t)INT64_MAX)
            return memra_fail(err, "%s: key %s[%" PRId64 "] is out of range", g->what, full,
                              index);
        *out = (int64_t)((const uint64_t *)d)[index];
        return 0;
    default:
        return memra_fail(err, "%s: key %s is a list of %s, expected integers", g->what, full,
                          gguf_vtype_name(v->v.arr.elem_type));
    }
}

int cfg_gguf_num(const cfg_gguf *g, const char *key, int arch_key, int required, double *out,
                 memra_err *err)
{
    char full[256];
    const gguf_kv *kv = gkv(g, key, arch_key, full, sizeof full);
    if (!kv) {
        if (required)
            return memra_fail(err, "%s: missing required key %s", g->what, full);
        return 0;
    }
    switch (kv->value.type) {
    case GGUF_FLOAT32:
        *out = config_f32_shortest(kv->value.v.f);
        return 0;
    case GGUF_FLOAT64:
        *out = kv->value.v.f;
        return 0;
    default: {
        int64_t i = 0;
        if (cfg_gguf_int(g, key, arch_key, 1, &i, err) != 0)
            return memra_fail(err, "%s: key %s has type %s, expected a number", g->what, full,
                              gguf_vtype_name(kv->value.type));
        *out = (double)i;
        return 0;
    }
    }
}

int cfg_gguf_bool(const cfg_gguf *g, const char *key, int arch_key, int *out, memra_err *err)
{
    char full[256];
    const gguf_kv *kv = gkv(g, key, arch_key, full, sizeof full);
    if (!kv)
        return 0;
    if (kv->value.type != GGUF_BOOL)
        return memra_fail(err, "%s: key %s has type %s, expected a bool", g->what, full,
                          gguf_vtype_name(kv->value.type));
    *out = kv->value.v.u != 0;
    return 0;
}

int cfg_gguf_str(const cfg_gguf *g, const char *key, int arch_key, const char **out,
                 memra_err *err)
{
    char full[256];
    const gguf_kv *kv = gkv(g, key, arch_key, full, sizeof full);
    if (!kv)
        return 0;
    if (kv->value.type != GGUF_STRING)
        return memra_fail(err, "%s: key %s has type %s, expected a string", g->what, full,
                          gguf_vtype_name(kv->value.type));
    if (strlen(kv->value.v.s.str) != kv->value.v.s.len)
        return memra_fail(err, "%s: key %s holds a NUL byte", g->what, full);
    *out = kv->value.v.s.str;
    return 0;
}

int cfg_gguf_token(const cfg_gguf *g, const char *key, int64_t *out, memra_err *err)
{
    *out = -1;
    if (cfg_gguf_int(g, key, 0, 0, out, err) != 0)
        return -1;
    if (*out == 0xFFFFFFFFll)
        *out = -1;
    return 0;
}

void cfg_gguf_set_u32(gguf_writer *w, const char *arch, const char *key, int64_t v)
{
    char full[256];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    gguf_writer_set_u32(w, full, (uint32_t)v);
}

void cfg_gguf_set_f32(gguf_writer *w, const char *arch, const char *key, double v)
{
    char full[256];
    snprintf(full, sizeof full, "%s.%s", arch, key);
    gguf_writer_set_f32(w, full, (float)v);
}

/* ---- HF config.json out ---- */

void config_json_set_int(json_t *o, const char *key, int64_t v)
{
    json_object_set_new(o, key, json_integer(v));
}

void config_json_set_num(json_t *o, const char *key, double v)
{
    json_object_set_new(o, key, json_real(v));
}
