# memra-spec and memra-trim-ranks end to end: the self-consistency gate on
# memra-tiny with memra-tiny-draft for K = 1..8 (greedy, sampled, n-gram,
# trimmed), the rank file's bytes, resuming, --validate, and bad input.
source tests/integration/lib.bash
TINY=models/memra-tiny.gguf
DRAFT=models/memra-tiny-draft.gguf
STORIES=models/stories260K.gguf

# The gate as the issue states it: every K passes, and accepts drafts.
memra-spec "$TINY" --draft "$DRAFT" -K 1..8 >"$T/gate.txt" 2>"$T/gate.err"; rc=$?
rows=$(awk '$1 ~ /^[1-8]$/ && $4 > 0 { n++ } END { print n + 0 }' "$T/gate.txt")
if [ $rc -eq 0 ] && grep -qx 'SELF-CONSISTENCY PASS' "$T/gate.txt" && [ "$rows" -eq 8 ]; then
  pass "memra-spec memra-tiny --draft memra-tiny-draft -K 1..8: SELF-CONSISTENCY PASS, acceptance > 0 for every K"
else
  fail "memra-spec -K 1..8 gate" "exit $rc, $rows of 8 K rows with accepted drafts: $(cat "$T/gate.txt" "$T/gate.err" | head -c 600)"
fi

check "--json: every K consistent with plain greedy, acceptance above zero, rounds add up" \
  bash -c "memra-spec '$TINY' --draft '$DRAFT' -K 1..8 -n 48 --json | jq -e '
    .self_consistency == \"PASS\" and (.runs | length) == 8 and .plain.tokens == 48 and
    all(.runs[]; .consistent and .first_divergence == null and .acceptance > 0 and
        .tokens == 48 and .accepted <= .drafted and .drafted <= .k * .rounds and
        (.accepted_per_round | add) == .rounds and .tokens_per_round >= 1)'"
check "n-gram drafter: SELF-CONSISTENCY PASS for K = 1..8" \
  bash -c "memra-spec '$TINY' --ngram -K 1..8 -n 64 | grep -qx 'SELF-CONSISTENCY PASS'"
check "sampled (--temp 0.8): seeded runs reproducible, drafts accepted" \
  bash -c "memra-spec '$TINY' --draft '$DRAFT' -K 1,4 -n 48 --temp 0.8 --seed 5 --json |
           jq -e '.self_consistency == \"PASS\" and all(.runs[]; .acceptance > 0)'"

# A hybrid target (qwen3_5: recurrent state that cannot be cut back): after a
# rejection the engine restores its state checkpoint and runs the accepted
# rows again. Random weights accept few drafts; over 300 tokens these seeds
# accept 6 to 16 (measured), and every K must stay token-identical.
memra-convert "$STORIES" "$T/stories-hf" >/dev/null 2>&1
jq '.vocab_size = 512' tests/fixtures/configs/tiny-qwen3_5.json >"$T/q35.json"
memra-convert --random "$T/q35.json" --seed 3 --tokenizer "$T/stories-hf" "$T/q35.gguf" >/dev/null 2>&1
check "hybrid target (qwen3_5), n-gram drafter: token-identical for K = 1..4 with drafts accepted" \
  bash -c "memra-spec '$T/q35.gguf' --ngram -K 1..4 -p Once -n 300 --ignore-eos --json | jq -e '
    .self_consistency == \"PASS\" and all(.runs[]; .consistent and .accepted > 0)'"
expect_error "a hybrid draft model is refused: it cannot go back" 1 "cannot draft yet" \
  memra-spec "$STORIES" --draft "$T/q35.gguf" -K 1 -n 4

