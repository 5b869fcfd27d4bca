#!/usr/bin/env bash
# The CUDA backend on a machine without a GPU: builds the real kernels and
# host code against a CPU emulation of the CUDA execution model and runtime
# (tests/gpu/emu/: fibers for threads, real barriers and warp shuffles,
# host memory for device memory), then runs memra-parity --kernels,
# test_engine_sample (sampling on the device through the engine, KV types,
# device selection on two emulated devices), two processes of a pipeline
# and of tensor parallel (--rank, NCCL emulated over Unix sockets by
# tests/gpu/emu/emu_nccl.cpp), test_cuda_engine (pipeline stages and
# tensor-parallel ranks on two emulated devices), the HF parity fixtures on
# the emulated device, a pipeline's bytes against one device's, tensor
# parallel against transformers, and the rest of the separate-process
# cases (2 to 4 processes, memra-bench, refusals, a process that stops). It
# checks what the kernels compute (indices, reductions, barriers, batch
# invariance, alignment of 16-byte loads; with --asan every out-of-bounds
# access), not speed, nor anything that needs real concurrency.
#
#   tests/gpu/emulate.sh [--asan] [--quick] [--only OP]
#
# --quick: only the kernel check, test_engine_sample and the two-process
# checks; --only OP: only
# that op's checks (implies --quick, skips test_engine_sample). Build output
# in build/emu[-asan]/.
set -euo pipefail
cd "$(dirname "$0")/../.."
asan=0 quick=0 only=()
while [ $# -gt 0 ]; do
  case $1 in
    --asan) asan=1 ;;
    --quick) quick=1 ;;
    --only) only=(--only "$2"); quick=1; shift ;;
    *) echo "tests/gpu/emulate.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
B=build/emu$([ $asan = 1 ] && echo -asan || true)
SAN=$([ $asan = 1 ] && echo "-fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined" || true)
mkdir -p "$B/obj" "$B/kernels" "$B/bin" "$B/tests"
CPPFLAGS="-Ilib -I. -Ikernels -D_GNU_SOURCE -DMEMRA_CUDA=1 -I$CUDA_HOME/include"
CFLAGS="-std=c11 -g -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -pthread -O1 $SAN"
CXXFLAGS="-std=c++17 -g -O1 -ffp-contract=off -Wall -Wno-unknown-pragmas -Wno-unused-parameter -Wno-psabi -pthread $SAN"
export CPPFLAGS CFLAGS CXXFLAGS B

echo "emulate: building into $B"
# Objects are rebuilt when their source is newer; a changed header (a struct
# layout) rebuilds everything, or stale objects would disagree about it.
hdr=$(find lib kernels tests/gpu/emu \( -name '*.h' -o -name '*.cuh' \) -print0 | sort -z |
      xargs -0 cat | sha256sum | cut -c1-64)
