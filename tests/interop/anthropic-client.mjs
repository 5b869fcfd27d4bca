// Drives memra-serve's Anthropic Messages API with the official Anthropic
// TypeScript SDK (pinned in package.json as npm aliases, one per major, so
// the same checks run against both): messages.create, messages.stream()
// and its finalMessage(), tool use round trips with forced tool choice,
// count_tokens, the exception classes the SDK maps errors to, and the
// request-id header. Prints one PASS/FAIL line per check; exits 1 when
// any failed.
//
//   node anthropic-client.mjs SDK-PACKAGE URL KEY
//
// The server must serve memra-tiny as "tiny" and the random-weight model
// with the real Qwen3 tokenizer and template as "qwen".
const [pkg, url, key] = process.argv.slice(2);
if (!pkg || !url || !key) {
  console.error("usage: node anthropic-client.mjs SDK-PACKAGE URL KEY");
  process.exit(2);
}
const { default: Anthropic } = await import(pkg);
const major = JSON.parse(
  await (await import("node:fs/promises")).readFile(new URL(`./node_modules/${pkg}/package.json`, import.meta.url)),
).version.split(".")[0];
const client = new Anthropic({ baseURL: url, apiKey: key, maxRetries: 0, timeout: 60000 });
const tag = `sdk${major}`;
let failed = 0;

async function check(name, fn) {
  try {
    const why = await fn();
    if (why === true) console.log(`PASS ${tag}: ${name}`);
    else {
      failed++;
      console.log(`FAIL ${tag}: ${name}`);
      console.error(`  ${why}`);
    }
  } catch (e) {
    failed++;
    console.log(`FAIL ${tag}: ${name}`);
    console.error(`  ${e.constructor.name}: ${e.message}`);
  }
}
const eq = (what, got, want) =>
  JSON.stringify(got) === JSON.stringify(want) ? true : `${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`;
const ok = (what, cond, got) => (cond ? true : `${what}: got ${JSON.stringify(got)}`);
const all = (...rs) => rs.find((r) => r !== true) ?? true;

// The shape every reply has, whatever its content.
function shape(m, model) {
  return all(
    ok("id is msg_...", /^msg_[A-Za-z0-9]{8,}$/.test(m.id), m.id),
    eq("type", m.type, "message"),
    eq("role", m.role, "assistant"),
    eq("model", m.model, model),
    ok("content is an array", Array.isArray(m.content), m.content),
    ok("usage.input_tokens > 0", m.usage?.input_tokens > 0, m.usage),
    ok("usage.output_tokens >= 0", m.usage?.output_tokens >= 0, m.usage),
    ok("cache_read_input_tokens a count", Number.isInteger(m.usage?.cache_read_input_tokens) && m.usage.cache_read_input_tokens >= 0, m.usage),
    eq("cache_creation_input_tokens", m.usage?.cache_creation_input_tokens, 0),
  );
}
const textOf = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
const hi = [{ role: "user", content: "Tell me about the whale" }];

let blocking = null;
await check("messages.create (max_tokens)", async () => {
  const m = await client.messages.create({ model: "tiny", max_tokens: 12, temperature: 0, system: "Be brief.", messages: hi });
  blocking = m;
  return all(
    shape(m, "tiny"),
    eq("stop_reason", m.stop_reason, "max_tokens"),
    eq("stop_sequence", m.stop_sequence, null),
    eq("output_tokens", m.usage.output_tokens, 12),
    eq("one text block", m.content.map((b) => b.type), ["text"]),
    ok("text is not empty", textOf(m).length > 0, m.content),
  );
});

