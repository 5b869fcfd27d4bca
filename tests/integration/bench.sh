# memra-bench end to end: the JSON rows and their arithmetic, the table, the
# bandwidth probe and its cache, the tokenizer bench (vocab-only GGUF,
# tokenizer.json dir, a file), the sampler bench, bench-compare.jq, and bad
# input. Small
# -p/-n/-r throughout; no speed is ever asserted.
source tests/integration/lib.bash
STORIES=$DATA/models/stories260K.gguf
TINY=models/memra-tiny.gguf
QWEN2=$DATA/vocab/ggml-vocab-qwen2.gguf
# Never touch the user's cache: the probe writes under the scratch dir.
export MEMRA_CACHE=$T/cache

# The model bench, with a given ceiling (no probe).
memra-bench "$STORIES" -p 32 -n 8 -d 0,16 -r 2 -t 1 --bandwidth 10 --json >"$T/a.json" 2>"$T/a.err"
check "stories260K --json has pp32, tg8 @ d0 and tg8 @ d16" \
  jq -e '[.rows[] | [.test, .kind, .depth, .tokens]] == [["pp32","prefill",0,32],["tg8","decode",0,8],["tg8","decode",16,8]]' "$T/a.json"
check "every row has positive tok/s, min <= median <= max, and r repetitions" \
  jq -e '.rows | length == 3 and all(.tok_s > 0 and .tok_s_min > 0 and .tok_s_min <= .tok_s and .tok_s <= .tok_s_max and .ms.min <= .ms.median and .ms.median <= .ms.max)' "$T/a.json"
check "ms/token = 1000 / tok/s, and = median ms / tokens" \
  jq -e 'def near(a; b): ((a - b) | fabs) <= 1e-6 * (b | fabs) + 1e-9; .rows | all(near(.ms_per_token; 1000 / .tok_s) and near(.ms_per_token; .ms.median / .tokens))' "$T/a.json"
check "decode GB/s = bytes/token x tok/s / 1e9; prefill GB/s = weight bytes / prompt time" \
  jq -e 'def near(a; b): ((a - b) | fabs) <= 1e-6 * (b | fabs) + 1e-12; .model.bytes_per_token as $b | .rows | all(if .kind == "decode" then near(.gb_s; $b * .tok_s / 1e9) else near(.gb_s; $b / (.ms.median / 1000) / 1e9) end)' "$T/a.json"
check "peak memory: host RSS per row, the run's peak the largest" \
  jq -e '.memory.what == "host_rss" and .memory.source == "VmHWM" and .memory.peak_bytes > 1000000 and (.rows | all(.peak_mem_bytes > 1000000)) and .memory.peak_bytes == ([.rows[].peak_mem_bytes] | max)' "$T/a.json"
check "% of ceiling = GB/s / the given 10 GB/s" \
  jq -e 'def near(a; b): ((a - b) | fabs) <= 1e-6 * (b | fabs) + 1e-12; .ceiling.gb_s == 10 and .ceiling.source == "given" and (.rows | all(near(.pct_ceiling; 100 * .gb_s / 10)))' "$T/a.json"
check "bytes/token is the census figure" \
  bash -c "[ \"\$(jq .model.bytes_per_token '$T/a.json')\" = \"\$(memra-census '$STORIES' --json | jq .decode.bytes_per_token)\" ]"
check "header fields: model, family, dtype, threads, backend, date, cpu, reps" \
  jq -e '.program == "memra-bench" and .mode == "model" and (.model.path | endswith("stories260K.gguf")) and .model.family == "llama" and .model.format == "gguf" and .model.dtype == "F32" and .threads == 1 and .backend == "cpu" and .kv_type == "bf16" and .reps == 2 and .warmup == 1 and (.date | test("^[0-9]{4}-[0-9]{2}-[0-9]{2}T")) and (.host.cpu | length > 0) and .ceiling.decode_tok_s > 0' "$T/a.json"
