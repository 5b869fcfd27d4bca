# memra-census on real files from other tools, on our own checkpoints, and
# on broken ones: every failure one line, exit 1; bad usage exit 2.
source tests/integration/lib.bash
STORIES=$DATA/models/stories260K.gguf

# The real TinyStories model: llama, all 48 tensors bound.
check "stories260K json: family llama, 48 tensors all bound" \
  bash -c "memra-census '$STORIES' --json | jq -e '.family == \"llama\" and .n_tensors == 48 and .n_bound == 48 and .config.dim == 64 and .config.n_layers == 5 and .config.n_kv_heads == 4 and .config.n_vocab == 512'"
check "stories260K json: every tensor has a role, bytes add up" \
  bash -c "memra-census '$STORIES' --json | jq -e '([.tensors[] | select(.role == \"ignored\")] | length) == 0 and ([.tensors[].bytes] | add) == .totals.bytes and .totals.by_dtype.F32 == .totals.bytes'"
check "stories260K decode bytes: all weights but the embedding rows" \
  bash -c "memra-census '$STORIES' --json | jq -e '.decode.bytes_per_token < .totals.bytes and .decode.bytes_per_token > 0 and (.decode.ceiling_tok_s - 4500e9 / .decode.bytes_per_token | fabs) < 1'"
check "stories260K table names the family and the decode ceiling" \
  bash -c "memra-census '$STORIES' | grep 'family llama' >/dev/null && memra-census '$STORIES' | grep 'tok/s at 4500 GB/s' >/dev/null"
check "--bandwidth and MEMRA_BANDWIDTH set the ceiling, the flag wins" \
  bash -c "a=\$(MEMRA_BANDWIDTH=1000 memra-census '$STORIES' --json | jq '.decode.bandwidth_gbs | floor'); b=\$(MEMRA_BANDWIDTH=1000 memra-census '$STORIES' --json --bandwidth 3350 | jq '.decode.bandwidth_gbs | floor'); [ \"\$a\" = 1000 ] && [ \"\$b\" = 3350 ]"

