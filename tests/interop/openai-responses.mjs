// Drives memra-serve's OpenAI Responses API (POST /v1/responses) with the
// official openai SDK (pinned in package.json): responses.create blocking,
// responses.stream() and its finalResponse(), output_text, function calls
// forced with tool_choice and their outputs sent back (the items resent,
// and by previous_response_id), json_schema through text.format and
// responses.parse(), the stored response's retrieve and delete, and the
// errors the SDK maps to its exception classes. Prints one PASS/FAIL line
// per check; exits 1 when any failed.
//
//   node openai-responses.mjs URL KEY MODEL
//
// MODEL: a chat model (memra-tiny, or the random-weight Qwen3); every
// check samples greedily, so the blocking and streamed replies must agree
// byte for byte with each other and with /v1/chat/completions.
import OpenAI from "openai";

const [url, key, model] = process.argv.slice(2);
if (!url || !key || !model) {
  console.error("usage: node openai-responses.mjs URL KEY MODEL");
  process.exit(2);
}
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey: key, maxRetries: 0, timeout: 60000 });
let failed = 0;

async function check(name, fn) {
  name = `responses ${model}: ${name}`;
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
const ok = (what, cond) => (cond ? true : `${what}: not so`);
const all = (...rs) => rs.find((r) => r !== true) ?? true;
const usageAdds = (u) =>
  all(
    eq("total_tokens", u.total_tokens, u.input_tokens + u.output_tokens),
    eq("cached_tokens", u.input_tokens_details.cached_tokens, 0),
    ok("reasoning_tokens a number", Number.isInteger(u.output_tokens_details.reasoning_tokens)),
  );

const base = { model, instructions: "Be brief.", input: "Tell me about the whale", max_output_tokens: 12, temperature: 0 };

let blocking = null;
await check("responses.create (blocking)", async () => {
  const r = await client.responses.create({ ...base, metadata: { run: "sdk" }, user: "sdk-test" });
  blocking = r;
  const msg = r.output.find((o) => o.type === "message");
  return all(
    ok("id resp_", r.id.startsWith("resp_")),
    eq("object", r.object, "response"),
    ok("status", r.status === "completed" || r.status === "incomplete"),
    eq("incomplete_details", r.status === "incomplete" ? r.incomplete_details : null, r.status === "incomplete" ? { reason: "max_output_tokens" } : null),
    eq("model", r.model, model),
    ok("a message item", msg && msg.id.startsWith("msg_") && msg.role === "assistant"),
    eq("content type", msg.content[0].type, "output_text"),
    eq("annotations", msg.content[0].annotations, []),
    eq("output_text (the SDK's)", r.output_text, msg.content[0].text),
    eq("echo instructions", r.instructions, base.instructions),
    eq("echo max_output_tokens", r.max_output_tokens, 12),
    eq("echo temperature", r.temperature, 0),
    eq("echo metadata", r.metadata, { run: "sdk" }),
    eq("echo user", r.user, "sdk-test"),
    eq("store default", r.store, true),
    ok("output_tokens <= 12", r.usage.output_tokens <= 12),
    usageAdds(r.usage),
  );
});

await check("output_text equals chat.completions' content", async () => {
  const c = await client.chat.completions.create({
    model, max_tokens: 12, temperature: 0,
    messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Tell me about the whale" }],
  });
  return all(
    eq("text", blocking.output_text, c.choices[0].message.content ?? ""),
    eq("input_tokens", blocking.usage.input_tokens, c.usage.prompt_tokens),
  );
});

await check("responses.stream() + finalResponse()", async () => {
  const stream = client.responses.stream({ ...base });
  const types = [];
  const seqs = [];
  let deltas = "";
  let last = null;
  for await (const ev of stream) {
    types.push(ev.type);
    seqs.push(ev.sequence_number);
    if (ev.type === "response.output_text.delta") deltas += ev.delta;
    last = ev;
  }
  const r = await stream.finalResponse();
  const want = [
    "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
  ];
  const tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done"];
  const end = types[types.length - 1];
  return all(
    eq("first events", types.slice(0, 4), want),
    eq("closing events", types.slice(-4, -1), tail),
    ok(`last event ${end}`, end === (blocking.status === "completed" ? "response.completed" : "response.incomplete")),
    eq("sequence_number 0..n-1", seqs, seqs.map((_, i) => i)),
    eq("deltas = blocking text", deltas, blocking.output_text),
    // finalResponse() is the SDK's accumulation of the events (the snapshot
    // of response.created grown by each delta; replaced by response.completed's)
    eq("finalResponse text", r.output.find((o) => o.type === "message").content[0].text, blocking.output_text),
    eq("last event's usage", last.response.usage.output_tokens, blocking.usage.output_tokens),
    eq("last event's output", last.response.output[0].content[0].text, blocking.output_text),
  );
});

const tool = {
  type: "function",
  name: "get_weather",
  description: "The weather in a city",
  parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"], additionalProperties: false },
  strict: true,
};
const ask = [{ role: "user", content: [{ type: "input_text", text: "What is the weather in Paris?" }] }];
let called = null;
await check("function call (tool_choice required; a web_search tool skipped)", async () => {
  const r = await client.responses.create({
    model, input: ask, tools: [{ type: "web_search" }, tool], tool_choice: "required", parallel_tool_calls: false, max_output_tokens: 300, temperature: 0,
  });
  called = r;
  const fc = r.output.filter((o) => o.type === "function_call");
  const args = fc.length ? JSON.parse(fc[0].arguments) : null;
  return all(
    eq("status", r.status, "completed"),
    eq("one call", fc.length, 1),
    eq("name", fc[0].name, "get_weather"),
    ok("call_id call_", fc[0].call_id.startsWith("call_")),
    ok("id fc_", fc[0].id.startsWith("fc_")),
    eq("item status", fc[0].status, "completed"),
    ok("arguments.city a string", typeof args.city === "string"),
    eq("echo tools (functions)", r.tools.map((t) => t.name), ["get_weather"]),
    eq("echo tool_choice", r.tool_choice, "required"),
    eq("echo parallel_tool_calls", r.parallel_tool_calls, false),
  );
});

let resentTokens = null;
await check("function_call_output sent back with the items resent", async () => {
  const fc = called.output.find((o) => o.type === "function_call");
  const r = await client.responses.create({
    model, tools: [tool], max_output_tokens: 8, temperature: 0,
    input: [...ask, ...called.output, { type: "function_call_output", call_id: fc.call_id, output: "Sunny, 21 C" }],
  });
  resentTokens = r.usage.input_tokens;
  return all(ok("status", r.status === "completed" || r.status === "incomplete"), ok("has output", r.output.length >= 1));
});

await check("function_call_output sent back by previous_response_id", async () => {
  const fc = called.output.find((o) => o.type === "function_call");
  const r = await client.responses.create({
    model, tools: [tool], max_output_tokens: 8, temperature: 0, previous_response_id: called.id,
    input: [{ type: "function_call_output", call_id: fc.call_id, output: "Sunny, 21 C" }],
  });
  return all(
    eq("echo previous_response_id", r.previous_response_id, called.id),
    eq("same prompt as the items resent (input_tokens)", r.usage.input_tokens, resentTokens),
  );
});

await check("named tool_choice, streamed", async () => {
  const stream = client.responses.stream({
    model, input: ask, tools: [tool], tool_choice: { type: "function", name: "get_weather" }, max_output_tokens: 300, temperature: 0,
  });
  let argDeltas = "";
  const types = [];
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === "response.function_call_arguments.delta") argDeltas += ev.delta;
  }
  const r = await stream.finalResponse();
  const fc = r.output.filter((o) => o.type === "function_call");
  return all(
    ok("function_call_arguments.done sent", types.includes("response.function_call_arguments.done")),
    eq("one call", fc.length, 1),
    eq("arguments = deltas", fc[0].arguments, argDeltas),
    ok("arguments parse", typeof JSON.parse(fc[0].arguments).city === "string"),
    eq("completed", types[types.length - 1], "response.completed"),
  );
});

