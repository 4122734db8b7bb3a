#!/usr/bin/env bash
# The speculative-decoding benchmark of issue 15: decode speed with each drafter against plain
# decoding of the same target, greedy and sampled, on held-out prompts and on a task that copies
# from its prompt; acceptance rates; greedy outputs checked byte-identical to plain decoding.
#
#   bench/speculative_eval.sh [--models DIR] [--out DIR] [--okapi PATH] [--prompts N] [-n TOKENS]
#                             [--peer-bin DIR [--peers-only]]
#
# --peer-bin DIR: also llama.cpp's llama-bench (plain decode), llama-speculative (same draft
# model) and llama-lookup from DIR, on the same prompts (../shared/peers/llama.cpp when its
# binaries load; else a native rebuild as ../shared/peers/README.md says).
#
# Models (made in --models, default $TMPDIR/okapi-bench-models, never in the repo), trained here
# on the zoo's data and tokenizer when missing:
#   okapi-ts10M   the target: width 384, FFN 1024, 6 layers, 6 heads of 64 sharing 2 KV heads,
#                 9.6M parameters, 38.6 MB of F32 weights (more than the 32 MiB L3): decode is bound
#                 by memory. About 35 minutes on 2 cores.
#   okapi-ts500K  the drafter, 1/18 of it: width 128, FFN 384, 2 layers, 2 heads of 64, same data.
#   okapi-ts10M-lr  the target compressed by `okapi compress` (seed 003's compressed self-drafter).
# Drafters: --draft-model okapi-ts500K (--draft-p-min 0, the default, and 0.75), the compressed self-drafter, --draft-skip (the middle
# layers), --lookup 3. Prompts: story openings from the held-out tail of tinystories-valid-head
# (generate), and "continue" prompts that hold a whole held-out story followed by its first
# sentence again (copy). Each configuration runs interleaved with plain decoding, 2 threads.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
shared="$repo/../shared"
okapi="$repo/build/okapi"
models="${TMPDIR:-/tmp}/okapi-bench-models"
out="${TMPDIR:-/tmp}/okapi-speculative-eval"
n_prompts=8
n_predict=128
peer_bin=""
peers_only=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --models) models="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --okapi) okapi="$2"; shift 2 ;;
    --prompts) n_prompts="$2"; shift 2 ;;
    -n) n_predict="$2"; shift 2 ;;
    --peer-bin) peer_bin="$2"; shift 2 ;;
    --peers-only) peers_only=1; shift ;;
    *) echo "speculative_eval.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
mkdir -p "$models" "$out"
zoo="$shared/models/zoo"
data=("$zoo/bitnet3M-generated-stories.txt" "$shared/text/tinystories-valid-head.txt")
train() {  # name dim hidden layers heads kv_heads steps
  [[ -f "$models/$1.gguf" ]] && return
  "$okapi" train --data "${data[@]}" --tokenizer "$shared/models/tok512.bin" --config stories260K --dim "$2" \
    --hidden "$3" --layers "$4" --heads "$5" --kv-heads "$6" --ctx 512 --batch 16 --seq 256 --steps "$7" --lr 1e-3 \
    --warmup 100 --lr-min 1e-4 --seed 21 -t 2 --out "$models/$1.run" --export "$models/$1.gguf" --log-every 100 >&2
}
train okapi-ts10M 384 1024 6 6 2 1000
train okapi-ts500K 128 384 2 2 1 1000
target="$models/okapi-ts10M.gguf"
draft="$models/okapi-ts500K.gguf"
compressed="$models/okapi-ts10M-lr.gguf"
[[ -f "$compressed" ]] || "$okapi" compress -m "$target" -o "$compressed" --method best --ratio 0.6 \
  --calib "$zoo/bitnet3M-generated-stories.txt" --calib-tokens 8192 -t 2 >&2

# Prompts from the held-out tail (the trainer holds out the last 10% of the tokens).
tail -c 200000 "$shared/text/tinystories-valid-head.txt" > "$out/heldout.txt"
python3 - "$out" "$n_prompts" <<'EOF'
import re, sys, pathlib
out, n = pathlib.Path(sys.argv[1]), int(sys.argv[2])
text = (out / "heldout.txt").read_text(errors="replace")
# Stories begin a line with "Once upon a time" (the first piece is a cut story).
stories = [s.strip() for s in re.split(r"\n(?=Once upon a time)", text)[1:] if len(s.split()) >= 170]
for i, s in enumerate(stories[:n]):
    words = s.split()
    (out / f"generate-{i}.txt").write_text(" ".join(words[:8]))
    story = " ".join(words[:100])
    first = " ".join(words[:12])
    (out / f"copy-{i}.txt").write_text(f"{story}\n\nThe same story again:\n{first}")
EOF

run() {  # task prompt_file temp drafter_flags... -> "tok/s drafted accepted passes md5 total_ms"
  local task="$1" file="$2" temp="$3"
  shift 3
  "$okapi" run -m "$target" -f "$file" -n "$n_predict" --temp "$temp" -s 7 -t 2 -c 512 --ignore-eos --json "$@" 2>/dev/null |
    python3 -c 'import json,sys,hashlib; d=json.load(sys.stdin); print(d["generation_tokens_per_second"], d.get("n_drafted",0), d.get("n_accepted",0), d["decode_passes"], hashlib.md5(d["text"].encode()).hexdigest()[:10], d["prompt_ms"] + d["generation_ms"])'
}

