# Two memra-serve replicas (CPU) behind nginx with the shipped configuration
# (deploy/nginx: upstreams.conf, memra-lb.conf, memra_affinity.js; only the
# ports differ): requests and server-sent events pass through unchanged,
# keyless requests spread over the replicas, one prompt_cache_key or one
# conversation stays on one replica, and a replica drained by SIGTERM loses
# no request (its stream finishes; new requests go to the other replica).
source tests/integration/serve_common.bash
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
JSMOD=/usr/lib/nginx/modules/ngx_http_js_module.so
if [ ! -x "$NGINX" ] || [ ! -f "$JSMOD" ]; then
  skip "nginx replicas" "nginx or its njs module (Debian: nginx, libnginx-mod-http-js) is not installed"
  exit 0
fi
make_qwen_tiny
NOSTOP='"logit_bias":{"151643":-100,"151645":-100}'
export -f c

start_server r1 -m chat=models/memra-tiny.gguf -m "qwen=$QWEN" -t 1 --drain-timeout 30
P1=$PID U1=$URL
start_server r2 -m chat=models/memra-tiny.gguf -m "qwen=$QWEN" -t 1 --drain-timeout 30
P2=$PID U2=$URL
[ -n "$U1" ] && [ -n "$U2" ] || { fail "replicas start" "$(tail -3 "$T"/r*.log)"; exit 1; }
A1=${U1#http://} A2=${U2#http://}

# nginx on a free port, as this user, everything under $T.
N=$T/nginx
mkdir -p "$N"
sed -e "s/127.0.0.1:8001/$A1/" -e "s/127.0.0.1:8002/$A2/" deploy/nginx/upstreams.conf >"$N/upstreams.conf"
NGX_PID=''
for try in 1 2 3 4 5; do
  LB_PORT=$(shuf -i 20000-60000 -n 1)
  sed "s/listen 8080;/listen 127.0.0.1:$LB_PORT;/" deploy/nginx/memra-lb.conf >"$N/memra-lb.conf"
  cat >"$N/nginx.conf" <<CONF
load_module $JSMOD;
$([ "$(id -u)" = 0 ] && echo "user root;")
worker_processes 1;
pid $N/nginx.pid;
error_log $N/error.log info;
events { worker_connections 256; }
http {
    access_log $N/access.log;
    client_body_temp_path $N/body;
    proxy_temp_path $N/proxy;
    fastcgi_temp_path $N/fastcgi;
    uwsgi_temp_path $N/uwsgi;
    scgi_temp_path $N/scgi;
    js_path "$PWD/deploy/nginx";
    include $N/upstreams.conf;
    include $N/memra-lb.conf;
}
CONF
  "$NGINX" -p "$N" -e "$N/error.log" -c "$N/nginx.conf" -g 'daemon off;' 2>>"$N/stderr" &
  NGX_PID=$!
  for k in $(seq 100); do
    curl -s -m 1 -o /dev/null "http://127.0.0.1:$LB_PORT/health" && break
    kill -0 "$NGX_PID" 2>/dev/null || break
    sleep 0.05
  done
  kill -0 "$NGX_PID" 2>/dev/null && break
  wait "$NGX_PID" 2>/dev/null
  NGX_PID=''
done
[ -n "$NGX_PID" ] || { fail "nginx starts with the shipped configuration" "$(tail -5 "$N/error.log" "$N/stderr" 2>/dev/null)"; exit 1; }
SERVE_PIDS+=("$NGX_PID")
pass "nginx starts with the shipped configuration"
LB=http://127.0.0.1:$LB_PORT

# lbpost PATH JSON: the body on stdout; the replica that answered (the last
# address nginx tried) in $T/replica.
lbpost() {
  c "$LB$1" -H 'Content-Type: application/json' -d "$2" -D "$T/hdr" |
    tr -d '\r'
  tr -d '\r' <"$T/hdr" | sed -n 's/^[Xx]-[Mm]emra-[Rr]eplica: //p' | awk -F', ' '{print $NF}' >"$T/replica"
}
replica_of() { lbpost "$1" "$2" >/dev/null; cat "$T/replica"; }

check "through nginx: /v1/models lists the replica's models" bash -c "
  c $LB/v1/models | jq -e '[.data[].id] | index(\"chat\") != null' >/dev/null"
check "through nginx: /readyz 200 while the replicas are ready" bash -c "
  [ \"\$(c -o /dev/null -w '%{http_code}' $LB/readyz)\" = 200 ]"

REQ='{"model":"chat","prompt":"Once upon a time","max_tokens":24,"temperature":0}'
c "$U1/v1/completions" -H 'Content-Type: application/json' -d "$REQ" | jq -j '.choices[0].text' >"$T/direct.txt"
lbpost /v1/completions "$REQ" | jq -j '.choices[0].text' >"$T/lb.txt"
check "through nginx: a completion is the replica's own text" bash -c "
  [ -s '$T/direct.txt' ] && cmp '$T/direct.txt' '$T/lb.txt'"
SREQ='{"model":"chat","prompt":"Once upon a time","max_tokens":24,"temperature":0,"stream":true}'
c -N "$LB/v1/completions" -H 'Content-Type: application/json' -d "$SREQ" -D "$T/sse.hdr" >"$T/lb.sse"
check "through nginx: server-sent events pass through (event stream, the same text, [DONE])" bash -c "
  grep -qi '^content-type: text/event-stream' '$T/sse.hdr' &&
  [ \$(grep -c '^data: {' '$T/lb.sse') -gt 2 ] && grep -qx 'data: \[DONE\]' '$T/lb.sse' &&
  sse_text <'$T/lb.sse' | cmp - '$T/direct.txt'"

# Keyless requests (no body): the least busy replica, round robin when idle.
for i in 1 2 3 4; do
  c -o /dev/null -D - "$LB/v1/models" | tr -d '\r' | sed -n 's/^[Xx]-[Mm]emra-[Rr]eplica: //p'
done >"$T/keyless"
check "keyless requests spread over both replicas" bash -c "
  grep -qx '$A1' '$T/keyless' && grep -qx '$A2' '$T/keyless'"

for i in 1 2 3 4 5; do
  replica_of /v1/chat/completions "{\"model\":\"chat\",\"prompt_cache_key\":\"user-42\",\"max_tokens\":2,\"messages\":[{\"role\":\"user\",\"content\":\"question $i\"}]}"
done >"$T/key42"
check "one prompt_cache_key stays on one replica (5 requests)" bash -c "
  [ \$(sort -u '$T/key42' | wc -l) = 1 ] && [ \$(wc -l <'$T/key42') = 5 ]"
for i in $(seq 16); do
  replica_of /v1/chat/completions "{\"model\":\"chat\",\"prompt_cache_key\":\"user-$i\",\"max_tokens\":1,\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}"
done >"$T/keys"
check "sixteen keys spread over both replicas" bash -c "
  grep -qx '$A1' '$T/keys' && grep -qx '$A2' '$T/keys'"

# A conversation without a key: its head (system + first user turn) keeps it
# on one replica as it grows.
conv() { # I TURNS -> a chat body of conversation I with TURNS user turns
  local msgs="{\"role\":\"system\",\"content\":\"You are assistant number $1.\"},{\"role\":\"user\",\"content\":\"Tell me about ship $1.\"}" t
  for t in $(seq 2 "$2"); do
    msgs="$msgs,{\"role\":\"assistant\",\"content\":\"Reply $t.\"},{\"role\":\"user\",\"content\":\"And then $t?\"}"
  done
  printf '{"model":"chat","max_tokens":2,"messages":[%s]}' "$msgs"
}
for i in $(seq 12); do
  for turns in 1 2 3; do replica_of /v1/chat/completions "$(conv "$i" "$turns")"; done | sort -u | wc -l
done >"$T/conv.sets"
for i in $(seq 12); do replica_of /v1/chat/completions "$(conv "$i" 1)"; done >"$T/conv.first"
check "a conversation's turns stay on one replica (12 conversations, 3 turns each)" bash -c "
  [ \$(grep -cx 1 '$T/conv.sets') = 12 ]"
check "conversations spread over both replicas" bash -c "
  grep -qx '$A1' '$T/conv.first' && grep -qx '$A2' '$T/conv.first'"
for t in 1 2; do
  msgs='{"role":"user","content":"Name a whale."}'
  [ $t = 2 ] && msgs="$msgs"',{"role":"assistant","content":"Moby."},{"role":"user","content":"Another?"}'
  replica_of /v1/messages "{\"model\":\"chat\",\"max_tokens\":2,\"system\":\"Be brief.\",\"messages\":[$msgs]}"
done >"$T/anthropic"
check "an Anthropic Messages conversation stays on one replica" bash -c "
  [ \$(wc -l <'$T/anthropic') = 2 ] && [ \$(sort -u '$T/anthropic' | wc -l) = 1 ] && [ -s '$T/anthropic' ]"
check "a body that is not JSON is the replica's 400, not nginx's" bash -c "
  [ \"\$(c -o '$T/bad.json' -w '%{http_code}' $LB/v1/chat/completions -H 'Content-Type: application/json' -d '{not json')\" = 400 ] &&
  jq -e '.error.message | length > 0' '$T/bad.json' >/dev/null"

# ---- drain: SIGTERM one replica with a stream in flight --------------------
DKEY=''
for i in $(seq 40); do
  r=$(replica_of /v1/completions "{\"model\":\"chat\",\"prompt_cache_key\":\"drain-$i\",\"prompt\":\"x\",\"max_tokens\":1}")
  [ "$r" = "$A1" ] && { DKEY=drain-$i; break; }
done
if [ -z "$DKEY" ]; then
  fail "drain: a key that maps to replica 1" "none of 40 keys did"
else
  C_MAX=60 c -N "$LB/v1/completions" -H 'Content-Type: application/json' -D "$T/drain.hdr" \
    -d "{\"model\":\"qwen\",\"prompt_cache_key\":\"$DKEY\",\"prompt\":\"hi\",\"max_tokens\":800,\"stream\":true,$NOSTOP}" >"$T/drain.sse" &
  sp=$!
  for k in $(seq 200); do grep -q '"text"' "$T/drain.sse" 2>/dev/null && break; sleep 0.05; done
  kill -TERM "$P1"
  sleep 0.3
  check "drain: the stream was in flight on the drained replica" bash -c "
    kill -0 $sp 2>/dev/null && tr -d '\r' <'$T/drain.hdr' | grep -qi '^x-memra-replica: $A1\$'"
  check "drain: /readyz through nginx stays 200" bash -c "
    [ \"\$(c -o /dev/null -w '%{http_code}' $LB/readyz)\" = 200 ]"
  ok=0
  for i in $(seq 10); do
    code=$(c -o "$T/after.$i" -w '%{http_code}' "$LB/v1/completions" -H 'Content-Type: application/json' \
      -d "{\"model\":\"chat\",\"prompt_cache_key\":\"$DKEY\",\"prompt\":\"The whale $i\",\"max_tokens\":4}")
    [ "$code" = 200 ] && jq -e '.choices[0].text | length > 0' "$T/after.$i" >/dev/null && ok=$((ok + 1))
  done
  check "drain: 10 new requests for the drained replica's key all answered (by the other)" bash -c "[ $ok = 10 ]"
  wait "$sp"
  check "drain: the in-flight stream finishes in full" bash -c "
    grep '^data: {' '$T/drain.sse' | tail -1 | sed 's/^data: //' | jq -e '.choices[0].finish_reason == \"length\"' >/dev/null &&
    grep -qx 'data: \[DONE\]' '$T/drain.sse'"
  for k in $(seq 200); do kill -0 "$P1" 2>/dev/null || break; sleep 0.05; done
  wait "$P1"; rc=$?
  check "drain: the drained replica exits 0" bash -c "[ $rc = 0 ] && grep -q 'drained, exiting' '$T/r1.log'"
fi
kill -QUIT "$NGX_PID" 2>/dev/null
