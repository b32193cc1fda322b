#!/usr/bin/env bash
# How far 10 training steps at lr 1e-2 drift when only the order of floating-point sums
# changes — one process with another micro-batch size, and tp 2 — for a tiny OLMo 2 model
# and the same model as Olmo 3 (sliding, full, sliding, sliding; window 5; YaRN ×4 over 8).
# The layout tests hold layouts to one process within 1e-4 (relative L2 of every weight);
# this shows which trajectories are too sensitive for that bound (docs/architecture.md §10).
# Usage: bench/training_sensitivity.sh [BUILD_DIR]   (needs /opt/olmo2-fixtures-venv or
# PYTHON with numpy and safetensors; prints the worst relative L2 per comparison).
set -euo pipefail
BUILD=${1:-build}
OLMO2=$(realpath "$BUILD/olmo2")
PY=${PYTHON:-/opt/olmo2-fixtures-venv/bin/python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cd "$WORK"
"$PY" - <<'PY'
import json, numpy as np
base = {"vocab_size": 131, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6, "tie_word_embeddings": False, "eos_token_id": 130, "pad_token_id": 129}
json.dump(dict(base, architectures=["Olmo2ForCausalLM"], model_type="olmo2", rope_theta=10000.0), open("olmo2.json", "w"))
json.dump(dict(base, architectures=["Olmo3ForCausalLM"], model_type="olmo3", sliding_window=5,
               layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"],
               rope_parameters={"full_attention": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                   "original_max_position_embeddings": 8},
                                "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
          open("olmo3.json", "w"))
rng = np.random.RandomState(11)
ids = [130 if i % 64 == 0 else (rng.randint(128) if rng.randint(6) == 0 else (i * 5) % 29) for i in range(4096)]
np.save("tokens.npy", np.array(ids, dtype=np.uint32))
PY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
COMMON=(--data tokens.npy --seq-len 16 --global-batch 8 --steps 10 --lr 1e-2 --warmup-steps 2 --seed 5
  --z-loss 1e-4 --log-format json)
for m in olmo2 olmo3; do
  for mb in 1 2 4; do
    "$OLMO2" train --model-config $m.json "${COMMON[@]}" --micro-batch $mb --threads 1 --save-dir $m-mb$mb >/dev/null
  done
  mpirun -np 2 --oversubscribe "$OLMO2" train --model-config $m.json "${COMMON[@]}" --micro-batch 2 --threads 1 \
    --tp 2 --save-dir $m-tp2 >/dev/null 2>&1
done
"$PY" - <<'PY'
import glob, numpy as np
from safetensors.numpy import load_file
def weights(d): return load_file(glob.glob(f"{d}/step-00000010/*.safetensors")[0])
for m in ("olmo2", "olmo3"):
    ref = weights(f"{m}-mb2")
    for other in ("mb1", "mb4", "tp2"):
        w = weights(f"{m}-{other}")
        worst = max(np.linalg.norm(ref[k].astype(np.float64) - w[k]) / np.linalg.norm(ref[k].astype(np.float64)) for k in ref)
        print(f"{m}: {other} vs one process with micro-batch 2, after 10 steps at lr 1e-2: worst relative L2 {worst:.2e}")
PY
