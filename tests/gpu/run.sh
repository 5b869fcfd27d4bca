#!/usr/bin/env bash
# The CUDA backend's tests, for a machine with a GPU (CI has none):
#
#   1. memra-parity --kernels: every CUDA op against the CPU's, ALL GREEN
#      (with --perf, so the log also has time and GB/s per op)
#   2. the unit tests that need a device: test_cuda_engine (stories260K's
#      golden ids, batched == alone byte for byte, chunked prefill, every
#      family and weight format against the CPU), test_engine_sample
#      (sampling on the device token-identical to the host sampler on the
#      same logits, bf16 / q8_0 KV, device selection from other threads)
#      and test_cuda_device
#   2b. device selection: --device past the last refused naming the count;
#      with two or more GPUs, the last one runs the engine test and
#      memra-gen gives the same greedy ids on it as on device 0
#   2c. pipeline parallel: two stages on one card (or on cards 0 and 1)
#      give one device's logits and greedy ids; tensor parallel: two ranks
#      within one device's bounds, the same greedy ids every run
#   3. every family's HF parity fixture on CUDA (tests/fixtures/parity),
#      as an HF dir and as GGUF; stories260K and the project's tiny models
#   4. --backends cpu-ref,cuda on the same checkpoints
#   5. embeddings on CUDA against transformers (tests/integration/embed.sh), and
#      memra-serve's packed embeddings and rerank (tests/gpu/serve-embed.py)
#   6. speculative decoding on CUDA: memra-spec's self-consistency gate with
#      memra-tiny's draft model, a trimmed draft head and the n-gram drafter,
#      and tests/integration/serve_spec.sh against memra-serve on the device
#
# Run from the project root after `make && make unit-bins` (here, or on the
# development machine with bin/ and build/release/tests carried over).
# Prints PASS/FAIL/SKIP lines and "N passed, N failed, N skipped"; exits 1
# on any failure.
#
#   tests/gpu/run.sh [--sanitize] [--device N] [--skip-kernels]
#
# --skip-kernels leaves out parts 1 and 2 (a caller that ran the kernel
# check and the unit tests already, in the same call).
# --sanitize also runs the kernel check and the CUDA engine test under
# compute-sanitizer's memcheck (slow; needs a runtime where it works).
# Environment: MEMRA_TEST_DATA (the test data, scripts/fetch-test-data.sh;
# default build/test-data when it exists, else the repo root, whose models/
# holds stories260K.gguf), OUT (a folder for the logs; default a temp dir).
set -u -o pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
sanitize=0 device=0 skip_kernels=0
while [ $# -gt 0 ]; do
  case $1 in
    --sanitize) sanitize=1 ;;
    --device) device=$2; shift ;;
    --skip-kernels) skip_kernels=1 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "tests/gpu/run.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "${MEMRA_TEST_DATA:-}" ]; then
  if [ -d build/test-data ]; then MEMRA_TEST_DATA=$root/build/test-data; else MEMRA_TEST_DATA=$root; fi
fi
export MEMRA_TEST_DATA PATH="$root/bin:$PATH" CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-$device}
OUT=${OUT:-$(mktemp -d /tmp/memra-gpu.XXXXXX)}
mkdir -p "$OUT"
T=$(mktemp -d /tmp/memra-gpu-work.XXXXXX)
trap 'rm -rf "$T"' EXIT
export MEMRA_TEST_TMP=$T
for f in bin/memra-parity bin/memra-convert build/release/tests/test_cuda_engine; do
  [ -x "$f" ] || { echo "tests/gpu/run.sh: $f is missing: run make && make unit-bins first" >&2; exit 2; }
done
[ -f "$MEMRA_TEST_DATA/models/stories260K.gguf" ] ||
  { echo "tests/gpu/run.sh: no $MEMRA_TEST_DATA/models/stories260K.gguf (set MEMRA_TEST_DATA)" >&2; exit 2; }

passed=0 failed=0 skipped=0
pass() { echo "PASS $1"; passed=$((passed + 1)); }
skip() { echo "SKIP $1: $2"; skipped=$((skipped + 1)); }
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && echo "  $*"; failed=$((failed + 1)); }
# check NAME CMD...: passes when CMD exits 0; its output goes to $OUT/<n>.log.
n_check=0
check() {
  local name=$1; shift
  n_check=$((n_check + 1))
  local log=$OUT/$(printf '%03d' $n_check).log
  if "$@" >"$log" 2>&1; then pass "$name"
  else fail "$name" "($log) $(grep -m 3 -E 'memra-|FAIL|rror' "$log" | cut -c 1-300 | tr '\n' ' ')"; fi
}
# JSON on stdin satisfies a Python expression over j (python3 is on the
# GPU machine; jq may not be).
jtrue() { python3 -c "import json,sys; j=json.load(sys.stdin); sys.exit(0 if ($1) else 1)"; }
export -f jtrue

