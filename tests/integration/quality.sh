# Quality measurement: memra-parity --imatrix (importance matrices, read
# back by imatrix_read and by an independent GGUF reader) and --against
# (KL divergence, top-1 agreement and perplexity of a model against a
# reference), on the project's trained tiny models and the held-out text.
source tests/integration/lib.bash
TEXT=tests/fixtures/text/heldout-sample.txt
TINY=models/memra-tiny.gguf
DRAFT=models/memra-tiny-draft.gguf
DUMP=build/release/tests/tools/imatrix_dump
READER="node tests/interop/gguf-read.mjs"
export DUMP READER

# ---- --imatrix ----
check "imatrix collected on memra-tiny over the held-out text" \
  bash -c "memra-parity $TINY --imatrix '$T/tiny.imatrix' -f $TEXT --json -t 2 >'$T/imx.json' &&
           jq -e '.chunks == 2 and .chunk == 512 and .tokens_used == 1024 and .entries == 43 and .partial_entries == 0' '$T/imx.json'"
# every 2-D weight the forward multiplies (here: all of them, the tied
# embedding as the output head) has an entry, and nothing else does
census_2d() { memra-census "$1" --json | jq -c '[.tensors[] | select((.shape | length) == 2) | .name] | sort'; }
dump_names() { $DUMP "$1" | jq -c '[.entries[].name] | sort'; }
export -f census_2d dump_names
check "imatrix: one entry per 2-D weight, read back by imatrix_read" \
  bash -c "a=\$(census_2d $TINY) && b=\$(dump_names '$T/tiny.imatrix') && [ -n \"\$a\" ] && [ \"\$a\" = \"\$b\" ]"
