#!/usr/bin/env bash
# Session 4's checks on the GPU machine (calls on one warm machine reuse the
# models in /tmp/s4):
#   dgemm: the decode GEMM's kernel check with --perf at 1, 2 and 4 blocks
#          per SM (A/B against the mat-vec on the same jobs), test_cuda_engine
#          (batched == alone with it on), memra-bench bf16 with it on and off
#   suite: the GPU suite (tests/gpu/run.sh), the Q8_0 and Q4_K_M models made
#          meanwhile, then their memra-bench rows
#   bench: the bf16 rows of issue 6 (pp512, pp8192, tg at 0/8192/32768, b64)
#   serve: memra-serve (64 sessions: the decode GEMM) under memra-bench
#          --server at c=1 and 64
#   final: the kernel check (every op) and the GPU unit tests on the merged
#          tree while the bf16 and Q4_K_M models are made, then the rows of
#          issue 6 that session 4's work moved, in one call
# Carry .devcarry/final.tar.xz (stripped bin/ and the GPU unit tests),
# build/shared and build/tokref. Logs in $OUT/logs-<part>.tgz, the headline
# in $OUT/summary.txt.
set -u
part=${1:-dgemm}
RUN=/tmp/s4run w=/tmp/s4
. scripts/device/common.sh

if [ "$part" = dgemm ]; then
  make_bf16 &
  mk=$!
  for b in ${BPS_LIST:-2 1 4}; do
    MEMRA_CUDA_DGEMM_BPS=$b timeout 120 memra-parity --kernels --only dgemm --perf > $L/dgemm-bps$b.log 2>&1
    say "dgemm kernel check bps=$b rc=$? $(tail -1 $L/dgemm-bps$b.log)"
    grep -E "FAIL|us " $L/dgemm-bps$b.log | sed 's/  */ /g' | tee -a "$S"
  done
  stamp "test_cuda_engine"
  MEMRA_SHARED=$here/build/shared timeout 240 build/release/tests/test_cuda_engine > $L/engine.log 2>&1
  say "test_cuda_engine rc=$? $(tail -1 $L/engine.log)"
  grep -E "FAIL|fail" $L/engine.log | head -20 | tee -a "$S"
  wait $mk
  stamp "bf16 model made"
  bench bf16-c1 100 $w/bf16.gguf --backend cuda -p 0 -n 128 -d 0 -r 3
  bench bf16-batched 200 $w/bf16.gguf --backend cuda -p 512 -n 128 -b 1,8,64 -r 3
  MEMRA_CUDA_DGEMM=0 bench bf16-b64-nodgemm 150 $w/bf16.gguf --backend cuda -p 512 -n 128 -b 64 -r 2
  stamp "done dgemm"
fi

if [ "$part" = suite ]; then
  ( make_bf16 && quant Q4_K_M 10 && quant Q8_0 10 ) > $L/make.log 2>&1 &
  mk=$!
  OUT=$L/gpu timeout 330 bash tests/gpu/run.sh > $L/gpu-suite.log 2>&1
  say "gpu suite rc=$? $(tail -1 $L/gpu-suite.log)"
  grep -E "^FAIL" -A1 $L/gpu-suite.log | head -30 | tee -a "$S"
  wait $mk
  stamp "models made"
  for f in Q8_0 Q4_K_M; do
    bench $f 120 $w/$f.gguf --backend cuda -p 512 -n 128 -d 0 -r 3
  done
  stamp "done suite"
fi

if [ "$part" = bench ]; then
  make_bf16
  bench bf16 300 $w/bf16.gguf --backend cuda -p 512,8192 -n 128 -d 0,8192,32768 -b 64 -r 3
  stamp "done bench"
fi

if [ "$part" = final ]; then
  ( make_bf16 && quant Q4_K_M 12 ) > $L/make.log 2>&1 &
  mk=$!
  timeout 200 memra-parity --kernels > $L/kernels.log 2>&1
  say "kernel check rc=$? $(tail -1 $L/kernels.log)"
  grep -E "FAIL" $L/kernels.log | head -20 | tee -a "$S"
  for t in test_cuda_engine test_engine_sample test_cuda_device; do
    MEMRA_SHARED=$here/build/shared timeout 120 build/release/tests/$t > $L/$t.log 2>&1
    say "$t rc=$? $(grep -c '^PASS' $L/$t.log) passed $(grep -c '^FAIL' $L/$t.log) failed"
    grep -A2 "^FAIL" $L/$t.log | head -10 | tee -a "$S"
  done
  wait $mk
  stamp "models made"
  bench bf16-c1 150 $w/bf16.gguf --backend cuda -p 512,8192 -n 64 -d 0,32768 -r 2
  bench bf16-b64 120 $w/bf16.gguf --backend cuda -p 512 -n 64 -b 64 -r 2
  bench Q4_K_M 100 $w/Q4_K_M.gguf --backend cuda -p 512 -n 64 -d 0 -r 2
  stamp "done final"
fi

if [ "$part" = serve ]; then
  make_bf16
  stamp "bf16 ready"
  serve_bench 1
  stamp "done serve"
fi
