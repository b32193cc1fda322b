#!/usr/bin/env bash
# Ours against PyTorch eager (transformers' Olmo2ForCausalLM) on the same machine, the same
# weights and the same thread count, in one run (bench/README.md, "Against PyTorch"):
#   prefill  one sequence of T tokens (PREFILL, 128 and 512), last-token logits, batch 1
#   decode   DECODE_STEPS greedy batch-1 steps with a KV cache after a DECODE_PROMPT-token
#            prompt; also as a % of the bound (copy bandwidth / weight bytes per token)
#   train    training steps (AdamW) of the demo shape and the 130M "wide" shape
# each in fp32 and bf16. One command, nothing to set up first:
#   1. the Python environment: BENCH_VENV if given, else /opt/olmo2-fixtures-venv when it
#      has torch and transformers, else ~/.cache/olmo2-bench-venv, created with the pinned
#      versions of tests/golden/requirements-fixtures.txt (PyPI; about 6 GB, once);
#   2. builds olmo2_inference_bench, olmo2_train_bench and olmo2_random_model in BUILD_DIR;
#   3. writes one checkpoint of random weights (olmo2_random_model, CKPT_DTYPE bf16) for
#      CONFIG; both sides load it, fp32 rows widening it (exactly) and bf16 rows as stored;
#      the training rows build both models from the same config.json;
#   4. ROUNDS rounds of ours then PyTorch for each precision and row group (ours, torch,
#      ours, torch, ...), every figure printed as it comes;
#   5. the table: each row's mean over the rounds, ours, PyTorch and ours/PyTorch
#      (above 1: ours is faster), the rounds' spread, decode as % of the bandwidth bound,
#      and which matrix-product path each side ran.
# Not a test.
#
# Options (environment; defaults in brackets):
#   ROWS=prefill,decode,train  PRECISIONS=fp32,bf16  ROUNDS=2  THREADS=2
#   CONFIG=tests/golden/fixtures/configs/OLMo-2-0425-1B/config.json  (prefill/decode model shape)
#   PREFILL=128,512  PREFILL_REPS=3  DECODE_PROMPT=128  DECODE_STEPS=64  BANDWIDTH_MIB=1024
#   TRAIN_SIZES=demo,wide (or config.json paths)  TRAIN_STEPS=3  TRAIN_BATCH=8  TRAIN_SEQ=128
#   TORCH_ATTN=sdpa|eager [sdpa]  CKPT_DTYPE=bf16|fp32 [bf16]
#   SERVE_PRODUCTS=1|0 [1]: our prefill/decode with the batch-invariant products that
#     `olmo2 serve` uses (1), or the OpenBLAS products of `olmo2 generate` (0)
#   BUILD_DIR=build  WORK_DIR=/tmp/olmo2-compare-pytorch (checkpoints, logs, results)
#   BENCH_VENV (see 1.)
# A quick check at small scale (minutes on 2 cores):
#   CONFIG=configs/olmo2-demo-27m.json PREFILL=32 DECODE_STEPS=8 TRAIN_SIZES=demo \
#     TRAIN_BATCH=2 TRAIN_SEQ=32 TRAIN_STEPS=1 ROUNDS=1 bench/compare_pytorch.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS=${ROWS:-prefill,decode,train}
PRECISIONS=${PRECISIONS:-fp32,bf16}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-2}
CONFIG=${CONFIG:-tests/golden/fixtures/configs/OLMo-2-0425-1B/config.json}
PREFILL=${PREFILL:-128,512}
PREFILL_REPS=${PREFILL_REPS:-3}
DECODE_PROMPT=${DECODE_PROMPT:-128}
DECODE_STEPS=${DECODE_STEPS:-64}
BANDWIDTH_MIB=${BANDWIDTH_MIB:-1024}
TRAIN_SIZES=${TRAIN_SIZES:-demo,wide}
TRAIN_STEPS=${TRAIN_STEPS:-3}
TRAIN_BATCH=${TRAIN_BATCH:-8}
TRAIN_SEQ=${TRAIN_SEQ:-128}
TORCH_ATTN=${TORCH_ATTN:-sdpa}
SERVE_PRODUCTS=${SERVE_PRODUCTS:-1}
serve_flag=()
[ "$SERVE_PRODUCTS" = 1 ] && serve_flag=(--batch-invariant)
CKPT_DTYPE=${CKPT_DTYPE:-bf16}
BUILD=${BUILD_DIR:-build}
WORK=${WORK_DIR:-/tmp/olmo2-compare-pytorch}
TOKENIZER=${TOKENIZER:-data/dolma2-tokenizer.json}

