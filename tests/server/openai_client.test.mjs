// The official `openai` client (and @langchain/openai on top of it) against `okapi serve`.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { ChatOpenAI } from '@langchain/openai';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { startServer } from './support.mjs';

const API_KEY = 'sk-okapi-test-key';
const MODEL = 'stories';
const FILE_KEY = 'sk-okapi-key-from-file';
const keyDir = mkdtempSync(path.join(os.tmpdir(), 'okapi-keys-'));
let server;
let client;

before(async () => {
  const keyFile = path.join(keyDir, 'keys.txt');
  writeFileSync(keyFile, `${FILE_KEY}\n`);
  server = await startServer(['--api-key', API_KEY, '--api-key-file', keyFile, '--alias', MODEL]);
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 30_000 });
});

after(async () => {
  await server?.stop();
  rmSync(keyDir, { recursive: true, force: true });
});

const chat = (content) => [{ role: 'user', content }];

function checkTimings(t) {
  assert.ok(t, 'timings present');
  for (const key of ['prompt_n', 'prompt_ms', 'prompt_per_second', 'predicted_n', 'predicted_ms',
    'predicted_per_second', 'cache_n']) {
    assert.equal(typeof t[key], 'number', `timings.${key} is a number`);
  }
}

function checkUsage(u, completionTokens) {
  assert.ok(u, 'usage present');
  assert.ok(u.prompt_tokens > 0);
  if (completionTokens !== undefined) assert.equal(u.completion_tokens, completionTokens);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.equal(typeof u.prompt_tokens_details?.cached_tokens, 'number');
}

