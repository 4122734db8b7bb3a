// llama-server's template flags end to end: --chat-template NAME (a llama.cpp built-in),
// --no-jinja (the built-in a template resembles; one resembling none is refused at startup),
// --reasoning off (enable_thinking false closes the thinking block in the prompt), the date
// variables, and CORS's default (any origin reflected, as llama-server).
import { test, describe, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { startServer, post, repoRoot, OKAPI_BIN, OKAPI_MODEL } from './support.mjs';

const servers = [];
after(async () => { for (const s of servers) await s.stop(); });
const start = async (args) => { const s = await startServer(args, { ctx: 512, slots: 1 }); servers.push(s); return s; };
const messages = [{ role: 'system', content: 'You are a test.' }, { role: 'user', content: 'Hi there' }];
const R1 = path.join(repoRoot, 'tests/data/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja');

describe('template flags', () => {
  test('--chat-template command-r renders as llama.cpp', async () => {
    const { base } = await start(['--chat-template', 'command-r']);
    const res = await post(base, '/apply-template', { messages });
    assert.equal(res.status, 200, res.text);
    assert.equal(res.json.prompt, '<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>You are a test.<|END_OF_TURN_TOKEN|>' +
      '<|START_OF_TURN_TOKEN|><|USER_TOKEN|>Hi there<|END_OF_TURN_TOKEN|><|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>');
  });

  test('--no-jinja reads a Llama 3 template as llama3; an unknown name or template is refused', async () => {
    const file = path.join(repoRoot, 'tests/data/chat/meta-llama-Llama-3.1-8B-Instruct.jinja');
    const { base } = await start(['--no-jinja', '--chat-template-file', file]);
    const res = await post(base, '/apply-template', { messages });
    assert.equal(res.status, 200, res.text);
    assert.ok(res.json.prompt.startsWith('<|start_header_id|>system<|end_header_id|>\n\nYou are a test.<|eot_id|>'),
      res.json.prompt);
    assert.ok(!res.json.prompt.includes('Cutting Knowledge'), 'the built-in, not the Jinja template');
    const tools = [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }];
    const refused = await post(base, '/v1/chat/completions', { messages, tools, max_tokens: 1 });
    assert.equal(refused.status, 400, refused.text);
    assert.match(refused.text, /--no-jinja/);
    for (const args of [['--chat-template', 'llama5'], ['--no-jinja', '--chat-template', 'not a template {{ x }}']]) {
      const r = spawnSync(OKAPI_BIN, ['serve', '-m', OKAPI_MODEL, '--port', '0', ...args], { encoding: 'utf8', timeout: 30_000 });
      assert.notEqual(r.status, 0, r.stderr);
      assert.match(r.stderr, /okapi: error: .*(built-in|--no-jinja)/, r.stderr);
    }
  });

  test('--reasoning off closes the thinking block; a request can reopen it', async () => {
    const { base } = await start(['--chat-template-file', R1, '--reasoning', 'off']);
    const off = await post(base, '/apply-template', { messages: [{ role: 'user', content: 'Hi' }] });
    assert.equal(off.status, 200, off.text);
    assert.ok(off.json.prompt.endsWith('<think>\n</think>'), JSON.stringify(off.json.prompt));
    const on = await post(base, '/apply-template', {
      messages: [{ role: 'user', content: 'Hi' }], chat_template_kwargs: { enable_thinking: true } });
    assert.ok(on.json.prompt.endsWith('<think>\n'), JSON.stringify(on.json.prompt));
  });

  test('templates get today\'s date as llama-server gives it; CORS by default reflects any origin', async () => {
    const { base } = await start(['--chat-template', '{{ date_string }}|{{ datetime }}']);
    const dated = await post(base, '/apply-template', { messages });
    const now = new Date();
    const mon = now.toLocaleString('en-US', { month: 'short' });
    const dd = String(now.getDate()).padStart(2, '0');
    assert.equal(dated.json.prompt, `${dd} ${mon} ${now.getFullYear()}|${mon} ${dd} ${now.getFullYear()}`);

    const pre = await fetch(`${base}/v1/chat/completions`, {
      method: 'OPTIONS', headers: { Origin: 'https://web.example', 'Access-Control-Request-Method': 'POST' } });
    assert.equal(pre.status, 200);
    assert.equal(pre.headers.get('access-control-allow-origin'), 'https://web.example');
    assert.equal(pre.headers.get('access-control-allow-credentials'), 'true');
    const plain = await fetch(`${base}/v1/models`);
    assert.equal(plain.headers.get('access-control-allow-origin'), null, 'no Origin: not a CORS request');
  });
});
