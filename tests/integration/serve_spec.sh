# memra-serve's speculative decoding: a greedy request gives the same bytes
# (content, finish reason, usage; blocking and streamed; chat and
# completions) with a draft model, a trimmed one, the n-gram drafter and
# without speculation, alone and five at once (so slots move between the batch
# and their rounds, and rounds of several requests share the model's steps), including a stop string and max_tokens that land
# inside a round; drafts are counted and accepted; a sampled request
# completes and a seeded one repeats; logprobs requests speculate and give
# plain decoding's log-probabilities; the context's end inside a round gives the
# same bytes; a request of several choices speculates each; grammars, lazy
# ones (tool calls under auto) among them, keep plain decoding's bytes; bad
# flags are one-line errors.
source tests/integration/serve_common.bash
TINY=models/memra-tiny.gguf
DRAFT=models/memra-tiny-draft.gguf

start_server plain -m "chat=$TINY" -t 2
PLAIN=$URL PIDS=("$PID")
start_server draft -m "chat=$TINY" --draft "$DRAFT" -t 2
DRAFTED=$URL PIDS+=("$PID")
start_server ngram -m "chat=$TINY" --ngram --spec-k 8 --spec-max-batch 8 -t 2
NGRAM=$URL PIDS+=("$PID")
# a trimmed draft head (512 ids; its drafters share the draft engine's hook)
memra-trim-ranks "$TINY" "$T/ranks.gguf" --top 512 --n-gen 16 -t 2 >/dev/null 2>"$T/trim.err" ||
  fail "memra-trim-ranks writes a rank file" "$(cat "$T/trim.err")"
start_server trim -m "chat=$TINY" --draft "$DRAFT" --trim "$T/ranks.gguf" -t 2
TRIM=$URL PIDS+=("$PID")
[ -n "$PLAIN" ] && [ -n "$DRAFTED" ] && [ -n "$NGRAM" ] && [ -n "$TRIM" ] &&
  pass "servers without speculation, with --draft, --draft --trim and --ngram start" ||
  fail "servers start"
# (the batch limit without --spec-max-batch: 2 on the CPU and on CUDA, measured)
grep -q 'chat speculates (draft models/memra-tiny-draft.gguf, K = 4) while at most 2 requests decode' "$T/draft.log" &&
  grep -q 'chat speculates (ngram, K = 8) while at most 8 requests decode' "$T/ngram.log" &&
  pass "the startup line names the drafter, K and the batch limit" || fail "startup line" "$(cat "$T/draft.log" "$T/ngram.log")"

# The cases: NAME PATH BODY. max_tokens 7 and 33 end inside a round
# (K = 4 emits up to 5 tokens a round; K = 8 up to 9); "Navy" stops the
# completion in the middle of its text (checked below).
CASES=(
  "chat60|/v1/chat/completions|{\"model\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"Tell me a story about a cat.\"}],\"max_tokens\":60,\"temperature\":0}"
  "chat7|/v1/chat/completions|{\"model\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"Where do whales go?\"}],\"max_tokens\":7,\"temperature\":0}"
  "chatlong|/v1/chat/completions|{\"model\":\"chat\",\"messages\":[{\"role\":\"system\",\"content\":\"You answer briefly.\"},{\"role\":\"user\",\"content\":\"What is the sea?\"}],\"max_tokens\":160,\"temperature\":0}"
  "stop|/v1/completions|{\"model\":\"chat\",\"prompt\":\"The report of the committee shows that\",\"max_tokens\":96,\"temperature\":0,\"stop\":[\"Navy\"]}"
  "cmpl33|/v1/completions|{\"model\":\"chat\",\"prompt\":\"Once upon a time\",\"max_tokens\":33,\"temperature\":0}"
)
# what a client sees of a blocking answer / of a stream (its text, finish
# reason and usage): everything but the ids and the clock
BLOCK='{choices, usage}'
STREAM='([.[] | .choices[0] | select(.) | (.delta.content // .text // "")] | join("")),
        [.[] | .choices[0].finish_reason | select(.)], [.[] | .usage | select(.)]'
