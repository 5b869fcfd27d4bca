#!/usr/bin/env bash
# Makes the committed reference fixtures on the GPU machine (which has
# torch, transformers and tokenizers):
#   - HF logits dumps for a random tiny checkpoint of each parity config and
#     for stories260K (converted to an HF dir), -> tests/fixtures/parity/
#   - HF tokenizers ids for the adversarial corpus, -> tests/fixtures/tokenizer-ref/
# Carry bin/, build/shared (stories260K) and build/tokref (gzipped
# tokenizer.json files from scripts/fetch-tokenizers.sh). Everything comes
# back in $OUT/refs.tar (device runs return at most 8 files).
set -euo pipefail
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PATH=$PWD/bin:$PATH
w=/tmp/refs; rm -rf $w; mkdir -p $w/parity $w/tokenizer-ref $w/ckpt
python3 -c "import transformers, tokenizers, torch; print('transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'torch', torch.__version__)"
for cfg in tests/fixtures/parity/configs/*.json; do
  name=$(basename "$cfg" .json)
  memra-convert --random "$cfg" --seed 1 --outtype f32 $w/ckpt/$name
  python3 scripts/hf_reference.py $w/ckpt/$name $w/parity/$name.safetensors --n 24 \
    --note "memra-convert --random tests/fixtures/parity/configs/$name.json --seed 1 --outtype f32"
done
# The real model: BOS followed by its 40 reference greedy ids.
memra-convert build/shared/models/stories260K.gguf $w/ckpt/stories260K
ids="1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426,338,401,396,267,337,410,408,419,292,411,322,265,282,295,433,426,385,328,432,358,394,261,370,432,352"
python3 scripts/hf_reference.py $w/ckpt/stories260K $w/parity/stories260K.safetensors --ids "$ids" \
  --note "memra-convert ../shared/models/stories260K.gguf DIR; ids: BOS + the 40 reference greedy ids"
for n in qwen3 llama3 gemma3; do
  mkdir -p $w/tok/$n && gunzip -c build/tokref/$n/tokenizer.json.gz > $w/tok/$n/tokenizer.json
done
python3 scripts/hf_tokenize_reference.py tests/fixtures/tokenizer-ref/corpus.json $w/tokenizer-ref \
  qwen3=$w/tok/qwen3 llama3=$w/tok/llama3 gemma3=$w/tok/gemma3
tar -C $w -cf "$OUT/refs.tar" parity tokenizer-ref
ls -la $w/parity $w/tokenizer-ref
