/* The type chooser behind memra-quantize (rules in quant_recipe.h). */
#include "model/quant_recipe.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/check.h"
#include "core/strbuf.h"
#include "quant/quantize.h"

static const struct {
    const char *name;
    quant_mix mix;
    dtype base;
} recipe_names[] = {
    {"Q8_0", QMIX_PLAIN, DT_Q8_0},     {"Q4_0", QMIX_PLAIN, DT_Q4_0},
    {"Q4_K", QMIX_PLAIN, DT_Q4_K},     {"Q5_K", QMIX_PLAIN, DT_Q5_K},
    {"Q6_K", QMIX_PLAIN, DT_Q6_K},     {"NVFP4", QMIX_PLAIN, DT_NVFP4},
    {"MXFP8", QMIX_PLAIN, DT_MXFP8},   {"FP8", QMIX_PLAIN, DT_MXFP8},
    {"Q4_K_M", QMIX_Q4_K_M, DT_Q4_K},  {"Q5_K_M", QMIX_Q5_K_M, DT_Q5_K},
    {"Q6_K_M", QMIX_Q6_K_M, DT_Q6_K},
};

const char *quant_recipe_names(void)
{
    return "Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, NVFP4, MXFP8 (or FP8), Q4_K_M, Q5_K_M, Q6_K_M";
}

int quant_recipe_parse(const char *type, quant_recipe *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(recipe_names); i++) {
        if (strcasecmp(type, recipe_names[i].name) != 0)
            continue;
        out->mix = recipe_names[i].mix;
        out->base = recipe_names[i].base;
        /* the canonical spelling: the dtype's name for plain types */
        const char *canon = out->mix == QMIX_PLAIN ? dtype_get(out->base)->name
                                                   : recipe_names[i].name;
        snprintf(out->name, sizeof out->name, "%s", canon);
        return 0;
    }
    return memra_fail(err, "unknown quantization type '%s' (known: %s)", type,
                      quant_recipe_names());
}

/* A --keep type: the float types or anything quantize_row writes. */
static dtype keep_type(const char *s)
{
    if (!strcasecmp(s, "FP8"))
        return DT_MXFP8;
    dtype t = dtype_from_name(s);
    if (t == DT_F32 || t == DT_F16 || t == DT_BF16 || (t != DT_INVALID && quantize_supported(t)))
        return t;
    return DT_INVALID;
}

int quant_recipe_add_keep(quant_recipe *r, const char *spec, memra_err *err)
{
    const char *eq = strrchr(spec, '=');
    if (!eq || eq == spec || !eq[1])
        return memra_fail(err, "--keep '%s': expected NAME_REGEX=TYPE", spec);
    if (r->n_keep == QUANT_MAX_KEEP)
        return memra_fail(err, "--keep '%s': more than %d --keep options", spec, QUANT_MAX_KEEP);
    dtype t = keep_type(eq + 1);
    if (t == DT_INVALID)
        return memra_fail(err, "--keep '%s': unknown type '%s' (F32, F16, BF16, Q8_0, Q4_0, Q4_K, "
                               "Q5_K, Q6_K, NVFP4, MXFP8)",
                          spec, eq + 1);
    size_t len = (size_t)(eq - spec);
    int code;
    PCRE2_SIZE off;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)spec, len, 0, &code, &off, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return memra_fail(err, "--keep '%s': bad regex at offset %zu: %s", spec, (size_t)off,
                          (const char *)msg);
    }
    quant_keep *k = &r->keep[r->n_keep++];
    k->pattern = xmalloc(len + 1);
    memcpy(k->pattern, spec, len);
    k->pattern[len] = '\0';
    k->re = re;
    k->type = t;
    k->n_matched = 0;
    return 0;
}

void quant_recipe_free(quant_recipe *r)
{
    for (int i = 0; i < r->n_keep; i++) {
        free(r->keep[i].pattern);
        pcre2_code_free(r->keep[i].re);
    }
    r->n_keep = 0;
}

