# Two `memra-bench --json` runs side by side, as a Markdown table with the
# ratio B/A of each row's value (tok/s for model runs, MB/s for tokenizer
# runs, aggregate tok/s per concurrency level for --server runs). Rows are
# matched by test, depth and batch (or concurrency); a row only one run has
# shows "-".
#
# --server --turns runs (multi-turn) give, per concurrency level, the
# aggregate prompt and decode tok/s, TTFT mean/p50/p99 over all turns and
# p50/p99 per turn, and the cached tokens the server reported; each row
# names its unit. For the TTFT rows lower is better (a cache-on run B
# against a cache-off run A shows B/A below 1x); for the rates, higher.
#
#   jq -s -r -f scripts/bench-compare.jq A.json B.json
#
# Both runs must be of the same mode (model, tokenizer, server, or
# multi-turn server).

def r(d): if . == null then "-" else (. * pow(10; d) | round) / pow(10; d) | tostring end;
def num: if . == null then "-" elif . >= 100 then r(1) elif . >= 1 then r(2) else r(4) end;
def kind: if .mode == "server" and .multiturn != null then "multi-turn server" else .mode end;

# [{key, value, pct}] for one run
def rows:
  if .mode == "tokenizer" then
    [{key: "tokenize \(.text.bytes) B", value: .mb_s, pct: null}]
  elif .mode == "server" and .multiturn != null then
    [.levels[] | "server c=\(.concurrency)" as $c
     | {key: "\($c) prompt tok/s", value: .prompt_tok_s, pct: null},
       {key: "\($c) decode tok/s", value: .tok_s, pct: null},
       {key: "\($c) cached tokens", value: .cached_tokens, pct: null},
       {key: "\($c) TTFT mean ms", value: .ttft_ms.mean, pct: null},
       {key: "\($c) TTFT p50 ms", value: .ttft_ms.p50, pct: null},
       {key: "\($c) TTFT p99 ms", value: .ttft_ms.p99, pct: null},
       (.per_turn[] | {key: "\($c) turn \(.turn) TTFT p50 ms", value: .ttft_ms.p50, pct: null},
                      {key: "\($c) turn \(.turn) TTFT p99 ms", value: .ttft_ms.p99, pct: null})]
  elif .mode == "server" then
    [.levels[] | {key: "server c=\(.concurrency)", value: .tok_s, pct: null}]
  else
    [.rows[] | {key: (if .kind == "decode" then "\(.test) @ d\(.depth)"
                      elif .kind == "batch" then "\(.test) b\(.batch) @ d\(.depth)"
                      else .test end),
                value: .tok_s, pct: .pct_ceiling}]
  end;

def describe:
  if .mode == "tokenizer" then
    "\(.tokenizer.path) (\(.tokenizer.kind)), \(.text.source) text, 1 thread, \(.host.cpu), \(.date)"
  elif .mode == "server" and .multiturn != null then
    "\(.server.url) model \(.server.model), \(.multiturn.turns) turns, system prompt ~\(.multiturn.system_tokens) tokens, \(.multiturn.turn_tokens) per turn, max_tokens \(.n_gen), \(.multiturn.conversations_per_client) conversation(s) per client, \(.date)"
  elif .mode == "server" then
    "\(.server.url) model \(.server.model), prompt \(.n_prompt), max_tokens \(.n_gen), \(.requests_per_stream) requests per stream, \(.date)"
  else
    "\(.model.path) (\(.model.family) \(.model.dtype)), \(.backend), \(.threads) thread\(if .threads == 1 then "" else "s" end), kv \(.kv_type), ceiling \(.ceiling.gb_s | num) GB/s (\(.ceiling.source)), \(.host.cpu), \(.date)"
  end;

if length != 2 then error("bench-compare: give exactly two memra-bench --json runs (jq -s)")
elif (map(.program) | unique) != ["memra-bench"] then error("bench-compare: both inputs must be memra-bench --json output")
elif (.[0] | kind) != (.[1] | kind) then error("bench-compare: one run is \(.[0] | kind), the other \(.[1] | kind)")
else
  .[0] as $a | .[1] as $b
  | ($a | rows) as $ra | ($b | rows) as $rb
  | (if $a.mode == "tokenizer" then " MB/s" elif $a.multiturn != null then "" else " tok/s" end) as $unit
  | ([$ra[].key] + [$rb[].key] | reduce .[] as $k ([]; if index([$k]) then . else . + [$k] end)) as $keys
  | "A: \($a | describe)",
    "B: \($b | describe)",
    "",
    "| test | A\($unit) | B\($unit) | B/A | A % ceiling | B % ceiling |",
    "|---|---:|---:|---:|---:|---:|",
    ($keys[] as $k
     | ($ra | map(select(.key == $k)) | first) as $x
     | ($rb | map(select(.key == $k)) | first) as $y
     | (if $x != null and $y != null and $x.value > 0 then "\($y.value / $x.value | r(2))x" else "-" end) as $ratio
     | "| \($k) | \($x.value | num) | \($y.value | num) | \($ratio) | \($x.pct | num) | \($y.pct | num) |")
end
