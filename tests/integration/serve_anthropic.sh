# memra-serve's Anthropic Messages API: the official Anthropic SDK in both
# majors (tests/interop/anthropic-client.mjs, pinned in package.json) on
# memra-tiny and on a random-weight model carrying the real Qwen3 tokenizer
# and template; then the raw wire, with curl: the SSE event sequence, ping
# keep-alives, errors, HEAD /, count_tokens, the fields Claude Code sends.
source tests/integration/serve_common.bash
make_qwen_tiny

start_server anthropic -m tiny=models/memra-tiny.gguf -m "qwen=$QWEN" --api-key ak -t 1
if [ -z "$URL" ]; then fail "server starts" "$(tail -3 "$T/anthropic.log")"; exit 0; fi

for sdk in anthropic-sdk-0 anthropic-sdk-1; do
  if ! command -v node >/dev/null; then skip "$sdk" "no node"; continue; fi
  if [ ! -d "tests/interop/node_modules/$sdk" ]; then
    skip "$sdk" "tests/interop/node_modules/$sdk missing (scripts/deps.sh installs it)"; continue
  fi
  (cd tests/interop && timeout 120 node anthropic-client.mjs "$sdk" "$URL" ak)
  rc=$?
  [ $rc -eq 0 ] && pass "$sdk script exits 0" || fail "$sdk script exits 0" "exit $rc"
done

H=(-H 'x-api-key: ak' -H 'anthropic-version: 2023-06-01')
# am PATH BODY [curl args]: an Anthropic request with the key.
am() { local p=$1 d=$2; shift 2; post "$p" "$d" -H 'x-api-key: ak' -H 'anthropic-version: 2023-06-01' "$@"; }
msg() { am "/v1/messages${2:-}" "$1"; }
# the checks below run some of these in bash -c
export -f c post status am
export URL

# The event sequence of a streamed text reply, in order.
msg '{"model":"tiny","max_tokens":6,"temperature":0,"stream":true,"messages":[{"role":"user","content":"hi"}]}' \
  >"$T/sse.txt"
sed -n 's/^event: //p' "$T/sse.txt" | uniq >"$T/events"
printf '%s\n' message_start content_block_start content_block_delta content_block_stop \
  message_delta message_stop >"$T/want-events"
check "SSE: the event sequence" diff "$T/want-events" "$T/events"
check "SSE: each data line's type is its event name" bash -c \
  "paste -d' ' <(sed -n 's/^event: //p' '$T/sse.txt') <(sed -n 's/^data: //p' '$T/sse.txt' | jq -r .type) | awk '\$1 != \$2 {exit 1}'"
check "SSE: message_delta has stop_reason and cumulative usage" bash -c \
  "sed -n 's/^data: //p' '$T/sse.txt' | jq -s -e 'map(select(.type == \"message_delta\"))[0] | .delta.stop_reason == \"max_tokens\" and .usage.output_tokens == 6 and .usage.input_tokens > 0'"
check "SSE: message_start carries an empty msg_ message" bash -c \
  "sed -n 's/^data: //p' '$T/sse.txt' | jq -s -e 'map(select(.type == \"message_start\"))[0] | .message | (.id | startswith(\"msg_\")) and .content == [] and .stop_reason == null'"
