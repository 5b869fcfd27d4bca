/* Tensor contracts: HF <-> GGUF names both ways for every entry of every
 * family, stories260K.gguf binding in full, each binding failure with its
 * message, bytes per token, and the conversion transforms (llama.cpp's
 * Q/K permutation and gemma3's norm shift). */
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>

#include "core/check.h"
#include "core/json.h"
#include "format/gguf.h"
#include "model/tensor_names.h"
#include "model/config.h"
#include "model/contract.h"
#include "test.h"

#define FIXTURES "tests/fixtures/configs/"

static int load_fixture(const char *name, model_config *c)
{
    char path[512];
    memra_err err;
    snprintf(path, sizeof path, FIXTURES "%s", name);
    json_t *j = json_load_path(path, 1 << 20, &err);
    int rc = j ? config_from_hf(j, path, c, &err) : -1;
    if (rc != 0)
        fprintf(stderr, "  %s\n", err.msg);
    json_decref(j);
    return rc;
}

static const char *const family_fixtures[] = {
    "tiny-llama.json", "tiny-llama3.json",   "tiny-qwen2.json",    "tiny-qwen3.json",
    "tiny-qwen3-moe.json", "tiny-gemma3.json", "Llama-3.1-8B.json", "Qwen3-30B-A3B.json",
    "gemma-3-4b-it.json",  "Qwen2.5-7B.json", "tiny-qwen3_5.json", "Qwen3.5-9B.json",
    "tiny-qwen3_5-moe.json", "tiny-gemma4.json", "gemma-4-E2B-it.json", "gemma-4-31B-it.json",
    "tiny-gemma4-moe.json", "gemma-4-26B-A4B-it.json",
};
#define N_FAMILY_FIXTURES (int)(sizeof family_fixtures / sizeof family_fixtures[0])

