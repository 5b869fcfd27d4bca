# memra-serve under load and through its lifecycle: byte-identity among 16
# concurrent requests, admission (429), a client that disconnects
# mid-stream, one request failing beside others, SIGTERM drain and its
# timeout, and malformed bodies and raw HTTP that must never crash it
# (run against the ASan+UBSan build when it exists).
source tests/integration/serve_common.bash
make_qwen_tiny
# A long request on the Qwen3-vocab model: its stop ids banned so it runs to max_tokens.
NOSTOP='"logit_bias":{"151643":-100,"151645":-100}'
metric() { c "$URL/metrics" | sed -n "s/^$1 //p"; }

# ---- byte identity: alone vs among 16 concurrent requests ----------------
start_server load -m chat=models/memra-tiny.gguf -t 2
prompts=("The whale" "Call me Ishmael. Some years ago" "It was the best of times" "Once upon a time there was a ship")
req() { # I STREAM -> a request body
  local extra=''
  [ "$1" -eq 3 ] && extra=',"temperature":0.9,"seed":7' || extra=',"temperature":0'
  [ "$2" = 1 ] && extra="$extra,\"stream\":true"
  printf '{"model":"chat","prompt":"%s","max_tokens":32%s}' "${prompts[$1]}" "$extra"
}
for i in 0 1 2 3; do
  post /v1/completions "$(req $i 0)" | jq -j '.choices[0].text' >"$T/alone.$i"
done
check "alone: four distinct non-empty replies" bash -c "[ \$(cat '$T'/alone.* | wc -c) -gt 40 ] && [ \$(md5sum '$T'/alone.* | cut -d' ' -f1 | sort -u | wc -l) = 4 ]"
( for k in $(seq 200); do metric 'memra_requests_running{model="chat"}'; sleep 0.02; done >"$T/running" ) &
poller=$!
pids=()
for k in $(seq 0 15); do
  i=$((k % 4)) s=$((k / 4 % 2))
  if [ $s = 1 ]; then C_MAX=30 post /v1/completions "$(req $i 1)" -N | sse_text >"$T/conc.$k" &
  else C_MAX=30 post /v1/completions "$(req $i 0)" | jq -j '.choices[0].text' >"$T/conc.$k" & fi
  pids+=($!)
done
wait "${pids[@]}"
kill $poller 2>/dev/null; wait $poller 2>/dev/null
bad=0
for k in $(seq 0 15); do cmp -s "$T/conc.$k" "$T/alone.$((k % 4))" || { bad=$((bad + 1)); echo "  request $k differs" >&2; }; done
[ $bad -eq 0 ] && pass "16 concurrent requests (8 streamed) give the same bytes as alone (greedy and seeded)" || fail "byte identity among 16 concurrent" "$bad differ"
check "the 16 really overlapped (running sequences >= 8 at once)" bash -c "[ \$(sort -n '$T/running' | tail -1) -ge 8 ]"
stop_server "$PID" >/dev/null

# ---- admission, disconnect, one failure among others ---------------------
start_server adm -m "qwen=$QWEN" -m "tiny=$STORIES" --max-sessions 1 --max-queue 1 -t 1
curl -sS -m 30 -N "$URL/v1/completions" -d "{\"model\":\"qwen\",\"prompt\":\"hi\",\"max_tokens\":1000,\"stream\":true,$NOSTOP}" >"$T/long.sse" &
long=$! # curl itself, so killing it closes the connection
for k in $(seq 100); do grep -q '"text"' "$T/long.sse" 2>/dev/null && break; sleep 0.05; done
curl -sS -m 30 -N "$URL/v1/completions" -d "{\"model\":\"qwen\",\"prompt\":\"hi\",\"max_tokens\":5,\"stream\":true}" >"$T/queued.sse" &
queued=$!
for k in $(seq 60); do grep -q '^: keep-alive' "$T/queued.sse" 2>/dev/null && break; sleep 0.05; done
check "a queued stream gets keep-alive comments while it waits" bash -c "
  grep -q '^: keep-alive' '$T/queued.sse' && ! grep -q '\"text\"' '$T/queued.sse' && [ '$(metric 'memra_requests_waiting{model="qwen"}')' = 1 ]"
