#!/usr/bin/env bash
# Builds llama.cpp's benchmark tools for the comparison rows of
# docs/PERFORMANCE.md: llama-bench, llama-batched-bench and llama-embedding,
# compiled from llama.cpp's own sources against its own prebuilt libraries
# (the CPU ones, or the CUDA ones), both as node-llama-cpp 3.22.1 ships them
# on npm (pinned and checked by sha256 below; llama.cpp is MIT). Nothing of
# it enters the repository: the tools land in DIR (default
# build/llama-cpu or build/llama-cuda).
#
#   scripts/llama-tools.sh [--cuda [--ptx-isa 9.0]] [--from DIR-OF-TGZ] [DIR]
#
# The CPU libraries come in one build per x86-64 level (haswell, skylakex,
# icelake, zen4, sapphirerapids ...), of which ggml loads the best for the
# machine at run time. The CUDA library is built with CUDA 13.1 for
# sm_86/89/120/121 with PTX for compute_75/80/90: on a Hopper card the driver
# compiles the compute_90 PTX at first use (about a minute, cached under
# CUDA_CACHE_PATH). A driver older than CUDA 13.1 (the 580 series is 13.0)
# refuses PTX ISA 9.1 ("CUDA error" at the first kernel): --ptx-isa 9.0
# rewrites each fatbin of libggml-cuda.so to hold its compute_90 PTX alone,
# declared as ISA 9.0 (ptxas 13.0 assembles that PTX unchanged; needs
# python3 and zstd).
#
# Run the tools from DIR (CUDA: with LD_LIBRARY_PATH=/usr/local/cuda/lib64
# for cuBLAS 13):
#   DIR/llama-bench -m MODEL.gguf -p 512 -n 128 -r 3 [-ngl 99 -fa 1] [-t THREADS]
#   DIR/llama-batched-bench -m MODEL.gguf -ngl 99 -fa on -c 45000 -b 2048 -ub 512 \
#     -npp 512 -ntg 128 -npl 1,8,64
# Needs npm (or --from a dir holding the .tgz files), git, g++.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
ptx_isa="" from="" out="" cuda=0
while [ $# -gt 0 ]; do
  case $1 in
    --cuda) cuda=1 ;;
    --ptx-isa) ptx_isa=${2:?--ptx-isa needs a version (9.0)}; shift ;;
    --from) from=${2:?--from needs a dir}; shift ;;
    -h|--help) sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "llama-tools: unknown option '$1'" >&2; exit 2 ;;
    *) out=$1 ;;
  esac
  shift
done
[ -z "$ptx_isa" ] || [ "$ptx_isa" = 9.0 ] ||
  { echo "llama-tools: --ptx-isa takes 9.0 (the libraries' PTX is 9.1)" >&2; exit 2; }
[ -z "$ptx_isa" ] || [ $cuda = 1 ] || { echo "llama-tools: --ptx-isa is for --cuda" >&2; exit 2; }
if [ $cuda = 1 ]; then flavor=cuda tag=.cuda; else flavor=cpu tag=""; fi
out=${out:-$root/build/llama-$flavor}

version=3.22.1
src_tgz=node-llama-cpp-$version.tgz
src_sha256=a0d9dd80eacd2ab1cfe71aee57ac8a806487fd70b3d2a38fbec637752d9e5c5f
if [ $cuda = 1 ]; then
  bin_pkg=@node-llama-cpp/linux-x64-cuda bin_dir=linux-x64-cuda
  bin_sha256=d6cd3ff39a43b024816952e0bc6452d6711608d26256ff6eb0fe8cf7ff55bb2c
else
  bin_pkg=@node-llama-cpp/linux-x64 bin_dir=linux-x64
  bin_sha256=0d953e1503d5ab4608d8ed5b739132308c81ac05ffeb760d2a7f30e08a9f90e0
fi
bin_tgz=node-llama-cpp-$bin_dir-$version.tgz

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -n "$from" ]; then
  cp "$from/$src_tgz" "$from/$bin_tgz" "$tmp/"
else
  (cd "$tmp" && npm pack -q "node-llama-cpp@$version" "$bin_pkg@$version" >/dev/null)
fi
for f in "$src_tgz $src_sha256" "$bin_tgz $bin_sha256"; do
  set -- $f
  got=$(sha256sum "$tmp/$1" | cut -d' ' -f1)
  [ "$got" = "$2" ] || { echo "llama-tools: $1: sha256 $got, expected $2" >&2; exit 1; }
