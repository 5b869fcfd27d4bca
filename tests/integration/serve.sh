# memra-serve over curl + jq: every endpoint, every error, auth, the
# OpenAI shapes (blocking and SSE), and parity with memra-gen on the same
# models (stories260K for completions, memra-tiny and a random-weight model
# carrying the real Qwen3 tokenizer and chat template for chat).
source tests/integration/serve_common.bash
KEY=sk-test-123
A=(-H "Authorization: Bearer $KEY")

# The Qwen3-tokenizer model: random weights, vocab sized to the tokenizer.
check "random Qwen3-tokenizer model converts" make_qwen_tiny

start_server main -m "tiny=$STORIES" -m chat=models/memra-tiny.gguf -m "qwen=$QWEN" \
  --api-key "$KEY" --max-body 64K -t 1
[ -n "$URL" ] && pass "server starts on a free loopback port" || fail "server starts"

# Health and readiness: public.
check "/health is public and ok" bash -c "[ \"\$(curl -sS -m 5 $URL/health | jq -r .status)\" = ok ]"
check "/readyz 200 when ready" bash -c "[ \"\$(curl -sS -m 5 -o /dev/null -w '%{http_code}' $URL/readyz)\" = 200 ]"

# Auth.
check "no key: 401 invalid_api_key with WWW-Authenticate" bash -c "
  curl -sS -m 5 -D '$T/h' $URL/v1/models | jq -e '.error.code == \"invalid_api_key\" and .error.type == \"invalid_request_error\"' >/dev/null &&
  grep -qi '^HTTP/1.1 401' '$T/h' && grep -qi '^WWW-Authenticate: Bearer' '$T/h'"
check "wrong key: 401" bash -c "[ \"\$(curl -sS -m 5 -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer nope' $URL/v1/models)\" = 401 ]"
check "a key prefix is not the key" bash -c "[ \"\$(curl -sS -m 5 -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer ${KEY%?}' $URL/v1/models)\" = 401 ]"
check "Bearer key accepted" bash -c "[ \"\$(curl -sS -m 5 -o /dev/null -w '%{http_code}' -H 'Authorization: Bearer $KEY' $URL/v1/models)\" = 200 ]"
check "x-api-key accepted" bash -c "[ \"\$(curl -sS -m 5 -o /dev/null -w '%{http_code}' -H 'x-api-key: $KEY' $URL/v1/models)\" = 200 ]"
check "/metrics needs the key" bash -c "[ \"\$(curl -sS -m 5 -o /dev/null -w '%{http_code}' $URL/metrics)\" = 401 ]"

# Models.
check "/v1/models lists every alias with its context length" bash -c "
  curl -sS -m 5 ${A[*]@Q} $URL/v1/models | jq -e '.object == \"list\" and ([.data[].id] == [\"tiny\",\"chat\",\"qwen\"]) and (.data[0].context_length == 2048) and (.data[1].context_length == 512) and (.data[0].supported_parameters | index(\"top_k\")) != null' >/dev/null"
