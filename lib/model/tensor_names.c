#include "model/tensor_names.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"

/* Family bit masks for the name table. */
#define F_LLAMA (1u << FAMILY_LLAMA)
#define F_QWEN2 (1u << FAMILY_QWEN2)
#define F_QWEN3 (1u << FAMILY_QWEN3)
#define F_QWEN3_MOE (1u << FAMILY_QWEN3_MOE)
#define F_GEMMA3 (1u << FAMILY_GEMMA3)
#define F_ALL (F_LLAMA | F_QWEN2 | F_QWEN3 | F_QWEN3_MOE | F_GEMMA3)
#define F_QKNORM (F_QWEN3 | F_QWEN3_MOE | F_GEMMA3)
#define F_DENSE (F_LLAMA | F_QWEN2 | F_QWEN3 | F_GEMMA3)
/* Families whose HF post_attention_layernorm is the pre-FFN norm. */
#define F_PRE_FFN_IS_POST_ATTN (F_LLAMA | F_QWEN2 | F_QWEN3 | F_QWEN3_MOE)

typedef struct {
    const char *gguf; /* suffix after "blk.N." */
    const char *hf;   /* suffix after "model.layers.N."; experts: after "mlp.experts.E." */
    unsigned families;
    int expert; /* merged in GGUF, per expert in HF */
} layer_name;

static const layer_name layer_names[] = {
    {"attn_norm.weight", "input_layernorm.weight", F_ALL, 0},
    {"attn_q.weight", "self_attn.q_proj.weight", F_ALL, 0},
    {"attn_k.weight", "self_attn.k_proj.weight", F_ALL, 0},
    {"attn_v.weight", "self_attn.v_proj.weight", F_ALL, 0},
    {"attn_output.weight", "self_attn.o_proj.weight", F_ALL, 0},
    {"attn_q.bias", "self_attn.q_proj.bias", F_ALL, 0},
    {"attn_k.bias", "self_attn.k_proj.bias", F_ALL, 0},
    {"attn_v.bias", "self_attn.v_proj.bias", F_ALL, 0},
    {"attn_output.bias", "self_attn.o_proj.bias", F_ALL, 0},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", F_QKNORM, 0},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", F_QKNORM, 0},
    {"ffn_norm.weight", "post_attention_layernorm.weight", F_PRE_FFN_IS_POST_ATTN, 0},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", F_GEMMA3, 0},
    {"ffn_norm.weight", "pre_feedforward_layernorm.weight", F_GEMMA3, 0},
    {"post_ffw_norm.weight", "post_feedforward_layernorm.weight", F_GEMMA3, 0},
    {"ffn_gate.weight", "mlp.gate_proj.weight", F_DENSE, 0},
    {"ffn_up.weight", "mlp.up_proj.weight", F_DENSE, 0},
    {"ffn_down.weight", "mlp.down_proj.weight", F_DENSE, 0},
    {"ffn_gate_inp.weight", "mlp.gate.weight", F_QWEN3_MOE, 0},
    {"ffn_gate_exps.weight", "gate_proj.weight", F_QWEN3_MOE, 1},
    {"ffn_up_exps.weight", "up_proj.weight", F_QWEN3_MOE, 1},
    {"ffn_down_exps.weight", "down_proj.weight", F_QWEN3_MOE, 1},
};

typedef struct {
    const char *gguf, *hf; /* hf NULL: GGUF-only */
    unsigned families;
} global_name;

static const global_name global_names[] = {
    {"token_embd.weight", "model.embed_tokens.weight", F_ALL},
    {"output_norm.weight", "model.norm.weight", F_ALL},
    {"output.weight", "lm_head.weight", F_ALL},
    {"rope_freqs.weight", NULL, F_LLAMA},
};

static unsigned family_bit(model_family f)
{
    return (f >= 0 && f < FAMILY_COUNT) ? 1u << f : 0;
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
    unsigned bit = family_bit(f);
    char norm[256];
    if (expert)
        *expert = -1;
    if (!bit || !hf)
        return -1;
    /* gemma3 multimodal checkpoints keep the text model under another
     * prefix; normalize it to the text-only spelling. */
    if (f == FAMILY_GEMMA3) {
        const char *rest;
        if ((rest = strip_prefix(hf, "language_model.model.")) ||
            (rest = strip_prefix(hf, "model.language_model."))) {
            if ((size_t)snprintf(norm, sizeof norm, "model.%s", rest) >= sizeof norm)
                return -1;
            hf = norm;
        } else if ((rest = strip_prefix(hf, "language_model.lm_head."))) {
            if ((size_t)snprintf(norm, sizeof norm, "lm_head.%s", rest) >= sizeof norm)
                return -1;
            hf = norm;
        }
    }
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(global_names); i++) {
        const global_name *g = &global_names[i];
        if ((g->families & bit) && g->hf && strcmp(hf, g->hf) == 0)
            return fits(snprintf(out, n, "%s", g->gguf), n);
    }
    const char *p = strip_prefix(hf, "model.layers.");
    int layer;
    size_t k;
    if (!p || !(k = parse_index(p, &layer)) || p[k] != '.')
        return -1;
    p += k + 1;
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(layer_names); i++) {
        const layer_name *e = &layer_names[i];
        if (!(e->families & bit))
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
    unsigned bit = family_bit(f);
    if (!bit || !gguf || expert < -1)
        return -1;
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(global_names); i++) {
        const global_name *g = &global_names[i];
        if ((g->families & bit) && strcmp(gguf, g->gguf) == 0) {
            if (!g->hf || expert != -1)
                return -1;
            return fits(snprintf(out, n, "%s", g->hf), n);
        }
    }
    const char *p = strip_prefix(gguf, "blk.");
    int layer;
    size_t k;
    if (!p || !(k = parse_index(p, &layer)) || p[k] != '.')
        return -1;
    p += k + 1;
    for (size_t i = 0; i < MEMRA_ARRAY_LEN(layer_names); i++) {
        const layer_name *e = &layer_names[i];
        if (!(e->families & bit) || strcmp(p, e->gguf) != 0)
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
                                           ".ffn_down_exps.weight"};
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
