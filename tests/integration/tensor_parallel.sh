# Tensor parallel (--tp): every layer's heads and FFN columns split over
# ranks, the ranks' shares summed in rank order. On the CPU the ranks are
# CPU backends; the same code moves the activations between devices on
# CUDA (tests/gpu/ runs it there). The sums change the order of additions,
# so the checks are the parity bounds of one backend against transformers
# and against one backend, exact repetition run to run, and the same
# bytes for a request alone or among others; then the flags' errors.
source tests/integration/serve_common.bash
P=tests/fixtures/parity
ids=$(seq -s, 3 42)
for n in tiny-qwen3 tiny-qwen3-moe tiny-qwen3_5 tiny-qwen3_5-moe; do
  memra-convert --random "$P/configs/$n.json" --seed 1 --outtype f32 "$T/$n" 2>/dev/null
  for b in cpu-ref cpu; do
    check "$n on 2 ranks ($b) matches transformers within one backend's bounds" \
      bash -c "memra-parity '$T/$n' --reference $P/$n.safetensors --backend $b --tp 2 --json -t 2 |
               jq -e '.pass and .argmax_agree == .positions' >/dev/null"
  done
  check "$n: 2 ranks within 1e-5 of one backend (the sums in another order)" \
    bash -c "memra-parity '$T/$n' --backends cpu-ref,cpu-ref --tp 2 --prompt-ids $ids --json -t 2 |
             jq -e '.pass and .tp == 2 and .max_abs < 1e-5 and (.hidden_rel_err | max) < 1e-5' >/dev/null"
done

