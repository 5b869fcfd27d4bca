#!/usr/bin/env bash
# Session 5's checks on the GPU machine (calls on one warm machine reuse the
# models in /tmp/s5):
#   profile: each kernel's time in one repetition of pp512, tg at depth 512
#            (bf16 and Q4_K_M, one-sequence engines) and b64 (bf16), by ncu
#            over memra-bench --profile-range (clocks not locked), then the
#            same rows' wall times without the profiler
# Carry .devcarry/final.tar.xz (stripped bin/ and the GPU unit tests),
# build/shared and build/tokref. Logs in $OUT/logs-<part>.tgz, the headline
# in $OUT/summary.txt, ncu's CSVs in $OUT/ncu-*.csv.
set -u
part=${1:-profile}
RUN=/tmp/s5run w=/tmp/s5
. scripts/device/common.sh
NCU=/usr/local/cuda/bin/ncu

prof() { # NAME ARGS...: ncu's per-kernel durations of the profiled repetitions
  local name=$1; shift
  timeout 200 $NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
      --csv --print-units base memra-bench "$@" --profile-range > $OUT/ncu-$name.csv 2> $L/ncu-$name.err
  say "ncu $name rc=$? kernels=$(grep -c gpu__time_duration $OUT/ncu-$name.csv)"
}

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
