# memra-gen end to end: the tokenizer modes on vocab-only GGUFs, the real
# stories260K golden output, the project's trained model, sampling,
# stop strings, chat rendering, and bad input.
source tests/integration/lib.bash
STORIES=$DATA/models/stories260K.gguf
QWEN2=$DATA/vocab/ggml-vocab-qwen2.gguf
REF="403,407,261,378,432,383,286,261,376,298,315,421,395,317,426,338,401,396,267,337,410,408,419,292,411,322,265,282,295,433,426,385,328,432,358,394,261,370,432,352"

# Tokenizer modes (no weights).
check "tokenize Hello world on the qwen2 vocab" \
  bash -c "[ \"\$(memra-gen '$QWEN2' --tokenize -p 'Hello world' --json)\" = '{\"tokens\":[9707,1879]}' ]"
check "tokenize plain output is comma separated" bash -c "[ \"\$(memra-gen '$QWEN2' --tokenize -p 'Hello world')\" = '9707,1879' ]"
check "detokenize inverts tokenize" bash -c "[ \"\$(memra-gen '$QWEN2' --detokenize --ids 9707,1879)\" = 'Hello world' ]"
check "special text is raw unless --parse-special" \
  bash -c "a=\$(memra-gen '$QWEN2' --tokenize -p '<|endoftext|>' --json | jq '.tokens | length'); b=\$(memra-gen '$QWEN2' --tokenize -p '<|endoftext|>' --parse-special --json | jq -c .tokens); [ \"\$a\" -gt 1 ] && [ \"\$b\" = '[151643]' ]"
check "--add-special adds BOS on the llama-spm vocab" \
  bash -c "memra-gen '$DATA/vocab/ggml-vocab-llama-spm.gguf' --tokenize -p 'Hi' --add-special --json | jq -e '.tokens[0] == 1'"
check "stdin is the prompt when not a terminal" \
  bash -c "[ \"\$(printf 'Hello world' | memra-gen '$QWEN2' --tokenize)\" = '9707,1879' ]"

# The project's tokenizer against HF tokenizers on the adversarial corpus
# (ids from tests/fixtures/tokenizer-ref/memra-tiny.json; default HF call:
# added/special tokens parsed, nothing added).
ref=tests/fixtures/tokenizer-ref/memra-tiny.json
n=$(jq '.cases | length' "$ref"); bad=0
for i in $(seq 0 $((n - 1))); do
  jq -r ".cases[$i].hex" "$ref" | xxd -r -p >"$T/case.bin"
  want=$(jq -c ".cases[$i].ids" "$ref")
  got=$(memra-gen models/memra-tiny.gguf --tokenize --parse-special -f "$T/case.bin" --json | jq -c .tokens)
  [ "$got" = "$want" ] || { bad=$((bad + 1)); echo "  case $i: got $got want $want" >&2; }
done
[ "$bad" -eq 0 ] && pass "memra-tiny tokenizer = HF tokenizers on all $n corpus cases" || fail "memra-tiny tokenizer vs HF tokenizers" "$bad of $n cases differ"

# Generation.
check "stories260K greedy from BOS gives the 40 reference ids" \
  bash -c "memra-gen '$STORIES' -p '' -n 40 --temp 0 --json | jq -e '(.tokens | map(tostring) | join(\",\")) == \"$REF\" and .prompt_tokens == [1] and .finish_reason == \"length\"'"
check "stories260K decoded text starts like the reference" \
  bash -c "memra-gen '$STORIES' -p '' -n 40 --temp 0 --json | jq -e '.text | startswith(\"Once upon a time, there was a little girl named Lily.\")'"
check "timings reported on stderr" \
  bash -c "memra-gen '$STORIES' -n 5 --temp 0 2>&1 >/dev/null | grep -E 'prefill .* tok/s.*decode .* tok/s, .* ms/token' >/dev/null"
check "same seed, same tokens" \
  bash -c "a=\$(memra-gen '$STORIES' -n 30 --temp 1 --seed 42 --json | jq -c .tokens); b=\$(memra-gen '$STORIES' -n 30 --temp 1 --seed 42 -t 1 --json | jq -c .tokens); [ \"\$a\" = \"\$b\" ]"
