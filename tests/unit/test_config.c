/* The normalized model config: every HF fixture parses to the published
 * numbers, round-trips through GGUF metadata and back through config.json,
 * bad configs fail naming the problem, and real GGUF files (stories260K,
 * llama.cpp-style llama3 files carrying only rope_freqs.weight) read right. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "core/json.h"
#include "format/gguf.h"
#include "model/config.h"
#include "model/contract.h"
#include "model/family.h"
#include "test.h"

#define FIXTURES "tests/fixtures/configs/"

static const char *const fixtures[] = {
    "Llama-2-7b-hf.json",   "Llama-3.1-8B.json",       "Llama-3.2-1B-Instruct.json",
    "Mistral-7B-v0.1.json", "vicuna-7b-v1.5-16k.json", "Qwen2.5-7B.json",
    "Qwen2.5-7B-Instruct-yarn.json", "Qwen3-8B.json",   "Qwen3-30B-A3B.json",
    "gemma-3-1b-it.json",   "gemma-3-4b-it.json",      "tiny-llama.json",
    "tiny-llama3.json",     "tiny-qwen2.json",         "tiny-qwen3.json",
    "tiny-qwen3-moe.json",  "tiny-gemma3.json",        "tiny-qwen3_5.json",
    "Qwen3.5-9B.json",      "tiny-qwen3_5-moe.json",   "Qwen3.5-35B-A3B.json",
    "tiny-gemma4.json",     "gemma-4-E2B-it.json",     "gemma-4-31B-it.json",
    "tiny-gemma4-moe.json", "gemma-4-26B-A4B-it.json",
};
#define N_FIXTURES (int)(sizeof fixtures / sizeof fixtures[0])

static int load_fixture(const char *name, model_config *c)
{
    char path[512];
    memra_err err;
    snprintf(path, sizeof path, FIXTURES "%s", name);
    json_t *j = json_load_path(path, 1 << 20, &err);
    if (!j) {
        fprintf(stderr, "  %s\n", err.msg);
        return -1;
    }
    int rc = config_from_hf(j, path, c, &err);
    if (rc != 0)
        fprintf(stderr, "  %s\n", err.msg);
    json_decref(j);
    return rc;
}

static int near(double a, double b)
{
    return a == b || fabs(a - b) <= 1e-6 * fmax(fabs(a), fabs(b));
}

/* The first field where two configs differ (doubles within 1e-6
 * relative, since GGUF keeps f32), or NULL. */
static const char *config_diff(const model_config *a, const model_config *b)
{
#define I(f)                                                                            \
    if (a->f != b->f)                                                                   \
        return #f;
#define D(f)                                                                            \
    if (!near(a->f, b->f))                                                              \
        return #f;
    I(family) I(n_vocab) I(dim) I(n_layers) I(n_heads) I(n_kv_heads) I(head_dim) I(ffn_dim)
    I(n_ctx_train) D(norm_eps) D(rope_theta) I(tie_embeddings) I(attn_bias) I(qk_norm)
    I(rope_scaling.kind) D(rope_scaling.factor) I(rope_scaling.original_ctx)
    D(rope_scaling.low_freq_factor) D(rope_scaling.high_freq_factor) D(rope_scaling.beta_fast)
    D(rope_scaling.beta_slow) D(rope_scaling.attn_factor) I(n_experts) I(n_experts_used)
    I(moe_ffn_dim) I(norm_topk_prob) D(rope_local_theta) I(sliding_window)
    I(sliding_window_pattern) D(query_pre_attn_scalar) D(attn_softcap) D(final_softcap)
    I(bos_id) I(eos_id) I(head_dim_full) I(n_kv_heads_full) I(attn_k_eq_v) I(n_kv_shared)
    I(ple_dim) I(ple_vocab) I(double_wide_ffn) I(rope_full_angles) I(last_layer_full)
    I(moe_with_dense) I(backbone_dim) I(ordered_embeddings)
#undef I
#undef D
    if (strcmp(a->hf_architecture, b->hf_architecture) != 0)
        return "hf_architecture";
    if (strcmp(a->hf_model_type, b->hf_model_type) != 0)
        return "hf_model_type";
    return NULL;
}

static void test_family_names(void)
{
    CHECK(strcmp(family_name(FAMILY_QWEN3_MOE), "qwen3_moe") == 0);
    CHECK(strcmp(family_gguf_arch(FAMILY_QWEN3_MOE), "qwen3moe") == 0);
    CHECK(strcmp(family_gguf_arch(FAMILY_GEMMA3), "gemma3") == 0);
    CHECK(strcmp(family_name(FAMILY_COUNT), "?") == 0);
}

/* Every registered family: its descriptor carries its own enum value, is
 * found again by its GGUF architecture and each of its HF model_types, and
 * has what config.c, contract.c and model.c need. */
static void test_family_registry(void)
{
    for (int f = 0; f < FAMILY_COUNT; f++) {
        const model_family_desc *d = family_desc((model_family)f);
        CHECK(d && d->id == (model_family)f);
        if (!d)
            continue;
        CHECK(family_by_gguf_arch(d->gguf_arch) == d);
        CHECK(d->n_hf_types > 0 && d->hf_act_key && d->hf_act);
        for (size_t t = 0; t < d->n_hf_types; t++) {
            const family_hf_type *ht = NULL;
            CHECK(family_by_hf_type(d->hf_types[t].model_type, &ht) == d &&
                  ht == &d->hf_types[t]);
        }
        if (d->hf_wrapper_type)
            CHECK(family_by_hf_wrapper(d->hf_wrapper_type) == d);
        CHECK(d->contract && d->forward);
    }
    CHECK(family_desc(FAMILY_COUNT) == NULL);
    CHECK(family_by_gguf_arch("mamba") == NULL);
    CHECK(family_by_hf_type("mamba", NULL) == NULL);
    char list[256];
    family_list_hf_types(list, sizeof list);
    CHECK(strcmp(list, "llama, mistral, qwen2, qwen3, qwen3_moe, gemma3_text, gemma3, qwen3_5_text, qwen3_5, qwen3_5_moe_text, qwen3_5_moe, gemma4_text, gemma4, gemma4_assistant") == 0);
    family_list_gguf_archs(list, sizeof list);
    CHECK(strcmp(list, "llama, qwen2, qwen3, qwen3moe, gemma3, qwen35, qwen35moe, gemma4, "
                       "gemma4-assistant") == 0);
    CHECK(family_by_gguf_assistant_arch("gemma4-assistant") == family_desc(FAMILY_GEMMA4));
    CHECK(family_by_gguf_assistant_arch("gemma4") == NULL);
}

