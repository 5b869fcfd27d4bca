# Pipeline parallel (--pp): the layers split over stages give the bytes of
# one backend. On the CPU a pipeline's stages are CPU backends; the same
# code passes the residual stream from stage to stage as it does between
# devices (tests/gpu/ run it on CUDA devices). Logits of every family that
# splits (memra-parity --backends ... --pp N --max-abs 0), memra-gen's
# tokens (greedy and seeded sampling), memra-serve's completions, and the
# flags' errors.
source tests/integration/serve_common.bash
P=tests/fixtures/parity
ids=$(seq -s, 3 42)
for n in tiny-llama3 tiny-qwen3 tiny-qwen3-moe tiny-gemma3 tiny-qwen3_5 tiny-qwen3_5-moe; do
  memra-convert --random "$P/configs/$n.json" --seed 1 --outtype f32 "$T/$n" 2>/dev/null
  layers=$(jq '.num_hidden_layers // .text_config.num_hidden_layers' "$P/configs/$n.json")
  for pp in 2 3; do
    [ "$pp" -le "$layers" ] || continue
    check "$n: a pipeline of $pp stages gives one backend's logits and hidden states, bit for bit" \
      bash -c "memra-parity '$T/$n' --backends cpu-ref,cpu-ref --pp $pp --prompt-ids $ids --max-abs 0 --json -t 2 |
               jq -e '.pass and .pp == $pp and .max_abs == 0 and (.hidden_rel_err | max) == 0' >/dev/null"
  done
done
# the fast path too, and a GGUF (its tied head on the last stage)
memra-convert "$T/tiny-gemma3" "$T/tiny-gemma3.gguf" >/dev/null 2>&1
check "tiny-gemma3 GGUF on the fast path: 2 stages, the bytes of one backend" \
  bash -c "memra-parity '$T/tiny-gemma3.gguf' --backends cpu,cpu --pp 2 --prompt-ids $ids --max-abs 0 --json -t 2 |
           jq -e '.pass and .max_abs == 0' >/dev/null"
check "memra-parity --reference on 2 stages matches transformers" \
  bash -c "memra-parity '$T/tiny-qwen3_5' --reference $P/tiny-qwen3_5.safetensors --backend cpu-ref --pp 2 --json -t 2 |
           jq -e '.pass and .argmax_agree == .positions' >/dev/null"

# memra-gen: greedy and seeded sampling, stories260K (a real model)
for mode in "--temp 0" "--temp 0.8 --seed 7"; do
  one=$(memra-gen "$STORIES" -p "Once upon a time" -n 48 $mode --ignore-eos --json -t 2 2>/dev/null | jq -c .tokens)
  for pp in 2 3; do
    check "memra-gen $mode --pp $pp: one backend's 48 tokens" \
      bash -c "[ \"\$(memra-gen '$STORIES' -p 'Once upon a time' -n 48 $mode --ignore-eos --json -t 2 --pp $pp | jq -c .tokens)\" = '$one' ]"
  done
done

# memra-serve --pp 2: a greedy completion is one backend's
start_server pp -m "m=$STORIES" --pp 2 -t 2
if [ -n "$URL" ]; then
  body='{"model":"m","prompt":"Once upon a time","max_tokens":32,"temperature":0,"ignore_eos":true}'
  text=$(memra-gen "$STORIES" -p "Once upon a time" -n 32 --temp 0 --ignore-eos -t 2 2>/dev/null)
  check "memra-serve --pp 2: a greedy completion is memra-gen's" \
    bash -c "[ \"\$(curl -sS -m 20 '$URL/v1/completions' -H 'Content-Type: application/json' -d '$body' | jq -r '.choices[0].text')\" = \"\$1\" ]" _ "$text"
  # four at once: batched decode steps through both stages, each request
  # the bytes it has alone
  check "memra-serve --pp 2: four concurrent greedy completions are memra-gen's" concurrent_like_gen "$STORIES"
  stop_server "$PID"
else
  fail "memra-serve --pp 2 starts"
fi

# Errors, each one line naming what is wrong
expect_error "--devices on the cpu backend" 2 "--devices 0,1: the cpu backend has no devices" \
  memra-gen "$STORIES" -p hi -n 1 --backend cpu --devices 0,1
