#!/usr/bin/env bash
# Step time with and without --overlap (docs/architecture.md §7 "Overlap"), and the
# per-step breakdown (§9 "Step time breakdown"), of the real `olmo2 train --log-format
# json` under mpirun, at dp 2 and at tp 2 × dp 2 × pp 2 (8 ranks: oversubscribed on a
# machine with fewer cores — then ranks wait for cores as much as for messages). A
# benchmark, not a test. Usage (after building olmo2):
#   bench/overlap.sh [REPEATS] [OLMO2_BINARY]
# The model: hidden 768, 4 layers, intermediate 3072, 12 heads, vocab 8192 (50 M
# parameters, so the DP all-reduce moves 200 MB a step); seq-len 64, global batch 8,
# micro-batch 2, 1 warm-up + 4 timed steps per run; on and off alternate REPEATS (2)
# times. Prints per layout and mode the median step time over the timed steps of all
# repeats, the mean, rank 0's mean breakdown (compute, bubble, waits on tp and dp) and
# rank 0's peak resident memory.
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-2}
bin=${2:-build/olmo2}
work=$(mktemp -d /tmp/olmo2-overlap-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$work" <<'PY'
import json, random, struct, sys
work = sys.argv[1]
c = {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 8192, "hidden_size": 768,
     "intermediate_size": 3072, "num_hidden_layers": 4, "num_attention_heads": 12, "num_key_value_heads": 12,
     "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": False,
     "eos_token_id": 8191, "pad_token_id": 8190}
json.dump(c, open(f"{work}/config.json", "w"), indent=1)
rng = random.Random(1)
n = 200_000
header = "{'descr': '<u4', 'fortran_order': False, 'shape': (%d,), }" % n
header += " " * (63 - (len(header) + 10) % 64) + "\n"
with open(f"{work}/tokens.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack(f"<{n}I", *(rng.randrange(8190) for _ in range(n))))
PY
cat > "$work/summary.py" <<'PY'
import json, statistics, sys
rows = [json.loads(line) for line in sys.stdin]
def mean(key):
    return statistics.mean(r[key] for r in rows)
def wait(group):
    return statistics.mean(r["comm_wait_time"][group] for r in rows)
step = statistics.median(r["step_time"] for r in rows)
rss = max(r["peak_rss_bytes"] for r in rows) / 1e9
print(f"{sys.argv[1]:<22} overlap {sys.argv[2]:<3}  step median {step:6.3f} s, mean {mean('step_time'):6.3f} s"
      f"  (rank 0 means: compute {mean('compute_time'):6.3f}  bubble {mean('bubble_time'):6.3f}"
      f"  wait tp {wait('tp'):6.3f}  dp {wait('dp'):6.3f}; peak RSS {rss:.2f} GB; {len(rows)} steps)")
PY
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
run() {  # np, overlap, layout options...
  local np=$1 overlap=$2
  shift 2
  mpirun -np "$np" --oversubscribe --bind-to none "$bin" train --model-config "$work/config.json" \
    --data "$work/tokens.npy" --seq-len 64 --global-batch 8 --micro-batch 2 --steps 5 --lr 1e-4 \
    --log-format json --overlap "$overlap" "$@" 2> /dev/null | grep '^{' | tail -n 4
}
for layout in "2|--dp 2" "8|--tp 2 --dp 2 --pp 2"; do
  np=${layout%%|*}
  opts=${layout#*|}
  for r in $(seq "$repeats"); do
    for mode in on off; do
      # shellcheck disable=SC2086
      run "$np" "$mode" $opts > "$work/$np-$mode-$r.jsonl"
    done
  done
  for mode in on off; do
    cat "$work/$np-$mode-"*.jsonl | python3 "$work/summary.py" "$opts" "$mode"
  done
done
