# memra-serve's /v1/embeddings and /v1/rerank against transformers: a
# random-weight Qwen3-shaped model (tests/fixtures/configs/tiny-qwen3-embed.json,
# the real Qwen3 tokenizer, seed 7) whose reference vectors and rerank
# scores scripts/hf_embed_reference.py wrote into
# tests/fixtures/embed/tiny-qwen3-embed.json. The same file is served twice,
# --task embed and --task rerank, with an 8-token prefill chunk so inputs
# are pooled across chunks and the prefix cache maps shared chunks. Also:
# mean pooling detected from a sentence-transformers Pooling module, the
# openai SDK (tests/interop/openai-embed.mjs), every 400 by name, task
# mismatches both ways, concurrency, metrics.
source tests/integration/serve_common.bash
FIX=tests/fixtures/embed/tiny-qwen3-embed.json
TOKDIR=$(bash scripts/fetch-tokenizers.sh 2>/dev/null)/qwen3
M=$T/tiny-qwen3-embed.gguf
memra-convert --random tests/fixtures/configs/tiny-qwen3-embed.json --tokenizer "$TOKDIR" --seed 7 "$M" >/dev/null 2>&1
check "the random model is the fixture's (sha256)" \
  bash -c "sha256sum '$M' | grep -q '^38d9d63f9f2f6abd302f40fcf54078bc737c7b127e3a5680beb33462c9eba4a3 '"

start_server embed -m "emb=$M" --task embed -m "rr=$M" --task rerank -m chat=models/memra-tiny.gguf \
  -t 1 --prefill-chunk 8 --max-sessions 3
[ -n "$URL" ] || { fail "server with embed and rerank aliases starts" "$(tail -3 "$T/embed.log")"; exit 0; }
pass "server with embed and rerank aliases starts"
check "the log names each alias's task" grep -q 'emb = .*, embed)' "$T/embed.log"

# pycheck NAME PYTHON [FILES...]: passes when the Python (stdlib only)
# exits 0; it gets the fixture as FIX and the files as sys.argv[1:].
pycheck() {
  local name=$1 code=$2; shift 2
  # (env -u SHELLOPTS: a pyenv shim is a bash script, and lib.bash exports nounset)
  check "$name" env -u SHELLOPTS python3 -c "
import base64, json, math, struct, sys
FIX = json.load(open('$FIX'))
def load(p): return json.load(open(p))
def dot(a, b): return sum(x * y for x, y in zip(a, b))
def cos(a, b): return dot(a, b) / math.sqrt(dot(a, a) * dot(b, b))
$code" "$@"
}

# ---- embeddings: parity with transformers ------------------------------
texts=$(jq -c '[.embed.inputs[].text]' "$FIX")
post /v1/embeddings "{\"model\":\"emb\",\"input\":$texts}" >"$T/e_float.json"
pycheck "embeddings: 4 texts match transformers (cosine >= 0.999, unit, usage = tokens)" '
r = load(sys.argv[1]); ins = FIX["embed"]["inputs"]
assert r["object"] == "list" and r["model"] == "emb", r.get("error", r)
assert [d["index"] for d in r["data"]] == [0, 1, 2, 3]
for d, w in zip(r["data"], ins):
    v = d["embedding"]
    assert d["object"] == "embedding" and len(v) == 64
    c = cos(v, w["last"]); assert c >= 0.999, (d["index"], c)
    assert abs(math.sqrt(dot(v, v)) - 1) < 1e-5
n = sum(len(w["ids"]) for w in ins)
assert r["usage"] == {"prompt_tokens": n, "total_tokens": n}, r["usage"]' "$T/e_float.json"

for i in 0 1 2 3; do
  text=$(jq -c ".embed.inputs[$i].text" "$FIX")
  post /v1/embeddings "{\"model\":\"emb\",\"input\":$text}" >"$T/e_one$i.json"
