// deploy/run-replicas.sh: 3 `okapi serve` replicas behind HAProxy on loopback under concurrent
// load (OpenAI client, streamed and not), one replica SIGKILLed and one SIGTERMed (drained and
// started again by the script) mid-run. Every request not streamed succeeds, a stream cut by the
// kill ends in an error the client raises, nothing hangs, no replica answers a 5xx, and a
// conversation's follow-up turn finds its prefix in the replica's cache (affinity).
//
// OKAPI_REPLICAS_TEST_SECONDS / OKAPI_REPLICAS_TEST_CLIENTS: the load's length and clients (60 s and
// 24; under OKAPI_SANITIZED=1 the test is left out unless these are set). HAPROXY: the binary
// (/usr/sbin/haproxy); without it the test is skipped, or fails under OKAPI_REQUIRE_GOLDEN=1.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import OpenAI from 'openai';
import { OKAPI_BIN, OKAPI_MODEL, freePort, repoRoot, sleep, within } from './support.mjs';

const flag = (name) => !!process.env[name] && process.env[name] !== '0';
const HAPROXY = process.env.HAPROXY || '/usr/sbin/haproxy';
const SANITIZED = flag('OKAPI_SANITIZED');
const LOAD_SECONDS = Number(process.env.OKAPI_REPLICAS_TEST_SECONDS || (SANITIZED ? 20 : 60));
const CLIENTS = Number(process.env.OKAPI_REPLICAS_TEST_CLIENTS || (SANITIZED ? 8 : 24));
const REQUEST_TIMEOUT_MS = SANITIZED ? 60_000 : 30_000;
const DRAIN_DELAY_S = 3;
const STREAM_TOKENS = 200;

const groups = new Set();
process.on('exit', () => {
  for (const pid of groups) try { process.kill(-pid, 'SIGKILL'); } catch { /* gone */ }
});

