#!/usr/bin/env bash
# Checks and measures memra on a machine with an NVIDIA GPU. Run from
# anywhere; it works in the project root.
#
#   scripts/gpu-check.sh [OPTIONS] COMMAND [ARGS...]
#
# Commands:
#   build          bin/ and build/release/tests present, else make && make unit-bins
#   test [ARGS]    tests/gpu/run.sh ARGS (what `make test-gpu` runs; e.g. --sanitize)
#   models         the random Qwen3-8B-shaped models the rows use, in --models DIR:
#                  bf16.gguf (memra-convert --random tests/fixtures/configs/Qwen3-8B.json
#                  --seed 1), Q8_0.gguf and Q4_K_M.gguf (memra-quantize); kept between runs.
#                  The moe-* rows make their own: moe-Q8_0.gguf (memra-convert --random
#                  tests/fixtures/configs/Qwen3-30B-A3B.json --seed 1 --outtype q8_0) and
#                  moe-Q4_K_M.gguf (memra-quantize --allow-requantize from it): 51 GB together,
#                  so on a 64 GB disk give them a --models dir without the 8B files; the
#                  q35moe-* rows likewise q35moe-Q8_0.gguf and q35moe-Q4_K_M.gguf from
#                  tests/fixtures/configs/Qwen3.5-35B-A3B.json (58 GB: a dir of their own);
#                  the q35-* rows (the Qwen3.5-9B hybrid) q35-bf16.gguf (memra-convert --random
#                  tests/fixtures/configs/Qwen3.5-9B.json --seed 1) and q35-Q4_K_M.gguf
#                  (memra-quantize): 24 GB together
#   bench [ROW...] the memra-bench rows of docs/PERFORMANCE.md (default: the current table;
#                  `rows` lists every row and its command); one JSON a row in OUT
#   ab DIR[,DIR...] [ROW...]  each bench row (default bf16 q4km) by bin/memra-bench and by
#                  each DIR/memra-bench (other builds, e.g. earlier commits': a bisection),
#                  alternately, two rounds each, in one run: an A/B on one card under the same conditions
#   serve [LEVELS [REPS [MODEL-FILE]]]  memra-serve on MODEL-FILE (default bf16.gguf) under
#                  memra-bench --server -c LEVELS (default 1,64) -r REPS (default 1), 512-token
#                  prompts, 128 tokens each
#   profile [NAME...]  every kernel's time in one repetition, by ncu over
#                  memra-bench --profile-range, summed per forward by scripts/ncu-steps.py
#   references     the HF reference fixtures (scripts/make-references.sh; needs torch,
#                  transformers and tokenizers)
#   replicas [C [REPS [MODEL-FILE]]]  two GPUs: memra-serve on device 0 under memra-bench
#                  --server -c C (default 64), then one memra-serve on each of devices 0 and 1,
#                  each under -c C at once (2C in all); 512-token prompts, 128 tokens each
#   multi [ROW...] two GPUs (devices 0 and 1; issue 24): memra-bench on the Qwen3-8B-shaped
#                  bf16.gguf and on a Llama-3.1-70B-shaped l70-Q8_0.gguf (memra-convert
#                  --random tests/fixtures/configs/Llama-3.1-70B.json --outtype q8_0: 75 GB),
#                  each on one card, --pp 2 and --tp 2 in one process, and --pp 2 and --tp 2
#                  as two processes (--rank, NCCL); with --llama, llama-bench -sm layer and
#                  -sm row on both cards beside them. `multi-rows` lists the rows
#   rows           print the bench rows and the memra-bench command of each
#   all            build, test, bench, serve, profile
#
# Options:
#   --out DIR        logs, JSON and summary.txt (default: a new temp dir, printed)
#   --models DIR     where the models are made and kept (default build/gpu-check-models)
#   --tokenizer DIR  a dir with tokenizer.json (+ tokenizer_config.json) carried into
#                    bf16.gguf, and the tokenizer row's input (default: the Qwen3 one that
#                    scripts/fetch-tokenizers.sh caches, when present)
#   --device N       the CUDA device (default 0)
#   --threads N      memra-quantize threads (default: all cores)
#   --port N         memra-serve's port for `serve` (default 18090)
#   --llama DIR      with `bench`: llama.cpp's rows beside memra's, on the same model files, by
#                    DIR/llama-bench (pp512 and tg128 of each model the rows used; of the
#                    moe-* files tg128 at depth 8192 too, of the q35-* and q35moe-* files
#                    pp8192 and tg128 at depth 32768) and DIR/llama-batched-bench (512-token prompts, 128
#                    tokens: 1/8/64 sequences on Q4_K_M.gguf, 64 on moe-*, 8/64 on q35moe-*
#                    and q35-Q4_K_M.gguf); DIR as scripts/llama-tools.sh builds it
#   --timeout S      limit for each program run (default 900)
#
# Exit status: 0 when every step ran and exited 0, 1 otherwise, 2 on bad usage.
set -u -o pipefail
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)

