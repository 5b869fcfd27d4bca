#!/usr/bin/env python3
"""Turn a random model and a random draft model cut from it into a pair whose
draft predicts the model's next token with a chosen acceptance: a measure of
what speculation costs and gains on real shapes, with no trained pair.

Make both with the same config and seed, the draft with fewer layers
(`jq '.num_hidden_layers = 2'`): `memra-convert --random` draws each tensor
from the seed and the tensor's name, so the two share the embedding, the
head, the final norm and their common layers. This script zeroes every
attention o_proj and FFN down_proj in both, so a layer adds nothing to the
residual stream (a step still reads every weight) and each model's logits
depend on its input token alone: the same map next = f(token) for both, so
the draft agrees with every token. Then, in the draft alone, the embedding
rows of a fraction MISS of the ids are exchanged in pairs, so from those
tokens the draft predicts the wrong one: a round's drafts are accepted up to
the first such token, about 1 - MISS of them.

  draft_bigram.py MODEL_DIR DRAFT_DIR [MISS]   (rewritten in place; MISS 0..1, default 0)

Safetensors files of any float type, one or several shards per directory.
Standard library only."""
import glob
import json
import os
import struct
import sys

ZERO_SUFFIXES = (".self_attn.o_proj.weight", ".mlp.down_proj.weight")
EMBED = "model.embed_tokens.weight"


def shards(d):
    files = sorted(glob.glob(os.path.join(d, "*.safetensors")))
    if not files:
        sys.exit(f"draft_bigram.py: {d}: no .safetensors files")
    out = []
    for path in files:
        f = open(path, "r+b")
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        out.append((path, f, header, 8 + n))
    return out


def zero_outputs(files):
    zeroed = 0
    for _, f, header, base in files:
        for name, t in header.items():
            if name != "__metadata__" and name.endswith(ZERO_SUFFIXES):
                lo, hi = t["data_offsets"]
                f.seek(base + lo)
                left = hi - lo
                while left:
                    step = min(left, 1 << 24)
                    f.write(bytes(step))
                    left -= step
                zeroed += 1
    return zeroed


def find(files, name):
    for path, f, header, base in files:
        if name in header:
            return f, header[name], base
    return None, None, None


def swap_rows(files, miss):
    f, t, base = find(files, EMBED)
    if not f:
        sys.exit(f"draft_bigram.py: the draft has no {EMBED}")
    rows, cols = t["shape"]
    lo, hi = t["data_offsets"]
    row = (hi - lo) // rows
    # ids whose hash falls under MISS, exchanged in pairs in id order
    chosen = [i for i in range(rows) if (i * 2654435761 % 4294967296) / 4294967296.0 < miss]
    for a, b in zip(chosen[0::2], chosen[1::2]):
        f.seek(base + lo + a * row)
        ra = f.read(row)
        f.seek(base + lo + b * row)
        rb = f.read(row)
        f.seek(base + lo + a * row)
        f.write(rb)
        f.seek(base + lo + b * row)
        f.write(ra)
    return 2 * (len(chosen) // 2), rows


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit("usage: draft_bigram.py MODEL_DIR DRAFT_DIR [MISS]")
    miss = float(sys.argv[3]) if len(sys.argv) == 4 else 0.0
    if not 0.0 <= miss <= 1.0:
        sys.exit(f"draft_bigram.py: MISS {miss} is not in [0, 1]")
    model, draft = shards(sys.argv[1]), shards(sys.argv[2])
    zm, zd = zero_outputs(model), zero_outputs(draft)
    if zm == 0 or zd == 0:
        sys.exit("draft_bigram.py: no o_proj / down_proj tensors to zero (a llama-style "
                 "checkpoint is needed)")
    swapped, rows = swap_rows(draft, miss)
    for files in (model, draft):
        for _, f, _, _ in files:
            f.close()
    print(f"draft_bigram.py: zeroed {zm} + {zd} output projections; {swapped} of the draft's "
          f"{rows} embedding rows exchanged")


if __name__ == "__main__":
    main()
