// Slots and lifecycle, as llama-server's: slot files (save -> restart -> restore gives the same
// continuation from the restored cache; hostile names and broken files are refused), /slots with
// --no-slots and fail_on_no_slot, --sleep-idle-seconds (which endpoints wake the model), n > 1
// choices, --no-ui, --alias a,b / --tags, several --host addresses and build_info.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, writeFileSync, readdirSync, rmSync } from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { get, post, requestOnce, sleep, startServer, streamRequest } from './support.mjs';

const prompt = 'Once upon a time, there was a little girl who';
const completion = (base) => post(base, '/v1/completions', { prompt, max_tokens: 8, temperature: 0 });

test('a saved slot restores into a fresh server: same continuation, its prompt cached', { timeout: 60_000 }, async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'okapi-slots-'));
  try {
    let server = await startServer(['--slot-save-path', dir], { ctx: 256, slots: 1 });
    let first;
    try {
      first = await completion(server.base);
      assert.equal(first.status, 200, first.text);
      const saved = await post(server.base, '/slots/0?action=save', { filename: 'story.bin' });
      assert.equal(saved.status, 200, saved.text);
      // The prompt and the generated tokens but the last (never run through the model).
      assert.equal(saved.json.n_saved, first.json.usage.prompt_tokens + first.json.usage.completion_tokens - 1);
      assert.equal(saved.json.id_slot, 0);
      assert.equal(saved.json.filename, 'story.bin');
      assert.ok(saved.json.n_written > saved.json.n_saved * 4);
      assert.equal(typeof saved.json.timings.save_ms, 'number');
      const erased = await requestOnce(server.base, 'POST', '/slots/0?action=erase');
      assert.equal(erased.status, 200, erased.text);
      assert.equal(erased.json.n_erased, saved.json.n_saved);
    } finally {
      await server.stop();
    }
    server = await startServer(['--slot-save-path', dir], { ctx: 256, slots: 1 });
    try {
      const restored = await post(server.base, '/slots/0?action=restore', { filename: 'story.bin' });
      assert.equal(restored.status, 200, restored.text);
      assert.ok(restored.json.n_restored > 0);
      assert.equal(restored.json.n_read, readFileSync(path.join(dir, 'story.bin')).length);
      const slots = await get(server.base, '/slots');
      assert.equal(slots.json[0].n_cached_tokens, restored.json.n_restored);
      const again = await completion(server.base);
      assert.equal(again.status, 200, again.text);
      assert.equal(again.json.choices[0].text, first.json.choices[0].text);
      // All of the prompt but its last token (run again for its logits) came from the file.
      assert.equal(again.json.timings.cache_n, first.json.usage.prompt_tokens - 1);
    } finally {
      await server.stop();
    }
    // Another cache type (f16, the file is f32): refused, the slot still serves.
    server = await startServer(['--slot-save-path', dir, '-ctk', 'f16', '-ctv', 'f16'], { ctx: 256, slots: 1 });
    try {
      const other = await post(server.base, '/slots/0?action=restore', { filename: 'story.bin' });
      assert.equal(other.status, 400, other.text);
      assert.match(other.json.error.message, /cache/);
      assert.equal((await completion(server.base)).status, 200);
    } finally {
      await server.stop();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('slot file names stay inside --slot-save-path; broken files are refused', { timeout: 60_000 }, async () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'okapi-slots-'));
  const server = await startServer(['--slot-save-path', dir], { ctx: 256, slots: 2 });
  try {
    for (const filename of ['../escape.bin', 'a/b.bin', '/etc/passwd', '..', '.hidden', 'a\\b', '', 'x\u0001y']) {
      const res = await post(server.base, '/slots/0?action=save', { filename });
      assert.equal(res.status, 400, `${JSON.stringify(filename)}: ${res.text}`);
    }
    assert.deepEqual(readdirSync(dir), []);
    assert.equal((await post(server.base, '/slots/0?action=save', { filename: 42 })).status, 400);
    assert.equal((await post(server.base, '/slots/0?action=dance', { filename: 'a.bin' })).status, 400);
    assert.equal((await post(server.base, '/slots/7?action=save', { filename: 'a.bin' })).status, 400);
    assert.equal((await post(server.base, '/slots/x?action=save', { filename: 'a.bin' })).status, 400);
    assert.equal((await post(server.base, '/slots/0?action=restore', { filename: 'missing.bin' })).status, 400);

    assert.equal((await completion(server.base)).status, 200);
    const saved = await post(server.base, '/slots/0?action=save', { filename: 'good.bin' });
    assert.equal(saved.status, 200, saved.text);
    const good = readFileSync(path.join(dir, 'good.bin'));
    const broken = {
      'garbage.bin': Buffer.from('this is not a slot file at all, not even close'),
      'truncated.bin': good.subarray(0, Math.floor(good.length / 2)),
      'flipped.bin': Buffer.from(good.map((b, i) => (i === good.length - 20 ? b ^ 0xff : b))),
      'empty.bin': Buffer.alloc(0),
      'huge-count.bin': Buffer.concat([good.subarray(0, 8), Buffer.from([0xff, 0xff, 0xff, 0x7f]), good.subarray(12)]),
    };
    for (const [name, bytes] of Object.entries(broken)) {
      writeFileSync(path.join(dir, name), bytes);
      const res = await post(server.base, '/slots/1?action=restore', { filename: name });
      assert.equal(res.status, 400, `${name}: ${res.text}`);
      assert.match(res.json.error.message, /slot file/);
    }
    // The slot that refused them is empty and serves.
    const slots = await get(server.base, '/slots');
    assert.equal(slots.json[1].n_cached_tokens, 0);
    const restored = await post(server.base, '/slots/1?action=restore', { filename: 'good.bin' });
    assert.equal(restored.status, 200, restored.text);
    assert.equal(restored.json.n_restored, saved.json.n_saved);
  } finally {
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
});

