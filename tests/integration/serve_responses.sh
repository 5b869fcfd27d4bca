# memra-serve's OpenAI Responses API (POST /v1/responses): the official
# openai SDK script (tests/interop/openai-responses.mjs) against memra-tiny
# and a random-weight model carrying the real Qwen3 tokenizer and chat
# template; then curl-level checks of the SSE event sequence and its
# sequence_number order, previous_response_id kept per tenant, and GET /
# DELETE /v1/responses/{id}.
source tests/integration/serve_common.bash
TOKDIR=$(bash scripts/fetch-tokenizers.sh 2>/dev/null)/qwen3
jq '.vocab_size = 151936 | .bos_token_id = 151643 | .eos_token_id = 151645' \
  tests/fixtures/configs/tiny-qwen3.json >"$T/qwen3-vocab.json"
QWEN=$T/qwen3-tiny.gguf
memra-convert --random "$T/qwen3-vocab.json" --tokenizer "$TOKDIR" --seed 5 "$QWEN" >/dev/null 2>&1

printf 'key-a tenant-a\nkey-b tenant-b\n' >"$T/keys"
start_server responses -m chat=models/memra-tiny.gguf -m "qwen=$QWEN" --api-keys "$T/keys" -t 1
if [ -z "$URL" ]; then fail "server starts" "see $T/responses.log"; exit 0; fi

if [ -d tests/interop/node_modules/openai ]; then
  for m in chat qwen; do
    (cd tests/interop && timeout 120 node openai-responses.mjs "$URL" key-a "$m")
    rc=$?
    [ $rc -eq 0 ] && pass "openai-responses.mjs $m exits 0" || fail "openai-responses.mjs $m exits 0" "exit $rc"
  done
else
  skip "openai SDK (Responses)" "tests/interop/node_modules/openai is missing (scripts/deps.sh runs npm ci)"
fi

A=(-H 'Authorization: Bearer key-a')
B=(-H 'Authorization: Bearer key-b')
body='{"model":"chat","input":"Tell me about the whale","max_output_tokens":6,"temperature":0,"stream":true}'
post /v1/responses "$body" "${A[@]}" -N >"$T/sse.txt"
# event: NAME lines and the type inside each data line agree, in order
grep '^event: ' "$T/sse.txt" | cut -c8- >"$T/names"
sed -n 's/^data: //p' "$T/sse.txt" | jq -r .type >"$T/types"
if cmp -s "$T/names" "$T/types" && [ -s "$T/names" ]; then pass "sse: event names match the data types"
else fail "sse: event names match the data types" "$(paste "$T/names" "$T/types" | head -5)"; fi
seqs=$(sed -n 's/^data: //p' "$T/sse.txt" | jq -r .sequence_number | tr '\n' ' ')
want=$(seq 0 $(($(wc -l <"$T/names") - 1)) | tr '\n' ' ')
[ "$seqs" = "$want" ] && pass "sse: sequence_number counts 0, 1, 2 ..." || fail "sse: sequence_number counts 0, 1, 2 ..." "got $seqs"
shape=$(uniq "$T/names" | tr '\n' ' ')
want_shape='response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta response.output_text.done response.content_part.done response.output_item.done response.incomplete '
[ "$shape" = "$want_shape" ] && pass "sse: the event sequence of one message, cut by max_output_tokens" \
  || fail "sse: the event sequence of one message, cut by max_output_tokens" "got $shape"
last=$(sed -n 's/^data: //p' "$T/sse.txt" | tail -1)
jq -e '.response.status == "incomplete" and .response.incomplete_details.reason == "max_output_tokens" and .response.usage.output_tokens == 6' <<<"$last" >/dev/null \
  && pass "sse: response.incomplete carries the reason and usage" || fail "sse: response.incomplete carries the reason and usage" "$last"
deltas=$(sed -n 's/^data: //p' "$T/sse.txt" | jq -j 'select(.type == "response.output_text.delta") | .delta')
done_text=$(sed -n 's/^data: //p' "$T/sse.txt" | jq -j 'select(.type == "response.output_text.done") | .text')
[ "$deltas" = "$done_text" ] && pass "sse: the deltas add up to output_text.done" || fail "sse: the deltas add up to output_text.done" "'$deltas' vs '$done_text'"
blocking=$(post /v1/responses "${body/\"stream\":true/\"stream\":false}" "${A[@]}" | jq -j '.output[0].content[0].text')
[ "$blocking" = "$done_text" ] && pass "sse: the streamed text equals the blocking reply's" || fail "sse: the streamed text equals the blocking reply's" "'$blocking' vs '$done_text'"

# previous_response_id and GET belong to the key's tenant
id=$(post /v1/responses '{"model":"chat","input":"hi","max_output_tokens":2}' "${A[@]}" | jq -r .id)
[ "$(status GET "/v1/responses/$id" "${A[@]}")" = 200 ] && pass "GET /v1/responses/{id}: its tenant reads it" || fail "GET /v1/responses/{id}: its tenant reads it"
[ "$(status GET "/v1/responses/$id" "${B[@]}")" = 404 ] && pass "GET /v1/responses/{id}: another tenant gets 404" || fail "GET /v1/responses/{id}: another tenant gets 404"
r=$(post /v1/responses "{\"model\":\"chat\",\"input\":\"more\",\"previous_response_id\":\"$id\",\"max_output_tokens\":2}" "${B[@]}")
jq -e '.error.param == "previous_response_id" and .error.code == "previous_response_not_found"' <<<"$r" >/dev/null \
  && pass "previous_response_id: another tenant's is not found" || fail "previous_response_id: another tenant's is not found" "$r"