echo "== device"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -4

if [ $skip_kernels -eq 0 ]; then
echo "== kernels"
bin/memra-parity --kernels --perf --device 0 >"$OUT/kernels.log" 2>&1
rc=$?
cat "$OUT/kernels.log"
if [ $rc -eq 0 ] && tail -1 "$OUT/kernels.log" | grep -q '^ALL GREEN'; then pass "memra-parity --kernels: ALL GREEN"
else fail "memra-parity --kernels" "exit $rc: $(grep -E 'FAIL|device:' "$OUT/kernels.log" | head -5 | tr '\n' ' ')"; fi

echo "== unit tests on the device"
for t in test_cuda_engine test_engine_sample test_cuda_device; do
  [ -x build/release/tests/$t ] || { fail "$t" "not built"; continue; }
  out=$(build/release/tests/$t 2>&1); rc=$?
  echo "$out" | sed 's/^/  /'
  if echo "$out" | grep -q 'skipped: no CUDA device'; then fail "$t" "skipped: the test saw no device"
  elif [ $rc -ne 0 ] || echo "$out" | grep -q '^FAIL'; then fail "$t" "exit $rc"
  else pass "$t ($(echo "$out" | grep -c '^PASS') cases)"; fi
done
fi

echo "== device selection"
STORIES=$MEMRA_TEST_DATA/models/stories260K.gguf
check "memra-gen --device past the last: refused, naming the devices found" \
  bash -c "out=\$(memra-gen '$STORIES' --backend cuda --device 64 -n 1 2>&1); rc=\$?; echo \"\$out\"; [ \$rc -eq 1 ] && [[ \$out == *'device'*'found'* ]]"
check "memra-gen on CUDA: the same seed gives the same sampled tokens" \
  bash -c "a=\$(memra-gen '$STORIES' --backend cuda -n 40 --temp 0.9 --top-k 40 --top-p 0.9 --seed 7 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])'); b=\$(memra-gen '$STORIES' --backend cuda -n 40 --temp 0.9 --top-k 40 --top-p 0.9 --seed 7 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])'); echo \"\$a\"; [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"
ngpu=$(env -u CUDA_VISIBLE_DEVICES nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "${ngpu:-0}" -ge 2 ]; then
  last=$((ngpu - 1))
  check "test_engine_sample on all $ngpu devices (engine on device $last)" \
    env -u CUDA_VISIBLE_DEVICES build/release/tests/test_engine_sample
  check "memra-gen --device $last: the greedy ids of device 0" \
    bash -c "a=\$(env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --device 0 -n 30 --temp 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])'); b=\$(env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --device $last -n 30 --temp 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])'); echo \"\$a\"; [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"
else
  echo "  (one GPU: device selection across cards not exercised)"
fi

echo "== pipeline parallel (--pp): the bytes of one device"
# Two stages: on one card, or on cards 0 and 1 where there are two. A
# 600-token prompt: a 512-row chunk (the prefill GEMM, flash
# attention) then 88 rows, logits and hidden states; then greedy tokens.
pp_devs=0,0
[ "${ngpu:-0}" -ge 2 ] && pp_devs=0,1
pp_n=2
# 600 prompt ids below the tiny models' 256-token vocabulary
ids600=$(seq 0 599 | awk '{ print ($1 * 37 + 11) % 251 + 1 }' | paste -sd,)
for cfg in tiny-qwen3 tiny-qwen3_5; do
  memra-convert --random "tests/fixtures/parity/configs/$cfg.json" --seed 2 --outtype bf16 "$T/pp-$cfg" >/dev/null 2>&1
  check "$cfg: $pp_n stages on devices $pp_devs give one device's logits (max |diff| 0)" \
    env -u CUDA_VISIBLE_DEVICES memra-parity "$T/pp-$cfg" --backends cuda,cuda --pp "$pp_n" --devices "$pp_devs" \
    --prompt-ids "$ids600" --max-abs 0
done
check "memra-gen --pp $pp_n --devices $pp_devs: one device's greedy ids" \
  bash -c "a=\$(memra-gen '$STORIES' --backend cuda -n 40 --temp 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])'); b=\$(env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --pp $pp_n --devices $pp_devs -n 40 --temp 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])'); echo \"\$a\"; [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"

