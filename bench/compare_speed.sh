#!/usr/bin/env bash
# Speed of two builds of olmo2 side by side (e.g. before and after a refactor), their runs
# alternating so that both see the same machine state: the forward of the 1B shape
# (olmo2_bench), training steps of the demo model (olmo2_train_bench), and serving load
# on the demo shape (olmo2 serve + olmo2_load_gen). Prints each figure per build and
# the ratio new/old. Not a test.
#   bench/compare_speed.sh OLD_BUILD_DIR NEW_BUILD_DIR [ROUNDS (default 2)] [THREADS (default: all)]
# BENCHES="forward train serve" (the default) picks which run; every single figure is
# also printed as it comes, so the spread between rounds shows the machine's noise.
set -euo pipefail
old=$1 new=$2 rounds=${3:-2} threads=${4:-$(nproc)} benches=${BENCHES:-forward train serve}
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/olmo2-speed.XXXXXX)
trap 'rm -rf "$work"' EXIT
declare -A sum
add() { sum[$1]=$(python3 -c "print(${sum[$1]:-0} + $2)"); echo "round $r: $1 = $2" >&2; }
for ((r = 1; r <= rounds; ++r)); do
  for side in old new; do
    b=${!side}
    # Forward of the 1B shape, T = 128 and 512 (tokens/s).
    [[ $benches == *forward* ]] && "$b/bench/olmo2_bench" --threads "$threads" --benchmark_filter=Forward 2>/dev/null > "$work/fwd.txt"
    [[ $benches == *forward* ]] && while read -r name tps; do add "$side forward T=$name tok/s" "$tps"; done < <(python3 -c '
import re, sys
for line in open(sys.argv[1]):
    m = re.match(r"BM_Forward/(\d+)\S*\s.*\s([\d.]+)/s\s*$", line)
    if m: print(m.group(1), m.group(2))' "$work/fwd.txt")
    # Training steps of the demo model (tokens/s).
    if [[ $benches == *train* ]]; then
    "$b/bench/olmo2_train_bench" --sizes demo --steps 3 --batch 8 --seq-len 128 --threads "$threads" \
      2>/dev/null | grep '"bench":"olmo2_train_bench"' > "$work/train.json"
    add "$side train demo tok/s" "$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["tokens_per_s"])' "$work/train.json")"
    fi
    [[ $benches == *serve* ]] || continue
    # Serving: the demo shape with random weights, 32 streamed requests at concurrency 8.
    [ -d "$work/model" ] || "$b/bench/olmo2_random_model" configs/olmo2-demo-27m.json data/dolma2-tokenizer.json \
      "$work/model" >/dev/null
    "$b/olmo2" serve --model "$work/model/step-00000000" --port 8123 --threads "$threads" 2>/dev/null &
    pid=$!
    for _ in $(seq 100); do curl -sf localhost:8123/health >/dev/null && break; sleep 0.2; done
    "$b/bench/olmo2_load_gen" --port 8123 --json --requests 32 --concurrency 8 --prompt-tokens 128 \
      --max-tokens 32 --warmup 4 > "$work/serve.json" 2>/dev/null
    kill -TERM $pid; wait $pid || true
    while read -r k v; do add "$side serve $k" "$v"; done < <(python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
print("output_tok/s", d["output_tokens_per_s"]); print("ttft_p50_ms", d["ttft_ms"]["p50"])' "$work/serve.json")
  done
done
printf "%-32s %14s %14s %8s\n" figure old new new/old
for key in "${!sum[@]}"; do
  [[ $key == old* ]] || continue
  f=${key#old }
  python3 -c "o=${sum[$key]}/$rounds; n=${sum[new $f]}/$rounds; print(f'%-32s %14.4g %14.4g %8.3f' % ('$f', o, n, n / o))"
done | sort
