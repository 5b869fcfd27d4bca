"""memra-tiny that ends its turns: a copy of models/memra-tiny.gguf whose
<|endoftext|> output row is the "." row scaled by 1.5.

memra-tiny was trained on whole books, so it writes for thousands of tokens
before it predicts <|endoftext|>; an agent reads a reply cut by max_tokens
as an error (Claude Code: "response exceeded the N output token maximum")
and exits 1 whatever the protocol did. With this row the end-of-text logit
is the full stop's times 1.5, so the model stops where it would have ended
a sentence: its text is memra-tiny's, its replies end with end_turn. The
embeddings are tied, so the row is also the token's input embedding, which
no prompt uses (nothing is added on encoding).

  python3 tiny-eos.py HF_DIR   (memra-convert models/memra-tiny.gguf HF_DIR first)

Edits HF_DIR/model.safetensors in place; pure Python (no numpy).
"""
import json
import struct
import sys

EOS, STOP, SCALE = 4093, 13, 1.5  # <|endoftext|>, ".", see above

path = sys.argv[1] + "/model.safetensors"
with open(path, "r+b") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    header = json.loads(f.read(n))
    t = header["model.embed_tokens.weight"]
    assert t["dtype"] == "BF16", t
    rows, dim = t["shape"]
    base = 8 + n + t["data_offsets"][0]
    f.seek(base + STOP * dim * 2)
    row = struct.unpack(f"<{dim}H", f.read(dim * 2))
    out = []
    for h in row:
        x = struct.unpack("<f", struct.pack("<I", h << 16))[0] * SCALE
        b = struct.unpack("<I", struct.pack("<f", x))[0]
        out.append(((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF)  # round to nearest even
    f.seek(base + EOS * dim * 2)
    f.write(struct.pack(f"<{dim}H", *out))