await check("messages.create (stop_sequence named)", async () => {
  // Two letters from inside the greedy text above: stopping at them ends
  // the same reply early, the sequence named and left out of the text.
  const full = textOf(blocking), at = full.search(/\S/) + 1;
  const seq = full.slice(at, at + 2);
  const m = await client.messages.create({ model: "tiny", max_tokens: 12, temperature: 0, system: "Be brief.", messages: hi, stop_sequences: ["zzqx", seq] });
  const want = full.slice(0, full.indexOf(seq));
  return all(
    shape(m, "tiny"),
    eq("stop_reason", m.stop_reason, "stop_sequence"),
    eq("stop_sequence", m.stop_sequence, seq),
    eq("text is the prefix before the sequence", textOf(m), want),
  );
});

await check("messages.create (end_turn, output_config.format)", async () => {
  // A JSON schema holds the output to one object; the grammar's end is an
  // end of turn, not a length cut.
  const schema = { type: "object", properties: { ok: { type: "boolean" } }, required: ["ok"], additionalProperties: false };
  const m = await client.messages.create({
    model: "tiny", max_tokens: 64, temperature: 0, messages: hi,
    output_config: { format: { type: "json_schema", schema } },
  });
  const obj = JSON.parse(textOf(m));
  return all(shape(m, "tiny"), eq("stop_reason", m.stop_reason, "end_turn"), eq("keys", Object.keys(obj), ["ok"]),
    eq("ok is boolean", typeof obj.ok, "boolean"));
});

await check("messages.stream().finalMessage() equals messages.create", async () => {
  const s = client.messages.stream({ model: "tiny", max_tokens: 12, temperature: 0, system: "Be brief.", messages: hi });
  let streamed = "";
  const kinds = [];
  s.on("text", (t) => (streamed += t));
  s.on("streamEvent", (e) => kinds.push(e.type));
  const m = await s.finalMessage();
  return all(
    shape(m, "tiny"),
    ok("id differs from the blocking one", m.id !== blocking.id, m.id),
    eq("content", m.content, blocking.content),
    eq("stop_reason", m.stop_reason, blocking.stop_reason),
    eq("usage", m.usage, blocking.usage),
    eq("text events", streamed, textOf(blocking)),
    eq("first event", kinds[0], "message_start"),
    eq("last events", kinds.slice(-3), ["content_block_stop", "message_delta", "message_stop"]),
  );
});

await check("messages.create stream:true iterates raw events", async () => {
  const st = await client.messages.create({ model: "tiny", max_tokens: 5, temperature: 0, messages: hi, stream: true });
  const types = [];
  for await (const e of st) types.push(e.type);
  return all(eq("first", types[0], "message_start"), eq("block start", types[1], "content_block_start"),
    eq("last", types.at(-1), "message_stop"), ok("has deltas", types.includes("content_block_delta"), types));
});

await check("max_tokens 32000 is clamped, not refused", async () => {
  const m = await client.messages.create({ model: "tiny", max_tokens: 32000, temperature: 0, messages: hi, stop_sequences: ["."] });
  return all(shape(m, "tiny"), ok("stopped", ["stop_sequence", "max_tokens", "end_turn"].includes(m.stop_reason), m.stop_reason));
});

// Tools: a strict schema the output is held to when a call is forced. The
// string is bounded: memra-tiny, never trained on calls, would otherwise
// write prose inside it until max_tokens.
const weather = {
  name: "get_weather",
  description: "The weather in a city",
  strict: true,
  input_schema: {
    type: "object",
    properties: { city: { type: "string", maxLength: 24 }, unit: { type: "string", enum: ["celsius", "fahrenheit"] }, days: { type: "integer" } },
    required: ["city", "unit", "days"],
    additionalProperties: false,
  },
};
const clock = { name: "get_time", description: "The time now", input_schema: { type: "object", properties: { zone: { type: "string", maxLength: 16 } }, required: ["zone"], additionalProperties: false } };
function validWeather(input) {
  return all(
    ok("input is an object", input && typeof input === "object" && !Array.isArray(input), input),
    eq("keys", Object.keys(input).sort(), ["city", "days", "unit"]),
    eq("city is a string", typeof input.city, "string"),
    ok("unit in enum", ["celsius", "fahrenheit"].includes(input.unit), input.unit),
    ok("city within maxLength", input.city.length <= 24, input.city),
    ok("days is an integer", Number.isInteger(input.days), input.days),
  );
}
function toolUses(m) {
  return m.content.filter((b) => b.type === "tool_use");
}
const ask = [{ role: "user", content: "What is the weather in Paris?" }];

