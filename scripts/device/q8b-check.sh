#!/usr/bin/env bash
# A Qwen3-8B-shaped random model (bf16) on the CPU and on CUDA: memra-gen on
# both, memra-bench on CUDA. Carry bin. Log in $OUT/q8b.log.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/q8b.log") 2>&1
export PATH=$PWD/bin:$PATH
w=/tmp/q8; mkdir -p $w
/usr/bin/time -f "convert --random: %e s" memra-convert --random tests/fixtures/configs/Qwen3-8B.json --seed 1 $w/q8b.gguf
echo "-- memra-gen, CPU backend, 16 threads, 8-token prompt, 8 tokens"
timeout 180 memra-gen $w/q8b.gguf --backend cpu -t 16 --prompt-ids 100,101,102,103,104,105,106,107 -n 8 --temp 0 --json | jq -c '{tokens, timings}'
echo "-- memra-gen, CUDA backend, same prompt, 8 tokens (must equal the CPU tokens) then 128"
timeout 120 memra-gen $w/q8b.gguf --backend cuda --prompt-ids 100,101,102,103,104,105,106,107 -n 8 --temp 0 --json | jq -c '{tokens, timings}'
timeout 120 memra-gen $w/q8b.gguf --backend cuda --prompt-ids 100,101,102,103,104,105,106,107 -n 128 --temp 0 --json | jq -c '{timings}'
echo "-- memra-bench, CUDA"
timeout 240 memra-bench $w/q8b.gguf --backend cuda -p 512 -n 128 -d 0,4096 -r 3