expect_error "--pp past 8" 2 "--pp: 9 is out of range" memra-gen "$STORIES" -p hi -n 1 --pp 9
expect_error "more stages than layers" 1 "2 layers cannot fill a pipeline of 3 stages" \
  memra-gen "$T/tiny-llama3" --prompt-ids 1,2 -n 1 --backend cpu --pp 3
memra-convert --random "$P/configs/tiny-gemma4.json" --seed 1 --outtype f32 "$T/tiny-gemma4" 2>/dev/null
expect_error "gemma4's per-layer inputs stay on one device" 1 "gemma4 model's per-layer inputs .* runs on one device" \
  memra-gen "$T/tiny-gemma4" --prompt-ids 1,2 -n 1 --backend cpu --pp 2
expect_error "--pp with --perplexity" 2 "--pp, --tp and --devices go with --reference or --backends" \
  memra-parity "$STORIES" --perplexity README.md --pp 2
expect_error "a device list that is not a list" 2 "--devices: '0,,1' is not a comma-separated list" \
  memra-serve -m "m=$STORIES" --backend cuda --devices 0,,1
expect_error "stages and devices disagree" 2 "--pp 2 with --devices 0,1,2: one device per stage" \
  memra-bench "$STORIES" --backend cuda --pp 2 --devices 0,1,2
expect_error "--device and --devices together" 2 "--device and --devices: give one" \
  memra-gen "$STORIES" -p hi -n 1 --backend cuda --device 0 --devices 0,1
# Stages in processes of their own (--rank, --nccl-id; CUDA and NCCL, run
# by tests/gpu/emulate.sh and on a GPU machine): what is refused before
# any device is touched
expect_error "--rank on the cpu backend" 2 "--rank 0: stages in processes of their own talk through NCCL: use --backend cuda" \
  memra-gen "$STORIES" -p hi -n 1 --temp 0 --backend cpu --pp 2 --rank 0 --nccl-id "$T/id"
expect_error "--rank without --pp" 2 "--rank 0: name the pipeline's stages with --pp N" \
  memra-gen "$STORIES" -p hi -n 1 --temp 0 --backend cpu --rank 0 --nccl-id "$T/id"
expect_error "--rank past the stages" 2 "--rank 2: --pp 2 has ranks 0 to 1" \
  memra-gen "$STORIES" -p hi -n 1 --temp 0 --backend cpu --pp 2 --rank 2 --nccl-id "$T/id"
expect_error "--rank with no way to meet" 2 "--rank 1: the processes meet through --nccl-id FILE" \
  env -u NCCL_COMM_ID memra-gen "$STORIES" -p hi -n 1 --temp 0 --backend cuda --pp 2 --rank 1
expect_error "--nccl-id without --rank" 2 "--nccl-id $T/id without --rank" \
  memra-gen "$STORIES" -p hi -n 1 --temp 0 --pp 2 --nccl-id "$T/id"
expect_error "--rank sampling without a seed" 2 "--rank 0 with --temp 0.8: give --seed" \
  memra-gen "$STORIES" -p hi -n 1 --backend cpu --pp 2 --rank 0 --nccl-id "$T/id"
expect_error "memra-bench --rank on the cpu backend" 2 "--rank 1: stages in processes of their own talk through NCCL" \
  memra-bench "$STORIES" --backend cpu -p 8 -n 0 --pp 2 --rank 1 --nccl-id "$T/id"
expect_error "memra-bench --rank with --server" 2 "--rank goes with the model or tokenizer bench, not --server" \
  memra-bench --server http://127.0.0.1:9 --rank 0
expect_error "--rank with --embed" 2 "--rank with --embed: an embedding reads the last stage's hidden states" \
  memra-gen "$STORIES" -p hi --embed --backend cuda --pp 2 --rank 0 --nccl-id "$T/id"
expect_error "memra-serve --rank: not built, named" 2 "--rank, --nccl-id: memra-serve runs every stage or rank of a model in its one process" \
  memra-serve -m "m=$STORIES" --rank 1
expect_error "memra-parity --nccl-id: not built, named" 2 "--rank, --nccl-id: memra-parity reads every layer's hidden states" \
  memra-parity "$STORIES" --nccl-id "$T/id"
