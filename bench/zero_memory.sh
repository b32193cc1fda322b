#!/usr/bin/env bash
# Per-rank peak resident memory of `olmo2 train` under ZeRO stages 1, 2 and 3 at dp 2
# and dp 4, for a model whose parameters dominate its memory (vocab 100352, hidden
# HIDDEN, intermediate 4 × HIDDEN, 4 layers, 8 heads; fp32), and the bytes each stage's
# collectives move per step (docs/architecture.md §7 "ZeRO stages"). A benchmark, not a
# test. Usage (after scripts/setup.sh):
#   bench/zero_memory.sh [HIDDEN] [OLMO2_BINARY]
# HIDDEN defaults to 512 (120M parameters, 0.48 GB of f32 weights): dp 4 under ZeRO-1
# then stays under ~6 GB for all four ranks together. Two steps of seq-len 16, global
# batch 4 × dp, one micro-batch per rank; the peak is getrusage's ru_maxrss of each rank.
set -euo pipefail
cd "$(dirname "$0")/.."
hidden=${1:-512}
bin=${2:-build/olmo2}
work=$(mktemp -d /tmp/olmo2-zero-memory-XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 - "$hidden" "$work" <<'PY'
import json, random, struct, sys
h, work = int(sys.argv[1]), sys.argv[2]
c = {"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": 100352, "hidden_size": h,
     "intermediate_size": 4 * h, "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 8,
     "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 500000.0, "tie_word_embeddings": False,
     "eos_token_id": 100257, "pad_token_id": 100277}
json.dump(c, open(f"{work}/config.json", "w"), indent=1)
n = 65536  # random token ids, as a .npy of uint32 (version 1.0 header, padded to 64 bytes)
header = ("{'descr': '<u4', 'fortran_order': False, 'shape': (%d,), }" % n).ljust(117) + "\n"
random.seed(1)
with open(f"{work}/tokens.npy", "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack(f"<{n}I", *(random.randrange(100000) for _ in range(n))))
PY
cat > "$work/rss.py" <<'PY'
import os, resource, subprocess, sys
status = subprocess.call(sys.argv[1:])
kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"rank {os.environ.get('OMPI_COMM_WORLD_RANK', '?')}: peak RSS {kib / 1e6:.2f} GB", file=sys.stderr)
sys.exit(status)
PY
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
for dp in 2 4; do
  for stage in 1 2 3; do
    echo "== dp $dp, --zero-stage $stage"
    mpirun -np "$dp" --oversubscribe --bind-to none python3 "$work/rss.py" "$bin" train \
      --model-config "$work/config.json" --data "$work/tokens.npy" --seq-len 16 --global-batch $((4 * dp)) \
      --micro-batch 4 --steps 2 --dp "$dp" --zero-stage "$stage" --threads 1 2>&1 | grep -E 'peak RSS|error' | sort
  done
done