check "another seed, other tokens" \
  bash -c "a=\$(memra-gen '$STORIES' -n 30 --temp 1 --seed 42 --json | jq -c .tokens); b=\$(memra-gen '$STORIES' -n 30 --temp 1 --seed 43 --json | jq -c .tokens); [ \"\$a\" != \"\$b\" ]"
check "a stop string ends generation and never leaks" \
  bash -c "memra-gen '$STORIES' -p '' -n 40 --temp 0 --stop Lily --json | jq -e '.finish_reason == \"stop\" and (.text | contains(\"Lily\") | not) and (.text | endswith(\"named \"))'"
check "streamed text equals the JSON text" \
  bash -c "a=\$(memra-gen '$STORIES' -p '' -n 40 --temp 0 2>/dev/null); b=\$(memra-gen '$STORIES' -p '' -n 40 --temp 0 --json | jq -r .text); [ \"\$a\" = \"\$b\" ]"
check "--prompt-ids feeds ids directly" \
  bash -c "memra-gen '$STORIES' --prompt-ids 1,403,407 -n 3 --temp 0 --json | jq -e '.prompt_tokens == [1,403,407] and .tokens == [261,378,432]'"
check "the default model is memra-tiny, and it continues held-out English as PyTorch did" \
  bash -c "memra-gen -p 'The whale' -n 12 --temp 0 --json | jq -e '.text | startswith(\"'\\''s head, and the whale'\\''s head is\")'"
check "--chat renders the model's template (ChatML)" \
  bash -c "memra-gen models/memra-tiny.gguf --chat --system 'Be brief.' -p hi -n 2 --temp 0 --json | jq -e '.prompt_tokens[0] == 4094 and (.prompt_tokens | index(4095)) != null'"

# Rendering an OpenAI request.
printf '%s' '{"messages":[{"role":"user","content":"hi"}]}' >"$T/req.json"
check "--render prints the exact prompt" \
  bash -c "[ \"\$(memra-gen models/memra-tiny.gguf --render <'$T/req.json')\" = \"\$(printf '<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n')\" ]"
check "--render with add_generation_prompt false and a template file" \
  bash -c "printf '{{ messages[0].content }}|{{ add_generation_prompt }}' >'$T/t.jinja'; [ \"\$(printf '{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"add_generation_prompt\":false}' | memra-gen '$QWEN2' --render --chat-template '$T/t.jinja')\" = 'x|False' ]"

# Bad input: one line, exit 1 (or 2 for usage).
expect_error "prompt longer than the context" 1 "does not fit the context of 8" memra-gen "$STORIES" -p 'Once upon a time there was a little girl who loved to play' -c 8
expect_error "out-of-range prompt id" 1 "999999.*out of range" memra-gen "$STORIES" --prompt-ids 1,999999 -n 2
expect_error "out-of-range detokenize id" 1 "999999" memra-gen "$QWEN2" --detokenize --ids 9707,999999
expect_error "generation on a vocab-only file" 1 "vocab-only" memra-gen "$QWEN2" -p hi
expect_error "bad top-p" 2 "--top-p: 1.5 is out of range" memra-gen "$STORIES" --top-p 1.5
expect_error "cuda backend without a device: one line" 1 "CUDA device 0: not present" memra-gen "$STORIES" --backend cuda
for kv in bf16 q8_0; do
  check "stories260K greedy with $kv KV keeps the 40 reference ids" \
    bash -c "memra-gen '$STORIES' -p '' -n 40 --temp 0 --kv $kv --json | jq -e '(.tokens | map(tostring) | join(\",\")) == \"$REF\"'"
