# The project's own trained models (models/): they bind, carry their
# tokenizer, and match the PyTorch reference dumps made at training time.
source tests/integration/lib.bash
P=tests/fixtures/parity
for m in memra-tiny memra-tiny-draft; do
  check "$m: binds as qwen3 with its tokenizer and chat template" \
    bash -c "memra-census models/$m.gguf --json | jq -e '.family == \"qwen3\" and .n_bound == .n_tensors and .tokenizer.n_tokens == 4096 and .tokenizer.chat_template'"
  check "$m: matches the PyTorch reference (argmax 48/48)" \
    bash -c "memra-parity models/$m.gguf --reference $P/$m.safetensors --json -t 2 | jq -e '.pass and .argmax_agree == 48 and .first_divergent_hidden == null'"
done
check "the committed models stay under 12 MB" bash -c "[ \$(cat models/*.gguf | wc -c) -lt 12000000 ]"