// Runs deploy/run-replicas.sh in a process group of its own (its replicas and HAProxy join it).
async function startReplicas(count) {
  const [port, statsPort, ...replicaPorts] = await Promise.all(
    Array.from({ length: count + 2 }, () => freePort()));
  const runDir = mkdtempSync(path.join(os.tmpdir(), 'okapi-replicas-test-'));
  const script = path.join(repoRoot, 'deploy', 'run-replicas.sh');
  const child = spawn('bash', [script, String(count), '--okapi', OKAPI_BIN, '-m', OKAPI_MODEL, '--haproxy', HAPROXY,
    '--port', String(port), '--stats-port', String(statsPort), '--replica-ports', replicaPorts.join(','),
    '--run-dir', runDir, '-t', '1', '-np', '16', '-c', '8192', '--drain-delay', String(DRAIN_DELAY_S)],
  { detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  groups.add(child.pid);
  let log = '';
  child.stdout.on('data', (d) => { log += d; });
  child.stderr.on('data', (d) => { log += d; });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  const files = () => ['haproxy.log', ...replicaPorts.map((_, i) => `replica-${i}.log`)]
    .map((f) => { try { return `--- ${f}\n${readFileSync(path.join(runDir, f), 'utf8').slice(-3000)}`; } catch { return ''; } })
    .join('\n');
  const group = {
    base: `http://127.0.0.1:${port}`,
    stats: `http://127.0.0.1:${statsPort}`,
    replicaBases: replicaPorts.map((p) => `http://127.0.0.1:${p}`),
    log: () => log,
    files,
    // The newest pid run-replicas.sh printed for replica i.
    pidOf(i) {
      const pids = [...log.matchAll(new RegExp(`replica ${i} pid (\\d+)`, 'g'))];
      return Number(pids.at(-1)[1]);
    },
    async stop() {
      try { process.kill(child.pid, 'SIGTERM'); } catch { /* gone */ }
      const exit = await within(exited, 30_000);
      try { process.kill(-child.pid, 'SIGKILL'); } catch { /* the whole group is gone */ }
      groups.delete(child.pid);
      rmSync(runDir, { recursive: true, force: true });
      return exit;
    },
  };
  const ready = await within(Promise.race([
    (async () => { while (!/run-replicas: ready/.test(log)) await sleep(50); return true; })(),
    exited.then(() => false)]), 120_000, false);
  if (!ready) {
    const details = `${log}\n${files()}`;
    await group.stop();
    throw new Error(`run-replicas.sh not ready:\n${details}`);
  }
  return group;
}

// HAProxy's stats as CSV rows of the checked backend's servers: { r0: {status, hrsp_5xx, ...}, ... }.
async function serverStats(statsBase) {
  const text = await (await fetch(`${statsBase}/;csv`, { signal: AbortSignal.timeout(5000) })).text();
  const [header, ...rows] = text.trim().split('\n');
  const names = header.replace(/^# /, '').split(',');
  const out = {};
  for (const row of rows) {
    const fields = row.split(',');
    const rec = Object.fromEntries(names.map((n, i) => [n, fields[i]]));
    if (rec.pxname === 'replicas' && /^r\d+$/.test(rec.svname)) out[rec.svname] = rec;
  }
  return out;
}

async function waitAllUp(statsBase, count, ms) {
  const deadline = Date.now() + ms;
  for (;;) {
    const stats = await serverStats(statsBase);
    if (Object.keys(stats).length === count && Object.values(stats).every((s) => s.status === 'UP')) return stats;
    if (Date.now() > deadline) return stats;
    await sleep(200);
  }
}

// A conversation's opening: a unique tag first, so that openings share little more than the
// template's first tokens (a new one then takes the least recently used slot, not the one whose
// conversation goes on), and a cached prefix as long as the first turn's prompt is its own.
function opening(id) {
  const tag = createHash('sha256').update(String(id)).digest('hex').slice(0, 12);
  return [
    { role: 'system', content: `${tag}. You are a storyteller. You tell short, happy stories about animals.` },
    { role: 'user', content: `Conversation ${id}: tell me a story about a cat named Tom and a dog named Max who live in a big red house near the park.` },
  ];
}

// Two turns, not streamed; the second carries the first's answer. keyBy: 'header' | 'user' | null.
async function conversation(client, id, keyBy, records) {
  const key = `conv-${id}`;
  const options = { headers: keyBy === 'header' ? { 'X-Session-Id': key } : {}, timeout: REQUEST_TIMEOUT_MS };
  const extra = keyBy === 'user' ? { user: key } : {};
  const messages = opening(id);
  const turns = [];
  for (let turn = 0; turn < 2; turn++) {
    const rec = { kind: 'turn', keyBy, turn, stream: false, start: Date.now() };
    records.push(rec);
    try {
      const { data, response } = await client.chat.completions.create(
        { model: 'stories', messages, max_tokens: 24, temperature: 0.7, ...extra }, options).withResponse();
      rec.status = response.status;
      rec.servedBy = response.headers.get('x-served-by');
      rec.promptTokens = data.usage.prompt_tokens;
      rec.cached = data.usage.prompt_tokens_details?.cached_tokens;
      rec.ok = true;
      messages.push({ role: 'assistant', content: data.choices[0].message.content });
      messages.push({ role: 'user', content: 'And then what happened to them?' });
    } catch (e) {
      rec.error = e;
      rec.status = e.status;
    }
    rec.end = Date.now();
    turns.push(rec);
    if (!rec.ok) break;
  }
  if (turns.length === 2) turns[1].previous = turns[0];
  return turns;
}

// A streamed completion (long enough to be under way when a replica is killed); with a session
// key, on that key's replica.
async function stream(client, id, records, { key, tokens = STREAM_TOKENS } = {}) {
  const rec = { kind: 'stream', stream: true, start: Date.now(), chunks: 0, finish: null, tokens };
  records.push(rec);
  const abort = new AbortController();
  const timer = setTimeout(() => { rec.timedOut = true; abort.abort(); }, REQUEST_TIMEOUT_MS);
  try {
    const { data, response } = await client.chat.completions.create({
      model: 'stories', messages: [{ role: 'user', content: `Story ${id}: once upon a time` }], stream: true,
      max_tokens: tokens, ignore_eos: true, temperature: 0.8,
    }, { signal: abort.signal, headers: key ? { 'X-Session-Id': key } : {} }).withResponse();
    rec.status = response.status;
    rec.servedBy = response.headers.get('x-served-by');
    rec.headersAt = Date.now();
    for await (const chunk of data) {
      rec.chunks++;
      rec.finish = chunk.choices?.[0]?.finish_reason ?? rec.finish;
    }
    rec.ok = true;
  } catch (e) {
    rec.error = e;
    rec.status ??= e.status;
  } finally {
    clearTimeout(timer);
  }
  rec.end = Date.now();
}

// Left out of the sanitized run: its replicas (ASan/UBSan binaries on 2 shared cores) answer
// HAProxy's 1 s health checks too late under this load, so HAProxy finds no replica up and answers
// 503 itself. The server paths the test drives (the drain delay, headers sent with the body) run
// under the sanitizers in server_node_shutdown and the other server tests.
test('replicas behind HAProxy: kill, drain, restart under load; affinity gives cache hits',
  { timeout: (LOAD_SECONDS + 200) * 1000,
    skip: SANITIZED && !process.env.OKAPI_REPLICAS_TEST_SECONDS ? 'OKAPI_SANITIZED: left out (see above)' : false },
  async (t) => {
    if (!existsSync(HAPROXY)) {
      if (flag('OKAPI_REQUIRE_GOLDEN')) assert.fail(`no haproxy at ${HAPROXY} (scripts/setup.sh installs it)`);
      t.skip(`no haproxy at ${HAPROXY}`);
      return;
    }
    const group = await startReplicas(3);
    let exit;
    try {
      const client = new OpenAI({ baseURL: `${group.base}/v1`, apiKey: 'unused', maxRetries: 0, timeout: REQUEST_TIMEOUT_MS });
      const records = [];
      const conversations = [];
      const deadline = Date.now() + LOAD_SECONDS * 1000;
      let nextId = 0;
      const worker = async (w) => {
        for (let round = 0; Date.now() < deadline; round++) {
          const id = `${w}-${round}-${nextId++}`;
          const kind = (w + round) % 4;
          if (kind === 0) conversations.push(await conversation(client, id, 'header', records));
          else if (kind === 1) conversations.push(await conversation(client, id, 'user', records));
          else if (kind === 2) conversations.push(await conversation(client, id, null, records));
          else await stream(client, id, records);
        }
      };
      const load = Promise.all(Array.from({ length: CLIENTS }, (_, w) => worker(w)));

      // SIGKILL r0 while a stream it serves is under way (it must end in an error the client sees):
      // long streams sent to r0 by a session key that HAProxy hashes there.
      await sleep(LOAD_SECONDS * 250);
      let victimKey = null;
      for (let k = 0; k < 200 && !victimKey; k++) {
        const { response } = await client.completions.create({ model: 'stories', prompt: 'Hi', max_tokens: 1 },
          { headers: { 'X-Session-Id': `victim-${k}` } }).withResponse();
        if (response.headers.get('x-served-by') === 'r0') victimKey = `victim-${k}`;
      }
      assert.ok(victimKey, 'no session key lands on r0');
      const victimTokens = 400;  // the prompt and these fit a slot's 512 cells
      const victims = [];
      const victimStreams = [];
      // stories260K writes a whole stream faster than this busy process reads it: r0 is stopped
      // (SIGSTOP) as soon as a victim's head arrives, and the victim is a stream still unfinished once
      // what r0 had sent is read. Then SIGKILL.
      let victim = null;
      for (let attempt = 0; attempt < 5 && !victim; attempt++) {
        const batch = victims.length;
        for (let k = 0; k < 3; k++) victimStreams.push(stream(client, `victim-${attempt}-${k}`, victims, { key: victimKey, tokens: victimTokens }));
        for (const until = Date.now() + 5000; Date.now() < until;) {
          if (victims.slice(batch).some((r) => r.servedBy === 'r0' && !r.end)) break;
          await sleep(1);
        }
        process.kill(group.pidOf(0), 'SIGSTOP');
        await sleep(500);
        victim = victims.find((r) => r.servedBy === 'r0' && !r.end);
        if (!victim) process.kill(group.pidOf(0), 'SIGCONT');
      }
      const killedAt = Date.now();
      process.kill(group.pidOf(0), 'SIGKILL');
      // SIGTERM r1 (it drains after --drain-delay; run-replicas.sh starts both again).
      await sleep(Math.max(0, deadline - LOAD_SECONDS * 500 - Date.now()));
      const terminatedAt = Date.now();
      process.kill(group.pidOf(1), 'SIGTERM');

      const finished = await within(Promise.all([load, ...victimStreams]).then(() => true), REQUEST_TIMEOUT_MS + 10_000, false);
      records.push(...victims);
      const hung = records.filter((r) => !r.end);
      assert.ok(finished && hung.length === 0, `${hung.length} requests still open ${REQUEST_TIMEOUT_MS} ms after the load`);

      const turns = records.filter((r) => !r.stream);
      const streams = records.filter((r) => r.stream);
      const describe = (r) => `${r.kind} on ${r.servedBy} status ${r.status}: ${r.error?.constructor?.name} ${r.error?.message}`;
      // Nothing timed out; every request not streamed got its answer (a kill or drain under it was
      // retried by HAProxy on another replica).
      assert.deepEqual(records.filter((r) => r.timedOut).map(describe), [], 'timed out');
      assert.deepEqual(turns.filter((r) => !r.ok).map(describe), [], 'requests not streamed that failed');
      // A stream fails only when the killed replica was sending it: after its headers, before the kill.
      const cut = streams.filter((r) => !r.ok);
      for (const r of cut) {
        assert.equal(r.status, 200, `a failed stream had a status: ${describe(r)}`);
        assert.equal(r.servedBy, 'r0', `a stream failed on a replica not killed: ${describe(r)}`);
        assert.ok(r.start <= killedAt, `a stream sent after the kill failed: ${describe(r)}`);
        assert.ok(r.finish === null, `a stream failed after its last chunk: ${describe(r)}`);
      }
      // A stream that did not fail is whole.
      for (const r of streams.filter((x) => x.ok)) assert.equal(r.finish, 'length', `a stream ended early: ${r.chunks} chunks`);
      // Under a loaded suite every long stream may finish before the freeze catches one: then there
      // is no stream to cut this time (the checks above still hold for any that was), not a failure.
      if (victim) {
        assert.ok(!victim.ok, `the stream under way on r0 at the kill ended without an error (${victim.chunks} chunks, finish ${victim.finish})`);
      } else {
        t.diagnostic(`no stream was under way on r0 at the kill this run: ${victims.map(describe)}`);
      }

      // Both replicas came back, r1 after a clean drain (exit 0); HAProxy has them up again.
      assert.match(group.log(), /replica 0 exited \(status 137\)/);
      assert.match(group.log(), /replica 1 exited \(status 0\)/);
      const stats = await waitAllUp(group.stats, 3, 60_000);
      assert.deepEqual(Object.values(stats).map((s) => s.status), ['UP', 'UP', 'UP'], group.files());
      // No replica refused a request with a 5xx: the draining one was out of HAProxy's rotation
      // before its --drain-delay ended (a 503 would be retried, so the clients could not tell).
      for (const [name, s] of Object.entries(stats)) assert.equal(Number(s.hrsp_5xx), 0, `${name} answered 5xx: ${group.files()}`);

      // Keyless requests are spread (leastconn); keyed conversations stay on one replica.
      const keyless = new Set(turns.filter((r) => r.keyBy === null).map((r) => r.servedBy));
      assert.ok(keyless.size >= 2, `keyless requests all went to ${[...keyless]}`);
      const hit = (second) => second.cached >= second.previous.promptTokens;
      const keyedFollowUps = conversations.filter((c) => c.length === 2 && c[0].keyBy !== null).map((c) => c[1]);
      // A replica out of the rotation (down, or back up) moves its keys: the conversations then are not counted.
      const calm = (r) => [killedAt, terminatedAt].every((at) => r.previous.start > at + DRAIN_DELAY_S * 1000 + 8000 || r.end < at);
      const undisturbed = keyedFollowUps.filter(calm);
      const sameReplica = undisturbed.filter((r) => r.servedBy === r.previous.servedBy).length;
      const hits = undisturbed.filter(hit).length;
      const keylessFollowUps = conversations.filter((c) => c.length === 2 && c[0].keyBy === null).map((c) => c[1]).filter(calm);
      const keylessHits = keylessFollowUps.filter(hit).length;
      t.diagnostic(`${records.length} requests (${streams.length} streamed, ${cut.length} cut by the kill); ` +
        `keyed follow-ups on their first turn's replica ${sameReplica}/${undisturbed.length}, ` +
        `cache hits ${hits}/${undisturbed.length}; keyless follow-ups' cache hits ${keylessHits}/${keylessFollowUps.length}`);
      // A short run of a sanitized build (SANITIZED) may have few conversations outside the kill's
      // and restart's windows: then only the quiet check below speaks for the cache.
      if (!SANITIZED) assert.ok(undisturbed.length >= 10, `too few keyed conversations: ${undisturbed.length}`);
      assert.ok(sameReplica >= undisturbed.length * 0.95, `affinity held for ${sameReplica}/${undisturbed.length}`);
      // Under load a replica's slot choice (the idle slot sharing the longest prefix, be it only the
      // template's first tokens) can give a waiting conversation's slot to a new one: not every
      // keyed follow-up hits, but clearly more than without a key (about 1 in 3 replicas).
      const keylessRate = keylessHits / Math.max(1, keylessFollowUps.length);
      if (undisturbed.length >= 10) assert.ok(hits >= undisturbed.length * Math.max(0.45, keylessRate + 0.15),
        `prefix-cache hits on ${hits}/${undisturbed.length} keyed follow-ups (keyless: ${keylessHits}/${keylessFollowUps.length})`);

      // Quiet: every keyed follow-up, by header or by "user", finds its whole first turn cached.
      for (const keyBy of ['header', 'user', 'header', 'user']) {
        const [first, second] = await conversation(client, `quiet-${keyBy}-${nextId++}`, keyBy, []);
        assert.ok(first.ok && second.ok, describe(first.ok ? second : first));
        assert.equal(second.servedBy, first.servedBy, `${keyBy}: the follow-up went to another replica`);
        assert.ok(hit(second), `${keyBy}: cached_tokens ${second.cached} < the first turn's ${first.promptTokens} prompt tokens`);
      }
    } finally {
      exit = await group.stop();
    }
    assert.equal(exit?.code, 0, `run-replicas.sh exit ${JSON.stringify(exit)}:\n${group.log()}`);
  });
