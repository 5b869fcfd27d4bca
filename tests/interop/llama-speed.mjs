// llama.cpp's CPU speed on a GGUF file through node-llama-cpp's prebuilt
// binaries (pinned in package.json), for scripts/cpu-compare.sh: a prompt
// of P random token ids evaluated in one batch (prefill), then N greedy
// steps (decode), each R times after one warm-up, on T threads. Prints one
// JSON line: {"model", "threads", "p", "n", "pp_tok_s": [R], "tg_tok_s": [R]}.
// Not llama-bench (the npm package carries no tools), so the figures
// include node's small per-token overhead.
//
//   node tests/interop/llama-speed.mjs MODEL P N R T
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const [model, P, N, R, T] = process.argv.slice(2);
if (!model || !(P > 0) || !(N > 0) || !(R > 0) || !(T > 0)) {
  console.error("usage: node tests/interop/llama-speed.mjs MODEL P N R THREADS");
  process.exit(2);
}
const p = Number(P), n = Number(N), reps = Number(R), threads = Number(T);
const llama = await getLlama({ gpu: false, build: "never", skipDownload: true,
                               logLevel: LlamaLogLevel.error, maxThreads: threads });
const m = await llama.loadModel({ modelPath: model });
const ctx = await m.createContext({ contextSize: p + n + 16, batchSize: p, threads });
const seq = ctx.getSequence();
// Fixed ids (a small LCG) away from the control tokens at the vocabulary's ends.
let s = 12345;
const ids = Array.from({ length: p }, () => {
  s = (s * 1103515245 + 12345) % 2147483648;
  return 1000 + (s % 20000);
});
const pp = [], tg = [];
for (let r = 0; r <= reps; r++) {
  await seq.clearHistory();
  let t0 = process.hrtime.bigint();
  await seq.evaluateWithoutGeneratingNewTokens(ids);
  let t1 = process.hrtime.bigint();
  const ptoks = p / (Number(t1 - t0) / 1e9);
  let got = 0;
  t0 = process.hrtime.bigint();
  for await (const _ of seq.evaluate([ids[0]], { temperature: 0 })) {
    if (++got >= n) break;
  }
  t1 = process.hrtime.bigint();
  if (r > 0) {
    pp.push(ptoks);
    tg.push(n / (Number(t1 - t0) / 1e9));
  }
}
console.log(JSON.stringify({ model, threads, p, n, pp_tok_s: pp, tg_tok_s: tg }));
await ctx.dispose();
await m.dispose();
await llama.dispose();