# Vocab-only GGUFs written by other tools.
for v in "$DATA"/vocab/*.gguf; do
  check "vocab-only $(basename "$v")" \
    bash -c "memra-census '$v' --json | jq -e '.vocab_only == true and .tokenizer.n_tokens > 100'"
done

# Bad usage: exit 2, one line.
expect_error "no model: usage error" 2 "no MODEL given" memra-census
expect_error "unknown flag: usage error" 2 "unknown option '--frobnicate'" memra-census "$STORIES" --frobnicate
expect_error "bad bandwidth: usage error" 2 "--bandwidth: 'fast' is not a number" memra-census "$STORIES" --bandwidth fast
expect_error "missing file" 1 "nope.gguf: .*(no such file|cannot open)" memra-census "$T/nope.gguf"

# Contract violations on an HF dir: edit its config so tensors no longer fit.
memra-convert --random tests/fixtures/configs/tiny-llama.json "$T/tiny" --seed 3 >/dev/null 2>&1
check "random tiny llama dir binds" bash -c "memra-census '$T/tiny' --json | jq -e '.n_bound == .n_tensors'"
check "llama: KV per token over every layer, no recurrent state" \
  bash -c "memra-census '$T/tiny' --json | jq -e '.memory.attention_layers == .config.n_layers and .memory.kv_layers == .config.n_layers and .memory.recurrent_state_bytes_per_sequence == 0 and .memory.kv_bytes_per_token_bf16 == 2 * .config.n_layers * .config.n_kv_heads * .config.head_dim * 2'"
# the hybrid: 2 of its 4 layers attend; each DeltaNet layer keeps a conv
# window [3][2*2*16 + 4*16] and a state [4][16][16], f32
memra-convert --random tests/fixtures/configs/tiny-qwen3_5.json "$T/q35.gguf" --seed 3 >/dev/null 2>&1
check "qwen3_5: KV of the 2 attention layers, 2 x 5632 bytes of recurrent state" \
  bash -c "memra-census '$T/q35.gguf' --json | jq -e '.n_bound == .n_tensors and .memory == {attention_layers: 2, kv_layers: 2, kv_bytes_per_token_bf16: 512, recurrent_layers: 2, recurrent_state_bytes_per_sequence: 11264}'"
check "qwen3_5: the table names the recurrent state and the recurrent group" \
  bash -c "memra-census '$T/q35.gguf' --no-tensors | grep -q 'recurrent state 11.3 kB (2 DeltaNet layers' && memra-census '$T/q35.gguf' --no-tensors | grep -q '^  recurrent '"
# gemma4: 6 layers, the last 2 reading layers 3 and 2's K/V; rows as wide
# as the widest layer (2 x 16 sliding, 1 x 32 full): 4 x 32 values each
memra-convert --random tests/fixtures/configs/tiny-gemma4.json "$T/g4.gguf" --seed 3 >/dev/null 2>&1
check "gemma4: KV of the 4 layers keeping their own, rows of the widest layer" \
  bash -c "memra-census '$T/g4.gguf' --json | jq -e '.n_bound == .n_tensors and .memory.attention_layers == 6 and .memory.kv_layers == 4 and .memory.kv_bytes_per_token_bf16 == 512 and .config.head_dim_full == 32 and .config.n_kv_heads_full == 1 and .config.attn_k_eq_v and .config.ple_dim == 8 and .config.rope_full_angles == 4'"
check "gemma4: the table says how many layers keep K/V" \
  bash -c "memra-census '$T/g4.gguf' --no-tensors | grep -q '6 of 6 layers attend, 4 keep K/V'"
check "gemma4: the layers line (kinds, head sizes, V = K, proportional RoPE, sharing, PLE)" \
  bash -c "memra-census '$T/g4.gguf' --no-tensors | grep -qx 'layers: 2 full (head_dim 32, kv 1, V = K, 4 of 16 rope pairs turn), 4 sliding (window 4); the last 2 share K/V (ffn doubled); per-layer embeddings of 8'"
mkdir -p "$T/more" "$T/fewer" "$T/wide"
cp "$T/tiny"/* "$T/more/"; cp "$T/tiny"/* "$T/fewer/"; cp "$T/tiny"/* "$T/wide/"
jq '.num_hidden_layers += 1' "$T/tiny/config.json" >"$T/more/config.json"
jq '.num_hidden_layers -= 1' "$T/tiny/config.json" >"$T/fewer/config.json"
jq '.intermediate_size += 8' "$T/tiny/config.json" >"$T/wide/config.json"
expect_error "missing tensor is named" 1 "missing.*model\.layers\.[0-9]+\." memra-census "$T/more"
expect_error "unknown tensor is named" 1 "model\.layers\.[0-9]+\..*not part of the llama tensor contract" memra-census "$T/fewer"
expect_error "wrong shape is named" 1 "mlp\..*shape" memra-census "$T/wide"

# Malformed GGUF and safetensors files: a clean one-line error, also under
# ASan + UBSan (the san build of the same program).
mal=$T/malformed; mkdir -p "$mal"
head -c 100 "$STORIES" >"$mal/truncated.gguf"
printf 'GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f\x00\x00\x00\x00\x00\x00\x00\x00' >"$mal/absurd-count.gguf"
printf 'GGUF\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00' >"$mal/version1.gguf"
printf 'NOPE\x03\x00\x00\x00' >"$mal/badmagic.gguf"
: >"$mal/empty.gguf"
mkdir -p "$mal/st-absurd" "$mal/st-notjson" "$mal/st-overlap" "$mal/st-dtype"
for d in st-absurd st-notjson st-overlap st-dtype; do cp "$T/tiny/config.json" "$mal/$d/"; done
printf '\x00\x00\x00\x00\x00\x00\x00\x10{}' >"$mal/st-absurd/model.safetensors"
printf '\x08\x00\x00\x00\x00\x00\x00\x00{"a":1,}' >"$mal/st-notjson/model.safetensors"
h='{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'
printf "$(printf '\\x%02x' ${#h})\x00\x00\x00\x00\x00\x00\x00%s%s" "$h" "0123456789ab" >"$mal/st-overlap/model.safetensors"
h='{"a":{"dtype":"F7","shape":[2],"data_offsets":[0,8]}}'
printf "$(printf '\\x%02x' ${#h})\x00\x00\x00\x00\x00\x00\x00%s%s" "$h" "01234567" >"$mal/st-dtype/model.safetensors"
for bin in bin "$SAN_BIN"; do
  tag=$([ "$bin" = bin ] && echo release || echo asan)
  expect_error "$tag: truncated GGUF" 1 "truncated\.gguf: .*(end of file|truncated|past|cannot fit)" "$bin/memra-census" "$mal/truncated.gguf"
  expect_error "$tag: absurd tensor count" 1 "absurd-count\.gguf: .*(tensor|count)" "$bin/memra-census" "$mal/absurd-count.gguf"
  expect_error "$tag: GGUF version 1" 1 "version1\.gguf: .*version 1" "$bin/memra-census" "$mal/version1.gguf"
  expect_error "$tag: not a GGUF" 1 "badmagic\.gguf: .*(magic|not a GGUF)" "$bin/memra-census" "$mal/badmagic.gguf"
  expect_error "$tag: empty file" 1 "empty\.gguf: " "$bin/memra-census" "$mal/empty.gguf"
  expect_error "$tag: safetensors absurd header length" 1 "model\.safetensors: .*header" "$bin/memra-census" "$mal/st-absurd"
  expect_error "$tag: safetensors header not JSON" 1 "model\.safetensors: .*JSON" "$bin/memra-census" "$mal/st-notjson"
  expect_error "$tag: safetensors overlapping offsets" 1 "model\.safetensors: .*overlap" "$bin/memra-census" "$mal/st-overlap"
  expect_error "$tag: safetensors unknown dtype" 1 "model\.safetensors: .*F7" "$bin/memra-census" "$mal/st-dtype"
done

# One set of role names: the tensors' roles and groups are exactly the keys
# their bytes are summed under in totals.by_role and totals.by_group.
check "census --json: tensors' roles and groups sum to totals.by_role and by_group" \
  bash -c "memra-census models/memra-tiny.gguf --json | jq -e '
    (reduce .tensors[] as \$t ({}; .[\$t.role] += \$t.bytes)) == .totals.by_role and
    (reduce .tensors[] as \$t ({}; .[\$t.group] += \$t.bytes)) == .totals.by_group and
    (.totals.by_group | add) == .totals.bytes'"
