#!/usr/bin/env bash
# Tokens/s of one training step (forward + backward + AdamW) of `okapi train` against PyTorch on
# the same model shape, fp32, same thread count.
#
#   bash bench/train_compare.sh [path/to/okapi]
#   CONFIG=stories15M BATCH=4 SEQ=256 STEPS=5 THREADS=2 ROUNDS=3 bash bench/train_compare.sh
#
# The vocabulary is the 32000-token Llama SentencePiece one from ../shared/vocab (the real
# stories15M vocabulary) when present, else models/tok512.bin. PyTorch is Debian's python3-torch;
# this script installs nothing and says so when torch is missing (then only okapi is measured).
# Rounds alternate okapi and torch; the medians are compared.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
okapi=${1:-$here/build/okapi}
shared=${OKAPI_SHARED:-$here/../shared}
config=${CONFIG:-stories15M}
batch=${BATCH:-4}
seq=${SEQ:-256}
steps=${STEPS:-5}
threads=${THREADS:-2}
rounds=${ROUNDS:-3}

[ -x "$okapi" ] || { echo "no okapi binary at $okapi (build it first: bash scripts/build.sh)" >&2; exit 1; }
tokenizer=$shared/vocab/ggml-vocab-llama-spm.gguf
[ -f "$tokenizer" ] || tokenizer=$here/models/tok512.bin
text=$shared/text/tinystories-valid-head.txt
[ -f "$text" ] || text=$here/examples/story.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Debian's python3-torch lives in /usr/bin/python3's packages; a python3 earlier on PATH (pyenv,
# venv) may not see it. PYTHON overrides the choice.
have_torch=0
for candidate in ${PYTHON:-python3 /usr/bin/python3}; do
  if "$candidate" -c 'import torch' 2>/dev/null; then python=$candidate; have_torch=1; break; fi
done
# PyTorch's OpenMP threads spin while its BLAS's own threads run; on 2 cores that oversubscribes
# them (4x slower here). Passive waiting is PyTorch's best setting on this machine.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}
if [ "$have_torch" = 1 ]; then
  # Debian's torch calls the system libblas.so.3: the reference BLAS unless OpenBLAS is installed.
  blas=$(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null || echo unknown)
  echo "PyTorch BLAS: $blas (install libopenblas0-pthread for a fast one)" >&2
fi
if [ "$have_torch" = 0 ]; then
  echo "PyTorch is not installed (Debian: apt-get install python3-torch): measuring okapi only." >&2
fi

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
okapi_rates=() torch_rates=() vocab=""
for round in $(seq 1 "$rounds"); do
  line=$("$okapi" train --data "$text" --tokenizer "$tokenizer" --config "$config" --batch "$batch" --seq "$seq" \
    --bench-steps "$steps" -t "$threads" --out "$work/run$round" -q)
  echo "$line"
  okapi_rates+=("$(sed -E 's/.*: ([0-9.]+) tok\/s.*/\1/' <<<"$line")")
  vocab=$(sed -E 's/.*vocab ([0-9]+),.*/\1/' <<<"$line")
  if [ "$have_torch" = 1 ]; then
    line=$("$python" "$here/bench/train_torch.py" --config "$config" --vocab "$vocab" --batch "$batch" --seq "$seq" \
      --steps "$steps" --threads "$threads")
    echo "$line"
    torch_rates+=("$(sed -E 's/.*: ([0-9.]+) tok\/s.*/\1/' <<<"$line")")
  fi
done
okapi_median=$(printf '%s\n' "${okapi_rates[@]}" | median)
echo
echo "| $config, vocab $vocab, batch $batch x seq $seq, $threads threads | tok/s (median of $rounds) |"
echo "|---|---|"
echo "| okapi train | $okapi_median |"
if [ "$have_torch" = 1 ]; then
  torch_median=$(printf '%s\n' "${torch_rates[@]}" | median)
  echo "| PyTorch $("$python" -c 'import torch; print(torch.__version__)') | $torch_median |"
  echo "| okapi / PyTorch | $(awk -v a="$okapi_median" -v b="$torch_median" 'BEGIN { printf "%.2fx", a / b }') |"
fi
