// llama-server's native completion API on okapi serve, with fetch: /completion's final object and
// stream chunks, several prompts, token-id prompts, n_probs (before and after sampling),
// logit_bias, ignore_eos, response_fields, -n, the context limit (stopping and --context-shift),
// /metrics' llamacpp: series, /infill without FIM tokens, Vertex AI's /predict; and side by side
// with ../shared/peers/llama-server on the same model (greedy text, token counts, shapes).
// Under OKAPI_SANITIZED=1 the llama-server comparisons are left out.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { OKAPI_MODEL, cpuLacksForPeers, freePort, get, post, repoRoot, sleep, sseData, startServer } from './support.mjs';

const SHARED = path.resolve(repoRoot, process.env.OKAPI_SHARED || path.join('..', 'shared'));
const LLAMA_SERVER = path.join(SHARED, 'peers', 'llama-server');
const SANITIZED = !!process.env.OKAPI_SANITIZED && process.env.OKAPI_SANITIZED !== '0';
const required = !!process.env.OKAPI_REQUIRE_GOLDEN && process.env.OKAPI_REQUIRE_GOLDEN !== '0';
if (!SANITIZED && required && !existsSync(LLAMA_SERVER)) throw new Error(`OKAPI_REQUIRE_GOLDEN: absent: ${LLAMA_SERVER}`);
const peersSkip = SANITIZED ? 'OKAPI_SANITIZED: the llama-server comparisons are left out'
  : !existsSync(LLAMA_SERVER) ? `absent: ${LLAMA_SERVER}`
  : cpuLacksForPeers() ? `the peers are built for AVX-512; this CPU lacks ${cpuLacksForPeers()}` : false;

const PROMPT = 'I believe the meaning of life is';
// The server the way llama.cpp's tests start theirs: -c 512 over 2 slots, -n 64, batches of 32.
const ARGS = ['--temp', '0', '-s', '42', '-b', '32', '-n', '64', '--metrics', '--alias', 'native-test'];
let server;
let shifting;

before(async () => {
  server = await startServer(ARGS, { ctx: 512, slots: 2 });
  shifting = await startServer([...ARGS, '--context-shift'], { ctx: 256, slots: 1 });
});
after(async () => {
  await server?.stop();
  await shifting?.stop();
});

