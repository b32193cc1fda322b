#!/usr/bin/env bash
# Ours against PyTorch eager (transformers' Olmo2ForCausalLM) and llama.cpp on the same
# machine, the same weights and the same thread count, in one run (bench/README.md,
# "Against PyTorch"):
#   prefill  one sequence of T tokens (PREFILL, 128, 512 and 2048), last-token logits, batch 1
#   decode   DECODE_STEPS greedy batch-1 steps with a KV cache after a DECODE_PROMPT-token
#            prompt; ours also as a % of the bound (read bandwidth / bytes read per token:
#            the weights as held + the KV cache at the step's position) and the step's
#            time by kind of work (products, attention, norms/RoPE/elementwise, ...)
#   train    training steps (AdamW) of the demo shape and the 130M "wide" shape
# each in fp32 and bf16 (PyTorch; llama.cpp's bf16 GGUF in the bf16 prefill/decode rows);
# and decode with quantized weights (WEIGHTS): ours --weights int8 / int4 against
# llama.cpp's Q8_0 / Q4_K_M of the same checkpoint. One command, nothing to set up first:
#   1. the Python environment: BENCH_VENV if given, else /opt/olmo2-fixtures-venv when it
#      has torch and transformers, else ~/.cache/olmo2-bench-venv, created with the pinned
#      versions of tests/golden/requirements-fixtures.txt (PyPI; about 6 GB, once);
#   2. builds olmo2_inference_bench, olmo2_train_bench and olmo2_random_model in BUILD_DIR;
#      with LLAMA_CPP=1, llama.cpp (bench/llama_cpp_setup.sh: a pinned source from PyPI,
#      built once in ~/.cache/olmo2-llama.cpp, about 10 minutes on 2 cores);
#   3. writes one checkpoint of random weights (olmo2_random_model, CKPT_DTYPE bf16) for
#      CONFIG; both sides load it, fp32 rows widening it (exactly) and bf16 rows as stored;
#      the training rows build both models from the same config.json; llama.cpp's GGUF
#      files (bf16, Q8_0, Q4_K_M) are converted from it (once per checkpoint);
#   4. ROUNDS rounds of ours then PyTorch then llama.cpp for each precision and row group
#      (ours, torch, llama, ours, ...), every figure printed as it comes;
#   5. the table (bench/compare_table.py): each row's mean over the rounds for ours,
#      PyTorch and llama.cpp, ours ÷ the best of the others (above 1: ours is faster), the
#      rounds' spread, our decode as % of the read-bandwidth bound with its breakdown, and
#      which paths each side ran.
# Not a test.
#
# Options (environment; defaults in brackets):
#   ROWS=prefill,decode,train  PRECISIONS=fp32,bf16  ROUNDS=2  THREADS=2
#   CONFIG=tests/golden/fixtures/configs/OLMo-2-0425-1B/config.json  (prefill/decode model shape)
#   PREFILL=128,512,2048  PREFILL_REPS=3  DECODE_PROMPT=128  DECODE_STEPS=64
#   BANDWIDTH_MIB=1024 (the buffer of the read-bandwidth measure; >= 1024 to leave the caches out)
#   WEIGHTS=int8,int4 (the quantized decode rows; '' leaves them out; ours skip with a
#     printed reason while olmo2_inference_bench has no --weights)
#   LLAMA_CPP=1|0 [1]: llama.cpp's rows (0 leaves them out); LLAMA_CPP_CACHE [~/.cache/olmo2-llama.cpp]
#   PYTORCH=1|0 [1]: PyTorch's rows and its info (0 leaves them out: ours against llama.cpp)
#   TRAIN_SIZES=demo,wide (or config.json paths)  TRAIN_STEPS=3  TRAIN_BATCH=8  TRAIN_SEQ=128
#   TORCH_ATTN=sdpa|eager [sdpa]  CKPT_DTYPE=bf16|fp32 [bf16]
#   SERVE_PRODUCTS=1|0 [1]: our prefill/decode with the batch-invariant products that
#     `olmo2 serve` uses (1), or the OpenBLAS products of `olmo2 generate` (0)
#   BUILD_DIR=build  WORK_DIR=/tmp/olmo2-compare-pytorch (checkpoints, logs, results)
#   BENCH_VENV (see 1.)
# A quick check at small scale (minutes on 2 cores, once llama.cpp is built):
#   CONFIG=configs/olmo2-demo-27m.json PREFILL=32 DECODE_STEPS=8 TRAIN_SIZES=demo \
#     TRAIN_BATCH=2 TRAIN_SEQ=32 TRAIN_STEPS=1 ROUNDS=1 bench/compare_pytorch.sh
set -euo pipefail
cd "$(dirname "$0")/.."

ROWS=${ROWS:-prefill,decode,train}
PRECISIONS=${PRECISIONS:-fp32,bf16}
ROUNDS=${ROUNDS:-2}
THREADS=${THREADS:-2}
CONFIG=${CONFIG:-tests/golden/fixtures/configs/OLMo-2-0425-1B/config.json}
PREFILL=${PREFILL:-128,512,2048}
PREFILL_REPS=${PREFILL_REPS:-3}
DECODE_PROMPT=${DECODE_PROMPT:-128}
DECODE_STEPS=${DECODE_STEPS:-64}
BANDWIDTH_MIB=${BANDWIDTH_MIB:-1024}
WEIGHTS=${WEIGHTS-int8,int4}
LLAMA_CPP=${LLAMA_CPP:-1}
PYTORCH=${PYTORCH:-1}
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
for w in ${WEIGHTS//,/ }; do
  case $w in int8 | int4) ;; *) echo "compare_pytorch: WEIGHTS: unknown format '$w' (int8, int4)" >&2; exit 2 ;; esac
