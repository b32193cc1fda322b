#!/usr/bin/env bash
# The memory plan against measurement (docs/architecture.md §7 "Memory plan"): runs
# `olmo2 train` for a few steps in several layouts and prints, per rank, the peak resident
# memory it reports ("memory: rank R peak X GB (plan Y GB)") and the ratio plan / peak.
#
# usage: bench/plan_vs_measured.sh [BUILD_DIR] [-- ROW ...]
#   A ROW is "NP|EXTRA TRAIN OPTIONS", e.g. "2|--dp 2 --zero-stage 1 --precision bf16";
#   without rows the default set below runs. Environment: HIDDEN (512), INTER (2048),
#   LAYERS (4), VOCAB (100352), HEADS (8), SEQ (1024), STEPS (2), GLOBAL (4).
# Each row runs alone (the machine's 2 cores); the default set stays under ~6 GB in all.
set -euo pipefail
BUILD=${1:-build}
shift || true
[[ "${1:-}" == "--" ]] && shift
OLMO2=$(realpath "$BUILD/olmo2")
HIDDEN=${HIDDEN:-512} INTER=${INTER:-2048} LAYERS=${LAYERS:-4} VOCAB=${VOCAB:-100352} HEADS=${HEADS:-8}
SEQ=${SEQ:-1024} STEPS=${STEPS:-2} GLOBAL=${GLOBAL:-4}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat > "$WORK/config.json" <<JSON
{"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "vocab_size": $VOCAB, "hidden_size": $HIDDEN,
 "intermediate_size": $INTER, "num_hidden_layers": $LAYERS, "num_attention_heads": $HEADS,
 "num_key_value_heads": $HEADS, "max_position_embeddings": 4096, "rms_norm_eps": 1e-6, "rope_theta": 500000.0,
 "tie_word_embeddings": false, "eos_token_id": 100257, "pad_token_id": 100277}
JSON
python3 - "$WORK/tokens.npy" $((SEQ * GLOBAL * (STEPS + 1))) "$VOCAB" <<'PY'
import random, struct, sys
path, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hdr = "{'descr': '<u4', 'fortran_order': False, 'shape': (%d,), }" % n
hdr += " " * (63 - (10 + len(hdr)) % 64) + "\n"
random.seed(1)
with open(path, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode())
    f.write(struct.pack("<%dI" % n, *[random.randrange(vocab) for _ in range(n)]))
PY
ROWS=("$@")
if [[ ${#ROWS[@]} -eq 0 ]]; then
  ROWS=("1|--micro-batch 2"
        "1|--micro-batch 2 --precision bf16"
        "2|--tp 2 --micro-batch 2"
        "2|--pp 2 --micro-batch 1"
        "2|--dp 2 --micro-batch 2"
        "2|--dp 2 --zero-stage 1 --micro-batch 2"
        "2|--dp 2 --zero-stage 1 --micro-batch 2 --precision bf16"
        "4|--tp 2 --pp 2 --micro-batch 1 --precision bf16")
fi
export OMP_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
printf "%-62s %5s %10s %10s %7s\n" "layout" "rank" "peak GB" "plan GB" "plan/peak"
for row in "${ROWS[@]}"; do
  np=${row%%|*} extra=${row#*|}
  args="train --model-config $WORK/config.json --data $WORK/tokens.npy --seq-len $SEQ --global-batch $GLOBAL
        --steps $STEPS --threads 1 $extra"
  if [[ $np -eq 1 ]]; then
    "$OLMO2" $args > /dev/null 2> "$WORK/err" || { cat "$WORK/err"; exit 1; }
  else
    mpirun --allow-run-as-root --oversubscribe -np "$np" "$OLMO2" $args > /dev/null 2> "$WORK/err" ||
      { cat "$WORK/err"; exit 1; }
  fi
  # The last report (the end of the run) holds the whole run's peaks.
  grep '^memory: rank' "$WORK/err" | tail -n "$np" | while read -r _ _ rank _ peak _ _ plan _; do
    printf "%-62s %5s %10s %10s %7.3f\n" "np $np $extra" "$rank" "$peak" "${plan#(}" \
      "$(python3 -c "print(float('${plan#(}') / float('$peak'))")"
  done
done