static void test_names_known(void)
{
    char out[128];
    int ex;
    CHECK(tensor_name_hf_to_gguf(FAMILY_LLAMA, "model.embed_tokens.weight", out, sizeof out,
                                 &ex) == 0 && !strcmp(out, "token_embd.weight") && ex == -1);
    CHECK(tensor_name_hf_to_gguf(FAMILY_LLAMA, "lm_head.weight", out, sizeof out, &ex) == 0 &&
          !strcmp(out, "output.weight"));
    CHECK(tensor_name_hf_to_gguf(FAMILY_QWEN2, "model.norm.weight", out, sizeof out, NULL) == 0 &&
          !strcmp(out, "output_norm.weight"));
    /* post_attention_layernorm: the pre-FFN norm for llama, a post norm for gemma3 */
    CHECK(tensor_name_hf_to_gguf(FAMILY_LLAMA, "model.layers.3.post_attention_layernorm.weight",
                                 out, sizeof out, &ex) == 0 &&
          !strcmp(out, "blk.3.ffn_norm.weight"));
    CHECK(tensor_name_hf_to_gguf(FAMILY_GEMMA3, "model.layers.3.post_attention_layernorm.weight",
                                 out, sizeof out, &ex) == 0 &&
          !strcmp(out, "blk.3.post_attention_norm.weight"));
    CHECK(tensor_name_gguf_to_hf(FAMILY_GEMMA3, "blk.0.ffn_norm.weight", -1, out, sizeof out) ==
              0 && !strcmp(out, "model.layers.0.pre_feedforward_layernorm.weight"));
    CHECK(tensor_name_gguf_to_hf(FAMILY_GEMMA3, "blk.12.post_ffw_norm.weight", -1, out,
                                 sizeof out) == 0 &&
          !strcmp(out, "model.layers.12.post_feedforward_layernorm.weight"));
    CHECK(tensor_name_gguf_to_hf(FAMILY_QWEN3, "blk.7.attn_k_norm.weight", -1, out, sizeof out) ==
              0 && !strcmp(out, "model.layers.7.self_attn.k_norm.weight"));
    CHECK(tensor_name_gguf_to_hf(FAMILY_QWEN2, "blk.1.attn_v.bias", -1, out, sizeof out) == 0 &&
          !strcmp(out, "model.layers.1.self_attn.v_proj.bias"));
    CHECK(tensor_name_gguf_to_hf(FAMILY_LLAMA, "blk.0.attn_output.weight", -1, out, sizeof out) ==
              0 && !strcmp(out, "model.layers.0.self_attn.o_proj.weight"));
    /* qwen3_moe: router and merged experts */
    CHECK(tensor_name_hf_to_gguf(FAMILY_QWEN3_MOE, "model.layers.1.mlp.gate.weight", out,
                                 sizeof out, &ex) == 0 &&
          !strcmp(out, "blk.1.ffn_gate_inp.weight") && ex == -1);
    CHECK(tensor_name_hf_to_gguf(FAMILY_QWEN3_MOE, "model.layers.1.mlp.experts.5.gate_proj.weight",
                                 out, sizeof out, &ex) == 0 &&
          !strcmp(out, "blk.1.ffn_gate_exps.weight") && ex == 5);
    CHECK(tensor_name_gguf_to_hf(FAMILY_QWEN3_MOE, "blk.47.ffn_down_exps.weight", 127, out,
                                 sizeof out) == 0 &&
          !strcmp(out, "model.layers.47.mlp.experts.127.down_proj.weight"));
    CHECK(tensor_name_gguf_is_experts("blk.47.ffn_up_exps.weight"));
    CHECK(!tensor_name_gguf_is_experts("blk.47.ffn_up.weight"));
    /* gemma3 multimodal prefixes */
    CHECK(tensor_name_hf_to_gguf(FAMILY_GEMMA3, "language_model.model.layers.2.mlp.up_proj.weight",
                                 out, sizeof out, &ex) == 0 && !strcmp(out, "blk.2.ffn_up.weight"));
    CHECK(tensor_name_hf_to_gguf(FAMILY_GEMMA3, "model.language_model.embed_tokens.weight", out,
                                 sizeof out, &ex) == 0 && !strcmp(out, "token_embd.weight"));

    /* unknown or malformed: -1 */
    CHECK(tensor_name_gguf_to_hf(FAMILY_LLAMA, "blk.0.attn_q_norm.weight", -1, out, sizeof out) ==
          -1);
    CHECK(tensor_name_gguf_to_hf(FAMILY_LLAMA, "rope_freqs.weight", -1, out, sizeof out) == -1);
    CHECK(tensor_name_gguf_to_hf(FAMILY_QWEN3, "rope_freqs.weight", -1, out, sizeof out) == -1);
    CHECK(tensor_name_gguf_to_hf(FAMILY_QWEN3_MOE, "blk.1.ffn_gate_exps.weight", -1, out,
                                 sizeof out) == -1);
    CHECK(tensor_name_gguf_to_hf(FAMILY_QWEN3_MOE, "blk.1.ffn_gate_inp.weight", 3, out,
                                 sizeof out) == -1);
    CHECK(tensor_name_gguf_to_hf(FAMILY_LLAMA, "blk.01.attn_norm.weight", -1, out, sizeof out) ==
          -1);
    CHECK(tensor_name_gguf_to_hf(FAMILY_LLAMA, "blk.-1.attn_norm.weight", -1, out, sizeof out) ==
          -1);
    CHECK(tensor_name_gguf_to_hf(FAMILY_LLAMA, "blk.1234567890.attn_norm.weight", -1, out,
                                 sizeof out) == -1);
    CHECK(tensor_name_gguf_to_hf(FAMILY_LLAMA, "blk.0.attn_norm.weight", -1, out, 10) == -1);
    CHECK(tensor_name_hf_to_gguf(FAMILY_LLAMA, "model.layers.x.input_layernorm.weight", out,
                                 sizeof out, &ex) == -1);
    CHECK(tensor_name_hf_to_gguf(FAMILY_LLAMA, "model.layers.0.mlp.gate.weight", out, sizeof out,
                                 &ex) == -1);
    CHECK(tensor_name_hf_to_gguf(FAMILY_LLAMA, "language_model.model.norm.weight", out,
                                 sizeof out, &ex) == -1);
    CHECK(tensor_name_hf_to_gguf(FAMILY_QWEN3_MOE, "model.layers.0.mlp.experts.05.up_proj.weight",
                                 out, sizeof out, &ex) == -1);
    CHECK(tensor_name_hf_to_gguf(FAMILY_COUNT, "lm_head.weight", out, sizeof out, &ex) == -1);
    CHECK(tensor_name_hf_is_ignorable("model.layers.0.self_attn.rotary_emb.inv_freq"));
    CHECK(!tensor_name_hf_is_ignorable("model.layers.0.self_attn.q_proj.weight"));
}