done
expect_error "bad KV type" 2 "--kv: KV type 'q4' is not f32, f16, bf16 or q8_0" memra-gen "$STORIES" --kv q4
expect_error "--device on the cpu backend" 2 "the cpu backend has no devices" memra-gen "$STORIES" --backend cpu --device 1
expect_error "a device past the last: names how many there are" 1 "CUDA device 5: not present .0 devices found" memra-gen "$STORIES" --backend cuda --device 5
expect_error "two modes" 2 "separate modes" memra-gen "$QWEN2" --tokenize --render
expect_error "no template" 1 "no chat template" memra-gen "$STORIES" --chat -p hi
expect_error "malformed request JSON" 1 "request: invalid JSON" bash -c "printf '{\"messages\":' | memra-gen '$QWEN2' --render --chat-template '$T/t.jinja'"
expect_error "template error names the line" 1 "template line 2" bash -c "printf '{{ 1 }}\n{%% if %%}' >'$T/bad.jinja'; memra-gen '$QWEN2' --render --chat-template '$T/bad.jinja' <'$T/req.json'"

# The text ends its line (the timing line on stderr starts its own).
check "the generated text ends with a newline" \
  bash -c "memra-gen '$DATA/models/stories260K.gguf' -p '' -n 8 --temp 0 2>/dev/null | tail -c 1 | od -An -c | grep -q '\\\\n'"
# -n past the context: clamped, one warning line naming both numbers.
check "-n past the context is clamped with one warning" \
  bash -c "memra-gen '$DATA/models/stories260K.gguf' -p '' -n 1000 -c 32 --temp 0 --json 2>'$T/clamp.err' | jq -e '(.tokens | length) == 31 and .finish_reason == \"length\"' &&
           [ \$(grep -c 'warning: -n 1000 is more than the context of 32 leaves after the 1-token prompt: generating at most 31' '$T/clamp.err') = 1 ]"
# A checkpoint without a tokenizer runs on ids, and prints the ids.
memra-convert --random tests/fixtures/configs/tiny-qwen3.json --seed 3 "$T/notok.gguf" 2>/dev/null
check "--prompt-ids on a model without a tokenizer prints the generated ids" \
  bash -c "a=\$(memra-gen '$T/notok.gguf' --prompt-ids 1,2,3 -n 6 --temp 0 2>/dev/null) &&
           b=\$(memra-gen '$T/notok.gguf' --prompt-ids 1,2,3 -n 6 --temp 0 --json 2>/dev/null | jq -r '.tokens | map(tostring) | join(\" \")') &&
           [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ] && [ \$(echo \"\$a\" | wc -w) = 6 ]"
expect_error "text needs a tokenizer" 1 "no tokenizer|tokenizer" memra-gen "$T/notok.gguf" -p "hello" -n 2

# Constrained output (lib/grammar): memra-tiny was never trained on JSON,
# yet every sampled output parses and validates against the schema.
G=tests/fixtures/grammar
ok=0
for seed in 1 2 3 4 5 6 7 8; do
  memra-gen models/memra-tiny.gguf -p "A record:" -n 300 --temp 1 --seed $seed \
    --json-schema $G/person.schema.json --backend cpu 2>/dev/null >"$T/g$seed.json" &&
  jq -e '(keys == ["age","name","tags"]) and (.name | type == "string" and length <= 20) and
         (.age | type == "number" and . == floor and . >= 0 and . <= 120) and
         (.tags | type == "array" and length <= 3 and all(. == "a" or . == "b" or . == "c"))' \
    "$T/g$seed.json" >/dev/null && ok=$((ok + 1))
done
[ $ok -eq 8 ] && pass "--json-schema: 8 sampled outputs of memra-tiny parse and validate" ||
  fail "--json-schema: 8 sampled outputs of memra-tiny parse and validate" "$ok of 8: $(cat "$T"/g*.json | head -c 400)"
check "--grammar: a GBNF yes/no answer is exactly yes or no" \
  bash -c "for s in 1 2 3; do a=\$(memra-gen models/memra-tiny.gguf -p 'Answer:' -n 20 --temp 1 --seed \$s --grammar $G/yes-no.gbnf 2>/dev/null) && case \$a in yes|no) ;; *) exit 1 ;; esac; done"
expect_error "--json-schema with an unsupported keyword names it" 1 "multipleOf" \
  memra-gen models/memra-tiny.gguf -p x -n 4 --json-schema $G/unsupported.schema.json
expect_error "--grammar and --json-schema together" 2 "give one" \
  memra-gen models/memra-tiny.gguf -p x -n 4 --grammar $G/yes-no.gbnf --json-schema $G/person.schema.json
