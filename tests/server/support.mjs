// Shared helpers of the `okapi serve` end-to-end tests: start a server on a free port, wait for it,
// stop it (SIGTERM, which must exit 0), and small HTTP/SSE helpers. Every test file starts its own
// server(s) and stops them in `after`, so the files are independent of each other.
//
// OKAPI_BIN   the okapi binary (default: <repo>/build/okapi)
// OKAPI_MODEL the model (default: <repo>/models/stories260K.gguf)
// OKAPI_TEST_THREADS  -t for the server (default 2)
import { spawn } from 'node:child_process';
import http from 'node:http';
import net from 'node:net';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, '..', '..');
export const OKAPI_BIN = path.resolve(repoRoot, process.env.OKAPI_BIN || 'build/okapi');
export const OKAPI_MODEL = path.resolve(repoRoot, process.env.OKAPI_MODEL || 'models/stories260K.gguf');
const THREADS = process.env.OKAPI_TEST_THREADS || '2';

// The peers in ../shared/peers are built for AVX-512 with VNNI, BF16 and VBMI and die with SIGILL
// elsewhere: the flags this CPU lacks for them ('' when it runs them, or off Linux).
export function cpuLacksForPeers() {
  let info = '';
  try { info = readFileSync('/proc/cpuinfo', 'utf8'); } catch { return ''; }
  const line = info.split('\n').find((l) => l.startsWith('flags'));
  if (!line) return '';
  const flags = new Set(line.slice(line.indexOf(':') + 1).trim().split(/\s+/));
  return ['avx512f', 'avx512bw', 'avx512dq', 'avx512vl', 'avx512_vnni', 'avx512_bf16', 'avx512vbmi']
    .filter((f) => !flags.has(f)).join(' ');
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// `promise`'s value, or `fallback` after `ms` (the timer does not keep the process alive after).
export function within(promise, ms, fallback = null) {
  let timer;
  const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve(fallback), ms); });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

