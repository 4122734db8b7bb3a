// `okapi serve` in router mode (no -m; --models-dir / --models-preset): the model list, loading on
// first use, routing by `model`, a streamed response passed on as it comes, eviction of the least
// recently used model with --models-max 1 (never of a busy one: the request waits in the queue), a
// queued client that leaves, load / unload, ?reload=1, a model whose child fails, the API key,
// --no-models-autoload with a preset, and SIGTERM stopping every child.
//
// Models, in a temp folder: stories260K as alpha.gguf and as beta/beta-Q8_0.gguf (with an mmproj
// file that is not a model), a synth llama (4 layers of stories110M's width, ~6 ms a token) that
// stays busy long enough to queue behind, and a file that is not a GGUF.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, unlinkSync, writeFileSync }
  from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { OKAPI_BIN, OKAPI_MODEL, dropFetchConnections, get, post, sleep, sseData, within } from './support.mjs';

const SANITIZED = !!process.env.OKAPI_SANITIZED && process.env.OKAPI_SANITIZED !== '0';
const BUSY_TOKENS = SANITIZED ? 40 : 150;  // ~1 s of the slow model in Release
const KEY = 'sk-router-test';
const AUTH = { Authorization: `Bearer ${KEY}` };

const dir = mkdtempSync(path.join(os.tmpdir(), 'okapi-router-'));
const modelsDir = path.join(dir, 'models');
const running = new Set();
process.on('exit', () => { for (const c of running) c.kill('SIGKILL'); });

// Starts `okapi serve ARGS --port 0` (no -m) and waits for its "listening" line.
async function startRouter(args, env = {}) {
  const child = spawn(OKAPI_BIN, ['serve', '--host', '127.0.0.1', '--port', '0', '-t', '1', ...args],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  running.add(child);
  let log = '';
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => { running.delete(child); resolve({ code, signal }); }));
  child.stdout.on('data', (d) => { log += d; });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "listening" line:\n${log}`)), 30_000);
    child.stderr.on('data', (d) => {
      log += d;
      const m = /^okapi: listening on http:\/\/[^:\s]+:(\d+)/m.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    exited.then((e) => { clearTimeout(timer); reject(new Error(`exited ${JSON.stringify(e)}:\n${log}`)); });
  });
  return {
    base: `http://127.0.0.1:${port}`,
    log: () => log,
    async stop() {
      await dropFetchConnections();
      child.kill('SIGTERM');
      const result = await within(exited, 30_000);
      if (!result) { child.kill('SIGKILL'); throw new Error(`router did not stop:\n${log.slice(-3000)}`); }
      assert.equal(result.code, 0, log.slice(-3000));
    },
  };
}

// Processes whose command line names `needle` (the children of this test's routers).
function processesWith(needle) {
  const found = [];
  for (const pid of readdirSync('/proc').filter((p) => /^\d+$/.test(p))) {
    try {
      if (readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(needle)) found.push(Number(pid));
    } catch { /* gone */ }
  }
  return found;
}

async function models(base, query = '') {
  const res = await get(base, `/models${query}`, { headers: AUTH });
  assert.equal(res.status, 200, res.text);
  return Object.fromEntries(res.json.data.map((m) => [m.id, m]));
}

async function statusOf(base, id) {
  return (await models(base))[id]?.status.value;
}

async function waitStatus(base, id, want, timeoutMs = 30_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await statusOf(base, id);
    if (last === want) return;
    await sleep(20);
  }
  throw new Error(`${id}: status ${last}, not ${want}`);
}

const tokenize = (base, model) => post(base, '/tokenize', { model, content: 'hello world' }, { headers: AUTH });
const busy = (base, tokens = BUSY_TOKENS) => post(base, '/v1/completions',
  { model: 'slow', prompt: 'Once', max_tokens: tokens, ignore_eos: true }, { headers: AUTH });

before(() => {
  mkdirSync(path.join(modelsDir, 'beta'), { recursive: true });
  copyFileSync(OKAPI_MODEL, path.join(modelsDir, 'alpha.gguf'));
  copyFileSync(OKAPI_MODEL, path.join(modelsDir, 'beta', 'beta-Q8_0.gguf'));
  copyFileSync(OKAPI_MODEL, path.join(modelsDir, 'beta', 'mmproj-F16.gguf'));
  writeFileSync(path.join(modelsDir, 'broken.gguf'), 'not a gguf file');
  execFileSync(OKAPI_BIN, ['synth', '--preset', 'stories110M', '--layers', '4', '--vocab', '512', '--type', 'Q8_0',
    '-o', path.join(modelsDir, 'slow.gguf'), '-t', '2'], { stdio: 'ignore' });
});

