#!/usr/bin/env bash
# The cost of structured outputs (docs/architecture.md §8, "Structured outputs"): a
# benchmark, not a test (bench/README.md, "Structured outputs"). Usage (after
# scripts/setup.sh and building olmo2, olmo2_random_model and structured_corpus_walk):
#   bench/structured_outputs.sh            # prints the figures as JSON lines
# 1. Engine level (tests/structured/test_corpus.cpp --bench): every corpus entry
#    compiled (schema → grammar text → grammar: median and max µs), one walk each over
#    the dolma2 vocabulary, then fill_mask timed again on every state met (cached):
#    one matcher per step (batch 1) and BATCH matchers per step (batch BATCH); the
#    walks' own fill_mask times include each state's first, uncached computation.
# 2. Server level (bench/structured_outputs.py): `olmo2 serve` on a random model
#    (MODEL_CONFIG: the serve_clients tests' tiny 2-layer model by default; the 1B shape
#    with MODEL_CONFIG=tests/golden/fixtures/configs/OLMo-2-0425-1B/config.json), TTFT
#    plain / new schema / cached schema, and decode ms per token at batch 1 and BATCH,
#    plain and constrained. BASELINE_OLMO2 (another build's olmo2, e.g. main's) is
#    measured plain on the same model after this one: unconstrained requests must cost
#    the same.
# Environment (defaults): BUILD_DIR (build), WORK_DIR (/tmp/structured-bench), THREADS (1),
# ROUNDS (5), BATCH (64), MAX_TOKENS (64), MODEL_CONFIG, BASELINE_OLMO2.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build} work=${WORK_DIR:-/tmp/structured-bench}
threads=${THREADS:-1} rounds=${ROUNDS:-5} batch=${BATCH:-64} max_tokens=${MAX_TOKENS:-64}
mkdir -p "$work"
export OMP_NUM_THREADS=$threads
echo "{\"cpu\": \"$(lscpu | sed -n 's/^Model name: *//p' | head -n 1)\", \"threads\": $threads}"

"$build/tests/structured/structured_corpus_walk" tests/structured/corpus data/dolma2-tokenizer.json \
  "$work/walks.jsonl" --seeds 1 --slack 24 --bench "$batch"
python3 - "$work/walks.jsonl" <<'PY'
import json, statistics, sys
walks = [json.loads(l) for l in open(sys.argv[1]) if '"mask_us"' in l]
first = [us for w in walks for us in w["mask_us"]]
print(json.dumps({"walk_fill_mask_us": {"steps": len(first), "median": round(statistics.median(first), 1),
                                        "p90": round(sorted(first)[len(first) * 9 // 10], 1), "max": round(max(first), 1)}}))
PY

if [ -n "${MODEL_CONFIG:-}" ]; then config=$MODEL_CONFIG; else
  config=$work/tiny-config.json
  python3 -c "import json, sys; sys.path.insert(0, 'tests/serve_clients'); sys.argv = ['x']
import harness; json.dump(harness.MODEL_CONFIG, open('$config', 'w'))"
fi
model=$(ls -d "$work"/model-*/step-* 2>/dev/null | head -n 1 || true)
if [ -z "$model" ]; then
  "$build/bench/olmo2_random_model" "$config" data/dolma2-tokenizer.json "$work/model-$(basename "$config" .json)" 0.2 >/dev/null
  model=$(ls -d "$work"/model-*/step-* | head -n 1)
fi

# Serves $model with binary $1, runs the client with options $2…, stops the server.
measure() {
  local binary=$1
  shift
  rm -f "$work/serve.port"
  "$binary" serve --model "$model" --port 0 --port-file "$work/serve.port" --served-model-name bench \
    --threads "$threads" --max-running-requests "$batch" --http-threads $((batch + 8)) --kv-cache-memory 512MiB 2>"$work/serve.err" >/dev/null &
  local pid=$! port=''
  for _ in $(seq 1 600); do
    [ -s "$work/serve.port" ] && port=$(head -n 1 "$work/serve.port") && port=${port##*:} && \
      curl -sf "http://127.0.0.1:$port/health" >/dev/null && break
    sleep 0.2
  done
  python3 bench/structured_outputs.py "http://127.0.0.1:$port" --rounds "$rounds" --batch "$batch" \
    --max-tokens "$max_tokens" "$@"
  kill -USR1 "$pid"
  wait "$pid" || true
}
echo "{\"server\": \"$model\"}"
measure "$build/olmo2"
if [ -n "${BASELINE_OLMO2:-}" ]; then
  echo "{\"baseline\": \"$BASELINE_OLMO2\"}"
  measure "$BASELINE_OLMO2" --modes plain
fi
