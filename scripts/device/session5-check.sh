#!/usr/bin/env bash
# Session 5's checks on the GPU machine (calls on one warm machine reuse the
# models in /tmp/s5):
#   profile: each kernel's time in one repetition of pp512, tg at depth 512
#            (bf16 and Q4_K_M, one-sequence engines) and b64 (bf16), by ncu
#            over memra-bench --profile-range (clocks not locked), then the
#            same rows' wall times without the profiler
#   pdl:     programmatic dependent launch on and off (MEMRA_CUDA_PDL): the
#            kernel check of the ops it touches, test_cuda_engine, then
#            decode rows of bf16 and Q4_K_M and b64 with it on and off
#   prefill: the kernel check (all ops), test_cuda_engine and
#            test_engine_sample, pp512 / tg rows of bf16 and Q4_K_M, and an
#            ncu profile of one bf16 pp512
#   final:   the kernel check (all ops; the weight decode's two instances
#            with --perf), the GPU unit tests, then issue 6's rows on the
#            merged tree: bf16 pp512 / tg d0 / d32768 / b64, Q4_K_M and Q8_0
#            pp512 / tg d0 (Q4_K_M's pp512 under MEMRA_CUDA_DEQUANT_BPS=1 and 3),
#            (no server run: the budget)
#   serve:   tests/gpu/run.sh --skip-kernels (HF parity fixtures on CUDA,
#            --backends cpu,cuda), then memra-serve (64 sessions) under
#            memra-bench --server at c=1 and 64
# Carry .devcarry/final.tar.xz (stripped bin/ and the GPU unit tests),
# build/shared and build/tokref. Logs in $OUT/logs-<part>.tgz, the headline
# in $OUT/summary.txt, ncu's per-kernel summaries in $OUT/prof-*.txt (their CSVs in the logs).
set -u
part=${1:-profile}
RUN=/tmp/s5run w=/tmp/s5
. scripts/device/common.sh

if [ "$part" = profile ]; then
  make_bf16
  stamp "bf16 made"
  quant Q4_K_M 16 &
  qk=$!
  prof bf16-c1 $w/bf16.gguf --backend cuda -p 512 -n 2 -d 512 -r 1
  prof bf16-b64 $w/bf16.gguf --backend cuda -p 512 -n 2 -d 0 -b 64 -r 1
  wait $qk
  stamp "Q4_K_M made"
  prof q4km-c1 $w/Q4_K_M.gguf --backend cuda -p 512 -n 2 -d 512 -r 1
  bench bf16-wall 120 $w/bf16.gguf --backend cuda -p 512 -n 32 -d 512 -r 3
  bench bf16-b64-wall 120 $w/bf16.gguf --backend cuda -p 512 -n 32 -d 0 -b 64 -r 2
  bench q4km-wall 120 $w/Q4_K_M.gguf --backend cuda -p 512 -n 32 -d 512 -r 3
  stamp "done profile"
fi

if [ "$part" = pdl ]; then
  make_bf16
  stamp "bf16 made"
  quant Q4_K_M 16 &
  qk=$!
  checks test_cuda_engine
  for p in 1 0; do
    MEMRA_CUDA_PDL=$p bench bf16-pdl$p 100 $w/bf16.gguf --backend cuda -p 0 -n 64 -d 512 -r 3
  done
  for p in 1 0; do
    MEMRA_CUDA_PDL=$p bench bf16-b64-pdl$p 150 $w/bf16.gguf --backend cuda -p 512 -n 32 -d 0 -b 64 -r 2
  done
  wait $qk
  stamp "Q4_K_M made"
  for p in 1 0; do
    MEMRA_CUDA_PDL=$p bench q4km-pdl$p 100 $w/Q4_K_M.gguf --backend cuda -p 0 -n 64 -d 512 -r 3
  done
  stamp "done pdl"
fi

if [ "$part" = prefill ]; then
  make_bf16
  stamp "bf16 made"
  quant Q4_K_M 16 &
  qk=$!
  checks test_cuda_engine test_engine_sample
  grep -E "glu .* to bf16|qk_norm_rope" $L/kernels.log | head -8 | tee -a "$S"
  bench bf16 150 $w/bf16.gguf --backend cuda -p 512 -n 64 -d 512 -r 3
  prof bf16-pp512 $w/bf16.gguf --backend cuda -p 512 -n 0 -r 1
  wait $qk
  stamp "Q4_K_M made"
  bench q4km 150 $w/Q4_K_M.gguf --backend cuda -p 512 -n 64 -d 512 -r 3
  stamp "done prefill"
fi

if [ "$part" = final ]; then
  make_bf16
  stamp "bf16 made"
  { quant Q4_K_M 12; quant Q8_0 4; } &
  qk=$!
  checks test_cuda_engine test_engine_sample
  timeout 60 memra-parity --kernels --only dequant --perf > $L/dequant-perf.log 2>&1
  grep -E "12288x4096|4096x12288" $L/dequant-perf.log | sed 's/  */ /g' | tee -a "$S"
  bench bf16 200 $w/bf16.gguf --backend cuda -p 512 -n 64 -d 0,32768 -r 2
  bench bf16-b64 150 $w/bf16.gguf --backend cuda -p 512 -n 32 -b 64 -d 0 -r 2
  wait $qk
  stamp "Q4_K_M and Q8_0 made"
  bench q4km 150 $w/Q4_K_M.gguf --backend cuda -p 512 -n 64 -d 0 -r 3
  MEMRA_CUDA_DEQUANT_BPS=3 bench q4km-bps3 100 $w/Q4_K_M.gguf --backend cuda -p 512 -n 0 -r 3
  bench q8 150 $w/Q8_0.gguf --backend cuda -p 512 -n 64 -d 0 -r 3
  # (the server bench: not run in session 5, the device budget went to the rows above)
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