/* Every contract entry maps to the other naming and back to itself. */
static void test_names_every_entry(void)
{
    for (int i = 0; i < N_FAMILY_FIXTURES; i++) {
        model_config c;
        memra_err err;
        tensor_contract g, h;
        CHECK(load_fixture(family_fixtures[i], &c) == 0);
        CHECK(contract_build(&c, CKPT_GGUF, &g, &err) == 0);
        CHECK(contract_build(&c, CKPT_HF, &h, &err) == 0);
        int n_exps = 0, n_generated = 0;
        for (int e = 0; e < g.n; e++) {
            const contract_entry *ce = &g.entries[e];
            char hf[128], back[128];
            int ex = -2;
            if (ce->generated) {
                n_generated++;
                CHECK(tensor_name_gguf_to_hf(c.family, ce->name, -1, hf, sizeof hf) == -1);
                continue;
            }
            int experts = role_is_expert(ce->role);
            n_exps += experts;
            CHECK((experts || role_is_expert_stack(ce->role)) ==
                  tensor_name_gguf_is_experts(ce->name));
            int n_try = experts ? (int)c.n_experts : 1;
            for (int x = 0; x < n_try; x++) {
                int want_ex = experts ? x : -1;
                int ok = tensor_name_gguf_to_hf(c.family, ce->name, want_ex, hf, sizeof hf) == 0;
                CHECK_MSG(ok, "%s: %s has no HF name", family_fixtures[i], ce->name);
                CHECK_MSG(contract_find(&h, hf) != NULL, "%s: %s -> %s is not in the HF contract",
                          family_fixtures[i], ce->name, hf);
                ok = ok && tensor_name_hf_to_gguf(c.family, hf, back, sizeof back, &ex) == 0;
                CHECK_MSG(ok && !strcmp(back, ce->name) && ex == want_ex, "%s: %s -> %s -> %s",
                          family_fixtures[i], ce->name, hf, back);
            }
        }
        for (int e = 0; e < h.n; e++) {
            const contract_entry *ce = &h.entries[e];
            char gg[128], back[128];
            int ex = -2;
            int ok = tensor_name_hf_to_gguf(c.family, ce->name, gg, sizeof gg, &ex) == 0;
            CHECK_MSG(ok && ex == ce->expert, "%s: %s", family_fixtures[i], ce->name);
            const contract_entry *ge = ok ? contract_find(&g, gg) : NULL;
            CHECK_MSG(ge != NULL, "%s: %s -> %s not in the GGUF contract", family_fixtures[i],
                      ce->name, gg);
            if (ge) {
                /* same role, layer and transform; same shape but for the expert dim */
                CHECK(ge->role == ce->role && ge->layer == ce->layer && ge->xform == ce->xform);
                int off = ge->n_dims - ce->n_dims;
                if (ce->role == ROLE_MOE_SHARED_GATE) {
                    /* HF keeps the shared expert's gate as [1][dim] */
                    CHECK(ce->n_dims == 2 && ce->shape[0] == 1 && ge->n_dims == 1 &&
                          ge->shape[0] == ce->shape[1]);
                    off = -1;
                } else if (ce->role == ROLE_SSM_CONV) {
                    /* HF keeps the depthwise conv as [channels][1][taps] */
                    CHECK(ce->n_dims == 3 && ce->shape[1] == 1 && ge->n_dims == 2 &&
                          ge->shape[0] == ce->shape[0] && ge->shape[1] == ce->shape[2]);
                    off = -1;
                } else {
                    CHECK(off == (ce->expert >= 0 ? 1 : 0));
                }
                for (int d = 0; d < ce->n_dims && off >= 0; d++)
                    CHECK(ge->shape[d + off] == ce->shape[d]);
            }
            ok = ok && tensor_name_gguf_to_hf(c.family, gg, ex, back, sizeof back) == 0;
            CHECK_MSG(ok && !strcmp(back, ce->name), "%s: %s -> %s -> %s", family_fixtures[i],
                      ce->name, gg, back);
        }
        CHECK(h.n == g.n - n_generated - n_exps + n_exps * (int)(c.n_experts ? c.n_experts : 1));
        contract_free(&g);
        contract_free(&h);
    }
}

