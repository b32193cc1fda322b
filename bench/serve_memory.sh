#!/usr/bin/env bash
# Peak resident memory of `olmo2 serve` against what it must hold: the weights' bytes
# (in the precision served) plus the KV cache, at tp=1 and tp=4 (per rank, a quarter).
# A benchmark, not a test. Usage (after scripts/setup.sh):
#   bench/serve_memory.sh [MODEL_DIR]
# Without MODEL_DIR it writes a random bf16 model of the OLMo 2 1B shape to
# /tmp/olmo2-1b-bf16 (about 3 GB, under a minute; kept for later runs) and uses that.
# The model directory needs a tokenizer.json (serve reads it); it is served in its own
# dtype (--precision default) with a 256 MiB KV cache per process (64 MiB per rank at tp 4).
set -euo pipefail
cd "$(dirname "$0")/.."
model=${1:-}
if [ -z "$model" ]; then
  model=/tmp/olmo2-1b-bf16/step-00000000
  [ -f "$model/config.json" ] || build/bench/olmo2_random_model \
    tests/golden/fixtures/configs/OLMo-2-0425-1B/config.json data/dolma2-tokenizer.json /tmp/olmo2-1b-bf16 0.02 bf16 >/dev/null
fi
params=$(build/olmo2 info --model "$model" | awk '/^parameters/ {print $2}')
dtype=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]+'/config.json')).get('torch_dtype') or json.load(open(sys.argv[1]+'/config.json')).get('dtype'))" "$model")
bytes_per=$([ "$dtype" = bfloat16 ] && echo 2 || echo 4)
weights=$((params * bytes_per))
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# Starts a server ($1 ranks, KV bytes $2) on a port the kernel picks (--port 0, named in
# its --port-file), waits for /health, prints each rank's VmHWM in bytes.
port_file=/tmp/olmo2-serve-memory-$$.port
measure() {
  local np=$1 kv=$2 port='' launcher=() extra=()
  if [ "$np" -gt 1 ]; then launcher=(mpirun -np "$np" --oversubscribe --bind-to none); extra=(--tp "$np"); fi
  rm -f "$port_file"
  "${launcher[@]}" build/olmo2 serve --model "$model" --port 0 --port-file "$port_file" --kv-cache-memory "$kv" \
    --threads 1 "${extra[@]}" >/dev/null 2>/tmp/olmo2-serve-memory.err &
  local pid=$!
  for _ in $(seq 1 1200); do
    [ -z "$port" ] && [ -s "$port_file" ] && port=$(head -n 1 "$port_file") && port=${port##*:}
    [ -n "$port" ] && curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
    if ! kill -0 "$pid" 2>/dev/null; then  # the server ended before answering: say why
      echo "serve_memory: the server did not start:" >&2
      cat /tmp/olmo2-serve-memory.err >&2
      exit 1
    fi
    sleep 0.5
  done
  for p in $(pgrep -f "^build/olmo2 serve --model $model --port 0 --port-file $port_file"); do
    awk '/VmHWM/ {printf "%.0f\n", $2 * 1024}' "/proc/$p/status"
  done
  kill -USR1 "$pid"; wait "$pid" || true
}

echo "model $model: $params parameters, $dtype, weights $weights bytes"; echo
for np in 1 4; do
  kv=$((256 / np))MiB
  kv_bytes=$((256 * 1048576 / np))
  need=$((weights / np + kv_bytes))
  for peak in $(measure "$np" "$kv"); do
    python3 -c "import sys; p, n = int(sys.argv[1]), int(sys.argv[2]); print(f'tp={sys.argv[3]}: peak {p/1e9:.3f} GB, weights/tp + KV {n/1e9:.3f} GB, ratio {p/n:.3f}')" "$peak" "$need" "$np"
  done
done
