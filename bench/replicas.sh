#!/usr/bin/env bash
# bench/replicas.sh [MODEL]: aggregate generated tok/s of one `okapi serve -t 2 -np 4` against two
# replicas (-t 1 -np REPLICA_SLOTS each) behind HAProxy (deploy/run-replicas.sh), under the same load
# (bench/server_load.mjs: CLIENTS concurrent streaming clients, TOKENS tokens per request, greedy),
# measured alternately REPEATS times; then the latency HAProxy adds per request
# (bench/http_latency.mjs: direct to a replica vs through HAProxy, one at a time, medians).
#
# MODEL defaults to ../shared/models/zoo/okapi-ts5M-hd64.gguf. Environment: OKAPI_BIN (build/okapi),
# CLIENTS (8), TOKENS (128), REQUESTS per client per run (4), REPEATS (3), ROUNDS of the latency
# test (200), REPLICA_SLOTS (-np of each replica, 4; 2 gives the pair the single server's 4 slots),
# BASE_PORT (18400: uses BASE_PORT..BASE_PORT+4).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$repo/../shared/models/zoo/okapi-ts5M-hd64.gguf}
okapi=${OKAPI_BIN:-$repo/build/okapi}
replica_slots=${REPLICA_SLOTS:-4} clients=${CLIENTS:-8} tokens=${TOKENS:-128} requests=${REQUESTS:-4} repeats=${REPEATS:-3} rounds=${ROUNDS:-200}
base=${BASE_PORT:-18400}
[ -f "$model" ] || { echo "replicas bench: error: model '$model' not found" >&2; exit 2; }
[ -x "$okapi" ] || { echo "replicas bench: error: no okapi binary at '$okapi' (set OKAPI_BIN)" >&2; exit 2; }

single_port=$base proxy_port=$((base + 1)) stats_port=$((base + 2)) replica_port=$((base + 3))
run_dir=$(mktemp -d "${TMPDIR:-/tmp}/okapi-replicas-bench.XXXXXX")
single_pid="" replicas_pid=""
cleanup() {
  [ -z "$replicas_pid" ] || kill -TERM "$replicas_pid" 2> /dev/null || true
  [ -z "$single_pid" ] || kill -TERM "$single_pid" 2> /dev/null || true
  wait 2> /dev/null || true
  rm -rf "$run_dir"
}
trap cleanup EXIT

"$okapi" serve -m "$model" --host 127.0.0.1 --port "$single_port" -t 2 -np 4 -c 4096 > "$run_dir/single.log" 2>&1 &
single_pid=$!
"$repo/deploy/run-replicas.sh" 2 --okapi "$okapi" -m "$model" -t 1 -np "$replica_slots" -c 4096 --port "$proxy_port" \
  --stats-port "$stats_port" --base-port "$replica_port" --run-dir "$run_dir/replicas" > "$run_dir/replicas.log" 2>&1 &
replicas_pid=$!
for _ in $(seq 600); do
  grep -q "run-replicas: ready" "$run_dir/replicas.log" 2> /dev/null &&
    curl -sf "http://127.0.0.1:$single_port/health" > /dev/null && break
  sleep 0.1
done
grep -q "run-replicas: ready" "$run_dir/replicas.log" || { cat "$run_dir/replicas.log" >&2; exit 1; }

load() { node "$repo/bench/server_load.mjs" --url "$1" --concurrency "$clients" --requests "$requests" --tokens "$tokens"; }
tok_s() { sed -n 's/.*"generated_tok_s":\([0-9.]*\).*/\1/p'; }
echo "model $(basename "$model"), replicas -np $replica_slots, $clients clients x $requests requests x $tokens tokens, $repeats runs each, alternating"
single=() replicas=()
for ((r = 1; r <= repeats; r++)); do
  a=$(load "http://127.0.0.1:$single_port" | tok_s)
  b=$(load "http://127.0.0.1:$proxy_port" | tok_s)
  single+=("$a") replicas+=("$b")
  printf 'run %d: one replica -t 2 -np 4: %8.1f tok/s   2 replicas -t 1 -np %s behind HAProxy: %8.1f tok/s\n' "$r" "$a" "$replica_slots" "$b"
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ms=$(median "${single[@]}") mr=$(median "${replicas[@]}")
printf 'median: one replica %.1f tok/s, 2 replicas behind HAProxy %.1f tok/s, ratio %.2f\n' "$ms" "$mr" \
  "$(awk -v a="$mr" -v b="$ms" 'BEGIN { print a / b }')"
echo "latency added by HAProxy (replica r0 direct vs through HAProxy, $rounds rounds):"
node "$repo/bench/http_latency.mjs" --direct "http://127.0.0.1:$replica_port" --proxy "http://127.0.0.1:$proxy_port" --rounds "$rounds"
