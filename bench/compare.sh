#!/usr/bin/env bash
# okapi against the native builds of llama.cpp and ik_llama.cpp (../shared/peers, see its README)
# on the same GGUF files: `okapi synth` models of the given shapes and types, the same threads and
# the same KV cache type (f16 unless told, llama-bench's default). Every (model, threads) cell runs
# okapi, llama.cpp, ik_llama.cpp and ik_llama.cpp -rtr 1 interleaved, round after round (this
# machine is shared and noisy: never compare runs made minutes apart), and the table gives the
# median tok/s of each over the rounds and okapi / best peer.
#
#   bench/compare.sh [--shapes "stories110M smollm2-135m"] [--types "Q8_0 Q4_0"] [--threads "1 2"]
#                    [-p 128[,512...]] [-n 64] [-d DEPTH] [--reps 3] [--rounds 3] [--ctk f16] [--ctv f16]
#                    [--models DIR] [--okapi PATH] [--baseline PATH] [--results FILE] [--no-rtr]
#                    [--layers N]
#   Types okapi synth cannot write directly (the i-quant mixes IQ*, MXFP4_MOE) are made as users get
#   them: an F16 synth file, an importance matrix from llama-imatrix over a short text, then
#   llama-quantize with it (both from ../shared/peers).
#   --layers N        synth the shapes with N blocks (every per-layer shape kept): the big MoE
#                     presets (qwen3-30b-a3b --layers 8) fit and run in minutes
#   -d DEPTH          long context instead: generation of -n tokens over a cache holding DEPTH
#                     tokens ('tg32 @ d4096'; okapi and llama.cpp -d, ik_llama.cpp -gp DEPTH,N), with
#                     the peers' flash attention on
#   --baseline PATH   another okapi binary (e.g. an older build) run in the same rounds: column
#                     "okapi base", to measure a change against the peers and itself at once
# Environment: LLAMA_BENCH, IK_LLAMA_BENCH (default ../shared/peers/llama-bench and ik-llama-bench
# next to the repo; point them at your own builds if those die with SIGILL on your CPU).
# Models are written to --models (default $TMPDIR/okapi-bench-models), never into the repo.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
peers="$repo/../shared/peers"
okapi="$repo/build/okapi"
llama="${LLAMA_BENCH:-$peers/llama-bench}"
ik="${IK_LLAMA_BENCH:-$peers/ik-llama-bench}"
llama_quantize="${LLAMA_QUANTIZE:-$peers/llama-quantize}"
llama_imatrix="${LLAMA_IMATRIX:-$peers/llama-imatrix}"
calibration_text="$repo/../shared/text/wikitext-2-raw-test.txt"
models="${TMPDIR:-/tmp}/okapi-bench-models"
results="${TMPDIR:-/tmp}/okapi-compare.jsonl"
shapes="stories110M"
types="Q8_0 Q4_0"
threads="1 2"
prompt=128
gen=64
reps=3
rounds=3
ctk=f16
ctv=f16
rtr=1
depth=0
baseline=""
layers=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) shapes="$2"; shift ;;
    --types) types="$2"; shift ;;
    --threads) threads="$2"; shift ;;
    -p) prompt="$2"; shift ;;
    -n) gen="$2"; shift ;;
    -d) depth="$2"; shift ;;
    --reps) reps="$2"; shift ;;
    --rounds) rounds="$2"; shift ;;
    --ctk) ctk="$2"; shift ;;
    --ctv) ctv="$2"; shift ;;
    --models) models="$2"; shift ;;
    --okapi) okapi="$2"; shift ;;
    --baseline) baseline="$2"; shift ;;
    --results) results="$2"; shift ;;
    --no-rtr) rtr=0 ;;
    --layers) layers="$2"; shift ;;
    -h|--help) sed -n '2,23p' "$0"; exit 0 ;;
    *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
for bin in "$okapi" "$llama" "$ik" ${baseline:+"$baseline"}; do
  [[ -x "$bin" ]] || { echo "compare.sh: no executable at $bin" >&2; exit 2; }
done
mkdir -p "$models"
: > "$results"

# engine label, model label, then the command, which prints JSON lines (okapi, llama.cpp: -o jsonl)
# or one JSON array (ik_llama.cpp: -o json); each record is appended to $results as one line with
# "engine" and "model" fields.
record() {
  local engine="$1" label="$2"; shift 2
  local out
  if ! out="$("$@" 2> /dev/null)"; then echo "compare.sh: $engine failed on $label" >&2; return; fi
  ENGINE="$engine" MODEL="$label" python3 -c '
import json, os, sys
text = sys.stdin.read().strip()
records = json.loads(text) if text.startswith("[") else [json.loads(l) for l in text.splitlines() if l.startswith("{")]
for r in records:
    print(json.dumps({"engine": os.environ["ENGINE"], "model": os.environ["MODEL"], **r}))
' <<< "$out" >> "$results"
}

