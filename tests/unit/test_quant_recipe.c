/* Quantization recipes (lib/model/quant_recipe.c): which type each tensor
 * of a real model's contract gets under each preset, the layer pattern,
 * tied heads, experts, the row-length fallback, --keep, and the errors. The
 * expected types are written out from the rules in quant_recipe.h (which
 * follow llama.cpp's llama_tensor_get_type for Q4_K_M / Q5_K_M). */
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "model/config.h"
#include "model/contract.h"
#include "model/quant_recipe.h"
#include "test.h"

#define FIXTURES "tests/fixtures/configs/"

static int load(const char *name, model_config *c)
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

/* The type the recipe gives the tensor named `name` (DT_INVALID when the
 * contract has no such tensor or the recipe refuses it). */
static dtype type_of(quant_recipe *r, const model_config *c, const tensor_contract *k,
                     const char *name)
{
    const contract_entry *e = contract_find(k, name);
    dtype t;
    memra_err err;
    if (!e || quant_recipe_type(r, c, e, &t, NULL, &err) != 0)
        return DT_INVALID;
    return t;
}

/* llama.cpp's use_more_bits for 32 layers: 0-3, 28-31, and 6, 9, ..., 27. */
static int more_bits_32(int l) { return l < 4 || l >= 28 || (l - 4) % 3 == 2; }

static void test_llama_mixes(void)
{
    model_config c;
    if (load("Llama-3.1-8B.json", &c) != 0) {
        CHECK(0);
        return;
    }
    tensor_contract k;
    memra_err err;
    CHECK(contract_build(&c, CKPT_GGUF, &k, &err) == 0);
    static const struct {
        const char *name;
        dtype base, up, head;
    } mixes[] = {
        {"Q4_K_M", DT_Q4_K, DT_Q6_K, DT_Q6_K},
        {"q5_k_m", DT_Q5_K, DT_Q6_K, DT_Q6_K},
        {"Q6_K_M", DT_Q6_K, DT_Q8_0, DT_Q8_0},
    };
    for (size_t m = 0; m < sizeof mixes / sizeof mixes[0]; m++) {
        quant_recipe r;
        CHECK(quant_recipe_parse(mixes[m].name, &r, &err) == 0);
        CHECK(type_of(&r, &c, &k, "output.weight") == mixes[m].head);
        CHECK(type_of(&r, &c, &k, "token_embd.weight") == mixes[m].base); /* untied */
        CHECK(type_of(&r, &c, &k, "output_norm.weight") == DT_F32);
        CHECK(type_of(&r, &c, &k, "rope_freqs.weight") == DT_F32);
        char name[64];
        for (int l = 0; l < 32; l++) {
            const dtype pat = more_bits_32(l) ? mixes[m].up : mixes[m].base;
            snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
            CHECK_MSG(type_of(&r, &c, &k, name) == pat, "%s %s", mixes[m].name, name);
            snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
            CHECK_MSG(type_of(&r, &c, &k, name) == pat, "%s %s", mixes[m].name, name);
            snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
            CHECK(type_of(&r, &c, &k, name) == mixes[m].base);
            snprintf(name, sizeof name, "blk.%d.attn_k.weight", l);
            CHECK(type_of(&r, &c, &k, name) == mixes[m].base);
            snprintf(name, sizeof name, "blk.%d.ffn_up.weight", l);
            CHECK(type_of(&r, &c, &k, name) == mixes[m].base);
            snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
            CHECK(type_of(&r, &c, &k, name) == DT_F32);
        }
        quant_recipe_free(&r);
    }
    /* a plain type: every matrix, the head included */
    quant_recipe r;
    CHECK(quant_recipe_parse("q4_0", &r, &err) == 0 && !strcmp(r.name, "Q4_0"));
    CHECK(type_of(&r, &c, &k, "output.weight") == DT_Q4_0);
    CHECK(type_of(&r, &c, &k, "blk.6.attn_v.weight") == DT_Q4_0);
    CHECK(type_of(&r, &c, &k, "blk.6.attn_norm.weight") == DT_F32);
    quant_recipe_free(&r);
    contract_free(&k);
}

