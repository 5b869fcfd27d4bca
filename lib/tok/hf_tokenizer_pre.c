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

/* DeepSeek's letter, punctuation and CJK classes, kept as UTF-8 byte
 * escapes rather than literal characters. The letter class holds canonical
 * singletons (U+1F7D, U+1FBE, U+1FD3, U+1FDB, U+2126, U+212A) that any
 * NFC-normalizing editor silently turns into U+03CE, U+03B9, U+0390,
 * U+038A, U+03A9 and 'K'; that reverses ranges such as U+1F5F-U+1F7D and
 * PCRE2 rejects the class ("range out of order"). The bytes are exactly those
 * of llama.cpp's src/llama-vocab.cpp and of DeepSeek's tokenizer.json:
 * letters are A-Za-z plus the cased letters of Latin, Greek, Cyrillic,
 * Armenian, Georgian, Cherokee, Glagolitic, Coptic, the fullwidth forms and
 * a few supplementary scripts; punctuation is ASCII and fullwidth
 * punctuation, U+2018-U+201F and U+3000-U+3002; CJK is U+4E00-U+9FA5,
 * U+0800-U+4E00 and U+AC00-U+D7FF. */
#define DEEPSEEK_LETTERS \
    "\\s?[A-Za-z\302\265\303\200-\303\226\303\230-\303\266\303\270-\306\272\306\274-\306" \
    "\277\307\204-\312\223\312\225-\312\257\315\260-\315\263\315\266\315\267\315\273-\315" \
    "\275\315\277\316\206\316\210-\316\212\316\214\316\216-\316\241\316\243-\317\265\317" \
    "\267-\322\201\322\212-\324\257\324\261-\325\226\341\202\240-\341\203\205\341\216\240" \
    "-\341\217\265\341\217\270-\341\217\275\341\262\220-\341\262\272\341\262\275-\341\262" \
    "\277\341\264\200-\341\264\253\341\265\253-\341\265\267\341\265\271-\341\266\232\341" \
    "\270\200-\341\274\225\341\274\230-\341\274\235\341\274\240-\341\275\205\341\275\210-" \
    "\341\275\215\341\275\220-\341\275\227\341\275\231\341\275\233\341\275\235\341\275" \
    "\237-\341\275\275\341\276\200-\341\276\264\341\276\266-\341\276\274\341\276\276\341" \
    "\277\202-\341\277\204\341\277\206-\341\277\214\341\277\220-\341\277\223\341\277\226-" \
    "\341\277\233\341\277\240-\341\277\254\341\277\262-\341\277\264\341\277\266-\341\277" \
    "\274\342\204\202\342\204\207\342\204\212-\342\204\223\342\204\225\342\204\231-\342" \
    "\204\235\342\204\244\342\204\246\342\204\250\342\204\252-\342\204\255\342\204\257-" \
    "\342\204\264\342\204\271\342\204\274-\342\204\277\342\205\205-\342\205\211\342\205" \
    "\216\342\206\203\342\206\204\342\260\200-\342\261\273\342\261\276-\342\263\244\342" \
    "\263\253-\342\263\256\342\263\262\342\263\263\352\231\200-\352\231\255\352\232\200-" \
    "\352\232\233\352\234\242-\352\235\257\352\235\261-\352\236\207\352\236\213-\352\236" \
    "\216\352\255\260-\352\256\277\357\254\200-\357\254\206\357\254\223-\357\254\227\357" \
    "\274\241-\357\274\272\357\275\201-\357\275\232\360\220\220\200-\360\220\221\217\360" \
    "\220\222\260-\360\220\223\223\360\220\223\230-\360\220\223\273\360\220\262\200-\360" \
    "\220\262\262\360\220\263\200-\360\220\263\262\360\221\242\240-\360\221\243\237\360" \
    "\236\244\200-\360\236\245\203]+"

#define DEEPSEEK_PUNCT \
    "\\s?[!-/:-~\357\274\201-\357\274\217\357\274\232-\357\275\236\342\200\230-\342\200" \
    "\237\343\200\200-\343\200\202]+"

#define DEEPSEEK_CJK \
    "[\344\270\200-\351\276\245\340\240\200-\344\270\200\352\260\200-\355\237\277]+"

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
      DEEPSEEK_LETTERS,
      DEEPSEEK_PUNCT,
      "\\s+$",
      DEEPSEEK_CJK, "\\p{N}+"},
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
