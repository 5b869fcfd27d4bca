# GGUF files memra writes, read by an independent GGUF reader (the npm
# @huggingface/gguf parser, pinned in tests/interop): same architecture,
# tensor names, types and shapes as memra-census reports.
source tests/integration/lib.bash
READER="node tests/interop/gguf-read.mjs"
CFG=tests/fixtures/configs

# the reader's view and census's view, normalized to one form
theirs() { $READER "$1" | jq -c '[.tensors[] | {name, type, ne}] | sort_by(.name)'; }
ours() {
  memra-census "$1" --json | jq -c '{"F32":0,"F16":1,"Q8_0":8,"BF16":30} as $id |
    [.tensors[] | {name, type: $id[.dtype], ne: (.shape | reverse)}] | sort_by(.name)'
}
agree() { local a b; a=$(theirs "$1") && b=$(ours "$1") && [ -n "$a" ] && [ "$a" = "$b" ]; }
export -f theirs ours agree
export READER

check "reader works on a file from another tool (stories260K)" \
  bash -c "$READER '$DATA/models/stories260K.gguf' | jq -e '.architecture == \"llama\" and (.tensors | length) == 48 and .n_tokens == 512'"
check "reader and census agree on stories260K" agree "$DATA/models/stories260K.gguf"
for f in llama llama3 qwen2 qwen3 qwen3-moe gemma3; do
  memra-convert --random "$CFG/tiny-$f.json" --seed 2 --tokenizer tests/fixtures/tokenizers/bpe-qwen2 "$T/$f.gguf" 2>"$T/conv.err" ||
    { fail "$f: random GGUF" "$(cat "$T/conv.err")"; continue; }
  check "$f: independent reader parses our GGUF" bash -c "$READER '$T/$f.gguf' | jq -e '.version == 3 and .n_tokens > 0'"
  check "$f: independent reader sees census's tensors" agree "$T/$f.gguf"
done
check "stories260K -> HF -> GGUF read by the independent reader" \
  bash -c "memra-convert '$DATA/models/stories260K.gguf' '$T/s-hf' && memra-convert '$T/s-hf' '$T/s.gguf' && agree '$T/s.gguf' && $READER '$T/s.gguf' | jq -e '.architecture == \"llama\" and .n_tokens == 512'"
