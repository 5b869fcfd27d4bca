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
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" /tmp/s3run/logs
L=/tmp/s3run/logs S=$OUT/summary.txt
here=$(pwd)
if [ ! -x bin/memra-gen ]; then
  mkdir -p bin build/release/tests /tmp/fc
  xz -dc .devcarry/final.tar.xz | tar -C /tmp/fc -xf - && cp /tmp/fc/bin/* bin/ &&
    cp /tmp/fc/tests/* build/release/tests/ || { echo "unpacking the binaries failed"; exit 1; }
fi
export PATH=$here/bin:$PATH MEMRA_CACHE=/tmp/memra-cache
say() { echo "$*" | tee -a "$S"; }
pack() { tar -C /tmp/s3run -czf "$OUT/logs-$part.tgz" logs 2>/dev/null; }
trap pack EXIT
t0=$(date +%s)
stamp() { say "[$(( $(date +%s) - t0 ))s] $*"; }
w=/tmp/s3; mkdir -p $w
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,driver_version --format=csv,noheader | tee -a "$S"

# The bf16 8B shape with the Qwen3 tokenizer (memra-gen needs one).
make_bf16() {
  [ -s $w/bf16.gguf ] && return 0
  mkdir -p $w/tok && gunzip -c build/tokref/qwen3/tokenizer.json.gz > $w/tok/tokenizer.json
  cp build/tokref/qwen3/tokenizer_config.json $w/tok/ 2>/dev/null
  memra-convert --random tests/fixtures/configs/Qwen3-8B.json --tokenizer $w/tok --seed 1 \
      $w/bf16.gguf > $L/convert.log 2>&1
}
quant() { # TYPE [THREADS]
  [ -s $w/$1.gguf ] && return 0
  memra-quantize $w/bf16.gguf $w/$1.part.gguf $1 --threads ${2:-16} > $L/quant-$1.log 2>&1 &&
    mv $w/$1.part.gguf $w/$1.gguf
}
rows() { # bench JSON -> one line per row
  python3 -c '
import json,sys
j=json.load(open(sys.argv[1]))
for r in j.get("rows",[]):
    print(" ", r.get("test"), r.get("tok_s"), "tok/s", str(r.get("pct_ceiling"))+"%", "peak", r.get("peak_mem_bytes"))
' "$1" 2>/dev/null
}
bench() { # NAME TIMEOUT ARGS...  (env passes through)
  local name=$1 lim=$2; shift 2
  timeout $lim memra-bench "$@" --json > $L/bench-$name.json 2> $L/bench-$name.err
  say "bench $name rc=$? ($*)"
  rows $L/bench-$name.json | tee -a "$S"
}
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
  memra-serve -m q=$w/bf16.gguf --port 18090 --max-sessions 64 --ctx 1024 > $L/serve.log 2>&1 &
  srv=$!
  for _ in $(seq 300); do curl -sf localhost:18090/readyz >/dev/null && break; sleep 0.5; done
  timeout 150 memra-bench --server http://127.0.0.1:18090 -c 1,64 -n 128 -p 512 -r 2 --json \
      > $L/bench-server.json 2> $L/bench-server.err
  say "server bench rc=$?"
  python3 -c '
import json,sys
j=json.load(open(sys.argv[1]))
print("cold_ttft_ms", j.get("cold_ttft_ms"))
for l in j.get("levels",[]):
    print(" ", {k: l[k] for k in l if not isinstance(l[k], (dict, list))})
    for k in ("ttft_ms","itl_ms"):
        if k in l: print("   ", k, l[k])
' $L/bench-server.json 2>&1 | tee -a "$S"
  kill $srv; wait $srv 2>/dev/null
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
