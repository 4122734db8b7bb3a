// Malformed and hostile requests, sent with raw fetch and node:net: the server answers each with
// OpenAI's error shape and the right status, and keeps serving.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { errorOf, get, post, sleep, startServer, streamRequest, waitSlotsIdle } from './support.mjs';

let server;
let base;

before(async () => {
  server = await startServer([], { ctx: 1024, slots: 4 });  // 256 cells a slot
  base = server.base;
});

after(async () => {
  await server?.stop();
});

const CHAT = '/v1/chat/completions';
const hello = { messages: [{ role: 'user', content: 'Hello' }], max_tokens: 4 };

// Sends raw bytes over a socket and returns the whole response as a string (the server closes it).
function rawRequest(bytes, { timeoutMs = 10_000 } = {}) {
  return new Promise((resolve, reject) => {
    const socket = net.connect(server.port, '127.0.0.1');
    const parts = [];
    const timer = setTimeout(() => { socket.destroy(); reject(new Error('raw request timed out')); }, timeoutMs);
    // write, not end: Debian's cpp-httplib 0.11 answers nothing to a client that half-closes its side
    // before the answer (a timing race the release build usually wins); HTTP clients keep it open.
    socket.on('connect', () => socket.write(bytes));
    socket.on('data', (d) => parts.push(d));
    socket.on('error', (e) => { clearTimeout(timer); reject(e); });
    socket.on('close', () => { clearTimeout(timer); resolve(Buffer.concat(parts).toString('latin1')); });
  });
}

function httpPost(route, body, extraHeaders = '') {
  const head = `POST ${route} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${body.length}\r\nConnection: close\r\n${extraHeaders}\r\n`;
  return Buffer.concat([Buffer.from(head, 'latin1'), body]);
}

function statusOf(raw) {
  const m = /^HTTP\/1\.[01] (\d{3})/.exec(raw);
  assert.ok(m, `an HTTP status line in ${JSON.stringify(raw.slice(0, 200))}`);
  return Number(m[1]);
}

function jsonBodyOf(raw) {
  const cut = raw.indexOf('\r\n\r\n');
  return JSON.parse(Buffer.from(raw.slice(cut + 4), 'latin1').toString('utf8'));
}