let forced = null;
await check("tool_choice any: tool_use blocks that validate", async () => {
  const m = await client.messages.create({ model: "tiny", max_tokens: 400, temperature: 0, messages: ask, tools: [weather], tool_choice: { type: "any", disable_parallel_tool_use: true } });
  forced = m;
  const uses = toolUses(m);
  return all(
    shape(m, "tiny"),
    eq("stop_reason", m.stop_reason, "tool_use"),
    ok("at least one tool_use", uses.length >= 1, m.content),
    ...uses.map((u) => all(ok("id is toolu_...", /^toolu_[A-Za-z0-9]+$/.test(u.id), u.id), eq("name", u.name, "get_weather"), validWeather(u.input))),
  );
});

await check("tool_choice {type:tool} streamed: finalMessage has the tool_use input", async () => {
  const s = client.messages.stream({
    model: "tiny", max_tokens: 400, temperature: 0, messages: ask, tools: [clock, weather],
    tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true },
  });
  let partial = "";
  s.on("inputJson", (d) => (partial += d));
  const m = await s.finalMessage();
  const uses = toolUses(m);
  return all(
    shape(m, "tiny"),
    eq("stop_reason", m.stop_reason, "tool_use"),
    eq("one call", uses.length, 1),
    eq("name", uses[0]?.name, "get_weather"),
    ok("id is toolu_...", /^toolu_/.test(uses[0]?.id), uses[0]?.id),
    validWeather(uses[0]?.input),
    eq("input_json deltas join to the input", JSON.parse(partial), uses[0]?.input),
  );
});

await check("tool_result round trip (and count_tokens of it)", async () => {
  const uses = toolUses(forced);
  const messages = [
    ...ask,
    { role: "assistant", content: forced.content },
    { role: "user", content: uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: "Sunny, 21 degrees" })) },
  ];
  const m = await client.messages.create({ model: "tiny", max_tokens: 10, temperature: 0, messages, tools: [weather] });
  const n = await client.messages.countTokens({ model: "tiny", messages, tools: [weather] });
  return all(shape(m, "tiny"), ok("replied", m.content.length >= 1, m.content),
    ok("stop_reason", ["max_tokens", "end_turn", "tool_use"].includes(m.stop_reason), m.stop_reason),
    eq("count_tokens = input_tokens + cache_read_input_tokens", n.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens));
});

await check("tool_result with is_error and block content", async () => {
  const u = toolUses(forced)[0];
  const messages = [
    ...ask,
    { role: "assistant", content: [{ type: "text", text: "Let me look." }, u] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: u.id, is_error: true, content: [{ type: "text", text: "city not found" }] }, { type: "text", text: "Try again?" }] },
  ];
  const m = await client.messages.create({ model: "tiny", max_tokens: 8, temperature: 0, messages, tools: [weather], tool_choice: { type: "auto" } });
  return all(shape(m, "tiny"), ok("replied", m.content.length >= 1, m.content));
});

await check("tool use on the Qwen3 template (tool_choice tool)", async () => {
  const m = await client.messages.create({ model: "qwen", max_tokens: 400, temperature: 0, messages: ask, tools: [weather], tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true } });
  const uses = toolUses(m);
  return all(shape(m, "qwen"), eq("stop_reason", m.stop_reason, "tool_use"), eq("one call", uses.length, 1), validWeather(uses[0]?.input));
});

