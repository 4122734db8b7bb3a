// `okapi serve --embeddings` and `--rerank` with real clients: the `openai` client's
// embeddings.create (float, base64, and its default that asks base64 and decodes), LangChain's
// OpenAIEmbeddings, llama-server's native /embeddings (per-token vectors with --pooling none),
// /v1/rerank (Jina / Cohere shape) and TEI's, every 400 and 501, requests batched across clients,
// a client that hangs up; and side by side with ../shared/peers/llama-server on the same synth
// models (a bert embedder and a bge-reranker-base cross-encoder, 2 layers, F32): cosine >= 0.99999,
// the same rerank order and scores within 1e-4.
//
// Needs ../shared/vocab/ggml-vocab-bert-bge.gguf (skipped without it, failed under
// OKAPI_REQUIRE_GOLDEN); under OKAPI_SANITIZED=1 the llama-server comparisons are left out.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { OpenAIEmbeddings } from '@langchain/openai';
import { execFileSync, spawn } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { OKAPI_BIN, cpuLacksForPeers, freePort, get, post, repoRoot, sleep, startServer } from './support.mjs';

const SHARED = path.resolve(repoRoot, process.env.OKAPI_SHARED || path.join('..', 'shared'));
const VOCAB = path.join(SHARED, 'vocab', 'ggml-vocab-bert-bge.gguf');
const LLAMA_SERVER = path.join(SHARED, 'peers', 'llama-server');
const SANITIZED = !!process.env.OKAPI_SANITIZED && process.env.OKAPI_SANITIZED !== '0';
const required = !!process.env.OKAPI_REQUIRE_GOLDEN && process.env.OKAPI_REQUIRE_GOLDEN !== '0';
const haveData = existsSync(VOCAB);
if (!haveData && required) throw new Error(`OKAPI_REQUIRE_GOLDEN: absent: ${VOCAB}`);
const skip = haveData ? false : `absent: ${VOCAB}`;
const peersSkip = skip || (SANITIZED ? 'OKAPI_SANITIZED: the llama-server comparisons are left out'
  : !existsSync(LLAMA_SERVER) ? `absent: ${LLAMA_SERVER}`
  : cpuLacksForPeers() ? `the peers are built for AVX-512; this CPU lacks ${cpuLacksForPeers()}` : false);
if (!peersSkip && !existsSync(LLAMA_SERVER) && required) throw new Error(`OKAPI_REQUIRE_GOLDEN: absent: ${LLAMA_SERVER}`);

const MODEL = 'bge-test';
const dir = mkdtempSync(path.join(os.tmpdir(), 'okapi-embeddings-'));
const BERT = path.join(dir, 'bert.gguf');
const RERANKER = path.join(dir, 'reranker.gguf');

const TEXTS = [
  'The cat sat on the mat.',
  'A quick brown fox jumps over the lazy dog.',
  'Embeddings map text to vectors.',
  'okapi runs GGUF models on CPUs',
];
const QUERY = 'what do embeddings do?';
const DOCUMENTS = [
  'Embeddings map text to vectors that can be compared.',
  'The weather is sunny today.',
  'Vectors of similar texts are close together.',
  'Cats like to sleep in the sun.',
  'A reranker scores each document against the query.',
];

let embedServer;   // --embeddings --pooling mean --metrics
let tokenServer;   // --embeddings --pooling none
let rerankServer;  // --rerank --metrics
let client;

function synth(preset, out) {
  execFileSync(OKAPI_BIN, ['synth', '--preset', preset, '--layers', '2', '--type', 'F32', '--vocab-from', VOCAB,
    '-o', out], { stdio: ['ignore', 'ignore', 'pipe'] });
}

