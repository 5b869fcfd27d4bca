#!/usr/bin/env bash
# The library's layers, bottom to top (docs/ARCHITECTURE.md draws them):
#
#   core < numerics < format < quant, hub < jinja < tok, grammar < backend (+ kernels)
#        < model < engine < check, bench < serve < programs and tests
#
# A file may include headers of its own layer and of the layers below it,
# never of a layer above. This reads every `#include "..."` line under lib/,
# kernels/ and bin-src/ and prints each one that climbs, as
#   FILE:LINE: LAYER includes HEADER (LAYER2 is above LAYER)
# and exits 1 when there is one.
#
#   scripts/check-layers.sh [ROOT]     (ROOT: the tree to check; default the repo)
set -u -o pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root" || { echo "check-layers: no such directory: $root" >&2; exit 2; }

# Rank of a layer: equal ranks may include each other (quant and hub;
# check and bench), which is how siblings of one floor are drawn. A file's
# layer is its folder under lib/ (kernels/ sits with backend, bin-src/ is
# the programs'); a header's is the first part of its include path
# ("core/err.h", "backend/cuda/x.h"). A header named without a folder is
# one of the file's own folder.
files=$(find lib kernels bin-src -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' \
             -o -name '*.cuh' \) 2>/dev/null | sort)
[ -n "$files" ] || { echo "check-layers: no sources under $root" >&2; exit 2; }
# shellcheck disable=SC2086
awk '
BEGIN {
  n = split("core:0 numerics:1 format:2 quant:3 hub:3 jinja:4 tok:5 grammar:5 backend:6 kernels:6 " \
            "model:7 engine:8 check:9 bench:9 serve:10 programs:11", kv, " ")
  for (i = 1; i <= n; i++) { split(kv[i], p, ":"); rank[p[1]] = p[2] }
}
function layer_of_file(f,   a) {
  if (f ~ /^kernels\//) return "kernels"
  if (f ~ /^bin-src\//) return "programs"
  split(f, a, "/"); return a[2]
}
FNR == 1 {
  from = layer_of_file(FILENAME)
  if (!(from in rank)) {
    printf "%s: folder lib/%s is in no layer (add it to scripts/check-layers.sh and docs/ARCHITECTURE.md)\n", FILENAME, from
    bad = 1
  }
}
/^[ \t]*#[ \t]*include[ \t]*"/ {
  checked++
  hdr = $0; sub(/^[^"]*"/, "", hdr); sub(/".*$/, "", hdr)
  if (hdr !~ /\//) next
  to = hdr; sub(/\/.*$/, "", to)
  if (!(from in rank)) next
  if (!(to in rank)) {
    if (from == "programs") next  # a header in the folder of a program, bin-src/NAME/
    printf "%s:%d: includes %s, which is in no layer\n", FILENAME, FNR, hdr; bad = 1
  } else if (rank[to] + 0 > rank[from] + 0) {
    printf "%s:%d: %s includes %s (%s is above %s)\n", FILENAME, FNR, from, hdr, to, from; bad = 1
  }
}
END {
  if (bad) { print "check-layers: includes climb a layer (see scripts/check-layers.sh for the order)"; exit 1 }
  printf "check-layers: %d includes, none climbs\n", checked
}' $files