out="" models=$root/build/gpu-check-models tok="" device=0 threads="" port=18090 limit=900 llama=""
cache=${MEMRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memra}
usage() { sed -n '2,/^set -u/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
die() { echo "gpu-check: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=${2:?--out needs a dir}; shift ;;
    --models) models=${2:?--models needs a dir}; shift ;;
    --tokenizer) tok=${2:?--tokenizer needs a dir}; shift ;;
    --device) device=${2:?--device needs N}; shift ;;
    --threads) threads=${2:?--threads needs N}; shift ;;
    --port) port=${2:?--port needs N}; shift ;;
    --llama) llama=${2:?--llama needs a dir}; shift ;;
    --timeout) limit=${2:?--timeout needs seconds}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) die "unknown option '$1' (see --help)" ;;
    *) break ;;
  esac
  shift
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
cmd=$1; shift
[ -n "$threads" ] || threads=$(nproc)
if [ -z "$tok" ] && [ -f "$cache/tokenizers/qwen3/tokenizer.json" ]; then
  tok=$cache/tokenizers/qwen3
fi
[ -z "$tok" ] || [ -f "$tok/tokenizer.json" ] || die "--tokenizer $tok: no tokenizer.json there"
export PATH=$root/bin:$PATH

# The memra-bench rows. ROW: MODEL-FILE ARGS (the model is --models DIR/MODEL-FILE; every row
# also gets --backend cuda --device N --json). The default set is docs/PERFORMANCE.md's
# current table; the others are its rows not measured again since (older tree, own date).
default_rows="bf16 bf16-b64 bf16-long q8 q8-b64 q4km q4km-b q4km-long bf16-short q4km-short"
other_rows="bf16-tg bf16-b8-b32 bf16-b64-d8192 tokenizer moe-q4km moe-q4km-b moe-q8 moe-q8-b"
other_rows="$other_rows q35moe-q4km q35moe-q4km-b q35-bf16 q35-bf16-d32k q35-q4km q35-q4km-d32k"
other_rows="$other_rows q35-q4km-b q35moe-q4km-d32k"
row_spec() {
  case $1 in
    bf16)           echo "bf16.gguf -p 512 -n 64 -d 0,32768 -r 2" ;;
    bf16-b64)       echo "bf16.gguf -p 512 -n 32 -d 0 -b 64 -r 2" ;;
    bf16-long)      echo "bf16.gguf -p 8192 -n 64 -d 8192 -r 2" ;;
    q8)             echo "Q8_0.gguf -p 512 -n 64 -d 0 -r 3" ;;
    q8-b64)         echo "Q8_0.gguf -p 512 -n 32 -d 0 -b 64 -r 2" ;;
    q4km)           echo "Q4_K_M.gguf -p 512 -n 64 -d 0,32768 -r 2" ;;
    q4km-b)         echo "Q4_K_M.gguf -p 512 -n 32 -d 0 -b 8,64 -r 2" ;;
    q4km-long)      echo "Q4_K_M.gguf -p 8192 -n 64 -d 8192 -r 2" ;;
    bf16-short)     echo "bf16.gguf -p 1,2,8,31,32,64 -n 0 -r 3" ;;
    bf16-tg)        echo "bf16.gguf -p 0 -n 128 -d 0 -r 3" ;;
    q4km-short)     echo "Q4_K_M.gguf -p 1,2,8,31,32,64 -n 0 -r 3" ;;
    bf16-b8-b32)    echo "bf16.gguf -p 512 -n 128 -d 0 -b 8,32 -r 3" ;;
    bf16-b64-d8192) echo "bf16.gguf -p 8192 -n 128 -d 0 -b 64 -r 3" ;;
    tokenizer)      echo "TOKENIZER --tokenizer -r 9" ;;
    moe-q4km)       echo "moe-Q4_K_M.gguf -p 512 -n 128 -d 0,8192 -r 2" ;;
    moe-q4km-b)     echo "moe-Q4_K_M.gguf -p 512 -n 32 -d 0 -b 64 -r 2" ;;
    moe-q8)         echo "moe-Q8_0.gguf -p 512 -n 128 -d 0,8192 -r 2" ;;
    moe-q8-b)       echo "moe-Q8_0.gguf -p 512 -n 32 -d 0 -b 64 -r 2" ;;
    q35moe-q4km)    echo "q35moe-Q4_K_M.gguf -p 512,8192 -n 128 -d 0 -r 2" ;;
    q35moe-q4km-d32k) echo "q35moe-Q4_K_M.gguf -p 0 -n 128 -d 32768 -c 33280 -r 2" ;;
    q35moe-q4km-b)  echo "q35moe-Q4_K_M.gguf -p 512 -n 32 -d 0 -b 8,64 -r 2" ;;
    q35-bf16)       echo "q35-bf16.gguf -p 512,8192 -n 128 -d 0 -r 2" ;;
    q35-bf16-d32k)  echo "q35-bf16.gguf -p 0 -n 128 -d 32768 -c 33280 -r 2" ;;
    q35-q4km)       echo "q35-Q4_K_M.gguf -p 512,8192 -n 128 -d 0 -r 2" ;;
    q35-q4km-d32k)  echo "q35-Q4_K_M.gguf -p 0 -n 128 -d 32768 -c 33280 -r 2" ;;
    q35-q4km-b)     echo "q35-Q4_K_M.gguf -p 512 -n 32 -d 0 -b 8,64 -r 2" ;;
    *) return 1 ;;
  esac
}
# The ncu profiles: NAME: MODEL-FILE ARGS (one repetition inside --profile-range).
prof_default="bf16-c1 bf16-d32k bf16-b64 q8-c1 q4km-c1 q4km-pp512"
prof_spec() {
  case $1 in
    bf16-c1)    echo "bf16.gguf -p 0 -n 2 -d 512 -r 1" ;;
    bf16-d32k)  echo "bf16.gguf -p 0 -n 2 -d 32768 -r 1" ;;
    bf16-b64)   echo "bf16.gguf -p 512 -n 2 -d 0 -b 64 -r 1" ;;
    q8-c1)      echo "Q8_0.gguf -p 0 -n 2 -d 512 -r 1" ;;
    q4km-c1)    echo "Q4_K_M.gguf -p 0 -n 2 -d 512 -r 1" ;;
    q4km-pp512) echo "Q4_K_M.gguf -p 512 -n 0 -r 1" ;;
    *) return 1 ;;
  esac
}