static void test_contract_shapes(void)
{
    model_config c;
    memra_err err;
    tensor_contract k;
    /* Llama 3.1 8B: 3 globals + rope_freqs + 9 per layer */
    CHECK(load_fixture("Llama-3.1-8B.json", &c) == 0);
    CHECK(contract_build(&c, CKPT_GGUF, &k, &err) == 0);
    CHECK(k.n == 4 + 9 * 32);
    const contract_entry *e = contract_find(&k, "blk.31.attn_k.weight");
    CHECK(e && e->n_dims == 2 && e->shape[0] == 1024 && e->shape[1] == 4096);
    CHECK(e && e->role == ROLE_ATTN_K && e->layer == 31 && e->xform == XFORM_ROPE_PERMUTE &&
          e->xform_heads == 8);
    e = contract_find(&k, "blk.0.attn_q.weight");
    CHECK(e && e->xform_heads == 32 && e->shape[0] == 4096);
    e = contract_find(&k, "rope_freqs.weight");
    CHECK(e && e->optional && e->generated && e->n_dims == 1 && e->shape[0] == 64);
    e = contract_find(&k, "output.weight");
    CHECK(e && !e->optional && e->shape[0] == 128256 && e->shape[1] == 4096);
    e = contract_find(&k, "blk.5.ffn_down.weight");
    CHECK(e && e->shape[0] == 4096 && e->shape[1] == 14336 && e->xform == XFORM_NONE);
    CHECK(contract_index(&k, ROLE_FFN_DOWN, 5, -1) == (int)(e - k.entries));
    CHECK(contract_index(&k, ROLE_ATTN_Q_NORM, 5, -1) == -1);
    CHECK(contract_index(&k, ROLE_FFN_DOWN, 32, -1) == -1);
    contract_free(&k);

    /* Qwen3-30B-A3B in HF naming: per-expert entries, ~19k of them */
    CHECK(load_fixture("Qwen3-30B-A3B.json", &c) == 0);
    CHECK(contract_build(&c, CKPT_HF, &k, &err) == 0);
    CHECK(k.n == 3 + 48 * (4 + 2 + 2 + 1 + 3 * 128));
    e = contract_find(&k, "model.layers.40.mlp.experts.77.down_proj.weight");
    CHECK(e && e->role == ROLE_MOE_DOWN_EXPS && e->expert == 77 && e->shape[0] == 2048 &&
          e->shape[1] == 768);
    int idx = contract_index(&k, ROLE_MOE_DOWN_EXPS, 40, 77);
    CHECK(idx >= 0 && &k.entries[idx] == e);
    CHECK(contract_index(&k, ROLE_MOE_DOWN_EXPS, 40, 128) == -1);
    CHECK(contract_index(&k, ROLE_MOE_DOWN_EXPS, 40, -1) == -1);
    e = contract_find(&k, "model.layers.0.self_attn.q_norm.weight");
    CHECK(e && e->shape[0] == 128);
    e = contract_find(&k, "model.layers.0.self_attn.q_proj.weight");
    CHECK(e && e->shape[0] == 4096 && e->shape[1] == 2048 && e->xform == XFORM_NONE);
    contract_free(&k);
    CHECK(contract_build(&c, CKPT_GGUF, &k, &err) == 0);
    e = contract_find(&k, "blk.40.ffn_gate_exps.weight");
    CHECK(e && e->n_dims == 3 && e->shape[0] == 128 && e->shape[1] == 768 && e->shape[2] == 2048);
    e = contract_find(&k, "blk.40.ffn_gate_inp.weight");
    CHECK(e && e->role == ROLE_MOE_ROUTER && e->shape[0] == 128 && e->shape[1] == 2048);
    contract_free(&k);

    /* gemma3: norms shifted, output optional (tied) */
    CHECK(load_fixture("gemma-3-1b-it.json", &c) == 0);
    CHECK(contract_build(&c, CKPT_HF, &k, &err) == 0);
    CHECK(k.n == 3 + 26 * 13);
    e = contract_find(&k, "model.layers.4.pre_feedforward_layernorm.weight");
    CHECK(e && e->role == ROLE_FFN_NORM && e->xform == XFORM_NORM_SHIFT);
    e = contract_find(&k, "model.layers.4.self_attn.k_norm.weight");
    CHECK(e && e->xform == XFORM_NORM_SHIFT && e->shape[0] == 256);
    e = contract_find(&k, "model.norm.weight");
    CHECK(e && e->xform == XFORM_NORM_SHIFT);
    e = contract_find(&k, "lm_head.weight");
    CHECK(e && e->optional);
    e = contract_find(&k, "model.layers.4.self_attn.q_proj.weight");
    CHECK(e && e->xform == XFORM_NONE && e->shape[0] == 1024 && e->shape[1] == 1152);
    contract_free(&k);

    /* qwen2: q/k/v bias, no o bias, no permutation */
    CHECK(load_fixture("Qwen2.5-7B.json", &c) == 0);
    CHECK(contract_build(&c, CKPT_GGUF, &k, &err) == 0);
    e = contract_find(&k, "blk.0.attn_k.bias");
    CHECK(e && e->shape[0] == 512 && e->role == ROLE_ATTN_K_BIAS && e->xform == XFORM_NONE);
    CHECK(contract_find(&k, "blk.0.attn_output.bias") == NULL);
    CHECK(contract_find(&k, "blk.0.attn_q.weight")->xform == XFORM_NONE);
    contract_free(&k);

    CHECK(strcmp(role_name(ROLE_MOE_GATE_EXPS), "moe_gate_exps") == 0);
    CHECK(strcmp(role_group(ROLE_MOE_GATE_EXPS), "moe_experts") == 0);
    CHECK(strcmp(role_group(ROLE_ATTN_V_BIAS), "attention") == 0);
    CHECK(strcmp(role_group(ROLE_ATTN_POST_NORM), "norms") == 0);
    for (int r = 0; r < ROLE_COUNT; r++)
        CHECK(strcmp(role_name((tensor_role)r), "?") != 0 &&
              strcmp(role_group((tensor_role)r), "?") != 0);
}

/* ---- binding ---- */

typedef struct {
    gguf_file f;
    int n;
    tensor_view *v;
} gguf_views;

/* Views over a GGUF's tensors, outermost dim first (what checkpoint.c does). */
static int open_views(const char *path, gguf_views *g, memra_err *err)
{
    if (gguf_open(path, &g->f, err) != 0)
        return -1;
    g->n = (int)g->f.n_tensors;
    g->v = xcalloc((size_t)g->n + 1, sizeof *g->v);
    for (int i = 0; i < g->n; i++) {
        const gguf_tensor *t = &g->f.tensors[i];
        tensor_view *v = &g->v[i];
        v->name = t->name;
        v->type = t->type;
        v->n_dims = t->n_dims;
        v->n_elements = 1;
        for (int d = 0; d < t->n_dims; d++) {
            v->shape[d] = t->ne[t->n_dims - 1 - d];
            v->n_elements *= t->ne[d];
        }
        v->nbytes = t->nbytes;
        v->data = t->data;
    }
    return 0;
}