await check("count_tokens equals input_tokens of a create", async () => {
  const req = { model: "qwen", system: [{ type: "text", text: "You are terse.", cache_control: { type: "ephemeral" } }], messages: hi, tools: [weather] };
  const n = await client.messages.countTokens(req);
  const m = await client.messages.create({ ...req, max_tokens: 1, temperature: 0 });
  return all(ok("input_tokens > 0", n.input_tokens > 0, n), eq("equal", n.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens));
});

await check("thinking blocks passed back raise the prompt (Qwen3 renders them)", async () => {
  const u = { type: "tool_use", id: "toolu_abc123", name: "get_weather", input: { city: "Paris", unit: "celsius", days: 1 } };
  const after = [{ role: "user", content: [{ type: "tool_result", tool_use_id: u.id, content: "Sunny" }] }];
  const without = [...ask, { role: "assistant", content: [u] }, ...after];
  const withThought = [...ask, { role: "assistant", content: [{ type: "thinking", thinking: "The user wants the weather in Paris today.", signature: "" }, { type: "redacted_thinking", data: "abc" }, u] }, ...after];
  const a = await client.messages.countTokens({ model: "qwen", messages: without, tools: [weather] });
  const b = await client.messages.countTokens({ model: "qwen", messages: withThought, tools: [weather], thinking: { type: "enabled", budget_tokens: 1024 } });
  const m = await client.messages.create({ model: "qwen", max_tokens: 4, messages: withThought, tools: [weather], thinking: { type: "enabled", budget_tokens: 1024 } });
  return all(ok("more tokens with the thought", b.input_tokens > a.input_tokens + 5, [a, b]), shape(m, "qwen"));
});

async function throws(cls, status, type, fn) {
  try {
    await fn();
    return "did not throw";
  } catch (e) {
    return all(
      ok(`is ${cls.name}`, e instanceof cls, e.constructor.name),
      eq("status", e.status, status),
      eq("error.type", e.error?.type, "error"),
      eq("error.error.type", e.error?.error?.type, type),
      ok("message", typeof e.error?.error?.message === "string" && e.error.error.message.length > 0, e.error),
      ok("requestID", typeof e.requestID === "string" && e.requestID.length > 0, e.requestID),
    );
  }
}
await check("BadRequestError for a bad field", () =>
  throws(Anthropic.BadRequestError, 400, "invalid_request_error", () =>
    client.messages.create({ model: "tiny", max_tokens: 8, temperature: 3, messages: hi })));
await check("BadRequestError for an unknown field", () =>
  throws(Anthropic.BadRequestError, 400, "invalid_request_error", () =>
    client.messages.create({ model: "tiny", max_tokens: 8, messages: hi, frobnicate: 1 })));
await check("BadRequestError for an image block", () =>
  throws(Anthropic.BadRequestError, 400, "invalid_request_error", () =>
    client.messages.create({ model: "tiny", max_tokens: 8, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } }] }] })));
await check("AuthenticationError with a wrong key", () =>
  throws(Anthropic.AuthenticationError, 401, "authentication_error", () =>
    new Anthropic({ baseURL: url, apiKey: "wrong", maxRetries: 0 }).messages.create({ model: "tiny", max_tokens: 8, messages: hi })));
await check("NotFoundError for an unknown model", () =>
  throws(Anthropic.NotFoundError, 404, "not_found_error", () =>
    client.messages.create({ model: "no-such-model", max_tokens: 8, messages: hi })));
await check("NotFoundError from count_tokens", () =>
  throws(Anthropic.NotFoundError, 404, "not_found_error", () => client.messages.countTokens({ model: "no-such-model", messages: hi })));

await check("request-id header and _request_id", async () => {
  const { data, response, request_id } = await client.messages.create({ model: "tiny", max_tokens: 2, messages: hi }).withResponse();
  return all(
    ok("request-id header", (response.headers.get("request-id") ?? "").length > 0, [...response.headers.keys()]),
    eq("request_id", request_id, response.headers.get("request-id")),
    eq("_request_id", data._request_id, response.headers.get("request-id")),
  );
});

process.exit(failed ? 1 : 0);
