# Structured output checked by an independent validator: memra-tiny (never
# trained on JSON) samples at temperature 1 under six JSON Schemas, 20 seeds
# each (120 samples: each costs make-test time), and ajv (tests/interop,
# pinned; tests/interop/ajv-validate.mjs) validates every output against its schema, formats included. A sample that
# does not validate is a bug in lib/grammar: the schema compiled to a grammar
# that allows text the schema does not.
source tests/integration/lib.bash
case $T in /*) ;; *) T=$PWD/$T ;; esac

if ! command -v node >/dev/null; then
  skip "grammar vs ajv" "node is not installed"; exit 0
fi
if [ ! -d tests/interop/node_modules/ajv ] || [ ! -d tests/interop/node_modules/ajv-formats ]; then
  skip "grammar vs ajv" "ajv is not installed in tests/interop (scripts/deps.sh installs it)"; exit 0
fi

SEEDS=20
mkdir -p "$T/ajv"
# name, schema: nested objects; arrays with counts; enums, const, anyOf and
# oneOf; recursive $ref/$defs; formats; patterns and bounds. (No free keys:
# memra-tiny rambles in an unbounded key until the token limit.)
schemas=(
  nested '{"type":"object","properties":{"name":{"type":"string","minLength":1,"maxLength":8},
    "address":{"type":"object","properties":{"street":{"type":"string","maxLength":10},
      "city":{"type":"string","maxLength":8},"zip":{"type":"string","pattern":"^[0-9]{5}$"}},
      "required":["street","city","zip"],"additionalProperties":false},
    "active":{"type":"boolean"}},"required":["name","address"],"additionalProperties":false}'
  arrays '{"type":"object","properties":{
    "scores":{"type":"array","minItems":2,"maxItems":4,"items":{"type":"integer","minimum":-50,"maximum":50}},
    "matrix":{"type":"array","maxItems":2,"items":{"type":"array","minItems":1,"maxItems":3,
      "items":{"type":"number","minimum":0}}},
    "labels":{"type":"array","maxItems":3,"items":{"type":"string","maxLength":6}}},
    "required":["scores","matrix"],"additionalProperties":false}'
  choices '{"type":"object","properties":{"status":{"enum":["open","closed",3,null,{"k":[1,true]}]},
    "value":{"anyOf":[{"type":"integer","exclusiveMinimum":7,"maximum":1000},
      {"type":"string","minLength":2,"maxLength":5},{"type":"boolean"},{"type":"null"}]},
    "kind":{"const":"v1"},
    "level":{"oneOf":[{"type":"string","enum":["low","high"]},{"type":"integer","minimum":1,"maximum":3}]}},
    "required":["status","value","kind","level"],"additionalProperties":false}'
  refs '{"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":99},
      "kids":{"type":"array","maxItems":2,"items":{"$ref":"#/$defs/node"}}},
      "required":["v"],"additionalProperties":false},
    "pt":{"type":"object","properties":{"x":{"type":"number"},"y":{"type":"number"}},
      "required":["x","y"],"additionalProperties":false}},
    "type":"object","properties":{"root":{"$ref":"#/$defs/node"},"at":{"$ref":"#/$defs/pt"}},
    "required":["root","at"],"additionalProperties":false}'
  formats '{"type":"object","properties":{"day":{"type":"string","format":"date"},
    "at":{"type":"string","format":"date-time"},"t":{"type":"string","format":"time"},
    "mail":{"type":"string","format":"email"},"id":{"type":"string","format":"uuid"}},
    "required":["day","at","mail","id"],"additionalProperties":false}'
  patterns '{"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"},
    "word":{"type":"string","pattern":"^(ok|fine|maybe)$"},
    "phone":{"type":"string","pattern":"^\\+?[0-9]{3}( [0-9]{3}){1,2}$"},
    "n":{"type":"integer","minimum":-40,"exclusiveMaximum":1234},"x":{"type":"number","minimum":0},
    "note":{"type":["string","null"],"maxLength":6}},
    "required":["code","word","phone","n","x"],"additionalProperties":false}'
)

# Every (schema, seed) job, two at a time; each memra-gen on one thread.
jobs=()
for ((i = 0; i < ${#schemas[@]}; i += 2)); do
  name=${schemas[i]}
  printf '%s\n' "${schemas[i + 1]}" >"$T/ajv/$name.schema.json"
  for ((s = 1; s <= SEEDS; s++)); do jobs+=("$name $s"); done
done
export AJV_DIR=$T/ajv
start=$SECONDS
printf '%s\n' "${jobs[@]}" | xargs -P 2 -L 1 bash -c \
  'memra-gen models/memra-tiny.gguf -p "A record:" -n 400 --temp 1 --seed $1 -t 1 --backend cpu \
     --json-schema "$AJV_DIR/$0.schema.json" --json >"$AJV_DIR/$0.$1.json" 2>"$AJV_DIR/$0.$1.err"
   echo $? >"$AJV_DIR/$0.$1.rc"'
echo "# grammar_ajv: ${#jobs[@]} samples generated in $((SECONDS - start)) s" >&2

for ((i = 0; i < ${#schemas[@]}; i += 2)); do
  name=${schemas[i]}
  : >"$T/ajv/$name.jsonl"
  failed_runs=""
  for ((s = 1; s <= SEEDS; s++)); do
    if [ "$(cat "$T/ajv/$name.$s.rc")" != 0 ]; then
      failed_runs+=" seed $s: $(head -c 300 "$T/ajv/$name.$s.err")"
    else
      cat "$T/ajv/$name.$s.json" >>"$T/ajv/$name.jsonl"; echo >>"$T/ajv/$name.jsonl"
    fi
  done
  what="--json-schema ($name): $SEEDS samples of memra-tiny at temperature 1 validate with ajv"
  if [ -n "$failed_runs" ]; then
    fail "$what" "memra-gen failed:$failed_runs"
  elif (cd tests/interop && node ajv-validate.mjs "$T/ajv/$name.schema.json" "$T/ajv/$name.jsonl") \
       >"$T/ajv/$name.out" 2>&1; then
    pass "$what"
  else
    fail "$what" "$(head -c 3000 "$T/ajv/$name.out")"
  fi
done