const norm = (v) => Math.sqrt(v.reduce((s, x) => s + x * x, 0));
function cosine(a, b) {
  let dot = 0;
  for (let i = 0; i < a.length; ++i) dot += a[i] * b[i];
  return dot / (norm(a) * norm(b));
}
function assertClose(a, b, minCosine, what) {
  assert.equal(a.length, b.length, `${what}: lengths`);
  const c = cosine(a, b);
  assert.ok(c >= minCosine, `${what}: cosine ${c} < ${minCosine}`);
}
const metric = (text, name) => Number(new RegExp(`^okapi:${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);

before(async () => {
  if (skip) return;
  synth('all-minilm-l6-v2', BERT);
  synth('bge-reranker-base', RERANKER);
  const common = { slots: 2 };
  [embedServer, tokenServer, rerankServer] = await Promise.all([
    startServer(['--embeddings', '--pooling', 'mean', '--metrics', '--alias', MODEL, '-m', BERT], common),
    startServer(['--embeddings', '--pooling', 'none', '-m', BERT], common),
    startServer(['--rerank', '--metrics', '-m', RERANKER], common),
  ]);
  client = new OpenAI({ baseURL: `${embedServer.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 30_000 });
});

after(async () => {
  await Promise.all([embedServer?.stop(), tokenServer?.stop(), rerankServer?.stop()]);
  rmSync(dir, { recursive: true, force: true });
});

describe('embeddings with the openai client', { skip }, () => {
  test('a string, an array, float and base64 give the same unit vectors', async () => {
    const one = await client.embeddings.create({ model: MODEL, input: TEXTS[0], encoding_format: 'float' });
    assert.equal(one.object, 'list');
    assert.equal(one.model, MODEL);
    assert.equal(one.data.length, 1);
    assert.equal(one.data[0].object, 'embedding');
    assert.equal(one.data[0].index, 0);
    const width = one.data[0].embedding.length;
    const props = (await get(embedServer.base, '/props')).json;
    assert.equal(width, props.embedding_dimensions);
    assert.ok(Math.abs(norm(one.data[0].embedding) - 1) < 1e-5, 'L2-normalized by default');
    assert.ok(one.usage.prompt_tokens > 2 && one.usage.total_tokens === one.usage.prompt_tokens);

    const many = await client.embeddings.create({ model: MODEL, input: TEXTS, encoding_format: 'float' });
    assert.deepEqual(many.data.map((d) => d.index), [0, 1, 2, 3]);
    assertClose(many.data[0].embedding, one.data[0].embedding, 0.999999, 'array vs string');
    assert.ok(cosine(many.data[0].embedding, many.data[1].embedding) < 0.9999, 'different texts differ');

    // Asked explicitly, base64 comes back as text: little-endian float32.
    const b64 = await client.embeddings.create({ model: MODEL, input: TEXTS, encoding_format: 'base64' });
    assert.equal(typeof b64.data[2].embedding, 'string');
    const bytes = Buffer.from(b64.data[2].embedding, 'base64');
    const decoded = Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4));
    assert.deepEqual(decoded, many.data[2].embedding.map((x) => Math.fround(x)));
    // Not asked, the client requests base64 and decodes it itself.
    const implicit = await client.embeddings.create({ model: MODEL, input: TEXTS });
    assert.deepEqual(Array.from(implicit.data[3].embedding), many.data[3].embedding.map((x) => Math.fround(x)));
    assert.equal(implicit.usage.prompt_tokens, many.usage.prompt_tokens);
  });

  test('token ids and arrays of token ids', async () => {
    const tokens = (await post(embedServer.base, '/tokenize', { content: TEXTS[1], add_special: true })).json.tokens;
    const byText = await client.embeddings.create({ model: MODEL, input: TEXTS[1], encoding_format: 'float' });
    const byIds = await client.embeddings.create({ model: MODEL, input: tokens, encoding_format: 'float' });
    assert.equal(byIds.usage.prompt_tokens, tokens.length);
    assertClose(byIds.data[0].embedding, byText.data[0].embedding, 0.999999, 'ids vs text');
    const nested = await client.embeddings.create({ model: MODEL, input: [tokens, tokens.slice(0, 3)] });
    assert.equal(nested.data.length, 2);
    assertClose(Array.from(nested.data[0].embedding), byText.data[0].embedding, 0.999999, 'nested ids');
  });

  test('embd_normalize -1 leaves vectors as pooled', async () => {
    const raw = await post(embedServer.base, '/v1/embeddings', { input: TEXTS[0], embd_normalize: -1 });
    const unit = await post(embedServer.base, '/v1/embeddings', { input: TEXTS[0] });
    assert.equal(raw.status, 200, raw.text);
    const v = raw.json.data[0].embedding;
    assert.ok(Math.abs(norm(v) - 1) > 1e-3, `norm ${norm(v)}`);
    assertClose(v, unit.json.data[0].embedding, 0.999999, 'raw vs normalized');
  });

  test('LangChain OpenAIEmbeddings: embedDocuments and embedQuery', async () => {
    const embeddings = new OpenAIEmbeddings({
      model: MODEL, apiKey: 'none', maxRetries: 0, configuration: { baseURL: `${embedServer.base}/v1` },
    });
    const docs = await embeddings.embedDocuments(TEXTS);
    assert.equal(docs.length, TEXTS.length);
    const query = await embeddings.embedQuery(TEXTS[2]);
    const direct = await client.embeddings.create({ model: MODEL, input: TEXTS[2], encoding_format: 'float' });
    assertClose(query, direct.data[0].embedding, 0.999999, 'embedQuery');
    assertClose(docs[2], query, 0.999999, 'embedDocuments[2] vs embedQuery');
  });
});