# The two-GPU rows: NAME: MODEL-FILE SPLIT ARGS, SPLIT one of one (device 0 alone), pp, tp
# (both cards, one process) or pp-procs, tp-procs (one process a card, --rank).
multi_default="8b-one 8b-pp2 8b-tp2 8b-pp2-procs 8b-tp2-procs l70-one l70-pp2 l70-tp2"
multi_default="$multi_default l70-pp2-procs l70-tp2-procs"
multi_spec() {
  local m a="-p 512 -n 128 -d 0 -b 64 -r 2"
  case $1 in
    8b-*) m=bf16.gguf ;;
    l70-*) m=l70-Q8_0.gguf ;;
    *) return 1 ;;
  esac
  case $1 in
    *-one) echo "$m one $a" ;;
    *-pp2) echo "$m pp $a" ;;
    *-tp2) echo "$m tp $a" ;;
    *-pp2-procs) echo "$m pp-procs $a" ;;
    *-tp2-procs) echo "$m tp-procs $a" ;;
    *) return 1 ;;
  esac
}
if [ "$cmd" = multi-rows ]; then
  for r in $multi_default; do
    read -r m split a <<<"$(multi_spec "$r")"
    case $split in
      one) echo "$r: memra-bench MODELS/$m --backend cuda --device 0 $a --json" ;;
      pp|tp) echo "$r: memra-bench MODELS/$m --backend cuda --$split 2 --devices 0,1 $a --json" ;;
      *) s=${split%-procs}
         echo "$r: memra-bench MODELS/$m --backend cuda --$s 2 --rank R --devices R --nccl-id F $a --json (R = 1, then 0)" ;;
    esac
  done
  exit 0
fi

if [ "$cmd" = rows ]; then
  for r in $default_rows $other_rows; do
    read -r m a <<<"$(row_spec "$r")"
    [ "$m" = TOKENIZER ] && m=TOKENIZER-DIR || m=MODELS/$m
    case " $default_rows " in *" $r "*) tag="" ;; *) tag="  (not in the default set)" ;; esac
    if [ "$m" = TOKENIZER-DIR ]; then echo "$r: memra-bench $m $a --json$tag"
    else echo "$r: memra-bench $m --backend cuda $a --json$tag"; fi
  done
  exit 0
fi