check "cpu_level: the fast path's ISA level (MEMRA_CPU_ISA lowers it); none on cpu-ref" \
  bash -c "jq -e '.cpu_level | IN(\"scalar\", \"avx2\", \"avx512\", \"amx\", \"neon\", \"dotprod\")' '$T/a.json' &&
           MEMRA_CPU_ISA=scalar memra-bench '$STORIES' -p 8 -n 2 -d 0 -r 1 -t 1 --bandwidth 10 --json 2>/dev/null | jq -e '.cpu_level == \"scalar\"' &&
           memra-bench '$STORIES' --backend cpu-ref -p 8 -n 2 -d 0 -r 1 -t 1 --bandwidth 10 --json 2>/dev/null | jq -e 'has(\"cpu_level\") | not'"
check "nothing but the JSON on stdout, nothing on stderr with a given ceiling" \
  bash -c "[ ! -s '$T/a.err' ] && jq -e . '$T/a.json' >/dev/null"

# Prefill at depth: D tokens filled untimed before each timed prompt.
memra-bench "$STORIES" -p 16 -n 0 --prefill-depth 0,200 -r 2 -t 1 --bandwidth 10 --json >"$T/pd.json"
check "--prefill-depth 0,200: a pp16 row at each depth, 16 tokens each" \
  jq -e '[.rows[] | [.test, .kind, .depth, .n_prompt, .tokens]] == [["pp16","prefill",0,16,16],["pp16","prefill",200,16,16]] and (.rows | all(.tok_s > 0))' "$T/pd.json"
memra-bench "$STORIES" -p 16 -n 0 --prefill-depth 200 -r 1 -t 1 --bandwidth 10 >"$T/pd.txt"
check "the table labels a prefill row at depth 'pp16 @ d200'" grep -Eq '^\| pp16 @ d200 ' "$T/pd.txt"
expect_error "--prefill-depth past the context: usage error naming both" 2 "prefill-depth 60 \\+ prompt 16 = 76 does not fit the context of 64" \
  memra-bench "$STORIES" -p 16 -n 0 --prefill-depth 60 --ctx 64 -r 1 --bandwidth 10
expect_error "--prefill-depth with --tokenizer: usage error" 2 "prefill-depth" \
  memra-bench "$QWEN2" --tokenizer --prefill-depth 8

memra-bench "$TINY" -p 16 -n 4 -d 0,64 -r 1 -t 2 --kv f16 --n-batch 8 --bandwidth 10 --json >"$T/t.json"
check "memra-tiny: qwen3 BF16, kv f16, 2 threads, prefill chunk 8, three rows" \
  jq -e '.model.family == "qwen3" and .model.dtype == "BF16" and .kv_type == "f16" and .threads == 2 and .n_batch == 8 and (.rows | length == 3 and all(.tok_s > 0))' "$T/t.json"

# Batched decode rows.
memra-bench "$TINY" -p 16 -n 6 -d 0 -b 1,3,5 -r 2 -t 2 --bandwidth 10 --json >"$T/bt.json" 2>"$T/bt.err"
check "-b 1,3,5: one batch row per size after the pp and tg rows, at depth = the prompt" \
  jq -e '[.rows[] | [.test, .kind, .batch, .depth, .n_prompt, .tokens]] == [["pp16","prefill",1,0,16,16],["tg6","decode",1,0,0,6],["tg6","batch",1,16,16,6],["tg6","batch",3,16,16,18],["tg6","batch",5,16,16,30]] and .n_seqs == 5' "$T/bt.json"
check "batch rows: aggregate = per-sequence x B, ms/step = median / n, ms/token = 1000 / aggregate" \
  jq -e 'def near(a; b): ((a - b) | fabs) <= 1e-6 * (b | fabs) + 1e-9; [.rows[] | select(.kind == "batch")] | all(near(.tok_s; .tok_s_per_seq * .batch) and near(.ms_per_step; .ms.median / .n_gen) and near(.ms_per_token; 1000 / .tok_s) and .tok_s_min <= .tok_s and .tok_s <= .tok_s_max and .peak_mem_bytes > 0)' "$T/bt.json"
