#!/usr/bin/env bash
# The one prepared command for a machine with an NVIDIA GPU (docs/guides/gpus.md;
# docs/architecture.md §10): build in Release for this GPU, run every test labelled gpu
# (each op against the CPU op, the golden fixtures through --device cuda, training on the
# GPU against the CPU's losses, NCCL and the host-staged path), then the GPU benchmarks,
# and print one summary. Planned to finish within 8 minutes on 16 cores and one H200.
#
#   scripts/gpu_check.sh [BUILD_DIR]      (default build-gpu; OUT=dir keeps the logs)
#
# It needs what scripts/setup.sh installs (the CPU build's libraries) plus the CUDA
# toolkit with NCCL. Exit status: 0 when every gpu test passed, 1 otherwise, 2 when there
# is no GPU or the build failed.
set -u -o pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-gpu}
START=$(date +%s)
declare -a SUMMARY=()
note() { SUMMARY+=("$1"); echo "== $1"; }
elapsed() { echo $(( $(date +%s) - START ))s; }

if ! command -v nvidia-smi >/dev/null; then
  echo "gpu_check: no NVIDIA driver here (nvidia-smi not found); nothing to check" >&2
  exit 2
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu_check: no NVIDIA GPU here (nvidia-smi -L failed); nothing to check" >&2
  exit 2
fi
LOGS=${OUT:-$(mktemp -d)}
mkdir -p "$LOGS"
nvidia-smi -L
export PATH=/usr/local/cuda/bin:$PATH
# This GPU's architecture only (e.g. 90 for an H100/H200): a quarter of the compile time
# of the default 80;90.
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
JOBS=$(nproc)

# ---- build ---------------------------------------------------------------------------
if ! cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$ARCH" \
      >"$LOGS/configure.log" 2>&1; then
  tail -30 "$LOGS/configure.log"; echo "gpu_check: configure failed (log $LOGS/configure.log)"; exit 2
fi
grep -q "CUDA backend ON" "$LOGS/configure.log" || { echo "gpu_check: CMake did not enable CUDA"; exit 2; }
if ! cmake --build "$BUILD" -j"$JOBS" >"$LOGS/build.log" 2>&1; then
  grep -E "error|Error" "$LOGS/build.log" | head -40; echo "gpu_check: build failed (log $LOGS/build.log)"; exit 2
fi
note "build: Release, sm_$ARCH, $JOBS jobs, done at $(elapsed)"

# ---- the gpu label -----------------------------------------------------------------------
STATUS=0
ctest --test-dir "$BUILD" -L gpu -j4 --output-on-failure --timeout 300 >"$LOGS/ctest_gpu.log" 2>&1 || STATUS=1
grep -E "tests passed|tests failed|Skipped|\*\*\*Failed|Not Run|Timeout" "$LOGS/ctest_gpu.log" | tail -40
note "gpu tests: $(grep -E 'tests passed' "$LOGS/ctest_gpu.log" | tail -1) at $(elapsed)"
if grep -q "(Skipped)" "$LOGS/ctest_gpu.log"; then
  note "gpu tests skipped on a GPU machine (a failure of the check): $(grep -c '(Skipped)' "$LOGS/ctest_gpu.log")"
  STATUS=1
fi

# ---- benchmarks (figures, not pass/fail) --------------------------------------------------
"$BUILD/bench/olmo2_gpu_peaks" | tee "$LOGS/gpu_peaks.log"
PEAK=$(grep -o '"figure":"bf16_peak_tflops","value":[0-9.]*' "$LOGS/gpu_peaks.log" | grep -o '[0-9.]*$')
BW=$(grep -o '"figure":"copy_read_gbps","value":[0-9.]*' "$LOGS/gpu_peaks.log" | grep -o '[0-9.]*$')
note "bf16 product peak ${PEAK:-?} TFLOP/s; device copy ${BW:-?} GB/s read"
if [[ -x scripts/gpu_bench.sh ]]; then
  scripts/gpu_bench.sh "$BUILD" "${PEAK:-0}" "${BW:-0}" 2>&1 | tee "$LOGS/gpu_bench.log"
  while IFS= read -r line; do note "$line"; done < <(grep '^figure: ' "$LOGS/gpu_bench.log" | sed 's/^figure: //')
fi

echo
echo "==== gpu_check summary ($(elapsed), logs in $LOGS) ===="
printf '  %s\n' "${SUMMARY[@]}"
[[ $STATUS == 0 ]] && echo "  RESULT: every gpu test passed" || echo "  RESULT: gpu tests FAILED (see $LOGS/ctest_gpu.log)"
exit $STATUS
