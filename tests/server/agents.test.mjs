// Agents against `okapi serve`: tools and tool_choice, streamed tool-call deltas, a tool round
// trip, structured output (response_format json_schema / json_object), LangChain's tool binding,
// and the 400s of tools and schemas the server cannot use. The model is the bundled stories260K
// with Qwen 2.5's real chat template (Hermes-style <tool_call> syntax): the grammar forces valid
// calls whatever a tiny model would say, so every check here is about okapi, not the model.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { ChatOpenAI } from '@langchain/openai';
import { Validator } from '@cfworker/json-schema';
import path from 'node:path';
import { post, repoRoot, startServer } from './support.mjs';

const TEMPLATE = path.join(repoRoot, 'tests/data/templates/Qwen-Qwen2.5-7B-Instruct.jinja');
let server;
let client;

before(async () => {
  // Tool definitions take ~900 tokens of this small vocabulary: 2048 a slot.
  server = await startServer(['--chat-template-file', TEMPLATE, '--alias', 'stories'], { ctx: 4096, slots: 2 });
  client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
});

after(async () => {
  await server?.stop();
});

// Bounded strings and enums: a call always finishes in a few dozen tokens.
const weatherParameters = {
  type: 'object',
  properties: {
    location: { type: 'string', minLength: 1, maxLength: 12 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
    days: { type: 'integer', minimum: 1, maximum: 7 },
  },
  required: ['location', 'unit'],
  additionalProperties: false,
};
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather forecast', parameters: weatherParameters } },
  {
    type: 'function',
    function: {
      name: 'send_email',
      description: 'Send an email',
      parameters: {
        type: 'object',
        properties: { to: { type: 'string', maxLength: 10 }, urgent: { type: 'boolean' } },
        required: ['to', 'urgent'],
        additionalProperties: false,
      },
    },
  },
];
const schemaOf = (name) => tools.find((t) => t.function.name === name).function.parameters;
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

