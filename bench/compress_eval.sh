#!/usr/bin/env bash
# The low-rank compression benchmark of issue 14: every `okapi compress` method at 20% and 40% of
# the weight bytes removed, on every quality model, calibrated on one text and evaluated on
# another; the seed's GRC and GP at the ranks seed 003 uses; and (with --speed) decode speed of a
# compressed real-size model against its dense original.
#
#   bench/compress_eval.sh [--models DIR] [--chunks N] [--ctx 256] [--ratios "0.2 0.4"]
#                          [--methods "svd asvd svd-llm basis-sharing gp best"] [--only NAME]
#                          [--speed MODEL.gguf] [--okapi PATH] [--out DIR]
#
# Quality models (made in --models, default $TMPDIR/okapi-bench-models, never in the repo):
#   stories260K        ../shared/models/stories260K.gguf (width 64: the negative control)
#   bitnet-3M          ../shared/models/bitnet-3M-tinystories.bin converted with `okapi convert`
#   okapi-ts5M-hd64    ../shared/models/zoo/okapi-ts5M-hd64.gguf (width 256; recipe in its README)
#   okapi-ts5M-hd128   bench/kv_eval.sh's recipe (width 256, 2 heads of 128)
#   okapi-ts6M         trained here by the recipe below when missing (width 256, FFN 1024, 4 heads
#                      of 64 without GQA: 6.4M parameters; about 20 min on 2 cores)
#   okapi-ts10M        bench/speculative_eval.sh's target (width 384, 9.6M parameters), when present
# Calibration: the first 400,000 bytes of ../shared/models/zoo/bitnet3M-generated-stories.txt
# (--calib-tokens 8192). Evaluation: perplexity at --ctx on the last 200,000 bytes of
# ../shared/text/tinystories-valid-head.txt, held out from every model's training.
#
# A method may name its rank allocation, METHOD:RANKS (svd-llm:energy, best:mcr, ...), to compare
# allocations on one metric.
#
# Seed configurations (ranks files written here): GRC (one Q/K/V basis per layer) and GP attention-
# only (a basis per Q, K, V), at the seed's k = 0.375 d (Llama-3.1-8B's 1536 of 4096) and its
# small-model floor k = 0.55 d, K and V capped at their rows; O and the FFN dense, as Paper 1 runs.
#
# --speed MODEL: `okapi bench` decode (tg64, 2 threads) of MODEL and of MODEL compressed with
# --method svd at each ratio (f16 factors), interleaved round by round; the goal is a speed ratio
# of at least 0.9 / (1 - R).
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
shared="$repo/../shared"
okapi="$repo/build/okapi"
models="${TMPDIR:-/tmp}/okapi-bench-models"
out="${TMPDIR:-/tmp}/okapi-compress-eval"
chunks=40
ctx=256
ratios="0.2 0.4"
methods="svd asvd svd-llm basis-sharing gp best"
only=""
speed_model=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --chunks) chunks="$2"; shift 2 ;;
    --ctx) ctx="$2"; shift 2 ;;
    --ratios) ratios="$2"; shift 2 ;;
    --methods) methods="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --speed) speed_model="$2"; shift 2 ;;
    --okapi) okapi="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "compress_eval.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$models" "$out"
zoo="$shared/models/zoo"
calib="$out/calib.txt"
text="$out/heldout.txt"
head -c 400000 "$zoo/bitnet3M-generated-stories.txt" > "$calib"
tail -c 200000 "$shared/text/tinystories-valid-head.txt" > "$text"

# --- the quality models -------------------------------------------------------------------------
[[ -f "$models/bitnet-3M.gguf" || ( -n "$only" && "$only" != bitnet-3M ) ]] ||
  "$okapi" convert "$shared/models/bitnet-3M-tinystories.bin" -t "$shared/models/tok512.bin" -o "$models/bitnet-3M.gguf"
if [[ ! -f "$models/okapi-ts6M.gguf" && ( -z "$only" || "$only" == okapi-ts6M ) ]]; then
  "$okapi" train --data "$zoo/bitnet3M-generated-stories.txt" "$shared/text/tinystories-valid-head.txt" \
    --tokenizer "$shared/models/tok512.bin" --config stories260K --dim 256 --hidden 1024 --layers 6 --heads 4 \
    --kv-heads 4 --ctx 512 --batch 16 --seq 256 --steps 1600 --lr 1e-3 --warmup 100 --lr-min 1e-4 --seed 11 -t 2 \
    --out "$models/okapi-ts6M.run" --export "$models/okapi-ts6M.gguf" --log-every 100
fi
declare -A model_file=(
  [stories260K]="$shared/models/stories260K.gguf"
  [bitnet-3M]="$models/bitnet-3M.gguf"
  [okapi-ts5M-hd64]="$zoo/okapi-ts5M-hd64.gguf"
  [okapi-ts5M-hd128]="$models/okapi-ts5M-hd128.gguf"
  [okapi-ts6M]="$models/okapi-ts6M.gguf"
  [okapi-ts10M]="$models/okapi-ts10M.gguf"
)
order=(stories260K bitnet-3M okapi-ts5M-hd64 okapi-ts5M-hd128 okapi-ts6M okapi-ts10M)
[[ -f "${model_file[okapi-ts5M-hd128]}" ]] ||
  echo "compress_eval.sh: ${model_file[okapi-ts5M-hd128]} is missing: bench/kv_eval.sh trains it" >&2