static void close_views(gguf_views *g)
{
    free(g->v);
    gguf_close(&g->f);
}

static void test_bind_stories(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_data_dir());
    if (!test_need_file(path))
        return;
    gguf_views g;
    memra_err err;
    model_config c;
    contract_binding b;
    CHECK_MSG(open_views(path, &g, &err) == 0, "%s", err.msg);
    CHECK(g.n == 48);
    CHECK_MSG(config_from_gguf(&g.f, &c, &err) == 0, "%s", err.msg);
    CHECK_MSG(contract_bind(&c, CKPT_GGUF, g.v, g.n, &b, &err) == 0, "%s", err.msg);
    CHECK(b.contract.n == 48 && b.n_ignored == 0);
    uint64_t total = 0, embed = 0;
    for (int i = 0; i < b.contract.n; i++) {
        CHECK_MSG(b.bound[i] != NULL, "%s unbound", b.contract.entries[i].name);
        if (b.bound[i])
            CHECK(strcmp(b.bound[i]->name, b.contract.entries[i].name) == 0);
    }
    for (int i = 0; i < g.n; i++) {
        total += g.v[i].nbytes;
        if (!strcmp(g.v[i].name, "token_embd.weight"))
            embed = g.v[i].nbytes;
    }
    const tensor_view *k2 = contract_get(&b, ROLE_ATTN_K, 2, -1);
    CHECK(k2 && !strcmp(k2->name, "blk.2.attn_k.weight") && k2->shape[0] == 32 &&
          k2->shape[1] == 64);
    CHECK(contract_get(&b, ROLE_FFN_DOWN, 4, -1) &&
          contract_get(&b, ROLE_FFN_DOWN, 4, -1)->shape[0] == 64);
    CHECK(contract_get(&b, ROLE_FFN_DOWN, 5, -1) == NULL);
    contract_bytes by;
    contract_bytes_of(&b, &c, &by);
    CHECK(by.total == total && embed == 512 * 64 * 4);
    CHECK(by.by_role[ROLE_EMBED] == embed && by.by_role[ROLE_ATTN_Q] == 5 * 64 * 64 * 4);
    CHECK(by.per_token == total - embed + 64 * 4);
    contract_binding_free(&b);

    /* ---- each failure, with its message ---- */
    tensor_view *v = xcalloc((size_t)g.n + 1, sizeof *v);
    /* missing */
    int n = 0;
    for (int i = 0; i < g.n; i++)
        if (strcmp(g.v[i].name, "blk.2.ffn_up.weight") != 0)
            v[n++] = g.v[i];
    CHECK(contract_bind(&c, CKPT_GGUF, v, n, &b, &err) == -1);
    CHECK_MSG(strstr(err.msg, "missing tensor 'blk.2.ffn_up.weight' (ffn_up, shape [172, 64])"),
              "%s", err.msg);
    CHECK(b.bound == NULL && b.contract.n == 0);
    /* unknown */
    memcpy(v, g.v, (size_t)g.n * sizeof *v);
    v[g.n] = g.v[5];
    v[g.n].name = "blk.0.attn_q_norm.weight";
    CHECK(contract_bind(&c, CKPT_GGUF, v, g.n + 1, &b, &err) == -1);
    CHECK_MSG(strstr(err.msg, "tensor 'blk.0.attn_q_norm.weight' is not part of the llama tensor "
                              "contract (unknown tensor)"), "%s", err.msg);
    /* a layer past the config's */
    v[g.n].name = "blk.5.attn_norm.weight";
    CHECK(contract_bind(&c, CKPT_GGUF, v, g.n + 1, &b, &err) == -1 &&
          strstr(err.msg, "'blk.5.attn_norm.weight' is not part of"));
    /* duplicate */
    v[g.n] = g.v[7];
    CHECK(contract_bind(&c, CKPT_GGUF, v, g.n + 1, &b, &err) == -1);
    CHECK_MSG(strstr(err.msg, "appears more than once") && strstr(err.msg, g.v[7].name), "%s",
              err.msg);
    /* wrong shape */
    for (int i = 0; i < g.n; i++)
        if (!strcmp(v[i].name, "blk.1.attn_k.weight"))
            v[i].shape[0] = 64;
    CHECK(contract_bind(&c, CKPT_GGUF, v, g.n, &b, &err) == -1);
    CHECK_MSG(strstr(err.msg, "tensor 'blk.1.attn_k.weight' (attn_k): shape [64, 64], but the "
                              "llama config expects [32, 64]"), "%s", err.msg);
    /* wrong rank */
    memcpy(v, g.v, (size_t)g.n * sizeof *v);
    for (int i = 0; i < g.n; i++)
        if (!strcmp(v[i].name, "output_norm.weight")) {
            v[i].n_dims = 2;
            v[i].shape[1] = 1;
        }
    CHECK(contract_bind(&c, CKPT_GGUF, v, g.n, &b, &err) == -1 &&
          strstr(err.msg, "shape [64, 1], but the llama config expects [64]"));
    /* the same tensors under HF naming are all unknown */
    CHECK(contract_bind(&c, CKPT_HF, g.v, g.n, &b, &err) == -1 &&
          strstr(err.msg, "unknown tensor"));
    /* a config that says tied: output.weight becomes optional, binding still fine */
    memcpy(v, g.v, (size_t)g.n * sizeof *v);
    model_config tied = c;
    tied.tie_embeddings = 1;
    n = 0;
    for (int i = 0; i < g.n; i++)
        if (strcmp(g.v[i].name, "output.weight") != 0)
            v[n++] = g.v[i];
    CHECK(contract_bind(&tied, CKPT_GGUF, v, n, &b, &err) == 0);
    CHECK(contract_get(&b, ROLE_OUTPUT, -1, -1) == NULL);
    contract_bytes_of(&b, &tied, &by);
    /* the embedding is read in full as the head */
    CHECK(by.per_token == by.total);
    contract_binding_free(&b);
    free(v);
    close_views(&g);
}

