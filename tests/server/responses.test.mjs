// OpenAI's Responses API against `okapi serve` with the official `openai` client: responses.create
// streaming and not, the SDK's stream helper, previous_response_id, a function tool round trip,
// input_tokens, and llama-server's telemetry (return_progress, timings_per_token); then the chat
// completion details llama-server's own tests check (the role-only first chunk, the over-long
// prompt's error, prefill and continue_final_message, __verbose). The model is the bundled
// stories260K with Qwen 2.5's chat template, whose grammar forces valid tool calls.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import path from 'node:path';
import { post, repoRoot, startServer } from './support.mjs';

const TEMPLATE = path.join(repoRoot, 'tests/data/templates/Qwen-Qwen2.5-7B-Instruct.jinja');
let server;
let client;

before(async () => {
  server = await startServer(['--chat-template-file', TEMPLATE, '--alias', 'stories'], { ctx: 4096, slots: 2 });
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  await server?.stop();
});

const input = [
  { role: 'system', content: 'You tell short stories.' },
  { role: 'user', content: 'Tell me a story about a cat.' },
];

function checkUsage(u) {
  assert.ok(u.input_tokens > 0);
  assert.ok(u.output_tokens > 0);
  assert.equal(u.total_tokens, u.input_tokens + u.output_tokens);
  assert.equal(typeof u.input_tokens_details.cached_tokens, 'number');
}

