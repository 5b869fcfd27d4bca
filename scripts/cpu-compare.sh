#!/usr/bin/env bash
# The CPU backend's speed side by side: memra-bench on the fast path
# (--backend cpu), on the reference (--backend cpu-ref, with --ref), and
# llama.cpp on the same file, one table row per model and measure: prefill
# of P tokens and decode of N tokens after D tokens in the cache (0: an
# empty one), tok/s as the median of R runs after one warm-up (llama-bench:
# its mean of R).
#
#   scripts/cpu-compare.sh [-p P] [-n N] [-d D] [-r R] [-t T] [--ref] [--llama-bench] MODEL.gguf...
#
# llama.cpp is its own llama-bench with --llama-bench (built once into
# build/llama-cpu by scripts/llama-tools.sh from the llama.cpp release that
# node-llama-cpp 3.22.1 pins on npm, its prebuilt CPU libraries); without
# it, node-llama-cpp's binaries through tests/interop/llama-speed.mjs when
# they are installed (node adds a little per token: a cross-check).
#
# A depth needs --llama-bench (node-llama-cpp's path has none).
# Defaults: -p 128 -n 32 -d 0 -r 3, -t the online CPUs. Prints a markdown table
# (and the conditions above it) for docs/PERFORMANCE.md. Run from the
# project root after `make`.
set -euo pipefail
cd "$(dirname "$0")/.."
P=128 N=32 D=0 R=3 T=$(nproc) REF=0 LB=0 models=()
while [ $# -gt 0 ]; do
  case $1 in
    -p) P=$2; shift ;;
    -n) N=$2; shift ;;
    -d) D=$2; shift ;;
    -r) R=$2; shift ;;
    -t) T=$2; shift ;;
    --ref) REF=1 ;;
    --llama-bench) LB=1 ;;
    -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "cpu-compare: unknown option '$1'" >&2; exit 2 ;;
    *) models+=("$1") ;;
  esac
  shift
done
[ ${#models[@]} -gt 0 ] || { echo "cpu-compare: no MODEL given (try --help)" >&2; exit 2; }
[[ $D =~ ^[0-9]+$ ]] || { echo "cpu-compare: -d '$D': not a depth (a whole number of tokens)" >&2; exit 2; }
[ -x bin/memra-bench ] || { echo "cpu-compare: bin/memra-bench is missing (run make)" >&2; exit 1; }
llama=0
if [ $LB = 1 ]; then
  [ -x build/llama-cpu/llama-bench ] || bash scripts/llama-tools.sh build/llama-cpu >/dev/null ||
    { echo "cpu-compare: llama-bench could not be built (scripts/llama-tools.sh)" >&2; exit 1; }
  llama=1
elif command -v node >/dev/null && [ -d tests/interop/node_modules/node-llama-cpp ]; then
  llama=1
fi

memra() { # MODEL BACKEND -> "pp tg"
  bin/memra-bench "$1" --backend "$2" -t "$T" -p "$P" -n "$N" -d "$D" --prefill-depth "$D" -r "$R" --json 2>/dev/null |
    jq -r '[(.rows[] | select(.kind == "prefill") | .tok_s), (.rows[] | select(.kind == "decode") | .tok_s)] | map(. * 100 | round / 100) | join(" ")'
}
theirs() { # MODEL -> "pp tg"
  if [ $LB = 1 ]; then
    build/llama-cpu/llama-bench -m "$1" -p "$P" -n "$N" -d "$D" -r "$R" -t "$T" -o json 2>/dev/null |
      jq -r --argjson p "$P" --argjson n "$N" '[(.[] | select(.n_prompt == $p and .n_gen == 0) | .avg_ts),
        (.[] | select(.n_prompt == 0 and .n_gen == $n) | .avg_ts)] | map(. * 100 | round / 100) | join(" ")'
    return
  fi
  [ "$D" = 0 ] || return 0 # node-llama-cpp's path measures from an empty cache only
  local abs; abs=$(realpath "$1")
  (cd tests/interop && node llama-speed.mjs "$abs" "$P" "$N" "$R" "$T" 2>/dev/null) |
    jq -r '[(.pp_tok_s | sort | .[length / 2 | floor]), (.tg_tok_s | sort | .[length / 2 | floor])] | map(. * 100 | round / 100) | join(" ")'
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $T threads;" \
     "$(date -u +%Y-%m-%d) $(git rev-parse --short HEAD); pp$P and tg$N $([ "$D" = 0 ] && echo "from an empty cache" || echo "after $D tokens"), median of $R;" \
     "llama.cpp: $([ $LB = 1 ] && echo "llama-bench (build 0ad4a86), mean of $R" || echo "node-llama-cpp 3.22.1")"
echo
hdr="| model | measure | memra cpu |"; sep="|---|---|---:|"
[ $REF = 1 ] && { hdr+=" memra cpu-ref |"; sep+="---:|"; }
[ $llama = 1 ] && { hdr+=" llama.cpp | cpu / llama.cpp |"; sep+="---:|---:|"; }
echo "$hdr"; echo "$sep"
for m in "${models[@]}"; do
  read -r fpp ftg <<<"$(memra "$m" cpu)"
  rpp='' rtg='' lpp='' ltg=''
  [ $REF = 1 ] && read -r rpp rtg <<<"$(memra "$m" cpu-ref)"
  [ $llama = 1 ] && read -r lpp ltg <<<"$(theirs "$m" || true)"
  for meas in pp tg; do
    if [ $meas = pp ]; then f=$fpp r=$rpp l=$lpp label="prefill $P"; else f=$ftg r=$rtg l=$ltg label="decode $N"; fi
    [ "$D" = 0 ] || label+=" @ d$D"
    row="| $(basename "$m") | $label | $f |"
    [ $REF = 1 ] && row+=" $r |"
    if [ $llama = 1 ]; then
      ratio=$( [ -n "$l" ] && jq -n "$f / $l * 100 | round / 100" || echo -)
      row+=" ${l:--} | $ratio |"
    fi
    echo "$row"
  done
done
