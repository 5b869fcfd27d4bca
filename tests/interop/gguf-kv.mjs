// Prints the values of the given metadata keys of a GGUF file, read with
// the Hugging Face GGUF parser (an independent implementation), as one JSON
// object (a missing key is null; integers as numbers).
import { gguf } from "@huggingface/gguf";

const [path, ...keys] = process.argv.slice(2);
if (!path || keys.length === 0) {
  console.error("usage: node gguf-kv.mjs FILE.gguf KEY...");
  process.exit(2);
}
try {
  const { metadata } = await gguf(path, { allowLocalFile: true });
  const out = {};
  for (const k of keys) {
    const v = metadata[k];
    out[k] = v === undefined ? null : typeof v === "bigint" ? Number(v) : v;
  }
  console.log(JSON.stringify(out));
} catch (e) {
  console.error(`gguf-kv: ${path}: ${e.message}`);
  process.exit(1);
}