check "/v1/models/{id}" bash -c "curl -sS -m 5 ${A[*]@Q} $URL/v1/models/chat | jq -e '.id == \"chat\" and .object == \"model\"' >/dev/null"
check "/v1/models/{unknown}: 404 model_not_found" bash -c "
  [ \"\$(curl -sS -m 5 -o '$T/o' -w '%{http_code}' ${A[*]@Q} $URL/v1/models/nope)\" = 404 ] && jq -e '.error.code == \"model_not_found\"' '$T/o' >/dev/null"

# Completions: the same bytes as memra-gen.
memra-gen "$STORIES" -p 'Once upon a time' -n 40 --temp 0 --json >"$T/gen.json" 2>/dev/null
post /v1/completions '{"model":"tiny","prompt":"Once upon a time","max_tokens":40,"temperature":0}' "${A[@]}" >"$T/cmpl.json"
check "completion: greedy text equals memra-gen's" \
  bash -c "[ \"\$(jq -r '.choices[0].text' '$T/cmpl.json')\" = \"\$(jq -r .text '$T/gen.json')\" ]"
check "completion: shape and usage" jq -e '.object == "text_completion" and (.id | startswith("cmpl-")) and .model == "tiny" and .choices[0].finish_reason == "length" and .choices[0].index == 0 and (.usage | {prompt_tokens, completion_tokens, total_tokens}) == {"prompt_tokens":5,"completion_tokens":40,"total_tokens":45} and .usage.prompt_tokens_details.cached_tokens == 0' "$T/cmpl.json"
check "completion: token-id prompt" bash -c "
  a=\$(curl -sS -m 10 ${A[*]@Q} $URL/v1/completions -d '{\"model\":\"tiny\",\"prompt\":[1,403,407],\"max_tokens\":3,\"temperature\":0}' | jq -r '.choices[0].text');
  b=\$(memra-gen '$STORIES' --prompt-ids 1,403,407 -n 3 --temp 0 --json | jq -r .text); [ \"\$a\" = \"\$b\" ] && [ -n \"\$a\" ]"
check "completion: an array of one prompt" bash -c "
  curl -sS -m 10 ${A[*]@Q} $URL/v1/completions -d '{\"model\":\"tiny\",\"prompt\":[\"Once upon a time\"],\"max_tokens\":40,\"temperature\":0}' | jq -e --slurpfile w '$T/cmpl.json' '.choices[0].text == \$w[0].choices[0].text' >/dev/null"
check "completion: default max_tokens is 16" bash -c "
  curl -sS -m 10 ${A[*]@Q} $URL/v1/completions -d '{\"model\":\"tiny\",\"prompt\":\"Once\",\"temperature\":0}' | jq -e '.usage.completion_tokens == 16 and .choices[0].finish_reason == \"length\"' >/dev/null"
check "completion: a stop string ends it and is not returned" bash -c "
  curl -sS -m 10 ${A[*]@Q} $URL/v1/completions -d '{\"model\":\"tiny\",\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0,\"stop\":[\"Lily\"]}' | jq -e '.choices[0].finish_reason == \"stop\" and (.choices[0].text | endswith(\"named \"))' >/dev/null"
check "completion: same seed same text, other seed other text" bash -c "
  r() { curl -sS -m 10 ${A[*]@Q} $URL/v1/completions -d \"{\\\"model\\\":\\\"tiny\\\",\\\"prompt\\\":\\\"Once\\\",\\\"max_tokens\\\":30,\\\"temperature\\\":1,\\\"seed\\\":\$1}\" | jq -r '.choices[0].text'; }
  a=\$(r 42); b=\$(r 42); c=\$(r 43); [ \"\$a\" = \"\$b\" ] && [ \"\$a\" != \"\$c\" ]"
check "completion: logit_bias -100 bans a token" bash -c "
  curl -sS -m 10 ${A[*]@Q} $URL/v1/completions -d '{\"model\":\"tiny\",\"prompt\":[1,403,407],\"max_tokens\":1,\"temperature\":0,\"logit_bias\":{\"261\":-100}}' | jq -e '.choices[0].text != \" little\" and .usage.completion_tokens == 1' >/dev/null"
check "completion: ignore_eos runs past the end-of-generation token (forced by logit_bias)" bash -c "
  r() { curl -sS -m 10 ${A[*]@Q} $URL/v1/completions -d \"{\\\"model\\\":\\\"tiny\\\",\\\"prompt\\\":\\\"Once\\\",\\\"max_tokens\\\":12,\\\"logit_bias\\\":{\\\"2\\\":100}\$1}\"; }
  r '' | jq -e '.usage.completion_tokens == 1 and .choices[0].finish_reason == \"stop\"' >/dev/null &&
  r ',\"ignore_eos\":true' | jq -e '.usage.completion_tokens == 12 and .choices[0].finish_reason == \"length\"' >/dev/null &&
  r ',\"ignore_eos\":false' | jq -e '.usage.completion_tokens == 1' >/dev/null"
check "/v1/models: vocab_size, and ignore_eos among the parameters" bash -c "
  curl -sS -m 5 ${A[*]@Q} $URL/v1/models | jq -e '[.data[].vocab_size] == [512, 4096, 151936] and (.data[0].supported_parameters | index(\"ignore_eos\")) != null' >/dev/null"

# Completion streaming.
post /v1/completions '{"model":"tiny","prompt":"Once upon a time","max_tokens":40,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' "${A[@]}" -N -D "$T/sh" >"$T/cmpl.sse"
check "completion stream: text/event-stream" grep -qi '^Content-Type: text/event-stream' "$T/sh"
check "completion stream: chunks add up to the blocking text" \
  bash -c "[ \"\$(sse_text <'$T/cmpl.sse')\" = \"\$(jq -r '.choices[0].text' '$T/cmpl.json')\" ]"
check "completion stream: [DONE] last, usage chunk with choices []" bash -c "
  [ \"\$(grep '^data: ' '$T/cmpl.sse' | tail -1)\" = 'data: [DONE]' ] &&
  grep '^data: {' '$T/cmpl.sse' | tail -1 | sed 's/^data: //' | jq -e '.choices == [] and .usage.completion_tokens == 40 and .usage.prompt_tokens == 5' >/dev/null &&
  grep '^data: {' '$T/cmpl.sse' | tail -2 | head -1 | sed 's/^data: //' | jq -e '.choices[0].finish_reason == \"length\" and .usage == null' >/dev/null"
check "completion stream without include_usage has no usage" bash -c "
  curl -sS -m 10 -N ${A[*]@Q} $URL/v1/completions -d '{\"model\":\"tiny\",\"prompt\":\"Once\",\"max_tokens\":3,\"stream\":true}' | grep '^data: {' | sed 's/^data: //' | jq -s -e 'all(has(\"usage\") | not) and (.[-1].choices[0].finish_reason == \"length\")' >/dev/null"

# Chat: memra-tiny's ChatML template, the same bytes as memra-gen --chat.
post /v1/chat/completions '{"model":"chat","messages":[{"role":"user","content":"Tell me about the whale"}],"max_tokens":24,"temperature":0}' "${A[@]}" >"$T/chat.json"
check "chat: greedy content equals memra-gen --chat" bash -c "
  [ \"\$(jq -r '.choices[0].message.content' '$T/chat.json')\" = \"\$(memra-gen models/memra-tiny.gguf --chat -p 'Tell me about the whale' -n 24 --temp 0 --json | jq -r .text)\" ]"
check "chat: shape and usage" jq -e '.object == "chat.completion" and (.id | startswith("chatcmpl-")) and .choices[0].message.role == "assistant" and .choices[0].finish_reason == "length" and .usage.completion_tokens == 24 and .usage.total_tokens == .usage.prompt_tokens + 24' "$T/chat.json"
post /v1/chat/completions '{"model":"chat","messages":[{"role":"user","content":"Tell me about the whale"}],"max_tokens":24,"temperature":0,"stream":true,"stream_options":{"include_usage":true}}' "${A[@]}" -N >"$T/chat.sse"
check "chat stream: first delta carries the role" bash -c "grep -m1 '^data: {' '$T/chat.sse' | sed 's/^data: //' | jq -e '.object == \"chat.completion.chunk\" and .choices[0].delta.role == \"assistant\"' >/dev/null"
check "chat stream: deltas add up to the blocking content" \
  bash -c "[ \"\$(sse_text <'$T/chat.sse')\" = \"\$(jq -r '.choices[0].message.content' '$T/chat.json')\" ]"
check "chat stream: finish chunk, usage chunk, [DONE]" bash -c "
  grep '^data: ' '$T/chat.sse' | tail -3 | head -2 | sed 's/^data: //' | jq -s -e '.[0].choices[0].finish_reason == \"length\" and .[0].choices[0].delta == {} and .[1].choices == [] and .[1].usage.completion_tokens == 24' >/dev/null &&
  [ \"\$(grep '^data: ' '$T/chat.sse' | tail -1)\" = 'data: [DONE]' ]"
check "chat: the Qwen3 template with chat_template_kwargs" bash -c "
  curl -sS -m 10 ${A[*]@Q} $URL/v1/chat/completions -d '{\"model\":\"qwen\",\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}],\"max_completion_tokens\":5,\"temperature\":0,\"chat_template_kwargs\":{\"enable_thinking\":false},\"user\":\"u1\"}' | jq -e '.usage.completion_tokens <= 5 and .choices[0].message.role == \"assistant\"' >/dev/null"
check "chat: a model without a template is a 400 naming messages" bash -c "
  curl -sS -m 10 ${A[*]@Q} $URL/v1/chat/completions -d '{\"model\":\"tiny\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}' | jq -e '.error.param == \"messages\" and (.error.message | test(\"chat template\"))' >/dev/null"

# Tokenizer and template endpoints, against memra-gen.
check "/tokenize prompt equals memra-gen --tokenize" bash -c "
  a=\$(curl -sS -m 5 ${A[*]@Q} $URL/tokenize -d '{\"model\":\"qwen\",\"prompt\":\"Hello world\"}' | jq -c .tokens); [ \"\$a\" = '[9707,1879]' ]"
check "/tokenize adds BOS where the model does" bash -c "
  curl -sS -m 5 ${A[*]@Q} $URL/tokenize -d '{\"model\":\"tiny\",\"prompt\":\"Once upon a time\"}' | jq -e '.tokens[0] == 1 and .count == 5 and .max_model_len == 2048' >/dev/null"
M='[{"role":"user","content":"hi"}]'
post /apply-template "{\"model\":\"chat\",\"messages\":$M}" "${A[@]}" | jq -j .prompt >"$T/prompt.txt"
check "/tokenize messages equals memra-gen tokenizing /apply-template's prompt" bash -c "
  a=\$(curl -sS -m 5 ${A[*]@Q} $URL/tokenize -d '{\"model\":\"chat\",\"messages\":$M}' | jq -c .tokens)
  b=\$(memra-gen models/memra-tiny.gguf --tokenize --parse-special -f '$T/prompt.txt' --json | jq -c .tokens)
  [ \"\$a\" = \"\$b\" ] && [ \"\$(jq -c '.[0]' <<<\"\$a\")\" = 4094 ]"
check "/apply-template equals memra-gen --render" bash -c "
  r='{\"model\":\"qwen\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"chat_template_kwargs\":{\"enable_thinking\":false}}'
  a=\$(curl -sS -m 5 ${A[*]@Q} $URL/apply-template -d \"\$r\" | jq -r .prompt)
  b=\$(printf '%s' \"\$r\" | memra-gen '$QWEN' --render); [ \"\$a\" = \"\$b\" ] && [[ \"\$a\" == *'<think>'* ]]"
check "/apply-template add_generation_prompt false" bash -c "
  curl -sS -m 5 ${A[*]@Q} $URL/apply-template -d '{\"model\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"add_generation_prompt\":false}' | jq -e '.prompt == \"<|im_start|>user\nhi<|im_end|>\n\"' >/dev/null"
check "/detokenize inverts /tokenize" bash -c "
  curl -sS -m 5 ${A[*]@Q} $URL/detokenize -d '{\"model\":\"qwen\",\"tokens\":[9707,1879]}' | jq -e '.text == \"Hello world\"' >/dev/null"

# Errors: status, OpenAI shape, the field named.
err() { # NAME STATUS JQ PATH BODY [METHOD]
  local name=$1 want=$2 q=$3 path=$4 body=$5 m=${6:-POST} got
  got=$(c -o "$T/e.json" -w '%{http_code}' -X "$m" "${A[@]}" "$URL$path" --data-binary "$body")
  if [ "$got" != "$want" ]; then fail "$name" "status $got, want $want: $(head -c 300 "$T/e.json")"
  elif ! jq -e "(.error | has(\"message\") and has(\"type\") and has(\"param\") and has(\"code\")) and ($q)" "$T/e.json" >/dev/null 2>&1; then
    fail "$name" "body $(head -c 300 "$T/e.json") fails $q"
  else pass "$name"; fi
}
CH=/v1/chat/completions CP=/v1/completions
MSG='"messages":[{"role":"user","content":"hi"}]'
err "malformed JSON: 400" 400 '.error.type == "invalid_request_error" and (.error.message | test("invalid JSON"))' $CH '{"model":"chat",'
err "empty body: 400" 400 '.error.message | test("empty")' $CH ''
err "body not an object: 400" 400 '.error.message | test("object")' $CH '[1,2]'
err "duplicate keys: 400" 400 '.error.message | test("invalid JSON")' $CH '{"model":"chat","model":"chat"}'
err "unknown field: 400 naming it" 400 '.error.param == "frobnicate"' $CH "{\"model\":\"chat\",$MSG,\"frobnicate\":1}"
err "missing model: 400" 400 '.error.param == "model"' $CH "{$MSG}"
err "unknown model: 404 model_not_found" 404 '.error.code == "model_not_found" and .error.param == "model"' $CH "{\"model\":\"gpt-9\",$MSG}"
err "missing messages: 400" 400 '.error.param == "messages"' $CH '{"model":"chat"}'
err "message without role: 400" 400 '.error.param == "messages[0].role"' $CH '{"model":"chat","messages":[{"content":"hi"}]}'
err "image part: 400 naming it" 400 '.error.param == "messages[0].content[0].type"' $CH '{"model":"chat","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"x"}}]}]}'
err "response_format of an unknown type: 400" 400 '.error.param == "response_format.type"' $CH "{\"model\":\"chat\",$MSG,\"response_format\":{\"type\":\"xml\"}}"
# response_format json_schema: the output is held to the schema while it is
# sampled, blocking and streamed (the streamed text equals the blocking one).
RF='"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"n":{"type":"integer","minimum":0,"maximum":99},"s":{"type":"string","maxLength":8}},"required":["n","s"],"additionalProperties":false}}}'
c "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"chat\",$MSG,\"max_tokens\":120,\"temperature\":1,\"seed\":5,$RF}" > "$T/rf.json"
check "response_format json_schema: content parses and validates" jq -e '.choices[0].finish_reason == "stop" and (.choices[0].message.content | fromjson | (keys == ["n","s"]) and (.n >= 0 and .n <= 99 and .n == (.n|floor)) and (.s | length <= 8))' "$T/rf.json"
c -N "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"chat\",$MSG,\"max_tokens\":120,\"temperature\":1,\"seed\":5,\"stream\":true,$RF}" |
  sed -n 's/^data: //p' | grep -v DONE | jq -rj '.choices[0].delta.content // empty' > "$T/rf.txt"
check "response_format json_schema streamed: the same text" bash -c "[ -s '$T/rf.txt' ] && [ \"\$(cat '$T/rf.txt')\" = \"\$(jq -r '.choices[0].message.content' '$T/rf.json')\" ]"
# Tools. Forced calls (tool_choice required or named) are held to a grammar
# of calls with each tool's parameters schema, so memra-tiny, which never
# saw a tool, writes valid ones; "auto" parses the model's own convention
# (Hermes for Qwen3), checked here by forcing a call through `grammar`.
TOOLS='"tools":[{"type":"function","function":{"name":"add","strict":true,"parameters":{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":99},"b":{"type":"integer","minimum":0,"maximum":99}},"required":["a","b"],"additionalProperties":false}}},{"type":"function","function":{"name":"ping","description":"no arguments"}}]'
c "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"chat\",$MSG,$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}},\"max_tokens\":300,\"temperature\":1,\"seed\":3}" >"$T/tc.json"
check "tool_choice named: one call of that tool, arguments valid, content null, finish tool_calls" jq -e '
  .choices[0] as $c | $c.finish_reason == "tool_calls" and $c.message.content == null and
  ($c.message.tool_calls | length == 1) and $c.message.tool_calls[0].type == "function" and
  ($c.message.tool_calls[0].id | test("^call_[A-Za-z0-9]{24}$")) and $c.message.tool_calls[0].function.name == "add" and
  ($c.message.tool_calls[0].function.arguments | fromjson | keys == ["a","b"] and all(.[]; . >= 0 and . <= 99 and . == floor))' "$T/tc.json"
c -N "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"chat\",$MSG,$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"add\"}},\"max_tokens\":300,\"temperature\":1,\"seed\":3,\"stream\":true}" |
  sed -n 's/^data: //p' | grep -v DONE >"$T/tc.sse"
check "tool_choice named streamed: id, type and name in the first delta, the arguments add up to the blocking call" bash -c "
  jq -se '[.[].choices[0].delta.tool_calls // empty | .[]] as \$d | \$d[0].id != null and \$d[0].type == \"function\" and \$d[0].function.name == \"add\" and all(\$d[1:][]; .id == null and .index == 0)' '$T/tc.sse' >/dev/null &&
  [ \"\$(jq -rj '.choices[0].delta.tool_calls // empty | .[].function.arguments' '$T/tc.sse')\" = \"\$(jq -r '.choices[0].message.tool_calls[0].function.arguments' '$T/tc.json')\" ] &&
  jq -se 'map(.choices[0].finish_reason // empty) == [\"tool_calls\"] and all(.[]; .choices[0].delta.content == null or .choices[0].delta.content == \"\")' '$T/tc.sse' >/dev/null"
c "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"chat\",$MSG,$TOOLS,\"tool_choice\":\"required\",\"parallel_tool_calls\":false,\"max_tokens\":300,\"temperature\":1,\"seed\":4}" >"$T/tr.json"
check "tool_choice required, parallel_tool_calls false: exactly one call of a listed tool" jq -e '
  .choices[0].finish_reason == "tool_calls" and (.choices[0].message.tool_calls | length == 1) and
  (.choices[0].message.tool_calls[0].function | (.name == "add" or .name == "ping") and (.arguments | fromjson | type == "object"))' "$T/tr.json"
c "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"chat\",$MSG,$TOOLS,\"tool_choice\":\"none\",\"max_tokens\":8,\"temperature\":0}" >"$T/tn.json"
c "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"chat\",$MSG,\"max_tokens\":8,\"temperature\":0}" >"$T/tn0.json"
check "tool_choice none: the same content as without tools" jq -e --slurpfile w "$T/tn0.json" '.choices[0].message.content == $w[0].choices[0].message.content and .choices[0].message.tool_calls == null' "$T/tn.json"
GR='root ::= \"<tool_call>\\n{\\\"name\\\": \\\"add\\\", \\\"arguments\\\": {\\\"a\\\": 1, \\\"b\\\": 2}}\\n</tool_call>\"'
c "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"qwen\",$MSG,$TOOLS,\"grammar\":\"$GR\",\"max_tokens\":60}" >"$T/ta.json"
check "tool_choice auto on Qwen3: a Hermes call in the output becomes tool_calls, no markup in content" jq -e '
  .choices[0].finish_reason == "tool_calls" and .choices[0].message.content == null and
  .choices[0].message.tool_calls[0].function.name == "add" and (.choices[0].message.tool_calls[0].function.arguments | fromjson) == {"a":1,"b":2}' "$T/ta.json"
# A strict tool under auto: each call the model opens (forced here with a
# logit_bias on Qwen3's <tool_call> token) is held to the tool's schema
# until </tool_call>, so the random-weight model's calls are all valid.
STRICT='"tools":[{"type":"function","function":{"name":"add","strict":true,"parameters":{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":99},"b":{"type":"integer","minimum":0,"maximum":99}},"required":["a","b"],"additionalProperties":false}}}]'
c "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"qwen\",$MSG,$STRICT,\"logit_bias\":{\"151657\":100},\"max_tokens\":300,\"temperature\":1,\"seed\":2}" >"$T/ts.json"
check "strict tool under auto: every call the model opened is valid" jq -e '
  (.choices[0].message.tool_calls | length >= 2) and
  all(.choices[0].message.tool_calls[].function; .name == "add" and (.arguments | fromjson | keys == ["a","b"] and all(.[]; . >= 0 and . <= 99 and . == floor)))' "$T/ts.json"
RG='root ::= \"<think>\" [a-z ]{4,30} \"</think>\" [a-z]{1,10}'
c "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"qwen\",$MSG,\"grammar\":\"$RG\",\"max_tokens\":60,\"seed\":2}" >"$T/th.json"
check "reasoning: <think> text in reasoning_content, the rest in content, reasoning_tokens counted" jq -e '
  (.choices[0].message.reasoning_content | test("^[a-z ]+$")) and (.choices[0].message.content | test("^[a-z]+$")) and
  .usage.completion_tokens_details.reasoning_tokens > 2 and .usage.completion_tokens_details.reasoning_tokens < .usage.completion_tokens' "$T/th.json"
c -N "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"qwen\",$MSG,\"grammar\":\"$RG\",\"max_tokens\":60,\"seed\":2,\"stream\":true}" |
  sed -n 's/^data: //p' | grep -v DONE >"$T/th.sse"
check "reasoning streamed: delta.reasoning_content and delta.content add up to the blocking message" bash -c "
  [ \"\$(jq -rj '.choices[0].delta.reasoning_content // empty' '$T/th.sse')\" = \"\$(jq -r .choices[0].message.reasoning_content '$T/th.json')\" ] &&
  [ \"\$(jq -rj '.choices[0].delta.content // empty' '$T/th.sse')\" = \"\$(jq -r .choices[0].message.content '$T/th.json')\" ]"
HIST='"messages":[{"role":"user","content":"add 1 and 2"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"add","arguments":"{\"a\":1,\"b\":2}"}}]},{"role":"tool","tool_call_id":"call_1","content":"3"}]'
check "a conversation with an assistant's tool_calls and a tool result renders through the Qwen3 template" bash -c "
  curl -sS -m 10 ${A[*]@Q} $URL/apply-template -d '{\"model\":\"qwen\",$HIST,$TOOLS}' | jq -r .prompt |
  grep -qzF \$'<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": 2}}\n</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n3\n</tool_response>'"
c "${A[@]}" "$URL$CH" --data-binary "{\"model\":\"qwen\",$HIST,$TOOLS,\"max_tokens\":4}" >"$T/th2.json"
check "that conversation is answered" jq -e '.choices[0].finish_reason != null' "$T/th2.json"
err "tools: a tool that is not a function: 400" 400 '.error.param == "tools[0].type"' $CH "{\"model\":\"chat\",$MSG,\"tools\":[{\"type\":\"web_search\"}]}"
err "tools: a bad name: 400" 400 '.error.param == "tools[0].function.name"' $CH "{\"model\":\"chat\",$MSG,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"a b\"}}]}"
err "tools: two tools of one name: 400" 400 '.error.param == "tools"' $CH "{\"model\":\"chat\",$MSG,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}"
err "tool_choice naming a missing tool: 400" 400 '.error.param == "tool_choice"' $CH "{\"model\":\"chat\",$MSG,$TOOLS,\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"nope\"}}}"
err "tool_choice required without tools: 400" 400 '.error.param == "tool_choice"' $CH "{\"model\":\"chat\",$MSG,\"tool_choice\":\"required\"}"
err "tool_choice required with response_format: 400" 400 '.error.param == "tool_choice"' $CH "{\"model\":\"chat\",$MSG,$TOOLS,\"tool_choice\":\"required\",\"response_format\":{\"type\":\"json_object\"}}"
err "tool_choice required with a parameters keyword it cannot enforce: 400 naming it" 400 '.error.param == "tools" and (.error.message | test("multipleOf"))' $CH "{\"model\":\"chat\",$MSG,\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"number\",\"multipleOf\":2}}}}}],\"tool_choice\":\"required\"}"
err "an assistant's tool call with arguments that are not a JSON object: 400" 400 '.error.param == "messages[1].tool_calls[0]"' $CH '{"model":"chat","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1"}}]}]}'
err "grammar: bad GBNF: 400 naming the line" 400 '.error.param == "grammar" and (.error.message | test("gbnf 1:"))' $CH "{\"model\":\"chat\",$MSG,\"grammar\":\"root ::= [a-\"}"
err "grammar with response_format: 400" 400 '.error.param == "grammar"' $CH "{\"model\":\"chat\",$MSG,\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":\"json_object\"}}"
c "${A[@]}" "$URL$CP" --data-binary '{"model":"tiny","prompt":"Once","grammar":"root ::= (\"yes\" | \"no\") \" sir\"","max_tokens":10,"temperature":1,"seed":9}' >"$T/gc.json"
check "completions: grammar holds the text" jq -e '.choices[0].text | test("^(yes|no) sir$")' "$T/gc.json"
err "temperature 3: 400" 400 '.error.param == "temperature" and (.error.message | test("out of range"))' $CH "{\"model\":\"chat\",$MSG,\"temperature\":3}"
err "top_p a string: 400" 400 '.error.param == "top_p"' $CH "{\"model\":\"chat\",$MSG,\"top_p\":\"x\"}"
err "max_tokens 0: 400" 400 '.error.param == "max_tokens"' $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":0}"
err "max_tokens 1.5: 400" 400 '.error.param == "max_tokens"' $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":1.5}"
err "empty stop string: 400" 400 '.error.param == "stop"' $CH "{\"model\":\"chat\",$MSG,\"stop\":[\"\"]}"
err "logit_bias id out of range: 400" 400 '.error.param == "logit_bias"' $CH "{\"model\":\"chat\",$MSG,\"logit_bias\":{\"99999999\":1}}"
err "stream_options without stream: 400" 400 '.error.param == "stream_options"' $CH "{\"model\":\"chat\",$MSG,\"stream_options\":{\"include_usage\":true}}"
err "chat_template_kwargs not an object: 400" 400 '.error.param == "chat_template_kwargs"' $CH "{\"model\":\"chat\",$MSG,\"chat_template_kwargs\":[]}"
err "template error: 400 naming messages and the template line" 400 '.error.param == "messages" and (.error.message | test("template line [0-9]+"))' $CH '{"model":"qwen","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"x","reasoning_content":5}]}'
err "context_length_exceeded with the counts" 400 '.error.code == "context_length_exceeded" and (.error.message | test("maximum context length is 2048 tokens.*2053 tokens \\(5 in the prompt, 2048 in the completion\\)"))' $CP '{"model":"tiny","prompt":"Once upon a time","max_tokens":2048}'
err "prompt of several strings: 400" 400 '.error.param == "prompt"' $CP '{"model":"tiny","prompt":["a","b"]}'
err "prompt id out of range: 400" 400 '.error.param == "prompt"' $CP '{"model":"tiny","prompt":[1,99999]}'
err "max_completion_tokens is chat only" 400 '.error.param == "max_completion_tokens"' $CP '{"model":"tiny","prompt":"a","max_completion_tokens":3}'
err "ignore_eos not a boolean: 400" 400 '.error.param == "ignore_eos"' $CP '{"model":"tiny","prompt":"a","ignore_eos":1}'
err "echo: 400" 400 '.error.param == "echo"' $CP '{"model":"tiny","prompt":"a","echo":true}'
err "empty prompt (no BOS): 400" 400 '.error.param == "prompt"' $CP '{"model":"qwen","prompt":""}'
err "/detokenize bad id: 400" 400 '.error.param == "tokens" and (.error.message | test("99999999"))' /detokenize '{"model":"qwen","tokens":[1,99999999]}'
err "/tokenize prompt and messages: 400" 400 '.error.param != null' /tokenize "{\"model\":\"qwen\",\"prompt\":\"a\",$MSG}"
err "unknown path: 404" 404 '.error.code == "not_found"' /v1/images/generations '{}'
err "wrong method: 405" 405 '.error.code == "method_not_allowed"' $CH '' GET
big=$(head -c 70000 /dev/zero | tr '\0' a)
err "body over --max-body: 413" 413 '.error.code == "request_too_large"' $CP "{\"model\":\"tiny\",\"prompt\":\"$big\"}"
check "413 also for a chunked body" bash -c "
  head -c 70000 /dev/zero | tr '\\0' a | curl -sS -m 5 -o /dev/null -w '%{http_code}' ${A[*]@Q} -H 'Transfer-Encoding: chunked' --data-binary @- $URL/v1/completions | grep -qx 413"

# Fields clients send that change nothing here: accepted, type-checked.
post $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":3,\"store\":true,\"metadata\":{\"k\":\"v\"},\"user\":\"u\",\"service_tier\":\"auto\",\"prompt_cache_key\":\"conv-1\",\"parallel_tool_calls\":false,\"reasoning_effort\":\"low\",\"modalities\":[\"text\"],\"chat_template_kwargs\":{\"enable_thinking\":false},\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "${A[@]}" -N >"$T/fields.sse"
check "chat: store, metadata, user, service_tier, prompt_cache_key, parallel_tool_calls, reasoning_effort, modalities, chat_template_kwargs, stream_options accepted" \
  bash -c "grep -q '^data: \[DONE\]' '$T/fields.sse' && ! grep -q '\"error\"' '$T/fields.sse'"
post $CP '{"model":"tiny","prompt":"Once","max_tokens":3,"user":"u","service_tier":"default","prompt_cache_key":"p"}' "${A[@]}" >"$T/fields.json"
check "completions: user, service_tier, prompt_cache_key accepted" jq -e '.usage.completion_tokens == 3' "$T/fields.json"
err "modalities audio: 400 naming it" 400 '.error.param == "modalities"' $CH "{\"model\":\"chat\",$MSG,\"modalities\":[\"text\",\"audio\"]}"
err "store not a boolean: 400" 400 '.error.param == "store"' $CH "{\"model\":\"chat\",$MSG,\"store\":\"yes\"}"
err "metadata value not a string: 400" 400 '.error.param == "metadata"' $CH "{\"model\":\"chat\",$MSG,\"metadata\":{\"k\":1}}"
err "service_tier unknown: 400" 400 '.error.param == "service_tier"' $CH "{\"model\":\"chat\",$MSG,\"service_tier\":\"gold\"}"
err "reasoning_effort unknown: 400" 400 '.error.param == "reasoning_effort"' $CH "{\"model\":\"chat\",$MSG,\"reasoning_effort\":\"max\"}"
err "modalities on completions: unknown field" 400 '.error.param == "modalities"' $CP '{"model":"tiny","prompt":"a","modalities":["text"]}'

# logprobs: the model's log-softmax; the text is the same with and without.
post $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":12,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3}" "${A[@]}" >"$T/lp.json"
post $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":12,\"temperature\":0}" "${A[@]}" >"$T/nolp.json"
check "chat logprobs: the same text as without" jq -e --slurpfile w "$T/nolp.json" '.choices[0].message.content == $w[0].choices[0].message.content' "$T/lp.json"
check "chat logprobs: OpenAI's shape, one entry per token, 3 top entries sorted, greedy token first" jq -e '
  .choices[0].logprobs.content as $c | ($c | length) == .usage.completion_tokens and
  ([$c[].token] | join("")) == .choices[0].message.content and
  all($c[]; (.logprob <= 0) and (.bytes | length) > 0 and (.top_logprobs | length) == 3 and
      .top_logprobs[0].token == .token and .top_logprobs[0].logprob == .logprob and
      .top_logprobs[0].logprob >= .top_logprobs[1].logprob and .top_logprobs[1].logprob >= .top_logprobs[2].logprob and
      (.bytes | implode) == .token)' "$T/lp.json"
post $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":12,\"seed\":5,\"logprobs\":true}" "${A[@]}" >"$T/lps.json"
post $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":12,\"seed\":5}" "${A[@]}" >"$T/nolps.json"
check "chat logprobs: seeded, the same text as without (the host path samples as the engine does)" \
  jq -e --slurpfile w "$T/nolps.json" '.choices[0].message.content == $w[0].choices[0].message.content and (.choices[0].logprobs.content[0].top_logprobs == [])' "$T/lps.json"
post $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":12,\"temperature\":0,\"logprobs\":true,\"top_logprobs\":3,\"stream\":true}" "${A[@]}" -N >"$T/lp.sse"
check "chat logprobs streamed: the chunks' entries are the blocking reply's" bash -c "
  sed -n 's/^data: //p' '$T/lp.sse' | grep -v '^\[DONE\]' | jq -s -c '[.[].choices[0].logprobs.content // [] | .[]]' >'$T/lp.stream.json' &&
  jq -e --slurpfile s '$T/lp.stream.json' '.choices[0].logprobs.content == \$s[0]' '$T/lp.json' >/dev/null"
post $CP '{"model":"tiny","prompt":"Once upon a time","max_tokens":10,"temperature":0,"logprobs":2}' "${A[@]}" >"$T/clp.json"
check "completion logprobs: tokens, token_logprobs, top_logprobs (2), text_offset" jq -e '
  .choices[0].logprobs as $l | .choices[0].text as $t |
  ($l.tokens | length) == 10 and ($l.tokens | join("")) == $t and ($l.token_logprobs | length) == 10 and
  all($l.token_logprobs[]; . <= 0) and all($l.top_logprobs[]; length == 2) and
  ([range(10) as $i | $l.top_logprobs[$i][$l.tokens[$i]] == $l.token_logprobs[$i]] | all) and
  $l.text_offset[0] == 0 and ([range(1;10) as $i | $l.text_offset[$i] == $l.text_offset[$i-1] + ($l.tokens[$i-1] | utf8bytelength)] | all)' "$T/clp.json"
post $CP '{"model":"tiny","prompt":"Once upon a time","max_tokens":10,"temperature":0,"logprobs":2,"stream":true}' "${A[@]}" -N >"$T/clp.sse"
check "completion logprobs streamed: the same tokens and offsets" bash -c "
  sed -n 's/^data: //p' '$T/clp.sse' | grep -v '^\[DONE\]' | jq -s -c '[.[].choices[0].logprobs // empty] | {tokens: [.[].tokens[]], text_offset: [.[].text_offset[]]}' >'$T/clp.stream.json' &&
  jq -e --slurpfile s '$T/clp.stream.json' '.choices[0].logprobs.tokens == \$s[0].tokens and .choices[0].logprobs.text_offset == \$s[0].text_offset' '$T/clp.json' >/dev/null"
err "top_logprobs without logprobs: 400" 400 '.error.param == "top_logprobs"' $CH "{\"model\":\"chat\",$MSG,\"top_logprobs\":2}"
err "top_logprobs 21: 400" 400 '.error.param == "top_logprobs"' $CH "{\"model\":\"chat\",$MSG,\"logprobs\":true,\"top_logprobs\":21}"
err "completion logprobs 6: 400" 400 '.error.param == "logprobs"' $CP '{"model":"tiny","prompt":"a","logprobs":6}'

# n: choice i samples with seed + i, so it is the single request of that seed.
post $CP '{"model":"tiny","prompt":"Once upon a time","max_tokens":16,"n":3,"seed":11}' "${A[@]}" >"$T/n3.json"
for i in 0 1 2; do
  post $CP "{\"model\":\"tiny\",\"prompt\":\"Once upon a time\",\"max_tokens\":16,\"seed\":$((11 + i))}" "${A[@]}" >"$T/n1.$i.json"
done
check "completion n=3: choice i is the single request with seed 11+i" bash -c "
  for i in 0 1 2; do jq -e --argjson i \$i --slurpfile w '$T/n1.'\$i'.json' '.choices[\$i].index == \$i and .choices[\$i].text == \$w[0].choices[0].text' '$T/n3.json' >/dev/null || exit 1; done"
check "completion n=3: usage counts every choice's tokens" jq -e '(.choices | length) == 3 and .usage.completion_tokens == 48 and .usage.prompt_tokens == 5' "$T/n3.json"
post $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":8,\"n\":2,\"seed\":3,\"logprobs\":true}" "${A[@]}" >"$T/cn2.json"
post $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":8,\"seed\":4}" "${A[@]}" >"$T/cn1.json"
check "chat n=2 with logprobs: choice 1 is seed 4's reply, each choice its own logprobs" jq -e --slurpfile w "$T/cn1.json" '
  .choices[1].message.content == $w[0].choices[0].message.content and
  all(.choices[]; (.logprobs.content | map(.token) | join("")) == .message.content)' "$T/cn2.json"
post $CH "{\"model\":\"chat\",$MSG,\"max_tokens\":8,\"n\":2,\"seed\":3,\"stream\":true,\"stream_options\":{\"include_usage\":true}}" "${A[@]}" -N >"$T/cn2.sse"
check "chat n=2 streamed: chunks carry each choice's index, text and finish as the blocking reply" bash -c "
  sed -n 's/^data: //p' '$T/cn2.sse' | grep -v '^\[DONE\]' | jq -s -c '[range(2) as \$i | {text: ([.[].choices[] | select(.index == \$i) | .delta.content // \"\"] | join(\"\")), finish: ([.[].choices[] | select(.index == \$i) | .finish_reason // empty] | first)}]' >'$T/cn2.stream.json' &&
  jq -e --slurpfile s '$T/cn2.stream.json' '[.choices[] | {text: .message.content, finish: .finish_reason}] == \$s[0]' '$T/cn2.json' >/dev/null &&
  sed -n 's/^data: //p' '$T/cn2.sse' | grep -v '^\[DONE\]' | tail -1 | jq -e --slurpfile b '$T/cn2.json' '.usage == \$b[0].usage' >/dev/null"
ban=$(jq -nc '[range(512) | {key: tostring, value: -100}] | from_entries')
err "n=3 whose sampling fails: one 500 naming why" 500 '.error.type == "server_error" and (.error.message | test("banned"))' $CP "{\"model\":\"tiny\",\"prompt\":\"Once\",\"max_tokens\":4,\"n\":3,\"logit_bias\":$ban}"
C_MAX=2 post $CP '{"model":"tiny","prompt":"Once","max_tokens":2000,"n":3,"stream":true,"ignore_eos":true}' "${A[@]}" -N >/dev/null 2>&1
# the engine sees the hang-up at its next tick: poll, as a loaded machine may be slow
check "n=3: a failed and a disconnected request give back every choice's session" bash -c "
  for i in \$(seq 50); do
    curl -sS -m 5 ${A[*]@Q} $URL/metrics | grep '^memra_requests_running{model=\"tiny\"} 0' >/dev/null && exit 0
    sleep 0.1
  done; exit 1"
err "n=17: 400" 400 '.error.param == "n"' $CH "{\"model\":\"chat\",$MSG,\"n\":17}"
err "n=0: 400" 400 '.error.param == "n"' $CH "{\"model\":\"chat\",$MSG,\"n\":0}"

check "/metrics in Prometheus text" bash -c "
  curl -sS -m 5 ${A[*]@Q} $URL/metrics >'$T/m.txt' &&
  grep -q '^memra_http_requests_total{endpoint=\"/v1/completions\",status=\"200\"} [1-9]' '$T/m.txt' &&
  grep -q '^memra_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"400\"} [1-9]' '$T/m.txt' &&
  grep -q '^memra_generation_tokens_total{model=\"tiny\"} [1-9]' '$T/m.txt' &&
  grep -q '^memra_prompt_tokens_total{model=\"chat\"} [1-9]' '$T/m.txt' &&
  grep -q '^memra_time_to_first_token_seconds_bucket{model=\"tiny\",le=\"+Inf\"} [1-9]' '$T/m.txt' &&
  grep -q '^memra_inter_token_latency_seconds_count{model=\"tiny\"} [1-9]' '$T/m.txt' &&
  grep -q '^memra_requests_running{model=\"qwen\"} 0' '$T/m.txt' &&
  grep -q '^memra_requests_waiting{model=\"qwen\"} 0' '$T/m.txt' &&
  grep -q '^memra_kv_blocks_used{model=\"tiny\"} 0' '$T/m.txt' &&
  grep -q '^# TYPE memra_time_to_first_token_seconds histogram' '$T/m.txt'"
stop_server "$PID"; rc=$?
[ $rc -eq 0 ] && pass "SIGTERM on an idle server: exit 0" || fail "SIGTERM on an idle server" "exit $rc"

# Configuration through the environment; flags win.
MEMRA_MODELS="tiny=$STORIES" MEMRA_PORT=1 MEMRA_API_KEY=envkey start_server env --port 0
check "MEMRA_MODELS / MEMRA_API_KEY configure, --port wins over MEMRA_PORT" bash -c "
  curl -sS -m 5 -H 'x-api-key: envkey' $URL/v1/models | jq -e '.data[0].id == \"tiny\"' >/dev/null"
stop_server "$PID" >/dev/null

# A key file, reloaded when it changes.
printf '# keys\nk1 team-a\n\nk2\n' >"$T/keys"
start_server keys -m "tiny=$STORIES" --api-keys "$T/keys"
check "key file: both keys work" bash -c "
  for k in k1 k2; do [ \"\$(curl -sS -m 5 -o /dev/null -w '%{http_code}' -H \"x-api-key: \$k\" $URL/v1/models)\" = 200 ] || exit 1; done"
printf 'k3\n' >"$T/keys.new" && mv "$T/keys.new" "$T/keys"
sleep 1.1
check "key file: reloaded on change" bash -c "
  [ \"\$(curl -sS -m 5 -o /dev/null -w '%{http_code}' -H 'x-api-key: k3' $URL/v1/models)\" = 200 ] &&
  [ \"\$(curl -sS -m 5 -o /dev/null -w '%{http_code}' -H 'x-api-key: k1' $URL/v1/models)\" = 401 ]"
stop_server "$PID" >/dev/null

# Refusals at start.
expect_error "non-loopback address without a key is refused" 2 "refusing to listen on '0.0.0.0'" memra-serve -m "tiny=$STORIES" --host 0.0.0.0
expect_error "no model: usage" 2 "no model" memra-serve
expect_error "--prefill-chunk 0 is refused" 2 "prefill-chunk" memra-serve -m "tiny=$STORIES" --prefill-chunk 0
expect_error "MEMRA_PREFILL_CHUNK=x is refused" 2 "MEMRA_PREFILL_CHUNK" env MEMRA_PREFILL_CHUNK=x memra-serve -m "tiny=$STORIES"
# A prompt read two tokens per tick gives the bytes of the default chunk.
start_server pchunk -m "tiny=$STORIES" --prefill-chunk 2 -t 1
check "--prefill-chunk 2: greedy text unchanged" bash -c "
  curl -sS -m 20 $URL/v1/completions -d '{\"model\":\"tiny\",\"prompt\":\"Once upon a time\",\"max_tokens\":40,\"temperature\":0}' |
  jq -r '.choices[0].text' > '$T/pchunk.txt' && [ \"\$(cat '$T/pchunk.txt')\" = \"\$(jq -r .text '$T/gen.json')\" ]"
stop_server "$PID" >/dev/null
# A model that does not load: exit 1, its error the last line (after "listening").
load_error() {
  memra-serve --port 0 "${@:3}" >/dev/null 2>"$T/le.err"; local rc=$?
  if [ $rc -ne 1 ]; then fail "$1" "exit $rc, want 1: $(tail -2 "$T/le.err")"
  elif ! tail -1 "$T/le.err" | grep -Eq -- "^memra-serve: .*$2"; then fail "$1" "last line: $(tail -1 "$T/le.err")"
  else pass "$1"; fi
}
load_error "a model that does not load: exit 1 naming it" "no-such.gguf" -m x=/no-such.gguf
load_error "a vocab-only file cannot be served" "vocab-only" -m "v=$DATA/vocab/ggml-vocab-qwen2.gguf"
expect_error "a bad --chat-template file" 1 "no-such.jinja" memra-serve -m "tiny=$STORIES" --chat-template /no-such.jinja
expect_error "alias given twice" 2 "given twice" memra-serve -m "a=$STORIES" -m "a=$STORIES"