static void test_llama_fixtures(void)
{
    model_config c;
    CHECK(load_fixture("Llama-2-7b-hf.json", &c) == 0);
    CHECK(c.family == FAMILY_LLAMA && c.n_vocab == 32000 && c.dim == 4096 && c.n_layers == 32);
    CHECK(c.n_heads == 32 && c.n_kv_heads == 32 && c.head_dim == 128 && c.ffn_dim == 11008);
    CHECK(c.n_ctx_train == 4096 && c.norm_eps == 1e-5 && c.rope_theta == 10000.0);
    CHECK(!c.tie_embeddings && !c.attn_bias && !c.qk_norm && c.bos_id == 1 && c.eos_id == 2);
    CHECK(c.rope_scaling.kind == ROPE_SCALING_NONE && c.sliding_window == 0);
    CHECK(strcmp(c.hf_architecture, "LlamaForCausalLM") == 0);

    CHECK(load_fixture("Llama-3.1-8B.json", &c) == 0);
    CHECK(c.n_kv_heads == 8 && c.ffn_dim == 14336 && c.n_ctx_train == 131072);
    CHECK(c.rope_theta == 500000.0 && c.n_vocab == 128256);
    CHECK(c.rope_scaling.kind == ROPE_SCALING_LLAMA3 && c.rope_scaling.factor == 8.0);
    CHECK(c.rope_scaling.low_freq_factor == 1.0 && c.rope_scaling.high_freq_factor == 4.0);
    CHECK(c.rope_scaling.original_ctx == 8192);
    CHECK(c.bos_id == 128000 && c.eos_id == 128001);

    CHECK(load_fixture("Llama-3.2-1B-Instruct.json", &c) == 0);
    CHECK(c.dim == 2048 && c.n_layers == 16 && c.head_dim == 64 && c.n_kv_heads == 8);
    CHECK(c.tie_embeddings && c.rope_scaling.factor == 32.0);
    CHECK(c.eos_id == 128001); /* first of [128001, 128008, 128009] */

    CHECK(load_fixture("Mistral-7B-v0.1.json", &c) == 0);
    CHECK(c.family == FAMILY_LLAMA && strcmp(c.hf_model_type, "mistral") == 0);
    CHECK(strcmp(c.hf_architecture, "MistralForCausalLM") == 0);
    CHECK(c.sliding_window == 4096 && c.n_kv_heads == 8 && c.ffn_dim == 14336);
    CHECK(c.n_ctx_train == 32768 && c.head_dim == 128);

    CHECK(load_fixture("vicuna-7b-v1.5-16k.json", &c) == 0);
    CHECK(c.rope_scaling.kind == ROPE_SCALING_LINEAR && c.rope_scaling.factor == 4.0);
    CHECK(c.rope_theta == 10000.0 && c.n_ctx_train == 4096); /* theta by default */

    CHECK(load_fixture("tiny-llama3.json", &c) == 0);
    CHECK(c.dim == 128 && c.head_dim == 64 && c.n_heads == 2 && c.n_kv_heads == 1);
    CHECK(c.tie_embeddings && c.eos_id == 2 && c.rope_scaling.kind == ROPE_SCALING_LLAMA3);
}

static void test_qwen_fixtures(void)
{
    model_config c;
    CHECK(load_fixture("Qwen2.5-7B.json", &c) == 0);
    CHECK(c.family == FAMILY_QWEN2 && c.attn_bias && !c.qk_norm);
    CHECK(c.dim == 3584 && c.n_heads == 28 && c.n_kv_heads == 4 && c.head_dim == 128);
    CHECK(c.n_vocab == 152064 && c.ffn_dim == 18944 && c.n_layers == 28);
    CHECK(c.rope_theta == 1e6 && c.n_ctx_train == 131072 && c.norm_eps == 1e-6);
    CHECK(c.sliding_window == 0); /* use_sliding_window is false */
    CHECK(c.bos_id == 151643 && c.eos_id == 151643);

    CHECK(load_fixture("Qwen2.5-7B-Instruct-yarn.json", &c) == 0);
    CHECK(c.rope_scaling.kind == ROPE_SCALING_YARN && c.rope_scaling.factor == 4.0);
    CHECK(c.rope_scaling.original_ctx == 32768 && c.rope_scaling.beta_fast == 32.0);
    CHECK(c.rope_scaling.beta_slow == 1.0);
    CHECK(fabs(c.rope_scaling.attn_factor - (0.1 * log(4.0) + 1.0)) < 1e-12);
    CHECK(c.eos_id == 151645);

    CHECK(load_fixture("Qwen3-8B.json", &c) == 0);
    CHECK(c.family == FAMILY_QWEN3 && c.qk_norm && !c.attn_bias);
    CHECK(c.dim == 4096 && c.n_layers == 36 && c.n_heads == 32 && c.n_kv_heads == 8);
    CHECK(c.head_dim == 128 && c.ffn_dim == 12288 && c.n_ctx_train == 40960);
    CHECK(c.n_vocab == 151936 && c.rope_theta == 1e6 && !c.tie_embeddings);

    CHECK(load_fixture("Qwen3-30B-A3B.json", &c) == 0);
    CHECK(c.family == FAMILY_QWEN3_MOE && c.qk_norm);
    CHECK(c.n_experts == 128 && c.n_experts_used == 8 && c.moe_ffn_dim == 768);
    CHECK(c.norm_topk_prob == 1 && c.dim == 2048 && c.head_dim == 128 && c.n_layers == 48);
    CHECK(c.n_heads == 32 && c.n_kv_heads == 4 && c.ffn_dim == 6144);

    CHECK(load_fixture("tiny-qwen3-moe.json", &c) == 0);
    CHECK(c.n_experts == 8 && c.n_experts_used == 2 && c.moe_ffn_dim == 32 && c.head_dim == 16);
    CHECK(load_fixture("tiny-qwen2.json", &c) == 0);
    CHECK(c.tie_embeddings && c.attn_bias && c.dim == 64 && c.n_layers == 2 && c.n_vocab == 256);
    CHECK(load_fixture("tiny-qwen3.json", &c) == 0);
    CHECK(c.head_dim == 32 && c.n_heads * c.head_dim == 128 && c.bos_id == 250);
}

