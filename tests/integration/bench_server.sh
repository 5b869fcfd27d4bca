# memra-bench --server against a real memra-serve on a free loopback port:
# the JSON of every level and its arithmetic, the server's own counters
# agreeing with what the client says it got, errors counted (429s from a
# server with no room), bench-compare.jq on two server runs, and bad input
# (bad URL, server down, wrong key, unknown model, a prompt over the
# context); the multi-turn mode against servers with the prefix cache on
# and off (cached tokens on turns 2+ with it, none without). No speed is
# asserted.
source tests/integration/serve_common.bash
TINY=models/memra-tiny.gguf
KEY=sk-bench-1
metric() { c -H "Authorization: Bearer $KEY" "$URL/metrics" | sed -n "s/^$1 //p"; }

start_server bench -m "chat=$TINY" -t 1 --api-key "$KEY"
[ -n "$URL" ] && pass "server starts" || fail "server starts"

memra-bench --server "$URL" --api-key "$KEY" -c 1,4 -n 8 -p 16 -r 2 --json >"$T/s.json" 2>"$T/s.err"
check "exit 0, only JSON on stdout, nothing on stderr" bash -c "jq -e '.program == \"memra-bench\" and .mode == \"server\"' '$T/s.json' >/dev/null && [ ! -s '$T/s.err' ]"
check "the server, the model and the request shape" \
  jq -e '.server.model == "chat" and .server.context_length == 512 and .server.vocab_size == 4096 and (.server.endpoint | endswith("/v1/completions")) and .n_prompt == 16 and .n_gen == 8 and .requests_per_stream == 2 and .warmup == 1' "$T/s.json"
check "one level per concurrency, c x r requests each, none failed" \
  jq -e '[.levels[] | [.concurrency, .requests, .ok, .errors]] == [[1,2,2,0],[4,8,8,0]]' "$T/s.json"
check "tokens received == requested (ignore_eos), prompt tokens exact" \
  jq -e '.n_gen as $n | .n_prompt as $p | .levels | all(.tokens_requested == .ok * $n and .tokens_received == .tokens_requested and .short_requests == 0 and .prompt_tokens == .ok * $p)' "$T/s.json"
check "rates: req/s and tok/s from the level's wall time" \
  jq -e 'def near(a; b): ((a - b) | fabs) <= 1e-6 * (b | fabs) + 1e-9; .levels | all(.duration_s > 0 and near(.requests_s; .ok / .duration_s) and near(.tok_s; .tokens_received / .duration_s))' "$T/s.json"
# An ITL may be 0: two tokens' events can arrive in one read when the
# server is fast (the CPU fast path on memra-tiny) and the client busy; so
# may a request's TPOT, when all its text came in one read (not every one's).
check "TTFT, ITL, TPOT, e2e: min <= p50 <= p90 <= p99 <= max, one TTFT per request" \
  jq -e '.levels | all(. as $l | [.ttft_ms, .itl_ms, .tpot_ms, .e2e_ms] | all(.n > 0 and .min >= 0 and .min <= .p50 and .p50 <= .p90 and .p90 <= .p99 and .p99 <= .max)) and all(.ttft_ms.min > 0 and .e2e_ms.min > 0 and .ttft_ms.n == .ok and .e2e_ms.n == .ok and .ttft_ms.max <= .e2e_ms.max) and any(.tpot_ms.max > 0)' "$T/s.json"
check "cold TTFT measured" jq -e '.cold_ttft_ms > 0' "$T/s.json"
# warm-up (1) + cold (1) + 2 + 8 requests of 8 tokens and 16 prompt tokens each
check "the server counted what the client says it got" bash -c "
  [ '$(metric 'memra_requests_finished_total{model="chat",reason="length"}')' = 12 ] &&
  [ '$(metric 'memra_generation_tokens_total{model="chat"}')' = 96 ] &&
  [ '$(metric 'memra_prompt_tokens_total{model="chat"}')' = 192 ]"

memra-bench --server "$URL/v1/" --api-key "$KEY" -c 2 -n 4 -p 8 -r 1 >"$T/s.txt"
check "the table (and a URL ending in /v1/ is the same server)" bash -c "
  grep -Eq '^server +$URL/v1/: model .chat. \\(context 512, vocab 4096\\)' '$T/s.txt' && grep -Eq '^cold TTFT [0-9.]+ ms' '$T/s.txt' &&
  grep -Eq '^\\|    2 \\|        2 \\|      0 \\|' '$T/s.txt' && grep -Eq '4/4 +\\|$|8/8 +\\|$' '$T/s.txt'"

