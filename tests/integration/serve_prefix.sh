# memra-serve's prefix cache: the same bytes with the cache on and off
# (greedy and seeded sampling, one at a time and 16 at once, prompts that
# share nothing, part of a chunk, whole chunks, all of the prompt, or are
# shorter than a block), cached_tokens and the metrics report the hits, and
# one tenant's prompts never shorten another's prefill.
source tests/integration/serve_common.bash

start_server on -m chat=models/memra-tiny.gguf -t 2 --max-sessions 16
ON=$URL
start_server off -m chat=models/memra-tiny.gguf -t 2 --max-sessions 16 --prefix-cache off
OFF=$URL
[ -n "$ON" ] && [ -n "$OFF" ] && pass "servers with the prefix cache on and off start" ||
  fail "servers start"

# A long shared system prompt (several 64-token chunks on the CPU) and
# questions that differ after it; then the same prompt again (all of it
# cached but the last chunk), and a prompt shorter than a KV block.
SYS=$(printf 'The whale is the largest animal of the sea, and the men who hunt it go far. %.0s' $(seq 12))
body() { # CONTENT MAX_TOKENS EXTRA
  jq -nc --arg s "$SYS" --arg c "$1" --argjson n "$2" --argjson x "${3:-{\}}" \
    '{model: "chat", messages: [{role: "system", content: $s}, {role: "user", content: $c}], max_tokens: $n} + $x'
}
short() { jq -nc --argjson x "${1:-{\}}" '{model: "chat", prompt: "Whale", max_tokens: 12} + $x'; }

run_all() { # URL DIR: every case, one at a time, into DIR
  local url=$1 dir=$2 i
  mkdir -p "$dir"
  for i in 1 2 3; do
    c "$url/v1/chat/completions" -d "$(body "Question $i: where do whales go?" 24 '{"temperature":0}')" >"$dir/greedy$i.json"
    c "$url/v1/chat/completions" -d "$(body "Question $i: where do whales go?" 24 '{"temperature":1,"seed":7}')" >"$dir/seeded$i.json"
  done
  c "$url/v1/chat/completions" -d "$(body "Question 1: where do whales go?" 24 '{"temperature":0}')" >"$dir/again.json"
  c "$url/v1/completions" -d "$(short '{"temperature":0}')" >"$dir/short.json"
  c "$url/v1/completions" -d "$(short '{"temperature":0}')" >"$dir/short2.json"
}
run_all "$ON" "$T/on"
run_all "$OFF" "$T/off"
text() { jq -r '.choices[0].message.content // .choices[0].text' "$1"; }
same=1
for f in "$T"/off/*.json; do
  n=$(basename "$f")
  [ -s "$T/on/$n" ] && [ "$(text "$T/on/$n")" = "$(text "$f")" ] || { same=0; echo "  $n differs" >&2; }
done
check "one at a time: the same text with the cache on and off (greedy, seeded, repeated, short)" [ $same = 1 ]
check "cache on: the second question reads the system prompt's whole chunks from the cache" \
  jq -e '.usage.prompt_tokens_details.cached_tokens >= 128 and .usage.prompt_tokens_details.cached_tokens % 64 == 0 and .usage.prompt_tokens_details.cached_tokens < .usage.prompt_tokens' "$T/on/greedy2.json"
check "cache on: the first request had nothing cached" jq -e '.usage.prompt_tokens_details.cached_tokens == 0' "$T/on/greedy1.json"
check "cache on: a repeated prompt is cached up to its last chunk" \
  jq -e '.usage.prompt_tokens_details.cached_tokens >= .usage.prompt_tokens - 64 and .usage.prompt_tokens_details.cached_tokens < .usage.prompt_tokens' "$T/on/again.json"
check "a prompt shorter than a block: nothing cached" jq -e '.usage.prompt_tokens_details.cached_tokens == 0' "$T/on/short2.json"
check "cache off: nothing cached" jq -e '.usage.prompt_tokens_details.cached_tokens == 0' "$T/off/greedy2.json"

# 16 at once, seeded: each request's text equals the cache-off server's.
conc() { # URL DIR
  local i pids=()
  mkdir -p "$2"
  for i in $(seq 16); do
    c "$1/v1/chat/completions" -d "$(body "Question $((i % 4)): and then?" 16 "{\"temperature\":1,\"seed\":$i}")" >"$2/c$i.json" &
    pids+=($!)
  done
  wait "${pids[@]}" # not the servers
}
conc "$ON" "$T/con"
conc "$OFF" "$T/coff"
same=1
for i in $(seq 16); do
  [ -s "$T/con/c$i.json" ] && [ "$(text "$T/con/c$i.json")" = "$(text "$T/coff/c$i.json")" ] || { same=0; echo "  c$i differs" >&2; }
done
check "16 concurrent seeded requests: the same text with the cache on and off" [ $same = 1 ]

check "metrics: hit and miss tokens, blocks in the cache" bash -c "
  m=\$(curl -sS -m 5 $ON/metrics)
  hit=\$(echo \"\$m\" | sed -n 's/^memra_prefix_cache_hit_tokens_total{model=\"chat\"} //p')
  blocks=\$(echo \"\$m\" | sed -n 's/^memra_prefix_cache_blocks{model=\"chat\"} //p')
  echo \"\$m\" | grep -q '^memra_prefix_cache_miss_tokens_total{model=\"chat\"} [1-9]' &&
  echo \"\$m\" | grep -q '^memra_prefix_cache_evictions_total{model=\"chat\"} ' &&
  [ \"\${hit:-0}\" -gt 0 ] && [ \"\${blocks:-0}\" -gt 0 ]"
stop_server "$PID" >/dev/null

# Tenants: the key file names two; b's first request finds nothing of a's.
printf 'key-a alpha\nkey-b beta\n' >"$T/keys"
start_server tenants -m chat=models/memra-tiny.gguf -t 2 --api-keys "$T/keys"
ask() { c -H "Authorization: Bearer $1" "$URL/v1/chat/completions" -d "$(body "Question 9" 4 '{"temperature":0}')" | jq '.usage.prompt_tokens_details.cached_tokens'; }
a1=$(ask key-a); b1=$(ask key-b); a2=$(ask key-a); b2=$(ask key-b)
check "tenants: a's prompt is not in b's cache, each finds its own (a: $a1 then $a2, b: $b1 then $b2)" \
  bash -c "[ '$a1' = 0 ] && [ '$b1' = 0 ] && [ '${a2:-0}' -gt 0 ] && [ '${b2:-0}' -gt 0 ]"
