#!/usr/bin/env bash
# okapi serve beside llama-server on the same GGUF: -np 4 slots, same threads, same KV cache type
# (f16), loopback. For 1, 4 and 16 concurrent streaming clients (bench/server_load.mjs: every
# request generates exactly --tokens tokens, greedy), aggregate generated tok/s and time to first
# token, the two servers interleaved round by round. Ratios only: this machine is shared and noisy.
#
#   bench/server_compare.sh -m MODEL.gguf --peer-bin DIR [--threads 2] [--np 4] [--ctx 4096]
#                           [--tokens 64] [--levels "1 4 16"] [--rounds 2] [--peer-args "ARGS"]
# DIR holds llama-server (and its libraries); ../shared/peers' wrapper is the default. ARGS are
# extra llama-server flags (e.g. "--no-repack").
set -euo pipefail
cd "$(dirname "$0")/.."
model="" peer_bin="../shared/peers" peer_args="" threads=2 np=4 ctx=4096 tokens=64 levels="1 4 16" rounds=2
while [ $# -gt 0 ]; do
  case "$1" in
    -m) model=$2; shift 2 ;;
    --peer-bin) peer_bin=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --ctx) ctx=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --levels) levels=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --peer-args) peer_args=$2; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -n "$model" ] || { echo "usage: $0 -m MODEL.gguf [--peer-bin DIR]" >&2; exit 2; }
okapi=build/okapi
peer="$peer_bin/llama-server"
[ -x "$okapi" ] || { echo "build okapi first (scripts/build.sh)" >&2; exit 1; }
[ -x "$peer" ] || { echo "no llama-server at $peer" >&2; exit 1; }
okapi_port=18181 peer_port=18182
log=$(mktemp -d)
cleanup() { kill "$okapi_pid" "$peer_pid" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT

"$okapi" serve -m "$model" --port $okapi_port -np "$np" -c "$ctx" -t "$threads" -ctk f16 -ctv f16 \
  > "$log/okapi.log" 2>&1 &
okapi_pid=$!
LD_LIBRARY_PATH="$peer_bin:${LD_LIBRARY_PATH:-}" "$peer" -m "$model" --port $peer_port -np "$np" -c "$ctx" \
  -t "$threads" -ctk f16 -ctv f16 --no-webui $peer_args > "$log/peer.log" 2>&1 &
peer_pid=$!
wait_ready() {
  for _ in $(seq 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$1/health")" = 200 ] && return 0
    sleep 0.1
  done
  echo "server on port $1 did not come up; logs in $log" >&2
  exit 1
}
wait_ready $okapi_port
wait_ready $peer_port
rss_mib() { awk '/VmRSS/ {printf "%.0f", $2 / 1024}' "/proc/$1/status"; }
echo "model: $model | threads $threads | -np $np | -c $ctx | KV f16 | $tokens tokens a request | llama-server $peer_bin $peer_args"
echo "idle RSS: okapi $(rss_mib $okapi_pid) MiB, llama-server $(rss_mib $peer_pid) MiB"
curl -s "http://127.0.0.1:$okapi_port/props" | python3 -c 'import json,sys; p=json.load(sys.stdin); print("okapi KV per slot: %.1f MiB" % (p["slot_kv_bytes"]/2**20))'
grep -iE "KV self size|llama_kv_cache.*size|kv.*MiB" "$log/peer.log" | head -2 || true

results="$log/results.jsonl"
for level in $levels; do
  requests=$(( level >= 4 ? 2 : 3 ))
  # One warm-up request each, then rounds alternating which server goes first.
  for port in $okapi_port $peer_port; do
    node bench/server_load.mjs --url "http://127.0.0.1:$port" --concurrency 1 --requests 1 --tokens 8 > /dev/null
  done
  for round in $(seq "$rounds"); do
    order="okapi peer"; [ $((round % 2)) -eq 0 ] && order="peer okapi"
    for who in $order; do
      port=$okapi_port; [ "$who" = peer ] && port=$peer_port
      line=$(node bench/server_load.mjs --url "http://127.0.0.1:$port" --concurrency "$level" --requests "$requests" \
        --tokens "$tokens")
      echo "{\"server\": \"$who\", \"round\": $round, \"result\": $line}" >> "$results"
    done
  done
done
python3 - "$results" <<'PY'
import json, sys, statistics
rows = [json.loads(l) for l in open(sys.argv[1])]
print("| streams | okapi tok/s | llama-server tok/s | ratio | okapi TTFT median / p90 ms | llama-server TTFT median / p90 ms | errors |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for level in sorted({r["result"]["concurrency"] for r in rows}):
    def pick(who, key):
        return [r["result"][key] for r in rows if r["server"] == who and r["result"]["concurrency"] == level]
    o, p = statistics.median(pick("okapi", "generated_tok_s")), statistics.median(pick("peer", "generated_tok_s"))
    om, op = statistics.median(pick("okapi", "ttft_ms_median")), statistics.median(pick("okapi", "ttft_ms_p90"))
    pm, pp = statistics.median(pick("peer", "ttft_ms_median")), statistics.median(pick("peer", "ttft_ms_p90"))
    errors = sum(pick("okapi", "errors")) + sum(pick("peer", "errors"))
    print(f"| {level} | {o:.1f} | {p:.1f} | {o / p:.2f}x | {om:.0f} / {op:.0f} | {pm:.0f} / {pp:.0f} | {errors} |")
PY