static void test_gemma_fixtures(void)
{
    model_config c;
    CHECK(load_fixture("gemma-3-1b-it.json", &c) == 0);
    CHECK(c.family == FAMILY_GEMMA3 && c.qk_norm && c.tie_embeddings);
    CHECK(c.dim == 1152 && c.n_heads == 4 && c.n_kv_heads == 1 && c.head_dim == 256);
    CHECK(c.ffn_dim == 6912 && c.n_layers == 26 && c.n_vocab == 262144);
    CHECK(c.sliding_window == 512 && c.sliding_window_pattern == 6);
    CHECK(c.query_pre_attn_scalar == 256 && c.rope_local_theta == 10000 && c.rope_theta == 1e6);
    CHECK(c.n_ctx_train == 32768 && c.final_softcap == 0 && c.attn_softcap == 0);
    CHECK(c.bos_id == 2 && c.eos_id == 1);

    /* The multimodal wrapper: the sparse text_config takes
     * Gemma3TextConfig's defaults, eos comes from the wrapper. */
    CHECK(load_fixture("gemma-3-4b-it.json", &c) == 0);
    CHECK(c.family == FAMILY_GEMMA3 && c.dim == 2560 && c.n_layers == 34 && c.ffn_dim == 10240);
    CHECK(c.n_heads == 8 && c.n_kv_heads == 4 && c.head_dim == 256 && c.n_vocab == 262208);
    CHECK(c.sliding_window == 1024 && c.rope_scaling.kind == ROPE_SCALING_LINEAR);
    CHECK(c.rope_scaling.factor == 8.0 && c.rope_theta == 1e6 && c.n_ctx_train == 131072);
    CHECK(strcmp(c.hf_model_type, "gemma3_text") == 0);
    CHECK(strcmp(c.hf_architecture, "Gemma3ForCausalLM") == 0);
    CHECK(c.bos_id == 2 && c.eos_id == 1);

    CHECK(load_fixture("tiny-gemma3.json", &c) == 0);
    CHECK(c.head_dim == 16 && c.query_pre_attn_scalar == 16 && c.sliding_window == 32);
}

static void tmp_path(char *buf, size_t cap, const char *name)
{
    mkdir(test_tmp_dir(), 0755);
    snprintf(buf, cap, "%s/%s", test_tmp_dir(), name);
}

/* config -> GGUF metadata on disk (and the generated rope_freqs.weight
 * where the family writes it: gemma4's proportional RoPE lives there) ->
 * config */
static int via_gguf(const model_config *c, model_config *back, memra_err *err)
{
    char path[512];
    tmp_path(path, sizeof path, "config-roundtrip.gguf");
    gguf_writer *w = gguf_writer_new();
    config_to_gguf(c, w);
    float freqs[4096];
    int64_t nf = (c->head_dim_full > 0 ? c->head_dim_full : c->head_dim) / 2;
    if (nf <= 4096 && family_rope_freqs(c, freqs) &&
        gguf_writer_add_tensor(w, "rope_freqs.weight", DT_F32, 1, &nf, freqs,
                               (uint64_t)nf * 4, err) != 0) {
        gguf_writer_free(w);
        return -1;
    }
    int rc = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    if (rc != 0)
        return -1;
    gguf_file f;
    if (gguf_open(path, &f, err) != 0)
        return -1;
    rc = config_from_gguf(&f, back, err);
    gguf_close(&f);
    return rc;
}

static void test_round_trip_gguf(void)
{
    for (int i = 0; i < N_FIXTURES; i++) {
        model_config c, back;
        memra_err err;
        CHECK_MSG(load_fixture(fixtures[i], &c) == 0, "%s", fixtures[i]);
        int rc = via_gguf(&c, &back, &err);
        CHECK_MSG(rc == 0, "%s: %s", fixtures[i], err.msg);
        const char *d = rc == 0 ? config_diff(&c, &back) : NULL;
        CHECK_MSG(d == NULL, "%s: field %s differs after GGUF", fixtures[i], d);
    }
}

/* Values that differ from what ggml derives itself still round-trip. */
static void test_round_trip_gguf_explicit(void)
{
    model_config c, back;
    memra_err err;
    CHECK(load_fixture("Qwen2.5-7B-Instruct-yarn.json", &c) == 0);
    c.rope_scaling.attn_factor = 1.0; /* explicit attention_factor 1 */
    c.rope_scaling.beta_fast = 16;
    CHECK_MSG(via_gguf(&c, &back, &err) == 0, "%s", err.msg);
    CHECK(near(back.rope_scaling.attn_factor, 1.0) && back.rope_scaling.beta_fast == 16);
    CHECK(load_fixture("tiny-qwen3-moe.json", &c) == 0);
    c.norm_topk_prob = 0;
    CHECK_MSG(via_gguf(&c, &back, &err) == 0, "%s", err.msg);
    CHECK(back.norm_topk_prob == 0 && config_diff(&c, &back) == NULL);
    CHECK(load_fixture("tiny-gemma3.json", &c) == 0);
    c.final_softcap = 30.0;
    c.attn_softcap = 50.0;
    c.sliding_window_pattern = 4;
    CHECK_MSG(via_gguf(&c, &back, &err) == 0, "%s", err.msg);
    CHECK(config_diff(&c, &back) == NULL);
}