has() { [[ ",$1," == *",$2,"* ]]; }
for r in ${ROWS//,/ }; do
  case $r in prefill | decode | train) ;; *) echo "compare_pytorch: ROWS: unknown row '$r' (prefill, decode, train)" >&2; exit 2 ;; esac
done
for p in ${PRECISIONS//,/ }; do
  case $p in fp32 | bf16) ;; *) echo "compare_pytorch: PRECISIONS: unknown precision '$p' (fp32, bf16)" >&2; exit 2 ;; esac
done
[ -f "$CONFIG" ] || { echo "compare_pytorch: CONFIG $CONFIG not found" >&2; exit 2; }
mkdir -p "$WORK"

# 1. The Python environment.
python_ok() { [ -x "$1/bin/python" ] && "$1/bin/python" -c 'import torch, transformers, safetensors' 2>/dev/null; }
if [ -n "${BENCH_VENV:-}" ]; then
  VENV=$BENCH_VENV
elif python_ok /opt/olmo2-fixtures-venv; then
  VENV=/opt/olmo2-fixtures-venv
else
  VENV=${XDG_CACHE_HOME:-$HOME/.cache}/olmo2-bench-venv
fi
if ! python_ok "$VENV"; then
  echo "== creating $VENV (tests/golden/requirements-fixtures.txt, from PyPI)" >&2
  if [ ! -x "$VENV/bin/python" ] && ! python3 -m venv "$VENV"; then
    echo "compare_pytorch: python3 -m venv failed (Debian: apt-get install python3-venv)" >&2
    exit 1
  fi
  "$VENV/bin/pip" install --quiet --disable-pip-version-check --only-binary :all: \
    -r tests/golden/requirements-fixtures.txt
fi
PY=$VENV/bin/python

# 2. Our programs.
echo "== building in $BUILD (log: $WORK/build.log)" >&2
if ! { { [ -f "$BUILD/CMakeCache.txt" ] || cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release; } &&
  cmake --build "$BUILD" -j "$(nproc)" --target olmo2_inference_bench olmo2_train_bench olmo2_random_model; } \
  > "$WORK/build.log" 2>&1; then
  tail -30 "$WORK/build.log" >&2
  echo "compare_pytorch: the build failed (log: $WORK/build.log)" >&2
  exit 1
fi

# Every process sees the same thread count; torch's CPU kernels are left at their best
# (no ATEN_CPU_CAPABILITY).
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS
unset ATEN_CPU_CAPABILITY MKL_ENABLE_INSTRUCTIONS
stamp=$(date +%Y%m%d-%H%M%S)
results=$WORK/results-$stamp.jsonl
logs=$WORK/logs-$stamp
mkdir -p "$logs"
: > "$results"
echo "== results: $results, logs: $logs/" >&2

# run SIDE ROUND NAME CMD...: runs CMD (output in $logs/NAME.{out,err}), echoes its summary
# lines and appends its JSON lines, tagged with the side, the round and $label (when set), to
# the results.
label=
run() {
  local side=$1 round=$2 name=$3
  shift 3
  echo "-- round $round, $side: $name" >&2
  if ! "$@" > "$logs/$name.out" 2> "$logs/$name.err"; then
    echo "compare_pytorch: failed: $* (see $logs/$name.err)" >&2
    tail -5 "$logs/$name.err" >&2
    exit 1
  fi
  grep -v '^{' "$logs/$name.out" >&2 || true
  "$PY" -c '
import json, sys
side, rnd, label = sys.argv[1], int(sys.argv[2]), sys.argv[4]
for line in open(sys.argv[3]):
    if line.startswith("{"):
        d = json.loads(line); d["side"] = side; d["round"] = rnd
        if label: d["label"] = label
        print(json.dumps(d)); print("   ", side, d.get("kind", "train"), d.get("precision", ""), d.get("tokens", d.get("config", d.get("size", ""))),
            "tokens/s %.4g" % d["tokens_per_s"] if "tokens_per_s" in d else "", file=sys.stderr)
' "$side" "$round" "$logs/$name.out" "$label" >> "$results"
}

# Machine and versions.
{
  echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), $(nproc) CPUs," \
    "flags: $(grep -m1 -o -w -E 'avx512f|avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); threads $THREADS; rounds $ROUNDS"
} | tee "$logs/machine.txt" >&2
run torch 0 torch-info "$PY" bench/pytorch_reference.py info --threads "$THREADS"