# fewer KV heads than ranks: ranks whose query heads read the same KV head
# each hold it (tiny-llama3: 1 KV head, 2 ranks; tiny-gemma3: 1 KV head, 4
# ranks; tiny-qwen3: 2 KV heads, 4 ranks)
for nt in tiny-llama3:2 tiny-gemma3:4 tiny-qwen3:4; do
  n=${nt%%:*} tp=${nt##*:}
  [ -d "$T/$n" ] || memra-convert --random "$P/configs/$n.json" --seed 1 --outtype f32 "$T/$n" 2>/dev/null
  check "$n on $tp ranks (KV heads shared by ranks) matches transformers" \
    bash -c "memra-parity '$T/$n' --reference $P/$n.safetensors --backend cpu-ref --tp $tp --json -t 2 |
             jq -e '.pass and .argmax_agree == .positions' >/dev/null"
done

# the hybrids as GGUF: llama.cpp's tiled order of DeltaNet value heads,
# each rank's value heads those that read its key heads
for n in tiny-qwen3_5 tiny-qwen3_5-moe; do
  memra-convert "$T/$n" "$T/$n.gguf" >/dev/null 2>&1
  check "$n GGUF on 2 ranks matches transformers within one backend's bounds" \
    bash -c "memra-parity '$T/$n.gguf' --reference $P/$n.safetensors --backend cpu-ref --tp 2 --json -t 2 |
             jq -e '.pass and .argmax_agree == .positions' >/dev/null"
done

# biases on q, k, v and the output projection: the output bias added once
memra-convert --random tests/fixtures/configs/tiny-llama-bias.json --seed 1 --outtype f32 "$T/tiny-llama-bias" 2>/dev/null
check "tiny-llama-bias: 2 ranks within 1e-5 of one backend (the output bias added once)" \
  bash -c "memra-parity '$T/tiny-llama-bias' --backends cpu-ref,cpu-ref --tp 2 --prompt-ids $ids --json -t 2 |
           jq -e '.pass and .max_abs < 1e-5' >/dev/null"

# quantized weights: the output and down projections' columns cut inside
# each row, whole Q8_0 blocks a rank
memra-convert "$T/tiny-qwen3" "$T/q3.gguf" --outtype bf16 >/dev/null 2>&1
memra-quantize "$T/q3.gguf" "$T/q3.q8.gguf" Q8_0 >/dev/null 2>&1
check "a Q8_0 GGUF on 2 ranks (the fast path) is within one backend's bounds" \
  bash -c "memra-parity '$T/q3.q8.gguf' --backends cpu,cpu --tp 2 --prompt-ids $ids --json -t 2 |
           jq -e '.pass and .tp == 2' >/dev/null"

# memra-gen: the same tokens every run; stories260K (8 heads, 4 KV heads)
# on 2 and 4 ranks
for mode in "--temp 0" "--temp 0.8 --seed 7"; do
  for tp in 2 4; do
    a=$(memra-gen "$STORIES" -p "Once upon a time" -n 48 $mode --ignore-eos --json -t 2 --tp $tp 2>/dev/null | jq -c .tokens)
    check "memra-gen $mode --tp $tp: the same 48 tokens run after run" \
      bash -c "[ -n '$a' ] && [ \"\$(memra-gen '$STORIES' -p 'Once upon a time' -n 48 $mode --ignore-eos --json -t 2 --tp $tp | jq -c .tokens)\" = '$a' ]"
  done
done

check "memra-bench --tp 2 reports its ranks" \
  bash -c "memra-bench '$STORIES' -p 16 -n 8 -r 1 --tp 2 --json -t 2 2>/dev/null | jq -e '.tp == 2 and .pp == 1' >/dev/null"

# memra-serve --tp 2: a request's bytes are memra-gen --tp 2's, alone or
# among three others (their decode steps batched)
start_server tp -m "m=$STORIES" --tp 2 -t 2
if [ -n "$URL" ]; then
  check "memra-serve --tp 2: four concurrent greedy completions are memra-gen --tp 2's" concurrent_like_gen "$STORIES" --tp 2
  stop_server "$PID"
else
  fail "memra-serve --tp 2 starts"
fi

# speculation with a draft model over the ranks: the bytes of plain decode
# on them (verification keeps a request's bytes; the draft runs split too)
TINY=$MEMRA_TEST_DATA/models/memra-tiny.gguf DRAFT=$MEMRA_TEST_DATA/models/memra-tiny-draft.gguf
start_server tpspec -m "m=$TINY" --draft "$DRAFT" --tp 2 -t 2
if [ -n "$URL" ]; then
  want=$(memra-gen "$TINY" -p "The quick brown fox" -n 40 --temp 0 --ignore-eos -t 2 --tp 2 2>/dev/null)
  got=$(post /v1/completions '{"model":"m","prompt":"The quick brown fox","max_tokens":40,"temperature":0,"ignore_eos":true}' | jq -r '.choices[0].text')
  check "memra-serve --tp 2 --draft: a speculated greedy completion is memra-gen --tp 2's" \
    bash -c '[ -n "$1" ] && [ "$1" = "$2" ]' _ "$want" "$got"
  check "memra-serve --tp 2 --draft: the request was speculated" \
    bash -c "curl -sS -m 10 '$URL/metrics' | awk '/^memra_spec_drafted_tokens_total/ { n += \$2 } END { exit !(n > 0) }'"
  stop_server "$PID"
else
  fail "memra-serve --tp 2 --draft starts"
fi

# Errors, each one line naming what is wrong
expect_error "heads that do not divide" 1 "8 heads and 4 KV heads do not split evenly over 3 tensor-parallel ranks" \
  memra-gen "$STORIES" -p hi -n 1 --backend cpu --tp 3
expect_error "--pp with --tp" 2 "--pp 2 with --tp 2: a model splits by layers or by heads, not both" \
  memra-gen "$STORIES" -p hi -n 1 --pp 2 --tp 2
expect_error "--tp past 8" 2 "--tp: 9 is out of range" memra-gen "$STORIES" -p hi -n 1 --tp 9
memra-convert --random "$P/configs/tiny-gemma4.json" --seed 1 --outtype f32 "$T/tiny-gemma4" 2>/dev/null
expect_error "gemma4 does not split by heads yet" 1 "the gemma4 family does not split over tensor-parallel ranks yet" \
  memra-gen "$T/tiny-gemma4" --prompt-ids 1,2 -n 1 --backend cpu --tp 2
memra-quantize "$T/tiny-qwen3_5.gguf" "$T/h.q8.gguf" Q8_0 >/dev/null 2>&1
expect_error "a DeltaNet rank's value heads must be whole blocks" 1 "'blk.0.ssm_out.weight': a tensor-parallel rank's 32 of its 64 columns \(in runs of 16 or more\) are not whole Q8_0 blocks" \
  memra-gen "$T/h.q8.gguf" --prompt-ids 1,2 -n 1 --backend cpu --tp 2
memra-quantize "$STORIES" "$T/s.q8.gguf" Q8_0 --keep 'ffn_down=F32' >/dev/null 2>&1
expect_error "a rank's columns must be whole blocks" 1 "'blk.0.attn_output.weight': a tensor-parallel rank's 16 of its 64 columns \(in runs of 16 or more\) are not whole Q8_0 blocks of 32" \
  memra-gen "$T/s.q8.gguf" -p hi -n 1 --backend cpu --tp 4
expect_error "--tp with --perplexity" 2 "--pp, --tp and --devices go with --reference or --backends" \
  memra-parity "$STORIES" --perplexity README.md --tp 2
expect_error "more devices than ranks" 2 "--tp 2 with --devices 0,1,2: one device per rank" \
  memra-serve -m "m=$STORIES" --backend cuda --devices 0,1,2 --tp 2