test('without --slot-save-path: 501; --no-slots: GET /slots 501; fail_on_no_slot', { timeout: 30_000 }, async () => {
  let server = await startServer(['--no-slots'], { ctx: 256, slots: 1 });
  try {
    const res = await post(server.base, '/slots/0?action=save', { filename: 'a.bin' });
    assert.equal(res.status, 501, res.text);
    assert.equal((await get(server.base, '/slots')).status, 501);
    assert.equal((await get(server.base, '/props')).json.endpoint_slots, false);
  } finally {
    await server.stop();
  }
  server = await startServer([], { ctx: 256, slots: 1 });
  try {
    assert.equal((await get(server.base, '/slots?fail_on_no_slot=1')).status, 200);
    const busy = streamRequest(server.base, '/v1/completions', { prompt, max_tokens: 200, ignore_eos: true });
    let status = 200;
    for (let i = 0; i < 100 && status === 200; i++) {
      status = (await get(server.base, '/slots?fail_on_no_slot=1')).status;
      if (status === 200) await sleep(5);
    }
    assert.equal(status, 503);
    assert.equal((await busy).status, 200);
  } finally {
    await server.stop();
  }
});

test('--sleep-idle-seconds: idle unloads, /health /props /v1/models answer asleep, generation wakes', { timeout: 30_000 }, async () => {
  const server = await startServer(['--sleep-idle-seconds', '1', '--metrics'], { ctx: 256, slots: 1 });
  try {
    assert.equal((await get(server.base, '/props')).json.is_sleeping, false);
    let asleep = false;
    for (let i = 0; i < 60 && !asleep; i++) {
      await sleep(100);
      asleep = (await get(server.base, '/props')).json.is_sleeping;
    }
    assert.ok(asleep, 'the server did not fall asleep');
    assert.match(server.stderr(), /model unloaded/);
    assert.equal((await get(server.base, '/health')).status, 200);
    assert.equal((await get(server.base, '/v1/models')).status, 200);
    assert.equal((await get(server.base, '/metrics')).status, 200);
    assert.equal((await get(server.base, '/props')).json.is_sleeping, true, 'read-only endpoints must not wake it');
    const res = await completion(server.base);
    assert.equal(res.status, 200, res.text);
    assert.equal((await get(server.base, '/props')).json.is_sleeping, false);
    assert.match(server.stderr(), /woke up/);
  } finally {
    await server.stop();
  }
});

test('n > 1: several choices, each with its index, streamed interleaved', { timeout: 30_000 }, async () => {
  const server = await startServer(['--alias', 'story,alpha', '--tags', 'small,test', '--no-ui'], { ctx: 512, slots: 2 });
  try {
    const body = { messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 8, n: 3, temperature: 1, seed: 7 };
    const res = await post(server.base, '/v1/chat/completions', body);
    assert.equal(res.status, 200, res.text);
    assert.deepEqual(res.json.choices.map((c) => c.index), [0, 1, 2]);
    for (const c of res.json.choices) assert.equal(c.message.role, 'assistant');
    assert.equal(res.json.usage.completion_tokens, 24);
    const texts = new Set(res.json.choices.map((c) => c.message.content));
    assert.ok(texts.size > 1, 'each choice samples its own stream');
    const streamed = await streamRequest(server.base, '/v1/completions', { prompt, max_tokens: 6, n: 2 });
    assert.equal(streamed.status, 200, streamed.error);
    const finished = streamed.chunks.filter((c) => c.choices?.[0]?.finish_reason).map((c) => c.choices[0].index);
    assert.deepEqual(finished.sort(), [0, 1]);
    assert.equal((await post(server.base, '/v1/completions', { prompt, n: 0 })).status, 400);

    // --no-ui, --alias, --tags, build_info
    assert.equal((await get(server.base, '/')).status, 404);
    const models = await get(server.base, '/v1/models');
    assert.equal(models.json.data[0].id, 'alpha');
    assert.deepEqual(models.json.data[0].aliases, ['alpha', 'story']);
    assert.deepEqual(models.json.data[0].tags, ['small', 'test']);
    const props = (await get(server.base, '/props')).json;
    assert.match(props.build_info, /^b\d+-/);
    assert.equal(typeof props.default_generation_settings.params.seed, 'number');
  } finally {
    await server.stop();
  }
});

test('--host with several addresses listens on each', { timeout: 30_000 }, async (t) => {
  const v6 = await new Promise((resolve) => {
    const probe = net.createServer().once('error', () => resolve(false)).listen(0, '::1', () => probe.close(() => resolve(true)));
  });
  if (!v6) return t.skip('no IPv6 loopback');
  const server = await startServer(['--host', '127.0.0.1,::1'], { ctx: 256, slots: 1 });
  try {
    assert.equal((await get(server.base, '/health')).status, 200);
    assert.equal((await get(`http://[::1]:${server.port}`, '/health')).status, 200);
  } finally {
    await server.stop();
  }
});