check "batch rows: the weights stream once per step (GB/s = bytes/token x steps/s)" \
  jq -e 'def near(a; b): ((a - b) | fabs) <= 1e-6 * (b | fabs) + 1e-12; .model.bytes_per_token as $b | [.rows[] | select(.kind == "batch")] | all(near(.gb_s; $b * .tok_s_per_seq / 1e9) and near(.pct_ceiling; 100 * .gb_s / 10))' "$T/bt.json"
check "bench-compare keeps the batch rows apart" bash -c "
  jq -s -r -f scripts/bench-compare.jq '$T/bt.json' '$T/bt.json' | grep -Eq '^\\| tg6 b3 @ d16 \\| [0-9.]+ \\| [0-9.]+ \\| 1x \\|' &&
  [ \$(jq -s -r -f scripts/bench-compare.jq '$T/bt.json' '$T/bt.json' | grep -c '^| tg6 b') = 3 ]"
memra-bench "$STORIES" -p 8 -n 4 -d 0 -b 2,4 -r 1 --bandwidth 10 >"$T/bt.txt"
check "the table has a batched-decode section" \
  bash -c "grep -Eq '^\\| batched decode +\\| +aggregate tok/s' '$T/bt.txt' && grep -Eq '^\\| tg4 b2 @ d8 ' '$T/bt.txt' && grep -Eq '^\\| tg4 b4 @ d8 ' '$T/bt.txt' && grep -Eq '^memory +peak resident set' '$T/bt.txt'"

# Constrained decode rows: every tg and -b step under the schema's grammar
# mask (a token the grammar refused would fail the row: gram_accept_token
# after each step), 48 steps so memra-tiny finishes objects and starts new ones.
memra-bench "$TINY" -p 16 -n 48 -d 0 -b 1,3 -r 2 -t 2 --bandwidth 10 \
  --json-schema bench/schemas/ten-fields.json --json >"$T/js.json" 2>"$T/js.err"
check "--json-schema: tg and batch rows, constrained, named in the header" \
  jq -e '.json_schema == "bench/schemas/ten-fields.json" and ([.rows[] | [.test, .kind, .batch, (.constrained // false)]] == [["pp16","prefill",1,false],["tg48","decode",1,true],["tg48","batch",1,true],["tg48","batch",3,true]]) and (.rows | all(.tok_s > 0))' "$T/js.json"
memra-bench "$TINY" -p 8 -n 8 -d 0 -r 1 -t 2 --bandwidth 10 \
  --json-schema bench/schemas/ten-fields.json >"$T/js.txt"
check "--json-schema: the table names the schema" \
  grep -Eq '^schema +bench/schemas/ten-fields.json constrains every decode row' "$T/js.txt"
printf '{"type": "object", "properties": {"a": {"type": "nonsense"}}}' >"$T/bad-schema.json"
expect_error "--json-schema: a schema it cannot compile names the file" 1 "bad-schema.json" \
  memra-bench "$TINY" -p 8 -n 4 -d 0 -r 1 -t 2 --bandwidth 10 --json-schema "$T/bad-schema.json"
expect_error "--json-schema with -n 0: usage error" 2 "json-schema" \
  memra-bench "$TINY" -p 8 -n 0 -r 1 --bandwidth 10 --json-schema bench/schemas/ten-fields.json

memra-bench "$TINY" -p 16 -n 4 -r 1 -t 2 --bandwidth 10 --json >"$T/d.json" 2>"$T/d.err"
check "a default depth that does not fit (512 + 4 > 512) is skipped with a note" \
  bash -c "grep -q 'default depth 512 skipped' '$T/d.err' && jq -e '[.rows[] | .depth] == [0, 0]' '$T/d.json'"