[ -n "$out" ] || out=$(mktemp -d /tmp/memra-gpu-check.XXXXXX)
mkdir -p "$out" || die "cannot make $out"
S=$out/summary.txt
status=0
say() { echo "$*" | tee -a "$S"; }
t0=$(date +%s)
stamp() { say "[$(( $(date +%s) - t0 ))s] $*"; }
# run NAME CMD...: CMD under the time limit, stdout and stderr into OUT/NAME.log.
run() {
  local name=$1; shift
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || status=1
  return $rc
}

need_bins() {
  local f
  for f in bin/memra-bench bin/memra-convert bin/memra-quantize bin/memra-serve bin/memra-parity \
      build/release/tests/test_cuda_engine; do
    [ -x "$f" ] || return 1
  done
}

do_build() {
  if need_bins; then
    say "build: bin/ and build/release/tests present"
  else
    stamp "build: make && make unit-bins"
    run build make -j"$(nproc)" all unit-bins || { say "build failed: $out/build.log"; exit 1; }
    need_bins || { say "build: programs still missing after make"; exit 1; }
  fi
}

do_test() {
  stamp "test: tests/gpu/run.sh $*"
  mkdir -p "$out/test"
  OUT=$out/test timeout "$limit" tests/gpu/run.sh --device "$device" "$@" >"$out/test.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || status=1
  say "test rc=$rc: $(tail -1 "$out/test.log")"
  grep '^FAIL' "$out/test.log" | head -20 | tee -a "$S"
}

# models/FILE made once: random weights of CONFIG (seed 1, with the tokenizer of --tokenizer
# when there is one, so llama.cpp loads the file), written under a .part name and renamed when
# complete. model_random LOG FILE CONFIG [memra-convert ARGS...]
model_random() {
  local log=$1 file=$2 cfg=$3
  shift 3
  [ -s "$models/$file" ] && return
  mkdir -p "$models"
  stamp "models: $file (memra-convert --random $cfg --seed 1${*:+ $*}${tok:+, tokenizer $tok})"
  run "$log" memra-convert --random "$cfg" ${tok:+--tokenizer "$tok"} --seed 1 "$@" \
      "$models/${file%.gguf}.part.gguf" || { say "memra-convert failed: $out/$log.log"; exit 1; }
  mv "$models/${file%.gguf}.part.gguf" "$models/$file"
}

# models/FILE made once from models/SOURCE by memra-quantize.
# model_quantize LOG SOURCE FILE TYPE [memra-quantize ARGS...]
model_quantize() {
  local log=$1 src=$2 file=$3 type=$4
  shift 4
  [ -s "$models/$file" ] && return
  stamp "models: $file (memra-quantize $type${*:+ $*}, $threads threads)"
  run "$log" memra-quantize "$models/$src" "$models/${file%.gguf}.part.gguf" "$type" "$@" \
      --threads "$threads" || { say "memra-quantize failed: $out/$log.log"; exit 1; }
  mv "$models/${file%.gguf}.part.gguf" "$models/$file"
}

make_models() {
  model_random convert bf16.gguf tests/fixtures/configs/Qwen3-8B.json
  model_quantize quantize-Q8_0 bf16.gguf Q8_0.gguf Q8_0
  model_quantize quantize-Q4_K_M bf16.gguf Q4_K_M.gguf Q4_K_M
}

# The Qwen3.5-9B-shaped hybrid of the q35-* rows: BF16, and Q4_K_M from it.
make_q35_models() {
  model_random convert-q35 q35-bf16.gguf tests/fixtures/configs/Qwen3.5-9B.json
  model_quantize quantize-q35 q35-bf16.gguf q35-Q4_K_M.gguf Q4_K_M
}

# The MoE files of the moe-* (Qwen3-30B-A3B shape) and q35moe-* (Qwen3.5-35B-A3B) rows:
# random weights straight to Q8_0 (their BF16 files would be 61 and 69 GB), Q4_K_M
# requantized from it. make_moe_models PREFIX CONFIG.
make_moe_models() {
  local pre=$1 cfg=$2
  model_random "convert-$pre" "$pre-Q8_0.gguf" "$cfg" --outtype q8_0
  model_quantize "quantize-$pre" "$pre-Q8_0.gguf" "$pre-Q4_K_M.gguf" Q4_K_M --allow-requantize
}

