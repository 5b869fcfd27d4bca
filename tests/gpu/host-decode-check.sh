#!/usr/bin/env bash
# Builds and runs tests/gpu/host_decode_check.cpp: the CUDA weight decoders
# checked on the host, so CI (no GPU) catches layout and bit-exactness
# errors in kernels/weight_decode.cuh. Needs `make` done first (links
# lib/libmemra.a, built with CUDA=1). Prints ALL OK or exits 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
mkdir -p build/release/tests
g++ -std=c++17 -O1 -ffp-contract=off -Wall -Wextra -Werror -Wno-unknown-pragmas -I. -Ilib -I"$CUDA_HOME/include" \
  tests/gpu/host_decode_check.cpp lib/libmemra.a -L"$CUDA_HOME/lib64" -lcudart_static -lrt -ldl \
  -lpthread -lm -o build/release/tests/host_decode_check
build/release/tests/host_decode_check
