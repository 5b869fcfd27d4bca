#!/usr/bin/env bash
# Every program's man page lists every option its --help lists, and the man
# pages' EXAMPLES lines that use only files of this repository run as
# written (with bin/ on PATH, from the project root).
source "$(dirname "$0")/lib.bash"

# The options a text names: -x or --long-name, as --help or a man page
# (groff escapes \- unescaped first) writes them.
options_of() {
  sed 's/\\f[BIRP]//g; s/\\-/-/g' | grep -oE '(^|[^a-zA-Z0-9-])--?[a-zA-Z][a-zA-Z0-9-]*' |
    sed -E 's/^[^-]+//' | sort -u
}

for man in man/man1/memra-*.1; do
  prog=$(basename "$man" .1)
  if [ ! -x "bin/$prog" ]; then
    fail "$prog: a program for the man page" "bin/$prog is missing"
    continue
  fi
  "bin/$prog" --help >"$T/help.txt" 2>&1
  options_of <"$T/help.txt" >"$T/help.opts"
  options_of <"$man" >"$T/man.opts"
  missing=$(comm -23 "$T/help.opts" "$T/man.opts" | tr '\n' ' ')
  if [ -s "$T/help.opts" ] && [ -z "$missing" ]; then
    pass "$prog: the man page lists all $(wc -l <"$T/help.opts") options --help lists"
  else
    fail "$prog: the man page lists every option --help lists" "missing from $man: ${missing:-(--help printed none)}"
  fi
done

# EXAMPLES: each command (a line, joined with the lines a trailing \e
# continues it onto) between .SH EXAMPLES and the next .SH runs as written,
# in order, in a scratch dir where models/ and tests/ are the repo's, when
# every path-like word in it (a word with a '/' or a file extension of
# ours) exists by then, except the command's outputs (its last word, the
# second path of memra-convert and memra-quantize, the file after --imatrix). Lines that start a server or talk to one (&, http,
# curl) or fetch from the Hub (hf:) are left out.
root=$(pwd)
for man in man/man1/memra-*.1; do
  prog=$(basename "$man" .1)
  n=0
  ex=$T/examples-$prog
  rm -rf "$ex"; mkdir -p "$ex"; ln -s "$root/models" "$root/tests" "$ex/"
  while IFS= read -r line; do
    case $line in .*|"") continue ;; esac
    case $line in *'&'*|*http*|*curl*|*localhost*|*hf:*) continue ;; esac
    missing=0 prev="" last="" k=0
    for w in $line; do last=$w; done
    case $line in memra-convert*|memra-quantize*) out2=1 ;; *) out2=0 ;; esac
    for w in $line; do
      w=${w%\"}; w=${w#\"}; w=${w%\'}; w=${w#\'}
      case $w in
        */*|*.gguf|*.json|*.safetensors|*.txt|*.imatrix)
          k=$((k + 1))
          if [ "$w" != "${last//[\"\']/}" ] && [ "$prev" != --imatrix ] &&
             ! { [ $out2 -eq 1 ] && [ $k -eq 2 ]; }; then
            (cd "$ex" && [ -e "$w" ]) || missing=1
          fi ;;
      esac
      prev=$w
    done
    [ $missing -eq 0 ] || continue
    n=$((n + 1))
    if (cd "$ex" && timeout 120 bash -c "$line") >"$T/ex.out" 2>"$T/ex.err"; then
      pass "$prog EXAMPLES runs: $line"
    else
      fail "$prog EXAMPLES runs: $line" "$(tail -c 300 "$T/ex.err")"
    fi
  done < <(sed -n '/^\.SH EXAMPLES/,/^\.SH /p' "$man" | sed 's/\\-/-/g; s/\\(em/--/g' |
           awk '{ if (sub(/ *\\e$/, " ")) { buf = buf $0 } else { print buf $0; buf = "" } }')
  [ $n -gt 0 ] || skip "$prog EXAMPLES" "no example uses only repository files"
done
