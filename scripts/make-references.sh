#!/usr/bin/env bash
# Makes the committed reference fixtures, on a machine with torch,
# transformers and tokenizers (a CPU is enough):
#   - HF logits dumps for a random tiny checkpoint of each parity config and
#     for stories260K (converted to an HF dir)  -> DIR/parity/
#     (a checkpoint with an MTP block, the *-mtp configs, adds mtp_logits/mtp_hidden)
#   - HF tokenizers ids for the adversarial corpus -> DIR/tokenizer-ref/
# Copy them into tests/fixtures/parity/ and tests/fixtures/tokenizer-ref/.
#
#   scripts/make-references.sh [--out DIR] [--tokenizers DIR]
#
# --out: where they go (default: a new temp dir, printed); --tokenizers: the real
# tokenizer.json files as scripts/fetch-tokenizers.sh caches them, one dir
# per name: qwen3, llama3, gemma3 (default $MEMRA_CACHE/tokenizers). Needs
# bin/memra-convert (make).
set -euo pipefail
cd "$(dirname "$0")/.."
out="" toks=${MEMRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memra}/tokenizers
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=$2; shift ;;
    --tokenizers) toks=$2; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "make-references: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
[ -n "$out" ] || out=$(mktemp -d /tmp/memra-refs.XXXXXX)
[ -x bin/memra-convert ] || { echo "make-references: no bin/memra-convert (run make)" >&2; exit 2; }
for n in qwen3 llama3 gemma3; do
  [ -f "$toks/$n/tokenizer.json" ] ||
    { echo "make-references: no $toks/$n/tokenizer.json (scripts/fetch-tokenizers.sh)" >&2; exit 2; }
done
export PATH=$PWD/bin:$PATH
w=$(mktemp -d /tmp/memra-refs-work.XXXXXX)
trap 'rm -rf "$w"' EXIT
mkdir -p "$out/parity" "$out/tokenizer-ref" "$w/ckpt"
python3 -c "import transformers, tokenizers, torch; print('transformers', transformers.__version__, 'tokenizers', tokenizers.__version__, 'torch', torch.__version__)"
for cfg in tests/fixtures/parity/configs/*.json; do
  name=$(basename "$cfg" .json)
  memra-convert --random "$cfg" --seed 1 --outtype f32 "$w/ckpt/$name"
  python3 scripts/hf_reference.py "$w/ckpt/$name" "$out/parity/$name.safetensors" --n 24 \
    --note "memra-convert --random tests/fixtures/parity/configs/$name.json --seed 1 --outtype f32"
done
# The real model: BOS followed by its 40 reference greedy ids.
memra-convert models/stories260K.gguf "$w/ckpt/stories260K"
ids="1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426,338,401,396,267,337,410,408,419,292,411,322,265,282,295,433,426,385,328,432,358,394,261,370,432,352"
python3 scripts/hf_reference.py "$w/ckpt/stories260K" "$out/parity/stories260K.safetensors" --ids "$ids" \
  --note "memra-convert models/stories260K.gguf DIR; ids: BOS + the 40 reference greedy ids"
python3 scripts/hf_tokenize_reference.py tests/fixtures/tokenizer-ref/corpus.json "$out/tokenizer-ref" \
  qwen3="$toks/qwen3" llama3="$toks/llama3" gemma3="$toks/gemma3"
ls -la "$out/parity" "$out/tokenizer-ref"
echo "make-references: written to $out"
