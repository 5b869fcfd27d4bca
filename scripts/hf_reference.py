#!/usr/bin/env python3
"""Reference logits from Hugging Face transformers, for memra-parity.

Runs on the GPU machine (torch + transformers). Loads an HF checkpoint dir
(any, including ones memra-convert --random writes), runs one forward pass
over the given token ids in float64 on the CPU with eager attention (the
most exact reference transformers offers; float32 where a kernel has no
float64 path, e.g. grouped MoE experts: the metadata says which), and writes a safetensors dump:

  tokens  I32 [n]                 the input ids
  logits  F32 [n, vocab]          logits at every position
  hidden  F32 [n_layers + 1, n, dim]
          hidden states: [0] the scaled embeddings, [i] the output of layer i
          (HF convention: the last entry has the final norm applied)

metadata: model_type, transformers version, dtype "float64", and the
command's --note.

  hf_reference.py CHECKPOINT_DIR OUT.safetensors [--ids 1,2,3 | --n 24 --seed 0] [--note TEXT]

Without --ids, n ids are drawn with a fixed formula (i * 37 + 11) % vocab,
mixed with the seed, so a dump is reproducible without a tokenizer."""
import argparse
import json
import os
import sys

import torch
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("ckpt")
    ap.add_argument("out")
    ap.add_argument("--ids", default=None)
    ap.add_argument("--n", type=int, default=24)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--note", default="")
    a = ap.parse_args()

    cfg = json.load(open(os.path.join(a.ckpt, "config.json")))
    vocab = cfg.get("vocab_size") or cfg.get("text_config", {}).get("vocab_size")
    if a.ids:
        ids = [int(x) for x in a.ids.split(",")]
    else:
        ids = [((i * 37 + 11) + a.seed * 101) % vocab for i in range(a.n)]
    x = torch.tensor([ids], dtype=torch.long)
    # float64 where transformers can (some MoE expert kernels are f32/bf16 only).
    for dtype in (torch.float64, torch.float32):
        model = AutoModelForCausalLM.from_pretrained(a.ckpt, torch_dtype=dtype, attn_implementation="eager")
        model.eval()
        try:
            with torch.no_grad():
                out = model(x, output_hidden_states=True, use_cache=False)
            break
        except RuntimeError as e:
            if dtype != torch.float64:
                raise
            print(f"float64 forward failed ({str(e)[:80]}); using float32", file=sys.stderr)
    logits = out.logits[0].to(torch.float32).contiguous()
    hidden = torch.stack([h[0] for h in out.hidden_states]).to(torch.float32).contiguous()
    meta = {
        "model_type": str(cfg.get("model_type")),
        "transformers": transformers.__version__,
        "dtype": str(dtype).replace("torch.", ""),
        "note": a.note,
    }
    save_file({"tokens": torch.tensor(ids, dtype=torch.int32), "logits": logits, "hidden": hidden}, a.out, metadata=meta)
    top = logits.argmax(-1).tolist()
    print(f"{a.out}: {len(ids)} positions, vocab {logits.shape[1]}, {hidden.shape[0]} hidden states, argmax {top[:8]}...")


if __name__ == "__main__":
    sys.exit(main())
