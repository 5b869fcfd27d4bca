#!/usr/bin/env bash
# One device call for the CUDA backend: the GPU test suite, then a
# Qwen3-8B-shaped random model on the CPU and on CUDA, and the tokenizer
# benchmark on this machine's CPU. Carry bin, build/release/tests,
# build/shared (stories260K) and build/tokref (gzipped tokenizer.json).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/cuda-check.log") 2>&1
export PATH=$PWD/bin:$PATH MEMRA_SHARED=$PWD/build/shared
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
lscpu | grep -E "Model name|^CPU\(s\)"
echo "== tests/gpu/run.sh"
OUT=$OUT/gpu timeout 300 bash tests/gpu/run.sh 2>&1 | tail -60
w=/tmp/q8; mkdir -p $w
echo "== Qwen3-8B shape, bf16, random"
memra-convert --random tests/fixtures/configs/Qwen3-8B.json --seed 1 $w/q8b.gguf
ids=$(seq -s, 100 1 163)
echo "-- CPU, 16 threads"
timeout 120 memra-gen $w/q8b.gguf --backend cpu -t 16 --prompt-ids "$ids" -n 8 --temp 0 --json | jq -c '{tokens, timings}'
echo "-- CUDA"
timeout 120 memra-gen $w/q8b.gguf --backend cuda --prompt-ids "$ids" -n 64 --temp 0 --json | jq -c '{tokens: .tokens[:8], timings}'
echo "== tokenizer benchmark (one core of this machine)"
mkdir -p $w/qwen3 && gunzip -c build/tokref/qwen3/tokenizer.json.gz > $w/qwen3/tokenizer.json
memra-bench $w/qwen3 --tokenizer -r 5 2>&1 | tail -6