MEMRA_API_KEY=$KEY memra-bench --server "$URL" -c 1 -n 4 -p 8 -r 1 --json >"$T/s2.json"
check "the key from MEMRA_API_KEY" jq -e '.levels[0].ok == 1' "$T/s2.json"
jq -s -r -f scripts/bench-compare.jq "$T/s.json" "$T/s.json" >"$T/cmp.txt"
check "bench-compare: server runs side by side by concurrency" bash -c "
  grep -Eq '^\\| server c=1 \\| [0-9.]+ \\| [0-9.]+ \\| 1x \\|' '$T/cmp.txt' && grep -Eq '^\\| server c=4 \\|' '$T/cmp.txt'"

# Errors: a bad key, an unknown model, a prompt over the context.
expect_error "wrong key: the server's 401 message" 1 "/v1/models: HTTP 401: Incorrect API key" \
  memra-bench --server "$URL" --api-key nope -c 1 -n 2 -p 2 -r 1
expect_error "unknown model: the served ones named" 1 "model 'nope' is not served \\(served: chat\\)" \
  memra-bench --server "$URL" --api-key "$KEY" --model nope -c 1 -n 2 -p 2 -r 1
expect_error "prompt + n over the context" 1 "prompt 500 \\+ 100 generated tokens = 600 do not fit its context of 512" \
  memra-bench --server "$URL" --api-key "$KEY" -c 1 -n 100 -p 500 -r 1
stop_server "$PID" >/dev/null

# Multi-turn (--turns): 2 clients x 3 turns over a shared ~200-token system
# prompt, against a server with the prefix cache on and one with it off.
start_server turns_on -m "chat=$TINY" -t 1
ON=$URL ON_PID=$PID
start_server turns_off -m "chat=$TINY" -t 1 --prefix-cache off
OFF=$URL OFF_PID=$PID
[ -n "$ON" ] && [ -n "$OFF" ] && pass "servers with the prefix cache on and off start" || fail "servers start"
mt() { memra-bench --server "$1" --turns 3 --system-tokens 200 --turn-tokens 16 -c 2 -n 8 "${@:2}"; }
mt "$ON" --json >"$T/mt_on.json" 2>"$T/mt_on.err"
mt "$OFF" --json >"$T/mt_off.json" 2>"$T/mt_off.err"
check "multi-turn: exit 0, well-formed JSON on stdout, nothing on stderr" bash -c "
  jq -e '.program == \"memra-bench\" and .mode == \"server\"' '$T/mt_on.json' >/dev/null && [ ! -s '$T/mt_on.err' ] &&
  jq -e '.mode == \"server\"' '$T/mt_off.json' >/dev/null && [ ! -s '$T/mt_off.err' ]"
check "multi-turn: the run's shape (chat endpoint, filler sized by calibration)" \
  jq -e '(.server.endpoint | endswith("/v1/chat/completions")) and .n_gen == 8 and .multiturn.turns == 3 and .multiturn.conversations_per_client == 1 and .multiturn.system_tokens == 200 and .multiturn.turn_tokens == 16 and .multiturn.tokens_per_word > 0 and .multiturn.system_words > .multiturn.turn_words' "$T/mt_on.json"
for f in mt_on mt_off; do
  check "multi-turn ($f): one level, 2 conversations x 3 turns, a row per turn, none failed" \
    jq -e '[.levels[] | [.concurrency, .conversations, .requests, .ok, .errors, (.per_turn | map([.turn, .requests, .ok, .errors]))]] == [[2, 2, 6, 6, 0, [[1,2,2,0],[2,2,2,0],[3,2,2,0]]]]' "$T/$f.json"
  check "multi-turn ($f): tokens as asked; all = the sum of the turns; prompts grow by turn" \
    jq -e '.levels[0] as $l | $l.tokens_received == 48 and ($l.per_turn | all(.tokens_received == 16)) and $l.prompt_tokens == ($l.per_turn | map(.prompt_tokens) | add) and $l.cached_tokens == ($l.per_turn | map(.cached_tokens) | add) and ($l.per_turn | .[0].prompt_tokens < .[1].prompt_tokens and .[1].prompt_tokens < .[2].prompt_tokens) and $l.prompt_tok_s > 0 and $l.tok_s > 0 and $l.ttft_ms.n == 6 and ($l.per_turn | all(.ttft_ms.n == 2 and .ttft_ms.min <= .ttft_ms.p50 and .ttft_ms.p50 <= .ttft_ms.p99 and .ttft_ms.mean > 0))' "$T/$f.json"
done
check "multi-turn: the system prompt is about 200 tokens (turn 1: it, 16 user tokens, the template)" \
  jq -e '.levels[0].per_turn[0].prompt_tokens / 2 | . >= 200 and . <= 280' "$T/mt_on.json"
check "multi-turn: the same first turns sent to both servers" \
  bash -c "[ \"\$(jq '.levels[0].per_turn[0].prompt_tokens' '$T/mt_on.json')\" = \"\$(jq '.levels[0].per_turn[0].prompt_tokens' '$T/mt_off.json')\" ]"
