// SIGTERM: requests in flight (streaming, and queued behind a busy slot) finish, new ones are
// refused, the process exits 0; an idle keep-alive connection does not hold the exit up.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import net from 'node:net';
import { dropFetchConnections, post, sleep, within, sseData, startServer, streamRequest } from './support.mjs';

test('SIGTERM drains the requests in flight and exits 0', { timeout: 30_000 }, async () => {
  const server = await startServer([], { ctx: 512, slots: 1 });
  try {
    const body = {
      messages: [{ role: 'user', content: 'Tell me a long story.' }], max_tokens: 400, ignore_eos: true, temperature: 0,
    };
    // The first stream: read up to its first chunk, then SIGTERM.
    const res = await fetch(`${server.base}/v1/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }),
    });
    assert.equal(res.status, 200);
    const events = sseData(res);
    const first = await events.next();
    // Two more, queued behind the one slot.
    const queued = [streamRequest(server.base, '/v1/chat/completions', body),
      streamRequest(server.base, '/v1/completions', { prompt: 'Once upon a time', max_tokens: 300, ignore_eos: true })];
    await sleep(20);
    server.signal('SIGTERM');
    for (let i = 0; i < 100 && !server.stderr().includes('stopping'); i++) await sleep(10);
    assert.match(server.stderr(), /stopping/);
    // A new request is refused (503 with Retry-After, or the socket is closed already).
    try {
      const late = await fetch(`${server.base}/v1/completions`, {
        method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ prompt: 'Hi', max_tokens: 2 }),
      });
      assert.equal(late.status, 503, `a request after SIGTERM: ${late.status}`);
      assert.ok(late.headers.get('retry-after'), 'Retry-After on 503');
      await late.text();
    } catch (e) {
      if (!(e instanceof TypeError)) throw e;  // fetch failed: connection refused, fine
    }
    let n = 1;
    let done = false;
    let finish = null;
    for (let e = first; !e.done; e = await events.next()) {
      if (e.value === '[DONE]') { done = true; continue; }
      const chunk = JSON.parse(e.value);
      n++;
      finish = chunk.choices?.[0]?.finish_reason ?? finish;
    }
    assert.ok(done, 'the stream in flight ended with [DONE]');
    assert.equal(finish, 'length');
    for (const r of await Promise.all(queued)) {
      assert.equal(r.status, 200, `queued request: ${r.status} ${r.error}`);
      assert.ok(r.done, 'a queued stream ended with [DONE]');
      assert.equal(r.finish, 'length');
    }
    await dropFetchConnections();  // idle keep-alive connections are the next test's matter
    const exit = await within(server.exited, 10_000);
    assert.ok(exit, 'exited within 10 s of SIGTERM');
    assert.equal(exit.code, 0, `exit ${JSON.stringify(exit)}\n${server.stderr()}`);
  } finally {
    server.signal('SIGKILL');
  }
});

test('an idle keep-alive connection does not hold up SIGTERM', { timeout: 30_000 }, async () => {
  const server = await startServer([], { ctx: 512, slots: 1 });
  const socket = net.connect(server.port, '127.0.0.1');
  try {
    // One request on a keep-alive connection, answered; the client keeps the socket open.
    await new Promise((resolve, reject) => {
      let seen = '';
      socket.on('error', reject);
      socket.on('data', (d) => { seen += d; if (seen.includes('"status"')) resolve(); });
      socket.write('GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n');
    });
    const started = Date.now();
    await server.stop(5000, { keepClientConnections: true });
    assert.ok(Date.now() - started < 5000);
  } finally {
    socket.destroy();
    server.signal('SIGKILL');
  }
});

// --drain-delay: after SIGTERM /health says 503 at once (a balancer takes the server out) while
// requests are still served for the delay; then the usual drain; a second signal cuts it short.
test('--drain-delay: /health 503 at once, requests still served until the delay ends', { timeout: 30_000 }, async () => {
  const server = await startServer(['--drain-delay', '2'], { ctx: 512, slots: 1 });
  try {
    const body = { prompt: 'Once upon a time', max_tokens: 4, temperature: 0 };
    const signalledAt = Date.now();
    server.signal('SIGTERM');
    for (let i = 0; i < 100 && !server.stderr().includes('stopping in'); i++) await sleep(10);
    assert.match(server.stderr(), /stopping in 2 s/);
    const health = await fetch(`${server.base}/health`);
    await health.text();
    assert.equal(health.status, 503, '/health during the delay');
    // Within the delay a generation is still served, more than once.
    for (let i = 0; i < 3; i++) {
      const res = await post(server.base, '/v1/completions', body);
      assert.equal(res.status, 200, `a request ${Date.now() - signalledAt} ms after SIGTERM: ${res.text}`);
    }
    assert.ok(Date.now() - signalledAt < 1800, 'the requests above ran inside the delay');
    // After it: refused (503) or the socket is closed, and the process exits 0.
    await sleep(Math.max(0, 2300 - (Date.now() - signalledAt)));
    try {
      const late = await post(server.base, '/v1/completions', body);
      assert.equal(late.status, 503, `a request after the delay: ${late.status}`);
    } catch (e) {
      if (!(e instanceof TypeError)) throw e;  // fetch failed: connection refused, fine
    }
    await dropFetchConnections();
    const exit = await within(server.exited, 10_000);
    assert.ok(exit, 'exited after the delay');
    assert.equal(exit.code, 0, `exit ${JSON.stringify(exit)}\n${server.stderr()}`);
    assert.ok(Date.now() - signalledAt >= 2000, 'not before the delay ended');
  } finally {
    server.signal('SIGKILL');
  }
});

test('--drain-delay: a second SIGTERM cuts the delay short', { timeout: 30_000 }, async () => {
  const server = await startServer(['--drain-delay', '60'], { ctx: 512, slots: 1 });
  try {
    server.signal('SIGTERM');
    for (let i = 0; i < 100 && !server.stderr().includes('stopping in'); i++) await sleep(10);
    assert.match(server.stderr(), /stopping in 60 s/);
    const secondAt = Date.now();
    server.signal('SIGTERM');
    await dropFetchConnections();
    const exit = await within(server.exited, 10_000);
    assert.ok(exit, 'exited within 10 s of the second SIGTERM, not after the 60 s delay');
    assert.equal(exit.code, 0, `exit ${JSON.stringify(exit)}\n${server.stderr()}`);
    assert.ok(Date.now() - secondAt < 10_000);
  } finally {
    server.signal('SIGKILL');
  }
});
