# Shared by scripts/device/session*-check.sh: source it after setting
# part (the part's name), RUN (a scratch folder for logs) and w (where the
# models are made, kept while the machine stays warm). Unpacks
# .devcarry/final.tar.xz when bin/ has no programs, sets L (the logs), S
# ($OUT/summary.txt) and the helpers say, stamp, make_bf16, quant, rows and
# bench, serve_bench, prof (ncu per kernel) and checks (the kernel check and
# GPU unit tests); the logs are packed into $OUT/logs-<part>.tgz at exit.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT" $RUN/logs
L=$RUN/logs S=$OUT/summary.txt
here=$(pwd)
if [ ! -x bin/memra-gen ]; then
  mkdir -p bin build/release/tests /tmp/fc
  xz -dc .devcarry/final.tar.xz | tar -C /tmp/fc -xf - && cp /tmp/fc/bin/* bin/ &&
    cp /tmp/fc/tests/* build/release/tests/ || { echo "unpacking the binaries failed"; exit 1; }
fi
export PATH=$here/bin:$PATH MEMRA_CACHE=/tmp/memra-cache
say() { echo "$*" | tee -a "$S"; }
pack() { tar -C $RUN -czf "$OUT/logs-$part.tgz" logs 2>/dev/null; }
trap pack EXIT
t0=$(date +%s)
stamp() { say "[$(( $(date +%s) - t0 ))s] $*"; }
mkdir -p $w
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,driver_version --format=csv,noheader | tee -a "$S"

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


serve_bench() { # REPS: memra-serve (64 sessions) on $w/bf16.gguf under memra-bench --server -c 1,64
  memra-serve -m q=$w/bf16.gguf --port 18090 --max-sessions 64 --ctx 1024 > $L/serve.log 2>&1 &
  local srv=$!
  for _ in $(seq 300); do curl -sf localhost:18090/readyz >/dev/null && break; sleep 0.5; done
  timeout 150 memra-bench --server http://127.0.0.1:18090 -c 1,64 -n 128 -p 512 -r "$1" --json \
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
}

NCU=/usr/local/cuda/bin/ncu
prof() { # NAME ARGS...: ncu's per-kernel durations of the profiled repetitions
  local name=$1; shift
  timeout 200 $NCU --profile-from-start off --clock-control none --metrics gpu__time_duration.sum \
      --csv --print-units base memra-bench "$@" --profile-range > $L/ncu-$name.csv 2> $L/ncu-$name.err
  say "ncu $name rc=$? kernels=$(grep -c gpu__time_duration $L/ncu-$name.csv)"
  python3 scripts/device/ncu-steps.py $L/ncu-$name.csv --show -1 --top 22 > $OUT/prof-$name.txt 2>&1
  grep -A3 "^forward .*us in" $OUT/prof-$name.txt | tail -4 | tee -a "$S"
}

checks() { # TESTS...: the kernel check (every op), then these GPU unit tests
  timeout 200 memra-parity --kernels > $L/kernels.log 2>&1
  say "kernel check rc=$? $(tail -1 $L/kernels.log)"
  grep FAIL $L/kernels.log | head -20 | tee -a "$S"
  local t
  for t in "$@"; do
    MEMRA_SHARED=$here/build/shared timeout 200 build/release/tests/$t > $L/$t.log 2>&1
    say "$t rc=$? $(tail -1 $L/$t.log)"
  done
}
