#!/usr/bin/env bash
# Session 2's checks on the GPU machine, in two calls on one warm machine:
#   part1: the GPU suite (tests/gpu/run.sh), a random Qwen3-8B shape in bf16
#          (with the Qwen3 tokenizer, for the server), memra-quantize to
#          Q4_K_M and Q8_0 timed on 16 cores, memra-bench bf16 rows
#   part2: memra-bench Q8_0 / Q4_K_M rows, memra-gen on both, the server
#          benchmark against memra-serve on the bf16 model
# Carry .devcarry/final.tar.xz (stripped bin/ and the GPU unit tests, xz with a
# large dictionary: the binaries share their kernels), build/shared
# and build/tokref. Logs in $OUT/logs.tgz, the headline in $OUT/summary.txt.
set -u
part=${1:-part1}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT/logs"
L=$OUT/logs S=$OUT/summary.txt
here=$(pwd)
if [ ! -x bin/memra-gen ]; then
  mkdir -p bin build/release/tests /tmp/fc
  xz -dc .devcarry/final.tar.xz | tar -C /tmp/fc -xf - && cp /tmp/fc/bin/* bin/ &&
    cp /tmp/fc/tests/* build/release/tests/ || { echo "unpacking the binaries failed"; exit 1; }
fi
export PATH=$here/bin:$PATH MEMRA_CACHE=/tmp/memra-cache
say() { echo "$*" | tee -a "$S"; }
pack() { tar -C "$OUT" -czf "$OUT/logs-$part.tgz" logs 2>/dev/null; }
trap pack EXIT
t0=$(date +%s)
stamp() { say "[$(( $(date +%s) - t0 ))s] $*"; }
w=/tmp/q8; mkdir -p $w
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,driver_version --format=csv,noheader | tee -a "$S"

if [ "$part" = part1 ]; then
  mkdir -p $w/tok && gunzip -c build/tokref/qwen3/tokenizer.json.gz > $w/tok/tokenizer.json
  cp build/tokref/qwen3/tokenizer_config.json $w/tok/ 2>/dev/null
  ( TIMEFORMAT="%R s wall, %U s user"
    echo "convert --random bf16:"; time memra-convert --random tests/fixtures/configs/Qwen3-8B.json \
        --tokenizer $w/tok --seed 1 $w/bf16.gguf > $L/convert.log 2>&1
    echo "quantize Q4_K_M --threads 16:"; time memra-quantize $w/bf16.gguf $w/q4km.gguf Q4_K_M --threads 16 > $L/quant-q4km.log 2>&1
    echo "quantize Q8_0 --threads 16:"; time memra-quantize $w/bf16.gguf $w/q8_0.gguf Q8_0 --threads 16 > $L/quant-q8_0.log 2>&1
  ) > $L/timings.log 2>&1 &
  mk=$!
  stamp "GPU suite"
  OUT=$L/gpu timeout 280 bash tests/gpu/run.sh > $L/gpu-suite.log 2>&1
  say "gpu suite rc=$? $(tail -1 $L/gpu-suite.log)"
  grep -E "^FAIL" $L/gpu-suite.log | head -20 | tee -a "$S"
  wait $mk
  cat $L/timings.log | tee -a "$S"; tail -n 2 $L/quant-q4km.log | tee -a "$S"
  ls -l $w/*.gguf | tee -a "$S"
  stamp "bench bf16"
  timeout 200 memra-bench $w/bf16.gguf --backend cuda -p 512 -n 128 -d 0,8192,32768 -b 1,8,32,64 -r 3 \
      --json > $L/bench-bf16.json 2> $L/bench-bf16.err
  say "bench bf16 rc=$?"
  jq -r '.rows[]? | "\(.test) \(.tok_s) tok/s  \(.pct_ceiling)% peak_mem \(.peak_mem_bytes)"' $L/bench-bf16.json 2>/dev/null | tee -a "$S"
  stamp "done part1"
fi

if [ "$part" = part2 ]; then
  for f in q8_0 q4km; do
    stamp "bench $f"
    timeout 150 memra-bench $w/$f.gguf --backend cuda -p 512 -n 128 -d 0 -b 64 -r 3 --json \
        > $L/bench-$f.json 2> $L/bench-$f.err
    say "bench $f rc=$?"
    jq -r '.rows[]? | "\(.test) \(.tok_s) tok/s  \(.pct_ceiling)% peak_mem \(.peak_mem_bytes)"' $L/bench-$f.json 2>/dev/null | tee -a "$S"
    timeout 60 memra-gen $w/$f.gguf --backend cuda --prompt-ids 100,101,102,103,104,105,106,107 -n 16 --temp 0 --json \
        > $L/gen-$f.json 2>&1
    say "gen $f rc=$? $(jq -c '.tokens' $L/gen-$f.json 2>/dev/null | head -c 200)"
  done
  stamp "server bench"
  memra-serve -m q=$w/bf16.gguf --port 18090 --max-sessions 64 --ctx 1024 > $L/serve.log 2>&1 &
  srv=$!
  for _ in $(seq 300); do curl -sf localhost:18090/readyz >/dev/null && break; sleep 0.5; done
  timeout 200 memra-bench --server http://127.0.0.1:18090 -c 1,8,32,64 -n 128 -p 512 -r 2 --json \
      > $L/bench-server.json 2> $L/bench-server.err
  say "server bench rc=$?"
  jq -c '.' $L/bench-server.json 2>/dev/null | head -c 3000 >> "$S"; echo >> "$S"
  kill $srv; wait $srv 2>/dev/null
  stamp "done part2"
fi

if [ "$part" = part3 ]; then
  # Every weight format on the Qwen3-8B shape: quantize the bf16 file and
  # generate 16 greedy tokens with memra-gen on CUDA (sampled on the device).
  # memra-gen needs a tokenizer even with --prompt-ids: convert with one.
  mkdir -p $w/tok && gunzip -c build/tokref/qwen3/tokenizer.json.gz > $w/tok/tokenizer.json
  memra-convert --random tests/fixtures/configs/Qwen3-8B.json --tokenizer $w/tok --seed 1 \
      $w/bf16.gguf > $L/convert.log 2>&1
  stamp "bf16 made rc=$?"
  for t in Q4_0 NVFP4 MXFP8 Q6_K Q5_K; do
    memra-quantize $w/bf16.gguf $w/$t.gguf $t --threads 16 > $L/quant-$t.log 2>&1
    q=$?
    timeout 60 memra-gen $w/$t.gguf --backend cuda --prompt-ids 100,101,102,103,104,105,106,107 -n 16 --temp 0 \
        > $L/gen-$t.log 2>&1
    stamp "$t quantize rc=$q gen rc=$? $(grep -o 'decode .*' $L/gen-$t.log | head -1)"
    rm -f $w/$t.gguf
  done
fi
