// The web console in headless chromium against `caflm serve` over two
// `caflm worker` processes:
// - chat: a message streams its answer and the answer's figures;
// - stop: pressing Stop mid-answer ends the request on the server, and every
//   KV block it held is free again (through /metrics);
// - failover: a worker is SIGKILLed while a chat answer streams from it; the
//   dashboard marks that engine lost, the timeline shows the loss and the
//   request moved, and the answer completes unchanged (against a fault-free
//   run of the same greedy request);
// - the API key is asked for once and kept in the tab;
// - both pages fit a phone-sized screen, and no page logs an error.
// Screenshots of both pages at 1280x800 go to WORK/screenshots (and to
// $CAFLM_SCREENSHOTS_DIR when set).
//
// Usage: node console_test.mjs CAFLM_BINARY MODEL WORK_DIR
// Every wait is multiplied by $CAFLM_TEST_TIME_SCALE (default 1): a
// sanitizer build runs the model several times slower.
import { spawn } from 'node:child_process';
import { copyFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const [caflm, model, work] = process.argv.slice(2);
const timeScale = Number(process.env.CAFLM_TEST_TIME_SCALE ?? 1) || 1;
/** `milliseconds` of waiting, scaled for slow (sanitizer) builds. */
const ms = (milliseconds) => milliseconds * timeScale;
const children = [];
const problems = [];

function fail(message) {
  throw new Error(message);
}

function check(condition, message) {
  if (!condition) fail(message);
}

/// Starts `caflm ARGS` and resolves with the first match of `pattern` in its
/// standard output (the address it listens on).
function start(name, args, pattern, env = {}) {
  const child = spawn(caflm, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  children.push(child);
  let out = '';
  child.name = name;
  child.errText = ''; // shown when the test fails
  child.stderr.on('data', (data) => { child.errText += data; });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start: ${child.errText}`)), ms(60000));
    child.stdout.on('data', (data) => {
      out += data;
      const match = out.match(pattern);
      if (match) {
        clearTimeout(timer);
        resolve({ child, address: match[1] });
      }
    });
    child.on('exit', (code) => reject(new Error(`${name} exited with ${code}: ${child.errText}`)));
  });
}

const worker = (name) => start(name, ['worker', '--model', model, '--host', '127.0.0.1', '--port', '0',
  '--kv-cache-mb', '64'], /listening on (127\.0\.0\.1:\d+)/, { OMP_NUM_THREADS: '1' });
const serve = (args) => start('serve', ['serve', '--model', model, '--host', '127.0.0.1', '--port', '0',
  '--chat-template', 'chatml', ...args], /listening on (http:\/\/[^ ]+)/, { OMP_NUM_THREADS: '1' });

async function json(url, key) {
  const response = await fetch(url, { headers: key ? { Authorization: `Bearer ${key}` } : {} });
  check(response.ok, `${url}: ${response.status}`);
  return response.json();
}

/// The value of each series of `name` in /metrics, by its labels' text.
async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const values = {};
  for (const line of text.split('\n')) {
    if (!line.startsWith(name + '{') && !line.startsWith(name + ' ')) continue;
    const at = line.lastIndexOf(' ');
    values[line.slice(name.length, at)] = Number(line.slice(at + 1));
  }
  return values;
}

async function eventually(what, probe, timeoutMs = ms(30000)) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await probe()) return;
    if (Date.now() > deadline) fail(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/// A page that records every console error or warning and uncaught exception.
async function openPage(browser, url, viewport = { width: 1280, height: 800 }) {
  const page = await browser.newPage({ viewport });
  page.setDefaultTimeout(ms(30000));
  page.on('console', (message) => {
    // Chromium logs every refused fetch; the keyed page's first one, before
    // a key is given, is the test's point, not a fault.
    if (/Failed to load resource: .* 401/.test(message.text())) return;
    if (message.type() === 'error' || message.type() === 'warning')
      problems.push(`${url}: console ${message.type()}: ${message.text()}`);
  });
  page.on('pageerror', (error) => problems.push(`${url}: ${error.message}`));
  await page.goto(url);
  return page;
}

/// Sends `prompt` from the chat page with greedy settings; returns the new
/// assistant message.
async function send(page, prompt, maxTokens) {
  await page.click('#clear');
  const settings = page.locator('#settings-panel');
  if (!(await settings.evaluate((details) => details.open))) await page.click('#settings-panel summary');
  await page.fill('#temperature', '0');
  await page.fill('#max-tokens', String(maxTokens));
  await page.fill('#prompt', prompt);
  await page.click('#send');
  return page.locator('.message.assistant').last();
}

async function figures(message) {
  const f = message.locator('.figures');
  const attribute = (name) => f.getAttribute(name);
  return {
    promptTokens: Number(await attribute('data-prompt-tokens')),
    completionTokens: Number(await attribute('data-completion-tokens')),
    cachedTokens: Number(await attribute('data-cached-tokens')),
    ttftMs: Number(await attribute('data-ttft-ms')),
    tokensPerSecond: Number(await attribute('data-tokens-per-second')),
    finish: await attribute('data-finish-reason'),
    engines: (await attribute('data-engines')).split(',').filter(Boolean),
  };
}

async function answerText(message) {
  return message.locator('.content').innerText();
}

async function main() {
  const a = await worker('worker A');
  const b = await worker('worker B');
  const byAddress = { [a.address]: a, [b.address]: b };
  const server = await serve(['--replicas', '0', '--worker', a.address, '--worker', b.address]);
  const base = server.address;
  await eventually('both workers up', async () => (await fetch(`${base}/health`)).ok);

  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', args: ['--no-sandbox'] });
  try {
    const chat = await openPage(browser, `${base}/`);
    await eventually('the model name', async () => (await chat.textContent('#model-name')) !== '…');

    // Chat: the answer streams and ends with its figures.
    let message = await send(chat, 'Hello there!', 24);
    await chat.waitForSelector('.message.assistant[data-state="done"]', { timeout: ms(60000) });
    let answer = await figures(message);
    check(answer.promptTokens > 5, `prompt tokens: ${answer.promptTokens}`);
    check(answer.completionTokens > 0 && answer.completionTokens <= 24, `completion tokens: ${answer.completionTokens}`);
    check(answer.ttftMs > 0 && answer.tokensPerSecond > 0, `ttft ${answer.ttftMs} ms, ${answer.tokensPerSecond} tok/s`);
    check(answer.engines.length === 1 && byAddress[answer.engines[0]], `engines: ${answer.engines}`);
    check((await answerText(message)).length > 0, 'the answer has text');

    // Stop: the request ends on the server and its blocks are free again.
    message = await send(chat, 'Tell me everything you know.', 3500);
    await eventually('the answer to stream', async () => (await answerText(message)).length > 10);
    await chat.click('#stop');
    await chat.waitForSelector('.message.assistant[data-state="stopped"]', { timeout: ms(30000) });
    await eventually('no request running and every block back (but the prefix cache\'s)', async () => {
      const running = await metric(base, 'vllm:num_requests_running');
      const used = await metric(base, 'caflm_engine_kv_blocks_used');
      const cached = await metric(base, 'caflm_engine_kv_blocks_cached');
      return Object.values(running).every((v) => v === 0) && Object.keys(used).length === 2 &&
        Object.keys(used).every((labels) => used[labels] === cached[labels]);
    });
    const stopped = await metric(base, 'vllm:request_success_total');
    check(Object.entries(stopped).some(([labels, v]) => labels.includes('abort') && v >= 1), 'the stop counted as an abort');

    // A fault-free answer to compare with.
    const story = 'Tell me a long story about actors.';
    // Several seconds on one thread, so the kill lands mid-answer; as many
    // seconds in a build the time scale says is slower.
    const storyTokens = Math.max(300, Math.round(3000 / timeScale));
    message = await send(chat, story, storyTokens);
    await chat.waitForSelector('.message.assistant[data-state="done"]', { timeout: ms(120000) });
    const calmText = await answerText(message);
    const calm = await figures(message);
    check(calm.completionTokens > 100, `the reference answer is long enough: ${calm.completionTokens} tokens`);
    console.log(`reference answer: ${calm.completionTokens} tokens at ${calm.tokensPerSecond} tok/s`);

    // Failover: the worker streaming the answer dies.
    const dashboard = await openPage(browser, `${base}/cluster`);
    await dashboard.waitForSelector(`[data-engine="${a.address}"][data-state="up"]`);
    await dashboard.waitForSelector(`[data-engine="${b.address}"][data-state="up"]`);
    const generatedBefore = Object.fromEntries(
      (await json(`${base}/v1/cluster`)).engines.map((engine) => [engine.name, engine.generated_tokens]));
    message = await send(chat, story, storyTokens);
    // Which engine runs it, and that it has streamed some of it, from the
    // server (not the page), so the kill lands mid-answer however busy the
    // browser is: the page renders text on animation frames, which a loaded
    // machine may hold back until the answer has ended.
    let busy;
    await eventually('an engine to report the answer running and 20 tokens of it', async () => {
      busy = (await json(`${base}/v1/cluster`)).engines.find((engine) => engine.running > 0 &&
        engine.generated_tokens >= (generatedBefore[engine.name] ?? 0) + 20);
      return busy !== undefined;
    }, ms(30000));
    const state = await message.getAttribute('data-state');
    check(state === 'streaming', `the answer ended before the kill (its state: ${state})`);
    const survivor = busy.name === a.address ? b.address : a.address;
    byAddress[busy.name].child.kill('SIGKILL');

    await dashboard.waitForSelector(`[data-engine="${busy.name}"][data-state="lost"]`, { timeout: ms(30000) });
    await dashboard.waitForSelector(`#timeline [data-event-type="engine_lost"]`, { timeout: ms(30000) });
    await dashboard.waitForSelector(`#timeline [data-event-type="request_moved"]`, { timeout: ms(30000) });
    await chat.waitForSelector('.message.assistant[data-state="done"]', { timeout: ms(120000) });
    const moved = await figures(message);
    check(await answerText(message) === calmText, 'the answer after the failover differs from the fault-free one');
    check(moved.completionTokens === calm.completionTokens, 'completion tokens differ after the failover');
    check(moved.engines.length === 2 && moved.engines[0] === busy.name && moved.engines[1] === survivor,
      `engines after the failover: ${moved.engines}`);
    check(/lost/.test(await dashboard.locator(`[data-engine="${busy.name}"]`).innerText()), 'the engine card says lost');

    const shots = join(work, 'screenshots');
    mkdirSync(shots, { recursive: true });
    await chat.screenshot({ path: join(shots, 'console-chat.png') });
    await dashboard.waitForTimeout(1500); // a poll after the last change
    await dashboard.screenshot({ path: join(shots, 'console-cluster.png') });
    if (process.env.CAFLM_SCREENSHOTS_DIR)
      for (const name of ['console-chat.png', 'console-cluster.png'])
        copyFileSync(join(shots, name), join(process.env.CAFLM_SCREENSHOTS_DIR, name));

    // A phone-sized screen: nothing wider than it.
    for (const path of ['/', '/cluster']) {
      const phone = await openPage(browser, `${base}${path}`, { width: 390, height: 844 });
      await phone.waitForTimeout(1200);
      const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      check(overflow <= 0, `${path} is ${overflow} px wider than a 390 px screen`);
      await phone.close();
    }

    // The API key: asked for once, then kept in the tab.
    const keyed = await serve(['--replicas', '1', '--kv-cache-mb', '64', '--api-key', 'sesame']);
    const keyedChat = await openPage(browser, `${keyed.address}/`);
    await keyedChat.waitForSelector('#key-dialog[open]', { timeout: ms(30000) });
    await keyedChat.fill('#api-key-input', 'sesame');
    await keyedChat.click('#key-save');
    message = await send(keyedChat, 'Hello!', 8);
    await keyedChat.waitForSelector('.message.assistant[data-state="done"]', { timeout: ms(60000) });
    await keyedChat.goto(`${keyed.address}/cluster`);
    await keyedChat.waitForSelector('[data-engine="local-0"][data-state="up"]', { timeout: ms(30000) });
    check(!(await keyedChat.locator('#key-dialog[open]').count()), 'the key was asked for again');
  } finally {
    await browser.close();
  }
  check(problems.length === 0, `the pages logged problems:\n${problems.join('\n')}`);
  console.log('web console: chat, stop, failover, api key, phone size: ok');
}

try {
  await main();
} catch (error) {
  console.error(`FAIL: ${error.message}`);
  if (problems.length) console.error(`the pages logged:\n${problems.join('\n')}`);
  for (const child of children) console.error(`--- ${child.name}'s standard error:\n${(child.errText ?? '').slice(-2000)}`);
  process.exitCode = 1;
} finally {
  for (const child of children) child.kill('SIGKILL');
}
