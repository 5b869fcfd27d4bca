// Loads GGUF files in llama.cpp itself (node-llama-cpp's prebuilt CPU
// binaries, pinned in package.json) and runs greedy generation from given
// prompt ids: the oracle tests/integration/llama_cpp_interop.sh compares
// memra against.
//
// Reads jobs from stdin, one JSON object a line:
//   {"model": PATH, "ids": [prompt ids] or "prompts": [[ids], ...],
//    "n": tokens to generate, "text": a string for llama.cpp's tokenizer}
// and prints one JSON object a line for each, in order:
//   {"model", "ok": true, "runs": [[generated ids] for each prompt],
//    "ids": runs[0], "tokens": [text's ids, no BOS]}
//   {"model", "ok": false, "error": "llama.cpp's own error lines"}
// One process serves every job, so llama.cpp's binaries load once. Exit 0
// when every job ran (a load refusal is a result, not a crash), 1 when the
// bindings themselves could not start, 2 on bad usage.
import { createInterface } from "node:readline";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const logs = [];
let llama;
try {
  llama = await getLlama({
    gpu: false, build: "never", skipDownload: true, logLevel: LlamaLogLevel.warn,
    // llama.cpp says why it refuses a file at error level (check_tensor_dims,
    // a missing key): keep those lines for the job's result.
    logger: (level, message) => {
      if (level === LlamaLogLevel.error || level === LlamaLogLevel.fatal)
        logs.push(String(message).trim());
    },
  });
} catch (e) {
  console.error(`llama-gen: node-llama-cpp cannot start: ${e.message}`);
  process.exit(1);
}

async function run(job) {
  logs.length = 0;
  let model, ctx;
  try {
    model = await llama.loadModel({ modelPath: job.model });
    const out = { model: job.model, ok: true, ids: [] };
    if (job.text !== undefined)
      out.tokens = Array.from(model.tokenize(job.text, false));
    const prompts = job.prompts ?? (job.ids && job.ids.length ? [job.ids] : []);
    if (prompts.length && job.n > 0) {
      // One thread: ggml's workers spin while they wait, so on a busy
      // two-core machine more threads are many times slower, not faster.
      ctx = await model.createContext({ contextSize: 256, threads: 1 });
      const seq = ctx.getSequence();
      out.runs = [];
      for (const p of prompts) {
        await seq.clearHistory();
        const ids = [];
        for await (const t of seq.evaluate(p, { temperature: 0 })) {
          ids.push(t);
          if (ids.length >= job.n) break;
        }
        out.runs.push(ids);
      }
      out.ids = out.runs[0];
    }
    return out;
  } catch (e) {
    const why = logs.filter((l) => l).join(" | ");
    return { model: job.model, ok: false, error: why ? `${e.message}: ${why}` : e.message };
  } finally {
    if (ctx) await ctx.dispose();
    if (model) await model.dispose();
  }
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity });
for await (const line of lines) {
  if (!line.trim()) continue;
  let job;
  try {
    job = JSON.parse(line);
  } catch (e) {
    console.error(`llama-gen: bad job line: ${line}`);
    process.exit(2);
  }
  console.log(JSON.stringify(await run(job)));
}
await llama.dispose();
