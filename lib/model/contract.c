#include "model/contract.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/hash.h"
#include "model/family.h"
#include "model/tensor_names.h"

static const char *const role_names[ROLE_COUNT] = {
    [ROLE_EMBED] = "embed",
    [ROLE_OUTPUT] = "output",
    [ROLE_OUTPUT_NORM] = "output_norm",
    [ROLE_ROPE_FREQS] = "rope_freqs",
    [ROLE_ATTN_NORM] = "attn_norm",
    [ROLE_ATTN_Q] = "attn_q",
    [ROLE_ATTN_K] = "attn_k",
    [ROLE_ATTN_V] = "attn_v",
    [ROLE_ATTN_O] = "attn_o",
    [ROLE_ATTN_Q_BIAS] = "attn_q_bias",
    [ROLE_ATTN_K_BIAS] = "attn_k_bias",
    [ROLE_ATTN_V_BIAS] = "attn_v_bias",
    [ROLE_ATTN_O_BIAS] = "attn_o_bias",
    [ROLE_ATTN_Q_NORM] = "attn_q_norm",
    [ROLE_ATTN_K_NORM] = "attn_k_norm",
    [ROLE_ATTN_POST_NORM] = "attn_post_norm",
    [ROLE_FFN_NORM] = "ffn_norm",
    [ROLE_FFN_GATE] = "ffn_gate",
    [ROLE_FFN_UP] = "ffn_up",
    [ROLE_FFN_DOWN] = "ffn_down",
    [ROLE_FFN_POST_NORM] = "ffn_post_norm",
    [ROLE_MOE_ROUTER] = "moe_router",
    [ROLE_MOE_GATE_EXPS] = "moe_gate_exps",
    [ROLE_MOE_UP_EXPS] = "moe_up_exps",
    [ROLE_MOE_DOWN_EXPS] = "moe_down_exps",
    [ROLE_SSM_QKV] = "ssm_qkv",
    [ROLE_SSM_Z] = "ssm_z",
    [ROLE_SSM_BETA] = "ssm_beta",
    [ROLE_SSM_ALPHA] = "ssm_alpha",
    [ROLE_SSM_CONV] = "ssm_conv",
    [ROLE_SSM_DT_BIAS] = "ssm_dt_bias",
    [ROLE_SSM_A] = "ssm_a",
    [ROLE_SSM_NORM] = "ssm_norm",
    [ROLE_SSM_OUT] = "ssm_out",
    [ROLE_FFN_GATE_SHEXP] = "ffn_gate_shexp",
    [ROLE_FFN_UP_SHEXP] = "ffn_up_shexp",
    [ROLE_FFN_DOWN_SHEXP] = "ffn_down_shexp",
    [ROLE_MOE_SHARED_GATE] = "moe_shared_gate",
    [ROLE_LAYER_SCALE] = "layer_scale",
    [ROLE_PLE_EMBED] = "ple_embed",
    [ROLE_PLE_PROJ] = "ple_proj",
    [ROLE_PLE_PROJ_NORM] = "ple_proj_norm",
    [ROLE_PLE_GATE] = "ple_gate",
    [ROLE_PLE_OUT] = "ple_out",
    [ROLE_PLE_POST_NORM] = "ple_post_norm",
    [ROLE_MTP_EH_PROJ] = "mtp_eh_proj",
    [ROLE_MTP_ENORM] = "mtp_enorm",
    [ROLE_MTP_HNORM] = "mtp_hnorm",
    [ROLE_MTP_HEAD_NORM] = "mtp_head_norm",
    [ROLE_ASSIST_PRE_PROJ] = "assist_pre_proj",
    [ROLE_ASSIST_POST_PROJ] = "assist_post_proj",
    [ROLE_MOE_GATE_UP_STACK] = "moe_gate_up_stack",
    [ROLE_MOE_DOWN_STACK] = "moe_down_stack",
    [ROLE_MOE_ROUTER_SCALE] = "moe_router_scale",
    [ROLE_MOE_EXPERT_SCALE] = "moe_expert_scale",
    [ROLE_FFN_PRE_NORM_2] = "ffn_pre_norm_2",
    [ROLE_FFN_POST_NORM_1] = "ffn_post_norm_1",
    [ROLE_FFN_POST_NORM_2] = "ffn_post_norm_2",
};