# 3. The shared checkpoint (prefill and decode rows), written once per config and dtype.
ckpt=
if has "$ROWS" prefill || has "$ROWS" decode; then
  key=$(cat "$CONFIG" | sha256sum | cut -c1-12)-$CKPT_DTYPE
  ckpt=$WORK/model-$key/step-00000000
  if [ ! -f "$ckpt/config.json" ]; then
    rm -rf "$WORK/model-$key"
    tok=
    [ -f "$TOKENIZER" ] && tok=$TOKENIZER
    echo "== writing random $CKPT_DTYPE weights for $CONFIG into $WORK/model-$key" >&2
    "$BUILD/bench/olmo2_random_model" "$CONFIG" "$tok" "$WORK/model-$key" 0.02 "$CKPT_DTYPE" >&2
  fi
fi

# The training shapes, as config.json files both sides read.
train_configs=()
if has "$ROWS" train; then
  for s in ${TRAIN_SIZES//,/ }; do
    case $s in
      demo) train_configs+=("demo=configs/olmo2-demo-27m.json") ;;
      wide)  # bench/train_bench_common.cpp's "wide": 130M parameters
        cat > "$WORK/wide-config.json" <<'EOF'
{"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "attention_bias": false, "attention_dropout": 0.0,
 "hidden_act": "silu", "hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 8,
 "num_attention_heads": 8, "num_key_value_heads": 8, "max_position_embeddings": 4096, "rms_norm_eps": 1e-06,
 "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}, "tie_word_embeddings": false,
 "vocab_size": 100352, "initializer_range": 0.02, "bos_token_id": null, "eos_token_id": 100257,
 "pad_token_id": 100277, "use_cache": true, "dtype": "float32"}
EOF
        train_configs+=("wide=$WORK/wide-config.json") ;;
      *) [ -f "$s" ] || { echo "compare_pytorch: TRAIN_SIZES: $s is neither demo, wide nor a file" >&2; exit 2; }
        train_configs+=("$(basename "$(dirname "$s")")=$s") ;;
    esac
  done
fi

# 4. Rounds: ours then PyTorch, for each precision and row group.
prefill_arg=
has "$ROWS" prefill && prefill_arg=$PREFILL
decode_steps=0
has "$ROWS" decode && decode_steps=$DECODE_STEPS
for ((r = 1; r <= ROUNDS; ++r)); do
  for p in ${PRECISIONS//,/ }; do
    if [ -n "$ckpt" ]; then
      run ours "$r" "infer-$p-ours-$r" "$BUILD/bench/olmo2_inference_bench" --model "$ckpt" --precision "$p" \
        --threads "$THREADS" --prefill "$prefill_arg" --reps "$PREFILL_REPS" --warmup 1 \
        --decode-prompt "$DECODE_PROMPT" --decode-steps "$decode_steps" --bandwidth-mib "$BANDWIDTH_MIB" \
        "${serve_flag[@]}"
      run torch "$r" "infer-$p-torch-$r" "$PY" bench/pytorch_reference.py infer --model "$ckpt" --precision "$p" \
        --threads "$THREADS" --prefill "$prefill_arg" --reps "$PREFILL_REPS" --warmup 1 \
        --decode-prompt "$DECODE_PROMPT" --decode-steps "$decode_steps" --attn "$TORCH_ATTN"
    fi
    for tc in "${train_configs[@]}"; do
      label=${tc%%=*} cfg=${tc#*=}
      run ours "$r" "train-$label-$p-ours-$r" "$BUILD/bench/olmo2_train_bench" --sizes "$cfg" --precision "$p" \
        --threads "$THREADS" --steps "$TRAIN_STEPS" --batch "$TRAIN_BATCH" --seq-len "$TRAIN_SEQ"
      run torch "$r" "train-$label-$p-torch-$r" "$PY" bench/pytorch_reference.py train --config "$cfg" \
        --precision "$p" --threads "$THREADS" --steps "$TRAIN_STEPS" --batch "$TRAIN_BATCH" --seq-len "$TRAIN_SEQ" \
        --attn "$TORCH_ATTN"
    done
    label=
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$logs/machine.txt" >&2

# 5. The table.
"$PY" - "$results" "$logs/machine.txt" <<'EOF'
import json, sys
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1])]
print()
print(open(sys.argv[2]).read().rstrip())
info = next((d for d in rows if d.get("kind") == "info"), {})
vals = defaultdict(lambda: {"ours": [], "torch": []})
order = []

def put(key, side, v):
    if key not in vals:
        order.append(key)
    vals[key][side].append(v)