# The MTP drafter (--mtp): the checkpoint's own MTP block. A random block
# accepts next to nothing, so the output must stay identical for every K;
# tests/tools/mtp_bigram.py then makes the block predict exactly what the
# model will (sublayer outputs zeroed, fc = [I | 0]): every draft of a
# block wired right is accepted, dense and MoE, GGUF and HF dir.
for fam in qwen3_5 qwen3_5-moe; do
  jq '.vocab_size = 512' "tests/fixtures/parity/configs/tiny-$fam-mtp.json" >"$T/$fam-mtp.json"
  memra-convert --random "$T/$fam-mtp.json" --seed 3 --tokenizer "$T/stories-hf" "$T/$fam-mtp.gguf" >/dev/null 2>&1
  # (memra-spec exits 1 here: the gate asks for accepted drafts)
  check "$fam with an MTP block, --mtp: token-identical to plain greedy for K = 1..4" \
    bash -c "memra-spec '$T/$fam-mtp.gguf' --mtp -K 1..4 -p Once -n 200 --ignore-eos --json >'$T/mtp.json';
             jq -e 'all(.runs[]; .consistent and .drafted > 0)' '$T/mtp.json'"
  memra-convert --random "$T/$fam-mtp.json" --seed 3 --outtype f32 --tokenizer "$T/stories-hf" "$T/$fam-bigram" >/dev/null 2>&1 &&
    env -u SHELLOPTS python3 tests/tools/mtp_bigram.py "$T/$fam-bigram" &&
    memra-convert "$T/$fam-bigram" "$T/$fam-bigram.gguf" >/dev/null 2>&1
  check "$fam, an MTP block that predicts the model: SELF-CONSISTENCY PASS, every draft accepted for K = 1..8 (GGUF)" \
    bash -c "memra-spec '$T/$fam-bigram.gguf' --mtp -K 1..8 -p Once -n 100 --ignore-eos --json |
             jq -e '.self_consistency == \"PASS\" and all(.runs[]; .consistent and .acceptance == 1)'"
  check "$fam, the same block from the HF dir: every draft accepted for K = 3" \
    bash -c "memra-spec '$T/$fam-bigram' --mtp -K 3 -p Once -n 60 --ignore-eos --json |
             jq -e '.self_consistency == \"PASS\" and .runs[0].acceptance == 1'"
done
check "a sampled run (--temp 0.9) with the MTP drafter: seeded runs reproducible, drafts accepted" \
  bash -c "memra-spec '$T/qwen3_5-bigram.gguf' --mtp -K 2 -p Once -n 60 --ignore-eos --temp 0.9 --seed 4 --json |
           jq -e '.self_consistency == \"PASS\" and .runs[0].acceptance > 0'"
check "memra-census reports the MTP block" \
  bash -c "memra-census '$T/qwen3_5-mtp.gguf' | grep '^mtp: 1 MTP block' >/dev/null &&
           memra-census '$T/qwen3_5-mtp.gguf' --json | jq -e '.totals.by_group.mtp > 0'"
expect_error "--mtp on a model without an MTP block" 1 "carries no MTP block" \
  memra-spec "$T/q35.gguf" --mtp -K 1 -n 4
expect_error "--mtp with --trim" 2 "no trimmed head" \
  memra-spec "$T/qwen3_5-mtp.gguf" --mtp --trim "$T/q35.gguf"

# An assistant (gemma4_assistant, --draft): a drafter that reads the Gemma 4
# model's K/V and hidden state. tests/tools/assistant_bigram.py makes a pair
# whose drafts are the model's own tokens (all accepted in f32); a random
# assistant accepts next to nothing, but every K stays token-identical.
jq '.vocab_size = 512 | .vocab_size_per_layer_input = 512 | .final_logit_softcapping = null' \
  tests/fixtures/parity/configs/tiny-gemma4.json >"$T/g4.json"
jq '.text_config.vocab_size = 512' tests/fixtures/parity/configs/tiny-gemma4-assistant.json >"$T/g4a.json"
jq '.text_config.hidden_size = 64' "$T/g4a.json" >"$T/g4a64.json"
memra-convert --random "$T/g4.json" --seed 3 --outtype f32 --tokenizer "$T/stories-hf" "$T/g4" >/dev/null 2>&1
memra-convert --random "$T/g4a.json" --seed 4 --outtype f32 "$T/g4a" >/dev/null 2>&1
memra-convert --random "$T/g4.json" --seed 3 --outtype f32 --tokenizer "$T/stories-hf" "$T/g4b" >/dev/null 2>&1 &&
  memra-convert --random "$T/g4a64.json" --seed 4 --outtype f32 "$T/g4ab" >/dev/null 2>&1 &&
  env -u SHELLOPTS python3 tests/tools/assistant_bigram.py "$T/g4b" "$T/g4ab"
check "gemma4 with its assistant (--draft): every draft accepted, token-identical for K = 1..8" \
  bash -c "memra-spec '$T/g4b' --draft '$T/g4ab' -K 1..8 -p Once -n 60 --ignore-eos --json |
           jq -e '.drafter == \"assistant\" and .self_consistency == \"PASS\" and
                  all(.runs[]; .consistent and .drafted > 0 and .accepted == .drafted)'"
