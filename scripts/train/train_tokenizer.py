#!/usr/bin/env python3
"""Trains the memra-tiny tokenizer: a byte-level BPE on the training split.

  train_tokenizer.py CORPUS_DIR OUT_DIR [--vocab 4096] [--max-len 512]

Reads CORPUS_DIR/train.txt (scripts/fetch-corpus.sh), writes into OUT_DIR:

  tokenizer.json          Hugging Face `tokenizers` format: BPE model (no
                          unk token, no byte fallback: every byte is in the
                          base alphabet), pre-tokenizer Sequence[Split(the
                          Qwen2 regex, Isolated), ByteLevel(no prefix space,
                          no regex)], ByteLevel decoder and post-processor,
                          no normalizer. memra-convert recognises the
                          pre-tokenizer as llama.cpp's "qwen2".
  tokenizer_config.json   bos/eos/pad "<|endoftext|>", no BOS/EOS added on
                          encode, model_max_length, a ChatML chat template.

Vocabulary layout: ids 0..vocab-4 are the BPE vocabulary (the 256
byte-level symbols first, then the merges in order); the three special
tokens come last, as in Qwen's tokenizers: <|endoftext|> = vocab-3,
<|im_start|> = vocab-2, <|im_end|> = vocab-1.

Deterministic: the BPE trainer has no randomness for a byte-level model
without a subword prefix (ties in pair counts are broken by the pair's
ids), and the input is the documents in file order. Only `tokenizers`
is needed; when `transformers` is importable too, the written directory
is loaded with AutoTokenizer as a check (a warning if that fails)."""
import argparse
import hashlib
import json
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
import tokenizers

# The pre-tokenizer regex of Qwen2/Qwen3's tokenizer.json (llama.cpp "qwen2").
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# ChatML, as Qwen's models use it, without tools or a default system prompt.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def read_docs(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    docs = [d for d in text.rstrip("\n").split("\n\n\n") if d]
    if not docs:
        sys.exit("train_tokenizer: %s: no documents" % path)
    return docs


def build(docs, vocab):
    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab - len(SPECIALS),
        min_frequency=2,
        show_progress=False,
        special_tokens=[],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(docs, trainer=trainer, length=len(docs))
    if tok.get_vocab_size(with_added_tokens=False) != vocab - len(SPECIALS):
        sys.exit(
            "train_tokenizer: the BPE trainer stopped at %d tokens, wanted %d (too little text?)"
            % (tok.get_vocab_size(with_added_tokens=False), vocab - len(SPECIALS))
        )
    tok.add_special_tokens(SPECIALS)
    for i, s in enumerate(SPECIALS):
        if tok.token_to_id(s) != vocab - len(SPECIALS) + i:
            sys.exit("train_tokenizer: %s got id %s" % (s, tok.token_to_id(s)))
    return tok


def config(max_len):
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": max_len,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }


def check_roundtrip(tok, docs):
    """Every document must decode back to itself: no byte may be lost."""
    sample = docs[:5] + docs[-5:] + ["caf\u00e9 \u2014 \U0001f40b  tabs\tand\r\nCRLF 12345 <|im_start|>user\nhi<|im_end|>"]
    for d in sample:
        ids = tok.encode(d).ids
        back = tok.decode(ids, skip_special_tokens=False)
        if back != d:
            sys.exit("train_tokenizer: round trip failed for %r..." % d[:60])


def check_transformers(out_dir, tok):
    try:
        from transformers import AutoTokenizer
    except Exception as e:  # transformers is optional here
        print("train_tokenizer: transformers not importable (%s); AutoTokenizer check skipped" % e)
        return
    try:
        t = AutoTokenizer.from_pretrained(out_dir)
        text = "Call me Ishmael. Some years ago"
        a, b = t(text)["input_ids"], tok.encode(text).ids
        chat = t.apply_chat_template([{"role": "user", "content": "Hello"}], tokenize=False, add_generation_prompt=True)
        ok = a == b and chat == "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
        print("train_tokenizer: AutoTokenizer check %s (%s; eos %r id %s)" % ("ok" if ok else "MISMATCH", type(t).__name__, t.eos_token, t.eos_token_id))
        if not ok:
            print("  transformers ids %s\n  tokenizers ids   %s\n  chat %r" % (a, b, chat))
    except Exception as e:
        print("train_tokenizer: WARNING: AutoTokenizer could not load %s: %s" % (out_dir, e))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("out")
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--max-len", type=int, default=512)
    a = ap.parse_args()

    docs = read_docs(os.path.join(a.corpus, "train.txt"))
    tok = build(docs, a.vocab)
    check_roundtrip(tok, docs)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "tokenizer.json")
    tok.save(path, pretty=True)
    with open(os.path.join(a.out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config(a.max_len), f, indent=2, ensure_ascii=False)
        f.write("\n")
    # Reload what was written: the saved file is the artifact.
    again = Tokenizer.from_file(path)
    probe = docs[0][:2000]
    if again.encode(probe).ids != tok.encode(probe).ids:
        sys.exit("train_tokenizer: %s encodes differently after reloading" % path)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    n_tokens = sum(len(e.ids) for e in again.encode_batch(docs))
    n_bytes = sum(len(d.encode("utf-8")) for d in docs)
    print(
        "train_tokenizer: tokenizers %s, vocab %d, %d documents, %d bytes -> %d tokens (%.2f bytes/token), "
        "tokenizer.json sha256 %s"
        % (tokenizers.__version__, again.get_vocab_size(), len(docs), n_bytes, n_tokens, n_bytes / n_tokens, digest)
    )
    check_transformers(a.out, again)


if __name__ == "__main__":
    main()
