#!/usr/bin/env bash
# Runs every unit test binary (release and sanitizer builds) and every
# integration script; each prints PASS, FAIL or SKIP lines (SKIP: the case
# cannot run here, e.g. no GPU), and this closes with "N passed, N failed,
# N skipped". A binary that dies without a FAIL line counts as one failure,
# so a crash can never pass. The test data the repository does not carry is
# assembled first (scripts/fetch-test-data.sh; MEMRA_TEST_DATA overrides).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
if [ -z "${MEMRA_TEST_DATA:-}" ]; then
  MEMRA_TEST_DATA=$(bash scripts/fetch-test-data.sh) || { echo "tests/run.sh: the test data could not be assembled"; exit 1; }
fi
export MEMRA_TEST_DATA
export PATH="$root/bin:$PATH"
tmp=$(mktemp -d /tmp/memra-test.XXXXXX)
unit_pid=""
trap '[ -z "$unit_pid" ] || kill "$unit_pid" 2>/dev/null; rm -rf "$tmp"' EXIT
passed=0 failed=0 skipped=0 lane=main t_start=$SECONDS

run_one() { # label, command...
  local label=$1; shift
  local out="$tmp/out.$lane" rc t0=$SECONDS
  export MEMRA_TEST_TMP="$tmp/scratch.$lane"; rm -rf "$MEMRA_TEST_TMP"; mkdir -p "$MEMRA_TEST_TMP"
  "$@" >"$out" 2>"$out.err"; rc=$?
  local p f s
  p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out"); s=$(grep -c '^SKIP ' "$out")
  grep '^FAIL ' "$out" | sed "s|^|  [$label] |"
  if [ "$f" -gt 0 ] || [ $rc -ne 0 ]; then
    sed 's/^/    /' "$out.err" | tail -30
  fi
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "  [$label] exited with status $rc and no FAIL line"
    f=1
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  echo "$label: $p passed, $f failed, $s skipped ($((SECONDS - t0)) s)"
}

# Two lanes on their own cores: the unit tests (release, sanitizer, aarch64)
# in the background, the integration scripts here; the unit lane's lines
# and counts join at the end. Each lane has its own scratch dir and output.
unit_lane() {
  lane=unit passed=0 failed=0 skipped=0
  for t in build/release/tests/test_*; do
    [ -x "$t" ] && run_one "unit $(basename "$t")" "$t"
  done
  for t in build/san/tests/test_*; do
    [ -x "$t" ] && run_one "unit(asan) $(basename "$t")" "$t"
  done
  # The aarch64 kernels (make aarch64-tests) under qemu-user: as qemu's
  # default CPU (every feature, so the dotprod level) and as a Cortex-A53
  # (Advanced SIMD only, the neon level as the best).
  a64=build/aarch64/tests/test_cpu_fast
  if [ -x "$a64" ] && command -v qemu-aarch64 >/dev/null; then
    run_one "unit(aarch64) test_cpu_fast" qemu-aarch64 "$a64"
    run_one "unit(aarch64 cortex-a53) test_cpu_fast" qemu-aarch64 -cpu cortex-a53 "$a64"
  else
    echo "SKIP unit(aarch64) test_cpu_fast: no aarch64 cross build ($a64) or no qemu-aarch64 here"
    skipped=$((skipped + 1))
  fi
  echo "$passed $failed $skipped" >"$tmp/unit.counts"
}
unit_lane >"$tmp/unit.log" 2>&1 &
unit_pid=$!

for s in tests/integration/*.sh; do
  [ -f "$s" ] && run_one "integration $(basename "$s" .sh)" bash "$s"
done

wait "$unit_pid"
unit_pid=""
cat "$tmp/unit.log"
if read -r p f s <"$tmp/unit.counts" 2>/dev/null; then
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
else
  echo "  [unit lane] ended without its counts"
  failed=$((failed + 1))
fi
echo "tests/run.sh: $((SECONDS - t_start)) s"

echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
