/* The registry: every family's descriptor, in the order of families.def,
 * and the lookups by enum, GGUF architecture and HF model_type. */
#include "model/family.h"

#include <stdio.h>
#include <string.h>

#include "core/check.h"

static const model_family_desc *const families[] = {
#define MEMRA_FAMILY(id, desc) &desc,
#include "model/families.def"
#undef MEMRA_FAMILY
};

_Static_assert(MEMRA_ARRAY_LEN(families) == FAMILY_COUNT, "one descriptor per family");

const model_family_desc *family_desc(model_family f)
{
    if (f < 0 || f >= FAMILY_COUNT)
        return NULL;
    /* The enum and the table come from the same rows. */
    MEMRA_ASSERT(families[f]->id == f);
    return families[f];
}

const char *family_name(model_family f)
{
    const model_family_desc *d = family_desc(f);
    return d ? d->name : "?";
}

const char *family_gguf_arch(model_family f)
{
    const model_family_desc *d = family_desc(f);
    return d ? d->gguf_arch : "?";
}

const model_family_desc *family_by_gguf_arch(const char *arch)
{
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(families); i++)
        if (strcmp(families[i]->gguf_arch, arch) == 0)
            return families[i];
    return NULL;
}

const model_family_desc *family_by_gguf_assistant_arch(const char *arch)
{
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(families); i++)
        if (families[i]->gguf_assistant_arch &&
            strcmp(families[i]->gguf_assistant_arch, arch) == 0)
            return families[i];
    return NULL;
}

const model_family_desc *family_by_hf_type(const char *mt, const family_hf_type **type)
{
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(families); i++)
        for (size_t t = 0; t < families[i]->n_hf_types; t++)
            if (strcmp(families[i]->hf_types[t].model_type, mt) == 0) {
                if (type)
                    *type = &families[i]->hf_types[t];
                return families[i];
            }
    return NULL;
}

const model_family_desc *family_by_hf_wrapper(const char *mt)
{
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(families); i++)
        if (families[i]->hf_wrapper_type && strcmp(families[i]->hf_wrapper_type, mt) == 0)
            return families[i];
    return NULL;
}

const model_family_desc *family_by_hf_assistant(const char *mt)
{
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(families); i++)
        if (families[i]->hf_assistant_type && strcmp(families[i]->hf_assistant_type, mt) == 0)
            return families[i];
    return NULL;
}

/* Appends ", name" (or "name" first) to out, truncating at n bytes. */
static void list_add(char *out, size_t n, const char *name)
{
    size_t len = strlen(out);
    if (len < n)
        snprintf(out + len, n - len, "%s%s", len ? ", " : "", name);
}

void family_list_hf_types(char *out, size_t n)
{
    out[0] = '\0';
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(families); i++) {
        for (size_t t = 0; t < families[i]->n_hf_types; t++)
            list_add(out, n, families[i]->hf_types[t].model_type);
        if (families[i]->hf_wrapper_type)
            list_add(out, n, families[i]->hf_wrapper_type);
        if (families[i]->hf_assistant_type)
            list_add(out, n, families[i]->hf_assistant_type);
    }
}

void family_list_gguf_archs(char *out, size_t n)
{
    out[0] = '\0';
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(families); i++) {
        list_add(out, n, families[i]->gguf_arch);
        if (families[i]->gguf_assistant_arch)
            list_add(out, n, families[i]->gguf_assistant_arch);
    }
}

void family_list_sliding_pattern(char *out, size_t n)
{
    out[0] = '\0';
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(families); i++)
        if (families[i]->sliding_pattern)
            list_add(out, n, families[i]->name);
}

int family_rope_freqs(const model_config *c, float *out)
{
    const model_family_desc *d = family_desc(c->family);
    return d && d->gguf_rope_freqs ? d->gguf_rope_freqs(c, out) : 0;
}
