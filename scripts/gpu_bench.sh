#!/usr/bin/env bash
# The GPU benchmarks of scripts/gpu_check.sh (bench/README.md, "GPU"): figures, not tests.
# On the random 1B model (tests/golden/fixtures/configs/OLMo-2-0425-1B) in bf16:
#   - training tokens/s and MFU at seq 4096 (olmo2 train --device cuda --precision bf16,
#     MFU against PEAK, the bf16 product peak olmo2_gpu_peaks measured in the same run);
#   - batch-1 decode tokens/s as a fraction of the HBM bound (weight bytes per token ÷ BW,
#     the device copy bandwidth measured in the same run), and prefill at T=512 and 4096;
#   - serving throughput at concurrency 64 (olmo2 serve --device cuda + olmo2_load_gen).
# Each figure is printed on a line "figure: ..." that gpu_check.sh puts in its summary.
#
#   scripts/gpu_bench.sh BUILD_DIR PEAK_TFLOPS COPY_GBPS
#
# BUILD_DIR is a build tree (olmo2, bench/…) or the GPU check bundle (bin/…,
# scripts/gpu_bundle.sh); the repository's tree is the script's parent folder, or
# GPU_BENCH_SOURCE.
set -u -o pipefail
BUILD=$(cd "$1" && pwd) PEAK=${2:-0} BW=${3:-0}
cd "${GPU_BENCH_SOURCE:-$(dirname "$0")/..}"
if [[ -x $BUILD/bin/olmo2 ]]; then OLMO2=$BUILD/bin/olmo2 BENCH=$BUILD/bin; else OLMO2=$BUILD/olmo2 BENCH=$BUILD/bench; fi
WORK=${GPU_BENCH_DIR:-/tmp/olmo2-gpu-bench}
CONFIG=tests/golden/fixtures/configs/OLMo-2-0425-1B/config.json
TOKENIZER=data/dolma2-tokenizer.json
mkdir -p "$WORK"
MODEL=$WORK/1b-bf16/step-00000000
if [[ ! -f $MODEL/config.json ]]; then
  tok=; [[ -f $TOKENIZER ]] && tok=$TOKENIZER
  "$BENCH/olmo2_random_model" "$CONFIG" "$tok" "$WORK/1b-bf16" 0.02 bf16 >/dev/null || {
    echo "figure: could not write the random 1B model"; exit 1; }
fi

# ---- decode and prefill -------------------------------------------------------------------
if "$BENCH/olmo2_inference_bench" --model "$MODEL" --device cuda --precision bf16 --prefill 512,4096 \
    --reps 3 --decode-prompt 128 --decode-steps 128 --bandwidth-mib 64 >"$WORK/inference.json" 2>"$WORK/inference.err"; then
  python3 - "$WORK/inference.json" "$BW" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
bw = float(sys.argv[2]) * 1e9
for r in rows:
    if r.get("kind") == "prefill":
        print(f"figure: prefill T={r['tokens']} bf16: {r['tokens_per_s']:.0f} tokens/s")
    if r.get("kind") == "decode":
        bound = bw / r["weight_bytes_per_token"] if bw > 0 else 0
        frac = r["tokens_per_s"] / bound if bound else 0
        print(f"figure: decode batch 1 bf16: {r['tokens_per_s']:.1f} tokens/s, median step "
              f"{r['step_ms_median']:.2f} ms; HBM bound {bound:.0f} tokens/s "
              f"({r['weight_bytes_per_token']/1e9:.2f} GB/token at {bw/1e9:.0f} GB/s): {100*frac:.1f}% (goal 70%)")
PY
else
  echo "figure: inference bench FAILED: $(tail -3 "$WORK/inference.err" | tr '\n' ' ')"
fi