describe('native /embeddings', { skip }, () => {
  test('--pooling none: a vector per token, whose mean is the mean-pooled vector', async () => {
    const tokens = (await post(tokenServer.base, '/tokenize', { content: TEXTS[0], add_special: true })).json.tokens;
    const r = await post(tokenServer.base, '/embeddings', { content: TEXTS[0] });
    assert.equal(r.status, 200, r.text);
    assert.ok(Array.isArray(r.json) && r.json.length === 1);
    assert.equal(r.json[0].index, 0);
    const rows = r.json[0].embedding;
    assert.equal(rows.length, tokens.length);
    const width = rows[0].length;
    const mean = Array.from({ length: width }, (_, i) => rows.reduce((s, row) => s + row[i], 0) / rows.length);
    const pooled = (await post(embedServer.base, '/v1/embeddings', { input: TEXTS[0] })).json.data[0].embedding;
    assertClose(mean, pooled, 0.99999, 'mean of the per-token vectors');
    // /embedding (llama-server's legacy name) and `input` answer alike; the OpenAI route refuses none.
    const legacy = await post(tokenServer.base, '/embedding', { input: [TEXTS[0], TEXTS[1]] });
    assert.equal(legacy.json.length, 2);
    assert.deepEqual(legacy.json[0].embedding, rows);
    const oai = await post(tokenServer.base, '/v1/embeddings', { input: TEXTS[0] });
    assert.equal(oai.status, 400);
    assert.match(oai.json.error.message, /not OAI compatible/);
  });

  test('pooled servers answer /embeddings with one row per input', async () => {
    const r = await post(embedServer.base, '/embeddings', { content: TEXTS.slice(0, 2) });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.map((e) => e.embedding.length), [1, 1]);
  });
});