/* What llama.cpp leaves to the tensors: tied output, attention bias, vocab. */
static void test_gguf_tensor_inference(void)
{
    char path[512];
    memra_err err;
    gguf_file f;
    model_config c;
    tmp_path(path, sizeof path, "inferred.gguf");
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "qwen3");
    gguf_writer_set_u32(w, "qwen3.context_length", 1024);
    gguf_writer_set_u32(w, "qwen3.embedding_length", 64);
    gguf_writer_set_u32(w, "qwen3.block_count", 1);
    gguf_writer_set_u32(w, "qwen3.feed_forward_length", 128);
    gguf_writer_set_u32(w, "qwen3.attention.head_count", 4);
    gguf_writer_set_u32(w, "qwen3.attention.head_count_kv", 2);
    gguf_writer_set_f32(w, "qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
    static float embd[300 * 64], bias[64];
    int64_t ne_embd[2] = {64, 300}, ne_bias[1] = {64};
    CHECK(gguf_writer_add_tensor(w, "token_embd.weight", DT_F32, 2, ne_embd, embd, sizeof embd,
                                 &err) == 0);
    CHECK(gguf_writer_add_tensor(w, "blk.0.attn_q.bias", DT_F32, 1, ne_bias, bias, sizeof bias,
                                 &err) == 0);
    CHECK(gguf_writer_write(w, path, &err) == 0);
    gguf_writer_free(w);
    CHECK(gguf_open(path, &f, &err) == 0);
    CHECK_MSG(config_from_gguf(&f, &c, &err) == 0, "%s", err.msg);
    CHECK(c.n_vocab == 300 && c.tie_embeddings && c.attn_bias && c.qk_norm);
    CHECK(c.head_dim == 16 && c.rope_theta == 10000.0 && c.norm_eps == 1e-6);
    CHECK(c.bos_id == -1 && c.eos_id == -1 && strcmp(c.hf_model_type, "qwen3") == 0);
    gguf_close(&f);
}

static void test_round_trip_hf(void)
{
    for (int i = 0; i < N_FIXTURES; i++) {
        model_config c, back;
        memra_err err;
        CHECK_MSG(load_fixture(fixtures[i], &c) == 0, "%s", fixtures[i]);
        json_t *j = config_to_hf(&c);
        /* through text, as a config.json on disk would be */
        char *text = json_dumps(j, JSON_SORT_KEYS);
        json_decref(j);
        json_t *k = json_parse_buf(text, strlen(text), "written config.json", &err);
        free(text);
        CHECK(k != NULL);
        int rc = k ? config_from_hf(k, "written config.json", &back, &err) : -1;
        CHECK_MSG(rc == 0, "%s: %s", fixtures[i], err.msg);
        const char *d = rc == 0 ? config_diff(&c, &back) : NULL;
        CHECK_MSG(d == NULL, "%s: field %s differs after config_to_hf", fixtures[i], d);
        /* HF -> HF is exact, not just close */
        CHECK(rc != 0 || (c.norm_eps == back.norm_eps &&
                          c.rope_scaling.attn_factor == back.rope_scaling.attn_factor));
        json_decref(k);
    }
}

/* Parse `text` and expect config_from_hf to fail with `want` in the message. */
static void expect_hf_error(const char *text, const char *want)
{
    memra_err err;
    model_config c;
    json_t *j = json_parse_buf(text, strlen(text), "bad.json", &err);
    CHECK_MSG(j != NULL, "fixture text does not parse: %s", text);
    if (!j)
        return;
    int rc = config_from_hf(j, "bad.json", &c, &err);
    CHECK_MSG(rc == -1, "accepted: %s", text);
    CHECK_MSG(rc == 0 || strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
    json_decref(j);
}

#define TINY_BODY                                                                      \
    "\"vocab_size\": 256, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "     \
    "\"max_position_embeddings\": 512"

static void test_bad_configs(void)
{
    expect_hf_error("{\"model_type\": \"llama\", " TINY_BODY ", \"num_attention_heads\": 4}",
                    "bad.json: missing required key \"hidden_size\"");
    expect_hf_error("{\"model_type\": \"phi3\", \"hidden_size\": 64}",
                    "unsupported model_type \"phi3\" (supported: llama, mistral, qwen2");
    expect_hf_error("{\"hidden_size\": 64}", "missing required key \"model_type\"");
    expect_hf_error("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    TINY_BODY ", \"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}",
                    "rope_scaling: type \"dynamic\" is not supported (supported: linear, "
                    "llama3, yarn)");
    expect_hf_error("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    TINY_BODY ", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}",
                    "missing required key \"low_freq_factor\"");
    expect_hf_error("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 6, "
                    "\"num_key_value_heads\": 4, " TINY_BODY "}",
                    "num_attention_heads 6 is not a multiple of num_key_value_heads 4");
    expect_hf_error("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    "\"vocab_size\": 256, \"intermediate_size\": 128, "
                    "\"num_hidden_layers\": 100000000}",
                    "num_hidden_layers 100000000 is absurdly large");
    expect_hf_error("{\"model_type\": \"llama\", \"hidden_size\": 0, \"num_attention_heads\": 4, "
                    TINY_BODY "}",
                    "hidden_size must be positive, got 0");
    expect_hf_error("{\"model_type\": \"llama\", \"hidden_size\": \"64\", "
                    "\"num_attention_heads\": 4, " TINY_BODY "}",
                    "key \"hidden_size\" must be an integer");
    expect_hf_error("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    TINY_BODY ", \"eos_token_id\": \"</s>\"}",
                    "key \"eos_token_id\" must be an integer or a list of integers");
    expect_hf_error("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    TINY_BODY ", \"eos_token_id\": 999}",
                    "eos_token_id 999 is outside the vocab of 256");
    expect_hf_error("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    TINY_BODY ", \"hidden_act\": \"gelu\"}",
                    "hidden_act \"gelu\" is not supported");
    expect_hf_error("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    TINY_BODY ", \"mlp_bias\": true}",
                    "mlp_bias true is not supported");
    expect_hf_error("{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    "\"num_key_value_heads\": 2, " TINY_BODY ", \"use_sliding_window\": true}",
                    "use_sliding_window true is not supported");
    expect_hf_error("{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, "
                    "\"num_attention_heads\": 4, " TINY_BODY ", \"num_experts\": 8, "
                    "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, "
                    "\"mlp_only_layers\": [0]}",
                    "dense layers among the MoE layers");
    expect_hf_error("{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, "
                    "\"num_attention_heads\": 4, " TINY_BODY ", \"num_experts\": 8, "
                    "\"num_experts_per_tok\": 9, \"moe_intermediate_size\": 32}",
                    "num_experts_per_tok 9 exceeds num_experts 8");
    expect_hf_error("{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, "
                    "\"num_attention_heads\": 4, " TINY_BODY ", \"num_experts\": 8}",
                    "missing required key \"num_experts_per_tok\"");
    expect_hf_error("{\"model_type\": \"gemma3\", \"vision_config\": {}}",
                    "model_type \"gemma3\" needs a \"text_config\" object");
    expect_hf_error("{\"model_type\": \"gemma3\", \"text_config\": {\"hidden_size\": 64}}",
                    "bad.json: text_config: missing required key \"num_hidden_layers\"");
    expect_hf_error("{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, " TINY_BODY ", "
                    "\"num_attention_heads\": 4, \"num_key_value_heads\": 1, \"head_dim\": 16, "
                    "\"layer_types\": [\"sliding_attention\", \"sliding_attention\", "
                    "\"full_attention\"]}",
                    "layer_types has 3 entries for 2 layers");
    expect_hf_error("[1, 2]", "the config is not a JSON object");
}

