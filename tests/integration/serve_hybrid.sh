# memra-serve on the hybrid families (qwen3_5, qwen3_5_moe: recurrent state
# a sequence): greedy completions give memra-gen's tokens, alone, five at
# once (batched steps) and as several choices; the same request twice gives
# the same bytes (no prefix is shared: the startup line says the cache is
# off, and cached_tokens stays 0); with the n-gram drafter (checkpoints of
# the state, restored after a rejection) the bytes do not change.
source tests/integration/serve_common.bash
memra-convert "$STORIES" "$T/stories-hf" >/dev/null 2>&1
for f in qwen3_5 qwen3_5-moe; do
  jq '.vocab_size = 512' "tests/fixtures/configs/tiny-$f.json" >"$T/$f.json"
  memra-convert --random "$T/$f.json" --seed 3 --tokenizer "$T/stories-hf" "$T/$f.gguf" \
    >/dev/null 2>"$T/conv.err" || fail "$f: random GGUF with stories260K's tokenizer" "$(cat "$T/conv.err")"
done
PROMPT="Once upon a time there was a little dog"

for f in qwen3_5 qwen3_5-moe; do
  want=$(memra-gen "$T/$f.gguf" -p "$PROMPT" -n 40 --temp 0 --ignore-eos --json -t 2 2>/dev/null |
         jq -c '.tokens')
  start_server "$f" -m "m=$T/$f.gguf" -t 2
  PLAIN=$URL P1=$PID
  start_server "$f-ngram" -m "m=$T/$f.gguf" --ngram --spec-k 4 -t 2
  NGRAM=$URL P2=$PID
  if [ -z "$PLAIN" ] || [ -z "$NGRAM" ]; then fail "$f: servers start"; continue; fi
  check "$f: the startup line says the prefix cache is off, and why" \
    grep -q "m: prefix cache off (its recurrent layers' state" "$T/$f.log"
  body="{\"model\":\"m\",\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true}"
  URL=$PLAIN
  post /v1/completions "$body" >"$T/$f-a.json"
  post /v1/completions "$body" >"$T/$f-b.json"
  # the served text is memra-gen's tokens, detokenized
  text=$(memra-gen "$T/$f.gguf" --detokenize --ids "$(jq -r 'join(",")' <<<"$want")" 2>/dev/null)
  check "$f: a greedy completion is memra-gen's 40 tokens" \
    bash -c "[ \"\$(jq -r '.choices[0].text' '$T/$f-a.json')\" = \"\$1\" ]" _ "$text"
  check "$f: the same request again: the same bytes, nothing cached" \
    bash -c "jq -e '.usage.prompt_tokens_details.cached_tokens == 0' '$T/$f-b.json' >/dev/null &&
             [ \"\$(jq -c .choices '$T/$f-a.json')\" = \"\$(jq -c .choices '$T/$f-b.json')\" ]"
  cpids=()
  for i in 1 2 3 4 5; do post /v1/completions "$body" >"$T/$f-c$i.json" & cpids+=($!); done
  wait "${cpids[@]}" # (not the servers, which are jobs of this shell too)
  same=1
  for i in 1 2 3 4 5; do
    [ "$(jq -c .choices "$T/$f-c$i.json")" = "$(jq -c .choices "$T/$f-a.json")" ] || same=0
  done
  [ $same = 1 ] && pass "$f: five at once (batched steps): each the bytes of one alone" ||
    fail "$f: five at once" "$(head -c 300 "$T/$f-c1.json")"
  post /v1/completions "${body%\}},\"n\":3}" >"$T/$f-n.json"
  check "$f: n = 3 greedy choices, each the text of one alone" \
    bash -c "[ \"\$(jq -c '[.choices[].text] | unique' '$T/$f-n.json')\" = \"\$(jq -c '[.choices[0].text]' '$T/$f-a.json')\" ]"
  URL=$NGRAM
  post /v1/completions "$body" >"$T/$f-s.json"
  check "$f: with the n-gram drafter (state checkpoints): the same bytes" \
    bash -c "[ \"\$(jq -c .choices '$T/$f-s.json')\" = \"\$(jq -c .choices '$T/$f-a.json')\" ]"
  drafted=$(c "$NGRAM/metrics" | awk '$1 == "memra_spec_drafted_tokens_total{model=\"m\"}" {print $2}')
  check "$f: the request speculated (drafted tokens counted: ${drafted:-none})" \
    bash -c "[ '${drafted:-0}' -gt 0 ]"
  stop_server "$P1" >/dev/null
  stop_server "$P2" >/dev/null
done
