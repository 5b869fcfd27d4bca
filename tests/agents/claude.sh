# Claude Code (@anthropic-ai/claude-code, pinned in package.json) against
# memra-serve's Anthropic Messages API on loopback: `claude -p` must exit 0
# with the model's own text as its output, and every request it sends must
# be answered 200. A capture proxy between the two (capture-proxy.mjs)
# keeps what passed, so the text is compared with what the server streamed.
#
# The model is memra-tiny with its end-of-text row made the full stop's
# (tiny-eos.py says why): memra-tiny itself never ends a turn, and Claude
# Code reads a reply cut at max_tokens as an error. The random-weight Qwen3
# model (real tokenizer and template) never ends a turn either; on it the
# check is the protocol alone: every request answered 200 and streamed to
# message_stop, Claude Code's resumes after max_tokens included.
source tests/integration/serve_common.bash
CLAUDE=tests/agents/node_modules/@anthropic-ai/claude-code-linux-x64/claude
if [ ! -x "$CLAUDE" ]; then skip "claude" "not installed (tests/agents/run.sh installs it)"; exit 0; fi
if ! command -v python3 >/dev/null; then skip "claude" "no python3 to make the turn-ending memra-tiny"; exit 0; fi
"$CLAUDE" --version >"$T/claude-version" 2>&1 || { fail "claude --version" "$(head -c 300 "$T/claude-version")"; exit 0; }

memra-convert models/memra-tiny.gguf "$T/tiny-hf" >/dev/null 2>&1 &&
  env -u SHELLOPTS python3 tests/agents/tiny-eos.py "$T/tiny-hf" &&
  memra-convert "$T/tiny-hf" "$T/tiny-eos.gguf" >/dev/null 2>&1 ||
  { fail "turn-ending memra-tiny made" "memra-convert or tiny-eos.py failed"; exit 0; }
TOKDIR=$(bash scripts/fetch-tokenizers.sh 2>/dev/null)/qwen3
jq '.vocab_size = 151936 | .bos_token_id = 151643 | .eos_token_id = 151645' \
  tests/fixtures/configs/tiny-qwen3.json >"$T/qwen3-vocab.json"
memra-convert --random "$T/qwen3-vocab.json" --tokenizer "$TOKDIR" --seed 5 "$T/qwen3.gguf" >/dev/null 2>&1

start_server claude -m "memra-tiny=$T/tiny-eos.gguf" -m "qwen=$T/qwen3.gguf" -c 4096 \
  --api-key agent-key -t 2
[ -n "$URL" ] || { fail "memra-serve starts" "$(tail -3 "$T/claude.log")"; exit 0; }
mkdir -p "$T/cap"
node tests/agents/capture-proxy.mjs "$URL" "$T/cap" >"$T/proxy.out" 2>&1 &
SERVE_PIDS+=($!)
for i in $(seq 100); do grep -q '^listening' "$T/proxy.out" && break; sleep 0.05; done
PROXY=http://127.0.0.1:$(awk '/^listening/ {print $2}' "$T/proxy.out")

# claude_run MODEL ARGS...: runs `claude -p` in a scratch HOME with nothing
# reaching beyond loopback; stdout in $T/claude.out, exit status in RC.
# Claude Code's default system prompt and tool list come to some 6,000
# tokens, which memra-tiny prefills in about a minute on two CPU threads;
# --bare with a one-line system prompt keeps each request under 200.
claude_run() {
  local model=$1; shift
  rm -rf "$T/home" "$T/cap"/*; mkdir -p "$T/home" "$T/work"
  (cd "$T/work" && env -i PATH=/usr/bin:/bin HOME="$T/home" \
     ANTHROPIC_BASE_URL="$PROXY" ANTHROPIC_API_KEY=agent-key \
     ANTHROPIC_MODEL="$model" ANTHROPIC_SMALL_FAST_MODEL="$model" \
     ANTHROPIC_DEFAULT_HAIKU_MODEL="$model" ANTHROPIC_DEFAULT_SONNET_MODEL="$model" \
     ANTHROPIC_DEFAULT_OPUS_MODEL="$model" \
     DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
     CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 ${EXTRA_ENV:-} \
     timeout 120 "$root_abs/$CLAUDE" --bare --system-prompt "Be brief." \
       --no-session-persistence "$@") >"$T/claude.out" 2>"$T/claude.err"
  RC=$?
}
root_abs=$(pwd)
# Every request went to /v1/messages (a query string allowed) and was answered 200.
all_200() {
  local n=0 f
  for f in "$T/cap"/*.res.txt; do
    [ -e "$f" ] || return 1
    n=$((n + 1))
    [ "$(head -1 "$f")" = 200 ] || { echo "$(basename "$f"): $(head -c 400 "$f")" >&2; return 1; }
    grep -q '^event: message_stop$' "$f" || { echo "$(basename "$f") has no message_stop" >&2; return 1; }
  done
  for f in "$T/cap"/*.req.json; do
    jq -e '.method == "POST" and (.url | test("^/v1/messages(\\?|$)"))' "$f" >/dev/null ||
      { echo "unexpected request: $(jq -c '{method, url}' "$f")" >&2; return 1; }
  done
  [ $n -gt 0 ]
}
# The text of the last streamed reply, as the server sent it.
last_text() {
  local f
  f=$(ls "$T/cap" | grep 'res.txt$' | sort -n | tail -1)
  sed -n 's/^data: //p' "$T/cap/$f" | jq -j 'select(.type == "content_block_delta" and .delta.type == "text_delta") | .delta.text'
}
text_matches() {
  local want got
  want=$(last_text | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
  got=$(sed 's/^[[:space:]]*//; s/[[:space:]]*$//' "$T/claude.out")
  [ -n "$want" ] && [ "$got" = "$want" ] || { echo "claude printed '$got', the server streamed '$want'" >&2; return 1; }
}

for tools in "" "Read,Glob"; do
  label="claude -p (memra-tiny, tools '${tools:-none}')"
  t0=$(date +%s.%N)
  claude_run memra-tiny --tools "$tools" -p "say hi"
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN {printf "%.1f", b - a}')
  if [ $RC -eq 0 ]; then pass "$label exits 0 (${secs} s)"
  else fail "$label exits 0" "exit $RC: $(head -c 300 "$T/claude.out") $(grep -v unrecognized "$T/claude.err" | head -c 300)"; fi
  check "$label: every request answered 200 to message_stop" all_200
  check "$label: its output is the model's text" text_matches
  if [ -n "$tools" ]; then
    first=$(ls "$T/cap" | grep 'req.json$' | sort -n | head -1)
    check "$label: the tools were sent" bash -c \
      "jq -r .body '$T/cap/$first' | jq -e '[.tools[].name] | index(\"Read\") != null'"
  fi
done

# The random Qwen3 model never ends a turn: Claude Code asks it to resume
# after each max_tokens stop and then gives up (exit 1); what is checked is
# that every one of those requests, the resumes' shape included, was served.
EXTRA_ENV=CLAUDE_CODE_MAX_OUTPUT_TOKENS=16 claude_run qwen --tools "" -p "say hi"
check "claude -p (qwen, never ends a turn): every request answered 200 to message_stop" all_200
check "claude -p (qwen): it resumed after max_tokens" bash -c \
  "[ \$(ls '$T/cap' | grep -c 'req.json\$') -gt 1 ]"
stop_server "$PID" >/dev/null
