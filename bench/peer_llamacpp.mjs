#!/usr/bin/env node
// Prefill / decode throughput of llama.cpp (through node-llama-cpp's prebuilt CPU binaries) with
// the same definitions as `okapi bench` (src/eval/bench.cpp), so both can run on one machine:
//   pp P = P prompt tokens / seconds of one batched decode (BOS, then fixed pseudo-random ids),
//   tg N = N tokens / seconds of N one-token decodes from an empty cache (greedy, EOS ignored),
//   one untimed warm-up run, then R timed runs, each on an emptied KV cache; mean ± sd.
// Two timings per run: "native" = llama.cpp's own llama_decode+synchronize time (what llama-bench
// measures; no JS, no sampling), "wall" = JS clock around the whole call (adds node-llama-cpp's
// per-token overhead and the greedy sampling). The primary avg_ts/stddev_ts are the native ones.
//
//   node bench/peer_llamacpp.mjs --model M.gguf [--threads 1] [--prompt-tokens 128]
//        [--gen-tokens 64] [--reps 5] [--flash-attn auto|on|off]
// Prints one JSON record per test (pp, then tg; a count of 0 skips that test).
// Installs nothing: node-llama-cpp must already be resolvable (see usage() below).

import fs from "node:fs";
import path from "node:path";

function usage(message) {
  if (message) process.stderr.write(`peer_llamacpp: ${message}\n`);
  process.stderr.write(
    "usage: node bench/peer_llamacpp.mjs --model PATH [--threads T] [--prompt-tokens P]\n" +
    "         [--gen-tokens N] [--reps R] [--flash-attn auto|on|off]\n");
  process.exit(message ? 2 : 0);
}

function parseArgs(argv) {
  const options = { model: "", threads: 1, promptTokens: 128, genTokens: 64, reps: 5, flashAttn: "auto" };
  const integer = (name, value, min) => {
    if (!/^\d+$/.test(value ?? "") || Number(value) < min) usage(`${name} needs an integer >= ${min}, got '${value ?? ""}'`);
    return Number(value);
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [flag, value] = [argv[i], argv[i + 1]];
    if (flag === "-h" || flag === "--help") usage();
    if (value === undefined) usage(`${flag} needs a value`);
    if (flag === "--model") options.model = value;
    else if (flag === "--threads") options.threads = integer(flag, value, 1);
    else if (flag === "--prompt-tokens") options.promptTokens = integer(flag, value, 0);
    else if (flag === "--gen-tokens") options.genTokens = integer(flag, value, 0);
    else if (flag === "--reps") options.reps = integer(flag, value, 1);
    else if (flag === "--flash-attn") {
      if (!["auto", "on", "off"].includes(value)) usage(`--flash-attn is auto, on or off, got '${value}'`);
      options.flashAttn = value;
    } else usage(`unknown argument '${flag}'`);
  }
  if (!options.model) usage("--model is required");
  if (!fs.existsSync(options.model)) usage(`no model file at '${options.model}'`);
  if (options.promptTokens === 0 && options.genTokens === 0) usage("nothing to measure: --prompt-tokens and --gen-tokens are both 0");
  return options;
}

async function importNodeLlamaCpp() {
  // ESM ignores NODE_PATH, so resolve through CommonJS (which honours it) and import the file.
  const { createRequire } = await import("node:module");
  const bases = [import.meta.url, path.join(process.cwd(), "noop.js"),
    ...(process.env.NODE_PATH ?? "").split(path.delimiter).filter(Boolean).map((dir) => path.join(dir, "noop.js"))];
  for (const base of bases) {
    try {
      const entry = createRequire(base).resolve("node-llama-cpp");
      return await import(new URL(`file://${entry}`).href);
    } catch { /* try the next base */ }
  }
  process.stderr.write(
    "peer_llamacpp: node-llama-cpp is not installed (this script installs nothing). Install it outside the repo:\n" +
    "  mkdir -p /tmp/peer && cd /tmp/peer && npm init -y && npm install node-llama-cpp\n" +
    "then run with NODE_PATH=/tmp/peer/node_modules node bench/peer_llamacpp.mjs ...\n");
  process.exit(3);
}

// Same sequence every run and every engine invocation; the values do not change the work done.
function promptTokens(count, vocabSize, bos) {
  let state = 42;
  const next = () => { state = (Math.imul(state, 1664525) + 1013904223) >>> 0; return state; };
  const low = Math.min(3, vocabSize - 1);  // skip <unk>, <s>, </s> in Llama SPM vocabularies
  const tokens = Array.from({ length: count }, () => low + (next() % (vocabSize - low)));
  if (count > 0 && bos != null) tokens[0] = bos;
  return tokens;
}

// llama_perf_context_print lines, captured from the log; printTimings() also resets the counters.
const perfLines = [];
function takeNativeMs(kind) {
  const pattern = kind === "prompt" ? /prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/
                                    : /\beval time =\s*([\d.]+) ms \/\s*(\d+) runs/;
  for (const line of perfLines.splice(0)) {
    if (kind === "decode" && line.includes("prompt eval")) continue;
    const match = line.match(pattern);
    if (match) return { ms: Number(match[1]), count: Number(match[2]) };
  }
  throw new Error(`no '${kind} eval time' line in llama.cpp's performance log`);
}