echo "== stages and ranks in processes of their own (--rank, NCCL): one process's tokens"
# NCCL refuses one card twice in a communicator: two cards are needed.
if [ "${ngpu:-0}" -ge 2 ]; then
  for mode in "--temp 0" "--temp 0.9 --seed 7"; do
    check "memra-gen $mode, stages 0 and 1 in processes on devices 0 and 1: one process's tokens" \
      bash -c "a=\$(memra-gen '$STORIES' --backend cuda -n 40 $mode --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])');
               id=$T/nccl-id.\$RANDOM
               env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --pp 2 --rank 1 --devices 1 --nccl-id \$id -n 40 $mode --json > $T/rank1.out &
               b=\$(env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --pp 2 --rank 0 --devices 0 --nccl-id \$id -n 40 $mode --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])');
               wait \$! || exit 1; echo \"\$a\"; [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ] && [ ! -s $T/rank1.out ]"
  done
  check "memra-gen --temp 0, tensor-parallel ranks 0 and 1 in processes on devices 0 and 1: one process's 2 ranks' tokens" \
    bash -c "a=\$(env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --tp 2 --devices 0,1 -n 40 --temp 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])');
             id=$T/nccl-id.\$RANDOM
             env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --tp 2 --rank 1 --devices 1 --nccl-id \$id -n 40 --temp 0 --json > $T/rank1.out &
             b=\$(env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --tp 2 --rank 0 --devices 0 --nccl-id \$id -n 40 --temp 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])');
             wait \$! || exit 1; echo \"\$a\"; [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"
  # a process that stops mid-run: the other fails within the limit, naming
  # the link (NCCL's asynchronous error), instead of waiting forever
  check "stages in processes: one that stops makes the other fail, naming the link" \
    bash -c "id=$T/nccl-id.\$RANDOM
             env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --pp 2 --rank 1 --devices 1 --nccl-id \$id -n 2 --temp 0 --ignore-eos > /dev/null 2>&1 &
             out=\$(timeout 120 env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --pp 2 --rank 0 --devices 0 --nccl-id \$id -n 200 --temp 0 --ignore-eos 2>&1 >/dev/null); rc=\$?; wait
             echo \"rc \$rc: \$out\"; [ \$rc -eq 1 ] && [[ \$out == *NCCL* ]]"
else
  skip "stages and ranks in processes of their own" "one GPU (NCCL takes one card once in a communicator)"
fi

echo "== tensor parallel (--tp): one device's bounds, the same bytes every run"
# Two ranks on the cards of the pipeline check: transformers' logits within
# the bounds one device meets, a 600-token prompt as close to the CPU
# reference as one device, and greedy ids the same run after run.
P=tests/fixtures/parity
for n in tiny-qwen3 tiny-qwen3-moe; do
  memra-convert --random "$P/configs/$n.json" --seed 1 --outtype f32 "$T/tp-$n" >/dev/null 2>&1
  check "$n: 2 ranks on devices $pp_devs match transformers" \
    env -u CUDA_VISIBLE_DEVICES memra-parity "$T/tp-$n" --reference "$P/$n.safetensors" --backend cuda \
    --tp 2 --devices "$pp_devs"
done
# as close to the CPU reference as one device (a change in an f32 sum's
# last bit can move a bf16 rounding of the activations)
check "tiny-qwen3 (bf16): 2 ranks as close to the CPU reference as one device over 600 ids" \
  bash -c "ids=$ids600; one=\$(memra-parity '$T/pp-tiny-qwen3' --backends cpu-ref,cuda --prompt-ids \$ids --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"max_abs\"])'); two=\$(env -u CUDA_VISIBLE_DEVICES memra-parity '$T/pp-tiny-qwen3' --backends cpu-ref,cuda --tp 2 --devices $pp_devs --prompt-ids \$ids --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"max_abs\"])'); echo \"one device \$one, 2 ranks \$two\"; python3 -c 'import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if b <= 2 * a + 1e-6 else 1)' \$one \$two"
check "memra-gen --tp 2 --devices $pp_devs: the same greedy ids twice" \
  bash -c "a=\$(env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --tp 2 --devices $pp_devs -n 40 --temp 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])'); b=\$(env -u CUDA_VISIBLE_DEVICES memra-gen '$STORIES' --backend cuda --tp 2 --devices $pp_devs -n 40 --temp 0 --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[\"tokens\"])'); echo \"\$a\"; [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"

