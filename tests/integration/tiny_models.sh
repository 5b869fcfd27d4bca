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

# Perplexity on the committed held-out sample, against the figures PyTorch
# measured at training time (models/README.md): within 2%.
check "memra-tiny held-out perplexity within 2% of PyTorch's 93.2857" \
  bash -c "memra-parity models/memra-tiny.gguf --perplexity tests/fixtures/text/heldout-sample.txt --json -t 2 | jq -e '.predictions == 1105 and ((.perplexity / 93.2857 - 1) | fabs) < 0.02'"
check "memra-tiny-draft held-out perplexity within 2% of PyTorch's 85.9201" \
  bash -c "memra-parity models/memra-tiny-draft.gguf --perplexity tests/fixtures/text/heldout-sample.txt --json -t 2 | jq -e '((.perplexity / 85.9201 - 1) | fabs) < 0.02'"
expect_error "perplexity and reference are separate modes" 2 "separate modes" \
  memra-parity models/memra-tiny.gguf --perplexity tests/fixtures/text/heldout-sample.txt --reference x