const char *role_name(tensor_role r)
{
    return (r >= 0 && r < ROLE_COUNT) ? role_names[r] : "?";
}

int role_is_expert(tensor_role r)
{
    return r == ROLE_MOE_GATE_EXPS || r == ROLE_MOE_UP_EXPS || r == ROLE_MOE_DOWN_EXPS;
}

int role_is_expert_stack(tensor_role r)
{
    return r == ROLE_MOE_GATE_UP_STACK || r == ROLE_MOE_DOWN_STACK;
}

const char *role_group(tensor_role r)
{
    switch (r) {
    case ROLE_EMBED:
        return "embed";
    case ROLE_OUTPUT:
        return "output";
    case ROLE_ROPE_FREQS:
        return "rope_freqs";
    case ROLE_ATTN_Q:
    case ROLE_ATTN_K:
    case ROLE_ATTN_V:
    case ROLE_ATTN_O:
    case ROLE_ATTN_Q_BIAS:
    case ROLE_ATTN_K_BIAS:
    case ROLE_ATTN_V_BIAS:
    case ROLE_ATTN_O_BIAS:
        return "attention";
    case ROLE_FFN_GATE:
    case ROLE_FFN_UP:
    case ROLE_FFN_DOWN:
    case ROLE_FFN_GATE_SHEXP:
    case ROLE_FFN_UP_SHEXP:
    case ROLE_FFN_DOWN_SHEXP:
        return "ffn";
    case ROLE_MOE_ROUTER:
    case ROLE_MOE_SHARED_GATE:
        return "moe_router";
    case ROLE_MOE_GATE_EXPS:
    case ROLE_MOE_UP_EXPS:
    case ROLE_MOE_DOWN_EXPS:
        return "moe_experts";
    case ROLE_OUTPUT_NORM:
    case ROLE_ATTN_NORM:
    case ROLE_ATTN_Q_NORM:
    case ROLE_ATTN_K_NORM:
    case ROLE_ATTN_POST_NORM:
    case ROLE_FFN_NORM:
    case ROLE_FFN_POST_NORM:
    case ROLE_SSM_NORM:
    case ROLE_PLE_PROJ_NORM:
    case ROLE_PLE_POST_NORM:
    case ROLE_LAYER_SCALE:
    case ROLE_FFN_PRE_NORM_2:
    case ROLE_FFN_POST_NORM_1:
    case ROLE_FFN_POST_NORM_2:
        return "norms";
    case ROLE_MOE_GATE_UP_STACK:
    case ROLE_MOE_DOWN_STACK:
        return "moe_experts";
    case ROLE_MOE_ROUTER_SCALE:
    case ROLE_MOE_EXPERT_SCALE:
        return "moe_router";
    case ROLE_PLE_EMBED:
    case ROLE_PLE_PROJ:
    case ROLE_PLE_GATE:
    case ROLE_PLE_OUT:
        return "per_layer_embed";
    case ROLE_SSM_QKV:
    case ROLE_SSM_Z:
    case ROLE_SSM_BETA:
    case ROLE_SSM_ALPHA:
    case ROLE_SSM_CONV:
    case ROLE_SSM_DT_BIAS:
    case ROLE_SSM_A:
    case ROLE_SSM_OUT:
        return "recurrent";
    case ROLE_MTP_EH_PROJ:
    case ROLE_ASSIST_PRE_PROJ:
    case ROLE_ASSIST_POST_PROJ:
        return "mtp";
    case ROLE_MTP_ENORM:
    case ROLE_MTP_HNORM:
    case ROLE_MTP_HEAD_NORM:
        return "norms";
    case ROLE_COUNT:
        break;
    }
    return "?";
}

/* ---- building ---- */