echo "== HF parity fixtures on CUDA"
P=tests/fixtures/parity
for ref in "$P"/tiny-*.safetensors; do
  n=$(basename "$ref" .safetensors)
  if ! memra-convert --random "$P/configs/$n.json" --seed 1 --outtype f32 "$T/$n" >"$T/conv.log" 2>&1; then
    fail "$n: rebuild checkpoint" "$(cat "$T/conv.log")"; continue
  fi
  check "$n (HF dir) on CUDA matches transformers" \
    bash -c "memra-parity '$T/$n' --reference '$ref' --backend cuda --json | tee /dev/stderr | jtrue \"j['pass'] and j['argmax_agree'] == j['positions'] and j['first_divergent_hidden'] is None\""
  memra-convert "$T/$n" "$T/$n.gguf" >/dev/null 2>&1
  check "$n (GGUF) on CUDA matches transformers" \
    bash -c "memra-parity '$T/$n.gguf' --reference '$ref' --backend cuda --json | tee /dev/stderr | jtrue \"j['pass'] and j['argmax_agree'] == j['positions']\""
  check "$n: cuda agrees with cpu-ref (--backends)" \
    memra-parity "$T/$n" --backends cpu-ref,cuda --prompt-ids 1,7,42,99,3,250,17,64,128,5,11,200
  # A hybrid's prompt of 32+ rows runs the DeltaNet rule chunked (decision
  # 0027); with the f32 projections and attention its logits keep the gate.
  case $n in tiny-qwen3_5*)
    check "$n: a 48-token prompt (the chunked DeltaNet rule) agrees with cpu-ref" \
      env MEMRA_CUDA_GEMM=0 MEMRA_CUDA_FLASH=0 memra-parity "$T/$n" --backends cpu-ref,cuda \
      --prompt-ids "$(seq -s, 1 48)" ;;
  esac
done
# The f32 references are matched by the f32 path: prompt chunks of 32+ rows
# otherwise go through the bf16 tensor-core GEMM (x rounded to bf16; its
# bound is checked by the kernel check and test_cuda_engine), so these
# checks turn it off (MEMRA_CUDA_GEMM=0; docs/GPU.md), and with it the
# flash attention of prompt chunks over a bf16/f16 cache (q and p rounded
# to bf16; MEMRA_CUDA_FLASH=0).
check "stories260K on CUDA matches transformers (argmax 41/41: the greedy ids)" \
  env MEMRA_CUDA_GEMM=0 MEMRA_CUDA_FLASH=0 bash -c "memra-parity '$MEMRA_TEST_DATA/models/stories260K.gguf' --reference $P/stories260K.safetensors --backend cuda --json | tee /dev/stderr | jtrue \"j['pass'] and j['argmax_agree'] == 41\""
check "stories260K with f16 KV on CUDA keeps the argmax (>= 39/41)" \
  bash -c "memra-parity '$MEMRA_TEST_DATA/models/stories260K.gguf' --reference $P/stories260K.safetensors --backend cuda --kv f16 --max-abs 1 --json | jtrue \"j['argmax_agree'] >= 39\""
check "stories260K: cuda agrees with cpu-ref (--backends)" \
  memra-parity "$MEMRA_TEST_DATA/models/stories260K.gguf" --backends cpu-ref,cuda --prompt-ids 1,403,407,261,378,432,383,286,261,376,298
for m in memra-tiny memra-tiny-draft; do
  [ -f models/$m.gguf ] || continue
  check "$m on CUDA matches the PyTorch reference (argmax 48/48)" \
    env MEMRA_CUDA_GEMM=0 MEMRA_CUDA_FLASH=0 bash -c "memra-parity models/$m.gguf --reference $P/$m.safetensors --backend cuda --json | jtrue \"j['pass'] and j['argmax_agree'] == 48\""
done

echo "== embeddings on CUDA against transformers (tests/integration/embed.sh)"
emb_log=$OUT/embed.log
MEMRA_TEST_DATA=$MEMRA_TEST_DATA PATH=$root/bin:$PATH MEMRA_TEST_TMP=$(mktemp -d) \
  bash tests/integration/embed.sh >"$emb_log" 2>&1
grep -E '^(PASS|FAIL|SKIP)' "$emb_log" | grep -i cuda
p=$(grep -c '^PASS .*cuda' "$emb_log"); f=$(grep -c '^FAIL' "$emb_log")
passed=$((passed + p)); failed=$((failed + f))