done
pycheck "embeddings: each text alone: its tokens (usage) and the batch's vector" '
b = load(sys.argv[1])
for i, p in enumerate(sys.argv[2:]):
    r = load(p); w = FIX["embed"]["inputs"][i]
    assert r["usage"]["prompt_tokens"] == len(w["ids"]), (i, r["usage"], len(w["ids"]))
    assert r["data"][0]["embedding"] == b["data"][i]["embedding"], i' \
  "$T/e_float.json" "$T/e_one0.json" "$T/e_one1.json" "$T/e_one2.json" "$T/e_one3.json"

ids=$(jq -c '[.embed.inputs[].ids]' "$FIX")
post /v1/embeddings "{\"model\":\"emb\",\"input\":$ids}" >"$T/e_ids.json"
post /v1/embeddings "{\"model\":\"emb\",\"input\":$(jq -c '.embed.inputs[2].ids' "$FIX")}" >"$T/e_ids1.json"
pycheck "embeddings: token ids (arrays, and one array) give the texts' vectors" '
a, b, c = load(sys.argv[1]), load(sys.argv[2]), load(sys.argv[3])
assert [d["embedding"] for d in a["data"]] == [d["embedding"] for d in b["data"]]
assert c["data"][0]["embedding"] == a["data"][2]["embedding"]
assert c["usage"]["prompt_tokens"] == len(FIX["embed"]["inputs"][2]["ids"])' \
  "$T/e_float.json" "$T/e_ids.json" "$T/e_ids1.json"

