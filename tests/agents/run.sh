#!/usr/bin/env bash
# Coding agents end to end against memra-serve: installs the pinned agents
# (package.json, package-lock.json) when they are missing, then runs every
# tests/agents/*.sh; each prints PASS, FAIL or SKIP lines as the integration
# scripts do. Run from anywhere; tests/integration/agents.sh runs it in
# `make test`.
#
# The agents ship their native programs in per-platform packages that npm
# marks optional; package.json names the Linux x64 ones directly, so
# --omit=optional leaves out the other platforms and keeps ours.
# --ignore-scripts: nothing of theirs runs at install time; the tests start
# the platform binaries themselves. Without npm or the registry every agent
# test is a SKIP, never a PASS.
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
export PATH="$root/bin:$PATH"
dir=tests/agents
need() {
  [ -x $dir/node_modules/@anthropic-ai/claude-code-linux-x64/claude ] &&
    [ -d $dir/node_modules/@openai/codex-linux-x64 ]
}
if ! need; then
  if ! command -v npm >/dev/null; then
    echo "SKIP agents: no npm to install them"; exit 0
  fi
  if [ "$(uname -sm)" != "Linux x86_64" ]; then
    echo "SKIP agents: the pinned binaries are Linux x64 ones"; exit 0
  fi
  t0=$(date +%s)
  # Bounded, so an unreachable registry costs make test minutes at most.
  if ! (cd $dir && timeout 300 npm install --no-save --omit=optional --ignore-scripts \
          --no-audit --no-fund --loglevel=error --fetch-retries=1 --fetch-timeout=60000 >"${MEMRA_TEST_TMP:-/tmp}/agents-npm.log" 2>&1) || ! need; then
    echo "SKIP agents: npm could not install them ($(grep -m1 . "${MEMRA_TEST_TMP:-/tmp}/agents-npm.log"))"
    exit 0
  fi
  echo "  agents installed in $(( $(date +%s) - t0 )) s" >&2
fi
for s in $dir/*.sh; do
  [ "$(basename "$s")" = run.sh ] && continue
  bash "$s"
done
exit 0