# One line a row of a memra-bench --json file (model, tokenizer or server bench).
summarize() {
  python3 - "$1" <<'EOF' 2>&1 | tee -a "$S"
import json, sys
j = json.load(open(sys.argv[1]))
for r in j.get("rows", []):
    pct = r.get("pct_ceiling")
    print("  %-22s %12.1f tok/s [%.1f, %.1f]  %s of ceiling  peak %s bytes" % (
        r.get("test"), r.get("tok_s", 0), r.get("tok_s_min", 0), r.get("tok_s_max", 0),
        "-" if pct is None else "%.1f%%" % pct, r.get("peak_mem_bytes")))
if "levels" in j:
    print("  cold TTFT", j.get("cold_ttft_ms"), "ms")
    for l in j["levels"]:
        q = lambda k: "%s / %s" % (l.get(k, {}).get("p50"), l.get(k, {}).get("p99"))
        print("  c=%s requests %s req/s %s tok/s %s TTFT p50/p99 %s ITL p50/p99 %s errors %s" % (
            l.get("concurrency"), l.get("requests"), l.get("requests_s"), l.get("tok_s"),
            q("ttft_ms"), q("itl_ms"), l.get("errors")))
if "rows" not in j and "levels" not in j:
    print("  " + ", ".join("%s %s" % (k, v) for k, v in j.items() if not isinstance(v, (dict, list))))
EOF
}

# llama.cpp's rows on the model files memra's rows used (--llama DIR): llama-bench's pp512 and
# tg128 per file (and tg128 at depth 8192 of an MoE file), and llama-batched-bench's 1/8/64
# sequences on Q4_K_M.gguf and 64 on an MoE file, each into OUT.
llama_run() {
  LD_LIBRARY_PATH=$llama${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout "$limit" "$@"
}
llama_batched() {
  local m=$1 npl=$2
  [ -x "$llama/llama-batched-bench" ] || { say "llama: no $llama/llama-batched-bench"; status=1; return; }
  stamp "llama: llama-batched-bench -m $models/$m -npp 512 -ntg 128 -npl $npl"
  llama_run "$llama/llama-batched-bench" -m "$models/$m" -ngl 99 -fa on -c 45000 -b 2048 \
    -ub 512 -npp 512 -ntg 128 -npl "$npl" >"$out/llama-batched-$m.txt" 2>"$out/llama-batched-$m.err" ||
    { status=1; say "  failed: $out/llama-batched-$m.err"; }
  grep -E '^\|' "$out/llama-batched-$m.txt" | tee -a "$S"
}
# One more llama-bench row set of a file, two repetitions: llama_bench_at TAG FILE ARGS...
llama_bench_at() {
  local tag=$1 m=$2
  shift 2
  stamp "llama: llama-bench -m $models/$m -ngl 99 -fa 1 $* -r 2"
  llama_run "$llama/llama-bench" -m "$models/$m" -ngl 99 -fa 1 "$@" -r 2 -o md \
    >"$out/llama-bench-$tag-$m.md" 2>"$out/llama-bench-$tag-$m.err" ||
    { status=1; say "  failed: $out/llama-bench-$tag-$m.err"; }
  grep -E '^\| .*(pp|tg)[0-9]' "$out/llama-bench-$tag-$m.md" | tee -a "$S"
}
do_llama() {
  local used=$1 m
  [ -x "$llama/llama-bench" ] || { say "llama: no $llama/llama-bench"; status=1; return; }
  for m in $used; do
    stamp "llama: llama-bench -m $models/$m -ngl 99 -fa 1 -p 512 -n 128 -r 3"
    llama_run "$llama/llama-bench" -m "$models/$m" -ngl 99 -fa 1 -p 512 -n 128 -r 3 -o md \
      >"$out/llama-bench-$m.md" 2>"$out/llama-bench-$m.err" || { status=1; say "  failed: $out/llama-bench-$m.err"; }
    grep -E '^\| .*(pp|tg)[0-9]' "$out/llama-bench-$m.md" | tee -a "$S"
    case $m in
      q35moe-*)
        llama_bench_at p8192 "$m" -p 8192 -n 0
        llama_bench_at d32768 "$m" -p 0 -n 128 -d 32768
        llama_batched "$m" 8,64 ;;
      q35-*)
        llama_bench_at p8192 "$m" -p 8192 -n 0
        llama_bench_at d32768 "$m" -p 0 -n 128 -d 32768
        [ "$m" != q35-Q4_K_M.gguf ] || llama_batched "$m" 8,64 ;;
      moe-*)
        llama_bench_at d8192 "$m" -p 0 -n 128 -d 8192
        llama_batched "$m" 64 ;;
      Q4_K_M.gguf) llama_batched "$m" 1,8,64 ;;
    esac
  done
}

# The model files the rows ROWS (one string) read, made when missing.
models_for() {
  case " $1 " in *" bf16"*|*" q4"*|*" q8"*) make_models ;; esac
  case " $1 " in *" moe-"*) make_moe_models moe tests/fixtures/configs/Qwen3-30B-A3B.json ;; esac
  case " $1 " in *" q35moe-"*)
    make_moe_models q35moe tests/fixtures/configs/Qwen3.5-35B-A3B.json ;;
  esac
  case " $1 " in *" q35-"*) make_q35_models ;; esac
}

