#!/usr/bin/env bash
# Measures every quantization type and mix preset of one model against its
# f32 original (memra-parity --against), with and without an importance
# matrix collected on a calibration text, and prints one JSON object a row
# (docs/quality-table.md is made from them; docs/QUALITY.md says what the
# numbers mean).
#
#   scripts/quality-table.sh MODEL EVAL_TEXT CALIB_TEXT WORKDIR [CALIB_CHUNKS] [EVAL_CHUNKS]
#
# MODEL is widened to f32 (the reference and the quantizers' source); the
# imatrix is collected over the first CALIB_CHUNKS (default 64) chunks of
# 512 tokens of CALIB_TEXT, which should not be EVAL_TEXT; EVAL_CHUNKS (0,
# the default: all) limits the windows of EVAL_TEXT. K-quant types whose
# rows do not split into 256-value blocks (memra-tiny's FFN down, 384 wide)
# keep those rows in Q8_0 (--keep), as the mix presets do. Work files and
# per-row JSON stay in WORKDIR; a row already measured there is reused.
# Env: BIN (programs, default bin), JOBS (comparisons at once, default
# nproc), THREADS (per comparison, default 1).
set -euo pipefail
[ $# -ge 4 ] || { echo "usage: $0 MODEL EVAL_TEXT CALIB_TEXT WORKDIR [CALIB_CHUNKS] [EVAL_CHUNKS]" >&2; exit 2; }
model=$1 eval_text=$2 calib=$3 work=$4 cchunks=${5:-64} echunks=${6:-0}
BIN=${BIN:-bin} JOBS=${JOBS:-$(nproc)} THREADS=${THREADS:-1}
mkdir -p "$work/rows"
ref=$work/ref-f32.gguf
[ -f "$ref" ] || "$BIN/memra-convert" "$model" --outtype f32 "$ref" 2>/dev/null
imx=$work/calib.imatrix
[ -f "$imx" ] || "$BIN/memra-parity" "$ref" --imatrix "$imx" -f "$calib" --chunks "$cchunks" \
  --json -t "$(nproc)" >"$work/imatrix.json"

# name|file|how: the float rows, then each type without and with the imatrix
rows=("bf16 (original)|$model|-" "f16|$work/f16.gguf|-")
[ -f "$work/f16.gguf" ] || "$BIN/memra-convert" "$model" --outtype f16 "$work/f16.gguf" 2>/dev/null
for t in Q8_0 Q6_K Q5_K Q4_K Q4_0 NVFP4 MXFP8 Q6_K_M Q5_K_M Q4_K_M; do
  keep=()
  case $t in Q6_K | Q5_K | Q4_K) keep=(--keep 'ffn_down\.weight$=Q8_0') ;; esac
  for im in no yes; do
    f=$work/$t-$im.gguf
    extra=()
    [ "$im" = yes ] && extra=(--imatrix "$imx")
    [ -f "$f" ] || "$BIN/memra-quantize" "$ref" "$f" "$t" "${keep[@]}" "${extra[@]}" \
      -t "$(nproc)" 2>/dev/null
    rows+=("$t|$f|$im")
  done
done

measure() { # name|file|imatrix -> rows/<n>.json
  local name=${1%%|*} rest=${1#*|}
  local file=${rest%%|*} im=${rest#*|}
  local row=$work/rows/$(basename "$file" .gguf)-$im.json
  [ -s "$row" ] && return 0
  local census against
  census=$("$BIN/memra-census" "$file" --json |
    jq -c '{bytes: .totals.bytes, elements: ([.tensors[] | .shape | reduce .[] as $d (1; . * $d)] | add)}')
  local lim=()
  [ "$echunks" -gt 0 ] && lim=(--chunks "$echunks")
  # a model the backend cannot run is a row that says why
  if ! against=$("$BIN/memra-parity" "$file" --against "$ref" -f "$eval_text" "${lim[@]}" \
    --json -t "$THREADS" 2>"$row.err"); then
    against=$(jq -n -c --arg e "$(head -1 "$row.err")" '{error: $e}')
  fi
  jq -n -c --arg name "$name" --arg im "$im" --argjson c "$census" --argjson a "$against" \
    --arg file "$(basename "$file")" --argjson size "$(stat -c %s "$file")" \
    '{type: $name, imatrix: $im, file: $file, file_bytes: $size, tensor_bytes: $c.bytes,
      bpw: ($c.bytes * 8 / $c.elements)} + $a' >"$row.tmp"
  mv "$row.tmp" "$row"
}
export -f measure
export BIN THREADS ref eval_text echunks work
printf '%s\n' "${rows[@]}" | xargs -P "$JOBS" -I{} bash -c 'measure "$1"' _ {}
for r in "${rows[@]}"; do
  rest=${r#*|}
  f=${rest%%|*} im=${rest#*|}
  cat "$work/rows/$(basename "$f" .gguf)-$im.json"
done
