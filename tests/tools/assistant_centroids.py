#!/usr/bin/env python3
"""Give a gemma4_assistant checkpoint a centroid head, as the E2B/E4B
assistants carry (use_ordered_embeddings): masked_embedding.centroids.weight
F32 [4, hidden] and masked_embedding.token_ordering I64 [vocab] appended to
its safetensors, and the config keys that name them. memra reads such a
checkpoint and drafts from the whole tied head; this makes one to test that.

  assistant_centroids.py ASSISTANT_DIR   (one F32 safetensors file; rewritten in place)

Standard library only."""
import json
import os
import struct
import sys


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: assistant_centroids.py ASSISTANT_DIR")
    d = sys.argv[1]
    path = os.path.join(d, "model.safetensors")
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    end = max(t["data_offsets"][1] for k, t in header.items() if k != "__metadata__")
    cfg = json.load(open(os.path.join(d, "config.json")))
    hidden, vocab, centroids = cfg["text_config"]["hidden_size"], cfg["text_config"]["vocab_size"], 4
    cent = struct.pack("<%df" % (centroids * hidden),
                       *[((i * 7) % 13 - 6) / 50.0 for i in range(centroids * hidden)])
    order = struct.pack("<%dq" % vocab, *[(i * 5) % vocab for i in range(vocab)])
    header["masked_embedding.centroids.weight"] = {
        "dtype": "F32", "shape": [centroids, hidden], "data_offsets": [end, end + len(cent)]}
    header["masked_embedding.token_ordering"] = {
        "dtype": "I64", "shape": [vocab],
        "data_offsets": [end + len(cent), end + len(cent) + len(order)]}
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data[:end] + cent + order)
    cfg.update({"use_ordered_embeddings": True, "num_centroids": centroids,
                "centroid_intermediate_top_k": 2})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)


if __name__ == "__main__":
    main()