# ab DIR[,DIR...] [ROW...]: each row by this tree's memra-bench and by each DIR/memra-bench
# (other builds: earlier commits, a variant), alternately, two rounds of each, in one run on one
# card, so they are compared under the same conditions: ab-ROW-aN.json (this tree) and
# ab-ROW-bN.json, ab-ROW-cN.json ... (the DIRs in order). What a bisection of a row needs: the
# rows' times moved, the kernels' own times (ncu) did not show where.
do_ab() {
  local dirs=${1:-} d
  [ -n "$dirs" ] || die "ab: DIR must hold the other build's memra-bench"
  local -a others=()
  IFS=, read -r -a others <<<"$dirs"
  for d in "${others[@]}"; do
    [ -x "$d/memra-bench" ] || die "ab: $d has no memra-bench"
  done
  shift
  local rows=${*:-bf16 q4km} r m a round k bench side
  for r in $rows; do
    row_spec "$r" >/dev/null || die "ab: no row '$r' (see: $0 rows)"
    [ "$r" != tokenizer ] || die "ab: the tokenizer row reads no model"
  done
  models_for "$rows"
  local sides=abcdefghij
  [ ${#others[@]} -lt ${#sides} ] || die "ab: at most $(( ${#sides} - 1 )) other builds"
  for r in $rows; do
    read -r m a <<<"$(row_spec "$r")"
    for round in 1 2; do
      for ((k = 0; k <= ${#others[@]}; k++)); do
        side=${sides:k:1}
        bench=memra-bench
        [ $k = 0 ] || bench=${others[k-1]}/memra-bench
        # shellcheck disable=SC2086 # $a is a list of arguments
        set -- "$models/$m" --backend cuda --device "$device" $a --json
        stamp "ab $r $side$round: $bench $*"
        timeout "$limit" "$bench" "$@" >"$out/ab-$r-$side$round.json" \
          2>"$out/ab-$r-$side$round.err" || { status=1; say "  failed: $(tail -2 "$out/ab-$r-$side$round.err")"; }
        summarize "$out/ab-$r-$side$round.json"
      done
    done
  done
}

do_bench() {
  local rows=${*:-$default_rows} r m a used=""
  for r in $rows; do row_spec "$r" >/dev/null || die "bench: no row '$r' (see: $0 rows)"; done
  models_for "$rows"
  for r in $rows; do
    read -r m a <<<"$(row_spec "$r")"
    # $a is a list of arguments: split on purpose.
    # shellcheck disable=SC2086
    if [ "$m" = TOKENIZER ]; then
      [ -n "$tok" ] || { say "bench $r: skipped (no --tokenizer dir)"; continue; }
      set -- "$tok" $a --json
    else
      set -- "$models/$m" --backend cuda --device "$device" $a --json
      case " $used " in *" $m "*) ;; *) used="$used $m" ;; esac
    fi
    stamp "bench $r: memra-bench $*"
    timeout "$limit" memra-bench "$@" >"$out/bench-$r.json" 2>"$out/bench-$r.err"
    local rc=$?
    [ $rc -eq 0 ] || { status=1; say "  rc=$rc: $(tail -2 "$out/bench-$r.err")"; }
    summarize "$out/bench-$r.json"
  done
  [ -z "$llama" ] || [ -z "$used" ] || do_llama "$used"
}

do_multi() {
  local rows=${*:-$multi_default} r m split a used="" ngpu
  for r in $rows; do multi_spec "$r" >/dev/null || die "multi: no row '$r' (see: $0 multi-rows)"; done
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "${ngpu:-0}" -ge 2 ] || { say "multi: $ngpu GPU(s): the rows need two"; status=1; return; }
  case " $rows " in *" 8b-"*) make_models ;; esac
  case " $rows " in *" l70-"*)
    if [ ! -s "$models/l70-Q8_0.gguf" ]; then
      stamp "models: l70-Q8_0.gguf (memra-convert --random Llama-3.1-70B.json --outtype q8_0)"
      run convert-l70 memra-convert --random tests/fixtures/configs/Llama-3.1-70B.json --seed 1 \
          --outtype q8_0 "$models/l70-Q8_0.part.gguf" ||
        { say "memra-convert failed: $out/convert-l70.log"; exit 1; }
      mv "$models/l70-Q8_0.part.gguf" "$models/l70-Q8_0.gguf"
    fi ;;
  esac
  for r in $rows; do
    read -r m split a <<<"$(multi_spec "$r")"
    case " $used " in *" $m "*) ;; *) used="$used $m" ;; esac
    local f=$models/$m rc
    # $a is a list of arguments: split on purpose.
    # shellcheck disable=SC2086
    case $split in
      one)
        stamp "multi $r: memra-bench $f --backend cuda --device 0 $a"
        timeout "$limit" memra-bench "$f" --backend cuda --device 0 $a --json \
          >"$out/multi-$r.json" 2>"$out/multi-$r.err" ;;
      pp|tp)
        stamp "multi $r: memra-bench $f --backend cuda --$split 2 --devices 0,1 $a"
        timeout "$limit" memra-bench "$f" --backend cuda "--$split" 2 --devices 0,1 $a --json \
          >"$out/multi-$r.json" 2>"$out/multi-$r.err" ;;
      *)
        local sp=${split%-procs} id=$out/nccl-id.$r pid
        stamp "multi $r: memra-bench $f --backend cuda --$sp 2 --rank 1/0 --devices 1/0 $a"
        timeout "$limit" memra-bench "$f" --backend cuda "--$sp" 2 --rank 1 --devices 1 \
          --nccl-id "$id" $a --json >/dev/null 2>"$out/multi-$r.rank1.err" &
        pid=$!
        timeout "$limit" memra-bench "$f" --backend cuda "--$sp" 2 --rank 0 --devices 0 \
          --nccl-id "$id" $a --json >"$out/multi-$r.json" 2>"$out/multi-$r.err"
        rc=$?
        wait "$pid" || { status=1; say "  rank 1 failed: $(tail -2 "$out/multi-$r.rank1.err")"; }
        (exit $rc) ;;
    esac
    rc=$?
    [ $rc -eq 0 ] || { status=1; say "  rc=$rc: $(tail -2 "$out/multi-$r.err")"; }
    summarize "$out/multi-$r.json"
  done
  [ -n "$llama" ] || return
  [ -x "$llama/llama-bench" ] || { say "llama: no $llama/llama-bench"; status=1; return; }
  for m in $used; do
    local sm
    for sm in layer row; do
      stamp "llama: llama-bench -m $models/$m -ngl 99 -fa 1 -sm $sm -p 512 -n 128 -r 2"
      CUDA_VISIBLE_DEVICES=0,1 llama_run "$llama/llama-bench" -m "$models/$m" -ngl 99 -fa 1 \
        -sm "$sm" -p 512 -n 128 -r 2 -o md >"$out/llama-multi-$sm-$m.md" \
        2>"$out/llama-multi-$sm-$m.err" || { status=1; say "  failed: $out/llama-multi-$sm-$m.err"; }
      grep -E '^\| .*(pp|tg)[0-9]' "$out/llama-multi-$sm-$m.md" | tee -a "$S"
    done
  done
}