/* Configs transformers v5 writes (rope_parameters, layer_types) read the same. */
/* tiny-gemma4.json with the keys of `edits` replaced must fail with
 * `want` in the message. */
static void expect_gemma4_error(const char *edits, const char *want)
{
    memra_err err;
    model_config c;
    json_t *j = json_load_path(FIXTURES "tiny-gemma4.json", 1 << 20, &err);
    json_t *e = json_parse_buf(edits, strlen(edits), "edits.json", &err);
    CHECK_MSG(j && e, "%s", err.msg);
    if (!j || !e) {
        json_decref(j);
        json_decref(e);
        return;
    }
    json_object_update(j, e);
    int rc = config_from_hf(j, "bad.json", &c, &err);
    CHECK_MSG(rc == -1, "accepted: %s", edits);
    CHECK_MSG(rc == 0 || strstr(err.msg, want), "message \"%s\" lacks \"%s\"", err.msg, want);
    json_decref(j);
    json_decref(e);
}

static void test_gemma4_configs(void)
{
    model_config c;
    CHECK(load_fixture("gemma-4-E2B-it.json", &c) == 0);
    CHECK(c.family == FAMILY_GEMMA4 && c.dim == 1536 && c.n_layers == 35 && c.n_kv_heads == 1);
    CHECK(c.head_dim == 256 && c.head_dim_full == 512 && c.n_kv_heads_full == 0);
    CHECK(!c.attn_k_eq_v && c.n_kv_shared == 20 && c.double_wide_ffn && c.ple_dim == 256);
    CHECK(c.sliding_window_pattern == 5 && c.rope_full_angles == 64 && c.final_softcap == 30);
    /* the shared layers read the last earlier layer of their kind */
    CHECK(config_layer_kv_source(&c, 15) == 13 && config_layer_kv_source(&c, 19) == 14);
    CHECK(config_layer_kv_source(&c, 14) == 14 && config_layer_ffn_dim(&c, 15) == 2 * 6144);
    CHECK(config_layer_full(&c, 34) && config_layer_head_dim(&c, 34) == 512);
    int64_t kv_layers, kv_dim;
    config_kv_layout(&c, &kv_layers, &kv_dim);
    CHECK(kv_layers == 15 && kv_dim == 512);
    CHECK(load_fixture("gemma-4-31B-it.json", &c) == 0);
    CHECK(c.attn_k_eq_v && c.n_kv_heads == 16 && c.n_kv_heads_full == 4 && c.ple_dim == 0);
    CHECK(config_layer_kv_heads(&c, 5) == 4 && config_layer_kv_heads(&c, 4) == 16);
    CHECK(load_fixture("gemma-4-26B-A4B-it.json", &c) == 0);
    CHECK(c.moe_with_dense && c.n_experts == 128 && c.n_experts_used == 8 && c.moe_ffn_dim == 704);
    CHECK(c.norm_topk_prob && c.ffn_dim == 2112);

    expect_gemma4_error("{\"rope_parameters\": {\"sliding_attention\": {\"rope_type\": \"yarn\"}}}",
                        "rope_type \"yarn\" is not supported");
    expect_gemma4_error("{\"num_kv_shared_layers\": 6}",
                        "num_kv_shared_layers 6 must be below the 6 layers");
    expect_gemma4_error("{\"vocab_size_per_layer_input\": 100}",
                        "vocab_size_per_layer_input 100 is below vocab_size 256");
    expect_gemma4_error("{\"layer_types\": [\"sliding_attention\", \"sliding_attention\", "
                        "\"sliding_attention\", \"sliding_attention\", \"full_attention\", "
                        "\"full_attention\"]}",
                        "layer 4 shares K/V, but no earlier layer of its kind (full_attention)");
    expect_gemma4_error("{\"enable_moe_block\": true, \"num_experts\": 8, \"top_k_experts\": 9, "
                        "\"moe_intermediate_size\": 32}",
                        "top_k_experts 9 is more than num_experts 8");
    expect_gemma4_error("{\"enable_moe_block\": true, \"top_k_experts\": 2}",
                        "missing required key \"num_experts\"");
    expect_gemma4_error("{\"num_global_key_value_heads\": 3}",
                        "num_global_key_value_heads 3 does not divide num_attention_heads 4");
}

/* A gemma4_assistant: its text_config is a gemma4 config whose every layer
 * reads the model's K/V, the drafter's keys at the top level; it goes back
 * to HF as the same wrapper. */
