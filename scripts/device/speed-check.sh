#!/usr/bin/env bash
# The CUDA speed work on the GPU machine (docs/device-runs.md): the kernel
# check with --perf (mat-vec variants per format, GEMM), the CUDA engine
# test (graphs byte-identical to eager, chunked prefill), then memra-bench
# on a random Qwen3-8B shape in BF16, Q8_0 and Q4_K_M with the defaults and
# with one knob changed at a time (MEMRA_CUDA_*). Run from a folder holding
# bin/, tests/ (test_cuda_engine, requant_random), tests/fixtures/configs/
# and models/stories260K.gguf. Logs under $OUT (speed.tgz + summary.txt).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
L=$OUT/logs
here=$(pwd)
export PATH=$here/bin:$PATH MEMRA_SHARED=$here MEMRA_CACHE=/tmp/memra-cache
S=$OUT/summary.txt
say() { echo "$*" | tee -a "$S"; }
pack() { tar -C "$OUT" -czf "$OUT/speed.tgz" logs 2>/dev/null; }
trap pack EXIT
t0=$(date +%s)
stamp() { say "[$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm,clocks.mem,power.limit,temperature.gpu --format=csv > $L/gpu.txt 2>&1
cat $L/gpu.txt | tee -a "$S"
lt=$(ls /usr/local/cuda/lib64/libcublasLt.so.13 2>/dev/null || find / -name 'libcublasLt.so.13' -not -path '/proc/*' 2>/dev/null | head -1)
say "cublasLt: ${lt:-none}"; [ -n "$lt" ] && export MEMRA_CUBLASLT=$lt
which ncu nsys 2>&1 | head -2 > $L/tools.txt

stamp "kernel check"
timeout 200 memra-parity --kernels --perf > $L/kernels.log 2>&1; say "kernels rc=$? $(tail -1 $L/kernels.log)"
grep -E "FAIL|gemm|mv_rows .*4096|matmul .*4096x4096" $L/kernels.log | head -60 >> "$S"

stamp "engine test"
MEMRA_TEST_VERBOSE=1 timeout 150 tests/test_cuda_engine > $L/engine.log 2>&1; say "engine rc=$?"
grep -E "PASS|FAIL|#|diff" $L/engine.log | head -30 >> "$S"
pack

w=/tmp/q8; mkdir -p $w
stamp "convert bf16"
timeout 120 memra-convert --random tests/fixtures/configs/Qwen3-8B.json --seed 1 $w/bf16.gguf > $L/convert.log 2>&1; say "convert rc=$?"
( timeout 200 tests/requant_random $w/bf16.gguf $w/q8_0.gguf q8_0 && timeout 200 tests/requant_random $w/bf16.gguf $w/q4km.gguf q4_k_m ) > $L/requant.log 2>&1 &
rq=$!
B="timeout 120 memra-bench"
bench() { # label model args...; env given by the caller
  local label=$1 model=$2; shift 2
  $B $model --backend cuda -r 3 "$@" > $L/bench-$label.log 2>&1
  say "== $label (rc $?)"; grep -E "^\| (pp|tg)" $L/bench-$label.log | tee -a "$S" > /dev/null
  grep -iE "error|fail" $L/bench-$label.log | head -3 >> "$S"
}
stamp "bf16 benches"
bench bf16 $w/bf16.gguf -p 512 -n 128 -d 0,4096
MEMRA_CUDA_GRAPHS=0 bench bf16-nographs $w/bf16.gguf -p 0 -n 128 -d 0
MEMRA_CUDA_FUSE=0 bench bf16-nofuse $w/bf16.gguf -p 0 -n 128 -d 0
for r in 1 2 4; do MEMRA_CUDA_MV_ROWS=$r bench bf16-rows$r $w/bf16.gguf -p 0 -n 128 -d 0; done
MEMRA_CUDA_GEMM=0 bench bf16-nogemm $w/bf16.gguf -p 512 -n 0
bench bf16-chunk64 $w/bf16.gguf -p 512 -n 0 --n-batch 64
bench bf16-pp2048 $w/bf16.gguf -p 2048 -n 0
pack
wait $rq; say "requant rc=$? $(ls -la $w | tr '\n' ' ')"
stamp "quant benches"
bench q8_0 $w/q8_0.gguf -p 512 -n 128 -d 0,4096
for r in 1 4; do MEMRA_CUDA_MV_ROWS=$r bench q8_0-rows$r $w/q8_0.gguf -p 0 -n 128 -d 0; done
bench q4km $w/q4km.gguf -p 512 -n 128 -d 0,4096
for r in 1 4; do MEMRA_CUDA_MV_ROWS=$r bench q4km-rows$r $w/q4km.gguf -p 0 -n 128 -d 0; done
pack
stamp "gen cpu vs cuda"
timeout 60 memra-gen $w/bf16.gguf --backend cuda --prompt-ids 100,101,102,103,104,105,106,107 -n 8 --temp 0 --json > $L/gen-cuda.log 2>&1
timeout 90 memra-gen $w/bf16.gguf --backend cpu -t 16 --prompt-ids 100,101,102,103,104,105,106,107 -n 8 --temp 0 --json > $L/gen-cpu.log 2>&1
say "gen cuda: $(grep -o '"tokens":[^]]*]' $L/gen-cuda.log)"
say "gen cpu:  $(grep -o '"tokens":[^]]*]' $L/gen-cpu.log)"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu --format=csv >> $L/gpu.txt 2>&1
stamp "done"