function summarize(samples) {
  const mean = samples.reduce((a, b) => a + b, 0) / samples.length;
  const variance = samples.length > 1 ? samples.reduce((a, v) => a + (v - mean) ** 2, 0) / (samples.length - 1) : 0;
  return { mean, sd: Math.sqrt(variance) };
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const { getLlama, LlamaLogLevel } = await importNodeLlamaCpp();
  const llamaLog = [];
  const llama = await getLlama({
    gpu: false, build: "never", skipDownload: true, progressLogs: false,
    maxThreads: 0,  // 0: the context's thread count is used as given, not as a hint
    logLevel: LlamaLogLevel.log,  // "log" level carries load_backend (which CPU variant ggml picked)
    logger: (level, message) => {
      if (message.includes("llama_perf_context_print")) perfLines.push(message);
      else if (/load_backend|system_info|flash_attn|Flash Attention/.test(message)) llamaLog.push(message.trim());
    },
  });
  const model = await llama.loadModel({ modelPath: options.model, gpuLayers: 0 });
  const embedding = (model.fileInfo.fullTensorInfo ?? []).find((t) => t.name === "token_embd.weight");
  if (!embedding) throw new Error(`${options.model}: no token_embd.weight tensor, cannot tell the vocabulary size`);
  const vocabSize = Number(embedding.dimensions[1]);
  const bos = model.tokens.bos ?? undefined;
  const contextSize = Math.max(256, options.promptTokens + options.genTokens + 8);
  const context = await model.createContext({
    contextSize, batchSize: Math.max(options.promptTokens, 1), sequences: 1,
    threads: { ideal: options.threads, min: options.threads },
    flashAttention: { auto: "auto", on: true, off: false }[options.flashAttn],
    performanceTracking: true,
    batching: { dispatchSchedule: (dispatch) => dispatch() },  // no event-loop hop per token
  });
  const sequence = context.getSequence();

  const runPrefill = async () => {
    const tokens = promptTokens(options.promptTokens, vocabSize, bos);
    await sequence.clearHistory();
    await context.printTimings();
    perfLines.length = 0;
    const start = performance.now();
    await sequence.evaluateWithoutGeneratingNewTokens(tokens);
    const wallMs = performance.now() - start;
    await context.printTimings();
    const native = takeNativeMs("prompt");
    if (native.count !== tokens.length) throw new Error(`prefill evaluated ${native.count} tokens, expected ${tokens.length}`);
    return { nativeMs: native.ms, wallMs };
  };
  const runDecode = async () => {
    await sequence.clearHistory();
    await context.printTimings();
    perfLines.length = 0;
    let decoded = 0;
    const start = performance.now();
    // Each step decodes the last token (BOS first) and samples the next one greedily.
    for await (const token of sequence.evaluate([bos ?? 0], { temperature: 0 })) {
      void token;
      if (++decoded === options.genTokens) break;
    }
    const wallMs = performance.now() - start;
    await context.printTimings();
    const native = takeNativeMs("decode");
    if (native.count !== options.genTokens) throw new Error(`decode ran ${native.count} times, expected ${options.genTokens}`);
    return { nativeMs: native.ms, wallMs };
  };

  const tests = [];
  if (options.promptTokens > 0) tests.push({ name: `pp${options.promptTokens}`, count: options.promptTokens, run: runPrefill });
  if (options.genTokens > 0) tests.push({ name: `tg${options.genTokens}`, count: options.genTokens, run: runDecode });
  for (const test of tests) {
    await test.run();  // warm-up, as okapi bench: page in weights, build graphs
    const native = [], wall = [];
    for (let r = 0; r < options.reps; ++r) {
      const { nativeMs, wallMs } = await test.run();
      native.push(test.count / (nativeMs / 1000));
      wall.push(test.count / (wallMs / 1000));
    }
    const n = summarize(native), w = summarize(wall);
    process.stdout.write(JSON.stringify({
      engine: "llama.cpp", binding: "node-llama-cpp", llama_cpp_release: llama.llamaCppRelease.release,
      cpu_backend: (llamaLog.find((l) => l.includes("load_backend")) ?? "").replace(/.*libggml-cpu-([\w.]+)\.so.*/, "$1"),
      model: path.basename(options.model), model_bytes: fs.statSync(options.model).size,
      threads: options.threads, test: test.name, flash_attn: options.flashAttn,
      avg_ts: n.mean, stddev_ts: n.sd, samples_ts: native,
      wall_avg_ts: w.mean, wall_stddev_ts: w.sd, wall_samples_ts: wall,
    }) + "\n");
  }
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

main().catch((error) => {
  process.stderr.write(`peer_llamacpp: ${error?.message ?? error}\n`);
  process.exit(1);
});
