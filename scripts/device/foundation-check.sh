#!/usr/bin/env bash
# One device call for the foundation: do binaries built on the development
# machine run on the GPU machine unchanged, what is the card, and do
# Hugging Face's own loaders read what memra-convert writes? Also times a
# Qwen3-8B-shaped random checkpoint. Results go to $OUT/foundation.log.
# Run from the repo root with bin/ and build/release/tests carried.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
log=$OUT/foundation.log
exec > >(tee "$log") 2>&1
# The shared files travel in the ignored build/shared (copied there for the trip only).
export PATH=$PWD/bin:$PATH MEMRA_SHARED=${MEMRA_SHARED:-$PWD/build/shared}
S=$MEMRA_SHARED
nvidia-smi --query-gpu=name,memory.total,clocks.max.memory --format=csv
echo "== unit tests built on the dev machine"
for t in build/release/tests/test_*; do
  case $t in *test_hub) continue;; esac # needs node, absent there
  r=$($t 2>&1); echo "$(basename $t): $(grep -c '^PASS' <<<"$r") passed, $(grep -c '^FAIL' <<<"$r") failed"
  grep -E '^FAIL|^#' <<<"$r"
done
echo "== census of the real model"
memra-census $S/models/stories260K.gguf --no-tensors | tail -4
echo "== transformers loads what memra-convert writes"
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)"
python3 -c "import gguf; print('gguf', gguf.__version__ if hasattr(gguf,'__version__') else 'present')" 2>&1 | tail -1
w=/tmp/memra-check; rm -rf $w; mkdir -p $w
for f in llama llama3 qwen2 qwen3 qwen3-moe gemma3; do
  memra-convert --random tests/fixtures/configs/tiny-$f.json --seed 5 $w/$f-hf || continue
  mkdir -p $w/$f && memra-convert $w/$f-hf $w/$f/$f.gguf
  python3 scripts/hf_load_check.py $w/$f-hf $w/$f/$f.gguf 2>&1 | grep -E "PASS|FAIL|Error" | tail -3
done
memra-convert $S/models/stories260K.gguf $w/stories-hf && python3 scripts/hf_load_check.py $w/stories-hf $S/models/stories260K.gguf 2>&1 | grep -E "PASS|FAIL|Error" | tail -3
echo "== Qwen3-8B-shaped random checkpoint (bf16), $(nproc) threads"
/usr/bin/time -f "convert --random: %e s, max RSS %M kB" memra-convert --random tests/fixtures/configs/Qwen3-8B.json --seed 1 $w/q8b.gguf
ls -la $w/q8b.gguf
/usr/bin/time -f "census: %e s" memra-census $w/q8b.gguf --no-tensors | tail -12
/usr/bin/time -f "convert GGUF -> HF dir: %e s" memra-convert $w/q8b.gguf $w/q8b-hf
memra-census $w/q8b-hf --json --no-tensors | python3 -c "import json,sys; j=json.load(sys.stdin); print('HF dir: bound', j['n_bound'], 'of', j['n_tensors'], 'per-token bytes', j['decode']['bytes_per_token'])"
rm -rf $w/q8b-hf $w/q8b.gguf