static contract_entry *new_entry(tensor_contract *k)
{
    if (k->n == k->cap) {
        k->cap = k->cap ? 2 * k->cap : 64;
        k->entries = xrealloc(k->entries, (size_t)k->cap * sizeof *k->entries);
    }
    contract_entry *e = &k->entries[k->n++];
    memset(e, 0, sizeof *e);
    e->expert = -1;
    return e;
}

static void gguf_full_name(int layer, const char *gguf_name, char *out, size_t n)
{
    int len = layer < 0 ? snprintf(out, n, "%s", gguf_name)
                        : snprintf(out, n, "blk.%d.%s", layer, gguf_name);
    MEMRA_ASSERT(len > 0 && (size_t)len < n);
}

/* The HF name of an MTP block's tensor (layer >= k->mtp_first): the
 * family's own name for the block's tensors (mtp_names), else the layer
 * tensor's name with model.layers.0. turned into the family's
 * mtp_hf_prefix and the block's index. */
static int mtp_hf_name(const tensor_contract *k, int layer, const char *gguf_name, int expert,
                       char *out, size_t n)
{
    const model_family_desc *d = family_desc(k->family);
    MEMRA_ASSERT(d && d->mtp_hf_prefix);
    for (size_t i = 0; i < d->n_mtp_names; i++)
        if (strcmp(gguf_name, d->mtp_names[i].gguf) == 0)
            return snprintf(out, n, "%s", d->mtp_names[i].hf) < (int)n ? 0 : -1;
    char g0[CONTRACT_NAME_MAX], h0[CONTRACT_NAME_MAX];
    static const char layer0[] = "model.layers.0.";
    snprintf(g0, sizeof g0, "blk.0.%s", gguf_name);
    if (tensor_name_gguf_to_hf(k->family, g0, expert, h0, sizeof h0) != 0 ||
        strncmp(h0, layer0, sizeof layer0 - 1) != 0)
        return -1;
    int len = snprintf(out, n, "%s%d.%s", d->mtp_hf_prefix, layer - (int)k->mtp_first,
                       h0 + sizeof layer0 - 1);
    return len > 0 && (size_t)len < n ? 0 : -1;
}

/* One entry, named in the contract's naming. A name the HF scheme lacks
 * (rope_freqs) is left out of HF contracts: HF checkpoints never hold it. */
static void add_entry(tensor_contract *k, tensor_role role, int layer, const char *gguf_name,
                      int expert, int n_dims, const int64_t *shape, unsigned flags,
                      int xform_heads)
{
    char gname[CONTRACT_NAME_MAX], name[CONTRACT_NAME_MAX];
    gguf_full_name(layer, gguf_name, gname, sizeof gname);
    if (k->naming == CKPT_HF && layer >= k->mtp_first) {
        int rc = mtp_hf_name(k, layer, gguf_name, expert, name, sizeof name);
        MEMRA_ASSERT(rc == 0); /* a family table bug otherwise */
    } else if (k->naming == CKPT_HF) {
        if (tensor_name_gguf_to_hf(k->family, gname, expert, name, sizeof name) != 0) {
            /* Only GGUF-only tensors may lack an HF name; anything else is a
             * table bug. */
            MEMRA_ASSERT(flags & CE_GENERATED);
            return;
        }
    } else {
        memcpy(name, gname, sizeof name);
    }
    contract_entry *e = new_entry(k);
    memcpy(e->name, name, sizeof e->name);
    e->role = role;
    e->layer = layer;
    e->expert = k->naming == CKPT_HF ? expert : -1;
    e->n_dims = n_dims;
    for (int i = 0; i < n_dims; i++)
        e->shape[i] = shape[i];
    if ((flags & CE_HF_ROW1) && k->naming == CKPT_HF && n_dims == 1) {
        e->n_dims = 2;
        e->shape[1] = shape[0];
        e->shape[0] = 1;
    }
    if ((flags & CE_HF_MID1) && k->naming == CKPT_HF && n_dims == 2) {
        e->n_dims = 3;
        e->shape[2] = shape[1];
        e->shape[1] = 1;
    }
    e->optional = (flags & CE_OPTIONAL) != 0;
    e->generated = (flags & CE_GENERATED) != 0;
    if (flags & CE_NORM_SHIFT)
        e->xform = XFORM_NORM_SHIFT;
    else if (flags & CE_NEG_EXP)
        e->xform = XFORM_NEG_EXP;
    else if (flags & CE_ROPE_PERMUTE)
        e->xform = XFORM_ROPE_PERMUTE;
    e->xform_heads = (flags & CE_ROPE_PERMUTE) ? xform_heads : 0;
}

