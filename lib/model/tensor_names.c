#include "model/tensor_names.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "model/family.h"

/* The names every family shares; a family's own are in its descriptor
 * (family_tensor_name), looked up after these. */
static const family_tensor_name common_names[] = {
    {"token_embd.weight", "model.embed_tokens.weight", 1, 0},
    {"output_norm.weight", "model.norm.weight", 1, 0},
    {"output.weight", "lm_head.weight", 1, 0},
    {"attn_norm.weight", "input_layernorm.weight", 0, 0},
    {"attn_q.weight", "self_attn.q_proj.weight", 0, 0},
    {"attn_k.weight", "self_attn.k_proj.weight", 0, 0},
    {"attn_v.weight", "self_attn.v_proj.weight", 0, 0},
    {"attn_output.weight", "self_attn.o_proj.weight", 0, 0},
    {"attn_q.bias", "self_attn.q_proj.bias", 0, 0},
    {"attn_k.bias", "self_attn.k_proj.bias", 0, 0},
    {"attn_v.bias", "self_attn.v_proj.bias", 0, 0},
    {"attn_output.bias", "self_attn.o_proj.bias", 0, 0},
};

/* The i-th name of family d: the common ones first, then its own, then
 * its names_base's; NULL past the last. */
static const family_tensor_name *name_at(const model_family_desc *d, size_t i)
{
    if (i < MEMRA_ARRAY_LEN(common_names))
        return &common_names[i];
    i -= MEMRA_ARRAY_LEN(common_names);
    for (; d; d = d->names_base) {
        if (i < d->n_tensor_names)
            return &d->tensor_names[i];
        i -= d->n_tensor_names;
    }
    return NULL;
}

/* A layer or expert index: plain decimal digits, no sign, no leading zero
 * (so every index has exactly one spelling and the mapping is a bijection),
 * at most 9 digits. Returns the number of characters read, 0 on failure. */
static size_t parse_index(const char *s, int *out)
{
    size_t i = 0;
    long v = 0;
    while (s[i] >= '0' && s[i] <= '9') {
        if (i >= 9)
            return 0;
        v = v * 10 + (s[i] - '0');
        i++;
    }
    if (i == 0 || (i > 1 && s[0] == '0'))
        return 0;
    *out = (int)v;
    return i;
}

/* 0 when snprintf's result fit in the n-byte buffer, else -1. */
static int fits(int len, size_t n)
{
    return (len < 0 || (size_t)len >= n) ? -1 : 0;
}

static const char *strip_prefix(const char *s, const char *prefix)
{
    size_t n = strlen(prefix);
    return strncmp(s, prefix, n) == 0 ? s + n : NULL;
}

int tensor_name_hf_to_gguf(model_family f, const char *hf, char *out, size_t n, int *expert)
{
    const model_family_desc *d = family_desc(f);
    char norm[256];
    if (expert)
        *expert = -1;
    if (!d || !hf)
        return -1;
    /* A family's other spellings of the prefix (gemma3's multimodal
     * checkpoints) are normalized to the text-only one. */
    for (size_t i = 0; i < d->n_hf_prefixes; i++) {
        const char *rest = strip_prefix(hf, d->hf_prefixes[i].from);
        if (rest) {
            if ((size_t)snprintf(norm, sizeof norm, "%s%s", d->hf_prefixes[i].to, rest) >=
                sizeof norm)
                return -1;
            hf = norm;
            break;
        }
    }
    const family_tensor_name *e;
    for (size_t i = 0; (e = name_at(d, i)); i++)
        if (e->global && e->hf && strcmp(hf, e->hf) == 0)
            return fits(snprintf(out, n, "%s", e->gguf), n);
    const char *p = strip_prefix(hf, "model.layers.");
    int layer;
    size_t k;
    if (!p || !(k = parse_index(p, &layer)) || p[k] != '.')
        return -1;
    p += k + 1;
    for (size_t i = 0; (e = name_at(d, i)); i++) {
        if (e->global || !e->hf)
            continue;
        if (!e->expert) {
            if (strcmp(p, e->hf) == 0)
                return fits(snprintf(out, n, "blk.%d.%s", layer, e->gguf), n);
            continue;
        }
        const char *q = strip_prefix(p, "mlp.experts.");
        int ex;
        if (!q || !(k = parse_index(q, &ex)) || q[k] != '.' || strcmp(q + k + 1, e->hf) != 0)
            continue;
        if (expert)
            *expert = ex;
        return fits(snprintf(out, n, "blk.%d.%s", layer, e->gguf), n);
    }
    return -1;
}

int tensor_name_gguf_to_hf(model_family f, const char *gguf, int expert, char *out, size_t n)
{
    const model_family_desc *d = family_desc(f);
    if (!d || !gguf || expert < -1)
        return -1;
    const family_tensor_name *e;
    for (size_t i = 0; (e = name_at(d, i)); i++) {
        if (e->global && strcmp(gguf, e->gguf) == 0) {
            if (!e->hf || expert != -1)
                return -1;
            return fits(snprintf(out, n, "%s", e->hf), n);
        }
    }
    const char *p = strip_prefix(gguf, "blk.");
    int layer;
    size_t k;
    if (!p || !(k = parse_index(p, &layer)) || p[k] != '.')
        return -1;
    p += k + 1;
    for (size_t i = 0; (e = name_at(d, i)); i++) {
        if (e->global || strcmp(p, e->gguf) != 0)
            continue;
        if (e->expert != (expert >= 0))
            return -1;
        if (e->expert)
            return fits(snprintf(out, n, "model.layers.%d.mlp.experts.%d.%s", layer, expert,
                                 e->hf),
                        n);
        return fits(snprintf(out, n, "model.layers.%d.%s", layer, e->hf), n);
    }
    return -1;
}

int tensor_name_gguf_is_experts(const char *gguf)
{
    size_t n = gguf ? strlen(gguf) : 0;
    static const char *const suffixes[] = {".ffn_gate_exps.weight", ".ffn_up_exps.weight",
                                           ".ffn_down_exps.weight", ".ffn_gate_up_exps.weight"};
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(suffixes); i++) {
        size_t m = strlen(suffixes[i]);
        if (n > m && strcmp(gguf + n - m, suffixes[i]) == 0)
            return 1;
    }
    return 0;
}

int tensor_name_hf_is_ignorable(const char *hf)
{
    static const char suffix[] = ".rotary_emb.inv_freq";
    size_t n = hf ? strlen(hf) : 0, m = sizeof suffix - 1;
    return n > m && strcmp(hf + n - m, suffix) == 0;
}
