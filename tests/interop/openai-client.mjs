// Drives memra-serve with the official openai SDK (pinned in package.json):
// completions and chat, blocking and streamed with include_usage, the
// SDK's stream helper, and the errors it maps to its exception classes.
// Prints one PASS/FAIL line per check; exits 1 when any failed.
//
//   node openai-client.mjs URL KEY EXPECT.json
//
// EXPECT.json: {"completion": {"model", "prompt", "max_tokens", "text"},
//               "chat": [{"model", "content", "max_tokens", "text"|null}]}
// where text is what memra-gen produced greedily (null: not compared).
import fs from "node:fs";
import OpenAI from "openai";
import { makeParseableResponseFormat } from "openai/lib/parser";

const [url, key, expectPath] = process.argv.slice(2);
if (!url || !key || !expectPath) {
  console.error("usage: node openai-client.mjs URL KEY EXPECT.json");
  process.exit(2);
}
const expect = JSON.parse(fs.readFileSync(expectPath, "utf8"));
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0, timeout: 30000 });
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
const eq = (what, got, want) =>
  JSON.stringify(got) === JSON.stringify(want) ? true : `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`;
const all = (...rs) => rs.find((r) => r !== true) ?? true;

await check("sdk: models.list", async () => {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  return all(eq("count", ids.length >= 2, true), eq("has completion model", ids.includes(expect.completion.model), true));
});

const c = expect.completion;
let blockingText = null;
await check("sdk: completions.create", async () => {
  const r = await client.completions.create({ model: c.model, prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0, user: "sdk-test" });
  blockingText = r.choices[0].text;
  return all(
    eq("object", r.object, "text_completion"),
    eq("text", r.choices[0].text, c.text),
    eq("finish_reason", r.choices[0].finish_reason, "length"),
    eq("completion_tokens", r.usage.completion_tokens, c.max_tokens),
    eq("total", r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens),
  );
});

await check("sdk: completions.create stream with include_usage", async () => {
  const stream = await client.completions.create({
    model: c.model, prompt: c.prompt, max_tokens: c.max_tokens, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", usage = null, finish = null, chunks = 0;
  for await (const ch of stream) {
    chunks++;
    if (ch.choices.length) {
      text += ch.choices[0].text;
      if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    } else usage = ch.usage;
  }
  return all(eq("text", text, blockingText), eq("finish", finish, "length"), eq("usage chunk", usage?.completion_tokens, c.max_tokens),
    eq("several chunks", chunks > 2, true));
});

for (const m of expect.chat) {
  let content = null;
  await check(`sdk: chat.completions.create (${m.model})`, async () => {
    const r = await client.chat.completions.create({
      model: m.model, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: m.content }],
      max_tokens: m.max_tokens, temperature: 0,
    });
    content = r.choices[0].message.content;
    return all(
      eq("object", r.object, "chat.completion"),
      eq("role", r.choices[0].message.role, "assistant"),
      m.text === null ? true : eq("content", content, m.text),
      eq("content is a string", typeof content, "string"),
      eq("usage", r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens),
    );
  });
  await check(`sdk: chat stream with include_usage (${m.model})`, async () => {
    const stream = await client.chat.completions.create({
      model: m.model, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: m.content }],
      max_tokens: m.max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true },
    });
    let text = "", role = null, usage = null, finish = null;
    for await (const ch of stream) {
      if (!ch.choices.length) { usage = ch.usage; continue; }
      const d = ch.choices[0].delta;
      if (d.role && role === null) role = d.role;
      if (d.content) text += d.content;
      if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
    }
    return all(eq("role", role, "assistant"), eq("text", text, content), eq("finish", finish !== null, true),
      eq("usage", usage !== null && usage.completion_tokens > 0, true));
  });
  await check(`sdk: chat.completions.stream helper (${m.model})`, async () => {
    const stream = client.chat.completions.stream({
      model: m.model, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: m.content }],
      max_tokens: m.max_tokens, temperature: 0,
    });
    const final = await stream.finalChatCompletion();
    return all(eq("content", final.choices[0].message.content, content), eq("role", final.choices[0].message.role, "assistant"));
  });
}

