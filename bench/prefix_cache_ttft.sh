#!/usr/bin/env bash
# Time to first token of requests that share a 1,000-token system prompt, with prefix
# caching (the default) and with --no-prefix-caching, on a small random model served by
# `olmo2 serve` and driven by olmo2_load_gen. A benchmark, not a test (bench/README.md,
# "Prefix caching"). Usage (after scripts/setup.sh and building olmo2, olmo2_load_gen and
# olmo2_random_model):
#   bench/prefix_cache_ttft.sh
# Environment (defaults): BUILD_DIR (build), WORK_DIR (/tmp/olmo2-prefix-cache-bench; the
# model is kept there for later runs), THREADS (2), REQUESTS (32), CONCURRENCY (1),
# SHARED (1000 ids of system prompt), OWN (24 ids of each request's own), MAX_TOKENS (8).
# The model: configs/olmo2-demo-27m.json (hidden 128, 4 layers, the dolma2 vocabulary)
# with a context of 2048, random N(0, 0.02²) weights in f32.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build} work=${WORK_DIR:-/tmp/olmo2-prefix-cache-bench}
threads=${THREADS:-2} requests=${REQUESTS:-32} concurrency=${CONCURRENCY:-1}
shared=${SHARED:-1000} own=${OWN:-24} max_tokens=${MAX_TOKENS:-8}
mkdir -p "$work"
model=$work/model/step-00000000
if [ ! -f "$model/config.json" ]; then
  sed 's/"max_position_embeddings": 512/"max_position_embeddings": 2048/' configs/olmo2-demo-27m.json >"$work/config.json"
  "$build/bench/olmo2_random_model" "$work/config.json" data/dolma2-tokenizer.json "$work/model" >/dev/null
fi

# Serves with the extra options $2…, runs the load into $work/$1.json, stops the server.
# The server binds a port the kernel picks (--port 0) and names it in its --port-file.
run() {
  local name=$1 port=''
  shift
  rm -f "$work/$name.port"
  "$build/olmo2" serve --model "$model" --port 0 --port-file "$work/$name.port" --threads "$threads" "$@" \
    >/dev/null 2>"$work/$name.err" &
  local pid=$!
  for _ in $(seq 1 600); do
    [ -z "$port" ] && [ -s "$work/$name.port" ] && port=$(head -n 1 "$work/$name.port") && port=${port##*:}
    [ -n "$port" ] && curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "prefix_cache_ttft: the server did not start:" >&2
      cat "$work/$name.err" >&2
      exit 1
    fi
    sleep 0.2
  done
  "$build/bench/olmo2_load_gen" --port "$port" --json --requests "$requests" --concurrency "$concurrency" \
    --shared-prefix-tokens "$shared" --prompt-tokens "$own" --max-tokens "$max_tokens" --warmup 1 >"$work/$name.json"
  curl -s "http://127.0.0.1:$port/metrics" | grep '^olmo2_serve_prefix_cache' >"$work/$name.metrics" || true
  kill -TERM "$pid"
  wait "$pid" || true
}

run cached
run uncached --no-prefix-caching
python3 - "$work" <<'EOF'
import json, sys
w = sys.argv[1]
r = {k: json.load(open(f"{w}/{k}.json")) for k in ("cached", "uncached")}
m = {k: dict(l.split() for l in open(f"{w}/{k}.metrics")) for k in r}
c = r["cached"]
print(f"{c['requests']} requests (+{c['warmup']} warm-up), concurrency {c['concurrency']}, prompt "
      f"{c['shared_prefix_tokens']} shared + {c['prompt_tokens']} own ids, {c['max_tokens']} tokens each")
for k in r:
    t = r[k]["ttft_ms"]
    q = float(m[k].get("olmo2_serve_prefix_cache_queries_total", 0))
    h = float(m[k].get("olmo2_serve_prefix_cache_hits_total", 0))
    print(f"{k:9s} TTFT p50 {t['p50']:8.1f} ms  p90 {t['p90']:8.1f} ms  "
          f"(prefix cache: {h:.0f} of {q:.0f} prompt tokens found, {r[k]['failed']} failed)")
print(f"median TTFT without / with prefix caching: "
      f"{r['uncached']['ttft_ms']['p50'] / r['cached']['ttft_ms']['p50']:.2f}x")
EOF
