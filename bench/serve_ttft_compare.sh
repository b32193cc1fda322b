#!/usr/bin/env bash
# Time to first token of two `olmo2` binaries serving the same small random model, at
# concurrency 1 and 64, alternating in one run (bench/README.md, "TTFT of two builds"):
# for comparing a change to the serving front (such as how the HTTP thread is woken)
# with the build before it. A benchmark, not a test. Usage (after scripts/setup.sh and
# building olmo2, olmo2_load_gen and olmo2_random_model):
#   cp build/olmo2 /tmp/olmo2-before   # before the change; rebuild after it
#   bench/serve_ttft_compare.sh /tmp/olmo2-before [build/olmo2]
# Environment (defaults): BUILD_DIR (build), WORK_DIR (/tmp/olmo2-ttft-compare; the model
# is kept there), THREADS (2), ROUNDS (2: each binary serves this many times, in turn),
# PROMPT (32 ids), MAX_TOKENS (8), LOW_REQUESTS (32, at concurrency 1), HIGH_REQUESTS
# (128, at concurrency 64). The model: configs/olmo2-demo-27m.json's shape, random f32.
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 OLD_OLMO2 [NEW_OLMO2]" >&2; exit 2; }
build=${BUILD_DIR:-build} work=${WORK_DIR:-/tmp/olmo2-ttft-compare}
old=$1 new=${2:-$build/olmo2}
threads=${THREADS:-2} rounds=${ROUNDS:-2} prompt=${PROMPT:-32} max_tokens=${MAX_TOKENS:-8}
low=${LOW_REQUESTS:-32} high=${HIGH_REQUESTS:-128}
mkdir -p "$work"
model=$work/model/step-00000000
if [ ! -f "$model/config.json" ]; then
  "$build/bench/olmo2_random_model" configs/olmo2-demo-27m.json data/dolma2-tokenizer.json "$work/model" >/dev/null
fi

# Serves with binary $2, runs both loads into $work/$1-{1,64}.json, stops the server.
run() {
  local name=$1 binary=$2 port=''
  rm -f "$work/$name.port"
  "$binary" serve --model "$model" --port 0 --port-file "$work/$name.port" --threads "$threads" \
    --max-running-requests 64 >/dev/null 2>"$work/$name.err" &
  local pid=$!
  for _ in $(seq 1 600); do
    [ -z "$port" ] && [ -s "$work/$name.port" ] && port=$(head -n 1 "$work/$name.port") && port=${port##*:}
    [ -n "$port" ] && curl -s -o /dev/null "http://127.0.0.1:$port/health" && break
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "serve_ttft_compare: the server did not start:" >&2
      cat "$work/$name.err" >&2
      exit 1
    fi
    sleep 0.2
  done
  "$build/bench/olmo2_load_gen" --port "$port" --json --requests "$low" --concurrency 1 \
    --prompt-tokens "$prompt" --max-tokens "$max_tokens" --warmup 2 >"$work/$name-1.json"
  "$build/bench/olmo2_load_gen" --port "$port" --json --requests "$high" --concurrency 64 \
    --prompt-tokens "$prompt" --max-tokens "$max_tokens" --warmup 8 >"$work/$name-64.json"
  batched "$port" >"$work/$name-batch.json"
  kill -TERM "$pid"
  wait "$pid" || true
}

# One client, 16 requests of 4 prompts each (one HTTP response carries four engine
# requests), streamed: the time to the first event and to the whole answer, in ms.
batched() {
  python3 - "$1" "$prompt" "$max_tokens" <<'PY'
import http.client, json, random, statistics, sys, time
port, plen, max_tokens = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(0)
first, whole = [], []
for i in range(18):
    body = json.dumps({"prompt": [[rng.randrange(1000, 50000) for _ in range(plen)] for _ in range(4)],
                       "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True})
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    t1 = None
    while True:
        line = resp.readline()
        if not line:
            break
        if line.startswith(b"data:") and t1 is None:
            t1 = time.perf_counter()
    t2 = time.perf_counter()
    conn.close()
    if i >= 2:  # two warm-up requests
        first.append((t1 - t0) * 1e3)
        whole.append((t2 - t0) * 1e3)
print(json.dumps({"first_p50": statistics.median(first), "whole_p50": statistics.median(whole)}))
PY
}

for r in $(seq 1 "$rounds"); do
  run "old$r" "$old"
  run "new$r" "$new"
done
python3 - "$work" "$rounds" "$old" "$new" <<'PY'
import json, statistics, sys
w, rounds, old, new = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
print(f"old: {old}\nnew: {new}")
for c in (1, 64):
    for side in ("old", "new"):
        rs = [json.load(open(f"{w}/{side}{r}-{c}.json")) for r in range(1, rounds + 1)]
        p50 = [x["ttft_ms"]["p50"] for x in rs]
        p90 = [x["ttft_ms"]["p90"] for x in rs]
        failed = sum(x["failed"] for x in rs)
        print(f"concurrency {c:2d} {side}: TTFT p50 " + " / ".join(f"{v:7.1f}" for v in p50) +
              " ms, p90 " + " / ".join(f"{v:7.1f}" for v in p90) + f" ms  ({failed} failed)")
    o = statistics.median(json.load(open(f"{w}/old{r}-{c}.json"))["ttft_ms"]["p50"] for r in range(1, rounds + 1))
    n = statistics.median(json.load(open(f"{w}/new{r}-{c}.json"))["ttft_ms"]["p50"] for r in range(1, rounds + 1))
    print(f"concurrency {c:2d}: median p50 new / old = {n / o:.3f}")
for side in ("old", "new"):
    rs = [json.load(open(f"{w}/{side}{r}-batch.json")) for r in range(1, rounds + 1)]
    print(f"4 prompts per request, streamed, {side}: first event p50 " +
          " / ".join(f"{x['first_p50']:7.1f}" for x in rs) + " ms, whole answer p50 " +
          " / ".join(f"{x['whole_p50']:7.1f}" for x in rs) + " ms")
PY