memra-bench "$STORIES" -p 16 -n 4 -d 0,8 -r 1 --bandwidth 10 >"$T/table.txt"
check "the table has the header and one line per row" \
  bash -c "grep -Eq '^model +.*stories260K.gguf: llama, gguf, F32' '$T/table.txt' && grep -Eq '^ceiling +10.00 GB/s host memory read bandwidth \\(given' '$T/table.txt' && grep -Eq '^cpu ' '$T/table.txt' && grep -Eq '^\\| pp16 ' '$T/table.txt' && grep -Eq '^\\| tg4 @ d8 ' '$T/table.txt'"

# The probe: measured once, then read from the cache.
memra-bench "$STORIES" -p 8 -n 0 -r 1 --json >"$T/p1.json" 2>"$T/p1.err"
check "first run measures the host bandwidth and writes the cache" \
  bash -c "jq -e '.ceiling.source == \"measured\" and .ceiling.gb_s > 0 and (.ceiling.cache_file | startswith(\"$MEMRA_CACHE/bandwidth-\"))' '$T/p1.json' && jq -e '.read_gb_s > 0' $MEMRA_CACHE/bandwidth-*.json && grep -q 'measuring the host memory read bandwidth' '$T/p1.err'"
memra-bench "$STORIES" -p 8 -n 0 -r 1 --json >"$T/p2.json" 2>"$T/p2.err"
check "second run reads the cache (same figure, no probe)" \
  bash -c "jq -e '.ceiling.source == \"cache\"' '$T/p2.json' && [ \"\$(jq .ceiling.gb_s '$T/p1.json')\" = \"\$(jq .ceiling.gb_s '$T/p2.json')\" ] && [ ! -s '$T/p2.err' ]"

# The tokenizer bench.
memra-bench "$QWEN2" --tokenizer -r 1 --json >"$T/tok.json"
check "tokenizer bench on the qwen2 vocab-only GGUF: MB/s > 0 on the built-in ~1 MB text" \
  jq -e '.mode == "tokenizer" and .mb_s > 0 and .tokens_s > 0 and .n_tokens > 0 and .text.source == "builtin" and .text.bytes > 990000 and .text.bytes <= 1000000 and .tokenizer.kind == "byte-level-bpe" and .tokenizer.vocab == 151936 and .threads == 1' "$T/tok.json"
check "tokenizer figures add up (bytes/token, tokens/s, MB/s from the median)" \
  jq -e 'def near(a; b): ((a - b) | fabs) <= 1e-6 * (b | fabs); near(.bytes_per_token; .text.bytes / .n_tokens) and near(.mb_s; .text.bytes / (.ms.median / 1000) / 1e6) and near(.tokens_s; .n_tokens / (.ms.median / 1000)) and .mb_s_min <= .mb_s and .mb_s <= .mb_s_max' "$T/tok.json"
check "the built-in text is the same every run (same token count)" \
  bash -c "[ \"\$(memra-bench '$QWEN2' --tokenizer -r 1 --json | jq .n_tokens)\" = \"\$(jq .n_tokens '$T/tok.json')\" ]"
check "tokenizer bench table names the text it used" \
  bash -c "memra-bench '$QWEN2' --tokenizer -r 1 | grep -Eq '^text +built-in mixed text'"
check "tokenizer bench on a file: its bytes, its source" \
  bash -c "memra-bench '$QWEN2' --tokenizer -f README.md -r 1 --json | jq -e '.text.source == \"file\" and .text.bytes == $(wc -c <README.md) and .mb_s > 0'"
memra-convert "$TINY" "$T/hf" >/dev/null 2>&1 && mkdir -p "$T/tokdir" && cp "$T/hf/tokenizer.json" "$T/hf/tokenizer_config.json" "$T/tokdir/"
check "tokenizer bench on a dir holding just tokenizer.json" \
  bash -c "memra-bench '$T/tokdir' --tokenizer -r 1 --json | jq -e '.tokenizer.loaded_from == \"tokenizer.json\" and .tokenizer.vocab == 4096 and .mb_s > 0'"
