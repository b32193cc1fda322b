#!/usr/bin/env bash
# Causal attention against PyTorch's scaled_dot_product_attention(is_causal=True) on the
# same shapes and thread count, alternating in one run (bench/README.md, "Prefill
# attention"): ours is ops::paged_attention (bench/attention_bench.cpp, the kernel of
# `olmo2 serve` and of batch-invariant generate), theirs bench/attention_sdpa.py. Prints
# one line per run and, per case, the best wall time of each side and ours ÷ SDPA
# (below 1: ours is faster). Both sides' CPU times are printed too: on a loaded machine
# they are the steadier figure.
#
#   bench/attention_vs_sdpa.sh
# Environment (defaults in brackets):
#   PREFILL=2048,4096  ACTS=f32,bf16  DECODE=64x512 (SEQSxCTX, empty: none)  ROUNDS=2
#   REPS=3  THREADS=2  HEADS=16  KV_HEADS=16  HD=128 (the 1B model's attention)
#   BUILD_DIR=build  BENCH_VENV: a venv with torch (default: /opt/olmo2-fixtures-venv,
#   else ~/.cache/olmo2-bench-venv as bench/compare_pytorch.sh makes it)
set -euo pipefail
cd "$(dirname "$0")/.."

PREFILL=${PREFILL:-2048,4096}
ACTS=${ACTS:-f32,bf16}
DECODE=${DECODE-64x512}
ROUNDS=${ROUNDS:-2}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
HEADS=${HEADS:-16}
KV_HEADS=${KV_HEADS:-$HEADS}
HD=${HD:-128}
BUILD=${BUILD_DIR:-build}

python_ok() { [ -x "$1/bin/python" ] && "$1/bin/python" -c 'import torch' 2>/dev/null; }
if [ -n "${BENCH_VENV:-}" ]; then
  VENV=$BENCH_VENV
elif python_ok /opt/olmo2-fixtures-venv; then
  VENV=/opt/olmo2-fixtures-venv
else
  VENV=${XDG_CACHE_HOME:-$HOME/.cache}/olmo2-bench-venv
fi
python_ok "$VENV" || { echo "attention_vs_sdpa: no torch in $VENV (run bench/compare_pytorch.sh once to create it, or set BENCH_VENV)" >&2; exit 1; }
for a in ${ACTS//,/ }; do
  case $a in f32 | bf16) ;; *) echo "attention_vs_sdpa: ACTS: unknown '$a' (f32, bf16)" >&2; exit 2 ;; esac
done
cmake --build "$BUILD" -j "$(nproc)" --target olmo2_attention_bench >/dev/null

cases=()
for t in ${PREFILL//,/ }; do for a in ${ACTS//,/ }; do cases+=("prefill $t $a"); done; done
for d in ${DECODE//,/ }; do for a in ${ACTS//,/ }; do cases+=("decode ${d%x*} ${d#*x} $a"); done; done

results=$(mktemp)
trap 'rm -f "$results"' EXIT
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${cases[@]}"; do
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=$THREADS "$BUILD/bench/olmo2_attention_bench" $c "$REPS" "$HEADS" "$KV_HEADS" "$HD" | tee -a "$results"
    # shellcheck disable=SC2086
    "$VENV/bin/python" bench/attention_sdpa.py $c "$REPS" "$HEADS" "$KV_HEADS" "$HD" --threads "$THREADS" | tee -a "$results"
  done
done

echo
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$results" <<'PY'
import re, sys
best = {}
for line in open(sys.argv[1]):
    f = line.split()
    kv = dict(x.split("=", 1) for x in f[2:] if "=" in x)
    key = (f[1], kv.get("T", kv.get("seqs")), kv["ctx"], kv["act"])
    side = best.setdefault(key, {}).setdefault(f[0], [1e30, 1e30])
    side[0] = min(side[0], float(kv["wall_ms"]))
    side[1] = min(side[1], float(kv["cpu_ms"]))
print(f"{'case':34s} {'ours ms':>9s} {'sdpa ms':>9s} {'ours/sdpa':>9s} {'cpu ratio':>9s}")
for key, s in best.items():
    if "ours" not in s or "sdpa" not in s:
        continue
    name = f"{key[0]} {'T' if key[0] == 'prefill' else 'seqs'}={key[1]} ctx={key[2]} {key[3]}"
    print(f"{name:34s} {s['ours'][0]:9.1f} {s['sdpa'][0]:9.1f} {s['ours'][0] / s['sdpa'][0]:9.2f} "
          f"{s['ours'][1] / s['sdpa'][1]:9.2f}")
PY
