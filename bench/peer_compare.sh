#!/usr/bin/env bash
# okapi vs llama.cpp on THIS machine: for each model, runs `okapi bench` and bench/peer_llamacpp.mjs
# (llama.cpp through node-llama-cpp) interleaved - okapi, peer, okapi, peer ... - with the same
# threads / prompt / generation lengths, and prints a markdown table with both and the ratio.
# Interleaving matters: this machine is shared and noisy, so never compare runs made minutes apart.
#
#   bench/peer_compare.sh [--threads "1 2"] [-p 128] [-n 64] [--reps 3] [--rounds 3]
#                         [--flash-attn auto|on|off] [--results FILE] MODEL.gguf...
# Environment: OKAPI (default build/okapi), NODE_PATH (where node-llama-cpp is installed, e.g.
# /tmp/peer/node_modules; see bench/README.md "Peers on this machine").
# Each cell pools every timed run of all rounds: mean ± sd tok/s. llama.cpp's number is its native
# llama_decode time (llama-bench's definition); "wall" adds node-llama-cpp's JS overhead per call;
# "load" is the range of the 1-minute load average at the start of the runs (2 cores: > 2 = contended).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
okapi="${OKAPI:-$repo/build/okapi}"
threads="1 2"
prompt=128
gen=64
reps=3
rounds=3
flash_attn=auto
results="${TMPDIR:-/tmp}/okapi-peer-compare.jsonl"
models=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --threads) threads="$2"; shift ;;
    -p) prompt="$2"; shift ;;
    -n) gen="$2"; shift ;;
    --reps) reps="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --flash-attn) flash_attn="$2"; shift ;;
    --results) results="$2"; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "peer_compare.sh: unknown argument $1" >&2; exit 2 ;;
    *) models+=("$1") ;;
  esac
  shift
done
[[ ${#models[@]} -gt 0 ]] || { echo "peer_compare.sh: give at least one MODEL.gguf" >&2; exit 2; }
[[ -x "$okapi" ]] || { echo "peer_compare.sh: no okapi binary at $okapi (set OKAPI=...)" >&2; exit 2; }
for m in "${models[@]}"; do [[ -f "$m" ]] || { echo "peer_compare.sh: no model file $m" >&2; exit 2; }; done
peer=(node "$repo/bench/peer_llamacpp.mjs")
# Fail early (with the script's install hint) when node-llama-cpp cannot be found.
"${peer[@]}" --model "${models[0]}" --prompt-tokens 1 --gen-tokens 0 --reps 1 > /dev/null

: > "$results"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for model in "${models[@]}"; do
  for round in $(seq "$rounds"); do
    for t in $threads; do
      echo "== $(basename "$model") t$t round $round" >&2
      # Tag each record with the 1-minute load average at its start (> 2 means contended cores).
      load="$(cut -d' ' -f1 /proc/loadavg)"
      "$okapi" bench -m "$model" -p "$prompt" -n "$gen" -t "$t" -r "$reps" -o jsonl \
        | sed "s/^{/{\"engine\":\"okapi\",\"load\":$load,/" >> "$results"
      load="$(cut -d' ' -f1 /proc/loadavg)"
      "${peer[@]}" --model "$model" --threads "$t" --prompt-tokens "$prompt" --gen-tokens "$gen" \
        --reps "$reps" --flash-attn "$flash_attn" | sed "s/^{/{\"load\":$load,/" >> "$results"
    done
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$results" <<'PY'
import json, statistics, sys
records = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
cells, order, backend = {}, [], ""
for r in records:
    if r["engine"] == "okapi":  # llama-bench's field names -> the peer script's
        r.update(model=r["model_filename"].rsplit("/", 1)[-1], model_bytes=r["model_size"], threads=r["n_threads"])
    key = (r["model"], r["model_bytes"], r["threads"], r["test"])
    if key not in cells:
        cells[key] = {"okapi": [], "llama.cpp": [], "wall": [], "load": []}
        order.append(key)
    cells[key]["load"].append(r["load"])
    if r["engine"] == "okapi":
        cells[key]["okapi"] += r["samples_ts"]
    else:
        cells[key]["llama.cpp"] += r["samples_ts"]
        cells[key]["wall"] += r["wall_samples_ts"]
        backend = f'{r["llama_cpp_release"]}, ggml-cpu-{r["cpu_backend"]}, flash_attn {r["flash_attn"]}'
def show(v):
    if not v: return "-", None
    mean = statistics.fmean(v)
    sd = statistics.stdev(v) if len(v) > 1 else 0.0
    return (f"{mean:.0f} ± {sd:.0f}" if mean >= 100 else f"{mean:.1f} ± {sd:.1f}"), mean
print(f"llama.cpp: {backend}\n")
print("| model | MiB | threads | test | okapi t/s | llama.cpp t/s | llama.cpp wall t/s | okapi / llama.cpp: means (medians) | load |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for key in order:
    c = cells[key]
    (o, om), (p, pm), (w, _) = show(c["okapi"]), show(c["llama.cpp"]), show(c["wall"])
    # Ratio of means, then of medians (robust to a stalled run on a contended machine).
    ratio = f'{om / pm:.2f}x ({statistics.median(c["okapi"]) / statistics.median(c["llama.cpp"]):.2f}x)' if om and pm else "-"
    load = f'{min(c["load"]):.1f}-{max(c["load"]):.1f}'
    print(f"| {key[0]} | {key[1] / 2**20:.1f} | {key[2]} | {key[3]} | {o} | {p} | {w} | {ratio} | {load} |")
PY