if [ "$(cat "$B/headers.sha256" 2>/dev/null)" != "$hdr" ]; then
  rm -f "$B"/obj/*.o
  echo "$hdr" > "$B/headers.sha256"
fi
# The library's C sources, as the Makefile builds them with CUDA=1.
ls lib/core/*.c lib/numerics/*.c lib/format/*.c lib/quant/*.c lib/hub/*.c lib/jinja/*.c \
   lib/tok/*.c lib/grammar/*.c lib/model/*.c lib/engine/*.c lib/backend/*.c lib/check/*.c \
   lib/backend/cpu/*.c lib/backend/cuda/*.c bin-src/memra-parity.c bin-src/memra-convert.c \
   bin-src/memra-gen.c bin-src/memra-bench.c lib/bench/*.c bin-src/memra-bench/*.c \
   tests/unit/test_cuda_engine.c tests/unit/test_engine_sample.c 2>/dev/null |
  xargs -P "$(nproc)" -I{} bash -c 'o=$B/obj/$(echo {} | tr / _).o; [ "$o" -nt {} ] || gcc $CPPFLAGS $CFLAGS -c {} -o $o'
# The kernels, rewritten for the emulation: launches, dynamic shared memory,
# and each static __shared__ declaration followed by emu::note_shared of
# its objects, so a block's static and dynamic bytes meet the device's
# limit together (the headers too, under $B/kernels/kernels, found first).
shared_rule='s/extern __shared__ (\w+) (\w+)\[\];/$1 *$2 = emu::dyn_smem<$1>();/;
  s{^(\s*)__shared__\s+(.*?);(.*)$}{
    my ($i, $d, $r) = ($1, $2, $3); (my $f = $d) =~ s/\[[^\]]*\]//g; $f =~ s/__align__\(\d+\)//;
    my @n = map { (split " ", $_)[-1] } split /,/, $f;
    "$i" . "__shared__ $d;" . join("", map { " emu::note_shared(&$_, sizeof $_);" } @n) . $r }e;'
mkdir -p "$B/kernels/kernels"
for f in kernels/*.cuh kernels/*.h; do
  perl -pe "$shared_rule" "$f" > "$B/kernels/kernels/$(basename "$f")"
done
for f in kernels/*.cu; do
  out=$B/kernels/$(basename "$f" .cu).cpp
  perl -pe "$shared_rule"'
            s/^(\s*)(\w+(?:<[^;]*?>)?)<<<(.*?)>>>\(/$1emu::launch($2, $3)(/' "$f" > "$out"
  if grep -q '<<<' "$out"; then echo "emulate: a launch in $f was not rewritten" >&2; exit 1; fi
done
ls "$B"/kernels/*.cpp tests/gpu/emu/emu_runtime.cpp |
  xargs -P "$(nproc)" -I{} bash -c 'o=$B/obj/$(basename {} .cpp).emu.o; g++ -I$B/kernels $CPPFLAGS $CXXFLAGS -include tests/gpu/emu/emu_cuda.h -c {} -o $o'
rm -f "$B/libmemra-emu.a"
ar rcs "$B/libmemra-emu.a" $(ls "$B"/obj/*.o | grep -v -e bin-src_ -e tests_unit_)
LIBS="-Wl,-Bstatic -ljansson -lutf8proc -lpcre2-8 -Wl,-Bdynamic -lcurl -lcrypto -lz -lm -ldl -lstdc++ -pthread $SAN"
gcc "$B/obj/bin-src_memra-parity.c.o" "$B/libmemra-emu.a" $LIBS -o "$B/bin/memra-parity"
gcc "$B/obj/bin-src_memra-convert.c.o" "$B/libmemra-emu.a" $LIBS -o "$B/bin/memra-convert"
gcc "$B/obj/bin-src_memra-gen.c.o" "$B/libmemra-emu.a" $LIBS -o "$B/bin/memra-gen"
gcc "$B/obj/bin-src_memra-bench.c.o" "$B"/obj/bin-src_memra-bench_*.c.o "$B/libmemra-emu.a" $LIBS \
  -o "$B/bin/memra-bench"
# NCCL between emulated processes (a pipeline's stages in processes of
# their own), loaded by the link in place of libnccl.so.2
g++ $CPPFLAGS $CXXFLAGS -fPIC -shared tests/gpu/emu/emu_nccl.cpp -o "$B/libnccl-emu.so"
gcc "$B/obj/tests_unit_test_cuda_engine.c.o" "$B/libmemra-emu.a" $LIBS -o "$B/tests/test_cuda_engine"
gcc "$B/obj/tests_unit_test_engine_sample.c.o" "$B/libmemra-emu.a" $LIBS -o "$B/tests/test_engine_sample"

echo "emulate: memra-parity --kernels"
if [ ${#only[@]} -gt 0 ]; then
  "$B/bin/memra-parity" --kernels "${only[@]}" | tee "$B/kernels.log"
  tail -1 "$B/kernels.log" | grep -q '^ALL GREEN'
  exit 0
fi
# An emulated block runs on one thread, and the attention checks take about
# as long as all the others together: they run in a process of their own,
# beside the rest and then test_engine_sample, so two cores both work.
"$B/bin/memra-parity" --kernels --only attention > "$B/kernels-attention.log" 2>&1 &
att=$!
echo "emulate: the other ops, then test_engine_sample (two emulated devices), beside attention"
rest_ok=1
"$B/bin/memra-parity" --kernels --skip attention > "$B/kernels-rest.log" 2>&1 || rest_ok=0
out=$(MEMRA_EMU_DEVICES=2 MEMRA_TEST_DATA=${MEMRA_TEST_DATA:-build/test-data} "$B/tests/test_engine_sample" 2>&1) ||
  rest_ok=0
att_ok=1
wait $att || att_ok=0
cat "$B/kernels-rest.log" "$B/kernels-attention.log" | tee "$B/kernels.log"
for part in rest attention; do
  tail -1 "$B/kernels-$part.log" | grep -q '^ALL GREEN' ||
    { echo "emulate: the kernel check ($part) is not ALL GREEN" >&2; exit 1; }
done
[ $att_ok = 1 ] || { echo "emulate: the attention kernel check failed" >&2; exit 1; }
echo "$out"
[ $rest_ok = 1 ] || { echo "emulate: the kernel check or test_engine_sample failed" >&2; exit 1; }
if echo "$out" | grep 'skipped' >/dev/null; then echo "emulate: a case was skipped" >&2; exit 1; fi
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
P=tests/fixtures/parity
ids=$(seq -s, 1 40)
gen_ranks() { # MODEL --pp|--tp N ARGS...: run N processes, print rank 0's output
  local m=$1 split=$2 n=$3 id="$T/nccl-id.$RANDOM" pids=() r
  shift 3
  for r in $(seq 0 $((n - 1))); do
    MEMRA_NCCL="$B/libnccl-emu.so" MEMRA_EMU_DEVICES=1 "$B/bin/memra-gen" "$m" --backend cuda \
      "$split" "$n" --rank "$r" --nccl-id "$id" "$@" > "$T/rank$r.out" 2> "$T/rank$r.err" &
    pids+=($!)
  done
  for r in "${!pids[@]}"; do
    wait "${pids[$r]}" || { echo "emulate: rank $r failed:" >&2; cat "$T/rank$r.err" >&2; return 1; }
  done
  [ ! -s "$T/rank1.out" ] || { echo "emulate: rank 1 wrote output" >&2; return 1; }
  cat "$T/rank0.out"
}
# Two stages, and two tensor-parallel ranks, in processes of their own (the
# rest below): sampled tokens of one process.
echo "emulate: stages and ranks in processes of their own (NCCL emulated)"
"$B/bin/memra-convert" --random "$P/configs/tiny-qwen3.json" --seed 1 --outtype f32 "$T/tiny-qwen3" 2>/dev/null
for split in --pp --tp; do
  one_args=()
  [ $split = --tp ] && one_args=(--tp 2 --devices 0,1)
  one=$(MEMRA_EMU_DEVICES=2 "$B/bin/memra-gen" "$T/tiny-qwen3" --backend cuda "${one_args[@]}" \
        --prompt-ids "$ids" -n 12 --ignore-eos --json --temp 1 --seed 7 2>/dev/null | jq -c .tokens)
  many=$(gen_ranks "$T/tiny-qwen3" $split 2 --prompt-ids "$ids" -n 12 --ignore-eos --json --temp 1 \
         --seed 7 | jq -c .tokens) || many=failed
  [ -n "$one" ] && [ "$one" = "$many" ] ||
    { echo "emulate: tiny-qwen3 $split 2 in two processes: $many, not one process's $one" >&2; exit 1; }
  echo "  tiny-qwen3, $split 2, two processes: one process's tokens"
done
[ $quick = 1 ] && exit 0
echo "emulate: test_cuda_engine (two emulated devices: a pipeline's stages, tensor-parallel ranks)"
MEMRA_EMU_DEVICES=2 MEMRA_TEST_DATA=${MEMRA_TEST_DATA:-build/test-data} "$B/tests/test_cuda_engine"
echo "emulate: HF parity fixtures on the emulated device"
fails=0
for n in tiny-llama tiny-qwen2-yarn tiny-qwen3 tiny-qwen3-moe tiny-gemma3; do
  "$B/bin/memra-convert" --random "$P/configs/$n.json" --seed 1 --outtype f32 "$T/$n" 2>/dev/null
  if "$B/bin/memra-parity" "$T/$n" --reference "$P/$n.safetensors" --backend cuda | tail -1; then :
  else fails=$((fails + 1)); fi
done
"$B/bin/memra-parity" "${MEMRA_TEST_DATA:-build/test-data}/models/stories260K.gguf" \
  --reference "$P/stories260K.safetensors" --backend cuda | tail -1 || fails=$((fails + 1))
# A pipeline of two stages on two emulated devices: the bytes of one device
# (a 40-row prompt step: the prefill GEMM), logits and hidden states.
for n in tiny-qwen3 tiny-qwen3-moe; do
  if MEMRA_EMU_DEVICES=2 "$B/bin/memra-parity" "$T/$n" --backends cuda,cuda --pp 2 --devices 0,1 \
       --prompt-ids "$ids" --max-abs 0 | tail -1; then :
  else fails=$((fails + 1)); fi
done
# Tensor parallel over two emulated devices: transformers' logits within
# the bounds one device meets (the ranks' sums change the order of adds).
for n in tiny-qwen3 tiny-qwen3-moe; do
  if MEMRA_EMU_DEVICES=2 "$B/bin/memra-parity" "$T/$n" --reference "$P/$n.safetensors" \
       --backend cuda --tp 2 --devices 0,1 | tail -1; then :
  else fails=$((fails + 1)); fi
done
# A pipeline's stages, and tensor-parallel ranks, in processes of their
# own (one emulated device each, NCCL emulated over Unix sockets): every
# process's tokens are those of one process running the whole model (for
# ranks: the ranks in one process, over as many emulated devices), greedy
# and sampled (the device's sampling shared from the last stage), two and
# three stages (a process between two others), a hybrid's recurrent layers
# among them.
for n in tiny-qwen3_5 tiny-qwen3_5-moe; do
  [ -d "$T/$n" ] || "$B/bin/memra-convert" --random "$P/configs/$n.json" --seed 1 --outtype f32 "$T/$n" 2>/dev/null
done
for spec in "tiny-qwen3 --pp 2" "tiny-qwen3_5 --pp 2" "tiny-qwen3_5 --pp 3" "tiny-gemma3 --pp 3" \
            "tiny-qwen3 --tp 2" "tiny-qwen3 --tp 4" "tiny-qwen3-moe --tp 2" "tiny-gemma3 --tp 2" \
            "tiny-qwen3_5-moe --tp 2"; do
  set -- $spec
  one_args=()
  [ "$2" = --tp ] && one_args=(--tp "$3" --devices "$(seq -s, 0 $(($3 - 1)))")
  for args in "--temp 0" "--temp 1 --seed 7"; do
    one=$(MEMRA_EMU_DEVICES=$3 "$B/bin/memra-gen" "$T/$1" --backend cuda "${one_args[@]}" --prompt-ids "$ids" \
          -n 12 --ignore-eos --json $args 2>/dev/null | jq -c .tokens)
    many=$(gen_ranks "$T/$1" "$2" "$3" --prompt-ids "$ids" -n 12 --ignore-eos --json $args | jq -c .tokens) ||
      many=failed
    if [ "$one" = "$many" ]; then echo "separate processes: $1, $2 $3, $args: the same tokens"
    else echo "separate processes: $1, $2 $3, $args: DIFFER"; echo " one: $one"; echo " many: $many"
      fails=$((fails + 1)); fi
  done
done
# NCCL_COMM_ID in place of the id file
one=$(MEMRA_EMU_DEVICES=1 "$B/bin/memra-gen" "$T/tiny-qwen3" --backend cuda --prompt-ids "$ids" -n 12 \
      --ignore-eos --json --temp 1 --seed 3 2>/dev/null | jq -c .tokens)
addr="127.0.0.1:$((20000 + RANDOM % 10000))"
for r in 1 0; do
  NCCL_COMM_ID=$addr MEMRA_NCCL="$B/libnccl-emu.so" MEMRA_EMU_DEVICES=1 "$B/bin/memra-gen" "$T/tiny-qwen3" \
    --backend cuda --pp 2 --rank $r --prompt-ids "$ids" -n 12 --ignore-eos --json --temp 1 --seed 3 \
    > "$T/env$r.out" 2> "$T/env$r.err" &
  pids[$r]=$!
done
if wait "${pids[0]}" && wait "${pids[1]}" && [ "$(jq -c .tokens "$T/env0.out")" = "$one" ]; then
  echo "separate processes: NCCL_COMM_ID in place of --nccl-id: the same tokens"
else
  echo "separate processes: NCCL_COMM_ID: $(cat "$T/env0.err" "$T/env1.err")"; fails=$((fails + 1))
fi
# memra-bench's rows (a prompt, decode, two sequences at once) over two
# processes: rank 0 reports them, rank 1 nothing
id="$T/nccl-id.bench"
MEMRA_NCCL="$B/libnccl-emu.so" MEMRA_EMU_DEVICES=1 "$B/bin/memra-bench" "$T/tiny-qwen3" --backend cuda \
  --pp 2 --rank 1 --nccl-id "$id" -p 8 -n 2 -b 2 -r 1 --warmup 0 --bandwidth 100 --json > "$T/bench1.out" 2>&1 &
bpid=$!
if MEMRA_NCCL="$B/libnccl-emu.so" MEMRA_EMU_DEVICES=1 "$B/bin/memra-bench" "$T/tiny-qwen3" --backend cuda \
     --pp 2 --rank 0 --nccl-id "$id" -p 8 -n 2 -b 2 -r 1 --warmup 0 --bandwidth 100 --json > "$T/bench0.out" &&
   wait $bpid && [ ! -s "$T/bench1.out" ] &&
   jq -e '.pp == 2 and (.rows | length) >= 3 and all(.rows[]; .tok_s > 0)' "$T/bench0.out" >/dev/null; then
  echo "separate processes: memra-bench's rows from two processes, reported by rank 0"
else
  echo "separate processes: memra-bench over two processes failed: $(head -c 600 "$T/bench0.out" "$T/bench1.out")"
  fails=$((fails + 1))
fi
# a process that stops mid-run (here asked for fewer tokens) makes the
# others fail naming the link, not wait forever
id="$T/nccl-id.stop"
MEMRA_NCCL="$B/libnccl-emu.so" MEMRA_EMU_DEVICES=1 "$B/bin/memra-gen" "$T/tiny-qwen3" --backend cuda \
  --pp 2 --rank 1 --nccl-id "$id" --prompt-ids "$ids" -n 2 --temp 0 --ignore-eos > /dev/null 2>&1 &
if ! timeout 120 env MEMRA_NCCL="$B/libnccl-emu.so" MEMRA_EMU_DEVICES=1 "$B/bin/memra-gen" "$T/tiny-qwen3" \
     --backend cuda --pp 2 --rank 0 --nccl-id "$id" --prompt-ids "$ids" -n 12 --temp 0 --ignore-eos \
     > /dev/null 2> "$T/stop.err" && grep NCCL "$T/stop.err" >/dev/null; then
  echo "separate processes: a process that stopped: the other fails, naming the link"
else
  echo "separate processes: a process that stopped: $(cat "$T/stop.err")"; fails=$((fails + 1))
fi
wait
# a process asked for other steps (here another context) fails, and so do
# the others, naming it, instead of waiting on each other
id="$T/nccl-id.ctx"
MEMRA_NCCL="$B/libnccl-emu.so" MEMRA_EMU_DEVICES=1 "$B/bin/memra-gen" "$T/tiny-qwen3" --backend cuda \
  --pp 2 --rank 1 --nccl-id "$id" --prompt-ids "$ids" -n 4 --temp 0 -c 128 > /dev/null 2>&1 &
if MEMRA_NCCL="$B/libnccl-emu.so" MEMRA_EMU_DEVICES=1 "$B/bin/memra-gen" "$T/tiny-qwen3" --backend cuda \
     --pp 2 --rank 0 --nccl-id "$id" --prompt-ids "$ids" -n 4 --temp 0 2> "$T/ctx.err" > /dev/null ||
   ! grep 'pipeline stage 1 (its own process) failed: this process was asked for other steps' "$T/ctx.err" >/dev/null ||
   wait $!; then
  echo "separate processes: a process with another context is not refused: $(cat "$T/ctx.err")"
  fails=$((fails + 1))
else echo "separate processes: a process with another context: refused, naming its stage"; fi
[ $fails -eq 0 ] && echo "emulate: all passed"
