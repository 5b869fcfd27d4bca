#!/usr/bin/env bash
# The GPU suite again on the latest code, memra-serve on the CUDA backend
# (streamed completion, chat, 16 concurrent greedy requests byte-identical
# to each alone), and the tokenizer benchmark on a quiet host core. Carry
# bin, the two CUDA test binaries, build/shared (stories260K, qwen2 vocab)
# and build/tokref.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee "$OUT/final-check.log") 2>&1
export PATH=$PWD/bin:$PATH MEMRA_SHARED=$PWD/build/shared
echo "== tests/gpu/run.sh"
OUT=$OUT/gpu timeout 300 bash tests/gpu/run.sh 2>&1 | grep -E "^(PASS|FAIL)|passed|ALL GREEN" | tail -40
echo "== memra-serve on CUDA"
memra-serve -m tiny=models/memra-tiny.gguf -m stories=build/shared/models/stories260K.gguf \
  --port 18080 --max-sessions 16 2>"$OUT/serve.err" &
srv=$!
for _ in $(seq 100); do curl -s localhost:18080/readyz >/dev/null 2>&1 && break; sleep 0.2; done
cat "$OUT/serve.err"
curl -sN localhost:18080/v1/completions -H 'Content-Type: application/json' \
  -d '{"model":"tiny","prompt":"The whale","max_tokens":24,"stream":true,"temperature":0}' | head -3
curl -s localhost:18080/v1/chat/completions -H 'Content-Type: application/json' \
  -d '{"model":"tiny","messages":[{"role":"user","content":"hi"}],"max_tokens":8,"temperature":0}' | jq -c '.choices[0].message, .usage'
req() { curl -s localhost:18080/v1/completions -H 'Content-Type: application/json' \
  -d "{\"model\":\"tiny\",\"prompt\":\"$1\",\"max_tokens\":48,\"temperature\":0}" | jq -r '.choices[0].text'; }
prompts=("The whale" "Fellow-Citizens of the Senate" "Call me" "It was" "The ship" "In the year" "Our country" "The sea")
for i in "${!prompts[@]}"; do req "${prompts[$i]}" >"$OUT/alone.$i"; done
for k in 0 1; do for i in "${!prompts[@]}"; do req "${prompts[$i]}" >"$OUT/conc.$k.$i" & done; done; wait
ok=1; for k in 0 1; do for i in "${!prompts[@]}"; do cmp -s "$OUT/alone.$i" "$OUT/conc.$k.$i" || { ok=0; echo "DIFF prompt $i copy $k"; }; done; done
[ $ok = 1 ] && echo "PASS 16 concurrent greedy requests on CUDA = each alone, byte for byte" || echo "FAIL byte identity"
curl -s localhost:18080/metrics | grep -E "^memra_(requests|generated|kv)" | head -8
kill $srv; wait $srv 2>/dev/null
echo "== tokenizer benchmark, one core"
mkdir -p /tmp/tk/qwen3 && gunzip -c build/tokref/qwen3/tokenizer.json.gz > /tmp/tk/qwen3/tokenizer.json
for i in 1 2; do
  memra-bench /tmp/tk/qwen3 --tokenizer -r 9 2>&1 | tail -1
  memra-bench build/shared/vocab/ggml-vocab-qwen2.gguf --tokenizer -r 9 2>&1 | tail -1
done
