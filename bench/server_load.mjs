// Load generator for OpenAI-compatible servers (okapi serve, llama-server): C concurrent clients,
// each sending R streaming /v1/completions requests one after another, every request generating
// exactly N tokens (ignore_eos, greedy). Prints one JSON line: aggregate generated tokens per
// second over the wall time, and time to first token (median, p90, max) over all requests.
//
//   node bench/server_load.mjs --url http://127.0.0.1:8080 --concurrency 4 --requests 2 --tokens 128
const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []),
);
const url = args.url ?? 'http://127.0.0.1:8080';
const concurrency = Number(args.concurrency ?? 1);
const perClient = Number(args.requests ?? 1);
const tokens = Number(args.tokens ?? 128);
const apiKey = args['api-key'];

// Distinct prompts (no client reuses another's cached prefix), about 30 tokens each.
const prompt = (client, round) =>
  `Story ${client}-${round}: once upon a time there was a little ${['dog', 'cat', 'bird', 'girl', 'boy'][client % 5]} ` +
  `who lived in a ${['house', 'forest', 'town', 'garden'][round % 4]} near the sea, and every day it`;

async function one(client, round) {
  const started = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', ...(apiKey ? { Authorization: `Bearer ${apiKey}` } : {}) },
    body: JSON.stringify({
      prompt: prompt(client, round), max_tokens: tokens, n_predict: tokens, temperature: 0, ignore_eos: true,
      stream: true, cache_prompt: false,
    }),
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buffer = '';
  let first = null;
  let finish = null;
  for await (const chunk of res.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      if (!event.startsWith('data: ')) continue;
      const data = event.slice(6);
      if (data === '[DONE]') continue;
      const json = JSON.parse(data);
      const choice = json.choices?.[0];
      if (first === null && choice?.text) first = performance.now();
      if (choice?.finish_reason) finish = choice.finish_reason;
    }
  }
  if (finish !== 'length') throw new Error(`finish_reason ${finish}, expected length`);
  return { ttft: (first ?? performance.now()) - started };
}

const ttfts = [];
let errors = 0;
const start = performance.now();
await Promise.all(
  Array.from({ length: concurrency }, async (_, client) => {
    for (let round = 0; round < perClient; round++) {
      try {
        ttfts.push((await one(client, round)).ttft);
      } catch (e) {
        errors++;
        console.error(e.message);
      }
    }
  }),
);
const wall = (performance.now() - start) / 1000;
ttfts.sort((a, b) => a - b);
const at = (q) => (ttfts.length ? ttfts[Math.min(ttfts.length - 1, Math.floor(q * ttfts.length))] : null);
const done = ttfts.length;
console.log(JSON.stringify({
  concurrency, requests: done, errors, tokens_per_request: tokens, wall_s: wall,
  generated_tok_s: (done * tokens) / wall, ttft_ms_median: at(0.5), ttft_ms_p90: at(0.9), ttft_ms_max: at(1),
}));