async function stream(base, body) {
  const res = await fetch(`${base}/completion`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(res.status, 200);
  const chunks = [];
  for await (const data of sseData(res)) chunks.push(JSON.parse(data));
  return chunks;
}

describe('/completion', () => {
  test('the final object: content, counts, timings, settings', async () => {
    const { status, json } = await post(server.base, '/completion', { prompt: PROMPT, n_predict: 8, return_tokens: true });
    assert.equal(status, 200);
    assert.equal(typeof json.content, 'string');
    assert.equal(json.stop, true);
    assert.equal(json.stop_type, 'limit');
    assert.equal(json.tokens.length, 8);
    assert.equal(json.tokens_predicted, 8);
    assert.equal(json.timings.predicted_n, 8);
    assert.equal(json.tokens_evaluated, json.timings.prompt_n + json.timings.cache_n);
    assert.equal(json.model, 'native-test');
    assert.equal(json.generation_settings.n_predict, 8);
    assert.equal(json.generation_settings.seed, 42);
    assert.equal(json.truncated, false);
    assert.ok(json.prompt.endsWith(PROMPT));
    // -n is the default limit.
    assert.equal((await post(server.base, '/completion', { prompt: PROMPT, ignore_eos: true })).json.tokens_predicted, 64);
  });

  test('streamed chunks add up to the same text; the last one is the final object', async () => {
    const whole = (await post(server.base, '/completion', { prompt: PROMPT, n_predict: 12 })).json;
    const chunks = await stream(server.base, { prompt: PROMPT, n_predict: 12 });
    const last = chunks.at(-1);
    assert.equal(last.stop, true);
    assert.equal(last.timings.predicted_n, 12);
    for (const c of chunks.slice(0, -1)) {
      assert.equal(c.stop, false);
      assert.ok(c.tokens.length > 0);
    }
    assert.equal(chunks.map((c) => c.content).join(''), whole.content);
  });

  test('prompts of ids, of ids and text, and several at once', async () => {
    const tokens = (await post(server.base, '/tokenize', { content: PROMPT, add_special: true })).json.tokens;
    const byText = (await post(server.base, '/completion', { prompt: PROMPT, n_predict: 6 })).json;
    const byIds = (await post(server.base, '/completion', { prompt: tokens, n_predict: 6 })).json;
    assert.equal(byIds.content, byText.content);
    const several = (await post(server.base, '/completion', { prompt: [tokens, PROMPT], n_predict: 6 })).json;
    assert.ok(Array.isArray(several));
    assert.deepEqual(several.map((r) => r.index), [0, 1]);
    assert.equal(several[0].content, several[1].content);
    const mixed = await post(server.base, '/completion', { prompt: [1, 2, 3, PROMPT, 4], n_predict: 2 });
    assert.equal(mixed.status, 200);
    assert.equal(mixed.json.tokens_evaluated, 4 + tokens.length - 1);
  });

  test('n_probs, before and after sampling', async () => {
    const pre = (await post(server.base, '/completion', { prompt: PROMPT, n_predict: 3, n_probs: 5 })).json;
    assert.equal(pre.completion_probabilities.length, 3);
    for (const t of pre.completion_probabilities) {
      assert.equal(t.top_logprobs.length, 5);
      assert.ok(t.logprob <= 0);
      assert.equal(t.top_logprobs[0].id, t.id);  // greedy: the chosen token is the most likely
    }
    const post_ = (await post(server.base, '/completion', {
      prompt: PROMPT, n_predict: 3, n_probs: 5, post_sampling_probs: true, temperature: 1,
    })).json;
    for (const t of post_.completion_probabilities) {
      assert.ok(t.prob > 0 && t.prob <= 1);
      for (const p of t.top_probs) assert.ok(p.prob > 0 && p.prob <= 1);
    }
  });

  test('logit_bias bans what the greedy text had; ignore_eos reports its bans', async () => {
    const free = (await post(server.base, '/completion', { prompt: PROMPT, n_predict: 8, return_tokens: true })).json;
    const banned = (await post(server.base, '/completion', {
      prompt: PROMPT, n_predict: 8, return_tokens: true, logit_bias: Object.fromEntries(free.tokens.map((t) => [t, false])),
    })).json;
    for (const t of banned.tokens) assert.ok(!free.tokens.includes(t));
    const eos = (await post(server.base, '/completion', { prompt: PROMPT, n_predict: 4, ignore_eos: true })).json;
    assert.ok(eos.generation_settings.logit_bias.length > 0);
    for (const b of eos.generation_settings.logit_bias) assert.equal(b.bias, null);
  });

  test('response_fields picks and unnests', async () => {
    const { json } = await post(server.base, '/completion', {
      prompt: PROMPT, n_predict: 4, response_fields: ['content', 'generation_settings/n_predict'],
    });
    assert.deepEqual(Object.keys(json).sort(), ['content', 'generation_settings/n_predict']);
    assert.equal(json['generation_settings/n_predict'], 4);
  });

  test('the context: too long a prompt is refused; generation stops one short of the end, or shifts', async () => {
    const long = await post(server.base, '/completion', { prompt: `${PROMPT} `.repeat(40) });
    assert.equal(long.status, 400);
    assert.match(long.json.error.message, /exceeds the available context size/);
    const full = (await post(server.base, '/completion', { prompt: 'Hi how are you', n_predict: 1000, ignore_eos: true })).json;
    assert.equal(full.truncated, true);
    assert.equal(full.tokens_evaluated + full.timings.predicted_n, 256);
    const shifted = (await post(shifting.base, '/completion', { prompt: 'Hi how are you', n_predict: 300, ignore_eos: true })).json;
    assert.equal(shifted.timings.predicted_n, 300);
    assert.equal(shifted.truncated, true);
  });

  test('bad requests are 4xx', async () => {
    for (const body of [{}, { prompt: [999999] }, { prompt: { x: 1 } }, { prompt: PROMPT, n_probs: -2 },
      { prompt: PROMPT, id_slot: 5 }, { prompt: PROMPT, logit_bias: 'x' }]) {
      const { status } = await post(server.base, '/completion', body);
      assert.equal(status, 400, JSON.stringify(body));
    }
    assert.equal((await post(server.base, '/infill', { input_prefix: 'a', input_suffix: 'b' })).status, 501);
  });
});

describe('/metrics', () => {
  test("llama-server's series and the start time", async () => {
    const { status, text, headers } = await get(server.base, '/metrics');
    assert.equal(status, 200);
    assert.match(headers.get('process-start-time-unix'), /^\d+$/);
    for (const name of ['prompt_tokens_total', 'tokens_predicted_total', 'n_decode_total', 'n_tokens_max',
      'requests_processing', 'n_busy_slots_per_decode'])
      assert.match(text, new RegExp(`^# TYPE llamacpp:${name} `, 'm'));
    assert.match(text, /^okapi:tokens_predicted_total /m);
  });
});

describe('Vertex AI /predict', () => {
  test('instances go to their routes by camelCase name', async () => {
    const vertex = await startServer(['--temp', '0'], { ctx: 256, slots: 1, env: { AIP_MODE: 'PREDICTION' } });
    try {
      const { status, json } = await post(vertex.base, '/predict', { instances: [
        { '@requestFormat': 'chatCompletions', max_tokens: 4, messages: [{ role: 'user', content: 'Hi' }] },
        { '@requestFormat': 'completion', prompt: PROMPT, n_predict: 4, stream: true },
        { '@requestFormat': 'nothing' },
      ] });
      assert.equal(status, 200);
      assert.equal(json.predictions[0].choices[0].message.role, 'assistant');
      assert.equal(json.predictions[1].tokens_predicted, 4);
      assert.ok(json.predictions[2].error);
    } finally {
      await vertex.stop();
    }
  });
});

describe('side by side with llama-server', { skip: peersSkip }, () => {
  let peer;
  let child;
  let ours;  // okapi with the same flags: one slot of 256 cells (llama-server's smallest context)
  before(async () => {
    ours = await startServer(ARGS, { ctx: 256, slots: 1 });
    const port = await freePort();
    child = spawn(LLAMA_SERVER, ['-m', OKAPI_MODEL, '--host', '127.0.0.1', '--port', String(port), '-t', '2',
      '-np', '1', '-c', '256', '-b', '32', '--temp', '0', '-s', '42', '-n', '64', '--no-webui', '-fa', 'off'],
    { stdio: ['ignore', 'ignore', 'pipe'] });
    let log = '';
    child.stderr.on('data', (d) => { log += d; });
    peer = `http://127.0.0.1:${port}`;
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`llama-server exited ${child.exitCode}:\n${log.slice(-3000)}`);
      try {
        if ((await fetch(`${peer}/health`)).status === 200) break;
      } catch { /* not listening yet */ }
      if (Date.now() > deadline) throw new Error(`llama-server not ready:\n${log.slice(-3000)}`);
      await sleep(100);
    }
  });
  after(async () => {
    child?.kill('SIGKILL');
    await ours?.stop();
  });

  test('the same greedy text, counts and keys', async () => {
    const body = { prompt: PROMPT, n_predict: 16, cache_prompt: false, n_probs: 3 };
    const mine = (await post(ours.base, '/completion', body)).json;
    const theirs = (await post(peer, '/completion', body)).json;
    assert.equal(mine.content, theirs.content);
    assert.equal(mine.tokens_evaluated, theirs.tokens_evaluated);
    assert.equal(mine.timings.prompt_n, theirs.timings.prompt_n);
    assert.equal(mine.stop_type, theirs.stop_type);
    assert.deepEqual(mine.completion_probabilities.map((t) => t.id), theirs.completion_probabilities.map((t) => t.id));
    assert.deepEqual(mine.completion_probabilities.map((t) => t.top_logprobs.map((p) => p.id)),
      theirs.completion_probabilities.map((t) => t.top_logprobs.map((p) => p.id)));
    for (const key of Object.keys(theirs)) assert.ok(key in mine, `missing ${key}`);
    for (const key of Object.keys(theirs.timings)) assert.ok(key in mine.timings, `timings.${key}`);
  });

  test('the context limit: the same number of tokens before truncation', async () => {
    // A long prompt: few tokens to generate before the end (llama-server is slow to get there).
    const body = { prompt: `${PROMPT} `.repeat(12), n_predict: 1000, ignore_eos: true, cache_prompt: false };
    const mine = (await post(ours.base, '/completion', body)).json;
    const theirs = (await post(peer, '/completion', body)).json;
    assert.equal(mine.timings.predicted_n, theirs.timings.predicted_n);
    assert.equal(mine.truncated, theirs.truncated);
    assert.equal(mine.truncated, true);
  });
});