run_case() { # URL DIR NAME PATH BODY
  local url=$1 dir=$2 name=$3 path=$4 body=$5
  c "$url$path" -H 'Content-Type: application/json' -d "$body" | jq -S "$BLOCK" >"$dir/$name.json"
  c -N "$url$path" -H 'Content-Type: application/json' \
    -d "$(jq -c '. + {stream: true, stream_options: {include_usage: true}}' <<<"$body")" |
    sed -n 's/^data: //p' | grep -v '^\[DONE\]$' | jq -s -S "$STREAM" >"$dir/$name.sse.json"
}
run_all() { # URL DIR: one at a time
  mkdir -p "$2"
  local cs
  for cs in "${CASES[@]}"; do IFS='|' read -r n p b <<<"$cs"; run_case "$1" "$2" "$n" "$p" "$b"; done
}
run_concurrent() { # URL DIR: every case at once
  mkdir -p "$2"
  local cs pids=()
  for cs in "${CASES[@]}"; do IFS='|' read -r n p b <<<"$cs"; run_case "$1" "$2" "$n" "$p" "$b" & pids+=($!); done
  wait "${pids[@]}"
}
run_all "$PLAIN" "$T/plain"
run_all "$DRAFTED" "$T/draft"
run_all "$NGRAM" "$T/ngram"
run_concurrent "$DRAFTED" "$T/draft4"
r0=$(c "$NGRAM/metrics" | awk '$1 == "memra_spec_rounds_total{model=\"chat\"}" {print $2}')
s0=$(c "$NGRAM/metrics" | awk '$1 == "memra_spec_steps_total{model=\"chat\"}" {print $2}')
run_concurrent "$NGRAM" "$T/ngram4"
r1=$(c "$NGRAM/metrics" | awk '$1 == "memra_spec_rounds_total{model=\"chat\"}" {print $2}')
s1=$(c "$NGRAM/metrics" | awk '$1 == "memra_spec_steps_total{model=\"chat\"}" {print $2}')
# five requests speculating at once (--spec-max-batch 8): their rounds
# share the model's forward steps (fewer steps than rounds), and every
# request's bytes are plain decoding's all the same (checked below)
check "concurrent rounds share forward steps ($((${r1:-0} - ${r0:-0})) rounds in $((${s1:-0} - ${s0:-0})) steps)" \
  test $((${s1:-0} - ${s0:-0})) -gt 0 -a $((${s1:-0} - ${s0:-0})) -lt $((${r1:-0} - ${r0:-0}))
run_concurrent "$TRIM" "$T/trim4"

# The references must be what they claim, or the comparisons prove little.
check "reference: the stop string ends the completion mid-text" \
  jq -e '.choices[0].finish_reason == "stop" and .usage.completion_tokens > 10 and .usage.completion_tokens < 96' "$T/plain/stop.json"
check "reference: max_tokens 7 and 33 end them (length)" bash -c "
  jq -e '.choices[0].finish_reason == \"length\" and .usage.completion_tokens == 7' '$T/plain/chat7.json' >/dev/null &&
  jq -e '.choices[0].finish_reason == \"length\" and .usage.completion_tokens == 33' '$T/plain/cmpl33.json' >/dev/null"
check "reference: streams carry text, a finish reason and usage" \
  jq -e -s '(.[0] | length > 20) and .[1] == ["length"] and .[2][0].completion_tokens == 60' "$T/plain/chat60.sse.json"
check "reference: the stop string ends the stream too" \
  jq -e -s '.[1] == ["stop"] and .[2][0].completion_tokens < 96' "$T/plain/stop.sse.json"
