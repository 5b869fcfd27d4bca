# Shared by scripts/device/session*-check.sh: source it after setting
# part (the part's name), RUN (a scratch folder for logs) and w (where the
# models are made, kept while the machine stays warm). Unpacks
# .devcarry/final.tar.xz when bin/ has no programs, sets L (the logs), S
# ($OUT/summary.txt) and the helpers say, stamp, make_bf16, quant, rows and
# bench; the logs are packed into $OUT/logs-<part>.tgz at exit.
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