done
mkdir -p "$tmp/src" "$tmp/bin"
tar -C "$tmp/src" -xzf "$tmp/$src_tgz" package/llama/gitRelease.bundle
tar -C "$tmp/bin" -xzf "$tmp/$bin_tgz"
git clone -q --bare "$tmp/src/package/llama/gitRelease.bundle" "$tmp/llama.cpp.git"
mkdir -p "$tmp/tree"
git --git-dir="$tmp/llama.cpp.git" archive HEAD include ggml/include common vendor \
  tools/llama-bench tools/batched-bench examples/embedding | tar -C "$tmp/tree" -x

rm -rf "$out" && mkdir -p "$out"
libs=$tmp/bin/package/bins/$bin_dir
cp "$libs"/*.so "$out/"
if [ -n "$ptx_isa" ]; then
  python3 - "$libs/libggml-cuda.so" "$out/libggml-cuda.so" <<'EOF'
# Each fatbin container keeps its offset and holds one entry, its compute_90
# PTX with ".version 9.1" declared as 9.0, zstd-compressed as the original
# entries are; the freed bytes are zeroed. Entry header fields (from the
# containers themselves): +8 payload bytes (8-aligned), +16 compressed
# bytes, +24 PTX ISA minor and major, +28 arch, +56 uncompressed bytes.
import struct, subprocess, sys
src, dst = sys.argv[1], sys.argv[2]
d = bytearray(open(src, "rb").read())
magic, i, n = struct.pack("<I", 0xBA55ED50), 0, 0
while (i := d.find(magic, i)) >= 0:
    _, hs, fs = struct.unpack_from("<HHQ", d, i + 4)
    p, end, hit = i + hs, i + hs + fs, None
    while p < end:
        kind, _, ehs, esz = struct.unpack_from("<HHIQ", d, p)
        if kind == 1 and struct.unpack_from("<I", d, p + 28)[0] == 90:
            hit = (p, ehs)
        p += ehs + esz
    if hit is None:
        sys.exit("llama-tools: a fatbin at 0x%x has no compute_90 PTX" % i)
    p, ehs = hit
    hdr = bytearray(d[p:p + ehs])
    body = bytes(d[p + ehs:p + ehs + struct.unpack_from("<I", hdr, 16)[0]])
    ptx = subprocess.run(["zstd", "-d", "-c"], input=body, capture_output=True, check=True).stdout
    if b".version 9.1" not in ptx[:64]:
        sys.exit("llama-tools: a PTX entry at 0x%x is not ISA 9.1" % p)
    ptx = ptx.replace(b".version 9.1", b".version 9.0", 1)
    z = subprocess.run(["zstd", "-19", "-c", "--no-check"], input=ptx, capture_output=True,
                       check=True).stdout
    pad = (len(z) + 7) // 8 * 8
    struct.pack_into("<Q", hdr, 8, pad)
    struct.pack_into("<I", hdr, 16, len(z))
    struct.pack_into("<HH", hdr, 24, 0, 9)
    struct.pack_into("<Q", hdr, 56, len(ptx))
    entry = bytes(hdr) + z + bytes(pad - len(z))
    if len(entry) > fs:
        sys.exit("llama-tools: the rewritten entry at 0x%x does not fit" % p)
    d[i + hs:end] = entry + bytes(fs - len(entry))
    struct.pack_into("<Q", d, i + 8, len(entry))
    i, n = end, n + 1
open(dst, "wb").write(d)
print("llama-tools: %d fatbins rewritten to compute_90 PTX, ISA 9.0" % n)
EOF
fi
t=$tmp/tree
for tool in "llama-bench tools/llama-bench" "llama-batched-bench tools/batched-bench" \
            "llama-embedding examples/embedding"; do
  set -- $tool
  g++ -std=c++17 -O2 -DNDEBUG -I"$t/include" -I"$t/ggml/include" -I"$t/common" -I"$t/vendor" \
    -I"$t/$2" "$t/$2"/*.cpp -o "$out/$1" -L"$out" -l:libllama$tag.v0.5.0.so \
    -l:libllama-common.so -l:libggml$tag.v0.5.0.so -lggml-base -Wl,-rpath,'$ORIGIN'
done
echo "$out"
