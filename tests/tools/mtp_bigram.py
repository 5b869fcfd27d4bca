#!/usr/bin/env python3
"""Turn a random qwen3_5 checkpoint with an MTP block into one whose MTP
block predicts exactly what the model will: a test of the block's wiring
that needs no training.

Every sublayer's output projection is zeroed (attention o_proj, the
DeltaNet out_proj, every FFN and expert down_proj), so the model's last
hidden state is its input token's embedding and greedy decoding is a fixed
map next = f(token). Every norm weight is set to 0 (x * (1 + 0)), and the
block's fc to [I | 0]: it reads the normed embedding of the token after
the position and ignores the hidden state, so its head gives f(next), the
token after next. A drafter that reads the wrong token, the wrong half of
fc, or the wrong head then accepts (almost) nothing.

  mtp_bigram.py HF_DIR   (an f32 checkpoint in one model.safetensors; rewritten in place)

Standard library only."""
import json
import struct
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: mtp_bigram.py HF_DIR")
    path = sys.argv[1] + "/model.safetensors"
    with open(path, "rb") as f:
        raw = bytearray(f.read())
    (n,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    zero_suffixes = (".self_attn.o_proj.weight", ".linear_attn.out_proj.weight",
                     ".down_proj.weight")
    seen_fc = False
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"mtp_bigram.py: {name} is {t['dtype']}, not F32 (convert with --outtype f32)")
        lo, hi = t["data_offsets"]
        lo += base
        hi += base
        is_norm = len(name.split(".")) > 1 and "norm" in name.split(".")[-2]
        if name.endswith(zero_suffixes) or is_norm:
            raw[lo:hi] = bytes(hi - lo)
        elif name == "mtp.fc.weight":
            rows, cols = t["shape"]
            if cols != 2 * rows:
                sys.exit(f"mtp_bigram.py: mtp.fc.weight is {t['shape']}, not [dim, 2 dim]")
            raw[lo:hi] = bytes(hi - lo)
            for r in range(rows):
                struct.pack_into("<f", raw, lo + (r * cols + r) * 4, 1.0)
            seen_fc = True
    if not seen_fc:
        sys.exit(f"mtp_bigram.py: {path} has no mtp.fc.weight")
    with open(path, "wb") as f:
        f.write(raw)


if __name__ == "__main__":
    main()
