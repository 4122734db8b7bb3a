// Anthropic's Messages API against `okapi serve`, with the official `@anthropic-ai/sdk` client:
// messages.create and messages.stream (events, final message), stop_sequences, count_tokens, a
// tool round trip with Qwen 2.5's real template (tool_use -> tool_result -> answer; the grammar
// forces valid calls whatever the tiny model would say), thinking blocks with DeepSeek R1's
// template, and errors as the SDK's error classes. The model is the bundled stories260K.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { Validator } from '@cfworker/json-schema';
import path from 'node:path';
import { post, repoRoot, startServer } from './support.mjs';

const QWEN = path.join(repoRoot, 'tests/data/templates/Qwen-Qwen2.5-7B-Instruct.jinja');
const R1 = path.join(repoRoot, 'tests/data/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja');
const KEY = 'sk-ant-test';
let server;
let client;

before(async () => {
  // Tool definitions take ~900 tokens of this small vocabulary: 2048 a slot.
  server = await startServer(['--chat-template-file', QWEN, '--alias', 'stories', '--api-key', KEY], { ctx: 4096, slots: 2 });
  // The SDK sends the key as x-api-key, with anthropic-version.
  client = new Anthropic({ baseURL: server.base, apiKey: KEY, maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  await server?.stop();
});

const weatherSchema = {
  type: 'object',
  properties: {
    location: { type: 'string', minLength: 1, maxLength: 12 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['location', 'unit'],
  additionalProperties: false,
};
const tools = [{ name: 'get_weather', description: 'Weather forecast', input_schema: weatherSchema }];
const question = [{ role: 'user', content: 'What is the weather in Paris?' }];

function checkUsage(usage) {
  for (const key of ['input_tokens', 'cache_read_input_tokens', 'output_tokens']) assert.ok(Number.isInteger(usage[key]), key);
  assert.ok(usage.input_tokens + usage.cache_read_input_tokens > 0);
  assert.ok(usage.output_tokens > 0);
}

describe('messages', () => {
  test('messages.create answers a text block with usage', async () => {
    const m = await client.messages.create({
      model: 'claude-x', max_tokens: 30, system: 'You tell stories.', messages: [{ role: 'user', content: 'Say hello' }],
    });
    assert.match(m.id, /^msg_/);
    assert.equal(m.type, 'message');
    assert.equal(m.role, 'assistant');
    assert.equal(m.model, 'stories');
    assert.equal(m.content[0].type, 'text');
    assert.ok(m.content[0].text.length > 0);
    assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason), m.stop_reason);
    assert.equal(m.stop_sequence, null);
    checkUsage(m.usage);
    assert.equal(m.timings, undefined);
  });

  test('stop_sequences end the answer with stop_reason "stop_sequence" naming it', async () => {
    const m = await client.messages.create({
      model: 'x', max_tokens: 200, stop_sequences: ['zzz', 'e'], messages: [{ role: 'user', content: 'Tell a story' }],
    });
    assert.equal(m.stop_reason, 'stop_sequence', JSON.stringify(m));
    assert.equal(m.stop_sequence, 'e');
    assert.ok(!m.content.some((b) => b.text.includes('e')), 'the text ends before the stop sequence');
  });

  test('messages.stream: the events and the final message agree', async () => {
    const stream = client.messages.stream({
      model: 'x', max_tokens: 25, temperature: 0.5, top_k: 40, top_p: 0.9, metadata: { user_id: 'u1' },
      messages: [{ role: 'user', content: 'Once upon a time' }],
    });
    const types = [];
    let text = '';
    stream.on('streamEvent', (event) => types.push(event.type));
    stream.on('text', (delta) => { text += delta; });
    const final = await stream.finalMessage();
    assert.equal(types[0], 'message_start');
    assert.equal(types.at(-1), 'message_stop');
    assert.equal(types.at(-2), 'message_delta');
    assert.deepEqual([...new Set(types)],
      ['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
    assert.equal(final.content.length, 1);
    assert.equal(final.content[0].type, 'text');
    assert.equal(final.content[0].text, text);
    assert.ok(text.length > 0);
    assert.ok(['end_turn', 'max_tokens'].includes(final.stop_reason));
    checkUsage(final.usage);
  });

  test('count_tokens counts the prompt a generation runs', async () => {
    const body = { model: 'x', system: 'Be brief.', messages: question, tools };
    const counted = await client.messages.countTokens(body);
    assert.deepEqual(Object.keys(counted), ['input_tokens']);
    const m = await client.messages.create({ ...body, max_tokens: 3, tool_choice: { type: 'none' } });
    assert.equal(counted.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
    const shorter = await client.messages.countTokens({ model: 'x', messages: question });
    assert.ok(shorter.input_tokens < counted.input_tokens, 'tools and system are counted');
  });
});

describe('tools', () => {
  function checkToolUse(block) {
    assert.equal(block.type, 'tool_use');
    assert.match(block.id, /^toolu_/);
    assert.equal(block.name, 'get_weather');
    const result = new Validator(weatherSchema, '2020-12').validate(block.input);
    assert.ok(result.valid, `input ${JSON.stringify(block.input)}: ${JSON.stringify(result.errors)}`);
  }

  test('tool_use -> tool_result -> an answer', async () => {
    const first = await client.messages.create({
      model: 'x', max_tokens: 200, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: question,
    });
    assert.equal(first.stop_reason, 'tool_use', JSON.stringify(first));
    const calls = first.content.filter((b) => b.type === 'tool_use');
    assert.ok(calls.length >= 1);
    for (const call of calls) checkToolUse(call);
    assert.ok(!first.content.some((b) => b.type === 'text' && b.text.includes('<tool_call>')), 'no call markup in text');

    const answer = await client.messages.create({
      model: 'x', max_tokens: 30, tools, messages: [
        ...question,
        { role: 'assistant', content: first.content },
        { role: 'user', content: calls.map((c) => ({ type: 'tool_result', tool_use_id: c.id, content: 'Sunny, 25 C' })) },
      ],
      tool_choice: { type: 'none' },
    });
    assert.equal(answer.content[0].type, 'text');
    assert.ok(['end_turn', 'max_tokens'].includes(answer.stop_reason));
    // The call and its result reach the template (Qwen's <tool_call> and <tool_response>).
    const counted = await client.messages.countTokens({
      model: 'x', tools, messages: [
        ...question,
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: calls[0].id, content: 'Sunny, 25 C', is_error: false }] },
      ],
    });
    const without = await client.messages.countTokens({ model: 'x', tools, messages: question });
    assert.ok(counted.input_tokens > without.input_tokens + 10);
  });

  test('streamed tool_use: id and name first, then input_json_delta pieces', async () => {
    const stream = client.messages.stream({
      model: 'x', max_tokens: 200, tools, tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
      messages: question,
    });
    let json = '';
    const starts = [];
    stream.on('streamEvent', (event) => {
      if (event.type === 'content_block_start') starts.push(event);
      if (event.type === 'content_block_delta' && event.delta.type === 'input_json_delta') json += event.delta.partial_json;
    });
    const final = await stream.finalMessage();
    assert.equal(final.stop_reason, 'tool_use');
    const call = final.content.find((b) => b.type === 'tool_use');
    checkToolUse(call);
    assert.deepEqual(JSON.parse(json), call.input);
    assert.deepEqual(starts.map((s) => s.index), starts.map((_, i) => i), 'blocks are indexed in order');
    const start = starts.find((s) => s.content_block.type === 'tool_use');
    assert.equal(start.content_block.id, call.id);
    assert.equal(start.content_block.name, 'get_weather');
  });
});

// DeepSeek R1's template opens the reasoning block in the prompt: the reasoning comes back as a
// thinking block, its budget (budget_tokens) ends it, and the answer follows as text.
describe('thinking', () => {
  let thinking;
  let thinkingClient;
  before(async () => {
    thinking = await startServer(['--chat-template-file', R1], { ctx: 2048, slots: 2 });
    thinkingClient = new Anthropic({ baseURL: thinking.base, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
  });
  after(async () => {
    await thinking?.stop();
  });
  const body = { model: 'x', max_tokens: 40, thinking: { type: 'enabled', budget_tokens: 10 }, messages: question };

  test('a thinking block (with a signature) comes before the text', async () => {
    const m = await thinkingClient.messages.create(body);
    assert.deepEqual(m.content.map((b) => b.type), ['thinking', 'text'], JSON.stringify(m.content));
    assert.ok(m.content[0].thinking.length > 0);
    assert.equal(m.content[0].signature, '');
    assert.ok(!m.content[0].thinking.includes('</think>') && !m.content[1].text.includes('</think>'));
  });

  test('streamed: thinking_delta, signature_delta, then the text block', async () => {
    const stream = thinkingClient.messages.stream(body);
    const deltas = [];
    stream.on('streamEvent', (event) => {
      if (event.type === 'content_block_delta') deltas.push(`${event.index}:${event.delta.type}`);
    });
    let thought = '';
    stream.on('thinking', (delta) => { thought += delta; });
    const final = await stream.finalMessage();
    assert.deepEqual(final.content.map((b) => b.type), ['thinking', 'text']);
    assert.equal(final.content[0].thinking, thought);
    const signature = deltas.indexOf('0:signature_delta');
    assert.ok(signature > 0 && deltas.slice(0, signature).every((d) => d === '0:thinking_delta'), deltas.join(' '));
    assert.ok(deltas.slice(signature + 1).every((d) => d === '1:text_delta'), deltas.join(' '));
  });

  test('thinking disabled: no thinking block', async () => {
    const m = await thinkingClient.messages.create({ ...body, thinking: { type: 'disabled' } });
    assert.ok(!m.content.some((b) => b.type === 'thinking'), JSON.stringify(m.content));
  });

  test('thinking blocks in the history reach the template', async () => {
    const history = (content) => ({
      model: 'x', messages: [...question, { role: 'assistant', content }, { role: 'user', content: 'And tomorrow?' }],
    });
    const plain = await thinkingClient.messages.countTokens(history([{ type: 'text', text: 'Sunny.' }]));
    const withThinking = await thinkingClient.messages.countTokens(
      history([{ type: 'thinking', thinking: 'Paris in June is warm.', signature: '' }, { type: 'text', text: 'Sunny.' }]));
    // R1's template drops the reasoning of earlier turns; the count must not fail on it.
    assert.ok(withThinking.input_tokens >= plain.input_tokens);
  });
});

describe('errors', () => {
  test('a bad request is a BadRequestError with Anthropic\'s error body', async () => {
    await assert.rejects(
      client.messages.create({ model: 'x', max_tokens: 5, messages: question, tool_choice: { type: 'sometimes' } }),
      (e) => {
        assert.ok(e instanceof Anthropic.BadRequestError, e.constructor.name);
        assert.equal(e.status, 400);
        assert.equal(e.error.type, 'error');
        assert.equal(e.error.error.type, 'invalid_request_error');
        assert.match(e.error.error.message, /tool_choice\.type/);
        return true;
      });
    await assert.rejects(client.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'tool', content: 'x' }] }),
      Anthropic.BadRequestError);
    await assert.rejects(client.messages.create({ model: 'x', max_tokens: 0, messages: question }), Anthropic.BadRequestError);
  });

  test('a wrong key is an AuthenticationError', async () => {
    const wrong = new Anthropic({ baseURL: server.base, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(wrong.messages.create({ model: 'x', max_tokens: 5, messages: question }), (e) => {
      assert.ok(e instanceof Anthropic.AuthenticationError, e.constructor.name);
      assert.equal(e.error.error.type, 'authentication_error');
      return true;
    });
  });

  test('an image is refused with 500, as llama-server without a projector', async () => {
    const image = { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0KGgo=' } };
    await assert.rejects(
      client.messages.create({ model: 'x', max_tokens: 5, messages: [{ role: 'user', content: [image, { type: 'text', text: 'What?' }] }] }),
      (e) => {
        assert.ok(e instanceof Anthropic.InternalServerError, e.constructor.name);
        assert.match(e.error.error.message, /image input is not supported/);
        return true;
      });
  });

  test('malformed JSON is a 400 in Anthropic\'s shape', async () => {
    const r = await post(server.base, '/v1/messages', '{"messages": [', { headers: { 'x-api-key': KEY } });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.type, 'error');
    assert.equal(r.json.error.type, 'invalid_request_error');
  });
});