# The MFU denominator, one for every row and both sides: the best fp32 2048^3 product
# measured in this run, OpenBLAS sgemm in our train runs or torch.mm.
ours_peak = max([d["sgemm_peak_gflops"] for d in rows if d.get("bench") == "olmo2_train_bench"] or [0])
torch_peak = next((d["mm_2048_fp32_gflops"] for d in rows if d.get("kind") == "info"), 0)
peak = max(ours_peak, torch_peak) if ours_peak else 0
bound = {}
paths = {}
for d in rows:
    k, side, p = d.get("kind"), d["side"], d.get("precision")
    if d.get("bench") == "olmo2_train_bench":
        k = "train"
    if k == "prefill":
        put(f"prefill T={d['tokens']} {p} (tokens/s)", side, d["tokens_per_s"])
    elif k == "decode":
        put(f"decode {d['steps']} steps {p} (tokens/s)", side, d["tokens_per_s"])
        if side == "ours":
            bound.setdefault(p, []).append((d["bound_tokens_per_s"], d["copy_bandwidth_bytes_per_s"],
                                            d["weight_bytes_per_token"]))
    elif k == "train":
        label = d.get("label", d.get("size", d.get("config")))
        put(f"train {label} {p} (tokens/s)", side, d["tokens_per_s"])
        if peak:
            put(f"train {label} {p} (MFU %)", side, 100.0 * d["model_flops_per_step"] / d["step_s"] * 1e-9 / peak)
    if side == "ours" and "product_path" in d and p:
        paths.setdefault(p, set()).add(d["product_path"])

mean = lambda v: sum(v) / len(v) if v else float("nan")
fmt = lambda x: f"{x:.4g}" if x == x else "-"
spread = lambda v: f"{min(v):.4g}..{max(v):.4g}" if len(v) > 1 else ""
print()
print(f"{'row':<38} {'ours':>10} {'PyTorch':>10} {'ours/PyTorch':>13}   spread over rounds (ours; PyTorch)")
for key in order:
    o, t = vals[key]["ours"], vals[key]["torch"]
    mo, mt = mean(o), mean(t)
    ratio = mo / mt if o and t and mt else float("nan")
    print(f"{key:<38} {fmt(mo):>10} {fmt(mt):>10} {fmt(ratio):>13}   {spread(o)}; {spread(t)}")
    if key.startswith("decode") and "(tokens/s)" in key:
        p = key.split()[3]
        if p in bound:
            b = mean([x[0] for x in bound[p]])
            print(f"{'  % of bandwidth bound':<38} {100 * mo / b:>9.1f}% {100 * mt / b:>9.1f}%"
                  f"{'':>14}   bound {b:.3g} tokens/s = {mean([x[1] for x in bound[p]]) * 1e-9:.1f} GB/s copy"
                  f" / {bound[p][0][2] * 1e-9:.3f} GB weights per token")
print()
if peak:
    print(f"MFU = model FLOPs/s / {peak:.1f} GFLOP/s for every row and both sides: the best fp32 2048^3 product of"
          f" this run (OpenBLAS sgemm in our train runs {ours_peak:.1f}, torch.mm {torch_peak:.1f})")
for p in sorted(paths):
    print(f"ours, {p} products: {'; '.join(sorted(paths[p]))}")
if any("(Prescott)" in x for v in paths.values() for x in v):
    print("warning: OpenBLAS runs its Prescott (SSE3) kernels: it does not know this CPU. Its sgemm can then be several times"
          " slower than with OPENBLAS_CORETYPE=SkylakeX on an AVX-512 machine; the fp32 rows and the MFU peak"
          " measure that. Set OPENBLAS_CORETYPE to compare at the machine's level")
if info:
    bf = info.get("onednn_bf16_linear") or {}
    print(f"PyTorch {info['torch']}, transformers {info['transformers']}, {info['threads']} threads, ATen CPU "
          f"capability {info['cpu_capability']}; bf16 linear: oneDNN {bf.get('primitive') or 'not used'}"
          f" (isa {bf.get('isa') or '?'}); fp32 linear: {'MKL' if info.get('mkl') else 'BLAS'}"
          f"{' / oneDNN ' + info['onednn_fp32_linear']['primitive'] if info.get('onednn_fp32_linear') else ''};"
          f" torch.mm 2048^3: fp32 {info['mm_2048_fp32_gflops']:.1f}, bf16 {info['mm_2048_bf16_gflops']:.1f} GFLOP/s")
attn = sorted({d.get("attn") for d in rows if d["side"] == "torch" and d.get("attn")})
if attn:
    print(f"PyTorch attention: {', '.join(attn)}; ratios above 1: ours is faster")
EOF
echo "results: $results" >&2
