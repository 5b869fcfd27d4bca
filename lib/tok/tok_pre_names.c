/* GGUF tokenizer.ggml.pre names -> split regexes.
 *
 * The regexes themselves live in tok/hf_tokenizer_pre.c (the table the
 * HF <-> GGUF conversion matches tokenizer.json pre-tokenizers against);
 * here we only map the other names llama.cpp accepts onto that table's
 * entries (llama.cpp's llama-vocab.cpp groups them the same way), plus the
 * regexes of llama.cpp's "default" pre-tokenizer, which no tokenizer.json
 * carries. */
#include <string.h>

#include "tok/hf_tokenizer_internal.h"
#include "tok/tok_pre_names.h"

static const struct {
    const char *alias, *name;
} aliases[] = {
    {"llama3", "llama-bpe"},       {"llama-v3", "llama-bpe"},     {"falcon3", "llama-bpe"},
    {"falcon-h1", "llama-bpe"},    {"pixtral", "llama-bpe"},      {"midm-2.0", "llama-bpe"},
    {"lfm2", "llama-bpe"},         {"dbrx", "llama-bpe"},         {"smaug-bpe", "llama-bpe"},
    {"glm4", "llama-bpe"},         {"chatglm-bpe", "llama-bpe"},  {"deepseek-r1-qwen", "qwen2"},
    {"kormo", "qwen2"},            {"stablelm2", "qwen2"},        {"hunyuan", "qwen2"},
    {"megrez", "qwen2"},           {"solar-open", "qwen2"},       {"grok-2", "qwen2"},
    {"phi-2", "gpt-2"},            {"jina-es", "gpt-2"},          {"jina-de", "gpt-2"},
    {"gigachat", "gpt-2"},         {"jina-v2-es", "gpt-2"},       {"jina-v2-de", "gpt-2"},
    {"a.x-4.0", "gpt-2"},          {"mellum", "gpt-2"},           {"modern-bert", "gpt-2"},
    {"jina-v1-en", "gpt-2"},       {"jina-v2-code", "gpt-2"},     {"roberta-bpe", "gpt-2"},
    {"mpt", "gpt-2"},              {"olmo", "gpt-2"},             {"jais", "gpt-2"},
    {"trillion", "gpt-2"},         {"granite-docling", "gpt-2"},  {"exaone4", "gpt-2"},
    {"refact", "starcoder"},       {"command-r", "starcoder"},    {"smollm", "starcoder"},
    {"codeshell", "starcoder"},    {"exaone", "starcoder"},       {"minerva-7b", "starcoder"},
    {"mellum2", "starcoder"},      {"llama4", "gpt-4o"},          {"minimax-m2", "gpt-4o"},
    {"kanana2", "gpt-4o"},         {"bailingmoe2", "bailingmoe"}, {"llada-moe", "bailingmoe"},
    {"hunyuan-dense", "deepseek-v3"},
};

/* llama.cpp's fallback for BPE vocabularies without a known pre type. */
static const hf_pre_type default_pre = {
    "default",
    4,
    {"[\\p{P}\\$\\+<=>\\^~\\|]+",
     "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
     "\\p{N}+", "[0-9][0-9][0-9]"},
    0,
};

/* Falcon's tokenizer.json chains Punctuation, ByteLevel and Digits
 * (individual_digits false) pre-tokenizers, which llama.cpp renders as these
 * three regexes; no Split list in a tokenizer.json spells them, so they live
 * here rather than in the HF table. */
static const hf_pre_type falcon_pre = {
    "falcon",
    3,
    {"[\\p{P}\\$\\+<=>\\^~\\|`]+",
     "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)",
     "[0-9][0-9][0-9]"},
    0,
};

const hf_pre_type *tok_pre_for_gguf(const char *name)
{
    if (!name || strcmp(name, "default") == 0)
        return &default_pre;
    if (strcmp(name, "falcon") == 0)
        return &falcon_pre;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(aliases[i].alias, name) == 0)
            return hf_pre_find(aliases[i].name);
    return hf_pre_find(name);
}

/* Pre types for which llama.cpp adds BOS by default (no add_bos_token key). */
int tok_pre_adds_bos(const char *name)
{
    static const char *const names[] = {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1",
                                        "pixtral", "midm-2.0", "lfm2", "tekken", "chameleon"};
    for (size_t i = 0; name && i < sizeof names / sizeof names[0]; i++)
        if (strcmp(names[i], name) == 0)
            return 1;
    return 0;
}
