#!/usr/bin/env bash
# Second speed run (docs/device-runs.md): kernel check with --perf, the
# CUDA engine test, memra-bench BF16 / Q8_0 / Q4_K_M with the measured
# defaults, and an ncu per-kernel time summary of one eager BF16 decode
# step and of one 512-row prefill chunk. Same layout as speed-check.sh.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
L=$OUT/logs
here=$(pwd)
export PATH=$here/bin:$PATH MEMRA_SHARED=$here MEMRA_CACHE=/tmp/memra-cache
export MEMRA_CUBLASLT=/usr/local/cuda/lib64/libcublasLt.so.13
S=$OUT/summary.txt
say() { echo "$*" | tee -a "$S"; }
pack() { tar -C "$OUT" -czf "$OUT/speed2.tgz" logs 2>/dev/null; }
trap pack EXIT
t0=$(date +%s)
stamp() { say "[$(( $(date +%s) - t0 ))s] $*"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader | tee -a "$S"
w=/tmp/q8; mkdir -p $w
( timeout 120 memra-convert --random tests/fixtures/configs/Qwen3-8B.json --seed 1 $w/bf16.gguf > $L/convert.log 2>&1 &&
  timeout 120 tests/requant_random $w/bf16.gguf $w/q8_0.gguf q8_0 > $L/requant.log 2>&1 &&
  timeout 120 tests/requant_random $w/bf16.gguf $w/q4km.gguf q4_k_m >> $L/requant.log 2>&1 ) &
mk=$!
stamp "kernel check"
timeout 120 memra-parity --kernels --perf > $L/kernels.log 2>&1; say "kernels rc=$? $(tail -1 $L/kernels.log)"
grep -E "FAIL|gemm .*(n=512|Q4_K)|mv_rows .*(4096x4096|12288x4096)|attention" $L/kernels.log | head -40 >> "$S"
stamp "engine test"
MEMRA_TEST_VERBOSE=1 timeout 120 tests/test_cuda_engine > $L/engine.log 2>&1; say "engine rc=$? $(grep -cE '^PASS' $L/engine.log) pass, $(grep -cE '^FAIL' $L/engine.log) fail"
grep -E "FAIL|41-row" $L/engine.log | head >> "$S"
wait $mk; say "models rc=$?"
B="timeout 100 memra-bench"
bench() {
  local label=$1 model=$2; shift 2
  $B $model --backend cuda -r 3 "$@" > $L/bench-$label.log 2>&1
  say "== $label (rc $?)"; grep -E "^\| (pp|tg)" $L/bench-$label.log | tee -a "$S" > /dev/null
  grep -iE "error|fail" $L/bench-$label.log | head -3 >> "$S"
}
stamp "benches"
bench bf16 $w/bf16.gguf -p 512 -n 128 -d 0,4096
bench q8_0 $w/q8_0.gguf -p 512 -n 128 -d 0,4096
bench q4km $w/q4km.gguf -p 512 -n 128 -d 0,4096
MEMRA_CUDA_GRAPHS=0 bench bf16-nographs $w/bf16.gguf -p 0 -n 128 -d 0
pack
stamp "ncu decode"
NCU="timeout 100 ncu --clock-control none --metrics gpu__time_duration.sum --print-summary per-kernel"
MEMRA_CUDA_GRAPHS=0 $NCU --launch-skip 400 --launch-count 400 memra-bench $w/q4km.gguf --backend cuda -p 0 -n 4 -d 0 -r 1 --warmup 0 > $L/ncu-decode.log 2>&1
say "ncu decode rc=$?"
pack
stamp "ncu prefill"
$NCU --launch-count 500 memra-bench $w/bf16.gguf --backend cuda -p 512 -n 0 -r 1 --warmup 0 > $L/ncu-prefill.log 2>&1
say "ncu prefill rc=$?"
stamp "done"