/* Views named and shaped from a contract (data is not looked at by binding). */
static tensor_view *views_from_contract(const tensor_contract *k, int *n, int skip_optional)
{
    tensor_view *v = xcalloc((size_t)k->n + 2, sizeof *v);
    int m = 0;
    for (int i = 0; i < k->n; i++) {
        const contract_entry *e = &k->entries[i];
        if (skip_optional && e->optional)
            continue;
        tensor_view *t = &v[m++];
        t->name = e->name;
        t->type = DT_F32;
        t->n_dims = e->n_dims;
        t->n_elements = 1;
        for (int d = 0; d < e->n_dims; d++) {
            t->shape[d] = e->shape[d];
            t->n_elements *= e->shape[d];
        }
        t->nbytes = (uint64_t)t->n_elements * 4;
    }
    *n = m;
    return v;
}

static void test_bind_every_family(void)
{
    for (int i = 0; i < N_FAMILY_FIXTURES; i++) {
        model_config c;
        memra_err err;
        CHECK(load_fixture(family_fixtures[i], &c) == 0);
        if (c.dim > 256) /* the tiny ones: real sizes would not matter here */
            continue;
        for (int naming = CKPT_GGUF; naming <= CKPT_HF; naming++) {
            tensor_contract k;
            contract_binding b;
            CHECK(contract_build(&c, (checkpoint_format)naming, &k, &err) == 0);
            int n;
            tensor_view *v = views_from_contract(&k, &n, 1);
            if (naming == CKPT_HF) /* an old checkpoint's rotary buffer is skipped */
                v[n++] = (tensor_view){.name = "model.layers.0.self_attn.rotary_emb.inv_freq",
                                       .type = DT_F32, .n_dims = 1, .shape = {8}};
            int rc = contract_bind(&c, (checkpoint_format)naming, v, n, &b, &err);
            CHECK_MSG(rc == 0, "%s/%d: %s", family_fixtures[i], naming, err.msg);
            if (rc == 0) {
                CHECK(b.n_ignored == (naming == CKPT_HF));
                contract_bytes by;
                contract_bytes_of(&b, &c, &by);
                uint64_t want = 0, total = 0;
                for (int t = 0; t < n; t++) {
                    const contract_entry *e = contract_find(&k, v[t].name);
                    if (!e)
                        continue;
                    total += v[t].nbytes;
                    if (e->role == ROLE_EMBED)
                        want += c.tie_embeddings ? v[t].nbytes : v[t].nbytes / (uint64_t)c.n_vocab;
                    else if (e->role == ROLE_PLE_EMBED)
                        want += v[t].nbytes / (uint64_t)c.ple_vocab;
                    else if (e->layer >= 0 && config_layer_kv_source(&c, e->layer) != e->layer &&
                             (e->role == ROLE_ATTN_K || e->role == ROLE_ATTN_V ||
                              e->role == ROLE_ATTN_K_NORM))
                        continue; /* a shared layer's own K/V: never read */
                    else if (role_is_expert(e->role) || role_is_expert_stack(e->role))
                        want += v[t].nbytes / (uint64_t)c.n_experts * (uint64_t)c.n_experts_used;
                    else
                        want += v[t].nbytes;
                }
                CHECK(by.total == total);
                CHECK_MSG(by.per_token == want, "%s: per token %" PRIu64 " want %" PRIu64,
                          family_fixtures[i], by.per_token, want);
                if (c.family == FAMILY_QWEN3_MOE)
                    CHECK(by.by_role[ROLE_MOE_UP_EXPS] == 2 * 8 * 32 * 64 * 4);
                contract_binding_free(&b);
            }
            free(v);
            contract_free(&k);
        }
    }
}

/* A gemma4 assistant in GGUF is llama.cpp's gemma4-assistant: no K/V
 * projections (its layers read the model's), the centroid head's tensors
 * skipped; in HF its K/V projections may be there, unused. */