declare -A drafter_flags=(
  [draft-model]="--draft-model $draft"
  [draft-model-p75]="--draft-model $draft --draft-p-min 0.75"
  [compressed-self]="--draft-model $compressed"
  [layer-skip]="--draft-skip 2,3"
  [lookup]="--lookup 3"
)
[[ "$peers_only" == 1 ]] || {
echo "| task | temp | drafter | plain tok/s | speculative tok/s | speed-up | with the prompt | drafted | accepted | acceptance | greedy text identical |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|"
for task in generate copy; do
  for temp in 0 0.8; do
    for name in draft-model draft-model-p75 compressed-self layer-skip lookup; do
      plain_sum=0 spec_sum=0 plain_total=0 spec_total=0 drafted=0 accepted=0 same=yes
      for ((i = 0; i < n_prompts; i++)); do
        file="$out/$task-$i.txt"
        read -r p_ts _ _ _ p_md5 p_ms < <(run "$task" "$file" "$temp")
        # shellcheck disable=SC2086
        read -r s_ts s_d s_a _ s_md5 s_ms < <(run "$task" "$file" "$temp" ${drafter_flags[$name]})
        plain_total=$(awk -v a="$plain_total" -v b="$p_ms" 'BEGIN { print a + b }')
        spec_total=$(awk -v a="$spec_total" -v b="$s_ms" 'BEGIN { print a + b }')
        plain_sum=$(awk -v a="$plain_sum" -v b="$p_ts" 'BEGIN { print a + 1 / b }')
        spec_sum=$(awk -v a="$spec_sum" -v b="$s_ts" 'BEGIN { print a + 1 / b }')
        drafted=$((drafted + s_d)) accepted=$((accepted + s_a))
        [[ "$temp" == 0 && "$p_md5" != "$s_md5" ]] && same=NO
      done
      [[ "$temp" != 0 ]] && same="(sampled)"
      # Speeds as total tokens over total time (harmonic mean of per-prompt tok/s); "with the prompt"
      # compares prompt and generation time together (the drafter's prompt pass is in the former).
      awk -v task="$task" -v temp="$temp" -v name="$name" -v n="$n_prompts" -v p="$plain_sum" -v s="$spec_sum" \
        -v d="$drafted" -v a="$accepted" -v same="$same" -v pt="$plain_total" -v st="$spec_total" 'BEGIN {
          printf "| %s | %s | %s | %.1f | %.1f | %.2fx | %.2fx | %d | %d | %.1f%% | %s |\n", task, temp, name, n / p,
            n / s, p / s, pt / st, d, a, (d > 0 ? 100 * a / d : 0), same }'
    done
  done
done
}

# --- llama.cpp on the same models and prompts ----------------------------------------------------
[[ -z "$peer_bin" ]] && exit 0
peer() {  # tool args... -> "tok/s drafted accepted"
  local tool="$1"
  shift
  LD_LIBRARY_PATH="$peer_bin" "$peer_bin/$tool" "$@" 2>&1 |
    awk '/decoded/ { for (i = 1; i <= NF; i++) if ($i == "speed:") s = $(i + 1) }
         /n_drafted/ { d = $NF } /n_accept/ { a = $NF } END { print s, d + 0, a + 0 }'
}
plain=$(LD_LIBRARY_PATH="$peer_bin" "$peer_bin/llama-bench" -m "$target" -p 0 -n "$n_predict" -t 2 -r 3 2>/dev/null |
  awk -F'|' "/tg$n_predict/ { split(\$(NF-1), a, \" \"); print a[1] }")
echo
echo "llama.cpp plain decode (llama-bench tg$n_predict, 2 threads): $plain tok/s"
echo
echo "| task | temp | llama.cpp tool | tok/s | vs its plain decode | drafted | accepted | acceptance |"
echo "|---|---:|---|---:|---:|---:|---:|---:|"
for task in generate copy; do
  for temp in 0 0.8; do
    for tool in "llama-speculative" "llama-speculative n-max 16" "llama-lookup"; do
      sum=0 drafted=0 accepted=0 ran=0 failed=0
      for ((i = 0; i < n_prompts; i++)); do
        common=(-f "$out/$task-$i.txt" -n "$n_predict" -c 512 -t 2 --temp "$temp" -s 7)
        case "$tool" in
          "llama-speculative") r=$(peer llama-speculative -m "$target" -md "$draft" "${common[@]}") ;;
          "llama-speculative n-max 16") r=$(peer llama-speculative -m "$target" -md "$draft" "${common[@]}" --spec-draft-n-max 16) ;;
          "llama-lookup") r=$(peer llama-lookup -m "$target" "${common[@]}") ;;
        esac
        read -r ts d a <<< "$r"
        if ! awk -v t="$ts" 'BEGIN { exit !(t + 0 > 0) }'; then
          echo "speculative_eval.sh: $tool on $task-$i.txt (temp $temp) gave no speed" >&2
          failed=$((failed + 1))
          continue
        fi
        sum=$(awk -v s="$sum" -v t="$ts" 'BEGIN { print s + 1 / t }')
        drafted=$((drafted + d)) accepted=$((accepted + a)) ran=$((ran + 1))
      done
      awk -v task="$task" -v temp="$temp" -v tool="$tool" -v n="$ran" -v s="$sum" -v p="$plain" -v d="$drafted" \
        -v a="$accepted" -v f="$failed" 'BEGIN { printf "| %s | %s | %s%s | %.1f | %.2fx | %d | %d | %.1f%% |\n", task, temp,
          tool, (f > 0 ? " (" f " runs failed)" : ""), (s > 0 ? n / s : 0), (s > 0 ? n / s / p : 0), d, a,
          (d > 0 ? 100 * a / d : 0) }'
    done
  done
done
