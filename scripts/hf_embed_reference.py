#!/usr/bin/env python3
"""Reference embeddings and rerank scores from Hugging Face transformers,
for memra's /v1/embeddings and /v1/rerank parity tests.

Runs on the GPU machine (torch + transformers; the CPU in float64). Loads
an HF checkpoint dir of a Qwen3-shaped model (memra-convert writes one from
a GGUF) and its tokenizer dir, and writes a JSON fixture:

  embed.inputs[i]   {text, ids, last, mean}: ids as the tokenizer gives
                    them with its special tokens (add_special_tokens=True),
                    last: the final-norm hidden state of the last token, L2-
                    normalized (Qwen3-Embedding's pooling), mean: the mean
                    of every token's, L2-normalized (sentence-transformers'
                    mean pooling)
  rerank            {query, instruction, documents, ids[], scores[]}: each
                    pair formatted as Qwen3-Reranker's model card does (its
                    system prefix, "<Instruct>: ...\\n<Query>: ...\\n<Document>:
                    ...", its assistant suffix with an empty think block),
                    score = sigmoid(logit("yes") - logit("no")) at the last
                    position

  hf_embed_reference.py CHECKPOINT_DIR TOKENIZER_DIR OUT.json"""
import json
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXTS = [
    "The whale surfaced beside the ship at dawn.",
    "Instruct: Given a web search query, retrieve relevant passages that answer the query\n"
    "Query:how deep can a sperm whale dive?",
    "def add(a, b):\n    return a + b\n",
    "Ein kurzer deutscher Satz über das Meer, mit Umlauten: äöü ß.",
]
QUERY = "What do whales eat?"
INSTRUCTION = "Given a web search query, retrieve relevant passages that answer the query"
DOCS = [
    "Baleen whales filter krill and small fish from the water.",
    "The harbour was closed for the winter storms.",
    "Sperm whales hunt squid in the deep ocean.",
    "A recipe for bread: flour, water, salt and yeast.",
]
PREFIX = ("<|im_start|>system\nJudge whether the Document meets the requirements based on the "
          "Query and the Instruct provided. Note that the answer can only be \"yes\" or "
          "\"no\".<|im_end|>\n<|im_start|>user\n")
SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"


def unit(v):
    return (v / v.norm()).tolist()


def main():
    ckpt, tokdir, out = sys.argv[1:4]
    tok = AutoTokenizer.from_pretrained(tokdir)
    model = AutoModelForCausalLM.from_pretrained(ckpt, torch_dtype=torch.float64,
                                                 attn_implementation="eager").eval()
    res = {"transformers": transformers.__version__, "dtype": "float64",
           "embed": {"inputs": []}}
    with torch.no_grad():
        for text in TEXTS:
            ids = tok(text, add_special_tokens=True)["input_ids"]
            o = model(torch.tensor([ids]), output_hidden_states=True)
            h = o.hidden_states[-1][0]
            res["embed"]["inputs"].append({"text": text, "ids": ids, "last": unit(h[-1]),
                                           "mean": unit(h.mean(dim=0))})
        yes = tok.convert_tokens_to_ids("yes")
        no = tok.convert_tokens_to_ids("no")
        pre = tok(PREFIX, add_special_tokens=False)["input_ids"]
        suf = tok(SUFFIX, add_special_tokens=False)["input_ids"]
        rr = {"query": QUERY, "instruction": INSTRUCTION, "documents": DOCS, "ids": [],
              "scores": [], "yes_id": yes, "no_id": no}
        for d in DOCS:
            body = f"<Instruct>: {INSTRUCTION}\n<Query>: {QUERY}\n<Document>: {d}"
            ids = pre + tok(body, add_special_tokens=False)["input_ids"] + suf
            lg = model(torch.tensor([ids])).logits[0, -1]
            rr["ids"].append(ids)
            rr["scores"].append(torch.sigmoid(lg[yes] - lg[no]).item())
        res["rerank"] = rr
    with open(out, "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