check "tokenizer bench on a model GGUF (its own tokenizer, no weights run)" \
  bash -c "memra-bench '$TINY' --tokenizer -r 1 --json | jq -e '.tokenizer.loaded_from == \"GGUF tokenizer.* keys\" and .mb_s > 0'"

# The sampler bench: five mixes over one row, no model.
memra-bench --sampler --vocab 5000 -r 2 --json >"$T/smp.json"
check "sampler bench: five mixes over 5,000 ids, ms > 0, min <= median <= max, tokens/s = 1000 / ms" \
  jq -e 'def near(a; b): ((a - b) | fabs) <= 1e-6 * (b | fabs) + 1e-9; .mode == "sampler" and .vocab == 5000 and .threads == 1 and .reps == 2 and (.weights_form == "avx512" or .weights_form == "scalar") and ([.rows[].mix] == ["greedy", "T 0.8, top-k 40, top-p 0.95, min-p 0.05", "T 1", "T 1, top-p 0.99", "T 0.8, top-p 0.95"]) and (.rows | all(.ms.min > 0 and .ms.min <= .ms.median and .ms.median <= .ms.max and near(.tokens_s; 1000 / .ms.median)))' "$T/smp.json"
check "sampler bench with MEMRA_CPU_ISA=scalar names the scalar form" \
  bash -c "MEMRA_CPU_ISA=scalar memra-bench --sampler --vocab 300 -r 1 | grep -Eq '^weights +scalar form'"
expect_error "--sampler takes no MODEL" 2 "takes no MODEL" memra-bench --sampler "$TINY"
expect_error "--sampler refuses the model bench's flags" 2 "-n goes with the model bench, not --sampler" \
  memra-bench --sampler -n 8
expect_error "--vocab without --server or --sampler: usage error" 2 "--vocab goes with --server or --sampler" \
  memra-bench "$TINY" --vocab 100
expect_error "--sampler --vocab past 2^24: usage error" 2 "at most 16777216" \
  memra-bench --sampler --vocab 16777217

# bench-compare.jq
memra-bench "$STORIES" -p 32 -n 8 -d 0,24 -r 1 -t 2 --bandwidth 20 --json >"$T/b.json"
jq -s -r -f scripts/bench-compare.jq "$T/a.json" "$T/b.json" >"$T/cmp.txt"
check "bench-compare: a ratio table over the rows of both runs" \
  bash -c "grep -Eq '^A: .*stories260K.gguf \\(llama F32\\), cpu, 1 thread,' '$T/cmp.txt' && grep -Eq '^B: .*2 threads' '$T/cmp.txt' && grep -Eq '^\\| test \\| A tok/s \\| B tok/s \\| B/A \\|' '$T/cmp.txt' && grep -Eq '^\\| pp32 \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x \\|' '$T/cmp.txt' && grep -Eq '^\\| tg8 @ d0 \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x \\|' '$T/cmp.txt' && grep -Eq '^\\| tg8 @ d16 \\| [0-9.]+ \\| - \\| - \\|' '$T/cmp.txt' && grep -Eq '^\\| tg8 @ d24 \\| - \\| [0-9.]+ \\| - \\|' '$T/cmp.txt'"
check "bench-compare: the ratio is B tok/s / A tok/s" \
  bash -c "want=\$(jq -s -r '(.[1].rows[0].tok_s / .[0].rows[0].tok_s * 100 | round) / 100 | tostring' '$T/a.json' '$T/b.json'); grep -q \"^| pp32 | .* | \${want}x |\" '$T/cmp.txt'"
