#!/usr/bin/env bash
# The KV cache benchmark of issue 13: `okapi kv-eval --types all` on every quality model, on
# held-out text, then the peers' KL divergence for q8_0 / q4_0 caches on the same files where
# they run, then (with --speed) decode speed per cache type on a real-size model.
#
#   bench/kv_eval.sh [--models DIR] [--chunks N] [--ctx 512] [--types all] [--speed MODEL.gguf]
#                    [--okapi PATH] [--out DIR]
#
# Quality models (made in --models, default $TMPDIR/okapi-bench-models, never in the repo):
#   stories260K        ../shared/models/stories260K.gguf (8-wide heads)
#   bitnet-3M          ../shared/models/bitnet-3M-tinystories.bin converted with `okapi convert` (32)
#   okapi-ts5M-hd64    ../shared/models/zoo/okapi-ts5M-hd64.gguf (64; recipe in its README)
#   okapi-ts5M-hd128   trained here by the recipe below when missing (128; about 25 min on 2 cores)
# Text: the last 200,000 bytes of ../shared/text/tinystories-valid-head.txt. TinyStories' validation
# split is held out from stories260K and bitnet-3M, and the okapi-trained models hold out the last
# 10% of their data, which is this tail.
#
# Peers: llama.cpp's llama-perplexity and ik_llama.cpp's (../shared/peers; LLAMA_PERPLEXITY,
# IK_LLAMA_PERPLEXITY override). Each saves the logits of an f16 cache (flash attention off) and
# runs --kl-divergence with -ctk/-ctv q8_0 (flash attention on, which a quantized V needs), q4_0 K
# with f16 V (flash attention off), and ik's -khad with q4_0 K; okapi then runs the same types. A
# peer that fails to load or run a model is reported, not fatal.
#
# --speed MODEL: `okapi bench` decode (tg32) at depth 512 and 8192, 2 threads, for f16 and the
# compressed types, interleaved round by round; ratios to f16 in the table.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
shared="$repo/../shared"
okapi="$repo/build/okapi"
models="${TMPDIR:-/tmp}/okapi-bench-models"
out="${TMPDIR:-/tmp}/okapi-kv-eval"
chunks=-1
ctx=512
types=all
speed_model=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --chunks) chunks="$2"; shift 2 ;;
    --ctx) ctx="$2"; shift 2 ;;
    --types) types="$2"; shift 2 ;;
    --speed) speed_model="$2"; shift 2 ;;
    --okapi) okapi="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    *) echo "kv_eval.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$models" "$out"
text="$out/tinystories-valid-tail.txt"
tail -c 200000 "$shared/text/tinystories-valid-head.txt" > "$text"

# --- the quality models -------------------------------------------------------------------------
[[ -f "$models/bitnet-3M.gguf" ]] ||
  "$okapi" convert "$shared/models/bitnet-3M-tinystories.bin" -t "$shared/models/tok512.bin" -o "$models/bitnet-3M.gguf"
if [[ ! -f "$models/okapi-ts5M-hd128.gguf" ]]; then
  # The hd64 recipe with 2 query heads of 128 sharing 1 KV head (same parameter count).
  zoo="$shared/models/zoo"
  "$okapi" train --data "$zoo/bitnet3M-generated-stories.txt" "$shared/text/tinystories-valid-head.txt" \
    --tokenizer "$shared/models/tok512.bin" --config stories260K --dim 256 --hidden 768 --layers 6 --heads 2 \
    --kv-heads 1 --ctx 512 --batch 16 --seq 256 --steps 1600 --lr 1e-3 --warmup 100 --lr-min 1e-4 --seed 7 -t 2 \
    --out "$models/okapi-ts5M-hd128.run" --export "$models/okapi-ts5M-hd128.gguf" --log-every 100