/* Qwen3-0.6B ties its head to the embedding: the embedding gets the head's
 * type. MoE: the stacked ffn_down_exps follow the layer pattern, the router
 * stays F32; with exactly 8 experts attn_v and attn_k are Q8_0 and
 * attn_output Q5_K (Q4_K_M). */
static void test_tied_and_experts(void)
{
    model_config c;
    tensor_contract k;
    memra_err err;
    quant_recipe r;
    CHECK(quant_recipe_parse("Q4_K_M", &r, &err) == 0);
    if (load("Qwen3-0.6B.json", &c) == 0 && contract_build(&c, CKPT_GGUF, &k, &err) == 0) {
        CHECK(c.tie_embeddings);
        CHECK(type_of(&r, &c, &k, "token_embd.weight") == DT_Q6_K);
        CHECK(contract_find(&k, "blk.0.attn_q_norm.weight") &&
              type_of(&r, &c, &k, "blk.0.attn_q_norm.weight") == DT_F32);
        contract_free(&k);
    } else {
        CHECK(0);
    }
    if (load("Qwen3-30B-A3B.json", &c) == 0 && contract_build(&c, CKPT_GGUF, &k, &err) == 0) {
        /* 48 layers: n/8 = 6, 7n/8 = 42 */
        CHECK(type_of(&r, &c, &k, "blk.0.ffn_down_exps.weight") == DT_Q6_K);
        CHECK(type_of(&r, &c, &k, "blk.7.ffn_down_exps.weight") == DT_Q4_K);
        CHECK(type_of(&r, &c, &k, "blk.8.ffn_down_exps.weight") == DT_Q6_K);
        CHECK(type_of(&r, &c, &k, "blk.8.ffn_up_exps.weight") == DT_Q4_K);
        CHECK(type_of(&r, &c, &k, "blk.8.ffn_gate_inp.weight") == DT_F32);
        CHECK(type_of(&r, &c, &k, "blk.8.attn_k.weight") == DT_Q4_K);
        contract_free(&k);
        c.n_experts = 8;
        c.n_experts_used = 2;
        CHECK(contract_build(&c, CKPT_GGUF, &k, &err) == 0);
        CHECK(type_of(&r, &c, &k, "blk.7.attn_v.weight") == DT_Q8_0);
        CHECK(type_of(&r, &c, &k, "blk.7.attn_k.weight") == DT_Q8_0);
        CHECK(type_of(&r, &c, &k, "blk.7.attn_output.weight") == DT_Q5_K);
        contract_free(&k);
    } else {
        CHECK(0);
    }
    quant_recipe_free(&r);
}

/* Rows that are not whole blocks: a mix falls back to Q8_0 (rows a multiple
 * of 32) or F16; a plain type and a --keep type refuse, naming the tensor. */