# ---- training ------------------------------------------------------------------------------
# 4.2M random token ids as a '<u4' .npy (without numpy: its header by hand).
python3 - "$WORK/tokens.npy" <<'PY'
import array, random, struct, sys
n, rng = 4_200_000, random.Random(0)
ids = array.array("I", (rng.randrange(100000) for _ in range(n)))
hdr = "{'descr': '<u4', 'fortran_order': False, 'shape': (%d,), }" % n
hdr += " " * ((64 - (10 + len(hdr) + 1) % 64) % 64) + "\n"
with open(sys.argv[1], "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(hdr)) + hdr.encode() + ids.tobytes())
PY
if "$OLMO2" train --device cuda --precision bf16 --model-config "$CONFIG" --data "$WORK/tokens.npy" \
    --seq-len 4096 --global-batch 8 --micro-batch 1 --steps 6 --warmup-steps 1 --log-interval 1 \
    --log-format json --peak-tflops "$PEAK" >"$WORK/train.json" 2>"$WORK/train.err"; then
  python3 - "$WORK/train.json" "$PEAK" "$CONFIG" <<'PY'
import json, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{") and '"tokens_per_second"' in l]
peak = float(sys.argv[2]) * 1e12
c = json.load(open(sys.argv[3]))
h, L, I, V, T = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"], 4096
hd = h // c["num_attention_heads"]; kv = c.get("num_key_value_heads", c["num_attention_heads"])
N = L * (2 * h * h + 2 * h * kv * hd + 3 * h * I) + V * h  # matmul weights incl. lm_head
flops_per_token = 6 * N + 12 * L * c["num_attention_heads"] * hd * (T + 1) / 2
timed = steps[1:] or steps
tps = sum(s["tokens_per_second"] for s in timed) / max(len(timed), 1)
mfu = tps * flops_per_token / peak if peak else 0
print(f"figure: training 1B bf16 seq 4096: {tps:.0f} tokens/s, MFU {100*mfu:.1f}% of the measured "
      f"{peak/1e12:.0f} TFLOP/s bf16 peak ({100*tps*flops_per_token/989e12:.1f}% of the H100/H200 "
      f"datasheet's 989 dense TFLOP/s); goal 40%")
PY
else
  echo "figure: training FAILED: $(tail -3 "$WORK/train.err" | tr '\n' ' ')"
fi

# ---- serving at concurrency 64 ---------------------------------------------------------------
rm -f "$WORK/serve.port"
"$OLMO2" serve --device cuda --model "$MODEL" --port 0 --port-file "$WORK/serve.port" --kv-cache-memory 16GiB \
  >"$WORK/serve.out" 2>"$WORK/serve.err" &
SERVER=$!
PORT=0
for _ in $(seq 1 120); do
  [[ -s $WORK/serve.port ]] && PORT=$(sed -n '1s/.*://p' "$WORK/serve.port")
  (( PORT > 0 )) && curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  kill -0 $SERVER 2>/dev/null || break
  sleep 1
done
if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
  if "$BENCH/olmo2_load_gen" --port "$PORT" --requests 256 --concurrency 64 --prompt-tokens 512 \
      --max-tokens 128 --warmup 16 --json >"$WORK/serve.json" 2>"$WORK/load_gen.err"; then
    python3 - "$WORK/serve.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
def show(k, v):
    if isinstance(v, dict):
        return f"{k} " + " ".join(f"{s} {v[s]:.4g}" for s in ("mean", "p50", "p99") if isinstance(v.get(s), (int, float)))
    return f"{k} {v:.4g}" if isinstance(v, (int, float)) else f"{k} {v}"
keys = ["output_tokens_per_s", "input_tokens_per_s", "requests_per_s", "ttft_ms", "itl_ms", "failed"]
print("figure: serving 1B bf16, concurrency 64, 512-token prompts, 128 new: " +
      ", ".join(show(k, r[k]) for k in keys if k in r))
PY
  else
    echo "figure: load generator FAILED: $(tail -3 "$WORK/load_gen.err" | tr '\n' ' ')"
  fi
else
  echo "figure: serve --device cuda did not start: $(tail -3 "$WORK/serve.err" | tr '\n' ' ')"
fi
kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null
exit 0