await check("sdk: unknown model is NotFoundError model_not_found", async () => {
  try {
    await client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "hi" }] });
    return "no error";
  } catch (e) {
    return all(eq("class", e instanceof OpenAI.NotFoundError, true), eq("status", e.status, 404), eq("code", e.code, "model_not_found"));
  }
});
await check("sdk: n=17 is BadRequestError naming n", async () => {
  try {
    await client.completions.create({ model: c.model, prompt: "x", n: 17 });
    return "no error";
  } catch (e) {
    return all(eq("class", e instanceof OpenAI.BadRequestError, true), eq("param", e.param, "n"));
  }
});

// Fields the SDK and agent frameworks send: accepted (modalities other
// than text refused, naming it).
const chatModel = expect.chat[0].model;
const hi = [{ role: "user", content: "hi" }];
await check("sdk: store, metadata, user, service_tier, prompt_cache_key, parallel_tool_calls, reasoning_effort, modalities accepted", async () => {
  const r = await client.chat.completions.create({
    model: chatModel, messages: hi, max_tokens: 3, store: true, metadata: { run: "sdk" }, user: "u",
    service_tier: "auto", prompt_cache_key: "conv-1", parallel_tool_calls: false, reasoning_effort: "low",
    modalities: ["text"],
  });
  return eq("completion_tokens", r.usage.completion_tokens, 3);
});
await check("sdk: modalities audio is BadRequestError naming it", async () => {
  try {
    await client.chat.completions.create({ model: chatModel, messages: hi, modalities: ["text", "audio"] });
    return "no error";
  } catch (e) {
    return all(eq("class", e instanceof OpenAI.BadRequestError, true), eq("param", e.param, "modalities"));
  }
});

// logprobs: chat's content list, completions' four arrays.
let chatLp = null;
await check("sdk: chat logprobs with top_logprobs", async () => {
  const r = await client.chat.completions.create({ model: chatModel, messages: hi, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2 });
  chatLp = r.choices[0].logprobs.content;
  return all(
    eq("one per token", chatLp.length, r.usage.completion_tokens),
    eq("tokens make the text", chatLp.map((t) => t.token).join(""), r.choices[0].message.content),
    eq("top 2, greedy first", chatLp.every((t) => t.top_logprobs.length === 2 && t.top_logprobs[0].token === t.token && t.logprob <= 0), true),
    eq("bytes", chatLp.every((t) => Buffer.from(t.bytes).toString("utf8") === t.token), true),
  );
});
await check("sdk: chat logprobs streamed", async () => {
  const stream = await client.chat.completions.create({ model: chatModel, messages: hi, max_tokens: 8, temperature: 0, logprobs: true, top_logprobs: 2, stream: true });
  const got = [];
  for await (const ch of stream) if (ch.choices.length && ch.choices[0].logprobs) got.push(...ch.choices[0].logprobs.content);
  return eq("entries", got, chatLp);
});
await check("sdk: completions logprobs", async () => {
  const r = await client.completions.create({ model: c.model, prompt: c.prompt, max_tokens: 6, temperature: 0, logprobs: 3 });
  const l = r.choices[0].logprobs;
  return all(
    eq("tokens make the text", l.tokens.join(""), r.choices[0].text),
    eq("lengths", [l.token_logprobs.length, l.top_logprobs.length, l.text_offset.length], [6, 6, 6]),
    eq("top 3 each", l.top_logprobs.every((t) => Object.keys(t).length === 3), true),
  );
});