for d in draft ngram draft4 ngram4 trim4; do
  diffs=''
  for f in "$T"/plain/*.json; do
    cmp -s "$f" "$T/$d/$(basename "$f")" || diffs+=" $(basename "$f")"
  done
  [ -z "$diffs" ] && pass "greedy with $d: every case's bytes, finish and usage equal plain decoding's (blocking and streamed)" ||
    fail "greedy with $d: differs from plain in$diffs" "$(diff "$T/plain/${diffs# }" "$T/$d/${diffs# }" 2>&1 | head -8)"
done

# Drafts were proposed and accepted (a drafter that accepts nothing still
# gives the right bytes, through the model's own token each round).
metric() { c "$1/metrics" | awk -v m="$2" '$1 == m"{model=\"chat\"}" {print $2}'; }
for s in "$DRAFTED draft" "$NGRAM ngram" "$TRIM trim"; do
  set -- $s
  dr=$(metric "$1" memra_spec_drafted_tokens_total) ac=$(metric "$1" memra_spec_accepted_tokens_total)
  [ "${dr:-0}" -gt 0 ] && [ "${ac:-0}" -gt 0 ] && [ "$ac" -le "$dr" ] &&
    pass "$2: drafts accepted ($ac of $dr)" || fail "$2: drafted '$dr', accepted '$ac'"
done
check "a server without a drafter reports no speculation metrics" bash -c "! c '$PLAIN/metrics' | grep -q memra_spec_"

# Sampled: distribution-exact, not byte-identical to plain sampling; a
# request completes, and a seeded one alone repeats (its stream is the
# request's).
SAMPLED='{"model":"chat","messages":[{"role":"user","content":"Tell me a story about a cat."}],"max_tokens":40,"temperature":0.8,"seed":11}'
URL=$DRAFTED post /v1/chat/completions "$SAMPLED" >"$T/s1.json"
URL=$DRAFTED post /v1/chat/completions "$SAMPLED" >"$T/s2.json"
check "a sampled request completes with speculation" \
  jq -e '.usage.completion_tokens > 0 and (.choices[0].finish_reason | IN("stop", "length")) and (.choices[0].message.content | length > 0)' "$T/s1.json"
check "a seeded sampled request repeats with speculation" bash -c "[ \"\$(jq -c .choices '$T/s1.json')\" = \"\$(jq -c .choices '$T/s2.json')\" ]"

# Several choices: each speculates on its own session, and a greedy
# request of n = 2 gives plain decoding's choices (the drafted count grows
# by it: it was speculated; on the n-gram server, whose --spec-max-batch 8
# lets two sessions speculate at once).
N2='{"model":"chat","messages":[{"role":"user","content":"Tell me a story about a dog."}],"max_tokens":40,"temperature":0,"n":2}'
dr0=$(metric "$NGRAM" memra_spec_drafted_tokens_total)
URL=$PLAIN post /v1/chat/completions "$N2" | jq -cS '{choices, usage}' >"$T/n2-plain.json"
URL=$NGRAM post /v1/chat/completions "$N2" | jq -cS '{choices, usage}' >"$T/n2-draft.json"
dr1=$(metric "$NGRAM" memra_spec_drafted_tokens_total)
check "reference: n = 2 gives two greedy choices of 40 tokens each" \
  jq -e '(.choices | length) == 2 and .usage.completion_tokens == 80' "$T/n2-plain.json"
check "a greedy request of n = 2 gives plain decoding's bytes with speculation" cmp "$T/n2-plain.json" "$T/n2-draft.json"
check "a request of n = 2 is speculated (drafts counted for it)" test "${dr1:-0}" -gt "${dr0:-0}"
SN2='{"model":"chat","prompt":"Once upon a time","max_tokens":24,"temperature":0.9,"seed":5,"n":2}'
URL=$NGRAM post /v1/completions "$SN2" | jq -c '.choices' >"$T/sn2a.json"
URL=$NGRAM post /v1/completions "$SN2" | jq -c '.choices' >"$T/sn2b.json"
check "a seeded sampled request of n = 2 repeats with speculation" cmp "$T/sn2a.json" "$T/sn2b.json"

# Logprobs speculate too: each emitted token's log-probabilities come from
# its verify row as the model gave it (the bytes of a plain decode row), so
# a greedy response equals plain decoding's, completions and chat
# (top_logprobs), blocking and streamed; a seeded sampled one (whose draws
# speculation makes differently) repeats.
LPS=(
  '{"model":"chat","prompt":"Once upon a time","max_tokens":40,"temperature":0,"logprobs":2}'
  '{"model":"chat","messages":[{"role":"user","content":"Tell me a story about a cat."}],"max_tokens":40,"temperature":0,"logprobs":true,"top_logprobs":2}'
)
dr0=$(metric "$DRAFTED" memra_spec_drafted_tokens_total)
for i in 0 1; do
  path=/v1/completions; [ $i = 1 ] && path=/v1/chat/completions
  URL=$PLAIN post $path "${LPS[$i]}" | jq -cS '{choices, usage}' >"$T/lp-plain.$i"
  URL=$DRAFTED post $path "${LPS[$i]}" | jq -cS '{choices, usage}' >"$T/lp-draft.$i"
  URL=$NGRAM post $path "${LPS[$i]}" | jq -cS '{choices, usage}' >"$T/lp-ngram.$i"
done
dr1=$(metric "$DRAFTED" memra_spec_drafted_tokens_total)
check "greedy logprobs requests with speculation: plain decoding's tokens and log-probabilities (2 requests, 2 drafters)" bash -c "
  for i in 0 1; do jq -e '.choices[0].logprobs != null' '$T/lp-plain.'\$i >/dev/null &&
    cmp '$T/lp-plain.'\$i '$T/lp-draft.'\$i && cmp '$T/lp-plain.'\$i '$T/lp-ngram.'\$i || exit 1; done"
check "logprobs requests are speculated (drafts counted for them)" test "${dr1:-0}" -gt "${dr0:-0}"
SLPS='{"model":"chat","prompt":"The whale","max_tokens":30,"temperature":0.8,"seed":3,"logprobs":3}'
URL=$DRAFTED post /v1/completions "$SLPS" | jq -cS '.choices' >"$T/slp-a.json"
URL=$DRAFTED post /v1/completions "$SLPS" | jq -cS '.choices' >"$T/slp-b.json"
check "a seeded sampled logprobs request with speculation repeats, its log-probabilities with it" bash -c "
  jq -e '.[0].logprobs.token_logprobs | length == 30' '$T/slp-a.json' >/dev/null && cmp '$T/slp-a.json' '$T/slp-b.json'"
# Penalties speculate: each emitted token joins the request's history
# before the next verify row, so a greedy request with presence and
# frequency penalties gives plain decoding's bytes with either drafter.
PEN='{"model":"chat","prompt":"Once upon a time","max_tokens":40,"temperature":0,"presence_penalty":0.6,"frequency_penalty":0.6}'
NOPEN='{"model":"chat","prompt":"Once upon a time","max_tokens":40,"temperature":0}'
dr0=$(metric "$DRAFTED" memra_spec_drafted_tokens_total)
URL=$PLAIN post /v1/completions "$PEN" | jq -cS '{choices, usage}' >"$T/pen-plain.json"
URL=$DRAFTED post /v1/completions "$PEN" | jq -cS '{choices, usage}' >"$T/pen-draft.json"
URL=$NGRAM post /v1/completions "$PEN" | jq -cS '{choices, usage}' >"$T/pen-ngram.json"
URL=$PLAIN post /v1/completions "$NOPEN" | jq -c '.choices[0].text' >"$T/nopen.json"
dr1=$(metric "$DRAFTED" memra_spec_drafted_tokens_total)
check "reference: the penalties change the greedy text" bash -c "[ \"\$(jq -c '.choices[0].text' '$T/pen-plain.json')\" != \"\$(cat '$T/nopen.json')\" ]"
check "a greedy request with penalties gives plain decoding's bytes with speculation (2 drafters)" \
  bash -c "cmp '$T/pen-plain.json' '$T/pen-draft.json' && cmp '$T/pen-plain.json' '$T/pen-ngram.json'"
check "a request with penalties is speculated (drafts counted for it)" test "${dr1:-0}" -gt "${dr0:-0}"
# A grammar speculates: each verify row is formed under the grammar's mask
# as it stands after the tokens emitted before it (a draft it does not allow
# is rejected), so a greedy response_format request gives plain decoding's
# bytes, blocking and streamed, with either drafter.
RF='{"model":"chat","messages":[{"role":"user","content":"Give me a number and a word."}],"max_tokens":60,"temperature":0,"response_format":{"type":"json_schema","json_schema":{"name":"p","strict":true,"schema":{"type":"object","properties":{"pet":{"type":"string","enum":["cat","dog","bird"]},"age":{"type":"integer","minimum":0,"maximum":9}},"required":["pet","age"],"additionalProperties":false}}}}'
dr0=$(metric "$NGRAM" memra_spec_drafted_tokens_total)
URL=$PLAIN post /v1/chat/completions "$RF" | jq -cS '{choices, usage}' >"$T/rf-plain.json"
URL=$DRAFTED post /v1/chat/completions "$RF" | jq -cS '{choices, usage}' >"$T/rf-draft.json"
URL=$NGRAM post /v1/chat/completions "$RF" | jq -cS '{choices, usage}' >"$T/rf-ngram.json"
RFS=$(jq -c '.stream = true' <<<"$RF")
URL=$PLAIN post /v1/chat/completions "$RFS" | sed -n 's/^data: //p' | grep -v DONE | jq -r '.choices[0].delta.content // empty' | tr -d '\n' >"$T/rf-plain.txt"
URL=$DRAFTED post /v1/chat/completions "$RFS" | sed -n 's/^data: //p' | grep -v DONE | jq -r '.choices[0].delta.content // empty' | tr -d '\n' >"$T/rf-draft.txt"
dr1=$(metric "$NGRAM" memra_spec_drafted_tokens_total)
check "reference: the response_format reply parses and validates" \
  jq -e '.choices[0].finish_reason == "stop" and (.choices[0].message.content | fromjson | (keys == ["age","pet"]) and (.age >= 0 and .age <= 9) and (.pet | IN("cat","dog","bird")))' "$T/rf-plain.json"
check "a greedy response_format request gives plain decoding's bytes with speculation (2 drafters, and streamed)" \
  bash -c "cmp '$T/rf-plain.json' '$T/rf-draft.json' && cmp '$T/rf-plain.json' '$T/rf-ngram.json' && [ -s '$T/rf-plain.txt' ] && cmp '$T/rf-plain.txt' '$T/rf-draft.txt'"
check "a response_format request is speculated (drafts counted for it)" test "${dr1:-0}" -gt "${dr0:-0}"
SLP='{"model":"chat","prompt":"Once upon a time","max_tokens":24,"temperature":0,"logprobs":2,"stream":true}'
check "a streamed logprobs request with speculation: plain decoding's log-probabilities" bash -c "
  [ \"\$(URL=$PLAIN post /v1/completions '$SLP' | sed -n 's/^data: //p' | grep -v DONE | jq -c '.choices[0].logprobs')\" = \"\$(URL=$DRAFTED post /v1/completions '$SLP' | sed -n 's/^data: //p' | grep -v DONE | jq -c '.choices[0].logprobs')\" ]"

for p in "${PIDS[@]}"; do stop_server "$p" >/dev/null; done

# A lazy grammar speculates: a strict tool under tool_choice auto holds each
# call the model opens (forced here by a logit_bias on Qwen3's <tool_call>
# token, on a random-weight model with Qwen3's tokenizer and template) to
# the tool's schema from the token that completes the trigger to the one
# that closes the call, inside a round as in plain decoding; so a greedy
# request gives plain decoding's bytes, blocking and streamed, with the
# n-gram drafter (whose drafts the repeated calls accept).
make_qwen_tiny || fail "memra-convert makes the Qwen3-tokenizer model" "$(tail -3 "$T/qwen3-tiny.log")"
start_server qplain -m "qwen=$QWEN" -t 2
QP=$URL P1=$PID
start_server qngram -m "qwen=$QWEN" --ngram --spec-k 8 -t 2
QN=$URL P2=$PID
STRICT='"tools":[{"type":"function","function":{"name":"add","strict":true,"parameters":{"type":"object","properties":{"a":{"type":"integer","minimum":0,"maximum":99},"b":{"type":"integer","minimum":0,"maximum":99}},"required":["a","b"],"additionalProperties":false}}}]'
LZ="{\"model\":\"qwen\",\"messages\":[{\"role\":\"user\",\"content\":\"add 1 and 2\"}],$STRICT,\"logit_bias\":{\"151657\":100},\"max_tokens\":150,\"temperature\":0}"
qmetric() { c "$1/metrics" | awk -v m="$2" '$1 == m"{model=\"qwen\"}" {print $2}'; }
# (the calls' ids are random: left out of the comparison)
NOID='walk(if type == "object" then del(.id) else . end)'
URL=$QP post /v1/chat/completions "$LZ" | jq -cS "{choices, usage} | $NOID" >"$T/lz-plain.json"
URL=$QN post /v1/chat/completions "$LZ" | jq -cS "{choices, usage} | $NOID" >"$T/lz-ngram.json"
LZS=$(jq -c '.stream = true | .stream_options = {include_usage: true}' <<<"$LZ")
URL=$QP post /v1/chat/completions "$LZS" | sed -n 's/^data: //p' | grep -v DONE | jq -cS ".choices[0].delta // .usage | $NOID" >"$T/lz-plain.sse"
URL=$QN post /v1/chat/completions "$LZS" | sed -n 's/^data: //p' | grep -v DONE | jq -cS ".choices[0].delta // .usage | $NOID" >"$T/lz-ngram.sse"
check "reference: under auto, every call the model opened is held to the strict tool's schema" jq -e '
  (.choices[0].message.tool_calls | length >= 2) and
  all(.choices[0].message.tool_calls[].function; .name == "add" and (.arguments | fromjson | keys == ["a","b"] and all(.[]; . >= 0 and . <= 99 and . == floor)))' "$T/lz-plain.json"
check "a greedy request under a lazy grammar gives plain decoding's bytes with speculation (and streamed)" \
  bash -c "cmp '$T/lz-plain.json' '$T/lz-ngram.json' && [ -s '$T/lz-plain.sse' ] && cmp '$T/lz-plain.sse' '$T/lz-ngram.sse'"
dr=$(qmetric "$QN" memra_spec_drafted_tokens_total) ac=$(qmetric "$QN" memra_spec_accepted_tokens_total)
check "a request under a lazy grammar is speculated (drafts proposed and accepted: $ac of $dr)" \
  test "${ac:-0}" -gt 0
stop_server "$P1" >/dev/null
stop_server "$P2" >/dev/null

# The context's end inside a round: a 40-token context, no max_tokens, so
# the chat runs until the context is full (K = 8 is cut to what is left).
start_server ctxplain -m "chat=$TINY" -c 40 -t 2
CP=$URL P1=$PID
start_server ctxdraft -m "chat=$TINY" -c 40 --draft "$DRAFT" --spec-k 8 -t 2
CD=$URL P2=$PID
CTX='{"model":"chat","messages":[{"role":"user","content":"Hi"}],"temperature":0,"ignore_eos":true}'
URL=$CP post /v1/chat/completions "$CTX" | jq -cS '{choices, usage}' >"$T/ctx-plain.json"
URL=$CD post /v1/chat/completions "$CTX" | jq -cS '{choices, usage}' >"$T/ctx-draft.json"
check "the context's end: plain decoding fills the 40 tokens" \
  jq -e '.choices[0].finish_reason == "length" and .usage.total_tokens == 40' "$T/ctx-plain.json"
check "the context's end: the same bytes and usage with speculation" cmp "$T/ctx-plain.json" "$T/ctx-draft.json"
stop_server "$P1" >/dev/null
stop_server "$P2" >/dev/null

# The MTP drafter (--mtp): a hybrid qwen3_5 whose MTP block predicts it
# exactly (tests/tools/mtp_bigram.py; the stories260K vocabulary, no chat
# template: completions). Alone and five at once (rounds sharing steps),
# blocking and streamed, the bytes are plain decoding's, and every draft
# is accepted (a block wired wrong accepts next to none).
memra-convert "$STORIES" "$T/stories-hf" >/dev/null 2>&1
jq '.vocab_size = 512' tests/fixtures/parity/configs/tiny-qwen3_5-mtp.json >"$T/mtp.json"
memra-convert --random "$T/mtp.json" --seed 3 --outtype f32 --tokenizer "$T/stories-hf" "$T/mtp-hf" >/dev/null 2>&1 &&
  env -u SHELLOPTS python3 tests/tools/mtp_bigram.py "$T/mtp-hf" &&
  memra-convert "$T/mtp-hf" "$T/mtp.gguf" >/dev/null 2>&1
start_server mtpplain -m "chat=$T/mtp.gguf" -t 2
MP=$URL P1=$PID
start_server mtp -m "chat=$T/mtp.gguf" --mtp --spec-max-batch 8 -t 2
MM=$URL P2=$PID
grep -q 'chat speculates (mtp, K = 4) while at most 8 requests decode' "$T/mtp.log" &&
  pass "--mtp: the startup line names the MTP drafter" || fail "--mtp startup line" "$(cat "$T/mtp.log")"
CASES=(
  "m1|/v1/completions|{\"model\":\"chat\",\"prompt\":\"Once\",\"max_tokens\":50,\"temperature\":0,\"ignore_eos\":true}"
  "m2|/v1/completions|{\"model\":\"chat\",\"prompt\":\"The cat\",\"max_tokens\":23,\"temperature\":0,\"ignore_eos\":true}"
  "m3|/v1/completions|{\"model\":\"chat\",\"prompt\":\"She was\",\"max_tokens\":41,\"temperature\":0,\"ignore_eos\":true}"
  "m4|/v1/completions|{\"model\":\"chat\",\"prompt\":\"A big dog\",\"max_tokens\":30,\"temperature\":0,\"ignore_eos\":true}"
  "m5|/v1/completions|{\"model\":\"chat\",\"prompt\":\"Lily\",\"max_tokens\":17,\"temperature\":0,\"ignore_eos\":true}"
)
# same_as_plain LABEL PLAIN_URL SPEC_URL: the cases alone and five at once on
# the speculating server give the plain server's bytes, and every draft
# the speculating one made was accepted (a drafter wired wrong accepts next
# to none).
same_as_plain() {
  local label=$1 plain=$2 spec=$3 d f diffs
  run_all "$plain" "$T/plain-$label"
  run_all "$spec" "$T/$label-1"
  run_concurrent "$spec" "$T/$label-5"
  for d in "$label-1" "$label-5"; do
    diffs=''
    for f in "$T/plain-$label"/*.json; do
      cmp -s "$f" "$T/$d/$(basename "$f")" || diffs+=" $(basename "$f")"
    done
    [ -z "$diffs" ] && [ -s "$T/plain-$label/m1.json" ] &&
      pass "greedy with $label ($d): every case's bytes, finish and usage equal plain decoding's" ||
      fail "greedy with $label ($d): differs from plain in$diffs" "$(diff "$T/plain-$label/${diffs# }" "$T/$d/${diffs# }" 2>&1 | head -8)"
  done
  local dr ac
  dr=$(metric "$spec" memra_spec_drafted_tokens_total) ac=$(metric "$spec" memra_spec_accepted_tokens_total)
  [ "${dr:-0}" -gt 100 ] && [ "${ac:-0}" -eq "$dr" ] &&
    pass "$label: every draft accepted ($ac of $dr)" || fail "$label: drafted '$dr', accepted '$ac'"
}
same_as_plain mtp "$MP" "$MM"
stop_server "$P1" >/dev/null
stop_server "$P2" >/dev/null

# An assistant (gemma4_assistant, --draft) that predicts its Gemma 4 model
# exactly (tests/tools/assistant_bigram.py): alone and five at once, the
# bytes are plain decoding's, and every draft is accepted.
jq '.vocab_size = 512 | .vocab_size_per_layer_input = 512 | .final_logit_softcapping = null' \
  tests/fixtures/parity/configs/tiny-gemma4.json >"$T/g4.json"
jq '.text_config.vocab_size = 512 | .text_config.hidden_size = 64' \
  tests/fixtures/parity/configs/tiny-gemma4-assistant.json >"$T/g4a.json"
memra-convert --random "$T/g4.json" --seed 3 --outtype f32 --tokenizer "$T/stories-hf" "$T/g4" >/dev/null 2>&1 &&
  memra-convert --random "$T/g4a.json" --seed 4 --outtype f32 "$T/g4a" >/dev/null 2>&1 &&
  env -u SHELLOPTS python3 tests/tools/assistant_bigram.py "$T/g4" "$T/g4a"
start_server g4plain -m "chat=$T/g4" -t 2
GP=$URL P1=$PID
start_server g4asst -m "chat=$T/g4" --draft "$T/g4a" --spec-max-batch 8 -t 2
GA=$URL P2=$PID
grep -q "chat speculates (assistant $T/g4a, K = 4) while at most 8 requests decode" "$T/g4asst.log" &&
  pass "--draft ASSISTANT: the startup line names the assistant" || fail "assistant startup line" "$(cat "$T/g4asst.log")"
same_as_plain assistant "$GP" "$GA"
stop_server "$P1" >/dev/null
stop_server "$P2" >/dev/null

# Bad flags: one line each.
expect_error "--trim without --draft" 2 "--trim r.gguf: 'chat' has no --draft" memra-serve -m "chat=$TINY" --trim r.gguf
expect_error "--draft and --ngram on one model" 2 "give one drafter per model" memra-serve -m "chat=$TINY" --draft "$DRAFT" --ngram
expect_error "--mtp and --ngram on one model" 2 "give one drafter per model" memra-serve -m "chat=$TINY" --mtp --ngram
expect_error "--draft before any -m" 2 "--draft: give it after the -m" memra-serve --draft "$DRAFT" -m "chat=$TINY"
expect_error "--spec-k 9" 2 "--spec-k" memra-serve -m "chat=$TINY" --ngram --spec-k 9
expect_error "--spec-k without a drafter" 2 "--spec-k: no model has a drafter" memra-serve -m "chat=$TINY" --spec-k 2
expect_error "a drafter for an embed model" 2 "served for embed: speculative decoding is for chat models" memra-serve -m "e=$TINY" --task embed --ngram
load_error() { # NAME PATTERN ARGS...: exit 1, the error the last line (after "listening")
  memra-serve --port 0 "${@:3}" >/dev/null 2>"$T/le.err"; local rc=$?
  if [ $rc -ne 1 ]; then fail "$1" "exit $rc, want 1: $(tail -2 "$T/le.err")"
  elif ! tail -1 "$T/le.err" | grep -Eq -- "^memra-serve: .*$2"; then fail "$1" "last line: $(tail -1 "$T/le.err")"
  else pass "$1"; fi
}
load_error "a draft of another vocabulary is refused at startup" \
  "--draft: $STORIES: its vocabulary has 512 tokens, the model's [0-9]+: a drafter must share" -m "chat=$TINY" --draft "$STORIES"
load_error "a draft that does not exist is refused at startup" "--draft.*no-such.gguf" -m "chat=$TINY" --draft /no-such.gguf
load_error "--mtp on a model without an MTP block is refused at startup" "carries no MTP block" \
  -m "chat=$TINY" --mtp
