#!/usr/bin/env bash
# Installs the Debian packages memra builds and tests with, when missing.
# Run by make on first build; safe to run again. Needs root (or sudo) only
# when something is actually missing.
set -euo pipefail

need=()
have_header() { [ -e "/usr/include/$1" ] || [ -e "/usr/include/x86_64-linux-gnu/$1" ]; }
have_header jansson.h           || need+=(libjansson-dev)
have_header microhttpd.h        || need+=(libmicrohttpd-dev)
have_header pcre2.h             || need+=(libpcre2-dev)
have_header utf8proc.h          || need+=(libutf8proc-dev)
have_header zlib.h              || need+=(zlib1g-dev)
have_header curl/curl.h         || need+=(libcurl4-openssl-dev)
have_header openssl/sha.h       || need+=(libssl-dev)
command -v jq >/dev/null        || need+=(jq)
command -v clang >/dev/null     || need+=(clang)
command -v node >/dev/null      || need+=(nodejs)
# The aarch64 build of the CPU fast path's test, run under qemu-user.
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross)
command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
# nginx and its njs module: the replica test runs deploy/nginx's configuration.
{ command -v nginx >/dev/null || [ -x /usr/sbin/nginx ]; } || need+=(nginx)
[ -f /usr/lib/nginx/modules/ngx_http_js_module.so ] || need+=(libnginx-mod-http-js)
[ -e /usr/lib/llvm-14/lib/clang/14.0.6/lib/linux/libclang_rt.fuzzer-x86_64.a ] || \
  ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || \
  need+=(libclang-rt-dev)

if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

# Third-party readers and clients the interoperability tests run, pinned
# with their integrity hashes in tests/interop/package-lock.json: the HF
# GGUF parser, the openai SDK, the Anthropic SDK (0.x and 1.x, as npm
# aliases anthropic-sdk-0 and -1), ajv (JSON Schema) and node-llama-cpp with
# its prebuilt Linux x64 CPU binaries (llama.cpp itself, loaded in-process by
# node). `npm
# install --no-save` rather than `npm ci`: the lock file holds the optional
# binary packages of this platform only (npm records no others), which ci
# refuses; install takes the locked versions and writes nothing back.
# --omit=optional leaves out the CUDA and Vulkan builds (over 600 MB);
# --ignore-scripts keeps node-llama-cpp from trying to build or download.
root=$(cd "$(dirname "$0")/.." && pwd)
if [ ! -d "$root/tests/interop/node_modules/@huggingface/gguf" ] ||
   [ ! -d "$root/tests/interop/node_modules/openai" ] ||
   [ ! -d "$root/tests/interop/node_modules/node-llama-cpp" ] ||
   [ ! -d "$root/tests/interop/node_modules/anthropic-sdk-0" ] ||
   [ ! -d "$root/tests/interop/node_modules/anthropic-sdk-1" ] ||
   [ ! -d "$root/tests/interop/node_modules/@node-llama-cpp/linux-x64" ] ||
   [ ! -d "$root/tests/interop/node_modules/ajv-formats" ]; then
  echo "deps: npm install in tests/interop" >&2
  (cd "$root/tests/interop" &&
     npm install --no-save --omit=optional --ignore-scripts --no-audit --no-fund --silent) >&2
fi