check "over capacity: 429 rate_limit_exceeded with Retry-After" bash -c "
  curl -sS -m 5 -D '$T/h429' -o '$T/b429' $URL/v1/completions -d '{\"model\":\"qwen\",\"prompt\":\"hi\",\"max_tokens\":2}';
  grep -q '^HTTP/1.1 429' '$T/h429' && grep -qi '^Retry-After: 1' '$T/h429' && jq -e '.error.code == \"rate_limit_exceeded\"' '$T/b429' >/dev/null"
check "another model is not affected by the full one" bash -c "
  curl -sS -m 5 $URL/v1/completions -d '{\"model\":\"tiny\",\"prompt\":\"Once\",\"max_tokens\":4}' | jq -e '.usage.completion_tokens == 4' >/dev/null"
kill $queued $long 2>/dev/null; wait $queued $long 2>/dev/null
t0=$(date +%s%N)
for k in $(seq 100); do [ "$(metric 'memra_requests_finished_total{model="qwen",reason="cancelled"}')" = 2 ] && break; sleep 0.02; done
t1=$(date +%s%N)
check "clients gone mid-stream and in the queue free their places at once (not after 1000 tokens)" bash -c "
  [ '$(metric 'memra_requests_running{model="qwen"}')' = 0 ] && [ '$(metric 'memra_requests_waiting{model="qwen"}')' = 0 ] &&
  [ $(( (t1 - t0) / 1000000 )) -lt 2000 ] && [ '$(metric 'memra_requests_finished_total{model="qwen",reason="cancelled"}')' = 2 ]"
check "the freed session takes the next request" bash -c "
  curl -sS -m 5 $URL/v1/completions -d '{\"model\":\"qwen\",\"prompt\":\"hi\",\"max_tokens\":3,$NOSTOP}' | jq -e '.usage.completion_tokens == 3' >/dev/null"
stop_server "$PID" >/dev/null