const running = new Set();
process.on('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

// Starts `okapi serve --port 0 -m MODEL -c 1024 -np 4 -t 2 ...extraArgs` (with `env` added to the
// environment) and waits for /health 200.
// Returns { base, port, stderr(), stop() }. `base` is "http://127.0.0.1:PORT" (no trailing slash).
export async function startServer(extraArgs = [], { ctx = 1024, slots = 4, readyTimeoutMs = 60_000, env = {} } = {}) {
  if (!existsSync(OKAPI_BIN)) throw new Error(`okapi binary not found at ${OKAPI_BIN} (set OKAPI_BIN)`);
  if (!existsSync(OKAPI_MODEL)) throw new Error(`model not found at ${OKAPI_MODEL} (set OKAPI_MODEL)`);
  const args = ['serve', '-m', OKAPI_MODEL, '--host', '127.0.0.1', '--port', '0', '-c', String(ctx),
    '-np', String(slots), '-t', THREADS, ...extraArgs];
  const child = spawn(OKAPI_BIN, args, { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
  running.add(child);
  let log = '';
  let exit = null;
  const exited = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      running.delete(child);
      exit = { code, signal };
      resolve(exit);
    });
  });
  child.stdout.on('data', (d) => { log += d; });
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no "listening" line within ${readyTimeoutMs} ms:\n${log}`)),
      readyTimeoutMs);
    child.stderr.on('data', (d) => {
      log += d;
      const m = /okapi: listening on http:\/\/[^:\s]+:(\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    child.on('error', (e) => { clearTimeout(timer); reject(e); });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`okapi serve exited (code ${code}, signal ${signal}) before listening:\n${log}`));
    });
  });
  const base = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + readyTimeoutMs;
  for (;;) {
    if (exit) throw new Error(`okapi serve exited (code ${exit.code}, signal ${exit.signal}) while loading:\n${log}`);
    try {
      const res = await fetch(`${base}/health`);
      const body = await res.text();
      if (res.status === 200) break;
      if (res.status !== 503) throw new Error(`/health answered ${res.status}: ${body}`);
    } catch (e) {
      if (e.message.startsWith('/health')) throw e;
    }
    if (Date.now() > deadline) throw new Error(`/health not 200 within ${readyTimeoutMs} ms:\n${log}`);
    await sleep(50);
  }

  return {
    base,
    port,
    args,
    stderr: () => log,
    exited,
    // Sends a signal without waiting (see `exited`).
    signal(name = 'SIGTERM') { child.kill(name); },
    // SIGTERM; the server must drain and exit 0 within `timeoutMs`. Returns the exit { code, signal }.
    // This process's pooled fetch connections are closed first (shutdown.test.mjs checks idle
    // keep-alive connections on their own).
    async stop(timeoutMs = 10_000, { keepClientConnections = false } = {}) {
      if (exit) return exit;
      if (!keepClientConnections) await dropFetchConnections();
      child.kill('SIGTERM');
      const result = await within(exited, timeoutMs);
      if (!result) {
        child.kill('SIGKILL');
        await exited;
        throw new Error(`okapi serve did not exit within ${timeoutMs} ms of SIGTERM:\n${log.slice(-4000)}`);
      }
      if (result.code !== 0) {
        throw new Error(`okapi serve exited with code ${result.code} signal ${result.signal} after SIGTERM:\n` +
          log.slice(-4000));
      }
      return result;
    },
  };
}

// Closes the keep-alive connections of this process's fetch (Node's built-in undici agent, which
// the openai client uses too) and puts a fresh agent in its place for later requests.
export async function dropFetchConnections() {
  const key = Symbol.for('undici.globalDispatcher.1');
  const old = globalThis[key];
  if (!old || typeof old.close !== 'function') return;
  try {
    globalThis[key] = new old.constructor();
  } catch {
    return;  // an agent we cannot make again: leave it
  }
  await old.close().catch(() => {});
}

// POSTs JSON (or a raw string/Buffer body) and returns { status, headers, text, json }.
export async function post(base, route, body, { headers = {}, signal } = {}) {
  const raw = typeof body === 'string' || Buffer.isBuffer(body) ? body : JSON.stringify(body);
  const res = await fetch(base + route, {
    method: 'POST', body: raw, signal, headers: { 'Content-Type': 'application/json', ...headers },
  });
  return readResponse(res);
}

// One request on a connection of its own, closed after it (node:http, Connection: close):
// { status, headers, text, json }.
export function requestOnce(base, method, route, body) {
  return new Promise((resolve, reject) => {
    const raw = body === undefined ? undefined : JSON.stringify(body);
    const req = http.request(base + route, {
      method, agent: false, headers: raw ? { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(raw) } : {},
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => {
        let json;
        try { json = JSON.parse(text); } catch { json = undefined; }
        resolve({ status: res.statusCode, headers: res.headers, text, json });
      });
    });
    req.on('error', reject);
    req.end(raw);
  });
}

export async function get(base, route, { headers = {} } = {}) {
  return readResponse(await fetch(base + route, { headers }));
}

async function readResponse(res) {
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = undefined; }
  return { status: res.status, headers: res.headers, text, json };
}

// Server-sent events of a fetch Response: yields each event's data string ("[DONE]" included).
export async function* sseData(res) {
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let cut;
    while ((cut = buffer.search(/\r?\n\r?\n/)) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut).replace(/^\r?\n\r?\n/, '');
      const data = block.split(/\r?\n/).filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data) yield data;
    }
  }
  if (buffer.trim()) throw new Error(`stream ended inside an event: ${JSON.stringify(buffer)}`);
}

// Streams a POST and collects it: { status, chunks (parsed JSON), done (saw [DONE]), text, finish,
// usage, timings, roles }. For chat (delta.content) and completions (text) alike.
export async function streamRequest(base, route, body, { headers = {}, signal } = {}) {
  const res = await fetch(base + route, {
    method: 'POST', signal, headers: { 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify({ ...body, stream: true }),
  });
  const out = { status: res.status, contentType: res.headers.get('content-type'), chunks: [], done: false,
    text: '', finish: null, usage: null, timings: null, roles: [], afterDone: 0 };
  if (res.status !== 200) {
    out.error = await res.text();
    return out;
  }
  for await (const data of sseData(res)) {
    if (out.done) { out.afterDone++; continue; }
    if (data === '[DONE]') { out.done = true; continue; }
    const chunk = JSON.parse(data);
    out.chunks.push(chunk);
    if (chunk.error) out.error = chunk.error;
    for (const choice of chunk.choices ?? []) {
      if (choice.delta?.role) out.roles.push(choice.delta.role);
      out.text += choice.delta?.content ?? choice.text ?? '';
      if (choice.finish_reason) out.finish = choice.finish_reason;
    }
    if (chunk.usage) out.usage = chunk.usage;
    if (chunk.timings) out.timings = chunk.timings;
  }
  return out;
}

// Waits until every slot of /slots is idle (not processing); returns the last /slots array.
export async function waitSlotsIdle(base, { timeoutMs = 5000, headers = {} } = {}) {
  const deadline = Date.now() + timeoutMs;
  let slots;
  for (;;) {
    const res = await get(base, '/slots', { headers });
    if (res.status !== 200) throw new Error(`/slots answered ${res.status}: ${res.text}`);
    slots = res.json;
    if (Array.isArray(slots) && slots.length > 0 && slots.every((s) => !s.is_processing)) return slots;
    if (Date.now() > deadline) throw new Error(`slots still busy after ${timeoutMs} ms: ${res.text}`);
    await sleep(50);
  }
}

// Parses Prometheus text exposition into Map(name -> value) (labels kept in the name).
export function parsePrometheus(text) {
  const values = new Map();
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?)\s+(\S+)(?:\s+\d+)?$/.exec(line);
    if (!m) throw new Error(`not a Prometheus sample line: ${JSON.stringify(line)}`);
    const v = Number(m[2] === '+Inf' ? Infinity : m[2] === '-Inf' ? -Infinity : m[2]);
    if (Number.isNaN(v) && m[2] !== 'NaN') throw new Error(`bad value in ${JSON.stringify(line)}`);
    values.set(m[1], v);
  }
  return values;
}

// An error body of OpenAI's shape; returns the inner object.
export function errorOf(res) {
  const e = res.json?.error;
  if (!e || typeof e !== 'object' || typeof e.message !== 'string' || !e.message || typeof e.type !== 'string') {
    throw new Error(`not an OpenAI error body (status ${res.status}): ${res.text}`);
  }
  return e;
}

// A port nothing listens on now (for a peer server the tests start themselves).
export function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}