// n: choice i is the single request of seed + i.
await check("sdk: n=3 with a seed, choice i equals seed + i", async () => {
  const r = await client.completions.create({ model: c.model, prompt: c.prompt, max_tokens: 12, n: 3, seed: 21 });
  const singles = [];
  for (let i = 0; i < 3; i++)
    singles.push((await client.completions.create({ model: c.model, prompt: c.prompt, max_tokens: 12, seed: 21 + i })).choices[0].text);
  return all(
    eq("texts", r.choices.map((x) => x.text), singles),
    eq("indexes", r.choices.map((x) => x.index), [0, 1, 2]),
    eq("usage", r.usage.completion_tokens, 36),
  );
});
await check("sdk: chat n=2 streamed, each chunk's index", async () => {
  const b = await client.chat.completions.create({ model: chatModel, messages: hi, max_tokens: 6, n: 2, seed: 9 });
  const stream = await client.chat.completions.create({ model: chatModel, messages: hi, max_tokens: 6, n: 2, seed: 9, stream: true });
  const text = ["", ""];
  for await (const ch of stream) for (const x of ch.choices) text[x.index] += x.delta.content ?? "";
  return eq("texts", text, b.choices.map((x) => x.message.content));
});
// Structured output: chat.completions.parse() with a JSON Schema (made
// auto-parseable the way the SDK's zod helper does, without zod) returns
// the parsed object; the server holds the output to the schema while it
// samples, so even memra-tiny's output parses and validates.
const personSchema = {
  type: "object", additionalProperties: false, required: ["name", "age", "tags"],
  properties: {
    name: { type: "string", maxLength: 20 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    tags: { type: "array", maxItems: 3, items: { type: "string", enum: ["a", "b", "c"] } },
  },
};
for (const seed of [1, 2, 3]) {
  await check(`sdk: chat.completions.parse() with a json_schema (seed ${seed})`, async () => {
    const response_format = makeParseableResponseFormat(
      { type: "json_schema", json_schema: { name: "person", strict: true, schema: personSchema } },
      (content) => JSON.parse(content));
    const r = await client.chat.completions.parse({
      model: chatModel, messages: [{ role: "user", content: "A person, please." }],
      max_tokens: 300, temperature: 1, seed, response_format });
    const p = r.choices[0].message.parsed;
    if (!p) return `parsed is ${JSON.stringify(p)}; content ${JSON.stringify(r.choices[0].message.content)}`;
    return all(
      eq("keys", Object.keys(p).sort(), ["age", "name", "tags"]),
      eq("name", typeof p.name === "string" && p.name.length <= 20, true),
      eq("age", Number.isInteger(p.age) && p.age >= 0 && p.age <= 120, true),
      eq("tags", Array.isArray(p.tags) && p.tags.length <= 3 && p.tags.every((t) => ["a", "b", "c"].includes(t)), true),
      eq("finish_reason", r.choices[0].finish_reason, "stop"));
  });
}
await check("sdk: response_format with an unsupported schema keyword is a 400 naming it", async () => {
  try {
    await client.chat.completions.create({ model: chatModel, messages: hi, response_format: {
      type: "json_schema", json_schema: { name: "x", schema: { type: "number", multipleOf: 2 } } } });
    return "no error";
  } catch (e) {
    return all(eq("status", e.status, 400), eq("names it", /multipleOf/.test(e.message), true));
  }
});
// Tool calls. memra-tiny's template shows no tools and the model was never
// trained to call any, so "auto" gives content; "required" and a named
// tool_choice hold the output to a grammar of calls whose arguments follow
// each tool's parameters schema, so the calls are valid by construction.
const addTool = {
  type: "function",
  function: {
    name: "add", description: "Adds two integers", strict: true,
    parameters: { type: "object", additionalProperties: false, required: ["a", "b"],
                  properties: { a: { type: "integer", minimum: 0, maximum: 999 }, b: { type: "integer", minimum: 0, maximum: 999 } } },
  },
};
const cityTool = {
  type: "function",
  function: {
    name: "weather", strict: true,
    parameters: { type: "object", additionalProperties: false, required: ["city", "unit"],
                  properties: { city: { type: "string", maxLength: 16 }, unit: { enum: ["c", "f"] } } },
  },
};
const validArgs = (name, text) => {
  let a;
  try { a = JSON.parse(text); } catch (e) { return `arguments ${JSON.stringify(text)} do not parse: ${e.message}`; }
  if (name === "add")
    return eq("add arguments", Object.keys(a).sort().join() === "a,b" && [a.a, a.b].every((x) => Number.isInteger(x) && x >= 0 && x <= 999), true);
  if (name === "weather")
    return eq("weather arguments", Object.keys(a).sort().join() === "city,unit" && typeof a.city === "string" && a.city.length <= 16 && ["c", "f"].includes(a.unit), true);
  return `unknown tool ${name}`;
};
for (const seed of [1, 2]) {
  await check(`sdk: tool_choice required, strict tools, blocking (seed ${seed})`, async () => {
    const r = await client.chat.completions.create({
      model: chatModel, messages: [{ role: "user", content: "What is the weather?" }], tools: [addTool, cityTool],
      tool_choice: "required", parallel_tool_calls: false, max_tokens: 400, temperature: 1, seed });
    const m = r.choices[0].message, calls = m.tool_calls ?? [];
    if (calls.length !== 1) return `tool_calls ${JSON.stringify(m)}`;
    return all(eq("finish_reason", r.choices[0].finish_reason, "tool_calls"), eq("content", m.content, null),
      eq("id", /^call_[A-Za-z0-9]{24}$/.test(calls[0].id), true), eq("type", calls[0].type, "function"),
      validArgs(calls[0].function.name, calls[0].function.arguments));
  });
}
await check("sdk: tool_choice required streamed, the SDK's accumulated tool_calls", async () => {
  const stream = client.chat.completions.stream({
    model: chatModel, messages: [{ role: "user", content: "Add them." }], tools: [addTool, cityTool],
    tool_choice: "required", parallel_tool_calls: false, max_tokens: 400, temperature: 1, seed: 7 });
  let deltas = 0;
  for await (const chunk of stream) if (chunk.choices[0]?.delta?.tool_calls) deltas++;
  const r = await stream.finalChatCompletion();
  const calls = r.choices[0].message.tool_calls ?? [];
  if (calls.length !== 1) return `tool_calls ${JSON.stringify(r.choices[0].message)}`;
  return all(eq("finish_reason", r.choices[0].finish_reason, "tool_calls"), eq("deltas >= 2", deltas >= 2, true),
    validArgs(calls[0].function.name, calls[0].function.arguments));
});
await check("sdk: a named tool_choice calls that tool", async () => {
  const r = await client.chat.completions.create({
    model: chatModel, messages: [{ role: "user", content: "Weather in Paris?" }], tools: [addTool, cityTool],
    tool_choice: { type: "function", function: { name: "weather" } }, max_tokens: 400, temperature: 1, seed: 3 });
  const calls = r.choices[0].message.tool_calls ?? [];
  return all(eq("calls", calls.length, 1), eq("name", calls[0]?.function.name, "weather"),
    calls[0] ? validArgs("weather", calls[0].function.arguments) : "no call");
});
await check("sdk: runTools() loop: calls run, their results go back as tool messages", async () => {
  const seen = [];
  const runner = client.chat.completions.runTools({
    model: chatModel, messages: [{ role: "user", content: "Add 2 and 3." }], tool_choice: "required",
    parallel_tool_calls: false, max_tokens: 400, temperature: 1, seed: 11,
    tools: [{ type: "function", function: { name: "add", parameters: addTool.function.parameters,
      parse: JSON.parse, function: (a) => { seen.push(a); return String(a.a + a.b); } } }],
  }, { maxChatCompletions: 2 });
  await runner.done();
  const msgs = runner.messages;
  return all(eq("tool ran twice", seen.length, 2),
    eq("integers", seen.every((a) => Number.isInteger(a.a) && Number.isInteger(a.b)), true),
    eq("tool messages", msgs.filter((m) => m.role === "tool").length, 2),
    eq("tool results", msgs.filter((m) => m.role === "tool").map((m) => m.content), seen.map((a) => String(a.a + a.b))));
});
await check("sdk: tool_choice naming a missing tool is a 400 naming tool_choice", async () => {
  try {
    await client.chat.completions.create({ model: chatModel, messages: hi, tools: [addTool],
      tool_choice: { type: "function", function: { name: "nope" } } });
    return "no error";
  } catch (e) {
    return all(eq("status", e.status, 400), eq("param", e.param, "tool_choice"));
  }
});
await check("sdk: a wrong key is AuthenticationError", async () => {
  const bad = new OpenAI({ baseURL: `${url}/v1`, apiKey: "wrong", maxRetries: 0 });
  try {
    await bad.models.list();
    return "no error";
  } catch (e) {
    return all(eq("class", e instanceof OpenAI.AuthenticationError, true), eq("status", e.status, 401));
  }
});

process.exit(failed ? 1 : 0);
