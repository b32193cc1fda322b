#!/usr/bin/env bash
# Context parallelism (docs/architecture.md §7 "Context parallelism"): the per-rank peak
# memory of one training step of the OLMo 2 1B width (vocab 100352, hidden 2048,
# intermediate 8192, 16 heads) with LAYERS layers at each sequence length of SEQS and each
# cp of CPS, with --recompute full, one sequence per step. A benchmark, not a test.
# Usage (after the build):
#   bench/context_parallel.sh [LAYERS] [SEQS] [CPS] [OLMO2_BINARY]
#   e.g. bench/context_parallel.sh 1 "8192 16384 32768" "1 2 4"
# Defaults: 1 layer, seq 32768, cp 1 2 4. WIDTH=small (env) trains hidden 256, intermediate
# 1024, 4 heads, vocab 1024 instead: the attention's share of memory at long sequences,
# in minutes. Each (seq, cp) runs alone, one after another;
# a run that fails (out of memory, or a step that does not finish within TIMEOUT seconds,
# default 3600) is reported as such. Prints per run the `memory: rank R peak X GB` lines
# train prints and the step's wall time. The weights, gradients and AdamW moments of
# every rank are the same whatever cp (each CP rank holds the whole (tp, pp) shard:
# ~16 bytes a parameter), so watch `free -g`: 1 layer with untied embeddings is ~7.6 GB a
# rank before any activation, and the runs add cp of those.
set -euo pipefail
cd "$(dirname "$0")/.."
layers=${1:-1}
seqs=${2:-32768}
cps=${3:-"1 2 4"}
bin=${4:-build/olmo2}
timeout_s=${TIMEOUT:-3600}
work=$(mktemp -d /tmp/olmo2-context-parallel-XXXXXX)
trap 'rm -rf "$work"' EXIT
max_seq=0
for s in $seqs; do ((s > max_seq)) && max_seq=$s; done
# The 1B config with LAYERS layers, a context long enough for the longest sequence, and
# random token ids (the memory and time of a step do not depend on the text).
python3 - "$layers" "$max_seq" "$work" "${WIDTH:-1b}" <<'PY'
import json, random, struct, sys
layers, seq, work, small = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "small"
vocab, hidden, inter, heads = (1024, 256, 1024, 4) if small else (100352, 2048, 8192, 16)
c = {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": vocab, "hidden_size": hidden,
     "intermediate_size": inter, "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": heads,
     "max_position_embeddings": max(seq, 4096), "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
     "tie_word_embeddings": False, "eos_token_id": vocab - 1, "pad_token_id": vocab - 2, "torch_dtype": "float32"}
json.dump(c, open(f"{work}/config.json", "w"), indent=1)
n = 2 * seq + 2
rng = random.Random(1)
ids = [rng.randrange(vocab - 2) for _ in range(n)]
header = "{'descr': '<u4', 'fortran_order': False, 'shape': (%d,), }" % n
header += " " * (63 - (10 + len(header)) % 64) + "\n"
with open(f"{work}/tokens.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack(f"<{n}I", *ids))
PY
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for seq in $seqs; do
  for cp in $cps; do
    echo "== seq $seq, cp $cp, $layers layer(s), --recompute full, width ${WIDTH:-1b}"
    start=$(date +%s)
    if timeout "$timeout_s" mpirun -np "$cp" --oversubscribe --bind-to none "$bin" train \
        --model-config "$work/config.json" --data "$work/tokens.npy" --seq-len "$seq" --global-batch 1 \
        --micro-batch 1 --steps 1 --cp "$cp" --recompute full --threads 1 --log-interval 1 \
        > "$work/log" 2>&1; then
      grep -E '^memory: rank|^step 1/' "$work/log" | sort || true
      echo "   one step completed; wall $(($(date +%s) - start)) s (start-up included)"
    else
      grep -E 'error|Killed|memory' "$work/log" | head -3 || true
      echo "   FAILED (out of memory, or no step within ${timeout_s} s)"
    fi
  done
done