static int keep_matches(const quant_keep *k, const char *name)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(k->re, NULL);
    int rc = pcre2_match(k->re, (PCRE2_SPTR)name, strlen(name), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* llama.cpp's layer pattern for the tensors that get more bits: the first
 * and last eighth of the layers and every third one in between. */
static int use_more_bits(int layer, int64_t n_layers)
{
    const int n = (int)n_layers;
    return layer < n / 8 || layer >= 7 * n / 8 || (layer - n / 8) % 3 == 2;
}

/* The small matrices stay f32, as llama.cpp keeps them: the router and the
 * shared expert's gate, the DeltaNet conv (rows of conv_k values) and its
 * per-head gate inputs. */
static int is_matrix(const contract_entry *e)
{
    return e->n_dims >= 2 && !e->generated && e->role != ROLE_MOE_ROUTER &&
           e->role != ROLE_MOE_SHARED_GATE && e->role != ROLE_SSM_CONV &&
           e->role != ROLE_SSM_BETA && e->role != ROLE_SSM_ALPHA;
}

static int64_t row_len(const contract_entry *e) { return e->shape[e->n_dims - 1]; }

static int fits(dtype t, int64_t cols) { return cols % dtype_get(t)->block_size == 0; }

/* The mix's type before the row-length fallback. */
static dtype mix_type(const quant_recipe *r, const model_config *c, const contract_entry *e,
                      const char **why)
{
    const int k_m = r->mix == QMIX_Q4_K_M || r->mix == QMIX_Q5_K_M;
    const dtype up = k_m ? DT_Q6_K : DT_Q8_0; /* one step up from the base */
    const int eight_experts = c->family == FAMILY_QWEN3_MOE && c->n_experts == 8;
    *why = "base";
    switch (e->role) {
    case ROLE_OUTPUT:
    case ROLE_EMBED:
        if (e->role == ROLE_EMBED && !c->tie_embeddings)
            return r->base;
        /* llama.cpp: a head whose rows do not fit the base type is Q8_0 */
        if (!fits(r->base, row_len(e))) {
            *why = "fallback: rows not whole blocks";
            return DT_Q8_0;
        }
        *why = e->role == ROLE_OUTPUT ? "output head" : "tied embedding (the output head)";
        return up;
    case ROLE_ATTN_V:
        if (eight_experts) {
            *why = "8 experts";
            return DT_Q8_0;
        }
        if (use_more_bits(e->layer, c->n_layers)) {
            *why = "more bits (layer pattern)";
            return up;
        }
        return r->base;
    case ROLE_ATTN_K:
        if (eight_experts) {
            *why = "8 experts";
            return DT_Q8_0;
        }
        return r->base;
    case ROLE_ATTN_O:
        if (eight_experts && r->mix == QMIX_Q4_K_M) {
            *why = "8 experts";
            return DT_Q5_K;
        }
        return r->base;
    case ROLE_FFN_DOWN:
    case ROLE_MOE_DOWN_EXPS:
    case ROLE_MOE_DOWN_STACK:
        if (use_more_bits(e->layer, c->n_layers)) {
            *why = "more bits (layer pattern)";
            return up;
        }
        return r->base;
    default:
        return r->base;
    }
}

int quant_recipe_type(quant_recipe *r, const model_config *c, const contract_entry *e,
                      dtype *out, const char **why, memra_err *err)
{
    const char *dummy;
    if (!why)
        why = &dummy;
    if (!is_matrix(e)) {
        *why = "not a matrix";
        *out = DT_F32;
        return 0;
    }
    const int64_t cols = row_len(e);
    for (int i = 0; i < r->n_keep; i++) {
        quant_keep *k = &r->keep[i];
        if (!keep_matches(k, e->name))
            continue;
        k->n_matched++;
        if (!fits(k->type, cols))
            return memra_fail(err, "tensor '%s': rows of %lld values are not whole %s blocks of %d "
                                   "(--keep '%s')",
                              e->name, (long long)cols, dtype_get(k->type)->name,
                              dtype_get(k->type)->block_size, k->pattern);
        *why = "--keep";
        *out = k->type;
        return 0;
    }
    if (r->mix == QMIX_PLAIN) {
        if (!fits(r->base, cols))
            return memra_fail(err, "tensor '%s': rows of %lld values are not whole %s blocks of %d "
                                   "(keep it as a float type with --keep, or use a mix such as "
                                   "Q4_K_M, which falls back)",
                              e->name, (long long)cols, dtype_get(r->base)->name,
                              dtype_get(r->base)->block_size);
        *why = "base";
        *out = r->base;
        return 0;
    }
    dtype t = mix_type(r, c, e, why);
    if (!fits(t, cols)) {
        *why = "fallback: rows not whole blocks";
        t = fits(DT_Q8_0, cols) ? DT_Q8_0 : DT_F16;
    }
    *out = t;
    return 0;
}

/* llama.cpp's llama_ftype numbers (include/llama.h). */
int quant_recipe_llama_ftype(const quant_recipe *r)
{
    switch (r->mix) {
    case QMIX_Q4_K_M: return 15; /* LLAMA_FTYPE_MOSTLY_Q4_K_M */
    case QMIX_Q5_K_M: return 17; /* LLAMA_FTYPE_MOSTLY_Q5_K_M */
    case QMIX_Q6_K_M: return 18; /* LLAMA_FTYPE_MOSTLY_Q6_K: llama.cpp has no Q6_K_M */
    case QMIX_PLAIN: break;
    }
    switch (r->base) {
    case DT_Q8_0: return 7;   /* LLAMA_FTYPE_MOSTLY_Q8_0 */
    case DT_Q4_0: return 2;   /* LLAMA_FTYPE_MOSTLY_Q4_0 */
    case DT_Q4_K: return 14;  /* LLAMA_FTYPE_MOSTLY_Q4_K_S, what --pure Q4_K_S writes */
    case DT_Q5_K: return 16;  /* LLAMA_FTYPE_MOSTLY_Q5_K_S */
    case DT_Q6_K: return 18;  /* LLAMA_FTYPE_MOSTLY_Q6_K */
    case DT_NVFP4: return 39; /* LLAMA_FTYPE_MOSTLY_NVFP4 */
    default: return -1;       /* MXFP8: memra's own type */
    }
}

char *quant_recipe_describe(const quant_recipe *r)
{
    strbuf sb;
    sb_init(&sb);
    sb_puts(&sb, r->name);
    for (int i = 0; i < r->n_keep; i++)
        sb_printf(&sb, " --keep '%s=%s'", r->keep[i].pattern, dtype_get(r->keep[i].type)->name);
    return sb_take(&sb);
}