void contract_add_1d(tensor_contract *k, tensor_role role, int layer, const char *gguf_name,
                     int64_t n, unsigned flags, int xform_heads)
{
    add_entry(k, role, layer, gguf_name, -1, 1, &n, flags, xform_heads);
}

void contract_add_2d(tensor_contract *k, tensor_role role, int layer, const char *gguf_name,
                     int64_t rows, int64_t cols, unsigned flags, int xform_heads)
{
    int64_t shape[2] = {rows, cols};
    add_entry(k, role, layer, gguf_name, -1, 2, shape, flags, xform_heads);
}

void contract_set_vtile(tensor_contract *k, int n_k, int n_v, int64_t offset, int64_t width,
                        int cols)
{
    MEMRA_ASSERT(k->n > 0);
    if (n_k == n_v)
        return;
    k->entries[k->n - 1].vtile = (tensor_vtile){n_k, n_v, offset, width, cols};
}

void contract_add_3d(tensor_contract *k, tensor_role role, int layer, const char *gguf_name,
                     int64_t d0, int64_t d1, int64_t d2)
{
    int64_t shape[3] = {d0, d1, d2};
    add_entry(k, role, layer, gguf_name, -1, 3, shape, 0, 0);
}

void contract_add_experts(tensor_contract *k, tensor_role role, int layer,
                          const char *gguf_name, int64_t n_experts, int64_t rows, int64_t cols)
{
    if (k->naming == CKPT_GGUF) {
        int64_t shape[3] = {n_experts, rows, cols};
        add_entry(k, role, layer, gguf_name, -1, 3, shape, 0, 0);
        return;
    }
    int64_t shape[2] = {rows, cols};
    for (int64_t x = 0; x < n_experts; x++)
        add_entry(k, role, layer, gguf_name, (int)x, 2, shape, 0, 0);
}

void contract_add_mtp(tensor_contract *k, const model_config *c, unsigned norm_flags)
{
    int l = (int)c->n_layers;
    unsigned opt = CE_OPTIONAL;
    contract_add_2d(k, ROLE_MTP_EH_PROJ, l, "nextn.eh_proj.weight", c->dim, 2 * c->dim, opt, 0);
    contract_add_1d(k, ROLE_MTP_ENORM, l, "nextn.enorm.weight", c->dim, opt | norm_flags, 0);
    contract_add_1d(k, ROLE_MTP_HNORM, l, "nextn.hnorm.weight", c->dim, opt | norm_flags, 0);
    contract_add_1d(k, ROLE_MTP_HEAD_NORM, l, "nextn.shared_head_norm.weight", c->dim,
                    opt | norm_flags, 0);
}

void contract_add_globals(tensor_contract *k, const model_config *c, unsigned norm_flags)
{
    contract_add_2d(k, ROLE_EMBED, -1, "token_embd.weight", c->n_vocab, c->dim, 0, 0);
    contract_add_1d(k, ROLE_OUTPUT_NORM, -1, "output_norm.weight", c->dim, norm_flags, 0);
    contract_add_2d(k, ROLE_OUTPUT, -1, "output.weight", c->n_vocab, c->dim,
                    c->tie_embeddings ? CE_OPTIONAL : 0, 0);
}

/* Index the entries by name and by (role, layer) so binding and lookups
 * stay linear in the number of tensors (Qwen3-30B-A3B has ~19k in HF). */