static void test_gemma4_assistant(void)
{
    memra_err err;
    model_config c, back;
    json_t *j = json_load_path("tests/fixtures/parity/configs/tiny-gemma4-assistant.json",
                               1 << 20, &err);
    CHECK_MSG(j != NULL, "%s", err.msg);
    if (!j)
        return;
    CHECK_MSG(config_from_hf(j, "a.json", &c, &err) == 0, "%s", err.msg);
    CHECK(c.family == FAMILY_GEMMA4 && config_is_assistant(&c) && c.backbone_dim == 64);
    CHECK(c.dim == 32 && c.n_layers == 3 && c.n_kv_shared == 3 && c.ple_dim == 0);
    CHECK(strcmp(c.hf_model_type, "gemma4_assistant") == 0);
    int64_t kv_layers, kv_dim;
    config_kv_layout(&c, &kv_layers, &kv_dim);
    CHECK(kv_layers == 0); /* no K/V of its own */
    json_t *w = config_to_hf(&c);
    CHECK(strcmp(json_string_value(json_object_get(w, "model_type")), "gemma4_assistant") == 0);
    CHECK(json_is_object(json_object_get(w, "text_config")));
    CHECK(config_from_hf(w, "written.json", &back, &err) == 0 && config_diff(&c, &back) == NULL);
    json_decref(w);
    /* as llama.cpp's gemma4-assistant GGUF: the drafter's keys, and back */
    CHECK_MSG(via_gguf(&c, &back, &err) == 0, "%s", err.msg);
    CHECK(config_is_assistant(&back) && back.backbone_dim == 64 && back.n_kv_shared == 3);
    CHECK(strcmp(back.hf_model_type, "gemma4_assistant") == 0 &&
          strcmp(back.hf_architecture, "Gemma4AssistantForCausalLM") == 0);
    const char *d = config_diff(&c, &back);
    CHECK_MSG(d == NULL, "differs in %s", d ? d : "");
    static const struct {
        const char *key, *value, *want;
    } bad[] = {
        {"num_kv_shared_layers", "2", "num_kv_shared_layers 2 must be num_hidden_layers (3)"},
        {"hidden_size_per_layer_input", "8", "no per-layer inputs"},
        {"model_type", "\"qwen3\"", "a.json: text_config: "}, /* another family's config */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *k = json_deep_copy(j);
        json_t *v = json_loads(bad[i].value, JSON_DECODE_ANY, NULL);
        json_object_set_new(json_object_get(k, "text_config"), bad[i].key, v);
        int rc = config_from_hf(k, "a.json", &c, &err);
        CHECK_MSG(rc == -1 && strstr(err.msg, bad[i].want), "%s: %s", bad[i].key,
                  rc ? err.msg : "accepted");
        json_decref(k);
    }
    json_t *k = json_deep_copy(j);
    json_object_set_new(k, "backbone_hidden_size", json_integer(-1));
    CHECK(config_from_hf(k, "bad.json", &c, &err) == -1 && strstr(err.msg, "backbone_hidden_size"));
    json_object_del(k, "text_config");
    json_object_set_new(k, "backbone_hidden_size", json_integer(64));
    CHECK(config_from_hf(k, "bad.json", &c, &err) == -1 && strstr(err.msg, "text_config"));
    json_decref(k);
    json_decref(j);
}

static void test_v5_keys(void)
{
    memra_err err;
    model_config c;
    const char *text =
        "{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, \"vocab_size\": 256, "
        "\"intermediate_size\": 128, \"num_hidden_layers\": 4, \"num_attention_heads\": 4, "
        "\"num_key_value_heads\": 1, \"head_dim\": 16, \"layer_types\": [\"sliding_attention\", "
        "\"sliding_attention\", \"full_attention\", \"sliding_attention\"], "
        "\"rope_parameters\": {\"full_attention\": {\"rope_type\": \"linear\", \"factor\": 8.0, "
        "\"rope_theta\": 1000000.0}, \"sliding_attention\": {\"rope_type\": \"default\", "
        "\"rope_theta\": 20000.0}}}";
    json_t *j = json_parse_buf(text, strlen(text), "v5.json", &err);
    CHECK(j && config_from_hf(j, "v5.json", &c, &err) == 0);
    CHECK(c.sliding_window_pattern == 3 && c.rope_local_theta == 20000.0);
    CHECK(c.rope_scaling.kind == ROPE_SCALING_LINEAR && c.rope_scaling.factor == 8.0);
    CHECK(c.rope_theta == 1e6);
    json_decref(j);

    text = "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"vocab_size\": 256, "
           "\"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
           "\"num_key_value_heads\": 2, \"head_dim\": 16, "
           "\"layer_types\": [\"full_attention\", \"full_attention\"], "
           "\"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4.0, "
           "\"original_max_position_embeddings\": 32768, \"rope_theta\": 1000000.0}}";
    j = json_parse_buf(text, strlen(text), "v5.json", &err);
    CHECK(j && config_from_hf(j, "v5.json", &c, &err) == 0);
    CHECK(c.rope_theta == 1e6 && c.rope_scaling.kind == ROPE_SCALING_YARN);
    CHECK(c.rope_scaling.original_ctx == 32768 && c.head_dim == 16);
    json_decref(j);

    expect_hf_error("{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
                    TINY_BODY ", \"layer_types\": [\"full_attention\", \"sliding_attention\"]}",
                    "layer_types is not a pattern this family supports");
}

static void test_stories_gguf(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_data_dir());
    if (!test_need_file(path))
        return;
    gguf_file f;
    memra_err err;
    model_config c;
    CHECK_MSG(gguf_open(path, &f, &err) == 0, "%s", err.msg);
    CHECK_MSG(config_from_gguf(&f, &c, &err) == 0, "%s", err.msg);
    CHECK(c.family == FAMILY_LLAMA && c.dim == 64 && c.n_layers == 5 && c.n_heads == 8);
    CHECK(c.n_kv_heads == 4 && c.head_dim == 8 && c.ffn_dim == 172 && c.n_vocab == 512);
    CHECK(c.n_ctx_train == 2048 && c.norm_eps == 1e-5 && c.rope_theta == 10000.0);
    CHECK(!c.tie_embeddings && !c.attn_bias && c.rope_scaling.kind == ROPE_SCALING_NONE);
    CHECK(c.bos_id == 1 && c.eos_id == 2);
    CHECK(strcmp(c.hf_model_type, "llama") == 0);
    gguf_close(&f);
}