static void test_bind_assistant_gguf(void)
{
    memra_err err;
    json_t *j = json_load_path("tests/fixtures/parity/configs/tiny-gemma4-assistant.json",
                               1 << 20, &err);
    model_config c;
    CHECK_MSG(j && config_from_hf(j, "a.json", &c, &err) == 0, "%s", err.msg);
    json_decref(j);
    if (!config_is_assistant(&c))
        return;
    tensor_contract gk, hk;
    CHECK(contract_build(&c, CKPT_GGUF, &gk, &err) == 0);
    CHECK(contract_build(&c, CKPT_HF, &hk, &err) == 0);
    int kv_gguf = 0, kv_hf = 0;
    for (int i = 0; i < gk.n; i++)
        kv_gguf += gk.entries[i].role == ROLE_ATTN_K || gk.entries[i].role == ROLE_ATTN_V ||
                   gk.entries[i].role == ROLE_ATTN_K_NORM;
    for (int i = 0; i < hk.n; i++)
        kv_hf += hk.entries[i].role == ROLE_ATTN_K || hk.entries[i].role == ROLE_ATTN_K_NORM;
    CHECK(kv_gguf == 0 && kv_hf == 2 * (int)c.n_layers);
    int n;
    tensor_view *v = views_from_contract(&gk, &n, 1);
    v[n++] = (tensor_view){.name = "masked_embd_centroids.weight", .type = DT_F32, .n_dims = 2,
                           .shape = {8, 32}, .n_elements = 256, .nbytes = 1024};
    contract_binding b;
    int rc = contract_bind(&c, CKPT_GGUF, v, n, &b, &err);
    CHECK_MSG(rc == 0, "%s", err.msg);
    if (rc == 0) {
        CHECK(b.n_ignored == 1);
        contract_binding_free(&b);
    }
    v[n - 1].name = "blk.0.attn_k.weight"; /* llama.cpp's loader takes no such tensor */
    CHECK(contract_bind(&c, CKPT_GGUF, v, n, &b, &err) == -1 && strstr(err.msg, "attn_k"));
    free(v);
    contract_free(&gk);
    contract_free(&hk);
}

/* ---- transforms ---- */

static void test_rope_permute_by_hand(void)
{
    /* 2 heads of 4 rows, one column: per head, HF rows (x0 x1 | y0 y1)
     * become interleaved pairs (x0 y0 x1 y1). */
    float src[8] = {0, 1, 2, 3, 4, 5, 6, 7}, dst[8], back[8];
    CHECK(transform_rope_permute(src, dst, 8, 1, 2, 0) == 0);
    const float want[8] = {0, 2, 1, 3, 4, 6, 5, 7};
    CHECK(memcmp(dst, want, sizeof want) == 0);
    CHECK(transform_rope_permute(dst, back, 8, 1, 2, 1) == 0);
    CHECK(memcmp(back, src, sizeof src) == 0);
    /* one head of 6 rows, 2 columns: rows 0 3 1 4 2 5 */
    float s2[12], d2[12];
    for (int i = 0; i < 12; i++)
        s2[i] = (float)(10 * (i / 2) + i % 2);
    CHECK(transform_rope_permute(s2, d2, 6, 2, 1, 0) == 0);
    const int order[6] = {0, 3, 1, 4, 2, 5};
    for (int r = 0; r < 6; r++)
        CHECK(d2[2 * r] == (float)(10 * order[r]) && d2[2 * r + 1] == (float)(10 * order[r] + 1));
    /* rows that do not split into heads of even size */
    CHECK(transform_rope_permute(s2, d2, 6, 2, 2, 0) == -1);
    CHECK(transform_rope_permute(s2, d2, 6, 2, 0, 0) == -1);
}

