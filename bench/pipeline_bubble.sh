#!/usr/bin/env bash
# The pipeline bubble of plain and interleaved 1F1B (docs/architecture.md §5 "Interleaved
# 1F1B"): olmo2_train_bench at pp 4 (4 ranks under mpirun) with --pp-virtual 1 and 2 for
# M = 4, 8 and 16 micro-batches per step, on an 8-layer model (hidden 256, intermediate
# 1024, 4 heads, vocab 1024, seq SEQ) whose compute per stage is far above the time of one
# [seq, 256] f32 message. A benchmark, not a test. Usage (after building olmo2_train_bench):
#   bench/pipeline_bubble.sh [SEQ] [BENCH_BINARY]
# Defaults: seq 256, build/bench/olmo2_train_bench. Env: PP (default 4: the ranks and
# stages), STEPS (default 2), MS (default "4 8 16"; multiples of PP). The bubble of a rank is the time its pp group's calls blocked (the bench
# wraps every group in a TimedCommunicator; with sends posted early that is time waiting
# for an input: the stage idle), as a fraction b of the step; the script prints the mean
# b over ranks, b / (1 − b) (bubble over busy time) and the ideal (p − 1)/(v·m).
# Caveat: 4 ranks on fewer cores are oversubscribed (OMPI_MCA_mpi_yield_when_idle=1 and
# one thread per rank let a waiting rank hand its core over), so a rank also waits while a
# peer that has work is descheduled: on this 2-core machine the measured idle time
# includes that and exceeds the ideal bubble.
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-256}
bin=${2:-build/bench/olmo2_train_bench}
steps=${STEPS:-2}
ms=${MS:-"4 8 16"}
pp=${PP:-4}
work=$(mktemp -d /tmp/olmo2-bubble-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import json, sys
c = {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 1024, "hidden_size": 256,
     "intermediate_size": 1024, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 4,
     "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": False,
     "eos_token_id": 1023, "pad_token_id": 1022}
json.dump(c, open(f"{sys.argv[1]}/config.json", "w"), indent=1)
PY
export OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
printf "%-4s %-3s %-8s %-10s %-10s %-12s %-12s\n" v m "step s" "bubble b" "b/(1-b)" "(p-1)/(v*m)" "tokens/s"
for m in $ms; do
  for v in 1 2; do
    out=$(mpirun --allow-run-as-root --oversubscribe --bind-to none -np "$pp" "$bin" --pp "$pp" --pp-virtual "$v" \
          --sizes "$work/config.json" --seq-len "$seq" --batch "$m" --micro-batch 1 --steps "$steps" --warmup 1 \
          --threads 1 --tmp-dir "$work" 2>/dev/null | grep '^{' | tail -1)
    python3 - "$out" "$v" "$m" "$pp" <<'PY'
import json, sys
j, v, m, p = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
b = j["comm_fraction_by_group_mean"]["pp"]
print(f"{v:<4} {m:<3} {j['step_s']:<8.3f} {b:<10.3f} {b / (1 - b):<10.3f} {(p - 1) / (v * m):<12.3f} {j['tokens_per_s']:<12.0f}")
PY
  done
done
