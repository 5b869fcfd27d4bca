// memra-serve's /v1/embeddings driven by the official openai SDK (pinned
// in package.json): embeddings.create with the SDK's default (it asks for
// base64 and decodes the float32 bytes itself), with "float" and with
// "dimensions", each vector compared with transformers' (the fixture's
// `last`, cosine >= 0.999); and the errors it maps to its exception
// classes. Prints one PASS/FAIL line per check; exits 1 when any failed.
//
//   node openai-embed.mjs URL FIXTURE.json EMBED_ALIAS CHAT_ALIAS
import fs from "node:fs";
import OpenAI from "openai";

const [url, fixturePath, emb, chat] = process.argv.slice(2);
if (!url || !fixturePath || !emb || !chat) {
  console.error("usage: node openai-embed.mjs URL FIXTURE.json EMBED_ALIAS CHAT_ALIAS");
  process.exit(2);
}
const fixture = JSON.parse(fs.readFileSync(fixturePath, "utf8"));
const inputs = fixture.embed.inputs;
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: "unused", maxRetries: 0, timeout: 30000 });
let failed = 0;

async function check(name, fn) {
  try {
    const why = await fn();
    if (why === true) console.log(`PASS ${name}`);
    else {
      failed++;
      console.log(`FAIL ${name}`);
      console.error(`  ${why}`);
    }
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}`);
    console.error(`  ${e.constructor.name}: ${e.message}`);
  }
}
const all = (...rs) => rs.find((r) => r !== true) ?? true;
const eq = (what, got, want) =>
  JSON.stringify(got) === JSON.stringify(want) ? true : `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`;
const dot = (a, b) => a.reduce((s, x, i) => s + x * b[i], 0);
const norm = (a) => Math.sqrt(dot(a, a));
const cosine = (a, b) => dot(a, b) / (norm(a) * norm(b));

// Every vector near the reference and of unit length; usage the tokens'.
function matches(r, want) {
  const why = [];
  if (r.object !== "list") why.push(`object ${r.object}`);
  if (r.model !== emb) why.push(`model ${r.model}`);
  if (r.data.length !== want.length) why.push(`${r.data.length} vectors, want ${want.length}`);
  let tokens = 0;
  want.forEach((w, i) => {
    const d = r.data[i];
    const v = Array.from(d.embedding);
    tokens += w.ids.length;
    if (d.index !== i || d.object !== "embedding") why.push(`data[${i}]: index ${d.index}, object ${d.object}`);
    if (v.length !== w.last.length) why.push(`data[${i}]: ${v.length} floats, want ${w.last.length}`);
    const c = cosine(v, w.last);
    if (!(c >= 0.999)) why.push(`data[${i}]: cosine ${c} < 0.999`);
    if (Math.abs(norm(v) - 1) > 1e-5) why.push(`data[${i}]: norm ${norm(v)}`);
  });
  if (r.usage.prompt_tokens !== tokens || r.usage.total_tokens !== tokens)
    why.push(`usage ${JSON.stringify(r.usage)}, want ${tokens} prompt tokens`);
  return why.length ? why.join("; ") : true;
}

let floats = null;
await check("sdk: embeddings.create, encoding_format float", async () => {
  const r = await client.embeddings.create({ model: emb, input: inputs.map((x) => x.text), encoding_format: "float" });
  floats = r.data.map((d) => d.embedding);
  return all(eq("arrays", r.data.every((d) => Array.isArray(d.embedding)), true), matches(r, inputs));
});

await check("sdk: embeddings.create, the SDK's default (base64, decoded by the SDK)", async () => {
  const r = await client.embeddings.create({ model: emb, input: inputs.map((x) => x.text) });
  // float32 bytes decode to the very floats the float format printed
  const same = floats && r.data.every((d, i) => Array.from(d.embedding).every((x, k) => x === floats[i][k]));
  return all(matches(r, inputs), eq("same floats as the float format", same, true));
});

await check("sdk: embeddings.create, encoding_format base64 is a string", async () => {
  const r = await client.embeddings.create({ model: emb, input: inputs[0].text, encoding_format: "base64", user: "sdk-test" });
  const s = r.data[0].embedding;
  return all(eq("type", typeof s, "string"), eq("length", s.length, 4 * Math.ceil((inputs[0].last.length * 4) / 3)));
});

await check("sdk: embeddings.create, token ids", async () => {
  const r = await client.embeddings.create({ model: emb, input: inputs.map((x) => x.ids), encoding_format: "float" });
  const same = floats && r.data.every((d, i) => d.embedding.every((x, k) => x === floats[i][k]));
  return all(matches(r, inputs), eq("same vectors as the texts", same, true));
});

await check("sdk: embeddings.create, dimensions 16", async () => {
  const r = await client.embeddings.create({ model: emb, input: inputs[1].text, dimensions: 16, encoding_format: "float" });
  const v = r.data[0].embedding, full = floats ? floats[1].slice(0, 16) : [];
  const n = norm(full);
  const off = Math.max(...v.map((x, k) => Math.abs(x - full[k] / n)));
  return all(eq("length", v.length, 16), eq("unit", Math.abs(norm(v) - 1) < 1e-5, true), off < 1e-6 ? true : `off by ${off}`);
});

async function refused(name, body, status, pattern) {
  await check(name, async () => {
    try {
      await client.embeddings.create(body);
      return "no error";
    } catch (e) {
      if (!(e instanceof OpenAI.APIError)) return `${e.constructor.name}: ${e.message}`;
      return all(eq("status", e.status, status), pattern.test(e.message) ? true : `message '${e.message}' does not match ${pattern}`);
    }
  });
}
await refused("sdk: a chat alias is a 400 BadRequestError", { model: chat, input: "x" }, 400,
  new RegExp(`model '${chat}' is served with --task chat, and /v1/embeddings needs an embedding model`));
await refused("sdk: an empty string is a 400", { model: emb, input: ["a", ""] }, 400, /input\[1\]: an empty string/);
await refused("sdk: dimensions out of range is a 400", { model: emb, input: "a", dimensions: 65 }, 400, /dimensions: 65 is out of range \[1, 64\]/);
await refused("sdk: an unknown model is a 404 NotFoundError", { model: "nope", input: "a" }, 404, /The model 'nope' does not exist/);

process.exit(failed ? 1 : 0);