check "cache on: turns 2 and 3 report cached tokens, in whole 64-token chunks, less than their prompts" \
  jq -e '.levels[0].per_turn[1:] | all(.cached_tokens > 0 and .cached_tokens % 64 == 0 and .cached_tokens < .prompt_tokens)' "$T/mt_on.json"
check "cache on: the server's hit counter is the cached tokens the client read" bash -c "
  hit=\$(curl -sS -m 5 $ON/metrics | sed -n 's/^memra_prefix_cache_hit_tokens_total{model=\"chat\"} //p')
  [ \"\$hit\" = \"\$(jq '.levels[0].cached_tokens' '$T/mt_on.json')\" ]"
check "cache off: no turn reports cached tokens" \
  jq -e '.levels[0].cached_tokens == 0 and (.levels[0].per_turn | all(.cached_tokens == 0))' "$T/mt_off.json"
mt "$ON" -r 1 >"$T/mt.txt"
check "multi-turn: the table, a row per turn and one for all" bash -c "
  grep -Eq '^prompts +a shared system prompt of [0-9]+ words \\(~200 tokens\\)' '$T/mt.txt' && grep -Eq '^c=2: 2 conversations, 6 requests' '$T/mt.txt' &&
  grep -Eq '^\\| turn \\| requests \\|' '$T/mt.txt' && grep -Eq '^\\|    3 \\|        2 \\|      0 \\|' '$T/mt.txt' && grep -Eq '^\\|  all \\|        6 \\|      0 \\|' '$T/mt.txt'"
jq -s -r -f scripts/bench-compare.jq "$T/mt_off.json" "$T/mt_on.json" >"$T/mtcmp.txt"
check "bench-compare: cache off against on, prompt tok/s and TTFT per turn" bash -c "
  grep -Eq '^\\| server c=2 prompt tok/s \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x \\|' '$T/mtcmp.txt' &&
  grep -Eq '^\\| server c=2 cached tokens \\| 0 \\| [1-9][0-9]* \\| - \\|' '$T/mtcmp.txt' &&
  grep -Eq '^\\| server c=2 turn 3 TTFT p50 ms \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x \\|' '$T/mtcmp.txt'"
expect_error "bench-compare: multi-turn against single-turn" 5 "one run is server, the other multi-turn server" \
  jq -s -r -f scripts/bench-compare.jq "$T/s.json" "$T/mt_on.json"
expect_error "a prompt that outgrows the context by the last turn" 1 "--turns 40: the last turn's prompt \\(about [0-9]+ tokens\\) \\+ 8 generated do not fit the context of 512" \
  memra-bench --server "$ON" --turns 40 --system-tokens 200 -n 8 -c 1
stop_server "$ON_PID" >/dev/null
stop_server "$OFF_PID" >/dev/null
expect_error "--system-tokens without --turns" 2 "--system-tokens goes with --turns" memra-bench --server "$ON" --system-tokens 100
expect_error "-p with --turns" 2 "-p: with --turns the prompts are sized by" memra-bench --server "$ON" --turns 2 -p 16
expect_error "--turns without --server" 2 "--turns goes with --server" memra-bench "$TINY" --turns 2

# A server with room for one request and no queue: at c=3 the others are
# refused (429), counted as errors, and the run fails after reporting.
start_server full -m "chat=$TINY" -t 1 --max-sessions 1 --max-queue 0
memra-bench --server "$URL" -c 3 -n 32 -p 8 -r 1 --json >"$T/f.json" 2>"$T/f.err"; rc=$?
check "refused requests are errors: exit 1, one line naming the first" bash -c "
  [ $rc = 1 ] && [ \$(wc -l <'$T/f.err') = 1 ] && grep -Eq '^memra-bench: [12] of 3 requests failed; the first: HTTP 429: .*at capacity' '$T/f.err'"
check "... and the JSON still reports the level" \
  jq -e '.levels[0] | .requests == 3 and .errors >= 1 and .ok + .errors == 3 and (.first_error | test("^HTTP 429")) and .tokens_received == .ok * 32' "$T/f.json"
stop_server "$PID" >/dev/null

# The server gone.
port=${URL##*:}
expect_error "server down: one line naming the URL" 1 "127.0.0.1:$port/v1/models: Couldn't connect to server" \
  memra-bench --server "$URL" -c 1 -n 2 -p 2 -r 1
expect_error "not an http URL" 2 "--server 'ftp://x': not an http:// or https:// URL" memra-bench --server ftp://x
expect_error "a model with --server" 2 "--server takes no MODEL" memra-bench --server "$URL" "$TINY"
expect_error "model-bench flags with --server" 2 "-d goes with the model or tokenizer bench, not --server" memra-bench --server "$URL" -d 0
expect_error "--server takes one -p" 2 "-p: --server takes one prompt length" memra-bench --server "$URL" -p 8,16
expect_error "--model without --server" 2 "--model goes with --server" memra-bench "$TINY" --model chat
expect_error "-c 0" 2 "-c: 0 is out of range" memra-bench --server "$URL" -c 0
