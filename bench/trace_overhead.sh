#!/usr/bin/env bash
# What named activations (docs/architecture.md §13) cost a server: the same untraced load
# on an `olmo2` built before them (OLD_OLMO2) and on this tree's, and on this tree's the
# same load with every request reading `layers.*.layer_output` (reduce norm) or
# `layers.*.mlp_neurons` (reduce none). A benchmark, not a test (bench/README.md, "Cost of
# named activations"). Usage (after building olmo2, olmo2_load_gen and olmo2_random_model):
#   OLD_OLMO2=/path/to/old/build/olmo2 bench/trace_overhead.sh
# Each round starts a fresh server per mode, in the order old, new, norm, neurons (odd
# rounds) or the reverse (even ones), and runs olmo2_load_gen on it; the summary gives
# each mode's median over the rounds and the ratios (of the medians, and the range of the
# per-round ratios).
# Environment (defaults): OLD_OLMO2 (required), BUILD_DIR (build), WORK_DIR
# (/tmp/olmo2-trace-overhead; the model is kept there for later runs), ROUNDS (5), THREADS
# (1: on a shared machine a second thread waits at every barrier for a busy core),
# REQUESTS (16), CONCURRENCY (4), PROMPT (64 ids), MAX_TOKENS (32), WARMUP (2).
# The model: configs/olmo2-demo-27m.json widened to hidden 512, intermediate 2048, 8 layers
# of 8 heads (f32, 545 MB, random N(0, 0.02²) weights).
set -euo pipefail
cd "$(dirname "$0")/.."
old=${OLD_OLMO2:?"set OLD_OLMO2 to an olmo2 binary built before named activations"}
build=${BUILD_DIR:-build} work=${WORK_DIR:-/tmp/olmo2-trace-overhead}
rounds=${ROUNDS:-5} threads=${THREADS:-1} requests=${REQUESTS:-16} concurrency=${CONCURRENCY:-4}
prompt=${PROMPT:-64} max_tokens=${MAX_TOKENS:-32} warmup=${WARMUP:-2}
new=$build/olmo2
for f in "$old" "$new" "$build/bench/olmo2_load_gen" "$build/bench/olmo2_random_model"; do
  [ -x "$f" ] || { echo "trace_overhead: $f is not an executable" >&2; exit 1; }
done
mkdir -p "$work"
model=$work/model/step-00000000
if [ ! -f "$model/config.json" ]; then
  python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=512, intermediate_size=2048, num_hidden_layers=8, num_attention_heads=8, num_key_value_heads=8)
json.dump(c, open(sys.argv[2], "w"), indent=2)' configs/olmo2-demo-27m.json "$work/config.json"
  "$build/bench/olmo2_random_model" "$work/config.json" data/dolma2-tokenizer.json "$work/model" >/dev/null
fi
NORM='{"activations": [{"name": "layers.*.layer_output", "reduce": "norm"}]}'
NEURONS='{"activations": ["layers.*.mlp_neurons"]}'

# Serves with binary $2 and runs the load (extra body $3, may be empty) into $work/$1.json;
# a run with failed requests (a server stopped by someone else) is tried once more.
run() {
  local name=$1
  for attempt in 1 2; do
    if serve_and_load "$@"; then return; fi
    echo "trace_overhead: $name, attempt $attempt: requests failed (server log $work/$name.err):" >&2
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("errors"))' "$work/$name.json" >&2 || true
  done
  exit 1
}

serve_and_load() {
  local name=$1 binary=$2 extra=$3 port=$((18000 + RANDOM % 1000))
  "$binary" serve --model "$model" --port "$port" --threads "$threads" --kv-cache-memory 256MiB \
    >/dev/null 2>"$work/$name.err" &
  server=$!
  for _ in $(seq 1 600); do
    curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
    if ! kill -0 "$server" 2>/dev/null; then
      echo "trace_overhead: the server did not start:" >&2
      cat "$work/$name.err" >&2
      exit 1
    fi
    sleep 0.2
  done
  local body=() status=0
  if [ -n "$extra" ]; then
    body=(--extra-body "$extra")
    # The reads are really returned: one small request, every layer's key in its choice.
    curl -s "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
      -d "${extra%\}}, \"prompt\": [1000, 2000], \"max_tokens\": 2}" |
      python3 -c 'import json, sys; a = json.load(sys.stdin)["choices"][0]["activations"]
assert len(a) == 8, sorted(a)' || { echo "trace_overhead: $name: no activations returned" >&2; exit 1; }
  fi
  "$build/bench/olmo2_load_gen" --port "$port" --json --requests "$requests" --concurrency "$concurrency" \
    --prompt-tokens "$prompt" --max-tokens "$max_tokens" --warmup "$warmup" "${body[@]}" >"$work/$name.json" ||
    status=$?
  kill -TERM "$server"
  wait "$server" || true
  server=
  return "$status"
}
server=
trap '[ -z "$server" ] || kill -TERM "$server" 2>/dev/null' EXIT

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq 1 "$rounds"); do
  if [ $((i % 2)) = 1 ]; then
    run "old-$i" "$old" ""
    run "new-$i" "$new" ""
    run "norm-$i" "$new" "$NORM"
    run "neurons-$i" "$new" "$NEURONS"
  else  # the other way round, so that a drift of the machine does not favour one mode
    run "neurons-$i" "$new" "$NEURONS"
    run "norm-$i" "$new" "$NORM"
    run "new-$i" "$new" ""
    run "old-$i" "$old" ""
  fi
  echo "round $i of $rounds done (load average $(cut -d' ' -f1-3 /proc/loadavg))"
done
python3 - "$work" "$rounds" <<'EOF'
import json, statistics, sys
work, rounds = sys.argv[1], int(sys.argv[2])
modes = ["old", "new", "norm", "neurons"]
r = {m: [json.load(open(f"{work}/{m}-{i}.json")) for i in range(1, rounds + 1)] for m in modes}
for m in modes:
    bad = sum(x["failed"] for x in r[m])
    if bad:
        sys.exit(f"trace_overhead: {bad} requests of the {m} runs failed (see {work}/{m}-*.json)")
figures = {"output tok/s": lambda x: x["output_tokens_per_s"], "TTFT mean ms": lambda x: x["ttft_ms"]["mean"],
           "TPOT p50 ms": lambda x: x["tpot_ms"]["p50"], "E2E mean ms": lambda x: x["e2e_ms"]["mean"]}
x = r["old"][0]
print(f"{rounds} rounds; each run {x['requests']} requests (+{x['warmup']} warm-up), concurrency "
      f"{x['concurrency']}, prompt {x['prompt_tokens']} ids, {x['max_tokens']} tokens each")
print(f"{'median over rounds':20s}" + "".join(f"{m:>12s}" for m in modes))
for name, f in figures.items():
    print(f"{name:20s}" + "".join(f"{statistics.median(f(v) for v in r[m]):12.2f}" for m in modes))
print("ratios: median of A / median of B (per-round A/B from … to)")
for a, b in (("new", "old"), ("norm", "new"), ("neurons", "new")):
    for name, f in figures.items():
        per = [f(p) / f(q) for p, q in zip(r[a], r[b])]
        whole = statistics.median(f(v) for v in r[a]) / statistics.median(f(v) for v in r[b])
        print(f"  {a:>7s} / {b:3s} {name:13s} {whole:6.3f}  ({min(per):.3f} … {max(per):.3f})")
EOF
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