# make_model FILE SHAPE TYPE: okapi synth, or for the i-quant mixes llama-quantize of an F16 synth
# file with an importance matrix (llama-imatrix, 4 chunks of 256 tokens: enough to be realistic).
make_model() {
  local file="$1" shape="$2" type="$3" layer_args=()
  [[ -f "$file" ]] && return
  [[ $layers -gt 0 ]] && layer_args=(--layers "$layers")
  case "$type" in
    IQ*|MXFP4*)
      local base="${file%-"$type".gguf}-F16.gguf"
      [[ -f "$base" ]] || "$okapi" synth --preset "$shape" "${layer_args[@]}" --type F16 --seed 1 -o "$base" >&2
      [[ -f "$base.imatrix" ]] || head -c 200000 "$calibration_text" > "$base.txt"
      [[ -f "$base.imatrix" ]] || "$llama_imatrix" -m "$base" -f "$base.txt" -c 256 --chunks 4 -t 2 \
                                    -o "$base.imatrix" > /dev/null 2>&1
      "$llama_quantize" --imatrix "$base.imatrix" "$base" "$file" "$type" 2 > /dev/null 2>&1 ||
        { echo "compare.sh: llama-quantize $type failed on $base" >&2; exit 1; }
      ;;
    *) "$okapi" synth --preset "$shape" "${layer_args[@]}" --type "$type" --seed 1 -o "$file" >&2 ;;
  esac
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for shape in $shapes; do
  for type in $types; do
    if [[ $layers -gt 0 ]]; then
      file="$models/$shape-L$layers-$type.gguf"
      label="$shape L$layers $type"
    else
      file="$models/$shape-$type.gguf"
      label="$shape $type"
    fi
    make_model "$file" "$shape" "$type"
    for round in $(seq "$rounds"); do
      for t in $threads; do
        echo "== $label t$t round $round (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        if [[ $depth -gt 0 ]]; then
          common=(-m "$file" -p 0 -n "$gen" -d "$depth" -t "$t" -r "$reps" -ctk "$ctk" -ctv "$ctv")
          ik_common=(-m "$file" -p 0 -n 0 -gp "$depth,$gen" -t "$t" -r "$reps" -ctk "$ctk" -ctv "$ctv" -fa 1)
          llama_extra=(-fa 1)
        else
          common=(-m "$file" -p "$prompt" -n "$gen" -t "$t" -r "$reps" -ctk "$ctk" -ctv "$ctv")
          ik_common=("${common[@]}")
          llama_extra=()
        fi
        record okapi "$label" "$okapi" bench "${common[@]}" -o jsonl
        if [[ -n $baseline ]]; then record "okapi base" "$label" "$baseline" bench "${common[@]}" -o jsonl; fi
        record llama.cpp "$label" "$llama" "${common[@]}" "${llama_extra[@]}" -o jsonl
        record ik_llama.cpp "$label" "$ik" "${ik_common[@]}" -o json
        if [[ $rtr == 1 ]]; then record "ik -rtr" "$label" "$ik" "${ik_common[@]}" -rtr 1 -o json; fi
      done
    done
  done
done

python3 - "$results" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
engines = [e for e in ["okapi base", "okapi", "llama.cpp", "ik_llama.cpp", "ik -rtr"] if any(r["engine"] == e for r in rows)]
cells = {}  # (model, threads, test) -> engine -> [avg tok/s of each round]
for r in rows:
    if r.get("n_depth", 0) > 0:
        test = f"tg{r['n_gen']} @ d{r['n_depth']}"
    elif r["n_prompt"] > 0 and r["n_gen"] > 0:  # ik_llama.cpp -gp DEPTH,N: N tokens after DEPTH
        test = f"tg{r['n_gen']} @ d{r['n_prompt']}"
    else:
        test = f"pp{r['n_prompt']}" if r["n_prompt"] > 0 else f"tg{r['n_gen']}"
    cells.setdefault((r["model"], r["n_threads"], test), {}).setdefault(r["engine"], []).append(r["avg_ts"])
print("| model | threads | test | " + " | ".join(engines) + " | okapi / best peer |")
print("| --- | ---: | ---: | " + " | ".join("---:" for _ in engines) + " | ---: |")
for (model, threads, test), by_engine in cells.items():
    med = {e: statistics.median(v) for e, v in by_engine.items()}
    peers = [med[e] for e in engines if e in med and not e.startswith("okapi")]
    ratio = f"{med['okapi'] / max(peers):.2f}x" if "okapi" in med and peers else "-"
    print(f"| {model} | {threads} | {test} | " + " | ".join(f"{med[e]:.1f}" if e in med else "-" for e in engines)
          + f" | {ratio} |")
PY
