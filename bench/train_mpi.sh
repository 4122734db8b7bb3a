#!/usr/bin/env bash
# Data-parallel training over MPI against one process on the same machine: steps/s of
# `mpirun -np 2 okapi train -t 1` vs `okapi train -t 2` at the same global batch (batch x accum
# sequences of seq tokens), via --bench-steps (one warm-up step, then N timed steps of forward,
# backward, gradient exchange and AdamW; no eval, no checkpoints). The two run interleaved, round
# after round (this machine is shared and noisy), and the table gives the median rate of each and
# the ratio. It also prints the exchange's bytes per rank per step and the model for N ranks.
#
#   bench/train_mpi.sh [--configs "stories260K stories15M"] [--rounds 5] [--steps 20]
#                      [--batch 4] [--seq 64] [--accum 2] [--okapi PATH]
# The data is examples/story.txt repeated; the tokenizer models/tok512.bin (512 tokens, so
# stories15M here is its transformer with a 512-token vocabulary: about 6.1M parameters).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
okapi="$repo/build/okapi"
configs="stories260K stories15M"
rounds=5
steps=20
batch=4
seq=64
accum=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --configs) configs="$2"; shift 2 ;;
    --rounds) rounds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --seq) seq="$2"; shift 2 ;;
    --accum) accum="$2"; shift 2 ;;
    --okapi) okapi="$2"; shift 2 ;;
    *) echo "unknown flag $1" >&2; exit 2 ;;
  esac
done
command -v mpirun >/dev/null || { echo "mpirun is not on PATH (apt-get install openmpi-bin)" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
for _ in 1 2 3 4 5 6 7 8; do cat "$repo/examples/story.txt"; echo; done > "$work/text.txt"

median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
# Prints "tok/s exchanged-bytes" from a --bench-steps line.
rate() { sed -n 's/.*: \([0-9.]*\) tok\/s.*/\1/p' <<<"$1"; }
exchanged() { sed -n 's/.*, \([0-9]*\) bytes exchanged per rank per step.*/\1/p' <<<"$1"; }

printf '%-12s %10s %14s %14s %7s %14s\n' config params "1 proc -t 2" "2 ranks -t 1" ratio "bytes/rank"
for config in $configs; do
  common=(train --data "$work/text.txt" --tokenizer "$repo/models/tok512.bin" --config "$config" --batch "$batch"
          --seq "$seq" --accum "$accum" --bench-steps "$steps" --out "$work/run-$config")
  one=() two=() bytes=0 params=?
  for ((round = 0; round < rounds; ++round)); do
    line="$("$okapi" "${common[@]}" -t 2 -q 2>&1 | grep '^bench:')"
    params="$(sed -n 's/.*vocab [0-9]*, \([0-9]*\) params.*/\1/p' <<<"$line")"
    one+=("$(rate "$line")")
    line="$(mpirun --oversubscribe --mca btl self,vader -np 2 "$okapi" "${common[@]}" -t 1 -q 2>&1 | grep '^bench:')"
    two+=("$(rate "$line")")
    bytes="$(exchanged "$line")"
  done
  m1="$(printf '%s\n' "${one[@]}" | median)"
  m2="$(printf '%s\n' "${two[@]}" | median)"
  printf '%-12s %10s %14.1f %14.1f %7.3f %14s\n' "$config" "$params" "$m1" "$m2" "$(awk -v a="$m2" -v b="$m1" 'BEGIN{print a/b}')" "$bytes"
done
cat <<'MODEL'
tok/s: median over the rounds. Exchange per step: rank r sends the sums of the tree nodes covering its
micro-batches, k_r x P floats (k_r = 1 when accum = N x 2^j and N is a power of two; at most about
2 log2(accum/N) + 2 otherwise), plus one float per micro-batch (its loss), and receives every other
rank's: with k = 1, 4P bytes sent and 4P (N - 1) bytes received per rank per step (an all-gather; the
total over the machines is 4P N (N - 1)), against 8P (N - 1) / N for a bandwidth-optimal
reduce-scatter + all-gather. Plus one byte broadcast per step (the Ctrl-C decision).
MODEL
