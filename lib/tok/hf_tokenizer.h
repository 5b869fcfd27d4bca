/* Hugging Face tokenizer directory <-> GGUF `tokenizer.*` metadata, written
 * the way llama.cpp's convert_hf_to_gguf.py and gguf-py write them, so that
 * other GGUF readers load our files and we load theirs.
 *
 * HF -> GGUF (hf_tokenizer_to_gguf) reads from `dir`:
 *   tokenizer.json          required; model.type must be "BPE"
 *   tokenizer_config.json   bos/eos/unk/sep/pad/mask tokens (a string or
 *                           {"content": ...}), add_bos_token/add_eos_token/
 *                           add_sep_token, chat_template (a string, or a list
 *                           of {name, template})
 *   chat_template.jinja     (+ additional_chat_templates/<name>.jinja) or
 *                           chat_template.json, when tokenizer_config.json has
 *                           no chat_template
 *   config.json             vocab_size (pads the vocabulary with "[PAD<id>]"
 *                           tokens of type UNUSED, score -1000, as convert
 *                           does; hf_tokenizer_to_gguf_rows pads to the
 *                           rows it is given instead) and
 *                           <type>_token_id fallbacks (also under text_config)
 *   generation_config.json  <type>_token_id fallbacks (a list: its first id)
 *   tokenizer.model         SentencePiece-style vocabularies only: the scores
 *                           (and UNUSED piece types) where its pieces agree
 *                           with tokenizer.json
 * and sets on the writer:
 *   tokenizer.ggml.model    "gpt2" for byte-level BPE (a ByteLevel
 *                           pre-tokenizer or decoder), "llama" for
 *                           SentencePiece-style BPE (model.byte_fallback)
 *   tokenizer.ggml.pre      gpt2: the llama.cpp name whose regexes equal the
 *                           pre_tokenizer's (Split / ByteLevel / Digits),
 *                           else "default" with a warning; llama: "default"
 *   tokenizer.ggml.tokens   model.vocab + added_tokens in id order; ids must
 *                           be contiguous from 0 (a gap is an error)
 *   tokenizer.ggml.token_type  i32: 1 normal, 2 unknown (model.unk_token,
 *                           llama), 3 control (special added tokens, and
 *                           non-special ones that look special: <|...|>,
 *                           <pad>, <unused..>, as convert decides), 4
 *                           user-defined (other added tokens; U+2581 in them
 *                           becomes a space, as convert does), 5 unused
 *                           (padding), 6 byte (<0xNN> in llama vocabularies)
 *   tokenizer.ggml.scores   llama only (convert writes none for gpt2):
 *                           tokenizer.model's piece scores when present;
 *                           else 0 for unknown/control/byte, -1000 for
 *                           user-defined/unused, and for normal tokens
 *                           -(1 + rank of the first merge producing the
 *                           token), -(1 + number of merges) when no merge
 *                           produces it. convert's tokenizer.json-only path
 *                           writes -1000 everywhere, which makes llama.cpp's
 *                           SentencePiece merge order positional; the
 *                           merge-derived scores keep the BPE merge order.
 *   tokenizer.ggml.merges   gpt2 only: "a b" strings; merges given as
 *                           ["a","b"] pairs are joined with a space, spaces
 *                           inside a part written as U+0120 (as gguf-py does)
 *   tokenizer.ggml.{bos,eos,unknown,seperator,padding,mask}_token_id (u32):
 *                           tokenizer_config's token mapped through
 *                           added_tokens (then model.vocab), else config.json,
 *                           else generation_config.json
 *   tokenizer.ggml.add_bos_token / add_eos_token / add_sep_token (bool):
 *                           from post_processor (TemplateProcessing: a leading
 *                           bos / trailing eos special token; RobertaProcessing:
 *                           all three), overridden by tokenizer_config's flags
 *   tokenizer.ggml.add_space_prefix = false: llama only, when neither a
 *                           Prepend("\u2581") normalizer nor a prefixing
 *                           Metaspace pre-tokenizer is present (llama.cpp
 *                           defaults to true; not written then)
 *   tokenizer.chat_template, tokenizer.chat_template.<name>,
 *   tokenizer.chat_templates (the names)
 * Nothing is set on the writer unless every input checks out. Token ids
 * must be below 2^22. A vocab-only GGUF is a writer holding these keys plus
 * general.architecture.
 *
 * GGUF -> HF (gguf_tokenizer_to_hf) writes into `dir` (created if missing;
 * its parent must exist), replacing files of these names atomically:
 *   tokenizer.json          BPE model with the vocab, merges (gpt2; for llama
 *                           derived from the scores: every split of a normal
 *                           token into two normal tokens, ordered by the
 *                           token's score), byte_fallback and unk_token
 *                           (llama), added_tokens for control/unknown
 *                           (special) and user-defined/unused (not special)
 *                           tokens, the pre-tokenizer regexes of a known
 *                           tokenizer.ggml.pre with a ByteLevel pre-tokenizer
 *                           and decoder (gpt2), the Prepend+Replace
 *                           normalizer and Replace/ByteFallback/Fuse/Strip
 *                           decoder of Llama 2 (llama; without Prepend/Strip
 *                           when add_space_prefix is false), and a
 *                           TemplateProcessing post-processor when BOS/EOS
 *                           are added
 *   tokenizer_config.json   bos/eos/unk/pad/sep/mask tokens, add_bos_token /
 *                           add_eos_token / add_sep_token, chat_template (a
 *                           string, or a list of {name, template} when
 *                           tokenizer.chat_templates names more)
 *   tokenizer.model         llama only: every token with its score and type,
 *                           so scores and types survive the trip
 * Not carried back (no place in these files, or not well defined):
 *   eot/eom/fim token ids; a gpt2 vocabulary's normalizer (e.g. Qwen's NFC);
 *   in a gpt2 vocabulary, the UNUSED type (such tokens come back as
 *   user-defined), UNKNOWN (comes back as control) and BYTE (as normal);
 *   regexes of pre types not in our table (tokenizer.json then has no Split
 *   and the pre comes back as "default"); added tokens' lstrip / rstrip /
 *   single_word / normalized flags (written false); tokenizer_config.json's
 *   tokenizer_class (we write PreTrainedTokenizerFast) and model_max_length.
 * Round trip: HF dir -> GGUF keys -> HF dir -> GGUF keys gives identical
 * keys for vocabularies whose types are among normal, unknown, control,
 * user-defined, byte (and unused for llama). */
#ifndef MEMRA_TOK_HF_TOKENIZER_H
#define MEMRA_TOK_HF_TOKENIZER_H

#include "core/err.h"
#include "format/gguf.h"

int hf_tokenizer_to_gguf(const char *dir, gguf_writer *w, memra_err *err);
/* The same, padded to the model's `rows` embedding rows (rows >= 0; fewer
 * rows than tokens is an error) instead of config.json's vocab_size: what a
 * converter that knows the model calls, so that the token count always
 * equals token_embd's rows, which llama.cpp requires. */
int hf_tokenizer_to_gguf_rows(const char *dir, int64_t rows, gguf_writer *w, memra_err *err);
int gguf_tokenizer_to_hf(const gguf_file *f, const char *dir, memra_err *err);

#endif
