#!/usr/bin/env bash
# Embeddings: okapi beside llama.cpp on the same GGUF, same threads, same batch, interleaved.
#   1. `okapi embed` vs `llama-embedding`: one process embeds every input of a file (wall time,
#      load included; each tool batches inputs into its passes).
#   2. `okapi serve --embeddings` vs `llama-server --embeddings`: N concurrent clients send the
#      inputs to /v1/embeddings, one input per request; aggregate inputs/s and tokens/s.
# Ratios only (this machine is shared and noisy).
#
#   bench/embed_compare.sh [-m MODEL.gguf] [--peer-bin DIR] [--threads 2] [--inputs 64] [--words 75]
#                          [--clients 8] [--rounds 3]
# Without -m it writes a bert-base-shaped model (okapi synth --preset bge-base-en-v1.5, F16, the
# WordPiece vocabulary of ../shared/vocab/ggml-vocab-bert-bge.gguf).
set -euo pipefail
cd "$(dirname "$0")/.."
model="" peer_bin="../shared/peers" threads=2 inputs=64 words=75 clients=8 rounds=3 type=F16
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift 2 ;;
    --peer-bin) peer_bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --inputs) inputs=$2; shift 2 ;;
    --words) words=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --type) type=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
okapi=build/okapi
work=$(mktemp -d)
okapi_pid="" peer_pid=""
cleanup() {
  [ -n "$okapi_pid" ] && kill "$okapi_pid" 2>/dev/null
  [ -n "$peer_pid" ] && kill "$peer_pid" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
if [ -z "$model" ]; then
  model=$work/bge-base.gguf
  "$okapi" synth --preset bge-base-en-v1.5 --type "$type" --vocab-from ../shared/vocab/ggml-vocab-bert-bge.gguf \
    -o "$model" > /dev/null
fi
# Inputs of about `words` words (~1.3 WordPiece tokens each) from War and Peace, one per line.
python3 - "$inputs" "$words" > "$work/inputs.txt" <<'PY'
import sys
n, w = int(sys.argv[1]), int(sys.argv[2])
text = open("../shared/text/war-and-peace.txt", encoding="utf-8").read().split()[5000:]
for i in range(n):
    print(" ".join(text[i * w:(i + 1) * w]))
PY
echo "model: $model | threads $threads | $inputs inputs of $words words | $(lscpu | grep 'Model name' | sed 's/ \+/ /g')"

# ---- 1. one process per tool ----
seconds() { local s; s=$(date +%s.%N); "$@" > /dev/null 2> "$work/last.log" || { cat "$work/last.log" >&2; exit 1; }; echo "$(date +%s.%N) - $s" | bc; }
okapi_times=() peer_times=()
for r in $(seq "$rounds"); do
  okapi_times+=("$(seconds "$okapi" embed -m "$model" -f "$work/inputs.txt" -t "$threads" -b 8192 --embd-output-format json)")
  peer_times+=("$(seconds "$peer_bin/llama-embedding" -m "$model" -f "$work/inputs.txt" -t "$threads" -b 8192 -c 8192 --embd-output-format json)")
done
python3 - "${okapi_times[*]}" "${peer_times[*]}" "$inputs" <<'PY'
import statistics, sys
o = [float(x) for x in sys.argv[1].split()]; p = [float(x) for x in sys.argv[2].split()]; n = int(sys.argv[3])
mo, mp = statistics.median(o), statistics.median(p)
print(f"okapi embed      {mo:7.2f} s  {n / mo:7.1f} inputs/s  (rounds: {', '.join(f'{x:.2f}' for x in o)})")
print(f"llama-embedding  {mp:7.2f} s  {n / mp:7.1f} inputs/s  (rounds: {', '.join(f'{x:.2f}' for x in p)})")
print(f"okapi embed / llama-embedding: {mp / mo:.2f}x")
PY

# ---- 2. servers ----
okapi_port=18193 peer_port=18194
"$okapi" serve -m "$model" --embeddings --port $okapi_port -t "$threads" -c 8192 -b 8192 -ub 8192 > "$work/okapi.log" 2>&1 &
okapi_pid=$!
"$peer_bin/llama-server" -m "$model" --embeddings --port $peer_port -t "$threads" -c 8192 -b 8192 -ub 8192 \
  -np "$clients" --no-webui > "$work/peer.log" 2>&1 &
peer_pid=$!
wait_ready() {
  for _ in $(seq 1200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health")" = 200 ] && return 0
    sleep 0.1
  done
  echo "server on port $1 did not come up:" >&2; tail -5 "$work/okapi.log" "$work/peer.log" >&2; exit 1
}
wait_ready $okapi_port
wait_ready $peer_port
python3 - "$okapi_port" "$peer_port" "$clients" "$rounds" "$work/inputs.txt" <<'PY'
import json, statistics, sys, time, urllib.request
from concurrent.futures import ThreadPoolExecutor
okapi_port, peer_port, clients, rounds = (int(x) for x in sys.argv[1:5])
lines = [l.rstrip("\n") for l in open(sys.argv[5], encoding="utf-8") if l.strip()]
def one(port, text):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/embeddings", data=json.dumps({"input": text}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        body = json.load(r)
    return body["usage"]["prompt_tokens"]
def run(port):
    start = time.time()
    with ThreadPoolExecutor(clients) as pool:
        tokens = sum(pool.map(lambda t: one(port, t), lines))
    return time.time() - start, tokens
one(okapi_port, "warm up"); one(peer_port, "warm up")
res = {"okapi serve": [], "llama-server": []}
for _ in range(rounds):
    res["okapi serve"].append(run(okapi_port))
    res["llama-server"].append(run(peer_port))
med = {}
for name, rs in res.items():
    secs = statistics.median(r[0] for r in rs)
    toks = rs[0][1]
    med[name] = secs
    print(f"{name:14s} {secs:7.2f} s  {len(lines) / secs:7.1f} inputs/s  {toks / secs:8.1f} tok/s  ({clients} clients, {toks} tokens)")
print(f"okapi serve / llama-server: {med['llama-server'] / med['okapi serve']:.2f}x")
PY
