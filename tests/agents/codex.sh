# Codex (@openai/codex, pinned in tests/agents/package.json) end to end
# against memra-serve on loopback: `codex exec` with a scratch HOME and
# CODEX_HOME whose config.toml defines a custom model provider speaking the
# Responses API (wire_api "responses"), then `codex exec resume` of that
# session, which sends the first turn's items back. memra-tiny writes
# nonsense and seldom stops by itself, so each turn asks for a final answer
# shape (--output-schema: text.format json_schema, held to a grammar) whose
# one valid value is known: the reply is quick, and the model's text can be
# checked in Codex's output. The protocol must be flawless: every request
# the server saw must have been answered 200.
#
#   CODEX_BIN=/path/to/codex bash tests/agents/codex.sh   (default: tests/agents/node_modules/.bin/codex)
cd "$(dirname "$0")/../.." || exit 1
export PATH=$PWD/bin:$PATH
source tests/integration/serve_common.bash
CODEX=${CODEX_BIN:-tests/agents/node_modules/.bin/codex}
if [ ! -x "$CODEX" ]; then
  skip "codex exec" "$CODEX is missing (npm ci in tests/agents, or set CODEX_BIN)"
  exit 0
fi
if [ ! -x bin/memra-serve ]; then
  skip "codex exec" "bin/memra-serve is not built (make)"
  exit 0
fi

start_server codex -m memra-tiny=models/memra-tiny.gguf --ctx 4096 --api-key codex-key -t 2 -v
if [ -z "$URL" ]; then fail "memra-serve starts" "$(tail -3 "$T/codex.log")"; exit 0; fi

H=$T/codex-home
mkdir -p "$H/.codex" "$T/work"
# Codex's own instructions are 17 KB, past what memra-tiny was trained on;
# a short file stands in (model_instructions_file).
echo "You are a coding agent. Answer briefly." >"$H/instructions.md"
cat >"$H/.codex/config.toml" <<TOML
model = "memra-tiny"
model_provider = "memra"
model_instructions_file = "$H/instructions.md"
model_context_window = 4096
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[model_providers.memra]
name = "memra-serve"
base_url = "$URL/v1"
wire_api = "responses"
env_key = "MEMRA_API_KEY"
TOML
cat >"$T/schema.json" <<'JSON'
{"type": "object", "properties": {"greeting": {"type": "string", "enum": ["hello from memra"]}},
 "required": ["greeting"], "additionalProperties": false}
JSON

# codex runs in a session of its own (setsid -w): the signals it sends its
# process group on the way out must not reach the server.
[[ $CODEX = /* ]] || CODEX=$PWD/$CODEX
run_codex() {
  (cd "$T/work" && HOME=$H CODEX_HOME=$H/.codex MEMRA_API_KEY=codex-key NO_COLOR=1 \
    timeout 180 setsid -w "$CODEX" "$@" --skip-git-repo-check \
      --output-schema "$T/schema.json" </dev/null)
}

turn() { # NAME OUTFILE ARGS...
  local name=$1 out=$2; shift 2
  run_codex "$@" -o "$T/$out.last" >"$T/$out.out" 2>"$T/$out.err"
  local rc=$?
  if [ $rc -eq 0 ]; then pass "$name exits 0"
  else fail "$name exits 0" "exit $rc: $(grep -v '^WARN' "$T/$out.err" | tail -5)"; return; fi
  if jq -e '.greeting == "hello from memra"' "$T/$out.last" >/dev/null 2>&1 &&
     grep -q 'hello from memra' "$T/$out.out"; then
    pass "$name prints the model's text"
  else
    fail "$name prints the model's text" "last message: $(head -c 300 "$T/$out.last")"
  fi
}

turn "codex exec" first exec "Say hello"
turn "codex exec resume --last" second exec resume --last "Say hello again"

n_ok=$(grep -ac 'POST /v1/responses -> 200' "$T/codex.log")
bad=$(grep -a 'POST /v1/responses -> ' "$T/codex.log" | grep -v -- '-> 200' | head -3)
if [ -z "$bad" ] && [ "$n_ok" -ge 2 ]; then pass "codex: every /v1/responses request answered 200 ($n_ok)"
else fail "codex: every /v1/responses request answered 200" "$n_ok ok; $bad"; fi
stop_server "$PID" >/dev/null