static void test_rope_permute_inverse(void)
{
    const int64_t heads = 8, hd = 16, rows = heads * hd, cols = 24;
    float *src = xmalloc((size_t)(rows * cols) * sizeof *src);
    float *mid = xmalloc((size_t)(rows * cols) * sizeof *mid);
    float *back = xmalloc((size_t)(rows * cols) * sizeof *back);
    uint32_t s = 12345;
    for (int64_t i = 0; i < rows * cols; i++) {
        s = s * 1664525u + 1013904223u;
        src[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    CHECK(transform_rope_permute(src, mid, rows, cols, (int)heads, 0) == 0);
    CHECK(memcmp(src, mid, (size_t)(rows * cols) * sizeof *src) != 0);
    CHECK(transform_rope_permute(mid, back, rows, cols, (int)heads, 1) == 0);
    CHECK(memcmp(src, back, (size_t)(rows * cols) * sizeof *src) == 0);
    /* and the other way round */
    CHECK(transform_rope_permute(src, mid, rows, cols, (int)heads, 1) == 0);
    CHECK(transform_rope_permute(mid, back, rows, cols, (int)heads, 0) == 0);
    CHECK(memcmp(src, back, (size_t)(rows * cols) * sizeof *src) == 0);
    free(src);
    free(mid);
    free(back);
}

static void test_contract_transform(void)
{
    model_config c;
    memra_err err;
    tensor_contract k;
    CHECK(load_fixture("tiny-llama.json", &c) == 0);
    c.attn_bias = 1;
    CHECK(contract_build(&c, CKPT_HF, &k, &err) == 0);
    const contract_entry *e = contract_find(&k, "model.layers.1.self_attn.k_proj.weight");
    CHECK(e && e->xform == XFORM_ROPE_PERMUTE && e->xform_heads == 2);
    float src[32 * 64], mid[32 * 64], back[32 * 64];
    for (int i = 0; i < 32 * 64; i++)
        src[i] = (float)i;
    CHECK(contract_transform(e, 1, src, mid, 32 * 64, &err) == 0);
    /* head 0, GGUF row 1 is HF row 8 (head_dim 16: pair (x0, y0)) */
    CHECK(mid[1 * 64] == src[8 * 64] && mid[0] == src[0] && mid[2 * 64] == src[1 * 64]);
    CHECK(contract_transform(e, 0, mid, back, 32 * 64, &err) == 0);
    CHECK(memcmp(src, back, sizeof src) == 0);
    CHECK(contract_transform(e, 1, src, mid, 100, &err) == -1 &&
          strstr(err.msg, "100 values, expected 2048"));
    e = contract_find(&k, "model.layers.0.self_attn.q_proj.bias");
    CHECK(e && e->xform == XFORM_ROPE_PERMUTE && e->xform_heads == 4);
    CHECK(contract_transform(e, 1, src, mid, 64, &err) == 0 && mid[1] == src[8]);
    e = contract_find(&k, "model.layers.0.self_attn.v_proj.weight");
    CHECK(e && contract_transform(e, 1, src, mid, 32 * 64, &err) == 0 &&
          memcmp(src, mid, 32 * 64 * sizeof *src) == 0);
    contract_free(&k);

    CHECK(load_fixture("tiny-gemma3.json", &c) == 0);
    CHECK(contract_build(&c, CKPT_GGUF, &k, &err) == 0);
    e = contract_find(&k, "blk.1.post_ffw_norm.weight");
    float w[64], s1[64], r1[64];
    for (int i = 0; i < 64; i++)
        w[i] = 0.25f * (float)(i - 32);
    CHECK(e && contract_transform(e, 1, w, s1, 64, &err) == 0);
    CHECK(s1[0] == w[0] + 1.0f && s1[63] == w[63] + 1.0f);
    CHECK(contract_transform(e, 0, s1, r1, 64, &err) == 0 && memcmp(w, r1, sizeof w) == 0);
    e = contract_find(&k, "blk.1.attn_q.weight");
    CHECK(e && e->xform == XFORM_NONE);
    contract_free(&k);

    /* qwen3_5 (2 key / 4 value heads of 16): A as -exp(A_log) with the
     * value heads tiled (GGUF head p is HF head (p % 2) * 2 + p / 2), and the
     * tiling of out_proj's columns; both undone exactly */
    CHECK(load_fixture("tiny-qwen3_5.json", &c) == 0);
    CHECK(contract_build(&c, CKPT_GGUF, &k, &err) == 0);
    e = contract_find(&k, "blk.0.ssm_a");
    CHECK(e && e->xform == XFORM_NEG_EXP && e->vtile.n_k == 2 && e->vtile.n_v == 4);
    float a_log[4] = {0.0f, 0.5f, 1.0f, 1.5f}, a[4], a_back[4];
    CHECK(e && contract_transform(e, 1, a_log, a, 4, &err) == 0);
    CHECK(a[0] == -expf(a_log[0]) && a[1] == -expf(a_log[2]) && a[2] == -expf(a_log[1]) &&
          a[3] == -expf(a_log[3]));
    CHECK(contract_transform(e, 0, a, a_back, 4, &err) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(fabsf(a_back[i] - a_log[i]) < 1e-6f);
    a[2] = 0.5f; /* not -exp of anything */
    CHECK(contract_transform(e, 0, a, a_back, 4, &err) == -1 &&
          strstr(err.msg, "blk.0.ssm_a': value 2 is 0.5"));
    e = contract_find(&k, "blk.0.ssm_out.weight");
    CHECK(e && e->vtile.cols && e->vtile.width == 16);
    static float o[64 * 64], om[64 * 64], ob[64 * 64];
    for (int i = 0; i < 64 * 64; i++)
        o[i] = (float)i;
    CHECK(e && contract_transform(e, 1, o, om, 64 * 64, &err) == 0);
    CHECK(om[16] == o[32] && om[32] == o[16] && om[0] == o[0] && om[48] == o[48]);
    CHECK(contract_transform(e, 0, om, ob, 64 * 64, &err) == 0 && memcmp(o, ob, sizeof o) == 0);
    contract_free(&k);
}

TEST_MAIN(TEST_CASE(test_names_known), TEST_CASE(test_names_every_entry),
          TEST_CASE(test_contract_shapes), TEST_CASE(test_bind_stories),
          TEST_CASE(test_bind_every_family), TEST_CASE(test_bind_assistant_gguf),
          TEST_CASE(test_rope_permute_by_hand),
          TEST_CASE(test_rope_permute_inverse), TEST_CASE(test_contract_transform))