static void build_indexes(tensor_contract *k)
{
    uint32_t cap = 64;
    while (cap < 2u * (uint32_t)k->n)
        cap *= 2;
    k->hash_cap = cap;
    k->hash = xmalloc(cap * sizeof *k->hash);
    for (uint32_t i = 0; i < cap; i++)
        k->hash[i] = -1;
    for (int i = 0; i < k->n; i++) {
        uint32_t h = hash_fnv1a32_str(k->entries[i].name) & (cap - 1);
        while (k->hash[h] >= 0) {
            /* Two entries of one name would be a family-file bug. */
            MEMRA_ASSERT(strcmp(k->entries[k->hash[h]].name, k->entries[i].name) != 0);
            h = (h + 1) & (cap - 1);
        }
        k->hash[h] = i;
    }
    size_t nfirst = (size_t)(k->n_layers + 1) * ROLE_COUNT;
    k->first = xmalloc(nfirst * sizeof *k->first);
    for (size_t i = 0; i < nfirst; i++)
        k->first[i] = -1;
    for (int i = 0; i < k->n; i++) {
        const contract_entry *e = &k->entries[i];
        MEMRA_ASSERT(e->layer >= -1 && e->layer < k->n_layers);
        size_t slot = (size_t)(e->layer + 1) * ROLE_COUNT + e->role;
        if (k->first[slot] < 0)
            k->first[slot] = i;
    }
}

int contract_build(const model_config *c, checkpoint_format naming, tensor_contract *out,
                   memra_err *err)
{
    memset(out, 0, sizeof *out);
    out->family = c->family;
    out->naming = naming;
    out->n_layers = c->n_layers + (c->mtp_layers > 0 ? c->mtp_layers : 0);
    out->mtp_first = c->n_layers;
    if (c->n_layers <= 0 || c->n_layers > 100000)
        return memra_fail(err, "contract: %" PRId64 " layers is out of range", c->n_layers);
    /* config_from_* bound each size; bound the entry count too (HF names
     * every expert), so a merely implausible config cannot exhaust memory. */
    double per_layer = 24.0 + (naming == CKPT_HF ? 3.0 * (double)c->n_experts : 3.0);
    if ((double)c->n_layers * per_layer > 1e7)
        return memra_fail(err, "contract: %" PRId64 " layers of %" PRId64 " experts would be "
                          "over 10 million tensors", c->n_layers, c->n_experts);
    const model_family_desc *fam = family_desc(c->family);
    if (!fam || !fam->contract)
        return memra_fail(err, "contract: no tensor contract for family %d", (int)c->family);
    fam->contract(c, out);
    if (c->mtp_layers > 0) {
        /* the family's block tensors are required like its layers'; the
         * block as a whole is optional (contract_bind) */
        for (int i = 0; i < out->n; i++)
            if (out->entries[i].layer >= out->mtp_first)
                out->entries[i].optional = 1;
    }
    build_indexes(out);
    return 0;
}

void contract_free(tensor_contract *k)
{
    free(k->entries);
    free(k->first);
    free(k->hash);
    memset(k, 0, sizeof *k);
}

static int find_index(const tensor_contract *k, const char *name)
{
    if (!k->hash_cap)
        return -1;
    uint32_t h = hash_fnv1a32_str(name) & (k->hash_cap - 1);
    while (k->hash[h] >= 0) {
        if (strcmp(k->entries[k->hash[h]].name, name) == 0)
            return k->hash[h];
        h = (h + 1) & (k->hash_cap - 1);
    }
    return -1;
}

const contract_entry *contract_find(const tensor_contract *k, const char *name)
{
    int i = find_index(k, name);
    return i < 0 ? NULL : &k->entries[i];
}