# serve_start NAME DEVICE PORT MODEL-FILE: memra-serve in the background (its pid in srv_pid,
# its log OUT/NAME.log), ready on /readyz; 1 when it did not get ready (stopped then).
serve_start() {
  local name=$1 dev=$2 p=$3 model=$4
  stamp "$name: memra-serve -m q=$models/$model --port $p --device $dev --max-sessions 64 --ctx 1024"
  memra-serve -m "q=$models/$model" --port "$p" --device "$dev" --max-sessions 64 \
      --ctx 1024 >"$out/$name.log" 2>&1 &
  srv_pid=$!
  for _ in $(seq 600); do
    curl -sf "http://127.0.0.1:$p/readyz" >/dev/null 2>&1 && return 0
    kill -0 "$srv_pid" 2>/dev/null || break
    sleep 0.5
  done
  say "$name: the server did not get ready ($out/$name.log)"; status=1
  kill "$srv_pid" 2>/dev/null; wait "$srv_pid" 2>/dev/null
  return 1
}

do_serve() {
  local levels=${1:-1,64} reps=${2:-1} model=${3:-bf16.gguf}
  [ -n "$tok" ] || say "serve: no --tokenizer dir; memra-serve streams text, so bf16.gguf needs one"
  make_models
  local url=http://127.0.0.1:$port srv
  serve_start serve "$device" "$port" "$model" || return
  srv=$srv_pid
  stamp "serve: memra-bench --server $url -c $levels -n 128 -p 512 -r $reps"
  timeout "$limit" memra-bench --server "$url" -c "$levels" -n 128 -p 512 -r "$reps" --json \
      >"$out/bench-server.json" 2>"$out/bench-server.err" || { status=1; say "  server bench failed"; }
  summarize "$out/bench-server.json"
  kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null
}

