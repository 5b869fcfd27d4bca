#!/usr/bin/env bash
# Runs every unit test binary (release and sanitizer builds) and every
# integration script; each prints PASS/FAIL lines, and this closes with
# "N passed, N failed". A binary that dies without a FAIL line counts as one
# failure, so a crash can never pass.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
export MEMRA_SHARED=${MEMRA_SHARED:-$root/../shared}
export PATH="$root/bin:$PATH"
tmp=$(mktemp -d /tmp/memra-test.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

run_one() { # label, command...
  local label=$1; shift
  local out="$tmp/out.$$" rc
  export MEMRA_TEST_TMP="$tmp/scratch"; rm -rf "$MEMRA_TEST_TMP"; mkdir -p "$MEMRA_TEST_TMP"
  "$@" >"$out" 2>"$out.err"; rc=$?
  local p f
  p=$(grep -c '^PASS ' "$out"); f=$(grep -c '^FAIL ' "$out")
  grep '^FAIL ' "$out" | sed "s|^|  [$label] |"
  if [ "$f" -gt 0 ] || [ $rc -ne 0 ]; then
    sed 's/^/    /' "$out.err" | tail -30
  fi
  if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "  [$label] exited with status $rc and no FAIL line"
    f=1
  fi
  passed=$((passed + p)); failed=$((failed + f))
  echo "$label: $p passed, $f failed"
}

for t in build/release/tests/test_*; do
  [ -x "$t" ] && run_one "unit $(basename "$t")" "$t"
done
for t in build/san/tests/test_*; do
  [ -x "$t" ] && run_one "unit(asan) $(basename "$t")" "$t"
done
for s in tests/integration/*.sh; do
  [ -f "$s" ] && run_one "integration $(basename "$s" .sh)" bash "$s"
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