int contract_index(const tensor_contract *k, tensor_role role, int layer, int expert)
{
    if (role < 0 || role >= ROLE_COUNT || layer < -1 || layer >= k->n_layers || !k->first)
        return -1;
    int i = k->first[(size_t)(layer + 1) * ROLE_COUNT + role];
    if (i < 0)
        return -1;
    if (expert < 0)
        return k->entries[i].expert < 0 ? i : -1;
    /* Per-expert entries of one role and layer are added consecutively. */
    if (expert >= k->n - i)
        return -1;
    const contract_entry *e = &k->entries[i + expert];
    return (e->role == role && e->layer == layer && e->expert == expert) ? i + expert : -1;
}

/* ---- binding ---- */

static void format_shape(char *out, size_t n, int n_dims, const int64_t *shape)
{
    size_t len = 0;
    len += (size_t)snprintf(out, n, "[");
    for (int i = 0; i < n_dims && len < n; i++)
        len += (size_t)snprintf(out + len, n - len, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (len < n)
        snprintf(out + len, n - len, "]");
}

static int same_shape(const contract_entry *e, const tensor_view *t)
{
    if (e->n_dims != t->n_dims)
        return 0;
    for (int i = 0; i < e->n_dims; i++)
        if (e->shape[i] != t->shape[i])
            return 0;
    return 1;
}

/* A tensor an HF checkpoint may carry that is not run: rotary tables, and
 * what the family lists (a vision tower, an MTP block). */
static int hf_ignored(model_family f, const char *name)
{
    if (tensor_name_hf_is_ignorable(name))
        return 1;
    const model_family_desc *d = family_desc(f);
    for (size_t i = 0; i < d->n_hf_ignored; i++)
        if (strncmp(name, d->hf_ignored[i], strlen(d->hf_ignored[i])) == 0)
            return 1;
    return 0;
}

/* A tensor a GGUF may carry that is not run (what the family lists). */
static int gguf_ignored(model_family f, const char *name)
{
    const model_family_desc *d = family_desc(f);
    for (size_t i = 0; i < d->n_gguf_ignored; i++)
        if (strncmp(name, d->gguf_ignored[i], strlen(d->gguf_ignored[i])) == 0)
            return 1;
    return 0;
}

int contract_bind(const model_config *c, checkpoint_format naming, const tensor_view *t, int n,
                  contract_binding *out, memra_err *err)
{
    memset(out, 0, sizeof *out);
    if (contract_build(c, naming, &out->contract, err) != 0)
        return -1;
    tensor_contract *k = &out->contract;
    out->bound = xcalloc((size_t)k->n + 1, sizeof *out->bound);
    const char *fam = family_name(c->family);
    for (int i = 0; i < n; i++) {
        const tensor_view *v = &t[i];
        const char *name = v->name ? v->name : "";
        int idx = find_index(k, name);
        if (idx < 0 && (naming == CKPT_HF ? hf_ignored(c->family, name)
                                          : gguf_ignored(c->family, name))) {
            out->n_ignored++;
            continue;
        }
        if (idx < 0) {
            memra_fail(err, "tensor '%s' is not part of the %s tensor contract (unknown tensor)",
                       name, fam);
            goto fail;
        }
        const contract_entry *e = &k->entries[idx];
        if (out->bound[idx]) {
            memra_fail(err, "tensor '%s' appears more than once", name);
            goto fail;
        }
        if (!same_shape(e, v)) {
            char want[160], got[160];
            format_shape(want, sizeof want, e->n_dims, e->shape);
            int nd = v->n_dims < 0 ? 0 : v->n_dims > TENSOR_MAX_DIMS ? TENSOR_MAX_DIMS : v->n_dims;
            format_shape(got, sizeof got, nd, v->shape);
            memra_fail(err, "tensor '%s' (%s): shape %s, but the %s config expects %s", name,
                       role_name(e->role), got, fam, want);
            goto fail;
        }
        out->bound[idx] = v;
    }
    /* An MTP block is bound whole or not at all (a checkpoint saved by
     * transformers drops it while its config still names it). */
    int mtp_bound = 0, mtp_missing = -1;
    for (int i = 0; i < k->n; i++) {
        if (k->entries[i].layer < k->mtp_first)
            continue;
        if (out->bound[i])
            mtp_bound++;
        else if (mtp_missing < 0)
            mtp_missing = i;
    }
    if (mtp_bound && mtp_missing >= 0) {
        const contract_entry *e = &k->entries[mtp_missing];
        memra_fail(err, "missing tensor '%s' (%s) of the MTP block: the checkpoint holds %d of "
                   "its tensors, not all", e->name, role_name(e->role), mtp_bound);
        goto fail;
    }
    out->has_mtp = mtp_bound > 0;
    for (int i = 0; i < k->n; i++) {
        const contract_entry *e = &k->entries[i];
        if (!out->bound[i] && !e->optional) {
            char want[160];
            format_shape(want, sizeof want, e->n_dims, e->shape);
            memra_fail(err, "missing tensor '%s' (%s, shape %s) required by the %s contract",
                       e->name, role_name(e->role), want, fam);
            goto fail;
        }
    }
    return 0;
fail:
    contract_binding_free(out);
    return -1;
}

void contract_binding_free(contract_binding *b)
{
    free(b->bound);
    contract_free(&b->contract);
    memset(b, 0, sizeof *b);
}

const tensor_view *contract_get(const contract_binding *b, tensor_role role, int layer,
                                int expert)
{
    int i = contract_index(&b->contract, role, layer, expert);
    return i < 0 ? NULL : b->bound[i];
}

/* Floor of bytes * used / total without overflowing 64 bits. */
static uint64_t scaled(uint64_t bytes, uint64_t used, uint64_t total)
{
    if (!total)
        return bytes;
    return bytes / total * used + bytes % total * used / total;
}

int contract_entry_unused(const model_config *c, const contract_entry *e)
{
    if (e->layer >= c->n_layers)
        return 1; /* an MTP block */
    int kv = e->role == ROLE_ATTN_K || e->role == ROLE_ATTN_V || e->role == ROLE_ATTN_K_NORM;
    return kv && e->layer >= 0 && config_layer_kv_source(c, e->layer) != e->layer;
}

void contract_bytes_of(const contract_binding *b, const model_config *c, contract_bytes *out)
{
    memset(out, 0, sizeof *out);
    const tensor_contract *k = &b->contract;
    int tied_head = c->tie_embeddings && !contract_get(b, ROLE_OUTPUT, -1, -1);
    for (int i = 0; i < k->n; i++) {
        const tensor_view *v = b->bound[i];
        if (!v)
            continue;
        const contract_entry *e = &k->entries[i];
        out->by_role[e->role] += v->nbytes;
        out->total += v->nbytes;
        if (contract_entry_unused(c, e)) {
            /* bound, never read */
        } else if (e->role == ROLE_PLE_EMBED) {
            if (v->n_dims >= 1 && v->shape[0] > 0)
                out->per_token += v->nbytes / (uint64_t)v->shape[0];
        } else if (e->role == ROLE_EMBED) {
            /* Decode looks one row up, unless the same matrix is the head. */
            if (tied_head)
                out->per_token += v->nbytes;
            else if (v->n_dims >= 1 && v->shape[0] > 0)
                out->per_token += v->nbytes / (uint64_t)v->shape[0];
        } else if (role_is_expert(e->role) || role_is_expert_stack(e->role)) {
            out->per_token +=
                scaled(v->nbytes, (uint64_t)c->n_experts_used, (uint64_t)c->n_experts);
        } else {
            out->per_token += v->nbytes;
        }
    }
}

/* ---- transforms ---- */

int transform_rope_permute(const float *src, float *dst, int64_t rows, int64_t cols, int n_head,
                           int inverse)
{
    if (n_head <= 0 || rows <= 0 || cols <= 0 || rows % (2 * (int64_t)n_head) != 0)
        return -1;
    int64_t head_dim = rows / n_head, half = head_dim / 2;
    for (int64_t h = 0; h < n_head; h++) {
        for (int64_t i = 0; i < half; i++) {
            for (int64_t t = 0; t < 2; t++) {
                /* HF row (t, i) of the head <-> GGUF row (i, t). */
                int64_t hf_row = h * head_dim + t * half + i;
                int64_t gguf_row = h * head_dim + 2 * i + t;
                int64_t from = inverse ? gguf_row : hf_row, to = inverse ? hf_row : gguf_row;
                memcpy(dst + to * cols, src + from * cols, (size_t)cols * sizeof *dst);
            }
        }
    }
    return 0;
}

void transform_vtile(const tensor_vtile *t, const float *src, float *dst, int64_t rows,
                     int64_t cols, int inverse)
{
    memcpy(dst, src, (size_t)(rows * cols) * sizeof *dst);
    int r = t->n_v / t->n_k;
    for (int64_t p = 0; p < t->n_v; p++) {
        int64_t hf = (p % t->n_k) * r + p / t->n_k; /* GGUF head p is HF head hf */
        int64_t to = t->offset + (inverse ? hf : p) * t->width;
        int64_t from = t->offset + (inverse ? p : hf) * t->width;
        if (!t->cols) {
            memcpy(dst + to * cols, src + from * cols, (size_t)(t->width * cols) * sizeof *dst);
            continue;
        }
        for (int64_t i = 0; i < rows; i++)
            memcpy(dst + i * cols + to, src + i * cols + from, (size_t)t->width * sizeof *dst);
    }
}

void transform_norm_shift(const float *src, float *dst, int64_t n, float shift)
{
    for (int64_t i = 0; i < n; i++)
        dst[i] = src[i] + shift;
}

int contract_transform(const contract_entry *e, int to_gguf, const float *src, float *dst,
                       int64_t n_elements, memra_err *err)
{
    int64_t want = 1;
    for (int i = 0; i < e->n_dims; i++)
        want *= e->shape[i];
    if (n_elements != want)
        return memra_fail(err, "tensor '%s': %" PRId64 " values, expected %" PRId64, e->name,
                          n_elements, want);
    if (e->xform == XFORM_NEG_EXP && !to_gguf)
        for (int64_t i = 0; i < n_elements; i++)
            if (!(src[i] < 0))
                return memra_fail(err, "tensor '%s': value %lld is %g, but -exp(A_log) is "
                                  "negative", e->name, (long long)i, (double)src[i]);
    if (e->vtile.n_k > 0) {
        /* the tiling and a value transform commute: tile, then transform in place */
        int64_t rows = e->shape[0], cols = n_elements / rows;
        const tensor_vtile *t = &e->vtile;
        int64_t span = t->offset + (int64_t)t->n_v * t->width;
        if (t->n_k <= 0 || t->n_v % t->n_k || span > (t->cols ? cols : rows))
            return memra_fail(err, "tensor '%s': %d value heads of %" PRId64 " do not fit its "
                              "%" PRId64 " x %" PRId64 " values", e->name, t->n_v, t->width,
                              rows, cols);
        transform_vtile(t, src, dst, rows, cols, !to_gguf);
        src = dst;
    }
    switch (e->xform) {
    case XFORM_NONE:
        if (src != dst)
            memcpy(dst, src, (size_t)n_elements * sizeof *dst);
        return 0;
    case XFORM_NEG_EXP:
        for (int64_t i = 0; i < n_elements; i++)
            dst[i] = to_gguf ? -expf(src[i]) : logf(-src[i]);
        return 0;
    case XFORM_NORM_SHIFT:
        transform_norm_shift(src, dst, n_elements, to_gguf ? 1.0f : -1.0f);
        return 0;
    case XFORM_ROPE_PERMUTE: {
        int64_t rows = e->shape[0], cols = n_elements / rows;
        if (transform_rope_permute(src, dst, rows, cols, e->xform_heads, !to_gguf) != 0)
            return memra_fail(err, "tensor '%s': %" PRId64 " rows do not split into %d heads of "
                              "even size", e->name, rows, e->xform_heads);
        return 0;
    }
    }
    return memra_fail(err, "tensor '%s': unknown transform %d", e->name, (int)e->xform);
}