done
case $LLAMA_CPP in 0 | 1) ;; *) echo "compare_pytorch: LLAMA_CPP: expected 0 or 1, got '$LLAMA_CPP'" >&2; exit 2 ;; esac
case $PYTORCH in 0 | 1) ;; *) echo "compare_pytorch: PYTORCH: expected 0 or 1, got '$PYTORCH'" >&2; exit 2 ;; esac
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

# llama.cpp's programs (built once; bench/llama_cpp_setup.sh).
llama_bin=
if [ "$LLAMA_CPP" = 1 ] && { has "$ROWS" prefill || has "$ROWS" decode; }; then
  llama_bin=$(bench/llama_cpp_setup.sh build) || { echo "compare_pytorch: llama.cpp: the build failed (LLAMA_CPP=0 skips it)" >&2; exit 1; }
fi
# Our quantized rows need olmo2_inference_bench --weights.
ours_weights=
if [ -n "$WEIGHTS" ] && has "$ROWS" decode; then
  if "$BUILD/bench/olmo2_inference_bench" --help 2>&1 | grep -q -- '--weights'; then
    ours_weights=$WEIGHTS
  else
    echo "compare_pytorch: ours int8/int4 rows skipped: olmo2_inference_bench has no --weights option in this build" >&2
  fi
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
    "flags: $(grep -m1 -o -w -E 'avx2|fma|avx512f|avx512_bf16|avx512_vnni|avx_vnni|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); threads $THREADS; rounds $ROUNDS"
} | tee "$logs/machine.txt" >&2
if [ "$PYTORCH" = 1 ]; then
  run torch 0 torch-info "$PY" bench/pytorch_reference.py info --threads "$THREADS"
fi

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
# llama.cpp's GGUF files of the same checkpoint: bf16 (as stored), Q8_0, Q4_K_M.
gguf=
if [ -n "$llama_bin" ] && [ -n "$ckpt" ]; then
  [ -f "$ckpt/tokenizer.json" ] || cp "$TOKENIZER" "$ckpt/tokenizer.json" 2>/dev/null ||
    { echo "compare_pytorch: llama.cpp needs the tokenizer ($TOKENIZER) beside the checkpoint" >&2; exit 1; }
  gguf=$(bench/llama_cpp_setup.sh gguf "$ckpt" "$PY" "$WORK/gguf-$key") || exit 1
fi
# llama SIDE-ROUND NAME FORMAT PRECISION PREFILL STEPS: llama-bench on $gguf/FORMAT.gguf.
llama() {
  run llama "$1" "$2" "$PY" bench/llama_cpp_rows.py --bench "$llama_bin/llama-bench" --model "$gguf/$3.gguf" \
    --format "$3" --precision "$4" --threads "$THREADS" --prefill "$5" --reps "$PREFILL_REPS" \
    --decode-prompt "$DECODE_PROMPT" --decode-steps "$6"
}

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
      if [ "$PYTORCH" = 1 ]; then
        run torch "$r" "infer-$p-torch-$r" "$PY" bench/pytorch_reference.py infer --model "$ckpt" --precision "$p" \
          --threads "$THREADS" --prefill "$prefill_arg" --reps "$PREFILL_REPS" --warmup 1 \
          --decode-prompt "$DECODE_PROMPT" --decode-steps "$decode_steps" --attn "$TORCH_ATTN"
      fi
      if [ -n "$gguf" ] && [ "$p" = bf16 ]; then
        llama "$r" "infer-bf16-llama-$r" bf16 bf16 "$prefill_arg" "$decode_steps"
      fi
    fi
    for tc in "${train_configs[@]}"; do
      label=${tc%%=*} cfg=${tc#*=}
      run ours "$r" "train-$label-$p-ours-$r" "$BUILD/bench/olmo2_train_bench" --sizes "$cfg" --precision "$p" \
        --threads "$THREADS" --steps "$TRAIN_STEPS" --batch "$TRAIN_BATCH" --seq-len "$TRAIN_SEQ"
      if [ "$PYTORCH" = 1 ]; then
        run torch "$r" "train-$label-$p-torch-$r" "$PY" bench/pytorch_reference.py train --config "$cfg" \
          --precision "$p" --threads "$THREADS" --steps "$TRAIN_STEPS" --batch "$TRAIN_BATCH" --seq-len "$TRAIN_SEQ" \
          --attn "$TORCH_ATTN"
      fi
    done
    label=
  done
  # Quantized weights, decode only: ours --weights then llama.cpp's Q8_0 / Q4_K_M.
  if [ -n "$ckpt" ] && [ "$decode_steps" -gt 0 ]; then
    for w in ${WEIGHTS//,/ }; do
      if has "$ours_weights" "$w"; then
        run ours "$r" "infer-$w-ours-$r" "$BUILD/bench/olmo2_inference_bench" --model "$ckpt" --weights "$w" \
          --threads "$THREADS" --prefill '' --decode-prompt "$DECODE_PROMPT" --decode-steps "$decode_steps" \
          --bandwidth-mib "$BANDWIDTH_MIB" "${serve_flag[@]}"
      fi
      if [ -n "$gguf" ]; then
        q=q8_0
        if [ "$w" = int4 ]; then q=q4_k_m; fi
        llama "$r" "infer-$w-llama-$r" "$q" "$w" '' "$decode_steps"
      fi
    done
  fi
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$logs/machine.txt" >&2

# 5. The table.
"$PY" bench/compare_table.py "$results" "$logs/machine.txt"
echo "results: $results" >&2