check "SSE: text deltas join to the blocking reply at temperature 0" bash -c "
  a=\$(am /v1/messages '{\"model\":\"tiny\",\"max_tokens\":10,\"temperature\":0,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'  | jq -r '.content[0].text')
  b=\$(am /v1/messages '{\"model\":\"tiny\",\"max_tokens\":10,\"temperature\":0,\"stream\":true,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'  | sed -n 's/^data: //p' | jq -j 'select(.type == \"content_block_delta\") | .delta.text')
  [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"

# A streamed forced call: tool_use start with an empty input, input_json_delta
# pieces that join to the arguments, stop_reason tool_use.
TOOLS='[{"name":"get_weather","input_schema":{"type":"object","properties":{"city":{"type":"string","maxLength":12}},"required":["city"],"additionalProperties":false}}]'
msg '{"model":"tiny","max_tokens":200,"temperature":0,"stream":true,"tools":'"$TOOLS"',"tool_choice":{"type":"tool","name":"get_weather","disable_parallel_tool_use":true},"messages":[{"role":"user","content":"weather?"}]}' \
  >"$T/sse-tool.txt"
check "SSE: tool_use block, input_json_delta, stop_reason tool_use" bash -c "
  sed -n 's/^data: //p' '$T/sse-tool.txt' | jq -s -e '
    (map(select(.type == \"content_block_start\" and .content_block.type == \"tool_use\")) | length == 1) and
    (map(select(.type == \"content_block_start\") | .content_block | select(.type == \"tool_use\") | (.id | startswith(\"toolu_\")) and .input == {} and .name == \"get_weather\") | all) and
    ([.[] | select(.type == \"content_block_delta\" and .delta.type == \"input_json_delta\") | .delta.partial_json] | join(\"\") | fromjson | (.city | type) == \"string\") and
    (map(select(.type == \"message_delta\"))[0].delta.stop_reason == \"tool_use\")'"

# A forced call that max_tokens cuts before it closes is markup, not text:
# the reply holds no text block (blocking or streamed), stop_reason max_tokens.
CUT='{"model":"tiny","max_tokens":30,"temperature":0,"tools":'"$TOOLS"',"tool_choice":{"type":"any"},"messages":[{"role":"user","content":"weather?"}]}'
check "a forced call cut by max_tokens leaves no markup in text" bash -c "
  am /v1/messages '$CUT' | jq -e '.stop_reason == \"max_tokens\" and ([.content[] | select(.type == \"text\")] == [])' &&
  am /v1/messages '$(jq -c '. + {stream: true}' <<<"$CUT")' | sed -n 's/^data: //p' | jq -s -e '[.[] | select(.type == \"content_block_start\" and .content_block.type == \"text\")] == []'"

# Ping keep-alives while the prompt is prefilled: a long prompt on one thread.
long=$(python3 -c 'print(" ".join(["whale"] * 3000))' 2>/dev/null || printf 'whale %.0s' $(seq 3000))
start_server slow -m "qwen=$QWEN" --api-key ak -t 1 -c 4096 --prefill-chunk 64
export URL
if [ -n "$URL" ]; then
  jq -n --arg c "$long" '{model:"qwen",max_tokens:2,stream:true,messages:[{role:"user",content:$c}]}' >"$T/long.json"
  C_MAX=120 c "$URL/v1/messages" "${H[@]}" -H 'Content-Type: application/json' -d @"$T/long.json" >"$T/sse-long.txt"
  if grep -q '^event: ping$' "$T/sse-long.txt"; then
    check "SSE: ping is event: ping with a ping data line" bash -c \
      "grep -A1 '^event: ping$' '$T/sse-long.txt' | sed -n 's/^data: //p' | jq -e -s 'length > 0 and all(.type == \"ping\")'"
  else
    skip "SSE: ping keep-alives" "the prefill finished before the first keep-alive was due"
  fi
  check "SSE: the long stream still ends with message_stop" bash -c "sed -n 's/^event: //p' '$T/sse-long.txt' | tail -1 | grep -qx message_stop"
  stop_server "$PID" >/dev/null
fi
start_server anthropic2 -m tiny=models/memra-tiny.gguf -m "qwen=$QWEN" --api-key ak -t 1
export URL

# Errors in Anthropic's shape, with their statuses.
err_is() { # NAME STATUS TYPE BODY [curl args]
  local name=$1 st=$2 ty=$3 body=$4; shift 4
  local out code
  out=$(c -w '\n%{http_code}' "$URL/v1/messages" -H 'Content-Type: application/json' -d "$body" "$@")
  code=$(tail -1 <<<"$out")
  if [ "$code" = "$st" ] && head -n -1 <<<"$out" | jq -e --arg t "$ty" '.type == "error" and .error.type == $t and (.error.message | length > 0)' >/dev/null; then
    pass "$name"
  else fail "$name" "got $code $(head -c 300 <<<"$out")"; fi
}
err_is "error: missing max_tokens is 400 invalid_request_error" 400 invalid_request_error \
  '{"model":"tiny","messages":[{"role":"user","content":"hi"}]}' "${H[@]}"
err_is "error: wrong key is 401 authentication_error" 401 authentication_error \
  '{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}' -H 'x-api-key: nope'
err_is "error: Bearer with a wrong key is 401 too" 401 authentication_error \
  '{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}' -H 'Authorization: Bearer nope'
err_is "error: unknown model is 404 not_found_error" 404 not_found_error \
  '{"model":"nope","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}' "${H[@]}"
err_is "error: an image block is refused by name" 400 invalid_request_error \
  '{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AA=="}}]}]}' "${H[@]}"
err_is "error: a server tool type is refused" 400 invalid_request_error \
  '{"model":"tiny","max_tokens":4,"tools":[{"type":"web_search_20250305","name":"web_search"}],"messages":[{"role":"user","content":"hi"}]}' "${H[@]}"
err_is "error: an unknown key in a system-role message is refused" 400 invalid_request_error \
  '{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hi"},{"role":"system","content":"x","name":"env"}]}' "${H[@]}"
err_is "error: a final assistant message (prefill) is refused" 400 invalid_request_error \
  '{"model":"tiny","max_tokens":4,"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"{"}]}' "${H[@]}"
check "error: invalid JSON is 400 in Anthropic's shape" bash -c \
  "am /v1/messages '{'  | jq -e '.type == \"error\" and .error.type == \"invalid_request_error\"'"

check "HEAD / answers 200" bash -c "[ \"\$(status HEAD /)\" = 200 ]"
check "request-id header on /v1/messages" bash -c \
  "c -D - -o /dev/null '$URL/v1/messages' -H 'Content-Type: application/json'  -d '{\"model\":\"tiny\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' | grep -qi '^request-id: req'"
check "?beta=true and anthropic-beta are accepted" bash -c \
  "am '/v1/messages?beta=true' '{\"model\":\"tiny\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'  -H 'anthropic-beta: claude-code-20250219,interleaved-thinking-2025-05-14' | jq -e '.type == \"message\"'"
check "max_tokens 32000 is clamped to the context" bash -c \
  "am /v1/messages '{\"model\":\"tiny\",\"max_tokens\":32000,\"stop_sequences\":[\"e\"],\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'  | jq -e '.type == \"message\"'"

# count_tokens equals what a create reports, system, tools and all.
CT='{"model":"qwen","system":[{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],"tools":'"$TOOLS"',"messages":[{"role":"user","content":"weather in Oslo?"}]}'
n1=$(am /v1/messages/count_tokens "$CT" "${H[@]}" | jq .input_tokens)
n2=$(am /v1/messages "$(jq '. + {max_tokens: 1}' <<<"$CT")" "${H[@]}" | jq '.usage.input_tokens + .usage.cache_read_input_tokens')
if [ -n "$n1" ] && [ "$n1" != null ] && [ "$n1" = "$n2" ]; then pass "count_tokens = usage.input_tokens ($n1)"
else fail "count_tokens = usage.input_tokens" "count_tokens $n1, create $n2"; fi

# Thinking passed back: the Qwen3 template renders an assistant turn's
# reasoning after the last user query (a tool loop), so the prompt grows by
# the thought; redacted_thinking is accepted and shows nothing.
TU='{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{"city":"Oslo"}}'
TR='{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01","content":"rain"}]}'
plain='{"model":"qwen","tools":'"$TOOLS"',"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":['"$TU"']},'"$TR"']}'
thought='{"model":"qwen","tools":'"$TOOLS"',"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":[{"type":"thinking","thinking":"Oslo is the city the user means.","signature":"x"},{"type":"redacted_thinking","data":"abc"},'"$TU"']},'"$TR"']}'
a=$(am /v1/messages/count_tokens "$plain" "${H[@]}" | jq .input_tokens)
b=$(am /v1/messages/count_tokens "$thought" "${H[@]}" | jq .input_tokens)
want=$(post /tokenize '{"model":"qwen","prompt":"<think>\nOslo is the city the user means.\n</think>\n\n"}' "${H[@]}" | jq '.tokens | length')
if [ -n "$a" ] && [ -n "$b" ] && [ "$a" != null ] && [ $((b - a)) -eq "$want" ]; then
  pass "thinking block reaches the Qwen3 template (+$want tokens)"
else fail "thinking block reaches the Qwen3 template" "without $a, with $b, the think block alone $want"; fi
check "thinking passed back: the request succeeds" bash -c \
  "am /v1/messages '$(jq -c '. + {max_tokens: 2, thinking: {type: "enabled", budget_tokens: 1024}}' <<<"$thought")'  | jq -e '.type == \"message\"'"

# Thinking blocks out: memra-tiny under a template whose generation prompt
# opens "<think>" (as Qwen3's does when it thinks) replies inside the
# reasoning, which memra-tiny never closes: one thinking block, streamed as
# thinking_delta pieces and a signature_delta, equal to the blocking one.
stop_server "$PID" >/dev/null
printf '%s\n' '{%- for message in messages %}<|im_start|>{{ message.role }}' \
  '{{ message.content }}<|im_end|>' \
  '{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant' '<think>' '{% endif %}' \
  >"$T/think.jinja"
start_server think -m tiny=models/memra-tiny.gguf --chat-template "$T/think.jinja" --api-key ak -t 1
export URL
TH='{"model":"tiny","max_tokens":8,"temperature":0,"messages":[{"role":"user","content":"hi"}]}'
am /v1/messages "$TH" >"$T/think.json"
am /v1/messages "$(jq -c '. + {stream: true}' <<<"$TH")" | sed -n 's/^data: //p' >"$T/think.sse"
check "thinking: the blocking reply is one thinking block" \
  jq -e '[.content[].type] == ["thinking"] and (.content[0].thinking | length > 0) and .content[0].signature == "" and .stop_reason == "max_tokens"' "$T/think.json"
check "thinking: streamed as thinking_delta then signature_delta, equal to the blocking text" bash -c "
  jq -s -e --slurpfile b '$T/think.json' '
    (map(select(.type == \"content_block_start\"))[0].content_block == {type: \"thinking\", thinking: \"\", signature: \"\"}) and
    ([.[] | select(.type == \"content_block_delta\") | .delta.type] | (.[-1] == \"signature_delta\") and (.[:-1] | all(. == \"thinking_delta\"))) and
    ([.[] | select(.type == \"content_block_delta\" and .delta.type == \"thinking_delta\") | .delta.thinking] | join(\"\")) == \$b[0].content[0].thinking' '$T/think.sse'"
stop_server "$PID" >/dev/null
start_server anthropic3 -m tiny=models/memra-tiny.gguf -m "qwen=$QWEN" --api-key ak -t 1
export URL

# What Claude Code 2.1 sends beside the basics: a system-role message inside
# messages, tools with defer_loading, thinking.display, output_config.effort,
# context_management, metadata.user_id.
CC='{"model":"tiny","max_tokens":32000,"stream":true,"stop_sequences":["e"],
 "system":[{"type":"text","text":"You are Claude Code.","cache_control":null},{"type":"text","text":"Be brief.","cache_control":{"type":"ephemeral"}}],
 "messages":[{"role":"user","content":[{"type":"text","text":"<system-reminder>x</system-reminder>"},{"type":"text","text":"say hi"}]},
             {"role":"system","content":[{"type":"text","text":"# Environment","cache_control":{"type":"ephemeral"}}]}],
 "tools":[{"name":"Read","description":"read a file","input_schema":{"type":"object","properties":{"path":{"type":"string"}}}},
          {"name":"Later","description":"found by search","input_schema":{"type":"object"},"defer_loading":true,"eager_input_streaming":true}],
 "thinking":{"type":"adaptive","display":"omitted"},"output_config":{"effort":"xhigh"},
 "context_management":{"edits":[{"type":"clear_thinking_20251015","keep":"all"}]},
 "metadata":{"user_id":"{\"device_id\":\"d\"}"}}'
check "Claude Code's request shape is accepted and streamed" bash -c \
  "am '/v1/messages?beta=true' '$CC'  | sed -n 's/^event: //p' | tail -1 | grep -qx message_stop"
check "count_tokens takes Claude Code's shape too" bash -c \
  "am /v1/messages/count_tokens '$(jq -c 'del(.max_tokens, .stream, .stop_sequences, .metadata)' <<<"$CC")'  | jq -e '.input_tokens > 0'"
DEFER=$(jq -c '.tools |= map(. + {defer_loading: true}) | .tool_choice = {type: "auto"} | .stream = false' <<<"$CC")
check "every tool deferred with tool_choice auto: answered (nothing to choose among)" bash -c \
  "am /v1/messages '$DEFER' | jq -e '.type == \"message\"'"
stop_server "$PID" >/dev/null