r=$(post /v1/responses "{\"model\":\"chat\",\"input\":\"more\",\"previous_response_id\":\"$id\",\"max_output_tokens\":2}" "${A[@]}")
jq -e '.previous_response_id != null and .usage.input_tokens > 0' <<<"$r" >/dev/null \
  && pass "previous_response_id: its tenant continues" || fail "previous_response_id: its tenant continues" "$r"
[ "$(status DELETE "/v1/responses/$id" "${A[@]}")" = 200 ] && [ "$(status GET "/v1/responses/$id" "${A[@]}")" = 404 ] \
  && pass "DELETE /v1/responses/{id}, then 404" || fail "DELETE /v1/responses/{id}, then 404"
[ "$(status PUT "/v1/responses/$id" "${A[@]}")" = 405 ] && pass "PUT /v1/responses/{id}: 405" || fail "PUT /v1/responses/{id}: 405"

# what Codex sends: client_metadata, include, a namespace and a web_search tool, developer messages
r=$(post /v1/responses '{"model":"chat","input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"Be brief."}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"hi"}],"id":null}],"instructions":"","tools":[{"type":"namespace","name":"ns","description":"d","tools":[]},{"type":"web_search","external_web_access":false}],"tool_choice":"auto","parallel_tool_calls":true,"reasoning":{"summary":"auto"},"store":false,"include":["reasoning.encrypted_content"],"prompt_cache_key":"k","client_metadata":{"a":"b"},"max_output_tokens":2}' "${A[@]}")
jq -e '.object == "response" and .store == false and .tools == []' <<<"$r" >/dev/null \
  && pass "a Codex-shaped request is accepted" || fail "a Codex-shaped request is accepted" "$r"
r=$(post /v1/responses '{"model":"chat","input":"hi","truncation":"auto"}' "${A[@]}")
jq -e '.error.param == "truncation"' <<<"$r" >/dev/null && pass "truncation auto is refused by name" || fail "truncation auto is refused by name" "$r"
stop_server "$PID" >/dev/null

# Reasoning: a template whose generation prompt opens <think> puts the reply
# in a reasoning item; reasoning passed back reaches the template.
cat >"$T/think.jinja" <<'JINJA'
{%- for m in messages %}<|im_start|>{{ m.role }}
{% if m.reasoning_content %}<think>
{{ m.reasoning_content }}
</think>

{% endif %}{{ m.content }}<|im_end|>
{% endfor %}{%- if add_generation_prompt %}<|im_start|>assistant
<think>
{% endif %}
JINJA
start_server think -m chat=models/memra-tiny.gguf --chat-template "$T/think.jinja" -t 1
if [ -n "$URL" ]; then
  rb='{"model":"chat","input":"hi","max_output_tokens":8,"temperature":0}'
  r=$(post /v1/responses "$rb")
  jq -e '(.output | length) == 1 and .output[0].type == "reasoning" and (.output[0].id | startswith("rs_")) and .output[0].summary == [] and .output[0].content[0].type == "reasoning_text" and (.output[0].content[0].text | length) > 0 and .usage.output_tokens_details.reasoning_tokens == 8' <<<"$r" >/dev/null \
    && pass "reasoning: a reasoning item, its tokens counted" || fail "reasoning: a reasoning item, its tokens counted" "$r"
  post /v1/responses "${rb%\}},\"stream\":true}" -N >"$T/think.sse"
  shape=$(grep '^event: ' "$T/think.sse" | cut -c8- | uniq | tr '\n' ' ')
  [ "$shape" = 'response.created response.in_progress response.output_item.added response.content_part.added response.reasoning_text.delta response.reasoning_text.done response.content_part.done response.output_item.done response.incomplete ' ] \
    && pass "reasoning: the streamed event sequence" || fail "reasoning: the streamed event sequence" "$shape"
  streamed=$(sed -n 's/^data: //p' "$T/think.sse" | jq -j 'select(.type == "response.reasoning_text.delta") | .delta')
  [ "$streamed" = "$(jq -j '.output[0].content[0].text' <<<"$r")" ] && pass "reasoning: streamed deltas equal the blocking item" \
    || fail "reasoning: streamed deltas equal the blocking item" "$streamed"
  user='{"role":"user","content":"hi"}'
  rs='{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"I think so."}]}'
  rest='{"role":"assistant","content":[{"type":"output_text","text":"Hello."}]},{"role":"user","content":"again"}'
  with=$(post /v1/responses "{\"model\":\"chat\",\"max_output_tokens\":1,\"input\":[$user,$rs,$rest]}" | jq .usage.input_tokens)
  without=$(post /v1/responses "{\"model\":\"chat\",\"max_output_tokens\":1,\"input\":[$user,$rest]}" | jq .usage.input_tokens)
  [ "$with" -gt "$without" ] 2>/dev/null && pass "reasoning: a reasoning item passed back reaches the template ($without -> $with tokens)" \
    || fail "reasoning: a reasoning item passed back reaches the template" "$without -> $with"
  stop_server "$PID" >/dev/null
else
  fail "server with a thinking template starts" "see $T/think.log"
fi