/* A GGUF with the keys llama.cpp writes for a llama model, plus optional
 * rope_freqs data. */
static int write_llamacpp_gguf(const model_config *c, const float *rope_freqs, int64_t n_freqs,
                               gguf_file *out, memra_err *err)
{
    char path[512];
    tmp_path(path, sizeof path, "llamacpp-style.gguf");
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_str(w, "general.name", "tiny");
    gguf_writer_set_u32(w, "llama.context_length", (uint32_t)c->n_ctx_train);
    gguf_writer_set_u32(w, "llama.embedding_length", (uint32_t)c->dim);
    gguf_writer_set_u32(w, "llama.block_count", (uint32_t)c->n_layers);
    gguf_writer_set_u32(w, "llama.feed_forward_length", (uint32_t)c->ffn_dim);
    gguf_writer_set_u32(w, "llama.attention.head_count", (uint32_t)c->n_heads);
    gguf_writer_set_u32(w, "llama.attention.head_count_kv", (uint32_t)c->n_kv_heads);
    gguf_writer_set_u32(w, "llama.attention.key_length", (uint32_t)c->head_dim);
    gguf_writer_set_u32(w, "llama.vocab_size", (uint32_t)c->n_vocab);
    gguf_writer_set_f32(w, "llama.rope.freq_base", (float)c->rope_theta);
    gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", (float)c->norm_eps);
    gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1);
    gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 0xFFFFFFFFu);
    int rc = 0;
    if (rope_freqs)
        rc = gguf_writer_add_tensor(w, "rope_freqs.weight", DT_F32, 1, &n_freqs, rope_freqs,
                                    (uint64_t)n_freqs * 4, err);
    if (rc == 0)
        rc = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return rc == 0 ? gguf_open(path, out, err) : -1;
}

static void test_llama3_from_rope_freqs(void)
{
    model_config c, back;
    memra_err err;
    gguf_file f;
    CHECK(load_fixture("tiny-llama3.json", &c) == 0);
    float freqs[32];
    llama_rope_freqs(&c, freqs);
    /* llama.cpp-style: no rope scaling keys, only the tensor */
    CHECK_MSG(write_llamacpp_gguf(&c, freqs, 32, &f, &err) == 0, "%s", err.msg);
    CHECK_MSG(config_from_gguf(&f, &back, &err) == 0, "%s", err.msg);
    CHECK(back.rope_scaling.kind == ROPE_SCALING_LLAMA3 && back.rope_scaling.factor == 8.0);
    CHECK_MSG(back.rope_scaling.low_freq_factor == 1.0 &&
                  back.rope_scaling.high_freq_factor == 4.0,
              "lo %.17g hi %.17g", back.rope_scaling.low_freq_factor,
              back.rope_scaling.high_freq_factor);
    CHECK(back.rope_scaling.original_ctx == 8192);
    CHECK(back.eos_id == -1 && back.bos_id == 1); /* 0xFFFFFFFF is "none" */
    gguf_close(&f);

    /* other low/high factors are recovered from the interpolated entries */
    c.rope_scaling.low_freq_factor = 2.0;
    c.rope_scaling.high_freq_factor = 8.0;
    c.rope_scaling.factor = 16.0;
    llama_rope_freqs(&c, freqs);
    int medium = 0;
    for (int i = 0; i < 32; i++)
        medium += freqs[i] > 1.0f && freqs[i] < 16.0f;
    CHECK(medium >= 2);
    CHECK_MSG(write_llamacpp_gguf(&c, freqs, 32, &f, &err) == 0, "%s", err.msg);
    CHECK_MSG(config_from_gguf(&f, &back, &err) == 0, "%s", err.msg);
    CHECK(back.rope_scaling.factor == 16.0 && back.rope_scaling.low_freq_factor == 2.0 &&
          back.rope_scaling.high_freq_factor == 8.0);
    gguf_close(&f);

    /* factors that do not follow the formula are refused */
    freqs[3] = 3.5f;
    CHECK(write_llamacpp_gguf(&c, freqs, 32, &f, &err) == 0);
    CHECK(config_from_gguf(&f, &back, &err) == -1 &&
          strstr(err.msg, "rope_freqs.weight does not hold llama3 rope factors"));
    gguf_close(&f);
    /* wrong length */
    CHECK(write_llamacpp_gguf(&c, freqs, 16, &f, &err) == 0);
    CHECK(config_from_gguf(&f, &back, &err) == -1 &&
          strstr(err.msg, "rope_freqs.weight must be F32 [32]"));
    gguf_close(&f);
    /* no tensor, no keys: plain rope */
    CHECK(write_llamacpp_gguf(&c, NULL, 0, &f, &err) == 0);
    CHECK(config_from_gguf(&f, &back, &err) == 0 &&
          back.rope_scaling.kind == ROPE_SCALING_NONE && back.n_vocab == 256);
    gguf_close(&f);
}

/* llama.cpp's own numbers for Llama 3.1 (convert_hf_to_gguf.py formula). */
static void test_llama3_factors_values(void)
{
    model_config c;
    CHECK(load_fixture("Llama-3.1-8B.json", &c) == 0);
    float f[64];
    llama_rope_freqs(&c, f);
    CHECK(f[0] == 1.0f && f[28] == 1.0f && f[35] == 8.0f && f[63] == 8.0f);
    CHECK(fabsf(f[29] - 1.2074839f) < 1e-6f && fabsf(f[34] - 5.2573266f) < 1e-6f);
    for (int i = 1; i < 64; i++)
        CHECK(f[i] >= f[i - 1]);
}

static int write_keys(void (*fill)(gguf_writer *), gguf_file *out, memra_err *err)
{
    char path[512];
    tmp_path(path, sizeof path, "keys.gguf");
    gguf_writer *w = gguf_writer_new();
    fill(w);
    int rc = gguf_writer_write(w, path, err);
    gguf_writer_free(w);
    return rc == 0 ? gguf_open(path, out, err) : -1;
}