const pet = {
  type: "json_schema",
  name: "pet",
  strict: true,
  schema: {
    type: "object",
    properties: { name: { type: "string", maxLength: 10 }, legs: { type: "integer", minimum: 0, maximum: 8 } },
    required: ["name", "legs"],
    additionalProperties: false,
  },
};
await check("json_schema via text.format", async () => {
  const r = await client.responses.create({ model, input: "A pet, as JSON", text: { format: pet }, max_output_tokens: 300, temperature: 0 });
  const v = JSON.parse(r.output_text);
  return all(eq("status", r.status, "completed"), eq("keys", Object.keys(v).sort(), ["legs", "name"]), eq("echo text.format", r.text.format.name, "pet"));
});

await check("responses.parse()", async () => {
  const r = await client.responses.parse({ model, input: "A pet, as JSON", text: { format: pet }, max_output_tokens: 300, temperature: 0 });
  return all(ok("output_parsed", r.output_parsed && typeof r.output_parsed.name === "string"), ok("legs", Number.isInteger(r.output_parsed.legs)));
});

await check("retrieve and delete a stored response", async () => {
  const got = await client.responses.retrieve(blocking.id);
  await client.responses.delete(blocking.id);
  let after = null;
  try {
    await client.responses.retrieve(blocking.id);
  } catch (e) {
    after = e;
  }
  return all(eq("retrieved output_text", got.output_text, blocking.output_text), ok("404 after delete", after instanceof OpenAI.NotFoundError));
});

await check("store:false is not kept", async () => {
  const r = await client.responses.create({ ...base, store: false, max_output_tokens: 2 });
  try {
    await client.responses.create({ ...base, previous_response_id: r.id, max_output_tokens: 2 });
  } catch (e) {
    return all(ok("NotFoundError", e instanceof OpenAI.NotFoundError), eq("param", e.param, "previous_response_id"), eq("echo store", r.store, false));
  }
  return "previous_response_id of a store:false response was found";
});

async function refused(body, param, re) {
  try {
    await client.responses.create(body);
  } catch (e) {
    return all(ok(`BadRequestError (${e.constructor.name})`, e instanceof OpenAI.BadRequestError), eq("param", e.param, param), ok(`message ${e.message}`, re.test(e.message)));
  }
  return "accepted";
}
await check("error: an unknown field is named", () => refused({ ...base, frobnicate: 1 }, "frobnicate", /frobnicate/));
await check("error: input_image is refused clearly", () =>
  refused({ model, input: [{ role: "user", content: [{ type: "input_image", image_url: "http://x/y.png" }] }] }, "input[0].content", /input_image.*text only/));
await check("error: tool_choice required without function tools", () =>
  refused({ ...base, tools: [{ type: "web_search" }], tool_choice: "required" }, "tool_choice", /needs function tools/));
await check("error: a model that is not served", async () => {
  try {
    await client.responses.create({ ...base, model: "no-such-model" });
  } catch (e) {
    return ok(`NotFoundError (${e.constructor.name})`, e instanceof OpenAI.NotFoundError);
  }
  return "accepted";
});

process.exit(failed ? 1 : 0);
