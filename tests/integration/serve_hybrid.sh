# memra-serve on the hybrid families (qwen3_5, qwen3_5_moe: recurrent state
# a sequence): greedy completions give memra-gen's tokens, alone, five at
# once (batched steps) and as several choices; the same request twice gives
# the same bytes; with the n-gram drafter (checkpoints of the state,
# restored after a rejection) the bytes do not change. The prefix cache
# keeps the state at the end of each whole prefill chunk: a long prompt
# run again, or extended, maps its cached chunks (cached_tokens > 0) and
# gives the bytes of a server without the cache.
source tests/integration/serve_common.bash
memra-convert "$STORIES" "$T/stories-hf" >/dev/null 2>&1
for f in qwen3_5 qwen3_5-moe; do
  jq '.vocab_size = 512' "tests/fixtures/configs/tiny-$f.json" >"$T/$f.json"
  memra-convert --random "$T/$f.json" --seed 3 --tokenizer "$T/stories-hf" "$T/$f.gguf" \
    >/dev/null 2>"$T/conv.err" || fail "$f: random GGUF with stories260K's tokenizer" "$(cat "$T/conv.err")"
done
PROMPT="Once upon a time there was a little dog"
LONG="Once upon a time, in a small town by the sea, there lived a little girl named Lily. She loved to play in the sand and look for shells. One day she found a big shell that sang a song when she held it to her ear. She ran home to show her mom, and her mom smiled and said it was the sea. That night Lily put the shell by her bed and listened to it until she fell asleep, and she dreamed of fish and boats and a big blue whale who sang the same song"

for f in qwen3_5 qwen3_5-moe; do
  want=$(memra-gen "$T/$f.gguf" -p "$PROMPT" -n 40 --temp 0 --ignore-eos --json -t 2 2>/dev/null |
         jq -c '.tokens')
  start_server "$f" -m "m=$T/$f.gguf" -t 2
  PLAIN=$URL P1=$PID
  start_server "$f-ngram" -m "m=$T/$f.gguf" --ngram --spec-k 4 -t 2
  NGRAM=$URL P2=$PID
  start_server "$f-nocache" -m "m=$T/$f.gguf" --prefix-cache off -t 2
  NOCACHE=$URL P3=$PID
  if [ -z "$PLAIN" ] || [ -z "$NGRAM" ] || [ -z "$NOCACHE" ]; then fail "$f: servers start"; continue; fi
  body="{\"model\":\"m\",\"prompt\":\"$PROMPT\",\"max_tokens\":40,\"temperature\":0,\"ignore_eos\":true}"
  URL=$PLAIN
  post /v1/completions "$body" >"$T/$f-a.json"
  post /v1/completions "$body" >"$T/$f-b.json"
  # the served text is memra-gen's tokens, detokenized
  text=$(memra-gen "$T/$f.gguf" --detokenize --ids "$(jq -r 'join(",")' <<<"$want")" 2>/dev/null)
  check "$f: a greedy completion is memra-gen's 40 tokens" \
    bash -c "[ \"\$(jq -r '.choices[0].text' '$T/$f-a.json')\" = \"\$1\" ]" _ "$text"
  check "$f: the same request again: the same bytes" \
    bash -c "[ \"\$(jq -c .choices '$T/$f-a.json')\" = \"\$(jq -c .choices '$T/$f-b.json')\" ]"
  # A prompt of several prefill chunks (64 tokens on the CPU, 128 with AMX): cached whole
  # chunks and the state kept at their end; then the same prompt again and
  # an extended one, each against a server without the cache.
  for k in 1 2 3; do
    case $k in 1|2) p=$LONG ;; 3) p="$LONG, and they went to the beach together." ;; esac
    lb="{\"model\":\"m\",\"prompt\":\"$p\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}"
    URL=$PLAIN post /v1/completions "$lb" >"$T/$f-long$k.json"
    URL=$NOCACHE post /v1/completions "$lb" >"$T/$f-ref$k.json"
  done
  check "$f: a long prompt, first time: nothing cached (it has $(jq .usage.prompt_tokens "$T/$f-long1.json") tokens)" \
    bash -c "jq -e '.usage.prompt_tokens > 130 and .usage.prompt_tokens_details.cached_tokens == 0' '$T/$f-long1.json' >/dev/null"
  check "$f: the same long prompt again maps its cached chunks and their state" \
    bash -c "jq -e '.usage.prompt_tokens_details.cached_tokens >= 128 and .usage.prompt_tokens_details.cached_tokens % 64 == 0' '$T/$f-long2.json' >/dev/null"
  check "$f: the long prompt extended maps the cached chunks too" \
    bash -c "jq -e '.usage.prompt_tokens_details.cached_tokens >= 128' '$T/$f-long3.json' >/dev/null"
  check "$f: with cached chunks: the bytes of a server without the cache (3 requests)" \
    bash -c "for k in 1 2 3; do [ \"\$(jq -c .choices $T/$f-long\$k.json)\" = \"\$(jq -c .choices $T/$f-ref\$k.json)\" ] || exit 1; done"
  URL=$NGRAM post /v1/completions "{\"model\":\"m\",\"prompt\":\"$LONG\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}" >/dev/null
  URL=$NGRAM post /v1/completions "{\"model\":\"m\",\"prompt\":\"$LONG\",\"max_tokens\":24,\"temperature\":0,\"ignore_eos\":true}" >"$T/$f-long-s.json"
  check "$f: cached chunks and speculation together: the same bytes" \
    bash -c "jq -e '.usage.prompt_tokens_details.cached_tokens >= 128' '$T/$f-long-s.json' >/dev/null &&
             [ \"\$(jq -c .choices '$T/$f-long-s.json')\" = \"\$(jq -c .choices '$T/$f-ref1.json')\" ]"
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
  stop_server "$P3" >/dev/null
done