start_server fail -m "tiny=$STORIES" -t 1
ban=$(jq -nc '[range(0;512) | {key: tostring, value: -100}] | from_entries')
C_MAX=20 post /v1/completions '{"model":"tiny","prompt":"Once","max_tokens":300,"temperature":0,"stream":true}' -N >"$T/ok.sse" &
okp=$!
check "a request whose sampling fails gets a 500 naming why" bash -c "
  [ \"\$(curl -sS -m 5 -o '$T/b500' -w '%{http_code}' $URL/v1/completions -d '{\"model\":\"tiny\",\"prompt\":\"Once\",\"max_tokens\":5,\"logit_bias\":$ban}')\" = 500 ] &&
  jq -e '.error.type == \"server_error\" and (.error.message | test(\"banned\"))' '$T/b500' >/dev/null"
wait $okp
check "... and the request beside it completes" bash -c "
  grep '^data: {' '$T/ok.sse' | tail -1 | sed 's/^data: //' | jq -e '.choices[0].finish_reason != null' >/dev/null && [ \"\$(tail -2 '$T/ok.sse' | head -1)\" = 'data: [DONE]' ]"
stop_server "$PID" >/dev/null

# ---- blocking clients that hang up --------------------------------------------
# A blocking request waits with its connection suspended, where libmicrohttpd
# does not see the client go; the engine polls the socket between ticks.
start_server blk -m "qwen=$QWEN" -t 1 --max-sessions 1 --max-queue 1 -v
curl -sS -m 30 "$URL/v1/completions" -d "{\"model\":\"qwen\",\"prompt\":\"hi\",\"max_tokens\":1000,$NOSTOP}" >/dev/null 2>&1 &
blk=$!
for k in $(seq 200); do [ "$(metric 'memra_generation_tokens_total{model="qwen"}')" -gt 2 ] 2>/dev/null && break; sleep 0.05; done
curl -sS -m 30 "$URL/v1/completions" -d '{"model":"qwen","prompt":"hi","max_tokens":5}' >/dev/null 2>&1 &
bq=$!
for k in $(seq 100); do [ "$(metric 'memra_requests_waiting{model="qwen"}')" = 1 ] && break; sleep 0.05; done
check "a blocking request generates and another waits behind it" bash -c "
  [ '$(metric 'memra_requests_running{model="qwen"}')' = 1 ] && [ '$(metric 'memra_requests_waiting{model="qwen"}')' = 1 ]"
kill $blk $bq 2>/dev/null; wait $blk $bq 2>/dev/null
t0=$(date +%s%N)
for k in $(seq 100); do [ "$(metric 'memra_requests_finished_total{model="qwen",reason="cancelled"}')" = 2 ] && break; sleep 0.02; done
t1=$(date +%s%N)
gen1=$(metric 'memra_generation_tokens_total{model="qwen"}')
sleep 0.3
check "blocking clients gone: the running one and the queued one freed within 2 s" bash -c "
  [ '$(metric 'memra_requests_running{model="qwen"}')' = 0 ] && [ '$(metric 'memra_requests_waiting{model="qwen"}')' = 0 ] &&
  [ '$(metric 'memra_requests_finished_total{model="qwen",reason="cancelled"}')' = 2 ] && [ $(( (t1 - t0) / 1000000 )) -lt 2000 ]"
check "... generation stopped there, far short of max_tokens 1000" bash -c "
  [ $gen1 -lt 1000 ] && [ '$(metric 'memra_generation_tokens_total{model="qwen"}')' = $gen1 ]"
check "... the hang-up is logged as 499 and the sequence as freed" bash -c "
  grep -q 'POST /v1/completions -> 499' '$T/blk.log' && grep -q 'client gone, sequence freed' '$T/blk.log'"
check "... and the freed session serves the next request" bash -c "
  curl -sS -m 10 $URL/v1/completions -d '{\"model\":\"qwen\",\"prompt\":\"hi\",\"max_tokens\":3,$NOSTOP}' | jq -e '.usage.completion_tokens == 3' >/dev/null"
stop_server "$PID" 10; rc=$?
check "... and the server drains and exits 0 (no connection left suspended)" bash -c "[ $rc = 0 ]"

# ---- SIGTERM drain ---------------------------------------------------------
start_server drain -m "qwen=$QWEN" -t 1 --drain-timeout 20
C_MAX=30 post /v1/completions "{\"model\":\"qwen\",\"prompt\":\"hi\",\"max_tokens\":800,\"stream\":true,$NOSTOP}" -N >"$T/drain.sse" &
dp=$!
for k in $(seq 100); do grep -q '"text"' "$T/drain.sse" 2>/dev/null && break; sleep 0.05; done
kill -TERM "$PID"
sleep 0.2
check "draining: /readyz 503" bash -c "[ \"\$(curl -sS -m 5 -o /dev/null -w '%{http_code}' $URL/readyz)\" = 503 ]"
check "draining: new requests 503" bash -c "
  [ \"\$(curl -sS -m 5 -o '$T/b503' -w '%{http_code}' $URL/v1/completions -d '{\"model\":\"qwen\",\"prompt\":\"hi\"}')\" = 503 ] && jq -e '.error.code == \"server_draining\"' '$T/b503' >/dev/null"
check "draining: /health still answers" bash -c "curl -sS -m 5 $URL/health | jq -e '.status == \"ok\"' >/dev/null"
wait $dp
check "draining: the in-flight stream finishes in full" bash -c "
  grep '^data: {' '$T/drain.sse' | tail -1 | sed 's/^data: //' | jq -e '.choices[0].finish_reason == \"length\"' >/dev/null && grep -qx 'data: \[DONE\]' '$T/drain.sse'"
stop_server "$PID" 10; rc=$?
check "drain: exit 0 once idle" bash -c "[ $rc = 0 ] && grep -q 'drained, exiting' '$T/drain.log'"

start_server cut -m "qwen=$QWEN" -t 1 --drain-timeout 1
C_MAX=30 post /v1/completions "{\"model\":\"qwen\",\"prompt\":\"hi\",\"max_tokens\":1000,\"stream\":true,$NOSTOP}" -N >"$T/cut.sse" &
cp_=$!
# and a blocking one beside it, which must hear a 503 it can retry, not a 500
C_MAX=30 post /v1/completions "{\"model\":\"qwen\",\"prompt\":\"hi\",\"max_tokens\":1000,$NOSTOP}" -D "$T/cut.hdr" >"$T/cut.json" &
cb_=$!
for k in $(seq 100); do grep -q '"text"' "$T/cut.sse" 2>/dev/null && break; sleep 0.05; done
t0=$(date +%s%N)
stop_server "$PID" 10; rc=$?
t1=$(date +%s%N)
wait $cp_ $cb_
check "drain timeout: exit 0 after about the timeout" bash -c "[ $rc = 0 ] && [ $(( (t1 - t0) / 1000000 )) -lt 4000 ] && grep -q 'requests cut' '$T/cut.log' || { cat '$T/cut.log' >&2; exit 1; }"
check "drain timeout: the cut stream ends with an error event and [DONE]" bash -c "
  grep '^data: {' '$T/cut.sse' | tail -1 | sed 's/^data: //' | jq -e '.error.message | test(\"shutting down\")' >/dev/null && grep -qx 'data: \[DONE\]' '$T/cut.sse'"
check "drain timeout: the cut blocking request is a 503 with Retry-After, not a 500" bash -c "
  head -1 '$T/cut.hdr' | grep -q ' 503' && grep -qi '^retry-after: 1' '$T/cut.hdr' &&
  jq -e '.error.code == \"server_draining\" and (.error.message | test(\"retry\"))' '$T/cut.json' >/dev/null"

# ---- malformed input never crashes it --------------------------------------
SERVE_BIN=memra-serve
[ -x "$SAN_BIN/memra-serve" ] && SERVE_BIN=$SAN_BIN/memra-serve
PATH_SAVE=$PATH
PATH=$(dirname "$(command -v "$SERVE_BIN")"):$PATH
# Both aliases on stories260K (fast even under ASan), chat through a template file that
# keeps prompts short (the ASan build prefills a few milliseconds a token).
printf '%s' "{% for m in messages %}{{ m.role[:1] }}{{ m.content }}{% endfor %}" >"$T/short.jinja"
start_server fuzz -m "tiny=$STORIES" -m "chat=$STORIES" --chat-template "$T/short.jinja" -t 1 --max-body 256K --api-key k
PATH=$PATH_SAVE
port=${URL##*:}
AK=(-H 'x-api-key: k')
# Every request below goes through one curl process (a config of
# url/data/next entries), so a thousand of them take seconds.
cfg=$T/fuzz.curl n_sent=0
: >"$cfg"
add() { # PATH BODY-FILE
  printf 'url = "%s%s"\nheader = "x-api-key: k"\ndata-binary = "@%s"\noutput = "/dev/null"\nmax-time = 10\nnext\n' "$URL" "$1" "$2" >>"$cfg"
  n_sent=$((n_sent + 1))
}
body() { local f=$T/fz.$n_sent; printf '%s' "$1" >"$f"; add "$2" "$f"; }
eps=(/v1/chat/completions /v1/completions /tokenize /detokenize /apply-template /v1/models)
for k in $(seq 40); do # random bytes to every endpoint
  head -c $((RANDOM % 3000)) /dev/urandom >"$T/rand.$k"
  add "${eps[$((k % 6))]}" "$T/rand.$k"
done
vals=('null' 'true' '-1' '0' '1e308' '-1e308' '9223372036854775807' '-9223372036854775808' '"x"' '""' '[]' '{}' '[1,"a",null]'
      '{"a":{"b":[]}}' '"\u0000"' '"\ud800"' "\"$(head -c 5000 /dev/zero | tr '\0' x)\"" '[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]' '0.5' '1e-300')
fields=(model messages prompt max_tokens max_completion_tokens temperature top_p top_k min_p seed stop presence_penalty
        frequency_penalty repetition_penalty logit_bias n user chat_template_kwargs stream stream_options tokens
        add_special add_generation_prompt response_format tools logprobs)
for f in "${fields[@]}"; do # every field with every wrong value
  for v in "${vals[@]}"; do
    lim=max_tokens; [ $f = max_tokens ] && lim=max_completion_tokens # a null must not mean "to the end"
    body "{\"model\":\"chat\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"$lim\":2,\"$f\":$v}" /v1/chat/completions
    body "{\"model\":\"tiny\",\"prompt\":\"Once\",\"max_tokens\":2,\"$f\":$v}" /v1/completions
  done
done
for v in "${vals[@]}"; do # inside messages and prompts
  for b in "{\"model\":\"chat\",\"max_tokens\":2,\"messages\":[{\"role\":$v,\"content\":$v}]}" \
           "{\"model\":\"chat\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":$v}]}]}" \
           "{\"model\":\"chat\",\"max_tokens\":2,\"messages\":$v}" "{\"model\":\"tiny\",\"max_tokens\":2,\"prompt\":[$v]}" \
           "{\"model\":\"tiny\",\"tokens\":[$v]}"; do
    for ep in /v1/chat/completions /v1/completions /tokenize /detokenize /apply-template; do body "$b" $ep; done
  done
done
printf '{"model":"chat","max_tokens":2,"messages":[{"role":"user","content":"\xff\xfe\xc0\x80 bad utf8"}]}' >"$T/badutf8"
add /v1/chat/completions "$T/badutf8"
{ printf '{"a":'; head -c 200000 /dev/zero | tr '\0' '['; } >"$T/deep"
add /v1/completions "$T/deep"
curl -sS -K "$cfg" 2>/dev/null
raw() { # raw bytes over a socket, answer discarded
  timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; printf '%b' \"\$1\" >&3; cat <&3 >/dev/null" _ "$1" 2>/dev/null
  n_sent=$((n_sent + 1))
}
longhdr=$(head -c 100000 /dev/zero | tr '\0' a)
raw 'GARBAGE\r\n\r\n'
raw 'GET\r\n\r\n'
raw 'GET / HTTP/9.9\r\nHost: x\r\nConnection: close\r\n\r\n'
raw 'GET /health\r\n\r\n'
raw "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nX-Long: $longhdr\r\n\r\n"
raw "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer $longhdr\r\n\r\n"
raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: k\r\nContent-Length: -5\r\n\r\n{}'
raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: k\r\nContent-Length: 99999999999999999999999\r\n\r\n{}'
raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: k\r\nContent-Length: 100\r\n\r\n{"model":"tiny"'
raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: k\r\nTransfer-Encoding: chunked\r\n\r\nZZZ\r\nabc\r\n0\r\n\r\n'
raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: k\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffffff\r\nabc\r\n'
raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: k\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\n{}'
raw 'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: k\x00zz\r\n\r\n'
raw 'GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nBad Header Line\r\n\r\n'
raw 'GET /v1/models/%00%ff HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: k\r\n\r\n'
raw 'GET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /health HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
raw 'POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\nx-api-key: k\r\nContent-Length: 60\r\n\r\n{"model":"tiny","prompt":"Once","max_tokens":200,"stream":true}'
check "after $n_sent malformed requests the server still answers" bash -c "curl -sS -m 5 $URL/health | jq -e '.status == \"ok\"' >/dev/null &&
  curl -sS -m 10 -H 'x-api-key: k' $URL/v1/completions -d '{\"model\":\"tiny\",\"prompt\":\"Once\",\"max_tokens\":3}' | jq -e '.usage.completion_tokens == 3' >/dev/null"
stop_server "$PID" 20; rc=$?
check "fuzzed server exits 0 on SIGTERM, nothing from the sanitizers" bash -c "
  [ $rc = 0 ] && ! grep -E 'AddressSanitizer|LeakSanitizer|runtime error' '$T/fuzz.log'"
[ "$SERVE_BIN" != memra-serve ] || echo "  (fuzz run on the release build: $SAN_BIN/memra-serve not built)" >&2
