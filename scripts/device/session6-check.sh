#!/usr/bin/env bash
# Session 6's checks on the GPU machine (calls on one warm machine reuse the
# models in /tmp/s6):
#   profile: each kernel's time in one decode step by ncu over memra-bench
#            --profile-range (clocks not locked): bf16, Q8_0 and Q4_K_M at
#            depth 512 (one-sequence engines), bf16 at depth 32768 and at
#            64 sequences; summaries by scripts/device/ncu-steps.py in
#            $OUT/prof-*.txt; then the rows session 5 did not measure:
#            pp8192 and tg at depth 8192 (bf16, Q4_K_M) and Q4_K_M at 32768
#   lead:    the flash kernel's perf cases before (memra-parity-old, carried)
#            and after, the sampler's, bf16 pp512 / pp8192 / tg, and a
#            Q4_K_M pp512 chunk per kernel
#   final:   the kernel check (all ops), the GPU unit tests, then issue 6's
#            rows on the merged tree
#   serve:   tests/gpu/run.sh --skip-kernels, then memra-serve under
#            memra-bench --server at c=1 and 64
# Carry .devcarry/final.tar.xz (stripped bin/ and the GPU unit tests),
# build/shared and build/tokref. Logs in $OUT/logs-<part>.tgz, the headline
# in $OUT/summary.txt.
set -u
part=${1:-profile}
RUN=/tmp/s6run w=/tmp/s6
. scripts/device/common.sh

if [ "$part" = profile ]; then
  make_bf16
  stamp "bf16 made"
  { quant Q4_K_M 10; quant Q8_0 6; } &
  qk=$!
  prof bf16-c1 $w/bf16.gguf --backend cuda -p 0 -n 2 -d 512 -r 1
  prof bf16-d32k $w/bf16.gguf --backend cuda -p 0 -n 2 -d 32768 -r 1
  prof bf16-b64 $w/bf16.gguf --backend cuda -p 512 -n 2 -d 0 -b 64 -r 1
  wait $qk
  stamp "Q4_K_M and Q8_0 made"
  prof q4km-c1 $w/Q4_K_M.gguf --backend cuda -p 0 -n 2 -d 512 -r 1
  prof q8-c1 $w/Q8_0.gguf --backend cuda -p 0 -n 2 -d 512 -r 1
  bench bf16-deep 200 $w/bf16.gguf --backend cuda -p 8192 -n 64 -d 8192 -r 2
  bench q4km-deep 200 $w/Q4_K_M.gguf --backend cuda -p 8192 -n 64 -d 8192,32768 -r 2
  stamp "done profile"
fi

if [ "$part" = lead ]; then
  make_bf16 &
  mk=$!
  for b in memra-parity-old memra-parity; do
    timeout 150 $b --kernels --only flash_prefill --perf > $L/flash-$b.log 2>&1
    say "$b flash_prefill rc=$? $(tail -1 $L/flash-$b.log)"
    grep -i "perf" $L/flash-$b.log | sed 's/  */ /g' | tee -a "$S"
  done
  timeout 60 memra-parity --kernels --only sample --perf > $L/sample.log 2>&1
  say "sample rc=$? $(tail -1 $L/sample.log)"
  grep "perf" $L/sample.log | sed 's/  */ /g' | tee -a "$S"
  wait $mk
  stamp "bf16 made"
  quant Q4_K_M 16 &
  qk=$!
  bench bf16-pp 200 $w/bf16.gguf --backend cuda -p 512,8192 -n 64 -d 0 -r 2
  wait $qk
  stamp "Q4_K_M made"
  prof q4km-pp512 $w/Q4_K_M.gguf --backend cuda -p 512 -n 0 -r 1
  bench q4km-pp 150 $w/Q4_K_M.gguf --backend cuda -p 512 -n 64 -d 0 -r 3
  stamp "done lead"
fi

if [ "$part" = final ]; then
  { make_bf16; quant Q4_K_M 12; quant Q8_0 12; } &
  qk=$!
  checks test_cuda_engine test_engine_sample test_cuda_device
  stamp "checks done"
  for b in memra-parity-old memra-parity; do
    [ -x "$(command -v $b)" ] || continue
    timeout 60 $b --kernels --only dequant --perf > $L/dequant-$b.log 2>&1
    say "$b dequant rc=$?"
    grep -E "(Q4_K|Q6_K|Q8_0) +(12288x4096|4096x12288)" $L/dequant-$b.log | sed 's/  */ /g' | tee -a "$S"
  done
  wait $qk
  stamp "models made"
  bench bf16 200 $w/bf16.gguf --backend cuda -p 512 -n 64 -d 0,32768 -r 2
  bench bf16-b64 150 $w/bf16.gguf --backend cuda -p 512 -n 32 -b 64 -d 0 -r 2
  bench q4km 200 $w/Q4_K_M.gguf --backend cuda -p 512 -n 64 -d 0,32768 -r 2
  bench q8 150 $w/Q8_0.gguf --backend cuda -p 512 -n 64 -d 0 -r 3
  stamp "done final"
fi

if [ "$part" = serve ]; then
  make_bf16 &
  mk=$!
  timeout 150 tests/gpu/run.sh --skip-kernels > $L/gpu-run.log 2>&1
  say "tests/gpu/run.sh --skip-kernels rc=$? $(tail -1 $L/gpu-run.log)"
  grep FAIL $L/gpu-run.log | head -10 | tee -a "$S"
  wait $mk
  stamp "bf16 made"
  serve_bench 1
  stamp "done serve"
fi