ppl() {  # model -> "PPL" (the final estimate)
  "$okapi" perplexity -m "$1" -f "$text" -c "$ctx" --chunks "$chunks" -t 2 2>&1 |
    sed -n 's/.*Final estimate: PPL = \([0-9.]*\).*/\1/p'
}
removed() {  # compress log -> "NN.N%"
  sed -n 's/.*(\([0-9.-]*\)% removed).*/\1/p' "$1" | tail -1
}

# Seed 003's ranks: Q, K, V of every layer at k (K and V at most their rows); `grc` lists only Q,
# the owner of the shared basis.
seed_ranks() {  # model fraction method file
  "$okapi" inspect "$1" | awk -v f="$2" -v method="$3" '
    /embedding_length/ { d = $NF }
    $2 ~ /^blk\.[0-9]+\.attn_[qkv]\.weight$/ { name = $2; rows = $6; tensors[name] = rows }
    END {
      k = int(f * d + 0.5)
      for (name in tensors) {
        if (method == "grc" && name !~ /attn_q/) continue
        r = k; if (method != "grc" && tensors[name] < r) r = tensors[name]
        print name, r
      }
    }' > "$4"
}

echo "| model | method | ranks | asked | removed | PPL | vs dense |"
echo "|---|---|---|---:|---:|---:|---:|"
for name in "${order[@]}"; do
  [[ -n "$only" && "$name" != "$only" ]] && continue
  model="${model_file[$name]}"
  [[ -f "$model" ]] || continue
  dense=$(ppl "$model")
  echo "| $name | dense | | | 0% | $dense | |"
  for ratio in $ratios; do
    for entry in $methods; do
      method="${entry%%:*}"
      ranks_flags=()
      [[ "$entry" == *:* ]] && ranks_flags=(--ranks "${entry#*:}")
      file="$out/$name-$method-$ratio.gguf"
      calib_flags=(--calib "$calib" --calib-tokens 8192)
      [[ "$method" == svd && "$entry" != *:mcr ]] && calib_flags=()
      if "$okapi" compress -m "$model" -o "$file" --method "$method" --ratio "$ratio" "${calib_flags[@]}" \
        "${ranks_flags[@]}" -t 2 > "$out/$name-$method-$ratio.log" 2>&1; then
        p=$(ppl "$file")
        ranks=$(sed -n 's/.*ranks \([a-z]*\).*/\1/p' "$out/$name-$method-$ratio.log" | tail -1)
        echo "| $name | $method | $ranks | $ratio | $(removed "$out/$name-$method-$ratio.log")% | $p |" \
          "$(awk -v a="$p" -v b="$dense" 'BEGIN { printf "%+.1f%%", 100 * (a / b - 1) }') |"
      else
        echo "| $name | $method | | $ratio | failed: $(grep -m1 'okapi: error' "$out/$name-$method-$ratio.log" | cut -c1-90) | | |"
      fi
      rm -f "$file"
    done
  done
  for method in grc gp; do
    for fraction in 0.375 0.55; do
      ranks_file="$out/$name-$method-$fraction.ranks"
      seed_ranks "$model" "$fraction" "$method" "$ranks_file"
      file="$out/$name-$method-seed-$fraction.gguf"
      if "$okapi" compress -m "$model" -o "$file" --method "$method" --ranks "$ranks_file" \
        > "$out/$name-$method-seed-$fraction.log" 2>&1; then
        p=$(ppl "$file")
        echo "| $name | $method (seed, attn only) | k = $fraction d | | $(removed "$out/$name-$method-seed-$fraction.log")% | $p |" \
          "$(awk -v a="$p" -v b="$dense" 'BEGIN { printf "%+.1f%%", 100 * (a / b - 1) }') |"
      else
        echo "| $name | $method (seed) | k = $fraction d | | failed: $(grep -m1 'okapi: error' "$out/$name-$method-seed-$fraction.log" | cut -c1-90) | | |"
      fi
      rm -f "$file"
    done
  done
done

# --- decode speed ------------------------------------------------------------------------------
if [[ -n "$speed_model" ]]; then
  echo
  echo "| model | ratio | removed | decode t/s (tg64) | dense t/s | speed ratio | goal 0.9/(1-R) |"
  echo "|---|---:|---:|---:|---:|---:|---:|"
  for ratio in $ratios; do
    file="$out/speed-svd-$ratio.gguf"
    "$okapi" compress -m "$speed_model" -o "$file" --method svd --ratio "$ratio" --type f16 -t 2 > "$out/speed-$ratio.log" 2>&1
    dense_total=0 comp_total=0
    for round in 1 2 3; do
      d=$("$okapi" bench -m "$speed_model" -p 0 -n 64 -t 2 -r 1 2>/dev/null | awk -F'|' '/tg64/ { split($(NF-1), a, " "); print a[1] }')
      c=$("$okapi" bench -m "$file" -p 0 -n 64 -t 2 -r 1 2>/dev/null | awk -F'|' '/tg64/ { split($(NF-1), a, " "); print a[1] }')
      dense_total=$(awk -v a="$dense_total" -v b="$d" 'BEGIN { print a + b }')
      comp_total=$(awk -v a="$comp_total" -v b="$c" 'BEGIN { print a + b }')
    done
    awk -v n="$(basename "$speed_model")" -v r="$ratio" -v rm="$(removed "$out/speed-$ratio.log")" -v c="$comp_total" -v d="$dense_total" \
      'BEGIN { printf "| %s | %s | %s%% | %.2f | %.2f | %.2f | %.2f |\n", n, r, rm, c / 3, d / 3, c / d, 0.9 / (1 - r) }'
    rm -f "$file"
  done
fi