check "the assistant, sampled (--temp 0.9): seeded runs reproducible, drafts accepted" \
  bash -c "memra-spec '$T/g4b' --draft '$T/g4ab' -K 3 -p Once -n 40 --ignore-eos --temp 0.9 --seed 4 --json |
           jq -e '.self_consistency == \"PASS\" and all(.runs[]; .acceptance > 0)'"
check "a random assistant: token-identical to plain greedy for K = 1..4" \
  bash -c "memra-spec '$T/g4' --draft '$T/g4a' -K 1..4 -p Once -n 40 --ignore-eos --json >'$T/g4a.out';
           jq -e 'all(.runs[]; .consistent and .drafted > 0)' '$T/g4a.out'"
# The assistant as a GGUF (llama.cpp's gemma4-assistant: no K/V projections, the drafter's
# keys embedding_length_out and nextn_predict_layers), made from its HF directory, back, and
# quantized: each drafts exactly as the directory does.
memra-convert "$T/g4ab" "$T/g4ab.gguf" >/dev/null 2>&1
memra-convert "$T/g4ab.gguf" "$T/g4ab-back" >/dev/null 2>&1
memra-convert "$T/g4a" "$T/g4a.gguf" >/dev/null 2>&1
check "an assistant GGUF: gemma4-assistant, the drafter's keys, no K/V projections" \
  bash -c "grep -aq 'gemma4-assistant' '$T/g4ab.gguf' && grep -aq 'embedding_length_out' '$T/g4ab.gguf' &&
           memra-census '$T/g4ab.gguf' >'$T/g4ab.census' &&
           grep 'drafts for a gemma4 model of hidden size 64' '$T/g4ab.census' >/dev/null &&
           ! grep 'attn_[kv]' '$T/g4ab.census'"
check "an assistant GGUF drafts as its HF directory does (every draft accepted), and back again" \
  bash -c "memra-spec '$T/g4b' --draft '$T/g4ab' -K 1..4 -p Once -n 40 --ignore-eos --json |
             jq -c '[.runs[] | .rounds, .drafted, .accepted, .accepted_per_round]' >'$T/g4ab.dir' &&
           memra-spec '$T/g4b' --draft '$T/g4ab.gguf' -K 1..4 -p Once -n 40 --ignore-eos --json |
             jq -c '[.runs[] | .rounds, .drafted, .accepted, .accepted_per_round]' >'$T/g4ab.gguf.out' &&
           memra-spec '$T/g4b' --draft '$T/g4ab-back' -K 1..4 -p Once -n 40 --ignore-eos --json |
             jq -c '[.runs[] | .rounds, .drafted, .accepted, .accepted_per_round]' >'$T/g4ab.back' &&
           cmp '$T/g4ab.dir' '$T/g4ab.gguf.out' && cmp '$T/g4ab.dir' '$T/g4ab.back' &&
           jq -e 'length > 0 and .[1] > 0 and .[1] == .[2]' '$T/g4ab.dir' >/dev/null"
check "a random assistant's GGUF drafts as its directory does" \
  bash -c "memra-spec '$T/g4' --draft '$T/g4a' -K 1..2 -p Once -n 20 --ignore-eos --json >'$T/g4a.dir';
           memra-spec '$T/g4' --draft '$T/g4a.gguf' -K 1..2 -p Once -n 20 --ignore-eos --json >'$T/g4a.gguf.out';
           jq -e -n --slurpfile a '$T/g4a.dir' --slurpfile b '$T/g4a.gguf.out' '\$a[0].plain.text == \$b[0].plain.text and
             [\$a[0].runs[] | .rounds, .drafted, .accepted, .consistent] == [\$b[0].runs[] | .rounds, .drafted, .accepted, .consistent] and
             all(\$b[0].runs[]; .drafted > 0)'"
check "a quantized assistant (memra-quantize Q4_K_M) drafts for its model, token-identical" \
  bash -c "memra-quantize '$T/g4ab.gguf' '$T/g4ab-q4.gguf' Q4_K_M >/dev/null 2>&1 &&
           memra-spec '$T/g4b' --draft '$T/g4ab-q4.gguf' -K 1..2 -p Once -n 30 --ignore-eos --json |
             jq -e '.self_consistency == \"PASS\" and all(.runs[]; .consistent and .drafted > 0)'"
