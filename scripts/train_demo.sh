#!/usr/bin/env bash
# The README's main job, after scripts/setup.sh: tokenizes the demo text (Debian's
# fortunes, fetched by setup) with the dolma2 tokenizer, trains a small OLMo 2 model
# from scratch (configs/demo-train.ini), saves it in the HF layout under runs/, and
# generates a continuation from the checkpoint. Extra arguments go to `olmo2 train`
# (e.g. --steps 20).
set -euo pipefail
cd "$(dirname "$0")/.."
olmo2=build/olmo2
tokens=data/fortunes-tokens/00000-fortunes.npy
if [ ! -f "$tokens" ]; then
  "$olmo2" tokenize --tokenizer data/dolma2-tokenizer.json --output data/fortunes-tokens data/fortunes.jsonl
fi
run="runs/demo-$(date +%Y%m%d-%H%M%S)"
"$olmo2" train --config configs/demo-train.ini --save-dir "$run" "$@"
checkpoint=$(ls -d "$run"/step-* | tail -n 1)
echo "checkpoint: $checkpoint (config.json, model.safetensors, tokenizer.json, training_state.*)"
for prompt in "The meaning of life is" "A computer"; do
  "$olmo2" generate --model "$checkpoint" --prompt "$prompt" --max-tokens 24 --temperature 0.8 --top-k 40 --seed 1
done