static void test_fallback_and_keep(void)
{
    model_config c;
    tensor_contract k;
    memra_err err;
    if (load("tiny-llama.json", &c) != 0) {
        CHECK(0);
        return;
    }
    c.dim = 64;
    c.head_dim = 64 / c.n_heads;
    c.ffn_dim = 172;
    CHECK(contract_build(&c, CKPT_GGUF, &k, &err) == 0);
    quant_recipe r;
    CHECK(quant_recipe_parse("Q4_K_M", &r, &err) == 0);
    const char *why = NULL;
    dtype t;
    const contract_entry *e = contract_find(&k, "blk.0.attn_q.weight");
    CHECK(e && quant_recipe_type(&r, &c, e, &t, &why, &err) == 0 && t == DT_Q8_0 &&
          strstr(why, "fallback"));
    CHECK(type_of(&r, &c, &k, "blk.0.ffn_down.weight") == DT_F16); /* 172 % 32 != 0 */
    CHECK(type_of(&r, &c, &k, "blk.0.ffn_up.weight") == DT_Q8_0);
    CHECK(type_of(&r, &c, &k, "output.weight") == DT_Q8_0);
    quant_recipe_free(&r);

    CHECK(quant_recipe_parse("Q8_0", &r, &err) == 0);
    e = contract_find(&k, "blk.0.ffn_down.weight");
    CHECK(e && quant_recipe_type(&r, &c, e, &t, NULL, &err) != 0 &&
          strstr(err.msg, "tensor 'blk.0.ffn_down.weight': rows of 172 values"));
    /* --keep: first match wins, over the plain type; misfit types refuse */
    CHECK(quant_recipe_add_keep(&r, "ffn_down=F16", &err) == 0);
    CHECK(quant_recipe_add_keep(&r, "ffn_=Q4_0", &err) == 0);
    CHECK(quant_recipe_add_keep(&r, "^output\\.weight$=fp8", &err) == 0);
    CHECK(type_of(&r, &c, &k, "blk.0.ffn_down.weight") == DT_F16);
    CHECK(type_of(&r, &c, &k, "blk.1.ffn_up.weight") == DT_Q4_0);
    CHECK(type_of(&r, &c, &k, "output.weight") == DT_MXFP8);
    CHECK(type_of(&r, &c, &k, "blk.0.attn_q.weight") == DT_Q8_0);
    CHECK(type_of(&r, &c, &k, "blk.0.attn_norm.weight") == DT_F32); /* --keep: matrices only */
    CHECK(r.keep[0].n_matched == 1 && r.keep[1].n_matched == 1 && r.keep[2].n_matched == 1);
    char *d = quant_recipe_describe(&r);
    CHECK(!strcmp(d, "Q8_0 --keep 'ffn_down=F16' --keep 'ffn_=Q4_0' --keep '^output\\.weight$=MXFP8'"));
    free(d);
    quant_recipe_free(&r);
    CHECK(quant_recipe_parse("Q8_0", &r, &err) == 0);
    CHECK(quant_recipe_add_keep(&r, "attn_q=Q4_K", &err) == 0);
    e = contract_find(&k, "blk.0.attn_q.weight");
    CHECK(e && quant_recipe_type(&r, &c, e, &t, NULL, &err) != 0 &&
          strstr(err.msg, "'blk.0.attn_q.weight'") && strstr(err.msg, "--keep 'attn_q'"));
    quant_recipe_free(&r);
    contract_free(&k);
}

static void test_parse_errors_and_ftypes(void)
{
    quant_recipe r;
    memra_err err;
    CHECK(quant_recipe_parse("Q3_K", &r, &err) != 0 && strstr(err.msg, "unknown quantization "
                                                                        "type 'Q3_K'"));
    CHECK(quant_recipe_parse("Q4_K_M", &r, &err) == 0);
    CHECK(quant_recipe_add_keep(&r, "attn_v", &err) != 0 && strstr(err.msg, "NAME_REGEX=TYPE"));
    CHECK(quant_recipe_add_keep(&r, "attn_v=Q3_K", &err) != 0 && strstr(err.msg, "unknown type"));
    CHECK(quant_recipe_add_keep(&r, "attn_(v=Q8_0", &err) != 0 && strstr(err.msg, "bad regex"));
    CHECK(quant_recipe_add_keep(&r, "a=b=Q8_0", &err) == 0 && !strcmp(r.keep[0].pattern, "a=b"));
    quant_recipe_free(&r);
    /* general.file_type: llama.cpp's llama_ftype numbers */
    static const struct {
        const char *t;
        int ftype;
    } f[] = {{"Q4_K_M", 15}, {"Q5_K_M", 17}, {"Q6_K_M", 18}, {"Q8_0", 7}, {"Q4_0", 2},
             {"Q4_K", 14},   {"Q5_K", 16},   {"Q6_K", 18},   {"NVFP4", 39}, {"FP8", -1}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        CHECK(quant_recipe_parse(f[i].t, &r, &err) == 0);
        CHECK_MSG(quant_recipe_llama_ftype(&r) == f[i].ftype, "%s", f[i].t);
    }
    CHECK(quant_recipe_parse("fp8", &r, &err) == 0 && !strcmp(r.name, "MXFP8") &&
          r.base == DT_MXFP8);
}

TEST_MAIN(TEST_CASE(test_llama_mixes), TEST_CASE(test_tied_and_experts),
          TEST_CASE(test_fallback_and_keep), TEST_CASE(test_parse_errors_and_ftypes))
