#!/usr/bin/env bash
# Pipeline-parallel prefill (docs/scale-out.md): `mpirun -np 2 okapi perplexity -t 1
# --pipeline` (two ranks, one thread each) against one process with -t 2 and -t 1, on the same
# text and model. Perplexity's "tok/s evaluated" is the prefill throughput (every token's logits,
# -c tokens per chunk in one batch). The configurations run interleaved, round after round (this
# machine is shared and noisy), and the table gives the median of each over the rounds, the
# pipeline's ratio to one process with 2 threads, and the activation bytes each token sends
# between adjacent ranks (its hidden state: n_embd floats).
#
#   bench/pipeline.sh [--models "PATH ..."] [--synth "stories110M:8:Q8_0 ..."] [-c 512] [--chunks 4]
#                     [--rounds 5] [--okapi PATH] [--text FILE]
#   --models   GGUF files to run (default: ../shared/models/zoo/okapi-ts5M-hd64.gguf)
#   --synth    also okapi synth models PRESET:LAYERS:TYPE, written under $TMPDIR/okapi-bench-models
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
okapi="$repo/build/okapi"
models="$repo/../shared/models/zoo/okapi-ts5M-hd64.gguf"
synth=""
ctx=512
chunks=4
rounds=5
text="$repo/../shared/text/tinystories-valid-head.txt"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --synth) synth="$2"; shift 2 ;;
    -c) ctx="$2"; shift 2 ;;
    --chunks) chunks="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --okapi) okapi="$2"; shift 2 ;;
    --text) text="$2"; shift 2 ;;
    *) echo "bench/pipeline.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
command -v mpirun >/dev/null || { echo "bench/pipeline.sh: mpirun is not on PATH" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
model_dir="${TMPDIR:-/tmp}/okapi-bench-models"
for spec in $synth; do
  IFS=: read -r preset layers type <<<"$spec"
  out="$model_dir/$preset-${layers}l-$type.gguf"
  mkdir -p "$model_dir"
  [[ -f "$out" ]] || "$okapi" synth --preset "$preset" --layers "$layers" --type "$type" --seed 1 -o "$out" >/dev/null
  models="$models $out"
done

# tok/s of one perplexity run ("perplexity: N tokens scored in S s (X tok/s evaluated)").
rate() { grep -o '([0-9.]* tok/s evaluated)' | tr -d '(' | cut -d' ' -f1; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

printf '| model | n_embd | layers (rank 0 / rank 1) | one process -t 1 | one process -t 2 | -np 2 -t 1 --pipeline | pipeline / -t 2 | activation bytes / token / boundary |\n'
printf '|---|---|---|---|---|---|---|---|\n'
for model in $models; do
  args=(perplexity -m "$model" -f "$text" -c "$ctx" -b "$ctx" --chunks "$chunks")
  t1=() t2=() p2=()
  for ((r = 0; r < rounds; r++)); do
    t1+=("$("$okapi" "${args[@]}" -t 1 2>&1 >/dev/null | rate)")
    t2+=("$("$okapi" "${args[@]}" -t 2 2>&1 >/dev/null | rate)")
    p2+=("$(mpirun --oversubscribe -np 2 "$okapi" "${args[@]}" -t 1 --pipeline 2>&1 >/dev/null | rate)")
  done
  m1=$(printf '%s\n' "${t1[@]}" | median)
  m2=$(printf '%s\n' "${t2[@]}" | median)
  mp=$(printf '%s\n' "${p2[@]}" | median)
  # rank 0's "perplexity: pipeline: 2 ranks: layers [0, 3) on rank 0, [3, 6) on rank 1; n_embd 256: ..."
  plan=$(mpirun --oversubscribe -np 2 "$okapi" "${args[@]}" --chunks 1 -t 1 --pipeline 2>&1 >/dev/null |
           grep -m1 'perplexity: pipeline:' || true)
  split=$(sed -e 's/.*ranks: layers //' -e 's/;.*//' <<<"$plan")
  n_embd=$(grep -o 'n_embd [0-9]*' <<<"$plan" | grep -o '[0-9]*' || true)
  printf '| %s | %s | %s | %.1f | %.1f | %.1f | %.2fx | %s |\n' "$(basename "$model")" "${n_embd:-?}" "${split:-?}" \
    "$m1" "$m2" "$mp" "$(awk -v a="$mp" -v b="$m2" 'BEGIN {print a / b}')" \
    "$([[ -n "$n_embd" ]] && echo $((n_embd * 4)) || echo '?')"
done
echo
echo "tok/s: perplexity's prefill throughput (every token's logits), median of $rounds interleaved rounds, -c $ctx."
