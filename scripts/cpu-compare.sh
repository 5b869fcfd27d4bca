#!/usr/bin/env bash
# The CPU backend's speed side by side: memra-bench on the fast path
# (--backend cpu), on the reference (--backend cpu-ref, with --ref), and
# llama.cpp on the same file (node-llama-cpp's prebuilt CPU binaries,
# tests/interop/llama-speed.mjs, when they are installed), one table row per
# model and measure: prefill of P tokens and decode of N tokens from an
# empty cache, tok/s as the median of R runs after one warm-up.
#
#   scripts/cpu-compare.sh [-p P] [-n N] [-r R] [-t T] [--ref] MODEL.gguf...
#
# Defaults: -p 128 -n 32 -r 3, -t the online CPUs. Prints a markdown table
# (and the conditions above it) for docs/PERFORMANCE.md. Run from the
# project root after `make`. The llama.cpp figures go through node (a small
# per-token overhead): a cross-check, not llama-bench.
set -euo pipefail
cd "$(dirname "$0")/.."
P=128 N=32 R=3 T=$(nproc) REF=0 models=()
while [ $# -gt 0 ]; do
  case $1 in
    -p) P=$2; shift ;;
    -n) N=$2; shift ;;
    -r) R=$2; shift ;;
    -t) T=$2; shift ;;
    --ref) REF=1 ;;
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "cpu-compare: unknown option '$1'" >&2; exit 2 ;;
    *) models+=("$1") ;;
  esac
  shift
done
[ ${#models[@]} -gt 0 ] || { echo "cpu-compare: no MODEL given (try --help)" >&2; exit 2; }
[ -x bin/memra-bench ] || { echo "cpu-compare: bin/memra-bench is missing (run make)" >&2; exit 1; }
llama=0
if command -v node >/dev/null && [ -d tests/interop/node_modules/node-llama-cpp ]; then llama=1; fi

memra() { # MODEL BACKEND -> "pp tg"
  bin/memra-bench "$1" --backend "$2" -t "$T" -p "$P" -n "$N" -d 0 -r "$R" --json 2>/dev/null |
    jq -r '[(.rows[] | select(.kind == "prefill") | .tok_s), (.rows[] | select(.kind == "decode") | .tok_s)] | map(. * 100 | round / 100) | join(" ")'
}
theirs() { # MODEL -> "pp tg"
  local abs; abs=$(realpath "$1")
  (cd tests/interop && node llama-speed.mjs "$abs" "$P" "$N" "$R" "$T" 2>/dev/null) |
    jq -r '[(.pp_tok_s | sort | .[length / 2 | floor]), (.tg_tok_s | sort | .[length / 2 | floor])] | map(. * 100 | round / 100) | join(" ")'
}

echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $T threads;" \
     "$(date -u +%Y-%m-%d) $(git rev-parse --short HEAD); pp$P and tg$N from an empty cache, median of $R"
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
    row="| $(basename "$m") | $label | $f |"
    [ $REF = 1 ] && row+=" $r |"
    if [ $llama = 1 ]; then
      ratio=$( [ -n "$l" ] && jq -n "$f / $l * 100 | round / 100" || echo -)
      row+=" ${l:--} | $ratio |"
    fi
    echo "$row"
  done
done
