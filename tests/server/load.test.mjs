// 16 concurrent streaming clients on 4 slots (the default queue of 64 holds the rest): every
// stream completes, no errors, the slots end idle, and /metrics counts the generated tokens.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { get, parsePrometheus, requestOnce, startServer, streamRequest, waitSlotsIdle, within } from './support.mjs';

const CLIENTS = 16;
const TOKENS = 32;
let server;

before(async () => {
  server = await startServer(['--metrics'], { ctx: 1024, slots: 4 });
});

after(async () => {
  await server?.stop();
});

async function metrics() {
  const res = await get(server.base, '/metrics');
  assert.equal(res.status, 200, res.text);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain/);
  const values = parsePrometheus(res.text);
  for (const name of values.keys()) assert.match(name, /^(okapi|llamacpp):/, `metric ${name} is prefixed okapi: or llamacpp:`);
  return values;
}

function generatedTokens(values) {
  const names = [...values.keys()].filter((n) => /okapi:.*(tokens_predicted|generated_tokens|predicted_tokens)/.test(n) &&
    !/seconds|per_second/.test(n));
  assert.ok(names.length > 0, `a generated-token counter among ${[...values.keys()].join(', ')}`);
  return values.get(names.find((n) => /total/.test(n)) ?? names[0]);
}

describe('load', () => {
  test(`${CLIENTS} concurrent streaming clients on 4 slots`, { timeout: 60_000 }, async () => {
    const before = generatedTokens(await metrics());
    const started = Date.now();
    const results = await Promise.all(Array.from({ length: CLIENTS }, (_, i) => {
      const chat = i % 4 !== 3;
      return chat
        ? streamRequest(server.base, '/v1/chat/completions', {
          messages: [{ role: 'user', content: `Tell story number ${i} about a ${['cat', 'dog', 'bird'][i % 3]}.` }],
          max_tokens: TOKENS, temperature: 0.8, seed: i, ignore_eos: i % 2 === 0,
          stream_options: { include_usage: true },
        })
        : streamRequest(server.base, '/v1/completions', {
          prompt: `Once upon a time, story ${i},`, max_tokens: TOKENS, temperature: 0.8, seed: i,
          stream_options: { include_usage: true },
        });
    }));
    const elapsed = Date.now() - started;
    let total = 0;
    results.forEach((r, i) => {
      const what = `client ${i}`;
      assert.equal(r.status, 200, `${what}: ${r.status} ${r.error}`);
      assert.match(r.contentType ?? '', /^text\/event-stream/, what);
      assert.equal(r.error, undefined, `${what}: ${JSON.stringify(r.error)}`);
      assert.ok(r.done, `${what} ended with [DONE]`);
      assert.equal(r.afterDone, 0, `${what}: nothing after [DONE]`);
      assert.ok(['stop', 'length'].includes(r.finish), `${what} finish_reason ${r.finish}`);
      assert.ok(r.usage, `${what} usage chunk`);
      assert.ok(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= TOKENS, what);
      if (i % 2 === 0 && i % 4 !== 3) {
        assert.equal(r.finish, 'length', what);
        assert.equal(r.usage.completion_tokens, TOKENS, what);
      }
      total += r.usage.completion_tokens;
    });
    assert.ok(elapsed < 60_000, `took ${elapsed} ms`);

    const slots = await waitSlotsIdle(server.base, { timeoutMs: 5000 });
    assert.equal(slots.length, 4);

    const m = await metrics();
    const grew = generatedTokens(m) - before;
    assert.ok(grew >= total, `generated-token counter grew by ${grew}, clients got ${total}`);
  });

  test('a second wave reuses the slots (no leak of busy slots or queue)', { timeout: 30_000 }, async () => {
    const results = await Promise.all(Array.from({ length: 8 }, (_, i) => streamRequest(
      server.base, '/v1/chat/completions', {
        messages: [{ role: 'user', content: `Wave two, story ${i}` }], max_tokens: 8, temperature: 0,
      })));
    for (const r of results) {
      assert.equal(r.status, 200);
      assert.ok(r.done);
      assert.ok(r.finish);
    }
    await waitSlotsIdle(server.base);
    const health = await get(server.base, '/health');
    assert.equal(health.status, 200);
  });
});

test('a full queue answers 503 with Retry-After; the rest complete', { timeout: 30_000 }, async () => {
  const small = await startServer(['--queue', '1'], { ctx: 512, slots: 1 });
  try {
    const body = { prompt: 'Once upon a time', max_tokens: 200, ignore_eos: true };
    // Connections of their own, closed after each answer (idle keep-alive connections are the next
    // test's matter).
    const results = await Promise.all(Array.from({ length: 6 }, () => requestOnce(small.base, 'POST', '/v1/completions', body)
      .then((r) => ({ status: r.status, retryAfter: r.headers['retry-after'], json: r.json }))));
    const ok = results.filter((r) => r.status === 200);
    const busy = results.filter((r) => r.status === 503);
    assert.equal(ok.length + busy.length, results.length, JSON.stringify(results.map((r) => r.status)));
    assert.ok(ok.length >= 2, 'the slot and the queue place served requests');
    assert.ok(busy.length >= 1, 'some requests found the queue full');
    for (const r of ok) assert.equal(r.json.usage.completion_tokens, 200);
    for (const r of busy) {
      assert.ok(r.retryAfter, 'Retry-After on 503');
      assert.equal(typeof r.json.error?.message, 'string');
    }
    await waitSlotsIdle(small.base);
  } finally {
    await small.stop();
  }
});

test('idle keep-alive connections do not hold up new requests', { timeout: 30_000 }, async () => {
  // -np 1 --queue 1: the fewest HTTP worker threads. Real clients (browsers, the openai client's
  // connection pool) keep connections open between requests.
  const small = await startServer(['--queue', '1'], { ctx: 512, slots: 1 });
  const sockets = [];
  try {
    const answered = [];
    for (let i = 0; i < 12; i++) {
      const socket = net.connect(small.port, '127.0.0.1');
      sockets.push(socket);
      socket.on('error', () => {});
      answered.push(new Promise((resolve) => {
        let seen = '';
        socket.on('data', (d) => { seen += d; if (seen.includes('"status"')) resolve(true); });
      }));
      socket.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n');
    }
    const n = (await within(Promise.all(answered), 2000)) ? 12 : 'not all 12';
    const started = Date.now();
    const res = await within(requestOnce(small.base, 'POST', '/v1/completions', { prompt: 'Once', max_tokens: 4 }), 5000);
    assert.ok(res, `a request beside 12 idle keep-alive connections (${n} of them answered) got no answer within 5 s`);
    assert.equal(res.status, 200);
    assert.ok(Date.now() - started < 5000);
  } finally {
    for (const s of sockets) s.destroy();
    await small.stop();
  }
});