check "imatrix: values positive and finite, one call per token, chunks and text recorded" \
  bash -c "$DUMP '$T/tiny.imatrix' | jq -e --arg t $TEXT '.chunks == 2 and .dataset == \$t and
           all(.entries[]; .min > 0 and .max < 1e6 and .n_calls == 1024) and
           (.entries[] | select(.name == \"blk.0.ffn_down.weight\") | .n_values == 384) and
           (.entries[] | select(.name == \"token_embd.weight\") | .n_values == 256)'"
check "imatrix: an independent GGUF reader sees llama.cpp's layout (.in_sum2 [cols,1], .counts [1,1], F32)" \
  bash -c "$READER '$T/tiny.imatrix' | jq -e '(.tensors | length) == 86 and
           all(.tensors[]; .type == 0) and
           all(.tensors[] | select(.name | endswith(\".in_sum2\")); .ne[1] == 1 and .ne[0] >= 256) and
           all(.tensors[] | select(.name | endswith(\".counts\")); .ne == [1, 1])'"
check "imatrix: --chunk 128 --chunks 3 uses 384 tokens" \
  bash -c "memra-parity $TINY --imatrix '$T/c.imatrix' -f $TEXT --chunk 128 --chunks 3 --json | jq -e '.chunks == 3 and .tokens_used == 384' &&
           $DUMP '$T/c.imatrix' | jq -e 'all(.entries[]; .n_calls == 384)'"
check "imatrix: table output names the file, entries and chunks" \
  bash -c "memra-parity $TINY --imatrix '$T/t.imatrix' -f $TEXT | grep -E '^$T/t.imatrix: 43 entries from 2 chunks of 512 tokens' >/dev/null"
# a routed-expert model from an HF dir: HF names come out as GGUF names, one
# row of values per expert
memra-convert --random tests/fixtures/configs/tiny-qwen3-moe.json --seed 4 --outtype f32 \
  --tokenizer tests/fixtures/tokenizers/bpe-qwen2 "$T/moe" 2>/dev/null
check "imatrix: qwen3_moe HF dir gives stacked expert entries under GGUF names" \
  bash -c "memra-parity '$T/moe' --imatrix '$T/moe.imatrix' -f $TEXT --chunk 64 --chunks 4 2>/dev/null >/dev/null &&
           $DUMP '$T/moe.imatrix' | jq -e '(.entries | length) == 17 and all(.entries[]; .name | startswith(\"model.\") | not) and
             ([.entries[] | select(.name == \"blk.1.ffn_down_exps.weight\" or .name == \"blk.1.ffn_up_exps.weight\" or .name == \"blk.0.ffn_gate_inp.weight\") | .n_values] | sort == [64, 256, 512]) and
             (.entries[] | select(.name == \"blk.0.ffn_gate_inp.weight\") | .n_calls == 256)'"

# ---- --against ----
check "KL of a model against itself is exactly 0, top-1 100%" \
  bash -c "memra-parity $TINY --against $TINY -f $TEXT --json -t 2 | jq -e '.kl_mean == 0 and .kl_max == 0 and .kl_p99 == 0 and .top1_agree_frac == 1 and .ppl_delta == 0 and .positions == 1105'"
check "the reference's perplexity is --perplexity's" \
  bash -c "a=\$(memra-parity $TINY --perplexity $TEXT --json | jq .perplexity) &&
           b=\$(memra-parity $DRAFT --against $TINY -f $TEXT --json | jq .ref_perplexity) && [ \"\$a\" = \"\$b\" ]"
memra-convert $TINY --outtype f16 "$T/tiny-f16.gguf" 2>/dev/null
check "memra-tiny as f16 against bf16: KL small but > 0" \
  bash -c "memra-parity '$T/tiny-f16.gguf' --against $TINY -f $TEXT --json | jq -e '.kl_mean > 0 and .kl_mean < 1e-6 and .kl_max < 1e-4 and .top1_agree_frac > 0.99'"
check "a different model (memra-tiny-draft) is far: KL large, top-1 low" \
  bash -c "memra-parity $DRAFT --against $TINY -f $TEXT --json | jq -e '.kl_mean > 0.3 and .kl_p99 > .kl_median and .kl_max >= .kl_p99 and .top1_agree_frac < 0.8 and .kl_stderr > 0'"
check "--chunk 128 --chunks 2: 254 positions" \
  bash -c "memra-parity $DRAFT --against $TINY -f $TEXT --chunk 128 --chunks 2 --json | jq -e '.windows == 2 and .positions == 254'"
check "table output: perplexity of both, KL and top-1 lines" \
  bash -c "memra-parity $DRAFT --against $TINY -f $TEXT >'$T/tab' && grep -E '^perplexity +[0-9.]+ +[0-9.]+\$' '$T/tab' >/dev/null &&
           grep -E '^KL\\(ref \\|\\| model\\) nats +mean [0-9.]' '$T/tab' >/dev/null && grep -E '^top-1 agreement +[0-9.]+%' '$T/tab' >/dev/null"

# quantized with memra-quantize, using an imatrix from memra-parity (bounds
# from docs/quality-table.md, with room: Q8_0 KL 2.7e-4, Q4_K_M 2.3e-2
# on this text)
check "memra-quantize takes our imatrix; Q8_0 and Q4_K_M measured against the original" \
  bash -c "memra-quantize $TINY '$T/q8.gguf' Q8_0 --imatrix '$T/tiny.imatrix' 2>/dev/null &&
           memra-quantize $TINY '$T/q4km.gguf' Q4_K_M --imatrix '$T/tiny.imatrix' 2>/dev/null &&
           a=\$(memra-parity '$T/q8.gguf' --against $TINY -f $TEXT --json | jq .kl_mean) &&
           b=\$(memra-parity '$T/q4km.gguf' --against $TINY -f $TEXT --json | jq .kl_mean) &&
           jq -n -e --argjson a \"\$a\" --argjson b \"\$b\" '\$a > 0 and \$a < 2e-3 and \$b > \$a and \$b < 0.06'"

# ---- bad input ----
expect_error "--against: vocabulary mismatch" 1 "do not share a vocabulary: 512 tokens vs 4096" \
  memra-parity "$DATA/models/stories260K.gguf" --against $TINY -f $TEXT
expect_error "--against: missing reference" 1 "$T/nope.gguf" memra-parity $TINY --against "$T/nope.gguf" -f $TEXT
expect_error "--against: missing text" 1 "$T/nope.txt" memra-parity $TINY --against $TINY -f "$T/nope.txt"
expect_error "--against needs -f" 2 "--against needs the text: -f TEXT_FILE" memra-parity $TINY --against $TINY
expect_error "--against: text too short to predict" 1 "too few to predict" \
  bash -c "printf 'a' >'$T/one.txt' && memra-parity $TINY --against $TINY -f '$T/one.txt'"
printf 'Call me Ishmael.' >"$T/short.txt"
expect_error "--imatrix: a text shorter than one chunk" 1 "short.txt: [0-9]+ tokens, shorter than one chunk of 512" \
  memra-parity $TINY --imatrix "$T/x.imatrix" -f "$T/short.txt"
expect_error "--imatrix: CPU only" 2 "--imatrix collects on the CPU backend only" \
  memra-parity $TINY --imatrix "$T/x.imatrix" -f $TEXT --backend cuda
expect_error "--imatrix: unwritable output" 1 "writing imatrix: $T/no/dir/x.imatrix" \
  memra-parity $TINY --imatrix "$T/no/dir/x.imatrix" -f $TEXT
expect_error "--imatrix and --against are separate modes" 2 "separate modes" \
  memra-parity $TINY --imatrix "$T/x.imatrix" --against $TINY -f $TEXT
expect_error "-f alone" 2 "-f goes with --imatrix or --against" memra-parity $TINY --perplexity $TEXT -f $TEXT
expect_error "--chunks 0" 2 "--chunks" memra-parity $TINY --against $TINY -f $TEXT --chunks 0
expect_error "--chunk 1" 2 "--chunk" memra-parity $TINY --against $TINY -f $TEXT --chunk 1
expect_error "--chunks without a mode" 2 "--chunks goes with" memra-parity $TINY --reference x --chunks 2
expect_error "imatrix_dump: a model is not an imatrix" 1 "not an imatrix" $DUMP $TINY