function checkCall(call) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^\S+$/);
  const schema = schemaOf(call.function.name);
  assert.ok(schema, `a known function: ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  const result = new Validator(schema, '2020-12').validate(args);
  assert.ok(result.valid, `arguments ${call.function.arguments} validate: ${JSON.stringify(result.errors)}`);
  return args;
}

describe('tool calls', () => {
  test('tool_choice "required" gives tool_calls whose arguments validate', async () => {
    for (const seed of [1, 2, 3]) {
      const r = await client.chat.completions.create({
        model: 'stories', messages, tools, tool_choice: 'required', max_tokens: 200, seed,
      });
      const choice = r.choices[0];
      assert.equal(choice.finish_reason, 'tool_calls');
      assert.ok(choice.message.tool_calls.length >= 1);
      for (const call of choice.message.tool_calls) checkCall(call);
      assert.ok(!(choice.message.content ?? '').includes('<tool_call>'), 'no call markup in content');
    }
  });

  test('a named tool_choice calls that function', async () => {
    const r = await client.chat.completions.create({
      model: 'stories', messages, tools, max_tokens: 200, seed: 5,
      tool_choice: { type: 'function', function: { name: 'send_email' } },
    });
    const calls = r.choices[0].message.tool_calls;
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, 'send_email');
    checkCall(calls[0]);
  });

  test('streamed deltas carry id and name first, then arguments that reassemble', async () => {
    const stream = await client.chat.completions.create({
      model: 'stories', messages, tools, tool_choice: 'required', max_tokens: 200, seed: 4, stream: true,
    });
    const calls = [];
    let content = '';
    let finish = null;
    let chunks = 0;
    for await (const chunk of stream) {
      chunks += 1;
      const choice = chunk.choices[0];
      if (!choice) continue;
      content += choice.delta.content ?? '';
      for (const d of choice.delta.tool_calls ?? []) {
        if (!calls[d.index]) {
          assert.ok(d.id, 'the first delta of a call has its id');
          assert.ok(d.function?.name, 'the first delta of a call has its name');
          calls[d.index] = { id: d.id, type: 'function', function: { name: d.function.name, arguments: '' } };
        } else {
          assert.equal(d.id, undefined, 'later deltas carry only arguments');
        }
        calls[d.index].function.arguments += d.function?.arguments ?? '';
      }
      finish = choice.finish_reason ?? finish;
    }
    assert.ok(chunks > 2);
    assert.equal(finish, 'tool_calls');
    assert.ok(calls.length >= 1);
    for (const call of calls) checkCall(call);
    assert.ok(!content.includes('<tool_call>') && !content.includes('</tool_call>'), `no markup in content: ${content}`);
  });

  test('the stream reassembles to the non-streamed message for the same seed', async () => {
    const request = { model: 'stories', messages, tools, tool_choice: 'required', max_tokens: 200, seed: 11, temperature: 0 };
    const whole = (await client.chat.completions.create(request)).choices[0].message;
    const stream = await client.chat.completions.create({ ...request, stream: true });
    const args = [];
    const names = [];
    for await (const chunk of stream) {
      for (const d of chunk.choices[0]?.delta.tool_calls ?? []) {
        if (d.function?.name) names[d.index] = d.function.name;
        args[d.index] = (args[d.index] ?? '') + (d.function?.arguments ?? '');
      }
    }
    assert.deepEqual(names, whole.tool_calls.map((c) => c.function.name));
    assert.deepEqual(args, whole.tool_calls.map((c) => c.function.arguments));
  });

  test('a tool round trip: the result goes back and the model answers', async () => {
    const first = await client.chat.completions.create({
      model: 'stories', messages, tools, tool_choice: 'required', max_tokens: 200, seed: 6,
    });
    const call = first.choices[0].message.tool_calls[0];
    const followUp = [
      ...messages,
      first.choices[0].message,
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 21, "sky": "clear"}' },
    ];
    // The template renders the call and its result back into the prompt.
    const rendered = await post(server.base, '/apply-template', { messages: followUp, tools });
    assert.equal(rendered.status, 200, rendered.text);
    assert.ok(rendered.json.prompt.includes('<tool_response>'), rendered.json.prompt);
    assert.ok(rendered.json.prompt.includes('"temperature": 21'));
    assert.ok(rendered.json.prompt.includes(`"name": "${call.function.name}"`), rendered.json.prompt);
    const second = await client.chat.completions.create({
      model: 'stories', messages: followUp, tools, tool_choice: 'none', max_tokens: 12, seed: 7,
    });
    assert.ok(['stop', 'length'].includes(second.choices[0].finish_reason));
    assert.equal(second.choices[0].message.tool_calls, undefined);
  });

  test('parallel_tool_calls lets the grammar take several calls', async () => {
    const r = await client.chat.completions.create({
      model: 'stories', messages, tools, tool_choice: 'required', parallel_tool_calls: true, max_tokens: 400, seed: 8,
    });
    for (const call of r.choices[0].message.tool_calls) checkCall(call);
    const ids = r.choices[0].message.tool_calls.map((c) => c.id);
    assert.equal(new Set(ids).size, ids.length, 'call ids are distinct');
  });

  test('LangChain bindTools gets tool_calls with parsed arguments', async () => {
    const model = new ChatOpenAI({
      model: 'stories', apiKey: 'none', configuration: { baseURL: `${server.base}/v1` }, maxRetries: 0, maxTokens: 200,
    });
    const bound = model.bindTools(tools, { tool_choice: 'required' });
    const message = await bound.invoke('What is the weather in Paris?');
    assert.ok(message.tool_calls.length >= 1);
    for (const call of message.tool_calls) {
      const result = new Validator(schemaOf(call.name), '2020-12').validate(call.args);
      assert.ok(result.valid, JSON.stringify(call));
    }
  });
});

describe('structured output', () => {
  const person = {
    type: 'object',
    properties: {
      name: { type: 'string', maxLength: 10 },
      age: { type: 'integer', minimum: 0, maximum: 120 },
      role: { enum: ['admin', 'user'] },
      tags: { type: 'array', items: { type: 'string', maxLength: 5 }, maxItems: 3 },
    },
    required: ['name', 'age', 'role'],
    additionalProperties: false,
  };

  test('response_format json_schema gives content that validates', async () => {
    for (const seed of [1, 2, 3, 4]) {
      const r = await client.chat.completions.create({
        model: 'stories', messages, max_tokens: 300, seed,
        response_format: { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: person } },
      });
      const choice = r.choices[0];
      assert.equal(choice.finish_reason, 'stop', choice.message.content);
      const value = JSON.parse(choice.message.content);
      const result = new Validator(person, '2020-12').validate(value);
      assert.ok(result.valid, `${choice.message.content}: ${JSON.stringify(result.errors)}`);
    }
  });

  test('json_schema on /v1/completions too (llama-server field)', async () => {
    const r = await post(server.base, '/v1/completions', { prompt: 'Once', json_schema: person, max_tokens: 300, seed: 3 });
    assert.equal(r.status, 200, r.text);
    const value = JSON.parse(r.json.choices[0].text);
    assert.ok(new Validator(person, '2020-12').validate(value).valid, r.json.choices[0].text);
  });

  test('a GBNF grammar constrains the text', async () => {
    const r = await post(server.base, '/v1/chat/completions', {
      messages, max_tokens: 50, seed: 2, grammar: 'root ::= ("yes" | "no") " " [0-9]{2}',
    });
    assert.equal(r.status, 200, r.text);
    assert.match(r.json.choices[0].message.content, /^(yes|no) [0-9]{2}$/);
  });
});

describe('refusals', () => {
  const bad = async (body, param, pattern) => {
    const r = await post(server.base, '/v1/chat/completions', { messages, max_tokens: 5, ...body });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.param, param, r.text);
    assert.match(r.json.error.message, pattern);
  };
  test('a tool_choice naming an unknown function', () =>
    bad({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice', /nope/));
  test('a grammar that does not parse names the line and column', () =>
    bad({ grammar: 'root ::= "a"\nitem ::= ( "b"' }, 'grammar', /line 2, column/));
  test('a schema keyword the converter cannot express is named', () =>
    bad({ response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', pattern: '(?=a)b' } } } },
      'response_format', /pattern/));
  test('two constraints at once', () =>
    bad({ grammar: 'root ::= "a"', json_schema: { type: 'string' } }, 'json_schema', /both/));
  test('a tool without a name', () =>
    bad({ tools: [{ type: 'function', function: { parameters: {} } }] }, 'tools[0].function.name', /name/));
});

// A thinking model's template (DeepSeek R1 distills open the reasoning block in the prompt): the
// reasoning goes to reasoning_content, a budget ends it, and a schema constrains only the answer.
describe('reasoning', () => {
  const R1 = path.join(repoRoot, 'tests/data/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja');
  let thinking;
  let thinkingClient;
  const answer = {
    type: 'object',
    properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 0, maximum: 9 } },
    required: ['ok', 'n'],
    additionalProperties: false,
  };
  before(async () => {
    thinking = await startServer(['--chat-template-file', R1], { ctx: 2048, slots: 2 });
    thinkingClient = new OpenAI({ baseURL: `${thinking.base}/v1`, apiKey: 'none', maxRetries: 0, timeout: 60_000 });
  });
  after(async () => {
    await thinking?.stop();
  });

  test('the reasoning goes to reasoning_content; a schema constrains only the answer', async () => {
    for (const seed of [1, 2, 3]) {
      const r = await thinkingClient.chat.completions.create({
        model: 'x', messages, max_tokens: 200, seed, reasoning_budget_tokens: 12,
        response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: answer } },
      });
      const m = r.choices[0].message;
      assert.equal(r.choices[0].finish_reason, 'stop', JSON.stringify(m));
      assert.ok(m.reasoning_content.length > 0, 'free reasoning text');
      assert.ok(!m.reasoning_content.includes('</think>') && !m.content.includes('</think>'));
      assert.ok(new Validator(answer, '2020-12').validate(JSON.parse(m.content)).valid, m.content);
    }
  });

  test('streamed reasoning_content comes before the content', async () => {
    const stream = await thinkingClient.chat.completions.create({
      model: 'x', messages, max_tokens: 200, seed: 4, reasoning_budget_tokens: 10, stream: true,
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: answer } },
    });
    let reasoning = '';
    let content = '';
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta ?? {};
      if (d.reasoning_content) {
        assert.equal(content.replace(/\s/g, ''), '', 'no reasoning after the answer started');
        reasoning += d.reasoning_content;
      }
      content += d.content ?? '';
    }
    assert.ok(reasoning.length > 0);
    assert.ok(new Validator(answer, '2020-12').validate(JSON.parse(content)).valid, content);
  });

  test('reasoning_format "none" leaves the reasoning in the content', async () => {
    const r = await post(thinking.base, '/v1/chat/completions', {
      messages, max_tokens: 60, seed: 5, reasoning_budget_tokens: 5, reasoning_format: 'none',
      response_format: { type: 'json_schema', json_schema: { name: 'answer', schema: answer } },
    });
    assert.equal(r.status, 200, r.text);
    const m = r.json.choices[0].message;
    assert.ok(m.content.includes('</think>'), m.content);
    assert.equal(m.reasoning_content, undefined);
  });

  test('a zero budget ends the reasoning at once', async () => {
    const r = await post(thinking.base, '/v1/chat/completions', {
      messages, max_tokens: 60, seed: 6, reasoning_budget_tokens: 0, json_schema: answer,
    });
    assert.equal(r.status, 200, r.text);
    const m = r.json.choices[0].message;
    assert.equal(m.reasoning_content ?? '', '');
    assert.ok(new Validator(answer, '2020-12').validate(JSON.parse(m.content)).valid, m.content);
  });
});
