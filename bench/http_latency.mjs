// Latency a proxy adds: the same small requests sent alternately to a server directly and through
// the proxy (keep-alive connections both ways), one at a time. Prints one JSON line with the
// median and p90 per target and the median of the per-pair differences, for GET /health (the proxy
// alone) and a one-token /v1/completions (a generation's request and response).
//
//   node bench/http_latency.mjs --direct http://127.0.0.1:8081 --proxy http://127.0.0.1:8080 --rounds 200
const args = Object.fromEntries(
  process.argv.slice(2).reduce((pairs, a, i, all) => (a.startsWith('--') ? [...pairs, [a.slice(2), all[i + 1]]] : pairs), []),
);
if (!args.direct || !args.proxy) throw new Error('usage: node bench/http_latency.mjs --direct URL --proxy URL [--rounds N]');
const rounds = Number(args.rounds ?? 200);

const requests = {
  health: (base) => fetch(`${base}/health`),
  completion: (base) => fetch(`${base}/v1/completions`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ prompt: 'Once upon a time', max_tokens: 1, temperature: 0 }),
  }),
};

async function timed(send, base) {
  const started = performance.now();
  const res = await send(base);
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`${base}: HTTP ${res.status}`);
  return performance.now() - started;
}

const quantile = (values, q) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
};
const round3 = (x) => Math.round(x * 1000) / 1000;

const result = { rounds };
for (const [name, send] of Object.entries(requests)) {
  for (let i = 0; i < 10; i++) { await timed(send, args.direct); await timed(send, args.proxy); }  // warm-up
  const direct = [];
  const proxied = [];
  const differences = [];
  for (let i = 0; i < rounds; i++) {
    // Alternate which goes first, so neither always meets a freshly idle machine.
    const pair = i % 2 === 0
      ? [await timed(send, args.direct), await timed(send, args.proxy)]
      : [await timed(send, args.proxy), await timed(send, args.direct)].reverse();
    direct.push(pair[0]);
    proxied.push(pair[1]);
    differences.push(pair[1] - pair[0]);
  }
  result[name] = {
    direct_ms_median: round3(quantile(direct, 0.5)), direct_ms_p90: round3(quantile(direct, 0.9)),
    proxy_ms_median: round3(quantile(proxied, 0.5)), proxy_ms_p90: round3(quantile(proxied, 0.9)),
    added_ms_median: round3(quantile(differences, 0.5)),
  };
}
console.log(JSON.stringify(result));
