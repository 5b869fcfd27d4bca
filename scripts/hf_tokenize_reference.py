#!/usr/bin/env python3
"""Reference token ids from Hugging Face `tokenizers`, for the tokenizer tests.

Runs on the GPU machine (the `tokenizers` package is there). For each
tokenizer dir given and each case of the corpus, writes the ids that
Tokenizer.from_file(dir/tokenizer.json).encode(text, add_special_tokens=False)
gives, into OUT_DIR/<name>.json:

  {"tokenizer": "<name>", "tokenizers_version": "...",
   "cases": [{"hex": "<input bytes as hex>", "text": "<input>" (absent when
              not valid UTF-8), "ids": [...]}]}

Input bytes that are not valid UTF-8 are decoded with errors="replace" (each
maximal invalid subsequence becomes U+FFFD) before tokenizing: Rust strings
cannot hold them, and this is what a client that decodes leniently sends.

  hf_tokenize_reference.py CORPUS.json OUT_DIR NAME=DIR [NAME=DIR ...]

CORPUS.json: {"cases": [{"hex": "..."}]}."""
import json
import os
import sys

import tokenizers
from tokenizers import Tokenizer


def main():
    corpus, out_dir, pairs = sys.argv[1], sys.argv[2], sys.argv[3:]
    cases = json.load(open(corpus))["cases"]
    os.makedirs(out_dir, exist_ok=True)
    for pair in pairs:
        name, d = pair.split("=", 1)
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        out = []
        for c in cases:
            raw = bytes.fromhex(c["hex"])
            try:
                text = raw.decode("utf-8")
                valid = True
            except UnicodeDecodeError:
                text = raw.decode("utf-8", errors="replace")
                valid = False
            ids = tok.encode(text, add_special_tokens=False).ids
            case = {"hex": c["hex"], "ids": ids}
            if valid:
                case["text"] = text
            out.append(case)
        with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
            json.dump({"tokenizer": name, "tokenizers_version": tokenizers.__version__, "cases": out}, f, ensure_ascii=False, indent=0)
        print(f"{name}: {len(out)} cases")


if __name__ == "__main__":
    sys.exit(main())