// The server-sent events of a raw POST /v1/responses: [{event, data}].
async function rawEvents(body) {
  const res = await fetch(`${server.base}/v1/responses`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type'), /text\/event-stream/);
  const text = await res.text();
  assert.ok(!text.includes('[DONE]'), 'the Responses API ends with response.completed, not [DONE]');
  return text.trim().split('\n\n').map((block) => {
    const [eventLine, dataLine] = block.split('\n');
    return { event: eventLine.replace(/^event: /, ''), data: JSON.parse(dataLine.replace(/^data: /, '')) };
  });
}

describe('responses', () => {
  test('responses.create: a message item with output_text and usage', async () => {
    const r = await client.responses.create({
      model: 'stories', input, max_output_tokens: 12, temperature: 0, instructions: 'Be brief.',
    });
    assert.match(r.id, /^resp_/);
    assert.equal(r.object, 'response');
    assert.equal(r.status, 'completed');
    assert.equal(r.output.length, 1);
    const [item] = r.output;
    assert.equal(item.type, 'message');
    assert.match(item.id, /^msg_/);
    assert.equal(item.role, 'assistant');
    assert.equal(item.content[0].type, 'output_text');
    assert.ok(r.output_text.length > 0);
    assert.equal(r.output_text, item.content[0].text);
    assert.equal(r.instructions, 'Be brief.');
    assert.equal(r.max_output_tokens, 12);
    assert.deepEqual(r.incomplete_details, { reason: 'max_output_tokens' });
    checkUsage(r.usage);
    assert.equal(r.usage.output_tokens, 12);
  });

  test('streamed: the events in order, with sequence numbers, and the deltas make the text', async () => {
    const stream = await client.responses.create({ model: 'stories', input, max_output_tokens: 12, temperature: 0, stream: true });
    const events = [];
    for await (const e of stream) events.push(e);
    const types = events.map((e) => e.type);
    assert.deepEqual(types.slice(0, 4),
      ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    assert.deepEqual(types.slice(-4),
      ['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
    assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
    const msgId = events[2].item.id;
    assert.match(msgId, /^msg_/);
    const deltas = events.filter((e) => e.type === 'response.output_text.delta');
    assert.ok(deltas.length > 0);
    for (const d of deltas) assert.equal(d.item_id, msgId);
    const text = deltas.map((d) => d.delta).join('');
    const completed = events.at(-1).response;
    assert.equal(completed.id, events[0].response.id);
    assert.equal(completed.output[0].id, msgId);
    assert.equal(completed.output[0].content[0].text, text);
    assert.equal(events.at(-4).text, text);
    checkUsage(completed.usage);

    // The same request, not streamed: the same text (temperature 0).
    const whole = await client.responses.create({ model: 'stories', input, max_output_tokens: 12, temperature: 0 });
    assert.equal(whole.output_text, text);
  });

  test("the SDK's stream helper accumulates the final response", async () => {
    const stream = client.responses.stream({ model: 'stories', input, max_output_tokens: 10, temperature: 0 });
    let text = '';
    stream.on('response.output_text.delta', (e) => { text += e.delta; });
    const final = await stream.finalResponse();
    assert.equal(final.output_text, text);
    assert.match(final.output[0].id, /^msg_/);
  });

  test('previous_response_id continues the stored conversation', async () => {
    const first = await client.responses.create({ model: 'stories', input, max_output_tokens: 8, temperature: 0 });
    const second = await client.responses.create({
      model: 'stories', previous_response_id: first.id, input: 'And then?', max_output_tokens: 8, temperature: 0,
    });
    assert.equal(second.previous_response_id, first.id);
    // The second prompt holds the first turn, its answer and the new question.
    assert.ok(second.usage.input_tokens > first.usage.input_tokens + first.usage.output_tokens,
      `${second.usage.input_tokens} > ${first.usage.input_tokens} + ${first.usage.output_tokens}`);
    const counted = await post(server.base, '/v1/responses/input_tokens', { previous_response_id: first.id, input: 'And then?' });
    assert.equal(counted.status, 200);
    assert.equal(counted.json.input_tokens, second.usage.input_tokens);

    await assert.rejects(
      client.responses.create({ model: 'stories', previous_response_id: 'resp_unknown', input: 'Hi' }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
  });

  test('a function tool round trip: function_call item, then function_call_output', async () => {
    const tools = [{
      type: 'function',
      name: 'get_weather',
      description: 'Weather forecast',
      parameters: {
        type: 'object',
        properties: { location: { type: 'string', minLength: 1, maxLength: 12 } },
        required: ['location'],
        additionalProperties: false,
      },
    }];
    const question = [{ role: 'user', content: 'What is the weather in Paris?' }];
    const r = await client.responses.create({
      model: 'stories', input: question, tools, tool_choice: 'required', max_output_tokens: 100, seed: 1,
    });
    const call = r.output.find((item) => item.type === 'function_call');
    assert.ok(call, `a function_call item in ${JSON.stringify(r.output)}`);
    assert.match(call.id, /^fc_/);
    assert.equal(call.name, 'get_weather');
    assert.ok(call.call_id.length > 0);
    assert.equal(typeof JSON.parse(call.arguments).location, 'string');

    // Streamed, the call's arguments come as deltas that make the arguments of the done item.
    const stream = await client.responses.create({
      model: 'stories', input: question, tools, tool_choice: 'required', max_output_tokens: 100, seed: 1, stream: true,
    });
    let args = '';
    let done = null;
    for await (const e of stream) {
      if (e.type === 'response.function_call_arguments.delta') args += e.delta;
      if (e.type === 'response.output_item.done' && e.item.type === 'function_call') done = e.item;
    }
    assert.ok(done);
    assert.equal(done.arguments, args);
    assert.equal(done.arguments, call.arguments);

    // The result goes back as function_call_output; the model answers in text.
    const answer = await client.responses.create({
      model: 'stories', tools, max_output_tokens: 8, temperature: 0,
      input: [...question, call, { type: 'function_call_output', call_id: call.call_id, output: '{"sky": "clear"}' }],
    });
    assert.equal(answer.status, 'completed');
    assert.ok(answer.usage.input_tokens > r.usage.input_tokens);
  });

  test("llama-server's telemetry: prompt_progress, timings on deltas and beside response.completed", async () => {
    const events = await rawEvents({
      input: 'This is a test '.repeat(20), max_output_tokens: 4, temperature: 0, timings_per_token: true, return_progress: true,
    });
    for (const { event, data } of events) assert.equal(event, data.type);
    const progress = events.filter((e) => e.data.prompt_progress).map((e) => e.data);
    assert.ok(progress.length >= 2);
    for (const p of progress) {
      assert.equal(p.type, 'response.in_progress');
      assert.ok(p.prompt_progress.processed >= p.prompt_progress.cache);
    }
    assert.equal(progress.at(-1).prompt_progress.processed, progress.at(-1).prompt_progress.total);
    assert.ok(events.some((e) => e.data.type === 'response.output_text.delta' && e.data.timings?.predicted_per_second !== undefined));
    const completed = events.at(-1).data;
    assert.equal(completed.type, 'response.completed');
    assert.equal(typeof completed.timings.prompt_per_second, 'number');
  });

  test('malformed requests are 400s naming the field', async () => {
    for (const [body, param] of [
      [{}, 'input'],
      [{ input: 42 }, 'input'],
      [{ input: [{ type: 'bogus' }] }, 'input[0]'],
      [{ input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'x' }] }] }, 'input[0].content[0]'],
      [{ input: 'hi', tools: [{ type: 'web_search' }] }, 'tools[0]'],
      [{ input: 'hi', max_output_tokens: 0 }, 'max_output_tokens'],
      [{ input: [{ type: 'function_call', name: 'f' }] }, 'input[0]'],
    ]) {
      const r = await post(server.base, '/v1/responses', body);
      assert.equal(r.status, 400, JSON.stringify(body));
      assert.equal(r.json.error.param, param, JSON.stringify(r.json));
    }
  });
});

describe('reasoning', () => {
  // QwQ's template opens <think> in the prompt: what the model writes first is reasoning.
  let thinking;
  before(async () => {
    thinking = await startServer(['--chat-template-file', path.join(repoRoot, 'tests/data/templates/Qwen-QwQ-32B.jinja')],
      { ctx: 1024, slots: 1 });
  });
  after(async () => { await thinking?.stop(); });

  test('the reasoning parser gives a reasoning item, streamed as reasoning_text deltas', async () => {
    const thinker = new OpenAI({ baseURL: `${thinking.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
    const r = await thinker.responses.create({ model: 'any', input: 'Why?', max_output_tokens: 8, temperature: 0 });
    const item = r.output[0];
    assert.equal(item.type, 'reasoning', JSON.stringify(r.output));
    assert.match(item.id, /^rs_/);
    assert.ok(item.content[0].text.length > 0);
    assert.ok(!item.content[0].text.includes('<think>'));

    const stream = await thinker.responses.create({ model: 'any', input: 'Why?', max_output_tokens: 8, temperature: 0, stream: true });
    let text = '';
    let done = null;
    for await (const e of stream) {
      if (e.type === 'response.reasoning_text.delta') text += e.delta;
      if (e.type === 'response.output_item.done' && e.item.type === 'reasoning') done = e.item;
    }
    assert.equal(text, item.content[0].text);
    assert.equal(done.content[0].text, text);
  });
});

describe('input_tokens', () => {
  test('/v1/chat/completions/input_tokens counts the prompt a chat completion runs', async () => {
    const messages = [{ role: 'user', content: 'Tell me a story about a cat.' }];
    const counted = await post(server.base, '/v1/chat/completions/input_tokens', { messages });
    assert.equal(counted.status, 200);
    const r = await client.chat.completions.create({ model: 'stories', messages, max_tokens: 1 });
    assert.equal(counted.json.input_tokens, r.usage.prompt_tokens);
    const bad = await post(server.base, '/chat/completions/input_tokens', { messages: 'nope' });
    assert.equal(bad.status, 400);
  });
});

// The data lines of a raw streamed chat completion, [DONE] left out.
async function chatChunks(body) {
  const res = await fetch(`${server.base}/v1/chat/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ ...body, stream: true }),
  });
  assert.equal(res.status, 200);
  return (await res.text()).split('\n').filter((l) => l.startsWith('data: ') && !l.includes('[DONE]'))
    .map((l) => JSON.parse(l.slice(6)));
}

describe("chat completions as llama-server's tests read them", () => {
  const messages = [{ role: 'user', content: 'This is a test. '.repeat(12) }];

  test('the first chunk has only the role; timings_per_token puts timings on the others', async () => {
    const chunks = await chatChunks({ messages, max_tokens: 6, temperature: 0, timings_per_token: true });
    assert.deepEqual(chunks[0].choices[0].delta, { role: 'assistant', content: null });
    assert.ok(!('timings' in chunks[0]));
    assert.match(chunks[0].system_fingerprint, /^b/);
    const rest = chunks.slice(1);
    assert.ok(rest.length >= 2);
    for (const c of rest) {
      assert.ok(!('role' in c.choices[0].delta), JSON.stringify(c));
      assert.equal(typeof c.timings?.predicted_n, 'number', JSON.stringify(c));
    }
  });

  test('return_progress: prompt_progress chunks from the cache to the whole prompt', async () => {
    for (const round of [0, 1]) {  // the second round finds the prompt in the cache
      const chunks = await chatChunks({ messages, max_tokens: 4, temperature: 0, return_progress: true });
      const progress = chunks.filter((c) => c.prompt_progress).map((c) => c.prompt_progress);
      assert.ok(progress.length >= 2, JSON.stringify(progress));
      assert.equal(progress[0].cache, progress[0].processed);
      if (round === 1) assert.ok(progress[0].cache > 0);
      for (let i = 1; i < progress.length; ++i) {
        assert.equal(progress[i].total, progress[0].total);
        assert.equal(progress[i].cache, progress[0].cache);
        assert.ok(progress[i].processed > progress[i - 1].processed);
      }
      assert.equal(progress.at(-1).processed, progress.at(-1).total);
    }
  });

  test('an over-long prompt: 400 exceed_context_size_error with n_prompt_tokens and n_ctx', async () => {
    const long = [{ role: 'user', content: 'What is the best book? '.repeat(400) }];
    for (const stream of [false, true]) {
      const r = await post(server.base, '/v1/chat/completions', { messages: long, stream });
      assert.equal(r.status, 400);
      assert.equal(r.json.error.type, 'exceed_context_size_error');
      assert.equal(r.json.error.code, 'context_length_exceeded');
      assert.ok(r.json.error.n_prompt_tokens > 2048);
      assert.equal(r.json.error.n_ctx, 2048);  // -c 4096 over 2 slots
    }
  });

  test('a final assistant message is continued; __verbose shows the prompt', async () => {
    const prefill = [...messages, { role: 'assistant', content: 'Once upon' }];
    const r = await post(server.base, '/v1/chat/completions', { messages: prefill, max_tokens: 2, verbose: true });
    assert.equal(r.status, 200);
    assert.ok(r.json.__verbose.prompt.endsWith('<|im_start|>assistant\nOnce upon'), r.json.__verbose.prompt);
    const same = await post(server.base, '/v1/chat/completions', {
      messages: prefill, max_tokens: 2, verbose: true, add_generation_prompt: false, continue_final_message: true,
    });
    assert.equal(same.json.__verbose.prompt, r.json.__verbose.prompt);
    const quiet = await post(server.base, '/v1/chat/completions', { messages: prefill, max_tokens: 2 });
    assert.ok(!('__verbose' in quiet.json));

    for (const body of [
      { messages: prefill, continue_final_message: true },  // add_generation_prompt is true by default
      { messages: [...prefill, { role: 'assistant', content: 'again' }] },
    ]) {
      const bad = await post(server.base, '/v1/chat/completions', body);
      assert.equal(bad.status, 400, JSON.stringify(body));
    }
  });
});
