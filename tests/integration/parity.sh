# memra-parity against the Hugging Face reference dumps in tests/fixtures/parity:
# every family's quirks on, the real stories260K model, and failures that
# must be caught. The parity runs name the CPU reference (--backend cpu-ref),
# the oracle whose gates these are; the fast path (cpu) is held to the
# reference by tests/unit/test_cpu_fast.c and the --backends check below.
source tests/integration/lib.bash
P=tests/fixtures/parity
for ref in "$P"/tiny-*.safetensors; do
  n=$(basename "$ref" .safetensors)
  memra-convert --random "$P/configs/$n.json" --seed 1 --outtype f32 "$T/$n" 2>"$T/err" ||
    { fail "$n: rebuild checkpoint" "$(cat "$T/err")"; continue; }
  check "$n (HF dir) matches transformers" \
    bash -c "memra-parity '$T/$n' --reference '$ref' --backend cpu-ref --json -t 2 | jq -e '.pass and .argmax_agree == .positions and .max_abs < 1e-5 and .first_divergent_hidden == null'"
  memra-convert "$T/$n" "$T/$n.gguf" 2>/dev/null
  check "$n (GGUF) matches transformers" \
    bash -c "memra-parity '$T/$n.gguf' --reference '$ref' --backend cpu-ref --json -t 2 | jq -e '.pass and .argmax_agree == .positions'"
  # a dump with MTP rows: the checkpoint's MTP block against transformers
  # running the same block (scripts/hf_reference.py), both namings
  case $n in *-mtp)
    check "$n: the MTP block matches the reference on every row (HF dir and GGUF)" \
      bash -c "for m in '$T/$n' '$T/$n.gguf'; do memra-parity \$m --reference '$ref' --backend cpu-ref --json -t 2 |
               jq -e '.mtp.pass and .mtp.argmax_agree == .mtp.rows and .mtp.rows == 2 * (.positions - 1) - (.positions / 2 | floor) + 1 and .mtp.max_abs < 1e-5' >/dev/null || exit 1; done" ;;
  esac
done
# An assistant (gemma4_assistant) drafting for tiny-gemma4: row q of the dump
# is transformers' assistant from the model's hidden state at q and token
# q + 1 over the model's K/V of positions 0..q (scripts/hf_reference.py
# --assistant); memra-parity --draft runs it as the engine drafts.
memra-convert --random "$P/configs/tiny-gemma4-assistant.json" --seed 1 --outtype f32 "$T/g4-assistant" 2>/dev/null
check "tiny-gemma4's assistant matches transformers on every row (logits and next hidden state)" \
  bash -c "memra-parity '$T/tiny-gemma4' --reference $P/assistant-tiny-gemma4.safetensors --draft '$T/g4-assistant' --backend cpu-ref --json -t 2 |
           jq -e '.pass and .assistant.pass and .assistant.argmax_agree == .assistant.rows and .assistant.rows == 35 and
                  .assistant.max_abs < 1e-4 and .assistant.hidden_rel_err < 1e-3'"
memra-convert --random "$P/configs/tiny-gemma4-assistant.json" --seed 2 --outtype f32 "$T/g4-assistant2" 2>/dev/null
expect_error "another assistant's weights fail the gate" 1 "beyond thresholds" \
  memra-parity "$T/tiny-gemma4" --reference $P/assistant-tiny-gemma4.safetensors --draft "$T/g4-assistant2" --backend cpu-ref
expect_error "assistant rows without --draft" 1 "give the assistant with --draft" \
  memra-parity "$T/tiny-gemma4" --reference $P/assistant-tiny-gemma4.safetensors
check "stories260K GGUF matches transformers on its reference ids" \
  bash -c "memra-parity '$DATA/models/stories260K.gguf' --reference $P/stories260K.safetensors --backend cpu-ref --json | jq -e '.pass and .argmax_agree == 41'"
check "table output ends with PASS" \
  bash -c "memra-parity '$DATA/models/stories260K.gguf' --reference $P/stories260K.safetensors --backend cpu-ref | tail -1 | grep 'PASS\$' >/dev/null"

# Caught: other weights (another seed), f16 KV under a tight gate.
memra-convert --random "$P/configs/tiny-qwen3.json" --seed 2 --outtype f32 "$T/other" 2>/dev/null
expect_error "other weights fail the gate" 1 "beyond thresholds" memra-parity "$T/other" --reference "$P/tiny-qwen3.safetensors" --backend cpu-ref
expect_error "a gate tighter than f16 KV rounding fails" 1 "beyond thresholds" \
  memra-parity "$DATA/models/stories260K.gguf" --reference "$P/stories260K.safetensors" --backend cpu-ref --kv f16 --max-abs 1e-9
check "f16 KV passes the default gate on stories260K's argmax" \
  bash -c "memra-parity '$DATA/models/stories260K.gguf' --reference $P/stories260K.safetensors --backend cpu-ref --kv f16 --json --max-abs 1 | jq -e '.argmax_agree >= 39'"

# Bad input.
expect_error "vocabulary mismatch named" 1 "vocabulary is 256 tokens, the reference's 512" \
  memra-parity "$T/other" --reference "$P/stories260K.safetensors"
expect_error "not a reference dump" 1 "no 'tokens' tensor" memra-parity "$T/other" --reference "$T/other/model.safetensors"
expect_error "reference required" 2 "--reference REF.safetensors .*is required" memra-parity "$T/other"
expect_error "--kernels is a mode of its own" 2 "--kernels is a mode of its own" memra-parity "$T/other" --reference "$P/tiny-qwen3.safetensors" --kernels
expect_error "--kernels on a missing device" 1 "CUDA device 99: not present|no CUDA backend" memra-parity --kernels --device 99
expect_error "--perf without --kernels" 2 "--perf goes with --kernels" memra-parity "$T/other" --reference "$P/tiny-qwen3.safetensors" --perf
expect_error "--backend names cpu, cpu-ref or cuda" 2 "backend 'gpu' is not cpu, cpu-ref or cuda" memra-parity "$T/other" --reference "$P/tiny-qwen3.safetensors" --backend gpu
expect_error "--backends needs ids" 2 "--backends needs --prompt-ids" memra-parity "$T/other" --backends cpu,cuda
check "--backends cpu,cpu agrees exactly" \
  bash -c "memra-parity '$DATA/models/stories260K.gguf' --backends cpu,cpu --prompt-ids 1,403,407,261 --json | jq -e '.pass and .max_abs == 0'"
check "--backends cpu-ref,cpu: the fast path passes the reference's gate" \
  bash -c "memra-parity '$DATA/models/stories260K.gguf' --backends cpu-ref,cpu --prompt-ids 1,403,407,261 --json | jq -e '.pass and .argmax_agree == 4 and .backend == \"cpu\" and .reference_backend == \"cpu-ref\"'"
expect_error "--against needs a text" 2 "--against needs the text" memra-parity "$T/other" --against x
expect_error "vocab-only model" 1 "vocab-only" memra-parity "$DATA/vocab/ggml-vocab-qwen2.gguf" --reference "$P/tiny-qwen3.safetensors"
