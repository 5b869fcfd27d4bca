// Reads a GGUF file with the Hugging Face GGUF parser (an independent
// implementation) and prints what it saw as JSON: architecture, metadata
// key count, and each tensor's name, type id and shape (ggml order).
import { gguf } from "@huggingface/gguf";

const path = process.argv[2];
if (!path) {
  console.error("usage: node gguf-read.mjs FILE.gguf");
  process.exit(2);
}
try {
  const { metadata, tensorInfos } = await gguf(path, { allowLocalFile: true });
  const out = {
    version: Number(metadata.version),
    architecture: metadata["general.architecture"] ?? null,
    n_kv: Number(metadata.kv_count),
    n_tokens: Array.isArray(metadata["tokenizer.ggml.tokens"]) ? metadata["tokenizer.ggml.tokens"].length : 0,
    tensors: tensorInfos.map((t) => ({
      name: t.name,
      type: Number(t.dtype),
      ne: t.shape.map(Number),
    })),
  };
  console.log(JSON.stringify(out));
} catch (e) {
  console.error(`gguf-read: ${path}: ${e.message}`);
  process.exit(1);
}