echo "== memra-serve embeddings and rerank on CUDA against transformers (packed steps)"
# The fixture's model served for embed and rerank, 8-row packed steps from up to 3 inputs
# (tests/gpu/serve-embed.py checks the vectors, the order, the scores, repeatability).
if [ ! -x bin/memra-serve ]; then
  fail "memra-serve embeddings on CUDA" "bin/memra-serve is missing"
elif ! TOKS=$(bash scripts/fetch-tokenizers.sh 2>/dev/null) || [ ! -d "$TOKS/qwen3" ]; then
  skip "memra-serve embeddings on CUDA" "the Qwen3 tokenizer could not be fetched"
else
  memra-convert --random tests/fixtures/configs/tiny-qwen3-embed.json --tokenizer "$TOKS/qwen3" \
    --seed 7 "$T/emb.gguf" >/dev/null 2>&1
  memra-serve -m "emb=$T/emb.gguf" --task embed -m "rr=$T/emb.gguf" --task rerank --backend cuda \
    --prefill-chunk 8 --max-sessions 3 --port 0 >"$OUT/serve-embed.log" 2>&1 &
  spid=$!
  url=""
  for _ in $(seq 1 60); do
    url=$(grep -o 'http://[0-9.:]*' "$OUT/serve-embed.log" | head -1)
    [ -n "$url" ] && python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1] + '/readyz', timeout=2)" "$url" 2>/dev/null && break
    url=""; sleep 1
  done
  if [ -z "$url" ]; then
    fail "memra-serve embeddings on CUDA" "the server did not get ready: $(tail -2 "$OUT/serve-embed.log")"
  else
    check "memra-serve on CUDA: embeddings (cosine >= 0.999) and rerank (order, scores within 1e-3) match transformers, repeatably" \
      python3 tests/gpu/serve-embed.py "$url" tests/fixtures/embed/tiny-qwen3-embed.json
  fi
  kill $spid 2>/dev/null; wait $spid 2>/dev/null
fi

echo "== speculative decoding on CUDA (memra-spec's gate; tests/integration/serve_spec.sh)"
if [ ! -f models/memra-tiny.gguf ] || [ ! -f models/memra-tiny-draft.gguf ]; then
  skip "speculative decoding on CUDA" "models/memra-tiny*.gguf are missing"
else
  memra-trim-ranks models/memra-tiny.gguf "$T/ranks.gguf" --top 512 --n-gen 16 --backend cuda \
    >"$OUT/trim-ranks.log" 2>&1 || fail "memra-trim-ranks on CUDA" "$(tail -2 "$OUT/trim-ranks.log")"
  for d in "--draft models/memra-tiny-draft.gguf" \
           "--draft models/memra-tiny-draft.gguf --trim $T/ranks.gguf" "--ngram"; do
    check "memra-spec on CUDA, $d: SELF-CONSISTENCY PASS, drafts accepted, K = 1..8" \
      bash -c "memra-spec models/memra-tiny.gguf $d --backend cuda -K 1..8 -n 64 --json | jtrue \"j['self_consistency'] == 'PASS' and all(r['accepted'] > 0 for r in j['runs'])\""
  done
  if ! bash scripts/fetch-tokenizers.sh >/dev/null 2>&1; then
    skip "serve_spec.sh on CUDA" "the tokenizers could not be fetched"
  else
    spec_log=$OUT/serve_spec.log
    MEMRA_TEST_DATA=$MEMRA_TEST_DATA PATH=$root/bin:$PATH MEMRA_TEST_TMP=$(mktemp -d) \
      bash tests/integration/serve_spec.sh >"$spec_log" 2>&1
    grep -E '^FAIL' "$spec_log"
    p=$(grep -c '^PASS' "$spec_log"); f=$(grep -c '^FAIL' "$spec_log")
    echo "serve_spec.sh on CUDA: $p passed, $f failed ($spec_log)"
    passed=$((passed + p)); failed=$((failed + f))
  fi
fi

if [ $sanitize -eq 1 ]; then
  echo "== compute-sanitizer memcheck"
  if command -v compute-sanitizer >/dev/null; then
    check "memcheck: memra-parity --kernels" \
      compute-sanitizer --tool memcheck --error-exitcode 3 bin/memra-parity --kernels
    check "memcheck: test_cuda_engine" \
      compute-sanitizer --tool memcheck --error-exitcode 3 build/release/tests/test_cuda_engine
    check "racecheck: attention and norms" \
      compute-sanitizer --tool racecheck --error-exitcode 3 bin/memra-parity --kernels --only attention
  else
    fail "compute-sanitizer" "not on the PATH"
  fi
fi

echo "logs: $OUT"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
