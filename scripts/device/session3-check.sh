#!/usr/bin/env bash
# Session 3's checks on the GPU machine, in calls on one warm machine (the
# models made in /tmp/s3 by one call are reused by the next while it stays
# warm; a fresh machine makes them again):
#   suite:   the GPU suite (tests/gpu/run.sh) while the Qwen3-8B shape is made
#            in bf16 (with the Qwen3 tokenizer) and quantized to Q8_0 and
#            Q4_K_M; then memra-bench rows of both
#   bench:   memra-bench bf16 rows (pp512, pp8192, tg at depths 0/8192/32768,
#            batched 64), the A/B of the new kernels against the old ones,
#            the server benchmark (c=1 and 64)
#   formats: Q4_0, NVFP4, MXFP8, Q6_K, Q5_K: quantize and generate on CUDA
#            with a 40-token prompt (the prefill GEMM path) and 32 tokens
# Carry .devcarry/final.tar.xz (stripped bin/ and the GPU unit tests, xz with a
# large dictionary: the binaries share their kernels), build/shared and
# build/tokref. Logs in $OUT/logs-<part>.tgz, the headline in $OUT/summary.txt.
set -u
part=${1:-suite}
RUN=/tmp/s3run w=/tmp/s3
. scripts/device/common.sh
IDS40=$(seq -s, 1000 1039)
gen() { # TYPE
  timeout 90 memra-gen $w/$1.gguf --backend cuda --prompt-ids $IDS40 -n 32 --temp 0 --json \
      > $L/gen-$1.json 2> $L/gen-$1.err
  local rc=$?
  say "gen $1 rc=$rc $(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["tokens"][:8], j["timings"])' $L/gen-$1.json 2>&1 | tail -1)"
  grep -m2 -i "error\|memra-gen:" $L/gen-$1.err | tee -a "$S"
}

if [ "$part" = suite ]; then
  ( make_bf16 && quant Q4_K_M 10 && quant Q8_0 10 ) > $L/make.log 2>&1 &
  mk=$!
  if [ ! -s $L/gpu-suite.log ]; then
    stamp "GPU suite"
    OUT=$L/gpu timeout 330 bash tests/gpu/run.sh > $L/gpu-suite.log 2>&1
    say "gpu suite rc=$? $(tail -1 $L/gpu-suite.log)"
    grep -E "^FAIL" -A1 $L/gpu-suite.log | head -30 | tee -a "$S"
  fi
  wait $mk
  stamp "models made"; ls -l $w/*.gguf | tee -a "$S"
  for f in Q8_0 Q4_K_M; do
    bench $f 100 $w/$f.gguf --backend cuda -p 512 -n 128 -d 0 -r 3
    gen $f
  done
  stamp "done suite"
fi

if [ "$part" = bench ]; then
  make_bf16
  bench bf16 300 $w/bf16.gguf --backend cuda -p 512,8192 -n 128 -d 0,8192,32768 -b 64 -r 3
  stamp "A/B"
  MEMRA_CUDA_FLASH=0 bench bf16-noflash 60 $w/bf16.gguf --backend cuda -p 512 -n 0 -r 3
  MEMRA_CUDA_ATTN=0 bench bf16-oldattn 90 $w/bf16.gguf --backend cuda -p 0 -n 128 -d 32768 -r 3
  stamp "server bench"
  serve_bench 2
  stamp "done bench"
fi

if [ "$part" = formats ]; then
  make_bf16
  stamp "bf16 ready"
  # quantize the next format while the previous one generates
  prev=
  for t in Q4_0 NVFP4 MXFP8 Q6_K Q5_K; do
    quant $t 16 &
    q=$!
    [ -n "$prev" ] && { gen $prev; rm -f $w/$prev.gguf; }
    wait $q; stamp "$t quantized rc=$?"
    prev=$t
  done
  gen $prev
  stamp "done formats"
fi

if [ "$part" = tune ]; then
  # Rows per mat-vec warp after the x staging (the quant formats' default
  # was chosen before it): tg128 at depth 0 for each forced value.
  make_bf16 && quant Q4_K_M 16 && quant Q8_0 16
  stamp "models made"
  for f in Q4_K_M Q8_0; do
    for r in 0 1 2 4; do
      MEMRA_CUDA_MV_ROWS=$r bench $f-rows$r 60 $w/$f.gguf --backend cuda -p 0 -n 128 -d 0 -r 3
    done
  done
  stamp "done tune"
fi