check "bench-compare on two tokenizer runs" \
  bash -c "jq -s -r -f scripts/bench-compare.jq '$T/tok.json' '$T/tok.json' | grep -Eq '^\\| tokenize [0-9]+ B \\| [0-9.]+ \\| [0-9.]+ \\| 1x \\|'"
expect_error "bench-compare refuses a model run against a tokenizer run" 5 "one run is model, the other tokenizer" \
  jq -s -r -f scripts/bench-compare.jq "$T/a.json" "$T/tok.json"

# Bad input: one line each; exit 2 for usage, 1 for a bad model.
expect_error "-b 0" 2 "-b: 0 is out of range" memra-bench "$STORIES" -b 0,8
expect_error "-b with -n 0" 2 "-b needs decode steps" memra-bench "$STORIES" -b 8 -n 0
expect_error "-b: prompt + n beyond the context" 2 "-b: prompt 500 \\+ 64 decode tokens = 564 does not fit the context of 512" memra-bench "$TINY" -b 2 -p 500 -n 64 -d 0
expect_error "cuda backend without a device: one line" 1 "CUDA device 0: not present" memra-bench "$STORIES" --backend cuda -p 4 -n 2 -r 1
expect_error "unknown backend" 2 "--backend: backend 'tpu' is not cpu, cpu-ref or cuda" memra-bench "$STORIES" --backend tpu
expect_error "depth + n beyond the context names the numbers" 2 "depth 500 \\+ 128 decode tokens = 628 does not fit the context of 512" memra-bench "$TINY" -d 0,500 -n 128
expect_error "a prompt beyond the context" 2 "-p 1000: the prompt does not fit the context of 512" memra-bench "$TINY" -p 1000
expect_error "--ctx sets the limit" 2 "depth 0 \\+ 64 decode tokens = 64 does not fit the context of 32 \\(--ctx\\)" memra-bench "$STORIES" -p 16 -n 64 -d 0 -c 32
expect_error "zero repetitions" 2 "-r: 0 is out of range" memra-bench "$STORIES" -r 0
check "--kv q8_0: the JSON names the KV type" \
  bash -c "memra-bench '$STORIES' -p 8 -n 4 -d 0 -r 1 -t 2 --kv q8_0 --bandwidth 10 --json | jq -e '.kv_type == \"q8_0\"'"
expect_error "bad kv type" 2 "--kv: KV type 'q8' is not f32, f16, bf16 or q8_0" memra-bench "$STORIES" --kv q8
expect_error "bad list entry" 2 "-d: 'x' is not an integer" memra-bench "$STORIES" -d 0,x
expect_error "nothing to measure" 2 "nothing to measure" memra-bench "$STORIES" -p 0 -n 0
expect_error "unknown flag" 2 "unknown option '--bogus'" memra-bench "$STORIES" --bogus
expect_error "no model" 2 "no MODEL given" memra-bench
expect_error "-f without --tokenizer" 2 "-f goes with --tokenizer" memra-bench "$STORIES" -f README.md
expect_error "model flags with --tokenizer" 2 "--threads goes with the model bench" memra-bench "$QWEN2" --tokenizer -t 2
expect_error "--profile-range is a model bench flag" 2 "--profile-range goes with the model bench" memra-bench "$QWEN2" --tokenizer --profile-range
check "--profile-range on the cpu backend: the same rows, nothing on stderr" \
  bash -c "memra-bench '$STORIES' -p 8 -n 4 -d 0 -r 2 --bandwidth 10 --profile-range --json 2>\"$T/prof.err\" | jq -e '[.rows[].test] == [\"pp8\", \"tg4\"]' >/dev/null && [ ! -s \"$T/prof.err\" ]"
expect_error "vocab-only GGUF in the model bench" 1 "vocab-only GGUF has no weights" memra-bench "$QWEN2"
expect_error "missing model" 1 "nope.gguf" memra-bench "$T/nope.gguf"
expect_error "missing text file" 1 "missing.txt" memra-bench "$QWEN2" --tokenizer -f "$T/missing.txt"
