#!/usr/bin/env bash
# memra-serve on the GPU machine (CUDA backend by default there): 16
# concurrent greedy requests must equal each request alone, byte for byte;
# then the tokenizer benchmark on one quiet host core. Carry bin,
# build/shared and build/tokref/qwen3.
set -u
export PATH=$PWD/bin:$PATH
t=$(mktemp -d)
memra-serve -m tiny=models/memra-tiny.gguf --port 18082 --max-sessions 16 2>"$t/serve.err" &
srv=$!
for _ in $(seq 100); do curl -sf localhost:18082/readyz >/dev/null && break; sleep 0.2; done
head -2 "$t/serve.err"
req() { curl -s localhost:18082/v1/completions -H 'Content-Type: application/json' \
  -d "{\"model\":\"tiny\",\"prompt\":\"$1\",\"max_tokens\":48,\"temperature\":0}" | jq -r '.choices[0].text'; }
prompts=("The whale" "Fellow-Citizens of the Senate" "Call me" "It was" "The ship" "In the year" "Our country" "The sea")
for i in "${!prompts[@]}"; do req "${prompts[$i]}" >"$t/alone.$i"; done
pids=()
for k in 0 1; do for i in "${!prompts[@]}"; do req "${prompts[$i]}" >"$t/conc.$k.$i" & pids+=($!); done; done
wait "${pids[@]}"
ok=1
for k in 0 1; do for i in "${!prompts[@]}"; do
  cmp -s "$t/alone.$i" "$t/conc.$k.$i" || { ok=0; echo "DIFF prompt $i copy $k"; }
done; done
[ "$(cat "$t/alone.0")" != null ] || ok=0
echo "alone.0: $(head -c 80 "$t/alone.0")"
[ $ok = 1 ] && echo "PASS 16 concurrent greedy requests on CUDA = each alone, byte for byte" || echo "FAIL byte identity"
kill $srv; wait $srv 2>/dev/null
mkdir -p "$t/qwen3" && gunzip -c build/tokref/qwen3/tokenizer.json.gz >"$t/qwen3/tokenizer.json"
memra-bench "$t/qwen3" --tokenizer -r 9 2>&1 | tail -1
memra-bench build/shared/vocab/ggml-vocab-qwen2.gguf --tokenizer -r 9 2>&1 | tail -1
