#!/usr/bin/env python3
"""Interoperability check, run on the GPU machine (which has transformers):
load checkpoints memra wrote with Hugging Face's own loaders and compare
every tensor with what memra wrote.

  hf_load_check.py HF_DIR [GGUF]

HF_DIR: loaded with AutoModelForCausalLM; there must be no missing or
unexpected keys, and each parameter must equal the safetensors bytes.
GGUF (optional): loaded with transformers' GGUF loader (which undoes
llama.cpp's conventions itself); each parameter must equal HF_DIR's.
Prints one line per check and exits 1 on any mismatch."""
import json
import os
import sys

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def load_dir_tensors(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for f in files:
        out.update(load_file(os.path.join(d, f)))
    return out


def main():
    hf_dir = sys.argv[1]
    gguf = sys.argv[2] if len(sys.argv) > 2 else None
    ok = True
    model, info = AutoModelForCausalLM.from_pretrained(hf_dir, torch_dtype="auto", output_loading_info=True)
    missing = [k for k in info["missing_keys"] if "rotary" not in k]
    if missing or info["unexpected_keys"] or info.get("mismatched_keys"):
        print(f"FAIL {hf_dir}: missing {missing[:5]} unexpected {info['unexpected_keys'][:5]} mismatched {info.get('mismatched_keys')}")
        ok = False
    ref = load_dir_tensors(hf_dir)
    sd = model.state_dict()
    bad = [k for k, v in ref.items() if k in sd and not torch.equal(sd[k].cpu(), v)]
    print(f"{'PASS' if not bad else 'FAIL'} transformers loads {hf_dir}: {len(ref)} tensors, {len(bad)} differ {bad[:3]}")
    ok = ok and not bad
    if gguf:
        try:
            g = AutoModelForCausalLM.from_pretrained(os.path.dirname(gguf), gguf_file=os.path.basename(gguf), torch_dtype=torch.float32)
        except Exception as e:  # transformers without gguf support, or an unsupported arch
            print(f"FAIL transformers GGUF load {gguf}: {type(e).__name__}: {str(e)[:300]}")
            return 1
        gsd = g.state_dict()
        bad = []
        for k, v in ref.items():
            if k not in gsd:
                bad.append(("missing", k))
            elif not torch.equal(gsd[k].float().cpu(), v.float()):
                d = (gsd[k].float().cpu() - v.float()).abs().max().item()
                bad.append((k, d))
        print(f"{'PASS' if not bad else 'FAIL'} transformers reads {gguf} as {hf_dir}: {len(bad)} differ {bad[:3]}")
        ok = ok and not bad
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
