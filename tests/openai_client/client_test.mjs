// `caflm serve` under the official openai client, unmodified: chat and
// completions, streamed and not, n, stop, logprobs, include_usage, an API
// key, and a 429 when every queue is full.
// Usage: node client_test.mjs CAFLM_BINARY MODEL
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import OpenAI from "openai";

const [caflm, model] = process.argv.slice(2);
const apiKey = "test-key";

/** Starts `caflm serve` and resolves with its base URL and process. */
function startServer() {
  const server = spawn(caflm, [
    "serve", "--model", model, "--port", "0", "--device", "cpu",
    "--chat-template", "chatml", "--served-model-name", "tiny", "--api-key", apiKey,
    "--max-concurrent", "1", "--max-queue", "1", "--kv-cache-mb", "64",
  ], { stdio: ["ignore", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    let out = "";
    server.on("exit", (code) => reject(new Error(`caflm serve exited with ${code}`)));
    server.stdout.on("data", (data) => {
      out += data;
      const match = out.match(/listening on (http:\/\/[0-9.]+:[0-9]+)/);
      if (match) resolve({ server, url: `${match[1]}/v1` });
    });
  });
}

const { server, url } = await startServer();
const client = new OpenAI({ baseURL: url, apiKey, maxRetries: 0 });
const messages = [
  { role: "system", content: "Be brief." },
  { role: "user", content: "Say something." },
];
let failed = false;

async function check(name, body) {
  try {
    await body();
    console.log(`ok - ${name}`);
  } catch (error) {
    failed = true;
    console.log(`not ok - ${name}\n${error.stack}`);
  }
}

await check("models lists the served model", async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ["tiny"]);
});

let greedy;
await check("chat, not streamed, n = 2 with logprobs", async () => {
  const chat = await client.chat.completions.create({
    model: "tiny", messages, max_tokens: 6, n: 2, seed: 3, temperature: 0.9,
    logprobs: true, top_logprobs: 2, ignore_eos: true,
  });
  assert.equal(chat.object, "chat.completion");
  assert.equal(chat.choices.length, 2);
  for (const choice of chat.choices) {
    assert.equal(choice.finish_reason, "length");
    assert.equal(choice.logprobs.content.length, 6);
    assert.equal(choice.logprobs.content[0].top_logprobs.length, 2);
  }
  assert.equal(chat.usage.completion_tokens, 12);
  greedy = await client.chat.completions.create({
    model: "tiny", messages, max_tokens: 8, temperature: 0, ignore_eos: true,
  });
});

await check("chat, streamed with include_usage, is the same answer", async () => {
  const stream = await client.chat.completions.create({
    model: "tiny", messages, max_tokens: 8, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "";
  let usage = null;
  let finish = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      text += choice.delta.content ?? "";
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  assert.equal(text, greedy.choices[0].message.content);
  assert.equal(finish, "length");
  assert.equal(usage.completion_tokens, 8);
  assert.ok("cached_tokens" in usage.prompt_tokens_details);
});

await check("completions with stop and logprobs, streamed and not", async () => {
  const base = { model: "tiny", prompt: "Once upon a time", max_tokens: 12, temperature: 0,
                 ignore_eos: true };
  const plain = await client.completions.create(base);
  const text = plain.choices[0].text;
  const ascii = [...text.matchAll(/[ -~]{2}/g)].find((m) => m.index > 0);
  assert.ok(ascii, `no ASCII pair in ${JSON.stringify(text)}`);
  const stop = ascii[0];
  const stopped = await client.completions.create({ ...base, stop: [stop], logprobs: 2 });
  assert.equal(stopped.choices[0].text, text.slice(0, text.indexOf(stop)));
  assert.equal(stopped.choices[0].finish_reason, "stop");
  assert.ok(Array.isArray(stopped.choices[0].logprobs.token_logprobs));
  const stream = await client.completions.create({ ...base, stream: true });
  let streamed = "";
  for await (const chunk of stream) streamed += chunk.choices[0]?.text ?? "";
  assert.equal(streamed, text);
});

await check("a wrong API key is refused with 401", async () => {
  const intruder = new OpenAI({ baseURL: url, apiKey: "wrong", maxRetries: 0 });
  await assert.rejects(intruder.models.list(), (error) => error.status === 401);
});

await check("every queue full: 429 with Retry-After", async () => {
  const long = { model: "tiny", prompt: "Once", max_tokens: 7000, ignore_eos: true, stream: true };
  const controllers = [new AbortController(), new AbortController()];
  // One request runs, one waits: both holders of the engine's capacity.
  const running = await client.completions.create(long, { signal: controllers[0].signal });
  const reader = running[Symbol.asyncIterator]();
  await reader.next();
  const waiting = client.completions.create(long, { signal: controllers[1].signal });
  waiting.catch(() => {});
  let refused = null;
  for (let attempt = 0; attempt < 50 && !refused; ++attempt) {
    await new Promise((r) => setTimeout(r, 100));
    try {
      const extra = await client.completions.create({ model: "tiny", prompt: "Hi", max_tokens: 1 });
      assert.ok(extra, "served while the queue had room");
    } catch (error) {
      refused = error;
    }
  }
  for (const c of controllers) c.abort();
  assert.ok(refused, "no request was refused");
  assert.equal(refused.status, 429);
  assert.ok(refused.headers.get("retry-after"));
});

server.kill("SIGTERM");
process.exit(failed ? 1 : 0);