cp -r "$T/g4a" "$T/g4a-centroids" && env -u SHELLOPTS python3 tests/tools/assistant_centroids.py "$T/g4a-centroids"
check "an assistant with a centroid head (use_ordered_embeddings): read, drafts from the whole head, token-identical" \
  bash -c "memra-census '$T/g4a-centroids' | grep 'its centroid head is not run' >/dev/null &&
           memra-spec '$T/g4' --draft '$T/g4a-centroids' -K 1..2 -p Once -n 20 --ignore-eos --json >'$T/g4c.out';
           jq -e 'all(.runs[]; .consistent and .drafted > 0)' '$T/g4c.out'"
expect_error "an assistant alone is not a model" 1 "drafts for another model" \
  memra-spec "$T/g4a" --ngram -K 1 -n 4
expect_error "memra-gen on an assistant says what it is for" 1 "not a model of its own" \
  memra-gen "$T/g4a" -p Once -n 4
expect_error "an assistant for another model is refused" 1 "drafts for a gemma4 model of hidden size 64" \
  memra-spec "$T/q35.gguf" --draft "$T/g4a" -K 1 -n 4
expect_error "an assistant with --trim" 2 "not an assistant" \
  memra-spec "$T/g4" --draft "$T/g4a" --trim "$T/q35.gguf"
check "memra-census names an assistant and the model it drafts for" \
  bash -c "memra-census '$T/g4a' | grep '^assistant: drafts for a gemma4 model of hidden size 64' >/dev/null &&
           memra-census '$T/g4a' --json | jq -e '.config.assistant_of_dim == 64'"

# Rank files.
check "memra-trim-ranks writes the rank file and its sidecar" \
  memra-trim-ranks "$TINY" "$T/ranks.gguf" --top 512 --n-gen 24