fi
declare -A model_file=(
  [stories260K]="$shared/models/stories260K.gguf"
  [bitnet-3M]="$models/bitnet-3M.gguf"
  [okapi-ts5M-hd64]="$shared/models/zoo/okapi-ts5M-hd64.gguf"
  [okapi-ts5M-hd128]="$models/okapi-ts5M-hd128.gguf"
)
order=(stories260K bitnet-3M okapi-ts5M-hd64 okapi-ts5M-hd128)

for name in "${order[@]}"; do
  echo "## $name"
  "$okapi" kv-eval -m "${model_file[$name]}" -f "$text" -c "$ctx" --chunks "$chunks" --types "$types" --no-speed \
    | tee "$out/$name.md"
  echo
done

# --- the peers ----------------------------------------------------------------------------------
peer_kld() {  # peer binary, model, extra args for the quantized run; prints "KLD mean / PPL"
  local bin="$1" model="$2"; shift 2
  local base="$out/peer-base.kld"
  "$bin" -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" -t 2 -ctk f16 -ctv f16 -fa off \
    --kl-divergence-base "$base" > /dev/null 2>&1 || { echo "base run failed"; return; }
  "$bin" -m "$model" -f "$text" -c "$ctx" --chunks "$chunks" -t 2 --kl-divergence-base "$base" --kl-divergence "$@" \
    2>&1 | awk '/^Mean    KLD:/ {k=$3} /^Mean PPL\(Q\) +:/ {p=$4} END {if (k == "") print "failed"; else print k " / " p}'
}
echo "## peers: mean KLD / PPL of the quantized cache against each peer's own f16 cache"
for peer in "llama.cpp:${LLAMA_PERPLEXITY:-$shared/peers/llama-perplexity}" \
            "ik_llama.cpp:${IK_LLAMA_PERPLEXITY:-$shared/peers/ik-llama-perplexity}"; do
  label="${peer%%:*}" bin="${peer#*:}"
  help="$("$bin" --help 2>&1 || true)"  # (--help exits 1 in these builds)
  if [[ "$help" != usage:* ]]; then
    echo "$label: does not run here ($bin: ${help%%$'\n'*})"
    continue
  fi
  for name in "${order[@]}"; do
    echo "$label $name q8_0: $(peer_kld "$bin" "${model_file[$name]}" -ctk q8_0 -ctv q8_0 -fa on)"
    # q4_0 K only, without flash attention: ik's build has no q4_0 in its flash attention
    # (GGML_IQK_FA_ALL_QUANTS=OFF), and a quantized V needs flash attention.
    echo "$label $name q4_0/f16: $(peer_kld "$bin" "${model_file[$name]}" -ctk q4_0 -ctv f16 -fa off)"
    if [[ "$label" == ik_llama.cpp ]]; then
      echo "$label $name q4_0/f16 -khad: $(peer_kld "$bin" "${model_file[$name]}" -ctk q4_0 -ctv f16 -fa off -khad)"
    fi
  done
done
echo "## okapi on the same types (its reference is an f32 cache)"
for name in "${order[@]}"; do
  "$okapi" kv-eval -m "${model_file[$name]}" -f "$text" -c "$ctx" --chunks "$chunks" \
    --types q8_0,q4_0/f16,q4_0/f16+hadamard --no-speed 2>&1 | sed "s/^/$name /"
done

# --- speed --------------------------------------------------------------------------------------
if [[ -n "$speed_model" ]]; then
  echo "## decode tok/s (tg32, 2 threads) on $(basename "$speed_model")"
  speed_types=(f16 q8_0 q4_0 iq4_nl tbq4 tbq3.5 tbq3)
  for round in 1 2 3; do
    for t in "${speed_types[@]}"; do
      "$okapi" bench -m "$speed_model" -p 0 -n 32 -d 512,8192 -t 2 -r 2 -ctk "$t" -ctv "$t" 2>/dev/null |
        grep ' tg' | sed "s/^/| round $round /" | tee -a "$out/speed.md"
    done
  done
fi
