# Programs take hf:owner/repo[:file] sources: a fake Hub on loopback serves a
# random checkpoint and a GGUF, memra-census and memra-convert read them
# through the Hugging Face cache, then offline from the cache alone.
source tests/integration/lib.bash
root=$T/hub-root
mkdir -p "$root/acme/tiny-qwen3" "$root/acme/tiny-gguf"
memra-convert --random tests/fixtures/configs/tiny-qwen3.json --seed 4 \
  --tokenizer tests/fixtures/tokenizers/bpe-qwen2 "$T/src" 2>/dev/null
cp "$T/src"/* "$root/acme/tiny-qwen3/"
memra-convert "$T/src" "$root/acme/tiny-gguf/tiny-Q.gguf" 2>/dev/null
node tests/tools/hub-server.js --root "$root" --port-file "$T/port" --log "$T/hub.log" \
  --time-limit 60 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 100); do [ -s "$T/port" ] && break; sleep 0.05; done
export HF_ENDPOINT=http://127.0.0.1:$(cat "$T/port") HF_HOME=$T/hf-home
unset HF_TOKEN HF_HUB_CACHE HF_HUB_OFFLINE

check "census of hf:owner/repo (safetensors checkpoint)" \
  bash -c "memra-census hf:acme/tiny-qwen3 --json | jq -e '.family == \"qwen3\" and .n_bound == .n_tensors'"
check "downloaded into the HF cache layout" \
  bash -c "[ -L $HF_HOME/hub/models--acme--tiny-qwen3/snapshots/*/model.safetensors ] && [ -s $HF_HOME/hub/models--acme--tiny-qwen3/refs/main ] && ls $HF_HOME/hub/models--acme--tiny-qwen3/blobs | grep . >/dev/null"
check "census of hf:owner/repo:file (one GGUF)" \
  bash -c "memra-census hf:acme/tiny-gguf:tiny-Q.gguf --json | jq -e '.format == \"gguf\" and .family == \"qwen3\"'"
check "convert from hf: source" memra-convert hf:acme/tiny-qwen3 "$T/from-hub.gguf"
expect_error "a GGUF-only repo asks for :FILE" 1 "tiny-Q\.gguf" memra-census hf:acme/tiny-gguf
expect_error "unknown repo: one line with 404" 1 "404|not found" memra-census hf:acme/nope
expect_error "bad spec rejected" 1 "hf:a/b/\.\./c" memra-census hf:a/b/../c
kill $server 2>/dev/null; wait $server 2>/dev/null
check "offline from the cache with the Hub gone" \
  bash -c "HF_HUB_OFFLINE=1 memra-census hf:acme/tiny-qwen3 --json | jq -e '.family == \"qwen3\"'"
expect_error "offline and not cached" 1 "HF_HUB_OFFLINE" env HF_HUB_OFFLINE=1 memra-census hf:acme/other