check "rank file: 96 header bytes and 512 i32 ids; the sidecar has 512 distinct ids in range" \
  bash -c "[ \$(stat -c %s '$T/ranks.gguf') -eq 2144 ] && [ \$(wc -l <'$T/ranks.txt') -eq 512 ] &&
           [ \$(sort -u '$T/ranks.txt' | wc -l) -eq 512 ] &&
           awk '\$1 < 0 || \$1 >= 4096 { exit 1 }' '$T/ranks.txt' &&
           [ \"\$(head -c 4 '$T/ranks.gguf')\" = GGUF ]"
check "rank file: the GGUF's d2t data is the sidecar's ids in order" \
  bash -c "[ \"\$(tail -c +97 '$T/ranks.gguf' | od -An -v -td4 -w4 | awk '{ print \$1 }')\" = \"\$(cat '$T/ranks.txt')\" ]"
check "memra-spec --trim with the rank file: SELF-CONSISTENCY PASS for K = 1..8" \
  bash -c "memra-spec '$TINY' --draft '$DRAFT' --trim '$T/ranks.gguf' -K 1..8 -n 64 --json |
           jq -e '.self_consistency == \"PASS\" and .trim_ids == 512 and all(.runs[]; .acceptance > 0)'"
rm -f "$T"/full.* "$T"/part.*
check "memra-trim-ranks --resume after --limit gives the bytes of an uninterrupted run" \
  bash -c "memra-trim-ranks '$TINY' '$T/full.gguf' --top 300 --n-gen 8 >/dev/null &&
           memra-trim-ranks '$TINY' '$T/part.gguf' --top 300 --n-gen 8 --limit 5 | grep -q 'stopped after 5 of 24' &&
           [ -f '$T/part.gguf.state' ] && [ ! -e '$T/part.gguf' ] &&
           memra-trim-ranks '$TINY' '$T/part.gguf' --top 300 --n-gen 8 --resume 2>/dev/null >/dev/null &&
           cmp '$T/full.gguf' '$T/part.gguf' && cmp '$T/full.txt' '$T/part.txt' && [ ! -e '$T/part.gguf.state' ]"
check "memra-trim-ranks --validate: the trim leaves the output identical" \
  bash -c "memra-trim-ranks '$TINY' '$T/v.gguf' --top 256 --n-gen 16 --validate --draft '$DRAFT' |
           grep -q 'outputs identical'"
printf '%s\n' '{"prompt":"The whale"}' '' '{"messages":[{"role":"user","content":"hi"}]}' >"$T/p.jsonl"
check "memra-trim-ranks --prompts reads a .jsonl of prompts and chats" \
  bash -c "memra-trim-ranks '$TINY' '$T/j.gguf' --top 64 --n-gen 8 --prompts '$T/p.jsonl' | grep -q 'over 2 prompts'"

# Bad input: one clear line each.
expect_error "memra-spec: --mtp with --ngram" 2 "one drafter" memra-spec "$TINY" --mtp --ngram
expect_error "memra-spec: no drafter" 2 "no drafter" memra-spec "$TINY"
expect_error "memra-spec: two drafters" 2 "one drafter" memra-spec "$TINY" --ngram --draft "$DRAFT"
expect_error "memra-spec: missing model" 1 "nope.gguf" memra-spec "$T/nope.gguf" --ngram
expect_error "memra-spec: missing draft" 1 "nope.gguf" memra-spec "$TINY" --draft "$T/nope.gguf"
expect_error "memra-spec: a draft of another vocabulary" 1 "vocabulary has 512 tokens, the model's 4096" \
  memra-spec "$TINY" --draft "$STORIES"
expect_error "memra-spec: -K 9 is out of range" 2 "-K: 9 is out of range" memra-spec "$TINY" --ngram -K 9
expect_error "memra-spec: -K 0..3 is out of range" 2 "-K: 0 is out of range" memra-spec "$TINY" --ngram -K 0..3
expect_error "memra-spec: -K 5..2 is empty" 2 "empty" memra-spec "$TINY" --ngram -K 5..2
expect_error "memra-spec: bad -n" 2 "-n: 'x' is not an integer" memra-spec "$TINY" --ngram -n x
expect_error "memra-spec: bad --temp" 2 "--temp" memra-spec "$TINY" --ngram --temp hot
expect_error "memra-spec: unknown option" 2 "unknown option '--bogus'" memra-spec "$TINY" --ngram --bogus
expect_error "memra-spec: --trim without --draft" 2 "--trim goes with --draft" \
  memra-spec "$TINY" --ngram --trim "$T/ranks.gguf"
expect_error "memra-spec: --trim with a file that is not a rank file" 1 "not a rank file" \
  memra-spec "$TINY" --draft "$DRAFT" --trim "$TINY"
memra-trim-ranks "$STORIES" "$T/stories.gguf" --top 100 --n-gen 4 >/dev/null 2>&1
expect_error "memra-spec: a rank file of another vocabulary" 1 "vocabulary of 512 ids" \
  memra-spec "$TINY" --draft "$DRAFT" --trim "$T/stories.gguf"
expect_error "memra-spec: missing prompt file" 1 "nope.txt" memra-spec "$TINY" --ngram -f "$T/nope.txt"
expect_error "memra-trim-ranks: --top past the vocabulary" 2 "--top 5000: the vocabulary of .* has 4096 ids" \
  memra-trim-ranks "$TINY" "$T/x.gguf" --top 5000
expect_error "memra-trim-ranks: --validate without --draft" 2 "--validate needs --draft" \
  memra-trim-ranks "$TINY" "$T/x.gguf" --validate
expect_error "memra-trim-ranks: no OUT" 2 "want MODEL and OUT.gguf" memra-trim-ranks "$TINY"
expect_error "memra-trim-ranks: missing prompts" 1 "nope.jsonl" \
  memra-trim-ranks "$TINY" "$T/x.gguf" --prompts "$T/nope.jsonl"
printf '%s\n' '{"prompt":"ok"}' '{"prompt":3}' >"$T/bad.jsonl"
expect_error "memra-trim-ranks: a bad .jsonl line, by line" 1 "bad.jsonl:2: \"prompt\" must be a string" \
  memra-trim-ranks "$TINY" "$T/x.gguf" --prompts "$T/bad.jsonl"
memra-trim-ranks "$TINY" "$T/s.gguf" --top 300 --n-gen 8 --limit 1 >/dev/null 2>&1
expect_error "memra-trim-ranks: --resume refuses a state of other settings" 1 "written for another model, prompt pack or settings" \
  memra-trim-ranks "$TINY" "$T/s.gguf" --top 300 --n-gen 9 --resume
expect_error "memra-trim-ranks: bad --n-gen" 2 "--n-gen: 0 is out of range" \
  memra-trim-ranks "$TINY" "$T/x.gguf" --n-gen 0
