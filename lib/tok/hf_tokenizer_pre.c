/* Known pre-tokenizers: the llama.cpp `tokenizer.ggml.pre` names and the
 * Hugging Face tokenizer.json regexes behind them.
 *
 * convert_hf_to_gguf.py picks the name by hashing how the tokenizer splits a
 * fixed test text; we cannot run the tokenizer, so we match the regexes of
 * the pre_tokenizer (a Split, a Sequence of Splits, GPT-2's ByteLevel with
 * use_regex, Digits) against this table instead. The regexes are the ones
 * the models' tokenizer.json files carry (llama.cpp's src/llama-vocab.cpp
 * quotes them next to the adapted forms it runs). Where several names share
 * one regex (llama3/falcon3/dbrx..., starcoder/refact/smollm...) the table
 * gives the most common one; llama.cpp tokenizes those names alike. */
#include <string.h>

#include "tok/hf_tokenizer_internal.h"

#define GPT2_REGEX "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"

const char *const HF_GPT2_REGEX = GPT2_REGEX;

#define LLAMA3_REGEX                                                                         \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "               \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define QWEN2_REGEX                                                                          \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "                    \
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define QWEN35_REGEX                                                                         \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| "            \
    "?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define TEKKEN_REGEX                                                                         \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|" \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|" \
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define GPT4O_REGEX                                                                          \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+" \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"                                                         \
    "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*" \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"                                                         \
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"

#define BAILINGMOE_REGEX                                                                     \
    "'(?i:[sdmt]|ll|ve|re)|[^\\r\\n\\p{L}\\p{N}]?+\\p{L}+|\\p{N}| "                          \
    "?[^\\s\\p{L}\\p{N}]++[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"

#define EXAONE_MOE_REGEX                                                                     \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?(?:\\p{L}\\p{M}*(?: "               \
    "\\p{L}\\p{M}*)*)+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]?|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"

/* These carry literal CR/LF characters inside their classes, as the
 * deepseek and seed-coder tokenizer.json files do. */
#define SEED_CODER_REGEX                                                                     \
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| "                   \
    "?[^\\s\\p{L}\\p{N}\r\n]+|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"

#define DEEPSEEK_CJK "[一-龥ࠀ-一가-퟿]+"

static const hf_pre_type known[] = {
    {"gpt-2", 1, {GPT2_REGEX}, 0},
    {"llama-bpe", 1, {LLAMA3_REGEX}, 1},
    {"qwen2", 1, {QWEN2_REGEX}, 0},
    {"qwen35", 1, {QWEN35_REGEX}, 0},
    {"tekken", 1, {TEKKEN_REGEX}, 1},
    {"gpt-4o", 1, {GPT4O_REGEX}, 0},
    {"bailingmoe", 1, {BAILINGMOE_REGEX}, 0},
    {"seed-coder", 1, {SEED_CODER_REGEX}, 0},
    {"exaone-moe", 1, {EXAONE_MOE_REGEX}, 0},
    {"starcoder",
     2,
     {"\\p{N}", GPT2_REGEX},
     0},
    {"deepseek-coder",
     5,
     {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", DEEPSEEK_CJK, "\\p{N}"},
     0},
    {"deepseek-llm",
     6,
     {"[\r\n]",
      "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
      "\\s?[!-/:-~！-／：-～‘-‟　-。]+", "\\s+$", DEEPSEEK_CJK, "\\p{N}+"},
     0},
    {"deepseek-v3",
     3,
     {"\\p{N}{1,3}", "[一-龥぀-ゟ゠-ヿ]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
      " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"},
     0},
};

const hf_pre_type *hf_pre_match(const char *const *regexes, int n)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
        if (known[i].n_regex != n)
            continue;
        int same = 1;
        for (int j = 0; j < n && same; j++)
            same = strcmp(known[i].regex[j], regexes[j]) == 0;
        if (same)
            return &known[i];
    }
    return NULL;
}

const hf_pre_type *hf_pre_find(const char *name)
{
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(known[i].name, name) == 0)
            return &known[i];
    return NULL;
}