static void keys_gpt2(gguf_writer *w)
{
    gguf_writer_set_str(w, "general.architecture", "gpt2");
}
static void keys_no_embd(gguf_writer *w)
{
    gguf_writer_set_str(w, "general.architecture", "qwen3");
    gguf_writer_set_u32(w, "qwen3.context_length", 1024);
}
static void keys_bad_type(gguf_writer *w)
{
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "llama.context_length", 1024);
    gguf_writer_set_str(w, "llama.embedding_length", "64");
}
static void keys_bad_scaling(gguf_writer *w)
{
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_u32(w, "llama.context_length", 1024);
    gguf_writer_set_u32(w, "llama.embedding_length", 64);
    gguf_writer_set_u32(w, "llama.block_count", 2);
    gguf_writer_set_u32(w, "llama.feed_forward_length", 128);
    gguf_writer_set_u32(w, "llama.attention.head_count", 4);
    gguf_writer_set_u32(w, "llama.vocab_size", 256);
    gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-5f);
    gguf_writer_set_str(w, "llama.rope.scaling.type", "longrope");
    gguf_writer_set_f32(w, "llama.rope.scaling.factor", 2.0f);
}
static void keys_no_vocab(gguf_writer *w)
{
    keys_bad_scaling(w);
    gguf_writer_set_str(w, "llama.rope.scaling.type", "none");
    gguf_writer_set(w, "llama.vocab_size", &(gguf_value){.type = GGUF_STRING,
                                                         .v.s = {1, "x"}});
}

static void test_gguf_errors(void)
{
    gguf_file f;
    memra_err err;
    model_config c;
    struct {
        void (*fill)(gguf_writer *);
        const char *want;
    } cases[] = {
        {keys_gpt2, "unsupported general.architecture \"gpt2\" (supported: llama, qwen2"},
        {keys_no_embd, "missing required key qwen3.embedding_length"},
        {keys_bad_type, "key llama.embedding_length has type str, expected an integer"},
        {keys_bad_scaling, "llama.rope.scaling.type \"longrope\" is not supported"},
        {keys_no_vocab, "key llama.vocab_size has type str, expected an integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        CHECK_MSG(write_keys(cases[i].fill, &f, &err) == 0, "%s", err.msg);
        int rc = config_from_gguf(&f, &c, &err);
        CHECK_MSG(rc == -1 && strstr(err.msg, cases[i].want), "case %zu: \"%s\"", i,
                  rc ? err.msg : "accepted");
        gguf_close(&f);
    }
}

/* What config_to_gguf writes, key by key, where llama.cpp reads it. */
static void test_gguf_keys_written(void)
{
    model_config c;
    gguf_file f;
    memra_err err;
    char path[512];
    tmp_path(path, sizeof path, "keys-written.gguf");
    CHECK(load_fixture("Qwen2.5-7B-Instruct-yarn.json", &c) == 0);
    gguf_writer *w = gguf_writer_new();
    config_to_gguf(&c, w);
    CHECK(gguf_writer_write(w, path, &err) == 0);
    gguf_writer_free(w);
    CHECK(gguf_open(path, &f, &err) == 0);
    const char *s = NULL;
    uint64_t u = 0;
    double d = 0;
    CHECK(gguf_get_str(&f, "general.architecture", &s, &err) == 0 && strcmp(s, "qwen2") == 0);
    CHECK(gguf_get_str(&f, "qwen2.rope.scaling.type", &s, &err) == 0 && strcmp(s, "yarn") == 0);
    CHECK(gguf_get_f64(&f, "qwen2.rope.scaling.factor", &d, &err) == 0 && d == 4.0);
    CHECK(gguf_get_u64(&f, "qwen2.rope.scaling.original_context_length", &u, &err) == 0 &&
          u == 32768);
    /* the default attention factor is ggml's own: not written */
    CHECK(gguf_find_kv(&f, "qwen2.rope.scaling.yarn_attn_factor") == NULL);
    CHECK(gguf_get_u64(&f, "qwen2.embedding_length", &u, &err) == 0 && u == 3584);
    CHECK(gguf_get_u64(&f, "qwen2.attention.head_count_kv", &u, &err) == 0 && u == 4);
    CHECK(gguf_get_u64(&f, "tokenizer.ggml.eos_token_id", &u, &err) == 0 && u == 151645);
    gguf_close(&f);

    /* llama3: memra keys, no rope.scaling.type llama.cpp would refuse */
    CHECK(load_fixture("Llama-3.1-8B.json", &c) == 0);
    w = gguf_writer_new();
    config_to_gguf(&c, w);
    CHECK(gguf_writer_write(w, path, &err) == 0);
    gguf_writer_free(w);
    CHECK(gguf_open(path, &f, &err) == 0);
    CHECK(gguf_find_kv(&f, "llama.rope.scaling.type") == NULL);
    CHECK(gguf_get_str(&f, "memra.rope.scaling.type", &s, &err) == 0 && !strcmp(s, "llama3"));
    CHECK(gguf_get_u64(&f, "llama.rope.dimension_count", &u, &err) == 0 && u == 128);
    gguf_close(&f);
}

TEST_MAIN(TEST_CASE(test_family_names), TEST_CASE(test_family_registry),
          TEST_CASE(test_llama_fixtures),
          TEST_CASE(test_qwen_fixtures), TEST_CASE(test_gemma_fixtures),
          TEST_CASE(test_round_trip_gguf), TEST_CASE(test_round_trip_gguf_explicit),
          TEST_CASE(test_gguf_tensor_inference), TEST_CASE(test_round_trip_hf),
          TEST_CASE(test_bad_configs), TEST_CASE(test_gemma4_configs), TEST_CASE(test_gemma4_assistant), TEST_CASE(test_v5_keys), TEST_CASE(test_stories_gguf),
          TEST_CASE(test_llama3_from_rope_freqs), TEST_CASE(test_llama3_factors_values),
          TEST_CASE(test_gguf_errors), TEST_CASE(test_gguf_keys_written))