# Replicas (issue 24): one memra-serve on device 0 under C sequences at a time, then one on
# each of devices 0 and 1, each under C (2C in all; a client per replica stands in for the
# load balancer, which the GPU machine may not have), the same 512-token prompts and 128 tokens.
do_replicas() {
  local c=${1:-64} reps=${2:-1} model=${3:-bf16.gguf} ngpu a b
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "${ngpu:-0}" -ge 2 ] || { say "replicas: $ngpu GPU(s): the rows need two"; status=1; return; }
  [ -n "$tok" ] || say "replicas: no --tokenizer dir; memra-serve streams text, so bf16.gguf needs one"
  make_models
  serve_start replica-one 0 "$port" "$model" || return
  a=$srv_pid
  stamp "replicas: one replica, memra-bench --server -c $c -n 128 -p 512 -r $reps"
  timeout "$limit" memra-bench --server "http://127.0.0.1:$port" -c "$c" -n 128 -p 512 \
      -r "$reps" --json >"$out/replicas-one.json" 2>"$out/replicas-one.err" || status=1
  summarize "$out/replicas-one.json"
  serve_start replica-two 1 $((port + 1)) "$model" || { kill "$a"; wait "$a"; return; }
  b=$srv_pid
  stamp "replicas: two replicas, memra-bench --server -c $c against each at once"
  timeout "$limit" memra-bench --server "http://127.0.0.1:$port" -c "$c" -n 128 -p 512 \
      -r "$reps" --json >"$out/replicas-two-0.json" 2>"$out/replicas-two-0.err" &
  local pid=$!
  timeout "$limit" memra-bench --server "http://127.0.0.1:$((port + 1))" -c "$c" -n 128 -p 512 \
      -r "$reps" --json >"$out/replicas-two-1.json" 2>"$out/replicas-two-1.err" || status=1
  wait "$pid" || status=1
  summarize "$out/replicas-two-0.json"
  summarize "$out/replicas-two-1.json"
  python3 - "$out/replicas-two-0.json" "$out/replicas-two-1.json" <<'PY' 2>&1 | tee -a "$S"
import json, sys
tot = sum(json.load(open(f))["levels"][-1]["tok_s"] for f in sys.argv[1:])
print("  two replicas together: %.1f tok/s aggregate" % tot)
PY
  kill "$a" "$b" 2>/dev/null; wait "$a" "$b" 2>/dev/null
}

do_profile() {
  local names=${*:-$prof_default} n m a ncu=${NCU:-}
  [ -n "$ncu" ] || ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  [ -x "$ncu" ] || { say "profile: no ncu (set NCU=PATH)"; status=1; return; }
  for n in $names; do prof_spec "$n" >/dev/null || die "profile: no profile '$n'"; done
  make_models
  for n in $names; do
    read -r m a <<<"$(prof_spec "$n")"
    stamp "profile $n: ncu ... memra-bench $m --backend cuda $a --profile-range"
    # shellcheck disable=SC2086 # $a is a list of arguments
    timeout "$limit" "$ncu" --profile-from-start off --clock-control none \
        --metrics gpu__time_duration.sum --csv --print-units base \
        memra-bench "$models/$m" --backend cuda --device "$device" $a --profile-range \
        >"$out/ncu-$n.csv" 2>"$out/ncu-$n.err" || { status=1; say "  ncu rc=$?: $out/ncu-$n.err"; }
    python3 scripts/ncu-steps.py "$out/ncu-$n.csv" --show -1 --top 22 >"$out/prof-$n.txt" 2>&1
    grep -A4 '^forward .* us in' "$out/prof-$n.txt" | tee -a "$S"
  done
}

device_line() {
  say "$(date -u '+%Y-%m-%d %H:%M UTC') $(git -C "$root" rev-parse --short HEAD 2>/dev/null) out=$out"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,driver_version \
      --format=csv,noheader 2>&1 | head -8 | tee -a "$S" || true
}

device_line
case $cmd in
  build) do_build ;;
  test) do_build; do_test "$@" ;;
  models) make_models ;;
  bench) do_build; do_bench "$@" ;;
  ab) do_build; do_ab "$@" ;;
  serve) do_build; do_serve "$@" ;;
  multi) do_build; do_multi "$@" ;;
  replicas) do_build; do_replicas "$@" ;;
  profile) do_build; do_profile "$@" ;;
  references)
    mkdir -p "$out/references"
    stamp "references: scripts/make-references.sh --out $out/references"
    scripts/make-references.sh --out "$out/references" "$@" 2>&1 | tee "$out/references.log" ||
      status=1 ;;
  all) do_build; do_test; do_bench; do_serve; do_profile ;;
  *) die "unknown command '$cmd' (see --help)" ;;
esac
stamp "done: $cmd (status $status); summary in $S"
exit $status
