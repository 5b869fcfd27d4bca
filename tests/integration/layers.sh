#!/usr/bin/env bash
# scripts/check-layers.sh: the real tree passes, and a planted include that
# climbs a layer (or names a folder in no layer) fails, naming the file,
# the line and both layers.
source "$(dirname "$0")/lib.bash"

check "the tree's includes never climb a layer" bash scripts/check-layers.sh

# A small tree of its own: core below format below model.
plant() { # DIR: a tree whose includes all go down
  rm -rf "$1"; mkdir -p "$1/lib/core" "$1/lib/format" "$1/lib/model" "$1/kernels" "$1/bin-src"
  printf '#include "core/err.h"\n' > "$1/lib/core/err.c"
  printf '#include "core/err.h"\n#include "format/gguf.h"\n' > "$1/lib/format/gguf.c"
  printf '#include "format/gguf.h"\n#include "model/config.h"\n' > "$1/lib/model/config.c"
  printf '#include "kernels/launch.cuh"\n#include "dev_common.cuh"\n' > "$1/kernels/norm.cu"
  printf '#include "model/config.h"\n#include "memra-bench/rows.h"\n' > "$1/bin-src/memra-x.c"
}
d=$T/layers
plant "$d"
check "a tree whose includes go down passes" bash scripts/check-layers.sh "$d"

plant "$d"
printf '#include "core/err.h"\n#include "model/config.h"\n' > "$d/lib/format/gguf.c"
bash scripts/check-layers.sh "$d" > "$T/layers.out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q 'lib/format/gguf.c:2: format includes model/config.h (model is above format)' "$T/layers.out"
then pass "a planted climbing include fails, naming file, line and layers"
else fail "a planted climbing include fails, naming file, line and layers" "rc=$rc: $(cat "$T/layers.out")"; fi

plant "$d"
printf '#include "serve/serve.h"\n' >> "$d/kernels/norm.cu"
bash scripts/check-layers.sh "$d" > "$T/layers.out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q 'kernels/norm.cu:3: kernels includes serve/serve.h' "$T/layers.out"
then pass "a kernel including a server header fails"
else fail "a kernel including a server header fails" "rc=$rc: $(cat "$T/layers.out")"; fi

plant "$d"
mkdir -p "$d/lib/misc" && printf '#include "core/err.h"\n' > "$d/lib/misc/x.c"
bash scripts/check-layers.sh "$d" > "$T/layers.out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q 'lib/misc/x.c: folder lib/misc is in no layer' "$T/layers.out"
then pass "a folder in no layer fails"
else fail "a folder in no layer fails" "rc=$rc: $(cat "$T/layers.out")"; fi

plant "$d"
printf '#include "misc/thing.h"\n' >> "$d/lib/model/config.c"
bash scripts/check-layers.sh "$d" > "$T/layers.out" 2>&1; rc=$?
if [ $rc -eq 1 ] && grep -q 'lib/model/config.c:3: includes misc/thing.h, which is in no layer' "$T/layers.out"
then pass "an include from no layer fails"
else fail "an include from no layer fails" "rc=$rc: $(cat "$T/layers.out")"; fi