describe('openai client', () => {
  test('models.list() names the alias', async () => {
    const page = await client.models.list();
    const ids = page.data.map((m) => m.id);
    assert.deepEqual(ids, [MODEL]);
    assert.equal(page.data[0].object, 'model');
  });

  test('chat completion, non-streaming', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, messages: chat('Tell me a story about a cat.'), max_tokens: 16, temperature: 0, seed: 1,
    });
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /\S/);
    assert.equal(r.choices.length, 1);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.ok(r.choices[0].message.content.length > 0, 'some text');
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    checkUsage(r.usage);
    assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 16);
    checkTimings(r.timings);
    assert.equal(r.timings.predicted_n, r.usage.completion_tokens);
  });

  test('chat completion, streaming with include_usage', async () => {
    const stream = await client.chat.completions.create({
      model: MODEL, messages: chat('Once upon a time'), max_tokens: 24, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish = null;
    let usage = null;
    let timings = null;
    const roles = [];
    let n = 0;
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      if (n++ === 0) assert.equal(chunk.choices[0]?.delta?.role, 'assistant', 'first delta has the role');
      for (const c of chunk.choices) {
        if (c.delta.role) roles.push(c.delta.role);
        text += c.delta.content ?? '';
        if (c.finish_reason) finish = c.finish_reason;
      }
      if (chunk.usage) {
        assert.deepEqual(chunk.choices, [], 'the usage chunk has no choices');
        usage = chunk.usage;
      }
      if (chunk.timings) timings = chunk.timings;
    }
    assert.deepEqual(roles, ['assistant']);
    assert.ok(text.length > 0);
    assert.ok(['stop', 'length'].includes(finish));
    checkUsage(usage);
    checkTimings(timings);

    // The same request without streaming gives the same text (temperature 0).
    const whole = await client.chat.completions.create({
      model: MODEL, messages: chat('Once upon a time'), max_tokens: 24, temperature: 0,
    });
    assert.equal(whole.choices[0].message.content, text);
    assert.equal(whole.usage.completion_tokens, usage.completion_tokens);
  });

  test('completions, non-streaming and streaming', async () => {
    const r = await client.completions.create({
      model: MODEL, prompt: 'Once upon a time, there was a little', max_tokens: 12, temperature: 0,
    });
    assert.equal(r.object, 'text_completion');
    assert.equal(r.choices.length, 1);
    assert.ok(r.choices[0].text.length > 0);
    assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    checkUsage(r.usage);
    checkTimings(r.timings);

    const stream = await client.completions.create({
      model: MODEL, prompt: 'Once upon a time, there was a little', max_tokens: 12, temperature: 0, stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        text += c.text ?? '';
        if (c.finish_reason) finish = c.finish_reason;
      }
      if (chunk.usage) usage = chunk.usage;
    }
    assert.equal(text, r.choices[0].text, 'streamed text equals the non-streamed one');
    assert.equal(finish, r.choices[0].finish_reason);
    checkUsage(usage, r.usage.completion_tokens);
  });

  test('max_tokens ends with finish_reason "length" and that many tokens', async () => {
    const r = await client.completions.create({
      model: MODEL, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, ignore_eos: true,
    });
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 5);
    const c = await client.chat.completions.create({
      model: MODEL, messages: chat('Hi'), max_completion_tokens: 3, temperature: 0, ignore_eos: true,
    });
    assert.equal(c.choices[0].finish_reason, 'length');
    assert.equal(c.usage.completion_tokens, 3);
  });

  test('stop strings end the text before the stop string', async () => {
    const prompt = 'Once upon a time, there was a little girl named Lily.';
    const base = await client.completions.create({
      model: MODEL, prompt, max_tokens: 40, temperature: 0, ignore_eos: true,
    });
    const text = base.choices[0].text;
    // Pick a stop string from the middle of the greedy continuation.
    const words = text.split(/\s+/).filter((w) => /^[a-z]{3,}$/.test(w));
    assert.ok(words.length > 0, `a word to stop at in ${JSON.stringify(text)}`);
    const stop = ` ${words[Math.min(2, words.length - 1)]}`;
    const cut = text.indexOf(stop);
    assert.ok(cut >= 0);
    const r = await client.completions.create({
      model: MODEL, prompt, max_tokens: 40, temperature: 0, ignore_eos: true, stop: [stop, 'zzzzqqq'],
    });
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.choices[0].text, text.slice(0, cut));

    const stream = await client.completions.create({
      model: MODEL, prompt, max_tokens: 40, temperature: 0, ignore_eos: true, stop, stream: true,
    });
    let streamed = '';
    let finish = null;
    for await (const chunk of stream) {
      for (const c of chunk.choices) {
        streamed += c.text ?? '';
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert.equal(streamed, text.slice(0, cut), 'streaming holds back a partial stop string');
    assert.equal(finish, 'stop');
  });

  test('chat logprobs', async () => {
    const r = await client.chat.completions.create({
      model: MODEL, messages: chat('Hello'), max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3,
      ignore_eos: true,
    });
    const content = r.choices[0].logprobs?.content;
    assert.ok(Array.isArray(content), 'logprobs.content is an array');
    assert.equal(content.length, r.usage.completion_tokens);
    for (const t of content) {
      assert.equal(typeof t.token, 'string');
      assert.ok(t.logprob <= 0);
      assert.ok(Array.isArray(t.bytes));
      assert.equal(t.top_logprobs.length, 3);
      // temperature 0: the chosen token is the most likely one.
      assert.ok(t.top_logprobs[0].logprob >= t.top_logprobs[1].logprob);
      assert.ok(Math.abs(t.top_logprobs[0].logprob - t.logprob) < 1e-4);
    }
    assert.equal(content.map((t) => t.token).join(''), r.choices[0].message.content);

    const c = await client.completions.create({
      model: MODEL, prompt: 'The dog', max_tokens: 4, temperature: 0, logprobs: 2, ignore_eos: true,
    });
    const lp = c.choices[0].logprobs;
    assert.equal(lp.tokens.length, 4);
    assert.equal(lp.token_logprobs.length, 4);
    assert.equal(lp.top_logprobs.length, 4);
    assert.equal(Object.keys(lp.top_logprobs[0]).length <= 2, true);
  });

  test('a wrong API key throws AuthenticationError (401)', async () => {
    const bad = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'sk-wrong', maxRetries: 0 });
    await assert.rejects(
      bad.chat.completions.create({ model: MODEL, messages: chat('Hi'), max_tokens: 2 }),
      (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
    await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
    // No key at all.
    const res = await fetch(`${server.base}/v1/models`);
    assert.equal(res.status, 401);
    assert.equal(typeof (await res.json()).error?.message, 'string');
    // A key from --api-key-file works too.
    const fromFile = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: FILE_KEY, maxRetries: 0 });
    assert.equal((await fromFile.models.list()).data[0].id, MODEL);
    // /health needs no key.
    assert.equal((await fetch(`${server.base}/health`)).status, 200);
  });

  test('a bad request surfaces as BadRequestError', async () => {
    await assert.rejects(
      client.chat.completions.create({ model: MODEL, messages: chat('Hi'), temperature: -1 }),
      (e) => e instanceof OpenAI.BadRequestError && e.status === 400 && e.param === 'temperature');
  });

  test('seeded sampling is deterministic alone and under concurrent load', async () => {
    const request = {
      model: MODEL, messages: chat('Tell me about a big red ball.'), max_tokens: 32, seed: 42, temperature: 0,
    };
    const first = (await client.chat.completions.create(request)).choices[0].message.content;
    const again = (await client.chat.completions.create(request)).choices[0].message.content;
    assert.equal(again, first);

    // Seeded sampling at temperature > 0 repeats too.
    const hot = { ...request, temperature: 0.9, top_k: 40 };
    const hot1 = (await client.chat.completions.create(hot)).choices[0].message.content;
    const hot2 = (await client.chat.completions.create(hot)).choices[0].message.content;
    assert.equal(hot2, hot1);

    // Same requests while 6 other streams run (batched with them in the same forward passes): they
    // are sent once each of the others has streamed its first token.
    const started = [];
    const others = Array.from({ length: 6 }, (_, i) => {
      let onFirst;
      started.push(new Promise((resolve) => { onFirst = resolve; }));
      return (async () => {
        const stream = await client.chat.completions.create({
          model: MODEL, messages: chat(`Story number ${i} about a dog`), max_tokens: 160, temperature: 1, seed: i,
          stream: true, ignore_eos: true,
        });
        let text = '';
        for await (const chunk of stream) {
          text += chunk.choices[0]?.delta?.content ?? '';
          if (text) onFirst();
        }
        onFirst();
        return text;
      })();
    });
    await Promise.race([Promise.all(started), Promise.all(others)]);
    const [busy, busyHot] = await Promise.all([
      client.chat.completions.create(request).then((r) => r.choices[0].message.content),
      client.chat.completions.create(hot).then((r) => r.choices[0].message.content),
    ]);
    const otherTexts = await Promise.all(others);
    assert.equal(busy, first, 'temperature 0 text unchanged under load');
    assert.equal(busyHot, hot1, 'seeded text unchanged under load');
    for (const t of otherTexts) assert.ok(t.length > 0);
  });

  test('@langchain/openai ChatOpenAI invoke and stream', async () => {
    const llm = new ChatOpenAI({
      model: MODEL, apiKey: API_KEY, temperature: 0, maxTokens: 12, maxRetries: 0,
      configuration: { baseURL: `${server.base}/v1` },
    });
    const msg = await llm.invoke([['human', 'Tell me a story.']]);
    assert.equal(typeof msg.content, 'string');
    assert.ok(msg.content.length > 0);
    let streamed = '';
    for await (const chunk of await llm.stream([['human', 'Tell me a story.']])) streamed += chunk.content;
    assert.equal(streamed, msg.content);
  });
});
