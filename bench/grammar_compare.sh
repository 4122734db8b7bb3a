#!/usr/bin/env bash
# Constrained decoding: okapi serve beside llama-server on the same GGUF, one slot each, same
# threads, f16 KV, loopback. Each round asks both servers for the same chat completion without a
# constraint and with a JSON schema (response_format json_schema), default sampling, seeded, and
# reads decode tok/s from the responses' `timings` (both servers report them). Rounds interleave
# the servers; ratios only (this machine is shared and noisy).
#
#   bench/grammar_compare.sh -m MODEL.gguf [--peer-bin DIR] [--threads 2] [--tokens 128] [--rounds 3]
# A model with a real vocabulary shows the mask's cost over it: `okapi synth --preset qwen3-0.6b
# --type Q8_0 --vocab-from ggml-vocab-qwen2.gguf` (llama.cpp's models/ folder) has Qwen's 151,936 tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
model="" peer_bin="../shared/peers" threads=2 tokens=128 rounds=3
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift 2 ;;
    --peer-bin) peer_bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "usage: $0 -m MODEL.gguf [--peer-bin DIR]" >&2; exit 2; }
okapi=build/okapi
peer="$peer_bin/llama-server"
okapi_port=18191 peer_port=18192
log=$(mktemp -d)
cleanup() { kill "$okapi_pid" "$peer_pid" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT
"$okapi" serve -m "$model" --port $okapi_port -np 1 -c 2048 -t "$threads" -ctk f16 -ctv f16 > "$log/okapi.log" 2>&1 &
okapi_pid=$!
"$peer" -m "$model" --port $peer_port -np 1 -c 2048 -t "$threads" -ctk f16 -ctv f16 --no-webui > "$log/peer.log" 2>&1 &
peer_pid=$!
wait_ready() {
  for _ in $(seq 1200); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health")" = 200 ] && return 0
    sleep 0.1
  done
  echo "server on port $1 did not come up; logs in $log" >&2
  exit 1
}
wait_ready $okapi_port
wait_ready $peer_port
echo "model: $model | threads $threads | -np 1 | KV f16 | up to $tokens tokens | $(lscpu | grep 'Model name' | sed 's/ \+/ /g')"
python3 - "$okapi_port" "$peer_port" "$tokens" "$rounds" <<'PY'
import json, statistics, sys, time, urllib.request
okapi_port, peer_port, tokens, rounds = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
schema = {"type": "object", "properties": {
    "title": {"type": "string"}, "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
    "tags": {"type": "array", "items": {"type": "string"}},
    "rating": {"enum": ["good", "bad", "mixed"]}}, "required": ["title", "year", "tags", "rating"]}
def ask(port, constrained, seed):
    body = {"messages": [{"role": "user", "content": "Describe a film as JSON."}], "max_tokens": tokens, "seed": seed}
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "film", "schema": schema}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.time()
    with urllib.request.urlopen(req, timeout=600) as r:
        out = json.load(r)
    t = out["timings"]
    return t["predicted_n"], t["predicted_per_second"], time.time() - start, out["choices"][0]["message"].get("content") or ""
rates = {(s, c): [] for s in ("okapi", "llama-server") for c in (False, True)}
for rnd in range(rounds):
    for constrained in (False, True):
        for name, port in (("okapi", okapi_port), ("llama-server", peer_port)):
            n, rate, wall, text = ask(port, constrained, 100 + rnd)
            if constrained and n < tokens:
                json.loads(text)  # a finished constrained answer is JSON
            rates[(name, constrained)].append(rate)
            print(f"round {rnd} {name:12s} {'schema' if constrained else 'free  '} {n:4d} tokens {rate:7.1f} tok/s")
med = {k: statistics.median(v) for k, v in rates.items()}
print()
print("| server | free tok/s | schema tok/s | schema / free |")
print("|---|---|---|---|")
for s in ("okapi", "llama-server"):
    print(f"| {s} | {med[(s, False)]:.1f} | {med[(s, True)]:.1f} | {med[(s, True)] / med[(s, False)]:.2f} |")
print(f"| okapi / llama-server | {med[('okapi', False)] / med[('llama-server', False)]:.2f} | "
      f"{med[('okapi', True)] / med[('llama-server', True)]:.2f} | |")
PY
