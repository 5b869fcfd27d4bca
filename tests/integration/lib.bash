# Shared helpers for integration scripts: each check prints one PASS/FAIL
# line. Scripts run from the project root with bin/ on PATH, MEMRA_TEST_DATA (scripts/fetch-test-data.sh) set
# and a scratch dir in MEMRA_TEST_TMP.
set -u -o pipefail
# bash -c children inherit pipefail, so a failing producer fails the check.
export SHELLOPTS
T=${MEMRA_TEST_TMP:-$(mktemp -d)}
DATA=${MEMRA_TEST_DATA:-build/test-data}
SAN_BIN=build/san/bin

pass() { echo "PASS $1"; }
fail() { echo "FAIL $1"; shift; [ $# -gt 0 ] && echo "  $*" >&2; }
# skip NAME WHY: the check cannot run here (no GPU, no node); counted apart.
skip() { echo "SKIP $1: $2"; }

# check NAME CMD...: passes when CMD exits 0.
check() {
  local name=$1; shift
  if "$@" >"$T/check.out" 2>"$T/check.err"; then pass "$name"
  else fail "$name" "command failed: $* ($(head -c 400 "$T/check.err"))"; fi
}

# expect_error NAME EXIT PATTERN CMD...: CMD must exit with EXIT and print
# exactly one stderr line matching PATTERN (an extended regex).
expect_error() {
  local name=$1 want=$2 pat=$3; shift 3
  "$@" >"$T/err.out" 2>"$T/err.err"; local rc=$?
  local lines; lines=$(wc -l <"$T/err.err")
  if [ $rc -ne "$want" ]; then fail "$name" "exit $rc, want $want: $(head -c 300 "$T/err.err")"
  elif [ "$lines" -ne 1 ]; then fail "$name" "want one stderr line, got $lines: $(head -c 600 "$T/err.err")"
  elif ! grep -Eq -- "$pat" "$T/err.err"; then fail "$name" "stderr '$(cat "$T/err.err")' does not match /$pat/"
  else pass "$name"; fi
}
