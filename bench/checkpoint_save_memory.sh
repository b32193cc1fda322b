#!/usr/bin/env bash
# Peak resident memory of each rank and the time of one checkpoint save, for the OLMo 2
# 1B width (vocab 100352, hidden 2048, intermediate 8192, 16 heads) with LAYERS layers, at
# tp 2 × pp 2 (docs/architecture.md §7 "Checkpoint writing at scale"). A benchmark, not a
# test. Usage (after scripts/setup.sh):
#   bench/checkpoint_save_memory.sh [LAYERS] [OLMO2_BINARY]
# LAYERS defaults to 2: the whole 1B (16 layers) needs ~24 GB for its training state alone.
# Give another binary (e.g. one built from an older commit) to compare. One step of
# seq-len 16, global batch 4, then a save; a second run without --save-dir gives the
# baseline. Prints per rank: peak RSS (getrusage of the rank's process) and the save time.
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${1:-2}
bin=${2:-build/olmo2}
work=$(mktemp -d /tmp/olmo2-save-memory-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$layers" "$work/config.json" <<'PY'
import json, sys
c = json.load(open("tests/golden/fixtures/configs/OLMo-2-0425-1B/config.json"))
c["num_hidden_layers"] = int(sys.argv[1])
c["vocab_size"] = 100352
c["torch_dtype"] = c["dtype"] = "float32"
json.dump(c, open(sys.argv[2], "w"), indent=1)
PY
head -n 2000 data/fortunes.jsonl > "$work/docs.jsonl"
"$bin" tokenize --tokenizer data/dolma2-tokenizer.json --output "$work/tokens" "$work/docs.jsonl" > /dev/null 2>&1
# Each rank under a parent that reports the child's peak resident set (ru_maxrss, KiB).
cat > "$work/rss.py" <<'PY'
import os, resource, subprocess, sys
status = subprocess.call(sys.argv[1:])
kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"rank {os.environ.get('OMPI_COMM_WORLD_RANK', '?')}: peak RSS {kib / 1e6:.2f} GB", file=sys.stderr)
sys.exit(status)
PY
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {
  mpirun -np 4 --oversubscribe --bind-to none python3 "$work/rss.py" "$bin" train --model-config "$work/config.json" \
    --data "$work/tokens/00000-docs.npy" --seq-len 16 --global-batch 4 --micro-batch 1 --steps 1 --tp 2 --pp 2 --threads 1 \
    "$@" 2>&1 | grep -E 'peak RSS|^saved|error' | sort
}
echo "== $layers layers, no save (baseline)"
run
echo "== $layers layers, one save"
run --save-dir "$work/save"
