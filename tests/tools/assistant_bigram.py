#!/usr/bin/env python3
"""Turn a random Gemma 4 model and a random gemma4_assistant for it into a
pair whose assistant predicts exactly what the model will: a test of the
assistant's wiring that needs no training.

In both, every sublayer's output projection is zeroed (attention o_proj,
every FFN down_proj, the per-layer-input projection), every norm weight
and layer scalar set to 1, so the model's last hidden state is the final
norm of its input token's (scaled) embedding and greedy decoding is a
fixed map next = f(token). The assistant's pre_projection becomes [I | 0]:
it reads the model's embedding of the token it is given and ignores the
hidden state; its head is made the model's embedding table, so its logits
are the model's logits for that token (the model's config must have no
final soft-cap, which would tie large logits the assistant keeps apart).
Each draft is then the token the model will emit: an assistant that reads
the wrong token, the wrong half of its input, the wrong table or the wrong
head accepts (almost) nothing. The assistant's hidden size must equal the
model's, both checkpoints F32, one safetensors file each.

  assistant_bigram.py MODEL_DIR ASSISTANT_DIR   (rewritten in place)

Standard library only."""
import json
import os
import struct
import sys

ONE = struct.pack("<f", 1.0)
ZERO_SUFFIXES = (".self_attn.o_proj.weight", ".mlp.down_proj.weight",
                 ".per_layer_projection.weight")


def is_one(name):
    parts = name.split(".")
    return name.endswith(".layer_scalar") or (len(parts) > 1 and "norm" in parts[-2])


def open_file(d):
    path = os.path.join(d, "model.safetensors")
    f = open(path, "r+b")
    (n,) = struct.unpack("<Q", f.read(8))
    header = json.loads(f.read(n))
    for name, t in header.items():
        if name != "__metadata__" and t["dtype"] != "F32":
            sys.exit(f"assistant_bigram.py: {path}: {name} is {t['dtype']}, not F32")
    return f, header, 8 + n


def fill(f, base, t, value):
    lo, hi = t["data_offsets"]
    f.seek(base + lo)
    f.write(value * ((hi - lo) // 4))


def neutral(f, header, base):
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if name.endswith(ZERO_SUFFIXES):
            fill(f, base, t, bytes(4))
        elif is_one(name):
            fill(f, base, t, ONE)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: assistant_bigram.py MODEL_DIR ASSISTANT_DIR")
    mf, mh, mb = open_file(sys.argv[1])
    af, ah, ab = open_file(sys.argv[2])
    neutral(mf, mh, mb)
    neutral(af, ah, ab)
    emb = mh.get("model.embed_tokens.weight") or mh.get("model.language_model.embed_tokens.weight")
    aemb, pre = ah.get("model.embed_tokens.weight"), ah.get("pre_projection.weight")
    if not emb or not aemb or not pre:
        sys.exit("assistant_bigram.py: the model's or the assistant's embed_tokens, or the "
                 "assistant's pre_projection, is missing")
    if emb["shape"] != aemb["shape"]:
        sys.exit(f"assistant_bigram.py: the model's embedding is {emb['shape']}, the assistant's "
                 f"{aemb['shape']}: give the assistant the model's hidden size")
    lo, hi = emb["data_offsets"]
    mf.seek(mb + lo)
    table = mf.read(hi - lo)
    af.seek(ab + aemb["data_offsets"][0])
    af.write(table)
    rows, cols = pre["shape"]
    if cols != 2 * rows:
        sys.exit(f"assistant_bigram.py: pre_projection is {pre['shape']}, not [d, 2d]")
    fill(af, ab, pre, bytes(4))
    base = ab + pre["data_offsets"][0]
    for i in range(rows):
        af.seek(base + 4 * (i * cols + i))
        af.write(ONE)
    mf.close()
    af.close()


if __name__ == "__main__":
    main()
