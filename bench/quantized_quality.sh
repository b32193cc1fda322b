#!/usr/bin/env bash
# The quality of quantized weights (docs/architecture.md §3.2 "Quantized weights";
# bench/README.md has the figures): trains the demo model (configs/demo-train.ini) with
# `olmo2 train` on Debian's fortunes minus a held-out tail, then serves its checkpoint in
# bf16, with --weights int8 and with --weights int4 and measures through the completions
# endpoint (bench/quantized_quality.py): the perplexity of the held-out text (echo +
# logprobs: every prompt token's logprob) and the greedy agreement of 200 held-out
# prompts' first 16 tokens with bf16's.
#
#   bench/quantized_quality.sh [--steps N]      (default 300 steps; cache: $QUALITY_DIR)
#
# Everything is written under QUALITY_DIR (default /tmp/olmo2-quantized-quality): the
# split text, its tokens, the run; a checkpoint already there is reused (delete the
# folder to train again). OLMO2 names the binary (default build/olmo2).
set -euo pipefail
cd "$(dirname "$0")/.."
olmo2=${OLMO2:-build/olmo2}
dir=${QUALITY_DIR:-/tmp/olmo2-quantized-quality}
steps=300
if [ "${1:-}" = "--steps" ]; then steps=$2; fi
heldout_docs=1000  # the last documents of data/fortunes.jsonl: never trained on
mkdir -p "$dir"
total=$(wc -l < data/fortunes.jsonl)
if [ ! -f "$dir/train.jsonl" ]; then
  head -n $((total - heldout_docs)) data/fortunes.jsonl > "$dir/train.jsonl"
  tail -n "$heldout_docs" data/fortunes.jsonl > "$dir/heldout.jsonl"
fi
if [ ! -f "$dir/tokens/00000-train.npy" ]; then
  "$olmo2" tokenize --tokenizer data/dolma2-tokenizer.json --output "$dir/tokens" "$dir/train.jsonl"
fi
checkpoint=$(ls -d "$dir"/run/step-* 2>/dev/null | tail -n 1 || true)
if [ -z "$checkpoint" ]; then
  "$olmo2" train --config configs/demo-train.ini --data "$dir/tokens/00000-train.npy" --steps "$steps" \
    --save-dir "$dir/run" --log-interval 50
  checkpoint=$(ls -d "$dir"/run/step-* | tail -n 1)
fi
[ "${QUALITY_TRAIN_ONLY:-0}" = 1 ] && exit 0
python3 bench/quantized_quality.py --olmo2 "$olmo2" --model "$checkpoint" --heldout "$dir/heldout.jsonl" \
  --workdir "$dir"