post /v1/embeddings "{\"model\":\"emb\",\"input\":$texts,\"encoding_format\":\"base64\",\"user\":\"u1\"}" >"$T/e_b64.json"
pycheck "embeddings: base64 is the float vectors' little-endian float32 bytes" '
a, b = load(sys.argv[1]), load(sys.argv[2])
for x, y in zip(a["data"], b["data"]):
    raw = base64.b64decode(y["embedding"], validate=True)
    got = struct.unpack("<%df" % (len(raw) // 4), raw)
    want = [struct.unpack("<f", struct.pack("<f", f))[0] for f in x["embedding"]]
    assert list(got) == want' "$T/e_float.json" "$T/e_b64.json"

post /v1/embeddings "{\"model\":\"emb\",\"input\":$texts,\"dimensions\":16}" >"$T/e_d16.json"
pycheck "embeddings: dimensions 16 is the full vector's first 16, renormalized" '
a, b = load(sys.argv[1]), load(sys.argv[2])
for x, y in zip(a["data"], b["data"]):
    f, v = x["embedding"][:16], y["embedding"]
    n = math.sqrt(dot(f, f))
    assert len(v) == 16 and max(abs(p - q / n) for p, q in zip(v, f)) < 1e-6' \
  "$T/e_float.json" "$T/e_d16.json"

# A request's inputs run as one stream of tokens cut into packed steps of
# up to 8 rows (the prefill chunk) from up to 3 inputs (the slots): the
# steps counted by the metrics are exactly that cut's. Work never maps the
# prefix cache (a packed step's KV is not a prompt chunk's), and the
# vectors are the first request's bytes.
metric() { c "$URL/metrics" | awk -v k="$1" 'index($0, k) == 1 {print $2}'; }
steps0=$(metric 'memra_embed_steps_total{model="emb"')
hits0=$(metric 'memra_prefix_cache_hit_tokens_total{model="emb"}')
post /v1/embeddings "{\"model\":\"emb\",\"input\":$texts}" >"$T/e_pack.json"
steps1=$(metric 'memra_embed_steps_total{model="emb"')
hits1=$(metric 'memra_prefix_cache_hit_tokens_total{model="emb"}')
want=$(env -u SHELLOPTS python3 -c "
import json, sys
lens = [len(i['ids']) for i in json.load(open('$FIX'))['embed']['inputs']]
steps, i, off = 0, 0, 0
while i < len(lens):
    rows, k = 0, 0
    while i < len(lens) and k < 3 and rows < 8:
        take = min(lens[i] - off, 8 - rows)
        rows += take; k += 1; off += take
        if off == lens[i]:
            i, off = i + 1, 0
        else:
            break
    steps += 1
print(steps)")
check "embeddings: 4 inputs in packed steps of 8 rows from up to 3 inputs ($want steps; counted $((${steps1:-0} - ${steps0:-0})))" \
  test "$((${steps1:-0} - ${steps0:-0}))" = "$want"
check "embeddings: no prefix cache ($hits0 -> $hits1 hit tokens)" test "${hits1:-x}" = "${hits0:-y}"
check "embeddings: ... and the first request's vectors" \
  bash -c "[ \"\$(jq -c '[.data[].embedding]' '$T/e_pack.json')\" = \"\$(jq -c '[.data[].embedding]' '$T/e_float.json')\" ]"

# Concurrency: 6 batches at once on 3 slots give the serial bytes.
pids=()
for k in 1 2 3 4 5 6; do
  post /v1/embeddings "{\"model\":\"emb\",\"input\":$texts}" >"$T/e_conc$k.json" &
  pids+=($!)
done
wait "${pids[@]}"
check "embeddings: 6 concurrent 4-input requests on 3 slots give the serial vectors" bash -c "
  for k in 1 2 3 4 5 6; do
    [ \"\$(jq -c '[.data[].embedding]' '$T/e_conc'\$k.json)\" = \"\$(jq -c '[.data[].embedding]' '$T/e_float.json')\" ] || exit 1
  done"

# ---- rerank: parity with transformers ----------------------------------
q=$(jq -c .rerank.query "$FIX")
docs=$(jq -c .rerank.documents "$FIX")
post /v1/rerank "{\"model\":\"rr\",\"query\":$q,\"documents\":$docs}" >"$T/r.json"
pycheck "rerank: the reference's order, each score within 1e-3, documents returned" '
r = load(sys.argv[1]); ref = FIX["rerank"]
assert r["model"] == "rr" and r["id"].startswith("rerank-"), r.get("error", r)
want = sorted(range(len(ref["scores"])), key=lambda i: (-ref["scores"][i], i))
got = [x["index"] for x in r["results"]]
assert got == want, (got, want)
for x in r["results"]:
    assert abs(x["relevance_score"] - ref["scores"][x["index"]]) < 1e-3, x
    assert x["document"] == {"text": ref["documents"][x["index"]]}
n = sum(len(i) for i in ref["ids"])
assert r["usage"] == {"prompt_tokens": n, "total_tokens": n}, (r["usage"], n)' "$T/r.json"

for i in 0 1 2 3; do
  post /rerank "{\"model\":\"rr\",\"query\":$q,\"documents\":[{\"text\":$(jq -c ".rerank.documents[$i]" "$FIX")}],\"instruction\":$(jq -c .rerank.instruction "$FIX")}" >"$T/r_one$i.json"
done
pycheck "rerank: one document at a time (/rerank, {text} objects): the reference's tokens and score" '
for i, p in enumerate(sys.argv[1:]):
    r = load(p); ref = FIX["rerank"]
    assert r["usage"]["prompt_tokens"] == len(ref["ids"][i]), (i, r["usage"], len(ref["ids"][i]))
    assert abs(r["results"][0]["relevance_score"] - ref["scores"][i]) < 1e-3
    assert r["results"][0]["index"] == 0' "$T/r_one0.json" "$T/r_one1.json" "$T/r_one2.json" "$T/r_one3.json"

post /v1/rerank "{\"model\":\"rr\",\"query\":$q,\"documents\":$docs,\"top_n\":2,\"return_documents\":false}" >"$T/r_top.json"
pycheck "rerank: top_n 2 and return_documents false" '
a, b = load(sys.argv[1]), load(sys.argv[2])
assert len(b["results"]) == 2 and all("document" not in x for x in b["results"])
assert [x["index"] for x in b["results"]] == [x["index"] for x in a["results"][:2]]
assert b["usage"] == a["usage"]' "$T/r.json" "$T/r_top.json"

# ---- mean pooling from a sentence-transformers Pooling module ----------
HF=$T/emb-mean
memra-convert "$M" "$HF" >/dev/null 2>&1
cp "$TOKDIR"/tokenizer.json "$TOKDIR"/tokenizer_config.json "$HF"/ 2>/dev/null
mkdir -p "$HF/1_Pooling"
echo '[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},{"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"}]' >"$HF/modules.json"
echo '{"word_embedding_dimension":64,"pooling_mode_mean_tokens":true}' >"$HF/1_Pooling/config.json"
start_server mean -m "mean=$HF" -t 1 --prefill-chunk 8
if [ -n "$URL" ]; then
  MEAN_URL=$URL
  c "$URL/v1/models/mean" >"$T/m_model.json"
  check "an HF dir with a mean Pooling module is served for embed (no --task)" \
    jq -e '.task == "embed" and .pooling == "mean" and .dimensions == 64 and .chat == false' "$T/m_model.json"
  post /v1/embeddings "{\"model\":\"mean\",\"input\":$texts}" >"$T/e_mean.json"
  pycheck "embeddings: mean pooling across chunks matches transformers' mean (cosine >= 0.999)" '
r = load(sys.argv[1])
for d, w in zip(r["data"], FIX["embed"]["inputs"]):
    c = cos(d["embedding"], w["mean"]); assert c >= 0.999, (d["index"], c)' "$T/e_mean.json"
  post /v1/embeddings "{\"model\":\"mean\",\"input\":$(jq -c '.embed.inputs[1].text' "$FIX")}" >"$T/e_mean2.json"
  check "embeddings: mean pooling does not map cached chunks (a repeat gives the same vector)" \
    bash -c "[ \"\$(jq -c .data[0].embedding '$T/e_mean2.json')\" = \"\$(jq -c .data[1].embedding '$T/e_mean.json')\" ]"
  stop_server "$PID" >/dev/null
else
  fail "an HF dir with a mean Pooling module is served for embed (no --task)" "$(tail -3 "$T/mean.log")"
fi
URL=$(grep -o 'http://[^ ]*' "$T/embed.log" | head -1)

# ---- errors: each a 400 naming the field -------------------------------
# bad NAME PATH BODY PARAM PATTERN
bad() {
  local name=$1 path=$2 body=$3 param=$4 pat=$5 st
  st=$(c -o "$T/bad.json" -w '%{http_code}' "$URL$path" -H 'Content-Type: application/json' -d "$body")
  if [ "$st" != 400 ]; then fail "$name" "status $st: $(head -c 300 "$T/bad.json")"
  elif ! jq -e --arg p "$param" '.error.param == (if $p == "" then null else $p end)' "$T/bad.json" >/dev/null; then
    fail "$name" "param $(jq -c .error.param "$T/bad.json"), want '$param'"
  elif ! jq -r .error.message "$T/bad.json" | grep -Eq -- "$pat"; then
    fail "$name" "message '$(jq -r .error.message "$T/bad.json")' does not match /$pat/"
  else pass "$name"; fi
}
many=$(jq -nc '[range(33) | "x"]')
long=$(jq -nc '[range(2049) | 1]')
bad "embeddings 400: malformed JSON" /v1/embeddings '{"model":"emb","input":' "" 'invalid JSON'
bad "embeddings 400: input missing" /v1/embeddings '{"model":"emb"}' input '^input: required'
bad "embeddings 400: input a number" /v1/embeddings '{"model":"emb","input":5.5}' input '^input: must be a string'
bad "embeddings 400: input an object" /v1/embeddings '{"model":"emb","input":[{"a":1}]}' input '^input\[0\]: must be'
bad "embeddings 400: input mixing strings and ids" /v1/embeddings '{"model":"emb","input":["a",[1]]}' 'input[1]' '^input\[1\]: must be a string, as input\[0\] is'
bad "embeddings 400: 33 inputs" /v1/embeddings "{\"model\":\"emb\",\"input\":$many}" input '^input: 33 inputs, at most 32 a request'
bad "embeddings 400: an empty string" /v1/embeddings '{"model":"emb","input":""}' input '^input: an empty string'
bad "embeddings 400: an empty string at index 2" /v1/embeddings '{"model":"emb","input":["a","b",""]}' 'input[2]' '^input\[2\]: an empty string'
bad "embeddings 400: an empty array" /v1/embeddings '{"model":"emb","input":[]}' input '^input: the array is empty'
bad "embeddings 400: an empty array of ids" /v1/embeddings '{"model":"emb","input":[[1],[]]}' 'input[1]' '^input\[1\]: an empty array of token ids'
bad "embeddings 400: a token id past the vocabulary" /v1/embeddings '{"model":"emb","input":[[1,151936]]}' 'input[0]' '^input\[0\]\[1\]: must be a token id in \[0, 151936\)'
bad "embeddings 400: a negative token id" /v1/embeddings '{"model":"emb","input":[3,-1]}' input '^input\[1\]: must be a token id'
bad "embeddings 400: dimensions 0" /v1/embeddings '{"model":"emb","input":"a","dimensions":0}' dimensions '^dimensions: 0 is out of range \[1, 64\]'
bad "embeddings 400: dimensions 65" /v1/embeddings '{"model":"emb","input":"a","dimensions":65}' dimensions '^dimensions: 65 is out of range \[1, 64\]'
bad "embeddings 400: dimensions a string" /v1/embeddings '{"model":"emb","input":"a","dimensions":"8"}' dimensions '^dimensions: must be an integer'
bad "embeddings 400: encoding_format int8" /v1/embeddings '{"model":"emb","input":"a","encoding_format":"int8"}' encoding_format '^encoding_format: must be "float" or "base64"'
bad "embeddings 400: user a number" /v1/embeddings '{"model":"emb","input":"a","user":3}' user '^user: must be a string'
bad "embeddings 400: an unknown field" /v1/embeddings '{"model":"emb","input":"a","truncate":true}' truncate "^unknown field 'truncate'"
bad "embeddings 400: past the context (2049 > 2048)" /v1/embeddings "{\"model\":\"emb\",\"input\":[[1],$long]}" 'input[1]' '^input\[1\]: 2049 tokens, more than the model.s context of 2048 tokens'
bad "embeddings 400: a chat alias" /v1/embeddings '{"model":"chat","input":"a"}' model "^model 'chat' is served with --task chat, and /v1/embeddings needs an embedding model \(--task embed\)"
bad "embeddings 400: a rerank alias" /v1/embeddings '{"model":"rr","input":"a"}' model "^model 'rr' is served with --task rerank, and /v1/embeddings needs an embedding model"
bad "rerank 400: an embed alias, by /rerank" /rerank '{"model":"emb","query":"q","documents":["a"]}' model "^model 'emb' is served with --task embed, and /rerank needs a rerank model"
bad "chat 400: an embed alias" /v1/chat/completions '{"model":"emb","messages":[{"role":"user","content":"hi"}]}' model "^model 'emb' is served with --task embed, and /v1/chat/completions needs a chat model \(--task chat\)"
bad "completions 400: a rerank alias" /v1/completions '{"model":"rr","prompt":"hi"}' model "^model 'rr' is served with --task rerank, and /v1/completions needs a chat model"
bad "responses 400: an embed alias" /v1/responses '{"model":"emb","input":"hi"}' model "^model 'emb' is served with --task embed, and /v1/responses needs a chat model"
st=$(c -o "$T/bad.json" -w '%{http_code}' "$URL/v1/messages" -H 'Content-Type: application/json' \
  -d '{"model":"rr","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}')
check "messages 400: a rerank alias, in Anthropic's error shape" \
  bash -c "[ $st = 400 ] && jq -e '.type == \"error\" and (.error.message | test(\"model .rr. is served with --task rerank, and /v1/messages needs a chat model\"))' '$T/bad.json'"

docs65=$(jq -nc '[range(65) | "d"]')
bad "rerank 400: malformed JSON" /v1/rerank '{"model":"rr",' "" 'invalid JSON'
bad "rerank 400: query missing" /v1/rerank '{"model":"rr","documents":["a"]}' query '^query: required'
bad "rerank 400: query a number" /v1/rerank '{"model":"rr","query":1,"documents":["a"]}' query '^query: must be a string'
bad "rerank 400: query empty" /v1/rerank '{"model":"rr","query":"","documents":["a"]}' query '^query: an empty string'
bad "rerank 400: documents missing" /v1/rerank '{"model":"rr","query":"q"}' documents '^documents: required'
bad "rerank 400: documents a string" /v1/rerank '{"model":"rr","query":"q","documents":"a"}' documents '^documents: must be an array'
bad "rerank 400: documents empty" /v1/rerank '{"model":"rr","query":"q","documents":[]}' documents '^documents: the array is empty'
bad "rerank 400: 65 documents" /v1/rerank "{\"model\":\"rr\",\"query\":\"q\",\"documents\":$docs65}" documents '^documents: 65 documents, at most 64 a request'
bad "rerank 400: a document a number" /v1/rerank '{"model":"rr","query":"q","documents":["a",2]}' 'documents[1]' '^documents\[1\]: must be a string or a \{"text": string\} object'
bad "rerank 400: a document object without text" /v1/rerank '{"model":"rr","query":"q","documents":[{"content":"a"}]}' 'documents[0]' "^documents\[0\]: unknown field 'content'"
bad "rerank 400: a document's text a number" /v1/rerank '{"model":"rr","query":"q","documents":[{"text":1}]}' 'documents[0].text' '^documents\[0\].text: required, a string'
bad "rerank 400: an empty document" /v1/rerank '{"model":"rr","query":"q","documents":["a",""]}' 'documents[1]' '^documents\[1\]: an empty string'
bad "rerank 400: top_n -1" /v1/rerank '{"model":"rr","query":"q","documents":["a"],"top_n":-1}' top_n '^top_n: -1 is out of range'
bad "rerank 400: return_documents a string" /v1/rerank '{"model":"rr","query":"q","documents":["a"],"return_documents":"yes"}' return_documents '^return_documents: must be true or false'
bad "rerank 400: instruction a number" /v1/rerank '{"model":"rr","query":"q","documents":["a"],"instruction":1}' instruction '^instruction: must be a string'
bad "rerank 400: an unknown field" /v1/rerank '{"model":"rr","query":"q","documents":["a"],"rank_fields":["x"]}' rank_fields "^unknown field 'rank_fields'"
bad "rerank 400: an embed alias" /v1/rerank '{"model":"emb","query":"q","documents":["a"]}' model "^model 'emb' is served with --task embed, and /v1/rerank needs a rerank model \(--task rerank\)"
bad "rerank 400: a chat alias, by /rerank (the route named as sent)" /rerank '{"model":"chat","query":"q","documents":["a"]}' model "^model 'chat' is served with --task chat, and /rerank needs a rerank model"
st=$(status POST /v1/rerank -d '{"model":"no","query":"q","documents":["a"]}')
check "rerank 404: an unknown model" test "$st" = 404
post /v1/chat/completions '{"model":"chat","messages":[{"role":"user","content":"hi"}],"max_tokens":2}' >"$T/chat.json"
check "the chat alias beside them still chats" jq -e '.choices[0].message.role == "assistant"' "$T/chat.json"

# ---- models, metrics ---------------------------------------------------
c "$URL/v1/models" >"$T/models.json"
check "/v1/models: each alias's task" jq -e '[.data[] | {(.id): .task}] | add == {"emb": "embed", "rr": "rerank", "chat": "chat"}' "$T/models.json"
check "/v1/models: the embed alias's pooling (last, no Pooling module) and dimensions" \
  jq -e '.data[] | select(.id == "emb") | .pooling == "last" and .dimensions == 64 and .chat == false' "$T/models.json"
c "$URL/metrics" >"$T/metrics.txt"
check "metrics: embeddings requests ok" grep -Eq '^memra_embed_requests_total\{model="emb",task="embed",reason="ok"\} 16$' "$T/metrics.txt"
check "metrics: rerank requests ok" grep -Eq '^memra_embed_requests_total\{model="rr",task="rerank",reason="ok"\} 6$' "$T/metrics.txt"
check "metrics: rerank documents scored" grep -Eq '^memra_embed_inputs_total\{model="rr",task="rerank"\} 12$' "$T/metrics.txt"
rr_tokens=$(jq '[.rerank.ids[] | length] | add' "$FIX")
check "metrics: rerank prompt tokens counted" grep -Eq "^memra_prompt_tokens_total\{model=\"rr\"\} $((rr_tokens * 3))$" "$T/metrics.txt"
check "metrics: /v1/embeddings 200s and 400s" bash -c "grep -q 'endpoint=\"/v1/embeddings\",status=\"200\"' '$T/metrics.txt' && grep -q 'endpoint=\"/v1/embeddings\",status=\"400\"' '$T/metrics.txt'"

# ---- the openai SDK ----------------------------------------------------
if [ -d tests/interop/node_modules/openai ]; then
  (cd tests/interop && timeout 60 node openai-embed.mjs "$URL" "../../$FIX" emb chat)
  rc=$?
  [ $rc -eq 0 ] && pass "openai SDK embeddings script exits 0" || fail "openai SDK embeddings script exits 0" "exit $rc"
else
  fail "openai SDK installed" "tests/interop/node_modules/openai is missing (scripts/deps.sh runs npm ci)"
fi
stop_server "$PID"
rc=$?
[ $rc -eq 0 ] && pass "the server drains and exits 0" || fail "the server drains and exits 0" "exit $rc"

# --task usage errors
expect_error "--task before any -m is bad usage" 2 'give it after the -m' memra-serve --task embed -m "x=$M"
expect_error "--task of an unknown name is bad usage" 2 "'vectors' is not chat, embed or rerank" memra-serve -m "x=$M" --task vectors
expect_error "--task twice for one -m is bad usage" 2 "'x' already has --task embed" memra-serve -m "x=$M" --task embed --task rerank

# ALIAS:TASK=MODEL: the task through MEMRA_MODELS (and -m)
MEMRA_MODELS="e2:embed=$M,r2:rerank=$M" start_server envtask -t 1 --max-sessions 1
if [ -n "$URL" ]; then
  check "MEMRA_MODELS alias:task=path serves e2 as embed, r2 as rerank" bash -c "
    grep -q 'e2 = .*, embed)' '$T/envtask.log' && grep -q 'r2 = .*, rerank)' '$T/envtask.log'"
  st=$(c -o "$T/envtask.json" -w '%{http_code}' "$URL/v1/rerank" -H 'Content-Type: application/json' \
    -d '{"model":"e2","query":"q","documents":["a"]}')
  check "MEMRA_MODELS task: a rerank request to e2 is the task mismatch 400" bash -c "
    [ $st = 400 ] && jq -e '.error.message | test(\"served with --task embed\")' '$T/envtask.json'"
  stop_server "$PID" >/dev/null
else
  fail "server from MEMRA_MODELS with alias:task starts" "$(tail -3 "$T/envtask.log")"
fi
expect_error "-m alias:task of an unknown task is bad usage" 2 "'vectors' is not chat, embed or rerank \\(ALIAS:TASK=MODEL\\)" memra-serve -m "x:vectors=$M"
expect_error "-m alias:task with --task too is bad usage" 2 "'x' already has --task embed" memra-serve -m "x:embed=$M" --task rerank
