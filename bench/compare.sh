#!/usr/bin/env bash
# Runs `okapi bench` over stories260K (F32/F16/Q8_0-mix/Q4_0-mix) and `okapi synth` models of the
# shapes stories110M, smollm2-135m, tinyllama-1.1b (F32/F16/Q8_0/Q4_0/Q4_K_M/Q6_K), 1 and 2 threads,
# and prints a markdown table with ratios against ../shared/baselines.md (llama.cpp / ik_llama.cpp
# on this machine type; ratio = okapi / best peer).
#
#   bench/compare.sh [--quick] [--okapi PATH] [--models DIR] [--reps N] [--shapes "a b"] [--types "T U"]
#     --quick   stories260K only (a minute)
#     --layers N  synth models with N blocks instead of the real depth (faster, but then no ratio:
#                 throughput of a shallower model is not comparable with the baselines)
# Environment: OKAPI_SHARED (default ../shared next to the repo).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
okapi="$repo/build/okapi"
models="${TMPDIR:-/tmp}/okapi-bench-models"
shared="${OKAPI_SHARED:-$repo/../shared}"
reps=5
quick=0
layers=""
shapes="stories110M smollm2-135m tinyllama-1.1b"
types="F32 F16 Q8_0 Q4_0 Q4_K_M Q6_K"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --okapi) okapi="$2"; shift ;;
    --models) models="$2"; shift ;;
    --reps) reps="$2"; shift ;;
    --shapes) shapes="$2"; shift ;;
    --types) types="$2"; shift ;;
    --layers) layers="$2"; shift ;;
    *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
[[ -x "$okapi" ]] || { echo "compare.sh: no okapi binary at $okapi (use --okapi)" >&2; exit 2; }
mkdir -p "$models"
results="$models/results.jsonl"
: > "$results"

bench() {  # label file args...
  local label="$1" file="$2"; shift 2
  echo "== $label" >&2
  "$okapi" bench -m "$file" "$@" -r "$reps" -o jsonl | sed "s/^{/{\"label\":\"$label\",/" >> "$results"
}

# stories260K: the repo's F32 model and the golden F16 / quantized mixes when ../shared is present.
golden="$shared/golden/public/models"
bench "stories260K F32" "$repo/models/stories260K.gguf" -p 64,128 -n 64 -t 1,2
for pair in "F16:stories260K-f16" "Q8_0:stories260K-q8_0mix" "Q4_0:stories260K-q4_0mix"; do
  [[ -f "$golden/${pair#*:}.gguf" ]] && bench "stories260K ${pair%%:*}" "$golden/${pair#*:}.gguf" -p 64,128 -n 64 -t 1,2
done

if [[ $quick == 0 ]]; then
  for shape in $shapes; do
    for type in $types; do
      # tinyllama-1.1b in F32/F16/Q6_K (2.2-4.4 GB) has no baseline and takes long: skipped.
      if [[ $shape == tinyllama-1.1b && $type =~ ^(F32|F16|Q6_K)$ ]]; then continue; fi
      file="$models/$shape-$type${layers:+-L$layers}.gguf"
      if [[ ! -f "$file" ]]; then
        "$okapi" synth --preset "$shape" --type "$type" --seed 1 ${layers:+--layers "$layers"} -o "$file" >&2
      fi
      bench "$shape-$type${layers:+ (L$layers)}" "$file" -p 128 -n 64 -t 1,2
    done
  done
fi

python3 - "$results" "$shared/baselines.md" <<'PY'
import json, re, sys
results = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
peers = {}  # (label, test, threads) -> [llama.cpp, ik_llama.cpp]
try:
    text = open(sys.argv[2]).read()
except OSError:
    text = ""
num = lambda s: float(re.sub(r"[*\s]", "", s))
small = {"F32": "F32", "F16": "F16", "Q8_0 (ffn_down F16)": "Q8_0", "Q4_0 (output Q8_0, ffn_down F16)": "Q4_0"}
cols_small = [("pp64", 1), ("pp128", 1), ("tg64", 1), ("pp64", 2), ("pp128", 2), ("tg64", 2)]
cols_big = [("pp128", 1), ("pp128", 2), ("tg64", 1), ("tg64", 2)]
for line in text.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 7 and cells[0] in small:
        for (test, t), v in zip(cols_small, cells[1:]):
            peers[(f"stories260K {small[cells[0]]}", test, t)] = [num(v) * 1000]
    elif len(cells) == 7 and re.match(r"^(stories110M|smollm2-135m|tinyllama-1\.1b)-", cells[0]):
        for (test, t), v in zip(cols_big, cells[2:6]):
            peers[(cells[0], test, t)] = [num(x) for x in v.split("/")]
print("| model | size | threads | test | okapi t/s | llama.cpp | ik_llama.cpp | okapi / best peer |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in results:
    key = (r["label"], r["test"], r["n_threads"])
    p = peers.get(key)
    cells = ["-", "-", "-"]
    if p:
        cells[0] = f"{p[0]:.1f}"
        if len(p) > 1: cells[1] = f"{p[1]:.1f}"
        cells[2] = f"{r['avg_ts'] / max(p):.2f}x"
    size = r["model_size"] / 2**20
    print(f"| {r['label']} | {size:.1f} MiB | {r['n_threads']} | {r['test']} | {r['avg_ts']:.1f} ± {r['stddev_ts']:.1f} | "
          + " | ".join(cells) + " |")
PY
