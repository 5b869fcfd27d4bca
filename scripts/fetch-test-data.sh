#!/usr/bin/env bash
# Assembles the test data the repository does not carry itself, into
# build/test-data (or DIR):
#
#   vocab/      llama.cpp's vocab-only GGUFs with their tokenizer test
#               vectors (.inp strings, .out expected ids), MIT
#   templates/  the official chat templates llama.cpp collects (each under
#               its model's licence; tests/fixtures/README.md lists them)
#   models/     a link to the repo's models/ (stories260K.gguf, memra-tiny)
#
# Both come from llama.cpp's own tree as node-llama-cpp ships it: the npm
# package (pinned with its integrity hash in tests/interop/package-lock.json,
# installed by scripts/deps.sh) carries llama.cpp as a git bundle, whose
# sha256 is checked here before anything is read from it. Safe to run again:
# a complete, verified copy is kept.
#
#   scripts/fetch-test-data.sh [DIR]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-$root/build/test-data}

bundle=$root/tests/interop/node_modules/node-llama-cpp/llama/gitRelease.bundle
bundle_sha256=5f5d1105d5df040738d87b8290e5d17e7362131cdcfdb0831618e0ea528b4a51

vocabs="gpt-2 llama-bpe llama-spm qwen2 falcon deepseek-llm deepseek-coder starcoder refact mpt
  qwen35 phi-3 bert-bge gemma-4"
templates="GLM-4.6 HuggingFaceTB-SmolLM3-3B Mistral-Small-3.2-24B-Instruct-2506
  NousResearch-Hermes-3-Llama-3.1-8B-tool_use Qwen-QwQ-32B Qwen-Qwen2.5-7B-Instruct
  Qwen-Qwen3-0.6B Qwen3-Coder Qwen3.5-4B deepseek-ai-DeepSeek-R1-Distill-Qwen-32B
  deepseek-ai-DeepSeek-V3.1 google-gemma-2-2b-it google-gemma-4-31B-it ibm-granite-granite-4.0
  meta-llama-Llama-3.1-8B-Instruct meta-llama-Llama-3.2-3B-Instruct
  microsoft-Phi-3.5-mini-instruct mistralai-Mistral-Nemo-Instruct-2407 moonshotai-Kimi-K2
  openai-gpt-oss-120b"
# What a complete copy holds; a change of this list makes a new copy.
want="$bundle_sha256 $vocabs $(echo $templates)"

if [ -f "$out/.complete" ] && [ "$(cat "$out/.complete")" = "$want" ]; then
  echo "$out"
  exit 0
fi
[ -f "$bundle" ] || bash "$root/scripts/deps.sh"
[ -f "$bundle" ] || { echo "fetch-test-data: no $bundle (npm install in tests/interop failed?)" >&2; exit 1; }
got=$(sha256sum "$bundle" | cut -d' ' -f1)
if [ "$got" != "$bundle_sha256" ]; then
  echo "fetch-test-data: $bundle: sha256 $got, expected $bundle_sha256" >&2
  exit 1
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git clone -q --bare "$bundle" "$tmp/llama.cpp.git"
g() { git --git-dir="$tmp/llama.cpp.git" show "HEAD:$1"; }

rm -rf "$out.part" && mkdir -p "$out.part/vocab" "$out.part/templates"
for v in $vocabs; do
  for ext in "" .inp .out; do
    g "models/ggml-vocab-$v.gguf$ext" > "$out.part/vocab/ggml-vocab-$v.gguf$ext"
  done
done
for t in $templates; do
  g "models/templates/$t.jinja" > "$out.part/templates/$t.jinja"
done
ln -s "$root/models" "$out.part/models"
echo "$want" > "$out.part/.complete"
rm -rf "$out" && mv "$out.part" "$out"
echo "$out"