after(() => rmSync(dir, { recursive: true, force: true }));

describe('router over --models-dir with --models-max 1 and an API key', () => {
  let r;
  before(async () => {
    r = await startRouter(['--models-dir', modelsDir, '--models-max', '1', '--api-key', KEY, '-c', '512', '-np', '1']);
  });
  after(async () => {
    const children = processesWith(modelsDir);
    await r?.stop();
    await sleep(100);
    assert.deepEqual(processesWith(modelsDir).filter((p) => children.includes(p)), [],
      'SIGTERM to the router stops its children');
  });

  test('lists every model of the folder, none loaded; health and the key', async () => {
    const list = await models(r.base);
    assert.deepEqual(Object.keys(list).sort(), ['alpha', 'beta', 'broken', 'slow']);
    for (const m of Object.values(list)) {
      assert.equal(m.status.value, 'unloaded');
      assert.equal(m.source, 'models_dir');
      assert.equal(m.object, 'model');
    }
    assert.match(list.beta.path, /beta-Q8_0\.gguf$/);  // the mmproj file is not the model
    assert.equal((await get(r.base, '/v1/models', { headers: AUTH })).json.data.length, 4);
    assert.equal((await get(r.base, '/health')).status, 200);
    const denied = await get(r.base, '/models');
    assert.equal(denied.status, 401);
    assert.equal(denied.json.error.type, 'authentication_error');
    const chat = await post(r.base, '/v1/chat/completions', { model: 'alpha', messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(chat.status, 401);
    const props = await get(r.base, '/props', { headers: AUTH });
    assert.equal(props.json.role, 'router');
    assert.equal(props.json.max_instances, 1);
    assert.equal(props.json.models_autoload, true);
  });

  test('bad requests: unknown model, no model, malformed JSON', async () => {
    const unknown = await post(r.base, '/v1/chat/completions',
      { model: 'nope', messages: [{ role: 'user', content: 'hi' }] }, { headers: AUTH });
    assert.equal(unknown.status, 400);
    assert.match(unknown.json.error.message, /model 'nope' not found/);
    const missing = await post(r.base, '/v1/completions', { prompt: 'x' }, { headers: AUTH });
    assert.equal(missing.status, 400);
    assert.match(missing.json.error.message, /model name is missing/);
    assert.equal((await post(r.base, '/v1/completions', { model: 42, prompt: 'x' }, { headers: AUTH })).status, 400);
    assert.equal((await post(r.base, '/v1/completions', '{"model": "alpha",', { headers: AUTH })).status, 400);
    assert.equal((await get(r.base, '/slots', { headers: AUTH })).status, 400);
    assert.equal((await get(r.base, '/nowhere', { headers: AUTH })).status, 404);
    assert.equal((await statusOf(r.base, 'alpha')), 'unloaded', 'no bad request loads a model');
  });

  test('loads on first use and routes by model', async () => {
    const res = await post(r.base, '/v1/chat/completions',
      { model: 'alpha', messages: [{ role: 'user', content: 'hi' }], max_tokens: 8 }, { headers: AUTH });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.model, 'alpha');
    assert.ok(res.json.choices[0].message.content.length > 0);
    const list = await models(r.base);
    assert.equal(list.alpha.status.value, 'loaded');
    assert.ok(list.alpha.status.args.includes('--alias'));
    assert.equal(list.alpha.meta.n_vocab, 512, 'the child\'s /v1/models entry joins the list');
    const props = await get(r.base, '/props?model=alpha', { headers: AUTH });
    assert.equal(props.status, 200);
    assert.equal(props.json.model_alias, 'alpha');
  });

  test('another model evicts the least recently used one (--models-max 1)', async () => {
    const res = await tokenize(r.base, 'beta');
    assert.equal(res.status, 200, res.text);
    assert.ok(res.json.tokens.length > 0);
    const list = await models(r.base);
    assert.equal(list.beta.status.value, 'loaded');
    assert.equal(list.alpha.status.value, 'unloaded');
  });

  test('a stream is passed on as it is produced', async () => {
    const started = Date.now();
    const res = await fetch(`${r.base}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', ...AUTH },
      body: JSON.stringify({ model: 'slow', messages: [{ role: 'user', content: 'hi' }], max_tokens: BUSY_TOKENS,
        ignore_eos: true, stream: true }),
    });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /text\/event-stream/);
    let first = 0;
    let chunks = 0;
    let done = false;
    for await (const data of sseData(res)) {
      if (data === '[DONE]') { done = true; continue; }
      if (!first) first = Date.now();
      chunks += 1;
      assert.equal(JSON.parse(data).model, 'slow');
    }
    const end = Date.now();
    assert.ok(done);
    assert.ok(chunks >= BUSY_TOKENS / 2, `${chunks} chunks`);
    // Loading included, the first chunk comes well before the last: nothing waits for the whole body.
    assert.ok(end - first > (end - started) / 4, `first chunk after ${first - started} ms of ${end - started} ms`);
  });

  test('a busy model is not evicted: the other model waits in the queue', async () => {
    await waitStatus(r.base, 'slow', 'loaded');
    const held = busy(r.base);
    await sleep(100);
    let heldDone = 0;
    held.then(() => { heldDone = Date.now(); });
    const queued = await tokenize(r.base, 'alpha');
    const queuedDone = Date.now();
    const heldRes = await held;
    assert.equal(heldRes.status, 200, heldRes.text);
    assert.equal(heldRes.json.usage.completion_tokens, BUSY_TOKENS, 'the busy model finished its request');
    assert.equal(queued.status, 200, queued.text);
    assert.ok(heldDone && heldDone <= queuedDone, 'the queued request ran after the busy one');
    const list = await models(r.base);
    assert.equal(list.alpha.status.value, 'loaded');
    assert.equal(list.slow.status.value, 'unloaded');
  });

  test('a client that leaves the queue gives up its place', async () => {
    await tokenize(r.base, 'slow');
    // The waiter must leave while the busy request still runs: a machine fast enough to finish it
    // first gets a longer one (the context holds ~500 tokens).
    for (const tokens of [BUSY_TOKENS, 3 * BUSY_TOKENS]) {
      let heldDone = false;
      const held = busy(r.base, tokens);
      held.then(() => { heldDone = true; });
      await sleep(100);
      const leaving = new AbortController();
      const gone = post(r.base, '/tokenize', { model: 'beta', content: 'x' }, { headers: AUTH, signal: leaving.signal })
        .catch((e) => e);
      await sleep(200);
      const leftInTime = !heldDone;
      leaving.abort();
      const left = await gone;
      assert.equal((await held).status, 200);
      if (!leftInTime) {
        await tokenize(r.base, 'slow');
        continue;
      }
      assert.equal(left.name, 'AbortError');
      await sleep(500);
      const list = await models(r.base);
      assert.equal(list.slow.status.value, 'loaded', 'nobody waits: the model keeps its place');
      assert.equal(list.beta.status.value, 'unloaded');
      return;
    }
    assert.fail(`the busy request of ${3 * BUSY_TOKENS} tokens ended within 300 ms: nothing to measure`);
  });

  test('two waiters for two models are both served, one after the other', async () => {
    const [b, a] = await Promise.all([tokenize(r.base, 'beta'), tokenize(r.base, 'alpha')]);
    assert.equal(b.status, 200, b.text);
    assert.equal(a.status, 200, a.text);
    assert.equal(await statusOf(r.base, 'slow'), 'unloaded');
  });

  test('POST /models/unload and /models/load', async () => {
    const loaded = Object.values(await models(r.base)).find((m) => m.status.value === 'loaded').id;
    const unload = await post(r.base, '/models/unload', { model: loaded }, { headers: AUTH });
    assert.equal(unload.status, 200);
    assert.equal(unload.json.success, true);
    await waitStatus(r.base, loaded, 'unloaded');
    assert.equal((await post(r.base, '/models/unload', { model: loaded }, { headers: AUTH })).status, 400);
    const load = await post(r.base, '/models/load', { model: 'beta' }, { headers: AUTH });
    assert.equal(load.status, 200);
    assert.equal(load.json.success, true);
    await waitStatus(r.base, 'beta', 'loaded');
    assert.equal((await post(r.base, '/models/load', { model: 'beta' }, { headers: AUTH })).status, 400);
    assert.equal((await post(r.base, '/models/load', { model: 'nope' }, { headers: AUTH })).status, 404);
  });

  test('a model whose server fails is marked failed, and tried again on the next request', async () => {
    const res = await tokenize(r.base, 'broken');
    assert.equal(res.status, 503);
    assert.match(res.json.error.message, /failed to load/);
    const status = (await models(r.base)).broken.status;
    assert.equal(status.value, 'unloaded');
    assert.equal(status.failed, true);
    assert.notEqual(status.exit_code, 0);
    assert.equal((await tokenize(r.base, 'broken')).status, 503);
    assert.equal((await tokenize(r.base, 'alpha')).status, 200, 'a failed model does not hold a place');
  });

  test('?reload=1 picks up added and removed files', async () => {
    copyFileSync(OKAPI_MODEL, path.join(modelsDir, 'gamma.gguf'));
    unlinkSync(path.join(modelsDir, 'broken.gguf'));
    assert.equal((await models(r.base)).gamma, undefined, 'not before a reload');
    const list = await models(r.base, '?reload=1');
    assert.ok(list.gamma);
    assert.equal(list.broken, undefined);
    assert.equal((await tokenize(r.base, 'gamma')).status, 200);
  });
});

describe('router over a preset with --no-models-autoload', () => {
  let r;
  before(async () => {
    const preset = path.join(dir, 'preset.ini');
    writeFileSync(preset, [
      'version = 1',
      '[*]',
      'c = 256',
      '',
      '; a model of its own',
      '[tiny]',
      `model = ${path.join(modelsDir, 'alpha.gguf')}`,
      'temp = 0',
      '[eager]',
      `model = ${path.join(modelsDir, 'alpha.gguf')}`,
      'load-on-startup = true',
      '',
    ].join('\n'));
    r = await startRouter(['--models-preset', preset, '--no-models-autoload', '-np', '1']);
  });
  after(async () => { await r?.stop(); });

  test('a model loads only when asked; load-on-startup loads at once', async () => {
    await waitStatus(r.base, 'eager', 'loaded');
    const list = await models(r.base);
    assert.equal(list.tiny.source, 'preset');
    assert.match(list.tiny.status.preset, /temp = 0/);
    const res = await post(r.base, '/v1/completions', { model: 'tiny', prompt: 'Once', max_tokens: 2 });
    assert.equal(res.status, 400);
    assert.match(res.json.error.message, /not loaded/);
    assert.equal((await post(r.base, '/models/load', { model: 'tiny' })).status, 200);
    await waitStatus(r.base, 'tiny', 'loaded');
    const args = (await models(r.base)).tiny.status.args;
    assert.deepEqual(args.slice(args.indexOf('--ctx-size'), args.indexOf('--ctx-size') + 2), ['--ctx-size', '256']);
    const ok = await post(r.base, '/v1/completions', { model: 'tiny', prompt: 'Once', max_tokens: 2 });
    assert.equal(ok.status, 200, ok.text);
    assert.equal((await get(r.base, '/props')).json.models_autoload, false);
  });
});

describe('router over the download cache (-hf models)', () => {
  let r;
  const cache = path.join(dir, 'cache');
  before(async () => {
    // The layout okapi's -hf downloads leave (src/hub): hf/OWNER/REPO/FILE.
    const repo = path.join(cache, 'hf', 'ggml-org', 'test-model-stories260K');
    mkdirSync(repo, { recursive: true });
    copyFileSync(OKAPI_MODEL, path.join(repo, 'stories260K-F32.gguf'));
    r = await startRouter(['--models-max', '1', '-np', '1', '-c', '256'], { OKAPI_CACHE: cache });
  });
  after(async () => { await r?.stop(); });

  test('cached models are listed as owner/repo:QUANT and load on first use', async () => {
    const list = await models(r.base);
    const id = 'ggml-org/test-model-stories260K:F32';
    assert.deepEqual(Object.keys(list), [id]);
    assert.equal(list[id].source, 'cache');
    const res = await post(r.base, '/v1/completions', { model: id, prompt: 'Once', max_tokens: 2 });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.model, id);
    assert.equal((await models(r.base))[id].status.value, 'loaded');
  });
});