describe('rerank', { skip }, () => {
  test('Jina / Cohere shape: sorted by score, top_n, return_documents, usage; every alias', async () => {
    const r = await post(rerankServer.base, '/v1/rerank', { model: 'rr', query: QUERY, documents: DOCUMENTS });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.object, 'list');
    assert.equal(r.json.model, 'rr');
    assert.ok(r.json.usage.prompt_tokens > DOCUMENTS.length * 4);
    const results = r.json.results;
    assert.equal(results.length, DOCUMENTS.length);
    assert.deepEqual([...results.map((x) => x.index)].sort(), [0, 1, 2, 3, 4]);
    for (let i = 1; i < results.length; ++i) assert.ok(results[i - 1].relevance_score >= results[i].relevance_score);
    assert.ok(results.every((x) => !('document' in x)));

    const top = await post(rerankServer.base, '/rerank', { query: QUERY, documents: DOCUMENTS, top_n: 2,
      return_documents: true });
    assert.deepEqual(top.json.results.map((x) => x.index), results.slice(0, 2).map((x) => x.index));
    assert.equal(top.json.results[0].document.text, DOCUMENTS[results[0].index]);
    for (const route of ['/reranking', '/v1/reranking']) {
      const again = await post(rerankServer.base, route, { query: QUERY, documents: DOCUMENTS.map((text) => ({ text })) });
      assert.deepEqual(again.json.results, results, route);
    }
    // TEI's shape: `texts` in, a bare array with `score` out.
    const tei = await post(rerankServer.base, '/rerank', { query: QUERY, texts: DOCUMENTS, return_text: true });
    assert.ok(Array.isArray(tei.json));
    assert.equal(tei.json[0].score, results[0].relevance_score);
    assert.equal(tei.json[0].text, DOCUMENTS[results[0].index]);
  });

  test('a reranker is refused chat, a chat server refuses rerank and embeddings (501)', async () => {
    const chat = await post(rerankServer.base, '/v1/chat/completions', { messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(chat.status, 501);
    assert.equal(chat.json.error.type, 'not_supported_error');
    const embed = await post(embedServer.base, '/v1/rerank', { query: 'q', documents: ['d'] });
    assert.equal(embed.status, 501);
    assert.match(embed.json.error.message, /does not support reranking\. Start it with `--reranking`/);
  });
});

describe('bad requests', { skip }, () => {
  const expect400 = async (body, pattern, param = 'input', route = '/v1/embeddings', base = embedServer.base) => {
    const r = await post(base, route, body);
    assert.equal(r.status, 400, `${JSON.stringify(body).slice(0, 80)}: ${r.text}`);
    assert.equal(r.json.error.type, 'invalid_request_error');
    if (param !== undefined) assert.equal(r.json.error.param, param);
    assert.match(r.json.error.message, pattern);
    return r.json.error;
  };

  test('missing, empty, ids out of range, wrong types', async () => {
    await expect400({}, /'input' is required/);
    await expect400({ input: '' }, /empty/);
    await expect400({ input: [] }, /empty/);
    await expect400({ input: ['a', '', 'b'] }, /input\[1\] is an empty string/);
    await expect400({ input: [[101, 102], []] }, /input\[1\] has no tokens/);
    await expect400({ input: [101, 99999999] }, /not a token id of this model.*\[0, 30522\)/);
    await expect400({ input: [[101], [-1]] }, /input\[1\]\[0\] = -1/);
    await expect400({ input: 42 }, /must be a string/);
    await expect400({ input: 'a', encoding_format: 'int8' }, /float.*base64/, 'encoding_format');
    await expect400({ input: 'a', dimensions: 7 }, /dimensions/, 'dimensions');
    await expect400({ input: 'a', truncate: 'yes' }, /true or false/, 'truncate');
  });

  test('an input over the pass is a 400 naming it, cut only with truncate: true', async () => {
    const long = 'word '.repeat(600);
    const e = await expect400({ input: ['short', long] }, /input\[1\] has \d+ tokens, more than the 512/);
    assert.equal(e.code, 'context_length_exceeded');
    const cut = await post(embedServer.base, '/v1/embeddings', { input: ['short', long], truncate: true });
    assert.equal(cut.status, 200, cut.text);
    assert.equal(cut.json.data.length, 2);
    const tokens = (await post(embedServer.base, '/tokenize', { content: 'short', add_special: true })).json.tokens;
    assert.equal(cut.json.usage.prompt_tokens, 512 + tokens.length);
    // Rerank the same way.
    await expect400({ query: 'q', documents: ['d', long] }, /documents\[1\]/, 'documents', '/v1/rerank',
      rerankServer.base);
    const rr = await post(rerankServer.base, '/v1/rerank', { query: 'q', documents: ['d', long], truncate: true });
    assert.equal(rr.status, 200, rr.text);
  });

  test('10k inputs in one request: a clear 400 with the limit, and the server goes on', async () => {
    const inputs = Array.from({ length: 10_000 }, (_, i) => `input ${i}`);
    await expect400({ input: inputs }, /10000 inputs; this server takes at most 2048/);
    await expect400({ query: 'q', documents: inputs }, /10000 documents/, 'documents', '/v1/rerank', rerankServer.base);
    // At the limit it is served (a few under the sanitizers' -O0 build, whose passes are slow).
    const n = SANITIZED ? 64 : 2048;
    const ok = await post(embedServer.base, '/v1/embeddings', { input: inputs.slice(0, n) });
    assert.equal(ok.status, 200);
    assert.equal(ok.json.data.length, n);
    assert.equal(ok.json.data[n - 1].index, n - 1);
  });

  test('rerank bodies', async () => {
    const rr = (body, pattern, param) => expect400(body, pattern, param, '/v1/rerank', rerankServer.base);
    await rr({ documents: ['a'] }, /'query' is required/, 'query');
    await rr({ query: 'q', documents: [] }, /non-empty/, 'documents');
    await rr({ query: 'q', documents: [3] }, /documents\[0\] must be a string/, 'documents');
    await rr({ query: 'q', documents: ['a'], top_n: -1 }, /top_n/, 'top_n');
  });

  test('a chat server refuses embeddings (501); --rerank refuses a model without a classifier head', async () => {
    const chat = await startServer([], { slots: 1 });
    try {
      for (const route of ['/v1/embeddings', '/embeddings']) {
        const r = await post(chat.base, route, { input: 'hi' });
        assert.equal(r.status, 501, route);
        assert.equal(r.json.error.type, 'not_supported_error');
        assert.match(r.json.error.message, /does not support embeddings\. Start it with `--embeddings`/);
      }
      const r = await post(chat.base, '/v1/rerank', { query: 'q', documents: ['d'] });
      assert.equal(r.status, 501);
      assert.match(r.json.error.message, /Start it with `--reranking`/);
    } finally {
      await chat.stop();
    }
    await assert.rejects(startServer(['--rerank', '-m', BERT], { slots: 1 }), /classifier head/);
  });
});

describe('batching and cancellation', { skip }, () => {
  test('concurrent requests share passes and get what they get alone', async () => {
    const alone = await Promise.all(TEXTS.map(async (t) =>
      (await post(embedServer.base, '/v1/embeddings', { input: t })).json.data[0].embedding));
    let shared = 0;
    for (let round = 0; round < 5 && shared === 0; ++round) {
      const before = metric((await get(embedServer.base, '/metrics')).text, 'embedding_passes_shared_total');
      const results = await Promise.all(Array.from({ length: 12 }, (_, i) =>
        post(embedServer.base, '/v1/embeddings', { input: [TEXTS[i % 4], TEXTS[(i + 1) % 4]] })));
      results.forEach((r, i) => {
        assert.equal(r.status, 200, r.text);
        assertClose(r.json.data[0].embedding, alone[i % 4], 0.999999, `request ${i}`);
        assertClose(r.json.data[1].embedding, alone[(i + 1) % 4], 0.999999, `request ${i}`);
      });
      shared = metric((await get(embedServer.base, '/metrics')).text, 'embedding_passes_shared_total') - before;
    }
    assert.ok(shared > 0, 'some pass held inputs of several requests');
    const m = (await get(embedServer.base, '/metrics')).text;
    assert.ok(metric(m, 'embedding_requests_total') >= 16);
    assert.ok(metric(m, 'prompt_tokens_total') > 0);
    assert.equal(metric(m, 'embedding_tokens_total'), metric(m, 'prompt_tokens_total'));
  });

  test('a client that hangs up cancels what is not started; others are served', async () => {
    const before = metric((await get(rerankServer.base, '/metrics')).text, 'requests_cancelled_total');
    // ~100k tokens: seconds of work that the hang-up must drop.
    const documents = Array.from({ length: 2048 }, (_, i) => `document number ${i} ${'text '.repeat(40)}`);
    const controller = new AbortController();
    const abandoned = post(rerankServer.base, '/v1/rerank', { query: QUERY, documents }, { signal: controller.signal })
      .catch((e) => e);
    await sleep(300);
    controller.abort();
    assert.equal((await abandoned).name, 'AbortError');
    const started = Date.now();
    const r = await post(rerankServer.base, '/v1/rerank', { query: QUERY, documents: DOCUMENTS.slice(0, 2) });
    assert.equal(r.status, 200);
    let cancelled = 0;
    for (const deadline = Date.now() + (SANITIZED ? 60_000 : 5_000); Date.now() < deadline && cancelled === 0;) {
      cancelled = metric((await get(rerankServer.base, '/metrics')).text, 'requests_cancelled_total') - before;
      if (!cancelled) await sleep(100);
    }
    assert.equal(cancelled, 1);
    // The pass under way finishes (a fraction of a second; more under the sanitizers), not the rest.
    assert.ok(Date.now() - started < (SANITIZED ? 60_000 : 5_000));
    assert.equal(metric((await get(rerankServer.base, '/metrics')).text, 'requests_processing'), 0);
  });
});

describe('mode in /props, /v1/models, /health', { skip }, () => {
  test('embeddings and reranking servers say so', async () => {
    const props = (await get(embedServer.base, '/props')).json;
    assert.equal(props.embeddings, true);
    assert.equal(props.reranking, false);
    assert.equal(props.pooling, 'mean');
    assert.equal(props.max_input_tokens, 512);
    const rprops = (await get(rerankServer.base, '/props')).json;
    assert.equal(rprops.reranking, true);
    assert.equal(rprops.pooling, 'rank');
    const models = (await get(embedServer.base, '/v1/models')).json;
    assert.equal(models.data[0].id, MODEL);
    assert.equal(models.data[0].meta.embedding_dimensions, props.embedding_dimensions);
    assert.equal((await get(embedServer.base, '/health')).status, 200);
    assert.deepEqual((await get(embedServer.base, '/slots')).json, []);
  });
});

// llama-server on the same files, one at a time. Its flash attention (on by default) rounds
// through f16 on CPUs, which moves rerank scores by ~1e-3: off, it computes in f32 as okapi does.
async function withLlamaServer(args, fn) {
  const port = await freePort();
  const child = spawn(LLAMA_SERVER, ['--host', '127.0.0.1', '--port', String(port), '-t', '2', '-np', '1',
    '--no-webui', '-fa', 'off', ...args], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  child.stderr.on('data', (d) => { log += d; });
  const base = `http://127.0.0.1:${port}`;
  try {
    const deadline = Date.now() + 60_000;
    for (;;) {
      if (child.exitCode !== null) throw new Error(`llama-server exited ${child.exitCode}:\n${log.slice(-3000)}`);
      try {
        if ((await fetch(`${base}/health`)).status === 200) break;
      } catch { /* not listening yet */ }
      if (Date.now() > deadline) throw new Error(`llama-server not ready:\n${log.slice(-3000)}`);
      await sleep(100);
    }
    return await fn(base);
  } finally {
    child.kill('SIGKILL');
  }
}

describe('side by side with llama-server', { skip: peersSkip }, () => {
  test('/v1/embeddings: cosine >= 0.99999 per input', async () => {
    const ours = (await post(embedServer.base, '/v1/embeddings', { input: TEXTS })).json.data;
    const theirs = await withLlamaServer(['-m', BERT, '--embeddings', '--pooling', 'mean'], async (base) =>
      (await post(base, '/v1/embeddings', { input: TEXTS })).json.data);
    assert.equal(theirs.length, TEXTS.length);
    for (let i = 0; i < TEXTS.length; ++i) assertClose(ours[i].embedding, theirs[i].embedding, 0.99999, `input ${i}`);
  });

  test('/v1/rerank: the same order, scores within 1e-4', async () => {
    const ours = (await post(rerankServer.base, '/v1/rerank', { query: QUERY, documents: DOCUMENTS })).json.results;
    const theirs = await withLlamaServer(['-m', RERANKER, '--rerank'], async (base) =>
      (await post(base, '/v1/rerank', { query: QUERY, documents: DOCUMENTS })).json.results);
    assert.deepEqual(ours.map((r) => r.index), theirs.map((r) => r.index));
    for (let i = 0; i < ours.length; ++i)
      assert.ok(Math.abs(ours[i].relevance_score - theirs[i].relevance_score) < 1e-4,
        `${ours[i].relevance_score} vs ${theirs[i].relevance_score}`);
  });
});