describe('malformed requests', () => {
  test('invalid JSON -> 400 with an error object', async () => {
    for (const body of ['{', '{"messages": [}', 'not json', '', '[1, 2]', '"a string"', 'null']) {
      const res = await post(base, CHAT, body);
      assert.equal(res.status, 400, `body ${JSON.stringify(body)}: ${res.text}`);
      const e = errorOf(res);
      assert.equal(e.type, 'invalid_request_error');
    }
    const c = await post(base, '/v1/completions', '{"prompt": "a",');
    assert.equal(c.status, 400);
    errorOf(c);
  });

  test('invalid UTF-8 in the body -> 400', async () => {
    // {"messages":[{"role":"user","content":"<ff fe c3 28>"}]}
    const bad = Buffer.concat([
      Buffer.from('{"messages":[{"role":"user","content":"abc'), Buffer.from([0xff, 0xfe, 0xc3, 0x28]),
      Buffer.from('"}],"max_tokens":2}'),
    ]);
    const raw = await rawRequest(httpPost(CHAT, bad));
    assert.equal(statusOf(raw), 400, raw);
    assert.equal(typeof jsonBodyOf(raw).error.message, 'string');
    // An overlong encoding and a lone surrogate in a prompt, too.
    for (const bytes of [[0xc0, 0xaf], [0xed, 0xa0, 0x80]]) {
      const body = Buffer.concat([Buffer.from('{"prompt":"x'), Buffer.from(bytes), Buffer.from('","max_tokens":2}')]);
      const r = await rawRequest(httpPost('/v1/completions', body));
      assert.equal(statusOf(r), 400, r);
    }
  });

  test('wrong types -> 400 naming the param', async () => {
    const cases = [
      [{ messages: 'hello' }, 'messages'],
      [{ messages: {} }, 'messages'],
      [{ ...hello, max_tokens: 'x' }, 'max_tokens'],
      [{ ...hello, max_tokens: 0 }, 'max_tokens'],
      [{ ...hello, max_tokens: 1.5 }, 'max_tokens'],
      [{ ...hello, temperature: -1 }, 'temperature'],
      [{ ...hello, temperature: '0.5' }, 'temperature'],
      [{ ...hello, top_p: 2 }, 'top_p'],
      [{ ...hello, stream: 'yes' }, 'stream'],
      [{ ...hello, stop: 5 }, 'stop'],
      [{ ...hello, seed: 'abc' }, 'seed'],
      [{ ...hello, n: 0 }, 'n'],
      [{ ...hello, n: 129 }, 'n'],
    ];
    for (const [body, param] of cases) {
      const res = await post(base, CHAT, body);
      assert.equal(res.status, 400, `${JSON.stringify(body)}: ${res.status} ${res.text}`);
      const e = errorOf(res);
      assert.equal(e.param, param, `${JSON.stringify(body)}: ${res.text}`);
      assert.equal(e.type, 'invalid_request_error');
    }
    const noMessages = await post(base, CHAT, { max_tokens: 2 });
    assert.equal(noMessages.status, 400);
    assert.equal(errorOf(noMessages).param, 'messages');
    const badPrompt = await post(base, '/v1/completions', { prompt: 42, max_tokens: 2 });
    assert.equal(badPrompt.status, 400, badPrompt.text);
    assert.equal(errorOf(badPrompt).param, 'prompt');
  });

  test('n beyond 128 -> 400', async () => {
    const res = await post(base, '/v1/completions', { prompt: 'a', n: 129, max_tokens: 2 });
    assert.equal(res.status, 400);
    assert.equal(errorOf(res).param, 'n');
  });

  test('unknown fields are ignored', async () => {
    const res = await post(base, CHAT, {
      ...hello, frobnicate: true, metadata: { a: 1 }, response_format: { type: 'text' }, tool_choice: 'none',
      messages: [{ role: 'user', content: 'Hello', name: 'me', extra: [1, 2] }],
    });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.object, 'chat.completion');
    const comp = await post(base, '/v1/completions', { prompt: 'Once', max_tokens: 2, whatever: null, echo: false });
    assert.equal(comp.status, 200, comp.text);
  });

  test('a body over 8 MiB -> 413', async () => {
    const big = JSON.stringify({ prompt: 'a'.repeat(8 * 1024 * 1024 + 100), max_tokens: 1 });
    let res;
    try {
      res = await post(base, '/v1/completions', big);
    } catch (e) {
      // The server may answer 413 and close before reading the whole body; fetch can then fail
      // with a socket error. Fall back to a raw socket that reads the answer.
      res = null;
    }
    if (res) {
      assert.equal(res.status, 413, res.text.slice(0, 500));
    } else {
      const raw = await rawRequest(httpPost('/v1/completions', Buffer.from(big)));
      assert.equal(statusOf(raw), 413);
    }
    // Still serving.
    assert.equal((await post(base, CHAT, hello)).status, 200);
  });

  test('a prompt over the context -> 400 context_length_exceeded', async () => {
    const long = 'Once upon a time there was a little dog. '.repeat(200);  // far more than 256 tokens
    for (const [route, body] of [
      ['/v1/completions', { prompt: long, max_tokens: 4 }],
      [CHAT, { messages: [{ role: 'user', content: long }], max_tokens: 4 }],
      [CHAT, { messages: [{ role: 'user', content: long }], max_tokens: 4, stream: true }],
    ]) {
      const res = await post(base, route, body);
      assert.equal(res.status, 400, `${route}: ${res.status} ${res.text.slice(0, 300)}`);
      assert.equal(errorOf(res).code, 'context_length_exceeded');
    }
  });

  test('unknown routes -> 404, wrong methods are refused', async () => {
    for (const route of ['/nope', '/v1/nope', '/v1/chat/completion', '/v2/models']) {
      const res = await get(base, route);
      assert.equal(res.status, 404, `${route}: ${res.status}`);
      errorOf(res);
    }
    const res = await post(base, '/v1/engines', {});
    assert.equal(res.status, 404);
    const wrongMethod = await get(base, CHAT);
    assert.ok([404, 405].includes(wrongMethod.status), `GET ${CHAT}: ${wrongMethod.status}`);
  });

  test('a client closing its socket mid-stream does not hurt the server', async () => {
    const body = JSON.stringify({
      messages: [{ role: 'user', content: 'Tell me a long story.' }], max_tokens: 200, stream: true, ignore_eos: true,
    });
    // 1) node:net: read the first bytes of the stream, then destroy the socket.
    const got = await new Promise((resolve, reject) => {
      const socket = net.connect(server.port, '127.0.0.1');
      let seen = '';
      socket.on('connect', () => socket.write(httpPost(CHAT, Buffer.from(body))));
      socket.on('data', (d) => {
        seen += d.toString('latin1');
        if (seen.includes('data: ')) { socket.destroy(); resolve(seen); }
      });
      socket.on('error', reject);
      setTimeout(() => { socket.destroy(); reject(new Error('no stream data')); }, 10_000);
    });
    assert.equal(statusOf(got), 200);
    // 2) fetch + AbortController after the first chunk.
    const controller = new AbortController();
    const res = await fetch(base + CHAT, {
      method: 'POST', body, signal: controller.signal, headers: { 'Content-Type': 'application/json' },
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    await reader.read();
    controller.abort();
    // 3) several at once, each cut at a different point.
    await Promise.all(Array.from({ length: 4 }, async (_, i) => {
      const c = new AbortController();
      const r = await fetch(base + CHAT, {
        method: 'POST', body, signal: c.signal, headers: { 'Content-Type': 'application/json' },
      });
      const rd = r.body.getReader();
      for (let k = 0; k <= i * 3; k++) await rd.read();
      c.abort();
    }));

    const slots = await waitSlotsIdle(base, { timeoutMs: 5000 });
    for (const s of slots) {
      assert.equal(s.is_processing, false);
      assert.equal(typeof s.id, 'number');
      assert.equal(typeof s.n_ctx, 'number');
    }
    // Still serving, and a full stream still completes.
    const after = await streamRequest(base, CHAT, { ...hello, max_tokens: 8 });
    assert.equal(after.status, 200);
    assert.ok(after.done);
    assert.ok(after.finish);
  });

  test('garbage on the socket and a truncated body do not take the server down', async () => {
    const raw = await rawRequest(Buffer.from('GARBAGE \x00\x01\x02 nonsense\r\n\r\n', 'latin1'));
    if (raw) assert.ok(statusOf(raw) >= 400);
    // Content-Length larger than what is sent, then close.
    await new Promise((resolve) => {
      const socket = net.connect(server.port, '127.0.0.1', () => {
        socket.end('POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"prompt":');
      });
      socket.on('close', resolve);
      socket.on('error', resolve);
      socket.resume();
    });
    await sleep(100);
    const health = await get(base, '/health');
    assert.equal(health.status, 200);
    assert.equal(health.json.status, 'ok');
  });
});
