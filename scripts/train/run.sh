#!/usr/bin/env bash
# Trains the memra-tiny family in one go on the GPU machine (torch,
# transformers, tokenizers; no internet): the tokenizer, memra-tiny, then
# memra-tiny-draft distilled from it; then Hugging Face reference dumps of
# both for the parity tests and HF tokenizer ids of the adversarial corpus.
# Run from the repo root on a machine with a GPU, with the corpus of
# scripts/fetch-corpus.sh:
#
#   scripts/train/run.sh [--out DIR] [CORPUS_DIR]
#   e.g. scripts/train/run.sh --out /tmp/train "$(scripts/fetch-corpus.sh)"
#
# CORPUS_DIR defaults to build/corpus; --out to a new temp dir (printed).
# Environment: TINY_MINUTES (3), DRAFT_MINUTES (1), SEED (1). About
# TINY_MINUTES + DRAFT_MINUTES + 1.5 minutes in all.
#
# Writes to the --out dir:
#   results.json            both models' results.json and the tokenizer's
#                           sha256, in one object
#   train.log               everything printed
#   memra-tiny-run.tar.gz   tokenizer/, memra-tiny/, memra-tiny-draft/ (HF
#                           checkpoints in bf16 with tokenizer files and
#                           results.json), refs/parity/<model>.safetensors
#                           (scripts/hf_reference.py dumps over the first 48
#                           ids of heldout-sample.txt), refs/tokenizer-ref/
#                           memra-tiny.json (scripts/hf_tokenize_reference.py)
set -euo pipefail
OUT=""
if [ "${1:-}" = --out ]; then OUT=${2:?--out needs a dir}; shift 2; fi
corpus=${1:-build/corpus}
[ -n "$OUT" ] || OUT=$(mktemp -d /tmp/memra-train.XXXXXX)
mkdir -p "$OUT"
echo "run.sh: writing to $OUT" >&2
for f in train.txt heldout.txt heldout-sample.txt; do
  [ -s "$corpus/$f" ] || { echo "run.sh: $corpus/$f missing (run scripts/fetch-corpus.sh and copy its dir)" >&2; exit 1; }
done
exec > >(tee "$OUT/train.log") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
w=/tmp/memra-train
rm -rf "$w" && mkdir -p "$w/refs/parity" "$w/refs/tokenizer-ref"
seed=${SEED:-1}
t0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
sha256sum "$corpus"/train.txt "$corpus"/heldout.txt "$corpus"/heldout-sample.txt

echo "== tokenizer"
python3 scripts/train/train_tokenizer.py "$corpus" "$w/tokenizer"

echo "== memra-tiny"
python3 scripts/train/train_model.py --size memra-tiny --corpus "$corpus" --tokenizer "$w/tokenizer" \
  --out "$w/memra-tiny" --minutes "${TINY_MINUTES:-3}" --seed "$seed"

echo "== memra-tiny-draft (distilled from memra-tiny)"
python3 scripts/train/train_model.py --size memra-tiny-draft --corpus "$corpus" --tokenizer "$w/tokenizer" \
  --out "$w/memra-tiny-draft" --minutes "${DRAFT_MINUTES:-1}" --seed "$seed" --teacher "$w/memra-tiny"

# What follows adds reference files; a failure there must not lose the models.
echo "== HF reference dumps (float64, CPU)"
ids=$(python3 -c "
import sys
from tokenizers import Tokenizer
t = Tokenizer.from_file(sys.argv[1])
text = open(sys.argv[2], encoding='utf-8', newline='').read()
print(','.join(map(str, t.encode(text, add_special_tokens=False).ids[:48])))" "$w/tokenizer/tokenizer.json" "$corpus/heldout-sample.txt") || ids=""
if [ -n "$ids" ]; then
  for m in memra-tiny memra-tiny-draft; do
    python3 scripts/hf_reference.py "$w/$m" "$w/refs/parity/$m.safetensors" --ids "$ids" \
      --note "scripts/train/run.sh: $m, ids = the first 48 tokens of heldout-sample.txt" ||
      echo "run.sh: WARNING: hf_reference.py failed for $m"
  done
fi
if [ -f tests/fixtures/tokenizer-ref/corpus.json ]; then
  python3 scripts/hf_tokenize_reference.py tests/fixtures/tokenizer-ref/corpus.json "$w/refs/tokenizer-ref" \
    "memra-tiny=$w/tokenizer" || echo "run.sh: WARNING: hf_tokenize_reference.py failed"
fi

echo "== results"
python3 - "$w" "$OUT/results.json" <<'PY'
import hashlib, json, os, sys
w, out = sys.argv[1], sys.argv[2]
tj = os.path.join(w, "tokenizer", "tokenizer.json")
res = {"tokenizer": {"tokenizer_json_sha256": hashlib.sha256(open(tj, "rb").read()).hexdigest()}}
for m in ("memra-tiny", "memra-tiny-draft"):
    res[m] = json.load(open(os.path.join(w, m, "results.json")))
with open(out, "w", encoding="utf-8") as f:
    json.dump(res, f, indent=2, ensure_ascii=False)
    f.write("\n")
for m in ("memra-tiny", "memra-tiny-draft"):
    r = res[m]
    t = r["training"]
    print("%s: %d parameters, %d bytes of bf16 safetensors, %d steps (%.1f epochs) in %.0f s, best step %s" % (
        m, r["parameters"], r["bf16_bytes"], t["steps"], t["epochs"], t["seconds"], t["best_step"]))
    print("  held-out perplexity %.4f (%d tokens, %.4f bits/byte); heldout-sample %.4f (%d tokens); train prefix %.4f" % (
        r["heldout"]["perplexity"], r["heldout"]["tokens"], r["heldout"]["bits_per_byte"],
        r["heldout_sample"]["perplexity"], r["heldout_sample"]["tokens"], r["train_prefix"]["perplexity"]))
    if "agreement" in r:
        print("  greedy agreement with memra-tiny: %.4f over %d held-out positions" % (
            r["agreement"]["greedy_agreement"], r["agreement"]["heldout_positions"]))
    for s in r["samples"][:3]:
        print("  %r -> %r" % (s["prompt"], s["greedy_text"]))
PY

tar -czf "$OUT/memra-tiny-run.tar.gz" -C "$w" tokenizer memra-tiny memra-tiny-draft refs
ls -la "$OUT" "$w"/memra-tiny "$w"/memra-tiny-draft "$w"/refs/*
echo "run.sh: done in $(( $(date +%s) - t0 )) s"
