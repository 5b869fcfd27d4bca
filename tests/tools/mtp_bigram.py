#!/usr/bin/env python3
"""Turn a random qwen3_5 checkpoint with an MTP block into one whose MTP
block predicts exactly what the model will: a test of the block's wiring
that needs no training, and a model whose drafts are (nearly) all accepted
for measuring speculation at a real shape (the step still reads every
weight: zeros cost what random values do).

Every sublayer's output projection is zeroed (attention o_proj, the
DeltaNet out_proj, every FFN and expert down_proj), so the model's last
hidden state is its input token's embedding and greedy decoding is a fixed
map next = f(token). Every norm weight is set to 0 (x * (1 + 0)), and the
block's fc to [I | 0]: it reads the normed embedding of the token after
the position and ignores the hidden state, so its head gives f(next), the
token after next. A drafter that reads the wrong token, the wrong half of
fc, or the wrong head then accepts (almost) nothing. In f32 every draft is
accepted; in bf16 the model's and the block's logits round apart at
near-ties, and about half are.

  mtp_bigram.py HF_DIR   (F32 or BF16 safetensors, one file or shards; rewritten in place)

Standard library only."""
import glob
import json
import os
import struct
import sys

ONE = {"F32": struct.pack("<f", 1.0), "BF16": struct.pack("<f", 1.0)[2:]}
SIZE = {"F32": 4, "BF16": 2}
ZERO_SUFFIXES = (".self_attn.o_proj.weight", ".linear_attn.out_proj.weight", ".down_proj.weight")


def is_norm(name):
    parts = name.split(".")
    return len(parts) > 1 and "norm" in parts[-2]


def rewrite(path):
    """Zero and set the tensors of one safetensors file in place; True when
    it held mtp.fc.weight."""
    seen_fc = False
    with open(path, "r+b") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        base = 8 + n
        for name, t in header.items():
            if name == "__metadata__":
                continue
            fc = name == "mtp.fc.weight"
            if not (fc or name.endswith(ZERO_SUFFIXES) or is_norm(name)):
                continue
            if t["dtype"] not in SIZE:
                sys.exit(f"mtp_bigram.py: {name} is {t['dtype']}, not F32 or BF16")
            lo, hi = t["data_offsets"]
            f.seek(base + lo)
            left = hi - lo
            while left:
                chunk = min(left, 64 << 20)
                f.write(bytes(chunk))
                left -= chunk
            if fc:
                rows, cols = t["shape"]
                if cols != 2 * rows:
                    sys.exit(f"mtp_bigram.py: mtp.fc.weight is {t['shape']}, not [dim, 2 dim]")
                es = SIZE[t["dtype"]]
                for r in range(rows):
                    f.seek(base + lo + (r * cols + r) * es)
                    f.write(ONE[t["dtype"]])
                seen_fc = True
    return seen_fc


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: mtp_bigram.py HF_DIR")
    files = sorted(glob.glob(os.path.join(sys.argv[1], "*.safetensors")))
    if not files:
        sys.exit(f"mtp_bigram.py: no .safetensors in {sys.argv[1]}")
    found = [rewrite(p) for p in files]
    if not any(found):
        sys.exit(f"mtp_bigram.py: {sys.argv[1]} has no mtp.fc.weight")


if __name__ == "__main__":
    main()
