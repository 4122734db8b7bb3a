// The llama-server-style side endpoints: /tokenize, /detokenize, /apply-template, /props, /slots,
// /health, /v1/models, and the chat page at /.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { errorOf, get, post, repoRoot, startServer } from './support.mjs';

let server;
let base;

before(async () => {
  server = await startServer(['--cors-origins', 'http://example.test,localhost'], { ctx: 1024, slots: 2 });
  base = server.base;
});

after(async () => {
  await server?.stop();
});

describe('side endpoints', () => {
  test('tokenize then detokenize returns the text', async () => {
    const text = 'Once upon a time, there was a little girl named Lily. She loved to play.';
    const tok = await post(base, '/tokenize', { content: text });
    assert.equal(tok.status, 200, tok.text);
    const { tokens } = tok.json;
    assert.ok(Array.isArray(tokens) && tokens.length > 5);
    assert.ok(tokens.every((t) => Number.isInteger(t) && t >= 0 && t < 512), 'ids in the 512-token vocabulary');
    const detok = await post(base, '/detokenize', { tokens });
    assert.equal(detok.status, 200, detok.text);
    assert.equal(detok.json.content, text);

    const special = await post(base, '/tokenize', { content: text, add_special: true });
    assert.equal(special.status, 200);
    assert.ok(special.json.tokens.length >= tokens.length, 'add_special adds BOS (or nothing)');

    const pieces = await post(base, '/tokenize', { content: 'Hello world', with_pieces: true });
    assert.equal(pieces.status, 200, pieces.text);
    const entries = pieces.json.tokens;
    assert.ok(entries.every((e) => Number.isInteger(e.id) && typeof e.piece === 'string'), pieces.text);
    assert.equal(entries.map((e) => e.piece).join('').replace(/^ /, ''), 'Hello world');
  });

  test('multi-byte UTF-8 survives tokenize/detokenize (byte fallback)', async () => {
    const text = 'héllo wörld 🦙 ok';
    const tok = await post(base, '/tokenize', { content: text });
    assert.equal(tok.status, 200, tok.text);
    const detok = await post(base, '/detokenize', { tokens: tok.json.tokens });
    assert.equal(detok.json.content, text);
  });

  test('CORS: the allowed origin gets the headers, another does not', async () => {
    const ok = await fetch(`${base}/v1/chat/completions`, {
      method: 'OPTIONS', headers: { Origin: 'http://example.test', 'Access-Control-Request-Method': 'POST' },
    });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get('access-control-allow-origin'), 'http://example.test');
    assert.equal(ok.headers.get('access-control-allow-credentials'), 'true');
    assert.equal(ok.headers.get('access-control-allow-methods'), 'GET, POST, DELETE, OPTIONS');
    assert.equal(ok.headers.get('access-control-allow-headers'), '*');
    // --cors-origins' localhost keyword: any port on the loopback hosts, no look-alike host.
    const local = await fetch(`${base}/v1/models`, { headers: { Origin: 'http://127.0.0.1:5173' } });
    assert.equal(local.headers.get('access-control-allow-origin'), 'http://127.0.0.1:5173');
    const lookalike = await fetch(`${base}/v1/models`, { headers: { Origin: 'http://localhost.evil.test' } });
    assert.equal(lookalike.headers.get('access-control-allow-origin'), null);
    const other = await fetch(`${base}/v1/models`, { headers: { Origin: 'http://evil.test' } });
    assert.equal(other.status, 200);
    assert.equal(other.headers.get('access-control-allow-origin'), null);
  });

  test('tokenize/detokenize reject wrong types', async () => {
    const a = await post(base, '/tokenize', { content: 5 });
    assert.equal(a.status, 400);
    errorOf(a);
    const b = await post(base, '/detokenize', { tokens: 'abc' });
    assert.equal(b.status, 400);
    errorOf(b);
    const c = await post(base, '/detokenize', { tokens: [1, 2, 999999] });
    assert.equal(c.status, 400, `a token id beyond the vocabulary: ${c.text}`);
  });

  test('apply-template gives ChatML with the generation prompt', async () => {
    const messages = [{ role: 'system', content: 'You are kind.' }, { role: 'user', content: 'Hi there' }];
    const res = await post(base, '/apply-template', { messages });
    assert.equal(res.status, 200, res.text);
    const { prompt } = res.json;
    assert.equal(typeof prompt, 'string');
    assert.match(prompt, /<\|im_start\|>system\nYou are kind\.<\|im_end\|>\n/);
    assert.match(prompt, /<\|im_start\|>user\nHi there<\|im_end\|>\n/);
    assert.ok(prompt.endsWith('<|im_start|>assistant\n'), JSON.stringify(prompt));

    const noGen = await post(base, '/apply-template', { messages, add_generation_prompt: false });
    assert.equal(noGen.status, 200);
    assert.ok(!noGen.json.prompt.includes('<|im_start|>assistant'), JSON.stringify(noGen.json.prompt));

    const bad = await post(base, '/apply-template', { messages: 'x' });
    assert.equal(bad.status, 400);
    assert.equal(errorOf(bad).param, 'messages');
  });

  test('/props, /slots, /health, /v1/models', async () => {
    const health = await get(base, '/health');
    assert.equal(health.status, 200);
    assert.deepEqual(health.json, { status: 'ok' });

    const props = await get(base, '/props');
    assert.equal(props.status, 200, props.text);
    assert.equal(typeof props.json, 'object');

    const slots = await get(base, '/slots');
    assert.equal(slots.status, 200);
    assert.equal(slots.json.length, 2);
    for (const [i, s] of slots.json.entries()) {
      assert.equal(s.id, i);
      assert.equal(s.n_ctx, 512);
      assert.equal(s.is_processing, false);
      assert.equal(typeof s.n_cached_tokens, 'number');
    }

    const models = await get(base, '/v1/models');
    assert.equal(models.status, 200);
    assert.equal(models.json.object, 'list');
    assert.equal(models.json.data.length, 1);
    assert.equal(models.json.data[0].object, 'model');
    assert.equal(typeof models.json.data[0].id, 'string');
  });

  test('/metrics is off without --metrics', async () => {
    const res = await get(base, '/metrics');
    assert.ok([404, 501].includes(res.status), `${res.status}`);
  });

  test('a repeated prompt reuses the cache (cached_tokens)', async () => {
    const body = { prompt: 'Once upon a time, there was a big brown dog who liked to run.', max_tokens: 4, temperature: 0 };
    const first = await post(base, '/v1/completions', body);
    assert.equal(first.status, 200);
    const second = await post(base, '/v1/completions', body);
    assert.equal(second.status, 200);
    assert.equal(second.json.choices[0].text, first.json.choices[0].text);
    assert.ok(second.json.usage.prompt_tokens_details.cached_tokens > 0, second.text);
    assert.equal(second.json.timings.cache_n, second.json.usage.prompt_tokens_details.cached_tokens);
  });

  test('GET / serves the chat page', async () => {
    const res = await fetch(`${base}/`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
    const html = await res.text();
    assert.match(html, /<!doctype html>/i);
    assert.match(html, /data-testid="send"/);
    assert.doesNotMatch(html, /<(script|link)[^>]+(src|href)="https?:/i, 'no external resources');
    // Embedded byte for byte (the build turns the file into a C++ raw string).
    const file = readFileSync(path.join(repoRoot, 'src/server/ui/chat.html'), 'utf8');
    assert.ok(html === file, `GET / differs from src/server/ui/chat.html (${html.length} vs ${file.length} chars)`);
  });
});
