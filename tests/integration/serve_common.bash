# Helpers for the memra-serve integration scripts (serve*.sh): a server on
# a free loopback port (the server binds port 0 and prints the address),
# stopped when the script exits; curl with a time bound on every call.
source tests/integration/lib.bash
STORIES=$DATA/models/stories260K.gguf
SERVE_PIDS=()

serve_cleanup() {
  local p
  for p in "${SERVE_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
}
trap serve_cleanup EXIT

# make_qwen_tiny: QWEN, a tiny-qwen3 GGUF of random weights (seed 5) with
# Qwen3's real tokenizer, vocabulary and chat template, which several
# serve tests share; returns memra-convert's status (its output in
# $T/qwen3-tiny.log).
make_qwen_tiny() {
  local tokdir
  tokdir=$(bash scripts/fetch-tokenizers.sh 2>/dev/null)/qwen3
  jq '.vocab_size = 151936 | .bos_token_id = 151643 | .eos_token_id = 151645' \
    tests/fixtures/configs/tiny-qwen3.json >"$T/qwen3-vocab.json"
  QWEN=$T/qwen3-tiny.gguf
  memra-convert --random "$T/qwen3-vocab.json" --tokenizer "$tokdir" --seed 5 "$QWEN" \
    >"$T/qwen3-tiny.log" 2>&1
}

# start_server NAME ARGS...: sets PID and URL (empty when it did not come up).
start_server() {
  local name=$1; shift
  local log=$T/$name.log
  PID='' URL=''
  memra-serve --port 0 "$@" 2>"$log" &
  PID=$!
  SERVE_PIDS+=("$PID")
  local i
  for i in $(seq 200); do
    grep -q '^memra-serve: ready' "$log" 2>/dev/null && break
    kill -0 "$PID" 2>/dev/null || break
    sleep 0.05
  done
  URL=$(grep -o 'http://[^ ]*' "$log" | head -1)
  grep -q '^memra-serve: ready' "$log" || { echo "  server $name did not start: $(tail -3 "$log")" >&2; URL=''; }
}

# stop_server PID [SECONDS]: SIGTERM, wait; returns the exit status (124 on timeout).
stop_server() {
  local pid=$1 secs=${2:-10} i
  kill -TERM "$pid" 2>/dev/null
  for i in $(seq $((secs * 20))); do
    kill -0 "$pid" 2>/dev/null || { wait "$pid"; return $?; }
    sleep 0.05
  done
  kill -KILL "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
  return 124
}

# Time-bounded curl (10 s unless C_MAX is set).
c() { curl -sS -m "${C_MAX:-10}" "$@"; }
# post PATH JSON [curl args]: body on stdout.
post() { local p=$1 d=$2; shift 2; c "$URL$p" -H 'Content-Type: application/json' -d "$d" "$@"; }
# status METHOD PATH [curl args]: the HTTP status alone.
status() { local m=$1 p=$2; shift 2; c -o /dev/null -w '%{http_code}' -X "$m" "$URL$p" "$@"; }
# The concatenated text of an SSE stream (chat deltas or completion text).
sse_text() { sed -n 's/^data: //p' | grep -v '^\[DONE\]$' | jq -j 'select(.choices | length > 0) | .choices[0] | (.delta.content // .text // "")'; }
export -f sse_text

# concurrent_like_gen MODEL [memra-gen flags]: four greedy completions sent
# to model "m" at $URL at once (their decode steps batched), each checked
# against memra-gen MODEL with those flags alone; returns 0 when all four
# match.
concurrent_like_gen() {
  local model=$1 i ok=0 want
  shift
  local prompts=("Once upon a time" "The little dog" "Lily and Tom went" "One day the sun") curls=()
  for i in 0 1 2 3; do
    curl -sS -m 30 "$URL/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"model\":\"m\",\"prompt\":\"${prompts[$i]}\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true}" \
      >"$T/concurrent-$i.json" &
    curls+=($!)
  done
  wait "${curls[@]}" # not the server, also a child of this shell
  for i in 0 1 2 3; do
    want=$(memra-gen "$model" -p "${prompts[$i]}" -n 40 --temp 0 --ignore-eos -t 2 "$@" 2>/dev/null)
    [ -n "$want" ] && [ "$(jq -r '.choices[0].text' "$T/concurrent-$i.json")" = "$want" ] || ok=1
  done
  return $ok
}
